# jobq through a real PgBouncer in transaction mode: the whole lifecycle and
# blocking claims (claim with wait) work with no session state, since the
# wake-up goes through shared memory, not LISTEN/NOTIFY.  Consecutive
# statements may run on different server connections.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use File::Path qw(make_path);

my $pgbouncer = '/usr/sbin/pgbouncer';
# A missing pgbouncer is a skip here, printed as such by scripts/test, and a
# failure in CI (CI=true), where nothing may skip.
if (!-x $pgbouncer)
{
	if (($ENV{CI} // '') eq 'true')
	{
		fail("$pgbouncer is installed (CI=true allows no skip; scripts/test installs pgbouncer)");
		done_testing();
		exit;
	}
	plan skip_all => 'pgbouncer is not installed (scripts/test installs it)';
}

my $node = PostgreSQL::Test::Cluster->new('bouncer');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'jobq'");
$node->start;
$node->safe_psql('postgres', q{CREATE EXTENSION jobq; SELECT jobq.configure('pb')});

# a pgbouncer in transaction mode, two server connections for five clients
my $dir = PostgreSQL::Test::Utils::tempdir;
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $host = $node->host;
my $pgport = $node->port;
open my $ini, '>', "$dir/pgbouncer.ini" or die $!;
print $ini <<"EOC";
[databases]
postgres = host=$host port=$pgport dbname=postgres
[pgbouncer]
listen_addr =
unix_socket_dir = $dir
listen_port = $port
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 20
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOC
close $ini;
open my $users, '>', "$dir/users.txt" or die $!;
print $users '"' . $ENV{USER} . '" ""' . "\n" if $ENV{USER};
print $users "\"postgres\" \"\"\n";
close $users;
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', \my $bout, '2>', \my $berr);
my $connstr = "host=$dir port=$port dbname=postgres";

# psql through the bouncer
sub via
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $connstr, '-c', $sql ],
		'>', \$out, '2>', \$err);
	chomp $out;
	return ($out, $err);
}

my $ok = 0;
foreach (1 .. 50)
{
	my ($out) = via('SELECT 1');
	if ($out eq '1') { $ok = 1; last; }
	select(undef, undef, undef, 0.1);
}
ok($ok, 'pgbouncer answers in transaction mode');

# the whole lifecycle, one statement per transaction
my ($id) = via(q{SELECT job_id FROM jobq.enqueue('mail', '{"to": "a@example.com"}', 'pb')});
like($id, qr/^\d+$/, 'enqueue through the bouncer');
my ($claim) = via(q{SELECT job_id || ' ' || lease_token FROM jobq.claim('pb', lease => '1 minute')});
my ($cid, $token) = split / /, $claim;
is($cid, $id, 'claim through the bouncer');
my ($cp) = via("SELECT jobq.checkpoint($id, $token, '{\"step\": 1}')");
is($cp, 't', 'checkpoint through the bouncer');
my ($fail) = via("SELECT jobq.fail($id, $token, 'try again', retry_in => '0')");
is($fail, 'pending', 'fail (retry) through the bouncer');
($claim) = via(q{SELECT job_id || ' ' || lease_token || ' ' || (checkpoint->>'step') FROM jobq.claim('pb')});
my ($cid2, $token2, $step) = split / /, $claim;
is("$cid2 $step", "$id 1", 'the retried job comes back with its checkpoint');
my ($done) = via("SELECT jobq.complete($id, $token2, '{\"ok\": true}')");
is($done, 't', 'complete through the bouncer');

# blocking claims through the bouncer: three waiting clients hold both pool
# connections and more; each is woken by an enqueue from another client
my @waiters;
foreach my $i (1 .. 3)
{
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $connstr, '-c',
		  q{SELECT kind FROM jobq.claim('pb', worker_id => 'w', wait => '30 s')} ],
		'>', \$out, '2>', \$err);
	push @waiters, [ $h, \$out, \$err ];
}
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 2 FROM pg_stat_activity
	 WHERE query LIKE '%jobq.claim(%wait%' AND wait_event_type = 'Extension'
	   AND pid <> pg_backend_pid()}),
	'two claims wait on the server (the pool has two connections)');
# the third client waits in the bouncer for a server connection; enqueue
# straight to the server (the pool is busy) and watch all three get jobs
foreach my $i (1 .. 3)
{
	$node->safe_psql('postgres', "SELECT job_id FROM jobq.enqueue('job$i', queue => 'pb')");
}
my @got;
foreach my $w (@waiters)
{
	$w->[0]->finish;
	my $o = ${ $w->[1] };
	chomp $o;
	push @got, $o;
}
is(join(',', sort @got), 'job1,job2,job3', 'every waiting claim through the bouncer got a job');
is($node->safe_psql('postgres', q{SELECT count(*) FROM jobq.job WHERE queue = 'pb' AND status = 'running'}),
	'3', 'three jobs running, none claimed twice');

$bouncer->signal('TERM');
$bouncer->finish;
$node->stop;
done_testing();
