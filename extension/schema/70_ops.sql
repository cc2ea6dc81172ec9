/*
 * extension/schema/70_ops.sql -- a job's story, statistics, health
 *
 * Plain SQL and PL/pgSQL over jobq's tables and the statistics views, for
 * people (psql, the bin/jobq command-line tool, the dashboard) and for
 * monitoring.  Nothing here changes a job.  The functions are SECURITY
 * DEFINER with search_path pinned to pg_catalog, pg_temp, and show only
 * queues the calling role may use (jobq.may_use_queue).  They run with
 * jit = off: their statements read few rows, and a plan whose cost passes
 * jit_above_cost would be JIT-compiled at every call (tens to hundreds of
 * milliseconds).  CREATE OR REPLACE of one of them must repeat every SET:
 * it replaces the function's settings.
 */

/* ---------------------------------------------------------------------
 * One job's story
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.job(job_id bigint)
RETURNS TABLE (attempt integer, outcome text, worker_id text,
               started_at timestamptz, finished_at timestamptz, duration interval,
               error text, lease_expires_at timestamptz, result jsonb)
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT x.attempt, x.outcome, x.worker_id, x.started_at, x.finished_at, x.duration,
       x.error, x.lease_expires_at, x.result FROM (
SELECT a.attempt, a.outcome, a.worker_id, a.started_at, a.finished_at,
       a.finished_at OPERATOR(pg_catalog.-) a.started_at AS duration,
       a.error, NULL::timestamptz AS lease_expires_at, NULL::jsonb AS result,
       COALESCE(a.started_at, a.finished_at) AS at
  FROM jobq.attempt a
 WHERE a.job_id OPERATOR(pg_catalog.=) $1
UNION ALL
SELECT j.attempts, j.status, j.worker_id, j.claimed_at, j.finished_at,
       COALESCE(j.finished_at, GREATEST(pg_catalog.now(), j.claimed_at))
           OPERATOR(pg_catalog.-) j.claimed_at,
       NULL::text, j.lease_expires_at, j.result, j.claimed_at
  FROM jobq.job j
 WHERE j.job_id OPERATOR(pg_catalog.=) $1
   AND j.status OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'completed']::text[])
) x
 WHERE jobq.may_use_queue((SELECT j.queue FROM jobq.job j WHERE j.job_id OPERATOR(pg_catalog.=) $1))
 ORDER BY x.at, x.attempt
$$;
COMMENT ON FUNCTION jobq.job(bigint) IS
    'a job''s story in order: its attempts (failed, lease expired, cancelled ones from the history, then the running one with its lease, or the completed one with its result) and the edits of jobq.update_job';

CREATE FUNCTION jobq.job_by_key(kind text, idempotency_key text)
RETURNS TABLE (job_id bigint, queue text, kind text, payload jsonb, priority integer,
               status text, retry_count integer, max_retries integer,
               idempotency_key text, run_at timestamptz, claimed_at timestamptz,
               worker_id text, lease_expires_at timestamptz, last_error text,
               result jsonb, checkpoint jsonb, created_at timestamptz,
               updated_at timestamptz, finished_at timestamptz, attempts integer,
               concurrency_key text, key_expires_at timestamptz)
LANGUAGE sql STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
SELECT k.job_id, j.queue, k.kind, j.payload, j.priority, j.status,
       j.retry_count, j.max_retries, k.key, j.run_at, j.claimed_at,
       j.worker_id, j.lease_expires_at, j.last_error, j.result, j.checkpoint,
       j.created_at, j.updated_at, j.finished_at, j.attempts,
       j.concurrency_key, k.expires_at
  FROM jobq.idempotency_key k
  LEFT JOIN jobq.job j ON j.job_id OPERATOR(pg_catalog.=) k.job_id
 WHERE k.kind OPERATOR(pg_catalog.=) $1
   AND k.key OPERATOR(pg_catalog.=) $2
   AND jobq.may_use_queue(COALESCE(j.queue, '*'))
$$;
COMMENT ON FUNCTION jobq.job_by_key(text, text) IS
    'the job holding an idempotency key, as in jobq.jobs; a job already pruned whose key is still reserved has only job_id, kind, idempotency_key and key_expires_at';

/* ---------------------------------------------------------------------
 * Kinds
 * ------------------------------------------------------------------- */

CREATE FUNCTION jobq.kind_stats(period interval DEFAULT '1 hour', queue text DEFAULT NULL)
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
COMMENT ON FUNCTION jobq.kind_stats(interval, text) IS
    'per kind over the last period (of one queue, or all): jobs completed and failed for good, failure rate, failed attempts, expired leases, retries, and mean, 95th percentile and longest run time of completed jobs';

/* ---------------------------------------------------------------------
 * Health
 * ------------------------------------------------------------------- */

/*
 * One row per check, always in this order:
 *
 *   worker             a jobq worker serves this database and ran recently
 *   expired_leases     running jobs whose lease expired more than grace ago
 *   overdue_schedules  unpaused schedules due more than grace ago
 *   oldest_pending     the oldest due job of an unpaused queue, vs threshold
 *   circuit_breakers   queues whose breaker is open, throttled or half open
 *   dead_tuples        dead rows vacuum has not removed from jobq's tables
 *   table_bloat        jobq's tables and indexes far larger than their rows
 *   xmin_horizon       a transaction, prepared transaction or replication
 *                      slot holding back what vacuum may remove
 *   service            the database's own worker or the shared pool serves
 *                      it on time
 *
 * Ages are measured with clock_timestamp(), so a check inside a long
 * transaction still sees the time pass.  Every threshold is at most 1000
 * years (as every interval argument of jobq), so that it can be subtracted
 * from a timestamp.
 */
CREATE FUNCTION jobq.health(oldest_pending_threshold interval DEFAULT '5 minutes',
                            grace interval DEFAULT '1 minute',
                            xmin_threshold interval DEFAULT '10 minutes')
RETURNS TABLE (check_name text, status text, detail text, hint text)
LANGUAGE plpgsql VOLATILE PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET intervalstyle = postgres    -- the texts read the same whatever the caller's style
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    t          timestamptz := pg_catalog.clock_timestamp();
    naptime    interval;
    stale      interval;
    preload    text;
    dbs        text;
    w          record;
    n          bigint;
    oldest     timestamptz;
    oldest_id  bigint;
    most       bigint;
    list       text;
    sv         record;
BEGIN
    -- it reports on every queue: only for those who administer every queue
    IF NOT jobq.may('*', 'administer') THEN
        RAISE EXCEPTION 'permission denied to read the health of every queue'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Only roles with the administer capability on ''*'' may call jobq.health().';
    END IF;
    IF oldest_pending_threshold IS NULL OR grace IS NULL OR xmin_threshold IS NULL THEN
        RAISE EXCEPTION '% must not be null',
            CASE WHEN oldest_pending_threshold IS NULL THEN 'oldest_pending_threshold'
                 WHEN grace IS NULL THEN 'grace' ELSE 'xmin_threshold' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF oldest_pending_threshold OPERATOR(pg_catalog.<) '0'::interval
       OR grace OPERATOR(pg_catalog.<) '0'::interval
       OR xmin_threshold OPERATOR(pg_catalog.<) '0'::interval THEN
        RAISE EXCEPTION '% must not be negative',
            CASE WHEN oldest_pending_threshold OPERATOR(pg_catalog.<) '0'::interval
                 THEN 'oldest_pending_threshold'
                 WHEN grace OPERATOR(pg_catalog.<) '0'::interval THEN 'grace'
                 ELSE 'xmin_threshold' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF oldest_pending_threshold OPERATOR(pg_catalog.>) '1000 years'::interval
       OR grace OPERATOR(pg_catalog.>) '1000 years'::interval
       OR xmin_threshold OPERATOR(pg_catalog.>) '1000 years'::interval THEN
        list := CASE WHEN oldest_pending_threshold OPERATOR(pg_catalog.>) '1000 years'::interval
                     THEN 'oldest_pending_threshold'
                     WHEN grace OPERATOR(pg_catalog.>) '1000 years'::interval THEN 'grace'
                     ELSE 'xmin_threshold' END;
        RAISE EXCEPTION '% is out of range', list
            USING ERRCODE = 'datetime_field_overflow',
                  DETAIL = pg_catalog.format('The %s given was %s; the longest jobq accepts is 1000 years.', list,
                                             CASE list WHEN 'grace' THEN grace
                                                       WHEN 'xmin_threshold' THEN xmin_threshold
                                                       ELSE oldest_pending_threshold END),
                  HINT = 'Use an interval from 0 up to 1000 years.';
    END IF;

    /* worker */
    check_name := 'worker';
    naptime := COALESCE(pg_catalog.current_setting('jobq.naptime', true), '1s')::interval;
    stale := GREATEST(grace, naptime OPERATOR(pg_catalog.*) 10::double precision);
    SELECT * INTO sv FROM jobq.service_status();
    SELECT wk.pid, wk.started_at, wk.last_run_at, wk.reaped, wk.pruned, wk.fired
      INTO w
      FROM jobq.workers wk
     WHERE wk.role OPERATOR(pg_catalog.=) 'worker'
       AND wk.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
     LIMIT 1;
    IF sv.served_by OPERATOR(pg_catalog.=) 'shared pool' THEN
        -- the pool's workers come and go: the service check judges the delay
        status := 'ok';
        detail := pg_catalog.format('served by the shared pool (databases outnumber jobq.max_workers); last served %s ago',
                                    COALESCE(pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) sv.last_served_at)::text,
                                             'never'));
        hint := NULL;
    ELSIF NOT FOUND THEN
        status := 'critical';
        detail := pg_catalog.format('no jobq worker is running for database %I',
                                    pg_catalog.current_database());
        SELECT s.setting INTO preload FROM pg_catalog.pg_settings s
         WHERE s.name OPERATOR(pg_catalog.=) 'shared_preload_libraries';
        dbs := pg_catalog.current_setting('jobq.databases', true);
        IF preload IS NOT NULL
           AND preload OPERATOR(pg_catalog.!~) '(^|[\s,"/])jobq("|\s|,|$)' THEN
            hint := 'Add jobq to shared_preload_libraries and restart the server; until then call jobq.reap(), jobq.run_schedules() and jobq.prune() yourself.';
        ELSIF COALESCE(dbs, '') OPERATOR(pg_catalog.<>) ''
              AND NOT pg_catalog.current_database() OPERATOR(pg_catalog.=) ANY
                  (pg_catalog.regexp_split_to_array(pg_catalog.btrim(dbs), '\s*,\s*')) THEN
            hint := 'This database is not listed in jobq.databases.';
        ELSE
            hint := 'The launcher starts a worker within seconds of CREATE EXTENSION; if none appears, look for jobq messages in the server log.';
        END IF;
    ELSIF COALESCE(w.last_run_at, w.started_at) OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) stale) THEN
        status := 'critical';
        detail := pg_catalog.format('jobq worker pid %s has not finished a round for %s',
                                    w.pid,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-)
                                                          COALESCE(w.last_run_at, w.started_at)));
        hint := 'It may be waiting on a lock: look at pg_stat_activity where backend_type = ''jobq worker''.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('jobq worker pid %s, up %s; since start: %s leases reaped, %s jobs pruned, %s schedule fires',
                                    w.pid,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) w.started_at),
                                    w.reaped, w.pruned, w.fired);
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* expired_leases */
    check_name := 'expired_leases';
    SELECT pg_catalog.count(*), pg_catalog.min(j.lease_expires_at)
      INTO n, oldest
      FROM jobq.job j
     WHERE j.status OPERATOR(pg_catalog.=) 'running'
       AND j.lease_expires_at OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) grace);
    IF n OPERATOR(pg_catalog.>) 0 THEN
        SELECT j.job_id INTO oldest_id
          FROM jobq.job j
         WHERE j.status OPERATOR(pg_catalog.=) 'running'
           AND j.lease_expires_at OPERATOR(pg_catalog.=) oldest
         LIMIT 1;
        status := 'critical';
        detail := pg_catalog.format('%s running jobs with a lease expired more than %s ago; the oldest, job %s, expired %s ago',
                                    n, grace, oldest_id,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) oldest));
        hint := 'The background worker reaps expired leases every jobq.naptime (see the worker check); SELECT jobq.reap() reaps them now.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no lease expired more than %s ago', grace);
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* overdue_schedules */
    check_name := 'overdue_schedules';
    SELECT pg_catalog.count(*), pg_catalog.min(s.next_fire_at),
           pg_catalog.string_agg(pg_catalog.quote_literal(s.name), ', ' ORDER BY s.next_fire_at, s.name)
      INTO n, oldest, list
      FROM jobq.schedule s
     WHERE NOT s.paused
       AND s.next_fire_at OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) grace);
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'critical';
        detail := pg_catalog.format('%s schedules due more than %s ago, the oldest due %s ago: %s',
                                    n, grace,
                                    pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) oldest),
                                    list);
        hint := 'Schedules fire from the background worker (see the worker check); SELECT jobq.run_schedules() fires them now.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no schedule due more than %s ago', grace);
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* oldest_pending: due jobs sit in jobq.ready, or in jobq.scheduled until a claim promotes them */
    check_name := 'oldest_pending';
    WITH due AS (
        SELECT r.queue, r.run_at FROM jobq.ready r
        UNION ALL
        SELECT s.queue, s.run_at FROM jobq.scheduled s
         WHERE s.run_at OPERATOR(pg_catalog.<=) t
    ), per_queue AS (
        SELECT d.queue, pg_catalog.min(d.run_at) AS oldest
          FROM due d
          JOIN jobq.queue q ON q.name OPERATOR(pg_catalog.=) d.queue
         WHERE NOT q.paused
           AND q.breaker_state OPERATOR(pg_catalog.<>) 'open'
         GROUP BY d.queue
    )
    SELECT pg_catalog.count(*) FILTER (WHERE p.oldest OPERATOR(pg_catalog.<)
                                       (t OPERATOR(pg_catalog.-) oldest_pending_threshold)),
           pg_catalog.min(p.oldest),
           pg_catalog.string_agg(pg_catalog.format('%s (%s)', pg_catalog.quote_literal(p.queue),
                                                   pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) p.oldest)),
                                 ', ' ORDER BY p.oldest, p.queue)
               FILTER (WHERE p.oldest OPERATOR(pg_catalog.<)
                       (t OPERATOR(pg_catalog.-) oldest_pending_threshold))
      INTO n, oldest, list
      FROM per_queue p;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := pg_catalog.format('%s queues have a due job waiting longer than %s: %s',
                                    n, oldest_pending_threshold, list);
        hint := 'Workers are not keeping up with these queues, or none are running; see jobq.queue_stats (running, limits) and jobq.kind_stats.';
    ELSE
        status := 'ok';
        detail := CASE WHEN oldest IS NULL
                       THEN 'no due job waiting in an unpaused queue'
                       ELSE pg_catalog.format('the oldest due job has waited %s (threshold %s)',
                                              pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) oldest),
                                              oldest_pending_threshold)
                  END;
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* circuit_breakers */
    check_name := 'circuit_breakers';
    SELECT pg_catalog.count(*) FILTER (WHERE q.breaker_state OPERATOR(pg_catalog.=) 'open'),
           pg_catalog.string_agg(pg_catalog.format('%s %s%s', pg_catalog.quote_literal(q.name),
                                                   q.breaker_state,
                                                   CASE WHEN q.breaker_reason IS NULL THEN ''
                                                        ELSE pg_catalog.format(' (%s)', q.breaker_reason) END),
                                 ', ' ORDER BY q.name)
      INTO n, list
      FROM jobq.queue q
     WHERE q.breaker_state OPERATOR(pg_catalog.<>) 'closed';
    IF list IS NULL THEN
        status := 'ok';
        detail := 'every circuit breaker is closed';
        hint := NULL;
    ELSE
        status := 'warning';
        detail := list;
        hint := CASE WHEN n OPERATOR(pg_catalog.>) 0
                     THEN 'An open breaker holds its queue''s jobs: fix the cause (see jobq.dead_letter and jobq.attempt), then SELECT jobq.resume(queue).'
                     ELSE 'The queue runs one job at a time until one succeeds.'
                END;
    END IF;
    RETURN NEXT;

    /* dead_tuples */
    check_name := 'dead_tuples';
    SELECT pg_catalog.count(*) FILTER (WHERE x.bad),
           pg_catalog.string_agg(pg_catalog.format('jobq.%s: %s dead, %s live, last vacuum %s',
                                                   x.relname, x.n_dead_tup, x.n_live_tup,
                                                   COALESCE(pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) x.last_vac)
                                                                OPERATOR(pg_catalog.||) ' ago', 'never')),
                                 '; ' ORDER BY x.n_dead_tup DESC, x.relname)
               FILTER (WHERE x.bad),
           pg_catalog.max(x.n_dead_tup)
      INTO n, list, most
      FROM (SELECT st.relname, st.n_dead_tup, st.n_live_tup,
                   GREATEST(st.last_vacuum, st.last_autovacuum) AS last_vac,
                   st.n_dead_tup OPERATOR(pg_catalog.>) 10000
                   AND st.n_dead_tup OPERATOR(pg_catalog.>) (st.n_live_tup OPERATOR(pg_catalog./) 2) AS bad
              FROM pg_catalog.pg_stat_user_tables st
             WHERE st.schemaname OPERATOR(pg_catalog.=) 'jobq') x;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := list;
        hint := 'Vacuum cannot remove dead rows while an old snapshot holds back the xmin horizon (see xmin_horizon), or autovacuum is falling behind; VACUUM the table.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('at most %s dead rows in a jobq table', COALESCE(most, 0));
        hint := NULL;
    END IF;
    RETURN NEXT;

    /*
     * table_bloat: a rough estimate from the planner's statistics (tables
     * and their whole-table btree indexes; not analyzed yet means no
     * estimate): rows x average width, against the size on disk.
     */
    check_name := 'table_bloat';
    WITH rel AS (
        SELECT c.oid, c.relname, c.relkind, c.relpages,
               CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'i' THEN i.indrelid ELSE c.oid END AS tbl,
               CASE WHEN c.relkind OPERATOR(pg_catalog.=) 'i' THEN i.indkey::integer[] END AS keys
          FROM pg_catalog.pg_class c
          LEFT JOIN pg_catalog.pg_index i ON i.indexrelid OPERATOR(pg_catalog.=) c.oid
         WHERE c.relnamespace OPERATOR(pg_catalog.=) 'jobq'::regnamespace
           AND (c.relkind OPERATOR(pg_catalog.=) 'r'
                OR (c.relkind OPERATOR(pg_catalog.=) 'i' AND i.indpred IS NULL
                    AND c.relam OPERATOR(pg_catalog.=) 403::oid))
    ), est AS (
        SELECT r.relname,
               pg_catalog.pg_relation_size(r.oid) AS bytes,
               tc.reltuples OPERATOR(pg_catalog.*)
                 (CASE WHEN r.relkind OPERATOR(pg_catalog.=) 'r' THEN 28 ELSE 12 END
                  OPERATOR(pg_catalog.+) ws.width)
                 OPERATOR(pg_catalog./)
                 (CASE WHEN r.relkind OPERATOR(pg_catalog.=) 'r'
                       THEN COALESCE(ff.fillfactor, 100) ELSE 90 END
                  OPERATOR(pg_catalog.*) 0.01::real) AS want
          FROM rel r
          JOIN pg_catalog.pg_class tc ON tc.oid OPERATOR(pg_catalog.=) r.tbl
          LEFT JOIN LATERAL (
                SELECT pg_catalog.substr(o.opt, 12)::integer AS fillfactor
                  FROM pg_catalog.unnest(tc.reloptions) o(opt)
                 WHERE o.opt OPERATOR(pg_catalog.~~) 'fillfactor=%') ff ON true
          JOIN LATERAL (
                SELECT pg_catalog.sum(s.avg_width)::real AS width,
                       pg_catalog.count(*) AS ncols
                  FROM pg_catalog.pg_attribute a
                  JOIN pg_catalog.pg_stats s
                    ON s.schemaname OPERATOR(pg_catalog.=) 'jobq'
                   AND s.tablename OPERATOR(pg_catalog.=) tc.relname
                   AND s.attname OPERATOR(pg_catalog.=) a.attname
                 WHERE a.attrelid OPERATOR(pg_catalog.=) tc.oid
                   AND a.attnum OPERATOR(pg_catalog.>) 0
                   AND NOT a.attisdropped
                   AND (r.keys IS NULL OR a.attnum OPERATOR(pg_catalog.=) ANY (r.keys))) ws
            ON ws.ncols OPERATOR(pg_catalog.>) 0
         WHERE tc.reltuples OPERATOR(pg_catalog.>=) 0
    )
    SELECT pg_catalog.count(*),
           pg_catalog.string_agg(pg_catalog.format('jobq.%s: %s, about %s%% of it bloat',
                                                   e.relname, pg_catalog.pg_size_pretty(e.bytes),
                                                   pg_catalog.round((100 OPERATOR(pg_catalog.-)
                                                       (100 OPERATOR(pg_catalog.*) e.want
                                                        OPERATOR(pg_catalog./) e.bytes))::numeric)),
                                 '; ' ORDER BY e.bytes OPERATOR(pg_catalog.-) e.want DESC)
      INTO n, list
      FROM est e
     WHERE (e.bytes OPERATOR(pg_catalog.-) e.want) OPERATOR(pg_catalog.>) 10485760
       AND e.bytes OPERATOR(pg_catalog.>) (2 OPERATOR(pg_catalog.*) e.want);
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := list;
        hint := 'After a backlog drains, VACUUM keeps the space for reuse; to give it back use VACUUM FULL or REINDEX ... CONCURRENTLY (index), or pg_repack, at a quiet time.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no jobq table or index over 10 MB is more than half bloat; jobq''s tables and indexes take %s',
                                    pg_catalog.pg_size_pretty((SELECT pg_catalog.sum(pg_catalog.pg_total_relation_size(c.oid))
                                                                 FROM pg_catalog.pg_class c
                                                                WHERE c.relnamespace OPERATOR(pg_catalog.=) 'jobq'::regnamespace
                                                                  AND c.relkind OPERATOR(pg_catalog.=) 'r')::bigint));
        hint := NULL;
    END IF;
    RETURN NEXT;

    /*
     * xmin_horizon: what holds back vacuum in this database: sessions with
     * a snapshot (not this one), prepared transactions, replication slots.
     * Other roles' sessions show only with pg_read_all_stats (pg_monitor).
     */
    check_name := 'xmin_horizon';
    SELECT pg_catalog.count(*), pg_catalog.min(h.since),
           pg_catalog.string_agg(h.what, '; ' ORDER BY h.since)
      INTO n, oldest, list
      FROM (SELECT a.xact_start AS since,
                   pg_catalog.format('pid %s (user %s, application %s, %s) has held a snapshot for %s',
                                     a.pid, a.usename, pg_catalog.quote_literal(a.application_name),
                                     a.state,
                                     pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) a.xact_start)) AS what
              FROM pg_catalog.pg_stat_activity a
             WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
               AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
               AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
               AND a.xact_start OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) xmin_threshold)
            UNION ALL
            SELECT p.prepared,
                   pg_catalog.format('prepared transaction %s has been open for %s',
                                     pg_catalog.quote_literal(p.gid),
                                     pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) p.prepared))
              FROM pg_catalog.pg_prepared_xacts p
             WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
               AND p.prepared OPERATOR(pg_catalog.<) (t OPERATOR(pg_catalog.-) xmin_threshold)
            UNION ALL
            SELECT NULL::timestamptz,
                   pg_catalog.format('inactive replication slot %s holds xmin %s transactions back',
                                     pg_catalog.quote_literal(r.slot_name),
                                     pg_catalog.age(r.xmin))
              FROM pg_catalog.pg_replication_slots r
             WHERE r.xmin IS NOT NULL
               AND NOT r.active) h;
    IF n OPERATOR(pg_catalog.>) 0 THEN
        status := 'warning';
        detail := list;
        hint := 'Vacuum cannot remove rows that died after the oldest of these started; end it (pg_terminate_backend, COMMIT PREPARED / ROLLBACK PREPARED, pg_drop_replication_slot) or set idle_in_transaction_session_timeout.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('no transaction in this database has held a snapshot for more than %s',
                                    xmin_threshold);
        hint := NULL;
    END IF;
    RETURN NEXT;

    /* service */
    check_name := 'service';
    IF sv.served_by OPERATOR(pg_catalog.=) 'none' THEN
        status := 'critical';
        detail := 'no jobq background process serves this database';
        hint := 'See the worker check, and look for jobq messages in the server log.';
    ELSIF sv.delay OPERATOR(pg_catalog.>) stale THEN
        status := 'warning';
        detail := pg_catalog.format('%s: due %s ago and not served yet', sv.served_by,
                                    pg_catalog.date_trunc('second', sv.delay));
        hint := 'Databases outnumber jobq.max_workers and the pool is behind: raise jobq.max_workers, and max_worker_processes with it.';
    ELSE
        status := 'ok';
        detail := pg_catalog.format('%s; last served %s ago', sv.served_by,
                                    COALESCE(pg_catalog.date_trunc('second', t OPERATOR(pg_catalog.-) sv.last_served_at)::text,
                                             'never'));
        hint := NULL;
    END IF;
    RETURN NEXT;
END
$$;
COMMENT ON FUNCTION jobq.health(interval, interval, interval) IS
    'one row per check (worker, expired_leases, overdue_schedules, oldest_pending, circuit_breakers, dead_tuples, table_bloat, xmin_horizon, service) with status ok, warning or critical, a detail and a hint';
