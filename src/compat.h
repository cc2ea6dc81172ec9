/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL versions jobq supports.
 *
 * jobq builds against PostgreSQL 15, 16, 17 and 18 from one source tree.
 * The code is written against the newest API; this header maps each name
 * that an older version spells differently (TimescaleDB's compat.h is the
 * model), so no other file tests PG_VERSION_NUM.  Each shim names the
 * release that changed the API.
 *
 *	  AmBackgroundWorkerProcess()	17 (IsBackgroundWorker before)
 *	  MyLocalTransactionId			17 (PGPROC.vxid.lxid; PGPROC.lxid before)
 *	  object_aclcheck()				16 (pg_proc_aclcheck and siblings before)
 *	  ExecInsertIndexTuplesCompat	16 (onlySummarizing argument added)
 *	  ExecUpdateIndexTuplesCompat	16 (the same, after table_tuple_update)
 *	  JobqUpdateIndexes				16 (TU_UpdateIndexes; a bool before)
 *	  ExecCheckIndexConstraintsCompat	18 (tupleid argument added)
 *	  RelationGetPrimaryKeyIndexCompat	18 (deferrable_ok argument added)
 *	  index_beginscan_compat		18 (instrumentation argument added)
 *	  JOBQ_INTERVAL_IS_INFINITY		17 (intervals gained 'infinity')
 *	  JOBQ_INTERVAL_INFINITY_HINT	17 (what a user may write instead)
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_COMPAT_H
#define JOBQ_COMPAT_H

#include "postgres.h"

#include "access/genam.h"
#include "access/tableam.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_proc_d.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

#if PG_VERSION_NUM < 150000
#error "jobq requires PostgreSQL 15 or later"
#endif

/* Is this process a background worker?  (17 made it a backend type.) */
#if PG_VERSION_NUM < 170000
#define AmBackgroundWorkerProcess()	(IsBackgroundWorker)
#endif

/*
 * This backend's local transaction id: tells one transaction from the next
 * without assigning a transaction id.  (17 moved it into PGPROC.vxid.)
 */
#if PG_VERSION_NUM >= 170000
#define MyLocalTransactionId	(MyProc->vxid.lxid)
#else
#define MyLocalTransactionId	(MyProc->lxid)
#endif

/*
 * One ACL check for every kind of object (16); jobq checks functions and
 * schemas only.
 */
#if PG_VERSION_NUM < 160000
static inline AclResult
object_aclcheck(Oid classid, Oid objectid, Oid roleid, AclMode mode)
{
	if (classid == NamespaceRelationId)
		return pg_namespace_aclcheck(objectid, roleid, mode);
	if (classid != ProcedureRelationId)
		elog(ERROR, "jobq: object_aclcheck shim covers functions and schemas only");
	return pg_proc_aclcheck(objectid, roleid, mode);
}
#endif

/*
 * What table_tuple_update says about the indexes of the new version: 16
 * tells "only summarizing indexes" (BRIN) from "all of them".
 */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes JobqUpdateIndexes;
#define JOBQ_UPDATE_INDEXES_NONE(u)	((u) == TU_None)
#else
typedef bool JobqUpdateIndexes;
#define JOBQ_UPDATE_INDEXES_NONE(u)	(!(u))
#endif

/* ExecInsertIndexTuples gained onlySummarizing in 16. */
#if PG_VERSION_NUM >= 160000
#define ExecInsertIndexTuplesCompat(rri, slot, estate, update, noDupErr, \
									specConflict, arbiters, onlySummarizing) \
	ExecInsertIndexTuples(rri, slot, estate, update, noDupErr, specConflict, \
						  arbiters, onlySummarizing)
#else
#define ExecInsertIndexTuplesCompat(rri, slot, estate, update, noDupErr, \
									specConflict, arbiters, onlySummarizing) \
	ExecInsertIndexTuples(rri, slot, estate, update, noDupErr, specConflict, \
						  arbiters)
#endif

/*
 * The index entries of a row's new version after table_tuple_update said
 * update_indexes (a JobqUpdateIndexes other than none), as ExecUpdate makes
 * them; returns the list of indexes to recheck.
 */
#if PG_VERSION_NUM >= 160000
#define ExecUpdateIndexTuplesCompat(rri, slot, estate, update_indexes) \
	ExecInsertIndexTuples(rri, slot, estate, true, false, NULL, NIL, \
						  (update_indexes) == TU_Summarizing)
#else
#define ExecUpdateIndexTuplesCompat(rri, slot, estate, update_indexes) \
	ExecInsertIndexTuples(rri, slot, estate, true, false, NULL, NIL)
#endif

/* ExecCheckIndexConstraints gained the tupleid to skip in 18 (NULL: none). */
#if PG_VERSION_NUM >= 180000
#define ExecCheckIndexConstraintsCompat(rri, slot, estate, conflictTid, arbiters) \
	ExecCheckIndexConstraints(rri, slot, estate, conflictTid, NULL, arbiters)
#else
#define ExecCheckIndexConstraintsCompat(rri, slot, estate, conflictTid, arbiters) \
	ExecCheckIndexConstraints(rri, slot, estate, conflictTid, arbiters)
#endif

/* RelationGetPrimaryKeyIndex gained deferrable_ok in 18 (jobq's are not). */
#if PG_VERSION_NUM >= 180000
#define RelationGetPrimaryKeyIndexCompat(rel)	RelationGetPrimaryKeyIndex(rel, false)
#else
#define RelationGetPrimaryKeyIndexCompat(rel)	RelationGetPrimaryKeyIndex(rel)
#endif

/* index_beginscan gained an instrumentation argument in 18 (NULL: none). */
#if PG_VERSION_NUM >= 180000
#define index_beginscan_compat(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan(heap, index, snapshot, NULL, nkeys, norderbys)
#else
#define index_beginscan_compat(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan(heap, index, snapshot, nkeys, norderbys)
#endif

/* Intervals have 'infinity' from 17 on. */
#if PG_VERSION_NUM >= 170000
#define JOBQ_INTERVAL_IS_INFINITY(iv)	INTERVAL_IS_NOEND(iv)
#define JOBQ_INTERVAL_INFINITY_HINT \
	"Use an interval from 0 up to 1000 years, or 'infinity' to keep the jobs for ever."
#else
#define JOBQ_INTERVAL_IS_INFINITY(iv)	false
#define JOBQ_INTERVAL_INFINITY_HINT \
	"Use an interval from 0 up to 1000 years; 1000 years keeps the jobs for ever in practice (intervals have no 'infinity' before PostgreSQL 17)."
#endif

#endif							/* JOBQ_COMPAT_H */
