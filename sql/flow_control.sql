-- Flow control: per-queue concurrency, per-key concurrency, rate limits,
-- and the circuit breaker.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- max_concurrency: never more than N running, whatever the batch
SELECT jobq.configure('lim', max_concurrency => 3);
SELECT count(*) AS enqueued FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[10]), 'lim');
SELECT count(*) AS first_claim FROM jobq.claim('lim', batch => 2);
SELECT count(*) AS second_claim FROM jobq.claim('lim', batch => 5);
SELECT count(*) AS third_claim FROM jobq.claim('lim', batch => 5);
SELECT running FROM jobq.queue_stats WHERE queue = 'lim';
-- finishing one makes room for one
SELECT jobq.complete(job_id, lease_token) FROM jobq.job
 WHERE queue = 'lim' AND status = 'running' ORDER BY job_id LIMIT 1;
SELECT count(*) AS after_complete FROM jobq.claim('lim', batch => 5);
-- 0 removes the limit
SELECT jobq.configure('lim', max_concurrency => 0);
SELECT count(*) AS unlimited FROM jobq.claim('lim', batch => 10);

-- max_per_key: one running job per concurrency_key; other keys keep flowing
SELECT jobq.configure('pk', max_per_key => 1);
SELECT created FROM jobq.enqueue('a1', queue => 'pk', concurrency_key => 'tenant-a');
SELECT created FROM jobq.enqueue('a2', queue => 'pk', concurrency_key => 'tenant-a');
SELECT created FROM jobq.enqueue('b1', queue => 'pk', concurrency_key => 'tenant-b');
SELECT created FROM jobq.enqueue('n1', queue => 'pk');
SELECT kind FROM jobq.claim('pk', batch => 10) ORDER BY kind;
-- tenant-a's second job waits for its first
SELECT count(*) AS while_a_runs FROM jobq.claim('pk', batch => 10);
SELECT jobq.complete(job_id, lease_token) FROM jobq.job WHERE queue = 'pk' AND kind = 'a1';
SELECT kind FROM jobq.claim('pk', batch => 10);
-- the key survives a retry
SELECT jobq.fail(job_id, lease_token, 'again', retry_in => '0') FROM jobq.job WHERE queue = 'pk' AND kind = 'a2';
SELECT concurrency_key FROM jobq.jobs WHERE queue = 'pk' AND kind = 'a2';

-- rate_limit: a sliding window, never more than N claims per rate_period
-- (an hour here, so that the test's own speed cannot matter: the window is
-- moved on by ageing the recorded claims in jobq.rate_window, not by waiting)
SELECT jobq.configure('rl', rate_limit => 4, rate_period => '1 hour');
SELECT count(*) AS enqueued FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[10]), 'rl');
SELECT count(*) AS r1 FROM jobq.claim('rl', batch => 3);
SELECT count(*) AS r2 FROM jobq.claim('rl', batch => 3);
SELECT count(*) AS r3 FROM jobq.claim('rl', batch => 3);
SELECT count(*) AS claims_in_window FROM jobq.rate_window WHERE queue = 'rl';
-- the first claim's three leave the window (over an hour old); the second's
-- one still counts, so three more may be claimed, not four
UPDATE jobq.rate_window SET claimed_at = claimed_at - interval '61 minutes'
 WHERE queue = 'rl'
   AND claimed_at = (SELECT min(claimed_at) FROM jobq.rate_window WHERE queue = 'rl');
SELECT count(*) AS next_window FROM jobq.claim('rl', batch => 10);
SELECT count(*) AS after_next_window FROM jobq.claim('rl', batch => 10);

-- a claim's record in the window has its jobs' claimed_at (with a per-key
-- limit the leases start after the running jobs by key were counted): the
-- record leaves the window no earlier than a period after its jobs' claims
SELECT jobq.configure('rlk', rate_limit => 4, rate_period => '1 hour', max_per_key => 1);
SELECT count(*) AS enqueued FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[3]), 'rlk',
                                                   concurrency_key => 'x');
SELECT count(*) AS claimed FROM jobq.claim('rlk', batch => 3);
SELECT (SELECT array_agg(claimed_at) FROM jobq.rate_window WHERE queue = 'rlk')
     = (SELECT array_agg(claimed_at) FROM jobq.job WHERE queue = 'rlk' AND status = 'running')
       AS window_at_claimed_at;

-- circuit breaker: 2 consecutive failures -> one at a time -> paused
SELECT jobq.configure('br', breaker_threshold => 2, max_retries => 0);
SELECT count(*) AS enqueued FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[10]), 'br');
SELECT jobq.fail(job_id, lease_token, 'upstream down') FROM jobq.claim('br', batch => 2);
SELECT breaker_state, paused FROM jobq.queue WHERE name = 'br';
SELECT count(*) AS throttled_gives FROM (SELECT jobq.fail(job_id, lease_token, 'still down')
                                          FROM jobq.claim('br', batch => 5)) f;
SELECT count(*) AS throttled_gives FROM (SELECT jobq.fail(job_id, lease_token, 'down for good')
                                          FROM jobq.claim('br', batch => 5)) f;
SELECT breaker_state, paused, breaker_reason, breaker_tripped_at IS NOT NULL AS tripped
  FROM jobq.queue WHERE name = 'br';
SELECT count(*) AS while_open FROM jobq.claim('br', batch => 5);
-- resume: half-open, one job at a time until a success closes it
SELECT jobq.resume('br');
SELECT breaker_state, paused FROM jobq.queue WHERE name = 'br';
SELECT count(*) AS half_open_gives FROM (SELECT jobq.complete(job_id, lease_token)
                                          FROM jobq.claim('br', batch => 5)) c;
SELECT breaker_state, paused, breaker_failures FROM jobq.queue WHERE name = 'br';
SELECT count(*) AS closed_gives FROM jobq.claim('br', batch => 5);
-- a success resets the consecutive count
SELECT jobq.configure('br2', breaker_threshold => 2, max_retries => 0);
SELECT count(*) FROM jobq.enqueue_many('k', array_fill('{}'::jsonb, ARRAY[3]), 'br2');
SELECT jobq.fail(job_id, lease_token, 'x') FROM jobq.claim('br2');
SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('br2');
SELECT jobq.fail(job_id, lease_token, 'x') FROM jobq.claim('br2');
SELECT breaker_state, breaker_failures FROM jobq.queue WHERE name = 'br2';
-- removing the breaker closes it (two more failures throttle 'br' first:
-- it was closed again above)
SELECT jobq.fail(job_id, lease_token, 'down again') FROM jobq.job
 WHERE queue = 'br' AND status = 'running' ORDER BY job_id LIMIT 2;
SELECT breaker_state, breaker_failures FROM jobq.queue WHERE name = 'br';
SELECT jobq.configure('br', breaker_threshold => 0);
SELECT breaker_state, breaker_threshold FROM jobq.queue WHERE name = 'br';

-- bad settings
SELECT jobq.configure('x', max_concurrency => -1);
SELECT jobq.configure('x', rate_limit => 5, rate_period => '0');
SELECT jobq.configure('x', breaker_threshold => -2);
SELECT count(*) AS queues_named_x FROM jobq.queue WHERE name = 'x';
