'use strict'
// Throughput of the Node library with no-op handlers at concurrency 8,
// against SQL-only workers in the same run, on the same server:
//
//   library                Worker, concurrency 8 (claims of up to 8, one
//                          jobq.complete per job)
//   SQL loop, 2 tx/job     8 connections, each: claim(batch => 1), then complete
//   SQL, 1 statement       8 connections, each: complete_many(claim(batch => 8))
//                          in one statement (no handler could run in between)
//
// Each drains a backlog of JOBS jobs (default 4000) of its own queue; jobs/s =
// JOBS / time to drain.  Prints one line per contender.

const { jobq, pg, libConfig, direct, queueName, q, sleep } = require('./helpers')

const JOBS = Number(process.env.JOBS || 4000)
const CONCURRENCY = 8

// A backlog of JOBS jobs in a queue of its own; resolve to the queue name.
async function backlog (what) {
  const queue = queueName(`tp_${what}`)
  for (let i = 0; i < JOBS; i += 1000) {
    await q(`SELECT count(*) FROM jobq.enqueue_many('noop',
               (SELECT array_agg('{"n": 1}'::jsonb) FROM generate_series(1, $2::int)), $1)`,
    [queue, Math.min(1000, JOBS - i)])
  }
  await q('VACUUM ANALYZE jobq.job')
  return queue
}

async function library (queue) {
  let done = 0
  let finish
  const all = new Promise((resolve) => { finish = resolve })
  const w = new jobq.Worker({
    connection: libConfig,
    queue,
    concurrency: CONCURRENCY,
    wait: 1,
    handleSignals: false,
    logLevel: 'warn',
    hooks: { onFinish: (job, outcome) => { if (outcome === 'completed' && ++done === JOBS) finish() } }
  }).handle('noop', async () => null)
  const t0 = process.hrtime.bigint()
  const run = w.run()
  await all
  const s = Number(process.hrtime.bigint() - t0) / 1e9
  await w.stop()
  await run
  return s
}

// CONCURRENCY loops of statement(s) over their own connections until a
// claim comes back empty.
async function sqlLoops (queue, oneStatement) {
  const pool = new pg.Pool({ ...libConfig, max: CONCURRENCY })
  const clients = await Promise.all(Array.from({ length: CONCURRENCY }, () => pool.connect()))
  const t0 = process.hrtime.bigint()
  await Promise.all(clients.map(async (c) => {
    for (;;) {
      if (oneStatement) {
        const r = await c.query(`SELECT jobq.complete_many(array_agg(job_id), array_agg(lease_token)) AS n
                                   FROM jobq.claim($1, batch => 8)`, [queue])
        if (!r.rows[0].n) return
      } else {
        const r = await c.query('SELECT job_id, lease_token FROM jobq.claim($1, batch => 1)', [queue])
        if (!r.rows.length) return
        await c.query('SELECT jobq.complete($1, $2)', [r.rows[0].job_id, r.rows[0].lease_token])
      }
    }
  }))
  const s = Number(process.hrtime.bigint() - t0) / 1e9
  for (const c of clients) c.release()
  await pool.end()
  return s
}

async function main () {
  const contenders = [
    ['SQL loop, 2 tx/job (claim batch 1 + complete)', (queue) => sqlLoops(queue, false)],
    ['library, concurrency 8 (no-op handlers)', library],
    ['SQL, 1 statement (complete_many(claim(batch 8)))', (queue) => sqlLoops(queue, true)]
  ]
  console.log(`${JOBS} jobs per contender, 8 connections / concurrency 8, node ${process.version}`)
  for (const [name, fn] of contenders) {
    const queue = await backlog(name.split(' ')[0])
    await sleep(200)
    const s = await fn(queue)
    const left = (await q("SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1 AND status <> 'completed'", [queue]))[0].n
    if (left) throw new Error(`${name}: ${left} jobs not completed`)
    console.log(`${name.padEnd(52)} ${(JOBS / s).toFixed(0).padStart(6)} jobs/s  (${s.toFixed(2)} s)`)
  }
  await direct.end()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
