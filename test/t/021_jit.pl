# No statement jobq runs is JIT-compiled, whatever the server's jit
# settings (issue 15, item 9).
#
# With the default jit = on, a statement whose plan costs more than
# jit_above_cost is compiled at every execution; jobq's indexed statements
# are planned with enable_sort off and can cost 1e10.  Here jit_above_cost
# is 0, so that every statement the server plans with jit on gets
# compiled; pg_stat_statements (track = all) records the statements jobq's
# functions and its background worker run (toplevel = false) with their
# jit_functions.  Every operation of the API runs once, the worker reaps,
# prunes and fires, and then no nested statement may have been compiled.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('jit');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'jobq,pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 10000
jit = on
jit_above_cost = 0
jobq.naptime = 100ms
jobq.prune_interval = 1s
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobq; CREATE EXTENSION pg_stat_statements');

# The server compiles statements at all: else this test could not fail.
$node->safe_psql('postgres', q{
	SELECT pg_stat_statements_reset();
	SELECT sum(x) AS jit_probe FROM generate_series(1, 10) x});
my $probe = $node->safe_psql('postgres', q{
	SELECT COALESCE(sum(jit_functions), 0) FROM pg_stat_statements
	 WHERE query LIKE '%jit_probe%' AND toplevel});
cmp_ok($probe, '>', 0, 'with jit_above_cost = 0 the server JIT-compiles a plain statement')
  or diag('JIT is not available here (no llvmjit?): the checks below would prove nothing');

$node->safe_psql('postgres', 'SELECT pg_stat_statements_reset()');

# Every operation once: producers, workers, limits, operations from psql.
$node->safe_psql(
	'postgres', q{
	SELECT jobq.configure('plain', max_retries => 1, backoff_base => '0', backoff_cap => '0');
	SELECT jobq.configure('perkey', max_per_key => 1);
	SELECT jobq.configure('limited', max_concurrency => 5, rate_limit => 100,
	                      breaker_threshold => 3);
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 1}', queue => 'plain');
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 2}', queue => 'plain',
	                                  idempotency_key => 'key-1');
	SELECT count(*) FROM jobq.enqueue('k', '{"n": 2}', queue => 'plain',
	                                  idempotency_key => 'key-1');
	SELECT count(*) FROM jobq.enqueue('k', '{}', queue => 'plain',
	                                  run_at => now() + '1 hour');
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[],
	                                       queue => 'plain');
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}']::jsonb[], queue => 'plain',
	                                       idempotency_keys => ARRAY['key-2', NULL]);
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[],
	                                       queue => 'perkey', concurrency_key => 'a');
	SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[],
	                                       queue => 'limited');
	CREATE TABLE c AS SELECT * FROM jobq.claim('plain', 'w1', batch => 3);
	SELECT jobq.complete(job_id, lease_token, '{"ok": true}') FROM c LIMIT 1;
	SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token))
	  FROM (SELECT * FROM c ORDER BY job_id OFFSET 1 LIMIT 1) x;
	SELECT jobq.fail(job_id, lease_token, 'boom') FROM c ORDER BY job_id OFFSET 2;
	DROP TABLE c;
	CREATE TABLE c AS SELECT * FROM jobq.claim('plain', 'w1', batch => 3);
	SELECT jobq.extend(job_id, lease_token, '1 minute') FROM c ORDER BY job_id LIMIT 1;
	SELECT jobq.checkpoint(job_id, lease_token, '{"at": 1}') FROM c ORDER BY job_id LIMIT 1;
	SELECT jobq.snooze(job_id, lease_token, '1 hour') FROM c ORDER BY job_id OFFSET 1 LIMIT 1;
	SELECT jobq.fail(job_id, lease_token, 'final', retryable => false)
	  FROM c ORDER BY job_id OFFSET 2 LIMIT 1;
	DROP TABLE c;
	SELECT count(*) FROM jobq.claim('perkey', 'w2', batch => 3);
	SELECT count(*) FROM jobq.claim('limited', 'w3', batch => 2);
	SELECT count(*) FROM jobq.claim('plain', 'w4', wait => '10 ms');
	SELECT jobq.retry_failed(queue => 'plain');
	SELECT jobq.cancel(max(job_id)) FROM jobq.jobs WHERE status = 'pending';
	SELECT jobq.retry(max(job_id)) FROM jobq.jobs WHERE status = 'cancelled';
	SELECT jobq.pause('plain');
	SELECT jobq.resume('plain');
	SELECT jobq.purge('plain', 'completed');
	SELECT jobq.reap();
	SELECT jobq.prune();
	SELECT jobq.schedule('every-second', '* * * * * *', 'tick', queue => 'ticks');
	SELECT jobq.run_schedules();
	SELECT jobq.cron_next('*/5 * * * *', now(), 'Europe/Paris');
	SELECT count(*) FROM jobq.job(1);
	SELECT count(*) FROM jobq.job_by_key('k', 'key-1');
	SELECT count(*) FROM jobq.kind_stats();
	SELECT count(*) FROM jobq.kind_stats('1 day', 'plain');
	SELECT count(*) FROM jobq.health();
	SELECT jobq.register_worker('host:1', ARRAY['plain'], '{"pid": 1}');
	SELECT count(*) FROM jobq.app_workers;
	SELECT jobq.unregister_worker('host:1');
	CREATE TABLE c AS SELECT * FROM jobq.claim('plain', 'w5');
	SELECT jobq.fail(job_id, lease_token, 'E: x', retryable => false, details => 'trace') FROM c;
	SELECT jobq.discard(job_id) FROM c;
	DROP TABLE c;
	SELECT jobq.update_job(max(job_id), priority => 3) FROM jobq.jobs WHERE status = 'pending';
	SELECT count(*) FROM jobq.enqueue('k', queue => 'doomed');
	SELECT jobq.drop_queue('doomed');
});

# The background worker's own statements: a lease it reaps, a schedule it
# fires (both are in pg_stat_statements as nested statements).
$node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('lapse', '{}', queue => 'lapsing');
	SELECT count(*) FROM jobq.claim('lapsing', lease => '100 ms');
});
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) = 1 FROM jobq.attempt WHERE outcome = 'lease expired'}),
	'the background worker reaped the expired lease');
ok( $node->poll_query_until(
		'postgres', q{
	SELECT count(*) >= 2 FROM jobq.jobs WHERE kind = 'tick'}),
	'the background worker fired the schedule');
$node->safe_psql('postgres', q{SELECT jobq.unschedule('every-second')});

my $nested = $node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_statements WHERE NOT toplevel AND query ~ 'jobq\.'});
cmp_ok($nested, '>=', 40, "pg_stat_statements saw jobq's statements ($nested)");

# (PostgreSQL 18 records the query of a CREATE TABLE AS as a nested
# statement: this test's own CREATE TABLE c AS SELECT ... FROM jobq.claim(),
# planned with jit_above_cost = 0, is compiled and is not jobq's)
my $compiled = $node->safe_psql(
	'postgres', q{
	SELECT string_agg(format('%s calls, %s functions: %s', calls, jit_functions,
	                         left(regexp_replace(query, '\s+', ' ', 'g'), 120)),
	                  E'\n' ORDER BY jit_functions DESC)
	  FROM pg_stat_statements
	 WHERE NOT toplevel AND jit_functions > 0
	   AND query !~ '^CREATE TABLE c AS '});
is($compiled, '', 'no statement run by a jobq function or worker was JIT-compiled')
  or diag("JIT-compiled:\n$compiled");

done_testing();
