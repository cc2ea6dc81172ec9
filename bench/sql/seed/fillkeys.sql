INSERT INTO seed_job (kind, payload, idempotency_key, status, finished_at)
SELECT 'bench', '{"n": 1}', 'dup-' || i, 'completed', now() FROM generate_series(1, :n) i;
