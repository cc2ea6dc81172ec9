/*
 * extension/schema/34_enqueue.sql -- the producer: enqueue
 *
 * One job or many, with an optional idempotency key (a duplicate returns
 * the existing job), a concurrency key, and parents the job waits for
 * (depends_on; on_parent_failure says what a failed parent does to it).
 */

CREATE FUNCTION jobq.enqueue(kind text,
                             payload jsonb DEFAULT '{}',
                             queue text DEFAULT 'default',
                             priority integer DEFAULT 0,
                             run_at timestamptz DEFAULT pg_catalog.now(),
                             max_retries integer DEFAULT NULL,
                             idempotency_key text DEFAULT NULL,
                             concurrency_key text DEFAULT NULL,
                             depends_on bigint[] DEFAULT NULL,
                             on_parent_failure text DEFAULT 'cancel')
RETURNS TABLE (job_id bigint, created boolean)
AS 'MODULE_PATHNAME', 'jobq_enqueue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, bigint[], text) IS
    'enqueue one job; with an idempotency key, a duplicate returns the existing job with created = false; with depends_on, the job is blocked until every parent has finished';

CREATE FUNCTION jobq.enqueue_many(kind text,
                                  payloads jsonb[],
                                  queue text DEFAULT 'default',
                                  priority integer DEFAULT 0,
                                  run_at timestamptz DEFAULT pg_catalog.now(),
                                  max_retries integer DEFAULT NULL,
                                  idempotency_keys text[] DEFAULT NULL,
                                  concurrency_key text DEFAULT NULL,
                                  depends_on bigint[] DEFAULT NULL,
                                  on_parent_failure text DEFAULT 'cancel')
RETURNS TABLE (job_id bigint, created boolean)
AS 'MODULE_PATHNAME', 'jobq_enqueue_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text, bigint[], text) IS
    'enqueue one job per payload (each depending on every job of depends_on); one result row per input, in input order';
