--
-- batch: enqueue_many, claim with batch > 1, complete_many, kinds filter,
-- worker_id
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- enqueue_many returns one row per payload, in input order
CREATE TEMP TABLE many AS
  SELECT *
    FROM jobq.enqueue_many('resize',
                           ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}', '{"n": 5}']::jsonb[],
                           queue => 'images', priority => 10)
         WITH ORDINALITY AS m(job_id, created, n);
SELECT count(*) AS rows, bool_and(created) AS all_created,
       count(DISTINCT job_id) AS distinct_jobs
  FROM many;

-- row n is the job with payload n, and the settings apply to every job
SELECT m.n, j.payload ->> 'n' AS payload_n, j.kind, j.queue, j.priority, j.status
  FROM many m JOIN jobq.jobs j USING (job_id)
 ORDER BY m.n;

-- job ids grow in input order
SELECT bool_and(job_id > prev) AS ids_in_input_order
  FROM (SELECT job_id, lag(job_id) OVER (ORDER BY n) AS prev FROM many) s
 WHERE prev IS NOT NULL;

-- an empty array enqueues nothing
SELECT count(*) AS rows FROM jobq.enqueue_many('resize', '{}'::jsonb[], queue => 'images');
SELECT count(*) AS jobs FROM jobq.jobs;

-- claim returns at most batch rows, in claim order
CREATE TEMP TABLE first_two AS
  SELECT * FROM jobq.claim(queue => 'images', worker_id => 'host-a:101', batch => 2);
SELECT payload ->> 'n' AS n FROM first_two ORDER BY job_id;
CREATE TEMP TABLE the_rest AS
  SELECT * FROM jobq.claim(queue => 'images', worker_id => 'host-b:202', batch => 10);
SELECT payload ->> 'n' AS n FROM the_rest ORDER BY job_id;
SELECT count(*) AS claimed FROM jobq.claim(queue => 'images', batch => 10);

-- every claimed job has its own token
SELECT count(DISTINCT lease_token) AS tokens
  FROM (SELECT lease_token FROM first_two UNION ALL SELECT lease_token FROM the_rest) t;

-- worker_id and claimed_at are recorded on each job
SELECT payload ->> 'n' AS n, status, worker_id, claimed_at IS NOT NULL AS has_claimed_at
  FROM jobq.jobs WHERE queue = 'images' ORDER BY job_id;

-- complete_many returns how many it completed; results go to their jobs
SELECT jobq.complete_many(array_agg(job_id ORDER BY job_id),
                          array_agg(lease_token ORDER BY job_id),
                          array_agg(jsonb_build_object('done', payload -> 'n') ORDER BY job_id))
         AS completed
  FROM first_two;
SELECT payload ->> 'n' AS n, status, result
  FROM jobq.jobs WHERE queue = 'images' ORDER BY job_id;

-- a wrong token in the batch is skipped; the others complete
SELECT jobq.complete_many(array_agg(job_id ORDER BY job_id),
                          array_agg(CASE WHEN payload ->> 'n' = '4' THEN lease_token + 1
                                         ELSE lease_token END ORDER BY job_id))
         AS completed
  FROM the_rest;
SELECT payload ->> 'n' AS n, status, result IS NULL AS no_result
  FROM jobq.jobs WHERE queue = 'images' ORDER BY job_id;

-- completing the same batch again completes nothing
SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) AS completed
  FROM first_two;

-- an empty batch completes nothing
SELECT jobq.complete_many('{}'::bigint[], '{}'::bigint[]) AS completed;

-- kinds filter: claim only the kinds asked for
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('a', ARRAY['{}', '{}']::jsonb[], queue => 'mixed');
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('b', ARRAY['{}', '{}']::jsonb[], queue => 'mixed');
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('c', ARRAY['{}']::jsonb[], queue => 'mixed');
SELECT kind FROM jobq.claim(queue => 'mixed', kinds => ARRAY['b'], batch => 10) ORDER BY kind;
SELECT count(*) AS claimed FROM jobq.claim(queue => 'mixed', kinds => ARRAY['b', 'zzz']);
-- the jobs a filtered claim passed over are still there for the next claims
SELECT kind FROM jobq.claim(queue => 'mixed');
SELECT kind FROM jobq.claim(queue => 'mixed', kinds => ARRAY['c', 'a'], batch => 10) ORDER BY kind;

-- claim takes only from the queue it names
SELECT created FROM jobq.enqueue('in-default');
SELECT count(*) AS claimed FROM jobq.claim(queue => 'mixed', batch => 10);
SELECT kind FROM jobq.claim(batch => 10);

-- a claim without worker_id leaves it NULL
SELECT worker_id IS NULL AS no_worker_id FROM jobq.jobs WHERE kind = 'in-default';

-- enqueue_many mixing jobs with and without keys: job ids follow the input
-- order, so claims come back in input order (FIFO within a priority)
SELECT count(*) FROM jobq.enqueue_many('mix', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}', '{"n": 5}']::jsonb[],
                                       queue => 'mixq', idempotency_keys => ARRAY[NULL, 'm-a', NULL, 'm-a', NULL]);
SELECT payload->>'n' AS n FROM jobq.claim('mixq', batch => 10);
