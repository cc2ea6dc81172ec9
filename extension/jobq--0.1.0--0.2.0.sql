/*
 * extension/jobq--0.1.0--0.2.0.sql -- upgrade from release 0.1.0 to 0.2.0
 *
 * Every schema change of 0.2.0 goes here, appended in the order it is made.
 * A fresh CREATE EXTENSION jobq runs jobq--0.1.0.sql and then this script,
 * so what is written here is what every 0.2.0 database has.
 */

\echo Use "ALTER EXTENSION jobq UPDATE TO '0.2.0'" to load this file. \quit

/* ---------------------------------------------------------------------
 * Issue 15 items 3 and 9: jit off for jobq's SQL and PL/pgSQL functions;
 * kind_stats checks that its period can be computed.
 *
 * With the default jit = on, a statement whose plan costs more than
 * jit_above_cost is JIT-compiled at every execution, which takes tens to
 * hundreds of milliseconds; jobq's statements read few rows and never gain
 * from it.  The C functions turn jit off around their statements
 * (src/spi_plan.c); the SQL and PL/pgSQL functions get SET jit = off.  None
 * of them could be inlined before (SECURITY DEFINER, PL/pgSQL), so the SET
 * costs no inlining.  A later CREATE OR REPLACE of one of these functions
 * must repeat SET jit = off: it replaces the function's settings.
 * ------------------------------------------------------------------- */

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
                  DETAIL = pg_catalog.format('period was %s; the longest jobq accepts is 1000 years.',
                                             kind_stats.period),
                  HINT = 'Use an interval from 0 up to 1000 years.';
    END IF;
    RETURN QUERY
WITH w AS (
    SELECT pg_catalog.now() OPERATOR(pg_catalog.-) kind_stats.period AS since
), ev AS (
    -- jobs that finished in the window, completed or failed for good
    SELECT j.kind, 'job' AS src, j.status AS what, false AS retried,
           j.finished_at OPERATOR(pg_catalog.-) j.claimed_at AS duration
      FROM jobq.job j, w
     WHERE j.finished_at OPERATOR(pg_catalog.>=) w.since
       AND j.status OPERATOR(pg_catalog.=) ANY (ARRAY['completed', 'failed']::text[])
       AND (kind_stats.queue IS NULL OR j.queue OPERATOR(pg_catalog.=) kind_stats.queue)
       AND jobq.may_use_queue(j.queue)
    UNION ALL
    -- attempts that ended in a failure or an expired lease in the window;
    -- retried unless it was the last attempt of a job that is failed now
    SELECT j.kind, 'attempt', a.outcome,
           NOT (j.status OPERATOR(pg_catalog.=) 'failed'
                AND j.attempts OPERATOR(pg_catalog.=) a.attempt),
           NULL::interval
      FROM jobq.attempt a
      JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) a.job_id, w
     WHERE a.finished_at OPERATOR(pg_catalog.>=) w.since
       AND a.outcome OPERATOR(pg_catalog.=) ANY (ARRAY['failed', 'lease expired']::text[])
       AND (kind_stats.queue IS NULL OR j.queue OPERATOR(pg_catalog.=) kind_stats.queue)
       AND jobq.may_use_queue(j.queue)
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

ALTER FUNCTION jobq.job(bigint) SET jit = off;
ALTER FUNCTION jobq.job_by_key(text, text) SET jit = off;
ALTER FUNCTION jobq.health(interval, interval, interval) SET jit = off;
