-- workload 4, thin driver: a worker of the critical-job test (claim, then
-- complete in the next transaction, as drain2tx.sql).  When its claim
-- returns the critical job (its payload carries t0, the time its enqueue
-- call began), it writes down the time it saw it, after the claim returned.
WITH c AS (UPDATE seed_job SET status = 'running', locked_by = 'w' || :client_id,
                  lease_expires_at = now() + interval '5 minutes'
            WHERE id IN (SELECT id FROM seed_job
                          WHERE queue = 'q' AND status = 'pending' AND run_at <= now()
                          ORDER BY priority DESC, run_at, id
                          FOR UPDATE SKIP LOCKED LIMIT :b)
           RETURNING id, payload)
SELECT array_agg(id) AS ids, count(*) AS n,
       coalesce(max(payload->>'t0'), '') AS t0, count(*) FILTER (WHERE payload ? 't0') AS crit
  FROM c \gset
\if :n = 0
\sleep 10 ms
\else
\if :crit
INSERT INTO bench_crit_seen VALUES (:t0::timestamptz, clock_timestamp());
\endif
UPDATE seed_job SET status = 'completed', finished_at = now(), lease_expires_at = NULL
 WHERE id = ANY (:ids::bigint[]) AND status = 'running';
\endif
