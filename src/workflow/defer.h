/*-------------------------------------------------------------------------
 *
 * workflow/defer.h
 *	  Workflows: dependents another transaction holds, deferred to the
 *	  background worker; job-id helpers (workflow/defer.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_DEFER_H
#define JOBQ_DEFER_H

#include "postgres.h"

extern int	jobq_id_compare(const void *a, const void *b);
extern Datum jobq_id_array(const int64 *ids, int n);

/* SPI must be connected, as the extension owner. */
extern int	jobq_lock_children(const int64 *ids, int n, int64 *locked);
extern void jobq_defer_parents(int64 *parents, int n, bool retried);
extern void jobq_defer_resume(int64 *parents, int n, bool retried);
extern void jobq_defer_again_set(bool again);
extern void jobq_defer_again(const int64 *ids, int n);
extern int	jobq_result_ids(int64 **out);

#endif							/* JOBQ_DEFER_H */
