/*-------------------------------------------------------------------------
 *
 * ops/app_workers.h
 *	  The application's workers (ops/app_workers.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_APP_WORKERS_H
#define JOBQ_APP_WORKERS_H

#include "postgres.h"

#include "datatype/timestamp.h"

extern int64 jobq_prune_app_workers(int batch, TimestampTz now);

#endif							/* JOBQ_APP_WORKERS_H */
