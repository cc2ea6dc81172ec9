"""Throughput of the Python library with no-op handlers at concurrency 8,
against the SQL-only worker in the same run and on the same server.

    JOBQ_TEST_DSN=... python3 throughput.py [JOBS]

or from test_jobq.py with JOBQ_THROUGHPUT=1 (run.sh passes it through).
Every contender drains the same backlog of JOBS no-op jobs in a queue of its
own; the time runs from the first claim to the last completion.

  library, sync       Worker(concurrency=8), a plain function (a thread per job)
  library, async      Worker(concurrency=8), an async function
  SQL-only, batch 1   8 connections, each: jobq.claim(batch => 1), jobq.complete
  SQL-only, batch 8   8 connections, each: jobq.claim(batch => 8), jobq.complete_many
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "clients", "python"))

import jobq  # noqa: E402


def _backlog(dsn, pooler, queue, n):
    with jobq.connect(dsn, pooler=pooler, autocommit=True) as conn:
        for i in range(0, n, 1000):
            jobq.enqueue_many(conn, "noop", [{"n": 1}] * min(1000, n - i), queue=queue)
        conn.execute("VACUUM ANALYZE jobq.job")


def _left(dsn, pooler, queue):
    with jobq.connect(dsn, pooler=pooler, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM jobq.jobs WHERE queue = %s"
                            " AND status <> 'completed'", (queue,)).fetchone()[0]


def library(dsn, pooler, queue, n, use_async):
    _backlog(dsn, pooler, queue, n)
    w = jobq.Worker(dsn, queues=queue, concurrency=8, wait=0.2, pooler=pooler)
    if use_async:
        async def noop(job):
            return None
        w.handle("noop", noop)
    else:
        w.handle("noop", lambda job: None)
    done = threading.Event()
    count = [0]

    def on_event(e):
        if e.name == "completed":
            count[0] += 1
            if count[0] == n:
                done.set()
    w.on_event = on_event
    t0 = time.monotonic()
    t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
    t.start()
    done.wait(300)
    elapsed = time.monotonic() - t0
    w.stop()
    t.join(30)
    assert _left(dsn, pooler, queue) == 0
    return n / elapsed


def sql_only(dsn, pooler, queue, n, batch):
    _backlog(dsn, pooler, queue, n)

    def client():
        with jobq.connect(dsn, pooler=pooler, autocommit=True) as conn:
            while True:
                rows = conn.execute("SELECT job_id, lease_token FROM jobq.claim(%s, batch => %s)",
                                    (queue, batch)).fetchall()
                if not rows:
                    return
                if batch == 1:
                    conn.execute("SELECT jobq.complete(%s, %s)", rows[0])
                else:
                    conn.execute("SELECT jobq.complete_many(%s, %s)",
                                 ([r[0] for r in rows], [r[1] for r in rows]))
    threads = [threading.Thread(target=client) for _ in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    assert _left(dsn, pooler, queue) == 0
    return n / elapsed


def measure(dsn, pooler, prefix, n=3000):
    """Run all four, interleaved; a table of jobs/s."""
    rows = [
        ("library, sync handler", lambda q: library(dsn, pooler, q, n, False)),
        ("library, async handler", lambda q: library(dsn, pooler, q, n, True)),
        ("SQL-only, batch 1", lambda q: sql_only(dsn, pooler, q, n, 1)),
        ("SQL-only, batch 8", lambda q: sql_only(dsn, pooler, q, n, 8)),
    ]
    out = ["%d no-op jobs, concurrency 8, %s:" % (n, "via pgbouncer" if pooler else "direct")]
    for i, (name, fn) in enumerate(rows):
        out.append("  %-24s %7.0f jobs/s" % (name, fn("%s_tp%d" % (prefix, i))))
    return "\n".join(out)


if __name__ == "__main__":
    print(measure(os.environ.get("JOBQ_TEST_DSN", ""),
                  os.environ.get("JOBQ_TEST_VIA") == "pgbouncer", "tp_%d" % os.getpid(),
                  int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
