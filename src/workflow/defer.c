/*-------------------------------------------------------------------------
 *
 * workflow/defer.c
 *	  Workflows: what settling does with a dependent another transaction
 *	  holds.  It waits briefly (jobq.settle_lock_wait: another settle commits
 *	  in that time), then passes it over and notes its parent in
 *	  jobq.settle_deferred, for the background worker (workflow/settle.c,
 *	  jobq_settle_again) to settle again with backoff.  A settle so never
 *	  waits for a client's open transaction: a tenant that keeps its own
 *	  dependent locked holds up no other role's completion, nor the reaper.
 *	  Also the job-id helpers settling uses.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "storage/proc.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "compat.h"
#include "contain.h"
#include "guc.h"
#include "spi.h"
#include "shmem/shm_bgw.h"
#include "workflow/defer.h"

static SPIPlanPtr plan_lock_children;
static SPIPlanPtr plan_wait_children;

/* qsort comparator for job ids. */
int
jobq_id_compare(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/* An int8[] datum of the n ids. */
Datum
jobq_id_array(const int64 *ids, int n)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int i = 0; i < n; i++)
		elems[i] = Int64GetDatum(ids[i]);
	return PointerGetDatum(construct_array(elems, n, INT8OID, 8, true, TYPALIGN_DOUBLE));
}

/*
 * Parents whose dependents could not all be locked: noted in
 * jobq.settle_deferred, for the background worker to settle them again 10
 * ms later, and the worker woken at commit.  When the worker itself defers
 * one again (defer_again), its try is counted in the row (attempts), and the
 * next one backs off from 20 ms to jobq.naptime: each parent by its own
 * count, so that one tenant's long hold slows no other's.  A deferral from
 * outside the worker (something new happened to the parent) starts the
 * count again.  retried marks a parent whose retry passed dependents over
 * (jobq_parent_retried): the worker gives them the retry's treatment, and
 * unblocks those it kept blocked, for marked parents only (an unmarked
 * parent has nothing of the kind to do).
 */
static bool defer_again = false;
static SPIPlanPtr plan_defer;
static SPIPlanPtr plan_resume;
static SPIPlanPtr plan_defer_old;
static SPIPlanPtr plan_resume_old;

/*
 * A deferred parent's row names its queue (0.3.3 on), so that the worker
 * settles deferred parents queue by queue (jobq_settle_deferred); a parent
 * that is gone (purged) has nothing left to settle and gets no row.  The
 * insert's head, with the values after parent_id and queue; and what a
 * deferral and a resumption do to a row that is there.
 */
#define JOBQ_DEFER_INSERT_BY_QUEUE(values) \
	"INSERT INTO jobq.settle_deferred AS s (parent_id, queue, retry_at, attempts, retried)" \
	" SELECT j.job_id, j.queue, " values " FROM jobq.job j WHERE j.job_id = ANY ($1)"
#define JOBQ_DEFER_AGAIN \
	" attempts = CASE WHEN $3 THEN least(s.attempts + 1, 1000000) ELSE 0 END," \
	" retry_at = CASE WHEN $3 THEN $2 + least($4::float8," \
	" 10 * power(2, least(s.attempts + 1, 20))) * interval '1 ms'" \
	" ELSE least(s.retry_at, excluded.retry_at) END," \
	" retried = s.retried OR excluded.retried"
#define JOBQ_DEFER_RESUME \
	" retry_at = excluded.retry_at, retried = s.retried OR excluded.retried"

/* Are the deferrals from now on the worker's tries again (see above)? */
void
jobq_defer_again_set(bool again)
{
	defer_again = again;
}

/* Sort and deduplicate the n ids in place; how many are left. */
static int
DistinctIds(int64 *ids, int n)
{
	int			k = 0;

	qsort(ids, n, sizeof(int64), jobq_id_compare);
	for (int i = 0; i < n; i++)
		if (k == 0 || ids[k - 1] != ids[i])
			ids[k++] = ids[i];
	return k;
}

/* Note the parents parents[] in jobq.settle_deferred (see above). */
static void
Defer(int64 *parents, int n, bool again, bool retried)
{
	Oid			types[5] = {INT8ARRAYOID, TIMESTAMPTZOID, BOOLOID, INT4OID, BOOLOID};
	Datum		values[5];
	int			k;

	if (n == 0)
		return;
	k = DistinctIds(parents, n);
	values[0] = jobq_id_array(parents, k);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[2] = BoolGetDatum(again);
	values[3] = Int32GetDatum(jobq_naptime_ms);
	values[4] = BoolGetDatum(retried);
	if (jobq_settle_by_queue())
		jobq_spi_exec_latest(jobq_plan_generic(&plan_defer,
											   JOBQ_DEFER_INSERT_BY_QUEUE("$2 + interval '10 ms', 0, $5")
											   " ON CONFLICT (parent_id) DO UPDATE SET" JOBQ_DEFER_AGAIN,
											   5, types),
							 values, NULL, SPI_OK_INSERT);
	else
		jobq_spi_exec_latest(jobq_plan_generic(&plan_defer_old,
											   "INSERT INTO jobq.settle_deferred AS s (parent_id, retry_at, attempts, retried)"
											   " SELECT u.id, $2 + interval '10 ms', 0, $5 FROM unnest($1) AS u(id)"
											   " ON CONFLICT (parent_id) DO UPDATE SET" JOBQ_DEFER_AGAIN,
											   5, types),
							 values, NULL, SPI_OK_INSERT);
	/* a first deferral wakes the worker at commit; its own tries back off */
	if (!again)
		jobq_bgw_wake_worker_at_commit();
}

/*
 * Defer the parents parents[] (sorted and deduplicated in place); retried:
 * a retry of theirs passed dependents over (see above).
 */
void
jobq_defer_parents(int64 *parents, int n, bool retried)
{
	Defer(parents, n, defer_again, retried);
}

/* The worker's try on the parents ids[] failed: count it, and back off. */
void
jobq_defer_again(const int64 *ids, int n)
{
	int64	   *copy = palloc(sizeof(int64) * Max(n, 1));

	memcpy(copy, ids, sizeof(int64) * n);
	Defer(copy, n, true, false);
	pfree(copy);
}

/*
 * A settle or a retry that ran out of its budget (a background pass's,
 * jobq_budget_spent) hands what it has not done to the next pass: the
 * parents parents[] (sorted and deduplicated in place) are due again now,
 * with their count of tries as it is (nothing was held), and marked
 * retried when it is a retry's treatment they still need.  Due after the
 * start of the pass that defers them, they outlive its clean-up (the
 * worker deletes only the rows that were due when it began).
 */
void
jobq_defer_resume(int64 *parents, int n, bool retried)
{
	Oid			types[3] = {INT8ARRAYOID, TIMESTAMPTZOID, BOOLOID};
	Datum		values[3];
	int			k;

	if (n == 0)
		return;
	k = DistinctIds(parents, n);
	values[0] = jobq_id_array(parents, k);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[2] = BoolGetDatum(retried);
	if (jobq_settle_by_queue())
		jobq_spi_exec_latest(jobq_plan_generic(&plan_resume,
											   JOBQ_DEFER_INSERT_BY_QUEUE("$2, 0, $3")
											   " ON CONFLICT (parent_id) DO UPDATE SET" JOBQ_DEFER_RESUME,
											   3, types),
							 values, NULL, SPI_OK_INSERT);
	else
		jobq_spi_exec_latest(jobq_plan_generic(&plan_resume_old,
											   "INSERT INTO jobq.settle_deferred AS s (parent_id, retry_at, attempts, retried)"
											   " SELECT u.id, $2, 0, $3 FROM unnest($1) AS u(id)"
											   " ON CONFLICT (parent_id) DO UPDATE SET" JOBQ_DEFER_RESUME,
											   3, types),
							 values, NULL, SPI_OK_INSERT);
	jobq_bgw_wake_worker_at_commit();
}

/*
 * Lock the jobq.dependent and jobq.job rows of the children ids[] with the
 * statement sql (ordered by job id); the ids of those locked into out[].
 */
static int
LockChildRows(SPIPlanPtr *plan, const char *sql, const int64 *ids, int n, int64 *out)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	int			k = 0;

	values[0] = jobq_id_array(ids, n);
	jobq_spi_exec_latest(jobq_plan_generic(plan, sql, 1, types), values, NULL, SPI_OK_SELECT);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		out[k++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
											   SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);
	return k;
}

#define JOBQ_LOCK_CHILDREN_SQL \
	"SELECT t.job_id FROM jobq.dependent t JOIN jobq.job j ON j.job_id = t.job_id" \
	" WHERE t.job_id = ANY ($1) ORDER BY t.job_id FOR NO KEY UPDATE OF t, j"

/* Children to lock, waiting: ids[] in, the n_got locked into got[]. */
typedef struct HeldChildren
{
	const int64 *ids;
	int			n;
	int64	   *got;
	int			ngot;
} HeldChildren;

/* Lock the children h->ids[] waiting for them: a unit of jobq_try_briefly. */
static void
WaitForChildren(void *arg)
{
	HeldChildren *h = (HeldChildren *) arg;

	h->ngot = LockChildRows(&plan_wait_children, JOBQ_LOCK_CHILDREN_SQL, h->ids, h->n, h->got);
}

/*
 * Lock the children ids[] (ascending, n of them) for settling: their
 * jobq.dependent and jobq.job rows.  Those free are taken at once (SKIP
 * LOCKED); those another transaction holds are waited for briefly (all of
 * them or none, in a subtransaction): another settle of the same children
 * commits in that time, a client's open transaction need not, and the
 * children it holds are passed over (their parents are deferred: see
 * jobq.settle_deferred).  jobq.settle_lock_wait is the budget of a whole
 * transaction, however many rounds, cascade steps or parents it settles:
 * once spent, held children are passed over at once.  Returns how many were
 * locked, their ids in locked[] (ascending).
 */
static LocalTransactionId budget_lxid = InvalidLocalTransactionId;
static int	budget_used_ms = 0;

int
jobq_lock_children(const int64 *ids, int n, int64 *locked)
{
	int			k;
	HeldChildren h;
	int64	   *held;
	int			nheld = 0;
	TimestampTz started;

	if (n == 0)
		return 0;
	k = LockChildRows(&plan_lock_children, JOBQ_LOCK_CHILDREN_SQL " SKIP LOCKED", ids, n, locked);
	if (k == n)
		return k;

	/* what is left of this transaction's budget of waiting (see above) */
	if (MyLocalTransactionId != budget_lxid)
	{
		budget_lxid = MyLocalTransactionId;
		budget_used_ms = 0;
	}
	if (budget_used_ms >= jobq_settle_lock_wait_ms)
		return k;

	/* the others: held, or gone (then the wait returns without them) */
	held = palloc(sizeof(int64) * (n - k));
	for (int i = 0, j = 0; i < n; i++)
	{
		while (j < k && locked[j] < ids[i])
			j++;
		if (j >= k || locked[j] != ids[i])
			held[nheld++] = ids[i];
	}
	h.ids = held;
	h.n = nheld;
	h.got = locked + k;			/* room for n in all */
	h.ngot = 0;
	started = GetCurrentTimestamp();
	if (jobq_try_briefly(WaitForChildren, &h, jobq_settle_lock_wait_ms - budget_used_ms) &&
		h.ngot > 0)
	{
		k += h.ngot;
		qsort(locked, k, sizeof(int64), jobq_id_compare);
	}
	/* a wait counts at least 1 ms: a transaction cannot wait without end */
	budget_used_ms += Max(1, (int) ((GetCurrentTimestamp() - started + 999) / 1000));
	pfree(held);
	return k;
}

/* The ids of the first column of SPI_tuptable, into *out (palloc'd). */
int
jobq_result_ids(int64 **out)
{
	int			n = (int) SPI_processed;

	*out = palloc(sizeof(int64) * Max(n, 1));
	for (int r = 0; r < n; r++)
	{
		bool		isnull;

		(*out)[r] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc,
												1, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);
	return n;
}
