/*-------------------------------------------------------------------------
 *
 * cron/cron.h
 *	  Cron schedules on the PostgreSQL side: time zones and next fire times.
 *
 * The parser and the calendar search are pure C (cron/parse.h); the
 * functions here add PostgreSQL's time-zone library and error reporting
 * (cron/next.c).  The scheduler parses a schedule once with
 * jobq_cron_parse_or_error, looks its zone up with jobq_cron_timezone and
 * then asks jobq_cron_next_time for each next fire.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_CRON_H
#define JOBQ_CRON_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "pgtime.h"

#include "cron/parse.h"

extern pg_tz *jobq_cron_timezone(const char *name);
extern void jobq_cron_parse_or_error(const char *text, CronSpec *spec);
extern bool jobq_cron_next_time(const CronSpec *spec, TimestampTz after,
								pg_tz *tz, TimestampTz *next);

#endif							/* JOBQ_CRON_H */
