ALTER TABLE sjob SET (fillfactor = 80);
