\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.1'" to load this file. \quit

/*
 * extension/jobq--0.3.0--0.3.1.sql -- upgrade from release 0.3.0 to 0.3.1
 *
 * What 0.3.1 changes in a 0.3.0 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here:
 * a view replaced in place keeps its grants.
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
 * Views
 * ------------------------------------------------------------------- */

-- jobq.queue_stats: the totals over every kept job (completed, cancelled,
-- blocked; the last hour) are joined on q.name || '', so that a query
-- filtered by queue that does not read them does not scan jobq.job twice
-- on PostgreSQL 17 and 18 (extension/schema/80_views.sql says why)
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
  FROM jobq.queue q
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
              GROUP BY j.queue) h ON h.queue OPERATOR(pg_catalog.=) (q.name OPERATOR(pg_catalog.||) '')
 WHERE jobq.may_use_queue(q.name);
