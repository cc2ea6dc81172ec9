SELECT job_id FROM jobq.enqueue('bench', '{"n": 1}', queue => 'q');
