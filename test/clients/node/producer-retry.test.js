'use strict'
// Ambiguous commits of enqueues, made on purpose by a proxy (helpers.proxy)
// between the producer's pool and the server: a call with idempotency keys
// whose connection died after it committed, or that found the database
// unreachable, is sent again and tells the true outcome; one without keys
// (or on the caller's client) is sent once, its error marked in doubt.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const fs = require('fs')
const path = require('path')
const { jobq, pg, direct, queueName, q, sleep, memLogger, proxy } = require('./helpers')

const proxies = []
const pools = []
after(async () => {
  for (const p of proxies) await p.close()
  for (const pool of pools) await pool.end()
  await direct.end()
})

// A proxy, a pool through it and a Producer on that pool (its log kept).
async function setup (opts = {}) {
  const p = await proxy()
  proxies.push(p)
  const pool = new pg.Pool({ ...p.config, max: 2 })
  pools.push(pool)
  const logger = memLogger()
  const producer = new jobq.Producer(pool, { logger, ...opts })
  return { p, pool, producer, lines: logger.lines }
}

const jobsOf = async (queue) =>
  (await q('SELECT job_id::text AS id, idempotency_key AS key FROM jobq.job WHERE queue = $1 ORDER BY job_id', [queue]))

test('an enqueue whose connection died after it committed is sent again with its key: created false, the job that exists, one job', async () => {
  const { p, producer, lines } = await setup()
  const queue = queueName('doubt_enq')
  p.trap('jobq.enqueue($1')
  const r = await producer.enqueue('pay', { n: 1 }, { queue, idempotencyKey: `${queue}-k` })
  assert.equal(p.trapped, 1, 'the first try was cut after it went through')
  assert.equal(p.count('jobq.enqueue($1'), 2, 'sent twice')
  const jobs = await jobsOf(queue)
  assert.deepEqual(jobs, [{ id: r.jobId, key: `${queue}-k` }])
  assert.equal(r.created, false, 'the first try had created it')
  assert.equal(lines.filter((l) => /^warn jobq producer: the database cannot be reached \(enqueue pay:/.test(l)).length, 1, lines.join('\n'))
  assert.equal(lines.filter((l) => /^info jobq producer: the database answers again/.test(l)).length, 1, lines.join('\n'))

  // enqueueMany, every job with a key
  p.trap('jobq.enqueue_many(')
  const rs = await producer.enqueueMany('pay', [{ n: 2 }, { n: 3 }], { queue, idempotencyKeys: [`${queue}-m1`, `${queue}-m2`] })
  assert.equal(p.trapped, 2)
  assert.equal(p.count('jobq.enqueue_many('), 2)
  assert.deepEqual(rs.map((x) => x.created), [false, false])
  const all = await jobsOf(queue)
  assert.equal(all.length, 3)
  assert.deepEqual(rs.map((x) => x.jobId), all.slice(1).map((j) => j.id))
})

test('an enqueue with a key while the database cannot be reached (~2 s) is tried again until it answers: one job', async () => {
  const { p, producer, lines } = await setup()
  const queue = queueName('down_enq')
  const sock = path.join(p.config.host, `.s.PGSQL.${p.config.port}`)
  fs.renameSync(sock, sock + '.away') // connections refused (no socket there)
  const t0 = Date.now()
  const pending = producer.enqueue('pay', {}, { queue, idempotencyKey: `${queue}-k` })
  const back = sleep(2000).then(() => fs.renameSync(sock + '.away', sock))
  const r = await pending
  await back
  assert.ok(Date.now() - t0 >= 1900, 'it waited for the database')
  assert.equal(r.created, true)
  assert.deepEqual(await jobsOf(queue), [{ id: r.jobId, key: `${queue}-k` }])
  assert.equal(lines.filter((l) => /^warn jobq producer: the database cannot be reached/.test(l)).length, 1, lines.join('\n'))
  assert.ok(lines.some((l) => /^info jobq producer: the database answers again \(after [0-9.]+ s\)/.test(l)), lines.join('\n'))

  // retryFor 0: never tried again
  const none = await setup({ retryFor: 0 })
  const sock0 = path.join(none.p.config.host, `.s.PGSQL.${none.p.config.port}`)
  fs.renameSync(sock0, sock0 + '.away')
  await assert.rejects(none.producer.enqueue('pay', {}, { queue, idempotencyKey: `${queue}-k0` }),
    (e) => e.code === 'ENOENT' && e.jobqInDoubt === false)
  fs.renameSync(sock0 + '.away', sock0)
})

test('without a key (or a key for some jobs only) nothing is sent twice: the error says in doubt; on the caller\'s client, nothing is sent again', async () => {
  const { p, pool, producer, lines } = await setup()
  const queue = queueName('nokey')
  p.trap('jobq.enqueue($1')
  await assert.rejects(producer.enqueue('pay', {}, { queue }), (e) => e.jobqInDoubt === true)
  assert.equal(p.count('jobq.enqueue($1'), 1, 'sent once')
  assert.equal((await jobsOf(queue)).length, 1, 'it had committed')

  p.trap('jobq.enqueue_many(')
  await assert.rejects(producer.enqueueMany('pay', [{}, {}], { queue, idempotencyKeys: [`${queue}-a`, null] }),
    (e) => e.jobqInDoubt === true)
  assert.equal(p.count('jobq.enqueue_many('), 1, 'sent once')
  assert.equal((await jobsOf(queue)).length, 3)

  // unreachable: refused before it was sent, so certainly not committed
  const sock = path.join(p.config.host, `.s.PGSQL.${p.config.port}`)
  fs.renameSync(sock, sock + '.away')
  await assert.rejects(producer.enqueue('pay', {}, { queue }), (e) => e.jobqInDoubt === false)
  fs.renameSync(sock + '.away', sock)
  assert.ok(!lines.some((l) => /cannot be reached/.test(l)), 'no retry, no outage logged')

  // a client in the caller's transaction: the transaction is gone; not sent again
  const client = await pool.connect()
  client.on('error', () => {})
  await client.query('BEGIN')
  p.trap('jobq.enqueue($1')
  const n = p.count('jobq.enqueue($1')
  await assert.rejects(producer.enqueue('pay', {}, { queue, idempotencyKey: `${queue}-tx`, client }))
  client.release(true)
  assert.equal(p.count('jobq.enqueue($1') - n, 1, 'sent once')
  assert.equal((await jobsOf(queue)).length, 3, 'rolled back with the transaction')
})
