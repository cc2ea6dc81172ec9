-- claim: HOT update of the job rows (read in job_id order from a position
-- the client keeps, standing in for jobq's claim position: what is measured
-- here is the writes); complete: HOT update again
WITH c AS (UPDATE sjob j SET attempts = attempts + 1, lease_token = (random() * 2147483647)::bigint,
                  claimed_at = now(), lease_expires_at = now() + interval '5 minutes', updated_at = now(), status = 'r'
             FROM (SELECT ctid FROM sjob WHERE job_id > :pos AND status = 'p' ORDER BY job_id LIMIT :b) s
            WHERE j.ctid = s.ctid
           RETURNING j.job_id, j.lease_token)
SELECT array_agg(c.job_id) AS ids, array_agg(c.lease_token) AS toks, count(*) AS n, coalesce(max(c.job_id), :pos) AS pos FROM c \gset
\if :n = 0
SELECT bench_empty();
\endif
UPDATE sjob SET status = 'c', finished_at = now(), updated_at = now()
 WHERE job_id = ANY (:ids::bigint[]) AND lease_token = ANY (:toks::bigint[]) AND status = 'r';
