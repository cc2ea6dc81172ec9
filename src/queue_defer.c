/*-------------------------------------------------------------------------
 *
 * queue_defer.c
 *	  Workflows: what settling does with a dependent another transaction
 *	  holds.  It waits briefly (jobq.settle_lock_wait: another settle commits
 *	  in that time), then passes it over and notes its parent in
 *	  jobq.settle_deferred, for the background worker (queue_settle.c,
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
#include "utils/timestamp.h"

#include "contain.h"
#include "guc.h"
#include "queue_defer.h"
#include "shm_bgw.h"
#include "spi_plan.h"

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
 * jobq.settle_deferred (the background worker settles them again), and the
 * worker woken at commit.  attempts is how often the worker tried already
 * (0 outside it): the next try backs off from 10 ms to jobq.naptime.
 */
static int	defer_attempts = 0;
static SPIPlanPtr plan_defer;

/* The worker's try (0: not the worker's) that deferrals count from now on. */
void
jobq_defer_attempts_set(int attempts)
{
	defer_attempts = attempts;
}

/* Defer the parents ids[] as the worker's attempts-th try did (see above). */
void
jobq_settle_defer(const int64 *ids, int n, int attempts)
{
	int64	   *copy = palloc(sizeof(int64) * Max(n, 1));

	memcpy(copy, ids, sizeof(int64) * n);
	defer_attempts = attempts;
	jobq_defer_parents(copy, n);
	defer_attempts = 0;
	pfree(copy);
}

void
jobq_defer_parents(int64 *parents, int n)
{
	Oid			types[3] = {INT8ARRAYOID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];
	int64		delay_ms = 10;
	int			k = 0;

	if (n == 0)
		return;
	qsort(parents, n, sizeof(int64), jobq_id_compare);
	for (int i = 0; i < n; i++)
		if (k == 0 || parents[k - 1] != parents[i])
			parents[k++] = parents[i];
	for (int a = 0; a < defer_attempts && delay_ms < jobq_naptime_ms; a++)
		delay_ms *= 2;
	delay_ms = Min(delay_ms, (int64) jobq_naptime_ms);
	values[0] = jobq_id_array(parents, k);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp() + delay_ms * 1000);
	values[2] = Int32GetDatum(Min(defer_attempts + 1, 1000000));
	jobq_spi_exec_latest(jobq_plan_generic(&plan_defer,
										   "INSERT INTO jobq.settle_deferred (parent_id, retry_at, attempts)"
										   " SELECT u.id, $2, $3 FROM unnest($1) AS u(id)"
										   " ON CONFLICT (parent_id) DO UPDATE SET"
										   " retry_at = LEAST(jobq.settle_deferred.retry_at, excluded.retry_at)",
										   3, types),
						 values, NULL, SPI_OK_INSERT);
	/* a first deferral wakes the worker at commit; its own retries back off */
	if (defer_attempts == 0)
		jobq_bgw_wake_worker_at_commit();
}

/* Children to lock, waiting briefly: ids[] in, how many got in *got. */
typedef struct HeldChildren
{
	const int64 *ids;
	int			n;
	int64	   *got;
	int			ngot;
} HeldChildren;

/* Lock the children h->ids[] (ascending) waiting for them: a unit of jobq_try_briefly. */
static void
WaitForChildren(void *arg)
{
	HeldChildren *h = (HeldChildren *) arg;
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];

	values[0] = jobq_id_array(h->ids, h->n);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_wait_children,
										   "SELECT t.job_id FROM jobq.dependent t"
										   " JOIN jobq.job j ON j.job_id = t.job_id"
										   " WHERE t.job_id = ANY ($1) ORDER BY t.job_id"
										   " FOR NO KEY UPDATE OF t, j",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	h->ngot = 0;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		h->got[h->ngot++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
														SPI_tuptable->tupdesc, 1, &isnull));
	}
}

/*
 * Lock the children ids[] (ascending, n of them) for settling: their
 * jobq.dependent and jobq.job rows.  Those free are taken at once (SKIP
 * LOCKED); those another transaction holds are waited for briefly
 * (jobq.settle_lock_wait, all of them or none, in a subtransaction): another
 * settle of the same children commits in that time, a client's open
 * transaction need not, and the children it holds are passed over (their
 * parents are deferred: see jobq.settle_deferred).  Returns how many were
 * locked, their ids in locked[] (ascending).
 */
int
jobq_lock_children(const int64 *ids, int n, int64 *locked)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	int			k = 0;
	HeldChildren h;
	int64	   *held;
	int			nheld = 0;

	if (n == 0)
		return 0;
	values[0] = jobq_id_array(ids, n);
	jobq_spi_exec_latest(jobq_plan_generic(&plan_lock_children,
										   "SELECT t.job_id FROM jobq.dependent t"
										   " JOIN jobq.job j ON j.job_id = t.job_id"
										   " WHERE t.job_id = ANY ($1) ORDER BY t.job_id"
										   " FOR NO KEY UPDATE OF t, j SKIP LOCKED",
										   1, types),
						 values, NULL, SPI_OK_SELECT);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		locked[k++] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r],
												  SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);
	if (k == n || jobq_settle_lock_wait_ms == 0)
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
	h.got = palloc(sizeof(int64) * nheld);
	h.ngot = 0;
	if (jobq_try_briefly(WaitForChildren, &h, jobq_settle_lock_wait_ms) && h.ngot > 0)
	{
		memcpy(locked + k, h.got, sizeof(int64) * h.ngot);
		k += h.ngot;
		qsort(locked, k, sizeof(int64), jobq_id_compare);
	}
	pfree(held);
	pfree(h.got);
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
