# A circuit breaker stays open across restarts: a queue with
# breaker_threshold => 2 is tripped (two failures throttle it, a failure and
# an expired lease reaped by the background worker open it), then the server
# is restarted, cleanly and after an immediate stop (crash recovery).  The
# queue must still be open and paused, with its reason and trip time, and
# hand out nothing although it has pending jobs.  Afterwards it follows its
# rules: jobq.resume makes it half-open (one job at a time), a failure there
# opens it again, a success closes it (all jobs flow again); the half-open
# state too survives a restart, with its one running job.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('breaker');
$node->init;
# stock settings otherwise: the reaper runs every second (jobq.naptime)
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('br', breaker_threshold => 2, max_retries => 0, lease => '1 hour');
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[20]), 'br');
});

# the breaker's state, as the operator sees it
sub state
{
	return $node->safe_psql('postgres', q{
		SELECT breaker_state, paused FROM jobq.queues WHERE queue = 'br'});
}

# the same, with the reason it last opened
sub breaker
{
	return $node->safe_psql('postgres', q{
		SELECT breaker_state, paused, breaker_reason FROM jobq.queues WHERE queue = 'br'});
}

# how many jobs a claim of up to 5 gets (held: the transaction commits)
sub claims
{
	my ($lease) = @_;
	$lease //= '1 hour';
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM jobq.claim('br', worker_id => 'w', batch => 5, lease => '$lease')");
}

# fail every running job of the queue with $error; returns how many
sub fail_running
{
	my ($error) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM (SELECT jobq.fail(job_id, lease_token, '$error')
		                        FROM jobq.job WHERE queue = 'br' AND status = 'running'
		                       ORDER BY job_id) f});
}

# wait until a jobq worker serves the database again (after a restart)
sub wait_worker
{
	my ($name) = @_;
	ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
		$name);
}

# --- trip it ------------------------------------------------------------------

is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.claim('br', batch => 2)}), '2',
	'closed: a claim gets a whole batch');
is(fail_running('upstream down'), '2', 'two jobs fail');
is(state(), 'throttled|f', 'two consecutive failures throttle the queue');
is(claims(), '1', 'throttled: one job at a time');
is(claims(), '0', '... and none while it runs');
is(fail_running('still down'), '1', 'a third failure');
is(claims('1 second'), '1', 'a job with a short lease, left to expire');
ok($node->poll_query_until('postgres', q{
	SELECT breaker_state = 'open' FROM jobq.queues WHERE queue = 'br'}),
	'the worker reaps the expired lease: the fourth failed attempt opens the breaker');
is(breaker(), 'open|t|lease expired', 'open: paused by the breaker, with the reason');
my $tripped = $node->safe_psql('postgres',
	q{SELECT breaker_tripped_at FROM jobq.queues WHERE queue = 'br'});
isnt($tripped, '', 'and the time it tripped');
my $pending = $node->safe_psql('postgres',
	q{SELECT count(*) FROM jobq.job WHERE queue = 'br' AND status = 'pending'});
cmp_ok($pending, '>=', 10, "it has pending jobs ($pending)");
is(claims(), '0', 'open: a claim gets nothing');

# --- restarts -------------------------------------------------------------------

sub still_open
{
	my ($how) = @_;
	wait_worker("$how: the jobq worker serves the database again");
	is(breaker(), 'open|t|lease expired', "$how: still open, paused, with its reason");
	is($node->safe_psql('postgres', q{SELECT breaker_tripped_at FROM jobq.queues WHERE queue = 'br'}),
		$tripped, "$how: with the time it tripped");
	is(claims(), '0', "$how: a claim gets nothing");
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM jobq.job WHERE queue = 'br' AND status = 'pending'}),
		$pending, "$how: its pending jobs wait");
}

$node->restart;
still_open('after a restart');
$node->stop('immediate');
$node->start;
still_open('after an immediate stop and crash recovery');
# a reap round of the restarted worker (a probe job's lease expires and is
# reaped) leaves the breaker as it is
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('probe', '{}', 'probe');
	SELECT count(*) FROM jobq.claim('probe', lease => '1 second');
});
ok($node->poll_query_until('postgres', q{
	SELECT status = 'pending' AND retry_count = 1 FROM jobq.job WHERE queue = 'probe'}),
	'the restarted worker reaps leases');
is(breaker(), 'open|t|lease expired', 'still open after the worker ran');
is(claims(), '0', 'and still nothing to claim');

# --- its rules afterwards -----------------------------------------------------

$node->safe_psql('postgres', q{SELECT jobq.resume('br')});
is(state(), 'half_open|f', 'resume: half-open');
is(claims(), '1', 'half-open: one job at a time');
is(claims(), '0', '... and none while it runs');
is(fail_running('down again'), '1', 'it fails');
is(breaker(), 'open|t|down again', 'a failure while half-open opens the breaker again');
is(claims(), '0', 'open again: nothing to claim');

$node->safe_psql('postgres', q{SELECT jobq.resume('br')});
is(state(), 'half_open|f', 'resume again: half-open');
my ($job, $token) = split /\|/, $node->safe_psql('postgres', q{
	SELECT job_id, lease_token FROM jobq.claim('br', worker_id => 'w', batch => 5)});
ok($job, 'half-open: one job');
$node->restart;
wait_worker('after a restart while half-open: the worker serves the database again');
is(state(), 'half_open|f', 'after a restart: still half-open');
is(claims(), '0', 'after a restart: still one at a time (its job runs)');
is($node->safe_psql('postgres', "SELECT jobq.complete($job, $token)"), 't',
	'the half-open job succeeds');
is(state(), 'closed|f', 'a success closes the breaker');
is(claims(), '5', 'closed: whole batches again');

$node->stop;
done_testing();
