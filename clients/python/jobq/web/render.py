"""jobq/web/render.py -- how the dashboard's answers look.

Every page is a jinja2 template of templates/ with autoescaping on: no
value reaches a page unescaped, and no HTML is built in Python.  Here are
the template environment, the formats the templates use (ts, ago, pretty,
qs), the layouts of the two SVG pictures (chart_layout for chart.svg,
wf_layout for workflow.svg: numbers only, drawn by the templates) and
Refused, a request answered with an error page.
"""

import datetime
import json
import os
import urllib.parse

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))


def ts(value):
    """A timestamp to the second, as text."""
    if value is None:
        return ""
    if isinstance(value, datetime.datetime):
        return value.isoformat(" ", "seconds")
    return str(value)


def ago(value):
    """An interval, rounded to the second."""
    if value is None:
        return ""
    if isinstance(value, datetime.timedelta):
        return str(datetime.timedelta(seconds=int(value.total_seconds())))
    return str(value)


def pretty(value):
    """A jsonb value, indented."""
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def qs(**params):
    """A query string from the parameters that are set."""
    return urllib.parse.urlencode({k: v for k, v in params.items()
                                   if v not in (None, "")})

NAV = [("/", "Overview"), ("/jobs", "Jobs"), ("/dead", "Dead letter"),
       ("/workflows", "Workflows"), ("/schedules", "Schedules"), ("/workers", "Workers and health")]

STATUSES = ["pending", "blocked", "running", "completed", "failed", "cancelled"]

# every page is a template of templates/, every value escaped by jinja2
# unless a template says otherwise (none does)
TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(os.path.join(HERE, "templates")),
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
TEMPLATES.globals.update(ts=ts, ago=ago, pretty=pretty, qs=qs)

STATUS_FILL = {"pending": "#90caf9", "blocked": "#b39ddb", "running": "#ffb74d",
               "completed": "#81c784", "failed": "#e57373", "cancelled": "#bdbdbd"}
WF_MAX_JOBS = 400        # jobs of a workflow drawn (the rest are counted)
WF_MAX_LAYER = 30        # jobs drawn side by side in one layer (the rest are counted)


def chart_layout(points, minutes):
    """Completed and failed per minute, placed for templates/chart.svg: bars for an hour, lines for a day."""
    w, h, left, bottom, top, right = 720, 200, 44, 24, 22, 24
    now = datetime.datetime.now(datetime.timezone.utc).replace(second=0, microsecond=0)
    start = now - datetime.timedelta(minutes=minutes)
    done = [0] * (minutes + 1)
    bad = [0] * (minutes + 1)
    for p in points:
        i = int((p["m"] - start).total_seconds() // 60)
        if 0 <= i <= minutes:
            done[i] += p["completed"]
            bad[i] += p["failed"]
    if minutes <= 60:
        peak = max(max(d + f for d, f in zip(done, bad)), 1)
    else:
        peak = max(max(done), max(bad), 1)
    sx = (w - left - right) / minutes
    sy = (h - bottom - top) / peak

    def line(vals):
        return " ".join(f"{left + i * sx:.1f},{h - bottom - v * sy:.1f}"
                        for i, v in enumerate(vals))
    bars, lines = [], []
    if minutes <= 60:
        # bars: completed, with failed stacked on top
        bw = max(sx - 2, 1)
        for i in range(minutes + 1):
            x0 = left + i * sx - bw / 2
            y0 = h - bottom
            for v, colour in ((done[i], "#2a7d2a"), (bad[i], "#c0392b")):
                if v:
                    bars.append((x0, y0 - v * sy, bw, v * sy, colour))
                    y0 -= v * sy
    else:
        lines = [(line(done), "#2a7d2a"), (line(bad), "#c0392b")]
    step = 10 if minutes <= 60 else 240
    ticks = [(left + i * sx, (start + datetime.timedelta(minutes=i)).strftime("%H:%M"))
             for i in range(0, minutes + 1, step)]
    return {"w": w, "h": h, "left": left, "bottom": bottom, "top": top, "right": right,
            "peak": peak, "bars": bars, "lines": lines, "ticks": ticks}


def wf_layout(jobs, edges):
    """A workflow's graph placed for templates/workflow.svg: a layer per generation, top to bottom.

    jobs: rows (job_id, kind, status) in job id order, which is an order
    in which every parent comes before its children (a parent exists when
    its child is enqueued); edges: (parent, child) pairs.  A job's layer is
    its longest path from the root; within a layer jobs are ordered by the
    mean position of their parents (fewer crossings), then by id.
    """
    bw, bh, gx, gy, pad = 150, 40, 16, 46, 12
    parents = {}
    for p, c in edges:
        parents.setdefault(c, []).append(p)
    depth = {}
    for j in jobs:
        ps = [depth[p] for p in parents.get(j["job_id"], []) if p in depth]
        depth[j["job_id"]] = max(ps) + 1 if ps else 0
    layers = {}
    for j in jobs:
        layers.setdefault(depth[j["job_id"]], []).append(j)
    pos, hidden, boxes = {}, [], []
    for d in sorted(layers):
        def key(j):
            xs = [pos[p][0] for p in parents.get(j["job_id"], []) if p in pos]
            return (sum(xs) / len(xs) if xs else 0, j["job_id"])
        row = sorted(layers[d], key=key)
        for i, j in enumerate(row[:WF_MAX_LAYER]):
            pos[j["job_id"]] = (pad + i * (bw + gx), pad + d * (bh + gy))
            boxes.append((j, *pos[j["job_id"]]))
        if len(row) > WF_MAX_LAYER:
            hidden.append((pad + WF_MAX_LAYER * (bw + gx), pad + d * (bh + gy), len(row) - WF_MAX_LAYER))
    lines = []
    for p, c in edges:
        if p in pos and c in pos:
            x1, y1 = pos[p][0] + bw // 2, pos[p][1] + bh
            x2, y2 = pos[c][0] + bw // 2, pos[c][1]
            lines.append((p, c, x1, y1, x2, y2, (y1 + y2) // 2))
    width = pad * 2 + max([min(len(v), WF_MAX_LAYER) + (1 if len(v) > WF_MAX_LAYER else 0)
                           for v in layers.values()] or [1]) * (bw + gx)
    height = pad * 2 + max(len(layers), 1) * (bh + gy) - gy
    return {"width": width, "height": height, "bw": bw, "bh": bh, "boxes": boxes,
            "edges": lines, "hidden": hidden, "parents": parents}


def digits(v):
    """Is v a number in ASCII digits?  (str.isdigit also takes "²", which int() refuses.)"""
    return v.isascii() and v.isdigit()


class Refused(Exception):
    """A request answered with an HTTP error status."""

    def __init__(self, status, msg):
        super().__init__(msg)
        self.status = status
