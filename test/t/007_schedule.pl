# Cron schedules fire from the background worker: the fire times are those
# of the cron in the schedule's time zone, as an independent reference
# computes them (test/cron/reference.py: its own cron parser, Python's
# zoneinfo; never jobq.cron_next, the scheduler's own code), each fire time
# fires once, and none is skipped.  The fire latency (created_at - run_at)
# is reported, not asserted.  Pausing stops fires; at resume the missed
# times follow the misfire policy.  A crash in the middle of a fire (of the
# jobq worker, and of the postmaster) fires no time twice, and leaves no gap
# that the misfire policy does not explain.
#
# jobq.misfire_grace is 60 s until the postmaster crash: a fire that is late
# on a loaded machine still counts as on time, so a gap in the fires means a
# hang, not a slow round.  The postmaster crash needs a downtime longer than
# the grace, so it runs with the default grace of 5 s.
#
# Otherwise stock settings: the default jobq.naptime, jit, and fsync set
# back on (PostgreSQL::Test::Cluster turns it off) since the server crashes.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use File::Basename qw(dirname);
use Cwd qw(abs_path);
use IPC::Run;

my $grace = 60;          # jobq.misfire_grace until the postmaster crash
my $crash_grace = 5;     # and from then on (the default)

my $node = PostgreSQL::Test::Cluster->new('schedule');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.misfire_grace = $grace\nfsync = on\n"
	  # PostgreSQL::Test::Cluster turns it off; the crash below needs it
	  . "restart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');

# The pid of the jobq worker of database postgres, once there is one.
sub worker_pid
{
	$node->poll_query_until(
		'postgres', q{
		SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'})
	  or die 'no jobq worker for database postgres';
	return $node->safe_psql('postgres', q{
		SELECT pid FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'});
}

# The idempotency key of the fire of schedule $id at the SQL timestamptz
# expression $t.
sub key_sql
{
	my ($id, $t) = @_;
	return qq{('jobq:schedule:' || $id || ':'
	           || ((extract(epoch FROM $t) - 946684800) * 1000000)::bigint)};
}

# The independent reference: the fire times of a cron in a zone between two
# instants, by the rules of test/cron/reference.py (its own cron parser,
# Python's zoneinfo, its mapping of wall-clock times to instants).  Its
# reference_next walks three hours of wall-clock time for every answer (half
# a second for an every-second cron), so the fire times of a whole window
# are listed at once: every wall-clock time that matches, from three hours
# before the window to three hours after it, mapped to its instant, kept if
# in the window.  The first of them is checked against reference_next
# itself.
my $reference_dir = abs_path(dirname(__FILE__) . '/../cron');
-r "$reference_dir/reference.py" or die "no $reference_dir/reference.py";
my $reference_py = q{
import sys, zoneinfo
sys.path.insert(0, sys.argv[1])
import reference as r
for line in sys.stdin:
    cron, zone, lo, hi = line.rstrip("\n").split("\t")
    lo, hi = int(lo), int(hi)                 # microseconds since 1970
    tz = zoneinfo.ZoneInfo(zone)
    spec = r.parse(cron)                      # raises on a bad expression
    assert not spec.every
    tods = {h * 3600 + m * 60 + s for h in spec.sets[2]
            for m in spec.sets[1] for s in spec.sets[0]}
    days = {}
    fires = set()
    for L in range(r.local_seconds(lo // 1000000, tz) - 3 * 3600,
                   r.local_seconds(hi // 1000000 + 1, tz) + 3 * 3600):
        if L % 86400 not in tods:
            continue
        day = L // 86400
        if day not in days:
            days[day] = r.day_matches(spec, r.naive(day * 86400).date())
        if days[day]:
            f = r.first_instant(L, tz)
            if lo < f * 1000000 <= hi:
                fires.add(f)
    fires = sorted(fires)
    check = r.reference_next(spec, lo, tz)
    if check is not None and check * 1000000 > hi:
        check = None
    if check != (fires[0] if fires else None):
        sys.exit(f"window {lo}..{hi} of {cron!r} in {zone}: first fire "
                 f"{fires[0] if fires else None}, reference_next says {check}")
    print(" ".join(str(f * 1000000) for f in fires))
};

# The reference's fire times (microseconds since 1970) of cron $cron in zone
# $zone after $lo and up to $hi (microseconds since 1970).
sub reference_fires
{
	my ($cron, $zone, $lo, $hi) = @_;
	my $in = "$cron\t$zone\t$lo\t$hi\n";
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'python3', '-c', $reference_py, $reference_dir ],
		'<', \$in, '>', \$out, '2>', \$err)
	  or die "the reference failed: $err";
	chomp $out;
	return split / /, $out;
}

# The fires of a schedule, for the reference: its cron, zone and creation
# time (microseconds since 1970) and the run_at of its jobs (microseconds,
# in order).
sub schedule_fires
{
	my ($name) = @_;
	my ($cron, $zone, $created) = split /\|/,
	  $node->safe_psql(
		'postgres', qq{
		SELECT cron, timezone, (extract(epoch FROM created_at) * 1000000)::bigint
		  FROM jobq.schedule WHERE name = '$name'});
	my @run_at = split /\n/,
	  $node->safe_psql(
		'postgres', qq{
		SELECT (extract(epoch FROM j.run_at) * 1000000)::bigint
		  FROM jobq.job j JOIN jobq.schedule s ON s.kind = j.kind
		 WHERE s.name = '$name' ORDER BY j.run_at});
	return ($cron, $zone, $created, @run_at);
}

# 't' if every run_at of the schedule's jobs is a fire time of its cron by
# the reference; else the first that is not.
sub fire_times_by_reference
{
	my ($name) = @_;
	my ($cron, $zone, $created, @run_at) = schedule_fires($name);
	return 'no fires' unless @run_at;
	my %fire = map { $_ => 1 } reference_fires($cron, $zone, $run_at[0] - 1, $run_at[-1]);
	foreach my $t (@run_at)
	{
		return "run_at $t us is no fire time of '$cron' in $zone by the reference"
		  unless $fire{$t};
	}
	return 't';
}

# What every fire of a schedule must satisfy, as one line of booleans (all
# 't' when it holds): run_at values distinct and each a whole second, keys
# distinct and naming the schedule and the fire time, no job created before
# its fire time; and, by the reference, each run_at a fire time of the cron
# in the zone (else what is wrong).
sub fires_sane
{
	my ($name) = @_;
	my $key = key_sql('s.schedule_id', 'j.run_at');
	my $sane = $node->safe_psql(
		'postgres', qq{
		SELECT count(DISTINCT j.run_at) = count(*),
		       count(DISTINCT j.idempotency_key) = count(*),
		       bool_and(date_trunc('second', j.run_at) = j.run_at),
		       bool_and(j.idempotency_key = $key),
		       bool_and(j.created_at >= j.run_at)
		  FROM jobq.job j JOIN jobq.schedule s ON s.kind = j.kind
		 WHERE s.name = '$name'});
	return $sane . '|' . fire_times_by_reference($name);
}

my $all_true = 't|t|t|t|t|t';

#
# on time: every second, every other second, and in Asia/Kathmandu
#
worker_pid();

# Kathmandu is UTC+05:45.  The third schedule fires every other second during
# the current and the next minute of Kathmandu's wall clock; read as UTC
# those minutes are others, so its fires show that the zone is applied.
my $ktm_minute = $node->safe_psql('postgres',
	q{SELECT extract(minute FROM now() AT TIME ZONE 'Asia/Kathmandu')::int});
my $ktm_cron = sprintf('*/2 %d,%d * * * *', $ktm_minute, ($ktm_minute + 1) % 60);

# jobq.schedule() reads the clock once and fires the times after that
# reading; the reading lies between the schedule's created_at (the
# transaction's start) and the clock_timestamp() taken just after the call.
# A fire time between those two may go either way on a loaded machine; each
# one after the second reading must fire.
my %scheduled_by;    # name => microseconds since 1970, just after the call
foreach my $s (
	[ 'sec', '* * * * * *',   '' ],
	[ 'two', '*/2 * * * * *', '' ],
	[ 'ktm', $ktm_cron,       ", timezone => 'Asia/Kathmandu'" ])
{
	my ($name, $cron, $more) = @$s;
	my @out = split /\n/,
	  $node->safe_psql(
		'postgres', qq{
		SELECT jobq.schedule('$name', '$cron', '$name'$more);
		SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint});
	$scheduled_by{$name} = $out[-1];
}

ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) FILTER (WHERE kind = 'sec') >= 5
	   AND count(*) FILTER (WHERE kind = 'two') >= 3
	   AND count(*) FILTER (WHERE kind = 'ktm') >= 3
	  FROM jobq.job}),
	'the three schedules fire');

foreach my $name ('sec', 'two', 'ktm')
{
	is(fires_sane($name), $all_true, "$name: each fire time once, whole seconds of the cron");

	# No fire time skipped, by the reference: the fires are every fire time
	# after the schedule was created up to the last one (those before the
	# clock reading just after jobq.schedule() returned may be absent: see
	# %scheduled_by).
	my ($cron, $zone, $created, @run_at) = schedule_fires($name);
	my @want = reference_fires($cron, $zone, $created, $run_at[-1]);
	shift @want while @want && $want[0] < $run_at[0] && $want[0] <= $scheduled_by{$name};
	is_deeply(\@run_at, \@want,
		"$name: the fires are the reference's fire times from the schedule's creation on");

	my ($n, $max_ms, $avg_ms) = split /\|/,
	  $node->safe_psql(
		'postgres', qq{
		SELECT count(*),
		       round(extract(epoch FROM max(created_at - run_at)) * 1000, 1),
		       round(extract(epoch FROM avg(created_at - run_at)) * 1000, 1)
		  FROM jobq.job WHERE kind = '$name'});
	diag(sprintf('fire latency (created_at - run_at) of %s over %d fires: max %s ms, avg %s ms',
		$name, $n, $max_ms, $avg_ms));
}

is( $node->safe_psql(
		'postgres',
		sprintf(q{
	SELECT count(*) FROM jobq.job
	 WHERE kind = 'ktm'
	   AND extract(minute FROM run_at AT TIME ZONE 'Asia/Kathmandu')::int NOT IN (%d, %d)},
			$ktm_minute, ($ktm_minute + 1) % 60)),
	'0', 'ktm: every fire in one of the two minutes of Kathmandu wall-clock time');

cmp_ok(
	$node->safe_psql(
		'postgres', q{
	SELECT fired FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'>=', 10,
	'jobq.workers counts the fires');

$node->safe_psql('postgres',
	q{SELECT jobq.unschedule(n) FROM unnest(ARRAY['sec', 'two', 'ktm']) n});

#
# pause, and resume with each misfire policy
#
$node->safe_psql(
	'postgres', q{
	SELECT jobq.schedule('p_' || m, '* * * * * *', 'p_' || m, misfire => m)
	  FROM unnest(ARRAY['skip', 'run_once', 'run_all']) m});
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(DISTINCT kind) = 3 FROM jobq.job WHERE kind LIKE 'p\_%'}),
	'the p_ schedules fire');

$node->safe_psql('postgres',
	q{SELECT jobq.pause_schedule(n) FROM unnest(ARRAY['p_skip', 'p_run_once', 'p_run_all']) n});
# the last fire of each before the pause
my %last;
foreach my $m ('skip', 'run_once', 'run_all')
{
	$last{$m} = $node->safe_psql('postgres',
		"SELECT max(run_at) FROM jobq.job WHERE kind = 'p_$m'");
}
my $jobs_at_pause = $node->safe_psql('postgres',
	q{SELECT count(*) FROM jobq.job WHERE kind LIKE 'p\_%'});

# Let four fire times pass.
$node->poll_query_until(
	'postgres', qq{
	SELECT clock_timestamp() > greatest('$last{skip}'::timestamptz, '$last{run_once}',
	                                    '$last{run_all}') + interval '4.2 s'})
  or die 'the clock stands still';
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM jobq.job WHERE kind LIKE 'p\_%'}),
	$jobs_at_pause, 'paused schedules fire nothing');
foreach my $m ('skip', 'run_once', 'run_all')
{
	is( $node->safe_psql(
			'postgres', qq{
		SELECT paused, next_fire_at = '$last{$m}'::timestamptz + interval '1 s',
		       last_fire_at = '$last{$m}'
		  FROM jobq.schedule WHERE name = 'p_$m'}),
		't|t|t', "p_$m: paused, its next fire is the one after its last");
}

# Resume one schedule and look at its jobs in the same transaction: its row
# stays locked until commit, so the worker cannot fire it meanwhile.  R, the
# time of the resume, is between before and after.
sub resume_and_look
{
	my ($m, $look) = @_;
	my $out = $node->safe_psql(
		'postgres', qq{
		BEGIN;
		SELECT clock_timestamp() AS before \\gset
		SELECT jobq.resume_schedule('p_$m');
		SELECT clock_timestamp() AS after \\gset
		$look
		COMMIT;
	});
	my ($resumed, @rest) = split /\n/, $out;
	is($resumed, 't', "p_$m: resume_schedule returns true");
	return join("\n", @rest);
}

my $offset = -s $node->logfile;

# skip: nothing fires; the next fire is the first after R
is( resume_and_look(
		'skip', qq{
		SELECT (SELECT count(*) FROM jobq.job WHERE kind = 'p_skip' AND run_at > '$last{skip}'),
		       next_fire_at > :'before' AND next_fire_at <= :'after'::timestamptz + interval '1 s',
		       last_fire_at = '$last{skip}', paused
		  FROM jobq.schedule WHERE name = 'p_skip';}),
	'0|t|t|f',
	'p_skip: resume fires none of the missed times');

# run_once: one job, for the latest missed time (the last whole second before R)
is( resume_and_look(
		'run_once', qq{
		SELECT count(*), min(run_at) = date_trunc('second', min(created_at)),
		       min(created_at) BETWEEN :'before' AND :'after',
		       min(run_at) >= '$last{run_once}'::timestamptz + interval '4 s'
		  FROM jobq.job WHERE kind = 'p_run_once' AND run_at > '$last{run_once}';}),
	'1|t|t|t',
	'p_run_once: resume fires one job, for the latest missed time');

# run_all: one job for each second from the last fire to R
my ($all_check, $all_missed) = split /\n/,
  resume_and_look(
	'run_all', qq{
	SELECT count(*) = extract(epoch FROM date_trunc('second', min(created_at))
	                                     - '$last{run_all}'::timestamptz)::int,
	       count(DISTINCT run_at) = count(*),
	       min(run_at) = '$last{run_all}'::timestamptz + interval '1 s',
	       max(run_at) = date_trunc('second', min(created_at)),
	       min(created_at) = max(created_at) AND min(created_at) BETWEEN :'before' AND :'after'
	  FROM jobq.job WHERE kind = 'p_run_all' AND run_at > '$last{run_all}';
	SELECT count(*) FROM jobq.job WHERE kind = 'p_run_all' AND run_at > '$last{run_all}';});
is($all_check, 't|t|t|t|t',
	'p_run_all: resume fires one job for each missed second, together');
cmp_ok($all_missed, '>=', 4, "p_run_all: $all_missed missed times fired");
ok( $node->wait_for_log(
		qr/schedule "p_run_all" missed $all_missed fire times; misfire policy run_all fired $all_missed/,
		$offset),
	'p_run_all: the missed round is logged');
ok( $node->log_contains(
		qr/schedule "p_run_once" missed \d+ fire times; misfire policy run_once fired 1/, $offset),
	'p_run_once: the missed round is logged');
ok( $node->log_contains(
		qr/schedule "p_skip" missed \d+ fire times; misfire policy skip fired 0/, $offset),
	'p_skip: the missed round is logged');

# After resume each fires on time again.
my $resumed_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
ok( $node->poll_query_until(
		'postgres', qq{
	SELECT bool_and(EXISTS (SELECT FROM jobq.job j
	                         WHERE j.kind = s.kind
	                           AND j.run_at > '$resumed_at'::timestamptz + interval '1 s'))
	  FROM jobq.schedule s WHERE s.name LIKE 'p\\_%'}),
	'after resume the schedules fire again');
foreach my $m ('skip', 'run_once', 'run_all')
{
	is(fires_sane("p_$m"), $all_true, "p_$m: each fire time once, whole seconds of the cron");
	# fires after resume are on time, one per second
	is( $node->safe_psql(
			'postgres', qq{
		WITH f AS (
			SELECT j.run_at, j.created_at, lag(j.run_at) OVER (ORDER BY j.run_at) AS prev
			  FROM jobq.job j JOIN jobq.schedule s ON s.kind = j.kind
			 WHERE s.name = 'p_$m' AND j.run_at > '$resumed_at')
		SELECT bool_and(prev IS NULL OR run_at = prev + interval '1 s')
		  FROM f}),
		't', "p_$m: after resume, fires every second");
	diag("p_$m: after resume, fire latency max "
		  . $node->safe_psql(
			'postgres', qq{
			SELECT round(extract(epoch FROM max(created_at - run_at)) * 1000, 1)
			  FROM jobq.job WHERE kind = 'p_$m' AND run_at > '$resumed_at'})
		  . ' ms');
}
$node->safe_psql('postgres',
	q{SELECT jobq.unschedule(n) FROM unnest(ARRAY['p_skip', 'p_run_once', 'p_run_all']) n});

#
# crashes while firing
#
# An every-second schedule fires.  A session reserves the idempotency key of
# a fire time two seconds ahead in an open transaction: when the worker fires
# that time its enqueue waits for that session, in the middle of its firing
# transaction (the schedule row locked, the jobs of the other schedules of
# the round enqueued).  Then the crash.
$node->safe_psql(
	'postgres', q{
	SELECT jobq.schedule('crash', '* * * * * *', 'crash', misfire => 'run_once');
	SELECT jobq.schedule('crash_all', '* * * * * *', 'crash_all', misfire => 'run_all');
});
my ($crash_id) = $node->safe_psql('postgres',
	q{SELECT schedule_id FROM jobq.schedule WHERE name = 'crash'});

# Block the worker's fire of schedule crash; returns the session and the
# blocked fire time (timestamptz, and seconds since the epoch), once the
# worker was seen waiting for the key or giving up its wait (lock_timeout)
# to try again next round.  On a
# machine so busy that the worker came to that time more than
# jobq.misfire_grace late, its misfire policy (run_once) skipped it and
# nothing waits: the key is given back and a later time blocked instead.
sub block_next_fire
{
	my $blocker = $node->background_psql('postgres', on_error_stop => 0);
	my $key = key_sql($crash_id, 'x.t');
	for my $try (1 .. 10)
	{
		# the fire time is read and its key taken in one statement: however
		# slow the machine, the worker cannot have fired that time before
		my $offset = -s $node->logfile;
		$blocker->query_safe('BEGIN');
		my ($t, $t_epoch) = split /\|/,
		  $blocker->query_safe(qq{
			WITH x AS (SELECT date_trunc('second', clock_timestamp()) + interval '2 s' AS t),
			     k AS (INSERT INTO jobq.idempotency_key (kind, key, job_id)
			           SELECT 'crash', $key, 0 FROM x RETURNING key)
			SELECT x.t, extract(epoch FROM x.t) FROM x, k});
		my $waits = 0;
		for (1 .. 600)
		{
			$waits = $node->safe_psql(
				'postgres', q{
				SELECT count(*) FROM pg_stat_activity
				 WHERE backend_type = 'jobq worker' AND wait_event_type = 'Lock'});
			last if $waits;
			# its fire waited out its lock_timeout (100 ms) and is retried
			# each round until the key is free: it is in its fire of $t
			# between the tries too
			$waits = $node->log_contains(
				qr/firing schedule "crash" failed: canceling statement due to lock timeout/, $offset);
			last if $waits;
			# passed over: the schedule fired a time after $t
			last if $node->safe_psql(
				'postgres', qq{
				SELECT count(*) FROM jobq.job WHERE kind = 'crash' AND run_at > '$t'::timestamptz});
			Time::HiRes::usleep(100_000);
		}
		if ($waits)
		{
			pass("the worker waits in its fire of $t");
			return ($blocker, $t, $t_epoch);
		}
		diag("the worker did not wait in its fire of $t (it fired a later time: too late for"
			  . " jobq.misfire_grace on this machine); blocking another ($try of 10)");
		$blocker->query_safe('ROLLBACK');
	}
	fail('the worker waits in a blocked fire');
	return ($blocker, undef, undef);
}

# Check the fires of both schedules after a crash at fire time $t, with
# jobq.misfire_grace $g: each time at most once; every gap in the fires is
# one misfire catch-up: the job after the gap fired as the latest missed
# time (more than grace late, less than grace + 1 s) in the same round as
# the on-time fire after it.  Schedule crash (run_once) has no gap when
# $t_missed is false, and a gap over $t when it is true; crash_all
# (run_all) never has one.
sub check_after_crash
{
	my ($what, $t, $g, $t_missed) = @_;

	ok( $node->poll_query_until(
			'postgres', qq{
		SELECT count(*) = 2 FROM (
			SELECT kind FROM jobq.job
			 WHERE kind IN ('crash', 'crash_all')
			   AND run_at > '$t'::timestamptz + interval '1 s'
			 GROUP BY kind HAVING count(*) >= 2) k}),
		"$what: the schedules fire again after the crash");

	foreach my $name ('crash', 'crash_all')
	{
		is(fires_sane($name), $all_true, "$what: $name: no fire time twice");
		my ($n, $gaps, $bad_gaps, $detail, $over_t) = split /\|/,
		  $node->safe_psql(
			'postgres', qq{
			WITH f AS (
				SELECT run_at, created_at,
				       lead(run_at) OVER w AS next_run_at,
				       lead(created_at) OVER w AS next_created,
				       lead(created_at, 2) OVER w AS next2_created,
				       lead(run_at, 2) OVER w AS next2_run_at
				  FROM jobq.job WHERE kind = '$name' WINDOW w AS (ORDER BY run_at))
			SELECT count(*),
			       count(*) FILTER (WHERE next_run_at > run_at + interval '1 s'),
			       count(*) FILTER (WHERE next_run_at > run_at + interval '1 s'
			           AND NOT (next_created - next_run_at > interval '$g s'
			                    AND next_created - next_run_at <= interval '$g s' + interval '1 s'
			                    AND next2_run_at = next_run_at + interval '1 s'
			                    AND next2_created = next_created)),
			       COALESCE(string_agg(to_char(run_at, 'HH24:MI:SS') || ' -> '
			                           || to_char(next_run_at, 'HH24:MI:SS'), ', ')
			                  FILTER (WHERE next_run_at > run_at + interval '1 s'), 'none'),
			       count(*) FILTER (WHERE run_at < '$t' AND next_run_at > '$t')
			  FROM f});
		diag("$what: $name: $n fires, gaps: $detail");
		if ($name eq 'crash' && $t_missed)
		{
			is($over_t, '1', "$what: $name: the missed fire time $t is in a gap (a run_once catch-up)");
			is($bad_gaps, '0', "$what: $name: a gap is a run_once catch-up of the latest missed time");
		}
		elsif ($name eq 'crash')
		{
			is($gaps, '0', "$what: $name: no gap, the fire time $t too fired after the crash");
		}
		else
		{
			is($gaps, '0', "$what: $name: run_all leaves no gap");
		}
	}
}

# (a) kill -9 of the jobq worker in its fire
{
	ok( $node->poll_query_until(
			'postgres', q{SELECT count(*) >= 2 FROM jobq.job WHERE kind = 'crash'}),
		'a: the crash schedule fires');
	my $worker = worker_pid();
	my ($blocker, $t) = block_next_fire();
	my $offset = -s $node->logfile;
	kill 'KILL', $worker;
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$offset);
	ok( $node->log_contains(
			qr/background worker "jobq worker" \(PID $worker\) was terminated by signal 9/,
			$offset),
		'a: the postmaster saw the jobq worker die');
	$blocker->{run}->finish;
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'server did not come back';
	# back within the grace: every fire time fires, no gap
	check_after_crash('a', $t, $grace, 0);
}

# From here on the default grace: the postmaster crash below outlasts it.
$node->safe_psql('postgres', qq{
	ALTER SYSTEM SET jobq.misfire_grace = $crash_grace;
	SELECT pg_reload_conf();
});
ok($node->poll_query_until('postgres', 'SHOW jobq.misfire_grace', "${crash_grace}s"),
	"jobq.misfire_grace reloaded to $crash_grace s");

# (b) kill -9 of the postmaster while the worker is in its fire
{
	my ($blocker, $t, $t_epoch) = block_next_fire();
	my @pids = split /\n/,
	  $node->safe_psql('postgres', 'SELECT pid FROM pg_stat_activity');
	my $postmaster = $node->{_pid};
	$node->kill9;
	foreach my $pid ($postmaster, @pids)
	{
		foreach (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
		{
			last unless kill(0, $pid);
			usleep(100_000);
		}
		die "server process $pid did not exit" if kill(0, $pid);
	}
	$blocker->{run}->finish;
	# down for longer than the grace: the blocked fire time and the next are
	# missed; run_once fires the latest of them only (a gap), run_all each
	usleep(100_000) while time() < $t_epoch + $crash_grace + 1.5;
	$node->start;
	check_after_crash('b', $t, $crash_grace, 1);
}

$node->stop;
done_testing();
