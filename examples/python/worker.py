#!/usr/bin/env python3
"""An example jobq worker: handlers for a few kinds of jobs, run by jobq_worker.

    python3 worker.py --queue default --batch 10 --lease 30 --wait 5

Connects with the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).
SIGTERM: no more claims, the running jobs finish, exit 0.  A second SIGTERM or
--shutdown-timeout abandons what still runs (exit 1; it runs again).

The handlers stand in for real work.  Each one is safe to run twice, because
jobq delivers a job at least once: see "Writing a worker" in the README.
"""

import argparse
import logging
import os
import sys
import time

from jobq_worker import PermanentError, RateLimited, Worker


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
    """The job of producer.py: confirm an order that was committed."""
    return {"confirmed": job.payload["order_id"]}


def build_report(job):
    """Slow work: the heartbeat keeps the lease alive meanwhile."""
    seconds = float(job.payload.get("seconds", 3))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))
    return {"built": True, "seconds": seconds}


def import_rows(job):
    """Long work in chunks, resumable: progress is saved after every chunk and
    the next attempt starts where the last one stopped.  The first attempt of
    a payload with "fail_once_at" fails when it gets there (a dropped
    connection)."""
    p = job.payload
    rows, chunk = int(p["rows"]), int(p.get("chunk", 10))
    start = (job.checkpoint or {}).get("done", 0)
    done = start
    while done < rows:
        if job.retry_count == 0 and done == p.get("fail_once_at"):
            raise ConnectionError("connection reset while importing (simulated)")
        time.sleep(0.01)                    # "import" rows done .. done+chunk
        done = min(done + chunk, rows)
        job.save_checkpoint({"done": done})
    return {"imported": rows, "resumed_from": start}


def deliver_webhook(job):
    """Call an upstream that answers with the statuses of payload "responses"
    in turn (the last one for ever after).  The call number is saved as a
    checkpoint *before* each call, as a real handler saves an upstream request
    id, so every attempt knows what was already sent."""
    responses = job.payload["responses"]
    calls = (job.checkpoint or {}).get("calls", 0)
    job.save_checkpoint({"calls": calls + 1})
    status = responses[min(calls, len(responses) - 1)]
    if status == 429:
        raise RateLimited(0.2, "upstream returned 429")
    if 400 <= status < 500:
        raise PermanentError("upstream returned %d" % status)
    if status >= 500:
        raise RuntimeError("upstream returned %d" % status)
    return {"status": status, "calls": calls + 1}


HANDLERS = {
    "email.send": send_email,
    "image.resize": resize_image,
    "order.confirm": confirm_order,
    "report.build": build_report,
    "import.rows": import_rows,
    "webhook.deliver": deliver_webhook,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", default="default")
    ap.add_argument("--worker-id")
    ap.add_argument("--batch", type=int, default=10, help="jobs per claim")
    ap.add_argument("--concurrency", type=int, help="jobs run at once (default: batch)")
    ap.add_argument("--lease", type=float, default=30, help="lease, seconds")
    ap.add_argument("--wait", type=float, default=5, help="claim wait, seconds")
    ap.add_argument("--shutdown-timeout", type=float, default=30, help="seconds")
    ap.add_argument("--dsn", default="", help="libpq conninfo (default: PG* variables)")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    w = Worker(HANDLERS, queue=a.queue, conninfo=a.dsn, worker_id=a.worker_id,
               batch=a.batch, concurrency=a.concurrency, lease=a.lease, wait=a.wait,
               shutdown_timeout=a.shutdown_timeout)
    code = w.run()
    if code != 0:
        # handlers abandoned at shutdown still run in their threads, which
        # would keep the interpreter alive: leave without waiting for them
        logging.shutdown()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
