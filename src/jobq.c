/*-------------------------------------------------------------------------
 *
 * jobq.c
 *	  Module load: each unit's settings, hooks and shared memory.
 *
 * jobq belongs in shared_preload_libraries: it keeps per-queue claim
 * positions in shared memory (shmem/shm_queue.c) and runs its background
 * processes (bgw/launcher.c, bgw/worker.c, bgw/handler_proc.c).  Loaded any
 * other way the queue operations still work, scanning each queue from its
 * head, and nothing reaps or prunes unless jobq.reap() and jobq.prune() are
 * called.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "guc.h"
#include "jobq_limits.h"
#include "bgw/hooks.h"
#include "bgw/launcher.h"
#include "shmem/shm_bgw.h"
#include "shmem/shm_queue.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Define the settings; install the hooks and transaction callbacks; with
 * shared_preload_libraries, reserve shared memory and register the launcher.
 */
void
_PG_init(void)
{
	jobq_guc_init();
	if (process_shared_preload_libraries_in_progress)
		jobq_state_shmem_request();
	jobq_bgw_init();
	jobq_hooks_init();
	jobq_launcher_register();
	jobq_state_register_callbacks();
}
