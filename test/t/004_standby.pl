# On a streaming standby jobq runs no background process: jobs replicate,
# but no launcher or worker starts and an expired lease stays as it is.  At
# promotion the launcher starts, a worker for the database follows (how long
# after is reported, not asserted), and it reaps the lease that expired while
# the server was a standby.
#
# Stock settings for jobq: the default naptime, jit on, fsync on (over
# PostgreSQL::Test::Cluster's fsync = off); the streaming setup keeps
# PostgreSQL::Test::Cluster's small shared_buffers and max_connections.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "fsync = on\njit = on\nmax_worker_processes = 8\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION jobq');

$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;

# On the primary: four pending jobs, one claimed for an hour and one claimed
# with a lease of 3 s that expires while the standby is a standby.
$primary->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue_many('work',
		ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[]);
	SELECT count(*) FROM jobq.enqueue('long');
	SELECT count(*) FROM jobq.enqueue('short', max_retries => 2);
	CREATE TABLE held AS
	SELECT kind, job_id, lease_token, lease_expires_at
	  FROM jobq.claim(worker_id => 'w-long', lease => '1 hour', kinds => ARRAY['long']);
});

# The primary's own jobq worker would reap the short lease there (and that
# would replicate).  A session on the primary keeps the job row locked: the
# reaper skips locked rows, so the job stays running on the primary too.  On
# the standby, and after its promotion, the lock does not exist.  The same
# session claims the job and locks it in its next statement, long before
# the lease of 3 s runs out.
my $locker = $primary->background_psql('postgres');
$locker->query_safe(q{
	INSERT INTO held
	SELECT kind, job_id, lease_token, lease_expires_at
	  FROM jobq.claim(worker_id => 'w-short', lease => '3 s', kinds => ARRAY['short'])});
$locker->query_safe('BEGIN');
is( $locker->query_safe(q{
	SELECT j.status FROM jobq.job j JOIN held h USING (job_id)
	 WHERE h.kind = 'short' AND j.lease_token = h.lease_token
	   FOR UPDATE OF j}),
	'running',
	'the short-lease job is locked on the primary while still running');

ok( $primary->poll_query_until(
		'postgres', q{
	SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'the primary runs a jobq worker');

$primary->wait_for_catchup($standby);

my $jobs_query = q{
	SELECT job_id, kind, payload, status, retry_count, worker_id, lease_token,
	       lease_expires_at, run_at
	  FROM jobq.job ORDER BY job_id};
is($standby->safe_psql('postgres', $jobs_query),
	$primary->safe_psql('postgres', $jobs_query),
	'enqueued and claimed jobs replicate to the standby');
is( $standby->safe_psql(
		'postgres', q{SELECT status, count(*) FROM jobq.jobs GROUP BY 1 ORDER BY 1}),
	"pending|4\nrunning|2", 'the standby sees four pending and two running jobs');

# Queue settings are cached per backend, but never on a standby: replayed
# changes fire no trigger there, and a session outlives the promotion.  A
# session on the standby reads queue 'gate' (its claim then fails: the
# standby is read-only); the primary pauses the queue; after the promotion
# the same session must see the pause.
$primary->safe_psql('postgres',
	q{SELECT count(*) FROM jobq.enqueue('gated', queue => 'gate')});
$primary->wait_for_catchup($standby);
my $reader = $standby->background_psql('postgres', on_error_stop => 0);
my (undef, $failed) = $reader->query(q{SELECT count(*) FROM jobq.claim('gate')});
ok($failed && $reader->{stderr} =~ /read-only/,
	'a claim on the standby reads the queue and fails: read-only');
$reader->{stderr} = '';
$primary->safe_psql('postgres', q{SELECT jobq.pause('gate')});
$primary->wait_for_catchup($standby);

#
# the standby: no jobq processes, the expired lease stays
#
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is in recovery');
ok( $standby->poll_query_until(
		'postgres', q{
	SELECT j.lease_expires_at < now() FROM jobq.job j JOIN held h USING (job_id)
	 WHERE h.kind = 'short'}),
	'the short lease has expired on the standby');
is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM pg_stat_activity
	 WHERE backend_type IN ('jobq launcher', 'jobq worker')}),
	'0', 'no jobq launcher or worker on the standby');
is($standby->safe_psql('postgres', 'SELECT count(*) FROM jobq.workers'),
	'0', 'jobq.workers is empty on the standby');
ok(!$standby->log_contains('jobq launcher started'),
	'no jobq launcher ever started on the standby');
is( $standby->safe_psql(
		'postgres', q{
	SELECT j.status, j.retry_count, j.lease_token = h.lease_token
	  FROM jobq.job j JOIN held h USING (job_id) WHERE h.kind = 'short'}),
	'running|0|t', 'the job with the expired lease is still running on the standby');

my ($ret, $stdout, $stderr) = $standby->psql('postgres', 'SELECT jobq.reap()');
isnt($ret, 0, 'jobq.reap() fails on the standby');
like($stderr, qr/read-only|recovery/, 'because the standby is read-only');

# The primary's worker did not reap the locked job either.
is( $primary->safe_psql(
		'postgres', q{
	SELECT j.status FROM jobq.job j JOIN held h USING (job_id) WHERE h.kind = 'short'}),
	'running', 'the locked job is still running on the primary');

#
# promotion
#
$standby->promote;
my $promoted_at = time();
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	'f', 'the standby is promoted');
ok( $standby->poll_query_until(
		'postgres', q{
	SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'a jobq worker runs on the promoted standby');
diag(sprintf('jobq worker running %.2f s after promotion', time() - $promoted_at));
is( $standby->safe_psql(
		'postgres', q{
	SELECT backend_type, datname FROM pg_stat_activity
	 WHERE backend_type = 'jobq launcher'
	    OR (backend_type = 'jobq worker' AND datname = 'postgres')
	 ORDER BY backend_type}),
	"jobq launcher|\njobq worker|postgres",
	'launcher and worker are in pg_stat_activity of the promoted standby');

ok( $standby->poll_query_until(
		'postgres', q{
	SELECT status = 'pending' FROM jobq.job j JOIN held h USING (job_id)
	 WHERE h.kind = 'short'}),
	'the promoted standby reaps the lease that expired during recovery');
is( $standby->safe_psql(
		'postgres', q{
	SELECT j.retry_count, j.last_error, a.outcome, a.worker_id
	  FROM jobq.job j JOIN held h USING (job_id) JOIN jobq.attempt a USING (job_id)
	 WHERE h.kind = 'short'}),
	'1|lease expired|lease expired|w-short',
	'retry_count 1 and a "lease expired" attempt');
ok( $standby->log_contains('jobq: lease of job \d+ expired; job is now pending'),
	'the reap is logged on the promoted standby');
is( $standby->safe_psql(
		'postgres', q{
	SELECT j.status, j.lease_token = h.lease_token
	  FROM jobq.job j JOIN held h USING (job_id) WHERE h.kind = 'long'}),
	'running|t', 'the job with an unexpired lease is still running');

# The promoted server is a working queue: its pending jobs can be claimed
# and the long lease's token still completes its job.
is( $standby->safe_psql(
		'postgres', q{
	SELECT count(*) FROM jobq.claim(worker_id => 'w-new', batch => 10, kinds => ARRAY['work'])}),
	'4', 'the four pending jobs are claimable on the promoted standby');
is( $standby->safe_psql(
		'postgres', q{
	SELECT jobq.complete(job_id, lease_token) FROM held WHERE kind = 'long'}),
	't', 'a token from the primary completes its job on the promoted standby');

# The session that read queue 'gate' while the server was a standby sees
# the pause made on the primary back then, and a resume made now.
is($reader->query_safe(q{SELECT count(*) FROM jobq.claim('gate')}),
	'0', 'after the promotion, a session of the standby sees the queue paused');
$standby->safe_psql('postgres', q{SELECT jobq.resume('gate')});
is($reader->query_safe(q{SELECT count(*) FROM jobq.claim('gate')}),
	'1', 'and sees it resumed by another session');
$reader->quit;

$locker->quit;
$standby->stop;
$primary->stop;
done_testing();
