INSERT INTO sjob (job_id, queue, neg_priority, run_at, kind, payload, max_retries, created_at, updated_at, status)
SELECT nextval('sjob_id_seq'), 'q', 0, now(), 'bench', '{"n": 1}', 3, now(), now(), 'p'
  FROM generate_series(1, 100);
