# Flow control under load: pgbench workers claim from a queue with
# max_concurrency and max_per_key while producers enqueue; afterwards the
# claim and finish times of every job prove the limits were never exceeded,
# and every job was completed exactly once (none lost).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('limits');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\nmax_connections = 40");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('lim', max_concurrency => 3, max_per_key => 2, lease => '1 minute');
	CREATE TABLE ledger (job_id bigint PRIMARY KEY);
	SELECT count(*) FROM (
	  SELECT jobq.enqueue('k', '{}', 'lim', concurrency_key => 'tenant-' || (i % 4))
	    FROM generate_series(1, 300) i) e;
});

# workers: claim one, "work" 2 ms, complete it and record it in the ledger
# (in one transaction, only when complete returned true)
my $worker = q{
SELECT coalesce(max(job_id), 0) AS jid, coalesce(max(lease_token), 0) AS tok FROM jobq.claim('lim', worker_id => 'w' || :client_id) \gset
SELECT pg_sleep(0.002);
BEGIN;
INSERT INTO ledger SELECT :jid WHERE :jid > 0 AND jobq.complete(:jid, :tok);
COMMIT;
};
my $producer = q{
\set t random(0, 3)
SELECT count(*) FROM jobq.enqueue('k', '{}', 'lim', concurrency_key => 'tenant-' || :t);
};
$node->pgbench('-n -c 8 -j 2 -T 8', 0, [qr{processed: [1-9]}], [qr{^$}],
	'workers and producers under limits',
	{ 'worker@5' => $worker, 'producer@1' => $producer });

# drain what is left, one claim at a time
$node->safe_psql('postgres', q{
	DO $$
	DECLARE r record; n int;
	BEGIN
	  LOOP
	    n := 0;
	    FOR r IN SELECT * FROM jobq.claim('lim', batch => 3) LOOP
	      INSERT INTO ledger SELECT r.job_id WHERE jobq.complete(r.job_id, r.lease_token);
	      n := n + 1;
	    END LOOP;
	    EXIT WHEN n = 0;
	  END LOOP;
	END $$;
});

my $states = $node->safe_psql('postgres',
	q{SELECT string_agg(status || '=' || n, ',' ORDER BY status) FROM
	  (SELECT status, count(*) n FROM jobq.job GROUP BY status) s});
like($states, qr/^completed=\d+$/, "every job completed: $states");
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM jobq.job j LEFT JOIN ledger l USING (job_id) WHERE l.job_id IS NULL}),
	'0', 'every completed job is in the ledger once');

# the most jobs ever running at once, from claim and finish times
my $overlap = q{
	WITH ev AS (
	  SELECT claimed_at AS t, 1 AS d, concurrency_key AS k FROM jobq.job
	  UNION ALL
	  SELECT finished_at, -1, concurrency_key FROM jobq.job)
	SELECT max(running) FROM (
	  SELECT sum(d) OVER (%s ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS running FROM ev) x
};
my $max_queue = $node->safe_psql('postgres', sprintf($overlap, ''));
my $max_key = $node->safe_psql('postgres', sprintf($overlap, 'PARTITION BY k'));
cmp_ok($max_queue, '<=', 3, "never more than max_concurrency running (max seen $max_queue)");
cmp_ok($max_queue, '>=', 2, "the limit was actually reached under load (max seen $max_queue)");
cmp_ok($max_key, '<=', 2, "never more than max_per_key running per key (max seen $max_key)");

$node->stop;
done_testing();
