/*-------------------------------------------------------------------------
 *
 * queue_depend.c
 *	  Jobs that wait for other jobs (workflows): depends_on at enqueue,
 *	  settling the dependents of a parent that finished, and what a retried
 *	  parent gives back.
 *
 * A job enqueued with depends_on is written 'blocked' (in jobq.job alone:
 * nothing claims it), with one jobq.dependency row per parent and one
 * jobq.dependent row holding how many parents are still unfinished.
 *
 * Races.  The enqueue reads each parent's status (no lock: a transaction
 * held open after it must not stall the parent's worker, nor keep the
 * reaper off its lease) and writes the dependency rows, with the outcome of
 * the parents already finished.  A parent that finishes while the enqueue's
 * transaction is still open cannot see its new dependency rows, so at that
 * transaction's commit (XACT_EVENT_PRE_COMMIT) the parents it recorded as
 * unfinished are locked FOR SHARE and settled if they have finished since:
 * the lock waits for a finish in progress, and a finish that starts later
 * waits the moment it takes for the commit, then sees the rows.  Either the
 * committing enqueue or the finishing parent settles each dependency,
 * never both (settling only takes rows whose parent_status is still NULL).
 * The finishing side looks for dependents with the latest snapshot, which
 * also lets a REPEATABLE READ completion see them.  Each child's counter is
 * decremented under the child's row lock, so exactly one of its parents'
 * transactions sees it reach 0 and unblocks it.
 *
 * Every path that ends a job (complete, complete_many, fail for good, lease
 * expired for good, cancel) calls jobq_parents_finished; retry calls
 * jobq_parent_retried.  A database still at 0.1.0 has no such tables and
 * pays one catalog lookup.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "acl.h"
#include "args.h"
#include "guc.h"
#include "queue_depend.h"
#include "queue_enqueue.h"
#include "spi_plan.h"

/* Most parents of one job, and most dependency rows one call writes. */
#define JOBQ_MAX_PARENTS	100000
#define JOBQ_MAX_EDGES		1000000

static SPIPlanPtr plan_lock_parents;
static SPIPlanPtr plan_record;
static SPIPlanPtr plan_settle;
static SPIPlanPtr plan_unblock;
static SPIPlanPtr plan_cancel_child;
static SPIPlanPtr plan_retried;
static SPIPlanPtr plan_lock_at_commit;
static SPIPlanPtr plan_lost_parent;
static SPIPlanPtr plan_parents_json;

/*
 * Parents this transaction recorded unfinished dependents of (int64s in
 * TopTransactionContext), settled at its commit.
 */
static List *commit_parents = NIL;
static bool xact_callback_registered = false;

/* Does this database have the dependency tables (0.2.0 on)? */
bool
jobq_depend_installed(void)
{
	Oid			nsp = get_namespace_oid("jobq", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid("dependency", nsp));
}

/* qsort comparator for job ids. */
static int
IdCompare(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* An int8[] datum of the n ids. */
static Datum
IdArray(const int64 *ids, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = Int64GetDatum(ids[i]);
	return PointerGetDatum(construct_array(elems, n, INT8OID, 8, true, TYPALIGN_DOUBLE));
}

/*
 * Read depends_on (argument argno) and on_parent_failure (mode_argno) into
 * p; false when the job has no parents (NULL or empty array, or a function
 * of release 0.1.0 without these arguments).
 */
bool
jobq_parents_arg(FunctionCallInfo fcinfo, int argno, int mode_argno, JobqParents *p)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	const char *mode;

	memset(p, 0, sizeof(*p));
	if (PG_NARGS() <= mode_argno)
		return false;
	mode = jobq_name_arg(fcinfo, mode_argno, "on_parent_failure", jobq_max_name_length, false);
	if (strcmp(mode, "cancel") != 0 && strcmp(mode, "run") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("on_parent_failure must be 'cancel' or 'run'"),
				 errhint("'cancel' cancels the job when a parent ends failed or cancelled;"
						 " 'run' runs it once every parent has finished, whatever their outcome.")));
	p->run_on_failure = strcmp(mode, "run") == 0;
	if (PG_ARGISNULL(argno))
		return false;
	jobq_array_arg(PG_GETARG_ARRAYTYPE_P(argno), INT8OID, "depends_on", &elems, &nulls, &n);
	if (n > JOBQ_MAX_PARENTS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("depends_on has more than %d elements", JOBQ_MAX_PARENTS),
				 errhint("Make a fan-in in steps: callbacks that each wait for part of the jobs.")));
	p->ids = palloc(sizeof(int64) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("depends_on[%d] must not be null", i + 1)));
		p->ids[i] = DatumGetInt64(elems[i]);
	}
	qsort(p->ids, n, sizeof(int64), IdCompare);
	for (int i = 0; i < n; i++)
		if (p->n == 0 || p->ids[p->n - 1] != p->ids[i])
			p->ids[p->n++] = p->ids[i];
	return p->n > 0;
}

/* An enqueue of nchildren jobs on p's parents writes this many rows: bounded. */
void
jobq_parents_check_count(const JobqParents *p, int nchildren)
{
	if ((int64) p->n * nchildren > JOBQ_MAX_EDGES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("depends_on times payloads is more than %d dependencies", JOBQ_MAX_EDGES),
				 errdetail("%d parents for each of %d jobs.", p->n, nchildren),
				 errhint("Enqueue one callback that depends on the parents, and the jobs after it.")));
}

/*
 * Read p's parents: check that each exists and that caller holds a
 * capability on its queue, and note their outcomes.
 */
void
jobq_parents_read(JobqParents *p, Oid caller)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	SPITupleTable *tt;
	int			found = 0;

	if (!jobq_depend_installed())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("depends_on needs jobq 0.2.0 in this database"),
				 errhint("Run ALTER EXTENSION jobq UPDATE.")));
	values[0] = IdArray(p->ids, p->n);
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_lock_parents,
											"SELECT job_id, queue, status FROM jobq.job"
											" WHERE job_id = ANY ($1) ORDER BY job_id",
											1, types),
						  values, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	p->statuses = palloc0(sizeof(Datum) * p->n);
	p->left = 0;
	p->failed = 0;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 1, &isnull));
		char	   *queue = SPI_getvalue(tt->vals[r], tt->tupdesc, 2);
		char	   *status = SPI_getvalue(tt->vals[r], tt->tupdesc, 3);

		if (!jobq_may(caller, queue, JOBQ_CAP_ENQUEUE) && !jobq_may(caller, queue, JOBQ_CAP_WORK))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to depend on job %lld of queue \"%s\"",
							(long long) id, queue),
					 errhint("A job may depend on jobs of queues its role holds a capability on"
							 " (jobq.grant).")));
		while (found < p->n && p->ids[found] < id)
			found++;
		if (found == p->n || p->ids[found] != id)
			elog(ERROR, "jobq: parent %lld was not asked for", (long long) id);
		if (strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
			strcmp(status, "cancelled") == 0)
		{
			p->statuses[found] = CStringGetTextDatum(status);
			if (strcmp(status, "completed") != 0 && p->failed == 0)
				p->failed = id;
		}
		else
			p->left++;
		found++;
	}
	if (SPI_processed < (uint64) p->n)
	{
		/* name the first missing one */
		int			k = 0;

		for (uint64 r = 0; r < SPI_processed; r++, k++)
		{
			bool		isnull;

			if (DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 1, &isnull)) != p->ids[k])
				break;
		}
		ereport(ERROR,
				(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
				 errmsg("depends_on names job %lld, which does not exist", (long long) p->ids[k]),
				 errhint("Parents must exist when the job is enqueued: enqueue them first"
						 " (in the same transaction is fine).")));
	}
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
	scan = index_beginscan(rel, idx, snap, 1, 0);
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

/* Blocked job child_id to pending, into jobq.ready or jobq.scheduled. */
static void
Unblock(int64 child_id, TimestampTz now)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;

	values[0] = Int64GetDatum(child_id);
	values[1] = TimestampTzGetDatum(now);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_unblock,
										   "UPDATE jobq.job SET status = 'pending', updated_at = $2"
										   " WHERE job_id = $1 AND status = 'blocked'"
										   " RETURNING queue, kind, priority, concurrency_key, run_at",
										   2, types),
						 values, NULL, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 0)
		return;					/* cancelled meanwhile */
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	jobq_requeue(child_id, SPI_getvalue(tup, desc, 1), SPI_getvalue(tup, desc, 2),
				 DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull)),
				 SPI_getvalue(tup, desc, 4),
				 DatumGetTimestampTz(SPI_getbinval(tup, desc, 5, &isnull)), now);
}

/* Blocked job child_id cancelled because parent did not complete; false if not blocked. */
static bool
CancelChild(int64 child_id, int64 parent, TimestampTz now)
{
	Oid			types[3] = {INT8OID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[3];

	values[0] = Int64GetDatum(child_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = CStringGetTextDatum(psprintf("parent job %lld did not complete", (long long) parent));
	jobq_spi_exec_latest(jobq_plan_generic(&plan_cancel_child,
										   "UPDATE jobq.job SET status = 'cancelled', finished_at = $2,"
										   " updated_at = $2, last_error = $3"
										   " WHERE job_id = $1 AND status = 'blocked'",
										   3, types),
						 values, NULL, SPI_OK_UPDATE);
	return SPI_processed > 0;
}

/*
 * A child whose parents changed: cancel it (a parent did not complete and it
 * does not run on failure), or unblock it (no parent left).  True when it
 * was cancelled: its own dependents are to be settled next.
 */
static bool
DecideChild(int64 child_id, int left, bool run_on_failure, int64 failed, TimestampTz now)
{
	if (failed != 0 && !run_on_failure)
		return CancelChild(child_id, failed, now);
	if (left == 0)
		Unblock(child_id, now);
	return false;
}

/* Settle, at commit, the parents this transaction found unfinished (see the file header). */
static void
SettleAtCommit(void)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	int			n = 0;
	int64	   *ids = palloc(sizeof(int64) * list_length(commit_parents));
	ListCell   *lc;
	JobqSavedUser saved;

	foreach(lc, commit_parents)
		ids[n++] = *(int64 *) lfirst(lc);
	commit_parents = NIL;
	values[0] = IdArray(ids, n);
	/* as for deferred triggers: statements here need a snapshot to stand on */
	PushActiveSnapshot(GetTransactionSnapshot());
	jobq_owner_begin(&saved);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_lock_at_commit,
										   "SELECT job_id FROM jobq.job WHERE job_id = ANY ($1)"
										   " ORDER BY job_id FOR SHARE",
										   1, types),
						 values, NULL, SPI_OK_SELECT);

	/*
	 * A parent gone meanwhile (purged or pruned, so it had finished) with a
	 * dependency of ours still unsettled: its outcome is unknown.  (One whose
	 * dependency rows a rolled-back subtransaction took along is of no
	 * concern.)
	 */
	jobq_spi_exec_latest(jobq_plan_generic(&plan_lost_parent,
										   "SELECT d.parent_id FROM jobq.dependency d"
										   " WHERE d.parent_id = ANY ($1) AND d.parent_status IS NULL"
										   " AND NOT EXISTS (SELECT FROM jobq.job j WHERE j.job_id = d.parent_id)"
										   " LIMIT 1",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0)
	{
		bool		isnull;

		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("parent job %lld was deleted before the transaction that depends on it committed",
						(long long) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
																SPI_tuptable->tupdesc, 1, &isnull))),
				 errhint("A finished job can be pruned or purged at any time; retry the transaction.")));
	}
	jobq_parents_finished(ids, n, GetCurrentTimestamp());
	jobq_owner_end(&saved);
	PopActiveSnapshot();
}

/* Settle at commit; refuse two-phase commit (a prepared transaction would hold the locks). */
static void
DependXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (commit_parents != NIL)
				SettleAtCommit();
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (commit_parents != NIL)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that enqueued jobs with depends_on"
								" on unfinished parents"),
						 errhint("Enqueue them in a transaction that commits directly.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			commit_parents = NIL;	/* its memory went with the transaction */
			break;
		default:
			break;
	}
}

/* Note p's unfinished parents, to settle at commit. */
static void
RememberParents(const JobqParents *p)
{
	MemoryContext old;

	if (!xact_callback_registered)
	{
		RegisterXactCallback(DependXactCallback, NULL);
		xact_callback_registered = true;
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	for (int i = 0; i < p->n; i++)
		if (p->statuses[i] == (Datum) 0)
		{
			int64	   *id = palloc(sizeof(int64));

			*id = p->ids[i];
			commit_parents = lappend(commit_parents, id);
		}
	MemoryContextSwitchTo(old);
}

/*
 * Record that the jobs children[] (those created[]) depend on p's parents,
 * then settle each at once where its parents already decided it.
 */
void
jobq_parents_record(const JobqParents *p, const int64 *children, const bool *created,
					int nchildren, TimestampTz now)
{
	Oid			types[6] = {INT8ARRAYOID, TEXTARRAYOID, INT8ARRAYOID, INT4OID, TEXTOID, INT8OID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	int64	   *ids = palloc(sizeof(int64) * Max(nchildren, 1));
	bool	   *snulls = palloc(sizeof(bool) * p->n);
	int			n = 0;
	int			dims[1];
	int			lbs[1] = {1};

	for (int i = 0; i < nchildren; i++)
		if (created[i])
			ids[n++] = children[i];
	if (n == 0)
		return;
	for (int i = 0; i < p->n; i++)
		snulls[i] = p->statuses[i] == (Datum) 0;
	dims[0] = p->n;
	values[0] = IdArray(p->ids, p->n);
	values[1] = PointerGetDatum(construct_md_array(p->statuses, snulls, 1, dims, lbs,
												   TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = IdArray(ids, n);
	values[3] = Int32GetDatum(p->left);
	values[4] = CStringGetTextDatum(p->run_on_failure ? "run" : "cancel");
	values[5] = Int64GetDatum(p->failed);
	nulls[5] = p->failed == 0 ? 'n' : ' ';
	jobq_spi_exec(jobq_plan_generic(&plan_record,
									"WITH e AS (INSERT INTO jobq.dependency (parent_id, child_id, parent_status)"
									" SELECT p.id, c.id, p.status FROM unnest($1, $2) AS p(id, status)"
									" CROSS JOIN unnest($3) AS c(id))"
									" INSERT INTO jobq.dependent (job_id, parents_left, on_parent_failure,"
									" failed_parent) SELECT c.id, $4, $5, $6 FROM unnest($3) AS c(id)",
									6, types),
				  values, nulls, SPI_OK_INSERT);
	if (p->left > 0 && (p->failed == 0 || p->run_on_failure))
	{
		RememberParents(p);		/* blocked until a parent finishes */
		return;
	}
	/* decided already; a new job has no dependents of its own to settle */
	for (int i = 0; i < n; i++)
		(void) DecideChild(ids[i], p->left, p->run_on_failure, p->failed, now);
}

/* What the settle statement returned for one child. */
typedef struct ChildRow
{
	int64		job_id;
	int			left;
	bool		run_on_failure;
	int64		failed;
} ChildRow;

/*
 * Settle the dependents of the jobs ids[] that have finished (the others
 * are passed over): each edge gets its parent's outcome, each child its
 * counter; then the children are decided, and those cancelled settle their
 * own dependents in turn.  SPI connected, as the extension owner.
 */
void
jobq_parents_finished(const int64 *ids, int n, TimestampTz now)
{
	Oid			types[1] = {INT8ARRAYOID};
	int64	   *round = (int64 *) ids;
	int			nround = n;

	if (!AnyDependents(ids, n))
		return;
	while (nround > 0)
	{
		Datum		values[1];
		ChildRow   *rows;
		uint64		nrows;
		int64	   *next;
		int			nnext = 0;

		CHECK_FOR_INTERRUPTS();
		values[0] = IdArray(round, nround);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_settle,
											   "WITH d AS (UPDATE jobq.dependency d SET parent_status = j.status"
											   " FROM jobq.job j WHERE d.parent_id = ANY ($1)"
											   " AND d.parent_status IS NULL AND j.job_id = d.parent_id"
											   " AND j.status IN ('completed', 'failed', 'cancelled')"
											   " RETURNING d.child_id, d.parent_id, d.parent_status),"
											   " c AS (SELECT child_id, count(*)::integer AS n,"
											   " min(parent_id) FILTER (WHERE parent_status <> 'completed') AS bad"
											   " FROM d GROUP BY child_id)"
											   " UPDATE jobq.dependent t SET parents_left = t.parents_left - c.n,"
											   " failed_parent = COALESCE(t.failed_parent, c.bad)"
											   " FROM c WHERE t.job_id = c.child_id"
											   " RETURNING t.job_id, t.parents_left,"
											   " t.on_parent_failure = 'run', t.failed_parent",
											   1, types),
							 values, NULL, SPI_OK_UPDATE_RETURNING);
		nrows = SPI_processed;
		rows = palloc(sizeof(ChildRow) * Max(nrows, 1));
		for (uint64 r = 0; r < nrows; r++)
		{
			HeapTuple	tup = SPI_tuptable->vals[r];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;

			rows[r].job_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
			rows[r].left = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
			rows[r].run_on_failure = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
			rows[r].failed = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
			if (isnull)
				rows[r].failed = 0;
		}
		next = palloc(sizeof(int64) * Max(nrows, 1));
		for (uint64 r = 0; r < nrows; r++)
			if (DecideChild(rows[r].job_id, rows[r].left, rows[r].run_on_failure,
							rows[r].failed, now))
				next[nnext++] = rows[r].job_id;
		pfree(rows);
		round = next;
		nround = nnext;
	}
}

/*
 * Parent job_id went from failed or cancelled back to pending (jobq.retry):
 * its dependents wait for its new outcome.  A blocked dependent counts it
 * unfinished again; one cancelled only because of it is blocked again (and
 * so, in turn, are its own dependents cancelled only because of it).  A
 * dependent that already ran, runs or was cancelled otherwise is left as it
 * is.  SPI connected, as the extension owner.
 */
void
jobq_parent_retried(int64 job_id, TimestampTz now)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	List	   *todo;

	if (!AnyDependents(&job_id, 1))
		return;
	todo = list_make1(palloc(sizeof(int64)));
	*(int64 *) linitial(todo) = job_id;
	while (todo != NIL)
	{
		Datum		values[2];
		int64		parent = *(int64 *) linitial(todo);

		CHECK_FOR_INTERRUPTS();
		todo = list_delete_first(todo);
		values[0] = Int64GetDatum(parent);
		values[1] = TimestampTzGetDatum(now);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_retried,
											   "WITH c AS (SELECT d.child_id, j.status, (SELECT min(o.parent_id)"
											   " FROM jobq.dependency o WHERE o.child_id = d.child_id"
											   " AND o.parent_id <> $1 AND o.parent_status IN ('failed', 'cancelled'))"
											   " AS other FROM jobq.dependency d"
											   " JOIN jobq.dependent t ON t.job_id = d.child_id"
											   " JOIN jobq.job j ON j.job_id = d.child_id"
											   " WHERE d.parent_id = $1 AND d.parent_status IS NOT NULL"
											   " AND (j.status = 'blocked' OR (j.status = 'cancelled'"
											   " AND t.failed_parent = $1 AND t.on_parent_failure = 'cancel'))"
											   " FOR UPDATE OF t, j),"
											   " e AS (UPDATE jobq.dependency d SET parent_status = NULL FROM c"
											   " WHERE d.parent_id = $1 AND d.child_id = c.child_id),"
											   " t AS (UPDATE jobq.dependent t SET parents_left = t.parents_left + 1,"
											   " failed_parent = CASE WHEN t.failed_parent = $1 THEN c.other"
											   " ELSE t.failed_parent END FROM c WHERE t.job_id = c.child_id)"
											   " UPDATE jobq.job j SET status = 'blocked', finished_at = NULL,"
											   " last_error = NULL, updated_at = $2 FROM c"
											   " WHERE j.job_id = c.child_id AND c.status = 'cancelled'"
											   " AND c.other IS NULL RETURNING j.job_id",
											   2, types),
							 values, NULL, SPI_OK_UPDATE_RETURNING);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			int64	   *child = palloc(sizeof(int64));

			*child = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1,
												 &isnull));
			todo = lappend(todo, child);
		}
	}
}

/*
 * {"parents": [...]}: jobq.parent_results(job_id) as a handler running as
 * role sees it (results only of parents whose queue role may work on), for
 * the in-database handler's job argument; {} before 0.2.0.  SPI connected.
 * An error leaves the handler role set: the executor's recovery resets it.
 */
Jsonb	   *
jobq_parents_json(int64 job_id, Oid role)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	bool		isnull;
	Datum		d;

	if (!jobq_depend_installed())
		return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")));
	values[0] = Int64GetDatum(job_id);
	jobq_acl_set_handler_role(role);
	jobq_spi_exec(jobq_plan(&plan_parents_json,
							"SELECT jsonb_build_object('parents', COALESCE(jsonb_agg(to_jsonb(p)"
							" ORDER BY p.job_id), '[]')) FROM jobq.parent_results($1) p",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	jobq_acl_set_handler_role(InvalidOid);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return DatumGetJsonbP(SPI_datumTransfer(d, false, -1));
}
