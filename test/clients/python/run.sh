#!/usr/bin/env bash
#
# test/clients/python/run.sh -- the Python library (clients/python) against a
# real server: directly, then through a PgBouncer in transaction mode.
#
# Starts its own throwaway server (initdb in a scratch directory, jobq in
# shared_preload_libraries, a free port) from the PostgreSQL tree of
# $PG_CONFIG (default: the pg_config on PATH), where jobq must be installed,
# and a PgBouncer (pool_mode = transaction) on another free port.  As root,
# both run as the postgres user.  Then runs test_jobq.py (plain unittest)
# twice: JOBQ_TEST_VIA=direct and JOBQ_TEST_VIA=pgbouncer; the second adds the
# throughput measurement when JOBQ_THROUGHPUT=1.  Before the server: the
# dashboard's entry point (python3 -m jobq.web --help, bin/jobq web --help)
# and its one-line error when a dependency cannot be imported (a directory on
# PYTHONPATH shadows waitress or psycopg with a module raising ImportError) or
# the package is not installed at all.
#
# Needs python3 with psycopg 3 (Debian: python3-psycopg) and
# /usr/sbin/pgbouncer.  Prints "N passed, N failed" last; exits non-zero on
# any failure.  Cleans up its servers and scratch directory.

# shellcheck source=test/lib/pgbouncer.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../lib/pgbouncer.sh"
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
PGBOUNCER=${PGBOUNCER:-/usr/sbin/pgbouncer}
BIN=$("$PG_CONFIG" --bindir) || { echo "no pg_config"; echo "0 passed, 1 failed"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobq-python.XXXXXX") || { echo "0 passed, 1 failed"; exit 1; }
chmod 755 "$TMP"
passed=0
failed=0
bouncer_pid=

# as_pg CMD...: run CMD as the server's user (postgres when we are root)
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		(cd "$TMP" && runuser -u postgres -- "$@")
	else
		(cd "$TMP" && "$@")
	fi
}

cleanup() {
	[ -n "$bouncer_pid" ] && kill -TERM "$bouncer_pid" 2>/dev/null
	[ -f "$TMP/data/postmaster.pid" ] && as_pg "$BIN/pg_ctl" -D "$TMP/data" -m immediate stop >/dev/null 2>&1
	[ -n "$bouncer_pid" ] && wait "$bouncer_pid" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail_setup() {
	echo "not ok - $1"
	[ -n "${2:-}" ] && sed 's/^/#   /' "$2" | tail -n 20
	echo "$passed passed, $((failed + 1)) failed"
	exit 1
}

# free_port: a TCP port nobody listens on now
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# a python3 with psycopg: Debian's, unless PYTHON says otherwise
PY=
for p in ${PYTHON:-} /usr/bin/python3 python3; do
	if "$p" -c 'import psycopg' 2>/dev/null; then
		PY=$p
		break
	fi
done
[ -n "$PY" ] || fail_setup "python3 with psycopg 3 (Debian: python3-psycopg)"

# --- the dashboard's entry point (no server needed) ----------------------------

# web_check NAME EXPECTED-RC PATTERN COMMAND...: COMMAND, run in the scratch
# directory, exits EXPECTED-RC and prints PATTERN (a grep -E pattern; on
# stderr when EXPECTED-RC is not 0, and then as its one and only line, with
# no traceback).  Not in the tree's top directory: python3 -m and -c look
# there first, and a built tree has jobq.so, the extension, which Python
# would take for a module "jobq".
web_check() {
	local name=$1 rc_want=$2 pat=$3 rc out err lines
	shift 3
	out=$TMP/web-out err=$TMP/web-err
	(cd "$TMP" && exec timeout 60 "$@") >"$out" 2>"$err" </dev/null
	rc=$?
	lines=$(wc -l <"$err")
	if [ "$rc_want" = 0 ] && [ "$rc" = 0 ] && grep -qE -- "$pat" "$out"; then
		echo "ok - $name"
		passed=$((passed + 1))
	elif [ "$rc_want" != 0 ] && [ "$rc" = "$rc_want" ] && [ "$lines" = 1 ] &&
		grep -qE -- "$pat" "$err" && ! grep -q Traceback "$err"; then
		echo "ok - $name"
		passed=$((passed + 1))
	else
		echo "not ok - $name (exit $rc, want $rc_want; stderr $lines lines)"
		sed 's/^/#   /' "$out" "$err" | tail -n 20
		failed=$((failed + 1))
	fi
}

# a module that cannot be imported: a directory on PYTHONPATH shadows it
# with one whose import raises ImportError
for m in waitress psycopg; do
	mkdir -p "$TMP/shadow-$m/$m"
	echo 'raise ImportError("shadowed by test/clients/python/run.sh")' >"$TMP/shadow-$m/$m/__init__.py"
done
# an interpreter that finds no installed package (python3 -S: no site-packages)
printf '#!/bin/sh\nexec %s -S "$@"\n' "$PY" >"$TMP/python-nosite"
chmod 755 "$TMP/python-nosite"
mkdir -p "$TMP/bin" && cp "$ROOT/bin/jobq" "$TMP/bin/jobq"

echo "# the dashboard's entry point"
web_check "python3 -m jobq.web --help prints its options" 0 "--read-only" \
	env PYTHONPATH="$ROOT/clients/python" "$PY" -m jobq.web --help
web_check "bin/jobq web --help runs jobq.web from the checkout" 0 "--password-file" \
	env -u PYTHONPATH "$ROOT/bin/jobq" web --help
web_check "waitress missing: one line naming python3-waitress, exit 3" 3 \
	"^jobq web: Python module waitress is missing: apt-get install python3-waitress" \
	env PYTHONPATH="$TMP/shadow-waitress:$ROOT/clients/python" "$PY" -m jobq.web --port 0
web_check "psycopg missing: one line naming python3-psycopg, exit 3" 3 \
	"^jobq web: Python module psycopg is missing: apt-get install python3-psycopg" \
	env PYTHONPATH="$TMP/shadow-psycopg:$ROOT/clients/python" "$PY" -m jobq.web --port 0
web_check "psycopg and waitress missing: one line naming both, exit 3" 3 \
	"^jobq web: Python modules psycopg, waitress are missing: apt-get install python3-psycopg python3-waitress" \
	env PYTHONPATH="$TMP/shadow-psycopg:$TMP/shadow-waitress:$ROOT/clients/python" "$PY" -m jobq.web
web_check "bin/jobq web with waitress missing: the same line" 3 \
	"^jobq web: Python module waitress is missing: apt-get install python3-waitress" \
	env PYTHONPATH="$TMP/shadow-waitress" "$ROOT/bin/jobq" web --port 0
web_check "bin/jobq web without the package: one line naming python3-jobq, exit 3" 3 \
	"^jobq web: the Python package jobq.web is not installed: apt-get install python3-jobq" \
	env -u PYTHONPATH JOBQ_PYTHON="$TMP/python-nosite" "$TMP/bin/jobq" web --port 0
web_check "import jobq without psycopg works; jobq.Worker then says what to install" 0 "^ok: .*python3-psycopg" \
	env PYTHONPATH="$TMP/shadow-psycopg:$ROOT/clients/python" "$PY" -c '
import jobq
try:
    jobq.Worker
except ImportError as x:
    print("ok:", x)'

# --- the server ------------------------------------------------------------

[ "$(id -u)" = 0 ] && chown postgres: "$TMP"
# UTF8 whatever the machine's locale (a minimal Debian has none: SQL_ASCII)
as_pg "$BIN/initdb" -D "$TMP/data" -A trust -U postgres --no-sync -E UTF8 --locale=C >"$TMP/initdb.log" 2>&1 ||
	fail_setup "initdb" "$TMP/initdb.log"
PORT=$(free_port)
cat >>"$TMP/data/postgresql.conf" <<-EOF
	listen_addresses = ''
	port = $PORT
	unix_socket_directories = '$TMP'
	shared_preload_libraries = 'jobq'
	jobq.naptime = 200ms
	fsync = off
	max_connections = 100
	log_min_messages = warning
EOF
as_pg "$BIN/pg_ctl" -D "$TMP/data" -l "$TMP/server.log" -w -t 60 start >/dev/null 2>&1 ||
	fail_setup "the server starts" "$TMP/server.log"
export PGHOST=$TMP PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
"$BIN/psql" -X -q -c "CREATE EXTENSION jobq" >"$TMP/create.log" 2>&1 ||
	fail_setup "CREATE EXTENSION jobq" "$TMP/create.log"

# --- pgbouncer in transaction mode -------------------------------------------

BOUNCER_PORT=$(free_port)
if [ -x "$PGBOUNCER" ]; then
	pgbouncer_ini "$TMP/pgbouncer.ini" "$TMP" "$PORT" "$TMP" "$BOUNCER_PORT" 20
	printf '"postgres" ""\n' >"$TMP/users.txt"
	[ "$(id -u)" = 0 ] && chown postgres: "$TMP/pgbouncer.ini" "$TMP/users.txt"
	if [ "$(id -u)" = 0 ]; then
		(cd "$TMP" && exec runuser -u postgres -- "$PGBOUNCER" "$TMP/pgbouncer.ini") >/dev/null 2>&1 &
	else
		"$PGBOUNCER" "$TMP/pgbouncer.ini" >/dev/null 2>&1 &
	fi
	bouncer_pid=$!
	ok=0
	for _ in $(seq 1 50); do
		if [ "$(PGPORT=$BOUNCER_PORT "$BIN/psql" -X -A -t -c 'SELECT 1' 2>/dev/null)" = 1 ]; then
			ok=1
			break
		fi
		sleep 0.1
	done
	[ "$ok" = 1 ] || fail_setup "pgbouncer in transaction mode answers" "$TMP/pgbouncer.log"
else
	fail_setup "$PGBOUNCER is installed (Debian: pgbouncer)"
fi

# --- the tests -----------------------------------------------------------------

run_suite() {
	local via=$1 port=$2 out=$TMP/out-$1
	echo "# the Python library, $via"
	env JOBQ_TEST_VIA="$via" JOBQ_TEST_DSN="host=$TMP port=$port user=postgres dbname=postgres" \
		JOBQ_TEST_DIRECT_DSN="host=$TMP port=$PORT user=postgres dbname=postgres" \
		PYTHONPATH="$ROOT/clients/python${PYTHONPATH:+:$PYTHONPATH}" \
		timeout 300 "$PY" "$HERE/test_jobq.py" >"$out" 2>&1
	local rc=$?
	grep -v '^[0-9]* passed, [0-9]* failed$' "$out"
	local p f
	p=$(grep -c '^ok - ' "$out")
	f=$(grep -c '^not ok - ' "$out")
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$rc" -ne 0 ] && [ "$f" = 0 ]; then
		echo "not ok - test_jobq.py ($via) exited with status $rc"
		failed=$((failed + 1))
	fi
}

run_suite direct "$PORT"
run_suite pgbouncer "$BOUNCER_PORT"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
