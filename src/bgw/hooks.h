/*-------------------------------------------------------------------------
 *
 * bgw/hooks.h
 *	  jobq's ProcessUtility hook (bgw/hooks.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_BGW_HOOKS_H
#define JOBQ_BGW_HOOKS_H

#include "postgres.h"

extern void jobq_hooks_init(void);

#endif							/* JOBQ_BGW_HOOKS_H */
