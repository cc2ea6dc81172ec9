#!/usr/bin/env bash
#
# bench/latency.sh: wake-up latency of jobq, measured on a throwaway server.
#
#   bench/latency.sh [SECONDS] [RATE]
#
# Producers enqueue RATE jobs per second (pgbench --rate) for SECONDS
# seconds (defaults 20 and 200), one job per transaction, durable commits
# (fsync and synchronous_commit on).  Two consumers run at the same time:
#
#   external   4 workers, each a loop of jobq.claim(wait => '5 s') +
#              jobq.complete, one transaction per job (a procedure with
#              COMMIT), as an application worker would
#   handler    jobs of a kind registered with jobq.register_handler, run
#              by jobq's own executors (jobq.executors = 2)
#
# and it prints, for each, the enqueue -> claim latency (claimed_at -
# created_at of every job) as p50 / p99 / max.  Builds and installs jobq
# from this tree first (needs root or sudo, like scripts/test).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$ROOT/scripts/lib.sh"

SECONDS_RUN=${1:-20}
RATE=${2:-200}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/jobq-latency.XXXXXX")
set_pg_as "$WORK"
is_root && chown postgres: "$WORK"
chmod 755 "$WORK"
DATA=$WORK/data
trap 'pg_stop "$DATA" || true; rm -rf "$WORK"' EXIT

section "build and install"
ensure_packages "${BUILD_PACKAGES[@]}"
build_and_install "$ROOT" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; die "build failed"; }

section "throwaway server (durable commits)"
PORT=$(free_port)
mkdir -p "$DATA"
is_root && chown postgres: "$DATA"
chmod 700 "$DATA"
pg_start "$DATA" "$WORK" "$PORT" "$WORK/server.log" "fsync = on" "synchronous_commit = on" \
	"max_connections = 40" "jobq.executors = 2" || die "server did not start"
export PGHOST=$WORK PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
pg_as "${PSQL[@]}" >/dev/null <<'SQL'
CREATE EXTENSION jobq;
SELECT jobq.configure('ext');
SELECT jobq.configure('inside');
CREATE ROLE bench_app;
GRANT USAGE ON SCHEMA jobq TO bench_app;
GRANT EXECUTE ON FUNCTION jobq.register_handler(text, regprocedure, text, boolean) TO bench_app;
CREATE FUNCTION public.noop(payload jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT $1';
ALTER FUNCTION public.noop(jsonb) OWNER TO bench_app;
SET ROLE bench_app;
SELECT jobq.register_handler('noop', 'public.noop(jsonb)', 'inside');
RESET ROLE;
-- an application-style worker: claim with wait, complete, commit, repeat
CREATE PROCEDURE public.worker(until timestamptz) LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
	WHILE clock_timestamp() < until LOOP
		FOR r IN SELECT * FROM jobq.claim('ext', wait => '1 s') LOOP
			PERFORM jobq.complete(r.job_id, r.lease_token);
		END LOOP;
		COMMIT;
	END LOOP;
END $$;
SQL
sleep 2   # executors start

section "$RATE jobs/s into each consumer for ${SECONDS_RUN}s"
until=$(pg_as "${PSQL[@]}" -tAc "SELECT clock_timestamp() + interval '$((SECONDS_RUN + 2)) s'")
for i in 1 2 3 4; do
	pg_as "${PSQL[@]}" -c "CALL public.worker('$until')" >/dev/null 2>&1 &
done
cat >"$WORK/produce.sql" <<'SQL'
SELECT job_id FROM jobq.enqueue('ext.job', '{}', 'ext');
SELECT job_id FROM jobq.enqueue('noop', '{}', 'inside');
SQL
chmod 644 "$WORK/produce.sql"
pg_as "$PG_BIN/pgbench" -n -c 4 -j 2 -T "$SECONDS_RUN" --rate "$RATE" -f "$WORK/produce.sql" \
	>"$WORK/pgbench.log" 2>&1 || { cat "$WORK/pgbench.log"; die "pgbench failed"; }
wait

section "enqueue -> claim latency (ms)"
pg_as "${PSQL[@]}" <<'SQL'
\pset footer off
SELECT CASE queue WHEN 'ext' THEN 'external worker, claim(wait)' ELSE 'in-database handler' END AS consumer,
       count(*) AS jobs,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - created_at)) * 1000)::numeric, 2) AS p50,
       round((percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - created_at)) * 1000)::numeric, 2) AS p99,
       round((max(extract(epoch FROM claimed_at - created_at)) * 1000)::numeric, 2) AS max
  FROM jobq.job GROUP BY queue ORDER BY queue;
SQL
