#!/usr/bin/env bash
#
# test/cli/run.sh -- tests of the command-line tool bin/jobq
#
# Runs bin/jobq (or $JOBQ) against the server and database named by the
# PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE).  jobq must be
# installed on that server; CREATE EXTENSION jobq is run when the database
# does not have it yet (that needs a superuser).  Everything the test makes
# lives in queues and kinds named cli_<pid>_..., removed at the end, so it
# can share a database with other work.
#
# Checks each command's output and exit status (0 done, 1 the answer is
# no, 2 bad usage, 3 database error), that user input never becomes SQL
# text, and that "jobq health" exits 1 on a critical check: an expired
# lease that the reaper cannot take, because another session holds a lock
# on the job row (the reaper skips locked rows).
#
# Exits non-zero on any failure; the last line is "N passed, N failed".

set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
JOBQ=${JOBQ:-$ROOT/bin/jobq}
PSQL=${PSQL:-psql}
export PSQL
P=cli_$$_
passed=0
failed=0
out=
rc=0

# q SQL: run SQL (no user input) in the test database, unaligned
q() {
	"$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"
}

# run ARGS...: run jobq, keep its output (stdout and stderr) and status
run() {
	out=$("$JOBQ" "$@" 2>&1)
	rc=$?
}

# check NAME CONDITION...: one test; CONDITION is a shell command
check() {
	local name=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
		echo "ok - $name"
	else
		failed=$((failed + 1))
		echo "not ok - $name"
		echo "#   jobq exited $rc; its output:"
		printf '%s\n' "$out" | sed 's/^/#   | /'
	fi
}

rc_is() { [ "$rc" -eq "$1" ]; }
has() { printf '%s\n' "$out" | grep -q -- "$1"; }
rc_and_has() { rc_is "$1" && has "$2"; }
rc_and_line() { rc_is "$1" && printf '%s\n' "$out" | grep -q -x -- "$2"; }

cleanup() {
	[ -n "${locker_pid:-}" ] && kill "$locker_pid" 2>/dev/null
	q "SELECT count(jobq.cancel(job_id)) FROM jobq.jobs
	    WHERE starts_with(queue, '$P') AND status IN ('pending', 'running');
	   SELECT count(jobq.purge(name, s, '0')) FROM jobq.queue,
	          unnest(ARRAY['completed', 'failed', 'cancelled']) s
	    WHERE starts_with(name, '$P');
	   DELETE FROM jobq.idempotency_key WHERE starts_with(kind, '$P');
	   DELETE FROM jobq.queue WHERE starts_with(name, '$P');" >/dev/null 2>&1
}

# --- set up ----------------------------------------------------------------

if ! q "SELECT 1" >/dev/null; then
	echo "cannot connect with the PG* variables" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
if [ -z "$(q "SELECT 1 FROM pg_extension WHERE extname = 'jobq'")" ] &&
	! q "CREATE EXTENSION jobq" >/dev/null; then
	echo "jobq is not installed in database $(q 'SELECT current_database()')" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
trap cleanup EXIT
trap 'exit 130' INT TERM

q "SELECT jobq.configure('${P}q', max_retries => 1, backoff_base => '0', backoff_cap => '0',
                         rate_limit => 1000, rate_period => '1 minute')" >/dev/null
A=$(q "SELECT job_id FROM jobq.enqueue('${P}mail', '{\"to\": \"ann\"}', queue => '${P}q',
                                       idempotency_key => '${P}key')")
B=$(q "SELECT job_id FROM jobq.enqueue('${P}mail', '{\"to\": \"bob\"}', queue => '${P}q',
                                       max_retries => 0)")

# --- usage -------------------------------------------------------------------

run --help
check "--help prints the usage" rc_and_has 0 "Usage: jobq COMMAND"
run
check "no command: usage error" rc_and_has 2 "Usage: jobq COMMAND"
run frobnicate
check "unknown command: usage error" rc_and_has 2 'unknown command "frobnicate"'
run show abc
check "show with a non-numeric id: usage error" rc_and_has 2 "a job id is a positive integer"
run retry
check "retry without an id: usage error" rc_and_has 2 "usage: jobq retry ID"
run stats extra
check "stats with an argument: usage error" rc_is 2
run retry-failed
check "retry-failed with no filter: usage error" rc_and_has 2 "needs --kind K, --queue Q or --all"
run retry-failed --all --kind x
check "retry-failed --all with a filter: usage error" rc_is 2
run pause ""
check "pause with an empty name: usage error" rc_is 2

# --- stats, queues -----------------------------------------------------------

run stats
check "stats lists the queue with two ready jobs" \
	rc_and_has 0 "^ ${P}q *| f *| closed *| *2 | *0 | *0 |"
run queues
check "queues shows the settings and the rate limit" \
	rc_and_has 0 "^ ${P}q *| f *| *1 | 00:05:00 | 00:00:00 \.\. 00:00:00 +/-[0-9.]* *|.*| 1000 per 00:01:00 | closed"

# --- show --------------------------------------------------------------------

run show "$A"
check "show: the job" rc_and_has 0 "^kind *| ${P}mail$"
check "show: its payload" has '^payload *| {"to": "ann"}$'
check "show: an attempts table" has "attempt | outcome"
run show 999999999999
check "show of a job that does not exist: 1" rc_and_has 1 "no job 999999999999"
run show --key "${P}mail" "${P}key"
check "show --key finds the job" rc_and_has 0 "^job_id *| $A$"
run show --key "${P}mail" nope
check "show --key of a key nobody holds: 1" rc_and_has 1 "no job holds key"

# a failed attempt, then a running one, in the story
TOK=$(q "SELECT lease_token FROM jobq.claim('${P}q', worker_id => 'cli-w1', kinds => ARRAY['${P}mail'])
          WHERE job_id = $A")
q "SELECT jobq.fail($A, $TOK, 'smtp said 451')" >/dev/null
TOKB=$(q "SELECT lease_token FROM jobq.claim('${P}q', worker_id => 'cli-w2', batch => 2)
           WHERE job_id = $B")
run show "$A"
check "show: the failed attempt with its error" \
	rc_and_has 0 "^ *1 | failed *| cli-w1 *|.*| smtp said 451"
check "show: the running attempt" has "^ *2 | running *| cli-w2 "

# --- cancel, retry, retry-failed, dead ---------------------------------------

run cancel "$A"
check "cancel a running job" rc_and_line 0 "job $A: cancelled"
run cancel "$A"
check "cancel it again: 1" rc_and_has 1 "job $A is cancelled; only pending or running jobs can be cancelled"
run retry "$A"
check "retry the cancelled job" rc_and_line 0 "job $A: pending"
run retry "$A"
check "retry a pending job: 1" rc_and_has 1 "job $A is pending; only failed or cancelled jobs can be retried"
run retry 999999999999
check "retry a job that does not exist: 1" rc_and_has 1 "no job 999999999999"
run cancel 999999999999
check "cancel a job that does not exist: 1" rc_and_has 1 "no job 999999999999"

q "SELECT jobq.fail($B, $TOKB, 'mailbox full')" >/dev/null
run dead --kind "${P}mail"
check "dead lists the failed job" rc_and_has 0 "^ *$B | ${P}q *| ${P}mail *| *1 |.*| mailbox full$"
run kinds --queue "${P}q"
check "kinds: one failed, two failed attempts" rc_and_has 0 "^ ${P}mail *| *0 | *1 | *1.000 | *2 | *0 | *1 |"
run kinds 'not an interval'
check "kinds with a bad period: database error 3" rc_and_has 3 "invalid input syntax for type interval"
run retry-failed --kind "${P}other"
check "retry-failed of a kind with no failures" rc_and_line 0 "0 failed jobs back to pending"
run retry-failed --kind "${P}mail"
check "retry-failed --kind" rc_and_line 0 "1 failed job back to pending"
check "the job is pending again" [ "$(q "SELECT status FROM jobq.jobs WHERE job_id = $B")" = pending ]

# --- pause, resume -----------------------------------------------------------

run pause "${P}q"
check "pause" rc_and_has 0 "queue \"${P}q\" paused"
check "the queue is paused" [ "$(q "SELECT paused FROM jobq.queues WHERE queue = '${P}q'")" = t ]
check "a paused queue hands out nothing" [ "$(q "SELECT count(*) FROM jobq.claim('${P}q')")" = 0 ]
run pause "${P}q"
check "pause again" rc_and_has 0 "was already paused"
run resume "${P}q"
check "resume" rc_and_line 0 "queue \"${P}q\" resumed"
check "the queue is not paused" [ "$(q "SELECT paused FROM jobq.queues WHERE queue = '${P}q'")" = f ]
run resume "${P}q"
check "resume a queue that is not paused" rc_and_has 0 "was not paused"
run resume "${P}nosuch"
check "resume a queue that does not exist: 1, not created" rc_and_has 1 "no queue \"${P}nosuch\""
check "the unknown queue was not created" [ -z "$(q "SELECT 1 FROM jobq.queue WHERE name = '${P}nosuch'")" ]
run pause "${P}new"
check "pause a new queue creates it paused" rc_and_has 0 "did not exist; created it, paused"

# user input is data, never SQL
EVIL="${P}x'); DROP TABLE jobq.job; --"
run pause "$EVIL"
check "a queue name with quotes and a semicolon is a name" rc_is 0
check "that queue exists under its exact name" \
	[ "$(q "SELECT count(*) FROM jobq.queue WHERE name = \$\$$EVIL\$\$")" = 1 ]
check "jobq.job is still there" [ "$(q "SELECT to_regclass('jobq.job') IS NOT NULL")" = t ]
run show --key "${P}mail" ":'key'"
check "psql variable syntax in an argument is data" rc_and_has 1 "no job holds key"

# --- health ------------------------------------------------------------------

# Only three checks can be critical: the worker (missing, or no round for
# longer than the grace), expired leases and overdue schedules (older than the
# grace).  With a worker running and a grace of 1000 years none can be, so
# the exit status must be 0; the critical case (exit 1) is planted below.
run health --grace '1000 years' --oldest-pending '1000 years'
check "health prints the eight checks" \
	eval '[ "$(printf "%s\n" "$out" | grep -c -E "^ (worker|expired_leases|overdue_schedules|oldest_pending|circuit_breakers|dead_tuples|table_bloat|xmin_horizon) +\| (ok|warning|critical) +\|")" -eq 8 ]'
check "health with nothing critical exits 0" rc_is 0
check "and prints no critical check" \
	eval '! printf "%s\n" "$out" | grep -q -E "^ [a-z_]+ +\| critical +\|"'
check "the worker check is ok" has "^ worker *| ok *|"
run health --grace 'not an interval'
check "health with a bad interval: database error 3" rc_is 3
run health --xmin
check "health option without a value: usage error" rc_is 2

# an expired lease the reaper cannot take: another session holds the row
C=$(q "SELECT job_id FROM jobq.enqueue('${P}stuck', queue => '${P}leases')")
TOKC=$(q "SELECT lease_token FROM jobq.claim('${P}leases', worker_id => 'cli-stuck', lease => '2 s')")
coproc LOCKER { "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 2>&1; }
locker_pid=$LOCKER_PID
echo "BEGIN; SELECT job_id FROM jobq.job WHERE job_id = $C FOR KEY SHARE;" >&"${LOCKER[1]}"
locked=
read -r -t 10 locked <&"${LOCKER[0]}"
check "another session locks the running job" [ "$locked" = "$C" ]
for _ in $(seq 1 100); do
	[ "$(q "SELECT lease_expires_at < clock_timestamp() FROM jobq.job WHERE job_id = $C")" = t ] && break
	sleep 0.1
done
run health --grace 0
check "health: the expired lease is critical" \
	rc_and_has 1 "^ expired_leases *| critical *| [0-9]* running jobs with a lease expired"
check "health: the hint says how to reap now" has "^expired_leases: .*SELECT jobq.reap()"
echo "COMMIT;" >&"${LOCKER[1]}"
exec {LOCKER[1]}>&-
wait "$locker_pid" 2>/dev/null
locker_pid=
check "the job was still running under the old token" \
	[ "$(q "SELECT lease_token = $TOKC FROM jobq.job WHERE job_id = $C")" = t ]

# --- a database error --------------------------------------------------------

out=$(PGPORT=1 PGHOST=/nonexistent "$JOBQ" stats 2>&1)
rc=$?
check "no server: exit 3" rc_is 3

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
