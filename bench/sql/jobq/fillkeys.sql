SELECT count(*) FROM jobq.enqueue_many('bench', array_fill('{"n": 1}'::jsonb, ARRAY[:n]), queue => 'keys',
       idempotency_keys => (SELECT array_agg('dup-' || i) FROM generate_series(:lo, :lo + :n - 1) i));
