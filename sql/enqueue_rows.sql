--
-- enqueue_rows: the rows an enqueue writes straight into jobq's tables
-- (job_insert.c); a table with a trigger, a rule, row security or an
-- unknown column is refused
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- what the rows of the jobs enqueued after this point look like
CREATE FUNCTION rows_of(first bigint)
RETURNS TABLE (n int, queue text, kind text, payload jsonb, priority int,
               status text, retry_count int, max_retries int, attempts int,
               idempotency_key text, concurrency_key text, delayed boolean,
               created_is_updated boolean, null_columns boolean, in_set text)
LANGUAGE sql AS $$
  SELECT (row_number() OVER (ORDER BY j.job_id))::int, j.queue, j.kind, j.payload,
         j.priority, j.status, j.retry_count, j.max_retries, j.attempts,
         j.idempotency_key, j.concurrency_key, j.run_at > j.created_at,
         j.created_at = j.updated_at,
         num_nulls(j.claimed_at, j.worker_id, j.lease_token, j.lease_expires_at,
                   j.last_error, j.result, j.checkpoint, j.finished_at) = 8,
         CASE WHEN r.job_id IS NOT NULL
                   AND r.neg_priority = -j.priority AND r.run_at = j.run_at
                   AND r.kind = j.kind AND r.queue = j.queue
                   AND r.concurrency_key IS NOT DISTINCT FROM j.concurrency_key
                   AND s.job_id IS NULL THEN 'ready'
              WHEN s.job_id IS NOT NULL
                   AND s.priority = j.priority AND s.run_at = j.run_at
                   AND s.kind = j.kind AND s.queue = j.queue
                   AND s.concurrency_key IS NOT DISTINCT FROM j.concurrency_key
                   AND r.job_id IS NULL THEN 'scheduled'
              ELSE 'wrong' END
    FROM jobq.job j
    LEFT JOIN jobq.ready r USING (job_id)
    LEFT JOIN jobq.scheduled s USING (job_id)
   WHERE j.job_id >= first
   ORDER BY j.job_id
$$;

-- the same enqueues, run before and after a column of jobq.job is dropped
CREATE FUNCTION enqueue_some() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  first bigint;
BEGIN
  SELECT e.job_id INTO first FROM jobq.enqueue('mail', '{"to": "a"}', queue => 'q1') e;
  PERFORM jobq.enqueue('mail', '{"to": "b"}', queue => 'q1', priority => 20, max_retries => 0);
  PERFORM jobq.enqueue('mail', '{"to": "c"}', queue => 'q1', run_at => now() + interval '1 hour');
  PERFORM jobq.enqueue('mail', '{"to": "d"}', queue => 'q2', concurrency_key => 'tenant-1');
  PERFORM jobq.enqueue_many('sms', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[],
                            queue => 'q1', priority => 10, max_retries => 7);
  PERFORM jobq.enqueue_many('sms', ARRAY['{"i": 4}', '{"i": 5}']::jsonb[], queue => 'q1',
                            run_at => now() + interval '1 day');
  RETURN first;
END
$$;

CREATE TEMP TABLE direct AS SELECT * FROM rows_of(0) WITH NO DATA;
CREATE TEMP TABLE after_drop AS SELECT * FROM rows_of(0) WITH NO DATA;

-- straight into the tables
INSERT INTO direct SELECT * FROM rows_of(enqueue_some());
SELECT * FROM direct ORDER BY n;

-- jobs with idempotency keys: the key reserved first, the rows written
-- under its id; keyless runs around a keyed job carry no key
CREATE TEMP TABLE keyed AS
  SELECT m.n, m.job_id, m.created
    FROM jobq.enqueue_many('mail', ARRAY['{"k": 1}', '{"k": 2}', '{"k": 3}', '{"k": 4}']::jsonb[],
                           queue => 'q3', idempotency_keys => ARRAY[NULL, 'order-1', NULL, NULL])
         WITH ORDINALITY AS m(job_id, created, n);
INSERT INTO keyed
  SELECT 5, e.job_id, e.created FROM jobq.enqueue('mail', '{"k": 5}', queue => 'q3', idempotency_key => 'order-2') e;
SELECT k.n, k.created, j.payload, j.idempotency_key, i.job_id = j.job_id AS key_points_at_job,
       r.job_id IS NOT NULL AS ready
  FROM keyed k JOIN jobq.job j USING (job_id)
  LEFT JOIN jobq.idempotency_key i ON i.kind = j.kind AND i.key = j.idempotency_key
  LEFT JOIN jobq.ready r ON r.job_id = j.job_id
 ORDER BY k.n;
-- a duplicate returns the job and writes nothing
SELECT count(*) AS jobs_before FROM jobq.job;
SELECT e.job_id = k.job_id AS same_job, e.created
  FROM jobq.enqueue('mail', '{"k": 6}', queue => 'q3', idempotency_key => 'order-2') e, keyed k
 WHERE k.n = 5;
SELECT count(*) AS jobs_after FROM jobq.job;

-- a trigger on jobq.job, on jobq.ready or on jobq.idempotency_key: enqueue
-- is refused and writes nothing
CREATE TABLE seen (job_id bigint, op text);
CREATE FUNCTION note_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.seen VALUES (NEW.job_id, TG_OP);
  RETURN NEW;
END
$$;
SELECT count(*) AS jobs_before FROM jobq.job;
CREATE TRIGGER note_job AFTER INSERT ON jobq.job FOR EACH ROW EXECUTE FUNCTION note_job();
SELECT count(*) FROM jobq.enqueue('mail', '{}', queue => 'q1');
SELECT count(*) FROM jobq.enqueue_many('sms', ARRAY['{}', '{}']::jsonb[], queue => 'q1');
DROP TRIGGER note_job ON jobq.job;
CREATE TRIGGER note_ready AFTER INSERT ON jobq.ready FOR EACH ROW EXECUTE FUNCTION note_job();
SELECT count(*) FROM jobq.enqueue_many('sms', ARRAY['{}', '{}']::jsonb[], queue => 'q1');
DROP TRIGGER note_ready ON jobq.ready;
CREATE TRIGGER note_key AFTER INSERT ON jobq.idempotency_key FOR EACH ROW EXECUTE FUNCTION note_job();
SELECT count(*) FROM jobq.enqueue('mail', '{}', queue => 'q3', idempotency_key => 'order-4');
DROP TRIGGER note_key ON jobq.idempotency_key;
SELECT count(*) AS jobs_after, (SELECT count(*) FROM seen) AS rows_seen,
       (SELECT count(*) FROM jobq.idempotency_key WHERE key = 'order-4') AS keys
  FROM jobq.job;

-- row-level security on jobq.scheduled, and a column jobq does not know
-- (with a default it cannot compute): refused
ALTER TABLE jobq.scheduled ENABLE ROW LEVEL SECURITY;
SELECT count(*) FROM jobq.enqueue('mail', '{}', queue => 'q1', run_at => now() + interval '1 hour');
ALTER TABLE jobq.scheduled DISABLE ROW LEVEL SECURITY;
ALTER TABLE jobq.job ADD COLUMN tenant text DEFAULT 'acme';
SELECT count(*) FROM jobq.enqueue('mail', '{}', queue => 'q1');
ALTER TABLE jobq.job DROP COLUMN tenant;

-- a dropped column is no obstacle: the same rows
INSERT INTO after_drop SELECT * FROM rows_of(enqueue_some());
SELECT count(*) AS rows, bool_and(d IS NOT DISTINCT FROM a) AS same_rows
  FROM direct d FULL JOIN after_drop a USING (n);

-- a CHECK constraint added by hand is enforced on an enqueue, and nothing
-- of the failed enqueue stays
ALTER TABLE jobq.job ADD CONSTRAINT no_spam CHECK (kind <> 'spam');
SELECT count(*) AS jobs_before FROM jobq.job;
\set VERBOSITY terse
SELECT * FROM jobq.enqueue('spam', '{}');
SELECT * FROM jobq.enqueue_many('spam', ARRAY['{}', '{}']::jsonb[]);
SELECT * FROM jobq.enqueue('spam', '{}', idempotency_key => 'spam-1');
\set VERBOSITY default
SELECT count(*) AS jobs_after FROM jobq.job;
SELECT count(*) AS ready_rows_of_spam FROM jobq.ready WHERE kind = 'spam';
SELECT count(*) AS keys_of_spam FROM jobq.idempotency_key WHERE kind = 'spam';
ALTER TABLE jobq.job DROP CONSTRAINT no_spam;

-- an enqueue rolled back leaves nothing, and a job written straight into
-- the tables is claimable by the same transaction's next statement
BEGIN;
SELECT count(*) AS created FROM jobq.enqueue_many('x', ARRAY['{}', '{}', '{}']::jsonb[], queue => 'rb');
SELECT count(*) AS claimed FROM jobq.claim('rb', batch => 10);
ROLLBACK;
SELECT count(*) AS jobs_in_rb FROM jobq.job WHERE queue = 'rb';
SELECT count(*) AS ready_in_rb FROM jobq.ready WHERE queue = 'rb';

-- the same key twice in one transaction, at every isolation level: the
-- second call returns the first one's job (no serialization failure: the
-- transaction itself holds the key), and a rollback frees the key
BEGIN ISOLATION LEVEL REPEATABLE READ;
CREATE TEMP TABLE twice AS
  SELECT * FROM jobq.enqueue('mail', '{"n": 1}', queue => 'q3', idempotency_key => 'order-5');
SELECT e.job_id = t.job_id AS same_job, e.created
  FROM jobq.enqueue('mail', '{"n": 2}', queue => 'q3', idempotency_key => 'order-5') e, twice t;
ROLLBACK;
SELECT count(*) AS keys_left FROM jobq.idempotency_key WHERE key = 'order-5';
SELECT created FROM jobq.enqueue('mail', '{"n": 3}', queue => 'q3', idempotency_key => 'order-5');

-- a read-only transaction cannot enqueue
BEGIN READ ONLY;
SELECT * FROM jobq.enqueue('mail', '{}', queue => 'q1');
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM jobq.enqueue_many('mail', ARRAY['{}', '{}']::jsonb[], queue => 'q1');
ROLLBACK;
BEGIN READ ONLY;
SELECT * FROM jobq.enqueue('mail', '{}', queue => 'q1', idempotency_key => 'order-9');
ROLLBACK;

-- the indexes whose keys end in job_id never deduplicate: no two live entries
-- share a key, so the pass would find nothing before every leaf split
SELECT c.relname, c.reloptions
  FROM pg_class c
 WHERE c.relnamespace = 'jobq'::regnamespace AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'btree')
   AND c.reloptions IS NOT NULL
 ORDER BY 1;
