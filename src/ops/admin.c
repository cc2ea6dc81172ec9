/*-------------------------------------------------------------------------
 *
 * ops/admin.c
 *	  Operations from psql: retry, retry_failed, cancel, pause, resume,
 *	  purge.
 *
 * Lock order: a claim locks a job's row in jobq.ready (or a promotion its
 * row in jobq.scheduled) before the job's row in jobq.job.  Cancelling a
 * pending job does the same, removing the set row first, so a cancel and
 * a claim racing for one job never deadlock: whichever removes the set
 * row owns the job's pending state, and a cancel that loses finds the job
 * running and cancels it as such.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "guc.h"
#include "spi.h"
#include "queue/attempt.h"
#include "queue/enqueue_rows.h"
#include "queue/settings.h"
#include "shmem/shm_bgw.h"
#include "shmem/shm_queue.h"
#include "workflow/settle.h"

PG_FUNCTION_INFO_V1(jobq_retry);
PG_FUNCTION_INFO_V1(jobq_retry_failed);
PG_FUNCTION_INFO_V1(jobq_cancel);
PG_FUNCTION_INFO_V1(jobq_release_running);
PG_FUNCTION_INFO_V1(jobq_update_job);
PG_FUNCTION_INFO_V1(jobq_pause);
PG_FUNCTION_INFO_V1(jobq_resume);
PG_FUNCTION_INFO_V1(jobq_purge);

/* How often cancel re-reads a job that changed state under it. */
#define JOBQ_CANCEL_TRIES	10

static SPIPlanPtr plan_retry_queue;
static SPIPlanPtr plan_retry_lock;
static SPIPlanPtr plan_retry_update;
static SPIPlanPtr plan_retry_failed_ids;
static SPIPlanPtr plan_job_state;
static SPIPlanPtr plan_release_running;
static SPIPlanPtr plan_update_job;
static SPIPlanPtr plan_update_lock;
static SPIPlanPtr plan_unready;
static SPIPlanPtr plan_unschedule;
static SPIPlanPtr plan_cancel_pending;
static SPIPlanPtr plan_cancel_running;
static SPIPlanPtr plan_cancel_blocked;
static SPIPlanPtr plan_pause;
static SPIPlanPtr plan_purge;
static SPIPlanPtr plan_purge_depend;

/*
 * Put a failed or cancelled job back to pending with a fresh retry budget
 * (back to blocked, a dependent whose parents have not all finished);
 * false when it is in another state (or does not exist).  The caller must
 * administer the job's queue.
 */
static bool
RetryJob(int64 job_id, TimestampTz now, Oid caller)
{
	Oid			types[3] = {INT8OID, TIMESTAMPTZOID, BOOLOID};
	Datum		values[3];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	char	   *queue,
			   *kind,
			   *concurrency_key;
	int32		priority;

	values[0] = Int64GetDatum(job_id);
	values[1] = TimestampTzGetDatum(now);

	/*
	 * The permission first (a job's state is nobody else's business), from a
	 * plain read: only a job that can be retried gets locked.
	 */
	jobq_spi_exec(jobq_plan(&plan_retry_queue,
							"SELECT queue FROM jobq.job WHERE job_id = $1",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	jobq_require_job(caller, job_id, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
					 JOBQ_CAP_ADMINISTER);

	jobq_spi_exec(jobq_plan(&plan_retry_lock,
							"SELECT queue, kind, priority, concurrency_key FROM jobq.job"
							" WHERE job_id = $1 AND status IN ('failed', 'cancelled')"
							" FOR UPDATE",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	queue = SPI_getvalue(tup, desc, 1);
	kind = SPI_getvalue(tup, desc, 2);
	priority = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	concurrency_key = SPI_getvalue(tup, desc, 4);

	/* a dependent with unfinished parents waits for them again */
	values[2] = BoolGetDatum(jobq_retry_blocks(job_id));
	jobq_spi_exec(jobq_plan(&plan_retry_update,
							"UPDATE jobq.job SET status = CASE WHEN $3 THEN 'blocked' ELSE 'pending' END,"
							" retry_count = 0, run_at = $2, finished_at = NULL, lease_expires_at = NULL,"
							" updated_at = $2"
							" WHERE job_id = $1",
							3, types),
				  values, NULL, SPI_OK_UPDATE);
	if (!DatumGetBool(values[2]))
		jobq_requeue(job_id, queue, kind, priority, concurrency_key, now, now);
	jobq_parent_retried(job_id, now);
	return true;
}

/* jobq.retry(job_id) -> boolean: failed/cancelled -> pending */
Datum
jobq_retry(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	bool		done;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("job_id must not be null")));
	jobq_owner_begin(&saved);
	done = RetryJob(PG_GETARG_INT64(0), GetCurrentTimestamp(), saved.caller);
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}

/* jobq.retry_failed(kind, queue) -> how many failed jobs went back to pending */
Datum
jobq_retry_failed(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	TimestampTz now = GetCurrentTimestamp();
	SPITupleTable *ids;
	uint64		n;
	int64		retried = 0;
	bool		isnull;

	/* NULL: every kind, every queue; an empty or too long name is an error */
	(void) jobq_name_arg(fcinfo, 0, "kind", jobq_max_name_length, true);
	(void) jobq_name_arg(fcinfo, 1, "queue", jobq_max_name_length, true);
	values[0] = PG_ARGISNULL(0) ? (Datum) 0 : PG_GETARG_DATUM(0);
	nulls[0] = PG_ARGISNULL(0) ? 'n' : ' ';
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';

	jobq_owner_begin(&saved);
	jobq_require(saved.caller, PG_ARGISNULL(1) ? NULL : TextDatumGetCString(values[1]),
				 JOBQ_CAP_ADMINISTER);
	jobq_spi_exec(jobq_plan(&plan_retry_failed_ids,
							"SELECT job_id FROM jobq.job WHERE status = 'failed'"
							" AND ($1 IS NULL OR kind = $1) AND ($2 IS NULL OR queue = $2)"
							" ORDER BY job_id",
							2, types),
				  values, nulls, SPI_OK_SELECT);
	ids = SPI_tuptable;
	n = SPI_processed;

	/*
	 * Each job in an SPI connection of its own, so that what its statements
	 * leave behind (their result tables, their copies of names) goes with it:
	 * kept for every job, a batch of 100,000 spent twice the time per job
	 * that a batch of 10,000 did, and its memory grew without bound.
	 */
	for (uint64 i = 0; i < n; i++)
	{
		int64		job_id = DatumGetInt64(SPI_getbinval(ids->vals[i], ids->tupdesc, 1, &isnull));

		CHECK_FOR_INTERRUPTS();
		SPI_connect();
		if (RetryJob(job_id, now, saved.caller))
			retried++;
		SPI_finish();
	}
	jobq_owner_end(&saved);
	PG_RETURN_INT64(retried);
}

/*
 * Take a pending job out of jobq.ready or jobq.scheduled, waiting for a
 * claim or a promotion that holds its row; false if the row was gone: the
 * job changed state meanwhile.  Once out, nothing claims it.
 */
static bool
TakePending(int64 job_id, const char *queue, int32 priority, TimestampTz run_at)
{
	Oid			types[4] = {INT8OID, TEXTOID, INT4OID, TIMESTAMPTZOID};
	Datum		values[4];

	values[0] = Int64GetDatum(job_id);
	values[1] = CStringGetTextDatum(queue);
	values[2] = Int32GetDatum(-priority);
	values[3] = TimestampTzGetDatum(run_at);

	jobq_spi_exec(jobq_plan(&plan_unready,
							"DELETE FROM jobq.ready WHERE queue = $2 AND neg_priority = $3"
							" AND run_at = $4 AND job_id = $1",
							4, types),
				  values, NULL, SPI_OK_DELETE);
	if (SPI_processed > 0)
	{
		JobqClaimPos pos = {-priority, run_at, job_id};

		jobq_state_note_unready(queue, &pos);
		return true;
	}
	jobq_spi_exec(jobq_plan(&plan_unschedule,
							"DELETE FROM jobq.scheduled WHERE queue = $2"
							" AND run_at = $4 AND job_id = $1",
							4, types),
				  values, NULL, SPI_OK_DELETE);
	if (SPI_processed == 0)
		return false;
	jobq_state_note_unscheduled(queue);
	return true;
}

/*
 * Cancel a pending job: take it out of the pending sets, then mark it.
 * Returns false if it was no longer pending.
 */
static bool
CancelPending(int64 job_id, const char *queue, int32 priority,
			  TimestampTz run_at, TimestampTz now)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2];

	if (!TakePending(job_id, queue, priority, run_at))
		return false;
	values[0] = Int64GetDatum(job_id);
	values[1] = TimestampTzGetDatum(now);
	jobq_spi_exec(jobq_plan(&plan_cancel_pending,
							"UPDATE jobq.job SET status = 'cancelled', finished_at = $2,"
							" updated_at = $2"
							" WHERE job_id = $1 AND status = 'pending'",
							2, types),
				  values, NULL, SPI_OK_UPDATE);
	if (SPI_processed == 0)
		elog(ERROR, "jobq: pending job %lld had a set row but was not pending",
			 (long long) job_id);
	return true;
}

/*
 * Cancel a running job: its worker's lease token stops working at once.
 * The attempt goes to the history.  False if it is no longer running.
 */
static bool
CancelRunning(int64 job_id, TimestampTz now)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2];

	values[0] = Int64GetDatum(job_id);
	values[1] = TimestampTzGetDatum(now);
	jobq_spi_exec(jobq_plan(&plan_cancel_running,
							"WITH j AS (UPDATE jobq.job SET status = 'cancelled',"
							" finished_at = $2, updated_at = $2, lease_expires_at = NULL"
							" WHERE job_id = $1 AND status = 'running'"
							" RETURNING job_id, attempts, worker_id, claimed_at)"
							" INSERT INTO jobq.attempt (job_id, attempt, worker_id, started_at,"
							" finished_at, outcome, error)"
							" SELECT job_id, attempts, worker_id, claimed_at, $2, 'cancelled',"
							" 'cancelled by an operator' FROM j",
							2, types),
				  values, NULL, SPI_OK_INSERT);
	return SPI_processed > 0;
}

/* Cancel a job blocked on its parents; false if it is no longer blocked. */
static bool
CancelBlocked(int64 job_id, TimestampTz now)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2];

	values[0] = Int64GetDatum(job_id);
	values[1] = TimestampTzGetDatum(now);
	jobq_spi_exec(jobq_plan(&plan_cancel_blocked,
							"UPDATE jobq.job SET status = 'cancelled', finished_at = $2,"
							" updated_at = $2"
							" WHERE job_id = $1 AND status = 'blocked'",
							2, types),
				  values, NULL, SPI_OK_UPDATE);
	return SPI_processed > 0;
}

/* Running jobs this transaction cancelled: interrupt their executors at commit. */
static List *interrupt_at_commit = NIL;
static bool callback_registered = false;

/* At the end of a transaction that cancelled running jobs. */
static void
CancelXactCallback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (interrupt_at_commit == NIL)
		return;
	if (event == XACT_EVENT_COMMIT)
		foreach(lc, interrupt_at_commit)
			jobq_bgw_interrupt_job(*(int64 *) lfirst(lc));
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
	{
		list_free_deep(interrupt_at_commit);
		interrupt_at_commit = NIL;
	}
}

/*
 * Interrupt the executor that runs job_id in this database, if one does,
 * once this transaction commits (it took the job away from its handler).
 */
static void
InterruptAtCommit(int64 job_id)
{
	MemoryContext old;
	int64	   *id;

	if (!callback_registered)
	{
		RegisterXactCallback(CancelXactCallback, NULL);
		callback_registered = true;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	id = palloc(sizeof(int64));
	*id = job_id;
	interrupt_at_commit = lappend(interrupt_at_commit, id);
	MemoryContextSwitchTo(old);
}

/* What cancel and update_job read of a job before they act on it. */
typedef struct JobqJobState
{
	char	   *status;
	char	   *queue;
	int32		priority;
	TimestampTz run_at;
	char	   *kind;
	char	   *concurrency_key;	/* NULL: none */
}			JobqJobState;

/*
 * Read job_id's state, after checking that caller administers its queue;
 * false when there is no such job.  A plain read: the caller then acts on
 * the state it saw and looks again if the job moved meanwhile.
 */
static bool
ReadJobState(int64 job_id, Oid caller, JobqJobState * st)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;

	values[0] = Int64GetDatum(job_id);
	jobq_spi_exec(jobq_plan(&plan_job_state,
							"SELECT status, queue, priority, run_at, kind, concurrency_key"
							" FROM jobq.job WHERE job_id = $1",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	st->status = SPI_getvalue(tup, desc, 1);
	st->queue = SPI_getvalue(tup, desc, 2);
	st->priority = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	st->run_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull));
	st->kind = SPI_getvalue(tup, desc, 5);
	st->concurrency_key = SPI_getvalue(tup, desc, 6);
	jobq_require_job(caller, job_id, st->queue, JOBQ_CAP_ADMINISTER);
	return true;
}

/* jobq.cancel(job_id) -> boolean: pending/running -> cancelled */
Datum
jobq_cancel(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	int64		job_id;
	TimestampTz now = GetCurrentTimestamp();
	bool		done = false;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("job_id must not be null")));
	job_id = PG_GETARG_INT64(0);
	jobq_refuse_own_job(job_id, "jobq.cancel");

	jobq_owner_begin(&saved);
	for (int i = 0; i < JOBQ_CANCEL_TRIES; i++)
	{
		JobqJobState st;

		if (!ReadJobState(job_id, saved.caller, &st))
			break;
		if (strcmp(st.status, "pending") == 0)
		{
			if (CancelPending(job_id, st.queue, st.priority, st.run_at, now))
			{
				done = true;
				break;
			}
		}
		else if (strcmp(st.status, "running") == 0)
		{
			if (CancelRunning(job_id, now))
			{
				InterruptAtCommit(job_id);
				done = true;
				break;
			}
		}
		else if (strcmp(st.status, "blocked") == 0)
		{
			if (CancelBlocked(job_id, now))
			{
				done = true;
				break;
			}
		}
		else
			break;				/* finished: nothing to cancel */
	}
	if (done)
		jobq_parents_finished(&job_id, 1, now);
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}

/*
 * jobq.release_running(queue, worker_id) -> bigint
 *
 * Every running job of the queue (of that worker, when worker_id is given)
 * back to pending now: no retry spent, the breaker untouched, the old lease
 * tokens fenced, an executor running one interrupted.  For a worker that is
 * known dead or is being drained, instead of waiting for its leases to
 * expire.  Returns how many jobs went back.
 */
Datum
jobq_release_running(PG_FUNCTION_ARGS)
{
	const char *queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	const char *worker_id = jobq_name_arg(fcinfo, 1, "worker_id", jobq_max_name_length, true);
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	JobqSavedUser saved;
	TimestampTz now = GetCurrentTimestamp();
	text	   *error = cstring_to_text("released by jobq.release_running");
	SPITupleTable *jobs;
	uint64		n;

	values[0] = CStringGetTextDatum(queue);
	values[1] = worker_id ? CStringGetTextDatum(worker_id) : (Datum) 0;
	nulls[1] = worker_id ? ' ' : 'n';

	jobq_owner_begin(&saved);
	jobq_require(saved.caller, queue, JOBQ_CAP_ADMINISTER);
	jobq_spi_exec(jobq_plan(&plan_release_running,
							"SELECT " JOBQ_ATTEMPT_COLUMNS
							" FROM jobq.job j JOIN jobq.queue q ON q.name = j.queue"
							" WHERE j.queue = $1 AND j.status = 'running'"
							" AND ($2 IS NULL OR j.worker_id = $2)"
							" ORDER BY j.job_id FOR UPDATE OF j",
							2, types),
				  values, nulls, SPI_OK_SELECT);
	jobs = SPI_tuptable;
	n = SPI_processed;
	for (uint64 i = 0; i < n; i++)
	{
		JobqAttempt attempt;

		jobq_attempt_from_tuple(jobs->vals[i], jobs->tupdesc, &attempt);
		(void) jobq_end_attempt(&attempt, error, true, NULL, "released", now);
		InterruptAtCommit(attempt.job_id);
	}
	jobq_owner_end(&saved);
	PG_RETURN_INT64((int64) n);
}

/*
 * jobq.update_job(job_id, payload, run_at, priority, max_retries) -> boolean
 *
 * Change a pending, failed or cancelled job; a NULL argument leaves its
 * field as it is.  A pending job is taken out of the pending sets and put
 * back under its new run_at and priority, so claims see the change at once;
 * a failed or cancelled one keeps its status (jobq.retry runs it with the
 * new values).  Each change is an attempt-history row of outcome 'edited'
 * (numbered -1, -2, ...: the real attempts keep their numbers) saying who
 * changed what.  False when the job does not exist or is running or
 * completed.  Needs administer on the job's queue.
 */
Datum
jobq_update_job(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	Oid			types[8] = {INT8OID, JSONBOID, TIMESTAMPTZOID, INT4OID, INT4OID,
	TIMESTAMPTZOID, BOOLOID, OIDOID};
	Datum		values[8];
	char		nulls[8] = {' ', 'n', 'n', 'n', 'n', ' ', ' ', ' '};
	int64		job_id;
	bool		has_max_retries;
	int32		max_retries;
	TimestampTz now = GetCurrentTimestamp();
	bool		done = false;

	jobq_require_arg(fcinfo, 0, "job_id");
	job_id = PG_GETARG_INT64(0);
	values[0] = Int64GetDatum(job_id);
	if (!PG_ARGISNULL(1))
	{
		values[1] = PointerGetDatum(jobq_payload_arg(PG_GETARG_DATUM(1), "payload"));
		nulls[1] = ' ';
	}
	if (!PG_ARGISNULL(2))
	{
		values[2] = TimestampTzGetDatum(jobq_check_timestamp_arg(PG_GETARG_TIMESTAMPTZ(2),
																 "run_at"));
		nulls[2] = ' ';
	}
	if (!PG_ARGISNULL(3))
	{
		values[3] = Int32GetDatum(jobq_priority_arg(fcinfo, 3));
		nulls[3] = ' ';
	}
	jobq_max_retries_arg(fcinfo, 4, &has_max_retries, &max_retries);
	if (has_max_retries)
	{
		values[4] = Int32GetDatum(max_retries);
		nulls[4] = ' ';
	}
	values[5] = TimestampTzGetDatum(now);

	jobq_owner_begin(&saved);
	for (int i = 0; i < JOBQ_CANCEL_TRIES && !done; i++)
	{
		JobqJobState st;
		bool		pending;
		bool		isnull;

		if (!ReadJobState(job_id, saved.caller, &st))
			break;
		pending = strcmp(st.status, "pending") == 0;
		if (!pending && strcmp(st.status, "failed") != 0 && strcmp(st.status, "cancelled") != 0 &&
			strcmp(st.status, "blocked") != 0)
			break;				/* running or completed: not changed */
		if (pending && !TakePending(job_id, st.queue, st.priority, st.run_at))
			continue;			/* a claim took it meanwhile: look again */

		values[6] = BoolGetDatum(pending);
		values[7] = ObjectIdGetDatum(saved.caller);
		/* the row first: the edit below then numbers its row after any other */
		jobq_spi_exec(jobq_plan(&plan_update_lock,
								"SELECT 1 FROM jobq.job WHERE job_id = $1 FOR UPDATE", 1, types),
					  values, NULL, SPI_OK_SELECT);
		jobq_spi_exec(jobq_plan(&plan_update_job,
								"WITH o AS (SELECT job_id, payload, run_at, priority, max_retries"
								" FROM jobq.job WHERE job_id = $1),"
								" u AS (UPDATE jobq.job j SET payload = COALESCE($2, j.payload),"
								" run_at = COALESCE($3, j.run_at), priority = COALESCE($4, j.priority),"
								" max_retries = COALESCE($5, j.max_retries), updated_at = $6"
								" FROM o WHERE j.job_id = o.job_id AND CASE WHEN $7 THEN j.status = 'pending'"
								" ELSE j.status IN ('failed', 'cancelled', 'blocked') END"
								" RETURNING j.job_id, j.priority, j.run_at, concat_ws(', ',"
								" CASE WHEN o.payload IS DISTINCT FROM j.payload THEN 'payload replaced' END,"
								" CASE WHEN o.run_at IS DISTINCT FROM j.run_at"
								" THEN format('run_at %s -> %s', o.run_at, j.run_at) END,"
								" CASE WHEN o.priority IS DISTINCT FROM j.priority"
								" THEN format('priority %s -> %s', o.priority, j.priority) END,"
								" CASE WHEN o.max_retries IS DISTINCT FROM j.max_retries"
								" THEN format('max_retries %s -> %s', o.max_retries, j.max_retries) END)"
								" AS what),"
								" e AS (INSERT INTO jobq.attempt (job_id, attempt, finished_at, outcome, error)"
								" SELECT u.job_id, LEAST(0, (SELECT min(a.attempt) FROM jobq.attempt a"
								" WHERE a.job_id = $1)) - 1, $6, 'edited',"
								" format('edited by %s: %s', $8::regrole,"
								" CASE WHEN u.what = '' THEN 'nothing changed' ELSE u.what END) FROM u)"
								" SELECT priority, run_at FROM u",
								8, types),
					  values, nulls, SPI_OK_SELECT);
		if (SPI_processed == 0)
		{
			if (pending)
				elog(ERROR, "jobq: pending job %lld had a set row but was not pending",
					 (long long) job_id);
			continue;			/* retried or purged meanwhile: look again */
		}
		if (pending)
			jobq_requeue(job_id, st.queue, st.kind,
						 DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull)),
						 st.concurrency_key,
						 DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
														   SPI_tuptable->tupdesc, 2, &isnull)),
						 now);
		done = true;
	}
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}

/* Set a queue's paused flag, creating the queue if needed. */
static void
SetPaused(FunctionCallInfo fcinfo, bool paused)
{
	Oid			types[2] = {TEXTOID, BOOLOID};
	Datum		values[2];

	const char *queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	JobqSavedUser saved;

	values[0] = CStringGetTextDatum(queue);
	values[1] = BoolGetDatum(paused);
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, queue, JOBQ_CAP_ADMINISTER);
	jobq_spi_exec(jobq_plan(&plan_pause,
							"INSERT INTO jobq.queue AS q (name, paused) VALUES ($1, $2)"
							" ON CONFLICT (name) DO UPDATE SET paused = $2,"
							" breaker_state = CASE WHEN NOT $2 AND q.breaker_state = 'open'"
							" THEN 'half_open' ELSE q.breaker_state END,"
							" breaker_failures = 0, updated_at = now()",
							2, types),
				  values, NULL, SPI_OK_INSERT);
	jobq_owner_end(&saved);
}

/* jobq.pause(queue): the queue hands out no jobs until resumed */
Datum
jobq_pause(PG_FUNCTION_ARGS)
{
	SetPaused(fcinfo, true);
	PG_RETURN_VOID();
}

/*
 * jobq.resume(queue); a queue paused by its circuit breaker resumes
 * half-open: one job at a time until one succeeds.
 */
Datum
jobq_resume(PG_FUNCTION_ARGS)
{
	SetPaused(fcinfo, false);
	PG_RETURN_VOID();
}

/*
 * jobq.purge(queue, status, older_than) -> jobs deleted
 *
 * Deletes finished jobs (completed, failed or cancelled) of a queue that
 * finished more than older_than ago, with their attempt history.  Their
 * idempotency keys start their retention as when pruned.
 */
Datum
jobq_purge(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	Oid			types[4] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, INTERVALOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	const char *status;
	Interval	key_retention;
	int64		older_than_us;
	int64		n;
	bool		isnull;

	values[0] = CStringGetTextDatum(jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false));
	status = jobq_name_arg(fcinfo, 1, "status", jobq_max_name_length, false);
	if (strcmp(status, "completed") != 0 && strcmp(status, "failed") != 0 &&
		strcmp(status, "cancelled") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("status must be completed, failed or cancelled"),
				 errhint("Cancel pending or running jobs first with jobq.cancel(job_id).")));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("older_than must not be null"),
				 errhint("Use '0' to purge every such job.")));
	older_than_us = jobq_check_interval_arg(PG_GETARG_INTERVAL_P(2), "older_than", 0,
											JOBQ_MAX_INTERVAL_US);
	/* a key's retention of -1 keeps it for ever: its expires_at stays NULL */
	memset(&key_retention, 0, sizeof(key_retention));
	key_retention.time = (int64) jobq_idempotency_retention * USECS_PER_SEC;
	nulls[3] = jobq_idempotency_retention < 0 ? 'n' : ' ';

	values[1] = CStringGetTextDatum(status);
	values[2] = TimestampTzGetDatum(jobq_timestamp_add(GetCurrentTimestamp(),
													   -older_than_us));
	values[3] = IntervalPGetDatum(&key_retention);

	jobq_owner_begin(&saved);
	jobq_require(saved.caller, TextDatumGetCString(values[0]), JOBQ_CAP_ADMINISTER);
#define JOBQ_PURGE_HEAD(victim) \
	"WITH dj AS (DELETE FROM jobq.job j WHERE j.queue = $1" \
	" AND j.status = $2 AND j.finished_at <= $3" victim \
	" RETURNING j.job_id, j.kind, j.idempotency_key, j.finished_at)," \
	" da AS (DELETE FROM jobq.attempt a USING dj WHERE a.job_id = dj.job_id)," \
	" dk AS (UPDATE jobq.idempotency_key k SET expires_at = dj.finished_at + $4" \
	" FROM dj WHERE k.kind = dj.kind AND k.key = dj.idempotency_key" \
	" AND k.job_id = dj.job_id)"

	/*
	 * a purged job's own parents are forgotten; its dependents keep its
	 * outcome; one whose settling was deferred stays until it is settled
	 */
	if (jobq_depend_installed())
		jobq_spi_exec(jobq_plan(&plan_purge_depend,
								JOBQ_PURGE_HEAD(" AND NOT EXISTS (SELECT FROM jobq.settle_deferred s"
												" WHERE s.parent_id = j.job_id)") ","
								" dd AS (DELETE FROM jobq.dependency d USING dj WHERE d.child_id = dj.job_id),"
								" dt AS (DELETE FROM jobq.dependent t USING dj WHERE t.job_id = dj.job_id)"
								" SELECT count(*) FROM dj",
								4, types),
					  values, nulls, SPI_OK_SELECT);
	else
		jobq_spi_exec(jobq_plan(&plan_purge, JOBQ_PURGE_HEAD("") " SELECT count(*) FROM dj",
								4, types),
					  values, nulls, SPI_OK_SELECT);
	n = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	jobq_owner_end(&saved);
	PG_RETURN_INT64(n);
}
