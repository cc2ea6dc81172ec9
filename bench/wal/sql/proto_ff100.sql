ALTER TABLE pjob SET (fillfactor = 100);
