#!/usr/bin/env node
'use strict'
// An example jobq worker: handlers for a few kinds of jobs, run by jobq-worker.
//
//   node worker.js --queue default --batch 10 --lease 30 --wait 5
//
// Connects with the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).
// SIGTERM: no more claims, the running jobs finish, exit 0.  A second SIGTERM
// or --shutdown-timeout abandons what still runs (exit 1; it runs again).
//
// The handlers stand in for real work.  Each one is safe to run twice,
// because jobq delivers a job at least once: see "Writing a worker" in the
// README.

const { parseArgs } = require('util')
const { Worker, PermanentError, RateLimited } = require('./jobq-worker')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// Quick work: a real handler would call the mail service with an idempotency
// key derived from the job id, so a second run sends nothing.
async function sendEmail (job) {
  await sleep(10)
  return { sent_to: job.payload.to, message_id: `msg-${job.id}` }
}

// Quick work whose output has a deterministic name: running it twice
// overwrites the same file.
async function resizeImage (job) {
  await sleep(20)
  return { resized: job.payload.image, width: job.payload.width ?? 100 }
}

// The job of producer.js: confirm an order that was committed.
async function confirmOrder (job) {
  return { confirmed: job.payload.order_id }
}

// Slow work: the heartbeat keeps the lease alive meanwhile.
async function buildReport (job) {
  const seconds = Number(job.payload.seconds ?? 3)
  await sleep(seconds * 1000)
  return { built: true, seconds }
}

// Long work in chunks, resumable: progress is saved after every chunk and the
// next attempt starts where the last one stopped.  The first attempt of a
// payload with "fail_once_at" fails when it gets there (a dropped connection).
async function importRows (job) {
  const p = job.payload
  const rows = Number(p.rows)
  const chunk = Number(p.chunk ?? 10)
  const start = job.checkpoint?.done ?? 0
  let done = start
  while (done < rows) {
    if (job.retryCount === 0 && done === p.fail_once_at) {
      throw new Error('connection reset while importing (simulated)')
    }
    await sleep(10) // "import" rows done .. done + chunk
    done = Math.min(done + chunk, rows)
    await job.saveCheckpoint({ done })
  }
  return { imported: rows, resumed_from: start }
}

// Call an upstream that answers with the statuses of payload "responses" in
// turn (the last one for ever after).  The call number is saved as a
// checkpoint *before* each call, as a real handler saves an upstream request
// id, so every attempt knows what was already sent.
async function deliverWebhook (job) {
  const responses = job.payload.responses
  const calls = job.checkpoint?.calls ?? 0
  await job.saveCheckpoint({ calls: calls + 1 })
  const status = responses[Math.min(calls, responses.length - 1)]
  if (status === 429) throw new RateLimited(0.2, 'upstream returned 429')
  if (status >= 400 && status < 500) throw new PermanentError(`upstream returned ${status}`)
  if (status >= 500) throw new Error(`upstream returned ${status}`)
  return { status, calls: calls + 1 }
}

const HANDLERS = {
  'email.send': sendEmail,
  'image.resize': resizeImage,
  'order.confirm': confirmOrder,
  'report.build': buildReport,
  'import.rows': importRows,
  'webhook.deliver': deliverWebhook
}

async function main () {
  const { values: a } = parseArgs({
    options: {
      queue: { type: 'string', default: 'default' },
      'worker-id': { type: 'string' },
      batch: { type: 'string', default: '10' }, // jobs per claim
      concurrency: { type: 'string' }, // jobs run at once (default: batch)
      lease: { type: 'string', default: '30' }, // seconds
      wait: { type: 'string', default: '5' }, // claim wait, seconds
      'shutdown-timeout': { type: 'string', default: '30' } // seconds
    }
  })
  const worker = new Worker(HANDLERS, {
    queue: a.queue,
    workerId: a['worker-id'],
    batch: Number(a.batch),
    concurrency: a.concurrency ? Number(a.concurrency) : undefined,
    lease: Number(a.lease),
    wait: Number(a.wait),
    shutdownTimeout: Number(a['shutdown-timeout'])
  })
  const code = await worker.run()
  // jobs abandoned at shutdown may still hold timers: do not wait for them
  process.exit(code)
}

main().catch((e) => {
  console.error(e)
  process.exit(2)
})
