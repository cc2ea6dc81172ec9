-- bench/run's bare drain (bench/sql/bare/drain.sql): claim and complete are one DELETE
WITH d AS (DELETE FROM bare_job WHERE id IN
             (SELECT id FROM bare_job ORDER BY id FOR UPDATE SKIP LOCKED LIMIT :b)
           RETURNING id, payload)
SELECT count(*) AS n FROM d \gset
\if :n = 0
SELECT bench_empty();
\endif
