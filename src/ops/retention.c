/*-------------------------------------------------------------------------
 *
 * ops/retention.c
 *	  Pruning: finished jobs leave jobq.job after their queue's retention
 *	  (completed and cancelled: retention_completed, default 1 day; failed:
 *	  retention_failed, default 30 days), and idempotency keys leave
 *	  jobq.idempotency_key once their job is pruned and
 *	  jobq.idempotency_retention has passed since it finished.
 *
 * Work is done in batches of a few hundred rows, each batch one short
 * transaction in the background worker, with SKIP LOCKED so pruning never
 * waits on (or blocks) anything else.  A pruned job's attempt history goes
 * with it.
 *
 * Each queue and the expired keys are units that fail alone (contain.c):
 * one queue whose retention cannot be computed (a value too large for a
 * timestamp, planted before configure checked it) is logged once and left
 * unpruned, and every other queue is pruned as usual.  The queues that work
 * are pruned together, in one statement, as before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "contain.h"
#include "guc.h"
#include "spi.h"
#include "ops/app_workers.h"
#include "ops/handler_registry.h"
#include "ops/retention.h"
#include "queue/job_lease.h"
#include "shmem/shm_bgw.h"
#include "workflow/settle.h"

PG_FUNCTION_INFO_V1(jobq_prune);

static SPIPlanPtr plan_prune_queues;
static SPIPlanPtr plan_prune_victims;
static SPIPlanPtr plan_prune_victims_depend;
static SPIPlanPtr plan_prune_by_time;
static SPIPlanPtr plan_prune_by_time_depend;
static SPIPlanPtr plan_prune_after;
static SPIPlanPtr plan_prune_after_depend;
static SPIPlanPtr plan_prune_keys;

/*
 * Queues whose pruning failed when they were last pruned on their own
 * (names in TopMemoryContext): they are pruned one by one until they work
 * again, the others together.
 */
static List *failing_queues = NIL;

/* Pruning of some queues' jobs (or of the keys), as a unit. */
typedef struct JobqPruneUnit
{
	Datum		queues;			/* text[]: the queues to prune */
	int			limit;			/* most rows to delete */
	TimestampTz now;
	bool		take_turns;		/* start after the pair the last batch ended
								 * in */
	int64		deleted;		/* out: rows deleted */
} JobqPruneUnit;

/*
 * The (queue, status) pair where the last batch of the queues pruned
 * together ran out of its limit ("": it ran out of rows).  The next batch
 * starts after it and comes round to it last, so the pairs take turns: one
 * queue's backlog of due jobs is pruned a batch at a time, with every other
 * queue's due jobs between two of its batches, instead of to its end before
 * the queues named after it (until 0.3.7).  The turn is the database's, in
 * its slot of shared memory, for the worker's passes (each one a process
 * of its own in the shared pool) and every session's jobq.prune() alike;
 * here only when the database has no slot (a review of the first version,
 * which kept it here: a new session, or the pool's next pass, started at
 * the first queue again).
 */
static char turn_queue[JOBQ_MAX_NAME_LEN + 1];
static char turn_status[JOBQ_STATUS_SIZE];

/* The turn into queue and status; false when there is none. */
static bool
GetTurn(char *queue, char *status)
{
	int			shared = jobq_bgw_prune_turn(queue, status);

	if (shared >= 0)
		return shared > 0;
	strlcpy(queue, turn_queue, sizeof(turn_queue));
	strlcpy(status, turn_status, sizeof(turn_status));
	return queue[0] != '\0';
}

/* Set the turn (queue NULL: none). */
static void
PutTurn(const char *queue, const char *status)
{
	strlcpy(turn_queue, queue ? queue : "", sizeof(turn_queue));
	strlcpy(turn_status, status ? status : "", sizeof(turn_status));
	jobq_bgw_set_prune_turn(queue, status);
}

/*
 * Pruning takes two statements with the rows' deletion between them.  The
 * first picks the victims; victim holds more conditions on a job pruned.
 * c holds each queue's two cutoffs (a retention that is NULL keeps for
 * ever), all computed before any job is read (the one-time filter), so a
 * queue whose cutoff cannot be computed fails the statement whatever its
 * jobs.  Then p walks the (queue, status) pairs that have finished jobs,
 * one descent of job_finished_queue_idx (queue, status, finish time) each,
 * and for each the scan walks that queue's jobs of that status up to the
 * status's cutoff (looked up by the queue's name: a join with jobq.queue
 * could be hashed, and would return the pairs out of order) and no further: the jobs still kept are never read, a
 * queue with no finished job costs nothing, and one queue's jobs cost
 * nothing to another's pruning (0.3.7 on; until then one walk by finish
 * time over every queue read each job finished before the latest cutoff:
 * every queue's failed jobs kept 30 days, on each pass).  The walk goes on
 * after ($4, $5, $6, $7): queue, status, finish time and row, in the order
 * the statement returns them, which its shape fixes whatever the plan: p's
 * pairs in index order (a recursive walk), each one's jobs in index order
 * (a lateral scan with a LIMIT, which can only be joined by a nested loop
 * under p); the index holds equal times in row order, which $7 continues.
 * The scan is ordered by the finish time alone, which the index gives: by
 * (time, row) it sorted every due job of the pair for each batch (this
 * change's first versions: 200,000 due jobs in one queue took 420 batches
 * of 70-100 ms, a review's find).
 * A walk that saw a pair out of order would end the pass early, leaving
 * the pairs before it to the next pass (0.3.7's first version, whose plan
 * after five passes hashed the cutoffs' join: a tenant holding its own
 * due jobs stopped the pruning of every queue named before its own).
 * It takes no row lock: the rows are deleted without waiting
 * (jobq_delete_rows_nowait), which passes over a row another transaction
 * holds or changed, as FOR UPDATE SKIP LOCKED would.
 */
#define JOBQ_PRUNE_VICTIMS_SQL(victim) \
	"WITH RECURSIVE c AS MATERIALIZED (SELECT name, $1 - retention_completed AS done_before," \
	" $1 - retention_failed AS failed_before FROM jobq.queue WHERE name = ANY ($3))," \
	" p(queue, status) AS ((SELECT j.queue, j.status FROM jobq.job j" \
	" WHERE j.finished_at IS NOT NULL AND (j.queue, j.status) >= ($4, $5)" \
	" ORDER BY j.queue, j.status LIMIT 1)" \
	" UNION ALL SELECT n.queue, n.status FROM p CROSS JOIN LATERAL (SELECT j.queue, j.status" \
	" FROM jobq.job j WHERE j.finished_at IS NOT NULL AND (j.queue, j.status) > (p.queue, p.status)" \
	" ORDER BY j.queue, j.status LIMIT 1) n)" \
	" SELECT v.ctid, v.job_id, v.kind, v.idempotency_key, v.finished_at, p.queue, p.status" \
	" FROM p CROSS JOIN LATERAL (SELECT j.ctid, j.job_id, j.kind, j.idempotency_key, j.finished_at" \
	" FROM jobq.job j WHERE j.queue = p.queue AND j.status = p.status" \
	" AND j.finished_at < (SELECT CASE WHEN p.status = 'failed' THEN $1 - q.retention_failed" \
	" WHEN p.status IN ('completed', 'cancelled') THEN $1 - q.retention_completed END" \
	" FROM jobq.queue q WHERE q.name = p.queue) AND p.queue = ANY ($3)" \
	" AND j.finished_at >= CASE WHEN p.queue = $4 AND p.status = $5 THEN $6" \
	" ELSE '-infinity'::timestamptz END" \
	" AND (p.queue <> $4 OR p.status <> $5 OR j.finished_at > $6 OR j.ctid > $7)" victim \
	" ORDER BY j.finished_at LIMIT $2) v" \
	" WHERE (SELECT count(*) FROM c) >= 0" \
	" LIMIT $2"

/*
 * The same for a database before 0.3.7, whose job_finished_idx holds the
 * finished jobs by finish time alone: one walk in that order up to the
 * latest cutoff, the status picking the cutoff that applies to each job,
 * after ($6, $7).  $4 and $5 are there for the parameters' sake.
 */
#define JOBQ_PRUNE_VICTIMS_BY_TIME_SQL(victim) \
	"WITH c AS MATERIALIZED (SELECT name, $1 - retention_completed AS done_before," \
	" $1 - retention_failed AS failed_before" \
	" FROM jobq.queue WHERE name = ANY ($3))" \
	" SELECT j.ctid, j.job_id, j.kind, j.idempotency_key, j.finished_at, $4::text, $5::text" \
	" FROM jobq.job j JOIN c ON c.name = j.queue" \
	" WHERE j.finished_at < (SELECT max(greatest(done_before, failed_before)) FROM c)" \
	" AND ((j.status IN ('completed', 'cancelled') AND j.finished_at < c.done_before)" \
	" OR (j.status = 'failed' AND j.finished_at < c.failed_before))" victim \
	" AND j.finished_at >= $6 AND (j.finished_at > $6 OR j.ctid > $7)" \
	" ORDER BY j.finished_at LIMIT $2"

/*
 * The second goes over the jobs deleted (dj): their attempts go, their
 * idempotency keys start to expire, and extra (more CTEs over dj) does the
 * rest.
 */
#define JOBQ_PRUNE_AFTER_SQL(extra) \
	"WITH dj AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::timestamptz[])" \
	" AS d(job_id, kind, idempotency_key, finished_at))," \
	" da AS (DELETE FROM jobq.attempt a USING dj WHERE a.job_id = dj.job_id)," \
	" dk AS (UPDATE jobq.idempotency_key k SET expires_at = dj.finished_at + $5" \
	" FROM dj WHERE k.kind = dj.kind AND k.key = dj.idempotency_key" \
	" AND k.job_id = dj.job_id)" extra \
	" SELECT count(*) FROM dj"

/*
 * 0.2.0 on: a pruned job's own parents are forgotten; its dependents keep
 * its outcome in their jobq.dependency rows.  A parent whose settling was
 * deferred (jobq.settle_deferred) stays until it is settled: its outcome is
 * still to be given to some of its dependents.
 */
#define JOBQ_PRUNE_VICTIM_DEPEND \
	" AND NOT EXISTS (SELECT FROM jobq.settle_deferred s WHERE s.parent_id = j.job_id)"
#define JOBQ_PRUNE_DEPEND \
	", dd AS (DELETE FROM jobq.dependency d USING dj WHERE d.child_id = dj.job_id)," \
	" dt AS (DELETE FROM jobq.dependent t USING dj WHERE t.job_id = dj.job_id)"

/*
 * After the victims' rows were deleted: their attempts, keys and edges
 * (JOBQ_PRUNE_AFTER_SQL) for the n of them whose columns are cols[].
 */
static void
PruneAfter(Datum **cols, bool **colnulls, int n, bool depend)
{
	static const Oid coltypes[4] = {INT8OID, TEXTOID, TEXTOID, TIMESTAMPTZOID};
	Oid			types[5] = {INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID,
	TIMESTAMPTZARRAYOID, INTERVALOID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	Interval	key_retention;

	jobq_columns_arrays(4, coltypes, cols, colnulls, n, values);
	/* a key's retention of -1 keeps it for ever: its expires_at stays NULL */
	memset(&key_retention, 0, sizeof(key_retention));
	key_retention.time = (int64) jobq_idempotency_retention * USECS_PER_SEC;
	values[4] = IntervalPGetDatum(&key_retention);
	nulls[4] = jobq_idempotency_retention < 0 ? 'n' : ' ';
	jobq_spi_exec(jobq_plan(depend ? &plan_prune_after_depend : &plan_prune_after,
							depend ? JOBQ_PRUNE_AFTER_SQL(JOBQ_PRUNE_DEPEND)
							: JOBQ_PRUNE_AFTER_SQL(""),
							5, types),
				  values, nulls, SPI_OK_SELECT);
}

/*
 * Where a prune's walk is, in (time, row) order, and for the jobs in
 * (queue, status, time, row) order: the last row it saw.  Rows that another
 * transaction holds are passed over and the walk goes on past them, as SKIP
 * LOCKED would: rows a tenant keeps locked cannot stop the pruning of the
 * others.
 */
typedef struct PruneWalk
{
	text	   *queue;			/* the jobs' walk only */
	text	   *status;
	TimestampTz after;
	ItemPointerData after_tid;
} PruneWalk;

static void
WalkStart(PruneWalk *w)
{
	w->queue = cstring_to_text("");
	w->status = cstring_to_text("");
	w->after = DT_NOBEGIN;
	ItemPointerSet(&w->after_tid, 0, 0);
}

/* Start the jobs' walk after every job of the pair (queue, status). */
static void
WalkStartAfter(PruneWalk *w, const char *queue, const char *status)
{
	WalkStart(w);
	w->queue = cstring_to_text(queue);
	w->status = cstring_to_text(status);
	w->after = DT_NOEND;
}

/* Remember where a batch that ran out of its limit ended (NULL: it did not). */
static void
SetTurn(PruneWalk *w)
{
	if (w == NULL)
		PutTurn(NULL, NULL);
	else
		PutTurn(text_to_cstring(w->queue), text_to_cstring(w->status));
}

/*
 * Move w past the rows of the last SPI statement (ctid first, the walk's
 * time in column 1 + tcol, for the jobs' walk the queue and status after
 * it).
 */
static void
WalkPast(PruneWalk *w, int tcol, bool jobs)
{
	HeapTuple	last = SPI_tuptable->vals[SPI_processed - 1];
	TupleDesc	desc = SPI_tuptable->tupdesc;
	bool		isnull;

	w->after = DatumGetTimestampTz(SPI_getbinval(last, desc, tcol + 1, &isnull));
	ItemPointerCopy((ItemPointer) DatumGetPointer(SPI_getbinval(last, desc, 1, &isnull)),
					&w->after_tid);
	if (jobs)
	{
		w->queue = DatumGetTextPCopy(SPI_getbinval(last, desc, tcol + 2, &isnull));
		w->status = DatumGetTextPCopy(SPI_getbinval(last, desc, tcol + 3, &isnull));
	}
}

/* Delete up to u->limit finished jobs of u->queues past retention. */
static void
PruneQueues(void *arg)
{
	JobqPruneUnit *u = (JobqPruneUnit *) arg;
	Oid			types[7] = {TIMESTAMPTZOID, INT4OID, TEXTARRAYOID, TEXTOID, TEXTOID,
	TIMESTAMPTZOID, TIDOID};
	Datum		values[7];
	bool		depend = jobq_depend_installed();	/* 0.2.0 on */
	bool		by_queue = jobq_finished_by_queue();	/* 0.3.7 on */
	bool		wrapped;
	char		tq[JOBQ_MAX_NAME_LEN + 1];
	char		ts[JOBQ_STATUS_SIZE];
	PruneWalk	w;

	u->deleted = 0;
	WalkStart(&w);
	/* by time (before 0.3.7) there are no pairs to take turns */
	wrapped = !(u->take_turns && by_queue && GetTurn(tq, ts));
	if (!wrapped)
		WalkStartAfter(&w, tq, ts);
	values[0] = TimestampTzGetDatum(u->now);
	values[2] = u->queues;
	while (u->deleted < u->limit)
	{
		int			want = (int) (u->limit - u->deleted);
		uint64		n;
		int			ndeleted;
		Datum	   *cols[4];
		bool	   *colnulls[4];
		SPIPlanPtr	plan;

		values[1] = Int32GetDatum(want);
		values[3] = PointerGetDatum(w.queue);
		values[4] = PointerGetDatum(w.status);
		values[5] = TimestampTzGetDatum(w.after);
		values[6] = PointerGetDatum(&w.after_tid);
		if (!by_queue)
			plan = jobq_plan(depend ? &plan_prune_by_time_depend : &plan_prune_by_time,
							 depend ? JOBQ_PRUNE_VICTIMS_BY_TIME_SQL(JOBQ_PRUNE_VICTIM_DEPEND)
							 : JOBQ_PRUNE_VICTIMS_BY_TIME_SQL(""),
							 7, types);
		else
			plan = jobq_plan(depend ? &plan_prune_victims_depend : &plan_prune_victims,
							 depend ? JOBQ_PRUNE_VICTIMS_SQL(JOBQ_PRUNE_VICTIM_DEPEND)
							 : JOBQ_PRUNE_VICTIMS_SQL(""),
							 7, types);
		jobq_spi_exec(plan, values, NULL, SPI_OK_SELECT);
		n = SPI_processed;
		if (n > 0)
		{
			WalkPast(&w, 4, true);
			ndeleted = jobq_delete_returned(JOBQ_REL_JOB, 4, cols, colnulls);
			if (ndeleted > 0)
				PruneAfter(cols, colnulls, ndeleted, depend);
			u->deleted += ndeleted;
		}
		if (n < (uint64) want)
		{
			/* no more past retention after the turn's pair: round to it */
			if (wrapped)
				break;
			wrapped = true;
			WalkStart(&w);
		}
	}
	if (u->take_turns)
		SetTurn(u->deleted >= u->limit ? &w : NULL);
}

/* Delete up to u->limit idempotency keys past their expiry. */
static void
PruneKeys(void *arg)
{
	JobqPruneUnit *u = (JobqPruneUnit *) arg;
	Oid			types[4] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TIDOID};
	Datum		values[4];
	PruneWalk	w;

	u->deleted = 0;
	WalkStart(&w);
	values[0] = TimestampTzGetDatum(u->now);
	while (u->deleted < u->limit)
	{
		int			want = (int) (u->limit - u->deleted);
		uint64		n;

		values[1] = Int32GetDatum(want);
		values[2] = TimestampTzGetDatum(w.after);
		values[3] = PointerGetDatum(&w.after_tid);
		/* through idempotency_key_expires_idx: the expired keys only */
		jobq_spi_exec(jobq_plan_generic(&plan_prune_keys,
										"SELECT k.ctid, k.expires_at FROM jobq.idempotency_key k"
										" WHERE k.expires_at < $1 AND k.expires_at >= $3"
										" AND (k.expires_at > $3 OR k.ctid > $4)"
										" ORDER BY k.expires_at LIMIT $2",
										4, types),
					  values, NULL, SPI_OK_SELECT);
		n = SPI_processed;
		if (n == 0)
			break;
		WalkPast(&w, 1, false);
		u->deleted += jobq_delete_returned(JOBQ_REL_IDEMPOTENCY_KEY, 0, NULL, NULL);
		if (n < (uint64) want)
			break;				/* no more expired */
	}
}

/*
 * Delete up to u->limit rows of application workers gone for a day, and up
 * to as many capabilities and workers of roles dropped since.
 */
static void
PruneAppWorkers(void *arg)
{
	JobqPruneUnit *u = (JobqPruneUnit *) arg;

	u->deleted = jobq_prune_app_workers(u->limit, u->now);
}

/* Delete up to u->limit capabilities and handlers of roles dropped since. */
static void
PruneDroppedGrants(void *arg)
{
	JobqPruneUnit *u = (JobqPruneUnit *) arg;

	u->deleted = jobq_prune_dropped_grants(u->limit);
	u->deleted += jobq_prune_dropped_handlers(u->limit);
}

/* A text[] datum of the n names. */
static Datum
NameArray(char **names, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = CStringGetTextDatum(names[i]);
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/* The name of the unit that prunes queue alone, for the log. */
static char *
PruneUnitName(const char *queue)
{
	return psprintf("pruning finished jobs of queue \"%s\"", queue);
}

/*
 * Was queue failing when it was last pruned on its own, by this process or
 * (the shared pool) by an earlier pass of the database's worker?
 */
static bool
QueueFailing(const char *queue)
{
	ListCell   *lc;
	char	   *unit;
	bool		failing;

	foreach(lc, failing_queues)
	{
		if (strcmp((char *) lfirst(lc), queue) == 0)
			return true;
	}
	unit = PruneUnitName(queue);
	failing = jobq_unit_failing(unit);
	pfree(unit);
	return failing;
}

/*
 * Prune one queue as a unit of its own, logged by name (jobq_run_unit);
 * returns the rows deleted, and adds the queue to *failing if it fails.
 */
static int64
PruneOneQueue(char *queue, int limit, TimestampTz now, List **failing)
{
	JobqPruneUnit u;
	char	   *unit = PruneUnitName(queue);

	u.queues = NameArray(&queue, 1);
	u.limit = limit;
	u.now = now;
	u.take_turns = false;
	u.deleted = 0;
	if (!jobq_run_unit(unit, PruneQueues, &u))
		*failing = lappend(*failing, MemoryContextStrdup(TopMemoryContext, queue));
	pfree(unit);
	return u.deleted;
}

/*
 * Delete up to batch finished jobs past retention and up to batch expired
 * keys; returns the number of rows deleted.  Each queue and the keys are
 * units that fail alone: the queues are pruned together in one unit, and
 * when that fails, one by one, to find the queue that fails (a retention
 * too large to compute, say), log it and prune the others.  A queue found
 * failing is pruned alone from then on, until it works again.  The same
 * holds for the worker and for a jobq.prune() from cron.  *more is set when
 * a batch ran out.  SPI must be connected.
 */
int64
jobq_prune_finished(int batch, bool *more)
{
	TimestampTz now = GetCurrentTimestamp();
	JobqPruneUnit u;
	List	   *failing = NIL;
	int64		jobs = 0;
	int64		keys;
	int64		workers;
	int			nqueues;
	int			nhealthy = 0;
	char	  **queues;
	char	  **healthy;
	bool	   *was_failing;
	ListCell   *lc;

	*more = false;
	jobq_spi_exec(jobq_plan(&plan_prune_queues,
							"SELECT name FROM jobq.queue ORDER BY name", 0, NULL),
				  NULL, NULL, SPI_OK_SELECT);
	nqueues = (int) SPI_processed;
	queues = palloc(sizeof(char *) * Max(nqueues, 1));
	healthy = palloc(sizeof(char *) * Max(nqueues, 1));
	was_failing = palloc(sizeof(bool) * Max(nqueues, 1));
	for (int i = 0; i < nqueues; i++)
	{
		queues[i] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		was_failing[i] = QueueFailing(queues[i]);
		if (!was_failing[i])
			healthy[nhealthy++] = queues[i];
	}

	/* the healthy queues together; one by one if one of them fails */
	u.queues = NameArray(healthy, nhealthy);
	u.limit = batch;
	u.now = now;
	u.take_turns = true;
	u.deleted = 0;
	if (nhealthy > 0 && jobq_try_units(PruneQueues, &u))
		jobs = u.deleted;
	else
	{
		/*
		 * one by one, taking turns too: from the queue after the turn's,
		 * round to it ("~" sorts after every status: the next batch starts at
		 * the queue after the last one here).  In name order from the first
		 * (this change's first version), a queue that fails kept the turns
		 * off for every batch until the batches got to it past every backlog
		 * named before it (a review's find).
		 */
		char		tq[JOBQ_MAX_NAME_LEN + 1];
		char		ts[JOBQ_STATUS_SIZE];
		int			start = 0;
		int			last = -1;

		if (GetTurn(tq, ts))
			while (start < nhealthy && strcmp(healthy[start], tq) <= 0)
				start++;
		for (int k = 0; k < nhealthy && jobs < batch; k++)
		{
			last = (start + k) % nhealthy;
			jobs += PruneOneQueue(healthy[last], (int) (batch - jobs), now, &failing);
		}
		PutTurn(jobs >= batch && last >= 0 ? healthy[last] : NULL, "~");
	}

	/* the failing ones alone, until they work again */
	for (int i = 0; i < nqueues; i++)
	{
		if (!was_failing[i])
			continue;
		if (jobs < batch)
			jobs += PruneOneQueue(queues[i], (int) (batch - jobs), now, &failing);
		else
			failing = lappend(failing, MemoryContextStrdup(TopMemoryContext, queues[i]));
	}
	foreach(lc, failing_queues)
		pfree(lfirst(lc));
	list_free(failing_queues);
	failing_queues = NIL;
	if (failing != NIL)
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		failing_queues = list_copy(failing);
		MemoryContextSwitchTo(old);
		list_free(failing);
	}

	u.queues = (Datum) 0;
	u.limit = batch;
	u.deleted = 0;
	(void) jobq_run_unit("pruning expired idempotency keys", PruneKeys, &u);
	keys = u.deleted;
	u.deleted = 0;
	(void) jobq_run_unit("pruning application workers gone for a day", PruneAppWorkers, &u);
	workers = u.deleted;
	u.deleted = 0;
	(void) jobq_run_unit("removing the capabilities of dropped roles", PruneDroppedGrants, &u);

	*more = jobs >= batch || keys >= batch || workers >= batch || u.deleted >= batch;
	return jobs + keys + workers + u.deleted;
}

/* jobq.prune(batch) -> rows deleted */
Datum
jobq_prune(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	int32		batch;
	int64		deleted;
	bool		more;

	batch = jobq_batch_arg(fcinfo, 0);
	jobq_require_writable("jobq.prune()");
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, NULL, JOBQ_CAP_ADMINISTER);
	deleted = jobq_prune_finished(batch, &more);
	jobq_owner_end(&saved);
	PG_RETURN_INT64(deleted);
}
