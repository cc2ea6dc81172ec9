INSERT INTO bare_job (payload) SELECT '{"n": 1}' FROM generate_series(1, 100);
