# Jobs run inside the database by executor workers: success with exactly-once
# effects, error -> retry -> dead letter, permanent SQLSTATE, snooze, role and
# search_path of the handler, cancel of a running handler, a cron schedule
# targeting a handler kind, and exactly-once effects across a kill -9 of the
# executor in the middle of a job.  fsync is set back on (over
# PostgreSQL::Test::Cluster's fsync = off): the server crash-restarts.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('handlers');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.executors = 2\nrestart_after_crash = on\n"
	  . "fsync = on\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE ROLE app;
	CREATE SCHEMA app AUTHORIZATION app;
	SELECT jobq.grant('default', 'app', 'administer');
	SELECT jobq.configure('default', backoff_base => '50 ms', backoff_cap => '100 ms');
	SET ROLE app;
	CREATE TABLE app.effects (job_id bigint, note text);
	-- records who runs it and with what search_path; sleeps on request,
	-- but only in the first attempt
	CREATE FUNCTION app.work(payload jsonb, job jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		INSERT INTO app.effects VALUES ((job->>'job_id')::bigint, payload->>'note');
		IF (payload->>'sleep') IS NOT NULL AND (job->>'retry_count')::int = 0 THEN
			PERFORM pg_catalog.pg_sleep((payload->>'sleep')::float8);
		END IF;
		RETURN jsonb_build_object('whoami', current_user::text,
		                          'search_path', current_setting('search_path'));
	END $$;
	CREATE FUNCTION app.boom(payload jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN INSERT INTO app.effects VALUES (NULL, 'boom'); RAISE EXCEPTION 'upstream down'; END $$;
	CREATE FUNCTION app.bad(payload jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN RAISE EXCEPTION USING ERRCODE = '23505', MESSAGE = 'duplicate',
		DETAIL = 'Key (n)=(1) already exists.', HINT = 'Use another n.'; END $$;
	CREATE FUNCTION app.later(payload jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN PERFORM jobq.snooze('1 hour'); RETURN '{}'; END $$;
	SELECT jobq.register_handler('work', 'app.work(jsonb,jsonb)');
	SELECT jobq.register_handler('boom', 'app.boom(jsonb)');
	SELECT jobq.register_handler('bad', 'app.bad(jsonb)');
	SELECT jobq.register_handler('later', 'app.later(jsonb)');
});

ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 2 FROM jobq.workers WHERE role = 'executor'}),
	'two executors run while handlers exist');

# success: effects once, result stored, role and search_path of the handler
my $id = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobq.enqueue('work', '{"note": "first"}')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $id"), 'handler job completed');
is($node->safe_psql('postgres', "SELECT count(*) FROM app.effects WHERE job_id = $id"),
	'1', 'its effect happened once');
is($node->safe_psql('postgres',
	"SELECT result->>'whoami', result->>'search_path' FROM jobq.job WHERE job_id = $id"),
	'app|pg_catalog, pg_temp', 'ran as the registering role with a pinned search_path');
my $latency = $node->safe_psql('postgres',
	"SELECT round(extract(epoch FROM claimed_at - created_at) * 1000, 1) FROM jobq.job WHERE job_id = $id");
diag("enqueue -> start of an in-database job: $latency ms");

# error: retried, then the dead letter; its effects rolled back each time
$id = $node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('boom', max_retries => 2)});
ok($node->poll_query_until('postgres',
	"SELECT status = 'failed' FROM jobq.job WHERE job_id = $id"), 'failing handler ends failed');
is($node->safe_psql('postgres',
	"SELECT retry_count, last_error FROM jobq.job WHERE job_id = $id"),
	'2|P0001: upstream down', 'after its retries, with the error');
is($node->safe_psql('postgres', "SELECT count(*) FROM jobq.attempt WHERE job_id = $id"),
	'3', 'three attempts in the history');
is($node->safe_psql('postgres', q{SELECT count(*) FROM app.effects WHERE note = 'boom'}),
	'0', 'no effect of a failed attempt survives');

# permanent SQLSTATE class: failed at once
$id = $node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('bad', max_retries => 5)});
ok($node->poll_query_until('postgres',
	"SELECT status = 'failed' FROM jobq.job WHERE job_id = $id"), 'class 23 error fails');
is($node->safe_psql('postgres', "SELECT retry_count FROM jobq.job WHERE job_id = $id"),
	'0', 'at once, without retries');
like($node->safe_psql('postgres', "SELECT details FROM jobq.attempt WHERE job_id = $id"),
	qr/DETAIL:  Key \(n\)=\(1\) already exists\.\nHINT:  Use another n\.\nCONTEXT:  PL\/pgSQL function app\.bad\(jsonb\) line 2 at RAISE/,
	"the attempt's details keep the error's DETAIL, HINT and CONTEXT");

# snooze: back to pending an hour later, no retry spent
$id = $node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('later')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM jobq.attempt WHERE job_id = $id AND outcome = 'snoozed'"),
	'handler snoozed');
is($node->safe_psql('postgres', "SELECT status, retry_count, run_at > now() + interval '50 minutes'
	FROM jobq.job WHERE job_id = $id"), 'pending|0|t', 'pending, due in an hour, no retry spent');

# safety: a superuser's handler needs allow_superuser; no takeover of a kind
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT jobq.register_handler('root', 'app.bad(jsonb)')});
like($err, qr/would run as a superuser/, 'a superuser registering a handler is refused');
$node->safe_psql('postgres', q{CREATE ROLE other; SELECT jobq.grant('default', 'other', 'administer');
	GRANT USAGE ON SCHEMA app TO other; GRANT EXECUTE ON FUNCTION app.bad(jsonb) TO other});
($ret, $out, $err) = $node->psql('postgres',
	q{SET ROLE other; SELECT jobq.register_handler('work', 'app.bad(jsonb)')});
like($err, qr/belongs to another role/, "another role cannot take over app's kind");

# cancel of a running handler: interrupted, effects rolled back, executor lives
$id = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobq.enqueue('work', '{"note": "long", "sleep": 60}')});
ok($node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'jobq executor: running job $id %'"
	  . " OR (backend_type = 'jobq executor' AND wait_event = 'PgSleep')"),
	'the long handler is running');
my $executors = $node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM jobq.workers WHERE role = 'executor'});
is($node->safe_psql('postgres', "SELECT jobq.cancel($id)"), 't', 'cancel the running job');
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'jobq executor' AND wait_event = 'PgSleep'}),
	'the handler was interrupted');
is($node->safe_psql('postgres', "SELECT status FROM jobq.job WHERE job_id = $id"),
	'cancelled', 'the job stays cancelled');
is($node->safe_psql('postgres', "SELECT count(*) FROM app.effects WHERE job_id = $id"),
	'0', 'the interrupted handler left no effect');
is($node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM jobq.workers WHERE role = 'executor'}),
	$executors, 'the executors kept running');

# a cron schedule targeting a handler kind
$node->safe_psql('postgres',
	q{SELECT jobq.schedule('tick', '* * * * * *', 'work', '{"note": "tick"}')});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) >= 2 FROM jobq.job WHERE kind = 'work' AND payload->>'note' = 'tick' AND status = 'completed'}),
	'scheduled handler jobs run');
$node->safe_psql('postgres', q{SELECT jobq.unschedule('tick')});

# kill -9 of the executor mid-job: the crash-restart rolls the attempt back,
# and the job runs again at once, not after its lease (10 minutes): the
# first round after the restart ends the leases of executors gone with the
# server; its effect exists once
$node->safe_psql('postgres', q{SELECT jobq.configure('default', lease => '10 min')});
$id = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobq.enqueue('work', '{"note": "crash", "sleep": 60}')});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobq executor' AND wait_event = 'PgSleep'}),
	'the job to be killed is running');
my $pid = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'jobq executor' AND wait_event = 'PgSleep'});
my $log_at = -s $node->logfile;
kill 'KILL', $pid;
# the crash-restart ends before polling: a psql started while the server is
# in recovery exits before reading its query, and poll_query_until dies on
# the broken pipe of writing it (seen on a busy Debian 13)
$node->wait_for_log(
	qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
	$log_at);
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $id"),
	'after the crash the job ran again and completed, long before its lease would have expired');
is($node->safe_psql('postgres', "SELECT count(*) FROM app.effects WHERE job_id = $id"),
	'1', 'its effect exists exactly once');
is($node->safe_psql('postgres', "SELECT retry_count FROM jobq.job WHERE job_id = $id"),
	'1', 'the killed attempt counted as a retry (its lease ended)');
like(slurp_file($node->logfile, $log_at),
	qr/job $id was running in jobq executor $pid, which is gone with the server's restart; its lease ends now/,
	'the log names the job and the executor gone');

# the same across a fast shutdown (a switchover's): the executor's claim
# outlives it; the server that comes back runs the job again at once
# (an application's worker's claim in the same queue keeps its lease)
$id = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobq.enqueue('work', '{"note": "stop", "sleep": 60}')});
my $app_job = $node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('external')});
my $app_lease = $node->safe_psql('postgres',
	q{SELECT lease_token || ' ' || lease_expires_at FROM jobq.claim('default', 'app-1', 1, '10 min', ARRAY['external'])});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'jobq executor' AND wait_event = 'PgSleep'}),
	'the job to be stopped is running');
$node->restart;
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $id"),
	'after the restart the job ran again and completed, long before its lease would have expired');
is($node->safe_psql('postgres', "SELECT count(*) || ' ' || max(retry_count) FROM app.effects e JOIN jobq.job j USING (job_id) WHERE job_id = $id"),
	'1 1', 'its effect exists exactly once; the stopped attempt spent a retry');
is($node->safe_psql('postgres',
	"SELECT status || ' ' || lease_token || ' ' || lease_expires_at FROM jobq.job WHERE job_id = $app_job"),
	"running $app_lease", "an application worker's job keeps its lease across the restart");

# a workflow in the database: a fan-in callback's job argument carries its
# parents' outcomes and results (parent_results, as the handler's role sees it)
$node->safe_psql('postgres', q{
	SET ROLE app;
	CREATE FUNCTION app.collect(payload jsonb, job jsonb) RETURNS jsonb LANGUAGE sql
		AS $$ SELECT pg_catalog.jsonb_build_object('parents', job->'parents') $$;
	SELECT jobq.register_handler('collect', 'app.collect(jsonb,jsonb)');
});
my $parents = $node->safe_psql('postgres',
	q{SELECT string_agg(job_id::text, ',') FROM jobq.enqueue_many('work', ARRAY['{"note": "p1"}', '{"note": "p2"}']::jsonb[])});
my $callback = $node->safe_psql('postgres',
	"SELECT job_id FROM jobq.enqueue('collect', depends_on => ARRAY[$parents], on_parent_failure => 'run')");
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $callback"),
	'the callback ran after its parents');
is($node->safe_psql('postgres', qq{
	SELECT string_agg((e->>'job_id') || ':' || (e->>'status') || ':' || (e->'result'->>'whoami'), ','
	                  ORDER BY (e->>'job_id')::bigint)
	  FROM jobq.job j, jsonb_array_elements(j.result->'parents') e WHERE j.job_id = $callback}),
	join(',', map { "$_:completed:app" } split(/,/, $parents)),
	"the handler's job argument lists its parents with their results");

# a handler that finishes its own job itself (complete, then cancel) is
# refused, so the job fails by that error at once (and is tried again),
# instead of staying running with nobody's lease until the lease expired
$node->safe_psql('postgres', q{
	SET ROLE app;
	CREATE FUNCTION app.self(payload jsonb, job jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		IF payload->>'how' = 'complete' THEN
			PERFORM jobq.complete((job->>'job_id')::bigint, (job->>'lease_token')::bigint, '{}');
		ELSE
			PERFORM jobq.cancel((job->>'job_id')::bigint);
		END IF;
		RETURN '{}';
	END $$;
	SELECT jobq.register_handler('self', 'app.self(jsonb,jsonb)');
});
for my $how ('complete', 'cancel')
{
	my $self = $node->safe_psql('postgres',
		qq{SELECT job_id FROM jobq.enqueue('self', '{"how": "$how"}', max_retries => 0)});
	ok($node->poll_query_until('postgres', "SELECT status = 'failed' FROM jobq.job WHERE job_id = $self"),
		"a handler calling jobq.$how on its own job fails it at once");
	like($node->safe_psql('postgres', "SELECT last_error FROM jobq.jobs WHERE job_id = $self"),
		qr/a handler cannot call jobq\.$how on its own job/, "with an error that says why ($how)");
}

# two limited queues whose rows a session holds (an open jobq.configure):
# the executors' claims there wait 100 ms at most and fail, and each queue's
# failure is logged once (and once more when it works again), not once a
# round: the executor remembered the last queue only, and two queues in
# turn logged every round (a review: 108 lines in 30 s); the jobs run once
# the rows are let go
my $held_from = -s $node->logfile;
$node->safe_psql('postgres', q{
	SELECT jobq.configure(q, max_concurrency => 5) FROM unnest(ARRAY['hq1', 'hq2']) q;
});
$node->safe_psql('postgres', q{
	SELECT jobq.grant(q, 'app', 'administer') FROM unnest(ARRAY['hq1', 'hq2']) q;
	SET ROLE app;
	SELECT jobq.register_handler('k_' || q, 'app.work(jsonb,jsonb)', q) FROM unnest(ARRAY['hq1', 'hq2']) q;
});
my %qhold;
foreach my $q ('hq1', 'hq2')
{
	$qhold{$q} = $node->background_psql('postgres', on_error_stop => 1);
	$qhold{$q}->query_safe('BEGIN');
	$qhold{$q}->query_safe("SELECT jobq.configure('$q', max_concurrency => 6)");
}
$node->safe_psql('postgres', q{
	SELECT count(*) FROM unnest(ARRAY['hq1', 'hq2']) q,
	  LATERAL jobq.enqueue_many('k_' || q, array_fill('{"note": "held"}'::jsonb, ARRAY[3]), queue => q)});
sleep 5;
$_->query_safe('ROLLBACK') foreach values %qhold;
$_->quit foreach values %qhold;
ok($node->poll_query_until('postgres', q{
		SELECT count(*) = 6 FROM jobq.jobs WHERE queue IN ('hq1', 'hq2') AND status = 'completed'}),
	'the held queues\' jobs run once the rows are let go');
my $held_log = slurp_file($node->logfile, $held_from);
foreach my $q ('hq1', 'hq2')
{
	my $n = () = $held_log =~ /claiming from queue "$q"(?: for its handlers)? failed/g;
	ok($n >= 1 && $n <= 2, "$q: its failing claims are logged once per executor ($n lines in 5 s)");
}

# DROP EXTENSION while a handler runs: it waits for the job's step to end
# (its completion included), and neither is a deadlock's victim.  The
# executor's steps took no lock on the extension: the drop locked jobq's
# tables one by one as it found them, waited for the handler check's, and
# the completion then waited for the drop's (deadlock detected, every time
# here before the fix)
my $log_from = -s $node->logfile;
my $slow = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobq.enqueue('work', '{"note": "slow", "sleep": 2}')});
ok($node->poll_query_until('postgres', qq{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'jobq executor' AND query LIKE 'jobq executor: running job $slow %'}),
	'a handler is running');
is($node->psql('postgres', 'DROP EXTENSION jobq CASCADE'), 0,
	'DROP EXTENSION during a handler succeeds');
is($node->safe_psql('postgres', q{SELECT count(*) FROM app.effects WHERE note = 'slow'}),
	'1', "the handler's effects committed before the drop");
unlike(slurp_file($node->logfile, $log_from), qr/deadlock detected/,
	'no deadlock between the drop and the executor');
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type IN ('jobq executor', 'jobq worker')}),
	'the executors and the worker leave the database');

$node->stop;
done_testing();
