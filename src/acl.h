/*-------------------------------------------------------------------------
 *
 * acl.h
 *	  Who may do what to a queue, and acting as the extension owner (acl.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_ACL_H
#define JOBQ_ACL_H

#include "postgres.h"

#include "utils/array.h"

typedef enum JobqCapability
{
	JOBQ_CAP_ENQUEUE,
	JOBQ_CAP_WORK,
	JOBQ_CAP_ADMINISTER
} JobqCapability;

/* The caller's identity while a function acts as the extension owner. */
typedef struct JobqSavedUser
{
	Oid			caller;			/* the role that called the function */
	Oid			userid;			/* to restore */
	int			sec_context;	/* to restore */
} JobqSavedUser;

extern Oid	jobq_owner_begin(JobqSavedUser *saved);
extern void jobq_owner_end(const JobqSavedUser *saved);
extern bool jobq_may(Oid role, const char *queue, JobqCapability cap);
extern void jobq_require(Oid role, const char *queue, JobqCapability cap);
extern void jobq_require_job(Oid role, int64 job_id, const char *queue, JobqCapability cap);
extern void jobq_acl_set_handler_role(Oid role);
extern void jobq_acl_set_handler_job(int64 job_id);
extern void jobq_refuse_own_job(int64 job_id, const char *fn);

/* jobq.may_use_queue(queue) and jobq.may(queue, capability), for C callers too */
extern Datum jobq_may_use_queue(PG_FUNCTION_ARGS);
extern Oid	jobq_asking_role(void);
extern ArrayType *jobq_usable_queues(Oid role, int limit);
extern int64 jobq_prune_dropped_grants(int batch);
extern Datum jobq_may_sql(PG_FUNCTION_ARGS);

#endif							/* JOBQ_ACL_H */
