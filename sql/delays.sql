--
-- delays: a job whose run_at is in the future is pending but not claimable
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- a job delayed by an hour
SELECT now() + interval '1 hour' AS later_at \gset
SELECT job_id AS later FROM jobq.enqueue('report', run_at => :'later_at') \gset

-- it is pending, with run_at exactly where it was asked to be
SELECT status, run_at = :'later_at' AS run_at_as_asked
  FROM jobq.jobs WHERE job_id = :later;

-- ... but claim does not see it
SELECT count(*) AS claimed FROM jobq.claim();

-- not even when it has the highest priority
SELECT created FROM jobq.enqueue('urgent-later', priority => 30,
                                 run_at => now() + interval '1 hour');
SELECT count(*) AS claimed FROM jobq.claim(batch => 10);

-- a job with run_at in the past is claimable at once, and ordered before a
-- job of the same priority enqueued earlier with run_at = now()
SELECT created FROM jobq.enqueue('now');
SELECT created FROM jobq.enqueue('overdue', run_at => now() - interval '1 hour');
SELECT kind FROM jobq.claim();
SELECT kind FROM jobq.claim();
SELECT count(*) AS claimed FROM jobq.claim();

-- a job delayed by two seconds becomes claimable once that time has passed,
-- and then goes before lower-priority jobs that were ready all along.  (The
-- first claim comes right after the enqueue; two seconds are a deadline that
-- only a hung server misses.  Then the test waits, up to a minute, until
-- the delay has passed by the clock; how long that takes is not checked.)
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('ready-low', array_fill('{}'::jsonb, ARRAY[3]));
SELECT job_id AS soon
  FROM jobq.enqueue('soon', priority => 20, run_at => clock_timestamp() + interval '2 s') \gset
SELECT kind FROM jobq.claim();
DO $$
BEGIN
    FOR i IN 1..600 LOOP
        EXIT WHEN clock_timestamp() > (SELECT run_at FROM jobq.job WHERE kind = 'soon');
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
SELECT clock_timestamp() > run_at AS soon_is_due FROM jobq.job WHERE job_id = :soon;
SELECT kind, job_id = :soon AS is_soon FROM jobq.claim();

-- a job enqueued with run_at in the past after claims have moved on still
-- takes its place in the order: before the remaining ready-low jobs
SELECT created FROM jobq.enqueue('late-overdue', run_at => now() - interval '2 hours');
SELECT kind FROM jobq.claim();
SELECT kind FROM jobq.claim();
SELECT kind FROM jobq.claim();
SELECT count(*) AS claimed FROM jobq.claim();

-- the delayed jobs are still waiting
SELECT kind, status FROM jobq.jobs WHERE run_at > now() ORDER BY job_id;

-- a delayed job this transaction itself enqueued (or retried) is claimable
-- by the same transaction once due, even while every other backend still
-- knows only a queue whose next delayed job is an hour away
SELECT created FROM jobq.enqueue('later', queue => 'own', run_at => now() + interval '1 hour');
SELECT count(*) AS claimed FROM jobq.claim('own');
BEGIN;
SELECT created
  FROM jobq.enqueue('own-soon', queue => 'own', run_at => clock_timestamp() + interval '50 ms');
SELECT pg_sleep(0.2);
SELECT kind FROM jobq.claim('own');
ROLLBACK;
