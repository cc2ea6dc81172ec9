\set k random(1, 1000000000000)
\set r random(0, 1)
\set d random(1, :dupkeys)
SELECT job_id, created FROM jobq.enqueue('bench', '{"n": 1}', queue => 'q',
       idempotency_key => CASE WHEN :r = 0 THEN 'u' || :client_id || '-' || :k ELSE 'dup-' || :d END);
