# Idempotency keys under a race: pgbench clients enqueue jobs with keys drawn
# from a small set, alone and in enqueue_many, and roll back some of their
# transactions.  Afterwards every key that survived belongs to exactly one
# job, its key row points at that job, exactly one committed call created
# it, and every other committed call got that job's id back.  Keys are
# reserved straight in the unique index (src/queue/job_insert.c), the only way.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('keyrace');
$node->init;
# two transactions that take the same keys in a different order deadlock;
# pgbench retries them
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\nmax_connections = 40\ndeadlock_timeout = 20ms");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE TABLE got (kind text, key text, job_id bigint, created boolean);
	CREATE SEQUENCE txn;
});

sub race
{
	my ($kind, $what) = @_;

	# one key alone, or three (one of them maybe repeated) in one call; a
	# transaction in ten is rolled back, its rows in got with it.  The 40
	# keys are new every 25 transactions, so that the clients race to create
	# them all through the run, not only at its start.  A fixed number of
	# transactions (not a time): the number of keys raced for does not
	# depend on the machine's speed.
	my $script = qq{
\\set a random(1, 40)
\\set b random(1, 40)
\\set c random(1, 40)
\\set r random(1, 10)
SELECT nextval('txn') / 25 AS w \\gset
BEGIN;
INSERT INTO got SELECT '$kind', 'k' || :a || '.' || :w, job_id, created
  FROM jobq.enqueue('$kind', '{}', queue => 'race', idempotency_key => 'k' || :a || '.' || :w);
INSERT INTO got SELECT '$kind', k.key, m.job_id, m.created
  FROM jobq.enqueue_many('$kind', ARRAY['{}', '{}', '{}']::jsonb[], queue => 'race',
                         idempotency_keys => ARRAY['k' || :b || '.' || :w, 'k' || :c || '.' || :w, 'k' || :b || '.' || :w])
       WITH ORDINALITY AS m(job_id, created, n)
  JOIN unnest(ARRAY['k' || :b || '.' || :w, 'k' || :c || '.' || :w, 'k' || :b || '.' || :w]) WITH ORDINALITY AS k(key, n) USING (n);
\\if :r = 1
ROLLBACK;
\\else
COMMIT;
\\endif
};
	$node->pgbench('-n -c 8 -j 2 -t 250 --max-tries=1000', 0, [qr{processed: 2000/2000}], [qr{^$}],
		"$what: 8 clients enqueue with the same keys", { "race_$kind" => $script });

	my $q = sub { $node->safe_psql('postgres', shift) };
	my ($calls, $keys) = split /\|/,
	  $q->("SELECT count(*), count(DISTINCT key) FROM got WHERE kind = '$kind'");
	diag("$what: $calls committed calls for $keys keys");
	cmp_ok($keys, '>', 200, "$what: enough keys raced for");
	is( $q->(
			qq{SELECT count(*) FROM (SELECT idempotency_key FROM jobq.job WHERE kind = '$kind'
			   GROUP BY idempotency_key HAVING count(*) > 1) d}),
		'0',
		"$what: no key has two jobs");
	is( $q->(
			qq{SELECT count(*) FROM jobq.idempotency_key k
			   LEFT JOIN jobq.job j ON j.job_id = k.job_id AND j.kind = k.kind AND j.idempotency_key = k.key
			   WHERE k.kind = '$kind' AND j.job_id IS NULL}),
		'0',
		"$what: every key row points at its job");
	is( $q->(
			qq{SELECT count(*) FROM jobq.job j
			   LEFT JOIN jobq.idempotency_key k ON k.kind = j.kind AND k.key = j.idempotency_key
			   WHERE j.kind = '$kind' AND k.job_id IS DISTINCT FROM j.job_id}),
		'0',
		"$what: every job's key row is there");
	is( $q->(
			qq{SELECT count(*) FROM (SELECT key FROM got WHERE kind = '$kind' GROUP BY key
			   HAVING count(*) FILTER (WHERE created) <> 1 OR count(DISTINCT job_id) <> 1) d}),
		'0',
		"$what: per key, one call created the job and every call got its id");
	is( $q->(
			qq{SELECT count(*) FROM got g LEFT JOIN jobq.job j ON j.job_id = g.job_id
			   WHERE g.kind = '$kind' AND (j.job_id IS NULL OR j.idempotency_key <> g.key)}),
		'0',
		"$what: every id returned is a job with that key");
	is( $q->(
			qq{SELECT count(*) FROM jobq.job j LEFT JOIN jobq.ready r USING (job_id)
			   WHERE j.kind = '$kind' AND r.job_id IS NULL}),
		'0',
		"$what: every job is ready to claim");
}

race('direct', 'keys in the unique index');

done_testing();
