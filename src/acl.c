/*-------------------------------------------------------------------------
 *
 * acl.c
 *	  Who may do what to which queue.
 *
 * Three capabilities per queue, held by roles (directly or through role
 * membership) in jobq.permission: enqueue (enqueue, enqueue_many), work
 * (claim, complete, fail, extend, checkpoint, snooze) and administer
 * (everything, including configure, pause, retry, cancel, purge,
 * schedules, handlers, and granting).  The queue '*' means every queue.
 * Superusers and the extension's owner may do everything.
 *
 * jobq's C functions are SECURITY INVOKER.  Each one checks the caller's
 * capability for the queue it acts on, then switches to the extension
 * owner (jobq_owner_begin) for its own table access, like PostgreSQL's
 * internal operations do; an error anywhere restores the caller's identity
 * as the (sub)transaction aborts.  Their queries are prepared under a
 * search_path of pg_catalog alone (spi.c), so nothing a caller
 * creates is ever run with the owner's rights.
 *
 * jobq.grant(queue, role, capability) also grants the role what it needs
 * to call the functions of that capability: USAGE on schema jobq, EXECUTE
 * on those functions, SELECT on the views.  The views show only jobs of
 * queues the querying role may use (jobq.may_use_queue; inside jobq's own
 * SECURITY DEFINER functions it asks about the role the session acts as).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "compat.h"
#include "guc.h"
#include "jobq_limits.h"
#include "spi.h"

PG_FUNCTION_INFO_V1(jobq_grant);
PG_FUNCTION_INFO_V1(jobq_revoke);
PG_FUNCTION_INFO_V1(jobq_may_use_queue);
PG_FUNCTION_INFO_V1(jobq_may_sql);

/*
 * Bumped whenever permissions may have changed under this backend's cached
 * answers: its own grant or revoke, a subtransaction abort (which may undo
 * one).  Other backends' changes show at the next transaction.
 */
static uint64 acl_generation = 0;
static bool acl_callback_registered = false;

static bool MayHold(Oid role, const char *queue, JobqCapability cap, bool any_cap);

static const char *const capability_names[] = {"enqueue", "work", "administer"};

static SPIPlanPtr plan_permissions;
static SPIPlanPtr plan_usable_roles;
static SPIPlanPtr plan_usable;
static SPIPlanPtr plan_prune_grants;
static SPIPlanPtr plan_grant;
static SPIPlanPtr plan_revoke;
static SPIPlanPtr plan_lacking;

/* The owner of jobq's tables, cached for the current transaction. */
static Oid
JobqOwner(void)
{
	static LocalTransactionId cached_lxid = InvalidLocalTransactionId;
	static Oid	cached_owner = InvalidOid;
	Oid			relid;
	HeapTuple	tup;

	if (cached_lxid == MyLocalTransactionId && OidIsValid(cached_owner))
		return cached_owner;
	relid = jobq_relid_required(JOBQ_REL_JOB);
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "jobq: table jobq.job is missing");
	cached_owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	cached_lxid = MyLocalTransactionId;
	return cached_owner;
}

/* May this role do everything (superuser, or the extension's owner)? */
static bool
AllPowerful(Oid role)
{
	return superuser_arg(role) || role == JobqOwner();
}

/*
 * Begin the table access of one of jobq's SQL functions: switch to the
 * extension owner and connect SPI.  The caller's identity is kept in *saved
 * (saved->caller, which the function checks capabilities of) and returned.
 * Every such function runs its saved plans between this and
 * jobq_owner_end(); an error in between restores the caller's identity and
 * SPI as the (sub)transaction aborts.
 */
Oid
jobq_owner_begin(JobqSavedUser *saved)
{
	GetUserIdAndSecContext(&saved->userid, &saved->sec_context);
	saved->caller = saved->userid;
	SetUserIdAndSecContext(JobqOwner(), saved->sec_context | SECURITY_LOCAL_USERID_CHANGE);
	SPI_connect();
	return saved->caller;
}

/* End what jobq_owner_begin() began: disconnect SPI, switch back to the caller. */
void
jobq_owner_end(const JobqSavedUser *saved)
{
	SPI_finish();
	SetUserIdAndSecContext(saved->userid, saved->sec_context);
}

/*
 * Does role hold capability cap on queue (or on '*')?  SPI must be
 * connected, as the owner.
 */
bool
jobq_may(Oid role, const char *queue, JobqCapability cap)
{
	return MayHold(role, queue, cap, false);
}

/*
 * Does role hold cap on queue (or on '*'), or with any_cap any capability
 * there?  SPI must be connected, as the owner.
 */
static bool
MayHold(Oid role, const char *queue, JobqCapability cap, bool any_cap)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		may = false;

	if (AllPowerful(role))
		return true;
	values[0] = CStringGetTextDatum(queue ? queue : "*");
	jobq_spi_exec(jobq_plan_generic(&plan_permissions,
									"SELECT role, capability FROM jobq.permission"
									" WHERE queue = $1 OR queue = '*'",
									1, types),
				  values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < SPI_processed && !may; i++)
	{
		bool		isnull;
		Oid			holder = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
															SPI_tuptable->tupdesc, 1, &isnull));
		char	   *held = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);

		may = has_privs_of_role(role, holder) &&
			(any_cap || strcmp(held, "administer") == 0 || strcmp(held, capability_names[cap]) == 0);
		pfree(held);
	}
	/* a caller that asks once per job (retry_failed) must not keep them all */
	SPI_freetuptable(SPI_tuptable);
	return may;
}

/* What capability cap lets a role do, for messages: "work on" (a queue). */
static const char *
CapabilityVerb(JobqCapability cap)
{
	return cap == JOBQ_CAP_ENQUEUE ? "enqueue into" :
		cap == JOBQ_CAP_WORK ? "work on" : "administer";
}

/* role's name, for messages ("?" if it was dropped meanwhile). */
static const char *
RoleName(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name ? name : "?";
}

/* Error out unless role holds capability cap on queue (SPI connected). */
void
jobq_require(Oid role, const char *queue, JobqCapability cap)
{
	if (jobq_may(role, queue, cap))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s queue \"%s\"", CapabilityVerb(cap),
					queue ? queue : "*"),
			 errdetail("Role \"%s\" does not hold the %s capability on it.",
					   RoleName(role), capability_names[cap]),
			 errhint("An administrator of the queue can run jobq.grant('%s', '%s', '%s').",
					 queue ? queue : "*", RoleName(role), capability_names[cap])));
}

/*
 * jobq_require for the queue of job job_id, a job named by its id alone:
 * the error does not name the queue, which the caller may not know of (a
 * role probing ids learns no other tenant's queue names).
 */
void
jobq_require_job(Oid role, int64 job_id, const char *queue, JobqCapability cap)
{
	if (jobq_may(role, queue, cap))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to %s the queue of job %lld", CapabilityVerb(cap),
					(long long) job_id),
			 errdetail("Role \"%s\" does not hold the %s capability on the job's queue.",
					   RoleName(role), capability_names[cap]),
			 errhint("jobq.jobs lists the jobs of the queues the role holds a capability on.")));
}

/* The capability argument, checked. */
static JobqCapability
CapabilityArg(FunctionCallInfo fcinfo, int argno)
{
	const char *name = jobq_name_arg(fcinfo, argno, "capability", JOBQ_MAX_NAME_LEN, false);

	for (int i = 0; i < lengthof(capability_names); i++)
		if (strcmp(name, capability_names[i]) == 0)
			return (JobqCapability) i;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("capability must be enqueue, work or administer"),
			 errdetail("The capability given was \"%s\".", jobq_quote_arg(name))));
	return JOBQ_CAP_ENQUEUE;	/* not reached */
}

/*
 * The functions each capability needs (regprocedure texts).  Those of one
 * release and not another are granted where they exist: a database still at
 * an older release (served by this library until its ALTER EXTENSION jobq
 * UPDATE) lacks the later ones, and 0.2.0 re-created enqueue and
 * enqueue_many with depends_on, 0.3.0 fail with details.
 */
static const char *const EveryRoleFunctions[] = {
	/* what the views call as the querying role */
	"jobq.may_use_queue(text)", "jobq.may(text, text)", "jobq.worker_status()",
	"jobq.kind_stats(interval, text)",
	"jobq.service_status()",	/* 0.2.0 */
	"jobq.app_worker_rows()",	/* 0.3.0 */
};
static const char *const EnqueueFunctions[] = {
	"jobq.priority(text)", "jobq.priority_label(integer)",
	"jobq.cron_next(text, timestamptz, text)", "jobq.job(bigint)", "jobq.job_by_key(text, text)",
	"jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text)",
	"jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text)",
	"jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text, bigint[], text)",
	"jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text, bigint[], text)",
	"jobq.parent_results(bigint)", "jobq.workflow_status(bigint)", "jobq.workflow_jobs(bigint)",
};
static const char *const WorkFunctions[] = {
	"jobq.claim(text, text, integer, interval, text[], interval)",
	"jobq.complete(bigint, bigint, jsonb)", "jobq.complete_many(bigint[], bigint[], jsonb[])",
	"jobq.extend(bigint, bigint, interval)", "jobq.checkpoint(bigint, bigint, jsonb)",
	"jobq.snooze(bigint, bigint, interval)",
	"jobq.priority(text)", "jobq.priority_label(integer)",
	"jobq.cron_next(text, timestamptz, text)", "jobq.job(bigint)", "jobq.job_by_key(text, text)",
	"jobq.release(bigint, bigint)", /* 0.2.0 */
	"jobq.fail(bigint, bigint, text, boolean, interval)",
	"jobq.fail(bigint, bigint, text, boolean, interval, text)",
	"jobq.register_worker(text, text[], jsonb)", "jobq.unregister_worker(text)",
	"jobq.parent_results(bigint)", "jobq.workflow_status(bigint)", "jobq.workflow_jobs(bigint)",
};
static const char *const EveryRoleViews[] = {
	"jobq.jobs", "jobq.dead_letter", "jobq.queue_stats", "jobq.queues", "jobq.schedules",
	"jobq.workers", "jobq.kind_stats", "jobq.handlers",
	"jobq.service", "jobq.workflows", "jobq.app_workers",
};

/* How long a grant waits for another transaction granting to the same objects. */
#define JOBQ_GRANT_LOCK_TIMEOUT_MS	5000

/* names onto the list of texts */
static void
AddNames(List **names, const char *const *add, int n)
{
	for (int i = 0; i < n; i++)
		*names = lappend(*names, (void *) add[i]);
}

/* The names as a text[] datum. */
static Datum
NamesArray(List *names)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(names), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, names)
		elems[n++] = CStringGetTextDatum((const char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * GRANT what calling the functions of capability cap needs to role: USAGE on
 * the schema, EXECUTE on those functions (an administrator: on every
 * function of the schema), SELECT on the views; only what the role does not
 * hold already (a GRANT writes the object's catalog row even when nothing
 * changes, so every jobq.grant, whatever its queue, waited for any other
 * tenant's open transaction that had granted, then failed with "tuple
 * concurrently updated").  The first grant of a capability to a role still
 * writes those rows: it waits at most JOBQ_GRANT_LOCK_TIMEOUT_MS for
 * another transaction that does, then fails with 55P03 (40001 when that one
 * commits meanwhile), to be tried again.  SPI connected, as the owner.
 */
static void
GrantObjects(Oid role, JobqCapability cap)
{
	const char *rolename = quote_identifier(GetUserNameFromId(role, false));
	Oid			types[4] = {OIDOID, TEXTARRAYOID, BOOLOID, TEXTARRAYOID};
	Datum		values[4];
	List	   *functions = NIL;
	List	   *views = NIL;
	bool		isnull;
	StringInfoData sql;
	MemoryContext cxt = CurrentMemoryContext;
	int			nestlevel;

	AddNames(&functions, EveryRoleFunctions, lengthof(EveryRoleFunctions));
	if (cap == JOBQ_CAP_ENQUEUE || cap == JOBQ_CAP_ADMINISTER)
		AddNames(&functions, EnqueueFunctions, lengthof(EnqueueFunctions));
	if (cap == JOBQ_CAP_WORK || cap == JOBQ_CAP_ADMINISTER)
		AddNames(&functions, WorkFunctions, lengthof(WorkFunctions));
	AddNames(&views, EveryRoleViews, lengthof(EveryRoleViews));
	values[0] = ObjectIdGetDatum(role);
	values[1] = NamesArray(functions);
	values[2] = BoolGetDatum(cap == JOBQ_CAP_ADMINISTER);
	values[3] = NamesArray(views);
	jobq_spi_exec(jobq_plan(&plan_lacking,
							"SELECT (SELECT NOT EXISTS (SELECT FROM pg_catalog.aclexplode(coalesce(n.nspacl,"
							"          pg_catalog.acldefault('n', n.nspowner))) a"
							"         WHERE a.grantee = $1 AND a.privilege_type = 'USAGE')"
							"          FROM pg_catalog.pg_namespace n WHERE n.nspname = 'jobq'),"
							" (SELECT pg_catalog.string_agg(pg_catalog.format('jobq.%I(%s)', p.proname,"
							"          pg_catalog.pg_get_function_identity_arguments(p.oid)), ', ' ORDER BY p.oid)"
							"    FROM pg_catalog.pg_proc p"
							"   WHERE (p.oid = ANY (ARRAY(SELECT pg_catalog.to_regprocedure(f)"
							"                              FROM pg_catalog.unnest($2) f))"
							"          OR ($3 AND p.pronamespace = 'jobq'::pg_catalog.regnamespace))"
							"     AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(coalesce(p.proacl,"
							"          pg_catalog.acldefault('f', p.proowner))) a"
							"         WHERE a.grantee = $1 AND a.privilege_type = 'EXECUTE')),"
							" (SELECT pg_catalog.string_agg(pg_catalog.format('jobq.%I', c.relname), ', '"
							"          ORDER BY c.oid)"
							"    FROM pg_catalog.pg_class c"
							"   WHERE c.oid = ANY (ARRAY(SELECT pg_catalog.to_regclass(v) FROM pg_catalog.unnest($4) v))"
							"     AND NOT EXISTS (SELECT FROM pg_catalog.aclexplode(coalesce(c.relacl,"
							"          pg_catalog.acldefault('r', c.relowner))) a"
							"         WHERE a.grantee = $1 AND a.privilege_type = 'SELECT'))",
							4, types),
				  values, NULL, SPI_OK_SELECT);
	initStringInfo(&sql);
	if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) && !isnull)
		appendStringInfo(&sql, "GRANT USAGE ON SCHEMA jobq TO %s;", rolename);
	if (SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2) != NULL)
		appendStringInfo(&sql, "GRANT EXECUTE ON FUNCTION %s TO %s;",
						 SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2), rolename);
	if (SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3) != NULL)
		appendStringInfo(&sql, "GRANT SELECT ON %s TO %s;",
						 SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3), rolename);
	if (sql.len == 0)
		return;

	nestlevel = NewGUCNestLevel();
	(void) set_config_option("lock_timeout", CppAsString2(JOBQ_GRANT_LOCK_TIMEOUT_MS),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		jobq_spi_exec_sql(sql.data, false, SPI_OK_UTILITY);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE &&
			!(edata->sqlerrcode == ERRCODE_INTERNAL_ERROR && edata->message != NULL &&
			  strcmp(edata->message, "tuple concurrently updated") == 0))
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE ?
						 ERRCODE_LOCK_NOT_AVAILABLE : ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not grant jobq's functions to role %s: another transaction is granting them",
						rolename),
				 errdetail("The first grant of a capability to a role grants it jobq's functions, which waits for other such grants to end (at most %d ms).",
						   JOBQ_GRANT_LOCK_TIMEOUT_MS),
				 errhint("Try again; grant outside long transactions.")));
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nestlevel);
}

/* jobq.grant(queue, role, capability): may be run by the queue's administrators */
Datum
jobq_grant(PG_FUNCTION_ARGS)
{
	const char *queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	JobqCapability cap = CapabilityArg(fcinfo, 2);
	Oid			types[4] = {TEXTOID, REGROLEOID, TEXTOID, REGROLEOID};
	Datum		values[4];
	Oid			role;
	JobqSavedUser saved;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("role must not be null")));
	role = PG_GETARG_OID(1);

	jobq_owner_begin(&saved);
	jobq_require(saved.caller, strcmp(queue, "*") == 0 ? NULL : queue, JOBQ_CAP_ADMINISTER);
	values[0] = CStringGetTextDatum(queue);
	values[1] = ObjectIdGetDatum(role);
	values[2] = CStringGetTextDatum(capability_names[cap]);
	values[3] = ObjectIdGetDatum(saved.caller);
	jobq_spi_exec(jobq_plan(&plan_grant,
							"INSERT INTO jobq.permission (queue, role, capability, granted_by)"
							" VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
							4, types),
				  values, NULL, SPI_OK_INSERT);
	GrantObjects(role, cap);
	acl_generation++;
	jobq_owner_end(&saved);
	PG_RETURN_VOID();
}

/* jobq.revoke(queue, role, capability) -> whether the role held it */
Datum
jobq_revoke(PG_FUNCTION_ARGS)
{
	const char *queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	JobqCapability cap = CapabilityArg(fcinfo, 2);
	Oid			types[3] = {TEXTOID, REGROLEOID, TEXTOID};
	Datum		values[3];
	JobqSavedUser saved;
	bool		done;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("role must not be null")));
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, strcmp(queue, "*") == 0 ? NULL : queue, JOBQ_CAP_ADMINISTER);
	values[0] = CStringGetTextDatum(queue);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = CStringGetTextDatum(capability_names[cap]);
	jobq_spi_exec(jobq_plan(&plan_revoke,
							"DELETE FROM jobq.permission WHERE queue = $1 AND role = $2"
							" AND capability = $3",
							3, types),
				  values, NULL, SPI_OK_DELETE);
	done = SPI_processed > 0;
	acl_generation++;
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}

/* A subtransaction abort may undo a grant or revoke: forget cached answers. */
static void
AclSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
				   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		acl_generation++;
}

/*
 * The role a job handler runs as, while it runs (bgw/handler_proc.c), else
 * InvalidOid.  An executor's session belongs to the bootstrap superuser, so
 * inside a handler "the role the session acts as" must be this one.
 */
static Oid	handler_role = InvalidOid;

/* The job whose handler runs, while it runs (0: none). */
static int64 handler_job = 0;

/* Executors: the handler about to run acts as role (InvalidOid: none). */
void
jobq_acl_set_handler_role(Oid role)
{
	handler_role = role;
}

/* Executors: the handler about to run is job_id's (0: none). */
void
jobq_acl_set_handler_job(int64 job_id)
{
	handler_job = job_id;
}

/*
 * Error out when job_id is the job whose handler is running here: its
 * executor finishes it by the handler's outcome, and a handler that
 * completed, failed, released or cancelled it itself left it running, with
 * nobody's lease, until the lease expired (calling function fn).
 */
void
jobq_refuse_own_job(int64 job_id, const char *fn)
{
	if (handler_job != 0 && job_id == handler_job)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("a handler cannot call %s on its own job %lld", fn, (long long) job_id),
				 errhint("Return a result to complete it, raise an error to fail it, or call jobq.snooze(delay).")));
}

/* The role whose rights a view or a SECURITY DEFINER function of jobq asks about. */
static Oid
AskingRole(void)
{
	Oid			role = GetUserId();

	/*
	 * Inside jobq's SECURITY DEFINER functions the current user is the owner:
	 * ask about the role the session acts as, which inside a job handler is
	 * the handler's role, never the executor's superuser.
	 */
	if (!AllPowerful(role))
		return role;
	return OidIsValid(handler_role) ? handler_role : GetOuterUserId();
}

/*
 * The role whose rights jobq.may_use_queue would ask about now (see
 * AskingRole): for a function that must ask before it switches to the
 * owner, as inside a SECURITY DEFINER function of another role's the
 * current user is that role, not the session's.
 */
Oid
jobq_asking_role(void)
{
	return AskingRole();
}

/*
 * The queues role (from jobq_asking_role) may use: what
 * jobq.may_use_queue answers true for, a capability on them held by the
 * role or by a role whose privileges it has; as a text[]; NULL when it may
 * use every queue (a superuser, the owner, a capability on '*').  For a
 * view that would ask jobq.may_use_queue of a great many names.  At most
 * limit of them, in name order (0: all).  SPI connected, as the owner.
 */
ArrayType  *
jobq_usable_queues(Oid role, int limit)
{
	Oid			types[2] = {OIDOID, INT4OID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	Datum		roles;
	bool		isnull;
	Datum	   *names;
	int			n = 0;

	if (AllPowerful(role))
		return NULL;

	/*
	 * The roles whose privileges it has: the roles it is a member of,
	 * directly or not (pg_auth_members by member, not every role of the
	 * cluster), and pg_database_owner for the database's owner (no row of
	 * pg_auth_members says so), that pg_has_role says it has the privileges
	 * of.  Then their capabilities, by the index on jobq.permission by role:
	 * a role's own queues, whatever the others' (0.3.5 read every capability
	 * of the database).  The second statement is planned for the roles at
	 * hand: where another role holds nearly every capability, a plan for any
	 * roles reads the whole table.
	 */
	values[0] = ObjectIdGetDatum(role);
	jobq_spi_exec(jobq_plan(&plan_usable_roles,
							"WITH RECURSIVE m(oid) AS (SELECT $1"
							" UNION SELECT 'pg_database_owner'::pg_catalog.regrole::pg_catalog.oid"
							" WHERE pg_catalog.pg_has_role($1, 'pg_database_owner', 'USAGE')"
							" UNION SELECT a.roleid FROM pg_catalog.pg_auth_members a"
							" JOIN m ON a.member = m.oid)"
							" SELECT pg_catalog.array_agg(m.oid) FROM m"
							" WHERE pg_catalog.pg_has_role($1, m.oid, 'USAGE')",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	roles = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return construct_empty_array(TEXTOID);
	types[0] = OIDARRAYOID;
	values[0] = roles;
	values[1] = Int32GetDatum(limit);
	nulls[1] = limit > 0 ? ' ' : 'n';
	jobq_spi_exec(jobq_plan_custom(&plan_usable,
								   "SELECT DISTINCT p.queue FROM jobq.permission p"
								   " WHERE p.role = ANY ($1) ORDER BY p.queue LIMIT $2",
								   2, types),
				  values, nulls, SPI_OK_SELECT);
	names = palloc(sizeof(Datum) * Max(SPI_processed, 1));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		queue = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		if (strcmp(TextDatumGetCString(queue), "*") == 0)
			return NULL;
		names[n++] = queue;
	}
	return construct_array(names, n, TEXTOID, -1, false, TYPALIGN_INT);
}

/*
 * Delete up to batch capabilities held by roles that were dropped since:
 * they hold for no one now, but a role made later with the same oid (the
 * counter wraps), or a restore elsewhere (a dump names a dropped role by
 * its number), would inherit them.  Returns how many.  SPI connected, as
 * the owner.
 */
int64
jobq_prune_dropped_grants(int batch)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1];

	values[0] = Int32GetDatum(batch);
	jobq_spi_exec(jobq_plan_generic(&plan_prune_grants,
									"DELETE FROM jobq.permission WHERE ctid = ANY (ARRAY("
									" SELECT p.ctid FROM jobq.permission p"
									" WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = p.role)"
									" LIMIT $1 FOR UPDATE SKIP LOCKED))",
									1, types),
				  values, NULL, SPI_OK_DELETE);
	if (SPI_processed > 0)
		acl_generation++;
	return (int64) SPI_processed;
}

/* jobq.may(queue, capability) -> does the asking role hold it? */
Datum
jobq_may_sql(PG_FUNCTION_ARGS)
{
	const char *queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	JobqCapability cap = CapabilityArg(fcinfo, 1);
	Oid			role = AskingRole();
	JobqSavedUser saved;
	bool		may;

	if (AllPowerful(role))
		PG_RETURN_BOOL(true);
	jobq_owner_begin(&saved);
	may = jobq_may(role, strcmp(queue, "*") == 0 ? NULL : queue, cap);
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(may);
}

/*
 * The answers of jobq.may_use_queue.  They hold for one statement (of one
 * transaction), one role and one acl_generation: a revoke that another
 * session commits is seen by the next statement, as a READ COMMITTED
 * snapshot sees it, and a transaction held open does not keep a revoked
 * queue visible.  (All the statements of one simple-query message share
 * their start time: there they hold for the message.)
 *
 * The first JOBQ_MAY_USE_ASK_MAX queues of a statement are asked about one
 * by one (a query of jobq.permission each), which is what a function about
 * one job needs; the answers are kept in a hash (at most
 * JOBQ_MAY_USE_CACHE_MAX at once).  Past them the statement reads every
 * queue the role may use at once (UsableLoad), by the roles whose
 * privileges it has, into a sorted array of names (their length and a
 * pointer each), and answers from that: a view reads rows of many queues
 * in any order, and asking about each queue made a role's read of its own
 * queues cost every other tenant's (0.3.5: 200,000 buffers beside another
 * tenant's 20,000 queues).  A role that may use more than JOBQ_USABLE_MAX
 * queues (not through '*') goes on queue by queue.  The memory goes at the
 * end of the transaction.
 */
typedef struct MayUseEntry
{
	char		queue[JOBQ_MAX_NAME_LEN + 1];	/* hash key */
	bool		may;			/* the answer */
} MayUseEntry;

#define JOBQ_MAY_USE_ASK_MAX	8
#define JOBQ_USABLE_MAX			1000000
#define JOBQ_MAY_USE_CACHE_MAX	256

static MemoryContext may_use_cxt = NULL;	/* the cache's memory */
static HTAB *may_use_cache = NULL;	/* answers asked one by one */
static char **usable_names = NULL;	/* with may_use_complete: sorted */
static int	usable_n = 0;
static int	may_use_asked = 0;	/* queues asked about one by one */
static bool may_use_loaded = false; /* UsableLoad was tried */
static bool may_use_complete = false;	/* usable_names are all */
static bool may_use_every = false;	/* the role may use every queue */
static LocalTransactionId may_use_lxid = InvalidLocalTransactionId;
static TimestampTz may_use_statement = 0;
static uint64 may_use_generation = 0;
static Oid	may_use_role = InvalidOid;

/* Forget the answers and free their memory. */
static void
MayUseForget(void)
{
	if (may_use_cxt != NULL)
		MemoryContextReset(may_use_cxt);
	may_use_cache = NULL;
	usable_names = NULL;
	usable_n = 0;
	may_use_lxid = InvalidLocalTransactionId;
}

static HTAB *
MayUseCreate(void)
{
	HASHCTL		ctl;

	ctl.keysize = JOBQ_MAX_NAME_LEN + 1;
	ctl.entrysize = sizeof(MayUseEntry);
	ctl.hcxt = may_use_cxt;
	return hash_create("jobq may_use_queue answers", 16, &ctl,
					   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

static int
NameCmp(const void *a, const void *b)
{
	return strcmp(*(char *const *) a, *(char *const *) b);
}

/*
 * Read every queue role may use (jobq_usable_queues) into usable_names, or
 * set may_use_every.  Returns false, keeping nothing, for a role with more
 * than JOBQ_USABLE_MAX of them.
 */
static bool
UsableLoad(Oid role)
{
	JobqSavedUser saved;
	ArrayType  *usable;
	bool		loaded = true;

	jobq_owner_begin(&saved);
	usable = jobq_usable_queues(role, JOBQ_USABLE_MAX + 1);
	if (usable == NULL)
		may_use_every = true;
	else if (ArrayGetNItems(ARR_NDIM(usable), ARR_DIMS(usable)) > JOBQ_USABLE_MAX)
		loaded = false;
	else
	{
		Datum	   *names;
		int			n;

		deconstruct_array(usable, TEXTOID, -1, false, TYPALIGN_INT, &names, NULL, &n);
		usable_names = MemoryContextAlloc(may_use_cxt, sizeof(char *) * Max(n, 1));
		for (int i = 0; i < n; i++)
			usable_names[i] = MemoryContextStrdup(may_use_cxt, TextDatumGetCString(names[i]));
		/* in C order, whatever the order of the statement */
		qsort(usable_names, n, sizeof(char *), NameCmp);
		usable_n = n;
	}
	jobq_owner_end(&saved);
	return loaded;
}

/*
 * The cache of may_use_queue answers for role in this statement at this
 * acl_generation, made again when any of them changed; the hash of answers
 * asked one by one is emptied when full.
 */
static HTAB *
MayUseCache(Oid role)
{
	if (may_use_cache != NULL &&
		(may_use_lxid != MyLocalTransactionId ||
		 may_use_statement != GetCurrentStatementStartTimestamp() ||
		 may_use_generation != acl_generation ||
		 may_use_role != role))
		MayUseForget();
	if (may_use_cache != NULL &&
		hash_get_num_entries(may_use_cache) >= JOBQ_MAY_USE_CACHE_MAX)
	{
		hash_destroy(may_use_cache);
		may_use_cache = MayUseCreate();
	}
	if (may_use_cache == NULL)
	{
		if (may_use_cxt == NULL)
			may_use_cxt = AllocSetContextCreate(TopMemoryContext, "jobq may_use_queue",
												ALLOCSET_DEFAULT_SIZES);
		may_use_cache = MayUseCreate();
		may_use_asked = 0;
		may_use_loaded = false;
		may_use_complete = false;
		may_use_every = false;
		may_use_lxid = MyLocalTransactionId;
		may_use_statement = GetCurrentStatementStartTimestamp();
		may_use_generation = acl_generation;
		may_use_role = role;
	}
	return may_use_cache;
}

/* The memory of the answers goes at the end of the transaction. */
static void
AclXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_PREPARE)
		MayUseForget();
}

/*
 * jobq.may_use_queue(queue) -> may the current role see this queue's jobs
 * (does it hold any capability on it)?  Used by the views, for every row
 * they read; the answers are cached per statement (MayUseCache).
 */
Datum
jobq_may_use_queue(PG_FUNCTION_ARGS)
{
	char	   *queue = text_to_cstring(PG_GETARG_TEXT_PP(0));
	Oid			role = AskingRole();
	HTAB	   *cache;
	MayUseEntry *entry;
	JobqSavedUser saved;
	bool		may;

	if (AllPowerful(role))
		PG_RETURN_BOOL(true);
	if (!acl_callback_registered)
	{
		RegisterSubXactCallback(AclSubXactCallback, NULL);
		RegisterXactCallback(AclXactCallback, NULL);
		acl_callback_registered = true;
	}
	cache = MayUseCache(role);
	if (may_use_every)
		PG_RETURN_BOOL(true);
	if (may_use_complete)
		PG_RETURN_BOOL(bsearch(&queue, usable_names, usable_n, sizeof(char *), NameCmp) != NULL);
	/* a name too long for a key (no queue has one) is asked every time */
	if (strlen(queue) > JOBQ_MAX_NAME_LEN)
		cache = NULL;
	else
	{
		entry = hash_search(cache, queue, HASH_FIND, NULL);
		if (entry != NULL)
			PG_RETURN_BOOL(entry->may);
	}

	/* past a few queues, read all the role's at once */
	if (!may_use_loaded && ++may_use_asked > JOBQ_MAY_USE_ASK_MAX)
	{
		may_use_loaded = true;
		if (UsableLoad(role) && may_use_cache != NULL &&
			may_use_generation == acl_generation)
		{
			may_use_complete = true;
			if (may_use_every)
				PG_RETURN_BOOL(true);
			PG_RETURN_BOOL(bsearch(&queue, usable_names, usable_n, sizeof(char *), NameCmp) != NULL);
		}
		may_use_every = false;
	}

	jobq_owner_begin(&saved);
	may = MayHold(role, queue, JOBQ_CAP_ENQUEUE, true);
	jobq_owner_end(&saved);

	/* keep the answer only if asking it changed none of what it holds for */
	if (cache != NULL && may_use_cache == cache && may_use_generation == acl_generation)
	{
		entry = hash_search(cache, queue, HASH_ENTER, NULL);
		entry->may = may;
	}
	PG_RETURN_BOOL(may);
}
