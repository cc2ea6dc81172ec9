# jobq.drop_queue against a dependent another transaction holds: the drop
# cancels the queue's unfinished jobs first, so that their dependents in
# other queues settle as under a cancelled parent; a dependent held longer
# than jobq.settle_lock_wait is left to the background worker
# (jobq.settle_deferred), and the drop must then be refused, not delete the
# parent: the worker would find it gone and the dependent would stay
# blocked for good (found by a hostile review: job 2 below stayed blocked).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('drop_queue');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.enqueue('parent', '{}', queue => 'qa');
	SELECT jobq.enqueue('child', '{}', queue => 'qb',
	                    depends_on => ARRAY(SELECT job_id FROM jobq.job WHERE kind = 'parent'));
});

my $hold = $node->background_psql('postgres', on_error_stop => 1);
$hold->query_safe('BEGIN');
$hold->query_safe(q{SELECT count(jobq.update_job(job_id, priority => 5)) FROM jobq.job WHERE kind = 'child'});

my ($stdout, $stderr);
$node->psql('postgres', "SELECT jobq.drop_queue('qa')", stdout => \$stdout, stderr => \$stderr);
like($stderr, qr/queue "qa" has jobs whose dependents are still to be settled/,
	'the drop is refused while the dependent it would have to settle is held');
is( $node->safe_psql('postgres',
		"SELECT string_agg(kind || ':' || status, ',' ORDER BY job_id) FROM jobq.job"),
	'parent:pending,child:blocked', 'and it left the parent and the dependent as they were');

$hold->query_safe('COMMIT');
$hold->quit;
is($node->safe_psql('postgres', "SELECT jobq.drop_queue('qa')"), '1',
	'once the hold is over, the drop removes the parent');
is($node->safe_psql('postgres', "SELECT string_agg(kind || ':' || status, ',') FROM jobq.job"),
	'child:cancelled', 'and its dependent is cancelled, as under a cancelled parent');
is($node->safe_psql('postgres', 'SELECT count(*) FROM jobq.settle_deferred'), '0',
	'nothing is left to settle');

done_testing();
