"""Enqueue jobs: jobq.enqueue and jobq.enqueue_many from Python.

Every function runs on what it is given and never commits on its own:

* a psycopg ``Connection`` or ``Cursor``: the job is enqueued in that
  connection's current transaction, so it commits (or rolls back) with the
  caller's business write.  On a connection without autocommit, psycopg
  opens a transaction if none is open; the caller commits it.
* a pool (anything with a ``connection()`` context manager, such as
  ``psycopg_pool.ConnectionPool``): one connection is borrowed, and the pool
  commits when it is given back.

Ambiguous commits.  When the connection dies after the statement (or its
COMMIT) was sent, the enqueue may have committed or not.  On a pool the
library owns the transaction: a call whose every job has an idempotency key
is sent again on a new connection while it fails because the database
cannot be reached (a restart, a failover: worker._transient), with backoff
(100 ms doubling to 2 s, jittered), for up to ``retry_for`` seconds (default
30; 0: never).  The key makes a second try after a first that committed a
no-op: it answers ``created=False`` with the job's id.  A call without keys
is never sent twice (it could make two jobs).  A psycopg error raised from a
pool has ``jobq_in_doubt``: True when a try may have committed, False when
none did.  The first failure is logged at WARNING (logger "jobq"), the
answer after it at INFO.  On the caller's connection or cursor nothing is
tried again: the caller's transaction is gone with its connection; run it
again, with the same idempotency keys, on a new connection (an enqueue that
had committed is then found, not doubled).

Times come from the database clock: ``run_at`` is a ``datetime``, or a
``timedelta`` counted from the database's ``now()``.

Payloads are written with ``jobq.dumps`` (Decimal, datetime, date, time and
UUID too; see jobq.encoder): as UTF-8 text on a connection whose client
encoding is UTF8, with non-ASCII characters escaped on any other (the server
translates them into its encoding, or refuses what it cannot hold).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import random
import time
from typing import (Any, AsyncContextManager, ContextManager, List, Mapping,
                    NamedTuple, Optional, Protocol, Sequence, Tuple, Union)

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb

from .encoder import dumps as _dumps
from .worker import _in_doubt, _transient

log = logging.getLogger("jobq")

RETRY_FOR = 30.0


class Enqueued(NamedTuple):
    """What enqueue returns: the job's id, and False when an idempotency key
    matched an existing job (which is then left unchanged)."""

    job_id: int
    created: bool


class Pool(Protocol):
    """The part of a connection pool this module uses."""

    def connection(self) -> ContextManager[psycopg.Connection[Any]]: ...


class AsyncPool(Protocol):
    """The part of an asyncio connection pool this module uses."""

    def connection(self) -> AsyncContextManager[psycopg.AsyncConnection[Any]]: ...


Target = Union[psycopg.Connection[Any], psycopg.Cursor[Any], Pool]
AsyncTarget = Union[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any], AsyncPool]
Priority = Union[int, str]
RunAt = Union[datetime.datetime, datetime.timedelta, None]


def _options(queue: str, priority: Priority, run_at: RunAt,
             max_retries: Optional[int]) -> Tuple[str, List[Any]]:
    """The SQL of the common named arguments, and their parameters."""
    params: List[Any] = [queue]
    sql = "queue => %s"
    if isinstance(priority, str):
        sql += ", priority => jobq.priority(%s)"    # a label: 'high' ...
    else:
        sql += ", priority => %s"
    params.append(priority)
    if isinstance(run_at, datetime.timedelta):
        sql += ", run_at => now() + %s"             # the database's clock
        params.append(run_at)
    elif run_at is not None:
        sql += ", run_at => %s"
        params.append(run_at)
    sql += ", max_retries => %s"
    params.append(max_retries)
    return sql, params


def _parents(depends_on: Optional[Sequence[int]],
             on_parent_failure: str) -> Tuple[str, List[Any]]:
    """The SQL of depends_on and on_parent_failure (jobq 0.2.0), only when
    there are parents: without them the call also works against 0.1.0."""
    if on_parent_failure not in ("cancel", "run"):
        raise ValueError("on_parent_failure must be 'cancel' or 'run'")
    if depends_on is None:
        return "", []
    return (", depends_on => %s::bigint[], on_parent_failure => %s",
            [[int(p) for p in depends_on], on_parent_failure])


def _one(kind: str, payload: Optional[Mapping[str, Any]], queue: str,
         priority: Priority, run_at: RunAt, max_retries: Optional[int],
         idempotency_key: Optional[str], concurrency_key: Optional[str],
         depends_on: Optional[Sequence[int]] = None,
         on_parent_failure: str = "cancel") -> Tuple[str, List[Any]]:
    opts, params = _options(queue, priority, run_at, max_retries)
    deps, dparams = _parents(depends_on, on_parent_failure)
    sql = ("SELECT job_id, created FROM jobq.enqueue(%s, %s, " + opts +
           ", idempotency_key => %s, concurrency_key => %s" + deps + ")")
    return sql, [kind, Jsonb(dict(payload or {}))] + params + [
        idempotency_key, concurrency_key] + dparams


def _many(kind: str, payloads: Sequence[Mapping[str, Any]], queue: str,
          priority: Priority, run_at: RunAt, max_retries: Optional[int],
          idempotency_keys: Optional[Sequence[Optional[str]]],
          concurrency_key: Optional[str],
          depends_on: Optional[Sequence[int]] = None,
          on_parent_failure: str = "cancel") -> Tuple[str, List[Any]]:
    if idempotency_keys is not None and len(idempotency_keys) != len(payloads):
        raise ValueError("idempotency_keys must have one key per payload")
    opts, params = _options(queue, priority, run_at, max_retries)
    deps, dparams = _parents(depends_on, on_parent_failure)
    sql = ("SELECT job_id, created FROM jobq.enqueue_many(%s, %s::jsonb[], " + opts +
           ", idempotency_keys => %s::text[], concurrency_key => %s" + deps + ")")
    return sql, [kind, [Jsonb(dict(p)) for p in payloads]] + params + [
        None if idempotency_keys is None else list(idempotency_keys),
        concurrency_key] + dparams


def _utf8_dumps(obj: Any) -> str:
    return _dumps(obj)


def _ascii_dumps(obj: Any) -> str:
    return _dumps(obj, ascii=True)


def _bind(params: List[Any], conn: Any) -> List[Any]:
    """Give the JSON parameters the writer that suits conn's client encoding:
    psycopg sends JSON text as UTF-8 bytes, which only a UTF8 connection
    reads as such; on any other, ASCII with escapes is safe."""
    fn = _utf8_dumps if conn.info.encoding == "utf-8" else _ascii_dumps
    for p in params:
        for j in (p if isinstance(p, list) else [p]):
            if isinstance(j, Jsonb):
                j.dumps = fn
    return params


def _check_retry_for(retry_for: float) -> float:
    r = float(retry_for)
    if not r >= 0:          # NaN too
        raise ValueError("retry_for must be a non-negative number of seconds")
    return r


def _backoff(tries: int) -> float:
    """Seconds before the next try after tries failed ones (from 0): 100 ms
    doubling to 2 s, jittered (a half to all of it)."""
    return min(2.0, 0.1 * 2 ** min(tries, 10)) * (0.5 + random.random() / 2)


# how far a try on a pool got: no connection; the statement sent; its COMMIT
_NONE, _SENT, _COMMIT = 0, 1, 2


class _Try:
    """One try on a pool: whether its failure may have committed, and
    whether another try is in order."""

    def __init__(self, what: str, keyed: bool, retry_for: float) -> None:
        self.what = what
        self.keyed = keyed
        self.retry_for = retry_for
        self.deadline = time.monotonic() + retry_for
        self.in_doubt = False
        self.tries = 0
        self.outage: Optional[float] = None

    def failed(self, e: psycopg.Error, stage: int, autocommit: bool) -> float:
        """Mark e (jobq_in_doubt); the seconds to wait before the next try,
        or raise e."""
        # without autocommit, a statement that failed never committed: only
        # its COMMIT (the pool's, when the connection is given back) can have
        if stage == _COMMIT or (stage == _SENT and autocommit):
            self.in_doubt = self.in_doubt or _in_doubt(e)
        try:
            setattr(e, "jobq_in_doubt", self.in_doubt)
        except AttributeError:
            pass
        left = self.deadline - time.monotonic()
        if (not self.keyed or left <= 0 or not _transient(e)
                or type(e).__name__ == "PoolClosed"):
            raise e
        if self.outage is None:
            self.outage = time.monotonic()
            log.warning("jobq: the database cannot be reached (%s: %s); tried again with its"
                        " idempotency keys for up to %g s", self.what,
                        str(e).strip().split("\n", 1)[0], self.retry_for)
        wait = min(_backoff(self.tries), left)
        self.tries += 1
        return wait

    def done(self) -> None:
        if self.outage is not None:
            log.info("jobq: %s: the database answers again (after %.1f s)", self.what,
                     time.monotonic() - self.outage)


def _run(target: Target, sql: str, params: List[Any], what: str = "enqueue",
         keyed: bool = False, retry_for: float = RETRY_FOR) -> List[Tuple[Any, ...]]:
    if isinstance(target, psycopg.Cursor):
        target.execute(sql, _bind(params, target.connection))
        return target.fetchall()
    if isinstance(target, psycopg.Connection):
        return target.execute(sql, _bind(params, target)).fetchall()
    t = _Try(what, keyed, retry_for)
    while True:
        stage, autocommit = _NONE, False
        try:
            with target.connection() as conn:
                stage, autocommit = _SENT, conn.autocommit
                rows = conn.execute(sql, _bind(params, conn)).fetchall()
                stage = _COMMIT
        except psycopg.Error as e:
            time.sleep(t.failed(e, stage, autocommit))
            continue
        t.done()
        return rows


async def _arun(target: AsyncTarget, sql: str, params: List[Any], what: str = "enqueue",
                keyed: bool = False, retry_for: float = RETRY_FOR) -> List[Tuple[Any, ...]]:
    if isinstance(target, psycopg.AsyncCursor):
        await target.execute(sql, _bind(params, target.connection))
        return await target.fetchall()
    if isinstance(target, psycopg.AsyncConnection):
        return await (await target.execute(sql, _bind(params, target))).fetchall()
    t = _Try(what, keyed, retry_for)
    while True:
        stage, autocommit = _NONE, False
        try:
            async with target.connection() as conn:
                stage, autocommit = _SENT, conn.autocommit
                rows = await (await conn.execute(sql, _bind(params, conn))).fetchall()
                stage = _COMMIT
        except psycopg.Error as e:
            await asyncio.sleep(t.failed(e, stage, autocommit))
            continue
        t.done()
        return rows


def _all_keyed(keys: Optional[Sequence[Optional[str]]]) -> bool:
    return keys is not None and all(k is not None for k in keys)


def enqueue(target: Target, kind: str, payload: Optional[Mapping[str, Any]] = None, *,
            queue: str = "default", priority: Priority = 0, run_at: RunAt = None,
            max_retries: Optional[int] = None, idempotency_key: Optional[str] = None,
            concurrency_key: Optional[str] = None, depends_on: Optional[Sequence[int]] = None,
            on_parent_failure: str = "cancel", retry_for: float = RETRY_FOR) -> Enqueued:
    """Enqueue one job on ``target`` (see the module docstring).  With
    ``depends_on`` (job ids) the job is blocked until every parent finished.
    On a pool, with an idempotency key, tried again for up to ``retry_for``
    seconds while the database cannot be reached."""
    retry_for = _check_retry_for(retry_for)
    sql, params = _one(kind, payload, queue, priority, run_at, max_retries,
                       idempotency_key, concurrency_key, depends_on, on_parent_failure)
    job_id, created = _run(target, sql, params, "enqueue %s" % kind,
                           idempotency_key is not None, retry_for)[0]
    return Enqueued(job_id, created)


def enqueue_many(target: Target, kind: str, payloads: Sequence[Mapping[str, Any]], *,
                 queue: str = "default", priority: Priority = 0, run_at: RunAt = None,
                 max_retries: Optional[int] = None,
                 idempotency_keys: Optional[Sequence[Optional[str]]] = None,
                 concurrency_key: Optional[str] = None,
                 depends_on: Optional[Sequence[int]] = None,
                 on_parent_failure: str = "cancel",
                 retry_for: float = RETRY_FOR) -> List[Enqueued]:
    """Enqueue one job per payload in one statement; results in input order.
    ``depends_on``: every job of the batch waits for all of these.  On a
    pool, tried again (``retry_for``) only when every job has a key."""
    retry_for = _check_retry_for(retry_for)
    if not payloads:
        return []
    sql, params = _many(kind, payloads, queue, priority, run_at, max_retries,
                        idempotency_keys, concurrency_key, depends_on, on_parent_failure)
    return [Enqueued(i, c) for i, c in _run(target, sql, params,
                                            "enqueue_many %s (%d jobs)" % (kind, len(payloads)),
                                            _all_keyed(idempotency_keys), retry_for)]


async def enqueue_async(target: AsyncTarget, kind: str,
                        payload: Optional[Mapping[str, Any]] = None, *,
                        queue: str = "default", priority: Priority = 0,
                        run_at: RunAt = None, max_retries: Optional[int] = None,
                        idempotency_key: Optional[str] = None,
                        concurrency_key: Optional[str] = None,
                        depends_on: Optional[Sequence[int]] = None,
                        on_parent_failure: str = "cancel",
                        retry_for: float = RETRY_FOR) -> Enqueued:
    """enqueue() for a psycopg AsyncConnection, AsyncCursor or async pool."""
    retry_for = _check_retry_for(retry_for)
    sql, params = _one(kind, payload, queue, priority, run_at, max_retries,
                       idempotency_key, concurrency_key, depends_on, on_parent_failure)
    job_id, created = (await _arun(target, sql, params, "enqueue %s" % kind,
                                   idempotency_key is not None, retry_for))[0]
    return Enqueued(job_id, created)


async def enqueue_many_async(target: AsyncTarget, kind: str,
                             payloads: Sequence[Mapping[str, Any]], *,
                             queue: str = "default", priority: Priority = 0,
                             run_at: RunAt = None, max_retries: Optional[int] = None,
                             idempotency_keys: Optional[Sequence[Optional[str]]] = None,
                             concurrency_key: Optional[str] = None,
                             depends_on: Optional[Sequence[int]] = None,
                             on_parent_failure: str = "cancel",
                             retry_for: float = RETRY_FOR) -> List[Enqueued]:
    """enqueue_many() for a psycopg AsyncConnection, AsyncCursor or async pool."""
    retry_for = _check_retry_for(retry_for)
    if not payloads:
        return []
    sql, params = _many(kind, payloads, queue, priority, run_at, max_retries,
                        idempotency_keys, concurrency_key, depends_on, on_parent_failure)
    return [Enqueued(i, c) for i, c in await _arun(
        target, sql, params, "enqueue_many %s (%d jobs)" % (kind, len(payloads)),
        _all_keyed(idempotency_keys), retry_for)]


def _has_client_encoding(conninfo: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether the caller chose a client encoding (conninfo, keyword or
    PGCLIENTENCODING)."""
    if "client_encoding" in kwargs or os.environ.get("PGCLIENTENCODING"):
        return True
    return "client_encoding" in conninfo_to_dict(conninfo)


def connect(conninfo: str = "", *, pooler: bool = False, autocommit: bool = False,
            **kwargs: Any) -> psycopg.Connection[Any]:
    """psycopg.connect(), with ``pooler=True`` for a PgBouncer in transaction
    mode: no server-side prepared statements (prepare_threshold=None).  The
    client encoding is UTF8 unless the caller chose one, so that text comes
    back as str whatever the server's encoding (on SQL_ASCII, psycopg would
    otherwise return bytes)."""
    if pooler:
        kwargs["prepare_threshold"] = None
    if not _has_client_encoding(conninfo, kwargs):
        kwargs["client_encoding"] = "UTF8"
    return psycopg.connect(conninfo, autocommit=autocommit, **kwargs)
