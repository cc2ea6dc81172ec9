/*-------------------------------------------------------------------------
 *
 * vacuum_hold.h
 *	  Autovacuum held while the xmin horizon stands still (vacuum_hold.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_VACUUM_HOLD_H
#define JOBQ_VACUUM_HOLD_H

#include "postgres.h"

#include "shm_bgw.h"

/* SPI must be connected, in a transaction; w is the database's watch. */
extern void jobq_autovacuum_hold(JobqHorizonWatch *w);

#endif							/* JOBQ_VACUUM_HOLD_H */
