/*
 * extension/schema/30_access.sql -- access control: capabilities on queues
 *
 * A role holds enqueue, work or administer on a queue (or on every queue,
 * '*') through jobq.grant, which also gives it the privileges on jobq's
 * functions that the capability needs; nothing of jobq is granted to PUBLIC
 * (90_privileges.sql).  jobq.may_use_queue filters what the views and the
 * reading functions show.
 */

CREATE FUNCTION jobq.may_use_queue(queue text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_may_use_queue'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.may_use_queue(text) IS
    'may the current role see this queue''s jobs (does it hold a capability on it)?';

CREATE FUNCTION jobq.may(queue text, capability text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_may_sql'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;
COMMENT ON FUNCTION jobq.may(text, text) IS
    'does the current role hold capability (enqueue, work, administer) on queue (''*'': every queue)?';

CREATE FUNCTION jobq.grant(queue text, role regrole, capability text)
RETURNS void
AS 'MODULE_PATHNAME', 'jobq_grant'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.grant(text, regrole, text) IS
    'give role the enqueue, work or administer capability on queue (''*'': every queue), with the privileges it needs';

CREATE FUNCTION jobq.revoke(queue text, role regrole, capability text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'jobq_revoke'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION jobq.revoke(text, regrole, text) IS
    'take a capability back; false if the role did not hold it';
