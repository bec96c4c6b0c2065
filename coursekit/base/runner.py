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

_NB_PRELOAD = ["nbgrader.apps.nbgraderapp", "nbgrader.apps.autogradeapp", "nbgrader.apps.generatefeedbackapp",
               "nbgrader.apps.generateassignmentapp", "nbgrader.apps.exportapp", "nbgrader.converters",
               "nbgrader.api", "nbgrader.preprocessors", "nbconvert", "nbclient", "jupyter_client",
               "coursekit.base.batch", "coursekit.base.warm", "helpers.lab.shell_poll"]
_CTX = None


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
    from it is killed when the fork server goes (``_die_with_parent``), and a
    kernel with the command that started it (bubblewrap's ``--die-with-parent``,
    the factory's connection). So the flag is lifted for this process only; its
    parent (the nanny) still treats it as daemonic and ends it with itself."""
    import multiprocessing as mp
    me = mp.current_process()
    if me._config.get("daemon"):
        me._config["daemon"] = False


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


def _forked_main(target: str, payload, root: str, env: dict, log_path: str, grader: int | None = None) -> None:
    """A forked command: its own session, output to ``log_path``; ``target``
    ("module:function") is called with ``payload`` and its return is the exit code.
    It ends, with everything it started, when the process that asked for it
    (``grader``: the grader or Dask worker) ends, however that ends."""
    os.setsid()
    _die_with_parent()        # first: the fork server may exit as soon as the pipe below is closed
    _release_fork_server()
    if grader is not None:
        _die_with_grader(grader)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(root)
    os.environ.clear()
    os.environ.update(env)
    code = 0
    try:
        import importlib
        module, name = target.split(":")
        code = getattr(importlib.import_module(module), name)(payload) or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _release_fork_server() -> None:
    """Close this command's copy of the fork server's "alive" pipe. multiprocessing
    hands that pipe's writing end to every process the fork server forks, and the
    fork server waits for all of them to close it before it exits: so a grader
    (or Dask worker) killed mid-notebook left its fork server, and with it the
    nbgrader command, running; seen as a killed worker's nbgrader that went on
    for seconds and removed the autograded notebook another worker had just
    written for the same student (who was then scored as empty). With the pipe
    closed here, the fork server exits the moment the grader does, and
    ``_die_with_parent`` ends this command with it."""
    try:
        from multiprocessing import forkserver
        server = forkserver._forkserver
        fd = server._forkserver_alive_fd
        if fd is not None:
            server._forkserver_alive_fd = None
            os.close(fd)
    except (ImportError, AttributeError, OSError):
        pass


def _die_with_grader(pid: int) -> None:
    """Kill this command's session when process ``pid`` ends. The fork server
    ends too, but it exits as a Python interpreter full of nbgrader does, which
    under load took seconds: long enough for a killed worker's nbgrader to
    remove the notebook another worker had graded. A thread waits on the
    grader's pidfd (no pid reuse, no polling)."""
    import select
    import threading
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:   # gone before this command started
        os._exit(1)
    except (AttributeError, OSError):   # not Linux 5.3+: the fork server's end only
        return

    def watch() -> None:
        select.select([fd], [], [])
        try:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        finally:
            os._exit(1)
    threading.Thread(target=watch, name="die-with-grader", daemon=True).start()


def _die_with_parent() -> None:
    """This command ends when the fork server does, which ends with the grader
    that started it: a grading worker killed mid-notebook leaves no nbgrader
    behind to go on writing the notebook's results while another worker grades it."""
    try:
        import ctypes
        parent = os.getppid()
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:   # the parent went before the setting took effect
            os._exit(1)
    except (OSError, AttributeError):   # not Linux: the fork server's own cleanup only
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
    """``run_forked`` without waiting: the started process (``stop_forked`` ends it early)."""
    proc = _context().Process(target=_forked_main, args=(target, payload, str(root), env, str(log), os.getpid()),
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
