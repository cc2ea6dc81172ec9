# pg_dump / pg_restore round trip: a database with jobs in every state,
# queues with settings and limits, a paused queue, schedules, a handler,
# grants and idempotency keys (one outliving its purged job) is dumped and
# restored into a new database of the same server; jobq's tables must come
# back the same (roles compared by name), and the restored database must
# work: claims, completes, idempotency keys, fresh job ids, its background
# worker, its schedules, its grants, its handler (a job of the handled kind
# enqueued there is run by the executor: the handler's effect is there and
# the job completed).
#
# Then the same dump is restored into another cluster whose roles have other
# OIDs: jobq.permission and jobq.handler keep role OIDs, so this part shows
# whether grants and handlers survive (roles are stored as regrole, so they
# follow role names, not OIDs), and whether the handler still runs there.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# two databases with handlers: each has its worker and two executors
my $conf = "shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\n"
  . "jobq.database_recheck_interval = 1s\nmax_worker_processes = 16\n";
my $node = PostgreSQL::Test::Cluster->new('dump');
$node->init;
$node->append_conf('postgresql.conf', $conf);
$node->start;

$node->safe_psql('postgres', q{
	CREATE ROLE r_prod LOGIN;
	CREATE ROLE r_work LOGIN;
	CREATE DATABASE src;
});

$node->safe_psql('src', q{
	CREATE EXTENSION jobq;
	CREATE SCHEMA app AUTHORIZATION r_work;
	SELECT jobq.configure('q1', max_retries => 7, lease => '10 minutes', backoff_base => '2 s',
	                      backoff_cap => '5 min', backoff_jitter => 0.25, retention_completed => '2 days',
	                      retention_failed => '60 days', max_concurrency => 3, max_per_key => 1,
	                      rate_limit => 100, rate_period => '1 minute', breaker_threshold => 9);
	SELECT jobq.configure('q2', max_retries => 0);
	SELECT jobq.pause('q2');
	SELECT jobq.grant('q1', 'r_prod', 'enqueue');
	SELECT jobq.grant('*', 'r_work', 'work');
	SELECT jobq.grant('q1', 'r_work', 'administer');
	-- jobs in every state
	SELECT * FROM jobq.enqueue('k.pending', '{"n": 1}', 'q1', priority => 20, idempotency_key => 'p1');
	SELECT * FROM jobq.enqueue('k.pending', '{"n": 2}', 'q1', concurrency_key => 'tenant-1');
	SELECT * FROM jobq.enqueue('k.delayed', '{"n": 3}', 'q1', run_at => now() + interval '1 day',
	                           idempotency_key => 'd1');
	SELECT * FROM jobq.enqueue('k.running', '{"n": 4}', 'q1', idempotency_key => 'r1');
	SELECT * FROM jobq.enqueue('k.done', '{"n": 5}', 'q1', idempotency_key => 'c1');
	SELECT * FROM jobq.enqueue('k.failed', '{"n": 6}', 'q2', idempotency_key => 'f1');
	SELECT * FROM jobq.enqueue('k.cancelled', '{"n": 7}', 'q1');
	SELECT * FROM jobq.enqueue('k.purged', '{"n": 8}', 'q3', idempotency_key => 'gone');
	SELECT * FROM jobq.enqueue_many('k.many', ARRAY['{"a": 1}', '{"a": 2}']::jsonb[], 'q2',
	                                idempotency_keys => ARRAY['m1', 'm2']);
	SELECT jobq.resume('q2');
	CREATE TEMP TABLE c AS SELECT * FROM jobq.claim('q1', 'w1', batch => 10, lease => '1 hour',
	                                               kinds => ARRAY['k.running', 'k.done']);
	INSERT INTO c SELECT * FROM jobq.claim('q3');
	SELECT jobq.checkpoint(job_id, lease_token, '{"step": 2}') FROM c WHERE kind = 'k.running';
	-- a job blocked on the running one, and one whose parent already completed
	SELECT * FROM jobq.enqueue('k.child', '{"n": 9}', 'q1',
	                           depends_on => ARRAY(SELECT job_id FROM c WHERE kind = 'k.running'));
	SELECT jobq.complete(job_id, lease_token, '{"ok": 1}') FROM c WHERE kind IN ('k.done', 'k.purged');
	SELECT * FROM jobq.enqueue('k.after', '{"n": 10}', 'q1', run_at => now() + interval '1 day',
	                           depends_on => ARRAY(SELECT job_id FROM c WHERE kind = 'k.done'));
	SELECT jobq.purge('q3', 'completed');
	SELECT jobq.fail(job_id, lease_token, 'boom') FROM jobq.claim('q2', kinds => ARRAY['k.failed']);
	SELECT jobq.cancel(job_id) FROM jobq.job WHERE kind = 'k.cancelled';
	SELECT jobq.pause('q2');
	-- schedules (paused: nothing changes while the tables are compared;
	-- paused in the transaction that makes it, or the worker may fire it)
	BEGIN;
	SELECT jobq.schedule('tick', '* * * * * *', 'k.tick', '{"from": "cron"}', 'q1', misfire => 'skip');
	SELECT jobq.pause_schedule('tick');
	COMMIT;
	SELECT jobq.schedule('nightly', '0 2 * * *', 'k.nightly', queue => 'q2', timezone => 'Europe/Paris',
	                     misfire => 'run_all', priority => 30);
	SET ROLE r_work;
	CREATE TABLE app.effects (job_id bigint, payload jsonb);
	CREATE FUNCTION app.handle(payload jsonb, job jsonb) RETURNS jsonb LANGUAGE sql AS $$
		INSERT INTO app.effects VALUES ((job->>'job_id')::bigint, payload);
		SELECT jsonb_build_object('ran_as', current_user::text) $$;
	SELECT jobq.register_handler('k.handled', 'app.handle(jsonb,jsonb)', 'q1');
});

is($node->safe_psql('src', q{
	SELECT string_agg(status || ':' || n, ',' ORDER BY status)
	  FROM (SELECT status, count(*) AS n FROM jobq.job GROUP BY status) s}),
	'blocked:1,cancelled:1,completed:1,failed:1,pending:6,running:1',
	'the source database has jobs in every state');

# jobq's tables, as text, roles by name, in a stable order
my %dump_queries = (
	job => 'SELECT * FROM jobq.job ORDER BY job_id',
	queue => 'SELECT * FROM jobq.queue ORDER BY name',
	ready => 'SELECT * FROM jobq.ready ORDER BY job_id',
	scheduled => 'SELECT * FROM jobq.scheduled ORDER BY job_id',
	attempt => 'SELECT * FROM jobq.attempt ORDER BY job_id, attempt',
	schedule => 'SELECT * FROM jobq.schedule ORDER BY schedule_id',
	idempotency_key => 'SELECT * FROM jobq.idempotency_key ORDER BY kind, key',
	permission => q{SELECT queue, pg_get_userbyid(role), capability, pg_get_userbyid(granted_by), granted_at
	                  FROM jobq.permission ORDER BY 1, 2, 3},
	handler => q{SELECT kind, handler::text, queue, pg_get_userbyid(run_as), allow_superuser, created_at
	               FROM jobq.handler ORDER BY kind},
	job_id_seq => 'SELECT last_value, is_called FROM jobq.job_id_seq',
	dependency => 'SELECT * FROM jobq.dependency ORDER BY parent_id, child_id',
	dependent => 'SELECT * FROM jobq.dependent ORDER BY job_id',
);
sub contents
{
	my ($n, $db) = @_;
	my %c;
	$c{$_} = $n->safe_psql($db, $dump_queries{$_}) for keys %dump_queries;
	return \%c;
}
my $before = contents($node, 'src');
ok($before->{idempotency_key} =~ /\|gone\|\d+\|\d/, 'a key outlives its purged job');

# --- dump, restore into a new database of the same server ----------------

my $dumpfile = $node->basedir . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dumpfile ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
my ($stdout, $stderr);
my $restored = IPC::Run::run([ 'pg_restore', '-d', $node->connstr('dst'), $dumpfile ],
	'>', \$stdout, '2>', \$stderr);
ok($restored, 'pg_restore') or diag($stderr);
is($stderr, '', 'pg_restore says nothing');

my $after = contents($node, 'dst');
is($after->{$_}, $before->{$_}, "jobq.$_ is restored as it was") for sort keys %dump_queries;

# --- the restored database works ------------------------------------------

is($node->safe_psql('dst', q{
	SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('q1', kinds => ARRAY['k.pending'])}),
	't', 'a restored pending job is claimed and completed');
is($node->safe_psql('dst', q{
	SELECT jobq.complete(j.job_id, j.lease_token)
	  FROM jobq.job j WHERE kind = 'k.running'}),
	't', 'a restored running job is completed with its lease token');
is($node->safe_psql('dst', q{
	SELECT string_agg(kind || ':' || status, ',' ORDER BY kind) FROM jobq.jobs WHERE kind IN ('k.child', 'k.after')}),
	'k.after:pending,k.child:pending', 'its restored dependent is unblocked');
is($node->safe_psql('dst', q{
	SELECT created, job_id = (SELECT job_id FROM jobq.job WHERE idempotency_key = 'p1')
	  FROM jobq.enqueue('k.pending', '{"n": 1}', 'q1', idempotency_key => 'p1')}),
	'f|t', 'an old idempotency key returns the old job');
is($node->safe_psql('dst', q{
	SELECT created FROM jobq.enqueue('k.purged', '{}', 'q1', idempotency_key => 'gone')}),
	'f', 'the key of a purged job is still reserved');
my $max_src = $node->safe_psql('src', 'SELECT max(job_id) FROM jobq.job');
my $max_key = $node->safe_psql('src', 'SELECT max(job_id) FROM jobq.idempotency_key');
my $new = $node->safe_psql('dst', q{SELECT job_id FROM jobq.enqueue('k.new', '{}', 'q1')});
cmp_ok($new, '>', ($max_src > $max_key ? $max_src : $max_key),
	'a new enqueue gets a fresh job id (the sequence was restored)');
ok($node->poll_query_until('dst', q{
	SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'dst'}),
	'a background worker serves the restored database');

# The restored handler runs: a job of its kind enqueued in the restored
# database is run by an executor there, as the handler's role.
sub handler_runs
{
	my ($n, $where) = @_;
	my $job = $n->safe_psql('dst', q{SELECT job_id FROM jobq.enqueue('k.handled', '{"n": 42}', 'q1')});
	ok($n->poll_query_until('dst', qq{SELECT status IN ('completed', 'failed') FROM jobq.job WHERE job_id = $job}),
		"$where: the job of the handled kind is finished by an executor");
	is($n->safe_psql('dst', "SELECT status, result, last_error FROM jobq.job WHERE job_id = $job"),
		'completed|{"ran_as": "r_work"}|', "$where: it completed, run as the handler's role");
	is($n->safe_psql('dst', "SELECT count(*), min(payload->>'n') FROM app.effects WHERE job_id = $job"),
		'1|42', "$where: the handler's effect is there, once");
}
handler_runs($node, 'restored database');

$node->safe_psql('dst', q{SELECT jobq.resume_schedule('tick')});
ok($node->poll_query_until('dst', q{SELECT count(*) >= 2 FROM jobq.job WHERE kind = 'k.tick'}),
	'the restored schedule fires');
{
	my ($r, $o, $e) = $node->psql('dst', q{SELECT jobq.schedule('new', '0 3 * * *', 'k.x', queue => 'q1')});
	like($o, qr/^\d+$/, 'a new schedule can be created (the schedule id sequence does not collide)')
	  or diag($e);
}
is($node->safe_psql('dst', q{SELECT created FROM jobq.enqueue('k.prod', '{}', 'q1')},
		extra_params => [ '-U', 'r_prod' ]),
	't', 'a restored grant works: r_prod enqueues into q1');
my ($ret, $out, $err) = $node->psql('dst', q{SELECT jobq.enqueue('k.prod', '{}', 'q2')},
	extra_params => [ '-U', 'r_prod' ]);
like($err, qr/permission denied to enqueue into queue "q2"/, 'and nothing more: not into q2');
is($node->safe_psql('dst', q{SELECT count(*) FROM jobq.claim('q2')}, extra_params => [ '-U', 'r_work' ]),
	'0', 'a restored grant on * works: r_work claims from q2 (paused: nothing)');
is($node->safe_psql('dst', q{SELECT count(*) FILTER (WHERE queue <> 'q1'), count(*) > 0 FROM jobq.jobs},
		extra_params => [ '-U', 'r_prod' ]),
	'0|t', 'the restored views filter by the restored grants: r_prod sees q1\'s jobs only');
is($node->safe_psql('dst', q{SELECT count(DISTINCT queue) FROM jobq.jobs}), '2',
	'(the superuser sees two queues\' jobs)');

# --- restore into another cluster, roles created with other OIDs ----------

my $other = PostgreSQL::Test::Cluster->new('other');
$other->init;
$other->append_conf('postgresql.conf', $conf);
$other->start;
$other->safe_psql('postgres', q{
	CREATE ROLE filler1; CREATE ROLE filler2; CREATE ROLE filler3;
	CREATE ROLE r_work LOGIN;
	CREATE ROLE r_prod LOGIN;
	CREATE DATABASE dst;
});
isnt($other->safe_psql('postgres', q{SELECT 'r_prod'::regrole::oid}),
	$node->safe_psql('postgres', q{SELECT 'r_prod'::regrole::oid}),
	'the other cluster gives the roles other OIDs');
IPC::Run::run([ 'pg_restore', '-d', $other->connstr('dst'), $dumpfile ], '>', \$stdout, '2>', \$stderr);
my $moved = contents($other, 'dst');
is($moved->{$_}, $before->{$_}, "other cluster: jobq.$_ is restored as it was")
  for qw(job queue schedule idempotency_key job_id_seq);
{
	is($moved->{permission}, $before->{permission}, 'other cluster: the grants name the same roles');
	is($moved->{handler}, $before->{handler}, 'other cluster: the handler runs as the same role');
	my ($r, $o, $e) = $other->psql('dst', q{SELECT created FROM jobq.enqueue('k.prod', '{}', 'q1')},
		extra_params => [ '-U', 'r_prod' ]);
	is($o, 't', 'other cluster: r_prod enqueues into q1') or diag($e);
}
handler_runs($other, 'other cluster');

$other->stop;
$node->stop;
done_testing();
