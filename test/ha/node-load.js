'use strict'
// test/ha/node-load.js: the Node library under test/ha/ha.py's failovers.
//
//   node node-load.js CONNSTRING LEDGER_DIR
//
// node-postgres has no multi-host connection strings nor
// target_session_attrs, so CONNSTRING names one address that follows the
// primary (ha.py's leader proxy, as HAProxy with Patroni's REST check would).
// A Producer enqueues kind ha.node into queue node with idempotency keys,
// sending the same key again after any error, and writes "ack KEY JOB_ID
// CREATED 0 TIME TRIES" to LEDGER_DIR/nodeprod0 once acknowledged; a Worker
// (concurrency 4, lease 15 s) runs them, its handler writing "run JOB TOKEN
// TIME" to LEDGER_DIR/nodework.  SIGUSR2: the producer stops (after its
// last enqueue, acknowledged or given up, it writes "stopped" to its ledger).
// SIGTERM: the producer stops, the worker finishes its jobs and returns.

const fs = require('fs')
const path = require('path')
const pg = require('pg')
const { Producer, Worker } = require('jobq')

const [connectionString, ledgerDir] = process.argv.slice(2)
const prodLedger = fs.openSync(path.join(ledgerDir, 'nodeprod0'), 'a')
const workLedger = fs.openSync(path.join(ledgerDir, 'nodework'), 'a')
const line = (fd, ...f) => fs.writeSync(fd, f.join('\t') + '\n')
const now = () => (Date.now() / 1000).toFixed(3)
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

let stopping = false
const pool = new pg.Pool({ connectionString, max: 2, connectionTimeoutMillis: 3000, query_timeout: 5000 })
const producer = new Producer(pool, { logger: { warn: () => {} } })

async function produce () {
  for (let seq = 0; !stopping; seq++) {
    const key = `nodeprod0-${seq}`
    line(prodLedger, 'try', key, now())
    let tries = 0
    for (;;) {
      tries++
      try {
        const r = await producer.enqueue('ha.node', { key }, { queue: 'node', maxRetries: 25, idempotencyKey: key })
        line(prodLedger, 'ack', key, r.jobId, r.created ? 'True' : 'False', 0, now(), tries)
        break
      } catch (e) {
        if (tries > 400) { line(prodLedger, 'gaveup', key, now()); break }
        await sleep(Math.min(1000, 50 * tries))
      }
    }
    await sleep(200)
  }
  line(prodLedger, 'stopped', now())
}

const worker = new Worker({
  connection: { connectionString, connectionTimeoutMillis: 3000, query_timeout: 20000 },
  queue: 'node',
  concurrency: 4,
  lease: 15,
  wait: 1,
  shutdownGrace: 20,
  workerId: 'nodework',
  handleSignals: false
})
worker.handle('ha.node', async (job) => {
  line(workLedger, 'run', job.id, job.leaseToken, now())
  await sleep(5 + Math.random() * 25)
  return { by: 'nodework' }
})

process.on('SIGUSR2', () => { stopping = true }) // the producer only: ha.py drains the queues next
process.on('SIGTERM', () => { stopping = true; worker.stop() })
Promise.all([produce(), worker.run()]).then(async () => {
  await producer.end().catch(() => {})
  await pool.end().catch(() => {})
  process.exit(0)
}, (e) => { console.error(e); process.exit(1) })
