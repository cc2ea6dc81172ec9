/* extension/parts/40_admin.sql -- operations from psql */

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

CREATE FUNCTION jobq.pause(queue text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_pause'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.pause(text) IS
    'a paused queue hands out no jobs (running jobs finish); persists until jobq.resume';

CREATE FUNCTION jobq.resume(queue text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_resume'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.resume(text) IS 'undo jobq.pause';

CREATE FUNCTION jobq.purge(queue text, status text, older_than interval DEFAULT '0')
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_purge'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.purge(text, text, interval) IS
    'delete finished jobs (completed, failed or cancelled) of a queue that finished more than older_than ago';
