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
the database is HTML-escaped (by the templates); a Content-Security-Policy
allows scripts and styles from the server's own /static/ only (no inline
script), and images (the SVG charts) from itself only.

HTTP is waitress's (a WSGI server, Debian's python3-waitress): it parses
requests, refuses malformed ones and buffers bodies before a thread sees
them.  The pages are jinja2 templates (templates/, Debian's python3-jinja2)
with autoescaping on: no value reaches a page unescaped.  Besides these,
psycopg 3 and Python's standard library.
"""

import argparse
import datetime
import hmac
import http.cookies
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

try:
    import jinja2
    import waitress.server
except ImportError as x:      # said in main()
    jinja2 = waitress = None
    MISSING = x.name

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC = os.path.join(HERE, "static")
PAGE_SIZE = 50
LIVE_TTL = 4.0          # seconds the live (indexed) answers are reused
STATS_TTL = 30.0        # seconds jobq.queue_stats (counts of pending and dead jobs) is reused
GROUPS_TTL = 60.0       # seconds the dead letter's groups (every failed job) are reused
REREAD = 2              # minutes of the chart counted again at every refresh (late commits)
KEEP = 1440             # minutes of the chart kept (the day)
LIVE_INTERVAL = 5000    # ms between a page's refreshes (static/jobq.js)
PAYLOAD_EXAMPLE = '{"customer": {"id": 42}}'
SEARCH_TIMEOUT = "5s"    # statement_timeout of each statement of a Jobs page (a search)
MAX_BODY = 1 << 20      # bytes of a request body (a form); more is a 413
THREADS = 8             # requests answered at once (sharing the pool's 4 connections)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; "
       "img-src 'self'; connect-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")


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


# the application's workers; the jobs they hold are running jobs (the
# partial index on lease_expires_at), at most 20 a worker
Q_APP_WORKERS = """
SELECT w.worker_id, w.queues, w.info, w.started_at, w.last_seen_at, w.jobs_in_hand, w.gone,
       pg_catalog.now() - w.last_seen_at AS seen_ago
  FROM jobq.app_workers w ORDER BY w.gone, w.worker_id LIMIT 500"""

Q_HELD = """
SELECT h.worker_id, h.job_id, h.kind FROM pg_catalog.unnest(%s::text[]) AS w(id),
  LATERAL (SELECT j.worker_id, j.job_id, j.kind FROM jobq.jobs j
            WHERE j.lease_expires_at IS NOT NULL AND j.worker_id = w.id
            ORDER BY j.job_id LIMIT 20) h"""


# a workflow: its jobs (jobq.workflow_jobs walks it by index probes), then
# each drawn job's parents (jobq.parent_results: a probe of the index of
# children each); the roots, newest 100
Q_WF_JOBS = """
SELECT w.job_id, w.queue, w.kind, w.status, w.finished_at,
       pg_catalog.left(w.last_error, 200) AS last_error
  FROM jobq.workflow_jobs(%s::bigint) w ORDER BY w.job_id LIMIT %s"""

Q_WF_EDGES = """
SELECT p.job_id AS parent, c.id AS child
  FROM pg_catalog.unnest(%s::bigint[]) AS c(id), LATERAL jobq.parent_results(c.id) p"""

Q_WORKFLOWS = """
SELECT w.root, w.queue, w.kind, w.created_at, w.total, w.blocked, w.pending, w.running,
       w.completed, w.failed, w.cancelled, w.can_finish
  FROM jobq.workflows w ORDER BY w.root DESC LIMIT 100"""

Q_DETAILS = """
SELECT a.attempt, a.details FROM jobq.attempt a
 WHERE a.job_id = %s::bigint AND a.details IS NOT NULL"""

# actions asked about first (a page with the same form, confirmed): what
# changes many jobs, and what deletes; the answer's button label
CONFIRM = {"discard": "discard it", "discard_selected": "discard them",
           "retry_selected": "retry them", "retry_failed": "retry them",
           "release_running": "put them back"}


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


SESSION_IDLE = 12 * 3600      # seconds a logged-in session lasts unused
SESSIONS_MAX = 10000          # logged-in sessions kept (only a login makes one)
FLASHES_MAX = 10000           # sessions with a message waiting to be shown
LOGIN_FAILS = 5               # wrong passwords a client may try ...
LOGIN_WINDOW = 300            # ... in this many seconds, then it waits
CLIENTS_MAX = 10000           # clients whose wrong passwords are remembered
SID_RE = re.compile(r"[A-Za-z0-9_-]{43}")


class Sessions:
    """Sessions that anonymous traffic cannot evict.

    A session id is a random cookie; its CSRF token is an HMAC of the id
    under a key of this process, so a visitor without a cookie costs no
    memory: nothing is stored for a session until it logs in (then it is
    kept, among the logged-in ones only, until SESSION_IDLE unused) or has a
    message to show after an action (kept among the messages, which are
    the only thing a flood of clients can push out).
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.key = secrets.token_bytes(32)
        self.authed = {}      # sid -> time.monotonic() of its last use
        self.flashes = {}     # sid -> [(kind, message)], oldest first

    def new(self):
        return secrets.token_urlsafe(32)

    def valid(self, sid):
        """Is sid the shape of an id this process hands out?"""
        return bool(sid) and SID_RE.fullmatch(sid) is not None

    def csrf(self, sid):
        return hmac.new(self.key, sid.encode(), "sha256").hexdigest()

    def is_authed(self, sid):
        with self.lock:
            seen = self.authed.get(sid)
            now = time.monotonic()
            if seen is None or now - seen > SESSION_IDLE:
                self.authed.pop(sid, None)
                return False
            self.authed[sid] = now
            return True

    def login(self):
        """A new logged-in session id."""
        sid = self.new()
        now = time.monotonic()
        with self.lock:
            for k in [k for k, t in self.authed.items() if now - t > SESSION_IDLE]:
                del self.authed[k]
            if len(self.authed) >= SESSIONS_MAX:
                del self.authed[min(self.authed, key=self.authed.get)]
            self.authed[sid] = now
        return sid

    def drop(self, sid):
        with self.lock:
            self.authed.pop(sid, None)
            self.flashes.pop(sid, None)

    def flash(self, sid, kind, msg):
        with self.lock:
            if sid not in self.flashes and len(self.flashes) >= FLASHES_MAX:
                del self.flashes[next(iter(self.flashes))]
            self.flashes.setdefault(sid, []).append((kind, msg))

    def pop_flash(self, sid):
        with self.lock:
            return self.flashes.pop(sid, [])


class Throttle:
    """Wrong passwords per client: LOGIN_FAILS in LOGIN_WINDOW seconds, then a wait.

    An attempt counts as wrong from the moment it starts (so parallel
    attempts cannot all slip in before the first is judged), and is taken
    back when the password was right.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.fails = {}       # client -> [time.monotonic() of each attempt]

    def attempt(self, client):
        """None: go ahead (then right() or nothing); else seconds to wait."""
        now = time.monotonic()
        with self.lock:
            recent = [t for t in self.fails.get(client, []) if now - t < LOGIN_WINDOW]
            if len(recent) >= LOGIN_FAILS:
                self.fails[client] = recent
                return int(recent[0] + LOGIN_WINDOW - now) + 1
            if client not in self.fails and len(self.fails) >= CLIENTS_MAX:
                for k in [k for k, v in self.fails.items() if not v or now - v[-1] >= LOGIN_WINDOW]:
                    del self.fails[k]
                if len(self.fails) >= CLIENTS_MAX:
                    del self.fails[min(self.fails, key=lambda k: self.fails[k][-1])]
            recent.append(now)
            self.fails[client] = recent
            return None

    def right(self, client):
        with self.lock:
            self.fails.pop(client, None)


# ---------------------------------------------------------------------------
# HTML


NAV = [("/", "Overview"), ("/jobs", "Jobs"), ("/dead", "Dead letter"),
       ("/workflows", "Workflows"), ("/schedules", "Schedules"), ("/workers", "Workers and health")]

STATUSES = ["pending", "blocked", "running", "completed", "failed", "cancelled"]


# every page is a template of templates/, every value escaped by jinja2
# unless a template says otherwise (none does)
if jinja2 is not None:
    TEMPLATES = jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    TEMPLATES.globals.update(ts=ts, ago=ago, pretty=pretty, qs=qs)

STATUS_FILL = {"pending": "#90caf9", "blocked": "#b39ddb", "running": "#ffb74d",
               "completed": "#81c784", "failed": "#e57373", "cancelled": "#bdbdbd"}
WF_MAX_JOBS = 400        # jobs of a workflow drawn (the rest are counted)
WF_MAX_LAYER = 30        # jobs drawn side by side in one layer (the rest are counted)


def chart_layout(points, minutes):
    """Completed and failed per minute, placed for templates/chart.svg: bars for an hour, lines for a day."""
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
    bars, lines = [], []
    if minutes <= 60:
        # bars: completed, with failed stacked on top
        bw = max(sx - 2, 1)
        for i in range(minutes + 1):
            x0 = left + i * sx - bw / 2
            y0 = h - bottom
            for v, colour in ((done[i], "#2a7d2a"), (bad[i], "#c0392b")):
                if v:
                    bars.append((x0, y0 - v * sy, bw, v * sy, colour))
                    y0 -= v * sy
    else:
        lines = [(line(done), "#2a7d2a"), (line(bad), "#c0392b")]
    step = 10 if minutes <= 60 else 240
    ticks = [(left + i * sx, (start + datetime.timedelta(minutes=i)).strftime("%H:%M"))
             for i in range(0, minutes + 1, step)]
    return {"w": w, "h": h, "left": left, "bottom": bottom, "top": top, "right": right,
            "peak": peak, "bars": bars, "lines": lines, "ticks": ticks}


def wf_layout(jobs, edges):
    """A workflow's graph placed for templates/workflow.svg: a layer per generation, top to bottom.

    jobs: rows (job_id, kind, status) in job id order, which is an order
    in which every parent comes before its children (a parent exists when
    its child is enqueued); edges: (parent, child) pairs.  A job's layer is
    its longest path from the root; within a layer jobs are ordered by the
    mean position of their parents (fewer crossings), then by id.
    """
    bw, bh, gx, gy, pad = 150, 40, 16, 46, 12
    parents = {}
    for p, c in edges:
        parents.setdefault(c, []).append(p)
    depth = {}
    for j in jobs:
        ps = [depth[p] for p in parents.get(j["job_id"], []) if p in depth]
        depth[j["job_id"]] = max(ps) + 1 if ps else 0
    layers = {}
    for j in jobs:
        layers.setdefault(depth[j["job_id"]], []).append(j)
    pos, hidden, boxes = {}, [], []
    for d in sorted(layers):
        def key(j):
            xs = [pos[p][0] for p in parents.get(j["job_id"], []) if p in pos]
            return (sum(xs) / len(xs) if xs else 0, j["job_id"])
        row = sorted(layers[d], key=key)
        for i, j in enumerate(row[:WF_MAX_LAYER]):
            pos[j["job_id"]] = (pad + i * (bw + gx), pad + d * (bh + gy))
            boxes.append((j, *pos[j["job_id"]]))
        if len(row) > WF_MAX_LAYER:
            hidden.append((pad + WF_MAX_LAYER * (bw + gx), pad + d * (bh + gy), len(row) - WF_MAX_LAYER))
    lines = []
    for p, c in edges:
        if p in pos and c in pos:
            x1, y1 = pos[p][0] + bw // 2, pos[p][1] + bh
            x2, y2 = pos[c][0] + bw // 2, pos[c][1]
            lines.append((p, c, x1, y1, x2, y2, (y1 + y2) // 2))
    width = pad * 2 + max([min(len(v), WF_MAX_LAYER) + (1 if len(v) > WF_MAX_LAYER else 0)
                           for v in layers.values()] or [1]) * (bw + gx)
    height = pad * 2 + max(len(layers), 1) * (bh + gy) - gy
    return {"width": width, "height": height, "bw": bw, "bh": bh, "boxes": boxes,
            "edges": lines, "hidden": hidden, "parents": parents}


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
        self.throttle = Throttle()
        self.hosts = set()
        with Db(self.pool) as db:
            r = db.one("SELECT current_user AS role, current_database() AS db")
            self.role, self.database = r["role"], r["db"]
            self.has_service = db.value("SELECT pg_catalog.to_regclass('jobq.service') IS NOT NULL")
            self.has_app_workers = db.value("SELECT pg_catalog.to_regclass('jobq.app_workers') IS NOT NULL")


class SessionView:
    """The current request's session."""

    def __init__(self, sessions, sid):
        self.sessions, self.sid = sessions, sid
        self.csrf = sessions.csrf(sid)
        self._authed = None

    @property
    def authed(self):
        if self._authed is None:
            self._authed = self.sessions.is_authed(self.sid)
        return self._authed

    def flash(self, kind, msg):
        self.sessions.flash(self.sid, kind, msg)

    def pop_flash(self):
        return self.sessions.pop_flash(self.sid)


class Refused(Exception):
    """A request answered with an HTTP error status."""

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status


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


class Handler:
    """One request: waitress parses HTTP, this answers it (a WSGI application).

    The HTTP itself (request lines, headers, Content-Length, chunked bodies,
    keep-alive) is waitress's: a malformed or negative Content-Length is a
    400 and a Transfer-Encoding other than chunked a 501 before a thread is
    involved, a chunked body is decoded as the body (never read as a next
    request), and a body is buffered whole, up to MAX_BODY, before this runs.
    """
    app = None  # set in main()

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
                if "jobq_session" in c:
                    sid = c["jobq_session"].value
            except http.cookies.CookieError:
                pass
        self.new_cookie = None
        if not self.app.sessions.valid(sid):
            sid = self.app.sessions.new()
            self.new_cookie = ("Set-Cookie",
                               f"jobq_session={sid}; Path=/; HttpOnly; SameSite=Strict")
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
        if not n.isdigit():
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
            if path.startswith("/job/") and path[5:].isdigit():
                return self.page_job(s, int(path[5:]))
            if path.startswith("/workflow/") and path[10:].isdigit():
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

    def confirm_page(self, s, f, op, back):
        """Ask before an action that changes many jobs or deletes one: the same form again, confirmed."""
        def one(name):
            return (f.get(name) or [""])[-1].strip()
        ids = sorted({v for v in f.get("job_id", []) if v.isdigit()}, key=int)
        what = {
            "discard": f"Delete job {one('job_id')} and its attempt history for good? "
                       "(Its idempotency key stays reserved for jobq.idempotency_retention.)",
            "discard_selected": f"Delete the {len(ids)} selected jobs ({', '.join(ids[:20])}"
                                f"{' ...' if len(ids) > 20 else ''}) and their attempt history for good?",
            "retry_selected": f"Retry the {len(ids)} selected jobs ({', '.join(ids[:20])}"
                              f"{' ...' if len(ids) > 20 else ''})?",
            "retry_failed": "Retry every failed job" + (f" of kind {one('kind')}" if one("kind") else "")
                            + (f" in queue {one('queue')}" if one("queue") else "") + "?",
            "release_running": f"Put every running job of queue {one('queue')}"
                               + (f" held by {one('worker_id')}" if one("worker_id") else "")
                               + " back to pending? A worker still running one of them will lose its lease.",
        }.get(op, "Go on?")
        if op in ("retry_selected", "discard_selected") and not ids:
            s.flash("error", "no job selected")
            return self.redirect(back)
        hidden = [(k, v) for k, vs in f.items() if k != "confirmed" for v in vs]
        self.render("confirm.html", "Are you sure?", "", s, what=what, hidden=hidden, op=op,
                    answer=CONFIRM[op], back=back, danger=op in ("discard", "discard_selected"))

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
                                        f"jobq_session={sid}; Path=/; HttpOnly; SameSite=Strict")])
        return self.send(403, self.login_page(s, "wrong password"))

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
        rows = self.overview_rows()
        rng = "day" if params.get("range") == "day" else "hour"
        with Db(self.app.pool) as db:
            admin = {r["queue"]: self.may(db, r["queue"], "administer") for r in rows}
        self.render("overview.html", "Overview", "/", s, live=True, rows=rows, admin=admin, rng=rng,
                    other="hour" if rng == "day" else "day", stats_ttl=int(STATS_TTL),
                    counted=rows[0]["counted_at"] if rows else "")

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
        svg = TEMPLATES.get_template("chart.svg").render(c=chart_layout(pts, minutes), title=title)
        self.send(200, svg, "image/svg+xml; charset=utf-8")

    def page_jobs(self, s, params):
        where, args = [], []
        for field in ("queue", "kind", "status"):
            if field == "kind" and params.get(field, "").endswith("*"):
                where.append("pg_catalog.starts_with(j.kind, %s)")
                args.append(params[field][:-1])
            elif params.get(field):
                where.append(f"j.{field} = %s")
                args.append(params[field])
        bad = ""
        if params.get("key"):
            if params["key"].endswith("*"):
                where.append("pg_catalog.starts_with(j.idempotency_key, %s)")
                args.append(params["key"][:-1])
            else:
                where.append("j.idempotency_key = %s")
                args.append(params["key"])
        if params.get("payload"):
            try:
                json.loads(params["payload"])
                where.append("j.payload OPERATOR(pg_catalog.@>) %s::jsonb")
                args.append(params["payload"])
            except ValueError:
                bad = "the payload filter is not JSON (it is matched with @>: {\"customer\": {\"id\": 42}})"
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
        err = bad
        rows, nxt_id = [], None
        try:
            if not bad:
                with Db(self.app.pool) as db, db.conn.transaction():
                    # every statement of the search within SEARCH_TIMEOUT
                    db.conn.execute(f"SET LOCAL statement_timeout = '{SEARCH_TIMEOUT}'")
                    rows, nxt_id = keyset_page(db, select, where, args, before)
        except psycopg.errors.QueryCanceled:
            err = (f"the search took longer than {SEARCH_TIMEOUT} and was stopped: "
                   "narrow it (a queue, a kind, a time range)")
        except psycopg.Error as x:
            err = db_message(x)
        nxt = first = ""
        if nxt_id is not None:
            nxt = qs(**dict(params, before=nxt_id))
        if params.get("before"):
            first = qs(**{k: v for k, v in params.items() if k != "before"})
        self.render("jobs.html", "Jobs", "/jobs", s, params=params, statuses=STATUSES, err=err,
                    rows=rows, nxt=nxt, nxt_id=nxt_id, first=first, payload_example=PAYLOAD_EXAMPLE)

    def page_job(self, s, job_id):
        with Db(self.app.pool) as db:
            j = db.one("SELECT j.*, jobq.priority_label(j.priority) AS label "
                       "FROM jobq.jobs j WHERE j.job_id = %s", (job_id,))
            if j is None:
                raise Refused(404, f"no job {job_id} (or not in a queue you may see)")
            att = db.rows("SELECT a.* FROM jobq.job(%s::bigint) a", (job_id,))
            # the stack traces: jobq.attempt, which only its readers may read
            try:
                details = {r["attempt"]: r["details"] for r in db.rows(Q_DETAILS, (job_id,))}
            except psycopg.errors.InsufficientPrivilege:
                details = None
            except psycopg.errors.UndefinedColumn:
                details = {}
            admin = self.may(db, j["queue"], "administer")
            parents = db.rows("SELECT p.job_id, p.status FROM jobq.parent_results(%s::bigint) p "
                              "ORDER BY p.job_id LIMIT 50", (job_id,))
            has_children = db.value("SELECT true FROM jobq.workflow_jobs(%s::bigint) w "
                                    "WHERE w.job_id <> %s LIMIT 1", (job_id, job_id))
        self.render("job.html", f"Job {job_id}", "/jobs", s, j=j, attempts=att, details=details,
                    admin=admin, parents=parents, has_children=has_children)

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
        nxt = qs(**dict(params, before=nxt_id)) if nxt_id is not None else ""
        self.render("dead.html", "Dead letter", "/dead", s, groups=groups, jobs=jobs, admin=admin,
                    any_admin=any(admin.get(j["queue"]) for j in jobs),
                    back="/dead" + ("?" + qs(**params) if params else ""),
                    shown=", ".join(f"{k} {params[k]}" for k in ("queue", "kind", "error") if params.get(k)),
                    nxt=nxt, nxt_id=nxt_id, groups_ttl=int(GROUPS_TTL))

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
        self.render("schedules.html", "Schedules", "/schedules", s, rows=rows, admin=admin, fires=fires)

    def app_workers(self, db):
        """The application's workers (jobq.app_workers), with the jobs each holds."""
        if not self.app.has_app_workers:
            return None, {}
        rows = db.rows(Q_APP_WORKERS)
        held = {}
        ids = [r["worker_id"] for r in rows]
        if ids:
            for j in db.rows(Q_HELD, (ids,)):
                held.setdefault(j["worker_id"], []).append(j)
        return rows, held

    def page_workers(self, s, params):
        with Db(self.app.pool) as db:
            apps, held = self.app_workers(db)
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
        for w in apps or []:
            info = w["info"] if isinstance(w["info"], dict) else {}
            rest = {k: v for k, v in info.items()
                    if k not in ("host", "pid", "concurrency", "library", "version")}
            w["rest"] = json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else ""
        self.render("workers.html", "Workers and health", "/workers", s, apps=apps, held=held,
                    workers=workers, procs=procs, service=service, health=health, herr=herr)

    def page_workflows(self, s, params):
        err = ""
        try:
            with Db(self.app.pool) as db:
                rows = db.rows(Q_WORKFLOWS)
        except psycopg.Error as x:
            rows, err = [], db_message(x)
        self.render("workflows.html", "Workflows", "/workflows", s, rows=rows, err=err, states=list(STATUS_FILL))

    def page_workflow(self, s, root):
        with Db(self.app.pool) as db:
            jobs = db.rows(Q_WF_JOBS, (root, WF_MAX_JOBS + 1))
            if not any(j["job_id"] == root for j in jobs):
                raise Refused(404, f"no job {root} (or not in a queue you may see)")
            more = len(jobs) > WF_MAX_JOBS
            jobs = jobs[:WF_MAX_JOBS]
            edges = [(r["parent"], r["child"])
                     for r in db.rows(Q_WF_EDGES, ([j["job_id"] for j in jobs],))]
            st = db.one("SELECT w.* FROM jobq.workflow_status(%s::bigint) w", (root,))
        self.render("workflow.html", f"Workflow of job {root}", "/workflows", s, jobs=jobs, st=st,
                    more=more, max_jobs=WF_MAX_JOBS, root=root, g=wf_layout(jobs, edges),
                    states=list(STATUS_FILL), fills=STATUS_FILL)

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
                elif op == "discard":
                    j = job_id()
                    done = db.value("SELECT jobq.discard(%s::bigint)", (j,))
                    if done:
                        s.flash("ok", f"job {j} discarded")
                    else:
                        st = db.value("SELECT j.status FROM jobq.jobs j WHERE j.job_id = %s", (j,))
                        s.flash("error", f"job {j} is {st or 'gone'}; only failed or cancelled jobs can be discarded")
                elif op == "discard_selected":
                    ids = [int(v) for v in f.get("job_id", []) if v.isdigit()]
                    if not ids:
                        s.flash("error", "no job selected")
                        return
                    with db.conn.transaction():
                        n = sum(1 for j in ids if db.value("SELECT jobq.discard(%s::bigint)", (j,)))
                    s.flash("ok", f"{n} of {len(ids)} selected jobs discarded")
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


def main(argv=None):
    p = argparse.ArgumentParser(prog="jobq web", description="the jobq dashboard")
    p.add_argument("--port", type=int, default=8080, help="TCP port (0: any free one)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    p.add_argument("--read-only", action="store_true", help="show, offer no actions")
    p.add_argument("--password-file", help="file whose first line is the password")
    args = p.parse_args(argv)
    if waitress is None or jinja2 is None:
        print(f"jobq web: Python module {MISSING} is missing: apt-get install python3-waitress "
              "python3-jinja2", file=sys.stderr)
        return 3
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
    sock = socket.socket(socket.AF_INET6 if family_v6 else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1" if args.bind == "localhost" else args.bind, args.port))
    except OSError as x:
        print(f"jobq web: cannot listen on {args.bind}:{args.port}: {x}", file=sys.stderr)
        return 3
    port = sock.getsockname()[1]
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


if __name__ == "__main__":
    sys.exit(main())
