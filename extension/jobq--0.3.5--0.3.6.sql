\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.6'" to load this file. \quit

/*
 * extension/jobq--0.3.5--0.3.6.sql -- upgrade from release 0.3.5 to 0.3.6
 *
 * What 0.3.6 changes in a 0.3.5 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here:
 * the views read jobq.granted_queue and jobq.usable_queue with their
 * owner's rights and call only jobq.may_use_queue, which every role
 * granted before holds.
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
 * Indexes
 * ------------------------------------------------------------------- */

CREATE INDEX permission_role_idx ON jobq.permission (role, queue);
COMMENT ON INDEX jobq.permission_role_idx IS
    'capabilities by role: the queues a role may use, without reading the other roles''';

/* ---------------------------------------------------------------------
 * Functions
 * ------------------------------------------------------------------- */

-- One row, as it always returned: the planner's estimate of jobq.workflows
-- counted 1,000 a root.
ALTER FUNCTION jobq.workflow_status(bigint) ROWS 1;

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

-- The queues the querying role may use, read by its roles
-- (extension/schema/80_views.sql): their names, then their rows.
CREATE VIEW jobq.granted_queue WITH (security_barrier) AS
WITH RECURSIVE asker(oid, super) AS (
    SELECT a.oid, a.rolsuper
      FROM pg_catalog.pg_roles a
     WHERE a.oid OPERATOR(pg_catalog.=) (
           SELECT CASE
                  WHEN u.rolsuper OR u.oid OPERATOR(pg_catalog.=)
                       (SELECT c.relowner FROM pg_catalog.pg_class c
                         WHERE c.oid OPERATOR(pg_catalog.=) 'jobq.job'::pg_catalog.regclass)
                  THEN COALESCE(NULLIF(pg_catalog.current_setting('jobq.handler_role', true), '')::pg_catalog.oid,
                                (SELECT o.oid FROM pg_catalog.pg_roles o
                                  WHERE o.rolname OPERATOR(pg_catalog.=)
                                        COALESCE(NULLIF(pg_catalog.current_setting('role'), 'none'),
                                                 SESSION_USER)))
                  ELSE u.oid END
             FROM pg_catalog.pg_roles u
            WHERE u.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
), member_of(oid) AS (
    SELECT a.oid FROM asker a
  UNION
    -- the database's owner has the privileges of pg_database_owner, which no
    -- row of pg_auth_members says
    SELECT o.oid FROM asker a, pg_catalog.pg_roles o
     WHERE o.rolname OPERATOR(pg_catalog.=) 'pg_database_owner'
       AND pg_catalog.pg_has_role(a.oid, o.oid, 'USAGE')
  UNION
    SELECT m.roleid FROM pg_catalog.pg_auth_members m
      JOIN member_of r ON m.member OPERATOR(pg_catalog.=) r.oid
), roles(a) AS (
    SELECT ARRAY(SELECT r.oid FROM member_of r, asker a
                  WHERE pg_catalog.pg_has_role(a.oid, r.oid, 'USAGE')
                  ORDER BY r.oid)
), walk(i, queue) AS (
    SELECT 1, ''::text COLLATE "C"
     WHERE NOT jobq.may_use_queue('*') AND NOT (SELECT a.super FROM asker a)
  UNION ALL
    SELECT CASE WHEN n.queue IS NULL THEN w.i OPERATOR(pg_catalog.+) 1 ELSE w.i END,
           COALESCE(n.queue, ''::text COLLATE "C")
      FROM walk w
      LEFT JOIN LATERAL (SELECT p.queue FROM jobq.permission p
                          WHERE p.role OPERATOR(pg_catalog.=) (SELECT r.a[w.i] FROM roles r)
                            AND p.queue OPERATOR(pg_catalog.>) w.queue
                          ORDER BY p.queue LIMIT 1) n ON true
     WHERE w.i OPERATOR(pg_catalog.<=) (SELECT pg_catalog.cardinality(r.a) FROM roles r)
), every(name) AS (
    SELECT (SELECT q.name FROM jobq.queue q ORDER BY q.name LIMIT 1)
     WHERE NOT jobq.may_use_queue('*') AND (SELECT a.super FROM asker a)
  UNION ALL
    SELECT (SELECT q.name FROM jobq.queue q
             WHERE q.name OPERATOR(pg_catalog.>) e.name
             ORDER BY q.name LIMIT 1)
      FROM every e
     WHERE e.name IS NOT NULL
)
SELECT w.queue AS name
  FROM walk w
 WHERE w.queue OPERATOR(pg_catalog.<>) ''
   AND NOT EXISTS (SELECT FROM jobq.permission p, roles r
                    WHERE p.queue OPERATOR(pg_catalog.=) w.queue
                      AND p.role OPERATOR(pg_catalog.=) ANY (r.a[1:w.i OPERATOR(pg_catalog.-) 1]))
   AND jobq.may_use_queue(w.queue)
UNION ALL
SELECT e.name
  FROM every e
 WHERE e.name IS NOT NULL
   AND jobq.may_use_queue(e.name);
COMMENT ON VIEW jobq.granted_queue IS
    'the names of the queues the querying role may use, for a role that may not use every queue (for jobq''s views; granted to no one)';

CREATE VIEW jobq.usable_queue WITH (security_barrier) AS
SELECT q.*
  FROM (SELECT * FROM jobq.queue q
         WHERE jobq.may_use_queue('*')
         LIMIT (SELECT 9223372036854775807)) q
UNION ALL
SELECT q.*
  FROM jobq.granted_queue g
 CROSS JOIN LATERAL (SELECT * FROM jobq.queue q
                      WHERE q.name OPERATOR(pg_catalog.=) g.name OFFSET 0) q;
COMMENT ON VIEW jobq.usable_queue IS
    'the queues the querying role may use (for jobq''s views; granted to no one)';

-- jobq.queues, jobq.queue_stats and jobq.workflows start from it: a role's
-- read costs its own queues, not every queue of the database.
CREATE OR REPLACE VIEW jobq.queues WITH (security_barrier) AS
SELECT q.name AS queue, q.paused,
       q.max_retries, q.lease, q.backoff_base, q.backoff_cap, q.backoff_jitter,
       q.retention_completed, q.retention_failed,
       q.max_concurrency, q.max_per_key, q.rate_limit, q.rate_period,
       q.breaker_threshold, q.breaker_state, q.breaker_failures,
       q.breaker_tripped_at, q.breaker_reason,
       q.created_at, q.updated_at
  FROM jobq.usable_queue q;

CREATE OR REPLACE VIEW jobq.queue_stats WITH (security_barrier) AS
SELECT q.name AS queue,
       r.ready OPERATOR(pg_catalog.+) s.due OPERATOR(pg_catalog.+) s.later AS pending,
       x.running,
       COALESCE(f.completed, 0) AS completed,
       d.failed,
       COALESCE(f.cancelled, 0) AS cancelled,
       -- a job made ready after this transaction's now() (another session's,
       -- under READ COMMITTED) has waited 0, not a negative time
       CASE WHEN r.oldest IS NOT NULL OR s.oldest_due IS NOT NULL
            THEN pg_catalog.now() OPERATOR(pg_catalog.-) LEAST(r.oldest, s.oldest_due, pg_catalog.now())
       END AS oldest_pending_age,
       q.paused,
       r.ready OPERATOR(pg_catalog.+) s.due AS ready,
       s.later AS delayed,
       COALESCE(h.completed, 0) AS completed_last_hour,
       COALESCE(h.failed, 0) AS failed_last_hour,
       q.breaker_state,
       q.max_concurrency, q.max_per_key, q.rate_limit, q.rate_period,
       q.breaker_threshold,
       COALESCE(f.blocked, 0) AS blocked
  FROM jobq.usable_queue q
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS ready, pg_catalog.min(r.run_at) AS oldest
                       FROM jobq.ready r
                      WHERE r.queue OPERATOR(pg_catalog.=) q.name) r
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) FILTER (WHERE s.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS due,
                            pg_catalog.count(*) FILTER (WHERE s.run_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS later,
                            pg_catalog.min(s.run_at) FILTER (WHERE s.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest_due
                       FROM jobq.scheduled s
                      WHERE s.queue OPERATOR(pg_catalog.=) q.name) s
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS running
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name AND j.lease_expires_at IS NOT NULL) x
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS failed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'failed') d
  LEFT JOIN (SELECT j.queue,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'completed') AS completed,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'cancelled') AS cancelled,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'blocked') AS blocked
               FROM jobq.job j
              WHERE j.status OPERATOR(pg_catalog.=) ANY ('{completed,cancelled,blocked}'::text[])
              GROUP BY j.queue) f ON f.queue OPERATOR(pg_catalog.=) (q.name OPERATOR(pg_catalog.||) '')
  LEFT JOIN (SELECT j.queue,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'completed') AS completed,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'failed') AS failed
               FROM jobq.job j
              WHERE j.finished_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)
              GROUP BY j.queue) h ON h.queue OPERATOR(pg_catalog.=) (q.name OPERATOR(pg_catalog.||) '');

CREATE OR REPLACE VIEW jobq.workflows WITH (security_barrier) AS
WITH RECURSIVE every_queue(name) AS (
    SELECT (SELECT d.parent_queue FROM jobq.dependency d
             WHERE d.parent_queue IS NOT NULL
             ORDER BY d.parent_queue LIMIT 1)
     WHERE jobq.may_use_queue('*')
  UNION ALL
    SELECT (SELECT d.parent_queue FROM jobq.dependency d
             WHERE d.parent_queue OPERATOR(pg_catalog.>) q.name
             ORDER BY d.parent_queue LIMIT 1)
      FROM every_queue q
     WHERE q.name IS NOT NULL
), queues(name) AS (
    SELECT q.name FROM every_queue q WHERE q.name IS NOT NULL
  UNION ALL
    SELECT g.name FROM jobq.granted_queue g
)
SELECT r.job_id AS root, r.queue, r.kind, r.created_at,
       s.total, s.blocked, s.pending, s.running, s.completed, s.failed, s.cancelled,
       s.can_finish
  FROM queues q
 CROSS JOIN LATERAL (
       WITH RECURSIVE walk(id) AS (
           SELECT 0::bigint
         UNION ALL
           SELECT (SELECT d.parent_id FROM jobq.dependency d
                    WHERE (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.>) (q.name, w.id)
                      AND (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.<=)
                          (q.name, 9223372036854775807::bigint)
                    ORDER BY d.parent_queue, d.parent_id LIMIT 1)
             FROM walk w
            WHERE w.id IS NOT NULL
       )
       SELECT w.id FROM walk w WHERE w.id OPERATOR(pg_catalog.>) 0) w
 CROSS JOIN LATERAL (SELECT j.job_id, j.queue, j.kind, j.created_at
                       FROM jobq.job j
                      WHERE j.job_id OPERATOR(pg_catalog.=) w.id
                        AND j.queue OPERATOR(pg_catalog.=) q.name
                        AND (SELECT t.job_id FROM jobq.dependent t
                              WHERE t.job_id OPERATOR(pg_catalog.=) w.id) IS NULL
                     OFFSET 0) r
 CROSS JOIN LATERAL jobq.workflow_status(r.job_id) s;
