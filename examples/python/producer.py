#!/usr/bin/env python3
"""An example jobq producer: enqueue inside the application's own transaction,
with the jobq library (clients/python).

    python3 producer.py --queue default --orders 3
    python3 producer.py --queue default --orders 1 --fail   # rolled back: no order, no job

Each order is inserted and its confirmation job enqueued in one transaction,
so the job exists only if the order commits, and an order never commits
without its job (no dual write, no outbox table to poll).  The idempotency
key (the order id) makes a retried enqueue harmless.

Connects with the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).
Works through PgBouncer in transaction mode: the transaction keeps one server
connection from BEGIN to COMMIT.
"""

import argparse
import os
import sys

try:
    import jobq
except ImportError:     # not installed: use the library from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "..", "..", "clients", "python"))
    import jobq


def place_order(conn, customer, amount, queue, fail=False):
    """Insert an order and enqueue its job atomically; return (order id, job id)."""
    with conn.transaction():
        order_id = conn.execute(
            "INSERT INTO example_orders (customer, amount) VALUES (%s, %s) RETURNING id",
            (customer, amount)).fetchone()[0]
        job_id, _created = jobq.enqueue(conn, "order.confirm", {"order_id": order_id},
                                        queue=queue, idempotency_key="order-%d" % order_id)
        if fail:
            # anything going wrong before COMMIT takes the job with it
            raise RuntimeError("payment declined (simulated)")
    return order_id, job_id


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queue", default="default")
    ap.add_argument("--orders", type=int, default=1)
    ap.add_argument("--fail", action="store_true", help="fail after enqueue: roll back")
    ap.add_argument("--dsn", default="", help="libpq conninfo (default: PG* variables)")
    a = ap.parse_args()
    with jobq.connect(a.dsn, pooler=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS example_orders ("
                     " id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                     " customer text NOT NULL, amount numeric NOT NULL,"
                     " created_at timestamptz NOT NULL DEFAULT now())")
        conn.commit()
        for i in range(a.orders):
            try:
                order_id, job_id = place_order(conn, "customer-%d" % i, 10 + i,
                                               a.queue, fail=a.fail)
                print("order %d committed with job %d" % (order_id, job_id))
            except RuntimeError as e:
                print("order rolled back (%s): no order, no job" % e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
