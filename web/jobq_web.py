#!/usr/bin/python3
"""web/jobq_web.py -- jobq web: the dashboard, run as "jobq web".

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
the database is HTML-escaped; a Content-Security-Policy allows scripts and
styles from the server's own /static/ only (no inline script), and images
(the SVG charts) from itself only.

Python's standard library (http.server) and psycopg 3, nothing else.
"""

import argparse
import datetime
import hmac
import html
import http.cookies
import http.server
import ipaddress
import json
import os
import queue as queuelib
import re
import secrets
import signal
import socket
import sys
import threading
import time
import urllib.parse

import psycopg
import psycopg.errors

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC = os.path.join(HERE, "static")
PAGE_SIZE = 50
LIVE_TTL = 4.0          # seconds the live (indexed) answers are reused
STATS_TTL = 30.0        # seconds jobq.queue_stats (counts of pending and dead jobs) is reused
GROUPS_TTL = 60.0       # seconds the dead letter's groups (every failed job) are reused
REREAD = 2              # minutes of the chart counted again at every refresh (late commits)
KEEP = 1440             # minutes of the chart kept (the day)
LIVE_INTERVAL = 5000    # ms between a page's refreshes (static/jobq.js)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; "
       "img-src 'self'; connect-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


def e(value):
    """HTML-escape any value (None is empty)."""
    if value is None:
        return ""
    return html.escape(str(value), quote=True)


def ts(value):
    """A timestamp to the second, as text."""
    if value is None:
        return ""
    if isinstance(value, datetime.datetime):
        return value.isoformat(" ", "seconds")
    return str(value)


def ago(value):
    """An interval, rounded to the second."""
    if value is None:
        return ""
    if isinstance(value, datetime.timedelta):
        return str(datetime.timedelta(seconds=int(value.total_seconds())))
    return str(value)


def pretty(value):
    """A jsonb value, indented."""
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def qs(**params):
    """A query string from the parameters that are set."""
    return urllib.parse.urlencode({k: v for k, v in params.items()
                                   if v not in (None, "")})


# ---------------------------------------------------------------------------
# database


class Pool:
    """A few autocommit connections, made from the libpq environment."""

    def __init__(self, size=4):
        self.idle = queuelib.LifoQueue()
        self.size = size
        self.lock = threading.Lock()
        self.made = 0

    def connect(self):
        # no prepared statements: a generic plan of a job_id probe could
        # be a sequential scan (and a pooler in transaction mode keeps none)
        conn = psycopg.connect("", autocommit=True, prepare_threshold=None,
                               application_name="jobq web")
        conn.execute("SET statement_timeout = '30s'")
        return conn

    def get(self):
        try:
            return self.idle.get_nowait()
        except queuelib.Empty:
            pass
        with self.lock:
            if self.made < self.size:
                self.made += 1
                try:
                    return self.connect()
                except Exception:
                    self.made -= 1
                    raise
        return self.idle.get(timeout=30)

    def put(self, conn):
        if conn.closed or conn.info.transaction_status != 0:
            try:
                conn.close()
            except Exception:
                pass
            with self.lock:
                self.made -= 1
            return
        self.idle.put(conn)


class Db:
    """One request's use of a pooled connection."""

    def __init__(self, pool):
        self.pool = pool
        self.conn = None

    def __enter__(self):
        self.conn = self.pool.get()
        return self

    def __exit__(self, *exc):
        if self.conn is not None:
            if exc[0] is not None and not self.conn.closed:
                try:
                    self.conn.rollback()
                except Exception:
                    self.conn.close()
            self.pool.put(self.conn)
        return False

    def rows(self, sql, params=()):
        """Every row, as dicts."""
        cur = self.conn.execute(sql, params)
        if cur.description is None:
            return []
        names = [d.name for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]

    def one(self, sql, params=()):
        """The first row, or None."""
        r = self.rows(sql, params)
        return r[0] if r else None

    def value(self, sql, params=()):
        """The first column of the first row, or None."""
        cur = self.conn.execute(sql, params)
        r = cur.fetchone()
        return r[0] if r else None


# ---------------------------------------------------------------------------
# the queries behind the pages (every one is listed in README "The web dashboard")

# The overview's live refresh (every LIVE_INTERVAL, shared by every viewer
# for LIVE_TTL): three statements, each bounded by something other than the
# number of jobs kept: the queues, the running jobs (the partial index on
# lease_expires_at), the jobs finished in the last few minutes (the index on
# finished_at; class Minutes keeps the minutes counted before).  The other
# numbers come from the columns of jobq.queue_stats that count through
# indexes (pending from jobq.ready and jobq.scheduled, dead from the index
# of failed jobs), reused for STATS_TTL.
Q_QUEUES = """
SELECT q.queue, q.paused, q.breaker_state FROM jobq.queues q ORDER BY q.queue"""

Q_RUNNING = """
SELECT j.queue, pg_catalog.count(*) AS running
  FROM jobq.jobs j WHERE j.lease_expires_at IS NOT NULL GROUP BY j.queue"""

Q_MINUTE = "SELECT pg_catalog.date_trunc('minute', pg_catalog.now())"

Q_FINISHED = """
SELECT j.queue, pg_catalog.date_trunc('minute', j.finished_at) AS m,
       pg_catalog.count(*) FILTER (WHERE j.status = 'completed') AS completed,
       pg_catalog.count(*) FILTER (WHERE j.status = 'failed') AS failed
  FROM jobq.jobs j
 WHERE j.finished_at >= %s::timestamptz AND j.finished_at < %s::timestamptz
 GROUP BY 1, 2"""

# no completed or cancelled column: those would count every kept job
Q_STATS = """
SELECT s.queue, s.ready, s.delayed, s.failed, s.oldest_pending_age
  FROM jobq.queue_stats s"""

Q_DEAD_GROUPS = """
SELECT d.queue, d.kind,
       pg_catalog.left(pg_catalog.split_part(COALESCE(d.last_error, ''), E'\\n', 1), 200) AS error,
       pg_catalog.count(*) AS jobs, pg_catalog.max(d.finished_at) AS newest,
       pg_catalog.max(d.job_id) AS newest_job
  FROM jobq.dead_letter d
 WHERE d.queue = ANY (%s::text[])
 GROUP BY 1, 2, 3 ORDER BY jobs DESC, newest DESC LIMIT 100"""


Q_PROBE = "SELECT j.job_id FROM jobq.jobs j WHERE j.job_id >= %s::bigint LIMIT 1"


def top_id(db):
    """The newest job id the role can see (None: none), without a scan.

    jobq.jobs is a security-barrier view, so ORDER BY job_id DESC LIMIT 1
    (or max()) over it sorts every visible row: the ordering cannot reach
    the primary key inside the view.  A comparison on job_id (leakproof)
    does: probes "is there a job at or above x" gallop up the powers of two,
    then a binary search closes in; about 2 x log2(top) primary-key probes.
    """
    def probe(x):
        return db.value(Q_PROBE, (x,)) is not None
    if not probe(1):
        return None
    lo = 1
    while lo < (1 << 61) and probe(lo * 2):
        lo *= 2
    hi = lo * 2
    while hi - lo > 1:
        m = (lo + hi) // 2
        if probe(m):
            lo = m
        else:
            hi = m
    return lo


WINDOW_FIRST = 1024       # ids in the first window of a page
WINDOW_MAX = 16384        # ids in the largest window
SPAN_MAX = 65536          # ids one page searches at most


def keyset_page(db, select, where, args, before, limit=PAGE_SIZE, select_args=()):
    """One page of "select" (over alias j), newest job id first, below "before".

    Keyset paging in windows of job ids: each window is a range scan of the
    primary key (job_id < hi AND job_id >= lo) sorted in memory, so a page
    reads at most SPAN_MAX ids' rows, however many jobs there are.  Returns
    (rows, next_before): next_before continues below the page, or None at
    the oldest job.  A page that searched SPAN_MAX ids without filling up
    ends early with a next_before of where it stopped.
    """
    if before is None:
        top = top_id(db)
        if top is None:
            return [], None
        hi = top + 1
    else:
        hi = before
    rows, width, span = [], WINDOW_FIRST, 0
    while len(rows) <= limit and hi > 1 and span < SPAN_MAX:
        lo = max(hi - width, 1)
        cond = where + ["j.job_id < %s::bigint", "j.job_id >= %s::bigint"]
        rows += db.rows(f"{select} WHERE {' AND '.join(cond)} ORDER BY j.job_id DESC"
                        f" LIMIT {limit + 1 - len(rows)}", list(select_args) + args + [hi, lo])
        span += hi - lo
        hi = lo
        width = min(width * 2, WINDOW_MAX)
    if len(rows) > limit:
        return rows[:limit], rows[limit - 1]["job_id"]
    return rows, (hi if hi > 1 else None)


class Cached:
    """A query's answer, reused for ttl seconds by every request.

    params, when given, is called for the query's parameters at each run.
    """

    def __init__(self, pool, sql, ttl, params=None):
        self.pool, self.sql, self.ttl, self.params = pool, sql, ttl, params
        self.lock = threading.Lock()
        self.at = None
        self.rows = []

    def get(self):
        with self.lock:
            if self.at is None or time.monotonic() - self.at > self.ttl:
                args = self.params() if self.params else ()
                with Db(self.pool) as db:
                    self.rows = db.rows(self.sql, args)
                self.at = time.monotonic()
                self.when = datetime.datetime.now(datetime.timezone.utc)
            return self.rows

    def forget(self):
        with self.lock:
            self.at = None


class Minutes:
    """Jobs completed and failed per queue and minute, each minute counted once.

    The process keeps the minutes it has counted, up to a day.  A refresh
    (at most every ttl seconds) counts again only the minutes since the
    last one, from REREAD minutes before it: a job's finish time is set
    before its transaction commits, so the last minutes can still grow.  A
    range asked for the first time (the hour at start, the day when its
    chart is first shown) counts its older minutes once.  So a refresh
    reads the jobs finished in the last few minutes, and only a process's
    first day chart reads the day's jobs.  Kept minutes do not change:
    a job whose finishing transaction commits more than REREAD minutes
    late, or one pruned or retried later, is counted as it was seen.
    """

    def __init__(self, pool, ttl):
        self.pool, self.ttl = pool, ttl
        self.lock = threading.Lock()
        self.counts = {}     # minute -> {queue: (completed, failed)}
        self.since = None    # every minute from here to upto is counted
        self.upto = None     # the database's minute at the last refresh
        self.at = None       # time.monotonic() of the last refresh

    def count(self, db, lo, hi):
        """Count the minutes [lo, hi) into self.counts, replacing what was there."""
        rows = db.rows(Q_FINISHED, (lo, hi))
        for m in [m for m in self.counts if lo <= m < hi]:
            del self.counts[m]
        for r in rows:
            self.counts.setdefault(r["m"], {})[r["queue"]] = (r["completed"], r["failed"])

    def get(self, minutes):
        """Rows (queue, m, completed, failed) of the last minutes minutes."""
        with self.lock:
            stale = self.at is None or time.monotonic() - self.at > self.ttl
            older = self.since is None or self.since > self.upto - datetime.timedelta(minutes=minutes)
            if stale or older:
                with Db(self.pool) as db:
                    now = db.value(Q_MINUTE)
                    # the minutes to count up to: now, or the last refresh's
                    base = now if stale or self.upto is None else self.upto
                    start = base - datetime.timedelta(minutes=minutes)
                    end = now + datetime.timedelta(days=3650)
                    if self.since is None:
                        self.count(db, start, end)
                        self.since = start
                    else:
                        if start < self.since:
                            self.count(db, start, self.since)
                            self.since = start
                        if stale:
                            lo = max(self.upto - datetime.timedelta(minutes=REREAD),
                                     now - datetime.timedelta(minutes=KEEP))
                            self.count(db, lo, end)
                    self.upto = base
                    if stale:
                        self.at = time.monotonic()
                oldest = self.upto - datetime.timedelta(minutes=KEEP)
                for m in [m for m in self.counts if m < oldest]:
                    del self.counts[m]
                self.since = max(self.since, oldest)
            start = self.upto - datetime.timedelta(minutes=minutes)
            return [{"queue": q, "m": m, "completed": c, "failed": f}
                    for m, row in self.counts.items() if m >= start
                    for q, (c, f) in row.items()]


# ---------------------------------------------------------------------------
# sessions and CSRF


class Sessions:
    """Server-side sessions: a random id in a cookie, a CSRF token each."""

    def __init__(self):
        self.lock = threading.Lock()
        self.data = {}

    def new(self):
        sid = secrets.token_urlsafe(32)
        with self.lock:
            if len(self.data) > 10000:       # a flood of cookie-less clients
                oldest = sorted(self.data, key=lambda k: self.data[k]["seen"])
                for k in oldest[:5000]:
                    del self.data[k]
            self.data[sid] = {"csrf": secrets.token_urlsafe(32),
                              "authed": False, "flash": [],
                              "seen": time.monotonic()}
        return sid

    def get(self, sid):
        with self.lock:
            s = self.data.get(sid) if sid else None
            if s is not None:
                s["seen"] = time.monotonic()
            return s

    def drop(self, sid):
        with self.lock:
            self.data.pop(sid, None)


# ---------------------------------------------------------------------------
# HTML


NAV = [("/", "Overview"), ("/jobs", "Jobs"), ("/dead", "Dead letter"),
       ("/schedules", "Schedules"), ("/workers", "Workers and health")]

STATUSES = ["pending", "blocked", "running", "completed", "failed", "cancelled"]


def layout(app, title, body, path, session, live=False):
    """A whole page around body (already escaped HTML)."""
    here = ' class="here"'
    nav = "".join(f'<a href="{href}"{here if href == path else ""}>{e(name)}</a>'
                  for href, name in NAV)
    flashes = "".join(
        f'<p class="flash {e(kind)}" role="status">{e(msg)}</p>'
        for kind, msg in (session.pop_flash() if session else []))
    mode = ' <span class="badge">read-only</span>' if app.read_only else ""
    who = f'{e(app.role)} on {e(app.database)}{mode}'
    logout = ""
    if app.password is not None and session and session.authed:
        logout = (f'<form method="post" action="/logout" class="inline">'
                  f'<input type="hidden" name="csrf" value="{e(session.csrf)}">'
                  f'<button type="submit">log out</button></form>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} - jobq</title>
<meta name="csrf" content="{e(session.csrf) if session else ""}">
<link rel="stylesheet" href="/static/jobq.css">
<script src="/static/jobq.js" defer></script>
</head><body{' data-live="' + str(LIVE_INTERVAL) + '"' if live else ''}>
<header><span class="brand">jobq</span><nav>{nav}</nav>
<span class="who">{who}{logout}</span></header>
<main><h1>{e(title)}</h1>{flashes}{body}</main>
</body></html>"""


def table(headers, rows, cls=""):
    """A table; rows are lists of already escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>"
                   for r in rows)
    if not rows:
        body = f'<tr><td colspan="{len(headers)}" class="none">none</td></tr>'
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def status_tag(status):
    return f'<span class="st st-{e(status)}">{e(status)}</span>'


def job_link(job_id):
    return f'<a href="/job/{int(job_id)}">{int(job_id)}</a>'


def svg_chart(points, minutes, title):
    """Completed and failed per minute as plain SVG: bars for an hour, lines for a day."""
    w, h, left, bottom, top, right = 720, 200, 44, 24, 22, 24
    now = datetime.datetime.now(datetime.timezone.utc).replace(second=0, microsecond=0)
    start = now - datetime.timedelta(minutes=minutes)
    done = [0] * (minutes + 1)
    bad = [0] * (minutes + 1)
    for p in points:
        i = int((p["m"] - start).total_seconds() // 60)
        if 0 <= i <= minutes:
            done[i] += p["completed"]
            bad[i] += p["failed"]
    if minutes <= 60:
        peak = max(max(d + f for d, f in zip(done, bad)), 1)
    else:
        peak = max(max(done), max(bad), 1)
    sx = (w - left - right) / minutes
    sy = (h - bottom - top) / peak

    def line(vals):
        return " ".join(f"{left + i * sx:.1f},{h - bottom - v * sy:.1f}"
                        for i, v in enumerate(vals))
    if minutes <= 60:
        # bars: completed, with failed stacked on top
        bw = max(sx - 2, 1)
        bars = []
        for i in range(minutes + 1):
            x0 = left + i * sx - bw / 2
            y0 = h - bottom
            for v, colour in ((done[i], "#2a7d2a"), (bad[i], "#c0392b")):
                if v:
                    bars.append(f'<rect x="{x0:.1f}" y="{y0 - v * sy:.1f}" width="{bw:.1f}" '
                                f'height="{v * sy:.1f}" fill="{colour}"/>')
                    y0 -= v * sy
        plot = "".join(bars)
    else:
        plot = (f'<polyline fill="none" stroke="#2a7d2a" stroke-width="1.5" points="{line(done)}"/>'
                f'<polyline fill="none" stroke="#c0392b" stroke-width="1.5" points="{line(bad)}"/>')
    ticks = []
    step = 10 if minutes <= 60 else 240
    for i in range(0, minutes + 1, step):
        label = (start + datetime.timedelta(minutes=i)).strftime("%H:%M")
        ticks.append(f'<text x="{left + i * sx:.1f}" y="{h - 6}" text-anchor="middle">{e(label)}</text>')
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">
<title>{e(title)}</title>
<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>
<text x="{left}" y="14" font-size="12">{e(title)} (UTC; peak {peak}/min)</text>
<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#888"/>
<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="#888"/>
<text x="{left - 4}" y="{top + 4}" text-anchor="end">{peak}</text>
<text x="{left - 4}" y="{h - bottom}" text-anchor="end">0</text>
{''.join(ticks)}
{plot}
<text x="{w - 160}" y="14" fill="#2a7d2a">completed</text>
<text x="{w - 80}" y="14" fill="#c0392b">failed</text>
</svg>"""


# ---------------------------------------------------------------------------
# the server


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
        self.sessions = Sessions()
        self.hosts = set()
        with Db(self.pool) as db:
            r = db.one("SELECT current_user AS role, current_database() AS db")
            self.role, self.database = r["role"], r["db"]
            self.has_service = db.value("SELECT pg_catalog.to_regclass('jobq.service') IS NOT NULL")


class SessionView:
    """The current request's session."""

    def __init__(self, sessions, sid, data):
        self.sessions, self.sid, self.data = sessions, sid, data

    @property
    def csrf(self):
        return self.data["csrf"]

    @property
    def authed(self):
        return self.data["authed"]

    def flash(self, kind, msg):
        with self.sessions.lock:
            self.data["flash"].append((kind, msg))

    def pop_flash(self):
        with self.sessions.lock:
            f, self.data["flash"] = self.data["flash"], []
        return f


class Refused(Exception):
    """A request answered with an HTTP error status."""

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "jobq-web"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    app = None  # set in main()

    # -- plumbing --------------------------------------------------------

    def log_message(self, fmt, *args):
        sys.stderr.write("jobq web: %s %s\n" % (self.address_string(), fmt % args))

    def send(self, status, body, ctype="text/html; charset=utf-8", extra=()):
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "same-origin")
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def redirect(self, where, extra=()):
        self.send(303, "", extra=[("Location", where)] + list(extra))

    def session(self):
        """The request's session; a new one (and its cookie) if none."""
        sid = None
        raw = self.headers.get("Cookie")
        if raw:
            try:
                c = http.cookies.SimpleCookie(raw)
                if "jobq_session" in c:
                    sid = c["jobq_session"].value
            except http.cookies.CookieError:
                pass
        data = self.app.sessions.get(sid)
        self.new_cookie = None
        if data is None:
            sid = self.app.sessions.new()
            data = self.app.sessions.get(sid)
            self.new_cookie = ("Set-Cookie",
                               f"jobq_session={sid}; Path=/; HttpOnly; SameSite=Strict")
        return SessionView(self.app.sessions, sid, data)

    def cookies(self):
        return [self.new_cookie] if self.new_cookie else []

    def check_host(self):
        """Refuse a Host header that is not this server (DNS rebinding)."""
        host = self.headers.get("Host", "")
        if self.app.hosts and host not in self.app.hosts:
            raise Refused(421, "unexpected Host header")

    def form(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > 1 << 20:
            raise Refused(413, "request too large")
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
        raw = self.rfile.read(n).decode("utf-8", "replace")
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
            url = urllib.parse.urlsplit(self.path)
            path = url.path
            params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
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
                      "/workers": self.page_workers,
                      "/api/overview": self.api_overview,
                      "/chart.svg": self.chart}
            if path in routes:
                return routes[path](s, params)
            if path.startswith("/job/") and path[5:].isdigit():
                return self.page_job(s, int(path[5:]))
            raise Refused(404, "no such page")
        except Refused as r:
            self.send(r.status, self.error_page(r.status, str(r)))
        except psycopg.Error as err:
            self.send(500, self.error_page(500, "the database said: " + db_message(err)))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self):
        try:
            self.check_host()
            path = urllib.parse.urlsplit(self.path).path
            s = self.session()
            f = self.form()
            token = (f.get("csrf") or [""])[-1]
            if self.new_cookie or not hmac.compare_digest(token, s.csrf) or not self.same_origin():
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
            self.action(s, f)
            for c in (self.app.queues, self.app.running, self.app.stats, self.app.dead_groups):
                c.forget()
            return self.redirect(back)
        except Refused as r:
            self.send(r.status, self.error_page(r.status, str(r)))
        except (BrokenPipeError, ConnectionResetError):
            pass

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

    def error_page(self, status, msg):
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                f'<title>{status}</title><link rel="stylesheet" href="/static/jobq.css"></head>'
                f'<body><main><h1>{status}</h1><p class="flash error">{e(msg)}</p>'
                f'<p><a href="/">back to the overview</a></p></main></body></html>')

    # -- login -----------------------------------------------------------

    def login_page(self, s, msg):
        err = f'<p class="flash error">{e(msg)}</p>' if msg else ""
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
                f'<title>log in - jobq</title><link rel="stylesheet" href="/static/jobq.css"></head>'
                f'<body><main><h1>jobq web</h1>{err}'
                f'<form method="post" action="/login" class="login">'
                f'<input type="hidden" name="csrf" value="{e(s.csrf)}">'
                f'<label>password <input type="password" name="password" autofocus></label>'
                f'<button type="submit">log in</button></form></main></body></html>')

    def login(self, s, f):
        given = (f.get("password") or [""])[-1].encode()
        if hmac.compare_digest(given, self.app.password.encode()):
            # a fresh session id after login (no session fixation); the old
            # one stays, unauthenticated, so that a request still in flight
            # with it (a favicon) gets no new cookie that would replace this
            sid = self.app.sessions.new()
            self.app.sessions.get(sid)["authed"] = True
            return self.redirect("/", [("Set-Cookie",
                                        f"jobq_session={sid}; Path=/; HttpOnly; SameSite=Strict")])
        time.sleep(1)
        return self.send(403, self.login_page(s, "wrong password"))

    # -- forms -------------------------------------------------------------

    def button(self, s, op, label, back, cls="", **fields):
        """A one-button POST form (nothing in read-only mode)."""
        if self.app.read_only:
            return ""
        hidden = "".join(f'<input type="hidden" name="{e(k)}" value="{e(v)}">'
                         for k, v in fields.items() if v is not None)
        return (f'<form method="post" action="/action" class="inline">'
                f'<input type="hidden" name="csrf" value="{e(s.csrf)}">'
                f'<input type="hidden" name="op" value="{e(op)}">'
                f'<input type="hidden" name="back" value="{e(back)}">{hidden}'
                f'<button type="submit" class="{e(cls)}" data-op="{e(op)}">{e(label)}</button></form>')

    def may(self, db, queue, capability):
        """Does this role hold the capability (so the button may be shown)?"""
        if self.app.read_only:
            return False
        try:
            return bool(db.value("SELECT jobq.may(%s::text, %s::text)", (queue, capability)))
        except psycopg.Error:
            return True   # cannot tell: show it, the function decides

    # -- pages -------------------------------------------------------------

    def overview_rows(self):
        """Per queue: the live numbers and the (older) counts of queue_stats."""
        running = {r["queue"]: r["running"] for r in self.app.running.get()}
        done, bad = {}, {}
        cut = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        for r in self.app.minutes.get(60):
            if r["m"] >= cut.replace(second=0, microsecond=0):
                done[r["queue"]] = done.get(r["queue"], 0) + r["completed"]
                bad[r["queue"]] = bad.get(r["queue"], 0) + r["failed"]
        stats = {r["queue"]: r for r in self.app.stats.get()}
        out = []
        for q in self.app.queues.get():
            st = stats.get(q["queue"], {})
            out.append({"queue": q["queue"], "ready": st.get("ready", ""),
                        "delayed": st.get("delayed", ""),
                        "running": running.get(q["queue"], 0),
                        "completed_last_hour": done.get(q["queue"], 0),
                        "failed_last_hour": bad.get(q["queue"], 0),
                        "failed": st.get("failed", ""),
                        "oldest_pending_age": ago(st.get("oldest_pending_age")),
                        "paused": "paused" if q["paused"] else "no",
                        "breaker_state": q["breaker_state"],
                        "counted_at": self.app.stats.when.strftime("%H:%M:%S")})
        return out

    def page_overview(self, s, params):
        rows_in = self.overview_rows()
        rng = "day" if params.get("range") == "day" else "hour"
        with Db(self.app.pool) as db:
            admin = {r["queue"]: self.may(db, r["queue"], "administer") for r in rows_in}
        rows = []
        for r in rows_in:
            q = r["queue"]
            acts = ""
            if admin.get(q):
                paused = r["paused"] == "paused"
                acts = (self.button(s, "resume" if paused else "pause",
                                    "resume" if paused else "pause", "/", queue=q)
                        + self.button(s, "release_running", "running back to pending", "/", queue=q)
                        + (self.button(s, "retry_failed", "retry failed", "/", queue=q)
                           if r["failed"] else ""))

            def cell(field):
                return f'<span data-q="{e(q)}" data-f="{field}">{e(r[field])}</span>'
            rows.append([
                f'<a href="/jobs?{e(qs(queue=q))}">{e(q)}</a>',
                cell("ready"), cell("delayed"), cell("running"),
                cell("completed_last_hour"), cell("failed_last_hour"),
                f'<a href="/dead?{e(qs(queue=q))}">{cell("failed")}</a>',
                cell("oldest_pending_age"), cell("paused"), cell("breaker_state"), acts])
        other = "hour" if rng == "day" else "day"
        counted = rows_in[0]["counted_at"] if rows_in else ""
        body = (table(["queue", "ready", "delayed", "running", "completed 1h",
                       "failed 1h", "dead", "oldest due wait", "paused", "breaker", ""],
                      rows, "queues")
                + f'<p class="note">Pending is ready + delayed. Running, completed, failed, paused '
                  f'and breaker refresh every {LIVE_INTERVAL // 1000} s; ready, delayed, dead and the '
                  f'oldest wait count every pending and dead job and refresh every {int(STATS_TTL)} s '
                  f'(counted at <span data-f="counted_at">{e(counted)}</span> UTC).</p>'
                + f'<h2>Completed and failed per minute, last {rng}</h2>'
                  f'<p><img class="chart" data-live-src="/chart.svg?range={rng}" '
                  f'src="/chart.svg?range={rng}" alt="completed and failed per minute, last {rng}"></p>'
                  f'<p><a href="/?range={other}">the last {other}</a></p>')
        self.send(200, layout(self.app, "Overview", body, "/", s, live=True), extra=self.cookies())

    def api_overview(self, s, params):
        self.send(200, json.dumps({"queues": self.overview_rows()}), "application/json",
                  extra=self.cookies())

    def chart(self, s, params):
        day = params.get("range") == "day"
        minutes = 1440 if day else 60
        queue = params.get("queue")
        pts = [r for r in self.app.minutes.get(minutes) if not queue or r["queue"] == queue]
        title = "completed and failed per minute, last " + ("day" if day else "hour")
        if queue:
            title += ", queue " + queue
        self.send(200, svg_chart(pts, minutes, title), "image/svg+xml; charset=utf-8")

    def page_jobs(self, s, params):
        where, args = [], []
        for field in ("queue", "kind", "status"):
            if params.get(field):
                where.append(f"j.{field} = %s")
                args.append(params[field])
        if params.get("key"):
            where.append("j.idempotency_key = %s")
            args.append(params["key"])
        if params.get("error"):
            where.append("pg_catalog.strpos(j.last_error, %s) > 0")
            args.append(params["error"])
        if params.get("from"):
            where.append("j.created_at >= %s::timestamptz")
            args.append(params["from"])
        if params.get("to"):
            where.append("j.created_at < %s::timestamptz")
            args.append(params["to"])
        before = int(params["before"]) if params.get("before", "").isdigit() else None
        select = ("SELECT j.job_id, j.queue, j.kind, j.status, j.priority, j.retry_count, "
                  "j.max_retries, j.idempotency_key, j.run_at, j.created_at, j.finished_at, "
                  "pg_catalog.left(j.last_error, 200) AS last_error FROM jobq.jobs j")
        err = ""
        try:
            with Db(self.app.pool) as db:
                rows, nxt_id = keyset_page(db, select, where, args, before)
        except psycopg.Error as x:
            rows, nxt_id, err = [], None, f'<p class="flash error">{e(db_message(x))}</p>'
        opts = "".join(f'<option{" selected" if params.get("status") == st else ""}>{e(st)}</option>'
                       for st in STATUSES)

        def inp(name, label, ph=""):
            return (f'<label>{e(label)} <input name="{name}" value="{e(params.get(name, ""))}"'
                    f' placeholder="{e(ph)}"></label>')
        filt = (f'<form method="get" action="/jobs" class="filters">{inp("queue", "queue")}'
                f'{inp("kind", "kind")}<label>status <select name="status"><option value="">any</option>'
                f'{opts}</select></label>{inp("key", "idempotency key")}{inp("error", "error contains")}'
                f'{inp("from", "created from", "2026-01-01 00:00")}{inp("to", "to")}'
                f'<button type="submit">filter</button></form>')
        trs = [[job_link(r["job_id"]), e(r["queue"]), e(r["kind"]), status_tag(r["status"]),
                e(r["priority"]), e(f'{r["retry_count"]}/{r["max_retries"]}'),
                e(r["idempotency_key"]), e(ts(r["run_at"])), e(ts(r["created_at"])),
                e(ts(r["finished_at"])), f'<span class="err">{e(r["last_error"])}</span>']
               for r in rows]
        nxt = ""
        if nxt_id is not None:
            p = dict(params)
            p["before"] = nxt_id
            nxt = f'<p><a class="next" href="/jobs?{e(qs(**p))}">older jobs (below job {nxt_id})</a></p>'
        first = ""
        if params.get("before"):
            p = dict(params)
            p.pop("before")
            first = f'<p><a href="/jobs?{e(qs(**p))}">newest jobs</a></p>'
        body = filt + err + table(["job", "queue", "kind", "status", "priority", "retries",
                                   "key", "run at", "created", "finished", "last error"],
                                  trs, "jobs") + first + nxt
        self.send(200, layout(self.app, "Jobs", body, "/jobs", s), extra=self.cookies())

    def page_job(self, s, job_id):
        with Db(self.app.pool) as db:
            j = db.one("SELECT j.*, jobq.priority_label(j.priority) AS label "
                       "FROM jobq.jobs j WHERE j.job_id = %s", (job_id,))
            if j is None:
                raise Refused(404, f"no job {job_id} (or not in a queue you may see)")
            att = db.rows("SELECT a.* FROM jobq.job(%s::bigint) a ORDER BY a.attempt", (job_id,))
            admin = self.may(db, j["queue"], "administer")
        back = f"/job/{job_id}"
        st = j["status"]
        acts = ""
        if admin:
            if st in ("failed", "cancelled"):
                acts += self.button(s, "retry", "retry", back, job_id=job_id)
            if st in ("pending", "running", "blocked"):
                acts += self.button(s, "cancel", "cancel", back, "danger", job_id=job_id)
        facts = [
            ("queue", f'<a href="/jobs?{e(qs(queue=j["queue"]))}">{e(j["queue"])}</a>'),
            ("kind", e(j["kind"])), ("status", status_tag(st)),
            ("priority", e(f'{j["priority"]} ({j["label"]})')),
            ("retries used", e(f'{j["retry_count"]} of {j["max_retries"]}')),
            ("attempts", e(j["attempts"])),
            ("idempotency key", e(j["idempotency_key"])),
            ("concurrency key", e(j.get("concurrency_key"))),
            ("created", e(ts(j["created_at"]))), ("run at", e(ts(j["run_at"]))),
            ("claimed", e(ts(j["claimed_at"]))), ("worker", e(j["worker_id"])),
            ("lease expires", e(ts(j["lease_expires_at"]))),
            ("finished", e(ts(j["finished_at"]))), ("updated", e(ts(j["updated_at"]))),
            ("last error", f'<pre class="err">{e(j["last_error"])}</pre>'),
        ]
        dl = "<dl class=\"facts\">" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>"
        blocks = "".join(f'<h2>{name}</h2><pre class="json" id="{name}">{e(pretty(j[name]))}</pre>'
                         for name in ("payload", "result", "checkpoint"))
        arows = [[e(a["attempt"]), status_tag(a["outcome"]), e(a["worker_id"]),
                  e(ts(a["started_at"])), e(ts(a["finished_at"])), e(a["duration"]),
                  f'<pre class="err">{e(a["error"])}</pre>'] for a in att]
        edit = ""
        if admin and st in ("pending", "blocked", "failed", "cancelled"):
            again = ""
            if st in ("failed", "cancelled"):
                again = ('<label class="check"><input type="checkbox" name="then_retry" value="1" checked>'
                         ' then retry it</label>')
            edit = (f'<h2 id="edit">Edit</h2><form method="post" action="/action" class="edit">'
                    f'<input type="hidden" name="csrf" value="{e(s.csrf)}">'
                    f'<input type="hidden" name="op" value="update">'
                    f'<input type="hidden" name="back" value="{e(back)}">'
                    f'<input type="hidden" name="job_id" value="{job_id}">'
                    f'<label>payload (JSON object)<textarea name="payload" rows="8">{e(pretty(j["payload"]))}</textarea></label>'
                    f'<label>run at <input name="run_at" placeholder="unchanged"></label>'
                    f'<label>priority <input name="priority" placeholder="{e(j["priority"])}: number or low/medium/high/critical"></label>'
                    f'<label>max retries <input name="max_retries" placeholder="{e(j["max_retries"])}"></label>'
                    f'{again}<button type="submit" data-op="update">save</button></form>')
        body = (f'<p class="actions">{acts}</p>{dl}{blocks}<h2>Attempts</h2>'
                + table(["attempt", "outcome", "worker", "started", "ended", "duration", "error"],
                        arows, "attempts") + edit)
        self.send(200, layout(self.app, f"Job {job_id}", body, "/jobs", s), extra=self.cookies())

    def page_dead(self, s, params):
        groups = self.app.dead_groups.get()
        with Db(self.app.pool) as db:
            where, args = ["j.status = 'failed'"], []
            for f in ("queue", "kind"):
                if params.get(f):
                    where.append(f"j.{f} = %s")
                    args.append(params[f])
            if params.get("error"):
                where.append("pg_catalog.starts_with(COALESCE(j.last_error, ''), %s)")
                args.append(params["error"])
            before = int(params["before"]) if params.get("before", "").isdigit() else None
            jobs, nxt_id = keyset_page(
                db, "SELECT j.job_id, j.queue, j.kind, j.attempts, j.finished_at, "
                "pg_catalog.left(j.last_error, 200) AS last_error FROM jobq.jobs j",
                where, args, before)
            queues = {g["queue"] for g in groups} | {j["queue"] for j in jobs}
            admin = {q: self.may(db, q, "administer") for q in queues}
        back = "/dead" + ("?" + qs(**params) if params else "")
        grows = []
        for g in groups:
            link = "/dead?" + qs(queue=g["queue"], kind=g["kind"], error=g["error"])
            acts = ""
            if admin.get(g["queue"]):
                acts = self.button(s, "retry_failed", f"retry all {g['kind']}", back,
                                   kind=g["kind"], queue=g["queue"])
            grows.append([e(g["queue"]), e(g["kind"]), f'<span class="err">{e(g["error"])}</span>',
                          f'<a href="{e(link)}">{e(g["jobs"])}</a>', e(ts(g["newest"])), acts])
        any_admin = any(admin.get(j["queue"]) for j in jobs)
        jrows = []
        for j in jobs:
            box = ""
            if any_admin and admin.get(j["queue"]):
                box = f'<input type="checkbox" name="job_id" value="{int(j["job_id"])}" form="selected" aria-label="select job {int(j["job_id"])}">'
            acts = ""
            if admin.get(j["queue"]):
                acts = (self.button(s, "retry", "retry", back, job_id=j["job_id"])
                        + f' <a href="/job/{int(j["job_id"])}#edit">edit</a>')
            jrows.append([box, job_link(j["job_id"]), e(j["queue"]), e(j["kind"]),
                          e(j["attempts"]), e(ts(j["finished_at"])),
                          f'<span class="err">{e(j["last_error"])}</span>', acts])
        sel = ""
        if any_admin and not self.app.read_only:
            sel = (f'<form method="post" action="/action" id="selected" class="inline">'
                   f'<input type="hidden" name="csrf" value="{e(s.csrf)}">'
                   f'<input type="hidden" name="op" value="retry_selected">'
                   f'<input type="hidden" name="back" value="{e(back)}">'
                   f'<button type="submit" data-op="retry_selected">retry selected</button>'
                   f' <label class="check"><input type="checkbox" id="select-all"> select all</label></form>')
        nxt = ""
        if nxt_id is not None:
            p = dict(params)
            p["before"] = nxt_id
            nxt = f'<p><a class="next" href="/dead?{e(qs(**p))}">older (below job {nxt_id})</a></p>'
        shown = ", ".join(f"{k} {params[k]}" for k in ("queue", "kind", "error") if params.get(k))
        body = ('<h2>By kind and error</h2>'
                + f'<p class="note">Counted over every failed job, at most every {int(GROUPS_TTL)} s.</p>'
                + table(["queue", "kind", "error (first line)", "jobs", "newest", ""], grows, "groups")
                + f'<h2>Failed jobs{e(": " + shown if shown else "")}</h2>' + sel
                + table(["", "job", "queue", "kind", "attempts", "failed at", "last error", ""],
                        jrows, "dead") + nxt)
        self.send(200, layout(self.app, "Dead letter", body, "/dead", s), extra=self.cookies())

    def page_schedules(self, s, params):
        with Db(self.app.pool) as db:
            rows = db.rows("""
SELECT s.schedule_id, s.name, s.cron, s.timezone, s.misfire, s.kind, s.queue, s.priority, s.paused,
       s.next_fire_at, s.last_fire_at, s.last_job_id, s.last_job_status,
       pg_catalog.to_char(s.next_fire_at AT TIME ZONE s.timezone, 'YYYY-MM-DD HH24:MI:SS') AS next_local,
       pg_catalog.to_char(s.last_fire_at AT TIME ZONE s.timezone, 'YYYY-MM-DD HH24:MI:SS') AS last_local,
       ARRAY(SELECT pg_catalog.to_char(f.t AT TIME ZONE s.timezone, 'YYYY-MM-DD HH24:MI:SS')
               FROM (WITH RECURSIVE n(t, i) AS (
                       SELECT s.next_fire_at, 1
                     UNION ALL
                       SELECT jobq.cron_next(s.cron, n.t, s.timezone), n.i + 1
                         FROM n WHERE n.i < 4 AND n.t IS NOT NULL)
                     SELECT n.t FROM n WHERE n.i > 1 AND n.t IS NOT NULL) f) AS later
  FROM jobq.schedules s ORDER BY s.name""")
            admin = {q: self.may(db, q, "administer") for q in {r["queue"] for r in rows}}
            # the jobs of its last fires: keys "jobq:schedule:ID:..." (timed
            # and run-now fires), newest first, in a bounded search by keyset
            fires = {}
            for r in rows[:50]:
                fires[r["name"]], _ = keyset_page(
                    db, "SELECT j.job_id, j.status, pg_catalog.to_char(j.run_at AT TIME ZONE %s, "
                    "'YYYY-MM-DD HH24:MI:SS') AS local FROM jobq.jobs j",
                    ["j.kind = %s", "j.queue = %s", "pg_catalog.starts_with(j.idempotency_key, %s)"],
                    [r["kind"], r["queue"], f"jobq:schedule:{r['schedule_id']}:"], None, limit=3,
                    select_args=[r["timezone"]])
        trs = []
        for r in rows:
            acts = ""
            if admin.get(r["queue"]):
                acts = (self.button(s, "resume_schedule" if r["paused"] else "pause_schedule",
                                    "resume" if r["paused"] else "pause", "/schedules", name=r["name"])
                        + self.button(s, "run_schedule", "run now", "/schedules", name=r["name"]))
            last = "<br>".join(f'{job_link(f["job_id"])} {status_tag(f["status"])} '
                               f'<span class="later">{e(f["local"])}</span>'
                               for f in fires.get(r["name"], []))
            if not last and r["last_job_id"] is not None:
                last = f'{job_link(r["last_job_id"])} {status_tag(r["last_job_status"] or "pruned")}'
            trs.append([e(r["name"]), f'<code>{e(r["cron"])}</code>', e(r["timezone"]),
                        e(r["kind"]), e(r["queue"]), e(r["misfire"]),
                        "paused" if r["paused"] else "active",
                        e(r["next_local"]) + '<br><span class="later">'
                        + "<br>".join(e(t) for t in r["later"]) + "</span>",
                        e(r["last_local"]), last, acts])
        body = (table(["name", "cron", "time zone", "kind", "queue", "misfire", "state",
                       "next fires (local time)", "last fire (local)", "last fires' jobs", ""], trs, "schedules")
                + '<p class="note">Times are in each schedule\'s own time zone. The last fires\' '
                  'jobs are found among the newest 65,536 job ids.</p>')
        self.send(200, layout(self.app, "Schedules", body, "/schedules", s), extra=self.cookies())

    def page_workers(self, s, params):
        with Db(self.app.pool) as db:
            workers = db.rows("SELECT w.* FROM jobq.workers w ORDER BY w.database, w.role, w.pid")
            procs = db.rows("""
SELECT a.pid, a.backend_type, a.datname, a.state, a.wait_event_type, a.wait_event,
       a.xact_start, a.query_start, pg_catalog.left(a.query, 200) AS query
  FROM pg_catalog.pg_stat_activity a
 WHERE a.backend_type LIKE 'jobq%%' ORDER BY a.backend_type, a.pid""")
            service = []
            if self.app.has_service:
                try:
                    service = db.rows("SELECT * FROM jobq.service")
                except psycopg.Error:
                    service = []
            try:
                health, herr = db.rows("SELECT h.* FROM jobq.health() h"), ""
            except psycopg.Error as x:
                health, herr = [], db_message(x)
        wrows = [[e(w["pid"]), e(w["database"]), e(w["role"]), e(ts(w["started_at"])),
                  e(ts(w["last_run_at"])), e(w["reaped"]), e(w["pruned"]), e(w["fired"])]
                 for w in workers]
        prows = [[e(p["pid"]), e(p["backend_type"]), e(p["datname"]), e(p["state"]),
                  e(f'{p["wait_event_type"] or ""} {p["wait_event"] or ""}'.strip()),
                  e(ts(p["xact_start"])), e(ts(p["query_start"])), f'<code>{e(p["query"])}</code>']
                 for p in procs]
        hrows = [[e(h["check_name"]), f'<span class="h-{e(h["status"])}">{e(h["status"])}</span>',
                  e(h["detail"]), e(h["hint"])] for h in health]
        svc = ""
        if service:
            keys = list(service[0].keys())
            svc = "<h2>Service</h2>" + table([e(k) for k in keys],
                                             [[e(ts(r[k])) for k in keys] for r in service])
        body = ("<h2>jobq processes</h2>"
                + table(["pid", "database", "role", "started", "last round", "reaped", "pruned", "fired"],
                        wrows, "workers")
                + "<h2>What they are doing (pg_stat_activity)</h2>"
                + table(["pid", "type", "database", "state", "waiting on", "transaction since",
                         "query since", "query"], prows, "activity")
                + svc + "<h2>Health</h2>"
                + (f'<p class="flash error">{e(herr)}</p>' if herr else
                   table(["check", "status", "detail", "hint"], hrows, "health")))
        self.send(200, layout(self.app, "Workers and health", body, "/workers", s, live=False),
                  extra=self.cookies())

    # -- actions -----------------------------------------------------------

    def action(self, s, f):
        """Run one operation as this role; its outcome becomes a flash message."""
        def one(name):
            return (f.get(name) or [""])[-1].strip()

        def job_id():
            v = one("job_id")
            if not v.isdigit():
                raise Refused(400, "a job id is a positive integer")
            return int(v)
        op = one("op")
        try:
            with Db(self.app.pool) as db:
                if op in ("retry", "cancel"):
                    j = job_id()
                    done = db.value(f"SELECT jobq.{op}(%s::bigint)", (j,))
                    st = db.value("SELECT j.status FROM jobq.jobs j WHERE j.job_id = %s", (j,))
                    if done:
                        s.flash("ok", f"job {j}: {st}")
                    else:
                        s.flash("error", f"job {j} is {st or 'gone'}; " +
                                ("only failed or cancelled jobs can be retried" if op == "retry"
                                 else "only pending, blocked or running jobs can be cancelled"))
                elif op == "retry_selected":
                    ids = [int(v) for v in f.get("job_id", []) if v.isdigit()]
                    if not ids:
                        s.flash("error", "no job selected")
                        return
                    with db.conn.transaction():
                        n = sum(1 for j in ids if db.value("SELECT jobq.retry(%s::bigint)", (j,)))
                    s.flash("ok", f"{n} of {len(ids)} selected jobs back to pending")
                elif op == "retry_failed":
                    n = db.value("SELECT jobq.retry_failed(kind => %s::text, queue => %s::text)",
                                 (one("kind") or None, one("queue") or None))
                    s.flash("ok", f"{n} failed job{'s' if n != 1 else ''} back to pending")
                elif op == "update":
                    j = job_id()
                    payload = one("payload") or None
                    if payload is not None:
                        try:
                            if not isinstance(json.loads(payload), dict):
                                raise ValueError
                        except ValueError:
                            s.flash("error", "the payload must be a JSON object")
                            return
                    prio = one("priority") or None
                    if prio is not None and not prio.lstrip("-").isdigit():
                        prio = db.value("SELECT jobq.priority(%s::text)", (prio,))
                    retries = one("max_retries") or None
                    with db.conn.transaction():
                        done = db.value("SELECT jobq.update_job(%s::bigint, %s::jsonb, %s::timestamptz, %s::int, %s::int)",
                                        (j, payload, one("run_at") or None, prio, retries))
                        st = db.value("SELECT j.status FROM jobq.jobs j WHERE j.job_id = %s", (j,))
                        if done and one("then_retry") and st in ("failed", "cancelled"):
                            db.value("SELECT jobq.retry(%s::bigint)", (j,))
                            st = "pending"
                    if done:
                        s.flash("ok", f"job {j} changed; it is {st}")
                    else:
                        s.flash("error", f"job {j} is {st or 'gone'}; only pending, blocked, "
                                "failed or cancelled jobs can be changed")
                elif op == "release_running":
                    n = db.value("SELECT jobq.release_running(%s::text, %s::text)",
                                 (one("queue"), one("worker_id") or None))
                    s.flash("ok", f"{n} running job{'s' if n != 1 else ''} of {one('queue')} back to pending")
                elif op in ("pause", "resume"):
                    db.value(f"SELECT jobq.{op}(%s::text)", (one("queue"),))
                    s.flash("ok", f"queue {one('queue')}: {op}d")
                elif op in ("pause_schedule", "resume_schedule"):
                    done = db.value(f"SELECT jobq.{op}(%s::text)", (one("name"),))
                    s.flash("ok" if done else "error",
                            f"schedule {one('name')}: {op.split('_')[0]}d" if done
                            else f"schedule {one('name')}: no change")
                elif op == "run_schedule":
                    j = db.value("SELECT jobq.run_schedule(%s::text)", (one("name"),))
                    s.flash("ok", f"schedule {one('name')} fired: job {j}")
                else:
                    raise Refused(400, "unknown operation")
        except psycopg.Error as x:
            s.flash("error", "the database said: " + db_message(x))


def db_message(err):
    """The primary message (and SQLSTATE) of a database error."""
    diag = getattr(err, "diag", None)
    msg = (diag.message_primary if diag is not None and diag.message_primary else str(err)).strip()
    code = getattr(err, "sqlstate", None)
    return f"{msg} ({code})" if code else msg


def loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main(argv=None):
    p = argparse.ArgumentParser(prog="jobq web", description="the jobq dashboard")
    p.add_argument("--port", type=int, default=8080, help="TCP port (0: any free one)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    p.add_argument("--read-only", action="store_true", help="show, offer no actions")
    p.add_argument("--password-file", help="file whose first line is the password")
    args = p.parse_args(argv)
    password = os.environ.get("JOBQ_WEB_PASSWORD") or None
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as fh:
                password = fh.readline().rstrip("\r\n") or None
        except OSError as x:
            print(f"jobq web: cannot read --password-file: {x}", file=sys.stderr)
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
    Server.address_family = socket.AF_INET6 if family_v6 else socket.AF_INET
    try:
        srv = Server((args.bind, args.port), Handler)
    except OSError as x:
        print(f"jobq web: cannot listen on {args.bind}:{args.port}: {x}", file=sys.stderr)
        return 3
    port = srv.server_address[1]
    hostpart = f"[{args.bind}]" if family_v6 else args.bind
    if loopback(args.bind):
        app.hosts = {f"{hostpart}:{port}", f"localhost:{port}"}
    url = f"http://{hostpart}:{port}/"
    print(f"jobq web: serving {url} as role {app.role} on database {app.database}"
          + (" (read-only)" if args.read_only else ""), flush=True)

    def stop(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    srv.serve_forever()
    srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
