#!/usr/bin/env python3
"""test/monitoring/check.py: run the postgres_exporter queries and check them.

    python3 test/monitoring/check.py monitoring/postgres_exporter.yml

Connects with the PG* variables to a database where jobq is installed.  It
builds a queue in a known state (QUEUE_PREFIX, default mon_<pid>: ready,
running, completed and dead jobs, its circuit breaker open), then runs every
query of the file as postgres_exporter would and checks that:

  * the file has the exporter's shape (query, metrics with usage and
    description; usages the exporter knows);
  * each query runs, returns exactly the declared columns, non-null string
    labels and non-null numeric values (postgres_exporter reads numbers,
    not intervals or NULLs);
  * the values for the known queue are right: queue depth, running jobs,
    oldest age, failure rate, breaker state, per-kind counts, health checks.

Prints "ok - ..." / "not ok - ..." lines and "N passed, N failed"; exits
non-zero on any failure.  Removes its queue at the end.
"""

import decimal
import os
import sys

import psycopg
import yaml

USAGES = {"LABEL", "GAUGE", "COUNTER", "HISTOGRAM", "MAPPEDMETRIC", "DURATION", "DISCARD"}
passed = failed = 0


def check(name, cond, got=None):
    global passed, failed
    if cond:
        passed += 1
        print("ok - " + name)
    else:
        failed += 1
        print("not ok - " + name)
        if got is not None:
            print("#   got: %r" % (got,))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "monitoring/postgres_exporter.yml"
    queue = os.environ.get("QUEUE_PREFIX", "mon_%d" % os.getpid())
    with open(path) as f:
        spec = yaml.safe_load(f)
    check("the file is a mapping of queries", isinstance(spec, dict) and spec, spec)

    conn = psycopg.connect("", autocommit=True)
    x = conn.execute

    # a queue in a known state
    x("SELECT jobq.configure(%s, max_retries => 0, breaker_threshold => 1)", (queue,))
    x("SELECT count(*) FROM jobq.enqueue_many('mon.work', array_fill('{}'::jsonb, ARRAY[5]), %s)", (queue,))
    x("SELECT count(*) FROM jobq.enqueue_many('mon.bad', array_fill('{}'::jsonb, ARRAY[2]), %s)", (queue,))
    j, t = x("SELECT job_id, lease_token FROM jobq.claim(%s, kinds => '{mon.work}')", (queue,)).fetchone()
    x("SELECT jobq.complete(%s, %s)", (j, t))
    x("SELECT job_id FROM jobq.claim(%s, kinds => '{mon.work}')", (queue,))   # stays running
    for j, t in x("SELECT job_id, lease_token FROM jobq.claim(%s, batch => 2, kinds => '{mon.bad}')",
                  (queue,)).fetchall():
        x("SELECT jobq.fail(%s, %s, 'upstream returned 500')", (j, t))
    x("SELECT pg_sleep(0.01)")

    results = {}
    try:
        for name, q in spec.items():
            shape = (isinstance(q, dict) and isinstance(q.get("query"), str)
                     and isinstance(q.get("metrics"), list) and q["metrics"])
            cols = {}
            for m in (q.get("metrics") or []) if isinstance(q, dict) else []:
                if isinstance(m, dict) and len(m) == 1:
                    (col, d), = m.items()
                    if isinstance(d, dict) and d.get("usage") in USAGES and d.get("description"):
                        cols[col] = d["usage"]
                        continue
                shape = False
            check("%s: has a query and metrics, each with a known usage and a description" % name,
                  shape, q)
            try:
                cur = conn.execute(q["query"])
                rows = cur.fetchall()
                names = [c.name for c in cur.description]
            except psycopg.Error as e:
                check("%s: the query runs" % name, False, str(e).strip())
                continue
            check("%s: the query runs" % name, True)
            check("%s: it returns exactly the declared columns" % name,
                  sorted(names) == sorted(cols) and len(set(names)) == len(names), (names, list(cols)))
            bad = []
            for r in rows:
                for c, v in zip(names, r):
                    if cols.get(c) == "LABEL":
                        ok = isinstance(v, str)
                    else:
                        ok = (isinstance(v, (int, float, decimal.Decimal))
                              and not isinstance(v, bool))
                    if not ok:
                        bad.append((c, v))
            check("%s: labels are strings and values are numbers, none NULL" % name,
                  not bad, bad[:5])
            results[name] = [dict(zip(names, r)) for r in rows]

        qrow = [r for r in results.get("jobq_queue", []) if r["queue"] == queue]
        check("jobq_queue: one row for the queue", len(qrow) == 1, qrow)
        if qrow:
            r = qrow[0]
            got = {k: float(r[k]) for k in ("ready", "delayed", "running", "dead",
                                            "completed_last_hour", "failed_last_hour", "paused")}
            check("jobq_queue: depth, running, dead, last hour, paused by the breaker",
                  got == {"ready": 3, "delayed": 0, "running": 1, "dead": 2,
                          "completed_last_hour": 1, "failed_last_hour": 2, "paused": 1}, got)
            check("jobq_queue: failure rate 2/3",
                  abs(float(r["failure_rate_last_hour"]) - 2 / 3) < 1e-9, r["failure_rate_last_hour"])
            check("jobq_queue: the oldest ready job's age is above 0 and under a minute",
                  0 < float(r["oldest_pending_age_seconds"]) < 60, r["oldest_pending_age_seconds"])
        brows = {r["state"]: r for r in results.get("jobq_breaker", []) if r["queue"] == queue}
        check("jobq_breaker: after 2 consecutive failures (threshold 1), open is the one active state",
              sorted(brows) == ["closed", "half_open", "open", "throttled"]
              and [s for s, r in brows.items() if r["active"] == 1] == ["open"],
              list(brows.values()))
        kinds = {r["kind"]: r for r in results.get("jobq_kind", [])}
        w, b = kinds.get("mon.work"), kinds.get("mon.bad")
        check("jobq_kind: per kind completed, failed and failure rate",
              w is not None and b is not None
              and (w["completed"], w["failed"], float(w["failure_rate"])) >= (1, 0, 0.0)
              and b["failed"] >= 2 and float(b["failure_rate"]) == 1.0
              and float(w["mean_duration_seconds"]) >= 0,
              (w, b))
        health = {r["check"]: r["status"] for r in results.get("jobq_health", [])}
        check("jobq_health: the nine checks, each 0, 1 or 2, the breaker one not ok",
              len(health) == 9 and set(health.values()) <= {0, 1, 2}
              and health.get("circuit_breakers", 0) >= 1, health)
    finally:
        x("SELECT count(jobq.cancel(job_id)) FROM jobq.jobs WHERE queue = %s"
          " AND status IN ('pending', 'running')", (queue,))
        for s in ("completed", "failed", "cancelled"):
            x("SELECT jobq.purge(%s, %s, '0')", (queue, s))
        x("DELETE FROM jobq.queue WHERE name = %s", (queue,))
        conn.close()

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
