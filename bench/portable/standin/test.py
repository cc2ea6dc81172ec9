#!/usr/bin/python3
"""The docker stand-in's own test: what the harness calls, against a real
server of this machine, without the harness.

    python3 bench/portable/standin/test.py PG_BIN

Run as root (the stand-in runs the server as the postgres user, by runuser
or by chroot --userspec, as bench/portable/run does): compose up with a
compose file shaped like the harness's (its port, user, password, init
script and config file are taken), exec of pg_isready, a wrong image name
refused, stop and start keeping the data, down and up starting afresh;
then the same server run "in another root" (STANDIN_SERVER_ROOT=/, the path
`run --pg 15` takes); then `docker run` of an image's native command with
exactly the -e environment and a -v path rewritten.  The scripts/test suite
`bench` runs it for every PostgreSQL version.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCKER = HERE / "docker"
passed = failed = 0


def check(what: str, ok: bool, detail: str = "") -> None:
    global passed, failed
    if ok:
        passed += 1
        print(f"ok - {what}")
    else:
        failed += 1
        print(f"not ok - {what}" + (f": {detail}" if detail else ""))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    pg_bin = Path(sys.argv[1])
    if os.geteuid() != 0:
        print("test.py: run as root (the stand-in starts the server as the postgres user)",
              file=sys.stderr)
        return 2
    version = subprocess.run([str(pg_bin / "postgres"), "--version"], capture_output=True,
                             text=True, check=True).stdout.split()[2]
    work = Path(tempfile.mkdtemp(prefix="jobq-standin-", dir="/var/tmp"))
    work.chmod(0o755)
    port = free_port()
    (work / "init.sql").write_text("CREATE TABLE made_by_init (x int); INSERT INTO made_by_init VALUES (42);\n")
    (work / "postgres.conf").write_text("listen_addresses = 'localhost'\nmax_connections = 37\n"
                                        "shared_buffers = 16MB\n")
    (work / "docker-compose.yml").write_text(f"""services:
  postgres:
    image: ${{POSTGRES_IMAGE:-postgres:18.3-alpine}}
    environment:
      POSTGRES_PASSWORD: bench
      POSTGRES_USER: bench
    ports:
      - "{port}:5432"
    volumes:
      - ./init.sql:/docker-entrypoint-initdb.d/01-init.sql
      - ./postgres.conf:/etc/postgresql/postgresql.conf:ro
    command:
      - "postgres"
      - "-c"
      - "config_file=/etc/postgresql/postgresql.conf"
""")
    base_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
                "STANDIN_STATE": str(work / "state"), "STANDIN_PG_BIN": str(pg_bin),
                "STANDIN_IMAGES": str(work / "images.tsv"),
                "POSTGRES_IMAGE": f"debian-test/postgresql-{version}"}

    def docker(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(DOCKER), *args], cwd=work,
                              env=env or base_env, capture_output=True, text=True, **kw)

    def sql(query: str) -> str:
        r = subprocess.run([str(pg_bin / "psql"), "-XAtq", "-h", "127.0.0.1", "-p", str(port),
                            "-U", "bench", "-d", "bench", "-c", query],
                           env={**base_env, "PGPASSWORD": "bench", "PGCONNECT_TIMEOUT": "5"},
                           capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else "error: " + r.stderr.strip()

    def ready(env: dict[str, str] | None = None) -> bool:
        return docker("compose", "exec", "-T", "postgres", "pg_isready", "-U", "bench",
                      env=env).returncode == 0

    try:
        r = docker("--version")
        check("docker --version says it is the stand-in, with the server's version",
              r.returncode == 0 and "stand-in" in r.stdout and version in r.stdout, r.stdout + r.stderr)

        bad = docker("compose", "up", "-d", "--wait",
                     env={**base_env, "POSTGRES_IMAGE": "postgres:18.3-alpine"})
        check("compose up refuses an image that is not this server",
              bad.returncode != 0 and "POSTGRES_IMAGE" in bad.stderr, bad.stderr)
        wrong = docker("compose", "up", "-d", "--wait",
                       env={**base_env, "POSTGRES_IMAGE": "debian-test/postgresql-9.6"})
        check("compose up refuses an image of another version",
              wrong.returncode != 0 and "server here is" in wrong.stderr, wrong.stderr)

        r = docker("compose", "up", "-d", "--wait")
        check("compose up starts a cluster", r.returncode == 0, r.stderr)
        check("compose exec pg_isready: ready", ready())
        check("the compose file's password, user, database and port (TCP, scram)",
              sql("SELECT current_user || '@' || current_database()") == "bench@bench")
        check("the init script ran in POSTGRES_DB", sql("SELECT x FROM made_by_init") == "42")
        check("the mounted config file is the server's", sql("SHOW max_connections") == "37")
        sql("CREATE TABLE kept (y int)")

        r = docker("compose", "stop", "postgres")
        check("compose stop", r.returncode == 0 and not ready(), r.stderr)
        r = docker("compose", "start", "postgres")
        check("compose start: the same data", r.returncode == 0 and ready()
              and sql("SELECT count(*) FROM kept") == "0", r.stderr)
        ps = docker("compose", "ps")
        check("compose ps shows it running", "running" in ps.stdout, ps.stdout)

        r = docker("compose", "down", "-v")
        check("compose down removes the data", r.returncode == 0
              and not (work / "state" / "pgdata").exists(), r.stderr)
        r = docker("compose", "up", "-d", "--wait")
        check("compose up after down starts from a fresh initdb", r.returncode == 0
              and sql("SELECT to_regclass('kept') IS NULL") == "t"
              and sql("SELECT x FROM made_by_init") == "42", r.stderr)
        docker("compose", "down", "-v")

        # The server in "another root": chroot --userspec into /, its bin
        # directory given as a path in that root.
        other = {**base_env, "STANDIN_SERVER_ROOT": "/", "STANDIN_SERVER_BIN": str(pg_bin)}
        r = docker("compose", "up", "-d", "--wait", env=other)
        check("STANDIN_SERVER_ROOT: compose up runs the server in that root", r.returncode == 0
              and ready(other) and sql("SELECT x FROM made_by_init") == "42", r.stderr)
        owner = subprocess.run(["stat", "-c", "%U", str(work / "state" / "pgdata")],
                               capture_output=True, text=True).stdout.strip()
        check("STANDIN_SERVER_ROOT: the data belongs to that root's postgres user",
              owner == "postgres", owner)
        r = docker("compose", "stop", "postgres", env=other)
        r2 = docker("compose", "start", "postgres", env=other)
        check("STANDIN_SERVER_ROOT: stop and start", r.returncode == 0 and r2.returncode == 0
              and ready(other), r.stderr + r2.stderr)
        docker("compose", "down", "-v", env=other)
        check("STANDIN_SERVER_ROOT: compose down stops it", not ready(other))

        # docker run: the image's native command, exactly the -e environment
        # (plus the image's own), a path under a mounted container path
        # rewritten to the host's.
        probe = work / "probe"
        probe.mkdir()
        (probe / "p.py").write_text("import os, json, sys\n"
                                    "print(json.dumps([os.getcwd(), dict(os.environ), sys.argv[1:]]))\n")
        (work / "images.tsv").write_text(f"probe-bench\t{probe}\tpython3 p.py\tIMAGE_ENV=yes\n")
        r = docker("run", "--rm", "-i", "--network", "host", "-v", f"{work}/ctl:/ctl",
                   "-e", "A=1", "-e", "CTL=/ctl/rate", "probe-bench", "extra")
        try:
            cwd, env, extra = json.loads(r.stdout)
        except ValueError:
            cwd, env, extra = None, {}, None
        check("docker run: the native command in the image's directory", cwd == str(probe),
              r.stdout + r.stderr)
        check("docker run: -e and the image's environment, nothing of the caller's",
              env.get("A") == "1" and env.get("IMAGE_ENV") == "yes"
              and "STANDIN_STATE" not in env and "POSTGRES_IMAGE" not in env, str(env))
        check("docker run: a value under a -v container path names the host path",
              env.get("CTL") == f"{work}/ctl/rate", env.get("CTL", ""))
        check("docker run: arguments after the image are passed", extra == ["extra"], str(extra))
        r = docker("run", "--rm", "nosuch-bench")
        check("docker run: an image without a native command is refused",
              r.returncode != 0 and "no native command" in r.stderr, r.stderr)
        r = docker("pull", "postgres")
        check("anything not mapped fails loudly", r.returncode != 0 and "not mapped" in r.stderr,
              r.stderr)
    finally:
        for env in (base_env, {**base_env, "STANDIN_SERVER_ROOT": "/", "STANDIN_SERVER_BIN": str(pg_bin)}):
            if (work / "state" / "pgdata").exists():
                docker("compose", "down", "-v", env=env)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
