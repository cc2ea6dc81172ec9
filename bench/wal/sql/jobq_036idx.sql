-- What-if: 0.3.6's indexes on a 0.3.7 database (issue 39's WAL per job):
-- the finished jobs by finish time alone, no index of blocked jobs, and
-- attempts without their queue's index, so that the library takes the
-- 0.3.6 paths (pruning by finish time, attempts without a queue).
DROP INDEX jobq.job_finished_queue_idx;
DROP INDEX jobq.job_blocked_idx;
DROP INDEX jobq.attempt_failure_idx;
CREATE INDEX job_finished_idx ON jobq.job (finished_at) WHERE finished_at IS NOT NULL;
