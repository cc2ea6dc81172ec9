-- test/soak/producer.sql: pgbench script, one jobq.enqueue per transaction.
-- 20% of the calls carry an idempotency key drawn from 20000, so keys repeat
-- and many of those calls must return the existing job (created = false).
\set n random(1, 1000000000)
\set roll random(1, 100)
\set key random(1, 20000)
\set prio random(0, 30)
INSERT INTO soak.enqueued (job_id, created, kind, idempotency_key)
SELECT e.job_id, e.created, 'soak.task', k.key
  FROM (SELECT CASE WHEN :roll <= 20 THEN 'single-' || :key END AS key) AS k,
       jobq.enqueue('soak.task', jsonb_build_object('n', :n),
                    queue => 'soak', priority => :prio, max_retries => 2,
                    idempotency_key => k.key) AS e;
