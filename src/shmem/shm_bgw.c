/*-------------------------------------------------------------------------
 *
 * shmem/shm_bgw.c
 *	  The shared memory of jobq's background processes: one slot per
 *	  database the launcher knows, with that database's worker and its
 *	  executors; waking and interrupting them.
 *
 * The launcher (bgw/launcher.c), the database workers (bgw/worker.c), the
 * executors (bgw/handler_proc.c) and every backend meet here.  A backend never
 * calls a background process's code: it sets a latch, sends a signal or marks
 * a slot, through the functions below.  Wakes that must wait for the commit of
 * the transaction that asked for them (a schedule changed, CREATE EXTENSION
 * jobq) are sent from a transaction callback.
 *
 * Locking: JobqBgwLock (an LWLock) guards all of JobqBgw.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "contain.h"
#include "shmem/shm_bgw.h"

JobqBgwShared *JobqBgw = NULL;
LWLock	   *JobqBgwLock = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Set when this transaction ran CREATE EXTENSION jobq. */
static bool wake_launcher_at_commit = false;

/* Set when this transaction changed a schedule: wake this database's worker. */
static bool wake_worker_at_commit = false;


static void BgwXactCallback(XactEvent event, void *arg);

/* Size of the shared worker state. */
static Size
WorkerShmemSize(void)
{
	return add_size(offsetof(JobqBgwShared, slots),
					mul_size(jobq_max_databases, sizeof(JobqDbSlot)));
}

/* shmem_request_hook: reserve shared memory and our lock. */
static void
WorkerShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(WorkerShmemSize());
	RequestNamedLWLockTranche("jobq_worker", 1);
}

/* shmem_startup_hook: create or attach to the shared worker state. */
static void
WorkerShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	JobqBgwLock = &(GetNamedLWLockTranche("jobq_worker"))->lock;
	JobqBgw = ShmemInitStruct("jobq worker state", WorkerShmemSize(), &found);
	if (!found)
	{
		memset(JobqBgw, 0, WorkerShmemSize());
		JobqBgw->nslots = jobq_max_databases;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Fill in what the launcher and the workers have in common. */
void
jobq_bgw_init_struct(BackgroundWorker *bgw, const char *function_name)
{
	memset(bgw, 0, sizeof(*bgw));
	bgw->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw->bgw_start_time = BgWorkerStart_RecoveryFinished;
	snprintf(bgw->bgw_library_name, BGW_MAXLEN, "jobq");
	snprintf(bgw->bgw_function_name, BGW_MAXLEN, "%s", function_name);
}

/*
 * Settings a database (ALTER DATABASE ... SET) or postgresql.conf may give
 * client sessions that must not reach jobq's own processes, and the value
 * they get there.  A transaction_timeout (PostgreSQL 17 and later)
 * terminates the process, a worker in the middle of a pass or an executor
 * in the middle of a handler (whose time limit is its lease); a read-only
 * or serializable default would stop a worker from doing its work.  A
 * setting this PostgreSQL does not have is passed over.
 */
static const struct
{
	const char *name;
	const char *value;
}			jobq_process_settings[] =

{
	{"transaction_timeout", "0"},
	{"default_transaction_read_only", "off"},
	{"default_transaction_isolation", "read committed"},
};

/*
 * Settings of the database's worker (and the shared pool's passes) only,
 * over what the database gives client sessions (ALTER DATABASE ... SET,
 * which its owner may do): the worker's statements are planned on
 * PostgreSQL's defaults (a database whose owner turned index scans off, or
 * JIT on for everything, made each of the pool's passes there slow, for
 * every database behind it: a review's find), take no statement timeout,
 * and wait JOBQ_WORKER_LOCK_TIMEOUT for a lock at most (a session holding
 * one of jobq's tables locked, or a VACUUM FULL queued behind a tenant's
 * open transaction, made the pass wait; in the shared pool, as many such
 * databases as jobq.max_workers stopped the worker for every database).
 * Executors keep the database's settings: they run its handlers.
 */
static const struct
{
	const char *name;
	const char *value;
}			jobq_worker_settings[] =

{
	{"lock_timeout", CppAsString2(JOBQ_WORKER_LOCK_TIMEOUT)},
	{"statement_timeout", "0"},
	{"jit", "off"},
	{"enable_bitmapscan", "on"},
	{"enable_hashagg", "on"},
	{"enable_hashjoin", "on"},
	{"enable_incremental_sort", "on"},
	{"enable_indexscan", "on"},
	{"enable_indexonlyscan", "on"},
	{"enable_material", "on"},
	{"enable_memoize", "on"},
	{"enable_mergejoin", "on"},
	{"enable_nestloop", "on"},
	{"enable_seqscan", "on"},
	{"enable_sort", "on"},
	{"enable_tidscan", "on"},
	{"plan_cache_mode", "auto"},
};

/* Apply jobq_worker_settings (in the database's worker, after connecting). */
void
jobq_bgw_worker_settings(void)
{
	for (int i = 0; i < lengthof(jobq_worker_settings); i++)
		if (GetConfigOption(jobq_worker_settings[i].name, true, false) != NULL)
			SetConfigOption(jobq_worker_settings[i].name,
							jobq_worker_settings[i].value, PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Start a jobq process: the stock signal handlers, the configuration file
 * (a reload signalled before our handler was in place is lost), a
 * connection to dbid (InvalidOid: none, for the launcher) as the bootstrap
 * superuser, its application name and jobq_process_settings.
 */
void
jobq_bgw_connect(Oid dbid, const char *appname)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	ProcessConfigFile(PGC_SIGHUP);
	if (OidIsValid(dbid))
		BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	else
		BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname(appname);
	for (int i = 0; i < lengthof(jobq_process_settings); i++)
		if (GetConfigOption(jobq_process_settings[i].name, true, false) != NULL)
			SetConfigOption(jobq_process_settings[i].name,
							jobq_process_settings[i].value, PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Reserve the shared memory when preloaded, and register the callback that
 * sends wakes at commit (from _PG_init).
 */
void
jobq_bgw_init(void)
{
	RegisterXactCallback(BgwXactCallback, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = WorkerShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = WorkerShmemStartup;
}

/* ----------------------------------------------------------------
 * Slots and the process budget
 * ---------------------------------------------------------------- */

/* Empty a slot and give it to database dbid (InvalidOid: free). */
void
jobq_bgw_slot_reset(JobqDbSlot *slot, Oid dbid)
{
	memset(slot, 0, sizeof(*slot));
	pg_atomic_init_u64(&slot->lease_due, 0);
	slot->dbid = dbid;
}

/*
 * jobq's processes that count against jobq.max_workers: the database
 * workers and executors that run (JobqBgwLock held).  The launcher adds
 * the workers it started that have not attached yet; the launcher itself is
 * not counted.
 */
int
jobq_bgw_processes(void)
{
	int			n = 0;

	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (!OidIsValid(slot->dbid))
			continue;
		if (slot->pid != 0)
			n++;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
			if (slot->executor_pid[e] != 0)
				n++;
	}
	return n;
}

/*
 * This database's slot index, cached; -1 when the launcher has none (a
 * database outside jobq.databases).  Claims call this: a miss is looked up
 * again at most once a second, not at every claim.
 */
static int
MyDbSlot(void)
{
	static int	cached = -1;
	static TimestampTz missed_at = 0;
	TimestampTz now;

	if (cached >= 0 && cached < JobqBgw->nslots &&
		JobqBgw->slots[cached].dbid == MyDatabaseId)
		return cached;
	now = GetCurrentTimestamp();
	if (cached < 0 && missed_at != 0 && !TimestampDifferenceExceeds(missed_at, now, 1000))
		return -1;
	cached = -1;
	LWLockAcquire(JobqBgwLock, LW_SHARED);
	for (int i = 0; i < JobqBgw->nslots; i++)
		if (JobqBgw->slots[i].dbid == MyDatabaseId)
			cached = i;
	LWLockRelease(JobqBgwLock);
	missed_at = cached < 0 ? now : 0;
	return cached;
}

/* ----------------------------------------------------------------
 * Failing units of a database's background work (contain.c)
 * ---------------------------------------------------------------- */

/* A failing unit not seen failing for this long gives its place up. */
#define JOBQ_FAILED_UNIT_STALE_MS	(10 * 60 * 1000)

/* Slot index, if it still serves this process's database (lock held). */
static JobqDbSlot *
UnitSlot(int index)
{
	JobqDbSlot *slot;

	if (JobqBgw == NULL || index < 0 || index >= JobqBgw->nslots)
		return NULL;
	slot = &JobqBgw->slots[index];
	return slot->dbid == MyDatabaseId ? slot : NULL;
}

/* The place of unit among slot's failing units; -1: none (lock held). */
static int
UnitPlace(JobqDbSlot *slot, uint64 unit)
{
	for (int i = 0; slot != NULL && i < JOBQ_FAILED_UNITS_KEPT; i++)
	{
		if (slot->failed_unit[i] == unit)
			return i;
	}
	return -1;
}

/*
 * A place for a newly failing unit: a free one, else one whose unit has not
 * failed for JOBQ_FAILED_UNIT_STALE_MS (a schedule or queue dropped while it
 * failed never works again to give its place back); -1: all are taken.
 */
static int
UnitNewPlace(JobqDbSlot *slot, TimestampTz now)
{
	for (int i = 0; i < JOBQ_FAILED_UNITS_KEPT; i++)
	{
		if (slot->failed_unit[i] == 0 ||
			TimestampDifferenceExceeds(slot->failed_at[i], now, JOBQ_FAILED_UNIT_STALE_MS))
			return i;
	}
	return -1;
}

/*
 * Keep in the database's slot index that unit (a hash of its name) failed
 * with sqlerrcode.  JOBQ_UNIT_KNOWN: it was kept there with that SQLSTATE
 * already (an earlier pass logged it); JOBQ_UNIT_LATER: every place is
 * taken and a unit that found none was logged less than a minute ago (so
 * many failing units cost a line a minute, not one each a pass); else
 * JOBQ_UNIT_LOG.
 */
JobqUnitNoted
jobq_bgw_unit_failed(int index, uint64 unit, int sqlerrcode)
{
	JobqDbSlot *slot;
	JobqUnitNoted noted = JOBQ_UNIT_LOG;
	TimestampTz now = GetCurrentTimestamp();

	unit = unit == 0 ? 1 : unit;	/* 0 marks a free place */
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	slot = UnitSlot(index);
	if (slot != NULL)
	{
		int			place = UnitPlace(slot, unit);

		if (place >= 0 && slot->failed_code[place] == sqlerrcode)
			noted = JOBQ_UNIT_KNOWN;
		if (place < 0)
			place = UnitNewPlace(slot, now);
		if (place >= 0)
		{
			slot->failed_unit[place] = unit;
			slot->failed_code[place] = sqlerrcode;
			slot->failed_at[place] = now;
		}
		else if (!TimestampDifferenceExceeds(slot->failed_overflow_at, now, 60 * 1000))
			noted = JOBQ_UNIT_LATER;
		else
			slot->failed_overflow_at = now;
	}
	LWLockRelease(JobqBgwLock);
	return noted;
}

/* Is unit failing in the database's slot index? */
bool
jobq_bgw_unit_failing(int index, uint64 unit)
{
	bool		failing;

	unit = unit == 0 ? 1 : unit;
	LWLockAcquire(JobqBgwLock, LW_SHARED);
	failing = UnitPlace(UnitSlot(index), unit) >= 0;
	LWLockRelease(JobqBgwLock);
	return failing;
}

/* This database's slot (JobqBgwLock held), or NULL. */
static JobqDbSlot *
MyDatabaseSlot(void)
{
	if (JobqBgw == NULL)
		return NULL;
	for (int i = 0; i < JobqBgw->nslots; i++)
		if (JobqBgw->slots[i].dbid == MyDatabaseId)
			return &JobqBgw->slots[i];
	return NULL;
}

/*
 * The turn of this database's pruning (queue and status, at most
 * JOBQ_MAX_NAME_LEN + 1 and JOBQ_STATUS_SIZE bytes): 1 when there is
 * one, 0 when there is none, -1 when the database has no slot (jobq not
 * preloaded, or a database the launcher does not know yet: the caller
 * keeps the turn).
 */
int
jobq_bgw_prune_turn(char *queue, char *status)
{
	JobqDbSlot *slot;
	int			found = -1;

	if (JobqBgw == NULL)
		return -1;
	LWLockAcquire(JobqBgwLock, LW_SHARED);
	slot = MyDatabaseSlot();
	if (slot != NULL)
	{
		found = slot->prune_turn_queue[0] != '\0';
		strlcpy(queue, slot->prune_turn_queue, JOBQ_MAX_NAME_LEN + 1);
		strlcpy(status, slot->prune_turn_status, JOBQ_STATUS_SIZE);
	}
	LWLockRelease(JobqBgwLock);
	return found;
}

/* Set this database's pruning turn (queue NULL: none); nothing without a slot. */
void
jobq_bgw_set_prune_turn(const char *queue, const char *status)
{
	JobqDbSlot *slot;

	if (JobqBgw == NULL)
		return;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	slot = MyDatabaseSlot();
	if (slot != NULL)
	{
		strlcpy(slot->prune_turn_queue, queue ? queue : "", JOBQ_MAX_NAME_LEN + 1);
		strlcpy(slot->prune_turn_status, status ? status : "", JOBQ_STATUS_SIZE);
	}
	LWLockRelease(JobqBgwLock);
}

/* Forget that unit failed in the database's slot index; true if it had. */
bool
jobq_bgw_unit_works(int index, uint64 unit)
{
	bool		failed;

	/* most units never failed: look under a shared lock first */
	failed = jobq_bgw_unit_failing(index, unit);
	unit = unit == 0 ? 1 : unit;
	if (failed)
	{
		JobqDbSlot *slot;
		int			place;

		LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
		slot = UnitSlot(index);
		place = UnitPlace(slot, unit);
		if (place >= 0)
			slot->failed_unit[place] = 0;
		LWLockRelease(JobqBgwLock);
	}
	return failed;
}

/*
 * A claim took leases that end at expires: lower this database's lease_due,
 * so that its worker (or the shared pool) comes back when they expire (a
 * lock-free minimum: claims do not wait for one another here; only a claim
 * that lowers it, the first after an idle spell, sets the worker's latch).
 */
void
jobq_bgw_note_lease(TimestampTz expires)
{
	int			i;
	uint64		cur;

	if (JobqBgw == NULL || (i = MyDbSlot()) < 0)
		return;
	cur = pg_atomic_read_u64(&JobqBgw->slots[i].lease_due);
	while (cur == 0 || (uint64) expires < cur)
	{
		if (pg_atomic_compare_exchange_u64(&JobqBgw->slots[i].lease_due, &cur,
										   (uint64) expires))
		{
			/* the database's own worker sleeps until then: wake it to replan */
			Latch	   *latch = JobqBgw->slots[i].latch;

			if (latch != NULL)
				SetLatch(latch);
			break;
		}
	}
}

/* ----------------------------------------------------------------
 * Executor places
 * ---------------------------------------------------------------- */

static void
ExecutorSlotClear(JobqDbSlot *slot, int index, pid_t pid)
{
	slot->executor_pid[index] = pid;
	slot->executor_latch[index] = pid != 0 ? MyLatch : NULL;
	slot->executor_job[index] = 0;
	slot->executor_deadline[index] = 0;
	slot->executor_cancel_at[index] = 0;
	slot->executor_terminated[index] = false;
	slot->executor_role[index] = InvalidOid;
}

/* on_shmem_exit of an executor: free its place. */
static void
ExecutorDetach(int code, Datum arg)
{
	int			index = DatumGetInt32(arg);

	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (slot->dbid == MyDatabaseId && slot->executor_pid[index] == MyProcPid)
			ExecutorSlotClear(slot, index, 0);
	}
	/* a place in the budget is free: databases whose handler jobs wait get it */
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (!OidIsValid(slot->dbid) || !slot->executors_wanted)
			continue;
		slot->poke_at = GetCurrentTimestamp();
		if (slot->latch != NULL)
			SetLatch(slot->latch);
		else if (JobqBgw->launcher_latch != NULL)
			SetLatch(JobqBgw->launcher_latch);
	}
	LWLockRelease(JobqBgwLock);
}

/*
 * Should this executor, idle, leave?  In the shared pool always, and when a
 * database waits for a worker; with workers of their own when the budget of
 * jobq.max_workers is full and another database's handler jobs wait for a
 * place.
 */
bool
jobq_bgw_executor_should_leave(void)
{
	bool		leave;

	if (JobqBgw == NULL)
		return false;
	LWLockAcquire(JobqBgwLock, LW_SHARED);
	leave = JobqBgw->pool_mode || JobqBgw->dbs_waiting;
	if (!leave && jobq_bgw_processes() >= jobq_max_workers)
	{
		for (int i = 0; i < JobqBgw->nslots; i++)
			if (OidIsValid(JobqBgw->slots[i].dbid) && JobqBgw->slots[i].executors_wanted &&
				JobqBgw->slots[i].dbid != MyDatabaseId)
				leave = true;
	}
	LWLockRelease(JobqBgwLock);
	return leave;
}

/*
 * May one more executor start, with starting ones started and not yet
 * attached (JobqBgwLock held)?  Executors come out of jobq.max_workers,
 * never while a database waits for a worker, and in the shared pool leave
 * one place to the workers' passes, so that reaping and firing in every
 * database always have one.
 */
bool
jobq_bgw_executor_room(int starting)
{
	int			reserve = (JobqBgw->pool_mode && jobq_max_workers > 1) ? 1 : 0;

	return !JobqBgw->dbs_waiting &&
		jobq_bgw_processes() + starting < jobq_max_workers - reserve;
}

static int	MyExecutorIndex = -1;

/*
 * An executor takes place index of its database's slot; false if taken, or
 * if the budget of jobq.max_workers is full.
 */
bool
jobq_bgw_executor_attach(int index)
{
	bool		ok = false;

	if (index < 0 || index >= JOBQ_MAX_EXECUTORS)
		return false;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (slot->dbid != MyDatabaseId)
			continue;

		/*
		 * Two workers may start executors at once, each within the budget:
		 * the one that would exceed jobq.max_workers leaves at once, and its
		 * database waits for a place to free up.
		 */
		if (!jobq_bgw_executor_room(0))
			slot->executors_wanted = true;
		else if (slot->executor_pid[index] == 0)
		{
			ExecutorSlotClear(slot, index, MyProcPid);
			ok = true;
		}
		break;
	}
	LWLockRelease(JobqBgwLock);
	if (ok)
	{
		MyExecutorIndex = index;
		on_shmem_exit(ExecutorDetach, Int32GetDatum(index));
	}
	return ok;
}

/*
 * The pids of this database's executors that run now, into pids (room for
 * JOBQ_MAX_EXECUTORS); returns how many.  An executor is here from before
 * its first claim until it exits.
 */
int
jobq_bgw_executor_pids(pid_t *pids)
{
	int			n = 0;

	LWLockAcquire(JobqBgwLock, LW_SHARED);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (slot->dbid != MyDatabaseId)
			continue;
		for (int k = 0; k < JOBQ_MAX_EXECUTORS; k++)
			if (slot->executor_pid[k] != 0)
				pids[n++] = slot->executor_pid[k];
		break;
	}
	LWLockRelease(JobqBgwLock);
	return n;
}

/* This executor's slot (JobqBgwLock held), or NULL. */
static JobqDbSlot *
ExecutorSlot(void)
{
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		if (JobqBgw->slots[i].dbid == MyDatabaseId &&
			JobqBgw->slots[i].executor_pid[MyExecutorIndex] == MyProcPid)
			return &JobqBgw->slots[i];
	}
	return NULL;
}

/*
 * Publish the job this executor runs now (0: none) and the time its lease
 * ends, for jobq.cancel and for the launcher's time limit.
 */
void
jobq_bgw_executor_set_job(int64 job_id, TimestampTz deadline)
{
	JobqDbSlot *slot;

	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	slot = ExecutorSlot();
	if (slot != NULL)
	{
		slot->executor_job[MyExecutorIndex] = job_id;
		slot->executor_deadline[MyExecutorIndex] = job_id != 0 ? deadline : 0;
		slot->executor_cancel_at[MyExecutorIndex] = 0;
		slot->executor_terminated[MyExecutorIndex] = false;
	}
	LWLockRelease(JobqBgwLock);
}

/*
 * Take a share of this database's executors for the jobs of role, the role
 * handlers run as (InvalidOid: give the share back).  The roles with
 * handlers share the executors: while other executors already claim or run
 * share jobs of this role, where share is the executors divided by the
 * roles with handlers (rounded up), this one claims for another role.  So
 * one tenant's long handlers, in however many queues, never hold every
 * executor.
 */
bool
jobq_bgw_executor_take_share(Oid role, int nroles)
{
	JobqDbSlot *slot;
	bool		ok = true;

	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	slot = ExecutorSlot();
	if (slot != NULL)
	{
		if (OidIsValid(role))
		{
			int			share = Max(1, (jobq_executors + Max(nroles, 1) - 1) / Max(nroles, 1));
			int			taken = 0;

			for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
				if (e != MyExecutorIndex && slot->executor_pid[e] != 0 &&
					slot->executor_role[e] == role)
					taken++;
			ok = taken < share;
		}
		if (ok)
			slot->executor_role[MyExecutorIndex] = role;
	}
	LWLockRelease(JobqBgwLock);
	return ok;
}

/*
 * Wake the executors of database dbid (a job they may run became ready).
 * Where none runs (they leave when idle in the shared pool, or when the
 * budget is wanted elsewhere), the database's worker is woken to start them,
 * or, in the pool, the database is poked for a pass.
 */
void
jobq_bgw_wake_executors(Oid dbid)
{
	bool		woke = false;
	int			mark = -1;

	if (JobqBgw == NULL)
		return;
	LWLockAcquire(JobqBgwLock, LW_SHARED);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		if (JobqBgw->slots[i].dbid != dbid)
			continue;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
			if (JobqBgw->slots[i].executor_latch[e] != NULL)
			{
				SetLatch(JobqBgw->slots[i].executor_latch[e]);
				woke = true;
			}
		if (!woke && JobqBgw->slots[i].has_handlers)
			mark = i;
	}
	LWLockRelease(JobqBgwLock);
	if (mark < 0)
		return;
	/* no executor runs there: its worker (or the pool) starts them */
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	if (JobqBgw->slots[mark].dbid == dbid)
	{
		JobqBgw->slots[mark].poke_at = GetCurrentTimestamp();
		if (JobqBgw->slots[mark].latch != NULL)
			SetLatch(JobqBgw->slots[mark].latch);
		else if (JobqBgw->launcher_latch)
			SetLatch(JobqBgw->launcher_latch);
	}
	LWLockRelease(JobqBgwLock);
}

/*
 * Interrupt the executor of this database that runs job_id, if any; the
 * launcher terminates it if the handler does not stop.
 */
void
jobq_bgw_interrupt_job(int64 job_id)
{
	if (JobqBgw == NULL)
		return;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		if (JobqBgw->slots[i].dbid != MyDatabaseId)
			continue;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
			if (JobqBgw->slots[i].executor_job[e] == job_id &&
				JobqBgw->slots[i].executor_pid[e] != 0)
			{
				kill(JobqBgw->slots[i].executor_pid[e], SIGINT);
				if (JobqBgw->slots[i].executor_cancel_at[e] == 0)
					JobqBgw->slots[i].executor_cancel_at[e] = GetCurrentTimestamp();
			}
	}
	LWLockRelease(JobqBgwLock);
}

/*
 * Keep the launcher away from a database for a while and terminate its
 * worker, so a command that needs the database alone can have it.
 */
void
jobq_bgw_block_database(Oid dbid, bool block)
{
	if (JobqBgw == NULL || !OidIsValid(dbid))
		return;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (slot->dbid != dbid)
			continue;
		if (block)
		{
			slot->blocked_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60 * 1000);
			if (slot->pid != 0)
				kill(slot->pid, SIGTERM);
			/* executors are sessions of the database too */
			for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
				if (slot->executor_pid[e] != 0)
					kill(slot->executor_pid[e], SIGTERM);
		}
		else
			slot->blocked_until = 0;
	}
	LWLockRelease(JobqBgwLock);
}

/* This transaction ran CREATE EXTENSION jobq: wake the launcher at commit. */
void
jobq_bgw_wake_launcher_at_commit(void)
{
	wake_launcher_at_commit = true;
}

/* This transaction changed a schedule: wake this database's worker at commit. */
void
jobq_bgw_wake_worker_at_commit(void)
{
	wake_worker_at_commit = true;
}

/*
 * Set the latch of this database's worker, if one runs; in the shared pool,
 * where none may (or it is ending its pass), the launcher sees the poke and
 * serves the database again.
 */
static void
WakeDatabaseWorker(void)
{
	if (JobqBgw == NULL)
		return;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		if (JobqBgw->slots[i].dbid != MyDatabaseId)
			continue;
		JobqBgw->slots[i].poke_at = GetCurrentTimestamp();
		if (JobqBgw->slots[i].latch != NULL)
			SetLatch(JobqBgw->slots[i].latch);
		if ((JobqBgw->slots[i].latch == NULL || JobqBgw->slots[i].pass_worker) &&
			JobqBgw->launcher_latch)
			SetLatch(JobqBgw->launcher_latch);
	}
	LWLockRelease(JobqBgwLock);
}

/*
 * At commit: after CREATE EXTENSION jobq, have the launcher look here now;
 * after a schedule changed, wake this database's worker.
 */
static void
BgwXactCallback(XactEvent event, void *arg)
{
	if (wake_worker_at_commit)
	{
		if (event == XACT_EVENT_COMMIT)
			WakeDatabaseWorker();
		if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
			wake_worker_at_commit = false;
	}
	if (!wake_launcher_at_commit)
		return;
	if (event == XACT_EVENT_COMMIT && JobqBgw != NULL)
	{
		LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
		for (int i = 0; i < JobqBgw->nslots; i++)
		{
			if (JobqBgw->slots[i].dbid == MyDatabaseId)
			{
				JobqBgw->slots[i].wake_at = GetCurrentTimestamp();
				JobqBgw->slots[i].last_start = 0;
			}
		}
		if (JobqBgw->launcher_latch)
			SetLatch(JobqBgw->launcher_latch);
		LWLockRelease(JobqBgwLock);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
		wake_launcher_at_commit = false;
}
