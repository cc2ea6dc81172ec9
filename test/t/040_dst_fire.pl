# The background worker fires a schedule across real DST transitions, on the
# server's own clock: no cron_next call, no faked time.
#
# The schedule's time zone is a POSIX TZ rule, which PostgreSQL's time-zone
# library (and so jobq.schedule) accepts, written for today: standard time is
# UTC, and daylight time (20 seconds ahead) starts a few seconds from now and
# ends 25 seconds later.  The schedule fires every 5 seconds of wall-clock
# time ('*/5 * * * * *').  The transitions fall on seconds ending in 2 or 7,
# so neither gap edge is itself a fire time.
#
# The expected fires come from a model written here, not from jobq's code:
# walk the clock second by second; a matching wall-clock time fires at the
# first second whose wall clock shows that time or later (CONTRACT.md), so
# times skipped by the gap fire once, together, when the gap ends, and times
# the overlap repeats fire at their first occurrence only.  The jobs the
# worker enqueued (their run_at is the fire time they stand for) must be
# exactly these fires.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $dst = 20;      # daylight time is this many seconds ahead of standard time
my $lead = 12;     # seconds from now to the gap, at least
my $summer = 25;   # seconds of daylight time
my $tail = 10;     # seconds watched after the overlap ends
my $step = 5;      # the schedule fires every $step seconds of wall-clock time

my $node = PostgreSQL::Test::Cluster->new('dst_fire');
$node->init;
# misfire_grace and run_all: a late worker on a busy machine still fires each
# time as such, so what is checked is which times fire, not how punctually
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.misfire_grace = 60s\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');

# whole seconds since 1970 on the database clock
my $now = $node->safe_psql('postgres', 'SELECT floor(extract(epoch FROM now()))::bigint');

# the gap starts at $t1 and the overlap at $t2, both in UTC seconds, both
# ending in 2 or 7 (5k + 2)
my $t1 = $now + $lead;
# never across a UTC midnight: on New Year's Eve the rule would put 2000-01-01
# 00:00 UTC into daylight time, and PostgreSQL refuses a zone whose clock
# is not at second 0 then (its test for leap seconds)
$t1 = int(($t1 + $summer + $dst + $step) / 86400) * 86400 + $step
  if int(($t1 - $step) / 86400) != int(($t1 + $summer + $dst + $step) / 86400);
$t1 += (2 - $t1 % $step) % $step;
my $t2 = $t1 + $summer;

# "hh:mm:ss" of $secs seconds
sub hms
{
	my ($secs) = @_;
	return sprintf('%d:%02d:%02d', int($secs / 3600), int($secs / 60) % 60, $secs % 60);
}

# The rule, as POSIX TZ: "JQS0JQD-0:00:20,n/start,n/end": day n counts from 0
# (Jan 1st), the start is given in standard time (= UTC), the end in daylight
# time, both on $t1's day.
my @tm = gmtime($t1);
my $yday = $tm[7];
my $midnight = $t1 - ($tm[2] * 3600 + $tm[1] * 60 + $tm[0]);
my $tz = sprintf('JQS0JQD-%s,%d/%s,%d/%s', hms($dst), $yday, hms($t1 - $midnight),
	$yday, hms($t2 + $dst - $midnight));
note "time zone $tz: gap at ", scalar(gmtime($t1)), " UTC, overlap at ",
  scalar(gmtime($t2)), " UTC";

# the schedule (at once: the gap must still be ahead), then the instant after
# which its fires are compared
$node->safe_psql('postgres', qq{
	SELECT jobq.schedule('dst', '*/$step * * * * *', 'k.dst', timezone => '$tz',
	                     misfire => 'run_all')});
my $from = $node->safe_psql('postgres', 'SELECT ceil(extract(epoch FROM now()))::bigint');
cmp_ok($from, '<', $t1 - $step, 'the schedule exists before the gap (else raise $lead)');
my $until = $t2 + $dst + $tail;

# PostgreSQL itself reads the rule as meant: the offset (wall clock - UTC)
# before, in and after daylight time
is($node->safe_psql('postgres', qq{
	SELECT string_agg((extract(epoch FROM to_timestamp(t) AT TIME ZONE '$tz') - t)::bigint::text,
	                  ',' ORDER BY t)
	  FROM unnest(ARRAY[$t1 - 1, $t1, $t2 - 1, $t2]::float8[]) t}),
	"0,$dst,$dst,0", 'PostgreSQL applies the POSIX rule: daylight time from the gap to the overlap');

# --- the model --------------------------------------------------------------

# wall-clock seconds at UTC second $s
sub wall
{
	my ($s) = @_;
	return $s + (($s >= $t1 && $s < $t2) ? $dst : 0);
}

# walk the clock: at each second, the matching wall-clock times it reaches for
# the first time fire, once, at that second
my @expected;
my $high = wall($from - 3 * $step);
for my $s ($from - 3 * $step + 1 .. $until)
{
	my $w = wall($s);
	next if $w <= $high;
	my $first = $high + 1;
	$first += ($step - $first % $step) % $step;    # first matching time > $high
	push @expected, $s if $first <= $w && $s > $from;
	$high = $w;
}

# the model says what the contract says, around each transition (t1 = 5k + 2:
# the last fire before the gap is at 5k; wall-clock 5k + 5 .. 5k + 20 are
# skipped; wall-clock 5k + 25 is at UTC 5k + 5; t2 = 5m + 2: wall-clock
# 5m + 5 .. 5m + 20 come again after t2)
sub around
{
	my ($lo, $hi) = @_;
	return join(' ', grep { $_ >= $lo && $_ <= $hi } @expected);
}
is(around($t1 - 7, $t1 + 8), join(' ', $t1 - 7, $t1 - 2, $t1, $t1 + 3, $t1 + 8),
	'model: the times in the gap fire once, together, when it ends');
is(around($t2 - 7, $t2 + 28), join(' ', $t2 - 7, $t2 - 2, $t2 + 23, $t2 + 28),
	'model: the times the overlap repeats do not fire again');

# --- a schedule made inside the overlap -------------------------------------

# While the overlap repeats wall-clock times that have already passed once, a
# new schedule must not fire them either (their first occurrence is gone):
# its first fire is the first matching time after the overlap, as for the
# schedule that lived through it.
ok($node->poll_query_until('postgres', "SELECT now() >= to_timestamp($t2)"),
	'the overlap has begun');
$node->safe_psql('postgres', qq{
	SELECT jobq.schedule('dst2', '*/$step * * * * *', 'k.dst2', timezone => '$tz',
	                     misfire => 'run_all')});
my $made = $node->safe_psql('postgres', 'SELECT floor(extract(epoch FROM now()))::bigint');
cmp_ok($made, '<', $t2 + $dst - $step,
	'the second schedule was made while repeated fire times were still ahead');

# --- the worker's fires -------------------------------------------------------

ok($node->poll_query_until('postgres', "SELECT now() > to_timestamp($until)"),
	'the clock passed the end of the watch');
ok($node->poll_query_until('postgres', qq{
	SELECT last_fire_at >= to_timestamp($until) FROM jobq.schedule WHERE name = 'dst'}),
	'the worker fired past the end of the watch');

my $fired = $node->safe_psql('postgres', qq{
	SELECT string_agg(extract(epoch FROM run_at)::bigint::text, ' ' ORDER BY run_at)
	  FROM jobq.job
	 WHERE kind = 'k.dst' AND run_at > to_timestamp($from) AND run_at <= to_timestamp($until)});
is($fired, join(' ', @expected),
	'the worker fired exactly the wall-clock times of the model (UTC seconds)')
  or diag('gap at ' . $t1 . ', overlap at ' . $t2);

ok($node->poll_query_until('postgres', qq{
	SELECT last_fire_at >= to_timestamp($until - $step) FROM jobq.schedule WHERE name = 'dst2'}),
	'the worker fired the second schedule up to the end of the watch');
is($node->safe_psql('postgres', qq{
	SELECT string_agg(extract(epoch FROM run_at)::bigint::text, ' ' ORDER BY run_at)
	  FROM jobq.job WHERE kind = 'k.dst2' AND run_at <= to_timestamp($until)}),
	join(' ', grep { $_ > $made } @expected),
	'the schedule made inside the overlap fired none of the repeated times');

# readable, in the zone: the fire that ends the gap, none in the overlap
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM jobq.job WHERE kind = 'k.dst' AND run_at = to_timestamp($t1)}),
	'1', 'one job fired at the instant the gap ends (a time that is no fire time of the cron)');
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM jobq.job
	 WHERE kind = 'k.dst' AND run_at >= to_timestamp($t2) AND run_at < to_timestamp($t2 + $dst)}),
	'0', 'no job for the wall-clock times the overlap repeats');
is($node->safe_psql('postgres', qq{
	SELECT count(*) = count(DISTINCT (run_at AT TIME ZONE '$tz'))
	   AND count(*) = count(DISTINCT idempotency_key)
	   AND bool_and(created_at >= run_at)
	  FROM jobq.job WHERE kind = 'k.dst'}),
	't', 'each wall-clock time fired at most once, each job its own key, none before its time');

$node->stop;
done_testing();
