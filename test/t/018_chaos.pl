# Chaos soak: producers and workers under load while server processes die.
#
# pgbench clients run in short bursts (test/chaos/loop.sh starts the next
# burst when one dies): producers enqueue jobs with unique idempotency keys
# and record each in a producer ledger in the same transaction; workers
# claim batches under 2-second leases, then complete each job (recording
# job_id and lease token in a completion ledger in the same transaction, only
# when complete returned true) or fail it, and now and then vanish with the
# leases they hold.  An every-second cron schedule fires into the same queue.
# Meanwhile the test kills with SIGKILL, at random moments: a worker's
# backend, the jobq background worker, and the postmaster (restarted with
# $node->start; the others are crash-restarts, restart_after_crash = on).
#
# Then producers stop, a clean worker loop drains the queue (expired leases
# are reaped by the background worker), and SQL proves: every committed
# enqueue has its job, completed or failed (none lost, none stuck); no job
# completed twice, and completions = completed jobs; every completion used
# the job's final lease token; no cron fire doubled; retry counts within
# max_retries and consistent with the attempt history; no crash but ours.
#
# It also proves the load was there: every planned kill was made (each
# victim found within a generous deadline, and seen dying of SIGKILL in the
# server log), a minimum of jobs was enqueued, completed by the chaos
# workers, failed and fired by cron, a planted expired lease was reaped,
# and every pgbench error was one a killed server explains (connection
# lost, server in recovery or starting up: counted by test/chaos/loop.sh);
# any other error, jobq's among them, fails the test.
#
# JOBQ_CHAOS_SECONDS (default 40) sets the length of the chaos phase; the
# number of kills grows with it (one every ~6 s, at least 5).  Progress goes
# to diag (prove shows it): each kill, and a line at least every 5 s while
# the load runs and while the queue drains.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(dirname);
use File::Spec;
use IPC::Run;
use List::Util qw(shuffle);
use Time::HiRes qw(usleep time);

my $seconds = $ENV{JOBQ_CHAOS_SECONDS} // 40;
my $seed = $ENV{JOBQ_CHAOS_SEED} // (int(time() * 1000) ^ $$) & 0x7fffffff;
srand($seed);
diag("chaos: $seconds s, seed $seed");

my $node = PostgreSQL::Test::Cluster->new('chaos');
$node->init;
# Stock settings: only shared_preload_libraries is added to PostgreSQL's
# defaults, which are restated over PostgreSQL::Test::Cluster's
# (restart_after_crash, which this test needs, fsync, jit, the process
# limits); jobq's own are its defaults (naptime 1 s).  Only logging is
# quieter.
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'jobq'
restart_after_crash = on
fsync = on
jit = on
max_worker_processes = 8
max_connections = 100
log_min_messages = warning
log_statement = none
});
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION jobq;
SELECT jobq.configure('chaos', max_retries => 3, lease => '2 s',
                      backoff_base => '50 ms', backoff_cap => '500 ms');
CREATE SCHEMA chaos;
CREATE SEQUENCE chaos.key_seq;
-- one row per committed enqueue (same transaction as the enqueue)
CREATE TABLE chaos.produced (key text PRIMARY KEY, job_id bigint NOT NULL, created boolean NOT NULL);
-- one row per complete() that returned true (same transaction); no unique
-- constraint: a double completion must show in the checks, not abort a client
CREATE TABLE chaos.completed (job_id bigint NOT NULL, lease_token bigint NOT NULL, worker text NOT NULL,
                              at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE chaos.fail_log (job_id bigint NOT NULL, lease_token bigint NOT NULL, new_status text);
CREATE TABLE chaos.stale (job_id bigint NOT NULL, lease_token bigint NOT NULL);

-- One worker round: claim a batch (committed at once), then per job one
-- transaction: fail it (p_fail_pct), or complete it and record that.  In
-- p_abandon_pct of the rounds the worker walks away from its leases.
CREATE PROCEDURE chaos.work(p_worker text, p_fail_pct int, p_batch int, p_abandon_pct int)
LANGUAGE plpgsql AS $$
DECLARE
	ids bigint[];
	toks bigint[];
	st text;
BEGIN
	SELECT array_agg(job_id ORDER BY job_id), array_agg(lease_token ORDER BY job_id)
	  INTO ids, toks
	  FROM jobq.claim('chaos', p_worker, p_batch, '2 s');
	COMMIT;
	IF ids IS NULL THEN
		PERFORM pg_sleep(0.01);
		RETURN;
	END IF;
	IF random() * 100 < p_abandon_pct THEN
		RETURN;
	END IF;
	FOR i IN 1 .. cardinality(ids) LOOP
		PERFORM pg_sleep(random() * 0.01);
		IF random() * 100 < p_fail_pct THEN
			st := jobq.fail(ids[i], toks[i], 'chaos failure', random() < 0.8);
			INSERT INTO chaos.fail_log VALUES (ids[i], toks[i], st);
		ELSIF jobq.complete(ids[i], toks[i], '{"ok": true}') THEN
			INSERT INTO chaos.completed (job_id, lease_token, worker) VALUES (ids[i], toks[i], p_worker);
		ELSE
			INSERT INTO chaos.stale VALUES (ids[i], toks[i]);
		END IF;
		COMMIT;
	END LOOP;
END $$;

-- every second
SELECT jobq.schedule('chaos-tick', '* * * * * *', 'chaos.tick', queue => 'chaos');
});

# one job abandoned with its lease at once, so the reaper has at least one
# lease to take back whatever the random workers do
my $planted = $node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.enqueue('chaos.work', queue => 'chaos', idempotency_key => 'planted');
	INSERT INTO chaos.produced SELECT 'planted', job_id, true FROM jobq.job WHERE idempotency_key = 'planted';
	SELECT job_id FROM jobq.claim('chaos', 'abandoner', 1, '2 s', ARRAY['chaos.work']);});
$planted = (split /\n/, $planted)[-1];
like($planted, qr/^\d+$/, 'a job claimed and abandoned before the load starts');

# ---------------------------------------------------------------------------
# load: pgbench bursts in loops

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $chaos_dir = File::Spec->rel2abs(dirname(__FILE__) . '/../chaos');
my $stop = "$tmp/stop";

# however the test ends (a failed wait croaks), the pgbench loops stop with it
# instead of retrying against a server that is gone
END
{
	PostgreSQL::Test::Utils::append_to_file($stop, '') if defined $stop && -d $tmp;
}

PostgreSQL::Test::Utils::append_to_file("$tmp/producer.sql", q{
\set d random(0, 4)
\set n random(1, 1000000000)
WITH k AS (SELECT 'k' || nextval('chaos.key_seq') AS key)
INSERT INTO chaos.produced (key, job_id, created)
SELECT k.key, e.job_id, e.created
  FROM k, LATERAL jobq.enqueue('chaos.work', jsonb_build_object('n', :n), 'chaos', 0,
                               now() + :d * interval '100 ms', NULL, k.key) AS e;
});
PostgreSQL::Test::Utils::append_to_file("$tmp/worker.sql",
	"CALL chaos.work('w' || :client_id, 10, 3, 3);\n");

my @loops;
{
	local $ENV{PGHOST} = $node->host;
	local $ENV{PGPORT} = $node->port;
	local $ENV{PGDATABASE} = 'postgres';
	foreach my $l (
		[ 'producers', "-n -c 2 -j 2 -T 2 -R 150 -f $tmp/producer.sql" ],
		[ 'workers', "-n -c 3 -j 3 -T 2 -f $tmp/worker.sql" ])
	{
		my ($name, $args) = @$l;
		my $log = "$tmp/$name.log";
		local $ENV{PGAPPNAME} = "chaos $name";
		push @loops, [ $name, $log,
			IPC::Run::start([ 'bash', "$chaos_dir/loop.sh", $stop, $log, split(/ /, $args) ],
				'<', \undef, '>', "$tmp/$name.out", '2>&1') ];
	}
}

# ---------------------------------------------------------------------------
# kills

my %kills = (backend => 0, 'jobq worker' => 0, postmaster => 0);
my %failed_kills;
my %killed_pids;

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

# The pids of the processes whose parent is $ppid (from /proc).
sub children_of
{
	my ($ppid) = @_;
	my @pids;
	foreach my $stat (glob('/proc/[0-9]*/stat'))
	{
		open(my $fh, '<', $stat) or next;
		my $line = <$fh> // next;
		close($fh);
		# pid (comm) state ppid ...; comm may hold spaces and parentheses
		push @pids, $1 if $line =~ /^(\d+) \(.*\) \S+ (\d+) / && $2 == $ppid;
	}
	return @pids;
}

# The pid found by $sql, retried while the server is busy coming back
# (a deadline that only catches a load that is gone).
sub find_pid
{
	my ($sql) = @_;
	foreach (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		my ($ret, $out) = $node->psql('postgres', $sql);
		return $out if $ret == 0 && $out =~ /^\d+$/;
		usleep(100_000);
	}
	return undef;
}

sub crash_restart_done
{
	my ($offset) = @_;
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$offset);
}

sub kill_one
{
	my ($kind) = @_;
	if ($kind eq 'postmaster')
	{
		my $pm = $node->{_pid};
		my @children = children_of($pm);
		$node->kill9;
		$killed_pids{$pm} = $kind;
		wait_gone($pm, 'postmaster');
		# every server process notices the postmaster's death and exits
		wait_gone($_, 'server process') foreach @children, children_of($pm);
		$node->start;
		$kills{$kind}++;
		return 1;
	}
	# A backend of a burst may end between the look-up and the kill (then
	# nothing crashes): such a victim is not counted, another is taken.
	foreach my $attempt (1 .. 5)
	{
		my $pid =
		  $kind eq 'backend'
		  ? find_pid(q{SELECT pid FROM pg_stat_activity
		                WHERE backend_type = 'client backend' AND application_name = 'chaos workers'
		                  AND state = 'active' ORDER BY random() LIMIT 1})
		  : find_pid(q{SELECT pid FROM pg_stat_activity
		                WHERE backend_type = 'jobq worker' AND datname = 'postgres'});
		if (!defined $pid)
		{
			diag("no $kind to kill; pg_stat_activity:\n"
				  . $node->safe_psql('postgres', q{SELECT pid, backend_type, application_name, state, left(query, 60)
				                                     FROM pg_stat_activity}));
			last;
		}
		my $offset = -s $node->logfile;
		if (kill('KILL', $pid) && log_shows(qr/\(PID $pid\) was terminated by signal 9/, $offset))
		{
			$killed_pids{$pid} = $kind;
			crash_restart_done($offset);
			$kills{$kind}++;
			return 1;
		}
		note("$kind $pid ended on its own before the kill; taking another");
	}
	$failed_kills{$kind}++;
	return 0;
}

# True when the server log shows $re after $offset within 30 s (a deadline
# far above the milliseconds the postmaster takes to log a child's death).
sub log_shows
{
	my ($re, $offset) = @_;
	foreach (1 .. 300)
	{
		my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset);
		return 1 if $log =~ $re;
		usleep(100_000);
	}
	return 0;
}

# progress for whoever watches prove: a diag line, and the time of the last one
my $last_progress = 0;
sub progress
{
	diag('chaos: ' . join('', @_));
	$last_progress = time();
}

# Sleep until time $at, with a progress line at least every 5 s.
sub sleep_until
{
	my ($at, $t0) = @_;
	while ((my $left = $at - time()) > 0)
	{
		my $nap = $left < 1 ? $left : 1;
		usleep(1_000_000 * $nap);
		progress(sprintf('%.0f s of %d s of load and kills', time() - $t0, $seconds))
		  if time() - $last_progress >= 5 && $at - time() > 0.5;
	}
}

my $nkills = int($seconds / 6);
$nkills = 5 if $nkills < 5;
my @plan = shuffle(('backend') x int($nkills / 2), ('jobq worker') x int(($nkills + 2) / 4),
	('postmaster') x ($nkills - int($nkills / 2) - int(($nkills + 2) / 4)));
my $t0 = time();
progress("load started: $seconds s, " . scalar(@plan) . ' kills planned');
foreach my $k (0 .. $#plan)
{
	# spread over the run, at a random moment of each slot
	my $at = $t0 + ($k + 0.3 + 0.5 * rand()) * $seconds / @plan;
	sleep_until($at, $t0);
	if (kill_one($plan[$k]))
	{
		progress(sprintf('%.1f s: killed a %s (%d of %d)', time() - $t0, $plan[$k], $k + 1, scalar(@plan)));
	}
	else
	{
		diag("found no $plan[$k] to kill at " . sprintf('%.1f', time() - $t0) . ' s');
	}
}
sleep_until($t0 + $seconds, $t0);

# ---------------------------------------------------------------------------
# stop the load, drain

PostgreSQL::Test::Utils::append_to_file($stop, '');
$_->[2]->finish foreach @loops;
my (%bursts, %loop);
foreach my $l (@loops)
{
	my ($name, $log) = @$l;
	my $s = -e "$log.summary" ? PostgreSQL::Test::Utils::slurp_file("$log.summary") : 'none';
	chomp $s;
	$bursts{$name} = $s;
	$loop{$name} = { split / /, $s } if $s ne 'none';
}
my $chaos_secs = time() - $t0;
progress(sprintf('%.0f s: load stopped; draining the queue', $chaos_secs));

# the kills were made as planned, none replaced by another or left out
my %planned = map { $_ => 0 } keys %kills;
$planned{$_}++ foreach @plan;
is(join(', ', map { "$_ $kills{$_}" } sort keys %kills),
	join(', ', map { "$_ $planned{$_}" } sort keys %planned),
	'every planned kill was made (' . scalar(@plan) . ')');
is(join(', ', map { "$_ $failed_kills{$_}" } sort keys %failed_kills), '', 'no kill found its victim missing');

# the pgbench loops ran, and every error they saw is one a killed server explains
foreach my $name (map { $_->[0] } @loops)
{
	my $log = "$tmp/$name.log";
	ok(defined $loop{$name}, "the $name loop wrote its summary") or next;
	cmp_ok($loop{$name}{ok}, '>=', 1, "$name: at least one burst ran through ($bursts{$name})");
	cmp_ok($loop{$name}{transactions}, '>=', 5 * $seconds, "$name: at least 5 transactions per second of chaos");
	my $unexpected = -s "$log.unexpected" ? PostgreSQL::Test::Utils::slurp_file("$log.unexpected") : '';
	is($loop{$name}{unexpected}, '0', "$name: no error but those of a killed server")
	  or diag("$name: unexpected errors (first lines):\n" . join("\n", grep { defined } (split /\n/, $unexpected)[ 0 .. 19 ]));
}

# no more cron fires from here on: the fired set is final
$node->safe_psql('postgres', "SELECT jobq.unschedule('chaos-tick')");

my $drain_start = time();
my $left;
while (1)
{
	$left = $node->safe_psql('postgres',
		"SELECT count(*) FROM jobq.job WHERE status IN ('pending', 'running')");
	last if $left == 0 || time() - $drain_start > 90;
	progress(sprintf('draining: %d jobs pending or running after %.0f s', $left, time() - $drain_start))
	  if time() - $last_progress >= 5;
	$node->safe_psql('postgres', "CALL chaos.work('drain', 0, 50, 0)");
}
my $drain_secs = time() - $drain_start;
progress(sprintf('drained in %.1f s; checking the ledgers', $drain_secs));
is($left, '0', sprintf('drained in %.1f s: no job pending or running', $drain_secs));

# the checks below are about real load: the ledgers and the fires are not
# empty (at least 5 enqueues and 5 completions per second of chaos by the
# chaos workers, far below what even a busy machine does)
my ($produced, $completed_chaos, $fails, $ticks, $reaped_planted) = split /\|/, $node->safe_psql('postgres', qq{
	SELECT (SELECT count(*) FROM chaos.produced),
	       (SELECT count(*) FROM chaos.completed WHERE worker <> 'drain'),
	       (SELECT count(*) FROM chaos.fail_log WHERE new_status IS NOT NULL),
	       (SELECT count(*) FROM jobq.job WHERE kind = 'chaos.tick'),
	       (SELECT count(*) FROM jobq.attempt WHERE job_id = $planted AND outcome = 'lease expired')});
cmp_ok($produced, '>=', 5 * $seconds, 'producers committed enough enqueues');
cmp_ok($completed_chaos, '>=', 5 * $seconds, 'the chaos workers completed enough jobs');
cmp_ok($fails, '>=', 1, 'the chaos workers failed jobs');
cmp_ok($ticks, '>=', 1, 'the every-second schedule fired');
cmp_ok($reaped_planted, '>=', 1, 'the planted lease was reaped');

# ---------------------------------------------------------------------------
# proofs

my @checks = (
	[ 'committed enqueues without their job (lost)', q{
		SELECT p.key, p.job_id FROM chaos.produced p
		  LEFT JOIN jobq.job j ON j.job_id = p.job_id AND j.idempotency_key = p.key AND j.kind = 'chaos.work'
		 WHERE j.job_id IS NULL} ],
	[ 'producer ledger rows not created (a unique key found taken)', q{
		SELECT key FROM chaos.produced WHERE NOT created} ],
	[ 'jobs neither completed nor failed (stuck)', q{
		SELECT job_id, status FROM jobq.job WHERE status NOT IN ('completed', 'failed')} ],
	[ 'work jobs that no committed enqueue made', q{
		SELECT j.job_id FROM jobq.job j WHERE j.kind = 'chaos.work'
		   AND NOT EXISTS (SELECT 1 FROM chaos.produced p WHERE p.job_id = j.job_id)} ],
	[ 'jobs completed twice (completion ledger)', q{
		SELECT job_id, count(*) FROM chaos.completed GROUP BY job_id HAVING count(*) > 1} ],
	[ 'completion ledger rows whose job is not completed', q{
		SELECT c.job_id FROM chaos.completed c JOIN jobq.job j USING (job_id) WHERE j.status <> 'completed'} ],
	[ 'completed jobs without a completion ledger row', q{
		SELECT j.job_id FROM jobq.job j WHERE j.status = 'completed'
		   AND NOT EXISTS (SELECT 1 FROM chaos.completed c WHERE c.job_id = j.job_id)} ],
	[ 'completions with a token not the job\'s final lease token (stale lease)', q{
		SELECT c.job_id, c.lease_token, j.lease_token FROM chaos.completed c JOIN jobq.job j USING (job_id)
		 WHERE c.lease_token IS DISTINCT FROM j.lease_token} ],
	[ 'completions whose attempt had ended before (failed, expired)', q{
		SELECT c.job_id FROM chaos.completed c
		  JOIN jobq.attempt a ON a.job_id = c.job_id AND a.attempt = (c.lease_token >> 32)} ],
	[ 'fail calls that succeeded with a token of an attempt not recorded as failed', q{
		SELECT f.job_id FROM chaos.fail_log f WHERE f.new_status IS NOT NULL
		   AND NOT EXISTS (SELECT 1 FROM jobq.attempt a WHERE a.job_id = f.job_id
		                      AND a.attempt = (f.lease_token >> 32) AND a.outcome = 'failed')} ],
	# a fire's key is jobq:schedule:<schedule id>:<fire time in µs>; its
	# job's run_at is the fire time until a retry moves it
	[ 'cron jobs whose key is not their schedule and a whole-second fire time', q{
		SELECT job_id, idempotency_key FROM jobq.job WHERE kind = 'chaos.tick'
		   AND (idempotency_key IS NULL OR idempotency_key !~ '^jobq:schedule:[0-9]+:[0-9]+000000$')} ],
	[ 'cron fires doubled (two jobs for one fire time)', q{
		SELECT split_part(idempotency_key, ':', 4), count(*) FROM jobq.job WHERE kind = 'chaos.tick'
		 GROUP BY 1 HAVING count(*) > 1} ],
	[ 'cron jobs never retried whose run_at is not their fire time', q{
		SELECT job_id, idempotency_key, run_at FROM jobq.job j WHERE kind = 'chaos.tick'
		   AND NOT EXISTS (SELECT 1 FROM jobq.attempt a WHERE a.job_id = j.job_id)
		   AND date_trunc('second', run_at) <> run_at} ],
	[ 'cron keys held by more than one job', q{
		SELECT idempotency_key FROM jobq.job WHERE kind = 'chaos.tick' GROUP BY 1 HAVING count(*) > 1} ],
	[ 'retry_count over max_retries', q{
		SELECT job_id FROM jobq.job WHERE retry_count > max_retries} ],
	[ 'retry_count inconsistent with the attempt history', q{
		SELECT j.job_id, j.status, j.retry_count, h.n FROM jobq.job j,
		       LATERAL (SELECT count(*) AS n FROM jobq.attempt a WHERE a.job_id = j.job_id
		                   AND a.outcome IN ('failed', 'lease expired')) h
		 WHERE j.retry_count <> h.n - CASE WHEN j.status = 'failed' THEN 1 ELSE 0 END} ],
	[ 'claims not matching attempts (attempts < history)', q{
		SELECT job_id FROM jobq.attempt a GROUP BY job_id
		HAVING max(attempt) > (SELECT attempts FROM jobq.job j WHERE j.job_id = a.job_id)} ],
	[ 'rows left in ready / scheduled', q{
		SELECT 'ready', job_id FROM jobq.ready UNION ALL SELECT 'scheduled', job_id FROM jobq.scheduled} ],
	[ 'finished jobs with a lease expiry', q{
		SELECT job_id FROM jobq.job WHERE lease_expires_at IS NOT NULL} ],
);
foreach my $c (@checks)
{
	my ($name, $sql) = @$c;
	my $out = $node->safe_psql('postgres', $sql);
	my @lines = split /\n/, $out;
	is(scalar(@lines), 0,
		"no $name" . (@lines ? ': ' . join('; ', @lines[ 0 .. ($#lines < 9 ? $#lines : 9) ]) : ''));
}

# every server process that died was one we killed, with SIGKILL
my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile);
my @died = $log =~ /\(PID (\d+)\) was terminated by signal (\d+)/g;
my @unexpected;
my %died;
while (my ($pid, $sig) = splice(@died, 0, 2))
{
	$died{$pid} = $sig;
	push @unexpected, "pid $pid signal $sig" if $sig != 9 || !$killed_pids{$pid};
}
# and every process we killed (but the postmaster, whose death nobody logs)
# is logged as killed by signal 9: the kills were real
is(join(', ', map { "$killed_pids{$_} $_" } grep { $killed_pids{$_} ne 'postmaster' && ($died{$_} // 0) != 9 }
		sort keys %killed_pids), '', 'every process killed is logged as terminated by signal 9');
push @unexpected, $1 while $log =~ /^(.*(?:PANIC|TRAP|was terminated by exception).*)$/mg;
is(join(', ', @unexpected), '', 'no server process died but the ones killed with SIGKILL');

ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'a jobq worker serves the database after the crashes');

my $counts = $node->safe_psql('postgres', q{
	SELECT format('jobs %s (work %s, cron %s), produced %s, completed %s, failed %s, completions %s,'
	              ' fail calls %s, stale completes %s, retries %s, reaps %s',
	       count(*), count(*) FILTER (WHERE kind = 'chaos.work'), count(*) FILTER (WHERE kind = 'chaos.tick'),
	       (SELECT count(*) FROM chaos.produced),
	       count(*) FILTER (WHERE status = 'completed'), count(*) FILTER (WHERE status = 'failed'),
	       (SELECT count(*) FROM chaos.completed), (SELECT count(*) FROM chaos.fail_log),
	       (SELECT count(*) FROM chaos.stale), sum(retry_count),
	       (SELECT count(*) FROM jobq.attempt WHERE outcome = 'lease expired'))
	  FROM jobq.job});
diag(sprintf("chaos: %.0f s of load, seed %d, kills: %s", $chaos_secs, $seed,
	join(', ', map { "$_ $kills{$_}" } sort keys %kills)));
diag("chaos: $counts");
diag("chaos: pgbench bursts: " . join('; ', map { "$_ $bursts{$_}" } sort keys %bursts)
	  . sprintf('; drain %.1f s', $drain_secs));

$node->stop;
done_testing();
