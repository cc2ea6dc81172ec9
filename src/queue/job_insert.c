/*-------------------------------------------------------------------------
 *
 * queue/job_insert.c
 *	  Writing new pending jobs into jobq.job and jobq.ready / jobq.scheduled,
 *	  and reserving their idempotency keys in jobq.idempotency_key, without
 *	  planning or executing an INSERT statement.
 *
 * An enqueue writes two rows per job, formed directly, with no executor
 * state, projection or tuplestore between them; the heap tuples of a batch
 * go in with table_multi_insert() (one WAL record per page, as COPY does)
 * and their index entries through ExecInsertIndexTuples(), so unique
 * checks, partial index predicates and NOT NULL / CHECK constraints behave
 * as they do for an INSERT.
 *
 * A key is reserved as INSERT ... ON CONFLICT DO NOTHING reserves it: a
 * check of the unique index for a committed holder (waiting for one in
 * progress), then a speculative insertion that is taken back when another
 * transaction inserted the same key in between, and the check again.
 *
 * This is the only way an enqueue writes: jobq's tables are internal.  A
 * trigger, a rule or row-level security on a table, a column this file does
 * not know, a type it does not expect, or a default on a column it leaves
 * empty make jobq_insert_pending() and jobq_reserve_key() refuse with an
 * error before they write anything.  Nothing here differs under a
 * transaction snapshot but a key taken after it (KeyHolderAt).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "compat.h"
#include "jobq_limits.h"
#include "queue/job_insert.h"

/* What a column of a new job's rows gets. */
typedef enum JobqFill
{
	JOBQ_FILL_NULL,				/* nothing (and the column has no default) */
	JOBQ_FILL_JOB_ID,
	JOBQ_FILL_QUEUE,
	JOBQ_FILL_KIND,
	JOBQ_FILL_PAYLOAD,
	JOBQ_FILL_PRIORITY,
	JOBQ_FILL_NEG_PRIORITY,
	JOBQ_FILL_STATUS,			/* 'pending' */
	JOBQ_FILL_ZERO,
	JOBQ_FILL_MAX_RETRIES,
	JOBQ_FILL_IDEMPOTENCY_KEY,
	JOBQ_FILL_CONCURRENCY_KEY,
	JOBQ_FILL_RUN_AT,
	JOBQ_FILL_NOW
} JobqFill;

/* A column this file writes: its name, its type and what it gets. */
typedef struct JobqColumn
{
	const char *name;
	Oid			type;
	JobqFill	fill;
} JobqColumn;

static const JobqColumn job_columns[] = {
	{"job_id", INT8OID, JOBQ_FILL_JOB_ID},
	{"queue", TEXTOID, JOBQ_FILL_QUEUE},
	{"kind", TEXTOID, JOBQ_FILL_KIND},
	{"payload", JSONBOID, JOBQ_FILL_PAYLOAD},
	{"priority", INT4OID, JOBQ_FILL_PRIORITY},
	{"status", TEXTOID, JOBQ_FILL_STATUS},
	{"retry_count", INT4OID, JOBQ_FILL_ZERO},
	{"max_retries", INT4OID, JOBQ_FILL_MAX_RETRIES},
	{"attempts", INT4OID, JOBQ_FILL_ZERO},
	{"idempotency_key", TEXTOID, JOBQ_FILL_IDEMPOTENCY_KEY},
	{"concurrency_key", TEXTOID, JOBQ_FILL_CONCURRENCY_KEY},
	{"run_at", TIMESTAMPTZOID, JOBQ_FILL_RUN_AT},
	{"claimed_at", TIMESTAMPTZOID, JOBQ_FILL_NULL},
	{"worker_id", TEXTOID, JOBQ_FILL_NULL},
	{"lease_token", INT8OID, JOBQ_FILL_NULL},
	{"lease_expires_at", TIMESTAMPTZOID, JOBQ_FILL_NULL},
	{"last_error", TEXTOID, JOBQ_FILL_NULL},
	{"result", JSONBOID, JOBQ_FILL_NULL},
	{"checkpoint", JSONBOID, JOBQ_FILL_NULL},
	{"created_at", TIMESTAMPTZOID, JOBQ_FILL_NOW},
	{"updated_at", TIMESTAMPTZOID, JOBQ_FILL_NOW},
	{"finished_at", TIMESTAMPTZOID, JOBQ_FILL_NULL},
};

/* jobq.ready orders by neg_priority; jobq.scheduled keeps priority. */
static const JobqColumn ready_columns[] = {
	{"queue", TEXTOID, JOBQ_FILL_QUEUE},
	{"neg_priority", INT4OID, JOBQ_FILL_NEG_PRIORITY},
	{"run_at", TIMESTAMPTZOID, JOBQ_FILL_RUN_AT},
	{"job_id", INT8OID, JOBQ_FILL_JOB_ID},
	{"kind", TEXTOID, JOBQ_FILL_KIND},
	{"concurrency_key", TEXTOID, JOBQ_FILL_CONCURRENCY_KEY},
};

static const JobqColumn scheduled_columns[] = {
	{"queue", TEXTOID, JOBQ_FILL_QUEUE},
	{"run_at", TIMESTAMPTZOID, JOBQ_FILL_RUN_AT},
	{"job_id", INT8OID, JOBQ_FILL_JOB_ID},
	{"priority", INT4OID, JOBQ_FILL_PRIORITY},
	{"kind", TEXTOID, JOBQ_FILL_KIND},
	{"concurrency_key", TEXTOID, JOBQ_FILL_CONCURRENCY_KEY},
};

/* jobq.idempotency_key: expires_at is set once the job is pruned. */
static const JobqColumn key_columns[] = {
	{"kind", TEXTOID, JOBQ_FILL_KIND},
	{"key", TEXTOID, JOBQ_FILL_IDEMPOTENCY_KEY},
	{"job_id", INT8OID, JOBQ_FILL_JOB_ID},
	{"expires_at", TIMESTAMPTZOID, JOBQ_FILL_NULL},
};

/* One table being written: the relation, its executor state and its rows. */
typedef struct JobqTarget
{
	Relation	rel;
	ResultRelInfo *rri;
	JobqFill   *fill;			/* per attribute of the relation */
	TupleTableSlot **slots;
} JobqTarget;

/*
 * Work out what every attribute of rel gets; false when the table is not
 * one this file can write (see the file header).  cols[] lists the columns
 * in the install script's order, so each search starts where the last one
 * matched and usually takes one comparison.
 */
static bool
MapColumns(Relation rel, const JobqColumn *cols, int ncols, JobqFill *fill)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			found = 0;
	int			next = 0;

	if (rel->rd_rel->relkind != RELKIND_RELATION || rel->trigdesc != NULL ||
		rel->rd_rules != NULL || rel->rd_rel->relrowsecurity)
		return false;
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		int			k = -1;

		fill[i] = JOBQ_FILL_NULL;
		if (att->attisdropped)
			continue;
		for (int tries = 0; tries < ncols; tries++)
		{
			int			c = (next + tries) % ncols;

			if (strcmp(NameStr(att->attname), cols[c].name) == 0)
			{
				k = c;
				break;
			}
		}
		if (k < 0 || att->atttypid != cols[k].type || att->attgenerated)
			return false;
		next = k + 1;
		if ((cols[k].fill == JOBQ_FILL_NULL ||
			 cols[k].fill == JOBQ_FILL_IDEMPOTENCY_KEY) && att->atthasdef)
			return false;
		fill[i] = cols[k].fill;
		found++;
	}
	return found == ncols;
}

/*
 * Open rel for n new rows; an error when it is not as jobq made it.
 * speculative: its unique indexes will arbitrate an insertion (ON CONFLICT).
 */
static void
OpenTarget(JobqTarget *t, Oid relid, const JobqColumn *cols, int ncols, int n,
		   bool speculative)
{
	t->rel = table_open(relid, RowExclusiveLock);
	t->fill = palloc(sizeof(JobqFill) * RelationGetDescr(t->rel)->natts);
	if (!MapColumns(t->rel, cols, ncols, t->fill))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"jobq.%s\" is not as jobq made it",
						RelationGetRelationName(t->rel)),
				 errdetail("jobq's tables are internal: an enqueue writes them directly and refuses a table with a trigger, a rule, row-level security, a generated column, or columns or defaults changed."),
				 errhint("Drop what was added to the table.")));
	t->rri = makeNode(ResultRelInfo);
	InitResultRelInfo(t->rri, t->rel, 0, NULL, 0);
	ExecOpenIndices(t->rri, speculative);
	t->slots = palloc(sizeof(TupleTableSlot *) * n);
	for (int i = 0; i < n; i++)
		t->slots[i] = table_slot_create(t->rel, NULL);
}

/*
 * Rows written per table_multi_insert() call, as COPY buffers them.  Each
 * slot pins the relation's tuple descriptor in the resource owner, whose
 * lookups of one pointer held many times grow with their number: a slot per
 * job made a batch of n jobs cost O(n^2).
 */
#define JOBQ_INSERT_CHUNK 1000

/* The values of one new job's rows. */
typedef struct JobqRowValues
{
	Datum		job_id;
	Datum		queue;
	Datum		kind;
	Datum		payload;
	Datum		priority;
	Datum		neg_priority;
	Datum		status;
	Datum		max_retries;
	Datum		idempotency_key;	/* (Datum) 0 when NULL */
	Datum		concurrency_key;	/* (Datum) 0 when NULL */
	Datum		run_at;
	Datum		now;
} JobqRowValues;

/* Store the row of one job in slot, as t's columns want it. */
static void
FillSlot(const JobqTarget *t, TupleTableSlot *slot, const JobqRowValues *v)
{
	int			natts = slot->tts_tupleDescriptor->natts;

	ExecClearTuple(slot);
	for (int i = 0; i < natts; i++)
	{
		Datum		d = (Datum) 0;

		switch (t->fill[i])
		{
			case JOBQ_FILL_NULL:
				break;
			case JOBQ_FILL_JOB_ID:
				d = v->job_id;
				break;
			case JOBQ_FILL_QUEUE:
				d = v->queue;
				break;
			case JOBQ_FILL_KIND:
				d = v->kind;
				break;
			case JOBQ_FILL_PAYLOAD:
				d = v->payload;
				break;
			case JOBQ_FILL_PRIORITY:
				d = v->priority;
				break;
			case JOBQ_FILL_NEG_PRIORITY:
				d = v->neg_priority;
				break;
			case JOBQ_FILL_STATUS:
				d = v->status;
				break;
			case JOBQ_FILL_ZERO:
				d = Int32GetDatum(0);
				break;
			case JOBQ_FILL_MAX_RETRIES:
				d = v->max_retries;
				break;
			case JOBQ_FILL_IDEMPOTENCY_KEY:
				d = v->idempotency_key;
				break;
			case JOBQ_FILL_CONCURRENCY_KEY:
				d = v->concurrency_key;
				break;
			case JOBQ_FILL_RUN_AT:
				d = v->run_at;
				break;
			case JOBQ_FILL_NOW:
				d = v->now;
				break;
		}
		slot->tts_values[i] = d;
		slot->tts_isnull[i] = t->fill[i] == JOBQ_FILL_NULL ||
			((t->fill[i] == JOBQ_FILL_IDEMPOTENCY_KEY ||
			  t->fill[i] == JOBQ_FILL_CONCURRENCY_KEY) && d == (Datum) 0);
	}
	ExecStoreVirtualTuple(slot);
}

/* Insert t's n filled rows and their index entries. */
static void
WriteTarget(JobqTarget *t, EState *estate, int n)
{
	CommandId	cid = GetCurrentCommandId(true);

	if (RelationGetDescr(t->rel)->constr != NULL)
		for (int i = 0; i < n; i++)
			ExecConstraints(t->rri, t->slots[i], estate);
	if (n == 1)
		table_tuple_insert(t->rel, t->slots[0], cid, 0, NULL);
	else
		table_multi_insert(t->rel, t->slots, n, cid, 0, NULL);
	if (t->rri->ri_NumIndices > 0)
		for (int i = 0; i < n; i++)
		{
			List	   *recheck;

			recheck = ExecInsertIndexTuplesCompat(t->rri, t->slots[i], estate,
												  false, false, NULL, NIL, false);
			list_free(recheck);
			ResetPerTupleExprContext(estate);
		}
}

/* Close what OpenTarget opened (the lock stays until the end of the transaction). */
static void
CloseTarget(JobqTarget *t, int n)
{
	for (int i = 0; i < n; i++)
		ExecDropSingleTupleTableSlot(t->slots[i]);
	ExecCloseIndices(t->rri);
	table_close(t->rel, NoLock);
}

/*
 * Write n pending jobs that differ only by payload: a row each in jobq.job
 * and in jobq.ready (run_at due) or jobq.scheduled (a blocked job: in
 * jobq.job alone).  With ids_given, ids[]
 * holds their ids (a job with an idempotency key is written under the id its
 * key reserved; n is 1 then); otherwise ids[] gets ids taken from
 * jobq.job_id_seq in payload order.
 */
void
jobq_insert_pending(const JobqNewJob *job, int32 max_retries, const Datum *payloads,
					int n, TimestampTz now, int64 *ids, bool ids_given)
{
	bool		ready = job->run_at <= now;
	Oid			seq;
	JobqTarget	jobs;
	JobqTarget	set;
	JobqRowValues v;
	EState	   *estate;
	int			nslots;
	MemoryContext cxt;
	MemoryContext old;

	/* what the executor checks before any INSERT (a standby is read-only too) */
	PreventCommandIfReadOnly("INSERT");
	PreventCommandIfParallelMode("INSERT");

	cxt = AllocSetContextCreate(CurrentMemoryContext, "jobq insert",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	nslots = Min(n, JOBQ_INSERT_CHUNK);
	OpenTarget(&jobs, jobq_relid_required(JOBQ_REL_JOB), job_columns, lengthof(job_columns), nslots,
			   false);
	if (!job->blocked && ready)
		OpenTarget(&set, jobq_relid_required(JOBQ_REL_READY), ready_columns, lengthof(ready_columns),
				   nslots, false);
	else if (!job->blocked)
		OpenTarget(&set, jobq_relid_required(JOBQ_REL_SCHEDULED), scheduled_columns,
				   lengthof(scheduled_columns), nslots, false);
	seq = ids_given ? InvalidOid : jobq_relid(JOBQ_SEQ_JOB_ID);
	if (!ids_given && !OidIsValid(seq))
		elog(ERROR, "jobq: sequence jobq.job_id_seq is missing");

	v.queue = CStringGetTextDatum(job->queue);
	v.kind = CStringGetTextDatum(job->kind);
	v.priority = Int32GetDatum(job->priority);
	v.neg_priority = Int32GetDatum(-job->priority);
	v.status = CStringGetTextDatum(job->blocked ? "blocked" : "pending");
	v.max_retries = Int32GetDatum(max_retries);
	Assert(job->key == NULL || n == 1);
	v.idempotency_key = job->key ? CStringGetTextDatum(job->key) : (Datum) 0;
	v.concurrency_key = job->concurrency_key ? CStringGetTextDatum(job->concurrency_key) : (Datum) 0;
	v.run_at = TimestampTzGetDatum(job->run_at);
	v.now = TimestampTzGetDatum(now);
	estate = CreateExecutorState();
	for (int first = 0; first < n; first += nslots)
	{
		int			chunk = Min(nslots, n - first);

		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < chunk; i++)
		{
			if (!ids_given)
				ids[first + i] = nextval_internal(seq, false);
			v.job_id = Int64GetDatum(ids[first + i]);
			v.payload = payloads[first + i];
			FillSlot(&jobs, jobs.slots[i], &v);
			if (!job->blocked)
				FillSlot(&set, set.slots[i], &v);
		}
		WriteTarget(&jobs, estate, chunk);
		if (!job->blocked)
			WriteTarget(&set, estate, chunk);
	}
	FreeExecutorState(estate);
	if (!job->blocked)
		CloseTarget(&set, nslots);
	CloseTarget(&jobs, nslots);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/*
 * The job id in the key row at tid, which the unique index reported as a
 * committed holder of the key (or one this transaction wrote).  As for ON
 * CONFLICT DO NOTHING, a transaction-level snapshot that cannot see that row
 * is a serialization failure: the key was taken after the snapshot.
 */
static int64
KeyHolderAt(JobqTarget *t, ItemPointer tid)
{
	TupleTableSlot *slot = table_slot_create(t->rel, NULL);
	int			attno = 0;
	bool		isnull;
	int64		job_id;

	if (!table_tuple_fetch_row_version(t->rel, tid, SnapshotAny, slot))
		elog(ERROR, "jobq: idempotency key conflict without a row");
	if (IsolationUsesXactSnapshot() &&
		!table_tuple_satisfies_snapshot(t->rel, slot, GetActiveSnapshot()))
	{
		Datum		xmin = slot_getsysattr(slot, MinTransactionIdAttributeNumber, &isnull);

		if (!TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin)))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
	}
	for (int i = 0; i < slot->tts_tupleDescriptor->natts; i++)
		if (t->fill[i] == JOBQ_FILL_JOB_ID)
			attno = i + 1;
	job_id = DatumGetInt64(slot_getattr(slot, attno, &isnull));
	ExecDropSingleTupleTableSlot(slot);
	return job_id;
}

/*
 * Reserve idempotency key (kind, key) in jobq.idempotency_key for a new job,
 * as INSERT ... ON CONFLICT DO NOTHING does.  JOBQ_KEY_RESERVED: the key row
 * holds a new id from jobq.job_id_seq, in *job_id.  JOBQ_KEY_TAKEN: another
 * job holds the key; *job_id is its id and nothing was written (no id was
 * taken either).
 */
JobqKeyResult
jobq_reserve_key(const char *kind, const char *key, int64 *job_id)
{
	Oid			seq = jobq_relid(JOBQ_SEQ_JOB_ID);
	JobqTarget	t;
	JobqRowValues v = {0};
	JobqKeyResult result;
	EState	   *estate;
	TupleTableSlot *slot;
	bool		have_id = false;	/* an id is taken once the key looks free */
	MemoryContext cxt;
	MemoryContext old;

	PreventCommandIfReadOnly("INSERT");
	PreventCommandIfParallelMode("INSERT");
	if (!OidIsValid(seq))
		elog(ERROR, "jobq: sequence jobq.job_id_seq is missing");

	cxt = AllocSetContextCreate(CurrentMemoryContext, "jobq key",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	OpenTarget(&t, jobq_relid_required(JOBQ_REL_IDEMPOTENCY_KEY), key_columns, lengthof(key_columns),
			   1, true);
	estate = CreateExecutorState();
	slot = t.slots[0];
	v.kind = CStringGetTextDatum(kind);
	v.idempotency_key = CStringGetTextDatum(key);
	v.job_id = Int64GetDatum(0);
	FillSlot(&t, slot, &v);
	for (;;)
	{
		ItemPointerData conflict;
		bool		spec_conflict = false;
		uint32		token;
		List	   *recheck;

		CHECK_FOR_INTERRUPTS();
		/* a committed holder (one in progress is waited for) */
		if (!ExecCheckIndexConstraintsCompat(t.rri, slot, estate, &conflict, NIL))
		{
			*job_id = KeyHolderAt(&t, &conflict);
			result = JOBQ_KEY_TAKEN;
			break;
		}
		if (!have_id)
		{
			have_id = true;
			v.job_id = Int64GetDatum(nextval_internal(seq, false));
			FillSlot(&t, slot, &v);
			if (RelationGetDescr(t.rel)->constr != NULL)
				ExecConstraints(t.rri, slot, estate);
		}
		/* insert, unless someone inserted the key since the check */
		token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
		table_tuple_insert_speculative(t.rel, slot, GetCurrentCommandId(true), 0,
									   NULL, token);
		recheck = ExecInsertIndexTuplesCompat(t.rri, slot, estate, false, true,
											  &spec_conflict, NIL, false);
		table_tuple_complete_speculative(t.rel, slot, token, !spec_conflict);
		SpeculativeInsertionLockRelease(GetCurrentTransactionId());
		list_free(recheck);
		ResetPerTupleExprContext(estate);
		if (!spec_conflict)
		{
			*job_id = DatumGetInt64(v.job_id);
			result = JOBQ_KEY_RESERVED;
			break;
		}
	}
	FreeExecutorState(estate);
	CloseTarget(&t, 1);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return result;
}
