"""The autograde step: nbgrader autograde of every notebook (coursekit.grade.pipeline gives its place).

One notebook at a time per worker, workers over the cores, the longest first;
each kernel forked in the sandbox from a warm process that imported torch once
(coursekit.grade.zygote), with the guard booted and no network. The notebooks
go to the run's grading engine (a Dask cluster, coursekit.grade.engine) or to a
thread pool of this process; a run whose notebooks mostly fail for one reason
of the machine stops there, and a notebook nbgrader could not finish is scored
as the empty release, saying why. While the others are graded, each finished
notebook goes on at the lowest priority to its seal check, figures and
feedback page (coursekit.grade.lane).
"""
from __future__ import annotations

import concurrent.futures as cf
import importlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from ..base import runner
from . import account, kernel_client, kernels
from . import intake as intake_mod
from . import preflight as pre
from .intake import Job
from .lane import Lane
from .prepare import probe_request, small
from .results import start_similarity_aside
from .run import Run, source_size, uid

# What a gradebook says when another grader got there first: SQLite's lock, and the
# unique-key or serialisation errors of a database server (PostgreSQL) when two graders
# add the same student or course at once. The notebook is graded again, alone.
BUSY_SIGNS = ("database is locked", "UniqueViolation", "duplicate key value", "IntegrityError",
              "could not serialize access", "deadlock detected")


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


def import_nbgrader_aside(run: Run) -> threading.Thread | None:
    """For a small run (prepare.small: each notebook has a worker, so one core or more waits),
    this process's import of nbgrader's gradebook (0.7 s), which the seal check step needs,
    in a thread while the notebooks are graded; without it, a one-notebook run imported it
    after autograde, with nothing else to do. None when there is nothing to overlap (it is
    imported already, or a class's lane imports it as its first notebooks come back)."""
    if "nbgrader.api" in sys.modules or not run.jobs or not small(run, run.jobs):
        return None
    return runner.aside(importlib.import_module, "nbgrader.api", name="nbgrader-import")


def step_autograde(run: Run) -> None:
    """Every notebook's autograde: on the run's engine (a Dask cluster, coursekit.grade.engine),
    or in a thread pool of this process; what follows each notebook's autograde goes on in the
    lane as it finishes."""
    done = 0
    import_nbgrader_aside(run)
    start_similarity_aside(run)   # where the preflight step has not started it already
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
