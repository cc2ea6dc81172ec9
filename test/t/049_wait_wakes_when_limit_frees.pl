# A waiting claim on a limited queue is woken when its limit frees.  Its
# condition variable is broadcast only by commits that make jobs ready; when
# the claim found ready jobs that the queue's rate window or max_concurrency
# held back, it used to sleep JOBQ_MAX_WAIT_SLEEP_MS (5 s) or until its wait
# ended, although a job became claimable within 100 ms.  Now it looks again
# when the rate window's oldest claim leaves it, and every
# JOBQ_LIMITED_POLL_MS (100 ms) while max_concurrency holds it back.
#
# Deadlines here are 20x the time the limit takes to free (they catch the
# 5 s sleep, not a slow machine).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('wait_limit');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('rl', rate_limit => 1, rate_period => '100 ms');
	SELECT jobq.configure('mc', max_concurrency => 1);
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[2]), 'rl');
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[2]), 'mc');
});

# rate limit: the second claim must wait for the window (100 ms), not 5 s
my ($first, $second) = split /\n/, $node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.claim('rl');
	SELECT clock_timestamp() AS t0 \gset
	SELECT count(*), extract(epoch FROM clock_timestamp() - :'t0')
	  FROM jobq.claim('rl', wait => '20 s')});
my ($n, $secs) = split /\|/, $second;
is("$first|$n", '1|1', 'two claims of the rate-limited queue, the second waiting, get a job each');
cmp_ok($secs, '<', 2, "the waiting claim got it soon after the rate window freed (took $secs s)");

# max_concurrency: a claim waiting behind the running job is woken by its
# completion
my ($job, $token) = split /\|/,
  $node->safe_psql('postgres', q{SELECT job_id, lease_token FROM jobq.claim('mc')});
my $bg = $node->background_psql('postgres');
$bg->query_until(qr/waiting/, q{\echo waiting
SELECT count(*) AS n, clock_timestamp() AS got FROM jobq.claim('mc', wait => '20 s') \gset
});
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE wait_event_type = 'Extension' AND backend_type = 'client backend'}),
	'the second claim waits');
my $done = $node->safe_psql('postgres',
	"SELECT clock_timestamp() FROM jobq.complete($job, $token) c WHERE c");
isnt($done, '', 'the running job completes');
$bg->query_safe('SELECT 1');    # the claim above has returned
($n, $secs) = split /\|/,
  $bg->query_safe(qq{SELECT :n, extract(epoch FROM :'got'::timestamptz - '$done'::timestamptz)});
is($n, '1', 'the claim waiting behind max_concurrency gets a job');
cmp_ok($secs, '<', 2, "soon after the running one completed (took $secs s)");
$bg->quit;

$node->stop;
done_testing();
