/*
 * extension/schema/45_cron.sql -- cron expressions and schedules
 *
 * A schedule enqueues one job per fire time of its cron expression, read in
 * its IANA time zone, keyed by (schedule, fire time) so a fire never
 * enqueues twice; the background worker fires due schedules.
 */

CREATE FUNCTION jobq.cron_next(cron text, after timestamptz,
                               timezone text DEFAULT 'UTC')
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobq_cron_next'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION jobq.cron_next(text, timestamptz, text) IS
'first fire time of a cron expression strictly after "after", with wall-clock times read in the given IANA time zone; NULL if it never fires again';

CREATE FUNCTION jobq.schedule(name text, cron text, kind text,
                              payload jsonb DEFAULT '{}',
                              queue text DEFAULT 'default',
                              timezone text DEFAULT 'UTC',
                              misfire text DEFAULT 'run_once',
                              priority integer DEFAULT 0)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.schedule(text, text, text, jsonb, text, text, text, integer) IS
    'create a cron schedule, or update the one of that name; returns its id';

CREATE FUNCTION jobq.unschedule(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_unschedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'delete a schedule; false if there was none';

CREATE FUNCTION jobq.pause_schedule(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_pause_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.pause_schedule(text) IS
    'stop a schedule firing; the fire times it misses follow its misfire policy at resume';

CREATE FUNCTION jobq.resume_schedule(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_resume_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.resume_schedule(text) IS
    'resume a paused schedule, applying its misfire policy to the fire times it missed';

CREATE FUNCTION jobq.run_schedules()
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_run_schedules'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.run_schedules() IS
    'fire due schedules now (the background worker does this on time); returns jobs enqueued';

CREATE FUNCTION jobq.run_schedule(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_run_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.run_schedule(text) IS
    'fire the schedule now, under a key no timed fire uses; returns the job id';
