-- backlog set-up only (not measured): n jobs straight into pg-boss's table
INSERT INTO pgboss.job (name, data, priority) SELECT 'q', '{"n": 1}', :prio FROM generate_series(1, :n);
