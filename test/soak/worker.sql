-- test/soak/worker.sql: pgbench script, one worker round (see setup.sql).
CALL soak.work(:fail_pct, 10, :abandon_pct);
