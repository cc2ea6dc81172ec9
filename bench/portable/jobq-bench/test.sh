#!/usr/bin/env bash
#
# bench/portable/jobq-bench/test.sh -- the harness adapter against a real
# server, for a few seconds per check.
#
# Starts its own throwaway server (initdb in a scratch directory, jobq in
# shared_preload_libraries, synchronous_commit on, a free port or TEST_PORT)
# from the PostgreSQL tree of $PG_CONFIG (default: the pg_config on PATH),
# where jobq must be installed; as root it runs as the postgres user.  Then:
#
#   1. the bounded-memory histogram against exact percentiles (0.1 %);
#   2. the adapter with its own pacing (PRODUCER_PACING=adapter), fixed rate,
#      SAMPLE_EVERY_S=1, ~6 s, SIGTERM: exit 0 within 5 s; check_jsonl.py on
#      its JSONL (descriptor, samples, required metrics every tick,
#      clock-aligned ticks) and on the database: no job failed, enqueued ==
#      completed + depth, and the rate x window sums are the exact counts;
#   3. harness pacing: 30 "ENQUEUE 10" tokens on stdin: exactly 300 jobs;
#   4. PRODUCER_MODE=depth-target: the depth is held near TARGET_DEPTH;
#   5. resilience: the adapter's backends terminated twice mid-run
#      (pg_terminate_backend, as the harness's pg-backend-kill does), then a
#      server restart (pg_ctl restart -m fast): the adapter goes on (exit 0 at
#      SIGTERM) and, after a drain run, every job is completed, none failed;
#   6. SIGKILL of the adapter mid-run, then a new one with JOBQ_LEASE_S=2:
#      the jobs the dead one held are reaped and completed.
#
# Needs python3 with psycopg 3 (Debian: python3-psycopg) and psql.  Prints
# "N passed, N failed" last; exits non-zero on any failure.  Cleans up.

set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
BIN=$("$PG_CONFIG" --bindir) || { echo "no pg_config"; echo "0 passed, 1 failed"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobq-bench-test.XXXXXX") || { echo "0 passed, 1 failed"; exit 1; }
chmod 755 "$TMP"
passed=0
failed=0
adapter_pid=

as_pg() {
	if [ "$(id -u)" = 0 ]; then
		(cd "$TMP" && runuser -u postgres -- "$@")
	else
		(cd "$TMP" && "$@")
	fi
}

cleanup() {
	[ -n "$adapter_pid" ] && kill -KILL "$adapter_pid" 2>/dev/null
	[ -f "$TMP/data/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$TMP/data" -m immediate stop >/dev/null 2>&1
	if [ "${KEEP:-0}" = 1 ]; then echo "# scratch kept: $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() { echo "ok - $1"; passed=$((passed + 1)); }
not_ok() {
	echo "not ok - $1"
	[ -n "${2:-}" ] && [ -f "$2" ] && sed 's/^/#   /' "$2" | tail -n 20
	failed=$((failed + 1))
}
fail_setup() {
	not_ok "$1" "${2:-}"
	echo "$passed passed, $failed failed"
	exit 1
}

PY=
for p in ${PYTHON:-} /usr/bin/python3 python3; do
	if "$p" -c 'import psycopg' 2>/dev/null; then
		PY=$p
		break
	fi
done
[ -n "$PY" ] || fail_setup "python3 with psycopg 3 (Debian: python3-psycopg)"
PORT=${TEST_PORT:-$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}

# --- the server ------------------------------------------------------------------

[ "$(id -u)" = 0 ] && chown postgres: "$TMP"
as_pg "$BIN/initdb" -D "$TMP/data" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$TMP/initdb.log" 2>&1 ||
	fail_setup "initdb" "$TMP/initdb.log"
cat >>"$TMP/data/postgresql.conf" <<EOF
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$TMP'
shared_preload_libraries = 'jobq'
synchronous_commit = on
max_connections = 100
jobq.naptime = 200ms
EOF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/server.log" -w start >/dev/null ||
	fail_setup "server start" "$TMP/server.log"
ADMIN="postgresql://postgres@127.0.0.1:$PORT/postgres"
export DATABASE_URL="postgresql://bench:bench@127.0.0.1:$PORT/jobq_bench"
psql -XAtq "$ADMIN" -c "CREATE ROLE bench LOGIN SUPERUSER PASSWORD 'bench'" >/dev/null ||
	fail_setup "role bench"

# fresh_db: a new jobq_bench, with the extensions adapter.json names (what the
# harness's preflight does) and pgstattuple
fresh_db() {
	psql -XAtq "$ADMIN" -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS jobq_bench WITH (FORCE)" \
		-c "CREATE DATABASE jobq_bench OWNER bench" >/dev/null &&
		psql -XAtq "$DATABASE_URL" -c "CREATE EXTENSION IF NOT EXISTS jobq" \
			-c "CREATE EXTENSION IF NOT EXISTS pgstattuple" >/dev/null
}

# the harness's env (adapters.py _base_env), scaled to a few seconds
export SCENARIO=long_horizon PRODUCER_MODE=fixed PRODUCER_RATE=400 TARGET_DEPTH=1000 \
	WORKER_COUNT=4 JOB_PAYLOAD_BYTES=256 JOB_WORK_MS=1 SAMPLE_EVERY_S=1 BENCH_INSTANCE_ID=0 \
	MALLOC_ARENA_MAX=2 PRODUCER_BATCH_MAX=128 PRODUCER_BATCH_MS=25 JOBQ_LEASE_S=10

# start_adapter OUT [ENV=VALUE...]: the adapter in the background, stdin
# from $TMP/stdin (a FIFO kept open by fd 7) so that harness tokens can be
# written to fd 7
start_adapter() {
	local out=$1
	shift
	rm -f "$TMP/stdin"
	mkfifo "$TMP/stdin"
	env "$@" "$PY" "$HERE/main.py" <"$TMP/stdin" >"$out" 2>>"$TMP/adapter.log" &
	adapter_pid=$!
	exec 7>"$TMP/stdin"
}

# stop_adapter: SIGTERM; 0 when it exited 0 within 5 s
stop_adapter() {
	local rc
	kill -TERM "$adapter_pid"
	for _ in $(seq 50); do
		kill -0 "$adapter_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$adapter_pid" 2>/dev/null; then
		kill -KILL "$adapter_pid"
		wait "$adapter_pid" 2>/dev/null
		adapter_pid=
		exec 7>&-
		return 1
	fi
	wait "$adapter_pid"
	rc=$?
	adapter_pid=
	exec 7>&-
	return "$rc"
}

# jsonl_check NAME JSONL ARGS...: check_jsonl.py, its lines as comments
jsonl_check() {
	local name=$1 out
	shift
	if out=$("$PY" "$HERE/check_jsonl.py" "$@" --every "$SAMPLE_EVERY_S" 2>&1); then
		ok "$name ($(grep -c '^ok' <<<"$out") checks)"
		sed -n 's/^# /#   /p' <<<"$out"
	else
		not_ok "$name"
		grep -v '^ok' <<<"$out" | sed 's/^/#   /'
	fi
}

# drain: a run with nothing to produce until the queue is empty (at most 30 s)
drain() {
	start_adapter "$TMP/drain.jsonl" PRODUCER_PACING=adapter PRODUCER_RATE=0
	for _ in $(seq 60); do
		sleep 0.5
		[ "$(psql -XAtq "$DATABASE_URL" -c "SELECT count(*) FROM jobq.job WHERE status <> 'completed'")" = 0 ] && break
	done
	stop_adapter
}

# --- 1. the histogram ---------------------------------------------------------------

if "$PY" - "$HERE/main.py" >"$TMP/hist.log" 2>&1 <<'EOF'
import importlib.util, math, os, random, sys
os.environ.setdefault("DATABASE_URL", "unused")
spec = importlib.util.spec_from_file_location("adapter", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
H = m.LogLinearHistogram
random.seed(7)
for v in list(range(5000)) + [random.randint(0, 10**11) for _ in range(50000)]:
    i = H.index(v)
    he = H.highest_equivalent(i)
    assert H.index(he) == i and v <= he <= v + v / 1024.0, (v, i, he)
vals = [int(random.lognormvariate(8, 2)) for _ in range(50000)]
h = H()
for v in vals:
    h.record(v)
s = sorted(vals)
for p, got in zip((0.5, 0.95, 0.99, 0.999, 1.0), h.percentiles((0.5, 0.95, 0.99, 0.999, 1.0))):
    exact = s[max(1, math.ceil(p * len(s))) - 1]
    assert exact <= got <= exact * (1 + 1 / 1024.0) + 1, (p, exact, got)
assert len(h.counts) < 30000
r = m.RollingLatency(30)
for sec in range(100):
    r.record_ms(1.0, now=float(sec))
assert len(r.slots) <= 31, len(r.slots)
assert r.percentiles_ms((0.5,), now=99.0) == [1.0]
print("histogram ok")
EOF
then
	ok "log-linear histogram: within 0.1 % of exact percentiles, bounded buckets and window"
else
	not_ok "log-linear histogram" "$TMP/hist.log"
fi

# --- 2. own pacing ---------------------------------------------------------------------

fresh_db || fail_setup "database"
start_adapter "$TMP/own.jsonl" PRODUCER_PACING=adapter
sleep 6
if stop_adapter; then ok "own pacing: exit 0 within 5 s of SIGTERM"; else not_ok "own pacing: exit 0 within 5 s of SIGTERM" "$TMP/adapter.log"; fi
jsonl_check "own pacing: JSONL and database" "$TMP/own.jsonl" "$HERE" --db "$DATABASE_URL" --exact
rate=$("$PY" -c '
import json, sys
v = [r["value"] for r in map(json.loads, open(sys.argv[1])) if r.get("metric") == "enqueue_rate" and r["window_s"] == 1]
print(sorted(v)[len(v) // 2] if v else 0)' "$TMP/own.jsonl")
if "$PY" -c "import sys; sys.exit(not (360 <= float('$rate') <= 440))"; then
	ok "own pacing: median enqueue_rate $rate within 10 % of PRODUCER_RATE 400"
else
	not_ok "own pacing: median enqueue_rate $rate within 10 % of PRODUCER_RATE 400"
fi

# --- 3. harness pacing ----------------------------------------------------------------------

fresh_db || fail_setup "database"
start_adapter "$TMP/tokens.jsonl" PRODUCER_PACING=harness
for _ in $(seq 30); do
	echo "ENQUEUE 10" >&7
	sleep 0.05
done
sleep 3
if stop_adapter; then ok "harness pacing: exit 0 within 5 s of SIGTERM"; else not_ok "harness pacing: exit 0" "$TMP/adapter.log"; fi
jsonl_check "harness pacing: 30 tokens of 10 make 300 jobs" "$TMP/tokens.jsonl" "$HERE" \
	--db "$DATABASE_URL" --exact --expect-enqueued 300

# --- 4. depth-target ---------------------------------------------------------------------------

fresh_db || fail_setup "database"
start_adapter "$TMP/depth.jsonl" PRODUCER_MODE=depth-target TARGET_DEPTH=500
sleep 8
if stop_adapter; then ok "depth-target: exit 0"; else not_ok "depth-target: exit 0" "$TMP/adapter.log"; fi
depth=$("$PY" -c '
import json, sys
v = [r["value"] for r in map(json.loads, open(sys.argv[1])) if r.get("metric") == "queue_depth"]
print(max(v[1:] or [0]))' "$TMP/depth.jsonl")
if "$PY" -c "import sys; sys.exit(not (250 <= float('$depth') <= 500 + 128))"; then
	ok "depth-target: queue_depth held near TARGET_DEPTH 500 (max $depth)"
else
	not_ok "depth-target: queue_depth held near TARGET_DEPTH 500 (max $depth)"
fi

# --- 5. backend kills and a server restart ------------------------------------------------------

fresh_db || fail_setup "database"
start_adapter "$TMP/chaos.jsonl" PRODUCER_PACING=adapter PRODUCER_RATE=200
sleep 3
for _ in 1 2; do
	psql -XAtq "$ADMIN" -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = 'jobq_bench' AND pid <> pg_backend_pid()
		AND state IN ('active', 'idle in transaction', 'idle')" >/dev/null
	sleep 1.5
done
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/server.log" -m fast -w restart >/dev/null ||
	not_ok "server restart" "$TMP/server.log"
sleep 5
if stop_adapter; then ok "backend kills + restart: the adapter ran on, exit 0 at SIGTERM"; else not_ok "backend kills + restart: exit 0" "$TMP/adapter.log"; fi
drain
jsonl_check "backend kills + restart: JSONL; after a drain every job completed, none failed" \
	"$TMP/chaos.jsonl" "$HERE" --db "$DATABASE_URL"
left=$(psql -XAtq "$DATABASE_URL" -c "SELECT count(*) FROM jobq.job WHERE status <> 'completed'")
if [ "$left" = 0 ]; then ok "backend kills + restart: no job left behind"; else not_ok "backend kills + restart: $left jobs not completed"; fi

# --- 6. SIGKILL, then a new adapter ---------------------------------------------------------------

fresh_db || fail_setup "database"
start_adapter "$TMP/kill1.jsonl" PRODUCER_PACING=adapter PRODUCER_RATE=200 JOBQ_LEASE_S=2 JOB_WORK_MS=50
# until it holds jobs (at most 20 s: a loaded machine starts python slowly)
for _ in $(seq 40); do
	sleep 0.5
	[ "$(psql -XAtq "$DATABASE_URL" -c "SELECT count(*) FROM jobq.job WHERE status = 'running'")" -gt 0 ] && break
done
kill -KILL "$adapter_pid"
wait "$adapter_pid" 2>/dev/null
adapter_pid=
exec 7>&-
held=$(psql -XAtq "$DATABASE_URL" -c "SELECT count(*) FROM jobq.job WHERE status = 'running'")
drain
attempts=$(psql -XAtq "$DATABASE_URL" -c "SELECT count(*) FROM jobq.attempt WHERE outcome = 'lease expired'")
left=$(psql -XAtq "$DATABASE_URL" -c "SELECT count(*) FROM jobq.job WHERE status <> 'completed'")
if [ "$held" -gt 0 ] && [ "$left" = 0 ] && [ "$attempts" -ge "$held" ]; then
	ok "SIGKILL: the $held jobs it held were reaped ($attempts lease expired) and completed by the next adapter"
else
	not_ok "SIGKILL: held $held, reaped $attempts, left $left" "$TMP/adapter.log"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
