\set k random(1, 1000000000000)
SELECT job_id, created FROM jobq.enqueue('bench', '{"n": 1}', queue => 'q',
                                         idempotency_key => 'u' || :client_id || '-' || :k);
