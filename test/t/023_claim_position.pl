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
# reads.  A claim that began at the head would read 10,000 entries.
#
# Then jobs of a higher priority arrive: they sort before the position, with
# the 10,000 dead entries between them and it.  They make the queue's
# island (src/shmem/shm_queue.c): claims take them first and go on from the position
# without walking the dead entries.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('claim_position');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n" . "autovacuum = off\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
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

for my $way ('direct')
{
	my $queue = "pos_$way";
	$node->safe_psql('postgres', qq{
		SELECT jobq.configure('$queue');
		SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[10100]),
		                                       queue => '$queue');
	});

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

	# A job of a higher priority sorts before the position, with the 10,000
	# dead entries between it and the position: it becomes the queue's
	# island, and a claim takes it and goes on from the position.
	$node->safe_psql('postgres',
		"SELECT jobq.enqueue('k', '{\"crit\": 1}', queue => '$queue', priority => 10)");
	$before = entries_read();
	is( $node->safe_psql('postgres',
			"SELECT string_agg(coalesce(payload->>'crit', '-'), ',' ORDER BY ord)"
			  . " FROM jobq.claim('$queue', batch => 3) WITH ORDINALITY c(j, t, k, payload, p, r, m, cp, ca, l, ord)"),
		'1,-,-',
		"$way: a claim of 3 takes the new higher-priority job first, then two of the backlog");
	$read = entries_read() - $before;
	cmp_ok($read, '<=', 10, "$way: that claim read $read index entries (the island, then the position)");

	# three more, claimed two at a time: the island shrinks, then is done
	$node->safe_psql('postgres',
		"SELECT jobq.enqueue_many('k', ARRAY['{\"crit\": 2}', '{\"crit\": 3}', '{\"crit\": 4}']::jsonb[],"
		  . " queue => '$queue', priority => 10)");
	$before = entries_read();
	my $got = '';
	for (1 .. 3)
	{
		$got .= $node->safe_psql('postgres',
			"SELECT string_agg(coalesce(payload->>'crit', '-'), ',' ORDER BY ord)"
			  . " FROM jobq.claim('$queue', batch => 2) WITH ORDINALITY c(j, t, k, payload, p, r, m, cp, ca, l, ord)")
		  . ';';
	}
	is($got, '2,3;4,-;-,-;', "$way: the island's jobs come first, in order, two at a time");
	$read = entries_read() - $before;
	cmp_ok($read, '<=', 20, "$way: those three claims read $read index entries");

	# a transaction whose rows reach past the position lowers it instead
	$node->safe_psql('postgres', qq{
		BEGIN;
		SELECT jobq.enqueue('k', '{"crit": 5}', queue => '$queue', priority => 10);
		SELECT jobq.enqueue('k', '{"last": 1}', queue => '$queue');
		COMMIT;
	});
	is( $node->safe_psql('postgres',
			"SELECT string_agg(coalesce(payload->>'crit', '-'), ',' ORDER BY ord)"
			  . " FROM jobq.claim('$queue', batch => 2) WITH ORDINALITY c(j, t, k, payload, p, r, m, cp, ca, l, ord)"),
		'5,-', "$way: a job enqueued with one behind the position is claimed first");

	$holder->query_safe('COMMIT');
	$holder->quit;

	# nothing was lost: every job of the queue was claimed exactly once
	$node->safe_psql('postgres', "SELECT count(*) FROM jobq.claim('$queue', batch => 1000)")
	  for (1 .. 11);
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE status = 'running') || '/' || count(*)"
			  . " FROM jobq.job WHERE queue = '$queue'"),
		'10106/10106', "$way: all 10,106 jobs of the queue are running, none left pending");
}

# A claim that names kinds (as the workers of jobq's libraries always do)
# moves the position too when it passed over no row of another kind: it took
# what a claim of any kind would have.  One that passed over such a row
# moves it up to that row, not past it, so that row is still claimed.
$node->safe_psql('postgres', q{
	SELECT jobq.configure('kinds');
	SELECT jobq.enqueue('other', '{"other": 1}', queue => 'kinds', priority => 5);
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[10100]), queue => 'kinds');
});
{
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$holder->query_safe('SELECT count(*) FROM jobq.job');
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM jobq.claim('kinds', batch => 500, kinds => ARRAY['k'])"),
		'500', 'kinds: a claim of kind k passes over the job of kind other');
	is( $node->safe_psql('postgres',
			"SELECT string_agg(kind, ',') FROM jobq.claim('kinds', batch => 1)"),
		'other', 'kinds: a claim of any kind after it still gets the job it passed over');
	for (1 .. 19)
	{
		$node->safe_psql('postgres',
			"SELECT count(*) FROM jobq.claim('kinds', batch => 500, kinds => ARRAY['k', 'x'])");
	}
	my $before = entries_read();
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM jobq.claim('kinds', kinds => ARRAY['k'])"),
		'1', 'kinds: the 21st claim of kind k gets a job');
	my $read = entries_read() - $before;
	cmp_ok($read, '<=', 10,
		"kinds: it read $read index entries, not the 10,000 dead ones its kinds' claims left");
	$holder->query_safe('COMMIT');
	$holder->quit;
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE status = 'pending') || '/' || count(*)"
			  . " FROM jobq.job WHERE queue = 'kinds'"),
		'99/10101', 'kinds: 10,002 of the 10,101 jobs claimed, each once');
}

# Three kinds, each served by its own claims, under a held snapshot: the
# claims of all three keep the position moving, so none walks the rows the
# others claimed before.  (A regression check: it held before claims moved
# the position up to the first row they passed over too, since the claims
# of the kind that trails pass over nothing.)
$node->safe_psql('postgres', q{
	SELECT jobq.configure('three');
	DO $$ BEGIN FOR i IN 0..6299 LOOP
		PERFORM jobq.enqueue((ARRAY['a', 'b', 'c'])[i % 3 + 1], '{}', queue => 'three');
	END LOOP; END $$;
});
{
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$holder->query_safe('SELECT count(*) FROM jobq.job');
	my $got = '';
	for my $round (1 .. 20)
	{
		for my $kind ('a', 'b', 'c')
		{
			$got .= $node->safe_psql('postgres',
				"SELECT count(*) FROM jobq.claim('three', batch => 100, kinds => ARRAY['$kind'])")
			  . ',';
		}
	}
	is($got, '100,' x 60, 'three kinds: 60 claims of 100, each of one kind, each get 100');
	my $before = entries_read();
	is( $node->safe_psql('postgres',
			"SELECT string_agg(kind, ',') FROM jobq.claim('three', kinds => ARRAY['a'])"),
		'a', 'three kinds: the 61st claim gets a job of its kind');
	my $read = entries_read() - $before;
	cmp_ok($read, '<=', 10,
		"three kinds: it read $read index entries, not the 6,000 the claims before it left");
	$holder->query_safe('COMMIT');
	$holder->quit;
	$node->safe_psql('postgres', "SELECT count(*) FROM jobq.claim('three', batch => 1000)");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE status = 'running') || '/' || count(*)"
			  . " FROM jobq.job WHERE queue = 'three'"),
		'6300/6300', 'three kinds: all 6,300 jobs claimed, none left pending');
}

# A kind nobody claims: its waiting jobs hold the queue's position at the
# first of them, and a claim of another kind passed over all of them, every
# time (20-30 ms behind 200,000).  Claims that name a set of kinds keep a
# position of their own (src/shmem/shm_queue.c, kinds positions): the first
# one reads its way past the idle kind's jobs, the next ones start where it
# stopped.  Rows of its kinds that become claimable before that position,
# by an enqueue, a rollback or a job sorting between the two positions,
# move it back; the queue's own position stays at the idle kind's first job.
$node->safe_psql('postgres', q{
	SELECT jobq.configure('idlekind');
	SELECT count(*) FROM jobq.enqueue_many('idle', array_fill('{}'::jsonb, ARRAY[12000]), queue => 'idlekind');
	SELECT count(*) FROM jobq.enqueue_many('busy', array_fill('{}'::jsonb, ARRAY[300]), queue => 'idlekind');
});
{
	my $claim = sub {
		my ($batch, $kinds) = @_;
		return $node->safe_psql('postgres',
			"SELECT count(*) FROM jobq.claim('idlekind', batch => $batch, kinds => $kinds)");
	};
	my $before = entries_read();
	is($claim->(10, "ARRAY['busy']"), '10', 'idle kind: a claim of kind busy gets 10');
	my $read = entries_read() - $before;
	cmp_ok($read, '>=', 12000, "idle kind: the first one read $read index entries, past the 12,000");
	$before = entries_read();
	is(join(',', map { $claim->(10, "ARRAY['busy']") } 1 .. 5), '10,10,10,10,10',
		'idle kind: five more claims of kind busy get 10 each');
	$read = entries_read() - $before;
	cmp_ok($read, '<=', 80, "idle kind: together they read $read index entries, not 60,000");

	# a job of kind busy that sorts between the idle jobs and the position
	# of busy's claims (due before the busy jobs, after the idle ones)
	$node->safe_psql('postgres', q{
		SELECT jobq.enqueue('busy', '{"between": 1}', queue => 'idlekind',
		                    run_at => (SELECT max(run_at) FROM jobq.ready WHERE queue = 'idlekind'
		                                 AND kind = 'idle') + interval '1 microsecond')});
	is( $node->safe_psql('postgres',
			"SELECT string_agg(coalesce(payload->>'between', '-'), ',' ORDER BY ord) FROM"
			  . " jobq.claim('idlekind', batch => 2, kinds => ARRAY['busy'])"
			  . " WITH ORDINALITY c(j, t, k, payload, p, r, m, cp, ca, l, ord)"),
		'1,-', 'idle kind: a busy job enqueued before their position is claimed first');

	# jobs a rolled-back claim took are claimable again, first
	my $taken = $node->safe_psql('postgres', q{
		BEGIN;
		SELECT string_agg(job_id::text, ',' ORDER BY job_id)
		  FROM jobq.claim('idlekind', batch => 3, kinds => ARRAY['busy']);
		ROLLBACK;
	});
	is( $node->safe_psql('postgres',
			"SELECT string_agg(job_id::text, ',' ORDER BY job_id)"
			  . " FROM jobq.claim('idlekind', batch => 3, kinds => ARRAY['busy'])"),
		$taken, 'idle kind: the jobs of a claim that rolled back are claimed next');

	# another set of kinds starts at the queue's position and keeps its own
	is($claim->(5, "ARRAY['busy', 'other']"), '5', 'idle kind: a claim of busy or other gets 5');
	$before = entries_read();
	is($claim->(5, "ARRAY['busy', 'other']"), '5', 'idle kind: and the next one 5');
	$read = entries_read() - $before;
	cmp_ok($read, '<=', 20, "idle kind: which read $read index entries");

	# the queue's position stayed at the idle jobs: a claim of any kind gets them
	is( $node->safe_psql('postgres',
			"SELECT string_agg(DISTINCT kind, ',') FROM jobq.claim('idlekind', batch => 100)"),
		'idle', 'idle kind: a claim of any kind gets idle jobs');

	# new busy jobs behind everything, and what is left, are all claimed once
	$node->safe_psql('postgres', q{
		SELECT count(*) FROM jobq.enqueue_many('busy', array_fill('{}'::jsonb, ARRAY[50]), queue => 'idlekind');
	});
	is( join(',', map { $claim->(100, "ARRAY['busy']") } 1 .. 3), '100,100,76',
		'idle kind: the busy jobs left and the new ones: 276, in claims of 100');
	$node->safe_psql('postgres', "SELECT count(*) FROM jobq.claim('idlekind', batch => 1000)")
	  for (1 .. 12);
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE status = 'running') || '/' || count(*)"
			  . " FROM jobq.job WHERE queue = 'idlekind'"),
		'12351/12351', 'idle kind: all 12,351 jobs claimed, none left pending');
}

# Claims that all name the same kinds move the queue's position as their
# kinds position: when one drains the queue, both go to its last entry, so
# later claims (naming kinds or not) do not walk what these claimed, even
# under a held snapshot, and a job of a higher priority is still an island.
$node->safe_psql('postgres', q{
	SELECT jobq.configure('onekind');
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[1000]), queue => 'onekind');
});
{
	my $claim = sub {
		my ($batch, $kinds) = @_;
		return $node->safe_psql('postgres',
			"SELECT count(*) FROM jobq.claim('onekind', batch => $batch, kinds => $kinds)");
	};
	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$holder->query_safe('SELECT count(*) FROM jobq.job');
	is(join(',', map { $claim->(400, "ARRAY['k']") } 1 .. 3), '400,400,200',
		'one kind: claims of kind k drain the queue');
	$node->safe_psql('postgres', q{
		SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[2000]), queue => 'onekind');
	});
	is(join(',', map { $claim->(500, "ARRAY['k']") } 1 .. 4), '500,500,500,500',
		'one kind: and the 2,000 enqueued after');
	$node->safe_psql('postgres', q{
		SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[2]), queue => 'onekind');
	});
	my $before = entries_read();
	is($claim->(1, 'NULL'), '1', 'one kind: a claim of any kind gets one of the 2 new jobs');
	my $read = entries_read() - $before;
	cmp_ok($read, '<=', 10, "one kind: it read $read index entries, not the 3,000 claimed before");
	$node->safe_psql('postgres',
		"SELECT jobq.enqueue('k', '{\"crit\": 1}', queue => 'onekind', priority => 10)");
	$before = entries_read();
	is( $node->safe_psql('postgres',
			"SELECT string_agg(coalesce(payload->>'crit', '-'), ',' ORDER BY ord) FROM"
			  . " jobq.claim('onekind', batch => 3, kinds => ARRAY['k'])"
			  . " WITH ORDINALITY c(j, t, k, payload, p, r, m, cp, ca, l, ord)"),
		'1,-', 'one kind: a claim of kind k takes the job of a higher priority first, then the last one');
	$read = entries_read() - $before;
	cmp_ok($read, '<=', 10, "one kind: it read $read index entries (the island, then the position)");
	$holder->query_safe('COMMIT');
	$holder->quit;
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE status = 'running') || '/' || count(*)"
			  . " FROM jobq.job WHERE queue = 'onekind'"),
		'3003/3003', 'one kind: all 3,003 jobs claimed, none left pending');
}

# Under a per-key limit a claim passes over the rows of keys at the limit
# and reads only as far as it must: not the first 10,000 ready rows of the
# queue (as a statement choosing among them did), and under a held snapshot
# not the rows claimed before it either.  A full key's rows wait and are
# claimed, first in order, once it has room again.
$node->safe_psql('postgres', q{
	SELECT jobq.configure('perkey', max_per_key => 2);
	DO $$ BEGIN FOR i IN 0..11999 LOOP
		PERFORM jobq.enqueue('k', jsonb_build_object('key', i % 50), queue => 'perkey',
		                     concurrency_key => 'c' || (i % 50));
	END LOOP; END $$;
	CREATE FUNCTION take(n int, OUT keys text, OUT jobs bigint) LANGUAGE sql AS $$
		WITH c AS (SELECT * FROM jobq.claim('perkey', batch => n) WITH ORDINALITY),
		     d AS (SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) FROM c)
		SELECT string_agg(payload->>'key', ',' ORDER BY ordinality), count(*) FROM c, d
	$$;
});
{
	my $before = entries_read();
	is($node->safe_psql('postgres', "SELECT keys FROM take(10)"), '0,1,2,3,4,5,6,7,8,9',
		'per key: a claim of 10 gets the first job of each of 10 keys');
	my $read = entries_read() - $before;
	cmp_ok($read, '<=', 20, "per key: it read $read index entries of the 12,000 ready rows");

	my $holder = $node->background_psql('postgres');
	$holder->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$holder->query_safe('SELECT count(*) FROM jobq.job');
	is( join(',', map { $node->safe_psql('postgres', "SELECT jobs FROM take(100)") } 1 .. 40),
		join(',', ('100') x 40), 'per key: 40 claims of 100 (two of each key) get 100 each');
	$before = entries_read();
	is($node->safe_psql('postgres', "SELECT jobs FROM take(1)"), '1',
		'per key: the 41st claim gets a job');
	$read = entries_read() - $before;
	cmp_ok($read, '<=', 10,
		"per key: it read $read index entries, not the 4,010 the claims before it left");
	$holder->query_safe('COMMIT');
	$holder->quit;

	# c0 and c1 full: 100 claimed, those of other keys completed
	$node->safe_psql('postgres', q{
		SELECT count(*) FROM jobq.claim('perkey', batch => 100);
		SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) FROM jobq.job
		 WHERE queue = 'perkey' AND status = 'running' AND concurrency_key NOT IN ('c0', 'c1');
	});
	my @keys = map { split /,/, $node->safe_psql('postgres', "SELECT keys FROM take(96)") } 1 .. 10;
	is( scalar(grep { $_ eq '0' || $_ eq '1' } @keys) . '/' . scalar(@keys),
		'0/960', 'per key: 10 claims of 96 get 960 jobs, none of the two full keys');
	$node->safe_psql('postgres', q{
		SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) FROM jobq.job
		 WHERE queue = 'perkey' AND status = 'running'});
	is($node->safe_psql('postgres', "SELECT keys FROM take(4)"), '0,1,0,1',
		'per key: once c0 and c1 have room, their waiting jobs come first, two each');
	my $left;
	do
	{
		$left = $node->safe_psql('postgres', "SELECT jobs FROM take(100)");
	} while ($left > 0);
	is( $node->safe_psql('postgres',
			"SELECT count(*) FILTER (WHERE status = 'completed') || '/' || count(*)"
			  . " FROM jobq.job WHERE queue = 'perkey'"),
		'12000/12000', 'per key: every job claimed and completed once');
}

# A per-key claim stops after 10,000 rows of its kinds; where it stops is
# not the end of its queue's island: the island's other rows are claimed
# next.  (A claim of 20,000 needs jobq.max_batch raised.)
$node->safe_psql('postgres', q{
	SELECT jobq.configure('isl', max_per_key => 1);
	SELECT jobq.enqueue('a', queue => 'isl');
	SELECT count(*) FROM jobq.claim('isl', lease => '1 h');
	SELECT count(*) FROM jobq.enqueue_many('b', array_fill('{}'::jsonb, ARRAY[15000]), queue => 'isl',
	                                       priority => 10);
});
is( $node->safe_psql('postgres',
		"SET jobq.max_batch = 20000; SELECT count(*) FROM jobq.claim('isl', batch => 20000, lease => '1 h')"),
	'10000', 'per-key island: a claim of 20,000 stops after 10,000 rows');
$node->safe_psql('postgres', "SELECT jobq.enqueue('c', queue => 'isl')");
{
	my ($got, $n) = (0, 0);
	do
	{
		$n = $node->safe_psql('postgres',
			"SELECT count(*) FROM jobq.claim('isl', batch => 1000, lease => '1 h')");
		$got += $n;
	} while ($n > 0);
	is($got, 5001, 'per-key island: the next claims get the island\'s other 5,000 jobs and the new one');
}

# A waiting per-key claim makes an attempt at every wake-up (each commit
# that enqueues into its queue) and every 100 ms while keys are full; each
# counts the running jobs by key afresh, in memory of its own.
$node->safe_psql('postgres', q{
	SELECT jobq.configure('mem', max_per_key => 1);
	DO $$ BEGIN FOR i IN 1..500 LOOP
		PERFORM jobq.enqueue('k', '{}', queue => 'mem', concurrency_key => lpad(i::text, 480, 'x'));
	END LOOP; END $$;
	SELECT count(*) FROM jobq.claim('mem', batch => 1000, lease => '1 h');
});
{
	my $waiter = $node->background_psql('postgres');
	my $pid = $waiter->query_safe('SELECT pg_backend_pid()');
	$waiter->query_until(qr/waiting/,
		"\\echo waiting\nSELECT count(*) FROM jobq.claim('mem', wait => '6 s');\n");
	$node->safe_psql('postgres', q{
		DO $$ BEGIN FOR i IN 1..300 LOOP
			PERFORM jobq.enqueue('k', '{}', queue => 'mem', concurrency_key => lpad('1', 480, 'x'));
			COMMIT;
			PERFORM pg_sleep(0.005);
		END LOOP; END $$;
	});
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', "SELECT pg_log_backend_memory_contexts($pid)");
	my $total;
	for (1 .. 100)
	{
		my $log = slurp_file($node->logfile, $offset);
		if ($log =~ /\[$pid\].*Grand total: (\d+) bytes/)
		{
			$total = $1;
			last;
		}
		usleep(50_000);
	}
	ok(defined $total, 'per-key wait: the waiting claim logged its memory');
	cmp_ok($total // 1e12, '<', 8_000_000,
		"per-key wait: after 300 wake-ups its memory is $total bytes, not 300 copies of 500 keys");
	$waiter->quit;
}

# An island of the backlog's own priority: a claim that rolls back after
# another moved the position past its row gives that row back before the
# position.  The next claims scan the island and stop at its end, however
# many entries of that priority follow (nbtree alone would stop a row
# comparison only where neg_priority differs): counted in index pages,
# which also count the entries nbtree passes over.
$node->safe_psql('postgres', q{
	SELECT jobq.configure('same');
	SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[20000]), queue => 'same');
	SELECT count(*) FROM jobq.claim('same');
});

sub pages_read
{
	return $node->safe_psql('postgres', q{
		SELECT pg_stat_force_next_flush();
		SELECT pg_sleep(0.1);
		SELECT pg_stat_clear_snapshot();
		SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes WHERE indexrelname = 'ready_claim_idx'});
}

my $rb = $node->background_psql('postgres');
$rb->query_safe('BEGIN');
$rb->query_safe("SELECT count(*) FROM jobq.claim('same')");
$node->safe_psql('postgres', "SELECT count(*) FROM jobq.claim('same', batch => 5)");
$rb->query_safe('ROLLBACK');
$rb->quit;
for my $i (1 .. 3)
{
	my $before = pages_read();
	my $n = $node->safe_psql('postgres', "SELECT count(*) FROM jobq.claim('same', batch => 2)");
	my $pages = pages_read() - $before;
	is($n, '2', "same priority: claim $i after the rollback gets 2 jobs");
	cmp_ok($pages, '<=', 20, "same priority: claim $i read $pages index pages, not the rest of the queue");
}
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM jobq.job WHERE queue = 'same' AND status = 'pending'"),
	20000 - 1 - 5 - 6,
	'same priority: the rolled-back job was claimed again, nothing else was lost');

$node->stop;
done_testing();
