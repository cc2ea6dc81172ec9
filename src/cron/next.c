/*-------------------------------------------------------------------------
 *
 * cron/next.c
 *	  Next fire time of a cron expression in a time zone.
 *
 * A cron expression matches wall-clock times; this file maps them to
 * instants with PostgreSQL's own time-zone library (pg_localtime and
 * pg_next_dst_boundary), so any zone PostgreSQL knows works, including
 * 30-minute DST (Australia/Lord_Howe) and odd offsets (Asia/Kathmandu).
 *
 * The rule: every matching wall-clock time L fires once, at the first
 * instant at which the clock shows L or later.  So a time repeated by a DST
 * overlap fires at its first occurrence only, and a time skipped by a DST
 * gap fires at the instant the gap ends (several such times in one gap
 * collapse into that single fire).  Written as a function of L, that fire
 * instant never decreases as L grows.  Hence the next fire after instant a
 * belongs to the smallest matching L above the highest wall-clock time
 * shown at or before a (the "high-water mark", which is later than the
 * clock at a while a repeated hour is being shown the second time).  That
 * takes one calendar search (cron/parse.c) and a few look-ups of offsets
 * and transitions, however far away the next fire is.
 *
 * @every expressions ignore the zone: they fire at the multiples of their
 * period counted from 1970-01-01 00:00:00 UTC.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "args.h"
#include "guc.h"
#include "cron/cron.h"

PG_FUNCTION_INFO_V1(jobq_cron_next);

/* Seconds from the Unix epoch to the PostgreSQL epoch (2000-01-01). */
#define CRON_PG_EPOCH_SECS \
	((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY)

/*
 * UTC offsets stay well within a day (jobq_cron_timezone refuses a zone
 * beyond CRON_TZ_MAX_OFFSET), so a transition more than three days away
 * cannot matter.
 */
#define CRON_TZ_WINDOW			(3 * SECS_PER_DAY)

/*
 * The largest UTC offset a schedule's zone may have: every real zone is
 * within 14 hours, while PostgreSQL accepts POSIX zone specifications up to
 * 167 hours away, which the window above cannot take.
 */
#define CRON_TZ_MAX_OFFSET		(25 * SECS_PER_HOUR)

/* How many of a zone's coming transitions jobq_cron_timezone looks at. */
#define CRON_TZ_CHECKED_TRANSITIONS	8

/* Upper bound on transitions looked at in one window; never reached. */
#define CRON_TZ_MAX_STEPS		1000

/* UTC offset (seconds east) in effect at Unix time t. */
static long
cron_utc_offset(pg_time_t t, pg_tz *tz)
{
	struct pg_tm *tm = pg_localtime(&t, tz);

	if (tm == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("timestamp out of range")));
	return tm->tm_gmtoff;
}

/* Next transition strictly after t, or false if none is known. */
static bool
cron_next_transition(pg_time_t t, pg_tz *tz, pg_time_t *boundary)
{
	long		before_gmtoff;
	long		after_gmtoff;
	int			before_isdst;
	int			after_isdst;

	return pg_next_dst_boundary(&t, &before_gmtoff, &before_isdst, boundary,
								&after_gmtoff, &after_isdst, tz) == 1;
}

/*
 * Highest wall-clock time (local seconds) shown at any instant <= t.  It is
 * the clock at t itself, or the last second before a backward transition
 * if the clock has been turned back since.
 */
static int64
cron_high_water(pg_time_t t, pg_tz *tz)
{
	int64		high = t + cron_utc_offset(t, tz);
	pg_time_t	from = t - CRON_TZ_WINDOW;
	pg_time_t	boundary;

	for (int i = 0; i < CRON_TZ_MAX_STEPS; i++)
	{
		if (!cron_next_transition(from, tz, &boundary) || boundary > t)
			break;
		high = Max(high, boundary - 1 + cron_utc_offset(boundary - 1, tz));
		from = boundary;
	}
	return high;
}

/*
 * First instant (Unix time) at which the wall clock shows local or later:
 * the instant of local itself, its first occurrence in an overlap, or the
 * end of the gap that skips it.
 */
static pg_time_t
cron_first_instant(int64 local, pg_tz *tz)
{
	pg_time_t	t = local - CRON_TZ_WINDOW;

	/* walk the segments of constant offset from well before local */
	for (int i = 0; i < CRON_TZ_MAX_STEPS; i++)
	{
		long		offset = cron_utc_offset(t, tz);
		pg_time_t	x = Max(t, local - offset);
		pg_time_t	boundary;

		if (!cron_next_transition(t, tz, &boundary) || x < boundary)
			return x;
		t = boundary;
	}
	elog(ERROR, "too many time zone transitions near local time " INT64_FORMAT,
		 local);
	return 0;					/* keep compiler quiet */
}

/*
 * Look up a time zone by name, with an error if PostgreSQL does not know
 * it.  Zones that count leap seconds are refused, as for SET timezone.
 */
pg_tz	   *
jobq_cron_timezone(const char *name)
{
	pg_tz	   *tz = NULL;

	if (strlen(name) <= TZ_STRLEN_MAX)
		tz = pg_tzset(name);
	if (tz == NULL || !pg_tz_acceptable(tz))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unrecognized time zone \"%s\"", jobq_quote_arg(name)),
				 errhint("Use a name from pg_timezone_names, such as \"UTC\" or \"America/New_York\".")));
	else
	{
		/*
		 * its offsets now and after its coming transitions (a POSIX rule
		 * repeats yearly)
		 */
		pg_time_t	t = (pg_time_t) timestamptz_to_time_t(GetCurrentTimestamp());

		for (int i = 0; i < CRON_TZ_CHECKED_TRANSITIONS; i++)
		{
			long		before;
			long		after = 0;
			int			before_dst;
			int			after_dst;
			pg_time_t	boundary;
			int			found = pg_next_dst_boundary(&t, &before, &before_dst, &boundary,
													 &after, &after_dst, tz);

			if (found < 0)
				break;
			if (labs(before) > CRON_TZ_MAX_OFFSET || labs(after) > CRON_TZ_MAX_OFFSET)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("time zone \"%s\" is more than 25 hours away from UTC",
								jobq_quote_arg(name)),
						 errhint("Use a name from pg_timezone_names, such as \"UTC\" or \"America/New_York\": every real zone is within 14 hours.")));
			if (found == 0)
				break;
			t = boundary;
		}
	}
	return tz;
}

/* Parse a cron expression, with an error naming the bad field. */
void
jobq_cron_parse_or_error(const char *text, CronSpec *spec)
{
	char		errbuf[512];

	if (!cron_parse(text, spec, errbuf, sizeof(errbuf)))
	{
		/* the parser cuts a long message by bytes: end on a whole character */
		errbuf[jobq_cliplen(errbuf, strlen(errbuf), sizeof(errbuf) - 1)] = '\0';
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid cron expression: %s", errbuf),
				 errhint("Use five fields \"minute hour day-of-month month day-of-week\" "
						 "(optionally after a seconds field), as in \"*/15 9-17 * * MON-FRI\", "
						 "or one of @yearly, @monthly, @weekly, @daily, @hourly, \"@every 5m\".")));
	}
}

/*
 * First fire time of spec strictly after "after", in time zone tz.  Returns
 * false when there is none: the expression never matches (for example
 * February 30th), or the fire would be past the end of the timestamp range.
 */
bool
jobq_cron_next_time(const CronSpec *spec, TimestampTz after, pg_tz *tz,
					TimestampTz *next)
{
	int64		a;
	int64		fire;

	if (TIMESTAMP_IS_NOEND(after))
		return false;
	if (TIMESTAMP_IS_NOBEGIN(after))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("cron fire times after -infinity do not exist"),
				 errhint("Pass a finite timestamp, such as now().")));

	/* fires are on whole seconds: the next is after the second a */
	a = after / USECS_PER_SEC;
	if (after % USECS_PER_SEC < 0)
		a--;
	a += CRON_PG_EPOCH_SECS;

	if (spec->every > 0)
	{
		if (!cron_next_every(spec, a, &fire))
			return false;
	}
	else
	{
		int64		local;

		if (!cron_next_local(spec, cron_high_water(a, tz) + 1, &local))
			return false;
		/* beyond the timestamp range anyway, and too far for pg_localtime */
		if (local - CRON_PG_EPOCH_SECS > END_TIMESTAMP / USECS_PER_SEC + SECS_PER_DAY)
			return false;
		fire = cron_first_instant(local, tz);
	}

	fire -= CRON_PG_EPOCH_SECS;
	if (fire < MIN_TIMESTAMP / USECS_PER_SEC ||
		fire >= END_TIMESTAMP / USECS_PER_SEC)
		return false;
	*next = fire * USECS_PER_SEC;
	return true;
}

/*
 * jobq.cron_next(cron, after, timezone): the first fire time strictly after
 * "after", or NULL if there is none.
 */
Datum
jobq_cron_next(PG_FUNCTION_ARGS)
{
	text	   *cron_text = PG_GETARG_TEXT_PP(0);
	TimestampTz after = PG_GETARG_TIMESTAMPTZ(1);
	char	   *zone = text_to_cstring(PG_GETARG_TEXT_PP(2));
	char	   *cron;
	CronSpec	spec;
	pg_tz	   *tz;
	TimestampTz next;

	/* as for jobq.schedule: no expression is longer */
	if (VARSIZE_ANY_EXHDR(cron_text) > jobq_max_cron_length)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("cron is too long"),
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   (int) VARSIZE_ANY_EXHDR(cron_text), jobq_max_cron_length),
				 errhint("The limit is set by jobq.max_cron_length.")));
	cron = text_to_cstring(cron_text);

	jobq_cron_parse_or_error(cron, &spec);
	tz = jobq_cron_timezone(zone);
	if (!jobq_cron_next_time(&spec, after, tz, &next))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(next);
}
