\echo Use "ALTER EXTENSION jobq UPDATE TO '0.2.0'" to load this file. \quit

/*
 * extension/jobq--0.1.0--0.2.0.sql -- upgrade from release 0.1.0 to 0.2.0
 *
 * What 0.2.0 changes in a 0.1.0 database, by object: tables, indexes,
 * functions, views, comments.  Nothing new is granted here: grants made
 * in an extension script become the extension's initial privileges, which
 * pg_dump leaves out, so a restore would lose them.  Roles granted
 * capabilities before get the new functions when jobq.grant is run again
 * for them (README, Upgrading); enqueue and enqueue_many, re-created, keep
 * the grantees of the ones they replace.
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

/*
 * Workflows: jobs that wait for other jobs.  A job enqueued with depends_on
 * is 'blocked' (no row in jobq.ready or jobq.scheduled, so never claimed)
 * until every parent has finished.  jobq.dependency holds one row per
 * (parent, child) edge, with the parent's outcome once it finished;
 * jobq.dependent one row per child with how many parents are still
 * unfinished.  Finishing a parent settles its edges: O(its children), each
 * child's counter decremented under the child's row lock, so a child
 * unblocks exactly once however its parents finish.
 */

CREATE TABLE jobq.dependency (
    parent_id     bigint NOT NULL,
    child_id      bigint NOT NULL,
    parent_status text,
    PRIMARY KEY (parent_id, child_id)
);
COMMENT ON TABLE jobq.dependency IS
    'one row per (parent, child) dependency; parent_status is the parent''s outcome once it finished (NULL before)';

CREATE TABLE jobq.dependent (
    job_id            bigint PRIMARY KEY,
    parents_left      integer NOT NULL,
    on_parent_failure text NOT NULL,
    failed_parent     bigint,
    CONSTRAINT dependent_on_parent_failure_check
        CHECK (on_parent_failure OPERATOR(pg_catalog.=) ANY (ARRAY['cancel', 'run']::text[]))
);
COMMENT ON TABLE jobq.dependent IS
    'one row per job enqueued with depends_on: its unfinished parents, what a failed parent does to it, and the first parent that ended failed or cancelled';

-- Settling does not wait for a client (one that keeps its own dependent
-- locked in an open transaction must not stall another role's completion,
-- nor the reaper): a child still held after jobq.settle_lock_wait is left
-- unsettled and its parent noted here; the background worker settles it
-- again at retry_at, backing off by attempts.  A settle or retry that a
-- background pass's budget (jobq.pass_budget) cut short leaves the rest
-- here too, due at once.
CREATE TABLE jobq.settle_deferred (
    parent_id   bigint PRIMARY KEY,
    retry_at    timestamptz NOT NULL,
    attempts    integer NOT NULL,
    retried     boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE jobq.settle_deferred IS
    'parents whose dependents could not all be settled when they finished or were retried (a dependent was locked, or a background pass ran out of time): the background worker settles them again at retry_at';
COMMENT ON COLUMN jobq.settle_deferred.retried IS
    'a retry of the parent passed dependents over: the worker gives them the retry''s treatment';
SELECT pg_catalog.pg_extension_config_dump('jobq.dependency', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.dependent', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.settle_deferred', '');

/* ---------------------------------------------------------------------
 * Indexes
 * ------------------------------------------------------------------- */

CREATE INDEX dependency_child_idx ON jobq.dependency (child_id);
COMMENT ON INDEX jobq.dependency_child_idx IS 'the parents of a job, for jobq.parent_results';
-- The edges still to settle, so that settling a parent (or resuming one a
-- budget cut short) reads only those, however many it settled before.
CREATE INDEX dependency_unsettled_idx ON jobq.dependency (parent_id, child_id)
    WHERE parent_status IS NULL;
COMMENT ON INDEX jobq.dependency_unsettled_idx IS
    'the dependencies whose parent has not finished yet (or whose settling is under way), by parent';

-- The failed jobs only (the dead letter): the dead letter's groups,
-- jobq.retry_failed and the failed count of jobq.queue_stats read it
-- instead of every kept job.  On the hot path it costs one index entry when
-- a job fails for good, and nothing for the other transitions beyond
-- testing the predicate: every update that changes status already changes
-- an index key (lease_expires_at or finished_at), so none is HOT anyway.
CREATE INDEX job_failed_idx ON jobq.job (queue, kind, job_id)
    WITH (deduplicate_items = off)
    WHERE status OPERATOR(pg_catalog.=) 'failed';
COMMENT ON INDEX jobq.job_failed_idx IS
    'failed jobs (the dead letter) per queue and kind, for the dead letter, retry_failed and queue_stats';

-- No deduplication in indexes whose keys end in job_id: no two live entries
-- share a key, so the deduplication pass B-tree runs on every full leaf
-- page before splitting it finds nothing to merge (in jobq.ready's claim
-- index that pass is 3.6 % of a 1M-job enqueue_many).  Setting the option
-- takes a SHARE UPDATE EXCLUSIVE lock and rewrites nothing.
ALTER INDEX jobq.ready_claim_idx SET (deduplicate_items = off);
ALTER INDEX jobq.scheduled_due_idx SET (deduplicate_items = off);

/* ---------------------------------------------------------------------
 * Functions
 * ------------------------------------------------------------------- */

/*
 * enqueue and enqueue_many gain depends_on and on_parent_failure after all
 * their arguments.  A function's arguments cannot be altered, so both are
 * re-created; every grantee of EXECUTE on an old one (PUBLIC and grant
 * options included) gets it on the new one of the same name, and no one
 * else.  Between the DROP and the GRANT the grantees are kept by OID (0:
 * PUBLIC), never by name: a role name may hold any character (a queue
 * administrator with CREATEROLE can make one), so names are never joined
 * and split; each GRANT names its role with %I.  The list rides in a
 * setting of this transaction as JSON: [{"proname", "grantee", "grantable"}].
 */
DO $$
BEGIN
    PERFORM pg_catalog.set_config('jobq_upgrade.enqueue_grantees', COALESCE((
        SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                   'proname', g.proname, 'grantee', g.grantee, 'grantable', g.grantable)
                   ORDER BY g.proname, g.grantee)::pg_catalog.text
          FROM (SELECT p.proname, a.grantee, pg_catalog.bool_or(a.is_grantable) AS grantable
                  FROM pg_catalog.pg_proc p
                 CROSS JOIN LATERAL pg_catalog.aclexplode(
                           COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
                 WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                         'jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text)'::pg_catalog.regprocedure,
                         'jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text)'::pg_catalog.regprocedure]::pg_catalog.oid[])
                   AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
                   AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
                 GROUP BY p.proname, a.grantee) g), '[]'), true);
END
$$;

DROP FUNCTION jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text);

CREATE FUNCTION jobq.enqueue(kind text,
                             payload jsonb DEFAULT '{}',
                             queue text DEFAULT 'default',
                             priority integer DEFAULT 0,
                             run_at timestamptz DEFAULT pg_catalog.now(),
                             max_retries integer DEFAULT NULL,
                             idempotency_key text DEFAULT NULL,
                             concurrency_key text DEFAULT NULL,
                             depends_on bigint[] DEFAULT NULL,
                             on_parent_failure text DEFAULT 'cancel')
RETURNS TABLE (job_id bigint, created boolean)
AS 'MODULE_PATHNAME', 'jobq_enqueue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, bigint[], text) IS
    'enqueue one job; with an idempotency key, a duplicate returns the existing job with created = false; with depends_on, the job is blocked until every parent has finished';

CREATE FUNCTION jobq.enqueue_many(kind text,
                                  payloads jsonb[],
                                  queue text DEFAULT 'default',
                                  priority integer DEFAULT 0,
                                  run_at timestamptz DEFAULT pg_catalog.now(),
                                  max_retries integer DEFAULT NULL,
                                  idempotency_keys text[] DEFAULT NULL,
                                  concurrency_key text DEFAULT NULL,
                                  depends_on bigint[] DEFAULT NULL,
                                  on_parent_failure text DEFAULT 'cancel')
RETURNS TABLE (job_id bigint, created boolean)
AS 'MODULE_PATHNAME', 'jobq_enqueue_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text, bigint[], text) IS
    'enqueue one job per payload (each depending on every job of depends_on); one result row per input, in input order';

REVOKE ALL ON FUNCTION
    jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, bigint[], text),
    jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text, bigint[], text)
    FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT CASE WHEN e.proname OPERATOR(pg_catalog.=) 'enqueue' THEN
                       'jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, bigint[], text)'
                   ELSE
                       'jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text, bigint[], text)'
               END AS fn,
               e.grantee, r.rolname, e.grantable
          FROM pg_catalog.jsonb_to_recordset(COALESCE(
                   pg_catalog.current_setting('jobq_upgrade.enqueue_grantees', true), '[]')::pg_catalog.jsonb)
               AS e(proname pg_catalog.text, grantee pg_catalog.oid, grantable pg_catalog.bool)
          LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) e.grantee
    LOOP
        IF g.grantee OPERATOR(pg_catalog.=) 0 THEN
            -- the keyword, not a role named "PUBLIC"; PUBLIC has no grant option
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', g.fn);
        ELSIF g.rolname IS NOT NULL THEN
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I%s', g.fn, g.rolname,
                                      CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END IF;
    END LOOP;
END
$$;

-- jobq.release: the holder hands its running job back (graceful shutdown of a
-- worker); jobq.release_running: an administrator hands back every running
-- job of a queue, or of one worker
CREATE FUNCTION jobq.release(job_id bigint, lease_token bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.release(bigint, bigint) IS
    'hand a running job back: pending now, no retry spent, the token fenced; false for a stale token';

CREATE FUNCTION jobq.release_running(queue text, worker_id text DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_release_running'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.release_running(text, text) IS
    'every running job of the queue (of that worker) back to pending now, no retry spent, old tokens fenced; returns how many';

-- jobq.update_job: an administrator changes a pending, failed or cancelled
-- job (payload, run_at, priority, max_retries); jobq.run_schedule: fire a
-- schedule now, under a key of its own
CREATE FUNCTION jobq.update_job(job_id bigint, payload jsonb DEFAULT NULL,
                                run_at timestamptz DEFAULT NULL, priority integer DEFAULT NULL,
                                max_retries integer DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_update_job'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.update_job(bigint, jsonb, timestamptz, integer, integer) IS
    'change a pending, failed or cancelled job; NULL leaves a field as it is; false for a running, completed or missing job';

CREATE FUNCTION jobq.run_schedule(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_run_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.run_schedule(text) IS
    'fire the schedule now, under a key no timed fire uses; returns the job id';

-- how the current database is served by jobq's background processes (its
-- own worker, or the shared pool when databases outnumber
-- jobq.max_workers), when it was last served, when it is next due, and how
-- long it has waited past that
CREATE FUNCTION jobq.service_status()
RETURNS TABLE (served_by text, last_served_at timestamptz, next_due_at timestamptz,
               delay interval)
AS 'MODULE_PATHNAME', 'jobq_service_status'
LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.service_status() IS 'the row of jobq.service';

-- The workflow functions walk a workflow in C, by index probes of
-- jobq.dependency: they read the workflow's own edges and jobs, whatever
-- the statistics say of other tenants' workflows.  parent_results also
-- fills an in-database handler's job argument.
CREATE FUNCTION jobq.parent_results(job_id bigint)
RETURNS TABLE (job_id bigint, kind text, status text, result jsonb)
AS 'MODULE_PATHNAME', 'jobq_parent_results'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off;
COMMENT ON FUNCTION jobq.parent_results(bigint) IS
    'the parents of a job: kind, status and result (the result only where the caller may work on the parent''s queue); a pruned parent keeps its outcome as status, with kind and result NULL';

CREATE FUNCTION jobq.workflow_jobs(root bigint)
RETURNS TABLE (job_id bigint, queue text, kind text, payload jsonb, priority integer,
               status text, retry_count integer, max_retries integer,
               idempotency_key text, run_at timestamptz, claimed_at timestamptz,
               worker_id text, lease_expires_at timestamptz, last_error text,
               result jsonb, checkpoint jsonb, created_at timestamptz,
               updated_at timestamptz, finished_at timestamptz, attempts integer,
               concurrency_key text)
AS 'MODULE_PATHNAME', 'jobq_workflow_jobs'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off;
COMMENT ON FUNCTION jobq.workflow_jobs(bigint) IS
    'every job of the workflow under root (root and every job reachable from it through depends_on), as in jobq.jobs';


-- can_finish: the workflow can still end without a failure nobody handles.
-- It is false once a job of it ended failed or cancelled and no dependent
-- of that job runs anyway (on_parent_failure = 'run', a fan-in callback);
-- jobq.retry of the job can make it true again.
CREATE FUNCTION jobq.workflow_status(root bigint)
RETURNS TABLE (total bigint, blocked bigint, pending bigint, running bigint,
               completed bigint, failed bigint, cancelled bigint, can_finish boolean)
AS 'MODULE_PATHNAME', 'jobq_workflow_status'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off;
COMMENT ON FUNCTION jobq.workflow_status(bigint) IS
    'a workflow''s jobs by status, and whether it can still end without an unhandled failure (NULL: no such job)';

/*
 * jobq's SQL and PL/pgSQL functions run with jit = off.  With the default
 * jit = on, a statement whose plan costs more than jit_above_cost is
 * JIT-compiled at every execution, which takes tens to hundreds of
 * milliseconds; jobq's statements read few rows and never gain from it.
 * None of these functions can be inlined (SECURITY DEFINER, PL/pgSQL), so
 * the SET costs no inlining.  CREATE OR REPLACE of one of them must repeat
 * SET jit = off: it replaces the function's settings.
 *
 * kind_stats and health check that their intervals can be computed (at
 * most 1000 years, as every interval argument of jobq), with an error
 * naming the argument instead of "timestamp out of range"; health's worker
 * check knows the shared pool, and its last check, service, says whether
 * the database is served on time.
 */

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

CREATE OR REPLACE FUNCTION jobq.health(oldest_pending_threshold interval DEFAULT '5 minutes',
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

REVOKE ALL ON FUNCTION jobq.release(bigint, bigint), jobq.release_running(text, text),
    jobq.update_job(bigint, jsonb, timestamptz, integer, integer), jobq.run_schedule(text)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.service_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.parent_results(bigint), jobq.workflow_jobs(bigint),
    jobq.workflow_status(bigint) FROM PUBLIC;

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

CREATE VIEW jobq.service AS SELECT * FROM jobq.service_status();
COMMENT ON VIEW jobq.service IS
    'how this database is served: own worker, shared pool or none; when last served, when next due, how long past due';

-- The roots: the distinct parents, one descent of jobq.dependency's
-- primary key each (a loose index scan), each that is no one's child and
-- is kept, in a queue the querying role may use.  The subqueries keep
-- every step a probe per parent, whatever the statistics say (LIMIT and
-- OFFSET keep the planner from turning them into joins, which it could
-- make hash joins over whole tables), and workflow_status runs for the
-- roots alone.
CREATE VIEW jobq.workflows WITH (security_barrier) AS
WITH RECURSIVE parent(id) AS (
    SELECT (SELECT d.parent_id FROM jobq.dependency d ORDER BY d.parent_id LIMIT 1)
  UNION ALL
    SELECT (SELECT d.parent_id FROM jobq.dependency d
             WHERE d.parent_id OPERATOR(pg_catalog.>) p.id
             ORDER BY d.parent_id LIMIT 1)
      FROM parent p
     WHERE p.id IS NOT NULL
)
SELECT r.job_id AS root, r.queue, r.kind, r.created_at,
       s.total, s.blocked, s.pending, s.running, s.completed, s.failed, s.cancelled,
       s.can_finish
  FROM parent p
 CROSS JOIN LATERAL (SELECT j.job_id, j.queue, j.kind, j.created_at
                       FROM jobq.job j
                      WHERE j.job_id OPERATOR(pg_catalog.=) p.id
                        AND (SELECT d.child_id FROM jobq.dependency d
                              WHERE d.child_id OPERATOR(pg_catalog.=) p.id LIMIT 1) IS NULL
                        AND jobq.may_use_queue(j.queue)
                     OFFSET 0) r
 CROSS JOIN LATERAL jobq.workflow_status(r.job_id) s;
COMMENT ON VIEW jobq.workflows IS
    'one row per workflow root still kept (a job with dependents and no parents): its jobs by status and can_finish';

-- jobq.queue_stats counts each column where it is cheapest: pending (ready
-- and delayed) from jobq.ready and jobq.scheduled, which hold one row per
-- pending job with its run_at; running from the index of running leases;
-- failed from job_failed_idx; the last hour from job_finished_idx, all per
-- queue.  Only completed, cancelled and blocked (jobs waiting for their
-- parents, a new column) count every kept job, in one scan by status, and
-- a query that selects none of them does not pay for it: the planner drops
-- the join of a column nobody reads.
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
              GROUP BY j.queue) f ON f.queue OPERATOR(pg_catalog.=) q.name
  LEFT JOIN (SELECT j.queue,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'completed') AS completed,
                    pg_catalog.count(*) FILTER (WHERE j.status OPERATOR(pg_catalog.=) 'failed') AS failed
               FROM jobq.job j
              WHERE j.finished_at OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) '1 hour'::interval)
              GROUP BY j.queue) h ON h.queue OPERATOR(pg_catalog.=) q.name
 WHERE jobq.may_use_queue(q.name);
COMMENT ON VIEW jobq.queue_stats IS
    'per queue: jobs by status, age of the oldest due pending job, paused; ready and delayed split pending; completed and failed in the last hour; breaker state and limits; blocked jobs waiting for their parents';

/* ---------------------------------------------------------------------
 * Comments
 * ------------------------------------------------------------------- */

-- jobq.idempotency_retention = -1 keeps keys for ever (their expiry stays NULL)
COMMENT ON COLUMN jobq.idempotency_key.expires_at IS
    'when the key may be pruned: NULL while its job exists, and for ever when jobq.idempotency_retention is -1';
