"""jobq/web/actions.py -- the dashboard's operations (the POSTs to /action).

Each operation is one jobq SQL function run as the dashboard's role, which
checks the capability itself; its outcome becomes a message shown on the
next page.  Operations that change many jobs, or delete one, are asked
about first (confirm_page: the same form again, to be confirmed).
"""

import json

import psycopg

from .db import Db, db_message
from .render import Refused, digits

# actions asked about first (a page with the same form, confirmed): what
# changes many jobs, and what deletes; the answer's button label
CONFIRM = {"discard": "discard it", "discard_selected": "discard them",
           "retry_selected": "retry them", "retry_failed": "retry them",
           "release_running": "put them back"}


class Actions:
    """The operations of a request handler (mixed into server.Handler)."""

    def confirm_page(self, s, f, op, back):
        """Ask before an action that changes many jobs or deletes one: the same form again, confirmed."""
        def one(name):
            return (f.get(name) or [""])[-1].strip()
        ids = sorted({v for v in f.get("job_id", []) if digits(v)}, key=int)
        what = {
            "discard": f"Delete job {one('job_id')} and its attempt history for good? "
                       "(Its idempotency key stays reserved for jobq.idempotency_retention.)",
            "discard_selected": f"Delete the {len(ids)} selected jobs ({', '.join(ids[:20])}"
                                f"{' ...' if len(ids) > 20 else ''}) and their attempt history for good?",
            "retry_selected": f"Retry the {len(ids)} selected jobs ({', '.join(ids[:20])}"
                              f"{' ...' if len(ids) > 20 else ''})?",
            "retry_failed": "Retry every failed job" + (f" of kind {one('kind')}" if one("kind") else "")
                            + (f" in queue {one('queue')}" if one("queue") else "") + "?",
            "release_running": f"Put every running job of queue {one('queue')}"
                               + (f" held by {one('worker_id')}" if one("worker_id") else "")
                               + " back to pending? A worker still running one of them will lose its lease.",
        }.get(op, "Go on?")
        if op in ("retry_selected", "discard_selected") and not ids:
            s.flash("error", "no job selected")
            return self.redirect(back)
        hidden = [(k, v) for k, vs in f.items() if k != "confirmed" for v in vs]
        self.render("confirm.html", "Are you sure?", "", s, what=what, hidden=hidden, op=op,
                    answer=CONFIRM[op], back=back, danger=op in ("discard", "discard_selected"))

    def action(self, s, f):
        """Run one operation as this role; its outcome becomes a flash message."""
        def one(name):
            return (f.get(name) or [""])[-1].strip()

        def job_id():
            v = one("job_id")
            if not digits(v):
                raise Refused(400, "a job id is a positive integer")
            return int(v)
        op = one("op")
        try:
            with Db(self.app.pool) as db:
                if op in ("retry", "cancel"):
                    j = job_id()
                    done = db.value(f"SELECT jobq.{op}(%s::bigint)", (j,))
                    st = db.value("SELECT j.status FROM jobq.jobs j WHERE j.job_id = %s", (j,))
                    if done:
                        s.flash("ok", f"job {j}: {st}")
                    else:
                        s.flash("error", f"job {j} is {st or 'gone'}; " +
                                ("only failed or cancelled jobs can be retried" if op == "retry"
                                 else "only pending, blocked or running jobs can be cancelled"))
                elif op == "retry_selected":
                    ids = [int(v) for v in f.get("job_id", []) if digits(v)]
                    if not ids:
                        s.flash("error", "no job selected")
                        return
                    with db.conn.transaction():
                        n = sum(1 for j in ids if db.value("SELECT jobq.retry(%s::bigint)", (j,)))
                    s.flash("ok", f"{n} of {len(ids)} selected jobs back to pending")
                elif op == "discard":
                    j = job_id()
                    done = db.value("SELECT jobq.discard(%s::bigint)", (j,))
                    if done:
                        s.flash("ok", f"job {j} discarded")
                    else:
                        st = db.value("SELECT j.status FROM jobq.jobs j WHERE j.job_id = %s", (j,))
                        s.flash("error", f"job {j} is {st or 'gone'}; only failed or cancelled jobs can be discarded")
                elif op == "discard_selected":
                    ids = [int(v) for v in f.get("job_id", []) if digits(v)]
                    if not ids:
                        s.flash("error", "no job selected")
                        return
                    with db.conn.transaction():
                        n = sum(1 for j in ids if db.value("SELECT jobq.discard(%s::bigint)", (j,)))
                    s.flash("ok", f"{n} of {len(ids)} selected jobs discarded")
                elif op == "retry_failed":
                    n = db.value("SELECT jobq.retry_failed(kind => %s::text, queue => %s::text)",
                                 (one("kind") or None, one("queue") or None))
                    s.flash("ok", f"{n} failed job{'s' if n != 1 else ''} back to pending")
                elif op == "update":
                    j = job_id()
                    payload = one("payload") or None
                    if payload is not None:
                        try:
                            if not isinstance(json.loads(payload), dict):
                                raise ValueError
                        except ValueError:
                            s.flash("error", "the payload must be a JSON object")
                            return
                    prio = one("priority") or None
                    if prio is not None and not digits(prio.removeprefix("-")):
                        prio = db.value("SELECT jobq.priority(%s::text)", (prio,))
                    retries = one("max_retries") or None
                    with db.conn.transaction():
                        done = db.value("SELECT jobq.update_job(%s::bigint, %s::jsonb, %s::timestamptz, %s::int, %s::int)",
                                        (j, payload, one("run_at") or None, prio, retries))
                        st = db.value("SELECT j.status FROM jobq.jobs j WHERE j.job_id = %s", (j,))
                        if done and one("then_retry") and st in ("failed", "cancelled"):
                            db.value("SELECT jobq.retry(%s::bigint)", (j,))
                            st = "pending"
                    if done:
                        s.flash("ok", f"job {j} changed; it is {st}")
                    else:
                        s.flash("error", f"job {j} is {st or 'gone'}; only pending, blocked, "
                                "failed or cancelled jobs can be changed")
                elif op == "release_running":
                    n = db.value("SELECT jobq.release_running(%s::text, %s::text)",
                                 (one("queue"), one("worker_id") or None))
                    s.flash("ok", f"{n} running job{'s' if n != 1 else ''} of {one('queue')} back to pending")
                elif op in ("pause", "resume"):
                    db.value(f"SELECT jobq.{op}(%s::text)", (one("queue"),))
                    s.flash("ok", f"queue {one('queue')}: {op}d")
                elif op in ("pause_schedule", "resume_schedule"):
                    done = db.value(f"SELECT jobq.{op}(%s::text)", (one("name"),))
                    s.flash("ok" if done else "error",
                            f"schedule {one('name')}: {op.split('_')[0]}d" if done
                            else f"schedule {one('name')}: no change")
                elif op == "run_schedule":
                    j = db.value("SELECT jobq.run_schedule(%s::text)", (one("name"),))
                    s.flash("ok", f"schedule {one('name')} fired: job {j}")
                else:
                    raise Refused(400, "unknown operation")
        except psycopg.Error as x:
            s.flash("error", "the database said: " + db_message(x))
