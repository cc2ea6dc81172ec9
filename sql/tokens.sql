--
-- tokens: complete, fail, extend and checkpoint need the current lease token;
-- a stale or wrong one changes nothing
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

SELECT job_id AS job FROM jobq.enqueue('transcode', '{"file": "a.mp4"}') \gset
SELECT lease_token AS token1, lease_expires_at AS lease1
  FROM jobq.claim(worker_id => 'w1') \gset

-- a wrong token: complete and checkpoint return false, fail and extend NULL
SELECT jobq.complete(:job, :token1 + 1) AS completed;
SELECT jobq.checkpoint(:job, :token1 + 1, '{"step": 1}') AS checkpointed;
SELECT jobq.fail(:job, :token1 + 1, 'wrong token') IS NULL AS fail_is_null;
SELECT jobq.extend(:job, :token1 + 1, '1 hour') IS NULL AS extend_is_null;

-- the right token on another job id is just as wrong
SELECT jobq.complete(:job + 1000, :token1) AS completed;
SELECT jobq.fail(:job + 1000, :token1, 'no such job') IS NULL AS fail_is_null;

-- nothing changed: still running, same lease, no error, no checkpoint, no result
SELECT status, retry_count, worker_id, last_error, checkpoint, result,
       lease_expires_at = :'lease1' AS same_lease
  FROM jobq.jobs WHERE job_id = :job;

-- extend with the right token moves the lease to now() + lease and returns it
-- (now: the moment of the extend, which it also stores as updated_at)
SELECT jobq.extend(:job, :token1, '1 hour') AS new_lease \gset
SELECT :'new_lease'::timestamptz - updated_at AS lease_from_extend,
       :'new_lease'::timestamptz > :'lease1'::timestamptz AS later_than_before,
       lease_expires_at = :'new_lease' AS view_shows_new_lease, status
  FROM jobq.jobs WHERE job_id = :job;

-- extend can also shorten the lease: it is set, not added
SELECT jobq.extend(:job, :token1, '2 minutes') AS new_lease \gset
SELECT :'new_lease'::timestamptz - updated_at AS lease_from_extend,
       lease_expires_at = :'new_lease' AS view_shows_new_lease
  FROM jobq.jobs WHERE job_id = :job;

-- extend keeps the token valid
SELECT jobq.checkpoint(:job, :token1, '{"step": 1}') AS checkpointed;

-- fail with retry_in 0 re-queues the job; the next claim gets a new token
SELECT jobq.fail(:job, :token1, 'worker restarted', retry_in => '0 s') AS status;
SELECT lease_token AS token2 FROM jobq.claim(worker_id => 'w2') \gset
SELECT :token2 <> :token1 AS token_changed;

-- the old token is now stale: complete/checkpoint false, fail/extend NULL
SELECT jobq.complete(:job, :token1) AS completed;
SELECT jobq.checkpoint(:job, :token1, '{"step": 99}') AS checkpointed;
SELECT jobq.fail(:job, :token1, 'stale worker') IS NULL AS fail_is_null;
SELECT jobq.extend(:job, :token1, '1 hour') IS NULL AS extend_is_null;

-- ... and changed nothing: the second attempt is untouched
SELECT status, retry_count, worker_id, last_error, checkpoint,
       lease_expires_at - claimed_at AS default_lease
  FROM jobq.jobs WHERE job_id = :job;

-- a third claim of another job gets yet another token
SELECT job_id AS job2 FROM jobq.enqueue('transcode', '{"file": "b.mp4"}') \gset
SELECT lease_token AS token3 FROM jobq.claim() \gset
SELECT :token3 <> :token2 AND :token3 <> :token1 AS token_changed;

-- the current token completes the job
SELECT jobq.complete(:job, :token2, '{"ok": true}') AS completed;

-- once the job is finished even its last token is spent
SELECT jobq.complete(:job, :token2) AS completed;
SELECT jobq.checkpoint(:job, :token2, '{"step": 3}') AS checkpointed;
SELECT jobq.fail(:job, :token2, 'too late') IS NULL AS fail_is_null;
SELECT jobq.extend(:job, :token2, '1 hour') IS NULL AS extend_is_null;
SELECT status, retry_count, last_error, result, checkpoint
  FROM jobq.jobs WHERE job_id = :job;

-- a pending job has no valid token at all
SELECT jobq.fail(:job2, :token3, 'requeue', retry_in => '1 hour') AS status;
SELECT jobq.complete(:job2, :token3) AS completed;
SELECT jobq.extend(:job2, :token3, '1 hour') IS NULL AS extend_is_null;
SELECT status, retry_count FROM jobq.jobs WHERE job_id = :job2;
