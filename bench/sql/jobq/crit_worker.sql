-- workload 4, thin driver: a worker of the critical-job test (claim, then
-- complete_many in the next transaction, as drain2tx.sql).  When its claim
-- returns the critical job (its payload carries t0, the time its enqueue
-- call began), it writes down the time it saw it, after the claim returned.
SELECT array_agg(job_id) AS ids, array_agg(lease_token) AS toks, count(*) AS n,
       coalesce(max(payload->>'t0'), '') AS t0, count(*) FILTER (WHERE payload ? 't0') AS crit
  FROM jobq.claim('q', batch => :b) \gset
\if :n = 0
\sleep 10 ms
\else
\if :crit
INSERT INTO bench_crit_seen VALUES (:t0::timestamptz, clock_timestamp());
\endif
SELECT jobq.complete_many(:ids::bigint[], :toks::bigint[]);
\endif
