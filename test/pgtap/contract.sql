--
-- contract.sql: the public SQL API of jobq, as fixed by CONTRACT.md
--
-- Run by pg_prove in a database where pgtap and jobq are installed.
-- Extra optional arguments, functions and view columns are allowed by the
-- contract, so views are checked column by column (has_column), not with
-- columns_are.
--
BEGIN;
SELECT plan(106);

SELECT has_schema('jobq', 'schema jobq exists');

--
-- functions: argument types, return type, argument names and defaults
--

-- jobq.enqueue
SELECT has_function('jobq', 'enqueue', ARRAY['text', 'jsonb', 'text', 'integer', 'timestamp with time zone', 'integer', 'text', 'text', 'bigint[]', 'text']);
SELECT function_returns('jobq', 'enqueue', ARRAY['text', 'jsonb', 'text', 'integer', 'timestamp with time zone', 'integer', 'text', 'text', 'bigint[]', 'text'], 'setof record');
SELECT is(pg_get_function_arguments('jobq.enqueue(text,jsonb,text,integer,timestamp with time zone,integer,text,text,bigint[],text)'::regprocedure),
          $$kind text, payload jsonb DEFAULT '{}'::jsonb, queue text DEFAULT 'default'::text, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT now(), max_retries integer DEFAULT NULL::integer, idempotency_key text DEFAULT NULL::text, concurrency_key text DEFAULT NULL::text, depends_on bigint[] DEFAULT NULL::bigint[], on_parent_failure text DEFAULT 'cancel'::text$$,
          'enqueue: argument names, order and defaults (the contract''s, then concurrency_key, then 0.2.0''s depends_on and on_parent_failure)');
SELECT is(pg_get_function_result('jobq.enqueue(text,jsonb,text,integer,timestamp with time zone,integer,text,text,bigint[],text)'::regprocedure),
          'TABLE(job_id bigint, created boolean)',
          'enqueue: result columns');

-- jobq.enqueue_many
SELECT has_function('jobq', 'enqueue_many', ARRAY['text', 'jsonb[]', 'text', 'integer', 'timestamp with time zone', 'integer', 'text[]', 'text', 'bigint[]', 'text']);
SELECT function_returns('jobq', 'enqueue_many', ARRAY['text', 'jsonb[]', 'text', 'integer', 'timestamp with time zone', 'integer', 'text[]', 'text', 'bigint[]', 'text'], 'setof record');
SELECT is(pg_get_function_arguments('jobq.enqueue_many(text,jsonb[],text,integer,timestamp with time zone,integer,text[],text,bigint[],text)'::regprocedure),
          $$kind text, payloads jsonb[], queue text DEFAULT 'default'::text, priority integer DEFAULT 0, run_at timestamp with time zone DEFAULT now(), max_retries integer DEFAULT NULL::integer, idempotency_keys text[] DEFAULT NULL::text[], concurrency_key text DEFAULT NULL::text, depends_on bigint[] DEFAULT NULL::bigint[], on_parent_failure text DEFAULT 'cancel'::text$$,
          'enqueue_many: argument names, order and defaults (the contract''s, then concurrency_key, then 0.2.0''s depends_on and on_parent_failure)');
SELECT is(pg_get_function_result('jobq.enqueue_many(text,jsonb[],text,integer,timestamp with time zone,integer,text[],text,bigint[],text)'::regprocedure),
          'TABLE(job_id bigint, created boolean)',
          'enqueue_many: result columns');

-- workflows (0.2.0)
SELECT is(pg_get_function_result('jobq.parent_results(bigint)'::regprocedure),
          'TABLE(job_id bigint, kind text, status text, result jsonb)',
          'parent_results: result columns');
SELECT is(pg_get_function_arguments('jobq.parent_results(bigint)'::regprocedure), 'job_id bigint',
          'parent_results: argument');
SELECT is(pg_get_function_result('jobq.workflow_status(bigint)'::regprocedure),
          'TABLE(total bigint, blocked bigint, pending bigint, running bigint, completed bigint, failed bigint, cancelled bigint, can_finish boolean)',
          'workflow_status: result columns');
SELECT is(pg_get_function_arguments('jobq.workflow_status(bigint)'::regprocedure), 'root bigint',
          'workflow_status: argument');
SELECT is((SELECT array_agg(a.attname ORDER BY a.attnum)::text[] FROM pg_attribute a
            WHERE a.attrelid = 'jobq.jobs'::regclass AND a.attnum > 0),
          (SELECT array_agg(o.name ORDER BY o.n)::text[]
             FROM pg_proc p, unnest(p.proargnames, p.proargmodes) WITH ORDINALITY AS o(name, mode, n)
            WHERE p.oid = 'jobq.workflow_jobs(bigint)'::regprocedure AND o.mode = 't'),
          'workflow_jobs: the columns of jobq.jobs');

-- jobq.claim
SELECT has_function('jobq', 'claim', ARRAY['text', 'text', 'integer', 'interval', 'text[]', 'interval']);
SELECT function_returns('jobq', 'claim', ARRAY['text', 'text', 'integer', 'interval', 'text[]', 'interval'], 'setof record');
SELECT is(pg_get_function_arguments('jobq.claim(text,text,integer,interval,text[],interval)'::regprocedure),
          $$queue text DEFAULT 'default'::text, worker_id text DEFAULT NULL::text, batch integer DEFAULT 1, lease interval DEFAULT NULL::interval, kinds text[] DEFAULT NULL::text[], wait interval DEFAULT '00:00:00'::interval$$,
          'claim: argument names, order and defaults');
SELECT is(pg_get_function_result('jobq.claim(text,text,integer,interval,text[],interval)'::regprocedure),
          'TABLE(job_id bigint, lease_token bigint, kind text, payload jsonb, priority integer, retry_count integer, max_retries integer, checkpoint jsonb, enqueued_at timestamp with time zone, lease_expires_at timestamp with time zone)',
          'claim: result columns');

-- jobq.complete
SELECT has_function('jobq', 'complete', ARRAY['bigint', 'bigint', 'jsonb']);
SELECT function_returns('jobq', 'complete', ARRAY['bigint', 'bigint', 'jsonb'], 'boolean');
SELECT is(pg_get_function_arguments('jobq.complete(bigint,bigint,jsonb)'::regprocedure),
          $$job_id bigint, lease_token bigint, result jsonb DEFAULT NULL::jsonb$$,
          'complete: argument names, order and defaults');

-- jobq.complete_many
SELECT has_function('jobq', 'complete_many', ARRAY['bigint[]', 'bigint[]', 'jsonb[]']);
SELECT function_returns('jobq', 'complete_many', ARRAY['bigint[]', 'bigint[]', 'jsonb[]'], 'integer');
SELECT is(pg_get_function_arguments('jobq.complete_many(bigint[],bigint[],jsonb[])'::regprocedure),
          $$job_ids bigint[], lease_tokens bigint[], results jsonb[] DEFAULT NULL::jsonb[]$$,
          'complete_many: argument names, order and defaults');

-- jobq.fail (0.3.0: details, the stack trace; the five-argument form is gone,
-- its calls resolve to this one)
SELECT has_function('jobq', 'fail', ARRAY['bigint', 'bigint', 'text', 'boolean', 'interval', 'text']);
SELECT function_returns('jobq', 'fail', ARRAY['bigint', 'bigint', 'text', 'boolean', 'interval', 'text'], 'text');
SELECT is(pg_get_function_arguments('jobq.fail(bigint,bigint,text,boolean,interval,text)'::regprocedure),
          $$job_id bigint, lease_token bigint, error text, retryable boolean DEFAULT true, retry_in interval DEFAULT NULL::interval, details text DEFAULT NULL::text$$,
          'fail: argument names, order and defaults');
SELECT hasnt_function('jobq', 'fail', ARRAY['bigint', 'bigint', 'text', 'boolean', 'interval']);

-- jobq.extend
SELECT has_function('jobq', 'extend', ARRAY['bigint', 'bigint', 'interval']);
SELECT function_returns('jobq', 'extend', ARRAY['bigint', 'bigint', 'interval'], 'timestamp with time zone');
SELECT is(pg_get_function_arguments('jobq.extend(bigint,bigint,interval)'::regprocedure),
          $$job_id bigint, lease_token bigint, lease interval$$,
          'extend: argument names, order and defaults');

-- jobq.checkpoint
SELECT has_function('jobq', 'checkpoint', ARRAY['bigint', 'bigint', 'jsonb']);
SELECT function_returns('jobq', 'checkpoint', ARRAY['bigint', 'bigint', 'jsonb'], 'boolean');
SELECT is(pg_get_function_arguments('jobq.checkpoint(bigint,bigint,jsonb)'::regprocedure),
          $$job_id bigint, lease_token bigint, data jsonb$$,
          'checkpoint: argument names, order and defaults');

-- jobq.priority
SELECT has_function('jobq', 'priority', ARRAY['text']);
SELECT function_returns('jobq', 'priority', ARRAY['text'], 'integer');

-- jobq.priority_label
SELECT has_function('jobq', 'priority_label', ARRAY['integer']);
SELECT function_returns('jobq', 'priority_label', ARRAY['integer'], 'text');

-- jobq.configure
SELECT has_function('jobq', 'configure', ARRAY['text', 'integer', 'interval', 'interval', 'interval', 'double precision', 'interval', 'interval', 'integer', 'integer', 'integer', 'interval', 'integer']);
SELECT function_returns('jobq', 'configure', ARRAY['text', 'integer', 'interval', 'interval', 'interval', 'double precision', 'interval', 'interval', 'integer', 'integer', 'integer', 'interval', 'integer'], 'void');
-- the settings the contract names come first, in this order; more may follow
SELECT is((string_to_array(pg_get_function_identity_arguments(
             'jobq.configure(text,integer,interval,interval,interval,double precision,interval,interval,integer,integer,integer,interval,integer)'::regprocedure),
             ', '))[1:6],
          ARRAY['queue text', 'max_retries integer', 'lease interval', 'backoff_base interval',
                'backoff_cap interval', 'backoff_jitter double precision'],
          'configure: queue and the backoff settings by name');

--
-- views
--

-- jobq.jobs
SELECT has_view('jobq', 'jobs', 'view jobq.jobs exists');
SELECT has_column('jobq', 'jobs', 'job_id', 'jobq.jobs has column job_id');
SELECT col_type_is('jobq', 'jobs', 'job_id', 'bigint', 'jobq.jobs.job_id is bigint');
SELECT has_column('jobq', 'jobs', 'queue', 'jobq.jobs has column queue');
SELECT col_type_is('jobq', 'jobs', 'queue', 'text', 'jobq.jobs.queue is text');
SELECT has_column('jobq', 'jobs', 'kind', 'jobq.jobs has column kind');
SELECT col_type_is('jobq', 'jobs', 'kind', 'text', 'jobq.jobs.kind is text');
SELECT has_column('jobq', 'jobs', 'payload', 'jobq.jobs has column payload');
SELECT col_type_is('jobq', 'jobs', 'payload', 'jsonb', 'jobq.jobs.payload is jsonb');
SELECT has_column('jobq', 'jobs', 'priority', 'jobq.jobs has column priority');
SELECT col_type_is('jobq', 'jobs', 'priority', 'integer', 'jobq.jobs.priority is integer');
SELECT has_column('jobq', 'jobs', 'status', 'jobq.jobs has column status');
SELECT col_type_is('jobq', 'jobs', 'status', 'text', 'jobq.jobs.status is text');
SELECT has_column('jobq', 'jobs', 'retry_count', 'jobq.jobs has column retry_count');
SELECT col_type_is('jobq', 'jobs', 'retry_count', 'integer', 'jobq.jobs.retry_count is integer');
SELECT has_column('jobq', 'jobs', 'max_retries', 'jobq.jobs has column max_retries');
SELECT col_type_is('jobq', 'jobs', 'max_retries', 'integer', 'jobq.jobs.max_retries is integer');
SELECT has_column('jobq', 'jobs', 'idempotency_key', 'jobq.jobs has column idempotency_key');
SELECT col_type_is('jobq', 'jobs', 'idempotency_key', 'text', 'jobq.jobs.idempotency_key is text');
SELECT has_column('jobq', 'jobs', 'run_at', 'jobq.jobs has column run_at');
SELECT col_type_is('jobq', 'jobs', 'run_at', 'timestamp with time zone', 'jobq.jobs.run_at is timestamp with time zone');
SELECT has_column('jobq', 'jobs', 'claimed_at', 'jobq.jobs has column claimed_at');
SELECT col_type_is('jobq', 'jobs', 'claimed_at', 'timestamp with time zone', 'jobq.jobs.claimed_at is timestamp with time zone');
SELECT has_column('jobq', 'jobs', 'worker_id', 'jobq.jobs has column worker_id');
SELECT col_type_is('jobq', 'jobs', 'worker_id', 'text', 'jobq.jobs.worker_id is text');
SELECT has_column('jobq', 'jobs', 'lease_expires_at', 'jobq.jobs has column lease_expires_at');
SELECT col_type_is('jobq', 'jobs', 'lease_expires_at', 'timestamp with time zone', 'jobq.jobs.lease_expires_at is timestamp with time zone');
SELECT has_column('jobq', 'jobs', 'last_error', 'jobq.jobs has column last_error');
SELECT col_type_is('jobq', 'jobs', 'last_error', 'text', 'jobq.jobs.last_error is text');
SELECT has_column('jobq', 'jobs', 'result', 'jobq.jobs has column result');
SELECT col_type_is('jobq', 'jobs', 'result', 'jsonb', 'jobq.jobs.result is jsonb');
SELECT has_column('jobq', 'jobs', 'checkpoint', 'jobq.jobs has column checkpoint');
SELECT col_type_is('jobq', 'jobs', 'checkpoint', 'jsonb', 'jobq.jobs.checkpoint is jsonb');
SELECT has_column('jobq', 'jobs', 'created_at', 'jobq.jobs has column created_at');
SELECT col_type_is('jobq', 'jobs', 'created_at', 'timestamp with time zone', 'jobq.jobs.created_at is timestamp with time zone');
SELECT has_column('jobq', 'jobs', 'updated_at', 'jobq.jobs has column updated_at');
SELECT col_type_is('jobq', 'jobs', 'updated_at', 'timestamp with time zone', 'jobq.jobs.updated_at is timestamp with time zone');
SELECT has_column('jobq', 'jobs', 'finished_at', 'jobq.jobs has column finished_at');
SELECT col_type_is('jobq', 'jobs', 'finished_at', 'timestamp with time zone', 'jobq.jobs.finished_at is timestamp with time zone');

-- jobq.dead_letter
SELECT has_view('jobq', 'dead_letter', 'view jobq.dead_letter exists');
SELECT has_column('jobq', 'dead_letter', 'job_id', 'jobq.dead_letter has column job_id');
SELECT has_column('jobq', 'dead_letter', 'queue', 'jobq.dead_letter has column queue');
SELECT has_column('jobq', 'dead_letter', 'kind', 'jobq.dead_letter has column kind');
SELECT has_column('jobq', 'dead_letter', 'payload', 'jobq.dead_letter has column payload');
SELECT has_column('jobq', 'dead_letter', 'status', 'jobq.dead_letter has column status');
SELECT has_column('jobq', 'dead_letter', 'retry_count', 'jobq.dead_letter has column retry_count');
SELECT has_column('jobq', 'dead_letter', 'max_retries', 'jobq.dead_letter has column max_retries');
SELECT has_column('jobq', 'dead_letter', 'last_error', 'jobq.dead_letter has column last_error');
SELECT has_column('jobq', 'dead_letter', 'finished_at', 'jobq.dead_letter has column finished_at');

-- jobq.queue_stats
SELECT has_view('jobq', 'queue_stats', 'view jobq.queue_stats exists');
SELECT has_column('jobq', 'queue_stats', 'queue', 'jobq.queue_stats has column queue');
SELECT col_type_is('jobq', 'queue_stats', 'queue', 'text', 'jobq.queue_stats.queue is text');
SELECT has_column('jobq', 'queue_stats', 'pending', 'jobq.queue_stats has column pending');
SELECT has_column('jobq', 'queue_stats', 'running', 'jobq.queue_stats has column running');
SELECT has_column('jobq', 'queue_stats', 'completed', 'jobq.queue_stats has column completed');
SELECT has_column('jobq', 'queue_stats', 'failed', 'jobq.queue_stats has column failed');
SELECT has_column('jobq', 'queue_stats', 'cancelled', 'jobq.queue_stats has column cancelled');
SELECT has_column('jobq', 'queue_stats', 'oldest_pending_age', 'jobq.queue_stats has column oldest_pending_age');
SELECT col_type_is('jobq', 'queue_stats', 'oldest_pending_age', 'interval', 'jobq.queue_stats.oldest_pending_age is interval');
SELECT has_column('jobq', 'queue_stats', 'paused', 'jobq.queue_stats has column paused');
SELECT col_type_is('jobq', 'queue_stats', 'paused', 'boolean', 'jobq.queue_stats.paused is boolean');
SELECT col_type_is('jobq', 'queue_stats', 'blocked', 'bigint', 'jobq.queue_stats.blocked is bigint (0.2.0)');

-- queue_stats counts are bigint (count(*)) or at least integers
SELECT ok((SELECT bool_and(format_type(a.atttypid, a.atttypmod) IN ('bigint', 'integer'))
             FROM pg_attribute a
            WHERE a.attrelid = 'jobq.queue_stats'::regclass
              AND a.attname IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
          'jobq.queue_stats counts are integers');

-- jobq.dead_letter holds the failed jobs and no others: one job in each other
-- state next to one failed job, in a queue of this test's own (the
-- transaction is rolled back, and the background worker never sees it)
CREATE TEMP TABLE dl_job (status text PRIMARY KEY, job_id bigint NOT NULL);
DO $$
DECLARE
    c record;
BEGIN
    -- failed: claimed, then failed with no retry left
    INSERT INTO dl_job SELECT 'failed', job_id
      FROM jobq.enqueue('dl', queue => 'contract-dl', max_retries => 0);
    SELECT * INTO c FROM jobq.claim('contract-dl');
    PERFORM jobq.fail(c.job_id, c.lease_token, 'boom');
    -- completed
    INSERT INTO dl_job SELECT 'completed', job_id FROM jobq.enqueue('dl', queue => 'contract-dl');
    SELECT * INTO c FROM jobq.claim('contract-dl');
    PERFORM jobq.complete(c.job_id, c.lease_token);
    -- pending after a failed attempt with retries left
    INSERT INTO dl_job SELECT 'retrying', job_id
      FROM jobq.enqueue('dl', queue => 'contract-dl', max_retries => 3);
    SELECT * INTO c FROM jobq.claim('contract-dl');
    PERFORM jobq.fail(c.job_id, c.lease_token, 'again');
    -- running
    INSERT INTO dl_job SELECT 'running', job_id
      FROM jobq.enqueue('dl', queue => 'contract-dl', run_at => now() - interval '1 hour');
    PERFORM jobq.claim('contract-dl');
    -- cancelled, and pending
    INSERT INTO dl_job SELECT 'cancelled', job_id FROM jobq.enqueue('dl', queue => 'contract-dl');
    PERFORM jobq.cancel((SELECT job_id FROM dl_job WHERE status = 'cancelled'));
    INSERT INTO dl_job SELECT 'pending', job_id
      FROM jobq.enqueue('dl', queue => 'contract-dl', run_at => now() + interval '1 hour');
END
$$;
SELECT results_eq(
    $$SELECT j.status, d.status FROM jobq.jobs j JOIN dl_job d USING (job_id) ORDER BY d.status$$,
    $$VALUES ('cancelled', 'cancelled'), ('completed', 'completed'), ('failed', 'failed'),
             ('pending', 'pending'), ('pending', 'retrying'), ('running', 'running')$$,
    'the jobs planted for jobq.dead_letter are in the states they were meant to be in');
SELECT results_eq(
    $$SELECT job_id, status, last_error FROM jobq.dead_letter WHERE queue = 'contract-dl'$$,
    $$SELECT job_id, 'failed'::text, 'boom'::text FROM dl_job WHERE status = 'failed'$$,
    'jobq.dead_letter lists the failed job, with its error, and none of the others');

SELECT * FROM finish();
ROLLBACK;
