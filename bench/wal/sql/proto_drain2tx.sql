-- claim: the ready rows get a lease (no row lock first: jobq's direct path
-- deletes/updates without waiting and writes no lock record); complete: the
-- ready row goes, the job row is marked completed with the attempt's facts.
-- The claim reads from a position the client keeps (standing in for jobq's
-- claim position; what is measured here is the writes).
WITH c AS (UPDATE pready r SET attempts = 1, lease_token = (random() * 2147483647)::bigint,
                  lease_expires_at = now() + interval '5 minutes', claimed_at = now(), worker_id = NULL
             FROM (SELECT ctid FROM pready WHERE (queue, neg_priority, run_at, job_id) > ('q', :np, :ra::timestamptz, :pos)
                      AND queue = 'q' AND lease_token IS NULL
                    ORDER BY queue, neg_priority, run_at, job_id LIMIT :b) s
            WHERE r.ctid = s.ctid
           RETURNING r.job_id, r.lease_token, r.neg_priority, r.run_at)
SELECT array_agg(c.job_id) AS ids, array_agg(c.lease_token) AS toks, count(*) AS n,
       coalesce(max(c.job_id), :pos) AS pos, coalesce(max(c.neg_priority), :np) AS np,
       coalesce(max(c.run_at), :ra::timestamptz) AS ra FROM c \gset
\if :n = 0
SELECT bench_empty();
\endif
WITH d AS (DELETE FROM pready r USING pjob j
            WHERE j.job_id = ANY (:ids::bigint[]) AND r.queue = j.queue AND r.neg_priority = -j.priority
              AND r.run_at = j.run_at AND r.job_id = j.job_id AND r.lease_token = ANY (:toks::bigint[])
           RETURNING r.job_id, r.attempts, r.claimed_at, r.worker_id, r.lease_token)
UPDATE pjob j SET status = 'completed', attempts = d.attempts, claimed_at = d.claimed_at, worker_id = d.worker_id,
       lease_token = d.lease_token, finished_at = now(), updated_at = now()
  FROM d WHERE j.job_id = d.job_id;
