#!/usr/bin/env python3
"""An example jobq worker: handlers for a few kinds of jobs, run by the jobq
library (clients/python).

    python3 worker.py --queue default --concurrency 10 --lease 30 --wait 5

Connects with the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).
SIGTERM: no more claims, the running jobs finish, exit 0.  A second SIGTERM or
--shutdown-timeout hands back what still runs (jobq.release: it runs again,
no retry spent) and exits 1.

The handlers stand in for real work.  Each one is safe to run twice, because
jobq delivers a job at least once: see "Writing a worker" in docs/guide.md.
"""

import argparse
import logging
import os
import sys
import time

try:
    import jobq
except ImportError:     # not installed: use the library from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "clients", "python"))
    import jobq


def send_email(job):
    """Quick work: a real handler would call the mail service with an
    idempotency key derived from the job id, so a second run sends nothing."""
    time.sleep(0.01)
    return {"sent_to": job.payload.get("to"), "message_id": "msg-%d" % job.id}


def resize_image(job):
    """Quick work whose output has a deterministic name: running it twice
    overwrites the same file."""
    time.sleep(0.02)
    p = job.payload
    return {"resized": p.get("image"), "width": p.get("width", 100)}


def confirm_order(job):
    return {"confirmed": job.payload["order_id"]}


def build_report(job):
    """Slow work: the library extends the lease meanwhile."""
    time.sleep(float(job.payload.get("seconds", 3)))
    return {"built": True, "seconds": job.payload.get("seconds", 3)}


def import_rows(job):
    """Long work in chunks, resumable: progress is saved after every chunk and
    the next attempt starts where the last one stopped.  The first attempt of
    a payload with "fail_once_at" fails when it gets there (a dropped
    connection)."""
    p = job.payload
    rows, chunk = int(p["rows"]), int(p.get("chunk", 10))
    start = (job.saved or {}).get("done", 0)
    done = start
    while done < rows:
        if job.retry_count == 0 and done == p.get("fail_once_at"):
            raise ConnectionError("connection reset while importing (simulated)")
        time.sleep(0.01)                    # "import" rows done .. done+chunk
        done = min(done + chunk, rows)
        job.checkpoint({"done": done})
    return {"imported": rows, "resumed_from": start}


def deliver_webhook(job):
    """Call an upstream that answers with the statuses of payload "responses"
    in turn (the last one for ever after).  The call number is saved as a
    checkpoint *before* each call, as a real handler saves an upstream request
    id, so every attempt knows what was already sent."""
    responses = job.payload["responses"]
    calls = (job.saved or {}).get("calls", 0)
    job.checkpoint({"calls": calls + 1})
    status = responses[min(calls, len(responses) - 1)]
    if status == 429:
        raise jobq.Snooze(0.2, "upstream returned 429")     # no retry spent
    if 400 <= status < 500:
        raise jobq.Permanent("upstream returned %d" % status)
    if status >= 500:
        raise RuntimeError("upstream returned %d" % status)
    return {"status": status, "calls": calls + 1}


DSN = ""     # set by main: the handlers below open connections of their own


def split_batch(job):
    """A workflow: a batch too big for one job splits itself in two halves
    (each a batch.split again), and a fan-in callback batch.done runs after
    both, whatever their outcome (on_parent_failure 'run').  The halves
    depend on this job, so they start only once it completed; the idempotency
    keys make a second run of this handler enqueue nothing new."""
    items = job.payload["items"]
    if len(items) <= job.payload.get("max", 2):
        return {"sum": sum(items)}
    half = len(items) // 2
    with jobq.connect(DSN, pooler=True) as conn:
        halves = [jobq.enqueue(conn, "batch.split", dict(job.payload, items=part),
                               queue=job.queue, depends_on=[job.id],
                               idempotency_key="split-%d-%d" % (job.id, i)).job_id
                  for i, part in enumerate((items[:half], items[half:]))]
        jobq.enqueue(conn, "batch.done", {"split": job.id}, queue=job.queue,
                     depends_on=halves, on_parent_failure="run",
                     idempotency_key="done-%d" % job.id)
        conn.commit()
    return {"halves": halves}


def batch_done(job):
    """The fan-in callback: what its parents (the two halves) returned."""
    with jobq.connect(DSN, pooler=True) as conn:
        rows = conn.execute("SELECT status, result FROM jobq.parent_results(%s)",
                            (job.id,)).fetchall()
    total = 0
    for status, result in rows:
        if status != "completed":
            raise jobq.Permanent("a half ended %s" % status)
        total += result.get("sum", result.get("total", 0))
    return {"total": total}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", default="default")
    ap.add_argument("--worker-id")
    ap.add_argument("--batch", type=int, help="most jobs per claim (default: concurrency)")
    ap.add_argument("--concurrency", type=int, help="jobs run at once (default: batch or 10)")
    ap.add_argument("--lease", type=float, default=30, help="lease, seconds")
    ap.add_argument("--wait", type=float, default=5, help="claim wait, seconds")
    ap.add_argument("--shutdown-timeout", type=float, default=30, help="seconds")
    ap.add_argument("--dsn", default="", help="libpq conninfo (default: PG* variables)")
    a = ap.parse_args()
    global DSN
    DSN = a.dsn
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    # pooler=True: nothing prepared, so the same worker runs through PgBouncer
    # in transaction mode (and costs next to nothing directly)
    w = jobq.Worker(a.dsn, queues=a.queue, worker_id=a.worker_id,
                    concurrency=a.concurrency or a.batch or 10, batch=a.batch,
                    lease=a.lease, wait=a.wait, grace=a.shutdown_timeout, pooler=True)
    w.handle("email.send", send_email)
    w.handle("image.resize", resize_image)
    w.handle("order.confirm", confirm_order)
    w.handle("report.build", build_report)
    w.handle("import.rows", import_rows)
    w.handle("webhook.deliver", deliver_webhook)
    w.handle("batch.split", split_batch)
    w.handle("batch.done", batch_done)
    return w.run()


if __name__ == "__main__":
    sys.exit(main())
