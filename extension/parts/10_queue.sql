/* extension/parts/10_queue.sql -- queues, jobs and the queue operations */

/*
 * Storage layout (see README, "How it works").
 *
 * jobq.job holds one row per job for its whole life.  Its only indexes are
 * the primary key and a partial index over running leases, so the row is
 * updated in place when it is completed or checkpointed.
 *
 * A pending job is also in exactly one of two small "set" tables:
 *   jobq.ready      due jobs, in claim order (queue, -priority, run_at, job_id)
 *   jobq.scheduled  jobs whose run_at is still in the future
 * A claim deletes its rows from jobq.ready; a retry or a delayed job
 * re-enters as a new row there while its job_id stays.  Finished jobs are
 * never in the index a claim walks, and the claim starts its index scan at a
 * per-queue position kept in shared memory, so it never walks the dead
 * entries earlier claims left behind (src/queue_state.c).
 */

CREATE SEQUENCE jobq.job_id_seq AS bigint;
COMMENT ON SEQUENCE jobq.job_id_seq IS 'job ids, in enqueue order';

CREATE TABLE jobq.queue (
    name                text COLLATE "C" PRIMARY KEY,
    paused              boolean NOT NULL DEFAULT false,
    max_retries         integer NOT NULL DEFAULT 3,
    lease               interval NOT NULL DEFAULT '5 minutes',
    backoff_base        interval NOT NULL DEFAULT '1 second',
    backoff_cap         interval NOT NULL DEFAULT '1 hour',
    backoff_jitter      double precision NOT NULL DEFAULT 0.1,
    retention_completed interval NOT NULL DEFAULT '1 day',
    retention_failed    interval NOT NULL DEFAULT '30 days',
    max_concurrency     integer,
    max_per_key         integer,
    rate_limit          integer,
    rate_period         interval NOT NULL DEFAULT '1 second',
    rate_tokens         double precision,
    rate_refilled_at    timestamptz,
    breaker_threshold   integer,
    breaker_state       text NOT NULL DEFAULT 'closed',
    breaker_failures    integer NOT NULL DEFAULT 0,
    breaker_tripped_at  timestamptz,
    breaker_reason      text,
    created_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at          timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT queue_name_check CHECK (pg_catalog.octet_length(name) OPERATOR(pg_catalog.>) 0),
    CONSTRAINT queue_max_retries_check CHECK (max_retries OPERATOR(pg_catalog.>=) 0),
    CONSTRAINT queue_lease_check CHECK (lease OPERATOR(pg_catalog.>) '0'::interval),
    CONSTRAINT queue_backoff_check CHECK (backoff_base OPERATOR(pg_catalog.>=) '0'::interval
        AND backoff_cap OPERATOR(pg_catalog.>=) backoff_base),
    CONSTRAINT queue_jitter_check CHECK (backoff_jitter OPERATOR(pg_catalog.>=) 0
        AND backoff_jitter OPERATOR(pg_catalog.<=) 1),
    CONSTRAINT queue_limits_check CHECK (max_concurrency OPERATOR(pg_catalog.>) 0
        AND max_per_key OPERATOR(pg_catalog.>) 0 AND rate_limit OPERATOR(pg_catalog.>) 0
        AND rate_period OPERATOR(pg_catalog.>) '0'::interval
        AND breaker_threshold OPERATOR(pg_catalog.>) 0),
    CONSTRAINT queue_breaker_state_check CHECK (breaker_state OPERATOR(pg_catalog.=) ANY
        (ARRAY['closed', 'throttled', 'open', 'half_open']::text[])),
    CONSTRAINT queue_retention_check CHECK (retention_completed OPERATOR(pg_catalog.>=) '0'::interval
        AND retention_failed OPERATOR(pg_catalog.>=) '0'::interval)
);
COMMENT ON TABLE jobq.queue IS 'one row per queue: its settings; created on first use';

-- Backends cache the rows of jobq.queue they read; a commit that wrote any
-- row (or truncated the table) invalidates every cache.
CREATE FUNCTION jobq.queue_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobq_queue_changed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.queue_changed() IS
    'trigger on jobq.queue: its commit invalidates the queue settings every backend has cached';
CREATE TRIGGER queue_changed BEFORE INSERT OR UPDATE OR DELETE ON jobq.queue
    FOR EACH ROW EXECUTE FUNCTION jobq.queue_changed();
COMMENT ON TRIGGER queue_changed ON jobq.queue IS
    'a transaction that writes a queue row invalidates every backend''s cached settings at commit';
CREATE TRIGGER queue_truncated BEFORE TRUNCATE ON jobq.queue
    FOR EACH STATEMENT EXECUTE FUNCTION jobq.queue_changed();
COMMENT ON TRIGGER queue_truncated ON jobq.queue IS
    'TRUNCATE of jobq.queue invalidates every backend''s cached settings at commit';
COMMENT ON COLUMN jobq.queue.max_concurrency IS 'most jobs of the queue running at once; NULL: no limit';
COMMENT ON COLUMN jobq.queue.max_per_key IS 'most running jobs per concurrency_key; NULL: no limit';
COMMENT ON COLUMN jobq.queue.rate_limit IS 'most claims per rate_period (token bucket); NULL: no limit';
COMMENT ON COLUMN jobq.queue.breaker_threshold IS 'consecutive failed attempts that trip the circuit breaker; NULL: no breaker';
COMMENT ON COLUMN jobq.queue.breaker_state IS 'closed (normal), throttled (one job at a time), open (paused by the breaker), half_open (one at a time after resume)';

CREATE TABLE jobq.job (
    job_id           bigint PRIMARY KEY,
    queue            text COLLATE "C" NOT NULL,
    kind             text NOT NULL,
    payload          jsonb NOT NULL,
    priority         integer NOT NULL,
    status           text NOT NULL,
    retry_count      integer NOT NULL DEFAULT 0,
    max_retries      integer NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    idempotency_key  text,
    concurrency_key  text,
    run_at           timestamptz NOT NULL,
    claimed_at       timestamptz,
    worker_id        text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    last_error       text,
    result           jsonb,
    checkpoint       jsonb,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz
) WITH (fillfactor = 80);
COMMENT ON TABLE jobq.job IS 'one row per job, for its whole life';
-- status is one of pending, running, completed, failed, cancelled.  Only
-- jobq's own functions write this table (nobody else is granted to), so it
-- has no CHECK constraint: PostgreSQL re-reads and re-prepares a CHECK
-- expression in every statement that writes a row, about a fifth of an
-- enqueue.

-- lease_expires_at is set exactly while a job runs.  The predicate is on it,
-- not on status, so that complete/fail (status = 'running' AND job_id = ...)
-- are never planned over this index, which collects dead entries under a
-- long-held snapshot: they take the primary key.
CREATE INDEX job_running_lease_idx ON jobq.job (queue, lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
COMMENT ON INDEX jobq.job_running_lease_idx IS 'running jobs per queue by lease expiry, for the reaper and concurrency limits';

CREATE INDEX job_finished_idx ON jobq.job (finished_at)
    WHERE finished_at IS NOT NULL;
COMMENT ON INDEX jobq.job_finished_idx IS 'finished jobs by finish time, for pruning';

CREATE TABLE jobq.ready (
    queue        text COLLATE "C" NOT NULL,
    neg_priority integer NOT NULL,
    run_at       timestamptz NOT NULL,
    job_id       bigint NOT NULL,
    kind         text NOT NULL,
    concurrency_key text
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);
COMMENT ON TABLE jobq.ready IS 'due pending jobs, one row each; claims delete from here';

CREATE INDEX ready_claim_idx ON jobq.ready (queue, neg_priority, run_at, job_id);
COMMENT ON INDEX jobq.ready_claim_idx IS 'claim order: priority DESC, run_at, job_id';

CREATE TABLE jobq.scheduled (
    queue    text COLLATE "C" NOT NULL,
    run_at   timestamptz NOT NULL,
    job_id   bigint NOT NULL,
    priority integer NOT NULL,
    kind     text NOT NULL,
    concurrency_key text
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);
COMMENT ON TABLE jobq.scheduled IS 'pending jobs whose run_at is in the future (delays, retry backoff)';

CREATE INDEX scheduled_due_idx ON jobq.scheduled (queue, run_at, job_id);
COMMENT ON INDEX jobq.scheduled_due_idx IS 'scheduled jobs in due order';

CREATE TABLE jobq.rate_window (
    queue      text COLLATE "C" NOT NULL,
    claimed_at timestamptz NOT NULL
);
COMMENT ON TABLE jobq.rate_window IS
    'claims of rate-limited queues within their current rate_period (a sliding window log)';
CREATE INDEX rate_window_idx ON jobq.rate_window (queue, claimed_at);
COMMENT ON INDEX jobq.rate_window_idx IS 'claims per queue by time';

CREATE TABLE jobq.idempotency_key (
    kind       text NOT NULL,
    key        text NOT NULL,
    job_id     bigint NOT NULL,
    expires_at timestamptz,
    PRIMARY KEY (kind, key)
);
COMMENT ON TABLE jobq.idempotency_key IS
    'reserved (kind, idempotency key) pairs; kept while the job exists and for jobq.idempotency_retention after it finished';
COMMENT ON COLUMN jobq.idempotency_key.expires_at IS 'NULL while the job row exists';
-- jobq.prune deletes the keys past expires_at: without this index it read the
-- whole table every jobq.prune_interval.  Keys of live jobs (NULL) stay out.
CREATE INDEX idempotency_key_expires_idx ON jobq.idempotency_key (expires_at)
    WHERE expires_at IS NOT NULL;
COMMENT ON INDEX jobq.idempotency_key_expires_idx IS 'keys whose job was pruned, by expiry, for jobq.prune';

CREATE TABLE jobq.attempt (
    job_id      bigint NOT NULL,
    attempt     integer NOT NULL,
    worker_id   text,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL,
    outcome     text NOT NULL,
    error       text,
    PRIMARY KEY (job_id, attempt)
);
COMMENT ON TABLE jobq.attempt IS
    'history of attempts that failed (failed, lease expired, cancelled); a successful attempt is on the job row';

SELECT pg_catalog.pg_extension_config_dump('jobq.queue', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.job', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.ready', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.scheduled', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.idempotency_key', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.attempt', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.job_id_seq', '');

/* ---------------------------------------------------------------------
 * Access control (src/acl.c)
 * ------------------------------------------------------------------- */

CREATE TABLE jobq.permission (
    queue      text COLLATE "C" NOT NULL,
    role       regrole NOT NULL,
    capability text NOT NULL,
    granted_by regrole NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, role, capability),
    CONSTRAINT permission_capability_check CHECK (capability OPERATOR(pg_catalog.=) ANY
        (ARRAY['enqueue', 'work', 'administer']::text[]))
);
COMMENT ON TABLE jobq.permission IS
    'capabilities of roles on queues (''*'': every queue); administer implies enqueue and work';
SELECT pg_catalog.pg_extension_config_dump('jobq.permission', '');

CREATE FUNCTION jobq.may_use_queue(queue text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_may_use_queue'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.may_use_queue(text) IS
    'may the current role see this queue''s jobs (does it hold a capability on it)?';

CREATE FUNCTION jobq.may(queue text, capability text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_may_sql'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.may(text, text) IS
    'does the current role hold capability (enqueue, work, administer) on queue (''*'': every queue)?';

CREATE FUNCTION jobq.grant(queue text, role regrole, capability text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_grant'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.grant(text, regrole, text) IS
    'give role the enqueue, work or administer capability on queue (''*'': every queue), with the privileges it needs';

CREATE FUNCTION jobq.revoke(queue text, role regrole, capability text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_revoke'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.revoke(text, regrole, text) IS
    'take a capability back; false if the role did not hold it';

/* ---------------------------------------------------------------------
 * Priorities
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.priority(label text)
RETURNS integer
AS 'MODULE_PATHNAME', 'jobq_priority'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION jobq.priority(text) IS
    'priority value of a label: low 0, medium 10, high 20, critical 30';

CREATE FUNCTION jobq.priority_label(priority integer)
RETURNS text
AS 'MODULE_PATHNAME', 'jobq_priority_label'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION jobq.priority_label(integer) IS
    'label of the highest priority level at or below a value (below 0: low)';

/* ---------------------------------------------------------------------
 * Producer
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.enqueue(kind text,
                             payload jsonb DEFAULT '{}',
                             queue text DEFAULT 'default',
                             priority integer DEFAULT 0,
                             run_at timestamptz DEFAULT pg_catalog.now(),
                             max_retries integer DEFAULT NULL,
                             idempotency_key text DEFAULT NULL,
                             concurrency_key text DEFAULT NULL)
RETURNS TABLE (job_id bigint, created boolean)
AS 'MODULE_PATHNAME', 'jobq_enqueue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text) IS
    'enqueue one job; with an idempotency key, a duplicate returns the existing job with created = false';

CREATE FUNCTION jobq.enqueue_many(kind text,
                                  payloads jsonb[],
                                  queue text DEFAULT 'default',
                                  priority integer DEFAULT 0,
                                  run_at timestamptz DEFAULT pg_catalog.now(),
                                  max_retries integer DEFAULT NULL,
                                  idempotency_keys text[] DEFAULT NULL,
                                  concurrency_key text DEFAULT NULL)
RETURNS TABLE (job_id bigint, created boolean)
AS 'MODULE_PATHNAME', 'jobq_enqueue_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text) IS
    'enqueue one job per payload; one result row per input, in input order';

/* ---------------------------------------------------------------------
 * Worker
 * ------------------------------------------------------------------- */

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
                          retryable boolean DEFAULT true, retry_in interval DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'jobq_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.fail(bigint, bigint, text, boolean, interval) IS
    'fail the current attempt: back to pending with backoff while retries are left, else failed; NULL for a stale token';

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

/* ---------------------------------------------------------------------
 * Configuration and maintenance
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.configure(queue text,
                               max_retries integer DEFAULT NULL,
                               lease interval DEFAULT NULL,
                               backoff_base interval DEFAULT NULL,
                               backoff_cap interval DEFAULT NULL,
                               backoff_jitter double precision DEFAULT NULL,
                               retention_completed interval DEFAULT NULL,
                               retention_failed interval DEFAULT NULL,
                               max_concurrency integer DEFAULT NULL,
                               max_per_key integer DEFAULT NULL,
                               rate_limit integer DEFAULT NULL,
                               rate_period interval DEFAULT NULL,
                               breaker_threshold integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_configure'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.configure(text, integer, interval, interval, interval, double precision, interval, interval, integer, integer, integer, interval, integer) IS
    'create a queue or change its settings; NULL leaves a setting as it is, 0 removes a limit';

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

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

CREATE VIEW jobq.jobs WITH (security_barrier) AS
SELECT j.job_id, j.queue, j.kind, j.payload, j.priority, j.status,
       j.retry_count, j.max_retries, j.idempotency_key, j.run_at,
       j.claimed_at, j.worker_id, j.lease_expires_at, j.last_error,
       j.result, j.checkpoint, j.created_at, j.updated_at, j.finished_at,
       j.attempts, j.concurrency_key
  FROM jobq.job j
 WHERE jobq.may_use_queue(j.queue);
COMMENT ON VIEW jobq.jobs IS 'one row per job';

CREATE VIEW jobq.dead_letter WITH (security_barrier) AS
SELECT j.job_id, j.queue, j.kind, j.payload, j.priority, j.status,
       j.retry_count, j.max_retries, j.idempotency_key, j.run_at,
       j.claimed_at, j.worker_id, j.lease_expires_at, j.last_error,
       j.result, j.checkpoint, j.created_at, j.updated_at, j.finished_at,
       j.attempts, j.concurrency_key
  FROM jobq.job j
 WHERE j.status OPERATOR(pg_catalog.=) 'failed'
   AND jobq.may_use_queue(j.queue);
COMMENT ON VIEW jobq.dead_letter IS 'failed jobs: retries spent, not retryable, or lease expired too often';



