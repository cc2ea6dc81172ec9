/*
 * extension/schema/20_indexes.sql -- the indexes of jobq's tables
 *
 * The indexes beyond the primary keys and unique constraints of
 * 10_tables.sql, table by table, with what reads each.  jobq.job has few
 * on purpose: a completion or a checkpoint updates its row, and every index
 * key it changes costs an index entry.
 *
 * No deduplication in indexes whose keys end in job_id: no two live entries
 * share a key, so the deduplication pass B-tree runs on every full leaf page
 * before splitting it finds nothing to merge (in jobq.ready's claim index
 * that pass is 3.6 % of a 1M-job enqueue_many).
 */

/* ---------------------------------------------------------------------
 * jobq.job
 * ------------------------------------------------------------------- */

-- lease_expires_at is set exactly while a job runs.  The predicate is on it,
-- not on status, so that complete/fail (status = 'running' AND job_id = ...)
-- are never planned over this index, which collects dead entries under a
-- long-held snapshot: they take the primary key.
CREATE INDEX job_running_lease_idx ON jobq.job (queue, lease_expires_at)
    WHERE lease_expires_at IS NOT NULL;
COMMENT ON INDEX jobq.job_running_lease_idx IS 'running jobs per queue by lease expiry, for the reaper and concurrency limits';

-- The finished jobs per queue and status (0.3.7 on; until then
-- job_finished_idx, by finish time alone): pruning walks each queue's
-- completed, cancelled and failed jobs up to that queue's own cutoffs, and
-- jobq.queue_stats and jobq.kind_stats count a queue's finished jobs,
-- without reading another queue's.  The queue and status in the key cost a
-- completion about 16 B of WAL more than the finish time alone.
CREATE INDEX job_finished_queue_idx ON jobq.job (queue, status, finished_at)
    WHERE finished_at IS NOT NULL;
COMMENT ON INDEX jobq.job_finished_queue_idx IS
    'finished jobs per queue and status by finish time, for pruning and the counts of finished jobs';

-- The failed jobs only (the dead letter): the dead letter's groups,
-- jobq.retry_failed and the failed count of jobq.queue_stats read it
-- instead of every kept job.  On the hot path it costs one index entry when
-- a job fails for good, and nothing for the other transitions beyond
-- testing the predicate: every update that changes status already changes
-- an index key (lease_expires_at or finished_at), so none is HOT anyway.
CREATE INDEX job_failed_idx ON jobq.job (queue, kind, job_id)
    WITH (deduplicate_items = off)
    WHERE status OPERATOR(pg_catalog.=) 'failed';
COMMENT ON INDEX jobq.job_failed_idx IS
    'failed jobs (the dead letter) per queue and kind, for the dead letter, retry_failed and queue_stats';

-- The jobs waiting for their parents (0.3.7 on), for the blocked count of
-- jobq.queue_stats.  Only a workflow's children ever have an entry.  Its
-- predicate names finished_at, which a blocked job never has, so that no
-- statement about blocked jobs by id (a cascade's, which name the status
-- and the ids) can be planned on it: one that was, with the statistics of
-- a database analyzed while it had few blocked jobs, read every blocked
-- job for each job of a cascade (this change's first version: a 500-job
-- cancellation read 134,000 buffers instead of 56,000).
CREATE INDEX job_blocked_idx ON jobq.job (queue, job_id)
    WITH (deduplicate_items = off)
    WHERE status OPERATOR(pg_catalog.=) 'blocked' AND finished_at IS NULL;
COMMENT ON INDEX jobq.job_blocked_idx IS 'jobs waiting for their parents, per queue, for queue_stats';

/* ---------------------------------------------------------------------
 * jobq.attempt
 * ------------------------------------------------------------------- */

-- Failed attempts and expired leases per queue by time (0.3.7 on), for
-- the window of jobq.kind_stats, which read every attempt kept before.  An
-- entry per failure; a job that succeeds first time has no attempt row.
CREATE INDEX attempt_failure_idx ON jobq.attempt (queue, finished_at)
    WHERE outcome OPERATOR(pg_catalog.=) ANY ('{failed,lease expired}'::text[]);
COMMENT ON INDEX jobq.attempt_failure_idx IS
    'failed attempts and expired leases per queue by time, for kind_stats';

/* ---------------------------------------------------------------------
 * jobq.ready, jobq.scheduled, jobq.rate_window
 * ------------------------------------------------------------------- */

CREATE INDEX ready_claim_idx ON jobq.ready (queue, neg_priority, run_at, job_id)
    WITH (deduplicate_items = off);
COMMENT ON INDEX jobq.ready_claim_idx IS 'claim order: priority DESC, run_at, job_id';

CREATE INDEX scheduled_due_idx ON jobq.scheduled (queue, run_at, job_id)
    WITH (deduplicate_items = off);
COMMENT ON INDEX jobq.scheduled_due_idx IS 'scheduled jobs in due order';

CREATE INDEX rate_window_idx ON jobq.rate_window (queue, claimed_at);
COMMENT ON INDEX jobq.rate_window_idx IS 'claims per queue by time';

/* ---------------------------------------------------------------------
 * jobq.permission
 * ------------------------------------------------------------------- */

-- The queues a role may use are read by the roles whose privileges it has
-- (jobq.usable_queue, jobq.may_use_queue): its own capabilities, not every
-- tenant's.
CREATE INDEX permission_role_idx ON jobq.permission (role, queue);
COMMENT ON INDEX jobq.permission_role_idx IS
    'capabilities by role: the queues a role may use, without reading the other roles''';

/* ---------------------------------------------------------------------
 * jobq.idempotency_key
 * ------------------------------------------------------------------- */

-- jobq.prune deletes the keys past expires_at: without this index it read the
-- whole table every jobq.prune_interval.  Keys of live jobs (NULL) stay out.
CREATE INDEX idempotency_key_expires_idx ON jobq.idempotency_key (expires_at)
    WHERE expires_at IS NOT NULL;
COMMENT ON INDEX jobq.idempotency_key_expires_idx IS 'keys whose job was pruned, by expiry, for jobq.prune';

/* ---------------------------------------------------------------------
 * jobq.schedule
 * ------------------------------------------------------------------- */

CREATE INDEX schedule_due_idx ON jobq.schedule (next_fire_at) WHERE NOT paused;
COMMENT ON INDEX jobq.schedule_due_idx IS 'unpaused schedules by next fire time';

/* ---------------------------------------------------------------------
 * jobq.dependency
 * ------------------------------------------------------------------- */

CREATE INDEX dependency_child_idx ON jobq.dependency (child_id);
COMMENT ON INDEX jobq.dependency_child_idx IS 'the parents of a job, for jobq.parent_results';
-- The edges still to settle, so that settling a parent (or resuming one a
-- budget cut short) reads only those, however many it settled before.
CREATE INDEX dependency_unsettled_idx ON jobq.dependency (parent_id, child_id)
    WHERE parent_status IS NULL;
COMMENT ON INDEX jobq.dependency_unsettled_idx IS
    'the dependencies whose parent has not finished yet (or whose settling is under way), by parent';
CREATE INDEX dependency_parent_queue_idx ON jobq.dependency (parent_queue, parent_id);
COMMENT ON INDEX jobq.dependency_parent_queue_idx IS
    'the parents of each queue: jobq.workflows reads only the queues the querying role may use';

/* ---------------------------------------------------------------------
 * jobq.settle_deferred
 * ------------------------------------------------------------------- */

CREATE INDEX settle_deferred_queue_idx ON jobq.settle_deferred (queue, retry_at);
COMMENT ON INDEX jobq.settle_deferred_queue_idx IS
    'deferred parents by queue, then when due: the worker''s turn over the queues';
CREATE INDEX settle_deferred_retry_idx ON jobq.settle_deferred (retry_at);
COMMENT ON INDEX jobq.settle_deferred_retry_idx IS
    'deferred parents by when due: whether any is, and the worker''s next wake-up';

/* ---------------------------------------------------------------------
 * jobq.app_worker
 * ------------------------------------------------------------------- */

CREATE INDEX app_worker_seen_idx ON jobq.app_worker (last_seen_at);
COMMENT ON INDEX jobq.app_worker_seen_idx IS
    'application workers by last heartbeat, for pruning the ones not seen for a day';
