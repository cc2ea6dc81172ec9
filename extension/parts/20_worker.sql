/* extension/parts/20_worker.sql -- the background workers, seen from SQL */

CREATE FUNCTION jobq.worker_status()
RETURNS TABLE (pid integer, database text, role text, started_at timestamptz,
               last_run_at timestamptz, reaped bigint, pruned bigint, fired bigint)
AS 'MODULE_PATHNAME', 'jobq_worker_status'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.worker_status() IS
    'the jobq launcher and per-database workers running on this server, cluster-wide';

CREATE VIEW jobq.workers AS
SELECT w.pid, w.database, w.role, w.started_at, w.last_run_at, w.reaped, w.pruned, w.fired
  FROM jobq.worker_status() w;
COMMENT ON VIEW jobq.workers IS
    'jobq background workers: which database each serves and when it last did its work';
