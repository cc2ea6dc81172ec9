'use strict'
// The worker: dispatch by kind, the concurrency limit, blocking claims,
// lease renewal, checkpoints, the outcomes of errors, timeouts, hooks.

const { test, after, before } = require('node:test')
const assert = require('node:assert/strict')
const path = require('path')
const {
  jobq, pg, PKG, libConfig, direct, queueName, q, poll, sleep, memLogger, ledgerTable, ledgerStart, maxOverlap
} = require('./helpers')

const producer = new jobq.Producer(new pg.Pool(libConfig))
before(ledgerTable)
const workers = []
after(async () => {
  // a failed test may leave its worker running: stop every one
  await Promise.all(workers.map((w) => w.stop({ grace: 0 })))
  await producer.db.end()
  await direct.end()
})

// A worker on queue with a quiet logger; opts as for jobq.Worker.
function worker (queue, opts = {}) {
  const logger = memLogger()
  const w = new jobq.Worker({ connection: libConfig, queue, logger, logLevel: 'debug', handleSignals: false, wait: 1, ...opts })
  w.lines = logger.lines
  workers.push(w)
  return w
}

// Wait until queue has no pending or running job of the kinds given (all when none).
function drained (queue, kinds = null, ms = 60000) {
  return poll(async () => (await q(`SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1
                                      AND status IN ('pending', 'running') AND ($2::text[] IS NULL OR kind = ANY ($2))`,
  [queue, kinds]))[0].n === 0, ms, `queue ${queue} drained`)
}

const statusOf = async (id) => (await q(`SELECT status, retry_count, last_error, result, checkpoint
                                          FROM jobq.jobs WHERE job_id = $1`, [id]))[0]

test('a handler registry dispatches three kinds through a pg.Pool; a kind without a handler is never claimed', async () => {
  const queue = queueName('dispatch')
  const pool = new pg.Pool({ ...libConfig, max: 6 })
  const w = worker(queue, { pool, concurrency: 4 })
    .handle('email.send', async (job) => ({ by: 'email', to: job.payload.to }))
    .handle('image.resize', (job) => ({ by: 'image', w: job.payload.w })) // a plain function too
    .handle('report.build', async (job) => { await sleep(20); return { by: 'report', n: job.payload.n } })
  assert.deepEqual(w.kinds, ['email.send', 'image.resize', 'report.build'])
  await producer.enqueueMany('email.send', [1, 2, 3, 4, 5].map((i) => ({ to: `u${i}` })), { queue })
  await producer.enqueueMany('image.resize', [1, 2, 3].map((i) => ({ w: i })), { queue })
  await producer.enqueueMany('report.build', [1, 2].map((n) => ({ n })), { queue })
  const stray = await producer.enqueue('video.transcode', {}, { queue })
  const done = w.run()
  await drained(queue, ['email.send', 'image.resize', 'report.build'])
  await w.stop()
  assert.deepEqual(await done, { handedBack: 0 })
  const rows = await q(`SELECT kind, status, result FROM jobq.jobs WHERE queue = $1 AND kind <> 'video.transcode'`, [queue])
  assert.equal(rows.length, 10)
  for (const r of rows) {
    assert.equal(r.status, 'completed')
    assert.equal(r.result.by, r.kind.split('.')[0] === 'email' ? 'email' : r.kind.startsWith('image') ? 'image' : 'report')
  }
  assert.deepEqual(rows.filter((r) => r.kind === 'email.send').map((r) => r.result.to).sort(), ['u1', 'u2', 'u3', 'u4', 'u5'])
  const s = await q('SELECT status, claimed_at FROM jobq.jobs WHERE job_id = $1', [stray.jobId])
  assert.deepEqual(s, [{ status: 'pending', claimed_at: null }])
  assert.equal(pool.ended, false, 'a pool given is left open')
  await pool.end()
})

test('the concurrency limit holds (ledger and claim/finish times) and is reached', async () => {
  const queue = queueName('conc')
  // prefetch 0: the claim-to-finish check below holds only without claiming ahead
  const w = worker(queue, { concurrency: 3, batch: 10, prefetch: 0 })
    .handle('work', async (job) => {
      const end = await ledgerStart(job)
      await sleep(80 + (Number(job.payload.i) % 4) * 20)
      await end()
      return {}
    })
  await producer.enqueueMany('work', Array.from({ length: 24 }, (_, i) => ({ i })), { queue })
  const done = w.run()
  await drained(queue)
  await w.stop()
  await done
  assert.equal((await q("SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status = 'completed'", [queue]))[0].n, 24)
  assert.equal(await maxOverlap(queue), 3, 'handler runs at once (ledger)')
  // the slot is held from claim to complete: the server's own times
  const r = await q(`SELECT max((SELECT count(*) FROM jobq.jobs b
                                  WHERE b.queue = a.queue AND b.claimed_at <= a.claimed_at
                                    AND b.finished_at > a.claimed_at))::int AS n
                       FROM jobq.jobs a WHERE a.queue = $1`, [queue])
  assert.ok(r[0].n <= 3, `at most 3 jobs between claim and finish, saw ${r[0].n}`)
})

test('prefetch 2, concurrency 1: two jobs claimed ahead wait while the first runs, their leases (1 s) renewed, then run in claim order', async () => {
  const queue = queueName('ahead')
  let go
  const gate = new Promise((resolve) => { go = resolve })
  const w = worker(queue, { concurrency: 1, prefetch: 2, lease: 1 })
    .handle('step', async (job) => {
      const end = await ledgerStart(job)
      if (job.payload.n === 1) await gate
      await end()
      return {}
    })
  const ids = []
  for (const n of [1, 2, 3]) ids.push((await producer.enqueue('step', { n }, { queue, priority: 10 - n })).jobId)
  const done = w.run()
  await poll(async () => (await q("SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status = 'running'", [queue]))[0].n === 3,
    30000, 'three jobs claimed')
  await sleep(2500) // past the lease of the waiting ones
  assert.equal((await q('SELECT count(*)::int AS n FROM node_ledger WHERE queue = $1', [queue]))[0].n, 1)
  assert.equal((await q(`SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status = 'running'
                           AND lease_expires_at > now()`, [queue]))[0].n, 3)
  go()
  await drained(queue)
  await w.stop()
  await done
  for (const id of ids) assert.deepEqual([(await statusOf(id)).status, (await statusOf(id)).retry_count], ['completed', 0])
  assert.deepEqual((await q('SELECT job_id FROM node_ledger WHERE queue = $1 ORDER BY started_at', [queue])).map((r) => r.job_id), ids)
  assert.equal(await maxOverlap(queue), 1)
})

test('at stop() the jobs claimed ahead go back at once (pending, no retry spent) while the running one finishes; handedBack does not count them', async () => {
  const queue = queueName('ahead_stop')
  let stopped = null
  let back = null
  const w = worker(queue, { concurrency: 1, prefetch: 3, shutdownGrace: 20 })
    .handle('step', async (job) => {
      if (job.payload.n === 1) {
        await poll(async () => (await q("SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status = 'running'", [queue]))[0].n === 4,
          30000, 'four jobs claimed')
        stopped = w.stop()
        back = await poll(async () => (await q(`SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1
                                                  AND status = 'pending' AND retry_count = 0`, [queue]))[0].n === 3,
        20000, 'the waiting jobs handed back').catch(() => false)
      }
      return { n: job.payload.n }
    })
  const ids = []
  for (const n of [1, 2, 3, 4]) ids.push((await producer.enqueue('step', { n }, { queue, priority: 10 - n })).jobId)
  const r = await w.run()
  await stopped
  assert.equal(back, true, 'the waiting jobs were handed back while the first ran')
  assert.deepEqual(r, { handedBack: 0 })
  assert.equal((await statusOf(ids[0])).status, 'completed')
  for (const id of ids.slice(1)) assert.deepEqual([(await statusOf(id)).status, (await statusOf(id)).retry_count], ['pending', 0])
})

test('by default the worker claims ahead what its handlers finish during a claim round trip: >0 for no-op jobs, 0 for 3 s jobs', async () => {
  // 3 s jobs on two slots: one finishes every 1.5 s, so a claim would have
  // to take 0.15 s for one job to be worth claiming ahead
  for (const [kind, n, ms, concurrency] of [['noop', 600, 0, 4], ['slow', 4, 3000, 2]]) {
    const queue = queueName(`measured_${kind}`)
    const w = worker(queue, { concurrency })
      .handle(kind, async (job) => {
        const end = await ledgerStart(job)
        if (ms) await sleep(ms)
        await end()
        return {}
      })
    await producer.enqueueMany(kind, Array.from({ length: n }, () => ({})), { queue })
    const seen = new Set()
    const timer = setInterval(() => seen.add(w.ahead), 5)
    const done = w.run()
    await drained(queue)
    clearInterval(timer)
    await w.stop()
    await done
    assert.ok(await maxOverlap(queue) <= concurrency)
    if (!ms) {
      assert.ok(Math.max(...seen) > 0, `no-op jobs were claimed ahead (saw ${[...seen]})`)
      continue
    }
    assert.deepEqual([...seen], [0])
    // no job claimed while every slot ran a handler (the server's clock throughout)
    const r = await q(`SELECT count(*)::int AS n FROM jobq.jobs j WHERE j.queue = $1
                          AND (SELECT count(*) FROM node_ledger l WHERE l.queue = j.queue AND l.job_id <> j.job_id
                                  AND l.started_at <= j.claimed_at AND l.finished_at > j.claimed_at) >= $2`, [queue, concurrency])
    assert.equal(r[0].n, 0, `${ms} ms jobs were claimed ahead`)
  }
})

test('the measured number claimed ahead (Pace, no database): 0 for jobs far longer than a claim however slow the link, up to the slots for jobs far shorter', () => {
  const { Pace } = require(path.join(PKG, 'lib', 'worker'))
  // claims of 0.2 s, jobs of 10 s: right after two finish the decaying rate
  // alone said 2 a second, one job ahead
  const long = new Pace()
  for (let i = 0; i < 3; i++) long.claimed(0.2, true)
  long.finished(10)
  long.finished(10)
  assert.equal(long.ahead(2), 0)
  const short = new Pace()
  for (let i = 0; i < 3; i++) short.claimed(0.2, true)
  for (let i = 0; i < 10; i++) short.finished(0.001)
  assert.equal(short.ahead(2), 2)
})

test('an idle worker sleeps in its claim: no busy loop, and a new job is picked up by the claim waiting for it', async () => {
  const queue = queueName('idle')
  const pool = new pg.Pool({ ...libConfig, max: 4, application_name: queue }) // its sessions, in pg_stat_activity
  let connects = 0
  pool.on('acquire', () => connects++)
  let claimed = 0
  const w = worker(queue, { pool, wait: 2, hooks: { onClaim: () => claimed++ } })
    .handle('ping', async () => ({ pong: true }))
  const done = w.run()
  // from the start line on (the worker learns what the server offers first)
  await poll(() => w.lines.some((l) => / queues /.test(l)), 20000, 'the worker started')
  const t0 = Date.now()
  connects = 0
  await sleep(3000)
  // an empty claim without wait, then claims sleeping 2 s each (and the
  // timer's heartbeat): however slow the machine, no more than that
  const idleMs = Date.now() - t0
  assert.ok(connects <= 2 + 2 * Math.ceil(idleMs / 2000), `${connects} pool checkouts in ${idleMs} ms idle`)
  await w.stop()
  await done

  // a claim that sleeps an hour: the job is claimed by it (the claim began
  // before the job was enqueued and took it within its hour: the worker's
  // one claim loop starts no other claim meanwhile)
  const w2 = worker(queue, { pool, wait: 3600, hooks: { onClaim: () => claimed++ } })
    .handle('ping', async () => ({ pong: true }))
  claimed = 0
  const done2 = w2.run()
  const waiting = `SELECT pid, query_start::text AS query_start_text, state_change, wait_event FROM pg_stat_activity
                    WHERE query LIKE '%jobq.claim(%' AND state = 'active' AND application_name = $1`
  let seen = []
  const [sleeper] = await poll(async () => {
    seen = await q(waiting, [queue])
    return seen.length === 1 && seen
  }, 20000, 'a claim sleeping in the server').catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(seen)}\n${w2.lines.join('\n')}`) })
  const { jobId } = await producer.enqueue('ping', {}, { queue })
  await poll(async () => (await statusOf(jobId)).status === 'completed', 60000, 'ping completed')
  // compared in the server, to the microsecond (a JavaScript Date keeps
  // milliseconds: two times within one millisecond would compare equal)
  const [j] = await q(`SELECT $2::timestamptz < created_at AS slept_first,
                              claimed_at < $2::timestamptz + interval '1 hour' AS within_wait,
                              $2::timestamptz AS query_start, created_at, claimed_at
                         FROM jobq.jobs WHERE job_id = $1`, [jobId, sleeper.query_start_text])
  assert.ok(j.slept_first, `the claim was sleeping before the job was enqueued: ${JSON.stringify(j)}`)
  assert.ok(j.within_wait, `and took it within its wait: ${JSON.stringify(j)}`)
  assert.equal(claimed, 1)
  await w2.stop()
  await done2
  await pool.end()
})

test('a handler slower than its lease keeps the job (renewal); without renewal the lease is reaped', async () => {
  const queue = queueName('lease')
  // the control: a claim with a 1 s lease and no renewal loses the job
  await producer.enqueue('slow', {}, { queue, idempotencyKey: `${queue}-control`, maxRetries: 3 })
  const [c] = await q("SELECT job_id, lease_token FROM jobq.claim($1, batch => 1, lease => '1 s')", [queue])
  await poll(async () => (await statusOf(c.job_id)).status !== 'running', 20000, 'the control job reaped')
  assert.equal((await q('SELECT jobq.complete($1, $2) AS ok', [c.job_id, c.lease_token]))[0].ok, false)
  await q('SELECT jobq.cancel($1)', [c.job_id])

  let renewals = 0
  const w = worker(queue, { lease: 1, hooks: { onRenew: () => renewals++ } })
    .handle('slow', async (job) => {
      await sleep(3500)
      return { slept: 3.5, attempt: job.attempt }
    })
  const { jobId } = await producer.enqueue('slow', {}, { queue, maxRetries: 3 })
  const done = w.run()
  await poll(async () => (await statusOf(jobId)).status === 'completed', 30000, 'the slow job completed')
  await w.stop()
  await done
  const s = await statusOf(jobId)
  assert.equal(s.retry_count, 0)
  assert.deepEqual(s.result, { slept: 3.5, attempt: 1 })
  assert.equal((await q('SELECT count(*)::int AS n FROM jobq.attempt WHERE job_id = $1', [jobId]))[0].n, 0,
    'no earlier attempt (no reaped lease)')
  assert.ok(renewals >= 5, `${renewals} renewals`)
  assert.deepEqual(w.lines.filter((l) => /lease lost/.test(l)), [])
})

test('outcomes: Permanent to the dead letter, thrown errors retried with backoff, RetryIn, Snooze', async () => {
  const queue = queueName('outcomes')
  await q("SELECT jobq.configure($1, max_retries => 2, backoff_base => '50 ms', backoff_cap => '100 ms')", [queue])
  const runs = {}
  const w = worker(queue, { concurrency: 4 })
    .handle('permanent', async () => { throw new jobq.Permanent('card declined') })
    .handle('flaky', async (job) => { if (job.attempt < 3) throw new Error(`503 on attempt ${job.attempt}`); return { ok: job.attempt } })
    .handle('broken', async () => { throw new TypeError('always') })
    .handle('retry_in', async (job) => {
      (runs[job.id] ??= []).push(Date.now())
      if (job.attempt === 1) throw new jobq.RetryIn(1.5, 'rate limited until reset')
      return { ok: job.attempt }
    })
    .handle('snooze', async (job) => {
      (runs[job.id] ??= []).push(Date.now())
      if (runs[job.id].length < 3) throw new jobq.Snooze(0.2)
      return { runs: runs[job.id].length, retryCount: job.retryCount }
    })
  const ids = {}
  for (const kind of ['permanent', 'flaky', 'broken', 'retry_in', 'snooze']) ids[kind] = (await producer.enqueue(kind, {}, { queue })).jobId
  const done = w.run()
  await drained(queue, null, 60000)
  await w.stop()
  await done

  const p = await statusOf(ids.permanent)
  assert.deepEqual([p.status, p.retry_count, p.last_error], ['failed', 0, 'Permanent: card declined'])
  assert.equal((await q('SELECT count(*)::int AS n FROM jobq.dead_letter WHERE job_id = $1', [ids.permanent]))[0].n, 1)
  const f = await statusOf(ids.flaky)
  assert.deepEqual([f.status, f.retry_count, f.result], ['completed', 2, { ok: 3 }])
  const b = await statusOf(ids.broken)
  assert.deepEqual([b.status, b.retry_count, b.last_error], ['failed', 2, 'TypeError: always'])
  const r = await statusOf(ids.retry_in)
  assert.deepEqual([r.status, r.retry_count, r.result], ['completed', 1, { ok: 2 }])
  const gap = runs[ids.retry_in][1] - runs[ids.retry_in][0]
  assert.ok(gap >= 1300, `RetryIn(1.5) ran again after ${gap} ms`)
  const s = await statusOf(ids.snooze)
  assert.deepEqual([s.status, s.retry_count, s.result], ['completed', 0, { runs: 3, retryCount: 0 }])
  // every failure is logged with its message: at warn while it will be
  // retried, at error when it is dead
  const line = (level, id, text) => w.lines.some((l) => l.startsWith(level + ' ') && l.includes(`job ${id} `) && l.includes(text))
  assert.ok(line('warn', ids.flaky, 'Error: 503 on attempt 1'), w.lines.join('\n'))
  assert.ok(line('warn', ids.flaky, 'Error: 503 on attempt 2'))
  assert.ok(line('warn', ids.broken, 'TypeError: always'))
  assert.ok(line('error', ids.broken, 'TypeError: always'), 'the last attempt of broken at error')
  assert.ok(line('error', ids.permanent, 'Permanent: card declined'))
  assert.ok(line('warn', ids.retry_in, 'RetryIn: rate limited until reset'))
  assert.ok(!line('error', ids.flaky, '503'), 'a retried failure is not an error line')
})

test('errors that cannot be printed plainly (a Symbol name, a throwing getter, a Symbol thrown) fail their job alone; the worker goes on', async () => {
  const queue = queueName('odd_errors')
  await q("SELECT jobq.configure($1, max_retries => 0)", [queue])
  const w = worker(queue, { concurrency: 4 })
    .handle('symbol_name', async () => { const e = new Error('boom'); e.name = Symbol('weird'); throw e })
    .handle('getter', async () => {
      const e = new Error('hidden')
      // the stack first: V8 formats it (reading the message) when it is redefined
      Object.defineProperty(e, 'stack', { get () { throw new Error('no stack either') } })
      Object.defineProperty(e, 'message', { get () { throw new Error('no message for you') } })
      Object.defineProperty(e, 'cause', { get () { throw new Error('no cause') } })
      throw e
    })
    .handle('thrown_symbol', async () => { throw Symbol('odd') })
    .handle('slow', async () => { await sleep(1500); return { ok: 1 } })
  const ids = {}
  for (const kind of ['slow', 'symbol_name', 'getter', 'thrown_symbol']) ids[kind] = (await producer.enqueue(kind, {}, { queue })).jobId
  const done = w.run()
  await drained(queue, null, 30000)
  const later = (await producer.enqueue('slow', {}, { queue })).jobId
  await drained(queue, null, 30000)
  await w.stop()
  await done
  assert.equal((await statusOf(ids.slow)).status, 'completed')
  assert.equal((await statusOf(later)).status, 'completed', 'the worker went on')
  const sym = await statusOf(ids.symbol_name)
  assert.deepEqual([sym.status, sym.last_error], ['failed', 'Symbol(weird): boom'])
  const g = await statusOf(ids.getter)
  assert.deepEqual([g.status, g.last_error], ['failed', 'Error: undefined'])
  const t = await statusOf(ids.thrown_symbol)
  assert.equal(t.status, 'failed')
  assert.match(t.last_error, /^thrown: /)
})

test('RetryIn and Snooze refuse a delay jobq would refuse when they are made', () => {
  for (const Cls of [jobq.RetryIn, jobq.Snooze]) {
    for (const bad of [-5, NaN, Infinity, 1e300, 1000 * 366 * 86400, 'soon', Symbol('s')]) {
      assert.throws(() => new Cls(bad), TypeError, `${Cls.name} ${String(bad)}`)
    }
    assert.equal(new Cls(0).seconds, 0)
    assert.equal(new Cls('2.5').seconds, 2.5)
    assert.equal(new Cls(999 * 365 * 86400).seconds, 999 * 365 * 86400)
  }
})

test('a handler timeout aborts job.signal and fails the attempt, even when the handler ignores the signal', async () => {
  const queue = queueName('timeout')
  let reason = null
  const w = worker(queue, { timeout: 0.3 })
    .handle('polite', (job) => new Promise((resolve, reject) => {
      const t = setTimeout(resolve, 10000)
      job.signal.addEventListener('abort', () => { clearTimeout(t); reason = job.signal.reason; reject(job.signal.reason) })
    }))
    // ignores its signal and would return only when the test lets it
    .handle('stubborn', async () => { await stubbornGate; stubbornReturned = true; return { late: true } }, { timeout: 0.5 })
    .handle('quick', async () => { await sleep(600); return { ok: true } }, { timeout: 5 })
  let release
  const stubbornGate = new Promise((resolve) => { release = resolve })
  let stubbornReturned = false
  const a = await producer.enqueue('polite', {}, { queue, maxRetries: 0 })
  const b = await producer.enqueue('stubborn', {}, { queue, maxRetries: 0 })
  const c = await producer.enqueue('quick', {}, { queue, maxRetries: 0 })
  const done = w.run()
  await drained(queue)
  // the stubborn job was failed while its handler had not returned
  assert.equal(stubbornReturned, false)
  release()
  await w.stop()
  await done
  assert.ok(stubbornReturned)
  assert.ok(reason instanceof jobq.HandlerTimeout)
  assert.deepEqual([(await statusOf(a.jobId)).status, (await statusOf(a.jobId)).last_error],
    ['failed', 'HandlerTimeout: handler timed out after 0.3 s'])
  // its late result changed nothing
  const sb = await statusOf(b.jobId)
  assert.deepEqual([sb.status, sb.last_error, sb.result], ['failed', 'HandlerTimeout: handler timed out after 0.5 s', null])
  assert.equal((await statusOf(c.jobId)).status, 'completed')
})

test('checkpoints: a retried job resumes from the last one; a lost lease aborts the handler', async () => {
  const queue = queueName('checkpoint')
  await q("SELECT jobq.configure($1, max_retries => 2, backoff_base => '50 ms', backoff_cap => '50 ms')", [queue])
  const starts = []
  let lostReason = null
  const w = worker(queue)
    .handle('import', async (job) => {
      let done = job.lastCheckpoint?.done ?? 0
      starts.push(done)
      while (done < 100) {
        if (job.attempt === 1 && done === 50) throw new Error('connection reset')
        done += 25
        await job.checkpoint({ done })
      }
      return { imported: done, resumedFrom: starts[starts.length - 1] }
    })
    .handle('doomed', async (job) => {
      await q('SELECT jobq.cancel($1)', [job.id]) // someone cancels it while it runs
      try {
        await job.checkpoint({ step: 1 })
      } catch (e) {
        lostReason = job.signal.reason
        throw e
      }
    })
  const imp = await producer.enqueue('import', {}, { queue })
  const doomed = await producer.enqueue('doomed', {}, { queue })
  const done = w.run()
  await drained(queue)
  await w.stop()
  await done
  const s = await statusOf(imp.jobId)
  assert.deepEqual([s.status, s.retry_count, s.result, s.checkpoint],
    ['completed', 1, { imported: 100, resumedFrom: 50 }, { done: 100 }])
  assert.deepEqual(starts, [0, 50])
  assert.ok(lostReason instanceof jobq.LeaseLost)
  assert.equal((await statusOf(doomed.jobId)).status, 'cancelled')
  assert.ok(w.lines.some((l) => /lease lost/.test(l)))
})

test('several queues share one concurrency limit; hooks see every job', async () => {
  const qa = queueName('multi_a')
  const qb = queueName('multi_b')
  const finished = []
  const w = worker(qa, { queues: [qa, qb], concurrency: 2, hooks: { onFinish: (job, outcome) => finished.push([job.queue, outcome]) } })
    .handle('work', async (job) => {
      const end = await ledgerStart(job, 'multi')
      await sleep(60)
      await end()
    })
  await producer.enqueueMany('work', Array.from({ length: 6 }, () => ({})), { queue: qa })
  await producer.enqueueMany('work', Array.from({ length: 6 }, () => ({})), { queue: qb })
  const done = w.run()
  await drained(qa)
  await drained(qb)
  await w.stop()
  await done
  assert.equal(finished.length, 12)
  assert.ok(finished.every(([, o]) => o === 'completed'))
  assert.deepEqual([...new Set(finished.map(([queue]) => queue))].sort(), [qa, qb].sort())
  const r = await q(`SELECT max((SELECT count(*) FROM node_ledger b
                                  WHERE b.worker = 'multi' AND b.queue IN ($1, $2) AND b.started_at <= a.started_at
                                    AND b.finished_at > a.started_at))::int AS n
                       FROM node_ledger a WHERE a.queue IN ($1, $2)`, [qa, qb])
  assert.ok(r[0].n <= 2, `at most 2 at once over both queues, saw ${r[0].n}`)
})

test('a result that cannot be sent (BigInt, circular, over jobq.max_result_size) fails that job alone, for good, with the real error; the others of its batch complete', async () => {
  const queue = queueName('badresult')
  // retries left: an unsendable result must still not be tried again
  await q("SELECT jobq.configure($1, max_retries => 3, backoff_base => '50 ms', backoff_cap => '50 ms')", [queue])
  const maxResult = (await q("SELECT pg_catalog.pg_size_bytes(current_setting('jobq.max_result_size')) AS n"))[0].n
  let release
  const barrier = new Promise((resolve) => { release = resolve })
  const BAD = ['big', 'bigint', 'circular']
  const FINE = 4
  // each run is in the ledger (node_ledger: one row per handler run); every
  // job waits for all seven to have started, so that their completions
  // meet: the first one goes alone, the rest (three fine results and the
  // big one, a few ticks later, all before any answer can come back) in
  // one statement
  let started = 0
  const run = (kind, result, ticks) => async (job) => {
    await ledgerStart(job)
    if (++started === BAD.length + FINE) release()
    await barrier
    for (let i = 0; i < ticks; i++) await null
    return result()
  }
  const w = worker(queue, { concurrency: 8, batch: 8 })
    .handle('big', run('big', () => ({ blob: 'x'.repeat(Number(maxResult) + 1024) }), 5))
    .handle('bigint', run('bigint', () => ({ n: 1n }), 5))
    .handle('circular', run('circular', () => { const o = { a: 1 }; o.self = o; return o }, 5))
    .handle('fine', run('fine', () => ({ ok: true }), 0))
  const ids = {}
  for (const kind of BAD) ids[kind] = (await producer.enqueue(kind, {}, { queue })).jobId
  const fine = await producer.enqueueMany('fine', Array.from({ length: FINE }, () => ({})), { queue })
  const done = w.run()
  await drained(queue, null, 30000)
  await w.stop()
  await done
  const b = await statusOf(ids.big)
  assert.equal(b.status, 'failed')
  assert.equal(b.retry_count, 0, 'not retried')
  assert.match(b.last_error, /^Error: the result was refused: .*result.* \(SQLSTATE [0-9A-Z]{5}\)$/)
  const n = await statusOf(ids.bigint)
  assert.deepEqual([n.status, n.retry_count], ['failed', 0])
  assert.equal(n.last_error, 'Error: the result is not JSON: TypeError: Do not know how to serialize a BigInt')
  const c = await statusOf(ids.circular)
  assert.deepEqual([c.status, c.retry_count], ['failed', 0])
  assert.match(c.last_error, /^Error: the result is not JSON: TypeError: Converting circular structure to JSON/)
  // the ledger: every job's handler ran once; the fine ones completed
  const runs = await q('SELECT job_id::text AS id, count(*)::int AS n FROM node_ledger WHERE queue = $1 GROUP BY job_id', [queue])
  assert.deepEqual(runs.map((r) => r.n), Array(BAD.length + FINE).fill(1), JSON.stringify(runs))
  assert.deepEqual(runs.map((r) => r.id).sort(), [...Object.values(ids), ...fine.map((f) => f.jobId)].sort())
  for (const f of fine) {
    const s = await statusOf(f.jobId)
    assert.deepEqual([s.status, s.retry_count, s.result], ['completed', 0, { ok: true }])
  }
  // the big result did go in a statement with others, which fell back to one by one
  assert.ok(w.lines.some((l) => /^warn .*completions in one statement failed .*one by one/.test(l)), w.lines.join('\n'))
  // each failure logged with its message, at error: no retry is left for it
  for (const kind of BAD) {
    assert.ok(w.lines.some((l) => l.startsWith('error ') && l.includes(`job ${ids[kind]} (${kind})`) && /failed for good/.test(l)),
      `the ${kind} failure logged at error`)
  }
})
