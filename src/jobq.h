/*-------------------------------------------------------------------------
 *
 * jobq.h
 *	  Declarations shared by the C files of jobq, a background-job queue
 *	  that lives inside PostgreSQL.
 *
 * Each .c file owns one concern: jobq.c (module load, GUCs), queue_ops.c
 * (the SQL-callable queue operations), queue_state.c (per-queue claim
 * positions in shared memory), backoff.c (retry delays), priority.c
 * (priority labels), spi_plan.c (saved SPI plans with a safe search_path).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_H
#define JOBQ_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "executor/spi.h"

/* Version shims: keep PostgreSQL version differences here. */
#if PG_VERSION_NUM < 150000
#error "jobq requires PostgreSQL 15 or later"
#endif

/* Limits on names that are not settings (bytes). */
#define JOBQ_MAX_NAME_LEN		128
#define JOBQ_MAX_KEY_LEN		512
#define JOBQ_MAX_ERROR_LEN		8192

/* GUCs (jobq.c) */
extern int	jobq_max_payload_size;
extern int	jobq_max_batch;
extern int	jobq_idempotency_retention;

/* A position in a queue's claim order: (-priority, run_at, job_id). */
typedef struct JobqClaimPos
{
	int32		neg_priority;
	TimestampTz run_at;
	int64		job_id;
} JobqClaimPos;

/* queue_state.c */
extern void jobq_state_shmem_request(void);
extern void jobq_state_register_callbacks(void);
extern uint64 jobq_state_begin_claim(Oid relid, const char *queue,
									 JobqClaimPos *start);
extern void jobq_state_end_claim(Oid relid, const char *queue, uint64 epoch,
								 const JobqClaimPos *last);
extern void jobq_state_note_ready(const char *queue, const JobqClaimPos *pos);
extern void jobq_state_note_unready(const char *queue, const JobqClaimPos *pos);
extern bool jobq_state_due_probe_needed(Oid relid, const char *queue,
										TimestampTz now, uint64 *epoch);
extern void jobq_state_set_next_due(Oid relid, const char *queue,
									uint64 epoch, TimestampTz next_due);
extern void jobq_state_note_scheduled(const char *queue, TimestampTz run_at);

/* backoff.c */
extern int64 jobq_backoff_usecs(int64 base_us, int64 cap_us, double jitter,
								int retry_count, double unit_random);

/* spi_plan.c */
extern SPIPlanPtr jobq_plan(SPIPlanPtr *cache, const char *sql, int nargs,
							Oid *argtypes);
extern void jobq_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls,
						  int expected);

#endif							/* JOBQ_H */
