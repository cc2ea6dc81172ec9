# Model-based test of the job state machine.
#
# A reference model of every job (status, retry count, attempts, lease token
# and expiry, checkpoint, attempt history, idempotency keys) lives in this
# script.  Random operations, from a printed seed, run in four psql sessions:
# enqueue and enqueue_many (with and without idempotency keys, delays and
# max_retries), claim (batches, short leases, kinds filters, and claims sent
# to several sessions at the same moment), complete, fail (retryable or not,
# retry_in or backoff), extend, checkpoint, cancel, retry, stale and wrong
# lease tokens replayed, and jobq.reap().  Sessions open transactions that
# span other sessions' operations and commit or roll back.  Every result is
# compared with the model's prediction as it comes back; at checkpoints the
# whole committed state is compared with the model, and invariants are
# checked in SQL over the database and a ledger table that every operation
# writes in its own statement (so rolled back operations leave no trace).
#
# Phase A runs without a background worker for the database (jobq.databases
# names another one), so only jobq.reap() reaps and the model is exact.
# Phase B lets the worker in with jobq.naptime = 200ms: it reaps
# concurrently, and the model takes a reap of a job whose lease expired as a
# possible move, confirmed against the database.  At the end everything is drained to a final state.
#
# Environment: JOBQ_MODEL_SEED (replay a seed; timing still varies),
# JOBQ_MODEL_OPS (operations, default 3000), JOBQ_MODEL_TXN_PCT (how often,
# in percent of steps, an idle session opens a transaction; default 6).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use Storable qw(dclone);

my $seed = $ENV{JOBQ_MODEL_SEED} // (int(Time::HiRes::time() * 1000) ^ $$) & 0x7fffffff;
srand($seed);
diag("model seed $seed (JOBQ_MODEL_SEED=$seed replays the operation choices)");
my $NOPS = $ENV{JOBQ_MODEL_OPS} // 3000;
my $NSESS = 4;
my $EPS = 50_000;    # µs of slack around the database clock
my @QUEUES = ('mq1', 'mq2');
my @KINDS = ('ka', 'kb', 'kc');
my %QUEUE_MAX_RETRIES = (mq1 => 2, mq2 => 1);
my ($BACKOFF_BASE, $BACKOFF_CAP, $JITTER) = (50_000, 200_000, 0.1);

my $node = PostgreSQL::Test::Cluster->new('model');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'jobq'\njobq.databases = 'no_such_db'\n"
	  . "jobq.naptime = '200ms'\njobq.prune_interval = '1d'\nmax_connections = 30\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION jobq;
	SELECT jobq.configure('mq1', max_retries => 2, backoff_base => '50 ms', backoff_cap => '200 ms',
	                      backoff_jitter => 0.1, lease => '2 s');
	SELECT jobq.configure('mq2', max_retries => 1, backoff_base => '50 ms', backoff_cap => '200 ms',
	                      backoff_jitter => 0.1, lease => '2 s');
	CREATE FUNCTION us(timestamptz) RETURNS bigint LANGUAGE sql IMMUTABLE
	  AS $$ SELECT (extract(epoch FROM $1) * 1000000)::bigint $$;
	-- one row per operation result, written by the operation's own statement
	CREATE TABLE ledger (
	  seq    bigserial PRIMARY KEY,
	  sess   int NOT NULL,
	  op     text NOT NULL,
	  job_id bigint,
	  token  bigint,
	  ok     boolean,
	  info   text,
	  at     timestamptz NOT NULL DEFAULT clock_timestamp());
});

# ---------------------------------------------------------------------------
# sessions

my @S;
my @txn;      # per session: its open transaction (see the model below)
my @oplog;    # the latest statements and their results, for messages
my $opno = 0;
foreach my $i (0 .. $NSESS - 1)
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->set_query_timer_restart;
	push @S, $s;
}

my $banner_no = 0;

# Send a statement to session $i without waiting for its result.
sub send_sql
{
	my ($i, $sql) = @_;
	my $s = $S[$i];
	my $banner = "model_banner_" . (++$banner_no);
	$s->{stdout} = '';
	$s->{stderr} = '';
	$s->{model_banner} = $banner;
	$s->{timeout}->start();
	$s->{stdin} .= "$sql\n;\n\\echo '$banner'\n\\warn '$banner'\n";
	$s->{run}->pump_nb;
}

# Wait for the result of the statement sent to session $i: rows of fields.
sub wait_sql
{
	my ($i, $sql) = @_;
	my $s = $S[$i];
	my $banner = $s->{model_banner};
	$s->{run}->pump
	  until ($s->{stdout} =~ /$banner\n/ && $s->{stderr} =~ /$banner\n/)
	  || $s->{timeout}->is_expired;
	die "session $i timed out on: $sql" if $s->{timeout}->is_expired;
	my $out = $s->{stdout};
	my $err = $s->{stderr};
	$out =~ s/\n?$banner\n//;
	$err =~ s/\n?$banner\n//;
	die "session $i failed on: $sql\n$err" if $err ne '';
	return [ map { [ split /\|/, $_, -1 ] } grep { length } split /\n/, $out ];
}

sub run_sql
{
	my ($i, $sql) = @_;
	my $short = $sql =~ /jobq\.(\w+\([^)]{0,60})/ ? $1 : substr($sql, 0, 40);
	push @{ $txn[$i]{log} }, $short if defined $txn[$i];
	send_sql($i, $sql);
	my $rows = wait_sql($i, $sql);
	push @oplog, "op $opno, session $i" . (defined $txn[$i] ? ' (in transaction)' : '')
	  . ": $short => " . join(' ', map { join('|', @$_) } @$rows);
	shift @oplog if @oplog > 400;
	return $rows;
}

run_sql($_, "SET lock_timeout = '5s'; SET application_name = 'model$_'")
  foreach 0 .. $NSESS - 1;

sub now_us { return int(Time::HiRes::time() * 1e6); }

# ---------------------------------------------------------------------------
# the model
#
# %jobs: the committed state, job_id -> job.  $txn[$i]: session $i's open
# transaction or undef: {jobs => {id => job as the transaction sees it},
# keys => {"kind/key" => id}, claimed => {queue => 1}, nops}.  A job in a
# transaction's jobs is row-locked by it: other sessions leave it alone.

my %jobs;
my %keys;
@txn = (undef) x $NSESS;
my @token_pool;    # [job_id, token] of every claim ever returned
my $phase = 'A';
my $failed = 0;
my %count;

sub violation
{
	my ($msg) = @_;
	# the recent statements that name the jobs of the message
	my %ids = map { $_ => 1 } $msg =~ /\b(?:job|jobs) ([\d,]+)/g;
	my @ids = map { split /,/ } keys %ids;
	my $re = @ids ? join('|', @ids) : 'x^';
	diag("recent statements naming job(s) @ids:\n"
		  . join("\n", grep { defined && /\b($re)\b|COMMIT|ROLLBACK|BEGIN/ } @oplog[ -200 .. -1 ]))
	  if @ids;
	# what the database says of them: the committed ledger, the attempt
	# history, the worker's reaps in the server log, the open transactions
	# of the model that hold them
	if (@ids)
	{
		my $in = join(',', @ids);
		diag("committed ledger rows of job(s) $in:\n"
			  . $node->safe_psql('postgres',
				"SELECT seq, sess, op, job_id, token, ok, info, at FROM ledger WHERE job_id IN ($in) ORDER BY seq"));
		diag("attempt history of job(s) $in:\n"
			  . $node->safe_psql('postgres',
				"SELECT job_id, attempt, outcome, worker_id, started_at, finished_at FROM jobq.attempt"
				  . " WHERE job_id IN ($in) ORDER BY job_id, attempt"));
		diag("server log on job(s) $in:\n"
			  . join("\n", grep { /jobq: lease of job ($re) expired/ } split /\n/, slurp_file($node->logfile)));
		diag("open model transactions holding them: "
			  . join(' ', map { my $k = $_; defined $txn[$k] ? map { exists $txn[$k]{jobs}{$_} ? "session $k: job $_" : () } @ids : () } 0 .. $#txn));
	}
	fail("op $opno (phase $phase): $msg");
	$failed = 1;
	die "model violation\n";
}

sub view
{
	my ($i, $id) = @_;
	return $txn[$i]{jobs}{$id} if defined $txn[$i] && exists $txn[$i]{jobs}{$id};
	return $jobs{$id};
}

# The job as session $i changes it (copy on write inside a transaction).
sub mut
{
	my ($i, $id) = @_;
	return $jobs{$id} unless defined $txn[$i];
	$txn[$i]{jobs}{$id} //= dclone($jobs{$id});
	return $txn[$i]{jobs}{$id};
}

# What session $i's open transaction did so far, for messages.
sub txn_context
{
	my ($i) = @_;
	return "session $i outside a transaction" unless defined $txn[$i];
	return "session $i in a transaction that ran: " . join('; ', @{ $txn[$i]{log} // [] });
}

sub locked_by_other
{
	my ($i, $id) = @_;
	foreach my $k (0 .. $NSESS - 1)
	{
		next if $k == $i || !defined $txn[$k];
		return 1 if exists $txn[$k]{jobs}{$id};
	}
	return 0;
}

sub other_claim_open
{
	my ($i, $queue) = @_;
	foreach my $k (0 .. $NSESS - 1)
	{
		next if $k == $i || !defined $txn[$k];
		return 1 if $txn[$k]{claimed}{$queue};
	}
	return 0;
}

sub key_in_other_txn
{
	my ($i, $kk) = @_;
	foreach my $k (0 .. $NSESS - 1)
	{
		next if $k == $i || !defined $txn[$k];
		return 1 if exists $txn[$k]{keys}{$kk};
	}
	return 0;
}

sub visible_ids
{
	my ($i) = @_;
	my %ids = map { $_ => 1 } keys %jobs;
	$ids{$_} = 1 foreach (defined $txn[$i] ? keys %{ $txn[$i]{jobs} } : ());
	return sort { $a <=> $b } keys %ids;
}

sub key_lookup
{
	my ($i, $kk) = @_;
	return $txn[$i]{keys}{$kk} if defined $txn[$i] && exists $txn[$i]{keys}{$kk};
	return $keys{$kk};
}

# May the background worker reap this committed job now (phase B)?
sub reapable
{
	my ($j, $margin) = @_;
	return $j->{status} eq 'running' && $j->{lease_exp} < now_us() + ($margin // 300_000);
}

# claim order: priority DESC, run_at, job_id; 0 (no order to check) when
# the priorities are equal and a run_at is unknown to the model (that of a
# job the worker reaped again since, see absorb_reap)
sub rank_cmp
{
	my ($x, $y) = @_;
	my $by_prio = $y->{prio} <=> $x->{prio};
	return $by_prio if $by_prio || !defined $x->{run_at} || !defined $y->{run_at};
	return $x->{run_at} <=> $y->{run_at} || $x->{id} <=> $y->{id};
}

# An attempt that did not succeed (fail or reap): back to pending or failed.
sub end_attempt
{
	my ($j, $retryable, $outcome) = @_;
	push @{ $j->{outcomes} }, $outcome;
	if ($retryable && $j->{rc} < $j->{maxr})
	{
		$j->{rc}++;
		$j->{status} = 'pending';
	}
	else
	{
		$j->{status} = 'failed';
	}
	$j->{lease_exp} = undef;
	return $j->{status};
}

# Session $i reads back run_at of some jobs (after they were re-queued).
sub read_run_at
{
	my ($i, @ids) = @_;
	return {} unless @ids;
	my $rows = run_sql($i,
		"SELECT job_id, us(run_at) FROM jobq.job WHERE job_id IN (" . join(',', @ids) . ")");
	return { map { $_->[0] => $_->[1] } @$rows };
}

# Phase B: apply the reaps the background worker did, as the database shows
# them, to committed running jobs whose lease expired.
sub sync_reaped
{
	my @cand = grep {
		my $id = $_;
		reapable($jobs{$id}, $EPS) && !grep { defined $_ && exists $_->{jobs}{$id} } @txn
	} keys %jobs;
	return 0 unless @cand;
	my $rows = $node->safe_psql('postgres',
		"SELECT job_id, status, retry_count, us(run_at),"
		  . " (SELECT count(*) FROM jobq.attempt a WHERE a.job_id = j.job_id),"
		  . " coalesce((SELECT string_agg(outcome, ',' ORDER BY attempt) FROM jobq.attempt a"
		  . " WHERE a.job_id = j.job_id), '')"
		  . " FROM jobq.job j WHERE job_id IN (" . join(',', @cand) . ")");
	my $n = 0;
	foreach my $r (split /\n/, $rows)
	{
		$n += absorb_reap(split /\|/, $r);
	}
	return $n;
}

# If the database shows that the background worker reaped committed job $id
# (one more attempt in its history; it may be claimed again since, by the
# claim that made us look), apply that reap to the model.  $hist is the
# database's attempt outcomes in order.  With a short lease the database may
# be further on still: reaped, claimed by the claim that made us look, and
# reaped again before this look; then only the first reap is applied here
# (the claim is applied next, the second reap at a later look).
sub absorb_reap
{
	my ($id, $status, $rc, $run_at, $natt, $hist) = @_;
	my $j = $jobs{$id};
	my $known = @{ $j->{outcomes} };
	return 0 unless $phase eq 'B' && $j->{status} eq 'running' && $natt >= $known + 1;
	my @h = split /,/, $hist // '';
	return 0 unless ($h[$known] // '') eq 'lease expired';
	violation("job $id: reaped before its lease expired at $j->{lease_exp}") unless reapable($j, $EPS);
	my $want = end_attempt($j, 1, 'lease expired');
	if ($natt == $known + 1)
	{
		violation("job $id: reaped to $status/$rc, model says $want/$j->{rc}")
		  if ($status ne $want && !($status eq 'running' && $want eq 'pending')) || $rc != $j->{rc};
		$j->{run_at} = $run_at;
	}
	else
	{
		$j->{run_at} = undef;	# the database's is a later attempt's: unknown
	}
	$count{bg_reaps}++;
	return 1;
}

sub commit_txn
{
	my ($i) = @_;
	my $t = $txn[$i];
	$jobs{$_} = $t->{jobs}{$_} foreach keys %{ $t->{jobs} };
	$keys{$_} = $t->{keys}{$_} foreach keys %{ $t->{keys} };
	$txn[$i] = undef;
}

# ---------------------------------------------------------------------------
# operations: each runs its SQL, checks the result against the model and
# updates the model

sub sql_num { return defined $_[0] ? $_[0] : 'NULL'; }
sub sql_str { return defined $_[0] ? "'$_[0]'" : 'NULL'; }

sub op_enqueue
{
	my ($i) = @_;
	my $queue = $QUEUES[ int(rand(@QUEUES)) ];
	my $kind = $KINDS[ int(rand(@KINDS)) ];
	my $prio = (0, 0, 10, 20)[ int(rand(4)) ];
	my $delay = rand() < 0.3 ? int(rand(1500)) : 0;
	my $maxr = (undef, 0, 1, 2, 3)[ int(rand(5)) ];
	my $n = rand() < 0.2 ? 2 + int(rand(4)) : 1;
	my @keys;
	foreach (1 .. $n)
	{
		my $key = rand() < 0.4 ? 'key' . int(rand(300)) : undef;
		$key = undef if defined $key && key_in_other_txn($i, "$kind/$key");
		push @keys, $key;
	}
	my $run_at = $delay ? "clock_timestamp() + interval '$delay ms'" : 'now()';
	my $sql;
	if ($n == 1 && rand() < 0.7)
	{
		$sql = "WITH e AS (SELECT 1 AS ord, * FROM jobq.enqueue('$kind', '{}', '$queue', $prio, $run_at, "
		  . sql_num($maxr) . ", " . sql_str($keys[0]) . "))";
	}
	else
	{
		my $payloads = join(',', map { "'{\"n\": $_}'" } 1 .. $n);
		my $karr = join(',', map { sql_str($_) } @keys);
		$sql = "WITH e AS (SELECT ord, job_id, created FROM jobq.enqueue_many('$kind', ARRAY[$payloads]::jsonb[],"
		  . " '$queue', $prio, $run_at, " . sql_num($maxr) . ", ARRAY[$karr]::text[])"
		  . " WITH ORDINALITY AS x(job_id, created, ord))";
	}
	$sql .= ", l AS (INSERT INTO ledger (sess, op, job_id, ok, info)"
	  . " SELECT $i, 'enqueue', job_id, created, '$kind/' || ord FROM e)"
	  . " SELECT ord, job_id, created FROM e ORDER BY ord";
	my $rows = run_sql($i, $sql);
	violation("enqueue of $n jobs returned " . scalar(@$rows) . " rows") if @$rows != $n;
	my (@new, %batch_keys);
	foreach my $r (@$rows)
	{
		my ($ord, $id, $created) = @$r;
		my $key = $keys[ $ord - 1 ];
		my $kk = defined $key ? "$kind/$key" : undef;
		my $existing = defined $kk ? ($batch_keys{$kk} // key_lookup($i, $kk)) : undef;
		if (defined $existing)
		{
			violation("enqueue with taken key $kk: got job $id created=$created, model has job $existing")
			  if $created ne 'f' || $id != $existing;
			$count{enqueue_dup}++;
			next;
		}
		violation("enqueue: got job $id created=$created, model expects a new job")
		  if $created ne 't' || defined view($i, $id);
		my $j = {
			id => $id, queue => $queue, kind => $kind, key => $key, prio => $prio,
			status => 'pending', rc => 0, maxr => $maxr // $QUEUE_MAX_RETRIES{$queue},
			attempts => 0, token => undef, lease_exp => undef, run_at => undef,
			ckpt => '', outcomes => [], retried => 0, tokens => [] };
		if (defined $txn[$i])
		{
			$txn[$i]{jobs}{$id} = $j;
			$txn[$i]{keys}{$kk} = $id if defined $kk;
		}
		else
		{
			$jobs{$id} = $j;
			$keys{$kk} = $id if defined $kk;
		}
		$batch_keys{$kk} = $id if defined $kk;
		push @new, $id;
		$count{enqueued}++;
	}
	my $ra = read_run_at($i, @new);
	view($i, $_)->{run_at} = $ra->{$_} foreach @new;
}

# Which jobs session $i may claim from queue $queue (kinds filter $kinds).
sub claim_candidates
{
	my ($i, $queue, $kinds) = @_;
	return grep {
		my $j = view($i, $_);
		$j->{queue} eq $queue && $j->{status} eq 'pending'
		  && (!$kinds || grep { $_ eq $j->{kind} } @$kinds)
		  && !locked_by_other($i, $_)
	} visible_ids($i);
}

# Check the rows claim returned in session $i (between t0 and t1) and apply them.
sub apply_claim
{
	my ($i, $queue, $batch, $kinds, $lease, $rows, $t0, $t1, $others_claiming) = @_;
	violation("claim(batch => $batch) returned " . scalar(@$rows) . " rows") if @$rows > $batch;
	my %got;
	my @got_jobs;
	foreach my $r (@$rows)
	{
		my ($id, $token, $kind, $prio, $rc, $maxr, $ckpt, $lexp) = @$r;
		violation("claim returned job $id twice") if $got{$id}++;
		my $j = view($i, $id);
		violation("claim returned job $id, unknown to the model") unless defined $j;
		if ($phase eq 'B' && $j->{status} eq 'running' && !locked_by_other($i, $id)
			&& !(defined $txn[$i] && exists $txn[$i]{jobs}{$id}) && reapable($j, $EPS))
		{
			# the background worker reaped it just before
			sync_reaped();
			$j = view($i, $id);
		}
		violation("claim returned job $id of queue $j->{queue}, status $j->{status} (model)")
		  if $j->{status} ne 'pending' || $j->{queue} ne $queue;
		violation("claim returned job $id locked by another session's transaction")
		  if locked_by_other($i, $id);
		violation("claim returned job $id of kind $kind outside the filter")
		  if $kinds && !grep { $_ eq $kind } @$kinds;
		violation("claim returned job $id due at $j->{run_at}, claim ended at $t1")
		  if defined $j->{run_at} && $j->{run_at} > $t1 + $EPS;
		violation("claim of job $id: kind/priority/retry_count/max_retries/checkpoint"
			  . " $kind/$prio/$rc/$maxr/$ckpt, model $j->{kind}/$j->{prio}/$j->{rc}/$j->{maxr}/$j->{ckpt}")
		  if $kind ne $j->{kind} || $prio != $j->{prio} || $rc != $j->{rc}
		  || $maxr != $j->{maxr} || $ckpt ne $j->{ckpt};
		violation("claim of job $id: lease expires at $lexp, outside [$t0, $t1] + $lease ms")
		  if $lexp < $t0 + $lease * 1000 - $EPS || $lexp > $t1 + $lease * 1000 + $EPS;
		push @got_jobs, $j;
	}
	for my $k (1 .. $#got_jobs)
	{
		violation("claim returned jobs out of claim order: $got_jobs[$k-1]{id} before $got_jobs[$k]{id}")
		  if rank_cmp($got_jobs[ $k - 1 ], $got_jobs[$k]) > 0;
	}

	# no job due before the claim began was passed over (unless another
	# session's open claim may hold it promoted, or claims ran at once)
	unless ($others_claiming || other_claim_open($i, $queue))
	{
		my @due = grep { !$got{$_} && defined view($i, $_)->{run_at} && view($i, $_)->{run_at} < $t0 - $EPS }
		  claim_candidates($i, $queue, $kinds);
		if (@$rows < $batch && @due)
		{
			violation("claim(batch => $batch) returned " . scalar(@$rows)
				  . " jobs but left due jobs " . join(',', @due[0 .. ($#due < 9 ? $#due : 9)])
				  . "; " . txn_context($i));
		}
		if (@got_jobs && @due)
		{
			foreach my $d (@due)
			{
				my ($x, $y) = (view($i, $d), $got_jobs[-1]);
				violation("claim passed over job $d (priority $x->{prio}, run_at $x->{run_at}) that ranks"
					  . " before job $y->{id} (priority $y->{prio}, run_at $y->{run_at}); claim began at $t0; "
					  . txn_context($i))
				  if rank_cmp($x, $y) < 0;
			}
		}
	}

	foreach my $r (@$rows)
	{
		my ($id, $token, undef, undef, undef, undef, undef, $lexp) = @$r;
		my $j = mut($i, $id);
		$j->{status} = 'running';
		$j->{attempts}++;
		violation("job $id: lease token $token does not count claim $j->{attempts} in its high half")
		  if ($token >> 32) != $j->{attempts};
		violation("job $id: lease token $token handed out before")
		  if grep { $_ == $token } @{ $j->{tokens} };
		push @{ $j->{tokens} }, $token;
		$j->{token} = $token;
		$j->{lease_exp} = $lexp;
		push @token_pool, [ $id, $token ];
		$count{claimed}++;
	}
	# a claim may have promoted due jobs of the queue, locked until the end
	$txn[$i]{claimed}{$queue} = 1 if defined $txn[$i];
}

sub claim_sql
{
	my ($i, $queue, $batch, $kinds, $lease) = @_;
	my $karr = $kinds ? "ARRAY[" . join(',', map { "'$_'" } @$kinds) . "]" : 'NULL';
	return "WITH c AS (SELECT * FROM jobq.claim('$queue', 'm$i', $batch, interval '$lease ms', $karr)),"
	  . " l AS (INSERT INTO ledger (sess, op, job_id, token, ok) SELECT $i, 'claim', job_id, lease_token, true FROM c)"
	  . " SELECT job_id, lease_token, kind, priority, retry_count, max_retries,"
	  . " coalesce(checkpoint::text, ''), us(lease_expires_at) FROM c";
}

sub random_claim_args
{
	my $queue = $QUEUES[ int(rand(@QUEUES)) ];
	my $batch = 1 + int(rand(4));
	my $kinds = rand() < 0.2 ? [ $KINDS[ int(rand(@KINDS)) ] ] : undef;
	my $lease = 300 + int(rand(2700));
	return ($queue, $batch, $kinds, $lease);
}

sub op_claim
{
	my ($i) = @_;
	my ($queue, $batch, $kinds, $lease) = random_claim_args();
	my $sql = claim_sql($i, $queue, $batch, $kinds, $lease);
	my $t0 = now_us();
	my $rows = run_sql($i, $sql);
	my $t1 = now_us();
	apply_claim($i, $queue, $batch, $kinds, $lease, $rows, $t0, $t1, 0);
	$count{claim}++;
}

# Claims sent to every session outside a transaction at the same moment.
sub op_claim_burst
{
	my @idle = grep { !defined $txn[$_] } 0 .. $NSESS - 1;
	return 0 if @idle < 2;
	my $queue = $QUEUES[ int(rand(@QUEUES)) ];
	my (%args, %sql);
	foreach my $i (@idle)
	{
		my (undef, $batch, undef, $lease) = random_claim_args();
		$args{$i} = [ $batch, $lease ];
		$sql{$i} = claim_sql($i, $queue, $batch, undef, $lease);
	}
	my $t0 = now_us();
	send_sql($_, $sql{$_}) foreach @idle;
	my %rows = map { $_ => wait_sql($_, $sql{$_}) } @idle;
	my $t1 = now_us();
	my %seen;
	foreach my $i (@idle)
	{
		foreach my $r (@{ $rows{$i} })
		{
			violation("concurrent claims: job $r->[0] claimed by sessions $seen{$r->[0]} and $i")
			  if defined $seen{ $r->[0] };
			$seen{ $r->[0] } = $i;
		}
	}
	apply_claim($_, $queue, $args{$_}[0], undef, $args{$_}[1], $rows{$_}, $t0, $t1, 1) foreach @idle;
	$count{claim_burst}++;
	return 1;
}

# A running job session $i may act on: [id, its current token].
sub pick_running
{
	my ($i) = @_;
	my @r = grep {
		my $j = view($i, $_);
		$j->{status} eq 'running' && !locked_by_other($i, $_)
		  && ($phase eq 'A' || defined $txn[$i] && exists $txn[$i]{jobs}{$_} || !reapable($j))
	} visible_ids($i);
	return undef unless @r;
	my $id = $r[ int(rand(@r)) ];
	return [ $id, view($i, $id)->{token} ];
}

# A job and token for a stale call: an old token, or garbage.
sub pick_stale
{
	my ($i) = @_;
	foreach (1 .. 10)
	{
		my $p = $token_pool[ int(rand(@token_pool)) ] // return undef;
		my ($id, $token) = @$p;
		my $j = view($i, $id);
		next unless defined $j && !locked_by_other($i, $id);
		next if $phase eq 'B' && !(defined $txn[$i] && exists $txn[$i]{jobs}{$id}) && reapable($j);
		$token = $token ^ (1 + int(rand(1000))) if rand() < 0.2;    # a wrong token
		return [ $id, $token ];
	}
	return undef;
}

sub token_valid
{
	my ($i, $id, $token) = @_;
	my $j = view($i, $id);
	return $j->{status} eq 'running' && $j->{token} == $token;
}

sub op_complete
{
	my ($i, $p, $stale) = @_;
	my ($id, $token) = @$p;
	my $want = token_valid($i, $id, $token);
	my $rows = run_sql($i,
		"WITH r AS (SELECT jobq.complete($id, $token, '{\"done\": true}') AS ok),"
		  . " l AS (INSERT INTO ledger (sess, op, job_id, token, ok) SELECT $i, 'complete', $id, $token, ok FROM r)"
		  . " SELECT ok FROM r");
	my $got = $rows->[0][0] eq 't';
	violation("complete($id, $token) returned " . ($got ? 'true' : 'false')
		  . ", model: job " . view($i, $id)->{status} . " token " . (view($i, $id)->{token} // 'none'))
	  if $got != $want;
	if ($got)
	{
		my $j = mut($i, $id);
		$j->{status} = 'completed';
		$j->{lease_exp} = undef;
		$count{completed}++;
	}
	$count{ $stale ? 'stale_complete' : 'complete' }++;
}

sub op_fail
{
	my ($i, $p, $stale) = @_;
	my ($id, $token) = @$p;
	my $retryable = rand() < 0.8;
	my $retry_in = rand() < 0.5 ? int(rand(500)) : undef;
	my $want = token_valid($i, $id, $token);
	my $ri = defined $retry_in ? "interval '$retry_in ms'" : 'NULL';
	my $t0 = now_us();
	my $rows = run_sql($i,
		"WITH r AS (SELECT jobq.fail($id, $token, 'boom $opno', " . ($retryable ? 'true' : 'false') . ", $ri) AS st),"
		  . " l AS (INSERT INTO ledger (sess, op, job_id, token, ok, info)"
		  . " SELECT $i, 'fail', $id, $token, st IS NOT NULL, st FROM r)"
		  . " SELECT coalesce(st, 'NULL') FROM r");
	my $t1 = now_us();
	my $got = $rows->[0][0];
	if (!$want)
	{
		violation("fail($id, stale token $token) returned $got") if $got ne 'NULL';
		$count{ $stale ? 'stale_fail' : 'fail' }++;
		return;
	}
	my $j = mut($i, $id);
	my $n = $j->{rc};
	my $st = end_attempt($j, $retryable, 'failed');
	violation("fail($id, retryable => $retryable, retry $n of $j->{maxr}) returned $got, model $st")
	  if $got ne $st;
	if ($st eq 'pending')
	{
		my $run_at = read_run_at($i, $id)->{$id};
		my ($lo, $hi);
		if (defined $retry_in)
		{
			($lo, $hi) = ($retry_in * 1000, $retry_in * 1000);
		}
		else
		{
			my $d = $BACKOFF_BASE * 2**$n;
			$d = $BACKOFF_CAP if $d > $BACKOFF_CAP;
			($lo, $hi) = ($d * (1 - $JITTER), $d * (1 + $JITTER));
			$hi = $BACKOFF_CAP if $hi > $BACKOFF_CAP;
		}
		violation("fail($id): retry due in " . ($run_at - $t0) . " µs, expected [$lo, $hi] (+ call time)")
		  if $run_at < $t0 + $lo - $EPS || $run_at > $t1 + $hi + $EPS;
		$j->{run_at} = $run_at;
	}
	$count{"failed_$st"}++;
	$count{ $stale ? 'stale_fail' : 'fail' }++;
}

sub op_extend
{
	my ($i, $p, $stale) = @_;
	my ($id, $token) = @$p;
	my $lease = 300 + int(rand(2700));
	my $want = token_valid($i, $id, $token);
	my $t0 = now_us();
	my $rows = run_sql($i,
		"WITH r AS (SELECT jobq.extend($id, $token, interval '$lease ms') AS e),"
		  . " l AS (INSERT INTO ledger (sess, op, job_id, token, ok) SELECT $i, 'extend', $id, $token, e IS NOT NULL FROM r)"
		  . " SELECT coalesce(us(e)::text, 'NULL') FROM r");
	my $t1 = now_us();
	my $got = $rows->[0][0];
	if (!$want)
	{
		violation("extend($id, stale token $token) returned $got") if $got ne 'NULL';
	}
	else
	{
		violation("extend($id, $token, $lease ms) returned $got, expected about now + lease")
		  if $got eq 'NULL' || $got < $t0 + $lease * 1000 - $EPS || $got > $t1 + $lease * 1000 + $EPS;
		mut($i, $id)->{lease_exp} = $got;
	}
	$count{ $stale ? 'stale_extend' : 'extend' }++;
}

sub op_checkpoint
{
	my ($i, $p, $stale) = @_;
	my ($id, $token) = @$p;
	my $want = token_valid($i, $id, $token);
	my $rows = run_sql($i,
		"WITH r AS (SELECT jobq.checkpoint($id, $token, jsonb_build_object('step', $opno)) AS ok),"
		  . " l AS (INSERT INTO ledger (sess, op, job_id, token, ok) SELECT $i, 'checkpoint', $id, $token, ok FROM r)"
		  . " SELECT ok FROM r");
	my $got = $rows->[0][0] eq 't';
	violation("checkpoint($id, $token) returned " . ($got ? 'true' : 'false') . ", model "
		  . ($want ? 'true' : 'false'))
	  if $got != $want;
	mut($i, $id)->{ckpt} = "{\"step\": $opno}" if $got;
	$count{ $stale ? 'stale_checkpoint' : 'checkpoint' }++;
}

sub op_cancel
{
	my ($i) = @_;
	my @c = grep {
		my $j = view($i, $_);
		!locked_by_other($i, $_)
		  && ($phase eq 'A' || defined $txn[$i] && exists $txn[$i]{jobs}{$_} || !reapable($j))
		  && ($j->{status} ne 'pending' || !other_claim_open($i, $j->{queue}))
	} visible_ids($i);
	return 0 unless @c;
	my $id = $c[ int(rand(@c)) ];
	my $j0 = view($i, $id);
	my $want = $j0->{status} eq 'pending' || $j0->{status} eq 'running';
	my $rows = run_sql($i,
		"WITH r AS (SELECT jobq.cancel($id) AS ok),"
		  . " l AS (INSERT INTO ledger (sess, op, job_id, ok) SELECT $i, 'cancel', $id, ok FROM r)"
		  . " SELECT ok FROM r");
	my $got = $rows->[0][0] eq 't';
	violation("cancel($id) of a $j0->{status} job returned " . ($got ? 'true' : 'false')) if $got != $want;
	if ($got)
	{
		my $j = mut($i, $id);
		push @{ $j->{outcomes} }, 'cancelled' if $j->{status} eq 'running';
		$j->{status} = 'cancelled';
		$j->{lease_exp} = undef;
	}
	$count{cancel}++;
	return 1;
}

sub op_retry
{
	my ($i) = @_;
	my @c = grep {
		my $j = view($i, $_);
		!locked_by_other($i, $_) && ($j->{status} =~ /^(failed|cancelled)$/ || rand() < 0.02)
	} visible_ids($i);
	return 0 unless @c;
	my $id = $c[ int(rand(@c)) ];
	my $j0 = view($i, $id);
	return 0 if $j0->{status} eq 'running' && $phase eq 'B' && reapable($j0);
	my $want = $j0->{status} eq 'failed' || $j0->{status} eq 'cancelled';
	my $rows = run_sql($i,
		"WITH r AS (SELECT jobq.retry($id) AS ok),"
		  . " l AS (INSERT INTO ledger (sess, op, job_id, ok) SELECT $i, 'retry', $id, ok FROM r)"
		  . " SELECT ok FROM r");
	my $got = $rows->[0][0] eq 't';
	violation("retry($id) of a $j0->{status} job returned " . ($got ? 'true' : 'false')) if $got != $want;
	if ($got)
	{
		my $j = mut($i, $id);
		$j->{status} = 'pending';
		$j->{rc} = 0;
		$j->{retried} = 1;
		$j->{run_at} = read_run_at($i, $id)->{$id};
		$count{retried}++;
	}
	$count{retry}++;
	return 1;
}

# jobq.reap() from a session outside a transaction.
sub op_reap
{
	my ($i) = @_;
	return 0 if defined $txn[$i];
	my @running = grep {
		my $id = $_;
		$jobs{$id}{status} eq 'running' && !grep { defined $_ && exists $_->{jobs}{$id} } @txn
	} keys %jobs;
	my $t0 = now_us();
	my $rows = run_sql($i,
		"WITH r AS (SELECT jobq.reap() AS n),"
		  . " l AS (INSERT INTO ledger (sess, op, ok, info) SELECT $i, 'reap', true, n::text FROM r)"
		  . " SELECT n FROM r");
	my $t1 = now_us();
	my $n = $rows->[0][0];
	my @sure = grep { $jobs{$_}{lease_exp} < $t0 - $EPS } @running;
	my @maybe = grep { $jobs{$_}{lease_exp} < $t1 + $EPS } @running;
	my %reaped;
	if (@maybe)
	{
		my $out = run_sql($i,
			"SELECT job_id, status, retry_count, us(run_at) FROM jobq.job WHERE job_id IN ("
			  . join(',', @maybe) . ") AND status <> 'running'");
		foreach my $r (@$out)
		{
			my ($id, $status, $rc, $run_at) = @$r;
			my $j = $jobs{$id};
			my $want = end_attempt($j, 1, 'lease expired');
			violation("reap of job $id: now $status/$rc, model $want/$j->{rc}")
			  if $status ne $want || $rc != $j->{rc};
			$j->{run_at} = $run_at;
			$reaped{$id} = 1;
		}
	}
	if ($phase eq 'A')
	{
		my @missed = grep { !$reaped{$_} } @sure;
		violation("jobq.reap() left expired leases of jobs @missed") if @missed;
		violation("jobq.reap() returned $n, but " . scalar(keys %reaped) . " jobs were reaped")
		  if $n != keys %reaped;
	}
	else
	{
		violation("jobq.reap() returned $n, but only " . scalar(keys %reaped) . " jobs were reaped")
		  if $n > keys %reaped;
		$count{bg_reaps} += keys(%reaped) - $n;
	}
	$count{reaped} += $n;
	$count{reap}++;
	return 1;
}

# ---------------------------------------------------------------------------
# checks

# The committed state of every job, compared with the model.  In phase B
# the background worker may reap between the sync and the read: one more try.
sub check_state
{
	my ($label) = @_;
	if ($phase eq 'B')
	{
		sync_reaped();
		if (compare_state($label, 1) == 0)
		{
			pass("$label: the committed state of all " . scalar(keys %jobs) . " jobs matches the model");
			return 1;
		}
		sync_reaped();
	}
	my $bad = compare_state($label, 0);
	is($bad, 0, "$label: the committed state of all " . scalar(keys %jobs) . " jobs matches the model");
	return $bad == 0;
}

sub compare_state
{
	my ($label, $quiet) = @_;
	local *diag = $quiet ? sub { } : \&Test::More::diag;
	my $out = $node->safe_psql('postgres', q{
		SELECT j.job_id, j.queue, j.kind, coalesce(j.idempotency_key, ''), j.priority, j.status,
		       j.retry_count, j.max_retries, j.attempts, coalesce(j.lease_token::text, ''),
		       coalesce(us(j.lease_expires_at)::text, ''), coalesce(j.checkpoint::text, ''),
		       (SELECT count(*) FROM jobq.ready r WHERE r.job_id = j.job_id),
		       (SELECT count(*) FROM jobq.scheduled s WHERE s.job_id = j.job_id),
		       coalesce((SELECT string_agg(outcome, ',' ORDER BY attempt) FROM jobq.attempt a
		                  WHERE a.job_id = j.job_id), ''),
		       us(j.run_at), (SELECT count(*) FROM jobq.attempt a WHERE a.job_id = j.job_id)
		  FROM jobq.job j ORDER BY j.job_id});
	my %seen;
	my $bad = 0;
	foreach my $line (split /\n/, $out)
	{
		my ($id, $queue, $kind, $key, $prio, $status, $rc, $maxr, $att, $token, $lexp, $ckpt, $nready,
			$nsched, $outcomes, $run_at, $natt) = split /\|/, $line, -1;
		$seen{$id} = 1;
		my $j = $jobs{$id};
		# reaped by the background worker since the last look
		absorb_reap($id, $status, $rc, $run_at, $natt, $outcomes)
		  if defined $j && !grep { defined $_ && exists $_->{jobs}{$id} } @txn;
		if (!defined $j)
		{
			diag("$label: job $id ($status) exists in the database, not in the model");
			$bad++;
			next;
		}
		my @diff;
		push @diff, "queue $queue/$j->{queue}" if $queue ne $j->{queue};
		push @diff, "kind $kind/$j->{kind}" if $kind ne $j->{kind};
		push @diff, "key $key/" . ($j->{key} // '') if $key ne ($j->{key} // '');
		push @diff, "priority $prio/$j->{prio}" if $prio != $j->{prio};
		push @diff, "status $status/$j->{status}" if $status ne $j->{status};
		push @diff, "retry_count $rc/$j->{rc}" if $rc != $j->{rc};
		push @diff, "max_retries $maxr/$j->{maxr}" if $maxr != $j->{maxr};
		push @diff, "attempts $att/$j->{attempts}" if $att != $j->{attempts};
		push @diff, "checkpoint $ckpt/$j->{ckpt}" if $ckpt ne $j->{ckpt};
		push @diff, "history $outcomes/" . join(',', @{ $j->{outcomes} })
		  if $outcomes ne join(',', @{ $j->{outcomes} });
		push @diff, "lease_token $token/" . ($j->{token} // '')
		  if $j->{status} =~ /^(running|completed)$/ && $token ne ($j->{token} // '');
		push @diff, "lease_expires_at $lexp/$j->{lease_exp}"
		  if $j->{status} eq 'running' && $lexp ne $j->{lease_exp};
		push @diff, "rows in ready + scheduled $nready + $nsched"
		  if $nready + $nsched != ($status eq 'pending' ? 1 : 0);
		if (@diff)
		{
			diag("$label: job $id differs (database/model): " . join(', ', @diff));
			$bad++;
		}
	}
	foreach my $id (grep { !$seen{$_} } keys %jobs)
	{
		diag("$label: job $id ($jobs{$id}{status}) is in the model, not in the database");
		$bad++;
	}
	return $bad;
}

# Invariants in SQL over the database and the ledger.
my @invariants = (
	[ 'a job completed twice (ledger of successful complete calls)', q{
		SELECT job_id FROM ledger WHERE op = 'complete' AND ok GROUP BY job_id HAVING count(*) > 1} ],
	[ 'a job completed with a token not its final lease_token', q{
		SELECT l.job_id FROM ledger l JOIN jobq.job j USING (job_id)
		 WHERE l.op = 'complete' AND l.ok AND l.token IS DISTINCT FROM j.lease_token} ],
	[ 'a completed job without a successful complete call', q{
		SELECT job_id FROM jobq.job j WHERE status = 'completed'
		   AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.job_id = j.job_id AND l.op = 'complete' AND l.ok)} ],
	[ 'a successful complete/fail/extend/checkpoint with a token not of the latest claim', q{
		SELECT l.seq, l.op, l.job_id FROM ledger l
		 WHERE l.ok AND l.op IN ('complete', 'fail', 'extend', 'checkpoint')
		   AND l.token IS DISTINCT FROM (SELECT c.token FROM ledger c WHERE c.op = 'claim'
		                                    AND c.job_id = l.job_id AND c.seq < l.seq
		                                  ORDER BY c.seq DESC LIMIT 1)} ],
	[ 'a successful complete/extend/checkpoint after its attempt had ended', q{
		SELECT l.seq, l.op, l.job_id FROM ledger l
		  JOIN jobq.attempt a ON a.job_id = l.job_id AND a.attempt = (l.token >> 32)
		 WHERE l.ok AND (l.op = 'complete' OR (l.op IN ('extend', 'checkpoint') AND a.finished_at < l.at))} ],
	[ 'a successful fail whose attempt is not recorded as failed', q{
		SELECT l.seq, l.job_id FROM ledger l
		 WHERE l.op = 'fail' AND l.ok
		   AND NOT EXISTS (SELECT 1 FROM jobq.attempt a WHERE a.job_id = l.job_id
		                      AND a.attempt = (l.token >> 32) AND a.outcome = 'failed')} ],
	[ 'a pending job not in exactly one of ready / scheduled, or another job in them', q{
		SELECT j.job_id, j.status, count(r.job_id), count(s.job_id) FROM jobq.job j
		  LEFT JOIN jobq.ready r USING (job_id) LEFT JOIN jobq.scheduled s USING (job_id)
		 GROUP BY j.job_id, j.status
		HAVING count(r.job_id) + count(s.job_id) <> CASE WHEN j.status = 'pending' THEN 1 ELSE 0 END} ],
	[ 'a ready or scheduled row without a job', q{
		SELECT job_id FROM jobq.ready WHERE job_id NOT IN (SELECT job_id FROM jobq.job)
		UNION ALL SELECT job_id FROM jobq.scheduled WHERE job_id NOT IN (SELECT job_id FROM jobq.job)} ],
	[ 'a running job without a lease', q{
		SELECT job_id FROM jobq.job WHERE status = 'running'
		   AND (lease_token IS NULL OR lease_expires_at IS NULL OR claimed_at IS NULL)} ],
	[ 'a job not running with a lease expiry', q{
		SELECT job_id FROM jobq.job WHERE status <> 'running' AND lease_expires_at IS NOT NULL} ],
	[ 'retry_count over max_retries', q{
		SELECT job_id FROM jobq.job WHERE retry_count > max_retries OR retry_count < 0} ],
	[ 'retry_count inconsistent with the history (jobs never retried by hand)', q{
		SELECT j.job_id, j.status, j.retry_count, h.n FROM jobq.job j,
		       LATERAL (SELECT count(*) AS n FROM jobq.attempt a WHERE a.job_id = j.job_id
		                   AND a.outcome IN ('failed', 'lease expired')) h
		 WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.job_id = j.job_id AND l.op = 'retry' AND l.ok)
		   AND j.retry_count <> h.n - CASE WHEN j.status = 'failed' AND
		         (SELECT outcome FROM jobq.attempt a WHERE a.job_id = j.job_id ORDER BY attempt DESC LIMIT 1)
		           IN ('failed', 'lease expired') THEN 1 ELSE 0 END} ],
	[ 'attempts of a job not numbered by its claims', q{
		SELECT job_id FROM jobq.attempt a WHERE attempt < 1
		    OR attempt > (SELECT attempts FROM jobq.job j WHERE j.job_id = a.job_id)} ],
	[ 'more than one job per (kind, idempotency key)', q{
		SELECT kind, idempotency_key FROM jobq.job WHERE idempotency_key IS NOT NULL
		 GROUP BY 1, 2 HAVING count(*) > 1} ],
	[ 'an idempotency key not naming its job', q{
		SELECT j.job_id FROM jobq.job j LEFT JOIN jobq.idempotency_key k
		    ON k.kind = j.kind AND k.key = j.idempotency_key
		 WHERE j.idempotency_key IS NOT NULL AND k.job_id IS DISTINCT FROM j.job_id} ],
	[ 'a claim token handed out twice', q{
		SELECT job_id, token FROM ledger WHERE op = 'claim' GROUP BY 1, 2 HAVING count(*) > 1} ],
);

sub check_invariants
{
	my ($label) = @_;
	my $bad = 0;
	foreach my $inv (@invariants)
	{
		my ($name, $sql) = @$inv;
		my $out = $node->safe_psql('postgres', $sql);
		if ($out ne '')
		{
			my @lines = split /\n/, $out;
			diag("$label: $name: " . scalar(@lines) . " rows, e.g. " . join('; ', @lines[ 0 .. ($#lines < 4 ? $#lines : 4) ]));
			$bad++;
		}
	}
	is($bad, 0, "$label: " . scalar(@invariants) . " SQL invariants hold");
}

# ---------------------------------------------------------------------------
# the random walk

sub end_txn
{
	my ($i, $commit) = @_;
	run_sql($i, $commit ? 'COMMIT' : 'ROLLBACK');
	if ($commit) { commit_txn($i); $count{commit}++; }
	else { $txn[$i] = undef; $count{rollback}++; }
}

sub step
{
	my $i = int(rand($NSESS));
	if (defined $txn[$i] && ($txn[$i]{nops} >= 6 || ($txn[$i]{nops} >= 1 && rand() < 0.25)))
	{
		end_txn($i, rand() < 0.7);
		return;
	}
	if (!defined $txn[$i] && rand() < ($ENV{JOBQ_MODEL_TXN_PCT} // 6) / 100)
	{
		run_sql($i, 'BEGIN');
		$txn[$i] = { jobs => {}, keys => {}, claimed => {}, nops => 0 };
		return;
	}
	$txn[$i]{nops}++ if defined $txn[$i];
	my $r = rand(100);
	if ($r < 24) { op_enqueue($i); }
	elsif ($r < 44) { op_claim($i); }
	elsif ($r < 46) { op_claim_burst() or op_claim($i); }
	elsif ($r < 78)
	{
		my $p = pick_running($i);
		return op_claim($i) unless $p;
		my $w = rand(32);
		if ($w < 14) { op_complete($i, $p, 0); }
		elsif ($w < 24) { op_fail($i, $p, 0); }
		elsif ($w < 28) { op_extend($i, $p, 0); }
		else { op_checkpoint($i, $p, 0); }
	}
	elsif ($r < 88)
	{
		my $p = pick_stale($i) or return op_enqueue($i);
		my $w = rand(4);
		if ($w < 1) { op_complete($i, $p, 1); }
		elsif ($w < 2) { op_fail($i, $p, 1); }
		elsif ($w < 3) { op_extend($i, $p, 1); }
		else { op_checkpoint($i, $p, 1); }
	}
	elsif ($r < 92) { op_cancel($i) or op_enqueue($i); }
	elsif ($r < 96) { op_retry($i) or op_enqueue($i); }
	else { op_reap($i) or op_claim($i); }
}

my $t_start = Time::HiRes::time();
my $walk_secs = 0;
my $ok = eval {
	foreach my $n (1 .. $NOPS)
	{
		$opno = $n;
		if ($n == int($NOPS * 0.6))
		{
			end_txn($_, 1) foreach grep { defined $txn[$_] } 0 .. $NSESS - 1;
			check_state("end of phase A (op $n)") or die "model violation\n";
			is( $node->safe_psql('postgres', 'SELECT count(*) FROM jobq.workers'),
				'1', 'phase A ran without a jobq worker for the database (the launcher only)');
			$node->safe_psql('postgres',
				"ALTER SYSTEM SET jobq.databases = ''; SELECT pg_reload_conf()");
			$phase = 'B';
		}
		step();
		if ($n % 500 == 0)
		{
			check_state("after op $n") or die "model violation\n";
			check_invariants("after op $n");
		}
	}

	# finish the open transactions, then drain everything to a final state
	$walk_secs = Time::HiRes::time() - $t_start;
	$opno = 'drain';
	end_txn($_, rand() < 0.7) foreach grep { defined $txn[$_] } 0 .. $NSESS - 1;
	# no deadline for the whole drain, which takes as long as the machine is
	# slow: only a drain that makes no progress (no job reaches a final state)
	# for the TAP suite's timeout, which catches a hang, stops the run
	my $stall = $PostgreSQL::Test::Utils::timeout_default;
	my $open_jobs = sub { scalar grep { $_->{status} =~ /^(pending|running)$/ } values %jobs };
	my ($left, $progress_at) = ($open_jobs->(), Time::HiRes::time());
	while ($open_jobs->())
	{
		if ($open_jobs->() < $left)
		{
			($left, $progress_at) = ($open_jobs->(), Time::HiRes::time());
		}
		die "drain made no progress for $stall s ($left jobs pending or running)\n"
		  if Time::HiRes::time() > $progress_at + $stall;
		sync_reaped() if $phase eq 'B';
		op_reap(0);
		my $before = $count{claimed} // 0;
		foreach my $q (@QUEUES)
		{
			my $t0 = now_us();
			my $rows = run_sql(0, claim_sql(0, $q, 50, undef, 30_000));
			my $t1 = now_us();
			apply_claim(0, $q, 50, undef, 30_000, $rows, $t0, $t1, 0);
			foreach my $r (@$rows)
			{
				rand() < 0.9
				  ? op_complete(0, [ $r->[0], $r->[1] ], 0)
				  : op_fail(0, [ $r->[0], $r->[1] ], 0);
			}
		}
		usleep(100_000) if ($count{claimed} // 0) == $before;
	}
	1;
};
if (!$ok)
{
	fail("model run stopped: $@") unless $failed;
	diag("seed $seed: the run stopped at op $opno; JOBQ_MODEL_SEED=$seed to try again");
}
my $secs = Time::HiRes::time() - $t_start;

check_state('final');
check_invariants('final');
if ($ok)
{
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM jobq.job WHERE status IN ('pending', 'running')"),
		'0', 'drained: no job pending or running');
}

my $final = $node->safe_psql('postgres',
	"SELECT string_agg(status || '=' || n, ' ' ORDER BY status) FROM"
	  . " (SELECT status, count(*) AS n FROM jobq.job GROUP BY status) s");
diag(sprintf("model: %d operations in %.1f s, drained in %.1f s, seed %d; jobs: %s",
		$NOPS, $walk_secs, $secs - $walk_secs, $seed, $final));
diag("model counts: " . join(' ', map { "$_=$count{$_}" } sort keys %count));

$_->quit foreach @S;
$node->stop;
done_testing();
