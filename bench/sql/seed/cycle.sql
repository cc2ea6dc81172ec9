BEGIN;
WITH c AS (UPDATE seed_job SET status = 'running', locked_by = 'w' || :client_id,
                  lease_expires_at = now() + interval '5 minutes'
            WHERE id IN (SELECT id FROM seed_job
                          WHERE queue = 'q' AND status = 'pending' AND run_at <= now()
                          ORDER BY priority DESC, run_at, id
                          FOR UPDATE SKIP LOCKED LIMIT 10)
           RETURNING id, payload)
SELECT array_agg(id) AS ids FROM c \gset
UPDATE seed_job SET status = 'completed', finished_at = now(), lease_expires_at = NULL
 WHERE id = ANY (NULLIF(:ids, '')::bigint[]) AND status = 'running';
INSERT INTO seed_job (kind, payload) SELECT 'bench', '{"n": 1}' FROM generate_series(1, 10);
COMMIT;
