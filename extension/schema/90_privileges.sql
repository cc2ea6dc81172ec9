/*
 * extension/schema/90_privileges.sql -- privileges: nothing to PUBLIC
 *
 * Runs last.  No function of jobq may be executed by PUBLIC: jobq.grant
 * gives a role the functions its capability needs (30_access.sql).  This
 * is what the extension's initial privileges (pg_init_privs) hold, and
 * pg_dump leaves initial privileges out; grants made later, by jobq.grant
 * or by hand, are dumped.  An upgrade script grants nothing itself: a role
 * granted capabilities before gets a release's new functions when
 * jobq.grant is run again for it.
 */

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
