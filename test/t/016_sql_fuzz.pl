# SQL-level random-input fuzzing of jobq's API (driver: test/fuzz/fuzz.sql).
#
# Some thousands of calls of random functions with random awkward arguments,
# in batches (one transaction each, every other one REPEATABLE READ; each
# call in a subtransaction), on a
# server with the background worker and an executor running.  Every call
# must end in a result or a clean ERROR: never an internal error (SQLSTATE
# class XX), never a crash (the server answers after each batch and its log
# shows no crashed process), never a half-written row (an erroring call
# leaves jobq's row counts as they were) and never a broken invariant.
#
# The seed is printed; JOBQ_FUZZ_SEED=<n> repeats a run, JOBQ_FUZZ_CALLS sets
# the number of calls (default 3000), JOBQ_FUZZ_SKIP=fn,... leaves functions
# out.  A crash names the last call the server log shows.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use File::Basename qw(dirname);

my $seed = $ENV{JOBQ_FUZZ_SEED} // (time() % 100000);
my $calls = $ENV{JOBQ_FUZZ_CALLS} // 3000;
my $batch = 250;
diag("fuzz seed $seed (JOBQ_FUZZ_SEED=$seed repeats it), $calls calls");

my $node = PostgreSQL::Test::Cluster->new('fuzz');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.naptime = 100ms\njobq.executors = 1\n"
	  . "jobq.max_payload_size = 64kB\ndeadlock_timeout = 100ms\n");
$node->start;

my $driver = dirname(__FILE__) . '/../fuzz/fuzz.sql';
$node->safe_psql('postgres', 'CREATE EXTENSION jobq');
$node->safe_psql('postgres', slurp_file($driver));
# JOBQ_FUZZ_SKIP=fn,fn leaves functions out (to look past a known crash)
if ($ENV{JOBQ_FUZZ_SKIP})
{
	diag("leaving out: $ENV{JOBQ_FUZZ_SKIP}");
	$node->safe_psql('postgres',
		"DELETE FROM fuzz.api WHERE fn = ANY (string_to_array('$ENV{JOBQ_FUZZ_SKIP}', ','))");
}
# a few jobs in every state to start from
$node->safe_psql('postgres', q{
	SELECT jobq.enqueue('k' || i % 3, jsonb_build_object('i', i), 'q' || i % 2,
	                    idempotency_key => CASE WHEN i % 4 = 0 THEN 'key' || i END)
	  FROM generate_series(1, 40) i;
	SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('q0', batch => 5);
	SELECT jobq.fail(job_id, lease_token, 'no', retryable => false) FROM jobq.claim('q1', batch => 5);
	SELECT count(*) FROM jobq.claim('q0', batch => 5, lease => '1 hour');
});

my $t0 = time();
my $alive = 1;
for (my $first = 1; $first <= $calls && $alive; $first += $batch)
{
	my $n = $first + $batch - 1 > $calls ? $calls - $first + 1 : $batch;
	# a seed in [-1, 1] per batch, derived from the run's seed
	my $s = (($seed * 7919 + $first) % 200001) / 100000 - 1;
	# every other batch under REPEATABLE READ, where half-writes are checked
	my $iso = ($first / $batch) % 2 ? 'REPEATABLE READ' : 'READ COMMITTED';
	my ($ret, $out, $err) = $node->psql('postgres',
		"BEGIN ISOLATION LEVEL $iso; SELECT fuzz.run($s, $n, $first); COMMIT;");
	if ($ret != 0)
	{
		my @logged = (slurp_file($node->logfile) =~ /jobq fuzz call (\d+: [^\n]*)/g);
		diag("batch from call $first failed: $err\nlast call logged: " . ($logged[-1] // 'none')
			  . "\n(when that is the batch's last call, the crash may have come at its COMMIT)");
		fail("batch from call $first ran");
	}
	$alive = $node->safe_psql('postgres', 'SELECT 1') eq '1';
	last if $node->safe_psql('postgres', q{SELECT n FROM fuzz.tally WHERE what = 'broken'}) ne '0';
}
ok($alive, 'the server answers after every batch');
my $secs = time() - $t0;

my %tally = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres', 'SELECT what, n FROM fuzz.tally');
my $histogram = $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s %s', sqlstate, n), ', ' ORDER BY n DESC, sqlstate)
	  FROM (SELECT sqlstate, count(*) AS n FROM fuzz.result GROUP BY 1) h});
diag("calls: $tally{calls} in ${secs}s, ok: $tally{ok}, errors: $tally{error}, "
	  . "internal errors: $tally{internal}, half-writes: $tally{halfwrite}, broken invariants: $tally{broken}");
diag("SQLSTATEs: $histogram");
note("one call per SQLSTATE:\n" . $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s %s: %s', sqlstate, message, sql), E'\n' ORDER BY sqlstate)
	  FROM (SELECT DISTINCT ON (sqlstate) * FROM fuzz.result ORDER BY sqlstate, call_no) r}));

is($tally{calls}, $calls, "all $calls calls ran");
is($tally{internal}, 0, 'no internal error (SQLSTATE class XX)')
  or diag($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s %s: %s', sqlstate, sql, message), E'\n')
	  FROM (SELECT * FROM fuzz.result WHERE sqlstate LIKE 'XX%' ORDER BY call_no LIMIT 20) r}));
is($tally{halfwrite}, 0, 'no erroring call left a trace')
  or diag($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s: %s', sql, message), E'\n')
	  FROM (SELECT * FROM fuzz.result WHERE sqlstate = 'HALFWRITE' ORDER BY call_no LIMIT 20) r}));
is($tally{broken}, 0, 'jobq\'s invariants hold after every call')
  or diag($node->safe_psql('postgres', q{
	SELECT string_agg(format('%s: %s', sql, message), E'\n') FROM fuzz.result WHERE sqlstate = 'BROKEN'}));
cmp_ok($tally{ok}, '>', $calls / 10, 'a fair share of the calls succeeded (the fuzzer reaches past validation)');

is($node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'1', 'the background worker is still serving the database');
my $log = slurp_file($node->logfile);
unlike($log, qr/was terminated by signal|TRAP:|PANIC:/, 'no process crashed');

$node->stop;
done_testing();
