'use strict'
// Shared by the test files: the package under test, a direct pool for
// checks, the connection the library uses (direct or through pgbouncer, set
// by run.sh), queue names of our own, polling, a logger that keeps lines.

const path = require('path')
const fs = require('fs')
const net = require('net')
const os = require('os')
const PKG = process.env.JOBQ_PKG || path.join(__dirname, '../../../clients/node')
const jobq = require(PKG)
const pg = require(require.resolve('pg', { paths: [PKG] }))

const via = process.env.JOBQ_VIA || 'direct'
// what the library connects to (pgbouncer's port when via = pgbouncer)
const libConfig = { port: Number(process.env.JOBQ_LIB_PORT || process.env.PGPORT || 5432) }
// checks always look at the server itself
const direct = new pg.Pool({ max: 4 })
direct.on('error', () => {})

let seq = 0
// A queue name of this run's own.
function queueName (what) {
  return `nd_${via === 'direct' ? 'd' : 'b'}_${process.pid}_${what}_${++seq}`
}

// Run SQL directly; resolve to its rows.
async function q (sql, params) {
  return (await direct.query(sql, params)).rows
}

// Wait until fn() resolves truthy (every 50 ms), at most ms; resolve to its value.
async function poll (fn, ms = 30000, what = 'condition') {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await sleep(50)
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

// A logger that keeps its lines (and prints nothing).
function memLogger () {
  const lines = []
  const log = (level) => (msg) => lines.push(`${level} ${msg}`)
  return { lines, debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') }
}

// The ledger: one row per handler run, its start and end on the server's clock.
async function ledgerTable () {
  await q(`CREATE TABLE IF NOT EXISTS node_ledger (
             run bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             queue text NOT NULL, job_id bigint NOT NULL, kind text, worker text,
             started_at timestamptz NOT NULL DEFAULT clock_timestamp(), finished_at timestamptz)`)
}

// Record the start of a handler run; resolve to a function recording its end.
async function ledgerStart (job, worker = '') {
  const r = await q('INSERT INTO node_ledger (queue, job_id, kind, worker) VALUES ($1, $2, $3, $4) RETURNING run',
    [job.queue, job.id, job.kind, worker])
  return () => q('UPDATE node_ledger SET finished_at = clock_timestamp() WHERE run = $1', [r[0].run])
}

// The most runs of queue's ledger that overlapped at one time.
async function maxOverlap (queue) {
  const r = await q(`SELECT coalesce(max(n), 0)::int AS n FROM (
                       SELECT (SELECT count(*) FROM node_ledger b
                                WHERE b.queue = a.queue AND b.started_at <= a.started_at
                                  AND coalesce(b.finished_at, 'infinity') > a.started_at) AS n
                         FROM node_ledger a WHERE a.queue = $1) s`, [queue])
  return r[0].n
}

// A proxy in front of what the library connects to (the server or
// pgbouncer), on a Unix socket of its own; its config is { host, port } for
// pg.  proxy.killAll() cuts every connection (idle ones too: what a server
// restart does to a pool); proxy.trap(text) makes the next statement whose
// message contains text go through to the server, and then cuts its
// connection instead of passing the answer on (the statement committed, the
// client cannot know: in doubt).  proxy.trapped counts the cut statements;
// proxy.count(text) how many messages sent to the server so far contain text
// (a statement's text: how often it was sent).
async function proxy () {
  const dir = fs.mkdtempSync(path.join(process.env.JOBQ_TMP || os.tmpdir(), 'proxy-'))
  const port = 5432
  const upstream = path.join(process.env.PGHOST, `.s.PGSQL.${libConfig.port}`)
  const pairs = new Set()
  const traps = []
  const sent = [] // what clients sent, chunk by chunk
  const p = { config: { host: dir, port }, trapped: 0 }
  const server = net.createServer((c) => {
    const u = net.connect({ path: upstream })
    const pair = { c, u }
    pairs.add(pair)
    let armed = null
    const kill = () => { c.destroy(); u.destroy(); pairs.delete(pair) }
    c.on('data', (d) => {
      sent.push(d)
      const i = traps.findIndex((t) => d.includes(t))
      if (i >= 0) { armed = traps[i]; traps.splice(i, 1) }
      u.write(d)
    })
    u.on('data', (d) => {
      if (armed) {
        p.trapped++
        kill()
        return
      }
      c.write(d)
    })
    c.on('error', kill)
    u.on('error', kill)
    c.on('close', kill)
    u.on('close', kill)
  })
  await new Promise((resolve) => server.listen(path.join(dir, `.s.PGSQL.${port}`), resolve))
  p.killAll = () => { for (const { c, u } of pairs) { c.destroy(); u.destroy() } pairs.clear() }
  p.trap = (text) => traps.push(Buffer.from(text))
  p.count = (text) => {
    let n = 0
    for (const d of sent) for (let i = d.indexOf(text); i >= 0; i = d.indexOf(text, i + 1)) n++
    return n
  }
  p.close = async () => {
    p.killAll()
    await new Promise((resolve) => server.close(resolve))
    fs.rmSync(dir, { recursive: true, force: true })
  }
  return p
}

module.exports = { jobq, pg, PKG, via, libConfig, direct, queueName, q, poll, sleep, memLogger, ledgerTable, ledgerStart, maxOverlap, proxy }
