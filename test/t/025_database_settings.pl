# Settings a database owner may give every session of a database (ALTER
# DATABASE ... SET) do not stop jobq's own processes there: with
# transaction_timeout = 100ms (PostgreSQL 17 and later; it terminates a
# process whose transaction outlives it), default_transaction_read_only = on
# and default_transaction_isolation = serializable, the database's worker
# still reaps an expired lease and fires a schedule, and an executor runs a
# handler that takes longer than the timeout.  Client sessions keep the
# settings: they are the database owner's to give.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('dbsettings');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.executors = 1\n");
$node->start;

my $v17 = $node->safe_psql('postgres', 'SHOW server_version_num') >= 170000;

$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', q{
	CREATE EXTENSION jobq;
	CREATE FUNCTION public.slow(payload jsonb) RETURNS jsonb LANGUAGE sql
	  AS $$ SELECT pg_catalog.pg_sleep(0.5); SELECT '{"slept": true}'::pg_catalog.jsonb $$;
	SELECT jobq.register_handler('slow', 'public.slow(jsonb)', allow_superuser => true);
	SELECT jobq.enqueue('vanish', max_retries => 0);
});
my @settings = (
	"default_transaction_read_only = on",
	"default_transaction_isolation = 'serializable'");
push @settings, "transaction_timeout = '100ms'" if $v17;
$node->safe_psql('postgres', "ALTER DATABASE app SET $_") for @settings;
# the settings' new values reach processes that connect from now on
$node->restart;
note('database settings: ' . join(', ', @settings));

# a client session of the database has them
is($node->safe_psql('app', 'SHOW default_transaction_read_only'), 'on',
	'a client session is read-only by default');
if ($v17)
{
	my ($rc, $out, $err) = $node->psql('app', 'SELECT pg_sleep(0.3)');
	like($err, qr/transaction timeout/, 'a client transaction over 100ms is terminated');
}

# the test's own transactions below are exempt (on a busy machine they take
# longer than 100ms): the session setting overrides the database's
my $exempt = $v17 ? 'SET transaction_timeout = 0;' : '';

# the worker and the executor of the database still do their work
ok($node->poll_query_until('app',
	q{SELECT count(*) = 1 FROM jobq.workers WHERE role = 'worker' AND database = 'app'}),
	'a worker serves the database');

$node->safe_psql('app', qq{
	$exempt
	BEGIN READ WRITE;
	SELECT count(*) FROM jobq.claim(kinds => ARRAY['vanish'], lease => '1 second');
	COMMIT;
});
ok($node->poll_query_until('app',
	q{SELECT status = 'failed' AND last_error = 'lease expired' FROM jobq.jobs WHERE kind = 'vanish'}),
	'the worker reaps an expired lease');

$node->safe_psql('app', qq{
	$exempt
	BEGIN READ WRITE;
	SELECT jobq.schedule('tick', '* * * * * *', 'tick', misfire => 'skip');
	SELECT count(*) FROM jobq.enqueue('slow');
	COMMIT;
});
ok($node->poll_query_until('app', q{SELECT count(*) >= 2 FROM jobq.jobs WHERE kind = 'tick'}),
	'the worker fires a schedule every second');
ok($node->poll_query_until('app',
	q{SELECT status = 'completed' AND result = '{"slept": true}' FROM jobq.jobs WHERE kind = 'slow'}),
	'an executor runs a handler of 0.5 s to the end');

# nothing of jobq's was terminated
my $log = slurp_file($node->logfile);
unlike($log, qr/jobq (worker|executor|launcher).*transaction timeout/,
	'no jobq process was terminated by transaction_timeout');
unlike($log, qr/jobq (worker|executor).*read-only transaction/,
	'no jobq process hit a read-only transaction');

$node->stop;
done_testing();
