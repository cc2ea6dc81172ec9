/*-------------------------------------------------------------------------
 *
 * unit.c
 *	  Unit tests of src/cron/parse.c alone (no PostgreSQL).
 *
 * Built with a plain C compiler by test/cron/run.sh:
 *
 *		cc -Isrc -o unit test/cron/unit.c src/cron/parse.c && ./unit
 *
 * Tables of expressions with the sets they must parse to, of bad
 * expressions with the message they must give, and of searches with the
 * wall-clock time they must find; then a self-check of the field-skipping
 * search against a minute-by-minute scan on random expressions.  Prints
 * each failure with what differed and ends with "N passed, N failed".
 *
 *-------------------------------------------------------------------------
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron/parse.h"

static int	passed;
static int	failed;

/* Record one check; print what differed when it fails. */
static void
check(int ok, const char *what, const char *detail)
{
	if (ok)
		passed++;
	else
	{
		failed++;
		printf("FAIL: %s: %s\n", what, detail);
	}
}

/* Bitset of the numbers in a comma-separated list such as "0,15,30,45". */
static uint64_t
bits_of(const char *list)
{
	uint64_t	bits = 0;
	const char *p = list;

	while (*p)
	{
		char	   *end;
		long		v = strtol(p, &end, 10);

		bits |= UINT64_C(1) << v;
		p = (*end == ',') ? end + 1 : end;
	}
	return bits;
}

/* Local seconds of "YYYY-MM-DD HH:MM:SS". */
static int64_t
local_of(const char *s)
{
	CronTime	tm;
	long long	y;

	if (sscanf(s, "%lld-%d-%d %d:%d:%d", &y, &tm.month, &tm.day, &tm.hour,
			   &tm.minute, &tm.second) != 6)
	{
		printf("bad test time \"%s\"\n", s);
		exit(2);
	}
	tm.year = y;
	return cron_local_from_time(&tm);
}

/* "YYYY-MM-DD HH:MM:SS" of local seconds, in a static buffer. */
static const char *
text_of(int64_t local, char *buf, size_t len)
{
	CronTime	tm;

	cron_time_from_local(local, &tm);
	snprintf(buf, len, "%04lld-%02d-%02d %02d:%02d:%02d",
			 (long long) tm.year, tm.month, tm.day, tm.hour, tm.minute,
			 tm.second);
	return buf;
}

/* Expressions that parse, with the sets they must give ("" = don't care). */
static const struct
{
	const char *text;
	const char *seconds;
	const char *minutes;
	const char *hours;
	const char *days;
	const char *months;
	const char *weekdays;
	int			dom_star;
	int			dow_star;
}			parse_ok[] = {
	{"* * * * *", "0", "", "", "", "", "0,1,2,3,4,5,6", 1, 1},
	{"*/15 * * * *", "0", "0,15,30,45", "", "", "", "", 1, 1},
	{"10-50/5 * * * *", "0", "10,15,20,25,30,35,40,45,50", "", "", "", "", 1, 1},
	{"5/20 * * * *", "0", "5,25,45", "", "", "", "", 1, 1},
	{"0 0,12 * * *", "0", "0", "0,12", "", "", "", 1, 1},
	{"0 9-17/4 * * *", "0", "0", "9,13,17", "", "", "", 1, 1},
	{"30 */15 * * * *", "30", "0,15,30,45", "", "", "", "", 1, 1},
	{"0-59/30 0 0 1 1 *", "0,30", "0", "0", "1", "1", "", 0, 1},
	{"0 0 1,15,31 * *", "0", "0", "0", "1,15,31", "", "", 0, 1},
	{"0 0 * JAN-MAR,dec *", "0", "0", "0", "", "1,2,3,12", "", 1, 1},
	{"0 0 * * MON-FRI", "0", "0", "0", "", "", "1,2,3,4,5", 1, 0},
	{"0 0 * * mon,Wed,FRI", "", "", "", "", "", "1,3,5", 1, 0},
	{"0 0 * * 7", "", "", "", "", "", "0", 1, 0},
	{"0 0 * * 0", "", "", "", "", "", "0", 1, 0},
	{"0 0 * * 5-7", "", "", "", "", "", "0,5,6", 1, 0},
	{"0 0 * * FRI-SUN", "", "", "", "", "", "0,5,6", 1, 0},
	{"0 0 * * SUN-TUE", "", "", "", "", "", "0,1,2", 1, 0},
	{"0 0 * * SUN", "", "", "", "", "", "0", 1, 0},
	{"0 0 * * */2", "", "", "", "", "", "0,2,4,6", 1, 1},
	{"0 0 * * 1/2", "", "", "", "", "", "0,1,3,5", 1, 0},
	{"0 0 */2 * 1", "", "", "", "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31", "", "1", 1, 0},
	{"0 0 13 * FRI", "", "", "", "13", "", "5", 0, 0},
	{"  0   0\t* *  *  ", "0", "0", "0", "", "", "", 1, 1},
	{"@hourly", "0", "0", "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23", "", "", "", 1, 1},
	{"@daily", "0", "0", "0", "", "", "", 1, 1},
	{"@MIDNIGHT", "0", "0", "0", "", "", "", 1, 1},
	{"@weekly", "0", "0", "0", "", "", "0", 1, 0},
	{"@monthly", "0", "0", "0", "1", "", "", 0, 1},
	{"@yearly", "0", "0", "0", "1", "1", "", 0, 1},
	{"@annually", "0", "0", "0", "1", "1", "", 0, 1},
};

/* @every intervals and their length in seconds. */
static const struct
{
	const char *text;
	int64_t		secs;
}			every_ok[] = {
	{"@every 5m", 300},
	{"@every 90s", 90},
	{"@every 1h30m", 5400},
	{"@every 2 hours", 7200},
	{"@every 1 hour 30 minutes", 5400},
	{"@EVERY 1D", 86400},
	{"@every 1w", 604800},
	{"@every 1s", 1},
	{"@every 3650d", INT64_C(3650) * 86400},
};

/* Bad expressions and a piece of the message they must give. */
static const struct
{
	const char *text;
	const char *message;
}			parse_bad[] = {
	{"", "expression is empty"},
	{"   ", "expression is empty"},
	{"* * * *", "expected 5 or 6 fields, found 4"},
	{"* * * * * * *", "expected 5 or 6 fields, found 7"},
	{"60 * * * *", "minute field \"60\": 60 is out of range (0-59)"},
	{"* 24 * * *", "hour field \"24\": 24 is out of range (0-23)"},
	{"* * 0 * *", "day-of-month field \"0\": 0 is out of range (1-31)"},
	{"* * 32 * *", "day-of-month field \"32\": 32 is out of range (1-31)"},
	{"* * * 13 *", "month field \"13\": 13 is out of range (1-12)"},
	{"* * * * 8", "day-of-week field \"8\": 8 is out of range (0-7)"},
	{"60 * * * * *", "second field \"60\""},
	{"0 0 * * MON-XYZ", "day-of-week field \"MON-XYZ\": unrecognized name \"XYZ\""},
	{"0 0 * FOO *", "month field \"FOO\": unrecognized name \"FOO\""},
	{"0 0 * * MONDAY", "unrecognized name \"MONDAY\""},
	{"abc * * * *", "minute field \"abc\": \"abc\" is not a number"},
	{"0 0 * JAN-MON *", "unrecognized name \"MON\""},
	{"50-10 * * * *", "minute field \"50-10\": range 50-10 goes backwards"},
	{"*/0 * * * *", "step 0 is out of range (1-59)"},
	{"*/60 * * * *", "step 60 is out of range (1-59)"},
	{"*/2147483648 * * * *", "step 2147483648 is out of range (1-59)"},
	{"*/ * * * *", "a step must be a number"},
	{"1,,2 * * * *", "minute field \"1,,2\": empty list element"},
	{"1, * * * *", "empty list element"},
	{",1 * * * *", "empty list element"},
	{"1- * * * *", "a value is missing"},
	{"-1 * * * *", "unexpected \"-\""},
	{"1-2-3 * * * *", "unexpected \"-3\""},
	{"** * * * *", "unexpected \"*\""},
	{"0 0 L * *", "day-of-month field \"L\": \"L\" and \"W\" are not supported"},
	{"0 0 15W * *", "field \"15W\": \"L\" and \"W\" are not supported"},
	{"0 0 LW * *", "field \"LW\": \"L\" and \"W\" are not supported"},
	{"0 0 * * 5L", "day-of-week field \"5L\": \"L\" and \"W\" are not supported"},
	{"0 0 * * 5#3", "day-of-week field \"5#3\": \"#\" (nth weekday) is not supported"},
	{"0 0 ? * MON", "day-of-month field \"?\": \"?\" is not supported, use \"*\""},
	{"0 0 * * ?", "\"?\" is not supported"},
	{"@reboot", "@reboot is not supported"},
	{"@often", "unrecognized macro \"@often\""},
	{"@daily 5", "@daily takes no arguments"},
	{"@every", "@every needs an interval"},
	{"@every 5", "a unit is missing after \"5\""},
	{"@every 5 fortnights", "unrecognized unit \"fortnights\""},
	{"@every 1.5h", "fractions are not supported"},
	{"@every 0s", "must be at least 1 second"},
	{"@every 3651d", "longer than 3650 days"},
	{"@every 99999999999999999999999h", "longer than 3650 days"},
	{"@every m", "expected a number"},
	{"99999999999 * * * *", "is out of range (0-59)"},
	{"0 0 * * \x01", "unexpected byte 0x01"},
};

/* Searches: expression, start (inclusive), expected first match or "none". */
static const struct
{
	const char *text;
	const char *from;
	const char *expect;
}			search[] = {
	{"* * * * *", "2024-01-01 00:00:00", "2024-01-01 00:00:00"},
	{"* * * * *", "2024-01-01 00:00:01", "2024-01-01 00:01:00"},
	{"*/15 * * * *", "2024-01-01 00:16:00", "2024-01-01 00:30:00"},
	{"0 0 * * *", "2024-12-31 00:00:01", "2025-01-01 00:00:00"},
	{"0 0 31 * *", "2024-04-01 00:00:00", "2024-05-31 00:00:00"},
	{"0 0 29 2 *", "2024-03-01 00:00:00", "2028-02-29 00:00:00"},
	{"0 0 29 2 *", "2096-03-01 00:00:00", "2104-02-29 00:00:00"},
	{"0 0 29 2 */7", "2024-01-01 00:00:00", "2032-02-29 00:00:00"},
	{"0 0 29 2 1", "2024-01-01 00:00:00", "2024-02-05 00:00:00"},
	{"0 0 29 2 1", "2024-02-27 00:00:00", "2024-02-29 00:00:00"},
	{"0 0 13 * 5", "2024-01-02 00:00:00", "2024-01-05 00:00:00"},
	{"0 0 13 * */7", "2024-01-01 00:00:00", "2024-10-13 00:00:00"},
	{"0 0 * * MON-FRI", "2024-06-08 12:00:00", "2024-06-10 00:00:00"},
	{"0 0 30 2 *", "2024-01-01 00:00:00", "none"},
	{"0 0 31 4,6,9,11 *", "2024-01-01 00:00:00", "none"},
	{"59 59 23 31 12 *", "2024-01-01 00:00:00", "2024-12-31 23:59:59"},
	{"59 59 23 31 12 *", "2024-12-31 23:59:59", "2024-12-31 23:59:59"},
	{"0 0 1 1 *", "-0001-06-01 00:00:00", "0000-01-01 00:00:00"},
	{"0 12 29 2 *", "1896-03-01 00:00:00", "1904-02-29 12:00:00"},
	{"@yearly", "294276-06-01 00:00:00", "294277-01-01 00:00:00"},
};

/* Check that every table expression parses to the sets it should. */
static void
test_parse_ok(void)
{
	char		err[256];
	char		detail[512];

	for (size_t i = 0; i < sizeof(parse_ok) / sizeof(parse_ok[0]); i++)
	{
		CronSpec	s;
		int			ok = cron_parse(parse_ok[i].text, &s, err, sizeof(err));

		snprintf(detail, sizeof(detail), "\"%s\" did not parse: %s",
				 parse_ok[i].text, err);
		check(ok, "parse", detail);
		if (!ok)
			continue;
		snprintf(detail, sizeof(detail), "\"%s\" parsed to other sets: "
				 "s=%" PRIx64 " m=%" PRIx64 " h=%x d=%x mon=%x w=%x stars=%d,%d",
				 parse_ok[i].text, s.seconds, s.minutes, s.hours, s.days,
				 s.months, s.weekdays, s.dom_star, s.dow_star);
		check((!*parse_ok[i].seconds || s.seconds == bits_of(parse_ok[i].seconds)) &&
			  (!*parse_ok[i].minutes || s.minutes == bits_of(parse_ok[i].minutes)) &&
			  (!*parse_ok[i].hours || s.hours == bits_of(parse_ok[i].hours)) &&
			  (!*parse_ok[i].days || s.days == bits_of(parse_ok[i].days)) &&
			  (!*parse_ok[i].months || s.months == bits_of(parse_ok[i].months)) &&
			  (!*parse_ok[i].weekdays || s.weekdays == bits_of(parse_ok[i].weekdays)) &&
			  s.dom_star == parse_ok[i].dom_star &&
			  s.dow_star == parse_ok[i].dow_star && s.every == 0,
			  "parse sets", detail);
	}

	for (size_t i = 0; i < sizeof(every_ok) / sizeof(every_ok[0]); i++)
	{
		CronSpec	s;
		int			ok = cron_parse(every_ok[i].text, &s, err, sizeof(err));

		snprintf(detail, sizeof(detail), "\"%s\": ok=%d every=%" PRId64
				 " (want %" PRId64 ") %s", every_ok[i].text, ok, s.every,
				 every_ok[i].secs, ok ? "" : err);
		check(ok && s.every == every_ok[i].secs, "@every", detail);
	}
}

/* Check that every bad expression fails with the expected message. */
static void
test_parse_bad(void)
{
	char		err[256];
	char		detail[768];
	char		longtext[400];
	CronSpec	s;

	for (size_t i = 0; i < sizeof(parse_bad) / sizeof(parse_bad[0]); i++)
	{
		int			ok = cron_parse(parse_bad[i].text, &s, err, sizeof(err));

		snprintf(detail, sizeof(detail), "\"%s\": got %s \"%s\", want \"%s\"",
				 parse_bad[i].text, ok ? "success" : "error", ok ? "" : err,
				 parse_bad[i].message);
		check(!ok && strstr(err, parse_bad[i].message) != NULL,
			  "bad expression", detail);
	}

	/* 256 bytes are accepted, 257 are not */
	memset(longtext, ' ', sizeof(longtext));
	memcpy(longtext, "* * * * *", 9);
	longtext[CRON_MAX_TEXT_LEN] = '\0';
	check(cron_parse(longtext, &s, err, sizeof(err)), "256 bytes", err);
	longtext[CRON_MAX_TEXT_LEN] = ' ';
	longtext[CRON_MAX_TEXT_LEN + 1] = '\0';
	check(!cron_parse(longtext, &s, err, sizeof(err)) &&
		  strstr(err, "longer than 256 bytes") != NULL, "257 bytes", err);

	/* a tiny or missing error buffer is fine */
	check(!cron_parse("bad", &s, err, 1) && err[0] == '\0', "errlen 1", err);
	check(!cron_parse("bad", &s, NULL, 0), "no errbuf", "");
}

/* Check the calendar helpers against known dates and each other. */
static void
test_calendar(void)
{
	char		detail[256];
	int			bad = 0;

	check(cron_days_from_civil(1970, 1, 1) == 0, "epoch", "1970-01-01 != 0");
	check(cron_days_from_civil(2000, 1, 1) == 10957, "2000", "2000-01-01");
	check(cron_weekday(0) == 4, "weekday", "1970-01-01 is a Thursday");
	check(cron_weekday(cron_days_from_civil(2024, 2, 29)) == 4, "weekday",
		  "2024-02-29 is a Thursday");
	check(cron_weekday(-1) == 3, "weekday", "1969-12-31 is a Wednesday");
	check(cron_days_in_month(2024, 2) == 29 && cron_days_in_month(2023, 2) == 28 &&
		  cron_days_in_month(2100, 2) == 28 && cron_days_in_month(2000, 2) == 29 &&
		  cron_days_in_month(0, 2) == 29 && cron_days_in_month(-100, 2) == 28,
		  "leap years", "February lengths");

	/* round trip and continuity over a wide range of days */
	for (int64_t d = -800000000; d <= 800000000; d += 997)
	{
		int64_t		y;
		int			m,
					day;

		cron_civil_from_days(d, &y, &m, &day);
		if (cron_days_from_civil(y, m, day) != d || m < 1 || m > 12 ||
			day < 1 || day > cron_days_in_month(y, m))
		{
			if (bad++ < 3)
			{
				snprintf(detail, sizeof(detail), "day %" PRId64 " -> %" PRId64
						 "-%d-%d", d, y, m, day);
				check(0, "civil round trip", detail);
			}
		}
	}
	check(bad == 0, "civil round trip", "see above");

	/* consecutive days step through the calendar one day at a time */
	bad = 0;
	for (int64_t d = -200000; d < 200000; d++)
	{
		int64_t		y1,
					y2;
		int			m1,
					d1,
					m2,
					d2;

		cron_civil_from_days(d, &y1, &m1, &d1);
		cron_civil_from_days(d + 1, &y2, &m2, &d2);
		if (!((y2 == y1 && m2 == m1 && d2 == d1 + 1) ||
			  (y2 == y1 && m2 == m1 + 1 && d2 == 1 &&
			   d1 == cron_days_in_month(y1, m1)) ||
			  (y2 == y1 + 1 && m1 == 12 && d1 == 31 && m2 == 1 && d2 == 1)))
			bad++;
	}
	check(bad == 0, "calendar continuity", "days do not follow each other");
}

/* Check the table searches. */
static void
test_search(void)
{
	char		err[256];
	char		detail[512];
	char		buf[64];

	for (size_t i = 0; i < sizeof(search) / sizeof(search[0]); i++)
	{
		CronSpec	s;
		int64_t		next = 0;
		bool		found;
		const char *got;

		if (!cron_parse(search[i].text, &s, err, sizeof(err)))
		{
			check(0, "search parse", err);
			continue;
		}
		found = cron_next_local(&s, local_of(search[i].from), &next);
		got = found ? text_of(next, buf, sizeof(buf)) : "none";
		snprintf(detail, sizeof(detail), "\"%s\" from %s: got %s, want %s",
				 search[i].text, search[i].from, got, search[i].expect);
		check(strcmp(got, search[i].expect) == 0, "search", detail);
	}
}

/* Check @every arithmetic: next multiple of the period after a time. */
static void
test_every(void)
{
	CronSpec	s;
	int64_t		next;

	cron_parse("@every 90s", &s, NULL, 0);
	check(cron_next_every(&s, 0, &next) && next == 90, "every", "after 0");
	check(cron_next_every(&s, 89, &next) && next == 90, "every", "after 89");
	check(cron_next_every(&s, 90, &next) && next == 180, "every", "after 90");
	check(cron_next_every(&s, -1, &next) && next == 0, "every", "after -1");
	check(cron_next_every(&s, -90, &next) && next == 0, "every", "after -90");
	check(cron_next_every(&s, -91, &next) && next == -90, "every", "after -91");
	check(!cron_next_every(&s, INT64_MAX - 10, &next), "every", "overflow");
	cron_parse("* * * * *", &s, NULL, 0);
	check(!cron_next_every(&s, 0, &next), "every", "not an @every spec");
	check(!cron_next_local(&s, CRON_LOCAL_MAX + 1, &next), "range",
		  "search beyond CRON_LOCAL_MAX");
}

/* A small deterministic pseudo-random generator (xorshift64). */
static uint64_t rng_state = 88172645463325252ULL;

/* A pseudo-random number in 0..n-1. */
static int
rnd(int n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (int) (rng_state % (uint64_t) n);
}

/* One random field element of values lo..hi. */
static void
random_element(char *out, size_t len, int lo, int hi)
{
	int			a = lo + rnd(hi - lo + 1);
	int			b = a + rnd(hi - a + 1);

	switch (rnd(5))
	{
		case 0:
			snprintf(out, len, "*");
			break;
		case 1:
			snprintf(out, len, "*/%d", 1 + rnd(hi < 12 ? hi : 12));
			break;
		case 2:
			snprintf(out, len, "%d-%d", a, b);
			break;
		case 3:
			snprintf(out, len, "%d-%d/%d", a, b, 1 + rnd(5));
			break;
		default:
			snprintf(out, len, "%d,%d", a, b);
			break;
	}
}

/*
 * The field-skipping search must find the same time as a scan that tries
 * every minute, for random expressions and starts.
 */
static void
test_search_vs_scan(void)
{
	char		text[192];
	char		f[5][32];
	char		detail[512];
	char		buf1[64];
	char		buf2[64];
	int			bad = 0;
	int			cases = 0;

	for (int i = 0; i < 400; i++)
	{
		CronSpec	s;
		int64_t		from;
		int64_t		next;
		int64_t		scan = -1;
		bool		found;

		random_element(f[0], sizeof(f[0]), 0, 59);
		random_element(f[1], sizeof(f[1]), 0, 23);
		random_element(f[2], sizeof(f[2]), 1, 31);
		random_element(f[3], sizeof(f[3]), 1, 12);
		random_element(f[4], sizeof(f[4]), 0, 7);
		snprintf(text, sizeof(text), "%s %s %s %s %s", f[0], f[1], f[2], f[3], f[4]);
		if (!cron_parse(text, &s, detail, sizeof(detail)))
		{
			check(0, "random parse", detail);
			continue;
		}
		from = local_of("2023-01-01 00:00:00") + (int64_t) rnd(3 * 365) * 86400 +
			rnd(86400);
		/* minute by minute over two years */
		for (int64_t t = (from + 59) / 60 * 60; t < from + 2 * 366 * 86400; t += 60)
		{
			if (cron_matches_local(&s, t))
			{
				scan = t;
				break;
			}
		}
		if (scan < 0)
			continue;
		cases++;
		found = cron_next_local(&s, from, &next);
		if (!found || next != scan)
		{
			if (bad++ < 5)
			{
				snprintf(detail, sizeof(detail), "\"%s\" from %s: search %s, scan %s",
						 text, text_of(from, buf1, sizeof(buf1)),
						 found ? text_of(next, buf2, sizeof(buf2)) : "none",
						 text_of(scan, buf1, sizeof(buf1)));
				check(0, "search vs scan", detail);
			}
		}
		else
			passed++;
	}
	snprintf(detail, sizeof(detail), "only %d random cases had a match", cases);
	check(cases > 300, "search vs scan coverage", detail);
}

int
main(void)
{
	test_parse_ok();
	test_parse_bad();
	test_calendar();
	test_search();
	test_every();
	test_search_vs_scan();
	printf("%d passed, %d failed\n", passed, failed);
	return failed == 0 ? 0 : 1;
}
