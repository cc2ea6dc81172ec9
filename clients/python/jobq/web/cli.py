"""jobq/web/cli.py -- the dashboard's command line: options, dependencies, then serve.

main() is the entry point of "python3 -m jobq.web", of the console script
"jobq-web" and of "jobq web" (bin/jobq).  It parses the options first (so
--help works whatever is installed), then imports what the dashboard
needs; a module that cannot be imported is said in one line naming the
Debian package (and the pip extra) that brings it, exit status 3.
"""

import argparse
import importlib
import sys

# (module imported, name said, Debian package)
DEPENDENCIES = (("psycopg", "psycopg", "python3-psycopg"),
                ("jinja2", "jinja2", "python3-jinja2"),
                ("waitress.server", "waitress", "python3-waitress"))


def parser():
    """The options of jobq web."""
    p = argparse.ArgumentParser(prog="jobq web", description="the jobq dashboard")
    p.add_argument("--port", type=int, default=8080, help="TCP port (0: any free one)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    p.add_argument("--read-only", action="store_true", help="show, offer no actions")
    p.add_argument("--password-file", help="file whose first line is the password")
    return p


def missing():
    """The dependencies that cannot be imported, as [(name, Debian package)]."""
    out = []
    for module, name, package in DEPENDENCIES:
        try:
            importlib.import_module(module)
        except ImportError:
            out.append((name, package))
    return out


def main(argv=None):
    """Run the dashboard with the options in argv (default: sys.argv); the exit status."""
    args = parser().parse_args(argv)
    gone = missing()
    if gone:
        names = ", ".join(n for n, _ in gone)
        print(f"jobq web: Python module{'s' if len(gone) > 1 else ''} {names} "
              f"{'are' if len(gone) > 1 else 'is'} missing: "
              f"apt-get install {' '.join(p for _, p in gone)} (or pip install 'jobq[web]')",
              file=sys.stderr)
        return 3
    from .server import serve
    return serve(args)
