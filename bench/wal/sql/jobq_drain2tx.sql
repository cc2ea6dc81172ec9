-- bench/sql/jobq/drain2tx.sql: claim in one transaction, complete_many in the next
SELECT array_agg(job_id) AS ids, array_agg(lease_token) AS toks, count(*) AS n
  FROM jobq.claim('q', batch => :b) \gset
\if :n = 0
SELECT bench_empty();
\endif
SELECT jobq.complete_many(:ids::bigint[], :toks::bigint[]);
