"""jobq.web -- the jobq dashboard, run as "jobq web", "jobq-web" or "python3 -m jobq.web".

Serves every queue, job, dead letter, schedule and worker of one database
to a browser, with the operations a person needs (retry, cancel, retry a
kind, edit a payload, hand a stuck batch back, pause, run a schedule now).

It connects with the usual libpq environment and acts as that PostgreSQL
role: jobq's per-queue capabilities decide what is seen (the views show a
role only its queues) and what may be done (every action is a jobq SQL
function, which checks the capability itself).  The dashboard adds no
privilege of its own; it only hides the buttons a role could not use.

Safety, in short: binds 127.0.0.1 unless told otherwise, and then needs a
password (JOBQ_WEB_PASSWORD or --password-file); every action is a POST
with a per-session CSRF token (and a same-origin check); every value from
the database is HTML-escaped (by the templates); a Content-Security-Policy
allows scripts and styles from the server's own /static/ only (no inline
script), and images (the SVG charts) from itself only.

Besides psycopg 3 and Python's standard library it needs waitress (the
WSGI server) and jinja2 (the templates): Debian's python3-psycopg,
python3-waitress and python3-jinja2, or pip install "jobq[web]".  Without
one of them it says which to install, in one line.

The modules, by concern:
  cli       the command line and the check of the dependencies
  server    HTTP: the WSGI application (Handler), the process (serve)
  pages     the pages (GET)
  actions   the operations (POST /action)
  auth      sessions, CSRF tokens, the login throttle
  db        the connection pool and the answers shared between requests
  queries   the shared statements and the paging of job lists
  render    the templates (templates/), the formats and SVG layouts
The static files (static/) are the one style sheet and the one script.
"""

from .cli import main

__all__ = ["main"]
