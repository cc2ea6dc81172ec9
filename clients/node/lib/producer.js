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
//
// Ambiguous commits.  On a pool, each enqueue is one statement in its own
// transaction; when its connection dies after the statement was sent, it
// may have committed or not, and the caller cannot tell.  The Producer
// sends a call whose every job has an idempotency key again on a new
// connection, with backoff (100 ms doubling to 2 s, jittered), while it
// fails because the database cannot be reached (conn.isTransient), for up
// to opts.retryFor seconds (default 30; 0: never): the key makes a second
// try after a first that committed a no-op, which answers created: false
// with the job's id.  A call without keys is never sent twice (it could
// make two jobs): its error has jobqInDoubt = true when the first try may
// have committed (conn.isInDoubt), false when it certainly did not.  A
// client (opts.client, or a Producer made on one) is the caller's: it may
// be inside the caller's transaction, which a lost connection ended, so
// nothing is tried again; the caller runs its transaction again (with the
// same keys, an enqueue that had committed is found, not doubled).

const pg = require('pg')
const { checkSeconds } = require('./errors')
const { guardPool, isPool, isTransient, isInDoubt, statement, sleep, backoffMs } = require('./conn')

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

// The statement of an enqueue: [text, values].
function enqueueSql (kind, payload, opts) {
  const values = [kind, payloadJson(payload)]
  const args = namedArgs(opts, values, false)
  return [`SELECT job_id, created FROM jobq.enqueue($1::text, $2::jsonb${args})`, values]
}

// The statement of an enqueueMany: [text, values], or null for no payloads.
function enqueueManySql (kind, payloads, opts) {
  if (!Array.isArray(payloads)) throw new TypeError('enqueueMany takes an array of payloads')
  if (opts.idempotencyKeys != null &&
      (!Array.isArray(opts.idempotencyKeys) || opts.idempotencyKeys.length !== payloads.length)) {
    throw new TypeError('idempotencyKeys must be an array as long as payloads')
  }
  if (payloads.length === 0) return null
  const values = [kind, payloads.map(payloadJson)]
  const args = namedArgs(opts, values, true)
  return [`SELECT job_id, created FROM jobq.enqueue_many($1::text, $2::jsonb[]${args})`, values]
}

const oneResult = (r) => ({ jobId: r.rows[0].job_id, created: r.rows[0].created })
const manyResult = (r) => r.rows.map((row) => ({ jobId: row.job_id, created: row.created }))

// Does every job of the call have an idempotency key (so that sending it
// again cannot make a second job)?
function keyed (opts, many) {
  if (!many) return opts.idempotencyKey != null
  return Array.isArray(opts.idempotencyKeys) && opts.idempotencyKeys.every((k) => k != null)
}

// Enqueue one job; resolve to { jobId, created } (jobId a string: bigint).
// Sent once on db, whatever it is (the Producer is the one that retries).
async function enqueue (db, kind, payload, opts = {}) {
  const [text, values] = enqueueSql(kind, payload, opts)
  return oneResult(await db.query(text, values))
}

// Enqueue one job per payload in one statement; resolve to an array of
// { jobId, created }, in the order of payloads.
async function enqueueMany (db, kind, payloads, opts = {}) {
  const built = enqueueManySql(kind, payloads, opts)
  if (built === null) return []
  return manyResult(await db.query(built[0], built[1]))
}

// A producer bound to a pg.Pool or client (or a pg config, for a pool of its
// own); opts.client in a call overrides it, e.g. with a client in a transaction.
// A pool, given or made, gets the library's 'error' listener (an idle
// connection lost is logged at warn with opts.logger, default console, and
// never kills the process); the application's own listeners stay.  On a
// pool, a call with idempotency keys is tried again while the database
// cannot be reached, for up to opts.retryFor seconds (see the top); the
// first failure of an outage is logged at warn, its end at info.
class Producer {
  constructor (db = {}, opts = {}) {
    this._retryFor = checkSeconds(opts.retryFor ?? 30, 'retryFor')
    this._outageSince = null
    if (db && typeof db.query === 'function') {
      this.db = db
      this._own = false
    } else {
      this.db = new pg.Pool(typeof db === 'string' ? { connectionString: db } : db)
      this._own = true
    }
    const logger = opts.logger ?? console
    this._logger = logger
    this._unguard = isPool(this.db)
      ? guardPool(this.db, (e) => {
        if (typeof logger.warn === 'function') {
          logger.warn(`jobq producer: an idle database connection was lost (${e && e.message}); ` +
            'the pool opens a new one when needed')
        }
      })
      : () => {}
  }

  async enqueue (kind, payload, opts = {}) {
    const { client, ...rest } = opts
    const db = client || this.db
    const [text, values] = enqueueSql(kind, payload, rest)
    return oneResult(await this._send(db, `enqueue ${kind}`, text, values, keyed(rest, false)))
  }

  async enqueueMany (kind, payloads, opts = {}) {
    const { client, ...rest } = opts
    const db = client || this.db
    const built = enqueueManySql(kind, payloads, rest)
    if (built === null) return []
    return manyResult(await this._send(db, `enqueueMany ${kind} (${payloads.length} jobs)`,
      built[0], built[1], keyed(rest, true)))
  }

  // Run the statement on db.  A client's is sent once, as given.  On a pool
  // it is its own transaction, on a pool client of its own (conn.statement):
  // a failure has jobqInDoubt (may it have committed?), and with keys for
  // every job it is sent again while the database cannot be reached.
  async _send (db, what, text, values, withKeys) {
    if (!isPool(db)) return db.query(text, values)
    const deadline = Date.now() + this._retryFor * 1000
    let inDoubt = false
    for (let i = 0; ; i++) {
      try {
        const r = await statement(db, text, values)
        this._reachable()
        return r
      } catch (e) {
        inDoubt = inDoubt || isInDoubt(e)
        if (e && typeof e === 'object') e.jobqInDoubt = inDoubt
        const left = deadline - Date.now()
        if (!withKeys || !isTransient(e) || left <= 0) throw e
        this._outage(e, what)
        await sleep(Math.min(backoffMs(i, 2000), left))
      }
    }
  }

  // A try failed because the database cannot be reached: logged at the
  // first of an outage.
  _outage (e, what) {
    if (this._outageSince !== null) return
    this._outageSince = Date.now()
    if (typeof this._logger.warn === 'function') {
      this._logger.warn(`jobq producer: the database cannot be reached (${what}: ${e && e.message}); ` +
        `enqueues with idempotency keys are tried again for up to ${this._retryFor} s`)
    }
  }

  // A statement went through: the end of an outage, if there was one.
  _reachable () {
    if (this._outageSince === null) return
    const s = ((Date.now() - this._outageSince) / 1000).toFixed(1)
    this._outageSince = null
    if (typeof this._logger.info === 'function') {
      this._logger.info(`jobq producer: the database answers again (after ${s} s)`)
    }
  }

  // Close the pool the producer made (a pool or client given is the caller's).
  async end () {
    this._unguard()
    if (this._own) await this.db.end()
  }
}

module.exports = { enqueue, enqueueMany, Producer }
