/*-------------------------------------------------------------------------
 *
 * bgw/worker.h
 *	  The per-database jobq worker (bgw/worker.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_BGW_WORKER_H
#define JOBQ_BGW_WORKER_H

#include "postgres.h"

PGDLLEXPORT void jobq_worker_main(Datum main_arg);

#endif							/* JOBQ_BGW_WORKER_H */
