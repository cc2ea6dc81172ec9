# A rate limit holds under concurrent claimers: six pgbench clients claim
# (in batches, half of the time with a wait) from a queue limited to 8 claims
# per second and complete what they get, until the backlog is gone.  From
# the claim time of every job (each is claimed exactly once, so jobq.job
# keeps it): no window of one rate_period ever holds more than 8 claims, the
# limit was actually reached (the clients pressed against it), several
# clients got work, and every job was completed: the limit slows the queue
# down but never stops it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $limit = 8;
my $jobs = 48;

my $node = PostgreSQL::Test::Cluster->new('rate_concurrent');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\nmax_connections = 40\n");
$node->start;
$node->safe_psql('postgres', qq{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('rl', rate_limit => $limit, rate_period => '1 second', lease => '10 minutes');
	SELECT count(*) FROM (SELECT jobq.enqueue('k', jsonb_build_object('i', i), 'rl')
	                        FROM generate_series(1, $jobs) i) e;
});

# a client: claim up to 3, complete each in the same transaction; when
# nothing was claimed (the limit, or no work) pause a little instead of
# spinning on two shared cores.  Each transaction is this or, as often, the
# same claim with a wait (the claim's waiting loop is another code path).
my $client = q{
SELECT count(*) FILTER (WHERE jobq.complete(job_id, lease_token)) AS n
  FROM jobq.claim('rl', worker_id => 'c' || :client_id, batch => 3) \gset
\if :n
\else
SELECT pg_sleep(0.02);
\endif
};
my $waiter = q{
SELECT count(*) FILTER (WHERE jobq.complete(job_id, lease_token)) AS n
  FROM jobq.claim('rl', worker_id => 'w' || :client_id, batch => 3, wait => '500 ms');
};
$node->pgbench('-n -c 6 -j 2 -T 4', 0, [qr{processed: [1-9]}], [qr{^$}],
	'six clients claim from the rate-limited queue at once',
	{ 'client@1' => $client, 'waiter@1' => $waiter });

# the rest of the backlog, still under the limit: progress, never a stall
ok($node->poll_query_until('postgres', q{
	SELECT count(*) FILTER (WHERE jobq.complete(job_id, lease_token)) >= 0
	   AND NOT EXISTS (SELECT FROM jobq.job WHERE queue = 'rl' AND status <> 'completed')
	  FROM jobq.claim('rl', worker_id => 'drain', batch => 3)}),
	'every job of the rate-limited queue is done in the end');

is($node->safe_psql('postgres', q{
	SELECT count(*), count(*) FILTER (WHERE attempts = 1 AND claimed_at IS NOT NULL)
	  FROM jobq.job WHERE queue = 'rl'}),
	"$jobs|$jobs", 'each job was claimed exactly once, so its claimed_at is its claim');

# the most claims in any window (t - 1 s, t] (half-open, as the limit counts:
# a claim exactly one period old has left the window); windows ending at a
# claim are the fullest ones
my $window = q{
	SELECT a.claimed_at AS t,
	       (SELECT count(*) FROM jobq.job b WHERE b.queue = 'rl'
	           AND b.claimed_at > a.claimed_at - interval '1 second'
	           AND b.claimed_at <= a.claimed_at) AS n
	  FROM jobq.job a WHERE a.queue = 'rl'};
my $max_in_window = $node->safe_psql('postgres', "SELECT max(n) FROM ($window) w");
my $worst = $node->safe_psql('postgres', qq{
	SELECT string_agg(to_char(b.claimed_at, 'HH24:MI:SS.US') || ' ' || b.worker_id, ', '
	                  ORDER BY b.claimed_at)
	  FROM (SELECT t FROM ($window) w ORDER BY n DESC, t LIMIT 1) w
	  JOIN jobq.job b ON b.queue = 'rl' AND b.claimed_at > w.t - interval '1 second'
	                 AND b.claimed_at <= w.t});
cmp_ok($max_in_window, '<=', $limit, "no window of one second holds more than $limit claims (most: $max_in_window)")
  or diag("the fullest window: $worst");
is($max_in_window, $limit, 'the clients pressed against the limit: some window holds exactly the limit');
cmp_ok($node->safe_psql('postgres', q{
	SELECT count(DISTINCT substr(worker_id, 2)) FROM jobq.job
	 WHERE queue = 'rl' AND worker_id <> 'drain'}),
	'>=', 2, 'several concurrent clients got work');
# Waiting claims look again the moment the window frees a claim, so they
# usually win the freed places over claims that do not wait; which kind gets
# a freed place is not promised, only that waiting claims are served.
my ($nowait, $waited) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE worker_id LIKE 'c%'), count(*) FILTER (WHERE worker_id LIKE 'w%')
	  FROM jobq.job WHERE queue = 'rl'});
note("claims without a wait got $nowait jobs, claims with a wait $waited");
cmp_ok($waited, '>', 0, 'claims waiting under the limit got work');
$node->stop;
done_testing();
