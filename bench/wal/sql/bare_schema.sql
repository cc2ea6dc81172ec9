-- bare: a plain table and SKIP LOCKED (bench/sql/bare), with a lease column
-- so that a claim can be a transaction of its own (bare_claim.sql); bare1tx
-- (bench/run's bare) leaves it NULL.  The null bitmap fits in the 24-byte
-- tuple header: the rows are as large as bench/run's.
DROP TABLE IF EXISTS bare_job;
CREATE TABLE bare_job (id bigserial PRIMARY KEY, payload jsonb NOT NULL, lease_until timestamptz);
