/*-------------------------------------------------------------------------
 *
 * queue_ops.c
 *	  The SQL-callable queue operations: enqueue, claim, complete, fail,
 *	  extend, checkpoint, configure.
 *
 * Every operation validates all of its arguments before it writes anything,
 * then runs a few saved SPI plans (spi_plan.c).  A job's row in jobq.job is
 * the truth about it; a pending job also has one row in jobq.ready (due) or
 * jobq.scheduled (run_at in the future).  See the install script for the
 * layout and queue_state.c for the claim positions.
 *
 * Times come from the database clock: one GetCurrentTimestamp() per call,
 * so all rows a call touches agree.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/resowner.h"
#include "pgstat.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/pg_prng.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "jobq.h"

PG_FUNCTION_INFO_V1(jobq_enqueue);
PG_FUNCTION_INFO_V1(jobq_enqueue_many);
PG_FUNCTION_INFO_V1(jobq_claim);
PG_FUNCTION_INFO_V1(jobq_complete);
PG_FUNCTION_INFO_V1(jobq_complete_many);
PG_FUNCTION_INFO_V1(jobq_fail);
PG_FUNCTION_INFO_V1(jobq_snooze);
PG_FUNCTION_INFO_V1(jobq_extend);
PG_FUNCTION_INFO_V1(jobq_checkpoint);
PG_FUNCTION_INFO_V1(jobq_configure);

/* Longest single sleep of a waiting claim (it re-checks the queue then). */
#define JOBQ_MAX_WAIT_SLEEP_MS	5000

/*
 * How often a waiting claim looks again while its queue has ready jobs but
 * max_concurrency (or a throttled breaker) allows none: nothing signals a
 * running job's end to waiting claims, so they poll, at this pace, only
 * while the limit holds.
 */
#define JOBQ_LIMITED_POLL_MS	100

/*
 * Set by the last claim attempt that a limit held back: when it may be
 * worth looking again (0: no limit held it back).
 */
static TimestampTz claim_retry_at = 0;

/* Most due scheduled jobs one claim moves into jobq.ready. */
#define JOBQ_PROMOTE_BATCH	1000

/* In BreakerFailure: does this failure open the breaker? */
#define JOBQ_BREAKER_OPENS \
	"(breaker_state = 'half_open' OR (breaker_state = 'throttled'" \
	" AND breaker_failures + 1 >= breaker_threshold))"

/* Settings of one queue, as jobq.queue has them. */
typedef struct JobqQueue
{
	int32		max_retries;
	Interval	lease;
	bool		paused;
	int32		max_concurrency;	/* 0: no limit */
	int32		max_per_key;	/* 0: no limit */
	int32		rate_limit;		/* 0: no limit */
	Interval	rate_period;
	bool		throttled;		/* breaker allows one running job at a time */
	bool		has_breaker;	/* breaker_threshold is set */
	bool		breaker_armed;	/* a success would reset the breaker */
} JobqQueue;

/* Saved plans, one per statement. */
static SPIPlanPtr plan_queue_get;
static SPIPlanPtr plan_queue_create;
static SPIPlanPtr plan_key_reserve;
static SPIPlanPtr plan_key_lookup;
static SPIPlanPtr plan_insert_ready;
static SPIPlanPtr plan_insert_scheduled;
static SPIPlanPtr plan_bulk_ready;
static SPIPlanPtr plan_bulk_scheduled;
static SPIPlanPtr plan_requeue_ready;
static SPIPlanPtr plan_requeue_scheduled;
static SPIPlanPtr plan_promote;
static SPIPlanPtr plan_next_due;
static SPIPlanPtr plan_claim;
static SPIPlanPtr plan_claim_per_key;
static SPIPlanPtr plan_queue_lock;
static SPIPlanPtr plan_count_running;
static SPIPlanPtr plan_rate_trim;
static SPIPlanPtr plan_rate_count;
static SPIPlanPtr plan_rate_spend;
static SPIPlanPtr plan_rate_oldest;
static SPIPlanPtr plan_breaker_fail;
static SPIPlanPtr plan_breaker_success;
static SPIPlanPtr plan_complete;
static SPIPlanPtr plan_complete_many;
static SPIPlanPtr plan_fail_lock;
static SPIPlanPtr plan_end_attempt;
static SPIPlanPtr plan_extend;
static SPIPlanPtr plan_checkpoint;
static SPIPlanPtr plan_configure_check;
static SPIPlanPtr plan_configure;

/* ----------------------------------------------------------------
 * Argument checks
 * ---------------------------------------------------------------- */

/* Error out when argument argno is NULL. */
static void
RequireArg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", argname)));
}

/*
 * A name argument (kind, queue, key, worker id) as a C string: not NULL
 * unless nullable, not empty, at most maxlen bytes.
 */
const char *
jobq_name_arg(FunctionCallInfo fcinfo, int argno, const char *argname, int maxlen,
		bool nullable)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
	{
		if (nullable)
			return NULL;
		RequireArg(fcinfo, argno, argname);
	}
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", argname)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s is too long", argname),
				 errdetail("It is %d bytes long; the limit is %d bytes.", len, maxlen),
				 errhint("%s sets the limit.",
						 maxlen == jobq_max_key_length ? "jobq.max_key_length" :
						 maxlen == jobq_max_cron_length ? "jobq.max_cron_length" :
						 "jobq.max_name_length")));
	return text_to_cstring(t);
}

/*
 * Check a JSON document's size against a limit: jobq.max_payload_size for
 * payloads, jobq.max_result_size for results and checkpoints.
 */
static void
CheckJsonSize(Jsonb *doc, const char *argname, bool is_payload)
{
	Size		size = VARSIZE(doc) - VARHDRSZ;
	int			limit = is_payload ? jobq_max_payload_size : jobq_max_result_size;

	if (size > (Size) limit)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("%s is too large", argname),
				 errdetail("It takes %zu bytes; %s is %d bytes.", size,
						   is_payload ? "jobq.max_payload_size" : "jobq.max_result_size",
						   limit),
				 errhint("Store large data elsewhere and put a reference to it in the job.")));
}

/* A payload: a JSON object no larger than jobq.max_payload_size. */
Jsonb *
jobq_payload_arg(Datum d, const char *argname)
{
	Jsonb	   *payload = DatumGetJsonbP(d);

	if (!JB_ROOT_IS_OBJECT(payload) || JB_ROOT_IS_SCALAR(payload))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON object", argname),
				 errhint("Wrap the value in an object, for example '{\"value\": 42}'.")));
	CheckJsonSize(payload, argname, true);
	return payload;
}

/*
 * Total length of an interval in microseconds (a month counts 30 days),
 * clamped to the int64 range: months and days can add up past it.
 */
int64
jobq_interval_usecs(const Interval *iv)
{
	double		total = (double) iv->time + (double) iv->day * USECS_PER_DAY +
		(double) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;

	if (total >= (double) PG_INT64_MAX)
		return PG_INT64_MAX;
	if (total <= (double) PG_INT64_MIN)
		return PG_INT64_MIN;
	return iv->time + (int64) iv->day * USECS_PER_DAY +
		(int64) iv->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

/* An interval of about usecs microseconds, in its largest whole unit. */
static Interval *
IntervalFromUsecs(int64 usecs)
{
	Interval   *iv = palloc0(sizeof(Interval));
	int64		month_us = (int64) DAYS_PER_MONTH * USECS_PER_DAY;

	if (usecs % month_us == 0)
		iv->month = (int32) (usecs / month_us);
	else if (usecs % USECS_PER_DAY == 0)
		iv->day = (int32) (usecs / USECS_PER_DAY);
	else
		iv->time = usecs;
	return iv;
}

/*
 * Whether each field of an interval (months, days, time) is at most
 * JOBQ_MAX_INTERVAL_US long.  Its total can be short while its fields are
 * not ('1000000 years -359999999 days' is one day): adding it to a
 * timestamp as PostgreSQL does, field by field, could still overflow.
 */
static bool
IntervalFieldsInRange(const Interval *iv)
{
	int64		max_months = JOBQ_MAX_INTERVAL_US / ((int64) DAYS_PER_MONTH * USECS_PER_DAY);
	int64		max_days = JOBQ_MAX_INTERVAL_US / USECS_PER_DAY;

	return iv->month <= max_months && iv->month >= -max_months &&
		iv->day <= max_days && iv->day >= -max_days &&
		iv->time <= JOBQ_MAX_INTERVAL_US && iv->time >= -JOBQ_MAX_INTERVAL_US;
}

/* An interval as text, as interval_out writes it. */
static char *
IntervalText(const Interval *iv)
{
	return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv)));
}

/*
 * Check an interval argument (or a setting) against [min_us, max_us],
 * measured by jobq_interval_usecs, and return its length in microseconds.
 * Too short is 22023 (negative, or not positive when min_us > 0); too long
 * is 22008: jobq could not compute a time from it, or the length means
 * nothing (a claim's wait).  Callers with their own wording for "too
 * short" check that first.
 */
int64
jobq_check_interval_arg(const Interval *iv, const char *argname,
						int64 min_us, int64 max_us)
{
	int64		usecs = jobq_interval_usecs(iv);

	if (usecs < min_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 min_us > 0 ?
				 errmsg("%s must be a positive interval", argname) :
				 errmsg("%s must not be negative", argname)));
	if (usecs > max_us || !IntervalFieldsInRange(iv))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_FIELD_OVERFLOW),
				 errmsg("%s is out of range", argname),
				 errdetail("%s was %s; the longest jobq accepts is %s.", argname,
						   IntervalText(iv), IntervalText(IntervalFromUsecs(max_us))),
				 min_us > 0 ?
				 errhint("Use a positive interval of at most %s.",
						 IntervalText(IntervalFromUsecs(max_us))) :
				 errhint("Use an interval from 0 up to %s.",
						 IntervalText(IntervalFromUsecs(max_us)))));
	return usecs;
}

/*
 * A timestamp argument that jobq stores (run_at): finite.  Every finite
 * timestamptz can be stored; jobq never adds to one it was given.
 */
TimestampTz
jobq_check_timestamp_arg(TimestampTz t, const char *argname)
{
	if (TIMESTAMP_NOT_FINITE(t))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a finite timestamp", argname),
				 errhint("Use now() for a job due at once, or now() + an interval for a later one.")));
	return t;
}

/*
 * t + usecs, kept inside the range of finite timestamps.  For times jobq
 * computes from stored settings (a queue's lease, backoff), whose arguments
 * were checked when they were set: a value put into jobq.queue some other
 * way must not make claims, fails or the reaper fail.
 */
TimestampTz
jobq_timestamp_add(TimestampTz t, int64 usecs)
{
	TimestampTz result;

	if (pg_add_s64_overflow(t, usecs, &result))
		result = usecs > 0 ? END_TIMESTAMP - 1 : MIN_TIMESTAMP;
	if (result >= END_TIMESTAMP)
		result = END_TIMESTAMP - 1;
	if (result < MIN_TIMESTAMP)
		result = MIN_TIMESTAMP;
	return result;
}

/*
 * A user-supplied string for an error message: as it is when short, else
 * its first JOBQ_MAX_QUOTED_LEN bytes (cut on a character boundary) and
 * "...", as PostgreSQL cuts the values it shows in error details.
 */
const char *
jobq_quote_arg(const char *s)
{
	int			len = strlen(s);

	if (len <= JOBQ_MAX_QUOTED_LEN)
		return s;
	len = pg_mbcliplen(s, len, JOBQ_MAX_QUOTED_LEN);
	return psprintf("%.*s...", len, s);
}

/*
 * An interval argument that must be strictly positive and at most
 * JOBQ_MAX_INTERVAL_US (a lease).
 */
static Interval *
PositiveIntervalArg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	Interval   *iv = PG_GETARG_INTERVAL_P(argno);

	(void) jobq_check_interval_arg(iv, argname, 1, JOBQ_MAX_INTERVAL_US);
	return iv;
}

/* A priority: any integer but INT_MIN, whose negation would overflow. */
static int32
PriorityArg(FunctionCallInfo fcinfo, int argno)
{
	int32		priority;

	RequireArg(fcinfo, argno, "priority");
	priority = PG_GETARG_INT32(argno);
	if (priority == PG_INT32_MIN)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("priority is out of range"),
				 errhint("Use a value between %d and %d; jobq.priority(label) gives the usual levels.",
						 -PG_INT32_MAX, PG_INT32_MAX)));
	return priority;
}

/* max_retries: NULL (queue default) or a non-negative integer. */
static void
MaxRetriesArg(FunctionCallInfo fcinfo, int argno, bool *has, int32 *value)
{
	*has = !PG_ARGISNULL(argno);
	if (!*has)
		return;
	*value = PG_GETARG_INT32(argno);
	if (*value < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_retries must not be negative"),
				 errhint("Use 0 for a job that must not be retried.")));
}

/* A one-dimensional array argument's elements. */
static void
ArrayArg(ArrayType *arr, Oid elemtype, const char *argname,
		 Datum **elems, bool **nulls, int *n)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", argname)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign, elems, nulls, n);
}

/* Two arrays that must have one element per job. */
static void
CheckSameLength(int n1, const char *name1, int n2, const char *name2)
{
	if (n1 != n2)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s and %s must have the same length", name1, name2),
				 errdetail_plural("%s has %d element and %s has %d.",
								  "%s has %d elements and %s has %d.",
								  n1, name1, n1, name2, n2)));
}

/* ----------------------------------------------------------------
 * Queues
 * ---------------------------------------------------------------- */

/* One queue's settings as this backend last read them. */
typedef struct QueueCacheEntry
{
	char		name[JOBQ_MAX_NAME_LEN + 1];	/* hash key */
	uint64		gen;			/* jobq_state_settings_gen() when read */
	Oid			relid;			/* jobq.queue's OID when read */
	JobqQueue	q;
} QueueCacheEntry;

/* Queues this backend caches before it starts over. */
#define JOBQ_QUEUE_CACHE_SIZE	1024

static HTAB *queue_cache = NULL;

/*
 * The cache entry of a queue whose settings are current, or NULL; *gen gets
 * the generation to file a fresh read under (0: do not cache it).
 */
static QueueCacheEntry *
QueueCacheLookup(const char *queue, uint64 *gen, Oid *relid)
{
	QueueCacheEntry *entry;

	*gen = jobq_state_settings_gen();
	if (*gen == 0 || strlen(queue) > JOBQ_MAX_NAME_LEN)
		return NULL;
	*relid = get_relname_relid("queue", get_namespace_oid("jobq", false));
	if (queue_cache == NULL)
		return NULL;
	entry = hash_search(queue_cache, queue, HASH_FIND, NULL);
	if (entry == NULL || entry->gen != *gen || entry->relid != *relid)
		return NULL;
	return entry;
}

/* File the settings of a queue read under generation gen. */
static void
QueueCacheStore(const char *queue, uint64 gen, Oid relid, const JobqQueue *q)
{
	QueueCacheEntry *entry;

	if (gen == 0 || strlen(queue) > JOBQ_MAX_NAME_LEN)
		return;
	if (queue_cache != NULL && hash_get_num_entries(queue_cache) >= JOBQ_QUEUE_CACHE_SIZE)
	{
		hash_destroy(queue_cache);
		queue_cache = NULL;
	}
	if (queue_cache == NULL)
	{
		HASHCTL		info;

		info.keysize = JOBQ_MAX_NAME_LEN + 1;
		info.entrysize = sizeof(QueueCacheEntry);
		queue_cache = hash_create("jobq queue settings", 64, &info, HASH_ELEM | HASH_STRINGS);
	}
	entry = hash_search(queue_cache, queue, HASH_ENTER, NULL);
	entry->gen = gen;
	entry->relid = relid;
	entry->q = *q;
}

/*
 * Read a queue's settings; false when the queue does not exist.  From this
 * backend's cache while no commit has written jobq.queue since it was read
 * (queue_state.c keeps the generation).
 */
static bool
QueueGet(const char *queue, JobqQueue *q)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	HeapTuple	tup;
	TupleDesc	desc;
	uint64		gen;
	Oid			relid = InvalidOid;
	QueueCacheEntry *cached = QueueCacheLookup(queue, &gen, &relid);

	if (cached != NULL)
	{
		*q = cached->q;
		return true;
	}

	values[0] = CStringGetTextDatum(queue);
	jobq_spi_exec(jobq_plan_generic(&plan_queue_get,
									"SELECT max_retries, lease, paused, COALESCE(max_concurrency, 0),"
									" COALESCE(max_per_key, 0), COALESCE(rate_limit, 0), rate_period,"
									" breaker_state IN ('throttled', 'half_open'), breaker_threshold IS NOT NULL,"
									" breaker_threshold IS NOT NULL AND (breaker_failures > 0"
									" OR breaker_state IN ('throttled', 'half_open'))"
									" FROM jobq.queue WHERE name = $1",
									1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	q->max_retries = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
	q->lease = *DatumGetIntervalP(SPI_getbinval(tup, desc, 2, &isnull));
	q->paused = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
	q->max_concurrency = DatumGetInt32(SPI_getbinval(tup, desc, 4, &isnull));
	q->max_per_key = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));
	q->rate_limit = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	q->rate_period = *DatumGetIntervalP(SPI_getbinval(tup, desc, 7, &isnull));
	q->throttled = DatumGetBool(SPI_getbinval(tup, desc, 8, &isnull));
	q->has_breaker = DatumGetBool(SPI_getbinval(tup, desc, 9, &isnull));
	q->breaker_armed = DatumGetBool(SPI_getbinval(tup, desc, 10, &isnull));
	QueueCacheStore(queue, gen, relid, q);
	return true;
}

/* Read a queue's settings, creating the queue on first use. */
static void
QueueGetOrCreate(const char *queue, JobqQueue *q)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	if (QueueGet(queue, q))
		return;
	values[0] = CStringGetTextDatum(queue);
	jobq_spi_exec(jobq_plan(&plan_queue_create,
							"INSERT INTO jobq.queue (name) VALUES ($1) ON CONFLICT DO NOTHING",
							1, types),
				  values, NULL, SPI_OK_INSERT);
	if (!QueueGet(queue, q))
		elog(ERROR, "jobq: queue \"%s\" vanished while it was created", queue);
}

/* OID of jobq.ready: tells claim positions of this install from older ones. */
static Oid
ReadyRelid(void)
{
	return get_relname_relid("ready", get_namespace_oid("jobq", false));
}

/* ----------------------------------------------------------------
 * Entering the pending sets
 * ---------------------------------------------------------------- */

/*
 * Put a pending job into jobq.ready (run_at due) or jobq.scheduled, and
 * note it for the claim positions.
 */
void
jobq_requeue(int64 job_id, const char *queue, const char *kind, int32 priority,
			 const char *concurrency_key, TimestampTz run_at, TimestampTz now)
{
	Oid			types[6] = {TEXTOID, INT4OID, TIMESTAMPTZOID, INT8OID, TEXTOID, TEXTOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};

	values[5] = concurrency_key ? CStringGetTextDatum(concurrency_key) : (Datum) 0;
	nulls[5] = concurrency_key ? ' ' : 'n';
	values[0] = CStringGetTextDatum(queue);
	values[2] = TimestampTzGetDatum(run_at);
	values[3] = Int64GetDatum(job_id);
	values[4] = CStringGetTextDatum(kind);
	if (run_at <= now)
	{
		JobqClaimPos pos = {-priority, run_at, job_id};

		values[1] = Int32GetDatum(-priority);
		jobq_spi_exec(jobq_plan_generic(&plan_requeue_ready,
										"INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id, kind,"
										" concurrency_key) VALUES ($1, $2, $3, $4, $5, $6)",
										6, types),
					  values, nulls, SPI_OK_INSERT);
		jobq_state_note_ready(queue, &pos);
	}
	else
	{
		values[1] = Int32GetDatum(priority);
		jobq_spi_exec(jobq_plan_generic(&plan_requeue_scheduled,
										"INSERT INTO jobq.scheduled (queue, priority, run_at, job_id, kind,"
										" concurrency_key) VALUES ($1, $2, $3, $4, $5, $6)",
										6, types),
					  values, nulls, SPI_OK_INSERT);
		jobq_state_note_scheduled(queue, run_at);
	}
}

/* ----------------------------------------------------------------
 * Enqueue
 * ---------------------------------------------------------------- */

/*
 * The statements of jobq_enqueue_job when job_insert.c cannot write the
 * rows, over parameters ($1 job_id or NULL, $2 queue, $3 kind, $4 payload,
 * $5 priority, $6 max_retries, $7 key, $8 run_at, $9 now, $10
 * concurrency_key): CTE j writes the job row and the tail puts it into
 * jobq.ready or jobq.scheduled.
 */
#define JOBQ_JOB_INSERT \
	"WITH j AS (INSERT INTO jobq.job (job_id, queue, kind, payload, priority, status," \
	" max_retries, idempotency_key, concurrency_key, run_at, created_at, updated_at)" \
	" VALUES (COALESCE($1, nextval('jobq.job_id_seq')), $2, $3, $4, $5," \
	" 'pending', $6, $7, $10, $8, $9, $9) RETURNING job_id)"
#define JOBQ_READY_TAIL \
	" INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id, kind, concurrency_key)" \
	" SELECT $2, -$5, $8, j.job_id, $3, $10 FROM j RETURNING job_id"
#define JOBQ_SCHEDULED_TAIL \
	" INSERT INTO jobq.scheduled (queue, priority, run_at, job_id, kind, concurrency_key)" \
	" SELECT $2, $5, $8, j.job_id, $3, $10 FROM j RETURNING job_id"

/*
 * Tell the claim positions (queue_state.c) about new pending jobs like job,
 * first_id the lowest of their ids.
 */
static void
NoteEnqueued(const JobqNewJob *job, TimestampTz now, int64 first_id)
{
	if (job->run_at <= now)
	{
		JobqClaimPos pos = {-job->priority, job->run_at, first_id};

		jobq_state_note_ready(job->queue, &pos);
	}
	else
		jobq_state_note_scheduled(job->queue, job->run_at);
}

/* The job holding idempotency key (kind, key), which a statement found taken. */
static int64
KeyHolder(const char *kind, const char *key)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;

	values[0] = CStringGetTextDatum(kind);
	values[1] = CStringGetTextDatum(key);
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_key_lookup,
											"SELECT job_id FROM jobq.idempotency_key"
											" WHERE kind = $1 AND key = $2",
											2, types),
						  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		elog(ERROR, "jobq: idempotency key conflict without a row");
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Enqueue one validated job (SPI connected).  An idempotency key is
 * reserved first, through the unique index (jobq_reserve_key(), or INSERT
 * ... ON CONFLICT DO NOTHING when the table needs SQL), and the job is
 * written under the id the reservation took; when the key is taken, the
 * existing job is returned and nothing is written.
 * A key reserved before the queue exists keeps a duplicate from creating
 * the queue.
 */
void
jobq_enqueue_job(const JobqNewJob *job, TimestampTz now, int64 *job_id, bool *created)
{
	JobqQueue	q;
	bool		has_id = false;
	bool		isnull;
	int32		max_retries;
	Datum		payload = JsonbPGetDatum(job->payload);
	Oid			types[10] = {INT8OID, TEXTOID, TEXTOID, JSONBOID, INT4OID,
	INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[10];
	char		nulls[10];

	if (job->key != NULL)
	{
		/* straight into the unique index (job_insert.c) when the table allows it */
		switch (jobq_reserve_key(job->kind, job->key, job_id))
		{
			case JOBQ_KEY_TAKEN:
				*created = false;
				return;
			case JOBQ_KEY_RESERVED:
				has_id = true;
				break;
			case JOBQ_KEY_SQL:
				break;
		}
	}
	if (job->key != NULL && !has_id)
	{
		Oid			ktypes[2] = {TEXTOID, TEXTOID};
		Datum		kvalues[2];

		kvalues[0] = CStringGetTextDatum(job->kind);
		kvalues[1] = CStringGetTextDatum(job->key);
		jobq_spi_exec(jobq_plan_generic(&plan_key_reserve,
										"INSERT INTO jobq.idempotency_key (kind, key, job_id)"
										" VALUES ($1, $2, nextval('jobq.job_id_seq'))"
										" ON CONFLICT DO NOTHING RETURNING job_id",
										2, ktypes),
					  kvalues, NULL, SPI_OK_INSERT_RETURNING);
		if (SPI_processed == 0)
		{
			*job_id = KeyHolder(job->kind, job->key);
			*created = false;
			return;
		}
		*job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 1, &isnull));
		has_id = true;
	}
	QueueGetOrCreate(job->queue, &q);
	max_retries = job->has_max_retries ? job->max_retries : q.max_retries;
	*created = true;

	/* the rows straight into the tables (job_insert.c) when they allow it */
	if (jobq_insert_pending(job, max_retries, &payload, 1, now, job_id, has_id))
	{
		NoteEnqueued(job, now, *job_id);
		return;
	}

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(has_id ? *job_id : 0);
	nulls[0] = has_id ? ' ' : 'n';
	values[1] = CStringGetTextDatum(job->queue);
	values[2] = CStringGetTextDatum(job->kind);
	values[3] = payload;
	values[4] = Int32GetDatum(job->priority);
	values[5] = Int32GetDatum(max_retries);
	values[6] = job->key ? CStringGetTextDatum(job->key) : (Datum) 0;
	nulls[6] = job->key ? ' ' : 'n';
	values[7] = TimestampTzGetDatum(job->run_at);
	values[8] = TimestampTzGetDatum(now);
	values[9] = job->concurrency_key ? CStringGetTextDatum(job->concurrency_key) : (Datum) 0;
	nulls[9] = job->concurrency_key ? ' ' : 'n';
	if (job->run_at <= now)
		jobq_spi_exec(jobq_plan_generic(&plan_insert_ready,
										JOBQ_JOB_INSERT JOBQ_READY_TAIL, 10, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	else
		jobq_spi_exec(jobq_plan_generic(&plan_insert_scheduled,
										JOBQ_JOB_INSERT JOBQ_SCHEDULED_TAIL, 10, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	if (SPI_processed != 1)
		elog(ERROR, "jobq: enqueue wrote %llu jobs", (unsigned long long) SPI_processed);
	*job_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull));
	NoteEnqueued(job, now, *job_id);
}

/* qsort comparator for job ids. */
static int
Int64Compare(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : (x > y ? 1 : 0);
}

/*
 * Enqueue n jobs without idempotency keys (job->key is NULL) that differ
 * only by payload, straight into the tables or in one statement (SPI
 * connected).  ids[] gets their ids in payload order: nextval runs in array
 * order, after the ORDER BY.
 */
static void
EnqueueBulk(const JobqNewJob *job, Datum *payloads, int n, TimestampTz now, int64 *ids)
{
	Oid			types[8] = {TEXTOID, TEXTOID, INT4OID, INT4OID, TEXTOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, JSONBARRAYOID};
	Datum		values[8];
	char		nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	JobqQueue	q;
	int32		max_retries;
	bool		ready = job->run_at <= now;
	bool		isnull;

	Assert(job->key == NULL);
	QueueGetOrCreate(job->queue, &q);
	max_retries = job->has_max_retries ? job->max_retries : q.max_retries;
	if (jobq_insert_pending(job, max_retries, payloads, n, now, ids, false))
	{
		NoteEnqueued(job, now, ids[0]);
		return;
	}
	values[0] = CStringGetTextDatum(job->queue);
	values[1] = CStringGetTextDatum(job->kind);
	values[2] = Int32GetDatum(job->priority);
	values[3] = Int32GetDatum(max_retries);
	values[4] = job->concurrency_key ? CStringGetTextDatum(job->concurrency_key) : (Datum) 0;
	nulls[4] = job->concurrency_key ? ' ' : 'n';
	values[5] = TimestampTzGetDatum(job->run_at);
	values[6] = TimestampTzGetDatum(now);
	values[7] = PointerGetDatum(construct_array(payloads, n, JSONBOID, -1, false, TYPALIGN_INT));

	if (ready)
		jobq_spi_exec(jobq_plan_generic(&plan_bulk_ready,
										"WITH j AS (INSERT INTO jobq.job (job_id, queue, kind, payload, priority,"
										" status, max_retries, concurrency_key, run_at, created_at, updated_at)"
										" SELECT nextval('jobq.job_id_seq'), $1, $2, u.p, $3, 'pending', $4, $5,"
										" $6, $7, $7 FROM unnest($8) WITH ORDINALITY AS u(p, o) ORDER BY u.o"
										" RETURNING job_id)"
										" INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id, kind,"
										" concurrency_key) SELECT $1, -$3, $6, j.job_id, $2, $5 FROM j"
										" RETURNING job_id",
										8, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	else
		jobq_spi_exec(jobq_plan_generic(&plan_bulk_scheduled,
										"WITH j AS (INSERT INTO jobq.job (job_id, queue, kind, payload, priority,"
										" status, max_retries, concurrency_key, run_at, created_at, updated_at)"
										" SELECT nextval('jobq.job_id_seq'), $1, $2, u.p, $3, 'pending', $4, $5,"
										" $6, $7, $7 FROM unnest($8) WITH ORDINALITY AS u(p, o) ORDER BY u.o"
										" RETURNING job_id)"
										" INSERT INTO jobq.scheduled (queue, priority, run_at, job_id, kind,"
										" concurrency_key) SELECT $1, $3, $6, j.job_id, $2, $5 FROM j"
										" RETURNING job_id",
										8, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
	if (SPI_processed != (uint64) n)
		elog(ERROR, "jobq: bulk enqueue wrote %llu jobs of %d",
			 (unsigned long long) SPI_processed, n);
	for (int i = 0; i < n; i++)
		ids[i] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	qsort(ids, n, sizeof(int64), Int64Compare);
	NoteEnqueued(job, now, ids[0]);
}

/* Emit one (job_id, created) row. */
static void
PutJobRow(ReturnSetInfo *rsinfo, int64 job_id, bool created)
{
	Datum		values[2];
	bool		nulls[2] = {false, false};

	values[0] = Int64GetDatum(job_id);
	values[1] = BoolGetDatum(created);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/* Validate the arguments enqueue and enqueue_many share (all but 1 and 6). */
static void
NewJobCommonArgs(FunctionCallInfo fcinfo, JobqNewJob *job)
{
	job->kind = jobq_name_arg(fcinfo, 0, "kind", jobq_max_name_length, false);
	job->queue = jobq_name_arg(fcinfo, 2, "queue", jobq_max_name_length, false);
	job->priority = PriorityArg(fcinfo, 3);
	RequireArg(fcinfo, 4, "run_at");
	job->run_at = jobq_check_timestamp_arg(PG_GETARG_TIMESTAMPTZ(4), "run_at");
	MaxRetriesArg(fcinfo, 5, &job->has_max_retries, &job->max_retries);
	job->concurrency_key = jobq_name_arg(fcinfo, 7, "concurrency_key", jobq_max_key_length, true);
}

/*
 * jobq.enqueue(kind, payload, queue, priority, run_at, max_retries,
 *				idempotency_key) -> (job_id, created)
 */
Datum
jobq_enqueue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JobqNewJob	job;
	int64		job_id;
	bool		created;
	JobqSavedUser saved;

	NewJobCommonArgs(fcinfo, &job);
	RequireArg(fcinfo, 1, "payload");
	job.payload = jobq_payload_arg(PG_GETARG_DATUM(1), "payload");
	job.key = jobq_name_arg(fcinfo, 6, "idempotency_key", jobq_max_key_length, true);
	jobq_client_key_check(job.key, "idempotency_key");

	InitMaterializedSRF(fcinfo, 0);
	jobq_become_owner(&saved);
	SPI_connect();
	jobq_require(saved.caller, job.queue, JOBQ_CAP_ENQUEUE);
	jobq_enqueue_job(&job, GetCurrentTimestamp(), &job_id, &created);
	PutJobRow(rsinfo, job_id, created);
	SPI_finish();
	jobq_restore_user(&saved);
	return (Datum) 0;
}

/*
 * jobq.enqueue_many(kind, payloads[], queue, priority, run_at, max_retries,
 *					 idempotency_keys[]) -> one (job_id, created) per payload
 */
Datum
jobq_enqueue_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JobqNewJob	job;
	Datum	   *payloads;
	bool	   *payload_nulls;
	int			n;
	Datum	   *keys = NULL;
	bool	   *key_nulls = NULL;
	int			nkeys;
	Jsonb	  **docs;
	TimestampTz now;
	JobqSavedUser saved;
	Datum	   *keyless;
	int			nkeyless = 0;
	int64	   *ids;
	bool	   *created;

	NewJobCommonArgs(fcinfo, &job);
	RequireArg(fcinfo, 1, "payloads");
	ArrayArg(PG_GETARG_ARRAYTYPE_P(1), JSONBOID, "payloads", &payloads, &payload_nulls, &n);
	if (!PG_ARGISNULL(6))
	{
		ArrayArg(PG_GETARG_ARRAYTYPE_P(6), TEXTOID, "idempotency_keys", &keys, &key_nulls, &nkeys);
		CheckSameLength(n, "payloads", nkeys, "idempotency_keys");
	}

	/* validate every element before writing anything */
	docs = palloc(sizeof(Jsonb *) * Max(n, 1));
	keyless = palloc(sizeof(Datum) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		char		argname[64];

		snprintf(argname, sizeof(argname), "payloads[%d]", i + 1);
		if (payload_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s must not be null", argname)));
		docs[i] = jobq_payload_arg(payloads[i], argname);
		if (keys != NULL && !key_nulls[i])
		{
			int			len = VARSIZE_ANY_EXHDR(DatumGetTextPP(keys[i]));

			snprintf(argname, sizeof(argname), "idempotency_keys[%d]", i + 1);
			if (len == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("%s must not be empty", argname),
						 errhint("Use NULL for a job without an idempotency key.")));
			if (len > jobq_max_key_length)
				ereport(ERROR,
						(errcode(ERRCODE_NAME_TOO_LONG),
						 errmsg("%s is too long", argname),
						 errdetail("It is %d bytes long; the limit is %d bytes.",
								   len, jobq_max_key_length),
						 errhint("jobq.max_key_length sets the limit.")));
			jobq_client_key_check(TextDatumGetCString(keys[i]), argname);
		}
	}

	InitMaterializedSRF(fcinfo, 0);
	jobq_become_owner(&saved);
	SPI_connect();
	jobq_require(saved.caller, job.queue, JOBQ_CAP_ENQUEUE);
	now = GetCurrentTimestamp();

	/*
	 * In input order, so job ids (FIFO within a priority) follow it: each
	 * run of jobs without a key in one statement, jobs with a key one by
	 * one, through the unique index.
	 */
	ids = palloc(sizeof(int64) * Max(n, 1));
	created = palloc(sizeof(bool) * Max(n, 1));
	for (int i = 0; i < n;)
	{
		if (keys == NULL || key_nulls[i])
		{
			int			start = i;

			nkeyless = 0;
			while (i < n && (keys == NULL || key_nulls[i]))
			{
				keyless[nkeyless++] = PointerGetDatum(docs[i]);
				created[i++] = true;
			}
			job.payload = NULL;
			job.key = NULL;
			EnqueueBulk(&job, keyless, nkeyless, now, &ids[start]);
		}
		else
		{
			job.payload = docs[i];
			job.key = TextDatumGetCString(keys[i]);
			jobq_enqueue_job(&job, now, &ids[i], &created[i]);
			i++;
		}
	}
	for (int i = 0; i < n; i++)
		PutJobRow(rsinfo, ids[i], created[i]);
	SPI_finish();
	jobq_restore_user(&saved);
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * Claim
 * ---------------------------------------------------------------- */

/*
 * Move up to JOBQ_PROMOTE_BATCH due rows of a queue from jobq.scheduled to
 * jobq.ready, when the queue's next due time says one may be due.  Lowers
 * *start to the least position promoted.
 */
static bool
PromoteDue(Oid relid, const char *queue, TimestampTz now, JobqClaimPos *start)
{
	Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];
	uint64		due_epoch;
	bool		isnull;

	bool		promoted;

	if (!jobq_state_due_probe_needed(relid, queue, now, &due_epoch))
		return false;

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(JOBQ_PROMOTE_BATCH);
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_promote,
											"WITH due AS (DELETE FROM jobq.scheduled s"
											" WHERE s.ctid = ANY (ARRAY(SELECT d.ctid FROM jobq.scheduled d"
											" WHERE d.queue = $1 AND d.run_at <= $2"
											" ORDER BY d.run_at, d.job_id LIMIT $3 FOR UPDATE SKIP LOCKED))"
											" RETURNING s.queue, s.priority, s.run_at, s.job_id, s.kind, s.concurrency_key)"
											" INSERT INTO jobq.ready (queue, neg_priority, run_at, job_id, kind,"
											" concurrency_key)"
											" SELECT queue, -priority, run_at, job_id, kind, concurrency_key FROM due"
											" RETURNING neg_priority, run_at, job_id",
											3, types),
						  values, NULL, SPI_OK_INSERT_RETURNING);
	promoted = SPI_processed > 0;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		JobqClaimPos pos;

		pos.neg_priority = DatumGetInt32(SPI_getbinval(tup, desc, 1, &isnull));
		pos.run_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 2, &isnull));
		pos.job_id = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		jobq_state_note_ready(queue, &pos);
		/* a promoted row is ours until commit; let this claim see it */
		if (pos.neg_priority < start->neg_priority ||
			(pos.neg_priority == start->neg_priority &&
			 (pos.run_at < start->run_at ||
			  (pos.run_at == start->run_at && pos.job_id < start->job_id))))
			*start = pos;
	}

	/* remember when the next scheduled row is due */
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_next_due,
											"SELECT run_at FROM jobq.scheduled WHERE queue = $1"
											" ORDER BY run_at LIMIT 1",
											1, types),
						  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		jobq_state_set_next_due(relid, queue, due_epoch, DT_NOEND);
	else
	{
		TimestampTz next = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
															 SPI_tuptable->tupdesc, 1,
															 &isnull));

		if (next > now)
			jobq_state_set_next_due(relid, queue, due_epoch, next);
	}
	return promoted;
}

/* How many ready rows a claim with a per-key limit looks at. */
#define JOBQ_KEY_SCAN	10000

/*
 * The end of both claim statements: delete the picked ready rows and mark
 * their jobs running with a fresh lease token.
 */
#define JOBQ_CLAIM_TAIL \
	" gone AS (DELETE FROM jobq.ready r" \
	" WHERE r.ctid = ANY (ARRAY(SELECT ctid FROM picked))" \
	" RETURNING r.job_id, r.neg_priority, r.run_at)" \
	" UPDATE jobq.job j SET status = 'running', attempts = j.attempts + 1," \
	" lease_token = ((j.attempts + 1)::int8 << 32) | (($10 + j.job_id * 40503) & 2147483647)," \
	" claimed_at = $9, lease_expires_at = $9 + $4, worker_id = $5," \
	" updated_at = $9" \
	" FROM gone g WHERE j.job_id = g.job_id AND j.status = 'pending'" \
	" RETURNING j.job_id, j.lease_token, j.kind, j.payload, j.priority," \
	" j.retry_count, j.max_retries, j.checkpoint, j.created_at," \
	" j.lease_expires_at, g.neg_priority, g.run_at"

/*
 * For a queue with limits: lock its row, so its claims run one at a time,
 * and return how many of batch jobs the limits allow now.  The counts are
 * read after the lock is taken, so they include every claim that held it
 * before.
 */
static int32
ClaimAllowance(const char *queue, const JobqQueue *q, int32 batch, TimestampTz now)
{
	Oid			types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2];
	bool		isnull;
	int64		running;

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(jobq_timestamp_add(now,
													   -Min(jobq_interval_usecs(&q->rate_period),
															JOBQ_MAX_INTERVAL_US)));
	jobq_spi_exec(jobq_plan_generic(&plan_queue_lock,
									"SELECT 1 FROM jobq.queue WHERE name = $1 FOR NO KEY UPDATE",
									1, types),
				  values, NULL, SPI_OK_SELECT);

	if (q->max_concurrency > 0 || q->throttled)
	{
		jobq_spi_exec_indexed(jobq_plan_generic(&plan_count_running,
												"SELECT count(*) FROM jobq.job WHERE queue = $1"
												" AND lease_expires_at IS NOT NULL AND status = 'running'",
												1, types),
							  values, NULL, SPI_OK_SELECT);
		running = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (q->max_concurrency > 0)
			batch = (int32) Max(0, Min(batch, q->max_concurrency - running));
		if (q->throttled)
			batch = (int32) Max(0, Min(batch, 1 - running));
	}
	if (q->rate_limit > 0 && batch > 0)
	{
		int64		used;

		jobq_spi_exec_indexed(jobq_plan_generic(&plan_rate_trim,
												"DELETE FROM jobq.rate_window WHERE queue = $1 AND claimed_at <= $2",
												2, types),
							  values, NULL, SPI_OK_DELETE);
		jobq_spi_exec_indexed(jobq_plan_generic(&plan_rate_count,
												"SELECT count(*) FROM jobq.rate_window WHERE queue = $1",
												1, types),
							  values, NULL, SPI_OK_SELECT);
		used = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		batch = (int32) Max(0, Min(batch, q->rate_limit - used));
		if (batch == 0)
		{
			/* the window frees a claim when its oldest one leaves it */
			jobq_spi_exec_indexed(jobq_plan_generic(&plan_rate_oldest,
													"SELECT min(claimed_at) FROM jobq.rate_window WHERE queue = $1",
													1, types),
								  values, NULL, SPI_OK_SELECT);
			claim_retry_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
															   SPI_tuptable->tupdesc, 1, &isnull));
			if (isnull)
				claim_retry_at = TimestampTzPlusMilliseconds(now, JOBQ_LIMITED_POLL_MS);
			else
				claim_retry_at = jobq_timestamp_add(claim_retry_at,
													Min(jobq_interval_usecs(&q->rate_period),
														JOBQ_MAX_INTERVAL_US) + 1000);
			return 0;
		}
	}
	if (batch == 0)
		claim_retry_at = TimestampTzPlusMilliseconds(now, JOBQ_LIMITED_POLL_MS);
	return batch;
}

/* Record n claims of a rate-limited queue at now (sliding window). */
static void
RateSpend(const char *queue, int n, TimestampTz now)
{
	Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	Datum		values[3];

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(n);
	jobq_spi_exec(jobq_plan_generic(&plan_rate_spend,
									"INSERT INTO jobq.rate_window (queue, claimed_at)"
									" SELECT $1, $2 FROM generate_series(1, $3)",
									3, types),
				  values, NULL, SPI_OK_INSERT);
}

/* One claimed row, kept until the batch is sorted into claim order. */
typedef struct JobqClaimed
{
	JobqClaimPos pos;
	HeapTuple	tuple;
} JobqClaimed;

/* qsort comparator: claim order. */
static int
ClaimedCompare(const void *a, const void *b)
{
	const JobqClaimPos *pa = &((const JobqClaimed *) a)->pos;
	const JobqClaimPos *pb = &((const JobqClaimed *) b)->pos;

	if (pa->neg_priority != pb->neg_priority)
		return pa->neg_priority < pb->neg_priority ? -1 : 1;
	if (pa->run_at != pb->run_at)
		return pa->run_at < pb->run_at ? -1 : 1;
	if (pa->job_id != pb->job_id)
		return pa->job_id < pb->job_id ? -1 : 1;
	return 0;
}

/* The validated arguments of a claim. */
typedef struct JobqClaimArgs
{
	const char *queue;
	const char *worker_id;
	int32		batch;
	Interval   *lease;			/* NULL: the queue's */
	ArrayType  *kinds;			/* NULL: any kind */
} JobqClaimArgs;

/*
 * One claim attempt (SPI connected): put the claimed jobs, in claim order,
 * into rsinfo's tuplestore and return how many.  *promoted tells whether it
 * moved due delayed jobs into jobq.ready.
 */
static uint64
ClaimOnce(const JobqClaimArgs *args, ReturnSetInfo *rsinfo, bool *promoted)
{
	const char *queue = args->queue;
	const char *worker_id = args->worker_id;
	int32		batch = args->batch;
	Interval   *lease = args->lease;
	ArrayType  *kinds = args->kinds;
	JobqQueue	q;
	TimestampTz now;
	Oid			relid;
	JobqClaimPos start;
	uint64		epoch;
	Oid			types[12] = {TEXTOID, INT4OID, TEXTARRAYOID, INTERVALOID, TEXTOID,
	INT4OID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, INT8OID, INT4OID, INT4OID};
	Datum		values[12];
	char		nulls[12];
	bool		limited;
	bool		per_key;
	SPITupleTable *claimed;
	JobqClaimed *rows;
	uint64		nrows;
	bool		isnull;

	*promoted = false;
	claim_retry_at = 0;
	if (!QueueGet(queue, &q) || q.paused)
		return 0;

	limited = q.max_concurrency > 0 || q.max_per_key > 0 || q.rate_limit > 0 || q.throttled;
	if (limited)
	{
		batch = ClaimAllowance(queue, &q, batch, GetCurrentTimestamp());
		if (batch == 0)
			return 0;
	}
	/* after any wait for the queue lock: the lease starts now */
	now = GetCurrentTimestamp();
	relid = ReadyRelid();
	epoch = jobq_state_begin_claim(relid, queue, &start);
	*promoted = PromoteDue(relid, queue, now, &start);

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(queue);
	values[1] = Int32GetDatum(batch);
	values[2] = kinds ? PointerGetDatum(kinds) : (Datum) 0;
	nulls[2] = kinds ? ' ' : 'n';
	/* a queue's lease longer than jobq accepts (set some other way) is cut */
	if (lease == NULL && (jobq_interval_usecs(&q.lease) > JOBQ_MAX_INTERVAL_US ||
						  !IntervalFieldsInRange(&q.lease)))
		lease = IntervalFromUsecs(Max(Min(jobq_interval_usecs(&q.lease),
										  JOBQ_MAX_INTERVAL_US), 1));
	values[3] = IntervalPGetDatum(lease ? lease : &q.lease);
	values[4] = worker_id ? CStringGetTextDatum(worker_id) : (Datum) 0;
	nulls[4] = worker_id ? ' ' : 'n';
	values[5] = Int32GetDatum(start.neg_priority);
	values[6] = TimestampTzGetDatum(start.run_at);
	values[7] = Int64GetDatum(start.job_id);
	values[8] = TimestampTzGetDatum(now);
	/* the lease token: claim number in the high half, random low half */
	values[9] = Int64GetDatum((int64) (pg_prng_uint32(&pg_global_prng_state) & 0x7fffffff));
	values[10] = Int32GetDatum(JOBQ_KEY_SCAN);
	values[11] = Int32GetDatum(q.max_per_key);

	/*
	 * Without a per-key limit the claim takes the first unlocked rows.
	 * With one, it looks at the first JOBQ_KEY_SCAN ready rows (claims of a
	 * limited queue are serialized by ClaimAllowance, so none are locked by
	 * another claim) and takes, in claim order, those whose key has room.
	 */
	per_key = q.max_per_key > 0;
	if (!per_key)
		jobq_spi_exec_indexed(jobq_plan_generic(&plan_claim,
												"WITH picked AS (SELECT r.ctid FROM jobq.ready r"
												" WHERE r.queue = $1 AND (r.neg_priority, r.run_at, r.job_id) >= ($6, $7, $8)"
												" AND ($3 IS NULL OR r.kind = ANY ($3))"
												" ORDER BY r.neg_priority, r.run_at, r.job_id"
												" LIMIT $2 FOR UPDATE SKIP LOCKED),"
												JOBQ_CLAIM_TAIL,
												12, types),
							  values, nulls, SPI_OK_UPDATE_RETURNING);
	else
		jobq_spi_exec_indexed(jobq_plan_generic(&plan_claim_per_key,
												"WITH running AS (SELECT j.concurrency_key AS k, count(*) AS n"
												" FROM jobq.job j WHERE j.queue = $1 AND j.lease_expires_at IS NOT NULL"
												" AND j.status = 'running'"
												" AND j.concurrency_key IS NOT NULL GROUP BY 1),"
												" cand AS (SELECT c.ctid, c.concurrency_key, c.neg_priority, c.run_at,"
												" c.job_id, row_number() OVER (PARTITION BY c.concurrency_key"
												" ORDER BY c.neg_priority, c.run_at, c.job_id) AS rn"
												" FROM (SELECT r.ctid, r.* FROM jobq.ready r"
												" WHERE r.queue = $1 AND (r.neg_priority, r.run_at, r.job_id) >= ($6, $7, $8)"
												" AND ($3 IS NULL OR r.kind = ANY ($3))"
												" ORDER BY r.neg_priority, r.run_at, r.job_id LIMIT $11) c),"
												" picked AS (SELECT c.ctid FROM cand c"
												" LEFT JOIN running ru ON ru.k = c.concurrency_key"
												" WHERE c.concurrency_key IS NULL OR c.rn + COALESCE(ru.n, 0) <= $12"
												" ORDER BY c.neg_priority, c.run_at, c.job_id LIMIT $2),"
												JOBQ_CLAIM_TAIL,
												12, types),
							  values, nulls, SPI_OK_UPDATE_RETURNING);

	/* later SPI calls (RateSpend) replace SPI_tuptable: keep ours */
	claimed = SPI_tuptable;
	nrows = SPI_processed;
	rows = palloc(sizeof(JobqClaimed) * Max(nrows, 1));
	for (uint64 i = 0; i < nrows; i++)
	{
		HeapTuple	tup = claimed->vals[i];
		TupleDesc	desc = claimed->tupdesc;

		rows[i].tuple = tup;
		rows[i].pos.neg_priority = DatumGetInt32(SPI_getbinval(tup, desc, 11, &isnull));
		rows[i].pos.run_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 12, &isnull));
		rows[i].pos.job_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		jobq_state_note_unready(queue, &rows[i].pos);
	}
	qsort(rows, nrows, sizeof(JobqClaimed), ClaimedCompare);

	/*
	 * Move the queue's position past what this claim consumed.  Not with a
	 * kinds filter or a per-key limit (rows were passed over, not consumed), and
	 * not under a transaction snapshot, which may predate rows that were
	 * committed before this claim began.
	 */
	if (nrows > 0 && kinds == NULL && !per_key && !IsolationUsesXactSnapshot())
		jobq_state_end_claim(relid, queue, epoch, &rows[nrows - 1].pos);
	if (limited && q.rate_limit > 0 && nrows > 0)
		RateSpend(queue, (int) nrows, now);

	for (uint64 i = 0; i < nrows; i++)
	{
		Datum		out[12];
		bool		outnulls[12];

		heap_deform_tuple(rows[i].tuple, claimed->tupdesc, out, outnulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, out, outnulls);
	}
	return nrows;
}

/*
 * One attempt of a waiting claim, in a subtransaction of its own that is
 * rolled back when it claims nothing, so that between attempts the claim
 * holds no locks (a limited queue's row, promoted rows) and leaves nothing
 * behind.  Returns the number of jobs claimed; *promoted as for ClaimOnce.
 */
static uint64
ClaimAttempt(const JobqClaimArgs *args, ReturnSetInfo *rsinfo, bool *promoted)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	uint64		n;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	n = ClaimOnce(args, rsinfo, promoted);
	if (n > 0 || *promoted)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(oldcxt);
	CurrentResourceOwner = oldowner;
	return n;
}

/*
 * jobq.claim(queue, worker_id, batch, lease, kinds, wait) -> claimed jobs
 *
 * Due delayed jobs are promoted first; then up to batch rows are deleted
 * from the head of the queue's part of jobq.ready (FOR UPDATE SKIP LOCKED,
 * starting at the queue's claim position) and their jobs marked running
 * with a fresh lease token.
 *
 * With wait > 0 and nothing claimable, the claim sleeps on the queue's
 * condition variable in shared memory until a transaction that made a job
 * ready commits (queue_state.c broadcasts from its commit callback), the
 * queue's next delayed job is due, a limit that held the claim back may
 * allow one (the rate window's oldest claim leaves it; max_concurrency is
 * looked at again every JOBQ_LIMITED_POLL_MS), or wait is over; a query cancel or
 * statement_timeout ends the sleep.  No LISTEN/NOTIFY, no session state:
 * it works through transaction-mode poolers.
 */
Datum
jobq_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JobqClaimArgs args;
	int64		wait_us = 0;
	TimestampTz deadline;
	ConditionVariable *cv;
	bool		promoted;
	JobqSavedUser saved;

	args.queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	args.worker_id = jobq_name_arg(fcinfo, 1, "worker_id", jobq_max_name_length, true);
	RequireArg(fcinfo, 2, "batch");
	args.batch = PG_GETARG_INT32(2);
	if (args.batch < 1 || args.batch > jobq_max_batch)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch must be between 1 and %d", jobq_max_batch),
				 errdetail("batch was %d.", args.batch),
				 errhint("jobq.max_batch sets the upper limit.")));
	args.lease = PG_ARGISNULL(3) ? NULL : PositiveIntervalArg(fcinfo, 3, "lease");
	args.kinds = NULL;
	if (!PG_ARGISNULL(4))
	{
		args.kinds = PG_GETARG_ARRAYTYPE_P(4);
		if (ARR_NDIM(args.kinds) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
					 errmsg("kinds must be a one-dimensional array")));
	}
	if (!PG_ARGISNULL(5))
	{
		wait_us = jobq_check_interval_arg(PG_GETARG_INTERVAL_P(5), "wait", 0,
										  JOBQ_MAX_WAIT_US);
		if (wait_us > 0 && IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("claim with wait requires the READ COMMITTED isolation level"),
					 errhint("A transaction snapshot would never see the jobs it waits for.")));
	}

	InitMaterializedSRF(fcinfo, 0);
	jobq_become_owner(&saved);
	SPI_connect();
	jobq_require(saved.caller, args.queue, JOBQ_CAP_WORK);

	if (wait_us == 0)
	{
		ClaimOnce(&args, rsinfo, &promoted);
		SPI_finish();
		jobq_restore_user(&saved);
		return (Datum) 0;
	}

	deadline = GetCurrentTimestamp() + wait_us;
	cv = jobq_state_wait_cv(args.queue);
	for (;;)
	{
		TimestampTz now;
		TimestampTz wake;
		long		timeout_ms;

		uint64		seq = jobq_state_wake_seq(args.queue);

		if (ClaimAttempt(&args, rsinfo, &promoted) > 0 || promoted)
			break;
		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;

		/*
		 * Register for wake-ups only now: the attempt's subtransaction
		 * rollback cancels any earlier registration.  A commit that made
		 * rows ready while we were looking bumped the wake sequence, so
		 * look again at once instead of sleeping through it.
		 */
		if (cv)
		{
			ConditionVariablePrepareToSleep(cv);
			if (jobq_state_wake_seq(args.queue) != seq)
				continue;
		}
		wake = jobq_state_next_due(args.queue);
		if (wake == 0 || wake > deadline)
			wake = deadline;
		/* a limit held the attempt back: look again when it may allow one */
		if (claim_retry_at != 0 && claim_retry_at < wake)
			wake = Max(claim_retry_at, now);
		timeout_ms = Max((wake - now + 999) / 1000, 1);
		if (cv)
			(void) ConditionVariableTimedSleep(cv, Min(timeout_ms, JOBQ_MAX_WAIT_SLEEP_MS),
											   PG_WAIT_EXTENSION);
		else
		{
			/* not preloaded: no shared memory to be woken through; poll */
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(timeout_ms, 100), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	if (cv)
		ConditionVariableCancelSleep();
	SPI_finish();
	jobq_restore_user(&saved);
	return (Datum) 0;
}

/* ----------------------------------------------------------------
 * Complete, fail, extend, checkpoint
 * ---------------------------------------------------------------- */

/*
 * The arguments of complete and checkpoint, (job_id, lease_token, a JSON
 * document or NULL), into values/nulls [0..2]; [3] is now.
 */
static void
TokenJsonArgs(FunctionCallInfo fcinfo, const char *jsonname, Datum *values, char *nulls)
{
	RequireArg(fcinfo, 0, "job_id");
	RequireArg(fcinfo, 1, "lease_token");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	nulls[0] = nulls[1] = nulls[3] = ' ';
	if (PG_ARGISNULL(2))
		nulls[2] = 'n';
	else
	{
		CheckJsonSize(PG_GETARG_JSONB_P(2), jsonname, false);
		values[2] = PG_GETARG_DATUM(2);
		nulls[2] = ' ';
	}
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());
}

/*
 * After jobs of a queue completed: a success closes a throttled or half-open
 * breaker and resets its count of consecutive failures.  Queues without a
 * breaker, or with nothing to reset, cost a look at the settings cache.
 */
static void
BreakerSuccess(const char *queue)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	JobqQueue	q;

	if (!QueueGet(queue, &q) || !q.breaker_armed)
		return;
	values[0] = CStringGetTextDatum(queue);
	jobq_spi_exec(jobq_plan_generic(&plan_breaker_success,
									"UPDATE jobq.queue SET breaker_failures = 0,"
									" breaker_state = CASE WHEN breaker_state = 'open' THEN 'open'"
									" ELSE 'closed' END, updated_at = now()"
									" WHERE name = $1 AND breaker_threshold IS NOT NULL"
									" AND (breaker_failures > 0 OR breaker_state IN ('throttled', 'half_open'))",
									1, types),
				  values, NULL, SPI_OK_UPDATE);
}

/*
 * The jobs a complete statement finished (SPI_tuptable, first column the
 * queue): check the caller may work on each of their queues, then tell
 * their breakers.  Returns how many jobs that is.
 */
static uint64
CompletedJobs(Oid caller)
{
	uint64		n = SPI_processed;
	List	   *queues = NIL;
	ListCell   *lc;

	for (uint64 i = 0; i < n; i++)
	{
		char	   *queue = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		bool		seen = false;

		foreach(lc, queues)
			if (strcmp((char *) lfirst(lc), queue) == 0)
				seen = true;
		if (!seen)
			queues = lappend(queues, queue);
	}
	foreach(lc, queues)
		jobq_require(caller, (char *) lfirst(lc), JOBQ_CAP_WORK);
	foreach(lc, queues)
		BreakerSuccess((char *) lfirst(lc));
	return n;
}

/* jobq.complete(job_id, lease_token, result) -> boolean */
Datum
jobq_complete(PG_FUNCTION_ARGS)
{
	Oid			types[4] = {INT8OID, INT8OID, JSONBOID, TIMESTAMPTZOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		done;
	JobqSavedUser saved;

	TokenJsonArgs(fcinfo, "result", values, nulls);

	jobq_become_owner(&saved);
	SPI_connect();
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_complete,
											"UPDATE jobq.job SET status = 'completed', result = $3,"
											" finished_at = $4, updated_at = $4, lease_expires_at = NULL"
											" WHERE job_id = $1 AND lease_token = $2 AND status = 'running'"
											" RETURNING queue",
											4, types),
						  values, nulls, SPI_OK_UPDATE_RETURNING);
	done = CompletedJobs(saved.caller) > 0;
	SPI_finish();
	jobq_restore_user(&saved);
	PG_RETURN_BOOL(done);
}

/* jobq.complete_many(job_ids[], lease_tokens[], results[]) -> integer */
Datum
jobq_complete_many(PG_FUNCTION_ARGS)
{
	Oid			types[4] = {INT8ARRAYOID, INT8ARRAYOID, JSONBARRAYOID, TIMESTAMPTZOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	Datum	   *elems;
	bool	   *elem_nulls;
	int			n,
				ntokens;
	int32		done;
	JobqSavedUser saved;

	/* array_agg over an empty claim gives NULLs: nothing to complete */
	if (PG_ARGISNULL(0) && PG_ARGISNULL(1))
		PG_RETURN_INT32(0);
	RequireArg(fcinfo, 0, "job_ids");
	RequireArg(fcinfo, 1, "lease_tokens");
	ArrayArg(PG_GETARG_ARRAYTYPE_P(0), INT8OID, "job_ids", &elems, &elem_nulls, &n);
	ArrayArg(PG_GETARG_ARRAYTYPE_P(1), INT8OID, "lease_tokens", &elems, &elem_nulls, &ntokens);
	CheckSameLength(n, "job_ids", ntokens, "lease_tokens");
	if (n > jobq_max_batch)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("job_ids has more than %d elements", jobq_max_batch),
				 errhint("jobq.max_batch sets the upper limit.")));
	if (!PG_ARGISNULL(2))
	{
		int			nresults;

		ArrayArg(PG_GETARG_ARRAYTYPE_P(2), JSONBOID, "results", &elems, &elem_nulls, &nresults);
		CheckSameLength(n, "job_ids", nresults, "results");
		for (int i = 0; i < nresults; i++)
			if (!elem_nulls[i])
				CheckJsonSize(DatumGetJsonbP(elems[i]),
							  psprintf("results[%d]", i + 1), false);
		values[2] = PG_GETARG_DATUM(2);
	}
	else
		nulls[2] = 'n';
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[3] = TimestampTzGetDatum(GetCurrentTimestamp());

	jobq_become_owner(&saved);
	SPI_connect();
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_complete_many,
											"UPDATE jobq.job j SET status = 'completed', result = u.result,"
											" finished_at = $4, updated_at = $4, lease_expires_at = NULL"
											" FROM unnest($1, $2, COALESCE($3, array_fill(NULL::jsonb,"
											" ARRAY[cardinality($1)]))) AS u(job_id, lease_token, result)"
											" WHERE j.job_id = u.job_id AND j.lease_token = u.lease_token"
											" AND j.status = 'running' RETURNING j.queue",
											4, types),
						  values, nulls, SPI_OK_UPDATE_RETURNING);
	done = (int32) CompletedJobs(saved.caller);
	SPI_finish();
	jobq_restore_user(&saved);
	PG_RETURN_INT32(done);
}

/* Clip an error message to jobq.max_error_length bytes on a character boundary. */
text *
jobq_clip_error(text *error)
{
	int			len = VARSIZE_ANY_EXHDR(error);

	if (len <= jobq_max_error_length)
		return error;
	len = pg_mbcliplen(VARDATA_ANY(error), len, jobq_max_error_length);
	return cstring_to_text_with_len(VARDATA_ANY(error), len);
}

/*
 * A failed attempt for a queue's circuit breaker (when it has one): count
 * consecutive failures; at breaker_threshold a closed breaker drops the
 * queue to one job at a time (throttled), a throttled one pauses the queue
 * (open), recording why and when; in half_open (after a resume) the first
 * failure opens it again.  Every expression reads the locked row, so
 * concurrent failures count exactly.
 */
static void
BreakerFailure(const char *queue, text *error, TimestampTz now)
{
	Oid			types[3] = {TEXTOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[3];
	JobqQueue	q;

	if (!QueueGet(queue, &q) || !q.has_breaker)
		return;

	values[0] = CStringGetTextDatum(queue);
	values[1] = TimestampTzGetDatum(now);
	values[2] = PointerGetDatum(error);
	jobq_spi_exec(jobq_plan_generic(&plan_breaker_fail,
									"UPDATE jobq.queue SET"
									" breaker_state = CASE WHEN breaker_state = 'half_open' THEN 'open'"
									" WHEN breaker_failures + 1 < breaker_threshold THEN breaker_state"
									" WHEN breaker_state = 'closed' THEN 'throttled' ELSE 'open' END,"
									" breaker_failures = CASE WHEN breaker_state <> 'half_open'"
									" AND breaker_failures + 1 < breaker_threshold"
									" THEN breaker_failures + 1 ELSE 0 END,"
									" paused = paused OR " JOBQ_BREAKER_OPENS ","
									" breaker_tripped_at = CASE WHEN " JOBQ_BREAKER_OPENS
									" THEN $2 ELSE breaker_tripped_at END,"
									" breaker_reason = CASE WHEN " JOBQ_BREAKER_OPENS
									" THEN $3 ELSE breaker_reason END,"
									" updated_at = $2"
									" WHERE name = $1 AND breaker_threshold IS NOT NULL"
									" AND breaker_state <> 'open'",
									3, types),
				  values, NULL, SPI_OK_UPDATE);
}

/* Read the JOBQ_ATTEMPT_COLUMNS of a locked running job from an SPI tuple. */
void
jobq_attempt_from_tuple(HeapTuple tup, TupleDesc desc, JobqAttempt *a)
{
	bool		isnull;

	a->job_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	a->retry_count = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
	a->max_retries = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	a->queue = SPI_getvalue(tup, desc, 4);
	a->kind = SPI_getvalue(tup, desc, 5);
	a->priority = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	a->attempts = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
	a->worker_id = SPI_getvalue(tup, desc, 8);
	a->claimed_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 9, &a->claimed_null));
	/* in int64 range whatever jobq.queue holds (see jobq_timestamp_add) */
	a->backoff_base_us = Min(DatumGetFloat8(SPI_getbinval(tup, desc, 10, &isnull)),
							 (double) JOBQ_MAX_INTERVAL_US);
	a->backoff_cap_us = Min(DatumGetFloat8(SPI_getbinval(tup, desc, 11, &isnull)),
							(double) JOBQ_MAX_INTERVAL_US);
	a->backoff_jitter = DatumGetFloat8(SPI_getbinval(tup, desc, 12, &isnull));
	a->concurrency_key = SPI_getvalue(tup, desc, 13);
}

/*
 * End an attempt that did not succeed: record it in jobq.attempt, then
 * re-queue the job with retry_count + 1 (after retry_in, or the queue's
 * backoff) while it is retryable and has retries left, else fail it for
 * good.  Outcome "snoozed" re-queues after retry_in without spending a
 * retry.  The job row must be locked by the caller.  Returns the new status.
 */
const char *
jobq_end_attempt(const JobqAttempt *a, text *error, bool retryable,
				 const Interval *retry_in, const char *outcome, TimestampTz now)
{
	Oid			types[11] = {INT8OID, INT4OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
	TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[11];
	char		nulls[11];
	bool		snooze = strcmp(outcome, "snoozed") == 0;
	bool		retry = snooze || (retryable && a->retry_count < a->max_retries);
	TimestampTz run_at = now;
	const char *status = retry ? "pending" : "failed";

	if (retry && retry_in != NULL)
		run_at = jobq_timestamp_add(now, jobq_interval_usecs(retry_in));
	else if (retry)
		run_at = jobq_timestamp_add(now,
									jobq_backoff_usecs((int64) a->backoff_base_us,
													   (int64) a->backoff_cap_us,
													   a->backoff_jitter, a->retry_count,
													   pg_prng_double(&pg_global_prng_state)));

	memset(nulls, ' ', sizeof(nulls));
	values[0] = Int64GetDatum(a->job_id);
	values[1] = Int32GetDatum(a->attempts);
	values[2] = a->worker_id ? CStringGetTextDatum(a->worker_id) : (Datum) 0;
	nulls[2] = a->worker_id ? ' ' : 'n';
	values[3] = TimestampTzGetDatum(a->claimed_at);
	nulls[3] = a->claimed_null ? 'n' : ' ';
	values[4] = TimestampTzGetDatum(now);
	values[5] = PointerGetDatum(error);
	values[6] = CStringGetTextDatum(status);
	/* a snooze re-queues without spending a retry */
	values[7] = Int32GetDatum(retry && !snooze ? a->retry_count + 1 : a->retry_count);
	values[8] = TimestampTzGetDatum(run_at);
	nulls[8] = retry ? ' ' : 'n';
	values[9] = TimestampTzGetDatum(now);
	nulls[9] = retry ? 'n' : ' ';
	values[10] = CStringGetTextDatum(outcome);
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_end_attempt,
											"WITH a AS (INSERT INTO jobq.attempt (job_id, attempt, worker_id,"
											" started_at, finished_at, outcome, error)"
											" VALUES ($1, $2, $3, $4, $5, $11, $6))"
											" UPDATE jobq.job SET status = $7, retry_count = $8,"
											" run_at = COALESCE($9, run_at),"
											" last_error = CASE WHEN $11 = 'snoozed' THEN last_error ELSE $6 END,"
											" finished_at = $10, updated_at = $5, lease_expires_at = NULL,"
											" claimed_at = CASE WHEN $7 = 'pending' THEN NULL ELSE claimed_at END,"
											" worker_id = CASE WHEN $7 = 'pending' THEN NULL ELSE worker_id END"
											" WHERE job_id = $1",
											11, types),
						  values, nulls, SPI_OK_UPDATE);
	if (retry)
		jobq_requeue(a->job_id, a->queue, a->kind, a->priority, a->concurrency_key,
					 run_at, now);
	if (!snooze)
		BreakerFailure(a->queue, error, now);
	return status;
}

/*
 * Lock a running job by id and lease token for an attempt's end, and check
 * that caller may work on its queue; false for a stale or wrong token.
 * SPI connected.
 */
static bool
LockRunningJob(int64 job_id, int64 lease_token, Oid caller, JobqAttempt *attempt)
{
	Oid			types[2] = {INT8OID, INT8OID};
	Datum		values[2];

	values[0] = Int64GetDatum(job_id);
	values[1] = Int64GetDatum(lease_token);
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_fail_lock,
											"SELECT " JOBQ_ATTEMPT_COLUMNS
											" FROM jobq.job j JOIN jobq.queue q ON q.name = j.queue"
											" WHERE j.job_id = $1 AND j.lease_token = $2 AND j.status = 'running'"
											" FOR UPDATE OF j",
											2, types),
						  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	jobq_attempt_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, attempt);
	jobq_require(caller, attempt->queue, JOBQ_CAP_WORK);
	return true;
}

/*
 * End the attempt of the running job named by the call's (job_id,
 * lease_token) arguments, as the job's queue's worker; false for a stale
 * or wrong token.  *status gets the job's new status.
 */
static bool
EndAttemptByToken(FunctionCallInfo fcinfo, text *error, bool retryable,
				  const Interval *retry_in, const char *outcome, TimestampTz now,
				  const char **status)
{
	JobqAttempt attempt;
	JobqSavedUser saved;
	bool		found;

	jobq_become_owner(&saved);
	SPI_connect();
	found = LockRunningJob(PG_GETARG_INT64(0), PG_GETARG_INT64(1), saved.caller, &attempt);
	if (found)
		*status = jobq_end_attempt(&attempt, error, retryable, retry_in, outcome, now);
	SPI_finish();
	jobq_restore_user(&saved);
	return found;
}

/*
 * jobq.fail(job_id, lease_token, error, retryable, retry_in) -> new status
 *
 * With retries left and retryable, the job goes back to pending with
 * retry_count + 1, due after retry_in or the queue's backoff; otherwise it
 * is failed for good.  The attempt and its error go to jobq.attempt.
 */
Datum
jobq_fail(PG_FUNCTION_ARGS)
{
	text	   *error;
	bool		retryable;
	Interval   *retry_in = NULL;
	const char *status;

	RequireArg(fcinfo, 0, "job_id");
	RequireArg(fcinfo, 1, "lease_token");
	RequireArg(fcinfo, 2, "error");
	RequireArg(fcinfo, 3, "retryable");
	error = jobq_clip_error(PG_GETARG_TEXT_PP(2));
	retryable = PG_GETARG_BOOL(3);
	if (!PG_ARGISNULL(4))
	{
		retry_in = PG_GETARG_INTERVAL_P(4);
		(void) jobq_check_interval_arg(retry_in, "retry_in", 0, JOBQ_MAX_INTERVAL_US);
	}

	if (!EndAttemptByToken(fcinfo, error, retryable, retry_in, "failed",
						   GetCurrentTimestamp(), &status))
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(status));
}

/*
 * jobq.snooze(job_id, lease_token, delay) -> the job's new run_at
 *
 * Put a running job back to pending, due after delay, without spending a
 * retry (a rate limit, a resource not there yet).  NULL for a stale token.
 */
Datum
jobq_snooze(PG_FUNCTION_ARGS)
{
	Interval   *delay;
	TimestampTz now;
	const char *status;

	RequireArg(fcinfo, 0, "job_id");
	RequireArg(fcinfo, 1, "lease_token");
	RequireArg(fcinfo, 2, "delay");
	delay = PG_GETARG_INTERVAL_P(2);
	(void) jobq_check_interval_arg(delay, "delay", 0, JOBQ_MAX_INTERVAL_US);

	now = GetCurrentTimestamp();
	if (!EndAttemptByToken(fcinfo, cstring_to_text("snoozed"), true, delay, "snoozed",
						   now, &status))
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(jobq_timestamp_add(now, jobq_interval_usecs(delay)));
}

/* jobq.extend(job_id, lease_token, lease) -> new lease expiry */
Datum
jobq_extend(PG_FUNCTION_ARGS)
{
	Oid			types[4] = {INT8OID, INT8OID, TIMESTAMPTZOID, INTERVALOID};
	Datum		values[4];
	Datum		result = (Datum) 0;
	bool		isnull = true;
	JobqSavedUser saved;

	RequireArg(fcinfo, 0, "job_id");
	RequireArg(fcinfo, 1, "lease_token");
	RequireArg(fcinfo, 2, "lease");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[3] = IntervalPGetDatum(PositiveIntervalArg(fcinfo, 2, "lease"));

	jobq_become_owner(&saved);
	SPI_connect();
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_extend,
											"UPDATE jobq.job SET lease_expires_at = $3 + $4, updated_at = $3"
											" WHERE job_id = $1 AND lease_token = $2 AND status = 'running'"
											" RETURNING lease_expires_at, queue",
											4, types),
						  values, NULL, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed > 0)
	{
		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		jobq_require(saved.caller, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2),
					 JOBQ_CAP_WORK);
	}
	SPI_finish();
	jobq_restore_user(&saved);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* jobq.checkpoint(job_id, lease_token, data) -> boolean */
Datum
jobq_checkpoint(PG_FUNCTION_ARGS)
{
	Oid			types[4] = {INT8OID, INT8OID, JSONBOID, TIMESTAMPTZOID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		done;
	JobqSavedUser saved;

	TokenJsonArgs(fcinfo, "data", values, nulls);

	jobq_become_owner(&saved);
	SPI_connect();
	jobq_spi_exec_indexed(jobq_plan_generic(&plan_checkpoint,
											"UPDATE jobq.job SET checkpoint = $3, updated_at = $4"
											" WHERE job_id = $1 AND lease_token = $2 AND status = 'running'"
											" RETURNING queue",
											4, types),
						  values, nulls, SPI_OK_UPDATE_RETURNING);
	done = SPI_processed > 0;
	if (done)
		jobq_require(saved.caller, SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1),
					 JOBQ_CAP_WORK);
	SPI_finish();
	jobq_restore_user(&saved);
	PG_RETURN_BOOL(done);
}

/* ----------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------- */

/*
 * An optional interval setting that must be at least min_us long, and at
 * most JOBQ_MAX_INTERVAL_US.
 */
static void
SettingInterval(FunctionCallInfo fcinfo, int argno, const char *argname,
				int64 min_us, Datum *value, char *null)
{
	if (PG_ARGISNULL(argno))
	{
		*null = 'n';
		return;
	}
	if (jobq_interval_usecs(PG_GETARG_INTERVAL_P(argno)) < min_us)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be %s", argname,
						min_us > 0 ? "a positive interval" : "zero or a positive interval")));
	(void) jobq_check_interval_arg(PG_GETARG_INTERVAL_P(argno), argname, min_us,
								   JOBQ_MAX_INTERVAL_US);
	*value = PG_GETARG_DATUM(argno);
	*null = ' ';
}

/*
 * An optional retention setting: zero or positive, at most
 * JOBQ_MAX_INTERVAL_US, or (from PostgreSQL 17, whose intervals have one)
 * 'infinity', which keeps the jobs for ever.  A finite retention too long
 * to compute is an error, never a silent "for ever".
 */
static void
SettingRetention(FunctionCallInfo fcinfo, int argno, const char *argname,
				 Datum *value, char *null)
{
	Interval   *iv;

	if (PG_ARGISNULL(argno))
	{
		*null = 'n';
		return;
	}
	iv = PG_GETARG_INTERVAL_P(argno);
	if (!JOBQ_INTERVAL_IS_INFINITY(iv) &&
		(jobq_interval_usecs(iv) > JOBQ_MAX_INTERVAL_US || !IntervalFieldsInRange(iv)))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_FIELD_OVERFLOW),
				 errmsg("%s is out of range", argname),
				 errdetail("%s was %s; the longest jobq accepts is 1000 years.", argname,
						   IntervalText(iv)),
				 errhint("Use an interval from 0 up to 1000 years%s.",
						 PG_VERSION_NUM >= 170000 ? ", or 'infinity' to keep the jobs for ever" :
						 "; 1000 years keeps the jobs for ever in practice (intervals have no 'infinity' before PostgreSQL 17)")));
	if (!JOBQ_INTERVAL_IS_INFINITY(iv))
		SettingInterval(fcinfo, argno, argname, 0, value, null);
	else
	{
		*value = PG_GETARG_DATUM(argno);
		*null = ' ';
	}
}

/* An optional limit setting: NULL leaves it, 0 removes it, else positive. */
static void
SettingLimit(FunctionCallInfo fcinfo, int argno, const char *argname,
			 Datum *value, char *null, bool *remove)
{
	*remove = false;
	*null = 'n';
	if (PG_ARGISNULL(argno))
		return;
	if (PG_GETARG_INT32(argno) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be negative", argname),
				 errhint("Use 0 to remove the limit.")));
	if (PG_GETARG_INT32(argno) == 0)
		*remove = true;
	else
	{
		*value = PG_GETARG_DATUM(argno);
		*null = ' ';
	}
}

/*
 * jobq.configure(queue, max_retries, lease, backoff_base, backoff_cap,
 *				  backoff_jitter, retention_completed, retention_failed,
 *				  max_concurrency, max_per_key, rate_limit, rate_period,
 *				  breaker_threshold)
 *
 * Creates the queue if needed; NULL leaves a setting unchanged, 0 removes
 * a limit.  Removing the breaker closes it.
 */
Datum
jobq_configure(PG_FUNCTION_ARGS)
{
	Oid			types[17] = {TEXTOID, INT4OID, INTERVALOID, INTERVALOID, INTERVALOID,
		FLOAT8OID, INTERVALOID, INTERVALOID, INT4OID, INT4OID, INT4OID, INTERVALOID,
	INT4OID, BOOLOID, BOOLOID, BOOLOID, BOOLOID};
	Datum		values[17];
	char		nulls[17];
	bool		remove[4];
	const char *queue;
	JobqQueue	q;
	bool		isnull;
	JobqSavedUser saved;

	memset(nulls, ' ', sizeof(nulls));
	queue = jobq_name_arg(fcinfo, 0, "queue", jobq_max_name_length, false);
	values[0] = CStringGetTextDatum(queue);
	if (PG_ARGISNULL(1))
		nulls[1] = 'n';
	else
	{
		values[1] = PG_GETARG_DATUM(1);
		if (PG_GETARG_INT32(1) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("max_retries must not be negative")));
	}
	SettingInterval(fcinfo, 2, "lease", 1, &values[2], &nulls[2]);
	SettingInterval(fcinfo, 3, "backoff_base", 0, &values[3], &nulls[3]);
	SettingInterval(fcinfo, 4, "backoff_cap", 0, &values[4], &nulls[4]);
	if (PG_ARGISNULL(5))
		nulls[5] = 'n';
	else
	{
		float8		jitter = PG_GETARG_FLOAT8(5);

		if (!(jitter >= 0.0 && jitter <= 1.0))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("backoff_jitter must be between 0 and 1"),
					 errhint("0.1 spreads each delay over plus or minus 10%%.")));
		values[5] = PG_GETARG_DATUM(5);
	}
	SettingRetention(fcinfo, 6, "retention_completed", &values[6], &nulls[6]);
	SettingRetention(fcinfo, 7, "retention_failed", &values[7], &nulls[7]);
	SettingLimit(fcinfo, 8, "max_concurrency", &values[8], &nulls[8], &remove[0]);
	SettingLimit(fcinfo, 9, "max_per_key", &values[9], &nulls[9], &remove[1]);
	SettingLimit(fcinfo, 10, "rate_limit", &values[10], &nulls[10], &remove[2]);
	SettingInterval(fcinfo, 11, "rate_period", 1, &values[11], &nulls[11]);
	SettingLimit(fcinfo, 12, "breaker_threshold", &values[12], &nulls[12], &remove[3]);
	for (int i = 0; i < 4; i++)
		values[13 + i] = BoolGetDatum(remove[i]);

	jobq_become_owner(&saved);
	SPI_connect();
	jobq_require(saved.caller, queue, JOBQ_CAP_ADMINISTER);
	QueueGetOrCreate(queue, &q);
	jobq_spi_exec(jobq_plan(&plan_configure_check,
							"SELECT COALESCE($5, backoff_cap) >= COALESCE($4, backoff_base)"
							" FROM jobq.queue WHERE name = $1",
							5, types),
				  values, nulls, SPI_OK_SELECT);
	if (SPI_processed != 1 ||
		!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("backoff_cap must not be shorter than backoff_base"),
				 errhint("Set both in one call, for example backoff_base => '1 s', backoff_cap => '10 min'.")));
	jobq_spi_exec(jobq_plan(&plan_configure,
							"UPDATE jobq.queue SET"
							" max_retries = COALESCE($2, max_retries),"
							" lease = COALESCE($3, lease),"
							" backoff_base = COALESCE($4, backoff_base),"
							" backoff_cap = COALESCE($5, backoff_cap),"
							" backoff_jitter = COALESCE($6, backoff_jitter),"
							" retention_completed = COALESCE($7, retention_completed),"
							" retention_failed = COALESCE($8, retention_failed),"
							" max_concurrency = CASE WHEN $14 THEN NULL ELSE COALESCE($9, max_concurrency) END,"
							" max_per_key = CASE WHEN $15 THEN NULL ELSE COALESCE($10, max_per_key) END,"
							" rate_limit = CASE WHEN $16 THEN NULL ELSE COALESCE($11, rate_limit) END,"
							" rate_period = COALESCE($12, rate_period),"
							" breaker_threshold = CASE WHEN $17 THEN NULL ELSE COALESCE($13, breaker_threshold) END,"
							" breaker_state = CASE WHEN $17 THEN 'closed' ELSE breaker_state END,"
							" breaker_failures = CASE WHEN $17 THEN 0 ELSE breaker_failures END,"
							" updated_at = now()"
							" WHERE name = $1",
							17, types),
				  values, nulls, SPI_OK_UPDATE);
	SPI_finish();
	jobq_restore_user(&saved);
	PG_RETURN_VOID();
}
