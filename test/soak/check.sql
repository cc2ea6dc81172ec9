-- test/soak/check.sql: consistency checks after the soak test has drained.
--
-- Prints one row per check (observed, expected, ok) and then the numbers.
-- run.sh fails when any check is not ok.

\set ON_ERROR_STOP 1
\pset footer off

CREATE TEMP VIEW soak_checks AS
WITH j AS (SELECT * FROM jobq.jobs WHERE queue = 'soak'),
	 n AS (
		SELECT (SELECT count(*) FROM j WHERE status = 'completed') AS completed,
			   (SELECT count(*) FROM j WHERE status = 'failed') AS failed,
			   (SELECT coalesce(sum(retry_count), 0) FROM j) AS retries
	 )
SELECT * FROM (VALUES
	(1, 'jobs still pending or running',
		(SELECT count(*) FROM j WHERE status IN ('pending', 'running')), 0::bigint),
	(2, 'jobs neither completed nor failed',
		(SELECT count(*) FROM j WHERE status NOT IN ('completed', 'failed')), 0),
	(3, 'ledger rows (expected: completed jobs)',
		(SELECT count(*) FROM soak.ledger), (SELECT completed FROM n)),
	(4, 'ledger rows whose job is not completed',
		(SELECT count(*) FROM soak.ledger l
		  WHERE NOT EXISTS (SELECT 1 FROM j WHERE j.job_id = l.job_id AND j.status = 'completed')), 0),
	(5, 'complete calls that returned false',
		(SELECT count(*) FROM soak.stale), 0),
	(6, 'fail calls that returned NULL',
		(SELECT count(*) FROM soak.fail_log WHERE new_status IS NULL), 0),
	(7, 'non-retryable fail calls that re-queued',
		(SELECT count(*) FROM soak.fail_log WHERE NOT retryable AND new_status IS DISTINCT FROM 'failed'), 0),
	(8, 'jobs with retry_count > max_retries',
		(SELECT count(*) FROM j WHERE retry_count > max_retries), 0),
	(9, 'failed jobs without last_error',
		(SELECT count(*) FROM j WHERE status = 'failed' AND last_error IS NULL), 0),
	(10, 'completed jobs without finished_at',
		(SELECT count(*) FROM j WHERE status = 'completed' AND finished_at IS NULL), 0),
	(11, 'jobs in queue (expected: enqueues with created)',
		(SELECT count(*) FROM j), (SELECT count(*) FROM soak.enqueued WHERE created)),
	(12, 'enqueue results naming no job',
		(SELECT count(*) FROM soak.enqueued e
		  WHERE NOT EXISTS (SELECT 1 FROM j WHERE j.job_id = e.job_id)), 0),
	(13, 'idempotency keys with more than one job',
		(SELECT count(*) FROM (SELECT 1 FROM soak.enqueued WHERE idempotency_key IS NOT NULL
								GROUP BY kind, idempotency_key
								HAVING count(DISTINCT job_id) > 1) AS d), 0),
	(14, 'keys whose first enqueue was not created',
		(SELECT count(*) FROM (SELECT 1 FROM soak.enqueued WHERE idempotency_key IS NOT NULL
								GROUP BY kind, idempotency_key
								HAVING count(*) FILTER (WHERE created) <> 1) AS d), 0),
	-- every attempt that did not complete either re-queued its job (a
	-- retry used) or ended it (failed), whether it ended through fail()
	-- or through the reaper taking back an abandoned lease
	(15, 'retries used + failed jobs (expected: fail calls + abandoned leases)',
		(SELECT retries + failed FROM n),
		(SELECT count(*) FROM soak.fail_log) + (SELECT count(*) FROM soak.abandoned)),
	(16, 'failed jobs (expected: at least the fail calls that ended a job)',
		(SELECT failed FROM n),
		greatest((SELECT failed FROM n), (SELECT count(*) FROM soak.fail_log WHERE new_status = 'failed'))),
	(17, 'abandoned jobs whose lease was never taken back',
		(SELECT count(*) FROM soak.abandoned a
		  WHERE EXISTS (SELECT 1 FROM j WHERE j.job_id = a.job_id AND j.status = 'running')), 0)
) AS c(no, check_name, observed, expected);

\echo
SELECT no, check_name AS check, observed, expected,
	   CASE WHEN observed = expected THEN 'ok' ELSE 'FAILED' END AS result
  FROM soak_checks ORDER BY no;

SELECT count(*) FILTER (WHERE observed <> expected) AS failed_checks
  FROM soak_checks \gset
