"""A grading run: what every step of the pipeline reads and writes (``Run``), and
what a long-lived grader keeps from one run to the next (``Warm``).

The steps themselves: coursekit.grade.prepare (those before autograde),
coursekit.grade.autograde, coursekit.grade.seal_check and coursekit.grade.results;
their order: coursekit.grade.pipeline.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grading import protocol

from ..base import runner
from ..base.nbgrader_run import env_with_bin
from . import kernels, reuse
from .intake import Job

STATE = ".grading"


class Clock:
    """Wall time per step of a grading run (printed, and kept in .grading/timings.json).
    A part timed inside a step (waiting for the kernel factory, inside preflight)
    is counted once, as itself: the times add up to the run's."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self._inner: list[float] = []   # time taken by parts timed inside each open block

    @contextlib.contextmanager
    def __call__(self, name: str):
        t = time.monotonic()
        self._inner.append(0.0)
        try:
            yield
        finally:
            took = time.monotonic() - t
            inner = self._inner.pop()
            self.times[name] = self.times.get(name, 0.0) + took - inner
            if self._inner:
                self._inner[-1] += took


@dataclass
class Run:
    """Everything a grading run's steps share."""
    root: Path
    jobs: list[Job]
    sandbox: bool = True
    warm: bool = True
    workers: int = 1
    timeout: int = protocol.NOTEBOOK_TIMEOUT_S
    cell_timeout: int = protocol.CELL_TIMEOUT_S
    report: bool = True
    regrade: bool = False            # grade everything, keeping no earlier result
    say: Callable[..., None] = print
    clock: Clock = field(default_factory=Clock)
    t0: float = field(default_factory=time.monotonic)
    scratch: Path | None = None      # the copies of the submissions nbgrader grades
    base: Path | None = None         # the run's short folder (sockets, kernels' folders)
    zygote: kernels.Zygote | None = None
    zygote_socket: str | None = None
    langs: dict[str, str] = field(default_factory=dict)   # chapter -> its language
    reused: list[Job] = field(default_factory=list)         # kept as they were graded before
    feedback_only: list[Job] = field(default_factory=list)  # kept, but their manual grades changed
    expected: dict = field(default_factory=dict)            # chapter -> the checks its test cells seal
    keys: reuse.Keys | None = None   # the parts of every notebook's key this run shares (step_reuse)
    engine: object | None = None     # where notebooks are autograded (coursekit.grade.engine); None: a thread pool
    shared: Warm | None = None       # a long-lived grader's kernel factory and prepared chapters (the service)
    keep: float = 0                  # seconds its factory stays, idle, for the next run (coursekit.grade.kept)
    base_kept: bool = False          # ``base`` is the kept factory's folder (the run's end leaves it)
    kept_ready: dict = field(default_factory=dict)   # chapter -> its key, preflighted by the adopted factory
    forgotten: bool = False          # stopped for a reason of the machine: nothing is kept for the next run
    class_files: bool = True         # write grades.csv, the LMS files and the class report at the end
    ahead: bool = False              # record a new gradebook while the kernel factory starts (GradebookAhead)
    gradebook_ahead: object | None = None    # its GradebookAhead (coursekit.grade.prepare)
    pages: object | None = None              # the thread making the feedback pages (coursekit.grade.results)
    similarity_aside: object | None = None   # the process making the report's similarity findings ahead
    similarity_start: object | None = None   # the thread starting it (coursekit.grade.results.start_similarity_aside)

    @property
    def everyone(self) -> list[Job]:
        return self.jobs + self.feedback_only + self.reused

    @property
    def state(self) -> Path:
        return self.root / STATE

    @property
    def chapters(self) -> list[str]:
        return sorted({j.chapter for j in self.jobs})

    def lang(self, chapter: str) -> str:
        return self.langs.get(chapter, "zh")

    def log(self, job: Job, suffix: str = ".log") -> Path:
        return self.state / "logs" / f"{job.chapter}__{job.student}{suffix}"

    def key_file(self, job: Job) -> Path:
        return self.state / "keys" / f"{job.chapter}__{job.student}.key"

    def graded_path(self, job: Job) -> Path:
        return self.root / "autograded" / job.student / job.chapter / f"{job.chapter}.ipynb"

    def kernel_env(self, job: Job, runtime: Path) -> dict:
        """The environment nbgrader and the kernel's launcher get for ``job``."""
        threads = max(1, (os.cpu_count() or 1) // max(1, self.workers))
        env = {protocol.ENV_ROOT: str(self.root), protocol.ENV_SANDBOX: "1" if self.sandbox else "0",
               protocol.ENV_SEAL_FILE: str(self.key_file(job)), "JUPYTER_PATH": str(kernels.kernel_spec(self.state)),
               "JUPYTER_RUNTIME_DIR": str(runtime), protocol.ENV_CELL_TIMEOUT: str(self.cell_timeout),
               "PYTHONDONTWRITEBYTECODE": "1", protocol.ENV_SANDBOX_UID: str(uid(job)),
               protocol.ENV_KERNEL_THREADS: str(threads)}
        if self.zygote_socket:
            env[protocol.ENV_ZYGOTE] = self.zygote_socket
        return env_with_bin(env)

    def new_key(self, job: Job) -> None:
        path = self.key_file(job)
        path.write_bytes(secrets.token_bytes(32))
        os.chmod(path, 0o600)


def uid(job: Job) -> int:
    """The unprivileged uid this notebook's kernel runs as."""
    return kernels.uid_for(job.chapter, job.student)


@dataclass
class Warm:
    """What a long-lived grader (the grading service) keeps from one run to the
    next: the kernel factory and its socket folder, and the chapters already
    preflighted and recorded in the gradebook, each with the key of what that
    depended on (the environment, the grading code, the chapter's source and
    release). A run given a ``Warm`` starts no factory and repeats a chapter's
    one-off steps only when that key changed."""
    root: Path
    sandbox: bool
    base: Path
    zygote: kernels.Zygote | None = None
    ready: dict[str, str] = field(default_factory=dict)   # chapter -> its key when it was prepared

    @classmethod
    def start(cls, root: Path, sandbox: bool, chapters: list[str]) -> Warm:
        """The factory starts now, with the modules of ``chapters`` imported."""
        root = Path(root).resolve()
        state = root / STATE
        for sub in ("keys", "logs", "scratch"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(state / "keys", 0o700)
        kernels.kernel_spec(state)
        warm = cls(root, sandbox, kernels.short_base())
        warm.zygote = kernels.Zygote(root, state, warm.base, sandbox, kernels.factory_imports(root, state, chapters))
        runner.aside(runner.warm_up, name="warm-up")
        return warm

    def socket(self, say=print) -> str | None:
        """The factory's socket; a factory that died is started again first."""
        z = self.zygote
        if z is not None and z.socket and (z.proc is None or z.proc.poll() is not None):
            imports = kernels.factory_imports(self.root, self.root / STATE, sorted(self.ready))
            z.close()
            self.zygote = z = kernels.Zygote(self.root, self.root / STATE, self.base, self.sandbox, imports)
        if z is None:
            return None
        return z.socket or z.wait(say)

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
        shutil.rmtree(self.base, ignore_errors=True)


def chapter_key(run: Run, chapter: str) -> str | None:
    """What a chapter's one-off steps depend on (a long-lived grader's, or a factory kept for
    the next run: coursekit.grade.kept): the run's key and the chapter's own."""
    return f"{run.keys.run}:{run.keys.chapters.get(chapter)}" if run.keys else None


def new_chapters(run: Run) -> list[str]:
    """The run's chapters whose one-off steps (preflight, the gradebook's record)
    are still to do: all of them, but for a long-lived grader that did them already."""
    if run.shared is None:
        return run.chapters
    return [ch for ch in run.chapters
            if run.shared.ready.get(ch) is None or run.shared.ready[ch] != chapter_key(run, ch)]




def rules(run: Run) -> dict:
    """The run's rules that a grade depends on (part of every notebook's reuse key)."""
    return {"sandbox": run.sandbox, "timeout": run.timeout, "cell_timeout": run.cell_timeout}


def page_env(run: Run) -> dict:
    """The environment of the processes that make this run's feedback pages: the parts
    every page of a chapter shares are kept in the run's scratch folder (coursekit.grade.parts)."""
    from .parts import ENV
    if run.scratch is None:     # a run without its own folder: each process keeps its parts in memory
        return env_with_bin()
    folder = run.scratch.parent / "page-parts"
    folder.mkdir(exist_ok=True)
    return env_with_bin({ENV: str(folder)})


def source_size(run: Run, chapter: str) -> int:
    """A chapter's cost, roughly: the size of its source notebook."""
    return (run.root / "source" / chapter / f"{chapter}.ipynb").stat().st_size
