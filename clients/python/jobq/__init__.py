"""jobq: producer and worker library for the jobq PostgreSQL extension.

    import jobq

    # producer: in the caller's own transaction
    with conn.transaction():
        conn.execute("INSERT INTO orders ...")
        job = jobq.enqueue(conn, "order.confirm", {"order_id": 42},
                           idempotency_key="order-42")

    # worker
    worker = jobq.Worker(queues="default", concurrency=8)

    @worker.handler("order.confirm")
    def confirm(job):
        ...
        return {"confirmed": job.payload["order_id"]}

    worker.run()        # until SIGTERM / SIGINT

Only psycopg 3 is needed.  See clients/python/README.md.
"""

from ._version import __version__
from .encoder import JSONEncoder, dumps
from .errors import LeaseLost, Permanent, RetryIn, Snooze

try:
    import psycopg as _psycopg
except ImportError as _missing:
    # "import jobq" still works (so jobq.web can say what to install); the
    # names that need psycopg say it when used
    _psycopg = None
    _MISSING = _missing

if _psycopg is not None:
    from .producer import (Enqueued, connect, enqueue, enqueue_async, enqueue_many,
                           enqueue_many_async)
    from .worker import AsyncJob, Event, Job, Worker

__all__ = [
    "AsyncJob", "Enqueued", "Event", "JSONEncoder", "Job", "LeaseLost", "Permanent",
    "RetryIn", "Snooze", "Worker", "__version__", "connect", "dumps", "enqueue",
    "enqueue_async", "enqueue_many", "enqueue_many_async",
]

if _psycopg is None:
    def __getattr__(name):
        if name in __all__:
            raise ImportError(f"jobq.{name} needs psycopg 3, which cannot be imported ({_MISSING}): "
                              "pip install psycopg, or apt-get install python3-psycopg")
        raise AttributeError(f"module 'jobq' has no attribute {name!r}")
