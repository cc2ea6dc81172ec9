#!/usr/bin/env bash
#
# test/chaos/loop.sh: run pgbench in short bursts until a stop file exists.
#
# Used by test/t/018_chaos.pl, which kills server processes (and the
# postmaster) while the bursts run: a burst whose connections die, or that
# cannot connect while the server restarts, fails and the next one starts.
# At the end it writes "bursts N failed N" to LOG.summary.
#
# usage: loop.sh STOPFILE LOG pgbench-arguments...
# The connection comes from the usual PG* variables.

stop=$1
log=$2
shift 2
bursts=0
failed=0
while [ ! -e "$stop" ]; do
	bursts=$((bursts + 1))
	if ! pgbench "$@" >>"$log" 2>&1; then
		failed=$((failed + 1))
		sleep 0.2
	fi
done
echo "bursts $bursts failed $failed" >"$log.summary"
