/*
 * extension/schema/10_tables.sql -- jobq's sequences and tables
 *
 * Every table of jobq, its columns, defaults and constraints, with the
 * sequences their ids come from.  Indexes are in 20_indexes.sql.  Only
 * jobq's functions write these tables; roles reach them through the
 * functions and the views (80_views.sql).
 *
 * Storage layout.  jobq.job holds one row per job for its whole life.  A
 * pending job is also in exactly one of two small "set" tables:
 *   jobq.ready      due jobs, in claim order (queue, -priority, run_at, job_id)
 *   jobq.scheduled  jobs whose run_at is still in the future
 * A claim deletes its rows from jobq.ready; a retry or a delayed job
 * re-enters as a new row there while its job_id stays.  Finished jobs are
 * never in the index a claim walks, and the claim starts its index scan at a
 * per-queue position kept in shared memory, so it never walks the dead
 * entries earlier claims left behind.  A job that waits for other jobs
 * (depends_on) is 'blocked': in neither set table until its parents have
 * finished (jobq.dependency, jobq.dependent).
 */

/* ---------------------------------------------------------------------
 * Sequences
 * ------------------------------------------------------------------- */

CREATE SEQUENCE jobq.job_id_seq AS bigint;
COMMENT ON SEQUENCE jobq.job_id_seq IS 'job ids, in enqueue order';

CREATE SEQUENCE jobq.schedule_id_seq AS bigint;
COMMENT ON SEQUENCE jobq.schedule_id_seq IS 'schedule ids';

/* ---------------------------------------------------------------------
 * Queues and jobs
 * ------------------------------------------------------------------- */

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
-- status is one of blocked, pending, running, completed, failed,
-- cancelled.  Only jobq's own functions write this table (nobody else is
-- granted to), so it has no CHECK constraint: PostgreSQL re-reads and
-- re-prepares a CHECK expression in every statement that writes a row,
-- about a fifth of an enqueue.

CREATE TABLE jobq.ready (
    queue        text COLLATE "C" NOT NULL,
    neg_priority integer NOT NULL,
    run_at       timestamptz NOT NULL,
    job_id       bigint NOT NULL,
    kind         text NOT NULL,
    concurrency_key text
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);
COMMENT ON TABLE jobq.ready IS 'due pending jobs, one row each; claims delete from here';

CREATE TABLE jobq.scheduled (
    queue    text COLLATE "C" NOT NULL,
    run_at   timestamptz NOT NULL,
    job_id   bigint NOT NULL,
    priority integer NOT NULL,
    kind     text NOT NULL,
    concurrency_key text
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01);
COMMENT ON TABLE jobq.scheduled IS 'pending jobs whose run_at is in the future (delays, retry backoff)';

CREATE TABLE jobq.rate_window (
    queue      text COLLATE "C" NOT NULL,
    claimed_at timestamptz NOT NULL
);
COMMENT ON TABLE jobq.rate_window IS
    'claims of rate-limited queues within their current rate_period (a sliding window log)';

CREATE TABLE jobq.idempotency_key (
    kind       text NOT NULL,
    key        text NOT NULL,
    job_id     bigint NOT NULL,
    expires_at timestamptz,
    PRIMARY KEY (kind, key)
);
COMMENT ON TABLE jobq.idempotency_key IS
    'reserved (kind, idempotency key) pairs; kept while the job exists and for jobq.idempotency_retention after it finished';
COMMENT ON COLUMN jobq.idempotency_key.expires_at IS
    'when the key may be pruned: NULL while its job exists, and for ever when jobq.idempotency_retention is -1';

CREATE TABLE jobq.attempt (
    job_id      bigint NOT NULL,
    attempt     integer NOT NULL,
    worker_id   text,
    started_at  timestamptz,
    finished_at timestamptz NOT NULL,
    outcome     text NOT NULL,
    error       text,
    details     text,
    queue       text COLLATE "C",
    PRIMARY KEY (job_id, attempt)
);
COMMENT ON TABLE jobq.attempt IS
    'a job''s history: its attempts that failed (failed, lease expired, cancelled) and its edits by jobq.update_job (outcome edited, numbered -1, -2, ...); a successful attempt is on the job row';
COMMENT ON COLUMN jobq.attempt.details IS
    'the longer story of the attempt: a stack trace, given to jobq.fail as details (at most jobq.max_details_length bytes); for an edit, what changed';
COMMENT ON COLUMN jobq.attempt.queue IS
    'the job''s queue, for an attempt that ended otherwise than by a cancel or an edit (0.3.7 on; NULL for those): jobq.kind_stats reads a queue''s failures';

/* ---------------------------------------------------------------------
 * Access control: capabilities of roles on queues
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

/* ---------------------------------------------------------------------
 * Cron schedules
 * ------------------------------------------------------------------- */

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

/* ---------------------------------------------------------------------
 * Handlers: jobs run inside the database
 * ------------------------------------------------------------------- */

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

/* ---------------------------------------------------------------------
 * Workflows: jobs that wait for other jobs
 * ------------------------------------------------------------------- */

/*
 * A job enqueued with depends_on is 'blocked' (no row in jobq.ready or
 * jobq.scheduled, so never claimed) until every parent has finished.
 * jobq.dependency holds one row per (parent, child) edge, with the parent's
 * outcome once it finished; jobq.dependent one row per child with how many
 * parents are still unfinished.  Finishing a parent settles its edges:
 * O(its children), each child's counter decremented under the child's row
 * lock, so a child unblocks exactly once however its parents finish.
 */

CREATE TABLE jobq.dependency (
    parent_id     bigint NOT NULL,
    child_id      bigint NOT NULL,
    parent_status text,
    parent_queue  text COLLATE "C",
    PRIMARY KEY (parent_id, child_id)
);
COMMENT ON TABLE jobq.dependency IS
    'one row per (parent, child) dependency; parent_status is the parent''s outcome once it finished (NULL before)';
COMMENT ON COLUMN jobq.dependency.parent_queue IS
    'the parent''s queue (0.3.5): jobq.workflows finds the roots of a queue without reading other queues'' edges; NULL in an edge whose parent was gone when the column came';

CREATE TABLE jobq.dependent (
    job_id            bigint PRIMARY KEY,
    parents_left      integer NOT NULL,
    on_parent_failure text NOT NULL,
    failed_parent     bigint,
    CONSTRAINT dependent_on_parent_failure_check
        CHECK (on_parent_failure OPERATOR(pg_catalog.=) ANY (ARRAY['cancel', 'run']::text[]))
);
COMMENT ON TABLE jobq.dependent IS
    'one row per job enqueued with depends_on: its unfinished parents, what a failed parent does to it, and the first parent that ended failed or cancelled';

-- Settling does not wait for a client (one that keeps its own dependent
-- locked in an open transaction must not stall another role's completion,
-- nor the reaper): a child still held after jobq.settle_lock_wait is left
-- unsettled and its parent noted here; the background worker settles it
-- again at retry_at, backing off by attempts.  A settle or retry that a
-- background pass's budget (jobq.pass_budget) cut short leaves the rest
-- here too, due at once.  The worker takes the due rows queue by queue, by
-- the parent's queue (0.3.3), so that one tenant's backlog does not keep
-- another's waiting.
CREATE TABLE jobq.settle_deferred (
    parent_id   bigint PRIMARY KEY,
    retry_at    timestamptz NOT NULL,
    attempts    integer NOT NULL,
    retried     boolean NOT NULL DEFAULT false,
    queue       text COLLATE "C" NOT NULL
);
COMMENT ON TABLE jobq.settle_deferred IS
    'parents whose dependents could not all be settled when they finished or were retried (a dependent was locked, or a background pass ran out of time): the background worker settles them again at retry_at';
COMMENT ON COLUMN jobq.settle_deferred.retried IS
    'a retry of the parent passed dependents over: the worker gives them the retry''s treatment';
COMMENT ON COLUMN jobq.settle_deferred.queue IS
    'the parent''s queue: the worker settles deferred parents queue by queue, each in turn';

/* ---------------------------------------------------------------------
 * The application's workers: a registry they keep with a heartbeat
 * ------------------------------------------------------------------- */

-- Keyed by role, then worker id: a worker id is the role's own, so no role
-- can take another's id first (0.3.2; the key was worker_id alone).  The
-- role is a regrole, as in jobq.permission, so that a dump names it.
CREATE TABLE jobq.app_worker (
    worker_id    text NOT NULL,
    registered_by regrole NOT NULL,
    queues       text[] NOT NULL,
    info         jsonb NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    CONSTRAINT app_worker_pkey PRIMARY KEY (registered_by, worker_id)
);
COMMENT ON TABLE jobq.app_worker IS
    'the application''s worker processes, as they registered (jobq.register_worker) and last heartbeat; pruned a day after they were last seen';

/* ---------------------------------------------------------------------
 * What pg_dump keeps
 * ------------------------------------------------------------------- */

/*
 * The tables and sequences whose rows are the user's data: pg_dump dumps
 * their rows (a plain dump prints no member of an extension otherwise).
 * jobq.rate_window is left out: its rows last one rate_period.  A new
 * table goes at the end of this list: pg_extension.extconfig keeps the
 * order of the calls, and an upgraded database must have the same order.
 */
SELECT pg_catalog.pg_extension_config_dump('jobq.queue', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.job', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.ready', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.scheduled', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.idempotency_key', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.attempt', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.permission', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.schedule_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.handler', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.dependency', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.dependent', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.settle_deferred', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.app_worker', '');
