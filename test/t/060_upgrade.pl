# Upgrading in place: for every released version, install it, put real state
# in it, serve it with the current library, ALTER EXTENSION jobq UPDATE (once
# at rest, once while workers claim and complete), and check that nothing
# was lost: jobs in every status, a running job's lease token, idempotency
# keys, schedules, handlers and grants; that the worker serves the database
# before and after; and that the upgraded schema is the schema of a fresh
# install.  A fresh install runs the current release's install script
# (jobq--<current>.sql, which make assembles from extension/schema/); an
# upgraded database ran jobq--0.1.0.sql and the upgrade scripts
# jobq--A--B.sql (0.2.0 has no install script: CREATE EXTENSION jobq
# VERSION '0.2.0' runs 0.1.0's and the upgrade to 0.2.0).  So the
# comparisons catch a change made in the schema sources and not in an
# upgrade script, or the other way round, as well as what depends on the
# state an upgraded database holds.
#
# The schema is compared read from the catalogs (functions with their
# definitions, settings and owners; relations, columns, defaults,
# constraints, indexes, views, triggers, sequences, types, comments,
# extension members, configuration tables in order) and as pg_dump
# --schema-only --binary-upgrade prints it (normalized).  Databases updated
# right after the old version's install are compared with their privileges
# and initial privileges (pg_init_privs) as well; databases with planted
# state without them (jobq.grant gave the planted role grants a fresh
# install lacks).  And CREATE EXTENSION jobq is checked to make nothing
# outside schema jobq and nothing that is not the extension's.
#
# The figures (jobs by status before and after, the time ALTER EXTENSION
# took, the waits clients saw under load) are TAP notes, in the test's
# regress_log.
use strict;
use warnings;
use IPC::Run;
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# every release users may have installed, oldest first
my @released = ('0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.3.2', '0.3.3', '0.3.4', '0.3.5', '0.3.6');

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

# jobq's schema, read from the catalogs: the extension and its schema,
# every function (its attributes, settings, owner and definition),
# relation, column, default, index, constraint, trigger, view, sequence,
# type, comment, extension member and configuration table (in the order of
# pg_extension.extconfig).  A plain pg_dump prints no member of an
# extension; schema_dump below compares pg_dump --binary-upgrade output as
# well, which does.  %PRIVILEGES% is where $privileges_query goes, or
# nothing.
my $schema_query = q{
	SELECT string_agg(d, E'\n' ORDER BY d) FROM (
		SELECT format('extension %s %s %s %s', e.extversion, e.extrelocatable, e.extnamespace::regnamespace,
		              pg_catalog.pg_get_userbyid(e.extowner))
		  FROM pg_catalog.pg_extension e WHERE e.extname = 'jobq'
		UNION ALL
		SELECT format('schema %s %s %s', n.nspname, pg_catalog.pg_get_userbyid(n.nspowner),
		              pg_catalog.obj_description(n.oid, 'pg_namespace'))
		  FROM pg_catalog.pg_namespace n WHERE n.nspname = 'jobq'
		UNION ALL
		SELECT format('function %s %s %s %s %s %s %s %s %s %s %s %s %s', p.oid::regprocedure, p.prokind,
		              p.provolatile, p.proisstrict, p.prosecdef, p.proparallel, p.proleakproof,
		              p.procost, p.prorows, p.proconfig, pg_catalog.pg_get_userbyid(p.proowner),
		              md5(pg_catalog.pg_get_functiondef(p.oid)),
		              pg_catalog.obj_description(p.oid, 'pg_proc'))
		  FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'jobq'::regnamespace AND p.prokind <> 'a'
		UNION ALL
		SELECT format('relation %s %s %s %s %s %s', c.relname, c.relkind, c.relpersistence, c.reloptions,
		              pg_catalog.pg_get_userbyid(c.relowner), pg_catalog.obj_description(c.oid, 'pg_class'))
		  FROM pg_catalog.pg_class c WHERE c.relnamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT format('column %s.%s %s %s %s %s %s %s %s %s', c.relname, a.attname, a.attnum,
		              pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
		              a.attidentity, a.attgenerated, a.attcollation::regcollation,
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
		SELECT format('sequence %s %s %s %s %s %s %s %s', s.seqrelid::regclass, s.seqtypid::regtype,
		              s.seqstart, s.seqincrement, s.seqmax, s.seqmin, s.seqcache, s.seqcycle)
		  FROM pg_catalog.pg_sequence s JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
		 WHERE c.relnamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT format('type %s %s', t.typname, t.typtype)
		  FROM pg_catalog.pg_type t WHERE t.typnamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT format('comment %s: %s', pg_catalog.pg_describe_object(d.classoid, d.objoid, d.objsubid),
		              d.description)
		  FROM pg_catalog.pg_description d
		 WHERE (pg_catalog.pg_identify_object(d.classoid, d.objoid, d.objsubid)).schema = 'jobq'
		UNION ALL
		SELECT 'member ' || pg_catalog.pg_describe_object(classid, objid, objsubid)
		  FROM pg_catalog.pg_depend
		 WHERE refclassid = 'pg_catalog.pg_extension'::regclass AND deptype = 'e'
		   AND refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'jobq')
		UNION ALL
		SELECT format('config %s %s %s', x.n, x.rel::regclass, x.cond)
		  FROM pg_catalog.pg_extension e, unnest(e.extconfig, e.extcondition) WITH ORDINALITY x(rel, cond, n)
		 WHERE e.extname = 'jobq'
		%PRIVILEGES%) s(d)
};

# the privileges on jobq's functions, relations and schema, and the initial
# privileges CREATE EXTENSION and ALTER EXTENSION recorded (pg_init_privs)
my $privileges_query = q{
		UNION ALL
		SELECT format('acl function %s %s', p.oid::regprocedure, p.proacl)
		  FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT format('acl relation %s %s', c.relname, c.relacl)
		  FROM pg_catalog.pg_class c WHERE c.relnamespace = 'jobq'::regnamespace
		UNION ALL
		SELECT format('acl schema %s %s', n.nspname, n.nspacl)
		  FROM pg_catalog.pg_namespace n WHERE n.nspname = 'jobq'
		UNION ALL
		SELECT format('initprivs %s %s %s', pg_catalog.pg_describe_object(i.classoid, i.objoid, i.objsubid),
		              i.privtype, i.initprivs)
		  FROM pg_catalog.pg_init_privs i
		 WHERE (pg_catalog.pg_identify_object(i.classoid, i.objoid, 0)).schema = 'jobq'
		    OR (i.classoid = 'pg_catalog.pg_namespace'::regclass AND i.objoid = 'jobq'::regnamespace)
};

# the schema, without privileges or with them
sub schema_of
{
	my ($db, $with_privileges) = @_;
	my $query = $schema_query;
	my $privileges = $with_privileges ? $privileges_query : '';
	$query =~ s/%PRIVILEGES%/$privileges/;
	return $node->safe_psql($db, $query);
}

sub write_file
{
	my ($path, $text) = @_;
	open(my $fh, '>', $path) or die "$path: $!";
	print $fh $text;
	close $fh or die "$path: $!";
}

# jobq's schema as pg_dump prints it.  A plain pg_dump prints no member of
# an extension (only CREATE EXTENSION); --binary-upgrade prints every member
# with its ALTER EXTENSION ... ADD line, and the extension's version,
# configuration tables and initial privileges, as pg_upgrade needs them.
# --schema=jobq --extension=jobq leave out what the test planted in other
# schemas.
sub schema_dump
{
	my ($db) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[ 'pg_dump', '--schema-only', '--binary-upgrade', '--schema=jobq', '--extension=jobq',
		  '-d', $node->connstr($db) ],
		'>', \$out, '2>', \$err)
	  or die "pg_dump of $db failed: $err";
	my $base = $node->basedir . "/dump_$db";
	write_file("$base.sql", $out);
	my $normalized = normalize_dump($db, $out);
	write_file("$base.normalized.sql", $normalized);
	return ($normalized, "$base.normalized.sql");
}

# What differs between two databases whatever their schemas, normalized
# away: OIDs, relfilenodes and xids (the binary_upgrade_set_next_* calls,
# the relfrozenxid / datfrozenxid updates, comment lines naming an OID; the
# configuration tables' OIDs in binary_upgrade_create_empty_extension become
# their names), sequences' current values (data), the grants the planted
# role up_app was given (jobq.grant), the random key of pg_dump's \restrict
# line, the database's name, and the order of the entries (pg_dump breaks
# ties by OID): each entry, from its "-- Name: ...; Type: ..." header on, is
# kept whole, entries left empty are dropped, and the rest are sorted.
sub normalize_dump
{
	my ($db, $dump) = @_;
	my @lines;
	my $skip = 0;
	for my $line (split /\n/, $dump)
	{
		if ($skip)    # the rest of a statement normalized away
		{
			$skip = 0 if $line =~ /;\s*$/;
			next;
		}
		if ($line =~ /^SELECT pg_catalog\.(binary_upgrade_set_next_|setval\()/
			|| $line =~ /^UPDATE pg_catalog\.pg_(class|database)\b/)
		{
			$skip = 1 unless $line =~ /;\s*$/;
			next;
		}
		next if $line =~ /^-- For binary upgrade, (must preserve|set \S+ relfrozenxid|set datfrozenxid)/;
		next if $line =~ /^--.*\bOID\b/;
		next if $line =~ /^\\(un)?restrict /;
		next if $line =~ /^(GRANT|REVOKE) .* (TO|FROM) up_app;$/;
		if ($line =~ /^SELECT pg_catalog\.binary_upgrade_create_empty_extension\(/)
		{
			$line =~ s{'\{([0-9,]*)\}'}{
				"'{" . $node->safe_psql($db, qq{
					SELECT string_agg(x::pg_catalog.regclass::text, ',' ORDER BY n)
					  FROM unnest('{$1}'::pg_catalog.oid[]) WITH ORDINALITY u(x, n)}) . "}'"
			}e;
		}
		$line =~ s/\b(DATABASE |datname = ')\Q$db\E\b/$1DBNAME/g;
		push @lines, $line;
	}
	my $text = join("\n", @lines) . "\n";
	my $trailer = $text =~ s/^(--\n-- PostgreSQL database dump complete\n.*)\z//ms ? $1 : '';
	my @entries = split /(?=^--\n-- Name: )/m, $text;
	my $preamble = shift @entries;
	s/\n{3,}/\n\n/g for @entries;
	@entries = grep { /^(?!--)\S/m } @entries;
	return join('', $preamble, sort(@entries), $trailer);
}

# diff -u of two normalized dumps, for diag
sub dump_diff
{
	my ($a, $b) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'diff', '-u', $a, $b ], '>', \$out, '2>', \$err);
	return "diff -u $a $b\n$out$err";
}

# $got equal to $expected, or a diff -u of the two (written to files named
# after $label) as the test's diagnostics
sub same_text
{
	my ($got, $expected, $label, $name) = @_;
	my $base = $node->basedir . "/$label";
	write_file("$base.expected", $expected);
	write_file("$base.got", $got);
	ok($got eq $expected, $name) or diag(dump_diff("$base.expected", "$base.got"));
}

# jobs by status, as one line for a note
my $status_query = q{
	SELECT coalesce(string_agg(format('%s %s', status, n), ', ' ORDER BY status), 'none')
	  FROM (SELECT status, count(*) AS n FROM jobq.jobs GROUP BY status) s
};

# ALTER EXTENSION jobq UPDATE, timed by psql (\timing: the statement alone)
# In $db: a job of kind $kind completed in queue pruned (retention 1 hour)
# and finished 2 hours ago goes with jobq.prune(); p.kept, completed there
# now, and every other job stay.
sub prune_check
{
	my ($db, $what, $kind) = @_;
	$node->safe_psql($db, qq{
		SELECT jobq.configure('pruned', retention_completed => '1 hour');
		SELECT jobq.enqueue('p.kept', '{}', 'pruned') WHERE NOT EXISTS (SELECT FROM jobq.job WHERE kind = 'p.kept');
		SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('pruned');
		SELECT jobq.enqueue('$kind', '{}', 'pruned');
	});
	my $others = $node->safe_psql($db, qq{SELECT count(*) FROM jobq.job WHERE kind <> '$kind'});
	$node->safe_psql($db, q{
		SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('pruned');
		UPDATE jobq.job SET finished_at = now() - interval '2 hours' WHERE queue = 'pruned' AND kind <> 'p.kept';
		SELECT jobq.prune();
	});
	is($node->safe_psql($db, qq{
		SELECT count(*) FILTER (WHERE kind = '$kind') || ' ' || count(*) FILTER (WHERE kind <> '$kind')
		  FROM jobq.job}),
		"0 $others", "$what: jobq.prune() removes the finished job past its queue's retention, and no other");
}

sub update_extension
{
	my ($db) = @_;
	my ($ret, $out, $err) = $node->psql($db, "\\timing on\nALTER EXTENSION jobq UPDATE");
	my ($ms) = $out =~ /^Time: ([0-9.]+) ms/m;
	return ($ret, $ms // 'unknown', $err);
}

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION jobq');
is($node->safe_psql('fresh', q{SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jobq'}),
	$current, 'a fresh install is at the current version');
my $fresh_schema = schema_of('fresh', 1);
cmp_ok(length($fresh_schema), '>', 10000, 'the schema description describes something');
like($fresh_schema, qr/^initprivs function jobq\.claim\(.*\{\w+=X\/\w+\}$/m,
	'the schema description holds initial privileges');
my ($fresh_dump, $fresh_file) = schema_dump('fresh');
cmp_ok(length($fresh_dump), '>', 10000, 'the schema dump holds something');
like($fresh_dump, qr/^ALTER EXTENSION jobq ADD TABLE jobq\.job;$/m, 'the schema dump holds the extension\'s members');

# --- a fresh install makes nothing but the extension's members -------------

# Every object of the catalogs (with its privileges), before and after
# CREATE EXTENSION jobq in a database of its own: what the install made or
# changed must be the extension, its schema, its members or their parts
# (indexes, constraints, triggers, defaults, row and array types, rules,
# TOAST tables), its members all in schema jobq, and its initial privileges
# only on those.
$node->safe_psql('postgres', 'CREATE DATABASE members');
$node->safe_psql('members', q{
	CREATE FUNCTION public.objects() RETURNS TABLE (classid oid, objid oid, acl text)
	LANGUAGE plpgsql AS $$
	DECLARE
		c record;
	BEGIN
		FOR c IN
			SELECT cl.oid AS cat, (SELECT a.attname FROM pg_attribute a
			                        WHERE a.attrelid = cl.oid AND a.atttypid = 'aclitem[]'::regtype) AS aclcol
			  FROM pg_class cl
			 WHERE cl.relnamespace = 'pg_catalog'::regnamespace AND cl.relkind = 'r'
			   AND EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = cl.oid AND a.attname = 'oid')
		LOOP
			RETURN QUERY EXECUTE format('SELECT %s::oid, oid, %s FROM %s', c.cat,
			                            COALESCE(quote_ident(c.aclcol) || '::text', 'NULL::text'),
			                            c.cat::regclass);
		END LOOP;
	END
	$$;
	CREATE TABLE public.objects_before (classid oid, objid oid, acl text);
	CREATE TABLE public.init_privs_before (LIKE pg_init_privs);
	INSERT INTO public.objects_before SELECT * FROM public.objects();
	INSERT INTO public.init_privs_before SELECT * FROM pg_init_privs;
});
$node->safe_psql('members', 'CREATE EXTENSION jobq');
is($node->safe_psql('members', q{
	WITH RECURSIVE owned(classid, objid) AS (
		SELECT 'pg_extension'::regclass::oid, e.oid FROM pg_extension e WHERE e.extname = 'jobq'
		UNION
		SELECT 'pg_namespace'::regclass::oid, 'jobq'::regnamespace::oid
		UNION
		SELECT d.classid, d.objid
		  FROM pg_depend d JOIN owned o ON d.refclassid = o.classid AND d.refobjid = o.objid
		 WHERE d.deptype IN ('e', 'a', 'i')
	), created AS (
		SELECT classid, objid FROM (SELECT * FROM public.objects() EXCEPT SELECT * FROM public.objects_before) x
	)
	SELECT string_agg(problem, E'\n' ORDER BY problem) FROM (
		SELECT 'made or changed by CREATE EXTENSION, not of the extension: '
		       || pg_describe_object(c.classid, c.objid, 0) AS problem
		  FROM created c
		 WHERE (c.classid, c.objid) NOT IN (SELECT classid, objid FROM owned)
		UNION ALL
		SELECT 'member outside schema jobq: ' || pg_describe_object(d.classid, d.objid, 0)
		  FROM pg_depend d
		 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
		   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'jobq')
		   AND (pg_identify_object(d.classid, d.objid, 0)).schema IS DISTINCT FROM 'jobq'
		UNION ALL
		SELECT 'initial privileges of what is not the extension''s: ' || pg_describe_object(i.classoid, i.objoid, i.objsubid)
		  FROM (SELECT * FROM pg_init_privs EXCEPT SELECT * FROM public.init_privs_before) i
		 WHERE (i.classoid, i.objoid) NOT IN (SELECT classid, objid FROM owned)
		UNION ALL
		SELECT 'nothing new of the extension: ' || count(*)
		  FROM created c
		 WHERE (c.classid, c.objid) IN (SELECT classid, objid FROM owned)
		HAVING count(*) < 100) p
}), '', 'CREATE EXTENSION jobq makes only members of the extension (and their parts), all in schema jobq');

# --- right after an upgrade: the schema with its privileges ----------------

# each released version installed and updated at once, nothing planted:
# the whole schema, privileges and initial privileges included, is a fresh
# install's
for my $old (@released)
{
	my $db = "up_" . ($old =~ s/\./_/gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION jobq VERSION '$old'");
	my ($ret, $ms, $err) = update_extension($db);
	is($ret, 0, "$old, nothing planted: ALTER EXTENSION jobq UPDATE succeeds") or diag($err);
	same_text(schema_of($db, 1), $fresh_schema, "schema_$db",
		"$old, nothing planted: the upgraded schema with its privileges and initial privileges is a fresh install's");
	my ($up_dump, $up_file) = schema_dump($db);
	ok($up_dump eq $fresh_dump,
		"$old, nothing planted: pg_dump --schema-only --binary-upgrade, normalized, is a fresh install's")
	  or diag(dump_diff($fresh_file, $up_file));
}

# --- with state: nothing lost ----------------------------------------------

for my $old (@released)
{
	my $db = "at_" . ($old =~ s/\./_/gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION jobq VERSION '$old'");
	plant($db);

	# deferred settling from before (0.2.0 on): a parent still there, and one
	# purged (0.3.3 gives each row its parent's queue; the purged one goes;
	# from 0.3.3 on a row names its queue, and none is left of a purged one)
	if ($old eq '0.1.0') { }
	elsif ($old lt '0.3.3')
	{
		$node->safe_psql($db, q{
			INSERT INTO jobq.settle_deferred (parent_id, retry_at, attempts)
			SELECT job_id, now() + interval '1 day', 0 FROM jobq.jobs WHERE kind = 'p.pending'
			UNION ALL SELECT 999999999, now() + interval '1 day', 0});
	}
	else
	{
		$node->safe_psql($db, q{
			INSERT INTO jobq.settle_deferred (parent_id, retry_at, attempts, queue)
			SELECT job_id, now() + interval '1 day', 0, queue FROM jobq.jobs
			 WHERE kind = 'p.pending'});
	}

	# a workflow from before (0.2.0 on): its root shows in jobq.workflows
	# after the upgrade (0.3.5 gives each edge its parent's queue, which the
	# view reads by)
	$node->safe_psql($db, q{
		SELECT jobq.enqueue('w.kid', '{}', 'wf',
		    depends_on => ARRAY[(SELECT job_id FROM jobq.enqueue('w.root', '{}', 'wf'))])})
	  if $old ne '0.1.0';

	# the current library serves a database still at the old version
	ok($node->poll_query_until($db,
		q{SELECT status = 'pending' AND retry_count = 1 FROM jobq.jobs WHERE kind = 'p.expiring'}),
		"$old: the worker reaps an expired lease before the upgrade");

	# the current library prunes a database still at the old version (its
	# finished jobs are indexed by finish time alone before 0.3.7) and the
	# upgraded one (queue by queue): the finished job past its queue's
	# retention goes, every other job stays
	prune_check($db, "$old, before the upgrade", 'p.pruned.before');

	my $before = $node->safe_psql($db, $state_query);
	my $effects_before = $node->safe_psql($db, 'SELECT count(*) FROM app.effects');
	my $statuses_before = $node->safe_psql($db, $status_query);

	my ($ret, $ms, $err) = update_extension($db);
	is($ret, 0, "$old: ALTER EXTENSION jobq UPDATE succeeds") or diag($err);
	note("$old at rest: ALTER EXTENSION jobq UPDATE took $ms ms");
	note("$old at rest: jobs before the upgrade: $statuses_before");
	note("$old at rest: jobs after the upgrade: " . $node->safe_psql($db, $status_query));
	is($node->safe_psql($db, q{SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'jobq'}),
		$current, "$old: now at $current");

	is($node->safe_psql($db, $state_query), $before, "$old: every job, schedule and handler kept");
	is($node->safe_psql($db, q{
		SELECT string_agg(s.queue || ' ' || j.kind, ',') FROM jobq.settle_deferred s
		  LEFT JOIN jobq.jobs j ON j.job_id = s.parent_id}),
		'default p.pending', "$old: a deferred parent's row names its queue, a purged parent's is gone")
	  if $old ne '0.1.0';
	is($node->safe_psql($db, q{
		SELECT string_agg(queue || ' ' || kind || ' ' || total || ' ' || blocked, ',') FROM jobq.workflows}),
		'wf w.root 2 1', "$old: a workflow from before shows in jobq.workflows")
	  if $old ne '0.1.0';

	# a role granted before the update reads the views of queues as before,
	# with no new grant: they read jobq.usable_queue (0.3.6) with their
	# owner's rights and call only jobq.may_use_queue
	is($node->safe_psql($db, q{
		SET ROLE up_app;
		SELECT (SELECT string_agg(queue, ',' ORDER BY queue) FROM jobq.queues) || ' '
		       || (SELECT string_agg(queue, ',' ORDER BY queue) FROM jobq.queue_stats)}),
		$node->safe_psql($db, q{
		SELECT string_agg(name, ',' ORDER BY name) || ' ' || string_agg(name, ',' ORDER BY name)
		  FROM jobq.queue WHERE name IN ('default', 'inproc')}),
		"$old: a role granted before reads jobq.queues and jobq.queue_stats of its queues after the update");
	is($node->safe_psql($db, q{SET ROLE up_app; SELECT count(*) FROM jobq.workflows}), '0',
		"$old: and jobq.workflows (none in its queues)")
	  if $old ne '0.1.0';

	# roles granted before the update get the release's new functions when
	# jobq.grant runs again (docs/operations.md, Upgrading)
	is( $node->safe_psql(
			$db, q{
		SELECT count(jobq.grant(queue, role, capability)) > 0 FROM jobq.permission;
		SELECT bool_and(has_function_privilege('up_app', f, 'EXECUTE'))
		  FROM unnest(ARRAY['jobq.release(bigint,bigint)', 'jobq.release_running(text,text)',
		                    'jobq.update_job(bigint,jsonb,timestamptz,integer,integer)',
		                    'jobq.run_schedule(text)']) f
		 WHERE to_regprocedure(f) IS NOT NULL}),
		"t\nt", "$old: jobq.grant run again gives a role granted before the update the new functions");
	is($node->safe_psql($db, q{
		SELECT jobq.complete(job_id, lease_token, '{"after": "upgrade"}') FROM public.lease}),
		't', "$old: a lease token from before the upgrade completes its job");
	is($node->safe_psql($db, q{
		SELECT created FROM jobq.enqueue('p.keyed', '{"n": 4}', idempotency_key => 'key-1')}),
		'f', "$old: an idempotency key from before still de-duplicates");
	is($node->safe_psql($db, q{
		SET ROLE up_app; SELECT created FROM jobq.enqueue('p.granted', '{}')}),
		't', "$old: a grant from before still holds");
	is($node->safe_psql($db, q{
		SET ROLE up_app;
		SELECT count(*) FROM jobq.enqueue('p.child', '{}',
		    depends_on => ARRAY(SELECT job_id FROM jobq.jobs WHERE kind IN ('p.failed', 'p.pending')));
		SELECT status || ' ' || last_error FROM jobq.jobs WHERE kind = 'p.child'}),
		"1\ncancelled parent job " . $node->safe_psql($db, q{SELECT job_id FROM jobq.jobs WHERE kind = 'p.failed'})
		  . " did not complete",
		"$old: jobs from before are parents (a failed one cancels the new dependent)");

	prune_check($db, "$old, after the upgrade", 'p.pruned.after');
	is($node->safe_psql($db, q{
		SELECT completed || ' ' || cancelled || ' ' || blocked || ' ' || completed_last_hour
		  FROM jobq.queue_stats WHERE queue = 'pruned'}),
		'1 0 0 1', "$old: jobq.queue_stats counts a queue's finished jobs after the upgrade");
	is($node->safe_psql($db, q{
		SELECT kind || ' ' || completed FROM jobq.kind_stats(queue => 'pruned')}),
		'p.kept 1', "$old: and jobq.kind_stats");

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

	same_text(schema_of($db, 0), schema_of('fresh', 0), "schema_$db",
		"$old: the upgraded schema is a fresh install's");
	my ($up_dump, $up_file) = schema_dump($db);
	ok($up_dump eq $fresh_dump,
		"$old: pg_dump --schema-only --binary-upgrade of the upgraded database, normalized, is a fresh install's")
	  or diag(dump_diff($fresh_file, $up_file));
	my $dump = `pg_dump -d "@{[ $node->connstr($db) ]}" 2>&1`;
	is($?, 0, "$old: pg_dump of the upgraded database succeeds") or diag($dump);
}

# --- upgrading while workers claim and complete ------------------------------

# the clients' side of an upgrade under load, as notes: from pgbench's
# per-transaction logs, the transactions that were open while ALTER
# EXTENSION ran (from t0 to t1, by this script's clock) and the longest of
# them (the wait a client saw), against the median of all
sub busy_figures
{
	my ($old, $prefix, $t0, $t1, $out) = @_;
	my (@all, @during);
	for my $file (glob("$prefix.*"))
	{
		open(my $fh, '<', $file) or die "$file: $!";
		while (<$fh>)
		{
			# client_id transaction_no latency_us script_no end_s end_us
			my ($lat, $end_s, $end_us) = (split)[ 2, 4, 5 ];
			next unless defined $end_us;
			my $end = $end_s + $end_us / 1e6;
			my $start = $end - $lat / 1e6;
			push @all, $lat;
			push @during, $lat if $start < $t1 && $end > $t0;
		}
		close $fh;
	}
	my @sorted = sort { $a <=> $b } @all;
	my $median = @sorted ? $sorted[ int($#sorted / 2) ] / 1000 : 0;
	my $max_during = 0;
	$max_during < $_ and $max_during = $_ for @during;
	my ($tps) = $out =~ /^tps = ([0-9.]+)/m;
	note(sprintf("%s under load: %d client transactions (%s tps), median latency %.1f ms",
			$old, scalar @all, $tps // '?', $median));
	note(sprintf("%s under load: %d transactions overlapped the upgrade (%.0f ms by the test's clock); "
			. "the longest took %.1f ms (the wait clients saw)",
			$old, scalar @during, ($t1 - $t0) * 1000, $max_during / 1000));
}
for my $old (@released)
{
	my $db = "busy_" . ($old =~ s/\./_/gr);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, "CREATE EXTENSION jobq VERSION '$old'");
	$node->safe_psql($db, q{
		SELECT count(*) FROM jobq.enqueue_many('busy', array_fill('{}'::jsonb, ARRAY[1000]));
		SELECT count(*) FROM jobq.enqueue_many('busyfail', array_fill('{}'::jsonb, ARRAY[1000]));
	});
	# workers that hold a job while they read a view and write the attempt
	# history: each step of the update changes some of these, and one that
	# locked them before jobq.job deadlocked with such a worker (0.3.7's
	# first version, from 0.2.0 to 0.3.5; a review's find)
	my $script = $node->basedir . '/busy.sql';
	open(my $fh, '>', $script) or die;
	print $fh q{
BEGIN;
SELECT jobq.complete(job_id, lease_token) FROM jobq.claim(kinds => ARRAY['busy']);
SELECT count(*) FROM jobq.queue_stats;
SELECT count(*) FROM jobq.enqueue('busy', '{}');
COMMIT;
};
	close $fh;
	my $fail_script = $node->basedir . '/busyfail.sql';
	open($fh, '>', $fail_script) or die;
	print $fh q{
BEGIN;
SELECT jobq.fail(job_id, lease_token, 'boom', false) FROM jobq.claim(kinds => ARRAY['busyfail']);
SELECT count(*) FROM jobq.kind_stats;
SELECT count(*) FROM jobq.enqueue('busyfail', '{}');
COMMIT;
};
	close $fh;
	my ($out, $err) = ('', '');
	# -l: every transaction's latency (µs) and end time, to see the waits the
	# upgrade caused
	my $log_prefix = $node->basedir . "/pgbench_$db";
	my $bench = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', '6', '-l', "--log-prefix=$log_prefix",
		  '-f', $script, '-f', $fail_script, $node->connstr($db) ],
		'>', \$out, '2>', \$err);
	# let the workers run, then upgrade under them
	ok($node->poll_query_until($db,
		q{SELECT count(*) >= 100 FROM jobq.jobs WHERE status = 'completed'}),
		"$old: workers complete jobs");
	my $t0 = time;
	my ($ret, $ms, $e) = update_extension($db);
	my $t1 = time;
	is($ret, 0, "$old: ALTER EXTENSION jobq UPDATE under load succeeds") or diag($e);
	$bench->finish;
	note("$old under load: ALTER EXTENSION jobq UPDATE took $ms ms");
	busy_figures($old, $log_prefix, $t0, $t1, $out);
	note("$old under load: jobs after the upgrade: " . $node->safe_psql($db, $status_query));
	is($bench->result(0), 0, "$old: the workers saw no error") or diag($err);
	unlike($err, qr/ERROR|FATAL/, "$old: no error in the workers' output");
	like($out, qr/number of failed transactions: 0/, "$old: no failed transaction")
	  or diag($out);
	is($node->safe_psql($db, q{
		SELECT count(*) FROM jobq.jobs WHERE status NOT IN ('pending', 'completed', 'running')
		   AND NOT (kind = 'busyfail' AND status = 'failed')}),
		'0', "$old: no job lost or broken under the upgrade");
}

$node->stop;
done_testing();
