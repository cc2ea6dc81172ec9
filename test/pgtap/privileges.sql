--
-- privileges.sql: who may call what on which queue (src/acl.c)
--
-- Run by pg_prove as a superuser in a database where pgtap and jobq are
-- installed.  Everything happens in one transaction that is rolled back at
-- the end, roles included.
--
-- Roles (created here):
--   priv_producer   enqueue on q1
--   priv_worker     work on q1
--   priv_admin      administer on q1
--   priv_nobody     nothing at all
--   priv_star       work on '*'
--   priv_staradmin  administer on '*'
--   priv_target, priv_target2   what the admins grant and revoke
--   priv_many       work on 100 of 300 queues
-- Queues q1 and q2; none of the three q1 roles has any right on q2.
--
-- The matrix below calls every function of the API as each of the three
-- roles on q1 and on q2: an allowed call must work (its result is checked),
-- any other call must fail with SQLSTATE 42501 (insufficient_privilege).
-- It runs twice: first with exactly what jobq.grant gave the roles, then
-- after EXECUTE on every jobq function was granted to them by hand, so the
-- second pass proves the capability checks inside the functions alone
-- (the error must then be jobq's "permission denied to ... queue").
--
-- The holes this suite once found (views without security_barrier, health
-- of every queue for any administrator, schedule takeover across queues, a
-- stale permission cache) are fixed; their tests are ordinary ones now.
--
BEGIN;
SELECT plan(489);

SET LOCAL client_min_messages = warning;

CREATE ROLE priv_producer;
CREATE ROLE priv_worker;
CREATE ROLE priv_admin;
CREATE ROLE priv_nobody;
CREATE ROLE priv_star;
CREATE ROLE priv_staradmin;
CREATE ROLE priv_target;
CREATE ROLE priv_target2;

SELECT jobq.configure('q1');
SELECT jobq.configure('q2');
SELECT jobq.grant('q1', 'priv_producer', 'enqueue');
SELECT jobq.grant('q1', 'priv_worker', 'work');
SELECT jobq.grant('q1', 'priv_admin', 'administer');
SELECT jobq.grant('*', 'priv_star', 'work');
SELECT jobq.grant('*', 'priv_staradmin', 'administer');

-- a handler function any role may execute (functions are EXECUTE to PUBLIC)
CREATE FUNCTION public.priv_handler(payload jsonb) RETURNS jsonb
LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;

-- jobs and their lease tokens, made as the superuser, readable by the roles
CREATE TEMP TABLE tok (label text PRIMARY KEY, job_id bigint, lease_token bigint);
GRANT SELECT ON tok TO PUBLIC;

-- a running job of kind label in queue q, its token in tok
CREATE FUNCTION pg_temp.running(q text, label text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM jobq.enqueue(label, '{}', q);
    INSERT INTO tok
    SELECT label, c.job_id, c.lease_token
      FROM jobq.claim(q, kinds => ARRAY[label], lease => '1 hour') c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'could not claim the job of kind %', label;
    END IF;
END $$;

-- a job of kind label in queue q that ended in status st
CREATE FUNCTION pg_temp.finished(q text, label text, st text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_temp.running(q, label);
    IF st = 'failed' THEN
        PERFORM jobq.fail(job_id, lease_token, 'no', retryable => false) FROM tok WHERE tok.label = finished.label;
    ELSE
        PERFORM jobq.complete(job_id, lease_token) FROM tok WHERE tok.label = finished.label;
    END IF;
END $$;

-- what every matrix cell needs, for one pass, queue and role: labels pass.queue.role.what
CREATE FUNCTION pg_temp.resources(pass int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    q text;
    r text;
    p text;
    w text;
BEGIN
    FOREACH q IN ARRAY ARRAY['q1', 'q2'] LOOP
        -- what the admins revoke
        PERFORM jobq.grant(q, 'priv_target2', 'work');
        FOREACH r IN ARRAY ARRAY['producer', 'worker', 'admin'] LOOP
            p := format('%s.%s.%s', pass, q, r);
            FOREACH w IN ARRAY ARRAY['complete', 'complete_many', 'fail', 'fail_details', 'extend', 'checkpoint', 'snooze'] LOOP
                PERFORM pg_temp.running(q, p || '.' || w);
            END LOOP;
            PERFORM jobq.enqueue(p || '.claim', '{}', q);
            PERFORM pg_temp.finished(q, p || '.retry', 'failed');
            PERFORM pg_temp.finished(q, p || '.retry_failed', 'failed');
            PERFORM pg_temp.finished(q, p || '.discard', 'failed');
            INSERT INTO tok SELECT p || '.cancel', e.job_id, NULL FROM jobq.enqueue(p || '.cancel', '{}', q) e;
            PERFORM jobq.schedule(p || '.unschedule', '0 0 * * *', 'tick', queue => q);
            PERFORM jobq.schedule(p || '.pause_schedule', '0 0 * * *', 'tick', queue => q);
            PERFORM jobq.schedule(p || '.resume_schedule', '0 0 * * *', 'tick', queue => q);
            PERFORM jobq.pause_schedule(p || '.resume_schedule');
        END LOOP;
    END LOOP;
END $$;

/*
 * The matrix: one row per call.  sql is a query giving one boolean that is
 * true when the call did its job; %1$s is the resource prefix
 * (pass.queue.role), %2$s the queue.  producer, worker, admin: may that
 * role make the call on q1?  Nobody may make any of them on q2.
 */
CREATE TEMP TABLE matrix (n serial, fn text, sql text, producer boolean, worker boolean, admin boolean);
INSERT INTO matrix (fn, sql, producer, worker, admin) VALUES
('enqueue',          $$SELECT created FROM jobq.enqueue('%1$s.new', '{"a": 1}', '%2$s')$$,                         true,  false, true),
('enqueue_many',     $$SELECT bool_and(created) AND count(*) = 2 FROM jobq.enqueue_many('%1$s.many', ARRAY['{}', '{}']::jsonb[], '%2$s')$$,
                                                                                                                     true,  false, true),
('claim',            $$SELECT count(*) = 1 FROM jobq.claim('%2$s', kinds => ARRAY['%1$s.claim'])$$,                  false, true,  true),
('complete',         $$SELECT jobq.complete(job_id, lease_token, '{"ok": true}') FROM tok WHERE label = '%1$s.complete'$$,
                                                                                                                     false, true,  true),
('complete_many',    $$SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) = 1 FROM tok WHERE label = '%1$s.complete_many'$$,
                                                                                                                     false, true,  true),
('fail',             $$SELECT jobq.fail(job_id, lease_token, 'boom') = 'pending' FROM tok WHERE label = '%1$s.fail'$$,
                                                                                                                     false, true,  true),
('fail_details',     $$SELECT jobq.fail(job_id, lease_token, 'boom', details => 'trace') = 'pending' FROM tok WHERE label = '%1$s.fail_details'$$,
                                                                                                                     false, true,  true),
('register_worker',  $$SELECT true FROM jobq.register_worker('%1$s.w', ARRAY['%2$s'], '{"pid": 1}')$$,               false, true,  true),
('extend',           $$SELECT jobq.extend(job_id, lease_token, '2 hours') IS NOT NULL FROM tok WHERE label = '%1$s.extend'$$,
                                                                                                                     false, true,  true),
('checkpoint',       $$SELECT jobq.checkpoint(job_id, lease_token, '{"step": 1}') FROM tok WHERE label = '%1$s.checkpoint'$$,
                                                                                                                     false, true,  true),
('snooze',           $$SELECT jobq.snooze(job_id, lease_token, '1 minute') IS NOT NULL FROM tok WHERE label = '%1$s.snooze'$$,
                                                                                                                     false, true,  true),
('configure',        $$SELECT true FROM jobq.configure('%2$s', max_retries => 5)$$,                                  false, false, true),
('pause',            $$SELECT true FROM jobq.pause('%2$s')$$,                                                        false, false, true),
('resume',           $$SELECT true FROM jobq.resume('%2$s')$$,                                                       false, false, true),
('retry',            $$SELECT jobq.retry(job_id) FROM tok WHERE label = '%1$s.retry'$$,                              false, false, true),
('retry_failed',     $$SELECT jobq.retry_failed('%1$s.retry_failed', '%2$s') = 1$$,                                  false, false, true),
('cancel',           $$SELECT jobq.cancel(job_id) FROM tok WHERE label = '%1$s.cancel'$$,                            false, false, true),
('discard',          $$SELECT jobq.discard(job_id) FROM tok WHERE label = '%1$s.discard'$$,                          false, false, true),
('purge',            $$SELECT p = n AND n > 0 FROM (SELECT count(*) AS n FROM jobq.jobs WHERE queue = '%2$s' AND status = 'completed') c, LATERAL (SELECT jobq.purge('%2$s', 'completed') AS p) x$$,
                                                                                                                     false, false, true),
('schedule',         $$SELECT jobq.schedule('%1$s.schedule', '*/5 * * * *', 'tick', queue => '%2$s') > 0$$,          false, false, true),
('unschedule',       $$SELECT jobq.unschedule('%1$s.unschedule')$$,                                                  false, false, true),
('pause_schedule',   $$SELECT jobq.pause_schedule('%1$s.pause_schedule')$$,                                          false, false, true),
('resume_schedule',  $$SELECT jobq.resume_schedule('%1$s.resume_schedule')$$,                                        false, false, true),
('register_handler', $$SELECT true FROM jobq.register_handler('%1$s.handled', 'public.priv_handler(jsonb)', '%2$s')$$,
                                                                                                                     false, false, true),
('grant',            $$SELECT true FROM jobq.grant('%2$s', 'priv_target', 'enqueue')$$,                              false, false, true),
('revoke',           $$SELECT jobq.revoke('%2$s', 'priv_target2', 'work')$$,                                         false, false, true);

/*
 * Run sql as role: when allowed, it must give true; else it must fail
 * with 42501, and when jobq_check, with jobq's own message (not merely a
 * missing EXECUTE privilege).
 */
CREATE FUNCTION pg_temp.try(role text, sql text, allowed boolean, jobq_check boolean, descr text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    res boolean;
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', role);
        EXECUTE sql INTO res;
        RESET ROLE;
    EXCEPTION WHEN OTHERS THEN
        RESET ROLE;
        IF allowed THEN
            RETURN ok(false, descr) || E'\n' || diag(format('    %s: %s%s    sql: %s', SQLSTATE, SQLERRM, E'\n', sql));
        ELSIF SQLSTATE <> '42501' THEN
            RETURN ok(false, descr) || E'\n' || diag(format('    wanted 42501, got %s: %s', SQLSTATE, SQLERRM));
        ELSIF jobq_check AND SQLERRM NOT LIKE 'permission denied to % queue %' THEN
            RETURN ok(false, descr) || E'\n' || diag(format('    wanted jobq''s capability check, got: %s', SQLERRM));
        END IF;
        RETURN ok(true, descr);
    END;
    IF allowed THEN
        RETURN ok(COALESCE(res, false), descr) ||
               CASE WHEN COALESCE(res, false) THEN '' ELSE E'\n' || diag(format('    gave %s: %s', res, sql)) END;
    END IF;
    RETURN ok(false, descr) || E'\n' || diag(format('    no error (gave %s): %s', res, sql));
END $$;

-- every matrix cell of one pass
CREATE FUNCTION pg_temp.run_matrix(pass int) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    m record;
    q text;
    r text;
    may boolean;
BEGIN
    PERFORM pg_temp.resources(pass);
    FOR m IN SELECT * FROM matrix ORDER BY n LOOP
        FOREACH q IN ARRAY ARRAY['q1', 'q2'] LOOP
            FOREACH r IN ARRAY ARRAY['producer', 'worker', 'admin'] LOOP
                may := q = 'q1' AND CASE r WHEN 'producer' THEN m.producer
                                           WHEN 'worker' THEN m.worker
                                           ELSE m.admin END;
                RETURN NEXT pg_temp.try('priv_' || r,
                                        format(m.sql, format('%s.%s.%s', pass, q, r), q),
                                        may, pass = 2,
                                        format('pass %s: %s on %s: jobq.%s %s', pass, r, q, m.fn,
                                               CASE WHEN may THEN 'works' ELSE 'is denied (42501)' END));
            END LOOP;
        END LOOP;
    END LOOP;
END $$;

-- the views show a role the rows of its queues only
CREATE FUNCTION pg_temp.views_show(role text, queues text[]) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
    seen text[];
BEGIN
    FOREACH v IN ARRAY ARRAY['jobs', 'dead_letter', 'queue_stats', 'queues', 'schedules', 'handlers'] LOOP
        EXECUTE format('SET LOCAL ROLE %I', role);
        EXECUTE format('SELECT array_agg(DISTINCT queue ORDER BY queue) FROM jobq.%I WHERE queue IN (''q1'', ''q2'')', v)
           INTO seen;
        RESET ROLE;
        RETURN NEXT is(seen, queues, format('%s sees the rows of %s only in jobq.%s', role, queues, v));
    END LOOP;
    -- kind_stats has no queue column: the kinds finished in each queue tell
    EXECUTE format('SET LOCAL ROLE %I', role);
    SELECT array_agg(substr(kind, 6, 2) ORDER BY kind) INTO seen
      FROM jobq.kind_stats WHERE kind LIKE 'view.q_.done';
    RESET ROLE;
    RETURN NEXT is(seen, queues, format('%s sees the kinds of %s only in jobq.kind_stats', role, queues));
END $$;

--
-- the views
--
SELECT pg_temp.finished('q1', 'view.q1.done', 'completed');
SELECT pg_temp.finished('q2', 'view.q2.done', 'completed');
SELECT pg_temp.finished('q1', 'view.q1.dead', 'failed');
SELECT pg_temp.finished('q2', 'view.q2.dead', 'failed');
SELECT NULL FROM jobq.schedule('view.q1', '0 0 * * *', 'tick', queue => 'q1');
SELECT NULL FROM jobq.schedule('view.q2', '0 0 * * *', 'tick', queue => 'q2');
SELECT jobq.register_handler('view.q1.handled', 'public.priv_handler(jsonb)', 'q1', allow_superuser => true);
SELECT jobq.register_handler('view.q2.handled', 'public.priv_handler(jsonb)', 'q2', allow_superuser => true);

SELECT pg_temp.views_show('priv_producer', ARRAY['q1']);
SELECT pg_temp.views_show('priv_worker', ARRAY['q1']);
SELECT pg_temp.views_show('priv_admin', ARRAY['q1']);
SELECT pg_temp.views_show('priv_star', ARRAY['q1', 'q2']);
SELECT pg_temp.views_show(current_user, ARRAY['q1', 'q2']);

-- a view's filter must run before the caller's own conditions: a leaky
-- function in WHERE must not see another queue's rows (security_barrier)
CREATE TEMP TABLE leaked (queue text);
GRANT INSERT ON leaked TO PUBLIC;
CREATE FUNCTION pg_temp.leak(q text) RETURNS boolean
LANGUAGE plpgsql COST 0.0000001 AS $$ BEGIN INSERT INTO leaked VALUES (q); RETURN true; END $$;
SET LOCAL ROLE priv_worker;
DO $$
BEGIN
    PERFORM count(*) FROM jobq.jobs WHERE pg_temp.leak(queue);
    PERFORM count(*) FROM jobq.dead_letter WHERE pg_temp.leak(queue);
    PERFORM count(*) FROM jobq.queues WHERE pg_temp.leak(queue);
    PERFORM count(*) FROM jobq.queue_stats WHERE pg_temp.leak(queue);
    PERFORM count(*) FROM jobq.schedules WHERE pg_temp.leak(queue);
    PERFORM count(*) FROM jobq.handlers WHERE pg_temp.leak(queue);
END $$;
RESET ROLE;
SELECT is((SELECT count(*) FROM leaked WHERE queue = 'q2'), 0::bigint,
          'a leaky function in a worker''s WHERE clause never sees q2''s rows through the views');
-- (and the leaky function did run, on the rows the worker may see)
SELECT ok((SELECT count(*) FROM leaked WHERE queue = 'q1') > 0,
          'the leaky function saw q1''s rows, so the check above looked at something');

-- jobq.job and jobq.job_by_key: the story of a job of one's queues only
SELECT NULL FROM unnest(ARRAY['q1', 'q2']) q, jobq.enqueue('view.keyed', '{}', q, idempotency_key => 'key-' || q);
SET LOCAL ROLE priv_producer;
SELECT ok((SELECT count(*) FROM jobq.job((SELECT job_id FROM tok WHERE label = 'view.q1.done'))) = 1,
          'producer: jobq.job shows a q1 job''s attempts');
SELECT ok((SELECT count(*) FROM jobq.job((SELECT job_id FROM tok WHERE label = 'view.q2.done'))) = 0,
          'producer: jobq.job shows nothing of a q2 job');
SELECT ok((SELECT count(*) FROM jobq.job_by_key('view.keyed', 'key-q1')) = 1,
          'producer: jobq.job_by_key finds a q1 job');
SELECT ok((SELECT count(*) FROM jobq.job_by_key('view.keyed', 'key-q2')) = 0,
          'producer: jobq.job_by_key finds nothing of a q2 job');
SET LOCAL ROLE priv_worker;
SELECT ok((SELECT count(*) FROM jobq.job((SELECT job_id FROM tok WHERE label = 'view.q1.done'))) = 1,
          'worker: jobq.job shows a q1 job''s attempts');
SELECT ok((SELECT count(*) FROM jobq.job((SELECT job_id FROM tok WHERE label = 'view.q2.done'))) = 0,
          'worker: jobq.job shows nothing of a q2 job');
SELECT ok((SELECT count(*) FROM jobq.job_by_key('view.keyed', 'key-q2')) = 0,
          'worker: jobq.job_by_key finds nothing of a q2 job');
SELECT ok((SELECT count(*) FROM jobq.kind_stats('1 hour', 'q2')) = 0,
          'worker: jobq.kind_stats(queue => q2) is empty');
SET LOCAL ROLE priv_admin;
SELECT ok((SELECT count(*) FROM jobq.job((SELECT job_id FROM tok WHERE label = 'view.q2.dead'))) = 0,
          'admin: jobq.job shows nothing of a q2 job');
SELECT ok((SELECT count(*) FROM jobq.job_by_key('view.keyed', 'key-q1')) = 1,
          'admin: jobq.job_by_key finds a q1 job');
RESET ROLE;

-- jobq.health reports on every queue: an administrator of q1 alone is refused
SELECT NULL FROM jobq.enqueue('view.waiting', '{}', 'q2');
SET LOCAL ROLE priv_admin;
SELECT throws_ok($$SELECT * FROM jobq.health(oldest_pending_threshold => '0')$$, '42501', NULL,
                 'admin of q1 only: jobq.health (which reports every queue) is refused');
RESET ROLE;

--
-- the matrix, pass 1: what jobq.grant gave
--
SELECT pg_temp.run_matrix(1);

-- functions without a queue: only an administrator of '*' may call them
SET LOCAL ROLE priv_producer;
SELECT throws_ok('SELECT jobq.reap()', '42501', NULL, 'producer: jobq.reap is denied (42501)');
SELECT throws_ok('SELECT jobq.prune()', '42501', NULL, 'producer: jobq.prune is denied (42501)');
SELECT throws_ok('SELECT jobq.run_schedules()', '42501', NULL, 'producer: jobq.run_schedules is denied (42501)');
SELECT throws_ok('SELECT jobq.retry_failed()', '42501', NULL, 'producer: jobq.retry_failed() over every queue is denied (42501)');
SET LOCAL ROLE priv_worker;
SELECT throws_ok('SELECT jobq.reap()', '42501', NULL, 'worker: jobq.reap is denied (42501)');
SELECT throws_ok('SELECT jobq.prune()', '42501', NULL, 'worker: jobq.prune is denied (42501)');
SELECT throws_ok('SELECT jobq.run_schedules()', '42501', NULL, 'worker: jobq.run_schedules is denied (42501)');
SELECT throws_ok('SELECT jobq.retry_failed()', '42501', NULL, 'worker: jobq.retry_failed() over every queue is denied (42501)');
SET LOCAL ROLE priv_admin;
SELECT throws_like('SELECT jobq.reap()', 'permission denied to administer queue "*"', 'admin of q1: jobq.reap is denied');
SELECT throws_like('SELECT jobq.prune()', 'permission denied to administer queue "*"', 'admin of q1: jobq.prune is denied');
SELECT throws_like('SELECT jobq.run_schedules()', 'permission denied to administer queue "*"', 'admin of q1: jobq.run_schedules is denied');
SELECT throws_like('SELECT jobq.retry_failed()', 'permission denied to administer queue "*"', 'admin of q1: jobq.retry_failed() over every queue is denied');
SELECT throws_ok($$SELECT jobq.grant('*', 'priv_admin', 'administer')$$, '42501', NULL,
                 'admin of q1: granting itself every queue is denied (42501)');
SELECT throws_ok($$SELECT jobq.revoke('*', 'priv_staradmin', 'administer')$$, '42501', NULL,
                 'admin of q1: revoking an administrator of every queue is denied (42501)');
SELECT is(jobq.unschedule('no such schedule'), false,
          'admin of q1: unscheduling a schedule that does not exist answers false');
SELECT is(jobq.pause_schedule('no such schedule'), false,
          'admin of q1: pausing a schedule that does not exist answers false');
SELECT throws_ok($$SELECT jobq.run_schedule('no such schedule')$$, '42704', NULL,
                 'admin of q1: running a schedule that does not exist: 42704');
SELECT throws_ok($$SELECT jobq.register_handler('view.q1.handled', 'public.priv_handler(jsonb)', 'q1')$$, '42501', NULL,
                 'admin of q1: taking over another role''s handler is denied (42501)');
-- re-scheduling a name of q2's schedule into q1 would take q2's schedule over
SELECT throws_ok($$SELECT jobq.schedule('view.q2', '* * * * *', 'evil', queue => 'q1')$$, '42501', NULL,
                 'admin of q1: re-scheduling q2''s schedule into q1 is denied (42501)');
RESET ROLE;
SELECT is((SELECT queue || ' ' || kind FROM jobq.schedule WHERE name = 'view.q2'), 'q2 tick',
          'q2''s schedule is unchanged');

--
-- the matrix, pass 2: with EXECUTE on every function granted by hand, the
-- capability checks inside the functions alone still deny
--
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA jobq TO priv_producer, priv_worker, priv_admin;
SELECT pg_temp.run_matrix(2);
SELECT pg_temp.try('priv_producer', 'SELECT jobq.reap() >= 0', false, true, 'pass 2: producer: jobq.reap is denied by jobq');
SELECT pg_temp.try('priv_worker', 'SELECT jobq.prune() >= 0', false, true, 'pass 2: worker: jobq.prune is denied by jobq');
SELECT pg_temp.try('priv_worker', 'SELECT jobq.run_schedules() >= 0', false, true, 'pass 2: worker: jobq.run_schedules is denied by jobq');

--
-- '*': every queue
--
SELECT pg_temp.running('q2', 'star.q2.complete');
SELECT NULL FROM jobq.enqueue('star.q2.claim', '{}', 'q2');
SELECT pg_temp.finished('q2', 'star.q2.failed', 'failed');
SELECT pg_temp.try('priv_star', $$SELECT count(*) = 1 FROM jobq.claim('q2', kinds => ARRAY['star.q2.claim'])$$,
                   true, false, 'work on *: jobq.claim on q2 works');
SELECT pg_temp.try('priv_star', $$SELECT jobq.complete(job_id, lease_token) FROM tok WHERE label = 'star.q2.complete'$$,
                   true, false, 'work on *: jobq.complete on q2 works');
SELECT pg_temp.try('priv_star', $$SELECT true FROM jobq.pause('q2')$$,
                   false, false, 'work on *: jobq.pause on q2 is denied (42501)');
SELECT pg_temp.try('priv_star', $$SELECT created FROM jobq.enqueue('star', '{}', 'q2')$$,
                   false, false, 'work on *: jobq.enqueue on q2 is denied (42501)');
SELECT pg_temp.try('priv_staradmin', $$SELECT jobq.retry(job_id) FROM tok WHERE label = 'star.q2.failed'$$,
                   true, false, 'administer on *: jobq.retry on q2 works');
SELECT pg_temp.try('priv_staradmin', 'SELECT jobq.reap() >= 0', true, false, 'administer on *: jobq.reap works');
SELECT pg_temp.try('priv_staradmin', 'SELECT jobq.prune() >= 0', true, false, 'administer on *: jobq.prune works');
SELECT pg_temp.try('priv_staradmin', 'SELECT jobq.run_schedules() >= 0', true, false, 'administer on *: jobq.run_schedules works');
-- (reap, prune and run_schedules may find nothing to do: these three
-- check that the call is allowed; retry_failed has q2's failed jobs to retry)
SELECT pg_temp.try('priv_staradmin', 'SELECT jobq.retry_failed() > 0', true, false, 'administer on *: jobq.retry_failed() works');
SELECT pg_temp.try('priv_staradmin', $$SELECT created FROM jobq.enqueue('star', '{}', 'a brand new queue')$$,
                   true, false, 'administer on *: jobq.enqueue into a queue that does not exist yet works');
SELECT pg_temp.try('priv_staradmin', $$SELECT true FROM jobq.grant('q2', 'priv_target', 'work')$$,
                   true, false, 'administer on *: jobq.grant on q2 works');

--
-- revoke takes it back
--
SELECT pg_temp.running('q1', 'revoke.q1.complete');
SELECT NULL FROM jobq.enqueue('revoke.q1.claim', '{}', 'q1');
SET LOCAL ROLE priv_worker;
SELECT ok((SELECT count(*) FROM jobq.jobs WHERE queue = 'q1') > 0, 'worker sees q1''s jobs before the revoke');
SELECT is(jobq.may_use_queue('q1'), true, 'jobq.may_use_queue(q1) is true for worker before the revoke');
SELECT is((SELECT count(*) FROM jobq.jobs WHERE queue <> 'q1'), 0::bigint,
          'worker sees no job of another queue (answers for q1 and q2 now cached)');
RESET ROLE;
SELECT is(jobq.revoke('q1', 'priv_worker', 'work'), true, 'jobq.revoke of a held capability returns true');
SELECT is(jobq.revoke('q1', 'priv_worker', 'work'), false, 'jobq.revoke of a capability not held returns false');
SELECT pg_temp.try('priv_worker', $$SELECT count(*) = 1 FROM jobq.claim('q1', kinds => ARRAY['revoke.q1.claim'])$$,
                   false, true, 'after the revoke: worker''s jobq.claim on q1 is denied (42501)');
SELECT pg_temp.try('priv_worker', $$SELECT jobq.complete(job_id, lease_token) FROM tok WHERE label = 'revoke.q1.complete'$$,
                   false, true, 'after the revoke: worker''s jobq.complete of a q1 job it holds a token of is denied (42501)');
SELECT is((SELECT status FROM jobq.job WHERE job_id = (SELECT job_id FROM tok WHERE label = 'revoke.q1.complete')),
          'running', 'the denied complete left the job running');
SET LOCAL ROLE priv_worker;
-- (the views call jobq.may_use_queue, which caches an answer per queue
-- for the transaction: the revoke must empty that cache)
SELECT is(jobq.may_use_queue('q1'), false, 'after the revoke: jobq.may_use_queue(q1) is false for worker (same transaction)');
SELECT is((SELECT count(*) FROM jobq.jobs), 0::bigint,
          'after the revoke: worker sees no job of any queue in jobq.jobs (same transaction)');
SELECT is((SELECT count(*) FROM jobq.jobs WHERE queue = 'q1'), 0::bigint,
          'after the revoke: worker sees no q1 jobs in jobq.jobs (same transaction)');
SELECT is((SELECT count(*) FROM jobq.queues WHERE queue = 'q1'), 0::bigint,
          'after the revoke: worker sees no q1 row in jobq.queues');
RESET ROLE;
SELECT is(jobq.revoke('*', 'priv_star', 'work'), true, 'jobq.revoke on * returns true');
SELECT pg_temp.try('priv_star', $$SELECT count(*) >= 0 FROM jobq.claim('q2')$$,
                   false, true, 'after the revoke on *: jobq.claim on q2 is denied (42501)');

--
-- more queues than jobq.may_use_queue remembers (256): one job in each of
-- 300 queues, work on every third; a view reading them all, twice in one
-- transaction, sees exactly those
--
CREATE ROLE priv_many;
SELECT count(*) FROM generate_series(1, 300) i, LATERAL jobq.enqueue('many', '{}', 'many.' || i) \gset
SELECT count(*) FROM generate_series(3, 300, 3) i, LATERAL jobq.grant('many.' || i, 'priv_many', 'work') \gset
SET LOCAL ROLE priv_many;
SELECT is((SELECT count(*) FROM jobq.jobs WHERE queue LIKE 'many.%'), 100::bigint,
          'a role with work on 100 of 300 queues sees their 100 jobs');
SELECT is((SELECT pg_catalog.array_agg(DISTINCT pg_catalog.substr(queue, 6)::int) FROM jobq.jobs WHERE queue LIKE 'many.%'),
          (SELECT pg_catalog.array_agg(i ORDER BY i) FROM generate_series(3, 300, 3) i),
          'and exactly those queues, asked again in the same transaction');
RESET ROLE;

--
-- capabilities held through role membership (0.3.6 reads a role's queues
-- by the roles whose privileges it has): a member sees its group's queues
-- in every view, a NOINHERIT member only its own until it SETs ROLE to the
-- group; a member of a holder of '*' sees every queue; jobq.usable_queue
-- is granted to no one
--
CREATE ROLE priv_grp;
CREATE ROLE priv_mem IN ROLE priv_grp;
CREATE ROLE priv_noinh NOINHERIT IN ROLE priv_grp;
CREATE ROLE priv_stargrp;
CREATE ROLE priv_starmem IN ROLE priv_stargrp;
SELECT count(*) FROM jobq.grant('many.1', 'priv_grp', 'work') \gset
SELECT count(*) FROM jobq.grant('many.2', 'priv_noinh', 'enqueue') \gset
SELECT count(*) FROM jobq.grant('*', 'priv_stargrp', 'enqueue') \gset
SET LOCAL ROLE priv_mem;
SELECT is((SELECT pg_catalog.string_agg(queue, ',' ORDER BY queue) FROM jobq.queues),
          'many.1', 'a member sees its group''s queue in jobq.queues');
SELECT is((SELECT pg_catalog.string_agg(queue, ',' ORDER BY queue) FROM jobq.queue_stats),
          'many.1', 'and in jobq.queue_stats');
SELECT is((SELECT pg_catalog.string_agg(DISTINCT queue, ',') FROM jobq.jobs), 'many.1', 'and its jobs in jobq.jobs');
RESET ROLE;
SET LOCAL ROLE priv_noinh;
SELECT is((SELECT pg_catalog.string_agg(queue, ',' ORDER BY queue) FROM jobq.queues),
          'many.2', 'a NOINHERIT member sees its own queue, not its group''s');
SELECT is((SELECT pg_catalog.string_agg(DISTINCT queue, ',') FROM jobq.jobs), 'many.2', 'and its own jobs only');
SET LOCAL ROLE priv_grp;
SELECT is((SELECT pg_catalog.string_agg(queue, ',' ORDER BY queue) FROM jobq.queues),
          'many.1', 'as the group, the group''s queue');
RESET ROLE;
SELECT count(*) AS nqueues FROM jobq.queue \gset
SET LOCAL ROLE priv_starmem;
SELECT is((SELECT count(*) FROM jobq.queues), :nqueues::bigint,
          'a member of a holder of * sees every queue');
RESET ROLE;
-- the database's owner has the capabilities of pg_database_owner, which no
-- row of pg_auth_members says: they count past the first 8 queues asked
-- about one by one too (a review's find in 0.3.6's second version)
CREATE ROLE priv_dbowner;
SELECT count(*) FROM generate_series(101, 112) i, LATERAL jobq.grant('many.' || i, 'priv_dbowner', 'work') \gset
SELECT count(*) FROM generate_series(201, 205) i, LATERAL jobq.grant('many.' || i, 'pg_database_owner', 'work') \gset
SELECT current_database() AS db \gset
ALTER DATABASE :"db" OWNER TO priv_dbowner;
SET LOCAL ROLE priv_dbowner;
SELECT is((SELECT count(*) FROM jobq.queues WHERE queue LIKE 'many.20_'), 5::bigint,
          'the database''s owner sees the queues granted to pg_database_owner in jobq.queues');
SELECT is((SELECT count(*) FROM jobq.jobs WHERE queue LIKE 'many.1__' OR queue LIKE 'many.20_'), 17::bigint,
          'and their jobs beside its own in jobq.jobs');
RESET ROLE;
ALTER DATABASE :"db" OWNER TO CURRENT_USER;
SELECT pg_temp.try('priv_mem', 'SELECT count(*) >= 0 FROM jobq.usable_queue', false, false,
                   'jobq.usable_queue is granted to no one (42501)');
SELECT pg_temp.try('priv_mem', 'SELECT count(*) >= 0 FROM jobq.granted_queue', false, false,
                   'jobq.granted_queue is granted to no one (42501)');

--
-- a role with no grant: 42501 on everything, views included
--
CREATE FUNCTION pg_temp.nobody() RETURNS SETOF text
LANGUAGE plpgsql AS $body$
DECLARE
    m record;
    v text;
BEGIN
    PERFORM pg_temp.resources(3);
    FOR m IN SELECT * FROM matrix ORDER BY n LOOP
        RETURN NEXT pg_temp.try('priv_nobody', format(m.sql, '3.q1.admin', 'q1'), false, false,
                                format('nobody: jobq.%s on q1 is denied (42501)', m.fn));
    END LOOP;
    FOREACH v IN ARRAY ARRAY['jobq.reap()', 'jobq.prune()', 'jobq.run_schedules()', 'jobq.retry_failed()',
                             'jobq.job(1)', $$jobq.job_by_key('view.keyed', 'key-q1')$$, 'jobq.health()',
                             'jobq.kind_stats()', $$jobq.priority('high')$$, $$jobq.may_use_queue('q1')$$] LOOP
        RETURN NEXT pg_temp.try('priv_nobody', format('SELECT count(*) >= 0 FROM %s', v), false, false,
                                format('nobody: %s is denied (42501)', v));
    END LOOP;
    FOREACH v IN ARRAY ARRAY['jobs', 'dead_letter', 'queue_stats', 'queues', 'schedules', 'kind_stats',
                             'handlers', 'workers', 'job', 'queue', 'permission', 'schedule', 'idempotency_key',
                             'app_workers', 'app_worker'] LOOP
        RETURN NEXT pg_temp.try('priv_nobody', format('SELECT count(*) >= 0 FROM jobq.%I', v), false, false,
                                format('nobody: SELECT from jobq.%s is denied (42501)', v));
    END LOOP;
END $body$;
SELECT pg_temp.nobody();

-- and nothing of jobq is granted to PUBLIC
SELECT is((SELECT count(*) FROM pg_proc p
            WHERE p.pronamespace = 'jobq'::regnamespace
              AND has_function_privilege('priv_nobody', p.oid, 'EXECUTE')), 0::bigint,
          'no jobq function is executable by a role without a grant');
SELECT is((SELECT count(*) FROM pg_class c
            WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind IN ('r', 'v', 'S')
              AND has_table_privilege('priv_nobody', c.oid, 'SELECT')), 0::bigint,
          'no jobq table or view is readable by a role without a grant');
SELECT is((SELECT count(*) FROM pg_class c
            WHERE c.relnamespace = 'jobq'::regnamespace AND c.relkind = 'r'
              AND (has_table_privilege('priv_admin', c.oid, 'INSERT')
                   OR has_table_privilege('priv_admin', c.oid, 'UPDATE')
                   OR has_table_privilege('priv_admin', c.oid, 'DELETE'))), 0::bigint,
          'even an administrator cannot write jobq''s tables directly');
SELECT is(has_schema_privilege('priv_nobody', 'jobq', 'USAGE'), false,
          'a role without a grant has no USAGE on schema jobq');

-- nor lock, cluster or reindex them (PostgreSQL 17's MAINTAIN privilege,
-- and its role pg_maintain, allow that: jobq grants MAINTAIN to nobody)
SET ROLE priv_admin;
SELECT throws_ok('LOCK TABLE jobq.job IN ACCESS EXCLUSIVE MODE', '42501', NULL,
                 'an administrator cannot lock jobq.job');
SELECT throws_ok('CLUSTER jobq.job USING job_pkey', '42501', NULL,
                 'an administrator cannot cluster jobq.job');
SELECT throws_ok('REINDEX TABLE jobq.ready', '42501', NULL,
                 'an administrator cannot reindex jobq.ready');
RESET ROLE;
SELECT is((SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.relnamespace = 'jobq'::regnamespace AND a.privilege_type = 'MAINTAIN'
              AND a.grantee <> c.relowner), 0::bigint,
          'no role but the owner holds MAINTAIN on a jobq relation');

-- drop_queue: administer on the queue itself; nobody else, and it changes nothing
SET ROLE priv_worker;
SELECT throws_ok($$SELECT jobq.drop_queue('q1')$$, '42501', NULL, 'worker: jobq.drop_queue on q1 is denied (42501)');
SET ROLE priv_producer;
SELECT throws_ok($$SELECT jobq.drop_queue('q1')$$, '42501', NULL, 'producer: jobq.drop_queue on q1 is denied (42501)');
SET ROLE priv_admin;
SELECT throws_ok($$SELECT jobq.drop_queue('q2', force => true)$$, '42501', NULL, 'admin of q1: jobq.drop_queue on q2 is denied (42501)');
SELECT throws_ok($$SELECT jobq.drop_queue('no such queue')$$, '42501', NULL, 'admin of q1: dropping a queue it does not administer says 42501, not whether it exists');
SET ROLE priv_star;
SELECT throws_ok($$SELECT jobq.drop_queue('q2')$$, '42501', NULL, 'work on *: jobq.drop_queue is denied (42501)');
RESET ROLE;
SELECT ok((SELECT count(*) FROM jobq.queues WHERE queue IN ('q1', 'q2')) = 2, 'q1 and q2 are still there');
SET ROLE priv_admin;
SELECT ok(jobq.drop_queue('q1', force => true) > 0, 'admin of q1: jobq.drop_queue(q1, force) works');
RESET ROLE;
SELECT ok(NOT EXISTS (SELECT FROM jobq.permission WHERE queue = 'q1'), 'its grants went with it');
SELECT ok(EXISTS (SELECT FROM jobq.permission WHERE queue = '*'), 'the grants on every queue stay');

SELECT * FROM finish();
ROLLBACK;
