/*-------------------------------------------------------------------------
 *
 * bgw/handler_proc.c
 *	  Jobs run inside the database: the executor background workers that
 *	  run the handlers registered with jobq.register_handler
 *	  (ops/handler_registry.c).
 *
 * While a database has handlers, its jobq worker keeps
 * jobq.executors executor processes running (bgw/worker.c).  An executor
 * claims one job of a handled kind at a time (woken through its latch when
 * such a job becomes ready), then, in one transaction:
 *
 *	- switches to the role that registered the handler (never silently a
 *	  superuser: that needs allow_superuser => true at registration), with
 *	  search_path = pg_catalog, pg_temp and a statement timeout of what is
 *	  left of the job's lease;
 *	- calls the handler in a subtransaction;
 *	- on success, completes the job with the handler's result.  The
 *	  handler's database work and the completion commit together, so a
 *	  successful job's effects happen exactly once: if the job was
 *	  cancelled or its lease taken meanwhile, complete returns false and
 *	  the whole transaction, handler effects included, rolls back;
 *	- on error, rolls the subtransaction back and fails the attempt with
 *	  the usual retry rules; errors of the classes 22 (data exception), 23
 *	  (integrity constraint violation), 42 (syntax error or access rule
 *	  violation), 44 (with check option), 54 (program limit exceeded, such
 *	  as a result over jobq.max_result_size) and P0004 (assert_failure) are
 *	  permanent: the job fails at once.  A handler that calls
 *	  jobq.snooze(delay) is re-queued after delay without spending a retry.
 *
 * Before every claim, and again before every run, the executor checks that
 * the handler's role may still run it (the administer capability on the
 * queue, EXECUTE on the function, USAGE on its schema): a handler whose role
 * lost one of them is not run (its jobs wait; the log says why), and a job
 * claimed just before the revoke fails with 42501.
 *
 * jobq.cancel of a job an executor runs sends that executor SIGINT, which
 * interrupts the handler (the ordinary query-cancel path).  A handler that
 * catches the cancel, or the statement timeout at the end of its lease, is
 * terminated by the launcher a few seconds later (bgw/launcher.c).
 *
 * Tenants share executors, so nothing passes from one job to the next:
 * after every job the executor discards its session state as DISCARD ALL
 * does (temporary objects, GUCs, prepared statements, cursors, advisory
 * locks, LISTEN, sequence state).  While a handler runs, jobq's own
 * capability checks ask about the handler's role (acl.c), exactly as when
 * that role connects.  The roles handlers run as share the executors (at
 * most executors / roles each), and any error of a step -- a
 * claim, a handler, the completion of a result too large -- ends in that
 * job's failure or a log line, never in the executor's exit.
 *
 * Locking: the executor slots in shared memory are guarded by the worker
 * lock (shmem/shm_bgw.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/extension.h"
#include "commands/prepare.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/portal.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "compat.h"
#include "guc.h"
#include "spi.h"
#include "subxact.h"
#include "bgw/handler_proc.h"
#include "ops/handler_registry.h"
#include "shmem/shm_bgw.h"
#include "shmem/shm_queue.h"
#include "workflow/depend.h"

/* SQLSTATE of the error jobq.snooze(delay) raises to end a handler. */
#define ERRCODE_JOBQ_SNOOZE		MAKE_SQLSTATE('J','Q','S','N','Z')

PG_FUNCTION_INFO_V1(jobq_snooze_handler);

PGDLLEXPORT void jobq_executor_main(Datum main_arg);

/* True in an executor process. */
static bool in_executor = false;

/* Set by jobq.snooze(delay) inside a handler. */
static bool snooze_requested = false;
static Interval snooze_delay;

static SPIPlanPtr plan_handlers;
static SPIPlanPtr plan_exec_claim;
static SPIPlanPtr plan_context;
static SPIPlanPtr plan_exec_complete;
static SPIPlanPtr plan_exec_fail;
static SPIPlanPtr plan_exec_fail_details;
static SPIPlanPtr plan_exec_snooze;

/*
 * jobq.snooze(delay): inside a handler, end it and re-queue its job after
 * delay without spending a retry.  It works by raising an error that the
 * executor recognizes, so the handler's work so far is rolled back.
 */
Datum
jobq_snooze_handler(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("delay must not be null")));
	if (!in_executor)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("jobq.snooze(delay) can only be called from a job handler"),
				 errhint("A worker outside the database calls jobq.snooze(job_id, lease_token, delay).")));
	(void) jobq_check_interval_arg(PG_GETARG_INTERVAL_P(0), "delay", 0, JOBQ_MAX_INTERVAL_US);
	snooze_delay = *PG_GETARG_INTERVAL_P(0);
	snooze_requested = true;
	ereport(ERROR,
			(errcode(ERRCODE_JOBQ_SNOOZE),
			 errmsg("job snoozed")));
	PG_RETURN_VOID();			/* not reached */
}

/* ----------------------------------------------------------------
 * The executor process
 * ---------------------------------------------------------------- */

/* One registered handler. */
typedef struct JobqHandler
{
	char	   *kind;
	char	   *queue;
	Oid			handler;
	int			nargs;
	Oid			run_as;
	bool		allow_superuser;
} JobqHandler;

/* A claimed job, as the executor needs it. */
typedef struct JobqExecJob
{
	int64		job_id;
	int64		lease_token;
	char	   *kind;
	Datum		payload;
	TimestampTz lease_expires_at;
} JobqExecJob;

/* Is this SQLSTATE one whose class jobq treats as permanent? */
static bool
PermanentError(int sqlerrcode)
{
	char	   *state = unpack_sql_state(sqlerrcode);

	return strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0 ||
		strncmp(state, "42", 2) == 0 || strncmp(state, "44", 2) == 0 ||
		strncmp(state, "54", 2) == 0 || strcmp(state, "P0004") == 0;
}

/*
 * Read the handlers (in a transaction, SPI connected) into cxt: those whose
 * function and role exist (a dropped role's handler runs as no one; pruning
 * removes it).
 */
static List *
LoadHandlers(MemoryContext cxt)
{
	List	   *handlers = NIL;

	jobq_spi_exec(jobq_plan(&plan_handlers,
							"SELECT h.kind, h.queue, p.oid, p.pronargs, h.run_as,"
							" h.allow_superuser FROM jobq.handler h"
							" JOIN pg_catalog.pg_proc p ON p.oid = to_regprocedure(h.handler)"
							" JOIN pg_catalog.pg_roles r ON r.oid = h.run_as"
							" ORDER BY h.queue, h.kind",
							0, NULL),
				  NULL, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext old = MemoryContextSwitchTo(cxt);
		JobqHandler *h = palloc(sizeof(JobqHandler));
		bool		isnull;

		h->kind = SPI_getvalue(tup, desc, 1);
		h->queue = SPI_getvalue(tup, desc, 2);
		h->handler = DatumGetObjectId(SPI_getbinval(tup, desc, 3, &isnull));
		h->nargs = DatumGetInt16(SPI_getbinval(tup, desc, 4, &isnull));
		h->run_as = DatumGetObjectId(SPI_getbinval(tup, desc, 5, &isnull));
		h->allow_superuser = DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull));
		handlers = lappend(handlers, h);
		MemoryContextSwitchTo(old);
		jobq_state_mark_handled(h->queue);
	}
	return handlers;
}

/* Most (kind, reason) pairs an executor remembers having logged. */
#define JOBQ_REFUSALS_KEPT	1024

/* A refusal logged: the hash of its kind and reason, and when. */
typedef struct JobqRefusalLogged
{
	uint64		reason;			/* hash key */
	TimestampTz at;
} JobqRefusalLogged;

/*
 * Log that handler h is not run, and why, at most once a minute for each
 * kind and reason, however many handlers are refused (an executor checks
 * each one at every round), so handlers left behind do not flood the log.
 */
static void
ExecLogRefusal(const JobqHandler *h, const char *why)
{
	static HTAB *logged = NULL;
	uint64		reason = hash_bytes_extended((const unsigned char *) why, strlen(why),
											 hash_bytes_extended((const unsigned char *) h->kind,
																 strlen(h->kind), 0));
	TimestampTz now = GetCurrentTimestamp();
	JobqRefusalLogged *entry;
	bool		found;

	if (logged == NULL || hash_get_num_entries(logged) >= JOBQ_REFUSALS_KEPT)
	{
		HASHCTL		ctl;

		if (logged != NULL)
			hash_destroy(logged);
		ctl.keysize = sizeof(uint64);
		ctl.entrysize = sizeof(JobqRefusalLogged);
		ctl.hcxt = TopMemoryContext;
		logged = hash_create("jobq refused handlers", 64, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	entry = hash_search(logged, &reason, HASH_ENTER, &found);
	if (found && !TimestampDifferenceExceeds(entry->at, now, 60 * 1000))
		return;
	entry->at = now;
	ereport(LOG,
			(errmsg("jobq executor: the handler of kind \"%s\" in queue \"%s\" is not run: %s",
					h->kind, h->queue, why),
			 errdetail("Its jobs wait for a worker. An administrator of the queue can remove the handler with jobq.unregister_handler, or grant the role what it lacks.")));
}

/*
 * Claim one job of queue of the kinds whose handlers run as role and may
 * still run (SPI connected); false when there is none.
 */
static bool
ExecClaim(const char *queue, Oid role, List *handlers, JobqExecJob *job, MemoryContext cxt)
{
	Oid			types[3] = {TEXTOID, TEXTOID, TEXTARRAYOID};
	Datum		values[3];
	Datum	   *kinds;
	int			nkinds = 0;
	ListCell   *lc;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	MemoryContext old;

	kinds = palloc(sizeof(Datum) * list_length(handlers));
	foreach(lc, handlers)
	{
		JobqHandler *h = (JobqHandler *) lfirst(lc);
		char	   *why;

		if (strcmp(h->queue, queue) != 0 || h->run_as != role)
			continue;
		/* a right of the role's revoked since it registered: not run */
		why = jobq_handler_refusal(h->run_as, h->queue, h->handler);
		if (why != NULL)
		{
			ExecLogRefusal(h, why);
			continue;
		}
		kinds[nkinds++] = CStringGetTextDatum(h->kind);
	}
	if (nkinds == 0)
		return false;
	values[0] = CStringGetTextDatum(queue);
	values[1] = CStringGetTextDatum(psprintf("jobq executor %d", MyProcPid));
	values[2] = PointerGetDatum(construct_array(kinds, nkinds, TEXTOID, -1, false, TYPALIGN_INT));
	jobq_spi_exec(jobq_plan_generic(&plan_exec_claim,
									"SELECT job_id, lease_token, kind, payload, lease_expires_at"
									" FROM jobq.claim($1, $2, 1, NULL, $3)",
									3, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	old = MemoryContextSwitchTo(cxt);
	job->job_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	job->lease_token = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
	job->kind = SPI_getvalue(tup, desc, 3);
	job->payload = PointerGetDatum(DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 4, &isnull)));
	job->lease_expires_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 5, &isnull));
	MemoryContextSwitchTo(old);
	return true;
}

/* The job description a two-argument handler receives (SPI connected). */
static Datum
JobContext(const JobqExecJob *job, Oid run_as)
{
	Oid			types[2] = {INT8OID, JSONBOID};
	Datum		values[2];
	bool		isnull;

	values[0] = Int64GetDatum(job->job_id);
	values[1] = JsonbPGetDatum(jobq_parents_json(job->job_id, run_as));
	jobq_spi_exec(jobq_plan(&plan_context,
							"SELECT jsonb_build_object('job_id', job_id, 'lease_token', lease_token,"
							" 'kind', kind, 'queue', queue, 'retry_count', retry_count,"
							" 'max_retries', max_retries, 'checkpoint', checkpoint,"
							" 'enqueued_at', created_at, 'lease_expires_at', lease_expires_at) || $2"
							" FROM jobq.job WHERE job_id = $1",
							2, types),
				  values, NULL, SPI_OK_SELECT);
	return SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull),
							 false, -1);
}

/*
 * The longer story of a handler's error, for jobq.attempt.details: its
 * DETAIL, HINT and CONTEXT (the stack of PL/pgSQL and SQL functions it was
 * raised in), or NULL when it has none.
 */
static char *
ErrorStory(const ErrorData *edata)
{
	StringInfoData buf;

	initStringInfo(&buf);
	if (edata->detail)
		appendStringInfo(&buf, "DETAIL:  %s\n", edata->detail);
	if (edata->hint)
		appendStringInfo(&buf, "HINT:  %s\n", edata->hint);
	if (edata->context)
		appendStringInfo(&buf, "CONTEXT:  %s\n", edata->context);
	return buf.len > 0 ? buf.data : NULL;
}

/*
 * Fail job's attempt with the error edata, retryable by its class, its story
 * as the attempt's details where the database has them (0.3.0 on; SPI
 * connected).
 */
static void
ExecFail(const JobqExecJob *job, const ErrorData *edata)
{
	Oid			types[5] = {INT8OID, INT8OID, TEXTOID, BOOLOID, TEXTOID};
	Oid			fail_args[6] = {INT8OID, INT8OID, TEXTOID, BOOLOID, INTERVALOID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	char	   *message = psprintf("%s: %s", unpack_sql_state(edata->sqlerrcode),
								   edata->message ? edata->message : "");
	char	   *story = ErrorStory(edata);

	values[0] = Int64GetDatum(job->job_id);
	values[1] = Int64GetDatum(job->lease_token);
	values[2] = CStringGetTextDatum(message);
	values[3] = BoolGetDatum(!PermanentError(edata->sqlerrcode));
	values[4] = story ? CStringGetTextDatum(story) : (Datum) 0;
	nulls[4] = story ? ' ' : 'n';
	if (OidIsValid(LookupFuncName(list_make2(makeString("jobq"), makeString("fail")),
								  6, fail_args, true)))
		jobq_spi_exec(jobq_plan_generic(&plan_exec_fail_details,
										"SELECT jobq.fail($1, $2, $3, $4, NULL, $5)",
										5, types),
					  values, nulls, SPI_OK_SELECT);
	else
		jobq_spi_exec(jobq_plan_generic(&plan_exec_fail,
										"SELECT jobq.fail($1, $2, $3, $4)",
										4, types),
					  values, nulls, SPI_OK_SELECT);
}

/* A handler's call: the handler, the job, its context; the result. */
typedef struct JobqHandlerCall
{
	const JobqHandler *h;
	const JobqExecJob *job;
	Datum		context;		/* the job as jsonb, for a handler of two
								 * arguments */
	Datum		result;			/* the handler's result, copied */
	bool		result_null;
} JobqHandlerCall;

/*
 * Call the handler with the job's payload (and context), in the handler's
 * subtransaction (subxact.c); its result is copied out of it.
 */
static bool
HandlerCall(void *arg)
{
	JobqHandlerCall *call = (JobqHandlerCall *) arg;

	LOCAL_FCINFO(fcinfo, 2);
	FmgrInfo	flinfo;

	fmgr_info(call->h->handler, &flinfo);
	InitFunctionCallInfoData(*fcinfo, &flinfo, call->h->nargs, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = call->job->payload;
	fcinfo->args[0].isnull = false;
	fcinfo->args[1].value = call->context;
	fcinfo->args[1].isnull = false;
	call->result = FunctionCallInvoke(fcinfo);
	call->result_null = fcinfo->isnull;
	if (!call->result_null)
		call->result = PointerGetDatum(DatumGetJsonbPCopy(call->result));
	return true;
}

/*
 * Run one claimed job's handler and finish the job, all in the current
 * transaction (SPI connected).  Returns false when the job could not be
 * completed (cancelled, lease lost): the caller must roll back.
 */
static bool
RunHandler(const JobqHandler *h, const JobqExecJob *job)
{
	Oid			save_userid;
	int			save_sec;
	int			save_nestlevel;
	JobqHandlerCall call;
	ErrorData  *edata;
	Datum		result;
	bool		result_null;
	Datum		context = (h->nargs == 2) ? JobContext(job, h->run_as) : (Datum) 0;
	long		secs;
	int			usecs;
	bool		completed = true;
	char		role_oid[16];

	if (superuser_arg(h->run_as) && !h->allow_superuser)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("handler of kind \"%s\" would run as a superuser", h->kind)));
	/* a right revoked since the claim: the attempt fails with 42501 */
	jobq_handler_rights_check(h->run_as, h->queue, h->handler);

	/* the handler's identity, search_path and time limit */
	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(h->run_as, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	/* for jobq.granted_queue (a view can ask no C function who asks) */
	snprintf(role_oid, sizeof(role_oid), "%u", h->run_as);
	(void) set_config_option("jobq.handler_role", role_oid,
							 PGC_INTERNAL, PGC_S_OVERRIDE, GUC_ACTION_SAVE, true, 0, false);
	TimestampDifference(GetCurrentTimestamp(), job->lease_expires_at, &secs, &usecs);
	snooze_requested = false;
	jobq_bgw_executor_set_job(job->job_id, job->lease_expires_at);
	jobq_acl_set_handler_role(h->run_as);
	jobq_acl_set_handler_job(job->job_id);
	enable_timeout_after(STATEMENT_TIMEOUT, Max((int) Min(secs * 1000 + usecs / 1000, INT_MAX), 1));

	call.h = h;
	call.job = job;
	call.context = context;
	call.result = (Datum) 0;
	call.result_null = true;
	edata = jobq_subxact_run(HandlerCall, &call);
	result = call.result;
	result_null = call.result_null;

	disable_timeout(STATEMENT_TIMEOUT, false);
	jobq_acl_set_handler_role(InvalidOid);
	jobq_acl_set_handler_job(0);
	jobq_bgw_executor_set_job(0, 0);
	AtEOXact_GUC(false, save_nestlevel);
	SetUserIdAndSecContext(save_userid, save_sec);

	if (edata == NULL)
	{
		Oid			types[3] = {INT8OID, INT8OID, JSONBOID};
		Datum		values[3];
		char		nulls[3] = {' ', ' ', ' '};
		bool		isnull;

		values[0] = Int64GetDatum(job->job_id);
		values[1] = Int64GetDatum(job->lease_token);
		values[2] = result;
		nulls[2] = result_null ? 'n' : ' ';
		jobq_spi_exec(jobq_plan_generic(&plan_exec_complete,
										"SELECT jobq.complete($1, $2, $3)",
										3, types),
					  values, nulls, SPI_OK_SELECT);
		completed = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (!completed)
			ereport(LOG,
					(errmsg("jobq executor: job %lld was cancelled or its lease was taken while its handler ran; rolling its effects back",
							(long long) job->job_id)));
	}
	else if (edata->sqlerrcode == ERRCODE_JOBQ_SNOOZE && snooze_requested)
	{
		Oid			types[3] = {INT8OID, INT8OID, INTERVALOID};
		Datum		values[3];

		values[0] = Int64GetDatum(job->job_id);
		values[1] = Int64GetDatum(job->lease_token);
		values[2] = IntervalPGetDatum(&snooze_delay);
		jobq_spi_exec(jobq_plan_generic(&plan_exec_snooze,
										"SELECT jobq.snooze($1, $2, $3)",
										3, types),
					  values, NULL, SPI_OK_SELECT);
	}
	else
	{
		ExecFail(job, edata);
		FreeErrorData(edata);
	}
	return completed;
}

/* Start a transaction with a snapshot, for one step of the executor. */
static void
ExecBegin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * ExecBegin for a step of jobq's own (loading handlers, claiming, failing a
 * job), not a handler's: its lock waits last JOBQ_WORKER_LOCK_TIMEOUT at
 * most, as the database worker's do, so that a session holding one of
 * jobq's tables locked does not hold the executor (and its place among
 * jobq.max_workers) for as long as it holds the lock; the step fails and is
 * tried again next round.
 */
static void
ExecBeginJobq(const char *activity)
{
	ExecBegin(activity);
	(void) set_config_option("lock_timeout", CppAsString2(JOBQ_WORKER_LOCK_TIMEOUT),
							 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/* Commit (or, when !commit, roll back) one step. */
static void
ExecEnd(bool commit)
{
	if (commit)
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
	}
	else
		AbortCurrentTransaction();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * After an error escaped a step: abort its transaction, and return a copy
 * of the error (in cxt) with the error state cleared, so the executor goes
 * on.
 */
static ErrorData *
ExecRecover(MemoryContext cxt)
{
	ErrorData  *edata;

	HOLD_INTERRUPTS();
	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	AbortOutOfAnyTransaction();
	jobq_acl_set_handler_role(InvalidOid);
	MemoryContextSwitchTo(cxt);
	RESUME_INTERRUPTS();
	pgstat_report_activity(STATE_IDLE, NULL);
	return edata;
}

/* The name under which a queue's failing claims are logged. */
static char *
ExecClaimUnit(const char *queue)
{
	return psprintf("claiming from queue \"%s\" for its handlers", queue);
}

/*
 * Log a claim's error once per queue and cause (and when the queue's claims
 * work again), as a unit of the worker's: a queue that keeps failing does
 * not flood the log, whatever other queues fail between its rounds (this
 * remembered the last queue only, and two queues failing in turn, their
 * rows held by a tenant, logged every round: a review's find).
 */
static void
ExecLogError(const char *queue, ErrorData *edata)
{
	char	   *unit = ExecClaimUnit(queue);

	jobq_unit_failed(unit, edata);
	pfree(unit);
	FreeErrorData(edata);
}

/*
 * Discard everything a handler may have left in this session, as DISCARD
 * ALL does (without dropping saved plans, which hold no tenant state): held
 * cursors, GUCs, prepared statements, LISTEN, session advisory locks,
 * temporary objects, sequence state.  The next job, perhaps another role's,
 * starts from a clean session.  An error here ends the executor: it must
 * not run a job in a session it could not clean.
 */
static void
ExecResetSession(void)
{
	ExecBegin("jobq executor: resetting the session");
	PortalHashTableDeleteAll();
	ResetAllOptions();
	DropAllPreparedStatements();
	Async_UnlistenAll();
	LockReleaseAll(USER_LOCKMETHOD, true);
	ResetTempTableNamespace();
	ResetSequenceCaches();
	ExecEnd(true);
	/* a handler's SET application_name, rolled back, left it empty */
	pgstat_report_appname("jobq executor");
}

/*
 * Run job with handler h: the handler and the job's completion in one
 * transaction.  An error that escapes (the completion refused the result,
 * say) rolls all of it back and fails the job with that error in a
 * transaction of its own; if even that fails, the lease expires and the
 * reaper takes the job back.
 */
static void
ExecRunJob(const JobqHandler *h, const JobqExecJob *job, MemoryContext cxt)
{
	ErrorData  *edata = NULL;

	PG_TRY();
	{
		bool		ok = false;

		ExecBegin(psprintf("jobq executor: running job %lld (%s)", (long long) job->job_id, job->kind));
		if (jobq_lock_extension())
		{
			SPI_connect();
			ok = RunHandler(h, job);
			SPI_finish();
		}
		ExecEnd(ok);
	}
	PG_CATCH();
	{
		edata = ExecRecover(cxt);
	}
	PG_END_TRY();
	jobq_bgw_executor_set_job(0, 0);

	if (edata != NULL)
	{
		PG_TRY();
		{
			ExecBeginJobq(psprintf("jobq executor: failing job %lld", (long long) job->job_id));
			if (jobq_lock_extension())
			{
				SPI_connect();
				ExecFail(job, edata);
				SPI_finish();
			}
			ExecEnd(true);
		}
		PG_CATCH();
		{
			ErrorData  *again = ExecRecover(cxt);

			ereport(LOG,
					(errmsg("jobq executor: could not fail job %lld after its handler's error: %s",
							(long long) job->job_id, again->message ? again->message : ""),
					 errdetail("The handler's error was: %s. The job's lease will expire.",
							   edata->message ? edata->message : "")));
		}
		PG_END_TRY();
	}
	ExecResetSession();
}

/* One queue and one role whose handlers run its jobs: what a claim is for. */
typedef struct JobqClaimFor
{
	const char *queue;
	Oid			role;
} JobqClaimFor;

/*
 * One round: claim and run at most one job for each queue and role with
 * handlers (within the role's share of the executors).  Returns the number
 * of jobs run, or -1 when there is nothing to do here any more (no
 * extension, no handlers).
 */
static int
ExecutorRound(MemoryContext round_cxt, TimestampTz *next_due)
{
	List	   *volatile handlers = NIL;
	List	   *units = NIL;
	List	   *roles = NIL;
	ListCell   *lc;
	int			ran = 0;
	volatile bool installed = true;

	PG_TRY();
	{
		ExecBeginJobq("jobq executor: loading handlers");
		if (!jobq_lock_extension())
		{
			ExecEnd(true);
			installed = false;
		}
		else
		{
			SPI_connect();
			handlers = LoadHandlers(round_cxt);
			SPI_finish();
			ExecEnd(true);
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata = ExecRecover(round_cxt);

		/* a lock held on jobq's tables: nothing this round, and again */
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		MemoryContextSwitchTo(round_cxt);
		return 0;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(round_cxt);
	if (!installed || handlers == NIL)
		return -1;

	/* the distinct (queue, role) pairs, and the distinct roles */
	foreach(lc, handlers)
	{
		JobqHandler *h = (JobqHandler *) lfirst(lc);
		ListCell   *uc;
		bool		known = false;

		foreach(uc, units)
		{
			JobqClaimFor *u = (JobqClaimFor *) lfirst(uc);

			if (u->role == h->run_as && strcmp(u->queue, h->queue) == 0)
				known = true;
		}
		if (!known)
		{
			JobqClaimFor *u = palloc(sizeof(JobqClaimFor));

			u->queue = h->queue;
			u->role = h->run_as;
			units = lappend(units, u);
		}
		roles = list_append_unique_oid(roles, h->run_as);
	}

	*next_due = 0;
	foreach(lc, units)
	{
		const char *queue = ((JobqClaimFor *) lfirst(lc))->queue;
		Oid			role = ((JobqClaimFor *) lfirst(lc))->role;
		TimestampTz due = jobq_state_next_due(queue);
		JobqExecJob job;
		bool		got = false;
		ListCell   *hc;
		JobqHandler *h = NULL;

		if (due != 0 && (*next_due == 0 || due < *next_due))
			*next_due = due;
		CHECK_FOR_INTERRUPTS();
		if (!jobq_bgw_executor_take_share(role, list_length(roles)))
			continue;
		PG_TRY();
		{
			ExecBeginJobq("jobq executor: claiming");
			if (jobq_lock_extension())
			{
				SPI_connect();
				got = ExecClaim(queue, role, handlers, &job, round_cxt);
				SPI_finish();
			}
			ExecEnd(true);
			{
				char	   *unit = ExecClaimUnit(queue);

				jobq_unit_worked(unit);
				pfree(unit);
			}
		}
		PG_CATCH();
		{
			ExecLogError(queue, ExecRecover(round_cxt));
			got = false;
		}
		PG_END_TRY();
		MemoryContextSwitchTo(round_cxt);
		if (got)
		{
			foreach(hc, handlers)
			{
				if (strcmp(((JobqHandler *) lfirst(hc))->kind, job.kind) == 0)
					h = (JobqHandler *) lfirst(hc);
			}
			ExecRunJob(h, &job, round_cxt);
			MemoryContextSwitchTo(round_cxt);
			ran++;
		}
		(void) jobq_bgw_executor_take_share(InvalidOid, 0);
	}
	return ran;
}

/* How long a busy executor runs before it gives way to another database. */
#define JOBQ_EXECUTOR_TURN_MS	10000

/* Entry point of an executor; main_arg is the database OID, bgw_extra the slot. */
void
jobq_executor_main(Datum main_arg)
{
	int			index;
	MemoryContext round_cxt;
	int			idle_rounds = 0;
	TimestampTz started = GetCurrentTimestamp();

	memcpy(&index, MyBgworkerEntry->bgw_extra, sizeof(int));
	jobq_bgw_connect(DatumGetObjectId(main_arg), "jobq executor");
	in_executor = true;
	if (!jobq_bgw_executor_attach(index))
		proc_exit(0);

	round_cxt = AllocSetContextCreate(TopMemoryContext, "jobq executor round",
									  ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		int			ran;
		TimestampTz next_due = 0;
		long		sleep_ms = 1000;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (index >= jobq_executors)
			proc_exit(0);		/* the pool shrank */
		MemoryContextReset(round_cxt);
		ran = ExecutorRound(round_cxt, &next_due);
		if (ran < 0)
		{
			/* no handlers (or no extension) for a while: leave */
			if (++idle_rounds > 30)
				proc_exit(0);
		}
		else
			idle_rounds = 0;

		/*
		 * A busy executor gives its place to another database's waiting
		 * handler jobs after its turn (JOBQ_EXECUTOR_TURN_MS), so that no
		 * database keeps the budget of jobq.max_workers.
		 */
		if (ran > 0 &&
			TimestampDifferenceExceeds(started, GetCurrentTimestamp(), JOBQ_EXECUTOR_TURN_MS) &&
			jobq_bgw_executor_should_leave())
			proc_exit(0);
		if (ran > 0)
			continue;

		/* with nothing to do, give the place back where it is wanted */
		if (jobq_bgw_executor_should_leave())
			proc_exit(0);
		/* sleep until woken, the next delayed job is due, or a second */
		if (next_due != 0)
		{
			long		secs;
			int			usecs;

			TimestampDifference(GetCurrentTimestamp(), next_due, &secs, &usecs);
			sleep_ms = Max(Min(sleep_ms, secs * 1000 + usecs / 1000 + 1), 1);
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* Does this database have job handlers?  (SPI connected) */
bool
jobq_database_has_handlers(void)
{
	bool		isnull;

	jobq_spi_exec_sql("SELECT EXISTS (SELECT FROM jobq.handler)", true, SPI_OK_SELECT);
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}
