/*-------------------------------------------------------------------------
 *
 * plan_defaults.c
 *	  The default arguments of jobq.enqueue and jobq.enqueue_many, decoded
 *	  once per backend for the planner.
 *
 * A call that leaves arguments to their defaults has PostgreSQL decode the
 * function's pg_proc.proargdefaults (the nodeToString form of all of them)
 * twice per statement: the parser, to match the call, and the planner, to
 * fill the missing arguments in (expand_function_arguments).  For
 * jobq.enqueue, nine defaults, each decode is an eighth of a call parsed,
 * planned and run (the simple protocol, or an unnamed statement of the
 * extended one; a prepared statement parses once).  This planner hook fills
 * in the missing arguments of top-level calls of the two functions (in the
 * select list, possibly under a field selection, or in FROM) from a
 * per-backend copy of their defaults, decoded once and dropped whenever
 * pg_proc changes, so the planner finds nothing left to expand; the
 * parser's decode stays.  It does what expand_function_arguments does
 * (named arguments put in their places, the missing ones taken from the
 * defaults, in order), and leaves any other call alone: the planner then
 * expands it as always.  A statement without such a call pays a look at its
 * select list and range table.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "catalog/pg_proc.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/planner.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "plan_defaults.h"

/* Most functions whose defaults are kept (enqueue and enqueue_many, and overloads). */
#define JOBQ_MAX_DEFAULTED	4

/* One function's defaults: for its last ndefaults of nargs arguments. */
typedef struct JobqDefaults
{
	Oid			funcid;
	int			nargs;
	int			ndefaults;
	List	   *defaults;
} JobqDefaults;

static planner_hook_type prev_planner_hook = NULL;
static MemoryContext defaults_cxt = NULL;
static bool defaults_valid = false;
static JobqDefaults defaulted[JOBQ_MAX_DEFAULTED];
static int	ndefaulted = 0;

/* pg_proc changed (any function, any database's catalog seen here): load again. */
static void
DefaultsInvalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	defaults_valid = false;
}

/* Keep the defaults of the functions jobq.name of extension ext in defaulted[]. */
static void
LoadFunction(Oid nsp, Oid ext, const char *name)
{
	CatCList   *list = SearchSysCacheList1(PROCNAMEARGSNSP, CStringGetDatum(name));

	for (int i = 0; i < list->n_members && ndefaulted < JOBQ_MAX_DEFAULTED; i++)
	{
		HeapTuple	tup = &list->members[i]->tuple;
		Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(tup);
		bool		isnull;
		Datum		d;
		MemoryContext old;
		List	   *defaults;

		bool		polymorphic = IsPolymorphicType(proc->prorettype);

		for (int a = 0; a < proc->pronargs; a++)
			polymorphic |= IsPolymorphicType(proc->proargtypes.values[a]);

		/*
		 * Only the extension's own functions: anyone with CREATE on the
		 * database can make a schema named jobq where it is not installed.
		 * None with polymorphic arguments, whose defaults the planner casts
		 * once the call's types are known, nor a variadic one.
		 */
		if (proc->pronamespace != nsp || proc->pronargdefaults == 0 ||
			proc->provariadic != InvalidOid || polymorphic ||
			getExtensionOfObject(ProcedureRelationId, proc->oid) != ext)
			continue;
		d = SysCacheGetAttr(PROCNAMEARGSNSP, tup, Anum_pg_proc_proargdefaults, &isnull);
		if (isnull)
			continue;
		old = MemoryContextSwitchTo(defaults_cxt);
		defaults = castNode(List, stringToNode(TextDatumGetCString(d)));
		MemoryContextSwitchTo(old);
		if (list_length(defaults) != proc->pronargdefaults || proc->pronargs > FUNC_MAX_ARGS)
			continue;
		defaulted[ndefaulted].funcid = proc->oid;
		defaulted[ndefaulted].nargs = proc->pronargs;
		defaulted[ndefaulted].ndefaults = proc->pronargdefaults;
		defaulted[ndefaulted].defaults = defaults;
		ndefaulted++;
	}
	ReleaseSysCacheList(list);
}

/*
 * (Re)load the defaults of this database's jobq.enqueue and
 * jobq.enqueue_many; none when jobq is not installed.  Valid from the start
 * of the load: an invalidation that arrives while it runs loads them again
 * next time.
 */
static void
LoadDefaults(void)
{
	Oid			nsp;
	Oid			ext;

	if (defaults_cxt == NULL)
		defaults_cxt = AllocSetContextCreate(CacheMemoryContext, "jobq default arguments",
											 ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(defaults_cxt);
	ndefaulted = 0;
	defaults_valid = true;
	nsp = get_namespace_oid("jobq", true);
	ext = get_extension_oid("jobq", true);
	if (!OidIsValid(nsp) || !OidIsValid(ext))
		return;
	LoadFunction(nsp, ext, "enqueue");
	LoadFunction(nsp, ext, "enqueue_many");
}

/*
 * Fill in the missing arguments of a call of one of the kept functions, as
 * expand_function_arguments would; leave any other call, or one not as
 * expected, alone.
 */
static void
FillCall(FuncExpr * call)
{
	JobqDefaults *f = NULL;
	Node	   *slots[FUNC_MAX_ARGS];
	int			npositional = 0;
	int			first_default;
	ListCell   *lc;
	List	   *args = NIL;

	if (!defaults_valid)
		LoadDefaults();
	for (int i = 0; i < ndefaulted; i++)
		if (defaulted[i].funcid == call->funcid)
			f = &defaulted[i];
	if (f == NULL || call->funcvariadic || list_length(call->args) >= f->nargs)
		return;
	memset(slots, 0, sizeof(Node *) * f->nargs);
	foreach(lc, call->args)
	{
		Node	   *arg = (Node *) lfirst(lc);

		if (IsA(arg, NamedArgExpr))
		{
			NamedArgExpr *na = (NamedArgExpr *) arg;

			if (na->argnumber < 0 || na->argnumber >= f->nargs || slots[na->argnumber] != NULL)
				return;
			slots[na->argnumber] = (Node *) na->arg;
		}
		else
		{
			/* positional arguments come first (the parser sees to it) */
			if (npositional >= f->nargs || slots[npositional] != NULL)
				return;
			slots[npositional++] = arg;
		}
	}
	first_default = f->nargs - f->ndefaults;
	for (int i = 0; i < f->nargs; i++)
		if (slots[i] == NULL && i < first_default)
			return;
	for (int i = 0; i < f->nargs; i++)
		args = lappend(args, slots[i] != NULL ? slots[i]
					   : copyObject(list_nth(f->defaults, i - first_default)));
	call->args = args;
}

/* A top-level expression: a call, or a field of one's result. */
static void
FillExpr(Node *expr)
{
	if (expr != NULL && IsA(expr, FieldSelect))
		expr = (Node *) ((FieldSelect *) expr)->arg;
	if (expr != NULL && IsA(expr, FuncExpr))
		FillCall((FuncExpr *) expr);
}

static PlannedStmt *
JobqPlanner(Query *parse, const char *query_string, int cursorOptions, ParamListInfo boundParams)
{
	ListCell   *lc;

	if (parse->commandType == CMD_SELECT)
	{
		foreach(lc, parse->targetList)
			FillExpr((Node *) ((TargetEntry *) lfirst(lc))->expr);
		foreach(lc, parse->rtable)
		{
			RangeTblEntry *rte = (RangeTblEntry *) lfirst(lc);
			ListCell   *fc;

			if (rte->rtekind != RTE_FUNCTION)
				continue;
			foreach(fc, rte->functions)
				FillExpr(((RangeTblFunction *) lfirst(fc))->funcexpr);
		}
	}
	if (prev_planner_hook)
		return prev_planner_hook(parse, query_string, cursorOptions, boundParams);
	return standard_planner(parse, query_string, cursorOptions, boundParams);
}

/* Install the planner hook (module load). */
void
jobq_plan_defaults_init(void)
{
	prev_planner_hook = planner_hook;
	planner_hook = JobqPlanner;
	CacheRegisterSyscacheCallback(PROCOID, DefaultsInvalidate, (Datum) 0);
}
