-- The application's workers: jobq.register_worker, jobq.unregister_worker,
-- view jobq.app_workers (what a role may see of them), and fail's details.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

CREATE ROLE regress_aw_alice;
CREATE ROLE regress_aw_bob;
SELECT jobq.configure('aw_a');
SELECT jobq.configure('aw_b');
SELECT jobq.grant('aw_a', 'regress_aw_alice', 'work');
SELECT jobq.grant('aw_b', 'regress_aw_bob', 'work');

-- alice registers a worker of her queue, with what it says of itself
SET ROLE regress_aw_alice;
SELECT jobq.register_worker('web-1:4242', ARRAY['aw_a'], '{"host": "web-1", "pid": 4242, "concurrency": 4}');
-- a job in its hand (and three for later)
RESET ROLE;
SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}', '{}']::jsonb[], queue => 'aw_a');
SET ROLE regress_aw_alice;
SELECT count(*) AS claimed FROM jobq.claim('aw_a', 'web-1:4242');
SELECT worker_id, queues, info->>'host' AS host, jobs_in_hand, gone,
       started_at = last_seen_at AS fresh
  FROM jobq.app_workers;
-- a heartbeat refreshes last_seen_at and what it says, keeps started_at
SELECT started_at AS started FROM jobq.app_workers \gset
SELECT pg_sleep(0.01);
SELECT jobq.register_worker('web-1:4242', ARRAY['aw_a'], '{"host": "web-1", "pid": 4242, "concurrency": 8}');
SELECT info->>'concurrency' AS concurrency, started_at = :'started' AS same_start,
       last_seen_at > started_at AS seen_later
  FROM jobq.app_workers;

-- a queue alice may not work on: refused, nothing registered
SELECT jobq.register_worker('web-1:9', ARRAY['aw_b']);
SELECT jobq.register_worker('web-1:9', ARRAY['aw_a', 'nowhere']);
SELECT count(*) AS rows FROM jobq.app_workers;

-- bob sees no worker of alice's, and cannot take over or remove her id
SET ROLE regress_aw_bob;
SELECT count(*) AS bob_sees FROM jobq.app_workers;
SELECT jobq.register_worker('web-1:4242', ARRAY['aw_b']);
SELECT jobq.unregister_worker('web-1:4242') AS bob_unregisters;
SELECT jobq.register_worker('api-2:7', ARRAY['aw_b']);
SELECT worker_id FROM jobq.app_workers;
RESET ROLE;
-- the superuser sees both
SELECT worker_id, queues FROM jobq.app_workers ORDER BY worker_id;

-- bad input: clear errors, nothing kept
SET ROLE regress_aw_alice;
SELECT jobq.register_worker(NULL, ARRAY['aw_a']);
SELECT jobq.register_worker('', ARRAY['aw_a']);
SELECT jobq.register_worker(repeat('w', 200), ARRAY['aw_a']);
SELECT jobq.register_worker('w', NULL);
SELECT jobq.register_worker('w', ARRAY[]::text[]);
SELECT jobq.register_worker('w', ARRAY['aw_a', NULL]);
SELECT jobq.register_worker('w', ARRAY['aw_a'], '[1, 2]');
SELECT jobq.register_worker('w', ARRAY[''] );
SELECT count(*) AS alice_rows FROM jobq.app_workers;

-- gone after jobq.worker_gone_after
RESET ROLE;
SET jobq.worker_gone_after = '1s';
SET ROLE regress_aw_alice;
SELECT pg_sleep(1.1);
SELECT worker_id, gone FROM jobq.app_workers;
SELECT jobq.register_worker('web-1:4242', ARRAY['aw_a']);
SELECT worker_id, gone, started_at > :'started' AS restarted FROM jobq.app_workers;
RESET ROLE;
RESET jobq.worker_gone_after;

-- unregister: alice's own worker; again: false
SET ROLE regress_aw_alice;
SELECT jobq.unregister_worker('web-1:4242') AS unregistered;
SELECT jobq.unregister_worker('web-1:4242') AS again;
SELECT count(*) AS alice_rows FROM jobq.app_workers;
RESET ROLE;

-- fail's details: the stack trace kept with the attempt, cut at
-- jobq.max_details_length on a character boundary
SET jobq.max_details_length = 64;
SELECT job_id, lease_token FROM jobq.claim('aw_a', 'x') \gset
SELECT jobq.fail(:job_id, :lease_token, 'Boom: bad', retry_in => '0', details => repeat('x', 62) || 'ééé');
SELECT outcome, error, right(details, 3) AS tail, octet_length(details) AS bytes FROM jobq.attempt WHERE job_id = :job_id;
RESET jobq.max_details_length;
SELECT job_id, lease_token FROM jobq.claim('aw_a', 'x') \gset
SELECT jobq.fail(:job_id, :lease_token, 'Boom again', retryable => false, details => NULL);
SELECT attempt, outcome, error, details FROM jobq.attempt WHERE job_id = :job_id ORDER BY attempt;
-- positional calls of the five-argument form still work
SELECT job_id, lease_token FROM jobq.claim('aw_a', 'x') \gset
SELECT jobq.fail(:job_id, :lease_token, 'five', true, '0') AS five_args;

DROP EXTENSION jobq CASCADE;
DROP OWNED BY regress_aw_alice, regress_aw_bob;
DROP ROLE regress_aw_alice;
DROP ROLE regress_aw_bob;
