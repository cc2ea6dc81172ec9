/* extension/parts/35_schedule.sql -- cron schedules */

CREATE SEQUENCE jobq.schedule_id_seq AS bigint;
COMMENT ON SEQUENCE jobq.schedule_id_seq IS 'schedule ids';
SELECT pg_catalog.pg_extension_config_dump('jobq.schedule_id_seq', '');

CREATE TABLE jobq.schedule (
    schedule_id  bigint PRIMARY KEY DEFAULT pg_catalog.nextval('jobq.schedule_id_seq'),
    name         text NOT NULL UNIQUE,
    cron         text NOT NULL,
    kind         text NOT NULL,
    payload      jsonb NOT NULL,
    queue        text COLLATE "C" NOT NULL,
    timezone     text NOT NULL,
    misfire      text NOT NULL,
    priority     integer NOT NULL,
    paused       boolean NOT NULL DEFAULT false,
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    last_job_id  bigint,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT schedule_misfire_check CHECK (misfire OPERATOR(pg_catalog.=) ANY
        (ARRAY['skip', 'run_once', 'run_all']::text[]))
);
COMMENT ON TABLE jobq.schedule IS
    'cron schedules; each fire enqueues one job keyed by (schedule, fire time)';
COMMENT ON COLUMN jobq.schedule.next_fire_at IS 'next fire time; NULL when the expression never fires again';

CREATE INDEX schedule_due_idx ON jobq.schedule (next_fire_at) WHERE NOT paused;
COMMENT ON INDEX jobq.schedule_due_idx IS 'unpaused schedules by next fire time';

SELECT pg_catalog.pg_extension_config_dump('jobq.schedule', '');

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

CREATE VIEW jobq.schedules WITH (security_barrier) AS
SELECT s.schedule_id, s.name, s.cron, s.timezone, s.misfire, s.kind, s.queue,
       s.priority, s.payload, s.paused, s.next_fire_at, s.last_fire_at,
       s.last_job_id, j.status AS last_job_status, s.created_at, s.updated_at
  FROM jobq.schedule s
  LEFT JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) s.last_job_id
 WHERE jobq.may_use_queue(s.queue);
COMMENT ON VIEW jobq.schedules IS
    'schedules with their next and last fire and the status of the last job fired';
