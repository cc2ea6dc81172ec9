'use strict'
// jobq-worker: a small jobq worker for Node.js, over the pg package.
//
// A Worker claims jobs of its queue in batches with jobq.claim(..., wait => ...),
// runs each job's handler (an async function looked up by kind), keeps the
// leases of running jobs alive from a heartbeat timer (jobq.extend), and
// reports the outcome:
//
//   handler resolves to a value      jobq.complete(job_id, token, result)
//   handler throws PermanentError    jobq.fail(..., retryable => false): the dead letter
//   handler throws RateLimited(s)    jobq.snooze(job_id, token, s): again after s
//                                    seconds, without spending a retry
//   handler throws anything else     jobq.fail(..., retryable => true): retried with
//                                    the queue's backoff while retries are left
//
// A handler saves progress with job.saveCheckpoint(data); the next attempt of
// the job finds it in job.checkpoint.
//
// SIGTERM (or SIGINT) stops claiming at once (a claim blocked in its wait is
// cancelled, which rolls it back: it claimed nothing), lets the running jobs
// finish and report, and resolves run() to 0.  A second signal, or
// shutdownTimeout seconds, abandons the jobs still running: each is failed
// with "abandoned at shutdown" and retry_in => 0, so it runs again at once (as
// after an expired lease, that attempt counts as a retry), and run() resolves
// to 1.
//
// Every call is its own transaction (autocommit) and no session state is
// used (pg sends unnamed statements), so the worker works through PgBouncer
// in transaction mode.  Connection settings: the pg config object given, or
// the libpq environment (PGHOST, PGPORT, PGDATABASE, PGUSER, ...).
//
// Ids and lease tokens are bigint: they stay strings here (a token does not
// fit in a JavaScript number).

const os = require('os')
const pg = require('pg')

class PermanentError extends Error {}

class RateLimited extends Error {
  constructor (retryAfter, message = 'rate limited') {
    super(message)
    this.retryAfter = Number(retryAfter)
  }
}

class LeaseLost extends Error {}

const seconds = (s) => `${Number(s)} seconds`

// Send a cancel request for the query running on client (as psql's ^C does).
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
  constructor (worker, row) {
    this.id = row.job_id
    this.leaseToken = row.lease_token
    this.kind = row.kind
    this.payload = row.payload
    this.retryCount = row.retry_count
    this.maxRetries = row.max_retries
    this.checkpoint = row.checkpoint
    this.lost = false // set by the heartbeat when the lease is gone
    this._worker = worker
  }

  // Store progress (a JSON object) for the next attempt of this job; throws
  // LeaseLost when the lease is no longer ours: stop working then.
  async saveCheckpoint (data) {
    const ok = await this._worker._call('SELECT jobq.checkpoint($1, $2, $3::jsonb) AS v',
      [this.id, this.leaseToken, JSON.stringify(data)])
    if (!ok) {
      this.lost = true
      throw new LeaseLost(`job ${this.id}: lease lost`)
    }
    this.checkpoint = data
  }
}

class Worker {
  constructor (handlers, opts = {}) {
    this.handlers = { ...handlers }
    this.queue = opts.queue || 'default'
    this.workerId = opts.workerId || `${os.hostname()}:${process.pid}`
    this.batch = opts.batch || 10
    this.concurrency = opts.concurrency || this.batch
    this.lease = opts.lease || 30
    this.wait = opts.wait ?? 5
    this.shutdownTimeout = opts.shutdownTimeout ?? 30
    this.connection = { application_name: 'jobq-worker', ...(opts.connection || {}) }
    this.log = opts.log || ((level, msg) => console.error(`${new Date().toISOString()} ${level} ${msg}`))
    this._claimClient = null // claims only
    this._client = null // handlers and heartbeat (pg queues their queries)
    this._clientP = null // _client while it connects
    this._inflight = new Map() // job id -> Job
    this._stopping = false // set by the first signal
    this._abandon = false // set by the second signal
    this._claiming = null // the claim client while a claim runs
    this._wake = null // resolves the main loop's sleep
  }

  async _connect () {
    const c = new pg.Client(this.connection)
    c.on('error', (e) => {
      this.log('ERROR', `${this.workerId}: connection lost: ${e.message}`)
      c._jobqBroken = true
    })
    await c.connect()
    return c
  }

  // The shared connection, (re)connected when needed.
  async _ops () {
    if (this._client && !this._client._jobqBroken) return this._client
    if (this._client) {
      this._client.end().catch(() => {})
      this._client = null
    }
    if (!this._clientP) {
      this._clientP = this._connect().then(
        (c) => { this._client = c; this._clientP = null; return c },
        (e) => { this._clientP = null; throw e })
    }
    return this._clientP
  }

  // Run one statement on the shared connection; return column v of row 1.
  async _call (sql, params) {
    const r = await (await this._ops()).query(sql, params)
    return r.rows.length ? r.rows[0].v : null
  }

  _notify () {
    if (this._wake) {
      const w = this._wake
      this._wake = null
      w()
    }
  }

  _sleep (ms) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms)
      this._wake = () => { clearTimeout(t); resolve() }
    })
  }

  _onSignal (sig) {
    if (!this._stopping) {
      this._stopping = true
      this.log('INFO', `${this.workerId}: ${sig}: no more claims; finishing ${this._inflight.size} running job(s)`)
      // Cancel a claim blocked in its wait.  A claim that already returned
      // is not affected: its jobs are then run and reported.
      if (this._claiming) sendCancel(this._claiming)
    } else {
      this._abandon = true
      this.log('WARNING', `${this.workerId}: second signal: abandoning running jobs`)
    }
    this._notify()
  }

  // Work until a signal; resolve to the process exit status (0: graceful).
  async run () {
    const onSignal = (sig) => this._onSignal(sig)
    process.on('SIGTERM', onSignal)
    process.on('SIGINT', onSignal)
    const kinds = Object.keys(this.handlers).sort()
    const heartbeat = setInterval(() => this._heartbeat(), Math.max(this.lease / 3, 0.1) * 1000)
    this.log('INFO', `${this.workerId}: queue ${this.queue}, kinds ${kinds.join(',')}, ` +
      `batch ${this.batch}, lease ${this.lease}s, wait ${this.wait}s`)
    try {
      while (!this._stopping) {
        const free = this.concurrency - this._inflight.size
        if (free <= 0) {
          await this._sleep(200)
          continue
        }
        for (const job of await this._claim(Math.min(free, this.batch), kinds)) {
          this._inflight.set(job.id, job)
          this._runJob(job)
        }
      }
      return await this._drain()
    } finally {
      clearInterval(heartbeat)
      process.off('SIGTERM', onSignal)
      process.off('SIGINT', onSignal)
      for (const c of [this._claimClient, this._client]) {
        if (c) await c.end().catch(() => {})
      }
    }
  }

  // Claim up to n jobs, blocking up to this.wait; [] on a cancel or an error.
  async _claim (n, kinds) {
    let client
    try {
      if (!this._claimClient || this._claimClient._jobqBroken) {
        this._claimClient = null
        this._claimClient = await this._connect()
      }
      client = this._claimClient
      if (this._stopping) return []
      this._claiming = client
      const r = await client.query(
        `SELECT job_id, lease_token, kind, payload, retry_count, max_retries, checkpoint
           FROM jobq.claim($1, worker_id => $2, batch => $3, lease => $4::interval,
                           kinds => $5::text[], wait => $6::interval)`,
        [this.queue, this.workerId, n, seconds(this.lease), kinds, seconds(this.wait)])
      return r.rows.map((row) => new Job(this, row))
    } catch (e) {
      if (e.code === '57014') return [] // our own cancel at shutdown: nothing was claimed
      this.log('ERROR', `${this.workerId}: claim failed: ${e.message}; retrying in 1 s`)
      if (client) client._jobqBroken = true
      await this._sleep(1000)
      return []
    } finally {
      this._claiming = null
    }
  }

  // After the first signal: wait for running jobs; 0 if all finished.
  async _drain () {
    const deadline = Date.now() + this.shutdownTimeout * 1000
    while (this._inflight.size && !this._abandon && Date.now() < deadline) {
      await this._sleep(Math.min(200, deadline - Date.now()))
    }
    const left = [...this._inflight.values()]
    for (const job of left) {
      try {
        await this._call("SELECT jobq.fail($1, $2, $3, retry_in => '0') AS v",
          [job.id, job.leaseToken, 'abandoned at shutdown'])
        this.log('WARNING', `${this.workerId}: job ${job.id} (${job.kind}) abandoned, to run again`)
      } catch (e) {
        this.log('ERROR', `${this.workerId}: job ${job.id}: could not release it (${e.message}); its lease will expire`)
      }
    }
    this.log('INFO', `${this.workerId}: stopped${left.length ? `, ${left.length} job(s) abandoned` : ''}`)
    return left.length ? 1 : 0
  }

  // Extend the lease of every running job (every lease/3 seconds).
  async _heartbeat () {
    const jobs = [...this._inflight.values()]
    if (!jobs.length) return
    try {
      const r = await (await this._ops()).query(
        `SELECT t.id::text AS id, jobq.extend(t.id, t.token, $1::interval) AS expires
           FROM unnest($2::bigint[], $3::bigint[]) AS t(id, token)`,
        [seconds(this.lease), jobs.map((j) => j.id), jobs.map((j) => j.leaseToken)])
      for (const row of r.rows) {
        const job = this._inflight.get(row.id)
        if (row.expires === null && job) { // not merely finished meanwhile
          job.lost = true
          this.log('WARNING', `${this.workerId}: job ${row.id}: lease lost`)
        }
      }
    } catch (e) {
      this.log('ERROR', `${this.workerId}: heartbeat failed: ${e.message}`)
    }
  }

  // Run one job's handler and report its outcome.
  async _runJob (job) {
    const t0 = Date.now()
    let outcome
    try {
      let result
      let error
      try {
        result = await this.handlers[job.kind](job)
      } catch (e) {
        error = e
      }
      if (error === undefined) {
        const ok = await this._call('SELECT jobq.complete($1, $2, $3::jsonb) AS v',
          [job.id, job.leaseToken, result === undefined ? null : JSON.stringify(result)])
        outcome = ok ? 'completed' : null
      } else if (error instanceof PermanentError) {
        outcome = await this._call('SELECT jobq.fail($1, $2, $3, retryable => false) AS v',
          [job.id, job.leaseToken, `PermanentError: ${error.message}`])
      } else if (error instanceof RateLimited) {
        const until = await this._call('SELECT jobq.snooze($1, $2, $3::interval) AS v',
          [job.id, job.leaseToken, seconds(error.retryAfter)])
        outcome = until ? 'snoozed' : null
      } else if (error instanceof LeaseLost) {
        outcome = null
      } else {
        outcome = await this._call('SELECT jobq.fail($1, $2, $3) AS v',
          [job.id, job.leaseToken, `${error?.name || 'Error'}: ${error?.message ?? error}`])
      }
      if (outcome == null) {
        this.log('WARNING', `${this.workerId}: job ${job.id} (${job.kind}): lease lost, outcome discarded`)
      } else {
        this.log('INFO', `${this.workerId}: job ${job.id} (${job.kind}) attempt ${job.retryCount + 1}: ` +
          `${outcome} in ${((Date.now() - t0) / 1000).toFixed(3)}s`)
      }
    } catch (e) {
      // The report did not reach the database: the lease expires and the
      // job runs again (at least once).
      this.log('ERROR', `${this.workerId}: job ${job.id}: could not report (${e.message})`)
    } finally {
      this._inflight.delete(job.id)
      this._notify()
    }
  }
}

module.exports = { Worker, Job, PermanentError, RateLimited, LeaseLost }
