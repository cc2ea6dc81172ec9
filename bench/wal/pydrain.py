#!/usr/bin/python3
"""bench/wal/pydrain.py: drain a backlog the way an application's workers do,
from Python (psycopg 3, Debian's python3-psycopg): each of CLIENTS processes
claims BATCH jobs in one transaction (rows to the client), then completes them
in the next.  Prints the jobs completed per second over SECONDS.

    pydrain.py CONNINFO SHAPE CLIENTS BATCH SECONDS
SHAPE: bare2tx (lease UPDATE ... RETURNING, then DELETE), bare1tx (one DELETE
... RETURNING), jobq2tx (SELECT * FROM jobq.claim, then jobq.complete_many),
jobqnarrow (the same, three columns of the claim only).
Statements are sent with psycopg's default (extended protocol, server-side
prepared after 5 executions).
"""
import multiprocessing as mp
import sys
import time

import psycopg

CLAIM = {
    'bare2tx': "UPDATE bare_job SET lease_until = now() + interval '5 minutes' WHERE id IN "
               "(SELECT id FROM bare_job WHERE lease_until IS NULL ORDER BY id FOR UPDATE SKIP LOCKED LIMIT %s) "
               "RETURNING id, payload",
    'bare1tx': "DELETE FROM bare_job WHERE id IN (SELECT id FROM bare_job ORDER BY id FOR UPDATE SKIP LOCKED LIMIT %s) "
               "RETURNING id, payload",
    'jobq2tx': "SELECT * FROM jobq.claim('q', batch => %s)",
    # the columns bare's claim returns (and the lease token): what the wider
    # rows of jobq.claim cost the client
    'jobqnarrow': "SELECT job_id, lease_token, payload FROM jobq.claim('q', batch => %s)",
}


def worker(conninfo, shape, batch, until, out):
    done = 0
    with psycopg.connect(conninfo, autocommit=True) as c:
        while time.time() < until:
            rows = c.execute(CLAIM[shape], (batch,)).fetchall()
            if not rows:
                break
            if shape == 'bare2tx':
                c.execute("DELETE FROM bare_job WHERE id = ANY (%s)", ([r[0] for r in rows],))
            elif shape in ('jobq2tx', 'jobqnarrow'):
                c.execute("SELECT jobq.complete_many(%s, %s)", ([r[0] for r in rows], [r[1] for r in rows]))
            done += len(rows)
    out.put(done)


def main():
    conninfo, shape, clients, batch, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    out = mp.Queue()
    t0 = time.time()
    until = t0 + secs
    ps = [mp.Process(target=worker, args=(conninfo, shape, batch, until, out)) for _ in range(clients)]
    for p in ps:
        p.start()
    total = sum(out.get() for _ in ps)
    for p in ps:
        p.join()
    print('%.0f' % (total / (time.time() - t0)))


if __name__ == '__main__':
    main()
