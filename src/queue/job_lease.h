/*-------------------------------------------------------------------------
 *
 * queue/job_lease.h
 *	  A lease begun (claim) and ended (complete) straight in the tables
 *	  (queue/job_lease.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_JOB_LEASE_H
#define JOBQ_JOB_LEASE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "nodes/pg_list.h"
#include "utils/array.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "shmem/shm_queue.h"

/* The columns of a claimed job, as jobq.claim's statement returns them. */
#define JOBQ_CLAIMED_NCOLS 12

/* One claimed job: its output columns, in claim order. */
typedef struct JobqClaimedRow
{
	Datum		values[JOBQ_CLAIMED_NCOLS];
	bool		nulls[JOBQ_CLAIMED_NCOLS];
} JobqClaimedRow;

/*
 * A ready row a claim found: where it is, its key, and the running count of
 * its concurrency key under a per-key limit (NULL: none), which counts it
 * already.
 */
typedef struct JobqReadyRow
{
	ItemPointerData tid;
	JobqClaimPos key;
	int64	   *key_count;
} JobqReadyRow;

/*
 * The running jobs of a queue by concurrency key (queue/job_lease.c), for a
 * claim under a per-key limit.
 */
typedef struct JobqKeyCounts JobqKeyCounts;

/* How many visible ready rows of its kinds a claim under a per-key limit reads at most. */
#define JOBQ_KEY_SCAN	10000

/*
 * Where a claim first passed over a visible ready row it did not take (one
 * of a kind it did not ask for, of a concurrency key at its limit, or the
 * row at which it stopped after JOBQ_KEY_SCAN rows): in its island's scan,
 * and from its start on.  Its queue's position may move up to that row, not
 * past it; its kinds position up to the first such row of its kinds.
 */
typedef struct JobqClaimPassed
{
	bool		in_island;
	JobqClaimPos island_at;
	bool		after;
	JobqClaimPos at;
	bool		full_key;		/* one of them for its key's limit */
	bool		scanned;		/* it scanned from its start: */
	bool		own_after;		/* a row of its kinds passed over, */
	JobqClaimPos own_at;		/* the first one */
	bool		ended;			/* it read to the end of the queue, */
	JobqClaimPos end;			/* whose last index entry (dead or alive) is
								 * here */
} JobqClaimPassed;

/* What a claim asks for. */
typedef struct JobqDirectClaim
{
	const char *queue;
	int32		batch;
	Datum	   *kinds;			/* text, nkinds of them; NULL: any kind */
	bool	   *kind_nulls;
	int			nkinds;
	JobqClaimPos start;			/* the queue's claim position */
	bool		has_island;		/* first the rows in [island_lo, island_hi] */
	JobqClaimPos island_lo;
	JobqClaimPos island_hi;
	TimestampTz now;			/* claimed_at; the lease starts here */
	Interval   *lease;
	Datum		worker_id;		/* text, or (Datum) 0 for NULL */
	int64		token_salt;		/* 31 random bits */
	int32		max_per_key;	/* 0: no per-key limit */
	JobqKeyCounts *key_counts;	/* with one: the running jobs by key */
} JobqDirectClaim;

extern JobqKeyCounts *jobq_key_counts_create(void);
extern void jobq_key_counts_add(JobqKeyCounts *counts, text *key, int64 n);
extern void jobq_claim_direct(const JobqDirectClaim *c, JobqClaimedRow **rows,
							  uint64 *nrows, uint64 *nisland, JobqClaimPassed *passed);
extern void jobq_complete_direct(const Datum *ids, const bool *id_nulls,
								 const Datum *tokens, const bool *token_nulls,
								 const Datum *results, const bool *result_nulls,
								 int n, TimestampTz now, List **queues,
								 uint64 *ncompleted);
extern void jobq_delete_rows_nowait(JobqRelId which, ItemPointerData *tids, int n,
									bool *deleted);
extern int	jobq_delete_returned(JobqRelId which, int ncols, Datum **cols, bool **colnulls);
extern void jobq_columns_arrays(int ncols, const Oid *types, Datum **cols, bool **colnulls,
								int n, Datum *out);

#endif							/* JOBQ_JOB_LEASE_H */
