/*-------------------------------------------------------------------------
 *
 * ops/retention.h
 *	  Pruning finished jobs and expired idempotency keys (ops/retention.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_RETENTION_H
#define JOBQ_RETENTION_H

#include "postgres.h"

/* SPI must be connected. */
extern int64 jobq_prune_finished(int batch, bool *more);

#endif							/* JOBQ_RETENTION_H */
