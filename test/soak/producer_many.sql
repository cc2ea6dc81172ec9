-- test/soak/producer_many.sql: pgbench script, one jobq.enqueue_many of five
-- jobs per transaction, every job keyed; the key group is drawn from 5000,
-- so whole batches repeat and must come back with created = false.
\set n random(1, 1000000000)
\set key random(1, 5000)
\set prio random(0, 30)
INSERT INTO soak.enqueued (job_id, created, kind, idempotency_key)
SELECT e.job_id, e.created, 'soak.batch', 'batch-' || :key || '-' || e.ord
  FROM jobq.enqueue_many('soak.batch',
                         ARRAY(SELECT jsonb_build_object('n', :n + i) FROM generate_series(1, 5) AS i),
                         queue => 'soak', priority => :prio, max_retries => 2,
                         idempotency_keys => ARRAY(SELECT 'batch-' || :key || '-' || i FROM generate_series(1, 5) AS i))
       WITH ORDINALITY AS e(job_id, created, ord);
