/*-------------------------------------------------------------------------
 *
 * jobq.c
 *	  Module load: GUCs, shared memory, transaction callbacks.
 *
 * jobq belongs in shared_preload_libraries: it keeps per-queue claim
 * positions in shared memory (queue_state.c) and runs its background
 * workers (worker.c).  Loaded any other way the queue operations still
 * work, scanning each queue from its head, and nothing reaps or prunes
 * unless jobq.reap() and jobq.prune() are called.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "jobq.h"

PG_MODULE_MAGIC;

/* jobq.max_payload_size: largest payload (bytes); results: max_result_size */
int			jobq_max_payload_size = 1024 * 1024;

/* jobq.max_result_size: largest result or checkpoint (bytes) */
int			jobq_max_result_size = 1024 * 1024;

/* jobq.max_error_length: longer error texts are truncated (bytes) */
int			jobq_max_error_length = 8192;

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

/* jobq.idempotency_retention: how long a key stays reserved after its job finished (s) */
int			jobq_idempotency_retention = 7 * 24 * 3600;

void		_PG_init(void);

/* Define GUCs; with shared_preload_libraries, set up shared memory too. */
void
_PG_init(void)
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
	DefineCustomIntVariable("jobq.idempotency_retention",
							"How long an idempotency key stays reserved after its job finished, even if the job is pruned earlier.",
							"-1 keeps keys for ever.",
							&jobq_idempotency_retention,
							7 * 24 * 3600, -1, INT_MAX,
							PGC_SUSET, GUC_UNIT_S,
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

	if (process_shared_preload_libraries_in_progress)
		jobq_state_shmem_request();
	jobq_worker_init();
	MarkGUCPrefixReserved("jobq");

	jobq_state_register_callbacks();
}
