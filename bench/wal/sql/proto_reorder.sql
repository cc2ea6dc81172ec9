-- proto with the columns a completion changes put last in the job row
DROP TABLE pjob;
CREATE TABLE pjob (
    job_id           bigint PRIMARY KEY,
    queue            text COLLATE "C" NOT NULL,
    kind             text NOT NULL,
    payload          jsonb NOT NULL,
    priority         integer NOT NULL,
    retry_count      integer NOT NULL DEFAULT 0,
    max_retries      integer NOT NULL,
    idempotency_key  text,
    concurrency_key  text,
    run_at           timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    lease_token      bigint,
    claimed_at       timestamptz,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    status           text NOT NULL,
    lease_expires_at timestamptz,
    worker_id        text,
    last_error       text,
    result           jsonb,
    checkpoint       jsonb
) WITH (fillfactor = 80);
ALTER TABLE pready SET (fillfactor = 80);
