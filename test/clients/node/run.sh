#!/usr/bin/env bash
#
# test/clients/node/run.sh -- the Node library (clients/node) against a real
# jobq server, directly and through a PgBouncer in transaction mode.
#
# It starts its own throwaway servers and removes them at the end:
#   * a PostgreSQL from PG_CONFIG (or the pg_config on PATH) with jobq
#     preloaded, on a Unix socket in a scratch directory, a free port;
#   * a PgBouncer (pool_mode = transaction) in front of it, on a free port.
# When run as root, initdb, the server and pgbouncer run as the postgres user.
#
# The package is copied to the scratch directory and its locked dependencies
# installed there with npm ci (clients/node is left as it is); npm pack must
# make a tarball of it.  Then each test file (test/clients/node/*.test.js)
# runs with node --test, once with the library connecting directly and once
# through pgbouncer (the tests check the database directly either way), and
# throughput.js measures jobs/s with no-op handlers against SQL-only loops.
#
# Environment: PG_CONFIG, NODE (default node; e.g. a Node 18), PGBOUNCER
# (default /usr/sbin/pgbouncer); for development: VIA=direct (or pgbouncer),
# TESTS=worker (a case pattern of test file names), SKIP_THROUGHPUT=1.
# Exits non-zero on any failure; the last line is "N passed, N failed".

# shellcheck source=test/lib/pgbouncer.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../lib/pgbouncer.sh"
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
NODE=${NODE:-node}
PGBOUNCER=${PGBOUNCER:-/usr/sbin/pgbouncer}
passed=0
failed=0
bouncer_pid=
PG_BIN=

# ok NAME / not_ok NAME [DETAIL]: one check of the script itself
ok() {
	passed=$((passed + 1))
	echo "ok - $1"
}
not_ok() {
	failed=$((failed + 1))
	echo "not ok - $1"
	[ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/#   /'
}

finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/jobq-node.XXXXXX") || { not_ok "mktemp"; finish; }
chmod 755 "$TMP"
if [ "$(id -u)" -eq 0 ]; then
	AS=(runuser -u postgres -- env HOME="$TMP")
	chown postgres "$TMP"
else
	AS=()
fi

cleanup() {
	[ -n "$bouncer_pid" ] && kill -TERM "$bouncer_pid" 2>/dev/null && wait "$bouncer_pid" 2>/dev/null
	[ -n "$PG_BIN" ] && [ -f "$TMP/data/postmaster.pid" ] &&
		"${AS[@]}" "$PG_BIN/pg_ctl" -D "$TMP/data" -m immediate -w stop >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port: a TCP port on 127.0.0.1 nothing listens on (the servers listen
# on Unix sockets only; the number names the socket)
free_port() {
	local port
	for _ in $(seq 1 50); do
		port=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
			[ ! -e "$TMP/.s.PGSQL.$port" ]; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

# --- the package ---------------------------------------------------------------

if ! command -v "$NODE" >/dev/null || ! command -v npm >/dev/null; then
	not_ok "node ($NODE) and npm are installed"
	finish
fi
echo "# node $("$NODE" --version), npm $(npm --version)"
PKG=$TMP/jobq-node
mkdir -p "$PKG"
(cd "$ROOT/clients/node" && tar --exclude=./node_modules --exclude='./*.tgz' -cf - .) | tar -xf - -C "$PKG"
if (cd "$PKG" && npm ci --no-audit --no-fund --loglevel=error >"$TMP/npm.log" 2>&1); then
	ok "npm ci installs the locked dependencies"
else
	not_ok "npm ci installs the locked dependencies" "$(tail -n 5 "$TMP/npm.log")"
	finish
fi
if (cd "$PKG" && npm pack --pack-destination "$TMP" >"$TMP/pack.log" 2>&1) &&
	tar -tzf "$TMP"/jobq-*.tgz >"$TMP/pack.list" 2>&1 &&
	grep -qx 'package/index.js' "$TMP/pack.list" && grep -qx 'package/index.d.ts' "$TMP/pack.list" &&
	grep -qx 'package/lib/worker.js' "$TMP/pack.list" && ! grep -q 'node_modules' "$TMP/pack.list"; then
	ok "npm pack makes a tarball with index.js, index.d.ts and lib/"
else
	not_ok "npm pack makes a tarball with index.js, index.d.ts and lib/" "$(cat "$TMP/pack.log" "$TMP/pack.list" 2>/dev/null | tail -n 20)"
fi

# --- the servers ---------------------------------------------------------------

PG_BIN=$("$PG_CONFIG" --bindir) || { not_ok "pg_config ($PG_CONFIG) runs"; finish; }
SOCK=$TMP/sock
mkdir -p "$SOCK" "$TMP/data"
[ "${#AS[@]}" -gt 0 ] && chown postgres "$SOCK" "$TMP/data"
PORT=$(free_port) || { not_ok "a free port"; finish; }
cd "$TMP" || exit 1 # the server user must be able to enter the working directory
if ! "${AS[@]}" "$PG_BIN/initdb" -D "$TMP/data" -U postgres -A trust --no-sync -E UTF8 --locale=C \
	>"$TMP/initdb.log" 2>&1; then
	not_ok "initdb" "$(tail -n 5 "$TMP/initdb.log")"
	finish
fi
cat >>"$TMP/data/postgresql.conf" <<-EOF
	listen_addresses = ''
	unix_socket_directories = '$SOCK'
	port = $PORT
	fsync = off
	max_connections = 200
	shared_preload_libraries = 'jobq'
	jobq.naptime = '200ms'
EOF
if ! "${AS[@]}" "$PG_BIN/pg_ctl" -D "$TMP/data" -l "$TMP/server.log" -w -t 60 start >/dev/null 2>&1; then
	not_ok "the server starts" "$(tail -n 10 "$TMP/server.log")"
	finish
fi
export PGHOST=$SOCK PGPORT=$PORT PGUSER=postgres PGDATABASE=jobq_node
unset PGPASSWORD PGSERVICE PGOPTIONS
if "$PG_BIN/psql" -X -q -d postgres -c 'CREATE DATABASE jobq_node' >"$TMP/psql.log" 2>&1 &&
	"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION jobq' >>"$TMP/psql.log" 2>&1; then
	ok "a server with jobq preloaded, on port $PORT"
else
	not_ok "a server with jobq preloaded" "$(cat "$TMP/psql.log")"
	finish
fi

BOUNCER_PORT=$(free_port)
BOUNCER_OK=0
if [ -x "$PGBOUNCER" ] && [ -n "$BOUNCER_PORT" ]; then
	pgbouncer_ini "$TMP/pgbouncer.ini" "$SOCK" "$PORT" "$SOCK" "$BOUNCER_PORT" 20
	echo '"postgres" ""' >"$TMP/users.txt"
	"${AS[@]}" "$PGBOUNCER" "$TMP/pgbouncer.ini" >/dev/null 2>&1 &
	bouncer_pid=$!
	for _ in $(seq 1 50); do
		if [ "$("$PG_BIN/psql" -X -A -t -p "$BOUNCER_PORT" -c 'SELECT 1' 2>/dev/null)" = 1 ]; then
			BOUNCER_OK=1
			break
		fi
		sleep 0.1
	done
fi
if [ "$BOUNCER_OK" = 1 ]; then
	ok "pgbouncer in transaction mode, on port $BOUNCER_PORT"
else
	not_ok "pgbouncer in transaction mode answers" "$(tail -n 5 "$TMP/pgbouncer.log" 2>/dev/null || echo "$PGBOUNCER missing")"
fi

# --- the tests -------------------------------------------------------------------

# run_file FILE VIA: one test file with node --test, its counts added to ours
run_file() {
	local file=$1 via=$2 out=$TMP/out.tap lib_port=$PORT p f
	[ "$via" = pgbouncer ] && lib_port=$BOUNCER_PORT
	echo "# $(basename "$file") ($via)"
	env JOBQ_PKG="$PKG" JOBQ_VIA="$via" JOBQ_LIB_PORT="$lib_port" JOBQ_FIXTURES="$HERE" \
		timeout -k 5 "${FILE_TIMEOUT:-150}" "$NODE" --test --test-reporter=tap "$file" >"$out" 2>&1
	local rc=$?
	# the results, and the details of failures only
	awk '/^(not )?ok /{ bad = /^not ok/; print; next } /^# (pass|fail) /{ print; next } bad && /^ /' "$out" |
		sed 's/^/  /'
	p=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$out" | tail -n 1)
	f=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$out" | tail -n 1)
	if [ -z "$p" ] || [ -z "$f" ]; then
		not_ok "$(basename "$file") ($via) ran to its end" "$(tail -n 20 "$out")"
		return
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		not_ok "$(basename "$file") ($via) exited with status $rc" "$(tail -n 20 "$out")"
	fi
}

for via in ${VIA:-direct pgbouncer}; do
	[ "$via" = pgbouncer ] && [ "$BOUNCER_OK" = 0 ] && continue
	for file in "$HERE"/*.test.js; do
		case $(basename "$file" .test.js) in ${TESTS:-*}) ;; *) continue ;; esac
		run_file "$file" "$via"
	done
done

# --- throughput ------------------------------------------------------------------

if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
	echo "# throughput: no-op handlers, concurrency 8 (direct)"
	if env JOBQ_PKG="$PKG" JOBQ_LIB_PORT="$PORT" "$NODE" "$HERE/throughput.js" >"$TMP/tp.out" 2>&1; then
		sed 's/^/#   /' "$TMP/tp.out"
		ok "throughput measured"
	else
		not_ok "throughput measured" "$(tail -n 20 "$TMP/tp.out")"
	fi
fi

if [ "$failed" -gt 0 ]; then
	echo "# server log (last 20 lines):"
	tail -n 20 "$TMP/server.log" | sed 's/^/#   /'
	if [ "$BOUNCER_OK" = 1 ]; then
		if kill -0 "$bouncer_pid" 2>/dev/null; then
			echo "# pgbouncer (pid $bouncer_pid) still runs; its socket: $(ls "$SOCK"/.s.PGSQL."$BOUNCER_PORT" 2>&1)"
		else
			echo "# pgbouncer (pid $bouncer_pid) is gone"
		fi
		echo "# pgbouncer log (last 30 lines):"
		tail -n 30 "$TMP/pgbouncer.log" 2>&1 | sed 's/^/#   /'
	fi
fi
finish
