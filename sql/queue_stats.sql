--
-- queue_stats and dead_letter views
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- no queues, no stats
SELECT count(*) AS queues FROM jobq.queue_stats;

-- queue 'mail': four ready jobs and one delayed
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('send', array_fill('{}'::jsonb, ARRAY[4]), queue => 'mail');
SELECT created FROM jobq.enqueue('send', queue => 'mail', run_at => now() + interval '1 hour');

-- queue 'reports': one job that has waited for an hour
SELECT created FROM jobq.enqueue('build', queue => 'reports', run_at => now() - interval '1 hour');

-- everything pending
SELECT queue, pending, running, completed, failed, cancelled, paused
  FROM jobq.queue_stats ORDER BY queue;

-- in 'mail': claim three, complete one, fail one for good, fail one with retries left
CREATE TEMP TABLE mail AS
  SELECT *, row_number() OVER (ORDER BY job_id) AS n
    FROM jobq.claim(queue => 'mail', batch => 3);
SELECT queue, pending, running, completed, failed
  FROM jobq.queue_stats WHERE queue = 'mail';
SELECT jobq.complete(job_id, lease_token) AS completed FROM mail WHERE n = 1;
SELECT jobq.fail(job_id, lease_token, 'bad address', retryable => false) AS status
  FROM mail WHERE n = 2;
SELECT jobq.fail(job_id, lease_token, 'smtp busy') AS status
  FROM mail WHERE n = 3;

-- pending 3 (one ready, one delayed, one backing off), running 0,
-- completed 1, failed 1
SELECT queue, pending, running, completed, failed, cancelled, paused
  FROM jobq.queue_stats ORDER BY queue;

-- oldest_pending_age: about an hour in 'reports'; small and not negative in
-- 'mail', whose delayed jobs do not count as waiting
SELECT queue,
       oldest_pending_age BETWEEN interval '59 min' AND interval '61 min' AS about_an_hour,
       oldest_pending_age BETWEEN interval '0' AND interval '1 min' AS under_a_minute
  FROM jobq.queue_stats ORDER BY queue;

-- a queue with nothing pending has no oldest pending age
SELECT lease_token AS token, job_id AS job FROM jobq.claim(queue => 'reports') \gset
SELECT queue, pending, running, oldest_pending_age IS NULL AS no_pending_age
  FROM jobq.queue_stats WHERE queue = 'reports';
SELECT jobq.complete(:job, :token) AS completed;
SELECT queue, pending, running, completed
  FROM jobq.queue_stats WHERE queue = 'reports';

-- the counts agree with jobq.jobs
SELECT s.queue,
       s.pending = count(*) FILTER (WHERE j.status = 'pending') AS pending_ok,
       s.running = count(*) FILTER (WHERE j.status = 'running') AS running_ok,
       s.completed = count(*) FILTER (WHERE j.status = 'completed') AS completed_ok,
       s.failed = count(*) FILTER (WHERE j.status = 'failed') AS failed_ok
  FROM jobq.queue_stats s JOIN jobq.jobs j USING (queue)
 GROUP BY s.queue, s.pending, s.running, s.completed, s.failed
 ORDER BY s.queue;

-- a queue created by configure shows up with zero counts
SELECT jobq.configure('empty', max_retries => 1);
SELECT queue, pending, running, completed, failed, cancelled, paused
  FROM jobq.queue_stats WHERE queue = 'empty';

-- the dead letter view lists the failed job with its error, and nothing else
SELECT d.queue, d.kind, d.status, d.last_error,
       d.job_id = m.job_id AS is_failed_job
  FROM jobq.dead_letter d JOIN mail m ON m.n = 2;
SELECT count(*) AS dead FROM jobq.dead_letter;

-- a delayed job that has come due stays in jobq.scheduled until a claim
-- moves it to jobq.ready: it counts as ready, and its wait as the oldest
SELECT created FROM jobq.enqueue('late', queue => 'due', run_at => now() + interval '0.3 s');
SELECT pg_sleep(0.4);
SELECT count(*) AS still_in_scheduled FROM jobq.scheduled WHERE queue = 'due';
SELECT queue, pending, ready, delayed, oldest_pending_age > interval '0' AS waits
  FROM jobq.queue_stats WHERE queue = 'due';

-- one job of each state more, then every column agrees with jobq.jobs
SELECT jobq.cancel(job_id) AS cancelled FROM jobq.enqueue('gone', queue => 'due');
SELECT created FROM jobq.enqueue('later', queue => 'due', run_at => now() + interval '1 day');
SELECT s.queue,
       s.pending = count(*) FILTER (WHERE j.status = 'pending') AS pending_ok,
       s.ready = count(*) FILTER (WHERE j.status = 'pending' AND j.run_at <= now()) AS ready_ok,
       s.delayed = count(*) FILTER (WHERE j.status = 'pending' AND j.run_at > now()) AS delayed_ok,
       s.oldest_pending_age IS NOT DISTINCT FROM
           now() - min(j.run_at) FILTER (WHERE j.status = 'pending' AND j.run_at <= now()) AS oldest_ok,
       s.running = count(*) FILTER (WHERE j.status = 'running') AS running_ok,
       s.completed = count(*) FILTER (WHERE j.status = 'completed') AS completed_ok,
       s.failed = count(*) FILTER (WHERE j.status = 'failed') AS failed_ok,
       s.cancelled = count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled_ok,
       s.completed_last_hour = count(*) FILTER (WHERE j.status = 'completed'
                                                  AND j.finished_at >= now() - interval '1 hour') AS completed_last_hour_ok,
       s.failed_last_hour = count(*) FILTER (WHERE j.status = 'failed'
                                               AND j.finished_at >= now() - interval '1 hour') AS failed_last_hour_ok
  FROM jobq.queue_stats s JOIN jobq.jobs j USING (queue)
 GROUP BY s.queue, s.pending, s.ready, s.delayed, s.oldest_pending_age, s.running, s.completed,
          s.failed, s.cancelled, s.completed_last_hour, s.failed_last_hour
 ORDER BY s.queue;

-- a query that reads neither the totals over every kept job (completed,
-- cancelled, blocked) nor the last hour does not scan jobq.job, filtered
-- by queue or not (on PostgreSQL 17 and 18 a filter on queue kept both
-- scans until 0.3.1); one that reads them does
CREATE FUNCTION pg_temp.scans_job(q text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    line text;
    hit boolean := false;
BEGIN
    FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
        hit := hit OR line ~ ' on job\M';
    END LOOP;
    RETURN hit;
END $$;
SELECT pg_temp.scans_job($$SELECT ready FROM jobq.queue_stats WHERE queue = 'due'$$) AS ready_by_queue,
       pg_temp.scans_job($$SELECT queue, pending, ready, delayed FROM jobq.queue_stats$$) AS ready_all,
       pg_temp.scans_job($$SELECT completed FROM jobq.queue_stats WHERE queue = 'due'$$) AS completed_by_queue,
       pg_temp.scans_job($$SELECT failed_last_hour FROM jobq.queue_stats$$) AS last_hour_all;
