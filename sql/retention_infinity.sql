--
-- "Keep for ever": from PostgreSQL 17 on, intervals have 'infinity', and
-- jobq takes it as a retention (such jobs are never pruned); before 17 the
-- longest retention is 1000 years, and the hint says so.  Two expected
-- outputs: retention_infinity.out (17 and later), retention_infinity_1.out
-- (15 and 16).
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

SELECT current_setting('server_version_num')::int >= 170000 AS interval_has_infinity;
SELECT jobq.configure('forever', retention_completed => '10000 years');
SELECT jobq.configure('forever', retention_completed => 'infinity', retention_failed => 'infinity');
SELECT queue, retention_completed, retention_failed FROM jobq.queues WHERE queue = 'forever';

-- a completed job of that queue outlives any pruning
SELECT job_id AS j FROM jobq.enqueue('k', queue => 'forever') \gset
SELECT job_id AS j, lease_token AS t FROM jobq.claim('forever') \gset
SELECT jobq.complete(:j, :t);
UPDATE jobq.job SET finished_at = finished_at - interval '2000 years' WHERE job_id = :j;
SELECT jobq.prune() >= 0 AS pruned;
SELECT status FROM jobq.jobs WHERE job_id = :j;
