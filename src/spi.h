/*-------------------------------------------------------------------------
 *
 * spi.h
 *	  Saved SPI plans under a pinned search_path (spi.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_SPI_H
#define JOBQ_SPI_H

#include "postgres.h"

#include "executor/spi.h"

extern SPIPlanPtr jobq_plan(SPIPlanPtr *cache, const char *sql, int nargs,
							Oid *argtypes);
extern SPIPlanPtr jobq_plan_generic(SPIPlanPtr *cache, const char *sql, int nargs,
									Oid *argtypes);
extern SPIPlanPtr jobq_plan_custom(SPIPlanPtr *cache, const char *sql, int nargs,
								   Oid *argtypes);
extern void jobq_spi_exec_latest(SPIPlanPtr plan, Datum *values, const char *nulls,
								 int expected);
extern void jobq_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls,
						  int expected);
extern void jobq_spi_exec_sql(const char *sql, bool read_only, int expected);

#endif							/* JOBQ_SPI_H */
