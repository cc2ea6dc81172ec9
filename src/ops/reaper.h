/*-------------------------------------------------------------------------
 *
 * ops/reaper.h
 *	  Reaping expired leases (ops/reaper.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_REAPER_H
#define JOBQ_REAPER_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* SPI must be connected. */
extern int64 jobq_reap_expired(int batch, bool *more);
extern int64 jobq_end_orphaned_leases(void);

#endif							/* JOBQ_REAPER_H */
