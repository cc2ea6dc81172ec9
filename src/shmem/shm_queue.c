/*-------------------------------------------------------------------------
 *
 * shmem/shm_queue.c
 *	  Per-queue claim positions and due times kept in shared memory.
 *
 * A claim deletes rows from the head of jobq.ready's claim index.  While any
 * snapshot older than those deletions is held (a long REPEATABLE READ
 * transaction, a pg_dump), vacuum cannot remove the dead entries, and a
 * claim that starts its index scan at the head of the queue walks all of
 * them: a plain SKIP LOCKED queue falls to a few percent of its clean rate.
 *
 * So every queue has a claim position: a key (-priority, run_at, job_id) such
 * that every committed, unclaimed row of the queue in jobq.ready sorts at or
 * after it.  A claim scans from the position and, when it is done, moves the
 * position up to the last row it claimed.  The position only ever moves
 * backwards through three events, each of which also bumps the queue's
 * epoch:
 *
 *	- a transaction that inserted ready rows commits (lowered to the least
 *	  key it inserted);
 *	- a transaction that deleted ready rows aborts (lowered to the least key
 *	  it deleted: those rows are claimable again);
 *	- the entry is new, or jobq.ready was re-created (no position: scan from
 *	  the head once).
 *
 * A claim remembers the epoch it started under.  When it is done it moves
 * the position to the last row it claimed, but never past a key lowered
 * since it started (the last JOBQ_LOWERED_KEPT lowerings are remembered
 * with their epochs; after more than that, it does not move the position).
 *
 * Islands.  A transaction whose rows all sort before the position (a job of
 * a higher priority than the backlog being drained, say) does not lower the
 * position: between its rows and the position lie the dead entries of every
 * row claimed since the last vacuum, hundreds of thousands under a busy
 * queue, and the next claim would walk all of them to fill its batch after
 * taking the new row.  Its key range [lo, hi] becomes the queue's island
 * instead (or widens it): every claimable row before the position lies in
 * the island.  A claim scans the island first, up to its hi, and then from
 * the position.  A claim that scanned the whole island (under the island's
 * generation it started with) drops it; one that filled its batch inside
 * moves the island's lo up to its last row.  An island-making lowering does
 * not bound a concurrent claim's move of the position (its rows are in the
 * island); a lowering whose range reaches the position lowers it, and when
 * the new position is not above the island's hi the island is merged into
 * it (the position goes down to the island's lo; that lowering bounds
 * concurrent claims at the island's lo).  Islands are made only for rows
 * of the jobq.ready the position belongs to (notes carry its OID).
 *
 * Kinds positions.  A claim that names its kinds passes over the rows of
 * other kinds, and the position cannot move past the first of them: behind
 * a backlog of a kind nobody claims, every claim of another kind would read
 * all of it.  So a queue also keeps, for the last few sets of kinds its
 * claims named (JOBQ_KINDS_KEPT, the least recently used gives way), a
 * kinds position: every committed, unclaimed row of those kinds sorts
 * before the queue's position (in its island) or at or after the kinds
 * position.  A claim naming those kinds starts at the later of the two; it
 * moves the kinds position up to where its own scan vouches for, under the
 * same bound by lowerings since it began as the position: the first row of
 * its kinds it passed over (a key at its limit, or where it stopped), else
 * the queue's last visible row when it read to the end (as the position),
 * else its last claimed row (its batch is full): claims that all name the
 * same kinds move both alike.
 * Every lowering that bounds claims lowers the kinds positions with the
 * position (an island-making one leaves them: its rows are in the island).
 * Such a claim leaves the queue's position alone when it started past it,
 * since it did not see the rows between them.  A set of kinds is known by a
 * 64-bit hash seeded at server start (jobq_state_kinds_id), which no
 * client sees, so no role can name a set that shares another's position.
 *
 * A claim announces the key it deletes from before it deletes anything
 * (jobq_state_claim_begin): an abort before it noted every row it deleted
 * gives back every key from there on.  A subtransaction abort lowers at
 * once, since the rows it deleted are back for everyone then.
 *
 * The callbacks run after the transaction's commit or abort is visible to
 * other backends (after ProcArrayEndTransaction), so a claim either took
 * its snapshot after a row became visible (and so saw it), or that row's
 * lowering is after the claim's epoch and bounds the position.  New jobs
 * that sort after the claimed rows (the usual FIFO case) do not hold the
 * position back.  Rows
 * that a claim skipped because another transaction held them are that
 * transaction's business: it either consumes them or, aborting, lowers the
 * position.  A crash of any backend re-initialises shared memory, which
 * forgets every position.  PREPARE TRANSACTION is refused for a transaction
 * that changed a queue, since its outcome would arrive without a callback.
 *
 * The same scheme keeps a lower bound of the earliest run_at in
 * jobq.scheduled per queue, so a claim looks for due delayed jobs only when
 * one can be due.
 *
 * Each queue's entry also has a condition variable: claims with wait sleep
 * on it, and the commit (or abort) callbacks above broadcast on it whenever
 * they move a position or a due time back, that is whenever rows may have
 * become claimable.
 *
 * Locking: JobqStateLock (an LWLock) guards the hash table's membership;
 * each entry's fields are guarded by its own spinlock.
 *
 * Queue settings: every backend keeps the jobq.queue rows it read (see
 * jobq_queue_get in queue/settings.c), valid while a shared generation counter
 * has not moved.  A trigger on jobq.queue marks the transaction that writes
 * it, and its commit callback bumps the counter, after the commit is visible;
 * a reader reads the counter before its snapshot, so a row it caches is never
 * older than the generation it is filed under.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "guc.h"
#include "jobq_limits.h"
#include "shmem/shm_bgw.h"
#include "shmem/shm_queue.h"

/*
 * How many recent lowerings a queue remembers: a claim during which more
 * happened does not move the position.
 */
#define JOBQ_LOWERED_KEPT	16

/* How many sets of kinds a queue keeps a kinds position for. */
#define JOBQ_KINDS_KEPT		8

/* A kinds position: where claims naming one set of kinds start. */
typedef struct JobqKindsPos
{
	uint64		id;				/* jobq_state_kinds_id; 0: unused */
	uint64		used;			/* its queue's kinds_clock when last used */
	JobqClaimPos pos;			/* no claimable row of them from the queue's
								 * position up to this */
} JobqKindsPos;

/* Hash key: one queue of one database. */
typedef struct JobqStateKey
{
	Oid			dbid;
	char		queue[JOBQ_MAX_NAME_LEN + 1];
} JobqStateKey;

/* Shared state of one queue. */
typedef struct JobqQueueState
{
	JobqStateKey key;			/* hash key; must be first */
	slock_t		mutex;			/* guards every field below */
	Oid			relid;			/* jobq.ready's OID when pos was set */
	uint64		epoch;			/* bumped when pos may move backwards */
	bool		pos_valid;		/* false: scan from the head */
	JobqClaimPos pos;			/* no claimable row sorts before this */
	JobqClaimPos lowered[JOBQ_LOWERED_KEPT];	/* key of lowering number n
												 * (epoch n) at n % KEPT */
	bool		lowered_bounds[JOBQ_LOWERED_KEPT];	/* false: it made or
													 * widened the island */
	bool		has_island;		/* claimable rows before pos, all in: */
	JobqClaimPos island_lo;		/* ... [island_lo, island_hi]; island_hi < pos */
	JobqClaimPos island_hi;
	uint64		island_gen;		/* bumped when the island is made, widened or
								 * dropped */
	uint64		kinds_clock;	/* counts uses of kinds positions */
	JobqKindsPos kinds[JOBQ_KINDS_KEPT];	/* valid with pos */
	Oid			due_relid;		/* jobq.ready's OID when next_due was set */
	uint64		due_epoch;		/* bumped when next_due may move earlier */
	bool		due_valid;		/* false: probe jobq.scheduled */
	TimestampTz next_due;		/* no scheduled row is due before this */
	ConditionVariable cv;		/* waiting claims sleep here */
	bool		handled;		/* has job handlers: wake the executors too */
	int			pins;			/* waiting claims sleeping on cv: the entry
								 * must not go */
	bool		used;			/* looked up since the clock last passed */
	int			clock_slot;		/* its place in jobq_clock */
} JobqQueueState;

/* What this backend's transaction did to one queue's sets. */
typedef struct JobqQueueNote
{
	char		queue[JOBQ_MAX_NAME_LEN + 1];
	Oid			relid;			/* jobq.ready's OID when the note began */
	bool		has_inserted;	/* rows entered jobq.ready, keys in: */
	JobqClaimPos min_inserted;
	JobqClaimPos max_inserted;
	bool		has_deleted;	/* rows left jobq.ready, keys in: */
	JobqClaimPos min_deleted;
	JobqClaimPos max_deleted;
	SubTransactionId deleted_subid; /* the latest subtransaction that deleted
									 * rows (its own or a child's) */
	int			claim_depth;	/* claims deleting rows from claim_lo on */
	JobqClaimPos claim_lo;
	bool		has_scheduled;	/* rows entered jobq.scheduled */
	TimestampTz min_scheduled;
	bool		has_unscheduled;	/* rows left jobq.scheduled, */
	SubTransactionId unscheduled_subid; /* the latest subtransaction that
										 * deleted them (or a child) */
} JobqQueueNote;

/* Shared counters, one set for the whole cluster. */
typedef struct JobqShared
{
	pg_atomic_uint64 settings_gen;	/* bumped by each commit that wrote
									 * jobq.queue */
	uint64		seed;			/* of hashes no client may predict, set at
								 * start */
	uint64		gen_floor;		/* no epoch, due epoch or island generation of
								 * an entry that went exceeds it
								 * (JobqStateLock) */
	int			clock_n;		/* entries, in jobq_clock[0 .. clock_n) */
	int			clock_hand;		/* where the next eviction looks first */
} JobqShared;

static HTAB *JobqStateHash = NULL;
static LWLock *JobqStateLock = NULL;
static JobqShared *jobq_shared = NULL;

/*
 * Every entry of the hash table, in no order, for the clock of evictions
 * (JobqStateLock): jobq.max_tracked_queues places.
 */
static JobqQueueState **jobq_clock = NULL;

/*
 * The entry this backend's waiting claim has pinned, or NULL, and the
 * subtransaction that pinned it: an abort of that subtransaction (a
 * cancelled claim inside a savepoint rolled back to) or of the transaction
 * unpins it.
 */
static JobqQueueState *jobq_pinned = NULL;
static SubTransactionId jobq_pinned_subid = InvalidSubTransactionId;

/* The current transaction wrote jobq.queue. */
static bool jobq_settings_written = false;

/*
 * The queues whose jobq.queue rows it wrote (names, TopMemoryContext), to
 * wake their waiting claims at commit: a resume, a raised limit or a breaker
 * gone half-open can make jobs claimable that no insert announced.
 */
static List *jobq_settings_queues = NIL;

/* Notes of the current top-level transaction (TopMemoryContext). */
static List *jobq_notes = NIL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void jobq_state_xact_callback(XactEvent event, void *arg);
static void SettingsChanged(void);
static void NoteSettingsQueue(TriggerData *trigdata);
static void jobq_state_subxact_callback(SubXactEvent event,
										SubTransactionId mySubid,
										SubTransactionId parentSubid,
										void *arg);

/* Three-way comparison of two claim positions, in claim order. */
int
jobq_claim_pos_compare(const JobqClaimPos *a, const JobqClaimPos *b)
{
	if (a->neg_priority != b->neg_priority)
		return a->neg_priority < b->neg_priority ? -1 : 1;
	if (a->run_at != b->run_at)
		return a->run_at < b->run_at ? -1 : 1;
	if (a->job_id != b->job_id)
		return a->job_id < b->job_id ? -1 : 1;
	return 0;
}

/* Size of the shared hash table. */
static Size
StateShmemSize(void)
{
	return add_size(add_size(hash_estimate_size(jobq_max_tracked_queues, sizeof(JobqQueueState)),
							 MAXALIGN(sizeof(JobqShared))),
					MAXALIGN(mul_size(jobq_max_tracked_queues, sizeof(JobqQueueState *))));
}

/* shmem_request_hook: reserve our shared memory and lock. */
static void
StateShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(StateShmemSize());
	RequestNamedLWLockTranche("jobq", 1);
}

/* shmem_startup_hook: create or attach to the shared hash table. */
static void
StateShmemStartup(void)
{
	HASHCTL		info;
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	JobqStateLock = &(GetNamedLWLockTranche("jobq"))->lock;
	info.keysize = sizeof(JobqStateKey);
	info.entrysize = sizeof(JobqQueueState);
	JobqStateHash = ShmemInitHash("jobq queue state",
								  jobq_max_tracked_queues,
								  jobq_max_tracked_queues,
								  &info, HASH_ELEM | HASH_BLOBS);
	jobq_clock = ShmemInitStruct("jobq queue clock",
								 mul_size(jobq_max_tracked_queues, sizeof(JobqQueueState *)),
								 &found);
	jobq_shared = ShmemInitStruct("jobq shared", sizeof(JobqShared), &found);
	if (!found)
	{
		pg_atomic_init_u64(&jobq_shared->settings_gen, 1);
		jobq_shared->gen_floor = 0;
		jobq_shared->clock_n = 0;
		jobq_shared->clock_hand = 0;
		if (!pg_strong_random(&jobq_shared->seed, sizeof(jobq_shared->seed)))
			jobq_shared->seed = (uint64) GetCurrentTimestamp() ^ ((uint64) MyProcPid << 32);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Define our GUC and install the shared memory hooks (from _PG_init). */
void
jobq_state_shmem_request(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = StateShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = StateShmemStartup;
}

/* Register the transaction callbacks that maintain the positions. */
void
jobq_state_register_callbacks(void)
{
	RegisterXactCallback(jobq_state_xact_callback, NULL);
	RegisterSubXactCallback(jobq_state_subxact_callback, NULL);
}

/*
 * Remove an entry (JobqStateLock held exclusively), raising gen_floor to
 * what a backend may still hold of it.
 */
static void
StateRemove(JobqQueueState *entry)
{
	int			last = --jobq_shared->clock_n;

	jobq_shared->gen_floor = Max(jobq_shared->gen_floor,
								 Max(entry->epoch, Max(entry->due_epoch, entry->island_gen)));
	/* the clock's last entry takes its slot */
	jobq_clock[entry->clock_slot] = jobq_clock[last];
	jobq_clock[entry->clock_slot]->clock_slot = entry->clock_slot;
	(void) hash_search(JobqStateHash, &entry->key, HASH_REMOVE, NULL);
}

/*
 * Give the place of an entry not used lately that no waiting claim has
 * pinned to another queue (JobqStateLock held exclusively): a clock, which
 * passes over the entries looked up since it last passed them (clearing
 * their mark) and takes the first that was not, so an eviction looks at a
 * few entries, not at every one under the lock every backend needs (a scan
 * of 100,000 entries took 28 ms, and stalled every database's claims).
 * Returns false when every entry is pinned.  A queue with handlers that loses its place
 * loses its mark (handled): until the executors mark its new entry again
 * (each round, at least once a second), a commit that makes its jobs ready
 * wakes them as for a queue with no place, and after that not at all, so
 * its jobs wait for their next round.
 *
 * A claim, a due-time probe or a wake-up count of the entry that went may
 * still be under way, holding its epoch, due epoch or island generation:
 * gen_floor keeps the highest of them, and the queue's next entry starts
 * above it (StateLookup), so whatever they hold is older than the new
 * entry's first lowering, which is to the head of the queue.
 */
static bool
StateEvict(void)
{
	for (int step = 0; step < 2 * jobq_shared->clock_n; step++)
	{
		JobqQueueState *entry;
		bool		pinned;

		if (jobq_shared->clock_hand >= jobq_shared->clock_n)
			jobq_shared->clock_hand = 0;
		entry = jobq_clock[jobq_shared->clock_hand++];
		SpinLockAcquire(&entry->mutex);
		pinned = entry->pins > 0;
		SpinLockRelease(&entry->mutex);
		if (pinned)
			continue;
		if (entry->used)
		{
			entry->used = false;
			continue;
		}
		StateRemove(entry);
		return true;
	}
	return false;
}

/*
 * Find (or create) the shared entry of a queue of this database.  Returns
 * NULL when jobq is not preloaded, or no place could be had; else the entry
 * with JobqStateLock held, which keeps it in its place until StateRelease.
 *
 * At most jobq.max_tracked_queues entries: a shared hash table grows past its
 * size into the server's spare shared memory, which the lock table needs
 * (one role making thousands of queues took it all, and other databases'
 * transactions failed with "out of shared memory").  When the table is full,
 * a new queue takes the place of one not used lately (StateEvict), so a
 * tenant with many queues cannot keep the places from other tenants' queues
 * in use.  A queue with no entry still works: its claims scan from the
 * head, its waiting claims poll.
 */
static JobqQueueState *
StateLookup(const char *queue, bool create)
{
	JobqStateKey key;
	JobqQueueState *entry;
	bool		found;

	if (JobqStateHash == NULL || strlen(queue) > JOBQ_MAX_NAME_LEN)
		return NULL;

	memset(&key, 0, sizeof(key));
	key.dbid = MyDatabaseId;
	strlcpy(key.queue, queue, sizeof(key.queue));

	LWLockAcquire(JobqStateLock, LW_SHARED);
	entry = hash_search(JobqStateHash, &key, HASH_FIND, NULL);
	if (entry != NULL || !create)
	{
		if (entry == NULL)
			LWLockRelease(JobqStateLock);
		else if (!entry->used)
			entry->used = true; /* a hint: a racing store does no harm */
		return entry;
	}
	LWLockRelease(JobqStateLock);

	LWLockAcquire(JobqStateLock, LW_EXCLUSIVE);
	entry = hash_search(JobqStateHash, &key, HASH_FIND, NULL);
	if (entry == NULL &&
		(hash_get_num_entries(JobqStateHash) < jobq_max_tracked_queues || StateEvict()))
		entry = hash_search(JobqStateHash, &key, HASH_ENTER_NULL, &found);
	else
		found = true;
	if (entry == NULL)
	{
		LWLockRelease(JobqStateLock);
		return NULL;
	}
	if (!found)
	{
		uint64		born = jobq_shared->gen_floor + 1;

		SpinLockInit(&entry->mutex);
		entry->relid = InvalidOid;

		/*
		 * Born as a lowering to the head (due epoch too): a claim that began
		 * while the queue had no entry holds epoch 0, one that began under an
		 * entry of the queue that has gone holds at most gen_floor, and the
		 * rows committed meanwhile lowered nothing, so it must not move the
		 * new entry's position past them, nor set its next due time.
		 */
		memset(entry->lowered, 0, sizeof(entry->lowered));
		memset(entry->lowered_bounds, 0, sizeof(entry->lowered_bounds));
		entry->epoch = born;
		entry->lowered[born % JOBQ_LOWERED_KEPT].neg_priority = PG_INT32_MIN;
		entry->lowered[born % JOBQ_LOWERED_KEPT].run_at = DT_NOBEGIN;
		entry->lowered[born % JOBQ_LOWERED_KEPT].job_id = PG_INT64_MIN;
		entry->lowered_bounds[born % JOBQ_LOWERED_KEPT] = true;
		entry->pos_valid = false;
		entry->has_island = false;
		entry->island_gen = born;
		entry->kinds_clock = 0;
		memset(entry->kinds, 0, sizeof(entry->kinds));
		entry->due_relid = InvalidOid;
		entry->due_epoch = born;
		entry->due_valid = false;
		entry->next_due = DT_NOBEGIN;
		ConditionVariableInit(&entry->cv);
		entry->handled = false;
		entry->pins = 0;
		entry->clock_slot = jobq_shared->clock_n++;
		jobq_clock[entry->clock_slot] = entry;
	}
	entry->used = true;
	return entry;
}

/* Done with an entry StateLookup returned. */
static inline void
StateRelease(void)
{
	LWLockRelease(JobqStateLock);
}

/*
 * Forget the queues of database dbid, which was dropped (no backend can be
 * connected to it, so none uses its entries): their places go to others.
 */
void
jobq_state_forget_database(Oid dbid)
{
	HASH_SEQ_STATUS seq;
	JobqQueueState *entry;

	if (JobqStateHash == NULL || !OidIsValid(dbid))
		return;
	LWLockAcquire(JobqStateLock, LW_EXCLUSIVE);
	hash_seq_init(&seq, JobqStateHash);
	while ((entry = hash_seq_search(&seq)) != NULL)
	{
		if (entry->key.dbid == dbid)
			StateRemove(entry);
	}
	LWLockRelease(JobqStateLock);
}

/*
 * A random number of this server's start, the same in every process (0 when
 * jobq is not preloaded): the seed of hashes that no client may predict.
 */
uint64
jobq_state_seed(void)
{
	return jobq_shared != NULL ? jobq_shared->seed : 0;
}

/*
 * The id of a set of kinds a claim names (never 0): a hash of the kinds, in
 * order, seeded at server start.
 */
uint64
jobq_state_kinds_id(Datum *kinds, bool *nulls, int n)
{
	uint64		h = jobq_state_seed();

	h = hash_combine64(h, (uint64) n);
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			h = hash_combine64(h, UINT64CONST(0x9e3779b97f4a7c15));
		else
		{
			text	   *t = DatumGetTextPP(kinds[i]);

			h = hash_combine64(h, hash_bytes_extended((const unsigned char *) VARDATA_ANY(t),
													  VARSIZE_ANY_EXHDR(t), h));
		}
	}
	return h != 0 ? h : 1;
}

/* The kinds position of id in entry (spinlock held), or NULL. */
static JobqKindsPos *
KindsPosFind(JobqQueueState *entry, uint64 id)
{
	for (int i = 0; i < JOBQ_KINDS_KEPT; i++)
		if (entry->kinds[i].id == id)
			return &entry->kinds[i];
	return NULL;
}

/*
 * Where a claim on a queue should start scanning.  Fills *pos with the
 * queue's position (the head when it has none) and *start with where the
 * claim starts: with kinds_id (0: any kind), the later of it and that set
 * of kinds' position, and no later than rows this transaction made ready.
 * Returns the epoch to hand back to jobq_state_end_claim.
 */
uint64
jobq_state_begin_claim(Oid relid, const char *queue, uint64 kinds_id, JobqClaimPos *pos,
					   JobqClaimPos *start, JobqClaimIsland *island)
{
	JobqQueueState *entry = StateLookup(queue, true);
	uint64		epoch = 0;
	bool		valid = false;

	memset(island, 0, sizeof(*island));
	if (entry != NULL)
	{
		SpinLockAcquire(&entry->mutex);
		epoch = entry->epoch;
		if (entry->pos_valid && entry->relid == relid)
		{
			JobqKindsPos *k = kinds_id != 0 ? KindsPosFind(entry, kinds_id) : NULL;

			*pos = entry->pos;
			*start = entry->pos;
			valid = true;
			if (k != NULL)
			{
				k->used = ++entry->kinds_clock;
				if (jobq_claim_pos_compare(&k->pos, start) > 0)
					*start = k->pos;
			}
			if (entry->has_island)
			{
				island->valid = true;
				island->lo = entry->island_lo;
				island->hi = entry->island_hi;
				island->pos = entry->pos;
				island->gen = entry->island_gen;
			}
		}
		SpinLockRelease(&entry->mutex);
		StateRelease();
	}
	if (!valid)
	{
		pos->neg_priority = PG_INT32_MIN;
		pos->run_at = DT_NOBEGIN;
		pos->job_id = PG_INT64_MIN;
		*start = *pos;
	}
	else
	{
		/*
		 * Rows this transaction made ready are visible to it before its
		 * commit moves the position back: start no later than they are.
		 */
		ListCell   *lc;

		foreach(lc, jobq_notes)
		{
			JobqQueueNote *note = (JobqQueueNote *) lfirst(lc);

			if (strcmp(note->queue, queue) == 0 && note->has_inserted &&
				jobq_claim_pos_compare(&note->min_inserted, start) < 0)
				*start = note->min_inserted;
		}
	}
	return epoch;
}

/*
 * *key, or the least key lowered since epoch below it that bounds a claim
 * (spinlock held; the caller checked that the lowerings are still kept).
 */
static JobqClaimPos
BoundSince(JobqQueueState *entry, Oid relid, uint64 epoch, const JobqClaimPos *key)
{
	JobqClaimPos target = *key;

	for (uint64 e = epoch + 1; e <= entry->epoch; e++)
	{
		const JobqClaimPos *low = &entry->lowered[e % JOBQ_LOWERED_KEPT];

		/* on a new start, islands made meanwhile bound it as well */
		if ((entry->lowered_bounds[e % JOBQ_LOWERED_KEPT] || !entry->pos_valid ||
			 entry->relid != relid) &&
			jobq_claim_pos_compare(low, &target) < 0)
			target = *low;
	}
	return target;
}

/*
 * A claim that started under epoch (and found *island) is done.  It scanned
 * the island up to *island_last (NULL: no row), or all of it (island_done),
 * and claimed every claimable row from the position up to *last (NULL: it
 * did not get past the island, or did not start at the position), skipping
 * rows other transactions hold.  Shrink or drop the island if it is still
 * the one the claim found, and move the position to *last, but not past any
 * row made claimable since the claim began (which it may not have seen)
 * outside the island: those lowerings are remembered with their epochs.
 * With kinds_id, it also claimed every claimable row of those kinds from
 * where it started up to *kinds_last (NULL: it vouches for none): move
 * their kinds position there, under the same bound.
 */
void
jobq_state_end_claim(Oid relid, const char *queue, uint64 epoch,
					 const JobqClaimIsland *island, const JobqClaimPos *island_last,
					 bool island_done, const JobqClaimPos *last, uint64 kinds_id,
					 const JobqClaimPos *kinds_last)
{
	JobqQueueState *entry = StateLookup(queue, false);
	JobqClaimPos target;
	JobqClaimPos kinds_target;

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (island->valid && entry->has_island && entry->island_gen == island->gen &&
		entry->relid == relid)
	{
		if (island_done)
		{
			entry->has_island = false;
			entry->island_gen++;
		}
		else if (island_last != NULL && jobq_claim_pos_compare(island_last, &entry->island_lo) > 0)
			entry->island_lo = *island_last;
	}
	if ((last == NULL && kinds_last == NULL) || entry->epoch - epoch > JOBQ_LOWERED_KEPT)
	{
		/*
		 * nothing to move, or too much happened meanwhile to know what we may
		 * have missed
		 */
		SpinLockRelease(&entry->mutex);
		StateRelease();
		return;
	}
	if (kinds_last != NULL)
		kinds_target = BoundSince(entry, relid, epoch, kinds_last);
	if (last != NULL)
	{
		target = BoundSince(entry, relid, epoch, last);
		if (!entry->pos_valid || entry->relid != relid)
		{
			/*
			 * a new start (or a new jobq.ready): no island or kinds position
			 * is known
			 */
			entry->pos = target;
			entry->relid = relid;
			entry->pos_valid = true;
			entry->has_island = false;
			entry->island_gen++;
			memset(entry->kinds, 0, sizeof(entry->kinds));
		}
		else if (jobq_claim_pos_compare(&entry->pos, &target) < 0)
			entry->pos = target;
	}
	if (kinds_last != NULL && entry->pos_valid && entry->relid == relid)
	{
		JobqKindsPos *k = KindsPosFind(entry, kinds_id);

		if (k == NULL)
		{
			/* a free one, else the least recently used gives way */
			k = &entry->kinds[0];
			for (int i = 1; i < JOBQ_KINDS_KEPT && k->id != 0; i++)
				if (entry->kinds[i].id == 0 || entry->kinds[i].used < k->used)
					k = &entry->kinds[i];
			k->id = kinds_id;
			k->pos = kinds_target;
		}
		else if (jobq_claim_pos_compare(&k->pos, &kinds_target) < 0)
			k->pos = kinds_target;
		k->used = ++entry->kinds_clock;
	}
	SpinLockRelease(&entry->mutex);
	StateRelease();
}

/*
 * Should a claim look for due rows in jobq.scheduled?  Returns the due epoch
 * in *epoch for jobq_state_set_next_due.
 */
bool
jobq_state_due_probe_needed(Oid relid, const char *queue, TimestampTz now,
							uint64 *epoch)
{
	JobqQueueState *entry = StateLookup(queue, true);
	bool		needed = true;
	ListCell   *lc;

	*epoch = 0;
	if (entry == NULL)
		return true;
	SpinLockAcquire(&entry->mutex);
	*epoch = entry->due_epoch;
	if (entry->due_valid && entry->due_relid == relid && entry->next_due > now)
		needed = false;
	SpinLockRelease(&entry->mutex);
	StateRelease();

	/*
	 * Rows this transaction put into jobq.scheduled are visible to it before
	 * its commit lowers next_due: probe when one of them is due.
	 */
	foreach(lc, jobq_notes)
	{
		JobqQueueNote *note = (JobqQueueNote *) lfirst(lc);

		if (strcmp(note->queue, queue) == 0 && note->has_scheduled &&
			note->min_scheduled <= now)
			needed = true;
	}
	return needed;
}

/* After a probe found the earliest scheduled run_at, remember it. */
void
jobq_state_set_next_due(Oid relid, const char *queue, uint64 epoch,
						TimestampTz next_due)
{
	JobqQueueState *entry = StateLookup(queue, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (entry->due_epoch == epoch)
	{
		entry->next_due = next_due;
		entry->due_relid = relid;
		entry->due_valid = true;
	}
	SpinLockRelease(&entry->mutex);
	StateRelease();
}

/* jobq.ready's OID (InvalidOid if there is none). */
static Oid
ReadyRelid(void)
{
	return jobq_relid(JOBQ_REL_READY);
}

/* This transaction's note for a queue, created on first use. */
static JobqQueueNote *
NoteFor(const char *queue)
{
	ListCell   *lc;
	JobqQueueNote *note;
	MemoryContext old;

	foreach(lc, jobq_notes)
	{
		note = (JobqQueueNote *) lfirst(lc);
		if (strcmp(note->queue, queue) == 0)
			return note;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	note = palloc0(sizeof(JobqQueueNote));
	strlcpy(note->queue, queue, sizeof(note->queue));
	note->relid = ReadyRelid();
	jobq_notes = lappend(jobq_notes, note);
	MemoryContextSwitchTo(old);
	return note;
}

/* Widen [*lo, *hi] to take in *pos (or set it when unset). */
static void
NoteRange(bool *has, JobqClaimPos *lo, JobqClaimPos *hi, const JobqClaimPos *pos)
{
	if (!*has || jobq_claim_pos_compare(pos, lo) < 0)
		*lo = *pos;
	if (!*has || jobq_claim_pos_compare(pos, hi) > 0)
		*hi = *pos;
	*has = true;
}

/* This transaction inserted a row into jobq.ready at *pos. */
void
jobq_state_note_ready(const char *queue, const JobqClaimPos *pos)
{
	JobqQueueNote *note = NoteFor(queue);

	NoteRange(&note->has_inserted, &note->min_inserted, &note->max_inserted, pos);
}

/* This transaction deleted (claimed, cancelled) the row of jobq.ready at *pos. */
void
jobq_state_note_unready(const char *queue, const JobqClaimPos *pos)
{
	JobqQueueNote *note = NoteFor(queue);

	NoteRange(&note->has_deleted, &note->min_deleted, &note->max_deleted, pos);
	note->deleted_subid = Max(note->deleted_subid, GetCurrentSubTransactionId());
}

/*
 * A claim of this transaction starts deleting rows of jobq.ready at keys
 * from *lo on.  Until jobq_state_claim_end, an abort treats every key from
 * *lo on as deleted: an error can strike after a row is deleted and before
 * the claim notes it (jobq_state_note_unready), while other claims pass
 * over the rows it holds and move the position past them.
 */
void
jobq_state_claim_begin(const char *queue, const JobqClaimPos *lo)
{
	JobqQueueNote *note = NoteFor(queue);

	if (note->claim_depth == 0 || jobq_claim_pos_compare(lo, &note->claim_lo) < 0)
		note->claim_lo = *lo;
	note->claim_depth++;
}

/* The claim jobq_state_claim_begin announced has noted every row it deleted. */
void
jobq_state_claim_end(const char *queue)
{
	JobqQueueNote *note = NoteFor(queue);

	if (note->claim_depth > 0)
		note->claim_depth--;
}

/* An aborted claim deleted rows anywhere from its claim_lo on. */
static void
NoteClaimAborted(JobqQueueNote *note)
{
	static const JobqClaimPos last = {PG_INT32_MAX, DT_NOEND, PG_INT64_MAX};

	if (note->claim_depth == 0)
		return;
	NoteRange(&note->has_deleted, &note->min_deleted, &note->max_deleted, &note->claim_lo);
	NoteRange(&note->has_deleted, &note->min_deleted, &note->max_deleted, &last);
	note->claim_depth = 0;
}

/*
 * This transaction deleted rows of jobq.scheduled (a promotion of due rows,
 * a cancel): a subtransaction abort puts them back, due or not, while the
 * queue's next due time may have moved on without them.
 */
void
jobq_state_note_unscheduled(const char *queue)
{
	JobqQueueNote *note = NoteFor(queue);

	note->has_unscheduled = true;
	note->unscheduled_subid = GetCurrentSubTransactionId();
}

/* This transaction inserted a row into jobq.scheduled due at run_at. */
void
jobq_state_note_scheduled(const char *queue, TimestampTz run_at)
{
	JobqQueueNote *note = NoteFor(queue);

	if (!note->has_scheduled || run_at < note->min_scheduled)
		note->min_scheduled = run_at;
	note->has_scheduled = true;
}

/*
 * Rows of jobq.ready (OID relid) with keys in [*lo, *hi] became claimable:
 * make or widen the queue's island when they all sort before its position
 * in that same table, else move the position back to *lo (merging the
 * island into it when they meet); bump the epoch.
 */
static void
StateLower(const char *queue, Oid relid, const JobqClaimPos *lo, const JobqClaimPos *hi)
{
	JobqQueueState *entry = StateLookup(queue, false);
	int			slot;
	bool		handled;

	if (entry == NULL)
	{
		/* an untracked queue may have handlers: their executors look */
		jobq_bgw_wake_executors(MyDatabaseId);
		return;
	}
	SpinLockAcquire(&entry->mutex);
	entry->epoch++;
	slot = entry->epoch % JOBQ_LOWERED_KEPT;
	entry->lowered[slot] = *lo;
	entry->lowered_bounds[slot] = true;
	if (entry->pos_valid && OidIsValid(relid) && entry->relid == relid &&
		jobq_claim_pos_compare(hi, &entry->pos) < 0)
	{
		if (!entry->has_island || jobq_claim_pos_compare(lo, &entry->island_lo) < 0)
			entry->island_lo = *lo;
		if (!entry->has_island || jobq_claim_pos_compare(hi, &entry->island_hi) > 0)
			entry->island_hi = *hi;
		entry->has_island = true;
		entry->island_gen++;
		entry->lowered_bounds[slot] = false;
	}
	else if (entry->pos_valid && jobq_claim_pos_compare(lo, &entry->pos) < 0)
	{
		entry->pos = *lo;
		if (entry->has_island && jobq_claim_pos_compare(&entry->island_hi, &entry->pos) >= 0)
		{
			if (jobq_claim_pos_compare(&entry->island_lo, &entry->pos) < 0)
				entry->pos = entry->island_lo;
			entry->lowered[slot] = entry->pos;
			entry->has_island = false;
			entry->island_gen++;
		}
	}
	/* rows that may be of any kinds: no kinds position lies past them */
	if (entry->lowered_bounds[slot])
		for (int i = 0; i < JOBQ_KINDS_KEPT; i++)
			if (entry->kinds[i].id != 0 &&
				jobq_claim_pos_compare(&entry->lowered[slot], &entry->kinds[i].pos) < 0)
				entry->kinds[i].pos = entry->lowered[slot];
	SpinLockRelease(&entry->mutex);
	/* rows became claimable: wake waiting claims, and executors */
	ConditionVariableBroadcast(&entry->cv);
	handled = entry->handled;
	StateRelease();
	if (handled)
		jobq_bgw_wake_executors(MyDatabaseId);
}

/*
 * Executors run handlers for this queue: wake them when jobs get ready.  It
 * marks the queue's entry if it has one, and takes no place: a queue with
 * none wakes them anyway (StateLower), and executors that took places for
 * every queue with handlers, each round, would let a tenant with more of
 * those than places evict other tenants' queues once a second.
 */
void
jobq_state_mark_handled(const char *queue)
{
	JobqQueueState *entry = StateLookup(queue, false);

	if (entry != NULL)
	{
		entry->handled = true;
		StateRelease();
	}
}

/* Move a queue's next due time back to run_at and bump its due epoch. */
static void
StateLowerDue(const char *queue, TimestampTz run_at)
{
	JobqQueueState *entry = StateLookup(queue, false);

	if (entry == NULL)
		return;
	SpinLockAcquire(&entry->mutex);
	if (entry->due_valid && run_at < entry->next_due)
		entry->next_due = run_at;
	entry->due_epoch++;
	SpinLockRelease(&entry->mutex);
	/* waiting claims re-compute when to look again */
	ConditionVariableBroadcast(&entry->cv);
	StateRelease();
}

/*
 * A number that changes whenever rows of the queue may have become
 * claimable (both epochs move then), for waiting claims to notice a wake-up
 * that came before they started to sleep.
 */
uint64
jobq_state_wake_seq(const char *queue)
{
	JobqQueueState *entry = StateLookup(queue, true);
	uint64		seq = 0;

	if (entry == NULL)
		return 0;
	SpinLockAcquire(&entry->mutex);
	seq = entry->epoch + entry->due_epoch;
	SpinLockRelease(&entry->mutex);
	StateRelease();
	return seq;
}

/*
 * The condition variable a waiting claim of the queue sleeps on, or NULL
 * (poll then).  The queue's entry keeps its place until jobq_state_wait_end
 * (or the end of the transaction): a sleeper's condition variable must not
 * become another queue's.  One waiting claim at a time per backend.
 */
ConditionVariable *
jobq_state_wait_begin(const char *queue)
{
	JobqQueueState *entry;

	jobq_state_wait_end();
	entry = StateLookup(queue, true);
	if (entry == NULL)
		return NULL;
	SpinLockAcquire(&entry->mutex);
	entry->pins++;
	SpinLockRelease(&entry->mutex);
	jobq_pinned = entry;
	jobq_pinned_subid = GetCurrentSubTransactionId();
	StateRelease();
	return &entry->cv;
}

/* The waiting claim is done: its queue's entry may go. */
void
jobq_state_wait_end(void)
{
	if (jobq_pinned == NULL)
		return;
	/* no longer on its wake-up list, before the entry may become another's */
	ConditionVariableCancelSleep();
	SpinLockAcquire(&jobq_pinned->mutex);
	jobq_pinned->pins--;
	SpinLockRelease(&jobq_pinned->mutex);
	jobq_pinned = NULL;
	jobq_pinned_subid = InvalidSubTransactionId;
}

/*
 * When a delayed job of the queue may next become due (0: unknown or none
 * known).  Waiting claims sleep no longer than that.
 */
TimestampTz
jobq_state_next_due(const char *queue)
{
	JobqQueueState *entry = StateLookup(queue, false);
	TimestampTz next = 0;

	if (entry == NULL)
		return 0;
	SpinLockAcquire(&entry->mutex);
	if (entry->due_valid && entry->next_due != DT_NOEND)
		next = entry->next_due;
	SpinLockRelease(&entry->mutex);
	StateRelease();
	return next;
}

/*
 * A commit changed queue settings: wake the waiting claims of the queues it
 * wrote (all of this database's, after a TRUNCATE), and the executors of
 * this database, which in the shared pool means a pass that starts them when
 * handler jobs are ready.  Without this a resumed queue's handler jobs
 * waited for the next pass that something else caused.
 */
static void
SettingsChanged(void)
{
	ListCell   *lc;

	foreach(lc, jobq_settings_queues)
	{
		const char *queue = (const char *) lfirst(lc);
		JobqQueueState *entry = queue[0] != '\0' ? StateLookup(queue, false) : NULL;

		if (entry != NULL)
		{
			ConditionVariableBroadcast(&entry->cv);
			StateRelease();
		}
		else if (queue[0] == '\0')
		{
			HASH_SEQ_STATUS seq;

			LWLockAcquire(JobqStateLock, LW_SHARED);
			hash_seq_init(&seq, JobqStateHash);
			while ((entry = hash_seq_search(&seq)) != NULL)
				if (entry->key.dbid == MyDatabaseId)
					ConditionVariableBroadcast(&entry->cv);
			LWLockRelease(JobqStateLock);
		}
	}
	jobq_bgw_wake_executors(MyDatabaseId);
}

/*
 * End of a top-level transaction: publish what it did.  Runs after the
 * outcome is visible to other backends.
 */
static void
jobq_state_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	/* a waiting claim that an error ended (none is left at a commit) */
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		jobq_state_wait_end();

	if (jobq_settings_written)
	{
		if (event == XACT_EVENT_PRE_PREPARE)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that changed jobq.queue"),
					 errhint("Configure, pause or resume queues outside of two-phase transactions.")));
		if ((event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT) &&
			jobq_shared != NULL)
		{
			pg_atomic_fetch_add_u64(&jobq_shared->settings_gen, 1);
			SettingsChanged();
		}
		if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
			event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		{
			jobq_settings_written = false;
			list_free_deep(jobq_settings_queues);
			jobq_settings_queues = NIL;
		}
	}

	if (jobq_notes == NIL)
		return;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that enqueued, claimed or re-queued jobq jobs"),
					 errhint("Run jobq operations outside of two-phase transactions.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			foreach(lc, jobq_notes)
			{
				JobqQueueNote *note = (JobqQueueNote *) lfirst(lc);

				if (note->has_inserted)
					StateLower(note->queue, note->relid, &note->min_inserted,
							   &note->max_inserted);
				if (note->has_scheduled)
					StateLowerDue(note->queue, note->min_scheduled);
			}
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			foreach(lc, jobq_notes)
			{
				JobqQueueNote *note = (JobqQueueNote *) lfirst(lc);

				/*
				 * Deleted scheduled rows come back too; we keep no bound for
				 * them, so make the next claim probe.
				 */
				NoteClaimAborted(note);
				if (note->has_deleted)
					StateLower(note->queue, note->relid, &note->min_deleted,
							   &note->max_deleted);
				StateLowerDue(note->queue, DT_NOBEGIN);
			}
			break;
		default:
			return;
	}
	list_free_deep(jobq_notes);
	jobq_notes = NIL;
}

/*
 * A subtransaction aborted: rows it deleted are back, for every other
 * transaction at once, and will stay back if the top-level transaction
 * commits.  If it deleted any (or a claim was deleting in it), lower the
 * position for them now (with the range of every row the transaction
 * deleted so far, a superset), and treat them as inserted as well, for its
 * commit.  One that deleted nothing lowers nothing: a waiting claim rolls
 * back each empty attempt, and a lowering would wake it again at once.
 */
static void
jobq_state_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	/* a waiting claim of this subtransaction (or a child) that an error ended */
	if (jobq_pinned != NULL && jobq_pinned_subid >= mySubid)
		jobq_state_wait_end();
	foreach(lc, jobq_notes)
	{
		JobqQueueNote *note = (JobqQueueNote *) lfirst(lc);

		if (note->claim_depth > 0)
		{
			NoteClaimAborted(note);
			note->deleted_subid = mySubid;
		}
		if (note->has_deleted && note->deleted_subid >= mySubid)
		{
			note->deleted_subid = parentSubid;
			StateLower(note->queue, note->relid, &note->min_deleted, &note->max_deleted);
			NoteRange(&note->has_inserted, &note->min_inserted, &note->max_inserted,
					  &note->min_deleted);
			NoteRange(&note->has_inserted, &note->min_inserted, &note->max_inserted,
					  &note->max_deleted);
		}
		/* deleted scheduled rows may be back: probe after commit */
		if (!note->has_scheduled || note->min_scheduled > DT_NOBEGIN)
			note->min_scheduled = DT_NOBEGIN;
		note->has_scheduled = true;

		/*
		 * ... and rows this subtransaction deleted from jobq.scheduled are
		 * back for everyone now: other claims look for due ones at once (a
		 * claim rolled back to a savepoint in a transaction that stays open
		 * hid the due jobs it had promoted until that transaction ended)
		 */
		if (note->has_unscheduled && note->unscheduled_subid >= mySubid)
		{
			note->unscheduled_subid = parentSubid;
			StateLowerDue(note->queue, DT_NOBEGIN);
		}
	}
}

/*
 * The generation of queue settings a cached jobq.queue row must carry to be
 * used: read it before the snapshot that reads the row.  0 (never valid)
 * when the cache must not be used: jobq is not preloaded, this transaction
 * wrote jobq.queue, its snapshot is older than its statements, or this is a
 * standby (replayed changes fire no trigger, and a session outlives a
 * promotion).
 */
uint64
jobq_state_settings_gen(void)
{
	if (jobq_shared == NULL || jobq_settings_written || IsolationUsesXactSnapshot() ||
		RecoveryInProgress())
		return 0;
	return pg_atomic_read_u64(&jobq_shared->settings_gen);
}

/*
 * Remember the queue whose jobq.queue row the trigger saw (its name), or ""
 * for a TRUNCATE: every queue of the database.
 */
static void
NoteSettingsQueue(TriggerData *trigdata)
{
	MemoryContext old;
	char	   *queue = NULL;

	if (TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
	{
		HeapTuple	tuple = trigdata->tg_trigtuple;
		TupleDesc	desc = trigdata->tg_relation->rd_att;
		int			attno = SPI_fnumber(desc, "name");
		bool		isnull = true;
		Datum		name = 0;

		if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
			tuple = trigdata->tg_newtuple;
		if (attno > 0)
			name = heap_getattr(tuple, attno, desc, &isnull);
		if (isnull || TupleDescAttr(desc, attno - 1)->atttypid != TEXTOID)
			return;
		queue = TextDatumGetCString(name);
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	jobq_settings_queues = lappend(jobq_settings_queues, pstrdup(queue ? queue : ""));
	MemoryContextSwitchTo(old);
	if (queue)
		pfree(queue);
}

/*
 * jobq.queue_changed(): trigger on jobq.queue (BEFORE each row, BEFORE
 * TRUNCATE), marks the transaction so that its commit invalidates every
 * backend's cached settings.
 */
PG_FUNCTION_INFO_V1(jobq_queue_changed);

Datum
jobq_queue_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("jobq.queue_changed() may only be called as a trigger")));
	jobq_settings_written = true;
	NoteSettingsQueue(trigdata);
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		return PointerGetDatum(NULL);
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		return PointerGetDatum(trigdata->tg_newtuple);
	return PointerGetDatum(trigdata->tg_trigtuple);
}
