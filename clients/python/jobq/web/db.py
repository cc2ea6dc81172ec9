"""jobq/web/db.py -- the dashboard's connections and its shared, cached answers.

A small pool of autocommit connections made from the libpq environment
(the dashboard acts as that role), a request's use of one (Db), a query's
answer reused by every request for a few seconds (Cached), and the
per-minute counts of finished jobs behind the charts (Minutes).
"""

import datetime
import os
import queue as queuelib
import threading
import time

import psycopg

from .queries import Q_FINISHED, Q_MINUTE

LIVE_TTL = 4.0          # seconds the live (indexed) answers are reused
STATS_TTL = 30.0        # seconds jobq.queue_stats (counts of pending and dead jobs) is reused
GROUPS_TTL = 60.0       # seconds the dead letter's groups (every failed job) are reused
REREAD = 2              # minutes of the chart counted again at every refresh (late commits)
KEEP = 1440             # minutes of the chart kept (the day)


STATEMENT_TIMEOUT = "30s"   # the longest statement of the dashboard's connections


class Pool:
    """A few autocommit connections, made from the libpq environment (or conninfo)."""

    def __init__(self, size=4, conninfo=""):
        self.idle = queuelib.LifoQueue()
        self.size = size
        self.conninfo = conninfo
        self.lock = threading.Lock()
        self.made = 0

    def connect(self):
        # no prepared statements: a generic plan of a job_id probe could
        # be a sequential scan (and a pooler in transaction mode keeps none).
        # The timeout is a startup option, not a SET: behind a pooler in
        # transaction mode a SET stays on the server connection and holds
        # for whichever client gets it next.  A pooler that refuses the
        # option (PgBouncer does, unless told to ignore it) gets a
        # connection without it.
        kw = dict(autocommit=True, prepare_threshold=None, application_name="jobq web")
        options = (os.environ.get("PGOPTIONS", "") + f" -c statement_timeout={STATEMENT_TIMEOUT}").strip()
        try:
            return psycopg.connect(self.conninfo, options=options, **kw)
        except psycopg.OperationalError as x:
            if "unsupported startup parameter" not in str(x):
                raise
        return psycopg.connect(self.conninfo, **kw)

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


def db_message(err):
    """The primary message (and SQLSTATE) of a database error."""
    diag = getattr(err, "diag", None)
    msg = (diag.message_primary if diag is not None and diag.message_primary else str(err)).strip()
    code = getattr(err, "sqlstate", None)
    return f"{msg} ({code})" if code else msg
