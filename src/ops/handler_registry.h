/*-------------------------------------------------------------------------
 *
 * ops/handler_registry.h
 *	  Job handlers (ops/handler_registry.c): their registration is SQL-callable
 *	  only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_HANDLER_REGISTRY_H
#define JOBQ_HANDLER_REGISTRY_H

#include "postgres.h"

#endif							/* JOBQ_HANDLER_REGISTRY_H */
