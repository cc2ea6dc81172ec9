'use strict'
// A worker process for shutdown.test.js: handlers "work" (sleeps
// payload.ms, recording its run in node_ledger) and "ping".  Settings from
// the environment: QUEUE, CONCURRENCY, LEASE, WAIT, GRACE.  It prints the
// library's log to stderr and exits 0, or 1 when it handed jobs back.

const { jobq, ledgerStart, sleep, direct } = require('./helpers')

async function main () {
  const worker = new jobq.Worker({
    connection: { port: Number(process.env.JOBQ_LIB_PORT) },
    queue: process.env.QUEUE,
    concurrency: Number(process.env.CONCURRENCY || 4),
    lease: Number(process.env.LEASE || 2),
    wait: Number(process.env.WAIT || 5),
    shutdownGrace: Number(process.env.GRACE || 30),
    workerId: `fixture-${process.pid}`,
    logger: { debug: console.error, info: console.error, warn: console.error, error: console.error },
    logLevel: 'debug'
  })
  worker.handle('work', async (job) => {
    const end = await ledgerStart(job, worker.workerId)
    await sleep(Number(job.payload.ms))
    await end()
    return { ms: job.payload.ms }
  })
  worker.handle('ping', async () => ({}))
  const { handedBack } = await worker.run()
  await direct.end()
  // a handed-back handler may still hold a timer: do not wait for it
  process.exit(handedBack ? 1 : 0)
}

main().catch((e) => {
  console.error(e)
  process.exit(2)
})
