--
-- test/fuzz/fuzz.sql: a random-input driver for jobq's SQL API, run by
-- test/t/016_sql_fuzz.pl (loaded into a database where jobq is installed).
--
-- fuzz.run(seed, calls) calls random jobq functions with random arguments
-- drawn from pools of awkward values (NULLs, extremes, infinities, odd
-- Unicode, wrong JSON shapes, empty, NULL-holding, multi-dimensional and
-- non-1-based arrays, mismatched lengths, oversized values) and, often, real
-- job ids with their real lease tokens, each call in its own subtransaction.
-- Every call must end in a result or a clean ERROR.  It records every error
-- in fuzz.result and counts what must never happen:
--   internal   an error of class XX (internal_error, data_corrupted, ...)
--   halfwrite  an erroring call that changed the row counts of jobq's tables
--              (checked when the batch runs under REPEATABLE READ, where the
--              background worker's and executors' commits stay invisible)
--   broken     a call after which jobq's invariants no longer hold (a
--              pending job in neither or both of ready and scheduled, a
--              running job without a lease, a job of a missing queue, ...),
--              or after which what it touched can no longer be used: after
--              every successful call that writes, fuzz.exercise() reads every
--              row of every jobq table and view as text (as pg_dump would),
--              resumes every queue, enqueues two probe jobs into it, claims,
--              extends and fails or completes its ready jobs, and reaps,
--              prunes and fires schedules,
--              all in a subtransaction it rolls back; a 22008 or an "out of
--              range" error from any of these steps means the call stored a
--              value jobq cannot store or compute with, and counts as broken
--              (a 22008 the call itself raises is a clean refusal)
-- Interval and timestamp arguments are drawn from pools that hold the
-- extremes ('1000000 years', '-1000000 years', '178000000 years',
-- 'infinity', '-infinity', '294276-12-31', '4713-11-24 BC'); text arguments
-- from pools that hold a 1 MB string.  Positive extreme waits of claim are
-- tried by the TAP test on its own (a claim that honours them blocks).
-- A crash ends the backend and so the psql session running it: the TAP test
-- sees that.
--
CREATE SCHEMA fuzz;

CREATE TABLE fuzz.result (
    call_no  integer,
    fn       text,
    sql      text,
    sqlstate text,
    message  text
);

CREATE TABLE fuzz.tally (what text PRIMARY KEY, n bigint NOT NULL DEFAULT 0);

-- handlers the fuzzer may register (and some functions that do not fit)
CREATE FUNCTION fuzz.handler(payload jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT '{}'::jsonb $$;
CREATE FUNCTION fuzz.handler2(payload jsonb, job jsonb) RETURNS jsonb LANGUAGE sql AS $$ SELECT job $$;
CREATE FUNCTION fuzz.boom(payload jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'boom %', payload; END $$;

CREATE ROLE fuzz_role;

-- one element of a pool, at random
CREATE FUNCTION fuzz.pick(pool text[]) RETURNS text
LANGUAGE sql VOLATILE AS $$ SELECT pool[1 + floor(random() * cardinality(pool))::int] $$;

-- an SQL expression of the given kind of argument
CREATE FUNCTION fuzz.arg(kind text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    names text[] := ARRAY['NULL::text', $q$''$q$, $q$'q'$q$, $q$'default'$q$, $q$'fq'$q$, $q$'*'$q$, $q$' '$q$,
        $q$E'\u202Eevil\u202C'$q$, $q$E'a\u200Bb\u200D'$q$, $q$E'\U0001F525\U0001F4A5'$q$,
        $q$repeat('é', 100)$q$, $q$repeat('x', 128)$q$, $q$repeat('x', 129)$q$, $q$repeat('k', 512)$q$,
        $q$repeat('k', 513)$q$, $q$'q''; DROP TABLE jobq.job; --'$q$, $q$E'tab\there\nnewline'$q$,
        $q$'%s%n%x'$q$, $q$'e\u0301\u0301\u0301'$q$, $q$'"quoted"'$q$, $q$'Robert''); --'$q$,
        $q$repeat('m', 1048576)$q$];
    ints text[] := ARRAY['NULL::int', '0', '-1', '1', '2', '10', '1000', '1001', '2147483647', '(-2147483648)',
        '(-2147483647)', '100000'];
    bigints text[] := ARRAY['NULL::bigint', '0', '-1', '1', '9223372036854775807', '(-9223372036854775808)',
        '2147483648', '4294967296'];
    intervals text[] := ARRAY['NULL::interval', $q$'0'::interval$q$, $q$'-1 s'::interval$q$, $q$'1 s'::interval$q$,
        $q$'1 microsecond'::interval$q$, $q$'1000000 years'::interval$q$, $q$'178000000 years'::interval$q$,
        $q$'-178000000 years'::interval$q$, $q$'1 month -31 days'::interval$q$, $q$'-1 month 40 days'::interval$q$,
        $q$'2147483647 days'::interval$q$, $q$'-2147483648 months'::interval$q$, $q$'10 minutes'::interval$q$,
        $q$'-1000000 years'::interval$q$, $q$'10000 years'::interval$q$, $q$'300000 years'::interval$q$,
        $q$'2147483647 hours'::interval$q$, $q$'-2147483648 hours'::interval$q$,
        $q$'1000000 years -359999999 days'::interval$q$, $q$'-1000000 years 360000001 days'::interval$q$];
    -- waits must stay short or negative: a claim really waits (with 30-day
    -- months, '-1 month 40 days' is ten days)
    waits text[] := ARRAY['NULL::interval', $q$'0'::interval$q$, $q$'-1 s'::interval$q$, $q$'1 ms'::interval$q$,
        $q$'-178000000 years'::interval$q$, $q$'-1 month 20 days'::interval$q$, $q$'-1000000 years'::interval$q$,
        $q$'-2147483648 months'::interval$q$];
    stamps text[] := ARRAY['NULL::timestamptz', $q$'infinity'::timestamptz$q$, $q$'-infinity'::timestamptz$q$,
        $q$'294276-12-31 23:59:59+00'::timestamptz$q$, $q$'4713-11-24 00:00:00+00 BC'::timestamptz$q$,
        'now()', $q$now() + '1 day'$q$, $q$'2000-01-01'::timestamptz$q$, $q$'1970-01-01 00:00:00+00'::timestamptz$q$,
        $q$'294276-12-31'::timestamptz$q$, $q$'4713-11-24 BC'::timestamptz$q$, $q$'200000-01-01'::timestamptz$q$];
    jsons text[] := ARRAY['NULL::jsonb', $q$'{}'::jsonb$q$, $q$'[]'::jsonb$q$, $q$'1'::jsonb$q$, $q$'"s"'::jsonb$q$,
        $q$'null'::jsonb$q$, $q$'{"a": 1}'::jsonb$q$, $q$'{"\u0000": 1}'::jsonb$q$, $q$'{bad'::jsonb$q$,
        $q$'{"a": 1e400}'::jsonb$q$, $q$jsonb_build_object('big', repeat('x', 70000))$q$,
        $q$(repeat('[', 2000) || repeat(']', 2000))::jsonb$q$, $q$jsonb_build_object(repeat('k', 300), 'v')$q$,
        $q$'{"a": "\ud83d\ude00"}'::jsonb$q$, $q$'{"n": -0.0}'::jsonb$q$];
    jsonarrs text[] := ARRAY['NULL::jsonb[]', $q$'{}'::jsonb[]$q$, 'ARRAY[NULL::jsonb]', $q$ARRAY['{}'::jsonb, '{}']$q$,
        $q$ARRAY[['{}'::jsonb], ['{}'::jsonb]]$q$, $q$ARRAY['[]'::jsonb]$q$, $q$ARRAY['{}'::jsonb, NULL]$q$,
        $q$array_fill('{}'::jsonb, ARRAY[20])$q$, $q$array_fill('[]'::jsonb, ARRAY[1001])$q$, $q$'[0:1]={"{}","{}"}'::jsonb[]$q$,
        $q$ARRAY[jsonb_build_object('big', repeat('x', 70000))]$q$, $q$ARRAY['{"a": 1}'::jsonb]$q$];
    textarrs text[] := ARRAY['NULL::text[]', $q$'{}'::text[]$q$, 'ARRAY[NULL::text]', $q$ARRAY['a', 'b']$q$,
        $q$ARRAY[['a'], ['b']]$q$, $q$ARRAY['', NULL]$q$, $q$ARRAY[repeat('k', 600)]$q$,
        $q$'[5:6]={x,y}'::text[]$q$, $q$ARRAY['k1']$q$, $q$array_fill('k'::text, ARRAY[1001])$q$];
    bigintarrs text[] := ARRAY['NULL::bigint[]', $q$'{}'::bigint[]$q$, 'ARRAY[NULL::bigint]', 'ARRAY[1::bigint, 2]',
        'ARRAY[[1::bigint], [2]]', $q$'[0:1]={1,2}'::bigint[]$q$, 'ARRAY[-1::bigint]',
        '(SELECT array_agg(job_id) FROM jobq.job)', '(SELECT array_agg(lease_token) FROM jobq.job)',
        'array_fill(1::bigint, ARRAY[1001])'];
    bools text[] := ARRAY['NULL::boolean', 'true', 'false'];
    floats text[] := ARRAY['NULL::float8', $q$'NaN'::float8$q$, $q$'Infinity'::float8$q$, $q$'-Infinity'::float8$q$,
        '0::float8', '0.5::float8', '1::float8', '1.0000001::float8', '(-0.0)::float8', '(-0.1)::float8'];
    crons text[] := ARRAY['NULL::text', $q$'* * * * *'$q$, $q$'* * * * * *'$q$, $q$'*/0 * * * *'$q$,
        $q$'@every 0s'$q$, $q$'@every 1s'$q$, $q$'@every 99999999999999999999d'$q$, $q$'61 * * * *'$q$,
        $q$'0 0 30 2 *'$q$, $q$repeat('* ', 200)$q$, $q$'@reboot'$q$, $q$'* * * * * * *'$q$, $q$''$q$,
        $q$'0 0 29 2 MON'$q$, $q$'1-60/7 */25 31 4,6,9,11 SUN-SAT'$q$, $q$'-1 * * * *'$q$,
        $q$'4294967296 * * * *'$q$, $q$'@yearly'$q$, $q$'0 9 * * MON-XYZ'$q$, $q$'L W # ?'$q$,
        $q$repeat('*', 1048576)$q$, $q$'0 0 29 2 *'$q$];
    zones text[] := ARRAY['NULL::text', $q$'UTC'$q$, $q$'Mars/Olympus'$q$, $q$'Europe/Berlin'$q$, $q$''$q$,
        $q$'../../../etc/passwd'$q$, $q$'EST5EDT,M3.2.0,M11.1.0'$q$, $q$'Pacific/Chatham'$q$,
        $q$'Australia/Lord_Howe'$q$, $q$'+14'$q$, $q$repeat('Z', 300)$q$, $q$'posixrules'$q$,
        $q$repeat('Z', 1048576)$q$];
    misfires text[] := ARRAY['NULL::text', $q$'skip'$q$, $q$'run_once'$q$, $q$'run_all'$q$, $q$'RUN_ALL'$q$, $q$''$q$];
    statuses text[] := ARRAY['NULL::text', $q$'completed'$q$, $q$'failed'$q$, $q$'cancelled'$q$, $q$'pending'$q$,
        $q$'running'$q$, $q$'x'$q$];
    caps text[] := ARRAY['NULL::text', $q$'enqueue'$q$, $q$'work'$q$, $q$'administer'$q$, $q$'WORK'$q$, $q$''$q$];
    roles text[] := ARRAY['NULL::regrole', $q$'fuzz_role'::regrole$q$, 'current_user::regrole',
        $q$'pg_monitor'::regrole$q$, $q$'nobody_here'::regrole$q$, '0::oid::regrole'];
    procs text[] := ARRAY['NULL::regprocedure', $q$'fuzz.handler(jsonb)'::regprocedure$q$,
        $q$'fuzz.handler2(jsonb,jsonb)'::regprocedure$q$, $q$'fuzz.boom(jsonb)'::regprocedure$q$,
        $q$'pg_catalog.now()'::regprocedure$q$, $q$'pg_catalog.jsonb_typeof(jsonb)'::regprocedure$q$,
        '0::oid::regprocedure', '1::oid::regprocedure'];
    labels text[] := ARRAY['NULL::text', $q$'low'$q$, $q$'HIGH'$q$, $q$'critical'$q$, $q$'urgent'$q$, $q$''$q$,
        $q$'medium '$q$];
BEGIN
    RETURN CASE kind
        WHEN 'name' THEN fuzz.pick(names)
        WHEN 'int' THEN fuzz.pick(ints)
        WHEN 'bigint' THEN fuzz.pick(bigints)
        WHEN 'job' THEN CASE WHEN random() < 0.7
                             THEN '(SELECT job_id FROM jobq.job ORDER BY random() LIMIT 1)'
                             ELSE fuzz.pick(bigints) END
        WHEN 'interval' THEN fuzz.pick(intervals)
        WHEN 'wait' THEN fuzz.pick(waits)
        WHEN 'ts' THEN fuzz.pick(stamps)
        WHEN 'json' THEN fuzz.pick(jsons)
        WHEN 'json[]' THEN fuzz.pick(jsonarrs)
        WHEN 'text[]' THEN fuzz.pick(textarrs)
        WHEN 'bigint[]' THEN fuzz.pick(bigintarrs)
        WHEN 'bool' THEN fuzz.pick(bools)
        WHEN 'float' THEN fuzz.pick(floats)
        WHEN 'cron' THEN fuzz.pick(crons)
        WHEN 'zone' THEN fuzz.pick(zones)
        WHEN 'misfire' THEN fuzz.pick(misfires)
        WHEN 'status' THEN fuzz.pick(statuses)
        WHEN 'cap' THEN fuzz.pick(caps)
        WHEN 'role' THEN fuzz.pick(roles)
        WHEN 'proc' THEN fuzz.pick(procs)
        WHEN 'label' THEN fuzz.pick(labels)
        WHEN 'error' THEN fuzz.pick(names || ARRAY[$q$repeat('e', 9000)$q$, $q$repeat('é', 5000)$q$,
                                                   $q$repeat('é', 524288)$q$])
    END;
END $$;

/*
 * The API: function, argument kinds, how many are required.  'job' and
 * 'token' together draw a real running job with its real lease token most
 * of the time.
 */
CREATE TABLE fuzz.api (fn text, args text[], required int);
INSERT INTO fuzz.api VALUES
    ('enqueue', '{name,json,name,int,ts,int,name,name}', 1),
    ('enqueue_many', '{name,json[],name,int,ts,int,text[],name}', 2),
    ('claim', '{name,name,int,interval,text[],wait}', 0),
    ('complete', '{job,token,json}', 2),
    ('complete_many', '{bigint[],bigint[],json[]}', 2),
    ('fail', '{job,token,error,bool,interval,error}', 3),
    ('extend', '{job,token,interval}', 3),
    ('checkpoint', '{job,token,json}', 3),
    ('snooze', '{job,token,interval}', 3),
    ('snooze', '{interval}', 1),
    ('configure', '{name,int,interval,interval,interval,float,interval,interval,int,int,int,interval,int}', 1),
    ('pause', '{name}', 1),
    ('resume', '{name}', 1),
    ('retry', '{job}', 1),
    ('retry_failed', '{name,name}', 0),
    ('cancel', '{job}', 1),
    ('purge', '{name,status,interval}', 2),
    ('schedule', '{name,cron,name,json,name,zone,misfire,int}', 3),
    ('unschedule', '{name}', 1),
    ('pause_schedule', '{name}', 1),
    ('resume_schedule', '{name}', 1),
    ('run_schedules', '{}', 0),
    ('register_handler', '{name,proc,name,bool}', 2),
    ('unregister_handler', '{name}', 1),
    ('grant', '{name,role,cap}', 3),
    ('revoke', '{name,role,cap}', 3),
    ('reap', '{int}', 0),
    ('prune', '{int}', 0),
    ('job', '{job}', 1),
    ('job_by_key', '{name,name}', 2),
    ('cron_next', '{cron,ts,zone}', 2),
    ('priority', '{label}', 1),
    ('priority_label', '{int}', 1),
    ('kind_stats', '{interval,name}', 0),
    ('health', '{interval,interval,interval}', 0),
    ('may_use_queue', '{name}', 1),
    -- added in 0.2.0 (left out, and named by the TAP test, while missing)
    ('update_job', '{job,json,ts,int,int}', 1),
    ('release', '{job,token}', 2),
    ('release_running', '{name,name}', 1),
    ('run_schedule', '{name}', 1),
    ('parent_results', '{job}', 1),
    ('workflow_status', '{job}', 1),
    ('workflow_jobs', '{job}', 1),
    -- added in 0.3.0
    ('register_worker', '{name,text[],json}', 2),
    ('unregister_worker', '{name}', 1),
    ('discard', '{job}', 1),
    ('drop_queue', '{name,bool}', 1);

-- functions that only read: nothing for fuzz.exercise() to follow up
CREATE TABLE fuzz.readonly (fn text PRIMARY KEY);
INSERT INTO fuzz.readonly VALUES ('job'), ('job_by_key'), ('cron_next'), ('priority'), ('priority_label'),
    ('kind_stats'), ('health'), ('may_use_queue'), ('parent_results'), ('workflow_status'), ('workflow_jobs');

-- row counts of jobq's tables
CREATE FUNCTION fuzz.counts() RETURNS bigint[]
LANGUAGE sql VOLATILE AS $$
SELECT ARRAY[(SELECT count(*) FROM jobq.job), (SELECT count(*) FROM jobq.queue),
             (SELECT count(*) FROM jobq.schedule), (SELECT count(*) FROM jobq.idempotency_key),
             (SELECT count(*) FROM jobq.ready) + (SELECT count(*) FROM jobq.scheduled),
             (SELECT count(*) FROM jobq.attempt), (SELECT count(*) FROM jobq.permission),
             (SELECT count(*) FROM jobq.handler)]
$$;

-- the first invariant of jobq's tables that does not hold, or NULL
CREATE FUNCTION fuzz.broken() RETURNS text
LANGUAGE sql VOLATILE AS $$
SELECT coalesce(
    (SELECT 'pending job ' || j.job_id || ' is in ready/scheduled ' || coalesce(x.n, 0) || ' times'
       FROM jobq.job j
       LEFT JOIN (SELECT job_id, count(*) AS n
                    FROM (SELECT job_id FROM jobq.ready UNION ALL SELECT job_id FROM jobq.scheduled) u
                   GROUP BY job_id) x ON x.job_id = j.job_id
      WHERE j.status = 'pending' AND coalesce(x.n, 0) <> 1 LIMIT 1),
    (SELECT 'job ' || x.job_id || ' is in ready/scheduled but ' || coalesce(j.status, 'missing')
       FROM (SELECT job_id FROM jobq.ready UNION ALL SELECT job_id FROM jobq.scheduled) x
       LEFT JOIN jobq.job j USING (job_id)
      WHERE j.status IS DISTINCT FROM 'pending' LIMIT 1),
    (SELECT 'running job ' || job_id || ' has no lease' FROM jobq.job
      WHERE status = 'running' AND (lease_token IS NULL OR lease_expires_at IS NULL) LIMIT 1),
    (SELECT 'finished job ' || job_id || ' has no finished_at' FROM jobq.job
      WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at IS NULL LIMIT 1),
    (SELECT 'job ' || job_id || ' is in a missing queue' FROM jobq.job j
      WHERE NOT EXISTS (SELECT FROM jobq.queue q WHERE q.name = j.queue) LIMIT 1),
    (SELECT 'job ' || job_id || ' has a payload that is not an object' FROM jobq.job
      WHERE jsonb_typeof(payload) <> 'object' LIMIT 1),
    (SELECT 'job ' || job_id || ' has priority ' || priority FROM jobq.job
      WHERE priority = -2147483648 LIMIT 1),
    (SELECT 'job ' || j.job_id || ' has key ' || j.idempotency_key || ' not reserved for it' FROM jobq.job j
      WHERE j.idempotency_key IS NOT NULL
        AND NOT EXISTS (SELECT FROM jobq.idempotency_key k
                         WHERE k.kind = j.kind AND k.key = j.idempotency_key AND k.job_id = j.job_id) LIMIT 1),
    (SELECT 'job ' || job_id || ' has an empty or overlong name' FROM jobq.job
      WHERE octet_length(kind) NOT BETWEEN 1 AND 128 OR octet_length(queue) NOT BETWEEN 1 AND 128 LIMIT 1),
    (SELECT 'schedule ' || name || ' has a bad misfire policy or name' FROM jobq.schedule
      WHERE misfire NOT IN ('skip', 'run_once', 'run_all') OR octet_length(name) = 0 LIMIT 1))
$$;

-- Rows written after this call have an xmin above the one it returns:
-- the row it writes, in a subtransaction of its own (the EXCEPTION clause
-- makes one), gets an xid of its own, and later ones are larger.
CREATE TABLE fuzz.marks (at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION fuzz.mark() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    x bigint;
BEGIN
    BEGIN
        INSERT INTO fuzz.marks DEFAULT VALUES RETURNING xmin::text::bigint INTO x;
    EXCEPTION WHEN OTHERS THEN
        RAISE;
    END;
    RETURN x;
END $$;

-- true for an error that says a value is out of range (SQLSTATE 22008
-- datetime_field_overflow, or any message saying "out of range"): from a
-- follow-up step, never a clean error
CREATE FUNCTION fuzz.is_range_error(st text, msg text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$ SELECT st = '22008' OR msg ILIKE '%out of range%' $$;

/*
 * Use what the call after mark x0 (see fuzz.mark()) touched, the way jobq's
 * users, its worker and pg_dump do: the rows written since (xmin > x0), the
 * queues those rows or their jobs are in, and the worker's duties;
 * returns the first step that failed with a range error (see
 * fuzz.is_range_error), with its error, or NULL.  Everything runs in a
 * subtransaction that is rolled back, so the fuzzed state stays as the calls
 * left it.  Other errors of a step (a lock, a rate limit, a permission) are
 * counted in the tally as 'followup_error'; internal ones (class XX) also as
 * 'internal', and recorded in fuzz.result under call call_no of fn.
 */
CREATE FUNCTION fuzz.exercise(call_no int, fn text, x0 bigint) RETURNS text
LANGUAGE plpgsql VOLATILE
-- without JIT: on the stock server jobq.reap()'s plan is JIT-compiled at
-- every call (about a second here; issue 15, item 9), which would make the
-- follow-ups the whole run.  The fuzzed calls keep the server's setting.
SET jit = off
AS $$
DECLARE
    bad text;
    step text;
    steps text[] := '{}';
    st text;
    msg text;
    rel record;
    q record;
    c record;
    nclaimed int := 0;
    nerr int := 0;
    errs text[] := '{}';
    internal text[] := '{}';
BEGIN
    BEGIN
        -- every row of every table and view of schema jobq, as text (what
        -- pg_dump's COPY and a SELECT * do; summed, since a count(*) over
        -- a subquery would let the planner skip the conversion)
        -- (of the tables, the rows written since mark x0; of the job views,
        -- those rows' jobs; the other views are small, read whole)
        FOR rel IN SELECT r.relname, r.relkind FROM pg_class r JOIN pg_namespace s ON s.oid = r.relnamespace
                    WHERE s.nspname = 'jobq' AND r.relkind IN ('r', 'v') ORDER BY r.relname LOOP
            steps := steps || CASE
                WHEN rel.relkind = 'r' THEN
                    format('SELECT sum(length(t::text)) FROM jobq.%I t WHERE t.xmin::text::bigint > %s',
                           rel.relname, x0)
                WHEN rel.relname IN ('jobs', 'dead_letter') THEN
                    format('SELECT sum(length(t::text)) FROM jobq.%I t WHERE t.job_id IN '
                           '(SELECT job_id FROM jobq.job WHERE xmin::text::bigint > %s)', rel.relname, x0)
                ELSE format('SELECT sum(length(t::text)) FROM jobq.%I t', rel.relname) END;
        END LOOP;
        steps := steps || ARRAY['SELECT sum(length(h::text)) FROM jobq.health() h',
                                'SELECT sum(length(k::text)) FROM jobq.kind_stats() k',
                                'SELECT jobq.reap()', 'SELECT jobq.prune()', 'SELECT jobq.run_schedules()'];
        FOREACH step IN ARRAY steps LOOP
            BEGIN
                EXECUTE step;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                IF fuzz.is_range_error(st, msg) THEN
                    bad := coalesce(bad, format('follow-up %s: %s %s', step, st, left(msg, 200)));
                ELSE
                    nerr := nerr + 1;
                    errs := errs || st;
                    IF st LIKE 'XX%' THEN
                        internal := internal || format('follow-up %s: %s %s', step, st, left(msg, 200));
                    END IF;
                END IF;
            END;
        END LOOP;
        -- every queue: resumed, two probe jobs enqueued first in line, its
        -- ready jobs claimed (the queue's lease), extended, then failed (a
        -- retry's backoff) or completed (the retention to come)
        FOR q IN SELECT name FROM jobq.queue qq
                  WHERE qq.xmin::text::bigint > x0
                     OR EXISTS (SELECT FROM jobq.job j WHERE j.queue = qq.name AND j.xmin::text::bigint > x0)
                  ORDER BY name LIMIT 20 LOOP
            step := format('resume, enqueue into and claim from queue %s', left(q.name, 40));
            BEGIN
                PERFORM jobq.resume(q.name);
                PERFORM jobq.enqueue('fuzz.probe', '{}', q.name, 2147483647) FROM generate_series(1, 2);
                FOR c IN SELECT * FROM jobq.claim(q.name, 'fuzz-follow-up', 5) LOOP
                    nclaimed := nclaimed + 1;
                    step := format('extend(%s, ...) in queue %s', c.job_id, left(q.name, 40));
                    PERFORM jobq.extend(c.job_id, c.lease_token, '1 minute');
                    IF nclaimed % 2 = 0 THEN
                        step := format('complete(%s, ...) in queue %s', c.job_id, left(q.name, 40));
                        PERFORM jobq.complete(c.job_id, c.lease_token, '{"follow": "up"}');
                    ELSE
                        step := format('fail(%s, ...) in queue %s', c.job_id, left(q.name, 40));
                        PERFORM jobq.fail(c.job_id, c.lease_token, 'follow-up');
                    END IF;
                END LOOP;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                IF fuzz.is_range_error(st, msg) THEN
                    bad := coalesce(bad, format('follow-up %s: %s %s', step, st, left(msg, 200)));
                ELSE
                    nerr := nerr + 1;
                    errs := errs || st;
                    IF st LIKE 'XX%' THEN
                        internal := internal || format('follow-up %s: %s %s', step, st, left(msg, 200));
                    END IF;
                END IF;
            END;
        END LOOP;
        -- what the claims moved, as text again (a retry's new run_at, a
        -- completion's finished_at), then reaped and pruned
        FOREACH step IN ARRAY ARRAY[format('SELECT sum(length(j::text)) FROM jobq.jobs j WHERE j.job_id IN '
                                           '(SELECT job_id FROM jobq.job WHERE xmin::text::bigint > %s)', x0),
                                    'SELECT sum(length(s::text)) FROM jobq.queue_stats s',
                                    'SELECT jobq.reap()', 'SELECT jobq.prune()'] LOOP
            BEGIN
                EXECUTE step;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                IF fuzz.is_range_error(st, msg) THEN
                    bad := coalesce(bad, format('follow-up after the claims %s: %s %s', step, st, left(msg, 200)));
                ELSE
                    nerr := nerr + 1;
                    errs := errs || st;
                    IF st LIKE 'XX%' THEN
                        internal := internal || format('follow-up %s: %s %s', step, st, left(msg, 200));
                    END IF;
                END IF;
            END;
        END LOOP;
        RAISE EXCEPTION USING ERRCODE = 'FZ000', MESSAGE = 'fuzz: roll the follow-ups back';
    EXCEPTION WHEN SQLSTATE 'FZ000' THEN
        NULL;
    END;
    -- (after the rollback, which would take these along)
    UPDATE fuzz.tally SET n = n + nerr WHERE what = 'followup_error';
    INSERT INTO fuzz.tally AS t SELECT 'followup_error ' || e, count(*) FROM unnest(errs) e GROUP BY e
        ON CONFLICT (what) DO UPDATE SET n = t.n + excluded.n;
    UPDATE fuzz.tally SET n = n + cardinality(internal) WHERE what = 'internal';
    INSERT INTO fuzz.result SELECT call_no, fn, 'follow-up', 'XX', i FROM unnest(internal) i;
    RETURN bad;
END $$;

/*
 * calls random calls; returns the tallies.  Each call runs in its own
 * subtransaction; set_seed makes the sequence of calls repeatable (the
 * tables it reads jobs from also change with the background worker).
 */
CREATE FUNCTION fuzz.run(set_seed float8, calls int, first_no int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a record;
    i int;
    k int;
    nargs int;
    args text[];
    sql text;
    st text;
    msg text;
    before bigint[];
    bad text;
    jobpick text;
    x0 bigint;
BEGIN
    PERFORM setseed(set_seed);
    FOR i IN first_no .. first_no + calls - 1 LOOP
        SELECT * INTO a FROM fuzz.api ORDER BY random() LIMIT 1;
        nargs := a.required + floor(random() * (cardinality(a.args) - a.required + 1))::int;
        args := '{}';
        -- a real running job and its token, most of the time
        jobpick := CASE WHEN random() < 0.6
                        THEN (SELECT format('%s|%s', job_id, lease_token) FROM jobq.job
                               WHERE status = 'running' ORDER BY random() LIMIT 1) END;
        FOR k IN 1 .. nargs LOOP
            args := args || CASE
                WHEN a.args[k] = 'job' AND jobpick IS NOT NULL THEN split_part(jobpick, '|', 1)
                WHEN a.args[k] = 'token' AND jobpick IS NOT NULL THEN split_part(jobpick, '|', 2)
                WHEN a.args[k] = 'token' THEN fuzz.arg('bigint')
                ELSE fuzz.arg(a.args[k]) END;
        END LOOP;
        sql := format('SELECT count(*) FROM jobq.%I(%s)', a.fn, array_to_string(args, ', '));
        before := fuzz.counts();
        x0 := fuzz.mark();
        -- in the server log, so a crash can be traced to its call
        RAISE LOG 'jobq fuzz call %: %', i, sql;
        bad := NULL;
        BEGIN
            EXECUTE sql;
            UPDATE fuzz.tally SET n = n + 1 WHERE what = 'ok';
            IF NOT EXISTS (SELECT FROM fuzz.readonly r WHERE r.fn = a.fn) THEN
                bad := fuzz.exercise(i, a.fn, x0);
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
            INSERT INTO fuzz.result VALUES (i, a.fn, sql, st, left(msg, 300));
            UPDATE fuzz.tally SET n = n + 1 WHERE what = 'error';
            IF st LIKE 'XX%' THEN
                UPDATE fuzz.tally SET n = n + 1 WHERE what = 'internal';
            END IF;
            -- (under READ COMMITTED the background worker's commits show
            -- up in the counts: only a snapshot that stays put can tell)
            IF current_setting('transaction_isolation') <> 'read committed'
               AND fuzz.counts() IS DISTINCT FROM before THEN
                UPDATE fuzz.tally SET n = n + 1 WHERE what = 'halfwrite';
                INSERT INTO fuzz.result VALUES (i, a.fn, sql, 'HALFWRITE',
                                                format('%s -> %s', before, fuzz.counts()));
            END IF;
        END;
        UPDATE fuzz.tally SET n = n + 1 WHERE what = 'calls';
        bad := coalesce(bad, fuzz.broken());
        IF bad IS NOT NULL THEN
            UPDATE fuzz.tally SET n = n + 1 WHERE what = 'broken';
            INSERT INTO fuzz.result VALUES (i, a.fn, sql, 'BROKEN', bad);
            RETURN;                     -- one is enough to look at
        END IF;
    END LOOP;
END $$;

INSERT INTO fuzz.tally (what) VALUES ('calls'), ('ok'), ('error'), ('internal'), ('halfwrite'), ('broken'),
    ('followup_error');

/*
 * The sweep: every interval and timestamp argument of every function in
 * fuzz.api, with every extreme value, in a call whose other arguments are
 * plain (a fresh queue, a real running job and its token, '{}', 1, ...).
 * Each call and what follows it runs in a subtransaction that is rolled
 * back, so one defect cannot hide the next: a call that succeeds is
 * followed by fuzz.exercise() and fuzz.broken(); what they find is recorded
 * in fuzz.sweep_result (function, argument, value, symptom), as are
 * internal errors of the call itself.  Claim's wait takes only the negative
 * extremes here (a claim that honours a positive one blocks: the TAP test
 * tries those on its own).
 */
CREATE TABLE fuzz.sweep_result (fn text, arg text, value text, sql text, symptom text);

CREATE FUNCTION fuzz.sweep() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    a record;
    k int;
    i int;
    v text;
    args text[];
    argname text;
    sql text;
    st text;
    msg text;
    bad text;
    x0 bigint;
    qn text;
    jid bigint;
    tok bigint;
    n bigint := 0;
    no int := 0;
    extremes jsonb := jsonb_build_object(
        'interval', ARRAY[$q$'1000000 years'::interval$q$, $q$'-1000000 years'::interval$q$,
                          $q$'178000000 years'::interval$q$, $q$'-178000000 years'::interval$q$,
                          $q$'2147483647 days'::interval$q$, $q$'-2147483648 months'::interval$q$,
                          $q$'2147483647 hours'::interval$q$, $q$'10000 years'::interval$q$,
                          -- fields far out of range whose sum is small (PostgreSQL
                          -- adds them to a timestamp one by one)
                          $q$'1000000 years -359999999 days'::interval$q$,
                          $q$'-1000000 years 360000001 days'::interval$q$],
        'wait', ARRAY[$q$'-1000000 years'::interval$q$, $q$'-178000000 years'::interval$q$,
                      $q$'-2147483648 months'::interval$q$],
        'ts', ARRAY[$q$'infinity'::timestamptz$q$, $q$'-infinity'::timestamptz$q$,
                    $q$'294276-12-31 23:59:59+00'::timestamptz$q$, $q$'294276-12-31'::timestamptz$q$,
                    $q$'4713-11-24 00:00:00+00 BC'::timestamptz$q$, $q$'4713-11-24 BC'::timestamptz$q$,
                    $q$'200000-01-01'::timestamptz$q$]);
BEGIN
    FOR a IN SELECT * FROM fuzz.api f ORDER BY f.fn, cardinality(f.args) LOOP
        FOR k IN 1 .. cardinality(a.args) LOOP
            CONTINUE WHEN a.args[k] NOT IN ('interval', 'wait', 'ts');
            SELECT p.proargnames[k] INTO argname FROM pg_proc p
             WHERE p.pronamespace = 'jobq'::regnamespace AND p.proname = a.fn
               AND p.pronargs >= cardinality(a.args)
             ORDER BY p.pronargs LIMIT 1;
            FOR v IN SELECT jsonb_array_elements_text(extremes -> a.args[k]) LOOP
                no := no + 1;
                BEGIN
                    -- a fresh queue with a running job in it
                    qn := 'sweep_' || no;
                    PERFORM jobq.configure(qn);
                    PERFORM jobq.enqueue(qn, '{}', qn);
                    SELECT c.job_id, c.lease_token INTO jid, tok FROM jobq.claim(qn, 'sweeper', 1, '1 hour') c;
                    args := '{}';
                    FOR i IN 1 .. greatest(k, a.required) LOOP
                        args := args || CASE WHEN i = k THEN v ELSE CASE a.args[i]
                            WHEN 'name' THEN quote_literal(qn)
                            WHEN 'int' THEN '1'
                            WHEN 'bigint' THEN '1'
                            WHEN 'job' THEN jid::text
                            WHEN 'token' THEN tok::text
                            WHEN 'interval' THEN $q$'1 s'::interval$q$
                            WHEN 'wait' THEN $q$'0'::interval$q$
                            WHEN 'ts' THEN 'now()'
                            WHEN 'json' THEN $q$'{}'::jsonb$q$
                            WHEN 'json[]' THEN $q$ARRAY['{}'::jsonb]$q$
                            WHEN 'text[]' THEN 'NULL::text[]'
                            WHEN 'bigint[]' THEN format('ARRAY[%s::bigint]', jid)
                            WHEN 'bool' THEN 'true'
                            WHEN 'float' THEN '0.5::float8'
                            WHEN 'cron' THEN $q$'* * * * *'$q$
                            WHEN 'zone' THEN $q$'UTC'$q$
                            WHEN 'misfire' THEN $q$'run_all'$q$
                            WHEN 'status' THEN $q$'completed'$q$
                            WHEN 'cap' THEN $q$'work'$q$
                            WHEN 'role' THEN $q$'fuzz_role'::regrole$q$
                            WHEN 'proc' THEN $q$'fuzz.handler(jsonb)'::regprocedure$q$
                            WHEN 'label' THEN $q$'low'$q$
                            WHEN 'error' THEN $q$'sweep'$q$
                            END END;
                    END LOOP;
                    sql := format('SELECT count(*) FROM jobq.%I(%s)', a.fn, array_to_string(args, ', '));
                    x0 := fuzz.mark();
                    bad := NULL;
                    BEGIN
                        EXECUTE sql;
                        n := n + 1;
                        bad := coalesce(fuzz.exercise(-no, a.fn, x0), fuzz.broken());
                    EXCEPTION WHEN OTHERS THEN
                        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                        IF st LIKE 'XX%' THEN
                            bad := format('the call itself: %s %s', st, left(msg, 200));
                        END IF;
                    END;
                    -- roll it all back; what was found leaves in the message
                    RAISE EXCEPTION USING ERRCODE = 'FZ001', MESSAGE = coalesce(bad, '');
                EXCEPTION
                    WHEN SQLSTATE 'FZ001' THEN
                        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
                        IF msg <> '' THEN
                            INSERT INTO fuzz.sweep_result VALUES (a.fn, coalesce(argname, '$' || k), v, sql, msg);
                        END IF;
                    WHEN OTHERS THEN
                        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
                        INSERT INTO fuzz.sweep_result
                        VALUES (a.fn, coalesce(argname, '$' || k), v, sql,
                                format('the sweep''s own set-up failed: %s %s', st, left(msg, 200)));
                END;
            END LOOP;
        END LOOP;
    END LOOP;
    INSERT INTO fuzz.tally VALUES ('sweep calls', no), ('sweep ok', n);
    RETURN n;
END $$;
