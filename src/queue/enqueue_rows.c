/*-------------------------------------------------------------------------
 *
 * queue/enqueue_rows.c
 *	  An enqueue's rows (for jobq.enqueue and jobq.enqueue_many, whose
 *	  arguments queue/enqueue.c checks, and for fired schedules), and
 *	  putting a pending job into jobq.ready or jobq.scheduled (also used by
 *	  retries and reaping).
 *
 * A job's row in jobq.job is the truth about it; a pending job also has one
 * row in jobq.ready (due) or jobq.scheduled (run_at in the future).  The
 * rows are written by queue/job_insert.c, or by statements.  See the
 * install script for the layout and shmem/shm_queue.c for the claim
 * positions.
 *
 * An enqueue and its key reservation write straight through the table
 * access method (job_insert.c), with no statement.  jobq_requeue, which
 * retries and the reaper use, runs a statement: it is not the hot path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/resowner.h"
#include "pgstat.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "acl.h"
#include "args.h"
#include "guc.h"
#include "spi.h"
#include "queue/enqueue_rows.h"
#include "queue/job_insert.h"
#include "queue/settings.h"
#include "shmem/shm_queue.h"

/* Saved plans, one per statement. */
static SPIPlanPtr plan_requeue_ready;
static SPIPlanPtr plan_requeue_scheduled;

/* ----------------------------------------------------------------
 * Entering the pending sets
 * ---------------------------------------------------------------- */

/*
 * Put a pending job into jobq.ready (run_at due) or jobq.scheduled, and
 * note it for the claim positions.
 */
void
jobq_requeue(int64 job_id, const char *queue, const char *kind, int32 priority,
			 const char *concurrency_key, TimestampTz run_at, TimestampTz now)
{
	Oid			types[6] = {TEXTOID, INT4OID, TIMESTAMPTZOID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	values[5] = concurrency_key ? CStringGetTextDatum(concurrency_key) : (Datum) 0;
	nulls[5] = concurrency_key ? ' ' : 'n';
	values[0] = CStringGetTextDatum(queue);
	values[2] = TimestampTzGetDatum(run_at);
	values[3] = Int64GetDatum(job_id);
	values[4] = CStringGetTextDatum(kind);
	if (run_at <= now)
	{
		JobqClaimPos pos = {-priority, run_at, job_id};

		values[1] = Int32GetDatum(-priority);
		jobq_spi_exec(jobq_plan_generic(&plan_requeue_ready,
										"INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id, kind,"
										" concurrency_key) VALUES ($1, $2, $3, $4, $5, $6)",
										6, types),
					  values, nulls, SPI_OK_INSERT);
		jobq_state_note_ready(queue, &pos);
	}
	else
	{
		values[1] = Int32GetDatum(priority);
		jobq_spi_exec(jobq_plan_generic(&plan_requeue_scheduled,
										"INSERT INTO jobq.scheduled (queue, priority, run_at, job_id, kind,"
										" concurrency_key) VALUES ($1, $2, $3, $4, $5, $6)",
										6, types),
					  values, nulls, SPI_OK_INSERT);
		jobq_state_note_scheduled(queue, run_at);
	}
}

/* ----------------------------------------------------------------
 * Enqueue
 * ---------------------------------------------------------------- */

/*
 * Tell the claim positions (shmem/shm_queue.c) about new pending jobs like job,
 * their ids from first_id to last_id.
 */
static void
NoteEnqueued(const JobqNewJob *job, TimestampTz now, int64 first_id, int64 last_id)
{
	if (job->blocked)
		return;					/* in no pending set until its parents finish */
	if (job->run_at <= now)
	{
		JobqClaimPos first = {-job->priority, job->run_at, first_id};
		JobqClaimPos last = {-job->priority, job->run_at, last_id};

		jobq_state_note_ready(job->queue, &first);
		jobq_state_note_ready(job->queue, &last);
	}
	else
		jobq_state_note_scheduled(job->queue, job->run_at);
}

/*
 * Enqueue one validated job (SPI connected).  An idempotency key is
 * reserved first, through the unique index (jobq_reserve_key()), and the
 * job is written under the id the reservation took; when the key is taken, the
 * existing job is returned and nothing is written.
 * A key reserved before the queue exists keeps a duplicate from creating
 * the queue.
 */
void
jobq_enqueue_job(const JobqNewJob *job, TimestampTz now, int64 *job_id, bool *created)
{
	JobqQueue	q;
	bool		has_id = false;
	int32		max_retries;
	Datum		payload = JsonbPGetDatum(job->payload);

	if (job->key != NULL)
	{
		if (jobq_reserve_key(job->kind, job->key, job_id) == JOBQ_KEY_TAKEN)
		{
			*created = false;
			return;
		}
		has_id = true;
	}
	jobq_queue_get_or_create(job->queue, &q);
	max_retries = job->has_max_retries ? job->max_retries : q.max_retries;
	*created = true;
	jobq_insert_pending(job, max_retries, &payload, 1, now, job_id, has_id);
	NoteEnqueued(job, now, *job_id, *job_id);
}

/*
 * Enqueue n jobs without idempotency keys (job->key is NULL) that differ
 * only by payload, straight into the tables (SPI connected).  ids[] gets
 * their ids in payload order.
 */
void
jobq_enqueue_bulk(const JobqNewJob *job, Datum *payloads, int n, TimestampTz now, int64 *ids)
{
	JobqQueue	q;
	int32		max_retries;
	int64		lo;
	int64		hi;

	Assert(job->key == NULL);
	jobq_queue_get_or_create(job->queue, &q);
	max_retries = job->has_max_retries ? job->max_retries : q.max_retries;
	jobq_insert_pending(job, max_retries, payloads, n, now, ids, false);
	lo = hi = ids[0];
	for (int i = 1; i < n; i++)
	{
		lo = Min(lo, ids[i]);
		hi = Max(hi, ids[i]);
	}
	NoteEnqueued(job, now, lo, hi);
}
