-- workload 4, thin driver: the producer; every :gap ms one critical job,
-- its payload carrying t0 (taken before the enqueue call is sent), and the
-- time the call had returned (taken after: both conservative by a round trip).
\sleep :gap ms
SELECT clock_timestamp() AS t0 \gset
SELECT job_id FROM jobq.enqueue('bench', jsonb_build_object('n', 1, 't0', :t0::text), queue => 'q', priority => 30);
INSERT INTO bench_crit_enq VALUES (:t0::timestamptz, clock_timestamp());
