"""A run's warm kernel factory kept, idle, for the next run of the same course folder.

Regrading one late notebook, or a few, is what an instructor does most, and there the
factory's start (torch and the course imported once: about 3 s) is most of the run. So a
run of `make grade` leaves its factory running, idle, for COURSE_KEEP_WARM seconds
(``ENV``; default ``DEFAULT``; 0 keeps none) after its last kernel, and the next run of the
same course folder adopts it when it still fits: the same environment, grading code and
rules (``reuse.Keys.run``), the same sandbox, and for a class (not a small run) a full
factory with the modules its chapters' notebooks import (and those their kernels imported
themselves before: coursekit.grade.kernels.factory_imports, ``learned``). Its kernels are then forked at
once, and a chapter whose preflight this factory's kernels passed with the same key (the
chapter's source and release, coursekit.grade.run.chapter_key) is not preflighted again, as in the
grading service (coursekit.grade.run.Warm). A factory that does not fit is stopped, and
the run keeps its own instead.

The run's fork server (coursekit.base.runner: nbgrader imported once, one to two seconds) is
kept the same way (coursekit.base.forkd), started at the run's end when none fits: the next
run's nbgrader commands are forked from it without waiting for an import.

What it holds: only what it imported. No student code ever runs in it and no secret is in
it (each kernel's seal key comes with its request). Its folder, /tmp/course-kept-<hash of
the grader's uid and the course folder> (0711; the socket's folder 0700, like a run's own),
holds its socket, the kernels' working folders while they run, its log and ``STATE``;
a folder of that name that is not the grader's own is never used.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
from pathlib import Path

from ..base import forkd, runner
from ..base.runner import write_atomically
from . import kernels
from .run import chapter_key

ENV = "COURSE_KEEP_WARM"
DEFAULT = 900           # seconds a kept factory waits, idle, for the next run
STATE = "kept.json"     # in its folder: {"factory": what it fits (key, sandbox, kind, imports), its keeper and
                        # the chapters ready; "forkd": the fork server's pid and key}


def seconds() -> float:
    """How long a run's factory is kept after the run (COURSE_KEEP_WARM; 0: not at all)."""
    try:
        return max(0.0, float(os.environ.get(ENV, DEFAULT)))
    except ValueError:
        return float(DEFAULT)


def base_for(root: Path) -> Path | None:
    """The kept factory's folder for the course folder ``root``; None when a folder of that
    name exists and is not a folder of this user's (then nothing is kept)."""
    digest = hashlib.sha256(f"{os.geteuid()}:{Path(root).resolve()}".encode()).hexdigest()[:16]
    base = Path("/tmp") / f"course-kept-{digest}"
    try:
        base.mkdir(mode=0o711)
    except FileExistsError:
        pass
    except OSError:
        return None
    st = os.lstat(base)
    if not os.path.isdir(base) or os.path.islink(base) or st.st_uid != os.geteuid():
        return None
    os.chmod(base, 0o711)
    spool = base / "spool"
    spool.mkdir(exist_ok=True)
    os.chmod(spool, 0o711)
    return base


def _read(base: Path) -> dict:
    try:
        state = json.loads((base / STATE).read_text())
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def _write(base: Path, state: dict) -> None:
    write_atomically(base / STATE, lambda tmp: tmp.write_text(json.dumps(state)))


def _ping(base: Path, timeout: float = 2.0) -> dict | None:
    """The factory's answer ({"kernels", "idle"}; answering starts its idle time again),
    or None when it does not answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(base / "zygote" / "sock"))
        s.sendall(b'{"ping": true}\n')
        answer = json.loads(s.makefile("rb").readline() or b"null")
        return answer if isinstance(answer, dict) and "pong" in answer else None
    except (OSError, ValueError):
        return None
    finally:
        s.close()


BUSY_S = 5    # a kept process that served something this recently may be in another run's middle


def _busy(answer: dict | None) -> bool:
    """Whether another run may be using it now: it runs kernels or commands, or did lately.
    What does not fit this run is ended only when not busy (ending it would end another
    run's kernel, a fault of the machine scored as the student's); else this run keeps its own."""
    return bool(answer) and (answer.get("kernels", 0) > 0 or answer.get("running", 0) > 0
                             or answer.get("idle", BUSY_S) < BUSY_S)


def _alive(pid) -> bool:
    """Whether process ``pid`` runs (one that ended, not yet reaped by the run that started
    it, has ended)."""
    try:
        return bool(pid) and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def _locked(base: Path):
    with open(base / "lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _end(state: dict, part: str) -> None:
    """End the kept ``part`` ("factory" or "forkd") and forget it."""
    pid = (state.pop(part, None) or {}).get("pid")
    if pid:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGTERM)


def factory_for(run, imports: list[str], lean: bool):
    """The run's factory, kept for the next run: the one an earlier run kept when it fits
    (adopted), else a new one in the kept folder; None when nothing can be kept here
    (the folder is not ours, or another run's kept factory is still starting)."""
    base = base_for(run.root)
    if base is None:
        return None
    with _locked(base):
        state = _read(base)
        kept = state.get("factory") or {}
        if kept:
            fits = (kept.get("key") == run.keys.run and kept.get("sandbox") == run.sandbox
                    and kept.get("root") == str(run.root)
                    and (lean or (not kept.get("lean") and set(imports) <= set(kept.get("imports", [])))))
            answer = _ping(base)
            if answer:
                if fits:
                    run.kept_ready = dict(kept.get("ready", {}))
                    _use_base(run, base)
                    return kernels.Zygote.adopt(base, bool(kept.get("lean")))
                if _busy(answer):
                    return None      # another run's, perhaps in its middle: this run keeps its own
                _end(state, "factory")
            elif _alive(kept.get("pid")):
                return None          # starting, for a run beside this one: this run keeps its own
            else:
                state.pop("factory")
        _use_base(run, base)
        z = kernels.Zygote(run.root, run.state, base, run.sandbox, imports, lean=lean, keep=run.keep)
        state["factory"] = {"key": run.keys.run, "sandbox": run.sandbox, "root": str(run.root), "lean": lean,
                            "imports": sorted(imports), "pid": z.proc.pid, "ready": {}}
        _write(base, state)
        return z


def _use_base(run, base: Path) -> None:
    """The run's kernels' folders go where the kept factory can reach them (its folder)."""
    import shutil
    if run.base is not None and run.base != base:
        shutil.rmtree(run.base, ignore_errors=True)
    run.base, run.base_kept = base, True


def preflighted(run, chapters: list[str]) -> None:
    """Note that the kept factory's kernels passed the preflight of ``chapters``."""
    if not (run.base_kept and run.zygote is not None and run.zygote.kept):
        return
    with _locked(run.base):
        state = _read(run.base)
        kept = state.get("factory") or {}
        if kept.get("key") != run.keys.run:
            return
        kept.setdefault("ready", {}).update({ch: chapter_key(run, ch) for ch in chapters})
        _write(run.base, state)


def learned(run, modules: list[str]) -> None:
    """Note that the kept full factory imported ``modules`` in this run (coursekit.grade.zygote:
    a kernel imported them itself), so that a run whose chapters need them still adopts it."""
    if not (modules and run.base_kept and run.zygote is not None and run.zygote.kept and not run.zygote.lean):
        return
    with _locked(run.base):
        state = _read(run.base)
        kept = state.get("factory") or {}
        if kept.get("key") != run.keys.run or kept.get("lean"):
            return
        kept["imports"] = sorted(set(kept.get("imports", [])) | set(modules))
        _write(run.base, state)


def ready_chapters(run) -> set[str]:
    """The run's chapters whose preflight the adopted factory passed with the same key."""
    return {ch for ch, key in run.kept_ready.items() if key == chapter_key(run, ch)}


def forget(run) -> None:
    """A run stopped for a reason of the machine: what was kept for this folder goes too
    (the next run starts afresh rather than adopt what may be at fault)."""
    run.forgotten = True
    if run.keep and run.shared is None:
        stop(run.root)


# ------------------------------------------------------------------ the fork server

def _forkd_socket(base: Path) -> Path:
    return base / "forkd" / "sock"


def use_forkd(root: Path) -> bool:
    """At a grading command's start, before the run's key is known: fork its nbgrader
    commands from the fork server an earlier run kept, if one answers (``check_forkd``
    then checks that it fits)."""
    base = base_for(root)
    if base is None or not (_read(base).get("forkd") or {}).get("pid"):
        return False
    if not forkd.ping(str(_forkd_socket(base)), timeout=1.0):
        return False
    runner.use_server(str(_forkd_socket(base)))
    return True


def check_forkd(run) -> bool:
    """Once the run's key is known: whether the kept fork server in use fits it (the same
    environment and grading code); one that does not is ended, and this process's own
    is used."""
    if not runner.using_server():
        return False
    base = base_for(run.root)
    with _locked(base):
        state = _read(base)
        if (state.get("forkd") or {}).get("key") == run.keys.run:
            return True
        runner.use_server(None)
        if not _busy(forkd.ping(str(_forkd_socket(base)), timeout=1.0)):
            _end(state, "forkd")
            _write(base, state)
    return False


def leave_forkd(run) -> None:
    """At the run's end: a fork server for the next run, unless one that fits is there."""
    import subprocess
    import sys
    if not run.keep or run.keys is None:
        return
    base = base_for(run.root)
    if base is None:
        return
    with _locked(base):
        state = _read(base)
        answer = forkd.ping(str(_forkd_socket(base)))
        if answer and ((state.get("forkd") or {}).get("key") == run.keys.run or _busy(answer)):
            return           # one that fits is there, or another run's that may be in its middle
        _end(state, "forkd")
        folder = base / "forkd"
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)
        env = dict(os.environ, **{forkd.ENV_PATH: json.dumps(sys.path), forkd.ENV_PRELOAD: json.dumps(runner.preloaded())})
        with open(base / "forkd.log", "w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "coursekit.base.forkd", str(_forkd_socket(base)),
                                     str(run.keep)], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        state["forkd"] = {"pid": proc.pid, "key": run.keys.run}
        _write(base, state)


# ------------------------------------------------------------------ letting go

def stop(root: Path) -> bool:
    """End the factory and fork server kept for the course folder ``root``; whether one ran."""
    base = base_for(root)
    if base is None:
        return False
    with _locked(base):
        state = _read(base)
        running = any(_alive((state.get(part) or {}).get("pid")) for part in ("factory", "forkd")) \
            or _ping(base, 0.5) is not None
        _end(state, "factory")
        _end(state, "forkd")
        (base / STATE).unlink(missing_ok=True)
    return running
