/*-------------------------------------------------------------------------
 *
 * reaper.h
 *	  Reaping expired leases (reaper.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_REAPER_H
#define JOBQ_REAPER_H

#include "postgres.h"

/* SPI must be connected. */
extern int64 jobq_reap_expired(int batch, bool *more);

#endif							/* JOBQ_REAPER_H */
