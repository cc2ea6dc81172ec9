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

-- bob sees no worker of alice's.  Worker ids are per role: the same id is
-- bob's own worker, another row, which leaves alice's as it was (so he cannot
-- take her id first to keep her worker out); his unregister removes his only
SET ROLE regress_aw_bob;
SELECT count(*) AS bob_sees FROM jobq.app_workers;
SELECT jobq.register_worker('web-1:4242', ARRAY['aw_b'], '{"host": "bob"}');
SELECT worker_id, queues, info->>'host' AS host FROM jobq.app_workers;
RESET ROLE;
SELECT worker_id, registered_by::regrole AS role, queues, info->>'concurrency' AS concurrency
  FROM jobq.app_worker ORDER BY worker_id, registered_by::regrole::text;
-- a superuser's unregister removes its own worker of that id only (a
-- library connected as one must not remove a tenant's at its stop)
SELECT jobq.register_worker('web-1:4242', ARRAY['aw_a']);
SELECT jobq.unregister_worker('web-1:4242') AS superuser_unregisters;
SELECT worker_id, registered_by::regrole AS role FROM jobq.app_worker ORDER BY worker_id, registered_by::regrole::text;
SET ROLE regress_aw_bob;
SELECT jobq.unregister_worker('web-1:4242') AS bob_unregisters;
SELECT jobq.register_worker('api-2:7', ARRAY['aw_b']);
SELECT worker_id FROM jobq.app_workers;
RESET ROLE;
-- the superuser sees both roles' workers; alice's as she registered it
SELECT worker_id, queues, info->>'concurrency' AS concurrency FROM jobq.app_workers ORDER BY worker_id;

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
SELECT jobq.register_worker('w', ARRAY['aw_a', repeat('q', 129)]);
SELECT count(*) AS alice_rows FROM jobq.app_workers;
-- the queues kept once each, counted from 1, whatever the array was
SELECT jobq.register_worker('norm', '[0:2]={aw_a,aw_a,aw_a}');
SELECT queues, array_lower(queues, 1) AS lower FROM jobq.app_workers WHERE worker_id = 'norm';
SELECT jobq.unregister_worker('norm');

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

-- at most jobq.max_app_workers rows per role (a superuser's setting): a new
-- worker beyond takes the place of the role's worker gone longest, and is
-- refused while all are alive; a heartbeat at the cap is no new worker; one
-- role's workers do not count against another's
SET ROLE regress_aw_alice;
SET jobq.max_app_workers = 2;
RESET ROLE;
SET jobq.max_app_workers = 2;
SET ROLE regress_aw_alice;
SELECT jobq.register_worker('cap-1', ARRAY['aw_a']);
SELECT jobq.register_worker('cap-2', ARRAY['aw_a']);
SELECT jobq.register_worker('cap-3', ARRAY['aw_a']);
SELECT jobq.register_worker('cap-2', ARRAY['aw_a'], '{"beat": 2}');
RESET ROLE;
UPDATE jobq.app_worker SET last_seen_at = now() - interval '3 minutes' WHERE worker_id = 'cap-1';
UPDATE jobq.app_worker SET last_seen_at = now() - interval '2 minutes' WHERE worker_id = 'cap-2';
SET ROLE regress_aw_alice;
SELECT jobq.register_worker('cap-3', ARRAY['aw_a']);
SELECT worker_id, gone FROM jobq.app_workers ORDER BY worker_id;
SET ROLE regress_aw_bob;
SELECT jobq.register_worker('bob-2', ARRAY['aw_b']);
SELECT jobq.register_worker('bob-3', ARRAY['aw_b']);
SELECT worker_id FROM jobq.app_workers ORDER BY worker_id;
RESET ROLE;
-- lowered below what a role has: as many of its gone workers make way
UPDATE jobq.app_worker SET last_seen_at = now() - interval '2 minutes' WHERE worker_id = 'bob-2';
SET jobq.max_app_workers = 1;
SET ROLE regress_aw_bob;
SELECT jobq.register_worker('bob-3', ARRAY['aw_b']);
RESET ROLE;
UPDATE jobq.app_worker SET last_seen_at = now() - interval '2 minutes' WHERE worker_id = 'api-2:7';
SET ROLE regress_aw_bob;
SELECT jobq.register_worker('bob-3', ARRAY['aw_b']);
SELECT worker_id FROM jobq.app_workers ORDER BY worker_id;
RESET ROLE;
RESET jobq.max_app_workers;

-- a worker of alice's on her own queue and on one she shares with bob:
-- bob sees it with the shared queue only (her other queue's name is not his
-- to read), and its jobs in hand there; alice sees both
SELECT jobq.grant(q, 'regress_aw_alice', 'work') FROM unnest(ARRAY['aw_p', 'aw_s']) q;
SELECT jobq.grant('aw_s', 'regress_aw_bob', 'work');
SELECT count(*) FROM generate_series(1, 2) i, unnest(ARRAY['aw_p', 'aw_s']) q, jobq.enqueue('k', jsonb_build_object('i', i), queue => q);
SET ROLE regress_aw_alice;
SELECT jobq.register_worker('both', ARRAY['aw_p', 'aw_s']);
SELECT count(*) AS claimed FROM unnest(ARRAY['aw_p', 'aw_p', 'aw_s']) q, jobq.claim(q, 'both');
SELECT worker_id, queues, jobs_in_hand FROM jobq.app_workers WHERE worker_id = 'both';
SET ROLE regress_aw_bob;
SELECT worker_id, queues, jobs_in_hand FROM jobq.app_workers;
-- the same for bob with many queues (his rows are then sorted out by a
-- hash look-up per name instead of an array overlap)
RESET ROLE;
SELECT count(jobq.grant('aw_x' || i, 'regress_aw_bob', 'work')) FROM generate_series(1, 20) i;
SET ROLE regress_aw_bob;
SELECT worker_id, queues, jobs_in_hand FROM jobq.app_workers;
-- inside a SECURITY DEFINER function of bob's, the view is bob's whoever
-- calls it: alice calling it does not see her own workers through it
RESET ROLE;
CREATE SCHEMA aw_bob AUTHORIZATION regress_aw_bob;
SET ROLE regress_aw_bob;
CREATE FUNCTION aw_bob.peek() RETURNS TABLE (worker_id text, queues text[]) LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT worker_id, queues FROM jobq.app_workers $$;
GRANT USAGE ON SCHEMA aw_bob TO regress_aw_alice;
SET ROLE regress_aw_alice;
SELECT * FROM aw_bob.peek() ORDER BY worker_id;
RESET ROLE;
DROP SCHEMA aw_bob CASCADE;
SET ROLE regress_aw_alice;
SELECT jobq.unregister_worker('both');
RESET ROLE;

-- jobs in hand: the running jobs of the worker's id in the queues it named,
-- all of them, and none of another queue
SELECT count(*) FROM generate_series(1, 3) q, jobq.enqueue('k', '{}', queue => 'aw_m' || q);
SELECT jobq.register_worker('multi', ARRAY['aw_m1', 'aw_m2']);
SELECT count(*) AS claimed FROM generate_series(1, 3) q, jobq.claim('aw_m' || q, 'multi');
SELECT worker_id, jobs_in_hand FROM jobq.app_workers WHERE worker_id = 'multi';
SELECT jobq.unregister_worker('multi');

-- a dropped role's capabilities and workers go at the next prune: a role
-- made later with its oid (the counter wraps), or a restore elsewhere (a
-- dump names a dropped role by its number), must not inherit them
-- (and its handlers: the function here is not the role's, so dropping the
-- role leaves it)
CREATE ROLE regress_aw_gone;
SELECT jobq.grant('aw_a', 'regress_aw_gone', 'work');
SELECT jobq.grant('aw_h', 'regress_aw_gone', 'administer');
CREATE FUNCTION public.aw_gone_handler(payload jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT payload $$;
SET ROLE regress_aw_gone;
SELECT jobq.register_worker('gone-1', ARRAY['aw_a']);
SELECT jobq.register_handler('aw.gone', 'public.aw_gone_handler(jsonb)', 'aw_h');
RESET ROLE;
SELECT 'regress_aw_gone'::regrole::oid AS gone_oid \gset
DROP OWNED BY regress_aw_gone;
DROP ROLE regress_aw_gone;
SELECT jobq.prune() >= 0 AS pruned;
SELECT count(*) AS grants_left FROM jobq.permission WHERE role::oid = :gone_oid;
SELECT count(*) AS workers_left FROM jobq.app_worker WHERE registered_by::oid = :gone_oid;
SELECT count(*) AS handlers_left FROM jobq.handler WHERE run_as::oid = :gone_oid;
SELECT count(*) > 0 AS others_kept FROM jobq.permission;
DROP FUNCTION public.aw_gone_handler(jsonb);

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

-- a registration run by a cursor keeps the role's registration lock to its
-- transaction's end, even when a later fetch fails in a savepoint (the lock
-- went with the cursor's portal, and that rollback released it: other
-- sessions' registrations could then pass the role's cap)
BEGIN;
DECLARE reg CURSOR FOR
  SELECT jobq.register_worker('cursor-' || i, ARRAY['aw_a']) FROM generate_series(1, 3) i WHERE 1 / (3 - i) >= 0;
FETCH 1 FROM reg;
SAVEPOINT s;
FETCH 5 FROM reg;
ROLLBACK TO s;
SELECT count(*) AS registration_lock_held FROM pg_locks
 WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND objsubid = 27249 AND granted;
COMMIT;
SELECT jobq.unregister_worker('cursor-1');

DROP EXTENSION jobq CASCADE;
DROP OWNED BY regress_aw_alice, regress_aw_bob;
DROP ROLE regress_aw_alice;
DROP ROLE regress_aw_bob;
