\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.5'" to load this file. \quit

/*
 * extension/jobq--0.3.4--0.3.5.sql -- upgrade from release 0.3.4 to 0.3.5
 *
 * What 0.3.5 changes in a 0.3.4 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here.
 */

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
WITH RECURSIVE queue(name) AS (
    SELECT (SELECT d.parent_queue FROM jobq.dependency d
             WHERE d.parent_queue IS NOT NULL
             ORDER BY d.parent_queue LIMIT 1)
  UNION ALL
    SELECT (SELECT d.parent_queue FROM jobq.dependency d
             WHERE d.parent_queue OPERATOR(pg_catalog.>) q.name
             ORDER BY d.parent_queue LIMIT 1)
      FROM queue q
     WHERE q.name IS NOT NULL
), parent(queue, id) AS (
    SELECT n.parent_queue, n.parent_id
      FROM (SELECT q.name FROM queue q
             WHERE q.name IS NOT NULL AND jobq.may_use_queue(q.name) OFFSET 0) q
     CROSS JOIN LATERAL (SELECT d.parent_queue, d.parent_id FROM jobq.dependency d
                          WHERE (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.>) (q.name, 0::bigint)
                          ORDER BY d.parent_queue, d.parent_id LIMIT 1) n
     WHERE n.parent_queue OPERATOR(pg_catalog.=) q.name
  UNION ALL
    SELECT n.parent_queue, n.parent_id
      FROM parent p
     CROSS JOIN LATERAL (SELECT d.parent_queue, d.parent_id FROM jobq.dependency d
                          WHERE (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.>) (p.queue, p.id)
                          ORDER BY d.parent_queue, d.parent_id LIMIT 1) n
     WHERE n.parent_queue OPERATOR(pg_catalog.=) p.queue
)
SELECT r.job_id AS root, r.queue, r.kind, r.created_at,
       s.total, s.blocked, s.pending, s.running, s.completed, s.failed, s.cancelled,
       s.can_finish
  FROM parent p
 CROSS JOIN LATERAL (SELECT j.job_id, j.queue, j.kind, j.created_at
                       FROM jobq.job j
                      WHERE j.job_id OPERATOR(pg_catalog.=) p.id
                        AND j.queue OPERATOR(pg_catalog.=) p.queue
                        AND (SELECT t.job_id FROM jobq.dependent t
                              WHERE t.job_id OPERATOR(pg_catalog.=) p.id) IS NULL
                     OFFSET 0) r
 CROSS JOIN LATERAL jobq.workflow_status(r.job_id) s;
COMMENT ON VIEW jobq.workflows IS
    'one row per workflow root still kept (a job with dependents and no parents): its jobs by status and can_finish';
