-- finished jobs whose ids are the md5 UUIDs of keys dup-1..n (the driver's keyUuid)
INSERT INTO pgboss.job (id, name, data, state, completed_on)
SELECT md5('dup-' || i)::uuid, 'q', '{"n": 1}', 'completed', now() FROM generate_series(:lo, :lo + :n - 1) i;
