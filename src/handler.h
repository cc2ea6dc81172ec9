/*-------------------------------------------------------------------------
 *
 * handler.h
 *	  Job handlers (handler.c): their registration is SQL-callable only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_HANDLER_H
#define JOBQ_HANDLER_H

#include "postgres.h"

#endif							/* JOBQ_HANDLER_H */
