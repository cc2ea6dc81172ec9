# More databases than worker slots, on a stock server: 60 databases with jobq
# on PostgreSQL's max_worker_processes = 8 (only shared_preload_libraries is
# added; jit stays on).  jobq.max_workers (4) is far below 60, so the
# launcher serves the databases in turn from the shared pool.  Each
# database has a job whose worker vanished holding a 1-second lease and a
# schedule due every minute.  Every lease must be reaped and every schedule
# fired within a bound (the target at the default jobq.naptime is 10 s; the
# test allows 60 s, to catch starvation, not to measure), the server log must
# hold only a handful of jobq lines, and jobq.service must say how each
# database is served.  JOBQ_MANY_DBS sets the number of databases (the
# closing note's 200-database run uses it).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $ndb = $ENV{JOBQ_MANY_DBS} // 60;
my $bound = 60;    # seconds

my $node = PostgreSQL::Test::Cluster->new('many');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "jit = on\nmax_worker_processes = 8\n");
$node->start;

# the databases: made from one template with jobq in it, so that creating
# 60 of them is quick (the template has no worker: jobq.databases skips it)
$node->safe_psql('postgres', "ALTER SYSTEM SET jobq.databases = 'none_yet'");
$node->reload;
$node->safe_psql('postgres', 'CREATE DATABASE many_tpl');
$node->safe_psql('many_tpl', 'CREATE EXTENSION jobq');
my @dbs = map { sprintf('many%03d', $_) } 1 .. $ndb;
my $t0 = time;
$node->safe_psql('postgres', "CREATE DATABASE $_ TEMPLATE many_tpl") foreach @dbs;
note sprintf('created %d databases in %.1f s', $ndb, time - $t0);

# in each: a job claimed under a 1-second lease by a worker that is gone,
# and a schedule due every minute
foreach my $db (@dbs)
{
	$node->safe_psql(
		$db, q{
		SELECT jobq.enqueue('abandoned', '{}');
		SELECT count(*) FROM jobq.claim(worker_id => 'gone', lease => '1 second',
		                                kinds => ARRAY['abandoned']);
		SELECT jobq.schedule('tick', '* * * * *', 'tick', '{}');
	});
}

# serve every database, from now
my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'ALTER SYSTEM RESET jobq.databases');
$node->reload;
my $start = time;

# the first minute boundary after the schedules were made: every database
# fires at it
my $boundary = $node->safe_psql('postgres',
	"SELECT extract(epoch FROM date_trunc('minute', now()) + interval '1 minute')");

my (%reaped_at, %fired_at);
my $deadline = $boundary + $bound + 5;
while (time < $deadline && (keys %reaped_at < $ndb || keys %fired_at < $ndb))
{
	foreach my $db (@dbs)
	{
		next if $reaped_at{$db} && $fired_at{$db};
		my ($reaped, $fired) = split /\|/, $node->safe_psql(
			$db, q{
			SELECT (SELECT count(*) FROM jobq.job WHERE kind = 'abandoned' AND status <> 'running'),
			       (SELECT count(*) FROM jobq.job WHERE kind = 'tick')});
		$reaped_at{$db} //= time if $reaped > 0;
		$fired_at{$db} //= time if $fired > 0;
	}
	usleep(500_000);
}

is(scalar(keys %reaped_at), $ndb, "the abandoned lease of every one of $ndb databases is reaped");
is(scalar(keys %fired_at), $ndb, "the schedule of every one of $ndb databases fires");
my @reap = sort { $a <=> $b } map { $_ - $start } values %reaped_at;
my @fire = sort { $a <=> $b } map { $_ - $boundary } values %fired_at;
if (@reap)
{
	note sprintf('reap delay after serving began: median %.1f s, max %.1f s', $reap[ $#reap / 2 ], $reap[-1]);
	cmp_ok($reap[-1], '<', $bound, "every lease reaped within $bound s (target 10 s)");
}
if (@fire)
{
	note sprintf('fire delay after the minute: median %.1f s, max %.1f s', $fire[ $#fire / 2 ], $fire[-1]);
	cmp_ok($fire[-1], '<', $bound, "every schedule fired within $bound s (target 10 s)");
}

# jobq.service says how each database is served
is( $node->safe_psql($dbs[0], 'SELECT served_by FROM jobq.service'),
	'shared pool', 'jobq.service: the first database is served by the shared pool');
like($node->safe_psql($dbs[-1], 'SELECT delay < interval \'1 minute\' FROM jobq.service'),
	qr/^t$/, 'jobq.service: the last database has no long delay');

# the log: a handful of lines about serving the databases, not one a
# second (the reaper's line per reaped job, a schedule's line for a fire
# later than jobq.misfire_grace, and the test's own statements, aside)
my $log = slurp_file($node->logfile, $offset);
my @jobq_lines =
  grep { /^\d{4}-\d\d-\d\d / && /jobq/ && !/statement: |lease of job \d+ expired|parameter "jobq\.|missed \d+ fire time/ }
  split /\n/, $log;
note "jobq log lines while serving: " . scalar(@jobq_lines);
note $_ foreach @jobq_lines[ 0 .. ($#jobq_lines < 9 ? $#jobq_lines : 9) ];
cmp_ok(scalar(@jobq_lines), '<=', 10, 'the server log holds at most 10 jobq lines');
unlike($log, qr/could not start a worker/, 'no "could not start a worker" line');

# no more jobq processes than jobq.max_workers (and the launcher)
my $procs = $node->safe_psql('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('jobq worker', 'jobq executor')");
cmp_ok($procs, '<=', 4, "at most jobq.max_workers (4) jobq processes ($procs now)");

# a crash with more databases than slots: every database holds a job whose
# lease runs out while the server is down; after the crash recovery every
# one of them is reaped (the launcher knows nothing then and probes them all
# in turn, none first for ever)
foreach my $db (@dbs)
{
	$node->safe_psql(
		$db, q{
		SELECT jobq.enqueue('crashed', '{}');
		SELECT count(*) FROM jobq.claim(worker_id => 'gone', lease => '1 second',
		                                kinds => ARRAY['crashed']);
	});
}
my $crash_offset = -s $node->logfile;
$node->stop('immediate');
$node->start;
my $restart = time;
# the launcher knows from its state file where jobq is, instead of probing
# every database again (the template is one of them)
ok( $node->wait_for_log(
		qr/jobq launcher: @{[ $ndb + 1 ]} databases with jobq and \d+ without, from file "pg_jobq.state"/,
		$crash_offset),
	'after the crash the launcher knows from pg_jobq.state which databases have jobq');
my %after_crash;
while (time < $restart + $bound + 5 && keys %after_crash < $ndb)
{
	foreach my $db (@dbs)
	{
		next if $after_crash{$db};
		$after_crash{$db} = time
		  if $node->safe_psql($db,
			"SELECT count(*) FROM jobq.job WHERE kind = 'crashed' AND status <> 'running'") > 0;
	}
	usleep(500_000);
}
is(scalar(keys %after_crash), $ndb, "after a crash, the lease of every one of $ndb databases is reaped");
my @crash = sort { $a <=> $b } map { $_ - $restart } values %after_crash;
if (@crash)
{
	note sprintf('reap delay after the restart: median %.1f s, max %.1f s', $crash[ $#crash / 2 ], $crash[-1]);
	cmp_ok($crash[-1], '<', $bound, "every lease reaped within $bound s of the restart");
}
my $running = 0;
$running += $node->safe_psql($_,
	"SELECT count(*) FROM jobq.job WHERE status = 'running' AND lease_expires_at < now() - interval '$bound seconds'")
  foreach @dbs;
is($running, 0, "no job stays running with a lease expired over $bound s ago in any database");

$node->stop;
done_testing();
