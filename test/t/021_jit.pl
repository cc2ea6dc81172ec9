# jobq's statements get right plans from the planner alone, on a stock
# server (jit = on, jit_above_cost as shipped): no statement that a jobq
# function or its background worker runs is JIT-compiled, and no statement
# of the hot operations (enqueue, claim, complete, fail, reap) reads one of
# jobq's large tables with a sequential scan.  (Two statements sort by
# design, over a bounded set: a per-key claim's window over at most 10,000
# ready rows, and the promotion of a queue's due scheduled rows.)
#
# Two rounds: first on tables ANALYZEd while nearly empty and then grown
# (autovacuum off, so the statistics stay those of the empty tables, and
# the background worker's plans are made while they are small), then on
# large tables freshly ANALYZEd.  auto_explain logs the plan of every
# statement, nested ones included; the test's own statements carry the
# marker /*t*/ and are left out.  pg_stat_statements (track = all) records
# every nested statement's jit_functions.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('jit');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
pg_stat_statements.track = all
pg_stat_statements.max = 10000
shared_preload_libraries = 'jobq,pg_stat_statements,auto_explain'
auto_explain.log_min_duration = 0
auto_explain.log_nested_statements = on
autovacuum = off
jit = on
jobq.naptime = 100ms
jobq.prune_interval = 1s
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobq; CREATE EXTENSION pg_stat_statements');

# The server compiles statements at all: else this test could not fail.
$node->safe_psql('postgres', q{
	SELECT pg_stat_statements_reset() /*t*/;
	SET jit_above_cost = 0;
	SELECT sum(x) AS jit_probe FROM generate_series(1, 10) x /*t*/});
my $probe = $node->safe_psql('postgres', q{
	SELECT COALESCE(sum(jit_functions), 0) FROM pg_stat_statements
	 WHERE query LIKE '%jit_probe%' AND toplevel});
cmp_ok($probe, '>', 0, 'with jit_above_cost = 0 the server JIT-compiles a plain statement')
  or diag('JIT is not available here (no llvmjit?): the checks below would prove nothing');

# Small tables: a few jobs, ANALYZEd, then the tables grow to the sizes of
# a busy queue (about 200,000 jobs, half of them finished) with no new
# statistics.
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}']::jsonb[], queue => 'plain') /*t*/;
	ANALYZE /*t*/;
});
my $fills = 0;

# grow SQL: 100,000 ready, 50,000 scheduled and 50,000 finished jobs more
sub grow
{
	$node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM generate_series(1, 100) g,
	  LATERAL jobq.enqueue_many('bulk', array_fill(jsonb_build_object('g', g), ARRAY[1000]),
	                            queue => 'bulk') /*t*/;
	SELECT count(*) FROM generate_series(1, 50) g,
	  LATERAL jobq.enqueue_many('bulk', array_fill(jsonb_build_object('g', g), ARRAY[1000]),
	                            queue => 'later', run_at => now() + interval '1 day') /*t*/;
	SELECT count(*) FROM generate_series(1, 50) g,
	  LATERAL jobq.enqueue_many('bulk', array_fill(jsonb_build_object('g', g), ARRAY[1000]),
	                            queue => 'done') /*t*/;
	});
	for (1 .. 50)
	{
		$node->safe_psql(
			'postgres', q{
	SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token))
	  FROM jobq.claim('done', batch => 1000) /*t*/});
	}
	$fills++;
}

# every operation of the API once: producers, workers, limits, operations
sub operations
{
	my ($round) = @_;
	$node->safe_psql(
		'postgres', q{
	SELECT jobq.drop_queue(name, force => true) FROM jobq.queue
	 WHERE name IN ('plain', 'perkey', 'limited', 'lapsing', 'ticks', 'doomed') /*t*/;
});
	$node->safe_psql(
		'postgres', q{
	SELECT jobq.configure('plain', max_retries => 1, backoff_base => '0', backoff_cap => '0') /*t*/;
	SELECT jobq.configure('perkey', max_per_key => 1) /*t*/;
	SELECT jobq.configure('limited', max_concurrency => 5, rate_limit => 100,
	                      breaker_threshold => 3) /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 1}', queue => 'plain') /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 2}', queue => 'plain',
	                                  idempotency_key => 'key-1') /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 2}', queue => 'plain',
	                                  idempotency_key => 'key-1') /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'plain',
	                                  run_at => now() + '1 hour') /*t*/;
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[],
	                                       queue => 'plain') /*t*/;
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}']::jsonb[], queue => 'plain',
	                                       idempotency_keys => ARRAY['key-2', NULL]) /*t*/;
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[],
	                                       queue => 'perkey', concurrency_key => 'a') /*t*/;
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[],
	                                       queue => 'limited') /*t*/;
	CREATE TABLE c AS SELECT * FROM jobq.claim('plain', 'w1', batch => 3) /*t*/;
	SELECT jobq.complete(job_id, lease_token, '{"ok": true}') FROM c LIMIT 1 /*t*/;
	SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token))
	  FROM (SELECT * FROM c ORDER BY job_id OFFSET 1 LIMIT 1) x /*t*/;
	SELECT jobq.fail(job_id, lease_token, 'boom') FROM c ORDER BY job_id OFFSET 2 /*t*/;
	DROP TABLE c /*t*/;
	CREATE TABLE c AS SELECT * FROM jobq.claim('plain', 'w1', batch => 3) /*t*/;
	SELECT jobq.extend(job_id, lease_token, '1 minute') FROM c ORDER BY job_id LIMIT 1 /*t*/;
	SELECT jobq.checkpoint(job_id, lease_token, '{"at": 1}') FROM c ORDER BY job_id LIMIT 1 /*t*/;
	SELECT jobq.snooze(job_id, lease_token, '1 hour') FROM c ORDER BY job_id OFFSET 1 LIMIT 1 /*t*/;
	SELECT jobq.fail(job_id, lease_token, 'final', retryable => false)
	  FROM c ORDER BY job_id OFFSET 2 LIMIT 1 /*t*/;
	DROP TABLE c /*t*/;
	SELECT count(*) FROM jobq.claim('perkey', 'w2', batch => 3) /*t*/;
	SELECT count(*) FROM jobq.claim('limited', 'w3', batch => 2) /*t*/;
	SELECT count(*) FROM jobq.claim('plain', 'w4', wait => '10 ms') /*t*/;
	SELECT jobq.retry_failed(queue => 'plain') /*t*/;
	SELECT jobq.cancel(max(job_id)) FROM jobq.jobs WHERE status = 'pending' /*t*/;
	SELECT jobq.retry(max(job_id)) FROM jobq.jobs WHERE status = 'cancelled' /*t*/;
	SELECT jobq.pause('plain') /*t*/;
	SELECT jobq.resume('plain') /*t*/;
	SELECT jobq.purge('plain', 'completed') /*t*/;
	SELECT jobq.reap() /*t*/;
	SELECT jobq.prune() /*t*/;
	SELECT jobq.schedule('every-second', '* * * * * *', 'tick', queue => 'ticks') /*t*/;
	SELECT jobq.run_schedules() /*t*/;
	SELECT jobq.cron_next('*/5 * * * *', now(), 'Europe/Paris') /*t*/;
	SELECT count(*) FROM jobq.job(1) /*t*/;
	SELECT count(*) FROM jobq.job_by_key('k', 'key-1') /*t*/;
	SELECT count(*) FROM jobq.kind_stats() /*t*/;
	SELECT count(*) FROM jobq.kind_stats('1 day', 'plain') /*t*/;
	SELECT count(*) FROM jobq.health() /*t*/;
	SELECT jobq.register_worker('host:1', ARRAY['plain'], '{"pid": 1}') /*t*/;
	SELECT count(*) FROM jobq.app_workers /*t*/;
	SELECT jobq.unregister_worker('host:1') /*t*/;
	CREATE TABLE c AS SELECT * FROM jobq.claim('plain', 'w5') /*t*/;
	SELECT jobq.fail(job_id, lease_token, 'E: x', retryable => false, details => 'trace') FROM c /*t*/;
	SELECT jobq.discard(job_id) FROM c /*t*/;
	DROP TABLE c /*t*/;
	SELECT jobq.update_job(max(job_id), priority => 3) FROM jobq.jobs WHERE status = 'pending' /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', queue => 'doomed') /*t*/;
	SELECT jobq.drop_queue('doomed') /*t*/;
});

	# The background worker's own statements: a lease it reaps, a schedule
	# it fires.
	$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('lapse', '{}', queue => 'lapsing') /*t*/;
	SELECT count(*) FROM jobq.claim('lapsing', lease => '100 ms') /*t*/;
});
	ok( $node->poll_query_until(
			'postgres', q{
	SELECT count(*) = 1 FROM jobq.jobs WHERE queue = 'lapsing' AND status <> 'running' /*t*/}),
		"$round: the background worker reaped the expired lease");
	ok( $node->poll_query_until(
			'postgres', q{
	SELECT count(*) >= 2 FROM jobq.jobs WHERE kind = 'tick' /*t*/}),
		"$round: the background worker fired the schedule");
}

# the hot operations once, each in a statement of its own
sub hot
{
	$node->safe_psql(
		'postgres', q{
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 1}', queue => 'plain') /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 2}', queue => 'plain',
	                                  idempotency_key => 'hot-' || clock_timestamp()) /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 3}', queue => 'plain',
	                                  idempotency_key => 'hot-1') /*t*/;
	SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'plain', run_at => now() + '1 hour') /*t*/;
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[], queue => 'plain') /*t*/;
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}']::jsonb[], queue => 'perkey',
	                                       concurrency_key => 'a') /*t*/;
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}']::jsonb[], queue => 'limited') /*t*/;
	CREATE TEMP TABLE h AS SELECT * FROM jobq.claim('plain', 'w1', batch => 3) /*t*/;
	SELECT jobq.complete(job_id, lease_token) FROM (SELECT * FROM h ORDER BY job_id LIMIT 1) x /*t*/;
	SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token))
	  FROM (SELECT * FROM h ORDER BY job_id OFFSET 1 LIMIT 1) x /*t*/;
	SELECT jobq.fail(job_id, lease_token, 'boom') FROM (SELECT * FROM h ORDER BY job_id OFFSET 2) x /*t*/;
	SELECT count(*) FROM jobq.claim('perkey', 'w2', batch => 3) /*t*/;
	SELECT count(*) FROM jobq.claim('limited', 'w3', batch => 2) /*t*/;
	SELECT count(*) FROM jobq.claim('bulk', 'w4', batch => 100, lease => '1 ms') /*t*/;
	SELECT pg_sleep(0.05) /*t*/;
	SELECT jobq.reap() /*t*/;
});
}

# check ROUND LOGOFFSET: since LOGOFFSET no statement of jobq's was
# JIT-compiled, and none that the test's own sessions ran nested (the hot
# operations since HOTOFFSET) read a large table of jobq's sequentially
sub check
{
	my ($round, $offset, $hot) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @bad;
	my $plans = 0;
	my $hotlog = substr($log, $hot - $offset);
	while ($log =~ /duration: [0-9.]+ ms  plan:\n(.*?)(?=^\S|\z)/msg)
	{
		my $plan = $1;
		next if $plan =~ m{/\*t\*/};
		push @bad, $plan if $plan =~ /^\s*JIT:/m;
	}
	# "... [pid] 021_jit.pl LOG:  duration: ... plan:\n\tQuery Text: ...\n\t<plan>"
	while ($hotlog =~ /^[^\n]*\] 021_jit\.pl LOG:  duration: [0-9.]+ ms  plan:\n(.*?)(?=^\S|\z)/msg)
	{
		my $plan = $1;
		next if $plan =~ m{/\*t\*/};
		$plans++;
		push @bad, $plan
		  if $plan =~ /Seq Scan on (job|ready|scheduled|idempotency_key|attempt)\b/;
	}
	cmp_ok($plans, '>=', 15, "$round: auto_explain logged the hot operations' statements ($plans plans)");
	is(scalar(@bad), 0, "$round: no statement of jobq's was compiled; none of the hot operations read a large table sequentially")
	  or diag(join("\n----\n", @bad));

	my $compiled = $node->safe_psql(
		'postgres', q{
	SELECT string_agg(format('%s calls, %s functions: %s', calls, jit_functions,
	                         left(regexp_replace(query, '\s+', ' ', 'g'), 120)),
	                  E'\n' ORDER BY jit_functions DESC)
	  FROM pg_stat_statements
	 WHERE NOT toplevel AND jit_functions > 0 AND query !~ '/\*t\*/' /*t*/});
	is($compiled, '', "$round: no statement run by a jobq function or worker was JIT-compiled")
	  or diag("JIT-compiled:\n$compiled");
	$node->safe_psql('postgres', 'SELECT pg_stat_statements_reset() /*t*/');
}

$node->safe_psql('postgres', 'SELECT pg_stat_statements_reset() /*t*/');
# round 1: the statistics of nearly empty tables; the worker's plans are
# made while the tables are small, then the tables grow
operations('small');
grow();
my $offset = -s $node->logfile;
operations('grown, statistics of the empty tables');
my $hot = -s $node->logfile;
hot();
check('grown, statistics of the empty tables', $offset, $hot);

# round 2: large tables, ANALYZEd
$node->safe_psql('postgres', 'VACUUM ANALYZE /*t*/');
$offset = -s $node->logfile;
operations('large, analyzed');
$hot = -s $node->logfile;
hot();
check('large, analyzed', $offset, $hot);

done_testing();
