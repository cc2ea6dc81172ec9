/*-------------------------------------------------------------------------
 *
 * args.h
 *	  Checking the arguments of jobq's SQL functions (args.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_ARGS_H
#define JOBQ_ARGS_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

/*
 * Longest interval jobq accepts as an argument or a queue setting: 1000
 * years, measured as jobq_interval_usecs measures (a month is 30 days).
 * Every time jobq computes from one (now + a lease, a delay or a backoff;
 * now - a retention) then stays far inside the timestamp range.  A claim
 * waits at most JOBQ_MAX_WAIT_US.
 */
#define JOBQ_MAX_INTERVAL_US \
	((int64) 1000 * MONTHS_PER_YEAR * DAYS_PER_MONTH * USECS_PER_DAY)
#define JOBQ_MAX_WAIT_US		((int64) USECS_PER_DAY)

/* Longest piece of a user-supplied string an error message quotes (bytes). */
#define JOBQ_MAX_QUOTED_LEN		64

extern void jobq_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname);
extern const char *jobq_name_arg(FunctionCallInfo fcinfo, int argno,
								 const char *argname, int maxlen, bool nullable);
extern void jobq_check_json_size(Jsonb *doc, const char *argname, bool is_payload);
extern Jsonb *jobq_payload_arg(Datum d, const char *argname);
extern int64 jobq_interval_usecs(const Interval *iv);
extern Interval *jobq_interval_from_usecs(int64 usecs);
extern bool jobq_interval_in_range(const Interval *iv);
extern char *jobq_interval_text(const Interval *iv);
extern int64 jobq_check_interval_arg(const Interval *iv, const char *argname,
									 int64 min_us, int64 max_us);
extern TimestampTz jobq_check_timestamp_arg(TimestampTz t, const char *argname);
extern TimestampTz jobq_timestamp_add(TimestampTz t, int64 usecs);
extern const char *jobq_quote_arg(const char *s);
extern int	jobq_cliplen(const char *s, int len, int limit);
extern Interval *jobq_positive_interval_arg(FunctionCallInfo fcinfo, int argno,
											const char *argname);
extern int32 jobq_priority_arg(FunctionCallInfo fcinfo, int argno);
extern void jobq_max_retries_arg(FunctionCallInfo fcinfo, int argno, bool *has,
								 int32 *value);
extern void jobq_array_arg(ArrayType *arr, Oid elemtype, const char *argname,
						   Datum **elems, bool **nulls, int *n);
extern void jobq_check_name_elements(const Datum *elems, const bool *nulls, int n,
									 const char *argname, int maxlen);
extern int32 jobq_batch_arg(FunctionCallInfo fcinfo, int argno);
extern void jobq_check_same_length(int n1, const char *name1, int n2,
								   const char *name2);
extern void jobq_client_key_check(const char *key, const char *argname);

#endif							/* JOBQ_ARGS_H */
