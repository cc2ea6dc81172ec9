/*-------------------------------------------------------------------------
 *
 * subxact.c
 *	  The one subtransaction runner: run a piece of work in an internal
 *	  subtransaction, keep it or roll it back, and hand a failure back to
 *	  the caller as data instead of an escaping error.
 *
 * This is what a PL/pgSQL exception block does, in the order PostgreSQL's
 * own callers of BeginInternalSubTransaction follow (see pltcl's and
 * plpython's subtransaction code): the work runs in the caller's memory
 * context (what it allocates there outlives the subtransaction) and, kept
 * or rolled back, the caller's memory context and resource owner are
 * current again afterwards.  On an error the error is copied into the
 * caller's memory context, the error state flushed and the subtransaction
 * rolled back, which also releases its locks, closes an SPI connection it
 * opened and undoes the GUCs it set.  What to do with the error (rethrow
 * it, log it, count it) is the caller's: contain.c (units of background
 * work that fail alone, brief lock waits), bgw/handler_proc.c (a handler's
 * call) and workflow/depend.c (locking parents without waiting).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

#include "subxact.h"

/*
 * Run fn(arg) in a subtransaction.  Returns NULL when fn returned: its
 * subtransaction committed (fn returned true) or rolled back (false).
 * When fn raised an error, the subtransaction is rolled back and the error,
 * copied into the caller's memory context, is returned; the error state is
 * clear again.  A transaction must be in progress.
 */
ErrorData  *
jobq_subxact_run(JobqSubxactFn fn, void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		if (fn(arg))
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return edata;
}
