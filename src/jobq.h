/*-------------------------------------------------------------------------
 *
 * jobq.h
 *	  Declarations shared by the C files of jobq, a background-job queue
 *	  that lives inside PostgreSQL.
 *
 * Each .c file owns one concern: jobq.c (module load, GUCs), queue_ops.c
 * (the SQL-callable queue operations), queue_state.c (per-queue claim
 * positions in shared memory), reaper.c (expired leases), retention.c
 * (pruning finished jobs and keys), admin.c (retry, cancel, pause,
 * purge), scheduler.c (cron schedules; cron_parse.c and cron_next.c hold the
 * expression parser and the time-zone arithmetic), worker.c (the launcher and the
 * per-database background workers), backoff.c (retry delays), priority.c
 * (priority labels), spi_plan.c (saved SPI plans with a safe search_path).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_H
#define JOBQ_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "storage/condition_variable.h"
#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

/* Version shims: keep PostgreSQL version differences here. */
#if PG_VERSION_NUM < 150000
#error "jobq requires PostgreSQL 15 or later"
#endif

/* Intervals have 'infinity' from PostgreSQL 17 on. */
#if PG_VERSION_NUM >= 170000
#define JOBQ_INTERVAL_IS_INFINITY(iv)	INTERVAL_IS_NOEND(iv)
#else
#define JOBQ_INTERVAL_IS_INFINITY(iv)	false
#endif

/*
 * Hard upper bounds of the name limits (bytes); the GUCs jobq.max_name_length
 * and jobq.max_key_length set the limits in force, up to these.
 */
#define JOBQ_MAX_NAME_LEN		128
#define JOBQ_MAX_KEY_LEN		512

/* GUCs (jobq.c) */
extern int	jobq_max_payload_size;
extern int	jobq_max_result_size;
extern int	jobq_max_error_length;
extern int	jobq_max_name_length;
extern int	jobq_max_key_length;
extern int	jobq_max_cron_length;
extern int	jobq_max_schedules;
extern int	jobq_max_database_schedules;
extern int	jobq_max_batch;
extern int	jobq_idempotency_retention;

/* A position in a queue's claim order: (-priority, run_at, job_id). */
typedef struct JobqClaimPos
{
	int32		neg_priority;
	TimestampTz run_at;
	int64		job_id;
} JobqClaimPos;

/*
 * A running job whose attempt ends without success (fail, lease expiry):
 * what jobq_end_attempt needs, read by a query selecting
 * JOBQ_ATTEMPT_COLUMNS from jobq.job j joined with jobq.queue q.
 */
typedef struct JobqAttempt
{
	int64		job_id;
	int32		retry_count;
	int32		max_retries;
	char	   *queue;
	char	   *kind;
	int32		priority;
	int32		attempts;
	char	   *worker_id;		/* NULL when the claim named no worker */
	TimestampTz claimed_at;
	bool		claimed_null;
	double		backoff_base_us;
	double		backoff_cap_us;
	double		backoff_jitter;
	char	   *concurrency_key;	/* NULL when the job has none */
} JobqAttempt;

#define JOBQ_ATTEMPT_COLUMNS \
	"j.job_id, j.retry_count, j.max_retries, j.queue, j.kind, j.priority," \
	" j.attempts, j.worker_id, j.claimed_at," \
	" (extract(epoch FROM q.backoff_base) * 1000000)::float8," \
	" (extract(epoch FROM q.backoff_cap) * 1000000)::float8, q.backoff_jitter," \
	" j.concurrency_key"

/* One job to enqueue, validated. */
typedef struct JobqNewJob
{
	const char *kind;
	Jsonb	   *payload;
	const char *queue;
	int32		priority;
	TimestampTz run_at;
	bool		has_max_retries;
	int32		max_retries;
	const char *key;			/* NULL: no idempotency key */
	const char *concurrency_key;	/* NULL: none */
} JobqNewJob;

/* job_insert.c */
typedef enum JobqKeyResult
{
	JOBQ_KEY_RESERVED,			/* the key is the new job's; its id is taken */
	JOBQ_KEY_TAKEN,				/* another job holds the key */
	JOBQ_KEY_SQL				/* the table needs the SQL statement */
} JobqKeyResult;

extern JobqKeyResult jobq_reserve_key(const char *kind, const char *key,
									  int64 *job_id);
extern bool jobq_insert_pending(const JobqNewJob *job, int32 max_retries,
								const Datum *payloads, int n, TimestampTz now,
								int64 *ids, bool ids_given);

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

/* queue_ops.c */
extern void jobq_enqueue_job(const JobqNewJob *job, TimestampTz now,
							 int64 *job_id, bool *created);
extern int64 jobq_interval_usecs(const Interval *iv);
extern int64 jobq_check_interval_arg(const Interval *iv, const char *argname,
									 int64 min_us, int64 max_us);
extern TimestampTz jobq_check_timestamp_arg(TimestampTz t, const char *argname);
extern TimestampTz jobq_timestamp_add(TimestampTz t, int64 usecs);
extern const char *jobq_quote_arg(const char *s);
extern text *jobq_clip_error(text *error);
extern Jsonb *jobq_payload_arg(Datum d, const char *argname);
extern const char *jobq_name_arg(FunctionCallInfo fcinfo, int argno,
								 const char *argname, int maxlen, bool nullable);
extern void jobq_requeue(int64 job_id, const char *queue, const char *kind,
						 int32 priority, const char *concurrency_key,
						 TimestampTz run_at, TimestampTz now);
extern void jobq_attempt_from_tuple(HeapTuple tup, TupleDesc desc,
									JobqAttempt *a);
extern const char *jobq_end_attempt(const JobqAttempt *a, text *error,
									bool retryable, const Interval *retry_in,
									const char *outcome, TimestampTz now);

/* contain.c */
typedef void (*JobqUnitFn) (void *arg);
extern bool jobq_run_unit(const char *unit, JobqUnitFn fn, void *arg);
extern void jobq_require_writable(const char *cmdname);
extern bool jobq_try_units(JobqUnitFn fn, void *arg);

/* reaper.c (SPI must be connected) */
extern int64 jobq_reap_expired(int batch, bool *more);

/* retention.c (SPI must be connected) */
extern int64 jobq_prune_finished(int batch, bool *more);

/* Most executor processes per database. */
#define JOBQ_MAX_EXECUTORS	16

/* acl.c */
typedef enum JobqCapability
{
	JOBQ_CAP_ENQUEUE,
	JOBQ_CAP_WORK,
	JOBQ_CAP_ADMINISTER
} JobqCapability;

/* The caller's identity while a function acts as the extension owner. */
typedef struct JobqSavedUser
{
	Oid			caller;			/* the role that called the function */
	Oid			userid;			/* to restore */
	int			sec_context;	/* to restore */
} JobqSavedUser;

extern void jobq_become_owner(JobqSavedUser *saved);
extern void jobq_restore_user(const JobqSavedUser *saved);
extern bool jobq_may(Oid role, const char *queue, JobqCapability cap);
extern void jobq_require(Oid role, const char *queue, JobqCapability cap);
extern void jobq_acl_set_handler_role(Oid role);

/* worker.c */
extern int	jobq_executors;
extern void jobq_worker_init(void);
extern bool jobq_executor_attach(int index);
extern void jobq_executor_set_job(int64 job_id, TimestampTz deadline);
extern bool jobq_executor_take_share(Oid role, int nroles);
extern void jobq_worker_wake_executors(Oid dbid);
extern void jobq_worker_interrupt_job(int64 job_id);

/* executor.c / admin.c */
extern bool jobq_database_has_handlers(void);
extern void jobq_worker_wake_at_commit(void);

/* scheduler.c (SPI must be connected) */
extern int	jobq_misfire_grace_s;
extern int	jobq_misfire_max_fires;
/* Prefix of the idempotency keys jobq derives itself; clients may not use it. */
#define JOBQ_INTERNAL_KEY_PREFIX	"jobq:"

/* A set of ids, growing in memory context cxt. */
typedef struct JobqIdSet
{
	int64	   *ids;
	int			n;
	int			cap;
	MemoryContext cxt;
} JobqIdSet;

extern int64 jobq_fire_due_schedules(TimestampTz *next_due, JobqIdSet *skip,
									 bool *more);
extern void jobq_client_key_check(const char *key, const char *argname);

/* queue_state.c */
extern void jobq_state_shmem_request(void);
extern void jobq_state_register_callbacks(void);
extern uint64 jobq_state_begin_claim(Oid relid, const char *queue,
									 JobqClaimPos *start);
extern void jobq_state_end_claim(Oid relid, const char *queue, uint64 epoch,
								 const JobqClaimPos *last);
extern void jobq_state_note_ready(const char *queue, const JobqClaimPos *pos);
extern void jobq_state_note_unready(const char *queue, const JobqClaimPos *pos);
extern bool jobq_state_due_probe_needed(Oid relid, const char *queue,
										TimestampTz now, uint64 *epoch);
extern void jobq_state_set_next_due(Oid relid, const char *queue,
									uint64 epoch, TimestampTz next_due);
extern void jobq_state_note_scheduled(const char *queue, TimestampTz run_at);
extern ConditionVariable *jobq_state_wait_cv(const char *queue);
extern TimestampTz jobq_state_next_due(const char *queue);
extern uint64 jobq_state_wake_seq(const char *queue);
extern void jobq_state_mark_handled(const char *queue);
extern uint64 jobq_state_settings_gen(void);

/* backoff.c */
extern int64 jobq_backoff_usecs(int64 base_us, int64 cap_us, double jitter,
								int retry_count, double unit_random);

/* spi_plan.c */
extern SPIPlanPtr jobq_plan(SPIPlanPtr *cache, const char *sql, int nargs,
							Oid *argtypes);
extern SPIPlanPtr jobq_plan_generic(SPIPlanPtr *cache, const char *sql, int nargs,
									Oid *argtypes);
extern void jobq_spi_exec_indexed(SPIPlanPtr plan, Datum *values, const char *nulls,
								  int expected);
extern void jobq_spi_exec(SPIPlanPtr plan, Datum *values, const char *nulls,
						  int expected);
extern void jobq_spi_exec_sql(const char *sql, bool read_only, int expected);

#endif							/* JOBQ_H */
