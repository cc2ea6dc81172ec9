/*-------------------------------------------------------------------------
 *
 * guc.h
 *	  The settings of jobq (guc.c defines them all).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_GUC_H
#define JOBQ_GUC_H


extern int	jobq_max_payload_size;
extern int	jobq_max_result_size;
extern int	jobq_max_error_length;
extern int	jobq_max_details_length;
extern int	jobq_worker_gone_after_s;
extern int	jobq_max_app_workers;
extern int	jobq_max_name_length;
extern int	jobq_max_key_length;
extern int	jobq_max_cron_length;
extern int	jobq_max_schedules;
extern int	jobq_max_database_schedules;
extern int	jobq_max_batch;
extern bool jobq_async_claim;
extern int	jobq_idempotency_retention;
extern int	jobq_misfire_grace_s;
extern int	jobq_settle_lock_wait_ms;
extern int	jobq_pass_budget_ms;
extern int	jobq_misfire_max_fires;
extern int	jobq_executors;
extern char *jobq_databases;
extern char *jobq_handler_role;
extern int	jobq_naptime_ms;
extern int	jobq_reap_batch;
extern int	jobq_prune_interval_s;
extern int	jobq_prune_batch;
extern int	jobq_database_recheck_s;
extern int	jobq_max_workers;
extern int	jobq_max_databases;
extern int	jobq_max_tracked_queues;

extern void jobq_guc_init(void);

#endif							/* JOBQ_GUC_H */
