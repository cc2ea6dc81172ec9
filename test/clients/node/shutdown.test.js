'use strict'
// Graceful shutdown of a worker process (fixture-worker.js): SIGTERM
// mid-batch finishes or hands back every job (none lost, none run twice,
// no retry spent); a claim sleeping in its wait is cancelled at once; a
// second signal hands back at once.

const { test, before, after } = require('node:test')
const assert = require('node:assert/strict')
const { spawn } = require('child_process')
const path = require('path')
const { jobq, pg, libConfig, direct, queueName, q, poll, ledgerTable, ledgerStart, sleep } = require('./helpers')

const producer = new jobq.Producer(new pg.Pool(libConfig))
before(ledgerTable)
const children = []
const inProcess = []
after(async () => {
  for (const c of children) c.kill('SIGKILL') // left by a failed test
  await Promise.all(inProcess.map((w) => w.stop({ grace: 0 })))
  await producer.db.end()
  await direct.end()
})

// Start fixture-worker.js on queue; resolve to { child, log(), exited }.
function startWorker (queue, env = {}) {
  const child = spawn(process.execPath, [path.join(__dirname, 'fixture-worker.js')], {
    env: { ...process.env, QUEUE: queue, ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  children.push(child)
  let out = ''
  child.stdout.on('data', (d) => { out += d })
  child.stderr.on('data', (d) => { out += d })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, at: Date.now() })))
  return { child, log: () => out, exited }
}

// Wait for the process to exit, at most ms; kill it after that.
async function exitOf (w, ms) {
  const t = setTimeout(() => w.child.kill('SIGKILL'), ms)
  const r = await w.exited
  clearTimeout(t)
  return r
}

const now = async () => (await q('SELECT clock_timestamp() AS t'))[0].t

test('SIGTERM mid-batch: running jobs finish within the grace period, the rest are handed back; none lost or doubled', async () => {
  const queue = queueName('term')
  // 12 jobs, every third one ten minutes long (far beyond the grace
  // period: an exit at all shows they were handed back, however slow the
  // machine); max_retries 0, so a hand-back that spent a retry would
  // dead-letter it
  const LONG = 600000
  const ms = Array.from({ length: 12 }, (_, i) => (i % 3 === 0 ? LONG : 300))
  const jobs = await producer.enqueueMany('work', ms.map((m) => ({ ms: m })), { queue, maxRetries: 0 })
  // a grace of 5 s: the 300 ms jobs running at the signal finish in it
  const w = startWorker(queue, { CONCURRENCY: '4', LEASE: '2', GRACE: '5' })
  await poll(async () => (await q('SELECT count(*)::int AS n FROM node_ledger WHERE queue = $1', [queue]))[0].n >= 6,
    30000, 'six runs started')
  const running = (await q("SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status = 'running'", [queue]))[0].n
  w.child.kill('SIGTERM')
  // once the worker says it stopped claiming, nothing may be claimed
  await poll(() => /no more claims/.test(w.log()), 30000, 'the worker stopped claiming')
  const sigAt = await now()
  const { code } = await exitOf(w, 120000)
  assert.equal(code, 1, `exit status (1: jobs were handed back); log:\n${w.log()}`)
  assert.ok(running >= 2, `${running} jobs were running at SIGTERM`)

  // right after the exit: nothing left running for the reaper, nothing
  // claimed after the worker stopped claiming, nothing spent
  const after1 = await q(`SELECT job_id::text AS id, status, retry_count, claimed_at FROM jobq.jobs
                           WHERE queue = $1 ORDER BY job_id`, [queue])
  assert.deepEqual(after1.filter((j) => j.status === 'running'), [], 'no lease left to expire')
  assert.ok(after1.every((j) => j.retry_count === 0), 'no retry spent')
  assert.ok(after1.every((j) => j.claimed_at === null || j.claimed_at <= sigAt), 'nothing claimed after the stop')
  const handedBack = after1.filter((j) => j.status === 'pending' && ms[jobs.findIndex((x) => x.jobId === j.id)] === LONG)
  assert.ok(handedBack.length >= 1, 'a long job was handed back')
  assert.match(w.log(), /handed back \d+ job\(s\)/)
  // every run that started before the signal and was short finished
  const unfinishedShort = await q(`SELECT l.job_id FROM node_ledger l JOIN jobq.jobs j USING (job_id)
                                    WHERE l.queue = $1 AND l.finished_at IS NULL
                                      AND (j.payload->>'ms')::int = 300`, [queue])
  assert.deepEqual(unfinishedShort, [], 'short jobs running at SIGTERM finished')

  // a second worker (short jobs only this time) finishes the rest
  await q("UPDATE jobq.job SET payload = jsonb_set(payload, '{ms}', '50') WHERE queue = $1 AND status = 'pending'", [queue])
  const w2 = new jobq.Worker({ connection: libConfig, queue, handleSignals: false, logLevel: 'silent', wait: 1 })
    .handle('work', async (job) => {
      const end = await ledgerStart(job, 'second')
      await end()
    })
  inProcess.push(w2)
  const done = w2.run()
  await poll(async () => (await q("SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status <> 'completed'", [queue]))[0].n === 0,
    30000, 'all twelve completed')
  await w2.stop()
  await done
  const final = await q(`SELECT j.job_id, j.retry_count,
                                (SELECT count(*)::int FROM node_ledger l WHERE l.job_id = j.job_id AND l.finished_at IS NOT NULL) AS finished_runs
                           FROM jobq.jobs j WHERE j.queue = $1`, [queue])
  assert.equal(final.length, 12)
  assert.deepEqual(final.filter((j) => j.finished_runs !== 1 || j.retry_count !== 0), [],
    'every job ran to its end exactly once, no retry spent')
  assert.equal((await q('SELECT count(*)::int AS n FROM jobq.dead_letter WHERE queue = $1', [queue]))[0].n, 0)
})

test('SIGINT while a claim sleeps in its wait: the claim is cancelled and the worker exits at once, claiming nothing', async () => {
  const queue = queueName('idle_int')
  const w = startWorker(queue, { WAIT: '3600' }) // an exit at all shows the claim was cancelled
  await poll(() => /queues /.test(w.log()), 20000, 'the worker started')
  // its claim is sleeping in the server
  await poll(async () => (await q(`SELECT count(*)::int AS n FROM pg_stat_activity
                                    WHERE query LIKE '%jobq.claim(%' AND state = 'active' AND pid <> pg_backend_pid()`))[0].n > 0,
  20000, 'a claim waiting')
  await sleep(300)
  w.child.kill('SIGINT')
  const { code } = await exitOf(w, 120000)
  assert.equal(code, 0, w.log())
  const { jobId } = await producer.enqueue('ping', {}, { queue })
  await sleep(500)
  assert.deepEqual(await q('SELECT status, claimed_at FROM jobq.jobs WHERE job_id = $1', [jobId]),
    [{ status: 'pending', claimed_at: null }])
})

test('a second SIGTERM hands the running job back at once (no retry spent, not dead-lettered)', async () => {
  const queue = queueName('term2')
  // an hour's job, an hour's grace: an exit at all shows the hand-back
  const { jobId } = await producer.enqueue('work', { ms: 3600000 }, { queue, maxRetries: 0 })
  const w = startWorker(queue, { GRACE: '3600' })
  await poll(async () => (await q('SELECT count(*)::int AS n FROM node_ledger WHERE job_id = $1', [jobId]))[0].n === 1,
    20000, 'the job started')
  w.child.kill('SIGTERM')
  await poll(() => /no more claims/.test(w.log()), 10000, 'the first signal seen')
  w.child.kill('SIGTERM')
  const { code } = await exitOf(w, 120000)
  assert.equal(code, 1, w.log())
  const s = await q('SELECT status, retry_count FROM jobq.jobs WHERE job_id = $1', [jobId])
  assert.deepEqual(s, [{ status: 'pending', retry_count: 0 }])
})
