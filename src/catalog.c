/*-------------------------------------------------------------------------
 *
 * catalog.c
 *	  jobq's own relations, indexes, columns and schema version: every
 *	  lookup of them by name in one place, cached per backend.
 *
 * C code never names one of jobq's relations by a string of its own: it
 * asks jobq_relid(JOBQ_REL_...) for the OID, jobq_attnum for a column's
 * number, jobq_depend_installed whether the workflow tables (0.2.0) are
 * there, jobq_schema_version for the installed extension version.
 *
 * Caching.  A backend keeps the OIDs it found (the schema's, each
 * relation's) and the column numbers, and forgets all of them when the
 * relation cache invalidates one of those relations (ALTER, DROP,
 * re-creation, VACUUM's statistics: everything that sends a relcache
 * invalidation for it, or a reset of the whole cache) or the syscache
 * invalidates a schema (DROP SCHEMA, ALTER SCHEMA ... RENAME).  What a
 * lookup did not find is not cached: a relation created later (CREATE
 * EXTENSION, ALTER EXTENSION jobq UPDATE) is found by the next lookup.
 * The extension's OID and version are read from pg_extension every time
 * (it has no syscache to invalidate a copy by); only the background
 * worker's once-a-round check and the executors' start ask for them.
 *
 * A transaction must be in progress for every lookup.  State: the caches
 * are private to the backend.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "catalog.h"

/* The name of each relation of JobqRelId, in schema jobq. */
static const char *const rel_names[JOBQ_NUM_RELS] = {
	[JOBQ_REL_JOB] = "job",
	[JOBQ_REL_READY] = "ready",
	[JOBQ_REL_SCHEDULED] = "scheduled",
	[JOBQ_REL_QUEUE] = "queue",
	[JOBQ_REL_ATTEMPT] = "attempt",
	[JOBQ_REL_IDEMPOTENCY_KEY] = "idempotency_key",
	[JOBQ_REL_DEPENDENCY] = "dependency",
	[JOBQ_REL_DEPENDENT] = "dependent",
	[JOBQ_REL_SETTLE_DEFERRED] = "settle_deferred",
	[JOBQ_REL_APP_WORKER] = "app_worker",
	[JOBQ_IDX_JOB_PKEY] = "job_pkey",
	[JOBQ_IDX_READY_CLAIM] = "ready_claim_idx",
	[JOBQ_IDX_IDEMPOTENCY_KEY_PKEY] = "idempotency_key_pkey",
	[JOBQ_IDX_DEPENDENCY_PKEY] = "dependency_pkey",
	[JOBQ_IDX_DEPENDENCY_CHILD] = "dependency_child_idx",
	[JOBQ_IDX_DEPENDENCY_UNSETTLED] = "dependency_unsettled_idx",
	[JOBQ_IDX_DEPENDENT_PKEY] = "dependent_pkey",
	[JOBQ_IDX_SETTLE_DEFERRED_PKEY] = "settle_deferred_pkey",
	[JOBQ_IDX_SETTLE_DEFERRED_QUEUE] = "settle_deferred_queue_idx",
	[JOBQ_IDX_DEPENDENCY_PARENT_QUEUE] = "dependency_parent_queue_idx",
	[JOBQ_IDX_JOB_FINISHED_QUEUE] = "job_finished_queue_idx",
	[JOBQ_IDX_ATTEMPT_FAILURE] = "attempt_failure_idx",
	[JOBQ_SEQ_JOB_ID] = "job_id_seq",
};

/* A column number found: relation, column name, number. */
typedef struct JobqCachedAtt
{
	JobqRelId	rel;
	char		name[NAMEDATALEN];
	AttrNumber	attnum;
} JobqCachedAtt;

/* Most column numbers kept; more are looked up each time. */
#define JOBQ_CACHED_ATTS	64

static Oid	cached_nsp = InvalidOid;
static Oid	cached_rel[JOBQ_NUM_RELS];
static JobqCachedAtt cached_att[JOBQ_CACHED_ATTS];
static int	ncached_att = 0;
static bool callbacks_registered = false;

/* Forget every OID and column number found. */
static void
CatalogReset(void)
{
	cached_nsp = InvalidOid;
	memset(cached_rel, 0, sizeof(cached_rel));
	ncached_att = 0;
}

/* Relcache invalidation: forget all when it concerns one of ours. */
static void
CatalogRelcacheCallback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid))
	{
		CatalogReset();
		return;
	}
	for (int i = 0; i < JOBQ_NUM_RELS; i++)
		if (cached_rel[i] == relid)
		{
			CatalogReset();
			return;
		}
}

/* Syscache invalidation of a schema: forget all. */
static void
CatalogSyscacheCallback(Datum arg, int cacheid, uint32 hashvalue)
{
	CatalogReset();
}

/* Register the invalidation callbacks, once per backend. */
static void
CatalogInit(void)
{
	if (callbacks_registered)
		return;
	CacheRegisterRelcacheCallback(CatalogRelcacheCallback, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, CatalogSyscacheCallback, (Datum) 0);
	callbacks_registered = true;
}

/* The OID of schema jobq, or InvalidOid when there is none. */
Oid
jobq_namespace(void)
{
	CatalogInit();
	if (!OidIsValid(cached_nsp))
		cached_nsp = get_namespace_oid("jobq", true);
	return cached_nsp;
}

/* The name of relation rel (without its schema, jobq). */
const char *
jobq_rel_name(JobqRelId rel)
{
	Assert(rel >= 0 && rel < JOBQ_NUM_RELS);
	return rel_names[rel];
}

/* The OID of relation rel, or InvalidOid when there is none. */
Oid
jobq_relid(JobqRelId rel)
{
	Oid			nsp;

	Assert(rel >= 0 && rel < JOBQ_NUM_RELS);
	if (OidIsValid(cached_rel[rel]))
		return cached_rel[rel];
	nsp = jobq_namespace();
	if (!OidIsValid(nsp))
		return InvalidOid;
	cached_rel[rel] = get_relname_relid(rel_names[rel], nsp);
	return cached_rel[rel];
}

/* The OID of relation rel; an error when there is none. */
Oid
jobq_relid_required(JobqRelId rel)
{
	Oid			relid = jobq_relid(rel);

	if (!OidIsValid(relid))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"jobq.%s\" does not exist", rel_names[rel])));
	return relid;
}

/*
 * The number of column of relation rel; an error when the relation or the
 * column is missing (jobq's own columns are not optional).
 */
AttrNumber
jobq_attnum(JobqRelId rel, const char *column)
{
	Oid			relid = jobq_relid_required(rel);
	AttrNumber	att;

	for (int i = 0; i < ncached_att; i++)
		if (cached_att[i].rel == rel && strcmp(cached_att[i].name, column) == 0)
			return cached_att[i].attnum;
	att = get_attnum(relid, column);
	if (att == InvalidAttrNumber)
		elog(ERROR, "jobq: column %s of jobq.%s is missing", column, rel_names[rel]);
	if (ncached_att < JOBQ_CACHED_ATTS && strlen(column) < NAMEDATALEN)
	{
		cached_att[ncached_att].rel = rel;
		strlcpy(cached_att[ncached_att].name, column, NAMEDATALEN);
		cached_att[ncached_att].attnum = att;
		ncached_att++;
	}
	return att;
}

/*
 * Are the workflow tables (0.2.0 on) installed?  A database still at 0.1.0
 * has none; completions there skip their dependents' settling.
 */
bool
jobq_depend_installed(void)
{
	return OidIsValid(jobq_relid(JOBQ_REL_DEPENDENCY));
}

/*
 * Do deferred parents' rows name their queue (0.3.3 on: the worker settles
 * them queue by queue)?  A database still at 0.2.0 to 0.3.2 has rows
 * without it, settled in the order of their ids.
 */
bool
jobq_settle_by_queue(void)
{
	return OidIsValid(jobq_relid(JOBQ_IDX_SETTLE_DEFERRED_QUEUE));
}

/*
 * Do edges name their parent's queue (0.3.5 on: jobq.workflows reads the
 * edges of the querying role's queues only)?
 */
bool
jobq_edges_name_queue(void)
{
	return OidIsValid(jobq_relid(JOBQ_IDX_DEPENDENCY_PARENT_QUEUE));
}

/*
 * Are the finished jobs indexed by queue and status (0.3.7 on: pruning
 * walks each queue's own)?  A database still at 0.3.6 or before indexes
 * them by finish time alone, and is pruned by one walk in that order.
 */
bool
jobq_finished_by_queue(void)
{
	return OidIsValid(jobq_relid(JOBQ_IDX_JOB_FINISHED_QUEUE));
}

/*
 * Does an attempt name its job's queue (0.3.7 on: jobq.kind_stats reads the
 * failures of the querying role's queues only)?  A database still at 0.3.6
 * or before has no such column.
 */
bool
jobq_attempt_names_queue(void)
{
	return OidIsValid(jobq_relid(JOBQ_IDX_ATTEMPT_FAILURE));
}

/* The OID of the jobq extension here, or InvalidOid (read every time). */
Oid
jobq_extension_oid(void)
{
	return get_extension_oid("jobq", true);
}

/*
 * Take the lock on the jobq extension that a background step holds while it
 * uses jobq's tables, so that DROP EXTENSION (which locks the extension
 * first) waits for the step to end, or the step for the drop, instead of
 * each holding some of the tables the other wants next (a deadlock).
 * Returns false when the extension is not (or, after the wait, no longer)
 * installed here.
 */
bool
jobq_lock_extension(void)
{
	Oid			extoid = jobq_extension_oid();

	if (!OidIsValid(extoid))
		return false;
	LockDatabaseObject(ExtensionRelationId, extoid, 0, AccessShareLock);
	/* it may have been dropped while we waited */
	return jobq_extension_oid() == extoid;
}

/* The installed version of the jobq extension here, or NULL. */
char	   *
jobq_schema_version(void)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tup;
	char	   *version = NULL;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("jobq"));
	rel = table_open(ExtensionRelationId, AccessShareLock);
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}
