#!/usr/bin/env python3
"""Long-horizon benchmark adapter for jobq, for the portable queue harness
(hardbyte/postgresql-job-queue-benchmarking, CONTRIBUTING_ADAPTERS.md).

jobq is a PostgreSQL extension (C); this adapter drives it the way an
application does, through jobq's own Python library (clients/python/jobq):

* producer: ``jobq.enqueue_many_async`` (one ``jobq.enqueue_many`` statement
  per batch of up to PRODUCER_BATCH_MAX jobs), paced by the harness's
  ``ENQUEUE <n>`` tokens on stdin (PRODUCER_PACING=harness) or by its own
  wall-clock credit loop (PRODUCER_PACING=adapter), or to a target depth
  (PRODUCER_MODE=depth-target);
* consumer: one ``jobq.Worker`` with ``concurrency=WORKER_COUNT``: claims with
  ``jobq.claim(..., wait => ...)`` (a claim sleeps in the server when the
  queue is empty, woken through shared memory), runs an async handler that
  sleeps JOB_WORK_MS, and acknowledges every job with its own
  ``jobq.complete(job_id, lease_token)`` (the library sends the completions
  that finish together in one statement, one jobq.complete call per job, each
  fenced by that job's lease token).  Reconnection after a backend kill or a
  server restart is the library's (claims and reports are retried on a new
  connection); a job whose worker died is handed back by jobq's reaper when
  its lease (JOBQ_LEASE_S) expires;
* depth: due pending jobs ("available, not yet claimed": what
  ``jobq.queue_stats.ready`` counts) and running ones, counted in jobq's
  tables (DEPTH_SQL below says why not through the view);
* telemetry: JSONL on stdout (descriptor, then every SAMPLE_EVERY_S,
  clock-aligned, one record per metric), logs on stderr.

Only the Python standard library, psycopg 3 (Debian: python3-psycopg) and
jobq's library are needed.  Percentiles come from a bounded-memory
log-linear histogram (``LogLinearHistogram`` below: exact to 1 us below
2.048 ms, then 1024 sub-buckets per power of two, so every recorded value is
within 0.1 % of the reported one: three significant figures, as HdrHistogram
with 3 digits), kept per second over a rolling 30 s window.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

ADAPTER_DIR = Path(__file__).resolve().parent
SYSTEM = os.environ.get("JOBQ_BENCH_SYSTEM", "jobq")
QUEUE_NAME = os.environ.get("JOBQ_BENCH_QUEUE", "long_horizon_bench")
JOB_KIND = "bench.job"

# The tables a job's life touches (enqueue: job + ready; claim: ready ->
# job; complete: job; a reaped or failed attempt: attempt; a retry's
# backoff: scheduled).  jobq.job first: the harness's active-readers phase
# scans the first event table, and jobq.job is the table an application's
# analytics would read.
STATIC_EVENT_TABLES = ["jobq.job", "jobq.ready", "jobq.attempt", "jobq.scheduled"]
STATIC_EVENT_INDEXES = [
    "jobq.job_pkey",
    "jobq.ready_claim_idx",
    "jobq.job_running_lease_idx",
    "jobq.job_finished_idx",
]
EXTENSIONS = ["jobq"]

# The depth, read from jobq's own tables: ready = the queue's rows in
# jobq.ready plus its due rows in jobq.scheduled (what jobq.queue_stats calls
# "ready"), running = its jobs under a lease.  Not through jobq.queue_stats:
# on PostgreSQL 17 and 18, before jobq 0.3.1, a query of that view filtered
# by queue keeps the view's per-queue totals over every retained job
# (completed, last hour) that it does not select, two scans of jobq.job per
# call, where 15 drops them; at the harness's rates that made the
# depth-target producer the bottleneck.
DEPTH_SQL = (
    "SELECT (SELECT count(*) FROM jobq.ready WHERE queue = %(q)s)"
    " + (SELECT count(*) FROM jobq.scheduled WHERE queue = %(q)s AND run_at <= now()),"
    " (SELECT count(*) FROM jobq.job WHERE queue = %(q)s AND lease_expires_at IS NOT NULL)")
# The depth is read on connections of its own that count through the
# indexes.  jobq.ready is small and churns (a row in and out per job), so the
# planner's cost model picks a sequential or bitmap scan, which reads every
# page the churn left (2,000 pages for 4,000 rows, 2.5-5 ms a count) and,
# as a bitmap scan, marks no dead index entry; an index-only scan counts the
# same rows in about 1 ms and marks the dead entries it meets, so the next
# count skips them.  Measured in the harness's peak cell at W = 16: the
# depth-target producer counts before every batch, and with the planner's
# choice these counts took a fifth of the server's CPU.
DEPTH_OPTIONS = "-c enable_seqscan=off -c enable_bitmapscan=off"


def _import_jobq():
    """jobq's Python library: installed (pip / python3-jobq / the Docker
    image), else from this checkout (bench/portable/jobq-bench ->
    clients/python), else from JOBQ_PYTHON_PATH."""
    try:
        import jobq  # noqa: F401
        return jobq
    except ImportError:
        pass
    for cand in (os.environ.get("JOBQ_PYTHON_PATH"),
                 str(ADAPTER_DIR.parent.parent.parent / "clients" / "python")):
        if cand and (Path(cand) / "jobq" / "__init__.py").exists():
            sys.path.insert(0, cand)
            import jobq  # noqa: F811
            return jobq
    raise SystemExit("[jobq] the jobq Python library is not importable: install"
                     " clients/python or set JOBQ_PYTHON_PATH")


jobq = _import_jobq()
import psycopg  # noqa: E402  (after jobq, which says what is missing)


# ─── env ─────────────────────────────────────────────────────────────────


def env_int(key: str, default: int) -> int:
    value = os.environ.get(key)
    return int(float(value)) if value not in (None, "") else default


def env_float(key: str, default: float) -> float:
    value = os.environ.get(key)
    return float(value) if value not in (None, "") else default


def env_str(key: str, default: str) -> str:
    value = os.environ.get(key)
    return value if value not in (None, "") else default


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("[jobq] DATABASE_URL must be set")
    return url


def read_control_rate(default: float) -> float:
    """The harness's high-load hook writes the offered rate to
    PRODUCER_RATE_CONTROL_FILE; re-read on every producer tick."""
    path = os.environ.get("PRODUCER_RATE_CONTROL_FILE")
    if not path:
        return default
    try:
        with open(path) as fh:
            return float(fh.read().strip())
    except (OSError, ValueError):
        return default


def instance_id() -> int:
    try:
        return int(os.environ.get("BENCH_INSTANCE_ID", "0"))
    except ValueError:
        return 0


def observer_enabled() -> bool:
    """Only replica 0 emits the global observations (depth, target rate)."""
    return instance_id() == 0


OBSERVER_METRICS = frozenset({
    "queue_depth", "running_depth", "retryable_depth", "scheduled_depth",
    "total_backlog", "producer_target_rate",
})


# ─── output ──────────────────────────────────────────────────────────────

_out_lock = threading.Lock()


def emit(record: dict) -> None:
    record.setdefault("instance_id", instance_id())
    line = json.dumps(record)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def now_iso(ts: float | None = None) -> str:
    d = (_dt.datetime.now(_dt.timezone.utc) if ts is None
         else _dt.datetime.fromtimestamp(ts, _dt.timezone.utc))
    return d.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log(msg: str) -> None:
    print("[jobq] " + msg, file=sys.stderr, flush=True)


# ─── bounded-memory percentiles ──────────────────────────────────────────


class LogLinearHistogram:
    """Counts of non-negative integer values (here microseconds) in
    log-linear buckets, HdrHistogram's layout with 3 significant figures:
    values below 2048 have a bucket each (exact); above, every power of two
    [2^k, 2^(k+1)) is cut into 1024 equal sub-buckets, so a bucket's width is
    at most 1/1024 of its values (< 0.1 %).  Sparse (a dict), so its memory
    is bounded by the number of distinct buckets hit, at most ~1024 per
    power of two (~40 k for 1 us .. 1 day), whatever the number of values."""

    SUB = 1024          # sub-buckets per power of two above 2 * SUB
    __slots__ = ("counts", "total", "max")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.max = 0

    @classmethod
    def index(cls, v: int) -> int:
        if v < 2 * cls.SUB:
            return v
        shift = v.bit_length() - 11         # v >> shift in [1024, 2047]
        return 2 * cls.SUB + (shift - 1) * cls.SUB + ((v >> shift) - cls.SUB)

    @classmethod
    def highest_equivalent(cls, i: int) -> int:
        """The largest value counted in bucket i."""
        if i < 2 * cls.SUB:
            return i
        shift = (i - 2 * cls.SUB) // cls.SUB + 1
        sub = (i - 2 * cls.SUB) % cls.SUB + cls.SUB
        return ((sub + 1) << shift) - 1

    def record(self, v: int) -> None:
        if v < 0:
            v = 0
        i = self.index(v)
        self.counts[i] = self.counts.get(i, 0) + 1
        self.total += 1
        if v > self.max:
            self.max = v

    def merge(self, other: "LogLinearHistogram") -> None:
        for i, c in other.counts.items():
            self.counts[i] = self.counts.get(i, 0) + c
        self.total += other.total
        self.max = max(self.max, other.max)

    def percentiles(self, ps: tuple[float, ...]) -> list[int]:
        """HdrHistogram's definition: the highest value equivalent to the
        smallest recorded value with at least ceil(p * total) values at or
        below it (never above the largest recorded value)."""
        if self.total == 0:
            return [0 for _ in ps]
        wants = [max(1, math.ceil(p * self.total - 1e-9)) for p in ps]
        out: list[int | None] = [None] * len(ps)
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            for k, w in enumerate(wants):
                if out[k] is None and seen >= w:
                    out[k] = min(self.highest_equivalent(i), self.max)
            if all(o is not None for o in out):
                break
        return [o if o is not None else self.max for o in out]


class RollingLatency:
    """Latencies over a rolling window: one histogram per second, the last
    window_s + 1 kept; a percentile merges those of the window."""

    def __init__(self, window_s: int = 30) -> None:
        self.window_s = window_s
        self.slots: dict[int, LogLinearHistogram] = {}

    def record_ms(self, ms: float, now: float | None = None) -> None:
        sec = int(now if now is not None else time.monotonic())
        h = self.slots.get(sec)
        if h is None:
            h = self.slots[sec] = LogLinearHistogram()
            for old in [s for s in self.slots if s < sec - self.window_s]:
                del self.slots[old]
        h.record(int(round(ms * 1000.0)))

    def percentiles_ms(self, ps: tuple[float, ...], now: float | None = None) -> list[float]:
        sec = int(now if now is not None else time.monotonic())
        merged = LogLinearHistogram()
        for s in [s for s in self.slots if s < sec - self.window_s]:
            del self.slots[s]
        for s, h in self.slots.items():
            if s > sec - self.window_s:
                merged.merge(h)
        return [v / 1000.0 for v in merged.percentiles(ps)]


# ─── setup ───────────────────────────────────────────────────────────────


async def connect(**kw) -> psycopg.AsyncConnection:
    kw.setdefault("application_name", "jobq-bench")
    kw.setdefault("client_encoding", "UTF8")
    return await psycopg.AsyncConnection.connect(database_url(), autocommit=True, **kw)


async def setup(lease_s: float) -> dict:
    """Check that jobq is installed and loaded, configure the bench queue
    (idempotent: a restarted replica picks up the jobs already queued), and
    find the tables for the descriptor.  Connects with patience: the harness
    may launch us while the server is still coming up."""
    deadline = time.monotonic() + 60.0
    while True:
        try:
            conn = await connect()
            break
        except psycopg.OperationalError as e:
            if time.monotonic() > deadline:
                raise
            log("waiting for the database: %s" % str(e).strip().splitlines()[0])
            await asyncio.sleep(1.0)
    try:
        cur = await conn.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'jobq'")
        row = await cur.fetchone()
        if row is None:
            # The harness runs CREATE EXTENSION from adapter.json's
            # "extensions"; a standalone run gets it here.
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS jobq")
            except psycopg.Error as e:
                raise SystemExit(
                    "[jobq] CREATE EXTENSION jobq failed: %s (the server needs jobq"
                    " installed and shared_preload_libraries = 'jobq')" % e)
            row = await (await conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'jobq'")).fetchone()
        extversion = row[0]
        try:
            preload = (await (await conn.execute(
                "SELECT current_setting('shared_preload_libraries')")).fetchone())[0]
        except psycopg.errors.InsufficientPrivilege:
            # superusers and pg_read_all_settings only; the harness's role is one
            log("cannot read shared_preload_libraries (not a superuser): not checked")
            preload = "jobq"
        if "jobq" not in [p.strip().strip('"') for p in preload.split(",")]:
            raise SystemExit(
                "[jobq] the server does not load jobq (shared_preload_libraries = %r):"
                " expired leases would never be reaped; add jobq and restart it" % preload)
        await conn.execute("SELECT jobq.configure(%s, lease => %s)",
                           (QUEUE_NAME, _dt.timedelta(seconds=lease_s)))
        rows = await (await conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'jobq' AND c.relkind IN ('r', 'p')"
            " ORDER BY 1")).fetchall()
        tables = [r[0] for r in rows]
        rows = await (await conn.execute(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'jobq' AND c.relkind = 'i' ORDER BY 1")).fetchall()
        indexes = [r[0] for r in rows]
        server_version = (await (await conn.execute("SHOW server_version")).fetchone())[0]
    finally:
        await conn.close()
    missing = [t for t in STATIC_EVENT_TABLES if t not in tables]
    if missing:
        log("warning: jobq %s has no %s (adapter.json names them)" % (extversion, missing))
    return {
        "extversion": extversion,
        # static order first (the first is what active-readers scans), then
        # whatever else the installed version has
        "event_tables": STATIC_EVENT_TABLES + [t for t in tables if t not in STATIC_EVENT_TABLES],
        "event_indexes": STATIC_EVENT_INDEXES + [i for i in indexes
                                                 if i not in STATIC_EVENT_INDEXES],
        "server_version": server_version,
    }


def adapter_version() -> str:
    """jobq library version, plus the checkout's commit when there is one
    (or JOBQ_BENCH_REVISION, baked into the Docker image)."""
    rev = os.environ.get("JOBQ_BENCH_REVISION", "")
    if not rev:
        try:
            import subprocess
            rev = subprocess.run(["git", "-C", str(ADAPTER_DIR), "rev-parse", "--short=12", "HEAD"],
                                 capture_output=True, text=True, timeout=5).stdout.strip()
        except Exception:
            rev = ""
    return "jobq-python %s%s" % (jobq.__version__, (" @ " + rev) if rev else "")


# ─── the run ─────────────────────────────────────────────────────────────



async def drop_conn(conn_box: list) -> None:
    """Close the connection in conn_box[0], if any, whatever state it is in,
    and leave the box empty (the next use connects again)."""
    conn, conn_box[0] = conn_box[0], None
    if conn is not None:
        try:
            await conn.close()
        except Exception:
            pass

class Bench:
    def __init__(self) -> None:
        self.sample_every_s = max(1, env_int("SAMPLE_EVERY_S", 5))
        self.producer_mode = env_str("PRODUCER_MODE", "fixed")
        self.producer_rate = env_float("PRODUCER_RATE", 800)
        self.target_depth = env_int("TARGET_DEPTH", 1000)
        self.batch_max = max(1, env_int("PRODUCER_BATCH_MAX", 128))
        self.batch_ms = max(1, env_int("PRODUCER_BATCH_MS", 25))
        self.pacing = env_str("PRODUCER_PACING", "adapter")
        self.worker_count = max(1, env_int("WORKER_COUNT", 32))
        self.payload_bytes = max(0, env_int("JOB_PAYLOAD_BYTES", 256))
        self.work_ms = max(0.0, env_float("JOB_WORK_MS", 1))
        self.lease_s = max(1.0, env_float("JOBQ_LEASE_S", 10.0))
        self.claim_wait_s = max(0.0, env_float("JOBQ_CLAIM_WAIT_S", 1.0))
        self.grace_s = max(0.0, env_float("JOBQ_GRACE_S", 2.0))
        self.depth_poll_s = max(0.05, env_float("JOBQ_DEPTH_POLL_S", 0.5))
        self.claim_batch = env_int("JOBQ_CLAIM_BATCH", 0) or None
        # counters (touched on the event loop only)
        self.enqueued = 0
        self.completed = 0
        self.claimed = 0
        self.lost = 0
        self.released = 0
        self.enqueue_errors = 0
        self.queue_depth = 0
        self.running_depth = 0
        self.target_rate = self.producer_rate
        self.claim_lat = RollingLatency(30)
        self.e2e_lat = RollingLatency(30)
        self.producer_lat = RollingLatency(30)
        self.owed = 0.0             # harness tokens not yet enqueued (jobs)
        self.stdin_eof = False
        self.shutdown: asyncio.Event | None = None
        self.token_event: asyncio.Event | None = None
        # the payload: JOB_PAYLOAD_BYTES of JSON, roughly (as the peers do)
        self.padding = "x" * max(0, self.payload_bytes - 64)
        self.seq = 0

    # --- producer ----------------------------------------------------------

    def _payloads(self, n: int) -> list[dict]:
        now_ms = time.time() * 1000.0
        out = []
        for _ in range(n):
            self.seq += 1
            out.append({"seq": self.seq, "enqueued_at_ms": now_ms, "padding": self.padding})
        return out

    async def _enqueue(self, conn_box: list, n: int) -> bool:
        """Enqueue n jobs in one jobq.enqueue_many; False when it failed
        (the connection is dropped and made again on the next call).  A
        batch whose connection died after it was sent may have committed:
        it is not counted (enqueue_rate can only under-count), and its jobs
        run all the same."""
        payloads = self._payloads(n)
        t0 = time.monotonic()
        try:
            if conn_box[0] is None or conn_box[0].closed or conn_box[0].broken:
                conn_box[0] = await connect()
            await jobq.enqueue_many_async(conn_box[0], JOB_KIND, payloads, queue=QUEUE_NAME)
        except (psycopg.Error, OSError) as e:
            self.enqueue_errors += 1
            if self.enqueue_errors == 1 or self.enqueue_errors % 100 == 0:
                log("enqueue failed (%d so far): %s" % (self.enqueue_errors,
                                                        str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__))
            await drop_conn(conn_box)
            await self._sleep(0.2)
            return False
        per_job_ms = (time.monotonic() - t0) * 1000.0 / n
        now = time.monotonic()
        for _ in range(n):
            self.producer_lat.record_ms(per_job_ms, now)
        self.enqueued += n
        return True

    async def _sleep(self, s: float) -> None:
        assert self.shutdown is not None
        try:
            await asyncio.wait_for(self.shutdown.wait(), s)
        except asyncio.TimeoutError:
            pass

    async def _stdin_tokens(self) -> None:
        """Harness pacing: ``ENQUEUE <n>`` lines on stdin add n jobs owed.
        When the high-load hook writes a rate to PRODUCER_RATE_CONTROL_FILE
        that differs from PRODUCER_RATE, each token is scaled by their ratio
        (the harness's pacer ticks at PRODUCER_RATE and does not read that
        file; without this the high-load phase would offer the clean rate)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        try:
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        except (ValueError, OSError) as e:
            log("stdin is not a pipe (%s): no harness tokens; use PRODUCER_PACING=adapter" % e)
            self.stdin_eof = True
            return
        assert self.token_event is not None
        while True:
            raw = await reader.readline()
            if not raw:
                self.stdin_eof = True
                return
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("ENQUEUE "):
                continue
            try:
                n = int(line.split(" ", 1)[1])
            except ValueError:
                continue
            if n <= 0:
                continue
            rate = read_control_rate(self.producer_rate)
            self.target_rate = rate
            scale = rate / self.producer_rate if self.producer_rate > 0 else 1.0
            self.owed += n * scale
            self.token_event.set()

    async def producer(self) -> None:
        assert self.shutdown is not None and self.token_event is not None
        conn_box: list = [None]
        depth_box: list = [None]
        try:
            if self.producer_mode == "depth-target":
                # the depth looked up before every batch (as pgmq's adapter
                # does): a poller's value would be up to its period old
                while not self.shutdown.is_set():
                    self.target_rate = 0.0
                    try:
                        if depth_box[0] is None or depth_box[0].closed or depth_box[0].broken:
                            depth_box[0] = await connect(options=DEPTH_OPTIONS)
                        row = await (await depth_box[0].execute(
                            DEPTH_SQL, {"q": QUEUE_NAME})).fetchone()
                        depth = int(row[0] or 0) if row is not None else 0
                    except (psycopg.Error, OSError):
                        await drop_conn(depth_box)
                        await self._sleep(0.2)
                        continue
                    want = min(self.batch_max, self.target_depth - depth)
                    if want <= 0:
                        await self._sleep(self.batch_ms / 1000.0)
                        continue
                    await self._enqueue(conn_box, want)
            elif self.pacing == "harness":
                # a strong reference: the loop keeps only a weak one, and a
                # task parked on a pipe read is otherwise collected
                self._stdin_task = asyncio.ensure_future(self._stdin_tokens())
                while not self.shutdown.is_set():
                    if self.owed < 1.0:
                        self.token_event.clear()
                        try:
                            await asyncio.wait_for(self.token_event.wait(), 0.5)
                        except asyncio.TimeoutError:
                            pass
                        continue
                    n = min(self.batch_max, int(self.owed))
                    if await self._enqueue(conn_box, n):
                        self.owed -= n
            else:
                # Own pacing: credit on real wall-clock elapsed time
                # (CONTRIBUTING_ADAPTERS.md, "Producer pacing (normative)").
                period = self.batch_ms / 1000.0
                credit = 0.0
                last = time.monotonic()
                while not self.shutdown.is_set():
                    slept = time.monotonic() - last
                    if slept < period:
                        await self._sleep(period - slept)
                    now = time.monotonic()
                    rate = read_control_rate(self.producer_rate)
                    self.target_rate = rate
                    credit += rate * (now - last)
                    last = now
                    while credit >= 1.0 and not self.shutdown.is_set():
                        n = min(self.batch_max, int(credit))
                        if not await self._enqueue(conn_box, n):
                            break
                        credit -= n
        finally:
            if getattr(self, "_stdin_task", None) is not None:
                self._stdin_task.cancel()
            await drop_conn(conn_box)
            await drop_conn(depth_box)

    # --- consumer ----------------------------------------------------------

    async def handle(self, job) -> None:
        """The job's work: JOB_WORK_MS of sleep.  Claim latency is insert ->
        handler start (the payload's enqueue time, this host's clock)."""
        now_ms = time.time() * 1000.0
        t = job.payload.get("enqueued_at_ms") if isinstance(job.payload, dict) else None
        if t is not None:
            self.claim_lat.record_ms(max(0.0, now_ms - float(t)))
        if self.work_ms > 0:
            await asyncio.sleep(self.work_ms / 1000.0)
        return None

    def on_event(self, ev) -> None:
        if ev.name == "completed":
            self.completed += 1
        elif ev.name == "claimed":
            self.claimed += 1
        elif ev.name == "lost":
            self.lost += 1
        elif ev.name == "released":
            self.released += 1

    def make_worker(self):
        worker = jobq.Worker(
            database_url(), queues=[QUEUE_NAME], concurrency=self.worker_count,
            batch=self.claim_batch, lease=self.lease_s, wait=self.claim_wait_s,
            grace=self.grace_s, worker_id="jobq-bench-%d:%d" % (instance_id(), os.getpid()),
            on_event=self.on_event)
        bench = self

        async def handler(job):
            await bench.handle(job)
            # the end-to-end latency: insert -> handler done (the report
            # follows in the library)
            t = job.payload.get("enqueued_at_ms") if isinstance(job.payload, dict) else None
            if t is not None:
                bench.e2e_lat.record_ms(max(0.0, time.time() * 1000.0 - float(t)))
            return None

        worker.handle(JOB_KIND, handler)
        return worker

    async def consumer(self, worker_box: list) -> None:
        """Run the library's worker until shutdown; should it ever return or
        raise while we are not stopping, start another."""
        assert self.shutdown is not None
        while not self.shutdown.is_set():
            worker = self.make_worker()
            worker_box[0] = worker
            try:
                rc = await worker.run_async(install_signals=False)
                if not self.shutdown.is_set():
                    log("worker returned %s before shutdown; starting another" % rc)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log("worker failed: %r; starting another in 1 s" % (e,))
                await self._sleep(1.0)

    # --- depth -------------------------------------------------------------

    async def depth_poller(self) -> None:
        assert self.shutdown is not None
        conn = None
        while not self.shutdown.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = await connect(options=DEPTH_OPTIONS)
                row = await (await conn.execute(DEPTH_SQL, {"q": QUEUE_NAME})).fetchone()
                if row is not None:
                    self.queue_depth = int(row[0] or 0)
                    self.running_depth = int(row[1] or 0)
            except (psycopg.Error, OSError):
                try:
                    if conn is not None:
                        await conn.close()
                except Exception:
                    pass
                conn = None
            await self._sleep(self.depth_poll_s)
        if conn is not None:
            try:
                await conn.close()
            except Exception:
                pass

    # --- samples -----------------------------------------------------------

    def emit_sample(self, ts: float, window_s: float, d_enq: int, d_cmp: int) -> None:
        now = time.monotonic()
        ps = (0.50, 0.95, 0.99)
        c50, c95, c99 = self.claim_lat.percentiles_ms(ps, now)
        e50, e95, e99 = self.e2e_lat.percentiles_ms(ps, now)
        p50, p95, p99 = self.producer_lat.percentiles_ms(ps, now)
        w = window_s if window_s > 0 else float(self.sample_every_s)
        t = now_iso(ts)
        for metric, value, win in (
            ("claim_p50_ms", c50, 30.0),
            ("claim_p95_ms", c95, 30.0),
            ("claim_p99_ms", c99, 30.0),
            ("subscriber_p50_ms", c50, 30.0),
            ("subscriber_p95_ms", c95, 30.0),
            ("subscriber_p99_ms", c99, 30.0),
            ("end_to_end_p50_ms", e50, 30.0),
            ("end_to_end_p95_ms", e95, 30.0),
            ("end_to_end_p99_ms", e99, 30.0),
            ("producer_p50_ms", p50, 30.0),
            ("producer_p95_ms", p95, 30.0),
            ("producer_p99_ms", p99, 30.0),
            ("enqueue_rate", d_enq / w, w),
            ("completion_rate", d_cmp / w, w),
            ("queue_depth", float(self.queue_depth), 0.0),
            ("running_depth", float(self.running_depth), 0.0),
            ("producer_target_rate", float(self.target_rate), 0.0),
        ):
            if metric in OBSERVER_METRICS and not observer_enabled():
                continue
            emit({"t": t, "system": SYSTEM, "kind": "adapter", "subject_kind": "adapter",
                  "subject": "", "metric": metric, "value": round(float(value), 3),
                  "window_s": win})

    async def sampler(self) -> None:
        """Ticks on the wall-clock multiples of SAMPLE_EVERY_S.  Each tick's
        rates are the jobs counted since the previous tick over that
        interval, so rate * window_s sums to the exact counts (the harness
        integrates them into jobs_lost).  The first tick's window is the
        part-interval since start; the last (at shutdown) the part since the
        last tick."""
        assert self.shutdown is not None
        last_enq, last_cmp = self.enqueued, self.completed
        last_t = time.time()
        while not self.shutdown.is_set():
            nxt = (int(time.time() // self.sample_every_s) + 1) * self.sample_every_s
            while time.time() < nxt and not self.shutdown.is_set():
                await self._sleep(max(0.001, nxt - time.time()))
            if self.shutdown.is_set():
                break
            # from the previous tick (a boundary, or the start) to this one:
            # SAMPLE_EVERY_S exactly, but for the first tick
            window = max(0.001, nxt - last_t)
            enq, cmp_ = self.enqueued, self.completed
            self.emit_sample(nxt, window, enq - last_enq, cmp_ - last_cmp)
            last_enq, last_cmp, last_t = enq, cmp_, nxt
        self.final = (last_enq, last_cmp, last_t)

    # --- main --------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.shutdown = asyncio.Event()
        self.token_event = asyncio.Event()
        info = await setup(self.lease_s)
        url = database_url()
        emit({
            "kind": "descriptor",
            "system": SYSTEM,
            "event_tables": info["event_tables"],
            "event_indexes": info["event_indexes"],
            "extensions": EXTENSIONS,
            "version": adapter_version(),
            "schema_version": info["extversion"],
            "db_name": url.rsplit("/", 1)[-1].split("?", 1)[0],
            "started_at": now_iso(),
            "server_version": info["server_version"],
            "settings": {
                "worker_count": self.worker_count, "lease_s": self.lease_s,
                "claim_wait_s": self.claim_wait_s, "producer_pacing": self.pacing,
                "producer_batch_max": self.batch_max, "ack": "per-job jobq.complete",
            },
        })
        log("queue %s, %d workers, lease %gs, pacing %s, mode %s, rate %g, batch %d"
            % (QUEUE_NAME, self.worker_count, self.lease_s, self.pacing,
               self.producer_mode, self.producer_rate, self.batch_max))

        stops = 0

        def hard_exit() -> None:
            # the protocol's 5 s: whatever still waits (a report to a server
            # that does not answer) is abandoned; jobq's leases cover it
            if self.final is not None and not self.flushed:
                self.flushed = True
                last_enq, last_cmp, last_t = self.final
                now = time.time()
                self.emit_sample(now, now - last_t, self.enqueued - last_enq,
                                 self.completed - last_cmp)
            log("not stopped 4.7 s after the signal: exiting now")
            os._exit(0)

        def on_signal() -> None:
            nonlocal stops
            stops += 1
            if stops == 1:
                timer = threading.Timer(4.7, hard_exit)
                timer.daemon = True
                timer.start()
            self.shutdown.set()
            w = worker_box[0]
            if w is not None:
                w.stop(abandon=stops > 1)

        worker_box: list = [None]
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(s, on_signal)
            except (NotImplementedError, RuntimeError):
                signal.signal(s, lambda *_: loop.call_soon_threadsafe(on_signal))

        self.final = None
        self.flushed = False
        sampler = asyncio.ensure_future(self.sampler())
        producer = asyncio.ensure_future(self.producer())
        depth = asyncio.ensure_future(self.depth_poller()) if observer_enabled() else None
        consumer = asyncio.ensure_future(self.consumer(worker_box))

        await self.shutdown.wait()
        t_stop = time.monotonic()
        # the worker hands running jobs back after JOBQ_GRACE_S; everything
        # else stops at once.  SIGTERM -> exit 0 within 5 s.
        others = [t for t in (producer, depth) if t is not None]
        # the producer ends the enqueue it has in flight (its loops look at
        # shutdown), so that every batch it committed is counted; it is
        # cancelled only when that call hangs (a server that does not answer)
        try:
            await asyncio.wait_for(asyncio.shield(producer), 1.5)
        except (asyncio.TimeoutError, Exception):
            pass
        for t in others:
            t.cancel()
        await asyncio.gather(sampler, *others, return_exceptions=True)
        try:
            await asyncio.wait_for(consumer, max(0.5, 4.0 - (time.monotonic() - t_stop)))
        except (asyncio.TimeoutError, Exception):
            pass
        if self.final is not None and not self.flushed:
            self.flushed = True
            last_enq, last_cmp, last_t = self.final
            now = time.time()
            d_enq, d_cmp = self.enqueued - last_enq, self.completed - last_cmp
            # jobs counted since the last tick are always reported, however
            # short the window (a stop just after a tick): the harness sums
            # rate x window into its counts
            if now - last_t > 0.05 or d_enq or d_cmp:
                now = max(now, last_t + 0.001)  # a time of its own, after the tick's
                self.emit_sample(now, now - last_t, d_enq, d_cmp)
        log("stopped: enqueued %d, claimed %d, completed %d, lost leases %d, handed back %d,"
            " enqueue errors %d" % (self.enqueued, self.claimed, self.completed, self.lost,
                                    self.released, self.enqueue_errors))


def main() -> int:
    logging.basicConfig(stream=sys.stderr, level=getattr(
        logging, env_str("JOBQ_LOG_LEVEL", "WARNING").upper(), logging.WARNING),
        format="[jobq] %(levelname)s %(name)s: %(message)s")
    scenario = env_str("SCENARIO", "long_horizon")
    if scenario == "migrate_only":
        asyncio.run(setup(max(1.0, env_float("JOBQ_LEASE_S", 10.0))))
        log("migrate_only: jobq is installed and the queue configured")
        return 0
    if scenario != "long_horizon":
        log("unsupported SCENARIO %r (this adapter implements long_horizon)" % scenario)
        return 2
    asyncio.run(Bench().run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
