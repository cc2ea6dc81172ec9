# The jobq workers follow the extension and the databases: a worker exits
# when the extension is dropped and is back within seconds when it is
# created again (the commit wakes the launcher); every database with jobq
# gets a worker of its own; DROP DATABASE, CREATE DATABASE ... TEMPLATE and
# ALTER DATABASE ... RENAME never fail because of a jobq worker; and
# jobq.databases restricts the databases served.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('lifecycle');
$node->init;
# jobq.database_recheck_interval stays at its default (60 s): a worker that
# appears within a few seconds was started because something woke the
# launcher, not by the periodic re-check.
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.prune_interval = 1s\n");
$node->start;

# Poll a query until it returns 't', for at most $seconds; returns the time
# it took, or undef (with a diag of the last result) on timeout.
sub poll_within
{
	my ($seconds, $db, $query) = @_;
	my $start = time();
	my ($result, $stdout, $stderr);
	while (time() - $start < $seconds)
	{
		($result, $stdout, $stderr) = $node->psql($db, $query);
		return time() - $start if $result == 0 && $stdout eq 't';
		usleep(50_000);
	}
	diag("poll timed out after $seconds s: $query\nlast output: $stdout\nstderr: $stderr");
	return undef;
}

# pids of the jobq workers serving a database, from pg_stat_activity (works
# in every database, with or without the extension)
sub worker_pids
{
	my ($db) = @_;
	return $node->safe_psql(
		'postgres', qq{
		SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
		 WHERE backend_type = 'jobq worker' AND datname = '$db'});
}

sub worker_running_query
{
	my ($db) = @_;
	return qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE backend_type = 'jobq worker' AND datname = '$db'};
}

sub no_worker_query
{
	my ($db) = @_;
	return qq{
		SELECT count(*) = 0 FROM pg_stat_activity
		 WHERE backend_type = 'jobq worker' AND datname = '$db'};
}

# Run a statement, expecting success and no error output.
sub run_ok
{
	my ($db, $sql, $name) = @_;
	my ($ret, $stdout, $stderr) = $node->psql($db, $sql);
	is($ret, 0, $name);
	is($stderr, '', "$name: no error");
}

#
# DROP EXTENSION / CREATE EXTENSION
#
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');
ok(defined poll_within(10, 'postgres', worker_running_query('postgres')),
	'CREATE EXTENSION: a worker serves database postgres');
my $first = worker_pids('postgres');
is( $node->safe_psql(
		'postgres', q{SELECT pid FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	$first, 'jobq.workers shows the same worker');

my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'DROP EXTENSION jobq');
ok(defined poll_within(10, 'postgres', no_worker_query('postgres')),
	'DROP EXTENSION: the worker exits');
ok( $node->log_contains(
		qr/jobq worker exiting: the extension is no longer installed/, $offset),
	'the worker logs why it exits');
ok($node->safe_psql('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'jobq launcher'}) eq 't',
	'the launcher keeps running');

$node->safe_psql('postgres', 'CREATE EXTENSION jobq');
my $took = poll_within(10, 'postgres', worker_running_query('postgres'));
ok(defined $took, 'CREATE EXTENSION again: a worker serves database postgres again');
diag(sprintf('worker back %.2f s after CREATE EXTENSION', $took // -1));
cmp_ok($took // 99, '<', 3,
	'it came within 3 s (woken at commit; the re-check interval is 60 s)');
isnt(worker_pids('postgres'), $first, 'it is a new worker');

# And it works: an expired lease in postgres is reaped.
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('p');
	SELECT count(*) FROM jobq.claim(lease => '100 ms');
});
ok(defined poll_within(10, 'postgres', q{SELECT status = 'pending' FROM jobq.job WHERE kind = 'p'}),
	'the new worker reaps an expired lease in postgres');

#
# a second database gets its own worker
#
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION jobq');
ok(defined poll_within(10, 'postgres', worker_running_query('other')),
	'database other with jobq gets a worker of its own');
isnt(worker_pids('other'), worker_pids('postgres'),
	'a different process from the worker of postgres');
is( $node->safe_psql(
		'postgres', q{
	SELECT string_agg(database, ',' ORDER BY database) FROM jobq.workers WHERE role = 'worker'}),
	'other,postgres', 'jobq.workers lists one worker per database');
$node->safe_psql('other', q{
	SELECT count(*) FROM jobq.enqueue('o');
	SELECT count(*) FROM jobq.claim(lease => '100 ms');
});
ok(defined poll_within(10, 'other', q{SELECT status = 'pending' FROM jobq.job WHERE kind = 'o'}),
	'the worker of other reaps there');
is( $node->safe_psql(
		'other', q{SELECT reaped FROM jobq.workers WHERE database = 'other'}),
	'1', 'and counts it against database other');

#
# commands that need a database to themselves
#
$node->safe_psql('postgres', 'CREATE DATABASE tmpl');
$node->safe_psql('tmpl', q{
	CREATE EXTENSION jobq;
	SELECT count(*) FROM jobq.enqueue('copied');
});
ok(defined poll_within(10, 'postgres', worker_running_query('tmpl')),
	'database tmpl with jobq has a worker');

run_ok('postgres', 'CREATE DATABASE copy TEMPLATE tmpl',
	'CREATE DATABASE ... TEMPLATE a database whose jobq worker runs succeeds');
is($node->safe_psql('copy', q{SELECT kind FROM jobq.job}),
	'copied', 'the copy has the template\'s jobs');
ok(defined poll_within(10, 'postgres', worker_running_query('copy')),
	'the copy gets a worker of its own');

my $copy_worker = worker_pids('copy');
run_ok('postgres', 'ALTER DATABASE copy RENAME TO renamed',
	'ALTER DATABASE ... RENAME of a database whose jobq worker runs succeeds');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $copy_worker}),
	'0', 'the worker was terminated for the rename');

# The template's worker was terminated for the copy; it comes back after the
# launcher's restart delay (5 s).  Drop the database while it runs.
ok(defined poll_within(15, 'postgres', worker_running_query('tmpl')),
	'the worker of tmpl is back');
run_ok('postgres', 'DROP DATABASE tmpl',
	'DROP DATABASE of a database whose jobq worker runs succeeds');
ok(defined poll_within(15, 'postgres', worker_running_query('renamed')),
	'the renamed database has its worker back');
run_ok('postgres', 'DROP DATABASE renamed',
	'DROP DATABASE of the renamed database while its worker runs succeeds');
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type = 'jobq worker' AND datname NOT IN ('postgres', 'other')}),
	'0', 'no worker is left for the dropped databases');

#
# jobq.databases
#
# Database other's worker has run for more than the launcher's restart delay
# (5 s) by now, so the launcher would start a new one at once if it wanted.
ok( defined poll_within(
		15, 'postgres', q{
	SELECT started_at < now() - interval '6 s' FROM jobq.workers
	 WHERE role = 'worker' AND database = 'other'}),
	'the worker of other has run for more than 6 s');

# Wait for the launcher to finish two more rounds after $since: the first of
# them may have read pg_database just before a reload.
sub launcher_rounds_after
{
	my ($since) = @_;
	foreach (1 .. 2)
	{
		defined poll_within(
			10, 'postgres', qq{
			SELECT last_run_at > '$since' FROM jobq.workers WHERE role = 'launcher'})
		  or die 'the launcher is not running its rounds';
		$since = $node->safe_psql('postgres',
			q{SELECT last_run_at FROM jobq.workers WHERE role = 'launcher'});
	}
}

my $reload_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET jobq.databases = 'postgres';
	SELECT pg_reload_conf();
});
launcher_rounds_after($reload_at);

# A worker whose database is no longer listed exits at its next round, and
# the launcher does not start another one.
ok(defined poll_within(10, 'postgres', no_worker_query('other')),
	'after the reload the worker of the unlisted database exits');
my $terminated_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
launcher_rounds_after($terminated_at);
ok($node->safe_psql('postgres', no_worker_query('other')) eq 't',
	'the launcher does not start a worker for the unlisted database');
ok($node->safe_psql('postgres', worker_running_query('postgres')) eq 't',
	'the listed database keeps its worker');

# Listing every database again brings the worker back: the check above
# could have seen one.
$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET jobq.databases;
	SELECT pg_reload_conf();
});
ok(defined poll_within(10, 'postgres', worker_running_query('other')),
	'with jobq.databases reset, database other has a worker again');

$node->stop;
done_testing();
