/*-------------------------------------------------------------------------
 *
 * ops/scheduler.c
 *	  Cron schedules: jobq.schedule / unschedule / pause_schedule /
 *	  resume_schedule, and firing due schedules (from the background worker
 *	  or jobq.run_schedules()).
 *
 * A schedule row keeps its next fire time durably (next_fire_at).  Firing
 * a schedule locks its row (FOR UPDATE SKIP LOCKED, so two workers or a
 * manual run never fire the same schedule at once), enqueues one job per
 * fire time through the ordinary idempotent enqueue with the key
 * "jobq:schedule:<id>:<fire time in microseconds since 2000>" and run_at =
 * the fire time, then moves next_fire_at past now, all in one transaction.
 * A crash between enqueue and commit loses both; a fire that did commit
 * can never be enqueued again, since its key stays reserved (jobs and keys
 * are the fire history, pruned like any job) and last_fire_at moved.
 * Keys beginning with "jobq:" are refused to clients' enqueue and
 * enqueue_many, so no client can take a fire's key or hold it in an open
 * transaction the fire would wait for.
 *
 * Each schedule fires as a unit of its own (contain.c): its error is logged
 * once and the other schedules fire as usual; a schedule row a client holds
 * (an administrator's open transaction) is skipped until the next round.
 *
 * Misfires.  A due fire time no older than jobq.misfire_grace is on time
 * and fires.  Older ones (the server was down, or the worker behind) are
 * missed, and so is every fire time that passed while the schedule was
 * paused: 'skip' fires none of them, 'run_once' fires one job for the
 * latest, 'run_all' fires each, at most jobq.misfire_max_fires (the
 * latest ones).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "acl.h"
#include "args.h"
#include "contain.h"
#include "guc.h"
#include "spi.h"
#include "cron/cron.h"
#include "ops/scheduler.h"
#include "queue/enqueue_rows.h"
#include "queue/job_insert.h"
#include "shmem/shm_bgw.h"

PG_FUNCTION_INFO_V1(jobq_schedule);
PG_FUNCTION_INFO_V1(jobq_unschedule);
PG_FUNCTION_INFO_V1(jobq_pause_schedule);
PG_FUNCTION_INFO_V1(jobq_resume_schedule);
PG_FUNCTION_INFO_V1(jobq_run_schedules);
PG_FUNCTION_INFO_V1(jobq_run_schedule);

/* Most fire times looked at for one schedule in one round. */
#define JOBQ_MAX_FIRE_SCAN		100000
/* Most schedules fired in one transaction. */
#define JOBQ_SCHEDULE_BATCH		100

/*
 * How long a fire waits for a lock (a queue's row a client holds, say)
 * before it is tried again next round, its queue's other schedules with it.
 */
#define JOBQ_FIRE_LOCK_TIMEOUT_MS	10
/* Most other keys derived for one fire whose own key a client's job holds. */
#define JOBQ_FIRE_KEY_TRIES		8

static SPIPlanPtr plan_upsert;
static SPIPlanPtr plan_upsert_moved;
static SPIPlanPtr plan_schedule_queue;
static SPIPlanPtr plan_schedule_count;
static SPIPlanPtr plan_unschedule;
static SPIPlanPtr plan_pause;
static SPIPlanPtr plan_resume_lock;
static SPIPlanPtr plan_due;
static SPIPlanPtr plan_fired;
static SPIPlanPtr plan_next_fire;
static SPIPlanPtr plan_run_schedule;

static char *ScheduleRequire(Oid role, Datum name);

/* What firing needs of a schedule row. */
typedef struct JobqSchedule
{
	int64		id;
	char	   *name;
	char	   *cron;
	char	   *kind;
	Jsonb	   *payload;
	char	   *queue;
	char	   *timezone;
	char	   *misfire;
	int32		priority;
	TimestampTz next_fire_at;
	TimestampTz last_fire_at;	/* 0: never fired */
} JobqSchedule;

/* Make or update a schedule: $1 name .. $9 next_fire_at. */
#define JOBQ_SCHEDULE_UPSERT \
	"INSERT INTO jobq.schedule (name, cron, kind, payload, queue, timezone," \
	" misfire, priority, next_fire_at)" \
	" VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)" \
	" ON CONFLICT (name) DO UPDATE SET cron = $2, kind = $3, payload = $4," \
	" queue = $5, timezone = $6, misfire = $7, priority = $8," \
	" next_fire_at = $9, updated_at = now()"

#define JOBQ_SCHEDULE_COLUMNS \
	"schedule_id, name, cron, kind, payload, queue, timezone, misfire, priority," \
	" next_fire_at, last_fire_at"

/* Read JOBQ_SCHEDULE_COLUMNS from an SPI tuple. */
static void
ScheduleFromTuple(HeapTuple tup, TupleDesc desc, JobqSchedule *s)
{
	bool		isnull;

	s->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	s->name = SPI_getvalue(tup, desc, 2);
	s->cron = SPI_getvalue(tup, desc, 3);
	s->kind = SPI_getvalue(tup, desc, 4);
	s->payload = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 5, &isnull));
	s->queue = SPI_getvalue(tup, desc, 6);
	s->timezone = SPI_getvalue(tup, desc, 7);
	s->misfire = SPI_getvalue(tup, desc, 8);
	s->priority = DatumGetInt32(SPI_getbinval(tup, desc, 9, &isnull));
	s->next_fire_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 10, &isnull));
	s->last_fire_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 11, &isnull));
	if (isnull)
		s->last_fire_at = 0;
}

/*
 * Enqueue the job standing for one fire time into *job_id; false when the
 * time is not after the schedule's last fire, which never fires twice
 * whatever else changed.
 *
 * The job's key is derived from (schedule, fire time), in the "jobq:"
 * namespace that clients may not write (jobq_client_key_check).  A fire
 * after last_fire_at has never been enqueued (last_fire_at moves in the
 * same transaction as every fire), so a job found holding its key is not
 * this schedule's: a client planted it before "jobq:" keys were reserved.
 * That job is reported and the fire goes under the next derived key, so it
 * happens all the same.
 */
static bool
FireOnce(const JobqSchedule *s, TimestampTz fire_time, TimestampTz now, int64 *job_id)
{
	JobqNewJob	job = {0};
	bool		created;
	char	   *key;

	if (s->last_fire_at != 0 && fire_time <= s->last_fire_at)
		return false;

	job.kind = s->kind;
	job.payload = s->payload;
	job.queue = s->queue;
	job.priority = s->priority;
	job.run_at = fire_time;
	job.has_max_retries = false;
	job.max_retries = 0;
	job.concurrency_key = NULL;
	key = psprintf(JOBQ_INTERNAL_KEY_PREFIX "schedule:%lld:%lld", (long long) s->id,
				   (long long) fire_time);
	for (int attempt = 0; attempt <= JOBQ_FIRE_KEY_TRIES; attempt++)
	{
		job.key = attempt == 0 ? key : psprintf("%s:%d", key, attempt);
		jobq_enqueue_job(&job, now, job_id, &created);
		if (created)
			return true;
		ereport(WARNING,
				(errmsg("jobq: key \"%s\" of a fire of schedule \"%s\" is held by job %lld, which the schedule did not enqueue",
						job.key, s->name, (long long) *job_id),
				 errdetail("The job was enqueued by a client before keys beginning with \"jobq:\" were reserved."),
				 errhint("The fire goes under the next key derived from it; cancel job %lld if it is not wanted.",
						 (long long) *job_id)));
	}
	ereport(WARNING,
			(errmsg("jobq: schedule \"%s\" did not fire at %s: every key derived for the fire is held",
					s->name, timestamptz_to_str(fire_time))));
	return false;
}

/*
 * Fire one locked schedule as of now: on-time fires, then missed ones per
 * its misfire policy (all due times count as missed when all_missed), and
 * store its next fire time.  Returns the number of jobs enqueued.
 */
static int
FireSchedule(const JobqSchedule *s, TimestampTz now, bool all_missed)
{
	CronSpec	spec;
	pg_tz	   *tz;
	TimestampTz grace_start = now - (int64) jobq_misfire_grace_s * USECS_PER_SEC;
	TimestampTz t = s->next_fire_at;
	TimestampTz *missed;
	int			nmissed = 0;	/* missed times seen */
	int			keep = Max(jobq_misfire_max_fires, 1);
	TimestampTz last_fired = 0;
	int64		last_job = 0;
	int			fired = 0;
	int			missed_fired = 0;
	bool		has_next;
	int			scanned = 0;
	Oid			types[4] = {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	jobq_cron_parse_or_error(s->cron, &spec);
	tz = jobq_cron_timezone(s->timezone);
	missed = palloc(sizeof(TimestampTz) * keep);

	/* walk the due fire times: on-time ones fire now, missed ones are kept */
	has_next = true;
	while (has_next && t <= now)
	{
		if (!all_missed && t >= grace_start)
		{
			if (FireOnce(s, t, now, &last_job))
			{
				last_fired = t;
				fired++;
			}
		}
		else
			missed[nmissed++ % keep] = t;
		if (++scanned >= JOBQ_MAX_FIRE_SCAN)
		{
			ereport(LOG,
					(errmsg("jobq: schedule \"%s\" is more than %d fire times behind; skipping ahead",
							s->name, JOBQ_MAX_FIRE_SCAN)));
			t = now;
		}
		has_next = jobq_cron_next_time(&spec, t, tz, &t);
	}

	/* missed fire times, per the misfire policy */
	if (nmissed > 0 && strcmp(s->misfire, "skip") != 0)
	{
		int			n = Min(nmissed, keep);
		int			first = strcmp(s->misfire, "run_once") == 0 ? n - 1 : 0;

		for (int i = first; i < n; i++)
		{
			TimestampTz mt = missed[(nmissed - n + i) % keep];

			if (FireOnce(s, mt, now, &last_job))
			{
				if (mt > last_fired)
					last_fired = mt;
				fired++;
				missed_fired++;
			}
		}
	}

	values[0] = Int64GetDatum(s->id);
	values[1] = TimestampTzGetDatum(t);
	nulls[1] = has_next ? ' ' : 'n';
	values[2] = TimestampTzGetDatum(last_fired);
	nulls[2] = fired > 0 ? ' ' : 'n';
	values[3] = Int64GetDatum(last_job);
	nulls[3] = fired > 0 ? ' ' : 'n';
	jobq_spi_exec(jobq_plan(&plan_fired,
							"UPDATE jobq.schedule SET next_fire_at = $2,"
							" last_fire_at = COALESCE($3, last_fire_at),"
							" last_job_id = COALESCE($4, last_job_id), updated_at = now()"
							" WHERE schedule_id = $1",
							4, types),
				  values, nulls, SPI_OK_UPDATE);
	if (nmissed > 0)
		ereport(LOG,
				(errmsg_plural("jobq: schedule \"%s\" missed %d fire time; misfire policy %s fired %d",
							   "jobq: schedule \"%s\" missed %d fire times; misfire policy %s fired %d",
							   nmissed, s->name, nmissed, s->misfire, missed_fired)));
	return fired;
}

/* One schedule's firing, as a unit (contain.c). */
typedef struct JobqFireUnit
{
	const JobqSchedule *s;
	TimestampTz now;
	int			fired;			/* out: jobs enqueued */
} JobqFireUnit;

/* Fire one locked, due schedule (SPI connected). */
static void
FireUnit(void *arg)
{
	JobqFireUnit *u = (JobqFireUnit *) arg;

	u->fired = FireSchedule(u->s, u->now, false);
}

/* skip's ids as an int8[] datum. */
static Datum
SkipArray(const JobqFireSkip *skip)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(skip->n, 1));

	for (int i = 0; i < skip->n; i++)
		elems[i] = Int64GetDatum(skip->ids[i]);
	return PointerGetDatum(construct_array(elems, skip->n, INT8OID, sizeof(int64),
										   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* skip's queues as a text[] datum. */
static Datum
SkipQueuesArray(const JobqFireSkip *skip)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(skip->nqueues, 1));

	for (int i = 0; i < skip->nqueues; i++)
		elems[i] = CStringGetTextDatum(skip->queues[i]);
	return PointerGetDatum(construct_array(elems, skip->nqueues, TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/* Add id to skip, whose memory lives in skip->cxt. */
static void
SkipAdd(JobqFireSkip *skip, int64 id)
{
	if (skip->n == skip->cap)
	{
		skip->cap = Max(16, skip->cap * 2);
		skip->ids = skip->ids == NULL ?
			MemoryContextAlloc(skip->cxt, sizeof(int64) * skip->cap) :
			repalloc(skip->ids, sizeof(int64) * skip->cap);
	}
	skip->ids[skip->n++] = id;
}

/* Is queue one of skip's? */
static bool
SkipHasQueue(const JobqFireSkip *skip, const char *queue)
{
	for (int i = 0; i < skip->nqueues; i++)
		if (strcmp(skip->queues[i], queue) == 0)
			return true;
	return false;
}

/* Add queue to skip (copied into skip->cxt). */
static void
SkipAddQueue(JobqFireSkip *skip, const char *queue)
{
	if (SkipHasQueue(skip, queue))
		return;
	if (skip->nqueues == skip->qcap)
	{
		skip->qcap = Max(8, skip->qcap * 2);
		skip->queues = skip->queues == NULL ?
			MemoryContextAlloc(skip->cxt, sizeof(char *) * skip->qcap) :
			repalloc(skip->queues, sizeof(char *) * skip->qcap);
	}
	skip->queues[skip->nqueues++] = MemoryContextStrdup(skip->cxt, queue);
}

/* Empty skip (its memory stays for reuse). */
void
jobq_fire_skip_reset(JobqFireSkip *skip)
{
	for (int i = 0; i < skip->nqueues; i++)
		pfree(skip->queues[i]);
	skip->nqueues = 0;
	skip->n = 0;
}

/*
 * Fire the due, unpaused schedules, up to JOBQ_SCHEDULE_BATCH of them, each
 * a unit of its own (jobq_run_unit_for): one schedule's error (a cron
 * expression or time zone that no longer parses, a queue that refuses the
 * job) is logged, rolls back that schedule's fire alone, and leaves it due
 * for the next round.  Schedules locked by someone else are skipped (SKIP
 * LOCKED), as are the ids and queues in *skip; those that fail now are
 * added to it, and so is the queue of one that waited for a lock in vain
 * (JOBQ_FIRE_LOCK_TIMEOUT_MS: a client holding a queue's row, one it is
 * creating, say, would cost every schedule of that queue the wait), so the
 * rest of the round leaves them out.  Under a budget (the worker's pass) it
 * stops when the budget is spent, after one fire at least.  SPI connected.
 * Returns the number of jobs enqueued; *more is set when the batch was full
 * or the budget stopped it; *next_due gets the earliest next fire time of
 * the schedules not skipped (0: none).
 */
int64
jobq_fire_due_schedules(TimestampTz *next_due, JobqFireSkip *skip, bool *more)
{
	Oid			types[4] = {TIMESTAMPTZOID, INT4OID, INT8ARRAYOID, TEXTARRAYOID};
	Datum		values[4];
	TimestampTz now = GetCurrentTimestamp();
	SPITupleTable *due;
	uint64		n;
	int64		fired = 0;
	bool		isnull;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(JOBQ_SCHEDULE_BATCH);
	values[2] = SkipArray(skip);
	values[3] = SkipQueuesArray(skip);
	jobq_spi_exec(jobq_plan(&plan_due,
							"SELECT " JOBQ_SCHEDULE_COLUMNS " FROM jobq.schedule"
							" WHERE NOT paused AND next_fire_at <= $1"
							" AND schedule_id <> ALL ($3) AND queue <> ALL ($4)"
							" ORDER BY next_fire_at LIMIT $2 FOR UPDATE SKIP LOCKED",
							4, types),
				  values, NULL, SPI_OK_SELECT);
	due = SPI_tuptable;
	n = SPI_processed;
	*more = n >= JOBQ_SCHEDULE_BATCH;
	for (uint64 i = 0; i < n; i++)
	{
		JobqSchedule s;
		JobqFireUnit u;
		char	   *unit;
		int			sqlerrcode;

		if (i > 0 && jobq_budget_spent())
		{
			/* the rest stay due (and locked until this step ends) */
			*more = true;
			break;
		}
		ScheduleFromTuple(due->vals[i], due->tupdesc, &s);
		if (SkipHasQueue(skip, s.queue))
			continue;
		u.s = &s;
		u.now = now;
		u.fired = 0;
		unit = psprintf("firing schedule \"%s\"", s.name);
		if (jobq_run_unit_for(unit, FireUnit, &u, JOBQ_FIRE_LOCK_TIMEOUT_MS, &sqlerrcode))
			fired += u.fired;
		else
		{
			SkipAdd(skip, s.id);
			if (sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE)
				SkipAddQueue(skip, s.queue);
		}
		pfree(unit);
	}

	if (next_due != NULL)
	{
		values[0] = SkipArray(skip);
		values[1] = SkipQueuesArray(skip);
		jobq_spi_exec(jobq_plan(&plan_next_fire,
								"SELECT min(next_fire_at) FROM jobq.schedule WHERE NOT paused"
								" AND schedule_id <> ALL ($1) AND queue <> ALL ($2)",
								2, &types[2]),
					  values, NULL, SPI_OK_SELECT);
		*next_due = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
													  SPI_tuptable->tupdesc, 1, &isnull));
		if (isnull)
			*next_due = 0;
	}
	return fired;
}

/*
 * Error out when one more schedule in queue (besides the one named name,
 * which is being updated) would exceed jobq.max_schedules, the quota of
 * each queue, or jobq.max_database_schedules, the cap of the database.
 * A queue's administrator can use up the quota of that queue only.
 */
static void
ScheduleCountCheck(Datum name, Datum queue)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;
	int64		in_queue;
	int64		in_database;

	values[0] = name;
	values[1] = queue;
	jobq_spi_exec(jobq_plan(&plan_schedule_count,
							"SELECT count(*) FILTER (WHERE queue = $2), count(*)"
							" FROM jobq.schedule WHERE name <> $1",
							2, types),
				  values, NULL, SPI_OK_SELECT);
	in_queue = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	in_database = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (in_queue >= jobq_max_schedules)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many schedules in queue \"%s\"",
						jobq_quote_arg(TextDatumGetCString(queue))),
				 errdetail_plural("The queue has %lld schedule; jobq.max_schedules is %d per queue.",
								  "The queue has %lld schedules; jobq.max_schedules is %d per queue.",
								  in_queue, (long long) in_queue, jobq_max_schedules),
				 errhint("Remove schedules of this queue with jobq.unschedule, or ask a superuser to raise jobq.max_schedules.")));
	if (in_database >= jobq_max_database_schedules)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many schedules"),
				 errdetail_plural("This database has %lld schedule; jobq.max_database_schedules is %d.",
								  "This database has %lld schedules; jobq.max_database_schedules is %d.",
								  in_database, (long long) in_database, jobq_max_database_schedules),
				 errhint("Remove schedules with jobq.unschedule, or ask a superuser to raise jobq.max_database_schedules.")));
}

/* The misfire argument, checked. */
static const char *
MisfireArg(FunctionCallInfo fcinfo, int argno)
{
	const char *misfire = jobq_name_arg(fcinfo, argno, "misfire", JOBQ_MAX_NAME_LEN, false);

	if (strcmp(misfire, "skip") != 0 && strcmp(misfire, "run_once") != 0 &&
		strcmp(misfire, "run_all") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("misfire must be skip, run_once or run_all"),
				 errdetail("The misfire policy given was \"%s\".", jobq_quote_arg(misfire)),
				 errhint("Use skip to fire none of the missed times, run_once to fire one job for the latest, or run_all to fire each of them.")));
	return misfire;
}

/*
 * jobq.schedule(name, cron, kind, payload, queue, timezone, misfire,
 *				 priority) -> schedule id
 *
 * Creates a schedule, or updates the one of that name; either way the next
 * fire time is the first one after now.
 */
Datum
jobq_schedule(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	Oid			types[10] = {TEXTOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID, TEXTOID,
	TEXTOID, INT4OID, TIMESTAMPTZOID, TEXTOID};
	Datum		values[10];
	char		nulls[10];
	const char *cron;
	char	   *current;
	const char *timezone;
	CronSpec	spec;
	pg_tz	   *tz;
	TimestampTz next;
	bool		has_next;
	int64		id;
	bool		isnull;

	memset(nulls, ' ', sizeof(nulls));
	values[9] = (Datum) 0;
	values[0] = CStringGetTextDatum(jobq_name_arg(fcinfo, 0, "name", jobq_max_name_length, false));
	cron = jobq_name_arg(fcinfo, 1, "cron", jobq_max_cron_length, false);
	values[2] = CStringGetTextDatum(jobq_name_arg(fcinfo, 2, "kind", jobq_max_name_length, false));
	if (PG_ARGISNULL(3))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("payload must not be null")));
	values[3] = JsonbPGetDatum(jobq_payload_arg(PG_GETARG_DATUM(3), "payload"));
	values[4] = CStringGetTextDatum(jobq_name_arg(fcinfo, 4, "queue", jobq_max_name_length, false));
	timezone = jobq_name_arg(fcinfo, 5, "timezone", jobq_max_name_length, false);
	values[6] = CStringGetTextDatum(MisfireArg(fcinfo, 6));
	if (PG_ARGISNULL(7))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("priority must not be null")));
	values[7] = PG_GETARG_DATUM(7);
	if (PG_GETARG_INT32(7) == PG_INT32_MIN)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("priority is out of range")));

	jobq_cron_parse_or_error(cron, &spec);
	tz = jobq_cron_timezone(timezone);
	values[1] = CStringGetTextDatum(cron);
	values[5] = CStringGetTextDatum(timezone);
	has_next = jobq_cron_next_time(&spec, GetCurrentTimestamp(), tz, &next);
	values[8] = TimestampTzGetDatum(next);
	nulls[8] = has_next ? ' ' : 'n';

	jobq_owner_begin(&saved);
	jobq_require(saved.caller, TextDatumGetCString(values[4]), JOBQ_CAP_ADMINISTER);
	/* re-scheduling an existing name also needs its current queue */
	(void) ScheduleRequire(saved.caller, values[0]);
	ScheduleCountCheck(values[0], values[4]);

	/*
	 * A schedule of that name another transaction made meanwhile (after the
	 * check, which did not see it) is taken over only within the queue
	 * checked: else the check runs again on it, and then the upsert
	 */
	jobq_spi_exec(jobq_plan(&plan_upsert,
							JOBQ_SCHEDULE_UPSERT " WHERE jobq.schedule.queue = $5"
							" RETURNING schedule_id",
							9, types),
				  values, nulls, SPI_OK_INSERT_RETURNING);
	if (SPI_processed == 0)
	{
		/*
		 * it is in another queue: that one must be the caller's too, and the
		 * update takes it only from there (moved again meanwhile: try again)
		 */
		current = ScheduleRequire(saved.caller, values[0]);
		values[9] = CStringGetTextDatum(current != NULL ? current : TextDatumGetCString(values[4]));
		jobq_spi_exec(jobq_plan(&plan_upsert_moved,
								JOBQ_SCHEDULE_UPSERT " WHERE jobq.schedule.queue = $10"
								" RETURNING schedule_id", 10, types),
					  values, nulls, SPI_OK_INSERT_RETURNING);
		if (SPI_processed == 0)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("schedule \"%s\" changed while it was scheduled",
							jobq_quote_arg(TextDatumGetCString(values[0]))),
					 errhint("Try again.")));
	}
	id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	jobq_owner_end(&saved);
	jobq_bgw_wake_worker_at_commit();
	PG_RETURN_INT64(id);
}

/*
 * Error out unless role administers the queue of the schedule named name, if
 * there is one; returns that queue (NULL: there is none).  The statements
 * that follow act on the schedule only in the queue returned: one moved or
 * made meanwhile, in a queue the caller may not administer, is left alone.
 * Of a name that does not exist unschedule, pause_schedule and
 * resume_schedule answer false (run_schedule 42704) to every role, so a
 * tenant's cleanup run twice does not fail; they tell only that no schedule
 * of that name exists.
 */
static char *
ScheduleRequire(Oid role, Datum name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	char	   *queue;

	values[0] = name;
	jobq_spi_exec(jobq_plan(&plan_schedule_queue,
							"SELECT queue FROM jobq.schedule WHERE name = $1",
							1, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return NULL;
	queue = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (!jobq_may(role, queue, JOBQ_CAP_ADMINISTER))
	{
		/* not naming its queue: the caller may not know of it */
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to administer the queue of schedule \"%s\"",
						jobq_quote_arg(TextDatumGetCString(name))),
				 errdetail("It belongs to a queue the role does not administer; schedule names are shared by every queue of the database."),
				 errhint("Choose another name, or ask an administrator of its queue.")));
	}
	return queue;
}

/*
 * Run statement sql of cache over the schedule named by argument 0, as the
 * extension owner, once the caller is found to administer its queue;
 * whether it touched a row.
 */
static bool
ScheduleStatement(FunctionCallInfo fcinfo, SPIPlanPtr *cache, const char *sql,
				  int expected)
{
	JobqSavedUser saved;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		done;
	char	   *queue;

	values[0] = CStringGetTextDatum(jobq_name_arg(fcinfo, 0, "name", jobq_max_name_length, false));
	jobq_owner_begin(&saved);
	queue = ScheduleRequire(saved.caller, values[0]);
	done = false;
	if (queue != NULL)
	{
		values[1] = CStringGetTextDatum(queue);
		jobq_spi_exec(jobq_plan(cache, sql, 2, types), values, NULL, expected);
		done = SPI_processed > 0;
	}
	jobq_owner_end(&saved);
	return done;
}

/* jobq.unschedule(name) -> boolean */
Datum
jobq_unschedule(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(ScheduleStatement(fcinfo, &plan_unschedule,
									 "DELETE FROM jobq.schedule WHERE name = $1 AND queue = $2",
									 SPI_OK_DELETE));
}

/* jobq.pause_schedule(name) -> boolean: it fires nothing until resumed */
Datum
jobq_pause_schedule(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(ScheduleStatement(fcinfo, &plan_pause,
									 "UPDATE jobq.schedule SET paused = true, updated_at = now()"
									 " WHERE name = $1 AND queue = $2",
									 SPI_OK_UPDATE));
}

/*
 * jobq.resume_schedule(name) -> boolean (whether the schedule exists)
 *
 * The fire times that passed while it was paused are missed: they are
 * dealt with now, per the misfire policy.
 */
Datum
jobq_resume_schedule(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		done = false;
	char	   *queue;

	values[0] = CStringGetTextDatum(jobq_name_arg(fcinfo, 0, "name", jobq_max_name_length, false));
	jobq_owner_begin(&saved);
	queue = ScheduleRequire(saved.caller, values[0]);
	if (queue == NULL)
	{
		jobq_owner_end(&saved);
		PG_RETURN_BOOL(false);
	}
	values[1] = CStringGetTextDatum(queue);
	jobq_spi_exec(jobq_plan(&plan_resume_lock,
							"WITH old AS (SELECT schedule_id, paused FROM jobq.schedule"
							" WHERE name = $1 AND queue = $2 FOR UPDATE)"
							" UPDATE jobq.schedule s SET paused = false, updated_at = now()"
							" FROM old WHERE s.schedule_id = old.schedule_id"
							" RETURNING s.schedule_id, s.name, s.cron, s.kind, s.payload, s.queue,"
							" s.timezone, s.misfire, s.priority, s.next_fire_at, s.last_fire_at,"
							" old.paused",
							2, types),
				  values, NULL, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed > 0)
	{
		JobqSchedule s;
		bool		isnull;
		bool		was_paused;

		ScheduleFromTuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, &s);
		was_paused = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 12, &isnull));
		(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 10, &isnull);
		if (was_paused && !isnull)
			FireSchedule(&s, GetCurrentTimestamp(), true);
		done = true;
	}
	jobq_owner_end(&saved);
	if (done)
		jobq_bgw_wake_worker_at_commit();
	PG_RETURN_BOOL(done);
}

/* jobq.run_schedules() -> jobs enqueued: fire due schedules now */
Datum
jobq_run_schedules(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	int64		fired = 0;
	JobqFireSkip skip = {0};
	bool		more;

	jobq_require_writable("jobq.run_schedules()");
	jobq_owner_begin(&saved);
	jobq_require(saved.caller, NULL, JOBQ_CAP_ADMINISTER);
	skip.cxt = CurrentMemoryContext;
	do
		fired += jobq_fire_due_schedules(NULL, &skip, &more);
	while (more);
	jobq_owner_end(&saved);
	PG_RETURN_INT64(fired);
}

/*
 * jobq.run_schedule(name) -> the id of the job it enqueued
 *
 * Fire the schedule now, paused or not, as an operator's extra run: the
 * job has the schedule's kind, payload, queue and priority, and a key of
 * its own ("jobq:schedule:ID:run:TIME") that no timed fire uses, so it
 * neither takes nor skips one; the schedule's next and last fire times stay
 * as they are.  Every call enqueues a job of its own.
 */
Datum
jobq_run_schedule(PG_FUNCTION_ARGS)
{
	JobqSavedUser saved;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	char	   *queue;
	JobqSchedule sched;
	JobqNewJob	job = {0};
	TimestampTz now = GetCurrentTimestamp();
	int64		job_id;
	bool		created;

	values[0] = CStringGetTextDatum(jobq_name_arg(fcinfo, 0, "name", jobq_max_name_length, false));
	jobq_owner_begin(&saved);
	queue = ScheduleRequire(saved.caller, values[0]);
	values[1] = CStringGetTextDatum(queue != NULL ? queue : "");
	jobq_spi_exec(jobq_plan(&plan_run_schedule,
							"SELECT " JOBQ_SCHEDULE_COLUMNS " FROM jobq.schedule"
							" WHERE name = $1 AND queue = $2",
							2, types),
				  values, NULL, SPI_OK_SELECT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("schedule \"%s\" does not exist", TextDatumGetCString(values[0])),
				 errhint("jobq.schedules lists the schedules you may see.")));
	ScheduleFromTuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, &sched);

	job.kind = sched.kind;
	job.payload = sched.payload;
	job.queue = sched.queue;
	job.priority = sched.priority;
	job.run_at = now;
	job.has_max_retries = false;
	job.max_retries = 0;
	job.concurrency_key = NULL;
	/* two calls within one microsecond: the second one's key gets a suffix */
	for (int attempt = 0;; attempt++)
	{
		job.key = psprintf(JOBQ_INTERNAL_KEY_PREFIX "schedule:%lld:run:%lld%s",
						   (long long) sched.id, (long long) now,
						   attempt == 0 ? "" : psprintf(":%d", attempt));
		jobq_enqueue_job(&job, now, &job_id, &created);
		if (created)
			break;
	}
	jobq_owner_end(&saved);
	PG_RETURN_INT64(job_id);
}
