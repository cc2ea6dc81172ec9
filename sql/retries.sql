--
-- retries: fail re-queues with backoff while retries are left, then the job
-- fails for good and shows up in jobq.dead_letter
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

--
-- backoff: exponential from backoff_base, capped at backoff_cap, with jitter
--

-- a pending job's delay: from its last failed attempt's end (the moment fail
-- ran) to its new run_at, both stored, so the test's own speed cannot matter
CREATE TEMP VIEW retry_delay AS
SELECT j.job_id, j.queue, j.status, j.retry_count, j.run_at - a.failed_at AS delay
  FROM jobq.jobs j,
       LATERAL (SELECT max(finished_at) AS failed_at FROM jobq.attempt a
                 WHERE a.job_id = j.job_id) a;

-- queue 'retry': backoff base 1 minute, no jitter, so the delay is exact
SELECT jobq.configure('retry', backoff_base => '1 minute', backoff_jitter => 0);

-- a job with the queue's default max_retries (3)
SELECT job_id AS job FROM jobq.enqueue('sync', queue => 'retry') \gset
SELECT max_retries FROM jobq.jobs WHERE job_id = :job;

-- the first attempt fails with retries left: back to pending, retry_count 1,
-- error kept, lease released
SELECT lease_token AS token FROM jobq.claim(queue => 'retry') \gset
SELECT jobq.fail(:job, :token, 'connection refused') AS status;
SELECT status, retry_count, last_error, lease_expires_at IS NULL AS no_lease,
       finished_at IS NULL AS not_finished
  FROM jobq.jobs WHERE job_id = :job;

-- the first retry waits backoff_base: 60 s
SELECT delay FROM retry_delay WHERE job_id = :job;

-- while it waits, it cannot be claimed
SELECT count(*) AS claimed FROM jobq.claim(queue => 'retry');

-- queue 'double': base 10 s, no jitter; the second retry waits twice as long
SELECT jobq.configure('double', backoff_base => '10 seconds', backoff_jitter => 0);
SELECT job_id AS job FROM jobq.enqueue('sync', queue => 'double') \gset
SELECT lease_token AS token FROM jobq.claim(queue => 'double') \gset
SELECT jobq.fail(:job, :token, 'first', retry_in => '0 s') AS status;
SELECT lease_token AS token, retry_count FROM jobq.claim(queue => 'double') \gset
SELECT :retry_count AS retry_count_on_second_attempt;
SELECT jobq.fail(:job, :token, 'second') AS status;
SELECT retry_count, delay FROM retry_delay WHERE job_id = :job;

-- queue 'capped': base 1 hour, cap 90 minutes; the second retry hits the cap
SELECT jobq.configure('capped', backoff_base => '1 hour', backoff_cap => '90 minutes',
                      backoff_jitter => 0);
SELECT job_id AS job FROM jobq.enqueue('sync', queue => 'capped') \gset
SELECT lease_token AS token FROM jobq.claim(queue => 'capped') \gset
SELECT jobq.fail(:job, :token, 'first', retry_in => '0 s') AS status;
SELECT lease_token AS token FROM jobq.claim(queue => 'capped') \gset
SELECT jobq.fail(:job, :token, 'second') AS status;
SELECT delay FROM retry_delay WHERE job_id = :job;

-- queue 'jitter': base 100 s, jitter 0.1; five first retries wait 90..110 s,
-- and they do not all wait exactly 100 s
SELECT jobq.configure('jitter', backoff_base => '100 seconds', backoff_jitter => 0.1);
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('sync', array_fill('{}'::jsonb, ARRAY[5]), queue => 'jitter');
CREATE TEMP TABLE jittered AS SELECT * FROM jobq.claim(queue => 'jitter', batch => 5);
SELECT jobq.fail(job_id, lease_token, 'timeout') AS status FROM jittered ORDER BY job_id;
SELECT count(*) AS jobs,
       bool_and(delay BETWEEN interval '90 s' AND interval '110 s') AS within_bounds,
       bool_or(delay <> interval '100 s') AS jittered
  FROM retry_delay WHERE queue = 'jitter';

--
-- retry_in: an exact delay instead of the backoff (e.g. a rate limit's reset)
--
SELECT job_id AS job FROM jobq.enqueue('sync', queue => 'retry') \gset
SELECT lease_token AS token FROM jobq.claim(queue => 'retry') \gset
SELECT jobq.fail(:job, :token, 'rate limited', retry_in => '30 seconds') AS status;
SELECT status, retry_count, delay FROM retry_delay WHERE job_id = :job;

-- retry_in => '0 s' makes the job claimable at once; the next attempt sees
-- retry_count 1
SELECT job_id AS job FROM jobq.enqueue('sync', queue => 'now') \gset
SELECT lease_token AS token FROM jobq.claim(queue => 'now') \gset
SELECT jobq.fail(:job, :token, 'try again', retry_in => '0 s') AS status;
SELECT job_id = :job AS same_job, retry_count, max_retries FROM jobq.claim(queue => 'now');

--
-- retryable => false: straight to failed, whatever retries are left
--
SELECT job_id AS job FROM jobq.enqueue('charge', '{"card": "declined"}') \gset
SELECT lease_token AS token FROM jobq.claim() \gset
SELECT jobq.fail(:job, :token, 'card declined', retryable => false) AS status;
SELECT status, retry_count, max_retries, last_error, finished_at IS NOT NULL AS finished
  FROM jobq.jobs WHERE job_id = :job;
SELECT kind, payload, last_error FROM jobq.dead_letter WHERE job_id = :job;
SELECT count(*) AS claimed FROM jobq.claim();

--
-- exhausting retries: max_retries 2 means at most three runs
--
SELECT job_id AS job FROM jobq.enqueue('upload', queue => 'exhaust', max_retries => 2) \gset
SELECT lease_token AS token, retry_count FROM jobq.claim(queue => 'exhaust') \gset
SELECT :retry_count AS run1_retry_count, jobq.fail(:job, :token, 'error 1', retry_in => '0 s') AS status;
SELECT lease_token AS token, retry_count FROM jobq.claim(queue => 'exhaust') \gset
SELECT :retry_count AS run2_retry_count, jobq.fail(:job, :token, 'error 2', retry_in => '0 s') AS status;
SELECT lease_token AS token, retry_count FROM jobq.claim(queue => 'exhaust') \gset
SELECT :retry_count AS run3_retry_count, jobq.fail(:job, :token, 'error 3', retry_in => '0 s') AS status;

-- the job is failed, keeps the last error, and is in the dead letter view
SELECT status, retry_count, max_retries, last_error FROM jobq.jobs WHERE job_id = :job;
SELECT kind, queue, last_error FROM jobq.dead_letter WHERE job_id = :job;

-- a failed job is not claimed again
SELECT count(*) AS claimed FROM jobq.claim(queue => 'exhaust');

-- every failed attempt's error is kept in the job's attempt history
SELECT attempt, worker_id, outcome, error
  FROM jobq.attempt WHERE job_id = :job ORDER BY attempt;

--
-- max_retries => 0: the first failure is final
--
SELECT job_id AS job FROM jobq.enqueue('payment', max_retries => 0) \gset
SELECT lease_token AS token FROM jobq.claim() \gset
SELECT jobq.fail(:job, :token, 'gateway timeout') AS status;
SELECT status, retry_count, last_error FROM jobq.jobs WHERE job_id = :job;

--
-- the queue's default max_retries, set with configure
--
SELECT jobq.configure('strict', max_retries => 0);
SELECT job_id AS job FROM jobq.enqueue('webhook', queue => 'strict') \gset
SELECT max_retries FROM jobq.jobs WHERE job_id = :job;
SELECT lease_token AS token FROM jobq.claim(queue => 'strict') \gset
SELECT jobq.fail(:job, :token, 'http 500') AS status;

-- an explicit max_retries still wins over the queue default
SELECT job_id AS job FROM jobq.enqueue('webhook', queue => 'strict', max_retries => 5) \gset
SELECT max_retries FROM jobq.jobs WHERE job_id = :job;

-- configure with NULL settings leaves them unchanged
SELECT jobq.configure('strict', max_retries => NULL);
SELECT job_id AS job FROM jobq.enqueue('webhook', queue => 'strict') \gset
SELECT max_retries FROM jobq.jobs WHERE job_id = :job;

-- the dead letter view holds exactly the failed jobs
SELECT kind, last_error FROM jobq.dead_letter ORDER BY job_id;
SELECT count(*) AS failed FROM jobq.jobs WHERE status = 'failed';
