-- Operations from psql: retry, retry_failed, cancel, pause, resume, purge.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

SELECT job_id AS a FROM jobq.enqueue('a', '{"n": 1}') \gset
SELECT job_id AS b FROM jobq.enqueue('b', '{"n": 2}') \gset
SELECT job_id AS c FROM jobq.enqueue('c', '{"n": 3}', run_at => now() + interval '1 hour') \gset

-- cancel a pending (ready) job, a pending (delayed) job and a running job
SELECT job_id = :a AS claimed_a, lease_token AS tok FROM jobq.claim() \gset
\echo :claimed_a
SELECT jobq.cancel(:b) AS cancel_ready;
SELECT jobq.cancel(:c) AS cancel_delayed;
SELECT jobq.cancel(:a) AS cancel_running;
-- a cancelled job cannot be cancelled again, or finished by its old worker
SELECT jobq.cancel(:a) AS cancel_again;
SELECT jobq.complete(:a, :tok) AS complete_after_cancel;
SELECT jobq.fail(:a, :tok, 'x') IS NULL AS fail_after_cancel_is_null;
SELECT jobq.extend(:a, :tok, '1 minute') IS NULL AS extend_after_cancel_is_null;
SELECT job_id = :a AS is_a, status, finished_at IS NOT NULL AS finished FROM jobq.jobs ORDER BY job_id;
-- nothing of them is claimable any more
SELECT count(*) AS claimable FROM jobq.claim(batch => 10);
-- the running attempt that was cancelled is in the history
SELECT attempt, outcome, error FROM jobq.attempt WHERE job_id = :a;
-- cancel of a job that does not exist
SELECT jobq.cancel(-1) AS cancel_missing;

-- retry: cancelled -> pending with a fresh retry budget, claimable again
SELECT jobq.retry(:a) AS retry_cancelled;
SELECT jobq.retry(:a) AS retry_pending_again;
SELECT status, retry_count, finished_at IS NULL AS unfinished FROM jobq.jobs WHERE job_id = :a;
SELECT job_id = :a AS got_a, lease_token AS tok FROM jobq.claim() \gset
\echo :got_a
SELECT jobq.retry(:a) AS retry_running;

-- dead letter replay: two jobs in the dead letter (not retryable; max_retries 0), then retry_failed
SELECT jobq.fail(:a, :tok, 'boom', retryable => false) AS status;
SELECT job_id AS d FROM jobq.enqueue('d', max_retries => 0) \gset
SELECT lease_token AS dtok FROM jobq.claim(kinds => ARRAY['d']) \gset
SELECT jobq.fail(:d, :dtok, 'card declined') AS status;
SELECT count(*) AS dead FROM jobq.dead_letter;
SELECT jobq.retry_failed(kind => 'zzz') AS retried_other_kind;
SELECT jobq.retry_failed(kind => 'd') AS retried_kind_d;
SELECT jobq.retry_failed() AS retried_rest;
SELECT count(*) AS dead FROM jobq.dead_letter;
-- history and last_error are kept across the replay
SELECT job_id = :d AS is_d, status, retry_count, last_error FROM jobq.jobs WHERE job_id IN (:a, :d) ORDER BY job_id;
SELECT count(*) AS history_rows FROM jobq.attempt WHERE job_id IN (:a, :d);

-- pause / resume: a paused queue hands out nothing, and stays paused
SELECT jobq.pause('default');
SELECT paused FROM jobq.queue_stats WHERE queue = 'default';
SELECT count(*) AS claimed_while_paused FROM jobq.claim(batch => 10);
SELECT job_id AS e FROM jobq.enqueue('e') \gset
SELECT count(*) AS claimed_while_paused FROM jobq.claim(batch => 10);
SELECT jobq.resume('default');
SELECT count(*) AS claimed_after_resume FROM jobq.claim(batch => 10);
-- pausing a queue that does not exist yet creates it paused
SELECT jobq.pause('later');
SELECT queue, paused FROM jobq.queue_stats WHERE queue = 'later';

-- purge: only finished jobs, of one status, older than a bound
SELECT job_id AS f FROM jobq.enqueue('f', queue => 'p') \gset
SELECT lease_token AS ftok FROM jobq.claim('p') \gset
SELECT jobq.complete(:f, :ftok);
SELECT jobq.purge('p', 'completed', '1 hour') AS purged_too_young;
SELECT jobq.purge('p', 'failed') AS purged_other_status;
SELECT jobq.purge('p', 'completed') AS purged;
SELECT count(*) AS left_in_p FROM jobq.jobs WHERE queue = 'p';

-- bad input
SELECT jobq.purge('p', 'pending');
SELECT jobq.purge('p', 'completed', '-1 day');
SELECT jobq.purge('p', 'completed', NULL);
SELECT jobq.cancel(NULL);
SELECT jobq.retry(NULL);
SELECT jobq.pause('');
SELECT jobq.resume(NULL);
