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

/*
 * What firing leaves out: the schedules that failed, and the queues a fire
 * found locked (their other schedules would wait for the same lock), growing
 * in memory context cxt.
 */
typedef struct JobqFireSkip
{
	int64	   *ids;
	int			n;
	int			cap;
	char	  **queues;
	int			nqueues;
	int			qcap;
	MemoryContext cxt;
} JobqFireSkip;

/* SPI must be connected. */
extern int64 jobq_fire_due_schedules(TimestampTz *next_due, JobqFireSkip *skip,
									 bool *more);
extern void jobq_fire_skip_reset(JobqFireSkip *skip);

#endif							/* JOBQ_SCHEDULER_H */
