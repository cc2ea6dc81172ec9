#!/usr/bin/env node
// bench/report.js: turn bench/out/results.jsonl into the terminal table,
// bench/out/results.json, the chart's data files and (--markdown) BENCHMARKS.md.
//
//   node report.js results.jsonl results.json MODE settings.txt [--markdown OUT.md]
'use strict';
const fs = require('fs');
const path = require('path');

const [inFile, jsonFile, mode, settingsFile, flag, mdFile] = process.argv.slice(2);
const allRows = fs.readFileSync(inFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
// a run on two servers (--settings=both): the numbered tables and the
// targets are the tuned server's; the side-by-side table has both
const passes = [...new Set(allRows.map((r) => r.settings).filter(Boolean))];
const primary = passes.includes('tuned') ? 'tuned' : passes[0];
const rows = allRows.filter((r) => !r.settings || r.settings === primary);
const meta = rows.find((r) => r.kind === 'meta') || {};
const settings = fs.existsSync(settingsFile) ? fs.readFileSync(settingsFile, 'utf8').trim().split('\n') : [];
const outDir = path.dirname(jsonFile);
const of = (kind) => rows.filter((r) => r.kind === kind);
const run2 = (kind) => (of(kind).some((r) => r.run === 2) ? ' — second run' : '');
const fmt = (x, d = 0) => (x == null || Number.isNaN(x) ? 'n/a' : Number(x).toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }));
const ratio = (a, b) => (a == null || b == null || !b ? null : a / b);
const rfmt = (r) => (r == null ? '' : ` (${r.toFixed(2)}×)`);
const ORDER = ['bare', 'seed', 'seed-2tx', 'jobq', 'jobq-2tx', 'pgboss', 'graphile'];
const NAMES = {
  bare: 'bare (reference)', seed: 'seed design', 'seed-2tx': 'seed design, 2 tx',
  jobq: 'jobq', 'jobq-2tx': 'jobq, 2 tx', pgboss: `pg-boss ${meta.pgboss_version || ''}`.trim(),
  graphile: `graphile-worker ${meta.graphile_version || ''}`.trim(),
};
const byOrder = (a, b) => ORDER.indexOf(a) - ORDER.indexOf(b);
const uniq = (xs) => [...new Set(xs)];
// smoke sizes (a 3,000-job backlog, half-second runs) say nothing about the
// targets: their ratios are computed (results.json) but not judged
const judged = mode !== 'smoke';
const verdict = (met) => (!judged ? 'not judged' : met ? 'met' : 'missed');

// ------------------------------------------------------------ tables
const tables = []; // { title, head: [], body: [[]], note }

// 1 enqueue
{
  const e = of('enqueue');
  const get = (c, v) => (e.find((r) => r.contender === c && r.variant === v) || {}).jobs_per_s;
  const bare1 = get('bare', 'single');
  const bare100 = get('bare', 'batch100');
  const body = uniq(e.map((r) => r.contender)).sort(byOrder).map((c) => [
    NAMES[c],
    fmt(get(c, 'single')) + rfmt(ratio(get(c, 'single'), bare1)),
    fmt(get(c, 'batch100')) + rfmt(ratio(get(c, 'batch100'), bare100)),
    get(c, 'key') == null ? 'n/a' : fmt(get(c, 'key')) + rfmt(ratio(get(c, 'key'), bare1)),
    get(c, 'dup') == null ? 'n/a' : fmt(get(c, 'dup')) + rfmt(ratio(get(c, 'dup'), bare1)),
  ]);
  if (body.length) {
    tables.push({
      id: 1, title: '1. Enqueue (jobs/s; ratio to bare: single-job rows vs bare 1 job/tx, batches vs bare batches)',
      head: ['contender', '1 job / tx', 'batches of 100', 'idempotency key', '50% duplicate keys'], body,
    });
  }
}
// 2 drain
const drain = of('drain');
{
  const batches = uniq(drain.map((r) => r.batch)).sort((a, b) => a - b);
  const get = (c, b) => (drain.find((r) => r.contender === c && r.batch === b) || {}).jobs_per_s;
  const body = uniq(drain.map((r) => r.contender)).sort(byOrder).map((c) => [
    NAMES[c], ...batches.map((b) => fmt(get(c, b)) + rfmt(ratio(get(c, b), get('bare', b)))),
  ]);
  if (body.length) {
    tables.push({
      id: 2, title: `2. Drain a ${fmt(meta.drain_backlog)}-job backlog, claim + complete (jobs/s, ratio to bare)`,
      head: ['contender', ...batches.map((b) => `batch ${b}`)], body,
    });
    fs.writeFileSync(path.join(outDir, 'drain.dat'),
      '# variant ' + batches.map((b) => `batch${b}`).join(' ') + '\n' +
      uniq(drain.map((r) => r.contender)).sort(byOrder).map((c) =>
        `"${NAMES[c]}" ` + batches.map((b) => get(c, b) || 0).join(' ')).join('\n') + '\n');
  }
}
// 3 steady
{
  const s = of('steady').sort((a, b) => byOrder(a.contender, b.contender));
  if (s.length) {
    tables.push({
      id: 3, title: `3. Steady state: producers at ${meta.steady_rate} jobs/s, ${meta.clients} workers polling (enqueue → claim latency)`,
      head: ['contender', 'achieved rate', 'p50 ms', 'p99 ms', 'max ms'],
      body: s.map((r) => [NAMES[r.contender], fmt(r.rate), fmt(r.p50_ms, 1), fmt(r.p99_ms, 1), fmt(r.max_ms, 1)]),
    });
  }
}
// 4 critical
{
  const s = of('critical').sort((a, b) => byOrder(a.contender, b.contender));
  if (s.length) {
    tables.push({
      id: 4, title: `4. A critical job enqueued behind ${fmt(meta.crit_backlog)} low-priority jobs while ${meta.clients} workers drain them (batch 10): enqueue → claim, the producer in a thread of its own`,
      head: ['contender', 'median ms', 'max ms', 'each try (ms)', 'the enqueue call alone, median ms'],
      body: s.map((r) => [NAMES[r.contender], r.median_ms == null ? 'n/a' : fmt(r.median_ms, 1),
        r.max_ms == null ? 'n/a' : fmt(r.max_ms, 1), r.note || (r.all_ms || []).map((x) => (x == null ? 'timeout' : x.toFixed(1))).join(', '),
        r.enqueue_median_ms == null ? 'n/a' : fmt(r.enqueue_median_ms, 1)]),
    });
  }
  const t = of('critical_thin').sort((a, b) => byOrder(a.contender, b.contender));
  if (t.length) {
    tables.push({
      id: 4.5, title: `4b. The same with a thin driver: pgbench as the ${meta.clients} workers (claim, then complete in the next transaction, batch 10) and as the producer; times from the server's clock (enqueue call → the worker has the job)`,
      head: ['contender', 'backlog', 'tries', 'median ms', 'max ms', 'each try (ms)', 'the enqueue call alone, median ms'],
      body: t.map((r) => [NAMES[r.contender], fmt(r.backlog), (r.all_ms || []).length, fmt(r.median_ms, 1),
        r.max_ms == null ? 'timeout' : fmt(r.max_ms, 1), (r.all_ms || []).map((x) => (x == null ? 'timeout' : (+x).toFixed(1))).join(', '),
        fmt(r.enqueue_median_ms, 1)]),
    });
  }
}
// 5 scaling
const scale = of('scale');
{
  const clients = uniq(scale.map((r) => r.clients)).sort((a, b) => a - b);
  const backlogs = uniq(scale.map((r) => r.backlog)).sort((a, b) => a - b);
  const get = (c, B, n) => (scale.find((r) => r.contender === c && r.backlog === B && r.clients === n) || {}).jobs_per_s;
  const cs = uniq(scale.map((r) => r.contender)).sort(byOrder);
  const body = [];
  for (const c of cs) for (const B of backlogs) body.push([NAMES[c], fmt(B), ...clients.map((n) => fmt(get(c, B, n)))]);
  if (body.length) {
    const lo = backlogs[0];
    const hi = backlogs[backlogs.length - 1];
    tables.push({
      id: 5, title: '5. Scaling: jobs/s by clients and backlog (each transaction claims 10, completes them, enqueues 10: the backlog stays put)',
      head: ['contender', 'backlog', ...clients.map((n) => `${n} cl`)], body,
    });
    tables.push({
      id: 5.1, title: `5b. Flatness: drain rate at a ${fmt(hi)} backlog / at ${fmt(lo)} (8 clients)`,
      head: ['contender', `${fmt(lo)}`, `${fmt(hi)}`, 'ratio'],
      body: cs.map((c) => [NAMES[c], fmt(get(c, lo, 8)), fmt(get(c, hi, 8)), rfmt(ratio(get(c, hi, 8), get(c, lo, 8))).replace(/[()]/g, '').trim()]),
    });
    let dat = '# clients ' + cs.map((c) => backlogs.map((B) => `${c}@${B}`).join(' ')).join(' ') + '\n';
    for (const n of clients) dat += n + ' ' + cs.map((c) => backlogs.map((B) => get(c, B, n) || 0).join(' ')).join(' ') + '\n';
    fs.writeFileSync(path.join(outDir, 'scale.dat'), dat);
    fs.writeFileSync(path.join(outDir, 'scale.gp'), `nb = ${backlogs.length}\nnc = ${cs.length}\n` +
      `array names[${cs.length}] = [${cs.map((c) => JSON.stringify(NAMES[c])).join(', ')}]\n` +
      `lo = "${fmt(backlogs[0])}"\nhi = "${fmt(backlogs[backlogs.length - 1])}"\n`);
  }
}
// 6 bloat
{
  const s = of('bloat').sort((a, b) => byOrder(a.contender, b.contender));
  if (s.length) {
    const mb = (x) => fmt(x / 1048576, 1);
    tables.push({
      id: 6, title: `6. Bloat: steady load (8 clients, claim 10 + complete + enqueue 10) before (${meta.bloat_before} s) / during a REPEATABLE READ snapshot held for "hold" s / after (${meta.bloat_after} s)`,
      head: ['contender', 'hold s', 'jobs/s before', 'during', 'after', 'p99 ms before', 'during', 'after', 'MB before', 'during', 'after', 'dead tuples during', 'dead back to clean after'],
      body: s.map((r) => [NAMES[r.contender], fmt(r.hold), fmt(r.tps_before), fmt(r.tps_during) + rfmt(ratio(r.tps_during, r.tps_before)),
        fmt(r.tps_after), fmt(r.p99_before, 1), fmt(r.p99_during, 1) + rfmt(ratio(r.p99_during, r.p99_before)), fmt(r.p99_after, 1),
        mb(r.bytes_before), mb(r.bytes_during), mb(r.bytes_after), fmt(r.dead_during), r.recover_s == null ? `> ${meta.bloat_after} s` : `${fmt(r.recover_s, 1)} s`]),
    });
  }
}
// b bloat, drain only
{
  const s = of('bloat_drain').sort((a, b) => byOrder(a.contender, b.contender));
  if (s.length) {
    tables.push({
      id: 6.5, title: `6b. Bloat, workers only (claim + complete at batch 1, no producers, ${fmt(s[0].backlog || meta.crit_backlog)} backlog): before / during a held REPEATABLE READ snapshot / after${run2('bloat_drain')}`,
      head: ['contender', 'hold s', 'jobs/s before', 'during', 'after', 'p99 ms before', 'during', 'after', 'dead tuples during'],
      body: s.map((r) => [NAMES[r.contender], fmt(r.hold), fmt(r.tps_before), fmt(r.tps_during) + rfmt(ratio(r.tps_during, r.tps_before)),
        fmt(r.tps_after), fmt(r.p99_before, 1), fmt(r.p99_during, 1) + rfmt(ratio(r.p99_during, r.p99_before)), fmt(r.p99_after, 1), fmt(r.dead_during)]),
    });
  }
}
// 7 size
{
  const s = of('size');
  const cs = uniq(s.map((r) => r.contender)).sort(byOrder);
  const get = (c, st) => s.find((r) => r.contender === c && r.state === st) || {};
  if (cs.length) {
    tables.push({
      id: 7, title: `7. Size: table + index bytes per job, ${fmt(meta.size_n)} jobs (finished: after completing all of them and VACUUM)`,
      head: ['contender', 'per pending job', 'tables MB', 'indexes MB', 'per finished job', 'tables MB', 'indexes MB'],
      body: cs.map((c) => {
        const p = get(c, 'pending');
        const f = get(c, 'finished');
        return [NAMES[c], fmt(p.bytes_per_job), fmt(p.table_bytes / 1048576, 1), fmt(p.index_bytes / 1048576, 1),
          fmt(f.bytes_per_job), fmt(f.table_bytes / 1048576, 1), fmt(f.index_bytes / 1048576, 1)];
      }),
    });
  }
}

// profile
{
  const s = of('profile').sort((a, b) => byOrder(a.contender, b.contender));
  if (s.length) {
    tables.push({
      id: 8, title: 'Where the time goes: claim + complete at batch 10, 8 clients, 5 s on a 100k backlog, per job (pg_stat_statements)',
      head: ['contender', 'jobs/s', 'server µs per job', 'WAL bytes per job', 'WAL records per job', 'buffer accesses per job'],
      body: s.map((r) => [NAMES[r.contender], fmt(r.jobs_per_s), fmt(r.server_us_per_job, 1), fmt(r.wal_bytes_per_job),
        fmt(r.wal_records_per_job, 2), fmt(r.buffers_per_job, 1)]),
    });
  }
}

// the WAL of a drain at batch 100, by record type (pg_waldump)
{
  const s = of('walmix').sort((a, b) => byOrder(a.contender, b.contender));
  if (s.length) {
    const groups = [
      ['Heap/LOCK', (t) => t === 'Heap/LOCK'],
      ['Heap/DELETE', (t) => t === 'Heap/DELETE'],
      ['Heap/UPDATE', (t) => t === 'Heap/UPDATE' || t === 'Heap/UPDATE+INIT'],
      ['Heap/HOT_UPDATE', (t) => t === 'Heap/HOT_UPDATE'],
      ['Heap/INSERT', (t) => t === 'Heap/INSERT' || t === 'Heap/INSERT+INIT'],
      ['Btree/*', (t) => t.startsWith('Btree/')],
    ];
    const cell = (r, pick) => {
      let n = 0;
      let b = 0;
      for (const [t, [cnt, bytes]] of Object.entries(r.types || {})) if (pick(t)) { n += cnt; b += bytes; }
      return r.jobs ? `${fmt(n / r.jobs, 2)} (${fmt(b / r.jobs)} B)` : 'n/a';
    };
    const known = (t) => groups.some(([, pick]) => pick(t));
    tables.push({
      id: 8.2, title: 'WAL by record type: claim + complete at batch 100, 8 clients, 5 s on a 100k backlog, per job: records (bytes incl. full-page images), pg_waldump',
      head: ['contender', ...groups.map(([g]) => g), 'other', 'total'],
      body: s.map((r) => [NAMES[r.contender], ...groups.map(([, pick]) => cell(r, pick)), cell(r, (t) => !known(t)), cell(r, () => true)]),
    });
  }
}

// the critical job's claim statement alone (idle queue)
const crit = of('profile_crit');
if (crit.length) {
  const ms = crit.map((x) => x.claim_ms).sort((a, b) => a - b);
  tables.push({
    id: 8.5, title: `A critical job's claim alone: jobq.claim(batch => 1) on an idle queue behind ${fmt(crit[0].backlog)} low-priority jobs (EXPLAIN ANALYZE, warm session)${run2('profile_crit')}`,
    head: ['contender', 'tries', 'median ms', 'max ms'],
    body: [['jobq', ms.length, fmt(ms[Math.floor(ms.length / 2)], 3), fmt(ms[ms.length - 1], 3)]],
  });
}

// e: the claim statement with and without concurrent producers
{
  const s = of('evidence');
  if (s.length) {
    tables.push({
      id: 8.7, title: `jobq's claim statement on a ${fmt(meta.crit_backlog)} backlog, 8 clients, 10 s, batch 10 (pg_stat_statements, per call)${run2('evidence')}`,
      head: ['load', 'claims', 'ms per claim', 'buffer accesses per claim'],
      body: s.map((r) => [{ drain: 'claim 10 + complete (no producers)', snapshot: 'the same, 10 s into a held REPEATABLE READ snapshot', cycle: 'claim 10 + complete + enqueue 10 (workloads 5, 6)' }[r.load] || r.load, fmt(r.claims), fmt(r.claim_ms, 3), fmt(r.claim_buffers, 1)]),
    });
  }
}

// recheck: the target ratios again, bare and jobq interleaved, medians of the rounds
const recheck = [];
{
  const r = of('recheck');
  const med = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : null; };
  const rounds = uniq(r.map((x) => x.rep)).sort((a, b) => a - b);
  const val = (what, c, key, rep) => (r.find((x) => x.what === what && x.contender === c && (what === 'drain' ? x.batch === key : x.variant === key) && x.rep === rep) || {}).jobs_per_s;
  const line = (label, what, c, key, refKey, target, cmp) => {
    const vs = rounds.map((k) => val(what, c, key, k)).filter((x) => x != null);
    const bs = rounds.map((k) => val(what, 'bare', refKey, k)).filter((x) => x != null);
    if (!vs.length || !bs.length) return;
    const ratios = rounds.map((k) => ratio(val(what, c, key, k), val(what, 'bare', refKey, k))).filter((x) => x != null);
    const rm = ratio(med(vs), med(bs));
    recheck.push({ label, bare: med(bs), jobq: med(vs), ratio: rm, lo: Math.min(...ratios), hi: Math.max(...ratios), target, met: cmp(rm) });
  };
  // jobq, then any jobq@REF that bench/run --baseline=REF ran beside it
  const builds = ['jobq', ...uniq(r.map((x) => x.contender.replace(/-2tx$/, '')).filter((c) => c.startsWith('jobq@')))];
  for (const j of builds) {
    const at = j === 'jobq' ? '' : ` (${j})`;
    line(`enqueue, 1 job / tx${at}`, 'enqueue', j, 'single', 'single', '≥ 0.9×', (x) => x >= 0.9);
    line(`enqueue, batches of 100${at}`, 'enqueue', j, 'batch100', 'batch100', '≥ 0.9×', (x) => x >= 0.9);
    line(`enqueue with idempotency keys (vs bare 1 job / tx)${at}`, 'enqueue', j, 'key', 'single', '≥ 0.8×', (x) => x >= 0.8);
    for (const b of uniq(r.filter((x) => x.what === 'drain').map((x) => x.batch)).sort((a, b2) => a - b2)) {
      line(`drain, batch ${b}, one transaction${at}`, 'drain', j, b, b, '≥ 1.0×', (x) => x >= 1.0);
      line(`drain, batch ${b}, two transactions${at}`, 'drain', `${j}-2tx`, b, b, '≥ 1.0×', (x) => x >= 1.0);
    }
  }
  if (recheck.length) {
    tables.push({
      id: 9, title: `Targets measured again: bare and jobq interleaved point by point, ${rounds.length} rounds, medians (jobs/s)${run2('recheck')}`,
      head: ['measure', 'bare', 'jobq', 'ratio of medians', 'range of the rounds\' ratios', 'target', ''],
      body: recheck.map((x) => [x.label, fmt(x.bare), fmt(x.jobq), `${x.ratio.toFixed(2)}×`, `${x.lo.toFixed(2)}–${x.hi.toFixed(2)}×`, x.target, verdict(x.met)]),
    });
  }
}

// w: WAL per job over its life
{
  const w = of('wal').sort((a, b) => byOrder(a.contender, b.contender));
  const bare = (w.find((r) => r.contender === 'bare') || {}).bytes_per_job;
  if (w.length) {
    tables.push({
      id: 10, title: `10. WAL per job over its life: ${fmt(w[0].jobs)} jobs enqueued 100 per transaction, claimed 10 at a time and completed, one client after a CHECKPOINT (bytes per job, ratio to bare)`,
      head: ['contender', 'enqueue', 'claim + complete', 'whole life'],
      body: w.map((r) => [NAMES[r.contender], fmt(r.enqueue_bytes_per_job), fmt(r.drain_bytes_per_job), fmt(r.bytes_per_job) + rfmt(ratio(r.bytes_per_job, bare))]),
    });
  }
}
// L: one call, many jobs
{
  const L = of('bulk');
  const whats = uniq(L.map((r) => r.what));
  const LABEL = {
    insert_select: 'bare INSERT ... SELECT', enqueue_many: 'jobq.enqueue_many',
    enqueue_many_keys: 'jobq.enqueue_many with idempotency keys', retry_failed: 'jobq.retry_failed',
  };
  const body = whats.map((w) => {
    const xs = L.filter((r) => r.what === w).sort((a, b) => a.n - b.n);
    const lo = xs[0];
    const hi = xs[xs.length - 1];
    return [LABEL[w] || w, ...xs.map((r) => `${fmt(r.n)}: ${fmt(r.seconds, 3)} s (${fmt(r.us_per_job, 1)} µs/job)`),
      xs.length > 1 ? `${(hi.us_per_job / lo.us_per_job).toFixed(2)}×` : 'n/a'];
  });
  if (body.length) {
    const sizes = Math.max(...body.map((r) => r.length)) - 2;
    tables.push({
      id: 11, title: '11. One call, many jobs: time per job at each size (linear: the time per job does not grow)',
      head: ['call', ...Array.from({ length: sizes }, (_, i) => `size ${i + 1}`), 'µs/job, largest vs smallest'],
      body: body.map((r) => (r.length - 2 < sizes ? [...r.slice(0, -1), ...Array(sizes - (r.length - 2)).fill(''), r[r.length - 1]] : r)),
    });
  }
}
// the headline on each server: stock settings beside tuned ones
{
  const med = (xs) => { const s = xs.filter((x) => x != null).sort((a, b) => a - b); return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : null; };
  const on = (pass, kind) => allRows.filter((r) => r.kind === kind && r.settings === pass);
  // the recheck's medians where the pass has them, else the single measurement
  const drainOf = (pass, c, b) => med(on(pass, 'recheck').filter((r) => r.what === 'drain' && r.contender === c && r.batch === b).map((r) => r.jobs_per_s)) ??
    (on(pass, 'drain').find((r) => r.contender === c && r.batch === b) || {}).jobs_per_s;
  const enqOf = (pass, c, v) => med(on(pass, 'recheck').filter((r) => r.what === 'enqueue' && r.contender === c && r.variant === v).map((r) => r.jobs_per_s)) ??
    (on(pass, 'enqueue').find((r) => r.contender === c && r.variant === v) || {}).jobs_per_s;
  const walOf = (pass, c) => (on(pass, 'wal').find((r) => r.contender === c) || {}).bytes_per_job;
  const cell = (v, ref) => (v == null || ref == null ? 'n/a' : `${(v / ref).toFixed(2)}× (${fmt(v)} / ${fmt(ref)})`);
  const lines = [];
  const batches = uniq(allRows.filter((r) => r.kind === 'drain' || (r.kind === 'recheck' && r.what === 'drain')).map((r) => r.batch)).sort((a, b) => a - b);
  for (const b of batches) {
    lines.push([`drain, claim then complete_many in the next transaction, batch ${b}`, ...passes.map((p) => cell(drainOf(p, 'jobq-2tx', b), drainOf(p, 'bare', b))), '≥ 1.0×']);
    lines.push([`drain, claim + complete in one transaction, batch ${b}`, ...passes.map((p) => cell(drainOf(p, 'jobq', b), drainOf(p, 'bare', b))), '≥ 1.3×']);
  }
  lines.push(['enqueue, 1 job / tx', ...passes.map((p) => cell(enqOf(p, 'jobq', 'single'), enqOf(p, 'bare', 'single'))), '≥ 0.9×']);
  lines.push(['enqueue, batches of 100', ...passes.map((p) => cell(enqOf(p, 'jobq', 'batch100'), enqOf(p, 'bare', 'batch100'))), '≥ 0.9×']);
  lines.push(['enqueue with idempotency keys (vs bare 1 job / tx)', ...passes.map((p) => cell(enqOf(p, 'jobq', 'key'), enqOf(p, 'bare', 'single'))), '≥ 0.8×']);
  lines.push(['WAL bytes per job over its life, 2 tx (lower is better)', ...passes.map((p) => cell(walOf(p, 'jobq-2tx'), walOf(p, 'bare'))), '≤ 2×']);
  const body = lines.filter((l) => l.slice(1, -1).some((x) => x !== 'n/a'));
  if (body.length && passes.length) {
    tables.unshift({
      id: 0, title: `The headline, jobq / bare on each server (${passes.map((p) => `${p}: pgbench -M ${(allRows.find((r) => r.kind === 'meta' && r.settings === p) || {}).proto || '?'}`).join('; ')}): ratio (jobq / bare jobs/s)`,
      head: ['measure', ...passes.map((p) => `${p} settings`), 'target'], body,
    });
  }
}

// ------------------------------------------------------------ targets
const targets = [];
{
  const d = (c, b) => (drain.find((r) => r.contender === c && r.batch === b) || {}).jobs_per_s;
  for (const b of [1, 10, 100]) {
    for (const v of ['jobq', 'jobq-2tx']) {
      const r = ratio(d(v, b), d('bare', b));
      if (r != null) targets.push({ what: `drain claim + complete ≥ 1.0× bare, batch ${b}${v === 'jobq-2tx' ? ' (two transactions)' : ''}`, value: `${r.toFixed(2)}×`, met: r >= 1.0 });
    }
  }
  const e = (c, v) => (of('enqueue').find((r) => r.contender === c && r.variant === v) || {}).jobs_per_s;
  let r = ratio(e('jobq', 'single'), e('bare', 'single'));
  if (r != null) targets.push({ what: 'enqueue ≥ 0.9× bare insert (1 job / tx)', value: `${r.toFixed(2)}×`, met: r >= 0.9 });
  r = ratio(e('jobq', 'batch100'), e('bare', 'batch100'));
  if (r != null) targets.push({ what: 'enqueue ≥ 0.9× bare insert (batches of 100)', value: `${r.toFixed(2)}×`, met: r >= 0.9 });
  r = ratio(e('jobq', 'key'), e('bare', 'single'));
  if (r != null) targets.push({ what: 'enqueue with idempotency keys ≥ 0.8× bare insert', value: `${r.toFixed(2)}×`, met: r >= 0.8 });
  const b = of('bloat').find((x) => x.contender === 'jobq');
  if (b) {
    r = ratio(b.tps_during, b.tps_before);
    targets.push({ what: 'bloat (steady load: producers + workers): throughput during the held snapshot ≥ 0.95× before', value: `${r.toFixed(2)}×`, met: r >= 0.95 });
    r = ratio(b.p99_during, b.p99_before);
    targets.push({ what: 'bloat (steady load: producers + workers): p99 during the held snapshot ≤ 2× before', value: `${r.toFixed(2)}×`, met: r <= 2 });
  }
  const bd = of('bloat_drain').find((x) => x.contender === 'jobq');
  if (bd) {
    r = ratio(bd.tps_during, bd.tps_before);
    targets.push({ what: `bloat, workers only (no producers, ${bd.hold} s hold${run2('bloat_drain')}): throughput during ≥ 0.95× before`, value: `${r.toFixed(2)}×`, met: r >= 0.95 });
    r = ratio(bd.p99_during, bd.p99_before);
    targets.push({ what: `bloat, workers only (no producers, ${bd.hold} s hold${run2('bloat_drain')}): p99 during ≤ 2× before`, value: `${r.toFixed(2)}×`, met: r <= 2 });
  }
  const c = of('critical').find((x) => x.contender === 'jobq');
  if (c && c.max_ms != null) targets.push({ what: `critical job behind ${fmt(meta.crit_backlog)} claimed in ≤ 5 ms (enqueue call → a busy worker sees it; Node driver)`, value: `median ${c.median_ms.toFixed(1)} ms, max ${c.max_ms.toFixed(1)} ms`, met: c.max_ms <= 5 });
  const ct = of('critical_thin').find((x) => x.contender === 'jobq');
  if (ct) targets.push({ what: `critical job behind ${fmt(ct.backlog)} claimed in ≤ 5 ms (the same, thin driver: pgbench, server clock)`, value: `median ${ct.median_ms.toFixed(1)} ms, max ${ct.max_ms == null ? 'timeout' : ct.max_ms.toFixed(1) + ' ms'} of ${(ct.all_ms || []).length}`, met: ct.max_ms != null && ct.max_ms <= 5 });
  if (crit.length) {
    const mx = Math.max(...crit.map((x) => x.claim_ms));
    targets.push({ what: `critical job behind ${fmt(crit[0].backlog)}: the claim statement alone, idle queue${run2('profile_crit')}`, value: `max ${mx.toFixed(2)} ms of ${crit.length}`, met: mx <= 5 });
  }
  const wal = (c) => (of('wal').find((x) => x.contender === c) || {}).bytes_per_job;
  r = ratio(wal('jobq-2tx'), wal('bare'));
  if (r != null) targets.push({ what: 'WAL per job over its life (claim and complete_many in two transactions) ≤ 2× bare', value: `${r.toFixed(2)}× (${fmt(wal('jobq-2tx'))} / ${fmt(wal('bare'))} bytes)`, met: r <= 2 });
  const bulk = of('bulk');
  const largest = (w) => bulk.filter((x) => x.what === w).sort((a, b2) => b2.n - a.n)[0];
  const smallest = (w) => bulk.filter((x) => x.what === w).sort((a, b2) => a.n - b2.n)[0];
  if (largest('enqueue_many') && largest('insert_select')) {
    r = ratio(largest('insert_select').seconds, largest('enqueue_many').seconds);
    targets.push({ what: `bulk enqueue: ${fmt(largest('enqueue_many').n)} jobs in one enqueue_many ≥ 0.5× bare INSERT ... SELECT`, value: `${r.toFixed(2)}× (${largest('enqueue_many').seconds} s / ${largest('insert_select').seconds} s)`, met: r >= 0.5 });
  }
  for (const w of ['enqueue_many', 'enqueue_many_keys', 'retry_failed']) {
    const hi = largest(w);
    const lo = smallest(w);
    if (!hi || hi === lo) continue;
    r = hi.us_per_job / lo.us_per_job;
    targets.push({ what: `${w} linear in its size: time per job at ${fmt(hi.n)} ≤ 1.5× at ${fmt(lo.n)}`, value: `${r.toFixed(2)}×`, met: r <= 1.5 });
  }
  const s = (B, n) => (scale.find((x) => x.contender === 'jobq' && x.backlog === B && x.clients === n) || {}).jobs_per_s;
  const backlogs = uniq(scale.map((x) => x.backlog)).sort((a, b2) => a - b2);
  if (backlogs.length > 1) {
    r = ratio(s(backlogs[backlogs.length - 1], 8), s(backlogs[0], 8));
    if (r != null) targets.push({ what: `flat scaling: drain rate at ${fmt(backlogs[backlogs.length - 1])} ≥ 0.9× at ${fmt(backlogs[0])} (8 clients)`, value: `${r.toFixed(2)}×`, met: r >= 0.9 });
  }
}

if (!judged) targets.forEach((t) => { t.met = null; });
fs.writeFileSync(jsonFile, JSON.stringify({ meta, settings, results: rows.filter((r) => r.kind !== 'meta'), targets }, null, 2) + '\n');

// ------------------------------------------------------------ output
function textTable(t) {
  const all = [t.head, ...t.body];
  const w = t.head.map((_, i) => Math.max(...all.map((r) => String(r[i]).length)));
  const line = (r) => r.map((x, i) => (i === 0 ? String(x).padEnd(w[i]) : String(x).padStart(w[i]))).join('  ');
  return `${t.title}\n${line(t.head)}\n${w.map((n) => '-'.repeat(n)).join('  ')}\n${t.body.map(line).join('\n')}\n`;
}
function mdTable(t) {
  const esc = (x) => String(x).replace(/\|/g, '\\|');
  return `### ${t.title}\n\n| ${t.head.map(esc).join(' | ')} |\n|${t.head.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|\n` +
    t.body.map((r) => `| ${r.map(esc).join(' | ')} |`).join('\n') + '\n';
}

if (flag !== '--markdown') {
  process.stdout.write('\n' + tables.map(textTable).join('\n') +
    (judged
      ? '\nTargets (jobq, this run):\n' + targets.map((t) => `  ${t.met ? 'MET   ' : 'MISSED'} ${t.what}: ${t.value}`).join('\n')
      : `\nTargets (jobq): ${targets.length} computed, not judged at smoke size (bench/run --quick or --full judges them; the values are in ${path.basename(jsonFile)})`) + '\n');
} else {
  const notes = path.join(__dirname, 'notes.md');
  const parts = [];
  parts.push(`## Targets (measured in this run)\n\n| target | measured | |\n|---|---|---|\n` +
    targets.map((t) => `| ${t.what} | ${t.value} | ${t.met ? 'met' : '**missed**'} |`).join('\n') + '\n');
  parts.push('## Results\n\n![drain by batch size and drain rate by clients](bench/chart.png)\n\n' + tables.map(mdTable).join('\n'));
  parts.push(`## Machine and settings\n\n* ${meta.cpus} CPUs (${meta.cpu_model}), ${meta.mem_gb} GB RAM; PostgreSQL ${meta.pg}; ` +
    `jobq at commit ${meta.jobq_commit}${rows.some((r) => r.run === 2) ? ' (both runs)' : ''}; pg-boss ${meta.pgboss_version}, graphile-worker ${meta.graphile_version} (Node ${process.version}).\n` +
    `* Server (initdb'd by bench/run, Unix socket, every contender in its own database):\n\n\`\`\`\n${settings.join('\n')}\n\`\`\`\n` +
    `* Sizes in this run (--${mode}): enqueue ${meta.enq_t} s per variant; drain backlog ${fmt(meta.drain_backlog)}, ` +
    `${meta.drain_t} s per batch size (or until empty); steady state ${meta.steady_t} s at ${meta.steady_rate} jobs/s; ` +
    `critical job behind ${fmt(meta.crit_backlog)}; scaling ${meta.scale_t} s per point; ` +
    `bloat ${meta.bloat_before} s / hold ${meta.bloat_hold} s (bare, jobq) or ${meta.bloat_hold_others} s (others) / ${meta.bloat_after} s on a ${fmt(meta.bloat_backlog)} backlog; ` +
    `sizes at ${fmt(meta.size_n)} jobs; ${fmt(meta.dupkeys)} existing keys for the duplicate run.\n`);
  let doc = parts.join('\n');
  if (fs.existsSync(notes)) {
    doc = fs.readFileSync(notes, 'utf8').replace('<!-- GENERATED -->', doc);
  }
  fs.writeFileSync(mdFile, doc);
}
