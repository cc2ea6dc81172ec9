/*-------------------------------------------------------------------------
 *
 * spi_plan.c
 *	  Saved SPI plans, prepared under a search_path of pg_catalog alone.
 *
 * Every query jobq runs names its own objects with the jobq schema and
 * leaves functions, operators and types to resolve.  They are prepared and
 * executed under an override search path of pg_catalog alone, whatever the
 * caller's search_path holds.  Executing under it matters as much as
 * preparing: PostgreSQL 15's plan cache re-analyzes a saved plan whenever
 * the search path in force differs from the one it was made under.
 *
 * Every statement is also planned and executed with jit = off.  A plan
 * made with enable_sort off (the indexed statements) costs about 1e10 when
 * it needs a sort anyway, far past jit_above_cost, and the default jit = on
 * then spent tens to hundreds of milliseconds compiling a statement that
 * runs in well under one, on every execution.  jobq's statements read a few
 * rows through indexes: they never gain from JIT.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "jit/jit.h"
#include "nodes/parsenodes.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

#include "spi_plan.h"

/*
 * Set the planner settings of a jobq statement (jit off; with indexed, no
 * sequential scans, bitmap scans or sorts either) until
 * RestorePlannerSettings; returns the GUC nest level to restore, or -1 when
 * nothing was set.  On error, the (sub)transaction's abort restores them.
 */
static int
SetPlannerSettings(bool indexed)
{
	int			nestlevel;

	if (!indexed && !jit_enabled)
		return -1;
	nestlevel = NewGUCNestLevel();
	if (jit_enabled)
		(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	if (indexed)
	{
		(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	return nestlevel;
}

/* Undo SetPlannerSettings. */
static void
RestorePlannerSettings(int nestlevel)
{
	if (nestlevel >= 0)
		AtEOXact_GUC(true, nestlevel);
}

/* Make pg_catalog alone the search path, until PopOverrideSearchPath. */
static void
PushCatalogSearchPath(void)
{
	OverrideSearchPath *path = GetOverrideSearchPath(CurrentMemoryContext);

	path->schemas = NIL;
	path->addCatalog = true;
	path->addTemp = false;
	PushOverrideSearchPath(path);
}

/* Prepare (cursor_options for the plan cache) and save sql, once. */
static SPIPlanPtr
PlanCached(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes,
		   int cursor_options)
{
	SPIPlanPtr	plan;

	if (*cache != NULL)
		return *cache;

	PushCatalogSearchPath();
	PG_TRY();
	{
		plan = SPI_prepare_cursor(sql, nargs, argtypes, cursor_options);
		if (plan == NULL)
			elog(ERROR, "jobq: SPI_prepare failed: %s",
				 SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "jobq: SPI_keepplan failed");
	}
	PG_FINALLY();
	{
		PopOverrideSearchPath();
	}
	PG_END_TRY();

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
 * spent more time planning than running: about 40 % of a claim + complete.
 * Statements that walk an index in order run through jobq_spi_exec_indexed.
 */
SPIPlanPtr
jobq_plan_generic(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	return PlanCached(cache, sql, nargs, argtypes, CURSOR_OPT_GENERIC_PLAN);
}

/*
 * Execute a saved plan under the pg_catalog search path and jit off, and
 * check the SPI result code.  indexed: plan (when the plan cache plans it
 * now) with sequential scans, bitmap scans and sorts disabled, so that the
 * plan reads its indexes.
 */
static void
ExecPlan(SPIPlanPtr plan, Datum *values, const char *nulls, int expected,
		 bool indexed, bool latest)
{
	int			rc;
	int			nestlevel = SetPlannerSettings(indexed);

	PushCatalogSearchPath();
	PG_TRY();
	{
		if (latest)
			rc = SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(),
									  InvalidSnapshot, false, true, 0);
		else
			rc = SPI_execute_plan(plan, values, nulls, false, 0);
	}
	PG_FINALLY();
	{
		PopOverrideSearchPath();
	}
	PG_END_TRY();
	RestorePlannerSettings(nestlevel);
	if (rc != expected)
		elog(ERROR, "jobq: unexpected SPI result %s",
			 SPI_result_code_string(rc));
}

/* Execute a saved plan (see ExecPlan). */
void
jobq_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	ExecPlan(plan, values, nulls, expected, false, false);
}

/*
 * Execute a saved generic plan that must use its indexes: a claim takes the
 * head of jobq.ready in index order, a completion finds its jobs by primary
 * key.  A generic plan outlives the statistics it was made with, and one
 * made while a table was small (a sequential scan, or a bitmap scan and a
 * sort) would read the whole table once it has grown.
 */
void
jobq_spi_exec_indexed(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	ExecPlan(plan, values, nulls, expected, true, false);
}

/*
 * As jobq_spi_exec_indexed, reading the latest committed state instead of
 * the statement's snapshot (as a foreign key's check does), whatever the
 * isolation level: for rows another transaction committed while this one
 * waited for a row lock (a parent's new dependents, src/queue_depend.c).
 */
void
jobq_spi_exec_latest(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	ExecPlan(plan, values, nulls, expected, true, true);
}

/* Run one SQL text (not kept) under the pg_catalog search path, jit off. */
void
jobq_spi_exec_sql(const char *sql, bool read_only, int expected)
{
	int			rc;
	int			nestlevel = SetPlannerSettings(false);

	PushCatalogSearchPath();
	PG_TRY();
	{
		rc = SPI_execute(sql, read_only, 0);
	}
	PG_FINALLY();
	{
		PopOverrideSearchPath();
	}
	PG_END_TRY();
	RestorePlannerSettings(nestlevel);
	if (rc != expected)
		elog(ERROR, "jobq: unexpected SPI result %s",
			 SPI_result_code_string(rc));
}
