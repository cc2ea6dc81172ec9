/*-------------------------------------------------------------------------
 *
 * catalog.h
 *	  jobq's own relations, indexes, columns and schema version
 *	  (catalog.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_CATALOG_H
#define JOBQ_CATALOG_H

#include "postgres.h"

/* Every relation of schema jobq that C code looks up. */
typedef enum JobqRelId
{
	/* tables */
	JOBQ_REL_JOB,
	JOBQ_REL_READY,
	JOBQ_REL_SCHEDULED,
	JOBQ_REL_QUEUE,
	JOBQ_REL_ATTEMPT,
	JOBQ_REL_IDEMPOTENCY_KEY,
	JOBQ_REL_DEPENDENCY,		/* from 0.2.0 */
	JOBQ_REL_DEPENDENT,			/* from 0.2.0 */
	JOBQ_REL_SETTLE_DEFERRED,	/* from 0.2.0 */
	JOBQ_REL_APP_WORKER,		/* from 0.3.0 */
	/* indexes */
	JOBQ_IDX_JOB_PKEY,
	JOBQ_IDX_READY_CLAIM,
	JOBQ_IDX_IDEMPOTENCY_KEY_PKEY,
	JOBQ_IDX_DEPENDENCY_PKEY,
	JOBQ_IDX_DEPENDENCY_CHILD,
	JOBQ_IDX_DEPENDENCY_UNSETTLED,
	JOBQ_IDX_DEPENDENT_PKEY,
	JOBQ_IDX_SETTLE_DEFERRED_PKEY,
	JOBQ_IDX_SETTLE_DEFERRED_QUEUE, /* from 0.3.3 */
	JOBQ_IDX_DEPENDENCY_PARENT_QUEUE,	/* from 0.3.5 */
	JOBQ_IDX_JOB_FINISHED_QUEUE,	/* from 0.3.7 */
	JOBQ_IDX_ATTEMPT_FAILURE,	/* from 0.3.7 */
	/* sequences */
	JOBQ_SEQ_JOB_ID,
	JOBQ_NUM_RELS
} JobqRelId;

extern Oid	jobq_namespace(void);
extern Oid	jobq_relid(JobqRelId rel);
extern Oid	jobq_relid_required(JobqRelId rel);
extern const char *jobq_rel_name(JobqRelId rel);
extern AttrNumber jobq_attnum(JobqRelId rel, const char *column);
extern bool jobq_depend_installed(void);
extern bool jobq_settle_by_queue(void);
extern bool jobq_edges_name_queue(void);
extern bool jobq_finished_by_queue(void);
extern bool jobq_attempt_names_queue(void);
extern Oid	jobq_extension_oid(void);
extern bool jobq_lock_extension(void);
extern char *jobq_schema_version(void);

#endif							/* JOBQ_CATALOG_H */
