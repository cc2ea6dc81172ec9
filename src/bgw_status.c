/*-------------------------------------------------------------------------
 *
 * bgw_status.c
 *	  jobq.worker_status(), behind the jobq.workers view: one row per
 *	  background process, read from shared memory (shm_bgw.c).
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

#include "shm_bgw.h"

PG_FUNCTION_INFO_V1(jobq_worker_status);

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
