# Misfires across a clean stop: three every-second schedules (skip, run_once,
# run_all) miss the fire times that pass while the server is down.  At the
# first round after the start, the times within jobq.misfire_grace fire on
# time; the older ones follow the policy: skip fires none, run_once one job
# for the latest, run_all one job for each, at most jobq.misfire_max_fires
# (the latest ones).  Then the schedules fire normally again (the fire
# latency is reported, not asserted).
#
# Stock settings otherwise: the default jobq.naptime, jit on, and fsync on
# over PostgreSQL::Test::Cluster's fsync = off.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# The grace is 10 s, ten times the worker's naptime: a round that is late on
# a loaded machine still fires on time, so a gap in the fires after the
# start means a hang, not a slow round.  The downtime outlasts it by 5.5 s,
# so that at least 4 fire times are missed.
my $grace = 10;
my $downtime = $grace + 5.5;    # seconds between the stop and the start

my $node = PostgreSQL::Test::Cluster->new('misfire');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.misfire_grace = $grace\nfsync = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');

my @policies = ('skip', 'run_once', 'run_all');
$node->safe_psql(
	'postgres', q{
	SELECT jobq.schedule('m_' || m, '* * * * * *', 'm_' || m, misfire => m)
	  FROM unnest(ARRAY['skip', 'run_once', 'run_all']) m});

# Stop the server for $downtime seconds once each schedule fired twice since
# the last start; start again, and wait until the worker did its first round
# and two more rounds fired each schedule.
sub down_and_up
{
	my ($extra_conf) = @_;
	ok( $node->poll_query_until(
			'postgres', q{
		SELECT count(*) = 3 FROM (
			SELECT kind FROM jobq.job WHERE created_at >= pg_postmaster_start_time()
			 GROUP BY kind HAVING count(*) >= 2) k}),
		'the schedules fire before the stop');
	$node->stop;
	my $stopped = time();
	$node->append_conf('postgresql.conf', $extra_conf) if $extra_conf;
	usleep(100_000) while time() < $stopped + $downtime;
	my $offset = -s $node->logfile;
	$node->start;
	ok( $node->poll_query_until(
			'postgres', q{
		SELECT count(*) = 1 FROM jobq.workers
		 WHERE role = 'worker' AND database = 'postgres' AND last_run_at IS NOT NULL}),
		'the jobq worker runs after the start');
	ok( $node->poll_query_until(
			'postgres', q{
		SELECT count(*) = 3 FROM (
			SELECT kind FROM jobq.job WHERE created_at >= pg_postmaster_start_time()
			 GROUP BY kind HAVING count(DISTINCT created_at) >= 3) k}),
		'the schedules fire again after the start');
	return $offset;
}

# For one schedule, after a start: L, its last fire before the stop; N, the
# time of its first round after the start (the created_at of the jobs that
# round enqueued); the missed times are those after L and older than the
# grace at N, the on-time ones those within the grace.  Returns
#   missed: how many times were missed,
#   fired: the missed times fired, as offsets in seconds from the latest
#          missed one (0 = the latest), oldest first,
#   on_time: whether the first round fired each on-time time,
#   after: whether every fire after the first round is the next second,
#   distinct: whether no run_at appears twice,
#   latency: the largest created_at - run_at of the fires after the first
#            round, in ms (reported only).
sub misfires
{
	my ($name) = @_;
	my @r = split /\|/,
	  $node->safe_psql(
		'postgres', qq{
		WITH pre AS (
			SELECT max(run_at) AS l FROM jobq.job
			 WHERE kind = '$name' AND created_at < pg_postmaster_start_time()),
		post AS (
			SELECT run_at, created_at FROM jobq.job
			 WHERE kind = '$name' AND created_at >= pg_postmaster_start_time()),
		g AS (
			SELECT l, n, n - interval '$grace s' AS grace_start,
			       date_trunc('second', n - interval '$grace s' - interval '1 microsecond')
			         AS latest_missed
			  FROM pre, (SELECT min(created_at) AS n FROM post) r)
		SELECT extract(epoch FROM g.latest_missed - g.l)::int,
		       COALESCE((SELECT string_agg(extract(epoch FROM g.latest_missed - p.run_at)::int::text,
		                                   ',' ORDER BY p.run_at)
		                   FROM post p WHERE p.run_at < g.grace_start), ''),
		       (SELECT count(*) FROM post p
		         WHERE p.run_at >= g.grace_start AND p.run_at <= g.n AND p.created_at = g.n)
		         = extract(epoch FROM date_trunc('second', g.n) - g.latest_missed)::int
		         AND (SELECT bool_and(p.created_at = g.n) FROM post p WHERE p.run_at <= g.n),
		       (SELECT bool_and(p.run_at = p.prev + interval '1 s')
		          FROM (SELECT run_at, lag(run_at) OVER (ORDER BY run_at) AS prev
		                  FROM post) p
		         WHERE p.run_at > g.n),
		       (SELECT count(DISTINCT run_at) = count(*) FROM jobq.job WHERE kind = '$name'),
		       (SELECT round(extract(epoch FROM max(p.created_at - p.run_at)) * 1000, 1)
		          FROM post p WHERE p.run_at > g.n)
		  FROM g});
	return { missed => $r[0], fired => $r[1], on_time => $r[2], after => $r[3],
		distinct => $r[4], latency => $r[5] };
}

sub check_round
{
	my ($what, $offset, $max_fires) = @_;
	foreach my $m (@policies)
	{
		my $r = misfires("m_$m");
		diag("$what: m_$m missed $r->{missed}, fired the missed at offsets ($r->{fired}); "
			  . "then fire latency max $r->{latency} ms");
		cmp_ok($r->{missed}, '>=', 4, "$what: m_$m: at least 4 fire times missed while down");
		my $fired = $m eq 'skip' ? 0 : $m eq 'run_once' ? 1 : $r->{missed};
		$fired = $max_fires if $fired > $max_fires;
		my $expected = join(',', reverse(0 .. $fired - 1));
		is($r->{fired}, $expected,
			  "$what: m_$m: "
			  . ($m eq 'skip' ? 'no missed time fired'
				: $m eq 'run_once' ? 'one job, for the latest missed time'
				: "the latest $fired missed times fired, one job each"));
		is($r->{on_time}, 't', "$what: m_$m: the first round fires the times within the grace");
		is($r->{after}, 't', "$what: m_$m: then it fires every second");
		is($r->{distinct}, 't', "$what: m_$m: no fire time twice");
		ok( $node->log_contains(
				qr/schedule "m_$m" missed $r->{missed} fire times; misfire policy $m fired $fired\b/,
				$offset),
			"$what: m_$m: the missed round is logged");
	}
}

# jobq.misfire_max_fires = 100 (the default): run_all fires every missed time
my $offset = down_and_up();
check_round('max_fires 100', $offset, 100);

# jobq.misfire_max_fires = 3: run_all fires the latest three only
$offset = down_and_up("jobq.misfire_max_fires = 3\n");
is($node->safe_psql('postgres', 'SHOW jobq.misfire_max_fires'), '3', 'misfire_max_fires is 3');
check_round('max_fires 3', $offset, 3);

$node->stop;
done_testing();
