-- what-if: jobq.job at fillfactor 50 (80 in 0.3.0)
ALTER TABLE jobq.job SET (fillfactor = 50);
