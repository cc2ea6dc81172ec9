--
-- lease_rows: what a claim and a completion write straight in jobq's tables
-- (job_lease.c), under READ COMMITTED and under a transaction snapshot; a
-- table with a trigger, a rule, row security or a CHECK constraint added is
-- refused
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- the rows of queue q's jobs, the parts that do not depend on the clock or
-- on the random half of a lease token
CREATE FUNCTION lease_rows(q text)
RETURNS TABLE (n int, kind text, payload jsonb, status text, attempts int,
               claim_number bigint, worker_id text, lease_gone boolean,
               finished boolean, result jsonb,
               ready_rows bigint)
LANGUAGE sql AS $$
  SELECT (row_number() OVER (ORDER BY j.job_id))::int, j.kind, j.payload, j.status,
         j.attempts, j.lease_token >> 32, j.worker_id, j.lease_expires_at IS NULL,
         j.finished_at IS NOT NULL AND j.finished_at = j.updated_at, j.result,
         (SELECT count(*) FROM jobq.ready r WHERE r.job_id = j.job_id)
    FROM jobq.job j WHERE j.queue = q ORDER BY j.job_id
$$;

-- the same life, run in a queue: enqueue 4 (the last at a higher priority),
-- claim 2 of kind a, claim 1 as w2, complete one alone and one in a batch
-- with a result, and try tokens that do not hold
CREATE FUNCTION life(q text) RETURNS TABLE (step text, v text)
LANGUAGE plpgsql AS $$
DECLARE
  c record;
  ids bigint[];
  toks bigint[];
BEGIN
  PERFORM jobq.configure(q, lease => '90 seconds');
  PERFORM jobq.enqueue('a', jsonb_build_object('n', 1), queue => q);
  PERFORM jobq.enqueue('b', jsonb_build_object('n', 2), queue => q);
  PERFORM jobq.enqueue('a', jsonb_build_object('n', 3), queue => q);
  PERFORM jobq.enqueue('a', jsonb_build_object('n', 4), queue => q, priority => 5);
  SELECT array_agg(job_id ORDER BY job_id), array_agg(lease_token ORDER BY job_id)
    INTO ids, toks
    FROM jobq.claim(q, worker_id => 'w1', batch => 2, kinds => ARRAY['a']);
  step := 'claimed of kind a'; v := (SELECT string_agg((payload ->> 'n'), ',' ORDER BY job_id) FROM jobq.job WHERE job_id = ANY (ids)); RETURN NEXT;
  SELECT * INTO c FROM jobq.claim(q, worker_id => 'w2');
  step := 'claimed as w2'; v := c.payload ->> 'n'; RETURN NEXT;
  step := 'claim returns the lease it wrote';
  v := (SELECT c.lease_token = j.lease_token AND c.lease_expires_at = j.lease_expires_at
               AND c.kind = j.kind AND c.priority = j.priority AND c.enqueued_at = j.created_at
          FROM jobq.job j WHERE j.job_id = c.job_id)::text; RETURN NEXT;
  step := 'lease'; v := (SELECT (lease_expires_at - claimed_at)::text FROM jobq.job WHERE job_id = c.job_id); RETURN NEXT;
  step := 'complete, wrong token'; v := jobq.complete(c.job_id, c.lease_token + 1)::text; RETURN NEXT;
  step := 'complete'; v := jobq.complete(c.job_id, c.lease_token, '{"ok": 1}')::text; RETURN NEXT;
  step := 'complete again'; v := jobq.complete(c.job_id, c.lease_token)::text; RETURN NEXT;
  step := 'complete_many, a job twice, a NULL, a wrong token';
  v := jobq.complete_many(ARRAY[ids[1], ids[1], NULL, ids[2]], ARRAY[toks[1], toks[1], 1, toks[2] + 1],
                          ARRAY['{"r": 1}', '{"r": 2}', NULL, NULL]::jsonb[])::text; RETURN NEXT;
  step := 'complete_many, no results'; v := jobq.complete_many(ARRAY[ids[2]], ARRAY[toks[2]])::text; RETURN NEXT;
END
$$;

-- straight in the tables
SELECT * FROM life('direct');
SELECT * FROM lease_rows('direct');

-- a trigger on jobq.ready or on jobq.job: claim and complete are refused,
-- and write nothing
SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'triggered');
CREATE TABLE lease_seen (tab text, op text, status text);
CREATE FUNCTION note_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO public.lease_seen VALUES (TG_TABLE_NAME, TG_OP,
    CASE WHEN TG_OP = 'UPDATE' THEN to_jsonb(NEW) ->> 'status' END);
  RETURN NULL;
END
$$;
CREATE TRIGGER note_ready AFTER DELETE ON jobq.ready FOR EACH ROW EXECUTE FUNCTION note_row();
SELECT count(*) FROM jobq.claim('triggered');
DROP TRIGGER note_ready ON jobq.ready;
CREATE TEMP TABLE triggered AS SELECT * FROM jobq.claim('triggered');
CREATE TRIGGER note_job AFTER UPDATE ON jobq.job FOR EACH ROW EXECUTE FUNCTION note_row();
SELECT count(*) FROM jobq.claim('triggered');
SELECT jobq.complete(job_id, lease_token) FROM triggered;
SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) FROM triggered;
DROP TRIGGER note_job ON jobq.job;
SELECT status, count(*) AS rows_seen FROM jobq.job, (SELECT count(*) FROM lease_seen) s
 WHERE queue = 'triggered' GROUP BY 1;
SELECT jobq.complete(job_id, lease_token) FROM triggered;

-- row-level security and a rule are refused too
ALTER TABLE jobq.ready ENABLE ROW LEVEL SECURITY;
SELECT count(*) FROM jobq.claim('triggered');
ALTER TABLE jobq.ready DISABLE ROW LEVEL SECURITY;
CREATE RULE keep_done AS ON DELETE TO jobq.job DO INSTEAD NOTHING;
SELECT count(*) FROM jobq.claim('triggered');
DROP RULE keep_done ON jobq.job;

-- pruning deletes from jobq.job directly too, and refuses the same; in one
-- transaction, so that the background worker cannot prune these jobs first
BEGIN;
SELECT jobq.configure('triggered', retention_completed => '0');
CREATE RULE keep_done AS ON DELETE TO jobq.job DO INSTEAD NOTHING;
SAVEPOINT refused;
SELECT jobq.prune(100);
ROLLBACK TO refused;
DROP RULE keep_done ON jobq.job;
SELECT jobq.prune(100) AS pruned;
SELECT status, count(*) FROM jobq.job WHERE queue = 'triggered' GROUP BY 1;
COMMIT;

-- a transaction snapshot writes the same rows
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM life('repeatable');
COMMIT;
SELECT count(*) AS rows, bool_and(d IS NOT DISTINCT FROM s) AS same_rows
  FROM lease_rows('direct') d FULL JOIN lease_rows('repeatable') s USING (n);
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM life('serializable');
COMMIT;
SELECT count(*) AS rows, bool_and(d IS NOT DISTINCT FROM s) AS same_rows
  FROM lease_rows('direct') d FULL JOIN lease_rows('serializable') s USING (n);

-- a CHECK constraint added by hand is refused, and nothing of the failed
-- claim stays
SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'checked');
ALTER TABLE jobq.job ADD CONSTRAINT named_worker CHECK (status <> 'running' OR worker_id IS NOT NULL);
SELECT count(*) FROM jobq.claim('checked', worker_id => 'w');
SELECT status, attempts, (SELECT count(*) FROM jobq.ready WHERE queue = 'checked') AS ready_rows
  FROM jobq.job WHERE queue = 'checked';
ALTER TABLE jobq.job DROP CONSTRAINT named_worker;
SELECT count(*) AS claimed FROM jobq.claim('checked', worker_id => 'w');

-- a read-only transaction claims nothing and completes nothing
SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'ro');
BEGIN READ ONLY;
\set VERBOSITY terse
SELECT count(*) FROM jobq.claim('ro');
\set VERBOSITY default
ROLLBACK;
BEGIN READ ONLY;
\set VERBOSITY terse
SELECT jobq.complete(job_id, 1) FROM jobq.job WHERE queue = 'checked';
\set VERBOSITY default
ROLLBACK;
-- nor does it move a due delayed job to the ready rows: the delayed row stays
SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'ro_later',
                                  run_at => clock_timestamp() + interval '10 ms');
SELECT pg_sleep(0.05);
BEGIN READ ONLY;
\set VERBOSITY terse
SELECT count(*) FROM jobq.claim('ro_later');
\set VERBOSITY default
ROLLBACK;
SELECT (SELECT count(*) FROM jobq.scheduled WHERE queue = 'ro_later') AS scheduled_rows,
       (SELECT count(*) FROM jobq.ready WHERE queue = 'ro_later') AS ready_rows;

-- a claim sees what its own transaction did just before, and a later
-- statement sees the claim
BEGIN;
SELECT count(*) FROM jobq.enqueue('k', jsonb_build_object('n', 7), queue => 'same_tx');
SELECT payload ->> 'n' AS n FROM jobq.claim('same_tx');
SELECT status, (SELECT count(*) FROM jobq.ready WHERE queue = 'same_tx') AS ready_rows
  FROM jobq.job WHERE queue = 'same_tx';
SELECT jobq.complete(job_id, lease_token) FROM jobq.job WHERE queue = 'same_tx';
SELECT status FROM jobq.job WHERE queue = 'same_tx';
COMMIT;

-- a stale ready row (its job no longer pending) is removed, not claimed
SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'stale');
UPDATE jobq.job SET status = 'cancelled', finished_at = now() WHERE queue = 'stale';
SELECT count(*) AS claimed FROM jobq.claim('stale');
SELECT count(*) AS ready_rows FROM jobq.ready WHERE queue = 'stale';

DROP FUNCTION life(text);
DROP FUNCTION lease_rows(text);
DROP FUNCTION note_row() CASCADE;
DROP TABLE lease_seen;
