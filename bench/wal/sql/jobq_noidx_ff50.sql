DROP INDEX jobq.job_running_lease_idx, jobq.job_finished_idx, jobq.job_failed_idx;
ALTER TABLE jobq.job SET (fillfactor = 50);
