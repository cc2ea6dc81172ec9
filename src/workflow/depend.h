/*-------------------------------------------------------------------------
 *
 * workflow/depend.h
 *	  Workflows, the enqueue side: depends_on read, recorded, and checked
 *	  again at commit; parents in a handler's job argument (workflow/depend.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_DEPEND_H
#define JOBQ_DEPEND_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/jsonb.h"

/* The parents of jobs being enqueued. */
typedef struct JobqParents
{
	int			n;				/* distinct parents */
	int64	   *ids;			/* in ascending order */
	bool		run_on_failure; /* on_parent_failure = 'run' */
	/* set by jobq_parents_read */
	Datum	   *statuses;		/* each parent's outcome, (Datum) 0 unfinished */
	Datum	   *queues;			/* each parent's queue */
	int			left;			/* parents not finished */
	int64		failed;			/* the first that ended failed or cancelled,
								 * or 0 */
} JobqParents;

extern bool jobq_parents_arg(FunctionCallInfo fcinfo, int argno, int mode_argno,
							 JobqParents *p);
extern void jobq_parents_check_count(const JobqParents *p, int nchildren);

/* SPI must be connected, as the extension owner. */
extern void jobq_parents_read(JobqParents *p, Oid caller);
extern void jobq_parents_record(const JobqParents *p, const int64 *children,
								const bool *created, int nchildren, TimestampTz now);
extern Jsonb *jobq_parents_json(int64 job_id, Oid role);

#endif							/* JOBQ_DEPEND_H */
