/*-------------------------------------------------------------------------
 *
 * queue/settings.h
 *	  A queue's settings, read through a cache, and jobq.configure
 *	  (queue/settings.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_QUEUE_SETTINGS_H
#define JOBQ_QUEUE_SETTINGS_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* Settings of one queue, as jobq.queue has them. */
typedef struct JobqQueue
{
	int32		max_retries;
	Interval	lease;
	bool		paused;
	int32		max_concurrency;	/* 0: no limit */
	int32		max_per_key;	/* 0: no limit */
	int32		rate_limit;		/* 0: no limit */
	Interval	rate_period;
	bool		throttled;		/* breaker allows one running job at a time */
	bool		has_breaker;	/* breaker_threshold is set */
	bool		breaker_armed;	/* a success would reset the breaker */
} JobqQueue;

/* SPI must be connected. */
extern bool jobq_queue_get(const char *queue, JobqQueue *q);
extern void jobq_queue_get_or_create(const char *queue, JobqQueue *q);
extern void jobq_queue_lock_for_drop(void *queue);
extern bool jobq_queue_drop_wait_many(const char *queue, int timeout_ms);
extern Oid	jobq_ready_relid(void);

#endif							/* JOBQ_QUEUE_SETTINGS_H */
