--
-- Pruning (jobq.prune): in batches, the finished jobs past their own
-- queue's retention (completed and cancelled: retention_completed; failed:
-- retention_failed) leave with their history; everything else stays.
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- 'gone' keeps nothing; 'keep' has the default retention (1 day, 30 days)
SELECT jobq.configure('gone', retention_completed => '0', retention_failed => '0',
                      max_retries => 0);
SELECT jobq.configure('keep', max_retries => 0);
SELECT queue, retention_completed, retention_failed FROM jobq.queues ORDER BY queue;

-- The background worker prunes too (every jobq.prune_interval): everything
-- below runs in one transaction, whose jobs it cannot see, so that only
-- these jobq.prune calls prune them.
BEGIN;

-- 30 jobs in each queue, interleaved by job id; in each queue every third
-- job completes, every third fails, every third stays (pending or running)
SELECT count(*) FROM generate_series(1, 30) i,
       LATERAL (SELECT * FROM jobq.enqueue('k', jsonb_build_object('i', i), queue => 'gone')
                UNION ALL
                SELECT * FROM jobq.enqueue('k', jsonb_build_object('i', i), queue => 'keep')) e;
CREATE TEMP TABLE c AS
SELECT c.* FROM jobq.claim('gone', batch => 30) c
UNION ALL SELECT c.* FROM jobq.claim('keep', batch => 30) c;
SELECT count(*) FILTER (WHERE CASE WHEN (payload->>'i')::int % 3 = 0
                        THEN jobq.complete(job_id, lease_token) END) AS completed,
       count(*) FILTER (WHERE CASE WHEN (payload->>'i')::int % 3 = 1
                        THEN jobq.fail(job_id, lease_token, 'no') IS NOT NULL END) AS failed
  FROM c;
-- two of the unfinished ones go back to pending, the rest keep running
SELECT count(*) FILTER (WHERE CASE WHEN (payload->>'i')::int IN (2, 5)
                        THEN jobq.snooze(job_id, lease_token, '0') IS NOT NULL END) AS snoozed
  FROM c;

-- batches of 4: each call deletes up to 4 due jobs; 20 jobs of 'gone' are
-- due (10 completed, 10 failed)
SELECT jobq.prune(4) AS p1, jobq.prune(4) AS p2, jobq.prune(4) AS p3, jobq.prune(4) AS p4,
       jobq.prune(4) AS p5, jobq.prune(4) AS p6;

-- what is left: all of 'keep', and the unfinished jobs of 'gone'
SELECT queue, status, count(*) FROM jobq.job GROUP BY 1, 2 ORDER BY 1, 2;
-- their history went with them
SELECT count(*) AS orphan_attempts FROM jobq.attempt a
 WHERE NOT EXISTS (SELECT 1 FROM jobq.job j WHERE j.job_id = a.job_id);

-- retention decides: with 1 hour, the jobs of 'gone' that finish now stay;
-- back to 0, they go
SELECT jobq.configure('gone', retention_completed => '1 hour');
SELECT count(*) FILTER (WHERE CASE WHEN j.queue = 'gone' AND j.status = 'running'
                        THEN jobq.complete(c.job_id, c.lease_token) END) AS completed_now
  FROM c JOIN jobq.job j USING (job_id);
SELECT jobq.prune(100) AS within_retention;
SELECT jobq.configure('gone', retention_completed => '0');
SELECT jobq.prune(100) AS past_retention;
SELECT queue, status, count(*) FROM jobq.job GROUP BY 1, 2 ORDER BY 1, 2;
COMMIT;

-- bad input
SELECT jobq.prune(0);

-- jobq.idempotency_retention = -1 keeps a pruned job's key for ever: its
-- expires_at stays NULL, prune never deletes it, and it still de-duplicates
-- (in one transaction, out of the background worker's sight)
BEGIN;
SET LOCAL jobq.idempotency_retention = -1;
SELECT created FROM jobq.enqueue('forever.kind', '{}', 'forever', idempotency_key => 'fk1');
SELECT jobq.complete(job_id, lease_token) AS completed FROM jobq.claim('forever');
SELECT jobq.purge('forever', 'completed') AS purged;
SELECT count(*) AS key_rows, count(expires_at) AS with_expiry
  FROM jobq.idempotency_key WHERE kind = 'forever.kind' AND key = 'fk1';
SELECT FROM (SELECT jobq.prune(1000)) AS pruned;
SELECT count(*) AS key_rows_after_prune
  FROM jobq.idempotency_key WHERE kind = 'forever.kind' AND key = 'fk1';
SELECT created AS created_again FROM jobq.enqueue('forever.kind', '{}', 'forever', idempotency_key => 'fk1');
ROLLBACK;
-- with the default, the same purge sets the key's expiry a week after the job finished
BEGIN;
SELECT created FROM jobq.enqueue('week.kind', '{}', 'forever', idempotency_key => 'wk1');
SELECT jobq.complete(job_id, lease_token) AS completed FROM jobq.claim('forever');
SELECT jobq.purge('forever', 'completed') AS purged;
SELECT expires_at - now() BETWEEN interval '6 days 23 hours' AND interval '7 days 1 minute' AS expires_in_a_week
  FROM jobq.idempotency_key WHERE kind = 'week.kind' AND key = 'wk1';
ROLLBACK;
