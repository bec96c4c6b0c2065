"""A fork server that outlives the command that started it, for the next one.

The grader's fork server (coursekit.base.runner) imports nbgrader once per run: one to
two seconds that a run with little to grade waits for before its first command. This
one is started detached, imports the same modules, and serves forked commands over a
Unix socket to the next runs (coursekit.grade.kept decides where and for which runs);
a command forked here is what runner's own fork server would fork (coursekit.base.forked:
its own session, its log, the grader's environment, killed with the grader that asked
for it). It ends once it has served no command for ``idle`` seconds.

Protocol, one connection per command (a length-prefixed pickle each way; the socket is
its user's alone, in a folder only that user enters):

    grader -> server   (target, payload, root, env, log, grader_pid)   or  "ping"
    server -> grader   {"pid": N}       the command runs
    server -> grader   {"exit": code}   it ended (the connection closing early ends it)
    server -> grader   {"running": N, "idle": S}   (to a ping) its commands now, the seconds since its last

    python -m coursekit.base.forkd SOCKET IDLE_SECONDS   (sys.path and the modules to
    import come in COURSE_FORKD_PATH and COURSE_FORKD_PRELOAD, JSON lists)
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import signal
import socket
import struct
import sys
import time

from .forked import forked_main

ENV_PATH = "COURSE_FORKD_PATH"
ENV_PRELOAD = "COURSE_FORKD_PRELOAD"


def _send(sock: socket.socket, obj) -> None:
    data = pickle.dumps(obj)
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv(sock: socket.socket):
    head = _exactly(sock, 4)
    return pickle.loads(_exactly(sock, struct.unpack("!I", head)[0]))


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        part = sock.recv(n - len(out))
        if not part:
            raise ConnectionError("the other end closed")
        out += part
    return out


# ------------------------------------------------------------------ the grader's side

class Command:
    """A command forked by the server, as runner's callers use a multiprocessing
    Process: ``pid``, ``join(timeout)``, ``is_alive()``, ``exitcode``."""

    def __init__(self, sock: socket.socket, pid: int):
        self.sock, self.pid, self.exitcode = sock, pid, None

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is not None:
            return
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return
        try:
            self.exitcode = int(_recv(self.sock)["exit"])
        except (ConnectionError, OSError, KeyError, ValueError, pickle.UnpicklingError):
            self.exitcode = 1
        self.sock.close()

    def is_alive(self) -> bool:
        self.join(0)
        return self.exitcode is None


def ping(path: str, timeout: float = 2.0) -> dict | None:
    """The server's answer ({"running", "idle"}), or None when it does not answer."""
    with contextlib.suppress(OSError, ConnectionError, pickle.UnpicklingError, ValueError):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            _send(s, "ping")
            answer = _recv(s)
            return answer if isinstance(answer, dict) else None
    return None


def start_command(path: str, target: str, payload, root: str, env: dict, log: str) -> Command | None:
    """``target(payload)`` forked by the server at ``path``; None when it cannot be reached."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(10)
        s.connect(path)
        _send(s, (target, payload, root, env, log, os.getpid()))
        pid = int(_recv(s)["pid"])
        s.settimeout(None)
        return Command(s, pid)
    except (OSError, ConnectionError, KeyError, ValueError, pickle.UnpicklingError):
        s.close()
        return None


# ------------------------------------------------------------------ the server

def serve(path: str, idle: float) -> None:
    sys.path[:] = json.loads(os.environ.pop(ENV_PATH, "[]")) or sys.path
    import importlib
    for name in json.loads(os.environ.pop(ENV_PRELOAD, "[]")):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    print("forkd: ready", flush=True)
    running: dict[socket.socket, int] = {}     # the grader's connection -> the command's pid
    last = time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([listener, *running], [], [], 0.05 if running else 0.5)
            idle_for = 0.0 if running else time.monotonic() - last
            if running or ready:
                last = time.monotonic()
            elif idle_for > idle:
                print(f"forkd: idle for {idle:.0f} s: ending", flush=True)
                return
            for s in ready:
                if s is listener:
                    _accept(listener, running, idle_for)
                else:                        # the grader went away: its command goes too
                    _end(running.pop(s), s)
            for s, pid in list(running.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    del running[s]
                    with contextlib.suppress(OSError):
                        _send(s, {"exit": os.waitstatus_to_exitcode(status)})
                    s.close()
    finally:
        for s, pid in running.items():
            _end(pid, s)
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def _accept(listener: socket.socket, running: dict, idle_for: float) -> None:
    conn, _ = listener.accept()
    try:
        conn.settimeout(10)
        request = _recv(conn)
        if request == "ping":
            _send(conn, {"running": len(running), "idle": round(idle_for, 1)})
            conn.close()
            return
        target, payload, root, env, log, grader = request
    except (OSError, ConnectionError, ValueError, pickle.UnpicklingError):
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        listener.close()
        conn.close()
        forked_main(target, payload, root, env, log, grader)   # never returns
    conn.settimeout(None)
    running[conn] = pid
    with contextlib.suppress(OSError):
        _send(conn, {"pid": pid})


def _end(pid: int, conn: socket.socket) -> None:
    """Kill the command, then its session: forked an instant ago, it may not have made its
    session yet (os.setsid, its first step), and then a kill of the group alone misses it
    (seen under load: a command that outlived its grader by its whole run)."""
    for kill in (os.kill, os.killpg):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], float(sys.argv[2]))
