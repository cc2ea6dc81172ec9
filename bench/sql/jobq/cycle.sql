BEGIN;
SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) FROM jobq.claim('q', batch => 10);
SELECT count(*) FROM jobq.enqueue_many('bench', array_fill('{"n": 1}'::jsonb, ARRAY[10]), queue => 'q');
COMMIT;
