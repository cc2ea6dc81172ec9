# The background worker survives crashes: after kill -9 of a backend, of the
# jobq worker itself, and of the postmaster, the server comes back with every
# committed job and none of the uncommitted work, a jobq worker runs again,
# and the leases that expired meanwhile are reaped by that new worker.
#
# Stock settings: PostgreSQL's defaults (fsync and restart_after_crash on,
# both of which PostgreSQL::Test::Cluster turns off; jit on) and jobq's
# (naptime 1 s), with only shared_preload_libraries added.  With fsync off a
# crash of the postmaster proves little about what was committed.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\n"
	  . "# PostgreSQL's defaults, restated over PostgreSQL::Test::Cluster's\n"
	  . "fsync = on\nrestart_after_crash = on\njit = on\nmax_worker_processes = 8\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE TABLE held (round text, job_id bigint, lease_token bigint);
});

# The pid of the jobq worker of database postgres, once there is one.
sub worker_pid
{
	$node->poll_query_until(
		'postgres', q{
		SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'})
	  or die 'no jobq worker for database postgres';
	return $node->safe_psql('postgres', q{
		SELECT pid FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'});
}

# What was committed about the jobs, as seen before and after a crash of
# round $round: all of it, except what the reaper changes on the two jobs
# of this round whose leases expire (status, retry_count, lease and so on).
sub jobs_query
{
	my ($round) = @_;
	return qq{
	SELECT job_id, kind, payload, attempts, created_at,
	       CASE WHEN job_id NOT IN (SELECT job_id FROM held WHERE round = '$round')
	            THEN row(status, retry_count, worker_id, claimed_at, lease_token,
	                     lease_expires_at, run_at, finished_at, last_error)::text
	       END
	  FROM jobq.job ORDER BY job_id};
}

# Per round: two jobs claimed (committed) with a short lease by a session
# that then sits idle, one job left pending, and another session with an open
# transaction that enqueued a job and claimed the pending one.  That open
# transaction also locks the two claimed jobs' rows: the reaper skips locked
# rows, so however long the round takes before the crash, the running
# worker cannot reap them; the crash ends the lock, and the worker started
# after it must.  Returns the two sessions and the committed state of the
# jobs.
sub prepare_round
{
	my ($round) = @_;

	$node->safe_psql('postgres', qq{
		SELECT count(*) FROM jobq.enqueue_many('$round',
			ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[])});

	# the open transaction begins first, so that it locks the claimed jobs
	# one statement after their claim committed (3 s: a wide margin)
	my $open = $node->background_psql('postgres', on_error_stop => 0);
	$open->query_safe('BEGIN');
	my $claimer = $node->background_psql('postgres', on_error_stop => 0);
	$claimer->query_safe(qq{
		INSERT INTO held
		SELECT '$round', job_id, lease_token
		  FROM jobq.claim(worker_id => 'claimer', batch => 2, lease => '3 s',
		                  kinds => ARRAY['$round'])});
	is( $open->query_safe(qq{
		SELECT string_agg(status, ',') FROM (
			SELECT j.status FROM jobq.job j JOIN held h USING (job_id)
			 WHERE h.round = '$round' FOR UPDATE OF j) l}),
		'running,running',
		"$round: the two claimed jobs are locked while running");
	$open->query_safe(qq{SELECT * FROM jobq.enqueue('$round-uncommitted')});
	$open->query_safe(qq{
		SELECT * FROM jobq.claim(worker_id => 'open', kinds => ARRAY['$round'])});

	is( $node->safe_psql(
			'postgres', qq{
		SELECT status, count(*) FROM jobq.job WHERE kind LIKE '$round%'
		 GROUP BY status ORDER BY status}),
		"pending|1\nrunning|2",
		"$round: two claimed jobs running (not reaped: locked), one pending");

	return ($claimer, $open, $node->safe_psql('postgres', jobs_query($round)));
}

# After a crash-restart: committed jobs unchanged, uncommitted work gone, a
# new jobq worker, and the two expired leases reaped by it.
sub check_after_crash
{
	my ($round, $old_worker, $committed) = @_;

	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'server did not come back';

	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*) FROM jobq.job WHERE kind = '$round-uncommitted'}),
		'0', "$round: the job enqueued in the open transaction is gone");

	my $t0 = Time::HiRes::time();
	my $new_worker = worker_pid();
	isnt($new_worker, $old_worker, "$round: a new jobq worker runs");
	# the launcher's state file knows the database has jobq: served at once
	# (told by a file that said "without", it waited for
	# jobq.database_recheck_interval, 60 s)
	cmp_ok(Time::HiRes::time() - $t0, '<', 30,
		"$round: the new worker came without waiting for the recheck interval");
	is( $node->safe_psql(
			'postgres', q{
		SELECT backend_type, datname FROM pg_stat_activity
		 WHERE backend_type = 'jobq launcher'
		    OR (backend_type = 'jobq worker' AND datname = 'postgres')
		 ORDER BY backend_type}),
		"jobq launcher|\njobq worker|postgres",
		"$round: launcher and worker in pg_stat_activity");

	ok( $node->poll_query_until(
			'postgres', qq{
		SELECT count(*) = 2 FROM jobq.job j JOIN held h USING (job_id)
		 WHERE h.round = '$round' AND j.status = 'pending' AND j.retry_count = 1}),
		"$round: the two expired leases are reaped after the restart");
	is( $node->safe_psql(
			'postgres', qq{
		SELECT count(*) FROM jobq.attempt a JOIN held h USING (job_id)
		 WHERE h.round = '$round' AND a.outcome = 'lease expired'
		   AND a.worker_id = 'claimer'}),
		'2', "$round: one 'lease expired' attempt each");
	ok( $node->poll_query_until(
			'postgres', q{
		SELECT reaped = 2 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
		"$round: the reaps were done by the worker started after the crash");

	# The open transaction's claim was undone: that job is pending, never
	# attempted.
	is( $node->safe_psql(
			'postgres', qq{
		SELECT status, retry_count, attempts, worker_id FROM jobq.job
		 WHERE kind = '$round'
		   AND job_id NOT IN (SELECT job_id FROM held WHERE round = '$round')}),
		'pending|0|0|', "$round: the claim in the open transaction was undone");
	is($node->safe_psql('postgres', jobs_query($round)),
		$committed, "$round: every committed job is there, as committed");
}

# Wait until a process is gone (kill -9 returns before it is).
sub wait_gone
{
	my ($pid, $what) = @_;
	foreach (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		return 1 unless kill(0, $pid);
		usleep(100_000);
	}
	die "$what (pid $pid) did not exit";
}

# Wait for the postmaster to log the end of a crash-restart after $offset.
sub wait_crash_restart
{
	my ($offset) = @_;
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$offset);
}

my $old_worker = worker_pid();

#
# (a) kill -9 of an idle backend that committed a claim
#
{
	my ($claimer, $open, $committed) = prepare_round('a');
	# the claimer by its last statement: on a loaded machine another
	# session of the test (a safe_psql just ended) can still show idle (a
	# fresh Debian 13 root's run found two)
	my $victim = $node->safe_psql(
		'postgres', q{
		SELECT pid FROM pg_stat_activity
		 WHERE backend_type = 'client backend' AND state = 'idle'
		   AND query LIKE '%INSERT INTO held%' AND pid <> pg_backend_pid()});
	like($victim, qr/^\d+$/, 'a: found the idle claiming backend');
	my $offset = -s $node->logfile;
	kill 'KILL', $victim;
	wait_crash_restart($offset);
	$claimer->{run}->finish;
	$open->{run}->finish;
	check_after_crash('a', $old_worker, $committed);
	$old_worker = worker_pid();
}

#
# (b) kill -9 of the jobq worker
#
{
	my ($claimer, $open, $committed) = prepare_round('b');
	my $offset = -s $node->logfile;
	kill 'KILL', $old_worker;
	wait_crash_restart($offset);
	ok( $node->log_contains(
			qr/background worker "jobq worker" \(PID $old_worker\) was terminated by signal 9/,
			$offset),
		'b: the postmaster saw the jobq worker die');
	$claimer->{run}->finish;
	$open->{run}->finish;
	check_after_crash('b', $old_worker, $committed);
	$old_worker = worker_pid();
}

#
# (c) kill -9 of the postmaster
#
{
	my ($claimer, $open, $committed) = prepare_round('c');

	# every server process, to wait for all of them to go
	my @pids = split /\n/,
	  $node->safe_psql('postgres', 'SELECT pid FROM pg_stat_activity');
	my $postmaster = $node->{_pid};
	$node->kill9;
	wait_gone($postmaster, 'postmaster');
	# backends and the jobq processes notice the postmaster's death and exit
	wait_gone($_, 'server process') foreach @pids;
	pass('c: every server process exited after the postmaster was killed');
	$claimer->{run}->finish;
	$open->{run}->finish;
	$node->start;
	check_after_crash('c', $old_worker, $committed);
}

$node->stop;
done_testing();
