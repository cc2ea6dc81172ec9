/*-------------------------------------------------------------------------
 *
 * ops/app_workers.c
 *	  The application's workers: jobq.register_worker, unregister_worker and
 *	  the rows of the view jobq.app_workers.
 *
 * A worker process of the application (the Python or Node library, or any
 * client) registers itself with the queues it works on and what it wants
 * shown (library, version, host, pid, concurrency), and calls
 * register_worker again as its heartbeat, on its lease-renewal cadence:
 * one write per heartbeat, none per job.  Worker ids are per role: a row is
 * keyed by (registering role, worker id), so another role can neither
 * refresh nor remove a role's worker, nor take an id first to keep that
 * role's worker out of the registry.  A role has at most
 * jobq.max_app_workers rows; a new one beyond takes the place of its worker
 * gone longest, or is refused when all are alive.  jobq.app_workers shows a
 * role the workers of the queues it may use, with the jobs each holds now
 * (running under its worker id in those queues), and as gone when not seen
 * for jobq.worker_gone_after; the background worker prunes a row a day
 * after it was last seen (ops/retention.c).  jobq.workers stays jobq's own
 * processes.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "acl.h"
#include "args.h"
#include "guc.h"
#include "jobq_limits.h"
#include "spi.h"
#include "ops/app_workers.h"

PG_FUNCTION_INFO_V1(jobq_register_worker);
PG_FUNCTION_INFO_V1(jobq_unregister_worker);
PG_FUNCTION_INFO_V1(jobq_app_worker_rows);

/* Most queues one worker may name. */
#define JOBQ_MAX_WORKER_QUEUES	1000

/*
 * The lock that serialises one role's new registrations in a database: an
 * advisory lock tag whose last field no SQL-level advisory lock uses
 * (pg_advisory_lock takes 1 and 2), so it never meets an application's.
 */
#define JOBQ_LOCKTAG_APP_WORKERS	0x6a71

/*
 * A caller of jobq.app_workers with at most this many queues has the rows
 * that name none of them left by an array overlap in the executor (its cost
 * is a row's names times the caller's); one with more, by a hash look-up
 * per name here.
 */
#define JOBQ_OVERLAP_MAX	16

/* The longest a new registration waits for another of its role's */
#define JOBQ_APP_WORKER_LOCK_WAIT_MS	5000

/* A row is pruned this long after its worker was last seen. */
#define JOBQ_APP_WORKER_KEEP_US	((int64) 24 * 3600 * USECS_PER_SEC)

static SPIPlanPtr plan_refresh;
static SPIPlanPtr plan_count;
static SPIPlanPtr plan_make_room;
static SPIPlanPtr plan_register;
static SPIPlanPtr plan_unregister;
static SPIPlanPtr plan_rows;
static SPIPlanPtr plan_rows_of;
static SPIPlanPtr plan_held;
static SPIPlanPtr plan_held_all;
static SPIPlanPtr plan_prune;

/* A queue name or worker id as a hash key (at most JOBQ_MAX_NAME_LEN bytes) */
typedef struct NameKey
{
	char		name[JOBQ_MAX_NAME_LEN + 1];
} NameKey;

static HTAB *
NewHash(const char *name, Size entrysize)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(NameKey);
	ctl.entrysize = entrysize;
	ctl.hcxt = CurrentMemoryContext;
	return hash_create(name, 256, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
}

/* Text datum t as a key; false when too long to be a name */
static bool
ToKey(NameKey *key, Datum t)
{
	text	   *v = DatumGetTextPP(t);
	int			len = VARSIZE_ANY_EXHDR(v);

	memset(key, 0, sizeof(NameKey));
	if (len > JOBQ_MAX_NAME_LEN)
		return false;
	memcpy(key->name, VARDATA_ANY(v), len);
	return true;
}

/*
 * The queues a worker named, each once, in the order first named, as a
 * text[] counted from 1 (what jobq.app_workers shows, whatever bounds or
 * repeats the caller's array had).
 */
static ArrayType *
DistinctQueues(Datum *elems, int n)
{
	Datum	   *kept = palloc(sizeof(Datum) * n);
	int			nkept = 0;
	HTAB	   *seen = NewHash("jobq worker queues", sizeof(NameKey));

	for (int i = 0; i < n; i++)
	{
		NameKey		key;
		bool		found;

		if (!ToKey(&key, elems[i]))
			continue;			/* refused before: no queue has such a name */
		hash_search(seen, &key, HASH_ENTER, &found);
		if (!found)
			kept[nkept++] = elems[i];
	}
	hash_destroy(seen);
	return construct_array(kept, nkept, TEXTOID, -1, false, TYPALIGN_INT);
}

/*
 * Take the lock of (database, role) that serialises the role's new
 * registrations, to the end of the transaction.  Another session of the
 * same role holds it only while its own new registration's transaction is
 * open: wait for that at most JOBQ_APP_WORKER_LOCK_WAIT_MS (the session's
 * lock_timeout, if shorter), so that a session of the role left idle in a
 * transaction does not stall the role's workers for ever.  No other role
 * can take this lock.
 */
static void
LockRoleRegistrations(Oid role)
{
	LOCKTAG		tag;
	int			saved_timeout = LockTimeout;
	int			wait_ms = (LockTimeout <= 0 || LockTimeout > JOBQ_APP_WORKER_LOCK_WAIT_MS) ?
	JOBQ_APP_WORKER_LOCK_WAIT_MS : LockTimeout;
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, role, 0, JOBQ_LOCKTAG_APP_WORKERS);
	LockTimeout = wait_ms;
	PG_TRY();
	{
		/*
		 * the (sub)transaction's, not a cursor's portal's: a later fetch of
		 * the cursor that fails in a savepoint would release it
		 */
		CurrentResourceOwner = CurTransactionResourceOwner;
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		CurrentResourceOwner = owner;
		LockTimeout = saved_timeout;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not register a new worker of role \"%s\": another session of the role is registering one",
						GetUserNameFromId(role, false)),
				 errdetail("Waited %d ms for that session's transaction to end.", wait_ms),
				 errhint("Register workers outside long transactions, and try again.")));
	}
	PG_END_TRY();
	LockTimeout = saved_timeout;
}

/*
 * Make room for one more worker of role: at jobq.max_app_workers rows, its
 * workers not seen for longest make way (only gone ones: not seen since
 * gone_before); when too few of its workers are gone, refuse.  Under the
 * role's registration lock, counting what is committed (not the
 * transaction's snapshot: under REPEATABLE READ that would miss the rows
 * the sessions it waited for just added).  A gone worker's heartbeat can
 * bring it back between the count and the delete (its row is then not
 * deleted): count again.  SPI connected.
 */
static void
MakeRoomFor(Oid role, TimestampTz gone_before)
{
	Oid			types[3] = {OIDOID, TIMESTAMPTZOID, INT8OID};
	Datum		values[3];

	LockRoleRegistrations(role);
	values[0] = ObjectIdGetDatum(role);
	values[1] = TimestampTzGetDatum(gone_before);
	for (int round = 0;; round++)
	{
		bool		isnull;
		int64		have;
		int64		gone;
		int64		excess;

		jobq_spi_exec_latest(jobq_plan(&plan_count,
									   "SELECT count(*), count(*) FILTER (WHERE last_seen_at < $2)"
									   " FROM jobq.app_worker WHERE registered_by = $1",
									   2, types),
							 values, NULL, SPI_OK_SELECT);
		have = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		gone = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		excess = have - jobq_max_app_workers + 1;
		if (excess <= 0)
			return;
		if (gone < excess || round >= 10)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("too many workers registered by role \"%s\"", GetUserNameFromId(role, false)),
					 errdetail_plural("The role has %lld registered worker seen within jobq.worker_gone_after; jobq.max_app_workers is %d per role.",
									  "The role has %lld registered workers seen within jobq.worker_gone_after; jobq.max_app_workers is %d per role.",
									  have - gone, (long long) (have - gone), jobq_max_app_workers),
					 errhint("Unregister workers that stopped (jobq.unregister_worker), reuse worker ids, or ask a superuser to raise jobq.max_app_workers.")));
		values[2] = Int64GetDatum(excess);
		jobq_spi_exec_latest(jobq_plan_generic(&plan_make_room,
											   "DELETE FROM jobq.app_worker WHERE ctid = ANY (ARRAY("
											   " SELECT w.ctid FROM jobq.app_worker w"
											   " WHERE w.registered_by = $1 AND w.last_seen_at < $2"
											   " ORDER BY w.last_seen_at LIMIT $3))"
											   " AND last_seen_at < $2",
											   3, types),
							 values, NULL, SPI_OK_DELETE);
		if ((int64) SPI_processed >= excess)
			return;
	}
}

/*
 * jobq.register_worker(worker_id, queues, info) -> void
 *
 * Insert this worker, or refresh it (queues, info, last_seen_at): its
 * heartbeat.  The caller must work on (or administer) every queue named.
 * Worker ids are the caller's own: another role's worker of the same id is
 * another row, which this call neither reads nor changes.  A worker not seen
 * for jobq.worker_gone_after counts as started anew.  A new worker beyond
 * jobq.max_app_workers of the caller's takes the place of its worker gone
 * longest, or is refused.
 */
Datum
jobq_register_worker(PG_FUNCTION_ARGS)
{
	const char *worker_id = jobq_name_arg(fcinfo, 0, "worker_id", jobq_max_name_length, false);
	Datum	   *elems;
	bool	   *enulls;
	int			n;
	Jsonb	   *info;
	JobqSavedUser saved;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz gone_before = jobq_timestamp_add(now, -(int64) jobq_worker_gone_after_s * USECS_PER_SEC);
	Oid			types[6] = {TEXTOID, OIDOID, TEXTARRAYOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[6];

	jobq_require_arg(fcinfo, 1, "queues");
	jobq_array_arg(PG_GETARG_ARRAYTYPE_P(1), TEXTOID, "queues", &elems, &enulls, &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("queues must not be empty"),
				 errhint("Name the queues the worker claims from.")));
	if (n > JOBQ_MAX_WORKER_QUEUES)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("queues has more than %d elements", JOBQ_MAX_WORKER_QUEUES)));
	for (int i = 0; i < n; i++)
		if (enulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("queues[%d] must not be null", i + 1)));
	info = PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2);
	if (info != NULL && !JB_ROOT_IS_OBJECT(info))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("info must be a JSON object"),
				 errhint("Pass what the worker wants shown, e.g. '{\"host\": \"web-1\", \"pid\": 4242}'.")));
	if (info != NULL)
		jobq_check_json_size(info, "info", false);

	jobq_owner_begin(&saved);
	for (int i = 0; i < n; i++)
	{
		char	   *queue = TextDatumGetCString(elems[i]);
		int			len = strlen(queue);

		/* the element's place counts from 1, whatever the array's bounds */
		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("queues[%d] must not be empty", i + 1)));
		if (len > jobq_max_name_length)
			ereport(ERROR,
					(errcode(ERRCODE_NAME_TOO_LONG),
					 errmsg("queues[%d] is too long", i + 1),
					 errdetail("It is %d bytes long; the limit is %d bytes.", len, jobq_max_name_length),
					 errhint("The limit is set by jobq.max_name_length.")));
		/* work, or administer, which includes it */
		jobq_require(saved.caller, queue, JOBQ_CAP_WORK);
	}
	values[0] = CStringGetTextDatum(worker_id);
	values[1] = ObjectIdGetDatum(saved.caller);
	values[2] = PointerGetDatum(DistinctQueues(elems, n));
	values[3] = info != NULL ? JsonbPGetDatum(info) : DirectFunctionCall1(jsonb_in, CStringGetDatum("{}"));
	values[4] = TimestampTzGetDatum(now);
	values[5] = TimestampTzGetDatum(gone_before);
	/* the heartbeat: one statement */
	jobq_spi_exec(jobq_plan_generic(&plan_refresh,
									"UPDATE jobq.app_worker AS w SET queues = $3, info = $4,"
									" started_at = CASE WHEN w.last_seen_at < $6 THEN $5 ELSE w.started_at END,"
									" last_seen_at = $5"
									" WHERE w.registered_by = $2 AND w.worker_id = $1",
									6, types),
				  values, NULL, SPI_OK_UPDATE);
	if (SPI_processed == 0)
	{
		/* a new worker (or one pruned since) */
		MakeRoomFor(saved.caller, gone_before);
		jobq_spi_exec(jobq_plan_generic(&plan_register,
										"INSERT INTO jobq.app_worker AS w (worker_id, registered_by, queues, info,"
										" started_at, last_seen_at)"
										" VALUES ($1, $2, $3, $4, $5, $5)"
										" ON CONFLICT (registered_by, worker_id) DO UPDATE SET queues = $3, info = $4,"
										" started_at = CASE WHEN w.last_seen_at < $6 THEN $5 ELSE w.started_at END,"
										" last_seen_at = $5",
										6, types),
					  values, NULL, SPI_OK_INSERT);
	}
	jobq_owner_end(&saved);
	PG_RETURN_VOID();
}

/*
 * jobq.unregister_worker(worker_id) -> did the caller's worker of that id
 * go?  The caller's own only, a superuser's too: another role's worker of
 * the same id is another worker (a library connected as a superuser that
 * unregisters host:pid at its stop must not remove a tenant's).
 */
Datum
jobq_unregister_worker(PG_FUNCTION_ARGS)
{
	const char *worker_id = jobq_name_arg(fcinfo, 0, "worker_id", jobq_max_name_length, false);
	Oid			types[2] = {TEXTOID, OIDOID};
	Datum		values[2];
	JobqSavedUser saved;
	bool		done;

	jobq_owner_begin(&saved);
	values[0] = CStringGetTextDatum(worker_id);
	values[1] = ObjectIdGetDatum(saved.caller);
	jobq_spi_exec(jobq_plan_generic(&plan_unregister,
									"DELETE FROM jobq.app_worker"
									" WHERE registered_by = $2 AND worker_id = $1",
									2, types),
				  values, NULL, SPI_OK_DELETE);
	done = SPI_processed > 0;
	jobq_owner_end(&saved);
	PG_RETURN_BOOL(done);
}

/* A queue the asking role may use, and the last row that listed it */
typedef struct QueueEntry
{
	NameKey		key;
	int			last_row;
} QueueEntry;

/* The rows of one worker id (one per role that registered it) */
typedef struct IdEntry
{
	NameKey		key;
	int			first;			/* a row of visible[], the next in next[] */
} IdEntry;

/* One row of jobq.app_workers, with the queues the caller may see */
typedef struct VisibleWorker
{
	Datum		values[7];
	bool		nulls[7];
	Datum	   *queues;			/* NULL: all of them (the caller sees all) */
	int			nqueues;
	bool		all;			/* queues: all of them, expanded by Lists */
	int			next;			/* the next row of the same id, or -1 */
} VisibleWorker;

/*
 * The queues of row `row` (text[] datum queues) that the asking role may
 * use (usable: their names), each once, moved to the front of *out; returns
 * how many.  One hash look-up per name named.
 */
static int
UsableQueues(Datum queues, int row, HTAB *usable, Datum **out)
{
	Datum	   *elems;
	bool	   *enulls;
	int			n;
	int			kept = 0;

	deconstruct_array(DatumGetArrayTypeP(queues), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &enulls, &n);
	*out = elems;
	for (int i = 0; i < n; i++)
	{
		NameKey		key;
		QueueEntry *entry;

		if (enulls[i] || !ToKey(&key, elems[i]) ||
			(entry = hash_search(usable, &key, HASH_FIND, NULL)) == NULL ||
			entry->last_row == row)
			continue;
		entry->last_row = row;
		elems[kept++] = elems[i];
	}
	return kept;
}

/* Does row v list queue (among those the caller sees)? */
static bool
Lists(VisibleWorker *v, Datum queue)
{
	if (v->queues == NULL)
	{
		/* all its queues (the caller sees all): expanded once */
		bool	   *enulls;

		deconstruct_array(DatumGetArrayTypeP(v->values[1]), TEXTOID, -1, false, TYPALIGN_INT,
						  &v->queues, &enulls, &v->nqueues);
		v->all = true;
	}
	for (int i = 0; i < v->nqueues; i++)
		if (DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, v->queues[i], queue)))
			return true;
	return false;
}

/*
 * jobq.app_worker_rows() -> the rows of jobq.app_workers: the workers of
 * the queues the caller may use, each shown with those of its queues only
 * (another tenant's queue names are not the caller's to read), the jobs
 * running under its id in them, and whether it is gone.
 *
 * What one tenant registers must cost another's view little: the queues
 * the caller may use are read once from jobq.permission; for a caller with
 * a few, the executor keeps the rows that name one of them (an array
 * overlap); the lists of the rows kept cost a hash look-up per name; a
 * caller that sees every queue (a superuser, a holder of '*') reads no list
 * but those of the workers holding jobs, once each.  (Asking
 * jobq.may_use_queue per name cost another tenant's view 11-14.5 s when one
 * role had 1,000 workers naming 1,000 queues each.)  The running jobs are
 * read once, through the running-lease index, in the queues the caller sees
 * and of the ids shown, and counted per id and queue (not once per worker:
 * for 1,000 workers over 10,000 running jobs, that took 450-570 ms).
 */
Datum
jobq_app_worker_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			row_types[2] = {TIMESTAMPTZOID, TEXTARRAYOID};
	Datum		row_values[2];
	ArrayType  *usable;
	Oid			types[2] = {TEXTARRAYOID, TEXTARRAYOID};
	Datum		values[2];
	TimestampTz now = GetCurrentTimestamp();
	JobqSavedUser saved;
	SPITupleTable *rows;
	uint64		n;
	bool		sees_all;
	HTAB	   *known;
	HTAB	   *ids;
	VisibleWorker *visible;
	int			nvisible = 0;
	int64	   *in_hand;
	Oid			asker;
	int			nnames = 0;

	InitMaterializedSRF(fcinfo, 0);
	row_values[0] = TimestampTzGetDatum(jobq_timestamp_add(now, -(int64) jobq_worker_gone_after_s * USECS_PER_SEC));
	known = NewHash("jobq usable queues", sizeof(QueueEntry));
	ids = NewHash("jobq worker ids", sizeof(IdEntry));

	/*
	 * who asks: before the switch to the owner (a SECURITY DEFINER caller's
	 * role)
	 */
	asker = jobq_asking_role();
	jobq_owner_begin(&saved);
	usable = jobq_usable_queues(asker, 0);
	sees_all = usable == NULL;
	if (usable != NULL)
	{
		Datum	   *names;
		bool	   *nnulls;

		deconstruct_array(usable, TEXTOID, -1, false, TYPALIGN_INT, &names, &nnulls, &nnames);
		for (int i = 0; i < nnames; i++)
		{
			NameKey		key;
			QueueEntry *entry;

			if (!ToKey(&key, names[i]))
				continue;
			entry = hash_search(known, &key, HASH_ENTER, NULL);
			entry->last_row = -1;
		}
	}
	if (usable != NULL && nnames <= JOBQ_OVERLAP_MAX)
	{
		/*
		 * A few queues: the executor leaves the rows that name none of them
		 * (an array overlap costs a row's names times these few).
		 */
		row_values[1] = PointerGetDatum(usable);
		jobq_spi_exec(jobq_plan(&plan_rows_of,
								"SELECT w.worker_id, w.queues, w.info, w.started_at, w.last_seen_at,"
								" 0::bigint, w.last_seen_at < $1"
								" FROM jobq.app_worker w WHERE w.queues && $2"
								" ORDER BY w.worker_id, w.registered_by",
								2, row_types),
					  row_values, NULL, SPI_OK_SELECT);
	}
	else
	{
		/* every row; those that name none of the caller's queues go below */
		jobq_spi_exec(jobq_plan(&plan_rows,
								"SELECT w.worker_id, w.queues, w.info, w.started_at, w.last_seen_at,"
								" 0::bigint, w.last_seen_at < $1"
								" FROM jobq.app_worker w ORDER BY w.worker_id, w.registered_by",
								1, row_types),
					  row_values, NULL, SPI_OK_SELECT);
	}
	rows = SPI_tuptable;
	n = SPI_processed;
	visible = palloc(sizeof(VisibleWorker) * Max(n, 1));
	/* the rows stay until SPI_finish: the look-ups below nest */
	for (uint64 i = 0; i < n; i++)
	{
		VisibleWorker *v = &visible[nvisible];
		NameKey		key;
		IdEntry    *id;
		bool		found;

		for (int c = 0; c < 7; c++)
			v->values[c] = SPI_getbinval(rows->vals[i], rows->tupdesc, c + 1, &v->nulls[c]);
		if (!ToKey(&key, v->values[0]))
			continue;			/* no worker id is so long */
		v->all = false;
		if (sees_all)
			v->queues = NULL;
		else if ((v->nqueues = UsableQueues(v->values[1], nvisible, known, &v->queues)) == 0)
			continue;
		id = hash_search(ids, &key, HASH_ENTER, &found);
		v->next = found ? id->first : -1;
		id->first = nvisible++;
	}

	in_hand = palloc0(sizeof(int64) * Max(nvisible, 1));
	if (nvisible > 0)
	{
		/* the running jobs of the ids shown, in the queues the caller sees */
		Datum	   *list = palloc(sizeof(Datum) * Max(hash_get_num_entries(ids), hash_get_num_entries(known)));
		int			count = 0;
		HASH_SEQ_STATUS it;
		IdEntry    *id;
		QueueEntry *q;

		hash_seq_init(&it, ids);
		while ((id = hash_seq_search(&it)) != NULL)
			list[count++] = CStringGetTextDatum(id->key.name);
		values[1] = PointerGetDatum(construct_array(list, count, TEXTOID, -1, false, TYPALIGN_INT));
		if (sees_all)
			jobq_spi_exec(jobq_plan(&plan_held_all,
									"SELECT j.worker_id, j.queue, count(*) FROM jobq.job j"
									" WHERE j.lease_expires_at IS NOT NULL"
									" AND j.status = 'running' AND j.worker_id = ANY ($1)"
									" GROUP BY j.worker_id, j.queue",
									1, &types[1]),
						  &values[1], NULL, SPI_OK_SELECT);
		else
		{
			count = 0;
			hash_seq_init(&it, known);
			while ((q = hash_seq_search(&it)) != NULL)
				if (q->last_row >= 0)
					list[count++] = CStringGetTextDatum(q->key.name);
			values[0] = PointerGetDatum(construct_array(list, count, TEXTOID, -1, false, TYPALIGN_INT));
			jobq_spi_exec(jobq_plan(&plan_held,
									"SELECT j.worker_id, j.queue, count(*) FROM jobq.job j"
									" WHERE j.queue = ANY ($1) AND j.lease_expires_at IS NOT NULL"
									" AND j.status = 'running' AND j.worker_id = ANY ($2)"
									" GROUP BY j.worker_id, j.queue",
									2, types),
						  values, NULL, SPI_OK_SELECT);
		}
		/* each (id, queue) to the rows of that id that list the queue */
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			NameKey		key;
			bool		isnull;
			Datum		queue = SPI_getbinval(tup, desc, 2, &isnull);
			int64		jobs = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));

			if (!ToKey(&key, SPI_getbinval(tup, desc, 1, &isnull)) ||
				(id = hash_search(ids, &key, HASH_FIND, NULL)) == NULL)
				continue;
			for (int r = id->first; r >= 0; r = visible[r].next)
				if (Lists(&visible[r], queue))
					in_hand[r] += jobs;
		}
	}

	for (int i = 0; i < nvisible; i++)
	{
		VisibleWorker *v = &visible[i];

		if (v->queues != NULL && !v->all)
			v->values[1] = PointerGetDatum(construct_array(v->queues, v->nqueues, TEXTOID, -1, false, TYPALIGN_INT));
		v->values[5] = Int64GetDatum(in_hand[i]);
		v->nulls[5] = false;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v->values, v->nulls);
	}
	jobq_owner_end(&saved);
	return (Datum) 0;
}

/*
 * Delete up to batch rows of workers last seen more than a day ago, or
 * registered by a role that was dropped since (a dump would name it by a
 * number, which another cluster may give to another role); returns how
 * many.  A database before 0.3.0 has none.  SPI connected.
 */
int64
jobq_prune_app_workers(int batch, TimestampTz now)
{
	Oid			types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];

	if (!OidIsValid(jobq_relid(JOBQ_REL_APP_WORKER)))
		return 0;
	values[0] = TimestampTzGetDatum(jobq_timestamp_add(now, -JOBQ_APP_WORKER_KEEP_US));
	values[1] = Int32GetDatum(batch);
	jobq_spi_exec(jobq_plan_generic(&plan_prune,
									"DELETE FROM jobq.app_worker WHERE ctid = ANY (ARRAY("
									" SELECT w.ctid FROM jobq.app_worker w WHERE w.last_seen_at < $1"
									" OR NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = w.registered_by)"
									" LIMIT $2 FOR UPDATE SKIP LOCKED))",
									2, types),
				  values, NULL, SPI_OK_DELETE);
	return (int64) SPI_processed;
}
