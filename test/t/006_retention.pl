# The background worker prunes finished jobs after their queue's retention
# (completed and cancelled: retention_completed; failed: retention_failed),
# together with their attempt rows, and leaves pending and running jobs
# alone.  An idempotency key outlives its pruned job: it stays reserved until
# jobq.idempotency_retention after the job finished, then it is free again.
#
# jobq.idempotency_retention is set by reloads: the first right after CREATE
# EXTENSION, while the launcher starts the database's worker (a reload that
# reached a starting worker used to be lost: PostgreSQL 15's
# BackgroundWorkerMain sets SIGHUP to SIG_IGN before the worker installs its
# handler, which discards a pending SIGHUP; the worker now re-reads the
# configuration after unblocking signals), the second while the worker runs.
# No check depends on the machine's speed: the key that must stay reserved
# after its job was pruned has a retention of hours, the failed job that
# must outlive the completed one has a retention of an hour until the test
# shortens it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('retention');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.prune_interval = 1s\n");
$node->start;

# Keys first stay reserved for 5 hours after their job finished (the
# default is 7 days): far longer than any run of this test.
my $key_retention = 5 * 3600;

# Set jobq.idempotency_retention by a reload, then wait until the worker
# has finished two rounds after it (the first may have begun before it).
sub reload_key_retention
{
	my ($value) = @_;
	my $since = $node->safe_psql('postgres', qq{
		ALTER SYSTEM SET jobq.idempotency_retention = '$value';
		SELECT pg_reload_conf();
		SELECT clock_timestamp();});
	$since = (split /\n/, $since)[-1];
	foreach (1 .. 2)
	{
		$node->poll_query_until(
			'postgres', qq{
			SELECT last_run_at > '$since' FROM jobq.workers
			 WHERE role = 'worker' AND database = 'postgres'})
		  or die 'the jobq worker does not run its rounds';
		$since = $node->safe_psql('postgres', q{
			SELECT last_run_at FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'});
	}
	is($node->safe_psql('postgres', 'SHOW jobq.idempotency_retention'),
		$value, "jobq.idempotency_retention reloaded: $value");
}

# the reload while the launcher starts the worker
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');
reload_key_retention('5h');
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'a jobq worker serves database postgres');

# Queue q will prune quickly (its retention_completed becomes 1 s once the
# jobs are in place: on a busy machine setting them up takes longer than
# that); queue keep has the default retention (1 day, 30 days).  The finish
# time of every job is kept in table noted.
$node->safe_psql('postgres', q{
	SELECT jobq.configure('q', retention_completed => '1 hour', retention_failed => '1 hour');
	SELECT jobq.configure('keep');
	CREATE TABLE noted (name text PRIMARY KEY, job_id bigint, finished_at timestamptz);
});

# Enqueue a job, claim it, and let $finish end the attempt ($finish is SQL
# using job_id and lease_token of table c); note the job as $name.
sub finished_job
{
	my ($name, $queue, $finish, %opt) = @_;
	my $key = $opt{key} ? "'$opt{key}'" : 'NULL';
	my $retries = $opt{max_retries} // 'NULL';
	$node->safe_psql('postgres', qq{
		SELECT count(*) FROM jobq.enqueue('$name', queue => '$queue',
			max_retries => $retries, idempotency_key => $key);
		CREATE TEMP TABLE c AS
		SELECT job_id, lease_token FROM jobq.claim('$queue', kinds => ARRAY['$name']);
		$finish;
		INSERT INTO noted SELECT '$name', job_id, finished_at FROM jobq.job
		 WHERE kind = '$name'});
	return $node->safe_psql('postgres', "SELECT job_id FROM noted WHERE name = '$name'");
}

# a completed job with an attempt row: it failed once, then succeeded
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('done', queue => 'q', idempotency_key => 'k1');
	CREATE TABLE c1 AS SELECT job_id, lease_token FROM jobq.claim('q', kinds => ARRAY['done']);
	SELECT jobq.fail(job_id, lease_token, 'first try', retry_in => '0 s') FROM c1;
	CREATE TABLE c2 AS SELECT job_id, lease_token FROM jobq.claim('q', kinds => ARRAY['done']);
	SELECT jobq.complete(job_id, lease_token) FROM c2;
	INSERT INTO noted SELECT 'done', job_id, finished_at FROM jobq.job WHERE kind = 'done';
});
my %id;
$id{done} = $node->safe_psql('postgres', q{SELECT job_id FROM noted WHERE name = 'done'});
$id{failed} = finished_job('failed', 'q',
	q{SELECT jobq.fail(job_id, lease_token, 'boom', retryable => false) FROM c});
$id{cancelled} = finished_job('cancelled', 'q', q{SELECT jobq.cancel(job_id) FROM c});
$id{kept} = finished_job('kept', 'keep', q{SELECT jobq.complete(job_id, lease_token) FROM c});
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('pending', queue => 'q', idempotency_key => 'k2');
	SELECT count(*) FROM jobq.enqueue('running', queue => 'q');
	SELECT count(*) FROM jobq.claim('q', lease => '1 hour', kinds => ARRAY['running']);
});

is( $node->safe_psql(
		'postgres', q{
	SELECT kind, status, (SELECT count(*) FROM jobq.attempt a WHERE a.job_id = j.job_id)
	  FROM jobq.job j ORDER BY job_id}),
	"done|completed|1\nfailed|failed|1\ncancelled|cancelled|1\nkept|completed|0\n"
	  . "pending|pending|0\nrunning|running|0",
	'six jobs; the finished ones in queue q have attempt rows');
is( $node->safe_psql(
		'postgres', q{
	SELECT key, job_id = (SELECT job_id FROM jobq.job WHERE kind = j.kind), expires_at IS NULL
	  FROM jobq.idempotency_key j ORDER BY key}),
	"k1|t|t\nk2|t|t", 'both keys are reserved, without expiry while their jobs exist');

#
# pruning
#
$node->safe_psql('postgres', q{SELECT jobq.configure('q', retention_completed => '1 s')});
ok( $node->poll_query_until(
		'postgres', qq{
	SELECT NOT EXISTS (SELECT FROM jobq.job WHERE job_id IN ($id{done}, $id{cancelled}))}),
	'the completed and the cancelled job are pruned after retention_completed');

# Enqueue with the key of the pruned completed job: the key is reserved
# (for hours), so this returns that job with created = false.
my ($created, $dup_id) = split /\|/,
  $node->safe_psql(
	'postgres', q{
	SELECT e.created, e.job_id FROM jobq.enqueue('done', queue => 'q', idempotency_key => 'k1') e});

# The completed job is gone, the failed one (retention_failed 1 hour) is
# not: retention_failed applies to it, not retention_completed.
is($node->safe_psql('postgres', qq{SELECT count(*) FROM jobq.job WHERE job_id = $id{failed}}),
	'1', 'the failed job is not pruned with the completed one');
# with retention_failed shortened to 2 s it goes, not before 2 s after it finished
$node->safe_psql('postgres', q{SELECT jobq.configure('q', retention_failed => '2 s')});
ok( $node->poll_query_until(
		'postgres', qq{SELECT NOT EXISTS (SELECT FROM jobq.job WHERE job_id = $id{failed})}),
	'the failed job is pruned after retention_failed');
is( $node->safe_psql(
		'postgres', q{SELECT now() >= finished_at + interval '2 s' FROM noted WHERE name = 'failed'}),
	't', 'not before its retention_failed had passed');

is( $node->safe_psql(
		'postgres', qq{
	SELECT count(*) FROM jobq.attempt
	 WHERE job_id IN ($id{done}, $id{failed}, $id{cancelled})}),
	'0', 'their attempt rows went with them');
is( $node->safe_psql(
		'postgres', q{SELECT kind, status FROM jobq.job ORDER BY job_id}),
	"kept|completed\npending|pending\nrunning|running",
	'the job of a queue with the default retention, the pending and the running job are left');
is( $node->safe_psql(
		'postgres', q{
	SELECT pruned >= 3 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	't', 'jobq.workers counts the pruned rows');

#
# the idempotency key of the pruned job
#
{
	is("$created|$dup_id", "f|$id{done}",
		'after the job was pruned, its key returned it with created = false');
	is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE kind = 'done'}),
		'0', 'no job was created for the reserved key');
	is( $node->safe_psql(
			'postgres', qq{
		SELECT k.job_id, k.expires_at = n.finished_at + interval '$key_retention s'
		  FROM jobq.idempotency_key k JOIN noted n ON n.job_id = k.job_id
		 WHERE k.key = 'k1'}),
		"$id{done}|t",
		'the key stays, expiring jobq.idempotency_retention after its job finished');
	is( $node->safe_psql(
			'postgres', q{SELECT expires_at IS NULL FROM jobq.idempotency_key WHERE key = 'k2'}),
		't', 'the pending job\'s key has no expiry');
}

# A key retention of 2 s, reloaded while the worker runs: a job finished
# now has its key freed 2 s after it finished, not before (and not after
# 5 hours, which a lost reload would give).
$key_retention = 2;
reload_key_retention("${key_retention}s");
$id{done3} = finished_job('done3', 'q', q{SELECT jobq.complete(job_id, lease_token) FROM c}, key => 'k3');
ok( $node->poll_query_until(
		'postgres', qq{SELECT NOT EXISTS (SELECT FROM jobq.job WHERE job_id = $id{done3})}),
	'the completed job with key k3 is pruned');
ok( $node->poll_query_until(
		'postgres', q{SELECT count(*) = 0 FROM jobq.idempotency_key WHERE key = 'k3'}),
	'the key is pruned once jobq.idempotency_retention has passed');
is( $node->safe_psql(
		'postgres', qq{
	SELECT now() >= finished_at + interval '$key_retention s' FROM noted WHERE name = 'done3'}),
	't', 'not before');
is( $node->safe_psql(
		'postgres', qq{
	SELECT e.created, e.job_id <> $id{done3}
	  FROM jobq.enqueue('done3', queue => 'q', idempotency_key => 'k3') e}),
	't|t', 'the key is free again: enqueue creates a new job');
is( $node->safe_psql(
		'postgres', q{
	SELECT k.job_id = j.job_id, k.expires_at IS NULL
	  FROM jobq.idempotency_key k JOIN jobq.job j ON j.kind = k.kind AND j.status = 'pending'
	 WHERE k.key = 'k3'}),
	't|t', 'and the key belongs to the new job');
is( $node->safe_psql(
		'postgres', qq{
	SELECT k.expires_at = n.finished_at + interval '5 hours'
	  FROM jobq.idempotency_key k JOIN noted n ON n.job_id = k.job_id WHERE k.key = 'k1'}),
	't', 'the key of the first pruned job keeps the expiry it was given');

$node->stop;
done_testing();
