# The background worker reaps expired leases: a job whose worker vanished
# goes back to pending (retry_count + 1, with backoff) after its lease, or to
# failed with "lease expired" when it has no retries left; the old lease
# token can no longer change the job; a job completed or extended before its
# lease ran out is left alone.  Also measures how long after expiry the reap
# happens, at jobq.naptime = 100ms and at the default 1s: reported (diag),
# never asserted beyond "not before the expiry".
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('reaper');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.prune_interval = 1s\n");
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION jobq');

# One job of each kind; every claim is recorded in table held, with the
# lease expiry the claim returned, so that the reap delay can be measured.
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('vanish', '{"n": 1}', max_retries => 3);
	SELECT count(*) FROM jobq.enqueue('once', '{"n": 2}', max_retries => 0);
	SELECT count(*) FROM jobq.enqueue('done', '{"n": 3}');
	SELECT count(*) FROM jobq.enqueue('extended', '{"n": 4}');
	SELECT count(*) FROM jobq.enqueue('late', '{"n": 5}');
	CREATE TABLE held (kind text PRIMARY KEY, job_id bigint, lease_token bigint,
	                   lease_expires_at timestamptz);
});

# Claim one job of a kind with a lease, in a session that then disconnects:
# its "worker" is gone.  $then, a statement run right after the claim in the
# same session, returns its output.
sub claim
{
	my ($kind, $lease, $then) = @_;
	my $out = $node->safe_psql('postgres', qq{
		INSERT INTO held
		SELECT kind, job_id, lease_token, lease_expires_at
		  FROM jobq.claim(worker_id => 'w-$kind', lease => '$lease',
		                  kinds => ARRAY['$kind']);
		} . ($then // ''));
	is($node->safe_psql('postgres', "SELECT count(*) FROM held WHERE kind = '$kind'"),
		'1', "claimed the $kind job with a lease of $lease");
	return $out;
}

# "done" and "extended" get 2 s and are completed / extended by the next
# statement of the claiming session, long before expiry however slow the
# machine; "late" gets 3 s and is claimed after them: once it is reaped, the
# reaper has run after the leases of "done" and "extended" ran out (checked
# below, not assumed).
claim('vanish',   '1 s');
claim('once',     '1 s');
is( claim(
		'done', '2 s', q{
	SELECT jobq.complete(job_id, lease_token, '{"ok": true}') FROM held WHERE kind = 'done'}),
	't',
	'the "done" job is completed before its lease runs out');
is( claim(
		'extended', '2 s', q{
	SELECT jobq.extend(job_id, lease_token, '1 hour') > now() + interval '59 minutes'
	  FROM held WHERE kind = 'extended'}),
	't',
	'the "extended" job gets an hour more before its lease runs out');
claim('late',     '3 s');

# The worker is there and serves this database.
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'a jobq worker serves database postgres');

my %job_id = map {
	$_ => $node->safe_psql('postgres', "SELECT job_id FROM held WHERE kind = '$_'")
} qw(vanish once done extended late);

#
# expired lease with retries left: back to pending
#
ok( $node->poll_query_until(
		'postgres', q{
	SELECT status = 'pending' FROM jobq.jobs j JOIN held h USING (job_id)
	 WHERE h.kind = 'vanish'}),
	'the vanished worker\'s job is pending again after its lease');

is( $node->safe_psql(
		'postgres', q{
	SELECT j.status, j.retry_count, j.last_error, j.lease_expires_at IS NULL,
	       j.finished_at IS NULL, j.run_at > a.finished_at
	  FROM jobq.jobs j JOIN held h USING (job_id)
	  JOIN jobq.attempt a USING (job_id)
	 WHERE h.kind = 'vanish'}),
	'pending|1|lease expired|t|t|t',
	'reaped job: retry_count 1, last_error "lease expired", no lease, run_at after backoff');

is( $node->safe_psql(
		'postgres', q{
	SELECT a.attempt, a.worker_id, a.outcome, a.error, a.started_at IS NOT NULL,
	       a.finished_at > h.lease_expires_at
	  FROM jobq.attempt a JOIN held h USING (job_id)
	 WHERE h.kind = 'vanish'}),
	'1|w-vanish|lease expired|lease expired|t|t',
	'one attempt row with outcome "lease expired", recorded after the lease ran out');

ok( $node->log_contains(
		"jobq: lease of job $job_id{vanish} expired; job is now pending"),
	'the reap is logged');

# The vanished worker's old token can no longer change the job.
my $job_row = q{
	SELECT j.status, j.retry_count, j.lease_expires_at, j.checkpoint, j.result,
	       j.last_error, j.run_at, j.updated_at
	  FROM jobq.jobs j JOIN held h USING (job_id) WHERE h.kind = 'vanish'};
my $before = $node->safe_psql('postgres', $job_row);
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.complete(job_id, lease_token),
	       jobq.checkpoint(job_id, lease_token, '{"stale": true}'),
	       jobq.extend(job_id, lease_token, '1 hour') IS NULL,
	       jobq.fail(job_id, lease_token, 'stale') IS NULL
	  FROM held WHERE kind = 'vanish'}),
	'f|f|t|t',
	'after the reap the old token cannot complete, checkpoint, extend or fail');
is($node->safe_psql('postgres', $job_row),
	$before, 'the refused calls changed nothing');

# Claimed again, under a new lease and token: the old token still cannot
# change the job, now that it is running again (the fencing check itself,
# not the status, refuses it), and the new holder's token can.
$node->safe_psql('postgres', q{CREATE TABLE reclaimed (job_id bigint, lease_token bigint)});
ok( $node->poll_query_until(
		'postgres', q{
	WITH c AS (SELECT job_id, lease_token
	             FROM jobq.claim(kinds => ARRAY['vanish'], worker_id => 'w-new', lease => '1 hour')),
	     i AS (INSERT INTO reclaimed SELECT * FROM c RETURNING 1)
	SELECT count(*) > 0 FROM i}),
	'the reaped job is claimed again');
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.complete(h.job_id, h.lease_token),
	       jobq.checkpoint(h.job_id, h.lease_token, '{"stale": true}'),
	       jobq.extend(h.job_id, h.lease_token, '1 minute') IS NULL,
	       jobq.fail(h.job_id, h.lease_token, 'stale') IS NULL
	  FROM held h WHERE h.kind = 'vanish'}),
	'f|f|t|t',
	'while it runs under a new lease, the old token cannot complete, checkpoint, extend or fail it');
is( $node->safe_psql(
		'postgres', q{
	SELECT j.status, j.worker_id, j.checkpoint IS NULL, j.lease_expires_at > now() + interval '50 minutes'
	  FROM jobq.jobs j JOIN reclaimed r USING (job_id)}),
	'running|w-new|t|t', 'the new holder keeps it, its lease untouched');
is($node->safe_psql('postgres', q{SELECT jobq.complete(job_id, lease_token) FROM reclaimed}),
	't', "the new holder's token completes it");

#
# expired lease with no retries left (max_retries 0): failed, dead letter
#
ok( $node->poll_query_until(
		'postgres', q{
	SELECT status = 'failed' FROM jobq.jobs j JOIN held h USING (job_id)
	 WHERE h.kind = 'once'}),
	'a job with max_retries 0 fails when its lease expires');
is( $node->safe_psql(
		'postgres', q{
	SELECT d.status, d.retry_count, d.last_error, d.finished_at IS NOT NULL,
	       d.lease_expires_at IS NULL, a.outcome
	  FROM jobq.dead_letter d JOIN held h USING (job_id)
	  JOIN jobq.attempt a USING (job_id)
	 WHERE h.kind = 'once'}),
	'failed|0|lease expired|t|t|lease expired',
	'it is in jobq.dead_letter with last_error "lease expired" and its attempt row');
ok( $node->log_contains(
		"jobq: lease of job $job_id{once} expired; job is now failed"),
	'the final reap is logged');
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.complete(job_id, lease_token) FROM held WHERE kind = 'once'}),
	'f', 'the old token cannot complete the failed job');

#
# jobs completed or extended in time are left alone
#
ok( $node->poll_query_until(
		'postgres', q{
	SELECT status = 'pending' FROM jobq.jobs j JOIN held h USING (job_id)
	 WHERE h.kind = 'late'}),
	'the "late" job (lease expiring last) is reaped');
is( $node->safe_psql(
		'postgres', q{
	SELECT a.finished_at > (SELECT max(lease_expires_at) FROM held
	                         WHERE kind IN ('done', 'extended'))
	  FROM jobq.attempt a JOIN held h USING (job_id) WHERE h.kind = 'late'}),
	't', 'the reaper ran after the first leases of "done" and "extended" ran out');
is( $node->safe_psql(
		'postgres', q{
	SELECT h.kind, j.status, j.retry_count, j.result,
	       (SELECT count(*) FROM jobq.attempt a WHERE a.job_id = j.job_id)
	  FROM jobq.jobs j JOIN held h USING (job_id)
	 WHERE h.kind IN ('done', 'extended') ORDER BY h.kind}),
	"done|completed|0|{\"ok\": true}|0\nextended|running|0||0",
	'the job completed before expiry and the job extended in time are untouched');
is( $node->safe_psql(
		'postgres', q{
	SELECT jobq.checkpoint(job_id, lease_token, '{"still": "mine"}')
	  FROM held WHERE kind = 'extended'}),
	't', 'the extended job\'s token is still valid');

ok( $node->poll_query_until(
		'postgres', q{
	SELECT reaped FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'},
		'3'),
	'jobq.workers counts the three reaps');

#
# reap delay: time from lease expiry to the reap
#
sub reap_delays
{
	my ($kinds) = @_;
	return $node->safe_psql(
		'postgres', qq{
	SELECT h.kind || ' ' || round(extract(epoch FROM a.finished_at - h.lease_expires_at) * 1000, 1)
	  FROM held h JOIN jobq.attempt a USING (job_id)
	 WHERE h.kind IN ($kinds) AND a.outcome = 'lease expired' ORDER BY h.kind});
}

# Each reap happened after its lease expired (never before); how long
# after is reported only.
sub check_delays
{
	my ($label, $lines) = @_;
	my @ms;
	foreach my $line (split /\n/, $lines)
	{
		my ($kind, $ms) = split / /, $line;
		push @ms, $ms;
		cmp_ok($ms, '>=', 0, "$label: $kind reaped after its lease expired (${ms} ms after)");
	}
	my $max = (sort { $a <=> $b } @ms)[-1];
	diag("reap delay after lease expiry at $label: " . join(', ', map { "$_ ms" } @ms)
		  . " (max $max ms)");
}

check_delays('jobq.naptime = 100ms', reap_delays(q{'vanish', 'once', 'late'}));

# The same at the default naptime of 1s, set by a reload.
$node->safe_psql('postgres', q{
	ALTER SYSTEM SET jobq.naptime = '1s';
	SELECT pg_reload_conf();
	SELECT count(*) FROM jobq.enqueue_many('slow', ARRAY['{}', '{}', '{}']::jsonb[]);
});
is($node->safe_psql('postgres', 'SHOW jobq.naptime'), '1s', 'naptime reloaded to 1s');
foreach my $i (1 .. 3)
{
	my $lease = sprintf('%.1f s', 0.7 + 0.4 * $i);
	$node->safe_psql('postgres', qq{
		INSERT INTO held
		SELECT 'slow$i', job_id, lease_token, lease_expires_at
		  FROM jobq.claim(worker_id => 'w-slow', lease => '$lease', kinds => ARRAY['slow'])});
}
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) = 3 FROM jobq.attempt a JOIN held h USING (job_id)
	 WHERE h.kind LIKE 'slow%'}),
	'three more leases reaped at naptime 1s');
check_delays('jobq.naptime = 1s', reap_delays(q{'slow1', 'slow2', 'slow3'}));

$node->stop;
done_testing();
