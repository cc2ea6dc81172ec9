/*
 * extension/schema/55_handlers.sql -- jobs run inside the database
 *
 * A kind registered with a handler (an SQL-callable function) is run by
 * jobq's executor processes, as the role that registered it.
 */

CREATE FUNCTION jobq.register_handler(kind text, handler regprocedure,
                                      queue text DEFAULT 'default',
                                      allow_superuser boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_register_handler'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.register_handler(text, regprocedure, text, boolean) IS
    'run jobs of kind in the database with handler (payload jsonb [, job jsonb]) -> jsonb, as the calling role';

CREATE FUNCTION jobq.unregister_handler(kind text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_unregister_handler'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.unregister_handler(text) IS 'stop running jobs of kind in the database';

CREATE FUNCTION jobq.snooze(delay interval)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_snooze_handler'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.snooze(interval) IS
    'inside a handler: end it and run the job again after delay, without spending a retry';
