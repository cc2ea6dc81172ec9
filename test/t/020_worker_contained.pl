# The background worker is never stopped or stalled by one tenant (issue 15,
# items 4 to 6).
#
# Containment: bad state planted directly in jobq's tables as the superuser
# (bypassing the argument checks that refuse it today) in one queue or one
# schedule - a retention too large to compute, a cron expression that does
# not parse, an attempt row a constraint refuses - makes that unit fail,
# logged once; every other queue is pruned and reaped and every other
# schedule fires, by the same worker process, which does not exit.  Once the
# state is repaired the unit works again, and says so.
#
# No client lock stalls the worker: keys beginning with "jobq:" are refused
# to clients; an enqueue-only role's open transaction that created a queue a
# schedule fires into, and a work role's open BEGIN; claim; fail on a queue
# with a circuit breaker, leave that queue or schedule for later while
# expired leases of other queues are reaped and other schedules fire; after
# the client commits everything catches up, the breaker's count included.
# A fire key a client planted before "jobq:" keys were reserved does not
# stand in for the fire.
#
# Deadlines are poll_query_until's (180 s by default), far above the
# worker's naptime of 100 ms here: they only catch a stalled worker.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('contained');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.prune_interval = 1s\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE bob LOGIN;
	SELECT jobq.grant('qm', 'mallory', 'enqueue');
	SELECT jobq.grant('qnew', 'mallory', 'enqueue');
	SELECT jobq.grant('qb', 'bob', 'work');
	SELECT jobq.configure('normal', retention_completed => '1 second');
});

ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker'}),
	'the worker serves the database');
my $worker_pid = worker_pid();

# The pid of the database's worker.
sub worker_pid
{
	return $node->safe_psql('postgres',
		q{SELECT pid FROM jobq.workers WHERE role = 'worker'});
}

# Enqueue, claim and complete one job of kind $kind in $queue.
sub finish_job
{
	my ($queue, $kind) = @_;
	$node->safe_psql('postgres', qq{
		SELECT count(*) FROM jobq.enqueue('$kind', queue => '$queue');
		SELECT count(jobq.complete(job_id, lease_token))
		  FROM jobq.claim('$queue', kinds => ARRAY['$kind']);});
}

# Enqueue and claim one job of kind $kind in $queue with a lease of 1 s, by
# worker $worker, who then vanishes.
sub claim_and_vanish
{
	my ($queue, $kind, $worker) = @_;
	is( $node->safe_psql('postgres', qq{
		SELECT count(*) FROM jobq.enqueue('$kind', queue => '$queue');
		SELECT count(*) FROM jobq.claim('$queue', worker_id => '$worker', lease => '1 s',
		                                kinds => ARRAY['$kind']);}),
		"1\n1", "a job of kind $kind in queue $queue is claimed with a lease of 1 s");
}

# Has the job of kind $kind been reaped (back to pending, one retry spent)?
sub reaped_sql
{
	my ($kind) = @_;
	return qq{SELECT status = 'pending' AND retry_count = 1
	            AND last_error = 'lease expired' FROM jobq.job WHERE kind = '$kind'};
}

# How often the server log says $re since $offset.
sub log_count
{
	my ($re, $offset) = @_;
	my $log = slurp_file($node->logfile, $offset);
	my @hits = $log =~ /$re/g;
	return scalar @hits;
}

my $start = -s $node->logfile;

# --- item 4: one queue's retention does not stop pruning elsewhere --------
finish_job('forever', 'keep');
finish_job('normal', 'drop1');
$node->safe_psql('postgres', q{
	UPDATE jobq.queue SET retention_completed = '10000 years' WHERE name = 'forever';
	UPDATE jobq.job SET finished_at = now() - interval '1 hour' WHERE kind = 'keep';});

ok($node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM jobq.job WHERE kind = 'drop1')}),
	'prune: the normal queue is pruned though queue forever cannot compute its retention');
my $prune_failed = qr/jobq: pruning finished jobs of queue "forever" failed: timestamp out of range/;
ok($node->wait_for_log($prune_failed, $start), 'prune: the failing queue is logged');
# another prune round (it runs every second) to show the error is logged once
finish_job('normal', 'drop2');
ok($node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM jobq.job WHERE kind = 'drop2')}),
	'prune: the normal queue is pruned in the following rounds too');
is(log_count($prune_failed, $start), 1, 'prune: the failing queue is logged once, not every round');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE kind = 'keep'}),
	'1', 'prune: the failing queue is left as it was');

# --- item 4: one queue's reap failing does not keep the others unreaped ---
$node->safe_psql('postgres', q{
	ALTER TABLE jobq.attempt ADD CONSTRAINT no_poison
	    CHECK (worker_id IS DISTINCT FROM 'poison') NOT VALID;});
claim_and_vanish('qpoison', 'poisoned', 'poison');
claim_and_vanish('qz', 'healthy', 'w1');
ok($node->poll_query_until('postgres', reaped_sql('healthy')),
	'reap: queue qz is reaped though reaping queue qpoison fails');
my $reap_failed = qr/jobq: reaping expired leases of queue "qpoison" failed: new row for relation "attempt" violates check constraint "no_poison"/;
ok($node->wait_for_log($reap_failed, $start), 'reap: the failing queue is logged');
is($node->safe_psql('postgres', q{SELECT status FROM jobq.job WHERE kind = 'poisoned'}),
	'running', 'reap: the failing queue\'s job is left as it was');

# --- item 4: one schedule failing does not keep the others from firing ----
$node->safe_psql('postgres', q{
	SELECT jobq.schedule('good', '* * * * * *', 'good.tick');
	SELECT jobq.schedule('broken', '* * * * * *', 'broken.tick');
	UPDATE jobq.schedule SET cron = 'not a cron' WHERE name = 'broken';});
my $planted = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
ok($node->poll_query_until('postgres', qq{
		SELECT count(*) >= 3 FROM jobq.job
		 WHERE kind = 'good.tick' AND created_at > '$planted'}),
	'schedules: good fires every second though broken cannot be parsed');
my $fire_failed = qr/jobq: firing schedule "broken" failed: /;
ok($node->wait_for_log($fire_failed, $start), 'schedules: the failing schedule is logged');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE kind = 'broken.tick'}),
	'0', 'schedules: the failing schedule enqueued nothing');

# the units kept failing all this while (one more round each), logged once
ok($node->poll_query_until('postgres', qq{
		SELECT count(*) >= 6 FROM jobq.job
		 WHERE kind = 'good.tick' AND created_at > '$planted'}),
	'schedules: good goes on firing');
is(log_count($reap_failed, $start), 1, 'reap: the failing queue is logged once');
is(log_count($fire_failed, $start), 1, 'schedules: the failing schedule is logged once');
is(log_count($prune_failed, $start), 1, 'prune: still logged once');
is(worker_pid(), $worker_pid, 'the worker did not exit');

# repaired, each works again and says so
$node->safe_psql('postgres', q{
	UPDATE jobq.queue SET retention_completed = '1 second' WHERE name = 'forever';
	ALTER TABLE jobq.attempt DROP CONSTRAINT no_poison;
	SELECT jobq.schedule('broken', '* * * * * *', 'broken.tick');});
ok($node->poll_query_until('postgres', q{
		SELECT NOT EXISTS (SELECT FROM jobq.job WHERE kind = 'keep')
		   AND (SELECT status = 'pending' FROM jobq.job WHERE kind = 'poisoned')
		   AND EXISTS (SELECT FROM jobq.job WHERE kind = 'broken.tick')}),
	'repaired: queue forever is pruned, qpoison reaped, broken fires');
ok($node->wait_for_log(qr/jobq: pruning finished jobs of queue "forever" works again/, $start),
	'repaired: the prune of queue forever is logged as working again');
ok($node->wait_for_log(qr/jobq: reaping expired leases of queue "qpoison" works again/, $start),
	'repaired: the reap of queue qpoison is logged as working again');
ok($node->wait_for_log(qr/jobq: firing schedule "broken" works again/, $start),
	'repaired: schedule broken is logged as working again');
$node->safe_psql('postgres', q{SELECT jobq.unschedule('broken')});

# --- item 5: clients cannot write jobq's own keys --------------------------
my ($ret, $out, $err) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT * FROM jobq.enqueue('report.build', '{"evil": true}', queue => 'qm',
	                           idempotency_key => 'jobq:schedule:1:1');},
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/ERROR:  22023: idempotency_key must not begin with "jobq:"/,
	'keys: enqueue refuses a key beginning with "jobq:"');
like($err, qr/HINT:  Use a key with a prefix of your own/, 'keys: with a hint');
($ret, $out, $err) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT * FROM jobq.enqueue_many('report.build', ARRAY['{}', '{"evil": true}']::jsonb[],
	                                queue => 'qm',
	                                idempotency_keys => ARRAY['mine', 'jobq:schedule:1:2']);},
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/ERROR:  22023: idempotency_keys\[2\] must not begin with "jobq:"/,
	'keys: enqueue_many refuses such a key, naming the element');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE queue = 'qm'}),
	'0', 'keys: the refused calls left no job');

# A fire key planted before "jobq:" keys were reserved (here: by the
# superuser, in the table) does not stand in for the fire.
$node->safe_psql('postgres', q{
	SELECT jobq.schedule('legacy', '* * * * * *', 'legacy.tick', '{"real": true}');
	SELECT count(*) FROM jobq.enqueue('legacy.tick', '{"evil": true}', queue => 'qm',
	                                  idempotency_key => 'planted');
	UPDATE jobq.idempotency_key k
	   SET key = 'jobq:schedule:' || s.schedule_id || ':'
	             || ((extract(epoch FROM s.next_fire_at) - 946684800) * 1000000)::bigint
	  FROM jobq.schedule s
	 WHERE s.name = 'legacy' AND k.kind = 'legacy.tick' AND k.key = 'planted';
	UPDATE jobq.job j SET idempotency_key = k.key
	  FROM jobq.idempotency_key k WHERE k.job_id = j.job_id AND j.kind = 'legacy.tick';});
# (the planted job by its payload: the schedule fires every second, and its
# own jobs may be there already)
my $planted_key = $node->safe_psql('postgres',
	q{SELECT idempotency_key FROM jobq.job WHERE kind = 'legacy.tick' AND payload = '{"evil": true}'});
ok($node->poll_query_until('postgres', qq{
		SELECT EXISTS (SELECT FROM jobq.job WHERE kind = 'legacy.tick'
		                 AND idempotency_key = '$planted_key:1' AND payload = '{"real": true}')}),
	'keys: the fire whose key a client took goes under the next derived key');
ok($node->wait_for_log(qr/key "\Q$planted_key\E" of a fire of schedule "legacy" is held by job \d+, which the schedule did not enqueue/, $start),
	'keys: the planted job is reported');
$node->safe_psql('postgres', q{SELECT jobq.unschedule('legacy')});

# --- item 5: an enqueue-only role's open transaction stalls nothing -------
# mallory's open enqueue creates queue qnew, which schedule snew fires into
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.queue WHERE name = 'qnew'}),
	'0', 'lock: queue qnew does not exist yet');
my $mallory = $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]);
$mallory->query_safe('BEGIN');
$mallory->query_safe(q{SELECT count(*) FROM jobq.enqueue('mine', queue => 'qnew')});
$node->safe_psql('postgres', q{SELECT jobq.schedule('snew', '* * * * * *', 'snew.tick', queue => 'qnew')});
ok($node->poll_query_until('postgres', q{
		SELECT wait_event_type = 'Lock' FROM pg_stat_activity
		 WHERE backend_type = 'jobq worker'}),
	'lock: the fire of snew runs into the lock of mallory\'s open transaction');
my $locked_at = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
claim_and_vanish('qo', 'other1', 'w2');
ok($node->poll_query_until('postgres', reaped_sql('other1')),
	'lock: an expired lease of another queue is reaped meanwhile');
ok($node->poll_query_until('postgres', qq{
		SELECT count(*) >= 3 FROM jobq.job
		 WHERE kind = 'good.tick' AND created_at > '$locked_at'}),
	'lock: another schedule fires meanwhile');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE kind = 'snew.tick'}),
	'0', 'lock: snew waits for mallory');
$mallory->query_safe('COMMIT');
ok($node->poll_query_until('postgres', q{
		SELECT count(*) >= 1 FROM jobq.job WHERE kind = 'snew.tick' AND queue = 'qnew'}),
	'lock: after mallory commits, snew fires');
$mallory->quit;

# --- item 6: a work role's open fail on a breaker queue stalls nothing ----
$node->safe_psql('postgres', q{
	SELECT jobq.configure('qb', breaker_threshold => 5);
	SELECT count(*) FROM jobq.enqueue('bobs', queue => 'qb');});
my $bob = $node->background_psql('postgres', extra_params => [ '-U', 'bob' ]);
$bob->query_safe('BEGIN');
is( $bob->query_safe(q{
		SELECT jobq.fail(job_id, lease_token, 'boom')
		  FROM jobq.claim('qb', worker_id => 'bob', lease => '1 hour', kinds => ARRAY['bobs'])}),
	'pending', 'breaker: bob fails a job of queue qb and keeps the transaction open');
is($node->safe_psql('postgres', q{SELECT breaker_failures FROM jobq.queue WHERE name = 'qb'}),
	'0', 'breaker: bob\'s failure is not committed yet');
claim_and_vanish('qb', 'gone', 'w3');
claim_and_vanish('qo', 'other2', 'w4');
ok($node->poll_query_until('postgres', reaped_sql('other2')),
	'breaker: an expired lease of another queue is reaped while bob holds queue qb');
is($node->safe_psql('postgres', q{SELECT status FROM jobq.job WHERE kind = 'gone'}),
	'running', 'breaker: queue qb\'s expired lease waits for bob');
$bob->query_safe('COMMIT');
$bob->quit;
ok($node->poll_query_until('postgres', reaped_sql('gone')),
	'breaker: after bob commits, queue qb\'s expired lease is reaped');
is($node->safe_psql('postgres', q{SELECT breaker_failures FROM jobq.queue WHERE name = 'qb'}),
	'2', 'breaker: both failures are counted, bob\'s and the expired lease');

is(worker_pid(), $worker_pid, 'the same worker process served all along');

# --- a database still at release 0.1.0 is served the same way -------------
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', q{
	CREATE EXTENSION jobq VERSION '0.1.0';
	SELECT jobq.schedule('tick', '* * * * * *', 'old.tick');
	SELECT count(*) FROM jobq.enqueue('old.gone');
	SELECT count(*) FROM jobq.claim(worker_id => 'w5', lease => '1 s');});
ok($node->poll_query_until('old', q{
		SELECT count(*) >= 2 FROM jobq.job j JOIN jobq.schedule s ON s.kind = j.kind
		 WHERE j.idempotency_key = 'jobq:schedule:' || s.schedule_id || ':'
		       || ((extract(epoch FROM j.run_at) - 946684800) * 1000000)::bigint}),
	'0.1.0: the schedule fires, with its derived keys');
ok($node->poll_query_until('old', q{
		SELECT status = 'pending' AND retry_count = 1 FROM jobq.job WHERE kind = 'old.gone'}),
	'0.1.0: the expired lease is reaped');
($ret, $out, $err) = $node->psql('old', q{
	SELECT * FROM jobq.enqueue('old.tick', idempotency_key => 'jobq:schedule:1:1');});
like($err, qr/idempotency_key must not begin with "jobq:"/,
	'0.1.0: the key namespace is closed to clients there too');

$node->stop;
done_testing();
