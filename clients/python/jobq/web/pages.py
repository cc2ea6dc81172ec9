"""jobq/web/pages.py -- the dashboard's pages (the GETs).

Each page method reads what it shows through the pool, as the dashboard's
role, and renders its template (render.TEMPLATES, autoescaped).  The
overview, its chart and the dead letter's groups are served from answers
shared by every viewer for a few seconds (db.Cached, db.Minutes).
"""

import datetime
import json

import psycopg
import psycopg.errors

from .db import GROUPS_TTL, STATS_TTL, Db, db_message
from .queries import (Q_APP_WORKERS, Q_DETAILS, Q_HELD, Q_WF_EDGES, Q_WF_JOBS,
                      Q_WORKFLOWS, keyset_page)
from .render import (STATUS_FILL, STATUSES, TEMPLATES, WF_MAX_JOBS, Refused, ago,
                     chart_layout, digits, qs, wf_layout)

PAYLOAD_EXAMPLE = '{"customer": {"id": 42}}'
SEARCH_TIMEOUT = "5s"    # statement_timeout of each statement of a Jobs page (a search)


class Pages:
    """The pages of a request handler (mixed into server.Handler)."""

    def overview_rows(self):
        """Per queue: the live numbers and the (older) counts of queue_stats."""
        running = {r["queue"]: r["running"] for r in self.app.running.get()}
        done, bad = {}, {}
        cut = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        for r in self.app.minutes.get(60):
            if r["m"] >= cut.replace(second=0, microsecond=0):
                done[r["queue"]] = done.get(r["queue"], 0) + r["completed"]
                bad[r["queue"]] = bad.get(r["queue"], 0) + r["failed"]
        stats = {r["queue"]: r for r in self.app.stats.get()}
        out = []
        for q in self.app.queues.get():
            st = stats.get(q["queue"], {})
            out.append({"queue": q["queue"], "ready": st.get("ready", ""),
                        "delayed": st.get("delayed", ""),
                        "running": running.get(q["queue"], 0),
                        "completed_last_hour": done.get(q["queue"], 0),
                        "failed_last_hour": bad.get(q["queue"], 0),
                        "failed": st.get("failed", ""),
                        "oldest_pending_age": ago(st.get("oldest_pending_age")),
                        "paused": "paused" if q["paused"] else "no",
                        "breaker_state": q["breaker_state"],
                        "counted_at": self.app.stats.when.strftime("%H:%M:%S")})
        return out

    def page_overview(self, s, params):
        rows = self.overview_rows()
        rng = "day" if params.get("range") == "day" else "hour"
        with Db(self.app.pool) as db:
            admin = {r["queue"]: self.may(db, r["queue"], "administer") for r in rows}
        self.render("overview.html", "Overview", "/", s, live=True, rows=rows, admin=admin, rng=rng,
                    other="hour" if rng == "day" else "day", stats_ttl=int(STATS_TTL),
                    counted=rows[0]["counted_at"] if rows else "")

    def api_overview(self, s, params):
        self.send(200, json.dumps({"queues": self.overview_rows()}), "application/json",
                  extra=self.cookies())

    def chart(self, s, params):
        day = params.get("range") == "day"
        minutes = 1440 if day else 60
        queue = params.get("queue")
        pts = [r for r in self.app.minutes.get(minutes) if not queue or r["queue"] == queue]
        title = "completed and failed per minute, last " + ("day" if day else "hour")
        if queue:
            title += ", queue " + queue
        svg = TEMPLATES.get_template("chart.svg").render(c=chart_layout(pts, minutes), title=title)
        self.send(200, svg, "image/svg+xml; charset=utf-8")

    def page_jobs(self, s, params):
        where, args = [], []
        for field in ("queue", "kind", "status"):
            if field == "kind" and params.get(field, "").endswith("*"):
                where.append("pg_catalog.starts_with(j.kind, %s)")
                args.append(params[field][:-1])
            elif params.get(field):
                where.append(f"j.{field} = %s")
                args.append(params[field])
        bad = ""
        if params.get("key"):
            if params["key"].endswith("*"):
                where.append("pg_catalog.starts_with(j.idempotency_key, %s)")
                args.append(params["key"][:-1])
            else:
                where.append("j.idempotency_key = %s")
                args.append(params["key"])
        if params.get("payload"):
            try:
                json.loads(params["payload"])
                where.append("j.payload OPERATOR(pg_catalog.@>) %s::jsonb")
                args.append(params["payload"])
            except ValueError:
                bad = "the payload filter is not JSON (it is matched with @>: {\"customer\": {\"id\": 42}})"
        if params.get("error"):
            where.append("pg_catalog.strpos(j.last_error, %s) > 0")
            args.append(params["error"])
        if params.get("from"):
            where.append("j.created_at >= %s::timestamptz")
            args.append(params["from"])
        if params.get("to"):
            where.append("j.created_at < %s::timestamptz")
            args.append(params["to"])
        before = int(params["before"]) if digits(params.get("before", "")) else None
        select = ("SELECT j.job_id, j.queue, j.kind, j.status, j.priority, j.retry_count, "
                  "j.max_retries, j.idempotency_key, j.run_at, j.created_at, j.finished_at, "
                  "pg_catalog.left(j.last_error, 200) AS last_error FROM jobq.jobs j")
        err = bad
        rows, nxt_id = [], None
        try:
            if not bad:
                with Db(self.app.pool) as db, db.conn.transaction():
                    # every statement of the search within SEARCH_TIMEOUT
                    db.conn.execute(f"SET LOCAL statement_timeout = '{SEARCH_TIMEOUT}'")
                    rows, nxt_id = keyset_page(db, select, where, args, before)
        except psycopg.errors.QueryCanceled:
            err = (f"the search took longer than {SEARCH_TIMEOUT} and was stopped: "
                   "narrow it (a queue, a kind, a time range)")
        except psycopg.Error as x:
            err = db_message(x)
        nxt = first = ""
        if nxt_id is not None:
            nxt = qs(**dict(params, before=nxt_id))
        if params.get("before"):
            first = qs(**{k: v for k, v in params.items() if k != "before"})
        self.render("jobs.html", "Jobs", "/jobs", s, params=params, statuses=STATUSES, err=err,
                    rows=rows, nxt=nxt, nxt_id=nxt_id, first=first, payload_example=PAYLOAD_EXAMPLE)

    def page_job(self, s, job_id):
        with Db(self.app.pool) as db:
            j = db.one("SELECT j.*, jobq.priority_label(j.priority) AS label "
                       "FROM jobq.jobs j WHERE j.job_id = %s", (job_id,))
            if j is None:
                raise Refused(404, f"no job {job_id} (or not in a queue you may see)")
            att = db.rows("SELECT a.* FROM jobq.job(%s::bigint) a", (job_id,))
            # the stack traces: jobq.attempt, which only its readers may read
            try:
                details = {r["attempt"]: r["details"] for r in db.rows(Q_DETAILS, (job_id,))}
            except psycopg.errors.InsufficientPrivilege:
                details = None
            except psycopg.errors.UndefinedColumn:
                details = {}
            admin = self.may(db, j["queue"], "administer")
            parents = db.rows("SELECT p.job_id, p.status FROM jobq.parent_results(%s::bigint) p "
                              "ORDER BY p.job_id LIMIT 50", (job_id,))
            has_children = db.value("SELECT true FROM jobq.workflow_jobs(%s::bigint) w "
                                    "WHERE w.job_id <> %s LIMIT 1", (job_id, job_id))
        self.render("job.html", f"Job {job_id}", "/jobs", s, j=j, attempts=att, details=details,
                    admin=admin, parents=parents, has_children=has_children)

    def page_dead(self, s, params):
        groups = self.app.dead_groups.get()
        with Db(self.app.pool) as db:
            where, args = ["j.status = 'failed'"], []
            for f in ("queue", "kind"):
                if params.get(f):
                    where.append(f"j.{f} = %s")
                    args.append(params[f])
            if params.get("error"):
                where.append("pg_catalog.starts_with(COALESCE(j.last_error, ''), %s)")
                args.append(params["error"])
            before = int(params["before"]) if digits(params.get("before", "")) else None
            jobs, nxt_id = keyset_page(
                db, "SELECT j.job_id, j.queue, j.kind, j.attempts, j.finished_at, "
                "pg_catalog.left(j.last_error, 200) AS last_error FROM jobq.jobs j",
                where, args, before)
            queues = {g["queue"] for g in groups} | {j["queue"] for j in jobs}
            admin = {q: self.may(db, q, "administer") for q in queues}
        nxt = qs(**dict(params, before=nxt_id)) if nxt_id is not None else ""
        self.render("dead.html", "Dead letter", "/dead", s, groups=groups, jobs=jobs, admin=admin,
                    any_admin=any(admin.get(j["queue"]) for j in jobs),
                    back="/dead" + ("?" + qs(**params) if params else ""),
                    shown=", ".join(f"{k} {params[k]}" for k in ("queue", "kind", "error") if params.get(k)),
                    nxt=nxt, nxt_id=nxt_id, groups_ttl=int(GROUPS_TTL))

    def page_schedules(self, s, params):
        with Db(self.app.pool) as db:
            rows = db.rows("""
SELECT s.schedule_id, s.name, s.cron, s.timezone, s.misfire, s.kind, s.queue, s.priority, s.paused,
       s.next_fire_at, s.last_fire_at, s.last_job_id, s.last_job_status,
       pg_catalog.to_char(s.next_fire_at AT TIME ZONE s.timezone, 'YYYY-MM-DD HH24:MI:SS') AS next_local,
       pg_catalog.to_char(s.last_fire_at AT TIME ZONE s.timezone, 'YYYY-MM-DD HH24:MI:SS') AS last_local,
       ARRAY(SELECT pg_catalog.to_char(f.t AT TIME ZONE s.timezone, 'YYYY-MM-DD HH24:MI:SS')
               FROM (WITH RECURSIVE n(t, i) AS (
                       SELECT s.next_fire_at, 1
                     UNION ALL
                       SELECT jobq.cron_next(s.cron, n.t, s.timezone), n.i + 1
                         FROM n WHERE n.i < 4 AND n.t IS NOT NULL)
                     SELECT n.t FROM n WHERE n.i > 1 AND n.t IS NOT NULL) f) AS later
  FROM jobq.schedules s ORDER BY s.name""")
            admin = {q: self.may(db, q, "administer") for q in {r["queue"] for r in rows}}
            # the jobs of its last fires: keys "jobq:schedule:ID:..." (timed
            # and run-now fires), newest first, in a bounded search by keyset
            fires = {}
            for r in rows[:50]:
                fires[r["name"]], _ = keyset_page(
                    db, "SELECT j.job_id, j.status, pg_catalog.to_char(j.run_at AT TIME ZONE %s, "
                    "'YYYY-MM-DD HH24:MI:SS') AS local FROM jobq.jobs j",
                    ["j.kind = %s", "j.queue = %s", "pg_catalog.starts_with(j.idempotency_key, %s)"],
                    [r["kind"], r["queue"], f"jobq:schedule:{r['schedule_id']}:"], None, limit=3,
                    select_args=[r["timezone"]])
        self.render("schedules.html", "Schedules", "/schedules", s, rows=rows, admin=admin, fires=fires)

    def app_workers(self, db):
        """The application's workers (jobq.app_workers), each with the jobs it
        holds ("held": running under its id in the queues it named, as its
        jobs_in_hand counts them)."""
        if not self.app.has_app_workers:
            return None
        rows = db.rows(Q_APP_WORKERS)
        by_id = {}
        # ids are per role: two roles' workers may share one, so the jobs
        # are looked up once per id and shared out by the queues each named
        ids = sorted({r["worker_id"] for r in rows})
        if ids:
            for j in db.rows(Q_HELD, (ids,)):
                by_id.setdefault(j["worker_id"], []).append(j)
        for r in rows:
            r["held"] = [j for j in by_id.get(r["worker_id"], []) if j["queue"] in (r["queues"] or [])]
        return rows

    def page_workers(self, s, params):
        with Db(self.app.pool) as db:
            apps = self.app_workers(db)
            workers = db.rows("SELECT w.* FROM jobq.workers w ORDER BY w.database, w.role, w.pid")
            procs = db.rows("""
SELECT a.pid, a.backend_type, a.datname, a.state, a.wait_event_type, a.wait_event,
       a.xact_start, a.query_start, pg_catalog.left(a.query, 200) AS query
  FROM pg_catalog.pg_stat_activity a
 WHERE a.backend_type LIKE 'jobq%%' ORDER BY a.backend_type, a.pid""")
            service = []
            if self.app.has_service:
                try:
                    service = db.rows("SELECT * FROM jobq.service")
                except psycopg.Error:
                    service = []
            try:
                health, herr = db.rows("SELECT h.* FROM jobq.health() h"), ""
            except psycopg.Error as x:
                health, herr = [], db_message(x)
        for w in apps or []:
            info = w["info"] if isinstance(w["info"], dict) else {}
            rest = {k: v for k, v in info.items()
                    if k not in ("host", "pid", "concurrency", "library", "version")}
            w["rest"] = json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else ""
        self.render("workers.html", "Workers and health", "/workers", s, apps=apps,
                    workers=workers, procs=procs, service=service, health=health, herr=herr)

    def page_workflows(self, s, params):
        err = ""
        try:
            with Db(self.app.pool) as db:
                rows = db.rows(Q_WORKFLOWS)
        except psycopg.Error as x:
            rows, err = [], db_message(x)
        self.render("workflows.html", "Workflows", "/workflows", s, rows=rows, err=err, states=list(STATUS_FILL))

    def page_workflow(self, s, root):
        with Db(self.app.pool) as db:
            jobs = db.rows(Q_WF_JOBS, (root, WF_MAX_JOBS + 1))
            if not any(j["job_id"] == root for j in jobs):
                raise Refused(404, f"no job {root} (or not in a queue you may see)")
            more = len(jobs) > WF_MAX_JOBS
            jobs = jobs[:WF_MAX_JOBS]
            edges = [(r["parent"], r["child"])
                     for r in db.rows(Q_WF_EDGES, ([j["job_id"] for j in jobs],))]
            st = db.one("SELECT w.* FROM jobq.workflow_status(%s::bigint) w", (root,))
        self.render("workflow.html", f"Workflow of job {root}", "/workflows", s, jobs=jobs, st=st,
                    more=more, max_jobs=WF_MAX_JOBS, root=root, g=wf_layout(jobs, edges),
                    states=list(STATUS_FILL), fills=STATUS_FILL)
