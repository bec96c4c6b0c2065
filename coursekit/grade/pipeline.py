"""Grade a class: every submission in submitted/<student>/<chapter>/.

A run is a ``Run`` (the context every step reads and writes) passed through
an ordered list of small steps, each ``step(run) -> None``:

    reuse      keep the result of every notebook nothing of whose grade changed since it was
               graded (coursekit.grade.reuse); only the others go on (--regrade: none is kept)
    kernels    start the warm kernel factory (it imports torch while intake and repair run); a class
               with no gradebook yet has its chapters recorded meanwhile, in a file of the run's own
    intake     copy each submission to the run's scratch folder (submitted/ is never written)
    repair     fix on that copy what stock nbgrader trips over, noting each repair as a Flag
    preflight  one graded kernel per chapter on its release notebook (chapters side by side);
               on failure stop, writing nothing
    gradebook  record the chapters' cells in the gradebook (first write of the run; one process), or
               link the record made while the factory started into place (GradebookAhead)
    autograde  nbgrader autograde on the copies, one student at a time per worker, workers over the
               cores, the longest first; each kernel forked in the sandbox from a warm process that
               imported torch once (coursekit.grade.zygote), with the guard booted and no network; a run
               whose notebooks mostly fail for one reason of the machine stops there. While the others
               are graded, each finished notebook goes on at the lowest priority
               to its seal check, figures and feedback page (``Lane``), which then use only the time the
               kernels leave; the steps below do what the lane did not get to
    seal check a test cell keeps its points only if each hidden check left a valid seal
    feedback   nbgrader's feedback pages, one process per worker (hidden tests, tracebacks and seals
               removed; each exercise named; pending points shown)
    export     grades.csv (nbgrader export, plus auto points and points awaiting grading), the
               per-exercise and LMS files, and the keys of what this run graded
    report     reports/class_report.html and the summary table, in the chapter's language

Reruns are safe and cheap: a student graded twice keeps one result, manual
grades entered in the formgrader stay, and what did not change is not graded
again.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import os
import secrets
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from grading import protocol

from ..author.build import ROOT
from ..base import runner
from ..base.nbgrader_run import env_with_bin
from ..report.flags import Flag
from . import account, figures, kernel_client, kernels, reuse, seals
from . import intake as intake_mod
from . import preflight as pre
from .engine import Grader, from_environment
from .intake import Job, discover

STATE = ".grading"
runner.preload("coursekit.grade.feedback")   # the feedback step's forked command (feedback.pages)
for _module in ("coursekit.grade.replay", "coursekit.grade.batched", "coursekit.grade.kernel_client",
                "coursekit.author.build"):   # what each notebook's forked autograde imports (nbgrader_config.py)
    runner.preload(_module)
__all__ = ["grade", "Job", "Run", "STEPS", "STATE", "class_jobs", "discover", "uid"]
# What a gradebook says when another grader got there first: SQLite's lock, and the
# unique-key or serialisation errors of a database server (PostgreSQL) when two graders
# add the same student or course at once. The notebook is graded again, alone.
BUSY_SIGNS = ("database is locked", "UniqueViolation", "duplicate key value", "IntegrityError",
              "could not serialize access", "deadlock detected")


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
    class_files: bool = True         # write grades.csv, the LMS files and the class report at the end
    ahead: bool = False              # record a new gradebook while the kernel factory starts (GradebookAhead)
    gradebook_ahead: GradebookAhead | None = None
    similarity_aside: object | None = None   # the process making the report's similarity findings ahead

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
        warm.zygote = kernels.Zygote(root, state, warm.base, sandbox, kernels.notebook_imports(root, chapters))
        threading.Thread(target=runner.warm_up, daemon=True).start()
        return warm

    def socket(self, say=print) -> str | None:
        """The factory's socket; a factory that died is started again first."""
        z = self.zygote
        if z is not None and z.socket and (z.proc is None or z.proc.poll() is not None):
            imports = kernels.notebook_imports(self.root, sorted(self.ready))
            z.close()
            self.zygote = z = kernels.Zygote(self.root, self.root / STATE, self.base, self.sandbox, imports)
        if z is None:
            return None
        return z.socket or z.wait(say)

    def chapter_key(self, run: Run, chapter: str) -> str | None:
        return f"{run.keys.run}:{run.keys.chapters.get(chapter)}" if run.keys else None

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
        shutil.rmtree(self.base, ignore_errors=True)


def new_chapters(run: Run) -> list[str]:
    """The run's chapters whose one-off steps (preflight, the gradebook's record)
    are still to do: all of them, but for a long-lived grader that did them already."""
    if run.shared is None:
        return run.chapters
    return [ch for ch in run.chapters
            if run.shared.ready.get(ch) is None or run.shared.ready[ch] != run.shared.chapter_key(run, ch)]


# ------------------------------------------------------------------ the steps

def rules(run: Run) -> dict:
    """The run's rules that a grade depends on (part of every notebook's reuse key)."""
    return {"sandbox": run.sandbox, "timeout": run.timeout, "cell_timeout": run.cell_timeout}


def step_reuse(run: Run) -> None:
    """Sort the jobs into those to grade, those whose feedback alone is made
    again (only their manual grades changed) and those kept as they are."""
    keys = run.keys = reuse.Keys.of(run.root, run.jobs, rules(run))
    if run.regrade or not reuse.may_reuse(run.root, run.state, run.jobs):
        for job in run.jobs:
            job.key = keys.key(run.root, job)
        return
    from nbgrader.api import Gradebook
    with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
        run.jobs, run.feedback_only, run.reused = reuse.sort_out(run.root, run.state, gb, keys, run.jobs)
    for job in run.feedback_only + run.reused:
        job.flags = saved_flags(run.state, job)
    if run.feedback_only or run.reused:
        run.say(f"grade: {len(run.reused) + len(run.feedback_only)} notebooks unchanged since they were graded: "
                f"their results are kept ({len(run.feedback_only)} of them get new feedback for new manual "
                f"grades); {len(run.jobs)} to grade. --regrade grades everything again.")


def step_kernels(run: Run) -> None:
    """The warm kernel factory starts now (it imports torch while intake and repair run);
    a long-lived grader's factory is already warm."""
    if run.shared is not None:
        run.zygote_socket = run.shared.socket(run.say) if run.warm and run.jobs else None
        return
    if run.warm and run.jobs:
        run.zygote = kernels.Zygote(run.root, run.state, run.base, run.sandbox,
                                    kernels.notebook_imports(run.root, run.chapters))
    if run.ahead and run.jobs:
        run.gradebook_ahead = GradebookAhead.start(run)


class GradebookAhead:
    """A new gradebook's record of the run's chapters (nbgrader generate_assignment,
    1.5-3 s), made while the kernel factory imports torch and the preflight runs,
    when one core would otherwise wait.

    Nothing may be written before the preflight passes, so it is made in a file
    of the run's own and linked into place by the gradebook step (``place``),
    only where there was no gradebook at all (a SQLite file that does not exist:
    a class's first run). A gradebook that exists may be written by others
    meanwhile (the formgrader, another grader): its record is made in the
    gradebook step, as before; so is this one's when it could not be placed."""

    def __init__(self, run: Run, target: Path):
        self.target = target
        self.path = run.scratch.parent / "gradebook-ahead.db"
        self.chapters = new_chapters(run)
        self.failed: list[str] | None = None
        self.thread = threading.Thread(target=self._make, args=(run,), name="gradebook-ahead", daemon=True)

    @classmethod
    def start(cls, run: Run) -> GradebookAhead | None:
        url = protocol.gradebook_url(run.root)
        if run.shared is not None or not url.startswith("sqlite:///"):
            return None
        target = Path(url[len("sqlite:///"):])
        if target.exists():
            return None
        ahead = cls(run, target)
        ahead.thread.start()
        return ahead

    def _make(self, run: Run) -> None:
        from ..author.release import generate_assignments
        scratch = Path(tempfile.mkdtemp(prefix="release-ahead-", dir=self.path.parent))
        try:
            self.failed = generate_assignments(self.chapters, run.root, scratch,
                                               run.state / "logs" / "generate_assignment_ahead.log",
                                               gradebook=True, db_url=f"sqlite:///{self.path}")
        except Exception:  # noqa: BLE001 (the gradebook step records them itself)
            self.failed = self.chapters
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def wait(self) -> None:
        self.thread.join()

    def place(self, chapters: list[str]) -> bool:
        """Whether the record of ``chapters`` is now the course's gradebook: made,
        for these chapters, and linked where still no gradebook is."""
        self.wait()
        if self.failed is None or self.failed or sorted(chapters) != sorted(self.chapters) or not self.path.exists():
            return False
        try:
            os.link(self.path, self.target)   # never over a gradebook that appeared meanwhile
        except OSError:
            return False
        self.path.unlink(missing_ok=True)
        return True


def step_intake(run: Run) -> None:
    """Copy every submission to the run's scratch folder; note each chapter's language."""
    for job in run.jobs:
        intake_mod.copy_submission(run.root, run.scratch, job)
    for ch in sorted({j.chapter for j in run.everyone}):
        meta = seals.read(run.root / "source" / ch / f"{ch}.ipynb").metadata
        run.langs[ch] = meta.get("course", {}).get("lang", "zh")


def step_repair(run: Run) -> None:
    for job in run.jobs:
        intake_mod.repair(run.root, run.scratch / job.student / job.chapter, job)


def step_preflight(run: Run) -> None:
    """One graded kernel per chapter, exactly as a notebook will get it, the
    chapters side by side over the workers; stop on the first failure."""
    if run.zygote is not None:
        with run.clock("kernel factory start (waiting)"):
            run.zygote_socket = run.zygote.wait(run.say)
    jobs = [Job(ch, "_preflight") for ch in new_chapters(run)]
    try:
        failures = pre.run_probes([probe_request(run, job) for job in jobs], at_once=run.workers)
    finally:
        for job in jobs:
            run.key_file(job).unlink(missing_ok=True)
    for job, why in zip(jobs, failures):
        if why is not None:
            factory = run.zygote or (run.shared.zygote if run.shared else None)
            if factory is not None and factory.log.exists():
                why += factory.log.read_text(errors="replace")[-3000:]   # a forked kernel's last words
            kind = pre.classify(why)
            raise pre.GradingStopped(pre.message(kind if kind in pre.INFRASTRUCTURE else "kernel_start",
                                                 f"the preflight kernel of {job.chapter}", why))


def probe_request(run: Run, job: Job) -> dict:
    """What the preflight kernel of ``job``'s chapter is started with: its own
    seal key, uid, socket folder and copy of the release folder."""
    run.new_key(job)
    runtime = kernels.socket_folder(run.base, uid(job))
    workdir = pre.workdir_for(run.base, run.root, job.chapter)
    if os.geteuid() == 0:
        os.chown(workdir, uid(job), uid(job))
    return {"spec_dir": run.state / "kernels" / "kernels", "workdir": workdir,
            "env": runner.without_grader_secrets(run.kernel_env(job, runtime)),
            "code": pre.probe_code(run.root, job.chapter), "log": run.log(job), "ipc_ip": str(runtime / "kernel")}


def step_gradebook(run: Run) -> None:
    """Record each chapter's source cells in the gradebook (needed to restore
    read-only cells and to know the points), without touching release/.

    Graders running at once in the same course folder take turns here:
    creating a new gradebook or its course row is not safe to do twice at once."""
    chapters = new_chapters(run)
    if not chapters:
        return
    from ..author.release import generate_assignments
    with runner.one_at_a_time(run.state):
        if run.gradebook_ahead is None or not run.gradebook_ahead.place(chapters):   # else recorded meanwhile
            scratch = Path(tempfile.mkdtemp(prefix="release-scratch-", dir=run.state))
            log = run.state / "logs" / "generate_assignment.log"
            try:
                failed = generate_assignments(chapters, run.root, scratch, log, gradebook=True)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if failed:
                said = log.read_text(errors="replace") if log.exists() else \
                    "(it wrote no log: its process did not start)"
                raise SystemExit(f"grade: nbgrader generate_assignment failed for {', '.join(failed)}:\n{said}")
    if run.shared is not None:   # preflighted (the step before) and recorded: not again while nothing changes
        run.shared.ready.update({ch: run.shared.chapter_key(run, ch) for ch in chapters})


def autograde_one(run: Run, job: Job) -> Job:
    """nbgrader autograde of one scratch copy; the failure's kind goes to ``job.failure``."""
    run.new_key(job)
    runtime = kernels.socket_folder(run.base, uid(job))
    log = run.log(job)
    start = time.monotonic()
    # IPC sockets for every kernel, warm or cold: a kernel has no network at all
    args = ["autograde", job.chapter, f"--student={job.student}", "--force", "--log-level=WARN",
            f"--CourseDirectory.submitted_directory={run.scratch}",
            "--KernelManager.transport=ipc", f"--KernelManager.ip={runtime / 'kernel'}",
            f"--AsyncKernelManager.client_class={kernel_client.NAME}"]   # no 0.2 s wait after the handshake
    # (nbgrader's own autograde steps, with the replayed cells and one gradebook commit: nbgrader_config.py)
    env = run.kernel_env(job, runtime)
    if os.environ.get(account.ENV):   # the per-notebook account (bench/grade_course.py): each step timed
        env[account.ENV] = os.environ[account.ENV]
        rc = runner.run_forked("coursekit.grade.account:timed_nbgrader", args, run.root, env, log, run.timeout)
    else:
        rc = runner.run_nbgrader(args, run.root, env, log, run.timeout)
    job.seconds = time.monotonic() - start
    job.ok, job.failure = True, None
    if rc is None:
        job.flag("notebook_time_limit", run.timeout)
        job.failure = "notebook_time_limit"
    elif rc != 0:
        text = log.read_text(errors="replace")
        job.ok = False
        job.failure = "gradebook_busy" if any(s in text for s in BUSY_SIGNS) else pre.classify(text)
    shutil.rmtree(runtime, ignore_errors=True)
    return job


def autograde_on_worker(spec: dict, job: Job, base: Path, socket: str | None, workers: int) -> Run:
    """``job``'s autograde as a grading engine's job (coursekit.grade.engine), on a
    worker whose kernel factory is in ``base`` (its socket ``socket``); returns its run."""
    run = Run(Path(spec["root"]), [job], sandbox=spec["sandbox"], warm=spec["warm"], workers=workers,
              timeout=spec["timeout"], cell_timeout=spec["cell_timeout"], say=lambda *a: None)
    run.scratch, run.base, run.zygote_socket = Path(spec["scratch"]), base, socket
    autograde_one(run, job)
    if job.failure == "gradebook_busy":   # another grader held the gradebook: once more
        autograde_one(run, job)
    return run


def probe_on_worker(spec: dict, base: Path, socket: str | None) -> str | None:
    """A worker's proof that it can grade (coursekit.grade.engine.probe_worker): the
    preflight of the run's first chapter, one graded kernel from its factory in its
    sandbox; None when it passed, else what went wrong."""
    run = Run(Path(spec["root"]), [], sandbox=spec["sandbox"], warm=spec["warm"], timeout=spec["timeout"],
              cell_timeout=spec["cell_timeout"], say=lambda *a: None)
    run.base, run.zygote_socket = base, socket
    job = Job(spec["chapters"][0], f"_probe{os.getpid()}")
    try:
        return pre.run_probes([probe_request(run, job)], at_once=1)[0]
    finally:
        run.key_file(job).unlink(missing_ok=True)


def autograde_in_threads(run: Run, jobs: list[Job]):
    """Each job's autograde in a thread pool of ``run.workers`` threads, as they finish."""
    with cf.ThreadPoolExecutor(run.workers) as pool:
        for fut in cf.as_completed([pool.submit(autograde_one, run, j) for j in jobs]):
            yield fut.result()


def step_autograde(run: Run) -> None:
    """Every notebook's autograde: on the run's engine (a Dask cluster, coursekit.grade.engine),
    or in a thread pool of this process; what follows each notebook's autograde goes on in the
    lane as it finishes."""
    done = 0
    run.similarity_aside = similarity_aside(run)
    each = run.engine.autograde(run, longest_first(run)) if run.engine is not None else \
        autograde_in_threads(run, longest_first(run))
    with Lane(run) as lane:
        for job in each:
            done += 1
            elapsed = time.monotonic() - run.t0
            run.say(f"  [{done}/{len(run.jobs)}] {job.student}/{job.chapter}  {job.seconds:.1f} s"
                    f"  (elapsed {elapsed:.0f} s, about {elapsed / done * (len(run.jobs) - done):.0f} s left)")
            if done < len(run.jobs):   # the last one: nothing is left to overlap with
                lane.put(job)
    for job in [j for j in run.jobs if j.failure == "gradebook_busy"]:  # once more, alone
        autograde_one(run, job)
    failed = [j for j in run.jobs if j.failure]
    pre.stop_if_infrastructure(run.jobs, {f"{j.chapter}__{j.student}": run.log(j).read_text(errors="replace")
                                          for j in failed if run.log(j).exists()})
    missing = [j for j in run.jobs if not run.graded_path(j).exists()]
    for job in missing:  # a notebook nbgrader could not finish is scored as empty, and says why
        score_as_empty(run, job)
    remember_seconds(run)


def similarity_aside(run: Run):
    """The class report's similarity findings (coursekit.report.similarity), made by a
    process at the lowest priority while the notebooks are graded: they follow from
    submitted/ alone. The report step stops it and makes what it did not finish."""
    if not (run.class_files and run.report and run.workers > 1):
        return None
    from ..report.report import similarity_request
    chapters = sorted({p.parent.name for p in (run.root / "submitted").glob("*/*/*.ipynb")})
    return runner.start_forked("coursekit.report.similarity:precompute_aside",
                               similarity_request(run.root, chapters, run.langs), run.root, env_with_bin(),
                               run.state / "logs" / "similarity_aside.log")


def stop_similarity_aside(run: Run) -> None:
    if run.similarity_aside is not None:
        if run.similarity_aside.is_alive():
            runner.stop_forked(run.similarity_aside)
        run.similarity_aside = None


class Lane:
    """What follows a notebook's autograde (seal check, figures, feedback page),
    done for the notebooks already graded while the others still are.

    On two cores the graded kernels leave a core idle for about a sixth of the
    autograde step (each waits on its nbgrader, nbgrader on it); the feedback
    pages fill that time. The lane takes what has finished, a few notebooks at
    a time, and makes their pages in one process forked at the lowest
    priority, so it never takes a core from a kernel. When the autograde step
    ends, the pages the lane is still making are stopped (on a busy machine a
    process at the lowest priority could take long) and, with whatever it did
    not start, left to the steps after autograde: ``Job.paged`` says which
    pages it made. A notebook whose autograde failed is never taken: it may
    yet be scored as empty."""

    BATCH = 4

    def __init__(self, run: Run):
        import queue
        self.run, self.todo, self.closed = run, queue.SimpleQueue(), threading.Event()
        self.proc = None
        self.lock = threading.Lock()
        self.thread = None
        if run.class_files and run.workers > 1:   # else one notebook at a time (the service) or one core
            self.thread = threading.Thread(target=self._work, name="feedback-lane", daemon=True)

    def __enter__(self) -> "Lane":
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.thread is None:
            return
        with self.lock:
            self.closed.set()
            if self.proc is not None and self.proc.is_alive():
                runner.stop_forked(self.proc)
        self.todo.put(None)
        self.thread.join()

    def put(self, job: Job) -> None:
        if self.thread is not None and job.ok and not job.failure and not job.reused:
            self.todo.put(job)

    def _work(self) -> None:
        import queue
        while True:
            job = self.todo.get()
            if job is None or self.closed.is_set():
                return
            batch = [job]
            while len(batch) < self.BATCH:
                try:
                    job = self.todo.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    return
                batch.append(job)
            try:
                self._follow([j for j in batch if self.run.graded_path(j).exists()])
            except Exception:  # noqa: BLE001 (the steps after autograde make what the lane could not)
                pass

    def _follow(self, batch: list[Job]) -> None:
        run = self.run
        from nbgrader.api import Gradebook
        with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
            batch = [job for job in batch if job.sealed or self._sealed(job, gb)]
        if not batch:
            return
        figures.fill_graded(run, batch)
        with self.lock:
            if self.closed.is_set():
                return
            self.proc = runner.start_forked("coursekit.grade.feedback:pages_aside",
                                            {"notebooks": [(j.chapter, j.student) for j in batch]}, run.root,
                                            page_env(run), run.state / "logs" / "generate_feedback__lane.log")
        self.proc.join()
        if self.proc.exitcode == 0 and not self.closed.is_set():
            for job in batch:
                job.paged = True

    def _sealed(self, job: Job, gb) -> bool:
        """The seal check of ``job``. One that cannot finish here (the gradebook
        busy with the notebooks still being graded) takes nothing away: the job
        is left to the seal check step, which fails closed when nothing else
        writes."""
        try:
            check_seals(self.run, job, gb)
        except Exception:  # noqa: BLE001
            gb.db.rollback()
            return False
        job.sealed = True
        return True


SECONDS = "seconds.json"


def longest_first(run: Run) -> list[Job]:
    """The jobs, those expected to take longest first (each chapter's median
    time in earlier runs; else its source's size), so that no worker is left
    with a long notebook while the others idle."""
    try:
        seen = json.loads((run.state / SECONDS).read_text())
    except (OSError, ValueError):
        seen = {}
    return sorted(run.jobs, key=lambda j: -float(seen.get(j.chapter, source_size(run, j.chapter) / 1e5)))


def source_size(run: Run, chapter: str) -> int:
    """A chapter's cost, roughly: the size of its source notebook."""
    return (run.root / "source" / chapter / f"{chapter}.ipynb").stat().st_size


def remember_seconds(run: Run) -> None:
    try:
        seen = json.loads((run.state / SECONDS).read_text())
    except (OSError, ValueError):
        seen = {}
    for ch in run.chapters:
        times = sorted(j.seconds for j in run.jobs if j.chapter == ch and not j.failure)
        if times:
            seen[ch] = round(times[len(times) // 2], 2)
    runner.write_atomically(run.state / SECONDS, lambda tmp: tmp.write_text(json.dumps(seen, indent=1)))


def score_as_empty(run: Run, job: Job) -> None:
    """Grade the empty release in place of the scratch copy; the submitted file stays as it is."""
    log = run.log(job)
    if log.exists():  # the failed attempt's log stays for the instructor
        shutil.copy(log, run.log(job, ".failed.log"))
    kind = job.failure if job.failure in ("kernel_died", "notebook_time_limit") else "autograde_failed"
    if kind == "autograde_failed" and log.exists() and pre.classify(log.read_text(errors="replace")) == "kernel_died":
        kind = "kernel_died"
    job.flag("scored_empty", kind)
    intake_mod.write_release_copy(run.root, job.chapter, run.scratch / job.student / job.chapter / f"{job.chapter}.ipynb")
    autograde_one(run, job)
    if not run.graded_path(job).exists():
        job.flag("not_graded")


def step_seal_check(run: Run) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
        for job in run.jobs:
            if not job.sealed:   # else checked as it was graded (coursekit.grade.engine)
                seal_check_one(run, job, gb)


def seal_check_one(run: Run, job: Job, gb) -> None:
    """The seal check of one graded notebook; failing closed (no verified seal, no points)."""
    try:
        check_seals(run, job, gb)
    except Exception as exc:  # noqa: BLE001
        gb.db.rollback()
        _zero_auto_scores(gb, job)
        job.flag("seals_unchecked", f"{type(exc).__name__}: {exc}")
    job.sealed = True


def seal_check_as_it_comes(run: Run, job: Job, gb, tries: int = 3) -> None:
    """The seal check of a notebook as it comes back from a grading engine
    (coursekit.grade.engine), while others are still written to the gradebook.
    One that cannot finish (the gradebook busy) is tried again and then, if it
    still cannot, takes nothing away (a busy gradebook is the machine's, never
    a score): ``job.sealed`` stays False and the seal check step, which fails
    closed when nothing else writes, does it."""
    for attempt in range(tries):
        flags = list(job.flags)
        try:
            check_seals(run, job, gb)
        except Exception:  # noqa: BLE001
            gb.db.rollback()
            job.flags = flags          # what the attempt flagged is flagged again by the next
            time.sleep(1 + attempt)
            continue
        job.sealed = True
        return


def check_seals(run: Run, job: Job, gb) -> None:
    """Zero any auto-graded cell whose checks left no valid seal; flag what the outputs show."""
    path = run.graded_path(job)
    if not path.exists():
        job.flag("not_graded")
        return
    key = run.key_file(job).read_bytes() if run.key_file(job).exists() else None
    nb = seals.read(path)
    texts = seals.cell_texts(nb)
    for kind in seals.flags_from_outputs("\n".join(texts.values())):
        job.flag(kind)
    checks = expected_checks(run, job.chapter)
    sub = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    bad = seals.unsealed(sub.grades, checks, texts, key)
    for grade in bad:
        grade.auto_score = 0.0
        job.flag("seal_missing", grade.name)
    if bad:
        gb.db.commit()
    if seals.cut_huge_outputs(nb):  # in the autograded copy (what feedback is made from)
        os.chmod(path, 0o644)
        nbformat.write(nb, path)
        job.flag("huge_output")


def expected_checks(run: Run, chapter: str):
    """The checks each test cell of the chapter's source must seal (read once a run)."""
    if chapter not in run.expected:
        run.expected[chapter] = seals.expected_checks(seals.read(run.root / "source" / chapter / f"{chapter}.ipynb"))
    return run.expected[chapter]


def page_env(run: Run) -> dict:
    """The environment of the processes that make this run's feedback pages: the parts
    every page of a chapter shares are kept in the run's scratch folder (coursekit.grade.parts)."""
    from .parts import ENV
    if run.scratch is None:     # a run without its own folder: each process keeps its parts in memory
        return env_with_bin()
    folder = run.scratch.parent / "page-parts"
    folder.mkdir(exist_ok=True)
    return env_with_bin({ENV: str(folder)})


def step_feedback(run: Run) -> None:
    """The feedback pages of what this run graded (and of notebooks whose manual
    grades changed), one process per worker, each making many pages."""
    todo = sorted((j for j in run.jobs + run.feedback_only if run.graded_path(j).exists() and not j.paged),
                  key=lambda j: -source_size(run, j.chapter))   # the biggest pages first
    shares = [todo[i::run.workers] for i in range(run.workers)]
    shares = [s for s in shares if s]

    def make(i_share):
        i, share = i_share
        log = run.state / "logs" / f"generate_feedback__{i}.log"
        rc = runner.run_forked("coursekit.grade.feedback:pages", {"notebooks": [(j.chapter, j.student) for j in share]},
                               run.root, page_env(run), log)
        if rc != 0:
            run.say(f"grade: some feedback pages could not be made (see {log.relative_to(run.root)})")

    with cf.ThreadPoolExecutor(max(1, len(shares))) as pool:
        list(pool.map(make, enumerate(shares)))
    for job in run.jobs:  # only this run's keys: another grader may be running on other chapters
        run.key_file(job).unlink(missing_ok=True)


def step_export(run: Run) -> None:
    """grades.csv and the saved flags. The class-wide outputs are written one
    grader at a time: whichever writes them last has seen every result."""
    from ..report import export as export_mod
    from ..report import report as report_mod
    log = run.state / "logs" / "export.log"

    def export(tmp: Path) -> None:
        if runner.run_nbgrader(["export", "--to", str(tmp), "--log-level=ERROR"], run.root, env_with_bin(), log):
            raise SystemExit(f"grade: nbgrader export failed:\n{log.read_text(errors='replace')}")
        tmp.write_text(report_mod.csv_with_scores(run.root, tmp.read_text()))

    with runner.one_at_a_time(run.state):
        save_flags(run.state, run.jobs)
        if run.jobs or run.feedback_only:
            from nbgrader.api import Gradebook
            with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
                reuse.keep(run.root, run.state, gb, run.jobs + run.feedback_only)
        if not run.class_files:   # a long-lived grader writes them when it is idle (coursekit.serve.service)
            return
        runner.write_atomically(run.root / "grades.csv", export)
        chapters = sorted({j.chapter for j in class_jobs(run.root, run.state)})
        for path in export_mod.write_all(run.root, protocol.gradebook_url(run.root), chapters):
            run.say(f"grade: {path.relative_to(run.root)}")


def step_report(run: Run) -> None:
    from ..report import report as report_mod
    if not run.class_files:
        return
    stop_similarity_aside(run)
    if run.report:
        with runner.one_at_a_time(run.state):
            path = report_mod.write_report(run.root, class_jobs(run.root, run.state), langs=run.langs)
        run.say(f"grade: class report {path.relative_to(run.root)}")
    run.say(report_mod.summary_table(run.root, run.everyone, langs=run.langs))


STEPS: list[tuple[str, Callable[[Run], None]]] = [
    ("reuse", step_reuse), ("kernels", step_kernels),
    ("intake", step_intake), ("repair", step_repair), ("preflight", step_preflight),
    ("gradebook", step_gradebook), ("autograde", step_autograde), ("seal check", step_seal_check),
    ("figures", figures.step), ("feedback", step_feedback), ("export", step_export), ("report", step_report)]


def run_steps(run: Run, steps=STEPS) -> None:
    for name, step in steps:
        with run.clock(name):
            step(run)


# ------------------------------------------------------------------ the command

# what a grading engine's jobs run: a worker's kernel factory, a notebook's autograde, its seal check
GRADER = Grader(warm=Warm, grade=autograde_on_worker, check=seal_check_as_it_comes, probe=probe_on_worker,
                seal=seal_check_one)


def grade(root: Path = ROOT, chapter: str | None = None, student: str | None = None, jobs: int | None = None,
          sandbox: bool = True, timeout: int = protocol.NOTEBOOK_TIMEOUT_S,
          cell_timeout: int = protocol.CELL_TIMEOUT_S, report: bool = True, quiet: bool = False,
          warm: bool = True, regrade: bool = False, engine=None) -> list[Job]:
    """Grade submitted/ (all of it, or one chapter or student); returns the jobs
    with their flags (``job.reused``: its earlier result was kept; ``regrade``: keep none).
    ``engine``: where notebooks are autograded (a coursekit.grade.engine.Engine, which the
    caller closes); by default the one coursekit.grade.engine.from_environment picks.
    Raises SystemExit (GradingStopped) when the machine, not the students, is at fault."""
    root = Path(root).resolve()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    _refuse_without_sandbox(sandbox, say)
    todo = discover(root, chapter, student)
    if not todo:
        say("grade: nothing to grade under submitted/")
        return []
    run = Run(root, todo, sandbox=sandbox, warm=warm, workers=jobs or max(1, os.cpu_count() or 1),
              timeout=timeout, cell_timeout=cell_timeout, report=report, regrade=regrade, say=say, ahead=True)
    own = engine is None
    run.engine = from_environment(run.workers, GRADER) if own else engine
    _prepare(run)
    try:
        say(f"grade: {len(todo)} notebooks ({len({j.chapter for j in todo})} chapters), {run.workers} workers, "
            f"sandbox {'on' if sandbox else 'OFF'}, kernels {'warm (forked)' if warm else 'cold'}"
            + (f", {run.engine.describe()}" if run.engine is not None else ""))
        run_steps(run)
    finally:
        _clean_up(run)
        if own and run.engine is not None:
            run.engine.close()
    run.clock.times["total"] = time.monotonic() - run.t0
    times = {k: round(v, 2) for k, v in run.clock.times.items()}
    runner.write_atomically(run.state / "timings.json", lambda tmp: tmp.write_text(json.dumps(times, indent=1)))
    say("grade: where the time went: " + ", ".join(f"{k} {v:.1f} s" for k, v in run.clock.times.items()))
    kept = f" ({len(run.reused) + len(run.feedback_only)} kept from earlier runs)" if run.reused or run.feedback_only else ""
    say(f"grade: done in {run.clock.times['total']:.0f} s; graded {len(run.jobs)}{kept}; grades.csv, feedback/, "
        "autograded/ updated")
    return todo


def check(root: Path = ROOT, chapter: str | None = None, sandbox: bool = True, warm: bool = True,
          quiet: bool = False) -> list[str]:
    """Only the steps before the gradebook (intake, repair, preflight): whether
    this machine can grade the chapters submitted/ holds. Writes nothing but
    .grading/ logs; raises GradingStopped with the cause and the fix."""
    root = Path(root).resolve()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    _refuse_without_sandbox(sandbox, say)
    run = Run(root, discover(root, chapter), sandbox=sandbox, warm=warm, say=say,
              workers=max(1, os.cpu_count() or 1))
    if not run.jobs:
        return []
    _prepare(run)
    try:
        run_steps(run, [(n, f) for n, f in STEPS if n in ("kernels", "intake", "repair", "preflight")])
    finally:
        _clean_up(run)
    say(f"grade: preflight passed for {', '.join(run.chapters)}")
    return run.chapters


def _refuse_without_sandbox(sandbox: bool, say) -> None:
    from .sandbox import sandbox_available
    if not sandbox:
        say("grade: WARNING: grading unsandboxed — submissions run with your rights and can read source/.")
        return
    ok, why = sandbox_available()
    if not ok:
        raise SystemExit(f"grade: refusing to grade without a sandbox: {why}.\n"
                         "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or, if you accept "
                         "that submissions run with your rights, pass --unsandboxed.")


def _prepare(run: Run) -> None:
    """The run's folders; the kernel factory and nbgrader's fork server start
    now, while intake and repair copy the submissions."""
    for sub in ("keys", "logs", "scratch"):
        (run.state / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(run.state / "keys", 0o700)
    run.scratch = Path(tempfile.mkdtemp(prefix="run-", dir=run.state / "scratch")) / "submitted"
    run.scratch.mkdir()
    kernels.kernel_spec(run.state)
    if run.shared is not None:   # a long-lived grader's folder, factory and fork server
        run.base = run.shared.base
        return
    run.base = kernels.short_base()
    threading.Thread(target=runner.warm_up, daemon=True).start()
    if run.engine is not None:   # the engine's cluster starts while the kernel factory does
        threading.Thread(target=run.engine.start, args=(run,), daemon=True).start()


def _clean_up(run: Run) -> None:
    stop_similarity_aside(run)
    if run.zygote is not None:
        run.zygote.close()
    if run.gradebook_ahead is not None:   # its file is in the scratch folder removed below
        run.gradebook_ahead.wait()
    for job in run.jobs:
        run.key_file(job).unlink(missing_ok=True)
    shutil.rmtree(run.scratch.parent, ignore_errors=True)
    if run.shared is None:
        shutil.rmtree(run.base, ignore_errors=True)


def save_flags(state: Path, jobs: list[Job]) -> None:
    """Keep each notebook's flags, so a report written by a later run (another
    chapter, another student) still shows why this one was flagged."""
    folder = state / "flags"
    folder.mkdir(exist_ok=True)
    for job in jobs:
        data = json.dumps([f.to_json() for f in job.flags], ensure_ascii=False)
        runner.write_atomically(folder / f"{job.chapter}__{job.student}.json",
                                lambda tmp, data=data: tmp.write_text(data))


def saved_flags(state: Path, job: Job) -> list[Flag]:
    """The flags of the job's latest grading."""
    try:
        return [Flag.from_json(v) for v in json.loads((state / "flags" / f"{job.chapter}__{job.student}.json")
                                                     .read_text())]
    except (OSError, ValueError):
        return []


def class_jobs(root: Path, state: Path) -> list[Job]:
    """Every submission of the class with the flags of its latest grading: the
    class report covers the whole class, whichever part this run graded."""
    jobs = discover(root)
    for job in jobs:
        job.flags = saved_flags(state, job)
    return jobs


def _zero_auto_scores(gb, job: Job) -> None:
    try:
        sub = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    except Exception:  # noqa: BLE001 (never graded: nothing to take away)
        return
    for g in sub.grades:
        if g.auto_score:
            g.auto_score = 0.0
    gb.db.commit()
