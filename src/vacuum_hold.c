/*-------------------------------------------------------------------------
 *
 * vacuum_hold.c
 *	  Autovacuum held while the xmin horizon stands still: the background
 *	  worker switches autovacuum off for a jobq table that autovacuum can
 *	  clean no further, and back on when it can.
 *
 * While a snapshot holds the database's xmin horizon (a transaction left
 * open, a long report, pg_dump, a replication slot, a standby's
 * hot_standby_feedback), VACUUM can remove no row that died after it.  Yet
 * after each pass it counts the rows it could not remove as dead, so
 * autovacuum starts again at the next naptime and reads every page written
 * since the snapshot began, over and over: on a busy queue that was 7 % of
 * the machine's CPU a minute into a hold and 13 % after five (bench/notes.md,
 * workload 6), and the loss of throughput under a held snapshot.
 *
 * The rule, checked every round of the database's worker:
 *
 * - The horizon is what VACUUM itself computes for jobq.job
 *   (GetOldestNonRemovableTransactionId).  It *stands still* when it is the
 *   same as at the round that first saw it while transaction ids were
 *   assigned since that round: someone wrote, and the horizon did not
 *   follow.  (An idle database, where nothing is assigned, never stands
 *   still; one where something commits while nothing old is open always
 *   moves.)
 *
 * - A table (a jobq table, or the TOAST table of one, each on its own) is
 *   *held* once an autovacuum pass of it ended after that first round.  That pass removed what the standing horizon allows, so the
 *   passes after it would remove nothing: ALTER TABLE ... SET
 *   (autovacuum_enabled = false), or toast.autovacuum_enabled, and a row in
 *   jobq.autovacuum_hold with the horizon.  A table whose autovacuum_enabled someone else set is never
 *   touched.
 *
 * - A hold ends (ALTER TABLE ... RESET, the row deleted) as soon as a round
 *   finds the horizon other than the row's, or jobq.autovacuum_hold is
 *   switched off.  Autovacuum then finds the dead rows at its next naptime
 *   and cleans them as before the hold.
 *
 * What the worker did survives it: the rows are in a table, so a worker
 * that crashed, a server restart, a failover (the standby has the rows) or
 * a pool worker of another pass ends the holds as soon as it finds the
 * horizon moved.  Anti-wraparound vacuums run while a table is held
 * (PostgreSQL ignores autovacuum_enabled for them), and a manual VACUUM
 * runs as always.
 *
 * Locks: the ALTER TABLE takes SHARE UPDATE EXCLUSIVE, which no read or
 * write of a job waits for.  It is taken without waiting: a table that
 * autovacuum (or anything else) is working on is left for a later round, so
 * a hold never cancels or waits for a vacuum.
 *
 * State: JobqHorizonWatch in the database's shared slot (shm_bgw.h), written
 * only by the worker that serves the database, so that a pool worker's next
 * pass knows since when the horizon has stood.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/transam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "contain.h"
#include "guc.h"
#include "shm_bgw.h"
#include "spi_plan.h"
#include "vacuum_hold.h"

static SPIPlanPtr plan_tables;
static SPIPlanPtr plan_hold;
static SPIPlanPtr plan_release;

/* One table's hold or release, as a unit. */
typedef struct JobqHoldUnit
{
	Oid			relid;			/* the table, or its TOAST table */
	const char *relname;		/* the table, in schema jobq */
	bool		toast;			/* relid is relname's TOAST table */
	TransactionId horizon;		/* hold: the standing horizon */
	TimestampTz now;
	bool		done;			/* out: the lock was free and it was done */
} JobqHoldUnit;

/* The horizon VACUUM of jobq.job would use now. */
static TransactionId
CurrentHorizon(void)
{
	Oid			relid = get_relname_relid("job", get_namespace_oid("jobq", false));
	Relation	rel;
	TransactionId horizon;

	if (!OidIsValid(relid))
		return InvalidTransactionId;
	rel = table_open(relid, AccessShareLock);
	horizon = GetOldestNonRemovableTransactionId(rel);
	table_close(rel, AccessShareLock);
	return horizon;
}

/*
 * Switch autovacuum of one table off (u->horizon valid) or back on, with
 * its row in jobq.autovacuum_hold, unless the table's lock is taken.
 */
static void
HoldOrRelease(void *arg)
{
	JobqHoldUnit *u = (JobqHoldUnit *) arg;
	bool		hold = TransactionIdIsValid(u->horizon);
	char	   *sql;

	u->done = false;
	if (!ConditionalLockRelationOid(u->relid, ShareUpdateExclusiveLock))
		return;
	sql = psprintf("ALTER TABLE jobq.%s %s (%sautovacuum_enabled%s)",
				   quote_identifier(u->relname), hold ? "SET" : "RESET",
				   u->toast ? "toast." : "", hold ? " = false" : "");
	jobq_spi_exec_sql(sql, false, SPI_OK_UTILITY);
	if (hold)
	{
		Oid			types[3] = {REGCLASSOID, XIDOID, TIMESTAMPTZOID};
		Datum		values[3];

		values[0] = ObjectIdGetDatum(u->relid);
		values[1] = TransactionIdGetDatum(u->horizon);
		values[2] = TimestampTzGetDatum(u->now);
		jobq_spi_exec(jobq_plan_generic(&plan_hold,
										"INSERT INTO jobq.autovacuum_hold (relation, horizon, held_at)"
										" VALUES ($1, $2, $3)",
										3, types),
					  values, NULL, SPI_OK_INSERT);
	}
	else
	{
		Oid			types[1] = {REGCLASSOID};
		Datum		values[1];

		values[0] = ObjectIdGetDatum(u->relid);
		jobq_spi_exec(jobq_plan_generic(&plan_release,
										"DELETE FROM jobq.autovacuum_hold WHERE relation = $1",
										1, types),
					  values, NULL, SPI_OK_DELETE);
	}
	u->done = true;
}

/* Hold or release one table as a contained unit; true when it was done. */
static bool
RunHoldUnit(JobqHoldUnit *u)
{
	char	   *unit = psprintf("%s autovacuum of jobq.%s%s",
								TransactionIdIsValid(u->horizon) ? "holding" : "resuming",
								u->relname, u->toast ? " (TOAST)" : "");
	bool		done = jobq_run_unit(unit, HoldOrRelease, u) && u->done;

	pfree(unit);
	return done;
}

/*
 * One round: see where the horizon is, hold the tables autovacuum can
 * clean no further, release the holds it can clean again.  *w is the
 * database's watch, read and written by the caller.  SPI connected, in a
 * transaction of the worker's.
 */
void
jobq_autovacuum_hold(JobqHorizonWatch *w)
{
	TransactionId horizon = CurrentHorizon();
	TransactionId next = XidFromFullTransactionId(ReadNextFullTransactionId());
	TimestampTz now = GetCurrentTimestamp();
	bool		stands;
	int			held = 0;

	if (!TransactionIdIsValid(horizon))
		return;
	if (!TransactionIdEquals(horizon, w->horizon))
	{
		w->horizon = horizon;
		w->next_xid = next;
		w->since = now;
	}
	stands = jobq_autovacuum_hold_on && !TransactionIdEquals(next, w->next_xid);

	/* nothing held and nothing to hold: the common round costs no query */
	if (!stands && w->holds_known && !w->holding)
		return;

	jobq_spi_exec(jobq_plan_generic(&plan_tables,
									"SELECT r.oid, c.relname::text, h.horizon,"
									"       pg_catalog.pg_stat_get_last_autovacuum_time(r.oid),"
									"       EXISTS (SELECT FROM pg_catalog.unnest(r.reloptions) o"
									"                WHERE o LIKE 'autovacuum\\_enabled=%'),"
									"       r.oid <> c.oid"
									"  FROM pg_catalog.pg_depend d"
									"  JOIN pg_catalog.pg_class c ON c.oid = d.objid"
									"  JOIN pg_catalog.pg_class r"
									"    ON r.oid IN (c.oid, c.reltoastrelid)"
									"  LEFT JOIN jobq.autovacuum_hold h ON h.relation = r.oid"
									" WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass"
									"   AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass"
									"   AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e"
									"                      WHERE e.extname = 'jobq')"
									"   AND d.deptype = 'e' AND c.relkind = 'r'"
									" ORDER BY c.relname, r.oid <> c.oid",
									0, NULL),
				  NULL, NULL, SPI_OK_SELECT);
	{
		SPITupleTable *tuptable = SPI_tuptable;
		uint64		n = SPI_processed;

		for (uint64 i = 0; i < n; i++)
		{
			HeapTuple	tup = tuptable->vals[i];
			TupleDesc	desc = tuptable->tupdesc;
			bool		isnull;
			JobqHoldUnit u;
			Datum		held_horizon;
			bool		held_null;
			Datum		last_av;
			bool		av_null;
			bool		user_set;

			u.relid = DatumGetObjectId(SPI_getbinval(tup, desc, 1, &isnull));
			u.relname = SPI_getvalue(tup, desc, 2);
			u.now = now;
			held_horizon = SPI_getbinval(tup, desc, 3, &held_null);
			last_av = SPI_getbinval(tup, desc, 4, &av_null);
			user_set = DatumGetBool(SPI_getbinval(tup, desc, 5, &isnull));
			u.toast = DatumGetBool(SPI_getbinval(tup, desc, 6, &isnull));

			if (!held_null)
			{
				/* held: release when the horizon moved or holding is off */
				u.horizon = InvalidTransactionId;
				if ((jobq_autovacuum_hold_on &&
					 TransactionIdEquals(DatumGetTransactionId(held_horizon), horizon)) ||
					!RunHoldUnit(&u))
					held++;
				else
					ereport(LOG,
							(errmsg("jobq: autovacuum of jobq.%s%s resumes: the xmin horizon moved",
									u.relname, u.toast ? " (its TOAST table)" : "")));
			}
			else if (stands && !user_set && !av_null &&
					 DatumGetTimestampTz(last_av) > w->since)
			{
				u.horizon = horizon;
				if (RunHoldUnit(&u))
				{
					held++;
					ereport(LOG,
							(errmsg("jobq: autovacuum of jobq.%s%s paused while the xmin horizon stays at %u",
									u.relname, u.toast ? " (its TOAST table)" : "", horizon),
							 errdetail("An autovacuum pass ended after the horizon stopped moving, and later passes could remove nothing more."),
							 errhint("jobq.health() (check xmin_horizon) names what holds the horizon; autovacuum resumes as soon as it moves.")));
				}
			}
		}
	}
	w->holding = held > 0;
	w->holds_known = true;
}
