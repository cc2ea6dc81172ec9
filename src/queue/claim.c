/*-------------------------------------------------------------------------
 *
 * queue/claim.c
 *	  jobq.claim: promote due scheduled jobs, respect the queue's limits
 *	  (pause, max_concurrency, max_per_key, rate limit, circuit breaker), take
 *	  leases, and wait for work when asked to.
 *
 * Times come from the database clock: one GetCurrentTimestamp() per call,
 * so all rows a call touches agree.
 *
 * Every claim takes its rows through job_lease.c, which deletes the ready
 * rows and marks the jobs running with no statement.  Statements remain
 * where their semantics are a query's: the promotion of due scheduled jobs
 * (a batch moved between tables) and a limited queue's lock and counts
 * (ClaimAllowance, RateSpend, and under a per-key limit the running jobs
 * by key, with which the claim's scan passes over the rows of full keys).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "storage/condition_variable.h"
#include "storage/itemptr.h"
#include "storage/latch.h"
#include "storage/proc.h"
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
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "acl.h"
#include "args.h"
#include "compat.h"
#include "guc.h"
#include "spi.h"
#include "subxact.h"
#include "queue/job_lease.h"
#include "queue/settings.h"
#include "shmem/shm_bgw.h"
#include "shmem/shm_queue.h"

PG_FUNCTION_INFO_V1(jobq_claim);

/* Longest single sleep of a waiting claim (it re-checks the queue then). */
#define JOBQ_MAX_WAIT_SLEEP_MS	5000

/*
 * How often a waiting claim looks again while its queue has ready jobs but
 * max_concurrency (or a throttled breaker) allows none: nothing signals a
 * running job's end to waiting claims, so they poll, at this pace, only
 * while the limit holds.
 */
#define JOBQ_LIMITED_POLL_MS	100

/*
 * Set by the last claim attempt that a limit held back: when it may be
 * worth looking again (0: no limit held it back).
 */
static TimestampTz claim_retry_at = 0;

/* Most due scheduled jobs one claim moves into jobq.ready. */
#define JOBQ_PROMOTE_BATCH	1000

/* Saved plans, one per statement. */
static SPIPlanPtr plan_promote;
static SPIPlanPtr plan_promote_pick;
static SPIPlanPtr plan_next_due;
static SPIPlanPtr plan_running_keys;
static SPIPlanPtr plan_queue_lock;
static SPIPlanPtr plan_count_running;
static SPIPlanPtr plan_rate_trim;
static SPIPlanPtr plan_rate_count;
static SPIPlanPtr plan_rate_spend;
static SPIPlanPtr plan_rate_oldest;

/* ----------------------------------------------------------------
 * Claim
 * ---------------------------------------------------------------- */

/*
 * Note the ready rows the last SPI statement returned (neg_priority,
 * run_at, job_id) in the queue's claim state, and lower *start to the
 * least of them: a promoted row is ours until commit; this claim sees it.
 */
static void
NoteReady(const char *queue, JobqClaimPos *start)
{
	bool		isnull;

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		JobqClaimPos pos;

		pos.neg_priority = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		pos.run_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 2, &isnull));
		pos.job_id = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		jobq_state_note_ready(queue, &pos);
		if (pos.neg_priority < start->neg_priority ||
			(pos.neg_priority == start->neg_priority &&
			 (pos.run_at < start->run_at ||
			  (pos.run_at == start->run_at && pos.job_id < start->job_id))))
			*start = pos;
	}
}

/*
 * Move up to JOBQ_PROMOTE_BATCH due rows of a queue from jobq.scheduled to
 * jobq.ready, when the queue's next due time says one may be due.  Lowers
 * *start to the least position promoted.  The due rows are read in due
 * order without a lock and deleted without waiting (as claims delete ready
 * rows: no LOCK record each); a row another transaction holds is passed
 * over and the walk goes on after it, as SKIP LOCKED would.
 */
static bool
PromoteDue(Oid relid, const char *queue, TimestampTz now, JobqClaimPos *start)
{
	Oid			types[5] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, INT4OID};
	Oid			ins_types[6] = {TEXTOID, INT4ARRAYOID, TIMESTAMPTZARRAYOID, INT8ARRAYOID,
	TEXTARRAYOID, TEXTARRAYOID};
	static const Oid coltypes[5] = {INT4OID, TIMESTAMPTZOID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[5];
	uint64		due_epoch;
	bool		isnull;
	int			promoted = 0;

	if (!jobq_state_due_probe_needed(relid, queue, now, &due_epoch))
		return false;

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(now);
	values[2] = TimestampTzGetDatum(DT_NOBEGIN);
	values[3] = Int64GetDatum(0);
	while (promoted < JOBQ_PROMOTE_BATCH)
	{
		int			want = JOBQ_PROMOTE_BATCH - promoted;
		uint64		n;
		int			ntaken;
		HeapTuple	last;
		Datum	   *cols[5];
		bool	   *colnulls[5];
		char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

		values[4] = Int32GetDatum(want);
		jobq_spi_exec(jobq_plan_generic(&plan_promote_pick,
										"SELECT d.ctid, d.priority, d.run_at, d.job_id, d.kind,"
										" d.concurrency_key FROM jobq.scheduled d"
										" WHERE d.queue = $1 AND d.run_at <= $2"
										" AND (d.run_at, d.job_id) > ($3, $4)"
										" ORDER BY d.run_at, d.job_id LIMIT $5",
										5, types),
					  values, NULL, SPI_OK_SELECT);
		n = SPI_processed;
		if (n == 0)
			break;
		last = SPI_tuptable->vals[n - 1];
		values[2] = SPI_getbinval(last, SPI_tuptable->tupdesc, 3, &isnull);
		values[3] = SPI_getbinval(last, SPI_tuptable->tupdesc, 4, &isnull);
		ntaken = jobq_delete_returned(JOBQ_REL_SCHEDULED, 5, cols, colnulls);
		if (ntaken > 0)
		{
			Datum		ins[6];

			jobq_state_note_unscheduled(queue);

			ins[0] = values[0];
			jobq_columns_arrays(5, coltypes, cols, colnulls, ntaken, &ins[1]);
			jobq_spi_exec(jobq_plan_generic(&plan_promote,
											"INSERT INTO jobq.ready (queue, neg_priority, run_at,"
											" job_id, kind, concurrency_key)"
											" SELECT $1, -u.p, u.r, u.j, u.k, u.c"
											" FROM unnest($2, $3, $4, $5, $6) AS u(p, r, j, k, c)"
											" RETURNING neg_priority, run_at, job_id",
											6, ins_types),
						  ins, nulls, SPI_OK_INSERT_RETURNING);
			NoteReady(queue, start);
			promoted += ntaken;
		}
		if (n < (uint64) want)
			break;				/* no more due */
	}

	/* remember when the next scheduled row is due */
	jobq_spi_exec(jobq_plan_generic(&plan_next_due,
									"SELECT run_at FROM jobq.scheduled WHERE queue = $1"
									" ORDER BY run_at LIMIT 1",
									1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		jobq_state_set_next_due(relid, queue, due_epoch, DT_NOEND);
	else
	{
		TimestampTz next = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
															 SPI_tuptable->tupdesc, 1,
															 &isnull));

		if (next > now)
			jobq_state_set_next_due(relid, queue, due_epoch, next);
	}
	return promoted > 0;
}

/*
 * For a queue with limits: lock its row, so its claims run one at a time,
 * and return how many of batch jobs the limits allow now.  The counts are
 * read after the lock is taken and from the latest committed state, so they
 * include every claim that held it before (a REPEATABLE READ or SERIALIZABLE
 * transaction's snapshot may predate them: counted with it, a claim could
 * take what another took meanwhile the room for).
 */
static int32
ClaimAllowance(const char *queue, const JobqQueue *q, int32 batch, TimestampTz now)
{
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2];
	bool		isnull;
	int64		running;

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(jobq_timestamp_add(now,
													   -Min(jobq_interval_usecs(&q->rate_period),
															JOBQ_MAX_INTERVAL_US)));
	jobq_spi_exec(jobq_plan_generic(&plan_queue_lock,
									"SELECT 1 FROM jobq.queue WHERE name = $1 FOR NO KEY UPDATE",
									1, types),
				  values, NULL, SPI_OK_SELECT);

	if (q->max_concurrency > 0 || q->throttled)
	{
		jobq_spi_exec_latest(jobq_plan_generic(&plan_count_running,
											   "SELECT count(*) FROM jobq.job WHERE queue = $1"
											   " AND lease_expires_at IS NOT NULL AND status = 'running'",
											   1, types),
							 values, NULL, SPI_OK_SELECT);
		running = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (q->max_concurrency > 0)
			batch = (int32) Max(0, Min(batch, q->max_concurrency - running));
		if (q->throttled)
			batch = (int32) Max(0, Min(batch, 1 - running));
	}
	if (q->rate_limit > 0 && batch > 0)
	{
		int64		used;

		jobq_spi_exec_latest(jobq_plan_generic(&plan_rate_trim,
											   "DELETE FROM jobq.rate_window WHERE queue = $1 AND claimed_at <= $2",
											   2, types),
							 values, NULL, SPI_OK_DELETE);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_rate_count,
											   "SELECT count(*) FROM jobq.rate_window WHERE queue = $1",
											   1, types),
							 values, NULL, SPI_OK_SELECT);
		used = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		batch = (int32) Max(0, Min(batch, q->rate_limit - used));
		if (batch == 0)
		{
			/* the window frees a claim when its oldest one leaves it */
			jobq_spi_exec_latest(jobq_plan_generic(&plan_rate_oldest,
												   "SELECT min(claimed_at) FROM jobq.rate_window WHERE queue = $1",
												   1, types),
								 values, NULL, SPI_OK_SELECT);
			claim_retry_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
															   SPI_tuptable->tupdesc, 1, &isnull));
			if (isnull)
				claim_retry_at = TimestampTzPlusMilliseconds(now, JOBQ_LIMITED_POLL_MS);
			else
				claim_retry_at = jobq_timestamp_add(claim_retry_at,
													Min(jobq_interval_usecs(&q->rate_period),
														JOBQ_MAX_INTERVAL_US) + 1000);
			return 0;
		}
	}
	if (batch == 0)
		claim_retry_at = TimestampTzPlusMilliseconds(now, JOBQ_LIMITED_POLL_MS);
	return batch;
}

/*
 * Record n claims of a rate-limited queue at now (sliding window): the time
 * their leases start (their jobs' claimed_at), so that no claim leaves the
 * window before its job's claimed_at is a period old.
 */
static void
RateSpend(const char *queue, int n, TimestampTz now)
{
	Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(n);
	jobq_spi_exec(jobq_plan_generic(&plan_rate_spend,
									"INSERT INTO jobq.rate_window (queue, claimed_at)"
									" SELECT $1, $2 FROM generate_series(1, $3)",
									3, types),
				  values, NULL, SPI_OK_INSERT);
}

/* One claimed row and its position in the queue. */
typedef struct JobqClaimed
{
	JobqClaimPos pos;
	JobqClaimedRow *row;
} JobqClaimed;

/* The validated arguments of a claim. */
typedef struct JobqClaimArgs
{
	const char *queue;
	const char *worker_id;
	int32		batch;
	Interval   *lease;			/* NULL: the queue's */
	ArrayType  *kinds;			/* NULL: any kind */
} JobqClaimArgs;

/*
 * One claim attempt (SPI connected): put the claimed jobs, in claim order,
 * into rsinfo's tuplestore and return how many.  *promoted tells whether it
 * moved due delayed jobs into jobq.ready.
 */
static uint64
ClaimOnce(const JobqClaimArgs *args, ReturnSetInfo *rsinfo, bool *promoted)
{
	const char *queue = args->queue;
	const char *worker_id = args->worker_id;
	int32		batch = args->batch;
	Interval   *lease = args->lease;
	ArrayType  *kinds = args->kinds;
	JobqQueue	q;
	TimestampTz now;
	Oid			relid;
	JobqClaimPos pos;
	JobqClaimPos start;
	uint64		kinds_id = 0;
	bool		from_kinds;
	const JobqClaimPos *kinds_last = NULL;
	JobqClaimIsland island;
	bool		two_pass;
	const JobqClaimPos *island_last = NULL;
	bool		island_done = false;
	uint64		island_rows = 0;
	JobqClaimPassed passed;
	const JobqClaimPos *last = NULL;
	MemoryContext keys_cxt = NULL;
	uint64		epoch;
	bool		limited;
	JobqDirectClaim dc;
	JobqClaimedRow *claimed = NULL;
	JobqClaimed *rows;
	uint64		nrows = 0;

	*promoted = false;
	claim_retry_at = 0;
	if (!jobq_queue_get(queue, &q) || q.paused)
		return 0;

	limited = q.max_concurrency > 0 || q.max_per_key > 0 || q.rate_limit > 0 || q.throttled;
	if (limited)
	{
		batch = ClaimAllowance(queue, &q, batch, GetCurrentTimestamp());
		if (batch == 0)
			return 0;
	}
	/* after any wait for the queue lock: the lease starts now */
	now = GetCurrentTimestamp();
	relid = jobq_ready_relid();
	dc.kinds = NULL;
	dc.kind_nulls = NULL;
	dc.nkinds = 0;
	if (kinds != NULL)
	{
		deconstruct_array(kinds, TEXTOID, -1, false, TYPALIGN_INT, &dc.kinds, &dc.kind_nulls,
						  &dc.nkinds);
		kinds_id = jobq_state_kinds_id(dc.kinds, dc.kind_nulls, dc.nkinds);
	}
	epoch = jobq_state_begin_claim(relid, queue, kinds_id, &pos, &start, &island);
	*promoted = PromoteDue(relid, queue, now, &start);

	/*
	 * started at its kinds' position, past rows of other kinds it does not
	 * see
	 */
	from_kinds = jobq_claim_pos_compare(&start, &pos) > 0;

	/*
	 * With an island (claimable rows before the position, shmem/shm_queue.c)
	 * the claim scans it first, then goes on from the position.  A claim that
	 * also starts before the position (rows its own transaction made ready)
	 * scans once, from the least of them.
	 */
	two_pass = island.valid && jobq_claim_pos_compare(&start, &island.pos) >= 0;
	if (island.valid && !two_pass && jobq_claim_pos_compare(&island.lo, &start) < 0)
		start = island.lo;

	/* a queue's lease longer than jobq accepts (set some other way) is cut */
	if (lease == NULL && (jobq_interval_usecs(&q.lease) > JOBQ_MAX_INTERVAL_US ||
						  !jobq_interval_in_range(&q.lease)))
		lease = jobq_interval_from_usecs(Max(Min(jobq_interval_usecs(&q.lease),
												 JOBQ_MAX_INTERVAL_US), 1));
	jobq_state_claim_begin(queue, two_pass ? &island.lo : &start);
	dc.queue = queue;
	dc.batch = batch;
	dc.start = start;
	dc.now = now;
	dc.lease = lease ? lease : &q.lease;
	dc.worker_id = worker_id ? CStringGetTextDatum(worker_id) : (Datum) 0;
	/* the random part of the claim's lease tokens (job_lease.c) */
	dc.token_salt = (int64) (pg_prng_uint32(&pg_global_prng_state) & 0x7fffffff);
	dc.has_island = two_pass;
	dc.island_lo = island.lo;
	dc.island_hi = island.hi;
	dc.max_per_key = q.max_per_key;
	dc.key_counts = NULL;
	if (q.max_per_key > 0)
	{
		/*
		 * The running jobs by key, read after the queue's lock as
		 * ClaimAllowance reads its counts; the scan passes over the rows of
		 * keys at the limit, counting those it takes.  In a context of this
		 * attempt's: a waiting claim makes many.
		 */
		Oid			type = TEXTOID;
		Datum		name = CStringGetTextDatum(queue);
		MemoryContext old;

		jobq_spi_exec_latest(jobq_plan_generic(&plan_running_keys,
											   "SELECT j.concurrency_key, count(*) FROM jobq.job j"
											   " WHERE j.queue = $1 AND j.lease_expires_at IS NOT NULL"
											   " AND j.status = 'running' AND j.concurrency_key IS NOT NULL"
											   " GROUP BY 1",
											   1, &type),
							 &name, NULL, SPI_OK_SELECT);
		keys_cxt = AllocSetContextCreate(CurrentMemoryContext, "jobq running jobs by key",
										 ALLOCSET_DEFAULT_SIZES);
		old = MemoryContextSwitchTo(keys_cxt);
		dc.key_counts = jobq_key_counts_create();
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			bool		isnull;

			jobq_key_counts_add(dc.key_counts,
								DatumGetTextPP(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull)),
								DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)));
		}
		MemoryContextSwitchTo(old);
		/* the leases start after what the count saw: a job finished then */
		dc.now = GetCurrentTimestamp();
	}
	jobq_claim_direct(&dc, &claimed, &nrows, &island_rows, &passed);
	if (keys_cxt != NULL)
		MemoryContextDelete(keys_cxt);
	/* a waiting claim makes an attempt per wake-up, in one context */
	if (dc.kinds != NULL)
	{
		pfree(dc.kinds);
		pfree(dc.kind_nulls);
	}

	/*
	 * A key at its limit gets room when one of its jobs ends, which wakes no
	 * waiting claim: look again soon, as while max_concurrency holds.
	 */
	if (passed.full_key && nrows < (uint64) batch)
		claim_retry_at = TimestampTzPlusMilliseconds(now, JOBQ_LIMITED_POLL_MS);

	rows = palloc(sizeof(JobqClaimed) * Max(nrows, 1));
	for (uint64 i = 0; i < nrows; i++)
	{
		rows[i].row = &claimed[i];
		rows[i].pos.neg_priority = DatumGetInt32(claimed[i].values[10]);
		rows[i].pos.run_at = DatumGetTimestampTz(claimed[i].values[11]);
		rows[i].pos.job_id = DatumGetInt64(claimed[i].values[0]);
		jobq_state_note_unready(queue, &rows[i].pos);
	}
	jobq_state_claim_end(queue);
	/* the shared pool serves this database again when these leases end */
	if (nrows > 0)
		jobq_bgw_note_lease(DatumGetTimestampTz(rows[0].row->values[9]));

	/*
	 * Move the queue's position (and its island's start) past what this claim
	 * consumed, up to the first row it passed over (of a kind it did not ask
	 * for, or of a key at its limit): that row is still to be claimed.  Not
	 * under a transaction snapshot, which may predate rows that were
	 * committed before this claim began.  (The workers of jobq's libraries
	 * always name their kinds: a claim that passed over a row had to leave
	 * the position where it was, and then claims walked every row claimed
	 * since the last vacuum.)  A claim that started at its kinds' position,
	 * past the queue's, did not see the rows between them: it leaves the
	 * queue's position alone.
	 */
	if (from_kinds)
		last = NULL;
	else if (passed.after)
		last = &passed.at;
	else if (passed.ended)
		last = &passed.end;
	else if (nrows > island_rows)
		last = &rows[nrows - 1].pos;

	/*
	 * Its kinds position: up to the first row of its kinds it passed over,
	 * else the queue's last visible row when it read to the end, else its
	 * last claimed row (its batch is full).  Claims that all name the same
	 * kinds so move both positions alike.
	 */
	if (kinds_id != 0 && passed.scanned)
	{
		if (passed.own_after)
			kinds_last = &passed.own_at;
		else if (passed.ended)
			kinds_last = &passed.end;
		else if (nrows > island_rows)
			kinds_last = &rows[nrows - 1].pos;
	}
	if (two_pass)
	{
		island_done = !passed.in_island && island_rows < (uint64) batch;
		if (passed.in_island)
			island_last = &passed.island_at;
		else if (island_rows > 0)
			island_last = &rows[island_rows - 1].pos;
	}
	else if (island.valid)
	{
		/* one scan from the island's lo (or before) on */
		island_last = last;
		if (passed.after)
			island_done = jobq_claim_pos_compare(&passed.at, &island.hi) > 0;
		else
			island_done = nrows < (uint64) batch ||
				jobq_claim_pos_compare(last, &island.hi) >= 0;
	}
	if ((last != NULL || island.valid || kinds_last != NULL) && !IsolationUsesXactSnapshot())
		jobq_state_end_claim(relid, queue, epoch, &island, island_last, island_done, last,
							 kinds_id, kinds_last);
	if (limited && q.rate_limit > 0 && nrows > 0)
		RateSpend(queue, (int) nrows, dc.now);

	for (uint64 i = 0; i < nrows; i++)
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, rows[i].row->values,
							 rows[i].row->nulls);
	return nrows;
}

/*
 * One attempt of a waiting claim, in a subtransaction of its own that is
 * rolled back when it claims nothing, so that between attempts the claim
 * holds no locks (a limited queue's row, promoted rows) and leaves nothing
 * behind.  Returns the number of jobs claimed; *promoted as for ClaimOnce.
 */
typedef struct ClaimAttemptCall
{
	const JobqClaimArgs *args;
	ReturnSetInfo *rsinfo;
	bool	   *promoted;
	uint64		n;
} ClaimAttemptCall;

/* The attempt itself: kept when it claimed or promoted something. */
static bool
ClaimAttemptRun(void *arg)
{
	ClaimAttemptCall *c = (ClaimAttemptCall *) arg;

	c->n = ClaimOnce(c->args, c->rsinfo, c->promoted);
	return c->n > 0 || *c->promoted;
}

static uint64
ClaimAttempt(const JobqClaimArgs *args, ReturnSetInfo *rsinfo, bool *promoted)
{
	ClaimAttemptCall c = {args, rsinfo, promoted, 0};
	ErrorData  *edata;

	/*
	 * An error (a cancel, statement_timeout) ends the attempt's
	 * subtransaction before it leaves: else an exception block around the
	 * claim would roll back only that, and keep its own writes.
	 */
	edata = jobq_subxact_run(ClaimAttemptRun, &c);
	if (edata != NULL)
		ReThrowError(edata);
	return c.n;
}

/* ----------------------------------------------------------------
 * Claim-only transactions commit asynchronously (jobq.async_claim)
 *
 * A worker's claim usually is a transaction of its own, and its commit
 * waits for a WAL flush that protects nothing jobq needs: a claim lost in a
 * crash is a lease that expired at once.  The job is pending again with the
 * attempt count it had, and the lost lease's token is refused by complete,
 * fail, extend and checkpoint, as the token of a claim that rolled back
 * is.  Any commit after it (a completion, an enqueue) flushes the WAL up to
 * itself, the claim's included.
 *
 * So the commit of a transaction whose WAL is the claims' alone is made
 * asynchronous (synchronous_commit = off for that commit).  "Alone": when
 * the first claim of the transaction begins, the transaction has no
 * transaction id yet (it wrote nothing of its own; the backend may have
 * written WAL that belongs to no transaction, such as pruning a catalog page
 * it read, which a crash may lose harmlessly); after that XactLastRecEnd,
 * the end of the last WAL record this backend wrote, must not have moved
 * between one claim's end and the next one's start, and must still be where
 * the last claim left it at commit.  Anything else written in the
 * transaction, before, between or after the claims, keeps the commit
 * synchronous.
 * ---------------------------------------------------------------- */

static LocalTransactionId claim_lxid = InvalidLocalTransactionId;
static bool claim_only;			/* only claims wrote WAL in claim_lxid */
static XLogRecPtr claim_end;	/* XactLastRecEnd at the last claim's end */
static bool claim_callback_registered = false;

static void
ClaimOnlyXactCallback(XactEvent event, void *arg)
{
	if (claim_lxid != MyLocalTransactionId)
		return;
	if (event != XACT_EVENT_PRE_COMMIT)
	{
		/* a transaction that ends otherwise forgets its claims too */
		if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PRE_PREPARE)
			claim_lxid = InvalidLocalTransactionId;
		return;
	}
	claim_lxid = InvalidLocalTransactionId;

	/*
	 * Not in a background worker: an executor runs its handler right after
	 * its claim, and a handler that crashes the server would lose the claim
	 * every time, its attempts never counted, never dead-lettered.  Not when
	 * synchronous_commit asks for more or less than its default.
	 */
	if (jobq_async_claim && claim_only && claim_end != InvalidXLogRecPtr &&
		XactLastRecEnd == claim_end && !AmBackgroundWorkerProcess() &&
		synchronous_commit == SYNCHRONOUS_COMMIT_ON)
		(void) set_config_option("synchronous_commit", "off", PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/* A claim is about to write. */
static void
ClaimBegins(void)
{
	if (!claim_callback_registered)
	{
		RegisterXactCallback(ClaimOnlyXactCallback, NULL);
		claim_callback_registered = true;
	}
	if (claim_lxid != MyLocalTransactionId)
	{
		claim_lxid = MyLocalTransactionId;
		claim_only = !TransactionIdIsValid(GetTopTransactionIdIfAny());
		claim_end = XactLastRecEnd;
	}
	else if (XactLastRecEnd != claim_end)
		claim_only = false;
}

/* A claim wrote what it had to (or nothing). */
static void
ClaimEnds(void)
{
	claim_end = XactLastRecEnd;
}

/*
 * jobq.claim(queue, worker_id, batch, lease, kinds, wait) -> claimed jobs
 *
 * Due delayed jobs are promoted first; then up to batch rows are deleted
 * from the head of the queue's part of jobq.ready (FOR UPDATE SKIP LOCKED,
 * starting at the queue's claim position) and their jobs marked running
 * with a fresh lease token.
 *
 * With wait > 0 and nothing claimable, the claim sleeps on the queue's
 * condition variable in shared memory until a transaction that made a job
 * ready commits (shmem/shm_queue.c broadcasts from its commit callback), the
 * queue's next delayed job is due, a limit that held the claim back may
 * allow one (the rate window's oldest claim leaves it; max_concurrency is
 * looked at again every JOBQ_LIMITED_POLL_MS), or wait is over; a query cancel or
 * statement_timeout ends the sleep.  No LISTEN/NOTIFY, no session state:
 * it works through transaction-mode poolers.
 */
Datum
jobq_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JobqClaimArgs args;
	int64		wait_us = 0;
	TimestampTz deadline;
	ConditionVariable *cv;
	bool		promoted;
	JobqSavedUser saved;

	args.queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	args.worker_id = jobq_name_arg(fcinfo, 1, "worker_id", jobq_max_name_length, true);
	jobq_require_arg(fcinfo, 2, "batch");
	args.batch = PG_GETARG_INT32(2);
	if (args.batch < 1 || args.batch > jobq_max_batch)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch must be between 1 and %d", jobq_max_batch),
				 errdetail("The batch given was %d.", args.batch),
				 errhint("The limit is set by jobq.max_batch.")));
	args.lease = PG_ARGISNULL(3) ? NULL : jobq_positive_interval_arg(fcinfo, 3, "lease");
	args.kinds = NULL;
	if (!PG_ARGISNULL(4))
	{
		Datum	   *elems;
		bool	   *nulls;
		int			n;

		args.kinds = PG_GETARG_ARRAYTYPE_P(4);
		jobq_array_arg(args.kinds, TEXTOID, "kinds", &elems, &nulls, &n);
		jobq_check_name_elements(elems, nulls, n, "kinds", jobq_max_name_length);
	}
	if (!PG_ARGISNULL(5))
	{
		wait_us = jobq_check_interval_arg(PG_GETARG_INTERVAL_P(5), "wait", 0,
										  JOBQ_MAX_WAIT_US);
		if (wait_us > 0 && IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("claim with wait requires the READ COMMITTED isolation level"),
					 errhint("A transaction snapshot would never see the jobs it waits for.")));
	}

	InitMaterializedSRF(fcinfo, 0);
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, args.queue, JOBQ_CAP_WORK);

	ClaimBegins();
	if (wait_us == 0)
	{
		ClaimOnce(&args, rsinfo, &promoted);
		ClaimEnds();
		jobq_owner_end(&saved);
		return (Datum) 0;
	}

	deadline = GetCurrentTimestamp() + wait_us;
	cv = jobq_state_wait_begin(args.queue);
	for (;;)
	{
		TimestampTz now;
		TimestampTz wake;
		long		timeout_ms;

		uint64		seq = jobq_state_wake_seq(args.queue);

		if (ClaimAttempt(&args, rsinfo, &promoted) > 0 || promoted)
			break;
		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;

		/*
		 * Register for wake-ups only now: the attempt's subtransaction
		 * rollback cancels any earlier registration.  A commit that made rows
		 * ready while we were looking bumped the wake sequence, so look again
		 * at once instead of sleeping through it.
		 */
		if (cv)
		{
			ConditionVariablePrepareToSleep(cv);
			if (jobq_state_wake_seq(args.queue) != seq)
				continue;
		}
		wake = jobq_state_next_due(args.queue);
		if (wake == 0 || wake > deadline)
			wake = deadline;
		/* a limit held the attempt back: look again when it may allow one */
		if (claim_retry_at != 0 && claim_retry_at < wake)
			wake = Max(claim_retry_at, now);
		timeout_ms = Max((wake - now + 999) / 1000, 1);
		if (cv)
			(void) ConditionVariableTimedSleep(cv, Min(timeout_ms, JOBQ_MAX_WAIT_SLEEP_MS),
											   PG_WAIT_EXTENSION);
		else
		{
			/* not preloaded: no shared memory to be woken through; poll */
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(timeout_ms, 100), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	jobq_state_wait_end();		/* cancels the sleep, if any */
	ClaimEnds();
	jobq_owner_end(&saved);
	return (Datum) 0;
}
