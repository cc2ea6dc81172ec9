-- seed: the jobs table users write by hand (status column, retry_count,
-- priority, run_at, unique idempotency key), claimed with
-- UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) and completed
-- with an UPDATE.
DROP TABLE IF EXISTS seed_job;
CREATE TABLE seed_job (
    id               bigserial PRIMARY KEY,
    queue            text NOT NULL DEFAULT 'q',
    kind             text NOT NULL,
    payload          jsonb NOT NULL,
    status           text NOT NULL DEFAULT 'pending',
    priority         integer NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL DEFAULT now(),
    retry_count      integer NOT NULL DEFAULT 0,
    max_retries      integer NOT NULL DEFAULT 3,
    idempotency_key  text UNIQUE,
    locked_by        text,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX seed_job_claim_idx ON seed_job (queue, priority DESC, run_at, id)
    WHERE status = 'pending';
