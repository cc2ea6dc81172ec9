--
-- checkpoint: progress saved by one attempt is handed to the next one
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

SELECT job_id AS job FROM jobq.enqueue('render', '{"frames": 100}') \gset

-- the first attempt starts without a checkpoint
SELECT lease_token AS token, checkpoint IS NULL AS no_checkpoint
  FROM jobq.claim() \gset
SELECT :'no_checkpoint'::boolean AS first_attempt_has_no_checkpoint;

-- a checkpoint is stored on the job
SELECT jobq.checkpoint(:job, :token, '{"frame": 40}') AS saved;
SELECT status, checkpoint FROM jobq.jobs WHERE job_id = :job;

-- a later checkpoint replaces the earlier one
SELECT jobq.checkpoint(:job, :token, '{"frame": 60, "upstream_task": "t-123"}') AS saved;
SELECT checkpoint FROM jobq.jobs WHERE job_id = :job;

-- a wrong token does not overwrite it
SELECT jobq.checkpoint(:job, :token + 1, '{"frame": 0}') AS saved;
SELECT checkpoint FROM jobq.jobs WHERE job_id = :job;

-- the attempt fails; the next attempt's claim receives the checkpoint
SELECT jobq.fail(:job, :token, 'out of memory', retry_in => '0 s') AS status;
SELECT checkpoint FROM jobq.jobs WHERE job_id = :job;
CREATE TEMP TABLE attempt2 AS SELECT * FROM jobq.claim();
SELECT job_id = :job AS same_job, retry_count, checkpoint FROM attempt2;
SELECT lease_token AS token FROM attempt2 \gset

-- the second attempt carries on from there and completes; the checkpoint stays
SELECT jobq.checkpoint(:job, :token, '{"frame": 100, "upstream_task": "t-123"}') AS saved;
SELECT jobq.complete(:job, :token, '{"frames": 100}') AS completed;
SELECT status, checkpoint, result FROM jobq.jobs WHERE job_id = :job;

-- checkpoints belong to their job: another job starts without one
SELECT job_id AS other FROM jobq.enqueue('render', '{"frames": 10}') \gset
SELECT job_id = :other AS is_other, checkpoint FROM jobq.claim();
