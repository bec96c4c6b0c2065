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
  stops before any job. The probes are waited for together: a worker that
  leaves the cluster meanwhile is refused as soon as the scheduler no longer
  lists it, and once one has passed in t seconds the others have
  max(PROBE_FLOOR, PROBE_FACTOR * t) in all (not PROBE_TIMEOUT while one is ready).

Failures: a worker killed mid-notebook takes its nbgrader process and kernel
with it (coursekit.base.runner ends a command with its fork server; the factory is
bubblewrap's child with ``--die-with-parent``), and the scheduler gives the job
to another worker, so the notebook is graded once (a job that only workers no
longer in the cluster may run goes to a live one within LOOK seconds). A job
that fails outside the student's kernel (``MACHINERY``: an exception in the worker, its sandbox or
nbgrader's start) goes to a worker that has not failed it; when none is left it
is given no score and the run stops, naming the fault (never a student's zero). A scheduler that goes away
stops the run with what finished kept in the ledger: running it again grades
the rest. A notebook that kills its kernel costs only that notebook (the
pipeline scores it as the empty release, as without Dask).

The engine sends notebooks and keeps the ledger; grading one is the
pipeline's, which hands the engine what its jobs run (a ``Grader``:
coursekit.grade.pipeline.GRADER), so that this module needs nothing of it.
What runs on a worker is coursekit.grade.worker's; the jobs, their keys and the
ledger are coursekit.grade.jobs'.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from grading import protocol

from ..report.flags import Flag
from . import carried as carried_mod
from .intake import Job
from .jobs import MACHINERY, Grader, Ledger, code_digest, environment_digest, job_key
from .worker import CourseWorker, _as_plugin, grade_notebook, probe_worker

__all__ = ["Engine", "Grader", "Ledger", "MACHINERY", "from_environment", "job_key", "code_digest",
           "environment_digest"]

SCHEDULER_ENV = "COURSE_DASK_SCHEDULER"
ENGINE_ENV = "COURSE_ENGINE"
MODES = ("dask", "processes", "threads")
PROBE_TIMEOUT = 300                # seconds a worker has to prove it can grade (its kernel factory starts)
PROBE_FLOOR, PROBE_FACTOR = 60, 3  # once one has in t s, the others have max(PROBE_FLOOR, PROBE_FACTOR * t) in all
POLL = 1.0                         # seconds between looks at the probes (and at which workers are still there)
LOOK = 5.0                         # seconds between looks, while jobs run, at which workers are still there


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
    "left": "look at this worker's log and machine (killed, out of memory, its machine or network gone); "
            "it gets no job in this run, and the next run probes it again",
    "machinery": "look at the worker's log: the job failed outside the student's kernel (the worker, its sandbox "
                 "or nbgrader), so no score was given",
}


# ------------------------------------------------------------------ in the grader

# A local cluster shares the grader's two cores with the kernels it grades: Dask's own sampling
# profiler (a look at every thread's stack each 10 ms), its event loop's health check (each 20 ms)
# and its machine and memory monitors (each 0.5 s and 0.1 s) cost about 0.2 s of CPU over a
# 5-second run on this machine, for a status page no one reads during `make grade`. A remote
# cluster's workers keep their own settings.
QUIET = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "1s",
         "distributed.admin.system-monitor.interval": "5s", "distributed.admin.system-monitor.gil.enabled": False,
         "distributed.worker.memory.monitor-interval": "1s"}


NOTHING_SCORED = "Nothing was scored: no grades, no feedback, no grades.csv."


class NoWorker(Exception):
    """The cluster had no worker for PROBE_TIMEOUT seconds."""


class Engine:
    """A Dask cluster the grader sends its notebooks to (see the module's doc);
    its jobs run what ``grader`` gives."""

    def __init__(self, grader: Grader, address: str | None = None, workers: int = 1, processes: bool = False,
                 carried: bool | None = None):
        self.grader = grader
        self.address, self.workers, self.processes = address, max(1, workers), processes
        # jobs that carry their files (coursekit.grade.carried): a remote cluster's by default
        self.carried = carried_mod.wanted(address is not None, processes) if carried is None else carried
        self._digests: dict = {}
        self._client = self._cluster = None
        self._lock = threading.Lock()
        self._registered: set[str] = set()
        self._allowed: list[str] = []   # the workers that proved they can grade (``admit``)
        self._sent_to: dict[str, list[str]] = {}   # a job's key -> the workers it may run on

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
        with dask.config.set({"distributed.worker.daemon": False, **QUIET}):   # a job starts processes (nbgrader)
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
            digests = self.digests(run, chapters)
            spec.update(root="", scratch="", carried=True, files=carried_mod.pack(run, job), code=digests["code"],
                        env=digests["env"], chapter_digests={job.chapter: digests["chapter_digests"][job.chapter]})
        elif not self.remote:   # this machine: the run's own factory and socket folder
            spec.update(base=str(run.base), zygote=run.zygote_socket, workers=run.workers)
        return spec

    def digests(self, run, chapters: list[str]) -> dict:
        """The grader's grading code, environment and chapters, as a worker must have them."""
        if not self._digests:
            self._digests = {"code": code_digest(), "env": environment_digest()}
        known = self._digests.setdefault("chapter_digests", {})
        for ch in chapters:
            if ch not in known:
                known[ch] = carried_mod.chapter_digest(run.root, ch)
        return self._digests

    def worker_names(self) -> dict[str, str]:
        """The cluster's workers now, as the scheduler says when asked: address -> name. (Not the
        client's ``scheduler_info()``: that returns its cached copy, which the client's own periodic
        update may have just replaced with one that lists no worker, or kept when the scheduler did
        not answer; the grader then took live workers for gone.)"""
        client = self.client
        ask = client.scheduler.identity
        info = client.sync(ask, n_workers=-1) if _takes_n_workers(client) else client.sync(ask)
        return {addr: str(w.get("name", addr)) for addr, w in info.get("workers", {}).items()}

    def admit(self, run, chapters: list[str], plugin: str | None) -> list[str]:
        """The workers that proved they can grade (``probe_worker``), each refused one
        said by name with its fix; GradingStopped when none can. Local clusters run the
        grader's own code and factory, which the preflight has just proved: all of them."""
        if not self.remote and not self.carried:
            return list(self.worker_names())
        self.wait_for_a_worker(run)
        spec = {"root": str(run.root), "sandbox": run.sandbox, "warm": run.warm, "plugin": plugin,
                "chapters": chapters, "timeout": run.timeout, "cell_timeout": run.cell_timeout,
                **{k: v for k, v in self.digests(run, chapters).items() if k != "chapter_digests"}}
        if self.carried:
            spec.update(root="", carried=True,
                        chapter_digests={ch: self.digests(run, chapters)["chapter_digests"][ch] for ch in chapters})
        tag = os.urandom(4).hex()
        names = self.worker_names()
        futures = {addr: self.client.submit(probe_worker, spec, self.grader, workers=[addr], allow_other_workers=False,
                                            pure=False, key=f"probe-{tag}-{addr}")
                   for addr in names}
        good, refused = [], []
        for addr, (name, problems) in self._probed(futures).items():
            if problems:
                refused.append(_refusal(name or names.get(addr, addr), addr, problems))
            else:
                good.append(addr)
        for line in refused:
            run.say(f"grade: refused {line}")
        if not good:
            from .preflight import GradingStopped
            raise GradingStopped("grade: stopped before scoring anyone: no worker of the Dask cluster "
                                 f"{self.address} can grade:\n" + "\n".join(f"  {x}" for x in refused) +
                                 "\n  " + NOTHING_SCORED)
        return good

    def wait_for_a_worker(self, run) -> None:
        """Return once the cluster has a worker; said when it has none (at the start, or when
        every worker that proved itself has gone mid-run: one restarted by its nanny, or a new
        one, may join). NoWorker after PROBE_TIMEOUT seconds without one."""
        if self.worker_names():
            return
        run.say(f"grade: the Dask cluster {self.address} has no worker now; waiting up to {PROBE_TIMEOUT} s "
                f"for one to join (start one: `dask worker {self.address}`, as docs/deploy.md says)")
        try:
            self.client.wait_for_workers(1, timeout=PROBE_TIMEOUT)
        except TimeoutError as exc:
            raise NoWorker(f"no worker joined the Dask cluster {self.address} in {PROBE_TIMEOUT} s") from exc

    def _probed(self, futures: dict) -> dict:
        """address -> (the name the worker gives itself or None, its problems), for each probe of
        ``futures``, all looked at together every POLL seconds. A worker is done with when its probe
        answers; when it is no longer in the cluster (killed, its machine gone: refused at once); or
        when its time is up: PROBE_TIMEOUT, but once one worker has passed its probe in t seconds (its
        cold start) the others have max(PROBE_FLOOR, PROBE_FACTOR * t) in all, so that one that does
        not answer never holds the run for the whole PROBE_TIMEOUT while another is ready."""
        from distributed import wait
        start, limit, first = time.monotonic(), PROBE_TIMEOUT, None
        out, waiting = {}, dict(futures)
        while waiting:
            try:
                wait(list(waiting.values()), timeout=POLL, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
            took = time.monotonic() - start
            for addr in [a for a, f in waiting.items() if f.done()]:
                out[addr] = self._answer(waiting.pop(addr))
                if first is None and not out[addr][1]:
                    first, limit = took, min(PROBE_TIMEOUT, max(PROBE_FLOOR, PROBE_FACTOR * took))
            live = self.worker_names() if waiting else {}
            for addr in [a for a in waiting if a not in live]:
                waiting.pop(addr).cancel()
                out[addr] = (None, [("left", f"it left the cluster during its probe, {took:.0f} s after it began")])
            if waiting and took >= limit:
                why = f"its probe did not answer in {took:.0f} s" + \
                    (f" (another worker passed its own in {first:.0f} s)" if first is not None else "")
                for addr in list(waiting):
                    waiting.pop(addr).cancel()
                    out[addr] = (None, [("probe", why)])
        return out

    def _answer(self, fut) -> tuple[str | None, list[tuple[str, str]]]:
        """A finished probe: (the name the worker gives itself, its problems)."""
        try:
            result = fut.result()
            return result.get("name"), [tuple(p) for p in result["problems"]]
        except Exception as exc:  # noqa: BLE001 (a worker that went, or whose probe failed)
            if _cluster_gone(exc) and not self.worker_names():
                raise
            return None, [("probe", f"{type(exc).__name__}: {exc}")]

    def _as_done(self, futures: dict, run, plugin, send):
        """(job, its outcome) as each of ``futures`` finishes (they are popped; ``send`` may add
        more meanwhile). Every LOOK seconds it looks at the workers there are: a job that waits
        for workers that all left the cluster (one it was sent to alone, killed) comes back as a
        fault of the machine, which sends it to a live worker (``_Taking.elsewhere_or_fault``);
        when none of the workers that proved they can grade is left (killed, or restarted by its
        nanny under a new address), those there now prove themselves and the jobs go to them."""
        from distributed import wait
        looked = time.monotonic()
        while futures:
            try:
                wait(list(futures), timeout=LOOK, return_when="FIRST_COMPLETED")
            except TimeoutError:
                pass
            for fut in [f for f in futures if f.done()]:
                self._sent_to.pop(fut.key, None)
                yield futures.pop(fut), _outcome(fut)
            if futures and time.monotonic() - looked >= LOOK:
                looked = time.monotonic()
                yield from self._stranded(futures, run, plugin, send)

    def _stranded(self, futures: dict, run, plugin, send):
        """(job, a fault of the machine) for each job of ``futures`` that only workers no longer
        in the cluster may run; none of the workers that proved themselves left: see ``_as_done``."""
        live = self.worker_names()
        if not set(self._allowed) & set(live):
            self._allowed = self.admit(run, sorted({j.chapter for j in futures.values()}), plugin)
            for fut, job in list(futures.items()):
                fut.cancel()
                futures.pop(fut)
                self._sent_to.pop(fut.key, None)
                send(job, self._allowed)
            return
        for fut, job in list(futures.items()):
            where = self._sent_to.get(fut.key) or []
            if where and not set(where) & set(live) and not fut.done():
                fut.cancel()
                futures.pop(fut)
                self._sent_to.pop(fut.key, None)
                yield job, {"ok": False, "failure": MACHINERY, "seconds": 0.0, "flags": [], "worker": where[0],
                            "error": f"{', '.join(where)} left the cluster before the job was done"}

    def autograde(self, run, jobs: list[Job]):
        """Grade ``jobs`` on the cluster; yield each as it is done, its seals
        checked and its key in the ledger. Jobs the ledger holds are not sent.

        A job that fails outside the student's kernel (``MACHINERY``: the worker,
        its sandbox, nbgrader's start; or, on a remote cluster, a kernel that cannot
        start there) is sent to a worker that has not failed it yet; when no worker
        is left, it is not yielded, gets no score, and once the others are done the
        run stops (GradingStopped) naming the fault: nothing after this step runs,
        so no feedback is made and no class file written."""
        from .preflight import GradingStopped
        taking = _Taking(self, run, Ledger(protocol.gradebook_url(run.root)))
        try:
            todo = []
            for job in taking.from_ledger(jobs, todo):
                yield job
            if not todo:
                return
            chapters = sorted({j.chapter for j in run.everyone})
            self._digests.pop("chapter_digests", None)   # a long-lived grader's chapters may have changed since
            self.start()
            plugin = self._plugin(run) if self.remote or self.carried else None
            try:
                self._allowed = self.admit(run, sorted({j.chapter for j in todo}), plugin)
            except NoWorker as exc:
                raise GradingStopped(f"grade: stopped before scoring anyone: {exc}.\n  {NOTHING_SCORED} "
                                     "Start a worker and run the same command again.") from exc
            futures: dict = {}

            def send(job: Job, where: list[str]):
                fut = self.client.submit(grade_notebook, self._spec(run, job, plugin, chapters), self.grader,
                                         key=f"grade-{job_key(job)}-{os.urandom(3).hex()}", pure=False,
                                         workers=list(where), allow_other_workers=False)
                futures[fut] = job
                self._sent_to[fut.key] = list(where)
                return fut

            for job in todo:
                send(job, self._allowed)
            try:
                for job, result in self._as_done(futures, run, plugin, send):
                    if taking.elsewhere_or_fault(job, result, send):
                        continue
                    taking.take(job, result)
                    yield job
            except Exception as exc:
                if isinstance(exc, NoWorker) or _cluster_gone(exc):
                    what = str(exc) if isinstance(exc, NoWorker) else \
                        f"the Dask cluster went away ({type(exc).__name__}: {exc})"
                    raise SystemExit(f"grade: {what}; {len(jobs) - len(futures)} of {len(jobs)} notebooks are done "
                                     "and kept. Run the same command again to grade the rest.") from exc
                raise
            finally:
                for fut in futures:
                    fut.cancel()
            if taking.faults:
                raise GradingStopped(_fault_message(taking.faults, len(jobs), run))
        finally:
            taking.close()


def _outcome(fut) -> dict:
    """What a finished grading job says; a job whose workers died or that Dask gave up is a fault
    of the machine (a scheduler that went away stops the run)."""
    try:
        return fut.result()
    except Exception as exc:  # noqa: BLE001 (the job killed its workers, or Dask gave it up)
        if _cluster_gone(exc):
            raise
        return {"ok": False, "failure": MACHINERY, "seconds": 0.0, "flags": [], "worker": None,
                "error": f"{type(exc).__name__}: {exc}"}


class _Taking:
    """What the grader does with each job's outcome in one ``Engine.autograde``: the ledger's
    record, the gradebook (written for jobs that carry their files), the seal check, and
    the jobs that failed in the machinery (sent elsewhere, or kept as faults)."""

    def __init__(self, engine: Engine, run, ledger: Ledger):
        self.engine, self.run, self.ledger = engine, run, ledger
        self.gb = None
        self.tried: dict[str, set] = {}
        self.faults: list = []

    def gradebook(self):
        if self.gb is None:
            from nbgrader.api import Gradebook
            self.gb = Gradebook(protocol.gradebook_url(self.run.root), protocol.COURSE_ID)
        return self.gb

    def from_ledger(self, jobs: list[Job], todo: list[Job]):
        """Yield the jobs the ledger holds (finished before: kept as they were); the others go to ``todo``."""
        run = self.run
        for job in jobs:
            if job.key is None:   # no reuse step ran: a key of this run only
                job.key = os.urandom(16).hex()
        keys = {job_key(j): j for j in jobs}
        if run.regrade:
            self.ledger.forget(list(keys))
        done = self.ledger.finished(list(keys))
        for k, job in keys.items():
            if k in done and run.graded_path(job).exists():
                rec = done[k]
                job.ok, job.failure, job.seconds, job.sealed = True, None, rec.get("seconds", 0.0), True
                for f in rec.get("flags", []):
                    flag = Flag.from_json(f)
                    job.flag(flag.kind, flag.detail)
                yield job
            else:
                todo.append(job)

    def elsewhere_or_fault(self, job: Job, result: dict, send) -> bool:
        """A job that failed in the machinery (or, on a cluster elsewhere, whose kernel could not
        start): sent to a worker that has not failed it, or kept as a fault when none is left.
        True when the job is not taken now."""
        from .preflight import INFRASTRUCTURE
        engine, run = self.engine, self.run
        elsewhere = engine.remote or engine.carried   # a kernel that cannot start on that worker
        if not (result["failure"] == MACHINERY or (elsewhere and result["failure"] in INFRASTRUCTURE)):
            return False
        been = self.tried.setdefault(job_key(job), set())
        been.add(result.get("worker"))
        live = engine.worker_names()
        others = [w for w in engine._allowed if w not in been and w in live]
        if others and result.get("worker") is not None:   # another worker may run it
            send(job, others)
            return True
        # no worker can: no score, and the run stops
        workers = sorted(live.get(w, w) for w in been if w)
        if result["failure"] == MACHINERY:
            self.faults.append((job, result, workers))
            run.log(job).write_text(f"the grading job failed outside the student's kernel on "
                                    f"{', '.join(sorted(w for w in been if w)) or 'the cluster'}:"
                                    f"\n{result.get('trace') or result['error']}\n")
            return True
        if elsewhere:   # a kernel that could start on none of the workers that tried
            self.faults.append((job, {**result, "error": f"{result['failure'].replace('_', ' ')} on every "
                                      f"worker that tried (see {run.log(job)})"}, workers))
            return True
        return False

    def take(self, job: Job, result: dict) -> None:
        """The job's outcome, written: its flags; what a worker that shares nothing returned (the
        grader writes it); its seal check; its key in the ledger once its seals are checked."""
        from .reuse import TRANSIENT
        run = self.run
        job.ok, job.failure, job.seconds = result["ok"], result["failure"], result["seconds"]
        for f in result["flags"]:
            flag = Flag.from_json(f)
            job.flag(flag.kind, flag.detail)
        if "outputs" in result:   # a worker that shares nothing: the grader writes what it returned
            carried_mod.accept(run, job, result["outputs"], self.gradebook())
            if run.graded_path(job).exists() and result["outputs"].get("files"):
                carried_mod.record_line(run, job, result.get("worker"))
        if job.ok and not job.failure and run.graded_path(job).exists():
            if not job.sealed:
                self.engine.grader.check(run, job, self.gradebook())
            # recorded once its seals are checked: a record is a result kept as it is
            if job.sealed and not any(f.kind in TRANSIENT for f in job.flags):
                self.ledger.record(job_key(job), job, {"seconds": job.seconds, "worker": result.get("worker"),
                                                       "flags": [f.to_json() for f in job.flags]})

    def close(self) -> None:
        if self.gb is not None:
            self.gb.close()
        self.ledger.close()


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
