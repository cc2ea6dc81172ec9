"""The jobq worker: claim jobs, run their handlers, report how they ended.

One asyncio event loop does all the database work: a claim loop per queue
(``jobq.claim(..., wait => ...)``, so an idle worker sleeps in the server,
not in a busy loop), a heartbeat that extends the lease of every running job
at a fraction of the lease, and the reports.  Async handlers run on that loop;
plain functions each run on a thread of their own, so a slow or stuck one
blocks nothing else.  At most ``concurrency`` jobs run at once, over all the
worker's queues.  A job whose handler returned gives its place to the next
claim while its completion commits (at most ``concurrency`` completions are
in flight so); a failure keeps its place until it is recorded, since the
retry may come back to this worker.

Claiming ahead: a claim takes a round trip, and slots that free during it
stay idle until it returns.  So the worker claims up to ``prefetch`` jobs
beyond its free slots; they wait, under lease (extended by the heartbeat),
and start in claim order as slots free.  By default (``prefetch=None``) it
claims ahead as many jobs as its handlers finish while a claim is made
(measured: the completion rate times a claim's round trip and the few
milliseconds the loop waits to claim a batch, at most ``concurrency``): none for jobs that take much longer than a claim, so long
jobs are never held back from other workers, and enough for short ones that
the handlers never wait for a claim.  ``prefetch=0`` never claims ahead; a
number claims ahead exactly that many at most.  At a stop the waiting jobs
are handed back at once (jobq.release: no retry spent).

How a handler ends decides what happens to its job:

    returns a value          jobq.complete(job_id, token, result)
    raises Permanent         jobq.fail(..., retryable => false): the dead letter
    raises RetryIn(s)        jobq.fail(..., retry_in => s): again after s seconds
    raises Snooze(s)         jobq.snooze(job_id, token, s): no retry spent
    runs past its timeout    jobq.fail(..., 'timed out after ...'): retried
    raises anything else     jobq.fail(...): retried with the queue's backoff
    returns what cannot be   jobq.fail(..., 'result not stored: ...',
      stored (not JSON, over   retryable => false): the dead letter, that job
      jobq.max_result_size)    alone

Results are written with jobq.dumps (Decimal and UUID as strings, datetime,
date and time in ISO 8601; see jobq.encoder).  Completions that arrive
together are sent in one statement; when it fails, they are sent one by one,
so one result the server refuses fails its own job and no other.

A failure is logged with its error at WARNING when the job will be retried,
at ERROR when it is dead (permanent, or no retries left); Event.error has the
same text.  The stack trace goes to jobq.fail as ``details`` (at most 16 kB)
when the server has that argument (jobq 0.3.0; looked up once per
connection).

Connections use client_encoding UTF8, whatever the server's encoding: text
comes back as str on SQL_ASCII databases too, and JSON is sent as UTF-8.
When the server has jobq.register_worker (0.3.0), the worker registers in
jobq.app_workers at start (library, version, host, pid, queues, concurrency,
kinds), refreshes its row four times within jobq.worker_gone_after (at least
every 15 s; no write per job: the view counts the jobs in hand), and
unregisters when it stops.  Servers without it are left alone.

A report (complete, fail, snooze, checkpoint) or a lease renewal that fails
because the database cannot be reached (a restart, a failover: see
_transient) is sent again on a new connection, with backoff (100 ms doubling
to 5 s, jittered): a report for up to five minutes or until the shutdown
grace ends, then the job's lease expires and it runs again.  A completion or
failure whose connection died after it was sent may have committed: sent
again with the same lease token it then finds the lease gone, and the job's
row tells whether the first one did it (then the job is done, not lost).
The first error of an outage is logged at WARNING, its end at INFO.

SIGTERM or SIGINT (or ``stop()``) stops claiming at once: a claim blocked in
its wait is cancelled, which claims nothing.  Running jobs get ``grace``
seconds to finish and report; then (or at a second signal) every job still
running is handed back with jobq.release: pending at once, no retry spent, so
no lease is left to expire.  ``run()`` returns 0 when every job finished, 1
when some were handed back (jobs claimed ahead and never started do not
count).

No session state is used: every statement is its own transaction, and with
``pooler=True`` no statement is prepared, so the worker works through
PgBouncer in transaction mode.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import inspect
import io
import json
import logging
import math
import os
import platform
import queue
import random
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import (Any, Awaitable, Callable, Deque, Dict, List, Mapping, Optional,
                    Sequence, Set, Tuple, TypeVar, Union)

import psycopg
from psycopg.types.json import Jsonb

from ._version import __version__
from .encoder import dumps as _dumps
from .errors import LeaseLost, Permanent, RetryIn, Snooze

log = logging.getLogger("jobq")

_CLAIM = ("SELECT job_id, lease_token, kind, payload, priority, retry_count,"
          "       max_retries, checkpoint, enqueued_at, lease_expires_at"
          "  FROM jobq.claim(%s, worker_id => %s, batch => %s, lease => %s,"
          "                  kinds => %s, wait => %s)")
# On a SQL_ASCII database the server sends text as the bytes it holds, and
# refuses (the whole claim) when they are not valid in the client encoding:
# there, payload and checkpoint come as bytes, decoded here (the kinds match
# ours, which are valid).
_CLAIM_SQL_ASCII = _CLAIM.replace(
    "payload,", "pg_catalog.convert_to(payload::text, 'SQL_ASCII'),").replace(
    "checkpoint,", "pg_catalog.convert_to(checkpoint::text, 'SQL_ASCII'),")


# what the worker asks the server about once per connection: does it have
# jobq.fail(..., details) and the application worker registry (jobq 0.3.0),
# and after how long does the registry show a silent worker as gone?
_CAPABILITIES = (
    "SELECT coalesce(bool_or(p.proname = 'fail' AND 'details' = ANY (p.proargnames)), false),"
    "       coalesce(bool_or(p.proname = 'register_worker'), false)"
    "       AND coalesce(bool_or(p.proname = 'unregister_worker'), false),"
    "       pg_catalog.date_part('epoch', pg_catalog.current_setting("
    "           'jobq.worker_gone_after', true)::pg_catalog.interval)"
    "  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = 'jobq' AND p.proname IN ('fail', 'register_worker', 'unregister_worker')")

#: the most bytes of stack trace sent as jobq.fail's details
MAX_DETAILS = 16 * 1024

#: seconds a report is tried again while the database cannot be reached;
#: then the job's lease expires and it runs again
REPORT_PATIENCE = 300.0

# SQLSTATEs after which the same statement may simply be sent again: the
# server shutting down or starting (57P01-57P03), too many connections, a
# serialization failure or deadlock (rolled back), a read-only server (a
# standby, before or during a failover); class 08 too (connection
# exceptions, also what PgBouncer says when its server connection died).
_TRANSIENT_STATES = frozenset(("57P01", "57P02", "57P03", "53300", "40001", "40P01", "25006"))


def _seconds(s: float) -> datetime.timedelta:
    """Seconds as a timedelta, which psycopg sends as an interval."""
    return datetime.timedelta(seconds=s)


@dataclass
class _Capabilities:
    details: bool = False               # jobq.fail(..., details => ...)
    registry: bool = False              # jobq.register_worker / unregister_worker
    gone_after: float = 60.0            # jobq.worker_gone_after, in seconds

    @property
    def beat(self) -> float:
        """How often to refresh the worker's row: four times within
        jobq.worker_gone_after, and at least every 15 s."""
        return min(max(self.gone_after / 4, 0.25), 15.0)


class _Undecodable:
    """A jsonb value (payload, checkpoint) that is not valid UTF-8: bytes a
    SQL_ASCII database took from a client of another encoding."""

    def __init__(self, error: UnicodeDecodeError) -> None:
        self.error = error


def _json_of(raw: Any) -> Any:
    """JSON from the bytes of a SQL_ASCII database (see _CLAIM_SQL_ASCII);
    anything else as it is."""
    if not isinstance(raw, (bytes, memoryview)):
        return raw
    try:
        return json.loads(bytes(raw).decode("utf-8"))
    except UnicodeDecodeError as e:
        return _Undecodable(e)


class _WrongEncoding(psycopg.InterfaceError):
    """A connection whose client encoding is not UTF8."""


class _JobBase:
    """One claimed job: what its handler sees."""

    def __init__(self, worker: "Worker", queue: str, row: Tuple[Any, ...]) -> None:
        (self.id, self.lease_token, self.kind, payload, self.priority,
         self.retry_count, self.max_retries, checkpoint, self.enqueued_at,
         self.lease_expires_at) = row
        self.payload = _json_of(payload)
        checkpoint = _json_of(checkpoint)
        self.id: int
        self.lease_token: int
        self.kind: str
        self.payload: Dict[str, Any]
        self.priority: int
        self.retry_count: int
        self.max_retries: int
        self.enqueued_at: datetime.datetime
        self.lease_expires_at: datetime.datetime
        self.queue = queue
        #: the progress saved by earlier attempts (or this one), None at first
        self.saved: Optional[Dict[str, Any]] = checkpoint
        #: set when the lease was found lost: the outcome will be discarded
        self.lost = False
        self._worker = worker
        self._phase = "claimed"         # claimed, running, reporting, done
        self._handed_back = False       # released at shutdown
        self._slot_freed = False        # its completion is sent without a slot
        self._slot_t0 = 0.0             # when it took a slot (monotonic)
        self._thread: Optional[int] = None  # the thread running a plain handler

    @property
    def attempt(self) -> int:
        """This attempt's number, from 1."""
        return self.retry_count + 1

    def __repr__(self) -> str:
        return "<Job %d %s attempt %d>" % (self.id, self.kind, self.attempt)


class Job(_JobBase):
    """The job as a plain (threaded) handler sees it."""

    def checkpoint(self, data: Mapping[str, Any]) -> None:
        """Save progress (a JSON object) for the next attempt of this job;
        raises LeaseLost when the job is no longer ours."""
        fut = asyncio.run_coroutine_threadsafe(self._worker._checkpoint(self, data),
                                               self._worker._loop_or_fail())
        fut.result()


class AsyncJob(_JobBase):
    """The job as an async handler sees it."""

    async def checkpoint(self, data: Mapping[str, Any]) -> None:
        """Save progress (a JSON object) for the next attempt of this job;
        raises LeaseLost when the job is no longer ours."""
        await self._worker._checkpoint(self, data)


AnyJob = Union[Job, AsyncJob]
SyncHandler = Callable[[Job], Any]
AsyncHandler = Callable[[AsyncJob], Awaitable[Any]]
Handler = Union[SyncHandler, AsyncHandler]
F = TypeVar("F", bound=Callable[..., Any])
_Statement = Tuple[str, Sequence[Any]]


@dataclass
class Event:
    """What a metrics hook receives.  ``name`` is one of claimed, completed,
    retried (failed with retries left), failed (dead letter), snoozed,
    released (handed back at shutdown), lost (lease lost, outcome discarded),
    error (a report did not reach the database).  ``error`` is the error
    text of retried and failed jobs (as stored in last_error) and of error
    events."""

    name: str
    job_id: int
    kind: str
    queue: str
    attempt: int
    duration: Optional[float] = None    # seconds the handler ran
    error: Optional[str] = None


@dataclass
class _Registered:
    fn: Handler
    is_async: bool
    timeout: Optional[float]


class _Pace:
    """How many jobs are worth claiming ahead: the jobs the handlers finish
    during one claim round trip (completion rate times round trip)."""

    TAU = 1.0                           # seconds: the rate's memory

    def __init__(self) -> None:
        self.round_trip = 0.0           # seconds, a moving average
        self.held = 0.0                 # seconds a job holds its slot, a moving average
        self._rate = 0.0                # jobs finished per second, decaying
        self._at = time.monotonic()     # when _rate was last brought up to date
        self._backlog = False           # the last claim got all it asked for

    def claimed(self, seconds: float, full: bool) -> None:
        """A claim came back after seconds (its round trip, and the moment
        the loop gave the handlers to free more places before it), with
        every job it asked for or not.  Only a claim that follows a full one
        counts: the queue had a backlog, so it did not wait in the server
        for jobs to come."""
        if full and self._backlog:
            seconds = min(seconds, 0.5)
            self.round_trip = (seconds if self.round_trip == 0.0
                               else 0.8 * self.round_trip + 0.2 * seconds)
        self._backlog = full

    def _decayed(self, now: float) -> float:
        return self._rate * math.exp(-(now - self._at) / self.TAU)

    def finished(self, held: float) -> None:
        """A job gave its slot back after holding it held seconds."""
        now = time.monotonic()
        self._rate = self._decayed(now) + 1.0 / self.TAU
        self._at = now
        self.held = held if self.held == 0.0 else 0.8 * self.held + 0.2 * held

    def ahead(self, most: int) -> int:
        """The jobs finished during one round trip, rounded up from a tenth
        of a job (a slot idle a tenth of the time is worth one job ahead).
        The rate is at most each of the most slots finishing a job once per
        time a job holds one: right after a finish the decaying rate reads
        about 1/TAU whatever the jobs' length, and would have claimed ahead
        of jobs far longer than a claim over a slow link (10 s jobs, a
        claim of 0.2 s: one job claimed ahead)."""
        rate = self._decayed(time.monotonic())
        if self.held > 0.0:
            rate = min(rate, most / self.held)
        return max(0, min(most, math.ceil(rate * self.round_trip - 0.1)))


@dataclass
class _State:
    """What one run of the worker keeps; reset by every run."""

    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    abandon: asyncio.Event = field(default_factory=asyncio.Event)
    slots: asyncio.Condition = field(default_factory=asyncio.Condition)
    reserved: int = 0                   # places held by claims, waiting and running jobs
    running: int = 0                    # jobs holding a slot (at most concurrency)
    waiting: Deque[Tuple[AnyJob, "_Registered"]] = field(default_factory=collections.deque)
    pace: "_Pace" = field(default_factory=lambda: _Pace())   # claim round trip, completion rate
    reporting: int = 0                  # completions committing without a slot
    tasks: Dict[int, "asyncio.Task[None]"] = field(default_factory=dict)
    jobs: Dict[int, AnyJob] = field(default_factory=dict)
    ops: Optional[psycopg.AsyncConnection[Any]] = None
    ops_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    claiming: Set[psycopg.AsyncConnection[Any]] = field(default_factory=set)
    completes: List[Tuple[AnyJob, Optional[str], "asyncio.Future[Any]"]] = field(
        default_factory=list)
    flushing: bool = False              # a _flush task is sending completes
    caps: _Capabilities = field(default_factory=_Capabilities)  # of the ops connection
    registered: bool = False            # in jobq.app_workers
    registry_error: Optional[str] = None    # the last registration error logged
    refresh: Optional["asyncio.Future[None]"] = None   # the registry beat in flight
    outage_since: Optional[float] = None    # since when the database cannot be reached
    give_up: asyncio.Event = field(default_factory=asyncio.Event)  # grace over: no more tries


class Worker:
    """Claims and runs jobs of one or more queues; see the module docstring.

    conninfo      libpq connection string ("" : the PG* environment)
    queues        a queue name or a list of them
    concurrency   jobs run at once by this process, over all its queues
    batch         most jobs per claim (default: concurrency / queues)
    prefetch      most jobs claimed ahead of free slots (None: measured,
                  at most concurrency; 0: none); see the module docstring
    lease         seconds a claim holds a job before it must be extended
    renew         extend every running job's lease every lease * renew seconds
    wait          seconds a claim may block in the server when nothing is ready
    grace         seconds running jobs get to finish after a stop signal
    timeout       default handler timeout in seconds (None: no timeout)
    pooler        True behind PgBouncer in transaction mode: nothing prepared
    on_event      a metrics hook, called with an Event on the event loop
    dumps         writes results and checkpoints as JSON text (jobq.dumps)
    """

    def __init__(self, conninfo: str = "", *, queues: Union[str, Sequence[str]] = "default",
                 concurrency: int = 10, batch: Optional[int] = None,
                 prefetch: Optional[int] = None, lease: float = 30.0,
                 renew: float = 1 / 3, wait: float = 5.0, grace: float = 30.0,
                 timeout: Optional[float] = None, worker_id: Optional[str] = None,
                 pooler: bool = False, connect_kwargs: Optional[Mapping[str, Any]] = None,
                 on_event: Optional[Callable[[Event], None]] = None,
                 dumps: Callable[[Any], str] = _dumps) -> None:
        self.conninfo = conninfo
        self.queues = [queues] if isinstance(queues, str) else list(queues)
        if not self.queues:
            raise ValueError("queues must name at least one queue")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must be None (measured) or at least 0")
        if not 0 < renew < 1:
            raise ValueError("renew must be a fraction of the lease, between 0 and 1")
        self.concurrency = concurrency
        self.batch = batch or max(1, concurrency // len(self.queues))
        self.prefetch = prefetch
        self.lease = float(lease)
        self.renew = float(renew)
        self.wait = float(wait)
        self.grace = float(grace)
        self.timeout = timeout
        self.worker_id = worker_id or "%s:%d" % (socket.gethostname(), os.getpid())
        self.pooler = pooler
        self.connect_kwargs = dict(connect_kwargs or {})
        self.on_event = on_event
        self.dumps = dumps
        self._handlers: Dict[str, _Registered] = {}
        self._threads = _Threads()
        self._state: Optional[_State] = None

    # --- the handler registry ------------------------------------------------

    def handle(self, kind: str, fn: Handler, *, timeout: Optional[float] = None) -> None:
        """Register fn as the handler of jobs of this kind."""
        if kind in self._handlers:
            raise ValueError("kind %r already has a handler" % kind)
        self._handlers[kind] = _Registered(fn, inspect.iscoroutinefunction(fn),
                                           timeout if timeout is not None else self.timeout)

    def handler(self, kind: str, *, timeout: Optional[float] = None) -> Callable[[F], F]:
        """Decorator: ``@worker.handler("email.send")`` registers a handler."""
        def register(fn: F) -> F:
            self.handle(kind, fn, timeout=timeout)
            return fn
        return register

    @property
    def kinds(self) -> List[str]:
        """The kinds this worker claims: those with a handler."""
        return sorted(self._handlers)

    # --- running -------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> int:
        """Work until stopped (SIGTERM, SIGINT, stop()); 0 when every job
        finished, 1 when some were handed back."""
        return asyncio.run(self.run_async(install_signals=install_signals))

    def stop(self, abandon: bool = False) -> None:
        """Stop claiming and finish (thread-safe); a second call, or
        abandon=True, hands the running jobs back at once."""
        st = self._state
        if st is None:
            return
        try:
            st.loop.call_soon_threadsafe(self._on_stop, abandon)
        except RuntimeError:
            pass                        # the loop is already closed

    def _on_stop(self, abandon: bool = False) -> None:
        st = self._state
        if st is None:
            return
        if abandon or st.stop.is_set():
            if not st.abandon.is_set():
                log.warning("%s: handing back the running jobs now", self.worker_id)
            st.abandon.set()
        if not st.stop.is_set():
            log.info("%s: no more claims; finishing %d running job(s)",
                     self.worker_id, len(st.jobs))
        st.stop.set()

    def _loop_or_fail(self) -> asyncio.AbstractEventLoop:
        if self._state is None:
            raise RuntimeError("the worker is not running")
        return self._state.loop

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        kw: Dict[str, Any] = {"application_name": "jobq-worker"}
        kw.update(self.connect_kwargs)
        if self.pooler:
            kw["prepare_threshold"] = None  # prepared statements are session state
        # UTF8 whatever the server's encoding: on SQL_ASCII psycopg would
        # return text as bytes (no handler matches a kind), on LATIN1 it
        # could not read non-ASCII JSON; psycopg sends JSON as UTF-8 anyway
        kw["client_encoding"] = "UTF8"
        conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True, **kw)
        if conn.info.encoding != "utf-8":
            client, server = (conn.info.parameter_status(n) or "?"
                              for n in ("client_encoding", "server_encoding"))
            await conn.close()
            raise _WrongEncoding(
                "jobq: the worker needs client_encoding UTF8, but its connection has %s"
                " (server encoding %s): does a pooler or a setting force another one?"
                % (client, server))
        return conn

    async def run_async(self, *, install_signals: bool = True) -> int:
        """run() for a caller that has an event loop already."""
        if not self._handlers:
            raise RuntimeError("no handler registered")
        loop = asyncio.get_running_loop()
        st = self._state = _State(loop)
        signals: List[int] = []
        if install_signals:
            for s in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(s, self._on_stop)
                    signals.append(s)
                except (RuntimeError, ValueError, NotImplementedError):
                    pass                # not the main thread
        log.info("%s: queues %s, kinds %s, concurrency %d, lease %gs, wait %gs",
                 self.worker_id, ",".join(self.queues), ",".join(self.kinds),
                 self.concurrency, self.lease, self.wait)
        heartbeat: Optional["asyncio.Future[None]"] = None
        beat: Optional["asyncio.Future[None]"] = None
        try:
            try:
                await self._ops()       # refuses a connection that is not UTF8
            except _WrongEncoding:
                raise
            except psycopg.Error as e:  # the claims will keep trying
                log.warning("%s: cannot connect yet: %s", self.worker_id, e)
            await self._register()
            heartbeat = asyncio.ensure_future(self._heartbeat())
            beat = asyncio.ensure_future(self._registry_beat())
            claimers = [asyncio.ensure_future(self._claim_loop(q)) for q in self.queues]
            await st.stop.wait()
            await self._cancel_claims(claimers)
            handed_back = await self._drain()
            log.info("%s: stopped%s", self.worker_id,
                     ", %d job(s) unfinished" % handed_back if handed_back else "")
            return 1 if handed_back else 0
        finally:
            for task in (heartbeat, beat):
                if task is not None:
                    task.cancel()
                    try:
                        await task
                    except (asyncio.CancelledError, psycopg.Error):
                        pass
            if st.refresh is not None and not st.refresh.done():
                # the registry beat in flight ends before the unregister
                # (bounded: past the lease, the connection is closed below)
                try:
                    await asyncio.wait_for(asyncio.shield(st.refresh), self.lease)
                except (asyncio.TimeoutError, psycopg.Error):
                    pass
            for s in signals:
                loop.remove_signal_handler(s)
            if (st.ops is not None and st.ops.info.transaction_status
                    == psycopg.pq.TransactionStatus.ACTIVE):
                # a statement of a task cancelled above is still in flight
                # on it: a new connection for the last word
                await st.ops.close()
                st.ops = None
            await self._unregister()
            if st.ops is not None:
                await st.ops.close()
            self._state = None

    async def _ops(self) -> psycopg.AsyncConnection[Any]:
        """The connection for reports, extends and checkpoints; what the
        server can do (st.caps) is looked up once per connection."""
        st = self._state
        assert st is not None
        async with st.ops_lock:
            if st.ops is None or st.ops.closed or st.ops.broken:
                conn = await self._connect()
                try:
                    row = await (await conn.execute(_CAPABILITIES)).fetchone()
                except BaseException:
                    await conn.close()
                    raise
                assert row is not None
                st.caps = _Capabilities(details=bool(row[0]), registry=bool(row[1]),
                                        gone_after=row[2] or 60.0)
                st.ops = conn
            return st.ops

    async def _call(self, sql: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
        conn = await self._ops()
        return await (await conn.execute(sql, params)).fetchall()

    async def _retrying(self, what: str, sql: "Union[str, Callable[[_Capabilities], _Statement]]",
                        params: Sequence[Any] = (), *,
                        patience: float = REPORT_PATIENCE) -> Tuple[List[Tuple[Any, ...]], bool]:
        """Run a statement, again on a new connection while it fails because
        the database cannot be reached, with backoff, for up to patience
        seconds and not after the shutdown grace ended; then the last error
        is raised.  sql may be a function of what the server offers giving
        the statement and its parameters.  Returns the rows, and whether a
        failed try may have committed (in doubt)."""
        st = self._state
        assert st is not None
        deadline = time.monotonic() + patience
        in_doubt = False
        tries = 0
        while True:
            conn: Optional[psycopg.AsyncConnection[Any]] = None
            try:
                conn = await self._ops()
                text, values = sql(st.caps) if callable(sql) else (sql, params)
                rows = await (await conn.execute(text, values)).fetchall()
            except psycopg.Error as e:
                if not _transient(e):
                    raise
                # a connection that failed to open never sent the statement
                in_doubt = in_doubt or (conn is not None and _in_doubt(e))
                await self._drop(conn)
                if st.give_up.is_set() or time.monotonic() >= deadline:
                    raise
                self._outage(e, what)
                await self._pause(_backoff(tries))
                tries += 1
                continue
            self._reachable()
            return rows, in_doubt

    async def _drop(self, conn: Optional[psycopg.AsyncConnection[Any]]) -> None:
        """Close the ops connection a statement failed on, so that the next
        one opens a new one: one to a standby (25006) is alive, and wrong."""
        st = self._state
        assert st is not None
        if conn is None or st.ops is not conn:
            return                      # another task dropped it already
        st.ops = None
        if conn.broken:
            await conn.close()
            return
        # alive: another task's statement may be running on it, and closing
        # its socket under it would leave that task waiting for ever
        async with conn.lock:
            await conn.close()

    async def _pause(self, seconds: float) -> None:
        """Sleep between tries; the end of the shutdown grace ends it."""
        st = self._state
        assert st is not None
        try:
            await asyncio.wait_for(st.give_up.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _outage(self, e: psycopg.Error, what: str) -> None:
        """A try failed because the database cannot be reached: the first
        of an outage is a warning, the others are debug lines."""
        st = self._state
        assert st is not None
        if st.outage_since is None:
            st.outage_since = time.monotonic()
            log.warning("%s: the database cannot be reached (%s: %s); claims, reports and"
                        " lease renewals are tried again with backoff", self.worker_id, what,
                        _server_message(e))
        else:
            log.debug("%s: %s: %s; trying again", self.worker_id, what, _server_message(e))

    def _reachable(self) -> None:
        """A statement went through: the end of an outage, if there was one."""
        st = self._state
        assert st is not None
        if st.outage_since is not None:
            log.info("%s: the database answers again (after %.1f s)", self.worker_id,
                     time.monotonic() - st.outage_since)
            st.outage_since = None

    # --- claiming ------------------------------------------------------------

    @property
    def ahead(self) -> int:
        """How many jobs the worker claims ahead of its free slots now:
        prefetch, or the measured number (0 when not running)."""
        st = self._state
        if self.prefetch is not None:
            return self.prefetch
        return 0 if st is None else st.pace.ahead(self.concurrency)

    def _places(self) -> int:
        """Slots, and the jobs worth claiming ahead of them."""
        return self.concurrency + self.ahead

    async def _reserve(self) -> Tuple[int, float]:
        """Wait for a free place; take up to batch of them (0: stopping).
        Also how long it waited for more once there was one."""
        st = self._state
        assert st is not None
        waited = 0.0
        async with st.slots:
            while st.reserved >= self._places() and not st.stop.is_set():
                await st.slots.wait()
            # busy: give the running jobs a moment to free more places, so a
            # saturated worker claims in batches rather than one by one
            want = min(self.batch, (self.batch + 1) // 2)
            if st.reserved > 0 and self._places() - st.reserved < want:
                t0 = time.monotonic()
                try:
                    await asyncio.wait_for(st.slots.wait_for(
                        lambda: self._places() - st.reserved >= want or st.stop.is_set()),
                        0.005)
                except asyncio.TimeoutError:
                    pass
                waited = time.monotonic() - t0
            if st.stop.is_set():
                return 0, waited
            n = max(0, min(self.batch, self._places() - st.reserved))
            st.reserved += n
            return n, waited

    async def _unreserve(self, n: int) -> None:
        st = self._state
        assert st is not None
        if n:
            async with st.slots:
                st.reserved -= n
                st.slots.notify_all()

    async def _claim_loop(self, queue: str) -> None:
        """Claim jobs of one queue while there is room, until stopped."""
        st = self._state
        assert st is not None
        conn: Optional[psycopg.AsyncConnection[Any]] = None
        try:
            while not st.stop.is_set():
                n, waited = await self._reserve()
                if n == 0:
                    if st.stop.is_set():
                        break
                    continue
                rows: List[Tuple[Any, ...]] = []
                reused = False          # a connection that waited since its last claim
                try:
                    if conn is None or conn.closed or conn.broken:
                        if conn is not None:
                            await conn.close()
                            conn = None
                        conn = await self._connect()
                    else:
                        reused = True
                    st.claiming.add(conn)
                    try:
                        if not st.stop.is_set():
                            raw = (conn.info.parameter_status("server_encoding")
                                   == "SQL_ASCII")
                            sent = time.monotonic()
                            cur = await conn.execute(_CLAIM_SQL_ASCII if raw else _CLAIM, (
                                queue, self.worker_id, n, _seconds(self.lease),
                                self.kinds, _seconds(self.wait)))
                            rows = await cur.fetchall()
                            st.pace.claimed(time.monotonic() - sent + waited, len(rows) == n)
                            self._reachable()
                    finally:
                        st.claiming.discard(conn)
                except psycopg.errors.QueryCanceled:
                    pass                # our own cancel at stop: nothing claimed
                except Exception as e:  # psycopg.Error, or rows we cannot read
                    if isinstance(e, psycopg.Error) and _transient(e) and reused:
                        # a connection cut while it waited between claims (a
                        # restart, PgBouncer): a new one at once, no outage yet
                        log.info("%s: the claim connection of queue %s was lost (%s);"
                                 " connecting again", self.worker_id, queue, _server_message(e))
                        if conn is not None:
                            await conn.close()
                        conn = None
                        await self._unreserve(n)
                        continue
                    if isinstance(e, psycopg.Error) and _transient(e):
                        # an outage is logged once, by _outage
                        self._outage(e, "claim on queue %s" % queue)
                    else:
                        log.error("%s: claim on queue %s failed: %s; again in 1 s",
                                  self.worker_id, queue, e)
                    try:
                        await asyncio.wait_for(st.stop.wait(), 1.0)
                    except asyncio.TimeoutError:
                        pass
                await self._unreserve(n - len(rows))
                for row in rows:
                    await self._start(queue, row)
        finally:
            if conn is not None:
                await conn.close()

    async def _cancel_claims(self, claimers: List["asyncio.Future[None]"]) -> None:
        """Cancel the claims blocked in their wait, and wait for the loops."""
        st = self._state
        assert st is not None
        async with st.slots:
            st.slots.notify_all()
        loop = asyncio.get_running_loop()
        while True:
            done, pending = await asyncio.wait(claimers, timeout=0.1)
            if not pending:
                break
            for conn in list(st.claiming):
                try:
                    await loop.run_in_executor(None, conn.cancel)
                except psycopg.Error:
                    pass

    async def _start(self, queue: str, row: Tuple[Any, ...]) -> None:
        """Start the handler of a claimed job, or queue it for the next free
        slot (claimed ahead), or hand it back (stopping)."""
        st = self._state
        assert st is not None
        reg = self._handlers.get(row[2])
        job: AnyJob = (AsyncJob if reg is not None and reg.is_async else Job)(self, queue, row)
        st.jobs[job.id] = job
        self._emit("claimed", job)
        if reg is None or st.stop.is_set():
            # claimed as the stop came, or a kind we lost the handler of
            await self._release([job])
            st.jobs.pop(job.id, None)
            await self._unreserve(1)
            return
        if st.running < self.concurrency:
            self._launch(job, reg)
        else:
            st.waiting.append((job, reg))

    def _launch(self, job: AnyJob, reg: _Registered) -> None:
        st = self._state
        assert st is not None
        st.running += 1
        job._slot_t0 = time.monotonic()
        st.tasks[job.id] = asyncio.ensure_future(self._run_job(job, reg))

    async def _free_slot(self, job: AnyJob) -> None:
        """A job is done with its slot: the next job waiting takes it."""
        st = self._state
        assert st is not None
        st.running -= 1
        st.pace.finished(time.monotonic() - job._slot_t0)
        freed = 1
        while st.waiting and st.running < self.concurrency and not st.stop.is_set():
            job, reg = st.waiting.popleft()
            if job.lost:
                # its lease was found lost while it waited (cancelled, say)
                if st.jobs.get(job.id) is job:
                    del st.jobs[job.id]
                job._phase = "done"
                self._emit("lost", job)
                freed += 1
                continue
            self._launch(job, reg)
        await self._unreserve(freed)

    # --- running a job -------------------------------------------------------

    def _in_thread(self, fn: SyncHandler, job: Job) -> "asyncio.Future[Any]":
        """Run fn(job) on a thread of the worker's daemon threads."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            if not fut.done():
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

        def call() -> None:
            job._thread = threading.get_ident()
            try:
                value, ok = fn(job), True
            except (SystemExit, KeyboardInterrupt) as e:
                value, ok = _HandlerExit(e), False
                value.__cause__ = e
            except BaseException as e:      # handed to the loop, re-raised there
                value, ok = e, False
            try:
                loop.call_soon_threadsafe(settle, ok, value)
            except RuntimeError:
                pass                        # the worker has stopped meanwhile

        self._threads.submit(call)
        return fut

    async def _run_job(self, job: AnyJob, reg: _Registered) -> None:
        st = self._state
        assert st is not None
        t0 = time.monotonic()
        job._phase = "running"
        fut: Optional[asyncio.Future[Any]] = None
        try:
            try:
                for what, value in (("payload", job.payload), ("checkpoint", job.saved)):
                    if isinstance(value, _Undecodable):
                        raise _Unreadable(
                            "the job's %s is not valid UTF-8 (%s): the database's encoding"
                            " is SQL_ASCII, and a client wrote it in another encoding"
                            % (what, value.error))
                if reg.is_async:
                    fut = asyncio.ensure_future(_guarded(reg.fn(job)))  # type: ignore[arg-type]
                else:
                    fut = self._in_thread(reg.fn, job)          # type: ignore[arg-type]
                if reg.timeout is not None:
                    done, _ = await asyncio.wait({fut}, timeout=reg.timeout)
                    if not done:
                        where = _stack_of(job, fut)
                        fut.cancel()        # a thread runs on, unheard
                        raise _TimedOut("timed out after %gs" % reg.timeout, where)
                result = await fut
            except asyncio.CancelledError:
                if fut is not None:
                    fut.cancel()
                if job._handed_back:
                    return              # the drain releases it
                raise
            except _TimedOut as e:
                details = None
                if e.where:
                    details = ("the handler was still running here after %gs:\n%s"
                               % (reg.timeout or 0, e.where))
                out = await self._fail(job, str(e), details=details)
            except _Unreadable as e:
                out = await self._fail(job, str(e), retryable=False)
            except Permanent as e:
                out = await self._fail(job, _describe(e), retryable=False, details=_trace(e))
            except RetryIn as e:
                out = await self._fail(job, _describe(e), retry_in=e.seconds,
                                       details=_trace(e))
            except Snooze as e:
                out = await self._snooze(job, e.seconds)
            except LeaseLost:
                out = _Outcome("lost")
            except _HandlerExit as e:
                out = await self._fail(job, str(e), details=_trace(e.__cause__ or e))
            except Exception as e:
                log.debug("%s: job %d raised", self.worker_id, job.id, exc_info=True)
                out = await self._fail(job, _describe(e), details=_trace(e))
            else:
                if job._handed_back:
                    return
                out = await self._complete_job(job, result)
            duration = time.monotonic() - t0
            self._log_outcome(job, out, duration)
            self._emit(out.name, job, duration, out.error)
        except psycopg.Error as e:
            # the report did not reach the database (in time): the lease
            # expires and the job runs again (at least once)
            log.error("%s: job %d: could not report (%s); its lease will expire and it will"
                      " run again", self.worker_id, job.id, _server_message(e))
            self._emit("error", job, time.monotonic() - t0, str(e))
        except Exception as e:
            # a fault of ours: say so here rather than in an unheard task
            log.exception("%s: job %d: could not report", self.worker_id, job.id)
            self._emit("error", job, time.monotonic() - t0, _describe(e))
        finally:
            job._phase = "done"
            if not job._handed_back:
                # the id may be ours again already (a lease lost while the
                # completion was sent, the job claimed anew): drop only this
                if st.jobs.get(job.id) is job:
                    del st.jobs[job.id]
                    st.tasks.pop(job.id, None)
                if not job._slot_freed:
                    await self._free_slot(job)

    def _log_outcome(self, job: AnyJob, out: "_Outcome", duration: float) -> None:
        """One line per finished attempt: failures with their error, at
        WARNING when the job will run again, at ERROR when it is dead."""
        what = "%s: job %d (%s) attempt %d of %d" % (
            self.worker_id, job.id, job.kind, job.attempt, job.max_retries + 1)
        if out.name == "lost":
            job.lost = True
            log.warning("%s: lease lost, outcome discarded", what)
        elif out.name == "retried":
            log.warning("%s failed after %.3fs, will be retried%s: %s", what, duration,
                        "" if out.retry_in is None else " in %gs" % out.retry_in,
                        _shorten(out.error))
        elif out.name == "failed":
            log.error("%s failed after %.3fs, dead (%s): %s", what, duration,
                      "permanent" if out.permanent else "no retries left", _shorten(out.error))
        elif out.name == "snoozed":
            log.info("%s: snoozed for %gs after %.3fs", what, out.retry_in or 0, duration)
        else:
            log.info("%s: %s in %.3fs", what, out.name, duration)

    async def _fail(self, job: AnyJob, error: str, *, retryable: bool = True,
                    retry_in: Optional[float] = None,
                    details: Optional[str] = None) -> "_Outcome":
        """jobq.fail; details go along when the server takes them."""
        job._phase = "reporting"

        def statement(caps: _Capabilities) -> _Statement:
            sql = "SELECT jobq.fail(%s, %s, %s"
            params: List[Any] = [job.id, job.lease_token, error]
            if not retryable:
                sql += ", retryable => false"
            if retry_in is not None:
                sql += ", retry_in => %s"
                params.append(_seconds(retry_in))
            if caps.details and details:
                sql += ", details => %s"
                params.append(_bound(details, MAX_DETAILS))
            return sql + ")", params

        rows, in_doubt = await self._retrying("fail job %d" % job.id, statement)
        status = rows[0][0] if rows else None
        if status is None and in_doubt:
            status = await self._had_failed(job, error)
        if status == "pending":
            return _Outcome("retried", error, retry_in=retry_in)
        if status == "failed":
            return _Outcome("failed", error, permanent=not retryable)
        return _Outcome("lost", error)

    async def _snooze(self, job: AnyJob, seconds: float) -> "_Outcome":
        job._phase = "reporting"
        rows, _ = await self._retrying("snooze job %d" % job.id, "SELECT jobq.snooze(%s, %s, %s)",
                                       (job.id, job.lease_token, _seconds(seconds)))
        return _Outcome("snoozed" if rows[0][0] is not None else "lost", retry_in=seconds)

    async def _complete_job(self, job: AnyJob, result: Any) -> "_Outcome":
        """jobq.complete with the handler's result; a result that cannot be
        stored (not JSON, refused by the server) fails this job for good."""
        job._phase = "reporting"
        try:
            text = None if result is None else self.dumps(result)
        except Exception as e:
            return await self._fail(job, "result not stored: " + _describe(e),
                                    retryable=False, details=_trace(e))
        st = self._state
        assert st is not None
        if st.reporting < self.concurrency:
            # a completion ends the job's use of this worker (it cannot be
            # handed back to us as a retry can): its slot goes to the next
            # claim while the completion commits; at most concurrency
            # completions wait so, more keep their slot
            job._slot_freed = True
            st.reporting += 1
            await self._free_slot(job)
        try:
            done = await self._complete(job, text)
        finally:
            if job._slot_freed:
                st.reporting -= 1
        if isinstance(done, _Refused):
            return await self._fail(job, "result not stored: " + done.message,
                                    retryable=False)
        return _Outcome("completed" if done else "lost")

    async def _complete(self, job: AnyJob, text: Optional[str]) -> "Union[bool, _Refused]":
        """jobq.complete, batched: the completions that arrive while one
        statement runs go together in the next (one round trip for many).
        True, False (the lease is lost) or _Refused (the server refused the
        result)."""
        st = self._state
        assert st is not None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        st.completes.append((job, text, fut))
        if not st.flushing:
            st.flushing = True
            asyncio.ensure_future(self._flush())
        return await fut

    async def _flush(self) -> None:
        st = self._state
        assert st is not None
        try:
            while st.completes:
                batch, st.completes = st.completes, []
                if len(batch) == 1:
                    await self._complete_one(*batch[0])
                    continue
                try:
                    rows, in_doubt = await self._retrying(
                        "complete %d jobs" % len(batch),
                        "SELECT t.id, jobq.complete(t.id, t.token, t.result::jsonb)"
                        "  FROM unnest(%s::bigint[], %s::bigint[], %s::text[])"
                        "       AS t(id, token, result)",
                        ([j.id for j, _, _ in batch], [j.lease_token for j, _, _ in batch],
                         [r for _, r, _ in batch]))
                except psycopg.Error as e:
                    if _transient(e):   # tried long enough: none reached the database
                        for _, _, fut in batch:
                            if not fut.done():
                                fut.set_exception(e)
                        continue
                    # one bad result (too large, say) fails the statement:
                    # one by one, so that it fails its own job and no other
                    log.warning("%s: completing %d jobs in one statement failed (%s);"
                                " completing them one by one", self.worker_id, len(batch),
                                _server_message(e))
                    for i, (job, text, fut) in enumerate(batch):
                        try:
                            await self._complete_one(job, text, fut)
                        except BaseException as e2:
                            for _, _, f in batch[i:]:
                                if not f.done():
                                    f.set_exception(e2)
                            raise
                    continue
                except BaseException as e:
                    for _, _, fut in batch:
                        if not fut.done():
                            fut.set_exception(e)
                    if not isinstance(e, Exception):
                        raise
                    continue
                ok = dict(rows)
                for j, _, fut in batch:
                    done = bool(ok.get(j.id))
                    if not done and in_doubt:
                        done = await self._had_completed(j)
                    if not fut.done():
                        fut.set_result(done)
        finally:
            st.flushing = False

    async def _complete_one(self, job: AnyJob, text: Optional[str],
                            fut: "asyncio.Future[Any]") -> None:
        """jobq.complete of one job; settles fut (a refused result: _Refused)."""
        try:
            rows, in_doubt = await self._retrying("complete job %d" % job.id,
                                                  "SELECT jobq.complete(%s, %s, %s::jsonb)",
                                                  (job.id, job.lease_token, text))
            done = bool(rows[0][0]) or (in_doubt and await self._had_completed(job))
        except psycopg.Error as e:
            if not fut.done():
                if (e.sqlstate or "")[:2] in ("22", "54"):
                    # data exception, program limit exceeded: the result itself
                    fut.set_result(_Refused(_server_message(e)))
                else:
                    fut.set_exception(e)
            return
        except BaseException as e:
            if not fut.done():
                fut.set_exception(e)
            if not isinstance(e, Exception):
                raise
            return
        if not fut.done():
            fut.set_result(done)

    async def _had_completed(self, job: AnyJob) -> bool:
        """A completion sent again after its connection died under it finds
        the lease token spent when the first one committed: the job's row
        tells (completed, in this attempt, by this worker)."""
        row = await self._job_row(job)
        if row is None or row[:3] != ("completed", job.retry_count, self.worker_id):
            return False
        log.info("%s: job %d: its completion had committed before the connection was lost",
                 self.worker_id, job.id)
        return True

    async def _had_failed(self, job: AnyJob, error: str) -> Optional[str]:
        """Likewise for a failure: its status ('pending', 'failed') when the
        row shows it recorded (its error, and a retry spent if retried),
        else None."""
        row = await self._job_row(job)
        if row is None:
            return None
        status, retry_count, _, last_error = row
        spent = {"pending": job.retry_count + 1, "failed": job.retry_count}.get(status)
        if retry_count != spent or not last_error or not error.startswith(last_error):
            return None
        log.info("%s: job %d: its failure had committed before the connection was lost",
                 self.worker_id, job.id)
        return str(status)

    async def _job_row(self, job: AnyJob) -> Optional[Tuple[Any, ...]]:
        """status, retry_count, worker_id and last_error of the job, as
        jobq.jobs shows them to a role that may work on its queue; None when
        it is not there or cannot be read."""
        try:
            rows, _ = await self._retrying(
                "look up job %d" % job.id,
                "SELECT status, retry_count, worker_id, last_error FROM jobq.jobs"
                " WHERE job_id = %s", (job.id,))
        except psycopg.Error as e:
            log.warning("%s: job %d: could not look it up: %s", self.worker_id, job.id,
                        _server_message(e))
            return None
        return rows[0] if rows else None

    async def _checkpoint(self, job: AnyJob, data: Mapping[str, Any]) -> None:
        rows, _ = await self._retrying("checkpoint job %d" % job.id,
                                       "SELECT jobq.checkpoint(%s, %s, %s)",
                                       (job.id, job.lease_token,
                                        Jsonb(dict(data), dumps=self.dumps)))
        if not rows[0][0]:
            job.lost = True
            raise LeaseLost("job %d: the lease is no longer ours" % job.id)
        job.saved = dict(data)

    # --- leases --------------------------------------------------------------

    async def _heartbeat(self) -> None:
        """Extend the lease of every job in hand (running, reporting or
        waiting for a slot) every lease * renew seconds."""
        st = self._state
        assert st is not None
        period = max(self.lease * self.renew, 0.05)
        while True:
            await asyncio.sleep(period)
            jobs = [j for j in st.jobs.values()
                    if j._phase in ("claimed", "running", "reporting")]
            if not jobs:
                continue
            try:
                # tried again until the next beat, which sends its own
                rows, _ = await self._retrying(
                    "lease renewal",
                    "SELECT t.id, jobq.extend(t.id, t.token, %s)"
                    "  FROM unnest(%s::bigint[], %s::bigint[]) AS t(id, token)",
                    (_seconds(self.lease), [j.id for j in jobs],
                     [j.lease_token for j in jobs]), patience=period)
            except psycopg.Error as e:
                if not _transient(e):   # an outage is logged once, by _outage
                    log.error("%s: extending leases failed: %s", self.worker_id, e)
                continue
            for job_id, expires in rows:
                job = st.jobs.get(job_id)
                if job is None or job._phase == "done":
                    continue
                if expires is None:
                    if not job.lost:
                        job.lost = True
                        log.warning("%s: job %d: lease lost", self.worker_id, job_id)
                else:
                    job.lease_expires_at = expires

    # --- the application worker registry (jobq 0.3.0) ---------------------

    def registry_info(self) -> Dict[str, Any]:
        """What the worker registers about itself in jobq.app_workers."""
        return {"library": "jobq-python", "version": __version__,
                "host": socket.gethostname(), "pid": os.getpid(),
                "concurrency": self.concurrency, "queues": self.queues,
                "kinds": self.kinds, "python": platform.python_version()}

    async def _register(self) -> None:
        """jobq.register_worker (insert or refresh), when the server has it."""
        st = self._state
        assert st is not None
        try:
            conn = await self._ops()
            if not st.caps.registry:
                return
            await conn.execute("SELECT jobq.register_worker(%s, %s::text[], %s::jsonb)",
                               (self.worker_id, self.queues,
                                Jsonb(self.registry_info(), dumps=self.dumps)))
        except psycopg.Error as e:
            if str(e) != st.registry_error:     # once, not at every heartbeat
                log.warning("%s: could not register in jobq.app_workers: %s",
                            self.worker_id, e)
                st.registry_error = str(e)
            return
        if not st.registered:
            log.info("%s: registered in jobq.app_workers", self.worker_id)
        st.registered, st.registry_error = True, None

    async def _registry_beat(self) -> None:
        """Refresh the worker's row in jobq.app_workers (its heartbeat there)
        well within jobq.worker_gone_after, whatever the lease; one write
        per beat, none per job (the view counts the jobs in hand)."""
        st = self._state
        assert st is not None
        while True:
            await asyncio.sleep(st.caps.beat)
            # shielded: a refresh cancelled in flight could still commit on
            # the server after the unregister and put the row back; the
            # stop waits for it instead (run's finally)
            st.refresh = asyncio.ensure_future(self._register())
            await asyncio.shield(st.refresh)

    async def _unregister(self) -> None:
        """jobq.unregister_worker, if the worker registered."""
        st = self._state
        assert st is not None
        if not st.registered:
            return
        try:
            await self._call("SELECT jobq.unregister_worker(%s)", (self.worker_id,))
            st.registered = False
        except Exception as e:          # stopping anyway: the row goes stale
            log.warning("%s: could not unregister from jobq.app_workers: %s",
                        self.worker_id, e)

    # --- stopping ------------------------------------------------------------

    async def _drain(self) -> int:
        """Give running jobs the grace period, then hand back the rest;
        return how many were handed back."""
        st = self._state
        assert st is not None
        # the jobs claimed ahead never started: back at once (those whose
        # lease was found lost are not ours to hand back)
        ahead = [job for job, _ in st.waiting]
        st.waiting.clear()
        for job in ahead:
            job._handed_back = True
            job._phase = "done"
            if st.jobs.get(job.id) is job:
                del st.jobs[job.id]
            if job.lost:
                self._emit("lost", job)
        await self._release([job for job in ahead if not job.lost], started=False)
        if st.tasks:
            abandon = asyncio.ensure_future(st.abandon.wait())
            deadline = time.monotonic() + self.grace
            while not st.abandon.is_set():
                left = [t for t in st.tasks.values() if not t.done()]
                remaining = deadline - time.monotonic()
                if not left or remaining <= 0:
                    break
                await asyncio.wait(left + [abandon], timeout=remaining,
                                   return_when=asyncio.FIRST_COMPLETED)
            abandon.cancel()
        # reports still trying to reach the database stop: their leases expire
        st.give_up.set()
        # still in their handler: hand them back; reporting ones finish
        back = [j for j in st.jobs.values() if j._phase in ("claimed", "running")]
        for job in back:
            job._handed_back = True
            task = st.tasks.get(job.id)
            if task is not None:
                task.cancel()
        rest = [t for t in st.tasks.values() if not t.done()]
        if rest:
            await asyncio.wait(rest)
        released = await self._release(back)
        if released < len(back):
            log.warning("%s: %d job(s) not handed back: their leases will expire",
                        self.worker_id, len(back) - released)
        return len(back)

    async def _release(self, jobs: Sequence[AnyJob], started: bool = True) -> int:
        """Hand jobs back with jobq.release: pending now, no retry spent;
        return how many were.  Jobs never started are logged at INFO."""
        if not jobs:
            return 0
        try:
            rows = await self._call(
                "SELECT t.id, jobq.release(t.id, t.token)"
                "  FROM unnest(%s::bigint[], %s::bigint[]) AS t(id, token)",
                ([j.id for j in jobs], [j.lease_token for j in jobs]))
        except psycopg.Error as e:
            log.error("%s: could not hand back %d job(s) (%s); their leases will expire",
                      self.worker_id, len(jobs), e)
            return 0
        released = {i for i, ok in rows if ok}
        for job in jobs:
            if job.id in released:
                log.log(logging.WARNING if started else logging.INFO,
                        "%s: job %d (%s) handed back, to run again",
                        self.worker_id, job.id, job.kind)
                self._emit("released", job)
            else:
                self._emit("lost", job)
        return len(released)

    def _emit(self, name: str, job: AnyJob, duration: Optional[float] = None,
              error: Optional[str] = None) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(Event(name, job.id, job.kind, job.queue, job.attempt,
                                duration, error))
        except Exception:
            log.exception("%s: the on_event hook raised", self.worker_id)


class _Threads:
    """Daemon threads for plain handlers, started as needed and kept while
    busy: one that never returns (a timeout, a hand-back) takes a thread of
    its own and cannot keep the process alive."""

    def __init__(self, idle_seconds: float = 30.0) -> None:
        self._work: "queue.SimpleQueue[Callable[[], None]]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0                  # threads waiting for work
        self._idle_seconds = idle_seconds

    def submit(self, call: Callable[[], None]) -> None:
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                self._work.put(call)
                return
        threading.Thread(target=self._serve, args=(call,), name="jobq-handler",
                         daemon=True).start()

    def _serve(self, call: Callable[[], None]) -> None:
        while True:
            call()
            with self._lock:
                self._idle += 1
            while True:
                try:
                    call = self._work.get(timeout=self._idle_seconds)
                    break
                except queue.Empty:
                    with self._lock:
                        if self._work.empty():
                            self._idle -= 1
                            return


class _TimedOut(Exception):
    """A handler ran past its timeout; where: its stack then, if known."""

    def __init__(self, message: str, where: Optional[str]) -> None:
        super().__init__(message)
        self.where = where


class _Unreadable(Exception):
    """A claimed job whose payload or checkpoint cannot be decoded."""


class _HandlerExit(Exception):
    """A handler raised SystemExit or KeyboardInterrupt (a library that
    calls sys.exit, say): its job fails by it, and the worker goes on with
    its other jobs.  Raised into the worker's loop, either would have ended
    run() at once and left every job in hand until its lease expired."""

    def __init__(self, e: BaseException) -> None:
        super().__init__(_describe(e))


async def _guarded(coro: Awaitable[Any]) -> Any:
    """An async handler's run, with SystemExit and KeyboardInterrupt as _HandlerExit."""
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as e:
        raise _HandlerExit(e) from e


@dataclass
class _Refused:
    """The server refused a result (too large, not valid JSON for it)."""

    message: str


@dataclass
class _Outcome:
    """How a job's attempt ended: the event's name, and for failures the
    error text; permanent: failed with retryable => false."""

    name: str
    error: Optional[str] = None
    permanent: bool = False
    retry_in: Optional[float] = None


def _describe(e: BaseException) -> str:
    """An exception as the job's last_error."""
    text = str(e)
    return "%s: %s" % (type(e).__name__, text) if text else type(e).__name__


def _server_message(e: psycopg.Error) -> str:
    """A server's error as one line: message (detail)."""
    diag = e.diag
    primary = diag.message_primary or str(e).split("\n", 1)[0]
    return "%s (%s)" % (primary, diag.message_detail) if diag.message_detail else primary


def _transient(e: BaseException) -> bool:
    """Is e a lost or refused connection, or a server error after which the
    same statement may simply be sent again?  Not a refused value (classes
    22, 54), a missing privilege or a constraint: those stay as they are."""
    if not isinstance(e, psycopg.Error) or isinstance(e, _WrongEncoding):
        return False
    if e.sqlstate:
        return e.sqlstate[:2] == "08" or e.sqlstate in _TRANSIENT_STATES
    # libpq's own: refused, closed unexpectedly, lost, timed out
    return isinstance(e, psycopg.OperationalError)


def _in_doubt(e: psycopg.Error) -> bool:
    """Did a statement sent perhaps commit although it failed?  Only when the
    connection was lost with no answer from the server (an error the server
    sent means it rolled back); class 08 is what PgBouncer sends when its
    server connection died under the statement."""
    if e.sqlstate:
        return e.sqlstate[:2] == "08"
    return _transient(e)


def _backoff(tries: int) -> float:
    """Seconds before the next try after tries failed ones (from 0): 100 ms
    doubling to 5 s, jittered (a half to all of it), so that workers a
    restart disconnected together do not come back together."""
    return min(5.0, 0.1 * 2 ** min(tries, 10)) * (0.5 + random.random() / 2)


def _shorten(text: Optional[str], limit: int = 1000) -> str:
    """An error for a log line: its first limit characters."""
    text = text or ""
    if len(text) <= limit:
        return text
    return "%s... (%d more characters)" % (text[:limit], len(text) - limit)


def _bound(text: str, limit: int) -> str:
    """text in at most limit bytes of UTF-8, keeping its end (where a Python
    traceback puts the error) and cutting on a character boundary."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    mark = "[... %d bytes cut ...]\n"
    room = limit - len((mark % len(data)).encode())
    tail = data[len(data) - room:].decode("utf-8", "ignore")
    return mark % (len(data) - len(tail.encode())) + tail


def _trace(e: BaseException) -> str:
    """e's traceback, as Python prints it."""
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


def _stack_of(job: AnyJob, fut: "asyncio.Future[Any]") -> Optional[str]:
    """Where a handler is now: its thread's stack, or its task's."""
    try:
        if isinstance(fut, asyncio.Task):
            buf = io.StringIO()
            fut.print_stack(file=buf)
            return buf.getvalue()
        frame = sys._current_frames().get(job._thread) if job._thread else None
        if frame is not None:
            return "".join(traceback.format_stack(frame))
    except Exception:                   # a diagnosis only
        pass
    return None
