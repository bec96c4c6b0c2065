"""Run nbgrader commands for the grading pipeline, and write files safely.

nbgrader itself takes ~2 s to import; a fork server imports it once and forks
a fresh process for each nbgrader command (a private state for each notebook,
and a process group that can be killed as a whole).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

from grading import protocol

from .forked import forked_main

_NB_PRELOAD = ["nbgrader.apps.nbgraderapp", "nbgrader.apps.autogradeapp", "nbgrader.apps.generatefeedbackapp",
               "nbgrader.apps.generateassignmentapp", "nbgrader.apps.exportapp", "nbgrader.converters",
               "nbgrader.api", "nbgrader.preprocessors", "nbconvert", "nbclient", "jupyter_client",
               "coursekit.base.batch", "coursekit.base.warm", "helpers.lab.shell_poll"]
_CTX = None
_SERVER: str | None = None   # a kept fork server's socket (coursekit.base.forkd): commands go there first


def preloaded() -> list[str]:
    """What the fork server imports before its first command."""
    return list(_NB_PRELOAD)


def use_server(path: str | None) -> None:
    """Fork commands from the kept fork server at ``path`` (None: this process's own again)."""
    global _SERVER
    _SERVER = path


def using_server() -> bool:
    return _SERVER is not None


def preload(module: str) -> None:
    """Have the fork server import ``module`` when it starts, as it does nbgrader:
    a room that runs forked commands of its own names their module here (at its
    import, before any command), and each of them starts with it imported."""
    if module not in _NB_PRELOAD:
        _NB_PRELOAD.append(module)


def _context():
    global _CTX
    if _CTX is None:
        import multiprocessing as mp
        _allow_children()
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(_NB_PRELOAD)
    return _CTX


def _allow_children() -> None:
    """Let this process start the fork server even when it is a daemonic
    multiprocessing process: a Dask worker started as Dask's documentation starts
    one (``dask worker tcp://…``, under a nanny, ``distributed.worker.daemon``
    true) is one, and multiprocessing refuses it children ("daemonic processes
    are not allowed to have children"), which failed every grading job there.

    The rule is there so that a daemonic process, ended abruptly, leaves no
    orphans. Ours leave none: the fork server exits when this process's end of
    its pipe closes (this process gone, however it went), every command forked
    from it is killed when the fork server goes (coursekit.base.forked), and a
    kernel with the command that started it (bubblewrap's ``--die-with-parent``,
    the factory's connection). So the flag is lifted for this process only; its
    parent (the nanny) still treats it as daemonic and ends it with itself."""
    import multiprocessing as mp
    me = mp.current_process()
    if me._config.get("daemon"):
        me._config["daemon"] = False


# Packages whose ``__init__`` imports their own submodules while other packages import one
# of those submodules directly (nbclient: ``from jupyter_client.client import ...``). When
# one thread imports such a package and another, at the same moment, one of its submodules,
# Python 3.11's per-module import locks may give one of them a module still being made
# ("cannot import name 'AsyncKernelManager' from partially initialized module
# 'jupyter_client.manager'": a Dask worker died of it, importing a probe's code while its
# own thread imported nbgrader). So they are imported whole, in the calling thread, before
# any thread of the course's imports something aside (``aside``).
SHARED_ROOTS = ("jupyter_client",)


def import_shared_roots() -> None:
    import importlib
    for name in SHARED_ROOTS:
        importlib.import_module(name)


def aside(fn, *args, name: str) -> threading.Thread:
    """``fn(*args)`` in a daemon thread called ``name``, started once this thread has
    imported ``SHARED_ROOTS``: how the course starts work that imports while it goes on."""
    import_shared_roots()
    thread = threading.Thread(target=fn, args=args, name=name, daemon=True)
    thread.start()
    return thread


def warm_up() -> None:
    """Start the fork server now (it imports nbgrader), so that the first
    command does not wait for it; then import nbgrader's gradebook here too
    (the grader reads it after autograde: a second's import, done while the
    kernel factory starts)."""
    proc = _context().Process(target=_noop)
    proc.start()
    proc.join()
    import nbgrader.api  # noqa: F401


def _noop() -> None:
    pass


def nbgrader_command(args: list[str]) -> None:
    """``nbgrader ARGS`` in this process."""
    from nbgrader.apps.nbgraderapp import NbGraderApp

    from helpers.lab import shell_poll
    shell_poll.install()           # a reply is never missed for a cell's whole time limit
    sys.argv = ["nbgrader", *args]
    NbGraderApp.launch_instance(argv=args)


def without_grader_secrets(env: dict) -> dict:
    """An environment for code that runs student code: no gradebook address (it may hold a password)."""
    return {k: v for k, v in env.items() if k != protocol.DB_URL_ENV}


def run_nbgrader(args: list[str], root: Path, env: dict, log: Path, timeout: float | None = None) -> int | None:
    """Run one nbgrader command in a process forked from the warm fork server;
    returns its exit code, or None when it ran past ``timeout`` (then its whole
    process group, kernel launcher included, is killed)."""
    return run_forked("coursekit.base.runner:nbgrader_command", args, root, env, log, timeout)


def run_forked(target: str, payload, root: Path, env: dict, log: Path, timeout: float | None = None) -> int | None:
    """``target(payload)`` ("module:function") in a process forked from the warm
    fork server, in ``root`` with ``env``, its output in ``log``; as run_nbgrader."""
    proc = start_forked(target, payload, root, env, log)
    proc.join(timeout)
    if proc.is_alive():
        stop_forked(proc)
        return None
    return proc.exitcode


def start_forked(target: str, payload, root: Path, env: dict, log: Path):
    """``run_forked`` without waiting: the started process (``stop_forked`` ends it early).
    Forked by the kept fork server when one is in use and answers, else by this process's own."""
    if _SERVER is not None:
        from . import forkd
        command = forkd.start_command(_SERVER, target, payload, str(root), env, str(log))
        if command is not None:
            return command
    proc = _context().Process(target=forked_main, args=(target, payload, str(root), env, str(log), os.getpid()),
                              daemon=False)
    proc.start()
    return proc


def lowest_priority() -> None:
    """This process runs only when no other process of the machine wants the core
    (work done aside while kernels are grading: it never takes a core from them).
    The weight of its session (Linux's autogroup) is lowered only when the process leads
    that session, as a forked command does: lowered from inside the grader's own session,
    it would slow the grader and its kernels with it, and whatever else that session runs."""
    os.nice(19)
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    if os.getsid(0) != os.getpid():
        return   # in a session of others' (the grader's, its caller's): their weight is not this process's to lower
    set_session_weight("self", 19)   # the scheduler weighs sessions, not processes, where it groups them


def set_session_weight(pid, nice: int) -> bool:
    """Write the nice value of the session (Linux's autogroup) that process ``pid`` ("self"
    for this one) belongs to; whether it was written. A kernel without autogroups, or a
    session the kernel put in no group of its own, has nothing to write. Linux takes such a
    write from an unprivileged process at most once every 100 ms, machine-wide (EAGAIN):
    it is tried again a few times rather than left at the weight it had."""
    import errno
    import time
    path = f"/proc/{pid}/autogroup"
    for _ in range(5):
        try:
            with open(path, "w") as group:
                group.write(str(nice))
            return True
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                return False
            time.sleep(0.11)
    return False


def stop_forked(proc) -> None:
    """Kill a forked command and everything it started (its process group)."""
    for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), lambda: os.kill(proc.pid, signal.SIGKILL)):
        try:
            kill()
        except OSError:
            pass
    proc.join()


_HELD = threading.local()   # the locks this thread holds: a holder may take its lock again


@contextlib.contextmanager
def one_at_a_time(state: Path):
    """Hold the course folder's grading lock (graders in the same folder take
    turns). A thread that holds it already (the grading service, around a whole
    submission) takes it again at once."""
    import fcntl

    key = os.path.realpath(state)
    held = getattr(_HELD, "paths", None)
    if held is None:
        held = _HELD.paths = {}
    if held.get(key):
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    with open(state / "gradebook.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held[key] = 1
        try:
            yield
        finally:
            held[key] = 0


def write_atomically(path: Path, write) -> None:
    """Write ``path`` through a temporary file in its folder, then rename it into
    place, so that a concurrent grader never leaves a half-written or mixed file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
