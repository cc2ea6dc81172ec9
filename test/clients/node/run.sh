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
# make a tarball of it.  Then the commands of README.md's "A first worker in Node"
# (its first sh block: npm pack of clients/node, npm install of the tarball)
# run in a fresh project, which must then require jobq and pg (one copy,
# from a registry, at the version pinned) and survive npm ci; the
# restart test's workers run from that project.  Then each test file
# (test/clients/node/*.test.js) runs with node --test, once with the library
# connecting directly and once through pgbouncer (the tests check the
# database directly either way), and throughput.js measures jobs/s with
# no-op handlers against SQL-only loops.
#
# Databases besides jobq_node: jobq_node_sql_ascii, _latin1 and _euc_jp (in
# those encodings), and jobq_node_020 with jobq at 0.2.0 (CREATE EXTENSION
# jobq VERSION '0.2.0'), a server without jobq.fail's details and the worker
# registry.  restart.test.js restarts the server (JOBQ_RESTART=script MODE).
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

# --- installed as the README says ------------------------------------------------

# the first sh block of README.md's "A first worker in Node"
readme_install_block() {
	awk '/^## A first worker in Node/ { s = 1; next }
	     s && /^#+ / { exit }
	     s && /^```sh/ { b = 1; next }
	     b && /^```/ { exit }
	     b' "$ROOT/README.md"
}
APP=$TMP/app
APP_OK=0
mkdir -p "$APP"
block=$(readme_install_block)
if [ -z "$block" ]; then
	not_ok "README.md's \"A first worker in Node\" has its install commands (an sh block)"
else
	# the README's own lines: "cd my-app" is this fresh project, /path/to/jobq this tree
	script=$(printf '%s\n' "$block" | sed -e "s|^cd my-app\b|cd \"\$APP\"|" -e "s|/path/to/jobq|$ROOT|g")
	printf '%s\n' "$script" | sed 's/^/#   /'
	if (cd "$APP" && npm init -y >/dev/null 2>&1 &&
		env APP="$APP" npm_config_audit=false npm_config_fund=false npm_config_loglevel=error \
			bash -eu -c "$script" >"$TMP/app-install.log" 2>&1); then
		ok "the README's install commands run in a fresh project (npm $(npm --version))"
	else
		not_ok "the README's install commands run in a fresh project (npm $(npm --version))" "$(tail -n 20 "$TMP/app-install.log")"
	fi
	# jobq and pg load from it; both are copies in node_modules, one pg, from the registry, pinned
	if out=$(cd "$APP" && "$NODE" -e '
		const fs = require("fs")
		const assert = require("assert")
		const jobq = require("jobq")
		const pg = require("pg")
		assert.equal(typeof jobq.Worker, "function")
		assert.equal(typeof pg.Pool, "function")
		assert.ok(!fs.lstatSync("node_modules/jobq").isSymbolicLink(), "node_modules/jobq is a copy, not a link")
		assert.ok(!fs.existsSync("node_modules/jobq/node_modules/pg"), "one copy of pg")
		const want = JSON.parse(fs.readFileSync("node_modules/jobq/package.json", "utf8")).dependencies.pg
		const lock = JSON.parse(fs.readFileSync("package-lock.json", "utf8")).packages
		assert.equal(lock["node_modules/pg"].version, want, "pg at the version jobq pins")
		assert.match(lock["node_modules/jobq"].resolved, /^file:jobq-[0-9.]+\.tgz$/, "jobq from the tarball")
		// from a registry, with a hash (resolved is left out of the lock
		// under omit-lockfile-registry-resolved); no link, no file
		for (const [name, p] of Object.entries(lock)) {
			if (name === "" || name === "node_modules/jobq") continue
			assert.ok(!p.link && !/^file:/.test(p.resolved || ""), name + " from a registry")
			assert.ok(p.integrity, name + " has an integrity hash")
		}
		console.log("pg " + lock["node_modules/pg"].version + "; " + (Object.keys(lock).length - 1) + " packages, all from the registry but jobq (" + lock["node_modules/jobq"].resolved + ")")
	' 2>&1); then
		ok "the project requires jobq and pg: copies, one pg at the pinned version, the rest from a registry ($out)"
		APP_OK=1
	else
		not_ok "the project requires jobq and pg: copies, one pg at the pinned version, the rest from a registry" "$out"
	fi
	# the tarball kept with the project is all npm ci needs
	if [ "$APP_OK" = 1 ] && (cd "$APP" && rm -rf node_modules && npm ci --no-audit --no-fund --loglevel=error >"$TMP/app-ci.log" 2>&1 &&
		"$NODE" -e 'require("jobq"); require("pg")' >>"$TMP/app-ci.log" 2>&1); then
		ok "npm ci in the project installs the same again from its lock and the tarball"
	else
		not_ok "npm ci in the project installs the same again from its lock and the tarball" "$(tail -n 10 "$TMP/app-ci.log" 2>/dev/null)"
		APP_OK=0
	fi
fi
[ "$APP_OK" = 1 ] || APP=

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

# the databases in other encodings, and one at jobq 0.2.0
DBS_OK=1
for enc in SQL_ASCII LATIN1 EUC_JP; do
	db=jobq_node_$(echo "$enc" | tr '[:upper:]' '[:lower:]')
	"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres \
		-c "CREATE DATABASE $db TEMPLATE template0 ENCODING '$enc' LC_COLLATE 'C' LC_CTYPE 'C'" >>"$TMP/psql.log" 2>&1 &&
		"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d "$db" -c 'CREATE EXTENSION jobq' >>"$TMP/psql.log" 2>&1 || DBS_OK=0
done
"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres -c 'CREATE DATABASE jobq_node_020' >>"$TMP/psql.log" 2>&1 &&
	"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d jobq_node_020 -c "CREATE EXTENSION jobq VERSION '0.2.0'" >>"$TMP/psql.log" 2>&1 ||
	DBS_OK=0
if [ "$DBS_OK" = 1 ]; then
	ok "databases in SQL_ASCII, LATIN1 and EUC_JP, and one at jobq 0.2.0"
else
	not_ok "databases in SQL_ASCII, LATIN1 and EUC_JP, and one at jobq 0.2.0" "$(tail -n 10 "$TMP/psql.log")"
fi

# restart.sh MODE: pg_ctl restart -m MODE (fast, immediate) of the server
{
	echo '#!/bin/sh'
	printf 'exec %s' "$(printf '%q ' "${AS[@]}" "$PG_BIN/pg_ctl" -D "$TMP/data" -l "$TMP/server.log" -w -t 120)"
	echo '-m "$1" restart'
} >"$TMP/restart.sh"
chmod 755 "$TMP/restart.sh"

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
	env JOBQ_PKG="$PKG" JOBQ_VIA="$via" JOBQ_LIB_PORT="$lib_port" JOBQ_FIXTURES="$HERE" JOBQ_APP="$APP" \
		JOBQ_RESTART="$TMP/restart.sh" JOBQ_TMP="$TMP" \
		timeout -k 5 "${FILE_TIMEOUT:-300}" "$NODE" --test --test-reporter=tap "$file" >"$out" 2>&1
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
