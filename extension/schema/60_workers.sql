/*
 * extension/schema/60_workers.sql -- who serves the database
 *
 * jobq's own background processes (the launcher, a worker per database or
 * the shared pool) as seen from SQL, and the registry of the application's
 * worker processes, which register and heartbeat themselves.
 */

CREATE FUNCTION jobq.worker_status()
RETURNS TABLE (pid integer, database text, role text, started_at timestamptz,
               last_run_at timestamptz, reaped bigint, pruned bigint, fired bigint)
AS 'MODULE_PATHNAME', 'jobq_worker_status'
LANGUAGE C VOLATILE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.worker_status() IS
    'the jobq launcher and per-database workers running on this server, cluster-wide';


-- how the current database is served by jobq's background processes (its
-- own worker, or the shared pool when databases outnumber
-- jobq.max_workers), when it was last served, when it is next due, and how
-- long it has waited past that
CREATE FUNCTION jobq.service_status()
RETURNS TABLE (served_by text, last_served_at timestamptz, next_due_at timestamptz,
               delay interval)
AS 'MODULE_PATHNAME', 'jobq_service_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.service_status() IS 'the row of jobq.service';

CREATE FUNCTION jobq.register_worker(worker_id text, queues text[], info jsonb DEFAULT '{}')
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_register_worker'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.register_worker(text, text[], jsonb) IS
    'register an application worker of queues the caller may work on, or refresh it (its heartbeat)';

CREATE FUNCTION jobq.unregister_worker(worker_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_unregister_worker'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.unregister_worker(text) IS
    'remove an application worker the caller registered; false when there is none';

CREATE FUNCTION jobq.app_worker_rows()
RETURNS TABLE (worker_id text, queues text[], info jsonb, started_at timestamptz,
               last_seen_at timestamptz, jobs_in_hand bigint, gone boolean)
AS 'MODULE_PATHNAME', 'jobq_app_worker_rows'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.app_worker_rows() IS
    'internal: the rows of jobq.app_workers the caller may see';
