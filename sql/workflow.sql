--
-- workflow: jobs that wait for other jobs (depends_on), fan-out from
-- inside a job, a fan-in callback, what a failed parent does, and a retry
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
DROP ROLE IF EXISTS wf_tenant;
DROP ROLE IF EXISTS wf_other1;
DROP ROLE IF EXISTS wf_other2;
DROP ROLE IF EXISTS wf_other3;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- a job with unfinished parents is blocked: never claimed
SELECT job_id AS a FROM jobq.enqueue('extract', '{"part": "a"}', queue => 'wf') \gset
SELECT job_id AS b FROM jobq.enqueue('extract', '{"part": "b"}', queue => 'wf') \gset
SELECT job_id AS c, created FROM jobq.enqueue('merge', queue => 'wf', depends_on => ARRAY[:a, :b, :a]) \gset
SELECT :'created' AS created;
SELECT job_id = :c AS is_c, status FROM jobq.jobs WHERE job_id = :c;
SELECT count(*) AS claimed FROM jobq.claim('wf', batch => 10, kinds => ARRAY['merge']);
SELECT blocked, pending FROM jobq.queue_stats WHERE queue = 'wf';

-- parents complete one by one: the child waits for the last, then is pending
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['extract']) \gset first_
SELECT jobq.complete(:first_job_id, :first_lease_token, '{"rows": 10}') AS done;
SELECT status FROM jobq.jobs WHERE job_id = :c;
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['extract']) \gset second_
SELECT jobq.complete(:second_job_id, :second_lease_token, '{"rows": 32}') AS done;
SELECT status FROM jobq.jobs WHERE job_id = :c;
SELECT job_id = :a AS is_a, kind, status, result FROM jobq.parent_results(:c);
SELECT * FROM jobq.workflow_status(:a);
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['merge']) \gset merge_
SELECT :merge_job_id = :c AS claimed_the_child;
SELECT jobq.complete(:merge_job_id, :merge_lease_token) AS done;
SELECT total, completed, can_finish FROM jobq.workflow_status(:b);

-- fan-out from inside a job: a running job splits its batch in two and adds
-- a callback after both halves, in the transaction that completes it
SELECT job_id AS batch FROM jobq.enqueue('batch', '{"items": [1, 2, 3, 4]}', queue => 'wf') \gset
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['batch']) \gset b_
BEGIN;
SELECT job_id AS h1 FROM jobq.enqueue('batch', '{"items": [1, 2]}', queue => 'wf', depends_on => ARRAY[:b_job_id]) \gset
SELECT job_id AS h2 FROM jobq.enqueue('batch', '{"items": [3, 4]}', queue => 'wf', depends_on => ARRAY[:b_job_id]) \gset
SELECT job_id AS cb FROM jobq.enqueue('batch.done', queue => 'wf', depends_on => ARRAY[:h1, :h2],
                                      on_parent_failure => 'run') \gset
SELECT jobq.complete(:b_job_id, :b_lease_token) AS done;
COMMIT;
SELECT kind, payload, status FROM jobq.workflow_jobs(:batch) ORDER BY job_id;
SELECT total, blocked, pending, completed FROM jobq.workflow_status(:batch);
SELECT root = :batch AS is_root, total, blocked, pending FROM jobq.workflows WHERE root = :batch;
-- one half fails for good, the other completes: the callback runs anyway
SELECT jobq.update_job(:h1, max_retries => 0) AS updated;
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['batch']) \gset h1_
SELECT :h1_job_id = :h1 AS got_h1, jobq.fail(:h1_job_id, :h1_lease_token, 'item 2 is bad') AS failed;
SELECT status FROM jobq.jobs WHERE job_id = :cb;
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['batch']) \gset h2_
SELECT jobq.complete(:h2_job_id, :h2_lease_token, '{"ok": 2}') AS done;
SELECT status FROM jobq.jobs WHERE job_id = :cb;
SELECT job_id = :h1 AS is_h1, status, result FROM jobq.parent_results(:cb);
SELECT total, failed, pending, can_finish FROM jobq.workflow_status(:batch);

-- on_parent_failure 'cancel' (the default) cancels dependents, transitively
SELECT job_id AS p FROM jobq.enqueue('charge', queue => 'wf', max_retries => 0) \gset
SELECT job_id AS k1 FROM jobq.enqueue('ship', queue => 'wf', depends_on => ARRAY[:p]) \gset
SELECT job_id AS k2 FROM jobq.enqueue('notify', queue => 'wf', depends_on => ARRAY[:k1]) \gset
SELECT job_id AS audit FROM jobq.enqueue('audit', queue => 'wf', depends_on => ARRAY[:p],
                                         on_parent_failure => 'run') \gset
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['charge']) \gset p_
SELECT jobq.fail(:p_job_id, :p_lease_token, 'card declined') AS status;
SELECT kind, status, last_error FROM jobq.workflow_jobs(:p) ORDER BY job_id;
SELECT total, failed, cancelled, pending, can_finish FROM jobq.workflow_status(:p);
-- a job enqueued on a parent that already failed is cancelled at once
SELECT job_id AS late FROM jobq.enqueue('ship', queue => 'wf', depends_on => ARRAY[:p]) \gset
SELECT status, last_error FROM jobq.jobs WHERE job_id = :late;

-- retry of the failed parent: dependents cancelled only because of it are
-- blocked again (and theirs); the 'run' dependent that is pending stays so
SELECT jobq.retry(:p) AS retried;
SELECT kind, status, last_error FROM jobq.workflow_jobs(:p) ORDER BY job_id;
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['charge']) \gset p2_
SELECT jobq.complete(:p2_job_id, :p2_lease_token) AS done;
SELECT kind, status FROM jobq.workflow_jobs(:p) ORDER BY job_id;

-- a dependent cancelled by an operator stays cancelled when its parent is
-- retried; its own dependents too
SELECT job_id AS rp FROM jobq.enqueue('rp', queue => 'wf', max_retries => 0) \gset
SELECT job_id AS rx FROM jobq.enqueue('rx', queue => 'wf', depends_on => ARRAY[:rp]) \gset
SELECT job_id AS ry FROM jobq.enqueue('ry', queue => 'wf', depends_on => ARRAY[:rx]) \gset
SELECT jobq.cancel(:rx) AS cancelled;
SELECT jobq.fail(job_id, lease_token, 'boom', retryable => false) FROM jobq.claim('wf', kinds => ARRAY['rp']);
SELECT jobq.retry(:rp) AS retried;
SELECT kind, status FROM jobq.jobs WHERE job_id IN (:rp, :rx, :ry) ORDER BY job_id;
-- retrying a dependent itself: back to blocked while a parent is unfinished
SELECT jobq.retry(:rx) AS retried;
SELECT kind, status FROM jobq.jobs WHERE job_id = :rx;
SELECT count(*) AS claimable FROM jobq.claim('wf', kinds => ARRAY['rx']);
-- and an error when a parent did not complete: retry the parent instead
SELECT jobq.fail(job_id, lease_token, 'boom again', retryable => false) FROM jobq.claim('wf', kinds => ARRAY['rp']);
SELECT kind, status FROM jobq.jobs WHERE job_id IN (:rp, :rx) ORDER BY job_id;
SELECT jobq.retry(:rx);
SELECT jobq.retry(:rp) AS retried;
SELECT kind, status FROM jobq.jobs WHERE job_id IN (:rp, :rx, :ry) ORDER BY job_id;

-- a 'run' dependent ran (and failed) after its parent failed; the parent is
-- retried: a retry of the dependent then waits for the parent's new outcome
SELECT job_id AS fp FROM jobq.enqueue('fp', queue => 'wf', max_retries => 0) \gset
SELECT job_id AS fc FROM jobq.enqueue('fc', queue => 'wf', max_retries => 0, depends_on => ARRAY[:fp],
                                      on_parent_failure => 'run') \gset
SELECT jobq.fail(job_id, lease_token, 'down', retryable => false) FROM jobq.claim('wf', kinds => ARRAY['fp']);
SELECT jobq.fail(job_id, lease_token, 'no input', retryable => false) FROM jobq.claim('wf', kinds => ARRAY['fc']);
SELECT jobq.retry(:fp) AS parent_retried, jobq.retry(:fc) AS child_retried;
SELECT kind, status FROM jobq.jobs WHERE job_id IN (:fp, :fc) ORDER BY job_id;
SELECT jobq.complete(job_id, lease_token) FROM jobq.claim('wf', kinds => ARRAY['fp']);
SELECT kind, status FROM jobq.jobs WHERE job_id = :fc;

-- cancelling a blocked job; update_job changes a blocked job
SELECT job_id AS q FROM jobq.enqueue('q', queue => 'wf') \gset
SELECT job_id AS w FROM jobq.enqueue('w', queue => 'wf', depends_on => ARRAY[:q]) \gset
SELECT job_id AS w2 FROM jobq.enqueue('w2', queue => 'wf', depends_on => ARRAY[:w]) \gset
SELECT jobq.update_job(:w, payload => '{"v": 2}', priority => 5) AS updated;
SELECT status, payload, priority FROM jobq.jobs WHERE job_id = :w;
SELECT jobq.cancel(:w) AS cancelled, jobq.cancel(:w) AS again;
SELECT status, last_error FROM jobq.jobs WHERE job_id = :w2;

-- an idempotency key on a child works as everywhere: a duplicate changes nothing
SELECT created FROM jobq.enqueue('once', queue => 'wf', idempotency_key => 'k', depends_on => ARRAY[:q]);
SELECT created FROM jobq.enqueue('once', queue => 'wf', idempotency_key => 'k', depends_on => ARRAY[:a]);
SELECT count(*) AS edges FROM jobq.dependency d JOIN jobq.job j ON j.job_id = d.child_id WHERE j.kind = 'once';

-- enqueue_many: one array of parents for the whole batch
SELECT count(*) AS jobs FROM jobq.enqueue_many('part', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[],
                                               queue => 'wf', depends_on => ARRAY[:q]);
SELECT status, count(*) FROM jobq.jobs WHERE kind = 'part' GROUP BY status;
SELECT job_id, lease_token FROM jobq.claim('wf', kinds => ARRAY['q']) \gset q_
SELECT jobq.complete(:q_job_id, :q_lease_token) AS done;
SELECT status, count(*) FROM jobq.jobs WHERE kind IN ('part', 'once') GROUP BY status;

-- bad input: a clear error, and nothing written
SELECT count(*) AS jobs_before FROM jobq.job \gset
SELECT * FROM jobq.enqueue('x', queue => 'wf', depends_on => ARRAY[9999999]);
SELECT * FROM jobq.enqueue('x', queue => 'wf', depends_on => ARRAY[:a, NULL]);
SELECT * FROM jobq.enqueue('x', queue => 'wf', depends_on => ARRAY[:a], on_parent_failure => 'retry');
SELECT * FROM jobq.enqueue('x', queue => 'wf', depends_on => ARRAY[:a], on_parent_failure => NULL);
SELECT * FROM jobq.enqueue('x', queue => 'wf', depends_on => array_fill(:a::bigint, ARRAY[100001]));
SELECT * FROM jobq.enqueue_many('x', array_fill('{}'::jsonb, ARRAY[1001]), queue => 'wf',
                                depends_on => ARRAY(SELECT g FROM generate_series(1, 1000) g));
SELECT count(*) = :jobs_before AS nothing_written FROM jobq.job;
-- an empty array is no parents
SELECT job_id AS nodeps FROM jobq.enqueue('x', queue => 'wf', depends_on => '{}') \gset
SELECT status FROM jobq.jobs WHERE job_id = :nodeps;

-- a transaction that enqueued dependents of unfinished parents settles them
-- at its commit, so it cannot be prepared (two-phase commit); one whose
-- dependents were rolled back to a savepoint can
SELECT job_id AS open_parent FROM jobq.enqueue('x', queue => 'wf') \gset
BEGIN;
SELECT created FROM jobq.enqueue('x', queue => 'wf', depends_on => ARRAY[:open_parent]);
PREPARE TRANSACTION 'wf_2pc';
BEGIN;
SAVEPOINT s;
SELECT job_id AS gone_parent FROM jobq.enqueue('x', queue => 'wf') \gset
SELECT created FROM jobq.enqueue('x', queue => 'wf', depends_on => ARRAY[:gone_parent]);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT count(*) AS kept FROM jobq.job WHERE job_id >= :gone_parent;

-- a tenant may depend only on jobs of queues it may work on or administer
-- (enqueue alone is refused: it would let a producer hang dependents on
-- the queue's jobs), and sees results only of parents whose queue it may
-- work on
CREATE ROLE wf_tenant;
SELECT jobq.grant('tenant_q', 'wf_tenant', 'enqueue');
SELECT jobq.grant('tenant_adm', 'wf_tenant', 'administer');
-- (other roles' grants on the queue: the capability checks run statements)
CREATE ROLE wf_other1;
CREATE ROLE wf_other2;
CREATE ROLE wf_other3;
SELECT count(jobq.grant('tenant_q', r::regrole, 'work')) FROM unnest(ARRAY['wf_other1', 'wf_other2', 'wf_other3']) r;
SELECT job_id AS secret FROM jobq.enqueue('secret', queue => 'private') \gset
SELECT job_id AS adm FROM jobq.enqueue('adm', queue => 'tenant_adm') \gset
SET ROLE wf_tenant;
-- a job of a queue the role may not use, and one that does not exist: the
-- same error, naming neither the queue nor whether the job exists
SELECT * FROM jobq.enqueue('mine', queue => 'tenant_q', depends_on => ARRAY[:secret]);
SELECT * FROM jobq.enqueue('mine', queue => 'tenant_q', depends_on => ARRAY[9999999]);
SELECT job_id AS mine FROM jobq.enqueue('mine', queue => 'tenant_q') \gset
SELECT job_id AS mine0 FROM jobq.enqueue('mine', queue => 'tenant_q') \gset
-- enqueue alone on the parents' queue: 42501, whatever the child's queue
\set VERBOSITY sqlstate
SELECT * FROM jobq.enqueue('mine2', queue => 'tenant_q', depends_on => ARRAY[:mine, :mine0]);
SELECT * FROM jobq.enqueue('mine2', queue => 'tenant_adm', depends_on => ARRAY[:mine]);
\set VERBOSITY default
SELECT * FROM jobq.enqueue('mine2', queue => 'tenant_q', depends_on => ARRAY[:mine0]);
-- administer on the parent's queue: allowed
SELECT job_id AS on_adm FROM jobq.enqueue('on_adm', queue => 'tenant_q', depends_on => ARRAY[:adm]) \gset
SELECT status FROM jobq.jobs WHERE job_id = :on_adm;
RESET ROLE;
-- work on it: allowed
SELECT jobq.grant('tenant_q', 'wf_tenant', 'work');
SET ROLE wf_tenant;
SELECT job_id AS mine2 FROM jobq.enqueue('mine2', queue => 'tenant_q', depends_on => ARRAY[:mine, :mine0]) \gset
SELECT count(*) AS visible FROM jobq.parent_results(:c);
SELECT count(*) AS visible FROM jobq.workflow_jobs(:a);
SELECT job_id IN (:mine, :mine0) AS is_mine, status FROM jobq.parent_results(:mine2);
RESET ROLE;
-- enqueue only again: the outcomes, not the results
SELECT jobq.revoke('tenant_q', 'wf_tenant', 'work');
SELECT jobq.complete(job_id, lease_token, '{"secret": 1}') FROM jobq.claim('tenant_q', kinds => ARRAY['mine'], batch => 2);
SET ROLE wf_tenant;
SELECT status, result FROM jobq.parent_results(:mine2);
RESET ROLE;
SELECT jobq.grant('tenant_q', 'wf_tenant', 'work');
SET ROLE wf_tenant;
SELECT status, result FROM jobq.parent_results(:mine2);
RESET ROLE;

-- a purged (or pruned) parent keeps its outcome for its dependents
SELECT jobq.purge('wf', 'completed') > 0 AS purged;
SELECT job_id = :h2 AS is_h2, kind, status, result FROM jobq.parent_results(:cb);
SELECT count(*) AS edges_of_purged_children FROM jobq.dependency WHERE child_id = :c;

-- a wide fan-in finishing in one statement: 100 parents that 100 children
-- each wait for (10,000 edges, ten chunks); each child's counter is written
-- once, not once per chunk (it was 1,000 writes, and 1,000 x 1,000 took minutes)
SET jobq.max_batch = 10000;
CREATE TEMP TABLE fan_parent AS
  SELECT job_id FROM jobq.enqueue_many('fan.parent', array_fill('{}'::jsonb, ARRAY[100]), queue => 'fan');
SELECT count(*) AS children FROM jobq.enqueue_many('fan.child', array_fill('{}'::jsonb, ARRAY[100]), queue => 'fan',
                                                   depends_on => (SELECT array_agg(job_id) FROM fan_parent));
-- (the view counts what this backend has not reported yet: report it first)
SELECT pg_stat_force_next_flush();
BEGIN;
SELECT count(*) AS completed FROM (
  SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token))
    FROM jobq.claim('fan', kinds => ARRAY['fan.parent'], batch => 100)) c;
SELECT n_tup_upd AS counter_writes FROM pg_stat_xact_user_tables WHERE relid = 'jobq.dependent'::regclass;
COMMIT;
SELECT status, count(*) FROM jobq.jobs WHERE queue = 'fan' GROUP BY status ORDER BY status;
RESET jobq.max_batch;

-- a dependent cancelled by a parent that was then discarded cannot run, and
-- the hint does not send the user to retry a job that is gone
SELECT job_id AS gp FROM jobq.enqueue('gp', queue => 'gone', max_retries => 0) \gset
SELECT job_id AS gc FROM jobq.enqueue('gc', queue => 'gone', depends_on => ARRAY[:gp]) \gset
SELECT jobq.fail(job_id, lease_token, 'down', retryable => false) FROM jobq.claim('gone');
SELECT jobq.discard(:gp) AS discarded;
SELECT jobq.retry(:gc) IS NULL AS retried;
SELECT status FROM jobq.jobs WHERE job_id = :gc;

SET client_min_messages = warning;
DROP EXTENSION jobq CASCADE;
DROP OWNED BY wf_tenant, wf_other1, wf_other2, wf_other3;
DROP ROLE wf_tenant;
DROP ROLE wf_other1;
DROP ROLE wf_other2;
DROP ROLE wf_other3;
