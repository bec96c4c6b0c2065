"""Real servers for the deployment tests, on loopback only, always stopped.

- ``postgres_server()``: a throw-away PostgreSQL server from Debian's packages
  (``postgresql``; ``course.py test`` installs it when run as root), its data in
  a temporary folder, listening on 127.0.0.1 at a free port.
- ``chp_command()``: JupyterHub's proxy, configurable-http-proxy, installed from
  the npm registry into ``.cache/chp`` of this checkout the first time.
- system users for the hub test (``add_user`` / ``remove_user``).

Each helper says why it cannot run (``Unavailable``) so the tests skip with
that reason instead of failing on a machine without the pieces.
"""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHP_VERSION = "5.3.0"   # configurable-http-proxy, from the npm registry
SECRET = "gradebook-password-that-must-not-leak"


class Unavailable(Exception):
    """A piece the test needs is missing here; the message says which."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def closed_folders(*paths) -> list[str]:
    """The folders on the way to ``paths`` (themselves included when they are
    folders) that other users cannot enter (no execute bit for others: a
    ``mktemp -d`` folder or /root, 0700). A server spawned as another user
    cannot start a program below such a folder."""
    closed = []
    for path in paths:
        p = Path(os.path.realpath(path))
        for folder in [p, *p.parents] if p.is_dir() else list(p.parents):
            if not os.stat(folder).st_mode & 0o001 and str(folder) not in closed:
                closed.append(str(folder))
    return sorted(closed)


def shared_tmpdir(prefix: str) -> Path:
    """A temporary folder other local users can walk through (pytest's own
    tmp folders are private to root, 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(path, 0o755)
    return path


# ------------------------------------------------------------------ PostgreSQL

def postgres_bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).parent
    raise Unavailable("the PostgreSQL server is not installed (Debian: apt-get install postgresql; "
                      "`python3 course.py test` does it when run as root)")


@contextlib.contextmanager
def postgres_server(timeout: float = 60):
    """Yield a function ``new_database(name) -> SQLAlchemy URL`` on a fresh
    PostgreSQL server on 127.0.0.1; stop the server and remove its data after."""
    bindir = postgres_bindir()
    # PostgreSQL refuses to run as root: as root, run it as the Debian package's own user
    run_as: list[str] = []
    owner = None
    if is_root():
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise Unavailable("running as root and there is no 'postgres' user to run the server as") from None
        run_as = ["runuser", "-u", "postgres", "--"]
    base = shared_tmpdir("course-pg-")
    data, sock, log = base / "data", base / "sock", base / "server.log"
    sock.mkdir()
    if owner:
        os.chown(base, owner.pw_uid, owner.pw_gid)
        os.chown(sock, owner.pw_uid, owner.pw_gid)
    port = free_port()
    user = "course"
    started = False
    try:
        r = subprocess.run(run_as + [str(bindir / "initdb"), "-D", str(data), "-U", user, "-A", "trust",
                                     "--no-sync", "-E", "UTF8", "--locale=C"],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise Unavailable(f"initdb failed: {r.stderr.strip()[-500:]}")
        opts = (f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off "
                f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        r = subprocess.run(run_as + [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", opts,
                                     "-w", "-t", str(int(timeout)), "start"],
                           capture_output=True, text=True, timeout=timeout + 10)
        if r.returncode != 0:
            text = log.read_text(errors="replace") if log.exists() else ""
            raise Unavailable(f"the PostgreSQL server did not start: {r.stderr.strip()[-300:]} {text[-500:]}")
        started = True

        def new_database(name: str) -> str:
            subprocess.run([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, name],
                           check=True, capture_output=True, timeout=30)
            # trust authentication ignores the password; it is there to be looked for where it must not be
            return f"postgresql://{user}:{SECRET}@127.0.0.1:{port}/{name}"

        yield new_database
    finally:
        if started:
            subprocess.run(run_as + [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "-t", "30",
                                     "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ JupyterHub's proxy

def chp_command(timeout: float = 240) -> str:
    """The configurable-http-proxy program, installed from the npm registry into
    .cache/chp the first time (pinned: CHP_VERSION)."""
    prefix = ROOT / ".cache" / "chp"
    program = prefix / "node_modules" / ".bin" / "configurable-http-proxy"
    if program.exists():
        return str(program)
    npm, node = shutil.which("npm"), shutil.which("node")
    if not (npm and node):
        raise Unavailable("Node.js and npm are needed for JupyterHub's proxy (configurable-http-proxy)")
    prefix.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
                        f"configurable-http-proxy@{CHP_VERSION}"], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0 or not program.exists():
        raise Unavailable(f"npm could not install configurable-http-proxy: {r.stderr.strip()[-500:]}")
    return str(program)


# ------------------------------------------------------------------ system users

def add_user(name: str, home: Path) -> pwd.struct_passwd:
    """A local account with its home under ``home`` (0700: nobody else reads it)."""
    subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash",
                    "--user-group", name], check=True, capture_output=True, timeout=30)
    os.chmod(home, 0o700)
    return pwd.getpwnam(name)


def remove_user(name: str) -> None:
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True, timeout=30)  # processes of this test user only
    for _ in range(20):
        r = subprocess.run(["userdel", "--remove", name], capture_output=True, text=True, timeout=30)
        if r.returncode in (0, 6):   # 6: no such user
            return
        time.sleep(0.5)


# ------------------------------------------------------------------ a Dask cluster

def exit_code(proc: subprocess.Popen, timeout: float = 300):
    """``proc``'s exit code, or "timeout" once its whole process group has been killed
    for running past ``timeout`` seconds (a test that waits on a grader never hangs)."""
    import signal
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return "timeout"


@contextlib.contextmanager
def dask_cluster(workers: int = 2, threads: int = 1, timeout: float = 90, base: Path | None = None,
                 plain: bool = False, worker_env: dict | None = None, wrap=None):
    """A Dask scheduler and ``workers`` workers, each its own process (``dask
    scheduler``, ``dask worker --no-nanny``, from the course's environment), on
    127.0.0.1 at free ports. Yields ``(address, {name: Popen})``; everything is
    stopped at the end. Workers run with DASK_DISTRIBUTED__WORKER__DAEMON=False,
    as docs/deploy.md says (a grading job starts processes of its own).
    ``plain``: the workers started as Dask's own documentation starts them
    (``dask worker tcp://…``: under a nanny, daemonic). ``worker_env``: worker
    name -> what its environment changes (a value None removes the variable).
    ``wrap``: (worker name, its command) -> the command that starts it (another
    namespace, another copy of the course)."""
    import sys
    bindir = Path(sys.executable).parent
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = Path(base or shared_tmpdir("course-dask-"))
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False",
               PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, args: list[str]) -> None:
        out = open(logs / f"{name}.log", "w")
        own = dict(env)
        if plain:
            own.pop("DASK_DISTRIBUTED__WORKER__DAEMON", None)
        for k, v in ((worker_env or {}).get(name) or {}).items():
            if v is None:
                own.pop(k, None)
            else:
                own[k] = v
        procs[name] = subprocess.Popen(args, env=own, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
    try:
        start("scheduler", [str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                            "--dashboard-address", "127.0.0.1:0", "--no-show"])
        for i in range(workers):
            cmd = [str(bindir / "dask"), "worker", address, "--name", f"worker{i + 1}",
                   "--nthreads", str(threads), *([] if plain else ["--no-nanny"]),
                   "--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
            start(f"worker{i + 1}", wrap(f"worker{i + 1}", cmd) if wrap else cmd)
        from distributed import Client
        with Client(address, timeout=timeout) as client:
            client.wait_for_workers(workers, timeout=timeout)
        yield address, procs
    finally:
        for proc in reversed(list(procs.values())):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 15)
        for proc in procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait()
        if base is None:
            shutil.rmtree(logs, ignore_errors=True)
