# Hostile install: before CREATE EXTENSION jobq, an unprivileged role that
# can create objects in schema public plants look-alikes of what jobq might
# call unqualified: functions (now, nextval, format, jsonb_build_object, ...),
# aggregates (count, min, max, sum), operators (=, <, <=, +, -, ||, ->>, ...),
# tables named like jobq's (job, queue, ready, ...) and domains named text
# and timestamptz.  The database's search_path puts public first, so every
# session (the superuser installing jobq, a granted role, the background
# worker and the executors) runs with it.  Each planted object works like
# the original and records that it was called: in a log table and in a
# sequence (which no rollback undoes) and as a WARNING in the server log.
#
# Then jobq is installed and exercised broadly (enqueue, claim, complete,
# fail, extend, checkpoint, snooze, cancel, retry, pause, configure, views,
# health, grant, in-database handlers, schedules fired by the worker, leases
# reaped, jobs pruned) as the superuser and as a granted role; at the end
# nothing planted may have been called, and everything must have worked.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $node = PostgreSQL::Test::Cluster->new('hostile');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.prune_interval = 1s\n"
	  . "jobq.executors = 1\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN;
	CREATE ROLE app LOGIN;
	CREATE DATABASE hostile;
});
# PostgreSQL 15 no longer lets PUBLIC create in schema public; a database
# upgraded from an older release, or a lax owner, still does
$node->safe_psql('hostile', q{
	GRANT CREATE ON SCHEMA public TO mallory;
	CREATE SCHEMA app AUTHORIZATION app;
	ALTER DATABASE hostile SET search_path = public, pg_catalog;
	ALTER ROLE app SET search_path = public, pg_catalog;
});

# --- mallory plants look-alikes ------------------------------------------

my @plant = (q{
	CREATE SEQUENCE public.hijack_seq;
	GRANT USAGE, SELECT, UPDATE ON SEQUENCE public.hijack_seq TO PUBLIC;
	CREATE TABLE public.hijack_log (what pg_catalog.text, who pg_catalog.text DEFAULT current_user);
	GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC;
	CREATE FUNCTION public.hijacked(what pg_catalog.text) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.nextval('public.hijack_seq'::pg_catalog.regclass);
		INSERT INTO public.hijack_log (what) VALUES (what);
		RAISE WARNING 'HIJACKED: %', what;
	END $$;
});

# functions: name(args), return type, the original it stands for
my @functions = (
	[ 'now()', 'timestamptz', 'pg_catalog.now()' ],
	[ 'clock_timestamp()', 'timestamptz', 'pg_catalog.clock_timestamp()' ],
	[ 'statement_timestamp()', 'timestamptz', 'pg_catalog.statement_timestamp()' ],
	[ 'random()', 'float8', 'pg_catalog.random()' ],
	[ 'nextval(regclass)', 'bigint', 'pg_catalog.nextval($1)' ],
	[ 'nextval(pg_catalog.text)', 'bigint', 'pg_catalog.nextval($1::pg_catalog.regclass)' ],
	[ 'currval(regclass)', 'bigint', 'pg_catalog.currval($1)' ],
	[ 'jsonb_build_object(pg_catalog.text, pg_catalog.text)', 'jsonb', 'pg_catalog.jsonb_build_object($1, $2)' ],
	[ 'jsonb_build_object(pg_catalog.text, jsonb)', 'jsonb', 'pg_catalog.jsonb_build_object($1, $2)' ],
	[ 'jsonb_build_object(pg_catalog.text, bigint)', 'jsonb', 'pg_catalog.jsonb_build_object($1, $2)' ],
	[ 'to_jsonb(anyelement)', 'jsonb', 'pg_catalog.to_jsonb($1)' ],
	[ 'format(pg_catalog.text, pg_catalog.text)', 'pg_catalog.text', 'pg_catalog.format($1, $2)' ],
	[ 'quote_literal(pg_catalog.text)', 'pg_catalog.text', 'pg_catalog.quote_literal($1)' ],
	[ 'quote_ident(pg_catalog.text)', 'pg_catalog.text', 'pg_catalog.quote_ident($1)' ],
	[ 'lower(pg_catalog.text)', 'pg_catalog.text', 'pg_catalog.lower($1)' ],
	[ 'upper(pg_catalog.text)', 'pg_catalog.text', 'pg_catalog.upper($1)' ],
	[ 'length(pg_catalog.text)', 'integer', 'pg_catalog.length($1)' ],
	[ 'octet_length(pg_catalog.text)', 'integer', 'pg_catalog.octet_length($1)' ],
	[ 'substr(pg_catalog.text, integer)', 'pg_catalog.text', 'pg_catalog.substr($1, $2)' ],
	[ 'array_length(anyarray, integer)', 'integer', 'pg_catalog.array_length($1, $2)' ],
	[ 'cardinality(anyarray)', 'integer', 'pg_catalog.cardinality($1)' ],
	[ 'array_fill(anyelement, integer[])', 'anyarray', 'pg_catalog.array_fill($1, $2)' ],
	[ 'current_setting(pg_catalog.text)', 'pg_catalog.text', 'pg_catalog.current_setting($1)' ],
	[ 'current_setting(pg_catalog.text, boolean)', 'pg_catalog.text', 'pg_catalog.current_setting($1, $2)' ],
	[ 'set_config(pg_catalog.text, pg_catalog.text, boolean)', 'pg_catalog.text', 'pg_catalog.set_config($1, $2, $3)' ],
	[ 'pg_get_userbyid(oid)', 'name', 'pg_catalog.pg_get_userbyid($1)' ],
	[ 'date_trunc(pg_catalog.text, timestamptz)', 'timestamptz', 'pg_catalog.date_trunc($1, $2)' ],
	[ 'age(timestamptz)', 'interval', 'pg_catalog.age($1)' ],
	[ 'hashtext(pg_catalog.text)', 'integer', 'pg_catalog.hashtext($1)' ],
	[ 'pg_backend_pid()', 'integer', 'pg_catalog.pg_backend_pid()' ],
	[ 'pg_try_advisory_xact_lock(bigint)', 'boolean', 'pg_catalog.pg_try_advisory_xact_lock($1)' ],
	[ 'greatest_ts(timestamptz)', 'timestamptz', '$1' ],
);
my $n = 0;
for my $f (@functions)
{
	my ($sig, $ret, $orig) = @$f;
	(my $name = $sig) =~ s/\(.*//;
	push @plant, qq{
	CREATE FUNCTION public.$sig RETURNS $ret LANGUAGE plpgsql AS \$f\$
	BEGIN PERFORM public.hijacked('$sig'); RETURN $orig; END \$f\$;
	};
	$n++;
}
push @plant, q{
	CREATE FUNCTION public.unnest(anyarray) RETURNS SETOF anyelement LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('unnest(anyarray)'); RETURN QUERY SELECT pg_catalog.unnest($1); END $f$;
	CREATE FUNCTION public.pg_notify(pg_catalog.text, pg_catalog.text) RETURNS void LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('pg_notify'); PERFORM pg_catalog.pg_notify($1, $2); END $f$;
	CREATE FUNCTION public.pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('pg_advisory_xact_lock'); PERFORM pg_catalog.pg_advisory_xact_lock($1); END $f$;

	-- aggregates
	CREATE FUNCTION public.hj_count0(bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('count(*)'); RETURN $1 OPERATOR(pg_catalog.+) 1; END $f$;
	CREATE AGGREGATE public.count(*) (sfunc = public.hj_count0, stype = bigint, initcond = '0');
	CREATE FUNCTION public.hj_count1(bigint, anyelement) RETURNS bigint LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('count(anyelement)');
	      RETURN $1 OPERATOR(pg_catalog.+) CASE WHEN $2 IS NULL THEN 0 ELSE 1 END; END $f$;
	CREATE AGGREGATE public.count(anyelement) (sfunc = public.hj_count1, stype = bigint, initcond = '0');
	CREATE FUNCTION public.hj_min(timestamptz, timestamptz) RETURNS timestamptz LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('min(timestamptz)'); RETURN LEAST($1, $2); END $f$;
	CREATE AGGREGATE public.min(timestamptz) (sfunc = public.hj_min, stype = timestamptz);
	CREATE FUNCTION public.hj_max(timestamptz, timestamptz) RETURNS timestamptz LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('max(timestamptz)'); RETURN GREATEST($1, $2); END $f$;
	CREATE AGGREGATE public.max(timestamptz) (sfunc = public.hj_max, stype = timestamptz);
	CREATE FUNCTION public.hj_sum(bigint, bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
	BEGIN PERFORM public.hijacked('sum(bigint)'); RETURN COALESCE($1, 0) OPERATOR(pg_catalog.+) $2; END $f$;
	CREATE AGGREGATE public.sum(bigint) (sfunc = public.hj_sum, stype = bigint);
};

# operators: name, left, right, result
my @operators = (
	[ '=', 'pg_catalog.text', 'pg_catalog.text', 'boolean' ],
	[ '=', 'bigint', 'bigint', 'boolean' ],
	[ '=', 'integer', 'integer', 'boolean' ],
	[ '=', 'oid', 'oid', 'boolean' ],
	[ '=', 'boolean', 'boolean', 'boolean' ],
	[ '=', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '=', 'name', 'name', 'boolean' ],
	[ '=', 'jsonb', 'jsonb', 'boolean' ],
	[ '<>', 'pg_catalog.text', 'pg_catalog.text', 'boolean' ],
	[ '<>', 'bigint', 'bigint', 'boolean' ],
	[ '<', 'bigint', 'bigint', 'boolean' ],
	[ '>', 'bigint', 'bigint', 'boolean' ],
	[ '<', 'integer', 'integer', 'boolean' ],
	[ '>', 'integer', 'integer', 'boolean' ],
	[ '>=', 'integer', 'integer', 'boolean' ],
	[ '<', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '<=', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '>', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '>=', 'timestamptz', 'timestamptz', 'boolean' ],
	[ '<', 'interval', 'interval', 'boolean' ],
	[ '+', 'timestamptz', 'interval', 'timestamptz' ],
	[ '-', 'timestamptz', 'interval', 'timestamptz' ],
	[ '-', 'timestamptz', 'timestamptz', 'interval' ],
	[ '+', 'bigint', 'bigint', 'bigint' ],
	[ '+', 'integer', 'integer', 'integer' ],
	[ '-', 'integer', 'integer', 'integer' ],
	[ '*', 'interval', 'float8', 'interval' ],
	[ '||', 'pg_catalog.text', 'pg_catalog.text', 'pg_catalog.text' ],
	[ '->>', 'jsonb', 'pg_catalog.text', 'pg_catalog.text' ],
	[ '->', 'jsonb', 'pg_catalog.text', 'jsonb' ],
	[ '~~', 'pg_catalog.text', 'pg_catalog.text', 'boolean' ],
	[ '~', 'pg_catalog.text', 'pg_catalog.text', 'boolean' ],
	[ '@>', 'jsonb', 'jsonb', 'boolean' ],
);
my $i = 0;
for my $o (@operators)
{
	my ($op, $l, $r, $ret) = @$o;
	$i++;
	push @plant, qq{
	CREATE FUNCTION public.hj_op_$i($l, $r) RETURNS $ret LANGUAGE plpgsql AS \$f\$
	BEGIN PERFORM public.hijacked('operator $op ($l, $r)'); RETURN \$1 OPERATOR(pg_catalog.$op) \$2; END \$f\$;
	CREATE OPERATOR public.$op (LEFTARG = $l, RIGHTARG = $r, FUNCTION = public.hj_op_$i);
	};
}

# tables named like jobq's, writable by anyone; and, last, types named like
# the ones jobq's SQL spells out
push @plant, q{
	CREATE TABLE public.job (job_id bigint, queue pg_catalog.text, kind pg_catalog.text, payload jsonb);
	CREATE TABLE public.queue (name pg_catalog.text);
	CREATE TABLE public.ready (queue pg_catalog.text, job_id bigint);
	CREATE TABLE public.scheduled (queue pg_catalog.text, job_id bigint);
	CREATE TABLE public.schedule (name pg_catalog.text);
	CREATE TABLE public.permission (queue pg_catalog.text, role oid, capability pg_catalog.text);
	CREATE TABLE public.idempotency_key (kind pg_catalog.text, key pg_catalog.text, job_id bigint);
	CREATE TABLE public.attempt (job_id bigint);
	CREATE TABLE public.handler (kind pg_catalog.text);
	CREATE SEQUENCE public.job_id_seq;
	GRANT ALL ON ALL TABLES IN SCHEMA public TO PUBLIC;
	GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO PUBLIC;
	CREATE DOMAIN public.text AS pg_catalog.text;
	CREATE DOMAIN public.timestamptz AS pg_catalog.timestamptz;
};
$node->safe_psql('hostile', join("\n", @plant), extra_params => [ '-U', 'mallory' ]);

my $planted = $node->safe_psql('hostile', q{
	SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc
	 WHERE pronamespace OPERATOR(pg_catalog.=) 'public'::pg_catalog.regnamespace});
my $planted_ops = $node->safe_psql('hostile', q{
	SELECT pg_catalog.count(*) FROM pg_catalog.pg_operator
	 WHERE oprnamespace OPERATOR(pg_catalog.=) 'public'::pg_catalog.regnamespace});
note("planted in public: $planted functions and aggregates, $planted_ops operators");

# the trap works: a plain query with the hostile search_path calls them
is($node->safe_psql('hostile', q{
	SELECT 'a' = 'a';
	SELECT pg_catalog.count(*) FROM public.hijack_log}), "t\n1",
	'the planted look-alikes are called by unqualified SQL under this search_path');
$node->safe_psql('hostile', 'TRUNCATE public.hijack_log');
my $baseline = $node->safe_psql('hostile', 'SELECT last_value FROM public.hijack_seq');

# what every check below reads, with a clean search_path
sub q_clean
{
	my ($sql, %opts) = @_;
	return $node->safe_psql('hostile', "SET search_path = pg_catalog;\n$sql", %opts);
}

# poll a query under a clean search_path until it gives true
sub poll_clean
{
	my ($sql) = @_;
	# poll_query_until's deadline: each awaited event takes a second or two,
	# the deadline only catches a hang
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		return 1 if q_clean($sql) eq 't';
		Time::HiRes::usleep(100_000);
	}
	diag("timed out waiting for: $sql");
	return 0;
}

# run an API script under the hostile search_path (as user, when given);
# its failure is a failed test showing the script's errors, not an abort
sub hostile_psql
{
	my ($name, $sql, $user) = @_;
	my ($ret, $stdout, $stderr) = $node->psql('hostile', $sql,
		extra_params => [ $user ? ('-U', $user) : () ], on_error_stop => 0);
	ok($ret == 0 && $stderr !~ /ERROR:/, "$name: the script runs without an error")
	  or diag(join("\n", grep { /ERROR:/ } split /\n/, $stderr));
	return $stdout;
}

# --- install with the hostile search_path --------------------------------

my ($version) = slurp_file('jobq.control') =~ /^default_version = '([^']+)'/m;
is($node->safe_psql('hostile', q{
	SHOW search_path;
	CREATE EXTENSION jobq;
	SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'jobq'}),
	"public, pg_catalog\n$version", 'CREATE EXTENSION jobq with search_path = public, pg_catalog');

ok(poll_clean(q{
	SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'hostile'}),
	'the background worker serves the database');

# --- the superuser, hostile search_path ------------------------------------

my $out = hostile_psql('the superuser', q{
	SELECT jobq.configure('hq', max_retries => 1, backoff_base => '10 ms', backoff_cap => '20 ms',
	                      retention_completed => '1 hour', max_concurrency => 100, rate_limit => 1000,
	                      breaker_threshold => 50);
	SELECT created FROM jobq.enqueue('s.one', '{"n": 1}', 'hq', priority => 5, idempotency_key => 'k1');
	SELECT created FROM jobq.enqueue('s.one', '{"n": 1}', 'hq', idempotency_key => 'k1');
	SELECT created FROM jobq.enqueue_many('s.many', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[], 'hq',
	                                     idempotency_keys => ARRAY['m1', NULL], concurrency_key => 'c');
	SELECT job_id AS j1, lease_token AS t1 FROM jobq.claim('hq', 'w1', kinds => ARRAY['s.one']) \gset
	SELECT jobq.extend(:j1, :t1, '1 hour') IS NOT NULL AS extended;
	SELECT jobq.checkpoint(:j1, :t1, '{"step": 1}');
	SELECT jobq.complete(:j1, :t1, '{"done": true}');
	SELECT pg_catalog.array_agg(job_id) AS ids, pg_catalog.array_agg(lease_token) AS toks
	  FROM jobq.claim('hq', 'w1', batch => 10, kinds => ARRAY['s.many']) \gset
	SELECT jobq.complete_many(:'ids', :'toks');
	SELECT job_id AS j2 FROM jobq.enqueue('s.fail', '{}', 'hq') \gset
	SELECT lease_token AS t2 FROM jobq.claim('hq', kinds => ARRAY['s.fail']) \gset
	SELECT jobq.fail(:j2, :t2, 'boom', retryable => false);
	SELECT jobq.retry(:j2);
	SELECT jobq.cancel(:j2);
	SELECT jobq.retry_failed(queue => 'hq');
	SELECT job_id AS j3 FROM jobq.enqueue('s.snooze', '{}', 'hq') \gset
	SELECT lease_token AS t3 FROM jobq.claim('hq', kinds => ARRAY['s.snooze']) \gset
	SELECT jobq.snooze(:j3, :t3, '1 hour') IS NOT NULL AS snoozed;
	SELECT jobq.pause('hq');
	SELECT jobq.resume('hq');
	SELECT jobq.purge('hq', 'cancelled');
	SELECT jobq.reap();
	SELECT jobq.prune();
	SELECT jobq.run_schedules();
	SELECT jobq.priority('high'), jobq.priority_label(25);
	SELECT jobq.cron_next('0 9 * * MON-FRI', '2024-03-08 12:00+00', 'Europe/Berlin')
	       OPERATOR(pg_catalog.=) '2024-03-11 08:00+00';
});
is($out, join("\n",
	'', 't', 'f', "t\nt", 't', 't', 't', '2', 'failed', 't', 't', '0', 't', '', '', '1', '0', '0',
	'0', "20|high", 't'),
	'the superuser: the whole API works under the hostile search_path');

$out = hostile_psql('the superuser\'s views', q{
	SELECT pg_catalog.count(*) FROM jobq.jobs;
	SELECT pg_catalog.count(*) FROM jobq.dead_letter;
	SELECT queue, pending, running, completed FROM jobq.queue_stats;
	SELECT queue, max_retries FROM jobq.queues;
	SELECT kind, completed FROM jobq.kind_stats ORDER BY kind;
	SELECT attempt, outcome FROM jobq.job(1);
	SELECT status FROM jobq.job_by_key('s.one', 'k1');
	SELECT pg_catalog.count(*) FROM jobq.health();
	SELECT pg_catalog.count(*) FROM jobq.workers;
});
is($out, join("\n", '4', '0', 'hq|1|0|3', 'hq|1', "s.many|2\ns.one|1", '1|completed', 'completed',
		'9', '2'),
	'the superuser: views, job, job_by_key, health under the hostile search_path');

# --- a granted role, hostile search_path -----------------------------------

hostile_psql('the superuser grants', q{
	SELECT jobq.grant('hq', 'app', 'administer');
	SELECT jobq.grant('hq2', 'app', 'work');
	SELECT jobq.configure('hq2');
	SELECT jobq.configure('other');
	SELECT jobq.schedule('every-second', '* * * * * *', 's.tick', '{"from": "cron"}', queue => 'hq');
});

$out = hostile_psql('a granted role', q{
	SHOW search_path;
	CREATE FUNCTION app.work(payload jsonb, job jsonb) RETURNS jsonb LANGUAGE sql
	  SET search_path = pg_catalog AS $$ SELECT jsonb_build_object('ran_as', current_user::text) $$;
	SELECT jobq.register_handler('a.handled', 'app.work(jsonb,jsonb)', 'hq');
	SELECT job_id AS h FROM jobq.enqueue('a.handled', '{"x": 1}', 'hq') \gset
	SELECT job_id AS a1 FROM jobq.enqueue('a.one', '{}', 'hq') \gset
	SELECT lease_token AS at1 FROM jobq.claim('hq', 'app-worker', lease => '1 hour', kinds => ARRAY['a.one']) \gset
	SELECT jobq.complete(:a1, :at1);
	SELECT job_id AS a2 FROM jobq.enqueue('a.two', '{}', 'hq', max_retries => 0) \gset
	SELECT lease_token AS at2 FROM jobq.claim('hq', kinds => ARRAY['a.two']) \gset
	SELECT jobq.fail(:a2, :at2, 'nope');
	SELECT jobq.retry(:a2);
	SELECT job_id AS a3 FROM jobq.enqueue('a.lease', '{}', 'hq') \gset
	SELECT pg_catalog.count(*) FROM jobq.claim('hq', lease => '50 ms', kinds => ARRAY['a.lease']);
	SELECT jobq.configure('hq', max_retries => 2);
	SELECT queue FROM jobq.queues ORDER BY queue;
	SELECT pg_catalog.count(*) > 0 FROM jobq.jobs;
	SELECT status FROM jobq.job_by_key('s.one', 'k1');
	SELECT pg_catalog.count(*) FROM jobq.claim('hq2');
	SELECT jobq.may_use_queue('hq'), jobq.may_use_queue('elsewhere');
}, 'app');
my ($a_out) = $out;
is($a_out, join("\n", 'public, pg_catalog', '', 't', 'failed', 't', '1', '', "hq\nhq2", 't',
		'completed', '0', 't|f'),
	'a granted role: enqueue, claim, complete, fail, retry, configure, views under the hostile search_path');

my $h = q_clean(q{SELECT coalesce(max(job_id), 0) FROM jobq.job WHERE kind = 'a.handled'});
ok(poll_clean(qq{
	SELECT status = 'completed' FROM jobq.job WHERE job_id = $h}),
	'an executor ran the in-database job');
is(q_clean(qq{SELECT result->>'ran_as' FROM jobq.job WHERE job_id = $h}), 'app',
	'as the role that registered its handler');

ok(poll_clean(q{
	SELECT count(*) >= 2 FROM jobq.job WHERE kind = 's.tick'}),
	'the background worker fires the schedule');
ok(poll_clean(q{
	SELECT retry_count = 1 AND last_error = 'lease expired'
	  FROM jobq.job WHERE kind = 'a.lease'}),
	'the background worker reaps an expired lease');

q_clean(q{SELECT jobq.configure('hq', retention_completed => '0')});
ok(poll_clean(q{
	SELECT count(*) = 0 FROM jobq.job WHERE kind IN ('s.one', 'a.one')}),
	'the background worker prunes completed jobs');

is(q_clean(q{SELECT count(*) FROM jobq.idempotency_key WHERE kind = 's.one' AND key = 'k1'}), '1',
	'the key of a pruned job stays reserved');

# --- nothing planted was ever called --------------------------------------

is(q_clean(q{SELECT coalesce(string_agg(format('%s by %s (%s calls)', what, who, n), E'\n' ORDER BY what, who), '')
	  FROM (SELECT what, who, count(*) AS n FROM public.hijack_log GROUP BY 1, 2) h}),
	'', 'no planted function, aggregate or operator was called (log table)');
is(q_clean(q{SELECT last_value FROM public.hijack_seq}), $baseline,
	'no planted function, aggregate or operator was called, not even in a rolled-back transaction');
is(q_clean(q{
	SELECT (SELECT count(*) FROM public.job) + (SELECT count(*) FROM public.queue)
	     + (SELECT count(*) FROM public.ready) + (SELECT count(*) FROM public.scheduled)
	     + (SELECT count(*) FROM public.schedule) + (SELECT count(*) FROM public.permission)
	     + (SELECT count(*) FROM public.idempotency_key) + (SELECT count(*) FROM public.attempt)
	     + (SELECT count(*) FROM public.handler)}), '0',
	'the planted tables stay empty');
is(q_clean(q{SELECT is_called FROM public.job_id_seq}), 'f', 'the planted sequence was never used');

my $log = slurp_file($node->logfile);
my @hijacks = ($log =~ /WARNING:  HIJACKED: ([^\n]*)/g);
# the one call of the trap check above is expected
is(scalar(@hijacks), 1, 'the server log shows no call of a planted object but the trap check\'s')
  or diag(scalar(@hijacks) . " calls, of:\n" . join("\n", sort keys %{ { map { $_ => 1 } @hijacks } }));
unlike($log, qr/TRAP:|server process .* was terminated/, 'no crash');

$node->stop;
done_testing();
