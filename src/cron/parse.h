/*-------------------------------------------------------------------------
 *
 * cron/parse.h
 *	  Cron expressions: the parsed form and the pure calendar search.
 *
 * A CronSpec is a set of bitsets, one per field, so matching a value is a
 * bit test and finding the next matching value is a count of trailing
 * zeros.  Everything declared here is plain C with no PostgreSQL calls, so
 * the parser can be unit-tested and fuzzed on its own (test/cron/); the
 * time-zone half lives in cron/next.c.
 *
 * "Local seconds" are seconds since 1970-01-01 00:00:00 of a naive wall
 * clock in the proleptic Gregorian calendar (no time zone, every day has
 * 86400 seconds).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_CRON_PARSE_H
#define JOBQ_CRON_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest cron expression accepted, in bytes. */
#define CRON_MAX_TEXT_LEN		256

/* Longest @every period accepted: ten years of 365 days, in seconds. */
#define CRON_MAX_EVERY_SECS		((int64_t) 3650 * 86400)

/* A search never looks further than this many years past its start. */
#define CRON_SEARCH_YEARS		400

/* Range of local seconds the search accepts (years -1000000..1000000). */
#define CRON_LOCAL_MIN			((int64_t) -31619119219200)
#define CRON_LOCAL_MAX			((int64_t) 31494816403199)

/* A parsed cron expression. */
typedef struct CronSpec
{
	uint64_t	seconds;		/* bit s: second s matches (0-59) */
	uint64_t	minutes;		/* bit m: minute m matches (0-59) */
	uint32_t	hours;			/* bit h: hour h matches (0-23) */
	uint32_t	days;			/* bit d: day-of-month d matches (1-31) */
	uint16_t	months;			/* bit m: month m matches (1-12) */
	uint8_t		weekdays;		/* bit w: weekday w matches (0 = Sunday) */
	bool		dom_star;		/* day-of-month field starts with '*' */
	bool		dow_star;		/* day-of-week field starts with '*' */
	int64_t		every;			/* @every period in seconds; 0 = calendar */
} CronSpec;

/* A broken-down naive wall-clock time; month 1-12, day 1-31. */
typedef struct CronTime
{
	int64_t		year;
	int			month;
	int			day;
	int			hour;
	int			minute;
	int			second;
} CronTime;

extern bool cron_parse(const char *text, CronSpec *spec,
					   char *errbuf, size_t errlen);

extern int64_t cron_days_from_civil(int64_t year, int month, int day);
extern void cron_civil_from_days(int64_t days, int64_t *year, int *month,
								 int *day);
extern int	cron_weekday(int64_t days);
extern int	cron_days_in_month(int64_t year, int month);
extern int64_t cron_local_from_time(const CronTime *tm);
extern void cron_time_from_local(int64_t local, CronTime *tm);

extern bool cron_day_matches(const CronSpec *spec, int64_t year, int month,
							 int day);
extern bool cron_matches_local(const CronSpec *spec, int64_t local);
extern bool cron_next_local(const CronSpec *spec, int64_t from,
							int64_t *next);
extern bool cron_next_every(const CronSpec *spec, int64_t after,
							int64_t *next);

#endif							/* JOBQ_CRON_PARSE_H */
