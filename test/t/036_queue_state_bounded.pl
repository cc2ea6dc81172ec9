# The claim positions in shared memory stay within jobq.max_tracked_queues.
#
# Every queue a claim touches gets an entry in a shared hash table (its claim
# position, its condition variable).  A shared hash table grows past the size
# it was made with into the server's spare shared memory, the slack the lock
# table needs when a transaction takes many locks.  A role that administers
# queues in its own database could so make thousands of queues, claim once
# in each, and leave sessions of every other database failing with "out of
# shared memory" (a hostile review's find).  Past jobq.max_tracked_queues a
# queue now has no entry: its claims scan from the head of the queue and its
# waiting claims poll; nothing else changes for it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('tracked');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.max_tracked_queues = 16\n");
$node->start;

foreach my $db (qw(tenant victim))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION jobq');
}
$node->safe_psql('tenant', q{
	CREATE ROLE dba LOGIN;
	SELECT jobq.grant('*', 'dba', 'administer');});

# The server's spare shared memory, in bytes.
sub spare
{
	return $node->safe_psql('victim',
		'SELECT allocated_size FROM pg_shmem_allocations WHERE name IS NULL');
}

# 3,000 queues with a job each, enqueued and claimed by the tenant's role,
# 100 queues a transaction (few locks at a time: the lock table does not grow)
my $before = spare();
my $claimed = 0;
for (my $from = 1; $from <= 3000; $from += 100)
{
	my $to = $from + 99;
	$claimed += $node->safe_psql('tenant', qq{
		SET ROLE dba;
		SELECT count(*) FROM generate_series($from, $to) g,
		       LATERAL jobq.enqueue('x', '{}', 'spam' || g);
		SELECT count(*) FROM generate_series($from, $to) g,
		       LATERAL jobq.claim('spam' || g);});
	$claimed =~ s/.*\n//;
}
is($claimed, 3000, 'every queue past the 16 tracked ones works: 3,000 jobs claimed');
my $after = spare();
note "spare shared memory: $before bytes before, $after after";
cmp_ok($before - $after, '<', 64 * 1024,
	'the spare shared memory is left to the server (under 64 kB taken)');

# another database's transaction takes 5,000 locks, as it could before
is( $node->safe_psql('victim', q{
		BEGIN;
		DO $$ BEGIN FOR i IN 1..5000 LOOP EXECUTE format('CREATE TEMP TABLE t%s (a int)', i); END LOOP; END $$;
		SELECT count(*) >= 5000 FROM pg_locks WHERE pid = pg_backend_pid();
		ROLLBACK;}),
	't', 'another database can still take 5,000 locks in one transaction');

# a queue with no entry waits and gets a job enqueued meanwhile (by polling)
my ($out, $err) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('tenant'),
	  '-c', q{SELECT kind FROM jobq.claim('late', wait => '30 s')} ],
	'>', \$out, '2>', \$err);
$node->poll_query_until('tenant', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE query LIKE '%jobq.claim(%wait%' AND wait_event_type = 'Extension'
	   AND pid <> pg_backend_pid()})
  or die 'the waiting claim never started to wait';
$node->safe_psql('tenant', q{SELECT jobq.enqueue('ping', '{}', 'late')});
$h->finish;
is($out, "ping\n", 'a waiting claim on an untracked queue gets the job enqueued while it waited');

$node->stop;
done_testing();
