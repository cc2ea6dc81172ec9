# Workers and executors share jobq.max_workers under one rule that leaves no
# database unserved (issue "No tenant stalls another", item 5), on a stock
# server (only shared_preload_libraries added; jobq.max_workers = 4):
#
# 1. Exactly four databases with jobq, each with a worker of its own, fill
#    jobq.max_workers.  A handler registered in one of them still gets its
#    jobs run: the launcher turns to the shared pool, whose workers leave
#    after a pass, so that executors find a place (before: the jobs stayed
#    pending for ever, nothing logged).  Every database is still reaped.
# 2. Three databases, one with handlers whose two executors hold a job each;
#    DROP EXTENSION and CREATE EXTENSION in another: that database is served
#    again (an idle executor gives up its place, none starts while it
#    waits), and after a restart too (before: no worker at all, jobq.service
#    'none', no WARNING, and the launcher's state file kept it "without
#    jobq" across the restart).
# 1b. (between the two) Five databases, the pool for good: a handler job of
#    a paused queue runs once the queue is resumed, though no worker or
#    executor of its database ran at the resume.
#
# Deadlines are generous (a loaded 2-core machine); the times are reported.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('pool_exec');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "jit = on\nmax_worker_processes = 8\n"
	  . "jobq.naptime = 200ms\njobq.executors = 2\n");
$node->start;

# a job claimed under a lease of $lease by a worker that is gone
sub vanish
{
	my ($db, $kind, $lease) = @_;
	return $node->safe_psql($db, qq{
		SELECT job_id FROM jobq.enqueue('$kind', max_retries => 0);
		SELECT count(*) FROM jobq.claim(worker_id => 'gone', lease => '$lease', kinds => ARRAY['$kind']);});
}

# seconds until the job of kind $kind in $db is no longer running, or undef
sub reaped_within
{
	my ($db, $kind, $limit) = @_;
	my $t0 = time;
	while (time - $t0 < $limit)
	{
		return time - $t0
		  if $node->safe_psql($db, "SELECT count(*) FROM jobq.job WHERE kind = '$kind' AND status <> 'running'") > 0;
		select(undef, undef, undef, 0.2);
	}
	return undef;
}

# --- 1. four databases, a handler in one ----------------------------------
my @dbs = qw(pe1 pe2 pe3 pe4);
foreach my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION jobq');
}
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 4 FROM pg_stat_activity WHERE backend_type = 'jobq worker'}),
	'four databases, four workers: jobq.max_workers is full');

$node->safe_psql('pe1', q{
	CREATE FUNCTION public.echo(payload jsonb) RETURNS jsonb LANGUAGE sql
	  AS $$ SELECT payload $$;
	SELECT jobq.register_handler('echo', 'public.echo(jsonb)', allow_superuser => true);
	SELECT count(*) FROM jobq.enqueue_many('echo', array_fill('{"n": 1}'::jsonb, ARRAY[20]));
});
my $t0 = time;
ok($node->poll_query_until('pe1', q{SELECT count(*) = 20 FROM jobq.job WHERE kind = 'echo' AND status = 'completed'}),
	'the handler jobs of one of four databases run');
note sprintf('20 handler jobs completed %.1f s after they were enqueued', time - $t0);

foreach my $db (@dbs)
{
	vanish($db, 'lost1', '1 second');
}
foreach my $db (@dbs)
{
	my $s = reaped_within($db, 'lost1', 120);
	ok(defined $s, "$db: an expired lease is reaped meanwhile");
	note sprintf('%s: reaped %.1f s after the claim (1 s lease)', $db, $s // -1);
}
is($node->safe_psql('pe1', q{SELECT status FROM jobq.health() WHERE check_name = 'service'}) ne 'critical',
	1, 'pe1: health does not say the database is unserved');

# --- 1b. a resume is news to the pool -------------------------------------
# Five databases with jobq: the shared pool serves them for good.  A paused
# queue's handler job waits in pe1 while its executors leave, idle; a resume
# must bring them back (before: nothing announced it, and the job waited for
# a pass something else caused; prune passes are an hour apart here).
$node->safe_psql('postgres', 'CREATE DATABASE pe5');
$node->safe_psql('pe5', 'CREATE EXTENSION jobq');
$node->safe_psql('postgres', q{ALTER SYSTEM SET jobq.prune_interval = '1h'; SELECT pg_reload_conf()});
$node->safe_psql('pe1', q{
	SELECT jobq.pause('held');
	SELECT jobq.register_handler('echo.held', 'public.echo(jsonb)', 'held', allow_superuser => true);
	SELECT jobq.enqueue('echo.held', '{"n": 2}', 'held');
});
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM pg_stat_activity
		 WHERE backend_type IN ('jobq executor', 'jobq worker') AND datname = 'pe1'}),
	'pe1: five databases share the pool; no worker or executor of pe1 runs, idle');
$node->safe_psql('pe1', q{SELECT jobq.resume('held')});
$t0 = time;
ok($node->poll_query_until('pe1', q{SELECT status = 'completed' FROM jobq.job WHERE kind = 'echo.held'}),
	'pe1: the handler job of a queue resumed while no executor ran is run');
note sprintf('the resumed queue\'s job completed %.1f s after the resume', time - $t0);
$node->safe_psql('postgres', q{ALTER SYSTEM RESET jobq.prune_interval; SELECT pg_reload_conf()});
$node->safe_psql('postgres', 'DROP DATABASE pe5');

# --- 2. an executor holds a place; another database's extension re-created --
$node->safe_psql('postgres', 'DROP DATABASE pe4');
$node->safe_psql('pe1', q{
	CREATE FUNCTION public.slow(payload jsonb) RETURNS jsonb LANGUAGE sql
	  AS $$ SELECT pg_catalog.pg_sleep((payload->>'s')::float8); SELECT '{}'::pg_catalog.jsonb $$;
	SELECT jobq.register_handler('slow', 'public.slow(jsonb)', allow_superuser => true);
	SELECT jobq.enqueue('slow', '{"s": 40}');
});
ok($node->poll_query_until('pe1', q{SELECT count(*) = 1 FROM jobq.job WHERE kind = 'slow' AND status = 'running'}),
	'an executor runs a 40 s handler');

$node->safe_psql('pe2', 'DROP EXTENSION jobq');
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'jobq worker' AND datname = 'pe2'}),
	'pe2: its worker leaves with the extension');
$node->safe_psql('pe2', 'CREATE EXTENSION jobq');
vanish('pe2', 'lost2', '1 second');
my $s = reaped_within('pe2', 'lost2', 120);
ok(defined $s, 'pe2: re-created while an executor ran, it is served again');
note sprintf('pe2: reaped %.1f s after the claim', $s // -1);
isnt($node->safe_psql('pe2', 'SELECT served_by FROM jobq.service'), 'none', 'pe2: jobq.service names who serves it');

# ... and after a restart (the launcher's state file must not say "without jobq")
$node->restart;
vanish('pe2', 'lost3', '1 second');
$s = reaped_within('pe2', 'lost3', 120);
ok(defined $s, 'pe2: served after a restart');
note sprintf('pe2 after the restart: reaped %.1f s after the claim', $s // -1);
vanish('pe3', 'lost3', '1 second');
ok(defined reaped_within('pe3', 'lost3', 120), 'pe3: served after the restart');

$node->stop;
done_testing();
