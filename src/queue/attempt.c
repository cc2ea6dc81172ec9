/*-------------------------------------------------------------------------
 *
 * queue/attempt.c
 *	  How an attempt ends: jobq.complete, complete_many, fail, snooze, and
 *	  the running job's extend and checkpoint; retries with backoff, the
 *	  dead-letter state and the queue's circuit breaker.  The reaper ends
 *	  expired attempts through the same jobq_end_attempt.
 *
 * A completion writes its jobs' rows straight through the table access
 * method (job_lease.c); fail, snooze, extend and checkpoint run statements,
 * as they are not the hot path.
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
#include "backoff.h"
#include "catalog.h"
#include "guc.h"
#include "spi.h"
#include "queue/attempt.h"
#include "queue/enqueue_rows.h"
#include "queue/job_lease.h"
#include "queue/settings.h"
#include "shmem/shm_queue.h"
#include "workflow/settle.h"

PG_FUNCTION_INFO_V1(jobq_complete);
PG_FUNCTION_INFO_V1(jobq_complete_many);
PG_FUNCTION_INFO_V1(jobq_fail);
PG_FUNCTION_INFO_V1(jobq_snooze);
PG_FUNCTION_INFO_V1(jobq_release);
PG_FUNCTION_INFO_V1(jobq_extend);
PG_FUNCTION_INFO_V1(jobq_checkpoint);

/* In BreakerFailure: does this failure open the breaker? */
#define JOBQ_BREAKER_OPENS \
	"(breaker_state = 'half_open' OR (breaker_state = 'throttled'" \
	" AND breaker_failures + 1 >= breaker_threshold))"

/* Saved plans, one per statement. */
static SPIPlanPtr plan_breaker_fail;
static SPIPlanPtr plan_breaker_success;
static SPIPlanPtr plan_fail_lock;
static SPIPlanPtr plan_attempt_details;
static SPIPlanPtr plan_end_attempt;
static SPIPlanPtr plan_end_attempt_queue;
static SPIPlanPtr plan_extend;
static SPIPlanPtr plan_checkpoint;

/* ----------------------------------------------------------------
 * Complete, fail, extend, checkpoint
 * ---------------------------------------------------------------- */

/*
 * The arguments of complete and checkpoint, (job_id, lease_token, a JSON
 * document or NULL), into values/nulls [0..2]; [3] is now.
 */
static void
TokenJsonArgs(FunctionCallInfo fcinfo, const char *jsonname, Datum *values, char *nulls)
{
	jobq_require_arg(fcinfo, 0, "job_id");
	jobq_require_arg(fcinfo, 1, "lease_token");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	nulls[0] = nulls[1] = nulls[3] = ' ';
	if (PG_ARGISNULL(2))
		nulls[2] = 'n';
	else
	{
		jobq_check_json_size(PG_GETARG_JSONB_P(2), jsonname, false);
		values[2] = PG_GETARG_DATUM(2);
		nulls[2] = ' ';
	}
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());
}

/*
 * After jobs of a queue completed: a success closes a throttled or half-open
 * breaker and resets its count of consecutive failures.  Queues without a
 * breaker, or with nothing to reset, cost a look at the settings cache.
 */
static void
BreakerSuccess(const char *queue)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	JobqQueue	q;

	if (!jobq_queue_get(queue, &q) || !q.breaker_armed)
		return;
	values[0] = CStringGetTextDatum(queue);
	jobq_spi_exec(jobq_plan_generic(&plan_breaker_success,
									"UPDATE jobq.queue SET breaker_failures = 0,"
									" breaker_state = CASE WHEN breaker_state = 'open' THEN 'open'"
									" ELSE 'closed' END, updated_at = now()"
									" WHERE name = $1 AND breaker_threshold IS NOT NULL"
									" AND (breaker_failures > 0 OR breaker_state IN ('throttled', 'half_open'))",
									1, types),
				  values, NULL, SPI_OK_UPDATE);
}

/*
 * Jobs of the distinct queues completed: check the caller may work on each
 * of them (else the error takes the completions back), then tell their
 * breakers.
 */
static void
CompletedQueues(Oid caller, List *queues)
{
	ListCell   *lc;

	foreach(lc, queues)
		jobq_require(caller, (char *) lfirst(lc), JOBQ_CAP_WORK);
	foreach(lc, queues)
		BreakerSuccess((char *) lfirst(lc));
}

/*
 * The jobs ids[] (not null) may have just completed: settle the dependents
 * of those that did (workflow/depend.c passes over the others).
 */
static void
SettleCompleted(const Datum *ids, const bool *id_nulls, int n, TimestampTz now)
{
	int64	   *parents = palloc(sizeof(int64) * Max(n, 1));
	int			k = 0;

	for (int i = 0; i < n; i++)
		if (!id_nulls[i])
			parents[k++] = DatumGetInt64(ids[i]);
	jobq_parents_finished(parents, k, now);
	pfree(parents);
}

/*
 * Complete n jobs straight in the table (queue/job_lease.c) as the caller.
 * *done: how many completed.
 */
static void
CompleteDirect(Oid caller, const Datum *ids, const bool *id_nulls, const Datum *tokens,
			   const bool *token_nulls, const Datum *results, const bool *result_nulls,
			   int n, TimestampTz now, uint64 *done)
{
	List	   *queues;

	jobq_complete_direct(ids, id_nulls, tokens, token_nulls, results, result_nulls,
						 n, now, &queues, done);
	CompletedQueues(caller, queues);
	if (*done > 0)
		SettleCompleted(ids, id_nulls, n, now);
}

/*
 * Run the statement sql of cache, over (job_id, lease_token, a JSON document
 * named jsonname, now) from the arguments, as the extension owner: it
 * updates the caller's running job and returns its queue, on which the
 * caller must be allowed to work.  Whether the job was updated.
 */
static bool
TokenStatement(FunctionCallInfo fcinfo, const char *jsonname, SPIPlanPtr *cache,
			   const char *sql)
{
	Oid			types[4] = {INT8OID, INT8OID, JSONBOID, TIMESTAMPTZOID};
	Datum		values[4];
	char		nulls[4];
	bool		done;
	JobqSavedUser saved;

	TokenJsonArgs(fcinfo, jsonname, values, nulls);

	jobq_owner_begin(&saved);
	jobq_spi_exec(jobq_plan_generic(cache, sql, 4, types),
				  values, nulls, SPI_OK_UPDATE_RETURNING);
	done = SPI_processed > 0;
	if (done)
		jobq_require(saved.caller, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
					 JOBQ_CAP_WORK);
	jobq_owner_end(&saved);
	return done;
}

/* jobq.complete(job_id, lease_token, result) -> boolean */
Datum
jobq_complete(PG_FUNCTION_ARGS)
{
	Datum		values[4];
	char		nulls[4];
	bool		no_null = false;
	bool		result_null = true;
	uint64		done;
	JobqSavedUser saved;

	TokenJsonArgs(fcinfo, "result", values, nulls);
	if (nulls[2] == ' ')
		result_null = false;
	jobq_refuse_own_job(DatumGetInt64(values[0]), "jobq.complete");
	jobq_owner_begin(&saved);
	CompleteDirect(saved.caller, &values[0], &no_null, &values[1], &no_null,
				   &values[2], &result_null, 1,
				   DatumGetTimestampTz(values[3]), &done);
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done > 0);
}

/* jobq.complete_many(job_ids[], lease_tokens[], results[]) -> integer */
Datum
jobq_complete_many(PG_FUNCTION_ARGS)
{
	Datum	   *elems;
	bool	   *elem_nulls;
	Datum	   *ids;
	bool	   *id_nulls;
	Datum	   *tokens;
	bool	   *token_nulls;
	Datum	   *results = NULL;
	bool	   *result_nulls = NULL;
	int			n,
				ntokens;
	uint64		done;
	TimestampTz now = GetCurrentTimestamp();
	JobqSavedUser saved;

	/* array_agg over an empty claim gives NULLs: nothing to complete */
	if (PG_ARGISNULL(0) && PG_ARGISNULL(1))
		PG_RETURN_INT32(0);
	jobq_require_arg(fcinfo, 0, "job_ids");
	jobq_require_arg(fcinfo, 1, "lease_tokens");
	jobq_array_arg(PG_GETARG_ARRAYTYPE_P(0), INT8OID, "job_ids", &ids, &id_nulls, &n);
	jobq_array_arg(PG_GETARG_ARRAYTYPE_P(1), INT8OID, "lease_tokens", &tokens, &token_nulls,
				   &ntokens);
	jobq_check_same_length(n, "job_ids", ntokens, "lease_tokens");
	for (int i = 0; i < n; i++)
		if (!id_nulls[i])
			jobq_refuse_own_job(DatumGetInt64(ids[i]), "jobq.complete_many");
	if (n > jobq_max_batch)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("job_ids has more than %d elements", jobq_max_batch),
				 errhint("The limit is set by jobq.max_batch.")));
	if (!PG_ARGISNULL(2))
	{
		int			nresults;

		jobq_array_arg(PG_GETARG_ARRAYTYPE_P(2), JSONBOID, "results", &elems, &elem_nulls, &nresults);
		jobq_check_same_length(n, "job_ids", nresults, "results");
		for (int i = 0; i < nresults; i++)
			if (!elem_nulls[i])
				jobq_check_json_size(DatumGetJsonbP(elems[i]),
									 psprintf("results[%d]", i + 1), false);
		results = elems;
		result_nulls = elem_nulls;
	}

	jobq_owner_begin(&saved);
	CompleteDirect(saved.caller, ids, id_nulls, tokens, token_nulls, results,
				   result_nulls, n, now, &done);
	jobq_owner_end(&saved);
	PG_RETURN_INT32((int32) done);
}

/* Clip a text to limit bytes on a character boundary of the server encoding. */
static text *
ClipText(text *t, int limit)
{
	int			len = VARSIZE_ANY_EXHDR(t);

	if (len <= limit)
		return t;
	len = jobq_cliplen(VARDATA_ANY(t), len, limit);
	return cstring_to_text_with_len(VARDATA_ANY(t), len);
}

/* Clip an error message to jobq.max_error_length bytes. */
static text *
ClipError(text *error)
{
	return ClipText(error, jobq_max_error_length);
}

/*
 * A failed attempt for a queue's circuit breaker (when it has one): count
 * consecutive failures; at breaker_threshold a closed breaker drops the
 * queue to one job at a time (throttled), a throttled one pauses the queue
 * (open), recording why and when; in half_open (after a resume) the first
 * failure opens it again.  Every expression reads the locked row, so
 * concurrent failures count exactly.
 */
static void
BreakerFailure(const char *queue, text *error, TimestampTz now)
{
	Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[3];
	JobqQueue	q;

	if (!jobq_queue_get(queue, &q) || !q.has_breaker)
		return;

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(now);
	values[2] = PointerGetDatum(error);
	jobq_spi_exec(jobq_plan_generic(&plan_breaker_fail,
									"UPDATE jobq.queue SET"
									" breaker_state = CASE WHEN breaker_state = 'half_open' THEN 'open'"
									" WHEN breaker_failures + 1 < breaker_threshold THEN breaker_state"
									" WHEN breaker_state = 'closed' THEN 'throttled' ELSE 'open' END,"
									" breaker_failures = CASE WHEN breaker_state <> 'half_open'"
									" AND breaker_failures + 1 < breaker_threshold"
									" THEN breaker_failures + 1 ELSE 0 END,"
									" paused = paused OR " JOBQ_BREAKER_OPENS ","
									" breaker_tripped_at = CASE WHEN " JOBQ_BREAKER_OPENS
									" THEN $2 ELSE breaker_tripped_at END,"
									" breaker_reason = CASE WHEN " JOBQ_BREAKER_OPENS
									" THEN $3 ELSE breaker_reason END,"
									" updated_at = $2"
									" WHERE name = $1 AND breaker_threshold IS NOT NULL"
									" AND breaker_state <> 'open'",
									3, types),
				  values, NULL, SPI_OK_UPDATE);
}

/* Read the JOBQ_ATTEMPT_COLUMNS of a locked running job from an SPI tuple. */
void
jobq_attempt_from_tuple(HeapTuple tup, TupleDesc desc, JobqAttempt *a)
{
	bool		isnull;

	a->job_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	a->retry_count = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	a->max_retries = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	a->queue = SPI_getvalue(tup, desc, 4);
	a->kind = SPI_getvalue(tup, desc, 5);
	a->priority = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	a->attempts = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
	a->worker_id = SPI_getvalue(tup, desc, 8);
	a->claimed_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 9, &a->claimed_null));
	/* in int64 range whatever jobq.queue holds (see jobq_timestamp_add) */
	a->backoff_base_us = Min(DatumGetFloat8(SPI_getbinval(tup, desc, 10, &isnull)),
							 (double) JOBQ_MAX_INTERVAL_US);
	a->backoff_cap_us = Min(DatumGetFloat8(SPI_getbinval(tup, desc, 11, &isnull)),
							(double) JOBQ_MAX_INTERVAL_US);
	a->backoff_jitter = DatumGetFloat8(SPI_getbinval(tup, desc, 12, &isnull));
	a->concurrency_key = SPI_getvalue(tup, desc, 13);
}

/*
 * The attempt's row and the job's update; 0.3.7 on, the row names the
 * job's queue (qcol, qval: jobq.kind_stats reads a queue's failures).
 */
#define JOBQ_END_ATTEMPT_SQL(qcol, qval) \
	"WITH a AS (INSERT INTO jobq.attempt (job_id, attempt, worker_id," \
	" started_at, finished_at, outcome, error" qcol ")" \
	" VALUES ($1, $2, $3, $4, $5, $11, $6" qval "))" \
	" UPDATE jobq.job SET status = $7, retry_count = $8," \
	" run_at = COALESCE($9, run_at)," \
	" last_error = CASE WHEN $11 IN ('snoozed', 'released') THEN last_error ELSE $6 END," \
	" finished_at = $10, updated_at = $5, lease_expires_at = NULL," \
	" claimed_at = CASE WHEN $7 = 'pending' THEN NULL ELSE claimed_at END," \
	" worker_id = CASE WHEN $7 = 'pending' THEN NULL ELSE worker_id END" \
	" WHERE job_id = $1"

/*
 * End an attempt that did not succeed: record it in jobq.attempt, then
 * re-queue the job with retry_count + 1 (after retry_in, or the queue's
 * backoff) while it is retryable and has retries left, else fail it for
 * good.  Outcome "snoozed" re-queues after retry_in, "released" at once,
 * without spending a retry or counting for the circuit breaker.  The job row
 * must be locked by the caller.  Returns the new status.
 */
const char *
jobq_end_attempt(const JobqAttempt *a, text *error, bool retryable,
				 const Interval *retry_in, const char *outcome, TimestampTz now)
{
	Oid			types[12] = {INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID};
	Datum		values[12];
	char		nulls[12];

	/* a snooze or a hand-back re-queues without spending a retry */
	bool		snooze = strcmp(outcome, "snoozed") == 0 ||
	strcmp(outcome, "released") == 0;
	bool		retry = snooze || (retryable && a->retry_count < a->max_retries);
	TimestampTz run_at = now;
	const char *status = retry ? "pending" : "failed";

	if (retry && retry_in != NULL)
		run_at = jobq_timestamp_add(now, jobq_interval_usecs(retry_in));
	else if (retry && !snooze)
		run_at = jobq_timestamp_add(now,
									jobq_backoff_usecs((int64) a->backoff_base_us,
													   (int64) a->backoff_cap_us,
													   a->backoff_jitter, a->retry_count,
													   pg_prng_double(&pg_global_prng_state)));

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(a->job_id);
	values[1] = Int32GetDatum(a->attempts);
	values[2] = a->worker_id ? CStringGetTextDatum(a->worker_id) : (Datum) 0;
	nulls[2] = a->worker_id ? ' ' : 'n';
	values[3] = TimestampTzGetDatum(a->claimed_at);
	nulls[3] = a->claimed_null ? 'n' : ' ';
	values[4] = TimestampTzGetDatum(now);
	values[5] = PointerGetDatum(error);
	values[6] = CStringGetTextDatum(status);
	values[7] = Int32GetDatum(retry && !snooze ? a->retry_count + 1 : a->retry_count);
	values[8] = TimestampTzGetDatum(run_at);
	nulls[8] = retry ? ' ' : 'n';
	values[9] = TimestampTzGetDatum(now);
	nulls[9] = retry ? 'n' : ' ';
	values[10] = CStringGetTextDatum(outcome);
	values[11] = CStringGetTextDatum(a->queue);
	if (jobq_attempt_names_queue())
		jobq_spi_exec(jobq_plan_generic(&plan_end_attempt_queue,
										JOBQ_END_ATTEMPT_SQL(", queue", ", $12"), 12, types),
					  values, nulls, SPI_OK_UPDATE);
	else
		jobq_spi_exec(jobq_plan_generic(&plan_end_attempt, JOBQ_END_ATTEMPT_SQL("", ""), 11, types),
					  values, nulls, SPI_OK_UPDATE);
	if (retry)
		jobq_requeue(a->job_id, a->queue, a->kind, a->priority, a->concurrency_key,
					 run_at, now);
	else
		jobq_parents_finished(&a->job_id, 1, now);
	if (!snooze)
		BreakerFailure(a->queue, error, now);
	return status;
}

/*
 * Lock a running job by id and lease token for an attempt's end, and check
 * that caller may work on its queue; false for a stale or wrong token.
 * SPI connected.
 */
static bool
LockRunningJob(int64 job_id, int64 lease_token, Oid caller, JobqAttempt *attempt)
{
	Oid			types[2] = {INT8OID, INT8OID};
	Datum		values[2];

	values[0] = Int64GetDatum(job_id);
	values[1] = Int64GetDatum(lease_token);
	jobq_spi_exec(jobq_plan_generic(&plan_fail_lock,
									"SELECT " JOBQ_ATTEMPT_COLUMNS
									" FROM jobq.job j JOIN jobq.queue q ON q.name = j.queue"
									" WHERE j.job_id = $1 AND j.lease_token = $2 AND j.status = 'running'"
									" FOR UPDATE OF j",
									2, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	jobq_attempt_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, attempt);
	jobq_require(caller, attempt->queue, JOBQ_CAP_WORK);
	return true;
}

/*
 * Keep details (a stack trace, already clipped) with attempt of job_id,
 * which jobq_end_attempt just recorded.  SPI connected.
 */
static void
AttemptDetails(int64 job_id, int32 attempt, text *details)
{
	Oid			types[3] = {INT8OID, INT4OID, TEXTOID};
	Datum		values[3];

	values[0] = Int64GetDatum(job_id);
	values[1] = Int32GetDatum(attempt);
	values[2] = PointerGetDatum(details);
	jobq_spi_exec(jobq_plan_generic(&plan_attempt_details,
									"UPDATE jobq.attempt SET details = $3"
									" WHERE job_id = $1 AND attempt = $2",
									3, types),
				  values, NULL, SPI_OK_UPDATE);
}

/*
 * End the attempt of the running job named by the call's (job_id,
 * lease_token) arguments, as the job's queue's worker; false for a stale
 * or wrong token.  *status gets the job's new status.
 */
static bool
EndAttemptByToken(FunctionCallInfo fcinfo, text *error, text *details, bool retryable,
				  const Interval *retry_in, const char *outcome, TimestampTz now,
				  const char **status)
{
	JobqAttempt attempt;
	JobqSavedUser saved;
	bool		found;

	jobq_owner_begin(&saved);
	found = LockRunningJob(PG_GETARG_INT64(0), PG_GETARG_INT64(1), saved.caller, &attempt);
	if (found)
	{
		*status = jobq_end_attempt(&attempt, error, retryable, retry_in, outcome, now);
		if (details != NULL)
			AttemptDetails(attempt.job_id, attempt.attempts, details);
	}
	jobq_owner_end(&saved);
	return found;
}

/*
 * jobq.fail(job_id, lease_token, error, retryable, retry_in, details) -> new
 * status
 *
 * With retries left and retryable, the job goes back to pending with
 * retry_count + 1, due after retry_in or the queue's backoff; otherwise it
 * is failed for good.  The attempt, its error and its details (a stack
 * trace, at most jobq.max_details_length bytes; 0.3.0 on) go to
 * jobq.attempt.
 */
Datum
jobq_fail(PG_FUNCTION_ARGS)
{
	text	   *error;
	text	   *details = NULL;
	bool		retryable;
	Interval   *retry_in = NULL;
	const char *status;

	jobq_require_arg(fcinfo, 0, "job_id");
	jobq_require_arg(fcinfo, 1, "lease_token");
	jobq_require_arg(fcinfo, 2, "error");
	jobq_require_arg(fcinfo, 3, "retryable");
	jobq_refuse_own_job(PG_GETARG_INT64(0), "jobq.fail");
	error = ClipError(PG_GETARG_TEXT_PP(2));
	retryable = PG_GETARG_BOOL(3);
	if (PG_NARGS() > 5 && !PG_ARGISNULL(5))
		details = ClipText(PG_GETARG_TEXT_PP(5), jobq_max_details_length);
	if (!PG_ARGISNULL(4))
	{
		retry_in = PG_GETARG_INTERVAL_P(4);
		(void) jobq_check_interval_arg(retry_in, "retry_in", 0, JOBQ_MAX_INTERVAL_US);
	}

	if (!EndAttemptByToken(fcinfo, error, details, retryable, retry_in, "failed",
						   GetCurrentTimestamp(), &status))
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(status));
}

/*
 * jobq.snooze(job_id, lease_token, delay) -> the job's new run_at
 *
 * Put a running job back to pending, due after delay, without spending a
 * retry (a rate limit, a resource not there yet).  NULL for a stale token.
 */
Datum
jobq_snooze(PG_FUNCTION_ARGS)
{
	Interval   *delay;
	TimestampTz now;
	const char *status;

	jobq_require_arg(fcinfo, 0, "job_id");
	jobq_require_arg(fcinfo, 1, "lease_token");
	jobq_require_arg(fcinfo, 2, "delay");
	jobq_refuse_own_job(PG_GETARG_INT64(0), "jobq.snooze(job_id, lease_token, delay)");
	delay = PG_GETARG_INTERVAL_P(2);
	(void) jobq_check_interval_arg(delay, "delay", 0, JOBQ_MAX_INTERVAL_US);

	now = GetCurrentTimestamp();
	if (!EndAttemptByToken(fcinfo, cstring_to_text("snoozed"), NULL, true, delay, "snoozed",
						   now, &status))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(jobq_timestamp_add(now, jobq_interval_usecs(delay)));
}

/*
 * jobq.release(job_id, lease_token) -> boolean
 *
 * The holder hands its running job back: pending now, no retry spent, the
 * breaker untouched, the token fenced (the job is no longer running under
 * it).  Worker libraries call it on graceful shutdown for the jobs they did
 * not start; fail would spend a retry and dead-letter a max_retries = 0 job.
 * False for a stale or wrong token.
 */
Datum
jobq_release(PG_FUNCTION_ARGS)
{
	const char *status;

	jobq_require_arg(fcinfo, 0, "job_id");
	jobq_require_arg(fcinfo, 1, "lease_token");
	jobq_refuse_own_job(PG_GETARG_INT64(0), "jobq.release");
	PG_RETURN_BOOL(EndAttemptByToken(fcinfo, cstring_to_text("released by its worker"), NULL,
									 true, NULL, "released", GetCurrentTimestamp(),
									 &status));
}

/* jobq.extend(job_id, lease_token, lease) -> new lease expiry */
Datum
jobq_extend(PG_FUNCTION_ARGS)
{
	Oid			types[4] = {INT8OID, INT8OID, TIMESTAMPTZOID, INTERVALOID};
	Datum		values[4];
	Datum		result = (Datum) 0;
	bool		isnull = true;
	JobqSavedUser saved;

	jobq_require_arg(fcinfo, 0, "job_id");
	jobq_require_arg(fcinfo, 1, "lease_token");
	jobq_require_arg(fcinfo, 2, "lease");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = IntervalPGetDatum(jobq_positive_interval_arg(fcinfo, 2, "lease"));

	jobq_owner_begin(&saved);
	jobq_spi_exec(jobq_plan_generic(&plan_extend,
									"UPDATE jobq.job SET lease_expires_at = $3 + $4, updated_at = $3"
									" WHERE job_id = $1 AND lease_token = $2 AND status = 'running'"
									" RETURNING lease_expires_at, queue",
									4, types),
				  values, NULL, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed > 0)
	{
		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		jobq_require(saved.caller, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
					 JOBQ_CAP_WORK);
	}
	jobq_owner_end(&saved);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* jobq.checkpoint(job_id, lease_token, data) -> boolean */
Datum
jobq_checkpoint(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(TokenStatement(fcinfo, "data", &plan_checkpoint,
								  "UPDATE jobq.job SET checkpoint = $3, updated_at = $4"
								  " WHERE job_id = $1 AND lease_token = $2 AND status = 'running'"
								  " RETURNING queue"));
}
