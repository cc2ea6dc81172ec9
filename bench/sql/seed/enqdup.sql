\set k random(1, 1000000000000)
\set r random(0, 1)
\set d random(1, :dupkeys)
WITH k AS (SELECT CASE WHEN :r = 0 THEN 'u' || :client_id || '-' || :k ELSE 'dup-' || :d END AS key),
     ins AS (INSERT INTO seed_job (kind, payload, idempotency_key)
             SELECT 'bench', '{"n": 1}', key FROM k
             ON CONFLICT (idempotency_key) DO NOTHING RETURNING id)
SELECT id FROM ins
UNION ALL
SELECT s.id FROM seed_job s, k WHERE s.idempotency_key = k.key AND NOT EXISTS (SELECT FROM ins);
