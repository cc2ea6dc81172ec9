#!/usr/bin/env python3
"""bench/wal/walsplit.py: split pg_waldump's records of one phase by relation
and record type.

    pg_waldump -p PGWAL -s LSN0 -e LSN1 | walsplit.py RELMAP JOBS

RELMAP: lines "relfilenode|relname" of the database measured (from pg_class).
Prints one line per (relation, record type): records per job, record bytes per
job, full-page-image bytes per job, then a total per relation.  A record is
counted on the relation of its first block reference (a heap UPDATE that moves
a row to another page names the same relation twice); records with no block
(commits, running-xacts) are "(none)".
"""
import re
import sys
from collections import defaultdict

relmap = {}
with open(sys.argv[1]) as f:
    for line in f:
        line = line.strip()
        if '|' in line:
            node, name = line.split('|', 1)
            relmap[node] = name
jobs = float(sys.argv[2])

rec_re = re.compile(r'^rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+),.*?desc: (\S+)(.*)$')
blk_re = re.compile(r'blkref #0: rel (\d+)/(\d+)/(\d+)(?: fork (\S+))? blk \d+')
agg = defaultdict(lambda: [0, 0, 0])   # (rel, type) -> [n, rec bytes, fpi bytes]
for line in sys.stdin:
    m = rec_re.match(line)
    if not m:
        continue
    rmgr, rec, tot, desc, rest = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4), m.group(5)
    b = blk_re.search(rest)
    if b:
        rel = relmap.get(b.group(3), 'relfilenode ' + b.group(3))
        if b.group(4):
            rel += ' (' + b.group(4) + ')'
    else:
        rel = '(none)'
    typ = rmgr + '/' + desc
    a = agg[(rel, typ)]
    a[0] += 1
    a[1] += rec
    a[2] += tot - rec

rels = defaultdict(lambda: [0, 0, 0])
for (rel, typ), a in agg.items():
    for i in range(3):
        rels[rel][i] += a[i]
tot = [sum(r[i] for r in rels.values()) for i in range(3)]
print('%-34s %-26s %8s %9s %9s' % ('relation', 'record type', 'rec/job', 'B/job', 'FPI B/job'))
for rel in sorted(rels, key=lambda r: -(rels[r][1] + rels[r][2])):
    for (r, typ), a in sorted(agg.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        if r != rel:
            continue
        print('%-34s %-26s %8.2f %9.1f %9.1f' % (rel, typ, a[0] / jobs, a[1] / jobs, a[2] / jobs))
    t = rels[rel]
    print('%-34s %-26s %8.2f %9.1f %9.1f' % (rel, '= relation total', t[0] / jobs, t[1] / jobs, t[2] / jobs))
print('%-34s %-26s %8.2f %9.1f %9.1f' % ('ALL', '= total', tot[0] / jobs, tot[1] / jobs, tot[2] / jobs))
