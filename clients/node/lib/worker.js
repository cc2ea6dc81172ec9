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
// Claiming ahead.  A claim takes a round trip, and slots that free during it
// would stay idle until it returns; so a loop claims up to `prefetch` jobs
// beyond the free slots.  They wait, under lease (renewed with the running
// ones), and start in claim order as slots free.  By default (prefetch
// null) that is the number of jobs the handlers finish during one claim
// round trip, measured (Pace: completion rate times round trip, at most
// `concurrency`; `worker.ahead` is the number now): none for jobs much
// longer than a claim, which are never held back from other workers.
// prefetch 0 turns it off.  At stop() the waiting jobs are handed back at
// once, and so are the jobs of a claim that comes back after it; they are
// not counted in handedBack (they never started).
//
// Leases.  Every lease * renewEvery seconds (every 15 s at least) one
// statement extends the lease of every running job.  A NULL from jobq.extend (or false from
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
// `wait` seconds.  The pool (the worker's own or the one it was given) has
// the library's 'error' listener, and a client in use has one too, so a
// server restart or failover is an error to retry, not the end of the
// process.
//
// Outages.  A claim, a report or a renewal that fails because the database
// cannot be reached (lib/conn.js: isTransient) is tried again, claims and
// reports with backoff (100 ms doubling to 5 s, jittered): claims for as
// long as the worker runs, a report for up to REPORT_PATIENCE_MS or until
// the shutdown grace ends; then the job's lease expires and it runs again.
// A report whose connection died after it was sent (isInDoubt) may have
// committed: when the same statement, sent again with the same lease token,
// finds the lease gone, the job's row tells whether the first one did it
// (then it is done, not lost).  The first error of an outage is logged at
// warn, its end at info.
//
// Later servers.  What the server offers is looked up once per connection
// (lib/conn.js: featuresOf), so a restart, a failover or an ALTER EXTENSION
// UPDATE under a running worker is taken into account.  Where jobq.fail
// takes details, a failed attempt's stack (and its causes') goes there, at
// most 16 kB.  Where the server has the worker registry, the worker
// registers itself at start (library, version, host, pid, concurrency,
// queues, kinds), refreshes its row on the renewal timer (one statement per
// tick, none per job) and unregisters at the end; without it, none of this
// is sent.
//
// Encodings.  node-postgres reads and writes UTF-8 and asks for
// client_encoding UTF8, which the server converts from and to its own
// encoding (SQL_ASCII passes bytes through); at start the worker checks
// that a character outside ASCII makes the trip, and refuses to start with
// a clear message when it does not (a client_encoding set otherwise).

const os = require('os')
const util = require('util')
const pg = require('pg')
const {
  Permanent, RetryIn, Snooze, LeaseLost, HandlerTimeout, HandedBack, checkSeconds
} = require('./errors')
const {
  guardPool, isServerError, isTransient, isInDoubt, statement, sleep, backoffMs, fitBytes, asciiOnly
} = require('./conn')
const { version: VERSION } = require('../package.json')

const LEVELS = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 }
// How long a report (complete, fail, snooze) is tried again while the
// database cannot be reached; after that the job's lease expires and it
// runs again.
const REPORT_PATIENCE_MS = 5 * 60 * 1000
// The most bytes of a failure's story (its stack) sent as jobq.fail's details.
const DETAILS_MAX_BYTES = 16 * 1024
// The timer (lease renewals, the registry's heartbeat) fires every
// lease * renewEvery seconds, but at least this often: the registry shows a
// worker gone after jobq.worker_gone_after (default 1 min) without one.
const BEAT_MAX_S = 15

const interval = (s) => `${s} seconds`

// The encodings, checked at start.
const DETECT_SQL = `
SELECT pg_catalog.getdatabaseencoding() AS server_encoding,
       pg_catalog.current_setting('client_encoding') AS client_encoding`
// A character outside ASCII, there and back: what node-postgres sends and
// reads must be what the server takes it for.
const PROBE_SQL = `
SELECT pg_catalog.convert_from(pg_catalog.decode('c3a9', 'hex'), 'UTF8') AS back,
       $1::text = pg_catalog.convert_from(pg_catalog.decode('c3a9', 'hex'), 'UTF8') AS there`

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

// Send a cancel request for the statement running on client; resolve once
// the server (or PgBouncer) has closed the cancel connection, as libpq
// waits, or after 5 s.  Closing it earlier, e.g. by exiting right after
// stop(), crashes PgBouncer 1.18 ("bad client state: 0", fixed in 1.20).
function sendCancel (client) {
  return new Promise((resolve) => {
    const p = client.connectionParameters
    const con = new pg.Connection()
    const done = () => {
      clearTimeout(timer)
      resolve()
    }
    const timer = setTimeout(() => {
      con.stream.destroy() // no Terminate message on a cancel connection
      resolve()
    }, 5000)
    con.on('error', done)
    con.on('end', done)
    con.on('connect', () => con.cancel(client.processID, client.secretKey))
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

// How many jobs are worth claiming ahead: the jobs the handlers finish
// during one claim round trip (completion rate times round trip).
class Pace {
  constructor () {
    this.roundTrip = 0 // seconds, a moving average
    this.held = 0 // seconds a job holds its slot, a moving average
    this._rate = 0 // jobs finished per second, decaying with a memory of TAU
    this._at = performance.now()
    this._backlog = false // the last claim got all it asked for
  }

  // A claim came back after seconds with every job it asked for (full) or
  // not.  Only a claim that follows a full one counts: the queue had a
  // backlog, so it did not wait in the server for jobs to come.
  claimed (seconds, full) {
    if (full && this._backlog) {
      seconds = Math.min(seconds, 0.5)
      this.roundTrip = this.roundTrip === 0 ? seconds : 0.8 * this.roundTrip + 0.2 * seconds
    }
    this._backlog = full
  }

  _decayed (now) {
    return this._rate * Math.exp(-(now - this._at) / 1000 / Pace.TAU)
  }

  // A job gave its slot back after holding it held seconds.
  finished (held) {
    const now = performance.now()
    this._rate = this._decayed(now) + 1 / Pace.TAU
    this._at = now
    this.held = this.held === 0 ? held : 0.8 * this.held + 0.2 * held
  }

  // The jobs finished during one round trip, rounded up from a tenth of a
  // job (a slot idle a tenth of the time is worth one job ahead).  The rate
  // is at most each of the most slots finishing a job once per time a job
  // holds one: right after a finish the decaying rate reads about 1/TAU
  // whatever the jobs' length, and would have claimed ahead of jobs far
  // longer than a claim over a slow link (10 s jobs, a claim of 0.2 s).
  ahead (most) {
    let rate = this._decayed(performance.now())
    if (this.held > 0) rate = Math.min(rate, most / this.held)
    return Math.max(0, Math.min(most, Math.ceil(rate * this.roundTrip - 0.1)))
  }
}
Pace.TAU = 1 // seconds

class Worker {
  constructor (opts = {}) {
    const queues = opts.queues ?? [opts.queue ?? 'default']
    if (!Array.isArray(queues) || queues.length === 0) throw new TypeError('queues must be a non-empty array')
    this.queues = [...new Set(queues.map(String))]
    this.concurrency = Math.floor(opts.concurrency ?? 10)
    if (!(this.concurrency >= 1)) throw new TypeError('concurrency must be at least 1')
    this.batch = Math.max(1, Math.floor(opts.batch ?? this.concurrency))
    this.prefetch = opts.prefetch == null ? null : Math.floor(opts.prefetch)
    if (this.prefetch !== null && !(this.prefetch >= 0)) throw new TypeError('prefetch must be null (measured) or at least 0')
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
        // a claim per queue, a report or checkpoint per job, the timer's statement
        max: this.queues.length + this.concurrency + 1,
        // a server gone without a word (a failover, a cut cable) is noticed
        // within seconds, not the kernel's two hours
        keepAlive: true,
        keepAliveInitialDelayMillis: 10000,
        connectionTimeoutMillis: 30000,
        ...c
      })
      this._ownPool = true
    }
    // the pool's 'error' event (an idle connection lost) is logged, never fatal
    this._unguard = guardPool(this.pool, (e) => {
      this.log.warn(`${this.workerId}: an idle database connection was lost (${e && e.message}); ` +
        'the pool opens a new one when needed')
      this._hook('onError', e, { op: 'pool' })
    })
    this._handlers = new Map() // kind -> { fn, timeout }
    this._running = new Map() // job id -> { job, ac, state }
    this._reserved = 0 // places held by claims in flight
    this._waiting = [] // claimed ahead, waiting for a slot: { queue, row, lost }
    this._pace = new Pace()
    this._claims = new Set() // claims in flight: { client, cancelled }
    this._cancels = [] // cancel requests sent at stop(), until their connections close
    this._pending = [] // hand-backs of jobs claimed ahead, sent at stop()
    this._waiters = [] // resolved when a slot frees or on stop
    this._stopping = false
    this._stopped = new Promise((resolve) => { this._onStop = resolve }) // settles at stop()
    this._handedBack = 0
    this._done = null // the promise of run()
    this._graceTimer = null
    this._completions = [] // completions waiting for the next statement
    this._flushing = false // a completion statement is on its way
    this._giveUp = false // the grace period is over: reports are not tried again
    this._outageSince = null // when the database stopped answering, or null
    this._features = null // the server's encoding and what it offers, as seen at start (_detect)
    this._registered = false // a heartbeat went through
    this._registryRefused = false // register_worker refused: no more heartbeats
    this._registryFull = false // refused for the role's cap: tried again at each heartbeat
    this._beating = null // the beat in flight
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
    let beat = null
    try {
      await this._detect()
      this.log.info(`${this.workerId}: queues ${this.queues.join(',')}, kinds ${this.kinds.join(',')}, ` +
        `concurrency ${this.concurrency}, batch ${this.batch}, prefetch ${this.prefetch ?? 'measured'}, lease ${this.lease}s, wait ${this.wait}s`)
      await this._heartbeat()
      beat = setInterval(() => this._beat(), Math.max(Math.min(this.lease * this.renewEvery, BEAT_MAX_S), 0.05) * 1000)
      await Promise.all(this.queues.map((q) => this._loop(q)))
      while (this._running.size) await this._slotFreed()
      await Promise.all(this._pending)
      // no heartbeat after the unregister: one in flight could put the row back
      clearInterval(beat)
      beat = null
      if (this._beating) await this._beating.catch(() => {})
      await this._unregister()
      await Promise.all(this._cancels)
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
      this._unguard()
      if (this._ownPool) await this.pool.end().catch(() => {})
    }
  }

  // Stop claiming, let running jobs finish for grace seconds, hand back the
  // rest; a second call hands back at once.  Resolves when run() does.
  stop (opts = {}) {
    if (!this._stopping) {
      this._stopping = true
      this._onStop()
      const grace = checkSeconds(opts.grace ?? this.shutdownGrace, 'grace')
      this.log.info(`${this.workerId}: no more claims; finishing ${this._running.size} running job(s) ` +
        `(grace ${grace}s)`)
      for (const c of this._claims) {
        c.cancelled = true
        this._cancels.push(sendCancel(c.client))
      }
      // the jobs claimed ahead never started: back at once, not counted
      const ahead = this._waiting.filter((w) => !w.lost).map((w) => w.row)
      this._waiting = []
      if (ahead.length) this._pending.push(this._release(ahead, 'claimed ahead, not started', false))
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

  // One statement on a pool client of its own (see conn.statement).
  async _query (text, values) {
    const r = await statement(this.pool, text, values)
    this._reachable()
    return r
  }

  // A statement failed because the database cannot be reached: the first
  // failure of an outage is a warning, the others are debug lines.
  _outage (e, what) {
    if (this._outageSince === null) {
      this._outageSince = Date.now()
      this.log.warn(`${this.workerId}: the database cannot be reached (${what}: ${e && e.message}); ` +
        'claims and reports are tried again with backoff')
    } else {
      this.log.debug(`${this.workerId}: ${what}: ${e && e.message}; trying again`)
    }
  }

  // A statement went through: the end of an outage, if there was one.
  _reachable () {
    if (this._outageSince !== null) {
      const s = ((Date.now() - this._outageSince) / 1000).toFixed(1)
      this._outageSince = null
      this.log.info(`${this.workerId}: the database answers again (after ${s} s)`)
    }
  }

  // Learn what the server offers, and check that text makes the trip intact;
  // wait (with backoff) while the database cannot be reached.  Throws when
  // the session's encoding is one the library cannot work with.
  async _detect () {
    for (let i = 0; ; i++) {
      try {
        const r = (await this._query(DETECT_SQL)).rows[0]
        if (String(r.client_encoding).toUpperCase() !== 'UTF8') {
          throw new Error(`jobq: the session's client_encoding is ${r.client_encoding}, but node-postgres ` +
            'reads and writes UTF-8: leave client_encoding alone (no SET client_encoding on the pool\'s clients)')
        }
        try {
          const p = (await this._query(PROBE_SQL, ['é'])).rows[0]
          if (p.back !== 'é' || p.there !== true) {
            throw new Error(`jobq: text does not survive the trip to the server (encoding ${r.server_encoding}) ` +
              `and back: 'é' came back as '${p.back}'; leave client_encoding out of the pg config (UTF-8)`)
          }
        } catch (e) {
          // an encoding without the character (WIN1251, say) cannot tell
          if (!isServerError(e) || (e.code !== '22P05' && e.code !== '22021')) throw e
        }
        // what the server offers, as a connection of the pool sees it
        let f = null
        await this._query((features) => { f = features; return null })
        this._features = { serverEncoding: r.server_encoding, ...f }
        this.log.debug(`${this.workerId}: server encoding ${r.server_encoding}; ` +
          `jobq.fail details: ${f.failDetails ? 'yes' : 'no'}; worker registry: ${f.registry ? 'yes' : 'no'}`)
        return
      } catch (e) {
        if (!isTransient(e)) throw e
        this._outage(e, 'start')
        this._hook('onError', e, { op: 'start' })
        await sleep(backoffMs(i), this._stopped)
        if (this._stopping) return // stopped before the database answered: nothing to do
      }
    }
  }

  // What the registry shows of this worker.
  _info () {
    return {
      library: 'jobq-node',
      version: VERSION,
      host: os.hostname(),
      pid: process.pid,
      concurrency: this.concurrency,
      queues: this.queues,
      kinds: this.kinds
    }
  }

  // Register, or refresh the registry's row (a heartbeat), where the server
  // has the registry.  A refusal (a queue this role may not work on, say)
  // is logged once and ends the heartbeats; the worker runs on.  A refusal
  // for the role's cap (54000: jobq.max_app_workers of its workers alive),
  // or because another session of the role held its registrations up
  // (55P03), is logged once and tried again at every heartbeat, since room
  // comes back when the role's other workers stop.
  async _heartbeat () {
    if (!this._features || this._registryRefused) return
    try {
      await this._query((f) => f.registry
        ? ['SELECT jobq.register_worker($1::text, $2::text[], $3::jsonb)',
            [this.workerId, this.queues, JSON.stringify(this._info())]]
        : null)
      if (this._registryFull) this.log.info(`${this.workerId}: registered in jobq.app_workers`)
      this._registered = true
      this._registryFull = false
    } catch (e) {
      if (isTransient(e)) {
        this._outage(e, 'heartbeat')
      } else if (e.code === '54000' || e.code === '55P03') {
        if (!this._registryFull) {
          this.log.warn(`${this.workerId}: jobq.register_worker failed: ${e.message}; the worker runs on unregistered and tries again at every heartbeat`)
        }
        this._registryFull = true
      } else {
        this.log.warn(`${this.workerId}: jobq.register_worker failed: ${e.message}; the worker runs on unregistered`)
        this._registryRefused = true
      }
      this._hook('onError', e, { op: 'heartbeat' })
    }
  }

  // Leave the registry (at the end of run()), where the worker registered.
  async _unregister () {
    if (!this._registered) return
    try {
      await this._retrying('unregister', (f) => f.registry
        ? ['SELECT jobq.unregister_worker($1::text) AS v', [this.workerId]]
        : null, undefined, 10000, false)
    } catch (e) {
      this.log.warn(`${this.workerId}: jobq.unregister_worker failed: ${e.message}; ` +
        'the registry shows the worker gone once it misses its heartbeats')
      this._hook('onError', e, { op: 'unregister' })
    }
  }

  // The timer: renew the leases of running jobs, then the heartbeat.
  // this._beating is the beat in flight (null: none).
  _beat () {
    if (this._beating) return this._beating
    this._beating = (async () => {
      try {
        await this._renew()
        await this._heartbeat()
      } finally {
        this._beating = null
      }
    })()
    return this._beating
  }

  // How many jobs the worker claims ahead of its free slots now: prefetch,
  // or the measured number.
  get ahead () {
    return this.prefetch ?? this._pace.ahead(this.concurrency)
  }

  _free () {
    return this.concurrency + this.ahead - this._running.size - this._reserved - this._waiting.length
  }

  // A job gave its slot back after held seconds: the next waiting job takes it.
  _slotBack (held) {
    this._pace.finished(held)
    while (this._waiting.length && this._running.size < this.concurrency && !this._stopping) {
      const w = this._waiting.shift()
      if (w.lost) {
        this.log.warn(`${this.workerId}: job ${w.row.job_id} (${w.row.kind}): lease lost while it waited for a slot`)
        continue
      }
      this._launch(w.queue, w.row)
    }
    this._wake()
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
      this.log.warn(`${this.workerId}: hook ${name} threw: ${errorText(e)}`)
    }
  }

  // One queue's claim loop, until stop().
  async _loop (queue) {
    let idle = false
    let failures = 0
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
        const sent = performance.now()
        rows = await this._claim(queue, n, idle ? this.wait : 0)
        this._pace.claimed((performance.now() - sent) / 1000, !idle && rows.length === n)
        failures = 0
      } catch (e) {
        rows = []
        if (isTransient(e)) this._outage(e, `claim on queue ${queue}`)
        else this.log.error(`${this.workerId}: claim on queue ${queue} failed: ${e.message}; trying again`)
        this._hook('onError', e, { op: 'claim', queue })
        await sleep(backoffMs(failures++), this._stopped)
      } finally {
        this._reserved -= n
      }
      if (this._stopping) {
        // a claim that came back as stop() came: never started, not counted
        if (rows.length) await this._release(rows, 'claimed after stop', false)
        break
      }
      idle = rows.length === 0
      if (rows.length) this._hook('onClaim', { queue, count: rows.length })
      for (const row of rows) this._start(queue, row)
    }
  }

  // Claim up to n jobs of queue, sleeping up to wait seconds for one; [] when
  // cancelled by stop().
  async _claim (queue, n, wait) {
    let client
    try {
      client = await this.pool.connect()
    } catch (e) {
      if (e && typeof e === 'object') e.jobqSent = false
      throw e
    }
    const c = { client, cancelled: false }
    let broken = null
    // pg emits 'error' on a client whose connection dies, even under a
    // running query, and the pool does not listen while it is checked out
    const onError = (e) => { broken = broken || e }
    client.on('error', onError)
    try {
      if (this._stopping) return []
      this._claims.add(c)
      const r = await client.query(
        `SELECT job_id, lease_token, kind, payload, priority, retry_count, max_retries,
                checkpoint, enqueued_at, lease_expires_at
           FROM jobq.claim($1::text, worker_id => $2::text, batch => $3::integer,
                           lease => $4::interval, kinds => $5::text[], wait => $6::interval)`,
        [queue, this.workerId, n, interval(this.lease), this.kinds, interval(wait)])
      this._reachable()
      return r.rows
    } catch (e) {
      broken = broken || e
      if (c.cancelled && e.code === '57014') return [] // our cancel: it claimed nothing
      throw e
    } finally {
      this._claims.delete(c)
      client.removeListener('error', onError)
      // a connection we sent a cancel to is dropped: a late cancel must not
      // hit the next statement run on it
      client.release(c.cancelled || broken ? true : undefined)
    }
  }

  // Start running the job of a claimed row, or queue it for the next free
  // slot (claimed ahead).
  _start (queue, row) {
    if (this._running.size < this.concurrency) this._launch(queue, row)
    else this._waiting.push({ queue, row, lost: false })
  }

  _launch (queue, row) {
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
      this.log.error(`${this.workerId}: job ${job.id} (${job.kind}): could not report its outcome: ${e.message}; ` +
        'its lease will expire and it will run again')
      this._hook('onError', e, { op: 'report', job })
    } finally {
      clearTimeout(timer)
      const ms = Date.now() - rj.t0
      if (rj.state !== 'handedBack') {
        this._running.delete(job.id)
        this._slotBack(ms / 1000)
      }
      const e = rj.error
      this._hook('onFinish', job, outcome, ms, { error: e === undefined ? null : errorText(e), thrown: e })
    }
  }

  // Tell the database how the attempt ended; resolve to the outcome:
  // completed, retrying, failed, snoozed, or lost / handedBack (nothing sent).
  async _report (rj, result, error) {
    const { job } = rj
    const attempt = `job ${job.id} (${job.kind}) attempt ${job.attempt}`
    rj.error = error // for onFinish
    if (rj.state === 'lost') return 'lost'
    if (rj.state === 'handedBack') return 'handedBack'
    if (error instanceof LeaseLost) {
      rj.state = 'lost'
      return 'lost'
    }
    let json = null
    if (error === undefined && result !== undefined) {
      try {
        json = JSON.stringify(result)
      } catch (e) {
        // BigInt, a circular object, a toJSON that throws: this job's
        // result can never be sent, whatever runs it again
        error = unsendable(`the result is not JSON: ${errorText(e)}`, e)
      }
    }
    if (error === undefined) {
      let ok
      try {
        ok = await this._complete(job, json)
      } catch (e) {
        if (isTransient(e)) throw e // not delivered, in time
        // the server refused the result (over jobq.max_result_size, a
        // character its encoding lacks): for good, this job alone
        error = unsendable(`the result was refused: ${e.message}${isServerError(e) ? ` (SQLSTATE ${e.code})` : ''}`, e)
      }
      if (error === undefined) {
        if (!ok) {
          this.log.warn(`${this.workerId}: ${attempt}: lease lost; outcome discarded`)
          return 'lost'
        }
        this.log.debug(`${this.workerId}: ${attempt}: completed in ${Date.now() - rj.t0} ms`)
        return 'completed'
      }
    }
    rj.error = error // for onFinish
    let outcome
    if (error instanceof Snooze) {
      const { rows } = await this._retrying(`snooze job ${job.id}`, 'SELECT jobq.snooze($1, $2, $3::interval) AS v',
        [job.id, job.leaseToken, interval(error.seconds)])
      outcome = rows[0].v ? 'snoozed' : null
    } else {
      const text = errorText(error)
      const r = await this._fail(job, error, text)
      outcome = r == null ? null : r === 'pending' ? 'retrying' : 'failed'
      if (outcome === 'retrying') this.log.warn(`${this.workerId}: ${attempt} failed, to be retried: ${text}`)
      else if (outcome === 'failed') this.log.error(`${this.workerId}: ${attempt} failed for good (dead letter): ${text}`)
    }
    if (outcome === null) {
      this.log.warn(`${this.workerId}: ${attempt}: lease lost; outcome discarded`)
      return 'lost'
    }
    this.log.debug(`${this.workerId}: ${attempt}: ${outcome} in ${Date.now() - rj.t0} ms`)
    return outcome
  }

  // jobq.fail for an attempt that ended with error (text: errorText(error));
  // resolve to its answer ('pending', 'failed', or null: the lease is gone).
  async _fail (job, error, text) {
    let details = detailsOf(error)
    // the statement, with details where the connection's server takes them
    const send = (t, d) => this._retrying(`fail job ${job.id}`, (f) => {
      const values = [job.id, job.leaseToken, t]
      let args = ''
      if (error instanceof Permanent || (error && error.jobqPermanent)) {
        args += ', retryable => false'
      } else if (error instanceof RetryIn) {
        values.push(interval(error.seconds))
        args += `, retry_in => $${values.length}::interval`
      }
      if (f.failDetails) {
        values.push(d)
        args += `, details => $${values.length}::text`
      }
      return [`SELECT jobq.fail($1, $2, $3::text${args}) AS v`, values]
    })
    let res
    for (let tries = 1; ; tries++) {
      try {
        res = await send(text, details)
        break
      } catch (e) {
        if (!isServerError(e)) throw e
        const ascii = asciiOnly(text + details) === text + details
        if ((e.code === '22P05' || e.code === '22021') && !ascii) {
          // a character the server's encoding lacks (a euro sign in
          // LATIN1): the same story, in ASCII
          text = asciiOnly(text)
          details = asciiOnly(details)
        } else if (e.code !== '42883' || tries > 1) {
          throw e
        }
        // 42883: the connection's server lost the details argument since it
        // was looked up (conn.statement forgot it): again, as it is now
      }
    }
    let v = res.rows[0].v
    if (v == null && res.inDoubt) {
      // the first one may have gone through before its connection died
      const row = await this._jobRow(job)
      if (row && row.status !== 'running' && row.last_error &&
          (text.startsWith(row.last_error) || asciiOnly(text).startsWith(row.last_error))) {
        this.log.info(`${this.workerId}: job ${job.id}: its failure was recorded before the connection was lost`)
        v = row.status
      }
    }
    return v
  }

  // The job's row as jobq.jobs shows it, or null (not there, or no answer).
  async _jobRow (job) {
    try {
      const { rows } = await this._retrying(`look up job ${job.id}`,
        'SELECT status, retry_count, worker_id, last_error FROM jobq.jobs WHERE job_id = $1', [job.id])
      return rows[0] || null
    } catch (e) {
      this.log.warn(`${this.workerId}: job ${job.id}: could not look it up: ${e.message}`)
      return null
    }
  }

  // Run a statement, again while it fails because the database cannot be
  // reached, with backoff, for up to patienceMs (and, when stopAtGiveUp,
  // not after the shutdown grace ended).  Resolve to { rows, inDoubt }:
  // inDoubt when a failed try may have committed (isInDoubt).  The error
  // thrown has jobqInDoubt likewise.
  async _retrying (what, text, values, patienceMs = REPORT_PATIENCE_MS, stopAtGiveUp = true) {
    const deadline = Date.now() + patienceMs
    let inDoubt = false
    for (let i = 0; ; i++) {
      try {
        const r = await this._query(text, values)
        return { rows: r ? r.rows : [], inDoubt }
      } catch (e) {
        inDoubt = inDoubt || isInDoubt(e)
        if (e && typeof e === 'object') e.jobqInDoubt = inDoubt
        if (!isTransient(e) || (stopAtGiveUp && this._giveUp) || Date.now() > deadline) throw e
        this._outage(e, what)
        await sleep(backoffMs(i))
      }
    }
  }

  // Complete a job; resolve to jobq.complete's answer (true: completed).
  // Completions that arrive while one is on its way to the server go
  // together in the next statement (one transaction, one round trip), so a
  // busy worker reports many jobs per statement and an idle one sends each
  // at once.
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
          const { rows, inDoubt } = batch.length === 1
            ? await this._retrying(`complete job ${batch[0].job.id}`, 'SELECT 1 AS i, jobq.complete($1, $2, $3::jsonb) AS v',
              [batch[0].job.id, batch[0].job.leaseToken, batch[0].resultJson])
            : await this._retrying(`complete ${batch.length} jobs`,
              `SELECT t.i, jobq.complete(t.id, t.token, t.result) AS v
                 FROM unnest($1::bigint[], $2::bigint[], $3::jsonb[]) WITH ORDINALITY AS t(id, token, result, i)`,
              [batch.map((c) => c.job.id), batch.map((c) => c.job.leaseToken), batch.map((c) => c.resultJson)])
          const ok = new Map(rows.map((row) => [Number(row.i), row.v]))
          const answers = batch.map((c, i) => ok.get(i + 1) ?? false)
          if (inDoubt) await this._confirmCompleted(batch, answers)
          batch.forEach((c, i) => c.resolve(answers[i]))
        } catch (e) {
          if (batch.length === 1 || isTransient(e)) {
            for (const c of batch) c.reject(e)
          } else {
            // one bad result (too large, say) must not fail the others: one by one
            this.log.warn(`${this.workerId}: ${batch.length} completions in one statement failed (${e.message}); ` +
              'sending them one by one')
            for (const c of batch) {
              this._retrying(`complete job ${c.job.id}`, 'SELECT jobq.complete($1, $2, $3::jsonb) AS v',
                [c.job.id, c.job.leaseToken, c.resultJson])
                .then(async ({ rows, inDoubt }) => {
                  const answers = [rows[0].v]
                  if (inDoubt) await this._confirmCompleted([c], answers)
                  return answers[0]
                })
                .then(c.resolve, c.reject)
            }
          }
        }
      }
    } finally {
      this._flushing = false
    }
  }

  // A completion sent again after its connection died under it answers
  // false when the first one committed (the lease token is spent): the
  // job's row tells, and such a job is done, not lost.  answers is updated.
  async _confirmCompleted (batch, answers) {
    for (let i = 0; i < batch.length; i++) {
      if (answers[i]) continue
      const { job } = batch[i]
      const row = await this._jobRow(job)
      if (row && row.status === 'completed' && row.retry_count === job.retryCount && row.worker_id === this.workerId) {
        this.log.info(`${this.workerId}: job ${job.id}: its completion had committed before the connection was lost`)
        answers[i] = true
      }
    }
  }

  // Extend the lease of every running job, and of those waiting for a slot
  // (on the timer).
  async _renew () {
    const jobs = [...this._running.values()].filter((rj) => rj.state === 'running').map((rj) => rj.job)
    const waiting = this._waiting.filter((w) => !w.lost)
    if (!jobs.length && !waiting.length) return
    try {
      const r = await this._query(
        `SELECT t.id AS id, jobq.extend(t.id, t.token, $1::interval) AS until
           FROM unnest($2::bigint[], $3::bigint[]) AS t(id, token)`,
        [interval(this.lease), jobs.map((j) => j.id).concat(waiting.map((w) => w.row.job_id)),
          jobs.map((j) => j.leaseToken).concat(waiting.map((w) => w.row.lease_token))])
      const until = new Map(r.rows.map((row) => [row.id, row.until]))
      for (const w of waiting) {
        const u = until.get(w.row.job_id)
        if (u === null) w.lost = true
        else if (u !== undefined) w.row.lease_expires_at = u
      }
      for (const row of r.rows) {
        const rj = this._running.get(row.id)
        if (!rj) continue
        if (row.until === null) this._lost(row.id, new LeaseLost(`job ${row.id}: lease lost`))
        else rj.job.leaseExpiresAt = row.until
      }
      this._hook('onRenew', { count: jobs.length })
    } catch (e) {
      if (isTransient(e)) this._outage(e, 'lease renewal')
      else this.log.error(`${this.workerId}: lease renewal failed: ${e.message}`)
      this._hook('onError', e, { op: 'renew' })
    }
  }

  // Hand back every job still running (grace over, or a second stop()).
  async _handBackAll () {
    this._giveUp = true
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
  // retry spent; counted in handedBack unless count is false.
  async _release (rows, why, count = true) {
    try {
      const { rows: r } = await this._retrying('hand back',
        `SELECT count(*) FILTER (WHERE jobq.release(t.id, t.token))::integer AS n
           FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)`,
        [rows.map((x) => x.job_id), rows.map((x) => x.lease_token)], 10000, false)
      if (count) this._handedBack += r[0].n
      this.log[count ? 'warn' : 'info'](`${this.workerId}: handed back ${r[0].n} job(s) ${why}: ` +
        rows.map((x) => x.job_id).join(', '))
    } catch (e) {
      this.log.error(`${this.workerId}: could not hand back job(s) ${rows.map((x) => x.job_id).join(', ')}: ` +
        `${e.message}; their leases will expire`)
      this._hook('onError', e, { op: 'release' })
    }
  }
}

// An attempt that failed for a reason no retry can change (its result
// cannot be sent): jobq.fail(..., retryable => false).
function unsendable (message, cause) {
  const e = new Error(message, { cause })
  e.jobqPermanent = true
  return e
}

// A thrown value as text, whatever it is.
function describe (v) {
  if (typeof v === 'string') return v
  try {
    const s = JSON.stringify(v)
    if (s !== undefined) return s
  } catch (e) {}
  try {
    return util.inspect(v, { depth: 4, breakLength: Infinity }) // BigInt, circular: as Node shows them
  } catch (e) {
    return '(a value that cannot be shown)'
  }
}

// v as text, whatever it is: a handler's error may carry a Symbol, or an
// object whose toString throws, where a string is expected.
function text (v) {
  try {
    return String(v)
  } catch (e) {
    return describe(v)
  }
}

// A property of a handler's error; undefined when its getter throws.
function prop (e, name) {
  try {
    return e[name]
  } catch (x) {
    return undefined
  }
}

// What a failed attempt leaves in last_error: the error's class and message.
function errorText (e) {
  if (e instanceof Error) return `${text(prop(e, 'name') || 'Error')}: ${text(prop(e, 'message'))}`
  return `thrown: ${describe(e)}`
}

// A failed attempt's story for jobq.fail's details: the stack, and the
// stacks of its causes, at most DETAILS_MAX_BYTES bytes, cut on a
// character boundary.
function detailsOf (e) {
  let s = e instanceof Error ? text(prop(e, 'stack') || errorText(e)) : errorText(e)
  let c = e instanceof Error ? prop(e, 'cause') : undefined
  for (let depth = 0; c !== undefined && c !== null && depth < 5; depth++) {
    s += '\nCaused by: ' + (c instanceof Error ? text(prop(c, 'stack') || errorText(c)) : describe(c))
    c = c instanceof Error ? prop(c, 'cause') : undefined
    if (s.length > 4 * DETAILS_MAX_BYTES) break
  }
  return fitBytes(s, DETAILS_MAX_BYTES)
}

module.exports = { Worker, Job, Pace, errorText, detailsOf, DETAILS_MAX_BYTES }
