/*-------------------------------------------------------------------------
 *
 * ops/reaper.c
 *	  The lease reaper: running jobs whose lease expired go back to pending
 *	  (retry_count + 1, with backoff) or, with no retries left, to failed
 *	  with the error "lease expired".
 *
 * The background worker calls jobq_reap_expired about once a second; it is
 * also SQL-callable as jobq.reap() for servers without the worker.  Rows
 * are locked FOR UPDATE SKIP LOCKED: a worker's complete, fail or extend in
 * flight on the same job wins, and the reaper never waits for it.  Under
 * READ COMMITTED a complete that waits on the reaper re-checks its lease
 * token and status after the reaper commits, and so changes nothing.
 *
 * Reaping goes queue by queue, only over the queues that have an expired
 * lease, and each queue is a unit of its own (contain.c): one queue's error
 * is logged once and does not keep the others unreaped.  A queue with a circuit breaker counts a reaped lease as a
 * failure in its queue row, which a client's open transaction can hold (a
 * fail or a claim not yet committed): once it has locked leases to reap,
 * the reaper takes that row with SKIP LOCKED, and when it is held leaves the
 * queue, its leases and their breaker accounting all for the next round, so
 * nothing is lost and no other queue waits.  A round with no lease it can
 * lock leaves the row alone (a jobq.reap() run beside the worker's round
 * then finds it free).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "acl.h"
#include "args.h"
#include "contain.h"
#include "guc.h"
#include "spi.h"
#include "ops/reaper.h"
#include "queue/attempt.h"
#include "shmem/shm_bgw.h"
#include "workflow/settle.h"

PG_FUNCTION_INFO_V1(jobq_reap);

static SPIPlanPtr plan_reap_queues;
static SPIPlanPtr plan_reap_queue_lock;
static SPIPlanPtr plan_reap_lock;
static SPIPlanPtr plan_orphans;
static SPIPlanPtr plan_orphan_end;

/*
 * Leases of one queue logged one by one in a batch; the rest in one line
 * (a tenant's hundred thousand expired leases wrote two hundred thousand
 * lines).
 */
#define JOBQ_REAP_LOGGED_EACH	10

/* One queue's reaping, as a unit: what it is given and what it did. */
typedef struct JobqReapUnit
{
	const char *queue;
	bool		has_breaker;
	int			limit;			/* most leases to reap */
	TimestampTz now;
	int64		reaped;			/* out: leases reaped */
} JobqReapUnit;

/* Reap up to u->limit expired leases of one queue (SPI connected). */
static void
ReapQueue(void *arg)
{
	JobqReapUnit *u = (JobqReapUnit *) arg;
	Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];
	text	   *error = cstring_to_text("lease expired");
	SPITupleTable *tuptable;
	uint64		n;

	u->reaped = 0;
	values[0] = CStringGetTextDatum(u->queue);
	values[1] = TimestampTzGetDatum(u->now);
	values[2] = Int32GetDatum(u->limit);

	/*
	 * The expired leases of a queue are a prefix of job_running_lease_idx
	 * (queue, lease_expires_at).  A long-held snapshot keeps an entry there
	 * for every job claimed since (their dead versions), so the reaper never
	 * walks the index across queues.  Rows beyond the limit are reaped in the
	 * next transaction.
	 */
	jobq_spi_exec(jobq_plan_generic(&plan_reap_lock,
									"SELECT " JOBQ_ATTEMPT_COLUMNS
									" FROM jobq.job j JOIN jobq.queue q ON q.name = j.queue"
									" WHERE j.queue = $1 AND j.lease_expires_at < $2"
									" AND j.status = 'running'"
									" ORDER BY j.lease_expires_at LIMIT $3"
									" FOR UPDATE OF j SKIP LOCKED",
									3, types),
				  values, NULL, SPI_OK_SELECT);
	/* jobq_end_attempt runs more SPI queries: keep our result set */
	tuptable = SPI_tuptable;
	n = SPI_processed;

	/*
	 * The breaker's row, without waiting, once there is a lease to reap (so
	 * that a round which reaps nothing here does not take the row from a
	 * client): held, the queue waits for the next round, its leases and their
	 * breaker accounting with it.
	 */
	if (n > 0 && u->has_breaker)
	{
		jobq_spi_exec(jobq_plan_generic(&plan_reap_queue_lock,
										"SELECT 1 FROM jobq.queue WHERE name = $1"
										" FOR NO KEY UPDATE SKIP LOCKED",
										1, types),
					  values, NULL, SPI_OK_SELECT);
		if (SPI_processed == 0)
			return;
	}

	for (uint64 i = 0; i < n; i++)
	{
		JobqAttempt a;
		const char *status;

		jobq_attempt_from_tuple(tuptable->vals[i], tuptable->tupdesc, &a);
		status = jobq_end_attempt(&a, error, true, NULL, "lease expired", u->now);
		if (i < JOBQ_REAP_LOGGED_EACH)
			ereport(LOG,
					(errmsg("jobq: lease of job %lld expired; job is now %s",
							(long long) a.job_id, status),
					 errdetail("Queue \"%s\", kind \"%s\", worker \"%s\", retry %d of %d.",
							   a.queue, a.kind, a.worker_id ? a.worker_id : "",
							   a.retry_count, a.max_retries)));
	}
	if (n > JOBQ_REAP_LOGGED_EACH)
		ereport(LOG,
				(errmsg("jobq: %llu more leases of queue \"%s\" expired",
						(unsigned long long) (n - JOBQ_REAP_LOGGED_EACH), u->queue),
				 errdetail("Each one's job and worker are in jobq.attempt (outcome \"lease expired\").")));
	u->reaped = (int64) n;
}

/*
 * Reap up to batch jobs whose lease expired before now, queue by queue;
 * returns how many.  Each queue is a unit of its own (jobq_run_unit): its
 * error is logged and leaves the others be, for the worker as for a
 * jobq.reap() from cron.  *more is set when the batch ran out before every
 * queue was seen to.  SPI must be connected.
 */
int64
jobq_reap_expired(int batch, bool *more)
{
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	TimestampTz now = GetCurrentTimestamp();
	int64		total = 0;
	int			nqueues;
	char	  **queues;
	bool	   *breakers;

	*more = false;
	values[0] = TimestampTzGetDatum(now);
	/* a look at the head of each queue's part of job_running_lease_idx */
	jobq_spi_exec(jobq_plan_generic(&plan_reap_queues,
									"SELECT q.name, q.breaker_threshold IS NOT NULL"
									" FROM jobq.queue q WHERE EXISTS (SELECT 1 FROM jobq.job j"
									" WHERE j.queue = q.name AND j.lease_expires_at < $1"
									" AND j.status = 'running')"
									" ORDER BY q.name",
									1, types),
				  values, NULL, SPI_OK_SELECT);
	nqueues = (int) SPI_processed;
	queues = palloc(sizeof(char *) * Max(nqueues, 1));
	breakers = palloc(sizeof(bool) * Max(nqueues, 1));
	for (int i = 0; i < nqueues; i++)
	{
		bool		isnull;

		queues[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		breakers[i] = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[i],
												 SPI_tuptable->tupdesc, 2, &isnull));
	}

	for (int i = 0; i < nqueues; i++)
	{
		JobqReapUnit u;
		char	   *unit;

		if (total >= batch)
		{
			*more = true;
			break;
		}
		u.queue = queues[i];
		u.has_breaker = breakers[i];
		u.limit = (int) (batch - total);
		u.now = now;
		u.reaped = 0;
		unit = psprintf("reaping expired leases of queue \"%s\"", queues[i]);
		(void) jobq_run_unit(unit, ReapQueue, &u);
		pfree(unit);
		total += u.reaped;
	}
	if (total >= batch)
		*more = true;
	return total;
}

/* The leases of executors gone with the server, as a unit. */
typedef struct JobqOrphanUnit
{
	TimestampTz now;
	int64		ended;			/* out: leases ended */
} JobqOrphanUnit;

/* The pid of an executor's worker_id ("jobq executor PID"), else 0. */
static pid_t
ExecutorPid(const char *worker_id)
{
	int			pid;
	int			end = 0;

	if (sscanf(worker_id, "jobq executor %d%n", &pid, &end) != 1 ||
		worker_id[end] != '\0' || pid <= 0)
		return 0;
	return (pid_t) pid;
}

static void
EndOrphanedLeases(void *arg)
{
	JobqOrphanUnit *u = (JobqOrphanUnit *) arg;
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2];
	SPITupleTable *tuptable;
	uint64		n;
	pid_t		live[JOBQ_MAX_EXECUTORS];
	int			nlive;

	u->ended = 0;
	values[0] = Int64GetDatum(0);
	values[1] = TimestampTzGetDatum(u->now);
	/* the running jobs of the queues with handlers: job_running_lease_idx */
	jobq_spi_exec(jobq_plan_generic(&plan_orphans,
									"SELECT j.job_id, j.worker_id, j.queue FROM jobq.job j"
									" WHERE j.queue IN (SELECT h.queue FROM jobq.handler h)"
									" AND j.lease_expires_at > $2 AND j.status = 'running'"
									" AND j.worker_id LIKE 'jobq executor %'"
									" FOR UPDATE OF j SKIP LOCKED",
									2, types),
				  values, NULL, SPI_OK_SELECT);
	tuptable = SPI_tuptable;
	n = SPI_processed;
	/* read after the jobs: an executor is listed before its first claim */
	nlive = jobq_bgw_executor_pids(live);
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = tuptable->vals[i];
		bool		isnull;
		char	   *worker_id = SPI_getvalue(tup, tuptable->tupdesc, 2);
		pid_t		pid = ExecutorPid(worker_id);
		bool		alive = false;

		if (pid == 0)
			continue;
		for (int k = 0; k < nlive; k++)
			alive |= (live[k] == pid);
		if (alive)
			continue;
		/* just expired: the reaper's next look, this round, takes it */
		values[0] = SPI_getbinval(tup, tuptable->tupdesc, 1, &isnull);
		values[1] = TimestampTzGetDatum(u->now - 1);
		jobq_spi_exec(jobq_plan_generic(&plan_orphan_end,
										"UPDATE jobq.job SET lease_expires_at = $2"
										" WHERE job_id = $1",
										2, types),
					  values, NULL, SPI_OK_UPDATE);
		ereport(LOG,
				(errmsg("jobq: job %lld was running in %s, which is gone with the server's restart; its lease ends now",
						(long long) DatumGetInt64(values[0]), worker_id),
				 errdetail("Queue \"%s\". The reaper ends the attempt as for an expired lease: a retry is spent.",
						   SPI_getvalue(tup, tuptable->tupdesc, 3))));
		u->ended++;
	}
}

/*
 * After a server start, end the leases of the jobs that executors held
 * when it stopped.  An executor claims in a transaction of its own and runs
 * the handler in another, so when the server stops under it (the fast
 * shutdown of a switchover, a crash, the failover to a standby) the claim
 * stays, and the job would wait for its whole lease (the queue's, five
 * minutes by default) on the server that comes back.  A running job whose
 * worker_id names ("jobq executor PID", as ExecClaim gives it) none of the
 * database's executors that run now is orphaned:
 * its lease ends now, and the reaper ends its attempt in the same round as
 * any expired lease's.  A retry is spent, as when the lease expires, so a
 * handler that crashes the server is dead-lettered, not run for ever.
 * Returns how many; SPI must be connected.
 */
int64
jobq_end_orphaned_leases(void)
{
	JobqOrphanUnit u;

	u.now = GetCurrentTimestamp();
	u.ended = 0;
	(void) jobq_run_unit("ending the leases of executors gone with the server", EndOrphanedLeases, &u);
	return u.ended;
}

/* jobq.reap(batch) -> number of expired leases reaped */
Datum
jobq_reap(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	int32		batch = jobq_batch_arg(fcinfo, 0);
	int64		n;
	bool		more;

	jobq_require_writable("jobq.reap()");
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, NULL, JOBQ_CAP_ADMINISTER);

	/*
	 * As a worker's pass does: reaping, with its cascades within
	 * jobq.pass_budget (what is left is deferred), then settling deferred
	 * dependents within a budget of its own; a later call goes on.  The
	 * budget ends on every path, lest a later call of this session defer its
	 * own cascade.
	 */
	PG_TRY();
	{
		TimestampTz next_retry;

		jobq_budget_start(jobq_pass_budget_ms);
		n = jobq_reap_expired(batch, &more);
		jobq_budget_start(jobq_pass_budget_ms);
		(void) jobq_settle_deferred(batch, &more, &next_retry);
	}
	PG_FINALLY();
	{
		jobq_budget_end();
	}
	PG_END_TRY();
	jobq_owner_end(&saved);
	PG_RETURN_INT64(n);
}
