#!/usr/bin/env bash
#
# test/soak/run.sh: pgbench soak test for jobq.
#
# Producers (jobq.enqueue and jobq.enqueue_many, many calls with repeated
# idempotency keys) and workers (soak.work: claim a batch, complete most jobs
# with a ledger row in the same transaction, fail some, a few of those not
# retryable) run concurrently for SOAK_SECONDS; then workers drain the queue
# until nothing is pending or running, and check.sql verifies that every job
# ended completed or failed exactly once, that the ledger matches, that
# retries respect max_retries and that idempotency held.
#
# Needs a fresh database with jobq available and the server started with
# shared_preload_libraries = 'jobq'; connection from the usual PG* variables.
# scripts/test runs it against its throwaway server.
#
# Environment: SOAK_SECONDS (20), SOAK_PRODUCERS (3), SOAK_WORKERS (4),
# SOAK_FAIL_PCT (15), SOAK_RATE (producer calls/s in all: 1500), SOAK_DRAIN_SECONDS (60), PG_BIN, SOAK_LOGDIR.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
SECS=${SOAK_SECONDS:-20}
PRODUCERS=${SOAK_PRODUCERS:-3}
WORKERS=${SOAK_WORKERS:-4}
FAIL_PCT=${SOAK_FAIL_PCT:-15}
RATE=${SOAK_RATE:-1500}
DRAIN_LIMIT=${SOAK_DRAIN_SECONDS:-60}
LOGDIR=${SOAK_LOGDIR:-$(mktemp -d "${TMPDIR:-/tmp}/jobq-soak.XXXXXX")}
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
PGBENCH=("$PG_BIN/pgbench" -n --random-seed=rand)

now() { date +%s.%N | cut -c1-14; }
since() { awk -v s="$1" -v e="$(now)" 'BEGIN { printf "%.1f", e - s }'; }

# Print pgbench's result lines from log $1 (or all of it when it failed).
pgbench_summary() {
	grep -E '^(number of transactions|number of failed|tps|.*aborted|.*error)' "$1" | sed 's/^/      /' || true
}

# Jobs of the soak queue still pending or running.
remaining() {
	"${PSQL[@]}" -At -c "SELECT count(*) FROM jobq.jobs WHERE queue = 'soak' AND status IN ('pending', 'running')"
}

echo "soak: $PRODUCERS producers for ${SECS}s at ${RATE} calls/s, $WORKERS workers (fail ${FAIL_PCT}%), logs in $LOGDIR"
"${PSQL[@]}" -f setup.sql

status=0
t0=$(now)
"${PGBENCH[@]}" -c "$PRODUCERS" -j "$PRODUCERS" -T "$SECS" -R "$RATE" \
	-f producer.sql@4 -f producer_many.sql@1 >"$LOGDIR/producers.log" 2>&1 &
producers=$!
"${PGBENCH[@]}" -c "$WORKERS" -j 2 -T "$((SECS + 3))" -D fail_pct="$FAIL_PCT" \
	-f worker.sql >"$LOGDIR/workers.log" 2>&1 &
workers=$!

if wait "$producers"; then
	echo "   producers done ($(since "$t0")s):"
else
	echo "   producers FAILED ($(since "$t0")s):"
	cat "$LOGDIR/producers.log"
	status=1
fi
pgbench_summary "$LOGDIR/producers.log"
if wait "$workers"; then
	echo "   workers done ($(since "$t0")s):"
else
	echo "   workers FAILED ($(since "$t0")s):"
	cat "$LOGDIR/workers.log"
	status=1
fi
pgbench_summary "$LOGDIR/workers.log"

# Drain: retries come back after 10-50 ms of backoff.
t_drain=$(now)
left=$(remaining)
echo "   draining $left pending/running jobs"
while [ "$left" -gt 0 ]; do
	if awk -v e="$(since "$t_drain")" -v l="$DRAIN_LIMIT" 'BEGIN { exit !(e > l) }'; then
		echo "   drain did not finish within ${DRAIN_LIMIT}s: $left jobs left"
		status=1
		break
	fi
	if ! "${PGBENCH[@]}" -c 2 -j 2 -T 2 -D fail_pct="$FAIL_PCT" -f worker.sql \
		>"$LOGDIR/drain.log" 2>&1; then
		echo "   drain workers FAILED:"
		cat "$LOGDIR/drain.log"
		status=1
		break
	fi
	left=$(remaining)
done
total=$(since "$t0")
echo "   drained in $(since "$t_drain")s; soak took ${total}s"

"${PSQL[@]}" -f check.sql -c '\echo' -c "
SELECT count(*) AS jobs,
	   (SELECT count(*) FROM soak.enqueued) AS enqueue_calls,
	   (SELECT count(*) FROM soak.enqueued WHERE NOT created) AS deduplicated,
	   count(*) FILTER (WHERE status = 'completed') AS completed,
	   count(*) FILTER (WHERE status = 'failed') AS failed,
	   coalesce(sum(retry_count), 0) AS retries,
	   round(count(*) FILTER (WHERE status IN ('completed', 'failed')) / $total, 1) AS jobs_per_s
  FROM jobq.jobs WHERE queue = 'soak'" -c '\echo failed checks: :failed_checks' \
	>"$LOGDIR/check.out" 2>&1 || status=1
cat "$LOGDIR/check.out"

failed_checks=$(sed -n 's/^failed checks: //p' "$LOGDIR/check.out")
rate=$("${PSQL[@]}" -At -c "SELECT round(count(*) / $total, 1) FROM jobq.jobs WHERE queue = 'soak' AND status IN ('completed', 'failed')" || echo '?')
if [ "$status" -ne 0 ] || [ "${failed_checks:-x}" != 0 ]; then
	echo "soak: FAILED (failed checks: ${failed_checks:-unknown}); jobs/s: $rate"
	exit 1
fi
echo "soak: all checks passed; jobs/s: $rate"
