# Workflows under load: 20,000 jobs in random DAGs (each job depends on up
# to three earlier jobs of its DAG, some in another queue, some with
# on_parent_failure 'run'), 8 pgbench workers claiming, failing 5 % of
# attempts (a retry, never the last one) and completing the rest.  Right
# after each claim, the statement that follows records whether all the
# job's parents were completed (the claim saw the job ready only once the
# last parent's completion had committed); a ledger row is written in the
# transaction that completes a job.  Afterwards: every job ran (completed)
# exactly once, no job was claimed (let alone run) before all its parents
# had completed, and every dependency was settled.  (Claim and finish times
# cannot show the order: a claim takes its time before its snapshot.)  Then a fan-in of 10,000 parents: the
# callback is pending in the transaction right after the last one completes.
# Then two tenants: one holds its own dependent of the other's job locked,
# and neither the other's completion nor the reaper waits for it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dag');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\nmax_connections = 40");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('dag', lease => '5 minutes');
	SELECT jobq.configure('dag2', lease => '5 minutes');
	CREATE TABLE ledger (job_id bigint, parents_done boolean, ran_at timestamptz DEFAULT clock_timestamp());
	CREATE TABLE claims (job_id bigint, parents_done boolean);
	DO $$
	DECLARE
	  ids bigint[];
	  parents bigint[];
	  id bigint;
	BEGIN
	  PERFORM setseed(0.24);
	  FOR d IN 1..400 LOOP
	    ids := '{}';
	    FOR i IN 1..50 LOOP
	      parents := '{}';
	      IF i > 1 THEN
	        FOR k IN 1..floor(random() * 4)::int LOOP
	          parents := parents || ids[1 + floor(random() * (i - 1))::int];
	        END LOOP;
	      END IF;
	      SELECT e.job_id INTO id FROM jobq.enqueue('step', jsonb_build_object('d', d, 'i', i),
	          queue => CASE WHEN random() < 0.3 THEN 'dag2' ELSE 'dag' END,
	          max_retries => 20, depends_on => parents,
	          on_parent_failure => CASE WHEN random() < 0.2 THEN 'run' ELSE 'cancel' END) e;
	      ids := ids || id;
	    END LOOP;
	  END LOOP;
	END $$;
});
is($node->safe_psql('postgres', 'SELECT count(*) FROM jobq.job'), '20000', '20,000 jobs enqueued');
my $edges = $node->safe_psql('postgres', 'SELECT count(*) FROM jobq.dependency');
cmp_ok($edges, '>', 20000, "with $edges dependencies");

# claim, then fail (5 %) or complete with a ledger row, in one transaction
my $worker = q{
\set q random(1, 10)
\set f random(1, 20)
SELECT coalesce(max(job_id), 0) AS jid, coalesce(max(lease_token), 0) AS tok
  FROM jobq.claim(CASE WHEN :q <= 7 THEN 'dag' ELSE 'dag2' END, worker_id => 'w' || :client_id) \gset
INSERT INTO claims
SELECT :jid, (SELECT coalesce(bool_and(p.status = 'completed'), true) FROM jobq.parent_results(:jid) p)
 WHERE :jid > 0;
BEGIN;
SELECT jobq.fail(:jid, :tok, 'flaky', retry_in => '0') WHERE :jid > 0 AND :f = 1;
INSERT INTO ledger (job_id, parents_done)
SELECT :jid, (SELECT coalesce(bool_and(p.status = 'completed'), true) FROM jobq.parent_results(:jid) p)
 WHERE :jid > 0 AND :f > 1 AND jobq.complete(:jid, :tok);
COMMIT;
};
$node->pgbench('-n -c 8 -j 2 -T 20', 0, [qr{processed: [1-9]}], [qr{^$}],
	'8 workers over the DAGs', { 'worker' => $worker });
my $by_workers = $node->safe_psql('postgres', 'SELECT count(*) FROM ledger');
cmp_ok($by_workers, '>', 1000, "the workers ran $by_workers jobs");

# what is left, in one transaction: each completion unblocks the next (a
# job pgbench claimed just before its time ran out is handed back first).
# A child the workers' completions found held by another completion was
# deferred to the background worker (jobq.settle_deferred): wait for it,
# and drain again, until nothing is left.
$node->safe_psql('postgres', q{SELECT jobq.release_running('dag'), jobq.release_running('dag2')});
my $deferred_seen = $node->safe_psql('postgres', 'SELECT count(*) FROM jobq.settle_deferred');
note("parents deferred to the background worker when the workers stopped: $deferred_seen");
for my $round (1 .. 20)
{
	$node->poll_query_until('postgres', 'SELECT NOT EXISTS (SELECT FROM jobq.settle_deferred)')
	  or die 'deferred settling never finished';
	$node->safe_psql('postgres', q{
	DO $$
	DECLARE r record; n int;
	BEGIN
	  LOOP
	    n := 0;
	    FOR r IN SELECT * FROM jobq.claim('dag', batch => 100) UNION ALL SELECT * FROM jobq.claim('dag2', batch => 100) LOOP
	      INSERT INTO claims
	      SELECT r.job_id, (SELECT coalesce(bool_and(p.status = 'completed'), true) FROM jobq.parent_results(r.job_id) p);
	      INSERT INTO ledger (job_id, parents_done)
	      SELECT r.job_id, (SELECT coalesce(bool_and(p.status = 'completed'), true) FROM jobq.parent_results(r.job_id) p)
	       WHERE jobq.complete(r.job_id, r.lease_token);
	      n := n + 1;
	    END LOOP;
	    EXIT WHEN n = 0;
	  END LOOP;
	END $$;
	});
	last if $node->safe_psql('postgres',
		q{SELECT NOT EXISTS (SELECT FROM jobq.job WHERE status <> 'completed')
		     AND NOT EXISTS (SELECT FROM jobq.settle_deferred)}) eq 't';
}

is($node->safe_psql('postgres',
	q{SELECT string_agg(status || '=' || n, ',' ORDER BY status) FROM
	  (SELECT status, count(*) n FROM jobq.job GROUP BY status) s}),
	'completed=20000', 'every job completed');
is($node->safe_psql('postgres', 'SELECT count(*), count(DISTINCT job_id) FROM ledger'),
	'20000|20000', 'every job ran exactly once');
is($node->safe_psql('postgres', 'SELECT count(*) FROM ledger WHERE NOT parents_done'),
	'0', 'no job ran before all its parents had completed');
my $claims = $node->safe_psql('postgres', 'SELECT count(*) FROM claims');
is($node->safe_psql('postgres', 'SELECT count(*) FROM claims WHERE NOT parents_done'),
	'0', "no job was claimed before all its parents had completed ($claims claims)");
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE parent_status IS DISTINCT FROM 'completed'),
	       (SELECT count(*) FROM jobq.dependent WHERE parents_left <> 0)
	  FROM jobq.dependency}),
	'0|0', 'every dependency settled, no parent left uncounted');
cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.attempt WHERE error = 'flaky'}),
	'>', 0, 'attempts failed and were retried on the way');

# fan-in: a callback behind 10,000 parents
$node->safe_psql('postgres', q{
	CREATE TABLE fan AS SELECT job_id FROM jobq.enqueue_many('leaf', array_fill('{}'::jsonb, ARRAY[10000]), queue => 'fan');
	SELECT count(*) FROM jobq.enqueue('callback', queue => 'fan', depends_on => ARRAY(SELECT job_id FROM fan),
	                                  on_parent_failure => 'run');
	DO $$
	BEGIN
	  FOR i IN 1..10 LOOP
	    PERFORM jobq.complete(c.job_id, c.lease_token)
	       FROM jobq.claim('fan', kinds => ARRAY['leaf'], batch => CASE WHEN i < 10 THEN 1000 ELSE 999 END) c;
	  END LOOP;
	END $$;
});
is($node->safe_psql('postgres', q{SELECT status FROM jobq.jobs WHERE kind = 'callback'}),
	'blocked', 'the callback waits for its last parent');
my $last = $node->safe_psql('postgres', q{
	SELECT clock_timestamp() AS t0 \gset
	SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('fan', kinds => ARRAY['leaf']);
	SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1);
});
$last = (split /\n/, $last)[-1];
note("the last parent's claim and completion, which unblocked the callback: ${last} ms");
is($node->safe_psql('postgres', q{SELECT status FROM jobq.jobs WHERE kind = 'callback'}),
	'pending', 'the callback is pending once the last parent completed');
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM jobq.claim('fan', kinds => ARRAY['callback'])}), '1', 'and is claimed');

# Tenants: bob's job waits for one of alice's (bob may work on her queue,
# so he may depend on its jobs), and bob keeps his own job locked in
# an open transaction.  Alice's worker completes her job without waiting
# for bob (a statement_timeout would end a wait), and so does the reaper
# when it expires another of her leases; bob's job runs once he lets go.
$node->safe_psql('postgres', q{
	CREATE ROLE alice; CREATE ROLE bob;
	SELECT jobq.grant('ta', 'alice', 'enqueue'), jobq.grant('ta', 'alice', 'work'),
	       jobq.grant('ta', 'bob', 'work'), jobq.grant('tb', 'bob', 'enqueue'),
	       jobq.grant('tb', 'bob', 'work'), jobq.grant('tb', 'bob', 'administer');
	CREATE TABLE public.alice_jobs (job_id bigint);
	GRANT ALL ON public.alice_jobs TO alice;
	GRANT SELECT ON public.alice_jobs TO bob;
	SET ROLE alice;
	INSERT INTO public.alice_jobs SELECT job_id FROM jobq.enqueue('a.step', queue => 'ta');
	INSERT INTO public.alice_jobs SELECT job_id FROM jobq.enqueue('a.slow', queue => 'ta', max_retries => 0);
	SET ROLE bob;
	SELECT count(*) FROM jobq.enqueue('b.after', queue => 'tb',
	    depends_on => ARRAY(SELECT job_id FROM public.alice_jobs), on_parent_failure => 'run');
});
my $bob = $node->background_psql('postgres');
$bob->query_safe('SET ROLE bob');
$bob->query_safe('BEGIN');
$bob->query_safe(q{SELECT jobq.update_job(j.job_id, priority => 5) FROM jobq.jobs j WHERE j.kind = 'b.after'});
my $alice = $node->safe_psql('postgres', q{
	SET ROLE alice;
	SET statement_timeout = '10s';
	SELECT count(*) FROM jobq.claim('ta', kinds => ARRAY['a.slow'], lease => '1 ms');
	SELECT jobq.complete(c.job_id, c.lease_token) FROM jobq.claim('ta', kinds => ARRAY['a.step']) c;
	SELECT pg_sleep(0.05);
	RESET ROLE;
	SELECT jobq.reap() >= 0;
});
is(join(',', split /\n/, $alice), '1,t,,t',
	"alice's completion and a reap went through while bob held his dependent");
$node->poll_query_until('postgres',
	q{SELECT status = 'failed' FROM jobq.jobs WHERE kind = 'a.slow'})
  or die "alice's expired lease was never reaped";
pass("alice's expired lease was reaped (by jobq.reap() or the background worker) while bob held it");
is($node->safe_psql('postgres', q{SELECT status FROM jobq.jobs WHERE kind = 'b.after'}),
	'blocked', "bob's job waits while he holds it");
$bob->query_safe('COMMIT');
$bob->quit;
$node->poll_query_until('postgres',
	q{SELECT status = 'pending' FROM jobq.jobs WHERE kind = 'b.after'})
  or die "bob's job never became pending";
is($node->safe_psql('postgres', q{
	SELECT j.priority, t.parents_left, (SELECT count(*) FROM jobq.settle_deferred)
	  FROM jobq.jobs j JOIN jobq.dependent t USING (job_id) WHERE j.kind = 'b.after'}),
	'5|0|0', "bob's job runs once he let go, with his change");

$node->stop;
done_testing();
