/*-------------------------------------------------------------------------
 *
 * queue/job_lease.c
 *	  A lease begun and ended without planning or executing a statement: a
 *	  claim reads the head of a queue's rows in jobq.ready through
 *	  ready_claim_idx, deletes them and marks their jobs running; a
 *	  completion marks running jobs completed, straight through the table
 *	  access method.
 *
 * Each ready row is deleted without waiting (table_tuple_delete with wait
 * = false): what FOR UPDATE SKIP LOCKED and a DELETE do, minus the row
 * lock and its WAL record.  A row another transaction is deleting or has
 * locked is passed over, and so is one deleted since the snapshot.  A job
 * row is updated as UPDATE ... WHERE job_id = $1 AND status = ... would:
 * when it changed after the snapshot, its newest version is locked and
 * looked at again (what EvalPlanQual does).  Index entries go in through
 * ExecInsertIndexTuples(), so partial indexes behave as for a statement,
 * and a HOT update adds none.
 *
 * This is the only way a claim and a completion write: jobq's tables are
 * internal.  A table with a trigger, a rule, row-level security, a CHECK
 * constraint, a generated column or a layout this file does not know is
 * refused with an error before anything is written.  Under a transaction
 * snapshot (REPEATABLE READ, SERIALIZABLE) a row that another transaction
 * changed or deleted after the snapshot is a serialization failure, as it
 * is for the statements (UPDATE, FOR UPDATE SKIP LOCKED); SERIALIZABLE's
 * predicate locks are taken by the index and heap access methods
 * themselves.  A claim with a per-key limit picks its rows with a statement
 * (queue_claim.c) and takes them here.  LeaseToken() alone makes tokens.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "nodes/pg_list.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "compat.h"
#include "queue/job_lease.h"

/* The columns a claim reads or writes, by table. */
enum
{
	R_QUEUE,
	R_NEG_PRIORITY,
	R_RUN_AT,
	R_JOB_ID,
	R_KIND,
	R_CONCURRENCY_KEY,
	R_NCOLS
};

/* A column a lease reads or writes: its name and type. */
typedef struct LeaseColumn
{
	const char *name;
	Oid			type;
} LeaseColumn;

static const LeaseColumn ready_cols[R_NCOLS] = {
	{"queue", TEXTOID},
	{"neg_priority", INT4OID},
	{"run_at", TIMESTAMPTZOID},
	{"job_id", INT8OID},
	{"kind", TEXTOID},
	{"concurrency_key", TEXTOID},
};

enum
{
	J_JOB_ID,
	J_KIND,
	J_PAYLOAD,
	J_PRIORITY,
	J_STATUS,
	J_RETRY_COUNT,
	J_MAX_RETRIES,
	J_ATTEMPTS,
	J_CLAIMED_AT,
	J_WORKER_ID,
	J_LEASE_TOKEN,
	J_LEASE_EXPIRES_AT,
	J_CHECKPOINT,
	J_CREATED_AT,
	J_UPDATED_AT,
	J_QUEUE,
	J_RESULT,
	J_FINISHED_AT,
	J_NCOLS
};

static const LeaseColumn job_cols[J_NCOLS] = {
	{"job_id", INT8OID},
	{"kind", TEXTOID},
	{"payload", JSONBOID},
	{"priority", INT4OID},
	{"status", TEXTOID},
	{"retry_count", INT4OID},
	{"max_retries", INT4OID},
	{"attempts", INT4OID},
	{"claimed_at", TIMESTAMPTZOID},
	{"worker_id", TEXTOID},
	{"lease_token", INT8OID},
	{"lease_expires_at", TIMESTAMPTZOID},
	{"checkpoint", JSONBOID},
	{"created_at", TIMESTAMPTZOID},
	{"updated_at", TIMESTAMPTZOID},
	{"queue", TEXTOID},
	{"result", JSONBOID},
	{"finished_at", TIMESTAMPTZOID},
};

/* The relations of a lease's statement, where its columns are (0-based). */
typedef struct LeaseRels
{
	Relation	ready;			/* a claim's only */
	Relation	ready_idx;
	Relation	job;
	Relation	job_pkey;
	ResultRelInfo *job_rri;
	EState	   *estate;
	TupleTableSlot *old;		/* a job row as read */
	TupleTableSlot *new;		/* and as written */
	IndexScanDesc pkey_scan;	/* rescanned for each job: a btree scan's
								 * state is tens of kilobytes */
	Snapshot	snap;
	CommandId	cid;
	int			r[R_NCOLS];
	int			j[J_NCOLS];
	RegProcedure ready_procs[4];	/* = on queue, >= on the position */
	RegProcedure ready_order[4];	/* and the columns' btree comparisons */
	RegProcedure pkey_eq;
} LeaseRels;

/*
 * Can rel be written here at all (see the file header)?  Not with a CHECK
 * constraint or a generated column either: an update here copies the
 * columns it does not change and checks nothing.
 */
static bool
PlainTable(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	return rel->rd_rel->relkind == RELKIND_RELATION && rel->trigdesc == NULL &&
		rel->rd_rules == NULL && !rel->rd_rel->relrowsecurity &&
		!rel->rd_rel->relhassubclass &&
		(constr == NULL || (constr->num_check == 0 && !constr->has_generated_stored));
}

/* Find each named column of rel; false if one is missing or of another type. */
static bool
FindColumns(Relation rel, int ncols, const LeaseColumn *cols, int *attidx)
{
	TupleDesc	desc = RelationGetDescr(rel);

	for (int c = 0; c < ncols; c++)
	{
		attidx[c] = -1;
		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			if (!att->attisdropped && strcmp(NameStr(att->attname), cols[c].name) == 0)
			{
				if (att->atttypid != cols[c].type)
					return false;
				attidx[c] = i;
				break;
			}
		}
		if (attidx[c] < 0)
			return false;
	}
	return true;
}

/*
 * The columns a claim or a completion may write as NULL must allow it: a
 * NOT NULL added by hand is not checked here, so such a table is refused.
 */
static bool
NullableColumns(Relation job, const int *j)
{
	TupleDesc	desc = RelationGetDescr(job);

	return !TupleDescAttr(desc, j[J_WORKER_ID])->attnotnull &&
		!TupleDescAttr(desc, j[J_RESULT])->attnotnull &&
		!TupleDescAttr(desc, j[J_LEASE_EXPIRES_AT])->attnotnull;
}

/*
 * Is idx a plain btree on exactly the columns cols[] of its table (1-based
 * attribute numbers: attidx + 1)?  procs[] gets the function of each
 * column's operator for strategy strategies[i] (what a scan key of a plain
 * comparison takes), order[] its three-way comparison support function
 * (what the members of a row comparison take, see skey.h).
 */
static bool
PlainBtree(Relation idx, int ncols, const int *attidx, const Oid *types,
		   const int *strategies, RegProcedure *procs, RegProcedure *order)
{
	Form_pg_index ind = idx->rd_index;

	if (idx->rd_rel->relam != BTREE_AM_OID || ind->indnkeyatts != ncols ||
		ind->indnatts != ncols || !ind->indisvalid || !ind->indisready ||
		!heap_attisnull(idx->rd_indextuple, Anum_pg_index_indexprs, NULL) ||
		!heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, NULL))
		return false;
	for (int i = 0; i < ncols; i++)
	{
		Oid			op;

		if (ind->indkey.values[i] != attidx[i] + 1 ||
			(idx->rd_indoption[i] & (INDOPTION_DESC | INDOPTION_NULLS_FIRST)) != 0)
			return false;
		op = get_opfamily_member(idx->rd_opfamily[i], types[i], types[i], strategies[i]);
		if (!OidIsValid(op))
			return false;
		procs[i] = get_opcode(op);
		order[i] = get_opfamily_proc(idx->rd_opfamily[i], types[i], types[i], BTORDER_PROC);
		if (!RegProcedureIsValid(procs[i]) || !RegProcedureIsValid(order[i]))
			return false;
	}
	return true;
}

/*
 * Tell ExecInsertIndexTuples() which of jobq.job's indexes an update leaves
 * unchanged, as the executor works it out from the statement's updated
 * columns: their new entries are only new versions, which lets a B-tree
 * delete the old ones bottom-up before it splits a page.  Without a range
 * table entry it would take every index to be unchanged, and run that pass
 * in vain on the indexes of the lease expiry and the finish time.
 */
static void
HintUnchangedIndexes(LeaseRels *lr, bool claim)
{
	static const int claim_changes[] = {J_STATUS, J_ATTEMPTS, J_LEASE_TOKEN, J_CLAIMED_AT,
	J_LEASE_EXPIRES_AT, J_WORKER_ID, J_UPDATED_AT};
	static const int complete_changes[] = {J_STATUS, J_RESULT, J_FINISHED_AT, J_UPDATED_AT,
	J_LEASE_EXPIRES_AT};
	const int  *changes = claim ? claim_changes : complete_changes;
	int			nchanges = claim ? lengthof(claim_changes) : lengthof(complete_changes);

	for (int i = 0; i < lr->job_rri->ri_NumIndices; i++)
	{
		IndexInfo  *ii = lr->job_rri->ri_IndexRelationInfo[i];
		bool		unchanged = ii->ii_Expressions == NIL;

		for (int k = 0; k < ii->ii_NumIndexAttrs && unchanged; k++)
			for (int c = 0; c < nchanges; c++)
				if (ii->ii_IndexAttrNumbers[k] == lr->j[changes[c]] + 1)
					unchanged = false;
		ii->ii_CheckedUnchanged = true;
		ii->ii_IndexUnchanged = unchanged;
	}
}

/*
 * A row that another transaction changed (res) after a transaction
 * snapshot was taken: a serialization failure, as for UPDATE and FOR
 * UPDATE.  Under READ COMMITTED it returns.
 */
static void
CheckSerializable(TM_Result res)
{
	if (IsolationUsesXactSnapshot() && (res == TM_Updated || res == TM_Deleted))
		ereport(ERROR,
				(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
				 errmsg("could not serialize access due to concurrent %s",
						res == TM_Updated ? "update" : "delete")));
}

/* The error for a table of jobq's that is not as jobq made it. */
static void
NotAsMade(const char *table)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("table \"jobq.%s\" is not as jobq made it", table),
			 errdetail("jobq's tables are internal: a claim, a completion and pruning write them directly and refuse a table with a trigger, a rule, row-level security, a CHECK constraint, a generated column, or columns or indexes changed."),
			 errhint("Drop what was added to the table.")));
}

/*
 * The lease token of a job's claim number attempts: the claim number in
 * the high half, 31 bits of salt (random per claim) and job id below.
 */
static int64
LeaseToken(int32 attempts, int64 salt, int64 job_id)
{
	return (int64) (((uint64) attempts << 32) |
					(((uint64) salt + (uint64) job_id * 40503) & 0x7fffffff));
}

/*
 * Open jobq.job, its primary key and (for a claim) jobq.ready and
 * ready_claim_idx; an error when one is missing or not as jobq made it.
 */
static void
OpenLeaseRels(LeaseRels *lr, bool claim)
{
	Oid			idxid = InvalidOid;
	Oid			pkeyid;
	int			ready_key[4];
	Oid			ready_key_types[4];
	int			ready_strategies[4] = {BTEqualStrategyNumber, BTGreaterEqualStrategyNumber,
	BTGreaterEqualStrategyNumber, BTGreaterEqualStrategyNumber};
	int			pkey_strategy = BTEqualStrategyNumber;
	Oid			int8type = INT8OID;
	RegProcedure pkey_order;
	Oid			jobid = jobq_relid(JOBQ_REL_JOB);
	Oid			readyid = jobq_relid(JOBQ_REL_READY);
	bool		ok;
	const char *odd;

	if (!OidIsValid(jobid) || (claim && !OidIsValid(readyid)))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"jobq.%s\" does not exist", OidIsValid(jobid) ? "ready" : "job")));
	memset(lr, 0, sizeof(*lr));
	lr->job = table_open(jobid, RowExclusiveLock);
	pkeyid = RelationGetPrimaryKeyIndexCompat(lr->job);
	ok = PlainTable(lr->job) && OidIsValid(pkeyid) &&
		FindColumns(lr->job, J_NCOLS, job_cols, lr->j) &&
		NullableColumns(lr->job, lr->j);
	if (ok)
	{
		lr->job_pkey = index_open(pkeyid, RowExclusiveLock);
		ok = PlainBtree(lr->job_pkey, 1, &lr->j[J_JOB_ID], &int8type, &pkey_strategy,
						&lr->pkey_eq, &pkey_order);
	}
	odd = ok ? "ready" : "job";
	if (ok && claim)
	{
		lr->ready = table_open(readyid, RowExclusiveLock);
		idxid = jobq_relid(JOBQ_IDX_READY_CLAIM);
		ok = PlainTable(lr->ready) && OidIsValid(idxid) &&
			FindColumns(lr->ready, R_NCOLS, ready_cols, lr->r);
	}
	if (ok && claim)
	{
		lr->ready_idx = index_open(idxid, RowExclusiveLock);
		for (int i = 0; i < 4; i++)
		{
			ready_key[i] = lr->r[R_QUEUE + i];
			ready_key_types[i] = ready_cols[R_QUEUE + i].type;
		}
		ok = lr->ready_idx->rd_index->indrelid == RelationGetRelid(lr->ready) &&
			lr->ready_idx->rd_indcollation[0] == C_COLLATION_OID &&
			PlainBtree(lr->ready_idx, 4, ready_key, ready_key_types, ready_strategies,
					   lr->ready_procs, lr->ready_order);
	}
	if (!ok)
		NotAsMade(odd);

	/* what the executor checks before a DELETE and an UPDATE */
	if (claim)
		CheckCmdReplicaIdentity(lr->ready, CMD_DELETE);
	CheckCmdReplicaIdentity(lr->job, CMD_UPDATE);
	lr->job_rri = makeNode(ResultRelInfo);
	InitResultRelInfo(lr->job_rri, lr->job, 0, NULL, 0);
	ExecOpenIndices(lr->job_rri, false);
	HintUnchangedIndexes(lr, claim);
	lr->estate = CreateExecutorState();
	lr->old = table_slot_create(lr->job, NULL);
	lr->new = MakeSingleTupleTableSlot(RelationGetDescr(lr->job), &TTSOpsVirtual);

	/* as a statement would: see what earlier commands of the transaction did */
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	lr->snap = GetActiveSnapshot();
	lr->cid = GetCurrentCommandId(true);
}

static void
CloseLeaseRels(LeaseRels *lr)
{
	if (lr->pkey_scan)
		index_endscan(lr->pkey_scan);
	PopActiveSnapshot();
	/* later commands of the transaction see what was written */
	CommandCounterIncrement();
	ExecDropSingleTupleTableSlot(lr->new);
	ExecDropSingleTupleTableSlot(lr->old);
	FreeExecutorState(lr->estate);
	ExecCloseIndices(lr->job_rri);
	if (lr->ready_idx)
		index_close(lr->ready_idx, NoLock);
	index_close(lr->job_pkey, NoLock);
	if (lr->ready)
		table_close(lr->ready, NoLock);
	table_close(lr->job, NoLock);
}

/*
 * How an update changes a job row: fill lr->new's values from lr->old's
 * (already copied there); false when the job is not one to change.
 */
typedef bool (*JobChange) (const LeaseRels *lr, void *arg);

/*
 * Update job job_id as UPDATE jobq.job ... WHERE job_id = $1 AND <change's
 * condition> would, and leave the new row in lr->new.  When the row changed
 * since the snapshot, its newest version is locked and looked at again, as
 * EvalPlanQual does.  False when the job does not exist or change declines.
 */
static bool
UpdateJob(LeaseRels *lr, int64 job_id, JobChange change, void *arg)
{
	TupleTableSlot *old = lr->old;
	TupleTableSlot *new = lr->new;
	ScanKeyData key;
	bool		found;
	TM_Result	res;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	JobqUpdateIndexes update_indexes;

	ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, INT8OID, InvalidOid,
						   lr->pkey_eq, Int64GetDatum(job_id));
	if (lr->pkey_scan == NULL)
		lr->pkey_scan = index_beginscan_compat(lr->job, lr->job_pkey, lr->snap, 1, 0);
	index_rescan(lr->pkey_scan, &key, 1, NULL, 0);
	found = index_getnext_slot(lr->pkey_scan, ForwardScanDirection, old);
	if (!found)
		return false;

	for (;;)
	{
		ItemPointerData tid;

		slot_getallattrs(old);
		/* the newest version of the row is still the job's */
		if (old->tts_isnull[lr->j[J_JOB_ID]] ||
			DatumGetInt64(old->tts_values[lr->j[J_JOB_ID]]) != job_id)
			return false;
		ExecClearTuple(new);
		memcpy(new->tts_values, old->tts_values, sizeof(Datum) * old->tts_nvalid);
		memcpy(new->tts_isnull, old->tts_isnull, sizeof(bool) * old->tts_nvalid);
		if (!change(lr, arg))
			return false;
		ExecStoreVirtualTuple(new);

		tid = old->tts_tid;
		res = table_tuple_update(lr->job, &tid, new, lr->cid, lr->snap,
								 InvalidSnapshot, true, &tmfd, &lockmode, &update_indexes);
		if (res == TM_Ok)
			break;
		CheckSerializable(res);
		if (res != TM_Updated)
			return false;		/* deleted, or changed by this transaction */

		/* changed since the snapshot: lock its newest version, look again */
		res = table_tuple_lock(lr->job, &tid, lr->snap, old, lr->cid, lockmode,
							   LockWaitBlock, TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
		if (res != TM_Ok)
			return false;
	}

	if (!JOBQ_UPDATE_INDEXES_NONE(update_indexes) && lr->job_rri->ri_NumIndices > 0)
	{
		list_free(ExecUpdateIndexTuplesCompat(lr->job_rri, new, lr->estate, update_indexes));
		ResetPerTupleExprContext(lr->estate);
	}
	return true;
}

/* Is text column col of slot's row equal to the C string s? */
static bool
TextIs(TupleTableSlot *slot, int col, const char *s, int len)
{
	text	   *t;

	if (slot->tts_isnull[col])
		return false;
	t = DatumGetTextPP(slot->tts_values[col]);
	return VARSIZE_ANY_EXHDR(t) == len && memcmp(VARDATA_ANY(t), s, len) == 0;
}

/* Is kind (text) one of kinds' elements? */
static bool
KindWanted(Datum kind, Datum *kinds, bool *knulls, int nkinds)
{
	text	   *k = DatumGetTextPP(kind);

	for (int i = 0; i < nkinds; i++)
	{
		text	   *e;

		if (knulls[i])
			continue;
		e = DatumGetTextPP(kinds[i]);
		if (VARSIZE_ANY_EXHDR(e) == VARSIZE_ANY_EXHDR(k) &&
			memcmp(VARDATA_ANY(e), VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k)) == 0)
			return true;
	}
	return false;
}

/* What a claim writes into a pending job's row. */
typedef struct ClaimChangeArg
{
	const JobqDirectClaim *c;
	int64		job_id;
	Datum		status_running;
	Datum		lease_expires_at;
	int64		token;			/* out */
} ClaimChangeArg;

/* status = 'pending': mark it running under a new lease */
static bool
ClaimChange(const LeaseRels *lr, void *arg)
{
	ClaimChangeArg *a = arg;
	const int  *j = lr->j;
	TupleTableSlot *new = lr->new;
	int32		attempts;

	if (!TextIs(lr->old, j[J_STATUS], "pending", 7) || new->tts_isnull[j[J_ATTEMPTS]])
		return false;
	if (pg_add_s32_overflow(DatumGetInt32(new->tts_values[j[J_ATTEMPTS]]), 1, &attempts))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("integer out of range")));
	a->token = LeaseToken(attempts, a->c->token_salt, a->job_id);

	new->tts_values[j[J_STATUS]] = a->status_running;
	new->tts_values[j[J_ATTEMPTS]] = Int32GetDatum(attempts);
	new->tts_values[j[J_LEASE_TOKEN]] = Int64GetDatum(a->token);
	new->tts_isnull[j[J_LEASE_TOKEN]] = false;
	new->tts_values[j[J_CLAIMED_AT]] = TimestampTzGetDatum(a->c->now);
	new->tts_isnull[j[J_CLAIMED_AT]] = false;
	new->tts_values[j[J_LEASE_EXPIRES_AT]] = a->lease_expires_at;
	new->tts_isnull[j[J_LEASE_EXPIRES_AT]] = false;
	new->tts_values[j[J_WORKER_ID]] = a->c->worker_id;
	new->tts_isnull[j[J_WORKER_ID]] = a->c->worker_id == (Datum) 0;
	new->tts_values[j[J_UPDATED_AT]] = TimestampTzGetDatum(a->c->now);
	new->tts_isnull[j[J_UPDATED_AT]] = false;
	return true;
}

/* jobq.claim's columns from a claimed job's new row, copied into outcxt */
static void
ClaimedColumns(const LeaseRels *lr, const ClaimChangeArg *a, MemoryContext outcxt,
			   JobqClaimedRow *out)
{
	static const int from[] = {J_JOB_ID, J_LEASE_TOKEN, J_KIND, J_PAYLOAD, J_PRIORITY,
	J_RETRY_COUNT, J_MAX_RETRIES, J_CHECKPOINT, J_CREATED_AT, J_LEASE_EXPIRES_AT};
	TupleTableSlot *new = lr->new;
	MemoryContext oldcxt = MemoryContextSwitchTo(outcxt);

	for (int k = 0; k < (int) lengthof(from); k++)
	{
		int			col = lr->j[from[k]];
		Form_pg_attribute att = TupleDescAttr(new->tts_tupleDescriptor, col);

		out->nulls[k] = new->tts_isnull[col];
		out->values[k] = out->nulls[k] ? (Datum) 0 :
			datumCopy(new->tts_values[col], att->attbyval, att->attlen);
	}
	MemoryContextSwitchTo(oldcxt);
}

/* Does the scan's index entry (queue, neg_priority, run_at, job_id) sort after c's island? */
static bool
EntryPastIsland(const JobqDirectClaim *c, IndexScanDesc scan)
{
	bool		isnull;
	JobqClaimPos key;

	key.neg_priority = DatumGetInt32(index_getattr(scan->xs_itup, 2, scan->xs_itupdesc, &isnull));
	key.run_at = DatumGetTimestampTz(index_getattr(scan->xs_itup, 3, scan->xs_itupdesc, &isnull));
	key.job_id = DatumGetInt64(index_getattr(scan->xs_itup, 4, scan->xs_itupdesc, &isnull));
	return jobq_claim_pos_compare(&key, &c->island_hi) > 0;
}

/*
 * What a claim passes over: rows of kinds it did not ask for (kinds NULL:
 * any kind), and under a per-key limit rows whose key has no room left.
 */
typedef struct ClaimFilter
{
	Datum	   *kinds;
	bool	   *nulls;
	int			n;
	int32		max_per_key;	/* 0: none */
	JobqKeyCounts *keys;
	uint64		read;			/* visible rows of its kinds read, per key */
	bool		passed;			/* a visible row was passed over, */
	JobqClaimPos first;			/* the first one */
	bool		own_passed;		/* one of its kinds, */
	JobqClaimPos own_first;		/* the first one */
	bool		full_key;		/* one for its key's limit */
	bool		ended;			/* the scan from the start read to the end */
	bool		read_any;		/* it read a visible row, */
	JobqClaimPos last_read;		/* the last one (taken, held or passed over) */
	bool		skip;			/* a row this claim took already: */
	int64		skip_job_id;	/* not read again */
} ClaimFilter;

/* A concurrency key of jobq.ready, as a JobqKeyCounts key. */
typedef struct KeyRef
{
	const char *data;
	int			len;
} KeyRef;

typedef struct KeyCount
{
	KeyRef		key;			/* hash key: must be first */
	int64		n;
} KeyCount;

struct JobqKeyCounts
{
	HTAB	   *counts;			/* KeyCount by KeyRef */
	MemoryContext cxt;			/* the counts' and their keys' */
};

static uint32
KeyRefHash(const void *key, Size keysize)
{
	const KeyRef *k = key;

	return hash_bytes((const unsigned char *) k->data, k->len);
}

static int
KeyRefMatch(const void *a, const void *b, Size keysize)
{
	const KeyRef *x = a;
	const KeyRef *y = b;

	return x->len == y->len && memcmp(x->data, y->data, x->len) == 0 ? 0 : 1;
}

/* An empty count of running jobs by key, in the current memory context. */
JobqKeyCounts *
jobq_key_counts_create(void)
{
	JobqKeyCounts *kc = palloc(sizeof(JobqKeyCounts));
	HASHCTL		ctl;

	kc->cxt = CurrentMemoryContext;
	ctl.keysize = sizeof(KeyRef);
	ctl.entrysize = sizeof(KeyCount);
	ctl.hash = KeyRefHash;
	ctl.match = KeyRefMatch;
	ctl.hcxt = kc->cxt;
	kc->counts = hash_create("jobq running jobs by key", 256, &ctl,
							 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	return kc;
}

/* The count of key's running jobs (0 when new; key is copied then). */
static int64 *
KeyCountOf(JobqKeyCounts *counts, text *key)
{
	KeyRef		ref = {VARDATA_ANY(key), VARSIZE_ANY_EXHDR(key)};
	bool		found;
	KeyCount   *e = hash_search(counts->counts, &ref, HASH_ENTER, &found);

	if (!found)
	{
		char	   *copy = MemoryContextAlloc(counts->cxt, Max(ref.len, 1));

		memcpy(copy, ref.data, ref.len);
		e->key.data = copy;
		e->key.len = ref.len;
		e->n = 0;
	}
	return &e->n;
}

/* Add n running jobs of key. */
void
jobq_key_counts_add(JobqKeyCounts *counts, text *key, int64 n)
{
	*KeyCountOf(counts, key) += n;
}

/* The claim key of the ready row in rslot. */
static void
RowKey(const LeaseRels *lr, TupleTableSlot *rslot, JobqClaimPos *key)
{
	bool		isnull;

	key->job_id = DatumGetInt64(slot_getattr(rslot, lr->r[R_JOB_ID] + 1, &isnull));
	key->neg_priority = DatumGetInt32(slot_getattr(rslot, lr->r[R_NEG_PRIORITY] + 1, &isnull));
	key->run_at = DatumGetTimestampTz(slot_getattr(rslot, lr->r[R_RUN_AT] + 1, &isnull));
}

/*
 * Note the scan's row as passed over (the first one's key), and as one of
 * the claim's kinds (own) when it is.
 */
static void
NotePassed(ClaimFilter *cf, const LeaseRels *lr, TupleTableSlot *rslot, bool own)
{
	JobqClaimPos key;

	if (cf->passed && (!own || cf->own_passed))
		return;
	RowKey(lr, rslot, &key);
	if (!cf->passed)
	{
		cf->passed = true;
		cf->first = key;
	}
	if (own && !cf->own_passed)
	{
		cf->own_passed = true;
		cf->own_first = key;
	}
}


/*
 * index_getnext_slot() for a claim, a look at each key: the next visible row
 * the claim's filter lets through into *f; false at the end, past c's island
 * in_island, or after JOBQ_KEY_SCAN rows under a per-key limit.  A row with
 * a concurrency key is counted running from here on (TakeReady gives it back
 * if it is not taken).
 */
static bool
NextReady(const JobqDirectClaim *c, bool in_island, const LeaseRels *lr, IndexScanDesc scan,
		  TupleTableSlot *rslot, ClaimFilter *cf, JobqReadyRow *f)
{
	bool		isnull;

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (!scan->xs_heap_continue)
		{
			if (index_getnext_tid(scan, ForwardScanDirection) == NULL)
			{
				cf->ended = !in_island;
				return false;
			}
			if (in_island && EntryPastIsland(c, scan))
				return false;
		}
		if (!index_fetch_heap(scan, rslot))
			continue;
		if (!in_island)
		{
			/* (not the index entry: its key would keep the leaf page pinned) */
			cf->read_any = true;
			RowKey(lr, rslot, &cf->last_read);
		}
		if (cf->skip &&
			DatumGetInt64(slot_getattr(rslot, lr->r[R_JOB_ID] + 1, &isnull)) == cf->skip_job_id)
			continue;
		if (cf->kinds && !KindWanted(slot_getattr(rslot, lr->r[R_KIND] + 1, &isnull),
									 cf->kinds, cf->nulls, cf->n))
		{
			NotePassed(cf, lr, rslot, false);
			continue;
		}
		f->key_count = NULL;
		if (cf->max_per_key > 0)
		{
			Datum		key;

			if (cf->read++ >= JOBQ_KEY_SCAN)
			{
				/* not the end: this row and those after it wait */
				NotePassed(cf, lr, rslot, true);
				return false;
			}
			key = slot_getattr(rslot, lr->r[R_CONCURRENCY_KEY] + 1, &isnull);
			if (!isnull)
			{
				int64	   *count = KeyCountOf(cf->keys, DatumGetTextPP(key));

				if (*count >= cf->max_per_key)
				{
					NotePassed(cf, lr, rslot, true);
					cf->full_key = true;
					continue;
				}
				(*count)++;
				f->key_count = count;
			}
		}
		f->tid = rslot->tts_tid;
		RowKey(lr, rslot, &f->key);
		return true;
	}
}

/* A row NextReady found is not taken after all: its key's count goes back. */
static void
Untaken(JobqReadyRow *f)
{
	if (f->key_count != NULL)
		(*f->key_count)--;
}

/* Delete the ready row found and claim its job into *out; false: passed over. */
static bool
TakeReady(LeaseRels *lr, JobqReadyRow *f, ClaimChangeArg *arg, MemoryContext outcxt,
		  JobqClaimedRow *out)
{
	TM_FailureData tmfd;
	TM_Result	res;

	/*
	 * SKIP LOCKED: a row another transaction deletes or holds is passed over
	 * (one it deleted after a transaction snapshot: a serialization failure)
	 */
	res = table_tuple_delete(lr->ready, &f->tid, lr->cid, lr->snap, InvalidSnapshot,
							 false, &tmfd, false);
	if (res != TM_Ok)
	{
		/* FOR UPDATE calls a deleted row a concurrent update too */
		CheckSerializable(res == TM_Deleted ? TM_Updated : res);
		Untaken(f);
		return false;
	}
	/* a job that is not pending loses its stale ready row all the same */
	arg->job_id = f->key.job_id;
	if (!UpdateJob(lr, arg->job_id, ClaimChange, arg))
	{
		Untaken(f);
		return false;
	}
	ClaimedColumns(lr, arg, outcxt, out);
	out->values[10] = Int32GetDatum(f->key.neg_priority);
	out->values[11] = TimestampTzGetDatum(f->key.run_at);
	return true;
}

/* Make the claim's row comparison start at *key. */
static void
SetStart(ScanKeyData *row, const JobqClaimPos *key)
{
	row[0].sk_argument = Int32GetDatum(key->neg_priority);
	row[1].sk_argument = TimestampTzGetDatum(key->run_at);
	row[2].sk_argument = Int64GetDatum(key->job_id);
}

/*
 * Claim up to c->batch jobs of c->queue, in claim order, into *rows
 * (allocated in the current memory context) and *nrows: first from its
 * island, if it has one (*nisland of them), then from its claim position
 * on.  Rows of kinds other than c->kinds and, under c->max_per_key, rows
 * whose concurrency key has that many jobs running or taken here are
 * passed over; *passed tells where the first of them was (without one, the
 * claim took what a claim of any kind without limits would have taken).
 */
void
jobq_claim_direct(const JobqDirectClaim *c, JobqClaimedRow **rows, uint64 *nrows,
				  uint64 *nisland, JobqClaimPassed *passed)
{
	MemoryContext outcxt = CurrentMemoryContext;
	MemoryContext cxt;
	LeaseRels	lr;
	ScanKeyData keys[2];
	ScanKeyData row[3];
	IndexScanDesc scan;
	TupleTableSlot *rslot;
	ClaimChangeArg arg;
	JobqClaimedRow *out;
	ClaimFilter cf = {0};
	JobqReadyRow f;
	uint64		n = 0;

	*nisland = 0;
	memset(passed, 0, sizeof(JobqClaimPassed));
	PreventCommandIfReadOnly("DELETE");
	PreventCommandIfParallelMode("DELETE");

	cxt = AllocSetContextCreate(CurrentMemoryContext, "jobq claim", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	OpenLeaseRels(&lr, true);
	cf.kinds = c->kinds;
	cf.nulls = c->kind_nulls;
	cf.n = c->nkinds;
	cf.max_per_key = c->max_per_key;
	cf.keys = c->key_counts;
	arg.c = c;
	arg.status_running = CStringGetTextDatum("running");
	arg.lease_expires_at = DirectFunctionCall2(timestamptz_pl_interval,
											   TimestampTzGetDatum(c->now),
											   IntervalPGetDatum(c->lease));

	/*
	 * queue = $1 AND (neg_priority, run_at, job_id) >= a start key
	 * (SetStart), in the index's attribute numbers (its columns are these
	 * four, in order)
	 */
	ScanKeyEntryInitialize(&row[0], SK_ROW_MEMBER, 2, BTGreaterEqualStrategyNumber,
						   INT4OID, InvalidOid, lr.ready_order[1], (Datum) 0);
	ScanKeyEntryInitialize(&row[1], SK_ROW_MEMBER, 3, BTGreaterEqualStrategyNumber,
						   TIMESTAMPTZOID, InvalidOid, lr.ready_order[2], (Datum) 0);
	ScanKeyEntryInitialize(&row[2], SK_ROW_MEMBER | SK_ROW_END, 4, BTGreaterEqualStrategyNumber,
						   INT8OID, InvalidOid, lr.ready_order[3], (Datum) 0);
	ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, TEXTOID, C_COLLATION_OID,
						   lr.ready_procs[0], CStringGetTextDatum(c->queue));

	/*
	 * a row header has no function of its own (as ExecIndexBuildScanKeys
	 * makes it)
	 */
	memset(&keys[1], 0, sizeof(ScanKeyData));
	keys[1].sk_flags = SK_ROW_HEADER;
	keys[1].sk_attno = 2;
	keys[1].sk_strategy = BTGreaterEqualStrategyNumber;
	keys[1].sk_subtype = INT4OID;
	keys[1].sk_collation = InvalidOid;
	keys[1].sk_argument = PointerGetDatum(row);

	/* in cxt: a waiting claim's empty attempts must leave nothing behind */
	out = palloc0(sizeof(JobqClaimedRow) * Max(c->batch, 1));
	rslot = table_slot_create(lr.ready, NULL);
	if (c->has_island)
	{
		/*
		 * The island: index keys stop the scan past its end, dead or not (a
		 * row comparison stops nbtree on its first member only); their leaf
		 * pin must not stall VACUUM in lock waits: find, end the scan, take.
		 */
		JobqReadyRow *found = palloc(sizeof(JobqReadyRow) * Max(c->batch, 1));
		bool		more = true;

		SetStart(row, &c->island_lo);
		while (more && n < (uint64) c->batch)
		{
			uint64		nf = 0;

			scan = index_beginscan_compat(lr.ready, lr.ready_idx, lr.snap, 2, 0);
			scan->xs_want_itup = true;
			index_rescan(scan, keys, 2, NULL, 0);
			while (nf < (uint64) c->batch - n &&
				   NextReady(c, true, &lr, scan, rslot, &cf, &found[nf]))
				nf++;
			index_endscan(scan);
			more = nf > 0 && nf == (uint64) c->batch - n;
			for (uint64 i = 0; i < nf; i++)
				if (TakeReady(&lr, &found[i], &arg, outcxt, &out[n]))
					n++;
			if (more)
			{
				/* on from the last row found, which the next round passes */
				SetStart(row, &found[nf - 1].key);
				cf.skip = true;
				cf.skip_job_id = found[nf - 1].key.job_id;
			}
		}
		cf.skip = false;
		*nisland = n;
		passed->in_island = cf.passed;
		passed->island_at = cf.first;
		cf.passed = false;
		cf.own_passed = false;
	}
	if (n < (uint64) c->batch)
	{
		passed->scanned = true;
		SetStart(row, &c->start);
		scan = index_beginscan_compat(lr.ready, lr.ready_idx, lr.snap, 2, 0);
		index_rescan(scan, keys, 2, NULL, 0);
		while (n < (uint64) c->batch && NextReady(c, false, &lr, scan, rslot, &cf, &f))
			if (TakeReady(&lr, &f, &arg, outcxt, &out[n]))
				n++;
		index_endscan(scan);
	}
	ExecDropSingleTupleTableSlot(rslot);
	CloseLeaseRels(&lr);
	MemoryContextSwitchTo(outcxt);
	*rows = palloc(sizeof(JobqClaimedRow) * Max(n, 1));
	memcpy(*rows, out, sizeof(JobqClaimedRow) * n);
	MemoryContextDelete(cxt);
	*nrows = n;
	passed->after = cf.passed;
	passed->at = cf.first;
	passed->full_key = cf.full_key;
	passed->own_after = cf.own_passed;
	passed->own_at = cf.own_first;
	passed->ended = cf.ended && cf.read_any;
	passed->end = cf.last_read;
}

/* What a completion writes into a running job's row. */
typedef struct CompleteChangeArg
{
	int64		token;
	Datum		result;			/* (Datum) 0: NULL */
	TimestampTz now;
	Datum		status_completed;
} CompleteChangeArg;

/* status = 'running' AND lease_token = $token: mark it completed */
static bool
CompleteChange(const LeaseRels *lr, void *arg)
{
	CompleteChangeArg *a = arg;
	const int  *j = lr->j;
	TupleTableSlot *new = lr->new;

	if (!TextIs(lr->old, j[J_STATUS], "running", 7) || new->tts_isnull[j[J_LEASE_TOKEN]] ||
		DatumGetInt64(new->tts_values[j[J_LEASE_TOKEN]]) != a->token)
		return false;
	new->tts_values[j[J_STATUS]] = a->status_completed;
	new->tts_values[j[J_RESULT]] = a->result;
	new->tts_isnull[j[J_RESULT]] = a->result == (Datum) 0;
	new->tts_values[j[J_FINISHED_AT]] = TimestampTzGetDatum(a->now);
	new->tts_isnull[j[J_FINISHED_AT]] = false;
	new->tts_values[j[J_UPDATED_AT]] = TimestampTzGetDatum(a->now);
	new->tts_isnull[j[J_UPDATED_AT]] = false;
	new->tts_values[j[J_LEASE_EXPIRES_AT]] = (Datum) 0;
	new->tts_isnull[j[J_LEASE_EXPIRES_AT]] = true;
	return true;
}

/*
 * Complete the running jobs ids[i] whose lease token is tokens[i] (with
 * results[i], NULL where result_nulls is NULL or says so), as an UPDATE
 * with lease_token = $2 AND status = 'running' would.  *queues gets the
 * distinct queues of the completed jobs (palloc'd strings in the current
 * memory context), *ncompleted how many there were.
 */
void
jobq_complete_direct(const Datum *ids, const bool *id_nulls, const Datum *tokens,
					 const bool *token_nulls, const Datum *results,
					 const bool *result_nulls, int n, TimestampTz now,
					 List **queues, uint64 *ncompleted)
{
	MemoryContext outcxt = CurrentMemoryContext;
	MemoryContext cxt;
	LeaseRels	lr;
	CompleteChangeArg arg;
	List	   *seen = NIL;
	uint64		done = 0;

	PreventCommandIfReadOnly("UPDATE");
	PreventCommandIfParallelMode("UPDATE");

	cxt = AllocSetContextCreate(CurrentMemoryContext, "jobq complete", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(cxt);
	OpenLeaseRels(&lr, false);
	arg.now = now;
	arg.status_completed = CStringGetTextDatum("completed");
	for (int i = 0; i < n; i++)
	{
		ListCell   *lc;
		text	   *queue;
		bool		known = false;

		CHECK_FOR_INTERRUPTS();
		if (id_nulls[i] || token_nulls[i])
			continue;
		arg.token = DatumGetInt64(tokens[i]);
		arg.result = results && !(result_nulls && result_nulls[i]) ? results[i] : (Datum) 0;
		if (!UpdateJob(&lr, DatumGetInt64(ids[i]), CompleteChange, &arg))
			continue;
		done++;
		queue = DatumGetTextPP(lr.new->tts_values[lr.j[J_QUEUE]]);
		foreach(lc, seen)
			if (strlen(lfirst(lc)) == VARSIZE_ANY_EXHDR(queue) &&
				memcmp(lfirst(lc), VARDATA_ANY(queue), VARSIZE_ANY_EXHDR(queue)) == 0)
			known = true;
		if (!known)
			seen = lappend(seen, MemoryContextStrdup(outcxt, text_to_cstring(queue)));
	}
	CloseLeaseRels(&lr);
	MemoryContextSwitchTo(outcxt);
	*queues = list_copy(seen);
	MemoryContextDelete(cxt);
	*ncompleted = done;
}

/*
 * Delete the rows of jobq table which at tids[0..n-1] without waiting, as a
 * DELETE of rows chosen FOR UPDATE SKIP LOCKED would, minus the row lock
 * and its WAL record (a LOCK record per row, about half of what removing a
 * job writes): a row another transaction holds, or changed or deleted
 * since it was read, is passed over (deleted[i] false); one this
 * transaction holds is deleted.  Under a transaction snapshot a row
 * changed or deleted since is a serialization failure, as for FOR UPDATE.
 * The rows must have been read in this transaction, by an earlier command.
 * A DELETE touches no index, so none is opened.
 */
void
jobq_delete_rows_nowait(JobqRelId which, ItemPointerData *tids, int n, bool *deleted)
{
	Oid			relid = jobq_relid(which);
	Relation	rel;
	Snapshot	snap;
	CommandId	cid;
	TupleTableSlot *slot = NULL;

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"jobq.%s\" does not exist", jobq_rel_name(which))));
	/* what the executor checks before a DELETE (a standby is read-only too) */
	PreventCommandIfReadOnly("DELETE");
	PreventCommandIfParallelMode("DELETE");
	rel = table_open(relid, RowExclusiveLock);
	if (!PlainTable(rel))
		NotAsMade(jobq_rel_name(which));
	CheckCmdReplicaIdentity(rel, CMD_DELETE);
	CommandCounterIncrement();
	PushActiveSnapshot(GetTransactionSnapshot());
	snap = GetActiveSnapshot();
	cid = GetCurrentCommandId(true);
	for (int i = 0; i < n; i++)
	{
		TM_FailureData tmfd;
		TM_Result	res;

		res = table_tuple_delete(rel, &tids[i], cid, snap, InvalidSnapshot, false, &tmfd, false);
		if (res == TM_BeingModified)
		{
			/*
			 * Held by another transaction, or only by this one: a delete that
			 * does not wait cannot tell which.  A lock that skips what it
			 * would wait for can, as FOR UPDATE SKIP LOCKED does (and writes
			 * its record, for such rows only).
			 */
			if (slot == NULL)
				slot = table_slot_create(rel, NULL);
			res = table_tuple_lock(rel, &tids[i], snap, slot, cid, LockTupleExclusive,
								   LockWaitSkip, 0, &tmfd);
			if (res == TM_Ok)
				res = table_tuple_delete(rel, &tids[i], cid, snap, InvalidSnapshot, true,
										 &tmfd, false);
		}
		CheckSerializable(res);
		deleted[i] = res == TM_Ok;
	}
	if (slot != NULL)
		ExecDropSingleTupleTableSlot(slot);
	PopActiveSnapshot();
	table_close(rel, NoLock);
}

/*
 * Delete, without waiting (jobq_delete_rows_nowait), the rows of table
 * which that the last SPI statement returned, its first column their ctid.
 * Returns how many were deleted; their next ncols columns go to cols[c]
 * and colnulls[c] (palloc'd), in the statement's order.
 */
int
jobq_delete_returned(JobqRelId which, int ncols, Datum **cols, bool **colnulls)
{
	SPITupleTable *tt = SPI_tuptable;
	int			n = (int) SPI_processed;
	int			ndeleted = 0;
	ItemPointerData *tids = palloc(sizeof(ItemPointerData) * Max(n, 1));
	bool	   *deleted = palloc(sizeof(bool) * Max(n, 1));
	bool		isnull;

	for (int c = 0; c < ncols; c++)
	{
		cols[c] = palloc(sizeof(Datum) * Max(n, 1));
		colnulls[c] = palloc(sizeof(bool) * Max(n, 1));
	}
	for (int i = 0; i < n; i++)
	{
		ItemPointerCopy((ItemPointer) DatumGetPointer(SPI_getbinval(tt->vals[i], tt->tupdesc,
																	1, &isnull)),
						&tids[i]);
		for (int c = 0; c < ncols; c++)
			cols[c][i] = SPI_getbinval(tt->vals[i], tt->tupdesc, c + 2, &colnulls[c][i]);
	}
	jobq_delete_rows_nowait(which, tids, n, deleted);
	for (int i = 0; i < n; i++)
	{
		if (!deleted[i])
			continue;
		for (int c = 0; c < ncols; c++)
		{
			cols[c][ndeleted] = cols[c][i];
			colnulls[c][ndeleted] = colnulls[c][i];
		}
		ndeleted++;
	}
	return ndeleted;
}

/*
 * Make out[c] the one-dimensional array of the n values cols[c][0..n-1]
 * (NULL where colnulls[c][i]) of type types[c], for each of the ncols
 * columns jobq_delete_returned() gave: the rows deleted, as parameters of
 * the statement that follows.
 */
void
jobq_columns_arrays(int ncols, const Oid *types, Datum **cols, bool **colnulls, int n,
					Datum *out)
{
	int			dims[1] = {n};
	int			lbs[1] = {1};

	for (int c = 0; c < ncols; c++)
	{
		int16		typlen;
		bool		typbyval;
		char		typalign;

		get_typlenbyvalalign(types[c], &typlen, &typbyval, &typalign);
		out[c] = PointerGetDatum(construct_md_array(cols[c], colnulls[c], 1, dims, lbs,
													types[c], typlen, typbyval, typalign));
	}
}
