-- workload 4, thin driver: the producer; every :gap ms one critical job,
-- its payload carrying t0 (taken before the insert is sent), and the time
-- the insert had returned (taken after: both conservative by a round trip).
\sleep :gap ms
SELECT clock_timestamp() AS t0 \gset
INSERT INTO seed_job (kind, payload, priority) VALUES ('bench', jsonb_build_object('n', 1, 't0', :t0::text), 30);
INSERT INTO bench_crit_enq VALUES (:t0::timestamptz, clock_timestamp());
