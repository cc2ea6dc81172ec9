/*-------------------------------------------------------------------------
 *
 * queue/enqueue.c
 *	  jobq.enqueue and jobq.enqueue_many: their arguments, the caller's
 *	  capability, and the parents of a job enqueued with depends_on
 *	  (workflow/depend.c); the rows are written by queue/enqueue_rows.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "acl.h"
#include "args.h"
#include "guc.h"
#include "queue/enqueue_rows.h"
#include "workflow/depend.h"

PG_FUNCTION_INFO_V1(jobq_enqueue);
PG_FUNCTION_INFO_V1(jobq_enqueue_many);

/* Arguments 8 and 9 (0.2.0): depends_on and on_parent_failure. */
#define ARG_DEPENDS_ON		8
#define ARG_ON_PARENT_FAILURE	9

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
	job->priority = jobq_priority_arg(fcinfo, 3);
	jobq_require_arg(fcinfo, 4, "run_at");
	job->run_at = jobq_check_timestamp_arg(PG_GETARG_TIMESTAMPTZ(4), "run_at");
	jobq_max_retries_arg(fcinfo, 5, &job->has_max_retries, &job->max_retries);
	job->concurrency_key = jobq_name_arg(fcinfo, 7, "concurrency_key", jobq_max_key_length, true);
}

/*
 * jobq.enqueue(kind, payload, queue, priority, run_at, max_retries,
 *				idempotency_key, concurrency_key, depends_on, on_parent_failure)
 *	-> (job_id, created)
 */
Datum
jobq_enqueue(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JobqNewJob	job = {0};
	int64		job_id;
	bool		created;
	JobqSavedUser saved;
	JobqParents parents;
	TimestampTz now;

	NewJobCommonArgs(fcinfo, &job);
	jobq_require_arg(fcinfo, 1, "payload");
	job.payload = jobq_payload_arg(PG_GETARG_DATUM(1), "payload");
	job.key = jobq_name_arg(fcinfo, 6, "idempotency_key", jobq_max_key_length, true);
	jobq_client_key_check(job.key, "idempotency_key");
	job.blocked = jobq_parents_arg(fcinfo, ARG_DEPENDS_ON, ARG_ON_PARENT_FAILURE, &parents);

	InitMaterializedSRF(fcinfo, 0);
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, job.queue, JOBQ_CAP_ENQUEUE);
	now = GetCurrentTimestamp();
	if (job.blocked)
		jobq_parents_read(&parents, saved.caller);
	jobq_enqueue_job(&job, now, &job_id, &created);
	if (job.blocked)
		jobq_parents_record(&parents, &job_id, &created, 1, now);
	PutJobRow(rsinfo, job_id, created);
	jobq_owner_end(&saved);
	return (Datum) 0;
}

/*
 * jobq.enqueue_many(kind, payloads[], queue, priority, run_at, max_retries,
 *					 idempotency_keys[], concurrency_key, depends_on,
 *					 on_parent_failure) -> one (job_id, created) per payload
 */
Datum
jobq_enqueue_many(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	JobqNewJob	job = {0};
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
	JobqParents parents;

	NewJobCommonArgs(fcinfo, &job);
	jobq_require_arg(fcinfo, 1, "payloads");
	jobq_array_arg(PG_GETARG_ARRAYTYPE_P(1), JSONBOID, "payloads", &payloads, &payload_nulls, &n);
	if (!PG_ARGISNULL(6))
	{
		jobq_array_arg(PG_GETARG_ARRAYTYPE_P(6), TEXTOID, "idempotency_keys", &keys, &key_nulls, &nkeys);
		jobq_check_same_length(n, "payloads", nkeys, "idempotency_keys");
	}
	job.blocked = jobq_parents_arg(fcinfo, ARG_DEPENDS_ON, ARG_ON_PARENT_FAILURE, &parents);
	if (job.blocked)
		jobq_parents_check_count(&parents, n);

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
						 errhint("The limit is set by jobq.max_key_length.")));
			jobq_client_key_check(TextDatumGetCString(keys[i]), argname);
		}
	}

	InitMaterializedSRF(fcinfo, 0);
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, job.queue, JOBQ_CAP_ENQUEUE);
	now = GetCurrentTimestamp();
	if (job.blocked)
		jobq_parents_read(&parents, saved.caller);

	/*
	 * In input order, so job ids (FIFO within a priority) follow it: each run
	 * of jobs without a key in one statement, jobs with a key one by one,
	 * through the unique index.
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
			jobq_enqueue_bulk(&job, keyless, nkeyless, now, &ids[start]);
		}
		else
		{
			job.payload = docs[i];
			job.key = TextDatumGetCString(keys[i]);
			jobq_enqueue_job(&job, now, &ids[i], &created[i]);
			i++;
		}
	}
	if (job.blocked)
		jobq_parents_record(&parents, ids, created, n, now);
	for (int i = 0; i < n; i++)
		PutJobRow(rsinfo, ids[i], created[i]);
	jobq_owner_end(&saved);
	return (Datum) 0;
}
