/* extension/parts/30_cron.sql -- cron expressions: next fire time */

CREATE FUNCTION jobq.cron_next(cron text, after timestamptz,
                               timezone text DEFAULT 'UTC')
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'jobq_cron_next'
LANGUAGE C STABLE STRICT PARALLEL SAFE;
COMMENT ON FUNCTION jobq.cron_next(text, timestamptz, text) IS
'first fire time of a cron expression strictly after "after", with wall-clock times read in the given IANA time zone; NULL if it never fires again';
