\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.6'" to load this file. \quit

/*
 * extension/jobq--0.3.5--0.3.6.sql -- upgrade from release 0.3.5 to 0.3.6
 *
 * What 0.3.6 changes in a 0.3.5 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here:
 * the views read jobq.usable_queue with their owner's rights and call only
 * jobq.may_use_queue, which every role granted before holds.
 */

/* ---------------------------------------------------------------------
 * Indexes
 * ------------------------------------------------------------------- */

CREATE INDEX permission_role_idx ON jobq.permission (role, queue);
COMMENT ON INDEX jobq.permission_role_idx IS
    'capabilities by role: the queues a role may use, without reading the other roles''';

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

-- The queues the querying role may use, read by its roles
-- (extension/schema/80_views.sql).
CREATE VIEW jobq.usable_queue WITH (security_barrier) AS
SELECT q.* FROM jobq.queue q
 WHERE jobq.may_use_queue('*')
UNION ALL
SELECT q.*
  FROM (SELECT DISTINCT p.queue FROM jobq.permission p
         WHERE p.role OPERATOR(pg_catalog.=) ANY (ARRAY(
                   SELECT r.oid FROM pg_catalog.pg_roles r
                    WHERE pg_catalog.pg_has_role(r.oid, 'USAGE')))) v
 CROSS JOIN LATERAL (SELECT * FROM jobq.queue q
                      WHERE q.name OPERATOR(pg_catalog.=) v.queue OFFSET 0) q
 WHERE NOT jobq.may_use_queue('*')
   AND jobq.may_use_queue(v.queue);
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
WITH RECURSIVE walk(roles, queue, id) AS (
    SELECT CASE WHEN NOT jobq.may_use_queue('*')
                THEN ARRAY(SELECT r.oid FROM pg_catalog.pg_roles r
                            WHERE pg_catalog.pg_has_role(r.oid, 'USAGE'))
           END,
           ''::text COLLATE "C", 0::bigint
  UNION ALL
    SELECT w.roles,
           CASE WHEN n.parent_id IS NOT NULL THEN w.queue
                WHEN w.roles IS NULL
                THEN (SELECT d.parent_queue FROM jobq.dependency d
                       WHERE d.parent_queue OPERATOR(pg_catalog.>) w.queue
                       ORDER BY d.parent_queue LIMIT 1)
                ELSE (SELECT pg_catalog.min(m.queue)
                        FROM pg_catalog.unnest(w.roles) r(oid)
                       CROSS JOIN LATERAL (SELECT p.queue FROM jobq.permission p
                                            WHERE p.role OPERATOR(pg_catalog.=) r.oid
                                              AND p.queue OPERATOR(pg_catalog.>) w.queue
                                            ORDER BY p.queue LIMIT 1) m)
           END,
           COALESCE(n.parent_id, 0)
      FROM walk w
      LEFT JOIN LATERAL (SELECT d.parent_id FROM jobq.dependency d
                          WHERE (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.>)
                                (w.queue, w.id)
                            AND (d.parent_queue, d.parent_id) OPERATOR(pg_catalog.<=)
                                (w.queue, 9223372036854775807::bigint)
                          ORDER BY d.parent_queue, d.parent_id LIMIT 1) n ON true
     WHERE w.queue IS NOT NULL
)
SELECT r.job_id AS root, r.queue, r.kind, r.created_at,
       s.total, s.blocked, s.pending, s.running, s.completed, s.failed, s.cancelled,
       s.can_finish
  FROM walk w
 CROSS JOIN LATERAL (SELECT j.job_id, j.queue, j.kind, j.created_at
                       FROM jobq.job j
                      WHERE j.job_id OPERATOR(pg_catalog.=) w.id
                        AND j.queue OPERATOR(pg_catalog.=) w.queue
                        AND (SELECT t.job_id FROM jobq.dependent t
                              WHERE t.job_id OPERATOR(pg_catalog.=) w.id) IS NULL
                     OFFSET 0) r
 CROSS JOIN LATERAL jobq.workflow_status(r.job_id) s
 WHERE w.id OPERATOR(pg_catalog.<>) 0
   AND jobq.may_use_queue(w.queue);
