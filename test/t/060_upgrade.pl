# Upgrading in place: for every released version, install it, put real state
# in it, serve it with the current library, ALTER EXTENSION jobq UPDATE (once
# at rest, once while workers claim and complete), and check that nothing
# was lost: jobs in every status, a running job's lease token, idempotency
# keys, schedules, handlers and grants; that the worker serves the database
# before and after; and that the upgraded schema is the schema of a fresh
# install.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# every release users may have installed, oldest first
my @released = ('0.1.0');

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 200ms\nmax_connections = 40\n");
$node->start;

my $current = $node->safe_psql('postgres',
	q{SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'jobq'});
note("current version $current");

# the state a user has: one job of every kind of life, a key, a schedule, a
# handler, a grant
sub plant
{
	my ($db) = @_;
	$node->safe_psql($db, q{
		DO $$ BEGIN CREATE ROLE up_app; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
		CREATE SCHEMA app AUTHORIZATION up_app;
		SELECT jobq.grant('default', 'up_app', 'administer');
		SELECT jobq.grant('inproc', 'up_app', 'administer');
		SELECT jobq.configure('default', max_retries => 5);
		SELECT jobq.pause('inproc');
		SET ROLE up_app;
		CREATE TABLE app.effects (job_id bigint);
		CREATE FUNCTION app.work(payload jsonb, job jsonb) RETURNS jsonb LANGUAGE sql AS
			$$ INSERT INTO app.effects VALUES ((job->>'job_id')::bigint) RETURNING '{"done": true}'::jsonb $$;
		SELECT jobq.register_handler('handled', 'app.work(jsonb,jsonb)', 'inproc');
		RESET ROLE;
		SELECT jobq.enqueue('handled', '{}', 'inproc');
		SELECT jobq.enqueue('p.pending', '{"n": 1}');
		SELECT jobq.enqueue('p.delayed', '{"n": 2}', run_at => now() + interval '1 day');
		SELECT jobq.enqueue('p.keyed', '{"n": 3}', idempotency_key => 'key-1');
		SELECT jobq.enqueue('p.failed', '{}', max_retries => 0);
		SELECT jobq.fail(job_id, lease_token, 'broken') FROM jobq.claim(kinds => ARRAY['p.failed']);
		SELECT jobq.enqueue('p.cancelled', '{}');
		SELECT jobq.cancel(job_id) FROM jobq.jobs WHERE kind = 'p.cancelled';
		SELECT jobq.enqueue('p.done', '{}');
		SELECT jobq.complete(job_id, lease_token, '{"ok": 1}') FROM jobq.claim(kinds => ARRAY['p.done']);
		SELECT jobq.schedule('yearly', '0 0 1 1 *', 'p.cron', '{}', timezone => 'Europe/Paris');
		SELECT jobq.enqueue('p.running', '{}');
		CREATE TABLE public.lease AS
			SELECT job_id, lease_token FROM jobq.claim(kinds => ARRAY['p.running'], lease => '1 hour');
		-- a lease that expires while the database waits at the old version
		SELECT jobq.enqueue('p.expiring', '{}');
		SELECT jobq.claim(kinds => ARRAY['p.expiring'], lease => '1 second');
	});
}

# what must survive an upgrade, as one text
my $state_query = q{
	SELECT concat_ws(E'\n',
		(SELECT string_agg(format('%s %s %s %s %s %s %s %s', job_id, queue, kind, status, retry_count,
		                          payload, result, idempotency_key), E'\n' ORDER BY job_id)
		   FROM jobq.jobs WHERE kind NOT LIKE 'p.expiring%'),
		(SELECT string_agg(format('%s %s %s %s %s %s', name, cron, timezone, kind, queue, next_fire_at),
		                   E'\n' ORDER BY name) FROM jobq.schedules),
		(SELECT string_agg(format('%s %s %s %s', kind, handler, queue, run_as), E'\n' ORDER BY kind)
		   FROM jobq.handlers))
};

# jobq's schema, read from the catalogs: every function (its definition),
# relation, column, index, constraint, trigger, view, type, comment,
# extension member and configuration table.  pg_dump cannot be used for
# this: it prints no member of an extension.  Privileges are left out (a
# database in use has grants a fresh one lacks; grants are checked by what
# the roles can do).
my $schema_query = q{
	SELECT string_agg(d, E'\n' ORDER BY d) FROM (
		SELECT format('function %s %s %s', p.oid::regprocedure, md5(pg_catalog.pg_get_functiondef(p.oid)),
		              pg_catalog.obj_description(p.oid, 'pg_proc'))
		  FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'jobq'::regnamespace AND p.prokind <> 'a'
		UNION ALL
		SELECT format('relation %s %s %s %s', c.relname, c.relkind, c.reloptions,
		              pg_catalog.obj_description(c.oid, 'pg_class'))
		  FROM pg_catalog.pg_class c WHERE c.relnamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT format('column %s.%s %s %s %s %s %s', c.relname, a.attname, a.attnum,
		              pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
		              pg_catalog.pg_get_expr(ad.adbin, ad.adrelid),
		              pg_catalog.col_description(c.oid, a.attnum))
		  FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		  LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		 WHERE c.relnamespace = 'jobq'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT 'index ' || pg_catalog.pg_get_indexdef(i.indexrelid)
		  FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indrelid
		 WHERE c.relnamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT format('constraint %s %s %s', conrelid::regclass, conname, pg_catalog.pg_get_constraintdef(oid))
		  FROM pg_catalog.pg_constraint WHERE connamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT 'trigger ' || pg_catalog.pg_get_triggerdef(t.oid)
		  FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
		 WHERE c.relnamespace = 'jobq'::regnamespace AND NOT t.tgisinternal
		UNION ALL
		SELECT format('view %s %s', c.relname, md5(pg_catalog.pg_get_viewdef(c.oid)))
		  FROM pg_catalog.pg_class c WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = 'v'
		UNION ALL
		SELECT format('type %s %s', t.typname, t.typtype)
		  FROM pg_catalog.pg_type t WHERE t.typnamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT 'member ' || pg_catalog.pg_describe_object(classid, objid, objsubid)
		  FROM pg_catalog.pg_depend
		 WHERE refclassid = 'pg_catalog.pg_extension'::regclass AND deptype = 'e'
		   AND refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'jobq')
		UNION ALL
		SELECT format('config %s %s', x.rel::regclass, x.cond)
		  FROM pg_catalog.pg_extension e, unnest(e.extconfig, e.extcondition) x(rel, cond)
		 WHERE e.extname = 'jobq') s(d)
};

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION jobq');
is($node->safe_psql('fresh', q{SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jobq'}),
	$current, 'a fresh install is at the current version');

for my $old (@released)
{
	my $db = "at_" . ($old =~ s/\./_/gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION jobq VERSION '$old'");
	plant($db);

	# the current library serves a database still at the old version
	ok($node->poll_query_until($db,
		q{SELECT status = 'pending' AND retry_count = 1 FROM jobq.jobs WHERE kind = 'p.expiring'}),
		"$old: the worker reaps an expired lease before the upgrade");

	my $before = $node->safe_psql($db, $state_query);
	my $effects_before = $node->safe_psql($db, 'SELECT count(*) FROM app.effects');

	my ($ret, $out, $err) = $node->psql($db, 'ALTER EXTENSION jobq UPDATE');
	is($ret, 0, "$old: ALTER EXTENSION jobq UPDATE succeeds") or diag($err);
	is($node->safe_psql($db, q{SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jobq'}),
		$current, "$old: now at $current");

	is($node->safe_psql($db, $state_query), $before, "$old: every job, schedule and handler kept");
	is($node->safe_psql($db, q{
		SELECT jobq.complete(job_id, lease_token, '{"after": "upgrade"}') FROM public.lease}),
		't', "$old: a lease token from before the upgrade completes its job");
	is($node->safe_psql($db, q{
		SELECT created FROM jobq.enqueue('p.keyed', '{"n": 4}', idempotency_key => 'key-1')}),
		'f', "$old: an idempotency key from before still de-duplicates");
	is($node->safe_psql($db, q{
		SET ROLE up_app; SELECT created FROM jobq.enqueue('p.granted', '{}')}),
		't', "$old: a grant from before still holds");

	# the worker and the executors serve the upgraded database
	$node->safe_psql($db, q{
		SELECT jobq.enqueue('p.expiring.after', '{}');
		SELECT jobq.claim(kinds => ARRAY['p.expiring.after'], lease => '1 second');
	});
	ok($node->poll_query_until($db,
		q{SELECT status = 'pending' AND retry_count = 1 FROM jobq.jobs WHERE kind = 'p.expiring.after'}),
		"$old: the worker reaps after the upgrade");
	$node->safe_psql($db, q{SELECT jobq.resume('inproc')});
	ok($node->poll_query_until($db,
		q{SELECT status = 'completed' FROM jobq.jobs WHERE kind = 'handled'}),
		"$old: the handler registered before the upgrade runs its job");
	is($node->safe_psql($db, 'SELECT count(*) FROM app.effects'), $effects_before + 1,
		"$old: with its effect once");

	my $upgraded = $node->safe_psql($db, $schema_query);
	my $fresh = $node->safe_psql('fresh', $schema_query);
	cmp_ok(length($fresh), '>', 10000, 'the schema description describes something');
	is($upgraded, $fresh, "$old: the upgraded schema is a fresh install's");
	my $dump = `pg_dump -d "@{[ $node->connstr($db) ]}" 2>&1`;
	is($?, 0, "$old: pg_dump of the upgraded database succeeds") or diag($dump);
}

# --- upgrading while workers claim and complete ------------------------------
for my $old (@released)
{
	my $db = "busy_" . ($old =~ s/\./_/gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION jobq VERSION '$old'");
	$node->safe_psql($db, q{
		SELECT count(*) FROM jobq.enqueue_many('busy', array_fill('{}'::jsonb, ARRAY[1000]));
	});
	my $script = $node->basedir . '/busy.sql';
	open(my $fh, '>', $script) or die;
	print $fh q{
BEGIN;
SELECT jobq.complete(job_id, lease_token) FROM jobq.claim(kinds => ARRAY['busy']);
SELECT count(*) FROM jobq.enqueue('busy', '{}');
COMMIT;
};
	close $fh;
	my ($out, $err) = ('', '');
	my $bench = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '6', '-f', $script, $node->connstr($db) ],
		'>', \$out, '2>', \$err);
	# let the workers run, then upgrade under them
	ok($node->poll_query_until($db,
		q{SELECT count(*) >= 100 FROM jobq.jobs WHERE status = 'completed'}),
		"$old: workers complete jobs");
	my ($ret, $o, $e) = $node->psql($db, 'ALTER EXTENSION jobq UPDATE');
	is($ret, 0, "$old: ALTER EXTENSION jobq UPDATE under load succeeds") or diag($e);
	$bench->finish;
	is($bench->result(0), 0, "$old: the workers saw no error") or diag($err);
	unlike($err, qr/ERROR|FATAL/, "$old: no error in the workers' output");
	like($out, qr/number of failed transactions: 0/, "$old: no failed transaction")
	  or diag($out);
	is($node->safe_psql($db, q{
		SELECT count(*) FROM jobq.jobs WHERE status NOT IN ('pending', 'completed', 'running')}),
		'0', "$old: no job lost or broken under the upgrade");
}

$node->stop;
done_testing();
