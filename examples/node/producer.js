#!/usr/bin/env node
'use strict'
// An example jobq producer: enqueue inside the application's own transaction.
//
//   node producer.js --queue default --orders 3
//   node producer.js --queue default --orders 1 --fail   # rolled back: no order, no job
//
// Each order is inserted and its confirmation job enqueued in one
// transaction, so the job exists only if the order commits, and an order
// never commits without its job (no dual write, no outbox table to poll).
// The idempotency key (the order id) makes a retried enqueue harmless.
//
// Connects with the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER,
// ...).  Works through PgBouncer in transaction mode: the transaction keeps
// one server connection from BEGIN to COMMIT.

const { parseArgs } = require('util')
const pg = require('pg')
const { enqueue } = require('jobq')

// Insert an order and enqueue its job atomically; resolve to [order id, job id].
async function placeOrder (client, customer, amount, queue, fail = false) {
  await client.query('BEGIN')
  try {
    const o = await client.query(
      'INSERT INTO example_orders (customer, amount) VALUES ($1, $2) RETURNING id',
      [customer, amount])
    const orderId = o.rows[0].id
    const { jobId } = await enqueue(client, 'order.confirm', { order_id: Number(orderId) },
      { queue, idempotencyKey: `order-${orderId}` })
    if (fail) {
      // anything going wrong before COMMIT takes the job with it
      throw new Error('payment declined (simulated)')
    }
    await client.query('COMMIT')
    return [orderId, jobId]
  } catch (e) {
    await client.query('ROLLBACK')
    throw e
  }
}

async function main () {
  const { values: a } = parseArgs({
    options: {
      queue: { type: 'string', default: 'default' },
      orders: { type: 'string', default: '1' },
      fail: { type: 'boolean', default: false } // fail after enqueue: roll back
    }
  })
  const client = new pg.Client()
  await client.connect()
  try {
    await client.query(`CREATE TABLE IF NOT EXISTS example_orders (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      customer text NOT NULL, amount numeric NOT NULL,
      created_at timestamptz NOT NULL DEFAULT now())`)
    for (let i = 0; i < Number(a.orders); i++) {
      try {
        const [orderId, jobId] = await placeOrder(client, `customer-${i}`, 10 + i, a.queue, a.fail)
        console.log(`order ${orderId} committed with job ${jobId}`)
      } catch (e) {
        if (!a.fail) throw e
        console.log(`order rolled back (${e.message}): no order, no job`)
      }
    }
  } finally {
    await client.end()
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
