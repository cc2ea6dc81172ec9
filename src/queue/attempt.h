/*-------------------------------------------------------------------------
 *
 * queue/attempt.h
 *	  How an attempt ends: complete, fail, retry or dead letter
 *	  (queue/attempt.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_QUEUE_ATTEMPT_H
#define JOBQ_QUEUE_ATTEMPT_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "datatype/timestamp.h"

/*
 * A running job whose attempt ends without success (fail, lease expiry):
 * what jobq_end_attempt needs, read by a query selecting
 * JOBQ_ATTEMPT_COLUMNS from jobq.job j joined with jobq.queue q.
 */
typedef struct JobqAttempt
{
	int64		job_id;
	int32		retry_count;
	int32		max_retries;
	char	   *queue;
	char	   *kind;
	int32		priority;
	int32		attempts;
	char	   *worker_id;		/* NULL when the claim named no worker */
	TimestampTz claimed_at;
	bool		claimed_null;
	double		backoff_base_us;
	double		backoff_cap_us;
	double		backoff_jitter;
	char	   *concurrency_key;	/* NULL when the job has none */
} JobqAttempt;

#define JOBQ_ATTEMPT_COLUMNS \
	"j.job_id, j.retry_count, j.max_retries, j.queue, j.kind, j.priority," \
	" j.attempts, j.worker_id, j.claimed_at," \
	" (extract(epoch FROM q.backoff_base) * 1000000)::float8," \
	" (extract(epoch FROM q.backoff_cap) * 1000000)::float8, q.backoff_jitter," \
	" j.concurrency_key"

/* SPI must be connected. */
extern void jobq_attempt_from_tuple(HeapTuple tup, TupleDesc desc,
									JobqAttempt *a);
extern const char *jobq_end_attempt(const JobqAttempt *a, text *error,
									bool retryable, const Interval *retry_in,
									const char *outcome, TimestampTz now);

#endif							/* JOBQ_QUEUE_ATTEMPT_H */
