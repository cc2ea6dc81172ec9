--
-- enqueue_defaults: calls of jobq.enqueue and jobq.enqueue_many with
-- positional, named and defaulted arguments, as PostgreSQL fills them in
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- top-level calls: positional, named, mixed, a field of the result, in FROM
EXPLAIN (VERBOSE, COSTS OFF) SELECT jobq.enqueue('pd.a');
EXPLAIN (VERBOSE, COSTS OFF) SELECT * FROM jobq.enqueue('pd.b', '{"x": 1}', priority => 4, queue => 'pdq');
EXPLAIN (VERBOSE, COSTS OFF) SELECT (jobq.enqueue('pd.c', on_parent_failure => 'run', max_retries => 2)).job_id;
EXPLAIN (VERBOSE, COSTS OFF) SELECT count(*) FROM jobq.enqueue_many('pd.d', ARRAY['{}', '{}']::jsonb[], concurrency_key => 'ck');

SELECT count(*) FROM (SELECT jobq.enqueue('pd.a')) s;
SELECT count(*) FROM (SELECT * FROM jobq.enqueue('pd.b', '{"x": 1}', priority => 4, queue => 'pdq')) s;
SELECT (jobq.enqueue('pd.c', on_parent_failure => 'run', max_retries => 2)).created;
SELECT count(*) FROM jobq.enqueue_many('pd.d', ARRAY['{}', '{}']::jsonb[], concurrency_key => 'ck');

-- the same calls, top level and in a subquery, write the same jobs
SELECT job_id AS top FROM jobq.enqueue('pd.e', '{"n": 1}', priority => 4, queue => 'pdq',
                                       idempotency_key => 'pd-top', run_at => now() + interval '1 hour') \gset
SELECT job_id AS sub FROM (SELECT * FROM jobq.enqueue('pd.e', '{"n": 1}', priority => 4, queue => 'pdq',
                           idempotency_key => 'pd-sub', run_at => now() + interval '1 hour') e OFFSET 0) s \gset
SELECT a.kind = b.kind AND a.payload = b.payload AND a.queue = b.queue AND a.priority = b.priority
       AND a.max_retries = b.max_retries AND a.status = b.status AND a.concurrency_key IS NOT DISTINCT FROM b.concurrency_key
       AND a.run_at > now() + interval '59 minutes' AND b.run_at > now() + interval '59 minutes' AS same,
       a.queue, a.priority, a.status
  FROM jobq.jobs a, jobq.jobs b WHERE a.job_id = :top AND b.job_id = :sub;
SELECT kind, queue, priority, max_retries, status, payload, concurrency_key
  FROM jobq.jobs WHERE kind LIKE 'pd.%' AND kind <> 'pd.e' ORDER BY job_id;

-- a prepared statement, planned with its parameters
PREPARE pd_enqueue(text) AS SELECT job_id FROM jobq.enqueue($1, queue => 'pdp');
EXECUTE pd_enqueue('pd.f') \gset
SELECT kind, queue FROM jobq.jobs WHERE job_id = :job_id;
DEALLOCATE pd_enqueue;

-- new defaults of the same function (same oid) are seen at once
BEGIN;
DO $$
DECLARE def text;
BEGIN
  SELECT pg_get_functiondef('jobq.enqueue(text,jsonb,text,integer,timestamptz,integer,text,text,bigint[],text)'::regprocedure)
    INTO def;
  EXECUTE replace(def, 'queue text DEFAULT ''default''::text', 'queue text DEFAULT ''changed''::text');
END $$;
SELECT job_id FROM jobq.enqueue('pd.g') \gset
SELECT kind, queue FROM jobq.jobs WHERE job_id = :job_id;
ROLLBACK;
SELECT job_id FROM jobq.enqueue('pd.h') \gset
SELECT kind, queue FROM jobq.jobs WHERE job_id = :job_id;

-- another schema's function of the same name is not jobq's
CREATE SCHEMA pd_other;
CREATE FUNCTION pd_other.enqueue(kind text, n integer DEFAULT 7) RETURNS integer LANGUAGE sql AS 'SELECT n';
SELECT pd_other.enqueue('x');
DROP SCHEMA pd_other CASCADE;

-- after the extension is dropped and created again (new functions)
SET client_min_messages = warning;
DROP EXTENSION jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;
SELECT job_id FROM jobq.enqueue('pd.j', priority => 2) \gset
SELECT kind, queue, priority FROM jobq.jobs WHERE job_id = :job_id;

-- a schema named jobq that is not the extension's (anyone with CREATE on
-- the database can make one where jobq is not installed), with a
-- polymorphic enqueue: PostgreSQL casts the default to the call's type
SET client_min_messages = warning;
DROP EXTENSION jobq CASCADE;
DROP SCHEMA IF EXISTS jobq CASCADE;
RESET client_min_messages;
CREATE SCHEMA jobq;
CREATE FUNCTION jobq.enqueue(a anycompatible, b anycompatible DEFAULT 1)
  RETURNS anycompatible LANGUAGE plpgsql AS 'BEGIN RETURN a + b; END';
SELECT jobq.enqueue(2.5);
SELECT * FROM jobq.enqueue(2.5);
SET client_min_messages = warning;
DROP SCHEMA jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;
SELECT job_id FROM jobq.enqueue('pd.k') \gset
SELECT kind, queue FROM jobq.jobs WHERE job_id = :job_id;
