/*-------------------------------------------------------------------------
 *
 * workflow/decide.c
 *	  Workflows: deciding dependents.  The edges a settle takes (their
 *	  parents' outcomes written, the children's counters counted down), and
 *	  the children decided: unblocked once no parent is left (unless a stale
 *	  edge holds one back), cancelled when a parent did not complete and
 *	  they do not run on failure.
 *
 * Reads go through workflow/edges.c.  Edges are written by the row versions
 * read (ctid = ANY: a TID scan), jobs and counters through arrays of ids
 * joined to their primary keys, with no other condition a plan could start
 * from: each statement costs the rows it is given whatever the statistics
 * say.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "spi.h"
#include "shmem/shm_queue.h"
#include "workflow/decide.h"
#include "workflow/defer.h"
#include "workflow/edges.h"

static SPIPlanPtr plan_unblock;
static SPIPlanPtr plan_cancel;
static SPIPlanPtr plan_take_edges;
static SPIPlanPtr plan_count_down;

/* The status of the letter c (JOBQ_FINISHED). */
const char *
jobq_outcome_name(char c)
{
	return c == 'c' ? "completed" : (c == 'f' ? "failed" : "cancelled");
}

/* qsort comparator for edges, by child, then parent. */
int
jobq_edge_compare(const void *a, const void *b)
{
	const JobqSettledEdge *x = (const JobqSettledEdge *) a;
	const JobqSettledEdge *y = (const JobqSettledEdge *) b;
	int			c = jobq_id_compare(&x->child, &y->child);

	return c != 0 ? c : jobq_id_compare(&x->parent, &y->parent);
}

/*
 * Has child a stale edge: one settled with an outcome its parent no longer
 * has, of a parent in jobq.settle_deferred (see jobq_unblock_all)?  One
 * probe of the child index, and one of settle_deferred per settled edge.
 */
static bool
StaleEdge(JobqReader *r, int64 child)
{
	JobqEdge	e;

	jobq_edges_from(r, JOBQ_EDGES_OF_CHILD, child, 0);
	while (jobq_edges_next(r, &e))
	{
		char		now;

		if (e.outcome == 0 || !jobq_is_deferred(r, e.parent, NULL))
			continue;
		now = jobq_job_status(r, e.parent);
		if (now != 0 && (!JOBQ_FINISHED(now) || now != e.outcome))
		{
			jobq_edges_done(r);
			return true;
		}
	}
	return false;
}

/*
 * Blocked jobs ids[] (ascending, locked or this transaction's own) to
 * pending, into jobq.ready (due) or jobq.scheduled, noted for the claim
 * positions; the others (cancelled meanwhile) are left alone, and so is one
 * with a stale edge: settled with an outcome its parent no longer has (the
 * parent was retried, and its retry passed this job over: see
 * jobq_parent_retried).  Such a parent is always in jobq.settle_deferred
 * (the retry noted it in the same transaction), which keeps the check
 * cheap, and the worker's settling of it (jobq_settle_again) needs this
 * job's row lock to mend the edge, so it cannot miss a count that reached 0
 * meanwhile.
 */
void
jobq_unblock_all(const int64 *ids, int n, TimestampTz now)
{
	Oid			types[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[2];
	SPITupleTable *tt;
	JobqReader *reader;
	int64	   *free_ids;
	int			nfree = 0;

	if (n == 0)
		return;
	reader = jobq_reader_open();
	free_ids = palloc(sizeof(int64) * n);
	for (int i = 0; i < n; i++)
		if (!StaleEdge(reader, ids[i]))
			free_ids[nfree++] = ids[i];
	jobq_reader_close(reader);
	if (nfree == 0)
		return;
	values[0] = jobq_id_array(free_ids, nfree);
	values[1] = TimestampTzGetDatum(now);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_unblock,
										   "WITH j AS (UPDATE jobq.job SET status = 'pending', updated_at = $2"
										   " WHERE job_id = ANY ($1) AND status = 'blocked'"
										   " RETURNING job_id, queue, kind, priority, concurrency_key, run_at),"
										   " r AS (INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id,"
										   " kind, concurrency_key) SELECT queue, -priority, run_at, job_id, kind,"
										   " concurrency_key FROM j WHERE run_at <= $2),"
										   " s AS (INSERT INTO jobq.scheduled (queue, priority, run_at, job_id,"
										   " kind, concurrency_key) SELECT queue, priority, run_at, job_id, kind,"
										   " concurrency_key FROM j WHERE run_at > $2)"
										   " SELECT queue, priority, run_at, job_id FROM j",
										   2, types),
						 values, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		char	   *queue = SPI_getvalue(tt->vals[r], tt->tupdesc, 1);
		int32		priority = DatumGetInt32(SPI_getbinval(tt->vals[r], tt->tupdesc, 2, &isnull));
		TimestampTz run_at = DatumGetTimestampTz(SPI_getbinval(tt->vals[r], tt->tupdesc, 3, &isnull));
		JobqClaimPos pos = {-priority, run_at,
		DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 4, &isnull))};

		if (run_at <= now)
			jobq_state_note_ready(queue, &pos);
		else
			jobq_state_note_scheduled(queue, run_at);
		pfree(queue);
	}
	SPI_freetuptable(tt);
	pfree(free_ids);
}

/*
 * Blocked jobs ids[] (ascending) cancelled because their parents bad[] did
 * not complete; *next gets those that were (the others were not blocked
 * any more), whose own dependents are to be settled in turn.
 */
int
jobq_cancel_all(const int64 *ids, const int64 *bad, int n, TimestampTz now, int64 *next)
{
	Oid			types[3] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[3];
	int			nnext = 0;

	if (n == 0)
		return 0;
	values[0] = jobq_id_array(ids, n);
	values[1] = jobq_id_array(bad, n);
	values[2] = TimestampTzGetDatum(now);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_cancel,
										   "WITH j AS (UPDATE jobq.job j SET status = 'cancelled', finished_at = $3,"
										   " updated_at = $3, last_error = 'parent job ' || u.bad || ' did not complete'"
										   " FROM unnest($1, $2) AS u(id, bad)"
										   " WHERE j.job_id = u.id AND j.status = 'blocked' RETURNING j.job_id, u.bad)"
										   " UPDATE jobq.dependent t SET failed_parent = j.bad FROM j"
										   " WHERE t.job_id = j.job_id RETURNING t.job_id",
										   3, types),
						 values, NULL, SPI_OK_UPDATE_RETURNING);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		next[nnext++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
													SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);
	return nnext;
}

/*
 * Take the edges e[] (their children locked: jobq_lock_children): their
 * parents' outcomes written, and the edges taken appended to *taken, whose
 * children jobq_decide_taken decides.  The edges are written by the row
 * versions read (see workflow/edges.c), one statement per outcome, which
 * leaves its plan no join to choose.  A version changed since it was read
 * (by another settle, under this child's lock, before it was taken) is not
 * seen.
 */
void
jobq_take_edges(const JobqSettledEdge *e, int n, JobqTaken *taken)
{
	Oid			edge_types[2] = {TIDARRAYOID, TEXTOID};
	static const char outcomes[] = {'c', 'f', 'x'};
	Datum		values[2];
	ItemPointerData *tids = palloc(sizeof(ItemPointerData) * Max(n, 1));
	SPITupleTable *tt;

	for (int o = 0; o < lengthof(outcomes); o++)
	{
		int			k = 0;

		for (int i = 0; i < n; i++)
			if (e[i].outcome == outcomes[o])
				tids[k++] = e[i].tid;
		if (k == 0)
			continue;
		values[0] = jobq_tid_array(tids, k);
		values[1] = CStringGetTextDatum(jobq_outcome_name(outcomes[o]));
		jobq_spi_exec_latest(jobq_plan_generic(&plan_take_edges,
											   "UPDATE jobq.dependency SET parent_status = $2"
											   " WHERE ctid = ANY ($1) AND parent_status IS NULL"
											   " RETURNING child_id, parent_id",
											   2, edge_types),
							 values, NULL, SPI_OK_UPDATE_RETURNING);
		tt = SPI_tuptable;
		if (taken->n + SPI_processed > taken->cap)
		{
			taken->cap = Max(Max(1024, taken->cap * 2), taken->n + (int) SPI_processed);
			taken->e = taken->e ? repalloc_huge(taken->e, sizeof(JobqSettledEdge) * taken->cap)
				: palloc(sizeof(JobqSettledEdge) * taken->cap);
		}
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			JobqSettledEdge *t = &taken->e[taken->n++];

			t->child = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 1, &isnull));
			t->parent = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 2, &isnull));
			t->outcome = outcomes[o];
		}
		SPI_freetuptable(tt);
	}
	pfree(tids);
}

/*
 * Decide the children of the edges *taken holds (jobq_take_edges), and
 * empty it: each child's counter counted down by its edges taken, and then
 * the child cancelled (a parent did not complete and it does not run on
 * failure) or unblocked (no parent left).  Returns how many were
 * cancelled, their ids in *next (palloc'd; NULL when none).  The children
 * must be locked (jobq_lock_children).
 */
int
jobq_decide_taken(JobqTaken *t, TimestampTz now, int64 **next)
{
	Oid			types[2] = {INT8ARRAYOID, INT4ARRAYOID};
	Datum		values[2];
	SPITupleTable *tt;
	JobqSettledEdge *taken = t->e;
	uint64		nsettled = t->n;
	int64	   *children;
	Datum	   *counts;
	int64	   *bad;
	int			nchildren = 0;
	int64	   *unblock;
	int			nunblock = 0;
	int64	   *cancel;
	int64	   *cancel_bad;
	int			ncancel = 0;

	*next = NULL;
	if (nsettled == 0)
		return 0;
	t->n = 0;
	children = palloc(sizeof(int64) * nsettled);
	qsort(taken, nsettled, sizeof(JobqSettledEdge), jobq_edge_compare);

	/*
	 * per child: how many of its parents finished, the first that did not
	 * complete
	 */
	counts = palloc(sizeof(Datum) * nsettled);
	bad = palloc(sizeof(int64) * nsettled);
	for (uint64 r = 0; r < nsettled; r++)
	{
		if (nchildren == 0 || children[nchildren - 1] != taken[r].child)
		{
			children[nchildren] = taken[r].child;
			counts[nchildren] = Int32GetDatum(0);
			bad[nchildren++] = 0;
		}
		counts[nchildren - 1] = Int32GetDatum(DatumGetInt32(counts[nchildren - 1]) + 1);
		if (taken[r].outcome != 'c' && bad[nchildren - 1] == 0)
			bad[nchildren - 1] = taken[r].parent;	/* parents ascend */
	}

	values[0] = jobq_id_array(children, nchildren);
	values[1] = PointerGetDatum(construct_array(counts, nchildren, INT4OID, 4, true, TYPALIGN_INT));
	jobq_spi_exec_latest(jobq_plan_generic(&plan_count_down,
										   "UPDATE jobq.dependent t SET parents_left = t.parents_left - u.n"
										   " FROM unnest($1, $2) AS u(id, n) WHERE t.job_id = u.id"
										   " RETURNING t.job_id, t.parents_left, t.on_parent_failure = 'run'",
										   2, types),
						 values, NULL, SPI_OK_UPDATE_RETURNING);
	tt = SPI_tuptable;
	unblock = palloc(sizeof(int64) * nchildren);
	cancel = palloc(sizeof(int64) * nchildren);
	cancel_bad = palloc(sizeof(int64) * nchildren);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int64		child = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 1, &isnull));
		int32		left = DatumGetInt32(SPI_getbinval(tt->vals[r], tt->tupdesc, 2, &isnull));
		bool		run = DatumGetBool(SPI_getbinval(tt->vals[r], tt->tupdesc, 3, &isnull));
		int64	   *at = bsearch(&child, children, nchildren, sizeof(int64), jobq_id_compare);
		int64		b = at ? bad[at - children] : 0;

		if (b != 0 && !run)
		{
			cancel[ncancel] = child;
			cancel_bad[ncancel++] = b;
		}
		else if (left == 0)
			unblock[nunblock++] = child;
	}
	SPI_freetuptable(tt);

	/* in child order, as the counters were locked */
	qsort(unblock, nunblock, sizeof(int64), jobq_id_compare);
	jobq_unblock_all(unblock, nunblock, now);
	if (ncancel > 1)
	{
		/* sort the pairs by child */
		JobqSettledEdge *pairs = palloc(sizeof(JobqSettledEdge) * ncancel);

		for (int i = 0; i < ncancel; i++)
		{
			pairs[i].child = cancel[i];
			pairs[i].parent = cancel_bad[i];
		}
		qsort(pairs, ncancel, sizeof(JobqSettledEdge), jobq_edge_compare);
		for (int i = 0; i < ncancel; i++)
		{
			cancel[i] = pairs[i].child;
			cancel_bad[i] = pairs[i].parent;
		}
		pfree(pairs);
	}
	*next = palloc(sizeof(int64) * Max(ncancel, 1));
	ncancel = jobq_cancel_all(cancel, cancel_bad, ncancel, now, *next);
	pfree(children);
	pfree(counts);
	pfree(bad);
	pfree(unblock);
	pfree(cancel);
	pfree(cancel_bad);
	return ncancel;
}
