/*-------------------------------------------------------------------------
 *
 * backoff.h
 *	  Retry delays: exponential backoff with a cap and jitter (backoff.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_BACKOFF_H
#define JOBQ_BACKOFF_H

#include "postgres.h"

extern int64 jobq_backoff_usecs(int64 base_us, int64 cap_us, double jitter,
								int retry_count, double unit_random);

#endif							/* JOBQ_BACKOFF_H */
