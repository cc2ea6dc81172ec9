'use strict'
// Connections: the 'error' listener every pool the library uses gets, one
// statement on a pool client that cannot crash the process, what the
// server behind a connection offers (looked up once per connection), which
// errors are worth sending the statement again for, and text fitted to a
// bound.

// A pool's 'error' event (an idle client lost: a server restart, a failover,
// a network cut) kills the process when nobody listens to it.  The library
// listens on every pool it makes or is given, with one listener per pool
// however many workers and producers share it; the application's own
// listeners stay as they are.  guards: pool -> { listener, loggers }.
const guards = new WeakMap()

// Attach the library's 'error' listener to pool (once) and log idle-client
// errors with log (a function of the error; the first one registered that
// is still registered; console.warn when none is).  Returns a function that
// unregisters log; the listener itself stays, so a pool the worker was
// given never goes back to killing the process.
function guardPool (pool, log) {
  let g = guards.get(pool)
  if (!g) {
    const loggers = new Set()
    g = {
      loggers,
      listener: (e) => {
        const [first] = loggers
        if (first) first(e)
        else console.warn(`jobq: an idle database connection was lost (${e && e.message}); the pool opens a new one when needed`)
      }
    }
    guards.set(pool, g)
    pool.on('error', g.listener)
  }
  g.loggers.add(log)
  return () => g.loggers.delete(log)
}

// Is db a pg.Pool (or a pool of another copy of pg)?  A client has no counts.
function isPool (db) {
  return db != null && typeof db.on === 'function' && typeof db.connect === 'function' &&
    typeof db.totalCount === 'number'
}

// The SQLSTATEs after which sending the statement again is the thing to do:
// the server is shutting down or starting (57P01-57P03), too many
// connections, a serialization failure or deadlock (rolled back), a
// read-only server (a standby, before or during a failover); and class 08,
// connection exceptions (also what PgBouncer says when its server
// connection died).
const TRANSIENT_STATES = new Set(['57P01', '57P02', '57P03', '53300', '40001', '40P01', '25006'])
// What pg and Node say when a connection is lost or cannot be made.
const LOST = /connection terminated|terminated unexpectedly|connection error|not queryable|timeout exceeded when trying to connect|connection timeout|query read timeout|socket hang up/i

// An error the server sent (pg's DatabaseError: a severity and a SQLSTATE).
function isServerError (e) {
  return e != null && typeof e.severity === 'string' && typeof e.code === 'string'
}

// Is e a lost or refused connection, or a server error after which the same
// statement may simply be sent again?
function isTransient (e) {
  if (e == null || typeof e !== 'object') return false
  if (isServerError(e)) return e.code.startsWith('08') || TRANSIENT_STATES.has(e.code)
  if (typeof e.code === 'string' && /^E[A-Z0-9_]+$/.test(e.code)) return true // ECONNREFUSED, ENOENT, EPIPE, ...
  return LOST.test(String(e.message))
}

// Did the statement perhaps run to its commit although it failed?  Only
// when the connection was lost after the statement was sent, with no
// answer from the server (an error the server sent means it rolled back);
// class 08 is what PgBouncer sends when its server connection died under
// the statement, so it is in doubt too.
function isInDoubt (e) {
  if (e == null || e.jobqSent === false) return false
  if (isServerError(e)) return e.code.startsWith('08')
  return isTransient(e)
}

// What a later jobq offers that the library uses when it is there
// (DECISIONS.md, "New SQL names"): jobq.fail's sixth argument, details,
// and the application worker registry (both functions, executable by this
// role).  to_regprocedure: NULL, not an error, where a name is missing.
const FEATURES_SQL = `
SELECT pg_catalog.to_regprocedure('jobq.fail(bigint,bigint,text,boolean,interval,text)') IS NOT NULL AS fail_details,
       COALESCE(pg_catalog.has_function_privilege(
                    pg_catalog.to_regprocedure('jobq.register_worker(text,text[],jsonb)'), 'EXECUTE')
                AND pg_catalog.has_function_privilege(
                    pg_catalog.to_regprocedure('jobq.unregister_worker(text)'), 'EXECUTE'),
                false) AS registry`

// client -> the promise of { failDetails, registry } for its connection
const features = new WeakMap()

// What the server behind client offers, looked up on its first use (one
// statement per connection: a new connection after a restart, a failover
// or an ALTER EXTENSION UPDATE looks again).  A failed lookup is not kept.
function featuresOf (client) {
  let f = features.get(client)
  if (!f) {
    f = client.query(FEATURES_SQL).then(({ rows: [r] }) => ({ failDetails: r.fail_details, registry: r.registry }))
    features.set(client, f)
    f.catch(() => features.delete(client))
  }
  return f
}

// Forget what client's server offers (a call it was said to have failed).
function forgetFeatures (client) {
  features.delete(client)
}

// Run one statement on a client of pool; the client's 'error' event, which
// pg emits when its connection dies even while a query is running (and
// which the pool does not listen to while the client is checked out), is
// listened to meanwhile.  A failure to connect, or to learn what the
// server offers, is marked e.jobqSent = false: the statement was not sent.
// A client whose connection failed is discarded.  text may be a function
// of what the connection's server offers (featuresOf) returning [text,
// values], or null for no statement (then the result is null); values is
// then unused.  onClient(client), when given, is called once the client is
// checked out (e.g. to cancel it).
async function statement (pool, text, values, onClient) {
  let client
  try {
    client = await pool.connect()
  } catch (e) {
    if (e && typeof e === 'object') e.jobqSent = false
    throw e
  }
  let broken = null
  const onError = (e) => { broken = broken || e }
  client.on('error', onError)
  try {
    if (onClient) onClient(client)
    if (typeof text === 'function') {
      let f
      try {
        f = await featuresOf(client)
      } catch (e) {
        if (e && typeof e === 'object') e.jobqSent = false
        throw e
      }
      const built = text(f)
      if (built === null) return null
      ;[text, values] = built
    }
    return await client.query(text, values)
  } catch (e) {
    // a function the lookup found and the call did not: look again next time
    if (isServerError(e) && e.code === '42883') forgetFeatures(client)
    if (isTransient(e) || !isServerError(e)) broken = broken || e
    throw e
  } finally {
    client.removeListener('error', onError)
    client.release(broken ? (broken instanceof Error ? broken : true) : undefined)
  }
}

// Wait ms milliseconds, or less when `until` (a promise) settles first.
function sleep (ms, until) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms)
    if (until) until.then(() => { clearTimeout(t); resolve() }, () => { clearTimeout(t); resolve() })
  })
}

// The wait before try i + 1 (i from 0): 100 ms doubling to capMs (5 s by
// default; the producer's 2 s), with jitter (a half to all of it), so that
// workers a restart disconnected together do not come back together.
function backoffMs (i, capMs = 5000) {
  return Math.min(capMs, 100 * 2 ** Math.min(i, 10)) * (0.5 + Math.random() / 2)
}

// s cut to at most max bytes of UTF-8, on a character boundary.
function fitBytes (s, max) {
  const b = Buffer.from(s, 'utf8')
  if (b.length <= max) return s
  let end = max
  while (end > 0 && (b[end] & 0xc0) === 0x80) end-- // b[end] starts the first character left out
  return b.subarray(0, end).toString('utf8')
}

// s with every character outside ASCII written as \uXXXX: for a server
// encoding that cannot hold a character of an error message (LATIN1 and
// the euro sign, say).
function asciiOnly (s) {
  return s.replace(/[\u0080-\uffff]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'))
}

module.exports = {
  guardPool, isPool, isServerError, isTransient, isInDoubt, featuresOf, statement, sleep, backoffMs, fitBytes, asciiOnly
}
