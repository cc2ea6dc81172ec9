# The privilege matrix from inside job handlers (issue 15 item 2).
#
# Every role's capabilities must hold inside its handlers exactly as when it
# connects: an executor's session belongs to the bootstrap superuser, so a
# capability check that asked about "the session's role" would answer for a
# superuser there.  public.matrix() calls the API (every operation on queue
# q1, where the roles hold different capabilities, and on q2, where they hold
# none) and records each call's outcome: "ok: <first value>" or the SQLSTATE.
# Each call is rolled back, so the matrix changes nothing and can be run any
# number of times.  For each role the matrix is run connected as the role
# (SET ROLE) and by a handler the role registered; the two must be equal.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('handler_privileges');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 200ms\n");
$node->start;

my @roles = qw(r_enqueue r_work r_admin r_nobody);
my %cap = (r_enqueue => 'enqueue', r_work => 'work', r_admin => 'administer');

$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('q1');
	SELECT jobq.configure('q2');
	-- state every call of the matrix can act on, in both queues
	CREATE TABLE public.tok (queue text PRIMARY KEY, job_id bigint, lease_token bigint,
	                         pending bigint, failed bigint);
	GRANT SELECT ON public.tok TO PUBLIC;
	DO $$
	DECLARE
		q text;
		r record;
		p bigint;
		f bigint;
	BEGIN
		FOREACH q IN ARRAY ARRAY['q1', 'q2'] LOOP
			SELECT job_id INTO f FROM jobq.enqueue('m.failed', '{}', q, max_retries => 0);
			PERFORM jobq.fail(c.job_id, c.lease_token, 'no')
			   FROM jobq.claim(q, kinds => ARRAY['m.failed']) c;
			SELECT job_id INTO p FROM jobq.enqueue('m.keyed', '{"secret": 1}', q,
			                                       idempotency_key => 'k-' || q);
			PERFORM jobq.enqueue('m.run', '{}', q);
			SELECT * INTO r FROM jobq.claim(q, kinds => ARRAY['m.run'], lease => '1 hour');
			INSERT INTO public.tok VALUES (q, r.job_id, r.lease_token, p, f);
			PERFORM jobq.schedule('s-' || q, '0 0 1 1 *', 'm.cron', '{}', q);
		END LOOP;
	END $$;
	CREATE FUNCTION public.noop(payload jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;

	-- every call, for queue q; %1$s is the queue, %2$s .. %6$s its job ids and token
	CREATE FUNCTION public.matrix() RETURNS jsonb LANGUAGE plpgsql AS $m$
	DECLARE
		calls text[] := ARRAY[
			'SELECT created FROM jobq.enqueue(''m.new'', ''{}'', %1$L)',
			'SELECT count(*) FROM jobq.enqueue_many(''m.new'', ARRAY[''{}'']::jsonb[], %1$L)',
			'SELECT count(*) FROM jobq.claim(%1$L, kinds => ARRAY[''m.keyed''])',
			'SELECT jobq.extend(%2$s, %3$s, ''2 hours'') IS NOT NULL',
			'SELECT jobq.checkpoint(%2$s, %3$s, ''{"at": 1}'')',
			'SELECT jobq.complete(%2$s, %3$s, ''{}'')',
			'SELECT jobq.complete_many(ARRAY[%2$s]::bigint[], ARRAY[%3$s]::bigint[])',
			'SELECT jobq.fail(%2$s, %3$s, ''err'')',
			'SELECT jobq.snooze(%2$s, %3$s, ''1 minute'') IS NOT NULL',
			'SELECT count(*) FROM jobq.jobs WHERE queue = %1$L',
			'SELECT count(*) FROM jobq.dead_letter WHERE queue = %1$L',
			'SELECT count(*) FROM jobq.queue_stats WHERE queue = %1$L',
			'SELECT count(*) FROM jobq.schedules WHERE queue = %1$L',
			'SELECT count(*) FROM jobq.job(%4$s)',
			'SELECT count(*) FROM jobq.job_by_key(''m.keyed'', ''k-'' || %1$L)',
			'SELECT count(*) FROM jobq.kind_stats(''1 day'', %1$L)',
			'SELECT jobq.may(%1$L, ''work'')',
			'SELECT jobq.cancel(%4$s)',
			'SELECT jobq.retry(%5$s)',
			'SELECT jobq.retry_failed(NULL, %1$L)',
			'SELECT jobq.pause(%1$L) IS NULL',
			'SELECT jobq.resume(%1$L) IS NULL',
			'SELECT jobq.configure(%1$L, max_retries => 7) IS NULL',
			'SELECT jobq.purge(%1$L, ''failed'')',
			'SELECT jobq.schedule(''n-'' || %1$L, ''0 0 1 1 *'', ''m.cron'', ''{}'', %1$L) > 0',
			'SELECT jobq.pause_schedule(''s-'' || %1$L)',
			'SELECT jobq.resume_schedule(''s-'' || %1$L)',
			'SELECT jobq.unschedule(''s-'' || %1$L)',
			'SELECT jobq.grant(%1$L, ''r_nobody'', ''enqueue'') IS NULL',
			'SELECT jobq.revoke(%1$L, ''r_work'', ''work'') IS NULL',
			'SELECT jobq.register_handler(''h.'' || %1$L, ''public.noop(jsonb)'', %1$L) IS NULL',
			'SELECT jobq.unregister_handler(''h.'' || %1$L)'];
		global text[] := ARRAY[
			'SELECT count(*) FROM jobq.health()',
			'SELECT jobq.may(''*'', ''administer'')',
			'SELECT count(*) FROM jobq.kind_stats(''1 day'')',
			'SELECT jobq.reap() >= 0',
			'SELECT jobq.prune() >= 0'];
		out jsonb := '{}';
		t record;
		stmt text;
		val text;
	BEGIN
		FOR t IN SELECT * FROM public.tok ORDER BY queue LOOP
			FOREACH stmt IN ARRAY calls LOOP
				stmt := format(stmt, t.queue, t.job_id, t.lease_token, t.pending, t.failed);
				out := out || jsonb_build_object(stmt, public.outcome(stmt));
			END LOOP;
		END LOOP;
		FOREACH stmt IN ARRAY global LOOP
			out := out || jsonb_build_object(stmt, public.outcome(stmt));
		END LOOP;
		RETURN out;
	END $m$;

	-- "ok: <first value>" or the SQLSTATE of one call, which is rolled back
	CREATE FUNCTION public.outcome(stmt text) RETURNS text LANGUAGE plpgsql AS $o$
	DECLARE
		val text;
	BEGIN
		EXECUTE stmt INTO val;
		RAISE EXCEPTION USING ERRCODE = 'JQOK0', MESSAGE = coalesce(val, 'null');
	EXCEPTION
		WHEN SQLSTATE 'JQOK0' THEN
			RETURN 'ok: ' || SQLERRM;
		WHEN OTHERS THEN
			RETURN SQLSTATE;
	END $o$;

	CREATE FUNCTION public.matrix_handler(payload jsonb) RETURNS jsonb
		LANGUAGE sql AS $$ SELECT public.matrix() $$;
});

for my $role (@roles)
{
	$node->safe_psql('postgres', "CREATE ROLE $role");
	$node->safe_psql('postgres', "SELECT jobq.grant('q1', '$role', '$cap{$role}')")
	  if $cap{$role};
	# each role's handler lives in a queue of its own
	$node->safe_psql('postgres', "SELECT jobq.grant('h_$role', '$role', 'administer')");
	$node->safe_psql('postgres', qq{
		SET ROLE $role;
		SELECT jobq.register_handler('matrix.$role', 'public.matrix_handler(jsonb)', 'h_$role');
	});
}

for my $role (@roles)
{
	my $direct = $node->safe_psql('postgres', "SET ROLE $role; SELECT public.matrix()");
	my $id = $node->safe_psql('postgres',
		"SET ROLE $role; SELECT job_id FROM jobq.enqueue('matrix.$role', queue => 'h_$role')");
	ok($node->poll_query_until('postgres',
		"SELECT status = 'completed' FROM jobq.job WHERE job_id = $id"),
		"$role: the handler's matrix job completed");
	my $inside = $node->safe_psql('postgres', "SELECT result FROM jobq.job WHERE job_id = $id");
	(my $d = $direct) =~ s/'/''/g;
	(my $i = $inside) =~ s/'/''/g;

	# every call compared, so a difference names the call
	my $diff = $node->safe_psql('postgres', qq{
		SELECT coalesce(string_agg(format('%s: connected %s, in handler %s', d.key, d.value, i.value), E'\\n'
		                           ORDER BY d.key), '')
		  FROM jsonb_each_text('$d'::jsonb) d
		  FULL JOIN jsonb_each_text('$i'::jsonb) i USING (key)
		 WHERE d.value IS DISTINCT FROM i.value});
	is($diff, '', "$role: every call has the same outcome in its handler as connected");

	# the matrix itself must tell the roles apart, or the comparison proves nothing
	my $ok = $node->safe_psql('postgres', qq{
		SELECT count(*) FROM jsonb_each_text('$d'::jsonb) WHERE value LIKE 'ok:%'});
	my $denied = $node->safe_psql('postgres', qq{
		SELECT count(*) FROM jsonb_each_text('$d'::jsonb) WHERE value = '42501'});
	note("$role: $ok calls allowed, $denied refused with 42501");
	cmp_ok($denied, '>', 0, "$role: some calls are refused");
}

# what each capability allows on q1, and that q2 is closed to all of them
my %expect = (
	r_enqueue => ["SELECT created FROM jobq.enqueue('m.new', '{}', 'q1')", 'ok: true'],
	r_work => ["SELECT count(*) FROM jobq.claim('q1', kinds => ARRAY['m.keyed'])", 'ok: 1'],
	r_admin => ["SELECT jobq.retry_failed(NULL, 'q1')", 'ok: 1'],
	r_nobody => ["SELECT count(*) FROM jobq.jobs WHERE queue = 'q1'", 'ok: 0']);
for my $role (@roles)
{
	my ($call, $want) = @{ $expect{$role} };
	(my $quoted = $call) =~ s/'/''/g;
	is($node->safe_psql('postgres',
		"SET ROLE $role; SELECT public.matrix() ->> '$quoted'"),
		$want, "$role: $call");
	is($node->safe_psql('postgres', qq{
		SET ROLE $role;
		SELECT coalesce(string_agg(key || ' -> ' || value, E'\n' ORDER BY key), '')
		  FROM jsonb_each_text(public.matrix())
		 WHERE key LIKE '%q2%' AND value LIKE 'ok:%' AND value NOT IN ('ok: 0', 'ok: false')}),
		'', "$role: nothing on q2 succeeds or shows anything");
}

# --- a right revoked after registration stops the handler -----------------
# (a hostile review's find: the executors checked nothing at run time)
# bob owns a SECURITY DEFINER function that reads his table; he lets alice
# use it, alice registers it as her handler, then bob takes EXECUTE back: her
# jobs must not run it as bob any more.  Then USAGE on the schema alone; then
# mallory, whose administer capability on billing was revoked: her handler
# stops and the queue's administrator can remove it.
$node->safe_psql('postgres', q{
	CREATE ROLE bob LOGIN;
	CREATE ROLE alice LOGIN;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE billing_admin LOGIN;
	SELECT jobq.grant('qa', 'alice', 'administer');
	SELECT jobq.grant('billing', 'billing_admin', 'administer');
	SELECT jobq.grant('billing', 'mallory', 'administer');
	CREATE SCHEMA bs AUTHORIZATION bob;
	CREATE SCHEMA ms AUTHORIZATION mallory;
	SET ROLE bob;
	CREATE TABLE bs.secrets (s text);
	INSERT INTO bs.secrets VALUES ('bob-private');
	CREATE FUNCTION bs.peek(p jsonb) RETURNS jsonb LANGUAGE sql SECURITY DEFINER
	    SET search_path = pg_catalog
	    AS $$ SELECT jsonb_build_object('s', (SELECT string_agg(s, ',') FROM bs.secrets)) $$;
	REVOKE EXECUTE ON FUNCTION bs.peek(jsonb) FROM PUBLIC;
	GRANT USAGE ON SCHEMA bs TO alice;
	GRANT EXECUTE ON FUNCTION bs.peek(jsonb) TO alice;
	RESET ROLE;
	SET ROLE alice;
	SELECT jobq.register_handler('a.peek', 'bs.peek(jsonb)'::regprocedure, 'qa');
	RESET ROLE;
	SET ROLE mallory;
	CREATE TABLE ms.loot (p jsonb);
	CREATE FUNCTION ms.grab(p jsonb) RETURNS jsonb LANGUAGE sql
	    AS $$ INSERT INTO ms.loot VALUES (p) RETURNING jsonb_build_object('ok', true) $$;
	SELECT jobq.register_handler('m.grab', 'ms.grab(jsonb)'::regprocedure, 'billing');
	SELECT jobq.register_handler('m.grab2', 'ms.grab(jsonb)'::regprocedure, 'billing');
	RESET ROLE;});

# while the rights hold, alice's handler runs
my $peek = $node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('a.peek', '{}', 'qa')});
ok($node->poll_query_until('postgres',
		"SELECT status = 'completed' FROM jobq.job WHERE job_id = $peek"),
	'revoke: the handler runs while its role holds its rights');

my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SET ROLE bob;
	REVOKE EXECUTE ON FUNCTION bs.peek(jsonb) FROM alice;});
$peek = $node->safe_psql('postgres', q{SELECT job_id FROM jobq.enqueue('a.peek', '{}', 'qa')});
ok($node->wait_for_log(
		qr/the handler of kind "a\.peek" in queue "qa" is not run: role "alice" has no EXECUTE privilege on function bs\.peek\(jsonb\)/,
		$offset),
	'revoke: without EXECUTE the handler is not run, and the log says why');
is($node->safe_psql('postgres', "SELECT status FROM jobq.job WHERE job_id = $peek"),
	'pending', 'revoke: the job waits, unclaimed; bob\'s function did not run for alice');

# EXECUTE back, USAGE on the schema taken: still not run
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SET ROLE bob;
	GRANT EXECUTE ON FUNCTION bs.peek(jsonb) TO alice;
	REVOKE USAGE ON SCHEMA bs FROM alice;});
ok($node->wait_for_log(
		qr/the handler of kind "a\.peek" in queue "qa" is not run: role "alice" has no USAGE privilege on schema bs/,
		$offset),
	'revoke: without USAGE on the function\'s schema the handler is not run');
is($node->safe_psql('postgres', "SELECT status FROM jobq.job WHERE job_id = $peek"),
	'pending', 'revoke: the job still waits');
# (the function named by its number: a name in bs would need USAGE to be read)
my $peek_oid = $node->safe_psql('postgres', q{SELECT 'bs.peek(jsonb)'::regprocedure::oid});
my ($rc, $out, $err) = $node->psql('postgres', qq{
	SET ROLE alice;
	SELECT jobq.register_handler('a.peek2', ${peek_oid}::regprocedure, 'qa');});
like($err, qr/permission denied to run handler bs\.peek\(jsonb\): role "alice" has no USAGE privilege on schema bs/,
	'register_handler: USAGE on the function\'s schema is needed too');

# both back: the waiting job runs
$node->safe_psql('postgres', q{SET ROLE bob; GRANT USAGE ON SCHEMA bs TO alice;});
ok($node->poll_query_until('postgres',
		"SELECT status = 'completed' FROM jobq.job WHERE job_id = $peek"),
	'revoke: with the rights back, the waiting job runs');

# mallory's capability on billing revoked: her handler stops
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SET ROLE billing_admin;
	SELECT jobq.revoke('billing', 'mallory', 'administer');});
my $card = $node->safe_psql('postgres',
	q{SELECT job_id FROM jobq.enqueue('m.grab', '{"card": "4111"}', 'billing')});
ok($node->wait_for_log(
		qr/the handler of kind "m\.grab" in queue "billing" is not run: role "mallory" does not hold the administer capability on queue "billing"/,
		$offset),
	'revoke: without the capability on the queue the handler is not run');
is($node->safe_psql('postgres', q{SELECT count(*) FROM ms.loot}),
	'0', 'revoke: the handler\'s role got no payload of the queue');
# two handlers refused, the executors woken by 100 commits: a line a kind
$node->safe_psql('postgres',
	"SELECT jobq.enqueue('" . ($_ % 2 ? 'm.grab' : 'm.grab2') . "', '{}', 'billing')")
  for 1 .. 100;
ok($node->wait_for_log(qr/the handler of kind "m\.grab2" in queue "billing" is not run/, $offset),
	'revoke: the second refused handler is logged');
sleep 2;
my $lines = () = slurp_file($node->logfile, $offset) =~ /is not run: role "mallory"/g;
# (by each executor: jobq.executors is 2)
cmp_ok($lines, '<=', 4,
	"revoke: each refused handler is logged once by each executor ($lines lines), not at every round");
# the queue's administrator removes it (it belonged to another role)
is($node->safe_psql('postgres', q{
	SET ROLE billing_admin;
	SELECT jobq.unregister_handler('m.grab');}),
	't', 'the queue\'s administrator removes the handler of a role that lost its capability');
# a role that administers neither the handler's queue nor is its role may not
($rc, $out, $err) = $node->psql('postgres', q{
	SET ROLE billing_admin;
	SELECT jobq.unregister_handler('a.peek');});
like($err, qr/the handler of kind "a\.peek" belongs to another role/,
	'an administrator of another queue may not remove the handler');
is($node->safe_psql('postgres', q{SELECT status FROM jobq.job WHERE job_id = } . $card),
	'pending', 'the queue\'s job waits for a worker');
is($node->safe_psql('postgres', q{SET ROLE billing_admin; SELECT jobq.unregister_handler('m.grab2')}),
	't', 'the queue\'s administrator removes the other one too');

$node->stop;
done_testing();
