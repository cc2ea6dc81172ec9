/* extension/parts/50_handlers.sql -- jobs run inside the database */

CREATE TABLE jobq.handler (
    kind            text PRIMARY KEY,
    handler         text NOT NULL,
    queue           text COLLATE "C" NOT NULL,
    run_as          regrole NOT NULL,
    allow_superuser boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at      timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE jobq.handler IS
    'kinds whose jobs executors run inside the database: the SQL function and the role it runs as';
COMMENT ON COLUMN jobq.handler.handler IS
    'the function''s schema-qualified signature (text, not regprocedure: dumps by name and passes pg_upgrade)';
SELECT pg_catalog.pg_extension_config_dump('jobq.handler', '');

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

CREATE VIEW jobq.handlers WITH (security_barrier) AS
SELECT h.kind, h.handler, h.queue, h.run_as::text AS run_as,
       h.allow_superuser, h.created_at, h.updated_at
  FROM jobq.handler h
 WHERE jobq.may_use_queue(h.queue);
COMMENT ON VIEW jobq.handlers IS 'registered job handlers';
