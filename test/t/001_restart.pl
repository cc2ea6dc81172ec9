# Jobs, their states and their lease tokens survive a clean restart and a
# crash-like immediate shutdown; work committed before the crash is kept, work
# in an open transaction at the time of the crash never happened.
#
# Stock settings: only shared_preload_libraries added to PostgreSQL's
# defaults; fsync is set back on over PostgreSQL::Test::Cluster's
# fsync = off, without which an immediate shutdown proves little about what
# was committed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "fsync = on\njit = on\nmax_worker_processes = 8\n");
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION jobq');

# Six pending jobs, two of them delayed, and three of them claimed with a
# lease long enough to outlive both restarts.
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue_many('work',
		ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[]);
	SELECT count(*) FROM jobq.enqueue_many('later',
		ARRAY['{"n": 5}', '{"n": 6}']::jsonb[], run_at => now() + interval '1 day');
	CREATE TABLE claimed AS
		SELECT row_number() OVER (ORDER BY job_id) AS n, job_id, lease_token
		  FROM jobq.claim(worker_id => 'w1', batch => 3, lease => '1 hour');
});

is($node->safe_psql('postgres', 'SELECT count(*) FROM claimed'),
	'3', 'three jobs claimed before the restart');

# Everything a worker or a user can see of the jobs, one line per job.
my $snapshot_query = q{
	SELECT job_id, kind, payload, status, retry_count, worker_id,
	       run_at, lease_expires_at, checkpoint
	  FROM jobq.jobs ORDER BY job_id};

# A checkpoint on one running job, so that it is part of the snapshot too.
$node->safe_psql('postgres', q{
	SELECT jobq.checkpoint(job_id, lease_token, '{"step": 7}')
	  FROM claimed WHERE n = 1});

my $before = $node->safe_psql('postgres', $snapshot_query);
is( $node->safe_psql(
		'postgres',
		q{SELECT status, count(*) FROM jobq.jobs GROUP BY status ORDER BY status}),
	"pending|3\nrunning|3",
	'three pending and three running jobs before the restart');

# Wait until the restarted server accepts queries.
sub wait_for_server
{
	my ($node) = @_;
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'server did not come back';
}

#
# clean restart
#
$node->restart;
wait_for_server($node);

is($node->safe_psql('postgres', $snapshot_query),
	$before, 'jobs unchanged after a clean restart');

# The old token of the first claimed job still completes it.
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.complete(job_id, lease_token, '{"after": "restart"}')
	  FROM claimed WHERE n = 1}),
	't',
	'a token from before the restart completes its job');

# A wrong token is still refused.
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.complete(job_id, lease_token + 1)
	  FROM claimed WHERE n = 2}),
	'f',
	'a wrong token is refused after the restart');

$before = $node->safe_psql('postgres', $snapshot_query);

#
# crash-like stop: immediate shutdown, with an enqueue and a claim in flight
#
my $session = $node->background_psql('postgres', on_error_stop => 0);
$session->query_safe('BEGIN');
$session->query_safe(q{SELECT * FROM jobq.enqueue('uncommitted', '{"n": 7}')});
$session->query_safe(q{SELECT * FROM jobq.claim(worker_id => 'w2', batch => 10)});

# The claim in flight holds the pending ready job: another claim skips it.
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.claim(worker_id => 'w3')}),
	'0', 'the open transaction holds the only ready job');

$node->stop('immediate');
$session->{run}->finish;    # the backend is gone; reap the psql process
$node->start;
wait_for_server($node);

is($node->safe_psql('postgres', $snapshot_query),
	$before, 'committed jobs unchanged after an immediate shutdown');
is( $node->safe_psql(
		'postgres', q{SELECT count(*) FROM jobq.jobs WHERE kind = 'uncommitted'}),
	'0', 'a job enqueued in an open transaction did not survive the crash');
is( $node->safe_psql(
		'postgres',
		q{SELECT status, count(*) FROM jobq.jobs GROUP BY status ORDER BY status}),
	"completed|1\npending|3\nrunning|2",
	'the in-flight claim was undone: still three pending jobs');

# The tokens of the two remaining running jobs still work after the crash.
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.checkpoint(job_id, lease_token, '{"step": 8}')
	  FROM claimed WHERE n = 2}),
	't',
	'a token from before the crash saves a checkpoint');
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.complete(job_id, lease_token)
	  FROM claimed WHERE n = 3}),
	't',
	'a token from before the crash completes its job');
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.fail(job_id, lease_token, 'after crash', retry_in => '0 s')
	  FROM claimed WHERE n = 2}),
	'pending',
	'a token from before the crash fails its job back to pending');

# The pending ready job is claimable again, with a token of its own.
is( $node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM jobq.claim(worker_id => 'w4', batch => 10)
	 WHERE lease_token NOT IN (SELECT lease_token FROM claimed)}),
	'2',
	'after the crash the two ready jobs are claimable with new tokens');

$node->stop;
done_testing();
