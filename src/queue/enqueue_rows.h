/*-------------------------------------------------------------------------
 *
 * queue/enqueue_rows.h
 *	  An enqueue's rows, and putting pending jobs into the pending sets
 *	  (queue/enqueue_rows.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_ENQUEUE_ROWS_H
#define JOBQ_ENQUEUE_ROWS_H

#include "postgres.h"

#include "queue/job_insert.h"

/* SPI must be connected. */
extern void jobq_enqueue_job(const JobqNewJob *job, TimestampTz now,
							 int64 *job_id, bool *created);
extern void jobq_enqueue_bulk(const JobqNewJob *job, Datum *payloads, int n,
							  TimestampTz now, int64 *ids);
extern void jobq_requeue(int64 job_id, const char *queue, const char *kind,
						 int32 priority, const char *concurrency_key,
						 TimestampTz run_at, TimestampTz now);

#endif							/* JOBQ_ENQUEUE_ROWS_H */
