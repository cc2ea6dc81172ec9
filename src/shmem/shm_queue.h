/*-------------------------------------------------------------------------
 *
 * shmem/shm_queue.h
 *	  Per-queue claim positions and wake-ups in shared memory
 *	  (shmem/shm_queue.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_SHM_QUEUE_H
#define JOBQ_SHM_QUEUE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/condition_variable.h"

/* A position in a queue's claim order: (-priority, run_at, job_id). */
typedef struct JobqClaimPos
{
	int32		neg_priority;
	TimestampTz run_at;
	int64		job_id;
} JobqClaimPos;

extern int	jobq_claim_pos_compare(const JobqClaimPos *a, const JobqClaimPos *b);
extern void jobq_state_shmem_request(void);
extern void jobq_state_register_callbacks(void);

/*
 * A queue's island (shmem/shm_queue.c): claimable rows that sort before its
 * claim position, all within [lo, hi], as a claim found it when it began.
 */
typedef struct JobqClaimIsland
{
	bool		valid;			/* false: the queue had no island */
	JobqClaimPos lo;
	JobqClaimPos hi;
	JobqClaimPos pos;			/* the queue's claim position then */
	uint64		gen;			/* the island's generation then */
} JobqClaimIsland;

extern void jobq_state_forget_database(Oid dbid);
extern uint64 jobq_state_seed(void);
extern uint64 jobq_state_kinds_id(Datum *kinds, bool *nulls, int n);
extern uint64 jobq_state_begin_claim(Oid relid, const char *queue, uint64 kinds_id,
									 JobqClaimPos *pos, JobqClaimPos *start,
									 JobqClaimIsland *island);
extern void jobq_state_end_claim(Oid relid, const char *queue, uint64 epoch,
								 const JobqClaimIsland *island,
								 const JobqClaimPos *island_last, bool island_done,
								 const JobqClaimPos *last, uint64 kinds_id,
								 const JobqClaimPos *kinds_last);
extern void jobq_state_note_ready(const char *queue, const JobqClaimPos *pos);
extern void jobq_state_note_unready(const char *queue, const JobqClaimPos *pos);
extern void jobq_state_claim_begin(const char *queue, const JobqClaimPos *lo);
extern void jobq_state_claim_end(const char *queue);
extern bool jobq_state_due_probe_needed(Oid relid, const char *queue,
										TimestampTz now, uint64 *epoch);
extern void jobq_state_set_next_due(Oid relid, const char *queue,
									uint64 epoch, TimestampTz next_due);
extern void jobq_state_note_scheduled(const char *queue, TimestampTz run_at);
extern void jobq_state_note_unscheduled(const char *queue);
extern ConditionVariable *jobq_state_wait_begin(const char *queue);
extern void jobq_state_wait_end(void);
extern TimestampTz jobq_state_next_due(const char *queue);
extern uint64 jobq_state_wake_seq(const char *queue);
extern void jobq_state_mark_handled(const char *queue);
extern uint64 jobq_state_settings_gen(void);

#endif							/* JOBQ_SHM_QUEUE_H */
