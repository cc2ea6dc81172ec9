"""Tests of the jobq Python library against a real server (test/clients/python/run.sh).

JOBQ_TEST_DSN names the server, directly or through PgBouncer in transaction
mode (JOBQ_TEST_VIA = direct | pgbouncer); JOBQ_TEST_DIRECT_DSN the server
itself, for making databases.  Every test works in queues of its own, some
in databases of their own (SQL_ASCII, LATIN1, a small jobq.max_result_size,
jobq 0.2.0, a short jobq.worker_gone_after).
Handlers write what they did to a ledger table (job, attempt, start and
finish on the database clock), and the checks read the ledger and jobq.jobs.
Prints "ok - ..." / "not ok - ..." per test and "N passed, N failed" last.
"""

import asyncio
import datetime
import decimal
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from contextlib import asynccontextmanager, contextmanager

import psycopg
from psycopg import sql as pgsql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import jobq

VIA = os.environ.get("JOBQ_TEST_VIA", "direct")
DSN = os.environ.get("JOBQ_TEST_DSN", "")
DIRECT_DSN = os.environ.get("JOBQ_TEST_DIRECT_DSN", DSN)
POOLER = VIA == "pgbouncer"
HERE = os.path.dirname(os.path.abspath(__file__))


def connect(autocommit=True, dsn=None):
    return jobq.connect(dsn or DSN, pooler=POOLER, autocommit=autocommit)


_local = threading.local()


def db(dsn=None):
    """A connection of this thread's own (handlers run on threads), to DSN
    or to dsn."""
    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    conn = conns.get(dsn)
    if conn is None or conn.closed:
        conn = conns[dsn] = connect(dsn=dsn)
    return conn


def q(sql, params=(), dsn=None):
    """Run one statement; all rows."""
    cur = db(dsn).execute(sql, params)
    return cur.fetchall() if cur.description else []


def q1(sql, params=(), dsn=None):
    rows = q(sql, params, dsn)
    return rows[0][0] if rows else None


def database(name, encoding="UTF8", settings=(), setup=(), version=None):
    """A database of the test's own, made afresh (through the server itself)
    with jobq (of that version, default the newest) and the ledger, then
    `setup`; returns its DSN (the way DSN goes: directly or through
    PgBouncer).  settings: ALTER DATABASE ... SET pairs."""
    ident = pgsql.Identifier(name)
    with psycopg.connect(DIRECT_DSN, autocommit=True) as c:
        c.execute(pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        c.execute(pgsql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING {}"
                          " LC_COLLATE 'C' LC_CTYPE 'C'").format(ident, pgsql.Literal(encoding)))
        for k, v in settings:
            c.execute(pgsql.SQL("ALTER DATABASE {} SET {} = {}").format(
                ident, pgsql.Identifier(*k.split(".")), pgsql.Literal(v)))
    with psycopg.connect(make_conninfo(DIRECT_DSN, dbname=name), autocommit=True,
                         client_encoding="UTF8") as c:
        c.execute(pgsql.SQL("CREATE EXTENSION jobq{}").format(
            pgsql.SQL(" VERSION {}").format(pgsql.Literal(version)) if version else pgsql.SQL("")))
        c.execute("CREATE TABLE ledger (id serial PRIMARY KEY, queue text, job_id bigint,"
                  " kind text, attempt int, started timestamptz, finished timestamptz)")
        for s in setup:
            c.execute(s)
    return make_conninfo(DSN, dbname=name)


class LogRecords(logging.Handler):
    """The records of the jobq logger while installed; from level on when
    given (else as the logger is: WARNING)."""

    def __init__(self, level=None):
        super().__init__(logging.DEBUG)
        self.records = []
        self.level_wanted = level
        self.level_was = None

    def emit(self, record):
        self.records.append(record)

    def __enter__(self):
        logger = logging.getLogger("jobq")
        logger.addHandler(self)
        if self.level_wanted is not None:
            self.level_was = logger.level
            logger.setLevel(self.level_wanted)
        return self

    def __exit__(self, *exc):
        logger = logging.getLogger("jobq")
        logger.removeHandler(self)
        if self.level_was is not None:
            logger.setLevel(self.level_was)

    def at(self, level, *words):
        """The messages at level that contain every word."""
        return [r.getMessage() for r in self.records
                if r.levelno == level and all(w in r.getMessage() for w in words)]


def started(job, dsn=None):
    """Record in the ledger that an attempt of job started."""
    job.ledger_id = q1("INSERT INTO ledger (queue, job_id, kind, attempt, started)"
                       " VALUES (%s, %s, %s, %s, clock_timestamp()) RETURNING id",
                       (job.queue, job.id, job.kind, job.attempt), dsn)


def finished(job, dsn=None):
    q("UPDATE ledger SET finished = clock_timestamp() WHERE id = %s", (job.ledger_id,), dsn)


def poll(fn, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if fn():
            return True
        time.sleep(0.05)
    return False


class Proxy:
    """A proxy in front of what DSN names (the server or PgBouncer), on a
    Unix socket of its own; dsn is its conninfo.  kill_all() cuts every
    connection (what a server restart does); while down is set, new
    connections are closed at once (a server that is not there yet).
    trap(text) makes the next message that contains text go through to the
    server, then cuts its connection instead of passing the answer on (the
    statement committed, the client cannot know: in doubt); trapped counts
    the statements so cut."""

    def __init__(self):
        up = conninfo_to_dict(DSN)
        self.upstream = os.path.join(up["host"], ".s.PGSQL.%s" % up.get("port", 5432))
        self.dir = tempfile.mkdtemp(prefix="proxy-")
        self.dsn = make_conninfo(DSN, host=self.dir, port=5432)
        self.down = False
        self.trapped = 0
        self._traps = []
        self._pairs = set()
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(os.path.join(self.dir, ".s.PGSQL.5432"))
        self._listener.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def trap(self, text):
        with self._lock:
            self._traps.append(text.encode())

    def kill_all(self):
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._cut(pair)

    def close(self):
        self._listener.close()
        self.kill_all()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return              # closed
            if self.down:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX)
            try:
                server.connect(self.upstream)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.add(pair)
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if src is pair.client:
                    with self._lock:
                        for t in self._traps:
                            if t in data:
                                self._traps.remove(t)
                                pair.armed = True
                                break
                elif pair.armed:            # the answer of a trapped statement
                    with self._lock:
                        self.trapped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        self._cut(pair)

    def _cut(self, pair):
        with self._lock:
            self._pairs.discard(pair)
        for s in (pair.client, pair.server):
            try:
                s.shutdown(socket.SHUT_RDWR)    # wakes the other pump
            except OSError:
                pass
            s.close()


class _Pair:
    """A client's connection to the proxy and the proxy's to the server."""

    def __init__(self, client, server):
        self.client, self.server = client, server
        self.armed = False          # a trapped statement went through


@contextmanager
def running(worker):
    """Run worker on a thread for the duration of the block."""
    codes = []
    t = threading.Thread(target=lambda: codes.append(worker.run(install_signals=False)),
                         daemon=True)
    t.start()
    try:
        yield codes
    finally:
        worker.stop()
        t.join(30)


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        q("CREATE TABLE IF NOT EXISTS ledger (id serial PRIMARY KEY, queue text, job_id bigint, kind text,"
          " attempt int, started timestamptz, finished timestamptz)")
        q("CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, what text)")

    def setUp(self):
        self.queue = "%s_%s" % (VIA, self._testMethodName)
        self.events = []
        q("SELECT jobq.configure(%s, max_retries => 2, backoff_base => '50 ms',"
          " backoff_cap => '100 ms')", (self.queue,))

    def worker(self, dsn=None, **kw):
        kw.setdefault("concurrency", 4)
        kw.setdefault("lease", 10)
        kw.setdefault("wait", 1)
        kw.setdefault("grace", 5)
        return jobq.Worker(dsn or DSN, queues=self.queue, pooler=POOLER,
                           on_event=self.events.append, **kw)

    def status(self, job_id, dsn=None):
        return q("SELECT status, retry_count, last_error, result FROM jobq.jobs"
                 " WHERE job_id = %s", (job_id,), dsn)[0]

    def most_at_once(self):
        """The most attempts of the queue running at one instant in the ledger: +1 at a
        start, -1 at a finish."""
        return q1("SELECT max(s) FROM (SELECT sum(d) OVER (ORDER BY t, d"
                  "   ROWS UNBOUNDED PRECEDING) AS s FROM ("
                  "   SELECT started t, 1 d FROM ledger WHERE queue = %s"
                  "   UNION ALL SELECT finished, -1 FROM ledger WHERE queue = %s) e) x",
                  (self.queue, self.queue))

    def drained(self, timeout=20.0, dsn=None):
        return poll(lambda: q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                               " AND status IN ('pending', 'running')", (self.queue,), dsn) == 0,
                    timeout)


class Producer(Base):
    def test_enqueue_in_callers_transaction(self):
        """a job enqueued in a rolled-back transaction never existed; committed, it does"""
        with connect(autocommit=False) as conn:
            try:
                with conn.transaction():
                    conn.execute("INSERT INTO orders (what) VALUES ('lost')")
                    r = jobq.enqueue(conn, "order.confirm", {"n": 1}, queue=self.queue)
                    self.assertTrue(r.created)
                    raise RuntimeError("payment declined")
            except RuntimeError:
                pass
            self.assertEqual(q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s",
                                (self.queue,)), 0)
            self.assertEqual(q1("SELECT count(*) FROM orders WHERE what = 'lost'"), 0)
            with conn.transaction():
                conn.execute("INSERT INTO orders (what) VALUES (%s)", (self.queue,))
                with conn.cursor() as cur:          # a cursor works as well
                    r = jobq.enqueue(cur, "order.confirm", {"n": 2}, queue=self.queue,
                                     idempotency_key=self.queue + "-2")
        self.assertEqual(q("SELECT job_id, kind, payload FROM jobq.jobs WHERE queue = %s",
                           (self.queue,)), [(r.job_id, "order.confirm", {"n": 2})])

    def test_options_and_idempotency(self):
        """priority labels, run_at from the database clock, keys, enqueue_many in order"""
        with connect() as conn:
            a = jobq.enqueue(conn, "k", {"x": 1}, queue=self.queue, priority="high",
                             run_at=datetime.timedelta(hours=1), max_retries=0,
                             idempotency_key=self.queue + "-a", concurrency_key="c1")
            b = jobq.enqueue(conn, "k", {"x": 9}, queue=self.queue,
                             idempotency_key=self.queue + "-a")
            self.assertEqual(b, jobq.Enqueued(a.job_id, False))
            many = jobq.enqueue_many(conn, "m", [{"i": i} for i in range(5)],
                                     queue=self.queue,
                                     idempotency_keys=["%s-m%d" % (self.queue, i % 3)
                                                       for i in range(5)])
        self.assertEqual([m.created for m in many], [True, True, True, False, False])
        self.assertEqual(many[3].job_id, many[0].job_id)
        self.assertEqual(q("SELECT priority, max_retries, payload, run_at > now() + '50 min'"
                           " FROM jobq.jobs WHERE job_id = %s", (a.job_id,)),
                         [(20, 0, {"x": 1}, True)])
        self.assertEqual(q("SELECT array_agg(payload->>'i' ORDER BY job_id) FROM jobq.jobs"
                           " WHERE queue = %s AND kind = 'm'", (self.queue,))[0][0],
                         ["0", "1", "2"])

    def test_pool_and_async(self):
        """a pool (anything with connection()) and the async producer"""
        class Pool:
            @contextmanager
            def connection(self):
                with connect(autocommit=False) as conn:
                    yield conn
                    conn.commit()
        r = jobq.enqueue(Pool(), "p", {}, queue=self.queue)

        async def produce():
            kw = {"prepare_threshold": None} if POOLER else {}
            async with await psycopg.AsyncConnection.connect(DSN, **kw) as conn:
                async with conn.transaction():
                    rs = await jobq.enqueue_many_async(conn, "p", [{}, {}], queue=self.queue)
                try:
                    async with conn.transaction():
                        await jobq.enqueue_async(conn, "p", {"gone": 1}, queue=self.queue)
                        raise RuntimeError("roll back")
                except RuntimeError:
                    pass
                return rs
        rs = asyncio.run(produce())
        self.assertEqual(q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s", (self.queue,)), 3)
        self.assertEqual(len({r.job_id} | {x.job_id for x in rs}), 3)


class Workers(Base):
    def test_registry_dispatches_three_kinds(self):
        """three kinds, each to its handler (one of them async); a kind without a handler is not claimed"""
        w = self.worker()

        @w.handler("email.send")
        def email(job):
            started(job)
            finished(job)
            return {"handled": "email", "to": job.payload["to"]}

        @w.handler("image.resize")
        async def image(job):
            await asyncio.sleep(0.01)
            return {"handled": "image", "width": job.payload["width"]}

        w.handle("report.build", lambda job: {"handled": "report"})
        with connect() as conn:
            jobq.enqueue_many(conn, "email.send", [{"to": "a%d" % i} for i in range(5)],
                              queue=self.queue)
            jobq.enqueue_many(conn, "image.resize", [{"width": i} for i in range(5)],
                              queue=self.queue)
            jobq.enqueue(conn, "report.build", queue=self.queue)
            other = jobq.enqueue(conn, "video.transcode", queue=self.queue)
        with running(w):
            self.assertTrue(poll(lambda: q1(
                "SELECT count(*) FROM jobq.jobs WHERE queue = %s AND status = 'completed'",
                (self.queue,)) == 11))
        self.assertEqual(q("SELECT kind, result->>'handled', count(*) FROM jobq.jobs"
                           " WHERE queue = %s AND status = 'completed' GROUP BY 1, 2 ORDER BY 1",
                           (self.queue,)),
                         [("email.send", "email", 5), ("image.resize", "image", 5),
                          ("report.build", "report", 1)])
        self.assertEqual(q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s AND kind ="
                            " 'email.send' AND result->>'to' = payload->>'to'", (self.queue,)), 5)
        self.assertEqual(self.status(other.job_id)[:2], ("pending", 0))
        self.assertEqual(q1("SELECT claimed_at FROM jobq.jobs WHERE job_id = %s",
                            (other.job_id,)), None)
        self.assertEqual(sum(e.name == "completed" for e in self.events), 11)

    def test_workflow_split_and_callback(self):
        """a handler splits its batch into two blocked halves and a fan-in callback;
        the halves run after it completes, the callback after both, and reads their results"""
        w = self.worker()

        @w.handler("batch")
        def batch(job):
            items = job.payload["items"]
            if len(items) <= 2:
                return {"sum": sum(items)}
            with connect() as conn:
                half = len(items) // 2
                parts = [jobq.enqueue(conn, "batch", {"items": part}, queue=self.queue,
                                      depends_on=[job.id]).job_id
                         for part in (items[:half], items[half:])]
                jobq.enqueue(conn, "batch.done", {"of": job.id}, queue=self.queue,
                             depends_on=parts, on_parent_failure="run")
            return {"split": parts}

        @w.handler("batch.done")
        def done(job):
            rows = q("SELECT status, result FROM jobq.parent_results(%s)", (job.id,))
            return {"total": sum(r[1]["sum"] for r in rows if r[0] == "completed")}

        with connect() as conn:
            root = jobq.enqueue(conn, "batch", {"items": [1, 2, 3, 4]}, queue=self.queue)
            with self.assertRaises(ValueError):
                jobq.enqueue(conn, "x", queue=self.queue, depends_on=[root.job_id],
                             on_parent_failure="maybe")
        with running(w):
            self.assertTrue(poll(lambda: q1(
                "SELECT completed FROM jobq.workflow_status(%s)", (root.job_id,)) == 4))
        self.assertEqual(q("SELECT total, completed, can_finish FROM jobq.workflow_status(%s)",
                           (root.job_id,)), [(4, 4, True)])
        self.assertEqual(q("SELECT result FROM jobq.jobs WHERE queue = %s AND kind = 'batch.done'",
                           (self.queue,)), [({"total": 10},)])

    def test_concurrency_limit(self):
        """at most `concurrency` jobs run at once (ledger), and they do run side by side"""
        w = self.worker(concurrency=3)

        @w.handler("work")
        def work(job):
            started(job)
            time.sleep(0.25)
            finished(job)

        with connect() as conn:
            jobq.enqueue_many(conn, "work", [{}] * 12, queue=self.queue)
        with running(w):
            self.assertTrue(self.drained())
        most = self.most_at_once()
        self.assertEqual(q1("SELECT count(*) FROM ledger WHERE queue = %s AND finished"
                            " IS NOT NULL", (self.queue,)), 12)
        self.assertLessEqual(most, 3)
        self.assertGreaterEqual(most, 2)

    def test_completion_frees_its_place(self):
        """a completed job's place goes to the next claim while its completion commits: with
        concurrency 1, a second job runs while the first one's jobq.complete waits for a row
        lock held here; both are completed once the lock goes"""
        w = self.worker(concurrency=1)
        ran = []
        lock = connect(autocommit=False)

        @w.handler("step")
        def step(job):
            if job.payload["n"] == 1:
                # claimed (the claim wrote the row): hold the row its completion writes
                lock.execute("SELECT 1 FROM jobq.job WHERE job_id = %s FOR UPDATE", (job.id,))
            ran.append(job.payload["n"])

        with connect() as conn:
            first = jobq.enqueue(conn, "step", {"n": 1}, queue=self.queue).job_id
        try:
            with running(w):
                self.assertTrue(poll(lambda: ran == [1], 20))
                with connect() as conn:
                    second = jobq.enqueue(conn, "step", {"n": 2}, queue=self.queue).job_id
                self.assertTrue(poll(lambda: ran == [1, 2], 20),
                                "the second job ran while the first one's completion waited")
                self.assertEqual(self.status(first)[0], "running")
                lock.rollback()
                self.assertTrue(poll(lambda: self.status(first)[0] == "completed"
                                     and self.status(second)[0] == "completed", 20))
        finally:
            lock.close()

    def test_prefetch_waits_its_turn(self):
        """prefetch=2, concurrency 1: two jobs are claimed ahead while the first runs and wait,
        one handler at a time, their leases (1 s) extended while they wait; then they run in
        claim order and complete on their first attempt"""
        w = self.worker(concurrency=1, prefetch=2, lease=1)
        go = threading.Event()

        @w.handler("step")
        def step(job):
            started(job)
            if job.payload["n"] == 1:
                go.wait(20)
            finished(job)

        with connect() as conn:
            ids = [jobq.enqueue(conn, "step", {"n": n}, queue=self.queue, priority=10 - n).job_id
                   for n in (1, 2, 3)]
        with running(w):
            self.assertTrue(poll(lambda: q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                                            " AND status = 'running'", (self.queue,)) == 3))
            time.sleep(2.5)             # past the lease of every waiting job
            self.assertEqual(q1("SELECT count(*) FROM ledger WHERE queue = %s", (self.queue,)), 1)
            self.assertEqual(q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                                " AND status = 'running' AND lease_expires_at > now()",
                                (self.queue,)), 3)
            go.set()
            self.assertTrue(self.drained())
        self.assertEqual([self.status(i)[:2] for i in ids], [("completed", 0)] * 3)
        self.assertEqual(q("SELECT job_id FROM ledger WHERE queue = %s ORDER BY started",
                           (self.queue,)), [(i,) for i in ids])
        self.assertEqual(self.most_at_once(), 1)
        self.assertFalse([e for e in self.events if e.name == "lost"])

    def test_prefetch_handed_back_at_stop(self):
        """at a stop the jobs claimed ahead go back at once, pending with no retry spent, while
        the running job gets its grace; they do not count as unfinished (run() returns 0)"""
        w = self.worker(concurrency=1, prefetch=3, grace=20)
        back = []

        @w.handler("step")
        def step(job):
            if job.payload["n"] == 1:
                poll(lambda: q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                                " AND status = 'running'", (self.queue,)) == 4)
                w.stop()
                back.append(poll(lambda: q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                                            " AND status = 'pending' AND retry_count = 0",
                                            (self.queue,)) == 3))
            return {"n": job.payload["n"]}

        with connect() as conn:
            ids = [jobq.enqueue(conn, "step", {"n": n}, queue=self.queue, priority=10 - n).job_id
                   for n in (1, 2, 3, 4)]
        with running(w) as codes:
            self.assertTrue(poll(lambda: back, 30))
            self.assertTrue(poll(lambda: self.status(ids[0])[0] == "completed"))
        self.assertEqual(back, [True], "the waiting jobs were handed back while the first ran")
        self.assertEqual(codes, [0])
        self.assertEqual(self.status(ids[0])[0], "completed")
        self.assertEqual([self.status(i)[:2] for i in ids[1:]], [("pending", 0)] * 3)
        self.assertEqual(sorted(e.job_id for e in self.events if e.name == "released"), ids[1:])

    def test_prefetch_measured(self):
        """by default the worker claims ahead what its handlers finish during a claim's round
        trip: for no-op jobs Worker.ahead rises above 0, and no more than concurrency handlers
        run at once; for jobs much longer than a claim (3 s: two slots finish one every 1.5 s,
        so a claim would have to take 0.15 s for one to be worth claiming ahead) it stays 0,
        and no job is claimed while every slot runs a handler"""
        for kind, n, seconds, concurrency in (("noop", 600, 0, 4), ("slow", 4, 3.0, 2)):
            w = self.worker(concurrency=concurrency)
            ran = {}                    # job id: (handler start, end), this host's clock

            def handler(job, seconds=seconds, ran=ran):
                t0 = time.time()
                time.sleep(seconds)
                ran[job.id] = (t0, time.time())

            w.handle(kind, handler)
            with connect() as conn:
                jobq.enqueue_many(conn, kind, [{}] * n, queue=self.queue)
            seen = set()

            def sample(w=w, seen=seen, kind=kind):
                seen.add(w.ahead)
                return q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s AND kind = %s"
                          " AND status = 'completed'", (self.queue, kind)) == n

            with running(w):
                self.assertTrue(poll(sample, 60))
            self.assertEqual(len(ran), n)
            edges = sorted([(a, 1) for a, _ in ran.values()] + [(b, -1) for _, b in ran.values()],
                           key=lambda e: (e[0], e[1]))
            at_once, most = 0, 0
            for _, d in edges:
                at_once += d
                most = max(most, at_once)
            self.assertLessEqual(most, concurrency)
            if not seconds:
                self.assertGreater(max(seen), 0, "no-op jobs were not claimed ahead")
                continue
            self.assertEqual(seen, {0})
            # jobs claimed while every slot ran a handler (the server's clock is this host's)
            claimed = q("SELECT job_id, extract(epoch FROM claimed_at)::float8 FROM jobq.jobs"
                        " WHERE queue = %s AND kind = %s", (self.queue, kind))
            ahead = [i for i, t in claimed
                     if sum(1 for j, (a, b) in ran.items() if j != i and a <= t < b) >= concurrency]
            self.assertEqual(ahead, [], "%g s jobs were claimed ahead" % seconds)

    def test_lease_renewed_while_handler_runs(self):
        """a handler slower than its lease keeps the job: extended, completed on attempt 1"""
        w = self.worker(lease=1, concurrency=2)
        seen = []

        @w.handler("slow")
        def slow(job):
            t0 = job.lease_expires_at
            time.sleep(2.5)
            seen.append((t0, q1("SELECT lease_expires_at FROM jobq.jobs WHERE job_id = %s",
                                (job.id,))))
            return {"slept": 2.5}

        with connect() as conn:
            j = jobq.enqueue(conn, "slow", queue=self.queue)
        with running(w):
            self.assertTrue(self.drained())
        self.assertEqual(self.status(j.job_id)[:2], ("completed", 0))
        self.assertEqual(q1("SELECT count(*) FROM jobq.job(%s)", (j.job_id,)), 1)
        self.assertGreater(seen[0][1] - seen[0][0], datetime.timedelta(seconds=1.5))
        self.assertFalse([e for e in self.events if e.name == "lost"])

    def test_lease_lost(self):
        """a job cancelled while its handler runs: the heartbeat sees the lease lost, the outcome is discarded"""
        w = self.worker(lease=0.6)

        @w.handler("long")
        def long(job):
            started(job)
            poll(lambda: job.lost, 10)
            return {"done": True}

        with connect() as conn:
            j = jobq.enqueue(conn, "long", queue=self.queue)
        with running(w):
            self.assertTrue(poll(lambda: q1("SELECT count(*) FROM ledger WHERE job_id = %s",
                                            (j.job_id,)) == 1))
            self.assertTrue(q1("SELECT jobq.cancel(%s)", (j.job_id,)))
            self.assertTrue(poll(lambda: any(e.name == "lost" for e in self.events)))
        self.assertEqual(self.status(j.job_id)[0], "cancelled")
        self.assertFalse([e for e in self.events if e.name == "completed"])

    def test_outcomes(self):
        """outcomes: Permanent, an exception, RetryIn, Snooze, a timeout, a resumed checkpoint"""
        w = self.worker(concurrency=8)

        @w.handler("permanent")
        def permanent(job):
            raise jobq.Permanent("upstream returned 404")

        @w.handler("flaky")
        def flaky(job):
            raise ConnectionError("upstream returned 503")

        @w.handler("retry_in")
        def retry_in(job):
            started(job)
            if job.attempt == 1:
                raise jobq.RetryIn(0.6, "rate limited")
            return {"attempt": job.attempt}

        @w.handler("snooze")
        async def snooze(job):
            if job.saved is None:
                await job.checkpoint({"snoozed": True})
                raise jobq.Snooze(0.3)
            return {"saved": job.saved}

        @w.handler("slow", timeout=0.3)
        def slow(job):
            time.sleep(5)

        @w.handler("import")
        def import_rows(job):
            done = (job.saved or {}).get("done", 0)
            first = done
            while done < 100:
                if job.attempt == 1 and done == 50:
                    raise RuntimeError("connection reset")
                done += 25
                job.checkpoint({"done": done})
            return {"resumed_from": first}

        with connect() as conn:
            ids = {k: jobq.enqueue(conn, k, queue=self.queue).job_id
                   for k in ("permanent", "flaky", "retry_in", "snooze", "import")}
            ids["slow"] = jobq.enqueue(conn, "slow", queue=self.queue, max_retries=0).job_id
        with running(w):
            self.assertTrue(self.drained())
        self.assertEqual(self.status(ids["permanent"])[:3],
                         ("failed", 0, "Permanent: upstream returned 404"))
        self.assertEqual(q("SELECT retry_count, last_error FROM jobq.dead_letter"
                           " WHERE job_id = %s", (ids["flaky"],)),
                         [(2, "ConnectionError: upstream returned 503")])
        self.assertEqual(self.status(ids["retry_in"])[:2], ("completed", 1))
        gap = q1("SELECT max(started) - min(started) FROM ledger WHERE job_id = %s",
                 (ids["retry_in"],))
        self.assertGreaterEqual(gap, datetime.timedelta(seconds=0.55))
        self.assertEqual(self.status(ids["snooze"]), ("completed", 0, None,
                                                      {"saved": {"snoozed": True}}))
        self.assertEqual(self.status(ids["slow"])[:3], ("failed", 0, "timed out after 0.3s"))
        self.assertEqual(self.status(ids["import"])[:2], ("completed", 1))
        self.assertEqual(self.status(ids["import"])[3], {"resumed_from": 50})
        names = sorted(e.name for e in self.events if e.name != "claimed")
        self.assertEqual(names.count("failed"), 3)      # permanent, flaky, slow
        self.assertEqual(names.count("retried"), 4)     # flaky x2, retry_in, import
        self.assertEqual(names.count("snoozed"), 1)

    def test_sigterm_mid_batch(self):
        """SIGTERM mid-batch: jobs finish or are handed back, none lost or doubled (ledger)"""
        with connect() as conn:
            slow = jobq.enqueue_many(conn, "slow", [{}] * 2, queue=self.queue, max_retries=0)
            fast = jobq.enqueue_many(conn, "fast", [{}] * 24, queue=self.queue, max_retries=0)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(HERE, "..", "..", "..", "clients", "python")] +
            [p for p in [os.environ.get("PYTHONPATH")] if p]))
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "sigterm_worker.py"),
                                 self.queue], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            self.assertTrue(poll(lambda: q1(
                "SELECT count(*) FILTER (WHERE kind = 'slow') = 2 AND count(*) >= 6"
                "  FROM ledger WHERE queue = %s", (self.queue,))))
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 1, out)       # 1: some jobs were handed back
        self.assertIn("no more claims", out)
        # none left running, nothing spent: every job is completed or pending
        rows = q("SELECT status, retry_count, count(*) FROM jobq.jobs WHERE queue = %s"
                 " GROUP BY 1, 2 ORDER BY 1", (self.queue,))
        self.assertEqual({s for s, _, _ in rows} - {"completed", "pending"}, set(), (rows, out))
        self.assertEqual({r for _, r, _ in rows}, {0}, rows)
        for s in slow:
            self.assertEqual(self.status(s.job_id)[:2], ("pending", 0))
            self.assertEqual(q("SELECT outcome FROM jobq.job(%s)", (s.job_id,)), [("released",)])
        # mid-batch: some fast jobs were never claimed
        self.assertGreater(q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                              " AND claimed_at IS NULL", (self.queue,)), 0)
        # every fast job that started at SIGTERM finished
        self.assertEqual(q1("SELECT count(*) FROM ledger l JOIN jobq.jobs j USING (job_id)"
                            " WHERE l.queue = %s AND l.kind = 'fast'"
                            " AND (l.finished IS NULL OR j.status <> 'completed')",
                            (self.queue,)), 0)
        # a second worker does the rest
        w = self.worker(concurrency=4)

        @w.handler("fast")
        def fast_h(job):
            started(job)
            finished(job)

        w.handle("slow", fast_h)
        with running(w):
            self.assertTrue(self.drained())
        self.assertEqual(q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                            " AND status = 'completed' AND retry_count = 0", (self.queue,)), 26)
        # none lost, none done twice
        self.assertEqual(q("SELECT count(DISTINCT job_id), count(*) FROM ledger"
                           " WHERE queue = %s AND finished IS NOT NULL", (self.queue,)),
                         [(26, 26)])
        self.assertEqual(len(fast) + len(slow), 26)


class PaceEstimate(unittest.TestCase):
    """The measured number of jobs claimed ahead (jobq.worker._Pace), without a database."""

    def test_long_jobs_over_a_slow_link(self):
        """jobs far longer than a claim are not claimed ahead however slow the link (claims of
        0.2 s, jobs of 10 s: right after two finish, the decaying rate alone said 2 a second,
        one job ahead); jobs far shorter are, up to the slots"""
        from jobq.worker import _Pace
        long_jobs = _Pace()
        for _ in range(3):
            long_jobs.claimed(0.2, True)
        long_jobs.finished(10.0)
        long_jobs.finished(10.0)
        self.assertEqual(long_jobs.ahead(2), 0)
        short = _Pace()
        for _ in range(3):
            short.claimed(0.2, True)
        for _ in range(10):
            short.finished(0.001)
        self.assertEqual(short.ahead(2), 2)


class Failures(Base):
    def test_bad_results_fail_alone(self):
        """a batch with results that are Decimal, datetime, UUID, not JSON (a set) and over
        jobq.max_result_size: converted or failed for good with their real error, alone;
        every other job completes exactly once (ledger), none comes back as "lease expired\""""
        small = database("%s_small_results" % VIA, settings=[("jobq.max_result_size", "1024")])
        q("SELECT jobq.configure(%s, max_retries => 2, backoff_base => '50 ms',"
          " backoff_cap => '100 ms')", (self.queue,), small)
        # a completion that never arrives would come back when its lease
        # expires, and run again: the ledger would show it
        w = self.worker(small, concurrency=16, lease=10)
        results = {
            "decimal": {"total": decimal.Decimal("1.20")},
            "datetime": {"at": datetime.datetime(2024, 5, 1, 12, 30, 15, 250000,
                                                 tzinfo=datetime.timezone.utc),
                         "on": datetime.date(2024, 5, 1), "time": datetime.time(9, 5)},
            "uuid": {"id": uuid.UUID("1b4e28ba-2fa1-11d2-883f-0016d3cca427")},
            "set": {"tags": {"a", "b"}},
            "too_large": {"blob": "x" * 2000},
        }
        normal = ["normal%d" % i for i in range(6)]
        ids = {}
        with connect(dsn=small) as conn:
            for t in list(results) + normal:
                ids[t] = jobq.enqueue(conn, "report", {"t": t}, queue=self.queue).job_id
        everyone = len(ids)
        gate = {}

        @w.handler("report")
        async def report(job):
            started(job, small)
            # all return at once, so that their completions go in one statement
            if "event" not in gate:
                gate["event"], gate["n"] = asyncio.Event(), 0
            gate["n"] += 1
            if gate["n"] >= everyone:
                gate["event"].set()
            try:
                await asyncio.wait_for(gate["event"].wait(), 60)
            except asyncio.TimeoutError:
                pass
            t = job.payload["t"]
            return results.get(t, {"t": t, "é": "Zoë"})

        with LogRecords() as logs, running(w):
            self.assertTrue(self.drained(120, small))
        rows = {t: self.status(i, small) for t, i in ids.items()}
        for t in normal:
            self.assertEqual(rows[t], ("completed", 0, None, {"t": t, "é": "Zoë"}), t)
        # converted by jobq.dumps
        self.assertEqual(rows["decimal"], ("completed", 0, None, {"total": "1.20"}))
        self.assertEqual(rows["datetime"], ("completed", 0, None, {
            "at": "2024-05-01T12:30:15.250000+00:00", "on": "2024-05-01", "time": "09:05:00"}))
        self.assertEqual(rows["uuid"], ("completed", 0, None,
                                        {"id": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}))
        self.assertEqual(q1("SELECT (result->>'total')::numeric FROM jobq.jobs WHERE job_id = %s",
                            (ids["decimal"],), small), decimal.Decimal("1.20"))
        # failed for good (retries were left), with the real error
        self.assertEqual(rows["set"], ("failed", 0, "result not stored: TypeError: Object of"
                                       " type set is not JSON serializable", None))
        self.assertEqual(rows["too_large"][:2], ("failed", 0))
        self.assertRegex(rows["too_large"][2], r"^result not stored: result is too large \(It"
                         r" takes \d+ bytes; jobq.max_result_size is 1024 bytes.\)$")
        # every job ran once; no attempt came back as "lease expired"
        self.assertEqual(q("SELECT job_id, count(*) FROM ledger WHERE queue = %s GROUP BY 1"
                           " HAVING count(*) <> 1", (self.queue,), small), [])
        self.assertEqual(q1("SELECT count(*) FROM ledger WHERE queue = %s", (self.queue,), small),
                         everyone)
        self.assertEqual(q("SELECT job_id, outcome, error FROM jobq.attempt WHERE job_id ="
                           " ANY (%s) AND outcome <> 'failed'", (list(ids.values()),), small), [])
        failed = {e.job_id: e.error for e in self.events if e.name == "failed"}
        self.assertEqual(failed, {ids["set"]: rows["set"][2],
                                  ids["too_large"]: rows["too_large"][2]})
        self.assertEqual(sum(e.name == "completed" for e in self.events), everyone - 2)
        self.assertEqual(len(logs.at(logging.ERROR, "dead (permanent)", "result not stored")), 2)
        # the too-large result was sent with others, and they were completed one by one
        self.assertTrue(logs.at(logging.WARNING, "one by one", "result is too large"),
                        [r.getMessage() for r in logs.records])

    def test_handler_exit_fails_its_job_alone(self):
        """a handler that raises SystemExit (sync, on its thread: a library calling sys.exit)
        or KeyboardInterrupt (async): its job fails by it, and the worker goes on: the job
        running beside them completes, a job enqueued after runs, run() returns 0 at stop
        (it used to raise SystemExit at once, leaving every job in hand to its lease)"""
        w = self.worker(concurrency=3)
        with connect() as conn:
            slow = jobq.enqueue(conn, "slow", {}, queue=self.queue).job_id
            out = jobq.enqueue(conn, "exit", {}, queue=self.queue).job_id
            intr = jobq.enqueue(conn, "interrupt", {}, queue=self.queue).job_id

        @w.handler("slow")
        def slow_h(job):
            time.sleep(1.5)
            return {"ok": 1}

        @w.handler("exit")
        def exit_h(job):
            sys.exit(3)

        @w.handler("interrupt")
        async def interrupt_h(job):
            raise KeyboardInterrupt

        with running(w) as codes:
            self.assertTrue(poll(lambda: self.status(out)[0] == "failed"
                                 and self.status(intr)[0] == "failed", 30),
                            (self.status(out), self.status(intr)))
            self.assertTrue(poll(lambda: self.status(slow)[0] == "completed", 30), self.status(slow))
            with connect() as conn:
                later = jobq.enqueue(conn, "slow", {}, queue=self.queue).job_id
            self.assertTrue(poll(lambda: self.status(later)[0] == "completed", 30), self.status(later))
        self.assertEqual(codes, [0])
        self.assertEqual(self.status(out), ("failed", 2, "SystemExit: 3", None))
        self.assertEqual(self.status(intr), ("failed", 2, "KeyboardInterrupt", None))
        self.assertEqual(q1("SELECT count(*) FROM jobq.attempt WHERE job_id = ANY (%s)"
                            " AND outcome <> 'failed'", ([out, intr],)), 0)

    def test_dashboard_connections_leave_no_session_state(self):
        """the dashboard's connection pool (jobq.web.db.Pool) sets its statement_timeout as a
        startup option, not a SET: through PgBouncer in transaction mode a SET stayed on the
        server connection, and the next client there (LIFO) had the dashboard's 30 s timeout.
        Directly, the dashboard's own connections still have it"""
        from jobq.web.db import Pool
        pool = Pool(size=1, conninfo=DSN)
        conn = pool.connect()
        try:
            mine = conn.execute("SHOW statement_timeout").fetchone()[0]
        finally:
            conn.close()
        self.assertEqual(mine, "0" if POOLER else "30s")
        with connect() as other:
            self.assertEqual(other.execute("SHOW statement_timeout").fetchone()[0], "0")

    def test_bad_delays_refused_when_raised(self):
        """RetryIn and Snooze refuse a delay jobq would refuse (negative, NaN, infinite,
        over 1000 years) when they are made, so the handler's own error fails the job; a
        delay the server refused after the handler ended left the job to its lease"""
        for cls in (jobq.RetryIn, jobq.Snooze):
            for bad in (-5, float("nan"), float("inf"), 1e300, 1000 * 366 * 86400):
                with self.assertRaises(ValueError, msg=(cls, bad)):
                    cls(bad)
            with self.assertRaises(TypeError):
                cls("soon")
            self.assertEqual(cls(0).seconds, 0.0)
            self.assertEqual(cls("2.5").seconds, 2.5)
            self.assertEqual(cls(999 * 365 * 86400).seconds, 999 * 365 * 86400)

    def test_failures_logged_with_their_error(self):
        """failures are logged with their error, at WARNING when retried and ERROR when dead;
        Event.error has it; the stack trace is kept as the attempt's details, at most 16 kB
        of its end"""
        w = self.worker(concurrency=4)

        def call_upstream():
            raise ConnectionError("upstream returned 503")

        @w.handler("flaky")
        def flaky(job):
            call_upstream()

        @w.handler("bad_input")
        async def bad_input(job):
            raise jobq.Permanent("order 42 has no lines")

        unstick = threading.Event()

        # a timeout long enough for its thread to be in the handler on a busy machine
        @w.handler("stuck", timeout=3)
        def stuck(job):
            unstick.wait(60)

        @w.handler("wordy")
        def wordy(job):
            raise ValueError("é" * 20000)   # 40,000 bytes of message

        with connect() as conn:
            flaky_id = jobq.enqueue(conn, "flaky", queue=self.queue, max_retries=1).job_id
            bad_id = jobq.enqueue(conn, "bad_input", queue=self.queue).job_id
            stuck_id = jobq.enqueue(conn, "stuck", queue=self.queue, max_retries=0).job_id
            wordy_id = jobq.enqueue(conn, "wordy", queue=self.queue, max_retries=0).job_id
        try:
            with LogRecords() as logs, running(w):
                self.assertTrue(self.drained(60))
        finally:
            unstick.set()
        flaky_error = "ConnectionError: upstream returned 503"
        self.assertEqual(self.status(flaky_id)[:3], ("failed", 1, flaky_error))
        self.assertEqual(self.status(bad_id)[:3], ("failed", 0, "Permanent: order 42 has no lines"))
        self.assertEqual(self.status(stuck_id)[:3], ("failed", 0, "timed out after 3s"))
        self.assertEqual(self.status(wordy_id)[:2], ("failed", 0))
        self.assertEqual(len(logs.at(logging.WARNING, "job %d (flaky) attempt 1 of 2" % flaky_id,
                                     "will be retried", flaky_error)), 1, logs.records)
        self.assertEqual(len(logs.at(logging.ERROR, "job %d (flaky) attempt 2 of 2" % flaky_id,
                                     "dead (no retries left)", flaky_error)), 1, logs.records)
        self.assertEqual(len(logs.at(logging.ERROR, "job %d (bad_input)" % bad_id,
                                     "dead (permanent)", "order 42 has no lines")), 1)
        self.assertEqual(len(logs.at(logging.ERROR, "job %d (stuck)" % stuck_id,
                                     "dead (no retries left)", "timed out after 3s")), 1)
        self.assertEqual([r.getMessage() for r in logs.records if r.levelno < logging.WARNING
                          and "failed" in r.getMessage()], [])
        # a long message is shortened in the log line
        wordy_log = logs.at(logging.ERROR, "job %d (wordy)" % wordy_id, "dead (no retries left)",
                            "ValueError: ééé", "... (19012 more characters)")
        self.assertEqual(len(wordy_log), 1, logs.records)
        self.assertLess(len(wordy_log[0]), 1200)
        events = [(e.name, e.job_id, e.error) for e in self.events
                  if e.name in ("retried", "failed") and e.job_id != wordy_id]
        self.assertEqual(sorted(events), sorted([
            ("retried", flaky_id, flaky_error), ("failed", flaky_id, flaky_error),
            ("failed", bad_id, "Permanent: order 42 has no lines"),
            ("failed", stuck_id, "timed out after 3s")]))
        rows = dict(q("SELECT job_id, string_agg(details, '|' ORDER BY attempt)"
                      " FROM jobq.attempt WHERE job_id = ANY (%s) GROUP BY 1",
                      ([flaky_id, bad_id, stuck_id, wordy_id],)))
        for attempt in rows[flaky_id].split("|"):
            self.assertIn("Traceback (most recent call last)", attempt)
            self.assertIn("in call_upstream", attempt)
            self.assertTrue(attempt.endswith("ConnectionError: upstream returned 503\n"), attempt)
        self.assertEqual(len(rows[flaky_id].split("|")), 2)
        self.assertIn("in bad_input", rows[bad_id])
        self.assertTrue(rows[bad_id].endswith("jobq.errors.Permanent: order 42 has no lines\n"),
                        rows[bad_id])
        stuck_details = rows[stuck_id]
        self.assertTrue(stuck_details.startswith(
            "the handler was still running here after 3s:"), stuck_details)
        self.assertIn("in stuck", stuck_details)
        self.assertIn("unstick.wait(60)", stuck_details)
        # the end of a long story, cut on a character boundary before the client sent it
        wordy_details = rows[wordy_id]
        self.assertRegex(wordy_details, r"^\[\.\.\. \d+ bytes cut \.\.\.\]\n")
        self.assertTrue(wordy_details.endswith("ééé\n"), wordy_details[-50:])
        self.assertLessEqual(len(wordy_details.encode()), 16 * 1024)
        self.assertGreater(len(wordy_details.encode()), 15 * 1024)


class Reconnect(Base):
    """Lost connections, made on purpose by a Proxy between the worker and
    the server: reports tried again while the database cannot be reached,
    and reports whose connection died after they committed (in doubt), sent
    again with the same lease token."""

    def proxy(self):
        p = Proxy()
        self.addCleanup(p.close)
        return p

    def outcomes(self):
        return [e.name for e in self.events if e.name != "claimed"]

    def test_which_errors(self):
        """which errors are tried again, and which may have committed (lost connections,
        shutdowns and a standby are tried again; refused values and privileges are not)"""
        from jobq.worker import _in_doubt, _transient
        E = psycopg.errors
        lost = psycopg.OperationalError("consuming input failed: server closed the"
                                        " connection unexpectedly")
        for e in (lost, E.AdminShutdown("x"), E.CrashShutdown("x"), E.CannotConnectNow("x"),
                  E.ConnectionFailure("x"), E.ProtocolViolation("x"),
                  E.ReadOnlySqlTransaction("x"), E.TooManyConnections("x")):
            self.assertTrue(_transient(e), repr(e))
        for e in (E.ProgramLimitExceeded("x"), E.InsufficientPrivilege("x"),
                  E.UntranslatableCharacter("x"), E.InvalidTextRepresentation("x"),
                  E.UniqueViolation("x"), E.UndefinedFunction("x"), E.QueryCanceled("x"),
                  ValueError("x")):
            self.assertFalse(_transient(e), repr(e))
        self.assertTrue(_in_doubt(lost))
        self.assertTrue(_in_doubt(E.ProtocolViolation("x")), "PgBouncer lost the server")
        self.assertFalse(_in_doubt(E.AdminShutdown("x")), "the server said it: rolled back")
        self.assertFalse(_in_doubt(E.ReadOnlySqlTransaction("x")))

    def test_report_retried_while_unreachable(self):
        """a report is tried again with backoff while the database cannot be reached
        (connections cut, then refused for 2.5 s): the job is done once, on its attempt, not
        after its lease; the outage is logged once at WARNING and its end at INFO"""
        p = self.proxy()
        w = self.worker(p.dsn, concurrency=1, lease=30)
        go = threading.Event()
        runs = []

        @w.handler("pay")
        def pay(job):
            runs.append(job.id)
            go.wait(30)
            return {"paid": True}

        with connect() as conn:
            job_id = jobq.enqueue(conn, "pay", queue=self.queue, max_retries=0).job_id
        with LogRecords(logging.DEBUG) as logs, running(w):
            self.assertTrue(poll(lambda: runs))
            p.down = True
            p.kill_all()
            go.set()
            time.sleep(2.5)
            p.down = False
            self.assertTrue(poll(lambda: self.outcomes(), 30))
        messages = [r.getMessage() for r in logs.records]
        self.assertEqual(self.outcomes(), ["completed"], messages)
        self.assertEqual(self.status(job_id)[:2], ("completed", 0))
        self.assertEqual(runs, [job_id])
        self.assertEqual(len(logs.at(logging.WARNING, "the database cannot be reached",
                                     "complete job %d" % job_id)), 1, messages)
        self.assertEqual(len(logs.at(logging.WARNING, "the database cannot be reached")), 1,
                         messages)
        self.assertGreaterEqual(len(logs.at(logging.DEBUG, "complete job %d" % job_id,
                                            "trying again")), 2, messages)
        self.assertEqual(len(logs.at(logging.INFO, "the database answers again")), 1, messages)
        self.assertFalse([m for m in messages if "could not report" in m], messages)

    def test_completion_in_doubt(self):
        """a completion whose connection died after it committed is sent again: done, not lost
        (sent again with its token, false means done when the job's row says so)"""
        p = self.proxy()
        w = self.worker(p.dsn, concurrency=1)
        runs = []

        @w.handler("pay")
        async def pay(job):
            runs.append(job.id)
            return {"paid": True}

        p.trap("SELECT jobq.complete(")
        with connect() as conn:
            job_id = jobq.enqueue(conn, "pay", queue=self.queue, max_retries=0).job_id
        with LogRecords(logging.DEBUG) as logs, running(w):
            self.assertTrue(poll(lambda: self.outcomes(), 30))
        messages = [r.getMessage() for r in logs.records]
        self.assertEqual(p.trapped, 1, "the completion was cut after it went through")
        self.assertEqual(self.outcomes(), ["completed"], messages)
        self.assertEqual(runs, [job_id])
        self.assertEqual(self.status(job_id)[:2], ("completed", 0))
        self.assertEqual(len(logs.at(logging.INFO, "job %d: its completion had committed"
                                     " before the connection was lost" % job_id)), 1, messages)
        self.assertFalse([m for m in messages if "lease lost" in m or "could not report" in m],
                         messages)

    def test_failure_in_doubt(self):
        """a failure whose connection died after it committed is not taken for a lost lease
        (sent again with its token, the job's row tells); the retry runs"""
        p = self.proxy()
        w = self.worker(p.dsn, concurrency=1)

        @w.handler("flaky")
        def flaky(job):
            if job.attempt == 1:
                raise RuntimeError("upstream 503")
            return {"attempt": job.attempt}

        p.trap("SELECT jobq.fail(")
        with connect() as conn:
            job_id = jobq.enqueue(conn, "flaky", queue=self.queue, max_retries=2).job_id
        with LogRecords(logging.DEBUG) as logs, running(w):
            self.assertTrue(poll(lambda: self.status(job_id)[0] == "completed", 30))
        messages = [r.getMessage() for r in logs.records]
        self.assertEqual(p.trapped, 1)
        self.assertEqual(self.outcomes(), ["retried", "completed"], messages)
        self.assertEqual(self.status(job_id)[:3], ("completed", 1, "RuntimeError: upstream 503"))
        self.assertEqual(len(logs.at(logging.INFO, "job %d: its failure had committed before"
                                     " the connection was lost" % job_id)), 1, messages)
        self.assertFalse([m for m in messages if "lease lost" in m or "could not report" in m],
                         messages)


    def jobs(self):
        return q("SELECT job_id, idempotency_key FROM jobq.job WHERE queue = %s ORDER BY job_id",
                 (self.queue,))

    def test_enqueue_in_doubt_on_pool(self):
        """an enqueue on a pool whose COMMIT's answer was lost is sent again: created False
        (with its key: the job that exists, one job; enqueue_many on an autocommit pool and
        enqueue_async likewise; the outage logged once)"""
        p = self.proxy()
        pool = _Pool(p.dsn)
        key = self.queue + "-k"
        p.trap("COMMIT")
        with LogRecords(logging.DEBUG) as logs:
            r = jobq.enqueue(pool, "pay", {"n": 1}, queue=self.queue, idempotency_key=key)
        messages = [m.getMessage() for m in logs.records]
        self.assertEqual(p.trapped, 1, "the COMMIT went through, its answer was cut")
        self.assertEqual(self.jobs(), [(r.job_id, key)])
        self.assertEqual(r.created, False, "the first try had created it")
        self.assertEqual(len(logs.at(logging.WARNING, "the database cannot be reached",
                                     "enqueue pay")), 1, messages)
        self.assertEqual(len(logs.at(logging.INFO, "the database answers again")), 1, messages)

        p.trap("jobq.enqueue_many(")
        keys = [self.queue + "-m1", self.queue + "-m2"]
        rs = jobq.enqueue_many(_Pool(p.dsn, autocommit=True), "pay", [{}, {}], queue=self.queue,
                               idempotency_keys=keys)
        self.assertEqual(p.trapped, 2)
        self.assertEqual([x.created for x in rs], [False, False])
        self.assertEqual(self.jobs()[1:], [(x.job_id, k) for x, k in zip(rs, keys)])

        p.trap("COMMIT")
        ra = asyncio.run(jobq.enqueue_async(_AsyncPool(p.dsn), "pay", queue=self.queue,
                                            idempotency_key=self.queue + "-a"))
        self.assertEqual(p.trapped, 3)
        self.assertEqual(ra.created, False)
        self.assertEqual(self.jobs()[3:], [(ra.job_id, self.queue + "-a")])

    def test_enqueue_retried_while_unreachable(self):
        """an enqueue with a key is tried again while the database cannot be reached
        (2 s, on a pool: one job once it answers; retry_for=0 never tries again)"""
        p = self.proxy()
        p.down = True
        threading.Timer(2.0, lambda: setattr(p, "down", False)).start()
        t0 = time.monotonic()
        r = jobq.enqueue(_Pool(p.dsn), "pay", queue=self.queue, idempotency_key=self.queue + "-k")
        self.assertGreaterEqual(time.monotonic() - t0, 1.9)
        self.assertTrue(r.created)
        self.assertEqual(self.jobs(), [(r.job_id, self.queue + "-k")])
        p.down = True
        with self.assertRaises(psycopg.OperationalError) as cm:
            jobq.enqueue(_Pool(p.dsn), "pay", queue=self.queue, idempotency_key=self.queue + "-0",
                         retry_for=0)
        self.assertIs(getattr(cm.exception, "jobq_in_doubt", None), False)

    def test_enqueue_without_key_not_retried(self):
        """an enqueue without a key is never sent twice: the error says if it may have committed
        (a key for some jobs only likewise; on the caller's connection nothing is sent again)"""
        p = self.proxy()
        p.trap("COMMIT")
        with self.assertRaises(psycopg.OperationalError) as cm:
            jobq.enqueue(_Pool(p.dsn), "pay", queue=self.queue)
        self.assertIs(getattr(cm.exception, "jobq_in_doubt", None), True)
        self.assertEqual(len(self.jobs()), 1, "it had committed, once")
        p.trap("COMMIT")
        with self.assertRaises(psycopg.OperationalError) as cm:
            jobq.enqueue_many(_Pool(p.dsn), "pay", [{}, {}], queue=self.queue,
                              idempotency_keys=[self.queue + "-x", None])
        self.assertIs(getattr(cm.exception, "jobq_in_doubt", None), True)
        self.assertEqual(len(self.jobs()), 3)
        p.down = True
        with self.assertRaises(psycopg.OperationalError) as cm:
            jobq.enqueue(_Pool(p.dsn), "pay", queue=self.queue)
        self.assertIs(getattr(cm.exception, "jobq_in_doubt", None), False, "never sent")
        p.down = False
        # the caller's transaction: gone with its connection; not sent again
        with jobq.connect(p.dsn, pooler=POOLER) as conn:
            p.trap("jobq.enqueue(")
            with self.assertRaises(psycopg.OperationalError):
                with conn.transaction():
                    jobq.enqueue(conn, "pay", queue=self.queue, idempotency_key=self.queue + "-t")
        self.assertEqual(p.trapped, 3)
        self.assertEqual(len(self.jobs()), 3, "rolled back")


class _Pool:
    """A pool as the producer sees one: a new connection per use, committed
    when it is given back (psycopg's own context manager)."""

    def __init__(self, dsn, autocommit=False):
        self.dsn, self.autocommit = dsn, autocommit

    @contextmanager
    def connection(self):
        with jobq.connect(self.dsn, pooler=POOLER, autocommit=self.autocommit) as conn:
            yield conn


class _AsyncPool:
    def __init__(self, dsn):
        self.dsn = dsn

    @asynccontextmanager
    async def connection(self):
        kw = {"prepare_threshold": None} if POOLER else {}
        async with await psycopg.AsyncConnection.connect(self.dsn, **kw) as conn:
            yield conn


class Registry(Base):
    def test_app_workers(self):
        """jobq.app_workers shows the running worker (library, version, host, pid,
        concurrency, kinds) with the jobs in its hand, refreshes it while the jobs run, and
        no longer shows it once it stopped"""
        # gone after 12 s: the worker refreshes its row every 3 s
        dsn = database("%s_app_workers" % VIA, settings=[("jobq.worker_gone_after", "12s")])
        q("SELECT jobq.configure(%s)", (self.queue,), dsn)
        worker_id = "%s-%s-%d" % (VIA, self.queue, os.getpid())
        w = self.worker(dsn, worker_id=worker_id, concurrency=4)
        release = threading.Event()

        @w.handler("hold")
        def hold(job):
            started(job, dsn)
            release.wait(60)
            finished(job, dsn)
            return {"held": True}

        @w.handler("other")
        async def other(job):
            return None

        seen = ("SELECT queues, info, started_at, last_seen_at, jobs_in_hand, gone"
                "  FROM jobq.app_workers WHERE worker_id = %s")
        with connect(dsn=dsn) as conn:
            ids = [j.job_id for j in jobq.enqueue_many(conn, "hold", [{}] * 3, queue=self.queue)]
        try:
            with running(w) as codes:
                self.assertTrue(poll(lambda: [r[4] for r in q(seen, (worker_id,), dsn)] == [3],
                                     60), q(seen, (worker_id,), dsn))
                queues, info, started_at, last_seen, _, _ = q(seen, (worker_id,), dsn)[0]
                self.assertEqual(queues, [self.queue])
                self.assertEqual(
                    {k: info.get(k) for k in ("library", "version", "host", "pid",
                                              "concurrency", "kinds")},
                    {"library": "jobq-python", "version": jobq.__version__,
                     "host": socket.gethostname(), "pid": os.getpid(), "concurrency": 4,
                     "kinds": ["hold", "other"]})
                # refreshed while the jobs run (its heartbeat), the same registration
                self.assertTrue(poll(lambda: q(seen, (worker_id,), dsn)[0][3] > last_seen, 60))
                row = q(seen, (worker_id,), dsn)[0]
                self.assertEqual((row[2], row[4]), (started_at, 3))
                release.set()
                self.assertTrue(self.drained(60, dsn))
                self.assertTrue(poll(lambda: q(seen, (worker_id,), dsn)[0][4] == 0, 60))
            self.assertEqual(codes, [0])
        finally:
            release.set()
        self.assertEqual(q(seen, (worker_id,), dsn), [])      # unregistered
        self.assertEqual(q("SELECT status, count(*) FROM jobq.jobs WHERE job_id = ANY (%s)"
                           " GROUP BY 1", (ids,), dsn), [("completed", 3)])
        self.assertEqual(q1("SELECT count(*) FROM ledger WHERE finished IS NOT NULL", (), dsn), 3)

    def test_unregister_after_refresh_in_flight(self):
        """a registry refresh still running on the server when the worker stops does not
        put the worker's row back after it unregistered: the stop waits for it (a
        refresh held by a trigger waiting for the test's advisory lock; cancelled and
        left to the server, it commits after the unregister)"""
        dsn = database("%s_app_workers_stop" % VIA, settings=[("jobq.worker_gone_after", "6s")],
                       setup=["CREATE FUNCTION public.hold_refresh() RETURNS trigger"
                              " LANGUAGE plpgsql AS $$BEGIN"
                              " PERFORM pg_advisory_xact_lock_shared(4242); RETURN NULL; END$$",
                              "CREATE TRIGGER hold_refresh BEFORE UPDATE ON jobq.app_worker"
                              " FOR EACH STATEMENT EXECUTE FUNCTION public.hold_refresh()"])
        direct = make_conninfo(DIRECT_DSN, dbname=conninfo_to_dict(dsn)["dbname"])
        worker_id = "%s-%s-%d" % (VIA, self.queue, os.getpid())
        w = self.worker(dsn, worker_id=worker_id, lease=30)

        @w.handler("none")
        async def none(job):
            return None

        row = "SELECT count(*) FROM jobq.app_worker WHERE worker_id = %s"
        held = ("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                "   AND objid = 4242 AND NOT granted")
        codes = []
        t = threading.Thread(target=lambda: codes.append(w.run(install_signals=False)),
                             daemon=True)
        with psycopg.connect(direct, autocommit=True) as lock:
            t.start()
            try:
                self.assertTrue(poll(lambda: q1(row, (worker_id,), direct) == 1, 30))
                lock.execute("SELECT pg_advisory_lock(4242)")
                # the next refresh (every 1.5 s here) waits for the lock
                self.assertTrue(poll(lambda: q1(held, (), direct) == 1, 30))
                w.stop()
                time.sleep(1.5)
                lock.execute("SELECT pg_advisory_unlock(4242)")
                t.join(60)
            finally:
                w.stop()
                lock.execute("SELECT pg_advisory_unlock_all()")
                t.join(60)
        self.assertEqual(codes, [0])
        self.assertTrue(poll(lambda: q1(held, (), direct) == 0 and q1(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%register_worker%%'"
            "   AND state = 'active' AND pid <> pg_backend_pid()", (), direct) == 0, 30))
        self.assertEqual(q1(row, (worker_id,), direct), 0)

    def test_older_server(self):
        """on a database with jobq 0.2.0 (no fail details, no registry) the worker works as
        before: failures through the five-argument jobq.fail, nothing registered, no
        complaint"""
        dsn = database("%s_jobq_020" % VIA, version="0.2.0")
        self.assertEqual(q1("SELECT extversion FROM pg_extension WHERE extname = 'jobq'", (),
                            dsn), "0.2.0")
        q("SELECT jobq.configure(%s, max_retries => 1, backoff_base => '50 ms',"
          " backoff_cap => '100 ms')", (self.queue,), dsn)
        w = self.worker(dsn)

        @w.handler("flaky")
        def flaky(job):
            started(job, dsn)
            raise ConnectionError("upstream returned 503")

        @w.handler("fine")
        def fine(job):
            started(job, dsn)
            return {"total": decimal.Decimal("2.50")}

        with connect(dsn=dsn) as conn:
            flaky_id = jobq.enqueue(conn, "flaky", queue=self.queue).job_id
            fine_id = jobq.enqueue(conn, "fine", queue=self.queue).job_id
        with LogRecords() as logs, running(w) as codes:
            self.assertTrue(self.drained(60, dsn))
        self.assertEqual(codes, [0])
        self.assertEqual(self.status(flaky_id, dsn)[:3],
                         ("failed", 1, "ConnectionError: upstream returned 503"))
        self.assertEqual(self.status(fine_id, dsn), ("completed", 0, None, {"total": "2.50"}))
        self.assertEqual(q1("SELECT count(*) FROM ledger", (), dsn), 3)
        self.assertEqual(len(logs.at(logging.ERROR, "job %d (flaky)" % flaky_id, "dead")), 1)
        self.assertEqual([r.getMessage() for r in logs.records
                          if "app_workers" in r.getMessage() or "register" in r.getMessage()],
                         [])


class Encodings(Base):
    def encoding_round_trip(self, encoding, text):
        """Jobs whose kind and payload have non-ASCII text, in a database of
        this encoding: each runs once, its handler sees them as they were
        sent, its result comes back the same."""
        dsn = database("%s_%s" % (VIA, encoding.lower()), encoding=encoding)
        kind = "wörk.%s" % text
        payload = {"name": "Zoë %s" % text, "city": "München", "n": 1}
        w = self.worker(dsn)
        seen = []

        @w.handler(kind)
        def handle(job):
            started(job, dsn)
            seen.append((job.kind, job.payload))
            return {"kind": job.kind, "payload": job.payload, "saw": "ß%s" % text}

        with connect(dsn=dsn) as conn:
            a = jobq.enqueue(conn, kind, payload, queue=self.queue).job_id
        # a psycopg connection in the database's own client encoding
        with psycopg.connect(dsn, autocommit=True, client_encoding=encoding,
                             **({"prepare_threshold": None} if POOLER else {})) as conn:
            if encoding == "SQL_ASCII":     # psycopg encodes text as ASCII there
                b = None
            else:
                b = jobq.enqueue(conn, kind, payload, queue=self.queue).job_id
        with running(w):
            self.assertTrue(self.drained(60, dsn))
            time.sleep(0.3)
        for job_id in (a, b):
            if job_id is None:
                continue
            self.assertEqual(self.status(job_id, dsn), (
                "completed", 0, None, {"kind": kind, "payload": payload, "saw": "ß%s" % text}))
            self.assertEqual(q1("SELECT count(*) FROM jobq.job(%s)", (job_id,), dsn), 1)
            self.assertEqual(q1("SELECT kind FROM jobq.jobs WHERE job_id = %s", (job_id,), dsn),
                             kind)
        self.assertEqual(seen, [(kind, payload)] * (1 if b is None else 2))
        self.assertEqual(q1("SELECT count(*) FROM ledger WHERE queue = %s", (self.queue,), dsn),
                         len(seen))
        return dsn, kind

    def test_sql_ascii(self):
        """a SQL_ASCII database: kinds and payloads with non-ASCII text round-trip, no job
        loops; a payload that is not UTF-8 fails its job at once, for good"""
        dsn, kind = self.encoding_round_trip("SQL_ASCII", "日本 ✓")
        # bytes a LATIN1 client left there: {"a":"é"} in LATIN1
        bad = q1("SELECT job_id FROM jobq.enqueue(%s, convert_from('\\x7b2261223a22e9227d'::bytea,"
                 " 'SQL_ASCII')::jsonb, queue => %s)", (kind, self.queue), dsn)
        w = self.worker(dsn)
        w.handle(kind, lambda job: {"ran": True})
        with running(w):
            self.assertTrue(self.drained(60, dsn))
        status = self.status(bad, dsn)
        self.assertEqual(status[:2], ("failed", 0))
        self.assertIn("the job's payload is not valid UTF-8", status[2])
        self.assertEqual(q1("SELECT count(*) FROM jobq.job(%s)", (bad,), dsn), 1)
        self.assertEqual(q1("SELECT count(*) FROM ledger WHERE job_id = %s", (bad,), dsn), 0)

    def test_latin1(self):
        """a LATIN1 database: kinds and payloads with non-ASCII text round-trip (through a UTF8
        connection and one in LATIN1), no job loops; a result LATIN1 cannot hold fails alone"""
        dsn, kind = self.encoding_round_trip("LATIN1", "é")
        with connect(dsn=dsn) as conn:
            ok = jobq.enqueue(conn, kind, {"t": "fine"}, queue=self.queue).job_id
            bad = jobq.enqueue(conn, kind, {"t": "bad"}, queue=self.queue).job_id
        w = self.worker(dsn)
        w.handle(kind, lambda job: {"t": "日本" if job.payload["t"] == "bad" else "é"})
        with running(w):
            self.assertTrue(self.drained(60, dsn))
        self.assertEqual(self.status(ok, dsn)[:2], ("completed", 0))
        status = self.status(bad, dsn)
        self.assertEqual(status[:2], ("failed", 0))
        self.assertRegex(status[2], r'^result not stored: character with byte sequence .* in'
                         r' encoding "UTF8" has no equivalent in encoding "LATIN1"')


class Throughput(Base):
    @unittest.skipUnless(os.environ.get("JOBQ_THROUGHPUT"), "JOBQ_THROUGHPUT not set")
    def test_throughput(self):
        """jobs/s with no-op handlers at concurrency 8, and the SQL-only worker"""
        import throughput
        print("\n" + throughput.measure(DSN, POOLER, self.queue), file=sys.stderr)


class Result(unittest.TextTestResult):
    """Prints ok / not ok per test."""

    def addSuccess(self, test):
        super().addSuccess(test)
        print("ok - %s: %s" % (VIA, test.shortDescription() or test.id()), flush=True)

    def _bad(self, test, err):
        print("not ok - %s: %s (%s)" % (VIA, test.shortDescription() or test.id(), test.id()),
              flush=True)
        print("#   " + self._exc_info_to_string(err, test).replace("\n", "\n#   "), flush=True)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._bad(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._bad(test, err)


def main():
    sys.path.insert(0, HERE)
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="#   log: %(message)s")
    for h in logging.getLogger().handlers:     # a test's LogRecords(DEBUG) prints nothing more
        h.setLevel(logging.WARNING)
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    only = sys.argv[1:]
    if only:
        suite = unittest.TestSuite(t for s in suite for t in s
                                   if any(o in t.id() for o in only))
    with open(os.devnull, "w") as devnull:
        r = unittest.TextTestRunner(stream=devnull, resultclass=Result).run(suite)
    bad = len(r.failures) + len(r.errors)
    print("%d passed, %d failed" % (r.testsRun - bad - len(r.skipped), bad))
    return 0 if r.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
