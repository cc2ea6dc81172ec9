/*-------------------------------------------------------------------------
 *
 * fuzz_cron.c
 *	  libFuzzer harness for src/cron/parse.c.
 *
 * Input: 8 bytes choosing a start time, the rest is the expression.  Any
 * input must parse or fail without crashing, reading out of bounds or
 * hanging, and whatever parses must keep these invariants:
 *
 *	- a failed parse leaves a non-empty, terminated message;
 *	- the next match is >= the start, matches, and is its own next match;
 *	- when it is less than an hour away, no second before it matches;
 *	- an @every fire is the next multiple of the period after the start.
 *
 * Build and run (test/cron/run.sh does this for FUZZ_SECONDS):
 *
 *		clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *			test/cron/fuzz_cron.c src/cron/parse.c -o fuzz_cron
 *		./fuzz_cron -max_total_time=60 test/cron/corpus
 *
 *-------------------------------------------------------------------------
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron/parse.h"

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Report a broken invariant and crash, so libFuzzer keeps the input. */
static void
fail(const char *what, const char *text, int64_t from, int64_t next)
{
	fprintf(stderr, "invariant broken: %s; expression \"%s\" from %lld next %lld\n",
			what, text, (long long) from, (long long) next);
	abort();
}

/* One fuzz input: parse, search, check the invariants. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		text[2 * CRON_MAX_TEXT_LEN];
	char		err[128];
	CronSpec	spec;
	uint64_t	raw = 0;
	int64_t		from;
	int64_t		next;
	size_t		n;

	if (size < 8)
		return 0;
	memcpy(&raw, data, 8);
	data += 8;
	size -= 8;
	n = size < sizeof(text) - 1 ? size : sizeof(text) - 1;
	memcpy(text, data, n);
	text[n] = '\0';

	/* mostly years 1900-2100, sometimes anywhere in the supported range */
	if (raw & 1)
		from = (int64_t) ((raw >> 1) % (uint64_t) (CRON_LOCAL_MAX - CRON_LOCAL_MIN)) +
			CRON_LOCAL_MIN;
	else
		from = (int64_t) ((raw >> 1) % (UINT64_C(200) * 366 * 86400)) -
			INT64_C(70) * 365 * 86400;

	if (!cron_parse(text, &spec, err, sizeof(err)))
	{
		if (err[0] == '\0' || strlen(err) >= sizeof(err))
			fail("empty error message", text, from, 0);
		return 0;
	}

	if (spec.every > 0)
	{
		if (spec.every > CRON_MAX_EVERY_SECS)
			fail("@every period too long", text, from, spec.every);
		if (cron_next_every(&spec, from, &next) &&
			(next <= from || next - from > spec.every || next % spec.every != 0))
			fail("@every fire is not the next multiple", text, from, next);
		return 0;
	}

	if (spec.seconds == 0 || spec.minutes == 0 || spec.hours == 0 ||
		spec.days == 0 || spec.months == 0 || spec.weekdays == 0 ||
		(spec.seconds >> 60) || (spec.minutes >> 60) || (spec.hours >> 24) ||
		(spec.days & 1) || (spec.months & 1) || (spec.months >> 13) ||
		(spec.weekdays >> 7))
		fail("a field set is empty or has bits out of range", text, from, 0);

	if (cron_next_local(&spec, from, &next))
	{
		int64_t		again;

		if (next < from)
			fail("next match before the start", text, from, next);
		if (!cron_matches_local(&spec, next))
			fail("next match does not match", text, from, next);
		if (!cron_next_local(&spec, next, &again) || again != next)
			fail("next match is not its own next match", text, from, next);
		if (next - from <= 3600)
		{
			for (int64_t t = from; t < next; t++)
			{
				if (cron_matches_local(&spec, t))
					fail("an earlier second matches", text, from, t);
			}
		}
	}
	else if (from < CRON_LOCAL_MAX - INT64_C(401) * 366 * 86400 &&
			 cron_matches_local(&spec, from))
		fail("no match found though the start matches", text, from, 0);
	return 0;
}
