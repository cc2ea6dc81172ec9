/*-------------------------------------------------------------------------
 *
 * queue_settle.h
 *	  Workflows, the finishing side: settling a finished job's dependents, a
 *	  retried parent, a retried dependent (queue_settle.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_QUEUE_SETTLE_H
#define JOBQ_QUEUE_SETTLE_H

#include "postgres.h"

#include "datatype/timestamp.h"

#include "queue_decide.h"
#include "queue_defer.h"

extern bool jobq_depend_installed(void);

/* SPI must be connected, as the extension owner. */
extern void jobq_parents_finished(const int64 *ids, int n, TimestampTz now);
extern void jobq_parent_retried(int64 job_id, TimestampTz now);
extern bool jobq_retry_blocks(int64 job_id);
extern void jobq_settle_again(const int64 *ids, int n, TimestampTz now);

#endif							/* JOBQ_QUEUE_SETTLE_H */
