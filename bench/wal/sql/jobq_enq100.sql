SELECT count(*) FROM jobq.enqueue_many('bench', array_fill('{"n": 1}'::jsonb, ARRAY[100]), queue => 'q');
