/*-------------------------------------------------------------------------
 *
 * ops/handler_registry.c
 *	  Job handlers: jobq.register_handler and jobq.unregister_handler.
 *
 * jobq.register_handler(kind, handler) binds a kind to a SQL function
 * taking the payload (and, optionally, a jsonb describing the job) and
 * returning jsonb, run as the role that registers it (a superuser only with
 * allow_superuser => true), which needs EXECUTE on it.  A kind's handler is
 * the role's: only that role (or a superuser) replaces or removes it.  The
 * executors (bgw/handler_proc.c) run the jobs of handled kinds; registering
 * wakes the database's worker at commit, which starts them.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "acl.h"
#include "args.h"
#include "compat.h"
#include "guc.h"
#include "spi.h"
#include "ops/handler_registry.h"
#include "shmem/shm_bgw.h"

PG_FUNCTION_INFO_V1(jobq_register_handler);
PG_FUNCTION_INFO_V1(jobq_unregister_handler);

static SPIPlanPtr plan_register;
static SPIPlanPtr plan_handler_owner;
static SPIPlanPtr plan_unregister;
static SPIPlanPtr plan_prune_dropped;

/*
 * A kind's handler may be replaced only by the role it runs as or a
 * superuser (nobody takes over another role's handler), and removed also by
 * an administrator of the queue it serves (a handler left behind by a role
 * whose capability was revoked, say).  Returns whether kind has a handler,
 * with its queue and role in *queue_out and *owner_out (when not NULL), for
 * the statement that follows to act on that handler only.  SPI connected,
 * as the owner.
 */
static bool
HandlerOwnerCheck(const char *kind, Oid role, bool removing, Datum *queue_out, Oid *owner_out)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	Oid			owner;
	char	   *queue;

	values[0] = CStringGetTextDatum(kind);
	jobq_spi_exec(jobq_plan(&plan_handler_owner,
							"SELECT run_as, queue FROM jobq.handler WHERE kind = $1",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	owner = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	queue = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
	if (queue_out != NULL)
		*queue_out = CStringGetTextDatum(queue);
	if (owner_out != NULL)
		*owner_out = owner;
	/* not naming the role nor the queue: the caller may not know of them */
	if (owner != role && !superuser_arg(role) &&
		!(removing && jobq_may(role, queue, JOBQ_CAP_ADMINISTER)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("the handler of kind \"%s\" belongs to another role", kind),
				 errdetail("Handler kinds are shared by every queue of the database."),
				 errhint("Only that role or a superuser may replace it, and an administrator of its queue remove it: choose a kind of your own (with your application's prefix, say).")));
	return true;
}

/*
 * Why role may not (any more) run function handler for queue, or NULL when
 * it may: it must administer the queue, and have EXECUTE on the function and
 * USAGE on its schema, as a call of it by name would need were the role
 * connected.  Registering checks this, and the executors before every claim
 * and every run: a right revoked since stops the handler.  SPI connected, as
 * the owner.
 */
char	   *
jobq_handler_refusal(Oid role, const char *queue, Oid handler)
{
	Oid			schema = get_func_namespace(handler);
	const char *name = GetUserNameFromId(role, true);

	if (!jobq_may(role, queue, JOBQ_CAP_ADMINISTER))
		return psprintf("role \"%s\" does not hold the administer capability on queue \"%s\"",
						name ? name : "?", queue);
	if (object_aclcheck(ProcedureRelationId, handler, role, ACL_EXECUTE) != ACLCHECK_OK)
		return psprintf("role \"%s\" has no EXECUTE privilege on function %s",
						name ? name : "?", format_procedure(handler));
	if (OidIsValid(schema) &&
		object_aclcheck(NamespaceRelationId, schema, role, ACL_USAGE) != ACLCHECK_OK)
		return psprintf("role \"%s\" has no USAGE privilege on schema %s",
						name ? name : "?", get_namespace_name(schema));
	return NULL;
}

/* Error out (42501) unless role may run handler for queue (as above). */
void
jobq_handler_rights_check(Oid role, const char *queue, Oid handler)
{
	char	   *why = jobq_handler_refusal(role, queue, handler);

	if (why != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to run handler %s: %s", format_procedure(handler), why),
				 errdetail("A handler runs as the role that registers it, which needs the administer capability on the queue, EXECUTE on the function and USAGE on its schema, at registration and at every job."),
				 errhint("Grant the role what it lacks, or register the kind's handler as a role that has it.")));
}

/*
 * jobq.register_handler(kind, handler, queue, allow_superuser) -> void
 *
 * The handler runs as the role calling this.
 */
Datum
jobq_register_handler(PG_FUNCTION_ARGS)
{
	Oid			types[6] = {TEXTOID, TEXTOID, TEXTOID, REGROLEOID, BOOLOID, BOOLOID};
	Datum		values[6];
	const char *kind = jobq_name_arg(fcinfo, 0, "kind", jobq_max_name_length, false);
	const char *queue = jobq_name_arg(fcinfo, 2, "queue", jobq_max_name_length, false);
	Oid			handler;
	bool		allow_superuser;
	HeapTuple	proctup;
	Form_pg_proc proc;
	Oid			run_as = GetUserId();
	JobqSavedUser saved;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("handler must not be null")));
	handler = PG_GETARG_OID(1);
	allow_superuser = PG_ARGISNULL(3) ? false : PG_GETARG_BOOL(3);

	proctup = SearchSysCache1(PROCOID, ObjectIdGetDatum(handler));
	if (!HeapTupleIsValid(proctup))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("handler function %u does not exist", handler)));
	proc = (Form_pg_proc) GETSTRUCT(proctup);
	if (proc->prorettype != JSONBOID || proc->prokind != PROKIND_FUNCTION ||
		proc->proretset || proc->pronargs < 1 || proc->pronargs > 2 ||
		proc->proargtypes.values[0] != JSONBOID ||
		(proc->pronargs == 2 && proc->proargtypes.values[1] != JSONBOID))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_FUNCTION_DEFINITION),
				 errmsg("handler must be a function (payload jsonb [, job jsonb]) returning jsonb"),
				 errdetail("%s does not fit.", format_procedure(handler)),
				 errhint("The second argument, if any, receives the job: job_id, lease_token, kind, queue, retry_count, max_retries, checkpoint, enqueued_at, lease_expires_at.")));
	ReleaseSysCache(proctup);

	if (object_aclcheck(ProcedureRelationId, handler, run_as, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", format_procedure(handler)),
				 errdetail("A handler runs as the role that registers it, which needs EXECUTE on it.")));
	if (superuser_arg(run_as) && !allow_superuser)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("a handler registered by a superuser would run as a superuser"),
				 errhint("Register it as an ordinary role (SET ROLE), or pass allow_superuser => true if it really must.")));

	values[0] = CStringGetTextDatum(kind);
	values[1] = CStringGetTextDatum(format_procedure_qualified(handler));
	values[2] = CStringGetTextDatum(queue);
	values[3] = ObjectIdGetDatum(run_as);
	values[4] = BoolGetDatum(allow_superuser);
	jobq_owner_begin(&saved);
	jobq_require(run_as, queue, JOBQ_CAP_ADMINISTER);
	jobq_handler_rights_check(run_as, queue, handler);	/* USAGE of its schema */
	(void) HandlerOwnerCheck(kind, run_as, false, NULL, NULL);

	/*
	 * A handler of that kind another role registered meanwhile (after the
	 * check, which did not see it) is not taken over: the check runs again on
	 * it (a superuser replaces any)
	 */
	values[5] = BoolGetDatum(superuser_arg(run_as));
	jobq_spi_exec(jobq_plan(&plan_register,
							"INSERT INTO jobq.handler (kind, handler, queue, run_as, allow_superuser)"
							" VALUES ($1, $2, $3, $4, $5)"
							" ON CONFLICT (kind) DO UPDATE SET handler = $2, queue = $3,"
							" run_as = $4, allow_superuser = $5, updated_at = now()"
							" WHERE jobq.handler.run_as = $4 OR $6",
							6, types),
				  values, NULL, SPI_OK_INSERT);
	if (SPI_processed == 0)
	{
		(void) HandlerOwnerCheck(kind, run_as, false, NULL, NULL);
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("the handler of kind \"%s\" changed while it was registered", kind),
				 errhint("Try again.")));
	}
	jobq_owner_end(&saved);
	jobq_bgw_wake_worker_at_commit();
	PG_RETURN_VOID();
}

/* jobq.unregister_handler(kind) -> boolean */
Datum
jobq_unregister_handler(PG_FUNCTION_ARGS)
{
	Oid			types[3] = {TEXTOID, TEXTOID, OIDOID};
	Datum		values[3];
	Oid			owner;
	bool		done = false;
	JobqSavedUser saved;

	values[0] = CStringGetTextDatum(jobq_name_arg(fcinfo, 0, "kind", jobq_max_name_length, false));
	jobq_owner_begin(&saved);
	/* only the handler as checked: one moved or replaced meanwhile stays */
	if (HandlerOwnerCheck(TextDatumGetCString(values[0]), saved.caller, true, &values[1], &owner))
	{
		values[2] = ObjectIdGetDatum(owner);
		jobq_spi_exec(jobq_plan(&plan_unregister,
								"DELETE FROM jobq.handler WHERE kind = $1 AND queue = $2"
								" AND run_as = $3",
								3, types),
					  values, NULL, SPI_OK_DELETE);
		done = SPI_processed > 0;
	}
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}

/*
 * Delete up to batch handlers whose role (run_as) was dropped since: their
 * jobs must run as no one (the executors skip them already), and a role
 * made later with the same oid must not become theirs.  Returns how many.
 * SPI connected, as the owner.
 */
int64
jobq_prune_dropped_handlers(int batch)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1];

	values[0] = Int32GetDatum(batch);
	jobq_spi_exec(jobq_plan_generic(&plan_prune_dropped,
									"DELETE FROM jobq.handler WHERE ctid = ANY (ARRAY("
									" SELECT h.ctid FROM jobq.handler h"
									" WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = h.run_as)"
									" LIMIT $1 FOR UPDATE SKIP LOCKED))",
									1, types),
				  values, NULL, SPI_OK_DELETE);
	return (int64) SPI_processed;
}
