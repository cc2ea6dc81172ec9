/*-------------------------------------------------------------------------
 *
 * workflow/edges.c
 *	  Workflows: jobq.dependency, and the jobs and deferred parents it names,
 *	  read by index probes without a statement.
 *
 * Settling reads the edges of given parents (or of a given child), the
 * status of given jobs and whether a parent is deferred; the workflow
 * functions (workflow/inspect.c) the same edges, whole job rows and a
 * dependent's on_parent_failure.  As statements these reads had generic plans,
 * and the statistics chose them: once another tenant's parent of 150,000
 * children had been analyzed (n_distinct(parent_id) = 1), "the unsettled
 * edges of these parents, in child order" walked the whole child index at
 * every settle, and "the children of this parent" scanned it whole once
 * per parent a retry brought back.  Here every read descends the index
 * whose leading columns are the key it is given: a parent's edges through
 * jobq.dependency's primary key (parent_id, child_id), its unsettled edges
 * through the partial index dependency_unsettled_idx (the primary key with
 * a filter where that index is missing), a child's through
 * dependency_child_idx, jobs, dependents and deferred parents through
 * their primary keys.  A read so costs the rows it returns, whatever the
 * statistics say.
 *
 * A reader reads under the latest snapshot, as a foreign key's check does,
 * whatever the isolation level (see workflow/settle.c), taken after a
 * CommandCounterIncrement so that it sees what this transaction wrote so
 * far, with statements or straight into the tables (queue/job_lease.c).
 * jobq_reader_refresh takes a new one after further writes.  The workflow
 * functions read under the snapshot of the statement that calls them
 * instead, as a STABLE SQL function would (jobq_reader_open_at).
 *
 * Each edge comes with the row version read (its ctid), and settling
 * writes edges by those (UPDATE ... WHERE ctid = ANY): a statement over a
 * list of row versions has one plan, a TID scan, where one that joins a
 * list of keys to jobq.dependency let the statistics choose a hash join
 * over a whole index.  An edge changes only under its child's row lock, so
 * the writer, holding that lock, writes the version it read, or finds it
 * gone (changed by another settle before the lock was granted: a version
 * the latest snapshot no longer sees) and rightly passes it over.
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
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog.h"
#include "compat.h"
#include "workflow/edges.h"

/* A table and one of its indexes, opened for probes by the reader. */
typedef struct EdgeProbe
{
	Relation	rel;
	Relation	idx;
	IndexScanDesc scan;			/* begun under the reader's snapshot */
	TupleTableSlot *slot;
} EdgeProbe;

struct JobqReader
{
	MemoryContext cxt;			/* where the probes' slots and scans live */
	Snapshot	snap;
	EdgeProbe	by_parent;		/* dependency_pkey */
	EdgeProbe	unsettled;		/* dependency_unsettled_idx */
	EdgeProbe	by_child;		/* dependency_child_idx */
	EdgeProbe	jobs;			/* job_pkey */
	EdgeProbe	deferred;		/* settle_deferred_pkey */
	EdgeProbe	dependents;		/* dependent_pkey */
	EdgeProbe  *walk;			/* the probe jobq_edges_next reads */
	bool		walk_unsettled; /* skip settled edges */
	bool		fixed;			/* opened at a given snapshot: no refresh */
	AttrNumber	dep_parent;
	AttrNumber	dep_child;
	AttrNumber	dep_status;
	AttrNumber	job_status;
	AttrNumber	deferred_retried;
	AttrNumber	dependent_mode;
};

/*
 * Is any of ids[] a parent?  One probe of jobq.dependency's primary key per
 * id, under the latest snapshot, without a statement: this runs in every
 * completion, and a database still at 0.1.0 (no such table) pays one
 * catalog lookup.
 */
bool
jobq_any_dependents(const int64 *ids, int n)
{
	Oid			relid = jobq_relid(JOBQ_REL_DEPENDENCY);
	Oid			idxid = jobq_relid(JOBQ_IDX_DEPENDENCY_PKEY);
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

/* The statuses jobq knows, and their letters (see workflow/edges.h). */
static const char *const status_names[] = {"completed", "failed", "cancelled", "pending",
"running", "blocked"};
static const char status_letters[] = {'c', 'f', 'x', 'p', 'r', 'b'};

/* The letter of a status (see workflow/edges.h); '?' for one jobq does not know. */
char
jobq_status_letter(const char *status, int len)
{
	for (int i = 0; i < lengthof(status_names); i++)
		if (strlen(status_names[i]) == len && memcmp(status_names[i], status, len) == 0)
			return status_letters[i];
	return '?';
}

/* The status a letter stands for; NULL for 0 and for '?'. */
const char *
jobq_status_name(char letter)
{
	for (int i = 0; i < lengthof(status_letters); i++)
		if (status_letters[i] == letter)
			return status_names[i];
	return NULL;
}

/* A new reader (SPI connected or not; jobq 0.2.0 installed). */
JobqReader *
jobq_reader_open(void)
{
	JobqReader *r = palloc0(sizeof(JobqReader));

	r->cxt = CurrentMemoryContext;
	jobq_reader_refresh(r);
	return r;
}

/*
 * A new reader under snap (the calling statement's, say), for reading only:
 * it is never refreshed.
 */
JobqReader *
jobq_reader_open_at(Snapshot snap)
{
	JobqReader *r = palloc0(sizeof(JobqReader));

	r->cxt = CurrentMemoryContext;
	r->snap = RegisterSnapshot(snap);
	r->fixed = true;
	return r;
}

/* Open p over table rel and its index idx; false when there is no idx. */
static bool
ProbeOpen(JobqReader *r, EdgeProbe *p, JobqRelId rel, JobqRelId idx)
{
	Oid			relid;
	Oid			idxid;
	MemoryContext old;

	if (p->rel != NULL)
		return true;
	idxid = jobq_relid(idx);
	if (!OidIsValid(idxid))
		return false;
	relid = jobq_relid_required(rel);
	p->rel = table_open(relid, AccessShareLock);
	p->idx = index_open(idxid, AccessShareLock);
	old = MemoryContextSwitchTo(r->cxt);
	p->slot = table_slot_create(p->rel, NULL);
	MemoryContextSwitchTo(old);
	return true;
}

/*
 * Position p's scan on the nkeys keys (begun under the reader's snapshot;
 * a probe is always given the same number of keys).  Slots and scans live
 * in the reader's memory context, so a caller may reset its own between
 * probes.
 */
static void
ProbeSeek(JobqReader *r, EdgeProbe *p, ScanKey keys, int nkeys)
{
	MemoryContext old = MemoryContextSwitchTo(r->cxt);

	if (p->scan == NULL)
		p->scan = index_beginscan_compat(p->rel, p->idx, r->snap, nkeys, 0);
	index_rescan(p->scan, keys, nkeys, NULL, 0);
	MemoryContextSwitchTo(old);
}

/*
 * The next row of p's scan into its slot; false at the end.  In the
 * reader's memory context too: the index access method may allocate what
 * its scan keeps (B-tree's dead items to mark).
 */
static bool
ProbeNext(JobqReader *r, EdgeProbe *p)
{
	MemoryContext old = MemoryContextSwitchTo(r->cxt);
	bool		found = index_getnext_slot(p->scan, ForwardScanDirection, p->slot);

	MemoryContextSwitchTo(old);
	return found;
}

/* End p's scan (it is begun again under the next snapshot). */
static void
ProbeEndScan(EdgeProbe *p)
{
	if (p->scan != NULL)
		index_endscan(p->scan);
	p->scan = NULL;
}

/* Close p. */
static void
ProbeClose(EdgeProbe *p)
{
	if (p->rel == NULL)
		return;
	ProbeEndScan(p);
	ExecDropSingleTupleTableSlot(p->slot);
	index_close(p->idx, AccessShareLock);
	table_close(p->rel, AccessShareLock);
	p->rel = NULL;
}

/* Read from now on under the latest snapshot, which sees this transaction's writes. */
void
jobq_reader_refresh(JobqReader *r)
{
	if (r->fixed)
		elog(ERROR, "jobq: a reader opened at a snapshot cannot be refreshed");
	ProbeEndScan(&r->by_parent);
	ProbeEndScan(&r->unsettled);
	ProbeEndScan(&r->by_child);
	ProbeEndScan(&r->jobs);
	ProbeEndScan(&r->deferred);
	ProbeEndScan(&r->dependents);
	r->walk = NULL;
	if (r->snap != NULL)
		UnregisterSnapshot(r->snap);
	CommandCounterIncrement();
	r->snap = RegisterSnapshot(GetLatestSnapshot());
}

/* Close the reader. */
void
jobq_reader_close(JobqReader *r)
{
	ProbeClose(&r->by_parent);
	ProbeClose(&r->unsettled);
	ProbeClose(&r->by_child);
	ProbeClose(&r->jobs);
	ProbeClose(&r->deferred);
	ProbeClose(&r->dependents);
	if (r->snap != NULL)
		UnregisterSnapshot(r->snap);
	pfree(r);
}

/*
 * Walk edges from now on (jobq_edges_next): those of parent key whose child
 * is after after, or (JOBQ_EDGES_OF_CHILD, after unused) those of child key.
 */
void
jobq_edges_from(JobqReader *r, JobqEdgeWalk walk, int64 key, int64 after)
{
	ScanKeyData keys[2];

	/* the partial index's entries too: they may lead to a settled version */
	r->walk_unsettled = walk == JOBQ_UNSETTLED_OF_PARENT;
	if (walk == JOBQ_EDGES_OF_CHILD)
	{
		if (!ProbeOpen(r, &r->by_child, JOBQ_REL_DEPENDENCY, JOBQ_IDX_DEPENDENCY_CHILD))
			elog(ERROR, "jobq: index jobq.dependency_child_idx is missing");
		r->walk = &r->by_child;
	}
	else if (walk == JOBQ_UNSETTLED_OF_PARENT &&
			 ProbeOpen(r, &r->unsettled, JOBQ_REL_DEPENDENCY, JOBQ_IDX_DEPENDENCY_UNSETTLED))
		r->walk = &r->unsettled;
	else
	{
		if (!ProbeOpen(r, &r->by_parent, JOBQ_REL_DEPENDENCY, JOBQ_IDX_DEPENDENCY_PKEY))
			elog(ERROR, "jobq: index jobq.dependency_pkey is missing");
		r->walk = &r->by_parent;
	}
	if (r->dep_status == InvalidAttrNumber)
	{
		r->dep_parent = jobq_attnum(JOBQ_REL_DEPENDENCY, "parent_id");
		r->dep_child = jobq_attnum(JOBQ_REL_DEPENDENCY, "child_id");
		r->dep_status = jobq_attnum(JOBQ_REL_DEPENDENCY, "parent_status");
	}
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(key));
	if (walk == JOBQ_EDGES_OF_CHILD)
		ProbeSeek(r, r->walk, keys, 1);
	else
	{
		ScanKeyInit(&keys[1], 2, BTGreaterStrategyNumber, F_INT8GT, Int64GetDatum(after));
		ProbeSeek(r, r->walk, keys, 2);
	}
}

/* The next edge of the walk; false at its end. */
bool
jobq_edges_next(JobqReader *r, JobqEdge *edge)
{
	EdgeProbe  *p = r->walk;

	if (p == NULL)
		return false;
	while (ProbeNext(r, p))
	{
		bool		isnull;
		Datum		status = slot_getattr(p->slot, r->dep_status, &isnull);

		if (isnull)
			edge->outcome = 0;
		else if (r->walk_unsettled)
			continue;
		else
		{
			text	   *t = DatumGetTextPP(status);

			edge->outcome = jobq_status_letter(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
		}
		edge->parent = DatumGetInt64(slot_getattr(p->slot, r->dep_parent, &isnull));
		edge->child = DatumGetInt64(slot_getattr(p->slot, r->dep_child, &isnull));
		edge->tid = p->slot->tts_tid;
		return true;
	}
	jobq_edges_done(r);
	return false;
}

/*
 * The edge (parent, child) into *edge, as jobq_edges_next reads it; false
 * when there is none.
 */
bool
jobq_edge_of(JobqReader *r, int64 parent, int64 child, JobqEdge *edge)
{
	bool		found;

	jobq_edges_from(r, JOBQ_EDGES_OF_PARENT, parent, child - 1);
	found = jobq_edges_next(r, edge) && edge->child == child;
	jobq_edges_done(r);
	return found;
}

/* An array datum of the n row versions tids[]. */
Datum
jobq_tid_array(const ItemPointerData *tids, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = PointerGetDatum(&tids[i]);
	return PointerGetDatum(construct_array(elems, n, TIDOID, sizeof(ItemPointerData), false,
										   TYPALIGN_SHORT));
}

/* Stop the walk early (its index page is let go). */
void
jobq_edges_done(JobqReader *r)
{
	if (r->walk != NULL)
		ProbeEndScan(r->walk);
	r->walk = NULL;
}

/* Open the probe of jobq.job's primary key. */
static void
JobsOpen(JobqReader *r)
{
	if (!ProbeOpen(r, &r->jobs, JOBQ_REL_JOB, JOBQ_IDX_JOB_PKEY))
		elog(ERROR, "jobq: index jobq.job_pkey is missing");
	if (r->job_status == InvalidAttrNumber)
		r->job_status = jobq_attnum(JOBQ_REL_JOB, "status");
}

/*
 * The row of job job_id, NULL when there is no such job.  The slot is the
 * reader's: it holds the row until the next probe of jobq.job.
 */
TupleTableSlot *
jobq_job_row(JobqReader *r, int64 job_id)
{
	ScanKeyData key;

	JobsOpen(r);
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(job_id));
	ProbeSeek(r, &r->jobs, &key, 1);
	if (!ProbeNext(r, &r->jobs))
		return NULL;
	return r->jobs.slot;
}

/*
 * The attribute number of jobq.job's column name in the rows jobq_job_row
 * returns; an error unless it is of type type.
 */
AttrNumber
jobq_job_column(JobqReader *r, const char *name, Oid type)
{
	AttrNumber	att;

	JobsOpen(r);
	att = jobq_attnum(JOBQ_REL_JOB, name);
	if (TupleDescAttr(RelationGetDescr(r->jobs.rel), att - 1)->atttypid != type)
		elog(ERROR, "jobq: column %s of jobq.job is not of type %s", name, format_type_be(type));
	return att;
}

/* The status of job job_id as a letter; 0 when there is no such job. */
char
jobq_job_status(JobqReader *r, int64 job_id)
{
	TupleTableSlot *slot = jobq_job_row(r, job_id);
	bool		isnull;
	Datum		status;
	text	   *t;

	if (slot == NULL)
		return 0;
	status = slot_getattr(slot, r->job_status, &isnull);
	if (isnull)
		return '?';
	t = DatumGetTextPP(status);
	return jobq_status_letter(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

/*
 * Does job child run when a parent fails (jobq.dependent's
 * on_parent_failure = 'run')?  False for a job without parents.
 */
bool
jobq_runs_on_failure(JobqReader *r, int64 child)
{
	ScanKeyData key;
	bool		isnull;
	Datum		mode;
	text	   *t;

	if (!ProbeOpen(r, &r->dependents, JOBQ_REL_DEPENDENT, JOBQ_IDX_DEPENDENT_PKEY))
		elog(ERROR, "jobq: index jobq.dependent_pkey is missing");
	if (r->dependent_mode == InvalidAttrNumber)
		r->dependent_mode = jobq_attnum(JOBQ_REL_DEPENDENT, "on_parent_failure");
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(child));
	ProbeSeek(r, &r->dependents, &key, 1);
	if (!ProbeNext(r, &r->dependents))
		return false;
	mode = slot_getattr(r->dependents.slot, r->dependent_mode, &isnull);
	if (isnull)
		return false;
	t = DatumGetTextPP(mode);
	return VARSIZE_ANY_EXHDR(t) == 3 && memcmp(VARDATA_ANY(t), "run", 3) == 0;
}

/*
 * Is parent_id in jobq.settle_deferred?  *retried (when not NULL) gets the
 * row's retried.
 */
bool
jobq_is_deferred(JobqReader *r, int64 parent_id, bool *retried)
{
	ScanKeyData key;
	bool		isnull;

	if (!ProbeOpen(r, &r->deferred, JOBQ_REL_SETTLE_DEFERRED, JOBQ_IDX_SETTLE_DEFERRED_PKEY))
		elog(ERROR, "jobq: index jobq.settle_deferred_pkey is missing");
	if (r->deferred_retried == InvalidAttrNumber)
		r->deferred_retried = jobq_attnum(JOBQ_REL_SETTLE_DEFERRED, "retried");
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(parent_id));
	ProbeSeek(r, &r->deferred, &key, 1);
	if (!ProbeNext(r, &r->deferred))
		return false;
	if (retried != NULL)
	{
		Datum		d = slot_getattr(r->deferred.slot, r->deferred_retried, &isnull);

		*retried = !isnull && DatumGetBool(d);
	}
	return true;
}
