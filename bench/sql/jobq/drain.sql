SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) AS n
  FROM jobq.claim('q', batch => :b) \gset
\if :n = 0
SELECT bench_empty();
\endif
