/*-------------------------------------------------------------------------
 *
 * workflow/settle.c
 *	  Workflows, the finishing side: settling the dependents of jobs that
 *	  finished (unblocked, or cancelled in turn), what a retried parent
 *	  gives back, what a retried dependent waits for, and the background
 *	  worker's settling again of deferred parents (jobq_settle_deferred,
 *	  whose due rows of jobq.settle_deferred each pass takes in one batch).
 *
 * Every path that ends a job (complete, complete_many, fail for good, lease
 * expired for good, cancel) calls jobq_parents_finished; retry calls
 * jobq_parent_retried.  How the enqueue side closes the race with a parent
 * that finishes meanwhile is in workflow/depend.c.
 *
 * Settling reads jobq.dependency and the jobs it names by index probes
 * under the latest snapshot (workflow/edges.c), so that a REPEATABLE READ
 * completion sees dependencies committed after its snapshot was taken, and
 * so that each read costs the rows it concerns whatever the statistics say.
 * It writes edges by the row versions it read (ctid = ANY), and jobs and
 * counters through arrays of ids joined to their primary keys: statements
 * whose plans have nothing to choose that reads more.  A settle is
 * O(children): chunks of JOBQ_SETTLE_CHUNK edges, a few statements each,
 * the chunk's children locked in child order.
 *
 * Budget.  Inside a budget (a background pass: jobq_budget_start), a
 * settle or a retry's treatment that finds the budget spent at a chunk
 * boundary stops there and hands the rest to the next pass through
 * jobq.settle_deferred (jobq_defer_resume): the parents whose edges it has
 * not settled yet, and the dependents it cancelled (or blocked again) whose
 * own dependents it has not reached.  So a cascade down a chain of 1,000
 * jobs takes several passes, none spending much more than its budget on
 * it, and a pass that settles deferred parents again always makes progress
 * (SettleProgressOwed).  A client's own complete, fail, cancel or
 * retry has no budget and settles its whole cascade.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "args.h"
#include "contain.h"
#include "guc.h"
#include "spi.h"
#include "workflow/defer.h"
#include "workflow/edges.h"
#include "workflow/settle.h"

static SPIPlanPtr plan_retried;
static SPIPlanPtr plan_retry_child;
static SPIPlanPtr plan_retry_count;
static SPIPlanPtr plan_again_lock;
static SPIPlanPtr plan_again_exists;
static SPIPlanPtr plan_again_unmark;
static SPIPlanPtr plan_again_ready;
static SPIPlanPtr plan_deferred_take;
static SPIPlanPtr plan_deferred_take_old;
static SPIPlanPtr plan_deferred_queue;
static SPIPlanPtr plan_deferred_any_due;
static SPIPlanPtr plan_deferred_done;
static SPIPlanPtr plan_deferred_next;

/*
 * Set while the worker settles deferred parents again, until a chunk has
 * been done: a pass must make progress whatever it spent before.
 */
static bool progress_owed = false;

/* A pass that settles deferred parents again owes progress (see above). */
static void
SettleProgressOwed(bool owed)
{
	progress_owed = owed;
}

/*
 * Is the budget of the background pass this runs in spent (never, outside
 * one), and no chunk owed?  A chunk done pays what was owed.
 */
static bool
OutOfBudget(bool chunk_done)
{
	if (chunk_done)
		progress_owed = false;
	return !progress_owed && jobq_budget_spent();
}

/* One jobq_parents_finished: its reader, and the parents it defers. */
typedef struct SettleState
{
	JobqReader *reader;
	TimestampTz now;
	JobqTaken	taken;			/* edges taken, their children not decided */
	int64	   *held;			/* parents of children another transaction
								 * holds */
	int			nheld;
	int			capheld;
} SettleState;

/* Note parent, whose child another transaction holds, for deferral. */
static void
NoteHeld(SettleState *st, int64 parent)
{
	if (st->nheld >= st->capheld)
	{
		st->capheld = Max(16, st->capheld * 2);
		st->held = st->held ? repalloc_huge(st->held, sizeof(int64) * st->capheld)
			: palloc(sizeof(int64) * st->capheld);
	}
	st->held[st->nheld++] = parent;
}

/*
 * One chunk of a round over the finished parents round[] (ascending, n of
 * them, their outcomes in outcomes[]): up to JOBQ_SETTLE_CHUNK unsettled
 * edges from (round[*pi], child *after) on, read through
 * dependency_unsettled_idx; *pi and *after end where the chunk did, *more
 * when the round may have more.  The chunk's children are locked in child
 * order (two settles sharing children cannot deadlock within a chunk)
 * without waiting: a child another transaction holds is passed over and its
 * parent deferred.  Then the edges of the children locked are taken
 * (jobq_take_edges), and once JOBQ_DECIDE_EDGES of them have gathered,
 * their children decided (jobq_decide_taken; the rest are decided when the
 * round ends).  Returns how many were cancelled, their ids in *next.
 */
static int
SettleChunk(SettleState *st, const int64 *round, const char *outcomes, int n,
			int *pi, int64 *after, int64 **next, bool *more)
{
	JobqSettledEdge *cand = palloc(sizeof(JobqSettledEdge) * JOBQ_SETTLE_CHUNK);
	int			ncand = 0;
	int64	   *distinct;
	int			ndistinct = 0;
	int64	   *locked;
	int			nlocked;
	int			nedges = 0;
	int			ncancelled;

	*next = NULL;
	jobq_reader_refresh(st->reader);
	while (*pi < n && ncand < JOBQ_SETTLE_CHUNK)
	{
		JobqEdge	e;

		jobq_edges_from(st->reader, JOBQ_UNSETTLED_OF_PARENT, round[*pi], *after);
		while (ncand < JOBQ_SETTLE_CHUNK && jobq_edges_next(st->reader, &e))
		{
			cand[ncand].child = e.child;
			cand[ncand].parent = e.parent;
			cand[ncand].tid = e.tid;
			cand[ncand++].outcome = outcomes[*pi];
			*after = e.child;
		}
		if (ncand >= JOBQ_SETTLE_CHUNK)
			break;				/* this parent may have more */
		(*pi)++;
		*after = PG_INT64_MIN;
	}
	jobq_edges_done(st->reader);
	*more = *pi < n;
	if (ncand == 0)
	{
		pfree(cand);
		return 0;
	}

	/* the children to settle, locked; the edges of the others wait */
	qsort(cand, ncand, sizeof(JobqSettledEdge), jobq_edge_compare);
	distinct = palloc(sizeof(int64) * ncand);
	for (int i = 0; i < ncand; i++)
		if (ndistinct == 0 || distinct[ndistinct - 1] != cand[i].child)
			distinct[ndistinct++] = cand[i].child;
	locked = palloc(sizeof(int64) * ndistinct);
	nlocked = jobq_lock_children(distinct, ndistinct, locked);
	for (int r = 0, i = 0; r < ncand; r++)
	{
		while (i < nlocked && locked[i] < cand[r].child)
			i++;
		if (i < nlocked && locked[i] == cand[r].child)
			cand[nedges++] = cand[r];
		else
			NoteHeld(st, cand[r].parent);
	}
	if (nedges > 0)
		jobq_take_edges(cand, nedges, &st->taken);
	ncancelled = st->taken.n >= JOBQ_DECIDE_EDGES ? jobq_decide_taken(&st->taken, st->now, next) : 0;
	pfree(cand);
	pfree(distinct);
	pfree(locked);
	return ncancelled;
}

/* Append the k ids next[] (pfree'd; may be NULL) to *ids (*n of them). */
static void
AddCancelled(int64 **ids, int *n, int64 *next, int k)
{
	if (k > 0)
	{
		*ids = *ids ? repalloc_huge(*ids, sizeof(int64) * (*n + k)) : palloc(sizeof(int64) * k);
		memcpy(*ids + *n, next, sizeof(int64) * k);
		*n += k;
	}
	if (next)
		pfree(next);
}

/*
 * The jobs ids[] that have finished, sorted and deduplicated into *out
 * (palloc'd), their outcomes into *outcomes; how many.
 */
static int
FinishedOf(SettleState *st, const int64 *ids, int n, int64 **out, char **outcomes)
{
	int64	   *sorted = palloc(sizeof(int64) * Max(n, 1));
	int			k = 0;

	memcpy(sorted, ids, sizeof(int64) * n);
	qsort(sorted, n, sizeof(int64), jobq_id_compare);
	*out = palloc(sizeof(int64) * Max(n, 1));
	*outcomes = palloc(Max(n, 1));
	jobq_reader_refresh(st->reader);
	for (int i = 0; i < n; i++)
	{
		char		s;

		if (i > 0 && sorted[i] == sorted[i - 1])
			continue;
		s = jobq_job_status(st->reader, sorted[i]);
		if (JOBQ_FINISHED(s))
		{
			(*out)[k] = sorted[i];
			(*outcomes)[k++] = s;
		}
	}
	pfree(sorted);
	return k;
}

/*
 * Settle the dependents of the jobs ids[] that have finished (the others
 * are passed over), round after round: the dependents a round cancels
 * settle their own in the next.  The parents of dependents another
 * transaction holds are deferred to the background worker, and so is the
 * rest of the cascade once a background pass's budget is spent (see the
 * file header).  SPI connected, as the extension owner.
 */
void
jobq_parents_finished(const int64 *ids, int n, TimestampTz now)
{
	SettleState st = {0};
	int64	   *round;
	char	   *outcomes;
	int			nround;

	if (!jobq_any_dependents(ids, n))
		return;
	st.reader = jobq_reader_open();
	st.now = now;
	nround = FinishedOf(&st, ids, n, &round, &outcomes);
	if (nround > 0 && OutOfBudget(false))
	{
		jobq_defer_resume(round, nround, false);
		nround = 0;
	}
	while (nround > 0)
	{
		int64	   *cancelled = NULL;
		int			ncancelled = 0;
		int			pi = 0;
		int64		after = PG_INT64_MIN;
		bool		more;
		bool		spent;
		bool		cut = false;

		/*
		 * the round's edges a chunk at a time (memory stays bounded), and
		 * then the children of those not decided yet
		 */
		do
		{
			int64	   *next;
			int			k;

			CHECK_FOR_INTERRUPTS();
			k = SettleChunk(&st, round, outcomes, nround, &pi, &after, &next, &more);
			AddCancelled(&cancelled, &ncancelled, next, k);
			spent = OutOfBudget(true);
		} while (more && !spent);
		{
			int64	   *next;
			int			k = jobq_decide_taken(&st.taken, st.now, &next);

			AddCancelled(&cancelled, &ncancelled, next, k);
		}
		cut = (more || ncancelled > 0) && spent;
		if (cut)
		{
			/* the rest of this round, and the next one, for the next pass */
			if (more)
				jobq_defer_resume(round + pi, nround - pi, false);
			jobq_defer_resume(cancelled, ncancelled, false);
			ncancelled = 0;
		}
		pfree(round);
		pfree(outcomes);
		round = cancelled;
		nround = ncancelled;
		outcomes = palloc(Max(nround, 1));
		if (nround > 0)
		{
			qsort(round, nround, sizeof(int64), jobq_id_compare);
			memset(outcomes, 'x', nround);
		}
	}
	pfree(outcomes);
	if (st.taken.e)
		pfree(st.taken.e);
	jobq_defer_parents(st.held, st.nheld, false);
	jobq_reader_close(st.reader);
}

/*
 * What a retry gives back, from the parents ids[] on (see
 * jobq_parent_retried), breadth first: the parents still to look at are a
 * queue in an array (a long chain brings back one job a step).  Each
 * parent's edges are walked in child order, a chunk of children at a time.
 */
static void
ParentsRetried(const int64 *ids, int n, TimestampTz now)
{
	Oid			types[5] = {TIMESTAMPTZOID, INT8ARRAYOID, INT8ARRAYOID, TIDARRAYOID, INT8OID};
	JobqReader *reader = jobq_reader_open();
	int64	   *children = palloc(sizeof(int64) * JOBQ_SETTLE_CHUNK);
	int64	   *locked = palloc(sizeof(int64) * JOBQ_SETTLE_CHUNK);
	int64	   *others = palloc(sizeof(int64) * JOBQ_SETTLE_CHUNK);
	ItemPointerData *tids = palloc(sizeof(ItemPointerData) * JOBQ_SETTLE_CHUNK);
	uint64		cap = Max(64, n);
	int64	   *todo = palloc(sizeof(int64) * cap);
	uint64		head = 0;
	uint64		tail = n;
	bool		cut = false;

	memcpy(todo, ids, sizeof(int64) * n);
	while (head < tail && !cut)
	{
		int64		parent = todo[head];
		int64		after = PG_INT64_MIN;
		bool		more = true;

		while (more)
		{
			Datum		values[5];
			char		status;
			char		outcome;
			int			nchildren = 0;
			int			nlocked;
			int			nedges;
			JobqEdge	e;

			CHECK_FOR_INTERRUPTS();
			if (OutOfBudget(false))
			{
				/* this parent and those after it, for the next pass */
				jobq_defer_resume(todo + head, (int) (tail - head), true);
				cut = true;
				break;
			}

			/*
			 * The dependents that have not run whose edge took an outcome the
			 * parent no longer has
			 */
			jobq_reader_refresh(reader);
			status = jobq_job_status(reader, parent);
			if (status == 0)
				break;			/* gone (purged): nothing to give back */
			outcome = JOBQ_FINISHED(status) ? status : 0;
			jobq_edges_from(reader, JOBQ_EDGES_OF_PARENT, parent, after);
			while (nchildren < JOBQ_SETTLE_CHUNK && jobq_edges_next(reader, &e))
			{
				char		s;

				after = e.child;
				if (e.outcome == 0 || e.outcome == outcome)
					continue;
				s = jobq_job_status(reader, e.child);
				if (s == 'b' || s == 'x')
					children[nchildren++] = e.child;
			}
			more = nchildren >= JOBQ_SETTLE_CHUNK;
			jobq_edges_done(reader);
			(void) OutOfBudget(true);
			if (nchildren == 0)
				break;

			/* those another transaction holds are left for the worker */
			nlocked = jobq_lock_children(children, nchildren, locked);
			if (nlocked < nchildren)
				jobq_defer_parents(&parent, 1, true);
			if (nlocked == 0)
				continue;

			/*
			 * The edges as they are now (they change only under the child's
			 * lock: one changed since it was read is passed over), and each
			 * child's first other parent that did not complete
			 */
			jobq_reader_refresh(reader);
			nedges = 0;
			for (int i = 0; i < nlocked; i++)
			{
				JobqEdge	edge;

				if (!jobq_edge_of(reader, parent, locked[i], &edge) || edge.outcome == 0)
					continue;
				locked[nedges] = locked[i];
				tids[nedges] = edge.tid;
				others[nedges] = 0;
				jobq_edges_from(reader, JOBQ_EDGES_OF_CHILD, locked[i], 0);
				while (jobq_edges_next(reader, &e))
					if (e.parent != parent && (e.outcome == 'f' || e.outcome == 'x') &&
						(others[nedges] == 0 || e.parent < others[nedges]))
						others[nedges] = e.parent;
				nedges++;
			}
			if (nedges == 0)
				continue;
			values[0] = TimestampTzGetDatum(now);
			values[1] = jobq_id_array(locked, nedges);
			values[2] = jobq_id_array(others, nedges);
			values[3] = jobq_tid_array(tids, nedges);
			values[4] = Int64GetDatum(parent);
			jobq_spi_exec_latest(jobq_plan_generic(&plan_retried,
												   "WITH c AS (SELECT u.id AS child_id, u.edge, j.status,"
												   " t.failed_parent = $5 AND t.on_parent_failure = 'cancel' AS by_it,"
												   " nullif(u.other, 0) AS other"
												   " FROM unnest($2, $3, $4) AS u(id, other, edge)"
												   " JOIN jobq.dependent t ON t.job_id = u.id"
												   " JOIN jobq.job j ON j.job_id = u.id"
												   " WHERE j.status IN ('blocked', 'cancelled')"
												   " FOR NO KEY UPDATE OF t, j),"
												   " e AS (UPDATE jobq.dependency d SET parent_status = NULL"
												   " WHERE d.ctid = ANY (ARRAY(SELECT edge FROM c))),"
												   " t AS (UPDATE jobq.dependent t SET parents_left = t.parents_left + 1,"
												   " failed_parent = CASE WHEN c.by_it THEN c.other ELSE t.failed_parent END"
												   " FROM c WHERE t.job_id = c.child_id)"
												   " UPDATE jobq.job j SET status = 'blocked', finished_at = NULL,"
												   " last_error = NULL, updated_at = $1 FROM c"
												   " WHERE j.job_id = c.child_id AND c.status = 'cancelled' AND c.by_it"
												   " AND c.other IS NULL RETURNING j.job_id",
												   5, types),
								 values, NULL, SPI_OK_UPDATE_RETURNING);
			if (tail + SPI_processed > cap)
			{
				cap = Max(cap * 2, tail + SPI_processed);
				todo = repalloc_huge(todo, sizeof(int64) * cap);
			}
			for (uint64 r = 0; r < SPI_processed; r++)
			{
				bool		isnull;

				todo[tail++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
														   SPI_tuptable->tupdesc, 1, &isnull));
			}
			SPI_freetuptable(SPI_tuptable);
		}
		head++;
	}
	jobq_reader_close(reader);
	pfree(todo);
	pfree(children);
	pfree(locked);
	pfree(others);
	pfree(tids);
}

/*
 * Parent job_id went from failed or cancelled back to pending (jobq.retry),
 * or its outcome is not the one its dependents were settled with: its
 * dependents that have not run wait for its new outcome.  A blocked or
 * cancelled dependent counts it unfinished again; one cancelled because of
 * it (and of no other parent) is blocked again, and so, in turn, are its
 * own dependents cancelled because of it.  One cancelled otherwise stays
 * cancelled (a jobq.retry of it then waits for this parent), and one that
 * is pending, running or finished is left as it is.  The children are
 * found through the parent's edges and then driven from their ids, so that
 * no plan walks jobq.job; those another transaction holds are left for the
 * background worker (jobq.settle_deferred, marked retried), and until then
 * none of them unblocks (see jobq_unblock_all).  Inside a budget, the rest
 * is left to the next pass at a chunk boundary (see the file header).  SPI
 * connected, as the extension owner.
 */
void
jobq_parent_retried(int64 job_id, TimestampTz now)
{
	if (!jobq_any_dependents(&job_id, 1))
		return;
	ParentsRetried(&job_id, 1, now);
}

/*
 * The blocked dependents of the parents ids[] (marked retried in
 * jobq.settle_deferred) that wait for no parent any more: a retry kept them
 * blocked though nothing was left to wait for (see jobq_unblock_all).  Those
 * another transaction holds are deferred again with their parents.
 */
static void
ReadyAgain(JobqReader *reader, const int64 *ids, int n, TimestampTz now)
{
	Oid			types[1] = {INT8ARRAYOID};
	JobqSettledEdge *pairs = NULL;
	int			npairs = 0;
	int			cap = 0;
	int64	   *children;
	int			nchildren = 0;

	jobq_reader_refresh(reader);
	for (int i = 0; i < n; i++)
	{
		JobqEdge	e;

		jobq_edges_from(reader, JOBQ_EDGES_OF_PARENT, ids[i], PG_INT64_MIN);
		while (jobq_edges_next(reader, &e))
		{
			if (e.outcome == 0)
				continue;
			if (npairs >= cap)
			{
				cap = Max(64, cap * 2);
				pairs = pairs ? repalloc_huge(pairs, sizeof(JobqSettledEdge) * cap)
					: palloc(sizeof(JobqSettledEdge) * cap);
			}
			pairs[npairs].child = e.child;
			pairs[npairs++].parent = e.parent;
		}
	}
	if (npairs == 0)
		return;
	qsort(pairs, npairs, sizeof(JobqSettledEdge), jobq_edge_compare);
	children = palloc(sizeof(int64) * npairs);
	for (int i = 0; i < npairs; i++)
		if (nchildren == 0 || children[nchildren - 1] != pairs[i].child)
			children[nchildren++] = pairs[i].child;

	for (int start = 0; start < nchildren; start += JOBQ_SETTLE_CHUNK)
	{
		int			k = Min(JOBQ_SETTLE_CHUNK, nchildren - start);
		Datum		values[1];
		int64	   *ready;
		int			nready;
		int64	   *free_ids;
		int			nfree;

		CHECK_FOR_INTERRUPTS();
		if (start > 0 && OutOfBudget(false))
		{
			/* the parents of the rest, for the next pass */
			int64	   *rest = palloc(sizeof(int64) * npairs);
			int			nrest = 0;

			for (int i = 0; i < npairs; i++)
				if (pairs[i].child >= children[start])
					rest[nrest++] = pairs[i].parent;
			jobq_defer_resume(rest, nrest, true);
			break;
		}
		values[0] = jobq_id_array(children + start, k);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_again_ready,
											   "SELECT t.job_id FROM unnest($1) AS u(id)"
											   " JOIN jobq.dependent t ON t.job_id = u.id"
											   " JOIN jobq.job j ON j.job_id = u.id"
											   " WHERE t.parents_left = 0 AND j.status = 'blocked'",
											   1, types),
							 values, NULL, SPI_OK_SELECT);
		nready = jobq_result_ids(&ready);
		qsort(ready, nready, sizeof(int64), jobq_id_compare);
		free_ids = palloc(sizeof(int64) * Max(nready, 1));
		nfree = jobq_lock_children(ready, nready, free_ids);
		if (nfree < nready)
		{
			/* the parents of those held */
			int64	   *held = palloc(sizeof(int64) * npairs);
			int			nheld = 0;

			for (int i = 0, j = 0; i < npairs; i++)
			{
				if (!bsearch(&pairs[i].child, ready, nready, sizeof(int64), jobq_id_compare))
					continue;
				while (j < nfree && free_ids[j] < pairs[i].child)
					j++;
				if (j >= nfree || free_ids[j] != pairs[i].child)
					held[nheld++] = pairs[i].parent;
			}
			jobq_defer_parents(held, nheld, true);
			pfree(held);
		}
		jobq_unblock_all(free_ids, nfree, now);
		(void) OutOfBudget(true);
		pfree(ready);
		pfree(free_ids);
	}
	pfree(children);
	pfree(pairs);
}

/*
 * Settle the parents ids[] (ascending) again for the background worker:
 * their settling was deferred (see jobq.settle_deferred); what it defers
 * again counts as the worker's try.  The parents are locked FOR SHARE
 * first, so that their outcomes cannot change meanwhile; one another
 * transaction holds is deferred again whole, and one that is gone (purged)
 * has nothing left to settle.  Then, for a parent marked retried, its
 * dependents are given the retry's treatment now (jobq_parent_retried); the
 * dependents of the finished parents take their outcomes (as far as another
 * transaction holds none of them: the rest is deferred again); and the
 * dependents of parents marked retried that wait for no parent any more and
 * are still blocked are unblocked.  SPI connected, as the extension owner.
 */
static void
SettleParentsAgain(const int64 *ids, int n, TimestampTz now)
{
	Oid			types[1] = {INT8ARRAYOID};
	Oid			two[2] = {INT8ARRAYOID, INT8ARRAYOID};
	Datum		values[1];
	Datum		pair[2];
	int64	   *locked;
	int64	   *finished;
	int64	   *retried;
	int			nlocked = 0;
	int			nfinished = 0;
	int			nretried = 0;
	int64	   *other;
	int			nother;
	JobqReader *reader;

	if (n == 0)
		return;
	values[0] = jobq_id_array(ids, n);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_again_lock,
										   "SELECT job_id, status IN ('completed', 'failed', 'cancelled')"
										   " FROM jobq.job WHERE job_id = ANY ($1) ORDER BY job_id"
										   " FOR SHARE SKIP LOCKED",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	locked = palloc(sizeof(int64) * n);
	finished = palloc(sizeof(int64) * n);
	retried = palloc(sizeof(int64) * n);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		locked[nlocked] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
													  SPI_tuptable->tupdesc, 1, &isnull));
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull)))
			finished[nfinished++] = locked[nlocked];
		nlocked++;
	}
	SPI_freetuptable(SPI_tuptable);

	/* not locked: held (deferred again) or gone (nothing to do) */
	if (nlocked < n)
	{
		pair[0] = values[0];
		pair[1] = jobq_id_array(locked, nlocked);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_again_exists,
											   "SELECT job_id FROM jobq.job WHERE job_id = ANY ($1)"
											   " AND job_id <> ALL ($2) ORDER BY job_id",
											   2, two),
							 pair, NULL, SPI_OK_SELECT);
		nother = jobq_result_ids(&other);
		jobq_defer_parents(other, nother, false);
		pfree(other);
	}
	if (nlocked == 0)
		return;

	/* the parents marked retried, unmarked (what is left marks them again) */
	reader = jobq_reader_open();
	for (int i = 0; i < nlocked; i++)
	{
		bool		marked;

		if (jobq_is_deferred(reader, locked[i], &marked) && marked)
			retried[nretried++] = locked[i];
	}
	if (nretried > 0)
	{
		values[0] = jobq_id_array(retried, nretried);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_again_unmark,
											   "UPDATE jobq.settle_deferred SET retried = false"
											   " WHERE parent_id = ANY ($1)",
											   1, types),
							 values, NULL, SPI_OK_UPDATE);
		ParentsRetried(retried, nretried, now);
	}
	jobq_parents_finished(finished, nfinished, now);
	if (nretried > 0)
		ReadyAgain(reader, retried, nretried, now);
	jobq_reader_close(reader);
	pfree(locked);
	pfree(finished);
	pfree(retried);
}

void
jobq_settle_again(const int64 *ids, int n, TimestampTz now)
{
	jobq_defer_again_set(true);
	SettleProgressOwed(true);
	PG_TRY();
	{
		SettleParentsAgain(ids, n, now);
	}
	PG_FINALLY();
	{
		jobq_defer_again_set(false);
		SettleProgressOwed(false);
	}
	PG_END_TRY();
}

/*
 * What jobq.retry of job_id does when it is a dependent (SPI connected, the
 * job locked): false when it has no unfinished parent (it goes back to
 * pending); true when it has one (it goes back to blocked, to wait).  An
 * error when a parent did not complete and it does not run on failure:
 * retry that parent instead, which brings it back.
 */
bool
jobq_retry_blocks(int64 job_id)
{
	Oid			edge_types[2] = {TIDARRAYOID, TEXTOID};
	Oid			count_types[2] = {INT8OID, INT4OID};
	static const char outcomes[] = {0, 'c', 'f', 'x'};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	Datum		counts[2];
	bool		isnull;
	int32		left;
	bool		cancel_mode;
	int64		bad = 0;
	bool		bad_gone = false;
	int64	   *reset;
	int			nreset = 0;
	JobqReader *reader;
	JobqEdge	e;
	JobqEdge   *changed = NULL;
	char	   *to = NULL;
	int			nchanged = 0;
	int			cap = 0;
	ItemPointerData *tids;

	if (!jobq_depend_installed())
		return false;

	/*
	 * Edges settled with an outcome their parent no longer has: a parent
	 * retried since it settled this job (which ran, or was cancelled
	 * otherwise, so the parent's retry left it alone) is unfinished again,
	 * and the job waits for its new outcome; one that finished again since
	 * takes its new outcome.  A parent whose finish is under way (its row is
	 * not locked here: that would make this retry wait for another role's
	 * transaction) may not see the edge just reset, so those parents are
	 * deferred: the worker settles them once they have finished.  The edges
	 * change only under this job's lock, which the caller holds: they are
	 * written by the row versions read, one statement per new outcome.
	 */
	reader = jobq_reader_open();
	jobq_edges_from(reader, JOBQ_EDGES_OF_CHILD, job_id, 0);
	while (jobq_edges_next(reader, &e))
	{
		char		s;
		char		outcome;

		if (e.outcome == 0)
			continue;
		s = jobq_job_status(reader, e.parent);
		outcome = JOBQ_FINISHED(s) ? s : 0;
		if (s == 0 || outcome == e.outcome)
			continue;
		if (nchanged >= cap)
		{
			cap = Max(16, cap * 2);
			changed = changed ? repalloc_huge(changed, sizeof(JobqEdge) * cap) : palloc(sizeof(JobqEdge) * cap);
			to = to ? repalloc_huge(to, cap) : palloc(cap);
		}
		to[nchanged] = outcome;
		changed[nchanged++] = e;
	}
	reset = palloc(sizeof(int64) * Max(nchanged, 1));
	tids = palloc(sizeof(ItemPointerData) * Max(nchanged, 1));
	for (int o = 0; o < lengthof(outcomes) && nchanged > 0; o++)
	{
		int			k = 0;

		for (int i = 0; i < nchanged; i++)
			if (to[i] == outcomes[o])
				tids[k++] = changed[i].tid;
		if (k == 0)
			continue;
		values[0] = jobq_tid_array(tids, k);
		values[1] = outcomes[o] == 0 ? (Datum) 0 : CStringGetTextDatum(jobq_outcome_name(outcomes[o]));
		nulls[1] = outcomes[o] == 0 ? 'n' : ' ';
		jobq_spi_exec_latest(jobq_plan_generic(&plan_retry_child,
											   "UPDATE jobq.dependency SET parent_status = $2"
											   " WHERE ctid = ANY ($1) AND parent_status IS NOT NULL"
											   " RETURNING parent_id",
											   2, edge_types),
							 values, nulls, SPI_OK_UPDATE_RETURNING);
		for (uint64 r = 0; r < SPI_processed && outcomes[o] == 0; r++)
			reset[nreset++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
														  SPI_tuptable->tupdesc, 1, &isnull));
		SPI_freetuptable(SPI_tuptable);
	}
	jobq_defer_parents(reset, nreset, false);
	counts[0] = Int64GetDatum(job_id);
	counts[1] = Int32GetDatum(nreset);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_retry_count,
										   "UPDATE jobq.dependent t SET parents_left = t.parents_left + $2,"
										   " failed_parent = NULL WHERE t.job_id = $1"
										   " RETURNING t.parents_left, t.on_parent_failure = 'cancel'",
										   2, count_types),
						 counts, NULL, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 0)
	{
		jobq_reader_close(reader);
		return false;
	}
	left = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	cancel_mode = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SPI_freetuptable(SPI_tuptable);
	if (cancel_mode)
	{
		/* the first parent that did not complete, if any */
		jobq_reader_refresh(reader);
		jobq_edges_from(reader, JOBQ_EDGES_OF_CHILD, job_id, 0);
		while (jobq_edges_next(reader, &e))
			if ((e.outcome == 'f' || e.outcome == 'x') && (bad == 0 || e.parent < bad))
				bad = e.parent;
		/* a parent discarded (or pruned) cannot be retried */
		bad_gone = bad != 0 && jobq_job_status(reader, bad) == 0;
	}
	jobq_reader_close(reader);
	if (bad != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job %lld cannot run: its parent job %lld did not complete",
						(long long) job_id, (long long) bad),
				 bad_gone ?
				 errhint("The parent is gone (discarded or pruned): enqueue the job again without it.") :
				 errhint("Retry the parent: the jobs cancelled because of it come back with it.")));
	return left > 0;
}

/* Deferred parents' settling, as a unit: all of them, or one. */
typedef struct JobqSettleUnit
{
	const int64 *ids;
	int			n;
	TimestampTz now;
} JobqSettleUnit;

static void
SettleDeferredUnit(void *arg)
{
	JobqSettleUnit *u = (JobqSettleUnit *) arg;

	jobq_settle_again(u->ids, u->n, u->now);
}

/*
 * Settle the deferred parents ids[] (n > 0, ascending, their rows locked)
 * again: all at once (the many parents of one fan-in settle in a few
 * statements), and when that fails, each as a unit of its own; one that
 * fails counts as a try and backs off.  Then delete their rows, unless
 * deferred again meanwhile (their retry_at then lies after now).
 */
static void
SettleTaken(const int64 *ids, int n, TimestampTz now)
{
	Oid			done_types[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		done[2];
	JobqSettleUnit u;

	u.ids = ids;
	u.n = n;
	u.now = now;
	if (!jobq_try_units(SettleDeferredUnit, &u))
		for (int i = 0; i < n; i++)
		{
			char	   *unit = psprintf("settling the dependents of job %lld", (long long) ids[i]);

			u.ids = &ids[i];
			u.n = 1;
			if (!jobq_run_unit(unit, SettleDeferredUnit, &u))
				jobq_defer_again(&ids[i], 1);
			pfree(unit);
		}
	done[0] = jobq_id_array(ids, n);
	done[1] = TimestampTzGetDatum(now);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_deferred_done,
										   "DELETE FROM jobq.settle_deferred"
										   " WHERE parent_id = ANY ($1) AND retry_at <= $2",
										   2, done_types),
						 done, NULL, SPI_OK_DELETE);
}

/*
 * A database at 0.2.0 to 0.3.2 (its rows name no queue): up to batch due
 * parents, in the order of their ids.
 */
static int64
SettleById(int batch, TimestampTz now, bool *more)
{
	Oid			types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	int			n;
	int64	   *ids;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(batch);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_deferred_take_old,
										   "SELECT parent_id FROM jobq.settle_deferred WHERE retry_at <= $1"
										   " ORDER BY parent_id LIMIT $2 FOR UPDATE SKIP LOCKED",
										   2, types),
						 values, NULL, SPI_OK_SELECT);
	n = jobq_result_ids(&ids);
	*more = n >= batch;
	if (n > 0)
		SettleTaken(ids, n, now);
	pfree(ids);
	return n;
}

/*
 * Where the last take queue by queue stopped: the queue it visited last
 * (NULL: from the first).  Private to the process, which serves one
 * database; in TopMemoryContext.
 */
static char *settle_cursor = NULL;

/*
 * The first queue after after (NULL: the first of all), in byte order,
 * that has deferred parents, due or not; NULL when there is none.  One
 * probe of settle_deferred_queue_idx.
 */
static char *
NextDeferredQueue(const char *after)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	char	   *q = NULL;

	/* no queue name is empty: '' comes before all of them */
	values[0] = CStringGetTextDatum(after ? after : "");
	jobq_spi_exec_latest(jobq_plan_generic(&plan_deferred_queue,
										   "SELECT queue FROM jobq.settle_deferred"
										   " WHERE queue > $1 ORDER BY queue LIMIT 1",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
		q = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	SPI_freetuptable(SPI_tuptable);
	return q;
}

/* Most queues one take visits: the rest is the next take's. */
#define JOBQ_SETTLE_QUEUES_PER_TAKE 100

/*
 * Up to batch due parents, queue by queue (0.3.3 on): from the queue after
 * the one the last take stopped at, each queue's due parents (up to what is
 * left of batch, earliest due first) settled as a unit of their own, until
 * batch parents, JOBQ_SETTLE_QUEUES_PER_TAKE queues or the budget are
 * spent, or every queue has had its turn.  So one tenant's backlog of
 * deferred parents, however long, delays another queue's by one turn (a
 * batch, within the budget), not by the whole backlog.
 */
static int64
SettleByQueue(int batch, TimestampTz now, bool *more)
{
	Oid			take_types[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	Oid			due_types[1] = {TIMESTAMPTZOID};
	Datum		values[3];
	int64		total = 0;
	int			visited = 0;
	bool		from_cursor;
	bool		wrapped = false;
	char	   *first = NULL;
	char	   *q;
	bool		isnull;
	bool		any_due;

	/*
	 * Nothing due: no walk over the queues (the first entry of
	 * settle_deferred_retry_idx says).  A queue's take names its range of
	 * settle_deferred_queue_idx by row comparisons, which no other index can
	 * serve: with queue = $1, a generic plan may read the due rows of every
	 * queue through settle_deferred_retry_idx and filter them.
	 */
	values[0] = TimestampTzGetDatum(now);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_deferred_any_due,
										   "SELECT min(retry_at) <= $1 FROM jobq.settle_deferred",
										   1, due_types),
						 values, NULL, SPI_OK_SELECT);
	any_due = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	any_due = any_due && !isnull;
	SPI_freetuptable(SPI_tuptable);
	if (!any_due)
		return 0;

	/*
	 * From the queue after the cursor to the last, then from the first; with
	 * none after the cursor, from the first to the last.
	 */
	from_cursor = settle_cursor != NULL;
	q = NextDeferredQueue(settle_cursor);
	if (q == NULL && from_cursor)
	{
		from_cursor = false;
		q = NextDeferredQueue(NULL);
	}
	while (q != NULL)
	{
		int			n;
		int			limit = batch - (int) total;
		int64	   *ids;

		/* back at the first queue of this take: every queue had its turn */
		if (wrapped && first != NULL && strcmp(q, first) >= 0)
			break;
		if (first == NULL)
			first = pstrdup(q);

		values[0] = CStringGetTextDatum(q);
		values[1] = TimestampTzGetDatum(now);
		values[2] = Int32GetDatum(limit);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_deferred_take,
											   "SELECT parent_id FROM jobq.settle_deferred"
											   " WHERE (queue, retry_at) >= ($1, '-infinity')"
											   " AND (queue, retry_at) <= ($1, $2)"
											   " ORDER BY queue, retry_at LIMIT $3 FOR UPDATE SKIP LOCKED",
											   3, take_types),
							 values, NULL, SPI_OK_SELECT);
		n = jobq_result_ids(&ids);

		/* the next take starts after this queue, whatever happens here */
		if (settle_cursor)
			pfree(settle_cursor);
		settle_cursor = MemoryContextStrdup(TopMemoryContext, q);

		if (n > 0)
		{
			qsort(ids, n, sizeof(int64), jobq_id_compare);
			SettleTaken(ids, n, now);
		}
		pfree(ids);
		total += n;
		visited++;
		if (total >= batch || visited >= JOBQ_SETTLE_QUEUES_PER_TAKE || jobq_budget_spent())
		{
			*more = true;
			break;
		}
		q = NextDeferredQueue(q);
		if (q == NULL && from_cursor && !wrapped)
		{
			wrapped = true;
			q = NextDeferredQueue(NULL);
		}
	}
	return total;
}

/*
 * Settle again the due parents of jobq.settle_deferred (their dependents
 * were held by another transaction when they finished or were retried, or
 * a budget cut their settling short), up to batch of them: queue by queue
 * (SettleByQueue), or by id in a database still at 0.2.0 to 0.3.2.  The
 * rows are locked while this runs, and deleted at the end unless deferred
 * again meanwhile (their retry_at then lies ahead).  Returns how many were
 * looked at; *more is set when more may be due; *next_retry gets the
 * earliest retry_at still waiting (0: none).  A database still at 0.1.0
 * has nothing to settle.  SPI must be connected.
 */
int64
jobq_settle_deferred(int batch, bool *more, TimestampTz *next_retry)
{
	Oid			types[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	TimestampTz now = GetCurrentTimestamp();
	int64		n;
	bool		isnull;

	*more = false;
	*next_retry = 0;
	if (!jobq_depend_installed())
		return 0;
	if (jobq_settle_by_queue())
		n = SettleByQueue(batch, now, more);
	else
		n = SettleById(batch, now, more);
	values[0] = TimestampTzGetDatum(now);

	/*
	 * The next retry: the earliest one still ahead, or (what was due at the
	 * start and is still there: another transaction holds its row) a naptime
	 * from now, so that a held row costs no busy loop.
	 */
	jobq_spi_exec_latest(jobq_plan_generic(&plan_deferred_next,
										   "SELECT (SELECT min(retry_at) FROM jobq.settle_deferred WHERE retry_at > $1),"
										   " coalesce((SELECT min(retry_at) FROM jobq.settle_deferred) <= $1, false)",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	{
		bool		held_null;
		Datum		ahead = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		bool		held = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc, 2, &held_null));

		if (!isnull)
			*next_retry = DatumGetTimestampTz(ahead);
		if (held && !*more)
		{
			TimestampTz later = jobq_timestamp_add(GetCurrentTimestamp(),
												   (int64) jobq_naptime_ms * 1000);

			if (*next_retry == 0 || later < *next_retry)
				*next_retry = later;
		}
	}
	SPI_freetuptable(SPI_tuptable);
	return n;
}
