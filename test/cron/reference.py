#!/usr/bin/env python3
"""
test/cron/reference.py -- differential test of jobq.cron_next.

An independent reference for cron next-fire times, written from the rules
in docs/guide.md ("Cron schedules") rather than from the C code:

  * its own cron parser (regular expressions and Python sets);
  * wall-clock times from Python's zoneinfo, not PostgreSQL's tz library;
  * a brute-force search: walk the calendar day by day from three hours
    before the clock at `after`, try every matching time of each matching
    day in order, and map each wall-clock time L to its fire instant
    f(L) = the first instant whose clock shows L or later (the first
    occurrence in an overlap, the end of the gap in a gap), until f(L) is
    after `after`.

It generates random expressions (all syntax forms, some of them mutated
into invalid ones), zones (all zones PostgreSQL and zoneinfo both know,
weighted towards ones with odd DST) and times (weighted towards DST
transitions), asks the server for jobq.cron_next in batches through psql
(standard PG* environment variables), and compares: valid vs. invalid, and
the fire time.  Exits non-zero on any difference and prints
"N passed, N failed".

    python3 test/cron/reference.py [--cases 3000] [--seed 1] [--batch 300]
"""

import argparse
import datetime as dt
import random
import re
import subprocess
import sys
import time
import zoneinfo

UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1)

# ---------------------------------------------------------------- parser

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN",
          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# name, min, max, what "*" covers up to, names, first named value
FIELDS = [("second", 0, 59, 59, None, 0),
          ("minute", 0, 59, 59, None, 0),
          ("hour", 0, 23, 23, None, 0),
          ("day-of-month", 1, 31, 31, None, 0),
          ("month", 1, 12, 12, MONTHS, 1),
          ("day-of-week", 0, 7, 6, DAYS, 0)]
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *",
          "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
          "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}
UNITS = {}
for names, secs in ((("s", "sec", "secs", "second", "seconds"), 1),
                    (("m", "min", "mins", "minute", "minutes"), 60),
                    (("h", "hr", "hrs", "hour", "hours"), 3600),
                    (("d", "day", "days"), 86400),
                    (("w", "week", "weeks"), 604800)):
    for n in names:
        UNITS[n] = secs
SPACE = " \t\n\r\f\v"


class Bad(Exception):
    """An expression the reference rejects."""


class Spec:
    """A parsed expression: one set per field, or an @every period."""

    def __init__(self):
        self.every = 0
        self.sets = None
        self.dom_star = self.dow_star = True


def parse_value(text, field, sunday_is_7):
    name, lo, hi, _, names, base = field
    if re.fullmatch(r"[0-9]+", text):
        v = int(text)
        if not lo <= v <= hi:
            raise Bad(f"{name}: {v} out of range")
        return v
    if names and re.fullmatch(r"[A-Za-z]+", text) and text.upper() in names:
        v = names.index(text.upper()) + base
        if name == "day-of-week" and sunday_is_7 and v == 0:
            v = 7
        return v
    raise Bad(f"{name}: bad value {text!r}")


def parse_field(text, field):
    name, lo, hi, star_hi, _, _ = field
    values = set()
    for elem in text.split(","):
        m = re.fullmatch(r"(\*|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/([0-9]+))?",
                         elem)
        if not m:
            raise Bad(f"{name}: bad element {elem!r}")
        body, step = m.group(1), m.group(2)
        if body == "*":
            a, b = lo, star_hi
        elif "-" in body:
            sa, sb = body.split("-")
            a = parse_value(sa, field, False)
            b = parse_value(sb, field, a > 0)
            if a > b:
                raise Bad(f"{name}: backwards range")
        else:
            a = b = parse_value(body, field, False)
            if step is not None:
                b = hi
        n = 1
        if step is not None:
            n = int(step)
            if not 1 <= n <= hi:
                raise Bad(f"{name}: bad step")
        values.update(range(a, b + 1, n))
    if name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return values


def parse(text):
    """Parse an expression into a Spec, or raise Bad."""
    if len(text.encode()) > 256:
        raise Bad("too long")
    text = text.strip(SPACE)
    spec = Spec()
    if text.startswith("@"):
        word = re.match(r"[^ \t\n\r\f\v]*", text).group(0)
        rest = text[len(word):]
        if word.lower() == "@every":
            rest = rest.strip(SPACE)
            if not re.fullmatch(r"(?:[0-9]+[ \t\n\r\f\v]*[A-Za-z]+[ \t\n\r\f\v]*)+", rest):
                raise Bad("bad @every")
            total = 0
            for num, unit in re.findall(r"([0-9]+)[ \t\n\r\f\v]*([A-Za-z]+)", rest):
                if unit.lower() not in UNITS:
                    raise Bad("bad unit")
                total += int(num) * UNITS[unit.lower()]
            if not 1 <= total <= 3650 * 86400:
                raise Bad("bad period")
            spec.every = total
            return spec
        if word.lower() in MACROS and rest == "":
            return parse(MACROS[word.lower()])
        raise Bad("bad macro")
    parts = [p for p in re.split(r"[ \t\n\r\f\v]+", text) if p]
    if len(parts) == 5:
        parts = ["0"] + parts
    if len(parts) != 6:
        raise Bad("field count")
    spec.sets = [parse_field(p, f) for p, f in zip(parts, FIELDS)]
    spec.dom_star = parts[3].startswith("*")
    spec.dow_star = parts[5].startswith("*")
    return spec


# ------------------------------------------------------- reference search

def local_seconds(t, tz):
    """Wall-clock time at Unix time t, as naive seconds since 1970."""
    d = dt.datetime.fromtimestamp(t, tz).replace(tzinfo=None)
    return (d - EPOCH) // dt.timedelta(seconds=1)


def naive(secs):
    return EPOCH + dt.timedelta(seconds=secs)


def first_instant(L, tz):
    """First Unix time whose wall clock shows L or later."""
    d = naive(L)
    u0 = int(d.replace(tzinfo=tz, fold=0).timestamp())
    u1 = int(d.replace(tzinfo=tz, fold=1).timestamp())
    occurrences = [u for u in (u0, u1) if local_seconds(u, tz) == L]
    if occurrences:
        return min(occurrences)
    # L is in a gap: the clock jumps over it between the two readings
    lo, hi = min(u0, u1), max(u0, u1)
    assert local_seconds(lo, tz) < L <= local_seconds(hi, tz), (L, tz)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if local_seconds(mid, tz) >= L:
            hi = mid
        else:
            lo = mid
    return hi


def day_matches(spec, day):
    s = spec.sets
    if day.month not in s[4]:
        return False
    dom = day.day in s[3]
    dow = (day.isoweekday() % 7) in s[5]
    if spec.dom_star or spec.dow_star:
        return dom and dow
    return dom or dow


def reference_next(spec, after_us, tz):
    """Reference next fire (Unix seconds) strictly after after_us, or None."""
    a = after_us // 1_000_000
    if spec.every:
        return (a // spec.every + 1) * spec.every
    start = local_seconds(a, tz) - 3 * 3600
    day = naive(start).date()
    times = sorted((h * 3600 + m * 60 + s) for h in spec.sets[2]
                   for m in spec.sets[1] for s in spec.sets[0])
    for _ in range(146097 + 366):          # 400 years and a bit
        if day_matches(spec, day):
            base = (day - EPOCH.date()).days * 86400
            for tod in times:
                L = base + tod
                if L >= start and first_instant(L, tz) > a:
                    return first_instant(L, tz)
        day += dt.timedelta(days=1)
        if day.year > 9998:
            break
    return None


# ----------------------------------------------------------- generation

INTERESTING_ZONES = [
    "UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe",
    "Asia/Kathmandu", "Pacific/Chatham", "Europe/Dublin", "America/St_Johns",
    "Africa/Casablanca", "Antarctica/Troll", "America/Santiago",
    "Pacific/Apia", "Asia/Tehran", "Australia/Adelaide", "America/Havana",
    "Europe/Moscow", "Asia/Gaza", "America/Sao_Paulo", "Pacific/Kiritimati",
]


def element(rng, lo, hi, names=None, base=0):
    def val(v):
        if names and rng.random() < 0.3 and 0 <= v - base < len(names):
            name = names[v - base]
            return rng.choice([name, name.lower(), name.title()])
        return str(v)
    a = rng.randint(lo, hi)
    b = rng.randint(a, hi)
    kind = rng.random()
    if kind < 0.25:
        return "*"
    if kind < 0.4:
        return "*/" + str(rng.randint(1, min(hi, 20)))
    if kind < 0.6:
        return val(a)
    if kind < 0.75:
        return val(a) + "-" + val(b)
    if kind < 0.85:
        return val(a) + "-" + val(b) + "/" + str(rng.randint(1, 6))
    if kind < 0.9:
        return str(a) + "/" + str(rng.randint(1, min(hi, 20)))
    return ",".join(val(rng.randint(lo, hi)) for _ in range(rng.randint(2, 4)))


def field(rng, lo, hi, names=None, base=0, star_bias=0.0):
    if rng.random() < star_bias:
        return "*"
    if rng.random() < 0.2:
        return ",".join(element(rng, lo, hi, names, base)
                        for _ in range(rng.randint(2, 3)))
    return element(rng, lo, hi, names, base)


def expression(rng):
    r = rng.random()
    if r < 0.05:
        return rng.choice(list(MACROS))
    if r < 0.12:
        units = ["s", "m", "h", "d", " seconds", " minutes", " hours", "m"]
        parts = [str(rng.randint(1, 90)) + rng.choice(units)
                 for _ in range(rng.randint(1, 2))]
        return "@every " + rng.choice(["", " "]).join(parts)
    f = [field(rng, 0, 59, star_bias=0.2),
         field(rng, 0, 4, star_bias=0.2) if rng.random() < 0.5
         else field(rng, 0, 23, star_bias=0.3),
         field(rng, 1, 31, star_bias=0.6),
         field(rng, 1, 12, MONTHS, 1, star_bias=0.6),
         field(rng, 0, 7, DAYS, 0, star_bias=0.6)]
    if rng.random() < 0.15:
        f.insert(0, field(rng, 0, 59, star_bias=0.1)
                 if rng.random() < 0.5 else str(rng.randint(0, 59)))
    return " ".join(f)


def mutate(rng, text):
    alphabet = "0123456789*/-, LW#?@xMONJANSUN"
    chars = list(text)
    for _ in range(rng.randint(1, 2)):
        op = rng.random()
        pos = rng.randint(0, len(chars))
        if op < 0.4 and chars:
            chars[min(pos, len(chars) - 1)] = rng.choice(alphabet)
        elif op < 0.7:
            chars.insert(pos, rng.choice(alphabet))
        elif chars:
            del chars[min(pos, len(chars) - 1)]
    return "".join(chars)


def transitions(tz, year):
    """Unix times of the UTC offset changes of tz during a year."""
    out = []
    t = int(dt.datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(dt.datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    step = 86400
    off = dt.datetime.fromtimestamp(t, tz).utcoffset()
    while t < end:
        n = t + step
        noff = dt.datetime.fromtimestamp(n, tz).utcoffset()
        if noff != off:
            lo, hi = t, n
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if dt.datetime.fromtimestamp(mid, tz).utcoffset() == off:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
            off = noff
        t = n
    return out


def after_time(rng, tz):
    """A random `after` (Unix microseconds), often near a DST transition."""
    year = rng.choice([rng.randint(1970, 2040), rng.randint(1900, 2100),
                       rng.randint(2020, 2030)])
    if rng.random() < 0.6:
        ts = transitions(tz, year)
        if ts:
            t = rng.choice(ts) + rng.randint(-4 * 3600, 4 * 3600)
            us = rng.choice([0, 0, rng.randint(0, 999_999), 999_999])
            if rng.random() < 0.3:
                t -= t % 60
            return t * 1_000_000 + us
    t = int(dt.datetime(year, 1, 1, tzinfo=UTC).timestamp()) + \
        rng.randint(0, 365 * 86400)
    return t * 1_000_000 + rng.randint(0, 999_999)


def sql_literal(s):
    return "'" + s.replace("'", "''") + "'"


def ts_literal(us):
    d = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)
    return "'" + d.isoformat(sep=" ") + "+00'"


# ---------------------------------------------------------------- driver

SETUP = """
CREATE FUNCTION pg_temp.try_next(c text, a timestamptz, z text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RETURN coalesce(extract(epoch FROM jobq.cron_next(c, a, z))::bigint::text,
                    'none');
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN 'invalid';
END $$;
"""


def ask_server(cases):
    rows = ",\n".join(f"({i}, {sql_literal(c)}, {ts_literal(a)}::timestamptz, {sql_literal(z)})"
                      for i, (c, a, z) in enumerate(cases))
    sql = (SETUP + "SELECT i, pg_temp.try_next(c, a, z) FROM (VALUES\n" + rows +
           "\n) v(i, c, a, z) ORDER BY i;")
    out = subprocess.run(["psql", "-X", "-q", "-At", "-F", "|",
                          "-v", "ON_ERROR_STOP=1"],
                         input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("psql failed: " + out.stderr)
    result = {}
    for line in out.stdout.splitlines():
        i, v = line.split("|", 1)
        result[int(i)] = v
    return [result[i] for i in range(len(cases))]


def server_zones():
    out = subprocess.run(["psql", "-X", "-At", "-c",
                          "SELECT name FROM pg_catalog.pg_timezone_names"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("psql failed: " + out.stderr)
    return set(out.stdout.split())


def fmt(v):
    if v in ("none", "invalid"):
        return v
    return dt.datetime.fromtimestamp(int(v), UTC).isoformat(sep=" ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--batch", type=int, default=300)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"differential: {args.cases} cases, seed {seed}")

    zones = sorted(server_zones() & zoneinfo.available_timezones())
    zones = [z for z in zones if not z.startswith(("posix/", "right/"))]
    interesting = [z for z in INTERESTING_ZONES if z in zones]

    cases = []
    for _ in range(args.cases):
        z = rng.choice(interesting) if rng.random() < 0.6 else rng.choice(zones)
        c = expression(rng)
        if rng.random() < 0.15:
            c = mutate(rng, c)
        cases.append((c, after_time(rng, zoneinfo.ZoneInfo(z)), z))

    passed = failed = 0
    t_server = t_ref = 0.0
    for b in range(0, len(cases), args.batch):
        batch = cases[b:b + args.batch]
        t0 = time.time()
        got = ask_server(batch)
        t_server += time.time() - t0
        t0 = time.time()
        for (c, a, z), g in zip(batch, got):
            try:
                spec = parse(c)
            except Bad:
                want = "invalid"
            else:
                n = reference_next(spec, a, zoneinfo.ZoneInfo(z))
                want = "none" if n is None else str(n)
            if want == g:
                passed += 1
            else:
                failed += 1
                if failed <= 20:
                    print(f"DIFF: cron_next({c!r}, {ts_literal(a)}, {z!r}): "
                          f"server {fmt(g)}, reference {fmt(want)}")
        t_ref += time.time() - t0
    print(f"differential: server {t_server:.1f} s, reference {t_ref:.1f} s")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
