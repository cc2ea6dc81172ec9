/*-------------------------------------------------------------------------
 *
 * contain.c
 *	  Units of the background worker's duties that fail alone.
 *
 * The worker's duties are split into units: reaping the expired leases of
 * one queue, pruning one queue's finished jobs, pruning expired keys,
 * firing one schedule.  Each unit runs in a subtransaction of its step's
 * transaction, as a PL/pgSQL exception block does: an error rolls back that
 * unit alone, and the worker goes on with the others.  One queue's or one
 * schedule's bad state (a retention too large to compute, a cron expression
 * that no longer parses, a row that breaks a constraint) so never stops the
 * worker's duties for the rest, nor makes the worker exit.
 *
 * A query cancel (pg_cancel_backend, statement_timeout) is not contained: as
 * PL/pgSQL's WHEN OTHERS, a unit lets it through, and it ends the call.
 *
 * A failing unit is tried again next round, but logged once per cause: when
 * it first fails, when it fails with another SQLSTATE, and when it works
 * again.  A database's worker also keeps its failing units in the
 * database's slot of shared memory (jobq_contain_share), so that the shared
 * pool, whose process serves one pass and exits, logs them once too, not
 * once a pass.
 *
 * A subtransaction costs a few microseconds; the worker opens one per due
 * schedule and per queue with an expired lease, one for pruning all the
 * queues that work (and one per queue that fails), never one per job.
 * jobq.reap(), jobq.prune() and jobq.run_schedules() go unit by unit too.
 *
 * A unit's statements run with lock_timeout JOBQ_UNIT_LOCK_TIMEOUT_MS.  The
 * rows a client can hold in an open transaction (queue rows, schedule rows,
 * jobs) are taken with SKIP LOCKED, so the worker does not wait for them at
 * all; the timeout covers any other lock wait a client could cause, so it
 * costs that unit a short wait and a retry next round, never the worker a
 * stall.
 *
 * A pass of the worker spends at most jobq.pass_budget on its duties other
 * than reaping and firing: jobq_budget_start sets a deadline, long work
 * (settling deferred dependents, a cascade of cancelled dependents,
 * pruning) asks jobq_budget_spent between its chunks and leaves the rest
 * for the next pass, and jobq_budget_end removes it.  Outside a budget (a
 * client's own call) nothing is ever spent: a client pays for its own work.
 *
 * State: the table of failing units and the budget's deadline are private
 * to the process that runs them; a worker's failing units are also in its
 * database's slot (JobqBgwLock).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "contain.h"
#include "subxact.h"

/* How long a unit's statement waits for a lock before the unit gives up. */
#define JOBQ_UNIT_LOCK_TIMEOUT_MS	100

/* Longest unit name kept (longer ones are cut, which only merges logs). */
#define JOBQ_UNIT_NAME_LEN		256

/* A unit whose last run failed. */
typedef struct JobqFailedUnit
{
	char		name[JOBQ_UNIT_NAME_LEN];	/* hash key */
	int			sqlerrcode;		/* the SQLSTATE it failed with last */
} JobqFailedUnit;

static HTAB *failed_units = NULL;

/* Where a database's worker also keeps its failing units (NULL: nowhere). */
static const JobqUnitMemory *unit_memory = NULL;

/* The table of failing units, created on first use. */
static HTAB *
FailedUnits(void)
{
	if (failed_units == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = JOBQ_UNIT_NAME_LEN;
		ctl.entrysize = sizeof(JobqFailedUnit);
		ctl.hcxt = TopMemoryContext;
		failed_units = hash_create("jobq failed units", 64, &ctl,
								   HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	return failed_units;
}

/* The hash key of unit: its name, cut to fit. */
static void
UnitKey(const char *unit, char *key)
{
	strlcpy(key, unit, JOBQ_UNIT_NAME_LEN);
}

/*
 * This process is a database's worker: memory keeps its failing units
 * beyond the process too (shmem/shm_bgw.c, the database's slot).
 */
void
jobq_contain_share(const JobqUnitMemory *memory)
{
	unit_memory = memory;
}

/* The hash of a unit's key, for the memory beyond the process. */
static uint64
UnitHash(const char *key)
{
	return hash_bytes_extended((const unsigned char *) key, strlen(key), 0);
}

/*
 * Did unit fail the last time it ran, in this process or in an earlier pass
 * of the database's worker?
 */
bool
jobq_unit_failing(const char *unit)
{
	char		key[JOBQ_UNIT_NAME_LEN];

	UnitKey(unit, key);
	if (failed_units != NULL && hash_search(failed_units, key, HASH_FIND, NULL) != NULL)
		return true;
	return unit_memory != NULL && unit_memory->failing(UnitHash(key));
}

/* Log a unit's error, unless it failed the same way last time. */
static void
NoteFailure(const char *unit, ErrorData *edata)
{
	char		key[JOBQ_UNIT_NAME_LEN];
	JobqFailedUnit *entry;
	bool		found;

	UnitKey(unit, key);
	entry = hash_search(FailedUnits(), key, HASH_ENTER, &found);
	if (found && entry->sqlerrcode == edata->sqlerrcode)
		return;
	entry->sqlerrcode = edata->sqlerrcode;
	if (unit_memory != NULL)
	{
		switch (unit_memory->failed(UnitHash(key), edata->sqlerrcode))
		{
			case JOBQ_UNIT_LOG:
				break;
			case JOBQ_UNIT_KNOWN:
				return;			/* an earlier pass of the shared pool logged
								 * it */
			case JOBQ_UNIT_LATER:
				/* not logged yet: not known here either, tried next round */
				(void) hash_search(failed_units, key, HASH_REMOVE, NULL);
				return;
		}
	}
	ereport(WARNING,
			(errcode(edata->sqlerrcode),
			 errmsg("jobq: %s failed: %s", unit, edata->message),
			 edata->detail ? errdetail_internal("%s", edata->detail) : 0,
			 errhint("The worker goes on with its other duties and tries this one again every round; it logs again when the error changes or clears.")));
}

/* Log that a unit which failed works again. */
static void
NoteSuccess(const char *unit)
{
	char		key[JOBQ_UNIT_NAME_LEN];
	bool		failed = false;

	if ((failed_units == NULL || hash_get_num_entries(failed_units) == 0) &&
		unit_memory == NULL)
		return;
	UnitKey(unit, key);
	if (failed_units != NULL &&
		hash_search(failed_units, key, HASH_REMOVE, NULL) != NULL)
		failed = true;
	if (unit_memory != NULL && unit_memory->works(UnitHash(key)))
		failed = true;
	if (failed)
		ereport(LOG,
				(errmsg("jobq: %s works again", unit)));
}

/*
 * Note that unit, run by the caller itself, failed with edata (logged once
 * per cause, as a contained unit's error), or worked.
 */
void
jobq_unit_failed(const char *unit, ErrorData *edata)
{
	NoteFailure(unit, edata);
}

void
jobq_unit_worked(const char *unit)
{
	NoteSuccess(unit);
}

/* A unit's call: its function, its argument, its lock timeout (ms). */
typedef struct JobqContainedCall
{
	JobqUnitFn	fn;
	void	   *arg;
	int			lock_timeout_ms;
} JobqContainedCall;

/*
 * The body of a contained unit, in its subtransaction: the unit's
 * function, with SPI connected and lock_timeout set (the caller's own
 * lock_timeout, when shorter, stands).  On an error the subtransaction's
 * rollback closes the SPI connection and resets the GUCs.
 */
static bool
ContainedBody(void *arg)
{
	JobqContainedCall *c = (JobqContainedCall *) arg;
	int			nestlevel = NewGUCNestLevel();
	int			lock_timeout_ms = c->lock_timeout_ms;
	char		timeout[32];

	if (LockTimeout > 0 && LockTimeout < lock_timeout_ms)
		lock_timeout_ms = LockTimeout;
	snprintf(timeout, sizeof(timeout), "%d", lock_timeout_ms);
	(void) set_config_option("lock_timeout", timeout, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	SPI_connect();
	c->fn(c->arg);
	SPI_finish();
	AtEOXact_GUC(true, nestlevel);
	return true;
}

/*
 * Run fn(arg) in a subtransaction (subxact.c), with SPI connected, under a
 * lock timeout of lock_timeout_ms; true when it succeeded.  On error the
 * subtransaction is rolled back and the error, copied, goes to *edata
 * (NULL: dropped); a cancel stops the whole call, as in a PL/pgSQL
 * exception block.
 */
static bool
RunContainedFor(JobqUnitFn fn, void *arg, int lock_timeout_ms, ErrorData **edata)
{
	JobqContainedCall c;
	ErrorData  *error;

	c.fn = fn;
	c.arg = arg;
	c.lock_timeout_ms = lock_timeout_ms;
	error = jobq_subxact_run(ContainedBody, &c);
	if (error == NULL)
		return true;
	if (error->sqlerrcode == ERRCODE_QUERY_CANCELED)
		ReThrowError(error);
	if (edata != NULL)
		*edata = error;
	else
		FreeErrorData(error);
	return false;
}

/* RunContainedFor under the unit lock timeout. */
static bool
RunContained(JobqUnitFn fn, void *arg, ErrorData **edata)
{
	return RunContainedFor(fn, arg, JOBQ_UNIT_LOCK_TIMEOUT_MS, edata);
}

/*
 * The SQL-callable duties (jobq.reap(), jobq.prune(), jobq.run_schedules())
 * refuse a read-only transaction and a standby up front: their units would
 * otherwise each fail, be contained, and the call return 0 as if there had
 * been nothing to do.
 */
void
jobq_require_writable(const char *cmdname)
{
	PreventCommandIfReadOnly(cmdname);
	PreventCommandDuringRecovery(cmdname);
}

/*
 * Run fn(arg) as one contained unit named unit (for the log, e.g. "reaping
 * expired leases of queue \"q\""): in a subtransaction, with SPI connected,
 * under the unit lock timeout.  Returns true when it succeeded; on error,
 * the unit's work is rolled back, the error logged once per cause, and
 * false returned.  A transaction must be in progress; what fn allocates in
 * the caller's memory context (SPI_palloc) outlives the unit.
 */
bool
jobq_run_unit(const char *unit, JobqUnitFn fn, void *arg)
{
	return jobq_run_unit_for(unit, fn, arg, JOBQ_UNIT_LOCK_TIMEOUT_MS, NULL);
}

/*
 * jobq_run_unit, with its lock waits cut to lock_timeout_ms (at most the
 * unit lock timeout) and the SQLSTATE of its error in *sqlerrcode (0 when
 * it succeeded; sqlerrcode may be NULL).
 */
bool
jobq_run_unit_for(const char *unit, JobqUnitFn fn, void *arg, int lock_timeout_ms,
				  int *sqlerrcode)
{
	ErrorData  *edata = NULL;

	if (sqlerrcode != NULL)
		*sqlerrcode = 0;
	if (!RunContainedFor(fn, arg, Min(lock_timeout_ms, JOBQ_UNIT_LOCK_TIMEOUT_MS), &edata))
	{
		if (sqlerrcode != NULL)
			*sqlerrcode = edata->sqlerrcode;
		NoteFailure(unit, edata);
		FreeErrorData(edata);
		return false;
	}
	NoteSuccess(unit);
	return true;
}

/*
 * Run fn(arg) as jobq_run_unit does, but say nothing of an error: for work
 * done for many units at once, which the caller redoes unit by unit when it
 * fails, to find (and log) the one that fails.
 */
bool
jobq_try_units(JobqUnitFn fn, void *arg)
{
	return RunContained(fn, arg, NULL);
}

/*
 * Run fn(arg) in a subtransaction whose lock waits last lock_timeout_ms at
 * most (the caller's lock_timeout when shorter): true when it succeeded;
 * false, its work rolled back, when a lock was not granted in time.  Any
 * other error is thrown again: this is for waiting briefly, not for
 * containing errors.
 */
bool
jobq_try_briefly(JobqUnitFn fn, void *arg, int lock_timeout_ms)
{
	ErrorData  *edata = NULL;

	if (RunContainedFor(fn, arg, lock_timeout_ms, &edata))
		return true;
	if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		ReThrowError(edata);
	FreeErrorData(edata);
	return false;
}

/* The deadline of the budget in force (0: none). */
static TimestampTz budget_deadline = 0;

/* Give the work from now on a budget of ms milliseconds. */
void
jobq_budget_start(int ms)
{
	budget_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);
}

/* No budget from now on. */
void
jobq_budget_end(void)
{
	budget_deadline = 0;
}

/* Is there a budget, and is it spent? */
bool
jobq_budget_spent(void)
{
	return budget_deadline != 0 && GetCurrentTimestamp() >= budget_deadline;
}
