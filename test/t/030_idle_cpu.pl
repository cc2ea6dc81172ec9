# Idle cost on a stock server: four databases with jobq installed (as many as
# jobq.max_workers: each has a worker of its own; more are served in turn by
# the shared pool, which test 061 covers), each with
# some finished jobs and nothing to do.  The CPU time of the jobq launcher and
# workers (utime + stime from /proc/<pid>/stat) is read over a window of
# about 20 s; any jobq process that used more than 2 % of a core fails.  The
# target is far lower (an idle database should cost under 0.1 % of a core):
# this is a guard against gross regressions such as a statement JIT-compiled
# on every round of the worker, not a measurement of the target, which the
# diag lines report.
#
# Stock settings: only shared_preload_libraries is added to PostgreSQL's
# defaults (jit = on, jobq.naptime 1 s, max_worker_processes = 8), and fsync
# is set back on over PostgreSQL::Test::Cluster's fsync = off.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use POSIX ();
use Time::HiRes qw(time usleep);

my $ndb = 4;
my $window = 20;       # seconds of measurement
my $limit_pct = 2;     # of one core, per process

-r '/proc/self/stat' or die 'no /proc/self/stat: cannot read CPU ticks';

my $node = PostgreSQL::Test::Cluster->new('idle');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "fsync = on\njit = on\nmax_worker_processes = 8\n");
$node->start;
is($node->safe_psql('postgres', 'SHOW jit'), 'on', 'jit is on, as by default');

# Each database: jobq, 100 finished jobs (completed and failed), and an
# analyze so that the worker's statements are planned from real statistics.
my @dbs = map { "idle$_" } 1 .. $ndb;
foreach my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql(
		$db, q{
		CREATE EXTENSION jobq;
		SELECT count(*) FROM jobq.enqueue_many('done',
			(SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, 100) i),
			max_retries => 0);
		SELECT count(*) FROM (
			SELECT CASE WHEN c.job_id % 10 = 0
			            THEN jobq.fail(c.job_id, c.lease_token, 'boom') IS NOT NULL
			            ELSE jobq.complete(c.job_id, c.lease_token) END
			  FROM jobq.claim(batch => 100) c) x;
		ANALYZE;
	});
	is( $node->safe_psql(
			$db,
			q{SELECT string_agg(status || '=' || n, ',' ORDER BY status)
			    FROM (SELECT status, count(*) n FROM jobq.job GROUP BY status) s}),
		'completed=90,failed=10',
		"$db: 100 finished jobs, nothing pending or running");
}

# A worker for each database, and each has done rounds since it started.
my $dblist = join(', ', map { "'$_'" } @dbs);
ok( $node->poll_query_until(
		'postgres', qq{
	SELECT count(*) = $ndb FROM pg_stat_activity
	 WHERE backend_type = 'jobq worker' AND datname IN ($dblist)}),
	"a jobq worker runs for each of the $ndb databases");
my $since = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
foreach my $db (@dbs)
{
	ok( $node->poll_query_until(
			$db, qq{
		SELECT last_run_at > '$since' FROM jobq.workers
		 WHERE role = 'worker' AND database = '$db'}),
		"$db: its worker runs its rounds");
}

# The jobq processes: pid and what they are.
my %what = map { split /\|/ } split /\n/,
  $node->safe_psql(
	'postgres', q{
	SELECT pid, backend_type || coalesce(' ' || datname, '') FROM pg_stat_activity
	 WHERE backend_type LIKE 'jobq %' ORDER BY pid});
my @pids = sort { $a <=> $b } keys %what;
cmp_ok(scalar(@pids), '>=', $ndb + 1, 'the launcher and the workers are found: ' . join(', ', map { "$_ ($what{$_})" } @pids));

# utime + stime of a process, in clock ticks (fields 14 and 15 of
# /proc/<pid>/stat, counted after the parenthesised command name).
sub cpu_ticks
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return undef;
	my $line = <$fh>;
	close $fh;
	$line =~ s/^.*\) // or return undef;
	my @f = split / /, $line;
	# $f[0] is field 3 (state): utime is field 14, stime field 15
	return $f[11] + $f[12];
}

my $hz = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
my %t0 = map { $_ => cpu_ticks($_) } @pids;
my $start = time();
usleep(100_000) while time() < $start + $window;
my %t1 = map { $_ => cpu_ticks($_) } @pids;
my $elapsed = time() - $start;

# The same processes at the end: a process that exited (and maybe was
# started again) would make its numbers meaningless.
my %still = map { split /\|/ } split /\n/,
  $node->safe_psql(
	'postgres', q{
	SELECT pid, backend_type || coalesce(' ' || datname, '') FROM pg_stat_activity
	 WHERE backend_type LIKE 'jobq %' ORDER BY pid});
is_deeply(\%still, \%what, 'the same jobq processes ran through the measurement');

my $total = 0;
foreach my $pid (@pids)
{
	if (!defined $t0{$pid} || !defined $t1{$pid})
	{
		fail("pid $pid ($what{$pid}): CPU ticks could not be read");
		next;
	}
	my $ticks = $t1{$pid} - $t0{$pid};
	my $pct = 100.0 * $ticks / $hz / $elapsed;
	$total += $pct;
	diag(sprintf('%s (pid %d): %d ticks in %.1f s = %.2f %% of a core',
			$what{$pid}, $pid, $ticks, $elapsed, $pct));
	cmp_ok(sprintf('%.2f', $pct), '<=', $limit_pct,
		"$what{$pid}: idle, it uses at most $limit_pct % of a core");
}
diag(sprintf('all jobq processes together: %.2f %% of a core, %.3f %% per idle database',
		$total, $total / $ndb));

$node->stop;
done_testing();
