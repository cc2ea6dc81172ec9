#!/usr/bin/env bash
#
# test/ha/run.sh: jobq in a three-node Patroni cluster that switches over and
# fails over under load (issue 38).
#
#   test/ha/run.sh                    both modes, short: per mode 1 switchover,
#                                     1 SIGKILL failover, 1 SIGSTOP failover
#   test/ha/run.sh --mode sync        one mode (sync: synchronous_mode true;
#                                     async: asynchronous replication)
#   test/ha/run.sh --long             per mode 5 switchovers and 5 failovers
#                                     (3 SIGKILL, 2 SIGSTOP)
#   test/ha/run.sh --switchovers N --kills N --stops N --probe-kills N
#                                     counts of each event (probe-kills: how many
#                                     of the kills first hold the primary's WAL
#                                     senders, so that claims and a completion are
#                                     really lost, and present the lost tokens to
#                                     the new primary)
#   test/ha/run.sh --dcs etcd3        Patroni talks to etcd over the v3 API (default:
#                                     v3 from Patroni 3.0.3 on, else v2: Patroni
#                                     3.0.2's etcd3 code can give the leader key
#                                     back to a primary that was frozen, see
#                                     docs/operations.md "High availability")
#   test/ha/run.sh --no-node          without the Node library (it needs npm to
#                                     install pg; it reaches the cluster through a
#                                     proxy that follows the leader: node-postgres
#                                     has no multi-host connection strings)
#   test/ha/run.sh --keep             keep the scratch directory (logs, ledgers)
#
# It installs what is missing (patroni, etcd-server, python3-psycopg, the
# build's packages; services the packages enable are stopped and disabled
# again), builds jobq with warnings as errors in a scratch copy of the tree,
# installs it into a private copy of PostgreSQL's installation there (as
# scripts/test does), and runs test/ha/ha.py once per mode as the postgres
# user: one etcd and three Patroni nodes on 127.0.0.1 only (ports
# HA_PORT_BASE+1..+30, default 26100), the load, the events, the checks.  It
# prints TAP-like "ok N - ..." lines, the figures as "# ..." lines, and ends
# with "N passed, N failed"; the exit status is non-zero on any failure.
# Everything it starts is stopped when it ends, whatever the way.
#
# Environment: HA_DIR (scratch directory; default a new /var/tmp/jobq-ha.*,
# removed at the end unless --keep), HA_PORT_BASE (default 26100, or another
# hundred when one of those 30 ports is taken).

set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

MODES=(sync async)
HA_ARGS=()
KEEP=${KEEP:-0}
NODE=1
while [ "$#" -gt 0 ]; do
	case "$1" in
		-h | --help)
			sed -n '3,/^$/s/^# \{0,1\}//p' "$0"
			exit 0
			;;
		--mode)
			case "${2:-}" in
				sync | async) MODES=("$2") ;;
				both) MODES=(sync async) ;;
				*) die "--mode sync, async or both" ;;
			esac
			shift
			;;
		--long) HA_ARGS+=(--switchovers 5 --kills 3 --stops 2 --probe-kills 1) ;;
		--switchovers | --kills | --stops | --probe-kills | --ttl | --workers | --warmup | --dcs)
			[ "$#" -ge 2 ] || die "$1 needs a number"
			HA_ARGS+=("$1" "$2")
			shift
			;;
		--verbose) HA_ARGS+=(--verbose) ;;
		--no-node) NODE=0 ;;
		--keep) KEEP=1 ;;
		*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done
# HA_PORT_BASE+1..+30, all free: 26100 when it is, else another hundred
# (two runs on one machine, a fresh root's beside the host's, share the
# loopback).  Below the kernel's ephemeral range (ip_local_port_range,
# 32768-60999 by default): a port there can be the local end of an outgoing
# connection (Patroni's to etcd, say) at the moment a node binds it, and
# the bind fails (seen once: "Address already in use" for a REST API, the
# cluster one node short).
EPHEMERAL_LOW=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
ports_free() {
	local p
	for ((p = $1 + 1; p <= $1 + 30; p++)); do
		! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || return 1
	done
}
# (chosen again before each mode: another run may have taken the range
# while the previous mode's cluster held it)
pick_port_base() {
	if [ -n "${HA_PORT_BASE:-}" ]; then
		PORT_BASE=$HA_PORT_BASE
		return
	fi
	local low=20000 span=100
	if [ "$EPHEMERAL_LOW" -ge 20200 ]; then
		span=$(((EPHEMERAL_LOW - 30 - low) / 100))
	fi
	PORT_BASE=$((low + 6100))
	[ $((PORT_BASE + 30)) -lt "$EPHEMERAL_LOW" ] || PORT_BASE=$((low + RANDOM % span * 100))
	for _ in $(seq 1 50); do
		ports_free "$PORT_BASE" && break
		PORT_BASE=$((low + RANDOM % span * 100))
	done
	ports_free "$PORT_BASE" || die "no free range of 30 ports found for the cluster (set HA_PORT_BASE)"
}
pick_port_base

section "packages"
ensure_packages "${BUILD_PACKAGES[@]}" patroni etcd-server etcd-client python3-etcd python3-psycopg

if [ -n "${HA_DIR:-}" ]; then
	WORK=$HA_DIR
	mkdir -p "$WORK"
	[ -z "$(ls -A "$WORK")" ] || die "HA_DIR $WORK is not empty"
else
	WORK=$(mktemp -d /var/tmp/jobq-ha.XXXXXX)
fi
set_pg_as "$WORK"

# The safety net: whatever ha.py started and did not stop (it writes their
# pids to RUN/pids; a PostgreSQL server's pid is in its postmaster.pid) is
# resumed and killed, by pid, if it still runs from this scratch directory.
kill_leftovers() {
	local f pid rest n
	for f in "$WORK"/*/pids "$WORK"/*/n?/data/postmaster.pid; do
		[ -f "$f" ] || continue
		# a postmaster.pid: its first line only (the others hold a port, ...)
		n=100
		case "$f" in */postmaster.pid) n=1 ;; esac
		while read -r pid rest; do
			case "$pid" in '' | *[!0-9]*) continue ;; esac
			[ -d "/proc/$pid" ] || continue
			tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -e "$WORK" -e "$PORT_BASE" || continue
			kill -CONT "$pid" 2>/dev/null || true
			pkill -KILL -P "$pid" 2>/dev/null || true
			kill -KILL "$pid" 2>/dev/null || true
		done < <(head -n "$n" "$f")
	done
}
# The driver (ha.py) first: told to stop, it stops what it started; then
# the safety net.
stop_driver() {
	local f pid
	for f in "$WORK"/*/driver.pid; do
		[ -f "$f" ] || continue
		pid=$(head -n 1 "$f")
		case "$pid" in '' | *[!0-9]*) continue ;; esac
		if ! [ -d "/proc/$pid" ] || ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -e "$WORK"; then
			continue
		fi
		kill -TERM "$pid" 2>/dev/null || continue
		for _ in $(seq 1 120); do
			[ -d "/proc/$pid" ] || break
			sleep 0.5
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
}
cleanup() {
	local rc=$?
	stop_driver
	kill_leftovers
	if [ "$KEEP" = 1 ]; then
		echo "scratch directory kept: $WORK"
	else
		rm -rf --one-file-system "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

section "build (make WERROR=1) and install into a private PostgreSQL tree in $WORK"
mkdir -p "$WORK/src"
copy_tree "$ROOT" "$WORK/src"
is_root && chown -R postgres: "$WORK"
chmod 755 "$WORK"
cd "$WORK"
private_pg_tree "$WORK/pgroot"
if ! build_and_install "$WORK/src" WERROR=1 >"$WORK/build.log" 2>&1 || ! use_private_pg ||
	! check_installed "$WORK/src" >>"$WORK/build.log" 2>&1; then
	cat "$WORK/build.log"
	echo "0 passed, 1 failed"
	exit 1
fi
is_root && chown -R postgres: "$WORK/pgroot"
info "jobq installed: $("$PG_CONFIG" --pkglibdir)/jobq.so"

# The Node library as an application installs it (the README's "A first worker in Node"): npm pack of
# clients/node, npm install of the tarball and of pg at the version it pins.
if [ "$NODE" = 1 ]; then
	section "the Node library: npm pack + npm install in $WORK/node-app"
	ensure_packages nodejs npm
	mkdir -p "$WORK/node-app"
	pg_pin=$(sed -n 's/.*"pg": *"\([^"]*\)".*/\1/p' "$WORK/src/clients/node/package.json")
	if (cd "$WORK/node-app" && npm pack "$WORK/src/clients/node" &&
		npm install --no-audit --no-fund ./jobq-*.tgz "pg@$pg_pin") >"$WORK/node-app.log" 2>&1; then
		is_root && chown -R postgres: "$WORK/node-app"
		HA_ARGS+=(--node-app "$WORK/node-app")
		tgz=("$WORK/node-app"/jobq-*.tgz)
		info "installed jobq (${tgz[0]##*/}) and pg@$pg_pin"
	else
		cat "$WORK/node-app.log"
		die "could not install the Node library (see above; --no-node runs without it)"
	fi
fi

passed=0 failed=0 rc=0
for mode in "${MODES[@]}"; do
	pick_port_base
	section "$mode mode: etcd + 3 Patroni nodes on 127.0.0.1, ports $((PORT_BASE + 1))-$((PORT_BASE + 30))"
	mkdir -p "$WORK/$mode"
	is_root && chown postgres: "$WORK/$mode"
	# in the background, waited for: a TERM or INT reaches the trap at once
	set +e
	(
		"${PG_AS[@]}" env PYTHONPATH="$WORK/src/clients/python" PATH="$PG_BIN:/usr/bin:/bin" \
			/usr/bin/python3 "$WORK/src/test/ha/ha.py" --dir "$WORK/$mode" --bin "$PG_BIN" \
			--mode "$mode" --port-base "$PORT_BASE" "${HA_ARGS[@]}" </dev/null 2>&1 |
			tee "$WORK/$mode.log"
		exit "${PIPESTATUS[0]}"
	) &
	wait "$!"
	r=$?
	set -e
	kill_leftovers
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$WORK/$mode.log" | tail -n 1 || true)
	if [ -z "$line" ]; then
		failed=$((failed + 1))
		rc=1
	else
		passed=$((passed + ${line%% passed*}))
		f=${line#* passed, }
		failed=$((failed + ${f%% failed*}))
	fi
	[ "$r" = 0 ] || rc=1
	if [ "$r" != 0 ]; then
		for f in "$WORK/$mode"/n?-patroni.log "$WORK/$mode"/etcd.log "$WORK/$mode"/libworker.log; do
			[ -s "$f" ] || continue
			echo "----- ${f#"$WORK"/} (last 25 lines) -----"
			tail -n 25 "$f"
		done
	fi
done
echo
echo "$passed passed, $failed failed"
[ "$rc" = 0 ] && [ "$failed" = 0 ]
