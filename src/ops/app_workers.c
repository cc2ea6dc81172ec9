/*-------------------------------------------------------------------------
 *
 * ops/app_workers.c
 *	  The application's workers: jobq.register_worker, unregister_worker and
 *	  the rows of the view jobq.app_workers.
 *
 * A worker process of the application (the Python or Node library, or any
 * client) registers itself with the queues it works on and what it wants
 * shown (library, version, host, pid, concurrency), and calls
 * register_worker again as its heartbeat, on its lease-renewal cadence:
 * one write per heartbeat, none per job.  Worker ids are per role: a row is
 * keyed by (registering role, worker id), so another role can neither
 * refresh nor remove a role's worker, nor take an id first to keep that
 * role's worker out of the registry.  A role has at most
 * jobq.max_app_workers rows; a new one beyond takes the place of its worker
 * gone longest, or is refused when all are alive.  jobq.app_workers shows a
 * role the workers of the queues it may use, with the jobs each holds now
 * (running under its worker id in those queues), and as gone when not seen
 * for jobq.worker_gone_after; the background worker prunes a row a day
 * after it was last seen (ops/retention.c).  jobq.workers stays jobq's own
 * processes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "guc.h"
#include "spi.h"
#include "ops/app_workers.h"

PG_FUNCTION_INFO_V1(jobq_register_worker);
PG_FUNCTION_INFO_V1(jobq_unregister_worker);
PG_FUNCTION_INFO_V1(jobq_app_worker_rows);

/* Most queues one worker may name. */
#define JOBQ_MAX_WORKER_QUEUES	1000

/*
 * The lock that serialises one role's new registrations in a database: an
 * advisory lock tag whose last field no SQL-level advisory lock uses
 * (pg_advisory_lock takes 1 and 2), so it never meets an application's.
 */
#define JOBQ_LOCKTAG_APP_WORKERS	0x6a71

/* A row is pruned this long after its worker was last seen. */
#define JOBQ_APP_WORKER_KEEP_US	((int64) 24 * 3600 * USECS_PER_SEC)

static SPIPlanPtr plan_refresh;
static SPIPlanPtr plan_count;
static SPIPlanPtr plan_make_room;
static SPIPlanPtr plan_register;
static SPIPlanPtr plan_unregister;
static SPIPlanPtr plan_rows;
static SPIPlanPtr plan_prune;

/*
 * Make room for one more worker of role: at jobq.max_app_workers rows, its
 * workers not seen for longest make way (only gone ones: not seen since
 * gone_before); when too few of its workers are gone, refuse.  Under a lock
 * of (database, role) held to the end of the transaction, so that
 * registrations of one role in concurrent sessions count each other; other
 * roles' registrations do not wait.  SPI connected.
 */
static void
MakeRoomFor(Oid role, TimestampTz gone_before)
{
	LOCKTAG		tag;
	Oid			types[3] = {OIDOID, TIMESTAMPTZOID, INT8OID};
	Datum		values[3];
	bool		isnull;
	int64		have;
	int64		gone;
	int64		excess;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, role, 0, JOBQ_LOCKTAG_APP_WORKERS);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);

	values[0] = ObjectIdGetDatum(role);
	values[1] = TimestampTzGetDatum(gone_before);
	jobq_spi_exec(jobq_plan(&plan_count,
							"SELECT count(*), count(*) FILTER (WHERE last_seen_at < $2)"
							" FROM jobq.app_worker WHERE registered_by = $1",
							2, types),
				  values, NULL, SPI_OK_SELECT);
	have = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	gone = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	excess = have - jobq_max_app_workers + 1;
	if (excess <= 0)
		return;
	if (gone < excess)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many workers registered by role \"%s\"", GetUserNameFromId(role, false)),
				 errdetail_plural("The role has %lld registered worker seen within jobq.worker_gone_after; jobq.max_app_workers is %d per role.",
								  "The role has %lld registered workers seen within jobq.worker_gone_after; jobq.max_app_workers is %d per role.",
								  have - gone, (long long) (have - gone), jobq_max_app_workers),
				 errhint("Unregister workers that stopped (jobq.unregister_worker), reuse worker ids, or ask a superuser to raise jobq.max_app_workers.")));
	values[2] = Int64GetDatum(excess);
	jobq_spi_exec(jobq_plan_generic(&plan_make_room,
									"DELETE FROM jobq.app_worker WHERE ctid = ANY (ARRAY("
									" SELECT w.ctid FROM jobq.app_worker w"
									" WHERE w.registered_by = $1 AND w.last_seen_at < $2"
									" ORDER BY w.last_seen_at LIMIT $3))",
									3, types),
				  values, NULL, SPI_OK_DELETE);
}

/*
 * jobq.register_worker(worker_id, queues, info) -> void
 *
 * Insert this worker, or refresh it (queues, info, last_seen_at): its
 * heartbeat.  The caller must work on (or administer) every queue named.
 * Worker ids are the caller's own: another role's worker of the same id is
 * another row, which this call neither reads nor changes.  A worker not seen
 * for jobq.worker_gone_after counts as started anew.  A new worker beyond
 * jobq.max_app_workers of the caller's takes the place of its worker gone
 * longest, or is refused.
 */
Datum
jobq_register_worker(PG_FUNCTION_ARGS)
{
	const char *worker_id = jobq_name_arg(fcinfo, 0, "worker_id", jobq_max_name_length, false);
	Datum	   *elems;
	bool	   *enulls;
	int			n;
	Jsonb	   *info;
	JobqSavedUser saved;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz gone_before = jobq_timestamp_add(now, -(int64) jobq_worker_gone_after_s * USECS_PER_SEC);
	Oid			types[6] = {TEXTOID, OIDOID, TEXTARRAYOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[6];

	jobq_require_arg(fcinfo, 1, "queues");
	jobq_array_arg(PG_GETARG_ARRAYTYPE_P(1), TEXTOID, "queues", &elems, &enulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queues must not be empty"),
				 errhint("Name the queues the worker claims from.")));
	if (n > JOBQ_MAX_WORKER_QUEUES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("queues has more than %d elements", JOBQ_MAX_WORKER_QUEUES)));
	for (int i = 0; i < n; i++)
		if (enulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("queues[%d] must not be null", i + 1)));
	info = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	if (info != NULL && !JB_ROOT_IS_OBJECT(info))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("info must be a JSON object"),
				 errhint("Pass what the worker wants shown, e.g. '{\"host\": \"web-1\", \"pid\": 4242}'.")));
	if (info != NULL)
		jobq_check_json_size(info, "info", false);

	jobq_owner_begin(&saved);
	for (int i = 0; i < n; i++)
	{
		char	   *queue = TextDatumGetCString(elems[i]);

		if (strlen(queue) == 0 || strlen(queue) > (size_t) jobq_max_name_length)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queues[%d] is not a queue name", i + 1),
					 errdetail("A queue name is 1 to %d bytes long.", jobq_max_name_length)));
		/* work, or administer, which includes it */
		jobq_require(saved.caller, queue, JOBQ_CAP_WORK);
	}
	values[0] = CStringGetTextDatum(worker_id);
	values[1] = ObjectIdGetDatum(saved.caller);
	values[2] = PG_GETARG_DATUM(1);
	values[3] = info != NULL ? JsonbPGetDatum(info) : DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	values[4] = TimestampTzGetDatum(now);
	values[5] = TimestampTzGetDatum(gone_before);
	/* the heartbeat: one statement */
	jobq_spi_exec(jobq_plan_generic(&plan_refresh,
									"UPDATE jobq.app_worker AS w SET queues = $3, info = $4,"
									" started_at = CASE WHEN w.last_seen_at < $6 THEN $5 ELSE w.started_at END,"
									" last_seen_at = $5"
									" WHERE w.registered_by = $2 AND w.worker_id = $1",
									6, types),
				  values, NULL, SPI_OK_UPDATE);
	if (SPI_processed == 0)
	{
		/* a new worker (or one pruned since) */
		MakeRoomFor(saved.caller, gone_before);
		jobq_spi_exec(jobq_plan_generic(&plan_register,
										"INSERT INTO jobq.app_worker AS w (worker_id, registered_by, queues, info,"
										" started_at, last_seen_at)"
										" VALUES ($1, $2, $3, $4, $5, $5)"
										" ON CONFLICT (registered_by, worker_id) DO UPDATE SET queues = $3, info = $4,"
										" started_at = CASE WHEN w.last_seen_at < $6 THEN $5 ELSE w.started_at END,"
										" last_seen_at = $5",
										6, types),
					  values, NULL, SPI_OK_INSERT);
	}
	jobq_owner_end(&saved);
	PG_RETURN_VOID();
}

/* jobq.unregister_worker(worker_id) -> did the caller's worker of that id go? */
Datum
jobq_unregister_worker(PG_FUNCTION_ARGS)
{
	const char *worker_id = jobq_name_arg(fcinfo, 0, "worker_id", jobq_max_name_length, false);
	Oid			types[3] = {TEXTOID, OIDOID, BOOLOID};
	Datum		values[3];
	JobqSavedUser saved;
	bool		done;

	jobq_owner_begin(&saved);
	values[0] = CStringGetTextDatum(worker_id);
	values[1] = ObjectIdGetDatum(saved.caller);
	values[2] = BoolGetDatum(superuser_arg(saved.caller));
	jobq_spi_exec(jobq_plan_generic(&plan_unregister,
									"DELETE FROM jobq.app_worker"
									" WHERE worker_id = $1 AND (registered_by = $2 OR $3)",
									3, types),
				  values, NULL, SPI_OK_DELETE);
	done = SPI_processed > 0;
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}

/* May the asking role use any of the queues of text[] datum queues? */
static bool
MayUseAny(Datum queues)
{
	Datum	   *elems;
	bool	   *enulls;
	int			n;

	deconstruct_array(DatumGetArrayTypeP(queues), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &enulls, &n);
	for (int i = 0; i < n; i++)
		if (!enulls[i] && DatumGetBool(DirectFunctionCall1(jobq_may_use_queue, elems[i])))
			return true;
	return false;
}

/*
 * jobq.app_worker_rows() -> the rows of jobq.app_workers: the workers of
 * the queues the caller may use, each with the jobs running under its id in
 * its queues, and whether it is gone.  The running jobs are read once,
 * through the running-lease index, and counted per queue and worker id
 * (not once per worker: for 1,000 workers over 10,000 running jobs, that
 * took 450-570 ms, this 13-19 ms, with 300,000 more jobs kept).
 */
Datum
jobq_app_worker_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	TimestampTz now = GetCurrentTimestamp();
	JobqSavedUser saved;
	SPITupleTable *rows;
	uint64		n;

	InitMaterializedSRF(fcinfo, 0);
	values[0] = TimestampTzGetDatum(jobq_timestamp_add(now, -(int64) jobq_worker_gone_after_s * USECS_PER_SEC));
	jobq_owner_begin(&saved);
	jobq_spi_exec(jobq_plan(&plan_rows,
							"WITH h AS MATERIALIZED ("
							" SELECT j.queue, j.worker_id, count(*) AS n FROM jobq.job j"
							" WHERE j.lease_expires_at IS NOT NULL AND j.status = 'running'"
							" GROUP BY j.queue, j.worker_id)"
							" SELECT w.worker_id, w.queues, w.info, w.started_at, w.last_seen_at,"
							" COALESCE(sum(h.n), 0)::bigint, w.last_seen_at < $1"
							" FROM jobq.app_worker w"
							" LEFT JOIN h ON h.worker_id = w.worker_id AND h.queue = ANY (w.queues)"
							" GROUP BY w.registered_by, w.worker_id"
							" ORDER BY w.worker_id, w.registered_by",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	rows = SPI_tuptable;
	n = SPI_processed;
	/* before SPI_finish frees the rows; the look-ups keep them (SPI nests) */
	for (uint64 i = 0; i < n; i++)
	{
		Datum		out[7];
		bool		nulls[7];

		for (int c = 0; c < 7; c++)
			out[c] = SPI_getbinval(rows->vals[i], rows->tupdesc, c + 1, &nulls[c]);
		if (!MayUseAny(out[1]))
			continue;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, nulls);
	}
	jobq_owner_end(&saved);
	return (Datum) 0;
}

/*
 * Delete up to batch rows of workers last seen more than a day ago; returns
 * how many.  A database before 0.3.0 has none.  SPI connected.
 */
int64
jobq_prune_app_workers(int batch, TimestampTz now)
{
	Oid			types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];

	if (!OidIsValid(jobq_relid(JOBQ_REL_APP_WORKER)))
		return 0;
	values[0] = TimestampTzGetDatum(jobq_timestamp_add(now, -JOBQ_APP_WORKER_KEEP_US));
	values[1] = Int32GetDatum(batch);
	jobq_spi_exec(jobq_plan_generic(&plan_prune,
									"DELETE FROM jobq.app_worker WHERE ctid = ANY (ARRAY("
									" SELECT w.ctid FROM jobq.app_worker w WHERE w.last_seen_at < $1"
									" LIMIT $2 FOR UPDATE SKIP LOCKED))",
									2, types),
				  values, NULL, SPI_OK_DELETE);
	return (int64) SPI_processed;
}
