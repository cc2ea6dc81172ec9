/*
 * extension/schema/40_admin.sql -- operations on jobs and queues
 *
 * What an administrator (or a queue's administer capability) does from
 * psql or a tool: retry, cancel, edit, hand back, purge and discard jobs,
 * drop a queue, and run the background worker's reaping and pruning now.
 */

CREATE FUNCTION jobq.retry(job_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_retry'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.retry(bigint) IS
    'failed or cancelled job back to pending with a fresh retry budget; false in any other state';

CREATE FUNCTION jobq.retry_failed(kind text DEFAULT NULL, queue text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_retry_failed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.retry_failed(text, text) IS
    'every failed job (of a kind, of a queue) back to pending with a fresh retry budget; returns how many';

CREATE FUNCTION jobq.cancel(job_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_cancel'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.cancel(bigint) IS
    'pending or running job to cancelled (a running job''s token stops working); false in any other state';


CREATE FUNCTION jobq.update_job(job_id bigint, payload jsonb DEFAULT NULL,
                                run_at timestamptz DEFAULT NULL, priority integer DEFAULT NULL,
                                max_retries integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_update_job'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.update_job(bigint, jsonb, timestamptz, integer, integer) IS
    'change a pending, failed or cancelled job; NULL leaves a field as it is; false for a running, completed or missing job';

-- every running job of a queue (or of one worker) handed back
CREATE FUNCTION jobq.release_running(queue text, worker_id text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_release_running'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.release_running(text, text) IS
    'every running job of the queue (of that worker) back to pending now, no retry spent, old tokens fenced; returns how many';

CREATE FUNCTION jobq.purge(queue text, status text, older_than interval DEFAULT '0')
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.purge(text, text, interval) IS
    'delete finished jobs (completed, failed or cancelled) of a queue that finished more than older_than ago';

CREATE FUNCTION jobq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_drop_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.drop_queue(text, boolean) IS
    'remove a queue with its settings, grants, schedules, handlers and jobs; refused while jobs run unless force, which fences them first; returns how many jobs it removed';

CREATE FUNCTION jobq.discard(job_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_discard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.discard(bigint) IS
    'delete a failed or cancelled job and its attempt history (its idempotency key stays reserved for jobq.idempotency_retention); refused for a job with unfinished dependents';

CREATE FUNCTION jobq.reap(batch integer DEFAULT 1000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_reap'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.reap(integer) IS
    'reap up to batch expired leases now (the background worker does this every second); returns how many';

CREATE FUNCTION jobq.prune(batch integer DEFAULT 1000)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_prune'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.prune(integer) IS
    'delete up to batch finished jobs past their queue''s retention and expired idempotency keys; returns rows deleted';
