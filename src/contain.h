/*-------------------------------------------------------------------------
 *
 * contain.h
 *	  Units of background work that fail alone (contain.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_CONTAIN_H
#define JOBQ_CONTAIN_H

#include "postgres.h"

typedef void (*JobqUnitFn) (void *arg);
extern bool jobq_run_unit(const char *unit, JobqUnitFn fn, void *arg);
extern bool jobq_run_unit_for(const char *unit, JobqUnitFn fn, void *arg,
							  int lock_timeout_ms, int *sqlerrcode);
extern void jobq_require_writable(const char *cmdname);

/* What the memory beyond the process says of a failure just noted. */
typedef enum JobqUnitNoted
{
	JOBQ_UNIT_LOG,				/* new (or a new SQLSTATE): log it */
	JOBQ_UNIT_KNOWN,			/* logged before with that SQLSTATE */
	JOBQ_UNIT_LATER,			/* no room to keep it, and another was logged
								 * less than a minute ago: not now */
} JobqUnitNoted;

/*
 * Memory of failing units beyond the process, by the hash of a unit's name:
 * failed notes a failure (JobqUnitNoted); works forgets a unit and says
 * whether it was failing; failing says whether it is.
 */
typedef struct JobqUnitMemory
{
	JobqUnitNoted (*failed) (uint64 unit, int sqlerrcode);
	bool		(*works) (uint64 unit);
	bool		(*failing) (uint64 unit);
} JobqUnitMemory;
extern void jobq_contain_share(const JobqUnitMemory *memory);
extern bool jobq_unit_failing(const char *unit);
extern void jobq_unit_failed(const char *unit, ErrorData *edata);
extern void jobq_unit_worked(const char *unit);
extern bool jobq_try_units(JobqUnitFn fn, void *arg);
extern bool jobq_try_briefly(JobqUnitFn fn, void *arg, int lock_timeout_ms);
extern void jobq_budget_start(int ms);
extern void jobq_budget_end(void);
extern bool jobq_budget_spent(void);

#endif							/* JOBQ_CONTAIN_H */
