#!/usr/bin/env bash
#
# test/web/run.sh -- tests of the dashboard ("jobq web") in a real browser
#
# Starts a throwaway PostgreSQL server (initdb into a temporary directory,
# as the postgres user when run as root; shared_preload_libraries = jobq;
# a Unix socket and no TCP port), with jobq from PG_CONFIG (default: the
# pg_config in PATH), which must have jobq installed.  Then
# test/web/drive.py makes queues, jobs, dead letters, a schedule and roles,
# starts "jobq web" instances on free ports (an administrator, a read-only
# one, a work-only role, one behind a password) and drives headless
# Debian chromium through the DevTools protocol: every page renders with
# data, the actions change the database, hostile text renders as text,
# forged POSTs are refused.  A screenshot of each page goes to
# $JOBQ_WEB_SHOTS (default: the temporary directory, kept when a test fails).
#
# Needs: Debian's chromium, python3-psycopg, python3-waitress,
# python3-jinja2.  Installs chromium, python3-waitress and python3-jinja2
# with apt-get when they are missing and the script runs as root.
# Exits non-zero on any failure; the last line is "N passed, N failed".

set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
BINDIR=$("$PG_CONFIG" --bindir) || {
	echo "no pg_config (set PG_CONFIG)" >&2
	echo "0 passed, 1 failed"
	exit 1
}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

if ! command -v chromium >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y -q chromium >/dev/null 2>&1 ||
			{ apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; }
	fi
	command -v chromium >/dev/null || {
		echo "chromium is not installed (apt-get install chromium)" >&2
		echo "0 passed, 1 failed"
		exit 1
	}
fi

if ! "$PY" -c 'import waitress, jinja2' 2>/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y -q python3-waitress python3-jinja2 >/dev/null 2>&1 ||
			{ apt-get update -q >/dev/null 2>&1 && apt-get install -y -q python3-waitress python3-jinja2 >/dev/null 2>&1; }
	fi
	"$PY" -c 'import waitress, jinja2' 2>/dev/null || {
		echo "python3-waitress or python3-jinja2 is not installed (apt-get install python3-waitress python3-jinja2)" >&2
		echo "0 passed, 1 failed"
		exit 1
	}
fi

WORK=$(mktemp -d /tmp/jobq-web.XXXXXX)
chmod 755 "$WORK"
AS=()
if [ "$(id -u)" = 0 ]; then
	chown postgres: "$WORK"
	AS=(runuser -u postgres --)
fi
DATA=$WORK/data
PGLOG=$WORK/postgres.log

cleanup() {
	"${AS[@]}" "$BINDIR/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1
	if [ "${keep:-}" = 1 ]; then
		echo "# kept $WORK (server log, screenshots, web logs)"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# UTF8 whatever the machine's locale (a minimal Debian has none: SQL_ASCII)
if ! "${AS[@]}" "$BINDIR/initdb" -D "$DATA" -U postgres -A trust --no-sync -E UTF8 --locale=C >"$WORK/initdb.log" 2>&1; then
	cat "$WORK/initdb.log" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = 5432
shared_preload_libraries = 'jobq'
fsync = off
jobq.naptime = 200
# an application worker of the tests is alive for the whole run, however
# busy the machine (the gone one is backdated by hours)
jobq.worker_gone_after = '30min'
EOF
if ! "${AS[@]}" "$BINDIR/pg_ctl" -D "$DATA" -l "$PGLOG" -w start >/dev/null; then
	cat "$PGLOG" >&2
	echo "0 passed, 1 failed"
	exit 1
fi

export PGHOST=$WORK PGPORT=5432 PGUSER=postgres PGDATABASE=jobq_web
unset PGPASSWORD PGSERVICE PGOPTIONS
"$BINDIR/psql" -X -q -d postgres -c "CREATE DATABASE jobq_web" &&
	"$BINDIR/psql" -X -q -c "CREATE EXTENSION jobq" || {
	echo "0 passed, 1 failed"
	exit 1
}

SHOTS=${JOBQ_WEB_SHOTS:-$WORK/screens}
mkdir -p "$SHOTS"
chmod 777 "$SHOTS"
JOBQ=$ROOT/bin/jobq PSQL=$BINDIR/psql PG_CONFIG=$PG_CONFIG \
	"$PY" "$ROOT/test/web/drive.py" --work "$WORK" --shots "$SHOTS"
rc=$?
[ "$rc" = 0 ] || keep=1
[ -z "${JOBQ_WEB_SHOTS:-}" ] || echo "# screenshots in $SHOTS"
exit "$rc"
