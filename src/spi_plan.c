/*-------------------------------------------------------------------------
 *
 * spi_plan.c
 *	  Saved SPI plans, prepared under a search_path of pg_catalog alone.
 *
 * Every query jobq runs names its own objects with the jobq schema and
 * leaves functions and operators to resolve; preparing under an override
 * search path means they resolve in pg_catalog only, whatever the caller's
 * search_path holds.  The plan cache keeps that path and uses it again when
 * it re-plans (after DROP/CREATE EXTENSION, for instance).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"

#include "jobq.h"

/* Return the plan cached in *cache, preparing and saving it on first use. */
SPIPlanPtr
jobq_plan(SPIPlanPtr *cache, const char *sql, int nargs, Oid *argtypes)
{
	OverrideSearchPath *path;
	SPIPlanPtr	plan;

	if (*cache != NULL)
		return *cache;

	path = GetOverrideSearchPath(CurrentMemoryContext);
	path->schemas = NIL;
	path->addCatalog = true;
	path->addTemp = false;
	PushOverrideSearchPath(path);
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

/* Execute a saved plan and check the SPI result code. */
void
jobq_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls, int expected)
{
	int			rc = SPI_execute_plan(plan, values, nulls, false, 0);

	if (rc != expected)
		elog(ERROR, "jobq: unexpected SPI result %s",
			 SPI_result_code_string(rc));
}
