/*-------------------------------------------------------------------------
 *
 * workflow/depend.c
 *	  Workflows, the enqueue side: a job's depends_on read and recorded,
 *	  checked again at its transaction's commit, and its parents for an
 *	  in-database handler's job argument.  Settling is in workflow/settle.c.
 *
 * A job enqueued with depends_on is written 'blocked' (in jobq.job alone:
 * nothing claims it), with one jobq.dependency row per parent (holding the
 * outcome of a parent already finished) and one jobq.dependent row with how
 * many parents are still unfinished.
 *
 * Races.  The enqueue reads each parent's status without a lock: a
 * transaction held open after it must not stall the parent's worker, nor
 * keep the reaper off its lease.  A parent that finishes while the
 * enqueue's transaction is still open cannot see the new dependency rows,
 * so at that transaction's commit (XACT_EVENT_PRE_COMMIT) its parents are
 * locked FOR SHARE and settled if they have finished since: the lock waits
 * for a finish in progress, and a finish that starts later waits the
 * moment the commit takes, then sees the rows.  Either the committing
 * enqueue or the finishing parent settles each dependency, never both
 * (settling takes only rows whose parent_status is still NULL).  A parent
 * read as finished but retried before the commit (its retry could not see
 * the new rows) is given the retry's treatment then.  Two-phase commit is
 * refused: a prepared transaction would hold those locks.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "guc.h"
#include "spi.h"
#include "subxact.h"
#include "workflow/decide.h"
#include "workflow/depend.h"
#include "workflow/edges.h"
#include "workflow/settle.h"

/* Most parents of one job, and most dependency rows one call writes. */
#define JOBQ_MAX_PARENTS	100000
#define JOBQ_MAX_EDGES		1000000

static SPIPlanPtr plan_read_parents;
static SPIPlanPtr plan_record;
static SPIPlanPtr plan_record_0_3_4;	/* edges without their parent's queue */
static SPIPlanPtr plan_lock_at_commit;
static SPIPlanPtr plan_lock_nowait;
static SPIPlanPtr plan_lock_wait;
static SPIPlanPtr plan_parents_json;

/*
 * The edges of the parents $1 (their outcomes $2, and from 0.3.5 their
 * queues $6: with_queue ", parent_queue", queue_arg ", $6") to the children
 * $3, and the children's counters ($4 parents left, $5 on_parent_failure).
 */
#define JOBQ_RECORD_SQL(with_queue, queue_arg) \
	"WITH e AS (INSERT INTO jobq.dependency (parent_id, child_id, parent_status" with_queue ")" \
	" SELECT p.id, c.id, p.status" with_queue \
	" FROM unnest($1, $2" queue_arg ") AS p(id, status" with_queue ")" \
	" CROSS JOIN unnest($3) AS c(id))" \
	" INSERT INTO jobq.dependent (job_id, parents_left, on_parent_failure)" \
	" SELECT c.id, $4, $5 FROM unnest($3) AS c(id)"

/*
 * A parent this transaction recorded dependencies on, with the outcome it
 * read then: 0 unfinished, else 'c'ompleted, 'f'ailed or 'x' (cancelled).
 * In TopTransactionContext; checked again at commit.
 */
typedef struct RememberedParent
{
	int64		id;
	char		status;
} RememberedParent;

static List *commit_parents = NIL;
static bool xact_callback_registered = false;

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
	qsort(p->ids, n, sizeof(int64), jobq_id_compare);
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

/* The one-letter form of a job status for RememberedParent (0: unfinished). */
static char
FinishedStatus(const char *status)
{
	if (strcmp(status, "completed") == 0)
		return 'c';
	if (strcmp(status, "failed") == 0)
		return 'f';
	if (strcmp(status, "cancelled") == 0)
		return 'x';
	return 0;
}

/*
 * The permission error for a parent the caller may not depend on (or that
 * it cannot see); queue, when the caller may see the parent's queue (it
 * holds enqueue there), is named in the detail.
 */
static void
NoParent(int64 id, const char *queue)
{
	if (queue != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to depend on job %lld", (long long) id),
				 errdetail("Its queue \"%s\" grants this role enqueue only.", queue),
				 errhint("Depending on a job needs the work or administer capability on its"
						 " queue (jobq.grant).")));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to depend on job %lld", (long long) id),
			 errhint("A job may depend only on existing jobs of queues its role may work on"
					 " or administer (jobq.grant).")));
}

/* What a caller may do with the jobs of one queue, for jobq_parents_read. */
typedef struct QueueRight
{
	char	   *queue;
	bool		work;			/* work or administer */
	bool		enqueue;		/* enqueue (only asked when not work) */
} QueueRight;

/*
 * The caller's right over queue, asked once per queue of a call (the
 * parents of a fan-in are mostly in one queue).
 */
static QueueRight *
RightOver(List **rights, Oid caller, const char *queue)
{
	ListCell   *lc;
	QueueRight *r;

	foreach(lc, *rights)
	{
		r = (QueueRight *) lfirst(lc);
		if (strcmp(r->queue, queue) == 0)
			return r;
	}
	r = palloc(sizeof(QueueRight));
	r->queue = pstrdup(queue);
	r->work = jobq_may(caller, queue, JOBQ_CAP_WORK);
	r->enqueue = !r->work && jobq_may(caller, queue, JOBQ_CAP_ENQUEUE);
	*rights = lappend(*rights, r);
	return r;
}

/*
 * Read p's parents: check that each exists and that caller may work on (or
 * administer) its queue, and note their outcomes.  Every dependent costs
 * the parent's tenant: it is settled in the transaction that finishes the
 * parent (that tenant's worker's complete, or the reaper), so enqueue alone
 * is not enough, or a producer could hang any number of dependents on
 * another tenant's jobs and slow down each of their completions.  A
 * parent that does not exist is 23503 for a caller who sees every queue;
 * for anyone else it is the same 42501 as a parent in a queue they may not
 * use, so that job ids and queue names of others cannot be probed.
 */
void
jobq_parents_read(JobqParents *p, Oid caller)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	SPITupleTable *tt;
	uint64		nrows;
	uint64		k = 0;
	bool		sees_all;
	List	   *rights = NIL;

	if (!jobq_depend_installed())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("depends_on needs jobq 0.2.0 in this database"),
				 errhint("Run ALTER EXTENSION jobq UPDATE.")));
	values[0] = jobq_id_array(p->ids, p->n);
	jobq_spi_exec(jobq_plan_generic(&plan_read_parents,
									"SELECT job_id, queue, status FROM jobq.job"
									" WHERE job_id = ANY ($1) ORDER BY job_id",
									1, types),
				  values, NULL, SPI_OK_SELECT);
	/* jobq_may runs statements of its own: keep this result */
	tt = SPI_tuptable;
	nrows = SPI_processed;
	sees_all = jobq_may(caller, NULL, JOBQ_CAP_ADMINISTER);
	p->statuses = palloc0(sizeof(Datum) * p->n);
	p->queues = palloc0(sizeof(Datum) * p->n);
	p->left = 0;
	p->failed = 0;
	for (int i = 0; i < p->n; i++)
	{
		bool		isnull;
		char	   *queue = NULL;
		char	   *status = NULL;

		if (k < nrows &&
			DatumGetInt64(SPI_getbinval(tt->vals[k], tt->tupdesc, 1, &isnull)) == p->ids[i])
		{
			queue = SPI_getvalue(tt->vals[k], tt->tupdesc, 2);
			status = SPI_getvalue(tt->vals[k], tt->tupdesc, 3);
			k++;
		}
		if (queue == NULL && sees_all)
			ereport(ERROR,
					(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
					 errmsg("depends_on names job %lld, which does not exist", (long long) p->ids[i]),
					 errhint("Parents must exist when the job is enqueued: enqueue them first"
							 " (in the same transaction is fine).")));
		if (queue == NULL)
			NoParent(p->ids[i], NULL);
		if (!sees_all)
		{
			QueueRight *right = RightOver(&rights, caller, queue);

			if (!right->work)
				NoParent(p->ids[i], right->enqueue ? queue : NULL);
		}
		p->queues[i] = CStringGetTextDatum(queue);
		if (FinishedStatus(status) != 0)
		{
			p->statuses[i] = CStringGetTextDatum(status);
			if (strcmp(status, "completed") != 0 && p->failed == 0)
				p->failed = p->ids[i];
		}
		else
			p->left++;
	}
}

/* qsort comparator for remembered parents, by id. */
static int
RememberedCompare(const void *a, const void *b)
{
	return jobq_id_compare(&((const RememberedParent *) a)->id, &((const RememberedParent *) b)->id);
}

/* A lock statement run in a subtransaction: its plan, its SQL, its ids. */
typedef struct JobqLockCall
{
	SPIPlanPtr *cache;
	const char *sql;
	Datum	   *values;			/* values[0]: the ids, an int8[] */
} JobqLockCall;

/* Run a lock statement and keep its locks. */
static bool
LockAndKeep(void *arg)
{
	JobqLockCall *c = (JobqLockCall *) arg;
	Oid			types[1] = {INT8ARRAYOID};

	jobq_spi_exec_latest(jobq_plan_generic(c->cache, c->sql, 1, types),
						 c->values, NULL, SPI_OK_SELECT);
	return true;
}

/* Run a lock statement, wait for its locks, and let go of them. */
static bool
LockAndLetGo(void *arg)
{
	(void) LockAndKeep(arg);
	return false;
}

/*
 * Run the plan of *cache (sql over the ids in values[0]) in a
 * subtransaction; false, the subtransaction's locks gone, when a row lock
 * was not to be had at once (NOWAIT).  Any other error is thrown again.
 * SPI connected.
 */
static bool
TryLock(SPIPlanPtr *cache, const char *sql, Datum *values)
{
	JobqLockCall c;
	ErrorData  *edata;

	c.cache = cache;
	c.sql = sql;
	c.values = values;
	edata = jobq_subxact_run(LockAndKeep, &c);
	if (edata == NULL)
		return true;
	if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
		ReThrowError(edata);
	FreeErrorData(edata);
	return false;
}

/*
 * Lock the n parents ids[] FOR SHARE without holding any of them while
 * waiting for another transaction: all at once without waiting; when one is
 * held elsewhere, let go of all, wait for each in turn holding only that
 * one (and let go of it), and try again.  Holding the first parents while
 * waiting for a later one would stall their workers for as long as the
 * later one's holder (a tenant's open transaction) pleases.
 */
static void
LockParents(const int64 *ids, int n)
{
	Datum		values[1];

	values[0] = jobq_id_array(ids, n);
	while (!TryLock(&plan_lock_nowait,
					"SELECT job_id FROM jobq.job WHERE job_id = ANY ($1) ORDER BY job_id"
					" FOR SHARE NOWAIT", values))
	{
		for (int i = 0; i < n; i++)
		{
			Datum		one[1];
			JobqLockCall c;
			ErrorData  *edata;

			CHECK_FOR_INTERRUPTS();
			one[0] = jobq_id_array(&ids[i], 1);
			c.cache = &plan_lock_wait;
			c.sql = "SELECT job_id FROM jobq.job WHERE job_id = ANY ($1) FOR SHARE";
			c.values = one;
			edata = jobq_subxact_run(LockAndLetGo, &c);
			if (edata != NULL)
				ReThrowError(edata);
		}
	}
}

/* Settle at commit what this transaction recorded (see the file header). */
static void
SettleAtCommit(void)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	int			n = 0;
	int			nids = 0;
	RememberedParent *parents = palloc(sizeof(RememberedParent) * list_length(commit_parents));
	int64	   *ids = palloc(sizeof(int64) * list_length(commit_parents));
	ListCell   *lc;
	JobqSavedUser saved;
	TimestampTz now = GetCurrentTimestamp();
	SPITupleTable *tt;
	uint64		nrows;
	int			i = 0;
	JobqReader *reader;

	foreach(lc, commit_parents)
		parents[n++] = *(RememberedParent *) lfirst(lc);
	commit_parents = NIL;
	qsort(parents, n, sizeof(RememberedParent), RememberedCompare);
	for (int k = 0; k < n; k++)
		if (nids == 0 || ids[nids - 1] != parents[k].id)
			ids[nids++] = parents[k].id;
	values[0] = jobq_id_array(ids, nids);
	/* as for deferred triggers: statements here need a snapshot to stand on */
	PushActiveSnapshot(GetTransactionSnapshot());
	jobq_owner_begin(&saved);
	LockParents(ids, nids);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_lock_at_commit,
										   "SELECT job_id, status FROM jobq.job WHERE job_id = ANY ($1)"
										   " ORDER BY job_id",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	tt = SPI_tuptable;
	nrows = SPI_processed;

	/*
	 * A parent read as finished that is not so any more, or finished
	 * otherwise, was retried meanwhile, and its retry could not see the new
	 * dependencies: they wait for its new outcome, as the retry would have
	 * had them do.
	 */
	for (uint64 r = 0; r < nrows; r++)
	{
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 1, &isnull));
		char		now_status = FinishedStatus(SPI_getvalue(tt->vals[r], tt->tupdesc, 2));
		bool		retried = false;

		CHECK_FOR_INTERRUPTS();
		Assert(i <= n);
		/* both in id order: a merge */
		while (i < n && parents[i].id < id)
			i++;
		for (; i < n && parents[i].id == id; i++)
			if (parents[i].status != 0 && parents[i].status != now_status)
				retried = true;
		if (retried)
			jobq_parent_retried(id, now);
	}

	/*
	 * A parent gone meanwhile (purged or pruned, so it had finished) with a
	 * dependency of ours still unsettled: its outcome is unknown.  (One whose
	 * dependency rows a rolled-back subtransaction took along is of no
	 * concern.)  A probe of the job's primary key per parent, and for a
	 * parent gone one of the index of unsettled edges.
	 */
	reader = jobq_reader_open();
	for (int k = 0; k < nids; k++)
	{
		JobqEdge	e;

		if (jobq_job_status(reader, ids[k]) != 0)
			continue;
		jobq_edges_from(reader, JOBQ_UNSETTLED_OF_PARENT, ids[k], PG_INT64_MIN);
		if (jobq_edges_next(reader, &e))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("parent job %lld was deleted before the transaction that depends on it committed",
							(long long) ids[k]),
					 errhint("A finished job can be pruned or purged at any time; retry the transaction.")));
	}
	jobq_reader_close(reader);
	jobq_parents_finished(ids, nids, now);
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
						 errmsg("cannot PREPARE a transaction that enqueued jobs with depends_on"),
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

/* Note p's parents and what was read of them, to look at again at commit. */
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
	{
		RememberedParent *r = palloc(sizeof(RememberedParent));

		r->id = p->ids[i];
		r->status = p->statuses[i] == (Datum) 0 ? 0 : FinishedStatus(TextDatumGetCString(p->statuses[i]));
		commit_parents = lappend(commit_parents, r);
	}
	MemoryContextSwitchTo(old);
}

/*
 * Record that the jobs children[] (those created[]) depend on p's parents,
 * then decide at once those their parents already decided.
 */
void
jobq_parents_record(const JobqParents *p, const int64 *children, const bool *created,
					int nchildren, TimestampTz now)
{
	Oid			types[6] = {INT8ARRAYOID, TEXTARRAYOID, INT8ARRAYOID, INT4OID, TEXTOID,
	TEXTARRAYOID};
	Datum		values[6];
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
	values[0] = jobq_id_array(p->ids, p->n);
	values[1] = PointerGetDatum(construct_md_array(p->statuses, snulls, 1, dims, lbs,
												   TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = jobq_id_array(ids, n);
	values[3] = Int32GetDatum(p->left);
	values[4] = CStringGetTextDatum(p->run_on_failure ? "run" : "cancel");
	values[5] = PointerGetDatum(construct_array(p->queues, p->n, TEXTOID, -1, false, TYPALIGN_INT));

	/*
	 * Whether edges name their parent's queue is read under the lock the
	 * insert takes anyway: an ALTER EXTENSION jobq UPDATE to 0.3.5 running
	 * meanwhile (which adds the column) is waited for, not raced, so no edge
	 * written after it names no queue.
	 */
	LockRelationOid(jobq_relid_required(JOBQ_REL_DEPENDENCY), RowExclusiveLock);
	if (jobq_edges_name_queue())
		jobq_spi_exec(jobq_plan_generic(&plan_record,
										JOBQ_RECORD_SQL(", parent_queue", ", $6"),
										6, types),
					  values, NULL, SPI_OK_INSERT);
	else
		jobq_spi_exec(jobq_plan_generic(&plan_record_0_3_4,
										JOBQ_RECORD_SQL("", ""),
										5, types),
					  values, NULL, SPI_OK_INSERT);
	RememberParents(p);
	qsort(ids, n, sizeof(int64), jobq_id_compare);
	if (p->failed != 0 && !p->run_on_failure)
	{
		int64	   *bad = palloc(sizeof(int64) * n);
		int64	   *cancelled = palloc(sizeof(int64) * n);

		for (int i = 0; i < n; i++)
			bad[i] = p->failed;
		/* a new job has no dependents of its own to settle */
		(void) jobq_cancel_all(ids, bad, n, now, cancelled);
	}
	else if (p->left == 0)
		jobq_unblock_all(ids, n, now);
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
