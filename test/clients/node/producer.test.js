'use strict'
// The producer: enqueue, enqueueMany, options, idempotency, and enqueue in
// the caller's own transaction.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { jobq, pg, libConfig, direct, queueName, q } = require('./helpers')

const pool = new pg.Pool(libConfig)
const producer = new jobq.Producer(pool)
after(async () => {
  await pool.end()
  await direct.end()
})

test('enqueue returns the job id and created; a duplicate key returns the same job, created false', async () => {
  const queue = queueName('enq')
  const a = await producer.enqueue('email.send', { to: 'a@example.com' }, { queue, idempotencyKey: `${queue}-k` })
  assert.equal(typeof a.jobId, 'string')
  assert.equal(a.created, true)
  const b = await producer.enqueue('email.send', { to: 'other' }, { queue, idempotencyKey: `${queue}-k` })
  assert.deepEqual(b, { jobId: a.jobId, created: false })
  const rows = await q('SELECT payload, status FROM jobq.jobs WHERE job_id = $1', [a.jobId])
  assert.deepEqual(rows, [{ payload: { to: 'a@example.com' }, status: 'pending' }])
})

test('enqueue options reach the job: queue, priority (number and label), runIn, runAt, maxRetries, concurrencyKey', async () => {
  const queue = queueName('opts')
  const a = await producer.enqueue('k', {}, { queue, priority: 'high', runIn: 3600, maxRetries: 0, concurrencyKey: 'c1' })
  const b = await producer.enqueue('k', undefined, { queue, priority: 7, runAt: new Date(Date.now() + 86400e3) })
  const rows = await q(`SELECT job_id::text AS id, priority, max_retries, payload,
                               run_at > now() + interval '50 minutes' AS later,
                               run_at > now() + interval '23 hours' AS tomorrow
                          FROM jobq.jobs WHERE queue = $1 ORDER BY job_id`, [queue])
  assert.deepEqual(rows.map((r) => [r.id, r.priority, r.max_retries, r.later, r.tomorrow]),
    [[a.jobId, 20, 0, true, false], [b.jobId, 7, rows[1].max_retries, true, true]])
  assert.deepEqual(rows[1].payload, {})
  const ck = await q("SELECT concurrency_key FROM jobq.job WHERE job_id = $1", [a.jobId])
  assert.equal(ck[0].concurrency_key, 'c1')
})

test('bad input is refused before or by the server', async () => {
  await assert.rejects(producer.enqueue('k', [1, 2]), TypeError)
  await assert.rejects(producer.enqueue('k', {}, { qeue: 'x' }), /unknown enqueue option "qeue"/)
  await assert.rejects(producer.enqueue('k', {}, { runAt: new Date(), runIn: 1 }), TypeError)
  await assert.rejects(producer.enqueue('k', {}, { queue: queueName('bad'), priority: 'urgent' }),
    (e) => e.code && /priority/.test(e.message))
})

test('enqueueMany: one job per payload, in order, with keys', async () => {
  const queue = queueName('many')
  const keys = [1, 2, 3].map((i) => `${queue}-${i}`)
  const first = await producer.enqueueMany('img', [{ i: 1 }, { i: 2 }, { i: 3 }], { queue, idempotencyKeys: keys, priority: 'low' })
  assert.equal(first.length, 3)
  assert.ok(first.every((r) => r.created))
  const again = await producer.enqueueMany('img', [{ i: 9 }, { i: 4 }], { queue, idempotencyKeys: [keys[2], `${queue}-4`] })
  assert.deepEqual(again.map((r) => r.created), [false, true])
  assert.equal(again[0].jobId, first[2].jobId)
  const rows = await q('SELECT job_id::text AS id, payload->>\'i\' AS i FROM jobq.jobs WHERE queue = $1 ORDER BY job_id', [queue])
  assert.deepEqual(rows.map((r) => r.i), ['1', '2', '3', '4'])
  assert.deepEqual(rows.slice(0, 3).map((r) => r.id), first.map((r) => r.jobId))
  assert.deepEqual(await producer.enqueueMany('img', [], { queue }), [])
  await assert.rejects(producer.enqueueMany('img', [{}], { queue, idempotencyKeys: [] }), TypeError)
})

test("enqueue in the caller's transaction: rolled back leaves no job, committed keeps job and row", async () => {
  const queue = queueName('tx')
  await q('CREATE TABLE IF NOT EXISTS node_orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, queue text)')
  const client = await pool.connect()
  try {
    for (const commit of [false, true]) {
      await client.query('BEGIN')
      const o = await client.query('INSERT INTO node_orders (queue) VALUES ($1) RETURNING id', [queue])
      const j = await producer.enqueue('order.confirm', { order_id: Number(o.rows[0].id) }, { queue, client })
      const m = await jobq.enqueueMany(client, 'order.audit', [{ a: 1 }, { a: 2 }], { queue })
      assert.equal(j.created, true)
      assert.equal(m.length, 2)
      // not visible outside the transaction before it ends
      assert.equal((await q('SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1', [queue]))[0].n, commit ? 0 : 0)
      await client.query(commit ? 'COMMIT' : 'ROLLBACK')
      const jobs = await q('SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1', [queue])
      const orders = await q('SELECT count(*)::int AS n FROM node_orders WHERE queue = $1', [queue])
      assert.deepEqual([jobs[0].n, orders[0].n], commit ? [3, 1] : [0, 0], commit ? 'committed' : 'rolled back')
    }
  } finally {
    client.release()
  }
})

test('a Producer made from a connection config has its own pool and ends it', async () => {
  const p = new jobq.Producer(libConfig)
  const r = await p.enqueue('k', { x: 1 }, { queue: queueName('own') })
  assert.equal(r.created, true)
  await p.end()
  assert.equal(p.db.ended, true)
})
