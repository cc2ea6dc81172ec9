/*
 * extension/schema/80_views.sql -- the views
 *
 * What roles read.  Views over jobq's tables are security_barrier views
 * that show only the queues the querying role may use
 * (jobq.may_use_queue); the others read a function that filters the same
 * way, or show jobq's own processes.
 */

/* ---------------------------------------------------------------------
 * Jobs
 * ------------------------------------------------------------------- */

CREATE VIEW jobq.jobs WITH (security_barrier) AS
SELECT j.job_id, j.queue, j.kind, j.payload, j.priority, j.status,
       j.retry_count, j.max_retries, j.idempotency_key, j.run_at,
       j.claimed_at, j.worker_id, j.lease_expires_at, j.last_error,
       j.result, j.checkpoint, j.created_at, j.updated_at, j.finished_at,
       j.attempts, j.concurrency_key
  FROM jobq.job j
 WHERE jobq.may_use_queue(j.queue);
COMMENT ON VIEW jobq.jobs IS 'one row per job';

CREATE VIEW jobq.dead_letter WITH (security_barrier) AS
SELECT j.job_id, j.queue, j.kind, j.payload, j.priority, j.status,
       j.retry_count, j.max_retries, j.idempotency_key, j.run_at,
       j.claimed_at, j.worker_id, j.lease_expires_at, j.last_error,
       j.result, j.checkpoint, j.created_at, j.updated_at, j.finished_at,
       j.attempts, j.concurrency_key
  FROM jobq.job j
 WHERE j.status OPERATOR(pg_catalog.=) 'failed'
   AND jobq.may_use_queue(j.queue);
COMMENT ON VIEW jobq.dead_letter IS 'failed jobs: retries spent, not retryable, or lease expired too often';

/* ---------------------------------------------------------------------
 * Queues
 * ------------------------------------------------------------------- */

-- The names of the queues the querying role may use through capabilities
-- on them, for a role that may not use every queue (for one that may:
-- nothing).  A role's read costs its own queues, each found by one descent
-- of an index, not every queue of the database (0.3.5 asked
-- jobq.may_use_queue of each: 200,000 buffers beside another tenant's
-- 20,000 queues), whatever the statistics say.
--
-- asker is the role jobq.may_use_queue asks about, as SQL sees it: the
-- current user, or, where that is a superuser or jobq's owner (inside a
-- SECURITY DEFINER function of theirs), the role of the job handler running
-- (jobq.handler_role) or else the role the session acts as; roles are the
-- roles whose privileges it has (its memberships, from pg_auth_members by
-- member, and pg_database_owner for the database's owner, that pg_has_role
-- grants).  walk goes through their capabilities role by role, each step
-- the next queue of the role (permission_role_idx); a queue an earlier role
-- holds too is left out.  Where the asker is a superuser all the same and
-- may not use every queue (which jobq.may_use_queue, asking about another
-- role, would say), every queue is walked in name order instead.  Both are
-- walks from one row, so the planner's estimate stays small, and
-- jobq.may_use_queue has the last word on each queue.  Granted to no one:
-- the views read it with their owner's rights.
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
), every(name, i) AS (
    SELECT (SELECT q.name FROM jobq.queue q ORDER BY q.name LIMIT 1), 1
     WHERE NOT jobq.may_use_queue('*') AND (SELECT a.super FROM asker a)
  UNION ALL
    SELECT (SELECT q.name FROM jobq.queue q
             WHERE q.name OPERATOR(pg_catalog.>) e.name
             ORDER BY q.name LIMIT 1), e.i OPERATOR(pg_catalog.+) 1
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
   -- every step, in a range the planner cannot read: it counts a queue or
   -- two, not dozens (0.3.7; see jobq.usable_queue)
   AND w.i OPERATOR(pg_catalog.>=) (SELECT 0)
   AND w.i OPERATOR(pg_catalog.<=) (SELECT 2147483647)
UNION ALL
SELECT e.name
  FROM every e
 WHERE e.name IS NOT NULL
   AND jobq.may_use_queue(e.name)
   AND e.i OPERATOR(pg_catalog.>=) (SELECT 0)
   AND e.i OPERATOR(pg_catalog.<=) (SELECT 2147483647);
COMMENT ON VIEW jobq.granted_queue IS
    'the names of the queues the querying role may use, for a role that may not use every queue (for jobq''s views; granted to no one)';

-- The rows of jobq.queue the querying role may use, for the views below:
-- every queue for a role that may use all (a superuser, the owner, a
-- capability on '*'), else those of jobq.granted_queue, each looked up by
-- name.  The first branch holds ranges of created_at and updated_at that
-- hold every queue but whose bounds the planner cannot read (it counts a
-- range of unknown bounds as a two-hundredth of the rows), and
-- jobq.granted_queue the same of its steps: the planner counts a queue or
-- two, so that a tenant's jobq.queue_stats, which never reads the first
-- branch's rows, is not planned as a read of every queue, nor its few
-- queues as dozens, and compiled with JIT (0.3.5: 200 ms beside 20,000
-- queues).  0.3.6 had a LIMIT the planner could not read in
-- the first branch, which also kept a query's filter on the queue out of
-- it (a superuser's WHERE queue = 'x' read every queue).  Granted to no
-- one.
CREATE VIEW jobq.usable_queue WITH (security_barrier) AS
SELECT q.*
  FROM jobq.queue q
 WHERE jobq.may_use_queue('*')
   AND q.created_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
   AND q.created_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)
   AND q.updated_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
   AND q.updated_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)
UNION ALL
SELECT q.*
  FROM jobq.granted_queue g
 CROSS JOIN LATERAL (SELECT * FROM jobq.queue q
                      WHERE q.name OPERATOR(pg_catalog.=) g.name OFFSET 0) q;
COMMENT ON VIEW jobq.usable_queue IS
    'the queues the querying role may use (for jobq''s views; granted to no one)';

CREATE VIEW jobq.queues WITH (security_barrier) AS
SELECT q.name AS queue, q.paused,
       q.max_retries, q.lease, q.backoff_base, q.backoff_cap, q.backoff_jitter,
       q.retention_completed, q.retention_failed,
       q.max_concurrency, q.max_per_key, q.rate_limit, q.rate_period,
       q.breaker_threshold, q.breaker_state, q.breaker_failures,
       q.breaker_tripped_at, q.breaker_reason,
       q.created_at, q.updated_at
  FROM jobq.usable_queue q;
COMMENT ON VIEW jobq.queues IS
    'one row per queue: every setting of jobq.configure, paused, and the circuit breaker''s state';

-- Each column is counted where it is cheapest, per queue, by an index of
-- that queue's jobs: pending (ready and delayed) from jobq.ready and
-- jobq.scheduled, which hold one row per pending job with its run_at;
-- running from the index of running leases; failed, completed, cancelled
-- and the last hour from job_finished_queue_idx (queue, status, finish
-- time; 0.3.7 on); blocked from job_blocked_idx.  So a
-- role's read costs its own queues' jobs, never another tenant's kept jobs
-- (until 0.3.7 completed, cancelled and blocked read every kept job of the
-- database, and the last hour every queue's).  Each count a query may leave
-- out is a LEFT JOIN LATERAL of one aggregate: the planner drops the join
-- of a column nobody reads, so a query that selects none of them does not
-- pay for it.  Each count holds a range of the column of its index next
-- to the queue, which holds every row but whose bounds the planner cannot
-- read (a two-hundredth of the rows, to the planner): estimated from the
-- statistics, a count of one tenant's queue is the average queue's, and
-- where another tenant keeps most of the jobs that is most of them, which
-- compiled a tenant's read with JIT (0.3.7's first version: 1,000,000 jobs
-- in another queue, 850 ms of JIT for a read of 10 jobs) or read the whole
-- table instead of the queue's part of the index (its second version,
-- whose range of the ready jobs was not next to the queue in their index:
-- 850,000 ready jobs of another queue, 8,400 buffers and JIT).  The failed
-- count reads the failed jobs by finish time, whose index has that column
-- next to the queue and status.
CREATE VIEW jobq.queue_stats WITH (security_barrier) AS
SELECT q.name AS queue,
       r.ready OPERATOR(pg_catalog.+) s.due OPERATOR(pg_catalog.+) s.later AS pending,
       x.running,
       fc.completed,
       d.failed,
       fx.cancelled,
       -- a job made ready after this transaction's now() (another session's,
       -- under READ COMMITTED) has waited 0, not a negative time
       CASE WHEN r.oldest IS NOT NULL OR s.oldest_due IS NOT NULL
            THEN pg_catalog.now() OPERATOR(pg_catalog.-) LEAST(r.oldest, s.oldest_due, pg_catalog.now())
       END AS oldest_pending_age,
       q.paused,
       r.ready OPERATOR(pg_catalog.+) s.due AS ready,
       s.later AS delayed,
       hc.completed AS completed_last_hour,
       hf.failed AS failed_last_hour,
       q.breaker_state,
       q.max_concurrency, q.max_per_key, q.rate_limit, q.rate_period,
       q.breaker_threshold,
       fb.blocked
  FROM jobq.usable_queue q
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS ready, pg_catalog.min(r.run_at) AS oldest
                       FROM jobq.ready r
                      WHERE r.queue OPERATOR(pg_catalog.=) q.name
                        AND r.neg_priority OPERATOR(pg_catalog.>=) (SELECT -2147483648)
                        AND r.neg_priority OPERATOR(pg_catalog.<=) (SELECT 2147483647)) r
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) FILTER (WHERE s.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS due,
                            pg_catalog.count(*) FILTER (WHERE s.run_at OPERATOR(pg_catalog.>) pg_catalog.now()) AS later,
                            pg_catalog.min(s.run_at) FILTER (WHERE s.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()) AS oldest_due
                       FROM jobq.scheduled s
                      WHERE s.queue OPERATOR(pg_catalog.=) q.name
                        AND s.run_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
                        AND s.run_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)) s
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS running
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.lease_expires_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
                        AND j.lease_expires_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)) x
 CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS failed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'failed'
                        AND j.finished_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
                        AND j.finished_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)) d
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS completed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'completed'
                        AND j.finished_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
                        AND j.finished_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)) fc ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS cancelled
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'cancelled'
                        AND j.finished_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
                        AND j.finished_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)) fx ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS blocked
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'blocked'
                        AND j.finished_at IS NULL
                        AND j.job_id OPERATOR(pg_catalog.>=) (SELECT '-9223372036854775808'::bigint)
                        AND j.job_id OPERATOR(pg_catalog.<=) (SELECT 9223372036854775807::bigint)) fb ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS completed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'completed'
                        AND j.finished_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)
                        AND j.finished_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)) hc ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS failed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'failed'
                        AND j.finished_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)
                        AND j.finished_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)) hf ON true;
COMMENT ON VIEW jobq.queue_stats IS
    'per queue: jobs by status, age of the oldest due pending job, paused; ready and delayed split pending; completed and failed in the last hour; breaker state and limits; blocked jobs waiting for their parents';

/* ---------------------------------------------------------------------
 * Kinds
 * ------------------------------------------------------------------- */

CREATE VIEW jobq.kind_stats AS
SELECT s.kind, s.completed, s.failed, s.failure_rate, s.failed_attempts,
       s.lease_expired, s.retries, s.mean_duration, s.p95_duration, s.max_duration
  FROM jobq.kind_stats() s;
COMMENT ON VIEW jobq.kind_stats IS 'jobq.kind_stats() over the last hour, every queue';

/* ---------------------------------------------------------------------
 * Schedules, handlers, workers
 * ------------------------------------------------------------------- */

CREATE VIEW jobq.schedules WITH (security_barrier) AS
SELECT s.schedule_id, s.name, s.cron, s.timezone, s.misfire, s.kind, s.queue,
       s.priority, s.payload, s.paused, s.next_fire_at, s.last_fire_at,
       s.last_job_id, j.status AS last_job_status, s.created_at, s.updated_at
  FROM jobq.schedule s
  LEFT JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) s.last_job_id
 WHERE jobq.may_use_queue(s.queue);
COMMENT ON VIEW jobq.schedules IS
    'schedules with their next and last fire and the status of the last job fired';

CREATE VIEW jobq.handlers WITH (security_barrier) AS
SELECT h.kind, h.handler, h.queue, h.run_as::text AS run_as,
       h.allow_superuser, h.created_at, h.updated_at
  FROM jobq.handler h
 WHERE jobq.may_use_queue(h.queue);
COMMENT ON VIEW jobq.handlers IS 'registered job handlers';

CREATE VIEW jobq.workers AS
SELECT w.pid, w.database, w.role, w.started_at, w.last_run_at, w.reaped, w.pruned, w.fired
  FROM jobq.worker_status() w;
COMMENT ON VIEW jobq.workers IS
    'jobq background workers: which database each serves and when it last did its work';

CREATE VIEW jobq.service AS SELECT * FROM jobq.service_status();
COMMENT ON VIEW jobq.service IS
    'how this database is served: own worker, shared pool or none; when last served, when next due, how long past due';

CREATE VIEW jobq.app_workers AS SELECT * FROM jobq.app_worker_rows();
COMMENT ON VIEW jobq.app_workers IS
    'the application''s workers of the queues the caller may use: their queues, what they said of themselves, when they started and were last seen, the jobs they hold now, and whether they are gone (not seen for jobq.worker_gone_after)';

/* ---------------------------------------------------------------------
 * Workflows
 * ------------------------------------------------------------------- */

-- The roots, queue by queue: for a role that may use every queue, the
-- queues that have parents (a loose scan of jobq.dependency's index by
-- queue and parent, one descent each); else the queues it may use
-- (jobq.granted_queue: its own, one descent each).  In each queue a walk
-- over its parents (the last found, 0 when none yet), one descent of that
-- index per parent, each parent kept that is no one's child (no row in
-- jobq.dependent) and is kept.  So a tenant's read costs its own queues and
-- their parents, whatever other tenants keep (until 0.3.5 it walked every
-- parent of the database; 0.3.5 carried the list of the role's queues in
-- every row of one walk, which for 20,000 queues wrote 4 GB of temporary
-- files, and stepped from queue to queue by every role the caller is a
-- member of).  Every step is a probe whatever the statistics say: the next
-- parent is the least (queue, parent) above the last one and not past the
-- queue, an order and bounds only that index gives, so no plan can read the
-- primary key or the whole table for it, and the scan stops at the queue's
-- last edge (not in the next queue's entries, dead or uncommitted); the
-- child test and the job are primary-key look-ups; LIMIT and OFFSET keep
-- the planner from turning the subqueries into joins.  The walks start from
-- one row, so the planner's estimate stays small (one start row per queue
-- of jobq.queue made it estimate 17 million rows and compile the read with
-- JIT, 200 ms on a stock server; the parents are ids above 0, which the
-- planner counts as a third of a walk, not all of it).
CREATE VIEW jobq.workflows WITH (security_barrier) AS
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
COMMENT ON VIEW jobq.workflows IS
    'one row per workflow root still kept (a job with dependents and no parents): its jobs by status and can_finish';
