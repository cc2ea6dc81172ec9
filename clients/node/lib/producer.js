'use strict'
// Enqueueing jobs: jobq.enqueue and jobq.enqueue_many over any pg queryable.
//
// `db` is whatever has query(text, values): a pg.Pool (each call its own
// transaction), a pg.Client or a pool client.  Given a client inside the
// caller's BEGIN ... COMMIT, the job is part of that transaction: it exists
// only if the transaction commits (enqueue atomically with the business write).
//
// Only the options given are passed, by name, so the defaults are the
// server's (the queue's max_retries, now() for run_at) and an option the
// installed jobq lacks fails loudly instead of being dropped.

const pg = require('pg')
const { checkSeconds } = require('./errors')
const { guardPool, isPool } = require('./conn')

// option name -> [SQL argument, cast]; priority and the times are special
const OPTIONS = {
  queue: ['queue', 'text'],
  maxRetries: ['max_retries', 'integer'],
  concurrencyKey: ['concurrency_key', 'text'],
  dependsOn: ['depends_on', 'bigint[]'],
  onParentFailure: ['on_parent_failure', 'text']
}
const KNOWN = new Set([...Object.keys(OPTIONS), 'priority', 'runAt', 'runIn', 'idempotencyKey',
  'idempotencyKeys', 'client'])

// The named-argument SQL and parameters for opts, parameters numbered from
// values.length + 1 (values is appended to).
function namedArgs (opts, values, many) {
  const args = []
  const add = (name, sql, v) => {
    values.push(v)
    args.push(`${name} => ${sql.replace('$', () => '$' + values.length)}`)
  }
  for (const key of Object.keys(opts)) {
    if (!KNOWN.has(key)) throw new TypeError(`unknown enqueue option "${key}"`)
  }
  for (const [key, [name, cast]] of Object.entries(OPTIONS)) {
    if (opts[key] != null) add(name, `$::${cast}`, opts[key])
  }
  if (opts.priority != null) {
    if (typeof opts.priority === 'number') add('priority', '$::integer', opts.priority)
    else add('priority', 'jobq.priority($::text)', String(opts.priority)) // 'low' .. 'critical'
  }
  if (opts.runAt != null && opts.runIn != null) throw new TypeError('give runAt or runIn, not both')
  if (opts.runAt != null) add('run_at', '$::timestamptz', opts.runAt)
  if (opts.runIn != null) add('run_at', 'pg_catalog.now() + $::interval', `${checkSeconds(opts.runIn, 'runIn')} seconds`)
  if (many) {
    if (opts.idempotencyKey != null) throw new TypeError('enqueueMany takes idempotencyKeys (one per payload)')
    if (opts.idempotencyKeys != null) add('idempotency_keys', '$::text[]', opts.idempotencyKeys)
  } else {
    if (opts.idempotencyKeys != null) throw new TypeError('enqueue takes idempotencyKey')
    if (opts.idempotencyKey != null) add('idempotency_key', '$::text', opts.idempotencyKey)
  }
  return args.map((a) => ', ' + a).join('')
}

// A payload as JSON text: an object, {} when undefined.
function payloadJson (payload) {
  if (payload === undefined) return '{}'
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) {
    throw new TypeError('a job payload must be a JSON object')
  }
  return JSON.stringify(payload)
}

// Enqueue one job; resolve to { jobId, created } (jobId a string: bigint).
async function enqueue (db, kind, payload, opts = {}) {
  const values = [kind, payloadJson(payload)]
  const args = namedArgs(opts, values, false)
  const r = await db.query(
    `SELECT job_id, created FROM jobq.enqueue($1::text, $2::jsonb${args})`, values)
  return { jobId: r.rows[0].job_id, created: r.rows[0].created }
}

// Enqueue one job per payload in one statement; resolve to an array of
// { jobId, created }, in the order of payloads.
async function enqueueMany (db, kind, payloads, opts = {}) {
  if (!Array.isArray(payloads)) throw new TypeError('enqueueMany takes an array of payloads')
  if (opts.idempotencyKeys != null &&
      (!Array.isArray(opts.idempotencyKeys) || opts.idempotencyKeys.length !== payloads.length)) {
    throw new TypeError('idempotencyKeys must be an array as long as payloads')
  }
  if (payloads.length === 0) return []
  const values = [kind, payloads.map(payloadJson)]
  const args = namedArgs(opts, values, true)
  const r = await db.query(
    `SELECT job_id, created FROM jobq.enqueue_many($1::text, $2::jsonb[]${args})`, values)
  return r.rows.map((row) => ({ jobId: row.job_id, created: row.created }))
}

// A producer bound to a pg.Pool or client (or a pg config, for a pool of its
// own); opts.client in a call overrides it, e.g. with a client in a transaction.
// A pool, given or made, gets the library's 'error' listener (an idle
// connection lost is logged at warn with opts.logger, default console, and
// never kills the process); the application's own listeners stay.
class Producer {
  constructor (db = {}, opts = {}) {
    if (db && typeof db.query === 'function') {
      this.db = db
      this._own = false
    } else {
      this.db = new pg.Pool(typeof db === 'string' ? { connectionString: db } : db)
      this._own = true
    }
    const logger = opts.logger ?? console
    this._unguard = isPool(this.db)
      ? guardPool(this.db, (e) => {
        if (typeof logger.warn === 'function') {
          logger.warn(`jobq producer: an idle database connection was lost (${e && e.message}); ` +
            'the pool opens a new one when needed')
        }
      })
      : () => {}
  }

  enqueue (kind, payload, opts = {}) {
    const { client, ...rest } = opts
    return enqueue(client || this.db, kind, payload, rest)
  }

  enqueueMany (kind, payloads, opts = {}) {
    const { client, ...rest } = opts
    return enqueueMany(client || this.db, kind, payloads, rest)
  }

  // Close the pool the producer made (a pool or client given is the caller's).
  async end () {
    this._unguard()
    if (this._own) await this.db.end()
  }
}

module.exports = { enqueue, enqueueMany, Producer }
