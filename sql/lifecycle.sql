--
-- lifecycle: enqueue -> claim -> complete, as seen through the jobq.jobs view
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- nothing to do on an empty queue: claim returns zero rows
SELECT count(*) AS claimed FROM jobq.claim();

-- enqueue returns one row: a fresh job id and created = true
SELECT now() AS t0 \gset
SELECT job_id AS job1, created AS job1_created
  FROM jobq.enqueue('email.send', '{"to": "a@example.com"}') \gset
SELECT :job1 > 0 AS job_id_positive, :'job1_created'::boolean AS created;

-- the first enqueue created the queue 'default'
SELECT count(*) AS queues FROM jobq.queue WHERE name = 'default';

-- a fresh job is pending in queue 'default', with the defaults filled in
SELECT queue, kind, payload, priority, status, retry_count, max_retries,
       idempotency_key, claimed_at, worker_id, lease_expires_at,
       last_error, result, checkpoint, finished_at
  FROM jobq.jobs WHERE job_id = :job1;

-- its timestamps come from the database clock: run_at defaults to now() (the
-- enqueue's, between the test's t0 and this statement's), created_at is no
-- earlier than that
SELECT run_at >= :'t0' AND run_at < now() AS run_at_is_enqueue_now,
       created_at >= run_at AND created_at < now() AS created_at_at_enqueue,
       updated_at = created_at AS updated_at_created
  FROM jobq.jobs WHERE job_id = :job1;

-- claim hands the job out with a lease token and the default 5 minute lease
CREATE TEMP TABLE claimed AS
  SELECT * FROM jobq.claim(worker_id => 'worker-1');
SELECT c.job_id = :job1 AS is_job1,
       c.lease_token IS NOT NULL AS has_token,
       c.kind, c.payload, c.priority, c.retry_count, c.max_retries, c.checkpoint,
       c.enqueued_at = j.created_at AS enqueued_at_is_created_at,
       c.lease_expires_at - j.claimed_at AS lease
  FROM claimed c JOIN jobq.jobs j USING (job_id);
SELECT lease_token AS token1 FROM claimed \gset

-- the claimed job is running, owned by worker-1, leased until lease_expires_at
SELECT j.status, j.worker_id, j.claimed_at >= j.created_at AND j.claimed_at < now() AS claimed_at_at_claim,
       j.lease_expires_at = c.lease_expires_at AS same_lease,
       j.finished_at IS NULL AS not_finished
  FROM jobq.jobs j JOIN claimed c USING (job_id);

-- a running job is not handed out twice
SELECT count(*) AS claimed FROM jobq.claim();

-- complete with the right token succeeds once, storing the result
SELECT jobq.complete(:job1, :token1, '{"message_id": "m-1"}') AS completed;

-- the job is completed: result kept, finished_at set
SELECT status, result, finished_at >= claimed_at AND finished_at < now() AS finished_at_at_complete
  FROM jobq.jobs WHERE job_id = :job1;

-- completing again with the same token returns false and changes nothing
SELECT jobq.complete(:job1, :token1, '{"message_id": "m-2"}') AS completed_again;
SELECT status, result FROM jobq.jobs WHERE job_id = :job1;

-- a completed job is never claimed again
SELECT count(*) AS claimed FROM jobq.claim();

-- complete without a result: result stays NULL
SELECT job_id AS job2 FROM jobq.enqueue('email.send') \gset
SELECT lease_token AS token2 FROM jobq.claim() \gset
SELECT jobq.complete(:job2, :token2) AS completed;
SELECT status, payload, result FROM jobq.jobs WHERE job_id = :job2;

-- enqueue is transactional: a job enqueued in a rolled-back transaction never existed
BEGIN;
SELECT created FROM jobq.enqueue('email.send', '{"to": "rolled@example.com"}');
ROLLBACK;
SELECT count(*) AS jobs FROM jobq.jobs WHERE payload ->> 'to' = 'rolled@example.com';
SELECT count(*) AS claimed FROM jobq.claim();
