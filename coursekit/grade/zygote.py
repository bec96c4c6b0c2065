"""A warm kernel factory for grading: import torch once, fork a fresh kernel per notebook.

Starting a kernel costs about 2 s here, nearly all of it ``import torch`` and
friends; a class of 200 notebooks pays that 200 times. The zygote pays it once:
it imports what every grading kernel needs, then waits on a Unix socket. For
each notebook the kernel launcher (``coursekit.grade.sandbox``) asks it for a kernel;
the zygote forks, and the child becomes that notebook's kernel:

* it has run no student code before (the zygote never runs any: it only
  imported modules), so no student's state can reach another's — each child
  starts from the same pristine memory image, copy-on-write;
* it drops to the notebook's own unprivileged uid (so a fork bomb hits only its
  own process limit, and it cannot read another notebook's working folder),
  with its resource limits, in a working folder of its own;
* it boots the guard with the notebook's seal key before the kernel starts.

The zygote itself runs inside the same bubblewrap sandbox as a single kernel
would (``coursekit.grade.sandbox.zygote_command``): the course folder is hidden, the
machine read-only. It keeps only the capabilities it needs to hand each child
its own uid and to clean up after it (setuid/setgid, kill, chown, and reading
the children's folders), and the children have none.

Protocol (one JSON line each way per connection)::

    launcher -> zygote  {"workdir", "conn", "key", "uid", "mem_mb", "nproc", "threads", "argv", "env"}
    zygote -> launcher  {"pid": N}           the kernel is starting
    zygote -> launcher  {"exit": code}       the kernel ended; its processes are gone
    grader -> zygote    {"ping": true}       (a run that adopts a factory kept from an earlier one)
    zygote -> grader    {"pong": N, "kernels": K, "idle": S}   its pid, its kernels now, the seconds
                                             since its last kernel or request; its idle time starts again

A factory kept for the next run (coursekit.grade.kept, ENV_IDLE seconds) ends by itself
once it has had no kernel and no request for that long.

Closing the connection (the launcher was killed) kills the kernel and every
process of its uid.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

from grading import protocol

PRELOAD = ("torch", "numpy", "matplotlib", "matplotlib.pyplot", "matplotlib_inline.backend_inline",
           "IPython", "ipykernel.kernelapp", "ipykernel.ipkernel", "ipywidgets", "tqdm", "tqdm.auto",
           "helpers", "helpers.checks", "helpers.ch12_quiz", "grading", "grading.protocol", "grading.core",
           "grading.guard", "grading.cases", "torch._dynamo",
           # what IPKernelApp.initialize imports in every kernel: its debugger (debugpy: 0.3 s a kernel,
           # most of a forked kernel's start), the shell's history database, pdb
           "ipykernel.debugger", "ipykernel.zmqshell", "IPython.core.history", "sqlite3", "pdb",
           "tornado.queues", "tornado.locks", "tornado.gen", "tornado.platform.asyncio", "faulthandler",
           "numpy.testing", "IPython.extensions.storemagic", "IPython.core.completerlib", "IPython.core.debugger",
           "IPython.core.oinspect", "IPython.utils.wildcard", "coursekit.grade.kernel_boot",
           # what ipykernel imports as each kernel shuts down (it looks for the kernel's children)
           "psutil",
           # what torch imports the first time a shape is broadcast (torch.broadcast_shapes: sympy),
           # which the checks do while they diagnose a wrong answer: imported here, it cannot fail
           # under builtins a student's code replaced (0.4 s)
           "torch.fx.experimental.symbolic_shapes")


# What only some kernels import: torch._dynamo (an optimiser's step, a tensor on the meta device, a
# dispatch mode: about 1 s of the factory's 3 s of imports; the kernels of ch01, ch03, ch06, ch08
# and ch12 never import it, those of the other chapters do). No factory imports it before it is
# ready unless the grader asks (ENV_ZYGOTE_IMPORTS: the run's chapters' kernels imported it
# before, coursekit.grade.kernels.factory_imports). A kernel that imports it itself says so as it
# ends (REPORT); a full factory then imports it at once, so that every kernel forked after that
# one ended has it (LEARNED), and the grader remembers it for the chapter's next runs. A lean
# factory (a small run: ENV_PRELOAD=lean) leaves it, and the course modules no notebook of the
# run imports, to the kernels that need them, where each costs the same time, side by side.
ONLY_SOME = ("torch._dynamo",)
ENV_PRELOAD = protocol.ENV_ZYGOTE + "_PRELOAD"   # "lean" or "full" (the default); never reaches a kernel
ENV_IDLE = protocol.ENV_ZYGOTE + "_IDLE"         # seconds without a kernel or a request after which it ends (0: never)
REPORT = ".course-imported"   # in a kernel's working folder: which of ONLY_SOME it imported itself, one a line
LEARNED = "zygote: a kernel imported "           # the log's line for each, then the module's name
_LEAN = [False]                                  # whether this factory is lean (it learns nothing then)


def preload() -> None:
    """Import what every grading kernel imports (no code of a student's): the
    modules above, every course module, and the modules the release notebooks
    of the run's chapters import (ENV_ZYGOTE_IMPORTS, e.g. transformers' LLaMA);
    then warm up what the first cells of a notebook would pay for. ONLY_SOME
    only when ENV_ZYGOTE_IMPORTS names it; a lean factory (ENV_PRELOAD) leaves
    out the course modules no notebook of the run imports too."""
    import importlib
    import pkgutil

    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")   # debugpy's note on frozen modules, once a kernel
    extra = [m for m in os.environ.pop(protocol.ENV_ZYGOTE_IMPORTS, "").split(",") if m]
    lean = _LEAN[0] = os.environ.pop(ENV_PRELOAD, "full") == "lean"
    for name in (*PRELOAD, *extra):
        if name in ONLY_SOME and name not in extra:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (a missing optional module costs only time)
            pass
    for pkg in () if lean else ("helpers", "grading"):
        mod = sys.modules.get(pkg)
        if mod is None:
            continue
        for info in pkgutil.iter_modules(mod.__path__):
            try:
                importlib.import_module(f"{pkg}.{info.name}")
            except Exception:  # noqa: BLE001
                pass
    warm_up()


def warm_up() -> None:
    """Pay once, here, a first-use cost every kernel would pay: a figure drawn
    with the course's fonts (fonts loaded and cached). matplotlib's settings
    are put back, so a forked kernel starts as a fresh one would.

    Nothing here computes on tensors: the first real computation starts
    PyTorch's worker threads (OpenMP, autograd), and a forked child, which
    has none of its parent's threads, would wait for them for ever."""
    try:
        import io

        import matplotlib
        import matplotlib.pyplot as plt

        from helpers import plots
        with matplotlib.rc_context():
            plots.setup()
            fig, ax = plt.subplots(figsize=(2, 2))
            ax.plot([0, 1], [1, 0])
            ax.set_title("注意力 attention")
            fig.savefig(io.BytesIO(), format="png")
            plt.close(fig)
    except Exception:  # noqa: BLE001  (a warm-up that fails costs only time)
        pass


def threads() -> int:
    """This process's threads (the factory forks safely only with no PyTorch worker among them)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 0


# ------------------------------------------------------------------ in the child

def _no_new_privs() -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS


def _become_kernel(req: dict, sock: socket.socket, listener: socket.socket) -> None:
    """Runs in the forked child: never returns."""
    import resource
    try:
        sock.close()
        listener.close()
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        workdir = req["workdir"]
        uid = int(req["uid"])
        conn_path = os.path.join(workdir, ".kernel-connection.json")
        fd = os.open(conn_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, json.dumps(req["conn"]).encode())
        os.close(fd)
        tmp = os.path.join(workdir, ".tmp")
        os.makedirs(tmp, exist_ok=True)
        if os.geteuid() == 0:
            for p in (conn_path, tmp):
                os.chown(p, uid, uid)
        mem = int(req.get("mem_mb", protocol.MEM_MB)) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (protocol.FSIZE_BYTES, protocol.FSIZE_BYTES))
        nproc = int(req.get("nproc", protocol.NPROC))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        _no_new_privs()
        if os.geteuid() == 0:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)  # all capabilities go with uid 0
        os.chdir(workdir)
        env = {k: v for k, v in os.environ.items() if not k.startswith(protocol.ENV_ZYGOTE)}
        env.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
        env.update({"HOME": workdir, "TMPDIR": tmp, "MPLCONFIGDIR": os.path.join(tmp, "mpl"),
                    "IPYTHONDIR": os.path.join(tmp, "ipython"), "PWD": workdir,
                    "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
        threads = int(req.get("threads", 0))
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        os.environ.clear()
        os.environ.update(env)
        import tempfile
        tempfile.tempdir = tmp
        key = bytes.fromhex(req["key"]) if req.get("key") else None
        options = [str(a) for a in req.get("argv", []) if str(a).startswith("--")]
        req.clear()
        if threads:
            import torch
            torch.set_num_threads(threads)
        sys.argv = [sys.executable, "-m", "ipykernel_launcher", "-f", conn_path, *options]
        from coursekit.grade.kernel_boot import start
        missing = [m for m in ONLY_SOME if m not in sys.modules]
        # the kernel's own options only: "-m ipykernel_launcher" would make IPython run that module
        # in the kernel (it fails, and formatting its traceback cost 0.4 s a notebook)
        try:
            start(["-f", conn_path, *options], key)
        finally:
            _report(os.path.join(workdir, REPORT), [m for m in missing if m in sys.modules])
        os._exit(0)
    except SystemExit as exc:
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    except BaseException:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        os._exit(70)


def _report(path: str, names: list[str]) -> None:
    """The ending kernel's REPORT: which of ONLY_SOME it imported itself (nothing when none)."""
    if not names:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, "\n".join(names).encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _read_report(workdir: str | None) -> list[str]:
    """The modules of ONLY_SOME a kernel's REPORT names. Its folder is the kernel's own, so
    the file is read as anything a student may have put there: a plain file only (never
    through a link, never a pipe that would block), 1 KB at most, and only names of ONLY_SOME
    count. It can cost the factory an import, nothing more."""
    import stat
    if not workdir:
        return []
    try:
        fd = os.open(os.path.join(workdir, REPORT), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        text = os.read(fd, 1024).decode("ascii", "replace")
    except OSError:
        return []
    finally:
        os.close(fd)
    return [m for m in ONLY_SOME if m in text.split()]


def _learn(names: list[str]) -> None:
    """Import, for the kernels forked from now on, what a kernel of this factory imported
    itself (a full factory only: a lean one leaves it to each kernel)."""
    import importlib
    for name in names:
        if name in sys.modules or _LEAN[0]:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (a module that fails costs only time)
            continue
        print(f"zygote: imported {name} for the kernels to come ({threads()} threads)", flush=True)


# ------------------------------------------------------------------ cleaning up a uid

def _pids_of(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(name))
                        break
        except OSError:
            continue
    return pids


def kill_uid(uid: int, rounds: int = 50) -> None:
    """Kill every process of ``uid`` (a fork bomb included): a child that takes
    that uid sends SIGKILL to everything it may signal, until none is left."""
    if uid == os.geteuid() or uid == 0:
        return
    for _ in range(rounds):
        if not _pids_of(uid):
            return
        pid = os.fork()
        if pid == 0:
            try:
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        _reap()
        time.sleep(0.01)


_ENDED: dict[int, int] = {}   # pid -> exit code, of children reaped and not yet handled
_LEARN: list[str] = []        # modules of ONLY_SOME that ended kernels imported themselves, not yet learned


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _ENDED[pid] = os.waitstatus_to_exitcode(status)


def _clean_tmp(uid: int) -> None:
    import shutil
    for entry in os.scandir("/tmp"):
        try:
            if entry.stat(follow_symlinks=False).st_uid == uid:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
        except OSError:
            continue


# ------------------------------------------------------------------ the server

def serve(sock_path: str) -> None:
    idle = float(os.environ.pop(ENV_IDLE, "0") or 0)
    preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    listener.bind(sock_path)
    os.chmod(sock_path, 0o600)
    listener.listen(64)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    print(f"zygote: ready ({threads()} threads)", flush=True)
    kernels: dict[int, dict] = {}   # pid -> {"sock", "uid", "exit"}
    by_sock: dict[socket.socket, int] = {}
    last = time.monotonic()
    try:
        while True:
            ready, _, _ = select.select([listener, *by_sock], [], [], 0.05 if kernels else 0.5)
            idle_for = 0.0 if kernels else time.monotonic() - last
            if kernels or ready:
                last = time.monotonic()
            elif idle and time.monotonic() - last > idle:
                print(f"zygote: idle for {idle:.0f} s: ending", flush=True)
                break
            for s in ready:
                if s is listener:
                    conn, _ = listener.accept()
                    _start(conn, listener, kernels, by_sock, idle_for)
                else:  # the launcher went away (killed): the kernel goes too
                    pid = by_sock[s]
                    try:
                        data = s.recv(1)
                    except OSError:
                        data = b""
                    if not data:
                        _finish(pid, kernels, by_sock, code=None)
            _reap()
            for pid in [p for p in _ENDED if p in kernels]:
                _finish(pid, kernels, by_sock, code=_ENDED.pop(pid))
            for pid in [p for p in _ENDED if p not in kernels]:
                _ENDED.pop(pid)  # a killer child of kill_uid
            if _LEARN:   # before the next kernel is forked
                _learn(_LEARN)
                _LEARN.clear()
    finally:
        for pid in list(kernels):
            _finish(pid, kernels, by_sock, code=None)
        listener.close()
        try:
            os.unlink(sock_path)
        except OSError:
            pass


def _start(conn: socket.socket, listener: socket.socket, kernels: dict, by_sock: dict, idle_for: float = 0.0) -> None:
    conn.settimeout(10)
    try:
        line = conn.makefile("rb").readline()
        req = json.loads(line)
    except Exception:  # noqa: BLE001
        conn.close()
        return
    if req.get("ping"):
        try:
            conn.sendall(json.dumps({"pong": os.getpid(), "kernels": len(kernels), "idle": round(idle_for, 1)})
                         .encode() + b"\n")
        except OSError:
            pass
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        _become_kernel(req, conn, listener)
    uid = int(req["uid"])
    workdir = str(req.get("workdir") or "")
    req.clear()
    kernels[pid] = {"sock": conn, "uid": uid, "workdir": workdir}
    by_sock[conn] = pid
    conn.settimeout(None)
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        _finish(pid, kernels, by_sock, code=None)


def _finish(pid: int, kernels: dict, by_sock: dict, code: int | None) -> None:
    info = kernels.pop(pid, None)
    if info is None:
        return
    by_sock.pop(info["sock"], None)
    if code is None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = -9
    if os.geteuid() == 0:
        kill_uid(info["uid"])
        _clean_tmp(info["uid"])
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    _reap()
    _ENDED.pop(pid, None)
    for name in _read_report(info.get("workdir")):   # before the launcher removes the folder
        print(f"{LEARNED}{name} (the kernel of uid {info['uid']})", flush=True)
        if name not in _LEARN:
            _LEARN.append(name)
    try:
        info["sock"].sendall(json.dumps({"exit": code}).encode() + b"\n")
    except OSError:
        pass
    info["sock"].close()


if __name__ == "__main__":
    serve(sys.argv[1])
