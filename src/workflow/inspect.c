/*-------------------------------------------------------------------------
 *
 * workflow/inspect.c
 *	  jobq.workflow_jobs, jobq.workflow_status and jobq.parent_results: a
 *	  workflow read by index probes, at the cost of its own jobs.
 *
 * The workflow of a root: the root, if the caller may see its queue, and
 * every job reachable from it through jobq.dependency, parent to child,
 * whatever their queues; of those, the jobs in jobq.job whose queue the
 * caller may see (jobq.may_use_queue), in job_id order.  A job of a queue
 * the caller may not see is left out, but the walk goes on through it; a
 * pruned or purged job took its edges from its parents along, so the walk
 * does not reach it or what hangs below it.  That is what these functions
 * meant as SQL (a recursive CTE over jobq.dependency joined to jobq.job).
 * As SQL, the statistics chose their plans: once another tenant's parent of
 * 150,000 children had been analyzed, each step of the recursion hashed or
 * scanned the whole dependency index, and workflow_jobs of a chain of 300
 * jobs took 2-4.4 s, of 1,000 jobs about 14 s.  Here each job of the walk
 * costs one descent of jobq.dependency's primary key (its children), and
 * each job read one descent of jobq.job's (workflow/edges.c), whatever the
 * statistics say; parent_results descends dependency_child_idx once.
 *
 * A walk reads under the snapshot of the statement that calls it, as a
 * STABLE SQL function does, and keeps the set of jobs it has reached, so a
 * cycle (jobq makes none: a job's parents exist before it) cannot make it
 * loop: a job already reached is not read again.  Job ids are not assumed
 * to grow along edges (with a cached sequence they need not).
 *
 * Memory.  The set of jobs reached is a hash table of blocks of 32 job
 * ids, one bit per job (16 bytes a block): a workflow enqueued at one time,
 * whose ids are close together, costs about a byte per job, one whose ids
 * are all 32 or more apart (other tenants' enqueues in between) up to
 * about 40.  The jobs whose children are still to be read take 8 bytes each
 * while they wait (a fan-out of n: 8n bytes at once).  Measured: a fan-out
 * of a million jobs, 9.5 MB (42 MB with its ids 64 apart); a walk
 * takes what it takes in a memory context of its own, freed at its end
 * (client_min_messages = debug1 shows how much), and the rows go out
 * through the tuplestore of a materialized set-returning function, which
 * spills to a temporary file past work_mem.  A workflow's size has no
 * limit: a walk can be cancelled (statement_timeout, pg_cancel_backend) at
 * any job.  Reading the jobs in job_id order reads jobq.job's primary key
 * and heap in order too: a million jobs in 2.3-3.5 s.
 *
 * Capabilities are asked as jobq.may_use_queue and jobq.may ask them (the
 * SQL functions of acl.c, called directly): of the role the session acts
 * as, which inside a job handler is the handler's role.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

#include "catalog.h"
#include "acl.h"
#include "workflow/edges.h"
#include "workflow/settle.h"

PG_FUNCTION_INFO_V1(jobq_workflow_jobs);
PG_FUNCTION_INFO_V1(jobq_workflow_status);
PG_FUNCTION_INFO_V1(jobq_parent_results);

/*
 * WALK_IDS job ids, key * WALK_IDS to key * WALK_IDS + WALK_IDS - 1, and
 * which of them a walk reached (16 bytes).
 */
#define WALK_IDS	32
typedef struct WalkBlock
{
	int64		key;			/* hash key */
	uint32		bits;			/* bit i: job key * WALK_IDS + i */
	char		status;			/* simplehash's */
} WalkBlock;

#define SH_PREFIX		walkset
#define SH_ELEMENT_TYPE	WalkBlock
#define SH_KEY_TYPE		int64
#define SH_KEY			key
#define SH_HASH_KEY(tb, k)	murmurhash32((uint32) ((uint64) (k) ^ ((uint64) (k) >> 32)))
#define SH_EQUAL(tb, a, b)	((a) == (b))
#define SH_SCOPE		static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

/* A walk of a workflow (see the file header). */
typedef struct Walk
{
	MemoryContext cxt;			/* the walk's memory */
	MemoryContext row;			/* reset at every job */
	bool		edges;			/* the database has jobq.dependency */
	walkset_hash *reached;
	int64	   *todo;			/* jobs whose children are still to be read */
	Size		ntodo;
	Size		maxtodo;
	uint64		njobs;			/* jobs reached */
	Size		peak;			/* memory the walk took, before WalkSort */
	/* jobs in job_id order, after WalkSort */
	int64	   *keys;			/* the blocks, sorted */
	uint64		nkeys;
	uint64		next_key;
	uint32		next_bits;		/* bits of keys[next_key - 1] not returned */
} Walk;

/* A parent of a job, for parent_results. */
typedef struct ParentEdge
{
	int64		parent;
	char		outcome;		/* dependency.parent_status, as a letter */
} ParentEdge;

/* A queue and whether the asking role may work on it, for parent_results. */
typedef struct QueueWork
{
	char	   *queue;
	bool		may;
} QueueWork;

/* The block key of job id (floor(id / WALK_IDS)) and its bit in the block. */
#define WALK_KEY(id) \
	((id) >= 0 ? (id) / WALK_IDS : -((-((id) + 1)) / WALK_IDS) - 1)
#define WALK_BIT(id)	((int) ((id) - WALK_KEY(id) * WALK_IDS))

/* Add job id to the walk; false when it was reached before. */
static bool
WalkAdd(Walk *w, int64 id)
{
	bool		found;
	WalkBlock  *b = walkset_insert(w->reached, WALK_KEY(id), &found);
	uint32		bit = ((uint32) 1) << WALK_BIT(id);

	if (!found)
		b->bits = 0;
	if (b->bits & bit)
		return false;
	b->bits |= bit;
	w->njobs++;
	if (w->ntodo == w->maxtodo)
	{
		w->maxtodo *= 2;
		w->todo = repalloc_huge(w->todo, sizeof(int64) * w->maxtodo);
	}
	w->todo[w->ntodo++] = id;
	return true;
}

/*
 * Walk the workflow of root (every job reachable from it, see the file
 * header) into w, in memory of its own; the caller checked that it may see
 * root.
 */
static void
WalkRun(Walk *w, JobqReader *reader, int64 root)
{
	memset(w, 0, sizeof(*w));
	w->cxt = AllocSetContextCreate(CurrentMemoryContext, "jobq workflow walk",
								   ALLOCSET_DEFAULT_SIZES);
	w->row = AllocSetContextCreate(w->cxt, "jobq workflow row", ALLOCSET_SMALL_SIZES);
	/* a database still at 0.1.0 has no edges: a workflow of one job */
	w->edges = jobq_depend_installed();
	w->reached = walkset_create(w->cxt, 64, NULL);
	w->maxtodo = 64;
	w->todo = MemoryContextAlloc(w->cxt, sizeof(int64) * w->maxtodo);

	(void) WalkAdd(w, root);
	while (w->ntodo > 0 && w->edges)
	{
		int64		job = w->todo[--w->ntodo];
		MemoryContext old = MemoryContextSwitchTo(w->row);
		JobqEdge	e;

		CHECK_FOR_INTERRUPTS();
		jobq_edges_from(reader, JOBQ_EDGES_OF_PARENT, job, PG_INT64_MIN);
		while (jobq_edges_next(reader, &e))
			(void) WalkAdd(w, e.child);
		MemoryContextSwitchTo(old);
		MemoryContextReset(w->row);
	}
}

/* qsort comparator of block keys. */
static int
KeyCompare(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * Ready the walk's jobs to be read in job_id order (WalkNext), which also
 * reads jobq.job's primary key and heap in order.
 */
static void
WalkSort(Walk *w)
{
	walkset_iterator it;
	WalkBlock  *b;

	w->peak = MemoryContextMemAllocated(w->cxt, true);
	pfree(w->todo);
	w->todo = NULL;
	w->keys = MemoryContextAllocHuge(w->cxt, sizeof(int64) * Max(w->reached->members, 1));
	w->nkeys = 0;
	walkset_start_iterate(w->reached, &it);
	while ((b = walkset_iterate(w->reached, &it)) != NULL)
		w->keys[w->nkeys++] = b->key;
	qsort(w->keys, w->nkeys, sizeof(int64), KeyCompare);
	w->next_key = 0;
	w->next_bits = 0;
}

/* The walk's next job in job_id order into *id; false after the last. */
static bool
WalkNext(Walk *w, int64 *id)
{
	int			bit;

	while (w->next_bits == 0)
	{
		if (w->next_key == w->nkeys)
			return false;
		w->next_bits = walkset_lookup(w->reached, w->keys[w->next_key++])->bits;
	}
	bit = pg_rightmost_one_pos32(w->next_bits);
	w->next_bits &= w->next_bits - 1;
	*id = w->keys[w->next_key - 1] * WALK_IDS + bit;
	return true;
}

/* Free the walk's memory (client_min_messages = debug1 shows how much). */
static void
WalkEnd(Walk *w)
{
	elog(DEBUG1, "jobq: walked a workflow of %llu jobs (%u blocks of ids) in %zu bytes",
		 (unsigned long long) w->njobs, w->reached->members,
		 Max(w->peak, MemoryContextMemAllocated(w->cxt, true)));
	MemoryContextDelete(w->cxt);
}

/* May the role the session acts as see the jobs of queue (a text datum)? */
static bool
MayUseQueue(Datum queue)
{
	return DatumGetBool(DirectFunctionCall1(jobq_may_use_queue, queue));
}

/*
 * The row of job job_id if it exists and the caller may see its queue,
 * else NULL; *queue gets the queue (attribute queue_att).
 */
static TupleTableSlot *
VisibleJob(JobqReader *reader, int64 job_id, AttrNumber queue_att, Datum *queue)
{
	TupleTableSlot *slot = jobq_job_row(reader, job_id);
	bool		isnull;

	if (slot == NULL)
		return NULL;
	*queue = slot_getattr(slot, queue_att, &isnull);
	if (isnull || !MayUseQueue(*queue))
		return NULL;
	return slot;
}

/*
 * jobq.workflow_jobs(root) -> the jobs of the workflow under root that the
 * caller may see, with the columns of jobq.jobs, in job_id order
 */
Datum
jobq_workflow_jobs(PG_FUNCTION_ARGS)
{
	int64		root = PG_GETARG_INT64(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	desc;
	JobqReader *reader;
	AttrNumber *atts;
	AttrNumber	queue_att;
	Datum	   *values;
	bool	   *nulls;
	Datum		queue;
	Walk		w;
	int64		id;

	InitMaterializedSRF(fcinfo, 0);
	desc = rsinfo->setDesc;
	reader = jobq_reader_open_at(GetActiveSnapshot());
	/* each result column is the job's column of the same name */
	atts = palloc(sizeof(AttrNumber) * desc->natts);
	for (int i = 0; i < desc->natts; i++)
		atts[i] = jobq_job_column(reader, NameStr(TupleDescAttr(desc, i)->attname),
								  TupleDescAttr(desc, i)->atttypid);
	queue_att = jobq_job_column(reader, "queue", TEXTOID);
	values = palloc(sizeof(Datum) * desc->natts);
	nulls = palloc(sizeof(bool) * desc->natts);

	if (VisibleJob(reader, root, queue_att, &queue) == NULL)
	{
		jobq_reader_close(reader);
		return (Datum) 0;
	}
	WalkRun(&w, reader, root);
	WalkSort(&w);
	while (WalkNext(&w, &id))
	{
		MemoryContext old = MemoryContextSwitchTo(w.row);
		TupleTableSlot *slot;

		CHECK_FOR_INTERRUPTS();
		slot = VisibleJob(reader, id, queue_att, &queue);
		if (slot != NULL)
		{
			for (int i = 0; i < desc->natts; i++)
				values[i] = slot_getattr(slot, atts[i], &nulls[i]);
			tuplestore_putvalues(rsinfo->setResult, desc, values, nulls);
		}
		MemoryContextSwitchTo(old);
		MemoryContextReset(w.row);
	}
	WalkEnd(&w);
	jobq_reader_close(reader);
	return (Datum) 0;
}

/*
 * Does a failed or cancelled job leave its workflow unable to finish: no
 * dependent of it runs anyway (on_parent_failure = 'run')?
 */
static bool
Unhandled(JobqReader *reader, int64 job)
{
	JobqEdge	e;

	jobq_edges_from(reader, JOBQ_EDGES_OF_PARENT, job, PG_INT64_MIN);
	while (jobq_edges_next(reader, &e))
		if (jobq_runs_on_failure(reader, e.child))
		{
			jobq_edges_done(reader);
			return false;
		}
	return true;
}

/*
 * jobq.workflow_status(root) -> total, blocked, pending, running,
 * completed, failed, cancelled, can_finish of the workflow under root (the
 * jobs workflow_jobs returns); one row, all zero and can_finish NULL when
 * it has none
 */
Datum
jobq_workflow_status(PG_FUNCTION_ARGS)
{
	int64		root = PG_GETARG_INT64(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	static const char letters[] = {'b', 'p', 'r', 'c', 'f', 'x'};
	int64		counts[1 + lengthof(letters)] = {0};
	Datum		values[2 + lengthof(letters)];
	bool		nulls[2 + lengthof(letters)] = {0};
	bool		unhandled = false;
	JobqReader *reader;
	AttrNumber	queue_att;
	AttrNumber	status_att;
	Datum		queue;

	InitMaterializedSRF(fcinfo, 0);
	reader = jobq_reader_open_at(GetActiveSnapshot());
	queue_att = jobq_job_column(reader, "queue", TEXTOID);
	status_att = jobq_job_column(reader, "status", TEXTOID);
	if (VisibleJob(reader, root, queue_att, &queue) != NULL)
	{
		Walk		w;
		int64		id;

		WalkRun(&w, reader, root);
		WalkSort(&w);
		while (WalkNext(&w, &id))
		{
			MemoryContext old = MemoryContextSwitchTo(w.row);
			TupleTableSlot *slot;
			Datum		status;
			bool		isnull;
			char		letter = '?';

			CHECK_FOR_INTERRUPTS();
			slot = VisibleJob(reader, id, queue_att, &queue);
			if (slot != NULL)
			{
				counts[0]++;
				status = slot_getattr(slot, status_att, &isnull);
				if (!isnull)
				{
					text	   *t = DatumGetTextPP(status);

					letter = jobq_status_letter(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
				}
				for (int i = 0; i < lengthof(letters); i++)
					if (letters[i] == letter)
						counts[1 + i]++;
				if ((letter == 'f' || letter == 'x') && !unhandled)
					unhandled = !w.edges || Unhandled(reader, id);
			}
			MemoryContextSwitchTo(old);
			MemoryContextReset(w.row);
		}
		WalkEnd(&w);
	}
	jobq_reader_close(reader);

	for (int i = 0; i < lengthof(counts); i++)
		values[i] = Int64GetDatum(counts[i]);
	values[lengthof(counts)] = BoolGetDatum(!unhandled);
	nulls[lengthof(counts)] = counts[0] == 0;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* qsort comparator of parents, by id. */
static int
ParentCompare(const void *a, const void *b)
{
	int64		x = ((const ParentEdge *) a)->parent;
	int64		y = ((const ParentEdge *) b)->parent;

	return x < y ? -1 : x > y ? 1 : 0;
}

/*
 * May the role the session acts as work on (or administer) queue?  Asked
 * once per queue of a call (*asked, in memory context cxt: what was asked
 * so far).
 */
static bool
MayWork(List **asked, MemoryContext cxt, Datum queue)
{
	char	   *name = TextDatumGetCString(queue);
	ListCell   *lc;
	QueueWork  *q;
	MemoryContext old;

	foreach(lc, *asked)
	{
		q = (QueueWork *) lfirst(lc);
		if (strcmp(q->queue, name) == 0)
			return q->may;
	}
	old = MemoryContextSwitchTo(cxt);
	q = palloc(sizeof(QueueWork));
	q->queue = pstrdup(name);
	*asked = lappend(*asked, q);
	MemoryContextSwitchTo(old);
	/* work includes administer (acl.c) */
	q->may = DatumGetBool(DirectFunctionCall2(jobq_may_sql, queue, CStringGetTextDatum("work")));
	return q->may;
}

/*
 * jobq.parent_results(job_id) -> job_id, kind, status, result of each
 * parent of the job, in job_id order; nothing for a job the caller may not
 * see.  result only where the caller may work on the parent's queue; a
 * parent no longer kept gives its outcome as status, kind and result NULL.
 */
Datum
jobq_parent_results(PG_FUNCTION_ARGS)
{
	int64		job_id = PG_GETARG_INT64(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JobqReader *reader;
	AttrNumber	queue_att;
	AttrNumber	kind_att;
	AttrNumber	status_att;
	AttrNumber	result_att;
	Datum		queue;
	ParentEdge *parents;
	int			n = 0;
	int			max = 8;
	JobqEdge	e;
	List	   *asked = NIL;
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext row;

	InitMaterializedSRF(fcinfo, 0);
	if (!jobq_depend_installed())
		return (Datum) 0;
	reader = jobq_reader_open_at(GetActiveSnapshot());
	queue_att = jobq_job_column(reader, "queue", TEXTOID);
	kind_att = jobq_job_column(reader, "kind", TEXTOID);
	status_att = jobq_job_column(reader, "status", TEXTOID);
	result_att = jobq_job_column(reader, "result", JSONBOID);
	if (VisibleJob(reader, job_id, queue_att, &queue) == NULL)
	{
		jobq_reader_close(reader);
		return (Datum) 0;
	}

	/* a job's parents, from dependency_child_idx (at most JOBQ_MAX_PARENTS) */
	parents = palloc(sizeof(ParentEdge) * max);
	jobq_edges_from(reader, JOBQ_EDGES_OF_CHILD, job_id, 0);
	while (jobq_edges_next(reader, &e))
	{
		CHECK_FOR_INTERRUPTS();
		if (n == max)
		{
			max *= 2;
			parents = repalloc_huge(parents, sizeof(ParentEdge) * max);
		}
		parents[n].parent = e.parent;
		parents[n].outcome = e.outcome;
		n++;
	}
	qsort(parents, n, sizeof(ParentEdge), ParentCompare);

	row = AllocSetContextCreate(cxt, "jobq parent row", ALLOCSET_SMALL_SIZES);
	for (int i = 0; i < n; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(row);
		TupleTableSlot *slot = jobq_job_row(reader, parents[i].parent);
		Datum		values[4];
		bool		nulls[4] = {false, true, true, true};

		CHECK_FOR_INTERRUPTS();
		values[0] = Int64GetDatum(parents[i].parent);
		if (slot != NULL)
		{
			values[1] = slot_getattr(slot, kind_att, &nulls[1]);
			values[2] = slot_getattr(slot, status_att, &nulls[2]);
			queue = slot_getattr(slot, queue_att, &nulls[3]);
			if (!nulls[3] && MayWork(&asked, cxt, queue))
				values[3] = slot_getattr(slot, result_att, &nulls[3]);
			else
				nulls[3] = true;
		}
		if (nulls[2] && jobq_status_name(parents[i].outcome) != NULL)
		{
			/* a parent no longer kept: its outcome, as the edge holds it */
			values[2] = CStringGetTextDatum(jobq_status_name(parents[i].outcome));
			nulls[2] = false;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(row);
	}
	MemoryContextDelete(row);
	jobq_reader_close(reader);
	return (Datum) 0;
}
