BEGIN;
WITH d AS (DELETE FROM bare_job WHERE id IN
             (SELECT id FROM bare_job ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 10)
           RETURNING id, payload)
SELECT count(*) FROM d;
INSERT INTO bare_job (payload) SELECT '{"n": 1}' FROM generate_series(1, 10);
COMMIT;
