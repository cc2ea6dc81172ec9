/*-------------------------------------------------------------------------
 *
 * bgw/launcher.h
 *	  The jobq launcher (bgw/launcher.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_BGW_LAUNCHER_H
#define JOBQ_BGW_LAUNCHER_H

#include "postgres.h"

PGDLLEXPORT void jobq_launcher_main(Datum main_arg);

extern void jobq_launcher_register(void);

#endif							/* JOBQ_BGW_LAUNCHER_H */
