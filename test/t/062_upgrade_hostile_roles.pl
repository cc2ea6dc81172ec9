# Upgrading from 0.1.0 when role names hold what a quoted identifier may
# hold.  0.2.0 re-creates jobq.enqueue and jobq.enqueue_many (they gain
# depends_on), so the upgrade script carries every grantee of EXECUTE on the
# old functions (PUBLIC and grant options included) over to the new ones.
# Here, on a 0.1.0 install, roles named with ; , " ' \ % spaces, newlines,
# upper case, a leading digit, multibyte characters, the longest name (63
# bytes), a reserved word and "PUBLIC" (a role, not the keyword) get jobq
# capabilities with jobq.grant, and EXECUTE on enqueue / enqueue_many
# directly (WITH GRANT OPTION, from a non-owner grantor, on one function
# only, to PUBLIC), the way 0.1.0 users had them; one of them is created and
# granted by a queue administrator that is no superuser but has CREATEROLE.
# Then ALTER EXTENSION jobq UPDATE must succeed; every role must hold on the
# new enqueue / enqueue_many exactly what it held on the old ones (the same
# grantees, the same grant options) and be able to call them as before;
# and nothing else may have been granted to anyone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('hostile_roles');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'\n");
$node->start;

# UTF8 whatever the machine's locale (a fresh root's initdb picks SQL_ASCII)
$node->safe_psql('postgres', q{CREATE DATABASE roles ENCODING 'UTF8' LOCALE 'C' TEMPLATE template0});
my $db = 'roles';
$node->safe_psql($db, q{CREATE EXTENSION jobq VERSION '0.1.0'});

my $old_enqueue = 'jobq.enqueue(text, jsonb, text, integer, timestamptz, integer, text, text)';
my $old_enqueue_many = 'jobq.enqueue_many(text, jsonb[], text, integer, timestamptz, integer, text[], text)';

# The roles, by label (the test's names for them; the names themselves are
# built in SQL, so this file stays ASCII), and the test's helpers: t.name()
# gives a label's role name, t.as_role() runs a statement as that role and
# says how it went.
$node->safe_psql($db, q{
	CREATE SCHEMA t;
	CREATE TABLE t.role (label text PRIMARY KEY, name name NOT NULL UNIQUE);
	INSERT INTO t.role VALUES
		('admin',          'tenant;admin'),     -- CREATEROLE, administers queue tenant
		('app',            'tenant;app'),       -- made and granted by admin
		('comma',          'a,b c'),
		('quote',          'say "hi"; now'),
		('upper',          'UPPER;Case'),
		('digit',          '1st;role'),         -- work only: no enqueue
		('multibyte',      U&'r\00F4le;\65E5\672C'),
		('long_ascii',     '"' || repeat(';"', 31)),           -- 63 bytes
		('long_multibyte', repeat(U&'\65E5;', 15) || U&'\65E5'), -- 63 bytes
		('public_upper',   'PUBLIC'),           -- a role, not the keyword
		('keyword',        'current_user'),     -- EXECUTE on enqueue_many WITH GRANT OPTION
		('grantopt',       'grant;opt'),        -- EXECUTE on both WITH GRANT OPTION
		('by_grantopt',    'by grant;opt'),     -- EXECUTE on enqueue granted by grantopt
		('only_enqueue',   'only;enqueue'),     -- EXECUTE on enqueue only
		('odd',            E'new\nline''s \\ %I'),
		('bystander',      'by;stander');       -- nothing (but what PUBLIC has)
	CREATE FUNCTION t.name(label text) RETURNS name LANGUAGE sql STABLE
		AS $$ SELECT r.name FROM t.role r WHERE r.label = $1 $$;
	CREATE FUNCTION t.r(label text) RETURNS regrole LANGUAGE sql STABLE
		AS $$ SELECT a.oid::regrole FROM pg_roles a WHERE a.rolname = t.name($1) $$;
	-- 'ok', or what refused the statement: 'no EXECUTE' (on the function),
	-- 'no USAGE' (on schema jobq), 'no capability' (jobq's own check), or
	-- the error message
	CREATE FUNCTION t.as_role(label text, stmt text) RETURNS text LANGUAGE plpgsql AS $$
	DECLARE
		who name := t.name(label);
	BEGIN
		PERFORM set_config('role', who, true);
		EXECUTE stmt;
		PERFORM set_config('role', 'none', true);
		RETURN 'ok';
	EXCEPTION WHEN OTHERS THEN
		RETURN CASE WHEN SQLERRM LIKE 'permission denied for function %' THEN 'no EXECUTE'
		            WHEN SQLERRM LIKE 'permission denied for schema %' THEN 'no USAGE'
		            WHEN SQLERRM LIKE 'permission denied to % queue %' THEN 'no capability'
		            ELSE SQLERRM END;
	END $$;
});
is($node->safe_psql($db, q{
	SELECT string_agg(label || ' ' || octet_length(name), ',' ORDER BY label) FROM t.role
	 WHERE label LIKE 'long%'}),
	'long_ascii 63,long_multibyte 63', 'the longest names are 63 bytes long');

# --- 0.1.0: the roles and their grants ---------------------------------------

$node->safe_psql($db, q{
	DO $$
	DECLARE r record;
	BEGIN
		FOR r IN SELECT * FROM t.role WHERE label <> 'app' LOOP
			EXECUTE format('CREATE ROLE %I', r.name);
		END LOOP;
		EXECUTE format('ALTER ROLE %I LOGIN CREATEROLE', t.name('admin'));
	END $$;
	SELECT jobq.grant('tenant', t.r('admin'), 'administer');
	SELECT jobq.grant('default', t.r(l), 'enqueue')
	  FROM unnest(ARRAY['comma', 'quote', 'upper', 'multibyte', 'long_ascii', 'long_multibyte',
	                    'public_upper', 'odd', 'grantopt']) l;
	SELECT jobq.grant('default', t.r('digit'), 'work');
});

# the issue's way in: a queue administrator that is no superuser, with
# CREATEROLE, makes a role and gives it a capability on its queue
is($node->safe_psql($db, q{
	DO $$
	DECLARE
		admin name := t.name('admin');
		app   name := t.name('app');
	BEGIN
		PERFORM set_config('role', admin, true);
		EXECUTE format('CREATE ROLE %I', app);
		PERFORM jobq.grant('tenant', (SELECT oid FROM pg_roles WHERE rolname = app)::regrole, 'enqueue');
		PERFORM set_config('role', 'none', true);
	END $$;
	SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = t.name('admin');
	SELECT queue || ' ' || capability || ' ' || (granted_by = t.r('admin'))
	  FROM jobq.permission WHERE role = t.r('app');
}), "f|t\ntenant enqueue true", 'a queue administrator without superuser made a role and granted it enqueue');

# EXECUTE granted directly, as 0.1.0 users did: with the grant option, by a
# grantor that is not the owner, on one of the two functions, to PUBLIC
$node->safe_psql($db, qq{
	DO \$\$
	DECLARE
		grantopt name := t.name('grantopt');
		by_grantopt name := t.name('by_grantopt');
	BEGIN
		EXECUTE format('GRANT EXECUTE ON FUNCTION $old_enqueue, $old_enqueue_many TO %I WITH GRANT OPTION',
		               grantopt);
		EXECUTE format('GRANT EXECUTE ON FUNCTION $old_enqueue_many TO %I WITH GRANT OPTION',
		               t.name('keyword'));
		EXECUTE format('GRANT EXECUTE ON FUNCTION $old_enqueue TO %I', t.name('only_enqueue'));
		EXECUTE format('GRANT USAGE ON SCHEMA jobq TO %I, %I, %I',
		               t.name('keyword'), t.name('only_enqueue'), by_grantopt);
		GRANT EXECUTE ON FUNCTION $old_enqueue_many TO PUBLIC;
		PERFORM set_config('role', grantopt, true);
		EXECUTE format('GRANT EXECUTE ON FUNCTION $old_enqueue TO %I', by_grantopt);
		PERFORM set_config('role', 'none', true);
	END \$\$;
});

# Every privilege on jobq's schema, relations and functions held by a role
# other than the object's owner, one row per object name (enqueue keeps its
# name when its arguments change), grantee, privilege and grant option
# (whoever granted it: the update re-grants as the owner), as text.
$node->safe_psql($db, q{
	CREATE VIEW t.acl AS
	SELECT format('%s %s: %s to %s%s', o.kind, o.name, a.privilege_type,
	              COALESCE(r.label, CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END),
	              CASE WHEN bool_or(a.is_grantable) THEN ' WITH GRANT OPTION' ELSE '' END) AS what,
	       o.kind, o.name
	  FROM (SELECT 'function' AS kind, p.proname::text AS name, p.proacl AS acl,
	               'f'::"char" AS objtype, p.proowner AS owner
	          FROM pg_proc p WHERE p.pronamespace = 'jobq'::regnamespace
	        UNION ALL
	        SELECT 'relation', c.relname, c.relacl,
	               (CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END)::"char", c.relowner
	          FROM pg_class c
	         WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
	        UNION ALL
	        SELECT 'schema', n.nspname, n.nspacl, 'n'::"char", n.nspowner
	          FROM pg_namespace n WHERE n.nspname = 'jobq') o
	 CROSS JOIN LATERAL aclexplode(COALESCE(o.acl, acldefault(o.objtype, o.owner))) a
	  LEFT JOIN pg_roles g ON g.oid = a.grantee
	  LEFT JOIN t.role r ON r.name = g.rolname
	 WHERE a.grantee <> o.owner
	 GROUP BY o.kind, o.name, a.grantee, a.privilege_type, r.label;

	-- what each role may do with enqueue and enqueue_many (whichever exist)
	CREATE VIEW t.may AS
	SELECT string_agg(format('%s %s: %s%s', r.label, f.fn,
	                         CASE WHEN has_function_privilege(a.oid, f.fn::regproc::oid, 'EXECUTE')
	                              THEN 'EXECUTE' ELSE 'nothing' END,
	                         CASE WHEN has_function_privilege(a.oid, f.fn::regproc::oid,
	                                                          'EXECUTE WITH GRANT OPTION')
	                              THEN ' WITH GRANT OPTION' ELSE '' END),
	                  E'\n' ORDER BY r.label, f.fn) AS may
	  FROM t.role r JOIN pg_roles a ON a.rolname = r.name,
	       (VALUES ('jobq.enqueue'), ('jobq.enqueue_many')) f(fn);

	CREATE TABLE t.acl_before AS SELECT * FROM t.acl;
	CREATE TABLE t.may_before AS SELECT * FROM t.may;
});

# what the grants above give (PUBLIC has EXECUTE on enqueue_many)
my %expected_may = (
	admin          => [ 'EXECUTE',                    'EXECUTE' ],
	app            => [ 'EXECUTE',                    'EXECUTE' ],
	bystander      => [ 'nothing',                    'EXECUTE' ],
	by_grantopt    => [ 'EXECUTE',                    'EXECUTE' ],
	comma          => [ 'EXECUTE',                    'EXECUTE' ],
	digit          => [ 'nothing',                    'EXECUTE' ],
	grantopt       => [ 'EXECUTE WITH GRANT OPTION',  'EXECUTE WITH GRANT OPTION' ],
	keyword        => [ 'nothing',                    'EXECUTE WITH GRANT OPTION' ],
	long_ascii     => [ 'EXECUTE',                    'EXECUTE' ],
	long_multibyte => [ 'EXECUTE',                    'EXECUTE' ],
	multibyte      => [ 'EXECUTE',                    'EXECUTE' ],
	odd            => [ 'EXECUTE',                    'EXECUTE' ],
	only_enqueue   => [ 'EXECUTE',                    'EXECUTE' ],
	public_upper   => [ 'EXECUTE',                    'EXECUTE' ],
	quote          => [ 'EXECUTE',                    'EXECUTE' ],
	upper          => [ 'EXECUTE',                    'EXECUTE' ]);
my $expected_may = join("\n",
	map { ("$_ jobq.enqueue: $expected_may{$_}[0]", "$_ jobq.enqueue_many: $expected_may{$_}[1]") }
	  sort keys %expected_may);
is($node->safe_psql($db, 'SELECT may FROM t.may_before'), $expected_may,
	'0.1.0: the roles hold EXECUTE on enqueue / enqueue_many as planted');
my $enqueue_acl_query = q{
	SELECT string_agg(what, E'\n' ORDER BY what) FROM %s
	 WHERE kind = 'function' AND name IN ('enqueue', 'enqueue_many')};
my $enqueue_acl_before = $node->safe_psql($db, sprintf($enqueue_acl_query, 't.acl_before'));
note("0.1.0: EXECUTE on enqueue / enqueue_many:\n$enqueue_acl_before");
like($enqueue_acl_before, qr/^function enqueue_many: EXECUTE to PUBLIC$/m,
	'0.1.0: PUBLIC has EXECUTE on enqueue_many');
like($enqueue_acl_before, qr/^function enqueue: EXECUTE to by_grantopt$/m,
	'0.1.0: a grant from a non-owner grantor is there');

# how calling enqueue and enqueue_many goes for each role
sub calls
{
	return $node->safe_psql($db, q{
		SELECT string_agg(format('%s: enqueue %s, enqueue_many %s', label,
		    t.as_role(label, format('SELECT jobq.enqueue(%L, %L, %L)', 'hostile', '{}', q)),
		    t.as_role(label, format('SELECT jobq.enqueue_many(%L, ARRAY[%L]::jsonb[], %L)', 'hostile', '{}', q))),
		    E'\n' ORDER BY label)
		  FROM (SELECT label, CASE WHEN label IN ('admin', 'app') THEN 'tenant' ELSE 'default' END AS q
		          FROM t.role) r});
}
my %expected_calls = (
	admin          => [ 'ok',            'ok' ],
	app            => [ 'ok',            'ok' ],
	bystander      => [ 'no USAGE',      'no USAGE' ],
	by_grantopt    => [ 'no capability', 'no capability' ],
	comma          => [ 'ok',            'ok' ],
	digit          => [ 'no EXECUTE',    'no capability' ],
	grantopt       => [ 'ok',            'ok' ],
	keyword        => [ 'no EXECUTE',    'no capability' ],
	long_ascii     => [ 'ok',            'ok' ],
	long_multibyte => [ 'ok',            'ok' ],
	multibyte      => [ 'ok',            'ok' ],
	odd            => [ 'ok',            'ok' ],
	only_enqueue   => [ 'no capability', 'no capability' ],
	public_upper   => [ 'ok',            'ok' ],
	quote          => [ 'ok',            'ok' ],
	upper          => [ 'ok',            'ok' ]);
my $expected_calls = join("\n",
	map { "$_: enqueue $expected_calls{$_}[0], enqueue_many $expected_calls{$_}[1]" }
	  sort keys %expected_calls);
is(calls(), $expected_calls, '0.1.0: each role calls enqueue / enqueue_many as its grants allow');

# --- the update ----------------------------------------------------------------

my $current = $node->safe_psql($db,
	q{SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'jobq'});
my ($ret, $out, $err) = $node->psql($db, 'ALTER EXTENSION jobq UPDATE');
is($ret, 0, 'ALTER EXTENSION jobq UPDATE from 0.1.0 succeeds with these role names') or diag($err);
is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'jobq'}),
	$current, "now at $current");
is($node->safe_psql($db, q{
	SELECT string_agg(p.oid::regprocedure::text, E'\n' ORDER BY p.proname) FROM pg_proc p
	 WHERE p.pronamespace = 'jobq'::regnamespace AND p.proname IN ('enqueue', 'enqueue_many')}),
	"jobq.enqueue(text,jsonb,text,integer,timestamp with time zone,integer,text,text,bigint[],text)\n"
	  . "jobq.enqueue_many(text,jsonb[],text,integer,timestamp with time zone,integer,text[],text,bigint[],text)",
	'enqueue and enqueue_many were re-created with depends_on');

is($node->safe_psql($db, sprintf($enqueue_acl_query, 't.acl')), $enqueue_acl_before,
	'the new enqueue / enqueue_many have the grantees of the old ones, with their grant options');
is($node->safe_psql($db, 'SELECT may FROM t.may'), $expected_may,
	'every role may do with the new enqueue / enqueue_many what it could with the old ones');
is($node->safe_psql($db, q{
	SELECT string_agg(what, E'\n' ORDER BY what)
	  FROM (SELECT what FROM t.acl EXCEPT SELECT what FROM t.acl_before) x}),
	'', 'the update granted nothing else to anyone');
is(calls(), $expected_calls, 'each role calls the new enqueue / enqueue_many as before');

$node->stop;
done_testing();
