#!/usr/bin/env bash
#
# test/soak/run.sh: pgbench soak test for jobq.
#
# Steady phase: producers (jobq.enqueue and jobq.enqueue_many, many calls
# with repeated idempotency keys) and workers (soak.work: claim a batch,
# complete most jobs with a ledger row in the same transaction, fail some, a
# few of those not retryable, and now and then claim a job with a short lease
# and abandon it for the lease reaper to take back) run together for
# SOAK_SECONDS, then the rest is drained.  Burst: SOAK_BURST jobs enqueued in
# one call and drained by the workers, to measure the drain rate.  Finally
# check.sql verifies that every job ended completed or failed exactly once,
# that the ledger matches, that retries respect max_retries and that
# idempotency held.
#
# Needs a fresh database with jobq available and the server started with
# shared_preload_libraries = 'jobq'; connection from the usual PG* variables.
# scripts/test runs it against its throwaway server.
#
# Environment: SOAK_SECONDS (15), SOAK_PRODUCERS (3), SOAK_WORKERS (4),
# SOAK_FAIL_PCT (15), SOAK_ABANDON_PCT (2, of worker rounds), SOAK_RATE
# (producer calls/s in all: 1500), SOAK_BURST (20000 jobs),
# SOAK_STALL_SECONDS (300: a drain fails only when no job of the queue
# finished for that long, a hang; how long draining takes is measured and
# printed, never asserted), PG_BIN, SOAK_LOGDIR.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
SECS=${SOAK_SECONDS:-15}
PRODUCERS=${SOAK_PRODUCERS:-3}
WORKERS=${SOAK_WORKERS:-4}
FAIL_PCT=${SOAK_FAIL_PCT:-15}
RATE=${SOAK_RATE:-1500}
ABANDON_PCT=${SOAK_ABANDON_PCT:-2}
BURST=${SOAK_BURST:-20000}
STALL_LIMIT=${SOAK_STALL_SECONDS:-300}
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

# drain CLIENTS: run worker rounds (no abandoning) until nothing is pending or
# running.  Retries come back after 10-50 ms of backoff, abandoned jobs once
# the reaper (every second by default) has taken their 200 ms leases back,
# so jobs finish every second or so: the drain fails only when the number
# left has not gone down for STALL_LIMIT seconds (a hang, not slowness).
drain() {
	local t_drain t_progress left before
	t_drain=$(now)
	t_progress=$t_drain
	left=$(remaining)
	before=$left
	while [ "$left" -gt 0 ]; do
		if [ "$left" -lt "$before" ]; then
			before=$left
			t_progress=$(now)
		elif awk -v e="$(since "$t_progress")" -v l="$STALL_LIMIT" 'BEGIN { exit !(e > l) }'; then
			echo "   drain stalled: $left jobs left, none finished in the last ${STALL_LIMIT}s"
			"${PSQL[@]}" -At -c "SELECT status, count(*), min(run_at), min(lease_expires_at) FROM jobq.jobs
				WHERE queue = 'soak' AND status IN ('pending', 'running') GROUP BY 1"
			return 1
		fi
		if ! "${PGBENCH[@]}" -c "$1" -j 2 -T 1 -D fail_pct="$FAIL_PCT" -D abandon_pct=0 \
			-f worker.sql >"$LOGDIR/drain.log" 2>&1; then
			echo "   drain workers FAILED:"
			cat "$LOGDIR/drain.log"
			return 1
		fi
		left=$(remaining)
	done
	echo "   drained in $(since "$t_drain")s"
}

echo "soak: $PRODUCERS producers for ${SECS}s at ${RATE} calls/s, $WORKERS workers (fail ${FAIL_PCT}%), logs in $LOGDIR"
"${PSQL[@]}" -f setup.sql

# --- steady phase: producers and workers at once --------------------------
status=0
t0=$(now)
"${PGBENCH[@]}" -c "$PRODUCERS" -j "$PRODUCERS" -T "$SECS" -R "$RATE" \
	-f producer.sql@4 -f producer_many.sql@1 >"$LOGDIR/producers.log" 2>&1 &
producers=$!
"${PGBENCH[@]}" -c "$WORKERS" -j 2 -T "$((SECS + 2))" \
	-D fail_pct="$FAIL_PCT" -D abandon_pct="$ABANDON_PCT" \
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
echo "   $(remaining) jobs left pending or running (retries in backoff, abandoned leases)"
drain 2 || status=1
steady_secs=$(since "$t0")
steady_rate=$("${PSQL[@]}" -At -c "SELECT round(count(*) / $steady_secs) FROM jobq.jobs
	WHERE queue = 'soak' AND status IN ('completed', 'failed')")
echo "   steady phase: ${steady_secs}s, $steady_rate jobs/s (bounded by the producers' rate)"

# --- burst: a backlog enqueued at once, drained by the workers -------------
echo "   burst: $BURST jobs in one enqueue_many, then $WORKERS workers drain them"
t_burst=$("${PSQL[@]}" -At -c "SELECT clock_timestamp()")
"${PSQL[@]}" -c "
INSERT INTO soak.enqueued (job_id, created, kind, idempotency_key)
SELECT e.job_id, e.created, 'soak.burst', NULL
  FROM jobq.enqueue_many('soak.burst',
                         ARRAY(SELECT jsonb_build_object('n', i) FROM generate_series(1, $BURST) AS i),
                         queue => 'soak', priority => 10, max_retries => 2) AS e" || status=1
drain "$WORKERS" || status=1
burst_rate=$("${PSQL[@]}" -At -c "
SELECT round(count(*) / greatest(extract(epoch FROM max(finished_at) - '$t_burst'::timestamptz), 0.001))
  FROM jobq.jobs WHERE queue = 'soak' AND kind = 'soak.burst' AND status IN ('completed', 'failed')")
echo "   burst drained at $burst_rate jobs/s (incl. enqueue time)"
echo "   soak took $(since "$t0")s"

# --- checks -----------------------------------------------------------------
"${PSQL[@]}" -f check.sql -c '\echo' -c "
SELECT count(*) AS jobs,
	   (SELECT count(*) FROM soak.enqueued) AS enqueue_results,
	   (SELECT count(*) FROM soak.enqueued WHERE NOT created) AS deduplicated,
	   count(*) FILTER (WHERE status = 'completed') AS completed,
	   count(*) FILTER (WHERE status = 'failed') AS failed,
	   coalesce(sum(retry_count), 0) AS retries,
	   (SELECT count(*) FROM soak.abandoned) AS abandoned_leases
  FROM jobq.jobs WHERE queue = 'soak'" -c '\echo failed checks: :failed_checks' \
	>"$LOGDIR/check.out" 2>&1 || status=1
cat "$LOGDIR/check.out"

failed_checks=$(sed -n 's/^failed checks: //p' "$LOGDIR/check.out")
summary="$steady_rate steady (producer-bound), $burst_rate burst drain"
if [ "$status" -ne 0 ] || [ "${failed_checks:-x}" != 0 ]; then
	echo "soak: FAILED (failed checks: ${failed_checks:-unknown}); jobs/s: $summary"
	exit 1
fi
echo "soak: all checks passed; jobs/s: $summary"
