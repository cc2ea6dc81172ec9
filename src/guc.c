/*-------------------------------------------------------------------------
 *
 * guc.c
 *	  Every setting (GUC) of jobq, defined in one place.
 *
 * The variables are read by the units that use them (guc.h).  Settings
 * that size shared memory exist only when jobq is preloaded.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "guc.h"
#include "jobq_limits.h"

/* jobq.max_payload_size: largest payload (bytes); results: max_result_size */
int			jobq_max_payload_size = 1024 * 1024;

/* jobq.max_result_size: largest result or checkpoint (bytes) */
int			jobq_max_result_size = 1024 * 1024;

/* jobq.max_error_length: longer error texts are truncated (bytes) */
int			jobq_max_error_length = 8192;
int			jobq_max_details_length = 16384;
int			jobq_worker_gone_after_s = 60;

/* jobq.max_app_workers: most application workers one role may register */
int			jobq_max_app_workers = 1000;

/* jobq.max_name_length / max_key_length: longest names and keys (bytes) */
int			jobq_max_name_length = JOBQ_MAX_NAME_LEN;
int			jobq_max_key_length = JOBQ_MAX_KEY_LEN;

/* jobq.max_cron_length: longest cron expression (bytes) */
int			jobq_max_cron_length = 256;

/* jobq.max_schedules: most schedules per queue */
int			jobq_max_schedules = 10000;

/* jobq.max_database_schedules: most schedules per database */
int			jobq_max_database_schedules = 100000;

/* jobq.max_batch: most jobs one claim or complete_many may handle */
int			jobq_max_batch = 1000;

/* jobq.async_claim: a transaction that only claimed commits asynchronously (queue/claim.c) */
bool		jobq_async_claim = true;

/* jobq.idempotency_retention: how long a key stays reserved after its job finished (s) */
int			jobq_idempotency_retention = 7 * 24 * 3600;

/* jobq.misfire_grace / misfire_max_fires: schedules (ops/scheduler.c) */
int			jobq_misfire_grace_s = 5;
int			jobq_misfire_max_fires = 100;

/* Background processes (bgw/launcher.c, bgw/worker.c, bgw/handler_proc.c) */
int			jobq_executors = 2;
char	   *jobq_databases = NULL;

/* the role of the job handler running in this executor, as an oid; '' outside */
char	   *jobq_handler_role = NULL;
int			jobq_naptime_ms = 1000;
int			jobq_settle_lock_wait_ms = 10;
int			jobq_pass_budget_ms = 200;
int			jobq_reap_batch = 500;
int			jobq_prune_interval_s = 60;
int			jobq_prune_batch = 500;
int			jobq_database_recheck_s = 60;
int			jobq_max_workers = 4;

/* Shared memory sizes (shmem/shm_bgw.c, shmem/shm_queue.c); postmaster start only */
int			jobq_max_databases = 1024;
int			jobq_max_tracked_queues = 1024;

/* Define every jobq.* setting (from _PG_init). */
void
jobq_guc_init(void)
{
	DefineCustomIntVariable("jobq.max_payload_size",
							"Largest payload a job may carry.",
							NULL,
							&jobq_max_payload_size,
							1024 * 1024, 2, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_result_size",
							"Largest result or checkpoint a job may store.",
							NULL,
							&jobq_max_result_size,
							1024 * 1024, 2, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_error_length",
							"Error texts passed to jobq.fail are truncated to this many bytes.",
							NULL,
							&jobq_max_error_length,
							8192, 64, 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_details_length",
							"Details (a stack trace) passed to jobq.fail are truncated to this many bytes.",
							NULL,
							&jobq_max_details_length,
							16384, 64, 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.worker_gone_after",
							"An application worker not seen for this long is shown as gone in jobq.app_workers.",
							"Its row is pruned a day after it was last seen.",
							&jobq_worker_gone_after_s,
							60, 1, 86400,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_app_workers",
							"Most application workers one role may have in jobq.app_workers, per database.",
							"Beyond it a new worker takes the place of the role's worker gone longest, or is refused when none is gone.",
							&jobq_max_app_workers,
							1000, 1, 1000000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_name_length",
							"Longest kind, queue, worker id or schedule name.",
							NULL,
							&jobq_max_name_length,
							JOBQ_MAX_NAME_LEN, 1, JOBQ_MAX_NAME_LEN,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_key_length",
							"Longest idempotency key or concurrency key.",
							NULL,
							&jobq_max_key_length,
							JOBQ_MAX_KEY_LEN, 1, JOBQ_MAX_KEY_LEN,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_cron_length",
							"Longest cron expression.",
							NULL,
							&jobq_max_cron_length,
							256, 9, 256,
							PGC_SUSET, GUC_UNIT_BYTE,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_schedules",
							"Most schedules in one queue.",
							"Each queue has this quota, so that one queue's administrator cannot use up another's.",
							&jobq_max_schedules,
							10000, 1, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_database_schedules",
							"Most schedules in one database, all queues together.",
							NULL,
							&jobq_max_database_schedules,
							100000, 1, INT_MAX,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.max_batch",
							"Most jobs that one jobq.claim or jobq.complete_many call may handle.",
							NULL,
							&jobq_max_batch,
							1000, 1, 100000,
							PGC_SUSET, 0,
							NULL, NULL, NULL);
	DefineCustomBoolVariable("jobq.async_claim",
							 "Let a transaction that did nothing but claim jobs commit without waiting for its WAL flush.",
							 "A claim lost in a crash is a lease that expired at once: the job is pending again and the lost lease's token is refused.",
							 &jobq_async_claim,
							 true,
							 PGC_USERSET, 0,
							 NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.idempotency_retention",
							"How long an idempotency key stays reserved after its job finished, even if the job is pruned earlier.",
							"-1 keeps keys for ever.",
							&jobq_idempotency_retention,
							7 * 24 * 3600, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("jobq.settle_lock_wait",
							"How long settling a finished job's dependents waits for a dependent another transaction holds.",
							"Another settle commits in that time; a dependent held longer is left to the background worker. 0: never wait.",
							&jobq_settle_lock_wait_ms,
							10, 0, 1000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("jobq.pass_budget",
							"How long a jobq worker's pass may spend on work other than reaping leases and firing schedules.",
							"Settling deferred dependents, cascades, pruning and the rest stop when it is spent and resume next pass.",
							&jobq_pass_budget_ms,
							200, 10, 60000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("jobq.misfire_grace",
							"How late a schedule's fire may be and still count as on time.",
							"Later fires are missed and follow the schedule's misfire policy.",
							&jobq_misfire_grace_s,
							5, 0, 86400,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.misfire_max_fires",
							"Most missed fire times a run_all schedule enqueues at once (the latest ones).",
							NULL,
							&jobq_misfire_max_fires,
							100, 1, 100000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("jobq.handler_role",
							   "The role the job handler running in this process acts as (an oid; set by jobq).",
							   "Empty outside a handler.  jobq's views read it to ask about the handler's role inside a superuser's SECURITY DEFINER function the handler calls.",
							   &jobq_handler_role, "",
							   PGC_INTERNAL, GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE,
							   NULL, NULL, NULL);
	DefineCustomStringVariable("jobq.databases",
							   "Databases the jobq background workers serve, comma-separated.",
							   "Empty: every database where the jobq extension is installed.",
							   &jobq_databases, "",
							   PGC_SIGHUP, GUC_LIST_INPUT, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.executors",
							"Executor processes per database that has job handlers.",
							"They run jobs of kinds registered with jobq.register_handler.",
							&jobq_executors, 2, 0, JOBQ_MAX_EXECUTORS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.naptime",
							"How soon a jobq worker tries again what failed or was locked.",
							"An idle worker sleeps until its next lease expiry, schedule fire or prune, 10 times this at most.",
							&jobq_naptime_ms, 1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.reap_batch",
							"Most expired leases a jobq worker reaps in one transaction.",
							NULL, &jobq_reap_batch, 500, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.prune_interval",
							"How often a jobq worker prunes finished jobs and expired idempotency keys.",
							NULL, &jobq_prune_interval_s, 60, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.prune_batch",
							"Most rows a jobq worker prunes in one transaction.",
							NULL, &jobq_prune_batch, 500, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("jobq.database_recheck_interval",
							"How often the jobq launcher looks again at a database where jobq was not installed.",
							"CREATE EXTENSION jobq wakes the launcher at once; this covers other ways in.",
							&jobq_database_recheck_s, 60, 1, 86400,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);

	DefineCustomIntVariable("jobq.max_workers",
							"Most jobq processes (database workers and executors) serving the databases of the cluster.",
							"When databases outnumber it, the workers serve them in turn, one pass at a time; the launcher is not counted. Each needs a max_worker_processes slot.",
							&jobq_max_workers, 4, 1, 1024,
							PGC_SIGHUP, 0, NULL, NULL, NULL);

	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("jobq.max_databases",
								"Most databases the jobq launcher keeps track of.",
								NULL, &jobq_max_databases, 1024, 1, 100000,
								PGC_POSTMASTER, 0, NULL, NULL, NULL);

		DefineCustomIntVariable("jobq.max_tracked_queues",
								"Number of queues, of all databases, whose claim positions are kept in shared memory.",
								"Queues beyond this number still work; their claims scan from the head of the queue, and their waiting claims poll.",
								&jobq_max_tracked_queues,
								1024, 16, 1000000,
								PGC_POSTMASTER, 0,
								NULL, NULL, NULL);
	}
	MarkGUCPrefixReserved("jobq");
}
