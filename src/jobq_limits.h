/*-------------------------------------------------------------------------
 *
 * jobq_limits.h
 *	  jobq's hard limits (the longest name and key, the most executors per
 *	  database) and the prefix of the idempotency keys jobq derives itself.
 *
 * Version differences live in compat.h.  src/README.md maps the files and
 * the direction of their dependencies: bgw/ -> ops/ -> queue/ -> workflow/
 * -> shmem/, cron/ -> the base at src/'s top; a file includes only headers
 * of its own layer or below (test/layout/check).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_LIMITS_H
#define JOBQ_LIMITS_H

#include "postgres.h"

/*
 * Hard upper bounds of the name limits (bytes); the GUCs jobq.max_name_length
 * and jobq.max_key_length set the limits in force, up to these.
 */
#define JOBQ_MAX_NAME_LEN		128
#define JOBQ_MAX_KEY_LEN		512

/* Most executor processes per database. */
#define JOBQ_MAX_EXECUTORS	16

/* Failing units of background work remembered per database (shm_bgw.h). */
#define JOBQ_FAILED_UNITS_KEPT	16

/* Room for a job's status and a NUL (pruning's turn keeps one; shm_bgw.h). */
#define JOBQ_STATUS_SIZE	16

/*
 * Longest wait of the database's worker for a lock (ms): past it the pass
 * ends and its database is tried again after jobq.naptime (bgw/worker.c).
 */
#define JOBQ_WORKER_LOCK_TIMEOUT	100

/* Prefix of the idempotency keys jobq derives itself; clients may not use it. */
#define JOBQ_INTERNAL_KEY_PREFIX	"jobq:"

#endif							/* JOBQ_LIMITS_H */
