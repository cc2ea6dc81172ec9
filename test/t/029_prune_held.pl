# Pruning never waits for a finished job's row that another transaction
# holds, and is not stopped by it: it passes over the held rows and prunes
# the ones after them, however many are held before them, and prunes the
# held ones once they are let go.  A pruned job's attempts go with it and
# its idempotency key starts to expire; a held job's stay.  Expired keys are
# pruned the same way.
#
# jobq.prune_interval is a day here: the background worker prunes once, in
# its first round, and then not again during the test, so every prune below
# is the test's own jobq.prune() and the counts it returns are exact.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('prune_held');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.prune_interval = 86400\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');
$node->poll_query_until(
	'postgres', q{
	SELECT last_run_at IS NOT NULL FROM jobq.workers
	 WHERE role = 'worker' AND database = 'postgres'})
  or die 'the jobq worker does not run its rounds';

# six jobs, each completed in a transaction of its own (so their finish
# times are in job order), each with an idempotency key and, from a first
# attempt that failed, an attempt row
my @id;
foreach my $n (1 .. 6)
{
	push @id, $node->safe_psql('postgres', qq{
		SELECT job_id FROM jobq.enqueue('k', queue => 'q', idempotency_key => 'key$n')});
	$node->safe_psql('postgres', qq{
		SELECT jobq.fail(job_id, lease_token, 'first try', retry_in => '0')
		  FROM jobq.claim('q', worker_id => 'w')});
	$node->safe_psql('postgres', qq{
		SELECT jobq.complete(job_id, lease_token)
		  FROM jobq.claim('q', worker_id => 'w')});
}
is( $node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.job j JOIN jobq.attempt a USING (job_id)
	 WHERE j.status = 'completed'}),
	'6', 'six completed jobs, each with its attempt');
$node->safe_psql('postgres', q{SELECT jobq.configure('q', retention_completed => '0')});

# the two that finished first are held by an open transaction
my $holder = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('BEGIN');
is( $holder->query_safe(qq{
	SELECT count(*) FROM (SELECT FROM jobq.job WHERE job_id IN ($id[0], $id[1]) FOR UPDATE) l}),
	'2', 'an open transaction holds the rows of the first two');

sub remaining
{
	return $node->safe_psql('postgres',
		q{SELECT string_agg(job_id::text, ',' ORDER BY job_id) FROM jobq.job});
}

# a statement_timeout turns waiting into a failure
is( $node->safe_psql('postgres', q{SET statement_timeout = '20s'; SELECT jobq.prune(2)}),
	'2', 'prune(2) prunes two jobs, past the two held before them, without waiting');
is(remaining(), "$id[0],$id[1],$id[4],$id[5]", 'the third and the fourth are gone');
is( $node->safe_psql('postgres', qq{
	SELECT count(*) FROM jobq.attempt WHERE job_id IN ($id[2], $id[3])}),
	'0', 'their attempts went with them');
is( $node->safe_psql('postgres', q{
	SELECT string_agg(key || ':' || (expires_at IS NOT NULL), ',' ORDER BY key)
	  FROM jobq.idempotency_key}),
	'key1:false,key2:false,key3:true,key4:true,key5:false,key6:false',
	'their keys start to expire; the others stay reserved');

is( $node->safe_psql('postgres', q{SET statement_timeout = '20s'; SELECT jobq.prune(100)}),
	'2', 'the next prune takes the last two');
is(remaining(), "$id[0],$id[1]", 'only the held jobs remain');
is( $node->safe_psql('postgres', q{SET statement_timeout = '20s'; SELECT jobq.prune(100)}),
	'0', 'and they stay while held');

$holder->query_safe('COMMIT');
$holder->quit;
is($node->safe_psql('postgres', q{SELECT jobq.prune(100)}), '2', 'let go, they are pruned');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job}), '0', 'no job is left');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.attempt}), '0', 'no attempt is left');

# expired idempotency keys go the same way: a held one is passed over
$node->safe_psql('postgres', q{
	UPDATE jobq.idempotency_key
	   SET expires_at = now() - interval '1 hour' + substr(key, 4)::int * interval '1 s'});
$holder = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT FROM jobq.idempotency_key WHERE key = 'key1' FOR UPDATE});
is( $node->safe_psql('postgres', q{SET statement_timeout = '20s'; SELECT jobq.prune(1)}),
	'1', 'prune(1) prunes an expired key, past the held one before it, without waiting');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(key, ',' ORDER BY key) FROM jobq.idempotency_key}),
	'key1,key3,key4,key5,key6', 'the second key is gone, the held first one stays');
$holder->query_safe('COMMIT');
$holder->quit;
is($node->safe_psql('postgres', q{SELECT jobq.prune(100)}), '5', 'let go, the rest go');

# a tenant holding its own due jobs does not stop the pruning of other
# queues, however many times one session prunes: 0.3.7's first version
# returned the (queue, status) pairs out of order once its plan went
# generic (after five passes: the cutoffs' join hashed), and a pass then
# ended at the held jobs' queue, so the queues in jobq.queue after it were
# not pruned while they were held (a review's find).  The held queue is
# made first.
$node->safe_psql('postgres', q{
	SELECT jobq.configure(q, retention_completed => '0', retention_failed => '0')
	  FROM unnest(ARRAY['zz_held', 'acme', 'beta']) q;
	SELECT count(*) FROM jobq.enqueue_many('held', array_fill('{}'::jsonb, ARRAY[600]), queue => 'zz_held');
	SELECT count(jobq.fail(job_id, lease_token, 'x', false)) FROM jobq.claim('zz_held', batch => 600);
});
$holder = $node->background_psql('postgres', on_error_stop => 0);
$holder->query_safe('BEGIN');
$holder->query_safe(q{SELECT count(*) FROM (SELECT FROM jobq.job WHERE queue = 'zz_held' FOR UPDATE) h});
is( $node->safe_psql('postgres', q{
	SET statement_timeout = '60s';
	DO $$
	DECLARE
	    left_over bigint;
	    q text;
	BEGIN
	    FOR i IN 1..12 LOOP
	        FOREACH q IN ARRAY ARRAY['acme', 'beta'] LOOP
	            PERFORM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[50]), queue => q);
	            PERFORM jobq.complete_many(array_agg(job_id), array_agg(lease_token))
	               FROM jobq.claim(q, batch => 50);
	        END LOOP;
	        PERFORM jobq.prune(500);
	        SELECT count(*) INTO left_over FROM jobq.job WHERE queue IN ('acme', 'beta');
	        IF left_over > 0 THEN
	            RAISE EXCEPTION 'pass %: % jobs of acme and beta past retention left', i, left_over;
	        END IF;
	    END LOOP;
	END
	$$;
	SELECT count(*) FROM jobq.job WHERE queue = 'zz_held'}),
	'600', 'twelve passes in one session prune the other queues past the held ones each time');
$holder->query_safe('COMMIT');
$holder->quit;
is($node->safe_psql('postgres', q{SELECT jobq.prune(1000)}), '600', 'let go, the held jobs go too');

# one queue's backlog of due jobs does not hold up the pruning of the
# queues named after it: the (queue, status) pairs take turns, a batch
# each, whichever session prunes (the turn is the database's, in shared
# memory: the shared pool's passes are processes of their own; until 0.3.7
# every batch started at the first queue, and aa_big's 3,000 due jobs went
# before zz_small's 10: three batches here; the turns' first version kept
# the turn in the process, and a new session started at aa_big again)
sub backlog
{
	$node->safe_psql('postgres', q{
		SELECT jobq.configure(q, retention_completed => '0')
		  FROM unnest(ARRAY['aa_big', 'zz_small']) q;
		SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[3000]), queue => 'aa_big');
		SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[10]), queue => 'zz_small');
		DO $$
		BEGIN
		    FOR i IN 1..4 LOOP
		        PERFORM jobq.complete_many(array_agg(job_id), array_agg(lease_token))
		           FROM jobq.claim(CASE WHEN i < 4 THEN 'aa_big' ELSE 'zz_small' END, batch => 1000);
		    END LOOP;
		END
		$$;
	});
}
sub prune_sessions
{
	my @out;
	foreach (1 .. 4)
	{
		push @out, $node->safe_psql('postgres', 'SELECT jobq.prune(1000)');
		push @out, $node->safe_psql('postgres',
			q{SELECT count(*) FILTER (WHERE queue = 'zz_small') || ',' || count(*) FROM jobq.job})
		  if $_ == 2;
	}
	return join(' ', @out);
}
backlog();
is(prune_sessions(), '1000 1000 0,1010 1000 10',
	'the second prune (another session) prunes the small queue named after the big backlog, then the backlog;'
	  . ' the next ones come round to the backlog from the start (nothing due after it)');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job}), '0', 'and nothing is left');

# the same while a queue's pruning fails (a retention too large to compute,
# from before configure checked it): the queues are pruned one by one, and
# take turns so too (this change's first version went in name order from
# the first queue until the batches reached the failing one)
$node->safe_psql('postgres', q{
	SELECT jobq.configure('zzz_bad');
	UPDATE jobq.queue SET retention_completed = '200000 years' WHERE name = 'zzz_bad';
});
backlog();
is(prune_sessions(), '1000 1000 0,1010 1000 10', 'with a failing queue too');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job}), '0', 'and nothing is left');
ok($node->log_contains('pruning finished jobs of queue "zzz_bad" failed'), 'the failing queue is logged');

$node->stop;
done_testing();
