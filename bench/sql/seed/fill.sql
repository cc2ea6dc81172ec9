INSERT INTO seed_job (kind, payload, priority) SELECT 'bench', '{"n": 1}', :prio FROM generate_series(1, :n);
