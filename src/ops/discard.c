/*-------------------------------------------------------------------------
 *
 * ops/discard.c
 *	  Removing what is no longer wanted: jobq.drop_queue and jobq.discard.
 *
 * jobq.drop_queue(queue, force) removes a queue with everything of it: its
 * settings, grants, schedules, handlers and jobs (with their attempt
 * history; their idempotency keys stay reserved for
 * jobq.idempotency_retention, as when jobs are pruned).  Its unfinished
 * jobs are cancelled first, through jobq.cancel, so that their dependents
 * in other queues settle as for any cancelled parent; running ones only
 * with force, which fences their workers (their lease tokens stop working
 * at once).  A job whose dependents are still to be settled by the
 * background worker (jobq.settle_deferred: another transaction holds one)
 * keeps the queue until then: drop_queue says so and changes nothing.
 *
 * jobq.discard(job_id) deletes one failed or cancelled job with its attempt
 * history, as pruning would, unless a dependent of it has not finished.
 *
 * Both need the administer capability on the queue and change nothing when
 * they refuse.  A queue named '*' can be dropped like any other; the grants
 * on '*' stay (they are grants on every queue).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "guc.h"
#include "spi.h"
#include "contain.h"
#include "ops/discard.h"
#include "queue/settings.h"
#include "workflow/settle.h"

PG_FUNCTION_INFO_V1(jobq_drop_queue);
PG_FUNCTION_INFO_V1(jobq_discard);

/* How long jobq.drop_queue waits for the transactions enqueueing into it. */
#define JOBQ_DROP_LOCK_TIMEOUT_MS	5000

static SPIPlanPtr plan_queue_lock;
static SPIPlanPtr plan_running;
static SPIPlanPtr plan_deferred;
static SPIPlanPtr plan_cancel_all;
static SPIPlanPtr plan_delete_jobs;
static SPIPlanPtr plan_delete_jobs_depend;
static SPIPlanPtr plan_delete_queue;
static SPIPlanPtr plan_job_lock;
static SPIPlanPtr plan_unfinished;
static SPIPlanPtr plan_delete_job;
static SPIPlanPtr plan_delete_job_depend;

/*
 * The deletion of jobs (of queue $1, or job $1 alone): with their attempts,
 * their keys' retention starting ($2: jobq.idempotency_retention, NULL:
 * for ever), their own parents forgotten (0.2.0 on; their dependents keep
 * their outcome).
 */
#define JOBQ_DELETE_HEAD(which) \
	"WITH dj AS (DELETE FROM jobq.job j WHERE " which \
	" RETURNING j.job_id, j.kind, j.idempotency_key, COALESCE(j.finished_at, $3) AS finished_at)," \
	" da AS (DELETE FROM jobq.attempt a USING dj WHERE a.job_id = dj.job_id)," \
	" dk AS (UPDATE jobq.idempotency_key k SET expires_at = dj.finished_at + $2" \
	" FROM dj WHERE k.kind = dj.kind AND k.key = dj.idempotency_key" \
	" AND k.job_id = dj.job_id)"
#define JOBQ_DELETE_DEPEND \
	", dd AS (DELETE FROM jobq.dependency d USING dj WHERE d.child_id = dj.job_id)," \
	" dt AS (DELETE FROM jobq.dependent t USING dj WHERE t.job_id = dj.job_id)"

/* The key retention to start, as an interval datum (with *null for ever). */
static Datum
KeyRetention(Interval *iv, char *null)
{
	memset(iv, 0, sizeof(*iv));
	iv->time = (int64) jobq_idempotency_retention * USECS_PER_SEC;
	*null = jobq_idempotency_retention < 0 ? 'n' : ' ';
	return IntervalPGetDatum(iv);
}

/*
 * Error out when a job of queue (name: its text datum) has dependents whose
 * settling waits in jobq.settle_deferred.
 */
static void
DeferredCheck(const char *queue, Datum name)
{
	Oid			types[1] = {TEXTOID};
	bool		isnull;

	jobq_spi_exec(jobq_plan(&plan_deferred,
							"SELECT count(*) FROM jobq.settle_deferred s JOIN jobq.job j"
							" ON j.job_id = s.parent_id WHERE j.queue = $1",
							1, types),
				  &name, NULL, SPI_OK_SELECT);
	if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("queue \"%s\" has jobs whose dependents are still to be settled",
						jobq_quote_arg(queue)),
				 errdetail("Another transaction holds a dependent of one of them; the background worker settles it once that transaction ends."),
				 errhint("Try again in a moment.")));
}

/*
 * jobq.drop_queue(queue, force) -> how many jobs were removed
 *
 * See the file header.  A queue that does not exist is an error.
 */
Datum
jobq_drop_queue(PG_FUNCTION_ARGS)
{
	const char *queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	bool		force = !PG_ARGISNULL(1) && PG_GETARG_BOOL(1);
	Oid			types[3] = {TEXTOID, INTERVALOID, TIMESTAMPTZOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	Interval	retention;
	JobqSavedUser saved;
	bool		depend;
	bool		isnull;
	int64		running;
	int64		removed;
	TimestampTz started;

	values[0] = CStringGetTextDatum(queue);
	values[1] = KeyRetention(&retention, &nulls[1]);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	jobq_owner_begin(&saved);
	jobq_require(saved.caller, queue, JOBQ_CAP_ADMINISTER);

	/* its statements must see what the enqueues it waits for commit */
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("jobq.drop_queue cannot run under a transaction snapshot"),
				 errdetail("Jobs enqueued since the snapshot would outlive the drop."),
				 errhint("Run it in a READ COMMITTED transaction.")));

	/*
	 * Wait for the transactions enqueueing into it to end (briefly: a client
	 * that keeps one open makes the drop fail, not wait), and keep new ones
	 * out until this one ends: the queue's own lock, then the moment of the
	 * lock of many queues (queue/settings.c), within one timeout.  Forced, it
	 * does not wait: the handlers it fences (their transactions hold the lock
	 * when they enqueued into the queue) are rolled back once it commits.
	 */
	started = GetCurrentTimestamp();
	if (force)
	{
		if (jobq_try_briefly(jobq_queue_lock_for_drop, (void *) queue, 1))
			(void) jobq_queue_drop_wait_many(queue, 0);
	}
	else if (!jobq_try_briefly(jobq_queue_lock_for_drop, (void *) queue, JOBQ_DROP_LOCK_TIMEOUT_MS) ||
			 !jobq_queue_drop_wait_many(queue, Max(JOBQ_DROP_LOCK_TIMEOUT_MS -
												   (int) ((GetCurrentTimestamp() - started) / 1000), 0)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("queue \"%s\" has enqueues in progress", jobq_quote_arg(queue)),
				 errdetail("A transaction that enqueued into it, or into over 16 queues, has not ended within %d ms.",
						   JOBQ_DROP_LOCK_TIMEOUT_MS),
				 errhint("Try again once it ends.")));
	jobq_spi_exec(jobq_plan(&plan_queue_lock,
							"SELECT 1 FROM jobq.queue WHERE name = $1 FOR UPDATE", 1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("queue \"%s\" does not exist", jobq_quote_arg(queue)),
				 errhint("jobq.queues lists the queues.")));

	jobq_spi_exec(jobq_plan(&plan_running,
							"SELECT count(*) FROM jobq.job WHERE queue = $1 AND status = 'running'",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	running = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (running > 0 && !force)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg_plural("queue \"%s\" has %lld running job",
							   "queue \"%s\" has %lld running jobs",
							   running, jobq_quote_arg(queue), (long long) running),
				 errdetail("Their workers still hold leases on them."),
				 errhint("Wait for them, or pass force => true to fence their workers and drop the queue anyway.")));

	depend = jobq_depend_installed();

	/* cancel what is unfinished, so that dependents elsewhere settle */
	jobq_spi_exec(jobq_plan(&plan_cancel_all,
							"SELECT count(jobq.cancel(job_id)) FROM jobq.job"
							" WHERE queue = $1 AND status IN ('pending', 'running', 'blocked')",
							1, types),
				  values, NULL, SPI_OK_SELECT);

	/*
	 * Dependents whose settling waits for the worker (jobq.settle_deferred:
	 * another transaction holds them, from before the drop or met by its
	 * cancels) would stay blocked for good once their parent is deleted:
	 * refuse, which rolls the cancels back too
	 */
	if (depend)
		DeferredCheck(queue, values[0]);

	if (depend)
		jobq_spi_exec(jobq_plan(&plan_delete_jobs_depend,
								JOBQ_DELETE_HEAD("j.queue = $1") JOBQ_DELETE_DEPEND
								" SELECT count(*) FROM dj",
								3, types),
					  values, nulls, SPI_OK_SELECT);
	else
		jobq_spi_exec(jobq_plan(&plan_delete_jobs,
								JOBQ_DELETE_HEAD("j.queue = $1") " SELECT count(*) FROM dj",
								3, types),
					  values, nulls, SPI_OK_SELECT);
	removed = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	jobq_spi_exec(jobq_plan(&plan_delete_queue,
							"WITH dr AS (DELETE FROM jobq.ready WHERE queue = $1),"
							" ds AS (DELETE FROM jobq.scheduled WHERE queue = $1),"
							" dw AS (DELETE FROM jobq.rate_window WHERE queue = $1),"
							" dp AS (DELETE FROM jobq.permission WHERE queue = $1 AND $1 <> '*'),"
							" dc AS (DELETE FROM jobq.schedule WHERE queue = $1),"
							" dh AS (DELETE FROM jobq.handler WHERE queue = $1)"
							" DELETE FROM jobq.queue WHERE name = $1",
							1, types),
				  values, NULL, SPI_OK_DELETE);
	jobq_owner_end(&saved);
	PG_RETURN_INT64(removed);
}

/*
 * jobq.discard(job_id) -> was the job deleted
 *
 * False for a job that does not exist or is not failed or cancelled; an
 * error for one with a dependent that has not finished.
 */
Datum
jobq_discard(PG_FUNCTION_ARGS)
{
	Oid			types[3] = {INT8OID, INTERVALOID, TIMESTAMPTZOID};
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};
	Interval	retention;
	JobqSavedUser saved;
	char	   *queue;
	char	   *status;
	bool		depend;
	bool		isnull;
	bool		done;
	int64		job_id;

	jobq_require_arg(fcinfo, 0, "job_id");
	job_id = PG_GETARG_INT64(0);
	values[0] = Int64GetDatum(job_id);
	values[1] = KeyRetention(&retention, &nulls[1]);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	jobq_owner_begin(&saved);
	jobq_spi_exec(jobq_plan(&plan_job_lock,
							"SELECT queue, status FROM jobq.job WHERE job_id = $1 FOR UPDATE",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		jobq_owner_end(&saved);
		PG_RETURN_BOOL(false);
	}
	queue = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	jobq_require_job(saved.caller, job_id, queue, JOBQ_CAP_ADMINISTER);
	if (strcmp(status, "failed") != 0 && strcmp(status, "cancelled") != 0)
	{
		jobq_owner_end(&saved);
		PG_RETURN_BOOL(false);
	}

	depend = jobq_depend_installed();
	if (depend)
	{
		jobq_spi_exec(jobq_plan(&plan_unfinished,
								"SELECT (SELECT count(*) FROM jobq.dependency d JOIN jobq.job c ON c.job_id = d.child_id"
								" WHERE d.parent_id = $1 AND c.status NOT IN ('completed', 'failed', 'cancelled'))"
								" + (SELECT count(*) FROM jobq.settle_deferred s WHERE s.parent_id = $1)",
								1, types),
					  values, NULL, SPI_OK_SELECT);
		if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("job %lld has dependents that have not finished", (long long) job_id),
					 errdetail("A dependent keeps its parents until it has finished (or, held by another transaction, until the background worker has settled it)."),
					 errhint("Finish, cancel or discard its dependents first (jobq.workflow_jobs lists them).")));
		jobq_spi_exec(jobq_plan(&plan_delete_job_depend,
								JOBQ_DELETE_HEAD("j.job_id = $1") JOBQ_DELETE_DEPEND " SELECT count(*) FROM dj",
								3, types),
					  values, nulls, SPI_OK_SELECT);
	}
	else
		jobq_spi_exec(jobq_plan(&plan_delete_job,
								JOBQ_DELETE_HEAD("j.job_id = $1") " SELECT count(*) FROM dj",
								3, types),
					  values, nulls, SPI_OK_SELECT);
	done = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) > 0;
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}
