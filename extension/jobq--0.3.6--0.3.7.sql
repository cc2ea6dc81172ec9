\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.7'" to load this file. \quit

/*
 * extension/jobq--0.3.6--0.3.7.sql -- upgrade from release 0.3.6 to 0.3.7
 *
 * What 0.3.7 changes in a 0.3.6 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here:
 * jobq.usable_queue, jobq.queue_stats and jobq.kind_stats are replaced in
 * place, which keeps their grants.
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
CREATE INDEX job_blocked_idx ON jobq.job (queue)
    WHERE status OPERATOR(pg_catalog.=) 'blocked';
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
      JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) a.job_id
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

-- Every queue, for a role that may use all, counted as a few
-- (extension/schema/80_views.sql).
CREATE OR REPLACE VIEW jobq.usable_queue WITH (security_barrier) AS
SELECT q.*
  FROM (SELECT * FROM jobq.queue q
         WHERE jobq.may_use_queue('*')
           AND q.created_at OPERATOR(pg_catalog.>=) (SELECT '-infinity'::timestamptz)
           AND q.created_at OPERATOR(pg_catalog.<=) (SELECT 'infinity'::timestamptz)
         LIMIT (SELECT 9223372036854775807)) q
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
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS completed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'completed'
                        AND j.finished_at IS NOT NULL) fc ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS cancelled
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'cancelled'
                        AND j.finished_at IS NOT NULL) fx ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS blocked
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'blocked') fb ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS completed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'completed'
                        AND j.finished_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)) hc ON true
  LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS failed
                       FROM jobq.job j
                      WHERE j.queue OPERATOR(pg_catalog.=) q.name
                        AND j.status OPERATOR(pg_catalog.=) 'failed'
                        AND j.finished_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)) hf ON true;
