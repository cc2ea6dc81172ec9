INSERT INTO bare_job (payload) VALUES ('{"n": 1}') RETURNING id;
