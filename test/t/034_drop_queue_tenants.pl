# jobq.drop_queue holds up no other tenant's enqueues (0.3.3).  A drop
# keeps the enqueues into its queue out until it commits, and waits for
# those in progress.  It did so with one of 64 locks that queue names
# shared, so a role that administers one queue and kept its drop open (or
# dropped its queue again and again while it kept an enqueue of its own
# open, each drop waiting 5 s in the lock's queue) held up the enqueues into
# about one queue in 64 of every other role, for as long as it liked.  Each
# queue now has a lock of its own; a transaction past 16 queues holds one
# lock of many queues instead, which a drop takes only for a moment,
# without queueing for it.
#
# 1. A tenant's drop of its own queue, left open: another role's enqueues
#    into 512 queues, each under lock_timeout = 100 ms, none held up (it was
#    8 of 512 in a run before the change).
# 2. A tenant's drop waiting for its own open enqueue: the same.
# 3. A transaction that enqueued into 100 queues, left open: the drop of its
#    60th queue waits for it (refused after 5 s while it stays open), and
#    succeeds once it committed, leaving none of the queue's jobs; an
#    enqueue into 100 queues that include one whose drop is open waits for
#    the drop and fails with 40001; one into the others is not held up.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('drop_tenants');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE ROLE tenant LOGIN; CREATE ROLE victim LOGIN;
	CREATE EXTENSION jobq;
	SELECT jobq.grant('qa', 'tenant', 'administer');
	SELECT jobq.grant('*', 'victim', 'enqueue');
});

# the victim's enqueues into 512 queues of its own, each given 100 ms to get
# its locks: how many were held up
sub victim_stalled
{
	my ($ret, $out, $err) = $node->psql('postgres', q{
		SET ROLE victim;
		SET lock_timeout = '100ms';
		DO $$
		DECLARE stalled int := 0;
		BEGIN
			FOR i IN 1 .. 512 LOOP
				BEGIN
					PERFORM jobq.enqueue('k', queue => 'v' || i);
				EXCEPTION WHEN lock_not_available THEN
					stalled := stalled + 1;
				END;
			END LOOP;
			RAISE NOTICE 'stalled %', stalled;
		END $$;
	});
	return $err =~ /stalled (\d+)/ ? $1 : "none reported ($err)";
}

# --- 1. a drop left open --------------------------------------------------
$node->safe_psql('postgres', q{SET ROLE tenant; SELECT jobq.enqueue('k', queue => 'qa')});
my $drop = $node->background_psql('postgres', on_error_stop => 1, extra_params => [ '-U', 'tenant' ]);
$drop->query_safe('BEGIN');
$drop->query_safe(q{SELECT jobq.drop_queue('qa')});
is(victim_stalled(), 0, "a tenant's open drop of its queue holds up none of another role's enqueues");
$drop->query_safe('COMMIT');

# --- 2. a drop waiting for the tenant's own enqueue -----------------------
# (the drop took the queue's grants with it)
$node->safe_psql('postgres', q{SELECT jobq.grant('qa', 'tenant', 'administer')});
$node->safe_psql('postgres', q{SET ROLE tenant; SELECT jobq.enqueue('k', queue => 'qa')});
my $enq = $node->background_psql('postgres', on_error_stop => 1, extra_params => [ '-U', 'tenant' ]);
$enq->query_safe('BEGIN');
$enq->query_safe(q{SELECT jobq.enqueue('k', queue => 'qa')});
$drop->query_until(qr/started/, q{\echo started
SELECT jobq.drop_queue('qa');
});
# the drop waits up to 5 s for the open enqueue
is(victim_stalled(), 0, "a tenant's drop waiting for its own open enqueue holds up none of another role's enqueues");
$enq->query_safe('ROLLBACK');
$drop->quit;
$enq->quit;

# --- 3. a transaction of many queues ----------------------------------------
my $many = q{SELECT count(*) FROM generate_series(1, 100) i, LATERAL jobq.enqueue('k', queue => 'm' || i)};
$node->safe_psql('postgres', $many);
my $open = $node->background_psql('postgres', on_error_stop => 1);
$open->query_safe('BEGIN');
$open->query_safe($many);
my ($ret, $stdout, $stderr) = $node->psql('postgres', q{SELECT jobq.drop_queue('m60')});
like($stderr, qr/queue "m60" has enqueues in progress/,
	'the drop of the 60th queue of an open transaction of 100 queues waits for it, and is refused');
$open->query_safe('COMMIT');
$open->quit;
is($node->safe_psql('postgres', q{SELECT jobq.drop_queue('m60') > 0}), 't', 'once it committed, the drop succeeds');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE queue = 'm60'}), '0',
	'and none of the queue\'s jobs is left');

$drop = $node->background_psql('postgres', on_error_stop => 1);
$drop->query_until(qr/dropped/, q{BEGIN;
SELECT jobq.drop_queue('m61');
\echo dropped
SELECT pg_sleep(3);
COMMIT;
});
is($node->safe_psql('postgres', qq{SET lock_timeout = '2s'; $many WHERE i <> 61}), '99',
	'an enqueue into 99 queues besides one whose drop is open is not held up');
($ret, $stdout, $stderr) = $node->psql('postgres', $many);
like($stderr, qr/queue "m61" was dropped while this call waited for it/,
	'an enqueue into 100 queues that include one whose drop was open waits for it, and fails (40001)');
$drop->quit;
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE queue = 'm61'}), '0',
	'and leaves no job in the dropped queue');

# --- 4. an enqueue through a cursor whose later fetch fails -----------------
# The locks went with the cursor's portal: a later fetch that failed in a
# savepoint took them away on ROLLBACK TO, while the job enqueued by the
# first fetch stayed, and a drop then passed at once; the job outlived it,
# and went with its payload to whoever got the queue's name next (found by
# a hostile review).
$node->safe_psql('postgres', q{SELECT jobq.enqueue('k', queue => 'cx')});
my $cur = $node->background_psql('postgres', on_error_stop => 0);
$cur->query(q{BEGIN});
$cur->query(q{DECLARE c CURSOR FOR SELECT jobq.enqueue('k', '{"secret": 1}',
	queue => 'cx' || CASE WHEN i < 3 THEN '' ELSE (1 / (3 - i))::text END) FROM generate_series(1, 5) i});
$cur->query(q{FETCH 1 FROM c});
$cur->query(q{SAVEPOINT s});
$cur->query(q{FETCH 5 FROM c});
$cur->query(q{ROLLBACK TO s});
($ret, $stdout, $stderr) = $node->psql('postgres', q{SET lock_timeout = '500ms'; SELECT jobq.drop_queue('cx')});
like($stderr, qr/queue "cx" has enqueues in progress/,
	'a drop waits for a job a cursor enqueued, after a later fetch of it failed in a savepoint');
$cur->query(q{COMMIT});
$cur->quit;
is($node->safe_psql('postgres', q{SELECT jobq.drop_queue('cx')}), '2', 'once it committed, the drop removes both jobs');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE queue = 'cx'}), '0', 'and leaves none');

# --- 5. another role's open transaction of many queues ----------------------
# It holds the locks of many queues of its 17th to 20th queues (4 of 64):
# the drops of other queues do not wait for it, but for the few that share
# one of those (before, one lock of many queues held up every drop).
$node->safe_psql('postgres', q{
	SELECT jobq.grant('d' || i, 'tenant', 'administer') FROM generate_series(1, 8) i;
	SET ROLE tenant;
	SELECT count(*) FROM generate_series(1, 8) i, LATERAL jobq.enqueue('k', queue => 'd' || i);
});
$open = $node->background_psql('postgres', on_error_stop => 1, extra_params => [ '-U', 'victim' ]);
$open->query_safe('BEGIN');
$open->query_safe(q{SELECT count(*) FROM generate_series(1, 20) i, LATERAL jobq.enqueue('k', queue => 'w' || i)});
my $dropped = 0;
foreach my $i (1 .. 8)
{
	my ($r) = $node->psql('postgres', qq{SET ROLE tenant; SET lock_timeout = '200ms'; SELECT jobq.drop_queue('d$i')});
	$dropped++ if $r == 0;
}
cmp_ok($dropped, '>=', 5, "another role's open transaction of 20 queues holds up few of a tenant's 8 drops");
note "of the tenant's 8 drops, $dropped went through while another role's transaction of 20 queues stayed open";
$open->query_safe('COMMIT');
$open->quit;

$node->stop;
done_testing();
