-- a drain client that finds the queue empty ends (pgbench counts it aborted)
CREATE OR REPLACE FUNCTION bench_empty() RETURNS void LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'bench: queue empty'; END$$;
