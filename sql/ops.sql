--
-- Operations: jobq.queues, queue_stats (last hour, breaker, limits),
-- jobq.job (a job's attempts), job_by_key, kind_stats, health
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;
-- the test's start: what it creates carries a time from then on
SELECT now() AS t0 \gset

-- retries are due at once in queue 'ops', so the test never waits on backoff
SELECT jobq.configure('ops', max_retries => 2, lease => '10 minutes',
                      backoff_base => '0', backoff_cap => '0', backoff_jitter => 0,
                      max_concurrency => 5, max_per_key => 2, rate_limit => 100,
                      rate_period => '1 minute', breaker_threshold => 10);

--
-- jobq.queues: every setting of configure, and the breaker
--
SELECT queue, paused, max_retries, lease, backoff_base, backoff_cap, backoff_jitter,
       retention_completed, retention_failed, max_concurrency, max_per_key,
       rate_limit, rate_period, breaker_threshold, breaker_state, breaker_failures,
       breaker_tripped_at, breaker_reason,
       created_at BETWEEN :'t0' AND now() AS created, updated_at >= created_at AS updated
  FROM jobq.queues WHERE queue = 'ops' \gx
-- a queue created on first use has the defaults and no limits
SELECT created FROM jobq.enqueue('noop', queue => 'defaults');
SELECT queue, paused, max_retries, lease, backoff_base, backoff_cap, backoff_jitter,
       retention_completed, retention_failed, max_concurrency, max_per_key,
       rate_limit, rate_period, breaker_threshold, breaker_state, breaker_failures
  FROM jobq.queues WHERE queue = 'defaults';
SELECT jobq.cancel(job_id) AS cancelled FROM jobq.jobs WHERE queue = 'defaults';

--
-- jobq.job(job_id): one row per attempt
--
SELECT job_id AS a FROM jobq.enqueue('mail', '{"to": "ann"}', queue => 'ops',
                                     idempotency_key => 'mail-ann') \gset

-- a job never claimed has no attempt yet; neither has a job that does not exist
SELECT count(*) AS attempts FROM jobq.job(:a);
SELECT count(*) AS attempts FROM jobq.job(-1);
SELECT count(*) AS attempts FROM jobq.job(NULL);

-- a: claimed by w1, fails, claimed again by w2: a failed and a running attempt
SELECT lease_token AS tok FROM jobq.claim('ops', worker_id => 'w1') WHERE job_id = :a \gset
SELECT jobq.fail(:a, :tok, 'smtp timeout') AS status;
SELECT lease_token AS tok FROM jobq.claim('ops', worker_id => 'w2') WHERE job_id = :a \gset
-- (an attempt starts after the one before it finished, and finishes after
-- it started; the running one has no finish yet)
SELECT attempt, outcome, worker_id, error,
       started_at >= COALESCE(lag(finished_at) OVER (ORDER BY attempt), :'t0') AS started,
       finished_at >= started_at AS finished,
       duration >= interval '0' AS duration_ok,
       lease_expires_at > now() AS leased,
       result
  FROM jobq.job(:a);
-- the running attempt's lease and start are the job's
SELECT j.lease_expires_at = s.lease_expires_at AS same_lease,
       j.claimed_at = s.started_at AS same_start
  FROM jobq.jobs j, jobq.job(:a) s
 WHERE j.job_id = :a AND s.outcome = 'running';

-- it completes: the last attempt shows the result, and no lease
SELECT jobq.checkpoint(:a, :tok, '{"step": 2}') AS checkpointed;
SELECT jobq.complete(:a, :tok, '{"message_id": "m-1"}') AS completed;
SELECT attempt, outcome, worker_id, error,
       finished_at IS NOT NULL AS finished,
       duration >= interval '0' AS duration_ok,
       lease_expires_at, result
  FROM jobq.job(:a);
-- a completed attempt lasts from claim to finish
SELECT s.duration = j.finished_at - j.claimed_at AS duration_is_claim_to_finish
  FROM jobq.jobs j, jobq.job(:a) s
 WHERE j.job_id = :a AND s.outcome = 'completed';

-- b: no retries, fails for good: one failed attempt
SELECT job_id AS b FROM jobq.enqueue('mail', '{"to": "bob"}', queue => 'ops',
                                     max_retries => 0) \gset
SELECT lease_token AS tok FROM jobq.claim('ops', worker_id => 'w1') WHERE job_id = :b \gset
SELECT jobq.fail(:b, :tok, 'mailbox full') AS status;
SELECT attempt, outcome, worker_id, error, finished_at IS NOT NULL AS finished
  FROM jobq.job(:b);

-- c: cancelled while running
SELECT job_id AS c FROM jobq.enqueue('mail', '{"to": "cy"}', queue => 'ops') \gset
SELECT lease_token AS tok FROM jobq.claim('ops', worker_id => 'w3') WHERE job_id = :c \gset
SELECT jobq.cancel(:c) AS cancelled;
SELECT attempt, outcome, worker_id, error FROM jobq.job(:c);

-- d: its lease expires and it is reaped, runs again and fails for good; an
-- operator retries it, and it completes.  Claimed and reaped in one
-- transaction, out of the background worker's sight: jobq.reap() finds
-- exactly this one expired lease (pg_sleep waits out the 1 ms lease).
SELECT job_id AS d FROM jobq.enqueue('mail', '{"to": "di"}', queue => 'ops',
                                     max_retries => 1) \gset
BEGIN;
SELECT job_id = :d AS claimed_d FROM jobq.claim('ops', worker_id => 'w4', lease => '1 ms');
SELECT pg_sleep(0.01);
SELECT jobq.reap() AS reaped;
COMMIT;
SELECT status, retry_count, last_error FROM jobq.jobs WHERE job_id = :d;
SELECT lease_token AS tok FROM jobq.claim('ops', worker_id => 'w5') WHERE job_id = :d \gset
SELECT jobq.fail(:d, :tok, 'still down') AS status;
SELECT jobq.retry(:d) AS retried;
SELECT lease_token AS tok FROM jobq.claim('ops', worker_id => 'w6') WHERE job_id = :d \gset
SELECT jobq.complete(:d, :tok) AS completed;
SELECT attempt, outcome, worker_id, error, finished_at IS NOT NULL AS finished
  FROM jobq.job(:d);

-- jobq.reap(batch): the oldest expired leases first, across queues, at most
-- batch of them; a lease not expired stays.  In one transaction, out of the
-- background worker's sight.
BEGIN;
SELECT count(*) AS enqueued
  FROM unnest(ARRAY['reap-a', 'reap-b', 'reap-c', 'reap-d']) q,
       LATERAL jobq.enqueue('r', '{}', queue => q) e;
SELECT count(*) AS claimed FROM jobq.claim('reap-a', lease => '1 ms');
SELECT count(*) AS claimed FROM jobq.claim('reap-b', lease => '2 ms');
SELECT count(*) AS claimed FROM jobq.claim('reap-c', lease => '3 ms');
SELECT count(*) AS claimed FROM jobq.claim('reap-d', lease => '1 hour');
SELECT pg_sleep(0.02);
SELECT jobq.reap(2) AS reaped;
SELECT queue, status, retry_count FROM jobq.job WHERE queue LIKE 'reap-%' ORDER BY queue;
SELECT jobq.reap(10) AS reaped;
SELECT queue, status, retry_count FROM jobq.job WHERE queue LIKE 'reap-%' ORDER BY queue;
ROLLBACK;

--
-- jobq.job_by_key: state by business key
--
SELECT job_id = :a AS is_a, status, kind, idempotency_key, result, key_expires_at
  FROM jobq.job_by_key('mail', 'mail-ann');
SELECT count(*) AS found FROM jobq.job_by_key('mail', 'no-such-key');
SELECT count(*) AS found FROM jobq.job_by_key('other-kind', 'mail-ann');

--
-- jobq.kind_stats over a window
--
-- kind 'timed': twenty jobs that ran 1 s .. 20 s, and two dead-lettered
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('timed', array_fill('{}'::jsonb, ARRAY[22]), queue => 'timing',
                         max_retries => 0);
CREATE TEMP TABLE t AS
  SELECT c.*, row_number() OVER (ORDER BY c.job_id) AS n
    FROM jobq.claim('timing', batch => 22) c;
SELECT count(*) FILTER (WHERE jobq.complete(job_id, lease_token)) AS completed
  FROM t WHERE n <= 20;
SELECT count(*) FILTER (WHERE jobq.fail(job_id, lease_token, 'bad') = 'failed') AS failed
  FROM t WHERE n > 20;
-- give the completed ones known run times (claimed n seconds before they finished)
UPDATE jobq.job j SET claimed_at = j.finished_at - t.n * interval '1 second'
  FROM t WHERE j.job_id = t.job_id AND t.n <= 20;

-- kind 'mail' (jobs a to d above): a and d completed, b failed for good;
-- four failed attempts (a 1, b 1, d 1 and 2), one an expired lease; three
-- were retried (b's was its last); its run times are not known in advance
SELECT kind, completed, failed, failure_rate, failed_attempts, lease_expired, retries,
       mean_duration <= max_duration AS mean_ok, p95_duration <= max_duration AS p95_ok
  FROM jobq.kind_stats() ORDER BY kind;
SELECT * FROM jobq.kind_stats('1 hour', queue => 'timing');
SELECT count(*) AS kinds FROM jobq.kind_stats('1 hour', queue => 'no-such-queue');
-- the view is the function over the last hour
SELECT count(*) AS differences
  FROM ((SELECT * FROM jobq.kind_stats EXCEPT ALL SELECT * FROM jobq.kind_stats())
        UNION ALL
        (SELECT * FROM jobq.kind_stats() EXCEPT ALL SELECT * FROM jobq.kind_stats)) x;
-- a window that ended before anything finished counts nothing
SELECT count(*) AS kinds FROM jobq.kind_stats('0');

--
-- jobq.queue_stats: pending split, last hour, breaker, limits
--
SELECT created FROM jobq.enqueue('later', queue => 'ops', run_at => now() + interval '1 hour');
SELECT created FROM jobq.enqueue('mail', queue => 'ops');
SELECT queue, pending, ready, delayed, running, completed, failed, cancelled,
       completed_last_hour, failed_last_hour, paused, breaker_state,
       max_concurrency, max_per_key, rate_limit, rate_period, breaker_threshold
  FROM jobq.queue_stats ORDER BY queue;
-- what finished over an hour ago counts in completed but not in the last hour
UPDATE jobq.job SET finished_at = finished_at - interval '2 hours'
 WHERE queue = 'timing' AND status = 'completed'
   AND job_id IN (SELECT job_id FROM t WHERE n <= 5);
SELECT queue, completed, completed_last_hour, failed, failed_last_hour
  FROM jobq.queue_stats WHERE queue = 'timing';
SELECT kind, completed FROM jobq.kind_stats('1 hour', queue => 'timing');
SELECT kind, completed FROM jobq.kind_stats('3 hours', queue => 'timing');

-- a pruned job whose key is still reserved: job_id and key only
SELECT jobq.purge('ops', 'completed') AS purged;
SELECT job_id = :a AS is_a, status IS NULL AS pruned, kind, idempotency_key,
       key_expires_at > now() AS key_reserved
  FROM jobq.job_by_key('mail', 'mail-ann');
SELECT count(*) AS attempts FROM jobq.job(:a);

--
-- jobq.health()
--
-- wait (up to 30 s) for the background worker to serve this database
DO $$
BEGIN
    FOR i IN 1..300 LOOP
        EXIT WHEN EXISTS (SELECT FROM jobq.workers
                           WHERE role = 'worker' AND database = current_database()
                             AND last_run_at IS NOT NULL);
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT check_name, status, hint IS NULL AS no_hint FROM jobq.health();
SELECT detail ~ '^jobq worker pid \d+, up ' AS worker_detail
  FROM jobq.health() WHERE check_name = 'worker';

-- an expired lease the worker has not reaped: critical (the claim is not
-- committed yet, so the worker cannot see it)
BEGIN;
SELECT job_id AS stuck FROM jobq.enqueue('stuck', queue => 'leases') \gset
SELECT job_id = :stuck AS claimed FROM jobq.claim('leases', lease => '1 ms');
SELECT pg_sleep(0.01);
SELECT status,
       detail ~ ('^1 running jobs with a lease expired more than 00:00:00 ago; the oldest, job '
                 || :stuck || ', expired \d\d:\d\d:\d\d ago$') AS detail_ok,
       hint
  FROM jobq.health(grace => '0') WHERE check_name = 'expired_leases';
-- within the grace period (1 minute) it is fine
SELECT status, detail FROM jobq.health() WHERE check_name = 'expired_leases';
-- past it, critical, and the detail says how long ago it expired
UPDATE jobq.job SET lease_expires_at = now() - interval '1 hour' WHERE job_id = :stuck;
SELECT status,
       detail ~ ('^1 running jobs with a lease expired more than 00:01:00 ago; the oldest, job '
                 || :stuck || ', expired 01:00:\d\d ago$') AS detail_ok
  FROM jobq.health() WHERE check_name = 'expired_leases';
ROLLBACK;

-- a schedule the worker has not fired: critical
BEGIN;
SELECT jobq.schedule('nightly', '0 3 * * *', 'report') > 0 AS scheduled;
UPDATE jobq.schedule SET next_fire_at = now() - interval '1 hour' WHERE name = 'nightly';
SELECT status, detail ~ '^1 schedules due more than 00:01:00 ago, the oldest due 01:00:\d\d ago: ''nightly''$' AS detail_ok,
       hint
  FROM jobq.health() WHERE check_name = 'overdue_schedules';
-- a paused schedule is not overdue
SELECT jobq.pause_schedule('nightly') AS paused;
SELECT status FROM jobq.health() WHERE check_name = 'overdue_schedules';
ROLLBACK;

-- a due job waiting longer than the threshold: warning, unless its queue is paused
SELECT created FROM jobq.enqueue('slow', queue => 'backlog', run_at => now() - interval '1 hour');
SELECT status, detail ~ '^1 queues have a due job waiting longer than 00:05:00: ''backlog'' \(01:00:\d\d\)$' AS detail_ok,
       hint
  FROM jobq.health() WHERE check_name = 'oldest_pending';
SELECT status, detail ~ '^the oldest due job has waited 01:00:\d\d \(threshold 02:00:00\)$' AS detail_ok
  FROM jobq.health(oldest_pending_threshold => '2 hours') WHERE check_name = 'oldest_pending';
SELECT jobq.pause('backlog');
SELECT status, detail ~ '''backlog''' AS lists_backlog
  FROM jobq.health() WHERE check_name = 'oldest_pending';
SELECT jobq.resume('backlog');
SELECT jobq.cancel(job_id) AS cancelled FROM jobq.jobs WHERE queue = 'backlog';
-- a due job still in jobq.scheduled (no claim has promoted it yet) counts too
SELECT created FROM jobq.enqueue('slow', queue => 'backlog2', run_at => clock_timestamp() + interval '1 ms');
SELECT pg_sleep(0.01);
SELECT queue, 'scheduled' AS in_table FROM jobq.scheduled ORDER BY queue;
SELECT status, detail ~ '''backlog2''' AS lists_backlog2
  FROM jobq.health(oldest_pending_threshold => '0') WHERE check_name = 'oldest_pending';
SELECT jobq.cancel(job_id) AS cancelled FROM jobq.jobs WHERE queue = 'backlog2';

-- an open circuit breaker: warning
BEGIN;
UPDATE jobq.queue SET breaker_state = 'open', breaker_reason = 'smtp down' WHERE name = 'ops';
UPDATE jobq.queue SET breaker_state = 'half_open' WHERE name = 'timing';
SELECT status, detail, hint FROM jobq.health() WHERE check_name = 'circuit_breakers';
ROLLBACK;

-- a prepared transaction holding back the xmin horizon: warning
BEGIN;
SELECT txid_current() > 0 AS has_xid;
PREPARE TRANSACTION 'ops_test_xmin';
SELECT status, detail ~ 'prepared transaction ''ops_test_xmin'' has been open for \d\d:\d\d:\d\d' AS lists_it,
       hint IS NOT NULL AS has_hint
  FROM jobq.health(xmin_threshold => '0') WHERE check_name = 'xmin_horizon';
ROLLBACK PREPARED 'ops_test_xmin';
SELECT status FROM jobq.health() WHERE check_name = 'xmin_horizon';

-- dead tuples and bloat: the details name numbers and sizes
SELECT detail ~ '^at most \d+ dead rows in a jobq table$' AS dead_detail
  FROM jobq.health() WHERE check_name = 'dead_tuples';
SELECT detail ~ '^no jobq table or index over 10 MB is more than half bloat; jobq''s tables and indexes take \d+ kB$' AS bloat_detail
  FROM jobq.health() WHERE check_name = 'table_bloat';

-- NULL or negative thresholds and windows are errors
\set VERBOSITY terse
SELECT count(*) FROM jobq.health(oldest_pending_threshold => NULL);
SELECT count(*) FROM jobq.health(grace => '-1 s');
SELECT count(*) FROM jobq.kind_stats(NULL);
SELECT count(*) FROM jobq.kind_stats('-1 hour');
\set VERBOSITY default

--
-- every object of this part has a comment; the functions run as the
-- extension's owner with a pinned search_path (SECURITY DEFINER) and show a
-- caller only the queues it may use (jobq.may_use_queue)
--
SELECT p.oid::regprocedure AS function, p.prosecdef AS security_definer,
       p.provolatile, p.proisstrict, p.proparallel, p.proconfig[1] AS first_setting,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented
  FROM pg_proc p
 WHERE p.pronamespace = 'jobq'::regnamespace
   AND p.proname IN ('job', 'job_by_key', 'kind_stats', 'health')
 ORDER BY 1::text;
SELECT c.relname AS view, obj_description(c.oid, 'pg_class') IS NOT NULL AS commented
  FROM pg_class c
 WHERE c.relnamespace = 'jobq'::regnamespace
   AND c.relname IN ('queues', 'queue_stats', 'kind_stats')
 ORDER BY 1;
