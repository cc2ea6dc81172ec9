-- claim (a lease, one transaction), then complete (delete, the next one)
WITH c AS (UPDATE bare_job SET lease_until = now() + interval '5 minutes'
            WHERE id IN (SELECT id FROM bare_job WHERE lease_until IS NULL
                          ORDER BY id FOR UPDATE SKIP LOCKED LIMIT :b)
           RETURNING id, payload)
SELECT array_agg(id) AS ids, count(*) AS n FROM c \gset
\if :n = 0
SELECT bench_empty();
\endif
DELETE FROM bare_job WHERE id = ANY (:ids::bigint[]);
