#!/usr/bin/env node
// bench/peers/driver.js: the Node side of the jobq benchmark suite.
//
// It drives pg-boss and graphile-worker through their own client libraries
// for every workload, and all five contenders (bare, seed, jobq, pgboss,
// graphile) for the latency workloads (steady state, critical job), where
// one clock must see both the enqueue and the claim.
//
//   node driver.js MODE CONTENDER key=value...
//
// MODE: setup | enqueue | fill | drain | cycle | steady | critical
// Common keys: db (connection string), clients, duration (s), batch.
// Prints one JSON object on stdout; progress goes to stderr.
'use strict';

const crypto = require('crypto');
const { performance } = require('perf_hooks');
const pg = require('pg');
const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');

// bigint columns as JS numbers (job ids and lease tokens fit in 2^53 here
// only as strings for tokens: keep int8 as strings, parse ids when needed)
const [mode, contender, ...rest] = process.argv.slice(2);
const opt = Object.fromEntries(rest.map((kv) => {
  const i = kv.indexOf('=');
  return [kv.slice(0, i), kv.slice(i + 1)];
}));
const DB = opt.db;
const CLIENTS = +(opt.clients || 8);
const DURATION = +(opt.duration || 5) * 1000;
const BATCH = +(opt.batch || 1);
const PAYLOAD = { n: 1 };

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => process.stderr.write(a.join(' ') + '\n');

function pct(arr, p) {
  if (arr.length === 0) return null;
  const s = Float64Array.from(arr).sort();
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
}
function latencyStats(arr) {
  return {
    n: arr.length,
    p50_ms: pct(arr, 0.5),
    p99_ms: pct(arr, 0.99),
    max_ms: arr.length ? Math.max(...arr) : null,
  };
}
// a deterministic UUID from an idempotency key (pg-boss takes caller ids)
function keyUuid(key) {
  const h = crypto.createHash('md5').update(key).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`; // = md5(key)::uuid
}

async function sqlOne(text, params) {
  const c = new pg.Client({ connectionString: DB });
  await c.connect();
  try {
    return (await c.query(text, params)).rows;
  } finally {
    await c.end();
  }
}

// ---------------------------------------------------------------------
// Adapters: enqueue(client-ish, n, opts), claim(batch) -> jobs, complete(jobs)
// For SQL contenders each "worker" owns one pg.Client.
// ---------------------------------------------------------------------

const SQL = {
  bare: {
    enqueue: (c, data, prio) =>
      c.query('INSERT INTO bare_job (payload) VALUES ($1)', [data]),
    claim: async (c, batch) => (await c.query(
      `DELETE FROM bare_job WHERE id IN
         (SELECT id FROM bare_job ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $1)
       RETURNING id, payload`, [batch])).rows,
    complete: async () => {},
    pending: 'SELECT count(*)::int AS n FROM bare_job',
  },
  seed: {
    enqueue: (c, data, prio) =>
      c.query("INSERT INTO seed_job (kind, payload, priority) VALUES ('bench', $1, $2)", [data, prio || 0]),
    claim: async (c, batch) => (await c.query(
      `UPDATE seed_job SET status = 'running', locked_by = 'w',
              lease_expires_at = now() + interval '5 minutes'
        WHERE id IN (SELECT id FROM seed_job
                      WHERE queue = 'q' AND status = 'pending' AND run_at <= now()
                      ORDER BY priority DESC, run_at, id
                      FOR UPDATE SKIP LOCKED LIMIT $1)
       RETURNING id, payload`, [batch])).rows,
    complete: (c, jobs) => c.query(
      `UPDATE seed_job SET status = 'completed', finished_at = now(), lease_expires_at = NULL
        WHERE id = ANY ($1::bigint[]) AND status = 'running'`, [jobs.map((j) => j.id)]),
    pending: "SELECT count(*)::int AS n FROM seed_job WHERE queue = 'q' AND status = 'pending'",
  },
  jobq: {
    enqueue: (c, data, prio) =>
      c.query("SELECT job_id FROM jobq.enqueue('bench', $1, queue => 'q', priority => $2)", [data, prio || 0]),
    claim: async (c, batch) => (await c.query(
      "SELECT job_id AS id, lease_token AS tok, payload FROM jobq.claim('q', batch => $1)", [batch])).rows,
    complete: (c, jobs) => c.query('SELECT jobq.complete_many($1::bigint[], $2::bigint[])',
      [jobs.map((j) => j.id), jobs.map((j) => j.tok)]),
    pending: "SELECT count(*)::int AS n FROM jobq.ready WHERE queue = 'q'",
  },
};

async function sqlClients(n) {
  const cs = [];
  for (let i = 0; i < n; i++) {
    const c = new pg.Client({ connectionString: DB });
    await c.connect();
    cs.push(c);
  }
  return cs;
}

// ---------------------------------------------------------------------
// pg-boss
// ---------------------------------------------------------------------
let PgBoss;
async function bossStart(max, extra) {
  PgBoss = PgBoss || require('pg-boss');
  // schedule: false: no cron timekeeper; supervise (maintenance) stays on,
  // as in production, except in a second instance (extra.supervise = false)
  const boss = new PgBoss({ connectionString: DB, max: max || CLIENTS + 2, schedule: false, ...extra });
  boss.on('error', (e) => log('pg-boss error:', e.message));
  await boss.start();
  return boss;
}
const BOSS_PENDING = "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'q' AND state < 'active'";

// ---------------------------------------------------------------------
// graphile-worker
// ---------------------------------------------------------------------
let GW;
function gw() {
  GW = GW || require('graphile-worker');
  return GW;
}
const GW_PENDING = "SELECT count(*)::int AS n FROM graphile_worker._private_jobs WHERE locked_at IS NULL AND run_at <= now() + interval '1 day'";
const silentLogger = () => gw().Logger ? new (gw().Logger)(() => () => {}) : undefined;
async function gwUtils(max) {
  return gw().makeWorkerUtils({ connectionString: DB, logger: silentLogger(), maxPoolSize: max || CLIENTS + 2 });
}
// graphile-worker's runner with the batching options set for speed:
// localQueue (the pool fetches `batch` jobs per query) and completeJobBatchDelay
// (completions within the same tick go in one statement) when batch > 1.
async function gwRun(concurrency, batch, task) {
  const preset = { worker: {} };
  if (batch > 1) {
    preset.worker.localQueue = { size: batch };
    preset.worker.completeJobBatchDelay = 0;
    preset.worker.failJobBatchDelay = 0;
  } else {
    preset.worker.completeJobBatchDelay = -1;
  }
  return gw().run({
    connectionString: DB,
    concurrency,
    maxPoolSize: concurrency + 4,
    noHandleSignals: true,
    pollInterval: 2000,
    logger: silentLogger(),
    preset,
    taskList: { t: task },
  });
}

// ---------------------------------------------------------------------
// Modes
// ---------------------------------------------------------------------

async function setup() {
  if (contender === 'pgboss') {
    const boss = await bossStart(4);
    await boss.createQueue('q');
    await boss.stop({ graceful: false, wait: true });
  } else if (contender === 'graphile') {
    await gw().runMigrations({ connectionString: DB, logger: silentLogger() });
  }
  return { ok: true };
}

// run `fn(i)` in CLIENTS loops until the deadline; fn returns jobs done
async function loops(n, deadline, fn) {
  let total = 0;
  await Promise.all(Array.from({ length: n }, async (_, i) => {
    while (now() < deadline) total += await fn(i);
  }));
  return total;
}

// enqueue variants: single | batch100 | key | dup (dupkeys= existing keys dup-1..N)
async function enqueue() {
  const variant = opt.variant;
  const dupkeys = +(opt.dupkeys || 1000);
  let seq = 0;
  const key = (i) => (variant === 'dup' && Math.random() < 0.5)
    ? `dup-${1 + Math.floor(Math.random() * dupkeys)}`
    : `u${i}-${process.pid}-${seq++}`;
  let total;
  let t0;
  if (contender === 'pgboss') {
    const boss = await bossStart();
    t0 = now();
    const deadline = t0 + DURATION;
    total = await loops(CLIENTS, deadline, async (i) => {
      if (variant === 'batch100') {
        await boss.insert(Array.from({ length: 100 }, () => ({ name: 'q', data: PAYLOAD })));
        return 100;
      }
      if (variant === 'single') await boss.send('q', PAYLOAD);
      else await boss.send('q', PAYLOAD, { id: keyUuid(key(i)) });
      return 1;
    });
    await boss.stop({ graceful: false, wait: true });
  } else {
    const utils = await gwUtils();
    t0 = now();
    const deadline = t0 + DURATION;
    total = await loops(CLIENTS, deadline, async (i) => {
      if (variant === 'batch100') {
        await utils.addJobs(Array.from({ length: 100 }, () => ({ identifier: 't', payload: PAYLOAD })));
        return 100;
      }
      if (variant === 'single') await utils.addJob('t', PAYLOAD);
      else await utils.addJob('t', PAYLOAD, { jobKey: key(i), jobKeyMode: 'unsafe_dedupe' });
      return 1;
    });
    await utils.release();
  }
  const secs = (now() - t0) / 1000;
  return { jobs: total, secs, jobs_per_s: total / secs };
}

// fill: n jobs at priority prio (keys=1: with keys dup-1..n, already finished / far future)
async function fill() {
  const n = +opt.n;
  const prio = +(opt.prio || 0);
  const keys = opt.keys === '1';
  const chunk = 1000;
  let done = 0;
  if (contender === 'pgboss') {
    const boss = await bossStart(4);
    for (let lo = 0; lo < n; lo += chunk * 2) {
      await Promise.all([0, 1].map(async (k) => {
        const from = lo + k * chunk;
        const m = Math.min(chunk, n - from);
        if (m <= 0) return;
        await boss.insert(Array.from({ length: m }, (_, j) => keys
          ? { name: 'q', data: PAYLOAD, id: keyUuid(`dup-${from + j + 1}`) }
          : { name: 'q', data: PAYLOAD, priority: prio }));
        done += m;
      }));
    }
    if (keys) {
      await sqlOne("UPDATE pgboss.job SET state = 'completed', completed_on = now() WHERE name = 'q' AND state = 'created'");
    }
    await boss.stop({ graceful: false, wait: true });
  } else {
    const utils = await gwUtils(4);
    const far = new Date(Date.now() + 365 * 86400e3);
    for (let lo = 0; lo < n; lo += chunk * 2) {
      await Promise.all([0, 1].map(async (k) => {
        const from = lo + k * chunk;
        const m = Math.min(chunk, n - from);
        if (m <= 0) return;
        // graphile-worker: smaller number = runs first; "low" = 100
        await utils.addJobs(Array.from({ length: m }, (_, j) => keys
          ? { identifier: 't', payload: PAYLOAD, jobKey: `dup-${from + j + 1}`, runAt: far }
          : { identifier: 't', payload: PAYLOAD, priority: 100 - prio }));
        done += m;
      }));
    }
    await utils.release();
  }
  return { jobs: done };
}

// poll the pending count until it is 0 or the deadline passes
async function watchDrain(pendingSql, t0, deadline, stopFlag) {
  const c = new pg.Client({ connectionString: DB });
  await c.connect();
  let left;
  for (;;) {
    left = (await c.query(pendingSql)).rows[0].n;
    if (left === 0 || now() >= deadline) break;
    await sleep(100);
  }
  const t1 = now();
  stopFlag.stop = true;
  await c.end();
  return { left, secs: (t1 - t0) / 1000 };
}

async function drain() {
  const pendingSql = contender === 'pgboss' ? BOSS_PENDING : GW_PENDING;
  const before = (await sqlOne(pendingSql))[0].n;
  const flag = { stop: false };
  let res;
  if (contender === 'pgboss') {
    const boss = await bossStart();
    const t0 = now();
    const watch = watchDrain(pendingSql, t0, t0 + DURATION, flag);
    await Promise.all(Array.from({ length: CLIENTS }, async () => {
      while (!flag.stop) {
        const jobs = await boss.fetch('q', { batchSize: BATCH });
        if (jobs.length === 0) { await sleep(5); continue; }
        await boss.complete('q', jobs.map((j) => j.id));
      }
    }));
    res = await watch;
    await boss.stop({ graceful: false, wait: true });
  } else {
    const t0 = now();
    const runner = await gwRun(CLIENTS, BATCH, async () => {});
    res = await watchDrain(pendingSql, t0, t0 + DURATION, flag);
    await runner.stop();
  }
  const after = (await sqlOne(pendingSql))[0].n;
  const jobs = before - after;
  return { jobs, secs: res.secs, jobs_per_s: jobs / res.secs, before, after };
}

// cycle: each worker claims `batch`, completes them and enqueues as many new
// jobs, so the backlog stays where it is.  Reports jobs/s and claim latency.
async function cycle() {
  const lat = [];
  let total = 0;
  let t0 = now();
  let deadline = t0 + DURATION;
  if (contender === 'pgboss') {
    const boss = await bossStart();
    t0 = now();
    deadline = t0 + DURATION;
    total = await loops(CLIENTS, deadline, async () => {
      const a = now();
      const jobs = await boss.fetch('q', { batchSize: BATCH });
      lat.push(now() - a);
      if (jobs.length) await boss.complete('q', jobs.map((j) => j.id));
      await boss.insert(Array.from({ length: BATCH }, () => ({ name: 'q', data: PAYLOAD })));
      return jobs.length;
    });
    await boss.stop({ graceful: false, wait: true });
  } else {
    // graphile-worker has no public "fetch": its runner works the jobs and a
    // producer loop adds one new job (addJobs, batched) per job worked.
    const utils = await gwUtils(4);
    t0 = now();
    deadline = t0 + DURATION;
    let owed = 0;
    const runner = await gwRun(CLIENTS, BATCH, async () => { total++; owed++; });
    const producer = (async () => {
      while (now() < deadline) {
        if (owed > 0) {
          const m = Math.min(owed, 1000);
          owed -= m;
          await utils.addJobs(Array.from({ length: m }, () => ({ identifier: 't', payload: PAYLOAD })));
        } else await sleep(2);
      }
    })();
    await producer;
    await runner.stop();
    await utils.release();
  }
  const secs = (now() - t0) / 1000;
  return { jobs: total, secs, jobs_per_s: total / secs, claim: latencyStats(lat) };
}

// steady: producers at a fixed total rate, workers polling (batch, sleep
// `idle` ms after an empty claim); latency = claim time - enqueue time.
async function steady() {
  const rate = +opt.rate;
  const producers = +(opt.producers || 4);
  const idle = +(opt.idle || 10);
  const lat = [];
  const t0 = now();
  const deadline = t0 + DURATION;
  let sent = 0;
  let stop = false;
  let tEnd = 0;
  const producerLoop = async (send, p) => {
    const per = rate / producers; // jobs/s for this producer
    let k = 0;
    while (now() < deadline) {
      const due = t0 + (k * 1000) / per;
      const w = due - now();
      if (w > 0) await sleep(w);
      await send({ n: 1, t: now() });
      k++;
      sent++;
    }
    tEnd = Math.max(tEnd, now());
  };
  if (SQL[contender]) {
    const A = SQL[contender];
    const pcs = await sqlClients(producers);
    const wcs = await sqlClients(CLIENTS);
    const workers = wcs.map(async (c) => {
      while (!stop) {
        const jobs = await A.claim(c, BATCH);
        const t = now();
        if (jobs.length === 0) { await sleep(idle); continue; }
        for (const j of jobs) lat.push(t - j.payload.t);
        await A.complete(c, jobs);
      }
    });
    await Promise.all(pcs.map((c, p) => producerLoop((d) => A.enqueue(c, d), p)));
    await sleep(500);
    stop = true;
    await Promise.all(workers);
    await Promise.all([...pcs, ...wcs].map((c) => c.end()));
  } else if (contender === 'pgboss') {
    const boss = await bossStart(CLIENTS + producers + 2);
    const workers = Array.from({ length: CLIENTS }, async () => {
      while (!stop) {
        const jobs = await boss.fetch('q', { batchSize: BATCH });
        const t = now();
        if (jobs.length === 0) { await sleep(idle); continue; }
        for (const j of jobs) lat.push(t - j.data.t);
        await boss.complete('q', jobs.map((j) => j.id));
      }
    });
    await Promise.all(Array.from({ length: producers }, (_, p) => producerLoop((d) => boss.send('q', d), p)));
    await sleep(500);
    stop = true;
    await Promise.all(workers);
    await boss.stop({ graceful: false, wait: true });
  } else {
    const utils = await gwUtils(producers + 2);
    const runner = await gwRun(CLIENTS, BATCH, async (payload) => { lat.push(now() - payload.t); });
    await Promise.all(Array.from({ length: producers }, (_, p) => producerLoop((d) => utils.addJob('t', d), p)));
    await sleep(500);
    await runner.stop();
    await utils.release();
  }
  return { sent, rate_achieved: sent / ((tEnd - t0) / 1000), latency: latencyStats(lat) };
}

// critical: 8 workers drain a big low-priority backlog (batch); every second a
// critical job is enqueued; time from just before its enqueue to its claim.
// The producer runs in its own thread (its own event loop and connection), as
// an application's producer runs apart from its workers: timed in the
// workers' thread, the enqueue call also waited behind the callbacks of 8
// workers moving 20k-40k jobs/s, which measured the driver, not the queue.
// Both threads read the same monotonic clock.
const mono = () => Number(process.hrtime.bigint()) / 1e6;

async function critical() {
  const tries = +(opt.tries || 5);
  const idle = 10;
  const times = [];
  const enqTimes = []; // how long each enqueue call took (its commit included)
  let stop = false;
  let pendingCrit = null; // resolve(time seen)
  const seen = (payload) => {
    if (payload && payload.crit && pendingCrit) {
      const resolve = pendingCrit;
      pendingCrit = null;
      resolve(mono());
    }
  };
  let cleanup;
  if (SQL[contender]) {
    const A = SQL[contender];
    const wcs = await sqlClients(CLIENTS);
    const workers = wcs.map(async (c) => {
      while (!stop) {
        const jobs = await A.claim(c, BATCH);
        if (jobs.length === 0) { await sleep(idle); continue; }
        for (const j of jobs) seen(j.payload);
        await A.complete(c, jobs);
      }
    });
    cleanup = async () => { stop = true; await Promise.all(workers); await Promise.all(wcs.map((c) => c.end())); };
  } else if (contender === 'pgboss') {
    const boss = await bossStart(CLIENTS + 2);
    const workers = Array.from({ length: CLIENTS }, async () => {
      while (!stop) {
        const jobs = await boss.fetch('q', { batchSize: BATCH });
        if (jobs.length === 0) { await sleep(idle); continue; }
        for (const j of jobs) seen(j.data);
        await boss.complete('q', jobs.map((j) => j.id));
      }
    });
    cleanup = async () => { stop = true; await Promise.all(workers); await boss.stop({ graceful: false, wait: true }); };
  } else {
    const runner = await gwRun(CLIENTS, BATCH, async (payload) => seen(payload));
    cleanup = async () => { await runner.stop(); };
  }
  const producer = new Worker(__filename, { argv: process.argv.slice(2), workerData: { role: 'critical-producer' } });
  const replies = [];
  let replied = null;
  producer.on('message', (m) => { if (replied) { const r = replied; replied = null; r(m); } else replies.push(m); });
  producer.on('error', (e) => { log(`critical producer: ${e.stack || e}`); process.exit(1); });
  producer.on('exit', (code) => { if (code !== 0) { log(`critical producer exited with ${code}`); process.exit(1); } });
  const reply = () => (replies.length ? Promise.resolve(replies.shift()) : new Promise((r) => { replied = r; }));
  await reply(); // connected
  await sleep(+(opt.warm || 1000));
  for (let i = 0; i < tries; i++) {
    const got = new Promise((resolve) => { pendingCrit = resolve; });
    producer.postMessage('go');
    const { t, enqueue_ms } = await reply();
    enqTimes.push(enqueue_ms);
    const seenAt = await Promise.race([got, sleep(10000).then(() => null)]);
    const ms = seenAt === null ? Infinity : seenAt - t;
    times.push(ms);
    if (seenAt === null) { pendingCrit = null; break; }
    await sleep(+(opt.gap || 300));
  }
  producer.postMessage('stop');
  await reply();
  await cleanup();
  const fin = times.filter(Number.isFinite);
  return {
    tries: times.length,
    timeouts: times.length - fin.length,
    median_ms: pct(fin, 0.5),
    max_ms: times.length ? Math.max(...times) : null,
    all_ms: times.map((x) => (Number.isFinite(x) ? +x.toFixed(2) : null)),
    enqueue_median_ms: pct(enqTimes, 0.5),
  };
}

// the critical workload's producer thread: one connection; on 'go' it
// enqueues one critical job and replies with the time it started and how
// long the call took
async function criticalProducer() {
  const critJob = { n: 1, crit: true };
  let send;
  let close;
  if (SQL[contender]) {
    const [pc] = await sqlClients(1);
    send = () => SQL[contender].enqueue(pc, critJob, 30);
    close = () => pc.end();
  } else if (contender === 'pgboss') {
    const boss = await bossStart(2, { supervise: false });
    send = () => boss.send('q', critJob, { priority: 30 });
    close = () => boss.stop({ graceful: false, wait: true });
  } else {
    const utils = await gwUtils(2);
    send = () => utils.addJob('t', critJob, { priority: -30 });
    close = () => utils.release();
  }
  parentPort.on('message', async (m) => {
    if (m === 'stop') {
      await close();
      parentPort.postMessage({ stopped: true });
      parentPort.close();
      return;
    }
    const t = mono();
    await send();
    parentPort.postMessage({ t, enqueue_ms: mono() - t });
  });
  parentPort.postMessage({ ready: true });
}

const MODES = { setup, enqueue, fill, drain, cycle, steady, critical };

if (!isMainThread && workerData && workerData.role === 'critical-producer') {
  criticalProducer().catch((e) => {
    log(`driver critical producer ${contender}: ${e.stack || e}`);
    process.exit(1);
  });
} else {
  (async () => {
    if (!MODES[mode]) throw new Error(`unknown mode ${mode}`);
    const out = await MODES[mode]();
    process.stdout.write(JSON.stringify(out) + '\n');
    process.exit(0);
  })().catch((e) => {
    log(`driver ${mode} ${contender}: ${e.stack || e}`);
    process.exit(1);
  });
}
