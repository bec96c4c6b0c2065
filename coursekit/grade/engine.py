"""Grading jobs on Dask distributed: one job per notebook.

The unit of work is one submitted notebook, keyed by the hash the reuse step
computes (coursekit.grade.reuse: the submission's bytes, the chapter, the grading
code, the environment, the run's rules) together with the chapter and the
student. A job is nbgrader's autograde of that notebook in the sandbox, with a
kernel forked from a warm kernel factory (coursekit.grade.zygote); the grader that
submitted it checks its seals as it comes back and then writes its key into
the *ledger*, a small table of finished jobs in the gradebook's own database
(SQLite or PostgreSQL). The ledger is the record of what has been graded:

* a job whose key is in the ledger (and whose graded notebook is there) is not
  run again: a grader that was stopped, or a service restarted, finishes the
  queue without grading anything twice;
* a key is written once (insert if absent): a job that runs twice writes once.

Where the jobs run (``from_environment``):

* by default a Dask ``LocalCluster`` inside the grading process
  (``processes=False``, one thread per worker slot), so that every job shares
  the run's kernel factory and nbgrader fork server, as the thread pool did;
* ``COURSE_ENGINE=processes``: a local cluster of worker processes (one thread
  each), sharing the run's kernel factory through its socket;
* ``COURSE_ENGINE=threads``: no Dask, the pipeline's own thread pool;
* ``COURSE_DASK_SCHEDULER=tcp://host:8786``: an existing cluster whose workers
  share nothing with the grader: each job carries the submission's files and
  returns the graded notebook and the gradebook's rows, which the grader writes
  (coursekit.grade.carried); a worker needs only the course installed, at any
  path. With ``COURSE_SHARED_FS=1`` the workers instead see the course folder
  at the same path (a shared filesystem) and write there; ``COURSE_SHARED_FS=0``
  makes the local ``processes`` cluster's jobs carry their files too. A worker
  plugin (``CourseWorker``) starts the sandbox's kernel factory once per worker
  (in its own course folder when the jobs carry their files) and keeps it warm
  between jobs and runs.
  Plain ``dask worker tcp://…`` workers do (a job's fork server may start in a
  daemonic worker: coursekit.base.runner). Before a run sends them a job, each
  worker proves it can grade (``probe_worker``: the grader's code and
  environment, and for jobs that carry their files its chapters' source and
  release, the sandbox, the fork server, one forked kernel's preflight);
  one that cannot is refused by name with its fix, and with none left the run
  stops before any job.

Failures: a worker killed mid-notebook takes its nbgrader process and kernel
with it (coursekit.base.runner ends a command with its fork server; the factory is
bubblewrap's child with ``--die-with-parent``), and the scheduler gives the job
to another worker, so the notebook is graded once. A job that fails outside
the student's kernel (``MACHINERY``: an exception in the worker, its sandbox or
nbgrader's start) goes to a worker that has not failed it; when none is left it
is given no score and the run stops, naming the fault (never a student's zero). A scheduler that goes away
stops the run with what finished kept in the ledger: running it again grades
the rest. A notebook that kills its kernel costs only that notebook (the
pipeline scores it as the empty release, as without Dask).

The engine sends notebooks and keeps the ledger; grading one is the
pipeline's, which hands the engine what its jobs run (a ``Grader``:
coursekit.grade.pipeline.GRADER), so that this module needs nothing of it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grading import protocol

from ..report.flags import Flag
from .intake import Job

SCHEDULER_ENV = "COURSE_DASK_SCHEDULER"
ENGINE_ENV = "COURSE_ENGINE"
MODES = ("dask", "processes", "threads")
TABLE = "course_finished_job"
LOG = "engine"                     # .grading/engine/: what the jobs did (autograded.jsonl)
MACHINERY = "machinery"            # a job that failed outside the student's kernel: never a score
PROBE_TIMEOUT = 300                # seconds a worker has to prove it can grade (its kernel factory starts)


def job_key(job: Job) -> str:
    """The job's key: the reuse step's hash of what its grade depends on, with who and which chapter
    (two students may hand in the same bytes)."""
    text = f"{job.key}\n{job.chapter}\n{job.student}"
    return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Grader:
    """What the engine's jobs run, given by the grading pipeline (coursekit.grade.pipeline.GRADER).
    Each is a module-level name, which Dask sends to the workers by reference."""
    warm: type          # a worker's kernel factory: .start(root, sandbox, chapters) -> .base, .socket(say), .close()
    grade: Callable     # on a worker: (spec, job, base, socket, workers) -> the run that autograded ``job``
    check: Callable     # in the grader: (run, job, gradebook) -> None, the seal check of a graded notebook
    #                     (``job.sealed`` True once done; left False, the seal check step does it)
    probe: Callable | None = None   # on a worker: (spec, base, socket) -> None or why one graded kernel failed
    seal: Callable | None = None    # on a worker whose jobs carry their files: (run, job, gradebook) -> None,
    #                                 the seal check there, failing closed (coursekit.grade.carried)


# ------------------------------------------------------------------ the ledger

class Ledger:
    """The table of finished jobs in the gradebook's database: key -> the job's
    result (its flags, time and outcome), written once per key."""

    def __init__(self, url: str):
        self.url = url
        self._engine = None
        self._table = None

    def _db(self, create: bool):
        """The database, or None when it does not exist yet and ``create`` is false
        (a SQLite gradebook is not created by looking into it)."""
        if self._engine is not None:
            return self._engine
        if self.url.startswith("sqlite:///") and not create and not Path(self.url[len("sqlite:///"):]).exists():
            return None
        from sqlalchemy import Column, Float, MetaData, String, Table, Text, create_engine
        from sqlalchemy.exc import SQLAlchemyError
        args = {"connect_args": {"timeout": 60}} if self.url.startswith("sqlite") else {"pool_pre_ping": True}
        engine = create_engine(self.url, future=True, **args)
        meta = MetaData()
        self._table = Table(TABLE, meta, Column("key", String(64), primary_key=True),
                            Column("chapter", String(128)), Column("student", String(256)),
                            Column("result", Text), Column("finished_at", Float))
        for attempt in range(3):   # two graders creating the table at once: one of them wins
            try:
                meta.create_all(engine, checkfirst=True)
                break
            except SQLAlchemyError:
                if attempt == 2:
                    raise
                time.sleep(0.2 * (attempt + 1))
        self._engine = engine
        return engine

    def finished(self, keys: list[str]) -> dict[str, dict]:
        """key -> recorded result, for the keys the ledger holds."""
        from sqlalchemy import select
        db = self._db(create=False)
        if db is None or not keys:
            return {}
        out = {}
        with db.connect() as con:
            for i in range(0, len(keys), 500):
                rows = con.execute(select(self._table.c.key, self._table.c.result)
                                   .where(self._table.c.key.in_(keys[i:i + 500])))
                out.update({k: json.loads(r) for k, r in rows})
        return out

    def record(self, key: str, job: Job, result: dict) -> bool:
        """Write ``key`` once; False when it was there already (the job had finished before)."""
        from sqlalchemy.exc import IntegrityError
        db = self._db(create=True)
        try:
            with db.begin() as con:
                con.execute(self._table.insert().values(key=key, chapter=job.chapter, student=job.student,
                                                        result=json.dumps(result), finished_at=time.time()))
            return True
        except IntegrityError:
            return False

    def forget(self, keys: list[str]) -> None:
        db = self._db(create=False)
        if db is None or not keys:
            return
        with db.begin() as con:
            for i in range(0, len(keys), 500):
                con.execute(self._table.delete().where(self._table.c.key.in_(keys[i:i + 500])))

    def count(self) -> int:
        from sqlalchemy import func, select
        db = self._db(create=False)
        if db is None:
            return 0
        with db.connect() as con:
            return con.execute(select(func.count()).select_from(self._table)).scalar()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


# ------------------------------------------------------------------ on a worker

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
        root = self.root
        if not root:   # jobs that carry their files: the worker's own course folder (coursekit.grade.carried)
            from . import carried
            home = carried.home(self.chapters)
            root = str(home)
            if self.first:   # the run's chapters' assignments, made while the kernel factory starts
                threading.Thread(target=_quietly, args=(carried.prepare, home, self.first), daemon=True).start()
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


def _worker_factory(spec: dict, warm_type: type) -> tuple[Path, str | None, int]:
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
            from . import carried
            return carried.run_job(spec, job, grader, where)
        base, socket, workers = _worker_factory(spec, grader.warm)
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


# ------------------------------------------------------------------ a worker's proof that it can grade

# what a refused worker is told to do, one sentence each
FIXES = {
    "code": "install on this worker the grader's version of the course (the same grading/, helpers/, coursekit/ and "
            "nbgrader_config.py: the same commit, or the course image built from it)",
    "environment": "give this worker the course's pinned environment (the same Python and package versions: "
                   "python3 course.py env from the same requirements, or the course image)",
    "sandbox": "install bubblewrap on this worker and run the worker as root (apt-get install bubblewrap), "
               "or grade with --unsandboxed everywhere",
    "fork": "start the worker so that its jobs may start processes: this version of the course does so itself; "
            "an older one needs DASK_DISTRIBUTED__WORKER__DAEMON=False",
    "kernel": "run python3 course.py grade --check on this worker's machine: its graded kernel did not start "
              "(the sandbox, the environment's Python, the course folder)",
    "probe": "look at this worker's own log: the probe itself failed or did not answer",
    "machinery": "look at the worker's log: the job failed outside the student's kernel (the worker, its sandbox "
                 "or nbgrader), so no score was given",
}


def code_digest() -> str:
    """The grading code this process runs (wherever the course is installed): grading/,
    helpers/, coursekit/ and nbgrader_config.py, by their names and bytes, not their path."""
    from ..author.build import ROOT
    from .reuse import digest_paths
    return digest_paths([ROOT / "grading", ROOT / "helpers", ROOT / "coursekit", ROOT / "nbgrader_config.py"])


def environment_digest() -> str:
    """Python and every installed distribution with its version (not where they are
    installed, nor the course's own)."""
    from .reuse import environment_digest as digest
    return digest(where=False, exclude=frozenset({"transformer_course"}))


def probe_worker(spec: dict, grader: Grader) -> dict:
    """On a worker, before it gets a job: its grading code and environment are the
    grader's (``spec["code"]``, ``spec["env"]``), its sandbox works, it may start the
    fork server, and one graded kernel forked from its factory runs a chapter's
    preflight (``grader.probe``). Returns its name, address and problems: [(kind, detail)]."""
    from . import carried
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
            base, socket, _ = _worker_factory(spec, grader.warm)
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


# ------------------------------------------------------------------ in the grader

class Engine:
    """A Dask cluster the grader sends its notebooks to (see the module's doc);
    its jobs run what ``grader`` gives."""

    def __init__(self, grader: Grader, address: str | None = None, workers: int = 1, processes: bool = False,
                 carried: bool | None = None):
        from . import carried as carried_mod
        self.grader = grader
        self.address, self.workers, self.processes = address, max(1, workers), processes
        # jobs that carry their files (coursekit.grade.carried): a remote cluster's by default
        self.carried = carried_mod.wanted(address is not None, processes) if carried is None else carried
        self._digests: dict = {}
        self._client = self._cluster = None
        self._lock = threading.Lock()
        self._registered: set[str] = set()
        self._allowed: list[str] = []   # the workers that proved they can grade (``admit``)

    @property
    def remote(self) -> bool:
        return self.address is not None

    def describe(self) -> str:
        how = "; jobs carry their files (no shared filesystem)" if self.carried else ""
        if self.remote:
            return f"Dask scheduler {self.address}" + (how or "; workers share the course folder")
        if self.processes:
            return f"Dask local cluster of {self.workers} worker processes" + how
        return f"Dask local cluster ({self.workers} threads in this process)"

    def start(self, run=None) -> None:
        """Connect (or start the local cluster); with ``run``, a remote cluster's
        workers start their kernel factories now, while the run's first steps go on."""
        with self._lock:
            if self._client is None:
                self._connect()
        if run is not None and (self.remote or self.carried):
            self._plugin(run)

    def _plugin(self, run) -> str:
        """The name of the worker plugin for ``run``'s course folder (for jobs that carry
        their files, the worker's own), registered once."""
        worker = CourseWorker("" if self.carried else str(run.root), run.sandbox,
                              _all_chapters(run.root) or run.chapters, self.grader.warm,
                              first=run.chapters if self.carried else ())
        with self._lock:
            if worker.name not in self._registered:
                self._client.register_plugin(_as_plugin(worker), name=worker.name)
                self._registered.add(worker.name)
        return worker.name

    def _connect(self) -> None:
        import dask
        from distributed import Client, LocalCluster
        if self.remote:
            self._client = Client(self.address, timeout=60)
            return
        # Dask always serves a status page: on a free loopback port here
        with dask.config.set({"distributed.worker.daemon": False}):   # a job starts processes (nbgrader)
            if self.processes:
                self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                             dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
            else:
                self._cluster = LocalCluster(n_workers=1, threads_per_worker=self.workers, processes=False,
                                             dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
            self._client = Client(self._cluster)

    @property
    def client(self):
        self.start()
        return self._client

    def close(self) -> None:
        with self._lock:
            for thing in (self._client, self._cluster):
                if thing is not None:
                    try:
                        thing.close()
                    except Exception:  # noqa: BLE001 (a scheduler already gone)
                        pass
            self._client = self._cluster = None

    def _spec(self, run, job: Job, plugin: str | None, chapters: list[str]) -> dict:
        spec = {"root": str(run.root), "scratch": str(run.scratch), "chapter": job.chapter, "student": job.student,
                "key": job_key(job), "sandbox": run.sandbox, "warm": run.warm, "timeout": run.timeout,
                "cell_timeout": run.cell_timeout, "flags": [f.to_json() for f in job.flags], "plugin": plugin,
                "chapters": chapters}
        if self.carried:   # the worker shares nothing: the submission's files and what it must agree with
            from . import carried
            digests = self.digests(run, chapters)
            spec.update(root="", scratch="", carried=True, files=carried.pack(run, job), code=digests["code"],
                        env=digests["env"], chapter_digests={job.chapter: digests["chapter_digests"][job.chapter]})
        elif not self.remote:   # this machine: the run's own factory and socket folder
            spec.update(base=str(run.base), zygote=run.zygote_socket, workers=run.workers)
        return spec

    def digests(self, run, chapters: list[str]) -> dict:
        """The grader's grading code, environment and chapters, as a worker must have them."""
        from . import carried
        if not self._digests:
            self._digests = {"code": code_digest(), "env": environment_digest()}
        known = self._digests.setdefault("chapter_digests", {})
        for ch in chapters:
            if ch not in known:
                known[ch] = carried.chapter_digest(run.root, ch)
        return self._digests

    def worker_names(self) -> dict[str, str]:
        """The cluster's workers now: address -> name."""
        info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) else \
            self.client.scheduler_info()
        return {addr: str(w.get("name", addr)) for addr, w in info.get("workers", {}).items()}

    def admit(self, run, chapters: list[str], plugin: str | None) -> list[str]:
        """The workers that proved they can grade (``probe_worker``), each refused one
        said by name with its fix; GradingStopped when none can. Local clusters run the
        grader's own code and factory, which the preflight has just proved: all of them."""
        if not self.remote and not self.carried:
            return list(self.worker_names())
        self.client.wait_for_workers(1, timeout=PROBE_TIMEOUT)
        spec = {"root": str(run.root), "sandbox": run.sandbox, "warm": run.warm, "plugin": plugin,
                "chapters": chapters, "timeout": run.timeout, "cell_timeout": run.cell_timeout,
                **{k: v for k, v in self.digests(run, chapters).items() if k != "chapter_digests"}}
        if self.carried:
            spec.update(root="", carried=True,
                        chapter_digests={ch: self.digests(run, chapters)["chapter_digests"][ch] for ch in chapters})
        tag = os.urandom(4).hex()
        futures = {addr: self.client.submit(probe_worker, spec, self.grader, workers=[addr], allow_other_workers=False,
                                            pure=False, key=f"probe-{tag}-{addr}")
                   for addr in self.worker_names()}
        names = self.worker_names()
        good, refused = [], []
        deadline = time.monotonic() + PROBE_TIMEOUT
        for addr, fut in futures.items():
            name = names.get(addr, addr)
            try:
                result = fut.result(timeout=max(1.0, deadline - time.monotonic()))
                problems = [tuple(p) for p in result["problems"]]
                name = result.get("name") or name      # as the worker names itself (--name)
            except Exception as exc:  # noqa: BLE001 (a worker that went, or whose probe did not answer)
                if _cluster_gone(exc) and not self.worker_names():
                    raise
                fut.cancel()
                problems = [("probe", f"{type(exc).__name__}: {exc}")]
            if problems:
                refused.append(_refusal(name, addr, problems))
            else:
                good.append(addr)
        for line in refused:
            run.say(f"grade: refused {line}")
        if not good:
            from .preflight import GradingStopped
            raise GradingStopped("grade: stopped before scoring anyone: no worker of the Dask cluster "
                                 f"{self.address} can grade:\n" + "\n".join(f"  {x}" for x in refused) +
                                 "\n  Nothing was scored: no grades, no feedback, no grades.csv.")
        return good

    def _as_done(self, futures: dict, run, plugin, send):
        """(future, job) as each of ``futures`` finishes (they are popped; ``send`` may add
        more meanwhile). Jobs go only to workers that proved they can grade; when none of
        them is left (killed, or restarted by its nanny under a new address) the workers
        there are now prove themselves and the jobs still waiting go to them."""
        from distributed import wait
        while futures:
            try:
                wait(list(futures), timeout=5, return_when="FIRST_COMPLETED")
            except TimeoutError:
                if not set(self._allowed) & set(self.worker_names()):
                    chapters = sorted({j.chapter for j in futures.values()})
                    self._allowed = self.admit(run, chapters, plugin)
                    for fut, job in list(futures.items()):
                        fut.cancel()
                        futures.pop(fut)
                        send(job, self._allowed)
                continue
            for fut in [f for f in futures if f.done()]:
                yield fut, futures.pop(fut)

    def autograde(self, run, jobs: list[Job]):
        """Grade ``jobs`` on the cluster; yield each as it is done, its seals
        checked and its key in the ledger. Jobs the ledger holds are not sent.

        A job that fails outside the student's kernel (``MACHINERY``: the worker,
        its sandbox, nbgrader's start; or, on a remote cluster, a kernel that cannot
        start there) is sent to a worker that has not failed it yet; when no worker
        is left, it is not yielded, gets no score, and once the others are done the
        run stops (GradingStopped) naming the fault: nothing after this step runs,
        so no feedback is made and no class file written."""
        from nbgrader.api import Gradebook

        from .preflight import INFRASTRUCTURE, GradingStopped
        from .reuse import TRANSIENT
        ledger = Ledger(protocol.gradebook_url(run.root))
        gb = None
        try:
            for job in jobs:
                if job.key is None:   # no reuse step ran: a key of this run only
                    job.key = os.urandom(16).hex()
            keys = {job_key(j): j for j in jobs}
            if run.regrade:
                ledger.forget(list(keys))
            done = ledger.finished(list(keys))
            todo = []
            for k, job in keys.items():
                if k in done and run.graded_path(job).exists():   # finished before: kept as it was
                    rec = done[k]
                    job.ok, job.failure, job.seconds, job.sealed = True, None, rec.get("seconds", 0.0), True
                    for f in rec.get("flags", []):
                        flag = Flag.from_json(f)
                        job.flag(flag.kind, flag.detail)
                    yield job
                else:
                    todo.append(job)
            if not todo:
                return
            chapters = sorted({j.chapter for j in run.everyone})
            self._digests.pop("chapter_digests", None)   # a long-lived grader's chapters may have changed since
            self.start()
            plugin = self._plugin(run) if self.remote or self.carried else None
            self._allowed = self.admit(run, sorted({j.chapter for j in todo}), plugin)
            futures, tried, faults = {}, {}, []

            def send(job: Job, where: list[str]):
                fut = self.client.submit(grade_notebook, self._spec(run, job, plugin, chapters), self.grader,
                                         key=f"grade-{job_key(job)}-{os.urandom(3).hex()}", pure=False,
                                         workers=list(where), allow_other_workers=False)
                futures[fut] = job
                return fut

            for job in todo:
                send(job, self._allowed)
            try:
                for fut, job in self._as_done(futures, run, plugin, send):
                    try:
                        result = fut.result()
                    except Exception as exc:  # noqa: BLE001 (the job killed its workers, or Dask gave it up)
                        if _cluster_gone(exc):
                            raise
                        result = {"ok": False, "failure": MACHINERY, "seconds": 0.0, "flags": [], "worker": None,
                                  "error": f"{type(exc).__name__}: {exc}"}
                    elsewhere = self.remote or self.carried   # a kernel that cannot start on that worker
                    if result["failure"] == MACHINERY or (elsewhere and result["failure"] in INFRASTRUCTURE):
                        been = tried.setdefault(job_key(job), set())
                        been.add(result.get("worker"))
                        live = self.worker_names()
                        others = [w for w in self._allowed if w not in been and w in live]
                        if others and result.get("worker") is not None:   # another worker may run it
                            send(job, others)
                            continue
                        # no worker can: no score, and the run stops
                        workers = sorted(live.get(w, w) for w in been if w)
                        if result["failure"] == MACHINERY:
                            faults.append((job, result, workers))
                            run.log(job).write_text(f"the grading job failed outside the student's kernel on "
                                                    f"{', '.join(sorted(w for w in been if w)) or 'the cluster'}:"
                                                    f"\n{result.get('trace') or result['error']}\n")
                            continue
                        if elsewhere:   # a kernel that could start on none of the workers that tried
                            faults.append((job, {**result, "error": f"{result['failure'].replace('_', ' ')} on every "
                                                 f"worker that tried (see {run.log(job)})"}, workers))
                            continue
                    job.ok, job.failure, job.seconds = result["ok"], result["failure"], result["seconds"]
                    for f in result["flags"]:
                        flag = Flag.from_json(f)
                        job.flag(flag.kind, flag.detail)
                    if "outputs" in result:   # a worker that shares nothing: the grader writes what it returned
                        from . import carried
                        if gb is None:
                            gb = Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID)
                        carried.accept(run, job, result["outputs"], gb)
                        if run.graded_path(job).exists() and result["outputs"].get("files"):
                            carried.record_line(run, job, result.get("worker"))
                    if job.ok and not job.failure and run.graded_path(job).exists():
                        if gb is None:
                            gb = Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID)
                        if not job.sealed:
                            self.grader.check(run, job, gb)
                        # recorded once its seals are checked: a record is a result kept as it is
                        if job.sealed and not any(f.kind in TRANSIENT for f in job.flags):
                            ledger.record(job_key(job), job, {"seconds": job.seconds, "worker": result.get("worker"),
                                                              "flags": [f.to_json() for f in job.flags]})
                    yield job
            except Exception as exc:
                if _cluster_gone(exc):
                    raise SystemExit(f"grade: the Dask cluster went away ({type(exc).__name__}: {exc}); "
                                     f"{len(jobs) - len(futures)} of {len(jobs)} notebooks are done and kept. "
                                     "Run the same command again to grade the rest.") from exc
                raise
            finally:
                for fut in futures:
                    fut.cancel()
            if faults:
                raise GradingStopped(_fault_message(faults, len(jobs), run))
        finally:
            if gb is not None:
                gb.close()
            ledger.close()


def _refusal(name: str, addr: str, problems: list[tuple[str, str]]) -> str:
    """One refused worker, by name: what is wrong, and the fix of its first problem."""
    what = "; ".join(detail for _, detail in problems)
    return f"worker {name} ({addr}): {what}; fix: {FIXES.get(problems[0][0], FIXES['probe'])}."


def _fault_message(faults: list, total: int, run) -> str:
    lines = []
    for job, result, workers in faults:
        where = f" on {', '.join(workers)}" if workers else ""
        lines.append(f"    {job.student}/{job.chapter}{where}: {result['error']}")
    text = " ".join(r["error"] for _, r, _ in faults)
    fix = FIXES["fork"] if "daemonic processes" in text else FIXES["machinery"]
    return (f"grade: stopped: {len(faults)} of {total} notebooks could not be graded for a reason of the machine, "
            f"not of the students (a fault outside the student's kernel, on every worker that tried):\n"
            + "\n".join(lines[:20]) + ("\n    …" if len(lines) > 20 else "") +
            f"\n  fix: {fix}.\n  No score was written for them and no feedback made; the notebooks graded are kept "
            f"in the ledger. Run the same command again once it is fixed (see {run.state / 'logs'}).")


def _takes_n_workers(client) -> bool:
    import inspect
    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):
        return False


def _cluster_gone(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in (exc, exc.__cause__, exc.__context__) if e is not None}
    return bool(names & {"CommClosedError", "CancelledError", "FutureCancelledError", "TimeoutError",
                         "OSError", "ConnectionRefusedError", "StreamClosedError"})


def _all_chapters(root: Path) -> list[str]:
    rel = Path(root) / "release"
    return sorted(p.name for p in rel.iterdir() if p.is_dir()) if rel.is_dir() else []


def from_environment(workers: int, grader: Grader) -> Engine | None:
    """The engine the environment asks for (see the module's doc), its jobs running
    what ``grader`` gives; None: the thread pool."""
    address = os.environ.get(SCHEDULER_ENV, "").strip()
    if address:
        return Engine(grader, address=address)
    mode = os.environ.get(ENGINE_ENV, "dask").strip() or "dask"
    if mode not in MODES:
        raise SystemExit(f"grade: {ENGINE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "threads":
        return None
    return Engine(grader, workers=workers, processes=mode == "processes")
