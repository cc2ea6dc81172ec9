/*-------------------------------------------------------------------------
 *
 * worker.c
 *	  The jobq launcher and the per-database jobq workers.
 *
 * With jobq in shared_preload_libraries the postmaster starts one
 * launcher, once recovery has finished (so a standby runs none of this,
 * and a promoted standby starts it at promotion).  The launcher connects
 * to no database; about once a second it reads pg_database and starts a
 * dynamic background worker for every database that allows connections
 * (restricted by jobq.databases) and has no worker yet.  A worker whose
 * database has no jobq extension records that and exits; the launcher
 * tries that database again after jobq.database_recheck_interval, or at
 * once when a CREATE EXTENSION jobq there commits (a ProcessUtility hook
 * notices it and wakes the launcher).
 *
 * A worker loops: fire due schedules (scheduler.c), reap expired leases
 * (reaper.c), prune finished jobs every jobq.prune_interval (retention.c),
 * then sleep on its latch until the next schedule is due, jobq.naptime at
 * most; a transaction that changes a schedule sets the latch at commit.
 * Every step is a transaction of its own, so no snapshot is held while it
 * sleeps.  Inside a step each schedule and each queue is a unit that fails
 * alone (contain.c), and nothing a client holds locked makes the worker
 * wait: no tenant can stop or stall it for the others.  It exits when the
 * extension is dropped.  Workers are never restarted by the postmaster; the
 * launcher starts them again, at most once per JOBQ_RESTART_DELAY_MS per
 * database.  The launcher itself is restarted by the postmaster, and after
 * a crash-restart everything starts afresh from the tables: expired leases
 * are simply reaped.
 *
 * Commands that need a database to themselves (DROP DATABASE, CREATE
 * DATABASE from it as template, ALTER DATABASE RENAME) first block the
 * database in shared memory and terminate its worker, so they never fail
 * with "being accessed by other users" because of jobq.
 *
 * Locking: JobqWorkerLock (an LWLock) guards all of JobqWorkerShared.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/genam.h"
#include "catalog/indexing.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "jobq.h"

/*
 * How long an executor may run a handler past its job's lease, or past a
 * jobq.cancel of its job, before the launcher terminates it: a handler
 * that catches query_canceled cannot keep an executor.
 */
#define JOBQ_EXECUTOR_GRACE_MS	5000

/* Least time between two starts of a worker for the same database. */
#define JOBQ_RESTART_DELAY_MS	5000
/* How long the launcher sleeps between looks at pg_database. */
#define JOBQ_LAUNCHER_NAPTIME_MS	1000
/* Most workers probing databases of unknown state at once. */
#define JOBQ_MAX_PROBES			2

/* One database the launcher knows about. */
typedef struct JobqDbSlot
{
	Oid			dbid;			/* InvalidOid: slot is free */
	pid_t		pid;			/* the worker's pid while it runs, else 0 */
	Latch	   *latch;			/* the worker's latch while it runs */
	bool		has_jobq;		/* a worker found the extension here */
	TimestampTz started_at;		/* when the worker started */
	TimestampTz last_start;		/* when the launcher last started one */
	TimestampTz last_cycle_at;	/* when the worker last finished a cycle */
	TimestampTz no_extension_at;	/* a worker found no jobq here then */
	TimestampTz blocked_until;	/* a command needs the database alone */
	TimestampTz wake_at;		/* a CREATE EXTENSION jobq committed then */
	int64		reaped;			/* expired leases reaped since start */
	int64		pruned;			/* rows pruned since start */
	int64		fired;			/* schedule fires since start */
	pid_t		executor_pid[JOBQ_MAX_EXECUTORS];	/* running executors, else 0 */
	Latch	   *executor_latch[JOBQ_MAX_EXECUTORS];	/* their latches */
	int64		executor_job[JOBQ_MAX_EXECUTORS];	/* the job each runs, else 0 */
	TimestampTz executor_deadline[JOBQ_MAX_EXECUTORS];	/* that job's lease at claim */
	TimestampTz executor_cancel_at[JOBQ_MAX_EXECUTORS];	/* when jobq.cancel interrupted it, else 0 */
	bool		executor_terminated[JOBQ_MAX_EXECUTORS];	/* SIGTERM sent for that job */
	Oid			executor_role[JOBQ_MAX_EXECUTORS];	/* the role whose jobs it claims or runs, else 0 */
} JobqDbSlot;

/* State shared by the launcher, the workers and every backend. */
typedef struct JobqWorkerShared
{
	pid_t		launcher_pid;	/* 0 when no launcher runs */
	Latch	   *launcher_latch; /* to wake the launcher */
	TimestampTz launcher_started_at;
	TimestampTz launcher_cycle_at;	/* when it last looked at pg_database */
	int			nslots;
	JobqDbSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} JobqWorkerShared;

/* GUCs */
int			jobq_executors = 2;
static char *jobq_databases = NULL;
static int	jobq_naptime_ms = 1000;
static int	jobq_reap_batch = 500;
static int	jobq_prune_interval_s = 60;
static int	jobq_prune_batch = 500;
static int	jobq_database_recheck_s = 60;
static int	jobq_max_databases = 32;

static JobqWorkerShared *WorkerShared = NULL;
static LWLock *JobqWorkerLock = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_ProcessUtility = NULL;

/* Set when this transaction ran CREATE EXTENSION jobq. */
static bool wake_launcher_at_commit = false;

/* Set when this transaction changed a schedule: wake this database's worker. */
static bool wake_worker_at_commit = false;

/* The launcher's handles of the workers it started, by slot. */
static BackgroundWorkerHandle **launcher_handles = NULL;

PGDLLEXPORT void jobq_launcher_main(Datum main_arg);
PGDLLEXPORT void jobq_worker_main(Datum main_arg);

PG_FUNCTION_INFO_V1(jobq_worker_status);

/* ----------------------------------------------------------------
 * Shared memory and registration
 * ---------------------------------------------------------------- */

/* Size of the shared worker state. */
static Size
WorkerShmemSize(void)
{
	return add_size(offsetof(JobqWorkerShared, slots),
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
	JobqWorkerLock = &(GetNamedLWLockTranche("jobq_worker"))->lock;
	WorkerShared = ShmemInitStruct("jobq worker state", WorkerShmemSize(), &found);
	if (!found)
	{
		memset(WorkerShared, 0, WorkerShmemSize());
		WorkerShared->nslots = jobq_max_databases;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Fill in what the launcher and the workers have in common. */
static void
InitWorkerStruct(BackgroundWorker *bgw, const char *function_name)
{
	memset(bgw, 0, sizeof(*bgw));
	bgw->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	bgw->bgw_start_time = BgWorkerStart_RecoveryFinished;
	snprintf(bgw->bgw_library_name, BGW_MAXLEN, "jobq");
	snprintf(bgw->bgw_function_name, BGW_MAXLEN, "%s", function_name);
}

static void jobq_worker_xact_callback(XactEvent event, void *arg);
static void WorkerStartExecutors(void);
static void LauncherEnforceExecutorLimits(TimestampTz now);
static void jobq_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
								bool readOnlyTree, ProcessUtilityContext context,
								ParamListInfo params, QueryEnvironment *queryEnv,
								DestReceiver *dest, QueryCompletion *qc);

/*
 * Define the worker GUCs, and, when preloaded, reserve shared memory and
 * register the launcher (called from _PG_init).
 */
void
jobq_worker_init(void)
{
	BackgroundWorker bgw;

	DefineCustomStringVariable("jobq.databases",
							   "Databases the jobq background workers serve, comma-separated.",
							   "Empty: every database where the jobq extension is installed.",
							   &jobq_databases, "",
							   PGC_SIGHUP, GUC_LIST_INPUT, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.executors",
							"Executor processes per database that has job handlers.",
							"They run jobs of kinds registered with jobq.register_handler.",
							&jobq_executors, 2, 0, JOBQ_MAX_EXECUTORS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.naptime",
							"How long a jobq worker sleeps between rounds of reaping expired leases.",
							NULL, &jobq_naptime_ms, 1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.reap_batch",
							"Most expired leases a jobq worker reaps in one transaction.",
							NULL, &jobq_reap_batch, 500, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.prune_interval",
							"How often a jobq worker prunes finished jobs and expired idempotency keys.",
							NULL, &jobq_prune_interval_s, 60, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.prune_batch",
							"Most rows a jobq worker prunes in one transaction.",
							NULL, &jobq_prune_batch, 500, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.database_recheck_interval",
							"How often the jobq launcher looks again at a database where jobq was not installed.",
							"CREATE EXTENSION jobq wakes the launcher at once; this covers other ways in.",
							&jobq_database_recheck_s, 60, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);

	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = jobq_ProcessUtility;
	RegisterXactCallback(jobq_worker_xact_callback, NULL);

	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomIntVariable("jobq.max_databases",
							"Most databases the jobq launcher keeps track of.",
							NULL, &jobq_max_databases, 32, 1, 10000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = WorkerShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = WorkerShmemStartup;

	InitWorkerStruct(&bgw, "jobq_launcher_main");
	bgw.bgw_restart_time = 5;
	snprintf(bgw.bgw_name, BGW_MAXLEN, "jobq launcher");
	snprintf(bgw.bgw_type, BGW_MAXLEN, "jobq launcher");
	RegisterBackgroundWorker(&bgw);
}

/* ----------------------------------------------------------------
 * Launcher
 * ---------------------------------------------------------------- */

/* One database from pg_database. */
typedef struct JobqDbInfo
{
	Oid			dbid;
	char	   *name;
} JobqDbInfo;

/* The databases a worker may serve: allowing connections, in jobq.databases. */
static List *
LauncherDatabases(void)
{
	List	   *result = NIL;
	List	   *wanted = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	MemoryContext resultcxt = CurrentMemoryContext;
	char	   *rawlist;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();

	rawlist = pstrdup(jobq_databases ? jobq_databases : "");
	if (!SplitIdentifierString(rawlist, ',', &wanted))
		ereport(LOG,
				(errmsg("jobq: invalid list syntax in \"jobq.databases\"; serving every database")));

	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);
		MemoryContext old;
		JobqDbInfo *info;
		bool		listed = (wanted == NIL);
		ListCell   *lc;

		if (!db->datallowconn)
			continue;
		foreach(lc, wanted)
		{
			if (strcmp((char *) lfirst(lc), NameStr(db->datname)) == 0)
				listed = true;
		}
		if (!listed)
			continue;
		old = MemoryContextSwitchTo(resultcxt);
		info = palloc(sizeof(JobqDbInfo));
		info->dbid = db->oid;
		info->name = pstrdup(NameStr(db->datname));
		result = lappend(result, info);
		MemoryContextSwitchTo(old);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return result;
}

/* Is the worker of slot i running (or about to)?  Caller holds the lock. */
static bool
SlotRunning(int i)
{
	pid_t		pid;

	if (WorkerShared->slots[i].pid != 0)
		return true;
	if (launcher_handles[i] == NULL)
		return false;
	switch (GetBackgroundWorkerPid(launcher_handles[i], &pid))
	{
		case BGWH_STARTED:
		case BGWH_NOT_YET_STARTED:
			return true;
		default:
			pfree(launcher_handles[i]);
			launcher_handles[i] = NULL;
			return false;
	}
}

/* Start a worker for the database of slot i; false when no process slot. */
static bool
LauncherStartWorker(int i, const char *dbname)
{
	BackgroundWorker bgw;
	BackgroundWorkerHandle *handle;

	InitWorkerStruct(&bgw, "jobq_worker_main");
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	bgw.bgw_notify_pid = MyProcPid;
	bgw.bgw_main_arg = ObjectIdGetDatum(WorkerShared->slots[i].dbid);
	snprintf(bgw.bgw_name, BGW_MAXLEN, "jobq worker for database %s", dbname);
	snprintf(bgw.bgw_type, BGW_MAXLEN, "jobq worker");
	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		return false;
	launcher_handles[i] = handle;
	WorkerShared->slots[i].last_start = GetCurrentTimestamp();
	return true;
}

/* One look at pg_database: start missing workers, forget dropped databases. */
static void
LauncherCycle(void)
{
	List	   *dbs = LauncherDatabases();
	TimestampTz now = GetCurrentTimestamp();
	int			probes = 0;
	ListCell   *lc;

	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	WorkerShared->launcher_cycle_at = now;

	/* forget databases that are gone or no longer listed */
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		JobqDbSlot *slot = &WorkerShared->slots[i];
		bool		present = false;

		if (!OidIsValid(slot->dbid))
			continue;
		foreach(lc, dbs)
		{
			if (((JobqDbInfo *) lfirst(lc))->dbid == slot->dbid)
				present = true;
		}
		if (!present && !SlotRunning(i))
			memset(slot, 0, sizeof(*slot));
		else if (SlotRunning(i) && !slot->has_jobq)
			probes++;
	}

	foreach(lc, dbs)
	{
		JobqDbInfo *db = (JobqDbInfo *) lfirst(lc);
		int			free_slot = -1;
		int			i;
		JobqDbSlot *slot;

		for (i = 0; i < WorkerShared->nslots; i++)
		{
			if (WorkerShared->slots[i].dbid == db->dbid)
				break;
			if (free_slot < 0 && !OidIsValid(WorkerShared->slots[i].dbid))
				free_slot = i;
		}
		if (i == WorkerShared->nslots)
		{
			if (free_slot < 0)
			{
				ereport(LOG,
						(errmsg("jobq: no room to track database \"%s\"", db->name),
						 errhint("Increase jobq.max_databases or restrict jobq.databases.")));
				continue;
			}
			i = free_slot;
			memset(&WorkerShared->slots[i], 0, sizeof(JobqDbSlot));
			WorkerShared->slots[i].dbid = db->dbid;
		}
		slot = &WorkerShared->slots[i];

		if (SlotRunning(i) || slot->blocked_until > now)
			continue;
		if (slot->last_start != 0 &&
			!TimestampDifferenceExceeds(slot->last_start, now, JOBQ_RESTART_DELAY_MS))
			continue;
		/*
		 * A database found without jobq is looked at again after the recheck
		 * interval, or at once if CREATE EXTENSION committed after the look
		 * began.
		 */
		if (slot->no_extension_at != 0 && slot->no_extension_at > slot->wake_at &&
			!TimestampDifferenceExceeds(slot->no_extension_at, now,
										jobq_database_recheck_s * 1000))
			continue;
		if (!slot->has_jobq)
		{
			if (probes >= JOBQ_MAX_PROBES)
				continue;
			probes++;
		}
		if (!LauncherStartWorker(i, db->name))
		{
			ereport(LOG,
					(errmsg("jobq: could not start a worker for database \"%s\"", db->name),
					 errhint("Increase max_worker_processes.")));
			break;
		}
	}
	LauncherEnforceExecutorLimits(now);
	LWLockRelease(JobqWorkerLock);
	list_free_deep(dbs);
}

/* on_shmem_exit: the launcher is gone. */
static void
LauncherDetach(int code, Datum arg)
{
	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	WorkerShared->launcher_pid = 0;
	WorkerShared->launcher_latch = NULL;
	LWLockRelease(JobqWorkerLock);
}

/* Entry point of the launcher. */
void
jobq_launcher_main(Datum main_arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* a reload signalled before our handler was in place is lost: re-read */
	ProcessConfigFile(PGC_SIGHUP);
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("jobq launcher");

	launcher_handles = MemoryContextAllocZero(TopMemoryContext,
											  sizeof(BackgroundWorkerHandle *) * WorkerShared->nslots);
	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	WorkerShared->launcher_pid = MyProcPid;
	WorkerShared->launcher_latch = MyLatch;
	WorkerShared->launcher_started_at = GetCurrentTimestamp();
	LWLockRelease(JobqWorkerLock);
	on_shmem_exit(LauncherDetach, (Datum) 0);

	ereport(LOG, (errmsg("jobq launcher started")));
	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		LauncherCycle();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 JOBQ_LAUNCHER_NAPTIME_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* ----------------------------------------------------------------
 * Per-database worker
 * ---------------------------------------------------------------- */

static int	MySlot = -1;

/* on_shmem_exit: this worker is gone. */
static void
WorkerDetach(int code, Datum arg)
{
	if (MySlot < 0)
		return;
	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	if (WorkerShared->slots[MySlot].pid == MyProcPid)
	{
		WorkerShared->slots[MySlot].pid = 0;
		WorkerShared->slots[MySlot].latch = NULL;
	}
	if (WorkerShared->launcher_latch)
		SetLatch(WorkerShared->launcher_latch);
	LWLockRelease(JobqWorkerLock);
}

/* Is this database (still) one jobq.databases lets a worker serve? */
static bool
WorkerDatabaseListed(void)
{
	char	   *rawlist;
	List	   *wanted = NIL;
	char	   *dbname;
	ListCell   *lc;
	bool		listed = false;

	if (jobq_databases == NULL || jobq_databases[0] == '\0')
		return true;
	rawlist = pstrdup(jobq_databases);
	if (!SplitIdentifierString(rawlist, ',', &wanted))
		return true;			/* the launcher logs the bad syntax */
	StartTransactionCommand();
	dbname = get_database_name(MyDatabaseId);
	foreach(lc, wanted)
	{
		if (dbname != NULL && strcmp((char *) lfirst(lc), dbname) == 0)
			listed = true;
	}
	CommitTransactionCommand();
	return listed;
}

/* Find this database's slot and put our pid in it; false if it is taken. */
static bool
WorkerAttach(void)
{
	bool		ok = false;

	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		JobqDbSlot *slot = &WorkerShared->slots[i];

		if (slot->dbid != MyDatabaseId)
			continue;
		/* a DROP DATABASE or the like wants the database: go away */
		if (slot->pid == 0 && slot->blocked_until <= GetCurrentTimestamp())
		{
			slot->pid = MyProcPid;
			slot->latch = MyLatch;
			slot->started_at = GetCurrentTimestamp();
			slot->reaped = 0;
			slot->pruned = 0;
			slot->fired = 0;
			MySlot = i;
			ok = true;
		}
		break;
	}
	LWLockRelease(JobqWorkerLock);
	return ok;
}

/* Start a transaction for one step of work, with a snapshot for SPI. */
static void
WorkerBeginStep(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/*
 * Take a share lock on the jobq extension object for the rest of this
 * step, and tell whether the extension (still) exists.  DROP EXTENSION
 * locks that object before anything it drops, so with this lock taken
 * before any of jobq's tables, a step and a DROP EXTENSION queue up behind
 * each other instead of deadlocking.
 */
static bool
WorkerLockExtension(void)
{
	Oid			extoid = get_extension_oid("jobq", true);

	if (!OidIsValid(extoid))
		return false;
	LockDatabaseObject(ExtensionRelationId, extoid, 0, AccessShareLock);
	/* it may have been dropped while we waited */
	return get_extension_oid("jobq", true) == extoid;
}

/* Commit one step of work. */
static void
WorkerEndStep(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* The installed version of the jobq extension here, or NULL. */
static char *
ExtensionVersion(void)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	char	   *version = NULL;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("jobq"));
	rel = table_open(ExtensionRelationId, AccessShareLock);
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * The releases whose schema this library serves: the worker reaps, fires and
 * prunes in a database at any of them, so a database whose ALTER EXTENSION
 * jobq UPDATE is still due keeps its leases reaped.  A release is listed only
 * while the worker's statements work on its schema, which the upgrade test
 * checks for each one.
 */
static const char *const WorkerServedVersions[] = {"0.1.0", JOBQ_VERSION};

/* Does this library's worker serve a database at extension version v? */
static bool
WorkerServesVersion(const char *v)
{
	for (int i = 0; i < lengthof(WorkerServedVersions); i++)
		if (strcmp(v, WorkerServedVersions[i]) == 0)
			return true;
	return false;
}

/*
 * Is the extension installed here?  Checked in a transaction of its own
 * at the start of every round.  *usable is false when the installed
 * version is one this library does not serve (a release newer than the
 * library, or an old one whose schema the worker no longer knows): the
 * worker then waits, doing nothing, and says so once.
 */
static bool
WorkerExtensionPresent(bool *usable)
{
	static bool warned = false;
	bool		present;

	WorkerBeginStep("jobq: checking for the extension");
	present = OidIsValid(get_extension_oid("jobq", true));
	*usable = present;
	if (present)
	{
		char	   *version = ExtensionVersion();

		*usable = version != NULL && WorkerServesVersion(version);
		if (!*usable && !warned)
			ereport(WARNING,
					(errmsg("jobq worker idle in database \"%s\": extension version %s is installed, the library is %s",
							get_database_name(MyDatabaseId),
							version ? version : "(unknown)", JOBQ_VERSION),
					 errhint("Run ALTER EXTENSION jobq UPDATE in that database, or install the matching library.")));
		warned = !*usable;
	}
	WorkerEndStep();
	return present;
}

/*
 * One round of work; false when the extension is gone.  *next_due gets the
 * earliest next schedule fire (0: none).
 *
 * Every duty is split into units that fail alone (contain.c): a schedule,
 * the expired leases of a queue, the finished jobs of a queue, the expired
 * keys.  A unit's error is logged once and the round goes on; what a client
 * holds locked is skipped and comes back next round.  Nothing a tenant does
 * to its own queue or schedule stops or stalls the round for the others.
 */
static bool
WorkerRound(TimestampTz *last_prune, TimestampTz *next_due)
{
	static JobqIdSet failed_schedules = {NULL, 0, 0, NULL};
	int64		reaped = 0;
	int64		pruned = 0;
	int64		fired = 0;
	bool		more;
	TimestampTz round_start = GetCurrentTimestamp();
	TimestampTz now;
	bool		usable;
	bool		has_handlers = false;

	if (RecoveryInProgress() || !WorkerExtensionPresent(&usable))
		return false;
	if (!usable)
		return true;

	/* fire due schedules, batch by batch; a failing one waits a round */
	failed_schedules.cxt = TopMemoryContext;
	failed_schedules.n = 0;
	do
	{
		WorkerBeginStep("jobq: firing schedules");
		if (!WorkerLockExtension())
		{
			WorkerEndStep();
			return false;
		}
		SPI_connect();
		fired += jobq_fire_due_schedules(next_due, &failed_schedules, &more);
		if (!more)
			has_handlers = jobq_database_has_handlers();
		SPI_finish();
		WorkerEndStep();
		CHECK_FOR_INTERRUPTS();
	} while (more);
	/* still due though due at the start: locked by a client; try next round */
	if (*next_due != 0 && *next_due <= round_start)
		*next_due = 0;
	if (has_handlers)
		WorkerStartExecutors();

	/* reap expired leases, batch by batch */
	do
	{
		WorkerBeginStep("jobq: reaping expired leases");
		if (!WorkerLockExtension())
		{
			WorkerEndStep();
			return false;
		}
		SPI_connect();
		reaped += jobq_reap_expired(jobq_reap_batch, &more);
		SPI_finish();
		WorkerEndStep();
		CHECK_FOR_INTERRUPTS();
	} while (more);

	now = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(*last_prune, now, jobq_prune_interval_s * 1000))
	{
		*last_prune = now;
		do
		{
			WorkerBeginStep("jobq: pruning finished jobs");
			if (!WorkerLockExtension())
			{
				WorkerEndStep();
				return false;
			}
			SPI_connect();
			pruned += jobq_prune_finished(jobq_prune_batch, &more);
			SPI_finish();
			WorkerEndStep();
			CHECK_FOR_INTERRUPTS();
		} while (more);
	}

	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	WorkerShared->slots[MySlot].last_cycle_at = GetCurrentTimestamp();
	WorkerShared->slots[MySlot].reaped += reaped;
	WorkerShared->slots[MySlot].pruned += pruned;
	WorkerShared->slots[MySlot].fired += fired;
	WorkerShared->slots[MySlot].has_jobq = true;
	WorkerShared->slots[MySlot].no_extension_at = 0;
	LWLockRelease(JobqWorkerLock);
	return true;
}

/* Entry point of a per-database worker; main_arg is the database OID. */
void
jobq_worker_main(Datum main_arg)
{
	TimestampTz last_prune = 0;
	TimestampTz next_due = 0;
	long		sleep_ms;
	bool		usable;
	TimestampTz looked_at;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	/* a reload signalled before our handler was in place is lost: re-read */
	ProcessConfigFile(PGC_SIGHUP);
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(main_arg), InvalidOid, 0);
	pgstat_report_appname("jobq worker");

	if (!WorkerAttach())
		proc_exit(0);			/* another worker serves this database */
	on_shmem_exit(WorkerDetach, (Datum) 0);

	looked_at = GetCurrentTimestamp();
	if (!WorkerExtensionPresent(&usable))
	{
		LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
		WorkerShared->slots[MySlot].no_extension_at = looked_at;
		WorkerShared->slots[MySlot].has_jobq = false;
		LWLockRelease(JobqWorkerLock);
		proc_exit(0);
	}
	WorkerBeginStep("jobq: starting");
	ereport(LOG, (errmsg("jobq worker started for database \"%s\"",
						 get_database_name(MyDatabaseId))));
	WorkerEndStep();

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		looked_at = GetCurrentTimestamp();
		if (!WorkerDatabaseListed())
		{
			ereport(LOG, (errmsg("jobq worker exiting: the database is no longer in jobq.databases")));
			proc_exit(0);
		}
		if (!WorkerRound(&last_prune, &next_due))
		{
			LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
			WorkerShared->slots[MySlot].no_extension_at = looked_at;
			WorkerShared->slots[MySlot].has_jobq = false;
			LWLockRelease(JobqWorkerLock);
			ereport(LOG, (errmsg("jobq worker exiting: the extension is no longer installed")));
			proc_exit(0);
		}
		/* sleep until the next schedule is due, jobq.naptime at most */
		sleep_ms = jobq_naptime_ms;
		if (next_due != 0)
		{
			long		secs;
			int			usecs;

			TimestampDifference(GetCurrentTimestamp(), next_due, &secs, &usecs);
			if (secs * 1000 + usecs / 1000 + 1 < sleep_ms)
				sleep_ms = secs * 1000 + usecs / 1000 + 1;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* ----------------------------------------------------------------
 * Executors (their main loop is in executor.c)
 * ---------------------------------------------------------------- */

/* This worker's handles of the executors it started. */
static BackgroundWorkerHandle *executor_handles[JOBQ_MAX_EXECUTORS];

/* Start the executors of this database that are missing (in the worker). */
static void
WorkerStartExecutors(void)
{
	for (int i = 0; i < jobq_executors; i++)
	{
		BackgroundWorker bgw;
		pid_t		pid;
		bool		running;

		LWLockAcquire(JobqWorkerLock, LW_SHARED);
		running = WorkerShared->slots[MySlot].executor_pid[i] != 0;
		LWLockRelease(JobqWorkerLock);
		if (!running && executor_handles[i] != NULL)
		{
			BgwHandleStatus st = GetBackgroundWorkerPid(executor_handles[i], &pid);

			running = (st == BGWH_STARTED || st == BGWH_NOT_YET_STARTED);
			if (!running)
			{
				pfree(executor_handles[i]);
				executor_handles[i] = NULL;
			}
		}
		if (running)
			continue;

		InitWorkerStruct(&bgw, "jobq_executor_main");
		bgw.bgw_restart_time = BGW_NEVER_RESTART;
		bgw.bgw_main_arg = ObjectIdGetDatum(MyDatabaseId);
		memcpy(bgw.bgw_extra, &i, sizeof(int));
		snprintf(bgw.bgw_name, BGW_MAXLEN, "jobq executor %d for database %u", i, MyDatabaseId);
		snprintf(bgw.bgw_type, BGW_MAXLEN, "jobq executor");
		if (!RegisterDynamicBackgroundWorker(&bgw, &executor_handles[i]))
		{
			executor_handles[i] = NULL;
			ereport(LOG,
					(errmsg("jobq: could not start executor %d", i),
					 errhint("Increase max_worker_processes.")));
			break;
		}
	}
}

/* Forget what executor place index of slot runs; pid becomes its owner. */
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

	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		JobqDbSlot *slot = &WorkerShared->slots[i];

		if (slot->dbid == MyDatabaseId && slot->executor_pid[index] == MyProcPid)
			ExecutorSlotClear(slot, index, 0);
	}
	LWLockRelease(JobqWorkerLock);
}

static int	MyExecutorIndex = -1;

/* An executor takes place index of its database's slot; false if taken. */
bool
jobq_executor_attach(int index)
{
	bool		ok = false;

	if (index < 0 || index >= JOBQ_MAX_EXECUTORS)
		return false;
	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		JobqDbSlot *slot = &WorkerShared->slots[i];

		if (slot->dbid != MyDatabaseId)
			continue;
		if (slot->executor_pid[index] == 0)
		{
			ExecutorSlotClear(slot, index, MyProcPid);
			ok = true;
		}
		break;
	}
	LWLockRelease(JobqWorkerLock);
	if (ok)
	{
		MyExecutorIndex = index;
		on_shmem_exit(ExecutorDetach, Int32GetDatum(index));
	}
	return ok;
}

/* This executor's slot (JobqWorkerLock held), or NULL. */
static JobqDbSlot *
ExecutorSlot(void)
{
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		if (WorkerShared->slots[i].dbid == MyDatabaseId &&
			WorkerShared->slots[i].executor_pid[MyExecutorIndex] == MyProcPid)
			return &WorkerShared->slots[i];
	}
	return NULL;
}

/*
 * Publish the job this executor runs now (0: none) and the time its lease
 * ends, for jobq.cancel and for the launcher's time limit.
 */
void
jobq_executor_set_job(int64 job_id, TimestampTz deadline)
{
	JobqDbSlot *slot;

	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	slot = ExecutorSlot();
	if (slot != NULL)
	{
		slot->executor_job[MyExecutorIndex] = job_id;
		slot->executor_deadline[MyExecutorIndex] = job_id != 0 ? deadline : 0;
		slot->executor_cancel_at[MyExecutorIndex] = 0;
		slot->executor_terminated[MyExecutorIndex] = false;
	}
	LWLockRelease(JobqWorkerLock);
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
jobq_executor_take_share(Oid role, int nroles)
{
	JobqDbSlot *slot;
	bool		ok = true;

	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
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
	LWLockRelease(JobqWorkerLock);
	return ok;
}

/*
 * Launcher: terminate the executors whose handler runs past its job's lease
 * or past a jobq.cancel of its job by more than JOBQ_EXECUTOR_GRACE_MS
 * (JobqWorkerLock held exclusively).  The handler was interrupted at its
 * deadline (statement timeout, or the cancel's SIGINT) and did not stop: its
 * transaction dies with the process, so none of its effects remain; the job
 * stays cancelled, or is reaped as an expired lease.  The database's worker
 * starts a new executor.
 */
static void
LauncherEnforceExecutorLimits(TimestampTz now)
{
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		JobqDbSlot *slot = &WorkerShared->slots[i];

		if (!OidIsValid(slot->dbid))
			continue;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
		{
			TimestampTz limit = 0;
			const char *why;

			if (slot->executor_pid[e] == 0 || slot->executor_job[e] == 0 ||
				slot->executor_terminated[e])
				continue;
			if (slot->executor_cancel_at[e] != 0)
			{
				limit = slot->executor_cancel_at[e];
				why = "was cancelled";
			}
			else
			{
				limit = slot->executor_deadline[e];
				why = "ran past its lease";
			}
			if (limit == 0 ||
				!TimestampDifferenceExceeds(limit, now, JOBQ_EXECUTOR_GRACE_MS))
				continue;
			ereport(LOG,
					(errmsg("jobq: terminating executor %d (pid %d) of database %u: its job %lld %s and the handler did not stop",
							e, (int) slot->executor_pid[e], slot->dbid,
							(long long) slot->executor_job[e], why)));
			kill(slot->executor_pid[e], SIGTERM);
			slot->executor_terminated[e] = true;
		}
	}
}

/* Wake the executors of database dbid (a job they may run became ready). */
void
jobq_worker_wake_executors(Oid dbid)
{
	if (WorkerShared == NULL)
		return;
	LWLockAcquire(JobqWorkerLock, LW_SHARED);
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		if (WorkerShared->slots[i].dbid != dbid)
			continue;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
			if (WorkerShared->slots[i].executor_latch[e] != NULL)
				SetLatch(WorkerShared->slots[i].executor_latch[e]);
	}
	LWLockRelease(JobqWorkerLock);
}

/*
 * Interrupt the executor of this database that runs job_id, if any; the
 * launcher terminates it if the handler does not stop.
 */
void
jobq_worker_interrupt_job(int64 job_id)
{
	if (WorkerShared == NULL)
		return;
	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		if (WorkerShared->slots[i].dbid != MyDatabaseId)
			continue;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
			if (WorkerShared->slots[i].executor_job[e] == job_id &&
				WorkerShared->slots[i].executor_pid[e] != 0)
			{
				kill(WorkerShared->slots[i].executor_pid[e], SIGINT);
				if (WorkerShared->slots[i].executor_cancel_at[e] == 0)
					WorkerShared->slots[i].executor_cancel_at[e] = GetCurrentTimestamp();
			}
	}
	LWLockRelease(JobqWorkerLock);
}

/* ----------------------------------------------------------------
 * Hooks in ordinary backends
 * ---------------------------------------------------------------- */

/*
 * Keep the launcher away from a database for a while and terminate its
 * worker, so a command that needs the database alone can have it.
 */
static void
BlockDatabase(Oid dbid, bool block)
{
	if (WorkerShared == NULL || !OidIsValid(dbid))
		return;
	LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		JobqDbSlot *slot = &WorkerShared->slots[i];

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
	LWLockRelease(JobqWorkerLock);
}

/* The database a utility statement needs to itself, if any. */
static Oid
DatabaseNeededAlone(Node *parsetree)
{
	if (IsA(parsetree, DropdbStmt))
		return get_database_oid(((DropdbStmt *) parsetree)->dbname, true);
	if (IsA(parsetree, RenameStmt) &&
		((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
		return get_database_oid(((RenameStmt *) parsetree)->subname, true);
	if (IsA(parsetree, CreatedbStmt))
	{
		const char *template = "template1";
		ListCell   *lc;

		foreach(lc, ((CreatedbStmt *) parsetree)->options)
		{
			DefElem    *opt = (DefElem *) lfirst(lc);

			if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
				template = defGetString(opt);
		}
		return get_database_oid(template, true);
	}
	if (IsA(parsetree, AlterDatabaseStmt))
	{
		ListCell   *lc;

		foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
		{
			if (strcmp(((DefElem *) lfirst(lc))->defname, "tablespace") == 0)
				return get_database_oid(((AlterDatabaseStmt *) parsetree)->dbname, true);
		}
	}
	return InvalidOid;
}

/*
 * ProcessUtility hook: make way for commands that need a database alone,
 * and note CREATE EXTENSION jobq so the launcher is woken at commit.
 */
static void
jobq_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
					bool readOnlyTree, ProcessUtilityContext context,
					ParamListInfo params, QueryEnvironment *queryEnv,
					DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	Oid			alone = DatabaseNeededAlone(parsetree);

	if (IsA(parsetree, CreateExtensionStmt) &&
		strcmp(((CreateExtensionStmt *) parsetree)->extname, "jobq") == 0)
		wake_launcher_at_commit = true;

	BlockDatabase(alone, true);
	PG_TRY();
	{
		if (prev_ProcessUtility)
			prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		BlockDatabase(alone, false);
	}
	PG_END_TRY();
}

/* This transaction changed a schedule: wake this database's worker at commit. */
void
jobq_worker_wake_at_commit(void)
{
	wake_worker_at_commit = true;
}

/* Set the latch of this database's worker, if one runs. */
static void
WakeDatabaseWorker(void)
{
	if (WorkerShared == NULL)
		return;
	LWLockAcquire(JobqWorkerLock, LW_SHARED);
	for (int i = 0; i < WorkerShared->nslots; i++)
	{
		if (WorkerShared->slots[i].dbid == MyDatabaseId &&
			WorkerShared->slots[i].latch != NULL)
			SetLatch(WorkerShared->slots[i].latch);
	}
	LWLockRelease(JobqWorkerLock);
}

/*
 * At commit: after CREATE EXTENSION jobq, have the launcher look here now;
 * after a schedule changed, wake this database's worker.
 */
static void
jobq_worker_xact_callback(XactEvent event, void *arg)
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
	if (event == XACT_EVENT_COMMIT && WorkerShared != NULL)
	{
		LWLockAcquire(JobqWorkerLock, LW_EXCLUSIVE);
		for (int i = 0; i < WorkerShared->nslots; i++)
		{
			if (WorkerShared->slots[i].dbid == MyDatabaseId)
			{
				WorkerShared->slots[i].wake_at = GetCurrentTimestamp();
				WorkerShared->slots[i].last_start = 0;
			}
		}
		if (WorkerShared->launcher_latch)
			SetLatch(WorkerShared->launcher_latch);
		LWLockRelease(JobqWorkerLock);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
		wake_launcher_at_commit = false;
}

/* ----------------------------------------------------------------
 * jobq.workers
 * ---------------------------------------------------------------- */

/*
 * jobq.worker_status() -> one row for the launcher and one per database
 * worker: pid, database, role, started_at, last_run_at, reaped, pruned,
 * fired
 */
Datum
jobq_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[8];
	bool		nulls[8];
	JobqDbSlot *copy;
	int			nslots;
	pid_t		launcher_pid;
	TimestampTz launcher_started,
				launcher_cycle;

	InitMaterializedSRF(fcinfo, 0);
	if (WorkerShared == NULL)
		return (Datum) 0;

	LWLockAcquire(JobqWorkerLock, LW_SHARED);
	nslots = WorkerShared->nslots;
	copy = palloc(sizeof(JobqDbSlot) * nslots);
	memcpy(copy, WorkerShared->slots, sizeof(JobqDbSlot) * nslots);
	launcher_pid = WorkerShared->launcher_pid;
	launcher_started = WorkerShared->launcher_started_at;
	launcher_cycle = WorkerShared->launcher_cycle_at;
	LWLockRelease(JobqWorkerLock);

	if (launcher_pid != 0)
	{
		memset(nulls, false, sizeof(nulls));
		values[0] = Int32GetDatum(launcher_pid);
		nulls[1] = true;
		values[2] = CStringGetTextDatum("launcher");
		values[3] = TimestampTzGetDatum(launcher_started);
		values[4] = TimestampTzGetDatum(launcher_cycle);
		nulls[5] = nulls[6] = nulls[7] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	for (int i = 0; i < nslots; i++)
	{
		char	   *dbname;

		if (copy[i].pid == 0)
			continue;
		memset(nulls, false, sizeof(nulls));
		dbname = get_database_name(copy[i].dbid);
		values[0] = Int32GetDatum(copy[i].pid);
		values[1] = dbname ? CStringGetTextDatum(dbname) : (Datum) 0;
		nulls[1] = dbname == NULL;
		values[2] = CStringGetTextDatum("worker");
		values[3] = TimestampTzGetDatum(copy[i].started_at);
		values[4] = TimestampTzGetDatum(copy[i].last_cycle_at);
		nulls[4] = copy[i].last_cycle_at == 0;
		values[5] = Int64GetDatum(copy[i].reaped);
		values[6] = Int64GetDatum(copy[i].pruned);
		values[7] = Int64GetDatum(copy[i].fired);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
		{
			if (copy[i].executor_pid[e] == 0)
				continue;
			memset(nulls, true, sizeof(nulls));
			values[0] = Int32GetDatum(copy[i].executor_pid[e]);
			nulls[0] = false;
			values[1] = dbname ? CStringGetTextDatum(dbname) : (Datum) 0;
			nulls[1] = dbname == NULL;
			values[2] = CStringGetTextDatum("executor");
			nulls[2] = false;
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
