-- test/soak/setup.sql: schema for the pgbench soak test (run once per database).
--
-- soak.enqueued   one row per enqueue result seen by a producer
-- soak.ledger     one row per job a worker completed; UNIQUE(job_id) turns a
--                 job completed twice into an error that aborts pgbench
-- soak.fail_log   one row per jobq.fail call and the status it returned
-- soak.stale      complete calls that returned false (a lost lease)
-- soak.abandoned  one row per job claimed with a short lease and left alone,
--                 as by a worker that died: the lease reaper must take it back
-- soak.work()     the worker: claim a batch, then complete or fail each job,
--                 one transaction per job

\set ON_ERROR_STOP 1

CREATE EXTENSION IF NOT EXISTS jobq;

CREATE SCHEMA soak;

CREATE TABLE soak.enqueued (
	job_id          bigint NOT NULL,
	created         boolean NOT NULL,
	kind            text NOT NULL,
	idempotency_key text
);

CREATE TABLE soak.ledger (
	job_id       bigint NOT NULL UNIQUE,
	worker_id    text NOT NULL,
	completed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE soak.fail_log (
	job_id     bigint NOT NULL,
	retryable  boolean NOT NULL,
	new_status text
);

CREATE TABLE soak.abandoned (
	job_id bigint NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE soak.stale (
	job_id bigint NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Retries must come back within the test: tiny exponential backoff.
\o /dev/null
SELECT jobq.configure('soak', backoff_base => '10 ms', backoff_cap => '50 ms');
\o

-- One worker round: claim up to p_batch jobs (committed at once, as a real
-- worker's claim is), then handle each job in its own transaction: fail
-- p_fail_pct percent of them (one in fifteen of those not retryable),
-- complete the rest and record the completion in the ledger in the same
-- transaction, only when complete says it took effect.  In p_abandon_pct
-- percent of the rounds the worker first claims one job with a 200 ms lease
-- and walks away from it, as a crashed worker would.
CREATE PROCEDURE soak.work(p_fail_pct int, p_batch int, p_abandon_pct int DEFAULT 0)
LANGUAGE plpgsql
AS $$
DECLARE
	me     text := 'soak-' || pg_backend_pid();
	ids    bigint[];
	tokens bigint[];
	roll   float8;
	st     text;
BEGIN
	IF random() * 100 < p_abandon_pct THEN
		INSERT INTO soak.abandoned (job_id)
		SELECT c.job_id
		  FROM jobq.claim(queue => 'soak', worker_id => me || '-dies', lease => '200 ms') AS c;
		COMMIT;
	END IF;

	SELECT array_agg(c.job_id ORDER BY c.job_id),
		   array_agg(c.lease_token ORDER BY c.job_id)
	  INTO ids, tokens
	  FROM jobq.claim(queue => 'soak', worker_id => me, batch => p_batch) AS c;
	COMMIT;

	IF ids IS NULL THEN
		PERFORM pg_sleep(0.01);		-- nothing ready: do not spin
		RETURN;
	END IF;

	FOR i IN 1 .. array_length(ids, 1) LOOP
		roll := random() * 100;
		IF roll < p_fail_pct THEN
			st := jobq.fail(ids[i], tokens[i], 'soak: simulated failure ' || round(roll::numeric, 2),
							retryable => roll >= p_fail_pct / 15.0);
			INSERT INTO soak.fail_log VALUES (ids[i], roll >= p_fail_pct / 15.0, st);
		ELSIF jobq.complete(ids[i], tokens[i], jsonb_build_object('by', me)) THEN
			INSERT INTO soak.ledger (job_id, worker_id) VALUES (ids[i], me);
		ELSE
			INSERT INTO soak.stale (job_id) VALUES (ids[i]);
		END IF;
		COMMIT;
	END LOOP;
END;
$$;
