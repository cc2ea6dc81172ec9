--
-- cron_next: first fire time of a cron expression strictly after a time,
-- in a time zone (see README.md, "Cron schedules")
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;
SET timezone = 'UTC';
\set VERBOSITY default
\set SHOW_CONTEXT never

-- the next n fires after a time, in UTC and on the local wall clock
CREATE FUNCTION pg_temp.fires(cron text, after timestamptz, zone text, n int)
RETURNS TABLE (utc timestamptz, local timestamp)
LANGUAGE sql AS $$
    WITH RECURSIVE f(i, t) AS (
        SELECT 1, jobq.cron_next(cron, after, zone)
        UNION ALL
        SELECT i + 1, jobq.cron_next(cron, t, zone) FROM f WHERE i < n
    )
    SELECT t, t AT TIME ZONE zone FROM f ORDER BY i
$$;

--
-- syntax forms (UTC)
--
SELECT jobq.cron_next('* * * * *', '2024-01-01 00:00:30+00');
SELECT jobq.cron_next('*/15 * * * *', '2024-01-01 00:16:00+00');
SELECT jobq.cron_next('10-50/5 * * * *', '2024-01-01 00:51:00+00');
SELECT jobq.cron_next('5/20 * * * *', '2024-01-01 00:46:00+00');
SELECT jobq.cron_next('0 0,12 * * *', '2024-01-01 00:00:00+00');
SELECT jobq.cron_next('0 9-17/4 * * *', '2024-01-01 13:00:00+00');
SELECT jobq.cron_next('0 9 * * MON-FRI', '2024-01-05 10:00:00+00');  -- a Friday
SELECT jobq.cron_next('0 9 * * mon,Wed', '2024-01-01 10:00:00+00');
SELECT jobq.cron_next('0 0 1 JAN-MAR,dec *', '2024-03-02 00:00:00+00');
SELECT jobq.cron_next('0 0 * * 7', '2024-01-01 00:00:00+00');
SELECT jobq.cron_next('0 0 * * 0', '2024-01-01 00:00:00+00');
SELECT jobq.cron_next('0 0 * * SUN', '2024-01-01 00:00:00+00');
SELECT * FROM pg_temp.fires('0 0 * * 5-7', '2024-01-01', 'UTC', 4);
SELECT * FROM pg_temp.fires('0 0 * * FRI-SUN', '2024-01-01', 'UTC', 4);
-- six fields: a leading seconds field
SELECT jobq.cron_next('30 * * * * *', '2024-01-01 00:00:30+00');
SELECT * FROM pg_temp.fires('*/20 0 0 * * *', '2024-01-01', 'UTC', 4);
-- macros
SELECT jobq.cron_next('@yearly', '2024-06-15 12:00:00+00');
SELECT jobq.cron_next('@annually', '2024-06-15 12:00:00+00');
SELECT jobq.cron_next('@monthly', '2024-06-15 12:00:00+00');
SELECT jobq.cron_next('@weekly', '2024-06-15 12:00:00+00');  -- a Saturday
SELECT jobq.cron_next('@daily', '2024-06-15 12:00:00+00');
SELECT jobq.cron_next('@midnight', '2024-06-15 12:00:00+00');
SELECT jobq.cron_next('@hourly', '2024-06-15 12:00:00+00');
SELECT jobq.cron_next('@HOURLY', '2024-06-15 12:00:00+00');
-- strictly after, to the microsecond; fires are on whole seconds
SELECT jobq.cron_next('0 0 * * *', '2024-01-01 00:00:00+00');
SELECT jobq.cron_next('0 0 * * *', '2023-12-31 23:59:59.999999+00');
-- the time zone argument defaults to UTC
SELECT jobq.cron_next('0 9 * * *', '2024-01-01 10:00:00+00');

--
-- month ends and leap years
--
SELECT jobq.cron_next('0 0 31 * *', '2024-04-01 00:00:00+00');
SELECT jobq.cron_next('0 0 30 * *', '2024-02-01 00:00:00+00');
SELECT jobq.cron_next('0 0 29 2 *', '2024-03-01 00:00:00+00');
SELECT jobq.cron_next('0 0 29 2 *', '2096-03-01 00:00:00+00');  -- 2100 is no leap year
SELECT jobq.cron_next('59 23 28-31 2 *', '2023-02-28 23:59:00+00');
-- never: NULL, found without walking minute by minute
SELECT jobq.cron_next('0 0 30 2 *', '2024-01-01 00:00:00+00');
SELECT jobq.cron_next('0 0 31 4,6,9,11 *', '2024-01-01 00:00:00+00');
-- past the end of the timestamp range
SELECT jobq.cron_next('@yearly', '294276-06-01 00:00:00+00');
SELECT jobq.cron_next('* * * * *', 'infinity');

--
-- day-of-month and day-of-week: either matches when both are restricted
--
SELECT * FROM pg_temp.fires('0 0 13 * FRI', '2024-09-01', 'UTC', 5);
-- a field starting with * is unrestricted, so both must match
SELECT * FROM pg_temp.fires('0 0 */2 * MON', '2024-01-01', 'UTC', 3);
SELECT jobq.cron_next('0 0 13 * */7', '2024-01-01 00:00:00+00');  -- a Sunday the 13th
SELECT jobq.cron_next('0 0 29 2 */7', '2024-01-01 00:00:00+00');  -- a Sunday Feb 29

--
-- time zones and DST
--
-- America/New_York, spring forward 2024-03-10 02:00 EST -> 03:00 EDT:
-- a time in the gap fires when the gap ends; several collapse into one fire
SELECT * FROM pg_temp.fires('30 2 * * *', '2024-03-09 12:00-05', 'America/New_York', 3);
SELECT * FROM pg_temp.fires('*/15 2 * * *', '2024-03-10 00:00-05', 'America/New_York', 3);
SELECT * FROM pg_temp.fires('*/30 * * * *', '2024-03-10 01:00-05', 'America/New_York', 4);
-- fall back 2024-11-03 02:00 EDT -> 01:00 EST: the first occurrence only
SELECT * FROM pg_temp.fires('30 1 * * *', '2024-11-02 12:00-04', 'America/New_York', 2);
SELECT * FROM pg_temp.fires('*/30 * * * *', '2024-11-03 00:00-04', 'America/New_York', 5);
-- asked during the repeated hour, after its first pass: 02:00 EST is next
SELECT * FROM pg_temp.fires('*/30 * * * *', '2024-11-03 01:10-05', 'America/New_York', 1);
-- Europe/London: 2024-03-31 01:00 GMT -> 02:00 BST, 2024-10-27 02:00 BST -> 01:00 GMT
SELECT * FROM pg_temp.fires('30 1 * * *', '2024-03-30 12:00+00', 'Europe/London', 2);
SELECT * FROM pg_temp.fires('30 1 * * *', '2024-10-26 12:00+01', 'Europe/London', 2);
-- Australia/Lord_Howe, 30-minute DST: 2024-10-06 02:00 +1030 -> 02:30 +11
SELECT * FROM pg_temp.fires('*/20 2 * * *', '2024-10-05 12:00+1030', 'Australia/Lord_Howe', 3);
-- and 2024-04-07 02:00 +11 -> 01:30 +1030
SELECT * FROM pg_temp.fires('*/15 1 * * *', '2024-04-07 01:20+11', 'Australia/Lord_Howe', 4);
-- Asia/Kathmandu, +0545; on 1986-01-01 it moved from +0530, skipping 00:00-00:14
SELECT * FROM pg_temp.fires('0 9 * * *', '2024-01-01 00:00+00', 'Asia/Kathmandu', 1);
SELECT * FROM pg_temp.fires('5 0 1 1 *', '1985-12-31 00:00+00', 'Asia/Kathmandu', 1);
-- Pacific/Chatham, +1245/+1345: 2024-09-29 02:45 -> 03:45
SELECT * FROM pg_temp.fires('0 3 * * *', '2024-09-28 12:00+1245', 'Pacific/Chatham', 2);
-- zone names are case-insensitive, as elsewhere in PostgreSQL
SELECT jobq.cron_next('0 9 * * *', '2024-01-01 00:00+00', 'europe/paris');

--
-- @every: multiples of the period since 1970-01-01 00:00 UTC, in any zone
--
SELECT jobq.cron_next('@every 5m', '2024-01-01 00:02:00+00');
SELECT jobq.cron_next('@every 90s', '2024-01-01 00:00:00+00');
SELECT jobq.cron_next('@every 1h30m', '2024-01-01 00:00:00+00');
SELECT jobq.cron_next('@every 2 hours', '2024-01-01 01:00:00+00');
SELECT jobq.cron_next('@every 1d', '2024-03-10 01:00-05', 'America/New_York');
SELECT * FROM pg_temp.fires('@every 1h', '2024-03-10 00:30-05', 'America/New_York', 3);

--
-- bad input
--
SELECT jobq.cron_next('0 0 * * MON-XYZ', '2024-01-01');
SELECT jobq.cron_next('61 * * * *', '2024-01-01');
SELECT jobq.cron_next('* * * * * * *', '2024-01-01');
SELECT jobq.cron_next('* * *', '2024-01-01');
SELECT jobq.cron_next('', '2024-01-01');
SELECT jobq.cron_next('0 0 L * *', '2024-01-01');
SELECT jobq.cron_next('0 0 * * 5#3', '2024-01-01');
SELECT jobq.cron_next('0 0 ? * MON', '2024-01-01');
SELECT jobq.cron_next('*/0 * * * *', '2024-01-01');
SELECT jobq.cron_next('30-10 * * * *', '2024-01-01');
SELECT jobq.cron_next('@reboot', '2024-01-01');
SELECT jobq.cron_next('@every 0s', '2024-01-01');
SELECT jobq.cron_next('@every 5 fortnights', '2024-01-01');
SELECT jobq.cron_next(repeat('* ', 129), '2024-01-01');
SELECT jobq.cron_next('* * * * *', '2024-01-01', 'Mars/Olympus_Mons');
SELECT jobq.cron_next('* * * * *', '-infinity');
-- STRICT: any NULL argument gives NULL
SELECT jobq.cron_next(NULL, '2024-01-01') IS NULL AS null_cron;
SELECT jobq.cron_next('* * * * *', NULL) IS NULL AS null_after;
SELECT jobq.cron_next('* * * * *', '2024-01-01', NULL) IS NULL AS null_zone;

-- POSIX zone specifications PostgreSQL accepts up to 167 hours from UTC:
-- refused beyond 25 hours, now and across their transitions (one gave a
-- time before the start, and a schedule in it stopped firing)
SELECT jobq.cron_next('* * * * *', '2024-01-01 00:00+00', 'FOO-167');
SELECT jobq.cron_next('* * * * *', '2024-11-03 01:17:06+00', 'AAA+100BBB-100,M3.2.0,M11.1.0');
SELECT jobq.cron_next('* * * * *', '2024-01-01 00:00+00', 'AAA+24BBB-2,J1/0,J340/0') AS "24 hours: taken";
