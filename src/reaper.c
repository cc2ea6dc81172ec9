/*-------------------------------------------------------------------------
 *
 * reaper.c
 *	  The lease reaper: running jobs whose lease expired go back to pending
 *	  (retry_count + 1, with backoff) or, with no retries left, to failed
 *	  with the error "lease expired".
 *
 * The background worker calls jobq_reap_expired about once a second; it is
 * also SQL-callable as jobq.reap() for servers without the worker.  Rows
 * are locked FOR UPDATE SKIP LOCKED: a worker's complete, fail or extend in
 * flight on the same job wins, and the reaper never waits for it.  Under
 * READ COMMITTED a complete that waits on the reaper re-checks its lease
 * token and status after the reaper commits, and so changes nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"

#include "jobq.h"

PG_FUNCTION_INFO_V1(jobq_reap);

static SPIPlanPtr plan_reap_lock;

/*
 * Reap up to batch jobs whose lease expired before now; returns how many.
 * SPI must be connected.
 */
int64
jobq_reap_expired(int batch)
{
	Oid			types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	TimestampTz now = GetCurrentTimestamp();
	text	   *error = cstring_to_text("lease expired");
	SPITupleTable *tuptable;
	uint64		n;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(batch);
	/*
	 * Per queue, the expired leases are a prefix of job_running_lease_idx
	 * (queue, lease_expires_at): read only that, queue by queue (LATERAL
	 * leaves the planner no other order).  Asked across queues at once, the
	 * planner walks the whole index, which under a long-held snapshot keeps
	 * an entry for every job claimed since (their dead versions): that walk
	 * grew by a megabyte per second of a busy queue.  A queue's rows beyond
	 * the batch stay locked until this transaction ends and are reaped in
	 * the next one.
	 */
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_reap_lock,
											"SELECT " JOBQ_ATTEMPT_COLUMNS
											" FROM jobq.queue q CROSS JOIN LATERAL"
											" (SELECT j.job_id, j.retry_count, j.max_retries, j.queue,"
											"  j.kind, j.priority, j.attempts, j.worker_id, j.claimed_at,"
											"  j.concurrency_key, j.lease_expires_at"
											"  FROM jobq.job j"
											"  WHERE j.queue = q.name AND j.lease_expires_at < $1"
											"  AND j.status = 'running'"
											"  ORDER BY j.lease_expires_at LIMIT $2"
											"  FOR UPDATE OF j SKIP LOCKED) j"
											" ORDER BY j.lease_expires_at LIMIT $2",
											2, types),
						  values, NULL, SPI_OK_SELECT);

	/* jobq_end_attempt runs more SPI queries: keep our result set */
	tuptable = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		JobqAttempt a;
		const char *status;

		jobq_attempt_from_tuple(tuptable->vals[i], tuptable->tupdesc, &a);
		status = jobq_end_attempt(&a, error, true, NULL, "lease expired", now);
		ereport(LOG,
				(errmsg("jobq: lease of job %lld expired; job is now %s",
						(long long) a.job_id, status),
				 errdetail("Queue \"%s\", kind \"%s\", worker \"%s\", retry %d of %d.",
						   a.queue, a.kind, a.worker_id ? a.worker_id : "",
						   a.retry_count, a.max_retries)));
	}
	return (int64) n;
}

/* jobq.reap(batch) -> number of expired leases reaped */
Datum
jobq_reap(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	int32		batch = PG_ARGISNULL(0) ? 1000 : PG_GETARG_INT32(0);
	int64		n;

	if (batch < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch must be positive")));
	jobq_become_owner(&saved);
	SPI_connect();
	jobq_require(saved.caller, NULL, JOBQ_CAP_ADMINISTER);
	n = jobq_reap_expired(batch);
	SPI_finish();
	jobq_restore_user(&saved);
	PG_RETURN_INT64(n);
}
