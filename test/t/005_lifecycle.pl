# The jobq workers follow the extension and the databases: a worker exits
# when the extension is dropped and is back when it is created again (the
# commit wakes the launcher: the periodic re-check, the only other way, is
# set to a day; how long it took is reported); every database with jobq
# gets a worker of its own; DROP DATABASE, CREATE DATABASE ... TEMPLATE and
# ALTER DATABASE ... RENAME never fail because of a jobq worker; and
# jobq.databases restricts the databases served.
#
# Stock settings otherwise: PostgreSQL's defaults (jit on, fsync on over
# PostgreSQL::Test::Cluster's fsync = off, max_worker_processes 8: five
# databases with jobq at most, with the launcher) and jobq's (naptime 1 s).
# Every wait is a poll with the TAP suite's generous timeout, which only
# catches a hang.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('lifecycle');
$node->init;
# jobq.database_recheck_interval is a day: a worker that appears for a
# database where jobq was not installed was started because something woke
# the launcher, not by the periodic re-check.
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.database_recheck_interval = '1d'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "fsync = on\njit = on\nmax_worker_processes = 8\n");
$node->start;

# Poll a query until it returns 't' (poll_query_until's deadline, which
# only catches a hang); returns the time it took, or undef on timeout.
sub poll_within
{
	my ($db, $query) = @_;
	my $start = time();
	return $node->poll_query_until($db, $query) ? time() - $start : undef;
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
ok(defined poll_within('postgres', worker_running_query('postgres')),
	'CREATE EXTENSION: a worker serves database postgres');
my $first = worker_pids('postgres');
is( $node->safe_psql(
		'postgres', q{SELECT pid FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	$first, 'jobq.workers shows the same worker');

my $offset = -s $node->logfile;
$node->safe_psql('postgres', 'DROP EXTENSION jobq');
ok(defined poll_within('postgres', no_worker_query('postgres')),
	'DROP EXTENSION: the worker exits');
ok( $node->log_contains(
		qr/jobq worker exiting: the extension is no longer installed/, $offset),
	'the worker logs why it exits');
ok($node->safe_psql('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'jobq launcher'}) eq 't',
	'the launcher keeps running');

$node->safe_psql('postgres', 'CREATE EXTENSION jobq');
my $took = poll_within('postgres', worker_running_query('postgres'));
ok(defined $took,
	'CREATE EXTENSION again: a worker serves database postgres again (woken at commit)');
diag(sprintf('worker back %.2f s after CREATE EXTENSION', $took // -1));
isnt(worker_pids('postgres'), $first, 'it is a new worker');

# And it works: an expired lease in postgres is reaped.
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('p');
	SELECT count(*) FROM jobq.claim(lease => '100 ms');
});
ok(defined poll_within('postgres', q{SELECT status = 'pending' FROM jobq.job WHERE kind = 'p'}),
	'the new worker reaps an expired lease in postgres');

#
# a second database gets its own worker
#
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION jobq');
ok(defined poll_within('postgres', worker_running_query('other')),
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
ok(defined poll_within('other', q{SELECT status = 'pending' FROM jobq.job WHERE kind = 'o'}),
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
ok(defined poll_within('postgres', worker_running_query('tmpl')),
	'database tmpl with jobq has a worker');

run_ok('postgres', 'CREATE DATABASE copy TEMPLATE tmpl',
	'CREATE DATABASE ... TEMPLATE a database whose jobq worker runs succeeds');
is($node->safe_psql('copy', q{SELECT kind FROM jobq.job}),
	'copied', 'the copy has the template\'s jobs');
ok(defined poll_within('postgres', worker_running_query('copy')),
	'the copy gets a worker of its own');

my $copy_worker = worker_pids('copy');
run_ok('postgres', 'ALTER DATABASE copy RENAME TO renamed',
	'ALTER DATABASE ... RENAME of a database whose jobq worker runs succeeds');
is($node->safe_psql('postgres', qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $copy_worker}),
	'0', 'the worker was terminated for the rename');

# The template's worker was terminated for the copy; it comes back after the
# launcher's restart delay (5 s).  Drop the database while it runs.
ok(defined poll_within('postgres', worker_running_query('tmpl')),
	'the worker of tmpl is back');
run_ok('postgres', 'DROP DATABASE tmpl',
	'DROP DATABASE of a database whose jobq worker runs succeeds');
ok(defined poll_within('postgres', worker_running_query('renamed')),
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
ok( defined poll_within('postgres', q{
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
		defined poll_within('postgres', qq{
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
ok(defined poll_within('postgres', no_worker_query('other')),
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
ok(defined poll_within('postgres', worker_running_query('other')),
	'with jobq.databases reset, database other has a worker again');

$node->stop;
done_testing();
