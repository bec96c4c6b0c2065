"""Grading kernels: the kernel spec nbgrader starts, each notebook's own uid
and socket folder, and the warm kernel factory of a run (coursekit.grade.zygote)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from grading import protocol

from ..base.nbgrader_run import env_with_bin
from ..base.runner import without_grader_secrets, write_atomically


def kernel_spec(state: Path) -> Path:
    """The folder to put on JUPYTER_PATH: its python3 kernel is the sandbox's launcher."""
    kdir = state / "kernels" / "kernels" / "python3"
    kdir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "coursekit.grade.sandbox", "{connection_file}"],
            "display_name": "Python 3 (graded)", "language": "python", "interrupt_mode": "message"}
    text = json.dumps(spec, indent=1)
    path = kdir / "kernel.json"
    # every notebook's start reads this file: replace it whole, never truncate it under a reader
    if not path.exists() or path.read_text() != text:
        write_atomically(path, lambda tmp: tmp.write_text(text))
    return state / "kernels"


def notebook_imports(root: Path, chapters: list[str]) -> list[str]:
    """The modules the release notebooks of ``chapters`` import at the top of
    a cell (the course's own code, never a student's): the factory imports
    them once instead of every kernel (transformers' LLaMA costs 3 s)."""
    import ast

    import nbformat

    from ..base import syntax

    names: dict[str, None] = {}
    for ch in chapters:
        path = root / "release" / ch / f"{ch}.ipynb"
        if not path.exists():
            continue
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("solution"):
                continue
            try:
                tree = syntax.parse(cell.source)
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.Import):
                    names.update((a.name, None) for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names[node.module] = None
    return list(names)


FACTORY = "factory.json"   # .grading/factory.json: the latest factories' start (coursekit.grade.prepare) and NEEDS
NEEDS = "needs"            # in it: {chapter: modules its kernels imported that no factory had}


def factory_imports(root: Path, state: Path, chapters: list[str], lean: bool = False) -> list[str]:
    """What a factory for ``chapters`` imports beyond what every kernel needs: the modules
    their release notebooks import, and for a full factory those that their kernels imported
    themselves in an earlier run of this folder (coursekit.grade.zygote.ONLY_SOME, learned by
    the factory as it served them: ``learned``), so that no kernel pays for them again."""
    names = notebook_imports(root, chapters)
    if not lean:
        try:
            needs = json.loads((state / FACTORY).read_text()).get(NEEDS, {})
        except (OSError, ValueError, AttributeError):
            needs = {}
        for ch in chapters:
            names += [m for m in needs.get(ch, []) if isinstance(m, str) and m not in names]
    return names


def remember_needs(state: Path, chapters: list[str], modules: list[str]) -> None:
    """Note that the kernels of a run of ``chapters`` imported ``modules`` themselves (``factory_imports``)."""
    if not modules:
        return
    try:
        seen = json.loads((state / FACTORY).read_text())
    except (OSError, ValueError):
        seen = {}
    needs = seen.setdefault(NEEDS, {})
    for ch in chapters:
        needs[ch] = sorted(set(needs.get(ch, [])) | set(modules))
    write_atomically(state / FACTORY, lambda tmp: tmp.write_text(json.dumps(seen)))


def uid_for(chapter: str, student: str) -> int:
    """An unprivileged uid of this notebook's own (not in /etc/passwd)."""
    return 200_000 + zlib.crc32(f"{chapter}/{student}".encode()) % 100_000


def socket_folder(base: Path, uid: int) -> Path:
    """A kernel's folder for its IPC socket files (a short path: a Unix
    socket's path may not exceed 107 bytes), owned by its uid."""
    runtime = base / "spool" / f"rt{uid}"
    runtime.mkdir(parents=True, exist_ok=True)
    os.chmod(runtime, 0o700)
    if os.geteuid() == 0:
        os.chown(runtime, uid, uid)
    return runtime


def short_base() -> Path:
    """A run's own folder for sockets, under /tmp (short paths; another grader may share the course folder)."""
    base = Path(tempfile.mkdtemp(prefix="course-grade-", dir="/tmp" if os.path.isdir("/tmp") else None))
    os.chmod(base, 0o711)
    spool = base / "spool"
    spool.mkdir()
    os.chmod(spool, 0o711)
    return base


class Zygote:
    """The warm kernel factory of one grading run (coursekit.grade.zygote), in the
    sandbox when grading is sandboxed. ``socket`` is None when it could not
    start; kernels then start one by one, as without it."""

    def __init__(self, root: Path, state: Path, base: Path, sandbox: bool, imports: list[str] = (),
                 lean: bool = False, keep: float = 0):
        from .sandbox import zygote_command
        from .zygote import ENV_IDLE, ENV_PRELOAD
        self.socket = None
        self.base = base
        self.lean = lean
        self.kept = keep > 0        # it outlives the run, for the next one (coursekit.grade.kept)
        self.started = time.monotonic()
        self.ready_after: float | None = None   # seconds from its start to ready, once seen ready
        zdir = base / "zygote"
        zdir.mkdir(exist_ok=self.kept)
        os.chmod(zdir, 0o700)
        self.sock = zdir / "sock"
        # this run's own log (another grader's would truncate a shared one under wait()),
        # copied to logs/zygote.log when the factory closes; a kept factory's is in its folder,
        # where the run that adopts it reads it
        self.log = base / "zygote.log" if self.kept else state / "logs" / f"zygote-{os.getpid()}.log"
        self.latest = self.log if self.kept else state / "logs" / "zygote.log"
        self.log_from = 0      # where this run's part of the log starts (a kept factory's log goes on)
        env = without_grader_secrets(env_with_bin({protocol.ENV_ROOT: str(root), "PYTHONDONTWRITEBYTECODE": "1",
                                                   protocol.ENV_ZYGOTE_IMPORTS: ",".join(imports),
                                                   ENV_PRELOAD: "lean" if lean else "full",
                                                   ENV_IDLE: str(keep)}))
        cmd = zygote_command(str(root), str(base), sandbox)
        if self.kept:   # bubblewrap ends with its parent: a parent of its own, which the run's end leaves alone
            cmd = [sys.executable, "-S", "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
                   *cmd]
        with open(self.log, "w") as out:
            os.chmod(self.log, 0o600)
            self.proc = subprocess.Popen(cmd, cwd=zdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    @classmethod
    def adopt(cls, base: Path, lean: bool) -> Zygote:
        """A factory an earlier run kept (coursekit.grade.kept), already ready."""
        z = cls.__new__(cls)
        z.base, z.lean, z.kept, z.proc = base, lean, True, None
        z.sock = base / "zygote" / "sock"
        z.socket = str(z.sock)
        z.log = z.latest = base / "zygote.log"
        z.started, z.ready_after = time.monotonic(), None
        try:
            z.log_from = z.log.stat().st_size
        except OSError:
            z.log_from = 0
        return z

    def learned(self) -> list[str]:
        """The modules the factory's kernels imported themselves in this run (its log's
        coursekit.grade.zygote.LEARNED lines since the run began)."""
        from .zygote import LEARNED, ONLY_SOME
        try:
            with open(self.log, "rb") as f:
                f.seek(self.log_from)
                text = f.read().decode(errors="replace")
        except OSError:
            return []
        names = {line[len(LEARNED):].split(" ", 1)[0] for line in text.splitlines() if line.startswith(LEARNED)}
        return [m for m in ONLY_SOME if m in names]

    def ready(self) -> bool:
        """Whether the factory is ready now (it said so, its socket is there)."""
        if self.socket is None and self.proc is not None and self.sock.exists() and \
                "zygote: ready" in self.log.read_text(errors="replace"):
            self.socket = str(self.sock)
            self.ready_after = time.monotonic() - self.started
        return self.socket is not None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_at_most(self, patience: float, say=print) -> str | None:
        """The factory's socket once it is ready, waiting until ``patience`` seconds after
        its start at most. Past that, the socket's path all the same while it is still
        starting: a kernel started before the factory is ready starts cold
        (coursekit.grade.sandbox finds no socket there yet), one started after is forked.
        None, the factory closed, when it died (then every kernel starts cold)."""
        while self.alive() and not self.ready() and time.monotonic() - self.started < patience:
            time.sleep(0.05)
        if self.ready():
            return self.socket
        if self.alive():
            say(f"grade: note: the warm kernel factory is not ready {patience:.0f} s after its start (see "
                f"{self.latest} once it ends); kernels start one by one until it is")
            return str(self.sock)
        return self.wait(say, 0)

    def wait(self, say=print, limit: float = 120) -> str | None:
        """The factory's socket once it is ready, or None (then kernels start cold)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            if self.ready():
                return self.socket
            time.sleep(0.05)
        if self.proc is not None:
            say(f"grade: note: the warm kernel factory did not start (see {self.latest}); kernels start one by one")
        self.stop()
        return None

    def close(self) -> None:
        """The run's end: stop the factory, but a kept one, left to the next run (coursekit.grade.kept)."""
        if self.kept:
            self.proc = None
            return
        self.stop()

    def stop(self) -> None:
        import signal
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.proc.wait()
        if self.log.exists():
            self.log.replace(self.latest)
        self.proc = None
        shutil.rmtree(self.base / "zygote", ignore_errors=True)
