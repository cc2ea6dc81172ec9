/* extension/parts/99_privileges.sql -- runs last: nothing of jobq is granted to PUBLIC */

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
