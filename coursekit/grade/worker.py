"""What a grading engine's jobs run on a worker (coursekit.grade.engine).

``CourseWorker`` is the Dask worker plugin that starts the course's sandboxed
kernel factory once per worker and keeps it warm between jobs and runs;
``grade_notebook`` is one job (nbgrader's autograde of one notebook, or, for a
worker that shares nothing with the grader, coursekit.grade.carried's
``run_job``); ``probe_worker`` is a worker's proof that it can grade, before
it gets a job.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

from ..report.flags import Flag
from . import carried
from .intake import Job
from .jobs import LOG, MACHINERY, Grader


class CourseWorker:
    """A Dask worker plugin: the course's sandboxed kernel factory, started once
    per worker (when the plugin is registered) and kept warm between jobs."""

    idempotent = True   # registering it again (the next run) keeps the warm factory

    def __init__(self, root: str, sandbox: bool, chapters: list[str], warm_type: type, first: list[str] = ()):
        self.root, self.sandbox, self.chapters, self.warm_type = root, sandbox, chapters, warm_type
        self.first = list(first)   # jobs that carry their files: the chapters whose assignments to make now
        self.warm = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:   # sent to the workers: the settings, not this process's factory
        return {"root": self.root, "sandbox": self.sandbox, "chapters": self.chapters, "warm_type": self.warm_type,
                "first": self.first}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"], state["sandbox"], state["chapters"], state["warm_type"], state.get("first", ()))

    @property
    def name(self) -> str:
        text = json.dumps([self.root, self.sandbox])
        return "course-grader-" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def setup(self, worker=None) -> None:
        # what a probe's and a job's code import when the worker unpickles them, imported
        # before this worker's own threads import anything aside (runner.SHARED_ROOTS says why)
        from ..base import runner
        from . import autograde  # noqa: F401
        root = self.root
        if not root:   # jobs that carry their files: the worker's own course folder (coursekit.grade.carried)
            home = carried.home(self.chapters)
            root = str(home)
            if self.first:   # the run's chapters' assignments, made while the kernel factory starts
                runner.aside(_quietly, carried.prepare, home, self.first, name="assignments")
        self.warm = self.warm_type.start(Path(root), self.sandbox, self.chapters)

    def teardown(self, worker=None) -> None:
        if self.warm is not None:
            self.warm.close()
            self.warm = None

    def factory(self) -> tuple[Path, str | None]:
        """(the worker's socket folder, its factory's socket or None: kernels start one by one)."""
        with self._lock:
            if self.warm is None:
                self.setup()
            return self.warm.base, self.warm.socket(say=lambda *a: None)


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 (the job or the probe that needs it does it again and says why)
        pass


def _as_plugin(plugin: CourseWorker):
    """The plugin as Dask's WorkerPlugin (imported only where Dask is)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class Plugin(CourseWorker, WorkerPlugin):
        pass
    out = Plugin(plugin.root, plugin.sandbox, plugin.chapters, plugin.warm_type, plugin.first)
    return out


_FALLBACK: dict[str, CourseWorker] = {}


def worker_factory(spec: dict, warm_type: type) -> tuple[Path, str | None, int]:
    """Where this job's kernel comes from: the grader's own factory when the job
    runs on its machine, else this worker's (the plugin's). Also how many
    kernels this worker runs at once."""
    if spec.get("base"):
        return Path(spec["base"]), spec.get("zygote"), spec["workers"]
    from distributed import get_worker
    worker = get_worker()
    plugin = worker.plugins.get(spec["plugin"])
    if plugin is None:   # registered after this worker joined, or not at all: one of its own
        plugin = _FALLBACK.setdefault(spec["plugin"], CourseWorker(spec["root"], spec["sandbox"], spec["chapters"],
                                                                   warm_type))
    base, socket = plugin.factory() if spec["warm"] else (plugin.factory()[0], None)
    return base, socket, max(1, worker.state.nthreads)


def grade_notebook(spec: dict, grader: Grader) -> dict:
    """The job: nbgrader's autograde of one notebook (a scratch copy on the
    course's filesystem), in the sandbox, with a warm kernel (``grader.grade``).
    Returns its outcome."""
    job = Job(spec["chapter"], spec["student"], flags=[Flag.from_json(f) for f in spec.get("flags", [])])
    where = _where()
    try:
        if spec.get("carried"):   # the worker shares nothing with the grader
            return carried.run_job(spec, job, grader, where, lambda: worker_factory(spec, grader.warm))
        base, socket, workers = worker_factory(spec, grader.warm)
        run = grader.grade(spec, job, base, socket, workers)
    except Exception as exc:  # noqa: BLE001 (outside the student's kernel: the worker, its sandbox, nbgrader's start)
        import traceback
        return {"ok": False, "failure": MACHINERY, "seconds": 0.0, "worker": where, "flags": [],
                "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}
    if job.ok and run.graded_path(job).exists():
        line = json.dumps({"key": spec["key"], "chapter": job.chapter, "student": job.student, "worker": where,
                           "pid": os.getpid(), "at": time.time()})
        folder = run.state / LOG
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / "autograded.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    return {"ok": job.ok, "failure": job.failure, "seconds": job.seconds, "worker": where,
            "flags": [f.to_json() for f in job.flags]}


def probe_worker(spec: dict, grader: Grader) -> dict:
    """On a worker, before it gets a job: its grading code and environment are the
    grader's (``spec["code"]``, ``spec["env"]``), its sandbox works, it may start the
    fork server, and one graded kernel forked from its factory runs a chapter's
    preflight (``grader.probe``). Returns its name, address and problems: [(kind, detail)]."""
    problems: list[tuple[str, str]] = carried.mismatch(spec)
    if spec["sandbox"]:
        from .sandbox import sandbox_available
        ok, why = sandbox_available()
        if not ok:
            problems.append(("sandbox", why))
    if not problems:
        try:
            from ..base import runner
            runner.warm_up()
        except Exception as exc:  # noqa: BLE001
            problems.append(("fork", f"it cannot start the fork server ({type(exc).__name__}: {exc})"))
    if not problems and spec.get("carried"):   # its own course folder, each chapter's assignment in its gradebook
        try:
            home = carried.home(spec["chapters"])
            carried.prepare(home, spec["chapters"])
            spec = {**spec, "root": str(home)}
        except Exception as exc:  # noqa: BLE001
            problems.append(("code", f"its own course cannot grade these chapters ({type(exc).__name__}: {exc})"))
    if not problems and grader.probe is not None:
        try:
            base, socket, _ = worker_factory(spec, grader.warm)
            if spec["warm"] and socket is None:
                problems.append(("kernel", "its warm kernel factory did not start"))
            else:
                why = grader.probe(spec, base, socket)
                if why is not None:
                    lines = [x for x in why.splitlines() if x.strip()]
                    problems.append(("kernel", "its graded kernel failed: " + " | ".join(lines[-3:])))
        except Exception as exc:  # noqa: BLE001
            problems.append(("kernel", f"{type(exc).__name__}: {exc}"))
    return {"worker": _where(), "name": _name(), "problems": problems}


def _name() -> str:
    try:
        from distributed import get_worker
        return str(get_worker().name)
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


def _where() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"
