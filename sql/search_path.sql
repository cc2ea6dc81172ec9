--
-- jobq's internal statements resolve names in pg_catalog: neither the
-- caller's schemas nor its temporary schema can stand in for PostgreSQL's
-- functions, operators or types, whatever search_path the caller has.
-- (jobq sets search_path = pg_catalog, pg_temp at a GUC nest level of its own
-- for every internal statement; PostgreSQL 17 removed the override search
-- path API that 15 used.)
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;
\set VERBOSITY terse
SET jobq.settle_lock_wait = 0;

-- look-alikes that note every call in a table
CREATE SCHEMA evil;
CREATE TABLE evil.calls (what text);
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('now') RETURNING pg_catalog.timestamptz '2000-01-01' $$;
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('clock_timestamp') RETURNING pg_catalog.timestamptz '2000-01-01' $$;
CREATE FUNCTION evil.statement_timestamp() RETURNS timestamptz LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('statement_timestamp') RETURNING pg_catalog.timestamptz '2000-01-01' $$;
CREATE FUNCTION evil.eq(bigint, bigint) RETURNS boolean LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('= bigint') RETURNING true $$;
CREATE OPERATOR evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = evil.eq);
CREATE FUNCTION evil.teq(text, text) RETURNS boolean LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('= text') RETURNING true $$;
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.teq);
CREATE FUNCTION evil.lt(timestamptz, timestamptz) RETURNS boolean LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('< timestamptz') RETURNING true $$;
CREATE OPERATOR evil.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.lt);
CREATE FUNCTION evil.unnest(bigint[]) RETURNS SETOF bigint LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('unnest') RETURNING 0::bigint $$;
CREATE FUNCTION evil.jsonb_build_object(text, text) RETURNS jsonb LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('jsonb_build_object') RETURNING '{}'::pg_catalog.jsonb $$;
CREATE FUNCTION evil.lower(text) RETURNS text LANGUAGE sql
  AS $$ INSERT INTO evil.calls VALUES ('lower') RETURNING 'x' $$;
-- temporary look-alikes of jobq's tables and of PostgreSQL's types
CREATE TEMP TABLE job (job_id bigint, status text);
CREATE TEMP TABLE ready (job_id bigint);
CREATE TEMP TABLE queue (queue text);
CREATE DOMAIN pg_temp.interval AS text;
CREATE DOMAIN pg_temp.jsonb AS text;
CREATE DOMAIN pg_temp.timestamptz AS text;

SET search_path = pg_temp, evil, public, pg_catalog;

-- the trap works: unqualified SQL under this search_path calls the look-alikes
SELECT now() OPERATOR(pg_catalog.=) pg_catalog.timestamptz '2000-01-01' AS evil_now,
       1::bigint = 2::bigint AS evil_eq;
SELECT n.nspname LIKE 'pg_temp%' AS temp_jsonb
  FROM pg_type t JOIN pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
 WHERE t.oid OPERATOR(pg_catalog.=) pg_typeof('{}'::jsonb);
SELECT what FROM evil.calls ORDER BY what;
TRUNCATE evil.calls;

-- the whole API under it
SELECT jobq.configure('sp', max_retries => 1, backoff_base => '1 second');
SELECT created FROM jobq.enqueue('sp.a', '{"n": 1}', queue => 'sp', priority => 10);
SELECT created FROM jobq.enqueue('sp.a', '{"n": 2}', queue => 'sp', idempotency_key => 'k1');
SELECT created FROM jobq.enqueue('sp.a', '{"n": 3}', queue => 'sp', idempotency_key => 'k1');
SELECT count(*) FROM jobq.enqueue_many('sp.b', ARRAY['{"n": 4}', '{"n": 5}']::pg_catalog.jsonb[], queue => 'sp');
SELECT created FROM jobq.enqueue('sp.later', queue => 'sp', run_at => pg_catalog.now() + pg_catalog.interval '1 hour');

SELECT job_id AS j1, lease_token AS t1, kind, payload FROM jobq.claim('sp', 'w1') \gset
SELECT :'kind' AS kind, :'payload' AS payload;
SELECT jobq.checkpoint(:j1, :t1, '{"step": 1}');
SELECT jobq.extend(:j1, :t1, pg_catalog.interval '1 minute') IS NOT NULL AS extended;
SELECT jobq.complete(:j1, :t1, '{"ok": true}');
SELECT jobq.complete(:j1, :t1, '{"ok": true}') AS again;

SELECT job_id AS j2, lease_token AS t2 FROM jobq.claim('sp', 'w1') \gset
SELECT jobq.fail(:j2, :t2, 'boom');
SELECT jobq.fail(:j2, :t2, 'stale') IS NULL AS stale_refused;
SELECT jobq.cancel(:j2);
SELECT jobq.retry(:j2);

SELECT count(*) AS claimed FROM jobq.claim('sp', 'w2', batch => 10);
SELECT jobq.release_running('sp');
CREATE TEMP TABLE held AS SELECT job_id, lease_token FROM jobq.claim('sp', 'w2', batch => 10);
SELECT jobq.complete_many(pg_catalog.array_agg(job_id), pg_catalog.array_agg(lease_token)) FROM held;

SELECT jobq.pause('sp');
SELECT jobq.resume('sp');
SELECT jobq.schedule('sp-every-minute', '* * * * *', 'sp.cron', queue => 'sp', timezone => 'Europe/Paris') > 0 AS scheduled;
SELECT jobq.cron_next('0 9 * * 1', pg_catalog.timestamptz '2026-03-27 12:00+00', 'Europe/Paris');
SELECT jobq.run_schedule('sp-every-minute') > 0 AS fired;
SELECT jobq.unschedule('sp-every-minute');
SELECT jobq.priority('high'), jobq.priority_label(20);
SELECT reaped >= 0 AS reaped FROM jobq.reap() AS reaped;
SELECT queue, pending, running, completed, failed, cancelled FROM jobq.queue_stats WHERE queue OPERATOR(pg_catalog.=) 'sp';
SELECT status, pg_catalog.count(*) FROM jobq.jobs GROUP BY status ORDER BY status;

-- not one call reached a look-alike
SELECT count(*) AS calls, pg_catalog.string_agg(DISTINCT what, ', ') AS which FROM evil.calls;

-- a temporary table created after the statements were prepared changes nothing
CREATE TEMP TABLE attempt (job_id bigint);
SELECT created FROM jobq.enqueue('sp.c', queue => 'sp');
SELECT job_id AS j3, lease_token AS t3 FROM jobq.claim('sp', 'w3') \gset
SELECT jobq.fail(:j3, :t3, 'once more', retryable => false);
SELECT count(*) AS calls FROM evil.calls;

RESET search_path;
DROP SCHEMA evil CASCADE;
DROP EXTENSION jobq;
