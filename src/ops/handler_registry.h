/*-------------------------------------------------------------------------
 *
 * ops/handler_registry.h
 *	  Job handlers (ops/handler_registry.c): their registration is SQL-callable
 *	  only; the executors check a handler's rights before each claim and run;
 *	  pruning removes those of dropped roles.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_HANDLER_REGISTRY_H
#define JOBQ_HANDLER_REGISTRY_H

#include "postgres.h"

extern int64 jobq_prune_dropped_handlers(int batch);
extern char *jobq_handler_refusal(Oid role, const char *queue, Oid handler);
extern void jobq_handler_rights_check(Oid role, const char *queue, Oid handler);

#endif							/* JOBQ_HANDLER_REGISTRY_H */
