/*-------------------------------------------------------------------------
 *
 * executor.h
 *	  Job handlers and the executor processes that run them (executor.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_EXECUTOR_H
#define JOBQ_EXECUTOR_H

#include "postgres.h"

PGDLLEXPORT void jobq_executor_main(Datum main_arg);

/* Has this database a registered handler?  (a transaction must be open) */
extern bool jobq_database_has_handlers(void);

#endif							/* JOBQ_EXECUTOR_H */
