/*-------------------------------------------------------------------------
 *
 * workflow/edges.h
 *	  Workflows: jobq.dependency, and the jobs and deferred parents it names,
 *	  read by index probes without a statement (workflow/edges.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_EDGES_H
#define JOBQ_EDGES_H

#include "postgres.h"

#include "executor/tuptable.h"
#include "storage/itemptr.h"
#include "utils/snapshot.h"

/*
 * A job's status, or a dependency's parent_status, as one letter: 0 none
 * (no such job; an edge not settled), else the first letter of the status,
 * 'x' for cancelled.
 */
#define JOBQ_FINISHED(s)	((s) == 'c' || (s) == 'f' || (s) == 'x')

/* Which edges a walk reads. */
typedef enum JobqEdgeWalk
{
	JOBQ_EDGES_OF_PARENT,		/* a parent's, in child order */
	JOBQ_UNSETTLED_OF_PARENT,	/* a parent's not settled, in child order */
	JOBQ_EDGES_OF_CHILD			/* a child's */
} JobqEdgeWalk;

/* One jobq.dependency row. */
typedef struct JobqEdge
{
	int64		parent;
	int64		child;
	char		outcome;		/* parent_status, as a letter (0: NULL) */
	ItemPointerData tid;		/* the row version read */
} JobqEdge;

typedef struct JobqReader JobqReader;

extern bool jobq_any_dependents(const int64 *ids, int n);
extern JobqReader *jobq_reader_open(void);
extern JobqReader *jobq_reader_open_at(Snapshot snap);
extern void jobq_reader_refresh(JobqReader *r);
extern void jobq_reader_close(JobqReader *r);
extern void jobq_edges_from(JobqReader *r, JobqEdgeWalk walk, int64 key, int64 after);
extern bool jobq_edges_next(JobqReader *r, JobqEdge *edge);
extern void jobq_edges_done(JobqReader *r);
extern bool jobq_edge_of(JobqReader *r, int64 parent, int64 child, JobqEdge *edge);
extern Datum jobq_tid_array(const ItemPointerData *tids, int n);
extern char jobq_job_status(JobqReader *r, int64 job_id);
extern TupleTableSlot *jobq_job_row(JobqReader *r, int64 job_id);
extern AttrNumber jobq_job_column(JobqReader *r, const char *name, Oid type);
extern bool jobq_runs_on_failure(JobqReader *r, int64 child);
extern bool jobq_is_deferred(JobqReader *r, int64 parent_id, bool *retried);
extern char jobq_status_letter(const char *status, int len);
extern const char *jobq_status_name(char letter);

#endif							/* JOBQ_EDGES_H */
