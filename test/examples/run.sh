#!/usr/bin/env bash
#
# test/examples/run.sh -- the example workers and producers (examples/python,
# examples/node, examples/psql) against a real jobq server, then the same
# through a PgBouncer in transaction mode, then the postgres_exporter queries
# (monitoring/postgres_exporter.yml, checked by test/monitoring/check.py).
#
# Uses the server and database named by the PG* variables (PGHOST, PGPORT,
# PGUSER, PGDATABASE), where jobq is installed and preloaded (the reaper must
# run).  CREATE EXTENSION jobq is run when the database does not have it yet.
# Everything it makes lives in queues named ex_<pid>_..., purged at the end,
# and in the table example_orders that the producers create.
#
# For each example and each connection (direct, then through pgbouncer):
#   * the producer commits orders with their jobs, and a rolled-back order
#     leaves neither order nor job;
#   * the worker runs 52 jobs of six kinds (the three examples side by side,
#     each in its own queue): every kind completes, a handler
#     that always fails with a retryable error ends in jobq.dead_letter with
#     retry_count 2, a permanent error fails at once, a rate-limited job is
#     snoozed (no retry spent) then completes, a job that fails halfway
#     resumes from its checkpoint, a job longer than the lease completes
#     without losing it (heartbeat), and a kind without a handler is never
#     claimed;
#   * SIGTERM while a slow job runs: the worker claims nothing more, the job
#     completes, the worker exits 0;
#   * (direct only) a second SIGTERM abandons a running job at once: exit 1,
#     the job is pending again with the attempt counted (Python and Node: handed back
#     with jobq.release, no retry spent).
#
# Needs python3 with psycopg (Debian: python3-psycopg) and python3-yaml,
# node and npm (npm ci installs examples/node's locked dependencies, the
# jobq library of clients/node among them, at every run), and
# /usr/sbin/pgbouncer (which
# refuses to run as root: run this as the server's user, as scripts/test does).
#
# Exits non-zero on any failure; the last line is "N passed, N failed".

# shellcheck source=test/lib/pgbouncer.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/pgbouncer.sh"
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PSQL=${PSQL:-psql}
PGBOUNCER=${PGBOUNCER:-/usr/sbin/pgbouncer}
P=ex_$$_
passed=0
failed=0
TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobq-examples.XXXXXX") || { echo "0 passed, 1 failed"; exit 2; }
worker_pid=
bouncer_pid=
sub_pids=()

# q SQL: run SQL (no user input) on the server directly, unaligned
q() {
	env PGHOST="$DIRECT_HOST" PGPORT="$DIRECT_PORT" \
		"$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"
}

# check NAME COMMAND...: one test; on failure, show what was found
check() {
	local name=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
		echo "ok - $name"
	else
		failed=$((failed + 1))
		echo "not ok - $name"
		[ -n "${got:-}" ] && printf '#   got: %s\n' "$got"
	fi
	got=
}

# is SQL EXPECTED: the query's output equals EXPECTED (kept in $got)
is() {
	got=$(q "$1" 2>&1)
	[ "$got" = "$2" ]
}

# poll SECONDS SQL: wait until the query returns t
poll() {
	local end=$((SECONDS + $1))
	while [ "$SECONDS" -lt "$end" ]; do
		[ "$(q "$2" 2>/dev/null)" = t ] && return 0
		sleep 0.1
	done
	return 1
}

# drained QUEUE: wait until the queue has no handled job pending or running
drained() {
	poll 300 "SELECT count(*) = 0 FROM jobq.job
	          WHERE queue = '$1' AND kind <> 'video.transcode' AND status IN ('blocked', 'pending', 'running')" && return 0
	got=$(q "SELECT string_agg(kind || ' ' || status || ' ' || n, ', ')
	           FROM (SELECT kind, status, count(*) n FROM jobq.job WHERE queue = '$1' GROUP BY 1, 2) s")
	return 1
}

cleanup() {
	local p
	for p in "${sub_pids[@]}"; do
		kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	[ -n "$bouncer_pid" ] && kill -TERM "$bouncer_pid" 2>/dev/null && wait "$bouncer_pid" 2>/dev/null
	q "SELECT count(jobq.cancel(job_id)) FROM jobq.jobs
	    WHERE starts_with(queue, '$P') AND status IN ('pending', 'running');
	   SELECT count(jobq.purge(name, s, '0')) FROM jobq.queue,
	          unnest(ARRAY['completed', 'failed', 'cancelled']) s
	    WHERE starts_with(name, '$P');
	   DELETE FROM example_orders o USING jobq.job j
	    WHERE starts_with(j.queue, '$P') AND j.kind = 'order.confirm'
	      AND j.payload->>'order_id' = o.id::text;
	   DELETE FROM jobq.idempotency_key WHERE starts_with(key, '$P');
	   DELETE FROM jobq.queue WHERE starts_with(name, '$P');" >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- set up ----------------------------------------------------------------

DIRECT_HOST=${PGHOST:-/var/run/postgresql}
DIRECT_PORT=${PGPORT:-5432}
if ! START=$(q "SELECT now()"); then
	echo "cannot connect with the PG* variables" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
if [ -z "$(q "SELECT 1 FROM pg_extension WHERE extname = 'jobq'")" ] &&
	! q "CREATE EXTENSION jobq" >/dev/null; then
	echo "jobq is not installed in this database and CREATE EXTENSION failed" >&2
	echo "0 passed, 1 failed"
	exit 1
fi

# a python3 that has psycopg: Debian's, unless PYTHON says otherwise
PY=
for p in ${PYTHON:-} /usr/bin/python3 python3; do
	if "$p" -c 'import psycopg' 2>/dev/null; then
		PY=$p
		break
	fi
done
check "python3 with psycopg (Debian: python3-psycopg)" test -n "$PY"

# the Node example's locked dependencies: pg and the jobq library
# (clients/node, installed as a copy: examples/node/.npmrc), afresh every
# run so the library is the tree's
NODE_OK=0
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	got="node or npm is not installed"
elif (cd "$ROOT/examples/node" && npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm.log" 2>&1); then
	NODE_OK=1
else
	got="npm ci failed: $(tail -n 5 "$TMP/npm.log")"
fi
check "node and the locked pg and jobq packages (npm ci)" test "$NODE_OK" = 1

# A pgbouncer in transaction mode on a Unix socket in $TMP, in front of the
# server; any database name goes to the server's database of that name.
BOUNCER_PORT=$((20000 + RANDOM % 30000))
BOUNCER_OK=0
if [ -x "$PGBOUNCER" ]; then
	case $DIRECT_HOST in
		/*) server_host=$DIRECT_HOST ;;
		*) server_host=$DIRECT_HOST ;;
	esac
	pgbouncer_ini "$TMP/pgbouncer.ini" "$server_host" "$DIRECT_PORT" "$TMP" "$BOUNCER_PORT" 10
	printf '"%s" ""\n' "${PGUSER:-$(id -un)}" >"$TMP/users.txt"
	"$PGBOUNCER" "$TMP/pgbouncer.ini" >/dev/null 2>&1 &
	bouncer_pid=$!
	for _ in $(seq 1 50); do
		if [ "$(PGHOST=$TMP PGPORT=$BOUNCER_PORT "$PSQL" -X -A -t -c 'SELECT 1' 2>/dev/null)" = 1 ]; then
			BOUNCER_OK=1
			break
		fi
		sleep 0.1
	done
	[ "$BOUNCER_OK" = 1 ] || got=$(tail -n 5 "$TMP/pgbouncer.log" 2>/dev/null)
else
	got="$PGBOUNCER is not installed (Debian: pgbouncer)"
fi
check "pgbouncer in transaction mode answers" test "$BOUNCER_OK" = 1

# --- one example through one connection ---------------------------------------

# example LANG VIA: the producer, the job flow and SIGTERM for one example;
# run in a subshell of its own (the examples run side by side)
example() {
	local lang=$1 via=$2 Q=$P${1}_$2 t=$1/$2 worker producer log rc failed0=$failed
	local -a env_via
	trap '[ -n "$worker_pid" ] && kill -KILL "$worker_pid" 2>/dev/null' EXIT
	trap 'exit 1' TERM
	case $lang in
		python)
			worker=("$PY" "$ROOT/examples/python/worker.py")
			producer=("$PY" "$ROOT/examples/python/producer.py")
			;;
		node)
			worker=(node "$ROOT/examples/node/worker.js")
			producer=(node "$ROOT/examples/node/producer.js")
			;;
		psql)
			worker=(bash "$ROOT/examples/psql/worker.sh")
			producer=(bash "$ROOT/examples/psql/producer.sh")
			;;
	esac
	if [ "$via" = pgbouncer ]; then
		env_via=(PGHOST="$TMP" PGPORT="$BOUNCER_PORT")
	else
		env_via=(PGHOST="$DIRECT_HOST" PGPORT="$DIRECT_PORT")
	fi
	log=$TMP/$lang-$via.log
	echo "# $lang through $via (queue $Q)"

	# the producer: three committed orders, one rolled back
	env "${env_via[@]}" "${producer[@]}" --queue "$Q" --orders 3 >"$TMP/producer-$lang-$via.out" 2>&1
	got=$(cat "$TMP/producer-$lang-$via.out")
	check "$t: producer commits three orders with their jobs" \
		test "$(grep -c 'committed with job' "$TMP/producer-$lang-$via.out")" = 3
	env "${env_via[@]}" "${producer[@]}" --queue "$Q" --orders 1 --fail >"$TMP/producer-$lang-$via.out" 2>&1
	got=$(cat "$TMP/producer-$lang-$via.out")
	check "$t: the failing producer rolls back" grep -q 'rolled back' "$TMP/producer-$lang-$via.out"
	check "$t: a rolled-back order leaves no job, and no order is without its job" \
		is "SELECT (SELECT count(*) FROM jobq.job WHERE queue = '$Q') || ' ' ||
		           (SELECT count(*) FROM example_orders o WHERE o.created_at >= '$START'
		               AND NOT EXISTS (SELECT FROM jobq.job j WHERE j.kind = 'order.confirm'
		                                  AND j.payload->>'order_id' = o.id::text))" "3 0"

	# the jobs
	q "SELECT jobq.configure('$Q', max_retries => 2, backoff_base => '50 ms', backoff_cap => '100 ms');
	   SELECT count(*) FROM jobq.enqueue_many('email.send',
	          (SELECT array_agg(jsonb_build_object('to', 'user' || i || '@example.com')) FROM generate_series(1, 40) i), '$Q');
	   SELECT count(*) FROM jobq.enqueue_many('image.resize',
	          (SELECT array_agg(jsonb_build_object('image', 'img' || i || '.png', 'width', 64)) FROM generate_series(1, 5) i), '$Q');
	   SELECT jobq.enqueue('import.rows', '{\"rows\": 100, \"chunk\": 25, \"fail_once_at\": 50}', '$Q');
	   SELECT jobq.enqueue('webhook.deliver', '{\"responses\": [503]}', '$Q', idempotency_key => '$Q-503');
	   SELECT jobq.enqueue('webhook.deliver', '{\"responses\": [404]}', '$Q', idempotency_key => '$Q-404');
	   SELECT jobq.enqueue('webhook.deliver', '{\"responses\": [429, 200]}', '$Q', idempotency_key => '$Q-429');
	   SELECT jobq.enqueue('report.build', '{\"seconds\": 9}', '$Q', idempotency_key => '$Q-slow');
	   SELECT jobq.enqueue('video.transcode', '{}', '$Q');" >/dev/null
	# the Python example also runs a workflow: a batch split in two halves
	# and a fan-in callback after both
	local completed=51
	if [ "$lang" = python ]; then
		q "SELECT jobq.enqueue('batch.split', '{\"items\": [1, 2, 3, 4]}', '$Q', idempotency_key => '$Q-split')" >/dev/null
		completed=55
	fi

	# the worker: an 8-second lease, so the 9-second job needs the heartbeat
	# (renewing at a third of the lease leaves room for a busy machine: 4 s
	# was lost once with three suites running on two cores)
	env "${env_via[@]}" "${worker[@]}" --queue "$Q" --worker-id "$lang-$via" --batch 10 \
		--lease 8 --wait 5 >"$log" 2>&1 &
	worker_pid=$!
	check "$t: the queue drains (every handled job completed or failed)" \
		drained "$Q"
	check "$t: $completed jobs completed" \
		is "SELECT count(*) FROM jobq.job WHERE queue = '$Q' AND status = 'completed'" "$completed"
	if [ "$lang" = python ]; then
		check "$t: the workflow split its batch, and the callback ran after both halves" \
			is "SELECT w.total || ' ' || w.completed || ' ' || w.can_finish || ' ' ||
			           (SELECT j.result->>'total' FROM jobq.workflow_jobs(k.job_id) j WHERE j.kind = 'batch.done')
			      FROM jobq.jobs k, jobq.workflow_status(k.job_id) w
			     WHERE k.queue = '$Q' AND k.idempotency_key = '$Q-split'" "4 4 true 10"
	fi
	check "$t: every email has its result" \
		is "SELECT count(*) FROM jobq.jobs WHERE queue = '$Q' AND kind = 'email.send'
		      AND result->>'sent_to' = payload->>'to'" 40
	check "$t: every committed order was confirmed" \
		is "SELECT count(*) FROM jobq.jobs j JOIN example_orders o ON o.id = (j.payload->>'order_id')::bigint
		     WHERE j.queue = '$Q' AND j.kind = 'order.confirm' AND (j.result->>'confirmed')::bigint = o.id" 3
	check "$t: an always-failing retryable job is in the dead letter with retry_count 2" \
		is "SELECT retry_count || ' ' || (last_error LIKE '%upstream returned 503') FROM jobq.dead_letter
		     WHERE queue = '$Q' AND idempotency_key = '$Q-503'" "2 true"
	check "$t: it ran three times, the failures in its attempt history" \
		is "SELECT count(*) FROM jobq.job((SELECT job_id FROM jobq.jobs WHERE idempotency_key = '$Q-503'))
		     WHERE outcome = 'failed'" 3
	check "$t: a permanent error fails at once (retry_count 0)" \
		is "SELECT status || ' ' || retry_count FROM jobq.jobs WHERE queue = '$Q' AND idempotency_key = '$Q-404'" \
		"failed 0"
	check "$t: a rate-limited job is snoozed (no retry spent), then completes" \
		is "SELECT status || ' ' || retry_count || ' ' || (result->>'calls') FROM jobq.jobs
		     WHERE queue = '$Q' AND idempotency_key = '$Q-429'" "completed 0 2"
	check "$t: a job that failed halfway resumed from its checkpoint" \
		is "SELECT status || ' ' || retry_count || ' ' || (result->>'resumed_from') || ' ' || (checkpoint->>'done')
		      FROM jobq.jobs WHERE queue = '$Q' AND kind = 'import.rows'" "completed 1 50 100"
	check "$t: a job longer than its lease completed on its first attempt (heartbeat)" \
		is "SELECT status || ' ' || retry_count || ' ' ||
		           (SELECT count(*) FROM jobq.attempt a WHERE a.job_id = j.job_id)
		      FROM jobq.jobs j WHERE queue = '$Q' AND idempotency_key = '$Q-slow'" "completed 0 0"
	got=$(grep 'lease lost' "$log" | head -n 3)
	check "$t: no lease was lost" test -z "$got"
	check "$t: a kind without a handler is never claimed" \
		is "SELECT status || ' ' || (claimed_at IS NULL) FROM jobq.jobs
		     WHERE queue = '$Q' AND kind = 'video.transcode'" "pending true"

	# SIGTERM while a slow job runs
	q "SELECT jobq.enqueue('report.build', '{\"seconds\": 2}', '$Q', idempotency_key => '$Q-term')" >/dev/null
	check "$t: the slow job is claimed" \
		poll 60 "SELECT status = 'running' FROM jobq.jobs WHERE queue = '$Q' AND idempotency_key = '$Q-term'"
	sleep 0.5 # claimed is not started yet for the bash worker, which runs a batch in turn
	kill -TERM "$worker_pid"
	local end=$((SECONDS + 60))
	until grep -q 'no more claims' "$log" || [ "$SECONDS" -ge "$end" ]; do sleep 0.05; done
	# a job enqueued after the signal must not be claimed
	q "SELECT jobq.enqueue('email.send', '{\"to\": \"late@example.com\"}', '$Q', idempotency_key => '$Q-late')" >/dev/null
	end=$((SECONDS + 120))
	while kill -0 "$worker_pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
	rc=0
	if kill -0 "$worker_pid" 2>/dev/null; then
		kill -KILL "$worker_pid"
		rc=timeout
	fi
	wait "$worker_pid" || rc=$?
	worker_pid=
	got="exit status $rc; log: $(tail -n 3 "$log")"
	check "$t: after SIGTERM the worker exits 0" test "$rc" = 0
	check "$t: the job running at SIGTERM completed on its first attempt" \
		is "SELECT status || ' ' || retry_count FROM jobq.jobs WHERE queue = '$Q' AND idempotency_key = '$Q-term'" \
		"completed 0"
	check "$t: nothing is claimed after SIGTERM" \
		is "SELECT status || ' ' || (claimed_at IS NULL) FROM jobq.jobs
		     WHERE queue = '$Q' AND idempotency_key = '$Q-late'" "pending true"

	# a second SIGTERM abandons the running job: it is released to run again
	if [ "$via" = direct ]; then
		q "SELECT jobq.enqueue('report.build', '{\"seconds\": 30}', '$Q', idempotency_key => '$Q-abandon')" >/dev/null
		# one job at a time: the late email (still pending) runs first, and the
		# 30-second job, once claimed, is the one running
		env "${env_via[@]}" "${worker[@]}" --queue "$Q" --worker-id "$lang-$via-2" --lease 8 --wait 5 \
			--batch 1 >>"$log" 2>&1 &
		worker_pid=$!
		check "$t: a 30-second job is claimed" \
			poll 60 "SELECT status = 'running' FROM jobq.jobs WHERE queue = '$Q' AND idempotency_key = '$Q-abandon'"
		sleep 2 # its handler has started (2 s of its 30)
		kill -TERM "$worker_pid"
		end=$((SECONDS + 60))
		until [ "$(grep -c 'no more claims' "$log")" = 2 ] || [ "$SECONDS" -ge "$end" ]; do sleep 0.05; done
		kill -TERM "$worker_pid"
		end=$((SECONDS + 120))
		while kill -0 "$worker_pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
		rc=0
		if kill -0 "$worker_pid" 2>/dev/null; then
			kill -KILL "$worker_pid"
			rc=timeout
		fi
		wait "$worker_pid" || rc=$?
		worker_pid=
		got="exit status $rc; log: $(tail -n 3 "$log")"
		check "$t: a second SIGTERM abandons the running job at once: exit 1" test "$rc" = 1
		if [ "$lang" = python ] || [ "$lang" = node ]; then
			# the libraries hand it back with jobq.release: no retry spent
			check "$t: the abandoned job is handed back (jobq.release): pending, no retry spent" \
				is "SELECT status || ' ' || retry_count || ' ' ||
				           (SELECT outcome FROM jobq.job(j.job_id) ORDER BY attempt DESC LIMIT 1)
				      FROM jobq.jobs j WHERE queue = '$Q' AND idempotency_key = '$Q-abandon'" "pending 0 released"
		else
			# (its fail says so; on a loaded machine its lease may have
			# expired first, which the reaper says instead)
			check "$t: the abandoned job is pending again, that attempt counted" \
				is "SELECT status || ' ' || retry_count || ' ' ||
				           (last_error IN ('abandoned at shutdown', 'lease expired'))
				      FROM jobq.jobs WHERE queue = '$Q' AND idempotency_key = '$Q-abandon'" "pending 1 true"
		fi
	fi

	if [ "$failed" -gt "$failed0" ]; then
		echo "# $lang/$via worker log (last 20 lines):"
		tail -n 20 "$log" | sed 's/^/#   /'
	fi
}

# The three examples side by side (in queues of their own), first directly,
# then through pgbouncer.
for via in direct pgbouncer; do
	[ "$via" = pgbouncer ] && [ "$BOUNCER_OK" = 0 ] && continue
	langs=(psql)
	[ -n "$PY" ] && langs+=(python)
	[ "$NODE_OK" = 1 ] && langs+=(node)
	sub_pids=()
	for lang in "${langs[@]}"; do
		(
			s0=$SECONDS
			example "$lang" "$via"
			echo "# end of $lang/$via ($((SECONDS - s0)) s)"
		) >"$TMP/result-$lang-$via" 2>&1 &
		sub_pids+=($!)
	done
	wait "${sub_pids[@]}"
	sub_pids=()
	for lang in "${langs[@]}"; do
		r=$TMP/result-$lang-$via
		cat "$r"
		passed=$((passed + $(grep -c '^ok - ' "$r")))
		failed=$((failed + $(grep -c '^not ok - ' "$r")))
		if ! grep -q "^# end of $lang/$via" "$r"; then
			echo "not ok - $lang/$via: the test itself did not finish"
			failed=$((failed + 1))
		fi
	done
done

# --- the postgres_exporter queries ---------------------------------------------

if [ -n "$PY" ]; then
	echo "# monitoring/postgres_exporter.yml"
	mon_rc=0
	env PGHOST="$DIRECT_HOST" PGPORT="$DIRECT_PORT" QUEUE_PREFIX="${P}mon" \
		"$PY" "$ROOT/test/monitoring/check.py" "$ROOT/monitoring/postgres_exporter.yml" >"$TMP/mon.out" 2>&1 ||
		mon_rc=$?
	grep -v '^[0-9]* passed, [0-9]* failed$' "$TMP/mon.out"
	passed=$((passed + $(grep -c '^ok - ' "$TMP/mon.out")))
	failed=$((failed + $(grep -c '^not ok - ' "$TMP/mon.out")))
	grep -q '^ok - \|^not ok - ' "$TMP/mon.out" || failed=$((failed + 1))
	# a traceback after some "ok -" lines, or a failure it did not print as
	# "not ok -", still fails
	if [ "$mon_rc" -ne 0 ] && ! grep -q '^not ok - ' "$TMP/mon.out"; then
		echo "not ok - test/monitoring/check.py exited with status $mon_rc"
		failed=$((failed + 1))
	fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
