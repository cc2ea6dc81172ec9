'use strict'
// The server restarted under running workers (restart-worker.js, the
// README's worker, run from the project the README's commands installed):
// pg_ctl restart -m fast, then -m immediate, while a producer enqueues a
// steady stream of jobs.  Nothing lost, nothing doubled, the workers go on
// (and heartbeat in the worker registry).
//
// What "at least once" allows, and how it is counted: a job's handler may
// run more than once, but only when an attempt of it ended without its
// completion (the handler failed, its ledger write among others, while the
// server was away, or its lease expired): each such attempt spends a
// retry.  So for every job:
//   * it exists once (the producer sends each job again with the same
//     idempotency key until an enqueue is answered) and ends completed;
//   * exactly one attempt of it is reported completed, by one worker;
//   * its handler ran (node_restart_ledger.runs) at least once and at most
//     retry_count + 1 + (claims the immediate restart took back) times,
//     exactly once when no retry was spent and no claim was taken back.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn, execFile } = require('child_process')
const path = require('path')
const { jobq, pg, libConfig, direct, queueName, q, poll, sleep } = require('./helpers')

const producerPool = new pg.Pool({ ...libConfig, max: 2 })
const producer = new jobq.Producer(producerPool, { logger: { warn: () => {} } })
const children = []
before(() => q(`CREATE TABLE IF NOT EXISTS node_restart_ledger (job_id bigint PRIMARY KEY, runs integer NOT NULL)`))
after(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL') // left by a failed test
  await producerPool.end()
  await direct.end()
})

// Start restart-worker.js on queue; resolve to { child, out(), exited }.
function startWorker (queue, workerId, pool) {
  const child = spawn(process.execPath, [path.join(__dirname, 'restart-worker.js')], {
    env: { ...process.env, QUEUE: queue, WORKER_ID: workerId, POOL: pool },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  children.push(child)
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d) => { stdout += d })
  child.stderr.on('data', (d) => { stderr += d })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  return { child, workerId, stdout: () => stdout, stderr: () => stderr, exited }
}

// pg_ctl restart -m mode, through run.sh's script.
function restart (mode) {
  return new Promise((resolve, reject) => {
    execFile(process.env.JOBQ_RESTART, [mode], { timeout: 180000 }, (e, stdout, stderr) =>
      e ? reject(new Error(`restart -m ${mode}: ${e.message}\n${stdout}${stderr}`)) : resolve())
  })
}

// A query that may meet the server away: null then.
async function tryQ (sql, params) {
  try {
    return await q(sql, params)
  } catch (e) {
    return null
  }
}

const completedIn = async (queue) =>
  (await tryQ("SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status = 'completed'", [queue]))?.[0].n ?? 0

test('a server restart (fast, then immediate) under two running workers: nothing lost, nothing doubled, the workers go on', {
  skip: process.env.JOBQ_RESTART ? false : 'JOBQ_RESTART (run.sh) not set'
}, async (t) => {
  const queue = queueName('restart')
  await q("SELECT jobq.configure($1, max_retries => 25, backoff_base => '100 ms', backoff_cap => '1 s')", [queue])
  if (!process.env.JOBQ_APP) t.diagnostic('JOBQ_APP unset: the workers load the package under test, not the README-installed project')
  const workers = [
    startWorker(queue, `restart-given-${process.pid}`, 'given'),
    startWorker(queue, `restart-own-${process.pid}`, 'own')
  ]
  for (const w of workers) {
    await poll(() => / queues /.test(w.stderr()), 30000, `${w.workerId} started`)
      .catch((e) => { throw new Error(`${e.message}; its output:\n${w.stderr()}`) })
  }

  // the steady stream: a job every 25 ms; one the server did not answer is
  // sent again with the same key (created false if the first one went in)
  let sent = 0
  let producing = true
  let enqueueErrors = 0
  const stream = (async () => {
    while (producing) {
      const i = sent
      try {
        await producer.enqueue('work', { i, ms: 30 + (i * 37) % 120 }, { queue, idempotencyKey: `${queue}-${i}` })
        sent++
        await sleep(25)
      } catch (e) {
        enqueueErrors++
        await sleep(200)
      }
    }
  })()

  const progress = async (what, more) => {
    const from = await completedIn(queue)
    await poll(async () => (await completedIn(queue)) >= from + more, 120000, what)
  }
  await progress('30 jobs completed before the restarts', 30)
  const t0 = Date.now()
  await restart('fast')
  t.diagnostic(`pg_ctl restart -m fast took ${Date.now() - t0} ms`)
  await progress('30 more jobs completed after restart -m fast', 30)
  const t1 = Date.now()
  await restart('immediate')
  t.diagnostic(`pg_ctl restart -m immediate took ${Date.now() - t1} ms`)
  const backAt = (await poll(() => tryQ('SELECT clock_timestamp() AS t'), 60000, 'the server back'))[0].t
  await progress('30 more jobs completed after restart -m immediate', 30)
  producing = false
  await stream
  await poll(async () => (await tryQ(`SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status <> 'completed'`, [queue]))?.[0].n === 0,
    180000, 'every job completed')

  // the workers go on: both alive, both saw the server go and come back,
  // and new jobs are done
  for (const w of workers) {
    assert.equal(w.child.exitCode, null, `${w.workerId} still runs; its log:\n${w.stderr()}`)
    assert.match(w.stderr(), /the database cannot be reached|an idle database connection was lost/, `${w.workerId} saw the outage`)
    assert.match(w.stderr(), /the database answers again|an idle database connection was lost/, `${w.workerId} saw the server back`)
  }
  // and their rows in the worker registry: heartbeats after the restarts
  await poll(async () => (await q(`SELECT count(*)::int AS n FROM jobq.app_workers
                                    WHERE worker_id = ANY ($1) AND last_seen_at > $2 AND NOT gone`,
  [workers.map((w) => w.workerId), backAt]))[0].n === 2, 60000, 'both workers\' heartbeats after the restarts')
  const later = await producer.enqueueMany('work', Array.from({ length: 20 }, () => ({ ms: 10 })), { queue })
  await poll(async () => (await q(`SELECT count(*)::int AS n FROM jobq.job WHERE job_id = ANY ($1) AND status = 'completed'`,
    [later.map((j) => j.jobId)]))[0].n === 20, 60000, 'the jobs enqueued after the restarts completed')

  // the counts
  const jobs = await q(`SELECT j.job_id::text AS id, j.status, j.retry_count, coalesce(l.runs, 0) AS runs,
                               (SELECT string_agg(a.error, ' | ' ORDER BY a.attempt) FROM jobq.attempt a WHERE a.job_id = j.job_id) AS errors
                          FROM jobq.job j LEFT JOIN node_restart_ledger l USING (job_id)
                         WHERE j.queue = $1`, [queue])
  assert.equal(jobs.length, sent + 20, `${sent} + 20 jobs sent, each once`)
  const keys = await q('SELECT count(DISTINCT idempotency_key)::int AS n FROM jobq.job WHERE queue = $1 AND idempotency_key IS NOT NULL', [queue])
  assert.equal(keys[0].n, sent)
  const finishes = new Map() // job id -> [outcome@worker]
  for (const w of workers) {
    for (const m of w.stdout().matchAll(/^finish (\d+) (\S+) (\d+)$/gm)) {
      if (!finishes.has(m[1])) finishes.set(m[1], [])
      finishes.get(m[1]).push(`${m[2]}@${w.workerId}`)
    }
  }
  const bad = []
  for (const j of jobs) {
    const outcomes = finishes.get(j.id) ?? []
    const completions = outcomes.filter((o) => o.startsWith('completed@')).length
    // a claim the immediate restart took back (jobq.async_claim, docs/security.md "What
    // jobq guarantees"): the job is pending again with no retry spent, its
    // worker's token is refused (outcome lost), and it runs once more.  The
    // lost attempt's handler may or may not have counted its run: its ledger
    // write may have died with the server.  With no retry spent and no claim
    // lost, the handler ran exactly once.
    const lost = outcomes.filter((o) => o.startsWith('lost@')).length
    if (j.status !== 'completed' || completions !== 1 || j.runs < 1 || j.runs > j.retry_count + 1 + lost) {
      bad.push({ ...j, outcomes })
    }
  }
  assert.deepEqual(bad, [], 'every job completed once, its handler run once per attempt at most')
  const again = jobs.filter((j) => j.retry_count > 0)
  t.diagnostic(`${jobs.length} jobs (${sent} from the stream, ${enqueueErrors} enqueue errors sent again), ` +
    `${jobs.reduce((a, j) => a + j.runs, 0)} handler runs; ${again.length} job(s) spent a retry`)
  for (const j of again.slice(0, 10)) t.diagnostic(`  job ${j.id}: ${j.runs} run(s), retry_count ${j.retry_count}: ${j.errors}`)
  const inDoubt = workers.reduce((a, w) => a + (w.stderr().match(/had committed before the connection was lost/g) ?? []).length, 0)
  t.diagnostic(`completions found committed after their connection died: ${inDoubt}`)

  // and they stop as usual, leaving the registry
  for (const w of workers) w.child.kill('SIGTERM')
  for (const w of workers) {
    const timer = setTimeout(() => w.child.kill('SIGKILL'), 30000)
    const { code } = await w.exited
    clearTimeout(timer)
    assert.equal(code, 0, `${w.workerId} exit status; its log:\n${w.stderr()}`)
  }
  assert.deepEqual(await q('SELECT worker_id FROM jobq.app_workers WHERE worker_id = ANY ($1)', [workers.map((w) => w.workerId)]), [])
})
