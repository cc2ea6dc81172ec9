-- single at fillfactor 33: room on the page for both later versions of every row (claim, complete) even when none can be pruned
ALTER TABLE sjob SET (fillfactor = 33);
