\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.2'" to load this file. \quit

/*
 * extension/jobq--0.3.1--0.3.2.sql -- upgrade from release 0.3.1 to 0.3.2
 *
 * What 0.3.2 changes in a 0.3.1 database, by object.  The schema as it is,
 * which a fresh install gets, is in extension/schema/; test/t/060_upgrade.pl
 * checks that this script brings a database to it.  Nothing is granted here.
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

-- jobq.app_worker is keyed by (registered_by, worker_id): a worker id is
-- its role's own, so that no role can register another's id first and keep
-- that role's worker out of the registry.  Every existing row stays (the
-- old key was unique, so the new one is).  registered_by becomes a regrole,
-- as jobq.permission.role is, so that a dump names the role rather than an
-- oid that another cluster may give to another role.
ALTER TABLE jobq.app_worker DROP CONSTRAINT app_worker_pkey;
ALTER TABLE jobq.app_worker ALTER COLUMN worker_id SET NOT NULL;
ALTER TABLE jobq.app_worker ALTER COLUMN registered_by TYPE regrole;
ALTER TABLE jobq.app_worker ADD CONSTRAINT app_worker_pkey PRIMARY KEY (registered_by, worker_id);
