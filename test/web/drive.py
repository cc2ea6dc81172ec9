#!/usr/bin/python3
"""test/web/drive.py -- the dashboard's tests, run by test/web/run.sh.

Connects with the PG* variables (a superuser on a throwaway server), makes
queues, jobs, dead letters (with hostile errors and payloads), a schedule
and two roles, starts "jobq web" instances on free ports and drives
headless chromium through the DevTools protocol (a websocket client in
the standard library below; no Selenium).  Prints "ok - ..." / "not ok -
..." per test and "N passed, N failed" last; exits 1 on a failure.
"""

import argparse
import base64
import concurrent.futures
import http.client
import http.cookiejar
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBQ = os.environ.get("JOBQ", os.path.join(ROOT, "bin", "jobq"))
HOSTILE_ERR = '<script>window.__pwned=1</script>"><img src=x id=pwn1> & \'quote\''
HOSTILE_PAYLOAD = {"note": "</pre></textarea><script>window.__pwned=2</script><b id=pwn2>bold</b>"}
HOSTILE_KIND = 'evil<i id="pwn3">kind</i>'
TRACE = ('Traceback (most recent call last):\n  File "worker.py", line 12, in handle\n'
         '    raise Upstream(resp.status)\nUpstream: 503 <i id="pwn5">Service Unavailable</i>')

passed = failed = 0


def check(name, cond, detail=""):
    """One test: prints ok / not ok, and what differed."""
    global passed, failed
    if cond:
        passed += 1
        print(f"ok - {name}", flush=True)
    else:
        failed += 1
        print(f"not ok - {name}", flush=True)
        if detail:
            for line in str(detail).splitlines()[:20]:
                print(f"#   {line}", flush=True)
    return cond


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, timeout=20.0, step=0.1):
    """Poll pred until it is true or the (generous) deadline passes."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


# ---------------------------------------------------------------------------
# a minimal websocket client and the DevTools protocol over it


class WebSocket:
    """RFC 6455, client side, text frames: enough for DevTools."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("websocket handshake failed")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise OSError("websocket handshake refused: " + head.decode(errors="replace"))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise OSError("websocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, text, opcode=1):
        data = text.encode() if isinstance(text, str) else text
        n = len(data)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(head + mask + body)

    def recv(self):
        parts = []
        while True:
            b1, b2 = self._read(2)
            op, n = b1 & 0x0F, b2 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            mask = self._read(4) if b2 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if op == 9:
                self.send(data, 10)
                continue
            if op == 8:
                raise OSError("websocket closed by the browser")
            if op in (0, 1, 2):
                parts.append(data)
                if b1 & 0x80:
                    return b"".join(parts).decode()


class Browser:
    """Headless chromium, one tab, driven over DevTools."""

    def __init__(self, work):
        self.port = free_port()
        self.profile = tempfile.mkdtemp(dir=work, prefix="chromium-")
        self.proc = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update",
             f"--remote-debugging-port={self.port}", f"--user-data-dir={self.profile}",
             "--window-size=1280,900", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "chromium.log"), "w"))
        tabs = wait_for(lambda: self._tabs(), 30)
        page = [t for t in tabs if t.get("type") == "page"][0]
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        self.n = 0
        self.events = []
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  width=1280, height=900, deviceScaleFactor=1, mobile=False)

    def _tabs(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=2) as r:
                return json.load(r)
        except OSError:
            return None

    def call(self, method, **params):
        self.n += 1
        me = self.n
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == me:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, name, timeout=30):
        end = time.monotonic() + timeout
        self.ws.sock.settimeout(timeout)
        while time.monotonic() < end:
            for i, ev in enumerate(self.events):
                if ev.get("method") == name:
                    del self.events[: i + 1]
                    return ev
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(name)

    def goto(self, url):
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def click(self, selector_js):
        """Click the element an expression finds, then wait for the next page."""
        self.events.clear()
        ok = self.js(f"(function(){{var b = {selector_js}; if (!b) return false; b.click(); return true;}})()")
        if ok:
            self.wait_event("Page.loadEventFired")
        return ok

    def text(self):
        return self.js("document.body.innerText")

    def shot(self, path, clip=None):
        """A PNG of the page (clip: x, y, width, height, scale)."""
        params = {"format": "png"}
        if clip:
            params["clip"] = dict(zip(("x", "y", "width", "height", "scale"), clip))
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ---------------------------------------------------------------------------
# jobq web instances and plain HTTP


class Web:
    """One "jobq web" process."""

    def __init__(self, work, name, args=(), env=None):
        self.port = free_port()
        e = dict(os.environ)
        e.update(env or {})
        self.log = open(os.path.join(work, f"web-{name}.log"), "w")
        self.proc = subprocess.Popen([JOBQ, "web", "--port", str(self.port)] + list(args),
                                     env=e, stdout=subprocess.PIPE, stderr=self.log, text=True)
        WEBS.append(self)
        self.banner = self.proc.stdout.readline().strip()
        self.url = f"http://127.0.0.1:{self.port}"
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar),
                                                  NoRedirect)

    def get(self, path):
        try:
            with self.opener.open(self.url + path, timeout=30) as r:
                return r.status, dict(r.headers), r.read().decode()
        except urllib.error.HTTPError as x:
            return x.code, dict(x.headers), x.read().decode()

    def post(self, path, fields, origin=None):
        data = urllib.parse.urlencode(fields, doseq=True).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST")
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
        if origin:
            req.add_header("Origin", origin)
        try:
            with self.opener.open(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read().decode()
        except urllib.error.HTTPError as x:
            return x.code, dict(x.headers), x.read().decode()

    def csrf(self, path="/"):
        _, _, body = self.get(path)
        m = re.search(r'name="csrf" (?:value|content)="([^"]+)"', body)
        return m.group(1) if m else None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return None
        return self.proc.returncode


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


# ---------------------------------------------------------------------------
# the data


def setup(db):
    x = db.execute
    x("SELECT jobq.configure('billing', max_retries => 0)")
    x("SELECT jobq.configure('mail', max_retries => 0)")
    x("SELECT jobq.configure('reports')")
    for r in ("web_worker", "web_other"):
        x(f"DROP ROLE IF EXISTS {r}")
        x(f"CREATE ROLE {r} LOGIN")
    x("SELECT jobq.grant('mail', 'web_worker', 'work')")
    ids = {}

    def enqueue(kind, payload, queue, **kw):
        extra = "".join(f", {k} => %s" for k in kw)
        return x(f"SELECT job_id FROM jobq.enqueue(%s, %s::jsonb, queue => %s{extra})",
                 [kind, json.dumps(payload), queue] + list(kw.values())).fetchone()[0]

    def dead(kind, payload, queue, error):
        j = enqueue(kind, payload, queue)
        tok = x("SELECT lease_token FROM jobq.claim(%s, worker_id => 'w-test', kinds => ARRAY[%s])",
                (queue, kind)).fetchone()[0]
        x("SELECT jobq.fail(%s, %s, %s, retryable => false)", (j, tok, error))
        return j

    # completed and failed jobs for the chart and the numbers, their finish
    # times spread over the last day (written directly: test data only)
    x("SELECT jobq.enqueue_many('invoice.render', array_agg(jsonb_build_object('n', i)), queue => 'billing')"
      "  FROM generate_series(1, 400) i")
    x("SELECT jobq.complete_many(array_agg(c.job_id), array_agg(c.lease_token))"
      "  FROM jobq.claim('billing', worker_id => 'w-1', batch => 400) c")
    x("SELECT jobq.enqueue_many('invoice.sync', array_agg('{}'::jsonb), queue => 'billing', max_retries => 0)"
      "  FROM generate_series(1, 30) i")
    x("SELECT count(jobq.fail(c.job_id, c.lease_token, 'sync: HTTP 502 from ledger'))"
      "  FROM jobq.claim('billing', worker_id => 'w-1', batch => 30) c")
    x("UPDATE jobq.job SET finished_at = now() - (CASE WHEN job_id % 3 = 0 THEN random() * interval '1 day'"
      "                                            ELSE random() * interval '59 minutes' END)"
      " WHERE status IN ('completed', 'failed')")
    ids["early_mail"] = enqueue("mail.bounce", {"to": "early"}, "mail")
    # a backlog, so that paging crosses several windows of job ids
    x("SELECT jobq.enqueue_many('export.row', array_agg(jsonb_build_object('row', i)), queue => 'exports')"
      "  FROM generate_series(1, 3000) i")
    ids["dead_retry"] = dead("invoice.send", {"to": "ann"}, "billing", "smtp said 451")
    ids["dead_sel1"] = dead("invoice.send", {"to": "bob"}, "billing", "smtp said 451")
    ids["dead_sel2"] = dead("invoice.send", {"to": "cid"}, "billing", "smtp said 451")
    ids["dead_edit"] = dead("invoice.charge", {"amount": "12,50"}, "billing", "amount is not a number")
    ids["dead_kind1"] = dead("invoice.archive", {"y": 1}, "billing", "disk full")
    ids["dead_kind2"] = dead("invoice.archive", {"y": 2}, "billing", "disk full")
    ids["hostile"] = dead(HOSTILE_KIND, HOSTILE_PAYLOAD, "billing", HOSTILE_ERR)
    ids["mail_dead"] = dead("mail.send", {"to": "dan"}, "mail", "mailbox full")
    ids["pending"] = enqueue("mail.send", {"to": "eve"}, "mail", idempotency_key="welcome-eve")
    ids["delayed"] = enqueue("mail.digest", {}, "mail", run_at="2999-01-01")
    ids["cancel_me"] = enqueue("report.build", {"month": 11}, "reports")
    # a stuck batch: two running jobs of a worker that went away
    for i in range(2):
        enqueue("report.slow", {"i": i}, "reports")
    x("SELECT jobq.claim('reports', worker_id => 'w-gone', batch => 2, kinds => ARRAY['report.slow'])")
    ids["held"] = [r[0] for r in x("SELECT job_id FROM jobq.jobs WHERE worker_id = 'w-gone' ORDER BY job_id")]
    # the application's workers: the one above, gone (its heartbeat backdated:
    # test data only; run.sh sets jobq.worker_gone_after = 30min), and a live
    # one of mail whose host is hostile
    x("SELECT jobq.register_worker('w-gone', ARRAY['reports'], %s::jsonb)",
      (json.dumps({"host": "box-2", "pid": 4242, "concurrency": 4, "library": "jobq-python",
                   "version": "0.3.0"}),))
    x("UPDATE jobq.app_worker SET last_seen_at = now() - interval '3 hours',"
      " started_at = now() - interval '5 hours' WHERE worker_id = 'w-gone'")
    # web_worker's own worker of that id (ids are per role): a row of its own,
    # alive, in mail, holding none of the reports jobs above
    x("SET ROLE web_worker")
    x("SELECT jobq.register_worker('w-gone', ARRAY['mail'], %s::jsonb)", (json.dumps({"host": "box-9"}),))
    x("RESET ROLE")
    x("SELECT jobq.register_worker('billing-7f3a', ARRAY['billing', 'flows'], %s::jsonb)",
      (json.dumps({"host": "app-2", "pid": 31337, "concurrency": 16, "library": "jobq-python",
                   "version": "0.3.0"}),))
    x("SELECT jobq.register_worker('mail-1', ARRAY['mail'], %s::jsonb)",
      (json.dumps({"host": "app-1<b id=pwn4>", "pid": 1234, "concurrency": 8, "library": "jobq-node",
                   "version": "0.3.0", "region": "eu"}),))
    # a failed attempt followed by a retry, for the attempts table
    j = enqueue("invoice.render", {"n": 99}, "billing", max_retries=2)
    tok = x("SELECT lease_token FROM jobq.claim('billing', worker_id => 'w-2', kinds => ARRAY['invoice.render'])").fetchone()[0]
    x("SELECT jobq.fail(%s, %s, 'upstream returned 503', retry_in => '1 hour', details => %s)",
      (j, tok, TRACE))
    ids["attempted"] = j
    # a job that failed once, then completed: its last_error is history
    j = enqueue("invoice.render", {"n": 100}, "billing", max_retries=2)
    tok = x("SELECT lease_token FROM jobq.claim('billing', worker_id => 'w-3', kinds => ARRAY['invoice.render'])").fetchone()[0]
    x("SELECT jobq.fail(%s, %s, 'timeout talking to the renderer', retry_in => '0 s')", (j, tok))
    tok = x("SELECT lease_token FROM jobq.claim('billing', worker_id => 'w-3', kinds => ARRAY['invoice.render'])").fetchone()[0]
    x("SELECT jobq.complete(%s, %s)", (j, tok))
    ids["completed_after_error"] = j
    # a workflow with a job in every state: A -> B, C; B, C -> D -> E; B -> F -> G; B -> H
    x("SELECT jobq.configure('flows', max_retries => 0)")

    def child(kind, parents, **kw):
        return enqueue(kind, {}, "flows", depends_on=parents, **kw)

    def take(kind):
        return x("SELECT job_id, lease_token FROM jobq.claim('flows', worker_id => 'w-flow', kinds => ARRAY[%s])",
                 (kind,)).fetchone()
    wf = {"A": enqueue("etl.extract", {}, "flows")}
    wf["B"] = child("etl.transform", [wf["A"]])
    wf["C"] = child("etl.validate", [wf["A"]])
    wf["D"] = child("etl.merge", [wf["B"], wf["C"]])
    wf["E"] = child("etl.publish", [wf["D"]])
    wf["F"] = child("etl.index", [wf["B"]])
    wf["G"] = child("etl.notify", [wf["F"]])
    wf["H"] = child("etl.archive", [wf["B"]])
    x("SELECT jobq.complete(%s, %s)", take("etl.extract"))
    x("SELECT jobq.complete(%s, %s)", take("etl.transform"))
    c = take("etl.validate")
    x("SELECT jobq.fail(%s, %s, 'row 7: bad date', retryable => false)", c)
    take("etl.index")
    ids["wf"] = wf
    ids["wf_edges"] = {(wf[p], wf[c]) for p, c in (("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"), ("D", "E"),
                                                   ("B", "F"), ("F", "G"), ("B", "H"))}
    # payloads to search by containment
    for i, cust in enumerate((42, 42, 7, 42, 7)):
        enqueue("invoice.remind", {"customer": {"id": cust, "tier": "gold" if i % 2 else "basic"}, "n": i},
                "billing", idempotency_key=f"remind-{cust}-{i}")
    ids["dead_discard"] = dead("invoice.void", {"n": 1}, "billing", "voided twice")
    ids["dead_discard_sel1"] = dead("invoice.void", {"n": 2}, "billing", "voided twice")
    ids["dead_discard_sel2"] = dead("invoice.void", {"n": 3}, "billing", "voided twice")
    ids["dead_discard_page"] = dead("invoice.void", {"n": 4}, "billing", "voided twice")
    x("SELECT jobq.schedule('nightly-report', '30 2 * * *', 'report.build', '{}', "
      "queue => 'reports', timezone => 'Europe/Berlin')")
    x("SELECT jobq.schedule('mail-digest', '0 8 * * 1-5', 'mail.digest', '{}', "
      "queue => 'mail', timezone => 'America/New_York')")
    return ids


def status(db, j):
    r = db.execute("SELECT status FROM jobq.jobs WHERE job_id = %s", (j,)).fetchone()
    return r[0] if r else None


# ---------------------------------------------------------------------------
# the tests


WEBS = []


def main():
    """Run every test; whatever happens, stop what was started."""
    try:
        tests()
    except Exception:
        import traceback
        check("the tests ran to the end", False, traceback.format_exc())
    finally:
        for w in WEBS:
            if w.proc.poll() is None:
                w.proc.kill()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def tests():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--shots", required=True)
    a = ap.parse_args()
    db = psycopg.connect("", autocommit=True)
    ids = setup(db)
    has_update = db.execute("SELECT to_regprocedure('jobq.update_job(bigint,jsonb,timestamptz,integer,integer)') IS NOT NULL").fetchone()[0]
    has_run = db.execute("SELECT to_regprocedure('jobq.run_schedule(text)') IS NOT NULL").fetchone()[0]

    # --- the command line ---------------------------------------------------
    r = subprocess.run([JOBQ, "web", "--help"], capture_output=True, text=True)
    check("jobq web --help prints the options", r.returncode == 0 and "--read-only" in r.stdout, r.stdout + r.stderr)
    r = subprocess.run([JOBQ, "--help"], capture_output=True, text=True)
    check("jobq --help lists web", "web [--port" in r.stdout, r.stdout)
    env = dict(os.environ)
    env.pop("JOBQ_WEB_PASSWORD", None)
    r = subprocess.run([JOBQ, "web", "--port", "0", "--bind", "0.0.0.0"], capture_output=True,
                       text=True, env=env, timeout=30)
    check("a non-loopback bind without a password is refused (exit 2)",
          r.returncode == 2 and "JOBQ_WEB_PASSWORD" in r.stderr, r.stderr)

    empty = os.path.join(a.work, "empty-password")
    with open(empty, "w") as fh:
        fh.write("\nsecond line\n")
    r = subprocess.run([JOBQ, "web", "--port", "0", "--password-file", empty], capture_output=True,
                       text=True, env=env, timeout=30)
    check("a password file whose first line is empty is refused (exit 2), not a dashboard without one",
          r.returncode == 2 and "first line is empty" in r.stderr, (r.returncode, r.stderr))

    admin = Web(a.work, "admin")
    check("jobq web prints its URL", admin.banner.startswith(f"jobq web: serving http://127.0.0.1:{admin.port}/"),
          admin.banner)
    ro = Web(a.work, "readonly", ["--read-only"])
    worker = Web(a.work, "worker", env={"PGUSER": "web_worker"})
    pw = Web(a.work, "password", env={"JOBQ_WEB_PASSWORD": "s3cret pass"})

    # --- headers and escaping, over plain HTTP --------------------------------
    st, hdr, body = admin.get("/")
    csp = hdr.get("Content-Security-Policy", "")
    check("pages carry a CSP without inline script", st == 200 and "script-src 'self'" in csp
          and "unsafe-inline" not in csp, f"{st} {csp}")
    check("and nosniff, frame denial, no-store",
          hdr.get("X-Content-Type-Options") == "nosniff" and hdr.get("X-Frame-Options") == "DENY"
          and hdr.get("Cache-Control") == "no-store", hdr)
    check("the page has no inline script", not re.search(r"<script(?![^>]*\bsrc=)", body), body[:500])
    st, _, body = admin.get(f"/job/{ids['hostile']}")
    body = body.replace("&#34;", "&quot;")   # markupsafe writes a quote so
    check("a hostile error is escaped in the HTML", "<script>window.__pwned" not in body
          and "&lt;script&gt;window.__pwned=1&lt;/script&gt;&quot;&gt;&lt;img src=x id=pwn1&gt;" in body,
          body[:300])
    check("a hostile payload is escaped in the HTML", "<b id=pwn2>" not in body and "&lt;b id=pwn2&gt;" in body)
    check("a hostile kind is escaped in the HTML", '<i id="pwn3">' not in body and "evil&lt;i id=&quot;pwn3&quot;&gt;" in body)
    st, _, _ = admin.get("/static/../server.py")
    check("no file outside static/ is served", st == 404, st)
    st, hdr, _ = admin.get("/chart.svg?range=hour")
    check("the chart is SVG", st == 200 and hdr.get("Content-Type", "").startswith("image/svg+xml"), hdr)

    # --- keyset paging: every job once, in order, whatever the windows ---
    def walk(query):
        seen, path, pages = [], "/jobs?" + query, 0
        while path and pages < 200:
            st, _, body = admin.get(path)
            seen += [int(m) for m in re.findall(r'<td><a href="/job/(\d+)">', body)]
            m = re.search(r'<a class="next" href="([^"]+)"', body)
            path = m.group(1).replace("&amp;", "&") if m else None
            pages += 1
        return seen, pages
    seen, pages = walk("")
    want = [r[0] for r in db.execute("SELECT job_id FROM jobq.jobs ORDER BY job_id DESC")]
    check("jobs: paging by keyset lists every job once, newest first", seen == want,
          f"{len(seen)} listed over {pages} pages, {len(want)} jobs")
    seen, pages = walk("queue=mail")
    want = [r[0] for r in db.execute("SELECT job_id FROM jobq.jobs WHERE queue = 'mail' ORDER BY job_id DESC")]
    check("jobs: a sparse filter across windows finds every match", seen == want, (seen, want, pages))

    # --- CSRF ------------------------------------------------------------------
    before = status(db, ids["dead_retry"])
    st, _, _ = admin.post("/action", {"op": "retry", "job_id": ids["dead_retry"], "back": "/"})
    check("a POST without a CSRF token is refused (403)", st == 403, st)
    tok = admin.csrf("/dead")
    st, _, _ = admin.post("/action", {"op": "retry", "job_id": ids["dead_retry"], "csrf": "x" + (tok or "")})
    check("a POST with a wrong CSRF token is refused (403)", st == 403, st)
    st, _, _ = admin.post("/action", {"op": "retry", "job_id": ids["dead_retry"], "csrf": tok},
                          origin="http://evil.example")
    check("a POST from another origin is refused, even with the token", st == 403, st)
    other = Web.__new__(Web)
    other.url, other.opener = admin.url, urllib.request.build_opener(NoRedirect)
    st, _, _ = other.post("/action", {"op": "retry", "job_id": ids["dead_retry"], "csrf": tok})
    check("a token without its session cookie is refused", st == 403, st)
    check("none of those changed the job", status(db, ids["dead_retry"]) == before == "failed",
          status(db, ids["dead_retry"]))
    st, hdr, _ = admin.post("/action", {"op": "retry", "job_id": ids["pending"], "csrf": tok,
                                        "back": "/jobs\r\nSet-Cookie: evil=1"})
    check("a redirect target cannot smuggle a header", st == 303 and hdr.get("Location") == "/"
          and "evil" not in str(hdr), (st, hdr))
    st, hdr, _ = admin.post("/action", {"op": "retry", "job_id": ids["pending"], "csrf": tok,
                                        "back": "//evil.example/"})
    check("nor lead to another site", st == 303 and hdr.get("Location") == "/", (st, hdr))
    req = urllib.request.Request(admin.url + "/", headers={"Host": "evil.example:80"})
    try:
        code = urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as x:
        code = x.code
    check("a foreign Host header is refused (DNS rebinding)", code == 421, code)

    # --- hostile HTTP, every page for every capability ------------------------------
    hostile_http(a, db, ids, admin, pw)
    every_page(a, db, ids, worker, ro)

    # --- the browser -------------------------------------------------------------
    b = Browser(a.work)
    try:
        browse(b, a, db, ids, admin, ro, worker, pw, has_update, has_run)
    finally:
        b.close()

    # --- SIGTERM ---------------------------------------------------------------
    rcs = [w.stop() for w in (admin, ro, worker, pw)]
    check("jobq web exits 0 on SIGTERM", rcs == [0, 0, 0, 0], rcs)


def raw(port, data, timeout=30):
    """Send bytes, half-close, read every response until the server closes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return out
            out += chunk
    except socket.timeout:
        return out + b"<timeout>"
    finally:
        sock.close()


def statuses(reply):
    """The status codes of the HTTP responses in a reply, in order."""
    return [int(c) for c in re.findall(rb"(?:^|\r\n)HTTP/1\.[01] (\d{3}) ", reply)]


def session_get(web, path, sid):
    """GET path with a given session cookie; the status."""
    req = urllib.request.Request(web.url + path, headers={"Cookie": f"jobq_session_{web.port}={sid}"})
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as x:
        return x.code


def flood(web, n, path="/"):
    """n requests without a cookie over keep-alive connections; the statuses seen."""
    seen = {}
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    for i in range(n):
        for tries in range(3):
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                r.read()
                seen[r.status] = seen.get(r.status, 0) + 1
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=30)
    conn.close()
    return seen


def hostile_http(a, db, ids, admin, pw):
    """Requests that the server must refuse, or not misread."""
    host = f"127.0.0.1:{admin.port}".encode()
    log = os.path.join(a.work, "web-admin.log")

    # a chunked body holding a request: it is the body, never a next request
    inner = b"GET /smuggled-probe HTTP/1.1\r\nHost: " + host + b"\r\n\r\n"
    req = (b"POST /action HTTP/1.1\r\nHost: " + host + b"\r\n"
           b"Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
           + f"{len(inner):x}".encode() + b"\r\n" + inner + b"\r\n0\r\n\r\n")
    reply = raw(admin.port, req)
    st = statuses(reply)
    time.sleep(0.5)   # the access log line of a request is written before its answer
    seen = open(log).read()
    check("a chunked body is not read as a next request: one answer, no smuggled request",
          len(st) == 1 and st[0] in (403, 411, 501) and "/smuggled-probe" not in seen,
          (st, reply[:300], [x for x in seen.splitlines() if "smuggled" in x]))
    # the body after an empty chunked one (CL.TE): Transfer-Encoding wins, the rest is
    # a next request of the same connection, answered as one
    req = (b"POST /action HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: 40\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    st = statuses(raw(admin.port, req))
    check("Content-Length beside chunked: the chunked framing only", len(st) == 1 and st[0] in (400, 403, 411, 415, 501), st)
    req = (b"POST /action HTTP/1.1\r\nHost: " + host + b"\r\nTransfer-Encoding: gzip\r\n"
           b"Content-Length: 5\r\n\r\nabcde")
    st = statuses(raw(admin.port, req))
    check("a Transfer-Encoding it does not implement: 501", st[:1] == [501], st)
    for cl in (b"-1", b"abc", b"1, 1", b"+5", b"0x10"):
        t0 = time.monotonic()
        reply = raw(admin.port, b"POST /login HTTP/1.1\r\nHost: " + host + b"\r\nContent-Length: "
                    + cl + b"\r\n\r\n")
        st = statuses(reply)
        check(f"Content-Length {cl.decode()}: 400, at once", st[:1] == [400] and time.monotonic() - t0 < 20,
              (st, reply[:200], time.monotonic() - t0))
    st = statuses(raw(admin.port, b"POST /action HTTP/1.1\r\nHost: " + host
                      + b"\r\nContent-Length: 5000000\r\n\r\n"))
    check("a body over 1 MB: 413, unread", st[:1] == [413], st)

    # bodies promised and never sent tie up no thread: more stalled requests
    # than the server has threads, then a page still comes
    stalled = []
    for i in range(20):
        sck = socket.create_connection(("127.0.0.1", admin.port), timeout=30)
        sck.sendall(b"POST /login HTTP/1.1\r\nHost: " + host
                    + b"\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                    b"Content-Length: 100000\r\n\r\npassword=")
        stalled.append(sck)
    t0 = time.monotonic()
    st, _, _ = admin.get("/jobs?queue=mail")
    check("20 stalled bodies: a page still answers", st == 200 and time.monotonic() - t0 < 30,
          (st, time.monotonic() - t0))
    for sck in stalled:
        sck.close()

    # input outside ASCII: refused, never a server error
    with urllib.request.build_opener(NoRedirect).open(admin.url + "/", timeout=30) as r:
        cookie = r.headers.get("Set-Cookie", "")
    check("the session cookie is named for the dashboard's port (two dashboards on one host keep theirs)",
          cookie.startswith(f"jobq_session_{admin.port}="), cookie)
    for path in ("/job/%C2%B2", "/workflow/%C2%B2", "/job/%D9%A3"):
        st = admin.get(path)[0]
        check(f"GET {path} (a digit outside ASCII): 404", st == 404, st)
    st = admin.post("/action", {"op": "retry", "job_id": "\u00b2", "csrf": admin.csrf("/") or "", "back": "/"})[0]
    check("an action on job \u00b2: no server error", st in (303, 400), st)
    st = admin.post("/action", {"op": "pause", "queue": "reports", "csrf": "t\u00f6ken", "back": "/"})[0]
    check("a CSRF token outside ASCII: 403", st == 403, st)
    check("the dashboard logged no traceback", "Traceback" not in open(log).read())

    # anonymous traffic cannot evict a session
    ok = pw.post("/login", {"csrf": pw.csrf("/login") or "", "password": "s3cret pass"})[0] == 303
    sid = next((c.value for c in pw.jar if c.name == f"jobq_session_{pw.port}"), None)
    check("password: log in over HTTP", ok and session_get(pw, "/", sid) == 200, (ok, sid))
    seen = flood(pw, 10002)
    check("10,002 requests without a cookie (each a new session id)", seen == {303: 10002}, seen)
    check("and the logged-in session is still logged in", session_get(pw, "/", sid) == 200,
          session_get(pw, "/", sid))
    pw.jar.clear()
    tok = admin.csrf("/")
    seen = flood(admin, 10002, "/no-such-page")
    st, hdr, _ = admin.post("/action", {"op": "pause", "queue": "reports", "csrf": tok or "", "back": "/"})
    paused = db.execute("SELECT paused FROM jobq.queues WHERE queue = 'reports'").fetchone()[0]
    check("without a password, a session's CSRF token outlives 10,002 cookieless requests",
          tok and st == 303 and paused and seen == {404: 10002}, (st, paused, seen))
    db.execute("SELECT jobq.resume('reports')")

    # login attempts: a few wrong passwords per client, then a wait
    lock = Web(a.work, "lockout", env={"JOBQ_WEB_PASSWORD": "right one"})
    tok = lock.csrf("/login")
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(25) as ex:
        codes = list(ex.map(lambda i: lock.post("/login", {"csrf": tok or "", "password": f"guess{i}"})[0],
                            range(100)))
    took = time.monotonic() - t0
    count = {c: codes.count(c) for c in set(codes)}
    check("100 parallel wrong passwords: at most 5 judged, the others told to wait (429)",
          count.get(403, 0) <= 5 and count.get(429, 0) >= 95 and count.get(303, 0) == 0, count)
    check("and they are answered quickly (no sleeping thread per attempt)", took < 60, took)
    st, hdr, body = lock.post("/login", {"csrf": tok or "", "password": "right one"})
    check("locked out: even the right password waits, and is told how long",
          st == 429 and hdr.get("Retry-After", "").isdigit() and "try again in" in body, (st, hdr))
    st = pw.post("/login", {"csrf": pw.csrf("/login") or "", "password": "s3cret pass"})[0]
    pw.jar.clear()
    check("another dashboard's login is unaffected", st == 303, st)
    lock.stop()


def every_page(a, db, ids, worker, ro):
    """Every page answers 200 for a role of each capability (and a read-only one)."""
    x = db.execute
    for r, q, cap in (("web_enq", "mail", "enqueue"), ("web_admin1", "billing", "administer")):
        x(f"DROP ROLE IF EXISTS {r}")
        x(f"CREATE ROLE {r} LOGIN")
        x("SELECT jobq.grant(%s, %s, %s)", (q, r, cap))
    webs = [("work", worker), ("enqueue", Web(a.work, "enqueue", env={"PGUSER": "web_enq"})),
            ("administer one queue", Web(a.work, "admin1", env={"PGUSER": "web_admin1"})),
            ("do anything, read-only", ro)]
    pages = ["/", "/?range=day", "/jobs", "/jobs?queue=mail", "/dead", "/schedules", "/workers", "/workflows",
             "/api/overview", "/chart.svg?range=hour"]
    for name, w in webs:
        bad = []
        job = ids["attempted"] if name.startswith("administer") else ids["mail_dead"]
        for path in pages + [f"/job/{job}"]:
            st, _, body = w.get(path)
            if st != 200:
                m = re.search(r'class="flash error">([^<]*)', body)
                bad.append(f"{path}: {st} {m.group(1) if m else body[:100]}")
        check(f"every page for a role that may {name}: 200", not bad, "\n".join(bad))
    for name, w in webs[1:3]:
        w.stop()


def browse(b, a, db, ids, admin, ro, worker, pw, has_update, has_run):
    u = admin.url
    shots = a.shots

    # every page renders with data
    b.goto(u + "/")
    t = b.text()
    check("overview lists every queue", all(q in t for q in ("billing", "mail", "reports")), t[:400])
    check("overview shows the chart", b.js("document.querySelector('img.chart').naturalWidth") > 0)
    ready = b.js("document.querySelector('[data-q=mail][data-f=ready]').textContent")
    bars = b.js("fetch('/chart.svg?range=hour').then(r => r.text()).then(t => (t.match(/<rect/g) || []).length)")
    check("overview: the hour chart has bars", bars > 20, bars)
    check("overview: mail has 2 ready jobs", ready == "2", ready)
    b.shot(os.path.join(shots, "overview.png"))
    b.shot(os.path.join(shots, "readme-overview.png"), (0, 0, 1180, 540, 0.7))

    b.goto(u + "/?range=day")
    check("overview: the day chart", "last day" in b.text())

    b.goto(u + "/jobs?queue=billing")
    t = b.text()
    check("jobs lists billing's jobs", "invoice.render" in t and "invoice.send" in t, t[:400])
    check("jobs pages by keyset (older link has before=)",
          "before=" in (b.js("(document.querySelector('a.next')||{}).href||'before=none'") or ""))
    b.shot(os.path.join(shots, "jobs.png"))
    b.goto(u + "/jobs?" + urllib.parse.urlencode({"error": "smtp said"}))
    n = b.js("document.querySelectorAll('table.jobs tbody tr').length")
    check("jobs filtered by error text: 3 jobs", n == 3, n)
    b.goto(u + "/jobs?key=welcome-eve")
    check("jobs filtered by idempotency key", b.js("document.querySelectorAll('table.jobs tbody tr').length") == 1
          and "welcome-eve" in b.text())
    b.goto(u + "/jobs?status=failed&kind=invoice.archive")
    check("jobs filtered by status and kind", b.js("document.querySelectorAll('table.jobs tbody tr').length") == 2)
    def rows_of(query):
        b.goto(u + "/jobs?" + urllib.parse.urlencode(query))
        return b.js("Array.from(document.querySelectorAll('table.jobs tbody tr')).map(r => r.cells[0].innerText)")
    n = rows_of({"payload": '{"customer": {"id": 42}}'})
    check("search: payload containment finds the 3 jobs of customer 42", len(n) == 3, (n, b.text()[:400]))
    n = rows_of({"payload": '{"customer": {"id": 42, "tier": "gold"}}', "kind": "invoice.remind"})
    check("search: a deeper containment with a kind", len(n) == 2, n)
    n = rows_of({"kind": "invoice.rem*", "payload": '{"customer": {"id": 7}}'})
    check("search: a kind prefix with a containment", len(n) == 2, n)
    n = rows_of({"key": "remind-7-*"})
    check("search: an idempotency key prefix", len(n) == 2, n)
    rows_of({"payload": '{"customer": '})
    check("search: a payload filter that is not JSON is said so, no error page",
          "is not JSON" in b.text() and b.js("document.title").startswith("Jobs"), b.text()[:300])
    b.shot(os.path.join(shots, "search.png"))
    # bounded: a search waiting on a lock is stopped by its statement_timeout (5 s)
    with psycopg.connect("", autocommit=False) as locker:
        locker.execute("LOCK TABLE jobq.job IN ACCESS EXCLUSIVE MODE")
        t0 = time.monotonic()
        st, _, body = admin.get("/jobs?" + urllib.parse.urlencode({"payload": '{"customer": {"id": 42}}'}))
        took = time.monotonic() - t0
        locker.rollback()
    check("search: stopped by its statement_timeout, and the page says so",
          st == 200 and "took longer than 5s" in body and took < 25, (st, took, body[-600:]))

    b.goto(u + "/jobs?" + urllib.parse.urlencode({"from": "2999-01-01"}))
    check("jobs filtered by time range: none", "none" in b.text())

    b.goto(u + f"/job/{ids['attempted']}")
    t = b.text()
    check("job page: attempts with worker and error", "w-2" in t and "upstream returned 503" in t, t[:600])
    check("job page: payload, priority label, retries", '"n": 99' in t and "0 (low)" in t and "1 of 2" in t, t[:600])
    b.shot(os.path.join(shots, "job.png"))

    b.goto(u + "/dead")
    t = b.text()
    check("dead letter groups by kind and error", "invoice.send" in t and "smtp said 451" in t, t[:500])
    b.shot(os.path.join(shots, "dead.png"))
    b.shot(os.path.join(shots, "readme-dead.png"), (0, 0, 1260, 640, 0.7))

    b.goto(u + "/schedules")
    t = b.text()
    check("schedules: cron, zone, next fires in local time",
          "nightly-report" in t and "Europe/Berlin" in t and re.search(r"\d{4}-\d\d-\d\d 02:30:00", t), t[:600])
    check("schedules: four next fires", len(re.findall(r"\d{4}-\d\d-\d\d 02:30:00", t)) >= 4, t)
    b.shot(os.path.join(shots, "schedules.png"))

    b.goto(u + "/workers")
    t = b.text()
    check("workers: the launcher and the database's worker", "launcher" in t and "jobq_web" in t, t[:600])
    check("workers: jobq.health()", "expired_leases" in t and "xmin_horizon" in t, t[-800:])
    rows = b.js("Array.from(document.querySelectorAll('table.app-workers tbody tr'))"
                ".map(r => Array.from(r.cells).map(c => c.innerText))")
    by = {r[0]: r for r in rows or []}
    live = by.get("mail-1", [])
    check("workers: an application worker: alive, host, pid, queues, jobs in hand of its concurrency, library",
          live[1:7] == ["alive", "app-1<b id=pwn4>", "1234", "mail", "0 of 8", "jobq-node 0.3.0"]
          and '"region": "eu"' in live[9], rows)
    gone = by.get("w-gone", [])
    check("workers: a gone worker is marked, with the jobs it held",
          gone[1:3] == ["gone", "box-2"] and gone[5].startswith("2 of 4")
          and all(str(j) in gone[5] for j in ids["held"]) and "ago" in gone[8], rows)
    twins = [r for r in rows or [] if r[0] == "w-gone"]
    check("workers: two roles' workers of one id are two rows, each with the jobs of its own queues",
          len(twins) == 2 and sorted(r[1] for r in twins) == ["alive", "gone"]
          and [r[5] for r in twins if r[1] == "alive"] == ["0"]
          and all(sum(str(j) in r[5] for r in twins) == 1 for j in ids["held"]), twins)
    check("workers: the gone worker's jobs link to their pages",
          b.js(f"!!document.querySelector('table.app-workers a[href=\"/job/{ids['held'][0]}\"]')"))
    check("workers: a hostile host is text", b.js("document.querySelectorAll('#pwn4').length") == 0)
    b.shot(os.path.join(shots, "readme-workers.png"), (0, 0, 1280, 560, 0.7))
    b.shot(os.path.join(shots, "workers.png"))

    # a workflow, drawn
    wf = ids["wf"]
    b.goto(u + "/workflows")
    check("workflows: the root, its counts", f"/workflow/{wf['A']}" in (b.js(
        "Array.from(document.querySelectorAll('table.workflows a')).map(a => a.href).join(' ')") or "")
          and "etl.extract" in b.text(), b.text()[:600])
    b.click(f"document.querySelector('table.workflows a[href=\"/workflow/{wf['A']}\"]')")
    nodes = b.js("Array.from(document.querySelectorAll('svg.workflow a.node')).map(n => "
                 "[+n.getAttribute('data-job'), n.getAttribute('data-status'), n.querySelector('rect').getAttribute('fill')])")
    want = {r[0]: r[1] for r in db.execute("SELECT job_id, status FROM jobq.jobs WHERE queue = 'flows'")}
    got = {n[0]: n[1] for n in nodes or []}
    check("workflow: every job drawn once, in its state", got == want and len(nodes) == len(want), (nodes, want))
    check("workflow: a job in each state", set(got.values()) >= {"completed", "failed", "cancelled", "running",
                                                                  "blocked", "pending"}, got)
    fills = {n[1]: n[2] for n in nodes or []}
    check("workflow: each state its own colour", len(set(fills.values())) == len(fills), fills)
    edges = b.js("Array.from(document.querySelectorAll('svg.workflow path.edge')).map(p => "
                 "[+p.getAttribute('data-from'), +p.getAttribute('data-to')])")
    check("workflow: every dependency drawn as an arrow", {tuple(x) for x in edges or []} == ids["wf_edges"]
          and len(edges) == len(ids["wf_edges"]), (edges, ids["wf_edges"]))
    ys = b.js("Object.fromEntries(Array.from(document.querySelectorAll('svg.workflow a.node')).map(n => "
              "[n.getAttribute('data-job'), +n.querySelector('rect').getAttribute('y')]))")
    check("workflow: every parent is drawn above its children",
          all(ys[str(p)] < ys[str(c)] for p, c in ids["wf_edges"]), ys)
    check("workflow: the failed job's error is listed", "row 7: bad date" in b.text())
    b.shot(os.path.join(shots, "workflow.png"))
    b.shot(os.path.join(shots, "readme-workflow.png"), (0, 0, 1280, 620, 0.7))
    b.click(f"{{click: () => document.querySelector('svg.workflow a.node[data-job=\"{wf['C']}\"] rect')"
            ".dispatchEvent(new MouseEvent('click', {bubbles: true}))}")
    check("workflow: a job's box leads to its page", b.js("location.pathname") == f"/job/{wf['C']}")
    b.goto(u + f"/job/{wf['D']}")
    check("job page: its parents and its workflow",
          b.js(f"!!document.querySelector('dl.facts a[href=\"/job/{wf['B']}\"]')")
          and b.js(f"!!document.querySelector('a[href=\"/workflow/{wf['D']}\"]')"), b.text()[:600])

    # hostile text renders as text
    b.goto(u + f"/job/{ids['hostile']}")
    check("hostile text: nothing ran", b.js("typeof window.__pwned") == "undefined")
    check("hostile text: no element was injected",
          b.js("document.querySelectorAll('#pwn1, #pwn2, #pwn3, script:not([src])').length") == 0)
    t = b.text()
    check("hostile text: shown literally", "<script>window.__pwned=1</script>" in t and '<i id="pwn3">' in t, t[:600])
    b.shot(os.path.join(shots, "hostile.png"))
    b.goto(u + "/dead")
    check("hostile text on the dead letter: no element injected",
          b.js("document.querySelectorAll('#pwn1, #pwn2, #pwn3, script:not([src])').length") == 0
          and b.js("typeof window.__pwned") == "undefined")

    # actions
    j = ids["dead_retry"]
    ok = b.click(f"document.querySelector('form input[name=job_id][value=\"{j}\"]').form.querySelector('button')")
    check("dead letter: click retry", ok)
    check("the retried job is pending in the database", status(db, j) == "pending", status(db, j))
    check("and the page says so", f"job {j}: pending" in b.text(), b.text()[:300])

    b.goto(u + "/dead")
    for k in ("dead_sel1", "dead_sel2"):
        b.js(f"document.querySelector('input[type=checkbox][value=\"{ids[k]}\"]').click()")
    b.click("document.querySelector('button[data-op=retry_selected]')")
    check("retry selected asks first, naming the jobs", "Are you sure?" in b.text()
          and f"Retry the 2 selected jobs ({min(ids['dead_sel1'], ids['dead_sel2'])}, {max(ids['dead_sel1'], ids['dead_sel2'])})" in b.text()
          and status(db, ids["dead_sel1"]) == "failed", b.text()[:400])
    b.click("document.querySelector('button[data-confirm=retry_selected]')")
    check("retry selected: both pending", status(db, ids["dead_sel1"]) == status(db, ids["dead_sel2"]) == "pending",
          (status(db, ids["dead_sel1"]), status(db, ids["dead_sel2"])))

    b.goto(u + "/dead")
    b.click("Array.from(document.querySelectorAll('button')).find(x => x.textContent === 'retry all invoice.archive')")
    check("retry all of a kind asks first", "Retry every failed job of kind invoice.archive in queue billing?"
          in b.text() and status(db, ids["dead_kind1"]) == "failed", b.text()[:400])
    b.click("document.querySelector('button[data-confirm=retry_failed]')")
    check("retry all of a kind", status(db, ids["dead_kind1"]) == status(db, ids["dead_kind2"]) == "pending",
          (status(db, ids["dead_kind1"]), status(db, ids["dead_kind2"])))

    # discard: one (asked first; "no" changes nothing), the ticked ones, from the job page
    j = ids["dead_discard"]
    b.goto(u + "/dead")
    b.click(f"document.querySelector('form input[name=job_id][value=\"{j}\"]').form.parentElement"
            ".querySelector('button[data-op=discard]')")
    check("discard asks first", f"Delete job {j} and its attempt history for good?" in b.text()
          and status(db, j) == "failed", b.text()[:400])
    b.click("Array.from(document.querySelectorAll('a')).find(x => x.textContent === 'no, go back')")
    check("no, go back: nothing discarded", status(db, j) == "failed" and b.js("location.pathname") == "/dead")
    b.click(f"document.querySelector('form input[name=job_id][value=\"{j}\"]').form.parentElement"
            ".querySelector('button[data-op=discard]')")
    b.click("document.querySelector('button[data-confirm=discard]')")
    check("discard a dead job: gone from the database, and the page says so",
          status(db, j) is None and f"job {j} discarded" in b.text(), (status(db, j), b.text()[:300]))
    b.goto(u + "/dead")
    for k in ("dead_discard_sel1", "dead_discard_sel2"):
        b.js(f"document.querySelector('input[type=checkbox][value=\"{ids[k]}\"]').click()")
    b.click("document.querySelector('button[data-op=discard_selected]')")
    check("discard selected asks first", "Delete the 2 selected jobs" in b.text(), b.text()[:400])
    b.click("document.querySelector('button[data-confirm=discard_selected]')")
    check("discard selected: both gone", status(db, ids["dead_discard_sel1"]) is None
          and status(db, ids["dead_discard_sel2"]) is None and "2 of 2 selected jobs discarded" in b.text(),
          b.text()[:300])
    j = ids["dead_discard_page"]
    b.goto(u + f"/job/{j}")
    b.click("document.querySelector('button[data-op=discard]')")
    b.click("document.querySelector('button[data-confirm=discard]')")
    check("discard from the job page: gone, back on the dead letter",
          status(db, j) is None and b.js("location.pathname") == "/dead", (status(db, j), b.text()[:300]))
    b.goto(u + f"/job/{ids['pending']}")
    check("a pending job offers no discard", b.js("document.querySelectorAll('button[data-op=discard]').length") == 0)

    # a completed job's earlier error is not shown as an alarm
    j = ids["completed_after_error"]
    b.goto(u + f"/job/{j}")
    check("a completed job: its last error is not red, and says it is an earlier attempt's",
          b.js("Array.from(document.querySelectorAll('dl.facts .err')).filter(x => x.textContent).length") == 0
          and "timeout talking to the renderer" in b.text() and "the job completed since" in b.text(),
          b.text()[:600])
    b.goto(u + "/jobs?kind=invoice.render&status=completed")
    check("nor red in the jobs list",
          b.js("Array.from(document.querySelectorAll('table.jobs .err')).filter(x => x.textContent).length") == 0
          and "timeout talking to the renderer" in b.text(), b.text()[:600])

    # an attempt's details (stack trace)
    b.goto(u + f"/job/{ids['attempted']}")
    tr = b.js("(document.querySelector('table.attempts details.trace pre')||{}).textContent")
    check("job page: an attempt's stack trace", tr == TRACE, tr)
    check("the stack trace is text", b.js("document.querySelectorAll('#pwn5').length") == 0)
    b.js("document.querySelector('table.attempts details.trace').open = true")
    b.shot(os.path.join(shots, "readme-job.png"),
           (0, 0, 1280, min(b.js("document.documentElement.scrollHeight"), 1250), 0.7))

    j = ids["dead_edit"]
    b.goto(u + f"/job/{j}")
    check("a failed job offers an edit form", b.js("!!document.querySelector('form.edit textarea')"))
    b.js("document.querySelector('form.edit textarea').value = '{\"amount\": 12.5}'")
    b.click("document.querySelector('button[data-op=update]')")
    row = db.execute("SELECT payload, status FROM jobq.jobs WHERE job_id = %s", (j,)).fetchone()
    if has_update:
        check("edit the payload then retry: payload changed, job pending",
              row[0] == {"amount": 12.5} and row[1] == "pending", row)
    else:
        check("edit the payload (jobq.update_job is not in this build yet)", False, f"{row}; {b.text()[:300]}")

    j = ids["cancel_me"]
    b.goto(u + f"/job/{j}")
    b.click("document.querySelector('button[data-op=cancel]')")
    check("cancel a pending job", status(db, j) == "cancelled", status(db, j))

    b.goto(u + "/")
    b.click("document.querySelector('form input[name=queue][value=reports]').form.parentElement"
            ".querySelector('button[data-op=release_running]')")
    check("running back to pending asks first", "back to pending?" in b.text(), b.text()[:400])
    b.click("document.querySelector('button[data-confirm=release_running]')")
    n = db.execute("SELECT count(*) FROM jobq.jobs WHERE queue = 'reports' AND status = 'running'").fetchone()[0]
    check("put a stuck batch back to pending (release_running)", n == 0, f"{n} still running; {b.text()[:300]}")

    b.goto(u + "/")
    b.click("document.querySelector('form input[name=queue][value=mail]').form.querySelector('button[data-op=pause]')")
    check("pause a queue", db.execute("SELECT paused FROM jobq.queues WHERE queue = 'mail'").fetchone()[0])
    b.click("document.querySelector('form input[name=queue][value=mail]').form.querySelector('button[data-op=resume]')")
    check("resume it", not db.execute("SELECT paused FROM jobq.queues WHERE queue = 'mail'").fetchone()[0])

    b.goto(u + "/schedules")
    b.click("document.querySelector('form input[name=name][value=\"nightly-report\"]').form"
            ".querySelector('button[data-op=pause_schedule]')")
    check("pause a schedule", db.execute("SELECT paused FROM jobq.schedules WHERE name = 'nightly-report'").fetchone()[0])
    b.click("document.querySelector('form input[name=name][value=\"nightly-report\"]').form"
            ".querySelector('button[data-op=resume_schedule]')")
    check("resume it", not db.execute("SELECT paused FROM jobq.schedules WHERE name = 'nightly-report'").fetchone()[0])
    n0 = db.execute("SELECT count(*) FROM jobq.jobs WHERE kind = 'report.build'").fetchone()[0]
    b.click("Array.from(document.querySelectorAll('form input[name=name]')).filter(x => x.value === 'nightly-report')"
            ".map(x => x.form.querySelector('button[data-op=run_schedule]')).find(x => x)")
    n1 = db.execute("SELECT count(*) FROM jobq.jobs WHERE kind = 'report.build'").fetchone()[0]
    if has_run:
        check("run a schedule now: one job more", n1 == n0 + 1 and "fired: job" in b.text(), (n0, n1, b.text()[:300]))
    else:
        check("run a schedule now (jobq.run_schedule is not in this build yet)", False, b.text()[:300])

    b.goto(u + "/schedules")
    if has_run:
        check("schedules: the fire's job and its outcome", "pending" in b.text(), b.text()[:600])
    b.shot(os.path.join(shots, "schedules.png"))

    # live: the counts refresh by themselves (running: the indexed refresh)
    b.goto(u + "/")
    sel = "document.querySelector('[data-q=reports][data-f=running]').textContent"
    before = b.js(sel)
    db.execute("SELECT jobq.enqueue('report.live', '{}', queue => 'reports')")
    live = db.execute("SELECT job_id, lease_token FROM jobq.claim('reports', worker_id => 'w-live',"
                      " kinds => ARRAY['report.live'])").fetchone()
    want = str(int(before) + 1)
    got = wait_for(lambda: b.js(sel) == want, 40, 0.5)
    check("live: the overview's counts refresh without a reload", got, (before, b.js(sel)))
    # completed in the last hour: the minutes counted again at each refresh
    sel = "document.querySelector('[data-q=reports][data-f=completed_last_hour]').textContent"
    before = b.js(sel)
    db.execute("SELECT jobq.complete(%s, %s)", live)
    want = str(int(before) + 1)
    got = wait_for(lambda: b.js(sel) == want, 40, 0.5)
    check("live: a job completed since the page loaded counts in completed 1h", got, (before, b.js(sel)))

    # read-only
    b.goto(ro.url + "/dead")
    check("read-only: the dead letter renders", "invoice" in b.text() or "mail.send" in b.text())
    n = b.js("document.querySelectorAll('form[action=\"/action\"], button[data-op]').length")
    check("read-only: no action is offered", n == 0, n)
    b.goto(ro.url + f"/job/{ids['mail_dead']}")
    check("read-only: a failed job has no retry or edit",
          b.js("document.querySelectorAll('form[action=\"/action\"], textarea').length") == 0)
    b.shot(os.path.join(shots, "readonly.png"))
    tok = ro.csrf("/")
    st, _, _ = ro.post("/action", {"op": "retry", "job_id": ids["mail_dead"], "csrf": tok or "none"})
    check("read-only: a POST with a valid token is refused (403)",
          tok is not None and st == 403 and status(db, ids["mail_dead"]) == "failed",
          (tok, st, status(db, ids["mail_dead"])))

    # a work-only role: its queue only, no actions
    b.goto(worker.url + "/")
    t = b.text()
    check("work-only role: sees its queue", "mail" in t, t[:300])
    check("work-only role: sees no other queue", "billing" not in t and "reports" not in t, t[:400])
    b.shot(os.path.join(shots, "worker-role.png"))
    b.goto(worker.url + "/jobs")
    t = b.text()
    check("work-only role: jobs of its queue only", "mail.send" in t and "invoice" not in t and "report." not in t, t[:400])
    b.goto(worker.url + f"/job/{ids['hostile']}")
    check("work-only role: another queue's job is not found", "no job" in b.text())
    b.goto(worker.url + f"/job/{ids['mail_dead']}")
    check("work-only role: no retry button (it may not administer)",
          b.js("document.querySelectorAll('button[data-op]').length") == 0)
    b.goto(worker.url + f"/job/{ids['mail_dead']}")
    check("work-only role: the job page says the stack traces are not for it",
          "which this role may not read" in b.text(), b.text()[-600:])
    tok = worker.csrf("/")
    st, hdr, _ = worker.post("/action", {"op": "discard", "job_id": ids["mail_dead"], "csrf": tok or "",
                                         "back": "/dead", "confirmed": "yes"})
    _, _, page = worker.get("/dead")
    check("work-only role: a forged discard is refused by jobq (42501)",
          status(db, ids["mail_dead"]) == "failed" and "42501" in page, (st, status(db, ids["mail_dead"]), page[:300]))
    st, _, _ = worker.get(f"/workflow/{ids['wf']['A']}")
    check("work-only role: another queue's workflow is not found", st == 404, st)
    b.goto(worker.url + "/workers")
    t = b.text()
    check("work-only role: the application workers of its queue only (its own w-gone, not the reports one)",
          "mail-1" in t and "box-9" in t and "box-2" not in t, t[:600])
    b.goto(worker.url + "/dead")
    check("work-only role: dead letter of its queue only", "mailbox full" in b.text() and "smtp" not in b.text())
    # a forged POST (right token and cookie): the database refuses
    tok = worker.csrf("/")
    st, hdr, _ = worker.post("/action", {"op": "retry", "job_id": ids["mail_dead"], "csrf": tok or "", "back": "/dead"})
    st2, _, page = worker.get("/dead")
    check("work-only role: a forged retry is refused by jobq (42501)",
          tok is not None and st == 303 and status(db, ids["mail_dead"]) == "failed" and "42501" in page,
          (tok, st, status(db, ids["mail_dead"]), page[:300]))
    st, _, _ = worker.post("/action", {"op": "retry_failed", "queue": "billing", "csrf": tok or "", "back": "/",
                                       "confirmed": "yes"})
    n = db.execute("SELECT count(*) FROM jobq.jobs WHERE queue = 'billing' AND status = 'failed'").fetchone()[0]
    _, _, page = worker.get("/")
    check("work-only role: cannot retry another queue's jobs", n >= 1 and "42501" in page, (n, page[:300]))

    # a password
    b.goto(pw.url + "/")
    check("password: the dashboard asks for it", b.js("location.pathname") == "/login"
          and b.js("!!document.querySelector('input[type=password]')"))
    b.js("document.querySelector('input[type=password]').value = 'wrong'")
    b.click("document.querySelector('form.login button')")
    check("password: a wrong one is refused", "wrong password" in b.text())
    b.js("document.querySelector('input[type=password]').value = 's3cret pass'")
    b.click("document.querySelector('form.login button')")
    check("password: the right one lets in", b.js("location.pathname") == "/" and "billing" in b.text(),
          b.text()[:300])
    st, _, _ = pw.get("/dead")
    check("password: a request without the session goes to /login", st == 303, st)


if __name__ == "__main__":
    sys.exit(main())
