# jobq.claim(wait => ...): a waiting claim is woken through shared memory by
# the committing enqueue, by a delayed job becoming due, ends at its
# deadline, ends cleanly on a query cancel, and holds no lock while it waits
# (another claimer of a limited queue is not blocked).
#
# How soon a waiting claim is woken is reported (diag), not asserted: the
# tests check that the claim got its job, and never before the job was due.
# Without a wake-up a waiting claim looks again every 5 seconds.
#
# Stock settings: only shared_preload_libraries added to PostgreSQL's
# defaults (jit on; fsync set back on over PostgreSQL::Test::Cluster's).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('wait');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "fsync = on\njit = on\nmax_worker_processes = 8\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('w');
	SELECT jobq.configure('lim', max_concurrency => 1);
});

# start a waiting claim in its own psql; returns the harness and output refs
sub start_waiter
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>', \$err);
	# wait until it sleeps on the queue (wait event type Extension)
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE '%jobq.claim(%wait%' AND wait_event_type = 'Extension'
		   AND pid <> pg_backend_pid()})
	  or die 'waiting claim never started to wait';
	return ($h, \$out, \$err);
}

# 1. woken by the enqueue's commit
my ($h, $out, $err) = start_waiter(
	q{SELECT job_id, kind FROM jobq.claim('w', wait => '30 s')});
$node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('ping', queue => 'w')});
$h->finish;
like($$out, qr/^\d+\|ping$/, 'waiting claim got the job enqueued while it waited');
my $latency = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM claimed_at - created_at) FROM jobq.job WHERE kind = 'ping'});
diag("enqueue -> claim with wait: ${latency}s (a re-check without a wake-up: up to 5 s)");

# 2. woken when a delayed job becomes due
($h, $out, $err) = start_waiter(
	q{SELECT kind FROM jobq.claim('w', wait => '30 s')});
$node->safe_psql('postgres',
	q{SELECT job_id FROM jobq.enqueue('later', queue => 'w', run_at => clock_timestamp() + interval '1.5 s')});
$h->finish;
chomp $$out;
is($$out, 'later', 'waiting claim got the delayed job once it was due');
# (the claim's own statement could not join jobq.job for it: its snapshot
# predates the job)
my $late = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM claimed_at - run_at) FROM jobq.job WHERE kind = 'later'});
cmp_ok($late, '>=', 0, 'not before its run_at');
diag("delayed job due -> claim with wait: ${late}s");

# 2b. a key at its limit: the job of that key waiting in the queue is
# claimed once the key's running job ends (which wakes no claim: a claim
# held back by a full key looks again every 100 ms)
$node->safe_psql('postgres', q{
	SELECT jobq.configure('perkey', max_per_key => 1);
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY[jsonb_build_object('n', 1), jsonb_build_object('n', 2)],
	                                       queue => 'perkey', concurrency_key => 'K');
	SELECT count(*) FROM jobq.claim('perkey', lease => '1 h');
});
($h, $out, $err) = start_waiter(
	q{SELECT payload->>'n' FROM jobq.claim('perkey', wait => '30 s')});
$node->safe_psql('postgres', q{
	SELECT jobq.complete(job_id, lease_token) FROM jobq.job WHERE queue = 'perkey' AND status = 'running'});
$h->finish;
chomp $$out;
is($$out, '2', 'waiting claim got the job of a full key once the key had room');
my $room = $node->safe_psql('postgres', q{
	SELECT extract(epoch FROM (SELECT claimed_at FROM jobq.job WHERE queue = 'perkey' AND payload->>'n' = '2')
	                        - (SELECT finished_at FROM jobq.job WHERE queue = 'perkey' AND payload->>'n' = '1'))});
cmp_ok($room, '>=', 0, 'not before the first job of its key ended');
diag("full key gets room -> claim with wait: ${room}s (without looking again: up to 5 s)");

# 3. nothing arrives: ends at the deadline with no rows
my $t = $node->safe_psql('postgres', q{
	SELECT count(*) || ' ' || extract(epoch FROM clock_timestamp() - statement_timestamp())
	  FROM jobq.claim('w', wait => '800 ms')});
my ($n, $took) = split / /, $t;
is($n, '0', 'no job: empty result');
cmp_ok($took, '>=', 0.75, "waited until the deadline (${took}s)");

# 4. a query cancel ends the wait cleanly
($h, $out, $err) = start_waiter(q{SELECT count(*) FROM jobq.claim('w', wait => '30 s')});
$node->safe_psql('postgres', q{
	SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	 WHERE query LIKE '%jobq.claim(%wait%' AND pid <> pg_backend_pid()});
$h->finish;
like($$err, qr/canceling statement due to user request/, 'cancel ends the waiting claim');
is($node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
	 WHERE query LIKE '%jobq.claim(%wait%' AND state = 'active' AND pid <> pg_backend_pid()}),
	'0', 'no claim left waiting');

# 5. waiting on a limited queue holds no lock: another claim is not blocked
$node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('busy', queue => 'lim')});
$node->safe_psql('postgres', q{SELECT count(*) FROM jobq.claim('lim')});   # the one slot taken
($h, $out, $err) = start_waiter(q{SELECT count(*) FROM jobq.claim('lim', wait => '30 s')});
my $other = $node->safe_psql('postgres', q{
	SET lock_timeout = '2s';
	SELECT count(*) FROM jobq.claim('lim')});
is($other, '0', 'a second claim of the limited queue runs while another waits (no lock held)');
# free the slot and enqueue: the waiter gets the new job
$node->safe_psql('postgres', q{
	SELECT jobq.complete(job_id, lease_token) FROM jobq.job WHERE queue = 'lim' AND status = 'running';
	SELECT job_id FROM jobq.enqueue('next', queue => 'lim')});
$h->finish;
chomp $$out;
is($$out, '1', 'the waiter on the limited queue got the next job');

$node->stop;
done_testing();
