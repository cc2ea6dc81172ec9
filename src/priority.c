/*-------------------------------------------------------------------------
 *
 * priority.c
 *	  Priority labels: low 0, medium 10, high 20, critical 30.
 *
 * Priorities are plain integers, higher runs first; the labels are names
 * for four of them.  Values between labels are allowed: their label is the
 * highest label at or below the value.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"

#include "args.h"

typedef struct JobqPriorityLabel
{
	const char *label;
	int32		value;
} JobqPriorityLabel;

/* In ascending order of value. */
static const JobqPriorityLabel jobq_priority_labels[] = {
	{"low", 0},
	{"medium", 10},
	{"high", 20},
	{"critical", 30},
};

#define JOBQ_N_PRIORITY_LABELS lengthof(jobq_priority_labels)

PG_FUNCTION_INFO_V1(jobq_priority);
PG_FUNCTION_INFO_V1(jobq_priority_label);

/* jobq.priority(label text) -> integer */
Datum
jobq_priority(PG_FUNCTION_ARGS)
{
	char	   *label = text_to_cstring(PG_GETARG_TEXT_PP(0));

	for (int i = 0; i < JOBQ_N_PRIORITY_LABELS; i++)
	{
		if (pg_strcasecmp(label, jobq_priority_labels[i].label) == 0)
			PG_RETURN_INT32(jobq_priority_labels[i].value);
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized priority label \"%s\"", jobq_quote_arg(label)),
			 errhint("Valid labels are low (0), medium (10), high (20) and critical (30).")));
	PG_RETURN_NULL();			/* not reached */
}

/* jobq.priority_label(priority integer) -> text */
Datum
jobq_priority_label(PG_FUNCTION_ARGS)
{
	int32		value = PG_GETARG_INT32(0);
	const char *label = jobq_priority_labels[0].label;

	for (int i = 0; i < JOBQ_N_PRIORITY_LABELS; i++)
	{
		if (value >= jobq_priority_labels[i].value)
			label = jobq_priority_labels[i].label;
	}
	PG_RETURN_TEXT_P(cstring_to_text(label));
}
