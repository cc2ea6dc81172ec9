/*-------------------------------------------------------------------------
 *
 * backoff.c
 *	  Retry delays: exponential backoff, capped, with jitter.
 *
 * The delay before retry n (n = retries already used, starting at 0) is
 *
 *		d = min(cap, base * 2^n) * (1 + jitter * u),  u uniform in [-1, 1)
 *
 * clamped to [0, cap].  Pure arithmetic, no PostgreSQL calls beyond types,
 * so it is easy to reason about its bounds.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "backoff.h"

/*
 * Delay in microseconds before the next attempt.  unit_random is a uniform
 * random number in [0, 1).
 */
int64
jobq_backoff_usecs(int64 base_us, int64 cap_us, double jitter,
				   int retry_count, double unit_random)
{
	double		delay;

	if (base_us <= 0 || cap_us <= 0)
		return 0;

	/* base * 2^n, without overflow: stop doubling at the cap */
	delay = (double) base_us;
	for (int i = 0; i < retry_count && delay < (double) cap_us; i++)
		delay *= 2.0;
	if (delay > (double) cap_us)
		delay = (double) cap_us;

	delay *= 1.0 + jitter * (2.0 * unit_random - 1.0);
	if (delay < 0.0)
		delay = 0.0;
	if (delay > (double) cap_us)
		delay = (double) cap_us;
	return (int64) delay;
}
