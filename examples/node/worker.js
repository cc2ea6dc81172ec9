#!/usr/bin/env node
'use strict'
// An example jobq worker: handlers for a few kinds of jobs, run by the jobq
// library (clients/node).
//
//   node worker.js --queue default --concurrency 10 --lease 30 --wait 5
//
// Connects with the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).
// SIGTERM or SIGINT: no more claims, the running jobs finish, exit 0.  A second
// signal, or --shutdown-timeout seconds, hands back what still runs with
// jobq.release (pending again at once, no retry spent) and exits 1.
//
// The handlers stand in for real work.  Each one is safe to run twice,
// because jobq delivers a job at least once: see "Writing a worker" in
// docs/guide.md.

const { parseArgs } = require('util')
const { Worker, Permanent, Snooze } = require('jobq')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

const { values: a } = parseArgs({
  options: {
    queue: { type: 'string', default: 'default' },
    'worker-id': { type: 'string' },
    batch: { type: 'string', default: '10' }, // most jobs per claim
    concurrency: { type: 'string' }, // jobs run at once (default: batch)
    lease: { type: 'string', default: '30' }, // seconds
    wait: { type: 'string', default: '5' }, // claim wait, seconds
    'shutdown-timeout': { type: 'string', default: '30' } // seconds
  }
})

const worker = new Worker({
  queue: a.queue,
  workerId: a['worker-id'],
  batch: Number(a.batch),
  concurrency: Number(a.concurrency ?? a.batch),
  lease: Number(a.lease),
  wait: Number(a.wait),
  shutdownGrace: Number(a['shutdown-timeout'])
})

// Quick work: a real handler would call the mail service with an idempotency
// key derived from the job id, so a second run sends nothing.
worker.handle('email.send', async (job) => {
  await sleep(10)
  return { sent_to: job.payload.to, message_id: `msg-${job.id}` }
})

// Quick work whose output has a deterministic name: running it twice
// overwrites the same file.
worker.handle('image.resize', async (job) => {
  await sleep(20)
  return { resized: job.payload.image, width: job.payload.width ?? 100 }
})

// The job of producer.js: confirm an order that was committed.
worker.handle('order.confirm', async (job) => ({ confirmed: job.payload.order_id }))

// Slow work: the library renews the lease meanwhile.
worker.handle('report.build', async (job) => {
  const seconds = Number(job.payload.seconds ?? 3)
  await sleep(seconds * 1000)
  return { built: true, seconds }
})

// Long work in chunks, resumable: progress is saved after every chunk and the
// next attempt starts where the last one stopped.  The first attempt of a
// payload with "fail_once_at" fails when it gets there (a dropped connection).
worker.handle('import.rows', async (job) => {
  const p = job.payload
  const rows = Number(p.rows)
  const chunk = Number(p.chunk ?? 10)
  const start = job.lastCheckpoint?.done ?? 0
  let done = start
  while (done < rows) {
    if (job.attempt === 1 && done === p.fail_once_at) {
      throw new Error('connection reset while importing (simulated)')
    }
    await sleep(10) // "import" rows done .. done + chunk
    done = Math.min(done + chunk, rows)
    await job.checkpoint({ done })
  }
  return { imported: rows, resumed_from: start }
})

// Call an upstream that answers with the statuses of payload "responses" in
// turn (the last one for ever after).  The call number is saved as a
// checkpoint *before* each call, as a real handler saves an upstream request
// id, so every attempt knows what was already sent.
worker.handle('webhook.deliver', async (job) => {
  const responses = job.payload.responses
  const calls = job.lastCheckpoint?.calls ?? 0
  await job.checkpoint({ calls: calls + 1 })
  const status = responses[Math.min(calls, responses.length - 1)]
  if (status === 429) throw new Snooze(0.2, 'upstream returned 429') // no retry spent
  if (status >= 400 && status < 500) throw new Permanent(`upstream returned ${status}`)
  if (status >= 500) throw new Error(`upstream returned ${status}`) // retried with backoff
  return { status, calls: calls + 1 }
})

worker.run().then(
  // a handed-back handler may still hold a timer: do not wait for it
  ({ handedBack }) => process.exit(handedBack ? 1 : 0),
  (e) => {
    console.error(e)
    process.exit(2)
  })
