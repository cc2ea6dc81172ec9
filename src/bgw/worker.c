/*-------------------------------------------------------------------------
 *
 * bgw/worker.c
 *	  The per-database jobq worker.
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
#include "executor/spi.h"

#include "catalog.h"
#include "args.h"
#include "contain.h"
#include "guc.h"
#include "spi.h"
#include "bgw/handler_proc.h"
#include "bgw/worker.h"
#include "ops/reaper.h"
#include "ops/retention.h"
#include "ops/scheduler.h"
#include "shmem/shm_bgw.h"
#include "shmem/shm_queue.h"
#include "workflow/settle.h"

PGDLLEXPORT void jobq_worker_main(Datum main_arg);

static void WorkerStartExecutors(void);

/* ----------------------------------------------------------------
 * Per-database worker
 * ---------------------------------------------------------------- */

static int	MySlot = -1;

/*
 * The name under which a pass that could not take a lock is logged, with
 * its database's (made by the first look for the extension).
 */
static char *pass_unit = NULL;

/* The failing units of this database's work, kept in its slot. */
static JobqUnitNoted
WorkerUnitFailed(uint64 unit, int sqlerrcode)
{
	return jobq_bgw_unit_failed(MySlot, unit, sqlerrcode);
}

static bool
WorkerUnitWorks(uint64 unit)
{
	return jobq_bgw_unit_works(MySlot, unit);
}

static bool
WorkerUnitFailing(uint64 unit)
{
	return jobq_bgw_unit_failing(MySlot, unit);
}

static const JobqUnitMemory WorkerUnitMemory = {
	WorkerUnitFailed, WorkerUnitWorks, WorkerUnitFailing
};

/* on_shmem_exit: this worker is gone. */
static void
WorkerDetach(int code, Datum arg)
{
	if (MySlot < 0)
		return;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	if (JobqBgw->slots[MySlot].pid == MyProcPid)
	{
		JobqBgw->slots[MySlot].pid = 0;
		JobqBgw->slots[MySlot].latch = NULL;
	}
	if (JobqBgw->launcher_latch)
		SetLatch(JobqBgw->launcher_latch);
	LWLockRelease(JobqBgwLock);
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
WorkerAttach(bool one_pass)
{
	bool		ok = false;

	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	for (int i = 0; i < JobqBgw->nslots; i++)
	{
		JobqDbSlot *slot = &JobqBgw->slots[i];

		if (slot->dbid != MyDatabaseId)
			continue;
		/* a DROP DATABASE or the like wants the database: go away */
		if (slot->pid == 0 && slot->blocked_until <= GetCurrentTimestamp())
		{
			slot->pid = MyProcPid;
			slot->latch = MyLatch;
			slot->started_at = GetCurrentTimestamp();
			slot->pass_worker = one_pass;
			/* a worker of its own counts from its start; passes add up */
			if (!one_pass)
			{
				slot->reaped = 0;
				slot->pruned = 0;
				slot->fired = 0;
			}
			MySlot = i;
			jobq_contain_share(&WorkerUnitMemory);
			ok = true;
		}
		break;
	}
	LWLockRelease(JobqBgwLock);
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

/* Commit one step of work. */
static void
WorkerEndStep(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * The releases whose schema this library serves: the worker reaps, fires and
 * prunes in a database at any of them, so a database whose ALTER EXTENSION
 * jobq UPDATE is still due keeps its leases reaped.  A release is listed only
 * while the worker's statements work on its schema, which the upgrade test
 * checks for each one.
 */
static const char *const WorkerServedVersions[] = {"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.3.2", "0.3.3", "0.3.4", "0.3.5", "0.3.6", JOBQ_VERSION};

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
	if (pass_unit == NULL)
	{
		char	   *dbname = get_database_name(MyDatabaseId);

		pass_unit = MemoryContextStrdup(TopMemoryContext,
										psprintf("a pass of the worker of database \"%s\"",
												 dbname ? dbname : "?"));
	}
	present = OidIsValid(jobq_extension_oid());
	*usable = present;
	if (present)
	{
		char	   *version = jobq_schema_version();

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
 * earliest next schedule fire (0: none); *unfinished is set when the
 * round's budget ran out with work left.
 *
 * Every duty is split into units that fail alone (contain.c): a schedule,
 * the expired leases of a queue, the finished jobs of a queue, the expired
 * keys.  A unit's error is logged once and the round goes on; what a client
 * holds locked is skipped and comes back next round.  Nothing a tenant does
 * to its own queue or schedule stops or stalls the round for the others.
 *
 * Firing due schedules and reaping expired leases come first and are done
 * whole, every round; the cascades of dependents they cause settle within
 * jobq.pass_budget, and leave the rest deferred.  Then the other duties
 * (settling deferred dependents, pruning) share a budget of
 * jobq.pass_budget of their own: each does at least one batch, stops at a
 * batch boundary once the budget is spent, and goes on next round.  So a
 * round is bounded whatever a tenant piles up, and a worker of the shared
 * pool leaves the database to the others after one.
 */
/*
 * The earliest retry of a deferred workflow settle that the last round left
 * (0: none): slept until exactly, and not for a naptime when it is already
 * due by then (its backoff starts at 10 ms, less than a round may take).
 */
static TimestampTz settle_due = 0;

/*
 * Once in the slot's life (it begins when the server starts, or when the
 * launcher takes the database in), end the leases of the jobs that
 * executors of a server that stopped held (jobq_end_orphaned_leases); the
 * executors of this database that run now keep theirs.  False when the
 * extension is being changed: the round ends.
 */
static bool
WorkerOrphansEnded(void)
{
	bool		done;

	LWLockAcquire(JobqBgwLock, LW_SHARED);
	done = JobqBgw->slots[MySlot].orphans_ended;
	LWLockRelease(JobqBgwLock);
	if (done)
		return true;

	WorkerBeginStep("jobq: ending the leases of executors gone with the server");
	if (!jobq_lock_extension())
	{
		WorkerEndStep();
		jobq_budget_end();
		return false;
	}
	SPI_connect();
	(void) jobq_end_orphaned_leases();
	SPI_finish();
	WorkerEndStep();
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->slots[MySlot].orphans_ended = true;
	LWLockRelease(JobqBgwLock);
	return true;
}

static bool
WorkerRound(TimestampTz *last_prune, TimestampTz *next_due, bool *unfinished)
{
	static JobqFireSkip failed_schedules = {0};
	static bool fired_all = true;
	static TimestampTz failed_since = 0;
	int64		reaped = 0;
	int64		pruned = 0;
	int64		fired = 0;
	bool		more;
	TimestampTz round_start = GetCurrentTimestamp();
	TimestampTz now;
	bool		usable;
	bool		has_handlers = false;

	*unfinished = false;
	if (RecoveryInProgress() || !WorkerExtensionPresent(&usable))
		return false;
	if (!usable)
		return true;

	/* the budget of the cascades that firing and reaping cause */
	jobq_budget_start(jobq_pass_budget_ms);

	/*
	 * fire due schedules, batch by batch, within the budget: a tenant's
	 * schedules (thousands due every second, or a queue they hold locked)
	 * must not keep the worker from reaping.  A failing one (or a locked
	 * queue's) waits until every other due schedule has had its turn, or a
	 * second at most (while others flood the worker, that turn never comes).
	 */
	failed_schedules.cxt = TopMemoryContext;
	if (fired_all || TimestampDifferenceExceeds(failed_since, round_start, 1000))
	{
		jobq_fire_skip_reset(&failed_schedules);
		failed_since = round_start;
	}
	do
	{
		WorkerBeginStep("jobq: firing schedules");
		if (!jobq_lock_extension())
		{
			WorkerEndStep();
			jobq_budget_end();
			return false;
		}
		SPI_connect();
		fired += jobq_fire_due_schedules(next_due, &failed_schedules, &more);
		if (!more || jobq_budget_spent())
			has_handlers = jobq_database_has_handlers();
		SPI_finish();
		WorkerEndStep();
		CHECK_FOR_INTERRUPTS();
	} while (more && !jobq_budget_spent());
	fired_all = !more;
	if (more)
		*unfinished = true;
	/* still due though due at the start: locked by a client; try next round */
	if (*next_due != 0 && *next_due <= round_start)
		*next_due = round_start;
	if (has_handlers)
		WorkerStartExecutors();
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->slots[MySlot].has_handlers = has_handlers;
	LWLockRelease(JobqBgwLock);

	/* once after the server started: the claims of executors gone with it */
	if (!WorkerOrphansEnded())
		return false;

	/*
	 * reap expired leases, batch by batch, within a budget of their own
	 * (which their cascades share): a tenant's hundred thousand expired
	 * leases are reaped over several passes, which come at once, and in the
	 * shared pool the other databases' passes come between them (reaped
	 * whole, four such tenants held every place of the pool for 10-17 s: a
	 * review's find)
	 */
	jobq_budget_start(jobq_pass_budget_ms);
	do
	{
		WorkerBeginStep("jobq: reaping expired leases");
		if (!jobq_lock_extension())
		{
			WorkerEndStep();
			jobq_budget_end();
			return false;
		}
		SPI_connect();
		reaped += jobq_reap_expired(jobq_reap_batch, &more);
		SPI_finish();
		WorkerEndStep();
		CHECK_FOR_INTERRUPTS();
	} while (more && !jobq_budget_spent());
	if (more)
		*unfinished = true;

	/* the other duties, within a budget of their own */
	jobq_budget_start(jobq_pass_budget_ms);

	/* settle dependents whose settling a held row deferred */
	settle_due = 0;
	do
	{
		TimestampTz next_retry;

		WorkerBeginStep("jobq: settling deferred dependents");
		if (!jobq_lock_extension())
		{
			WorkerEndStep();
			jobq_budget_end();
			return false;
		}
		SPI_connect();
		(void) jobq_settle_deferred(jobq_reap_batch, &more, &next_retry);
		SPI_finish();
		WorkerEndStep();
		if (next_retry != 0 && (settle_due == 0 || next_retry < settle_due))
			settle_due = next_retry;
		if (next_retry != 0 && (*next_due == 0 || next_retry < *next_due))
			*next_due = next_retry;
		CHECK_FOR_INTERRUPTS();
	} while (more && !jobq_budget_spent());
	if (more)
		*unfinished = true;

	now = GetCurrentTimestamp();
	if (!jobq_budget_spent() &&
		TimestampDifferenceExceeds(*last_prune, now, jobq_prune_interval_s * 1000))
	{
		do
		{
			WorkerBeginStep("jobq: pruning finished jobs");
			if (!jobq_lock_extension())
			{
				WorkerEndStep();
				jobq_budget_end();
				return false;
			}
			SPI_connect();
			pruned += jobq_prune_finished(jobq_prune_batch, &more);
			SPI_finish();
			WorkerEndStep();
			CHECK_FOR_INTERRUPTS();
		} while (more && !jobq_budget_spent());
		/* the prune is done when it ran out of rows, not of budget */
		if (more)
			*unfinished = true;
		else
			*last_prune = now;
	}
	jobq_budget_end();

	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->slots[MySlot].last_cycle_at = GetCurrentTimestamp();
	JobqBgw->slots[MySlot].reaped += reaped;
	JobqBgw->slots[MySlot].pruned += pruned;
	JobqBgw->slots[MySlot].fired += fired;
	JobqBgw->slots[MySlot].has_jobq = true;
	JobqBgw->slots[MySlot].no_extension_at = 0;
	LWLockRelease(JobqBgwLock);
	return true;
}

/*
 * After a round, tell the launcher when this database next needs a worker:
 * the next schedule fire (next_fire, 0: none), the earliest lease of a
 * running job, the next prune, the next delayed job of a queue with
 * handlers; a prune interval at the latest.  lease_seen is the slot's
 * lease_due read before the round (which reaped every lease expired by
 * round_start): it is replaced by what the table says unless a claim
 * lowered it meanwhile.
 */
static void
WorkerNoteNextDue(TimestampTz last_prune, TimestampTz next_fire, uint64 lease_seen,
				  TimestampTz round_start)
{
	TimestampTz next = jobq_timestamp_add(last_prune, (int64) jobq_prune_interval_s * USECS_PER_SEC);
	TimestampTz lease = 0;
	JobqDbSlot *slot = &JobqBgw->slots[MySlot];
	uint64		cur;
	bool		isnull;

	if (next_fire != 0 && next_fire < next)
		next = next_fire;
	WorkerBeginStep("jobq: looking ahead");
	if (jobq_lock_extension())
	{
		Datum		d;

		SPI_connect();
		jobq_spi_exec_sql("SELECT (SELECT min(l.lease_expires_at) FROM jobq.queue q"
						  " CROSS JOIN LATERAL (SELECT j.lease_expires_at FROM jobq.job j"
						  " WHERE j.queue = q.name AND j.lease_expires_at IS NOT NULL"
						  " ORDER BY j.lease_expires_at LIMIT 1) l),"
						  " (SELECT min(s.run_at) FROM (SELECT DISTINCT queue FROM jobq.handler) h"
						  " CROSS JOIN LATERAL (SELECT s.run_at FROM jobq.scheduled s"
						  " WHERE s.queue = h.queue ORDER BY s.run_at LIMIT 1) s)",
						  true, SPI_OK_SELECT);
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
			lease = DatumGetTimestampTz(d);
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
		if (!isnull && DatumGetTimestampTz(d) < next)
			next = DatumGetTimestampTz(d);
		SPI_finish();
	}
	WorkerEndStep();

	/* lease_due: the table's earliest lease, or what a claim set meanwhile */
	cur = lease_seen;
	for (;;)
	{
		uint64		target;

		if (cur == lease_seen && (cur == 0 || (TimestampTz) cur <= round_start))
			target = lease != 0 ? (uint64) lease : 0;
		else
			target = (lease != 0 && (cur == 0 || (uint64) lease < cur)) ? (uint64) lease : cur;
		if (pg_atomic_compare_exchange_u64(&slot->lease_due, &cur, target))
			break;
	}

	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	slot->next_due_at = next;
	slot->last_prune_at = last_prune;
	LWLockRelease(JobqBgwLock);
}

/* An idle worker of its own looks at its database every this many naptimes. */
#define JOBQ_IDLE_ROUNDS		10

/* How long to sleep until this database's next due time (see the loop). */
static long
WorkerSleepMs(void)
{
	JobqDbSlot *slot = &JobqBgw->slots[MySlot];
	uint64		lease = pg_atomic_read_u64(&slot->lease_due);
	TimestampTz due;
	TimestampTz now = GetCurrentTimestamp();
	long		secs;
	int			usecs;

	LWLockAcquire(JobqBgwLock, LW_SHARED);
	due = slot->next_due_at;
	LWLockRelease(JobqBgwLock);
	if (lease != 0 && (due == 0 || (TimestampTz) lease < due))
		due = (TimestampTz) lease;
	if (settle_due != 0 && settle_due <= now)
		return 0;
	if (settle_due != 0 && (due == 0 || due <= now || settle_due < due))
		due = settle_due;
	if (due == 0 || due <= now)
		return jobq_naptime_ms;
	TimestampDifference(now, due, &secs, &usecs);

	/*
	 * At most JOBQ_IDLE_ROUNDS naptimes: what no commit announces (handlers
	 * restored by pg_restore, a database served while its handlers were being
	 * made) is noticed by then.
	 */
	return Min(Min(secs, 86400L) * 1000 + usecs / 1000 + 1,
			   (long) jobq_naptime_ms * JOBQ_IDLE_ROUNDS);
}


/*
 * A round (WorkerRound), then the note of when the database is next due
 * (WorkerNoteNextDue).  A lock it cannot have within the worker's
 * lock_timeout (JOBQ_WORKER_LOCK_TIMEOUT: a session holds one of jobq's
 * tables locked, ALTER EXTENSION UPDATE runs, a VACUUM FULL waits behind an
 * open transaction) ends the round: the step it was in is rolled back
 * (the steps before it stay committed, each its own transaction), the
 * database is due again after jobq.naptime, and the cause is logged once
 * (and once more when a pass works again), as a unit's.  Any other error
 * ends the process, as before.  Returns what WorkerRound returned (true
 * after a lock).
 */
/*
 * In a PG_CATCH: a lock not had within the worker's lock_timeout is
 * recovered from (the transaction aborted) and returned; any other error
 * goes on.
 */
static ErrorData *
WorkerRecoverLock(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		PG_RE_THROW();
	HOLD_INTERRUPTS();
	FlushErrorState();
	AbortOutOfAnyTransaction();
	jobq_budget_end();
	RESUME_INTERRUPTS();
	pgstat_report_activity(STATE_IDLE, NULL);
	return edata;
}

/*
 * After a lock the pass could not have: log it once (as a unit's failure),
 * and make the database due again after jobq.naptime, the lease or fire it
 * could not serve too.
 */
static void
WorkerNoteLocked(ErrorData *edata, TimestampTz looked_at)
{
	TimestampTz retry = TimestampTzPlusMilliseconds(looked_at, jobq_naptime_ms);
	JobqDbSlot *slot = &JobqBgw->slots[MySlot];
	uint64		cur = pg_atomic_read_u64(&slot->lease_due);

	jobq_unit_failed(pass_unit ? pass_unit : "a pass of the database's worker", edata);
	FreeErrorData(edata);
	settle_due = 0;
	while (cur != 0 && cur < (uint64) retry &&
		   !pg_atomic_compare_exchange_u64(&slot->lease_due, &cur, (uint64) retry))
		;
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	if (slot->next_due_at == 0 || slot->next_due_at < retry)
		slot->next_due_at = retry;
	slot->last_cycle_at = GetCurrentTimestamp();
	LWLockRelease(JobqBgwLock);
}

/*
 * A round (WorkerRound), then the note of when the database is next due
 * (WorkerNoteNextDue).  A lock it cannot have within the worker's
 * lock_timeout (JOBQ_WORKER_LOCK_TIMEOUT: a session holds one of jobq's
 * tables locked, ALTER EXTENSION UPDATE runs, a VACUUM FULL waits behind an
 * open transaction) ends the round: the step it was in is rolled back
 * (the steps before it stay committed, each its own transaction), the
 * database is due again after jobq.naptime, and the cause is logged once
 * (and once more when a pass works again), as a unit's.  Any other error
 * ends the process, as before.  Returns what WorkerRound returned (true
 * after a lock).
 */
static bool
WorkerRoundOrWait(TimestampTz *last_prune, TimestampTz *next_due, bool *unfinished,
				  uint64 lease_seen, TimestampTz looked_at)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool served = true;
	ErrorData  *edata = NULL;

	PG_TRY();
	{
		served = WorkerRound(last_prune, next_due, unfinished);
		if (served)
			WorkerNoteNextDue(*last_prune, *unfinished ? looked_at : *next_due, lease_seen,
							  looked_at);
	}
	PG_CATCH();
	{
		edata = WorkerRecoverLock(cxt);
	}
	PG_END_TRY();
	if (edata == NULL)
	{
		if (served && pass_unit != NULL)
			jobq_unit_worked(pass_unit);
		return served;
	}
	*unfinished = false;
	WorkerNoteLocked(edata, looked_at);
	return true;
}

/*
 * The first look for the extension (WorkerExtensionPresent), under the
 * same rule: *locked when a lock (on pg_extension, say) was not had in time.
 */
static bool
WorkerFirstLook(bool *usable, bool *locked, TimestampTz looked_at)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool present = false;
	ErrorData  *edata = NULL;

	*locked = false;
	PG_TRY();
	{
		present = WorkerExtensionPresent(usable);
	}
	PG_CATCH();
	{
		edata = WorkerRecoverLock(cxt);
	}
	PG_END_TRY();
	if (edata == NULL)
		return present;
	*locked = true;
	WorkerNoteLocked(edata, looked_at);
	return true;
}

/* Entry point of a per-database worker; main_arg is the database OID. */
void
jobq_worker_main(Datum main_arg)
{
	TimestampTz last_prune;
	TimestampTz next_due = 0;
	long		sleep_ms;
	bool		one_pass;
	bool		usable;
	TimestampTz looked_at;
	uint64		lease_seen;
	bool		unfinished;
	bool		locked;

	jobq_bgw_connect(DatumGetObjectId(main_arg), "jobq worker");
	jobq_bgw_worker_settings();

	memcpy(&one_pass, MyBgworkerEntry->bgw_extra, sizeof(bool));
	if (!WorkerAttach(one_pass))
		proc_exit(0);			/* another worker serves this database */
	on_shmem_exit(WorkerDetach, (Datum) 0);

	looked_at = GetCurrentTimestamp();
	if (!WorkerFirstLook(&usable, &locked, looked_at))
	{
		LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
		JobqBgw->slots[MySlot].no_extension_at = looked_at;
		JobqBgw->slots[MySlot].has_jobq = false;
		LWLockRelease(JobqBgwLock);
		proc_exit(0);
	}
	/* a pass of the pool that could not look: the database is due again */
	if (locked && (one_pass || JobqBgw->pool_mode))
		proc_exit(0);

	/*
	 * A database the launcher did not know to have jobq (CREATE EXTENSION
	 * just ran): say so now and wake the launcher, which keeps it in its
	 * state file at once.  Told only at the end of the first round, a crash
	 * in between found the file saying "without" and the database waited for
	 * jobq.database_recheck_interval.
	 */
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	if (!JobqBgw->slots[MySlot].has_jobq)
	{
		JobqBgw->slots[MySlot].has_jobq = true;
		JobqBgw->slots[MySlot].no_extension_at = 0;
		if (JobqBgw->launcher_latch)
			SetLatch(JobqBgw->launcher_latch);
	}
	LWLockRelease(JobqBgwLock);
	if (!one_pass)
	{
		WorkerBeginStep("jobq: starting");
		ereport(LOG, (errmsg("jobq worker started for database \"%s\"",
							 get_database_name(MyDatabaseId))));
		WorkerEndStep();
	}
	LWLockAcquire(JobqBgwLock, LW_SHARED);
	last_prune = JobqBgw->slots[MySlot].last_prune_at;
	LWLockRelease(JobqBgwLock);

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
		lease_seen = pg_atomic_read_u64(&JobqBgw->slots[MySlot].lease_due);
		if (!WorkerRoundOrWait(&last_prune, &next_due, &unfinished, lease_seen, looked_at))
		{
			LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
			JobqBgw->slots[MySlot].no_extension_at = looked_at;
			JobqBgw->slots[MySlot].has_jobq = false;
			LWLockRelease(JobqBgwLock);
			if (!one_pass)
				ereport(LOG, (errmsg("jobq worker exiting: the extension is no longer installed")));
			proc_exit(0);
		}
		/* work left over: due again at once (after the others, in the pool) */

		/*
		 * one pass in the shared pool, or a worker of its own that the pool
		 * replaces
		 */
		if (one_pass || JobqBgw->pool_mode)
			proc_exit(0);
		if (unfinished)
			continue;

		/*
		 * Sleep until the database next needs a round: its next schedule
		 * fire, lease expiry, prune or delayed handler job (a claim that
		 * takes an earlier lease, and a commit that changes a schedule, set
		 * the latch).  What was due and is still due (a unit that failed or
		 * was locked) is tried again after jobq.naptime.
		 */
		sleep_ms = WorkerSleepMs();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 sleep_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* ----------------------------------------------------------------
 * Executors (their main loop is in bgw/handler_proc.c)
 * ---------------------------------------------------------------- */

/* This worker's handles of the executors it started. */
static BackgroundWorkerHandle *executor_handles[JOBQ_MAX_EXECUTORS];

/* Start the executors of this database that are missing (in the worker). */
static void
WorkerStartExecutors(void)
{
	int			started = 0;

	/*
	 * The queues with handlers wake the executors when jobs get ready (even
	 * before an executor has served them).  Executors leave when they find
	 * nothing to do and their place is wanted, and always in the shared pool:
	 * there they are started only when such a queue has ready jobs.
	 */
	{
		bool		ready = false;
		bool		isnull;

		WorkerBeginStep("jobq: looking for handler jobs");
		if (jobq_lock_extension())
		{
			SPI_connect();
			jobq_spi_exec_sql("SELECT h.queue, EXISTS (SELECT FROM jobq.ready r WHERE r.queue = h.queue)"
							  " FROM (SELECT DISTINCT queue FROM jobq.handler) h",
							  true, SPI_OK_SELECT);
			for (uint64 r = 0; r < SPI_processed; r++)
			{
				jobq_state_mark_handled(SPI_getvalue(SPI_tuptable->vals[r],
													 SPI_tuptable->tupdesc, 1));
				if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[r],
											   SPI_tuptable->tupdesc, 2, &isnull)))
					ready = true;
			}
			SPI_finish();
		}
		WorkerEndStep();
		if (!ready && JobqBgw->pool_mode)
			return;
	}

	for (int i = 0; i < jobq_executors; i++)
	{
		BackgroundWorker bgw;
		pid_t		pid;
		bool		running;
		bool		room;

		LWLockAcquire(JobqBgwLock, LW_SHARED);
		running = JobqBgw->slots[MySlot].executor_pid[i] != 0;
		/* executors come out of the same budget as the workers */
		room = jobq_bgw_executor_room(started);
		LWLockRelease(JobqBgwLock);
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
		if (!room)
		{
			/* an executor that leaves wakes this worker */
			LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
			JobqBgw->slots[MySlot].executors_wanted = true;
			LWLockRelease(JobqBgwLock);
			return;
		}

		jobq_bgw_init_struct(&bgw, "jobq_executor_main");
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
		started++;
	}
	LWLockAcquire(JobqBgwLock, LW_EXCLUSIVE);
	JobqBgw->slots[MySlot].executors_wanted = false;
	LWLockRelease(JobqBgwLock);
}

/* Forget what executor place index of slot runs; pid becomes its owner. */
