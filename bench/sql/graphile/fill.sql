-- backlog set-up only (not measured): graphile-worker's own add_jobs, 10k at a time;
-- graphile-worker runs numerically smaller priorities first: low = 100 - prio
SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(
  SELECT ROW('t', '{"n": 1}'::json, NULL, NULL, NULL, NULL, 100 - :prio, NULL)::graphile_worker.job_spec
    FROM generate_series(1, :n)));
