/*-------------------------------------------------------------------------
 *
 * workflow/decide.h
 *	  Workflows: the edges a settle takes, and the dependents it decides
 *	  (workflow/decide.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_DECIDE_H
#define JOBQ_DECIDE_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "storage/itemptr.h"

/* Edges settled per chunk: a parent with a million children settles in chunks. */
#define JOBQ_SETTLE_CHUNK	1000

/* An edge a settle takes: its child, its parent, the parent's outcome. */
typedef struct JobqSettledEdge
{
	int64		child;
	int64		parent;
	char		outcome;		/* a letter (workflow/edges.h) */
	ItemPointerData tid;		/* the edge's row version read */
} JobqSettledEdge;

/*
 * Edges taken and not decided yet: a settle takes each chunk's edges at
 * once (jobq_take_edges) and decides their children when its round ends or
 * JOBQ_DECIDE_EDGES have gathered (jobq_decide_taken), so that a child with
 * many parents finishing together has its counter written once per that
 * many edges, not once per chunk.
 */
#define JOBQ_DECIDE_EDGES	(64 * JOBQ_SETTLE_CHUNK)

typedef struct JobqTaken
{
	JobqSettledEdge *e;
	int			n;
	int			cap;
} JobqTaken;

extern const char *jobq_outcome_name(char c);
extern int	jobq_edge_compare(const void *a, const void *b);

/* SPI must be connected, as the extension owner. */
extern void jobq_unblock_all(const int64 *ids, int n, TimestampTz now);
extern int	jobq_cancel_all(const int64 *ids, const int64 *bad, int n, TimestampTz now,
							int64 *next);
extern void jobq_take_edges(const JobqSettledEdge *e, int n, JobqTaken *taken);
extern int	jobq_decide_taken(JobqTaken *taken, TimestampTz now, int64 **next);

#endif							/* JOBQ_DECIDE_H */
