/*
 * extension/schema/50_workflows.sql -- reading workflows
 *
 * A workflow is a job and every job reachable from it through depends_on.
 * These functions walk it in C by index probes of jobq.dependency: they
 * read the workflow's own edges and jobs, whatever the statistics say of
 * other tenants' workflows.  parent_results also fills an in-database
 * handler's job argument.
 */

CREATE FUNCTION jobq.parent_results(job_id bigint)
RETURNS TABLE (job_id bigint, kind text, status text, result jsonb)
AS 'MODULE_PATHNAME', 'jobq_parent_results'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off;
COMMENT ON FUNCTION jobq.parent_results(bigint) IS
    'the parents of a job: kind, status and result (the result only where the caller may work on the parent''s queue); a pruned parent keeps its outcome as status, with kind and result NULL';

CREATE FUNCTION jobq.workflow_jobs(root bigint)
RETURNS TABLE (job_id bigint, queue text, kind text, payload jsonb, priority integer,
               status text, retry_count integer, max_retries integer,
               idempotency_key text, run_at timestamptz, claimed_at timestamptz,
               worker_id text, lease_expires_at timestamptz, last_error text,
               result jsonb, checkpoint jsonb, created_at timestamptz,
               updated_at timestamptz, finished_at timestamptz, attempts integer,
               concurrency_key text)
AS 'MODULE_PATHNAME', 'jobq_workflow_jobs'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off;
COMMENT ON FUNCTION jobq.workflow_jobs(bigint) IS
    'every job of the workflow under root (root and every job reachable from it through depends_on), as in jobq.jobs';


-- can_finish: the workflow can still end without a failure nobody handles.
-- It is false once a job of it ended failed or cancelled and no dependent
-- of that job runs anyway (on_parent_failure = 'run', a fan-in callback);
-- jobq.retry of the job can make it true again.
CREATE FUNCTION jobq.workflow_status(root bigint)
RETURNS TABLE (total bigint, blocked bigint, pending bigint, running bigint,
               completed bigint, failed bigint, cancelled bigint, can_finish boolean)
AS 'MODULE_PATHNAME', 'jobq_workflow_status'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER ROWS 1
SET search_path = pg_catalog, pg_temp
SET jit = off;
COMMENT ON FUNCTION jobq.workflow_status(bigint) IS
    'a workflow''s jobs by status, and whether it can still end without an unhandled failure (NULL: no such job)';
