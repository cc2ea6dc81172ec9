INSERT INTO seed_job (kind, payload) SELECT 'bench', '{"n": 1}' FROM generate_series(1, 100) RETURNING id;
