/*-------------------------------------------------------------------------
 *
 * bgw/handler_proc.h
 *	  Job handlers and the executor processes that run them
 *	  (bgw/handler_proc.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_HANDLER_PROC_H
#define JOBQ_HANDLER_PROC_H

#include "postgres.h"

PGDLLEXPORT void jobq_executor_main(Datum main_arg);

/* Has this database a registered handler?  (a transaction must be open) */
extern bool jobq_database_has_handlers(void);

#endif							/* JOBQ_HANDLER_PROC_H */
