-- bench/sql/common.sql: helpers every SQL contender's database gets.
-- A pgbench client that finds its queue empty calls bench_empty(): the error
-- ends that client (pgbench has no "stop" command), and bench/run accepts
-- exactly this message as a normal end of a drain.
CREATE FUNCTION bench_empty() RETURNS void LANGUAGE plpgsql AS
$$BEGIN RAISE EXCEPTION 'bench: queue empty'; END$$;
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
