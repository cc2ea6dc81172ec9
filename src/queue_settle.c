/*-------------------------------------------------------------------------
 *
 * queue_settle.c
 *	  Workflows, the finishing side: settling the dependents of jobs that
 *	  finished (unblocked, or cancelled in turn), what a retried parent gives
 *	  back, and what a retried dependent waits for.
 *
 * Every path that ends a job (complete, complete_many, fail for good, lease
 * expired for good, cancel) calls jobq_parents_finished; retry calls
 * jobq_parent_retried.  The dependents of a finished job are found through
 * jobq.dependency's primary key (parent_id, child_id) under the latest
 * snapshot, so a REPEATABLE READ completion sees dependencies committed
 * after its snapshot was taken; settling is O(children), a few statements
 * per round whatever their number, and locks the children's counters in
 * child order.  How the enqueue side closes the race with a parent that
 * finishes meanwhile is in queue_depend.c.  A database still at 0.1.0 has
 * no such tables and pays one catalog lookup.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#include "compat.h"
#include "queue_defer.h"
#include "queue_settle.h"
#include "shm_queue.h"
#include "spi_plan.h"

/* Edges settled per statement: a parent with a million children settles in chunks. */
#define JOBQ_SETTLE_CHUNK	10000

static SPIPlanPtr plan_settle_edges;
static SPIPlanPtr plan_take_edges;
static SPIPlanPtr plan_count_down;
static SPIPlanPtr plan_unblock;
static SPIPlanPtr plan_cancel;
static SPIPlanPtr plan_retried_children;
static SPIPlanPtr plan_retried;
static SPIPlanPtr plan_retry_child;
static SPIPlanPtr plan_retry_count;
static SPIPlanPtr plan_retry_bad;
static SPIPlanPtr plan_again_lock;
static SPIPlanPtr plan_again_exists;
static SPIPlanPtr plan_again_ready;
static SPIPlanPtr plan_again_retried;
static SPIPlanPtr plan_again_held;

/* Does this database have the dependency tables (0.2.0 on)? */
bool
jobq_depend_installed(void)
{
	Oid			nsp = get_namespace_oid("jobq", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid("dependency", nsp));
}

/*
 * Is any of ids[] a parent?  One probe of jobq.dependency's primary key per
 * id, under the latest snapshot (see the file header), without a statement:
 * this runs in every completion.
 */
static bool
AnyDependents(const int64 *ids, int n)
{
	Oid			nsp = get_namespace_oid("jobq", true);
	Oid			relid = OidIsValid(nsp) ? get_relname_relid("dependency", nsp) : InvalidOid;
	Oid			idxid = OidIsValid(nsp) ? get_relname_relid("dependency_pkey", nsp) : InvalidOid;
	Relation	rel;
	Relation	idx;
	Snapshot	snap;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	bool		found = false;

	if (!OidIsValid(relid) || !OidIsValid(idxid) || n == 0)
		return false;
	rel = table_open(relid, AccessShareLock);
	idx = index_open(idxid, AccessShareLock);
	snap = RegisterSnapshot(GetLatestSnapshot());
	scan = index_beginscan_compat(rel, idx, snap, 1, 0);
	slot = table_slot_create(rel, NULL);
	for (int i = 0; i < n && !found; i++)
	{
		ScanKeyData key;

		ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(ids[i]));
		index_rescan(scan, &key, 1, NULL, 0);
		found = index_getnext_slot(scan, ForwardScanDirection, slot);
	}
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	UnregisterSnapshot(snap);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * Blocked jobs ids[] (ascending) to pending, into jobq.ready (due) or
 * jobq.scheduled, noted for the claim positions; the others (cancelled
 * meanwhile) are left alone, and so is one with a stale edge: settled with
 * an outcome its parent no longer has (the parent was retried, and its
 * retry passed this job over: see jobq_parent_retried).  Such a parent is
 * always in jobq.settle_deferred (the retry noted it in the same
 * transaction), which keeps the check cheap, and the worker's settling of
 * it (jobq_settle_again) needs this job's row lock to mend the edge, so it
 * cannot miss a count that reached 0 meanwhile.
 */
void
jobq_unblock_all(const int64 *ids, int n, TimestampTz now)
{
	Oid			types[2] = {INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[2];
	SPITupleTable *tt;

	if (n == 0)
		return;
	values[0] = jobq_id_array(ids, n);
	values[1] = TimestampTzGetDatum(now);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_unblock,
										   "WITH j AS (UPDATE jobq.job SET status = 'pending', updated_at = $2"
										   " WHERE job_id = ANY ($1) AND status = 'blocked'"
										   " AND NOT EXISTS (SELECT FROM jobq.settle_deferred s"
										   " JOIN jobq.dependency d ON d.parent_id = s.parent_id"
										   " JOIN jobq.job p ON p.job_id = s.parent_id"
										   " WHERE d.child_id = jobq.job.job_id AND d.parent_status IS NOT NULL"
										   " AND d.parent_status IS DISTINCT FROM CASE WHEN p.status"
										   " IN ('completed', 'failed', 'cancelled') THEN p.status END)"
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

/* An edge a settle took: its child, its parent, whether the parent completed. */
typedef struct SettledEdge
{
	int64		child;
	int64		parent;
	bool		completed;
} SettledEdge;

/* qsort comparator for settled edges, by child. */
static int
EdgeCompare(const void *a, const void *b)
{
	return jobq_id_compare(&((const SettledEdge *) a)->child, &((const SettledEdge *) b)->child);
}

/* The position a settle's chunks have reached, (child, parent) order. */
typedef struct SettleCursor
{
	int64		child;
	int64		parent;
	int64	   *deferred;		/* parents of children that were locked */
	int			ndeferred;
	int			cap;
} SettleCursor;

static void
CursorDefer(SettleCursor *cur, int64 parent)
{
	if (cur->ndeferred >= cur->cap)
	{
		cur->cap = Max(16, cur->cap * 2);
		cur->deferred = cur->deferred ? repalloc_huge(cur->deferred, sizeof(int64) * cur->cap)
			: palloc(sizeof(int64) * cur->cap);
	}
	cur->deferred[cur->ndeferred++] = parent;
}

/*
 * One chunk (up to JOBQ_SETTLE_CHUNK edges past *cur; *more when there may
 * be more) of a round of jobq_parents_finished over the parents ids[]: the
 * unsettled edges of those parents that have finished, and their children,
 * locked in child order (two rounds sharing children cannot deadlock) and
 * without waiting: a child another transaction holds is passed over and
 * its parent deferred.  The edges of the children locked take their
 * parents' outcomes, each child's counter goes down by its edges, and the
 * children are decided: cancelled (a parent did not complete and they do
 * not run on failure) or unblocked (no parent left).  Returns how many
 * were cancelled, their ids in *next (palloc'd).
 */
static int
SettleChunk(const int64 *ids, int n, TimestampTz now, SettleCursor *cur,
			int64 **next, bool *more)
{
	Oid			types[2] = {INT8ARRAYOID, INT4ARRAYOID};
	Oid			cand_types[4] = {INT8ARRAYOID, INT4OID, INT8OID, INT8OID};
	Oid			edge_types[2] = {INT8ARRAYOID, INT8ARRAYOID};
	Datum		values[4];
	SPITupleTable *tt;
	uint64		ncand;
	int64	   *cand_child;
	int64	   *cand_parent;
	int64	   *distinct;
	int			ndistinct = 0;
	int64	   *locked;
	int			nlocked;
	int			nedges = 0;
	uint64		nsettled;
	SettledEdge *edges;
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
	values[0] = jobq_id_array(ids, n);
	values[1] = Int32GetDatum(JOBQ_SETTLE_CHUNK);
	values[2] = Int64GetDatum(cur->child);
	values[3] = Int64GetDatum(cur->parent);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_settle_edges,
										   "SELECT e.child_id, e.parent_id FROM jobq.dependency e"
										   " JOIN jobq.job p ON p.job_id = e.parent_id"
										   " WHERE e.parent_id = ANY ($1) AND e.parent_status IS NULL"
										   " AND p.status IN ('completed', 'failed', 'cancelled')"
										   " AND (e.child_id, e.parent_id) > ($3, $4)"
										   " ORDER BY e.child_id, e.parent_id LIMIT $2",
										   4, cand_types),
						 values, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	ncand = SPI_processed;
	*more = ncand >= JOBQ_SETTLE_CHUNK;
	if (ncand == 0)
	{
		SPI_freetuptable(tt);
		return 0;
	}
	cand_child = palloc(sizeof(int64) * ncand);
	cand_parent = palloc(sizeof(int64) * ncand);
	distinct = palloc(sizeof(int64) * ncand);
	for (uint64 r = 0; r < ncand; r++)
	{
		bool		isnull;

		cand_child[r] = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 1, &isnull));
		cand_parent[r] = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 2, &isnull));
		if (ndistinct == 0 || distinct[ndistinct - 1] != cand_child[r])
			distinct[ndistinct++] = cand_child[r];
	}
	SPI_freetuptable(tt);
	cur->child = cand_child[ncand - 1];
	cur->parent = cand_parent[ncand - 1];

	/* the children to settle, locked; the edges of the others wait */
	locked = palloc(sizeof(int64) * ndistinct);
	nlocked = jobq_lock_children(distinct, ndistinct, locked);
	for (uint64 r = 0, i = 0; r < ncand; r++)
	{
		while (i < (uint64) nlocked && locked[i] < cand_child[r])
			i++;
		if (i < (uint64) nlocked && locked[i] == cand_child[r])
		{
			cand_child[nedges] = cand_child[r];
			cand_parent[nedges++] = cand_parent[r];
		}
		else
			CursorDefer(cur, cand_parent[r]);
	}
	if (nedges == 0)
		return 0;
	values[0] = jobq_id_array(cand_child, nedges);
	values[1] = jobq_id_array(cand_parent, nedges);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_take_edges,
										   "UPDATE jobq.dependency d SET parent_status = p.status"
										   " FROM unnest($1, $2) AS u(child, parent), jobq.job p"
										   " WHERE d.parent_id = u.parent AND d.child_id = u.child"
										   " AND d.parent_status IS NULL AND p.job_id = u.parent"
										   " RETURNING d.child_id, d.parent_id, d.parent_status = 'completed'",
										   2, edge_types),
						 values, NULL, SPI_OK_UPDATE_RETURNING);
	tt = SPI_tuptable;
	nsettled = SPI_processed;
	if (nsettled == 0)
	{
		SPI_freetuptable(tt);
		return 0;
	}
	edges = palloc(sizeof(SettledEdge) * nsettled);
	for (uint64 r = 0; r < nsettled; r++)
	{
		bool		isnull;

		edges[r].child = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 1, &isnull));
		edges[r].parent = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 2, &isnull));
		edges[r].completed = DatumGetBool(SPI_getbinval(tt->vals[r], tt->tupdesc, 3, &isnull));
	}
	SPI_freetuptable(tt);
	qsort(edges, nsettled, sizeof(SettledEdge), EdgeCompare);

	/*
	 * per child: how many of its parents finished, the first that did not
	 * complete
	 */
	children = palloc(sizeof(int64) * nsettled);
	counts = palloc(sizeof(Datum) * nsettled);
	bad = palloc(sizeof(int64) * nsettled);
	for (uint64 r = 0; r < nsettled; r++)
	{
		if (nchildren == 0 || children[nchildren - 1] != edges[r].child)
		{
			children[nchildren] = edges[r].child;
			counts[nchildren] = Int32GetDatum(0);
			bad[nchildren++] = 0;
		}
		counts[nchildren - 1] = Int32GetDatum(DatumGetInt32(counts[nchildren - 1]) + 1);
		if (!edges[r].completed &&
			(bad[nchildren - 1] == 0 || edges[r].parent < bad[nchildren - 1]))
			bad[nchildren - 1] = edges[r].parent;
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
		SettledEdge *pairs = palloc(sizeof(SettledEdge) * ncancel);

		for (int i = 0; i < ncancel; i++)
		{
			pairs[i].child = cancel[i];
			pairs[i].parent = cancel_bad[i];
		}
		qsort(pairs, ncancel, sizeof(SettledEdge), EdgeCompare);
		for (int i = 0; i < ncancel; i++)
		{
			cancel[i] = pairs[i].child;
			cancel_bad[i] = pairs[i].parent;
		}
	}
	*next = palloc(sizeof(int64) * Max(ncancel, 1));
	ncancel = jobq_cancel_all(cancel, cancel_bad, ncancel, now, *next);
	pfree(edges);
	pfree(cand_child);
	pfree(cand_parent);
	pfree(distinct);
	pfree(locked);
	pfree(children);
	pfree(counts);
	pfree(bad);
	pfree(unblock);
	pfree(cancel);
	pfree(cancel_bad);
	return ncancel;
}

/*
 * Settle the dependents of the jobs ids[] that have finished (the others
 * are passed over), round after round: the dependents a round cancels
 * settle their own in the next.  The parents of dependents another
 * transaction holds are deferred to the background worker.  SPI
 * connected, as the extension owner.
 */
void
jobq_parents_finished(const int64 *ids, int n, TimestampTz now)
{
	int64	   *round;
	int			nround = n;
	SettleCursor cur = {0, 0, NULL, 0, 0};

	if (!AnyDependents(ids, n))
		return;
	round = palloc(sizeof(int64) * Max(n, 1));
	memcpy(round, ids, sizeof(int64) * n);
	while (nround > 0)
	{
		int64	   *cancelled = NULL;
		int			ncancelled = 0;
		bool		more;

		/* the round's edges a chunk at a time: memory stays bounded */
		cur.child = cur.parent = 0;
		do
		{
			int64	   *next;
			int			k;

			CHECK_FOR_INTERRUPTS();
			k = SettleChunk(round, nround, now, &cur, &next, &more);
			if (k > 0)
			{
				cancelled = cancelled ? repalloc(cancelled, sizeof(int64) * (ncancelled + k))
					: palloc(sizeof(int64) * k);
				memcpy(cancelled + ncancelled, next, sizeof(int64) * k);
				ncancelled += k;
			}
			if (next)
				pfree(next);
		} while (more);
		pfree(round);
		round = cancelled;
		nround = ncancelled;
	}
	jobq_defer_parents(cur.deferred, cur.ndeferred);
	if (cur.deferred)
		pfree(cur.deferred);
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
 * found first and then driven from their ids, so that no plan walks
 * jobq.job; those another transaction holds are left for the background
 * worker (jobq.settle_deferred), and until then none of them unblocks (see
 * jobq_unblock_all).  The parents still to look at are a queue in an array
 * (a long chain brings back one job a step).  SPI connected, as the
 * extension owner.
 */
void
jobq_parent_retried(int64 job_id, TimestampTz now)
{
	Oid			types[3] = {INT8OID, TIMESTAMPTZOID, INT8ARRAYOID};
	int64	   *todo;
	uint64		head = 0;
	uint64		tail = 0;
	uint64		cap = 64;

	if (!AnyDependents(&job_id, 1))
		return;
	todo = palloc(sizeof(int64) * cap);
	todo[tail++] = job_id;
	while (head < tail)
	{
		Datum		values[3];
		int64		parent = todo[head++];
		int64	   *children;
		int64	   *locked;
		uint64		nchildren;
		int			nlocked;

		CHECK_FOR_INTERRUPTS();
		values[0] = Int64GetDatum(parent);
		values[1] = TimestampTzGetDatum(now);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_retried_children,
											   "SELECT d.child_id FROM jobq.job p"
											   " JOIN jobq.dependency d ON d.parent_id = p.job_id"
											   " JOIN jobq.job j ON j.job_id = d.child_id"
											   " WHERE p.job_id = $1 AND d.parent_status IS NOT NULL"
											   " AND d.parent_status IS DISTINCT FROM CASE WHEN p.status"
											   " IN ('completed', 'failed', 'cancelled') THEN p.status END"
											   " AND j.status IN ('blocked', 'cancelled')"
											   " ORDER BY d.child_id",
											   1, types),
							 values, NULL, SPI_OK_SELECT);
		nchildren = SPI_processed;
		if (nchildren == 0)
		{
			SPI_freetuptable(SPI_tuptable);
			continue;
		}
		nchildren = jobq_result_ids(&children);
		locked = palloc(sizeof(int64) * nchildren);
		nlocked = jobq_lock_children(children, (int) nchildren, locked);
		if ((uint64) nlocked < nchildren)
			jobq_defer_parents(&parent, 1);
		if (nlocked == 0)
		{
			pfree(children);
			pfree(locked);
			continue;
		}
		values[2] = jobq_id_array(locked, nlocked);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_retried,
											   "WITH c AS (SELECT u.id AS child_id, j.status,"
											   " t.failed_parent = $1 AND t.on_parent_failure = 'cancel' AS by_it,"
											   " (SELECT min(o.parent_id) FROM jobq.dependency o WHERE o.child_id = u.id"
											   " AND o.parent_id <> $1 AND o.parent_status IN ('failed', 'cancelled'))"
											   " AS other FROM unnest($3) AS u(id)"
											   " JOIN jobq.dependent t ON t.job_id = u.id"
											   " JOIN jobq.job j ON j.job_id = u.id"
											   " JOIN jobq.dependency e ON e.parent_id = $1 AND e.child_id = u.id"
											   " WHERE j.status IN ('blocked', 'cancelled')"
											   " AND e.parent_status IS NOT NULL FOR NO KEY UPDATE OF t, j),"
											   " e AS (UPDATE jobq.dependency d SET parent_status = NULL FROM c"
											   " WHERE d.parent_id = $1 AND d.child_id = c.child_id),"
											   " t AS (UPDATE jobq.dependent t SET parents_left = t.parents_left + 1,"
											   " failed_parent = CASE WHEN c.by_it THEN c.other ELSE t.failed_parent END"
											   " FROM c WHERE t.job_id = c.child_id)"
											   " UPDATE jobq.job j SET status = 'blocked', finished_at = NULL,"
											   " last_error = NULL, updated_at = $2 FROM c"
											   " WHERE j.job_id = c.child_id AND c.status = 'cancelled' AND c.by_it"
											   " AND c.other IS NULL RETURNING j.job_id",
											   3, types),
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
		pfree(children);
		pfree(locked);
	}
	pfree(todo);
}

/*
 * Settle the parents ids[] (ascending) again for the background worker:
 * their settling was deferred (see jobq.settle_deferred); what it defers
 * again counts as the worker's try.  The parents are locked FOR SHARE
 * first, so that their outcomes cannot change meanwhile; one another
 * transaction holds is
 * deferred again whole, and one that is gone (purged) has nothing left to
 * settle.  Then the dependents take each parent's outcome now (a parent's
 * retry that passed some over first, then its finish), as far as another
 * transaction holds none of them (the rest is deferred again), and those
 * that wait for no parent any more and are still blocked (see
 * jobq_unblock_all) are unblocked.  SPI connected, as the extension owner.
 */
static void
SettleAgain(const int64 *ids, int n, TimestampTz now)
{
	Oid			types[1] = {INT8ARRAYOID};
	Oid			three[3] = {INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID};
	Datum		values[1];
	Datum		pair[3];
	int64	   *locked;
	int64	   *finished;
	int			nlocked = 0;
	int			nfinished = 0;
	int64	   *other;
	int			nother;
	int64	   *children;
	int			nchildren;
	int64	   *free_children;
	int			nfree;

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
											   2, three),
							 pair, NULL, SPI_OK_SELECT);
		nother = jobq_result_ids(&other);
		jobq_defer_parents(other, nother);
		pfree(other);
	}
	if (nlocked == 0)
		return;
	values[0] = jobq_id_array(locked, nlocked);

	/* parents whose dependents were settled with another outcome: retried */
	jobq_spi_exec_latest(jobq_plan_generic(&plan_again_retried,
										   "SELECT DISTINCT p.job_id FROM jobq.job p"
										   " JOIN jobq.dependency d ON d.parent_id = p.job_id"
										   " WHERE p.job_id = ANY ($1) AND d.parent_status IS NOT NULL"
										   " AND d.parent_status IS DISTINCT FROM CASE WHEN p.status"
										   " IN ('completed', 'failed', 'cancelled') THEN p.status END"
										   " ORDER BY p.job_id",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	nother = jobq_result_ids(&other);
	for (int i = 0; i < nother; i++)
		jobq_parent_retried(other[i], now);
	pfree(other);
	jobq_parents_finished(finished, nfinished, now);

	/* dependents a retry kept blocked though nothing was left to wait for */
	jobq_spi_exec_latest(jobq_plan_generic(&plan_again_ready,
										   "SELECT DISTINCT d.child_id FROM jobq.dependency d"
										   " JOIN jobq.dependent t ON t.job_id = d.child_id"
										   " JOIN jobq.job j ON j.job_id = d.child_id"
										   " WHERE d.parent_id = ANY ($1) AND t.parents_left = 0"
										   " AND j.status = 'blocked' ORDER BY d.child_id",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	nchildren = jobq_result_ids(&children);
	free_children = palloc(sizeof(int64) * Max(nchildren, 1));
	nfree = jobq_lock_children(children, nchildren, free_children);
	if (nfree < nchildren)
	{
		/* the parents of those held */
		pair[0] = values[0];
		pair[1] = jobq_id_array(children, nchildren);
		pair[2] = jobq_id_array(free_children, nfree);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_again_held,
											   "SELECT DISTINCT d.parent_id FROM jobq.dependency d"
											   " WHERE d.parent_id = ANY ($1) AND d.child_id = ANY ($2)"
											   " AND d.child_id <> ALL ($3)",
											   3, three),
							 pair, NULL, SPI_OK_SELECT);
		nother = jobq_result_ids(&other);
		jobq_defer_parents(other, nother);
		pfree(other);
	}
	jobq_unblock_all(free_children, nfree, now);
	pfree(children);
	pfree(free_children);
	pfree(locked);
	pfree(finished);
}

void
jobq_settle_again(const int64 *ids, int n, TimestampTz now)
{
	jobq_defer_again_set(true);
	PG_TRY();
	{
		SettleAgain(ids, n, now);
	}
	PG_FINALLY();
	{
		jobq_defer_again_set(false);
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
	Oid			types[1] = {INT8OID};
	Oid			count_types[2] = {INT8OID, INT4OID};
	Datum		values[1];
	Datum		counts[2];
	bool		isnull;
	int32		left;
	bool		cancel_mode;
	Datum		bad;
	int64	   *reset;
	int			nreset = 0;

	if (!jobq_depend_installed())
		return false;
	values[0] = Int64GetDatum(job_id);

	/*
	 * Edges settled with an outcome their parent no longer has: a parent
	 * retried since it settled this job (which ran, or was cancelled
	 * otherwise, so the parent's retry left it alone) is unfinished again,
	 * and the job waits for its new outcome; one that finished again since
	 * takes its new outcome.  A parent whose finish is under way (its row is
	 * not locked here: that would make this retry wait for another role's
	 * transaction) may not see the edge just reset, so those parents are
	 * deferred: the worker settles them once they have finished.
	 */
	jobq_spi_exec_latest(jobq_plan_generic(&plan_retry_child,
										   "UPDATE jobq.dependency d SET parent_status = CASE WHEN p.status"
										   " IN ('completed', 'failed', 'cancelled') THEN p.status END"
										   " FROM jobq.job p WHERE d.child_id = $1 AND p.job_id = d.parent_id"
										   " AND d.parent_status IS NOT NULL AND d.parent_status IS DISTINCT FROM"
										   " CASE WHEN p.status IN ('completed', 'failed', 'cancelled') THEN p.status END"
										   " RETURNING d.parent_id, d.parent_status IS NULL",
										   1, types),
						 values, NULL, SPI_OK_UPDATE_RETURNING);
	reset = palloc(sizeof(int64) * Max(SPI_processed, 1));
	for (uint64 r = 0; r < SPI_processed; r++)
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull)))
			reset[nreset++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
														  SPI_tuptable->tupdesc, 1, &isnull));
	SPI_freetuptable(SPI_tuptable);
	jobq_defer_parents(reset, nreset);
	counts[0] = values[0];
	counts[1] = Int32GetDatum(nreset);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_retry_count,
										   "UPDATE jobq.dependent t SET parents_left = t.parents_left + $2,"
										   " failed_parent = NULL WHERE t.job_id = $1"
										   " RETURNING t.parents_left, t.on_parent_failure = 'cancel'",
										   2, count_types),
						 counts, NULL, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 0)
		return false;
	left = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	cancel_mode = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	SPI_freetuptable(SPI_tuptable);
	if (!cancel_mode)
		return left > 0;
	jobq_spi_exec_latest(jobq_plan_generic(&plan_retry_bad,
										   "SELECT min(parent_id) FROM jobq.dependency WHERE child_id = $1"
										   " AND parent_status IN ('failed', 'cancelled')",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	bad = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("job %lld cannot run: its parent job %lld did not complete",
						(long long) job_id, (long long) DatumGetInt64(bad)),
				 errhint("Retry the parent: the jobs cancelled because of it come back with it.")));
	return left > 0;
}
