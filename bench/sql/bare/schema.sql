-- bare: the least work a durable SQL queue can do (no lease, no retry, no priority).
DROP TABLE IF EXISTS bare_job;
CREATE TABLE bare_job (id bigserial PRIMARY KEY, payload jsonb NOT NULL);
