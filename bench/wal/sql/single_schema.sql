-- single: a hand-built prototype of one row per job and no set tables
-- (plain SQL; jobq's columns, the ones a claim or a completion changes put
-- last so that a HOT update's WAL record carries only them).  Indexes only
-- on columns fixed at enqueue: the primary key and the claim order.  Claim
-- and complete are HOT updates; finished jobs are removed by rotating the
-- table (TRUNCATE of a finished partition; here: TRUNCATE).  What finds the
-- running and finished jobs without an index on a changing column (a reaper
-- position and a rotation behind the claim position) is not prototyped.
DROP TABLE IF EXISTS sjob;
DROP SEQUENCE IF EXISTS sjob_id_seq;
CREATE SEQUENCE sjob_id_seq;
CREATE TABLE sjob (
    job_id           bigint PRIMARY KEY,
    queue            text COLLATE "C" NOT NULL,
    neg_priority     integer NOT NULL,
    run_at           timestamptz NOT NULL,
    kind             text NOT NULL,
    payload          jsonb NOT NULL,
    max_retries      integer NOT NULL,
    idempotency_key  text,
    concurrency_key  text,
    created_at       timestamptz NOT NULL,
    retry_count      integer NOT NULL DEFAULT 0,
    attempts         integer NOT NULL DEFAULT 0,
    lease_token      bigint,
    claimed_at       timestamptz,
    lease_expires_at timestamptz,
    updated_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    status           "char" NOT NULL,
    worker_id        text,
    last_error       text,
    result           jsonb,
    checkpoint       jsonb
) WITH (fillfactor = 50);
CREATE INDEX sjob_claim_idx ON sjob (queue, neg_priority, run_at, job_id) WITH (deduplicate_items = off);
