/*-------------------------------------------------------------------------
 *
 * bgw/launcher.c
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
 * A worker loops: fire due schedules (ops/scheduler.c), reap expired leases
 * (ops/reaper.c), prune finished jobs every jobq.prune_interval
 * (ops/retention.c), then sleep on its latch until the next schedule is due,
 * jobq.naptime at most; a transaction that changes a schedule sets the latch
 * at commit.  Every step is a transaction of its own, so no snapshot is held
 * while it sleeps.  Inside a step each schedule and each queue is a unit that
 * fails alone (contain.c), and nothing a client holds locked makes the worker
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
#include "storage/fd.h"
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

#include "guc.h"
#include "bgw/launcher.h"
#include "shmem/shm_bgw.h"


/*
 * How long an executor may run a handler past its job's lease, or past a
 * jobq.cancel of its job, before the launcher terminates it: a handler
 * that catches query_canceled cannot keep an executor.
 */
#define JOBQ_EXECUTOR_GRACE_MS	5000

/* Least time between two starts of a database's own worker. */
#define JOBQ_RESTART_DELAY_MS	5000
/* A database due for longer than this without a worker gets a WARNING. */
#define JOBQ_LATE_MS			10000
/* How long the launcher sleeps between looks at pg_database. */
#define JOBQ_LAUNCHER_NAPTIME_MS	1000

/* The launcher's handles of the workers it started, by slot. */
static BackgroundWorkerHandle **launcher_handles = NULL;

PGDLLEXPORT void jobq_launcher_main(Datum main_arg);

static void LauncherEnforceExecutorLimits(TimestampTz now);
static char *StateText(void);
static void StateSave(char *text);

/*
 * Register the launcher (from _PG_init, when preloaded).  Not in a server
 * that pg_upgrade started (binary-upgrade mode): a worker there would fire
 * schedules and reap leases in the old cluster after pg_upgrade read its
 * control file, and the new cluster would inherit rows whose transaction
 * and multixact ids it never assigned.
 */
void
jobq_launcher_register(void)
{
	BackgroundWorker bgw;

	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
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
	int			slot;			/* its slot in JobqBgw, -1: none */
} JobqDbInfo;

/* Warned that a database could not be tracked / a worker not started. */
static bool db_room_warned = false;
static bool start_failed_warned = false;

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

/*
 * Start a worker for the database of slot i, for one pass or to stay; false
 * when no process slot is free.
 */
static bool
LauncherStartWorker(int i, const char *dbname, bool one_pass)
{
	BackgroundWorker bgw;
	BackgroundWorkerHandle *handle;

	jobq_bgw_init_struct(&bgw, "jobq_worker_main");
	bgw.bgw_restart_time = BGW_NEVER_RESTART;
	bgw.bgw_notify_pid = MyProcPid;
	bgw.bgw_main_arg = ObjectIdGetDatum(JobqBgw->slots[i].dbid);
	memcpy(bgw.bgw_extra, &one_pass, sizeof(bool));
	snprintf(bgw.bgw_name, BGW_MAXLEN, "jobq worker for database %s", dbname);
	snprintf(bgw.bgw_type, BGW_MAXLEN, "jobq worker");
	if (!RegisterDynamicBackgroundWorker(&bgw, &handle))
		return false;
	launcher_handles[i] = handle;
	JobqBgw->slots[i].last_start = GetCurrentTimestamp();
	return true;
}

/* Did a CREATE EXTENSION jobq commit there since a worker found none? */
static bool
SlotCreated(JobqDbSlot *slot)
{
	return !slot->has_jobq && slot->no_extension_at != 0 &&
		slot->wake_at > slot->no_extension_at;
}

/* Has the database jobq, or may it have (not probed yet, or created since)? */
static bool
SlotMayHaveJobq(JobqDbSlot *slot)
{
	return slot->has_jobq || slot->no_extension_at == 0 || SlotCreated(slot);
}

/*
 * Does the database of slot i want a worker now?  Its own worker, when it
 * has none; in the shared pool, a pass when something is due: its next
 * schedule fire, lease expiry or prune (next_due_at), a lease a claim took
 * since (lease_due), or a poke (a schedule changed, handler jobs became
 * ready) after its last worker started.  A database not known to have jobq
 * is probed, unless a probe found none lately and no CREATE EXTENSION
 * committed since.
 */
static bool
SlotWants(JobqDbSlot *slot, TimestampTz now, bool pool, TimestampTz *due)
{
	uint64		lease = pg_atomic_read_u64(&slot->lease_due);

	*due = now;
	if (slot->blocked_until > now)
		return false;
	if (slot->no_extension_at != 0 && slot->no_extension_at > slot->wake_at &&
		!TimestampDifferenceExceeds(slot->no_extension_at, now,
									jobq_database_recheck_s * 1000))
		return false;
	if (!slot->has_jobq || !pool)
		return true;
	if (slot->poke_at != 0 && slot->poke_at >= slot->started_at)
	{
		*due = slot->poke_at;
		return true;
	}
	*due = slot->next_due_at;
	if (lease != 0 && (TimestampTz) lease < *due)
		*due = (TimestampTz) lease;
	return *due <= now;
}

/*
 * Warn once when a database has been due for JOBQ_LATE_MS without being
 * served, and say so once when it is served again.
 */
static void
LauncherNoteLate(JobqDbSlot *slot, const char *dbname, bool waiting,
				 TimestampTz due, TimestampTz now)
{
	if (!waiting)
	{
		if (slot->late_warned)
			ereport(LOG,
					(errmsg("jobq: database \"%s\" is served again", dbname)));
		slot->late_warned = false;
		slot->late_since = 0;
		return;
	}
	if (slot->late_since == 0)
		slot->late_since = due;
	if (!slot->late_warned &&
		TimestampDifferenceExceeds(slot->late_since, now, JOBQ_LATE_MS))
	{
		ereport(WARNING,
				(errmsg("jobq: database \"%s\" has waited more than %d s for a jobq worker",
						dbname, JOBQ_LATE_MS / 1000),
				 errdetail("jobq.max_workers is %d and %d jobq processes run.",
						   jobq_max_workers, jobq_bgw_processes()),
				 errhint("Raise jobq.max_workers, and max_worker_processes with it.")));
		slot->late_warned = true;
	}
}

/* A database the launcher may start a worker for now. */
typedef struct JobqCandidate
{
	int			slot;
	const char *name;
	TimestampTz served;			/* when a worker last served it */
	bool		unknown;		/* not known to have jobq: probe it first */
}			JobqCandidate;

/* Probes first, then the database served longest ago. */
static int
CandidateCompare(const void *a, const void *b)
{
	const		JobqCandidate *x = (const JobqCandidate *) a;
	const		JobqCandidate *y = (const JobqCandidate *) b;

	if (x->unknown != y->unknown)
		return x->unknown ? -1 : 1;
	if (x->served != y->served)
		return x->served < y->served ? -1 : 1;
	return x->slot - y->slot;
}

/*
 * One look at pg_database: forget dropped databases, then start workers
 * within jobq.max_workers.  While the databases with jobq (and those not
 * yet probed) fit, each has a worker of its own.  When they outnumber it,
 * the pool serves them in turn: a worker serves a database for one pass and
 * exits, and the databases that are due go first, probes and the one
 * served longest ago ahead, so none waits behind another.
 */
static void
LauncherCycle(void)
{
	List	   *dbs = LauncherDatabases();
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;
	int			nserved = 0;
	int			exec_need;
	int			nprocs;
	int			ncand = 0;
	bool		pool;
	JobqCandidate *cand;
	char	   *text;

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
			jobq_bgw_slot_reset(slot, InvalidOid);
	}

	/* a slot for every database; count those that have (or may have) jobq */
	foreach(lc, dbs)
	{
		JobqDbInfo *db = (JobqDbInfo *) lfirst(lc);
		int			free_slot = -1;
		int			i;

		db->slot = -1;
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
				if (!db_room_warned)
					ereport(WARNING,
							(errmsg("jobq: no room to track database \"%s\"", db->name),
							 errhint("Increase jobq.max_databases or restrict jobq.databases.")));
				db_room_warned = true;
				continue;
			}
			i = free_slot;
			jobq_bgw_slot_reset(&JobqBgw->slots[i], db->dbid);
		}
		db->slot = i;
		if (SlotMayHaveJobq(&JobqBgw->slots[i]))
			nserved++;
	}

	/*
	 * Workers of their own while they fit with room for an executor when one
	 * runs or is wanted; else the shared pool, whose workers leave after a
	 * pass, so that executors get places and no database waits behind them.
	 */
	exec_need = 0;
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (!OidIsValid(slot->dbid))
			continue;
		if (slot->executors_wanted)
			exec_need = 1;
		for (int e = 0; e < JOBQ_MAX_EXECUTORS; e++)
			if (slot->executor_pid[e] != 0)
				exec_need = 1;
	}
	pool = nserved + exec_need > jobq_max_workers;
	if (pool && !JobqBgw->pool_mode)
	{
		/* workers of their own leave after their round: wake them for it */
		for (int i = 0; i < JobqBgw->nslots; i++)
			if (JobqBgw->slots[i].latch != NULL)
				SetLatch(JobqBgw->slots[i].latch);
	}
	JobqBgw->pool_mode = pool;

	/* the processes that run, and the workers started that have not attached */
	nprocs = jobq_bgw_processes();
	for (int i = 0; i < JobqBgw->nslots; i++)
		if (OidIsValid(JobqBgw->slots[i].dbid) && JobqBgw->slots[i].pid == 0 && SlotRunning(i))
			nprocs++;

	cand = palloc(sizeof(JobqCandidate) * Max(list_length(dbs), 1));
	foreach(lc, dbs)
	{
		JobqDbInfo *db = (JobqDbInfo *) lfirst(lc);
		JobqDbSlot *slot;
		TimestampTz due;
		bool		wants;

		if (db->slot < 0)
			continue;
		slot = &JobqBgw->slots[db->slot];
		if (SlotRunning(db->slot))
		{
			LauncherNoteLate(slot, db->name, false, 0, now);
			continue;
		}
		wants = SlotWants(slot, now, pool, &due);
		if (slot->has_jobq || SlotCreated(slot))
			LauncherNoteLate(slot, db->name, wants, SlotCreated(slot) ? slot->wake_at : due, now);
		if (!wants)
			continue;
		/* a worker that keeps failing is started again at this pace */
		if (slot->last_start != 0 &&
			!TimestampDifferenceExceeds(slot->last_start, now,
										pool ? jobq_naptime_ms : JOBQ_RESTART_DELAY_MS))
			continue;
		cand[ncand].slot = db->slot;
		cand[ncand].name = db->name;
		cand[ncand].served = slot->last_cycle_at;
		cand[ncand].unknown = !slot->has_jobq;
		ncand++;
	}
	qsort(cand, ncand, sizeof(JobqCandidate), CandidateCompare);

	/*
	 * With workers of their own, executors give their places to databases
	 * that wait (shmem/shm_bgw.c); in the pool they leave one place to the
	 * passes
	 */
	JobqBgw->dbs_waiting = !pool && ncand > jobq_max_workers - nprocs;
	for (int c = 0; c < ncand && nprocs < jobq_max_workers; c++)
	{
		if (!LauncherStartWorker(cand[c].slot, cand[c].name, pool))
		{
			if (!start_failed_warned)
				ereport(WARNING,
						(errmsg("jobq: could not start a worker for database \"%s\": no background worker slot is free",
								cand[c].name),
						 errhint("Raise max_worker_processes, or lower jobq.max_workers to leave room for other background workers.")));
			start_failed_warned = true;
			break;
		}
		start_failed_warned = false;
		nprocs++;
	}
	pfree(cand);
	LauncherEnforceExecutorLimits(now);
	text = StateText();

	LWLockRelease(JobqBgwLock);
	StateSave(text);
	list_free_deep(dbs);
}

/* ----------------------------------------------------------------
 * What the launcher knows, kept across restarts
 * ---------------------------------------------------------------- */

/*
 * The databases the launcher knows, with whether they have jobq, in the
 * data directory (as autoprewarm keeps its block list): after a restart or
 * a crash the launcher serves the databases with jobq at once and leaves
 * those without it alone until jobq.database_recheck_interval (a CREATE
 * EXTENSION jobq wakes it anyway), instead of probing every database.  A
 * database that is new, or missing from the file, is probed as before.
 * Written (through a temporary file and a durable rename) when what it
 * would say changes.
 */
#define JOBQ_STATE_FILE		"pg_jobq.state"

static char *state_written = NULL;

/* The file's text for what the slots know now (JobqBgwLock held). */
static char *
StateText(void)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (!OidIsValid(slot->dbid))
			continue;
		if (slot->has_jobq)
			appendStringInfo(&buf, "%u 1\n", slot->dbid);
		else if (slot->no_extension_at != 0 && !SlotCreated(slot))
			appendStringInfo(&buf, "%u 0\n", slot->dbid);
	}
	return buf.data;
}

/* Write text to the state file unless it says that already. */
static void
StateSave(char *text)
{
	FILE	   *f;

	if (state_written != NULL && strcmp(state_written, text) == 0)
	{
		pfree(text);
		return;
	}
	f = AllocateFile(JOBQ_STATE_FILE ".tmp", PG_BINARY_W);
	if (f == NULL || fputs(text, f) < 0 || FreeFile(f) != 0 ||
		durable_rename(JOBQ_STATE_FILE ".tmp", JOBQ_STATE_FILE, LOG) != 0)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("jobq: could not write file \"%s\": %m", JOBQ_STATE_FILE)));
		pfree(text);
		return;
	}
	if (state_written != NULL)
		pfree(state_written);
	state_written = MemoryContextStrdup(TopMemoryContext, text);
	pfree(text);
}

/*
 * Fill the empty slots from the state file (at launcher start, when shared
 * memory is new); log what the file said.
 */
static void
StateLoad(void)
{
	FILE	   *f;
	unsigned int dbid;
	int			has;
	int			with = 0,
				without = 0;
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < JobqBgw->nslots; i++)
		if (OidIsValid(JobqBgw->slots[i].dbid))
			return;				/* the launcher restarted, shared memory did
								 * not */
	f = AllocateFile(JOBQ_STATE_FILE, PG_BINARY_R);
	if (f == NULL)
		return;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	for (int i = 0; i < JobqBgw->nslots && fscanf(f, "%u %d", &dbid, &has) == 2; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		jobq_bgw_slot_reset(slot, (Oid) dbid);
		if (has)
		{
			slot->has_jobq = true;
			with++;
		}
		else
		{
			slot->no_extension_at = now;
			without++;
		}
	}
	LWLockRelease(JobqBgwLock);
	FreeFile(f);
	ereport(LOG,
			(errmsg("jobq launcher: %d databases with jobq and %d without, from file \"%s\"",
					with, without, JOBQ_STATE_FILE)));
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
	jobq_bgw_connect(InvalidOid, "jobq launcher");

	launcher_handles = MemoryContextAllocZero(TopMemoryContext,
											  sizeof(BackgroundWorkerHandle *) * JobqBgw->nslots);
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->launcher_pid = MyProcPid;
	JobqBgw->launcher_latch = MyLatch;
	JobqBgw->launcher_started_at = GetCurrentTimestamp();
	LWLockRelease(JobqBgwLock);
	on_shmem_exit(LauncherDetach, (Datum) 0);

	ereport(LOG, (errmsg("jobq launcher started")));
	StateLoad();
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
