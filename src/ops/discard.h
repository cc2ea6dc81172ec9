/*-------------------------------------------------------------------------
 *
 * ops/discard.h
 *	  Removing queues and dead jobs (ops/discard.c): SQL-callable only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_DISCARD_H
#define JOBQ_DISCARD_H

#include "postgres.h"

#endif							/* JOBQ_DISCARD_H */
