# Autovacuum held while the xmin horizon stands still (src/vacuum_hold.c).
#
# With a snapshot held open and jobs flowing, the worker switches autovacuum
# off for jobq.job (and for its TOAST table, where pruned payloads die) once
# a pass of it ended after the horizon stopped, and autovacuum then stops
# re-reading the table (its pass count stays put while jobs keep flowing,
# at autovacuum_naptime = 1s).  A table whose autovacuum_enabled the
# administrator set is left alone.  The hold survives a restart of the
# worker while the snapshot lasts, ends when the snapshot ends (and
# autovacuum cleans the table again), ends at once when jobq.autovacuum_hold
# is switched off, and ends after a server restart.  pg_dump carries no hold.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('avhold');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'jobq'
jobq.naptime = 100ms
jobq.prune_interval = 1s
autovacuum_naptime = 1s
log_autovacuum_min_duration = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');
# big payloads (stored in jobq.job's TOAST table) pruned as soon as they finish
$node->safe_psql('postgres', q{SELECT jobq.configure('big', retention_completed => '0 s')});

# jobs flow: 300 enqueued, then claimed and completed, in two transactions
sub churn
{
	$node->safe_psql('postgres',
		q{SELECT count(*) FROM jobq.enqueue_many('churn', array_fill('{}'::jsonb, ARRAY[300]))});
	$node->safe_psql('postgres', q{
		SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token))
		  FROM jobq.claim(kinds => ARRAY['churn'], batch => 300)});
	$node->safe_psql('postgres', q{
		SELECT count(*) FROM jobq.enqueue_many('big',
		    (SELECT array_agg(jsonb_build_object('p', (SELECT string_agg(md5(random()::text || i || j), '')
		                                               FROM generate_series(1, 100) j)))
		       FROM generate_series(1, 20) i), queue => 'big')});
	$node->safe_psql('postgres', q{
		SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token))
		  FROM jobq.claim('big', batch => 20)});
}

# churn until $cond (a query) returns t; false after $secs seconds
sub churn_until
{
	my ($cond, $secs) = @_;
	my $deadline = time() + $secs;
	while (time() < $deadline)
	{
		churn();
		return 1 if $node->safe_psql('postgres', "SELECT ($cond)") eq 't';
		select(undef, undef, undef, 0.2);
	}
	return 0;
}

sub reloptions
{
	my ($rel) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = '$rel'::regclass");
}

sub av_count
{
	my ($rel) = @_;
	return $node->safe_psql('postgres',
		"SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = '$rel'::regclass");
}

my $held_job = q{EXISTS (SELECT FROM jobq.autovacuum_hold WHERE relation = 'jobq.job'::regclass)};
my $none_held = q{NOT EXISTS (SELECT FROM jobq.autovacuum_hold)};

# no snapshot held: jobs flow, autovacuum runs, nothing is held
ok(churn_until(q{(SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'jobq.job'::regclass) >= 2}, 120),
	'autovacuum runs on jobq.job while jobs flow');
churn() for 1 .. 3;
is($node->safe_psql('postgres', "SELECT count(*) FROM jobq.autovacuum_hold"),
	'0', 'nothing held while the horizon moves');
is(reloptions('jobq.job'), 'fillfactor=80', 'jobq.job keeps its own options');

# the administrator's setting on jobq.ready is theirs
$node->safe_psql('postgres', 'ALTER TABLE jobq.ready SET (autovacuum_enabled = true)');

# a snapshot held open
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
my $xmin = $holder->query_safe(
	'SELECT backend_xmin FROM pg_stat_activity WHERE pid = pg_backend_pid()');
chomp $xmin;

ok(churn_until($held_job, 120), 'jobq.job held while a snapshot holds the horizon');
ok(churn_until(q{EXISTS (SELECT FROM jobq.autovacuum_hold h JOIN pg_class c ON c.reltoastrelid = h.relation
                          WHERE c.oid = 'jobq.job'::regclass)}, 120),
	"and its TOAST table, where pruned payloads die");
is($node->safe_psql('postgres',
		"SELECT array_to_string(t.reloptions, ',') FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid"
		  . " WHERE c.oid = 'jobq.job'::regclass"),
	'autovacuum_enabled=false', 'toast.autovacuum_enabled = false on jobq.job');
is(reloptions('jobq.job'), 'fillfactor=80,autovacuum_enabled=false',
	'autovacuum_enabled = false on jobq.job');
is($node->safe_psql('postgres',
		"SELECT horizon FROM jobq.autovacuum_hold WHERE relation = 'jobq.job'::regclass"),
	$xmin, "the hold names the snapshot's xmin as the horizon");

# while held, autovacuum leaves jobq.job alone however many jobs flow
my $before = av_count('jobq.job');
my $t0 = time();
churn() while time() - $t0 < 6;
is(av_count('jobq.job'), $before, 'no autovacuum pass of jobq.job for 6 s of flowing jobs while held');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM jobq.autovacuum_hold WHERE relation = 'jobq.ready'::regclass"),
	'0', "jobq.ready, whose autovacuum_enabled the administrator set, is not held");
like(reloptions('jobq.ready'), qr/(^|,)autovacuum_enabled=true$/, "the administrator's setting stays");
like(
	$node->safe_psql('postgres', q{SELECT detail FROM jobq.health() WHERE check_name = 'xmin_horizon'}),
	qr/autovacuum of .*jobq\.job \(TOAST\).* is paused/, 'jobq.health() says autovacuum is paused, naming the TOAST table');

# a new worker finds the hold still right while the snapshot lasts
my $old_pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobq worker' AND datname = 'postgres'");
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old_pid)");
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobq worker'"
		  . " AND datname = 'postgres' AND pid <> $old_pid"),
	'a new worker serves the database');
churn() for 1 .. 5;
is($node->safe_psql('postgres', "SELECT ($held_job)"), 't', 'the hold stays while the snapshot lasts');

# the snapshot ends: the hold ends, and autovacuum cleans jobq.job again
$holder->query_safe('COMMIT');
ok(churn_until($none_held, 60), 'the hold ends when the snapshot ends');
is(reloptions('jobq.job'), 'fillfactor=80', 'autovacuum_enabled reset on jobq.job');
is($node->safe_psql('postgres',
		"SELECT t.reloptions IS NULL FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid"
		  . " WHERE c.oid = 'jobq.job'::regclass"),
	't', 'and on its TOAST table');
$before = av_count('jobq.job');
ok(churn_until("(SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'jobq.job'::regclass) > $before", 60),
	'autovacuum runs on jobq.job again');

# jobq.autovacuum_hold = off ends a hold at once, the snapshot still held
$node->safe_psql('postgres', 'ALTER TABLE jobq.ready RESET (autovacuum_enabled)');
$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$holder->query_safe('SELECT 1');
ok(churn_until($held_job, 120), 'held again under a new snapshot');
$node->safe_psql('postgres', 'ALTER SYSTEM SET jobq.autovacuum_hold = off');
$node->reload;
ok(churn_until($none_held, 60), 'jobq.autovacuum_hold = off ends the hold while the snapshot lasts');
is(reloptions('jobq.job'),   'fillfactor=80', 'jobq.job reset');
unlike(reloptions('jobq.ready'), qr/autovacuum_enabled/, 'jobq.ready reset');
churn() for 1 .. 10;
is($node->safe_psql('postgres', "SELECT count(*) FROM jobq.autovacuum_hold"), '0', 'and nothing is held again');

# a hold left by a server that went down ends after the restart
$node->safe_psql('postgres', 'ALTER SYSTEM RESET jobq.autovacuum_hold');
$node->reload;
ok(churn_until($held_job, 120), 'held again');
my $dumpfile = $node->basedir . '/held.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $dumpfile ],
	'pg_dump works while a table is held');
unlike(slurp_file($dumpfile), qr/autovacuum_enabled/, 'pg_dump carries no hold');
$holder->quit;
$node->stop('immediate');
$node->start;
ok( $node->poll_query_until('postgres', "SELECT $none_held AND reloptions = '{fillfactor=80}' FROM pg_class WHERE oid = 'jobq.job'::regclass"),
	'after a restart the hold is gone');

$node->stop;
done_testing();
