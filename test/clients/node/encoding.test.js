'use strict'
// Server encodings: the library in databases of SQL_ASCII, LATIN1 and
// EUC_JP (run.sh makes them), with kinds, payloads, results and errors
// outside ASCII.  node-postgres asks for client_encoding UTF8 at every
// connection, so the server converts (LATIN1, EUC_JP) or passes bytes
// through (SQL_ASCII); a character the database cannot hold is refused by
// the server.  A session whose encoding is not UTF-8 after all is refused at
// start.

const { test, after } = require('node:test')
const assert = require('node:assert/strict')
const { jobq, pg, libConfig, direct, queueName, q, poll, memLogger } = require('./helpers')

const DBS = ['jobq_node_sql_ascii', 'jobq_node_latin1', 'jobq_node_euc_jp']
const pools = []
after(async () => {
  await Promise.all(pools.map((p) => p.end()))
  await direct.end()
})

function pool (config) {
  const p = new pg.Pool(config)
  p.on('error', () => {})
  pools.push(p)
  return p
}

// Can database db (through a direct connection) hold text s?
async function holds (check, s) {
  try {
    await check.query('SELECT $1::text', [s])
    return true
  } catch (e) {
    if (e.code === '22P05' || e.code === '22021') return false
    throw e
  }
}

const SAMPLES = { latin: 'Grüße, café', euro: 'price: 5 €', japanese: '日本語のテキスト' }

for (const db of DBS) {
  test(`in ${db}: kinds, payloads, results and errors outside ASCII make the trip intact; what the database cannot hold fails with the server's reason`, async () => {
    const check = pool({ database: db, max: 2 }) // the server itself, for checks
    const lib = pool({ ...libConfig, database: db, max: 8 })
    const encoding = (await check.query('SELECT pg_catalog.getdatabaseencoding() AS e')).rows[0].e
    const can = {}
    for (const [k, s] of Object.entries(SAMPLES)) can[k] = await holds(check, s)
    const queue = queueName('enc')
    const kind = (await holds(check, 'café.envoyer')) ? 'café.envoyer' : 'cafe.envoyer'
    const failKind = (await holds(check, 'échec')) ? 'échec' : 'echec'
    const word = can.latin ? SAMPLES.latin : SAMPLES.japanese
    const producer = new jobq.Producer(lib)
    const logger = memLogger()
    const w = new jobq.Worker({ pool: lib, queue, logger, logLevel: 'debug', handleSignals: false, wait: 1, concurrency: 4 })
      .handle(kind, async (job) => ({ echo: job.payload.t, kind: job.kind }))
      .handle(failKind, async (job) => { throw new Error(`${failKind}: ${job.payload.t}`) })
      .handle('unholdable.result', async (job) => ({ t: job.payload.t + ' €' }))
      .handle('unholdable.error', async () => { throw new Error('down by 5 €') })

    const ok = {}
    for (const [k, s] of Object.entries(SAMPLES)) {
      if (can[k]) {
        ok[k] = (await producer.enqueue(kind, { t: s }, { queue })).jobId
      } else {
        await assert.rejects(producer.enqueue(kind, { t: s }, { queue }), (e) => e.code === '22P05',
          `${encoding} cannot hold "${s}": the server refuses the enqueue`)
      }
    }
    const failing = (await producer.enqueue(failKind, { t: word }, { queue, maxRetries: 0 })).jobId
    const unholdable = {}
    if (!can.euro) {
      unholdable.result = (await producer.enqueue('unholdable.result', { t: 'x' }, { queue, maxRetries: 2 })).jobId
      unholdable.error = (await producer.enqueue('unholdable.error', {}, { queue, maxRetries: 0 })).jobId
    }
    const done = w.run()
    await poll(async () => (await check.query(`SELECT count(*)::int AS n FROM jobq.job WHERE queue = $1
                                                 AND status IN ('pending', 'running')`, [queue])).rows[0].n === 0,
    30000, 'the queue drained')
    await w.stop()
    await done
    assert.ok(logger.lines.some((l) => l.includes(`server encoding ${encoding}`)), logger.lines.join('\n'))

    for (const [k, id] of Object.entries(ok)) {
      const s = SAMPLES[k]
      // what the server holds is these characters (compared on the server,
      // and as UTF-8 bytes), not their UTF-8 bytes taken for characters of
      // another encoding
      const r = (await check.query(`SELECT status, kind = $2 AS kind_same, payload->>'t' = $3 AS payload_same,
                                           result->>'echo' = $3 AS result_same, result->>'kind' AS kind,
                                           encode(convert_to(payload->>'t', 'UTF8'), 'hex') AS hex, result
                                      FROM jobq.jobs WHERE job_id = $1`, [id, kind, s])).rows[0]
      assert.deepEqual([r.status, r.kind_same, r.payload_same, r.result_same], ['completed', true, true, true], JSON.stringify(r))
      assert.equal(r.hex, Buffer.from(s).toString('hex'))
      assert.deepEqual(r.result, { echo: s, kind })
    }
    const f = (await check.query('SELECT status, last_error FROM jobq.jobs WHERE job_id = $1', [failing])).rows[0]
    assert.deepEqual(f, { status: 'failed', last_error: `Error: ${failKind}: ${word}` })
    if (!can.euro) {
      // a result the database cannot hold: that job fails for good, with the server's reason
      const r = (await check.query('SELECT status, retry_count, last_error FROM jobq.jobs WHERE job_id = $1', [unholdable.result])).rows[0]
      assert.deepEqual([r.status, r.retry_count], ['failed', 0])
      assert.match(r.last_error, /^Error: the result was refused: .*(LATIN1|EUC_JP).* \(SQLSTATE 22P05\)$/)
      // an error message it cannot hold is kept in ASCII
      const e = (await check.query('SELECT status, last_error FROM jobq.jobs WHERE job_id = $1', [unholdable.error])).rows[0]
      assert.deepEqual(e, { status: 'failed', last_error: 'Error: down by 5 \\u20ac' })
    }
  })
}

test('a session whose client_encoding is not UTF8 (SET on the pool\'s clients) is refused at start with a clear message', async () => {
  // node-postgres sends client_encoding UTF8 at every connection, over
  // PGCLIENTENCODING, options => '-c client_encoding=...' and the role's and
  // database's settings; only a SET after it changes it
  const queue = queueName('enc_refuse')
  const latin = pool({ ...libConfig, max: 2 })
  latin.on('connect', (c) => c.query("SET client_encoding TO 'LATIN1'").catch(() => {}))
  const logger = memLogger()
  const w = new jobq.Worker({ pool: latin, queue, logger, handleSignals: false }).handle('x', async () => {})
  let settled = false
  const run = w.run().then(() => 'resolved', (e) => e).finally(() => { settled = true })
  await poll(() => settled || logger.lines.some((l) => / queues /.test(l)), 20000, 'the worker refused or started')
  if (!settled) await w.stop({ grace: 0 }) // it started: the test fails below
  const outcome = await run
  assert.ok(outcome instanceof Error, `run() started and ${outcome} instead of refusing:\n${logger.lines.join('\n')}`)
  assert.match(outcome.message, /^jobq: the session's client_encoding is LATIN1, but node-postgres reads and writes UTF-8/)
  assert.deepEqual(await q('SELECT count(*)::int AS n FROM jobq.jobs WHERE queue = $1', [queue]), [{ n: 0 }])
})
