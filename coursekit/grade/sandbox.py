"""The grading kernel's launcher: resource limits, then bubblewrap, then the
kernel as an unprivileged user.

Kernel spec argv: ``python -m coursekit.grade.sandbox {connection_file}``. Settings
come from the environment the grading pipeline sets (the names and the
defaults live in grading.protocol, which both sides import):

COURSE_ROOT         the course folder, hidden in the sandbox except for the
                    code the kernel needs (helpers/, grading/, coursekit/, .venv/)
COURSE_SANDBOX      "1" to use bubblewrap, "0" to run unsandboxed (limits still apply)
COURSE_MEM_MB       address-space limit of the kernel (default 6144)
COURSE_NPROC        process/thread limit of the sandbox user (default 256)
COURSE_SEAL_FILE    file holding this notebook's seal key (read here, passed on a pipe)
COURSE_SANDBOX_UID  the unprivileged uid the kernel runs as; one per notebook, so that the
                    process limit of one submission (a fork bomb) cannot starve another

Inside the sandbox the kernel sees the machine read-only, its own working
folder (the student's autograded notebook folder) writable, a private /tmp,
no course files (no source/, gradebook, other submissions), and runs as an
unprivileged uid of its own.

Two ways to start it:

* warm (what ``make grade`` uses): with COURSE_ZYGOTE set, this launcher asks
  the run's zygote (coursekit.grade.zygote, started inside bubblewrap with no network
  at all) to fork the kernel; the kernel talks to the grader over IPC socket
  files, works in a copy of the notebook's folder, and this process stays
  alive as long as the kernel does;
* cold (fallback): bubblewrap around a new Python process, as below. The
  pipeline gives it IPC sockets too, and then it has no network either
  (``--unshare-net``); only a kernel started over TCP keeps loopback.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import sys

from grading import protocol

NOBODY = 65534  # the default sandbox user; the pipeline gives each notebook its own uid instead


def sandbox_available() -> tuple[bool, str]:
    """Whether bubblewrap is installed and can start a sandbox here."""
    import subprocess
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False, "bubblewrap (bwrap) is not installed"
    try:
        r = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--dev", "/dev", "--proc", "/proc",
                            "true"], capture_output=True, text=True, timeout=20)
    except Exception as exc:  # noqa: BLE001
        return False, f"bwrap failed to start: {exc}"
    if r.returncode != 0:
        return False, f"bwrap cannot create a sandbox here: {r.stderr.strip()}"
    return True, "ok"


def _limits(mem_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (mem_mb * 2**20, mem_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (protocol.FSIZE_BYTES, protocol.FSIZE_BYTES))


def _inside(path: str, folders) -> bool:
    return any(path == h or path.startswith(h + os.sep) for h in folders)


def closed_folders(*paths: str) -> list[str]:
    """The folders above ``paths`` that other users cannot enter (no x bit for others)."""
    out = []
    for path in paths:
        p = os.path.dirname(path)
        while p not in ("/", ""):
            try:
                if not os.stat(p).st_mode & 0o001 and p not in out:
                    out.append(p)
            except OSError:
                pass
            p = os.path.dirname(p)
    return sorted(out, key=len)


def environment_links(hidden) -> list[tuple[str, str]]:
    """(target, link) for the environment's paths as Python was started
    (``sys.prefix``, ``sys.executable``'s folder) that pass through a symlink
    inside a hidden folder: a ``.venv`` that links to an environment
    elsewhere, a course folder reached through a link. The sandbox recreates
    the link, so that the kernel starts under the same path."""
    links = []
    for path in dict.fromkeys([sys.prefix, os.path.dirname(sys.executable)]):
        real = os.path.realpath(path)
        if real != path and _inside(path, hidden) and not _inside(path, [t for _, t in links]):
            links.append((real, path))
    return links


def bwrap_args(root: str, cwd: str, conn: str | None, writable: tuple[str, ...] = ()) -> list[str]:
    """bubblewrap's arguments: the machine read-only, the course folder hidden,
    ``cwd`` (and ``writable``) writable, the connection file ``conn`` alone read-only."""
    root = os.path.realpath(root)
    args = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp"]
    home = os.path.expanduser("~")
    code_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))  # where helpers/ and grading/ live
    hidden = [root] + ([code_root] if code_root != root else [])
    if home not in ("/", "") and not any(h.startswith(home + os.sep) or h == home for h in hidden):
        hidden.append(home)
    # what the kernel needs back from the hidden folders
    keep = [os.path.join(code_root, d) for d in ("helpers", "grading", "coursekit")]
    venv = os.path.realpath(sys.prefix)
    base = os.path.realpath(sys.base_prefix)
    # a folder on the way to the environment that the kernel's uid could not enter (/root, a mktemp -d
    # folder: 0700) is hidden too, and the environment bound back below it, through open folders
    needed = [venv, base, *keep, cwd, *writable, *([conn] if conn else [])]
    hidden += [f for f in closed_folders(*needed) if not _inside(f, hidden)]
    hidden.sort(key=len)   # a folder before the folders inside it
    for h in hidden:
        args += ["--tmpfs", h]
    for path in [venv, base, *keep]:
        if _inside(path, hidden) and os.path.exists(path):
            args += ["--ro-bind", path, path]
    links = environment_links(hidden)
    for target, link in links:
        args += ["--symlink", target, link]
    for path in (cwd, *writable):
        args += ["--bind", path, path]
    if conn:
        args += ["--ro-bind", conn, conn]   # the connection file alone, not its folder
    # folders bwrap creates on the way to a bound path are private (0700): open them up for the kernel's user
    parents = set()
    for path in [cwd, *writable, *([conn] if conn else []), venv, base, *keep, *(link for _, link in links)]:
        p = os.path.dirname(path)
        while p not in ("/", ""):
            parents.add(p)
            p = os.path.dirname(p)
    created = [h for h in [*hidden, "/tmp"]]
    for p in sorted(parents, key=len):
        if any(p.startswith(h + os.sep) for h in created):
            args += ["--chmod", "0755", p]
    args += ["--chdir", cwd, "--setenv", "HOME", "/tmp", "--setenv", "MPLCONFIGDIR", "/tmp/mpl",
             "--setenv", "IPYTHONDIR", "/tmp/ipython"]
    return args


# ------------------------------------------------------------------ the warm kernel factory

ZYGOTE_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH",
               "CAP_FOWNER")


def zygote_command(root: str, base: str, sandbox: bool = True) -> list[str]:
    """The command that runs the zygote (coursekit.grade.zygote) for the grading run
    whose private folder is ``base``: inside bubblewrap like a single kernel,
    with ``base/zygote`` (its socket, root-only) and ``base/spool`` (the
    kernels' working folders and socket files) writable."""
    zdir, spool = os.path.join(base, "zygote"), os.path.join(base, "spool")
    cmd = [sys.executable, "-m", "coursekit.grade.zygote", os.path.join(zdir, "sock")]
    if not sandbox:
        return cmd
    args = bwrap_args(root, zdir, None, writable=(spool,)) + ["--unshare-net"]  # kernels talk over IPC sockets
    if os.geteuid() == 0:
        for cap in ZYGOTE_CAPS:
            args += ["--cap-add", cap]
    return args + ["--"] + cmd


def _copy_workdir(src: str, dst: str, uid: int, limit: int = protocol.WORKDIR_BYTES) -> None:
    """The kernel's working folder: a copy of the notebook's folder (plain files
    and folders only, up to ``limit`` bytes), owned by the kernel's uid."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        target = os.path.normpath(os.path.join(dst, rel))
        os.makedirs(target, exist_ok=True)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            total += os.path.getsize(path)
            if total > limit:
                break
            shutil.copyfile(path, os.path.join(target, name))
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    if os.geteuid() == 0:
        for dirpath, _dirs, filenames in os.walk(dst):
            os.chown(dirpath, uid, uid)
            for name in filenames:
                os.chown(os.path.join(dirpath, name), uid, uid)


def via_zygote(sock_path: str, conn: str, cwd: str, key: bytes | None, extra: list[str] = ()) -> int | None:
    """Ask the zygote for this notebook's kernel and stay alive as long as it
    runs (the kernel manager watches this process); returns its exit code, or
    None when the zygote cannot be reached."""
    import json
    import socket
    import tempfile
    spool = os.path.join(os.path.dirname(os.path.dirname(sock_path)), "spool")
    uid = protocol.limit(protocol.ENV_SANDBOX_UID, NOBODY)
    workdir = tempfile.mkdtemp(prefix="k", dir=spool)
    try:
        _copy_workdir(cwd, workdir, uid)
        if os.geteuid() == 0:
            os.chown(workdir, uid, uid)
        with open(conn) as f:
            info = json.load(f)
        req = {"workdir": workdir, "conn": info, "key": key.hex() if key else None, "uid": uid,
               "mem_mb": protocol.limit(protocol.ENV_MEM_MB, protocol.MEM_MB),
               "nproc": protocol.limit(protocol.ENV_NPROC, protocol.NPROC),
               "threads": protocol.limit(protocol.ENV_KERNEL_THREADS, 0),
               "argv": [a for a in extra if a.startswith("--")],  # kernel options, e.g. nbgrader's history setting
               # the environment nbgrader gives its kernel (NBGRADER_EXECUTION=autograde among it), as a cold
               # kernel would get it; the grader's own settings stay out
               "env": {k: v for k, v in os.environ.items() if k not in protocol.GRADER_ONLY_ENV}}
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(sock_path)
        except OSError:
            return None  # the zygote is gone: start this kernel cold
        s.sendall(json.dumps(req).encode() + b"\n")
        del req
        reader = s.makefile("rb")
        code = 1
        for line in reader:
            msg = json.loads(line)
            if "exit" in msg:
                code = msg["exit"]
                break
        s.close()
        return code if code >= 0 else 128 - code
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _ipc_folder(conn: str) -> str | None:
    """The folder of the kernel's IPC socket files, when the connection file asks for IPC."""
    import json
    try:
        with open(conn) as f:
            info = json.load(f)
        if info.get("transport") == "ipc":  # the kernel's socket files go next to its ip prefix
            return os.path.dirname(os.path.abspath(info["ip"]))
    except (OSError, ValueError, KeyError):
        pass
    return None


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Be sent ``sig`` (SIGKILL unless told) when the process that launched this kernel ends
    (Linux's parent-death signal). jupyter_client starts each kernel in a session of its own,
    so a grading command killed with its process group (a worker that dies) does not reach it.
    The launcher is the process jupyter_client names (JPY_PARENT_PID): one that is gone
    already, killed while this process started, leaves nothing to wait for."""
    import ctypes
    launcher = os.environ.get("JPY_PARENT_PID", "")
    parent = int(launcher) if launcher.isdigit() else os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, sig, 0, 0, 0)                       # PR_SET_PDEATHSIG
    except (OSError, AttributeError):                     # not Linux: nothing to set
        return
    if os.getppid() != parent:                             # the launcher ended before the signal was set
        os._exit(1)


def supervise(cmd: list[str], env: dict, keep_fds: tuple[int, ...]) -> None:
    """Run bubblewrap as this process's child and exit with its status. Bubblewrap cannot
    be trusted with the parent-death signal (it clears it when it drops its privileges and
    sets its own only once it has started, by when the grading command may be gone), so this
    process keeps it: told that the command that launched the kernel has ended, it kills its
    process group (itself, bubblewrap and the kernel: the group jupyter_client would kill).
    A cold kernel whose grading command was killed with its worker used to stay alive, idle,
    under init."""
    import subprocess

    signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))
    signal.signal(signal.SIGINT, lambda *_: None)   # an interrupt is the kernel's (its group gets it too)
    die_with_parent(signal.SIGTERM)
    child = subprocess.Popen(cmd, env=env, pass_fds=keep_fds)
    code = child.wait()
    sys.exit(code if code >= 0 else 128 - code)


def main(argv: list[str]) -> None:
    die_with_parent()
    conn = os.path.abspath(argv[0])   # {connection_file}; the client may append kernel options after it
    extra = argv[1:]
    cwd = os.getcwd()
    root = os.environ.get(protocol.ENV_ROOT, cwd)
    use_sandbox = os.environ.get(protocol.ENV_SANDBOX, "1") == "1"
    # the seal key's file, the gradebook's address (and password) are the grader's, not the kernel's;
    # in its own pid namespace the kernel would take its parent (JPY_PARENT_PID) for dead
    env = {k: v for k, v in os.environ.items() if k not in protocol.GRADER_ONLY_ENV}

    key_file = os.environ.get(protocol.ENV_SEAL_FILE)
    if key_file and os.path.exists(key_file):
        with open(key_file, "rb") as f:
            key = f.read()
        zsock = os.environ.get(protocol.ENV_ZYGOTE)
        if zsock and os.path.exists(zsock):
            code = via_zygote(zsock, conn, cwd, key, extra)
            if code is not None:
                sys.exit(code)
        r, w = os.pipe()
        os.write(w, key)
        os.close(w)
        os.set_inheritable(r, True)
        env[protocol.ENV_SEAL_FD] = str(r)

    _limits(protocol.limit(protocol.ENV_MEM_MB, protocol.MEM_MB))
    kernel = [sys.executable, "-m", "coursekit.grade.kernel_boot", "-f", conn, *extra]
    if not use_sandbox:
        os.execve(kernel[0], kernel, env)

    nproc = protocol.limit(protocol.ENV_NPROC, protocol.NPROC)
    uid = protocol.limit(protocol.ENV_SANDBOX_UID, NOBODY)
    os.chmod(conn, 0o644)
    try:
        os.chown(cwd, uid, uid)
    except OSError:
        pass
    drop = [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all"]
    limit = [shutil.which("prlimit") or "prlimit", f"--nproc={nproc}", "--"]
    ipc = _ipc_folder(conn)
    # a kernel on IPC sockets needs no network at all: it gets none (a TCP kernel keeps loopback)
    net = ["--unshare-net"] if ipc else []
    cmd = bwrap_args(root, cwd, conn, writable=(ipc,) if ipc else ()) + net + ["--"] + limit + drop + ["--"] + kernel
    supervise(cmd, env, keep_fds=(int(env[protocol.ENV_SEAL_FD]),) if protocol.ENV_SEAL_FD in env else ())


if __name__ == "__main__":
    main(sys.argv[1:])
