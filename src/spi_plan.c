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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "utils/guc.h"

#include "jobq.h"

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
 * Execute a saved plan under the pg_catalog search path and check the SPI
 * result code.  indexed: plan (when the plan cache plans it now) with
 * sequential scans, bitmap scans and sorts disabled, so that the plan reads
 * its indexes.
 */
static void
ExecPlan(SPIPlanPtr plan, Datum *values, const char *nulls, int expected,
		 bool indexed)
{
	int			rc;
	int			nestlevel = 0;

	if (indexed)
	{
		nestlevel = NewGUCNestLevel();
		(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
	}
	PushCatalogSearchPath();
	PG_TRY();
	{
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
	}
	PG_FINALLY();
	{
		PopOverrideSearchPath();
	}
	PG_END_TRY();
	/* on error, the transaction's (or subtransaction's) abort resets them */
	if (indexed)
		AtEOXact_GUC(true, nestlevel);
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
 * Execute a saved generic plan that must use its indexes: a claim takes the
 * head of jobq.ready in index order, a completion finds its jobs by primary
 * key.  A generic plan outlives the statistics it was made with, and one
 * made while a table was small (a sequential scan, or a bitmap scan and a
 * sort) would read the whole table once it has grown.
 */
void
jobq_spi_exec_indexed(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	ExecPlan(plan, values, nulls, expected, true);
}

/* Run one SQL text (not kept) under the pg_catalog search path. */
void
jobq_spi_exec_sql(const char *sql, bool read_only, int expected)
{
	int			rc;

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
	if (rc != expected)
		elog(ERROR, "jobq: unexpected SPI result %s",
			 SPI_result_code_string(rc));
}
