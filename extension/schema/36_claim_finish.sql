/*
 * extension/schema/36_claim_finish.sql -- the worker's side: claim and finish
 *
 * A claim hands out jobs under a lease with a lease token; every later call
 * on the job names the token, and a stale or wrong one (the lease expired,
 * was reaped or the job was cancelled or handed back) changes nothing.
 */

CREATE FUNCTION jobq.claim(queue text DEFAULT 'default',
                           worker_id text DEFAULT NULL,
                           batch integer DEFAULT 1,
                           lease interval DEFAULT NULL,
                           kinds text[] DEFAULT NULL,
                           wait interval DEFAULT '0')
RETURNS TABLE (job_id bigint, lease_token bigint, kind text, payload jsonb,
               priority integer, retry_count integer, max_retries integer,
               checkpoint jsonb, enqueued_at timestamptz, lease_expires_at timestamptz)
AS 'MODULE_PATHNAME', 'jobq_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.claim(text, text, integer, interval, text[], interval) IS
    'claim up to batch ready jobs of a queue under a lease; never returns a job twice, never blocks on other claims';

CREATE FUNCTION jobq.complete(job_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_complete'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.complete(bigint, bigint, jsonb) IS
    'mark a running job completed; false when the lease token is stale or wrong';

CREATE FUNCTION jobq.complete_many(job_ids bigint[], lease_tokens bigint[], results jsonb[] DEFAULT NULL)
RETURNS integer
AS 'MODULE_PATHNAME', 'jobq_complete_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.complete_many(bigint[], bigint[], jsonb[]) IS
    'complete many running jobs; returns how many were completed';


CREATE FUNCTION jobq.fail(job_id bigint, lease_token bigint, error text,
                          retryable boolean DEFAULT true, retry_in interval DEFAULT NULL,
                          details text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'jobq_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.fail(bigint, bigint, text, boolean, interval, text) IS
    'fail the current attempt: back to pending with backoff while retries are left, else failed; details (a stack trace) is kept with the attempt; NULL for a stale token';

CREATE FUNCTION jobq.snooze(job_id bigint, lease_token bigint, delay interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobq_snooze'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.snooze(bigint, bigint, interval) IS
    'put a running job back to pending, due after delay, without spending a retry; NULL for a stale token';

CREATE FUNCTION jobq.extend(job_id bigint, lease_token bigint, lease interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobq_extend'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.extend(bigint, bigint, interval) IS
    'extend a running job''s lease to now() + lease; NULL for a stale token';

CREATE FUNCTION jobq.checkpoint(job_id bigint, lease_token bigint, data jsonb)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_checkpoint'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.checkpoint(bigint, bigint, jsonb) IS
    'store progress that the next attempt receives; false for a stale token';


-- the holder hands its running job back (a worker's graceful shutdown)
CREATE FUNCTION jobq.release(job_id bigint, lease_token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.release(bigint, bigint) IS
    'hand a running job back: pending now, no retry spent, the token fenced; false for a stale token';
