\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.7'" to load this file. \quit

/*
 * extension/jobq--0.3.6--0.3.7.sql -- upgrade from release 0.3.6 to 0.3.7
 *
 * What 0.3.7 changes in a 0.3.6 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here:
 * jobq.granted_queue, jobq.usable_queue, jobq.queue_stats and
 * jobq.kind_stats are replaced in place, which keeps their grants.
 *
 * jobq.job is locked first, in ACCESS EXCLUSIVE mode (dropping one of its
 * indexes needs it), until the update commits: every statement that reads
 * or writes a job waits for the update, which builds two indexes of
 * jobq.job and one of jobq.attempt and fills a column of jobq.attempt (a
 * few seconds per million jobs kept).
 */

/* ---------------------------------------------------------------------
 * Locks
 * ------------------------------------------------------------------- */

-- jobq.job before anything else: a worker that holds a job while it waits
-- for another table this update locks would otherwise deadlock with it.
LOCK TABLE jobq.job IN ACCESS EXCLUSIVE MODE;

/* ---------------------------------------------------------------------
 * Tables
 * ------------------------------------------------------------------- */

-- An attempt names its job's queue, so that jobq.kind_stats reads the
-- failures of the querying role's queues only.  The failed attempts and
-- expired leases there are given their job's queue; cancels and edits, and
-- an attempt whose job is gone, keep NULL.
ALTER TABLE jobq.attempt ADD COLUMN queue text COLLATE "C";
UPDATE jobq.attempt a SET queue = j.queue FROM jobq.job j
 WHERE j.job_id = a.job_id AND a.outcome NOT IN ('cancelled', 'edited');
COMMENT ON COLUMN jobq.attempt.queue IS
    'the job''s queue, for an attempt that ended otherwise than by a cancel or an edit (0.3.7 on; NULL for those): jobq.kind_stats reads a queue''s failures';

/* ---------------------------------------------------------------------
 * Indexes
 * ------------------------------------------------------------------- */

-- The finished jobs per queue and status, in place of job_finished_idx
-- (by finish time alone): pruning and the counts of finished jobs read a
-- queue's own.
DROP INDEX jobq.job_finished_idx;
CREATE INDEX job_finished_queue_idx ON jobq.job (queue, status, finished_at)
    WHERE finished_at IS NOT NULL;
COMMENT ON INDEX jobq.job_finished_queue_idx IS
    'finished jobs per queue and status by finish time, for pruning and the counts of finished jobs';

-- The jobs waiting for their parents, per queue.
CREATE INDEX job_blocked_idx ON jobq.job (queue, job_id)
    WITH (deduplicate_items = off)
    WHERE status OPERATOR(pg_catalog.=) 'blocked' AND finished_at IS NULL;
COMMENT ON INDEX jobq.job_blocked_idx IS 'jobs waiting for their parents, per queue, for queue_stats';

-- Failed attempts and expired leases per queue by time, for
-- jobq.kind_stats.
CREATE INDEX attempt_failure_idx ON jobq.attempt (queue, finished_at)
    WHERE outcome OPERATOR(pg_catalog.=) ANY ('{failed,lease expired}'::text[]);
COMMENT ON INDEX jobq.attempt_failure_idx IS
    'failed attempts and expired leases per queue by time, for kind_stats';

/* ---------------------------------------------------------------------
 * Functions
 * ------------------------------------------------------------------- */

-- Per queue the role may use, from job_finished_queue_idx and
-- attempt_failure_idx (extension/schema/70_ops.sql).
CREATE OR REPLACE FUNCTION jobq.kind_stats(period interval DEFAULT '1 hour', queue text DEFAULT NULL)
RETURNS TABLE (kind text, completed bigint, failed bigint, failure_rate numeric,
               failed_attempts bigint, lease_expired bigint, retries bigint,
               mean_duration interval, p95_duration interval, max_duration interval)
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    IF kind_stats.period IS NULL THEN
        RAISE EXCEPTION 'period must not be null' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF kind_stats.period OPERATOR(pg_catalog.<) '0'::interval THEN
        RAISE EXCEPTION 'period must not be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF kind_stats.period OPERATOR(pg_catalog.>) '1000 years'::interval THEN
        RAISE EXCEPTION 'period is out of range'
            USING ERRCODE = 'datetime_field_overflow',
                  DETAIL = pg_catalog.format('The period given was %s; the longest jobq accepts is 1000 years.',
                                             kind_stats.period),
                  HINT = 'Use an interval from 0 up to 1000 years.';
    END IF;
    RETURN QUERY
WITH w AS (
    SELECT pg_catalog.now() OPERATOR(pg_catalog.-) kind_stats.period AS since
), qs AS (
    -- the queue asked about, or every queue the role may use
    SELECT q.name
      FROM jobq.queue q
     WHERE kind_stats.queue IS NOT NULL
       AND q.name OPERATOR(pg_catalog.=) kind_stats.queue
       AND jobq.may_use_queue(q.name)
    UNION ALL
    SELECT u.name
      FROM jobq.usable_queue u
     WHERE kind_stats.queue IS NULL
), ev AS (
    -- jobs that finished in the window, completed or failed for good: per
    -- queue and status from job_finished_queue_idx, so a role's read costs
    -- its own queues' jobs (0.3.7 on)
    SELECT j.kind, 'job' AS src, j.status AS what, false AS retried,
           j.finished_at OPERATOR(pg_catalog.-) j.claimed_at AS duration
      FROM qs
     CROSS JOIN w
     CROSS JOIN LATERAL (VALUES ('completed'::text), ('failed'::text)) s(status)
     CROSS JOIN LATERAL (SELECT j.kind, j.status, j.finished_at, j.claimed_at
                           FROM jobq.job j
                          WHERE j.queue OPERATOR(pg_catalog.=) qs.name
                            AND j.status OPERATOR(pg_catalog.=) s.status
                            AND j.finished_at OPERATOR(pg_catalog.>=) w.since
                         OFFSET 0) j
    UNION ALL
    -- attempts that ended in a failure or an expired lease in the window,
    -- per queue from attempt_failure_idx (0.3.7 on); retried unless it was
    -- the last attempt of a job that is failed now
    SELECT j.kind, 'attempt', a.outcome,
           NOT (j.status OPERATOR(pg_catalog.=) 'failed'
                AND j.attempts OPERATOR(pg_catalog.=) a.attempt),
           NULL::interval
      FROM qs
     CROSS JOIN w
     CROSS JOIN LATERAL (SELECT a.job_id, a.attempt, a.outcome
                           FROM jobq.attempt a
                          WHERE a.queue OPERATOR(pg_catalog.=) qs.name
                            AND a.outcome OPERATOR(pg_catalog.=) ANY ('{failed,lease expired}'::text[])
                            AND a.finished_at OPERATOR(pg_catalog.>=) w.since
                         OFFSET 0) a
     -- each attempt's job by its key: estimated from the statistics, a
     -- queue's attempts are the average queue's, and where another tenant
     -- keeps most of them a join would be planned as a read of every job
     CROSS JOIN LATERAL (SELECT j.kind, j.status, j.attempts
                           FROM jobq.job j
                          WHERE j.job_id OPERATOR(pg_catalog.=) a.job_id
                         OFFSET 0) j
)
SELECT ev.kind,
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'
                                     AND ev.what OPERATOR(pg_catalog.=) 'completed'),
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'
                                     AND ev.what OPERATOR(pg_catalog.=) 'failed'),
       pg_catalog.round(pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'
                                                      AND ev.what OPERATOR(pg_catalog.=) 'failed')::numeric
                        OPERATOR(pg_catalog./)
                        NULLIF(pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'job'), 0), 3),
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'attempt'),
       pg_catalog.count(*) FILTER (WHERE ev.src OPERATOR(pg_catalog.=) 'attempt'
                                     AND ev.what OPERATOR(pg_catalog.=) 'lease expired'),
       pg_catalog.count(*) FILTER (WHERE ev.retried),
       pg_catalog.avg(ev.duration) FILTER (WHERE ev.what OPERATOR(pg_catalog.=) 'completed'),
       pg_catalog.percentile_cont(0.95::double precision) WITHIN GROUP (ORDER BY ev.duration)
           FILTER (WHERE ev.what OPERATOR(pg_catalog.=) 'completed'),
       pg_catalog.max(ev.duration) FILTER (WHERE ev.what OPERATOR(pg_catalog.=) 'completed')
  FROM ev
 GROUP BY ev.kind
 ORDER BY ev.kind;
END
$$;

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

-- The queues a role may use, counted by the planner as a few
-- (extension/schema/80_views.sql).
CREATE OR REPLACE VIEW jobq.granted_queue WITH (security_barrier) AS
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

CREATE OR REPLACE VIEW jobq.usable_queue WITH (security_barrier) AS
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

-- Every count per queue, by an index of that queue's jobs
-- (extension/schema/80_views.sql).
CREATE OR REPLACE VIEW jobq.queue_stats WITH (security_barrier) AS
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
