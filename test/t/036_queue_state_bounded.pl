# The claim positions in shared memory stay within jobq.max_tracked_queues,
# and the places go to the queues in use.
#
# Every queue a claim touches gets an entry in a shared hash table (its claim
# position, its condition variable).  A shared hash table grows past the size
# it was made with into the server's spare shared memory, the slack the lock
# table needs when a transaction takes many locks.  A role that administers
# queues in its own database could so make thousands of queues, claim once
# in each, and leave sessions of every other database failing with "out of
# shared memory" (a hostile review's find).  The table now stops at
# jobq.max_tracked_queues, and a new queue takes the place of one not used
# lately (a clock), unless a waiting claim holds it: the tenant's queues
# could otherwise keep every place until a restart, and other tenants'
# claims would read from the head of their queues (a later review's find).
# A queue with no place still works: its claims scan from the head of the
# queue and its waiting claims poll.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use POSIX ();

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

# A waiting claim cancelled inside a savepoint that is rolled back to (a
# statement timeout under a driver that wraps statements in savepoints)
# gives its place back at once: 20 sessions, more than the places, each with
# such a claim behind it and its transaction still open, while the other
# database's queue below looks for a place.  Each kept its place pinned
# until a restart (a review's find: one session could pin them all, in
# turn), and that queue then had none.
my @cancelled;
foreach my $i (1 .. 20)
{
	my $s = $node->background_psql('tenant', on_error_stop => 0);
	$s->query_safe('SET ROLE dba');
	$s->query_safe('BEGIN');
	$s->query_safe('SAVEPOINT s');
	$s->query_safe(q{SET LOCAL statement_timeout = '20ms'});
	$s->query(qq{SELECT count(*) FROM jobq.claim('pin$i', wait => '10 s')});
	$s->query('ROLLBACK TO s');
	push @cancelled, $s;
}
is($node->safe_psql('tenant', q{
	SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' AND datname = 'tenant'}),
	'20', '20 sessions hold a transaction in which a waiting claim was cancelled');

# utime + stime of a process, in clock ticks (/proc/<pid>/stat)
sub cpu_ticks
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $line = <$fh>;
	close $fh;
	$line =~ s/^.*\) // or return 0;
	my @f = split / /, $line;
	return $f[11] + $f[12];
}

# Executors with more queues of handlers than places stay idle when no job
# is ready: 20 handlers in queues of their own (the places are 16).  They
# used to take a place for each at every round (at least once a second),
# waking themselves up whenever that evicted one of them: a core's 83 %
# with no job at all (a review's find).  The resource guard: under 20 %
# of a core over 5 s.
$node->safe_psql('tenant', q{
	CREATE SCHEMA h AUTHORIZATION dba;
	SET ROLE dba;
	CREATE FUNCTION h.noop(payload jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT payload';
	SELECT count(jobq.register_handler('hk' || g, 'h.noop(jsonb)', 'hq' || g))
	  FROM generate_series(1, 20) g;
	SELECT jobq.enqueue('hk' || g, '{}', 'hq' || g) FROM generate_series(1, 20) g;});
$node->poll_query_until('tenant', q{
	SELECT count(*) = 20 FROM jobq.jobs WHERE kind LIKE 'hk%' AND status = 'completed'})
  or die 'the handler jobs never ran';
my @executors = split /\n/, $node->safe_psql('tenant', q{
	SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobq executor'});
cmp_ok(scalar(@executors), '>=', 1, 'executors run the handlers');
my %t0 = map { $_ => cpu_ticks($_) } @executors;
sleep 5;
my $ticks = 0;
$ticks += cpu_ticks($_) - $t0{$_} foreach @executors;
my $hz = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
cmp_ok($ticks, '<', 5 * $hz / 5,
	"idle executors with 20 queues of handlers used $ticks CPU ticks in 5 s");
$node->safe_psql('tenant', q{
	SET ROLE dba;
	SELECT count(jobq.unregister_handler('hk' || g)) FROM generate_series(1, 20) g;});

# index entries of ready_claim_idx read so far in a database
sub entries_read
{
	my ($db) = @_;
	return $node->safe_psql($db, q{
		SELECT pg_stat_force_next_flush();
		SELECT pg_sleep(0.1);
		SELECT pg_stat_clear_snapshot();
		SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'ready_claim_idx'});
}

# The places go to the queues in use.  The tenant's 3,000 queues took every
# place; a queue another database makes afterwards takes the place of one
# not used lately, so its claims start at its claim position: under
# a held snapshot the 21st claim reads a few index entries, not the 2,000
# dead ones of the jobs claimed before it (which it did when the places
# were first come, first served).
$node->safe_psql('victim', q{
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[2001]),
	                                       queue => 'mine')});
my $holder = $node->background_psql('victim');
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT count(*) FROM jobq.job');
$node->safe_psql('victim', q{SELECT count(*) FROM jobq.claim('mine', batch => 100)})
  for (1 .. 20);
my $before_read = entries_read('victim');
is($node->safe_psql('victim', q{SELECT count(*) FROM jobq.claim('mine')}),
	'1', "the other database's queue gets its 2,001st job");
my $read = entries_read('victim') - $before_read;
cmp_ok($read, '<=', 10,
	"its claim read $read index entries, not the 2,000 dead ones before its position");
$holder->query_safe('COMMIT');
$holder->quit;
foreach my $s (@cancelled)
{
	$s->query('COMMIT');
	$s->quit;
}

# Waiting claims keep their queues' places while the tenant's new queues
# look for places (a sleeper's condition variable must not become another
# queue's): 16 claims wait, so every place is held; a 17th queue's waiting
# claim has none and polls; 2,000 more queues are claimed in (with no place
# to take).  The first waiter's queue kept its claim position through all
# that: under a held snapshot, the claim that gets its job reads a few index
# entries, not the 2,000 dead ones of the jobs claimed there before (as a
# new place would, born at the head of the queue).  Then each waiter gets
# the job enqueued for it.
$holder = $node->background_psql('tenant');
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT count(*) FROM jobq.job');
$node->safe_psql('tenant', q{
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[2000]),
	                                       queue => 'wait1')});
$node->safe_psql('tenant', q{SELECT count(*) FROM jobq.claim('wait1', batch => 100)})
  for (1 .. 20);
my @waiters;
foreach my $i (1 .. 17)
{
	my ($wout, $werr) = ('', '');
	push @waiters, [
		IPC::Run::start(
			[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('tenant'),
			  '-c', qq{SELECT payload->>'n' FROM jobq.claim('wait$i', wait => '60 s')} ],
			'>', \$wout, '2>', \$werr),
		\$wout, \$werr ];
	next if $i < 16;
	$node->poll_query_until('tenant', qq{
		SELECT count(*) = $i FROM pg_stat_activity
		 WHERE query LIKE '%jobq.claim(%wait%' AND wait_event_type = 'Extension'
		   AND pid <> pg_backend_pid()})
	  or die 'the waiting claims never started to wait';
}
for (my $from = 5001; $from <= 7000; $from += 100)
{
	my $to = $from + 99;
	$node->safe_psql('tenant', qq{
		SET ROLE dba;
		SELECT count(*) FROM generate_series($from, $to) g,
		       LATERAL jobq.enqueue('x', '{}', 'spam' || g);
		SELECT count(*) FROM generate_series($from, $to) g,
		       LATERAL jobq.claim('spam' || g);});
}
$before_read = entries_read('tenant');
$node->safe_psql('tenant', q{SELECT jobq.enqueue('w', '{"n": 1}', 'wait1')});
$waiters[0][0]->finish;
$read = entries_read('tenant') - $before_read;
is(${ $waiters[0][1] }, "1\n", 'the first waiter got its job');
cmp_ok($read, '<=', 20,
	"its claim read $read index entries, not the 2,000 dead ones before its position");
$node->safe_psql('tenant', join('',
	map { qq{SELECT jobq.enqueue('w', '{"n": $_}', 'wait$_');} } reverse 2 .. 17));
my $woken = '';
foreach my $i (1 .. 17)
{
	my ($h, $wout, $werr) = @{ $waiters[ $i - 1 ] };
	$h->finish;
	$woken .= $$wout =~ s/\n//r . ($$werr ne '' ? "($$werr)" : '') . ' ';
}
is($woken, join(' ', 1 .. 17) . ' ',
	'each waiting claim got its job, the one of the queue with no place too');
$holder->query_safe('COMMIT');
$holder->quit;

$node->stop;
done_testing();
