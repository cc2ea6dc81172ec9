# Two tenants' handlers sharing executors (issue 15 items 1, 2, 7, 8).
#
# carol administers queue qc, dave administers queue qd; each registers
# handlers in their own queue.  The test checks that
#   - no session state passes from carol's job to dave's job in the same
#     executor process (temporary tables and their triggers, GUCs, prepared
#     statements, advisory locks; LISTEN is refused in a background process
#     by PostgreSQL itself);
#   - inside a handler, jobq's capability checks answer for the handler's
#     role exactly as for that role connected directly;
#   - a handler that swallows jobq.cancel's interrupt loses its executor,
#     and the other tenant's job runs;
#   - one tenant's long handlers, even in several queues, never hold every
#     executor (the executors are shared per role);
#   - a handler result over jobq.max_result_size fails that job, and the
#     executor goes on;
#   - a queue whose stored lease cannot be computed does not stop the
#     executor from serving other queues;
#   - DROP DATABASE succeeds while executors run there.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('tenants');
$node->init;
# one executor: carol's and dave's jobs must run in the same process
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 200ms\njobq.executors = 1\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	CREATE ROLE carol;
	CREATE ROLE dave;
	CREATE SCHEMA carol AUTHORIZATION carol;
	CREATE SCHEMA dave AUTHORIZATION dave;
	SELECT jobq.grant('qc', 'carol', 'administer');
	SELECT jobq.grant('qc2', 'carol', 'administer');
	SELECT jobq.grant('qd', 'dave', 'administer');
});

# carol's trojan: temp tables granted to everyone, a trigger that copies
# whatever the inserting role can read, and every other kind of session
# state a handler can leave behind
$node->safe_psql('postgres', q{
	SET ROLE carol;
	CREATE FUNCTION carol.plant(payload jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		CREATE TEMP TABLE outbox (msg text);
		CREATE TEMP TABLE loot (data text);
		GRANT ALL ON pg_temp.outbox, pg_temp.loot TO PUBLIC;
		CREATE FUNCTION pg_temp.steal() RETURNS trigger LANGUAGE plpgsql AS $f$
		BEGIN
			INSERT INTO pg_temp.loot SELECT secret FROM dave.secrets;
			RETURN NEW;
		END $f$;
		CREATE TRIGGER steal BEFORE INSERT ON pg_temp.outbox
			FOR EACH ROW EXECUTE FUNCTION pg_temp.steal();
		PERFORM pg_catalog.pg_advisory_lock(4242);
		PERFORM pg_catalog.set_config('carol.mark', 'planted', false);
		EXECUTE 'PREPARE carol_stmt AS SELECT 1';
		RETURN jsonb_build_object('executor', pg_catalog.pg_backend_pid());
	END $$;
	SELECT jobq.register_handler('c.plant', 'carol.plant(jsonb)', 'qc');
});
$node->safe_psql('postgres', q{
	SET ROLE dave;
	CREATE TABLE dave.secrets (secret text);
	INSERT INTO dave.secrets VALUES ('dave-only');
	CREATE TABLE dave.outbox (msg text);
	CREATE FUNCTION dave.send(payload jsonb) RETURNS jsonb LANGUAGE plpgsql
	SET search_path = dave AS $$
	BEGIN
		INSERT INTO outbox VALUES (payload->>'msg');
		RETURN jsonb_build_object(
			'executor', pg_catalog.pg_backend_pid(),
			'temp_relations', (SELECT count(*) FROM pg_catalog.pg_class
			                   WHERE relnamespace = pg_catalog.pg_my_temp_schema()),
			'advisory_locks', (SELECT count(*) FROM pg_catalog.pg_locks
			                   WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()),
			'guc', coalesce(pg_catalog.current_setting('carol.mark', true), ''),
			'prepared', (SELECT count(*) FROM pg_catalog.pg_prepared_statements));
	END $$;
	SELECT jobq.register_handler('d.send', 'dave.send(jsonb)', 'qd');
});

ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM jobq.workers WHERE role = 'executor'}),
	'one executor runs');

# --- 1. no state passes from carol's job to dave's ------------------------
my $c1 = $node->safe_psql('postgres',
	q{SET ROLE carol; SELECT job_id FROM jobq.enqueue('c.plant', queue => 'qc')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $c1"), "carol's job completed");
my $d1 = $node->safe_psql('postgres',
	q{SET ROLE dave; SELECT job_id FROM jobq.enqueue('d.send', '{"msg": "hello"}', queue => 'qd')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $d1"), "dave's job completed");
is($node->safe_psql('postgres',
	"SELECT (SELECT result->>'executor' FROM jobq.job WHERE job_id = $c1)
	      = (SELECT result->>'executor' FROM jobq.job WHERE job_id = $d1)"),
	't', 'both jobs ran in the same executor process');
is($node->safe_psql('postgres', 'SELECT count(*) FROM dave.outbox'),
	'1', "dave's insert went into dave.outbox, not into carol's temporary table");
is($node->safe_psql('postgres', qq{
	SELECT result - 'executor' FROM jobq.job WHERE job_id = $d1}),
	'{"guc": "", "prepared": 0, "advisory_locks": 0, "temp_relations": 0}',
	"dave's handler sees none of carol's session state");
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM pg_catalog.pg_locks l JOIN jobq.workers w ON w.pid = l.pid
	   WHERE l.locktype = 'advisory'}),
	'0', 'the executor holds no advisory lock after the jobs');

# --- 2. capabilities inside a handler are the handler's role's -------------
$node->safe_psql('postgres', q{
	SET ROLE carol;
	SELECT jobq.enqueue('c.secret', '{"card": "4111"}', queue => 'qc', idempotency_key => 'k1');
});
$node->safe_psql('postgres', q{
	SET ROLE dave;
	-- what dave can learn of other queues, as one json value
	CREATE FUNCTION dave.probe() RETURNS jsonb LANGUAGE plpgsql AS $$
	DECLARE
		health text;
	BEGIN
		BEGIN
			SELECT count(*)::text INTO health FROM jobq.health();
		EXCEPTION WHEN insufficient_privilege THEN
			health := 'denied';
		END;
		RETURN jsonb_build_object(
			'by_key', (SELECT count(*) FROM jobq.job_by_key('c.secret', 'k1')),
			'jobs_qc', (SELECT count(*) FROM jobq.jobs WHERE queue = 'qc'),
			'kinds', (SELECT coalesce(jsonb_agg(DISTINCT kind ORDER BY kind), '[]')
			            FROM jobq.kind_stats('1 day')),
			'health', health,
			'may_work_qc', jobq.may('qc', 'work'),
			'may_admin_all', jobq.may('*', 'administer'),
			'queue_stats', (SELECT coalesce(jsonb_agg(queue ORDER BY queue), '[]')
			                  FROM jobq.queue_stats));
	END $$;
	CREATE FUNCTION dave.peek(payload jsonb) RETURNS jsonb LANGUAGE sql
		AS $$ SELECT dave.probe() $$;
	SELECT jobq.register_handler('d.peek', 'dave.peek(jsonb)', 'qd');
});
my $direct = $node->safe_psql('postgres', 'SET ROLE dave; SELECT dave.probe()');
like($direct, qr/"by_key": 0.*"health": "denied"/,
	"connected as dave, carol's keyed job is invisible and health() is refused");
my $d2 = $node->safe_psql('postgres',
	q{SET ROLE dave; SELECT job_id FROM jobq.enqueue('d.peek', queue => 'qd')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $d2"), "dave's probe job completed");
is($node->safe_psql('postgres', "SELECT result FROM jobq.job WHERE job_id = $d2"),
	$direct, 'inside his handler dave sees exactly what he sees connected');

# --- 3. a handler that swallows cancel loses its executor -----------------
$node->safe_psql('postgres', q{
	SET ROLE carol;
	SELECT jobq.configure('qc', lease => '30 days');
	CREATE FUNCTION carol.stubborn(payload jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		LOOP
			BEGIN
				PERFORM pg_catalog.pg_sleep(0.1);
			EXCEPTION WHEN query_canceled THEN
				NULL;
			END;
		END LOOP;
	END $$;
	SELECT jobq.register_handler('c.stubborn', 'carol.stubborn(jsonb)', 'qc');
});
my $c3 = $node->safe_psql('postgres',
	q{SET ROLE carol; SELECT job_id FROM jobq.enqueue('c.stubborn', queue => 'qc')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'running' FROM jobq.job WHERE job_id = $c3"), 'the stubborn handler runs');
my $pid_before = $node->safe_psql('postgres',
	q{SELECT pid FROM jobq.workers WHERE role = 'executor'});
is($node->safe_psql('postgres', "SET ROLE carol; SELECT jobq.cancel($c3)"), 't', 'carol cancels it');
my $d3 = $node->safe_psql('postgres',
	q{SET ROLE dave; SELECT job_id FROM jobq.enqueue('d.send', '{"msg": "after"}', queue => 'qd')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $d3"),
	"dave's job runs although carol's handler swallowed the cancel");
isnt($node->safe_psql('postgres', q{SELECT pid FROM jobq.workers WHERE role = 'executor'}),
	$pid_before, 'the stubborn executor was replaced');
is($node->safe_psql('postgres', "SELECT status FROM jobq.job WHERE job_id = $c3"),
	'cancelled', 'the cancelled job stays cancelled');
ok($node->log_contains(qr/terminating executor .* was cancelled and the handler did not stop/),
	'the termination is logged');

# --- 4. one tenant's long handlers never hold every executor ---------------
$node->append_conf('postgresql.conf', "jobq.executors = 2\n");
$node->reload;
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 2 FROM jobq.workers WHERE role = 'executor'}),
	'two executors after the reload');
$node->safe_psql('postgres', q{
	SET ROLE carol;
	CREATE FUNCTION carol.hold(payload jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.pg_advisory_xact_lock_shared(777);
		RETURN '{}';
	END $$;
	SELECT jobq.register_handler('c.hold', 'carol.hold(jsonb)', 'qc');
	SELECT jobq.register_handler('c.hold2', 'carol.hold(jsonb)', 'qc2');
});
my $gate = $node->background_psql('postgres');
$gate->query_safe('SELECT pg_catalog.pg_advisory_lock(777)');
# held jobs in both of carol's queues: a share per queue would give her both
# executors
$node->safe_psql('postgres', q{
	SET ROLE carol;
	SELECT jobq.enqueue_many('c.hold', ARRAY['{}', '{}']::jsonb[], queue => 'qc');
	SELECT jobq.enqueue_many('c.hold2', ARRAY['{}']::jsonb[], queue => 'qc2');
});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM jobq.jobs WHERE kind LIKE 'c.hold%' AND status = 'running'}),
	"one of carol's held jobs runs");
my $d4 = $node->safe_psql('postgres',
	q{SET ROLE dave; SELECT job_id FROM jobq.enqueue('d.send', '{"msg": "fair"}', queue => 'qd')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $d4"),
	"dave's job runs while carol's handlers wait");
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM jobq.jobs WHERE kind LIKE 'c.hold%' AND status = 'running'}),
	'1', 'carol held one executor, not both, with jobs in two queues');
$gate->query_safe('SELECT pg_catalog.pg_advisory_unlock(777)');
$gate->quit;
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 3 FROM jobq.jobs WHERE kind LIKE 'c.hold%' AND status = 'completed'}),
	"carol's jobs complete once released");

# --- 5. a result over jobq.max_result_size fails the job -------------------
$node->safe_psql('postgres', q{
	SET ROLE dave;
	CREATE FUNCTION dave.big(payload jsonb) RETURNS jsonb LANGUAGE sql AS $$
		SELECT jsonb_build_object('blob', repeat('x', 2 * 1024 * 1024), 'executor', pg_catalog.pg_backend_pid())
	$$;
	SELECT jobq.register_handler('d.big', 'dave.big(jsonb)', 'qd');
});
my $executors = $node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM jobq.workers WHERE role = 'executor'});
my $d5 = $node->safe_psql('postgres',
	q{SET ROLE dave; SELECT job_id FROM jobq.enqueue('d.big', queue => 'qd', max_retries => 3)});
ok($node->poll_query_until('postgres',
	"SELECT status = 'failed' FROM jobq.job WHERE job_id = $d5"),
	'a job whose result is too large fails');
like($node->safe_psql('postgres', "SELECT last_error FROM jobq.job WHERE job_id = $d5"),
	qr/^54000: result is too large/, 'with the size error, as a permanent failure');
is($node->safe_psql('postgres', "SELECT retry_count FROM jobq.job WHERE job_id = $d5"),
	'0', 'no retry spent on it');
my $d6 = $node->safe_psql('postgres',
	q{SET ROLE dave; SELECT job_id FROM jobq.enqueue('d.send', '{"msg": "next"}', queue => 'qd')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $d6"), 'the next job runs');
is($node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM jobq.workers WHERE role = 'executor'}),
	$executors, 'no executor exited');

# --- 6. a queue whose lease cannot be computed does not stop the executors -
# planted as the superuser, past any check of configure()
$node->safe_psql('postgres', q{UPDATE jobq.queue SET lease = '300000 years' WHERE name = 'qc'});
$node->safe_psql('postgres', q{
	SET ROLE carol; SELECT jobq.enqueue('c.plant', queue => 'qc');
});
my $d7 = $node->safe_psql('postgres',
	q{SET ROLE dave; SELECT job_id FROM jobq.enqueue('d.send', '{"msg": "still"}', queue => 'qd')});
ok($node->poll_query_until('postgres',
	"SELECT status = 'completed' FROM jobq.job WHERE job_id = $d7"),
	"dave's queue is served while carol's cannot be claimed");
is($node->safe_psql('postgres',
	q{SELECT string_agg(pid::text, ',' ORDER BY pid) FROM jobq.workers WHERE role = 'executor'}),
	$executors, 'no executor exited over the bad queue');
$node->safe_psql('postgres', q{UPDATE jobq.queue SET lease = '5 minutes' WHERE name = 'qc'});

# --- 7. DROP DATABASE while executors run there ------------------------------
$node->safe_psql('postgres', q{CREATE DATABASE tenantdb});
$node->safe_psql('tenantdb', q{
	CREATE EXTENSION jobq;
	CREATE FUNCTION public.noop(payload jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;
	CREATE ROLE tenant_owner;
	SELECT jobq.grant('default', 'tenant_owner', 'administer');
	GRANT EXECUTE ON FUNCTION public.noop(jsonb) TO tenant_owner;
	SET ROLE tenant_owner;
	SELECT jobq.register_handler('noop', 'public.noop(jsonb)');
});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) >= 1 FROM pg_catalog.pg_stat_activity a JOIN pg_catalog.pg_database d ON d.oid = a.datid
	   WHERE d.datname = 'tenantdb' AND a.backend_type = 'jobq executor'}),
	'executors run in tenantdb');
my ($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE tenantdb');
is($ret, 0, 'DROP DATABASE succeeds while the database has executors');
is($stderr, '', 'with no error') or diag($stderr);

$node->stop;
done_testing();
