INSERT INTO seed_job (kind, payload) VALUES ('bench', '{"n": 1}') RETURNING id;
