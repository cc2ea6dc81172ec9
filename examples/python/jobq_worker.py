"""jobq_worker: a small jobq worker for Python, over psycopg 3.

A Worker claims jobs of its queue in batches with jobq.claim(..., wait => ...),
runs each job's handler (looked up by kind in a dict) on a thread pool, keeps
the leases of running jobs alive from a heartbeat thread (jobq.extend), and
reports the outcome:

    handler returns a value         jobq.complete(job_id, token, result)
    handler raises PermanentError   jobq.fail(..., retryable => false): the dead letter
    handler raises RateLimited(s)   jobq.snooze(job_id, token, s): again after s
                                    seconds, without spending a retry
    handler raises anything else    jobq.fail(..., retryable => true): retried with
                                    the queue's backoff while retries are left

A handler saves progress with job.save_checkpoint(data); the next attempt of the
job finds it in job.checkpoint.

SIGTERM (or SIGINT) stops claiming at once (a claim blocked in its wait is
cancelled, which rolls it back: it claimed nothing), lets the running jobs
finish and report, and returns 0.  A second signal, or shutdown_timeout
seconds, abandons the jobs still running: each is failed with
"abandoned at shutdown" and retry_in => 0, so it runs again at once (as after
an expired lease, that attempt counts as a retry), and run() returns 1.

Every call is its own transaction (autocommit) and no session state is used,
not even prepared statements, so the worker works through PgBouncer in
transaction mode.  The connection comes from the libpq environment (PGHOST,
PGPORT, PGDATABASE, PGUSER, ...) or a conninfo string.
"""

import datetime
import logging
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
from psycopg.types.json import Jsonb

log = logging.getLogger("jobq")


class PermanentError(Exception):
    """Raised by a handler when retrying cannot help (bad input, 4xx)."""


class RateLimited(Exception):
    """Raised by a handler when the upstream said "later": snooze the job."""

    def __init__(self, retry_after, message="rate limited"):
        super().__init__(message)
        self.retry_after = float(retry_after)


class LeaseLost(Exception):
    """The job's lease was lost (expired and reaped, or the job cancelled)."""


def _interval(seconds):
    """A number of seconds as a timedelta, which psycopg sends as an interval."""
    return datetime.timedelta(seconds=seconds)


class Job:
    """One claimed job, as its handler sees it."""

    def __init__(self, worker, row):
        (self.id, self.lease_token, self.kind, self.payload,
         self.retry_count, self.max_retries, self.checkpoint) = row
        self._worker = worker
        self.lost = False          # set by the heartbeat when the lease is gone

    def save_checkpoint(self, data):
        """Store progress (a JSON object) for the next attempt of this job.

        Raises LeaseLost when the lease is no longer ours: stop working then.
        """
        ok = self._worker._call(
            "SELECT jobq.checkpoint(%s, %s, %s)",
            (self.id, self.lease_token, Jsonb(data)))
        if not ok:
            self.lost = True
            raise LeaseLost("job %d: lease lost" % self.id)
        self.checkpoint = data

    def __repr__(self):
        return "<Job %d %s retry %d>" % (self.id, self.kind, self.retry_count)


class Worker:
    """Claims and runs the jobs of one queue; see the module docstring."""

    def __init__(self, handlers, queue="default", conninfo="", worker_id=None,
                 batch=10, concurrency=None, lease=30.0, wait=5.0,
                 shutdown_timeout=30.0):
        self.handlers = dict(handlers)
        self.queue = queue
        self.conninfo = conninfo
        self.worker_id = worker_id or "%s:%d" % (socket.gethostname(), os.getpid())
        self.batch = batch
        self.concurrency = concurrency or batch
        self.lease = float(lease)
        self.wait = float(wait)
        self.shutdown_timeout = float(shutdown_timeout)
        self._claim_conn = None    # used by the main thread only: claims
        self._conn = None          # shared by handlers and heartbeat (psycopg locks it)
        self._conn_lock = threading.Lock()
        self._inflight = {}        # job id -> Job, guarded by _cv
        self._cv = threading.Condition()
        self._stopping = False     # set by the first signal
        self._abandon = False      # set by the second signal
        self._claiming = False     # the main thread is inside a claim

    # --- connections ---------------------------------------------------------

    def _connect(self):
        # prepare_threshold=None: no server-side prepared statements, which
        # would be session state (PgBouncer's transaction mode has none)
        return psycopg.connect(self.conninfo, autocommit=True,
                               prepare_threshold=None,
                               application_name="jobq-worker")

    def _call(self, sql, params):
        """Run one statement on the shared connection; return the first column."""
        with self._conn_lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = self._connect()
            conn = self._conn
        row = conn.execute(sql, params).fetchone()
        return row[0] if row else None

    # --- signals -------------------------------------------------------------

    def _on_signal(self, signum, frame):
        if not self._stopping:
            self._stopping = True
            log.info("%s: signal %d: no more claims; finishing %d running job(s)",
                     self.worker_id, signum, len(self._inflight))
            # Cancel a claim blocked in its wait.  A claim that already
            # returned is not affected: its jobs are then run and reported.
            if self._claiming and self._claim_conn is not None:
                try:
                    self._claim_conn.cancel()
                except Exception:
                    pass
        else:
            self._abandon = True
            log.warning("%s: second signal: abandoning running jobs", self.worker_id)

    # --- the loop ------------------------------------------------------------

    def run(self):
        """Work until a signal; return the process exit status (0: graceful)."""
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="job")
        heartbeat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
        heartbeat.start()
        kinds = sorted(self.handlers)
        log.info("%s: queue %s, kinds %s, batch %d, lease %gs, wait %gs",
                 self.worker_id, self.queue, ",".join(kinds), self.batch,
                 self.lease, self.wait)
        try:
            while not self._stopping:
                with self._cv:
                    free = self.concurrency - len(self._inflight)
                    if free <= 0:
                        self._cv.wait(0.2)
                        continue
                for job in self._claim(min(free, self.batch), kinds):
                    with self._cv:
                        self._inflight[job.id] = job
                    pool.submit(self._run_job, job)
            return self._drain()
        finally:
            pool.shutdown(wait=False)
            for s, h in old.items():
                signal.signal(s, h)

    def _claim(self, n, kinds):
        """Claim up to n jobs, blocking up to self.wait; [] on a cancel or error."""
        try:
            if self._claim_conn is None or self._claim_conn.closed or self._claim_conn.broken:
                self._claim_conn = self._connect()
            self._claiming = True
            if self._stopping:      # the signal came before the flag was set
                return []
            rows = self._claim_conn.execute(
                "SELECT job_id, lease_token, kind, payload, retry_count, max_retries,"
                "       checkpoint"
                "  FROM jobq.claim(%s, worker_id => %s, batch => %s, lease => %s,"
                "                  kinds => %s, wait => %s)",
                (self.queue, self.worker_id, n, _interval(self.lease), kinds,
                 _interval(self.wait))).fetchall()
            return [Job(self, r) for r in rows]
        except psycopg.errors.QueryCanceled:
            return []               # our own cancel at shutdown: nothing was claimed
        except psycopg.Error as e:
            log.error("%s: claim failed: %s; retrying in 1 s", self.worker_id, e)
            time.sleep(1)
            return []
        finally:
            self._claiming = False

    def _drain(self):
        """After the first signal: wait for running jobs; 0 if all finished."""
        deadline = time.monotonic() + self.shutdown_timeout
        with self._cv:
            while self._inflight and not self._abandon and time.monotonic() < deadline:
                self._cv.wait(0.2)
            left = list(self._inflight.values())
        for job in left:
            try:
                self._call("SELECT jobq.fail(%s, %s, %s, retry_in => '0')",
                           (job.id, job.lease_token, "abandoned at shutdown"))
                log.warning("%s: job %d (%s) abandoned, to run again",
                            self.worker_id, job.id, job.kind)
            except psycopg.Error as e:
                log.error("%s: job %d: could not release it (%s); its lease will expire",
                          self.worker_id, job.id, e)
        log.info("%s: stopped%s", self.worker_id,
                 "" if not left else ", %d job(s) abandoned" % len(left))
        return 0 if not left else 1

    def _heartbeat(self):
        """Extend the lease of every running job every lease/3 seconds."""
        period = max(self.lease / 3.0, 0.1)
        while True:
            time.sleep(period)
            with self._cv:
                jobs = list(self._inflight.values())
            if not jobs:
                continue
            try:
                with self._conn_lock:
                    if self._conn is None or self._conn.closed or self._conn.broken:
                        self._conn = self._connect()
                    conn = self._conn
                rows = conn.execute(
                    "SELECT t.id, jobq.extend(t.id, t.token, %s)"
                    "  FROM unnest(%s::bigint[], %s::bigint[]) AS t(id, token)",
                    (_interval(self.lease), [j.id for j in jobs],
                     [j.lease_token for j in jobs])).fetchall()
            except psycopg.Error as e:
                log.error("%s: heartbeat failed: %s", self.worker_id, e)
                continue
            for job_id, expires in rows:
                if expires is None:
                    with self._cv:
                        job = self._inflight.get(job_id)
                    if job is not None:     # not merely finished meanwhile
                        job.lost = True
                        log.warning("%s: job %d: lease lost", self.worker_id, job_id)

    def _run_job(self, job):
        """Run one job's handler and report its outcome."""
        t0 = time.monotonic()
        outcome = "?"
        try:
            try:
                result = self.handlers[job.kind](job)
            except PermanentError as e:
                outcome = self._call(
                    "SELECT jobq.fail(%s, %s, %s, retryable => false)",
                    (job.id, job.lease_token, "%s: %s" % (type(e).__name__, e)))
            except RateLimited as e:
                until = self._call("SELECT jobq.snooze(%s, %s, %s)",
                                   (job.id, job.lease_token, _interval(e.retry_after)))
                outcome = "snoozed" if until else None
            except LeaseLost:
                outcome = None
            except Exception as e:
                log.debug("job %d failed", job.id, exc_info=True)
                outcome = self._call(
                    "SELECT jobq.fail(%s, %s, %s)",
                    (job.id, job.lease_token, "%s: %s" % (type(e).__name__, e)))
            else:
                ok = self._call("SELECT jobq.complete(%s, %s, %s)",
                                (job.id, job.lease_token,
                                 None if result is None else Jsonb(result)))
                outcome = "completed" if ok else None
            if outcome is None:
                log.warning("%s: job %d (%s): lease lost, outcome discarded",
                            self.worker_id, job.id, job.kind)
            else:
                log.info("%s: job %d (%s) attempt %d: %s in %.3fs", self.worker_id,
                         job.id, job.kind, job.retry_count + 1, outcome,
                         time.monotonic() - t0)
        except psycopg.Error as e:
            # The report did not reach the database: the lease expires and the
            # job runs again (at least once).
            log.error("%s: job %d: could not report (%s)", self.worker_id, job.id, e)
        finally:
            with self._cv:
                self._inflight.pop(job.id, None)
                self._cv.notify_all()
