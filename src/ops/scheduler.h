/*-------------------------------------------------------------------------
 *
 * ops/scheduler.h
 *	  Cron schedules and firing them (ops/scheduler.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_SCHEDULER_H
#define JOBQ_SCHEDULER_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* A set of ids, growing in memory context cxt. */
typedef struct JobqIdSet
{
	int64	   *ids;
	int			n;
	int			cap;
	MemoryContext cxt;
} JobqIdSet;

/* SPI must be connected. */
extern int64 jobq_fire_due_schedules(TimestampTz *next_due, JobqIdSet *skip,
									 bool *more);

#endif							/* JOBQ_SCHEDULER_H */
