# SQL-level random-input fuzzing of jobq's API (driver: test/fuzz/fuzz.sql).
#
# Some thousands of calls of random functions with random awkward arguments,
# in batches (one transaction each, every other one REPEATABLE READ; each
# call in a subtransaction), on a server with the background worker and an
# executor running.  Every call
# must end in a result or a clean ERROR: never an internal error (SQLSTATE
# class XX), never a crash (the server answers after each batch and its log
# shows no crashed process), never a half-written row (an erroring call
# leaves jobq's row counts as they were) and never a broken invariant (which
# includes a stored value that a later claim, extend, fail, reap, prune,
# schedule fire or read as text finds out of range: see fuzz.exercise()).
# Interval and timestamp arguments take extreme values ('1000000 years',
# 'infinity', '294276-12-31', '4713-11-24 BC', ...), text arguments 1 MB
# strings.  Before the random calls, a sweep (fuzz.sweep()) calls every
# function with every extreme value in every interval and timestamp
# argument, each call rolled back after its follow-ups, and lists every
# (function, argument, value) whose stored result cannot be used.  Claims
# with extreme positive waits are tried one by one: each must block (until
# a statement_timeout cancels it) or be refused with a clean error, never
# return at once.  After every batch, and at the end,
# pg_dump of the database must succeed; at the end the background worker
# must still serve it: a job planted with an expired lease is reaped and a
# schedule fires, within generous deadlines.
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
use IPC::Run;

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
# the functions of fuzz.api (0.2.0, 0.3.0) this build does not have yet
my $absent = $node->safe_psql('postgres', q{
	WITH d AS (DELETE FROM fuzz.api a
	            WHERE NOT EXISTS (SELECT FROM pg_proc p WHERE p.pronamespace = 'jobq'::regnamespace
	                                 AND p.proname = a.fn) RETURNING fn)
	SELECT coalesce(string_agg(DISTINCT fn, ', '), '') FROM d});
diag("not in this build, not fuzzed: $absent") if $absent ne '';

# pg_dump of database postgres; returns '' or its error output
sub dump_error
{
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', '/dev/null' ],
		'<', \undef, '>', \$out, '2>', \$err);
	return $ok ? '' : ($err || 'pg_dump failed without a message');
}
my $dump_failed;

# a few jobs in every state to start from
$node->safe_psql('postgres', q{
	SELECT jobq.enqueue('k' || i % 3, jsonb_build_object('i', i), 'q' || i % 2,
	                    idempotency_key => CASE WHEN i % 4 = 0 THEN 'key' || i END)
	  FROM generate_series(1, 40) i;
	SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('q0', batch => 5);
	SELECT jobq.fail(job_id, lease_token, 'no', retryable => false) FROM jobq.claim('q1', batch => 5);
	SELECT count(*) FROM jobq.claim('q0', batch => 5, lease => '1 hour');
});

# the sweep: every extreme value in every interval and timestamp argument
my $swept = $node->safe_psql('postgres', 'SELECT fuzz.sweep()',
	timeout => $PostgreSQL::Test::Utils::timeout_default * 5);
my %sweep = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres', q{SELECT what, n FROM fuzz.tally WHERE what LIKE 'sweep %'});
diag("sweep: $sweep{'sweep calls'} calls, $sweep{'sweep ok'} succeeded");
cmp_ok($sweep{'sweep ok'}, '>', 0, 'some sweep calls succeed (the sweep reaches past validation)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM fuzz.sweep_result'), '0',
	'every extreme interval and timestamp argument is refused or stored usable')
  or diag("the calls whose result cannot be used:\n" . $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s(%s => %s): %s', fn, arg, value, symptom), E'\n' ORDER BY fn, arg, value)
	  FROM fuzz.sweep_result}));

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
		"BEGIN ISOLATION LEVEL $iso; SELECT fuzz.run($s, $n, $first); COMMIT;",
		timeout => $PostgreSQL::Test::Utils::timeout_default * 5);
	if ($ret != 0)
	{
		my @logged = (slurp_file($node->logfile) =~ /jobq fuzz call (\d+: [^\n]*)/g);
		diag("batch from call $first failed: $err\nlast call logged: " . ($logged[-1] // 'none')
			  . "\n(when that is the batch's last call, the crash may have come at its COMMIT)");
		fail("batch from call $first ran");
	}
	$alive = $node->safe_psql('postgres', 'SELECT 1') eq '1';
	if (!defined $dump_failed && $alive)
	{
		my $e = dump_error();
		$dump_failed = "after the batch from call $first: $e" if $e ne '';
	}
	last if $node->safe_psql('postgres', q{SELECT n FROM fuzz.tally WHERE what = 'broken'}) ne '0';
}
ok($alive, 'the server answers after every batch');
my $secs = time() - $t0;
is($dump_failed // '', '', 'pg_dump succeeds after every batch');

my %tally = map { split /\|/ } split /\n/,
  $node->safe_psql('postgres', 'SELECT what, n FROM fuzz.tally');
my $histogram = $node->safe_psql('postgres', q{
	SELECT string_agg(format('%s %s', sqlstate, n), ', ' ORDER BY n DESC, sqlstate)
	  FROM (SELECT sqlstate, count(*) AS n FROM fuzz.result GROUP BY 1) h});
diag("calls: $tally{calls} in ${secs}s, ok: $tally{ok}, errors: $tally{error}, "
	  . "internal errors: $tally{internal}, half-writes: $tally{halfwrite}, broken invariants: $tally{broken}");
diag("SQLSTATEs: $histogram");
diag('follow-up steps that failed (not out of range; by SQLSTATE): '
	  . join(', ', map { s/^followup_error //r . " $tally{$_}" } sort grep { /^followup_error / } keys %tally));
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

# Claims that ask to wait for ever: each must block until the statement
# timeout cancels it (57014) or be refused with a clean error (22008 or
# 22023), never return at once as if no wait had been asked for.  The
# queue is empty and not paused.
$node->safe_psql('postgres', q{SELECT jobq.configure('fuzz_wait')});
foreach my $wait ('1000000 years', '178000000 years', '2147483647 days', '2147483647 hours')
{
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET statement_timeout = '3s'; SELECT count(*) FROM jobq.claim('fuzz_wait', wait => '$wait')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ],
		timeout => $PostgreSQL::Test::Utils::timeout_default);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5})/;
	ok( $ret != 0 && defined $state && $state =~ /^(57014|22008|22023)$/,
		"claim(wait => '$wait') blocks or is refused cleanly")
	  or diag("exit $ret, output '$out', error: $err");
}

# The background worker still serves the database: a job whose lease has
# expired is reaped, a schedule fires (deadlines of poll_query_until).
my $planted = $node->safe_psql('postgres', q{
	SELECT jobq.configure('fuzz_final', max_retries => 3);
	SELECT count(*) FROM jobq.enqueue('fuzz.final', queue => 'fuzz_final');
	SELECT count(*) FROM jobq.claim('fuzz_final', lease => '1 s');
	SELECT job_id FROM jobq.job WHERE queue = 'fuzz_final' AND status = 'running'});
$planted = (split /\n/, $planted)[-1];
like($planted, qr/^\d+$/, 'a job planted with a 1 s lease at the end');
ok( $node->poll_query_until(
		'postgres', qq{
	SELECT status = 'pending' AND retry_count = 1 AND last_error = 'lease expired'
	  FROM jobq.job WHERE job_id = $planted}),
	'the background worker reaps its expired lease')
  or diag($node->safe_psql('postgres', qq{SELECT j::text FROM jobq.job j WHERE job_id = $planted})
	  . "\nworkers:\n" . $node->safe_psql('postgres', 'SELECT w::text FROM jobq.workers w'));
$node->safe_psql('postgres',
	q{SELECT jobq.schedule('fuzz-final-tick', '* * * * * *', 'fuzz.tick', queue => 'fuzz_final')});
ok( $node->poll_query_until(
		'postgres', q{SELECT EXISTS (SELECT FROM jobq.job WHERE kind = 'fuzz.tick')}),
	'the background worker fires a schedule');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM jobq.workers WHERE role = 'worker' AND database = 'postgres'}),
	'1', 'the background worker is still serving the database');
is(dump_error(), '', 'pg_dump of the database succeeds at the end');
my $log = slurp_file($node->logfile);
unlike($log, qr/was terminated by signal|TRAP:|PANIC:/, 'no process crashed');

$node->stop;
done_testing();
