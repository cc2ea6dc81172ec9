-- proto: a hand-built prototype of jobq's storage with the lease kept in the
-- jobq.ready row (plain SQL; columns as jobq's).  A claim updates only its
-- ready row (HOT: no index has a column it changes); the job row is written
-- once more, at completion (HOT: jobq.job has its primary key only), and
-- the ready row is deleted then.  The running jobs are the ready rows with
-- a lease (found from the claim index's head, behind the claim position).
DROP TABLE IF EXISTS pjob, pready;
DROP SEQUENCE IF EXISTS pjob_id_seq;
CREATE SEQUENCE pjob_id_seq;
CREATE TABLE pjob (
    job_id           bigint PRIMARY KEY,
    queue            text COLLATE "C" NOT NULL,
    kind             text NOT NULL,
    payload          jsonb NOT NULL,
    priority         integer NOT NULL,
    status           text NOT NULL,
    retry_count      integer NOT NULL DEFAULT 0,
    max_retries      integer NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    idempotency_key  text,
    concurrency_key  text,
    run_at           timestamptz NOT NULL,
    claimed_at       timestamptz,
    worker_id        text,
    lease_token      bigint,
    lease_expires_at timestamptz,
    last_error       text,
    result           jsonb,
    checkpoint       jsonb,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz
) WITH (fillfactor = 80);
CREATE TABLE pready (
    queue        text COLLATE "C" NOT NULL,
    neg_priority integer NOT NULL,
    run_at       timestamptz NOT NULL,
    job_id       bigint NOT NULL,
    kind         text NOT NULL,
    concurrency_key text,
    attempts     integer,
    lease_token  bigint,
    lease_expires_at timestamptz,
    claimed_at   timestamptz,
    worker_id    text
);
CREATE INDEX pready_claim_idx ON pready (queue, neg_priority, run_at, job_id) WITH (deduplicate_items = off);
