--
-- release: the holder hands its running job back (pending now, no retry
-- spent, its token fenced); release_running: an administrator hands back
-- every running job of a queue, or of one worker
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
DROP ROLE IF EXISTS release_worker;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- a job that must not be retried: fail would dead-letter it, release does not
SELECT job_id AS job FROM jobq.enqueue('report', '{"n": 1}', queue => 'rq',
                                       max_retries => 0) \gset
SELECT lease_token AS token1 FROM jobq.claim('rq', worker_id => 'w1') \gset
SELECT jobq.release(:job, :token1) AS released;
SELECT status, retry_count, attempts, worker_id, lease_expires_at, last_error,
       run_at <= now() AS due_now
  FROM jobq.jobs WHERE job_id = :job;
SELECT attempt, outcome, worker_id, error FROM jobq.job(:job);

-- the old token is fenced: release, complete, fail and extend do nothing
SELECT jobq.release(:job, :token1) AS released_again;
SELECT jobq.complete(:job, :token1) AS completed;
SELECT jobq.fail(:job, :token1, 'late') IS NULL AS fail_is_null;
SELECT jobq.extend(:job, :token1, '1 hour') IS NULL AS extend_is_null;

-- the next claim gets it under a new token, and completes it
SELECT lease_token AS token2, retry_count FROM jobq.claim('rq', worker_id => 'w2') \gset
SELECT :token2 <> :token1 AS new_token, :retry_count AS retry_count;
SELECT jobq.complete(:job, :token2) AS completed;

-- a wrong token, an unknown job, NULLs
SELECT jobq.release(:job + 1000, :token2) AS released;
SELECT jobq.release(NULL, 1);
SELECT jobq.release(1, NULL);

-- a release does not count as a failure for the circuit breaker
SELECT jobq.configure('rq', breaker_threshold => 1);
SELECT job_id AS job FROM jobq.enqueue('report', '{"n": 2}', queue => 'rq') \gset
SELECT lease_token AS token FROM jobq.claim('rq') \gset
SELECT jobq.release(:job, :token) AS released;
SELECT breaker_state, paused FROM jobq.queues WHERE queue = 'rq';

-- release_running: w1's jobs, then the rest of the queue
SELECT count(*) FROM jobq.enqueue_many('sync', ARRAY['{}', '{}', '{}', '{}', '{}']::jsonb[],
                                       queue => 'drain');
SELECT count(*) FROM jobq.claim('drain', worker_id => 'w1', batch => 3);
SELECT count(*) FROM jobq.claim('drain', worker_id => 'w2', batch => 1);
SELECT jobq.release_running('drain', 'w1') AS released;
SELECT status, worker_id, count(*) FROM jobq.jobs WHERE queue = 'drain'
 GROUP BY 1, 2 ORDER BY 1, 2;
SELECT jobq.release_running('drain') AS released;
SELECT jobq.release_running('drain') AS released_none;
SELECT status, sum(retry_count) AS retries, count(*) FROM jobq.jobs WHERE queue = 'drain'
 GROUP BY 1 ORDER BY 1;
SELECT outcome, count(*) FROM jobq.attempt a JOIN jobq.job j USING (job_id)
 WHERE j.queue = 'drain' GROUP BY 1;
SELECT jobq.release_running(NULL);

-- a worker may release its own job, but only an administrator may drain a queue
CREATE ROLE release_worker;
SELECT jobq.grant('drain', 'release_worker', 'work');
SELECT lease_token AS token, job_id AS job FROM jobq.claim('drain') \gset
SET ROLE release_worker;
SELECT jobq.release(:job, :token) AS released;
SELECT jobq.release_running('drain');
RESET ROLE;

DROP OWNED BY release_worker;
DROP ROLE release_worker;
DROP EXTENSION jobq CASCADE;
