"""The forked command's own side: what a process forked for one command does first
(coursekit.base.runner's fork server, or the kept one of coursekit.base.forkd, forks it):
its own session, its log, the grader's environment, and an end tied to the grader's."""
from __future__ import annotations

import os
import signal
import sys


def forked_main(target: str, payload, root: str, env: dict, log_path: str, grader: int | None = None) -> None:
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
