-- what-if (breaks the reaper's, pruning's and the dead letter's index paths):
-- jobq.job with its primary key only, so that claim and complete can be HOT
DROP INDEX jobq.job_running_lease_idx, jobq.job_finished_idx, jobq.job_failed_idx;
