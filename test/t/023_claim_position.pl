# A claim starts at its queue's claim position, not at the head of the
# queue's part of jobq.ready, however it writes its rows.
#
# Every claim deletes the ready rows it takes; their index entries stay in
# ready_claim_idx until vacuum removes them, and while another transaction
# holds an old snapshot nothing can remove them, not even the index scan's
# own marking of dead entries.  A claim that began at the head would walk
# all of them, so each claim would cost more than the one before.  jobq
# keeps each queue's position in shared memory and starts the index scan
# there (a row comparison on (neg_priority, run_at, job_id)).
#
# Here a session holds a REPEATABLE READ snapshot while 20 claims of 500 jobs
# run, and the test counts the index entries the 21st claim (of one job)
# reads, for the claims that write straight in the tables and for those
# that run the SQL statement (a trigger on jobq.ready forces it).  A claim
# that began at the head would read 10,000 entries.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('claim_position');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n" . "autovacuum = off\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
});

# index entries of ready_claim_idx read so far
sub entries_read
{
	return $node->safe_psql('postgres', q{
		SELECT pg_stat_force_next_flush();
		SELECT pg_sleep(0.1);
		SELECT pg_stat_clear_snapshot();
		SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'ready_claim_idx'});
}

for my $way ('direct', 'statement')
{
	my $queue = "pos_$way";
	$node->safe_psql('postgres', qq{
		SELECT jobq.configure('$queue');
		SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[10100]),
		                                       queue => '$queue');
	});
	$node->safe_psql('postgres',
		'CREATE TRIGGER force_sql AFTER DELETE ON jobq.ready FOR EACH ROW EXECUTE FUNCTION noop()')
	  if $way eq 'statement';

	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$holder->query_safe('SELECT count(*) FROM jobq.job');

	for (1 .. 20)
	{
		$node->safe_psql('postgres', "SELECT count(*) FROM jobq.claim('$queue', batch => 500)");
	}
	my $before = entries_read();
	is($node->safe_psql('postgres', "SELECT count(*) FROM jobq.claim('$queue')"),
		'1', "$way: the 21st claim gets a job");
	my $read = entries_read() - $before;
	cmp_ok($read, '<=', 10,
		"$way: the 21st claim read $read index entries, not the 10,000 dead ones before its position");

	$holder->query_safe('COMMIT');
	$holder->quit;
	$node->safe_psql('postgres', 'DROP TRIGGER force_sql ON jobq.ready')
	  if $way eq 'statement';
}

$node->stop;
done_testing();
