#!/usr/bin/env bash
#
# test/cli/run.sh -- tests of the command-line tool bin/jobq
#
# Runs bin/jobq (or $JOBQ) against the server and database named by the
# PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE).  jobq must be
# installed on that server; CREATE EXTENSION jobq is run when the database
# does not have it yet (that needs a superuser).  Everything the test makes
# lives in queues, kinds, schedules and workers named cli_<pid>_...,
# removed at the end, so it can share a database with other work.
#
# Checks each command's output and exit status (0 done, 1 the answer is
# no, 2 bad usage, 3 database error), and for bad input also that nothing
# changed; that an unknown queue is an error unless --create; that
# drop-queue and purge change nothing unless confirmed (answers come on
# stdin); that every listing's --json is one JSON document with the
# expected keys (parsed with python3); that edit saves what $EDITOR wrote
# only if nobody changed the payload meanwhile (an "editor" script changes
# it from another session); that workers shows a worker that stopped
# heartbeating as GONE with its job; that user input never becomes SQL
# text; and that "jobq health" exits 1 on a critical check: an expired
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
export P
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
# json_is EXPR: the output is one JSON document d for which the Python
# expression EXPR holds (P is the test's prefix)
json_is() {
	printf '%s' "$out" | python3 -c '
import json, os, sys
d = json.load(sys.stdin)
P = os.environ["P"]
sys.exit(0 if eval(sys.argv[1]) else 1)' "$1"
}
rc_and_json() { rc_is "$1" && json_is "$2"; }

cleanup() {
	[ -n "${locker_pid:-}" ] && kill "$locker_pid" 2>/dev/null
	[ -n "${TMPD:-}" ] && rm -rf "$TMPD"
	q "SELECT count(jobq.cancel(job_id)) FROM jobq.jobs
	    WHERE starts_with(queue, '$P') AND status IN ('pending', 'running');
	   SELECT count(jobq.purge(name, s, '0')) FROM jobq.queue,
	          unnest(ARRAY['completed', 'failed', 'cancelled']) s
	    WHERE starts_with(name, '$P');
	   DELETE FROM jobq.idempotency_key WHERE starts_with(kind, '$P');
	   DELETE FROM jobq.schedule WHERE starts_with(name, '$P');
	   DELETE FROM jobq.app_worker WHERE starts_with(worker_id, '$P');
	   DELETE FROM jobq.queue WHERE starts_with(name, '$P');" >/dev/null 2>&1
	q "DROP OWNED BY ${P}tenant; DROP ROLE ${P}tenant" >/dev/null 2>&1
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
TMPD=$(mktemp -d)
chmod 755 "$TMPD"

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
run stats --json
check "stats --json: the queue_stats rows, by their column names" \
	rc_and_json 0 '[(r["ready"], r["running"], r["paused"], r["breaker_state"]) for r in d if r["queue"] == P + "q"] == [(2, 0, False, "closed")]'
run queues --json
check "queues --json: intervals as ISO 8601" \
	rc_and_json 0 '[(r["lease"], r["rate_limit"], r["rate_period"]) for r in d if r["queue"] == P + "q"] == [("PT5M", 1000, "PT1M")]'
run queues --json extra
check "queues with another argument: usage error" rc_and_has 2 "takes no arguments but --json"

# --- show --------------------------------------------------------------------

run show "$A"
check "show: the job" rc_and_has 0 "^kind *| ${P}mail$"
check "show: its payload" has '^payload *| {"to": "ann"}$'
check "show: an attempts table" has "attempt | outcome"
run show "$A" --json
check "show --json: the job and its attempts" \
	rc_and_json 0 'd["job"]["job_id"] == '"$A"' and d["job"]["payload"] == {"to": "ann"} and d["attempts"] == []'
run show --json --key "${P}mail" "${P}key"
check "show --json --key" rc_and_json 0 'd["job"]["job_id"] == '"$A"
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
run show --json "$A"
check "show --json: the attempts in order, with their errors" \
	rc_and_json 0 '[(a["attempt"], a["outcome"], a["worker_id"], a["error"]) for a in d["attempts"]] == [(1, "failed", "cli-w1", "smtp said 451"), (2, "running", "cli-w2", None)]'

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
run kinds --json --queue "${P}q"
check "kinds --json" rc_and_json 0 '[(k["kind"], k["failed"], k["failed_attempts"]) for k in d] == [(P + "mail", 1, 2)]'
run kinds --json 'not an interval'
check "kinds --json with a bad period: 3, no document" \
	eval 'rc_and_has 3 "invalid input syntax for type interval" && ! has "^\["'
run kinds --queue "${P}typo"
check "kinds of an unknown queue: 1" rc_and_has 1 "no queue \"${P}typo\""
run dead --json --kind "${P}mail"
check "dead --json: the dead_letter rows" \
	rc_and_json 0 '[(j["job_id"], j["status"], j["last_error"]) for j in d] == [('"$B"', "failed", "mailbox full")]'
run dead --json --kind "${P}nothing"
check "dead --json with nothing: an empty list" rc_and_json 0 'd == []'
run dead --queue "${P}typo"
check "dead of an unknown queue: 1" rc_and_has 1 "no queue \"${P}typo\""
run kinds 'not an interval'
check "kinds with a bad period: database error 3" rc_and_has 3 "invalid input syntax for type interval"
run retry-failed --queue "${P}typo"
check "retry-failed of an unknown queue: 1" rc_and_has 1 "no queue \"${P}typo\""
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
# a tenant that administers its queue (no superuser, no read of jobq's tables)
q "CREATE ROLE ${P}tenant; SELECT jobq.grant('${P}tq', '${P}tenant', 'administer');
   SELECT jobq.pause('${P}tq'), jobq.resume('${P}tq')" >/dev/null
export PGOPTIONS="-c role=${P}tenant"
run pause "${P}tq"
check "a tenant pauses its queue" rc_and_has 0 "queue \"${P}tq\" paused"
run resume "${P}tq"
check "a tenant resumes its queue" rc_and_line 0 "queue \"${P}tq\" resumed"
run resume "${P}q"
check "a tenant cannot resume another's queue: 1, it sees no such queue" rc_and_has 1 "no queue \"${P}q\""
unset PGOPTIONS
check "the tenant's queue is not paused" [ "$(q "SELECT paused FROM jobq.queues WHERE queue = '${P}tq'")" = f ]
run pause "${P}new"
check "pause of an unknown queue: 1" rc_and_has 1 "no queue \"${P}new\""
check "and the queue was not created" [ -z "$(q "SELECT 1 FROM jobq.queue WHERE name = '${P}new'")" ]
run pause "${P}new" --create
check "pause --create makes a new queue, paused" rc_and_line 0 "queue \"${P}new\" created, paused"
check "it is paused" [ "$(q "SELECT paused FROM jobq.queues WHERE queue = '${P}new'")" = t ]
run pause --bogus "${P}new"
check "pause with an unknown option: usage error" rc_and_has 2 'unknown option "--bogus"'

# --- configure, purge --------------------------------------------------------

run configure "${P}typo" --lease '1 minute'
check "configure of an unknown queue: 1" rc_and_has 1 "no queue \"${P}typo\""
check "and the queue was not created" [ -z "$(q "SELECT 1 FROM jobq.queue WHERE name = '${P}typo'")" ]
run configure "${P}q" --lease '2 minutes' --max-concurrency 7
check "configure" rc_and_line 0 "queue \"${P}q\" configured"
check "the settings changed, the others stayed" \
	[ "$(q "SELECT lease, max_concurrency, max_retries, rate_limit FROM jobq.queues WHERE queue = '${P}q'")" = "00:02:00|7|1|1000" ]
run configure "${P}conf" --create --max-retries 0
check "configure --create" rc_and_line 0 "queue \"${P}conf\" created"
check "the new queue has the setting" [ "$(q "SELECT max_retries FROM jobq.queues WHERE queue = '${P}conf'")" = 0 ]
run configure "${P}q" --max-retries many
check "configure with a non-number: usage error" rc_and_has 2 '--max-retries is a whole number, not "many"'
run configure "${P}q" --lease 'not an interval'
check "configure with a bad interval: database error 3" rc_and_has 3 "invalid input syntax for type interval"
run configure "${P}q" --backoff-base '1 hour' --backoff-cap '1 second'
check "configure that breaks a rule: 3, the server's message" rc_and_has 3 "backoff"
check "nothing changed" [ "$(q "SELECT lease, backoff_base FROM jobq.queues WHERE queue = '${P}q'")" = "00:02:00|00:00:00" ]
run configure "${P}q"
check "configure with no setting: usage error" rc_and_has 2 "name at least one setting"
run configure "${P}q" --colour blue
check "configure with an unknown setting: usage error" rc_and_has 2 'unknown option "--colour"'
q "SELECT jobq.configure('${P}q', lease => '5 minutes', max_concurrency => 0)" >/dev/null

D1=$(q "SELECT job_id FROM jobq.enqueue('${P}p', queue => '${P}conf')")
q "SELECT jobq.cancel($D1)" >/dev/null
run purge "${P}conf" cancelled </dev/null
check "purge asks; no answer: 1" rc_and_has 1 "not confirmed; nothing changed"
check "the prompt says how many" has "Delete 1 cancelled job of queue \"${P}conf\""
check "the job is still there" [ "$(q "SELECT count(*) FROM jobq.job WHERE job_id = $D1")" = 1 ]
out=$(echo y | "$JOBQ" purge "${P}conf" cancelled 2>&1)
rc=$?
check "purge confirmed" rc_and_has 0 "1 cancelled job of queue \"${P}conf\" deleted"
check "the job is gone" [ "$(q "SELECT count(*) FROM jobq.job WHERE job_id = $D1")" = 0 ]
run purge "${P}conf" cancelled
check "purge with nothing to delete" rc_and_line 0 "no cancelled jobs of queue \"${P}conf\" to purge"
run purge "${P}conf" running
check "purge of running jobs: usage error" rc_and_has 2 "completed, failed or cancelled"
run purge "${P}typo" failed --yes
check "purge of an unknown queue: 1" rc_and_has 1 "no queue \"${P}typo\""

# --- drop-queue --------------------------------------------------------------

q "SELECT jobq.configure('${P}drop')" >/dev/null
E1=$(q "SELECT job_id FROM jobq.enqueue('${P}d', queue => '${P}drop')")
E2=$(q "SELECT job_id FROM jobq.enqueue('${P}d', queue => '${P}drop')")
q "SELECT jobq.schedule('${P}drop-s', '0 0 1 1 *', '${P}d', queue => '${P}drop')" >/dev/null
TOKE=$(q "SELECT lease_token FROM jobq.claim('${P}drop', worker_id => 'cli-drop') WHERE job_id = $E1")
run drop-queue "${P}drop" --yes
check "drop-queue while a job runs: 1 with the server's message" \
	rc_and_has 1 "queue \"${P}drop\" has 1 running job"
check "and says what --force does" has "\-\-force fences their workers"
check "nothing was dropped" \
	[ "$(q "SELECT count(*) FROM jobq.queue WHERE name = '${P}drop'")|$(q "SELECT status FROM jobq.job WHERE job_id = $E1")" = "1|running" ]
run drop-queue "${P}drop" --force </dev/null
check "drop-queue --force asks first; no answer: 1" rc_and_has 1 "not confirmed; nothing changed"
check "the prompt says what goes" has "Drop queue \"${P}drop\" with its 1 unfinished, 1 running, 0 finished jobs (their workers fenced), 1 schedules"
out=$(echo no | "$JOBQ" drop-queue "${P}drop" --force 2>&1)
rc=$?
check "answered no: 1" rc_and_has 1 "not confirmed"
check "the queue, its jobs and its schedule are still there" \
	[ "$(q "SELECT (SELECT count(*) FROM jobq.queue WHERE name = '${P}drop')
	              + (SELECT count(*) FROM jobq.job WHERE queue = '${P}drop')
	              + (SELECT count(*) FROM jobq.schedule WHERE queue = '${P}drop')")" = 4 ]
out=$(echo y | "$JOBQ" drop-queue "${P}drop" --force 2>&1)
rc=$?
check "drop-queue --force, confirmed" rc_and_has 0 "queue \"${P}drop\" dropped; 2 jobs removed"
check "the queue, its jobs and its schedule are gone" \
	[ "$(q "SELECT (SELECT count(*) FROM jobq.queue WHERE name = '${P}drop')
	              + (SELECT count(*) FROM jobq.job WHERE job_id IN ($E1, $E2))
	              + (SELECT count(*) FROM jobq.schedule WHERE queue = '${P}drop')")" = 0 ]
check "the fenced worker's token no longer works" [ "$(q "SELECT jobq.complete($E1, $TOKE)")" = f ]
run drop-queue "${P}drop" --yes
check "drop-queue of an unknown queue: 1" rc_and_has 1 "no queue \"${P}drop\""
run drop-queue
check "drop-queue without a queue: usage error" rc_and_has 2 "usage: jobq drop-queue QUEUE"

# --- discard -----------------------------------------------------------------

q "SELECT jobq.configure('${P}dis', max_retries => 0)" >/dev/null
F1=$(q "SELECT job_id FROM jobq.enqueue('${P}dis', queue => '${P}dis')")
TOKF=$(q "SELECT lease_token FROM jobq.claim('${P}dis') WHERE job_id = $F1")
q "SELECT jobq.fail($F1, $TOKF, 'boom')" >/dev/null
F2=$(q "SELECT job_id FROM jobq.enqueue('${P}dis', queue => '${P}dis')")
q "SELECT jobq.cancel($F2)" >/dev/null
F3=$(q "SELECT job_id FROM jobq.enqueue('${P}dis', queue => '${P}dis')")
F4=$(q "SELECT job_id FROM jobq.enqueue('${P}dis', queue => '${P}dis')")
F5=$(q "SELECT job_id FROM jobq.enqueue('${P}dis', queue => '${P}dis', depends_on => ARRAY[$F4],
                                        on_parent_failure => 'run')")
q "SELECT jobq.cancel($F4)" >/dev/null
run discard "$F1" "$F2"
check "discard a failed and a cancelled job" rc_is 0
check "says so for the first" has "^job $F1: discarded$"
check "and for the second" has "^job $F2: discarded$"
check "both are gone, with their history" \
	[ "$(q "SELECT (SELECT count(*) FROM jobq.job WHERE job_id IN ($F1, $F2))
	              + (SELECT count(*) FROM jobq.attempt WHERE job_id IN ($F1, $F2))")" = 0 ]
run discard "$F3"
check "discard a pending job: 1" rc_and_has 1 "job $F3 is pending; only failed or cancelled jobs can be discarded"
check "it is still pending" [ "$(q "SELECT status FROM jobq.job WHERE job_id = $F3")" = pending ]
run discard "$F4"
check "discard a parent whose dependent has not finished: 1, the server's message" \
	rc_and_has 1 "job $F4 has dependents that have not finished"
check "it is still there" [ "$(q "SELECT status FROM jobq.job WHERE job_id = $F4")" = cancelled ]
run discard 999999999999 "$F3"
check "discard of jobs that cannot go: 1, each named" \
	eval 'rc_and_has 1 "no job 999999999999" && has "job $F3 is pending"'
run discard "$F5" abc
check "discard with a bad id: usage error, nothing done" rc_and_has 2 'a job id is a positive integer, not "abc"'
check "the good id's job was not touched" [ "$(q "SELECT status FROM jobq.job WHERE job_id = $F5")" = pending ]
run discard
check "discard without an id: usage error" rc_and_has 2 "usage: jobq discard ID"
run workflow "$F4" --json
check "workflow --json: the status and every job" \
	rc_and_json 0 'd["status"]["total"] == 2 and d["status"]["cancelled"] == 1 and [j["job_id"] for j in d["jobs"]] == ['"$F4, $F5"']'

# --- schedules ---------------------------------------------------------------

run schedules add "${P}nightly" '0 2 * * *' "${P}export" --queue "${P}q" \
	--payload '{"format": "csv"}' --timezone Europe/Paris --misfire skip --priority high
check "schedules add" rc_and_has 0 "^schedule \"${P}nightly\" created; next fire: "
check "the schedule has every setting" \
	[ "$(q "SELECT cron, kind, queue, payload, timezone, misfire, priority, paused FROM jobq.schedules WHERE name = '${P}nightly'")" \
		= "0 2 * * *|${P}export|${P}q|{\"format\": \"csv\"}|Europe/Paris|skip|20|f" ]
run schedules
check "schedules lists it" rc_and_has 0 "^ ${P}nightly *| 0 2 \* \* \* | Europe/Paris | ${P}export *| ${P}q *| *20 | active *| skip "
run schedules --json
check "schedules --json: the jobq.schedules rows" \
	rc_and_json 0 '[(s["cron"], s["payload"], s["paused"]) for s in d if s["name"] == P + "nightly"] == [("0 2 * * *", {"format": "csv"}, False)]'
run schedules pause "${P}nightly"
check "schedules pause" rc_and_line 0 "schedule \"${P}nightly\" paused"
check "it is paused" [ "$(q "SELECT paused FROM jobq.schedules WHERE name = '${P}nightly'")" = t ]
run schedules list
check "schedules list shows it paused" rc_and_has 0 "^ ${P}nightly .*| paused *|"
run schedules resume "${P}nightly"
check "schedules resume" rc_and_has 0 "^schedule \"${P}nightly\" resumed; next fire: "
check "it is not paused" [ "$(q "SELECT paused FROM jobq.schedules WHERE name = '${P}nightly'")" = f ]
run schedules run "${P}nightly"
check "schedules run fires it now" rc_and_has 0 "^schedule \"${P}nightly\" fired now: job [0-9]*$"
check "that job is in the queue" \
	[ "$(q "SELECT kind, payload FROM jobq.jobs WHERE job_id = '${out##* }'")" = "${P}export|{\"format\": \"csv\"}" ]
run schedules add "${P}nightly" '0 3 * * *' "${P}export" --queue "${P}q"
check "schedules add of a name that exists replaces it" rc_and_has 0 "^schedule \"${P}nightly\" replaced"
check "with the new settings" \
	[ "$(q "SELECT cron, payload, timezone, priority FROM jobq.schedules WHERE name = '${P}nightly'")" = "0 3 * * *|{}|UTC|0" ]

# bad input changes nothing
run schedules add "${P}typo" '* * * * *' "${P}k" --queue "${P}nosuchq"
check "schedules add to an unknown queue: 1" rc_and_has 1 "no queue \"${P}nosuchq\""
run schedules add "${P}bad" 'every tuesday' "${P}k" --queue "${P}newq" --create
check "schedules add with a bad cron: 3, the server's message and hint" \
	eval 'rc_and_has 3 "invalid cron expression" && has "^HINT: "'
check "neither the schedule nor the queue of --create was made" \
	[ "$(q "SELECT (SELECT count(*) FROM jobq.schedule WHERE name = '${P}bad')
	              + (SELECT count(*) FROM jobq.queue WHERE name = '${P}newq')")" = 0 ]
run schedules add "${P}bad" '* * * * *' "${P}k" --timezone Mars/Olympus
check "schedules add with an unknown time zone: 3" rc_and_has 3 "Mars/Olympus"
run schedules add "${P}bad" '* * * * *' "${P}k" --priority urgent
check "schedules add with an unknown priority label: 3" rc_and_has 3 'unrecognized priority label "urgent"'
run schedules add "${P}bad" '* * * * *' "${P}k" --misfire sometimes
check "schedules add with a bad misfire: usage error" rc_and_has 2 "skip, run_once or run_all"
run schedules add "${P}bad" '* * * * *'
check "schedules add without a kind: usage error" rc_and_has 2 "usage: jobq schedules add NAME CRON KIND"
check "no schedule was made by the bad ones" [ "$(q "SELECT count(*) FROM jobq.schedule WHERE name = '${P}bad'")" = 0 ]
run schedules add "${P}new" '*/5 * * * *' "${P}k" --queue "${P}newq" --create
check "schedules add --create makes the queue" rc_and_has 0 "schedule \"${P}new\" created"
check "the queue exists" [ "$(q "SELECT count(*) FROM jobq.queues WHERE queue = '${P}newq'")" = 1 ]
run schedules remove "${P}new"
check "schedules remove" rc_and_line 0 "schedule \"${P}new\" removed"
check "it is gone" [ "$(q "SELECT count(*) FROM jobq.schedule WHERE name = '${P}new'")" = 0 ]
run schedules remove "${P}new"
check "schedules remove of an unknown one: 1" rc_and_has 1 "no schedule \"${P}new\""
run schedules pause "${P}new"
check "schedules pause of an unknown one: 1" rc_and_has 1 "no schedule \"${P}new\""
run schedules run "${P}new"
check "schedules run of an unknown one: 1, the server's message" rc_and_has 1 "schedule \"${P}new\" does not exist"
run schedules frob
check "schedules with an unknown subcommand: usage error" rc_and_has 2 'unknown subcommand "frob"'

# --- edit --------------------------------------------------------------------

G1=$(q "SELECT job_id FROM jobq.enqueue('${P}ed', '{\"to\": \"ann\"}', queue => '${P}dis')")
run edit "$G1" --priority high --max-retries 5 --run-at '2100-01-01 00:00+00'
check "edit a pending job" \
	rc_and_has 0 "^job $G1 (pending): edited by $(q "SELECT current_user"): run_at .* -> 2100-01-01 .*, priority 0 -> 20, max_retries 0 -> 5$"
check "the job has the new values" \
	[ "$(q "SELECT priority, max_retries, run_at = '2100-01-01 00:00+00' FROM jobq.jobs WHERE job_id = $G1")" = "20|5|t" ]
run edit "$G1" --payload '{"to": "bob"}'
check "edit --payload" rc_and_line 0 "job $G1 (pending): edited by $(q "SELECT current_user"): payload replaced"
check "the payload is replaced" [ "$(q "SELECT payload->>'to' FROM jobq.jobs WHERE job_id = $G1")" = bob ]
out=$(EDITOR="sed -i s/bob/eve/" "$JOBQ" edit "$G1" 2>&1)
rc=$?
check "edit in \$EDITOR" rc_and_line 0 "job $G1 (pending): edited by $(q "SELECT current_user"): payload replaced"
check "the editor's payload is saved" [ "$(q "SELECT payload->>'to' FROM jobq.jobs WHERE job_id = $G1")" = eve ]
out=$(EDITOR=true "$JOBQ" edit "$G1" 2>&1)
rc=$?
check "an editor that changes nothing saves nothing" rc_and_line 0 "job $G1: payload unchanged; nothing saved"
check "the history has the three edits, in order" \
	[ "$(q "SELECT string_agg(attempt || ' ' || outcome, ',' ORDER BY ordinality) FROM jobq.job($G1) WITH ORDINALITY")" = "-1 edited,-2 edited,-3 edited" ]
run show "$G1"
check "show tells who changed what" has "^ *-1 | edited .*| edited by .*: run_at .* priority 0 -> 20"

# bad input: nothing changes
before=$(q "SELECT payload::text || priority || max_retries || run_at FROM jobq.job WHERE job_id = $G1")
unchanged() { [ "$(q "SELECT payload::text || priority || max_retries || run_at FROM jobq.job WHERE job_id = $G1")" = "$before" ]; }
run edit "$G1" --payload '[1, 2]'
check "edit with a payload that is not an object: 3, the server's message" \
	eval 'rc_and_has 3 "payload must be a JSON object" && unchanged'
run edit "$G1" --payload '{"to": '
check "edit with a payload that is not JSON: 3" eval 'rc_and_has 3 "invalid input syntax for type json" && unchanged'
run edit "$G1" --max-retries lots
check "edit with a bad --max-retries: usage error" eval 'rc_and_has 2 "--max-retries is a whole number" && unchanged'
run edit "$G1" --priority urgent
check "edit with an unknown priority label: 3" eval 'rc_and_has 3 "unrecognized priority label" && unchanged'
run edit "$G1" --run-at 'next tuesday'
check "edit with a bad time: 3" eval 'rc_and_has 3 "timestamp" && unchanged'
out=$(TMPDIR=$TMPD EDITOR="sed -i s/}/,/" "$JOBQ" edit "$G1" 2>&1)
rc=$?
check "an editor's text that is not JSON: 3, nothing saved, the text kept" \
	eval 'rc_and_has 3 "invalid input syntax for type json" && has "nothing saved; your text is kept in $TMPD/jobq-job-$G1\." && unchanged'
cat >"$TMPD/racing-editor" <<EOF
#!/bin/sh
# another session changes the payload while this editor is open
"\$PSQL" -X -q -c "SELECT jobq.update_job($G1, payload => '{\"to\": \"zoe\"}')" >/dev/null
sed -i s/eve/ida/ "\$1"
EOF
chmod +x "$TMPD/racing-editor"
out=$(TMPDIR=$TMPD EDITOR="$TMPD/racing-editor" "$JOBQ" edit "$G1" 2>&1)
rc=$?
check "a payload changed by another while in the editor: 1, nothing saved" \
	rc_and_has 1 "job $G1 changed while you edited it; nothing saved"
check "the other's change stands" [ "$(q "SELECT payload->>'to' FROM jobq.jobs WHERE job_id = $G1")" = zoe ]
out=$(EDITOR=false "$JOBQ" edit "$G1" 2>&1)
rc=$?
check "an editor that fails: 1, nothing saved" rc_and_has 1 "the editor (false) failed; nothing saved"

G2=$(q "SELECT job_id FROM jobq.enqueue('${P}ed', queue => '${P}dis')")
TOKG=$(q "SELECT lease_token FROM jobq.claim('${P}dis', kinds => ARRAY['${P}ed']) WHERE job_id = $G2")
run edit "$G2" --priority 5
check "edit a running job: 1" rc_and_has 1 "job $G2 is running; only pending, blocked, failed or cancelled jobs can be edited"
out=$(EDITOR=true "$JOBQ" edit "$G2" 2>&1)
rc=$?
check "edit a running job in the editor: 1, before the editor" rc_and_has 1 "job $G2 is running"
q "SELECT jobq.fail($G2, $TOKG, 'bad payload', retryable => false)" >/dev/null
run edit "$G2" --payload '{"fixed": true}'
check "edit a dead job's payload" rc_and_line 0 "job $G2 (failed): edited by $(q "SELECT current_user"): payload replaced"
run retry "$G2"
check "then retry it" rc_and_line 0 "job $G2: pending"
check "with the new payload" [ "$(q "SELECT payload FROM jobq.jobs WHERE job_id = $G2")" = '{"fixed": true}' ]
run edit 999999999999 --priority 1
check "edit a job that does not exist: 1" rc_and_has 1 "no job 999999999999"
run edit --priority 1
check "edit without an id: usage error" rc_and_has 2 "usage: jobq edit ID"
check "no file of jobq's is left in the temporary directory" \
	[ "$(find "$TMPD" -name 'jobq*' ! -name "jobq-job-$G1.*" | wc -l)" = 0 ]

# --- workers -----------------------------------------------------------------

q "SELECT jobq.configure('${P}wq')" >/dev/null
H1=$(q "SELECT job_id FROM jobq.enqueue('${P}w', queue => '${P}wq')")
H2=$(q "SELECT job_id FROM jobq.enqueue('${P}w', queue => '${P}wq')")
q "SELECT jobq.register_worker('${P}alive', ARRAY['${P}wq'],
                               '{\"host\": \"web-1\", \"pid\": 4242, \"library\": \"jobq-python\",
                                 \"version\": \"0.3.0\", \"concurrency\": 8}');
   SELECT jobq.register_worker('${P}gone', ARRAY['${P}wq'], '{\"host\": \"web-2\", \"pid\": 99}')" >/dev/null
q "SELECT count(*) FROM jobq.claim('${P}wq', worker_id => '${P}alive') WHERE job_id = $H1" >/dev/null
q "SELECT count(*) FROM jobq.claim('${P}wq', worker_id => '${P}gone') WHERE job_id = $H2" >/dev/null
# the second worker stopped heartbeating an hour ago; the first stays alive
# whatever the machine's load, under a gone_after of 30 minutes
q "UPDATE jobq.app_worker SET last_seen_at = now() - interval '1 hour' WHERE worker_id = '${P}gone'" >/dev/null
export PGOPTIONS="${PGOPTIONS:-} -c jobq.worker_gone_after=30min"
run workers
check "workers: jobq's own worker of this database" \
	rc_and_has 0 "^ *[0-9][0-9]* | $(q "SELECT current_database()") *| worker *|"
check "workers: the live application worker with its job" \
	has "^ ${P}alive *| alive *| ${P}wq *| web-1 *| 4242 *| jobq-python 0.3.0 *| 8 *|.*| *1 | $H1$"
check "workers: the one that stopped heartbeating is GONE, with the job it held" \
	has "^ ${P}gone *| GONE *| ${P}wq *| web-2 *| 99 *|.*| *1 | $H2$"
check "workers: what becomes of a gone worker's jobs" has "gone (not seen for jobq.worker_gone_after, 30min).*jobq.release_running"
run workers --json
check "workers --json: processes and application workers with their jobs" \
	rc_and_json 0 'any(p["role"] == "worker" for p in d["processes"]) and [(w["worker_id"], w["gone"], w["jobs_in_hand"], w["jobs"], w["info"].get("host")) for w in d["app_workers"] if w["worker_id"].startswith(P)] == [(P + "alive", False, 1, ['"$H1"'], "web-1"), (P + "gone", True, 1, ['"$H2"'], "web-2")]'
PGOPTIONS=${PGOPTIONS% -c jobq.worker_gone_after=30min}
run workers extra
check "workers with an argument: usage error" rc_and_has 2 "workers takes no arguments but --json"

# user input is data, never SQL
EVIL="${P}x'); DROP TABLE jobq.job; --"
run pause "$EVIL" --create
check "a queue name with quotes and a semicolon is a name" rc_is 0
check "that queue exists under its exact name" \
	[ "$(q "SELECT count(*) FROM jobq.queue WHERE name = \$\$$EVIL\$\$")" = 1 ]
check "jobq.job is still there" [ "$(q "SELECT to_regclass('jobq.job') IS NOT NULL")" = t ]
run show --key "${P}mail" ":'key'"
check "psql variable syntax in an argument is data" rc_and_has 1 "no job holds key"
run schedules add "$EVIL" '@daily' "$EVIL" --queue "$EVIL" --payload '{"q": ":'"'"'key'"'"'"}'
check "a schedule's name, kind, queue and payload are data" rc_is 0
check "the schedule exists under its exact name, with its payload" \
	[ "$(q "SELECT kind = name AND queue = name, payload->>'q' FROM jobq.schedules WHERE name = \$\$$EVIL\$\$")" = "t|:'key'" ]
q "SELECT jobq.unschedule(\$\$$EVIL\$\$)" >/dev/null
run drop-queue "$EVIL" --yes
check "drop-queue of that queue removes it alone" \
	eval 'rc_and_line 0 "queue \"$EVIL\" dropped; 0 jobs removed" &&
		[ "$(q "SELECT count(*) FROM jobq.queue WHERE starts_with(name, '"'${P}'"')")" -gt 3 ]'

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
run health --json --grace '1000 years' --oldest-pending '1000 years'
check "health --json: not critical, exit 0" \
	rc_and_json 0 'd["critical"] is False and {c["check_name"]: c["status"] for c in d["checks"]}["worker"] == "ok"'
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
run health --json --grace 0
check "health --json: critical, exit 1" \
	rc_and_json 1 'd["critical"] is True and {c["check_name"]: c["status"] for c in d["checks"]}["expired_leases"] == "critical"'
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
