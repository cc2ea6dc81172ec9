"""jobq/web/server.py -- the dashboard's HTTP side: the WSGI application and its server.

HTTP is waitress's (a WSGI server, Debian's python3-waitress): it parses
requests, refuses malformed ones and buffers bodies before a thread sees
them.  Handler answers one request: the Host check, the session and its
CSRF token, the login, the static files, then a page (pages.Pages) or an
action (actions.Actions).  Every answer carries a Content-Security-Policy
that allows scripts and styles from /static/ only (no inline script), and
images (the SVG charts) from the server itself only.

serve() is the process: the shared state (App), the listening socket,
waitress's threads, until SIGTERM or SIGINT.
"""

import hmac
import http.cookies
import ipaddress
import os
import re
import signal
import socket
import sys
import urllib.parse

import psycopg
import waitress.server

from .actions import CONFIRM, Actions
from .auth import Sessions, SessionView, Throttle
from .db import GROUPS_TTL, LIVE_TTL, STATS_TTL, Cached, Db, Minutes, Pool, db_message
from .pages import Pages
from .queries import Q_DEAD_GROUPS, Q_QUEUES, Q_RUNNING, Q_STATS
from .render import HERE, NAV, TEMPLATES, Refused, digits

STATIC = os.path.join(HERE, "static")
LIVE_INTERVAL = 5000    # ms between a page's refreshes (static/jobq.js)
MAX_BODY = 1 << 20      # bytes of a request body (a form); more is a 413
THREADS = 8             # requests answered at once (sharing the pool's 4 connections)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; "
       "img-src 'self'; connect-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


class App:
    """Settings and shared state of one "jobq web" process."""

    def __init__(self, args, password):
        self.read_only = args.read_only
        self.password = password
        self.pool = Pool()
        self.queues = Cached(self.pool, Q_QUEUES, LIVE_TTL)
        self.running = Cached(self.pool, Q_RUNNING, LIVE_TTL)
        self.minutes = Minutes(self.pool, LIVE_TTL)
        self.stats = Cached(self.pool, Q_STATS, STATS_TTL)
        # the queues the role sees, so that the groups read only their part
        # of the index of failed jobs, not every failed job to filter it
        self.dead_groups = Cached(self.pool, Q_DEAD_GROUPS, GROUPS_TTL,
                                  lambda: ([q["queue"] for q in self.queues.get()],))
        # named for the port once it is known: a browser sends a host's
        # cookies to each of its ports, and two dashboards on one host (one
        # per role) must not take each other's sessions
        self.cookie = "jobq_session"
        self.sessions = Sessions()
        self.throttle = Throttle()
        self.hosts = set()
        with Db(self.pool) as db:
            r = db.one("SELECT current_user AS role, current_database() AS db")
            self.role, self.database = r["role"], r["db"]
            self.has_service = db.value("SELECT pg_catalog.to_regclass('jobq.service') IS NOT NULL")
            self.has_app_workers = db.value("SELECT pg_catalog.to_regclass('jobq.app_workers') IS NOT NULL")


STATUS_TEXT = {200: "OK", 303: "See Other", 400: "Bad Request", 403: "Forbidden",
               404: "Not Found", 405: "Method Not Allowed", 413: "Content Too Large",
               415: "Unsupported Media Type", 421: "Misdirected Request",
               429: "Too Many Requests", 500: "Internal Server Error"}


class Headers:
    """A request's headers, read from the WSGI environment."""

    def __init__(self, environ):
        self.environ = environ

    def get(self, name, default=None):
        key = name.upper().replace("-", "_")
        if key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            key = "HTTP_" + key
        return self.environ.get(key, default)


class Handler(Pages, Actions):
    """One request: waitress parses HTTP, this answers it (a WSGI application).

    The HTTP itself (request lines, headers, Content-Length, chunked bodies,
    keep-alive) is waitress's: a malformed or negative Content-Length is a
    400 and a Transfer-Encoding other than chunked a 501 before a thread is
    involved, a chunked body is decoded as the body (never read as a next
    request), and a body is buffered whole, up to MAX_BODY, before this runs.
    """
    app = None  # set in serve()

    def __init__(self, environ):
        self.environ = environ
        self.headers = Headers(environ)
        self.command = environ.get("REQUEST_METHOD", "GET")
        self.path = environ.get("PATH_INFO", "/") or "/"
        self.query = environ.get("QUERY_STRING", "")
        self.client = environ.get("REMOTE_ADDR", "")
        self.response = None

    @classmethod
    def wsgi(cls, environ, start_response):
        """The WSGI entry point."""
        h = cls(environ)
        if h.command in ("GET", "HEAD"):
            h.do_GET()
        elif h.command == "POST":
            h.do_POST()
        else:
            h.send(405, h.error_page(405, "GET, HEAD and POST only"), extra=[("Allow", "GET, HEAD, POST")])
        status, headers, data = h.response
        # the path as a Python literal: a decoded %0A cannot forge a log line
        sys.stderr.write("jobq web: %s %s %s %d\n" % (h.client, h.command, ascii(h.path[:200]), status))
        start_response(f"{status} {STATUS_TEXT.get(status, 'Unknown')}", headers)
        return [b"" if h.command == "HEAD" else data]

    # -- plumbing --------------------------------------------------------

    def send(self, status, body, ctype="text/html; charset=utf-8", extra=()):
        data = body.encode("utf-8") if isinstance(body, str) else body
        headers = [("Content-Type", ctype), ("Content-Length", str(len(data))),
                   ("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
                   ("X-Frame-Options", "DENY"), ("Referrer-Policy", "same-origin"),
                   ("Cross-Origin-Opener-Policy", "same-origin"), ("Cache-Control", "no-store")]
        headers += list(extra)
        self.response = (status, headers, data)

    def redirect(self, where, extra=()):
        self.send(303, "", extra=[("Location", where)] + list(extra))

    def session(self):
        """The request's session; a new id (and its cookie) if none."""
        sid = None
        raw = self.headers.get("Cookie")
        if raw:
            try:
                c = http.cookies.SimpleCookie(raw)
                if self.app.cookie in c:
                    sid = c[self.app.cookie].value
            except http.cookies.CookieError:
                pass
        self.new_cookie = None
        if not self.app.sessions.valid(sid):
            sid = self.app.sessions.new()
            self.new_cookie = ("Set-Cookie",
                               f"{self.app.cookie}={sid}; Path=/; HttpOnly; SameSite=Strict")
        return SessionView(self.app.sessions, sid)

    def cookies(self):
        return [self.new_cookie] if self.new_cookie else []

    def check_host(self):
        """Refuse a Host header that is not this server (DNS rebinding)."""
        host = self.headers.get("Host", "")
        if self.app.hosts and host not in self.app.hosts:
            raise Refused(421, "unexpected Host header")

    def form(self):
        # waitress has checked Content-Length (digits only) and read the
        # whole body, at most MAX_BODY bytes
        n = self.headers.get("Content-Length") or "0"
        if not digits(n):
            raise Refused(400, "bad Content-Length")
        n = int(n)
        if n > MAX_BODY:
            raise Refused(413, "request too large")
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
        raw = self.environ["wsgi.input"].read(n).decode("utf-8", "replace")
        if ctype != "application/x-www-form-urlencoded":
            raise Refused(415, "forms only")
        return urllib.parse.parse_qs(raw, keep_blank_values=True)

    def same_origin(self):
        origin = self.headers.get("Origin")
        if origin is None or origin == "null":
            return origin is None
        u = urllib.parse.urlsplit(origin)
        return u.netloc == self.headers.get("Host")

    # -- dispatch --------------------------------------------------------

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        try:
            self.check_host()
            path = self.path
            params = {k: v[-1] for k, v in urllib.parse.parse_qs(self.query).items()}
            if path.startswith("/static/"):
                return self.static(path[len("/static/"):])
            if path == "/favicon.ico":
                raise Refused(404, "no favicon")
            s = self.session()
            if self.app.password is not None and not s.authed:
                if path == "/login":
                    return self.send(200, self.login_page(s, ""), extra=self.cookies())
                return self.redirect("/login", self.cookies())
            if path == "/login":
                return self.redirect("/")
            routes = {"/": self.page_overview, "/jobs": self.page_jobs,
                      "/dead": self.page_dead, "/schedules": self.page_schedules,
                      "/workers": self.page_workers, "/workflows": self.page_workflows,
                      "/api/overview": self.api_overview,
                      "/chart.svg": self.chart}
            if path in routes:
                return routes[path](s, params)
            if path.startswith("/job/") and digits(path[5:]):
                return self.page_job(s, int(path[5:]))
            if path.startswith("/workflow/") and digits(path[10:]):
                return self.page_workflow(s, int(path[10:]))
            raise Refused(404, "no such page")
        except Refused as r:
            self.send(r.status, self.error_page(r.status, str(r)))
        except psycopg.Error as err:
            self.send(500, self.error_page(500, "the database said: " + db_message(err)))

    def do_POST(self):
        try:
            self.check_host()
            path = self.path
            s = self.session()
            f = self.form()
            token = (f.get("csrf") or [""])[-1]
            # bytes: compare_digest refuses a str that is not ASCII
            token_ok = hmac.compare_digest(token.encode(), s.csrf.encode())
            if self.new_cookie or not token_ok or not self.same_origin():
                raise Refused(403, "refused: this form's CSRF token is missing or wrong (reload the page)")
            if path == "/login":
                return self.login(s, f)
            if path == "/logout":
                self.app.sessions.drop(s.sid)
                return self.redirect("/login" if self.app.password is not None else "/")
            if self.app.password is not None and not s.authed:
                raise Refused(403, "log in first")
            if path != "/action":
                raise Refused(404, "no such action")
            if self.app.read_only:
                raise Refused(403, "this dashboard is read-only")
            # where to go afterwards: a path of this site only, printable
            # ASCII only (no header can be smuggled into Location)
            back = (f.get("back") or ["/"])[-1]
            if not re.fullmatch(r"/[\x21-\x7e]*", back) or back.startswith("//") or "\\" in back:
                back = "/"
            op = (f.get("op") or [""])[-1]
            if op in CONFIRM and (f.get("confirmed") or [""])[-1] != "yes":
                return self.confirm_page(s, f, op, back)
            self.action(s, f)
            for c in (self.app.queues, self.app.running, self.app.stats, self.app.dead_groups):
                c.forget()
            return self.redirect(back)
        except Refused as r:
            self.send(r.status, self.error_page(r.status, str(r)))

    def static(self, name):
        types = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".png": "image/png"}
        ext = os.path.splitext(name)[1]
        if "/" in name or name.startswith(".") or ext not in types:
            raise Refused(404, "no such file")
        try:
            with open(os.path.join(STATIC, name), "rb") as fh:
                data = fh.read()
        except OSError:
            raise Refused(404, "no such file")
        self.send(200, data, types[ext])

    def render(self, template, title, here, s, status=200, live=False, **ctx):
        """Send a page of templates/ (autoescaped) in the layout of base.html."""
        page = TEMPLATES.get_template(template).render(
            app=self.app, s=s, title=title, here=here, nav=NAV, live=live,
            live_interval=LIVE_INTERVAL, flashes=s.pop_flash(), **ctx)
        self.send(status, page, extra=self.cookies())

    def error_page(self, status, msg):
        return TEMPLATES.get_template("error.html").render(status=status, msg=msg)

    # -- login -----------------------------------------------------------

    def login_page(self, s, msg):
        return TEMPLATES.get_template("login.html").render(s=s, msg=msg)

    def login(self, s, f):
        wait = self.app.throttle.attempt(self.client)
        if wait is not None:
            return self.send(429, self.login_page(s, f"too many wrong passwords: try again in {wait} s"),
                             extra=[("Retry-After", str(wait))])
        given = (f.get("password") or [""])[-1].encode()
        if hmac.compare_digest(given, self.app.password.encode()):
            self.app.throttle.right(self.client)
            # a fresh session id after login (no session fixation)
            sid = self.app.sessions.login()
            return self.redirect("/", [("Set-Cookie",
                                        f"{self.app.cookie}={sid}; Path=/; HttpOnly; SameSite=Strict")])
        return self.send(403, self.login_page(s, "wrong password"))

    def may(self, db, queue, capability):
        """Does this role hold the capability (so the button may be shown)?"""
        if self.app.read_only:
            return False
        try:
            return bool(db.value("SELECT jobq.may(%s::text, %s::text)", (queue, capability)))
        except psycopg.Error:
            return True   # cannot tell: show it, the function decides


def loopback(host):
    """Is host a loopback address (or localhost)?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(args):
    """Serve the dashboard with the options of cli.main until SIGTERM or SIGINT; the exit status."""
    password = os.environ.get("JOBQ_WEB_PASSWORD") or None
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as fh:
                password = fh.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as x:
            print(f"jobq web: cannot read --password-file: {x}", file=sys.stderr)
            return 2
        if not password:
            # a password was asked for: an empty one must not open the dashboard
            print(f"jobq web: --password-file {args.password_file}: its first line is empty; "
                  "write the password there", file=sys.stderr)
            return 2
    if not loopback(args.bind) and password is None:
        print(f"jobq web: --bind {args.bind} is not a loopback address: set JOBQ_WEB_PASSWORD "
              "or give --password-file", file=sys.stderr)
        return 2
    try:
        app = App(args, password)
    except psycopg.Error as x:
        print(f"jobq web: cannot connect: {db_message(x)}", file=sys.stderr)
        return 3
    Handler.app = app
    family_v6 = ":" in args.bind
    sock = socket.socket(socket.AF_INET6 if family_v6 else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1" if args.bind == "localhost" else args.bind, args.port))
    except OSError as x:
        print(f"jobq web: cannot listen on {args.bind}:{args.port}: {x}", file=sys.stderr)
        return 3
    port = sock.getsockname()[1]
    app.cookie = f"jobq_session_{port}"
    # waitress: bodies buffered whole before a thread sees them, at most
    # MAX_BODY; an idle or stalled connection closed after channel_timeout;
    # no proxy header trusted
    srv = waitress.server.create_server(
        Handler.wsgi, sockets=[sock], threads=THREADS, ident="jobq-web",
        max_request_body_size=MAX_BODY, channel_timeout=60,
        clear_untrusted_proxy_headers=True, expose_tracebacks=False)
    hostpart = f"[{args.bind}]" if family_v6 else args.bind
    if loopback(args.bind):
        app.hosts = {f"{hostpart}:{port}", f"localhost:{port}"}
    url = f"http://{hostpart}:{port}/"
    print(f"jobq web: serving {url} as role {app.role} on database {app.database}"
          + (" (read-only)" if args.read_only else ""), flush=True)

    def stop(signum, frame):
        raise SystemExit(0)     # waitress's loop ends and its threads stop
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    srv.run()
    return 0
