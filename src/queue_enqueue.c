/*-------------------------------------------------------------------------
 *
 * queue_enqueue.c
 *	  Enqueue: jobq.enqueue and jobq.enqueue_many, and putting a pending job
 *	  into jobq.ready or jobq.scheduled (also used by retries and reaping).
 *
 * A job's row in jobq.job is the truth about it; a pending job also has one
 * row in jobq.ready (due) or jobq.scheduled (run_at in the future).  See the
 * install script for the layout and shm_queue.c for the claim positions.
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
#include "job_insert.h"
#include "queue_enqueue.h"
#include "queue_settings.h"
#include "shm_queue.h"
#include "spi_plan.h"

/* Saved plans, one per statement. */
static SPIPlanPtr plan_key_reserve;
static SPIPlanPtr plan_key_lookup;
static SPIPlanPtr plan_insert_ready;
static SPIPlanPtr plan_insert_scheduled;
static SPIPlanPtr plan_insert_blocked;
static SPIPlanPtr plan_bulk_blocked;
static SPIPlanPtr plan_bulk_ready;
static SPIPlanPtr plan_bulk_scheduled;
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
 * The statements of jobq_enqueue_job when job_insert.c cannot write the
 * rows, over parameters ($1 job_id or NULL, $2 queue, $3 kind, $4 payload,
 * $5 priority, $6 max_retries, $7 key, $8 run_at, $9 now, $10
 * concurrency_key): CTE j writes the job row and the tail puts it into
 * jobq.ready or jobq.scheduled.
 */
#define JOBQ_JOB_INSERT_AS(status) \
	"WITH j AS (INSERT INTO jobq.job (job_id, queue, kind, payload, priority, status," \
	" max_retries, idempotency_key, concurrency_key, run_at, created_at, updated_at)" \
	" VALUES (COALESCE($1, nextval('jobq.job_id_seq')), $2, $3, $4, $5," \
	" '" status "', $6, $7, $10, $8, $9, $9) RETURNING job_id)"
#define JOBQ_JOB_INSERT JOBQ_JOB_INSERT_AS("pending")
#define JOBQ_BLOCKED_TAIL " SELECT job_id FROM j"
#define JOBQ_READY_TAIL \
	" INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id, kind, concurrency_key)" \
	" SELECT $2, -$5, $8, j.job_id, $3, $10 FROM j RETURNING job_id"
#define JOBQ_SCHEDULED_TAIL \
	" INSERT INTO jobq.scheduled (queue, priority, run_at, job_id, kind, concurrency_key)" \
	" SELECT $2, $5, $8, j.job_id, $3, $10 FROM j RETURNING job_id"

/*
 * Tell the claim positions (shm_queue.c) about new pending jobs like job,
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

/* The job holding idempotency key (kind, key), which a statement found taken. */
static int64
KeyHolder(const char *kind, const char *key)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	values[0] = CStringGetTextDatum(kind);
	values[1] = CStringGetTextDatum(key);
	jobq_spi_exec(jobq_plan_generic(&plan_key_lookup,
											"SELECT job_id FROM jobq.idempotency_key"
											" WHERE kind = $1 AND key = $2",
											2, types),
						  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		elog(ERROR, "jobq: idempotency key conflict without a row");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Enqueue one validated job (SPI connected).  An idempotency key is
 * reserved first, through the unique index (jobq_reserve_key(), or INSERT
 * ... ON CONFLICT DO NOTHING when the table needs SQL), and the job is
 * written under the id the reservation took; when the key is taken, the
 * existing job is returned and nothing is written.
 * A key reserved before the queue exists keeps a duplicate from creating
 * the queue.
 */
void
jobq_enqueue_job(const JobqNewJob *job, TimestampTz now, int64 *job_id, bool *created)
{
	JobqQueue	q;
	bool		has_id = false;
	bool		isnull;
	int32		max_retries;
	Datum		payload = JsonbPGetDatum(job->payload);
	Oid			types[10] = {INT8OID, TEXTOID, TEXTOID, JSONBOID, INT4OID,
	INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[10];
	char		nulls[10];

	if (job->key != NULL)
	{
		/* straight into the unique index where the table allows */
		switch (jobq_reserve_key(job->kind, job->key, job_id))
		{
			case JOBQ_KEY_TAKEN:
				*created = false;
				return;
			case JOBQ_KEY_RESERVED:
				has_id = true;
				break;
			case JOBQ_KEY_SQL:
				break;
		}
	}
	if (job->key != NULL && !has_id)
	{
		Oid			ktypes[2] = {TEXTOID, TEXTOID};
		Datum		kvalues[2];

		kvalues[0] = CStringGetTextDatum(job->kind);
		kvalues[1] = CStringGetTextDatum(job->key);
		jobq_spi_exec(jobq_plan_generic(&plan_key_reserve,
										"INSERT INTO jobq.idempotency_key (kind, key, job_id)"
										" VALUES ($1, $2, nextval('jobq.job_id_seq'))"
										" ON CONFLICT DO NOTHING RETURNING job_id",
										2, ktypes),
					  kvalues, NULL, SPI_OK_INSERT_RETURNING);
		if (SPI_processed == 0)
		{
			*job_id = KeyHolder(job->kind, job->key);
			*created = false;
			return;
		}
		*job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
		has_id = true;
	}
	jobq_queue_get_or_create(job->queue, &q);
	max_retries = job->has_max_retries ? job->max_retries : q.max_retries;
	*created = true;

	/* the rows straight into the tables (job_insert.c) when they allow it */
	if (jobq_insert_pending(job, max_retries, &payload, 1, now, job_id, has_id))
	{
		NoteEnqueued(job, now, *job_id, *job_id);
		return;
	}

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(has_id ? *job_id : 0);
	nulls[0] = has_id ? ' ' : 'n';
	values[1] = CStringGetTextDatum(job->queue);
	values[2] = CStringGetTextDatum(job->kind);
	values[3] = payload;
	values[4] = Int32GetDatum(job->priority);
	values[5] = Int32GetDatum(max_retries);
	values[6] = job->key ? CStringGetTextDatum(job->key) : (Datum) 0;
	nulls[6] = job->key ? ' ' : 'n';
	values[7] = TimestampTzGetDatum(job->run_at);
	values[8] = TimestampTzGetDatum(now);
	values[9] = job->concurrency_key ? CStringGetTextDatum(job->concurrency_key) : (Datum) 0;
	nulls[9] = job->concurrency_key ? ' ' : 'n';
	if (job->blocked)
		jobq_spi_exec(jobq_plan_generic(&plan_insert_blocked,
										JOBQ_JOB_INSERT_AS("blocked") JOBQ_BLOCKED_TAIL, 10, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	else if (job->run_at <= now)
		jobq_spi_exec(jobq_plan_generic(&plan_insert_ready,
										JOBQ_JOB_INSERT JOBQ_READY_TAIL, 10, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	else
		jobq_spi_exec(jobq_plan_generic(&plan_insert_scheduled,
										JOBQ_JOB_INSERT JOBQ_SCHEDULED_TAIL, 10, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	if (SPI_processed != 1)
		elog(ERROR, "jobq: enqueue wrote %llu jobs", (unsigned long long) SPI_processed);
	*job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull));
	NoteEnqueued(job, now, *job_id, *job_id);
}

/* qsort comparator for job ids. */
static int
Int64Compare(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * Enqueue n jobs without idempotency keys (job->key is NULL) that differ
 * only by payload, straight into the tables or in one statement (SPI
 * connected).  ids[] gets their ids in payload order: nextval runs in array
 * order, after the ORDER BY.
 */
void
jobq_enqueue_bulk(const JobqNewJob *job, Datum *payloads, int n, TimestampTz now, int64 *ids)
{
	Oid			types[8] = {TEXTOID, TEXTOID, INT4OID, INT4OID, TEXTOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, JSONBARRAYOID};
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	JobqQueue	q;
	int32		max_retries;
	bool		ready = job->run_at <= now;
	bool		isnull;

	Assert(job->key == NULL);
	jobq_queue_get_or_create(job->queue, &q);
	max_retries = job->has_max_retries ? job->max_retries : q.max_retries;
	if (jobq_insert_pending(job, max_retries, payloads, n, now, ids, false))
	{
		int64		lo = ids[0];
		int64		hi = ids[0];

		for (int i = 1; i < n; i++)
		{
			lo = Min(lo, ids[i]);
			hi = Max(hi, ids[i]);
		}
		NoteEnqueued(job, now, lo, hi);
		return;
	}
	values[0] = CStringGetTextDatum(job->queue);
	values[1] = CStringGetTextDatum(job->kind);
	values[2] = Int32GetDatum(job->priority);
	values[3] = Int32GetDatum(max_retries);
	values[4] = job->concurrency_key ? CStringGetTextDatum(job->concurrency_key) : (Datum) 0;
	nulls[4] = job->concurrency_key ? ' ' : 'n';
	values[5] = TimestampTzGetDatum(job->run_at);
	values[6] = TimestampTzGetDatum(now);
	values[7] = PointerGetDatum(construct_array(payloads, n, JSONBOID, -1, false, TYPALIGN_INT));

	if (job->blocked)
		jobq_spi_exec(jobq_plan_generic(&plan_bulk_blocked,
										"INSERT INTO jobq.job (job_id, queue, kind, payload, priority,"
										" status, max_retries, concurrency_key, run_at, created_at, updated_at)"
										" SELECT nextval('jobq.job_id_seq'), $1, $2, u.p, $3, 'blocked', $4, $5,"
										" $6, $7, $7 FROM unnest($8) WITH ORDINALITY AS u(p, o) ORDER BY u.o"
										" RETURNING job_id",
										8, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	else if (ready)
		jobq_spi_exec(jobq_plan_generic(&plan_bulk_ready,
										"WITH j AS (INSERT INTO jobq.job (job_id, queue, kind, payload, priority,"
										" status, max_retries, concurrency_key, run_at, created_at, updated_at)"
										" SELECT nextval('jobq.job_id_seq'), $1, $2, u.p, $3, 'pending', $4, $5,"
										" $6, $7, $7 FROM unnest($8) WITH ORDINALITY AS u(p, o) ORDER BY u.o"
										" RETURNING job_id)"
										" INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id, kind,"
										" concurrency_key) SELECT $1, -$3, $6, j.job_id, $2, $5 FROM j"
										" RETURNING job_id",
										8, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	else
		jobq_spi_exec(jobq_plan_generic(&plan_bulk_scheduled,
										"WITH j AS (INSERT INTO jobq.job (job_id, queue, kind, payload, priority,"
										" status, max_retries, concurrency_key, run_at, created_at, updated_at)"
										" SELECT nextval('jobq.job_id_seq'), $1, $2, u.p, $3, 'pending', $4, $5,"
										" $6, $7, $7 FROM unnest($8) WITH ORDINALITY AS u(p, o) ORDER BY u.o"
										" RETURNING job_id)"
										" INSERT INTO jobq.scheduled (queue, priority, run_at, job_id, kind,"
										" concurrency_key) SELECT $1, $3, $6, j.job_id, $2, $5 FROM j"
										" RETURNING job_id",
										8, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	if (SPI_processed != (uint64) n)
		elog(ERROR, "jobq: bulk enqueue wrote %llu jobs of %d",
			 (unsigned long long) SPI_processed, n);
	for (int i = 0; i < n; i++)
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	qsort(ids, n, sizeof(int64), Int64Compare);
	NoteEnqueued(job, now, ids[0], ids[n - 1]);
}
