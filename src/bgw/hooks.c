/*-------------------------------------------------------------------------
 *
 * bgw/hooks.c
 *	  jobq's ProcessUtility hook in ordinary backends.
 *
 * Commands that need a database to themselves (DROP DATABASE, CREATE
 * DATABASE from it as template, ALTER DATABASE RENAME or SET TABLESPACE)
 * first block the database in shared memory and terminate its worker and
 * executors, so they never fail with "being accessed by other users"
 * because of jobq; a dropped database's queues give back their places in
 * shared memory (shmem/shm_queue.c).  CREATE EXTENSION jobq has the launcher
 * look at the database as soon as it commits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"

#include "bgw/hooks.h"
#include "shmem/shm_bgw.h"
#include "shmem/shm_queue.h"

static ProcessUtility_hook_type prev_ProcessUtility = NULL;

static void jobq_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
								bool readOnlyTree, ProcessUtilityContext context,
								ParamListInfo params, QueryEnvironment *queryEnv,
								DestReceiver *dest, QueryCompletion *qc);

/* Install the hook (from _PG_init). */
void
jobq_hooks_init(void)
{
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = jobq_ProcessUtility;
}

/* The database a utility statement needs to itself, if any. */
static Oid
DatabaseNeededAlone(Node *parsetree)
{
	if (IsA(parsetree, DropdbStmt))
		return get_database_oid(((DropdbStmt *) parsetree)->dbname, true);
	if (IsA(parsetree, RenameStmt) &&
		((RenameStmt *) parsetree)->renameType == OBJECT_DATABASE)
		return get_database_oid(((RenameStmt *) parsetree)->subname, true);
	if (IsA(parsetree, CreatedbStmt))
	{
		const char *template = "template1";
		ListCell   *lc;

		foreach(lc, ((CreatedbStmt *) parsetree)->options)
		{
			DefElem    *opt = (DefElem *) lfirst(lc);

			if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
				template = defGetString(opt);
		}
		return get_database_oid(template, true);
	}
	if (IsA(parsetree, AlterDatabaseStmt))
	{
		ListCell   *lc;

		foreach(lc, ((AlterDatabaseStmt *) parsetree)->options)
		{
			if (strcmp(((DefElem *) lfirst(lc))->defname, "tablespace") == 0)
				return get_database_oid(((AlterDatabaseStmt *) parsetree)->dbname, true);
		}
	}
	return InvalidOid;
}

/*
 * ProcessUtility hook: make way for commands that need a database alone,
 * and note CREATE EXTENSION jobq so the launcher is woken at commit.
 */
static void
jobq_ProcessUtility(PlannedStmt *pstmt, const char *queryString,
					bool readOnlyTree, ProcessUtilityContext context,
					ParamListInfo params, QueryEnvironment *queryEnv,
					DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;
	Oid			alone = DatabaseNeededAlone(parsetree);

	if (IsA(parsetree, CreateExtensionStmt) &&
		strcmp(((CreateExtensionStmt *) parsetree)->extname, "jobq") == 0)
		jobq_bgw_wake_launcher_at_commit();

	jobq_bgw_block_database(alone, true);
	PG_TRY();
	{
		if (prev_ProcessUtility)
			prev_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
		/* a dropped database's queues give their shared places back */
		if (IsA(parsetree, DropdbStmt))
			jobq_state_forget_database(alone);
	}
	PG_FINALLY();
	{
		jobq_bgw_block_database(alone, false);
	}
	PG_END_TRY();
}
