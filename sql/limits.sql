--
-- limits: interval and timestamp arguments are checked against what jobq
-- can store and compute (issue 15 item 3), schedules are a per-queue quota
-- and error messages quote long arguments cut short (item 10).
--
-- An interval argument may be at most 1000 years long (a month counted as
-- 30 days), a claim's wait at most 1 day: longer is ERROR 22008 naming the
-- argument, with the allowed range in the hint.  After each failed call,
-- "unchanged" compares a digest of every jobq table with the one taken
-- before it: t means the call left no trace.
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

\set VERBOSITY default
\set SHOW_CONTEXT never
SET intervalstyle = postgres;
SET timezone = 'UTC';
CREATE TEMP VIEW state AS
SELECT md5(COALESCE((SELECT string_agg(j::text, ',' ORDER BY j.job_id) FROM jobq.job j), '')
           || COALESCE((SELECT string_agg(q::text, ',' ORDER BY q.name) FROM jobq.queue q), '')
           || COALESCE((SELECT string_agg(a::text, ',' ORDER BY a.job_id, a.attempt) FROM jobq.attempt a), '')
           || COALESCE((SELECT string_agg(s::text, ',' ORDER BY s.name) FROM jobq.schedule s), '')
           || (SELECT count(*) FROM jobq.ready)::text
           || (SELECT count(*) FROM jobq.scheduled)::text) AS digest;
\set save 'SELECT digest AS before FROM state \\gset'
\set trace 'SELECT digest = :''before'' AS unchanged FROM state;'

--
-- configure: every interval setting
--

-- a queue to configure, and a job running in it with its lease token
SELECT jobq.configure('q', max_retries => 5);
SELECT count(*) AS enqueued FROM jobq.enqueue('k', queue => 'q');
SELECT job_id AS job, lease_token AS token FROM jobq.claim('q') \gset
:save

-- lease of 300000 years (issue 15 item 7b): 22008, nothing stored
SELECT jobq.configure('q', lease => '300000 years');
\echo :SQLSTATE
:trace

-- a lease one day over the bound: 22008
SELECT jobq.configure('q', lease => '1000 years 1 day');
\echo :SQLSTATE
:trace

-- a lease of one day written with fields out of range: adding its 1000000
-- years to a timestamp overflows before its days are taken off: 22008
SELECT jobq.configure('q', lease => '1000000 years -359999999 days');
\echo :SQLSTATE
:trace

-- backoff_base and backoff_cap: 22008
SELECT jobq.configure('q', backoff_base => '1000000 years');
\echo :SQLSTATE
SELECT jobq.configure('q', backoff_cap => '1000000 years');
\echo :SQLSTATE
:trace

-- retention of 10000 years, a plausible "keep for ever" (issue 15 item 4):
-- 22008, not stored, so it can never stop jobq.prune
-- (terse: the hint differs by PostgreSQL version, sql/retention_infinity.sql)
\set VERBOSITY terse
SELECT jobq.configure('q', retention_completed => '10000 years');
\echo :SQLSTATE
SELECT jobq.configure('q', retention_failed => '10000 years');
\echo :SQLSTATE
\set VERBOSITY default
:trace

-- rate_period: 22008
SELECT jobq.configure('q', rate_period => '2000 years');
\echo :SQLSTATE
:trace

-- a setting too long fails the whole call: max_retries is not changed either
SELECT jobq.configure('q', max_retries => 9, lease => '300000 years');
\echo :SQLSTATE
:trace

-- exactly 1000 years is accepted for every interval setting
SELECT jobq.configure('q2', lease => '1000 years', backoff_base => '1000 years',
                      backoff_cap => '1000 years', retention_completed => '1000 years',
                      retention_failed => '1000 years', rate_period => '1000 years');
SELECT lease, backoff_base, backoff_cap, retention_completed, retention_failed, rate_period
  FROM jobq.queues WHERE queue = 'q2';
:save

--
-- claim, extend, fail, snooze: the worker's intervals
--

-- claim with a lease of 300000 years: 22008, no job claimed
SELECT count(*) FROM jobq.enqueue('k', queue => 'q');
:save
SELECT * FROM jobq.claim('q', lease => '300000 years');
\echo :SQLSTATE
:trace

-- claim waiting 1000000 years (it used to return at once): 22008
SELECT * FROM jobq.claim('q', wait => '1000000 years');
\echo :SQLSTATE
:trace

-- a wait of 1 day is accepted (a job is ready: the claim returns at once)
SELECT count(*) AS claimed FROM jobq.claim('q', wait => '1 day');
:save

-- extend by 1000000 years: 22008, the lease stays as it was
SELECT jobq.extend(:job, :token, '1000000 years');
\echo :SQLSTATE
:trace

-- fail with retry_in 1000000 years (issue 15 item 3): 22008, the job stays
-- running under its token and nothing goes to the attempt history
SELECT jobq.fail(:job, :token, 'rate limited', retry_in => '1000000 years');
\echo :SQLSTATE
:trace

-- snooze for 1000000 years: 22008
SELECT jobq.snooze(:job, :token, '1000000 years');
\echo :SQLSTATE
:trace

-- the job still answers to its token: fail with the longest retry_in is
-- accepted, and the job is due in 1000 years of 30-day months
SELECT jobq.fail(:job, :token, 'rate limited', retry_in => '1000 years');
SELECT status, run_at - updated_at = interval '360000 days' AS due_in_1000_years
  FROM jobq.jobs WHERE job_id = :job;

--
-- enqueue and enqueue_many: run_at
--

:save
-- run_at => 'infinity' and '-infinity': 22023
SELECT * FROM jobq.enqueue('k', queue => 'q', run_at => 'infinity');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', queue => 'q', run_at => '-infinity');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue_many('k', ARRAY['{}']::jsonb[], queue => 'q', run_at => 'infinity');
\echo :SQLSTATE
:trace

-- the last and the first instants of the timestamptz range are stored, and
-- jobq.jobs reads them back (pg_dump reads these rows the same way)
SELECT count(*) FROM jobq.enqueue('edge', queue => 'edges', run_at => '294276-12-31 23:59:59+00');
SELECT count(*) FROM jobq.enqueue('edge', queue => 'edges', run_at => '4713-11-24 00:00:00+00 BC');
SELECT run_at FROM jobq.jobs WHERE queue = 'edges' ORDER BY run_at;
-- the oldest is due: a claim takes it; the other stays delayed
SELECT run_at FROM jobq.claim('edges') JOIN jobq.jobs USING (job_id);
SELECT status, count(*) FROM jobq.jobs WHERE queue = 'edges' GROUP BY status ORDER BY status;

--
-- operations
--

:save
-- purge older_than 1000000 years: 22008
SELECT jobq.purge('q', 'completed', '1000000 years');
\echo :SQLSTATE
:trace

-- kind_stats over 1000000 years: 22008 naming period
SELECT * FROM jobq.kind_stats('1000000 years');
\echo :SQLSTATE

-- health's thresholds: 22008 naming the argument
SELECT * FROM jobq.health(grace => '1000000 years');
\echo :SQLSTATE
SELECT * FROM jobq.health(oldest_pending_threshold => '1001 years');
\echo :SQLSTATE

--
-- settings stored some other way never break a claim, fail or the reaper
-- (defence in depth): a superuser writes jobq.queue directly
--

UPDATE jobq.queue SET lease = '300000 years', backoff_base = '300000 years',
       backoff_cap = '300000 years', backoff_jitter = 0, rate_limit = 100,
       rate_period = '300000 years'
 WHERE name = 'q';
SELECT count(*) FROM jobq.enqueue('k', queue => 'q');
-- the claim works: the lease is cut to 1000 years
SELECT job_id AS job, lease_token AS token FROM jobq.claim('q') \gset
SELECT status, lease_expires_at = claimed_at + interval '1000 years' AS lease_cut_to_1000_years
  FROM jobq.jobs WHERE job_id = :job;
-- the fail works: the backoff is cut to 1000 years of 30-day months
SELECT jobq.fail(:job, :token, 'boom');
SELECT status, run_at - updated_at = interval '360000 days' AS backoff_cut_to_1000_years
  FROM jobq.jobs WHERE job_id = :job;
-- a lease of one day with fields out of range is taken as the one day
UPDATE jobq.queue SET lease = '1000000 years -359999999 days' WHERE name = 'q2';
SELECT count(*) FROM jobq.enqueue('k', queue => 'q2');
SELECT job_id AS job2 FROM jobq.claim('q2') \gset
SELECT status, lease_expires_at = claimed_at + interval '1 day' AS lease_is_one_day
  FROM jobq.jobs WHERE job_id = :job2;
-- and every row can still be read, as pg_dump reads them
SELECT count(*) > 0 AS readable FROM (SELECT j::text FROM jobq.job j) x;

--
-- schedules: jobq.max_schedules is a quota per queue (issue 15 item 10)
--

CREATE ROLE regress_limits_carol;
CREATE ROLE regress_limits_dave;
SELECT jobq.grant('qc', 'regress_limits_carol', 'administer');
SELECT jobq.grant('qd', 'regress_limits_dave', 'administer');
SET jobq.max_schedules = 2;
SET ROLE regress_limits_carol;
-- carol fills her queue's quota
SELECT jobq.schedule('carol-1', '0 0 29 2 *', 'report', queue => 'qc') > 0 AS scheduled;
SELECT jobq.schedule('carol-2', '0 0 29 2 *', 'report', queue => 'qc') > 0 AS scheduled;
RESET ROLE;
:save
SET ROLE regress_limits_carol;
-- a third schedule in qc: 54000 naming the queue
SELECT jobq.schedule('carol-3', '0 0 29 2 *', 'report', queue => 'qc');
\echo :SQLSTATE
RESET ROLE;
:trace
SET ROLE regress_limits_carol;
-- updating one of hers at the quota is fine
SELECT jobq.schedule('carol-2', '30 0 29 2 *', 'report', queue => 'qc') > 0 AS rescheduled;
RESET ROLE;
SET ROLE regress_limits_dave;
-- dave's queue has a quota of its own: carol did not use it up
SELECT jobq.schedule('dave-1', '0 0 29 2 *', 'report', queue => 'qd') > 0 AS scheduled;
RESET ROLE;
-- the database-wide cap (superuser) still holds over all queues
SET jobq.max_database_schedules = 3;
:save
SELECT jobq.schedule('admin-1', '0 0 29 2 *', 'report', queue => 'qa');
\echo :SQLSTATE
:trace
RESET jobq.max_database_schedules;
RESET jobq.max_schedules;
SELECT queue, count(*) FROM jobq.schedules GROUP BY queue ORDER BY queue;

--
-- error messages quote a long argument cut to 64 bytes and "..."
--

-- a 10 kB time zone (issue 15 item 10)
SELECT jobq.cron_next('* * * * *', now(), repeat('x', 10000));
\echo :SQLSTATE
-- in jobq.schedule (a time zone is a name there, at most 128 bytes)
SELECT jobq.schedule('s', '* * * * *', 'k', timezone => repeat('Mars/', 25));
\echo :SQLSTATE
-- cut on a character boundary: 32 two-byte characters
SELECT jobq.priority(repeat('é', 5000));
\echo :SQLSTATE
SELECT jobq.schedule('s', '* * * * *', 'k', misfire => repeat('never', 20));
\echo :SQLSTATE
-- a short argument is quoted whole
SELECT jobq.priority('urgent');
\echo :SQLSTATE
-- jobq.cron_next refuses expressions over jobq.max_cron_length, as
-- jobq.schedule does, instead of quoting parts of them
SELECT jobq.cron_next(repeat('1,', 5000) || '1 * * * *', now());
\echo :SQLSTATE

SELECT jobq.unschedule(name) FROM jobq.schedules ORDER BY name;
DROP OWNED BY regress_limits_carol, regress_limits_dave;
DROP ROLE regress_limits_carol;
DROP ROLE regress_limits_dave;
