\echo Use "ALTER EXTENSION jobq UPDATE TO '0.3.4'" to load this file. \quit

/*
 * extension/jobq--0.3.3--0.3.4.sql -- upgrade from release 0.3.3 to 0.3.4
 *
 * 0.3.4 changes no object of the schema: its fixes are in the library
 * (handlers checked at every job, jobq.grant writing only what a role
 * lacks, the shared memory of queues bounded, schedule and handler calls
 * acting only on what they checked).  This script moves the version, so
 * that every release stays one step of ALTER EXTENSION jobq UPDATE;
 * test/t/060_upgrade.pl checks that a 0.3.3 database then has the schema a
 * fresh install gets.  Nothing is granted here.
 */

/* ---------------------------------------------------------------------
 * Locks
 * ------------------------------------------------------------------- */

-- jobq.job before anything else (0.3.7): an update that goes on to 0.3.7
-- rebuilds an index of jobq.job, and a worker that holds a job while it
-- waits for a table or view this script changes would otherwise deadlock
-- with it.
LOCK TABLE jobq.job IN ACCESS EXCLUSIVE MODE;
