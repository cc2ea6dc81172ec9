--
-- priority_fifo: claim order is priority DESC, run_at ASC, job_id ASC;
-- priority labels low/medium/high/critical
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- labels map to values ...
SELECT jobq.priority('low') AS low, jobq.priority('medium') AS medium,
       jobq.priority('high') AS high, jobq.priority('critical') AS critical;

-- ... and values map back to labels
SELECT p, jobq.priority_label(p) AS label
  FROM unnest(ARRAY[0, 10, 20, 30]) AS p;

-- values between and beyond the labels are allowed
SELECT p, jobq.priority_label(p) AS label
  FROM unnest(ARRAY[-5, 5, 15, 25, 31, 100]) AS p;

-- an unknown label is an error
SELECT jobq.priority('urgent');

-- jobs enqueued in this order (one statement each, so run_at = now() grows):
--   default-0   priority 0,  run_at now
--   high-a      priority 20
--   past-0      priority 0,  run_at an hour ago: first among priority 0
--   high-b      priority 20, enqueued after high-a
--   between-15  priority 15, between medium and high
--   tie-a, tie-b priority 5, the same run_at: job_id decides
--   critical    priority 30
SELECT created FROM jobq.enqueue('default-0');
SELECT created FROM jobq.enqueue('high-a', priority => jobq.priority('high'));
SELECT created FROM jobq.enqueue('past-0', run_at => now() - interval '1 hour');
SELECT created FROM jobq.enqueue('high-b', priority => 20);
SELECT created FROM jobq.enqueue('between-15', priority => 15);
SELECT created FROM jobq.enqueue('tie-a', priority => 5, run_at => '2000-01-01 00:00:00+00');
SELECT created FROM jobq.enqueue('tie-b', priority => 5, run_at => '2000-01-01 00:00:00+00');
SELECT created FROM jobq.enqueue('critical', priority => jobq.priority('critical'));

-- the jobs keep the priority they were given
SELECT kind, priority, jobq.priority_label(priority) AS label
  FROM jobq.jobs ORDER BY job_id;

-- claims one at a time come out in priority DESC, run_at ASC, job_id ASC order
SELECT kind, priority FROM jobq.claim();
SELECT kind, priority FROM jobq.claim();
SELECT kind, priority FROM jobq.claim();
SELECT kind, priority FROM jobq.claim();
SELECT kind, priority FROM jobq.claim();
SELECT kind, priority FROM jobq.claim();
SELECT kind, priority FROM jobq.claim();
SELECT kind, priority FROM jobq.claim();
SELECT count(*) AS claimed FROM jobq.claim();

-- a batch claim takes the best jobs of the queue: both high ones, then FIFO
SELECT created FROM jobq.enqueue('low-1', queue => 'batch');
SELECT created FROM jobq.enqueue('high-1', queue => 'batch', priority => 20);
SELECT created FROM jobq.enqueue('low-2', queue => 'batch');
SELECT created FROM jobq.enqueue('high-2', queue => 'batch', priority => 20);
SELECT kind FROM jobq.claim(queue => 'batch', batch => 2) ORDER BY kind;
SELECT kind FROM jobq.claim(queue => 'batch', batch => 1);
SELECT kind FROM jobq.claim(queue => 'batch', batch => 1);

-- priorities are per queue: a high job elsewhere does not jump this queue
SELECT created FROM jobq.enqueue('other-critical', queue => 'other', priority => 30);
SELECT created FROM jobq.enqueue('mine-low', queue => 'mine');
SELECT kind FROM jobq.claim(queue => 'mine');

-- a rolled-back claim puts the job back in its place
SELECT created FROM jobq.enqueue('first', queue => 'undo', priority => 10);
SELECT created FROM jobq.enqueue('second', queue => 'undo', priority => 10);
BEGIN;
SELECT kind FROM jobq.claim(queue => 'undo');
ROLLBACK;
SELECT kind FROM jobq.claim(queue => 'undo');
SELECT kind FROM jobq.claim(queue => 'undo');

-- a job enqueued at a higher priority after claims have moved on goes first
SELECT count(*) AS enqueued
  FROM jobq.enqueue_many('bulk', array_fill('{}'::jsonb, ARRAY[3]), queue => 'late');
SELECT kind FROM jobq.claim(queue => 'late');
SELECT created FROM jobq.enqueue('late-high', queue => 'late', priority => 20);
SELECT kind FROM jobq.claim(queue => 'late');
SELECT kind FROM jobq.claim(queue => 'late');
