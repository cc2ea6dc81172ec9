/*-------------------------------------------------------------------------
 *
 * spi.c
 *	  Saved SPI plans, prepared and run under jobq's own search_path.
 *
 * Every query jobq runs names its own objects with the jobq schema and
 * leaves functions, operators and types to resolve.  They are prepared and
 * executed with search_path = pg_catalog, pg_temp, set at a GUC nest level
 * of their own whatever the caller's search_path holds, so that no object
 * of the caller's schemas or temporary schema can stand in for one of
 * PostgreSQL's.  Executing under it matters as much as preparing: the plan
 * cache re-analyzes a saved plan whenever the search path in force differs
 * from the one it was made under.
 *
 * The statements are left to the planner: no planner setting is changed
 * for them.  The hot operations (claim, complete, enqueue, key
 * reservation) write without a statement (job_lease.c, job_insert.c); the
 * statements around them name the columns of an index, and take the head
 * of one with a matching ORDER BY and LIMIT.  test/t/021_jit.pl checks on
 * a stock server that none of theirs reads a large table sequentially and
 * that no statement of jobq's is JIT-compiled.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "spi.h"

/*
 * The search path of every jobq statement: pg_catalog, and the session's
 * temporary schema last.  Named last, pg_temp can never capture a name that
 * pg_catalog has (unnamed, PostgreSQL would search it first for relations
 * and types), and it is never searched for functions and operators.
 */
#define JOBQ_SEARCH_PATH "pg_catalog, pg_temp"

/*
 * Pin the search path of a jobq statement until RestoreStatementSettings.
 * Returns the GUC nest level to restore, or -1 when it was pinned already.
 * On error, the (sub)transaction's abort restores it.  This is the
 * supported way to pin a search path for a while (a SET clause of a
 * function does the same); the override search path of PostgreSQL 15 and
 * 16 is gone in 17.
 */
static int
SetStatementSettings(void)
{
	int			nestlevel;

	if (strcmp(namespace_search_path, JOBQ_SEARCH_PATH) == 0)
		return -1;
	nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", JOBQ_SEARCH_PATH, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

/* Undo SetStatementSettings. */
static void
RestoreStatementSettings(int nestlevel)
{
	if (nestlevel >= 0)
		AtEOXact_GUC(true, nestlevel);
}

/* Prepare (cursor_options for the plan cache) and save sql, once. */
static SPIPlanPtr
PlanCached(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes,
		   int cursor_options)
{
	SPIPlanPtr	plan;
	int			nestlevel;

	if (*cache != NULL)
		return *cache;

	nestlevel = SetStatementSettings();
	plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);
	if (plan == NULL)
		elog(ERROR, "jobq: SPI_prepare failed: %s",
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "jobq: SPI_keepplan failed");
	RestoreStatementSettings(nestlevel);

	*cache = plan;
	return plan;
}

/*
 * Return the plan cached in *cache, preparing and saving it on first use.
 * The plan cache decides between custom and generic plans as for any
 * prepared statement: right for statements whose best plan depends on the
 * values (operations, the scheduler, the reaper).
 */
SPIPlanPtr
jobq_plan(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	return PlanCached(cache, sql, nargs, argtypes, 0);
}

/*
 * As jobq_plan, for the statements of the hot path (enqueue, claim,
 * complete, fail): one generic plan, made once and reused until an
 * invalidation.  Their best plan does not depend on the values, and left to
 * itself the plan cache keeps choosing custom plans for them (parameters in
 * LIMIT and "$n IS NULL OR ..." make the generic plan look dearer), which
 * spent more time planning than running.
 */
SPIPlanPtr
jobq_plan_generic(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	return PlanCached(cache, sql, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
}

/*
 * As jobq_plan, for a statement whose best plan depends on the values at
 * every call (a role's rows of a table where another role has nearly all):
 * a custom plan each time, never the generic one.
 */
SPIPlanPtr
jobq_plan_custom(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	return PlanCached(cache, sql, nargs, argtypes, CURSOR_OPT_CUSTOM_PLAN);
}

/*
 * Execute a saved plan under the pg_catalog search path and check the SPI
 * result code; latest: with the latest committed state as the snapshot.
 */
static void
ExecPlan(SPIPlanPtr plan, Datum *values, const char *nulls, int expected,
		 bool latest)
{
	int			rc;
	int			nestlevel = SetStatementSettings();

	if (latest)
		rc = SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(),
								  InvalidSnapshot, false, true, 0);
	else
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
	RestoreStatementSettings(nestlevel);
	if (rc != expected)
		elog(ERROR, "jobq: unexpected SPI result %s",
			 SPI_result_code_string(rc));
}

/* Execute a saved plan (see ExecPlan). */
void
jobq_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	ExecPlan(plan, values, nulls, expected, false);
}

/*
 * As jobq_spi_exec, reading the latest committed state instead of
 * the statement's snapshot (as a foreign key's check does), whatever the
 * isolation level: for rows another transaction committed while this one
 * waited for a row lock (a parent's new dependents, src/queue_depend.c).
 */
void
jobq_spi_exec_latest(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	ExecPlan(plan, values, nulls, expected, true);
}

/* Run one SQL text (not kept) under jobq's search path. */
void
jobq_spi_exec_sql(const char *sql, bool read_only, int expected)
{
	int			rc;
	int			nestlevel = SetStatementSettings();

	rc = SPI_execute(sql, read_only, 0);
	RestoreStatementSettings(nestlevel);
	if (rc != expected)
		elog(ERROR, "jobq: unexpected SPI result %s",
			 SPI_result_code_string(rc));
}
