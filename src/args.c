/*-------------------------------------------------------------------------
 *
 * args.c
 *	  Checking the arguments of jobq's SQL functions: names, JSON documents,
 *	  intervals and timestamps, priorities, arrays.  Every check raises the
 *	  error a caller sees, naming the argument, before anything is written.
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

#include "args.h"
#include "guc.h"
#include "jobq_limits.h"


/* ----------------------------------------------------------------
 * Argument checks
 * ---------------------------------------------------------------- */

/* Error out when argument argno is NULL. */
void
jobq_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
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
		jobq_require_arg(fcinfo, argno, argname);
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
				 errhint("The limit is set by %s.",
						 maxlen == jobq_max_key_length ? "jobq.max_key_length" :
						 maxlen == jobq_max_cron_length ? "jobq.max_cron_length" :
						 "jobq.max_name_length")));
	return text_to_cstring(t);
}

/*
 * Check a JSON document's size against a limit: jobq.max_payload_size for
 * payloads, jobq.max_result_size for results and checkpoints.
 */
void
jobq_check_json_size(Jsonb *doc, const char *argname, bool is_payload)
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
Jsonb	   *
jobq_payload_arg(Datum d, const char *argname)
{
	Jsonb	   *payload = DatumGetJsonbP(d);

	if (!JB_ROOT_IS_OBJECT(payload) || JB_ROOT_IS_SCALAR(payload))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a JSON object", argname),
				 errhint("Wrap the value in an object, for example '{\"value\": 42}'.")));
	jobq_check_json_size(payload, argname, true);
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
Interval   *
jobq_interval_from_usecs(int64 usecs)
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
bool
jobq_interval_in_range(const Interval *iv)
{
	int64		max_months = JOBQ_MAX_INTERVAL_US / ((int64) DAYS_PER_MONTH * USECS_PER_DAY);
	int64		max_days = JOBQ_MAX_INTERVAL_US / USECS_PER_DAY;

	return iv->month <= max_months && iv->month >= -max_months &&
		iv->day <= max_days && iv->day >= -max_days &&
		iv->time <= JOBQ_MAX_INTERVAL_US && iv->time >= -JOBQ_MAX_INTERVAL_US;
}

/* An interval as text, as interval_out writes it. */
char	   *
jobq_interval_text(const Interval *iv)
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

	if (usecs > max_us || !jobq_interval_in_range(iv))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_FIELD_OVERFLOW),
				 errmsg("%s is out of range", argname),
				 errdetail("The %s given was %s; the longest jobq accepts is %s.", argname,
						   jobq_interval_text(iv), jobq_interval_text(jobq_interval_from_usecs(max_us))),
				 min_us > 0 ?
				 errhint("Use a positive interval of at most %s.",
						 jobq_interval_text(jobq_interval_from_usecs(max_us))) :
				 errhint("Use an interval from 0 up to %s.",
						 jobq_interval_text(jobq_interval_from_usecs(max_us)))));

	/*
	 * '1 mon -29 days' measures a day here (a month is 30 days), but added to
	 * a time in February it goes back a day: every part of an interval must
	 * be positive or zero, so that it moves forward whatever the month
	 */
	if (iv->month < 0 || iv->day < 0 || iv->time < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not have a negative part", argname),
				 errdetail("The %s given was %s.", argname, jobq_interval_text(iv)),
				 errhint("Write it without negative parts: '23 hours', not '1 day -1 hour'.")));
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
	len = jobq_cliplen(s, len, JOBQ_MAX_QUOTED_LEN);
	return psprintf("%.*s...", len, s);
}

/*
 * How many of the len bytes at s to keep for at most limit, cut on a
 * character boundary: of the server encoding, and in a SQL_ASCII database,
 * where every byte is a character to PostgreSQL, of UTF-8 too (what its
 * clients mostly write there; cut inside a UTF-8 character, the text is
 * invalid to every UTF-8 client).
 */
int
jobq_cliplen(const char *s, int len, int limit)
{
	int			keep = pg_mbcliplen(s, len, limit);

	if (GetDatabaseEncoding() == PG_SQL_ASCII)
		while (keep > 0 && keep < len && ((unsigned char) s[keep] & 0xC0) == 0x80)
			keep--;
	return keep;
}

/*
 * An interval argument that must be strictly positive and at most
 * JOBQ_MAX_INTERVAL_US (a lease).
 */
Interval   *
jobq_positive_interval_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	Interval   *iv = PG_GETARG_INTERVAL_P(argno);

	(void) jobq_check_interval_arg(iv, argname, 1, JOBQ_MAX_INTERVAL_US);
	return iv;
}

/* A priority: any integer but INT_MIN, whose negation would overflow. */
int32
jobq_priority_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		priority;

	jobq_require_arg(fcinfo, argno, "priority");
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
void
jobq_max_retries_arg(FunctionCallInfo fcinfo, int argno, bool *has, int32 *value)
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
void
jobq_array_arg(ArrayType *arr, Oid elemtype, const char *argname,
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

/*
 * The elements of a text[] argument argname that names things (kinds,
 * queues): none NULL, empty or longer than maxlen, as a single name must
 * not be.  The element's place counts from 1, whatever the array's bounds.
 */
void
jobq_check_name_elements(const Datum *elems, const bool *nulls, int n, const char *argname,
						 int maxlen)
{
	for (int i = 0; i < n; i++)
	{
		int			len;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("%s[%d] must not be null", argname, i + 1),
					 errhint("Leave %s NULL for no restriction, or name each element.", argname)));
		len = VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i]));
		if (len == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s[%d] must not be empty", argname, i + 1),
					 errhint("Name each element of %s.", argname)));
		if (len > maxlen)
			ereport(ERROR,
					(errcode(ERRCODE_NAME_TOO_LONG),
					 errmsg("%s[%d] is too long", argname, i + 1),
					 errdetail("It is %d bytes long; the limit is %d bytes.", len, maxlen),
					 errhint("The limit is set by jobq.max_name_length.")));
	}
}

/*
 * A batch argument of a maintenance call (jobq.reap, jobq.prune): 1 or more.
 */
int32
jobq_batch_arg(FunctionCallInfo fcinfo, int argno)
{
	int32		batch;

	jobq_require_arg(fcinfo, argno, "batch");
	batch = PG_GETARG_INT32(argno);
	if (batch < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("batch must be a positive integer"),
				 errdetail("The batch given was %d.", batch),
				 errhint("Pass the most rows to handle in one call, 1 or more (the default is 1000).")));
	return batch;
}

/* Two arrays that must have one element per job. */
void
jobq_check_same_length(int n1, const char *name1, int n2, const char *name2)
{
	if (n1 != n2)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s and %s must have the same length", name1, name2),
				 errdetail_plural("%s has %d element and %s has %d.",
								  "%s has %d elements and %s has %d.",
								  n1, name1, n1, name2, n2)));
}

/*
 * Error out when key, a client's idempotency key given as argument argname,
 * lies in the namespace of the keys jobq derives itself (JOBQ_INTERNAL_KEY_PREFIX).
 * A client could otherwise take a future fire's key ahead of the schedule,
 * or hold it in an open transaction that the fire would wait for.
 */
void
jobq_client_key_check(const char *key, const char *argname)
{
	if (key != NULL &&
		strncmp(key, JOBQ_INTERNAL_KEY_PREFIX, strlen(JOBQ_INTERNAL_KEY_PREFIX)) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not begin with \"%s\"", argname, JOBQ_INTERNAL_KEY_PREFIX),
				 errdetail("Keys beginning with \"%s\" are reserved for the keys jobq derives itself, such as those of schedule fires.",
						   JOBQ_INTERNAL_KEY_PREFIX),
				 errhint("Use a key with a prefix of your own.")));
}
