/*-------------------------------------------------------------------------
 *
 * shmem/shm_bgw.h
 *	  The shared memory of jobq's background processes (shmem/shm_bgw.c): one
 *	  slot per database with its worker and executors.
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_SHM_BGW_H
#define JOBQ_SHM_BGW_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "port/atomics.h"
#include "storage/lwlock.h"

#include "contain.h"
#include "jobq_limits.h"

/* One database the launcher knows about. */
typedef struct JobqDbSlot
{
	Oid			dbid;			/* InvalidOid: slot is free */
	pid_t		pid;			/* the worker's pid while it runs, else 0 */
	Latch	   *latch;			/* the worker's latch while it runs */
	bool		has_jobq;		/* a worker found the extension here */
	TimestampTz started_at;		/* when the worker started */
	TimestampTz last_start;		/* when the launcher last started one */
	TimestampTz last_cycle_at;	/* when the worker last finished a cycle */
	TimestampTz no_extension_at;	/* a worker found no jobq here then */
	TimestampTz blocked_until;	/* a command needs the database alone */
	TimestampTz wake_at;		/* a CREATE EXTENSION jobq committed then */
	int64		reaped;			/* expired leases reaped since start */
	int64		pruned;			/* rows pruned since start */
	int64		fired;			/* schedule fires since start */

	/*
	 * The shared pool (databases outnumber jobq.max_workers): a worker serves
	 * the database for one pass and exits.  The pass leaves when the database
	 * needs one next (next_due_at: the next schedule fire, lease expiry,
	 * prune or delayed handler job; 0: at once), claims lower lease_due (the
	 * earliest lease they took, 0: none), and a commit that changed a
	 * schedule or made handler jobs ready sets poke_at: the database is due
	 * when poke_at is after its last worker's started_at.
	 */
	bool		pass_worker;	/* the running worker serves one pass */
	bool		has_handlers;	/* the last pass found job handlers here */
	bool		late_warned;	/* a WARNING said the database waits */
	bool		executors_wanted;	/* handler jobs wait; the budget was full */
	bool		orphans_ended;	/* a worker ended the leases of executors gone
								 * with the server (ops/reaper.c) */
	TimestampTz next_due_at;
	TimestampTz last_prune_at;
	TimestampTz poke_at;
	TimestampTz late_since;		/* due and not served since (0: on time) */
	pg_atomic_uint64 lease_due;

	/*
	 * The units of background work failing here (contain.c), kept across the
	 * shared pool's passes so that each is logged once per cause, not once a
	 * pass: a 64-bit hash of the unit's name (0: free), the SQLSTATE it last
	 * failed with, when it last failed.  A unit that works again gives its
	 * place back, one not seen failing for ten minutes gives it up.  While
	 * all are taken, the failures of other units are logged at most once a
	 * minute (failed_overflow_at: the last one).
	 */
	uint64		failed_unit[JOBQ_FAILED_UNITS_KEPT];
	int			failed_code[JOBQ_FAILED_UNITS_KEPT];
	TimestampTz failed_at[JOBQ_FAILED_UNITS_KEPT];
	TimestampTz failed_overflow_at;

	/*
	 * Where pruning's last batch ran out of its limit (ops/retention.c): the
	 * (queue, status) pair the next batch starts after, for the worker's
	 * passes and jobq.prune() alike ("" : from the first queue).
	 */
	char		prune_turn_queue[JOBQ_MAX_NAME_LEN + 1];
	char		prune_turn_status[JOBQ_STATUS_SIZE];

	/*
	 * The executors, by place: each one's pid (0: none runs there) and latch;
	 * the job it runs (0: none) with that job's lease at claim; when
	 * jobq.cancel interrupted it (0: not); whether the launcher sent SIGTERM
	 * for that job; and the role whose jobs it claims or runs (0: none).
	 */
	pid_t		executor_pid[JOBQ_MAX_EXECUTORS];
	Latch	   *executor_latch[JOBQ_MAX_EXECUTORS];
	int64		executor_job[JOBQ_MAX_EXECUTORS];
	TimestampTz executor_deadline[JOBQ_MAX_EXECUTORS];
	TimestampTz executor_cancel_at[JOBQ_MAX_EXECUTORS];
	bool		executor_terminated[JOBQ_MAX_EXECUTORS];
	Oid			executor_role[JOBQ_MAX_EXECUTORS];
} JobqDbSlot;

/* State shared by the launcher, the workers and every backend. */
typedef struct JobqBgwShared
{
	pid_t		launcher_pid;	/* 0 when no launcher runs */
	Latch	   *launcher_latch; /* to wake the launcher */
	TimestampTz launcher_started_at;
	TimestampTz launcher_cycle_at;	/* when it last looked at pg_database */
	bool		pool_mode;		/* databases outnumber jobq.max_workers */
	bool		dbs_waiting;	/* a database due found no place last cycle */
	int			nslots;
	JobqDbSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} JobqBgwShared;

/* NULL unless jobq is preloaded; JobqBgwLock guards all of it. */
extern JobqBgwShared *JobqBgw;
extern LWLock *JobqBgwLock;

extern void jobq_bgw_init(void);
extern void jobq_bgw_init_struct(BackgroundWorker *bgw, const char *function_name);
extern void jobq_bgw_connect(Oid dbid, const char *appname);
extern void jobq_bgw_worker_settings(void);

/* executors */
extern bool jobq_bgw_executor_attach(int index);
extern void jobq_bgw_executor_set_job(int64 job_id, TimestampTz deadline);
extern bool jobq_bgw_executor_take_share(Oid role, int nroles);
extern bool jobq_bgw_executor_should_leave(void);
extern int	jobq_bgw_executor_pids(pid_t *pids);

/* the budget of jobq.max_workers (JobqBgwLock held) */
extern int	jobq_bgw_processes(void);
extern bool jobq_bgw_executor_room(int starting);
extern void jobq_bgw_slot_reset(JobqDbSlot *slot, Oid dbid);

/* the failing units of a database's background work (contain.c) */
extern JobqUnitNoted jobq_bgw_unit_failed(int index, uint64 unit, int sqlerrcode);
extern bool jobq_bgw_unit_works(int index, uint64 unit);
extern int	jobq_bgw_prune_turn(char *queue, char *status);
extern void jobq_bgw_set_prune_turn(const char *queue, const char *status);
extern bool jobq_bgw_unit_failing(int index, uint64 unit);

/* a claim took leases ending at expires */
extern void jobq_bgw_note_lease(TimestampTz expires);

/* waking and interrupting, from any backend */
extern void jobq_bgw_wake_executors(Oid dbid);
extern void jobq_bgw_interrupt_job(int64 job_id);
extern void jobq_bgw_block_database(Oid dbid, bool block);
extern void jobq_bgw_wake_worker_at_commit(void);
extern void jobq_bgw_wake_launcher_at_commit(void);

#endif							/* JOBQ_SHM_BGW_H */
