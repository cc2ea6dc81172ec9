'use strict'
// What the library does with what jobq 0.3.0 adds (DECISIONS.md, "New SQL
// names"): a failed attempt's stack as jobq.fail's details, kept in
// jobq.attempt.details; the application worker registry (register_worker
// at start and on the timer, unregister_worker at the end), seen in
// jobq.app_workers.  And where the server lacks them (jobq_node_020, a
// database at jobq 0.2.0, made by run.sh) the library sends neither.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const os = require('os')
const path = require('path')
const { jobq, pg, PKG, libConfig, direct, via, queueName, q, poll, memLogger, proxy } = require('./helpers')

const lib = new pg.Pool({ ...libConfig, max: 10 })
const producer = new jobq.Producer(lib)
const proxies = []
const workers = []
after(async () => {
  // a failed test may leave its worker running: stop every one
  await Promise.all(workers.map((w) => w.stop({ grace: 0 })))
  for (const p of proxies) await p.close()
  await lib.end()
  await direct.end()
})

function worker (queue, opts = {}) {
  const logger = memLogger()
  const w = new jobq.Worker({ pool: lib, queue, logger, logLevel: 'debug', handleSignals: false, wait: 1, ...opts })
  w.lines = logger.lines
  workers.push(w)
  return w
}

// A gate: gate.wait() resolves once gate.open() was called.
function gate () {
  let open
  const p = new Promise((resolve) => { open = resolve })
  return { wait: () => p, open }
}

test('a failed attempt\'s stack, and its causes\', go to jobq.attempt.details (at most 16 kB, whole characters); onFinish carries the error text', async () => {
  const queue = queueName('details')
  await q("SELECT jobq.configure($1, max_retries => 1, backoff_base => '50 ms', backoff_cap => '50 ms')", [queue])
  const thrown = {}
  const finished = []
  const w = worker(queue, { concurrency: 4, hooks: { onFinish: (job, outcome, ms, info) => finished.push({ id: job.id, outcome, ...info }) } })
    .handle('nested', async function nestedHandler (job) {
      if (job.attempt > 1) return {}
      thrown[job.id] = new Error('could not charge', { cause: new TypeError('card is undefined') })
      throw thrown[job.id]
    })
    .handle('huge', async (job) => {
      if (job.attempt > 1) return {}
      thrown[job.id] = new Error('é'.repeat(20000)) // 40,000 bytes of message alone
      throw thrown[job.id]
    })
    .handle('value', async (job) => {
      if (job.attempt > 1) return {}
      const v = { code: 42n } // not even JSON
      throw v
    })
    .handle('dead', async () => { throw new jobq.Permanent('card declined') })
  const id = {}
  for (const kind of ['nested', 'huge', 'value', 'dead']) id[kind] = (await producer.enqueue(kind, {}, { queue })).jobId
  const done = w.run()
  await poll(async () => (await q(`SELECT count(*)::int AS n FROM jobq.jobs WHERE queue = $1 AND status IN ('completed', 'failed')`,
    [queue]))[0].n === 4, 30000, 'three completed on their second attempt, one dead')
  await w.stop()
  await done
  assert.ok(w.lines.some((l) => /jobq\.fail details: yes; worker registry: yes/.test(l)), w.lines.join('\n'))
  const details = async (jobId) => (await q('SELECT error, details FROM jobq.attempt WHERE job_id = $1 ORDER BY attempt', [jobId]))

  const [n] = await details(id.nested)
  assert.equal(n.error, 'Error: could not charge')
  assert.match(n.details, /^Error: could not charge\n {4}at (Object\.)?nestedHandler /)
  assert.ok(n.details.includes(path.basename(__filename)), 'the stack names this file')
  assert.equal(n.details, `${thrown[id.nested].stack}\nCaused by: ${thrown[id.nested].cause.stack}`)

  const [h] = await details(id.huge)
  const bytes = Buffer.byteLength(h.details)
  assert.ok(bytes <= 16 * 1024 && bytes >= 16 * 1024 - 1, `${bytes} bytes`)
  assert.equal(h.details, thrown[id.huge].stack.slice(0, h.details.length), 'a prefix of the stack, whole characters')
  assert.ok(h.details.endsWith('é'))

  const [v] = await details(id.value)
  assert.deepEqual(v, { error: 'thrown: { code: 42n }', details: 'thrown: { code: 42n }' })

  const [d] = await details(id.dead)
  assert.equal(d.error, 'Permanent: card declined')
  assert.match(d.details, /^Permanent: card declined\n {4}at /)

  // the hook: the error text of each failed attempt, as the attempt keeps it
  const byJob = (jobId) => finished.filter((f) => f.id === jobId)
  assert.deepEqual(byJob(id.nested).map((f) => [f.outcome, f.error]), [['retrying', 'Error: could not charge'], ['completed', null]])
  assert.equal(byJob(id.nested)[0].thrown, thrown[id.nested])
  assert.deepEqual(byJob(id.dead).map((f) => [f.outcome, f.error]), [['failed', 'Permanent: card declined']])
  assert.deepEqual(byJob(id.value).map((f) => [f.outcome, f.error]), [['retrying', 'thrown: { code: 42n }'], ['completed', null]])
  // and the log: each failure with its message, at warn (retried) or error (dead)
  assert.ok(w.lines.some((l) => l.startsWith('warn ') && l.includes(`job ${id.nested} `) && l.includes('Error: could not charge')))
  assert.ok(w.lines.some((l) => l.startsWith('error ') && l.includes(`job ${id.dead} `) && l.includes('Permanent: card declined')))
})

test('the worker registers at start (library, version, host, pid, concurrency, queues, kinds), shows its jobs in hand, refreshes its row on the timer and not per job, and unregisters at the end', async (t) => {
  const p = await proxy()
  proxies.push(p)
  const qa = queueName('reg_a')
  const qb = queueName('reg_b')
  const workerId = `reg-${via}-${process.pid}`
  const row = async () => (await q('SELECT queues, info, started_at, last_seen_at, jobs_in_hand::int, gone FROM jobq.app_workers WHERE worker_id = $1',
    [workerId]))[0]
  const held = gate()
  let started = 0
  // lease 30: the timer (renewals and the heartbeat) every 10 s
  const w = worker(qa, { pool: undefined, connection: { ...p.config, max: 8 }, queues: [qa, qb], workerId, concurrency: 2, lease: 30 })
    .handle('hold', async () => { started++; await held.wait(); return {} })
    .handle('work', async () => ({}))
  const t0 = Date.now()
  const done = w.run()
  const r1 = await poll(row, 20000, 'the worker registered')
  assert.deepEqual(r1.queues, [qa, qb])
  const version = require(path.join(PKG, 'package.json')).version
  assert.deepEqual(r1.info, {
    library: 'jobq-node', version, host: os.hostname(), pid: process.pid, concurrency: 2, queues: [qa, qb], kinds: ['hold', 'work']
  })
  assert.deepEqual([r1.jobs_in_hand, r1.gone], [0, false])

  // two jobs held: the view counts them, from the jobs' rows (no write)
  await producer.enqueueMany('hold', [{}, {}], { queue: qa })
  await poll(async () => started === 2, 20000, 'both held jobs started')
  assert.equal((await row()).jobs_in_hand, 2)
  held.open()

  // a hundred jobs: register_worker is sent at start and on timer ticks only
  await producer.enqueueMany('work', Array.from({ length: 60 }, () => ({})), { queue: qa })
  await producer.enqueueMany('work', Array.from({ length: 40 }, () => ({})), { queue: qb })
  await poll(async () => (await q(`SELECT count(*)::int AS n FROM jobq.jobs WHERE queue IN ($1, $2) AND status = 'completed'`,
    [qa, qb]))[0].n === 102, 60000, 'a hundred and two jobs completed')
  const ticks = Math.floor((Date.now() - t0) / 10000) // the most the timer can have fired
  const sent = p.count('SELECT jobq.register_worker(')
  t.diagnostic(`register_worker sent ${sent} time(s) in ${Date.now() - t0} ms, for 102 jobs`)
  assert.ok(sent >= 1 && sent <= 1 + ticks, `register_worker sent ${sent} times; at most ${1 + ticks} (start, timer)`)

  await w.stop()
  await done
  assert.equal(await row(), undefined, 'unregistered')
  assert.equal(p.count('SELECT jobq.unregister_worker('), 1)
})

test('the heartbeat refreshes last_seen_at on the renewal timer, idle or busy', async () => {
  const queue = queueName('beat')
  const workerId = `beat-${via}-${process.pid}`
  const seen = async () => (await q('SELECT last_seen_at FROM jobq.app_workers WHERE worker_id = $1', [workerId]))[0]?.last_seen_at
  const w = worker(queue, { workerId, lease: 0.6 }).handle('x', async () => ({})) // the timer every 0.2 s
  const done = w.run()
  const first = await poll(seen, 20000, 'the worker registered')
  const second = await poll(async () => { const s = await seen(); return s > first && s }, 20000, 'a heartbeat')
  await poll(async () => (await seen()) > second, 20000, 'another heartbeat')
  await w.stop()
  await done
  assert.equal(await seen(), undefined)
})

test('a heartbeat still running on the server when the worker stops does not put its row back after the unregister: the stop waits for it', async () => {
  // the heartbeat's statement held by a trigger that waits for this test's advisory lock
  await q(`CREATE OR REPLACE FUNCTION public.node_hold_refresh() RETURNS trigger LANGUAGE plpgsql AS
           $$BEGIN PERFORM pg_advisory_xact_lock_shared(4243); RETURN NULL; END$$`)
  await q('CREATE TRIGGER node_hold_refresh BEFORE UPDATE ON jobq.app_worker FOR EACH STATEMENT EXECUTE FUNCTION public.node_hold_refresh()')
  const lock = await direct.connect()
  try {
    const queue = queueName('stopbeat')
    const workerId = `stopbeat-${via}-${process.pid}`
    const rows = async () => (await q('SELECT count(*)::int AS n FROM jobq.app_worker WHERE worker_id = $1', [workerId]))[0].n
    const waiting = async () => (await q(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = 4243 AND NOT granted`))[0].n
    const w = worker(queue, { workerId, lease: 0.6 }).handle('x', async () => ({})) // the timer every 0.2 s
    const done = w.run()
    await poll(async () => (await rows()) === 1, 20000, 'the worker registered')
    await lock.query('SELECT pg_advisory_lock(4243)')
    await poll(async () => (await waiting()) === 1, 20000, 'a heartbeat waits for the lock')
    const stopped = w.stop()
    await new Promise((resolve) => setTimeout(resolve, 1500))
    await lock.query('SELECT pg_advisory_unlock(4243)')
    await stopped
    await done
    await poll(async () => (await waiting()) === 0 && (await q(`SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE query LIKE '%register_worker%' AND state = 'active' AND pid <> pg_backend_pid()`))[0].n === 0, 20000, 'no heartbeat left')
    assert.equal(await rows(), 0, 'unregistered, and not put back')
  } finally {
    await lock.query('SELECT pg_advisory_unlock_all()')
    lock.release()
    await q('DROP TRIGGER node_hold_refresh ON jobq.app_worker')
    await q('DROP FUNCTION public.node_hold_refresh()')
  }
})

test('a registration refused for the role\'s cap (54000) is logged once and tried again at each heartbeat, and goes through once the role has room', async () => {
  const queue = queueName('cap')
  const role = `jobq_node_cap_${via}`
  await q(`DO $$ BEGIN CREATE ROLE ${role} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
  await q(`ALTER ROLE ${role} SET jobq.max_app_workers = 1`)
  await q('SELECT jobq.configure($1)', [queue])
  await q('SELECT jobq.grant($1, $2, \'work\')', [queue, role])
  // the role's one place: another worker of its own, alive
  const own = new pg.Pool({ port: Number(process.env.PGPORT), user: role, max: 4 })
  own.on('error', () => {})
  const decoy = `decoy-${via}-${process.pid}`
  await own.query('SELECT jobq.register_worker($1, ARRAY[$2])', [decoy, queue])
  const rows = async () => (await q('SELECT worker_id FROM jobq.app_worker WHERE registered_by = $1::regrole ORDER BY 1',
    [role])).map((r) => r.worker_id)
  const workerId = `cap-${via}-${process.pid}`
  const refusals = (w) => w.lines.filter((l) => /too many workers registered by role/.test(l)).length
  const w = worker(queue, { pool: own, workerId, lease: 0.6 }).handle('x', async () => ({})) // the timer every 0.2 s
  try {
    const done = w.run()
    await poll(async () => refusals(w) > 0, 20000, 'the refusal logged')
    await new Promise((resolve) => setTimeout(resolve, 1000)) // five heartbeats or so, all refused
    assert.deepEqual(await rows(), [decoy])
    // the other worker goes quiet: a later heartbeat takes its place
    await q('UPDATE jobq.app_worker SET last_seen_at = now() - interval \'1 hour\' WHERE worker_id = $1', [decoy])
    await poll(async () => (await rows()).includes(workerId), 20000, 'the worker registered once there was room')
    assert.deepEqual(await rows(), [workerId])
    assert.equal(refusals(w), 1, 'the refusal logged once')
    assert.ok(w.lines.some((l) => l === `info ${workerId}: registered in jobq.app_workers`), w.lines.join('\n'))
    await w.stop()
    await done
    assert.deepEqual(await rows(), [])
  } finally {
    await own.end()
  }
})

test('on a server without them (jobq 0.2.0) the worker sends no details and does not register; its failures are recorded as before', async () => {
  const db = 'jobq_node_020'
  const check = new pg.Pool({ database: db, max: 2 })
  const old = new pg.Pool({ ...libConfig, database: db, max: 4 })
  assert.equal((await check.query("SELECT extversion FROM pg_extension WHERE extname = 'jobq'")).rows[0].extversion, '0.2.0')
  const queue = queueName('old')
  const w = worker(queue, { pool: old })
    .handle('boom', async (job) => { if (job.attempt === 1) throw new Error('boom'); return { attempt: job.attempt } })
  const { jobId } = await new jobq.Producer(old).enqueue('boom', {}, { queue, maxRetries: 1 })
  const done = w.run()
  await poll(async () => (await check.query('SELECT status FROM jobq.jobs WHERE job_id = $1', [jobId])).rows[0].status === 'completed',
    30000, 'the job completed on its second attempt')
  await w.stop()
  await done
  assert.ok(w.lines.some((l) => /jobq\.fail details: no; worker registry: no/.test(l)), w.lines.join('\n'))
  const bad = w.lines.filter((l) => /^(warn|error) /.test(l) && !/failed, to be retried: Error: boom$/.test(l))
  assert.deepEqual(bad, [], 'nothing refused')
  assert.deepEqual((await check.query('SELECT error FROM jobq.attempt WHERE job_id = $1', [jobId])).rows, [{ error: 'Error: boom' }])
  await old.end()
  await check.end()
})
