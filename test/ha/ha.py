#!/usr/bin/python3
"""test/ha/ha.py: jobq under a Patroni cluster that fails over, with a ledger.

Started by test/ha/run.sh (which builds jobq into a private PostgreSQL tree
and runs this as the postgres user).  On loopback only it starts one etcd
and three Patroni nodes of PostgreSQL with jobq preloaded, in synchronous
mode or asynchronous; runs producers (plain SQL, the Python library's
jobq.enqueue, in-database handler jobs, workflow fan-ins) and workers (plain
SQL claim / complete with lease tokens, one jobq.Worker of the Python
library in a process of its own) over multi-host connection strings
(target_session_attrs=read-write), the Node library's Producer and Worker
(node-load.js) through a proxy that follows Patroni's leader, and a
schedule firing every 2 s; performs switchovers (patronictl switchover) and
failovers (SIGKILL of the primary's postmaster; SIGSTOP of the primary's
node: its Patroni and every PostgreSQL process, for longer than the leader
key's ttl); then checks, from the ledgers written outside the cluster and
the final primary's tables, what issue 38 asks:

  * every enqueue acknowledged to a producer exists (synchronous mode: none
    lost; asynchronous: what was lost, and that it was acknowledged by a
    primary shortly before that primary failed);
  * no job completed twice under valid leases, and lease tokens of a lost
    timeline are refused on the new one (a probe holds the primary's WAL
    senders before a SIGKILL, so that its claims and a completion are
    really lost, then presents their tokens to the new primary);
  * every job ends completed or failed by its own rules;
  * every in-database job left one effect, every fan-in child ran after its
    parents;
  * no schedule fire time fired twice, none missed beyond run_once;
  * jobq's background worker runs on the primary only, serves within
    seconds of a promotion (measured), and a former primary that rejoins
    as a standby runs none.

Output: "ok N - ..." / "not ok N - ..." lines, "# ..." comments and
figures, then "N passed, N failed"; the exit status is 1 when a check
failed.  Every process it starts is stopped when it ends (pids also in
DIR/pids for run.sh's safety net).
"""

import argparse
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import psycopg

T0 = time.time()


def log(msg):
    """A comment line with the seconds since start."""
    print("# %7.1f  %s" % (time.time() - T0, msg), flush=True)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


# ---------------------------------------------------------------------------
# Client side: a connection with a deadline and reconnection


class Watchdog(threading.Thread):
    """Cuts the socket of a statement past its deadline.  A frozen server
    (SIGSTOP) on loopback never answers, and its kernel still acknowledges
    TCP, so neither keepalives nor tcp_user_timeout notice: the client
    itself must give up.  shutdown() on a dup of the socket makes libpq see
    the connection closed."""

    def __init__(self):
        super().__init__(daemon=True)
        self.lock = threading.Lock()
        self.watch = {}
        self.n = 0
        self.cuts = 0

    def arm(self, fd, seconds):
        with self.lock:
            self.n += 1
            self.watch[self.n] = (time.time() + seconds, fd)
            return self.n

    def disarm(self, token):
        with self.lock:
            self.watch.pop(token, None)

    def run(self):
        while True:
            time.sleep(0.1)
            now = time.time()
            with self.lock:
                for k, (deadline, fd) in list(self.watch.items()):
                    if now >= deadline:
                        del self.watch[k]
                        self.cuts += 1
                        try:
                            s = socket.socket(fileno=os.dup(fd))
                            s.shutdown(socket.SHUT_RDWR)
                            s.close()
                        except OSError:
                            pass


WATCHDOG = Watchdog()


class Conn:
    """One autocommit connection over the multi-host connection string,
    made again after any error."""

    def __init__(self, conninfo, connect=None):
        self.conninfo = conninfo
        self.connect_fn = connect or (lambda ci: psycopg.connect(ci, autocommit=True))
        self.c = None
        self.port = None

    def ensure(self):
        if self.c is None or self.c.closed:
            self.c = None
            self.c = self.connect_fn(self.conninfo)
            self.port = int(self.c.info.port)
        return self.c

    def run(self, sql, params=(), timeout=5.0, fetch=True):
        c = self.ensure()
        w = WATCHDOG.arm(c.pgconn.socket, timeout)
        try:
            cur = c.execute(sql, params)
            return cur.fetchall() if fetch else None
        finally:
            WATCHDOG.disarm(w)

    def drop(self):
        if self.c is not None:
            try:
                self.c.close()
            except Exception:
                pass
        self.c = None


class Ledger:
    """Lines appended to a file outside the cluster, flushed each."""

    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, *fields):
        with self.lock:
            self.f.write("\t".join(str(x) for x in fields) + "\n")


def read_ledger(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


# ---------------------------------------------------------------------------
# The cluster


class Cluster:
    def __init__(self, args):
        self.a = args
        self.dir = args.dir
        self.sync = args.mode == "sync"
        b = args.port_base
        self.etcd_client = b + 1
        self.etcd_peer = b + 2
        self.rest = {n: b + 10 + i for i, n in enumerate(("n1", "n2", "n3"))}
        self.pg = {n: b + 20 + i for i, n in enumerate(("n1", "n2", "n3"))}
        self.names = sorted(self.rest)
        self.procs = {}
        self.pidfile = open(os.path.join(self.dir, "pids"), "a", buffering=1)
        self.conninfo = ("host=%s port=%s dbname=ha user=postgres target_session_attrs=read-write "
                         "connect_timeout=2 application_name=ha" % (
                             ",".join("127.0.0.1" for _ in self.names),
                             ",".join(str(self.pg[n]) for n in self.names)))

    def _spawn(self, name, argv, logname):
        lf = open(os.path.join(self.dir, logname), "ab")
        p = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, cwd=self.dir)
        self.procs[name] = p
        self.pidfile.write("%d %s\n" % (p.pid, name))
        return p

    def start_etcd(self):
        d = os.path.join(self.dir, "etcd")
        self._spawn("etcd", [
            "etcd", "--name", "e0", "--data-dir", d,
            "--listen-client-urls", "http://127.0.0.1:%d" % self.etcd_client,
            "--advertise-client-urls", "http://127.0.0.1:%d" % self.etcd_client,
            "--listen-peer-urls", "http://127.0.0.1:%d" % self.etcd_peer,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.etcd_peer,
            "--initial-cluster", "e0=http://127.0.0.1:%d" % self.etcd_peer,
            "--initial-cluster-token", "jobq-ha", "--initial-cluster-state", "new",
        ] + (["--enable-v2=true"] if self.a.dcs == "etcd" else []), "etcd.log")
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.etcd_client,
                                            timeout=1) as r:
                    if json.loads(r.read()).get("health") in ("true", True):
                        return
            except Exception:
                pass
            time.sleep(0.3)
        raise RuntimeError("etcd did not come up (etcd.log)")

    def node_dir(self, n):
        return os.path.join(self.dir, n)

    def data_dir(self, n):
        return os.path.join(self.dir, n, "data")

    def config(self, n):
        nd = self.node_dir(n)
        params = {
            "shared_preload_libraries": "jobq",
            "max_connections": 100,
            "wal_level": "replica",
            "hot_standby": "on",
            "max_wal_senders": 10,
            "max_replication_slots": 10,
            "wal_keep_size": "256MB",
            "wal_log_hints": "on",
            "fsync": "off",
            "jit": "off",
            "jobq.naptime": "1s",
            "log_min_messages": "warning",
            "log_line_prefix": "%m [%p] %b ",
        }
        return {
            "scope": "jobq-ha",
            "namespace": "/jobq-ha/",
            "name": n,
            "restapi": {"listen": "127.0.0.1:%d" % self.rest[n],
                        "connect_address": "127.0.0.1:%d" % self.rest[n]},
            # Patroni 3.0.2 (Debian 12) with etcd3 overwrites the leader key
            # when a primary frozen past the ttl resumes (fixed in 3.0.3,
            # patroni PR 2689): two primaries.  The v2 API's update is a
            # compare-and-swap; default_dcs picks it for such a Patroni, and
            # --dcs etcd3 shows the bug.
            self.a.dcs: {"hosts": ["127.0.0.1:%d" % self.etcd_client]},
            "bootstrap": {
                "dcs": {
                    "ttl": self.a.ttl,
                    "loop_wait": 1,
                    "retry_timeout": 3,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    # a crashed primary fails over rather than restart
                    "primary_start_timeout": 0,
                    "synchronous_mode": self.sync,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                   "parameters": params},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            },
            "postgresql": {
                "listen": "127.0.0.1:%d" % self.pg[n],
                "connect_address": "127.0.0.1:%d" % self.pg[n],
                "data_dir": self.data_dir(n),
                "bin_dir": self.a.bin,
                "pgpass": os.path.join(nd, "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                },
                "parameters": {"unix_socket_directories": nd,
                               "logging_collector": "on",
                               "log_directory": os.path.join(nd, "pglog"),
                               "log_filename": "postgresql-%H%M%S.log"},
                "pg_hba": ["local all all trust",
                           "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
                "use_pg_rewind": True,
                "remove_data_directory_on_rewind_failure": True,
                "remove_data_directory_on_diverged_timelines": True,
            },
        }

    def cfg_path(self, n):
        return os.path.join(self.node_dir(n), "patroni.yml")

    def start_node(self, n):
        os.makedirs(self.node_dir(n), exist_ok=True)
        os.makedirs(os.path.join(self.node_dir(n), "pglog"), exist_ok=True)
        with open(self.cfg_path(n), "w") as f:
            json.dump(self.config(n), f, indent=1)  # JSON is YAML
        self._spawn(n, ["patroni", self.cfg_path(n)], n + "-patroni.log")

    def cluster_state(self, exclude=()):
        """/cluster from the first node's REST API that answers, starting with
        the one that answered last (a frozen node costs a timeout)."""
        i = self.names.index(getattr(self, "_answered", self.names[0]))
        for n in self.names[i:] + self.names[:i]:
            if n in exclude:
                continue
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/cluster" % self.rest[n],
                                            timeout=1) as r:
                    st = json.loads(r.read())
                self._answered = n
                return st
            except Exception:
                continue
        return None

    def leader(self, exclude=()):
        st = self.cluster_state(exclude)
        if not st:
            return None
        for m in st.get("members", []):
            if m.get("role") == "leader" and m.get("state") == "running":
                return m["name"]
        return None

    def healthy(self):
        """(leader, sync standby or None) when three members run, one leads,
        the others stream with small lag; else None."""
        st = self.cluster_state()
        if not st or len(st.get("members", [])) != 3:
            return None
        leader, sync, ok = None, None, True
        for m in st["members"]:
            if m.get("role") == "leader":
                leader = m["name"] if m.get("state") == "running" else None
            else:
                if m.get("state") not in ("running", "streaming"):
                    ok = False
                lag = m.get("lag")
                if not isinstance(lag, int) or lag > 1024 * 1024:
                    ok = False
                if m.get("role") == "sync_standby":
                    sync = m["name"]
        if not ok or leader is None or (self.sync and sync is None):
            return None
        return leader, sync

    def wait_healthy(self, timeout=180):
        deadline = time.time() + timeout
        while time.time() < deadline:
            h = self.healthy()
            if h:
                try:
                    with psycopg.connect("host=127.0.0.1 port=%d dbname=postgres user=postgres "
                                         "connect_timeout=2" % self.pg[h[0]], autocommit=True) as c:
                        if not c.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                            return h
                except Exception:
                    pass
            time.sleep(0.5)
        raise RuntimeError("the cluster did not become healthy in %d s: %s" % (
            timeout, json.dumps(self.cluster_state())))

    def direct(self, n, db="ha", timeout=2):
        return psycopg.connect("host=127.0.0.1 port=%d dbname=%s user=postgres connect_timeout=%d "
                               "application_name=ha-direct" % (self.pg[n], db, timeout),
                               autocommit=True)

    def postmaster_pid(self, n):
        try:
            with open(os.path.join(self.data_dir(n), "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def children(self, pid):
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % p) as f:
                    st = f.read()
                ppid = int(st[st.rindex(")") + 2:].split()[1])
                if ppid == pid:
                    out.append(int(p))
            except (OSError, ValueError):
                continue
        return out

    def cmdline(self, pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                return f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return ""

    def patronictl(self, *args):
        return subprocess.run(["patronictl", "-c", self.cfg_path(self.names[0])] + list(args),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)

    def stop_all(self):
        """Everything we started: resume stopped ones, Patroni (which stops its
        PostgreSQL) then etcd; what is left after 40 s is killed."""
        for n in self.names:
            pm = self.postmaster_pid(n)
            for pid in ([pm] + self.children(pm) if pm else []):
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
        for name, p in self.procs.items():
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
        for n in self.names:
            p = self.procs.get(n)
            if p and p.poll() is None:
                p.terminate()
        deadline = time.time() + 40
        for n in self.names:
            p = self.procs.get(n)
            if p:
                try:
                    p.wait(max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    p.kill()
        for n in self.names:
            pm = self.postmaster_pid(n)
            if pm and os.path.exists("/proc/%d" % pm) and self.data_dir(n) in self.cmdline(pm):
                subprocess.run([os.path.join(self.a.bin, "pg_ctl"), "-D", self.data_dir(n),
                                "-m", "immediate", "-w", "-t", "20", "stop"],
                               capture_output=True)
        for name, p in self.procs.items():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


# ---------------------------------------------------------------------------
# The load


class Load:
    def __init__(self, h):
        self.h = h
        self.c = h.cluster
        self.stop_producers = threading.Event()
        self.stop_workers = threading.Event()
        self.threads = []
        self.ldir = os.path.join(h.dir, "ledger")
        os.makedirs(self.ldir, exist_ok=True)
        self.errors = {}
        self.err_lock = threading.Lock()
        self.claims_seen = []          # (t, port) of non-empty claims, for the figures
        self.acks_seen = []            # (t, port) of enqueue acks
        self.seen_lock = threading.Lock()
        self.libworker = None
        self.node = None

    def note_error(self, who, e):
        k = "%s: %s" % (who, type(e).__name__)
        with self.err_lock:
            self.errors[k] = self.errors.get(k, 0) + 1

    def start(self):
        for i in range(self.h.a.sql_producers):
            self._thread(self.sql_producer, i)
        self._thread(self.lib_producer, 0)
        self._thread(self.db_producer, 0)
        self._thread(self.wf_producer, 0)
        self.producers = list(self.threads)
        for i in range(self.h.a.workers):
            self._thread(self.sql_worker, i)
        self.start_libworker()
        if self.h.a.node_app:
            argv = ["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "node-load.js"),
                    "postgresql://postgres@127.0.0.1:%d/ha?application_name=ha-node" %
                    (self.h.a.port_base + 30), self.ldir]
            lf = open(os.path.join(self.h.dir, "node.log"), "ab")
            env = dict(os.environ, NODE_PATH=os.path.join(self.h.a.node_app, "node_modules"))
            self.node = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env)
            self.c.pidfile.write("%d node\n" % self.node.pid)

    def _thread(self, fn, i):
        t = threading.Thread(target=fn, args=(i,), daemon=True)
        t.start()
        self.threads.append(t)

    def _enqueue_loop(self, name, queue, kind, conn, enqueue, pause=None):
        led = Ledger(os.path.join(self.ldir, name))
        seq = 0
        while not self.stop_producers.is_set():
            key = "%s-%d" % (name, seq)
            led.write("try", key, "%.3f" % time.time())
            tries = 0
            while True:
                tries += 1
                try:
                    job_id, created = enqueue(conn, key)
                    break
                except Exception as e:
                    self.note_error(name, e)
                    conn.drop()
                    if tries > 400:
                        led.write("gaveup", key, "%.3f" % time.time())
                        job_id = None
                        break
                    time.sleep(min(1.0, 0.05 * tries))
            if job_id is not None:
                t = time.time()
                led.write("ack", key, job_id, created, conn.port, "%.3f" % t, tries)
                with self.seen_lock:
                    self.acks_seen.append((t, conn.port))
            seq += 1
            time.sleep(self.h.a.produce_sleep if pause is None else pause)

    def _sql_enqueues(self, name, queue, kind, pause=None):
        """Plain jobq.enqueue calls of kind into queue, each with its key."""
        conn = Conn(self.c.conninfo)

        def enqueue(conn, key):
            rows = conn.run("SELECT job_id, created FROM jobq.enqueue(%s, %s::jsonb, "
                            "queue => %s, max_retries => 25, idempotency_key => %s)",
                            (kind, json.dumps({"key": key}), queue, key))
            return rows[0]
        self._enqueue_loop(name, queue, kind, conn, enqueue, pause=pause)

    def sql_producer(self, i):
        self._sql_enqueues("sqlprod%d" % i, "ha", "ha.sql")

    def db_producer(self, i):
        """Jobs run inside the database (queue db, handler ha_run)."""
        self._sql_enqueues("dbprod%d" % i, "db", "ha.db", pause=0.2)

    def wf_producer(self, i):
        """A fan-in: two parents and a child waiting for both (depends_on), in
        one transaction; the SQL workers run all three (queue ha).  The key
        acknowledged is the child's."""
        conn = Conn(self.c.conninfo)

        def enqueue(conn, key):
            rows = conn.run("""
                WITH a AS (SELECT job_id FROM jobq.enqueue('ha.wf', '{}', queue => 'ha',
                                  max_retries => 25, idempotency_key => %(k)s || '-a')),
                     b AS (SELECT job_id FROM jobq.enqueue('ha.wf', '{}', queue => 'ha',
                                  max_retries => 25, idempotency_key => %(k)s || '-b'))
                SELECT c.job_id, c.created
                  FROM a, b, jobq.enqueue('ha.wf', jsonb_build_object('parents',
                              jsonb_build_array(a.job_id, b.job_id)), queue => 'ha',
                              max_retries => 25, idempotency_key => %(k)s,
                              depends_on => ARRAY[a.job_id, b.job_id]) c""", {"k": key})
            return rows[0]
        self._enqueue_loop("wfprod%d" % i, "ha", "ha.wf", conn, enqueue, pause=0.3)

    def lib_producer(self, i):
        import jobq
        conn = Conn(self.c.conninfo, lambda ci: jobq.connect(ci, autocommit=True))

        def enqueue(conn, key):
            c = conn.ensure()
            w = WATCHDOG.arm(c.pgconn.socket, 5)
            try:
                r = jobq.enqueue(c, "ha.lib", {"key": key}, queue="lib", max_retries=25,
                                 idempotency_key=key)
            finally:
                WATCHDOG.disarm(w)
            return r.job_id, r.created
        self._enqueue_loop("libprod%d" % i, "lib", "ha.lib", conn, enqueue)

    def sql_worker(self, i):
        name = "sqlwork%d" % i
        led = Ledger(os.path.join(self.ldir, name))
        conn = Conn(self.c.conninfo)
        idle = 0
        while not self.stop_workers.is_set():
            try:
                rows = conn.run("SELECT job_id, lease_token FROM jobq.claim('ha', %s, 4, "
                                "interval '15 s')", (name,))
            except Exception as e:
                self.note_error(name, e)
                conn.drop()
                time.sleep(0.2)
                continue
            if not rows:
                idle += 1
                time.sleep(0.05 if idle < 5 else 0.2)
                continue
            idle = 0
            t = time.time()
            with self.seen_lock:
                self.claims_seen.append((t, conn.port))
            for job_id, token in rows:
                led.write("claim", job_id, token, conn.port, "%.3f" % t)
            for job_id, token in rows:
                time.sleep(random.uniform(0.005, 0.03))   # the work
                self.complete(conn, led, name, job_id, token)

    def complete(self, conn, led, name, job_id, token):
        """complete(), again with the same token after an error; "ours" when
        an error hid a commit that did land (the row says so)."""
        tries = 0
        errored = False
        deadline = time.time() + 120
        while True:
            tries += 1
            try:
                ok = conn.run("SELECT jobq.complete(%s, %s, %s::jsonb)",
                              (job_id, token, json.dumps({"by": name})))[0][0]
                if ok:
                    res = "true"
                elif not errored:
                    res = "false"
                else:
                    st = conn.run("SELECT status, lease_token FROM jobq.job WHERE job_id = %s",
                                  (job_id,))
                    res = "ours" if st and st[0][0] == "completed" and st[0][1] == token \
                        else "false"
                led.write("done", job_id, token, res, conn.port, "%.3f" % time.time(), tries)
                return
            except Exception as e:
                self.note_error(name + " complete", e)
                errored = True
                conn.drop()
                if time.time() > deadline:
                    led.write("done", job_id, token, "gaveup", 0, "%.3f" % time.time(), tries)
                    return
                time.sleep(min(1.0, 0.05 * tries))

    def start_libworker(self):
        argv = [sys.executable, os.path.abspath(__file__), "--libworker",
                "--dir", self.h.dir, "--conninfo", self.c.conninfo]
        lf = open(os.path.join(self.h.dir, "libworker.log"), "ab")
        self.libworker = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
        self.c.pidfile.write("%d libworker\n" % self.libworker.pid)

    def stop_producing(self, deadline):
        """Stop every producer and wait until each has ended its last
        enqueue (acknowledged, or given up): a job enqueued after the queues
        were seen drained would wait in them.  The Node producer is told by
        SIGUSR2 and writes "stopped" to its ledger."""
        self.stop_producers.set()
        if self.node and self.node.poll() is None:
            self.node.send_signal(signal.SIGUSR2)
        for t in self.producers:
            t.join(max(0, deadline - time.time()))
        led = os.path.join(self.ldir, "nodeprod0")
        while self.node and self.node.poll() is None and time.time() < deadline:
            if os.path.exists(led) and any(r[0] == "stopped" for r in read_ledger(led)):
                break
            time.sleep(0.2)
        log("producers stopped")

    def stop(self):
        self.stop_producers.set()
        self.stop_workers.set()
        for t in self.threads:
            t.join(150)
        for p in (self.libworker, self.node):
            if p and p.poll() is None:
                p.terminate()
        for p in (self.libworker, self.node):
            if p:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()


def libworker_main(args):
    """The Python library's jobq.Worker on queue 'lib': a ledger of handler
    runs and of the events it reports."""
    import logging
    import jobq
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    led = Ledger(os.path.join(args.dir, "ledger", "libwork"))

    def on_event(ev):
        led.write("event", ev.name, ev.job_id, ev.attempt, "%.3f" % time.time())

    worker = jobq.Worker(args.conninfo, queues="lib", concurrency=4, lease=15.0, wait=1.0,
                         grace=20.0, worker_id="libwork", on_event=on_event)

    @worker.handler("ha.lib")
    def run(job):
        led.write("run", job.id, job.lease_token, "%.3f" % time.time())
        time.sleep(random.uniform(0.005, 0.03))
        return {"by": "libwork"}

    sys.exit(worker.run())


# ---------------------------------------------------------------------------
# A TCP proxy that follows the leader (for the Node library)


class LeaderProxy(threading.Thread):
    """127.0.0.1:PORT forwards to the PostgreSQL port of Patroni's leader, as
    HAProxy with Patroni's REST check does; when the leader changes, every
    forwarded connection is cut (HAProxy's shutdown-sessions).  node-postgres
    has no multi-host connection strings, so the Node library reaches the
    cluster through this."""

    def __init__(self, c, port):
        super().__init__(daemon=True)
        self.c = c
        self.port = port
        self.leader = None
        self.lock = threading.Lock()
        self.conns = set()
        self.stop = threading.Event()
        self.cuts = 0
        # bound here, in the caller's thread: a port taken by another run
        # fails the run at once instead of leaving the Node library nothing
        # to connect to
        self.srv = socket.create_server(("127.0.0.1", self.port))

    def set_leader(self, name):
        with self.lock:
            if name == self.leader:
                return
            self.leader = name
            conns = list(self.conns)
            self.conns.clear()
        for pair in conns:
            self.cuts += 1
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def run(self):
        srv = self.srv
        srv.settimeout(0.5)
        while not self.stop.is_set():
            try:
                cli, _ = srv.accept()
            except socket.timeout:
                continue
            threading.Thread(target=self.serve, args=(cli,), daemon=True).start()
        srv.close()

    def serve(self, cli):
        with self.lock:
            name = self.leader
        try:
            if name is None:
                raise OSError("no leader")
            up = socket.create_connection(("127.0.0.1", self.c.pg[name]), timeout=2)
            up.settimeout(None)
        except OSError:
            cli.close()
            return
        pair = (cli, up)
        with self.lock:
            if self.leader != name:
                cli.close()
                up.close()
                return
            self.conns.add(pair)

        def pipe(a, b):
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            except OSError:
                pass
            for sock in (a, b):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        t = threading.Thread(target=pipe, args=(up, cli), daemon=True)
        t.start()
        pipe(cli, up)
        t.join()
        with self.lock:
            self.conns.discard(pair)
        cli.close()
        up.close()


# ---------------------------------------------------------------------------
# Watching every node


class Sampler(threading.Thread):
    """Every 0.25 s, each node: in recovery?, how many jobq processes run
    (launcher, workers, executors), and whether Patroni calls it leader."""

    def __init__(self, c, proxy=None):
        super().__init__(daemon=True)
        self.c = c
        self.proxy = proxy
        self.stop = threading.Event()
        # (t, node, in_recovery, jobq processes, Patroni's leader, jobq workers of ha)
        self.samples = []
        self.lock = threading.Lock()
        self.conns = {}
        self.leader = None

    def sample(self, n):
        try:
            if n not in self.conns or self.conns[n].closed:
                self.conns[n] = psycopg.connect(
                    "host=127.0.0.1 port=%d dbname=postgres user=postgres connect_timeout=1 "
                    "application_name=ha-sampler" % self.c.pg[n], autocommit=True)
            c = self.conns[n]
            w = WATCHDOG.arm(c.pgconn.socket, 1.5)
            try:
                r = c.execute("SELECT pg_is_in_recovery(), count(*) FILTER (WHERE backend_type "
                              "IN ('jobq launcher', 'jobq worker', 'jobq executor')), "
                              "count(*) FILTER (WHERE backend_type = 'jobq worker' "
                              "AND datname = 'ha') FROM pg_stat_activity").fetchone()
            finally:
                WATCHDOG.disarm(w)
            return r
        except Exception:
            c = self.conns.pop(n, None)
            if c is not None:
                try:
                    c.close()
                except Exception:
                    pass
            return None

    def run(self):
        # one thread a node, so that a frozen node slows only its own samples;
        # this one follows Patroni's leader
        self.leader = None
        for n in self.c.names:
            threading.Thread(target=self.run_node, args=(n,), daemon=True).start()
        while not self.stop.is_set():
            self.leader = self.c.leader()
            if self.proxy is not None:
                self.proxy.set_leader(self.leader)
            time.sleep(0.25)

    def run_node(self, n):
        while not self.stop.is_set():
            leader = self.leader
            r = self.sample(n)
            if r is not None:
                with self.lock:
                    self.samples.append((time.time(), n, r[0], r[1], leader, r[2]))
            time.sleep(0.25)

    def since(self, t):
        with self.lock:
            return [s for s in self.samples if s[0] >= t]


# ---------------------------------------------------------------------------
# The harness


class Harness:
    def __init__(self, args):
        self.a = args
        self.dir = args.dir
        self.cluster = Cluster(args)
        self.load = None
        self.sampler = None
        self.n = 0
        self.failed = 0
        self.events = []
        self.probes = []
        self.figures = []

    def check(self, ok, what, detail=None):
        self.n += 1
        if not ok:
            self.failed += 1
        print("%sok %d - %s" % ("" if ok else "not ", self.n, what), flush=True)
        if detail and (not ok or self.a.verbose):
            for line in str(detail).splitlines()[:30]:
                print("#   " + line, flush=True)
        return ok

    # --- set-up --------------------------------------------------------------

    def setup(self):
        c = self.cluster
        log("etcd on 127.0.0.1:%d; %s, over etcd's %s API" % (
            c.etcd_client,
            subprocess.run(["patroni", "--version"], capture_output=True, text=True).stdout.strip(),
            "v3" if self.a.dcs == "etcd3" else "v2"))
        c.start_etcd()
        c.start_node("n1")
        deadline = time.time() + 120
        while time.time() < deadline and c.leader() != "n1":
            time.sleep(0.5)
        if c.leader() != "n1":
            raise RuntimeError("n1 did not bootstrap (n1-patroni.log)")
        c.start_node("n2")
        c.start_node("n3")
        leader, sync = c.wait_healthy(240)
        log("cluster up: leader %s, sync standby %s (mode %s)" % (leader, sync, self.a.mode))
        with c.direct(leader, "postgres") as conn:
            conn.execute("CREATE DATABASE ha")
        with c.direct(leader) as conn:
            conn.execute("CREATE EXTENSION jobq")
            conn.execute("SELECT jobq.schedule('tick', '*/2 * * * * *', 'tick', queue => 'ticks', "
                         "misfire => 'run_once')")
            # in-database jobs: each run leaves one row, committed with the
            # job's completion by jobq's executor
            conn.execute("CREATE TABLE ha_effect (job_id bigint NOT NULL, lease_token bigint, "
                         "at timestamptz NOT NULL DEFAULT clock_timestamp())")
            conn.execute("""CREATE FUNCTION public.ha_run(payload jsonb, job jsonb) RETURNS jsonb
                LANGUAGE sql SET search_path = public, pg_temp AS $$
                SELECT pg_sleep(0.1);
                INSERT INTO public.ha_effect (job_id, lease_token)
                VALUES ((job->>'job_id')::bigint, (job->>'lease_token')::bigint)
                RETURNING jsonb_build_object('effect', true) $$""")
            conn.execute("SELECT jobq.register_handler('ha.db', 'public.ha_run(jsonb,jsonb)', "
                         "queue => 'db', allow_superuser => true)")
            # the default lease (5 min): a job whose executor died with its
            # server (a switchover's shutdown, a crash; the handler sleeps
            # 0.1 s, so one is often mid-job) runs again at once on the new
            # primary, or the drain (2 min) fails
        # every node: jobq preloaded, the extension replicated
        time.sleep(1)
        got = {}
        for n in c.names:
            with c.direct(n) as conn:
                got[n] = conn.execute(
                    "SELECT current_setting('shared_preload_libraries'), "
                    "(SELECT extversion FROM pg_extension WHERE extname = 'jobq')").fetchone()
        self.check(all(v[0] == "jobq" for v in got.values()) and
                   len({v[1] for v in got.values()}) == 1 and None not in {v[1] for v in got.values()},
                   "every node preloads jobq and has the same jobq version (%s)" %
                   ", ".join("%s: %s %s" % (n, v[0], v[1]) for n, v in sorted(got.items())), got)
        self.proxy = LeaderProxy(c, self.a.port_base + 30)
        self.proxy.start()
        self.sampler = Sampler(c, self.proxy)
        self.sampler.start()

    # --- events -------------------------------------------------------------

    def plan(self):
        ev = (["switchover"] * self.a.switchovers + ["kill"] * self.a.kills +
              ["stop"] * self.a.stops)
        # interleave: switchover, kill, stop, switchover, ...
        out = []
        groups = [[e for e in ev if e == k] for k in ("switchover", "kill", "stop")]
        while any(groups):
            for g in groups:
                if g:
                    out.append(g.pop())
        return out

    def run_events(self):
        kills = 0
        for i, kind in enumerate(self.plan()):
            leader, sync = self.cluster.wait_healthy(240)
            time.sleep(self.a.settle)
            leader, sync = self.cluster.wait_healthy(240)
            probe = kind == "kill" and kills < self.a.probe_kills
            if kind == "kill":
                kills += 1
            ev = {"i": i + 1, "kind": kind + ("+probe" if probe else ""), "old": leader}
            log("event %d: %s of %s (sync standby %s)" % (i + 1, ev["kind"], leader, sync))
            if kind == "switchover":
                cand = sync or [n for n in self.cluster.names if n != leader][0]
                ev["t"] = time.time()
                r = self.cluster.patronictl("switchover", "--leader", leader, "--candidate", cand,
                                            "--force")
                if r.returncode != 0:
                    log("patronictl switchover failed: %s %s" % (r.stdout, r.stderr))
            elif kind == "kill":
                if probe:
                    self.probe_before(ev, leader)
                pm = self.cluster.postmaster_pid(leader)
                ev["t"] = time.time()
                os.kill(pm, signal.SIGKILL)
                if probe:
                    # the held WAL senders go too, without sending what they held
                    for pid in ev.get("held", []):
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except OSError:
                            pass
            else:
                # Patroni and the postmaster first (no new backend), then every
                # child of the postmaster
                pm = self.cluster.postmaster_pid(leader)
                pids = [self.cluster.procs[leader].pid, pm]
                ev["t"] = time.time()
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                for pid in self.cluster.children(pm):
                    try:
                        os.kill(pid, signal.SIGSTOP)
                        pids.append(pid)
                    except OSError:
                        pass
            new = self.wait_new_leader(leader, ev)
            if kind == "stop":
                time.sleep(2)
                ev["t_cont"] = time.time()
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGCONT)
                    except OSError:
                        pass
            self.after_event(ev, leader, new)
            if probe:
                self.probe_after(ev, new)
            self.events.append(ev)

    def wait_new_leader(self, old, ev):
        deadline = time.time() + 120
        new = None
        while time.time() < deadline:
            n = self.cluster.leader(exclude=(old,) if ev["kind"] == "stop" else ())
            if n and n != old:
                new = n
                break
            time.sleep(0.2)
        ev["t_leader"] = time.time()
        ev["new"] = new
        self.check(new is not None, "event %d (%s of %s): a new leader, %s, after %.1f s" % (
            ev["i"], ev["kind"], old, new, ev["t_leader"] - ev["t"]))
        return new

    def after_event(self, ev, old, new):
        c = self.cluster
        if new is None:
            return
        # the new primary: writable, its jobq worker started
        t_prom = None
        t_worker = None
        deadline = time.time() + 60
        while time.time() < deadline and (t_prom is None or t_worker is None):
            try:
                with c.direct(new, timeout=1) as conn:
                    rec, nworker = conn.execute(
                        "SELECT pg_is_in_recovery(), (SELECT count(*) FROM pg_stat_activity "
                        "WHERE backend_type = 'jobq worker' AND datname = 'ha')").fetchone()
                    if not rec and t_prom is None:
                        t_prom = time.time()
                    if not rec and nworker > 0 and t_worker is None:
                        t_worker = time.time()
            except Exception:
                pass
            time.sleep(0.1)
        # the sampler's view, every 0.25 s: the first sample of the new primary
        # out of recovery, then with its jobq worker for database ha
        smp = [x for x in self.sampler.since(ev["t"]) if x[1] == new and not x[2]]
        ev["t_promoted"] = smp[0][0] if smp else t_prom
        w = [x for x in smp if x[5] > 0]
        ev["t_worker"] = w[0][0] if w else t_worker
        # the first fire of the schedule and the first claim on the new primary
        deadline = time.time() + 60
        while time.time() < deadline:
            with self.load.seen_lock:
                claims = [t for t, p in self.load.claims_seen if t > ev["t"] and p == c.pg[new]]
                acks = [t for t, p in self.load.acks_seen if t > ev["t"] and p == c.pg[new]]
            if claims and acks:
                break
            time.sleep(0.2)
        ev["t_claim"] = min(claims) if claims else None
        ev["t_ack"] = min(acks) if acks else None
        ev["t_tick"] = None
        deadline = time.time() + 15
        while ev["t_tick"] is None and time.time() < deadline:
            try:
                with c.direct(new, timeout=2) as conn:
                    ev["t_tick"] = conn.execute(
                        "SELECT extract(epoch FROM min(created_at))::float8 FROM jobq.job "
                        "WHERE kind = 'tick' AND created_at > to_timestamp(%s)",
                        (ev["t_promoted"] or ev["t"],)).fetchone()[0]
            except Exception:
                pass
            if ev["t_tick"] is None:
                time.sleep(0.5)
        self.check(ev["t_worker"] is not None and ev["t_claim"] is not None,
                   "event %d: the new primary %s runs jobq's worker %.1f s and serves a claim "
                   "%.1f s after the %s" % (
                       ev["i"], new, (ev["t_worker"] or float("nan")) - ev["t"],
                       (ev["t_claim"] or float("nan")) - ev["t"], ev["kind"]))
        # the former primary rejoins as a standby, and runs no jobq process
        deadline = time.time() + 180
        rejoined = False
        while time.time() < deadline:
            st = c.cluster_state()
            if st:
                m = [x for x in st["members"] if x["name"] == old]
                if m and m[0].get("role") == "leader":
                    ev["took_back"] = time.time()
                    log("the former primary %s is the leader again: it took the leader key "
                        "back from %s" % (old, new))
                    break
                if m and m[0].get("role") in ("replica", "sync_standby") and \
                        m[0].get("state") in ("running", "streaming"):
                    try:
                        with c.direct(old, "postgres", timeout=1) as conn:
                            if conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                                rejoined = True
                                break
                    except Exception:
                        pass
            time.sleep(0.5)
        ev["t_rejoined"] = time.time() if rejoined else None
        if not self.check(rejoined, "event %d: the former primary %s rejoined as a standby "
                          "(%.1f s after the %s)" % (ev["i"], old, time.time() - ev["t"],
                                                     ev["kind"])):
            return
        # six looks at it, half a second apart; Patroni may restart a node
        # that has just rejoined (seen on Debian 13), and a refused
        # connection is no look: up to 30 s for the six
        bad, looks, refused = [], 0, []
        deadline = time.time() + 30
        while looks < 6 and time.time() < deadline:
            try:
                with c.direct(old, "postgres", timeout=1) as conn:
                    r = conn.execute(
                        "SELECT pg_is_in_recovery(), count(*) FILTER (WHERE backend_type IN "
                        "('jobq launcher', 'jobq worker', 'jobq executor')) "
                        "FROM pg_stat_activity").fetchone()
                    looks += 1
                    if not r[0] or r[1] != 0:
                        bad.append(r)
            except Exception as e:
                refused.append(str(e))
            time.sleep(0.5)
        self.check(not bad and looks == 6, "event %d: the rejoined %s runs no jobq launcher, "
                   "worker or executor (%d looks, %d connections refused while it restarted)" % (
                       ev["i"], old, looks, len(refused)), bad or refused[-3:])

    # --- the lost-timeline probe ----------------------------------------------

    def probe_before(self, ev, leader):
        """Jobs of queue 'probe' replicated everywhere; then the primary's WAL
        senders are stopped and, on the primary only, the jobs are claimed and
        one is completed: their tokens exist on a timeline that the failover
        will lose (asynchronous mode; in synchronous mode the completion is
        not acknowledged)."""
        c = self.cluster
        with c.direct(leader) as conn:
            conn.execute("SELECT jobq.enqueue_many('ha.probe', ARRAY['{}','{}','{}']::jsonb[], "
                         "queue => 'probe', max_retries => 5)")
            # and a job claimed under a 3 s lease by a worker that goes away: the
            # new primary's jobq worker must reap it
            conn.execute("SELECT jobq.enqueue('ha.reap', '{}', queue => 'probe_reap', "
                         "max_retries => 5)")
            ev["reap"] = conn.execute(
                "SELECT job_id, extract(epoch FROM lease_expires_at)::float8 "
                "FROM jobq.claim('probe_reap', 'gone', 1, interval '3 s')").fetchone()
            # the insert position: the claim commits asynchronously
            # (jobq.async_claim), so its commit record may not be written yet
            # where pg_current_wal_lsn() points, and standbys that replayed to
            # there could lack the claim (seen: the job pending, never claimed,
            # on the new primary)
            lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            deadline = time.time() + 30
            while time.time() < deadline:
                n = conn.execute("SELECT count(*) FROM pg_stat_replication WHERE replay_lsn >= %s",
                                 (lsn,)).fetchone()[0]
                if n >= 2:
                    break
                time.sleep(0.1)
            pids = [r[0] for r in conn.execute(
                "SELECT pid FROM pg_stat_replication").fetchall()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        ev["held"] = pids
        claimed, completed = [], None
        with c.direct(leader) as conn:
            rows = conn.execute("SELECT job_id, lease_token FROM jobq.claim('probe', 'probe', 3)"
                                ).fetchall()
            claimed = [(j, t) for j, t in rows]
            if claimed:
                j, t = claimed[0]
                w = WATCHDOG.arm(conn.pgconn.socket, 2)
                try:
                    completed = conn.execute("SELECT jobq.complete(%s, %s)", (j, t)).fetchone()[0]
                except Exception as e:
                    completed = "not acknowledged (%s)" % type(e).__name__
                finally:
                    WATCHDOG.disarm(w)
        ev["probe"] = {"claimed": claimed, "completed": completed}
        log("probe: WAL senders %s held; claimed %s on %s, complete(first) -> %s" % (
            pids, claimed, leader, completed))
        time.sleep(0.5)

    def probe_after(self, ev, new):
        p = ev.get("probe")
        if not p or not p["claimed"] or new is None:
            self.check(False, "event %d: the lost-timeline probe ran" % ev["i"], p)
            return
        c = self.cluster
        with c.direct(new) as conn:
            states = {j: conn.execute("SELECT status, attempts, lease_token FROM jobq.job "
                                      "WHERE job_id = %s", (j,)).fetchone()
                      for j, _ in p["claimed"]}
            lost = [(j, t) for j, t in p["claimed"] if states[j][2] != t]
            detail = "claimed on the old primary: %s; on the new one: %s" % (
                p["claimed"], states)
            if self.a.mode == "async":
                self.check(len(lost) == len(p["claimed"]),
                           "event %d: the probe's claims (WAL senders held) are lost in "
                           "asynchronous mode, their jobs pending again" % ev["i"], detail)
            else:
                log("probe (sync): claims lost: %d of %d (jobq.async_claim: a claim's commit "
                    "does not wait for the synchronous standby)" % (len(lost), len(p["claimed"])))
            # jobq.async_claim, as documented: a lost claim is a lease that
            # expired at once, the job pending with the attempt count it had
            # (a token's high half is its claim's attempt number)
            notback = [(j, t, states[j]) for j, t in lost
                       if states[j][0] != "pending" or states[j][1] != (t >> 32) - 1]
            self.check(not notback, "event %d: each lost claim left its job pending with the "
                       "attempt count it had, no retry spent (%d lost)" % (ev["i"], len(lost)),
                       notback)
            if self.a.mode == "sync":
                self.check(p["completed"] is not True,
                           "event %d: synchronous mode: the probe's completion, which no "
                           "standby received, was not acknowledged (%s)" % (ev["i"], p["completed"]))
            refused = []
            for j, t in lost:
                ok = conn.execute("SELECT jobq.complete(%s, %s)", (j, t)).fetchone()[0]
                fl = conn.execute("SELECT jobq.fail(%s, %s, 'stale')", (j, t)).fetchone()[0]
                ex = conn.execute("SELECT jobq.extend(%s, %s, interval '1 min')",
                                  (j, t)).fetchone()[0]
                refused.append((j, ok, fl, ex))
            self.check(all(r[1] is False and r[2] is None and r[3] is None for r in refused),
                       "event %d: the %d tokens of the lost timeline are refused on the new "
                       "primary (complete false, fail and extend NULL)" % (ev["i"], len(lost)),
                       refused)
            # claim them again on the new timeline: same attempt number, another token
            again = conn.execute("SELECT job_id, lease_token FROM jobq.claim('probe', 'probe2', 3)"
                                 ).fetchall()
            old = dict(p["claimed"])
            same = [(j, t) for j, t in again if old.get(j) == t]
            self.check(not same and len(again) == len(lost),
                       "event %d: re-claimed on the new timeline, the %d jobs get new tokens "
                       "(old %s, new %s)" % (ev["i"], len(again), sorted(old.items()),
                                             sorted(again)), same)
            done = [conn.execute("SELECT jobq.complete(%s, %s)", (j, t)).fetchone()[0]
                    for j, t in again]
            stale = [conn.execute("SELECT jobq.complete(%s, %s)", (j, old[j])).fetchone()[0]
                     for j, _ in again if j in old]
            self.check(all(done) and not any(stale),
                       "event %d: the new tokens complete, the old ones then still refused" %
                       ev["i"], (done, stale))
            # the lease that expired during the failover: reaped by the new
            # primary's jobq worker
            j, expires = ev["reap"]
            deadline = time.time() + 60
            st = None
            while time.time() < deadline:
                st = conn.execute("SELECT status, retry_count, last_error, "
                                  "extract(epoch FROM updated_at)::float8 FROM jobq.job "
                                  "WHERE job_id = %s", (j,)).fetchone()
                if st[0] != "running":
                    break
                time.sleep(0.2)
            since = max(expires, ev.get("t_promoted") or ev["t"])
            ev["t_reaped"] = st[3] if st and st[0] != "running" else None
            self.check(st is not None and st[0] == "pending" and st[1] == 1 and
                       st[2] == "lease expired",
                       "event %d: a lease that expired during the failover was reaped by the new "
                       "primary %.1f s after its promotion (and its expiry)" % (
                           ev["i"], (ev["t_reaped"] or float("nan")) - since), st)
        self.probes.append(ev)

    # --- the checks at the end ------------------------------------------------

    def drain(self):
        c = self.cluster
        deadline = time.time() + self.a.drain_timeout
        self.load.stop_producing(deadline)
        left = None
        while time.time() < deadline:
            try:
                with psycopg.connect(c.conninfo, autocommit=True) as conn:
                    left = conn.execute(
                        "SELECT count(*) FROM jobq.job WHERE queue IN ('ha', 'lib', 'db', 'node') "
                        "AND status IN ('pending', 'running', 'blocked')").fetchone()[0]
                    if left == 0:
                        break
            except Exception:
                pass
            time.sleep(1)
        log("drained: %s jobs left pending or running" % left)
        self.load.stop()
        self.sampler.stop.set()

    def final_checks(self):
        c = self.cluster
        ldir = self.load.ldir
        sync = self.a.mode == "sync"
        acks, tries_total, gaveup = {}, 0, 0
        produced_by = {}
        for f in sorted(os.listdir(ldir)):
            if "prod" not in f:
                continue
            for rec in read_ledger(os.path.join(ldir, f)):
                if rec[0] == "ack":
                    acks[rec[1]] = (int(rec[2]), rec[3] == "True", int(rec[4]), float(rec[5]),
                                    int(rec[6]))
                    tries_total += int(rec[6]) > 1
                    produced_by[f] = produced_by.get(f, 0) + 1
                elif rec[0] == "gaveup":
                    gaveup += 1
        dones, claims = [], 0
        for f in sorted(os.listdir(ldir)):
            if not f.startswith("sqlwork"):
                continue
            for rec in read_ledger(os.path.join(ldir, f)):
                if rec[0] == "done":
                    dones.append((int(rec[1]), int(rec[2]), rec[3], int(rec[4]), float(rec[5])))
                elif rec[0] == "claim":
                    claims += 1
        lib = read_ledger(os.path.join(ldir, "libwork")) if os.path.exists(
            os.path.join(ldir, "libwork")) else []

        with psycopg.connect(c.conninfo, autocommit=True) as conn:
            port = conn.info.port
            rows = conn.execute("SELECT idempotency_key, job_id, status, lease_token, retry_count, "
                                "max_retries, last_error, kind FROM jobq.job "
                                "WHERE queue IN ('ha', 'lib', 'db', 'node')").fetchall()
            effects = conn.execute(
                "SELECT j.job_id, j.status, count(e.job_id), "
                "count(e.job_id) FILTER (WHERE e.lease_token = j.lease_token) "
                "FROM jobq.job j LEFT JOIN ha_effect e USING (job_id) "
                "WHERE j.kind = 'ha.db' GROUP BY j.job_id, j.status").fetchall()
            stranded = conn.execute(
                "SELECT count(*) FROM jobq.attempt a JOIN jobq.job j USING (job_id) "
                "WHERE j.kind = 'ha.db' AND a.error = 'lease expired'").fetchone()[0]
            orphans = conn.execute("SELECT count(*) FROM ha_effect e WHERE NOT EXISTS "
                                   "(SELECT FROM jobq.job j WHERE j.job_id = e.job_id)"
                                   ).fetchone()[0]
            # a claim reads its clock (claimed_at) before it looks for
            # ready jobs: a parent whose completion committed in between
            # has a later finished_at, by at most the claim's own time
            fanin = conn.execute(
                "SELECT c.job_id, c.status, "
                "c.claimed_at >= max(p.finished_at) - interval '1 s', "
                "bool_and(p.status = 'completed'), "
                "greatest(extract(epoch FROM max(p.finished_at) - c.claimed_at), 0)::float8 "
                "FROM jobq.job c CROSS JOIN LATERAL jsonb_array_elements_text("
                "c.payload->'parents') AS pid(id) JOIN jobq.job p ON p.job_id = pid.id::bigint "
                "WHERE c.kind = 'ha.wf' AND c.payload ? 'parents' "
                "GROUP BY c.job_id, c.status, c.claimed_at").fetchall()
            grace = float(conn.execute("SHOW jobq.misfire_grace").fetchone()[0].rstrip("s"))
            ticks = conn.execute(
                "SELECT extract(epoch FROM run_at)::float8, extract(epoch FROM created_at)::float8, "
                "idempotency_key FROM jobq.job WHERE kind = 'tick' ORDER BY run_at").fetchall()
        db = {r[0]: r for r in rows}
        by_id = {r[1]: r for r in rows}
        log("final primary: port %s; %d jobs in queues ha, lib and db, %d fires" % (
            port, len(rows), len(ticks)))

        # windows in which an acknowledged write may be lost (asynchronous mode):
        # from a few seconds before a failover until the old primary is demoted
        windows = []
        for ev in self.events:
            if ev["kind"].startswith("switchover") or ev.get("new") is None:
                continue
            end = ev.get("t_rejoined") or ev["t"] + 60
            windows.append((ev["t"] - 5, end, c.pg[ev["old"]]))

        def in_window(t, port):
            # port 0: the Node producer, through the leader proxy
            return any(a <= t <= b and (p == port or port == 0) for a, b, p in windows)

        # 1. acknowledged enqueues
        lost = [(k, v) for k, v in acks.items() if k not in db or db[k][1] != v[0]]
        for ev in self.events:
            a, b = ev["t"] - 5, ev.get("t_rejoined") or ev["t"] + 60
            ev["lost_acks"] = sum(1 for k, v in lost if a <= v[3] <= b)
        unexplained = [(k, v) for k, v in lost if not in_window(v[3], v[2])]
        self.figures.append(("acknowledged enqueues", len(acks)))
        self.figures.append(("acknowledged only after a retry (ambiguous or failed first try)",
                             tries_total))
        self.figures.append(("acknowledged with created = false (an earlier try had committed)",
                             sum(1 for v in acks.values() if not v[1])))
        self.figures.append(("acknowledged enqueues lost", len(lost)))
        if sync:
            self.check(not lost and len(acks) > 0,
                       "synchronous mode: all %d acknowledged enqueues exist, 0 lost" % len(acks),
                       lost[:20])
        else:
            self.check(not unexplained and len(acks) > 0,
                       "asynchronous mode: %d of %d acknowledged enqueues lost, every one "
                       "acknowledged by a primary that then failed, within its failover" % (
                           len(lost), len(acks)), unexplained[:20])
        self.check(gaveup == 0, "no producer gave up on an enqueue (%d)" % gaveup)
        for f, n in sorted(produced_by.items()):
            self.figures.append(("acknowledged by %s" % f, n))

        # 2. completions: at most one acknowledged per job, and it is the row's
        per_job = {}
        for j, t, res, p, ts in dones:
            if res in ("true", "ours"):
                per_job.setdefault(j, set()).add((t, p, ts))
        doubles = {j: s for j, s in per_job.items() if len({x[0] for x in s}) > 1}
        mismatch = {j: s for j, s in per_job.items() if len({x[0] for x in s}) == 1 and (
            j not in by_id or by_id[j][2] != "completed" or by_id[j][3] != next(iter(s))[0])}
        refused = sum(1 for d in dones if d[2] == "false")
        ambiguous_ours = sum(1 for d in dones if d[2] == "ours")
        self.figures.append(("claims (SQL workers)", claims))
        self.figures.append(("completions acknowledged (SQL workers)", len(per_job)))
        self.figures.append(("completions refused (stale or lost lease)", refused))
        self.figures.append(("completions whose commit an error hid, found ours", ambiguous_ours))
        self.figures.append(("jobs completed twice under valid leases", len(doubles)))
        if sync:
            self.check(not doubles, "no job completed twice under valid leases", doubles)
            self.check(not mismatch, "every acknowledged completion is the job's row "
                       "(completed, with that lease token)", list(mismatch.items())[:20])
        else:
            bad = {j: s for j, s in doubles.items()
                   if not all(in_window(ts, p) for t, p, ts in s
                              if by_id.get(j) is None or by_id[j][3] != t)}
            self.check(not bad, "%d jobs completed twice, each because its first completion "
                       "was lost in a failover (asynchronous mode)" % len(doubles), bad)
            badm = {j: s for j, s in mismatch.items()
                    if not all(in_window(ts, p) for t, p, ts in s)}
            self.check(not badm, "every acknowledged completion is the job's row, or was lost "
                       "in a failover (%d lost)" % len(mismatch), list(badm.items())[:20])
        self.check(not gaveup and not any(d[2] == "gaveup" for d in dones),
                   "no worker gave up on a completion")

        # 3. the library worker
        runs = [r for r in lib if r[0] == "run"]
        evc = {}
        for r in lib:
            if r[0] == "event" and r[1] == "completed":
                evc[int(r[2])] = evc.get(int(r[2]), 0) + 1
        twice = {j: n for j, n in evc.items() if n > 1}
        self.figures.append(("Python library: jobs", sum(1 for r in rows if r[7] == "ha.lib")))
        self.figures.append(("Python library worker: handler runs", len(runs)))
        self.figures.append(("Python library worker: completions reported", len(evc)))
        self.figures.append(("Python library worker: jobs run more than once",
                             len(runs) - len({r[1] for r in runs})))
        self.figures.append(("Python library worker: reports given up (error events: the "
                             "job waits for its lease)",
                             sum(1 for r in lib if r[0] == "event" and r[1] == "error")))
        self.check(len(evc) > 0 and (not sync or not twice),
                   "the Python library's worker completed %d jobs, none reported completed "
                   "twice%s" % (len(evc), "" if sync else " (%d in asynchronous mode)" %
                                len(twice)), twice)

        # 3a. the Node library, through the leader proxy
        nodework = os.path.join(ldir, "nodework")
        nruns = [r for r in read_ledger(nodework) if r[0] == "run"] if os.path.exists(nodework) else []
        njobs = [r for r in rows if r[7] == "ha.node"]
        self.figures.append(("Node library: jobs, handler runs, jobs run more than once",
                             "%d, %d, %d" % (len(njobs), len(nruns),
                                             len(nruns) - len({r[1] for r in nruns}))))
        if self.a.node_app:
            self.check(len(njobs) > 0 and len(nruns) > 0,
                       "the Node library's producer and worker ran through the leader proxy "
                       "(%d jobs, %d handler runs)" % (len(njobs), len(nruns)))

        # 3b. jobs run inside the database: one effect each, committed with
        # the completion; workflows: a child runs after both its parents
        once = [e for e in effects if e[1] == "completed" and e[2] == 1 and e[3] == 1]
        self.figures.append(("in-database jobs (handler ha_run)", len(effects)))
        self.figures.append(("in-database jobs whose executor died with its server (their "
                             "lease, 5 min, ended by the new primary's first round)", stranded))
        self.check(len(effects) > 0 and len(once) == len(effects) and orphans == 0,
                   "every in-database job completed with exactly one effect row, of its "
                   "completing lease (%d jobs, %d orphan effects)" % (len(effects), orphans),
                   [e for e in effects if e not in once][:10])
        good = [f for f in fanin if f[1] == "completed" and f[2] and f[3]]
        self.figures.append(("workflow fan-ins (two parents, one child)", len(fanin)))
        self.figures.append(("fan-in children whose claimed_at is before a parent's finished_at "
                             "(the claim's clock read before its look), the most by",
                             "%d, %.3f s" % (sum(1 for f in fanin if f[4] > 0),
                                             max([f[4] for f in fanin] or [0]))))
        self.check(len(fanin) > 0 and len(good) == len(fanin),
                   "every fan-in child completed, claimed after both its parents completed "
                   "(within 1 s: claimed_at is read when the claim starts) "
                   "(%d workflows)" % len(fanin), [f for f in fanin if f not in good][:10])

        # 4. every job ends by its rules
        status = {}
        for r in rows:
            status[r[2]] = status.get(r[2], 0) + 1
        badend = [r for r in rows if not (r[2] == "completed" or (
            r[2] == "failed" and r[4] >= r[5]))]
        self.figures.append(("jobs by status", json.dumps(status, sort_keys=True)))
        self.check(not badend, "every job ended completed, or failed with its retries spent "
                   "(%s)" % json.dumps(status, sort_keys=True), badend[:10])
        dup_keys = len(rows) - len({r[0] for r in rows})
        self.check(dup_keys == 0, "no idempotency key has two jobs")

        # 5. schedule fires
        runs_at = [t[0] for t in ticks]
        dup_fire = len(runs_at) - len(set(runs_at))
        dup_key = len(ticks) - len({t[2] for t in ticks})
        self.figures.append(("schedule fires", len(ticks)))
        self.figures.append(("schedule fire times fired twice", dup_fire))
        self.check(len(ticks) > 0 and dup_fire == 0 and dup_key == 0,
                   "no fire time fired twice (%d fires)" % len(ticks))
        # run_once: times processed more than jobq.misfire_grace late are
        # missed, and one job fires for the latest of them.  So after a gap
        # (a, b), the last time skipped (b - 2) was more than the grace late
        # when b was fired (in the same round).
        created = {t[0]: t[1] for t in ticks}
        gaps = [(a, b) for a, b in zip(runs_at, runs_at[1:]) if b - a > 2.01]
        badgaps = [(a, b, created[b] - (b - 2)) for a, b in gaps
                   if created[b] - (b - 2) < grace - 0.01]
        outages = [(ev["t"] - 3, (ev.get("t_worker") or ev["t"] + 60) + 8) for ev in self.events]
        quiet = [(a, b) for a, b in gaps if not any(a < o2 and b > o1 for o1, o2 in outages)]
        self.figures.append(("gaps between fires (missed times, run_once), of them outside "
                             "an event", "%d, %d" % (len(gaps), len(quiet))))
        self.check(not badgaps, "no fire time missed beyond the misfire policy (run_once, "
                   "grace %g s: %d gaps, %d of them outside an event)" % (
                       grace, len(gaps), len(quiet)),
                   [(time.strftime("%H:%M:%S", time.gmtime(a)),
                     time.strftime("%H:%M:%S", time.gmtime(b)), "%.1f s" % late)
                    for a, b, late in badgaps])

        # 6. jobq processes on standbys
        samples = self.sampler.samples
        on_standby = [s for s in samples if s[2] and s[3] > 0]
        deposed = [s for s in samples if not s[2] and s[3] > 0 and s[4] and s[4] != s[1]]
        self.figures.append(("node samples", len(samples)))
        self.check(len(samples) > 0 and not on_standby,
                   "no jobq process on a node in recovery (%d samples)" % len(samples),
                   on_standby[:10])
        if deposed:
            log("a deposed primary (not Patroni's leader, not yet in recovery) ran jobq "
                "processes in %d samples: %s" % (len(deposed), sorted({s[1] for s in deposed})))
        self.figures.append(("samples of a deposed, not yet demoted primary running jobq",
                             len(deposed)))

    def report_figures(self):
        print("# ---- figures (%s mode) ----" % self.a.mode)
        for name, v in self.figures:
            print("#   %-70s %s" % (name, v))
        kinds = {}
        for ev in self.events:
            kinds[ev["kind"]] = kinds.get(ev["kind"], 0) + 1
        print("#   events: %s" % json.dumps(kinds, sort_keys=True))
        for ev in self.events:
            def d(k):
                return "%5.1f" % (ev[k] - ev["t"]) if ev.get(k) else "  -  "
            print("#   event %2d %-14s %s -> %s: leader %s s, writable %s s, jobq worker %s s, "
                  "first fire %s s, first claim %s s, first ack %s s, old rejoined %s s%s" % (
                      ev["i"], ev["kind"], ev["old"], ev.get("new"), d("t_leader"),
                      d("t_promoted"), d("t_worker"), d("t_tick"), d("t_claim"), d("t_ack"),
                      d("t_rejoined"), ", expired lease reaped %s s" % d("t_reaped")
                      if "reap" in ev else "") + "; acknowledged enqueues lost: %s" %
                  ev.get("lost_acks", "-"))
        for kind in ("switchover", "kill", "stop"):
            xs = [ev["t_claim"] - ev["t"] for ev in self.events
                  if ev["kind"].split("+")[0] == kind and ev.get("t_claim")]
            ws = [ev["t_worker"] - ev["t_promoted"] for ev in self.events
                  if ev["kind"].split("+")[0] == kind and ev.get("t_worker") and
                  ev.get("t_promoted")]
            if xs:
                print("#   %-10s event to first claim on the new primary: median %.1f s, max "
                      "%.1f s (n=%d); promotion to jobq worker: median %.1f s, max %.1f s" % (
                          kind, median(xs), max(xs), len(xs), median(ws),
                          max(ws) if ws else float("nan")))
        xs = [ev["t_claim"] - ev["t"] for ev in self.events
              if not ev["kind"].startswith("switchover") and ev.get("t_claim")]
        if xs:
            print("#   failovers (kill and stop): kill to first claim median %.1f s, max %.1f s"
                  % (median(xs), max(xs)))
        with self.load.err_lock:
            errs = sorted(self.load.errors.items())
        print("#   client errors (reconnected): %s" % (
            ", ".join("%s %d" % kv for kv in errs) or "none"))
        print("#   statements cut by the client deadline (frozen server): %d" % WATCHDOG.cuts)
        print("#   connections cut by the leader proxy at a change of leader: %d" % self.proxy.cuts)

    def main(self):
        ok = False
        try:
            WATCHDOG.start()
            self.setup()
            self.load = Load(self)
            self.load.start()
            log("load running; warming up %d s" % self.a.warmup)
            time.sleep(self.a.warmup)
            self.run_events()
            time.sleep(self.a.settle)
            self.drain()
            self.final_checks()
            self.report_figures()
            ok = True
        except (Exception, KeyboardInterrupt) as e:
            import traceback
            traceback.print_exc()
            self.check(False, "the harness ran to its end: %s: %s" % (type(e).__name__, e))
        finally:
            if self.load:
                self.load.stop_producers.set()
                self.load.stop_workers.set()
                for p in (self.load.libworker, self.load.node):
                    if p and p.poll() is None:
                        p.kill()
            if getattr(self, "proxy", None):
                self.proxy.stop.set()
            if self.sampler:
                self.sampler.stop.set()
            log("stopping the cluster and etcd")
            self.cluster.stop_all()
        print("%d passed, %d failed" % (self.n - self.failed, self.failed), flush=True)
        return 0 if ok and self.failed == 0 else 1


def default_dcs():
    """etcd's v3 API with a Patroni that has the fix of its leader key race
    (3.0.3, patroni PR 2689: Debian 13 ships 4.0), else the v2 API, whose
    update is a compare-and-swap (Debian 12 ships 3.0.2)."""
    out = subprocess.run(["patroni", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    if m and tuple(int(x) for x in m.groups()) >= (3, 0, 3):
        return "etcd3"
    return "etcd"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True, help="scratch directory (data, logs, ledgers)")
    ap.add_argument("--bin", help="PostgreSQL bin directory with jobq installed beside it")
    ap.add_argument("--mode", choices=("sync", "async"), default="sync")
    ap.add_argument("--port-base", type=int, default=26100)
    ap.add_argument("--switchovers", type=int, default=1)
    ap.add_argument("--kills", type=int, default=1)
    ap.add_argument("--stops", type=int, default=1)
    ap.add_argument("--probe-kills", type=int, default=1,
                    help="how many of the kills hold the WAL senders first (the probe)")
    ap.add_argument("--ttl", type=int, default=10, help="Patroni's leader key ttl")
    ap.add_argument("--dcs", choices=("auto", "etcd", "etcd3"), default="auto",
                    help="Patroni's etcd API: etcd (v2) or etcd3 (see Cluster.config); "
                    "auto: etcd3 from Patroni 3.0.3 on, else etcd")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--settle", type=int, default=4)
    ap.add_argument("--drain-timeout", type=int, default=120)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--sql-producers", type=int, default=3)
    ap.add_argument("--produce-sleep", type=float, default=0.04)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--node-app", help="a directory whose node_modules has jobq and pg: "
                    "run the Node library's producer and worker too")
    ap.add_argument("--libworker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--conninfo", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dcs == "auto":
        args.dcs = default_dcs()
    if args.libworker:
        libworker_main(args)
        return 0
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "driver.pid"), "w") as f:
        f.write("%d\n" % os.getpid())

    # SIGTERM (run.sh interrupted): end like Ctrl-C, through main()'s finally,
    # which stops the cluster
    def on_term(signum, frame):
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, on_term)
    return Harness(args).main()


if __name__ == "__main__":
    sys.exit(main())
