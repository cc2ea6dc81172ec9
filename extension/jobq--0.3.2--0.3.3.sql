\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.3'" to load this file. \quit

/*
 * extension/jobq--0.3.2--0.3.3.sql -- upgrade from release 0.3.2 to 0.3.3
 *
 * What 0.3.3 changes in a 0.3.2 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here.
 */

/* ---------------------------------------------------------------------
 * Locks
 * ------------------------------------------------------------------- */

-- jobq.job before anything else (0.3.7): an update that goes on to 0.3.7
-- rebuilds an index of jobq.job, and a worker that holds a job while it
-- waits for a table or view this script changes would otherwise deadlock
-- with it.
LOCK TABLE jobq.job IN ACCESS EXCLUSIVE MODE;

/* ---------------------------------------------------------------------
 * Tables
 * ------------------------------------------------------------------- */

-- A deferred parent's row names the parent's queue: the background worker
-- settles deferred parents queue by queue, each queue in turn, so that one
-- tenant's backlog does not keep another's waiting.  The rows there are
-- given their parent's queue; a row whose parent is gone (purged) had
-- nothing left to settle, and goes.  A completion that defers a parent
-- while this runs waits for it, and may then fail (its insert names no
-- queue): the client's retry of it succeeds.
ALTER TABLE jobq.settle_deferred ADD COLUMN queue text COLLATE "C";
UPDATE jobq.settle_deferred s SET queue = j.queue FROM jobq.job j WHERE j.job_id = s.parent_id;
DELETE FROM jobq.settle_deferred WHERE queue IS NULL;
ALTER TABLE jobq.settle_deferred ALTER COLUMN queue SET NOT NULL;
COMMENT ON COLUMN jobq.settle_deferred.queue IS
    'the parent''s queue: the worker settles deferred parents queue by queue, each in turn';

/* ---------------------------------------------------------------------
 * Indexes
 * ------------------------------------------------------------------- */

CREATE INDEX settle_deferred_queue_idx ON jobq.settle_deferred (queue, retry_at);
COMMENT ON INDEX jobq.settle_deferred_queue_idx IS
    'deferred parents by queue, then when due: the worker''s turn over the queues';
CREATE INDEX settle_deferred_retry_idx ON jobq.settle_deferred (retry_at);
COMMENT ON INDEX jobq.settle_deferred_retry_idx IS
    'deferred parents by when due: whether any is, and the worker''s next wake-up';
