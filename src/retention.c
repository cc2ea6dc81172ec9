/*-------------------------------------------------------------------------
 *
 * retention.c
 *	  Pruning: finished jobs leave jobq.job after their queue's retention
 *	  (completed and cancelled: retention_completed, default 1 day; failed:
 *	  retention_failed, default 30 days), and idempotency keys leave
 *	  jobq.idempotency_key once their job is pruned and
 *	  jobq.idempotency_retention has passed since it finished.
 *
 * Work is done in batches of a few hundred rows, each batch one short
 * transaction in the background worker, with SKIP LOCKED so pruning never
 * waits on (or blocks) anything else.  A pruned job's attempt history goes
 * with it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"

#include "jobq.h"

PG_FUNCTION_INFO_V1(jobq_prune);

static SPIPlanPtr plan_prune_jobs;
static SPIPlanPtr plan_prune_keys;

/*
 * Delete up to batch finished jobs past retention and up to batch expired
 * keys; returns the number of rows deleted.  SPI must be connected.
 */
int64
jobq_prune_finished(int batch)
{
	Oid			types[3] = {TIMESTAMPTZOID, INT4OID, INTERVALOID};
	Datum		values[3];
	Interval	key_retention;
	int64		deleted;
	bool		isnull;

	memset(&key_retention, 0, sizeof(key_retention));
	key_retention.time = (int64) jobq_idempotency_retention * USECS_PER_SEC;
	values[0] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[1] = Int32GetDatum(batch);
	values[2] = IntervalPGetDatum(&key_retention);

	/*
	 * The first condition walks job_finished_idx up to the shortest
	 * retention of any queue; the second applies each job's own queue.
	 */
	jobq_spi_exec(jobq_plan(&plan_prune_jobs,
							"WITH victims AS (SELECT j.job_id FROM jobq.job j"
							" JOIN jobq.queue q ON q.name = j.queue"
							" WHERE j.finished_at < $1 - (SELECT least(min(retention_completed),"
							" min(retention_failed)) FROM jobq.queue)"
							" AND ((j.status IN ('completed', 'cancelled')"
							" AND j.finished_at < $1 - q.retention_completed)"
							" OR (j.status = 'failed' AND j.finished_at < $1 - q.retention_failed))"
							" ORDER BY j.finished_at LIMIT $2 FOR UPDATE OF j SKIP LOCKED),"
							" dj AS (DELETE FROM jobq.job j USING victims v"
							" WHERE j.job_id = v.job_id"
							" RETURNING j.job_id, j.kind, j.idempotency_key, j.finished_at),"
							" da AS (DELETE FROM jobq.attempt a USING dj WHERE a.job_id = dj.job_id),"
							" dk AS (UPDATE jobq.idempotency_key k SET expires_at = dj.finished_at + $3"
							" FROM dj WHERE k.kind = dj.kind AND k.key = dj.idempotency_key"
							" AND k.job_id = dj.job_id)"
							" SELECT count(*) FROM dj",
							3, types),
				  values, NULL, SPI_OK_SELECT);
	deleted = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	/* through idempotency_key_expires_idx: the expired keys only */
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_prune_keys,
											"DELETE FROM jobq.idempotency_key WHERE ctid = ANY (ARRAY("
											" SELECT k.ctid FROM jobq.idempotency_key k"
											" WHERE k.expires_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED))",
											2, types),
						  values, NULL, SPI_OK_DELETE);
	deleted += SPI_processed;
	return deleted;
}

/* jobq.prune(batch) -> rows deleted */
Datum
jobq_prune(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	int32		batch;
	int64		deleted;

	if (PG_ARGISNULL(0) || PG_GETARG_INT32(0) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch must be a positive integer")));
	batch = PG_GETARG_INT32(0);
	jobq_become_owner(&saved);
	SPI_connect();
	jobq_require(saved.caller, NULL, JOBQ_CAP_ADMINISTER);
	deleted = jobq_prune_finished(batch);
	SPI_finish();
	jobq_restore_user(&saved);
	PG_RETURN_INT64(deleted);
}
