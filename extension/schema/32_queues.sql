/*
 * extension/schema/32_queues.sql -- queues: settings, pause, priorities
 *
 * A queue is created on first use with the defaults of jobq.queue; these
 * functions change its settings, pause and resume it.  Backends cache the
 * rows of jobq.queue they read: the trigger below makes a commit that wrote
 * any row (or truncated the table) invalidate every cache.
 */

CREATE FUNCTION jobq.queue_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'jobq_queue_changed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.queue_changed() IS
    'trigger on jobq.queue: its commit invalidates the queue settings every backend has cached';
CREATE TRIGGER queue_changed BEFORE INSERT OR UPDATE OR DELETE ON jobq.queue
    FOR EACH ROW EXECUTE FUNCTION jobq.queue_changed();
COMMENT ON TRIGGER queue_changed ON jobq.queue IS
    'a transaction that writes a queue row invalidates every backend''s cached settings at commit';
CREATE TRIGGER queue_truncated BEFORE TRUNCATE ON jobq.queue
    FOR EACH STATEMENT EXECUTE FUNCTION jobq.queue_changed();
COMMENT ON TRIGGER queue_truncated ON jobq.queue IS
    'TRUNCATE of jobq.queue invalidates every backend''s cached settings at commit';

CREATE FUNCTION jobq.configure(queue text,
                               max_retries integer DEFAULT NULL,
                               lease interval DEFAULT NULL,
                               backoff_base interval DEFAULT NULL,
                               backoff_cap interval DEFAULT NULL,
                               backoff_jitter double precision DEFAULT NULL,
                               retention_completed interval DEFAULT NULL,
                               retention_failed interval DEFAULT NULL,
                               max_concurrency integer DEFAULT NULL,
                               max_per_key integer DEFAULT NULL,
                               rate_limit integer DEFAULT NULL,
                               rate_period interval DEFAULT NULL,
                               breaker_threshold integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_configure'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.configure(text, integer, interval, interval, interval, double precision, interval, interval, integer, integer, integer, interval, integer) IS
    'create a queue or change its settings; NULL leaves a setting as it is, 0 removes a limit';


CREATE FUNCTION jobq.pause(queue text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_pause'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.pause(text) IS
    'a paused queue hands out no jobs (running jobs finish); persists until jobq.resume';

CREATE FUNCTION jobq.resume(queue text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_resume'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.resume(text) IS 'undo jobq.pause';

/* ---------------------------------------------------------------------
 * Priorities
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.priority(label text)
RETURNS integer
AS 'MODULE_PATHNAME', 'jobq_priority'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION jobq.priority(text) IS
    'priority value of a label: low 0, medium 10, high 20, critical 30';

CREATE FUNCTION jobq.priority_label(priority integer)
RETURNS text
AS 'MODULE_PATHNAME', 'jobq_priority_label'
LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION jobq.priority_label(integer) IS
    'label of the highest priority level at or below a value (below 0: low)';
