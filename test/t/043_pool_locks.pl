# The shared pool serves every database while some of them cannot be
# served (a review's finds), on a stock server (only shared_preload_libraries
# and jobq settings added; jit on):
#
# 1. Locked: in as many databases as jobq.max_workers, a session holds
#    jobq.job locked (LOCK TABLE ... ACCESS EXCLUSIVE, as a VACUUM FULL does,
#    also when it only waits behind a tenant's open transaction) and an
#    expired lease is due there.  Every other database's expired lease is
#    reaped while the locks are held (before: each pass in a locked database
#    waited for its lock without end, and with every place of the pool so
#    taken nothing was reaped anywhere for as long as the locks lasted); the
#    locked databases are served once the locks go.  The wait is logged
#    once per database, and once more when a pass works again.
# 2. Many expired leases: two tenants each have 50,000 expired leases, and
#    the victims' leases expire a moment later.  Each victim is reaped while
#    an attacking database still has expired leases left (before: a pass
#    reaped its database whole, and held its place in the pool until done).
#    The test checks that order, from the times the reaps wrote, not a time.
# 3. Planner settings a database's owner may set (ALTER DATABASE ... SET
#    enable_indexscan = off and the like) do not reach the worker: its
#    statements are planned on PostgreSQL's defaults (auto_explain, set for
#    that database only, shows the reaper's plan there).
#
# The target is a lease reaped within 5 s of its expiry; the test allows 60 s
# (a loaded 2-core machine) and reports the delays it saw.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $bound = 60;
my $pool_workers = 2;
my $nmass = $ENV{JOBQ_POOL_MASS} // 50000;

my $node = PostgreSQL::Test::Cluster->new('pool_locks');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq,auto_explain'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "jit = on\nmax_worker_processes = 8\n"
	  . "jobq.max_workers = $pool_workers\njobq.naptime = 200ms\n");
$node->start;
$node->safe_psql('postgres', 'CREATE ROLE tenant LOGIN; CREATE ROLE victim LOGIN');

my @attackers = qw(att1 att2);
my @victims = map { "vic$_" } 1 .. 4;
foreach my $db (@attackers, @victims)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
		CREATE EXTENSION jobq;
		SELECT jobq.grant('t', 'tenant', 'administer');
		SELECT jobq.grant('v', 'victim', 'administer');
	});
}

# a job of $kind in queue $queue of $db claimed by a worker that is gone,
# under a lease of $lease; the lease's expiry (epoch)
sub gone_lease
{
	my ($db, $queue, $kind, $lease) = @_;
	return $node->safe_psql($db, qq{
		SELECT count(*) FROM jobq.enqueue('$kind', queue => '$queue', max_retries => 3);
		SELECT extract(epoch FROM lease_expires_at)
		  FROM jobq.claim('$queue', 'gone', lease => '$lease', kinds => ARRAY['$kind']);
	}) =~ s/.*\n//sr;
}

# seconds from the expiry of the lease of $kind in $db to its reap (undef:
# not within $bound)
sub reap_delay
{
	my ($db, $kind, $expires) = @_;
	my $t0 = time;
	while (time - $t0 < $bound + 2)
	{
		my $at = $node->safe_psql($db, qq{
			SELECT extract(epoch FROM max(a.finished_at)) FROM jobq.attempt a JOIN jobq.job j USING (job_id)
			 WHERE j.kind = '$kind' AND a.outcome = 'lease expired'});
		return $at - $expires if $at ne '';
		select(undef, undef, undef, 0.2);
	}
	return undef;
}

ok($node->poll_query_until('vic1', q{SELECT served_by = 'shared pool' FROM jobq.service}),
	'six databases, two places: the shared pool serves them');

# --- 1. locked databases ---------------------------------------------------
my $log_from = -s $node->logfile;
my %lock;
foreach my $db (@attackers)
{
	gone_lease($db, 't', 'locked', '1 second');
	$lock{$db} = $node->background_psql($db, on_error_stop => 1);
	$lock{$db}->query_safe('BEGIN');
	$lock{$db}->query_safe('LOCK TABLE jobq.job IN ACCESS EXCLUSIVE MODE');
}
my %expires = map { $_ => gone_lease($_, 'v', 'victim', '1 second') } @victims;
my @delays;
foreach my $db (@victims)
{
	my $d = reap_delay($db, 'victim', $expires{$db});
	ok(defined $d && $d < $bound, "locked: $db is reaped while two databases hold jobq.job locked");
	push @delays, $d // -1;
}
note sprintf('locked (jobq.max_workers = %d): victim leases reaped %s s after expiry',
	$pool_workers, join(', ', map { sprintf '%.2f', $_ } @delays));
foreach my $db (@attackers)
{
	$lock{$db}->query_safe('COMMIT');
	$lock{$db}->quit;
}
foreach my $db (@attackers)
{
	ok($node->poll_query_until($db, q{
			SELECT count(*) = 1 FROM jobq.attempt a JOIN jobq.job j USING (job_id)
			 WHERE j.kind = 'locked' AND a.outcome = 'lease expired'}),
		"locked: once the lock goes, $db\'s lease is reaped");
}
my $log = slurp_file($node->logfile, $log_from);
foreach my $db (@attackers)
{
	my $waits = () =
	  $log =~ /a pass of the worker of database "$db" failed: canceling statement due to lock timeout/g;
	is($waits, 1, "locked: the wait is logged once, naming $db");
	like($log, qr/a pass of the worker of database "$db" works again/, "locked: and that $db\'s passes work again");
}

# a lock on pg_extension (a database-wide VACUUM FULL waiting behind a
# tenant's transaction) stops the pool's first look at the database: the
# pass ends quietly, logged once (it ended with an ERROR and exit code 1,
# every pass: a review's find)
$log_from = -s $node->logfile;
gone_lease('att1', 't', 'catlocked', '1 second');
my $catlock = $node->background_psql('att1', on_error_stop => 1);
$catlock->query_safe('BEGIN');
$catlock->query_safe('LOCK TABLE pg_catalog.pg_extension IN ACCESS EXCLUSIVE MODE');
%expires = map { $_ => gone_lease($_, 'v', 'cat', '1 second') } @victims;
foreach my $db (@victims)
{
	my $d = reap_delay($db, 'cat', $expires{$db});
	ok(defined $d && $d < $bound, "catalog: $db is reaped while att1's pg_extension is locked");
}
sleep 2;
$catlock->query_safe('COMMIT');
$catlock->quit;
$log = slurp_file($node->logfile, $log_from);
is(scalar(() = $log =~ /jobq worker\[\d+\] ERROR|background worker "jobq worker" \(PID \d+\) exited with exit code 1/g),
	0, 'catalog: no pass ends with an error');
is(scalar(() = $log =~ /a pass of the worker of database "att1" failed: canceling statement due to lock timeout/g),
	1, 'catalog: the wait is logged once');
ok($node->poll_query_until('att1', q{
		SELECT count(*) = 1 FROM jobq.attempt a JOIN jobq.job j USING (job_id)
		 WHERE j.kind = 'catlocked' AND a.outcome = 'lease expired'}),
	"catalog: once the lock goes, att1's lease is reaped");

# --- 2. many expired leases ---------------------------------------------
# the attackers' leases expire together; the victims' half a second later,
# while the attackers' are being reaped
foreach my $db (@attackers)
{
	$node->safe_psql($db, qq{
		SELECT count(*) FROM jobq.enqueue_many('mass', array_fill('{}'::jsonb, ARRAY[$nmass]), queue => 't')});
}
$log_from = -s $node->logfile;
my $mass_expires = time + 15;
foreach my $db (@attackers)
{
	$node->safe_psql($db, sprintf(q{
		SET jobq.max_batch = 100000;
		SELECT count(*) FROM jobq.claim('t', 'gone', batch => %d, lease => '%.3f seconds', kinds => ARRAY['mass'])},
		$nmass, $mass_expires - time));
}
%expires = map { $_ => gone_lease($_, 'v', 'late', sprintf('%.3f seconds', $mass_expires + 0.5 - time)) } @victims;
foreach my $db (@victims)
{
	my $d = reap_delay($db, 'late', $expires{$db});
	ok(defined $d && $d < $bound, "mass: $db is reaped");
}
my $last_mass = 0;
foreach my $db (@attackers)
{
	ok($node->poll_query_until($db, q{
			SELECT NOT EXISTS (SELECT FROM jobq.jobs WHERE kind = 'mass' AND status = 'running')}),
		"mass: $db\'s expired leases are all reaped");
	my $at = $node->safe_psql($db, q{
		SELECT extract(epoch FROM max(a.finished_at)) FROM jobq.attempt a JOIN jobq.job j USING (job_id)
		 WHERE j.kind = 'mass' AND a.outcome = 'lease expired'});
	$last_mass = $at if $at > $last_mass;
}
$log = slurp_file($node->logfile, $log_from);
my $each = () = $log =~ /jobq: lease of job \d+ expired; job is now pending/g;
my $summed = 0;
$summed += $1 while $log =~ /jobq: (\d+) more leases of queue "t" expired/g;
ok($each + $summed == 2 * $nmass + @victims && $each <= 2 * $nmass / 10,
	"mass: the reaps are logged, the first of each batch one by one ($each lines), the rest summed ($summed)");
my @before;
foreach my $db (@victims)
{
	my $at = $node->safe_psql($db, q{
		SELECT extract(epoch FROM a.finished_at) FROM jobq.attempt a JOIN jobq.job j USING (job_id)
		 WHERE j.kind = 'late' AND a.outcome = 'lease expired'});
	push @before, $last_mass - $at;
}
ok((grep { $_ > 0 } @before) == @victims,
	'mass: each victim is reaped before the attackers\' last expired lease');
note sprintf('mass: %d expired leases in each of two databases, reaped until %.2f s after they expired;'
	  . ' the victims were reaped %s s before that', $nmass, $last_mass - $mass_expires,
	join(', ', map { sprintf '%.2f', $_ } @before));

# --- 3. planner settings of a database -----------------------------------
$node->safe_psql('postgres', q{
	ALTER DATABASE att1 SET enable_indexscan = off;
	ALTER DATABASE att1 SET enable_bitmapscan = off;
	ALTER DATABASE att1 SET enable_indexonlyscan = off;
	ALTER DATABASE att1 SET auto_explain.log_min_duration = 0;
	ALTER DATABASE att1 SET auto_explain.log_nested_statements = on;
});
is($node->safe_psql('att1', 'SHOW enable_indexscan'), 'off', "planner: att1's sessions have its settings");
$log_from = -s $node->logfile;
my $probe = gone_lease('att1', 't', 'probe', '1 second');
ok(defined reap_delay('att1', 'probe', $probe), "planner: att1's lease is reaped");
$log = slurp_file($node->logfile, $log_from);
my @plans = grep { /Query Text: SELECT q\.name, q\.breaker_threshold IS NOT NULL/ } split /\n(?=\S)/, $log;
ok(@plans > 0, "planner: auto_explain shows the reaper's plans in att1 (" . scalar(@plans) . ')');
is(scalar(grep { /Seq Scan on job/ } @plans), 0,
	"planner: none reads jobq.job whole (index scans, whatever att1 sets)")
  or diag($plans[0]);

$node->stop;
done_testing();
