# A tenant's schedules cannot keep its database's worker from reaping, nor
# from firing another tenant's schedules (DECISIONS, Tenants: every database
# reaped within 5 s of a lease's expiry whatever a tenant does), on a stock
# server (only shared_preload_libraries added; jit on):
#
# 1. A role that administers only its own queue makes jobq.max_schedules
#    (10,000) schedules that fire every second: more than the worker can
#    fire.  Before, the worker fired until no schedule was due, which never
#    happened, and reaped nothing (a 2 s lease of another tenant stayed
#    expired for over a minute).  Now firing stops at jobq.pass_budget and
#    reaping follows in every pass: the other tenant's 1 s lease is reaped,
#    and its schedule fires.
# 2. The same role holds the creation of a queue open in a transaction and
#    makes 200 schedules of that queue that fire every second: each fire
#    waited 100 ms for the queue's row, 200 of them before every reap (19 s
#    late observed), with a warning each.  Now a fire waits 10 ms, and the
#    rest of the pass leaves that queue's schedules out.
#
# The target is 5 s; the test allows 60 s (a loaded 2-core machine) and
# reports what it saw.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $bound = 60;

my $node = PostgreSQL::Test::Cluster->new('flood');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "jit = on\nmax_worker_processes = 8\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE ROLE tenant LOGIN; CREATE ROLE victim LOGIN;
	CREATE EXTENSION jobq;
	SELECT jobq.grant('noisy', 'tenant', 'administer');
	SELECT jobq.grant('newq', 'tenant', 'administer');
	SELECT jobq.grant('v', 'victim', 'administer');
	SET ROLE victim;
	SELECT jobq.schedule('tick', '*/2 * * * * *', 'tick', queue => 'v');
});

# a victim job claimed under a 1 s lease by a worker that is gone: seconds
# from its lease's expiry to its reap (undef: not within $bound)
sub victim_reap_delay
{
	my $expires = $node->safe_psql('postgres', q{
		SET ROLE victim;
		SELECT count(*) FROM jobq.enqueue('victim', queue => 'v', max_retries => 0);
		SELECT extract(epoch FROM lease_expires_at)
		  FROM jobq.claim('v', 'gone', lease => '1 second', kinds => ARRAY['victim']);
	}) =~ s/.*\n//sr;
	my $t0 = time;
	while (time - $t0 < $bound + 2)
	{
		my $at = $node->safe_psql('postgres', q{
			SELECT extract(epoch FROM updated_at) FROM jobq.jobs
			 WHERE kind = 'victim' AND status <> 'running'});
		if ($at ne '')
		{
			$node->safe_psql('postgres', "DELETE FROM jobq.job WHERE kind = 'victim'");
			return $at - $expires;
		}
		select(undef, undef, undef, 0.2);
	}
	return undef;
}

# how late the victim's schedule (every 2 s) fires at worst over $secs seconds
sub tick_lateness
{
	my ($secs) = @_;
	my $worst = 0;
	my $t0 = time;
	while (time - $t0 < $secs)
	{
		my $late = $node->safe_psql('postgres', q{
			SELECT greatest(extract(epoch FROM now() - next_fire_at), 0)
			  FROM jobq.schedule WHERE name = 'tick'});
		$worst = $late if $late > $worst;
		select(undef, undef, undef, 0.25);
	}
	return $worst;
}

# --- 1. 10,000 schedules every second --------------------------------------
$node->safe_psql('postgres', q{
	SET ROLE tenant;
	SELECT count(jobq.schedule('s' || g, '* * * * * *', 'spam', queue => 'noisy', misfire => 'skip'))
	  FROM generate_series(1, 10000) g;
});
sleep 3;
my $delay = victim_reap_delay();
diag(sprintf('10,000 schedules a second: the victim\'s lease reaped %s after its expiry',
	defined $delay ? sprintf('%.1f s', $delay) : "not within $bound s"));
ok(defined $delay && $delay < $bound, 'flood: another tenant\'s lease is reaped');
my $late = tick_lateness(6);
diag(sprintf('10,000 schedules a second: the victim\'s schedule at most %.1f s late', $late));
cmp_ok($late, '<', $bound, 'flood: another tenant\'s schedule fires');
ok( $node->safe_psql('postgres',
		"SELECT count(*) > 0 FROM jobq.job WHERE queue = 'noisy' AND created_at > now() - interval '3 s'"),
	'flood: the tenant\'s schedules fire too');
$node->safe_psql('postgres', "DELETE FROM jobq.schedule WHERE queue = 'noisy'");

# --- 2. schedules of a queue whose creation is held open -------------------
my $hold = $node->background_psql('postgres', on_error_stop => 1, extra_params => [ '-U', 'tenant' ]);
$hold->query_safe('BEGIN');
$hold->query_safe(q{SELECT jobq.configure('newq', max_retries => 1)});
$node->safe_psql('postgres', q{
	SET ROLE tenant;
	SELECT count(jobq.schedule('b' || g, '* * * * * *', 'b', queue => 'newq')) FROM generate_series(1, 200) g;
});
my $log_start = -s $node->logfile;
sleep 3;
$delay = victim_reap_delay();
diag(sprintf('200 schedules of a held queue: the victim\'s lease reaped %s after its expiry',
	defined $delay ? sprintf('%.1f s', $delay) : "not within $bound s"));
ok(defined $delay && $delay < $bound, 'held queue: another tenant\'s lease is reaped');
$late = tick_lateness(6);
diag(sprintf('200 schedules of a held queue: the victim\'s schedule at most %.1f s late', $late));
cmp_ok($late, '<', $bound, 'held queue: another tenant\'s schedule fires');
my $warnings = () = slurp_file($node->logfile, $log_start) =~ /firing schedule "b\d+" failed/g;
cmp_ok($warnings, '<=', 20,
	"held queue: $warnings warnings of failed fires in about 15 s, not 200 a pass");
$hold->query_safe('COMMIT');
$hold->quit;
ok( $node->poll_query_until('postgres',
		"SELECT count(DISTINCT payload) >= 0 AND count(*) >= 200 FROM jobq.job WHERE queue = 'newq'"),
	'held queue: once the queue is committed its 200 schedules fire');

done_testing();
