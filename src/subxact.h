/*-------------------------------------------------------------------------
 *
 * subxact.h
 *	  The one subtransaction runner (subxact.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_SUBXACT_H
#define JOBQ_SUBXACT_H

#include "postgres.h"

/* Work run in a subtransaction: true keeps it, false rolls it back. */
typedef bool (*JobqSubxactFn) (void *arg);

extern ErrorData *jobq_subxact_run(JobqSubxactFn fn, void *arg);

#endif							/* JOBQ_SUBXACT_H */
