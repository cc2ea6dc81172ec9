--
-- schedule: cron schedules created, updated, paused, resumed and removed by
-- name, and fired (by the background worker and by jobq.run_schedules())
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;
SET timezone = 'UTC';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- The instance runs a jobq worker (naptime 1 s) that fires due schedules.
-- Schedules here fire far in the future, except where an assertion allows
-- for the worker.

-- the jobq.schedules view
SELECT column_name, data_type
  FROM information_schema.columns
 WHERE table_schema = 'jobq' AND table_name = 'schedules'
 ORDER BY ordinal_position;

--
-- create, and update by name
--

-- a new schedule: its id, and its next fire is the first one after now
SELECT jobq.schedule('nightly', '0 2 1 1 *', 'export.run', '{"format": "csv"}',
                     queue => 'batch', timezone => 'Europe/Paris',
                     misfire => 'run_all', priority => 7) AS nightly_id \gset
SELECT schedule_id = :nightly_id AS same_id, name, cron, timezone, misfire, kind, queue,
       priority, payload, paused, last_fire_at, last_job_id, last_job_status
  FROM jobq.schedules;
-- (the first January 1st, 02:00 in Paris, after now: in the future, at most
-- a year away, and at that wall-clock time; worked out here, not by cron_next)
SELECT next_fire_at > now() AS in_future,
       next_fire_at <= now() + interval '1 year' AS within_a_year,
       to_char(next_fire_at AT TIME ZONE 'Europe/Paris', 'MM-DD HH24:MI:SS') AS paris_wall_clock,
       created_at = updated_at AS never_updated
  FROM jobq.schedules WHERE name = 'nightly';

-- the defaults: queue default, UTC, run_once, priority 0, payload {}
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh') AS yearly_id \gset
SELECT name, cron, timezone, misfire, kind, queue, priority, payload, paused
  FROM jobq.schedules WHERE schedule_id = :yearly_id;
SELECT next_fire_at = date_trunc('year', updated_at) + interval '1 year' AS next_january_1st
  FROM jobq.schedules WHERE schedule_id = :yearly_id;

-- scheduling an existing name updates that schedule and returns its id
SELECT jobq.schedule('nightly', '30 3 1 1 *', 'export.v2', '{"format": "json"}',
                     queue => 'batch2', timezone => 'Asia/Kathmandu',
                     misfire => 'skip', priority => -3) = :nightly_id AS same_id;
SELECT count(*) AS schedules FROM jobq.schedule;
SELECT name, cron, timezone, misfire, kind, queue, priority, payload, paused
  FROM jobq.schedules WHERE schedule_id = :nightly_id;
-- the new cron and time zone take effect: next_fire_at is recomputed
SELECT next_fire_at > now() AS in_future,
       next_fire_at <= now() + interval '1 year' AS within_a_year,
       to_char(next_fire_at AT TIME ZONE 'Asia/Kathmandu', 'MM-DD HH24:MI:SS') AS kathmandu_wall_clock,
       to_char(next_fire_at, 'MI') AS utc_minute
  FROM jobq.schedules WHERE schedule_id = :nightly_id;

-- only the time zone changes: 03:30 in New York now (other arguments back to their defaults)
SELECT jobq.schedule('nightly', '30 3 1 1 *', 'export.v2', timezone => 'America/New_York')
       = :nightly_id AS same_id;
SELECT timezone, misfire, priority, payload,
       next_fire_at > now() AND next_fire_at <= now() + interval '1 year' AS within_a_year,
       to_char(next_fire_at AT TIME ZONE 'America/New_York', 'MM-DD HH24:MI:SS') AS new_york_wall_clock
  FROM jobq.schedules WHERE schedule_id = :nightly_id;

-- a cron that never fires ('0 0 30 2 *', February 30th): next_fire_at is NULL
SELECT jobq.schedule('feb30', '0 0 30 2 *', 'never') AS feb30_id \gset
SELECT name, next_fire_at IS NULL AS never_fires, last_fire_at
  FROM jobq.schedules WHERE schedule_id = :feb30_id;
-- changing it to a cron that fires gives it a next fire
SELECT jobq.schedule('feb30', '0 0 29 2 *', 'never') = :feb30_id AS same_id;
-- (the next February 29th: in the future, within four years, in a leap year)
SELECT next_fire_at > now() AND next_fire_at <= now() + interval '4 years' AS within_4_years,
       to_char(next_fire_at, 'MM-DD HH24:MI:SS') AS leap_day
  FROM jobq.schedules WHERE schedule_id = :feb30_id;
-- and back
SELECT jobq.schedule('feb30', '0 0 30 2 *', 'never') = :feb30_id AS same_id;
SELECT next_fire_at IS NULL AS never_fires FROM jobq.schedules WHERE schedule_id = :feb30_id;

--
-- pause and resume
--
SELECT jobq.pause_schedule('yearly');
SELECT name, paused FROM jobq.schedules ORDER BY name;
-- resuming before a fire time passed fires nothing
SELECT jobq.resume_schedule('yearly');
SELECT name, paused,
       next_fire_at = date_trunc('year', now()) + interval '1 year' AS next_january_1st
  FROM jobq.schedules WHERE name = 'yearly';
-- unrecognized names
SELECT jobq.pause_schedule('no-such-schedule');
SELECT jobq.resume_schedule('no-such-schedule');
-- a schedule that never fires can be paused and resumed
SELECT jobq.pause_schedule('feb30');
SELECT jobq.resume_schedule('feb30');
SELECT paused, next_fire_at IS NULL AS never_fires FROM jobq.schedules WHERE name = 'feb30';
SELECT count(*) AS jobs FROM jobq.job;

-- Fire times missed while paused follow the misfire policy at resume.  Each
-- schedule below fires on January 1st; while paused, its next fire is moved
-- back to 2020 (as if it had been paused since then), so every January 1st
-- from 2020 to this year is a missed fire time: extract(year FROM now()) - 2019
-- of them.
SELECT m AS misfire,
       jobq.schedule('ny-' || m, '0 0 1 1 *', 'new-year', jsonb_build_object('policy', m),
                     misfire => m) > 0 AS scheduled
  FROM unnest(ARRAY['skip', 'run_once', 'run_all']) m ORDER BY m;
SELECT jobq.pause_schedule(name) FROM jobq.schedule WHERE name LIKE 'ny-%' ORDER BY name;
UPDATE jobq.schedule SET next_fire_at = '2020-01-01 00:00:00+00' WHERE name LIKE 'ny-%';

-- skip: resume fires nothing
SELECT jobq.resume_schedule('ny-skip');
SELECT count(*) AS jobs FROM jobq.job WHERE payload->>'policy' = 'skip';
-- run_once: one job, for the latest missed time (this year's January 1st)
SELECT jobq.resume_schedule('ny-run_once');
SELECT count(*) AS jobs,
       min(run_at) = date_trunc('year', now()) AS run_at_latest_missed
  FROM jobq.job WHERE payload->>'policy' = 'run_once';
-- run_all: one job for each missed time
SELECT jobq.resume_schedule('ny-run_all');
SELECT count(*) = extract(year FROM now()) - 2019 AS one_per_missed_year,
       count(DISTINCT run_at) = count(*) AS distinct_run_at,
       min(run_at) = '2020-01-01 00:00:00+00' AS first_2020,
       max(run_at) = date_trunc('year', now()) AS last_this_year,
       bool_and(run_at = date_trunc('year', run_at)) AS all_january_1st
  FROM jobq.job WHERE payload->>'policy' = 'run_all';
-- every fired job: pending, run_at in the past, key naming schedule and fire time
-- (how many each policy fired is checked above: the number changes every year)
SELECT s.name,
       bool_and(j.status = 'pending' AND j.run_at <= now()) AS pending_and_due,
       bool_and(j.queue = 'default' AND j.kind = 'new-year') AS queue_and_kind,
       bool_and(j.idempotency_key = 'jobq:schedule:' || s.schedule_id || ':'
                || (extract(epoch FROM j.run_at - '2000-01-01 00:00:00+00') * 1000000)::bigint)
         AS key_is_schedule_and_fire_time
  FROM jobq.job j JOIN jobq.schedule s ON j.payload->>'policy' = s.misfire
 WHERE s.name LIKE 'ny-%'
 GROUP BY s.name ORDER BY s.name;
-- after resume: next fire is next January 1st; last fire and last job per policy
SELECT s.name, s.paused,
       s.next_fire_at = date_trunc('year', now()) + interval '1 year' AS next_january_1st,
       s.last_fire_at = date_trunc('year', now()) AS last_fire_this_year,
       s.last_job_id = (SELECT max(job_id) FROM jobq.job j
                         WHERE j.payload->>'policy' = s.misfire
                           AND j.run_at = date_trunc('year', now())) AS last_job_is_latest,
       s.last_job_status
  FROM jobq.schedules s WHERE s.name LIKE 'ny-%' ORDER BY s.name;
-- resuming again: true (the schedule exists), and nothing fires again
SELECT jobq.resume_schedule('ny-run_all');
SELECT count(*) = extract(year FROM now()) - 2019 AS unchanged
  FROM jobq.job WHERE payload->>'policy' = 'run_all';

--
-- jobq.run_schedules() fires due schedules from SQL
--
-- Here too a schedule is made due by moving its next fire back; in the same
-- transaction, so the worker (which skips locked schedules) does not fire it.
BEGIN;
UPDATE jobq.schedule SET next_fire_at = '2020-01-01 00:00:00+00', misfire = 'run_once'
 WHERE name = 'ny-skip';
SELECT jobq.run_schedules() AS fired;
SELECT jobq.run_schedules() AS fired_again;
COMMIT;
SELECT count(*) AS jobs,
       min(run_at) = date_trunc('year', now()) AS run_at_latest_missed
  FROM jobq.job WHERE payload->>'policy' = 'skip';
SELECT next_fire_at = date_trunc('year', now()) + interval '1 year' AS next_january_1st,
       last_fire_at = date_trunc('year', now()) AS last_fire_this_year
  FROM jobq.schedules WHERE name = 'ny-skip';
-- a fire time that already fired cannot fire again: it is not after the
-- schedule's last fire, and its key is taken, so run_schedules() enqueues
-- nothing (no other schedule of this file is due before next New Year)
BEGIN;
UPDATE jobq.schedule SET next_fire_at = '2020-01-01 00:00:00+00', misfire = 'run_all'
 WHERE name = 'ny-run_all';
SELECT jobq.run_schedules() AS fired;
COMMIT;
SELECT count(*) = extract(year FROM now()) - 2019 AS still_one_per_year,
       count(DISTINCT run_at) = count(*) AS distinct_run_at
  FROM jobq.job WHERE payload->>'policy' = 'run_all';
SELECT count(*) AS schedules_due FROM jobq.schedule WHERE next_fire_at <= now();

--
-- the worker fires an every-other-second schedule on time
--
SELECT jobq.schedule('tick', '*/2 * * * * *', 'tick', queue => 'ticks') AS tick_id \gset
DO $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '60 s';
BEGIN
    WHILE (SELECT count(*) FROM jobq.job WHERE kind = 'tick') < 2 LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'the worker fired % tick jobs in 60 s',
                (SELECT count(*) FROM jobq.job WHERE kind = 'tick');
        END IF;
        PERFORM pg_sleep(0.1);
    END LOOP;
END
$$;
-- at least two fires; every run_at is a whole, even second (the cron's fire
-- times); no fire time twice; each key names the schedule and its fire time
SELECT count(*) >= 2 AS fired,
       count(DISTINCT run_at) = count(*) AS distinct_run_at,
       count(DISTINCT idempotency_key) = count(*) AS distinct_keys,
       bool_and(date_trunc('second', run_at) = run_at) AS whole_seconds,
       bool_and(extract(second FROM run_at)::int % 2 = 0) AS even_seconds,
       bool_and(idempotency_key = 'jobq:schedule:' || :tick_id || ':'
                || (extract(epoch FROM run_at - '2000-01-01 00:00:00+00') * 1000000)::bigint)
         AS key_is_schedule_and_fire_time,
       bool_and(queue = 'ticks' AND status = 'pending') AS pending_in_ticks,
       bool_and(created_at >= run_at) AS created_after_fire_time
  FROM jobq.job WHERE kind = 'tick';
-- the schedule shows its latest fire and job (one snapshot: fires commit with the row)
SELECT s.last_fire_at = (SELECT max(run_at) FROM jobq.job WHERE kind = 'tick') AS last_fire,
       s.last_job_id = (SELECT job_id FROM jobq.job WHERE kind = 'tick'
                         ORDER BY run_at DESC LIMIT 1) AS last_job,
       s.last_job_status,
       s.next_fire_at > s.last_fire_at AS next_after_last,
       s.next_fire_at = s.last_fire_at + interval '2 seconds' AS next_two_seconds_later
  FROM jobq.schedules s WHERE s.schedule_id = :tick_id;
SELECT fired > 0 AS worker_fired FROM jobq.workers
 WHERE role = 'worker' AND database = current_database();
SELECT jobq.unschedule('tick');
SELECT count(*) AS tick_schedules FROM jobq.schedule WHERE name = 'tick';

--
-- bad input: an error, and nothing written
--
CREATE TEMP VIEW state AS
SELECT (SELECT count(*) FROM jobq.schedule) AS schedules,
       (SELECT count(*) FROM jobq.job) || ' jobs, '
       || (SELECT md5(string_agg(s::text, '|' ORDER BY schedule_id)) FROM jobq.schedule s)
         AS digest;
SELECT schedules, digest AS before FROM state \gset
SELECT schedules FROM state;
-- each bad call below names the existing schedule 'yearly' (which it would update)
-- or a new one (which it would create)
SELECT jobq.schedule('yearly', '0 2 * * MON-XYZ', 'cache.refresh');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('new', '61 * * * *', 'cache.refresh');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '0 * * * * * *', 'cache.refresh');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '', 'cache.refresh');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', NULL, 'cache.refresh');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh', timezone => 'Mars/Olympus_Mons');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('new', '@yearly', 'cache.refresh', timezone => '');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh', misfire => 'sometimes');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('new', '@yearly', 'cache.refresh', misfire => NULL);
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule(NULL, '@yearly', 'cache.refresh');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('', '@yearly', 'cache.refresh');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '@yearly', NULL);
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh', '[1, 2]');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('new', '@yearly', 'cache.refresh', '42');
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh', NULL);
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh', priority => NULL);
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh', queue => NULL);
SELECT schedules, digest = :'before' AS unchanged FROM state;
SELECT jobq.unschedule(NULL);
SELECT jobq.pause_schedule(NULL);
SELECT jobq.resume_schedule(NULL);
SELECT schedules, digest = :'before' AS unchanged FROM state;

--
-- unschedule
--
SELECT jobq.unschedule('yearly');
SELECT jobq.unschedule('yearly');
SELECT jobq.unschedule('no-such-schedule');
SELECT name FROM jobq.schedules ORDER BY name;
-- the jobs a schedule fired stay
SELECT jobq.unschedule('ny-run_all');
SELECT count(*) = extract(year FROM now()) - 2019 AS jobs_kept
  FROM jobq.job WHERE payload->>'policy' = 'run_all';
-- a name that was unscheduled can be scheduled again: a new schedule
SELECT jobq.schedule('yearly', '@yearly', 'cache.refresh') <> :yearly_id AS new_id;
SELECT jobq.pause_schedule('yearly'), jobq.resume_schedule('yearly');
