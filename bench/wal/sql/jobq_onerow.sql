-- what-if for enqueue throughput only (with bench/wal/whatif-one-row.patch
-- applied): one row per job written by jobq's direct path, no jobq.ready
-- row; jobq.job has its primary key and a claim-order index, nothing else
DROP INDEX jobq.job_running_lease_idx, jobq.job_finished_idx, jobq.job_failed_idx;
CREATE INDEX job_claim_whatif ON jobq.job (queue, priority, run_at, job_id) WITH (deduplicate_items = off);
DO $$BEGIN EXECUTE format('ALTER DATABASE %I SET jobq_whatif.one_row = on', current_database()); END$$;
