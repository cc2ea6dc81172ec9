/*-------------------------------------------------------------------------
 *
 * bgw_launcher.c
 *	  The jobq launcher, which starts a worker for each database.
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
 * Locking: JobqBgwLock (an LWLock) guards all of JobqBgwShared.
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

#include "bgw_launcher.h"
#include "guc.h"
#include "shm_bgw.h"


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

/* The launcher's handles of the workers it started, by slot. */
static BackgroundWorkerHandle **launcher_handles = NULL;

PGDLLEXPORT void jobq_launcher_main(Datum main_arg);

static void LauncherEnforceExecutorLimits(TimestampTz now);

/* Register the launcher (from _PG_init, when preloaded). */
void
jobq_launcher_register(void)
{
	BackgroundWorker bgw;

	if (!process_shared_preload_libraries_in_progress)
		return;
	jobq_bgw_init_struct(&bgw, "jobq_launcher_main");
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

	if (JobqBgw->slots[i].pid != 0)
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

	jobq_bgw_init_struct(&bgw, "jobq_worker_main");
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	bgw.bgw_notify_pid = MyProcPid;
	bgw.bgw_main_arg = ObjectIdGetDatum(JobqBgw->slots[i].dbid);
	snprintf(bgw.bgw_name, BGW_MAXLEN, "jobq worker for database %s", dbname);
	snprintf(bgw.bgw_type, BGW_MAXLEN, "jobq worker");
	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		return false;
	launcher_handles[i] = handle;
	JobqBgw->slots[i].last_start = GetCurrentTimestamp();
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

	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->launcher_cycle_at = now;

	/* forget databases that are gone or no longer listed */
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];
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

		for (i = 0; i < JobqBgw->nslots; i++)
		{
			if (JobqBgw->slots[i].dbid == db->dbid)
				break;
			if (free_slot < 0 && !OidIsValid(JobqBgw->slots[i].dbid))
				free_slot = i;
		}
		if (i == JobqBgw->nslots)
		{
			if (free_slot < 0)
			{
				ereport(LOG,
						(errmsg("jobq: no room to track database \"%s\"", db->name),
						 errhint("Increase jobq.max_databases or restrict jobq.databases.")));
				continue;
			}
			i = free_slot;
			memset(&JobqBgw->slots[i], 0, sizeof(JobqDbSlot));
			JobqBgw->slots[i].dbid = db->dbid;
		}
		slot = &JobqBgw->slots[i];

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
	LWLockRelease(JobqBgwLock);
	list_free_deep(dbs);
}

/* on_shmem_exit: the launcher is gone. */
static void
LauncherDetach(int code, Datum arg)
{
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->launcher_pid = 0;
	JobqBgw->launcher_latch = NULL;
	LWLockRelease(JobqBgwLock);
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
											  sizeof(BackgroundWorkerHandle *) * JobqBgw->nslots);
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->launcher_pid = MyProcPid;
	JobqBgw->launcher_latch = MyLatch;
	JobqBgw->launcher_started_at = GetCurrentTimestamp();
	LWLockRelease(JobqBgwLock);
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

/*
 * Launcher: terminate the executors whose handler runs past its job's lease
 * or past a jobq.cancel of its job by more than JOBQ_EXECUTOR_GRACE_MS
 * (JobqBgwLock held exclusively).  The handler was interrupted at its
 * deadline (statement timeout, or the cancel's SIGINT) and did not stop: its
 * transaction dies with the process, so none of its effects remain; the job
 * stays cancelled, or is reaped as an expired lease.  The database's worker
 * starts a new executor.
 */
static void
LauncherEnforceExecutorLimits(TimestampTz now)
{
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (!OidIsValid(slot->dbid))
			continue;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
		{
			bool		cancelled = slot->executor_cancel_at[e] != 0;
			TimestampTz limit;

			if (slot->executor_pid[e] == 0 || slot->executor_job[e] == 0 ||
				slot->executor_terminated[e])
				continue;
			limit = cancelled ? slot->executor_cancel_at[e] : slot->executor_deadline[e];
			if (limit == 0 ||
				!TimestampDifferenceExceeds(limit, now, JOBQ_EXECUTOR_GRACE_MS))
				continue;
			if (cancelled)
				ereport(LOG,
						(errmsg("jobq: terminating executor %d (pid %d) of database %u: its job %lld was cancelled and the handler did not stop",
								e, (int) slot->executor_pid[e], slot->dbid,
								(long long) slot->executor_job[e])));
			else
				ereport(LOG,
						(errmsg("jobq: terminating executor %d (pid %d) of database %u: its job %lld ran past its lease and the handler did not stop",
								e, (int) slot->executor_pid[e], slot->dbid,
								(long long) slot->executor_job[e])));
			kill(slot->executor_pid[e], SIGTERM);
			slot->executor_terminated[e] = true;
		}
	}
}
