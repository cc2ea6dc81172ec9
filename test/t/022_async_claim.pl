# jobq.async_claim: a transaction that did nothing but claim commits without
# waiting for its WAL flush, and a crash can lose such a claim.  This test
# makes the loss happen (the WAL writer sleeps 10 s, an immediate shutdown
# stops the server before it wakes) and shows what jobq promises then:
#
# * a claim-only transaction is asynchronous: the claim is gone after the
#   crash, its job is pending again with the attempt count it had, and the
#   lost lease's token is refused by complete, fail, extend and checkpoint;
#   the job is claimed again and completes under its new token;
# * a claim followed by its completion (the worker's two transactions) is
#   never lost: the completion's synchronous commit flushes the claim too;
# * a claim in a transaction that wrote anything else (an enqueue before or
#   after it, a row of the application's) stays synchronous and survives;
# * jobq.async_claim = off keeps every claim synchronous, and so does a
#   synchronous_commit other than its default (here: local);
# * a handler run inside the database that crashes the server is still
#   dead-lettered after max_retries: the executors' claims stay synchronous
#   (otherwise each crash would lose the claim, and its attempt with it).
#
# Stock settings otherwise: fsync on (PostgreSQL::Test::Cluster turns it
# off), jit on, only shared_preload_libraries added.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $node = PostgreSQL::Test::Cluster->new('async_claim');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "fsync = on\njit = on\nmax_worker_processes = 8\n"
	  . "# an asynchronous commit stays in WAL buffers for up to 10 s (from 17\n"
	  . "# on, wal_writer_flush_after = 0 wakes the WAL writer at every one)\n"
	  . "wal_writer_delay = 10s\nwal_writer_flush_after = 1GB\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE TABLE app_log (note text);
});

# One pending job per case, kinds naming the case; leases of an hour so
# that nothing but the crash can end them.
my @cases = qw(alone alone_batch two_tx enqueue_first enqueue_after app_row off sync_local);
$node->safe_psql('postgres',
	join('', map { "SELECT jobq.enqueue('$_', queue => '$_');\n" } @cases));

# What a claim returns, as "job_id|lease_token"; $sql is the transaction.
sub claim_sql
{
	my ($queue, $batch) = @_;
	$batch //= 1;
	return "SELECT job_id || '|' || lease_token FROM jobq.claim('$queue', batch => $batch, lease => '1 hour')";
}

my %token;
my %job;
sub keep
{
	my ($case, $out) = @_;
	my ($line) = grep { /^\d+\|\d+$/ } split /\n/, $out;
	my ($id, $tok) = split /\|/, ($line // '');
	ok(defined $tok && $tok ne '', "$case: claimed");
	($job{$case}, $token{$case}) = ($id, $tok);
}

# the worker's pattern: claim, then complete in the next transaction
keep('two_tx', $node->safe_psql('postgres', claim_sql('two_tx')));
is($node->safe_psql('postgres',
		"SELECT jobq.complete($job{two_tx}, $token{two_tx}, '{\"ok\": true}')"),
	't', 'two_tx: completed in the next transaction');

# claims in transactions that wrote something else
keep('enqueue_first', $node->safe_psql('postgres',
	"BEGIN; SELECT jobq.enqueue('other', queue => 'other'); " . claim_sql('enqueue_first') . "; COMMIT;"));
keep('enqueue_after', $node->safe_psql('postgres',
	"BEGIN; " . claim_sql('enqueue_after') . "; SELECT jobq.enqueue('other2', queue => 'other'); COMMIT;"));
keep('app_row', $node->safe_psql('postgres',
	"BEGIN; " . claim_sql('app_row') . "; INSERT INTO app_log VALUES ('claimed'); COMMIT;"));

# a claim-only transaction with the setting off
keep('off', $node->safe_psql('postgres',
	"SET jobq.async_claim = off; " . claim_sql('off')));

# a claim-only transaction that asks for another synchronous_commit
keep('sync_local', $node->safe_psql('postgres',
	"BEGIN; SET LOCAL synchronous_commit = local; " . claim_sql('sync_local') . "; COMMIT;"));

# Last, as any synchronous commit flushes the WAL written before it: claim-
# only transactions (autocommit), one job and a batch.
keep('alone', $node->safe_psql('postgres', claim_sql('alone')));
keep('alone_batch', $node->safe_psql('postgres', claim_sql('alone_batch', 10)));

# The crash: no checkpoint, no flush of the WAL buffers.
$node->stop('immediate');
$node->start;

my %status = map {
	$_ => $node->safe_psql('postgres', "SELECT status || '/' || attempts FROM jobq.job WHERE job_id = $job{$_}")
} @cases;

is($status{alone}, 'pending/0', 'alone: the claim-only transaction was lost in the crash: pending, attempt count as before');
is($status{alone_batch}, 'pending/0', 'alone_batch: the same for a batch claim');
is($status{two_tx}, 'completed/1', 'two_tx: the completion flushed its claim: completed');
is($node->safe_psql('postgres', "SELECT result FROM jobq.job WHERE job_id = $job{two_tx}"),
	'{"ok": true}', 'two_tx: with its result');
is($status{enqueue_first}, 'running/1', 'enqueue_first: a claim after an enqueue in its transaction survived');
is($status{enqueue_after}, 'running/1', 'enqueue_after: a claim before an enqueue in its transaction survived');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE kind IN ('other', 'other2')}),
	'2', 'the enqueues of those transactions survived');
is($status{app_row}, 'running/1', 'app_row: a claim in a transaction that wrote a row of its own survived');
is($node->safe_psql('postgres', 'SELECT count(*) FROM app_log'), '1', 'app_row: with that row');
is($status{off}, 'running/1', 'off: with jobq.async_claim = off the claim survived');
is($status{sync_local}, 'running/1', 'sync_local: with synchronous_commit = local the claim survived');

# The lost leases' tokens are refused, and nothing changes.
for my $case (qw(alone alone_batch))
{
	my ($id, $tok) = ($job{$case}, $token{$case});
	is($node->safe_psql('postgres', "SELECT jobq.complete($id, $tok)"), 'f', "$case: complete with the lost token: false");
	is($node->safe_psql('postgres', "SELECT jobq.fail($id, $tok, 'stale') IS NULL"), 't', "$case: fail with the lost token: NULL");
	is($node->safe_psql('postgres', "SELECT jobq.extend($id, $tok, '1 hour') IS NULL"), 't', "$case: extend with the lost token: NULL");
	is($node->safe_psql('postgres', "SELECT jobq.checkpoint($id, $tok, '{}')"), 'f', "$case: checkpoint with the lost token: false");
	is($node->safe_psql('postgres', "SELECT status || '/' || attempts || '/' || retry_count FROM jobq.job WHERE job_id = $id"),
		'pending/0/0', "$case: still pending, no retry spent");

	# claimed again: a new token, and it completes
	my ($id2, $tok2) = split /\|/, $node->safe_psql('postgres', claim_sql($case));
	is($id2, $id, "$case: the job is claimed again");
	isnt($tok2, $tok, "$case: under a new token");
	is($node->safe_psql('postgres', "SELECT jobq.complete($id2, $tok2)"), 't', "$case: and completes under it");
	is($node->safe_psql('postgres', "SELECT jobq.complete($id, $tok)"), 'f', "$case: the lost token still cannot complete it");
}

# Running jobs that survived keep their leases and tokens.
for my $case (qw(enqueue_first enqueue_after app_row off sync_local))
{
	is($node->safe_psql('postgres', "SELECT jobq.complete($job{$case}, $token{$case})"), 't',
		"$case: completes under the token of its surviving claim");
}

# A poison job: its handler, run by an executor inside the database, kills
# the server.  Each crash must count as an attempt whose lease expired, so
# that after max_retries = 2 the job is dead-lettered (3 crashes) instead of
# crashing the server for ever.
$node->append_conf('postgresql.conf', "restart_after_crash = on\njobq.naptime = 200ms\n");
$node->restart;
$node->safe_psql('postgres', q{
	SELECT jobq.configure('poison', max_retries => 2, lease => '2 seconds');
	CREATE FUNCTION public.crash(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		EXECUTE 'COPY (SELECT 1) TO PROGRAM ''kill -9 $PPID''';
		RETURN '{}';
	END $$;
	SELECT jobq.register_handler('poison.kill', 'public.crash(jsonb)', 'poison', allow_superuser => true);
	SELECT jobq.enqueue('poison.kill', '{}', 'poison');
});
my $dead = 0;
for (1 .. 600)
{
	my $st = eval {
		local $SIG{__DIE__};
		$node->safe_psql('postgres', q{SELECT status FROM jobq.job WHERE kind = 'poison.kill'});
	};
	if (defined $st && $st eq 'failed') { $dead = 1; last; }
	Time::HiRes::usleep(100_000);
}
ok($dead, 'poison: a handler that kills the server is dead-lettered after its retries');
is($node->safe_psql('postgres', q{
	SELECT attempts || '/' || retry_count FROM jobq.job WHERE kind = 'poison.kill'}),
	'3/2', 'poison: three attempts, two retries, each crash counted');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.attempt a JOIN jobq.job j USING (job_id)
	 WHERE j.kind = 'poison.kill' AND a.outcome = 'lease expired'}),
	'3', 'poison: each crash is a lease that expired in the attempt history');
$node->safe_psql('postgres', q{SELECT jobq.unregister_handler('poison.kill')});

$node->stop;
done_testing();
