/*-------------------------------------------------------------------------
 *
 * queue/settings.c
 *	  A queue's settings: read (through a per-backend cache that a commit
 *	  writing jobq.queue invalidates), created on first use, and changed by
 *	  jobq.configure.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/resowner.h"
#include "pgstat.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "compat.h"
#include "guc.h"
#include "jobq_limits.h"
#include "spi.h"
#include "queue/settings.h"
#include "shmem/shm_queue.h"

PG_FUNCTION_INFO_V1(jobq_configure);

/* Saved plans, one per statement. */
static SPIPlanPtr plan_queue_get;
static SPIPlanPtr plan_queue_create;
static SPIPlanPtr plan_queue_exists;
static SPIPlanPtr plan_configure_check;
static SPIPlanPtr plan_configure;

/* ----------------------------------------------------------------
 * Queues
 * ---------------------------------------------------------------- */

/* One queue's settings as this backend last read them. */
typedef struct QueueCacheEntry
{
	char		name[JOBQ_MAX_NAME_LEN + 1];	/* hash key */
	uint64		gen;			/* jobq_state_settings_gen() when read */
	Oid			relid;			/* jobq.queue's OID when read */
	JobqQueue	q;
} QueueCacheEntry;

/* Queues this backend caches before it starts over. */
#define JOBQ_QUEUE_CACHE_SIZE	1024

static HTAB *queue_cache = NULL;

/*
 * The cache entry of a queue whose settings are current, or NULL; *gen gets
 * the generation to file a fresh read under (0: do not cache it).
 */
static QueueCacheEntry *
QueueCacheLookup(const char *queue, uint64 *gen, Oid *relid)
{
	QueueCacheEntry *entry;

	*gen = jobq_state_settings_gen();
	if (*gen == 0 || strlen(queue) > JOBQ_MAX_NAME_LEN)
		return NULL;
	*relid = jobq_relid_required(JOBQ_REL_QUEUE);
	if (queue_cache == NULL)
		return NULL;
	entry = hash_search(queue_cache, queue, HASH_FIND, NULL);
	if (entry == NULL || entry->gen != *gen || entry->relid != *relid)
		return NULL;
	return entry;
}

/* File the settings of a queue read under generation gen. */
static void
QueueCacheStore(const char *queue, uint64 gen, Oid relid, const JobqQueue *q)
{
	QueueCacheEntry *entry;

	if (gen == 0 || strlen(queue) > JOBQ_MAX_NAME_LEN)
		return;
	if (queue_cache != NULL && hash_get_num_entries(queue_cache) >= JOBQ_QUEUE_CACHE_SIZE)
	{
		hash_destroy(queue_cache);
		queue_cache = NULL;
	}
	if (queue_cache == NULL)
	{
		HASHCTL		info;

		info.keysize = JOBQ_MAX_NAME_LEN + 1;
		info.entrysize = sizeof(QueueCacheEntry);
		queue_cache = hash_create("jobq queue settings", 64, &info, HASH_ELEM | HASH_STRINGS);
	}
	entry = hash_search(queue_cache, queue, HASH_ENTER, NULL);
	entry->gen = gen;
	entry->relid = relid;
	entry->q = *q;
}

/*
 * Read a queue's settings; false when the queue does not exist.  From this
 * backend's cache while no commit has written jobq.queue since it was read
 * (shmem/shm_queue.c keeps the generation).
 */
bool
jobq_queue_get(const char *queue, JobqQueue *q)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	HeapTuple	tup;
	TupleDesc	desc;
	uint64		gen;
	Oid			relid = InvalidOid;
	QueueCacheEntry *cached = QueueCacheLookup(queue, &gen, &relid);

	if (cached != NULL)
	{
		*q = cached->q;
		return true;
	}

	values[0] = CStringGetTextDatum(queue);
	jobq_spi_exec(jobq_plan_generic(&plan_queue_get,
									"SELECT max_retries, lease, paused, COALESCE(max_concurrency, 0),"
									" COALESCE(max_per_key, 0), COALESCE(rate_limit, 0), rate_period,"
									" breaker_state IN ('throttled', 'half_open'), breaker_threshold IS NOT NULL,"
									" breaker_threshold IS NOT NULL AND (breaker_failures > 0"
									" OR breaker_state IN ('throttled', 'half_open'))"
									" FROM jobq.queue WHERE name = $1",
									1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	q->max_retries = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
	q->lease = *DatumGetIntervalP(SPI_getbinval(tup, desc, 2, &isnull));
	q->paused = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
	q->max_concurrency = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
	q->max_per_key = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));
	q->rate_limit = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	q->rate_period = *DatumGetIntervalP(SPI_getbinval(tup, desc, 7, &isnull));
	q->throttled = DatumGetBool(SPI_getbinval(tup, desc, 8, &isnull));
	q->has_breaker = DatumGetBool(SPI_getbinval(tup, desc, 9, &isnull));
	q->breaker_armed = DatumGetBool(SPI_getbinval(tup, desc, 10, &isnull));
	QueueCacheStore(queue, gen, relid, q);
	return true;
}

/*
 * locktag_field4 of jobq's locks on queue names, and of the lock of
 * transactions that enqueue into many queues (advisory locks use 1 and 2,
 * jobq's worker registry 0x6a71)
 */
#define JOBQ_LOCKTAG_QUEUE		0x6a72
#define JOBQ_LOCKTAG_QUEUES		0x6a73

/*
 * The most queue locks a transaction holds: past them, it holds the lock of
 * many queues instead (a transaction that enqueued into 60,000 queues in one
 * statement held as many locks, and ran out of the lock table:
 * max_locks_per_transaction).
 */
#define JOBQ_QUEUE_LOCKS_HELD	16

/* How many locks of many queues there are (see ManyQueuesLockTag). */
#define JOBQ_MANY_QUEUES_LOCKS	64

/* Queue locks the current transaction took (MyLocalTransactionId). */
static int	queue_locks_held = 0;
static LocalTransactionId queue_locks_lxid = InvalidLocalTransactionId;

/* How often jobq_queue_drop_wait_many tries again for a lock of many queues. */
#define JOBQ_DROP_LOCK_POLL_MS	10

/*
 * Locks of jobq's own on queue names, in the advisory lock space of this
 * database, so that no job lands in a queue jobq.drop_queue is removing (it
 * would outlive the drop, and go to whoever creates a queue of that name
 * next).  Every transaction that enqueues into a queue holds the queue's
 * lock in share mode, and the drop takes it exclusively, waiting for the
 * enqueues in progress and keeping new ones out until it ends.  A queue's
 * lock is its own (64 bits of a hash seeded at server start): a drop holds
 * up no enqueue into another queue, however long its transaction stays
 * open.  A transaction past JOBQ_QUEUE_LOCKS_HELD queues holds, for the
 * rest, the lock of many queues of each (one of 64 they share) in share
 * mode, and only passes through each queue's lock (waiting for a drop of it
 * under way); a drop waits for those transactions by taking its queue's
 * lock of many queues for a moment, trying again every
 * JOBQ_DROP_LOCK_POLL_MS, never in the lock's queue, so that it holds up no
 * enqueue.  The locks go with the (sub)transaction that enqueues, never
 * with a cursor's portal that runs the enqueue: a fetch of that cursor
 * that fails later in a subtransaction would take them away with it, and
 * leave the jobs enqueued unguarded.
 */
static uint64
QueueHash(const char *queue)
{
	return hash_bytes_extended((const unsigned char *) queue, strlen(queue), jobq_state_seed());
}

static void
QueueLockTag(LOCKTAG *tag, uint64 h)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h >> 32), (uint32) h, JOBQ_LOCKTAG_QUEUE);
}

/*
 * The lock of many queues a queue of hash h goes with: one of
 * JOBQ_MANY_QUEUES_LOCKS, so that a transaction of many queues left open
 * holds up the drops of the queues of its locks, not of every queue.
 */
static void
ManyQueuesLockTag(LOCKTAG *tag, uint64 h)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (h % JOBQ_MANY_QUEUES_LOCKS), 0,
						 JOBQ_LOCKTAG_QUEUES);
}

/* Take queue's lock exclusively, for jobq.drop_queue (a unit, contain.c). */
void
jobq_queue_lock_for_drop(void *queue)
{
	LOCKTAG		tag;

	QueueLockTag(&tag, QueueHash((const char *) queue));
	(void) LockAcquire(&tag, AccessExclusiveLock, false, false);
}

/*
 * For jobq.drop_queue, once it holds the queue's lock: wait for the
 * transactions that hold the queue's lock of many queues (they may have
 * enqueued into it) to end, for timeout_ms at most (the session's
 * lock_timeout when shorter; 0: look once); true when none is left.  New
 * ones pass through the queue's lock, which the drop holds.
 */
bool
jobq_queue_drop_wait_many(const char *queue, int timeout_ms)
{
	LOCKTAG		tag;
	TimestampTz deadline;

	if (LockTimeout > 0 && LockTimeout < timeout_ms)
		timeout_ms = LockTimeout;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	ManyQueuesLockTag(&tag, QueueHash(queue));
	while (LockAcquire(&tag, AccessExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		if (GetCurrentTimestamp() >= deadline)
			return false;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 JOBQ_DROP_LOCK_POLL_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	LockRelease(&tag, AccessExclusiveLock, false);
	return true;
}

/*
 * Take queue's lock in share mode for an enqueue, to its transaction's end
 * (past JOBQ_QUEUE_LOCKS_HELD queues: the lock of many queues, and queue's
 * lock for a moment); true when it had to wait (a drop of the queue held
 * it).
 */
static bool
QueueLockForEnqueue(const char *queue)
{
	LOCKTAG		tag;
	LOCKTAG		many;
	bool		waited = false;
	bool		keep;
	LockAcquireResult r;
	uint64		h = QueueHash(queue);
	ResourceOwner owner = CurrentResourceOwner;

	if (queue_locks_lxid != MyLocalTransactionId)
	{
		queue_locks_lxid = MyLocalTransactionId;
		queue_locks_held = 0;
	}
	/* the (sub)transaction's, not a portal's (see QueueLockTag) */
	CurrentResourceOwner = CurTransactionResourceOwner;
	QueueLockTag(&tag, h);
	keep = queue_locks_held < JOBQ_QUEUE_LOCKS_HELD;
	if (!keep)
	{
		ManyQueuesLockTag(&many, h);
		(void) LockAcquire(&many, AccessShareLock, false, false);
	}
	r = LockAcquire(&tag, AccessShareLock, false, true);
	if (r == LOCKACQUIRE_NOT_AVAIL)
	{
		r = LockAcquire(&tag, AccessShareLock, false, false);
		waited = true;
	}
	if (r == LOCKACQUIRE_ALREADY_HELD || r == LOCKACQUIRE_ALREADY_CLEAR)
		keep = true;			/* held from before: this call adds nothing */
	if (!keep)
		LockRelease(&tag, AccessShareLock, false);
	else if (r == LOCKACQUIRE_OK)
		queue_locks_held++;
	CurrentResourceOwner = owner;
	return waited;
}

/*
 * Read a queue's settings, creating the queue on first use: for an enqueue,
 * which holds the queue's name lock from here to its transaction's end.
 */
void
jobq_queue_get_or_create(const char *queue, JobqQueue *q)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		waited = QueueLockForEnqueue(queue);

	if (jobq_queue_get(queue, q))
	{
		/*
		 * A transaction snapshot may still show a queue a drop removed since
		 * (and the grants the caller was checked against): look at the latest
		 * state
		 */
		if (IsolationUsesXactSnapshot())
		{
			values[0] = CStringGetTextDatum(queue);
			jobq_spi_exec_latest(jobq_plan(&plan_queue_exists,
										   "SELECT 1 FROM jobq.queue WHERE name = $1", 1, types),
								 values, NULL, SPI_OK_SELECT);
			if (SPI_processed == 0)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to a drop of queue \"%s\"",
								jobq_quote_arg(queue)),
						 errdetail("The queue was dropped after this transaction's snapshot was taken."),
						 errhint("Try again.")));
		}
		return;
	}
	if (waited)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("queue \"%s\" was dropped while this call waited for it",
						jobq_quote_arg(queue)),
				 errdetail("The capabilities it was checked against went with the queue."),
				 errhint("Try again: the queue is created anew for a role that may use it.")));
	values[0] = CStringGetTextDatum(queue);
	jobq_spi_exec(jobq_plan(&plan_queue_create,
							"INSERT INTO jobq.queue (name) VALUES ($1) ON CONFLICT DO NOTHING",
							1, types),
				  values, NULL, SPI_OK_INSERT);
	if (!jobq_queue_get(queue, q))
		elog(ERROR, "jobq: queue \"%s\" vanished while it was created", queue);
}

/* OID of jobq.ready: tells claim positions of this install from older ones. */
Oid
jobq_ready_relid(void)
{
	return jobq_relid_required(JOBQ_REL_READY);
}

/* ----------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------- */

/*
 * An optional interval setting that must be at least min_us long, and at
 * most JOBQ_MAX_INTERVAL_US.
 */
static void
SettingInterval(FunctionCallInfo fcinfo, int argno, const char *argname,
				int64 min_us, Datum *value, char *null)
{
	if (PG_ARGISNULL(argno))
	{
		*null = 'n';
		return;
	}
	if (jobq_interval_usecs(PG_GETARG_INTERVAL_P(argno)) < min_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 min_us > 0 ?
				 errmsg("%s must be a positive interval", argname) :
				 errmsg("%s must be zero or a positive interval", argname)));
	(void) jobq_check_interval_arg(PG_GETARG_INTERVAL_P(argno), argname, min_us,
								   JOBQ_MAX_INTERVAL_US);
	*value = PG_GETARG_DATUM(argno);
	*null = ' ';
}

/*
 * An optional retention setting: zero or positive, at most
 * JOBQ_MAX_INTERVAL_US, or (from PostgreSQL 17, whose intervals have one)
 * 'infinity', which keeps the jobs for ever.  A finite retention too long
 * to compute is an error, never a silent "for ever".
 */
static void
SettingRetention(FunctionCallInfo fcinfo, int argno, const char *argname,
				 Datum *value, char *null)
{
	Interval   *iv;

	if (PG_ARGISNULL(argno))
	{
		*null = 'n';
		return;
	}
	iv = PG_GETARG_INTERVAL_P(argno);
	if (!JOBQ_INTERVAL_IS_INFINITY(iv) &&
		(jobq_interval_usecs(iv) > JOBQ_MAX_INTERVAL_US || !jobq_interval_in_range(iv)))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_FIELD_OVERFLOW),
				 errmsg("%s is out of range", argname),
				 errdetail("The %s given was %s; the longest jobq accepts is 1000 years.", argname,
						   jobq_interval_text(iv)),
				 errhint(JOBQ_INTERVAL_INFINITY_HINT)));
	if (!JOBQ_INTERVAL_IS_INFINITY(iv))
		SettingInterval(fcinfo, argno, argname, 0, value, null);
	else
	{
		*value = PG_GETARG_DATUM(argno);
		*null = ' ';
	}
}

/* An optional limit setting: NULL leaves it, 0 removes it, else positive. */
static void
SettingLimit(FunctionCallInfo fcinfo, int argno, const char *argname,
			 Datum *value, char *null, bool *remove)
{
	*remove = false;
	*null = 'n';
	if (PG_ARGISNULL(argno))
		return;
	if (PG_GETARG_INT32(argno) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", argname),
				 errhint("Use 0 to remove the limit.")));
	if (PG_GETARG_INT32(argno) == 0)
		*remove = true;
	else
	{
		*value = PG_GETARG_DATUM(argno);
		*null = ' ';
	}
}

/*
 * jobq.configure(queue, max_retries, lease, backoff_base, backoff_cap,
 *				  backoff_jitter, retention_completed, retention_failed,
 *				  max_concurrency, max_per_key, rate_limit, rate_period,
 *				  breaker_threshold)
 *
 * Creates the queue if needed; NULL leaves a setting unchanged, 0 removes
 * a limit.  Removing the breaker closes it.
 */
Datum
jobq_configure(PG_FUNCTION_ARGS)
{
	Oid			types[17] = {TEXTOID, INT4OID, INTERVALOID, INTERVALOID, INTERVALOID,
		FLOAT8OID, INTERVALOID, INTERVALOID, INT4OID, INT4OID, INT4OID, INTERVALOID,
	INT4OID, BOOLOID, BOOLOID, BOOLOID, BOOLOID};
	Datum		values[17];
	char		nulls[17];
	bool		remove[4];
	const char *queue;
	JobqQueue	q;
	bool		isnull;
	JobqSavedUser saved;

	memset(nulls, ' ', sizeof(nulls));
	queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	values[0] = CStringGetTextDatum(queue);
	if (PG_ARGISNULL(1))
		nulls[1] = 'n';
	else
	{
		values[1] = PG_GETARG_DATUM(1);
		if (PG_GETARG_INT32(1) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_retries must not be negative")));
	}
	SettingInterval(fcinfo, 2, "lease", 1, &values[2], &nulls[2]);
	SettingInterval(fcinfo, 3, "backoff_base", 0, &values[3], &nulls[3]);
	SettingInterval(fcinfo, 4, "backoff_cap", 0, &values[4], &nulls[4]);
	if (PG_ARGISNULL(5))
		nulls[5] = 'n';
	else
	{
		float8		jitter = PG_GETARG_FLOAT8(5);

		if (!(jitter >= 0.0 && jitter <= 1.0))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("backoff_jitter must be between 0 and 1"),
					 errhint("0.1 spreads each delay over plus or minus 10%%.")));
		values[5] = PG_GETARG_DATUM(5);
	}
	SettingRetention(fcinfo, 6, "retention_completed", &values[6], &nulls[6]);
	SettingRetention(fcinfo, 7, "retention_failed", &values[7], &nulls[7]);
	SettingLimit(fcinfo, 8, "max_concurrency", &values[8], &nulls[8], &remove[0]);
	SettingLimit(fcinfo, 9, "max_per_key", &values[9], &nulls[9], &remove[1]);
	SettingLimit(fcinfo, 10, "rate_limit", &values[10], &nulls[10], &remove[2]);
	SettingInterval(fcinfo, 11, "rate_period", 1, &values[11], &nulls[11]);
	SettingLimit(fcinfo, 12, "breaker_threshold", &values[12], &nulls[12], &remove[3]);
	for (int i = 0; i < 4; i++)
		values[13 + i] = BoolGetDatum(remove[i]);

	jobq_owner_begin(&saved);
	jobq_require(saved.caller, queue, JOBQ_CAP_ADMINISTER);
	jobq_queue_get_or_create(queue, &q);
	jobq_spi_exec(jobq_plan(&plan_configure_check,
							"SELECT COALESCE($5, backoff_cap) >= COALESCE($4, backoff_base)"
							" FROM jobq.queue WHERE name = $1",
							5, types),
				  values, nulls, SPI_OK_SELECT);
	if (SPI_processed != 1 ||
		!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("backoff_cap must not be shorter than backoff_base"),
				 errhint("Set both in one call, for example backoff_base => '1 s', backoff_cap => '10 min'.")));
	jobq_spi_exec(jobq_plan(&plan_configure,
							"UPDATE jobq.queue SET"
							" max_retries = COALESCE($2, max_retries),"
							" lease = COALESCE($3, lease),"
							" backoff_base = COALESCE($4, backoff_base),"
							" backoff_cap = COALESCE($5, backoff_cap),"
							" backoff_jitter = COALESCE($6, backoff_jitter),"
							" retention_completed = COALESCE($7, retention_completed),"
							" retention_failed = COALESCE($8, retention_failed),"
							" max_concurrency = CASE WHEN $14 THEN NULL ELSE COALESCE($9, max_concurrency) END,"
							" max_per_key = CASE WHEN $15 THEN NULL ELSE COALESCE($10, max_per_key) END,"
							" rate_limit = CASE WHEN $16 THEN NULL ELSE COALESCE($11, rate_limit) END,"
							" rate_period = COALESCE($12, rate_period),"
							" breaker_threshold = CASE WHEN $17 THEN NULL ELSE COALESCE($13, breaker_threshold) END,"
							" breaker_state = CASE WHEN $17 THEN 'closed' ELSE breaker_state END,"
							" breaker_failures = CASE WHEN $17 THEN 0 ELSE breaker_failures END,"
							" updated_at = now()"
							" WHERE name = $1",
							17, types),
				  values, nulls, SPI_OK_UPDATE);
	jobq_owner_end(&saved);
	PG_RETURN_VOID();
}
