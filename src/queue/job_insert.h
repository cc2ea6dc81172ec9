/*-------------------------------------------------------------------------
 *
 * queue/job_insert.h
 *	  Writing an enqueue's rows and its idempotency key straight into the
 *	  tables (queue/job_insert.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_JOB_INSERT_H
#define JOBQ_JOB_INSERT_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "utils/jsonb.h"

/* One job to enqueue, validated. */
typedef struct JobqNewJob
{
	const char *kind;
	Jsonb	   *payload;
	const char *queue;
	int32		priority;
	TimestampTz run_at;
	bool		has_max_retries;
	int32		max_retries;
	const char *key;			/* NULL: no idempotency key */
	const char *concurrency_key;	/* NULL: none */
	bool		blocked;		/* waits for parents: status 'blocked', no row
								 * in jobq.ready or jobq.scheduled */
} JobqNewJob;

typedef enum JobqKeyResult
{
	JOBQ_KEY_RESERVED,			/* the key is the new job's; its id is taken */
	JOBQ_KEY_TAKEN				/* another job holds the key */
} JobqKeyResult;

extern JobqKeyResult jobq_reserve_key(const char *kind, const char *key,
									  int64 *job_id);
extern void jobq_insert_pending(const JobqNewJob *job, int32 max_retries,
								const Datum *payloads, int n, TimestampTz now,
								int64 *ids, bool ids_given);

#endif							/* JOBQ_JOB_INSERT_H */
