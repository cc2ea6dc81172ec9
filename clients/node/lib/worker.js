'use strict'
// The worker: claims jobs of its queues, runs the handler registered for
// each job's kind, keeps the leases of running jobs alive, reports outcomes,
// and shuts down without leaving a lease to expire.
//
// Slots.  `concurrency` jobs run at once, over all queues.  Each queue has
// one claim loop; a loop reserves the slots it claims for before it claims,
// so the limit holds however claims and finishes interleave.  While jobs
// are ready a loop claims up to min(free slots, batch) without waiting; when
// a claim comes back empty it switches to claiming one job with
// wait => `wait` seconds, sleeping in the server (no busy loop, no LISTEN)
// until a job is ready, and back to batches once it gets one.
//
// Leases.  Every lease * renewEvery seconds one statement extends the lease
// of every running job.  A NULL from jobq.extend (or false from
// jobq.checkpoint) means the lease is lost: the job's signal is aborted
// with LeaseLost and its outcome is discarded.
//
// Shutdown.  stop() (SIGTERM, SIGINT) stops claiming at once (a claim
// sleeping in its wait gets a cancel request, which rolls it back, and its
// connection is discarded), lets the running jobs finish for up to
// `shutdownGrace` seconds, then hands back the rest with jobq.release: pending
// again at once, no retry spent.  A second stop() hands back at once.  Jobs
// a claim returned after the stop are handed back unstarted.
//
// Reports.  Completions that finish while another is on its way to the
// server go together in the next statement (jobq.complete over unnest), so
// a busy worker pays one round trip for many jobs; fail, snooze and the rest
// are one statement each.
//
// Connections.  Every call is one statement in its own transaction, with
// unnamed statements and no session state, so the worker runs through
// PgBouncer in transaction mode.  A claim holds a pool connection for up to
// `wait` seconds; reports and lease renewals use pool.query.

const os = require('os')
const pg = require('pg')
const {
  Permanent, RetryIn, Snooze, LeaseLost, HandlerTimeout, HandedBack, checkSeconds
} = require('./errors')

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 }

const interval = (s) => `${s} seconds`
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// A logger that passes messages at or above level to logger's methods.
function levelled (logger, level) {
  if (!(level in LEVELS)) throw new TypeError(`unknown logLevel "${level}"`)
  const min = LEVELS[level]
  const out = {}
  for (const name of ['debug', 'info', 'warn', 'error']) {
    const fn = typeof logger[name] === 'function' ? logger[name].bind(logger) : () => {}
    out[name] = LEVELS[name] >= min ? (msg) => fn(msg) : () => {}
  }
  return out
}

// Send a cancel request for the statement running on client.
function sendCancel (client) {
  return new Promise((resolve) => {
    const p = client.connectionParameters
    const con = new pg.Connection()
    con.on('error', () => resolve())
    con.on('connect', () => {
      con.cancel(client.processID, client.secretKey)
      resolve()
    })
    if (String(p.host).startsWith('/')) con.connect(`${p.host}/.s.PGSQL.${p.port}`)
    else con.connect(p.port, p.host)
  })
}

// One claimed job, as its handler sees it.
class Job {
  constructor (worker, queue, row, signal) {
    this.id = row.job_id // bigint: a string
    this.leaseToken = row.lease_token // bigint: a string
    this.queue = queue
    this.kind = row.kind
    this.payload = row.payload
    this.priority = row.priority
    this.retryCount = row.retry_count
    this.attempt = row.retry_count + 1
    this.maxRetries = row.max_retries
    this.lastCheckpoint = row.checkpoint // what an earlier attempt saved, or null
    this.enqueuedAt = row.enqueued_at
    this.leaseExpiresAt = row.lease_expires_at
    this.signal = signal // aborted on timeout, lost lease, hand-back
    this._worker = worker
  }

  // Save progress (a JSON object) for the next attempt; throws LeaseLost
  // when the lease is gone.
  async checkpoint (data) {
    const r = await this._worker._query('SELECT jobq.checkpoint($1, $2, $3::jsonb) AS ok',
      [this.id, this.leaseToken, JSON.stringify(data)])
    if (!r.rows[0].ok) {
      const e = new LeaseLost(`job ${this.id}: lease lost`)
      this._worker._lost(this.id, e)
      throw e
    }
    this.lastCheckpoint = data
  }

  // Extend this job's lease to now() + seconds (default: the worker's lease).
  async extend (seconds) {
    const s = checkSeconds(seconds ?? this._worker.lease, 'extend seconds')
    const r = await this._worker._query('SELECT jobq.extend($1, $2, $3::interval) AS until',
      [this.id, this.leaseToken, interval(s)])
    if (r.rows[0].until === null) {
      const e = new LeaseLost(`job ${this.id}: lease lost`)
      this._worker._lost(this.id, e)
      throw e
    }
    this.leaseExpiresAt = r.rows[0].until
    return this.leaseExpiresAt
  }
}

class Worker {
  constructor (opts = {}) {
    const queues = opts.queues ?? [opts.queue ?? 'default']
    if (!Array.isArray(queues) || queues.length === 0) throw new TypeError('queues must be a non-empty array')
    this.queues = [...new Set(queues.map(String))]
    this.concurrency = Math.floor(opts.concurrency ?? 10)
    if (!(this.concurrency >= 1)) throw new TypeError('concurrency must be at least 1')
    this.batch = Math.max(1, Math.floor(opts.batch ?? this.concurrency))
    this.lease = checkSeconds(opts.lease ?? 30, 'lease')
    this.renewEvery = opts.renewEvery ?? 1 / 3
    if (!(this.renewEvery > 0 && this.renewEvery < 1)) throw new TypeError('renewEvery must be between 0 and 1')
    this.wait = checkSeconds(opts.wait ?? 5, 'wait')
    this.timeout = opts.timeout == null ? null : checkSeconds(opts.timeout, 'timeout')
    this.shutdownGrace = checkSeconds(opts.shutdownGrace ?? 30, 'shutdownGrace')
    this.workerId = opts.workerId ?? `${os.hostname()}:${process.pid}`
    this.handleSignals = opts.handleSignals ?? true
    this.hooks = opts.hooks ?? {}
    this.log = levelled(opts.logger ?? console, opts.logLevel ?? 'info')
    if (opts.pool) {
      this.pool = opts.pool
      this._ownPool = false
    } else {
      const c = typeof opts.connection === 'string' ? { connectionString: opts.connection } : (opts.connection ?? {})
      this.pool = new pg.Pool({
        application_name: 'jobq-worker',
        max: this.queues.length + this.concurrency + 1,
        ...c
      })
      this.pool.on('error', (e) => this.log.warn(`${this.workerId}: idle connection lost: ${e.message}`))
      this._ownPool = true
    }
    this._handlers = new Map() // kind -> { fn, timeout }
    this._running = new Map() // job id -> { job, ac, state }
    this._reserved = 0 // slots held by claims in flight
    this._claims = new Set() // claims in flight: { client, cancelled }
    this._waiters = [] // resolved when a slot frees or on stop
    this._stopping = false
    this._handedBack = 0
    this._done = null // the promise of run()
    this._graceTimer = null
    this._completions = [] // completions waiting for the next statement
    this._flushing = false // a completion statement is on its way
  }

  // Register fn (an async function of a Job) for jobs of kind; opts.timeout
  // (seconds) overrides the worker's.  Returns the worker.
  handle (kind, fn, opts = {}) {
    if (typeof kind !== 'string' || !kind) throw new TypeError('kind must be a non-empty string')
    if (typeof fn !== 'function') throw new TypeError('a handler must be a function')
    const timeout = opts.timeout == null ? null : checkSeconds(opts.timeout, 'timeout')
    this._handlers.set(kind, { fn, timeout })
    return this
  }

  // The kinds with a handler, sorted.
  get kinds () {
    return [...this._handlers.keys()].sort()
  }

  // Work until stop(); resolve to { handedBack } (jobs handed back at shutdown).
  run () {
    if (this._done) return this._done
    if (this._handlers.size === 0) return Promise.reject(new Error('no handlers: call worker.handle(kind, fn) first'))
    this._done = this._run()
    return this._done
  }

  async _run () {
    const onSignal = (sig) => {
      this.log.info(`${this.workerId}: ${sig}`)
      this.stop()
    }
    if (this.handleSignals) {
      process.on('SIGTERM', onSignal)
      process.on('SIGINT', onSignal)
    }
    const beat = setInterval(() => this._renew(), Math.max(this.lease * this.renewEvery, 0.05) * 1000)
    this.log.info(`${this.workerId}: queues ${this.queues.join(',')}, kinds ${this.kinds.join(',')}, ` +
      `concurrency ${this.concurrency}, batch ${this.batch}, lease ${this.lease}s, wait ${this.wait}s`)
    try {
      await Promise.all(this.queues.map((q) => this._loop(q)))
      while (this._running.size) await this._slotFreed()
      this.log.info(`${this.workerId}: stopped` +
        (this._handedBack ? `; ${this._handedBack} job(s) handed back` : ''))
      return { handedBack: this._handedBack }
    } finally {
      clearInterval(beat)
      clearTimeout(this._graceTimer)
      if (this.handleSignals) {
        process.off('SIGTERM', onSignal)
        process.off('SIGINT', onSignal)
      }
      if (this._ownPool) await this.pool.end().catch(() => {})
    }
  }

  // Stop claiming, let running jobs finish for grace seconds, hand back the
  // rest; a second call hands back at once.  Resolves when run() does.
  stop (opts = {}) {
    if (!this._stopping) {
      this._stopping = true
      const grace = checkSeconds(opts.grace ?? this.shutdownGrace, 'grace')
      this.log.info(`${this.workerId}: no more claims; finishing ${this._running.size} running job(s) ` +
        `(grace ${grace}s)`)
      for (const c of this._claims) {
        c.cancelled = true
        sendCancel(c.client)
      }
      this._graceTimer = setTimeout(() => this._handBackAll(), grace * 1000)
      this._wake()
    } else {
      this.log.warn(`${this.workerId}: stopping again: handing back ${this._running.size} running job(s)`)
      clearTimeout(this._graceTimer)
      this._handBackAll()
    }
    return this._done ?? Promise.resolve({ handedBack: 0 })
  }

  // --- internals -------------------------------------------------------------

  _query (text, values) {
    return this.pool.query(text, values)
  }

  _free () {
    return this.concurrency - this._running.size - this._reserved
  }

  _slotFreed () {
    return new Promise((resolve) => this._waiters.push(resolve))
  }

  _wake () {
    const w = this._waiters
    this._waiters = []
    for (const resolve of w) resolve()
  }

  _hook (name, ...args) {
    const fn = this.hooks[name]
    if (typeof fn !== 'function') return
    try {
      fn(...args)
    } catch (e) {
      this.log.warn(`${this.workerId}: hook ${name} threw: ${e.message}`)
    }
  }

  // One queue's claim loop, until stop().
  async _loop (queue) {
    let idle = false
    while (!this._stopping) {
      const free = this._free()
      if (free <= 0) {
        await this._slotFreed()
        continue
      }
      const n = idle ? 1 : Math.min(free, this.batch)
      let rows
      this._reserved += n
      try {
        rows = await this._claim(queue, n, idle ? this.wait : 0)
      } catch (e) {
        this.log.error(`${this.workerId}: claim on queue ${queue} failed: ${e.message}; again in 1 s`)
        this._hook('onError', e, { op: 'claim', queue })
        rows = []
        await Promise.race([sleep(1000), this._slotFreedOrStop()])
      } finally {
        this._reserved -= n
      }
      if (this._stopping) {
        if (rows.length) await this._release(rows, 'claimed after stop')
        break
      }
      idle = rows.length === 0
      if (rows.length) this._hook('onClaim', { queue, count: rows.length })
      for (const row of rows) this._start(queue, row)
    }
  }

  _slotFreedOrStop () {
    return this._stopping ? Promise.resolve() : this._slotFreed()
  }

  // Claim up to n jobs of queue, sleeping up to wait seconds for one; [] when
  // cancelled by stop().
  async _claim (queue, n, wait) {
    const client = await this.pool.connect()
    const c = { client, cancelled: false }
    let broken = null
    try {
      if (this._stopping) return []
      this._claims.add(c)
      const r = await client.query(
        `SELECT job_id, lease_token, kind, payload, priority, retry_count, max_retries,
                checkpoint, enqueued_at, lease_expires_at
           FROM jobq.claim($1::text, worker_id => $2::text, batch => $3::integer,
                           lease => $4::interval, kinds => $5::text[], wait => $6::interval)`,
        [queue, this.workerId, n, interval(this.lease), this.kinds, interval(wait)])
      return r.rows
    } catch (e) {
      broken = e
      if (c.cancelled && e.code === '57014') return [] // our cancel: it claimed nothing
      throw e
    } finally {
      this._claims.delete(c)
      // a connection we sent a cancel to is dropped: a late cancel must not
      // hit the next statement run on it
      client.release(c.cancelled || broken ? true : undefined)
    }
  }

  // Start running the job of a claimed row.
  _start (queue, row) {
    const ac = new AbortController()
    const job = new Job(this, queue, row, ac.signal)
    const rj = { job, ac, state: 'running', t0: Date.now() }
    this._running.set(job.id, rj)
    this._execute(rj)
  }

  // Abort a running job's signal with reason (only while it runs).
  _abort (rj, state, reason) {
    if (rj.state !== 'running') return false
    rj.state = state
    rj.ac.abort(reason)
    return true
  }

  // The lease of job id is lost.
  _lost (id, e) {
    const rj = this._running.get(id)
    if (rj && this._abort(rj, 'lost', e)) {
      this.log.warn(`${this.workerId}: job ${id} (${rj.job.kind}): lease lost; its outcome will be discarded`)
    }
  }

  // Run a job's handler and report its outcome.
  async _execute (rj) {
    const { job } = rj
    const h = this._handlers.get(job.kind)
    const timeout = h?.timeout ?? this.timeout
    let timer = null
    let outcome = null
    this._hook('onStart', job)
    try {
      const aborted = new Promise((resolve, reject) => {
        job.signal.addEventListener('abort', () => reject(job.signal.reason), { once: true })
      })
      aborted.catch(() => {})
      if (timeout != null) {
        timer = setTimeout(() => this._abort(rj, 'timeout', new HandlerTimeout(timeout)), timeout * 1000)
      }
      let result
      let error
      try {
        if (!h) throw new Permanent(`no handler for kind ${job.kind}`)
        result = await Promise.race([Promise.resolve().then(() => h.fn(job)), aborted])
      } catch (e) {
        error = e ?? new Error(String(e))
      }
      clearTimeout(timer)
      if (rj.state === 'running') rj.state = 'reporting'
      outcome = await this._report(rj, result, error)
    } catch (e) {
      // the report did not reach the database: the lease expires and the
      // job runs again (at least once)
      outcome = 'unreported'
      this.log.error(`${this.workerId}: job ${job.id} (${job.kind}): could not report its outcome: ${e.message}`)
      this._hook('onError', e, { op: 'report', job })
    } finally {
      clearTimeout(timer)
      const ms = Date.now() - rj.t0
      if (rj.state !== 'handedBack') {
        this._running.delete(job.id)
        this._wake()
      }
      this._hook('onFinish', job, outcome, ms)
    }
  }

  // Tell the database how the attempt ended; resolve to the outcome:
  // completed, retrying, failed, snoozed, or lost / handedBack (nothing sent).
  async _report (rj, result, error) {
    const { job } = rj
    const attempt = `job ${job.id} (${job.kind}) attempt ${job.attempt}`
    if (rj.state === 'lost') return 'lost'
    if (rj.state === 'handedBack') return 'handedBack'
    if (error instanceof LeaseLost) {
      rj.state = 'lost'
      return 'lost'
    }
    let r
    let outcome
    let json = null
    if (error === undefined && result !== undefined) {
      try {
        json = JSON.stringify(result)
      } catch (e) {
        error = new Error(`the result is not JSON: ${e.message}`)
      }
    }
    if (error === undefined) {
      try {
        r = await this._complete(job, json)
        outcome = r ? 'completed' : null
      } catch (e) {
        if (!e.code) throw e // the server was not reached
        // the server refused the result (too large, say): the attempt failed
        error = new Error(`the result was refused: ${e.message}`)
      }
    }
    if (error === undefined) {
      // reported above
    } else if (error instanceof Snooze) {
      r = await this._retrying('SELECT jobq.snooze($1, $2, $3::interval) AS v',
        [job.id, job.leaseToken, interval(error.seconds)])
      outcome = r ? 'snoozed' : null
    } else {
      const text = errorText(error)
      if (error instanceof Permanent) {
        r = await this._retrying('SELECT jobq.fail($1, $2, $3, retryable => false) AS v',
          [job.id, job.leaseToken, text])
      } else if (error instanceof RetryIn) {
        r = await this._retrying('SELECT jobq.fail($1, $2, $3, retry_in => $4::interval) AS v',
          [job.id, job.leaseToken, text, interval(error.seconds)])
      } else {
        r = await this._retrying('SELECT jobq.fail($1, $2, $3) AS v', [job.id, job.leaseToken, text])
      }
      outcome = r == null ? null : r === 'pending' ? 'retrying' : 'failed'
      if (outcome) this.log.info(`${this.workerId}: ${attempt}: ${outcome}: ${text}`)
    }
    if (outcome === null) {
      this.log.warn(`${this.workerId}: ${attempt}: lease lost; outcome discarded`)
      return 'lost'
    }
    this.log.debug(`${this.workerId}: ${attempt}: ${outcome} in ${Date.now() - rj.t0} ms`)
    return outcome
  }

  // Run a reporting statement, again after a connection error (3 tries);
  // resolve to column v of its row (all rows when allRows).
  async _retrying (text, values, allRows = false) {
    for (let i = 1; ; i++) {
      try {
        const r = await this._query(text, values)
        return allRows ? r.rows : r.rows[0].v
      } catch (e) {
        if (i >= 3 || e.code) throw e // an SQL error is not retried
        await sleep(250 * i)
      }
    }
  }

  // Complete a job; resolve to jobq.complete's answer.  Completions that
  // arrive while one is on its way to the server go together in the next
  // statement (one transaction, one round trip), so a busy worker reports
  // many jobs per statement and an idle one sends each at once.
  _complete (job, resultJson) {
    return new Promise((resolve, reject) => {
      this._completions.push({ job, resultJson, resolve, reject })
      if (!this._flushing) this._flushCompletions()
    })
  }

  async _flushCompletions () {
    this._flushing = true
    try {
      while (this._completions.length) {
        const batch = this._completions.splice(0, 100)
        try {
          const r = batch.length === 1
            ? await this._retrying('SELECT 1 AS i, jobq.complete($1, $2, $3::jsonb) AS v',
              [batch[0].job.id, batch[0].job.leaseToken, batch[0].resultJson], true)
            : await this._retrying(
              `SELECT t.i, jobq.complete(t.id, t.token, t.result) AS v
                 FROM unnest($1::bigint[], $2::bigint[], $3::jsonb[]) WITH ORDINALITY AS t(id, token, result, i)`,
              [batch.map((c) => c.job.id), batch.map((c) => c.job.leaseToken), batch.map((c) => c.resultJson)], true)
          const ok = new Map(r.map((row) => [Number(row.i), row.v]))
          batch.forEach((c, i) => c.resolve(ok.get(i + 1) ?? false))
        } catch (e) {
          if (batch.length === 1 || !e.code) {
            for (const c of batch) c.reject(e)
          } else {
            // one bad result (too large, say) must not fail the others: one by one
            for (const c of batch) {
              this._retrying('SELECT jobq.complete($1, $2, $3::jsonb) AS v', [c.job.id, c.job.leaseToken, c.resultJson])
                .then(c.resolve, c.reject)
            }
          }
        }
      }
    } finally {
      this._flushing = false
    }
  }

  // Extend the lease of every running job (a timer, every lease * renewEvery).
  async _renew () {
    if (this._renewing) return
    const jobs = [...this._running.values()].filter((rj) => rj.state === 'running').map((rj) => rj.job)
    if (!jobs.length) return
    this._renewing = true
    try {
      const r = await this._query(
        `SELECT t.id AS id, jobq.extend(t.id, t.token, $1::interval) AS until
           FROM unnest($2::bigint[], $3::bigint[]) AS t(id, token)`,
        [interval(this.lease), jobs.map((j) => j.id), jobs.map((j) => j.leaseToken)])
      for (const row of r.rows) {
        const rj = this._running.get(row.id)
        if (!rj) continue
        if (row.until === null) this._lost(row.id, new LeaseLost(`job ${row.id}: lease lost`))
        else rj.job.leaseExpiresAt = row.until
      }
      this._hook('onRenew', { count: jobs.length })
    } catch (e) {
      this.log.error(`${this.workerId}: lease renewal failed: ${e.message}`)
      this._hook('onError', e, { op: 'renew' })
    } finally {
      this._renewing = false
    }
  }

  // Hand back every job still running (grace over, or a second stop()).
  async _handBackAll () {
    const rjs = [...this._running.values()].filter((rj) => this._abort(rj, 'handedBack', new HandedBack()))
    if (!rjs.length) return
    try {
      await this._release(rjs.map((rj) => ({ job_id: rj.job.id, lease_token: rj.job.leaseToken })), 'running at the end of the grace period')
    } finally {
      for (const rj of rjs) this._running.delete(rj.job.id)
      this._wake()
    }
  }

  // jobq.release the jobs of rows (job_id, lease_token): pending again now, no
  // retry spent.
  async _release (rows, why) {
    try {
      const r = await this._query(
        `SELECT count(*) FILTER (WHERE jobq.release(t.id, t.token))::integer AS n
           FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)`,
        [rows.map((x) => x.job_id), rows.map((x) => x.lease_token)])
      this._handedBack += r.rows[0].n
      this.log.warn(`${this.workerId}: handed back ${r.rows[0].n} job(s) ${why}: ` +
        rows.map((x) => x.job_id).join(', '))
    } catch (e) {
      this.log.error(`${this.workerId}: could not hand back job(s) ${rows.map((x) => x.job_id).join(', ')}: ` +
        `${e.message}; their leases will expire`)
      this._hook('onError', e, { op: 'release' })
    }
  }
}

// What a failed attempt leaves in last_error: the error's class and message.
function errorText (e) {
  if (e instanceof Error) return `${e.name || 'Error'}: ${e.message}`
  return `thrown: ${typeof e === 'string' ? e : JSON.stringify(e)}`
}

module.exports = { Worker, Job }
