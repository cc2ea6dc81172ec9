'use strict'
// A worker process for restart.test.js, written as README.md's "A first worker
// in Node" writes one: a pg.Pool of the application's, with no 'error'
// listener of its own (POOL=given), or the worker's own pool (POOL=own).
// It runs from the project that the README's install commands made
// (JOBQ_APP), so it loads jobq and pg as an application does; from the
// package under test when that install failed.
//
// Handler "work": counts its run in node_restart_ledger (one row per job,
// runs + 1 on every run, on the worker's pool), sleeps payload.ms, returns.
// Prints "finish JOB OUTCOME ATTEMPT" on stdout for every attempt (the
// onFinish hook) and the library's log on stderr.  Settings: QUEUE,
// WORKER_ID, JOBQ_LIB_PORT.  Exits 0 after SIGTERM, 1 when it handed jobs
// back, 2 on an error.

const app = process.env.JOBQ_APP
const pkg = process.env.JOBQ_PKG
const load = (name) => require(app
  ? require.resolve(name, { paths: [app] })
  : name === 'jobq' ? pkg : require.resolve(name, { paths: [pkg] }))
const pg = load('pg')
const { Worker } = load('jobq')

const port = Number(process.env.JOBQ_LIB_PORT)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const opts = {
  queue: process.env.QUEUE,
  workerId: process.env.WORKER_ID,
  concurrency: 4,
  lease: 10,
  wait: 2,
  logger: { debug: (m) => console.error('debug ' + m), info: (m) => console.error('info ' + m), warn: (m) => console.error('warn ' + m), error: (m) => console.error('error ' + m) },
  hooks: { onFinish: (job, outcome) => console.log(`finish ${job.id} ${outcome} ${job.attempt}`) }
}

let worker
if (process.env.POOL === 'own') {
  worker = new Worker({ connection: { port }, ...opts })
} else {
  const pool = new pg.Pool({ port, max: 8 }) // as the README's: no 'error' listener
  worker = new Worker({ pool, ...opts })
}

worker.handle('work', async (job) => {
  await worker.pool.query(`INSERT INTO node_restart_ledger AS l (job_id, runs) VALUES ($1, 1)
                           ON CONFLICT (job_id) DO UPDATE SET runs = l.runs + 1`, [job.id])
  await sleep(Number(job.payload.ms))
  return { pid: process.pid }
})

worker.run().then(
  ({ handedBack }) => process.exit(handedBack ? 1 : 0),
  (e) => {
    console.error(e)
    process.exit(2)
  })
