/*-------------------------------------------------------------------------
 *
 * cron/parse.c
 *	  Cron expression parser and the calendar search for the next match.
 *
 * Accepted syntax (README.md, "Cron schedules", has the user-facing version):
 *
 *		[second] minute hour day-of-month month day-of-week
 *
 * Each field is a comma-separated list of elements; an element is "*", a
 * value or a range "a-b", optionally followed by a step "/n" ("a/n" means
 * "a-max/n").  Months and weekdays may be given as three-letter English
 * names in any case; 0 and 7 are both Sunday, and SUN as the end of a range
 * means 7, so FRI-SUN works.  The macros @yearly @annually @monthly @weekly
 * @daily @midnight @hourly stand for their usual five fields, and
 * "@every <interval>" is a fixed period counted from the Unix epoch.
 *
 * Day-of-month and day-of-week combine as in Vixie cron: when both fields
 * are restricted (neither starts with "*"), a day matches if either field
 * matches; otherwise both must match.
 *
 * The search (cron_next_local) works on a naive wall clock and skips by
 * fields: it jumps to the next matching month, then day, hour, minute and
 * second, so it never steps through non-matching time.  The Gregorian
 * calendar repeats every 400 years (146097 days, a whole number of weeks),
 * so an expression that matches nothing in 400 years never matches; the
 * search stops there.
 *
 * This file makes no PostgreSQL calls, so it builds standalone for the unit
 * tests and the fuzzer in test/cron/.  Time zones are cron/next.c's job.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron/parse.h"

/* What one of the five or six fields accepts. */
typedef struct CronFieldDef
{
	const char *name;			/* field name used in messages */
	int			min;			/* smallest value */
	int			max;			/* largest value */
	int			star_max;		/* largest value "*" stands for */
	const char *const *names;	/* names of values names_base.., or NULL */
	int			names_base;		/* value of names[0] */
	int			nnames;			/* entries in names */
	bool		day_field;		/* day-of-month or day-of-week */
} CronFieldDef;

static const char *const cron_month_names[] = {
	"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
	"JUL", "AUG", "SEP", "OCT", "NOV", "DEC"
};

static const char *const cron_day_names[] = {
	"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"
};

enum
{
	CRON_F_SECOND,
	CRON_F_MINUTE,
	CRON_F_HOUR,
	CRON_F_DOM,
	CRON_F_MONTH,
	CRON_F_DOW
};

static const CronFieldDef cron_fields[] = {
	{"second", 0, 59, 59, NULL, 0, 0, false},
	{"minute", 0, 59, 59, NULL, 0, 0, false},
	{"hour", 0, 23, 23, NULL, 0, 0, false},
	{"day-of-month", 1, 31, 31, NULL, 0, 0, true},
	{"month", 1, 12, 12, cron_month_names, 1, 12, false},
	{"day-of-week", 0, 7, 6, cron_day_names, 0, 7, true},
};

/* The macros and the five fields each stands for. */
static const struct
{
	const char *name;
	const char *fields;
}			cron_macros[] = {
	{"@yearly", "0 0 1 1 *"},
	{"@annually", "0 0 1 1 *"},
	{"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"},
	{"@daily", "0 0 * * *"},
	{"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
};

/* Units accepted by @every, with their length in seconds. */
static const struct
{
	const char *name;
	int64_t		secs;
}			cron_units[] = {
	{"s", 1}, {"sec", 1}, {"secs", 1}, {"second", 1}, {"seconds", 1},
	{"m", 60}, {"min", 60}, {"mins", 60}, {"minute", 60}, {"minutes", 60},
	{"h", 3600}, {"hr", 3600}, {"hrs", 3600}, {"hour", 3600},
	{"hours", 3600},
	{"d", 86400}, {"day", 86400}, {"days", 86400},
	{"w", 604800}, {"week", 604800}, {"weeks", 604800},
};

#define CRON_LENGTH(a)	(sizeof(a) / sizeof((a)[0]))

#if defined(__GNUC__) || defined(__clang__)
#define CRON_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define CRON_PRINTF(f, a)
#endif

static bool cron_error(char *errbuf, size_t errlen, const char *fmt,...)
			CRON_PRINTF(3, 4);

/* Write a message into errbuf (if there is one) and return false. */
static bool
cron_error(char *errbuf, size_t errlen, const char *fmt,...)
{
	va_list		args;

	if (errbuf != NULL && errlen > 0)
	{
		va_start(args, fmt);
		vsnprintf(errbuf, errlen, fmt, args);
		va_end(args);
	}
	return false;
}

/* Case-insensitive comparison of a counted string with a C string. */
static bool
cron_word_equals(const char *s, size_t len, const char *word)
{
	size_t		i;

	if (strlen(word) != len)
		return false;
	for (i = 0; i < len; i++)
	{
		if (tolower((unsigned char) s[i]) != tolower((unsigned char) word[i]))
			return false;
	}
	return true;
}

/* Is c one of the characters that separate fields? */
static bool
cron_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
		c == '\f' || c == '\v';
}

/* Copy a counted string into buf as a C string, truncated to fit. */
static const char *
cron_copy(char *buf, size_t buflen, const char *s, size_t len)
{
	if (len >= buflen)
		len = buflen - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return buf;
}

/*
 * Parse one value (number or name) of field def at *pp, stopping at end.
 * range_end says the value ends a range that starts after Sunday, where
 * SUN means 7 (so FRI-SUN works).
 */
static bool
cron_parse_value(const CronFieldDef *def, const char *field,
				 const char **pp, const char *end, bool range_end,
				 int *value, char *errbuf, size_t errlen)
{
	const char *p = *pp;
	const char *start = p;
	char		word[CRON_MAX_TEXT_LEN + 1];

	if (p < end && isdigit((unsigned char) *p))
	{
		long		v = 0;

		while (p < end && isdigit((unsigned char) *p))
		{
			if (v < 100000)
				v = v * 10 + (*p - '0');
			p++;
		}
		if (p < end && isalpha((unsigned char) *p))
		{
			const char *alpha = p;

			while (p < end && isalpha((unsigned char) *p))
				p++;
			if (def->day_field &&
				(cron_word_equals(alpha, p - alpha, "L") ||
				 cron_word_equals(alpha, p - alpha, "W") ||
				 cron_word_equals(alpha, p - alpha, "LW")))
				return cron_error(errbuf, errlen,
								  "%s field \"%s\": \"L\" and \"W\" are not supported",
								  def->name, field);
			return cron_error(errbuf, errlen,
							  "%s field \"%s\": \"%s\" is not a number",
							  def->name, field,
							  cron_copy(word, sizeof(word), start, p - start));
		}
		if (v < def->min || v > def->max)
			return cron_error(errbuf, errlen,
							  "%s field \"%s\": %s is out of range (%d-%d)",
							  def->name, field,
							  cron_copy(word, sizeof(word), start, p - start),
							  def->min, def->max);
		*value = (int) v;
		*pp = p;
		return true;
	}

	if (p < end && isalpha((unsigned char) *p))
	{
		int			i;

		while (p < end && isalpha((unsigned char) *p))
			p++;
		cron_copy(word, sizeof(word), start, p - start);
		for (i = 0; i < def->nnames; i++)
		{
			if (cron_word_equals(start, p - start, def->names[i]))
			{
				*value = def->names_base + i;
				if (range_end && def == &cron_fields[CRON_F_DOW] && *value == 0)
					*value = 7;
				*pp = p;
				return true;
			}
		}
		if (def->day_field &&
			(cron_word_equals(start, p - start, "L") ||
			 cron_word_equals(start, p - start, "W") ||
			 cron_word_equals(start, p - start, "LW")))
			return cron_error(errbuf, errlen,
							  "%s field \"%s\": \"L\" and \"W\" are not supported",
							  def->name, field);
		if (def->nnames == 0)
			return cron_error(errbuf, errlen,
							  "%s field \"%s\": \"%s\" is not a number",
							  def->name, field, word);
		return cron_error(errbuf, errlen,
						  "%s field \"%s\": unrecognized name \"%s\"",
						  def->name, field, word);
	}

	if (p >= end)
		return cron_error(errbuf, errlen,
						  "%s field \"%s\": a value is missing",
						  def->name, field);
	if (*p == '?')
		return cron_error(errbuf, errlen,
						  "%s field \"%s\": \"?\" is not supported, use \"*\"",
						  def->name, field);
	if (isprint((unsigned char) *p))
		return cron_error(errbuf, errlen,
						  "%s field \"%s\": unexpected \"%c\"",
						  def->name, field, *p);
	return cron_error(errbuf, errlen,
					  "%s field \"%s\": unexpected byte 0x%02x",
					  def->name, field, (unsigned char) *p);
}

/* Parse one field (a counted string) into the bitset *bits. */
static bool
cron_parse_field(const CronFieldDef *def, const char *s, size_t len,
				 uint64_t *bits, char *errbuf, size_t errlen)
{
	char		field[CRON_MAX_TEXT_LEN + 1];
	const char *p = s;
	const char *end = s + len;

	*bits = 0;
	cron_copy(field, sizeof(field), s, len);
	if (memchr(s, '#', len) != NULL)
		return cron_error(errbuf, errlen,
						  "%s field \"%s\": \"#\" (nth weekday) is not supported",
						  def->name, field);
	for (;;)
	{
		const char *elem_end = memchr(p, ',', end - p);
		int			lo;
		int			hi;
		int			step = 1;
		bool		single = false;
		int			v;

		if (elem_end == NULL)
			elem_end = end;
		if (p == elem_end)
			return cron_error(errbuf, errlen,
							  "%s field \"%s\": empty list element",
							  def->name, field);

		if (*p == '*')
		{
			lo = def->min;
			hi = def->star_max;
			p++;
		}
		else
		{
			if (!cron_parse_value(def, field, &p, elem_end, false, &lo,
								  errbuf, errlen))
				return false;
			if (p < elem_end && *p == '-')
			{
				p++;
				if (!cron_parse_value(def, field, &p, elem_end, lo > 0, &hi,
									  errbuf, errlen))
					return false;
				if (lo > hi)
					return cron_error(errbuf, errlen,
									  "%s field \"%s\": range %d-%d goes backwards",
									  def->name, field, lo, hi);
			}
			else
			{
				hi = lo;
				single = true;
			}
		}

		if (p < elem_end && *p == '/')
		{
			long		n = 0;
			char		written[CRON_MAX_TEXT_LEN + 1];
			const char *digits = ++p;

			while (p < elem_end && isdigit((unsigned char) *p))
			{
				if (n < 100000)
					n = n * 10 + (*p - '0');
				p++;
			}
			if (p == digits)
				return cron_error(errbuf, errlen,
								  "%s field \"%s\": a step must be a number",
								  def->name, field);
			/* the step as written (n stops growing past 100000) */
			if (n < 1 || n > def->max)
				return cron_error(errbuf, errlen,
								  "%s field \"%s\": step %s is out of range (1-%d)",
								  def->name, field,
								  cron_copy(written, sizeof(written), digits, p - digits), def->max);
			step = (int) n;
			/* "a/n" means "a-max/n" */
			if (single)
				hi = def->max;
		}

		if (p != elem_end)
		{
			char		rest[CRON_MAX_TEXT_LEN + 1];

			if (*p == '?')
				return cron_error(errbuf, errlen,
								  "%s field \"%s\": \"?\" is not supported, use \"*\"",
								  def->name, field);
			return cron_error(errbuf, errlen,
							  "%s field \"%s\": unexpected \"%s\"",
							  def->name, field,
							  cron_copy(rest, sizeof(rest), p, elem_end - p));
		}

		for (v = lo; v <= hi; v += step)
			*bits |= UINT64_C(1) << v;

		if (elem_end == end)
			break;
		p = elem_end + 1;
	}

	/* 7 is another name for Sunday */
	if (def == &cron_fields[CRON_F_DOW] && (*bits & (UINT64_C(1) << 7)))
		*bits = (*bits | 1) & ~(UINT64_C(1) << 7);
	return true;
}

/* Parse the interval of "@every <interval>" into seconds. */
static bool
cron_parse_every(const char *s, CronSpec *spec, char *errbuf, size_t errlen)
{
	const char *p;
	int64_t		total = 0;
	char		word[CRON_MAX_TEXT_LEN + 1];

	while (cron_is_space(*s))
		s++;
	p = s;
	if (*p == '\0')
		return cron_error(errbuf, errlen,
						  "@every needs an interval, as in \"@every 5m\"");
	while (*p != '\0')
	{
		int64_t		n = 0;
		const char *num = p;
		const char *unit;
		size_t		i;
		bool		found = false;

		if (!isdigit((unsigned char) *p))
			return cron_error(errbuf, errlen,
							  "@every interval \"%s\": expected a number at \"%s\"",
							  s, p);
		while (isdigit((unsigned char) *p))
		{
			if (n <= CRON_MAX_EVERY_SECS)
				n = n * 10 + (*p - '0');
			p++;
		}
		if (*p == '.' || *p == ',')
			return cron_error(errbuf, errlen,
							  "@every interval \"%s\": fractions are not supported",
							  s);
		while (cron_is_space(*p))
			p++;
		unit = p;
		while (isalpha((unsigned char) *p))
			p++;
		if (p == unit)
			return cron_error(errbuf, errlen,
							  "@every interval \"%s\": a unit is missing after \"%s\"",
							  s, cron_copy(word, sizeof(word), num, unit - num));
		for (i = 0; i < CRON_LENGTH(cron_units); i++)
		{
			if (cron_word_equals(unit, p - unit, cron_units[i].name))
			{
				if (n > CRON_MAX_EVERY_SECS / cron_units[i].secs)
					n = CRON_MAX_EVERY_SECS + 1;
				else
					n *= cron_units[i].secs;
				found = true;
				break;
			}
		}
		if (!found)
			return cron_error(errbuf, errlen,
							  "@every interval \"%s\": unrecognized unit \"%s\"",
							  s, cron_copy(word, sizeof(word), unit, p - unit));
		total += n;
		if (total > CRON_MAX_EVERY_SECS)
			return cron_error(errbuf, errlen,
							  "@every interval \"%s\": longer than 3650 days",
							  s);
		while (cron_is_space(*p))
			p++;
	}
	if (total < 1)
		return cron_error(errbuf, errlen,
						  "@every interval \"%s\": must be at least 1 second",
						  s);
	spec->every = total;
	return true;
}

/*
 * Parse a cron expression into *spec.  On failure returns false and writes
 * a message naming the offending field into errbuf.
 */
bool
cron_parse(const char *text, CronSpec *spec, char *errbuf, size_t errlen)
{
	char		buf[CRON_MAX_TEXT_LEN + 1];
	const char *start[7];
	size_t		len[7];
	int			nfields = 0;
	size_t		textlen;
	const char *p;
	int			first;
	int			i;

	memset(spec, 0, sizeof(*spec));
	if (errbuf != NULL && errlen > 0)
		errbuf[0] = '\0';

	for (textlen = 0; textlen <= CRON_MAX_TEXT_LEN && text[textlen]; textlen++)
		;
	if (textlen > CRON_MAX_TEXT_LEN)
		return cron_error(errbuf, errlen,
						  "expression is longer than %d bytes",
						  CRON_MAX_TEXT_LEN);

	/* trim; buf then holds the expression without surrounding space */
	p = text;

	while (cron_is_space(*p))
		p++;
	textlen = strlen(p);
	while (textlen > 0 && cron_is_space(p[textlen - 1]))
		textlen--;
	memcpy(buf, p, textlen);
	buf[textlen] = '\0';
	if (textlen == 0)
		return cron_error(errbuf, errlen, "expression is empty");

	if (buf[0] == '@')
	{
		size_t		wlen = 1;

		while (buf[wlen] != '\0' && !cron_is_space(buf[wlen]))
			wlen++;
		if (cron_word_equals(buf, wlen, "@every"))
			return cron_parse_every(buf + wlen, spec, errbuf, errlen);
		for (i = 0; i < (int) CRON_LENGTH(cron_macros); i++)
		{
			if (cron_word_equals(buf, wlen, cron_macros[i].name))
			{
				if (buf[wlen] != '\0')
					return cron_error(errbuf, errlen,
									  "%s takes no arguments",
									  cron_macros[i].name);
				return cron_parse(cron_macros[i].fields, spec, errbuf, errlen);
			}
		}
		buf[wlen] = '\0';
		if (cron_word_equals(buf, wlen, "@reboot"))
			return cron_error(errbuf, errlen, "@reboot is not supported");
		return cron_error(errbuf, errlen,
						  "unrecognized macro \"%s\" (use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every)",
						  buf);
	}

	/* split into fields; count them all, remember the first six */
	p = buf;
	for (;;)
	{
		while (cron_is_space(*p))
			p++;
		if (*p == '\0')
			break;
		if (nfields < 7)
			start[nfields] = p;
		while (*p != '\0' && !cron_is_space(*p))
			p++;
		if (nfields < 7)
			len[nfields] = p - start[nfields];
		nfields++;
	}
	if (nfields != 5 && nfields != 6)
		return cron_error(errbuf, errlen,
						  "expected 5 or 6 fields, found %d", nfields);

	first = (nfields == 6) ? CRON_F_SECOND : CRON_F_MINUTE;
	if (nfields == 5)
		spec->seconds = 1;
	for (i = 0; i < nfields; i++)
	{
		int			f = first + i;
		uint64_t	bits;

		if (!cron_parse_field(&cron_fields[f], start[i], len[i], &bits,
							  errbuf, errlen))
			return false;
		switch (f)
		{
			case CRON_F_SECOND:
				spec->seconds = bits;
				break;
			case CRON_F_MINUTE:
				spec->minutes = bits;
				break;
			case CRON_F_HOUR:
				spec->hours = (uint32_t) bits;
				break;
			case CRON_F_DOM:
				spec->days = (uint32_t) bits;
				spec->dom_star = (start[i][0] == '*');
				break;
			case CRON_F_MONTH:
				spec->months = (uint16_t) bits;
				break;
			case CRON_F_DOW:
				spec->weekdays = (uint8_t) bits;
				spec->dow_star = (start[i][0] == '*');
				break;
		}
	}
	return true;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (year 0 = 1 BC). */
int64_t
cron_days_from_civil(int64_t year, int month, int day)
{
	int64_t		y = year - (month <= 2);
	int64_t		era = (y >= 0 ? y : y - 399) / 400;
	int64_t		yoe = y - era * 400;
	int64_t		doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
	int64_t		doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + doe - 719468;
}

/* The proleptic Gregorian date of a day number (inverse of the above). */
void
cron_civil_from_days(int64_t days, int64_t *year, int *month, int *day)
{
	int64_t		z = days + 719468;
	int64_t		era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t		doe = z - era * 146097;
	int64_t		yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t		doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t		mp = (5 * doy + 2) / 153;
	int			m = (int) (mp < 10 ? mp + 3 : mp - 9);

	*day = (int) (doy - (153 * mp + 2) / 5 + 1);
	*month = m;
	*year = yoe + era * 400 + (m <= 2);
}

/* Weekday of a day number, 0 = Sunday (1970-01-01 was a Thursday). */
int
cron_weekday(int64_t days)
{
	int64_t		w = (days + 4) % 7;

	return (int) (w < 0 ? w + 7 : w);
}

/* Number of days in a month of the proleptic Gregorian calendar. */
int
cron_days_in_month(int64_t year, int month)
{
	static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

	if (month == 2 && year % 4 == 0 && (year % 100 != 0 || year % 400 == 0))
		return 29;
	return dim[month - 1];
}

/* Local seconds of a broken-down wall-clock time. */
int64_t
cron_local_from_time(const CronTime *tm)
{
	return cron_days_from_civil(tm->year, tm->month, tm->day) * 86400 +
		tm->hour * 3600 + tm->minute * 60 + tm->second;
}

/* Broken-down wall-clock time of local seconds. */
void
cron_time_from_local(int64_t local, CronTime *tm)
{
	int64_t		days = local / 86400;
	int64_t		secs = local % 86400;

	if (secs < 0)
	{
		secs += 86400;
		days--;
	}
	cron_civil_from_days(days, &tm->year, &tm->month, &tm->day);
	tm->hour = (int) (secs / 3600);
	tm->minute = (int) (secs / 60 % 60);
	tm->second = (int) (secs % 60);
}

/* Position of the lowest set bit of a non-zero word. */
static int
cron_lowest_bit(uint64_t bits)
{
#if defined(__GNUC__) || defined(__clang__)
	return __builtin_ctzll(bits);
#else
	int			n = 0;

	while ((bits & 1) == 0)
	{
		bits >>= 1;
		n++;
	}
	return n;
#endif
}

/* Smallest member of bits that is >= from, or -1. */
static int
cron_next_bit(uint64_t bits, int from)
{
	if (from > 63)
		return -1;
	bits = bits >> from << from;
	return bits == 0 ? -1 : cron_lowest_bit(bits);
}

/* Bitset of the days of a month (bit d = day d) that match the spec. */
static uint64_t
cron_month_days(const CronSpec *spec, int64_t year, int month)
{
	int			dim = cron_days_in_month(year, month);
	uint64_t	valid = ((UINT64_C(1) << dim) - 1) << 1;
	uint64_t	dom = (uint64_t) spec->days & valid;
	uint64_t	dow = 0;

	if ((spec->weekdays & 0x7F) == 0x7F)
		dow = valid;
	else
	{
		int			wd1 = cron_weekday(cron_days_from_civil(year, month, 1));
		int			w;

		for (w = 0; w < 7; w++)
		{
			int			d;

			if (!(spec->weekdays & (1 << w)))
				continue;
			for (d = 1 + (w - wd1 + 7) % 7; d <= dim; d += 7)
				dow |= UINT64_C(1) << d;
		}
	}
	/* the Vixie rule */
	if (spec->dom_star || spec->dow_star)
		return dom & dow;
	return dom | dow;
}

/* Does the date match the month, day-of-month and day-of-week fields? */
bool
cron_day_matches(const CronSpec *spec, int64_t year, int month, int day)
{
	if (month < 1 || month > 12 || day < 1 || day > 31)
		return false;
	if (!(spec->months & (1u << month)))
		return false;
	return (cron_month_days(spec, year, month) >> day) & 1;
}

/* Does the wall-clock time (local seconds) match every field? */
bool
cron_matches_local(const CronSpec *spec, int64_t local)
{
	CronTime	tm;

	if (spec->every > 0 || local < CRON_LOCAL_MIN || local > CRON_LOCAL_MAX)
		return false;
	cron_time_from_local(local, &tm);
	return cron_day_matches(spec, tm.year, tm.month, tm.day) &&
		(spec->hours >> tm.hour & 1) &&
		(spec->minutes >> tm.minute & 1) &&
		(spec->seconds >> tm.second & 1);
}

/*
 * First wall-clock time (local seconds) >= from that matches the spec.
 * Returns false when there is none within CRON_SEARCH_YEARS, which means
 * there is none at all, or when from is outside the supported range.
 */
bool
cron_next_local(const CronSpec *spec, int64_t from, int64_t *next)
{
	CronTime	t;
	int64_t		last_year;

	if (spec->every > 0 || from < CRON_LOCAL_MIN || from > CRON_LOCAL_MAX ||
		spec->months == 0 || spec->hours == 0 || spec->minutes == 0 ||
		spec->seconds == 0)
		return false;
	cron_time_from_local(from, &t);
	last_year = t.year + CRON_SEARCH_YEARS;

	while (t.year <= last_year)
	{
		uint64_t	days;
		int			v;

		/* month */
		if (!(spec->months & (1u << t.month)))
		{
			v = cron_next_bit(spec->months, t.month);
			if (v < 0)
			{
				t.year++;
				v = cron_lowest_bit(spec->months);
			}
			t.month = v;
			t.day = 1;
			t.hour = t.minute = t.second = 0;
			continue;
		}

		/* day */
		days = cron_month_days(spec, t.year, t.month) >> t.day << t.day;
		if (days == 0)
		{
			if (++t.month > 12)
			{
				t.month = 1;
				t.year++;
			}
			t.day = 1;
			t.hour = t.minute = t.second = 0;
			continue;
		}
		v = cron_lowest_bit(days);
		if (v != t.day)
		{
			t.day = v;
			t.hour = t.minute = t.second = 0;
		}

		/* hour; past the last one, go to the next day */
		v = cron_next_bit(spec->hours, t.hour);
		if (v < 0)
		{
			t.day++;
			t.hour = t.minute = t.second = 0;
			continue;
		}
		if (v != t.hour)
		{
			t.hour = v;
			t.minute = t.second = 0;
		}

		/* minute */
		v = cron_next_bit(spec->minutes, t.minute);
		if (v < 0)
		{
			t.hour++;
			t.minute = t.second = 0;
			continue;
		}
		if (v != t.minute)
		{
			t.minute = v;
			t.second = 0;
		}

		/* second */
		v = cron_next_bit(spec->seconds, t.second);
		if (v < 0)
		{
			t.minute++;
			t.second = 0;
			continue;
		}
		t.second = v;
		*next = cron_local_from_time(&t);
		return true;
	}
	return false;
}

/*
 * First fire of an @every spec strictly after Unix time "after" (seconds):
 * the next multiple of the period.  False on overflow.
 */
bool
cron_next_every(const CronSpec *spec, int64_t after, int64_t *next)
{
	int64_t		q;

	if (spec->every <= 0 || after > INT64_MAX - 2 * spec->every)
		return false;
	q = after / spec->every;
	if (after % spec->every < 0)
		q--;					/* floor division */
	*next = (q + 1) * spec->every;
	return true;
}
