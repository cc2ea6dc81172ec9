\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.5'" to load this file. \quit

/*
 * extension/jobq--0.3.4--0.3.5.sql -- upgrade from release 0.3.4 to 0.3.5
 *
 * What 0.3.5 changes in a 0.3.4 database, by object.  The schema as it is,
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

-- An edge names its parent's queue, so that jobq.workflows reads the edges
-- of the querying role's queues only.  The edges there are given their
-- parent's queue; an edge whose parent is gone (pruned, discarded) keeps
-- NULL: its parent is no workflow root the view could show.  Restart the
-- server before this update: an edge written by the 0.3.4 library after it
-- names no queue, and its workflow would not show in jobq.workflows.
ALTER TABLE jobq.dependency ADD COLUMN parent_queue text COLLATE "C";
UPDATE jobq.dependency d SET parent_queue = j.queue FROM jobq.job j WHERE j.job_id = d.parent_id;
COMMENT ON COLUMN jobq.dependency.parent_queue IS
    'the parent''s queue (0.3.5): jobq.workflows finds the roots of a queue without reading other queues'' edges; NULL in an edge whose parent was gone when the column came';

/* ---------------------------------------------------------------------
 * Indexes
 * ------------------------------------------------------------------- */

CREATE INDEX dependency_parent_queue_idx ON jobq.dependency (parent_queue, parent_id);
COMMENT ON INDEX jobq.dependency_parent_queue_idx IS
    'the parents of each queue: jobq.workflows reads only the queues the querying role may use';

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

-- The roots of the queues the role may use only (extension/schema/80_views.sql).
CREATE OR REPLACE VIEW jobq.workflows WITH (security_barrier) AS
WITH RECURSIVE every_queue(name) AS (
    SELECT (SELECT d.parent_queue FROM jobq.dependency d
             WHERE d.parent_queue IS NOT NULL
             ORDER BY d.parent_queue LIMIT 1)
  UNION ALL
    SELECT (SELECT d.parent_queue FROM jobq.dependency d
             WHERE d.parent_queue OPERATOR(pg_catalog.>) q.name
             ORDER BY d.parent_queue LIMIT 1)
      FROM every_queue q
     WHERE q.name IS NOT NULL
), walk(queues, i, id) AS (
    SELECT CASE WHEN jobq.may_use_queue('*')
                THEN ARRAY(SELECT q.name FROM every_queue q WHERE q.name IS NOT NULL)
                ELSE ARRAY(SELECT p.queue FROM (SELECT DISTINCT p.queue FROM jobq.permission p) p
                            WHERE jobq.may_use_queue(p.queue))
           END,
           1, 0::bigint
  UNION ALL
    SELECT w.queues,
           CASE WHEN n.parent_id IS NULL THEN w.i OPERATOR(pg_catalog.+) 1 ELSE w.i END,
           COALESCE(n.parent_id, 0)
      FROM walk w
      LEFT JOIN LATERAL (SELECT d.parent_id FROM jobq.dependency d
                          WHERE (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.>)
                                (w.queues[w.i], w.id)
                            AND (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.<=)
                                (w.queues[w.i], 9223372036854775807::bigint)
                          ORDER BY d.parent_queue, d.parent_id LIMIT 1) n ON true
     WHERE w.i OPERATOR(pg_catalog.<=) pg_catalog.cardinality(w.queues)
)
SELECT r.job_id AS root, r.queue, r.kind, r.created_at,
       s.total, s.blocked, s.pending, s.running, s.completed, s.failed, s.cancelled,
       s.can_finish
  FROM walk w
 CROSS JOIN LATERAL (SELECT j.job_id, j.queue, j.kind, j.created_at
                       FROM jobq.job j
                      WHERE j.job_id OPERATOR(pg_catalog.=) w.id
                        AND j.queue OPERATOR(pg_catalog.=) w.queues[w.i]
                        AND (SELECT t.job_id FROM jobq.dependent t
                              WHERE t.job_id OPERATOR(pg_catalog.=) w.id) IS NULL
                     OFFSET 0) r
 CROSS JOIN LATERAL jobq.workflow_status(r.job_id) s
 WHERE w.id OPERATOR(pg_catalog.<>) 0;
COMMENT ON VIEW jobq.workflows IS
    'one row per workflow root still kept (a job with dependents and no parents): its jobs by status and can_finish';
