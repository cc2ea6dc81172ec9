-- Removing what is no longer wanted: jobq.drop_queue and jobq.discard.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS jobq CASCADE;
CREATE EXTENSION jobq;
RESET client_min_messages;

-- discard: a failed and a cancelled job go with their history; their keys
-- stay reserved; other statuses are left (false)
SELECT jobq.configure('dq', max_retries => 0);
SELECT job_id AS f FROM jobq.enqueue('f', queue => 'dq', idempotency_key => 'kf') \gset
SELECT job_id AS c FROM jobq.enqueue('c', queue => 'dq') \gset
SELECT job_id AS p FROM jobq.enqueue('p', queue => 'dq') \gset
SELECT job_id, lease_token FROM jobq.claim('dq', kinds => ARRAY['f']) \gset
SELECT jobq.fail(:job_id, :lease_token, 'boom');
SELECT jobq.cancel(:c);
SELECT jobq.discard(:p) AS discard_pending;
SELECT jobq.discard(:f) AS discard_failed, jobq.discard(:c) AS discard_cancelled;
SELECT jobq.discard(:f) AS again, jobq.discard(-1) AS missing;
SELECT kind, status FROM jobq.jobs WHERE queue = 'dq' ORDER BY job_id;
SELECT count(*) AS attempts FROM jobq.attempt WHERE job_id IN (:f, :c);
SELECT key, job_id = :f AS same_job, expires_at IS NOT NULL AS expiring
  FROM jobq.idempotency_key WHERE key = 'kf';
SELECT created FROM jobq.enqueue('f', queue => 'dq', idempotency_key => 'kf');
SELECT jobq.discard(NULL);

-- a failed parent whose dependent has not finished is refused
SELECT job_id AS parent FROM jobq.enqueue('parent', queue => 'dq') \gset
SELECT job_id AS child FROM jobq.enqueue('child', queue => 'other', depends_on => ARRAY[:parent],
                                         on_parent_failure => 'run') \gset
SELECT job_id, lease_token FROM jobq.claim('dq', kinds => ARRAY['parent']) \gset
SELECT jobq.fail(:job_id, :lease_token, 'parent failed');
SELECT status FROM jobq.jobs WHERE job_id = :child;
SELECT jobq.discard(:parent);
-- once the dependent finished, the parent can go
SELECT job_id, lease_token FROM jobq.claim('other') \gset
SELECT jobq.complete(:job_id, :lease_token);
SELECT jobq.discard(:parent) AS discard_parent;

-- drop_queue: a queue with settings, grants, a schedule and jobs of every
-- kind; a running job refuses it unless force, which fences its worker
CREATE ROLE regress_dq_admin;
SELECT jobq.configure('gone', max_retries => 5, rate_limit => 10);
SELECT jobq.grant('gone', 'regress_dq_admin', 'administer');
SELECT jobq.schedule('gone-tick', '* * * * *', 'tick', queue => 'gone');
SELECT count(*) FROM jobq.enqueue_many('k', ARRAY['{}', '{}', '{}']::jsonb[], queue => 'gone');
SELECT count(*) FROM jobq.enqueue('later', queue => 'gone', run_at => now() + interval '1 day');
SELECT job_id AS gone_parent FROM jobq.enqueue('gp', queue => 'gone') \gset
SELECT job_id AS kept_child FROM jobq.enqueue('kc', queue => 'kept', depends_on => ARRAY[:gone_parent]) \gset
SELECT job_id AS r, lease_token AS rt FROM jobq.claim('gone', kinds => ARRAY['k']) \gset
SET ROLE regress_dq_admin;
SELECT jobq.drop_queue('gone');
SELECT jobq.drop_queue('gone', force => true) AS removed;
RESET ROLE;
-- the fenced worker's token no longer works
SELECT jobq.complete(:r, :rt) AS complete_fenced;
SELECT count(*) AS jobs FROM jobq.job WHERE queue = 'gone';
SELECT count(*) AS queue_rows FROM jobq.queues WHERE queue = 'gone';
SELECT count(*) AS schedules FROM jobq.schedules WHERE queue = 'gone';
SELECT count(*) AS grants FROM jobq.permission WHERE queue = 'gone';
SELECT count(*) AS ready FROM jobq.ready WHERE queue = 'gone';
SELECT count(*) AS scheduled FROM jobq.scheduled WHERE queue = 'gone';
-- the dependent in another queue settled as under a cancelled parent
SELECT status FROM jobq.jobs WHERE job_id = :kept_child;
-- the queue can be made again, empty
SELECT jobq.configure('gone');
SELECT queue, max_retries FROM jobq.queues WHERE queue = 'gone';

-- refused: a queue that does not exist, bad names, no capability
SELECT jobq.drop_queue('no such queue');
SELECT jobq.drop_queue(NULL);
SELECT jobq.drop_queue('');
-- a queue named '*' goes like any other; grants on '*' (every queue) stay
CREATE ROLE regress_dq_all;
SELECT jobq.grant('*', 'regress_dq_all', 'work');
SELECT count(*) FROM jobq.enqueue('star', queue => '*');
SELECT jobq.drop_queue('*') AS removed_star;
SELECT queue, role, capability FROM jobq.permission WHERE role = 'regress_dq_all'::regrole;
SELECT jobq.drop_queue('*');
SELECT job_id AS x FROM jobq.enqueue('x', queue => 'dq', max_retries => 0) \gset
SELECT job_id, lease_token FROM jobq.claim('dq', kinds => ARRAY['x']) \gset
SELECT jobq.fail(:job_id, :lease_token, 'x');
SET ROLE regress_dq_admin;
SELECT jobq.drop_queue('dq');
SELECT jobq.discard(:x);
RESET ROLE;
SELECT status FROM jobq.jobs WHERE job_id = :x;

DROP EXTENSION jobq CASCADE;
DROP OWNED BY regress_dq_admin, regress_dq_all;
DROP ROLE regress_dq_admin;
DROP ROLE regress_dq_all;
