#!/usr/bin/env python3
"""Check one run's JSONL against the harness protocol (CONTRIBUTING_ADAPTERS.md)
and, optionally, against the database.  Used by test.sh.

    check_jsonl.py RUN.jsonl ADAPTER_DIR [--every S] [--db DATABASE_URL]
                   [--exact] [--expect-enqueued N]

Prints one "ok - ..." or "not ok - ..." line per check; exits 1 if any failed.

* the first line is the descriptor, with the documented keys; its
  event_tables / extensions are a superset of adapter.json's (the harness's
  drift check);
* every other line is an adapter sample with the documented keys, a numeric
  value and window_s, and the harness's tailer would take it
  (kind == "adapter", metric set, value a float);
* every tick carries the six required metrics; ticks fall on wall-clock
  multiples of SAMPLE_EVERY_S (but the last, the flush at SIGTERM); the
  rate windows of the ticks in between are SAMPLE_EVERY_S;
* the claim percentiles are ordered (p50 <= p95 <= p99);
* --db: the jobs in the database: none failed; completed + pending + running
  == all; with --exact, sum(enqueue_rate * window_s) == the jobs there and
  sum(completion_rate * window_s) == the completed ones (what the harness's
  jobs_lost integrates); --expect-enqueued N: exactly N jobs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

REQUIRED = {"claim_p50_ms", "claim_p95_ms", "claim_p99_ms",
            "enqueue_rate", "completion_rate", "queue_depth"}
DESCRIPTOR_KEYS = {"kind", "system", "event_tables", "extensions", "version",
                   "schema_version", "db_name", "started_at"}
SAMPLE_KEYS = {"t", "system", "kind", "subject_kind", "subject", "metric", "value", "window_s"}

results: list[tuple[bool, str]] = []


def check(ok: bool, what: str) -> bool:
    results.append((bool(ok), what))
    print(("ok - " if ok else "not ok - ") + what)
    return bool(ok)


def parse_t(t: str) -> dt.datetime:
    return dt.datetime.fromisoformat(t.replace("Z", "+00:00"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("adapter_dir")
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--db")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--expect-enqueued", type=int)
    a = ap.parse_args()

    manifest = json.loads((Path(a.adapter_dir) / "adapter.json").read_text())
    lines = [ln for ln in Path(a.jsonl).read_text().splitlines() if ln.strip()]
    recs = []
    bad = []
    for ln in lines:
        try:
            recs.append(json.loads(ln))
        except ValueError:
            bad.append(ln)
    check(not bad, "every stdout line is JSON (%d lines)" % len(lines))
    if not recs:
        check(False, "a descriptor and samples")
        return 1
    d = recs[0]
    check(d.get("kind") == "descriptor" and DESCRIPTOR_KEYS <= set(d),
          "the first line is the descriptor with %s" % ", ".join(sorted(DESCRIPTOR_KEYS)))
    check(sum(1 for r in recs if r.get("kind") == "descriptor") == 1, "one descriptor")
    check(d.get("system") == manifest["system"] and d.get("db_name") == manifest["db_name"],
          "descriptor system / db_name as in adapter.json")
    check(set(d.get("event_tables") or []) >= set(manifest["event_tables"])
          and set(d.get("extensions") or []) >= set(manifest["extensions"]),
          "descriptor event_tables / extensions are a superset of adapter.json's")
    check((d.get("event_tables") or [None])[0] == manifest["event_tables"][0],
          "the first event table (what active-readers scans) is %s" % manifest["event_tables"][0])

    samples = [r for r in recs[1:]]
    shape = [r for r in samples if not (SAMPLE_KEYS <= set(r) and r.get("kind") == "adapter"
                                        and r.get("subject_kind") == "adapter"
                                        and isinstance(r.get("value"), (int, float))
                                        and isinstance(r.get("window_s"), (int, float))
                                        and r.get("system") == manifest["system"])]
    check(samples and not shape, "%d samples with %s, numeric value and window_s"
          % (len(samples), ", ".join(sorted(SAMPLE_KEYS))))
    ticks: dict[str, dict[str, dict]] = {}
    for r in samples:
        ticks.setdefault(r["t"], {})[r["metric"]] = r
    order = sorted(ticks, key=parse_t)
    check(len(order) >= 2, "at least two ticks (%d)" % len(order))
    check(all(REQUIRED <= set(ticks[t]) for t in order),
          "every tick has %s" % ", ".join(sorted(REQUIRED)))
    aligned = [t for t in order[:-1]
               if abs((parse_t(t).timestamp() / a.every) - round(parse_t(t).timestamp() / a.every)) > 1e-6]
    check(not aligned, "ticks on wall-clock multiples of %gs (but the last, at SIGTERM)%s"
          % (a.every, (": " + ", ".join(aligned[:3])) if aligned else ""))
    mid = order[1:-1]
    check(all(abs(ticks[t]["enqueue_rate"]["window_s"] - a.every) < 1e-6
              and abs(ticks[t]["completion_rate"]["window_s"] - a.every) < 1e-6 for t in mid),
          "rate windows between the first and last tick are %gs" % a.every)
    check(all(ticks[t]["claim_p50_ms"]["window_s"] == 30 for t in order),
          "claim percentiles over a 30 s window")
    check(all(ticks[t]["claim_p50_ms"]["value"] <= ticks[t]["claim_p95_ms"]["value"]
              <= ticks[t]["claim_p99_ms"]["value"] for t in order),
          "claim p50 <= p95 <= p99 in every tick")
    check(all(ticks[t]["queue_depth"]["window_s"] == 0 for t in order), "queue_depth is instantaneous")
    enq = sum(ticks[t]["enqueue_rate"]["value"] * ticks[t]["enqueue_rate"]["window_s"] for t in order)
    cmp_ = sum(ticks[t]["completion_rate"]["value"] * ticks[t]["completion_rate"]["window_s"]
               for t in order)
    print("# JSONL: enqueued %.1f, completed %.1f (rate x window over %d ticks)" % (enq, cmp_, len(order)))
    check(enq > 0 and cmp_ > 0, "jobs were enqueued and completed")

    if a.db:
        out = subprocess.run(
            ["psql", "-XAtq", a.db, "-c",
             "SELECT coalesce(sum((status = 'completed')::int), 0),"
             " coalesce(sum((status = 'pending')::int), 0),"
             " coalesce(sum((status = 'running')::int), 0),"
             " coalesce(sum((status = 'failed')::int), 0), count(*) FROM jobq.job"],
            capture_output=True, text=True)
        if not check(out.returncode == 0, "read jobq.job"):
            print("#   " + out.stderr.strip())
            return 1
        completed, pending, running, failed, total = map(int, out.stdout.strip().split("|"))
        print("# DB: %d jobs: %d completed, %d pending, %d running, %d failed"
              % (total, completed, pending, running, failed))
        check(failed == 0, "no job failed")
        check(completed + pending + running == total, "enqueued == completed + depth (pending + running)")
        if a.exact:
            check(abs(enq - total) < 0.5, "sum(enqueue_rate * window_s) == jobs in the database (%.1f, %d)"
                  % (enq, total))
            check(abs(cmp_ - completed) < 0.5,
                  "sum(completion_rate * window_s) == completed jobs (%.1f, %d)" % (cmp_, completed))
        if a.expect_enqueued is not None:
            check(total == a.expect_enqueued, "exactly %d jobs enqueued (%d)" % (a.expect_enqueued, total))
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
