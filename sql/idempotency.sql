--
-- idempotency: (kind, idempotency_key) names one job, whatever the retries
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- the first enqueue with a key creates the job
SELECT job_id AS order1, created
  FROM jobq.enqueue('charge', '{"amount": 5}', idempotency_key => 'order-1') \gset
SELECT :'created'::boolean AS created;

-- the same (kind, key) again returns the same job with created = false ...
SELECT job_id = :order1 AS same_job, created
  FROM jobq.enqueue('charge', '{"amount": 99}', queue => 'other', priority => 30,
                    run_at => now() + interval '1 day', max_retries => 9,
                    idempotency_key => 'order-1');

-- ... and changes nothing: payload, queue, priority, run_at, max_retries are the first call's
SELECT queue, payload, priority, max_retries, idempotency_key,
       run_at <= now() AS run_at_not_future
  FROM jobq.jobs WHERE job_id = :order1;
SELECT count(*) AS jobs FROM jobq.jobs;

-- the duplicate did not create the queue it named
SELECT count(*) AS queues_named_other FROM jobq.queue WHERE name = 'other';

-- the same key under another kind is a different job
SELECT job_id <> :order1 AS different_job, created
  FROM jobq.enqueue('refund', '{"amount": 5}', idempotency_key => 'order-1');
SELECT kind, idempotency_key FROM jobq.jobs ORDER BY job_id;

-- without a key every enqueue is a new job
SELECT created FROM jobq.enqueue('charge', '{"amount": 1}');
SELECT created FROM jobq.enqueue('charge', '{"amount": 1}');
SELECT count(*) AS jobs_without_key FROM jobq.jobs WHERE idempotency_key IS NULL;

-- enqueue_many: keys may repeat inside one batch and may name existing jobs;
-- one row per input, in input order
CREATE TEMP TABLE batch AS
  SELECT *
    FROM jobq.enqueue_many('charge',
                           ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}', '{"n": 5}']::jsonb[],
                           idempotency_keys => ARRAY['k-1', 'k-2', 'k-1', 'order-1', NULL])
         WITH ORDINALITY AS b(job_id, created, n);

-- rows 1, 2 and 5 are new; row 3 is row 1's job; row 4 is the existing order-1 job
SELECT n, created,
       job_id = (SELECT job_id FROM batch WHERE n = 1) AS same_as_row1,
       job_id = :order1 AS is_order1
  FROM batch ORDER BY n;

-- the jobs hold the payload of the first occurrence of each key
SELECT b.n, j.idempotency_key, j.payload
  FROM batch b JOIN jobq.jobs j USING (job_id)
 ORDER BY b.n;
SELECT count(*) AS jobs FROM jobq.jobs;

-- the key stays reserved after the job completed: same job, nothing new
SELECT job_id = :order1 AS claimed_order1, lease_token AS token
  FROM jobq.claim(kinds => ARRAY['charge']) \gset
SELECT :'claimed_order1'::boolean AS claimed_order1;
SELECT jobq.complete(:order1, :token) AS completed;
SELECT job_id = :order1 AS same_job, created
  FROM jobq.enqueue('charge', '{"amount": 7}', idempotency_key => 'order-1');
SELECT status, payload FROM jobq.jobs WHERE job_id = :order1;

-- ... and after the job failed for good
SELECT job_id AS dead, created
  FROM jobq.enqueue('webhook', idempotency_key => 'hook-1', max_retries => 0) \gset
SELECT lease_token AS token FROM jobq.claim(kinds => ARRAY['webhook']) \gset
SELECT jobq.fail(:dead, :token, 'http 500') AS status;
SELECT job_id = :dead AS same_job, created
  FROM jobq.enqueue('webhook', idempotency_key => 'hook-1');
SELECT count(*) AS webhook_jobs FROM jobq.jobs WHERE kind = 'webhook';

-- a key used in a rolled-back transaction was never taken
BEGIN;
SELECT created FROM jobq.enqueue('charge', idempotency_key => 'rolled-back');
ROLLBACK;
SELECT created FROM jobq.enqueue('charge', idempotency_key => 'rolled-back');
SELECT count(*) AS jobs_with_key FROM jobq.jobs WHERE idempotency_key = 'rolled-back';
