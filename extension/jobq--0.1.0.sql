/*
 * extension/jobq--0.1.0.sql -- the install script of release 0.1.0
 *
 * The schema of release 0.1.0, kept as it was released: CREATE EXTENSION
 * jobq VERSION '0.1.0' runs it, and the upgrade scripts jobq--A--B.sql
 * bring such a database to later releases.  The current schema is in
 * extension/schema/.
 */

\echo Use "CREATE EXTENSION jobq" to load this file. \quit
/* Queues, jobs and the queue operations */

/*
 * Storage layout.
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
 * entries earlier claims left behind.
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
 * Access control
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



/* The background workers, seen from SQL */

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
/* Cron expressions: next fire time */

CREATE FUNCTION jobq.cron_next(cron text, after timestamptz,
                               timezone text DEFAULT 'UTC')
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobq_cron_next'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION jobq.cron_next(text, timestamptz, text) IS
'first fire time of a cron expression strictly after "after", with wall-clock times read in the given IANA time zone; NULL if it never fires again';
/* Cron schedules */

CREATE SEQUENCE jobq.schedule_id_seq AS bigint;
COMMENT ON SEQUENCE jobq.schedule_id_seq IS 'schedule ids';
SELECT pg_catalog.pg_extension_config_dump('jobq.schedule_id_seq', '');

CREATE TABLE jobq.schedule (
    schedule_id  bigint PRIMARY KEY DEFAULT pg_catalog.nextval('jobq.schedule_id_seq'),
    name         text NOT NULL UNIQUE,
    cron         text NOT NULL,
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    queue        text COLLATE "C" NOT NULL,
    timezone     text NOT NULL,
    misfire      text NOT NULL,
    priority     integer NOT NULL,
    paused       boolean NOT NULL DEFAULT false,
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    last_job_id  bigint,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT schedule_misfire_check CHECK (misfire OPERATOR(pg_catalog.=) ANY
        (ARRAY['skip', 'run_once', 'run_all']::text[]))
);
COMMENT ON TABLE jobq.schedule IS
    'cron schedules; each fire enqueues one job keyed by (schedule, fire time)';
COMMENT ON COLUMN jobq.schedule.next_fire_at IS 'next fire time; NULL when the expression never fires again';

CREATE INDEX schedule_due_idx ON jobq.schedule (next_fire_at) WHERE NOT paused;
COMMENT ON INDEX jobq.schedule_due_idx IS 'unpaused schedules by next fire time';

SELECT pg_catalog.pg_extension_config_dump('jobq.schedule', '');

CREATE FUNCTION jobq.schedule(name text, cron text, kind text,
                              payload jsonb DEFAULT '{}',
                              queue text DEFAULT 'default',
                              timezone text DEFAULT 'UTC',
                              misfire text DEFAULT 'run_once',
                              priority integer DEFAULT 0)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.schedule(text, text, text, jsonb, text, text, text, integer) IS
    'create a cron schedule, or update the one of that name; returns its id';

CREATE FUNCTION jobq.unschedule(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_unschedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'delete a schedule; false if there was none';

CREATE FUNCTION jobq.pause_schedule(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_pause_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.pause_schedule(text) IS
    'stop a schedule firing; the fire times it misses follow its misfire policy at resume';

CREATE FUNCTION jobq.resume_schedule(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_resume_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.resume_schedule(text) IS
    'resume a paused schedule, applying its misfire policy to the fire times it missed';

CREATE FUNCTION jobq.run_schedules()
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_run_schedules'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.run_schedules() IS
    'fire due schedules now (the background worker does this on time); returns jobs enqueued';

CREATE VIEW jobq.schedules WITH (security_barrier) AS
SELECT s.schedule_id, s.name, s.cron, s.timezone, s.misfire, s.kind, s.queue,
       s.priority, s.payload, s.paused, s.next_fire_at, s.last_fire_at,
       s.last_job_id, j.status AS last_job_status, s.created_at, s.updated_at
  FROM jobq.schedule s
  LEFT JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) s.last_job_id
 WHERE jobq.may_use_queue(s.queue);
COMMENT ON VIEW jobq.schedules IS
    'schedules with their next and last fire and the status of the last job fired';
/* Operations from psql */

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
/*
 * Operations: stats, a job's story, health
 *
 * Everything here is plain SQL over jobq's tables and the statistics views,
 * for people (psql, the bin/jobq command-line tool) and for monitoring.
 * Nothing here changes a job.  The functions run as their caller
 * as SECURITY DEFINER with search_path pinned to pg_catalog, pg_temp, and
 * show only queues the calling role may use (jobq.may_use_queue).
 */

/* ---------------------------------------------------------------------
 * Queues
 * ------------------------------------------------------------------- */

CREATE VIEW jobq.queues WITH (security_barrier) AS
SELECT q.name AS queue, q.paused,
       q.max_retries, q.lease, q.backoff_base, q.backoff_cap, q.backoff_jitter,
       q.retention_completed, q.retention_failed,
       q.max_concurrency, q.max_per_key, q.rate_limit, q.rate_period,
       q.breaker_threshold, q.breaker_state, q.breaker_failures,
       q.breaker_tripped_at, q.breaker_reason,
       q.created_at, q.updated_at
  FROM jobq.queue q
 WHERE jobq.may_use_queue(q.name);
COMMENT ON VIEW jobq.queues IS
    'one row per queue: every setting of jobq.configure, paused, and the circuit breaker''s state';

CREATE VIEW jobq.queue_stats WITH (security_barrier) AS
SELECT q.name AS queue,
       COALESCE(s.pending, 0) AS pending,
       COALESCE(s.running, 0) AS running,
       COALESCE(s.completed, 0) AS completed,
       COALESCE(s.failed, 0) AS failed,
       COALESCE(s.cancelled, 0) AS cancelled,
       pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_due AS oldest_pending_age,
       q.paused,
       COALESCE(s.ready, 0) AS ready,
       COALESCE(s.pending, 0) OPERATOR(pg_catalog.-) COALESCE(s.ready, 0) AS delayed,
       COALESCE(s.completed_last_hour, 0) AS completed_last_hour,
       COALESCE(s.failed_last_hour, 0) AS failed_last_hour,
       q.breaker_state,
       q.max_concurrency, q.max_per_key, q.rate_limit, q.rate_period,
       q.breaker_threshold
  FROM jobq.queue q
  LEFT JOIN (SELECT j.queue,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'pending') AS pending,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'running') AS running,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'completed') AS completed,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'failed') AS failed,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'cancelled') AS cancelled,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'pending'
                                                  AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS ready,
                    pg_catalog.min(j.run_at) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'pending'
                                                  AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest_due,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'completed'
                                                  AND j.finished_at OPERATOR(pg_catalog.>=)
                                                      (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)) AS completed_last_hour,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'failed'
                                                  AND j.finished_at OPERATOR(pg_catalog.>=)
                                                      (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)) AS failed_last_hour
               FROM jobq.job j
              GROUP BY j.queue) s ON s.queue OPERATOR(pg_catalog.=) q.name
 WHERE jobq.may_use_queue(q.name);
COMMENT ON VIEW jobq.queue_stats IS
    'per queue: jobs by status, age of the oldest due pending job, paused; ready and delayed split pending; completed and failed in the last hour; breaker state and limits';

/* ---------------------------------------------------------------------
 * One job's story
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.job(job_id bigint)
RETURNS TABLE (attempt integer, outcome text, worker_id text,
               started_at timestamptz, finished_at timestamptz, duration interval,
               error text, lease_expires_at timestamptz, result jsonb)
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT x.* FROM (
SELECT a.attempt, a.outcome, a.worker_id, a.started_at, a.finished_at,
       a.finished_at OPERATOR(pg_catalog.-) a.started_at,
       a.error, NULL::timestamptz, NULL::jsonb
  FROM jobq.attempt a
 WHERE a.job_id OPERATOR(pg_catalog.=) $1
UNION ALL
SELECT j.attempts, j.status, j.worker_id, j.claimed_at, j.finished_at,
       COALESCE(j.finished_at, GREATEST(pg_catalog.now(), j.claimed_at))
           OPERATOR(pg_catalog.-) j.claimed_at,
       NULL::text, j.lease_expires_at, j.result
  FROM jobq.job j
 WHERE j.job_id OPERATOR(pg_catalog.=) $1
   AND j.status OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'completed']::text[])
) x
 WHERE jobq.may_use_queue((SELECT j.queue FROM jobq.job j WHERE j.job_id OPERATOR(pg_catalog.=) $1))
 ORDER BY 1
$$;
COMMENT ON FUNCTION jobq.job(bigint) IS
    'every attempt of a job in order: failed, lease expired and cancelled ones from the history, then the running (with its lease; duration so far) or completed one (with its result)';

CREATE FUNCTION jobq.job_by_key(kind text, idempotency_key text)
RETURNS TABLE (job_id bigint, queue text, kind text, payload jsonb, priority integer,
               status text, retry_count integer, max_retries integer,
               idempotency_key text, run_at timestamptz, claimed_at timestamptz,
               worker_id text, lease_expires_at timestamptz, last_error text,
               result jsonb, checkpoint jsonb, created_at timestamptz,
               updated_at timestamptz, finished_at timestamptz, attempts integer,
               concurrency_key text, key_expires_at timestamptz)
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT k.job_id, j.queue, k.kind, j.payload, j.priority, j.status,
       j.retry_count, j.max_retries, k.key, j.run_at, j.claimed_at,
       j.worker_id, j.lease_expires_at, j.last_error, j.result, j.checkpoint,
       j.created_at, j.updated_at, j.finished_at, j.attempts,
       j.concurrency_key, k.expires_at
  FROM jobq.idempotency_key k
  LEFT JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) k.job_id
 WHERE k.kind OPERATOR(pg_catalog.=) $1
   AND k.key OPERATOR(pg_catalog.=) $2
   AND jobq.may_use_queue(COALESCE(j.queue, '*'))
$$;
COMMENT ON FUNCTION jobq.job_by_key(text, text) IS
    'the job holding an idempotency key, as in jobq.jobs; a job already pruned whose key is still reserved has only job_id, kind, idempotency_key and key_expires_at';

/* ---------------------------------------------------------------------
 * Kinds
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.kind_stats(period interval DEFAULT '1 hour', queue text DEFAULT NULL)
RETURNS TABLE (kind text, completed bigint, failed bigint, failure_rate numeric,
               failed_attempts bigint, lease_expired bigint, retries bigint,
               mean_duration interval, p95_duration interval, max_duration interval)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF kind_stats.period IS NULL THEN
        RAISE EXCEPTION 'period must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF kind_stats.period OPERATOR(pg_catalog.<) '0'::interval THEN
        RAISE EXCEPTION 'period must not be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
WITH w AS (
    SELECT pg_catalog.now() OPERATOR(pg_catalog.-) kind_stats.period AS since
), ev AS (
    -- jobs that finished in the window, completed or failed for good
    SELECT j.kind, 'job' AS src, j.status AS what, false AS retried,
           j.finished_at OPERATOR(pg_catalog.-) j.claimed_at AS duration
      FROM jobq.job j, w
     WHERE j.finished_at OPERATOR(pg_catalog.>=) w.since
       AND j.status OPERATOR(pg_catalog.=) ANY (ARRAY['completed', 'failed']::text[])
       AND (kind_stats.queue IS NULL OR j.queue OPERATOR(pg_catalog.=) kind_stats.queue)
       AND jobq.may_use_queue(j.queue)
    UNION ALL
    -- attempts that ended in a failure or an expired lease in the window;
    -- retried unless it was the last attempt of a job that is failed now
    SELECT j.kind, 'attempt', a.outcome,
           NOT (j.status OPERATOR(pg_catalog.=) 'failed'
                AND j.attempts OPERATOR(pg_catalog.=) a.attempt),
           NULL::interval
      FROM jobq.attempt a
      JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) a.job_id, w
     WHERE a.finished_at OPERATOR(pg_catalog.>=) w.since
       AND a.outcome OPERATOR(pg_catalog.=) ANY (ARRAY['failed', 'lease expired']::text[])
       AND (kind_stats.queue IS NULL OR j.queue OPERATOR(pg_catalog.=) kind_stats.queue)
       AND jobq.may_use_queue(j.queue)
)
SELECT ev.kind,
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'
                                     AND ev.what OPERATOR(pg_catalog.=) 'completed'),
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'
                                     AND ev.what OPERATOR(pg_catalog.=) 'failed'),
       pg_catalog.round(pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'
                                                      AND ev.what OPERATOR(pg_catalog.=) 'failed')::numeric
                        OPERATOR(pg_catalog./)
                        NULLIF(pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'), 0), 3),
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'attempt'),
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'attempt'
                                     AND ev.what OPERATOR(pg_catalog.=) 'lease expired'),
       pg_catalog.count(*) FILTER (WHERE ev.retried),
       pg_catalog.avg(ev.duration) FILTER (WHERE ev.what OPERATOR(pg_catalog.=) 'completed'),
       pg_catalog.percentile_cont(0.95::double precision) WITHIN GROUP (ORDER BY ev.duration)
           FILTER (WHERE ev.what OPERATOR(pg_catalog.=) 'completed'),
       pg_catalog.max(ev.duration) FILTER (WHERE ev.what OPERATOR(pg_catalog.=) 'completed')
  FROM ev
 GROUP BY ev.kind
 ORDER BY ev.kind;
END
$$;
COMMENT ON FUNCTION jobq.kind_stats(interval, text) IS
    'per kind over the last period (of one queue, or all): jobs completed and failed for good, failure rate, failed attempts, expired leases, retries, and mean, 95th percentile and longest run time of completed jobs';

CREATE VIEW jobq.kind_stats AS
SELECT s.kind, s.completed, s.failed, s.failure_rate, s.failed_attempts,
       s.lease_expired, s.retries, s.mean_duration, s.p95_duration, s.max_duration
  FROM jobq.kind_stats() s;
COMMENT ON VIEW jobq.kind_stats IS 'jobq.kind_stats() over the last hour, every queue';

/* ---------------------------------------------------------------------
 * Health
 * ------------------------------------------------------------------- */

/*
 * One row per check, always in this order:
 *
 *   worker             a jobq worker serves this database and ran recently
 *   expired_leases     running jobs whose lease expired more than grace ago
 *   overdue_schedules  unpaused schedules due more than grace ago
 *   oldest_pending     the oldest due job of an unpaused queue, vs threshold
 *   circuit_breakers   queues whose breaker is open, throttled or half open
 *   dead_tuples        dead rows vacuum has not removed from jobq's tables
 *   table_bloat        jobq's tables and indexes far larger than their rows
 *   xmin_horizon       a transaction, prepared transaction or replication
 *                      slot holding back what vacuum may remove
 *
 * Ages are measured with clock_timestamp(), so a check inside a long
 * transaction still sees the time pass.
 */
CREATE FUNCTION jobq.health(oldest_pending_threshold interval DEFAULT '5 minutes',
                            grace interval DEFAULT '1 minute',
                            xmin_threshold interval DEFAULT '10 minutes')
RETURNS TABLE (check_name text, status text, detail text, hint text)
LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET intervalstyle = postgres    -- the texts read the same whatever the caller's style
AS $$
#variable_conflict use_column
DECLARE
    t          timestamptz := pg_catalog.clock_timestamp();
    naptime    interval;
    stale      interval;
    preload    text;
    dbs        text;
    w          record;
    n          bigint;
    oldest     timestamptz;
    oldest_id  bigint;
    most       bigint;
    list       text;
BEGIN
    -- it reports on every queue: only for those who administer every queue
    IF NOT jobq.may('*', 'administer') THEN
        RAISE EXCEPTION 'permission denied to read the health of every queue'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'jobq.health() needs the administer capability on ''*''.';
    END IF;
    IF oldest_pending_threshold IS NULL OR grace IS NULL OR xmin_threshold IS NULL THEN
        RAISE EXCEPTION '% must not be null',
            CASE WHEN oldest_pending_threshold IS NULL THEN 'oldest_pending_threshold'
                 WHEN grace IS NULL THEN 'grace' ELSE 'xmin_threshold' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF oldest_pending_threshold OPERATOR(pg_catalog.<) '0'::interval
       OR grace OPERATOR(pg_catalog.<) '0'::interval
       OR xmin_threshold OPERATOR(pg_catalog.<) '0'::interval THEN
        RAISE EXCEPTION '% must not be negative',
            CASE WHEN oldest_pending_threshold OPERATOR(pg_catalog.<) '0'::interval
                 THEN 'oldest_pending_threshold'
                 WHEN grace OPERATOR(pg_catalog.<) '0'::interval THEN 'grace'
                 ELSE 'xmin_threshold' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    /* worker */
    check_name := 'worker';
    naptime := COALESCE(pg_catalog.current_setting('jobq.naptime', true), '1s')::interval;
    stale := GREATEST(grace, naptime OPERATOR(pg_catalog.*) 10::double precision);
    SELECT wk.pid, wk.started_at, wk.last_run_at, wk.reaped, wk.pruned, wk.fired
      INTO w
      FROM jobq.workers wk
     WHERE wk.role OPERATOR(pg_catalog.=) 'worker'
       AND wk.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
     LIMIT 1;
    IF NOT FOUND THEN
        status := 'critical';
        detail := pg_catalog.format('no jobq worker is running for database %I',
                                    pg_catalog.current_database());
        SELECT s.setting INTO preload FROM pg_catalog.pg_settings s
         WHERE s.name OPERATOR(pg_catalog.=) 'shared_preload_libraries';
        dbs := pg_catalog.current_setting('jobq.databases', true);
        IF preload IS NOT NULL
           AND preload OPERATOR(pg_catalog.!~) '(^|[\s,"/])jobq("|\s|,|$)' THEN
            hint := 'Add jobq to shared_preload_libraries and restart the server; until then call jobq.reap(), jobq.run_schedules() and jobq.prune() yourself.';
        ELSIF COALESCE(dbs, '') OPERATOR(pg_catalog.<>) ''
              AND NOT pg_catalog.current_database() OPERATOR(pg_catalog.=) ANY
                  (pg_catalog.regexp_split_to_array(pg_catalog.btrim(dbs), '\s*,\s*')) THEN
            hint := 'This database is not listed in jobq.databases.';
        ELSE
            hint := 'The launcher starts a worker within seconds of CREATE EXTENSION; if none appears, look for jobq messages in the server log.';
        END IF;
    ELSIF COALESCE(w.last_run_at, w.started_at) OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) stale) THEN
        status := 'critical';
        detail := pg_catalog.format('jobq worker pid %s has not finished a round for %s',
                                    w.pid,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-)
                                                          COALESCE(w.last_run_at, w.started_at)));
        hint := 'It may be waiting on a lock: look at pg_stat_activity where backend_type = ''jobq worker''.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('jobq worker pid %s, up %s; since start: %s leases reaped, %s jobs pruned, %s schedule fires',
                                    w.pid,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) w.started_at),
                                    w.reaped, w.pruned, w.fired);
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* expired_leases */
    check_name := 'expired_leases';
    SELECT pg_catalog.count(*), pg_catalog.min(j.lease_expires_at)
      INTO n, oldest
      FROM jobq.job j
     WHERE j.status OPERATOR(pg_catalog.=) 'running'
       AND j.lease_expires_at OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) grace);
    IF n OPERATOR(pg_catalog.>) 0 THEN
        SELECT j.job_id INTO oldest_id
          FROM jobq.job j
         WHERE j.status OPERATOR(pg_catalog.=) 'running'
           AND j.lease_expires_at OPERATOR(pg_catalog.=) oldest
         LIMIT 1;
        status := 'critical';
        detail := pg_catalog.format('%s running jobs with a lease expired more than %s ago; the oldest, job %s, expired %s ago',
                                    n, grace, oldest_id,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) oldest));
        hint := 'The background worker reaps expired leases every jobq.naptime (see the worker check); SELECT jobq.reap() reaps them now.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no lease expired more than %s ago', grace);
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* overdue_schedules */
    check_name := 'overdue_schedules';
    SELECT pg_catalog.count(*), pg_catalog.min(s.next_fire_at),
           pg_catalog.string_agg(pg_catalog.quote_literal(s.name), ', ' ORDER BY s.next_fire_at, s.name)
      INTO n, oldest, list
      FROM jobq.schedule s
     WHERE NOT s.paused
       AND s.next_fire_at OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) grace);
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'critical';
        detail := pg_catalog.format('%s schedules due more than %s ago, the oldest due %s ago: %s',
                                    n, grace,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) oldest),
                                    list);
        hint := 'Schedules fire from the background worker (see the worker check); SELECT jobq.run_schedules() fires them now.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no schedule due more than %s ago', grace);
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* oldest_pending: due jobs sit in jobq.ready, or in jobq.scheduled until a claim promotes them */
    check_name := 'oldest_pending';
    WITH due AS (
        SELECT r.queue, r.run_at FROM jobq.ready r
        UNION ALL
        SELECT s.queue, s.run_at FROM jobq.scheduled s
         WHERE s.run_at OPERATOR(pg_catalog.<=) t
    ), per_queue AS (
        SELECT d.queue, pg_catalog.min(d.run_at) AS oldest
          FROM due d
          JOIN jobq.queue q ON q.name OPERATOR(pg_catalog.=) d.queue
         WHERE NOT q.paused
           AND q.breaker_state OPERATOR(pg_catalog.<>) 'open'
         GROUP BY d.queue
    )
    SELECT pg_catalog.count(*) FILTER (WHERE p.oldest OPERATOR(pg_catalog.<)
                                       (t OPERATOR(pg_catalog.-) oldest_pending_threshold)),
           pg_catalog.min(p.oldest),
           pg_catalog.string_agg(pg_catalog.format('%s (%s)', pg_catalog.quote_literal(p.queue),
                                                   pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) p.oldest)),
                                 ', ' ORDER BY p.oldest, p.queue)
               FILTER (WHERE p.oldest OPERATOR(pg_catalog.<)
                       (t OPERATOR(pg_catalog.-) oldest_pending_threshold))
      INTO n, oldest, list
      FROM per_queue p;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := pg_catalog.format('%s queues have a due job waiting longer than %s: %s',
                                    n, oldest_pending_threshold, list);
        hint := 'Workers are not keeping up with these queues, or none are running; see jobq.queue_stats (running, limits) and jobq.kind_stats.';
    ELSE
        status := 'ok';
        detail := CASE WHEN oldest IS NULL
                       THEN 'no due job waiting in an unpaused queue'
                       ELSE pg_catalog.format('the oldest due job has waited %s (threshold %s)',
                                              pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) oldest),
                                              oldest_pending_threshold)
                  END;
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* circuit_breakers */
    check_name := 'circuit_breakers';
    SELECT pg_catalog.count(*) FILTER (WHERE q.breaker_state OPERATOR(pg_catalog.=) 'open'),
           pg_catalog.string_agg(pg_catalog.format('%s %s%s', pg_catalog.quote_literal(q.name),
                                                   q.breaker_state,
                                                   CASE WHEN q.breaker_reason IS NULL THEN ''
                                                        ELSE pg_catalog.format(' (%s)', q.breaker_reason) END),
                                 ', ' ORDER BY q.name)
      INTO n, list
      FROM jobq.queue q
     WHERE q.breaker_state OPERATOR(pg_catalog.<>) 'closed';
    IF list IS NULL THEN
        status := 'ok';
        detail := 'every circuit breaker is closed';
        hint := NULL;
    ELSE
        status := 'warning';
        detail := list;
        hint := CASE WHEN n OPERATOR(pg_catalog.>) 0
                     THEN 'An open breaker holds its queue''s jobs: fix the cause (see jobq.dead_letter and jobq.attempt), then SELECT jobq.resume(queue).'
                     ELSE 'The queue runs one job at a time until one succeeds.'
                END;
    END IF;
    RETURN NEXT;

    /* dead_tuples */
    check_name := 'dead_tuples';
    SELECT pg_catalog.count(*) FILTER (WHERE x.bad),
           pg_catalog.string_agg(pg_catalog.format('jobq.%s: %s dead, %s live, last vacuum %s',
                                                   x.relname, x.n_dead_tup, x.n_live_tup,
                                                   COALESCE(pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) x.last_vac)
                                                                OPERATOR(pg_catalog.||) ' ago', 'never')),
                                 '; ' ORDER BY x.n_dead_tup DESC, x.relname)
               FILTER (WHERE x.bad),
           pg_catalog.max(x.n_dead_tup)
      INTO n, list, most
      FROM (SELECT st.relname, st.n_dead_tup, st.n_live_tup,
                   GREATEST(st.last_vacuum, st.last_autovacuum) AS last_vac,
                   st.n_dead_tup OPERATOR(pg_catalog.>) 10000
                   AND st.n_dead_tup OPERATOR(pg_catalog.>) (st.n_live_tup OPERATOR(pg_catalog./) 2) AS bad
              FROM pg_catalog.pg_stat_user_tables st
             WHERE st.schemaname OPERATOR(pg_catalog.=) 'jobq') x;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := list;
        hint := 'Vacuum cannot remove dead rows while an old snapshot holds back the xmin horizon (see xmin_horizon), or autovacuum is falling behind; VACUUM the table.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('at most %s dead rows in a jobq table', COALESCE(most, 0));
        hint := NULL;
    END IF;
    RETURN NEXT;

    /*
     * table_bloat: a rough estimate from the planner's statistics (tables
     * and their whole-table btree indexes; not analyzed yet means no
     * estimate): rows x average width, against the size on disk.
     */
    check_name := 'table_bloat';
    WITH rel AS (
        SELECT c.oid, c.relname, c.relkind, c.relpages,
               CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'i' THEN i.indrelid ELSE c.oid END AS tbl,
               CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'i' THEN i.indkey::integer[] END AS keys
          FROM pg_catalog.pg_class c
          LEFT JOIN pg_catalog.pg_index i ON i.indexrelid OPERATOR(pg_catalog.=) c.oid
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'jobq'::regnamespace
           AND (c.relkind OPERATOR(pg_catalog.=) 'r'
                OR (c.relkind OPERATOR(pg_catalog.=) 'i' AND i.indpred IS NULL
                    AND c.relam OPERATOR(pg_catalog.=) 403::oid))
    ), est AS (
        SELECT r.relname,
               pg_catalog.pg_relation_size(r.oid) AS bytes,
               tc.reltuples OPERATOR(pg_catalog.*)
                 (CASE WHEN r.relkind OPERATOR(pg_catalog.=) 'r' THEN 28 ELSE 12 END
                  OPERATOR(pg_catalog.+) ws.width)
                 OPERATOR(pg_catalog./)
                 (CASE WHEN r.relkind OPERATOR(pg_catalog.=) 'r'
                       THEN COALESCE(ff.fillfactor, 100) ELSE 90 END
                  OPERATOR(pg_catalog.*) 0.01::real) AS want
          FROM rel r
          JOIN pg_catalog.pg_class tc ON tc.oid OPERATOR(pg_catalog.=) r.tbl
          LEFT JOIN LATERAL (
                SELECT pg_catalog.substr(o.opt, 12)::integer AS fillfactor
                  FROM pg_catalog.unnest(tc.reloptions) o(opt)
                 WHERE o.opt OPERATOR(pg_catalog.~~) 'fillfactor=%') ff ON true
          JOIN LATERAL (
                SELECT pg_catalog.sum(s.avg_width)::real AS width,
                       pg_catalog.count(*) AS ncols
                  FROM pg_catalog.pg_attribute a
                  JOIN pg_catalog.pg_stats s
                    ON s.schemaname OPERATOR(pg_catalog.=) 'jobq'
                   AND s.tablename OPERATOR(pg_catalog.=) tc.relname
                   AND s.attname OPERATOR(pg_catalog.=) a.attname
                 WHERE a.attrelid OPERATOR(pg_catalog.=) tc.oid
                   AND a.attnum OPERATOR(pg_catalog.>) 0
                   AND NOT a.attisdropped
                   AND (r.keys IS NULL OR a.attnum OPERATOR(pg_catalog.=) ANY (r.keys))) ws
            ON ws.ncols OPERATOR(pg_catalog.>) 0
         WHERE tc.reltuples OPERATOR(pg_catalog.>=) 0
    )
    SELECT pg_catalog.count(*),
           pg_catalog.string_agg(pg_catalog.format('jobq.%s: %s, about %s%% of it bloat',
                                                   e.relname, pg_catalog.pg_size_pretty(e.bytes),
                                                   pg_catalog.round((100 OPERATOR(pg_catalog.-)
                                                       (100 OPERATOR(pg_catalog.*) e.want
                                                        OPERATOR(pg_catalog./) e.bytes))::numeric)),
                                 '; ' ORDER BY e.bytes OPERATOR(pg_catalog.-) e.want DESC)
      INTO n, list
      FROM est e
     WHERE (e.bytes OPERATOR(pg_catalog.-) e.want) OPERATOR(pg_catalog.>) 10485760
       AND e.bytes OPERATOR(pg_catalog.>) (2 OPERATOR(pg_catalog.*) e.want);
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := list;
        hint := 'After a backlog drains, VACUUM keeps the space for reuse; to give it back use VACUUM FULL or REINDEX ... CONCURRENTLY (index), or pg_repack, at a quiet time.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no jobq table or index over 10 MB is more than half bloat; jobq''s tables and indexes take %s',
                                    pg_catalog.pg_size_pretty((SELECT pg_catalog.sum(pg_catalog.pg_total_relation_size(c.oid))
                                                                 FROM pg_catalog.pg_class c
                                                                WHERE c.relnamespace OPERATOR(pg_catalog.=) 'jobq'::regnamespace
                                                                  AND c.relkind OPERATOR(pg_catalog.=) 'r')::bigint));
        hint := NULL;
    END IF;
    RETURN NEXT;

    /*
     * xmin_horizon: what holds back vacuum in this database: sessions with
     * a snapshot (not this one), prepared transactions, replication slots.
     * Other roles' sessions show only with pg_read_all_stats (pg_monitor).
     */
    check_name := 'xmin_horizon';
    SELECT pg_catalog.count(*), pg_catalog.min(h.since),
           pg_catalog.string_agg(h.what, '; ' ORDER BY h.since)
      INTO n, oldest, list
      FROM (SELECT a.xact_start AS since,
                   pg_catalog.format('pid %s (user %s, application %s, %s) has held a snapshot for %s',
                                     a.pid, a.usename, pg_catalog.quote_literal(a.application_name),
                                     a.state,
                                     pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) a.xact_start)) AS what
              FROM pg_catalog.pg_stat_activity a
             WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
               AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
               AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
               AND a.xact_start OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) xmin_threshold)
            UNION ALL
            SELECT p.prepared,
                   pg_catalog.format('prepared transaction %s has been open for %s',
                                     pg_catalog.quote_literal(p.gid),
                                     pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) p.prepared))
              FROM pg_catalog.pg_prepared_xacts p
             WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
               AND p.prepared OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) xmin_threshold)
            UNION ALL
            SELECT NULL::timestamptz,
                   pg_catalog.format('inactive replication slot %s holds xmin %s transactions back',
                                     pg_catalog.quote_literal(r.slot_name),
                                     pg_catalog.age(r.xmin))
              FROM pg_catalog.pg_replication_slots r
             WHERE r.xmin IS NOT NULL
               AND NOT r.active) h;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := list;
        hint := 'Vacuum cannot remove rows that died after the oldest of these started; end it (pg_terminate_backend, COMMIT PREPARED / ROLLBACK PREPARED, pg_drop_replication_slot) or set idle_in_transaction_session_timeout.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no transaction in this database has held a snapshot for more than %s',
                                    xmin_threshold);
        hint := NULL;
    END IF;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION jobq.health(interval, interval, interval) IS
    'one row per check (worker, expired_leases, overdue_schedules, oldest_pending, circuit_breakers, dead_tuples, table_bloat, xmin_horizon) with status ok, warning or critical, a detail and a hint';
/* Jobs run inside the database */

CREATE TABLE jobq.handler (
    kind            text PRIMARY KEY,
    handler         text NOT NULL,
    queue           text COLLATE "C" NOT NULL,
    run_as          regrole NOT NULL,
    allow_superuser boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE jobq.handler IS
    'kinds whose jobs executors run inside the database: the SQL function and the role it runs as';
COMMENT ON COLUMN jobq.handler.handler IS
    'the function''s schema-qualified signature (text, not regprocedure: dumps by name and passes pg_upgrade)';
SELECT pg_catalog.pg_extension_config_dump('jobq.handler', '');

CREATE FUNCTION jobq.register_handler(kind text, handler regprocedure,
                                      queue text DEFAULT 'default',
                                      allow_superuser boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_register_handler'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.register_handler(text, regprocedure, text, boolean) IS
    'run jobs of kind in the database with handler (payload jsonb [, job jsonb]) -> jsonb, as the calling role';

CREATE FUNCTION jobq.unregister_handler(kind text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_unregister_handler'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.unregister_handler(text) IS 'stop running jobs of kind in the database';

CREATE FUNCTION jobq.snooze(delay interval)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_snooze_handler'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.snooze(interval) IS
    'inside a handler: end it and run the job again after delay, without spending a retry';

CREATE VIEW jobq.handlers WITH (security_barrier) AS
SELECT h.kind, h.handler, h.queue, h.run_as::text AS run_as,
       h.allow_superuser, h.created_at, h.updated_at
  FROM jobq.handler h
 WHERE jobq.may_use_queue(h.queue);
COMMENT ON VIEW jobq.handlers IS 'registered job handlers';
/* Privileges, last: nothing of jobq is granted to PUBLIC */

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
