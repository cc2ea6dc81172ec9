# jobq.workflows costs a tenant the workflows of its own queues, whatever
# other tenants keep and whatever the statistics say; jobq.queues,
# jobq.queue_stats and jobq.jobs cost it its own queues, whatever other
# tenants' queues (0.3.6).
#
# Two databases: "alone", where a tenant has 10 workflows (a root with a
# child each), and "shared", where it has the same and another tenant has
# 20,000 roots (a fan-in of 20,000 parents, the documented pattern) and
# 5,002 queues granted to it, 2,000 of them with a workflow each, both
# analyzed as autovacuum does (so jobq.dependency has 11 distinct children,
# one of them nearly every row, and two queues, one of them nearly every
# row).  The tenant's read of the
# view costs in "shared" at most twice what it costs in "alone", plus 100
# shared buffers (EXPLAIN (ANALYZE, BUFFERS) of the read, which counts what
# workflow_status reads inside it).
#
# A hostile review measured the view of 0.3.4, which walked every parent of
# the database and tested each for parents through jobq.dependency by child:
# once analyzed, that test was a full scan of jobq.dependency per parent,
# and the tenant's read took 14 s among 20,000 roots (over 120 s among
# 200,000).  The first version of 0.3.5 walked the tenant's queues only, but
# its step, an equality on the queue ordered by parent, let the planner walk
# the primary key past the other tenant's edges.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('wfview');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\nautovacuum = off\n"
	  . "# PostgreSQL's default, restated over PostgreSQL::Test::Cluster's\njit = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE ROLE vic; CREATE ROLE atk');

foreach my $db (qw(alone shared))
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
		CREATE EXTENSION jobq;
		SELECT jobq.grant('v', 'vic', 'administer'), jobq.grant('a', 'atk', 'administer'),
		       jobq.grant('v0', 'atk', 'administer');
		SET ROLE vic;
		SELECT count(*) FROM generate_series(1, 10) g,
		       LATERAL jobq.enqueue('v.kid', jsonb_build_object('g', g), 'v',
		           depends_on => ARRAY(SELECT job_id FROM jobq.enqueue('v.root', jsonb_build_object('g', g), 'v')));
	});
}
$node->safe_psql('shared', q{
	SET ROLE atk;
	SELECT count(*) FROM jobq.enqueue('a.fanin', '{}', 'a',
	    depends_on => ARRAY(SELECT job_id FROM jobq.enqueue_many('a.root',
	                        array_fill('{}'::jsonb, ARRAY[20000]), queue => 'a')));
	RESET ROLE;
	SELECT count(*) FROM generate_series(1, 5000) g, LATERAL jobq.enqueue('z', '{}', 'z' || g);
	-- the other tenant's 5,000 queues are its own, as a real tenant's are
	-- (0.3.5 asked may_use_queue of each: 10 buffers a queue), and 2,000 of
	-- them have a workflow
	SELECT count(jobq.grant('z' || g, 'atk', 'work')) FROM generate_series(1, 5000) g;
	SELECT count(*) FROM generate_series(1, 2000) g,
	       LATERAL jobq.enqueue('z.kid', '{}', 'z' || g,
	           depends_on => ARRAY(SELECT job_id FROM jobq.enqueue('z.root', '{}', 'z' || g)));
});
# and it keeps finished jobs in its queue a: 100,000 completed, 1,000
# cancelled, 5,000 failed for good.  0.3.6 counted them in every tenant's
# jobq.queue_stats (a scan of every kept job) and jobq.kind_stats (every
# queue's last hour, and every attempt).
$node->safe_psql('shared', q{
	SET ROLE atk;
	SELECT count(*) FROM jobq.enqueue_many('a.done', array_fill('{}'::jsonb, ARRAY[106000]), queue => 'a');
	DO $$
	BEGIN
	    FOR i IN 1..100 LOOP
	        PERFORM jobq.complete_many(array_agg(job_id), array_agg(lease_token))
	           FROM jobq.claim('a', batch => 1000, kinds => ARRAY['a.done']);
	    END LOOP;
	    FOR i IN 1..5 LOOP
	        PERFORM count(jobq.fail(job_id, lease_token, 'boom', retryable => false))
	           FROM jobq.claim('a', batch => 1000, kinds => ARRAY['a.done']);
	    END LOOP;
	END
	$$;
	SELECT count(jobq.cancel(job_id)) FROM jobq.jobs WHERE kind = 'a.done' AND status = 'pending';
});
is($node->safe_psql('shared', q{
	SELECT string_agg(status || ' ' || n, ',' ORDER BY status)
	  FROM (SELECT status, count(*) AS n FROM jobq.job WHERE kind = 'a.done' GROUP BY status) s}),
	'cancelled 1000,completed 100000,failed 5000', "shared: the other tenant's finished jobs");
foreach my $db (qw(alone shared))
{
	$node->safe_psql($db, 'ANALYZE');
}
is($node->safe_psql('shared', 'SELECT count(DISTINCT parent_id) FROM jobq.dependency'), '22010',
	'shared: 22,010 parents');

# shared buffers a read of the view by $role takes in $db (the top plan
# node's, which include its children's and the functions' they call), its
# time, whether it was compiled by JIT, and the temporary blocks it wrote;
# read once before in the same session, so that what a new session reads
# of the catalogs to plan jobq's own statements is not counted
sub view_cost
{
	my ($db, $role, $view) = @_;
	$view //= 'jobq.workflows';
	my $json = $node->safe_psql($db, qq{
		SET ROLE $role;
		SELECT count(*) FROM (SELECT * FROM $view) v;
		EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM $view});
	my ($hit) = $json =~ /"Shared Hit Blocks": (\d+)/;
	my ($read) = $json =~ /"Shared Read Blocks": (\d+)/;
	my ($ms) = $json =~ /"Actual Total Time": ([\d.]+)/;
	my ($temp) = $json =~ /"Temp Written Blocks": (\d+)/;
	return ($hit + $read, $ms, $json =~ /"JIT"/ ? 1 : 0, $temp);
}

foreach my $db (qw(alone shared))
{
	is($node->safe_psql($db, q{
		SET ROLE vic;
		SELECT count(*) || ' ' || string_agg(DISTINCT kind || ' ' || total || ' ' || blocked, ',')
		  FROM jobq.workflows}),
		'10 v.root 2 1', "$db: the tenant sees its 10 workflows");
}
is($node->safe_psql('shared', q{
	SET ROLE atk; SELECT count(*) || ' ' || count(DISTINCT kind) FROM jobq.workflows}),
	'22000 2', 'shared: the other tenant sees its 22,000 roots');
is($node->safe_psql('shared', q{SELECT count(*) || ' ' || count(DISTINCT queue) FROM jobq.workflows}),
	'22010 2002', 'shared: a superuser sees every root');

view_cost($_, 'vic') foreach qw(alone shared);    # warm
my ($alone, $alone_ms, $alone_jit) = view_cost('alone', 'vic');
my ($shared, $shared_ms, $shared_jit) = view_cost('shared', 'vic');
note("the tenant's read of jobq.workflows: alone $alone buffers, $alone_ms ms;"
	  . " beside 20,000 roots and 5,000 queues $shared buffers, $shared_ms ms");
cmp_ok($shared, '<=', 2 * $alone + 100,
	"the tenant's read costs about the same beside another tenant's 20,000 roots and 5,000 queues"
	  . " ($shared buffers, $alone alone)");
is($alone_jit + $shared_jit, 0, 'the read is not compiled by JIT (its estimate stays small)');

# the queues' views: a tenant's read costs its own queue, whatever the
# other tenant's 5,002 (0.3.5 asked jobq.may_use_queue of every queue of
# the database, 10 buffers each; jobq.jobs asked it again whenever more
# than 256 queues had been seen)
foreach my $view (qw(jobq.queues jobq.queue_stats jobq.jobs jobq.kind_stats))
{
	view_cost($_, 'vic', $view) foreach qw(alone shared);    # warm
	my ($a) = view_cost('alone', 'vic', $view);
	my ($b) = view_cost('shared', 'vic', $view);
	my ($su) = view_cost('shared', $node->safe_psql('shared', 'SELECT current_user'), $view);
	note("the tenant's read of $view: alone $a buffers, beside the other tenant $b; a superuser's $su");
	# jobq.jobs reads every job of the database (no index by queue): a
	# tenant's read may cost what a superuser's does, not 10 buffers more
	# per queue of the other tenant's; every count of jobq.queue_stats and
	# jobq.kind_stats reads the tenant's own queue's jobs (0.3.7; 0.3.6
	# read the other tenant's 106,000 kept jobs)
	cmp_ok($b, '<=', $view eq 'jobq.jobs' ? $su + 2 * $a + 100 : 2 * $a + 20,
		"the tenant's read of $view costs its own queue beside another's 5,002 ($b buffers, $a alone)");
	my (undef, undef, $jit) = view_cost('shared', 'vic', $view);
	is($jit, 0, "the tenant's read of $view is not compiled by JIT");
}

# pruning: a pass costs the database's worker the jobs past retention and
# a descent per queue and status that has finished jobs, not the jobs kept:
# not the other tenant's 106,000, nor its 5,000 failed jobs once they are
# two days old (kept 30 days, past the completed jobs' day), which 0.3.6
# walked on each pass, whatever their queue
{
	my $su = $node->safe_psql('shared', 'SELECT current_user');
	view_cost($_, $su, 'jobq.prune()') foreach qw(alone shared);    # warm
	my ($a) = view_cost('alone', $su, 'jobq.prune()');
	my ($b) = view_cost('shared', $su, 'jobq.prune()');
	$node->safe_psql('shared',
		q{UPDATE jobq.job SET finished_at = now() - interval '2 days' WHERE queue = 'a' AND status = 'failed'});
	view_cost('shared', $su, 'jobq.prune()');    # warm
	my ($aged) = view_cost('shared', $su, 'jobq.prune()');
	note("a pruning pass with nothing to prune: alone $a buffers, beside the other tenant's kept jobs $b,"
		  . " its failed jobs two days old $aged");
	cmp_ok($b, '<=', 2 * $a + 500,
		"a pruning pass does not read the other tenant's 106,000 kept jobs ($b buffers, $a alone)");
	cmp_ok($aged, '<=', $b + 50,
		"nor its 5,000 failed jobs kept past the completed jobs' cutoff ($aged buffers, $b before)");
	is($node->safe_psql('shared', q{SELECT count(*) FROM jobq.job WHERE kind = 'a.done'}), '106000',
		'and prunes none of them (within retention)');
}

# one queue that holds nearly every job, and one nearly every ready job:
# the planner's estimate of a count of the tenant's queue is the average
# queue's, here half the table, and
# 0.3.7's first version compiled the tenant's jobq.queue_stats with JIT
# (850 ms of it beside 1,000,000 jobs) and, a review found, with 1,000,000
# failed attempts in the other queue planned its jobq.kind_stats as a read
# of every job (not seen here with 100,000); and it read every queue for a
# superuser's jobq.queue_stats filtered by queue (the review's too); its
# second version read every ready job for the tenant's ready count (a
# second review's find: 850,000 of them, 8,400 buffers and JIT)
{
	$node->safe_psql('postgres', 'CREATE DATABASE lopsided');
	$node->safe_psql('lopsided', q{
		CREATE EXTENSION jobq;
		SELECT jobq.grant('v', 'vic', 'administer');
		SELECT count(*) FROM jobq.enqueue_many('big', array_fill('{}'::jsonb, ARRAY[200000]), queue => 'big');
		DELETE FROM jobq.ready WHERE queue = 'big';
		VACUUM jobq.ready;
		UPDATE jobq.job SET status = 'completed', claimed_at = now(), finished_at = now() WHERE queue = 'big';
		INSERT INTO jobq.attempt (job_id, attempt, finished_at, outcome, error, queue)
		SELECT job_id, 1, now(), 'failed', 'boom', queue FROM jobq.job WHERE queue = 'big' AND job_id % 2 = 0;
		SELECT count(*) FROM jobq.enqueue_many('ready', array_fill('{}'::jsonb, ARRAY[200000]), queue => 'ready');
		SET ROLE vic;
		SELECT count(*) FROM jobq.enqueue_many('small', array_fill('{}'::jsonb, ARRAY[10]), queue => 'v');
		SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('v');
		RESET ROLE;
		VACUUM ANALYZE;
	});
	foreach my $view ('jobq.queue_stats', 'jobq.kind_stats')
	{
		view_cost('lopsided', 'vic', $view);    # warm
		my ($cost, $ms, $jit) = view_cost('lopsided', 'vic', $view);
		note("the tenant's read of $view beside queues of 200,000 finished and 200,000 ready jobs:"
			  . " $cost buffers, $ms ms, JIT $jit");
		is($jit, 0, "the tenant's read of $view beside queues of 200,000 jobs is not compiled by JIT");
		cmp_ok($cost, '<=', 200, "and reads its own queue's jobs ($cost buffers)");
	}
	is($node->safe_psql('lopsided', q{
		SET ROLE vic; SELECT completed || ' ' || pending FROM jobq.queue_stats}),
		'1 9', "the tenant's counts");
	my $su = $node->safe_psql('shared', 'SELECT current_user');
	view_cost('shared', $su, q{jobq.queue_stats WHERE queue = 'v'});    # warm
	my ($one) = view_cost('shared', $su, q{jobq.queue_stats WHERE queue = 'v'});
	cmp_ok($one, '<=', 100,
		"a superuser's jobq.queue_stats of one queue reads that queue, not the 5,003 others ($one buffers)");
}

# what is not the tenant's does not count either: 10,000 more roles in the
# cluster (0.3.6's first version read every role for each statement), and
# the tenant's own roles: one that holds 100 queues through 50 roles it is
# a member of costs what one that holds them itself does (the first
# version probed every role at each queue), and a superuser's SECURITY
# DEFINER function that reads the views for the tenant costs the tenant's
# queues (the first version walked every role's queues there)
my ($before_roles) = view_cost('shared', 'vic', 'jobq.queues');
$node->safe_psql('postgres', q{
	DO $$BEGIN
	    FOR i IN 1..10000 LOOP EXECUTE format('CREATE ROLE extra%s', i); END LOOP;
	    FOR i IN 1..50 LOOP EXECUTE format('CREATE ROLE part%s', i); END LOOP;
	END$$;
	CREATE ROLE flat;
	CREATE ROLE flat_via;
	DO $$BEGIN FOR i IN 1..50 LOOP EXECUTE format('GRANT part%s TO flat_via', i); END LOOP; END$$;
});
$node->safe_psql('shared', q{
	SELECT count(jobq.grant('p' || i || '.' || k, ('part' || i)::regrole, 'work')),
	       count(jobq.grant('p' || i || '.' || k, 'flat', 'work'))
	  FROM generate_series(1, 50) i, generate_series(1, 2) k;
	SELECT count(*) FROM generate_series(1, 50) i, generate_series(1, 2) k,
	       LATERAL jobq.enqueue('p.kid', '{}', 'p' || i || '.' || k,
	           depends_on => ARRAY(SELECT job_id FROM jobq.enqueue('p.root', '{}', 'p' || i || '.' || k)));
	CREATE FUNCTION public.wf_count() RETURNS bigint LANGUAGE sql SECURITY DEFINER
	    SET search_path = pg_catalog AS $$ SELECT count(*) FROM jobq.workflows $$;
	CREATE FUNCTION public.queue_count() RETURNS bigint LANGUAGE sql SECURITY DEFINER
	    SET search_path = pg_catalog AS $$ SELECT count(*) FROM jobq.queues $$;
	GRANT EXECUTE ON FUNCTION public.wf_count(), public.queue_count() TO PUBLIC;
	ANALYZE;
});
is($node->safe_psql('shared', q{SET ROLE flat_via; SELECT count(*) FROM jobq.workflows}), '100',
	'a member of 50 roles sees their 100 workflows');
# roles are the cluster's, so "alone" has them too: the read before they
# were made is the measure
my ($now_a) = view_cost('shared', 'vic', 'jobq.queues');
cmp_ok($now_a, '<=', 2 * $before_roles + 20,
	"10,000 more roles in the cluster leave the tenant's read of jobq.queues at its cost"
	  . " ($now_a buffers, $before_roles before)");
foreach my $view (qw(jobq.workflows jobq.queues))
{
	my ($flat) = view_cost('shared', 'flat', $view);
	my ($via) = view_cost('shared', 'flat_via', $view);
	note("$view of 100 queues: held by the role $flat buffers, through 50 roles $via");
	cmp_ok($via, '<=', 2 * $flat + 200,
		"$view through 50 roles costs what it costs held directly ($via buffers, $flat)");
}
foreach my $f (qw(wf_count queue_count))
{
	my ($direct) = view_cost('shared', 'vic', $f eq 'wf_count' ? 'jobq.workflows' : 'jobq.queues');
	my ($definer) = view_cost('shared', 'vic', "public.$f()");
	note("public.$f(), a superuser's SECURITY DEFINER function, for the tenant: $definer buffers; the view read directly $direct");
	cmp_ok($definer, '<=', 2 * $direct + 100,
		"a superuser's SECURITY DEFINER function reading the view costs the tenant's queues ($definer buffers, $direct directly)");
}
is($node->safe_psql('shared', q{SET ROLE vic; SELECT public.wf_count() || ' ' || public.queue_count()}),
	'10 1', "and shows the tenant's rows only");

# the same function called by the tenant's job handler, where the current
# user is the executor's superuser: it asks about the handler's role
# (jobq.handler_role), as jobq.may_use_queue does (the second version of
# 0.3.6 walked every queue of the database there: 40,000 buffers for 3)
$node->safe_psql('shared', q{
	CREATE FUNCTION public.queue_cost() RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
	    SET search_path = pg_catalog AS $$
	DECLARE p jsonb;
	BEGIN
	    PERFORM count(*) FROM jobq.queues;
	    EXECUTE 'EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM jobq.queues' INTO p;
	    RETURN (p->0->'Plan'->>'Shared Hit Blocks')::bigint + (p->0->'Plan'->>'Shared Read Blocks')::bigint;
	END $$;
	GRANT EXECUTE ON FUNCTION public.queue_cost() TO PUBLIC;
	CREATE SCHEMA vicapp AUTHORIZATION vic;
	SET ROLE vic;
	CREATE FUNCTION vicapp.look(payload jsonb) RETURNS jsonb LANGUAGE sql AS $$
	    SELECT jsonb_build_object('queues', public.queue_count(), 'workflows', public.wf_count(),
	                              'cost', public.queue_cost()) $$;
	SELECT jobq.register_handler('v.look', 'vicapp.look(jsonb)', 'v');
	SELECT jobq.enqueue('v.look', '{}', 'v');
});
ok($node->poll_query_until('shared', q{
	SELECT status = 'completed' FROM jobq.jobs WHERE kind = 'v.look'}), 'the handler ran');
my ($look) = $node->safe_psql('shared', q{
	SELECT (result->>'queues') || ' ' || (result->>'workflows') || ' ' || (result->>'cost')
	  FROM jobq.jobs WHERE kind = 'v.look'});
my ($hq, $hw, $hcost) = split / /, $look;
my ($direct_q) = view_cost('shared', 'vic', 'jobq.queues');
note("inside the tenant's handler, a superuser's SECURITY DEFINER function: $hq queue, $hw workflows, "
	  . "jobq.queues read with $hcost buffers (the tenant's own read: $direct_q)");
is("$hq $hw", '1 10', "inside the tenant's handler, it shows the tenant's rows only");
cmp_ok($hcost, '<=', 2 * $direct_q + 100,
	"and reads the tenant's queues, not every queue ($hcost buffers, $direct_q directly)");

# a role's own many queues are walked one at a time: the list of them is
# not carried in every row of the walk (0.3.5: temporary files that grew
# with the square of the number of queues)
foreach my $role ('atk', $node->safe_psql('shared', 'SELECT current_user'))
{
	my ($cost, $ms, $jit, $temp) = view_cost('shared', $role);
	note("$role\'s read of jobq.workflows, 2,002 queues with workflows: $cost buffers, $ms ms, "
		  . ($temp // 0) . ' temporary blocks');
	is($temp // 0, 0, "$role\'s read of its many queues' workflows writes no temporary file");
}

# another tenant's open transaction with 20,000 parents in the queue that
# sorts right after the tenant's: the tenant's walk stops at its queue's
# last edge instead of passing over those uncommitted entries (a review
# measured 422 buffers for them with a walk bounded below only)
my $open = $node->background_psql('shared');
$open->query_safe(q{
	SET ROLE atk;
	BEGIN;
	SELECT count(*) FROM jobq.enqueue('o.fanin', '{}', 'v0',
	    depends_on => ARRAY(SELECT job_id FROM jobq.enqueue_many('o.root',
	                        array_fill('{}'::jsonb, ARRAY[20000]), queue => 'v0')))});
my ($held) = view_cost('shared', 'vic');
note("the tenant's read beside another's open transaction of 20,000 edges: $held buffers");
cmp_ok($held, '<=', 2 * $alone + 100,
	"the tenant's read costs about the same beside another tenant's uncommitted edges ($held buffers, $alone alone)");
$open->query_safe('ROLLBACK');
$open->quit;

$node->stop;
done_testing();
