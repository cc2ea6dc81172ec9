# No role reaches another tenant's schedule or handler through a race.
#
# unschedule, pause_schedule and run_schedule answer false (42704) of a name
# that does not exist, to any role.  They check the caller's capability on
# the schedule's queue, then act: a schedule another tenant made, or moved,
# between the two must be left alone (a hostile review paused 12 of 200 and
# fired 16 of 150 of another tenant's new schedules this way).  Here an
# attacker who administers only its own queue calls them in a loop, in six
# sessions, while a victim makes the same schedule in its queue again and
# again: none may be touched.  The same for jobq.unregister_handler of a
# handler moved from a queue the caller administers to one it does not.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('races');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE ROLE attacker LOGIN;
	CREATE ROLE victim LOGIN;
	SELECT jobq.grant('qa', 'attacker', 'administer');
	SELECT jobq.grant('qv', 'victim', 'administer');});

# the attacker: six sessions calling the three functions on the victim's
# schedule name, reconnecting for every call (each plans its statements)
my $script = $node->basedir . '/attack.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
DO $$ BEGIN PERFORM jobq.pause_schedule('vsr'); EXCEPTION WHEN insufficient_privilege THEN NULL; END $$;
DO $$ BEGIN PERFORM jobq.unschedule('vsr'); EXCEPTION WHEN insufficient_privilege THEN NULL; END $$;
DO $$ BEGIN PERFORM jobq.run_schedule('vsr'); EXCEPTION WHEN insufficient_privilege OR undefined_object THEN NULL; END $$;
});
my ($out, $err) = ('', '');
my $attack = IPC::Run::start(
	[ 'pgbench', '-n', '-C', '-c', '6', '-j', '6', '-T', '120', '-f', $script,
	  '-U', 'attacker', '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);

# the victim makes its schedule, looks at it, removes it: 150 times
my ($touched, $rounds) = (0, 150);
for my $i (1 .. $rounds)
{
	my $seen = $node->safe_psql('postgres', q{
		SET ROLE victim;
		SELECT jobq.schedule('vsr', '0 0 1 1 *', 'k', '{}', 'qv');
		SELECT pg_sleep(0.01);
		SELECT coalesce((SELECT CASE WHEN paused THEN 'paused' ELSE 'ok' END
		                   FROM jobq.schedules WHERE name = 'vsr'), 'gone')
		       || ' ' || (SELECT count(*) FROM jobq.jobs WHERE queue = 'qv');
		SELECT jobq.unschedule('vsr');});
	my @lines = split /\n/, $seen;
	if ($lines[-2] ne 'ok 0')
	{
		$touched++;
		note "round $i: $lines[-2]";
		$node->safe_psql('postgres', q{DELETE FROM jobq.job WHERE queue = 'qv'});
	}
}
$attack->kill_kill;
is($touched, 0, "none of the victim's $rounds new schedules was paused, removed or fired by the attacker");
is($node->safe_psql('postgres', q{
		SET ROLE attacker;
		SELECT jobq.unschedule('vsr'), jobq.pause_schedule('vsr'), jobq.resume_schedule('vsr')}),
	'f|f|f', 'of a schedule that does not exist, the attacker hears false');

# a handler moved (in a transaction held open) from the attacker's queue to
# the victim's: the attacker's unregister, which saw it in its own queue,
# waits for the move and then leaves it
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.h(p jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT p $$;
	GRANT EXECUTE ON FUNCTION public.h(jsonb) TO victim;
	SELECT jobq.grant('qa', 'victim', 'administer');
	SET ROLE victim;
	SELECT jobq.register_handler('v.kind', 'public.h(jsonb)'::regprocedure, 'qa');});
my ($min, $mout, $merr) = ('', '', '');
my $move = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
	'<', \$min, '>', \$mout, '2>', \$merr);
$min .= "SET ROLE victim;\nBEGIN;\nSELECT jobq.register_handler('v.kind', 'public.h(jsonb)'::regprocedure, 'qv');\n\\echo moved\n";
$move->pump until $mout =~ /moved/;
my ($uout, $uerr) = ('', '');
my $unreg = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'),
	  '-c', "SET ROLE attacker; SELECT jobq.unregister_handler('v.kind')" ],
	'>', \$uout, '2>', \$uerr);
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE '%unregister_handler%' AND wait_event_type = 'Lock'}),
	'the attacker\'s unregister waits for the victim\'s move');
$min .= "COMMIT;\n\\q\n";
$move->finish;
$unreg->finish;
is($uout, "f\n", 'the unregister, checked on the attacker\'s queue, did not remove the moved handler');
is($node->safe_psql('postgres', q{SELECT queue FROM jobq.handler WHERE kind = 'v.kind'}),
	'qv', 'the victim\'s handler is in its queue');

$node->stop;
done_testing();
