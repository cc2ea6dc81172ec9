WITH j AS (INSERT INTO pjob (job_id, queue, kind, payload, priority, status, max_retries, run_at, created_at, updated_at)
           SELECT nextval('pjob_id_seq'), 'q', 'bench', '{"n": 1}', 0, 'pending', 3, now(), now(), now()
             FROM generate_series(1, 100)
           RETURNING job_id, queue, priority, run_at, kind)
INSERT INTO pready (queue, neg_priority, run_at, job_id, kind) SELECT queue, -priority, run_at, job_id, kind FROM j;
