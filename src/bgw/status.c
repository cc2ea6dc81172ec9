/*-------------------------------------------------------------------------
 *
 * bgw/status.c
 *	  jobq.worker_status(), behind the jobq.workers view: one row per
 *	  background process, read from shared memory (shmem/shm_bgw.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lwlock.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "commands/dbcommands.h"

#include "shmem/shm_bgw.h"

PG_FUNCTION_INFO_V1(jobq_worker_status);
PG_FUNCTION_INFO_V1(jobq_service_status);

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
	if (JobqBgw == NULL)
		return (Datum) 0;

	LWLockAcquire(JobqBgwLock, LW_SHARED);
	nslots = JobqBgw->nslots;
	copy = palloc(sizeof(JobqDbSlot) * nslots);
	memcpy(copy, JobqBgw->slots, sizeof(JobqDbSlot) * nslots);
	launcher_pid = JobqBgw->launcher_pid;
	launcher_started = JobqBgw->launcher_started_at;
	launcher_cycle = JobqBgw->launcher_cycle_at;
	LWLockRelease(JobqBgwLock);

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

/*
 * A database whose own worker is about to run: the launcher starts its own
 * worker after the last one ended (at most once per 5 s), also when the
 * shared pool, whose passes served it, hands over to workers of their own.
 * Meanwhile no process serves it, yet it is served: it finished a round
 * less than JOBQ_STARTING_MS ago.  A worker that does not get going (or
 * ends before a round) leaves it 'none' after that.
 */
#define JOBQ_STARTING_MS	10000

static bool
OwnWorkerStarting(JobqDbSlot *slot, TimestampTz now)
{
	return !JobqBgw->pool_mode && JobqBgw->launcher_pid != 0 && slot->has_jobq &&
		slot->last_cycle_at != 0 &&
		!TimestampDifferenceExceeds(slot->last_cycle_at, now, JOBQ_STARTING_MS);
}

/*
 * jobq.service_status() -> one row for the current database, behind the
 * jobq.service view: how it is served ('own worker': a worker of its own;
 * 'shared pool': workers that serve it in turn, one pass at a time, when
 * databases outnumber jobq.max_workers, or such a pass running while the pool
 * hands over; 'none': nothing serves it now, nor did for JOBQ_STARTING_MS),
 * when a worker last finished a round here, when the database next needs
 * one (its next schedule fire, lease expiry or prune), and how long past
 * that it has waited (0 while on time).
 */
Datum
jobq_service_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[4];
	bool		nulls[4] = {false, true, true, true};
	const char *served_by = "none";
	TimestampTz now = GetCurrentTimestamp();

	InitMaterializedSRF(fcinfo, 0);
	if (JobqBgw != NULL)
	{
		LWLockAcquire(JobqBgwLock, LW_SHARED);
		for (int i = 0; i < JobqBgw->nslots; i++)
		{
			JobqDbSlot *slot = &JobqBgw->slots[i];
			uint64		lease = pg_atomic_read_u64(&slot->lease_due);
			TimestampTz due = slot->next_due_at;

			if (slot->dbid != MyDatabaseId)
				continue;
			if (slot->pid != 0 && !slot->pass_worker)
				served_by = "own worker";
			else if (slot->pid != 0 ||
					 (JobqBgw->pool_mode && slot->has_jobq && JobqBgw->launcher_pid != 0))
				served_by = "shared pool";
			else if (OwnWorkerStarting(slot, now))
				served_by = "own worker";
			if (slot->last_cycle_at != 0)
			{
				values[1] = TimestampTzGetDatum(slot->last_cycle_at);
				nulls[1] = false;
			}
			if (lease != 0 && (due == 0 || (TimestampTz) lease < due))
				due = (TimestampTz) lease;
			if (due != 0)
			{
				Interval   *delay = palloc0(sizeof(Interval));

				values[2] = TimestampTzGetDatum(due);
				nulls[2] = false;
				/* a worker of its own has nothing to wait for */
				if (due < now && strcmp(served_by, "own worker") != 0)
					delay->time = now - due;
				values[3] = IntervalPGetDatum(delay);
				nulls[3] = false;
			}

			/*
			 * The launcher saw the database wait for a place (late_since): a
			 * database it has not served since a CREATE EXTENSION jobq, too
			 */
			if (slot->late_since != 0 && slot->late_since < now &&
				strcmp(served_by, "own worker") != 0 &&
				(nulls[3] || DatumGetIntervalP(values[3])->time < now - slot->late_since))
			{
				Interval   *delay = palloc0(sizeof(Interval));

				delay->time = now - slot->late_since;
				values[3] = IntervalPGetDatum(delay);
				nulls[3] = false;
			}
		}
		LWLockRelease(JobqBgwLock);
	}
	values[0] = CStringGetTextDatum(served_by);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}
