/*-------------------------------------------------------------------------
 *
 * workflow/settle.h
 *	  Workflows, the finishing side: settling a finished job's dependents, a
 *	  retried parent, a retried dependent (workflow/settle.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_SETTLE_H
#define JOBQ_SETTLE_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "workflow/decide.h"
#include "workflow/defer.h"

/* SPI must be connected, as the extension owner. */
extern void jobq_parents_finished(const int64 *ids, int n, TimestampTz now);
extern void jobq_parent_retried(int64 job_id, TimestampTz now);
extern bool jobq_retry_blocks(int64 job_id);
extern void jobq_settle_again(const int64 *ids, int n, TimestampTz now);

/* The worker's settling of jobq.settle_deferred; SPI must be connected. */
extern int64 jobq_settle_deferred(int batch, bool *more,
								  TimestampTz *next_retry);

#endif							/* JOBQ_SETTLE_H */
