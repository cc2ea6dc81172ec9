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

/* Return the plan cached in *cache, preparing and saving it on first use. */
SPIPlanPtr
jobq_plan(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	SPIPlanPtr	plan;

	if (*cache != NULL)
		return *cache;

	PushCatalogSearchPath();
	PG_TRY();
	{
		plan = SPI_prepare(sql, nargs, argtypes);
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
 * Execute a saved plan under the pg_catalog search path and check the SPI
 * result code.
 */
void
jobq_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	int			rc;

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
	if (rc != expected)
		elog(ERROR, "jobq: unexpected SPI result %s",
			 SPI_result_code_string(rc));
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
