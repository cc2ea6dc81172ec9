#!/usr/bin/env bash
#
# test/major/run.sh -- moving jobq to a new PostgreSQL major version
#
# A PostgreSQL 15 cluster with jobq preloaded gets jobs in every state, then
# moves to a fresh cluster of the target version ($PG_MAJOR: 17 or 18) twice:
#
#   (a) dump and restore, the old server running: the target's pg_dumpall
#       --globals-only and pg_dump (the newer pg_dump against the old
#       server, as PostgreSQL recommends; the state the checks compare with
#       is read in the very snapshot pg_dump dumps, pg_dump --snapshot),
#       then pg_restore into a fresh target cluster with jobq preloaded:
#       "app" with --single-transaction into a database created first (the
#       worker must not serve a half-restored database), "legacy" (jobq
#       0.1.0) without the dump's grants on jobq's objects, then jobq.grant
#       again (docs/operations.md, "Restoring a dump of an older jobq release");
#   (b) pg_upgrade from the stopped 15 cluster to a fresh target cluster,
#       both with the same jobq release installed (built from this tree
#       for each version) and jobq in shared_preload_libraries, also in
#       the servers pg_upgrade starts: jobq registers no worker in binary-
#       upgrade mode (it once did, and the worker wrote to the old cluster
#       after pg_upgrade read its control file: the upgraded tables held
#       multixacts and xids the new cluster had not reached, "MultiXactId N
#       has not been created yet"); a check compares the old cluster's next
#       xid and multixact before and after pg_upgrade.
#       MAJOR_UPGRADE_UNLOADED=1 empties shared_preload_libraries for
#       pg_upgrade's own starts instead.  The target is initdb'ed like the
#       old cluster (-E UTF8 --locale=C; from 18 on --no-data-checksums: 18
#       turns checksums on by default and pg_upgrade refuses a mismatch).
#
# The state moved, in database "app": a pending ready job, a pending delayed
# one, two running jobs (known lease tokens; one was released and claimed
# again, so its first token is stale), a completed, a failed (dead letter)
# and a cancelled job, two blocked workflow dependents (depends_on), the
# idempotency key of a completed job pruned by jobq.purge (still reserved),
# a grant, a cron schedule firing every 5 s in Asia/Kolkata (misfire
# run_all) and a nightly one in Europe/Paris, a table of the application's
# own holding job ids, and a running job whose lease (20 s; 5 s before
# pg_upgrade, so that it expires while the server is down) runs out during
# the move; database "legacy" is still at jobq 0.1.0.
#
# After each move, in the new cluster: jobq's worker serves it (jobq.workers,
# jobq.service) and reaps the lease that ran out during the move and one
# that runs out after it; jobs (with their lease tokens), keys, attempts,
# dependencies, schedules, grants and the application's rows are what they
# were, and so are jobq.jobs' counts per status; the old lease tokens still
# complete their jobs exactly once while wrong, stale and reaped tokens are
# refused; idempotency keys from before (the pruned job's too) still
# de-duplicate (created = false, same job id) and new jobs get fresh ids;
# blocked dependents unblock when their parent completes; the schedule
# fired each fire time once: the fires from before are kept and not fired
# again, the fire time due during the move fired exactly once, no fire time
# twice, none skipped, each under its derived idempotency key; "legacy" is
# brought to the current release with ALTER EXTENSION jobq UPDATE (after
# pg_upgrade's update_extensions.sql, where it writes one), its worker role
# may execute the functions the update re-created, and it works.
# Anything asynchronous is polled with a generous deadline (MAJOR_DEADLINE,
# 180 s), for a loaded 2-core machine.  Timings go to "# " lines.
#
# Where it runs.  It needs PostgreSQL 15 and the target version, each with
# its server headers, make and gcc.  jobq is built for each version into a
# private copy of that version's installation in the scratch directory
# (make install DESTDIR=..., as scripts/lib.sh's private_pg_tree does); the
# system's PostgreSQL directories are never written.  Missing packages are
# installed only as root inside a throwaway root: one made by scripts/root.sh
# (it has /.jobq-root), or any machine JOBQ_THROWAWAY_ROOT=1 declares one.
# There, when the release does not ship PostgreSQL 15 (trixie, sid),
# bookworm's apt sources are added (bookworm, bookworm-updates,
# bookworm-security) with pin priority 100, so that only what the release
# lacks (postgresql-15, its headers and their libraries) comes from
# bookworm; no service starts meanwhile (a policy-rc.d while apt runs).
# Elsewhere a missing package is a failure that says so, and nothing is
# installed.  On Debian 12 (PostgreSQL 15 only) the default target is 15:
# the whole procedure runs 15 -> 15 as a rehearsal, and one check is
# reported skipped (the move to 17 or 18 needs a trixie or sid root:
# scripts/test --pg 17|18).
#
# Minor releases.  PostgreSQL 15.20 and 17.12 store an attribute version
# ("pg_attver") in every column's options; 18.6 (sid's) does not know it,
# and its pg_dump/pg_restore carry it over as a column option its server
# refuses, so nothing with tables of its own moves from 15.20 to 18.6.  In a
# throwaway root the newest postgresql-15 without it (bookworm's point
# release, 15.18) is then installed instead; elsewhere that is a failure.
#
# As root, servers run as the postgres user (initdb refuses root), with
# -E UTF8 --locale=C, on Unix sockets in the scratch directory only; every
# server is stopped on any exit.
#
# Environment:
#   PG_MAJOR=17|18     the target version (default: the one this Debian
#                      release ships, as scripts/lib.sh picks it)
#   MAJOR_FROM=15      the version moved from
#   MAJOR_DEADLINE=180 seconds allowed for anything asynchronous
#   MAJOR_UPGRADE_UNLOADED=1  jobq not preloaded during pg_upgrade's own starts
#   JOBQ_THROWAWAY_ROOT=1  this machine may get packages installed
#   KEEP=1             keep the scratch directory (kept on failure anyway)
#
# Prints "ok N - ..." / "not ok N - ..." per check and ends with
# "N passed, N failed" (", N skipped"); exits non-zero on any failure.

set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TO=${PG_MAJOR:-}
FROM=${MAJOR_FROM:-15}
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"
[ -n "$TO" ] || TO=$PG_MAJOR

n=0 passed=0 failed=0 skipped=0
ok() {
	n=$((n + 1)) passed=$((passed + 1))
	echo "ok $n - $1"
}
# nok NAME [DIAGNOSTIC...]
nok() {
	n=$((n + 1)) failed=$((failed + 1))
	echo "not ok $n - $1"
	shift
	local l
	for l in "$@"; do printf '%s\n' "$l" | sed 's/^/#   /'; done
}
skip() {
	n=$((n + 1)) skipped=$((skipped + 1))
	echo "ok $n # skip $1"
}
note() { echo "# $*"; }
# is NAME GOT WANT
is() {
	if [ "$2" == "$3" ]; then ok "$1"; else nok "$1" "got:" "$2" "want:" "$3"; fi
}
finish() {
	if [ "$skipped" -gt 0 ]; then
		echo "$passed passed, $failed failed, $skipped skipped"
	else
		echo "$passed passed, $failed failed"
	fi
	[ "$failed" -eq 0 ]
	exit
}
# bail REASON: a step everything after depends on failed
bail() {
	nok "$1"
	shift
	local f
	for f in "$@"; do
		[ -s "$f" ] && { echo "# --- last lines of $f"; tail -n 40 "$f" | sed 's/^/#   /'; }
	done
	finish
}

# --- where we are, what we need ------------------------------------------

if [ "$TO" -lt "$FROM" ] 2>/dev/null; then
	bail "target PostgreSQL $TO is older than $FROM: nothing to move to"
fi
case "$FROM $TO" in
	*[!0-9\ ]*) bail "MAJOR_FROM=$FROM and PG_MAJOR=$TO must be major version numbers" ;;
esac

# A throwaway root: made by scripts/root.sh, or declared so.
throwaway() { [ -f /.jobq-root ] || [ "${JOBQ_THROWAWAY_ROOT:-0}" = 1 ]; }

# apt_install LOG PACKAGE...: apt-get install, no service started meanwhile
# (a policy-rc.d of our own while it runs, when there is none)
apt_install() {
	local log=$1 made=0 rc=0
	shift
	if ! [ -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\n# test/major/run.sh: no service starts while it installs packages\nexit 101\n' \
			>/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" </dev/null >>"$log" 2>&1 || rc=$?
	[ "$made" = 1 ] && rm -f /usr/sbin/policy-rc.d
	return "$rc"
}

need=()
for p in "postgresql-$FROM" "postgresql-server-dev-$FROM" "postgresql-$TO" "postgresql-server-dev-$TO" make gcc; do
	case " ${need[*]} " in *" $p "*) continue ;; esac
	pkg_installed "$p" || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
	if ! throwaway || ! is_root; then
		bail "packages missing here: ${need[*]}; this suite installs packages only as root inside a throwaway root (/.jobq-root, made by scripts/root.sh, or JOBQ_THROWAWAY_ROOT=1): run it with scripts/test --pg $TO, or install them yourself"
	fi
	here=$(host_release || true)
	# the release that ships FROM, when it is not this one: its apt sources,
	# pinned low (100: used only for what this release does not have)
	from_rel=$(release_of_pg "$FROM" || true)
	if [ -n "$from_rel" ] && [ "$(pg_of_release "$here" || true)" != "$FROM" ] &&
		! [ -f "/etc/apt/sources.list.d/jobq-major-$from_rel.list" ]; then
		note "adding $from_rel's apt sources (pin priority 100) for postgresql-$FROM"
		{
			echo "deb http://deb.debian.org/debian $from_rel main"
			echo "deb http://deb.debian.org/debian $from_rel-updates main"
			echo "deb http://deb.debian.org/debian-security $from_rel-security main"
		} >"/etc/apt/sources.list.d/jobq-major-$from_rel.list"
		mkdir -p /etc/apt/preferences.d
		for s in "$from_rel" "$from_rel-updates" "$from_rel-security"; do
			printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n\n' "$s"
		done >"/etc/apt/preferences.d/jobq-major-$from_rel"
	fi
	note "installing ${need[*]}"
	apt_log=$(mktemp /tmp/jobq-major-apt.XXXXXX)
	apt_ok=0
	DEBIAN_FRONTEND=noninteractive apt-get update -q >"$apt_log" 2>&1 &&
		apt_install "$apt_log" "${need[@]}" && apt_ok=1
	if [ "$apt_ok" = 1 ]; then
		note "installed: $(for p in "${need[@]}"; do dpkg-query -W -f='${Package} ${Version}  ' "$p"; done)"
		rm -f "$apt_log"
	else
		bail "apt-get install ${need[*]} failed" "$apt_log"
	fi
fi

# Minor-release skew.  PostgreSQL's back-branch releases of November 2026
# (15.20, 17.12) store an attribute version in every column's attoptions
# ("pg_attver"); a pg_dump that predates them (18.6, in sid here) copies it
# into the dump as an ordinary column option, which the new server refuses
# ('unrecognized parameter "pg_attver"'): pg_upgrade fails restoring the
# first table, and so does a restore of a dump with tables of one's own.
# The target must be a minor release that knows it.  In a throwaway root
# where it does not, the newest postgresql-$FROM that does not store it is
# installed instead (bookworm's point release; the security update has it).
knows_attver() { grep -q pg_attver "/usr/lib/postgresql/$1/bin/$2"; }
if knows_attver "$FROM" postgres && ! knows_attver "$TO" pg_dump; then
	installed=$(dpkg-query -W -f='${Version}' "postgresql-$FROM" 2>/dev/null)
	note "PostgreSQL $FROM ($installed) stores attribute versions (pg_attver) that PostgreSQL $TO ($(dpkg-query -W -f='${Version}' "postgresql-$TO" 2>/dev/null))'s pg_dump does not know"
	if ! throwaway || ! is_root; then
		bail "PostgreSQL $TO is a minor release too old for PostgreSQL $FROM $installed (pg_upgrade and pg_restore fail on 'unrecognized parameter \"pg_attver\"'): install a newer PostgreSQL $TO minor release, or an older $FROM one"
	fi
	dl=$(mktemp -d /tmp/jobq-major-apt.XXXXXX)
	pick=
	for v in $(apt-cache madison "postgresql-$FROM" | awk -F'|' '{ gsub(/ /, "", $2); print $2 }'); do
		[ "$v" = "$installed" ] && continue
		(cd "$dl" && apt-get download -q "postgresql-$FROM=$v" >/dev/null 2>&1) || continue
		if ! dpkg-deb --fsys-tarfile "$dl"/postgresql-"$FROM"_*.deb |
			tar -xOf - "./usr/lib/postgresql/$FROM/bin/postgres" | grep -q pg_attver; then
			pick=$v
			break
		fi
		rm -f "$dl"/*.deb
	done
	rm -rf --one-file-system "$dl"
	[ -n "$pick" ] || bail "no version of postgresql-$FROM without attribute versions to be had here"
	note "installing postgresql-$FROM $pick instead"
	apt_log=$(mktemp /tmp/jobq-major-apt.XXXXXX)
	apt_install "$apt_log" --allow-downgrades \
		"postgresql-$FROM=$pick" "postgresql-client-$FROM=$pick" "postgresql-server-dev-$FROM=$pick" ||
		bail "apt-get install postgresql-$FROM=$pick failed" "$apt_log"
	rm -f "$apt_log"
fi
SAME=0
[ "$FROM" = "$TO" ] && SAME=1

# --- scratch directory, servers ------------------------------------------

W=$(mktemp -d "${TMPDIR:-/tmp}/jobq-major.XXXXXX")
chmod 755 "$W"
SOCK=$W/sock
LOGS=$W/logs
mkdir -p "$SOCK" "$LOGS" "$W/dump" "$W/upgrade"
is_root && chown -R postgres: "$W"
set_pg_as "$W"
cd "$W" || exit 1

declare -A PORT=() VER=()
SERVERS=()
base=$((30000 + ($$ % 3000) * 10))
PORT[old]=$((base + 1))
PORT[restored]=$((base + 2))
PORT[upgraded]=$((base + 3))
bindir() { echo "$W/pg$1/usr/lib/postgresql/$1/bin"; }

# shellcheck disable=SC2317  # (run by the EXIT trap)
cleanup() {
	local s
	for s in "${SERVERS[@]}"; do
		[ -f "$W/$s/postmaster.pid" ] &&
			pg_as "$(bindir "${VER[$s]}")/pg_ctl" -D "$W/$s" -m immediate -w -t 60 stop >/dev/null 2>&1
	done
	if [ "${KEEP:-0}" = 1 ] || [ "$failed" -gt 0 ]; then
		echo "# scratch directory kept: $W (logs in $W/logs)"
	else
		cd / && rm -rf --one-file-system "$W"
	fi
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# new_cluster NAME VERSION [INITDB-OPTION...]: initdb $W/NAME, jobq preloaded
new_cluster() {
	local name=$1 v=$2 d=$W/$1
	shift 2
	VER[$name]=$v
	SERVERS+=("$name")
	pg_as "$(bindir "$v")/initdb" -D "$d" -U postgres -A trust --no-sync -E UTF8 --locale=C "$@" \
		>"$LOGS/$name.initdb.log" 2>&1 || return 1
	cat <<-EOF | pg_as tee -a "$d/postgresql.conf" >/dev/null
		# test/major/run.sh
		listen_addresses = ''
		unix_socket_directories = '$SOCK'
		port = ${PORT[$name]}
		fsync = off
		shared_preload_libraries = 'jobq'
		jobq.naptime = 200ms
		jobq.misfire_max_fires = 1000
		log_line_prefix = '%m [%p] %q%a '
		lc_messages = 'C'
	EOF
}
# start NAME, stop NAME: the server of cluster $W/NAME
start() {
	pg_as "$(bindir "${VER[$1]}")/pg_ctl" -D "$W/$1" -l "$LOGS/$1.log" -w -t 300 start >>"$LOGS/$1.pg_ctl.log" 2>&1
}
stop() {
	pg_as "$(bindir "${VER[$1]}")/pg_ctl" -D "$W/$1" -m fast -w -t 300 stop >>"$LOGS/$1.pg_ctl.log" 2>&1
}

# q SERVER DB SQL: the rows of SQL (unaligned, no header), errors too
q() {
	PGTZ=UTC PGOPTIONS='-c client_min_messages=warning' \
		"$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h "$SOCK" -p "${PORT[$1]}" -U postgres -d "$2" -c "$3" 2>&1
}
# qs SERVER DB < SCRIPT: run a psql script, output to the log
qs() {
	PGTZ=UTC "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h "$SOCK" -p "${PORT[$1]}" -U postgres -d "$2" \
		>>"$LOGS/psql.log" 2>&1
}
# poll SERVER DB SECONDS SQL: true once SQL returns t, within SECONDS
poll() {
	local end=$((SECONDS + $3)) r
	while :; do
		r=$(q "$1" "$2" "$4" 2>/dev/null)
		[ "$r" = t ] && return 0
		[ "$SECONDS" -ge "$end" ] && return 1
		sleep 0.5
	done
}
# the generous deadline of anything asynchronous, in seconds
DEADLINE=${MAJOR_DEADLINE:-180}

# --- build jobq for each version -----------------------------------------

# build V: jobq from this tree, installed into a private copy of
# PostgreSQL V's installation at $W/pgV (the system's is not written)
build() {
	local v=$1 src=$W/src$1 tree=$W/pg$1 sys=/usr/lib/postgresql/$1/bin/pg_config
	mkdir -p "$src" "$tree/usr/lib/postgresql" "$tree/usr/share/postgresql" "$tree/usr/include"
	copy_tree "$ROOT" "$src"
	cp -a "/usr/lib/postgresql/$v" "$tree/usr/lib/postgresql/"
	cp -a "/usr/share/postgresql/$v" "$tree/usr/share/postgresql/"
	ln -sfn /usr/include/postgresql "$tree/usr/include/postgresql"
	(cd "$src" && make -j"$(nproc)" PG_CONFIG="$sys" && make install DESTDIR="$tree" PG_CONFIG="$sys") \
		>"$LOGS/build-$v.log" 2>&1 || return 1
	cmp -s "$src/jobq.so" "$("$tree/usr/lib/postgresql/$v/bin/pg_config" --pkglibdir)/jobq.so"
}
note "PostgreSQL $FROM -> $TO; scratch directory $W"
for v in $(printf '%s\n' "$FROM" "$TO" | sort -u); do
	t0=$SECONDS
	if build "$v"; then
		ok "jobq built for PostgreSQL $v and installed into a private tree ($((SECONDS - t0)) s)"
	else
		bail "jobq builds for PostgreSQL $v" "$LOGS/build-$v.log"
	fi
done
OLDBIN=$(bindir "$FROM")
NEWBIN=$(bindir "$TO")
PSQL=$NEWBIN/psql
EXTVERSION=$(sed -n "s/^default_version = '\(.*\)'/\1/p" "$ROOT/jobq.control")

# --- PostgreSQL 15 with jobs in every state -----------------------------

if ! { new_cluster old "$FROM" && start old; }; then
	bail "a PostgreSQL $FROM server starts with jobq preloaded" "$LOGS/old.initdb.log" "$LOGS/old.log"
fi
ok "a PostgreSQL $FROM server starts with jobq preloaded"

qs old postgres <<-'SQL'
	CREATE ROLE app_worker LOGIN;
	CREATE DATABASE app;
	CREATE DATABASE legacy;
SQL
qs old app <<-'SQL'
	CREATE EXTENSION jobq;
	SELECT jobq.grant('default', 'app_worker', 'work');
	CREATE TABLE public.orders (order_id integer PRIMARY KEY, job_id bigint NOT NULL);
SQL
# one value or row of app on the old server
qa() { q old app "$1"; }
READY=$(qa "SELECT job_id FROM jobq.enqueue('k.ready', '{\"n\": 1}', idempotency_key => 'key-ready')")
DELAYED=$(qa "SELECT job_id FROM jobq.enqueue('k.delayed', '{\"n\": 2}', run_at => now() + interval '2 days',
                                             idempotency_key => 'key-delayed')")
RUNNING=$(qa "SELECT job_id FROM jobq.enqueue('k.running', '{\"n\": 3}', idempotency_key => 'key-running')")
IFS='|' read -r _ TOKEN_RUNNING <<<"$(qa "SELECT job_id, lease_token FROM jobq.claim(worker_id => 'w-old',
                                          lease => '3 hours', kinds => ARRAY['k.running'])")"
TWICE=$(qa "SELECT job_id FROM jobq.enqueue('k.twice', '{\"n\": 4}')")
IFS='|' read -r _ TOKEN_STALE <<<"$(qa "SELECT job_id, lease_token FROM jobq.claim(worker_id => 'w-old',
                                        lease => '3 hours', kinds => ARRAY['k.twice'])")"
RELEASED=$(qa "SELECT jobq.release($TWICE, $TOKEN_STALE)")
IFS='|' read -r _ TOKEN_TWICE <<<"$(qa "SELECT job_id, lease_token FROM jobq.claim(worker_id => 'w-old',
                                        lease => '3 hours', kinds => ARRAY['k.twice'])")"
DONE=$(qa "SELECT job_id FROM jobq.enqueue('k.done', '{\"n\": 5}', idempotency_key => 'key-done')")
DONE_OK=$(qa "SELECT jobq.complete(job_id, lease_token, '{\"ok\": true}') FROM jobq.claim(kinds => ARRAY['k.done'])")
DEAD=$(qa "SELECT job_id FROM jobq.enqueue('k.dead', '{\"n\": 6}', max_retries => 0, idempotency_key => 'key-dead')")
DEAD_OK=$(qa "SELECT jobq.fail(job_id, lease_token, 'boom') FROM jobq.claim(kinds => ARRAY['k.dead'])")
CANCELLED=$(qa "SELECT job_id FROM jobq.enqueue('k.cancelled', '{\"n\": 7}')")
CANCEL_OK=$(qa "SELECT jobq.cancel($CANCELLED)")
CHILD=$(qa "SELECT job_id FROM jobq.enqueue('k.child', '{\"n\": 8}', depends_on => ARRAY[$RUNNING]::bigint[])")
CHILD2=$(qa "SELECT job_id FROM jobq.enqueue('k.child2', '{\"n\": 9}', depends_on => ARRAY[$DELAYED]::bigint[],
                                            on_parent_failure => 'run')")
ORDERS_OK=$(qa "INSERT INTO public.orders VALUES (1, $READY), (2, $RUNNING), (3, $DONE) RETURNING true" | tr '\n' ' ')
PRUNED=$(qa "SELECT job_id FROM jobq.enqueue('k.pruned', '{\"n\": 10}', 'prunable', idempotency_key => 'key-pruned')")
PRUNE_OK=$(qa "SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('prunable');
               SELECT jobq.purge('prunable', 'completed')")
SCHED_OK=$(qa "SELECT jobq.schedule('tick', '*/5 * * * * *', 'k.tick', '{\"from\": \"cron\"}', 'cron',
                                    timezone => 'Asia/Kolkata', misfire => 'run_all') > 0;
               SELECT jobq.schedule('nightly', '30 2 * * *', 'k.nightly', queue => 'cron',
                                    timezone => 'Europe/Paris') > 0")
is "the jobs' and schedules' set-up calls succeed" \
	"$RELEASED $DONE_OK $DEAD_OK $CANCEL_OK ${PRUNE_OK//$'\n'/ } ${SCHED_OK//$'\n'/ } $ORDERS_OK" "t t failed t t 1 t t t t t "

# the counts that must survive (the schedule's fires and the jobs whose
# lease expires during the move are checked on their own)
COUNTS_SQL="SELECT string_agg(status || ':' || n, ',' ORDER BY status)
              FROM (SELECT status, count(*) AS n FROM jobq.jobs
                     WHERE kind <> 'k.tick' AND kind NOT LIKE 'k.expiring%' GROUP BY status) s"
is "PostgreSQL $FROM holds jobs in every state" "$(qa "$COUNTS_SQL")" \
	"blocked:2,cancelled:1,completed:1,failed:1,pending:2,running:2"
is "the pruned job is gone and its key stays reserved" \
	"$(qa "SELECT count(*) FROM jobq.job WHERE job_id = $PRUNED;
	       SELECT job_id, expires_at > now() FROM jobq.idempotency_key WHERE key = 'key-pruned'")" \
	"0
$PRUNED|t"
PRUNED_DEDUP=$(qa "SELECT job_id, created FROM jobq.enqueue('k.pruned', '{}', 'prunable', idempotency_key => 'key-pruned')")
is "on $FROM, the pruned job's key de-duplicates (its job id, created = false)" "$PRUNED_DEDUP" "$PRUNED|f"
if poll old app "$DEADLINE" "SELECT count(*) >= 2 FROM jobq.job WHERE kind = 'k.tick'"; then
	ok "the PostgreSQL $FROM worker fires the schedule"
else
	nok "the PostgreSQL $FROM worker fires the schedule"
fi

qs old legacy <<-'SQL'
	CREATE EXTENSION jobq VERSION '0.1.0';
	SELECT jobq.grant('default', 'app_worker', 'work');
SQL
L_KEYED=$(q old legacy "SELECT job_id FROM jobq.enqueue('l.keyed', '{}', idempotency_key => 'legacy-key')")
L_RUNNING=$(q old legacy "SELECT job_id FROM jobq.enqueue('l.running', '{}')")
L_TOKEN=$(q old legacy "SELECT lease_token FROM jobq.claim(lease => '3 hours', kinds => ARRAY['l.running'])")
is "database legacy is at jobq 0.1.0 with a running job" \
	"$(q old legacy "SELECT extversion FROM pg_extension WHERE extname = 'jobq';
	                 SELECT status FROM jobq.jobs WHERE job_id = $L_RUNNING")" "0.1.0
running"

# What must survive a move, as text (read with jobq's tables, as superuser):
# every job but the schedule's fires and the expiring ones, with its lease
# token; keys; attempts; dependencies; schedules; grants.
KEPT_SQL="SELECT concat_ws(E'\n',
  (SELECT string_agg(format('job %s %s %s %s %s %s %s %s %s %s %s %s %s %s', job_id, queue, kind, status,
                            retry_count, max_retries, attempts, idempotency_key, payload, run_at, lease_token,
                            lease_expires_at, last_error, result), E'\n' ORDER BY job_id)
     FROM jobq.job WHERE kind <> 'k.tick' AND kind NOT LIKE 'k.expiring%'),
  (SELECT string_agg(format('key %s %s %s %s', kind, key, job_id, expires_at), E'\n' ORDER BY kind, key)
     FROM jobq.idempotency_key WHERE kind <> 'k.tick' AND kind NOT LIKE 'k.expiring%'),
  (SELECT string_agg(format('attempt %s %s %s %s', a.job_id, a.attempt, a.outcome, a.error), E'\n'
                     ORDER BY a.job_id, a.attempt)
     FROM jobq.attempt a JOIN jobq.job j USING (job_id) WHERE j.kind NOT LIKE 'k.expiring%'),
  (SELECT string_agg(format('dependency %s %s %s', parent_id, child_id, parent_status), E'\n'
                     ORDER BY parent_id, child_id) FROM jobq.dependency),
  (SELECT string_agg(format('schedule %s %s %s %s %s %s %s', schedule_id, name, cron, timezone, misfire,
                            kind, queue), E'\n' ORDER BY name) FROM jobq.schedule),
  (SELECT format('nightly next fire %s', next_fire_at) FROM jobq.schedule WHERE name = 'nightly'),
  (SELECT string_agg(format('grant %s %s %s', queue, role, capability), E'\n' ORDER BY queue, role::text)
     FROM jobq.permission),
  (SELECT format('queue %s', string_agg(name, ' ' ORDER BY name)) FROM jobq.queue),
  (SELECT format('orders %s', string_agg(order_id || ':' || job_id, ' ' ORDER BY order_id)) FROM public.orders))"
TICKS_SQL="SELECT string_agg(format('%s %s %s %s', job_id, run_at, idempotency_key, status), E'\n' ORDER BY run_at)
             FROM jobq.job WHERE kind = 'k.tick'"

# capture SERVER PREFIX [SHELL-COMMAND]: in one REPEATABLE READ transaction
# of app, read what must survive into PREFIX.* and, when given, run
# SHELL-COMMAND (a pg_dump) with the transaction's snapshot exported in
# $JOBQ_SNAPSHOT, so that the dump holds exactly what was read.
capture() {
	local s=$1 p=$2 cmd=${3:-}
	{
		echo 'BEGIN ISOLATION LEVEL REPEATABLE READ;'
		echo "SELECT pg_export_snapshot() AS snap, clock_timestamp() AS cut \\gset"
		echo '\setenv JOBQ_SNAPSHOT :snap'
		echo "\\o $p.cut"
		echo "SELECT :'cut';"
		echo "\\o $p.kept"
		echo "$KEPT_SQL;"
		echo "\\o $p.counts"
		echo "$COUNTS_SQL;"
		echo "\\o $p.ticks"
		echo "$TICKS_SQL;"
		echo "\\o $p.sched"
		echo "SELECT schedule_id, last_fire_at FROM jobq.schedule WHERE name = 'tick';"
		echo "\\o $p.maxid"
		echo "SELECT greatest((SELECT max(job_id) FROM jobq.job), (SELECT max(job_id) FROM jobq.idempotency_key));"
		echo '\o'
		[ -n "$cmd" ] && echo "\\! $cmd"
		echo 'COMMIT;'
	} | qs "$s" app
}

# ---------------------------------------------------------------------------
# after_move LABEL SERVER PREFIX EXPIRING-JOB EXPIRING-TOKEN EXPIRES-AT READY-AT
# The checks of a moved cluster, against what capture wrote to PREFIX.*;
# READY-AT: when the move was done (restored, or upgraded and started).
after_move() {
	local l=$1 s=$2 p=$3 exp_job=$4 exp_token=$5 exp_at=$6 ready=$7 r
	local sid last cut fdue maxid
	IFS='|' read -r sid last <"$p.sched"
	cut=$(cat "$p.cut")
	maxid=$(cat "$p.maxid")
	qn() { q "$s" app "$1"; }

	is "$l: the server is PostgreSQL $TO" "$(qn "SELECT current_setting('server_version_num')::int / 10000")" "$TO"
	is "$l: app has jobq $EXTVERSION" "$(qn "SELECT extversion FROM pg_extension WHERE extname = 'jobq'")" "$EXTVERSION"
	# compared first, before the checks below change anything
	r=$(qn "$KEPT_SQL")
	is "$l: every job (with its lease token), key, attempt, dependency, schedule, grant and the app's own rows are kept" \
		"$r" "$(cat "$p.kept")"
	is "$l: jobq.jobs counts per status are those of before" "$(qn "$COUNTS_SQL")" "$(cat "$p.counts")"
	is "$l: the schedule's fires from before are kept as they were, none fired again" \
		"$(qn "$TICKS_SQL AND run_at <= '$last'")" "$(cat "$p.ticks")"

	# the worker serves the new cluster
	if poll "$s" app "$DEADLINE" "SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'app'"; then
		ok "$l: jobq.workers shows a worker serving app"
		note "$l: app's worker started $(qn "SELECT round(extract(epoch FROM min(started_at) - '$ready'::timestamptz)::numeric, 1)
		                                       FROM jobq.workers WHERE database = 'app'") s after the move was done"
	else
		nok "$l: jobq.workers shows a worker serving app" "$(qn "SELECT * FROM jobq.workers")"
	fi
	if poll "$s" app "$DEADLINE" "SELECT served_by = 'own worker' AND last_served_at IS NOT NULL FROM jobq.service"; then
		ok "$l: jobq.service says app is served by its own worker"
	else
		nok "$l: jobq.service says app is served by its own worker" "$(qn "SELECT * FROM jobq.service")"
	fi

	# lease tokens from before the move
	is "$l: a wrong token is refused (complete false, fail/extend NULL, checkpoint false)" \
		"$(qn "SELECT jobq.complete($RUNNING, $TOKEN_RUNNING + 1), jobq.fail($RUNNING, $TOKEN_RUNNING + 1, 'x') IS NULL,
		              jobq.extend($RUNNING, $TOKEN_RUNNING + 1, '1 hour') IS NULL,
		              jobq.checkpoint($RUNNING, $TOKEN_RUNNING + 1, '{}')")" "f|t|t|f"
	is "$l: the stale token of a job claimed again before the move is refused" \
		"$(qn "SELECT jobq.complete($TWICE, $TOKEN_STALE)")" "f"
	is "$l: the old lease token completes its running job, exactly once" \
		"$(qn "SELECT jobq.complete($RUNNING, $TOKEN_RUNNING, '{\"moved\": true}')")
$(qn "SELECT jobq.complete($RUNNING, $TOKEN_RUNNING)")
$(qn "SELECT status, result FROM jobq.jobs WHERE job_id = $RUNNING")" "t
f
completed|{\"moved\": true}"
	is "$l: the current token of the job claimed twice completes it" \
		"$(qn "SELECT jobq.complete($TWICE, $TOKEN_TWICE)")" "t"
	if poll "$s" app "$DEADLINE" "SELECT status = 'pending' FROM jobq.jobs WHERE job_id = $CHILD"; then
		ok "$l: the blocked dependent of the completed job is unblocked"
	else
		nok "$l: the blocked dependent of the completed job is unblocked" \
			"$(qn "SELECT job_id, status FROM jobq.jobs WHERE job_id IN ($CHILD, $CHILD2)")"
	fi
	is "$l: the dependent of the delayed job stays blocked" \
		"$(qn "SELECT status FROM jobq.jobs WHERE job_id = $CHILD2")" "blocked"

	# idempotency keys from before the move
	is "$l: keys from before de-duplicate: pending, running, completed, dead, pruned (same job, created = false)" \
		"$(qn "SELECT job_id, created FROM jobq.enqueue('k.ready', '{}', idempotency_key => 'key-ready')
		        UNION ALL SELECT job_id, created FROM jobq.enqueue('k.running', '{}', idempotency_key => 'key-running')
		        UNION ALL SELECT job_id, created FROM jobq.enqueue('k.done', '{}', idempotency_key => 'key-done')
		        UNION ALL SELECT job_id, created FROM jobq.enqueue('k.dead', '{}', idempotency_key => 'key-dead')
		        UNION ALL SELECT job_id, created FROM jobq.enqueue('k.pruned', '{}', 'prunable',
		                                                          idempotency_key => 'key-pruned')")" \
		"$READY|f
$RUNNING|f
$DONE|f
$DEAD|f
$PRUNED_DEDUP"
	r=$(qn "SELECT job_id FROM jobq.enqueue('k.new', '{}', idempotency_key => 'key-new')")
	if [ -n "$r" ] && [ "$r" -gt "$maxid" ] 2>/dev/null; then
		ok "$l: a new job gets a fresh id ($r > $maxid)"
	else
		nok "$l: a new job gets a fresh id" "got: $r, highest before: $maxid"
	fi
	is "$l: a new key de-duplicates too" \
		"$(qn "SELECT job_id, created FROM jobq.enqueue('k.new', '{}', idempotency_key => 'key-new')")" "$r|f"
	is "$l: the granted role claims and completes the ready job" \
		"$(qn "SET ROLE app_worker;
		       SELECT job_id, jobq.complete(job_id, lease_token) FROM jobq.claim(kinds => ARRAY['k.ready'])")" \
		"$READY|t"

	# the reaper
	local lj lt
	IFS='|' read -r lj lt <<<"$(qn "SELECT job_id, lease_token FROM jobq.claim(lease => '1 second', kinds => ARRAY['k.new'])")"
	if poll "$s" app "$DEADLINE" \
		"SELECT status = 'pending' AND retry_count = 1 AND last_error = 'lease expired' FROM jobq.jobs WHERE job_id = ${lj:-0}"; then
		ok "$l: the worker reaps a lease that expires after the move"
	else
		nok "$l: the worker reaps a lease that expires after the move" \
			"$(qn "SELECT job_id, status, retry_count, last_error, lease_expires_at, now() FROM jobq.jobs WHERE job_id = ${lj:-0}")"
	fi
	is "$l: the reaped lease's token is refused" "$(qn "SELECT jobq.complete(${lj:-0}, ${lt:-0})")" "f"
	if poll "$s" app "$DEADLINE" \
		"SELECT status = 'pending' AND retry_count = 1 AND last_error = 'lease expired' FROM jobq.jobs WHERE job_id = $exp_job"; then
		ok "$l: the lease that was running at the move and expired is reaped"
		note "$l: it expired at $exp_at, the move was done at $ready, reaped at" \
			"$(qn "SELECT max(finished_at) FROM jobq.attempt WHERE job_id = $exp_job")"
	else
		nok "$l: the lease that was running at the move and expired is reaped" \
			"$(qn "SELECT job_id, status, retry_count, last_error, lease_expires_at, now() FROM jobq.jobs WHERE job_id = $exp_job")"
	fi
	is "$l: its worker's token is fenced" "$(qn "SELECT jobq.complete($exp_job, $exp_token)")" "f"

	# the schedule: every fire time once
	fdue=$(qn "SELECT jobq.cron_next('*/5 * * * * *', '$cut', 'Asia/Kolkata')")
	note "$l: last fire before the move $last; move began $cut; fire time due then $fdue"
	if poll "$s" app "$DEADLINE" \
		"SELECT max(run_at) >= '$fdue'::timestamptz + interval '10 seconds' FROM jobq.job WHERE kind = 'k.tick'"; then
		ok "$l: the schedule fires after the move"
	else
		nok "$l: the schedule fires after the move" "$(qn "SELECT * FROM jobq.schedules")"
	fi
	is "$l: the fire time due during the move fired exactly once" \
		"$(qn "SELECT count(*) FROM jobq.job WHERE kind = 'k.tick' AND run_at = '$fdue'")" "1"
	is "$l: no fire time fired twice" \
		"$(qn "SELECT count(*) FROM (SELECT run_at FROM jobq.job WHERE kind = 'k.tick'
		                              GROUP BY run_at HAVING count(*) > 1) d")" "0"
	is "$l: no fire time was skipped (run_all): each fire is cron_next of the one before" \
		"$(qn "SELECT count(*) FROM (SELECT run_at, lead(run_at) OVER (ORDER BY run_at) AS nxt
		                               FROM jobq.job WHERE kind = 'k.tick') s
		        WHERE nxt IS NOT NULL AND nxt <> jobq.cron_next('*/5 * * * * *', run_at, 'Asia/Kolkata')")" "0"
	is "$l: every fire carries the idempotency key derived from (schedule, fire time)" \
		"$(qn "SELECT count(*) FILTER (WHERE idempotency_key IS DISTINCT FROM
		               format('jobq:schedule:%s:%s', $sid,
		                      ((extract(epoch FROM run_at) - 946684800) * 1000000)::bigint)), count(*) > 0
		         FROM jobq.job WHERE kind = 'k.tick'")" "0|t"
	is "$l: the schedule's last and next fire agree with its jobs" \
		"$(qn "SELECT s.last_fire_at = (SELECT max(run_at) FROM jobq.job WHERE kind = 'k.tick')
		              AND s.next_fire_at = jobq.cron_next(s.cron, s.last_fire_at, s.timezone)
		         FROM jobq.schedule s WHERE name = 'tick'")" "t"
	is "$l: the nightly schedule's next fire is 02:30 in Paris" \
		"$(qn "SELECT next_fire_at = jobq.cron_next('30 2 * * *', now(), 'Europe/Paris'),
		              to_char(next_fire_at AT TIME ZONE 'Europe/Paris', 'HH24:MI')
		         FROM jobq.schedule WHERE name = 'nightly'")" "t|02:30"
	note "$l: fires of the schedule: $(qn "SELECT count(*) FROM jobq.job WHERE kind = 'k.tick'") in all," \
		"$(qn "SELECT count(*) FROM jobq.job WHERE kind = 'k.tick' AND run_at > '$last'") after the move"
}

# after_move_legacy LABEL SERVER [UPDATE-SCRIPT]: database legacy (0.1.0)
after_move_legacy() {
	local l=$1 s=$2 upd=${3:-} v
	ql() { q "$s" legacy "$1"; }
	v=$(ql "SELECT extversion FROM pg_extension WHERE extname = 'jobq'")
	note "$l: legacy arrived at jobq $v"
	if [ -n "$upd" ]; then
		if PGTZ=UTC "$PSQL" -X -q -v ON_ERROR_STOP=1 -h "$SOCK" -p "${PORT[$s]}" -U postgres -d postgres \
			-f "$upd" >>"$LOGS/psql.log" 2>&1; then
			ok "$l: pg_upgrade's update_extensions.sql runs"
		else
			nok "$l: pg_upgrade's update_extensions.sql runs" "$(tail -n 5 "$LOGS/psql.log")"
		fi
	fi
	is "$l: ALTER EXTENSION jobq UPDATE brings legacy to $EXTVERSION" \
		"$(ql "ALTER EXTENSION jobq UPDATE; SELECT extversion FROM pg_extension WHERE extname = 'jobq'")" \
		"$EXTVERSION"
	is "$l: legacy: app_worker (granted work at 0.1.0) may execute the new jobq.fail" \
		"$(ql "SELECT has_function_privilege('app_worker',
		         'jobq.fail(bigint, bigint, text, boolean, interval, text)', 'EXECUTE')")" "t"
	is "$l: legacy: the old key de-duplicates and the old token completes its job" \
		"$(ql "SELECT job_id, created FROM jobq.enqueue('l.keyed', '{}', idempotency_key => 'legacy-key')")
$(ql "SELECT jobq.complete($L_RUNNING, $L_TOKEN)")" "$L_KEYED|f
t"
	if poll "$s" legacy "$DEADLINE" "SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'legacy'"; then
		ok "$l: a worker serves legacy"
	else
		nok "$l: a worker serves legacy" "$(ql "SELECT * FROM jobq.workers")"
	fi
}

# show_logs SERVER...: the alarming lines of server logs, as diagnostics
show_logs() {
	local s
	for s in "$@"; do
		[ -s "$LOGS/$s.log" ] || continue
		grep -E 'PANIC|FATAL|ERROR|WARNING|terminated by signal' "$LOGS/$s.log" | head -n 40 | sed "s/^/# $s: /"
	done
}

# ===========================================================================
# (a) pg_dump with the new version's tools, pg_restore into a new cluster
# ===========================================================================

if ! { new_cluster restored "$TO" && start restored; }; then
	bail "a fresh PostgreSQL $TO server starts with jobq preloaded" "$LOGS/restored.initdb.log" "$LOGS/restored.log"
fi
ok "a fresh PostgreSQL $TO server starts with jobq preloaded"

# a running job whose lease (20 s) expires during or after the move
IFS='|' read -r EXP_A EXP_A_TOKEN EXP_A_EXPIRES <<<"$(qa "SELECT job_id FROM jobq.enqueue('k.expiring.a', '{}');
                                            SELECT job_id, lease_token, lease_expires_at FROM jobq.claim(lease => '20 seconds',
                                                   kinds => ARRAY['k.expiring.a'])" | tail -n 1)"
t0=$SECONDS
if "$NEWBIN/pg_dumpall" -h "$SOCK" -p "${PORT[old]}" -U postgres --globals-only -f "$W/dump/globals.sql" \
	2>"$LOGS/pg_dumpall.log"; then
	ok "pg_dumpall --globals-only ($TO) of the $FROM server"
else
	nok "pg_dumpall --globals-only ($TO) of the $FROM server" "$(cat "$LOGS/pg_dumpall.log")"
fi
capture old "$W/dump/before" \
	"\"$NEWBIN/pg_dump\" -h \"$SOCK\" -p ${PORT[old]} -U postgres --snapshot=\"\$JOBQ_SNAPSHOT\" -Fc -f \"$W/dump/app.dump\" app 2>\"$LOGS/pg_dump-app.log\""
if [ -s "$W/dump/app.dump" ] && ! [ -s "$LOGS/pg_dump-app.log" ]; then
	ok "pg_dump ($TO) of app on the running $FROM server, in the snapshot the state was read in"
else
	nok "pg_dump ($TO) of app on the running $FROM server" "$(cat "$LOGS/pg_dump-app.log")"
fi
if "$NEWBIN/pg_dump" -h "$SOCK" -p "${PORT[old]}" -U postgres -Fc -f "$W/dump/legacy.dump" legacy \
	2>"$LOGS/pg_dump-legacy.log"; then
	ok "pg_dump ($TO) of legacy"
else
	nok "pg_dump ($TO) of legacy" "$(cat "$LOGS/pg_dump-legacy.log")"
fi
dump_s=$((SECONDS - t0))

t0=$SECONDS
# roles first (the postgres role exists already: that one error is expected)
PGTZ=UTC "$PSQL" -X -q -h "$SOCK" -p "${PORT[restored]}" -U postgres -d postgres -f "$W/dump/globals.sql" \
	>"$LOGS/restore-globals.log" 2>&1
is "the roles are restored" \
	"$(q restored postgres "SELECT rolname FROM pg_roles WHERE rolname = 'app_worker'")" "app_worker"
# app: into a database created first, in one transaction: jobq's worker
# starts serving a database when CREATE EXTENSION jobq commits, and a
# restore in many transactions would let it fire schedules and reap leases
# while the rows are still coming (between the COPY of jobq.schedule and the
# setval of jobq.job_id_seq a fire would take an id from the fresh sequence)
q restored postgres "CREATE DATABASE app TEMPLATE template0" >>"$LOGS/psql.log"
restore_cmd=("$NEWBIN/pg_restore" -h "$SOCK" -p "${PORT[restored]}" -U postgres --single-transaction
	--exit-on-error -d app "$W/dump/app.dump")
if "${restore_cmd[@]}" >"$LOGS/pg_restore-app.log" 2>&1 && ! [ -s "$LOGS/pg_restore-app.log" ]; then
	ok "pg_restore --single-transaction ($TO) of app into the $TO cluster, without a word"
else
	nok "pg_restore --single-transaction ($TO) of app into the $TO cluster, without a word" "$(head -n 20 "$LOGS/pg_restore-app.log")"
fi
restore_s=$((SECONDS - t0))
READY_A=$(date -u '+%Y-%m-%d %H:%M:%S.%N+00')
# legacy: a dump names no extension version: its CREATE EXTENSION IF NOT
# EXISTS makes the newest release installed, where the dump's GRANT on
# 0.1.0's five-argument jobq.fail names a function 0.3.0 re-created.  So
# the way docs/operations.md says: the dump's grants on jobq's objects left out (pg_restore
# -L with a list without them), and jobq.grant run for every row of
# jobq.permission afterwards.  No schedule, no lease due: nothing for the
# worker to do while the rows come.
q restored postgres "CREATE DATABASE legacy TEMPLATE template0" >>"$LOGS/psql.log"
"$NEWBIN/pg_restore" -l "$W/dump/legacy.dump" | grep -v '^[0-9]*; 0 0 ACL jobq ' >"$W/dump/legacy.list"
if "$NEWBIN/pg_restore" -h "$SOCK" -p "${PORT[restored]}" -U postgres --single-transaction --exit-on-error \
	-L "$W/dump/legacy.list" -d legacy "$W/dump/legacy.dump" >"$LOGS/pg_restore-legacy.log" 2>&1 &&
	! [ -s "$LOGS/pg_restore-legacy.log" ]; then
	ok "pg_restore of legacy (jobq 0.1.0 dumped) without the grants on jobq's objects, without a word"
else
	nok "pg_restore of legacy (jobq 0.1.0 dumped) without the grants on jobq's objects, without a word" \
		"$(head -n 20 "$LOGS/pg_restore-legacy.log")"
fi
is "legacy: jobq.grant gives every role of jobq.permission its grants again" \
	"$(q restored legacy "SELECT count(jobq.grant(queue, role, capability)) FROM jobq.permission")" "1"
note "dump/restore: dumps took ${dump_s} s, the restore of app ${restore_s} s"

after_move "dump/restore" restored "$W/dump/before" "$EXP_A" "$EXP_A_TOKEN" "$EXP_A_EXPIRES" "$READY_A"
after_move_legacy "dump/restore" restored
[ "$failed" -gt 0 ] && show_logs restored
stop restored

# ===========================================================================
# (b) pg_upgrade from the stopped 15 cluster
# ===========================================================================

# another lease, of 5 s: it expires while the server is down for pg_upgrade
IFS='|' read -r EXP_B EXP_B_TOKEN EXP_B_EXPIRES <<<"$(qa "SELECT job_id FROM jobq.enqueue('k.expiring.b', '{}');
                                            SELECT job_id, lease_token, lease_expires_at FROM jobq.claim(lease => '5 seconds',
                                                   kinds => ARRAY['k.expiring.b'])" | tail -n 1)"
capture old "$W/upgrade/before"
t_down=$SECONDS
if stop old; then
	ok "the $FROM server stops"
else
	nok "the $FROM server stops" "$(tail -n 5 "$LOGS/old.pg_ctl.log")"
fi

# the old cluster's next transaction and multixact ids, from its control
# file: pg_upgrade gives the new cluster these (read before it starts the
# old server), so its own starts of the old server must not move them
counters() {
	pg_as env LC_ALL=C "$OLDBIN/pg_controldata" "$W/old" |
		sed -n -e 's/^Latest checkpoint.s NextXID: *//p' -e 's/^Latest checkpoint.s NextMultiXactId: *//p' | tr '\n' ' '
}
counters_down=$(counters)

# the target cluster: same encoding and locale; 18 turns data checksums on
# by default, which pg_upgrade refuses from a cluster without them
opts=()
[ "$TO" -ge 18 ] && opts+=(--no-data-checksums)
new_cluster upgraded "$TO" "${opts[@]}" ||
	bail "initdb of the PostgreSQL $TO cluster for pg_upgrade" "$LOGS/upgraded.initdb.log"

upgrade() {
	(cd "$W/upgrade" && pg_as "$NEWBIN/pg_upgrade" -b "$OLDBIN" -B "$NEWBIN" -d "$W/old" -D "$W/upgraded" \
		-p "${PORT[old]}" -P "${PORT[upgraded]}" -s "$SOCK" -U postgres "${upgrade_opts[@]}" "$@")
}
# pg_upgrade runs with jobq preloaded in both clusters, as users run it:
# jobq registers no worker in a server started in binary-upgrade mode (a
# worker there wrote to the old cluster after pg_upgrade read its control
# data, and the upgraded tables held multixacts and xids "from the future":
# "MultiXactId N has not been created yet").  The old cluster's next xid
# and multixact are checked unchanged below.  MAJOR_UPGRADE_UNLOADED=1
# empties shared_preload_libraries for pg_upgrade's own starts instead.
if [ "${MAJOR_UPGRADE_UNLOADED:-0}" = 1 ]; then
	note "pg_upgrade with shared_preload_libraries emptied for its own starts (MAJOR_UPGRADE_UNLOADED=1)"
	upgrade_opts=(-o "-c shared_preload_libraries=" -O "-c shared_preload_libraries=")
else
	upgrade_opts=()
fi
# Without jobq built for the target, pg_upgrade --check says so: a copy of
# the target's installation without jobq's files, for the new binaries
nojobq=$W/pg$TO-nojobq
mkdir -p "$nojobq/usr/lib/postgresql" "$nojobq/usr/share/postgresql"
cp -a "/usr/lib/postgresql/$TO" "$nojobq/usr/lib/postgresql/"
cp -a "/usr/share/postgresql/$TO" "$nojobq/usr/share/postgresql/"
rm -f "$nojobq/usr/lib/postgresql/$TO/lib/jobq.so" "$nojobq/usr/share/postgresql/$TO/extension"/jobq[.-]*
(cd "$W/upgrade" && pg_as "$nojobq/usr/lib/postgresql/$TO/bin/pg_upgrade" -b "$OLDBIN" \
	-B "$nojobq/usr/lib/postgresql/$TO/bin" -d "$W/old" -D "$W/upgraded" -p "${PORT[old]}" -P "${PORT[upgraded]}" \
	-s "$SOCK" -U postgres -o "-c shared_preload_libraries=" -O "-c shared_preload_libraries=" --check) \
	>"$LOGS/pg_upgrade-check-nojobq.log" 2>&1
r=$?
if [ "$r" != 0 ] && grep -q "loadable libraries" "$LOGS/pg_upgrade-check-nojobq.log"; then
	ok "pg_upgrade --check refuses a $TO installation without jobq (missing loadable libraries)"
else
	nok "pg_upgrade --check refuses a $TO installation without jobq (missing loadable libraries)" \
		"exit $r" "$(tail -n 15 "$LOGS/pg_upgrade-check-nojobq.log")"
fi
rm -rf --one-file-system "$nojobq" "$W/upgraded/pg_upgrade_output.d"

if upgrade --check >"$LOGS/pg_upgrade-check.log" 2>&1; then
	ok "pg_upgrade --check: the clusters are compatible (jobq's library found in the $TO tree)"
else
	nok "pg_upgrade --check: the clusters are compatible" "$(tail -n 20 "$LOGS/pg_upgrade-check.log")"
fi
t0=$SECONDS
if upgrade >"$LOGS/pg_upgrade.log" 2>&1; then
	ok "pg_upgrade $FROM -> $TO ($((SECONDS - t0)) s)"
else
	nok "pg_upgrade $FROM -> $TO" "$(tail -n 30 "$LOGS/pg_upgrade.log")"
	for f in "$W"/upgraded/pg_upgrade_output.d/*/log/*.log; do
		[ -f "$f" ] && grep -h -B2 -A5 -E 'ERROR|FATAL' "$f" | head -n 30 | sed 's/^/#   /'
	done
	finish
fi
is "pg_upgrade's own starts of the $FROM server wrote nothing there (next xid and multixact as at the stop)" \
	"$(counters)" "$counters_down"
start upgraded || bail "the upgraded $TO cluster starts" "$LOGS/upgraded.log"
READY_B=$(date -u '+%Y-%m-%d %H:%M:%S.%N+00')
note "pg_upgrade: the service was down for $((SECONDS - t_down)) s (stop, check, upgrade, start)"
pg_as "$NEWBIN/vacuumdb" -h "$SOCK" -p "${PORT[upgraded]}" -U postgres --all --analyze-in-stages \
	>"$LOGS/vacuumdb.log" 2>&1 || note "vacuumdb --analyze-in-stages failed: $(tail -n 3 "$LOGS/vacuumdb.log")"

after_move "pg_upgrade" upgraded "$W/upgrade/before" "$EXP_B" "$EXP_B_TOKEN" "$EXP_B_EXPIRES" "$READY_B"
upd=
if [ -f "$W/upgrade/update_extensions.sql" ]; then
	upd=$W/upgrade/update_extensions.sql
	note "pg_upgrade wrote update_extensions.sql: $(grep -v -e '^[\\]' "$upd" | tr '\n' ' ')"
fi
after_move_legacy "pg_upgrade" upgraded "$upd"
[ "$failed" -gt 0 ] && show_logs upgraded old

if [ "$SAME" = 1 ]; then
	skip "the move to a newer major version: only PostgreSQL $FROM here (this ran $FROM -> $FROM); run scripts/test --pg 17 (or 18) for it"
fi
finish
