ALTER TABLE pjob SET (fillfactor = 50);
ALTER TABLE pready SET (fillfactor = 50);
