/*-------------------------------------------------------------------------
 *
 * ops/handler_registry.h
 *	  Job handlers (ops/handler_registry.c): their registration is SQL-callable
 *	  only; pruning removes those of dropped roles.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_HANDLER_REGISTRY_H
#define JOBQ_HANDLER_REGISTRY_H

#include "postgres.h"

extern int64 jobq_prune_dropped_handlers(int batch);

#endif							/* JOBQ_HANDLER_REGISTRY_H */
