/*-------------------------------------------------------------------------
 *
 * plan_defaults.h
 *	  jobq.enqueue's default arguments, decoded once for the planner
 *	  (plan_defaults.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef JOBQ_PLAN_DEFAULTS_H
#define JOBQ_PLAN_DEFAULTS_H

extern void jobq_plan_defaults_init(void);

#endif							/* JOBQ_PLAN_DEFAULTS_H */
