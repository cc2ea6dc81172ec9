--
-- update_job: an administrator changes a pending, failed or cancelled job
-- (NULL leaves a field as it is); run_schedule: a schedule fired now under
-- a key of its own
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
DROP ROLE IF EXISTS update_worker;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- a pending job: new payload, priority and run_at; claims see the change
SELECT job_id AS a FROM jobq.enqueue('mail', '{"to": "x@"}', queue => 'uq') \gset
SELECT job_id AS b FROM jobq.enqueue('mail', '{"to": "b@example.org"}', queue => 'uq') \gset
SELECT jobq.update_job(:a, payload => '{"to": "a@example.org"}', priority => 5) AS updated;
SELECT job_id = :a AS a_first, payload, priority FROM jobq.claim('uq');
-- run_at moves a pending job into the future (and back)
SELECT jobq.update_job(:b, run_at => now() + interval '1 hour') AS updated;
SELECT count(*) AS claimable FROM jobq.claim('uq');
SELECT status, run_at > now() AS later FROM jobq.jobs WHERE job_id = :b;
SELECT jobq.update_job(:b, run_at => now()) AS updated;
SELECT job_id = :b AS b_claimed FROM jobq.claim('uq');

-- a failed job: fix the payload and max_retries, then retry it
SELECT job_id AS c FROM jobq.enqueue('mail', '{"to": 42}', queue => 'uq', max_retries => 0) \gset
SELECT lease_token AS t FROM jobq.claim('uq') \gset
SELECT jobq.fail(:c, :t, 'bad address', retryable => false);
SELECT jobq.update_job(:c, payload => '{"to": "c@example.org"}', max_retries => 3) AS updated;
SELECT status, payload, max_retries FROM jobq.jobs WHERE job_id = :c;
SELECT jobq.retry(:c) AS retried;
SELECT payload, max_retries FROM jobq.claim('uq');

-- running and completed jobs, and missing ones, are not changed
SELECT jobq.update_job(:c, priority => 1) AS running_updated;
SELECT jobq.update_job(:a, priority => 1) AS running_updated;
SELECT jobq.update_job(123456789, priority => 1) AS missing_updated;
-- a call with nothing to change still reports the job as updatable
SELECT job_id AS d FROM jobq.enqueue('mail', '{}', queue => 'uq') \gset
SELECT jobq.update_job(:d) AS updated;
SELECT jobq.cancel(:d);
SELECT jobq.update_job(:d, payload => '{"n": 1}') AS cancelled_updated;
SELECT status, payload FROM jobq.jobs WHERE job_id = :d;

-- bad input: named, with a hint, and nothing changed
SELECT jobq.update_job(NULL);
SELECT jobq.update_job(:d, payload => '[1, 2]');
SELECT jobq.update_job(:d, run_at => 'infinity');
SELECT jobq.update_job(:d, max_retries => -1);
SELECT payload FROM jobq.jobs WHERE job_id = :d;

-- every change is in the job's story: who changed what, as attempt-history
-- rows of outcome 'edited' numbered -1, -2, ... (the attempts keep theirs);
-- refused calls left none
SELECT attempt, outcome, replace(error, current_user, 'ME') AS error
  FROM jobq.attempt WHERE job_id = :d ORDER BY finished_at, attempt;
SELECT count(*) AS story FROM jobq.job(:d) WHERE outcome = 'edited';

-- run_schedule: the schedule's job now, its timing untouched; every call is
-- a job of its own, also twice in one transaction
SELECT jobq.schedule('nightly', '0 3 * * *', 'report', '{"r": 1}', queue => 'uq',
                     timezone => 'Europe/Berlin');
SELECT next_fire_at AS next1 FROM jobq.schedules WHERE name = 'nightly' \gset
SELECT jobq.run_schedule('nightly') AS run1 \gset
SELECT kind, payload, queue, status, run_at <= now() AS due_now,
       idempotency_key LIKE 'jobq:schedule:%:run:%' AS own_key
  FROM jobq.jobs WHERE job_id = :run1;
SELECT next_fire_at = :'next1' AS same_next, last_fire_at IS NULL AS never_fired
  FROM jobq.schedules WHERE name = 'nightly';
BEGIN;
SELECT jobq.run_schedule('nightly') <> jobq.run_schedule('nightly') AS two_jobs;
COMMIT;
SELECT count(*) AS jobs FROM jobq.jobs WHERE kind = 'report';
SELECT jobq.pause_schedule('nightly');
SELECT jobq.run_schedule('nightly') > :run1 AS paused_still_runs;
SELECT jobq.run_schedule('no such schedule');
SELECT jobq.run_schedule(NULL);

-- capabilities: a worker may not change jobs or fire schedules
CREATE ROLE update_worker;
SELECT jobq.grant('uq', 'update_worker', 'work');
SET ROLE update_worker;
SELECT jobq.update_job(:d, priority => 1);
SELECT jobq.run_schedule('nightly');
RESET ROLE;

DROP OWNED BY update_worker;
DROP ROLE update_worker;
DROP EXTENSION jobq CASCADE;
