\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.0'" to load this file. \quit

/*
 * extension/jobq--0.2.0--0.3.0.sql -- upgrade from release 0.2.0 to 0.3.0
 *
 * What 0.3.0 changes in a 0.2.0 database, by object: tables, indexes,
 * functions, views, comments.  The schema as it is, which a fresh install
 * gets, is in extension/schema/; test/t/060_upgrade.pl checks that this
 * script brings a database to it.  Nothing new is granted here (a grant
 * made in an extension script becomes an initial privilege, which pg_dump
 * leaves out): a role granted capabilities before gets the new functions
 * when jobq.grant is run again for it; a function re-created gets the
 * grantees of the one it replaces.
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

-- jobq.attempt.details: the longer story of a failed attempt (a stack
-- trace), given to jobq.fail
ALTER TABLE jobq.attempt ADD COLUMN details text;
COMMENT ON COLUMN jobq.attempt.details IS
    'the longer story of the attempt: a stack trace, given to jobq.fail as details (at most jobq.max_details_length bytes); for an edit, what changed';

-- the application's workers: a registry they keep with a heartbeat
CREATE TABLE jobq.app_worker (
    worker_id    text PRIMARY KEY,
    registered_by oid NOT NULL,
    queues       text[] NOT NULL,
    info         jsonb NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);
COMMENT ON TABLE jobq.app_worker IS
    'the application''s worker processes, as they registered (jobq.register_worker) and last heartbeat; pruned a day after they were last seen';
SELECT pg_catalog.pg_extension_config_dump('jobq.app_worker', '');

/* ---------------------------------------------------------------------
 * Indexes
 * ------------------------------------------------------------------- */

CREATE INDEX app_worker_seen_idx ON jobq.app_worker (last_seen_at);
COMMENT ON INDEX jobq.app_worker_seen_idx IS
    'application workers by last heartbeat, for pruning the ones not seen for a day';

/* ---------------------------------------------------------------------
 * Functions
 * ------------------------------------------------------------------- */

-- jobq.fail gains details.  A function's arguments cannot be altered, so it
-- is re-created; who could execute the old one may execute the new one,
-- with the same grant options: the grantees are carried over by role OID
-- (0: PUBLIC), never by name (a role name may hold any character), in a
-- setting of this transaction.
DO $$
BEGIN
    PERFORM pg_catalog.set_config('jobq_upgrade.fail_grantees',
        COALESCE((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
                             'grantee', g.grantee, 'grantable', g.grantable))::text
                    FROM (SELECT a.grantee, pg_catalog.bool_or(a.is_grantable) AS grantable
                            FROM pg_catalog.pg_proc p,
                                 pg_catalog.aclexplode(COALESCE(p.proacl,
                                     pg_catalog.acldefault('f', p.proowner))) a
                           WHERE p.oid OPERATOR(pg_catalog.=)
                                 'jobq.fail(bigint, bigint, text, boolean, interval)'::pg_catalog.regprocedure
                             AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
                             AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
                           GROUP BY a.grantee) g), '[]'),
        true);
END
$$;

DROP FUNCTION jobq.fail(bigint, bigint, text, boolean, interval);
CREATE FUNCTION jobq.fail(job_id bigint, lease_token bigint, error text,
                          retryable boolean DEFAULT true, retry_in interval DEFAULT NULL,
                          details text DEFAULT NULL)
RETURNS text
AS 'MODULE_PATHNAME', 'jobq_fail'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.fail(bigint, bigint, text, boolean, interval, text) IS
    'fail the current attempt: back to pending with backoff while retries are left, else failed; details (a stack trace) is kept with the attempt; NULL for a stale token';
REVOKE ALL ON FUNCTION jobq.fail(bigint, bigint, text, boolean, interval, text) FROM PUBLIC;

DO $$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT r.grantee, r.grantable
               FROM pg_catalog.jsonb_to_recordset(
                        pg_catalog.current_setting('jobq_upgrade.fail_grantees')::pg_catalog.jsonb)
                    AS r(grantee pg_catalog.oid, grantable boolean)
    LOOP
        IF g.grantee OPERATOR(pg_catalog.=) 0 THEN
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION jobq.fail(bigint, bigint, text, boolean, interval, text) TO PUBLIC%s',
                                      CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        ELSIF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE oid OPERATOR(pg_catalog.=) g.grantee) THEN
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION jobq.fail(bigint, bigint, text, boolean, interval, text) TO %I%s',
                                      (SELECT rolname FROM pg_catalog.pg_roles WHERE oid OPERATOR(pg_catalog.=) g.grantee),
                                      CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END IF;
    END LOOP;
END
$$;

-- the application worker registry
CREATE FUNCTION jobq.register_worker(worker_id text, queues text[], info jsonb DEFAULT '{}')
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_register_worker'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.register_worker(text, text[], jsonb) IS
    'register an application worker of queues the caller may work on, or refresh it (its heartbeat)';

CREATE FUNCTION jobq.unregister_worker(worker_id text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_unregister_worker'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.unregister_worker(text) IS
    'remove an application worker the caller registered; false when there is none';

CREATE FUNCTION jobq.app_worker_rows()
RETURNS TABLE (worker_id text, queues text[], info jsonb, started_at timestamptz,
               last_seen_at timestamptz, jobs_in_hand bigint, gone boolean)
AS 'MODULE_PATHNAME', 'jobq_app_worker_rows'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.app_worker_rows() IS
    'internal: the rows of jobq.app_workers the caller may see';

-- removing a queue; discarding a dead job
CREATE FUNCTION jobq.drop_queue(queue text, force boolean DEFAULT false)
RETURNS bigint
AS 'MODULE_PATHNAME', 'jobq_drop_queue'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.drop_queue(text, boolean) IS
    'remove a queue with its settings, grants, schedules, handlers and jobs; refused while jobs run unless force, which fences them first; returns how many jobs it removed';

CREATE FUNCTION jobq.discard(job_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_discard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.discard(bigint) IS
    'delete a failed or cancelled job and its attempt history (its idempotency key stays reserved for jobq.idempotency_retention); refused for a job with unfinished dependents';

REVOKE ALL ON FUNCTION jobq.register_worker(text, text[], jsonb), jobq.unregister_worker(text),
    jobq.app_worker_rows(), jobq.drop_queue(text, boolean), jobq.discard(bigint) FROM PUBLIC;

-- jobq.job: a job's story includes the edits of jobq.update_job (attempt
-- rows of outcome 'edited', numbered -1, -2, ...), in the order things
-- happened
CREATE OR REPLACE FUNCTION jobq.job(job_id bigint)
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

/* ---------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------- */

CREATE VIEW jobq.app_workers AS SELECT * FROM jobq.app_worker_rows();
COMMENT ON VIEW jobq.app_workers IS
    'the application''s workers of the queues the caller may use: their queues, what they said of themselves, when they started and were last seen, the jobs they hold now, and whether they are gone (not seen for jobq.worker_gone_after)';

/* ---------------------------------------------------------------------
 * Comments
 * ------------------------------------------------------------------- */

COMMENT ON FUNCTION jobq.health(interval, interval, interval) IS
    'one row per check (worker, expired_leases, overdue_schedules, oldest_pending, circuit_breakers, dead_tuples, table_bloat, xmin_horizon, service) with status ok, warning or critical, a detail and a hint';
COMMENT ON TABLE jobq.attempt IS
    'a job''s history: its attempts that failed (failed, lease expired, cancelled) and its edits by jobq.update_job (outcome edited, numbered -1, -2, ...); a successful attempt is on the job row';
