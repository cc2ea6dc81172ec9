"""The worker that test_sigterm_mid_batch sends SIGTERM: `fast` jobs take
0.3 s, `slow` ones 60 s; a grace of 1.5 s lets the fast ones finish and hands
the slow ones back.  Usage: sigterm_worker.py QUEUE"""

import logging
import sys
import time

import jobq
from test_jobq import DSN, POOLER, finished, started

logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                    format="%(asctime)s %(levelname)s %(message)s")
w = jobq.Worker(DSN, queues=sys.argv[1], concurrency=4, lease=5, wait=5, grace=1.5,
                pooler=POOLER)


@w.handler("fast")
def fast(job):
    started(job)
    time.sleep(0.3)
    finished(job)


@w.handler("slow")
def slow(job):
    started(job)
    time.sleep(60)
    finished(job)


sys.exit(w.run())
