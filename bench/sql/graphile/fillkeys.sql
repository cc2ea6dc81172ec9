-- pending jobs (run_at a year ahead) holding keys dup-1..n
SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
  SELECT ROW('t', '{"n": 1}'::json, NULL, now() + interval '1 year', NULL, 'dup-' || i, NULL, NULL)::graphile_worker.job_spec
    FROM generate_series(:lo, :lo + :n - 1) i));
