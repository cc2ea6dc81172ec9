#!/usr/bin/env bash
#
# test/chaos/loop.sh: run pgbench in short bursts until a stop file exists.
#
# Used by test/t/018_chaos.pl, which kills server processes (and the
# postmaster) while the bursts run: a burst whose connections die, or that
# cannot connect while the server restarts, fails and the next one starts.
#
# Every error line of every burst (ERROR, FATAL, PANIC, "pgbench: error")
# is sorted: the ones a killed server causes (the connection lost, the
# server in recovery, starting up or gone) are counted as expected; any
# other (an error of jobq, a deadlock, a failed statement) is unexpected and
# copied to LOG.unexpected.  At the end it writes to LOG.summary:
#   bursts N ok N failed N transactions N expected N unexpected N
# where transactions sums pgbench's "actually processed" counts.
#
# usage: loop.sh STOPFILE LOG pgbench-arguments...
# The connection comes from the usual PG* variables.

set -u
stop=$1
log=$2
shift 2
burst_log=$log.burst
: >"$log.unexpected"

# errors that a SIGKILLed backend, a crash restart or a killed postmaster
# explain
expected='server closed the connection unexpectedly|terminating connection because of crash of another server process|the database system is in recovery mode|the database system is starting up|the database system is not yet accepting connections|the database system is shutting down|terminating connection due to unexpected postmaster exit|perhaps the backend died while processing|no connection to the server|could not send data to server|could not receive data from server|connection to server .* failed: (No such file or directory|Connection refused)|could not create connection for (client|setup|initialization)|Run was aborted; the above results are incomplete'

bursts=0 ok=0 failed=0 xacts=0 nexpected=0 nunexpected=0
while [ ! -e "$stop" ]; do
	bursts=$((bursts + 1))
	if pgbench "$@" >"$burst_log" 2>&1; then
		rc=0
		ok=$((ok + 1))
	else
		rc=$?
		failed=$((failed + 1))
	fi
	cat "$burst_log" >>"$log"
	n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$burst_log" | head -n 1)
	xacts=$((xacts + ${n:-0}))
	errors=$(grep -E 'ERROR:|FATAL:|PANIC:|pgbench: (error|fatal):' "$burst_log")
	if [ -n "$errors" ]; then
		e=$(printf '%s\n' "$errors" | grep -c -E "$expected")
		u=$(printf '%s\n' "$errors" | grep -c -v -E "$expected")
		nexpected=$((nexpected + e))
		nunexpected=$((nunexpected + u))
		if [ "$u" -gt 0 ]; then
			printf '%s\n' "$errors" | grep -v -E "$expected" >>"$log.unexpected"
		fi
	elif [ "$rc" -ne 0 ]; then
		# a burst that failed without an error line is unexplained too
		nunexpected=$((nunexpected + 1))
		echo "burst $bursts: pgbench exited $rc without an error line" >>"$log.unexpected"
	fi
	# after a lost connection, give the server a moment to come back
	[ "$rc" -ne 0 ] && sleep 0.2
done
echo "bursts $bursts ok $ok failed $failed transactions $xacts expected $nexpected unexpected $nunexpected" >"$log.summary"
