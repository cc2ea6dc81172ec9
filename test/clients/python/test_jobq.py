"""Tests of the jobq Python library against a real server (test/clients/python/run.sh).

JOBQ_TEST_DSN names the server, directly or through PgBouncer in transaction
mode (JOBQ_TEST_VIA = direct | pgbouncer).  Every test works in queues of its
own.  Handlers write what they did to a ledger table (job, attempt, start and
finish on the database clock), and the checks read the ledger and jobq.jobs.
Prints "ok - ..." / "not ok - ..." per test and "N passed, N failed" last.
"""

import asyncio
import datetime
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import unittest
from contextlib import contextmanager

import psycopg

import jobq

VIA = os.environ.get("JOBQ_TEST_VIA", "direct")
DSN = os.environ.get("JOBQ_TEST_DSN", "")
POOLER = VIA == "pgbouncer"
HERE = os.path.dirname(os.path.abspath(__file__))


def connect(autocommit=True):
    return jobq.connect(DSN, pooler=POOLER, autocommit=autocommit)


_local = threading.local()


def db():
    """A connection of this thread's own (handlers run on threads)."""
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = connect()
    return conn


def q(sql, params=()):
    """Run one statement; all rows."""
    cur = db().execute(sql, params)
    return cur.fetchall() if cur.description else []


def q1(sql, params=()):
    rows = q(sql, params)
    return rows[0][0] if rows else None


def started(job):
    """Record in the ledger that an attempt of job started."""
    job.ledger_id = q1("INSERT INTO ledger (queue, job_id, kind, attempt, started)"
                       " VALUES (%s, %s, %s, %s, clock_timestamp()) RETURNING id",
                       (job.queue, job.id, job.kind, job.attempt))


def finished(job):
    q("UPDATE ledger SET finished = clock_timestamp() WHERE id = %s", (job.ledger_id,))


def poll(fn, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if fn():
            return True
        time.sleep(0.05)
    return False


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

    def worker(self, **kw):
        kw.setdefault("concurrency", 4)
        kw.setdefault("lease", 10)
        kw.setdefault("wait", 1)
        kw.setdefault("grace", 5)
        return jobq.Worker(DSN, queues=self.queue, pooler=POOLER,
                           on_event=self.events.append, **kw)

    def status(self, job_id):
        return q("SELECT status, retry_count, last_error, result FROM jobq.jobs"
                 " WHERE job_id = %s", (job_id,))[0]

    def drained(self, timeout=20.0):
        return poll(lambda: q1("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                               " AND status IN ('pending', 'running')", (self.queue,)) == 0,
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
        # the most attempts running at one instant: +1 at a start, -1 at a finish
        most = q1("SELECT max(s) FROM (SELECT sum(d) OVER (ORDER BY t, d"
                  "   ROWS UNBOUNDED PRECEDING) AS s FROM ("
                  "   SELECT started t, 1 d FROM ledger WHERE queue = %s"
                  "   UNION ALL SELECT finished, -1 FROM ledger WHERE queue = %s) e) x",
                  (self.queue, self.queue))
        self.assertEqual(q1("SELECT count(*) FROM ledger WHERE queue = %s AND finished"
                            " IS NOT NULL", (self.queue,)), 12)
        self.assertLessEqual(most, 3)
        self.assertGreaterEqual(most, 2)

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
