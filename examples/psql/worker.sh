#!/usr/bin/env bash
#
# worker.sh: a jobq worker in plain bash over psql, for shell-based operations.
#
# Usage: worker.sh [--queue Q] [--batch N] [--lease SECONDS] [--wait SECONDS]
#                  [--worker-id ID] [--shutdown-timeout SECONDS]
#                  [--handlers FILE]
#
# Claims up to N jobs at a time with jobq.claim(..., wait => ...) and runs
# them one after the other.  The handlers come from FILE (default:
# handlers.sh next to this script), which fills the associative array
# HANDLERS: kind -> shell function.  A handler runs in a subshell with
#
#   JOB_ID JOB_LEASE_TOKEN JOB_KIND JOB_RETRY_COUNT JOB_PAYLOAD JOB_CHECKPOINT
#
# (JSON texts; JOB_CHECKPOINT is empty when none was saved) and the helpers
# job_sql (SQL over psql, with :'payload', :'checkpoint', :'job_id' and
# :'token' set) and job_checkpoint JSON (save progress; fails when the lease
# is lost).  Its exit status decides the outcome:
#
#   0    jobq.complete; what it printed on stdout (JSON, or nothing) is the result
#   65   permanent error (EX_DATAERR): jobq.fail(..., retryable => false)
#   75   rate limited (EX_TEMPFAIL): jobq.snooze for the interval it printed
#        on stdout (default 1 second); no retry is spent
#   any other: jobq.fail(..., retryable => true) with the last line of its stderr
#
# The leases of the batch's jobs that are not finished are extended every
# lease/3 seconds (jobq.extend), while a handler runs and between jobs.
#
# SIGTERM or SIGINT: no more claims.  The running job finishes and is
# reported; the batch's jobs that have not started are handed back at once
# with jobq.snooze(job, token, '0') (no retry spent), and the worker exits 0.
# A claim that is waiting is not cancelled (psql could lose the answer of a
# claim that had just succeeded): it ends within --wait seconds and its jobs
# are handed back.  A second signal, or --shutdown-timeout, kills the running
# handler, fails its job with "abandoned at shutdown" and retry_in => '0' (it
# runs again at once; as after an expired lease, that counts as a retry), and
# exits 1.
#
# Values reach SQL only as psql variables, never as SQL text.  Each psql
# call is its own transaction and uses no session state, so the worker works
# through PgBouncer in transaction mode.  The connection comes from the libpq
# variables (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).

set -u

QUEUE=default
BATCH=10
LEASE=30
WAIT=5
WORKER_ID=$(hostname):$$
SHUTDOWN_TIMEOUT=30
HANDLERS_FILE=$(dirname "${BASH_SOURCE[0]}")/handlers.sh
PSQL=${PSQL:-psql}

while [ $# -gt 0 ]; do
	case $1 in
		--queue) QUEUE=$2 ;;
		--batch) BATCH=$2 ;;
		--lease) LEASE=$2 ;;
		--wait) WAIT=$2 ;;
		--worker-id) WORKER_ID=$2 ;;
		--shutdown-timeout) SHUTDOWN_TIMEOUT=$2 ;;
		--handlers) HANDLERS_FILE=$2 ;;
		-h | --help)
			sed -n '3,/^$/s/^# \{0,1\}//p' "$0"
			exit 0
			;;
		*)
			echo "worker.sh: unknown argument $1" >&2
			exit 2
			;;
	esac
	shift 2
done

declare -A HANDLERS=()
# shellcheck source=examples/psql/handlers.sh
. "$HANDLERS_FILE"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobq-worker.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# log LEVEL MESSAGE: one line on stderr
log() { printf '%s %s %s: %s\n' "$(date -u +%FT%T.%3NZ)" "$1" "$WORKER_ID" "$2" >&2; }

# sql [psql options...] < script: unaligned, tuples only, fields split by tabs
sql() { "$PSQL" -X -q -A -t -F $'\t' -v ON_ERROR_STOP=1 "$@"; }

# usec SECONDS: a number of seconds (maybe fractional) in microseconds
usec() { awk -v s="$1" 'BEGIN { printf "%d", s * 1000000 }'; }

# now: microseconds since the epoch (in $NOW, without a subshell)
now() { NOW=${EPOCHREALTIME/[.,]/}; }

BEAT_US=$(usec "$LEASE")
BEAT_US=$((BEAT_US / 3))
SHUTDOWN_US=$(usec "$SHUTDOWN_TIMEOUT")

# --- helpers for handlers ----------------------------------------------------

# job_sql SQL: run SQL with the job's psql variables; prints the rows
job_sql() {
	sql -v job_id="$JOB_ID" -v token="$JOB_LEASE_TOKEN" -v payload="$JOB_PAYLOAD" \
		-v checkpoint="$JOB_CHECKPOINT" <<<"$1"
}

# job_checkpoint JSON: save progress for the next attempt; fails when the
# lease is lost (stop working then)
job_checkpoint() {
	local ok
	ok=$(sql -v job_id="$JOB_ID" -v token="$JOB_LEASE_TOKEN" -v data="$1" \
		<<<"SELECT jobq.checkpoint(:'job_id', :'token', :'data')") || return 1
	[ "$ok" = t ] || { echo "lease lost" >&2; return 1; }
	JOB_CHECKPOINT=$1
}

# --- signals -------------------------------------------------------------------

stopping=0
abandon=0
on_signal() {
	if [ "$stopping" = 0 ]; then
		stopping=1
		log INFO "signal: no more claims; finishing the running job"
	else
		abandon=1
		log WARNING "second signal: abandoning the running job"
	fi
}
trap on_signal TERM INT

# --- the jobs --------------------------------------------------------------

ids=() tokens=() kinds=() retries=() payloads=() checkpoints=()

# extend_leases FIRST: extend the leases of the batch's jobs from index FIRST on
extend_leases() {
	local first=$1 lost
	lost=$(sql -v ids="${ids[*]:first}" -v tokens="${tokens[*]:first}" \
		-v lease="$LEASE seconds" <<-'SQL'
			SELECT t.id FROM unnest(string_to_array(:'ids', ' ')::bigint[],
			                        string_to_array(:'tokens', ' ')::bigint[]) AS t(id, token)
			 WHERE jobq.extend(t.id, t.token, :'lease') IS NULL
		SQL
	) || { log ERROR "heartbeat failed"; return 0; }
	[ -z "$lost" ] || log WARNING "lease lost: job(s) ${lost//$'\n'/ }"
}

# heartbeat FIRST: extend the leases from index FIRST on when the next
# heartbeat is due (every lease/3 from the claim, between jobs as well as
# while one runs: the batch's waiting jobs hold leases too)
NEXT_BEAT=0
heartbeat() {
	now
	if [ "$NOW" -gt "$NEXT_BEAT" ]; then
		extend_leases "$1"
		NEXT_BEAT=$((NOW + BEAT_US))
	fi
}

# hand_back FIRST: give the batch's jobs from index FIRST on back, unstarted
hand_back() {
	local first=$1
	[ "$first" -lt "${#ids[@]}" ] || return 0
	sql -v ids="${ids[*]:first}" -v tokens="${tokens[*]:first}" >/dev/null <<-'SQL' ||
		SELECT jobq.snooze(t.id, t.token, '0')
		  FROM unnest(string_to_array(:'ids', ' ')::bigint[],
		              string_to_array(:'tokens', ' ')::bigint[]) AS t(id, token)
	SQL
		log ERROR "could not hand back job(s) ${ids[*]:first}; their leases will expire"
	log INFO "handed back $((${#ids[@]} - first)) unstarted job(s)"
}

# run_job I: run job I of the batch and report its outcome; returns 1 when
# the job was abandoned
run_job() {
	local i=$1 fn hpid rc t0 deadline out err outcome status
	fn=${HANDLERS[${kinds[i]}]}
	now
	t0=$NOW
	(
		trap - TERM INT EXIT
		export JOB_ID=${ids[i]} JOB_LEASE_TOKEN=${tokens[i]} JOB_KIND=${kinds[i]} \
			JOB_RETRY_COUNT=${retries[i]} JOB_PAYLOAD=${payloads[i]} \
			JOB_CHECKPOINT=${checkpoints[i]}
		"$fn"
	) >"$TMP/out" 2>"$TMP/err" </dev/null &
	hpid=$!
	deadline=
	while kill -0 "$hpid" 2>/dev/null; do
		sleep 0.05
		now
		if [ "$stopping" = 1 ] && [ -z "$deadline" ]; then
			deadline=$((NOW + SHUTDOWN_US))
		fi
		if [ "$abandon" = 1 ] || { [ -n "$deadline" ] && [ "$NOW" -gt "$deadline" ]; }; then
			pkill -TERM -P "$hpid" 2>/dev/null # the handler's own children first
			kill "$hpid" 2>/dev/null
			wait "$hpid" 2>/dev/null
			sql -v id="${ids[i]}" -v token="${tokens[i]}" >/dev/null <<-'SQL' ||
				SELECT jobq.fail(:'id', :'token', 'abandoned at shutdown', retry_in => '0')
			SQL
				log ERROR "job ${ids[i]}: could not release it; its lease will expire"
			log WARNING "job ${ids[i]} (${kinds[i]}) abandoned, to run again"
			return 1
		fi
		heartbeat "$i"
	done
	rc=0
	wait "$hpid" || rc=$?
	out=$(cat "$TMP/out")
	err=$(grep -v '^[[:space:]]*$' "$TMP/err" | tail -n 1)
	case $rc in
		0)
			status=$(sql -v id="${ids[i]}" -v token="${tokens[i]}" -v result="$out" <<-'SQL'
				SELECT CASE WHEN jobq.complete(:'id', :'token', nullif(:'result', '')::jsonb)
				            THEN 'completed' END
			SQL
			) || status="error: could not complete (is the output JSON?)"
			;;
		65)
			status=$(sql -v id="${ids[i]}" -v token="${tokens[i]}" -v error="permanent: ${err:-exit 65}" <<-'SQL'
				SELECT jobq.fail(:'id', :'token', :'error', retryable => false)
			SQL
			) || status="error: could not fail"
			;;
		75)
			status=$(sql -v id="${ids[i]}" -v token="${tokens[i]}" -v delay="${out:-1 second}" <<-'SQL'
				SELECT CASE WHEN jobq.snooze(:'id', :'token', :'delay') IS NOT NULL
				            THEN 'snoozed' END
			SQL
			) || status="error: could not snooze"
			;;
		*)
			status=$(sql -v id="${ids[i]}" -v token="${tokens[i]}" -v error="exit $rc: ${err:-no message}" <<-'SQL'
				SELECT jobq.fail(:'id', :'token', :'error')
			SQL
			) || status="error: could not fail"
			;;
	esac
	outcome=${status:-lease lost, outcome discarded}
	now
	log INFO "job ${ids[i]} (${kinds[i]}) attempt $((retries[i] + 1)): $outcome in $(((NOW - t0) / 1000)) ms"
	return 0
}

# --- the loop ----------------------------------------------------------------

kind_list=${!HANDLERS[*]}
log INFO "queue $QUEUE, kinds ${kind_list// /,}, batch $BATCH, lease ${LEASE}s, wait ${WAIT}s"
status=0
while [ "$stopping" = 0 ]; do
	# The claim runs in the background, so that a signal is handled at once.
	sql -v queue="$QUEUE" -v worker="$WORKER_ID" -v batch="$BATCH" \
		-v lease="$LEASE seconds" -v kinds="$kind_list" -v wait="$WAIT seconds" \
		>"$TMP/claim" 2>"$TMP/claim.err" <<-'SQL' &
			SELECT job_id, lease_token, kind, retry_count, payload, coalesce(checkpoint::text, '')
			  FROM jobq.claim(:'queue', worker_id => :'worker', batch => :'batch',
			                  lease => :'lease', kinds => string_to_array(:'kinds', ' '),
			                  wait => :'wait')
		SQL
	cpid=$!
	rc=0
	wait "$cpid" || rc=$?
	while kill -0 "$cpid" 2>/dev/null; do # the wait was ended by a signal
		rc=0
		wait "$cpid" || rc=$?
	done
	if [ "$rc" != 0 ]; then
		log ERROR "claim failed: $(tail -n 1 "$TMP/claim.err"); retrying in 1 s"
		sleep 1
		continue
	fi
	ids=() tokens=() kinds=() retries=() payloads=() checkpoints=()
	while IFS=$'\t' read -r id token kind retry payload checkpoint; do
		ids+=("$id") tokens+=("$token") kinds+=("$kind") retries+=("$retry")
		payloads+=("$payload") checkpoints+=("$checkpoint")
	done <"$TMP/claim"
	now
	NEXT_BEAT=$((NOW + BEAT_US))
	for i in "${!ids[@]}"; do
		if [ "$stopping" = 1 ]; then
			hand_back "$i"
			break
		fi
		heartbeat "$i"
		if ! run_job "$i"; then
			hand_back $((i + 1))
			status=1
			break
		fi
	done
done
log INFO "stopped"
exit "$status"
