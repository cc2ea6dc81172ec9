# A failing unit of background work is logged once in the shared pool too.
#
# When databases outnumber jobq.max_workers, a worker serves a database for
# one pass and exits, and the next pass is another process.  A unit that
# fails (a queue whose pruning cannot compute its retention, a schedule
# whose cron expression no longer parses) must still be logged once per
# cause, as a worker of the database's own logs it (test/t/020), not once a
# pass: the database's slot of shared memory keeps what failed.  Two
# databases with a failing unit of the same name each log theirs once;
# repaired, each says once that it works again.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('poollog');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.max_workers = 1\n"
	  . "jobq.naptime = 100ms\njobq.prune_interval = 1s\n");
$node->start;

my @dbs = qw(pool1 pool2 pool3);
foreach my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION jobq');
}

# In pool1 and pool2: a queue whose pruning fails (its retention is too
# large to compute) and, in pool1, a schedule that cannot be parsed.
my $start = -s $node->logfile;
foreach my $db (qw(pool1 pool2))
{
	$node->safe_psql($db, q{
		SELECT jobq.configure('forever');
		SELECT count(*) FROM jobq.enqueue('keep', queue => 'forever');
		SELECT count(jobq.complete(job_id, lease_token)) FROM jobq.claim('forever');
		UPDATE jobq.queue SET retention_completed = '10000 years' WHERE name = 'forever';
		UPDATE jobq.job SET finished_at = now() - interval '1 hour' WHERE kind = 'keep';});
}
$node->safe_psql('pool1', q{
	SELECT jobq.schedule('broken', '* * * * * *', 'broken.tick');
	UPDATE jobq.schedule SET cron = 'not a cron' WHERE name = 'broken';});
# in pool3, more failing schedules than a database's slot keeps (16)
$node->safe_psql('pool3', q{
	SELECT jobq.schedule('many' || g, '* * * * * *', 'many.tick') FROM generate_series(1, 20) g;
	UPDATE jobq.schedule SET cron = 'not a cron';});

is($node->safe_psql('pool1', 'SELECT served_by FROM jobq.service'),
	'shared pool', 'three databases, jobq.max_workers = 1: the shared pool serves them');

my $prune_failed = qr/jobq: pruning finished jobs of queue "forever" failed: timestamp out of range/;
my $fire_failed = qr/jobq: firing schedule "broken" failed: /;
ok($node->wait_for_log($fire_failed, $start), 'the failing schedule is logged');

# How often the server log says $re since $offset.
sub log_count
{
	my ($re, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @hits = $log =~ /$re/g;
	return scalar @hits;
}

# The passes seen so far, by database: the distinct times jobq.service says
# each was served at (every pass is a process of its own).
my %served;

sub watch_passes
{
	my ($until, $want) = @_;
	while (time < $until)
	{
		foreach my $db (qw(pool1 pool2 pool3))
		{
			my $at = $node->safe_psql($db, 'SELECT last_served_at FROM jobq.service');
			$served{$db}{$at} = 1 if $at ne '';
		}
		last unless grep { keys %{ $served{$_} || {} } < $want } qw(pool1 pool2 pool3);
		select(undef, undef, undef, 0.2);
	}
}

sub passes { my ($db) = @_; return scalar keys %{ $served{$db} || {} }; }

# pruning is due every second: let each database have several passes, the
# units failing in every one
my $deadline = time + 120;
watch_passes($deadline, 6);
cmp_ok(passes('pool1'), '>=', 6, 'pool1 was served by six passes or more');
cmp_ok(passes('pool2'), '>=', 6, 'pool2 was served by six passes or more');
cmp_ok(passes('pool3'), '>=', 6, 'pool3 was served by six passes or more');
is($node->safe_psql('pool1', q{SELECT count(*) FROM jobq.job WHERE kind = 'keep'}),
	'1', 'the failing prune left its job as it was (it kept failing)');

is(log_count($prune_failed, $start), 2, 'the failing prune is logged once in each of the two databases');
# 20 failing schedules, 16 kept: those beyond cost a line a minute, not a
# line each a pass (the test is shorter than a minute)
my $many = log_count(qr/jobq: firing schedule "many\d+" failed/, $start);
note "pool3: $many lines for 20 failing schedules";
cmp_ok($many, '<=', 17, 'more failing units than a slot keeps: 16 lines, and one a minute for the rest');
is(log_count($fire_failed, $start), 1, 'the failing schedule is logged once');

# repaired, each works again and says so, once
$node->safe_psql('pool1', q{
	UPDATE jobq.queue SET retention_completed = '1 second' WHERE name = 'forever';
	SELECT jobq.schedule('broken', '* * * * * *', 'broken.tick');});
$node->safe_psql('pool2',
	q{UPDATE jobq.queue SET retention_completed = '1 second' WHERE name = 'forever'});
foreach my $db (qw(pool1 pool2))
{
	ok($node->poll_query_until($db, q{SELECT NOT EXISTS (SELECT FROM jobq.job WHERE kind = 'keep')}),
		"$db: repaired, queue forever is pruned");
}
ok($node->poll_query_until('pool1', q{SELECT EXISTS (SELECT FROM jobq.job WHERE kind = 'broken.tick')}),
	'pool1: repaired, schedule broken fires');
watch_passes($deadline + 60, passes('pool1') + 3);
is(log_count(qr/jobq: pruning finished jobs of queue "forever" works again/, $start),
	2, 'the prune is logged as working again once in each database');
is(log_count(qr/jobq: firing schedule "broken" works again/, $start),
	1, 'the schedule is logged as working again once');

$node->stop;
done_testing();
