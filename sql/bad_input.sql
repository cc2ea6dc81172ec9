--
-- bad_input: every bad argument is an ERROR with a SQLSTATE and a message
-- naming the argument, and leaves no trace (no job, no queue)
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- after each error: its SQLSTATE (psql's SQLSTATE is that of the last
-- statement, 00000 when it succeeded), then the number of jobs and queues
\set VERBOSITY default
\set SHOW_CONTEXT never
\set trace 'SELECT (SELECT count(*) FROM jobq.jobs) AS jobs, (SELECT count(*) FROM jobq.queue) AS queues;'

-- one good job in queue 'default' to start from
SELECT job_id AS job FROM jobq.enqueue('good') \gset
:trace

--
-- enqueue
--

-- kind must not be NULL or empty
SELECT * FROM jobq.enqueue(NULL);
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('', queue => 'new-queue');
\echo :SQLSTATE
:trace

-- queue must not be NULL or empty
SELECT * FROM jobq.enqueue('k', queue => NULL);
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', queue => '');
\echo :SQLSTATE
:trace

-- payload must be a JSON object
SELECT * FROM jobq.enqueue('k', '[1, 2]', queue => 'new-queue');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', '"text"', queue => 'new-queue');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', 'null', queue => 'new-queue');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', NULL, queue => 'new-queue');
\echo :SQLSTATE
:trace

-- payload must not be over jobq.max_payload_size
SET jobq.max_payload_size = 64;
SELECT * FROM jobq.enqueue('k', jsonb_build_object('blob', repeat('x', 100)), queue => 'new-queue');
\echo :SQLSTATE
:trace
-- a payload under the limit is fine
SELECT created FROM jobq.enqueue('small', '{"a": 1}', queue => 'small');
RESET jobq.max_payload_size;
:trace

-- kind, queue and idempotency_key have a length limit
SELECT * FROM jobq.enqueue(repeat('k', 200), queue => 'new-queue');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', queue => repeat('q', 200));
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', queue => 'new-queue', idempotency_key => repeat('x', 600));
\echo :SQLSTATE
-- an empty idempotency_key is not a key
SELECT * FROM jobq.enqueue('k', queue => 'new-queue', idempotency_key => '');
\echo :SQLSTATE
:trace

-- max_retries must not be negative
SELECT * FROM jobq.enqueue('k', queue => 'new-queue', max_retries => -1);
\echo :SQLSTATE
-- run_at must not be NULL
SELECT * FROM jobq.enqueue('k', queue => 'new-queue', run_at => NULL);
\echo :SQLSTATE
-- priority must not be NULL
SELECT * FROM jobq.enqueue('k', queue => 'new-queue', priority => NULL);
\echo :SQLSTATE
:trace

-- an unrecognized priority label
SELECT jobq.priority('urgent');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue('k', queue => 'new-queue', priority => jobq.priority('urgent'));
\echo :SQLSTATE
-- (a NULL label is not an error: jobq.priority is strict and returns NULL)
SELECT jobq.priority(NULL) IS NULL AS null_label_gives_null;
:trace

--
-- enqueue_many
--

-- payloads and idempotency_keys must have the same length
SELECT * FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[], queue => 'new-queue',
                                idempotency_keys => ARRAY['a', 'b']);
\echo :SQLSTATE
:trace

-- one bad payload fails the whole batch, the good ones before it too
SELECT * FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '[3]']::jsonb[], queue => 'new-queue');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue_many('k', ARRAY['{}', NULL]::jsonb[], queue => 'new-queue');
\echo :SQLSTATE
:trace

-- kind and payloads must not be NULL
SELECT * FROM jobq.enqueue_many(NULL, ARRAY['{}']::jsonb[], queue => 'new-queue');
\echo :SQLSTATE
SELECT * FROM jobq.enqueue_many('k', NULL, queue => 'new-queue');
\echo :SQLSTATE
:trace

--
-- claim
--

-- batch must be positive and at most jobq.max_batch (1000)
SELECT * FROM jobq.claim(batch => 0);
\echo :SQLSTATE
SELECT * FROM jobq.claim(batch => -1);
\echo :SQLSTATE
SELECT * FROM jobq.claim(batch => 1001);
\echo :SQLSTATE
SELECT * FROM jobq.claim(batch => NULL);
\echo :SQLSTATE

-- kinds: each element a name (not NULL, not empty, not too long)
SELECT * FROM jobq.claim(kinds => ARRAY['a', NULL]);
\echo :SQLSTATE
SELECT * FROM jobq.claim(kinds => ARRAY['']);
\echo :SQLSTATE
SELECT * FROM jobq.claim(kinds => ARRAY[repeat('k', 129)]);
\echo :SQLSTATE
SELECT * FROM jobq.claim(kinds => ARRAY[['a'], ['b']]);
\echo :SQLSTATE

-- the batch of jobq.reap and jobq.prune: 1 or more, not NULL
SELECT jobq.reap(0);
\echo :SQLSTATE
SELECT jobq.reap(NULL);
\echo :SQLSTATE
SELECT jobq.prune(-1);
\echo :SQLSTATE
SELECT jobq.prune(NULL);
\echo :SQLSTATE

-- queue must not be NULL or empty
SELECT * FROM jobq.claim(queue => NULL);
\echo :SQLSTATE
SELECT * FROM jobq.claim(queue => '');
\echo :SQLSTATE

-- lease must be positive
SELECT * FROM jobq.claim(lease => '-1 minute');
\echo :SQLSTATE
SELECT * FROM jobq.claim(lease => '0 s');
\echo :SQLSTATE
-- a day by jobq's measure (a month of 30 days), but a day back in February
SELECT * FROM jobq.claim(lease => '1 mon -29 days');
\echo :SQLSTATE
SELECT jobq.configure('new-queue', retention_completed => '1 day -1 hour');
\echo :SQLSTATE

-- a negative wait, and a wait under a transaction snapshot (it would never
-- see the jobs it waits for)
SELECT * FROM jobq.claim(wait => '-1 second');
\echo :SQLSTATE
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM jobq.claim(wait => '1 second');
\echo :SQLSTATE
ROLLBACK;

-- none of these claimed the good job
SELECT status FROM jobq.jobs WHERE job_id = :job;
:trace

-- claiming from a queue that does not exist returns nothing and creates nothing
SELECT count(*) AS claimed FROM jobq.claim(queue => 'no-such-queue');
:trace

--
-- complete, complete_many, fail, extend, checkpoint
--
SELECT lease_token AS token FROM jobq.claim() \gset

-- NULL job_id or lease_token
SELECT jobq.complete(NULL, :token);
\echo :SQLSTATE
SELECT jobq.complete(:job, NULL);
\echo :SQLSTATE
SELECT jobq.fail(NULL, :token, 'e');
\echo :SQLSTATE
SELECT jobq.fail(:job, NULL, 'e');
\echo :SQLSTATE
SELECT jobq.extend(NULL, :token, '1 minute');
\echo :SQLSTATE
SELECT jobq.extend(:job, NULL, '1 minute');
\echo :SQLSTATE
SELECT jobq.checkpoint(NULL, :token, '{}');
\echo :SQLSTATE
SELECT jobq.checkpoint(:job, NULL, '{}');
\echo :SQLSTATE

-- extend needs a positive lease
SELECT jobq.extend(:job, :token, '-1 minute');
\echo :SQLSTATE
SELECT jobq.extend(:job, :token, NULL);
\echo :SQLSTATE

-- fail needs a non-negative retry_in and an error
SELECT jobq.fail(:job, :token, 'e', retry_in => '-1 minute');
\echo :SQLSTATE
SELECT jobq.fail(:job, :token, NULL);
\echo :SQLSTATE

-- result and checkpoint must not be over jobq.max_result_size (the limit
-- for results and checkpoints; jobq.max_payload_size is the payloads' own),
-- in complete, complete_many and checkpoint alike
SET jobq.max_result_size = 64;
SELECT jobq.complete(:job, :token, jsonb_build_object('blob', repeat('x', 100)));
\echo :SQLSTATE
-- (the first job would complete with no result: the second result stops both)
SELECT jobq.complete_many(ARRAY[:job, :job + 1000], ARRAY[:token, :token],
                          ARRAY[NULL, jsonb_build_object('blob', repeat('x', 100))]);
\echo :SQLSTATE
SELECT jobq.checkpoint(:job, :token, jsonb_build_object('blob', repeat('x', 100)));
\echo :SQLSTATE
-- a result or checkpoint under the limit is stored (the checkpoint is
-- checked below, the result by the final complete)
SELECT jobq.checkpoint(:job, :token, '{"step": 1}') AS checkpointed;
\echo :SQLSTATE
RESET jobq.max_result_size;
-- jobq.max_payload_size does not limit results
SET jobq.max_payload_size = 64;
SELECT jobq.checkpoint(:job, :token, jsonb_build_object('blob', repeat('y', 100))) AS checkpointed;
\echo :SQLSTATE
SELECT jobq.checkpoint(:job, :token, '{"step": 1}') AS checkpointed;
RESET jobq.max_payload_size;

-- complete_many: the arrays must have the same length
SELECT jobq.complete_many(ARRAY[:job, :job + 1], ARRAY[:token]);
\echo :SQLSTATE
SELECT jobq.complete_many(ARRAY[:job], ARRAY[:token], ARRAY['{}', '{}']::jsonb[]);
\echo :SQLSTATE

-- after all these errors the job is still running, with its lease and token
-- (no result, the last good checkpoint), so its holder can still complete it
SELECT status, retry_count, last_error, result, checkpoint, lease_expires_at > now() AS leased
  FROM jobq.jobs WHERE job_id = :job;
SELECT jobq.complete(:job, :token, '{"done": true}') AS completed;
SELECT status, result FROM jobq.jobs WHERE job_id = :job;
:trace

--
-- configure
--
SELECT jobq.configure(NULL, max_retries => 1);
\echo :SQLSTATE
SELECT jobq.configure('new-queue', max_retries => -1);
\echo :SQLSTATE
SELECT jobq.configure('new-queue', lease => '-5 minutes');
\echo :SQLSTATE
SELECT jobq.configure('new-queue', backoff_base => '-1 s');
\echo :SQLSTATE
SELECT jobq.configure('new-queue', backoff_jitter => 1.5);
\echo :SQLSTATE
SELECT jobq.configure('new-queue', backoff_jitter => -0.1);
\echo :SQLSTATE
-- backoff_cap must not be shorter than backoff_base, set together ...
SELECT jobq.configure('new-queue', backoff_base => '1 hour', backoff_cap => '1 minute');
\echo :SQLSTATE
-- ... or one at a time (the default cap is 1 hour)
SELECT jobq.configure('new-queue', backoff_base => '2 hours');
\echo :SQLSTATE
SELECT jobq.configure('', max_retries => 1);
\echo :SQLSTATE
:trace

-- enqueue still works after all these errors
SELECT created FROM jobq.enqueue('after-errors');
:trace

-- limits: each a setting, with a clear error naming it
SET jobq.max_result_size = 64;
SELECT job_id AS lj, lease_token AS ltok FROM jobq.claim() \gset
SELECT jobq.complete(:lj, :ltok, jsonb_build_object('big', repeat('x', 100)));
\echo :SQLSTATE
SELECT jobq.checkpoint(:lj, :ltok, jsonb_build_object('big', repeat('x', 100)));
\echo :SQLSTATE
RESET jobq.max_result_size;
-- a long error text is truncated, not refused
-- (to 64 bytes: 'x' and 31 two-byte characters make 63 bytes; the 32nd
-- character would end at byte 65, so it is dropped whole, not split)
SET jobq.max_error_length = 64;
SELECT jobq.fail(:lj, :ltok, 'x' || repeat('é', 100), retryable => false);
SELECT last_error = 'x' || repeat('é', 31) AS truncated_on_a_character, octet_length(last_error)
  FROM jobq.jobs WHERE job_id = :lj;
RESET jobq.max_error_length;
SET jobq.max_name_length = 4;
SELECT * FROM jobq.enqueue('abcde');
\echo :SQLSTATE
SELECT * FROM jobq.claim('abcde');
\echo :SQLSTATE
RESET jobq.max_name_length;
SET jobq.max_key_length = 8;
SELECT * FROM jobq.enqueue('k', idempotency_key => '123456789');
\echo :SQLSTATE
RESET jobq.max_key_length;
SET jobq.max_cron_length = 10;
SELECT jobq.schedule('s', '*/5 * * * * *', 'k');
\echo :SQLSTATE
RESET jobq.max_cron_length;
-- retry_failed: NULL is every kind, every queue; an empty name is an error
SELECT jobq.retry_failed('', 'q');
\echo :SQLSTATE
SELECT jobq.retry_failed(NULL, '');
\echo :SQLSTATE
:trace
SET jobq.max_schedules = 1;
SELECT jobq.schedule('s1', '0 0 1 1 *', 'k') > 0 AS first_schedule;
SELECT jobq.schedule('s1', '0 0 2 1 *', 'k') > 0 AS same_name_updates;
SELECT jobq.schedule('s2', '0 0 1 1 *', 'k');
\echo :SQLSTATE
RESET jobq.max_schedules;
SELECT count(*) AS schedules FROM jobq.schedule;
:trace
