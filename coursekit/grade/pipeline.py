"""Grade a class: every submission in submitted/<student>/<chapter>/.

A run is a ``Run`` (the context every step reads and writes) passed through
an ordered list of small steps, each ``step(run) -> None``:

    reuse      keep the result of every notebook nothing of whose grade changed since it was
               graded (coursekit.grade.reuse); only the others go on (--regrade: none is kept).
               The warm kernel factory starts here, as soon as the keys show a notebook to grade
               (before the gradebook is read), so that its start overlaps everything before the
               preflight
    kernels    start the factory if the reuse step could not tell (stop it if nothing is left to
               grade); a class with no gradebook yet has its chapters recorded meanwhile, in a
               file of the run's own
    intake     copy each submission to the run's scratch folder (submitted/ is never written)
    repair     fix on that copy what stock nbgrader trips over, noting each repair as a Flag
    preflight  one graded kernel per chapter on its release notebook (chapters side by side);
               on failure stop, writing nothing. It waits for the factory a few times as long as
               its start took before (prepare.patience); a factory slower than that is not
               waited for: kernels start cold until it is ready
    gradebook  record the chapters' cells in the gradebook (first write of the run; one process), or
               link the record made while the factory started into place (GradebookAhead); a
               chapter recorded before with the same key (its source, the grading code, the
               environment) in the same assignment row is not recorded again
    autograde  nbgrader autograde on the copies, one student at a time per worker, workers over the
               cores, the longest first; each kernel forked in the sandbox from a warm process that
               imported torch once (coursekit.grade.zygote), with the guard booted and no network; a run
               whose notebooks mostly fail for one reason of the machine stops there. While the others
               are graded, each finished notebook goes on at the lowest priority
               to its seal check, figures and feedback page (``Lane``), which then use only the time the
               kernels leave; the steps below do what the lane did not get to
    seal check a test cell keeps its points only if each hidden check left a valid seal
    feedback   nbgrader's feedback pages, one process per worker (hidden tests, tracebacks and seals
               removed; each exercise named; pending points shown), made while export and
               report go on
    export     grades.csv (nbgrader export, plus auto points and points awaiting grading), the
               per-exercise and LMS files
    report     reports/class_report.html and the summary table, in the chapter's language (what
               did not change since the last report is not read again: each graded notebook's
               diagnoses and each pair of answers' similarity are kept); then, the pages made,
               the keys of what this run graded

Small runs pay only for what they use. A run whose notebooks each have a worker of their
own (one to a few notebooks, ``prepare.small``) gets a lean factory (what only some kernels
import is left to them), no Dask cluster (unless the environment names one: the run's own
thread pool), and the similarity of the answers that changed compared on the spare worker
while the notebook is graded; a run with nothing to grade starts no factory.

Reruns are safe and cheap: a student graded twice keeps one result, manual
grades entered in the formgrader stay, and what did not change is not graded
again.

Where each part lives: the run every step shares (coursekit.grade.run), the
steps before autograde (prepare), autograde (autograde, and the feedback lane:
lane), the seal check (seal_check), the steps after it (results); this module
holds their order and the commands.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from grading import protocol

from ..base import runner
from ..base.chapters import ROOT
from . import figures, forkserver, kernels
from . import kept as _kept
from .autograde import autograde_on_worker, probe_on_worker, step_autograde
from .engine import ENGINE_ENV, SCHEDULER_ENV, Grader, from_environment
from .intake import Job, discover
from .lane import Lane
from .prepare import (
    GradebookAhead,
    remember_factory,
    small,
    step_gradebook,
    step_intake,
    step_kernels,
    step_preflight,
    step_repair,
    step_reuse,
)
from .results import class_jobs, step_export, step_feedback, step_report, stop_similarity_aside
from .run import STATE, Run, Warm, rules, uid
from .seal_check import seal_check_as_it_comes, seal_check_one, step_seal_check

forkserver.register()
__all__ = ["grade", "check", "Job", "Run", "Warm", "Lane", "GradebookAhead", "STEPS", "STATE", "GRADER",
           "class_jobs", "discover", "uid", "rules", "run_steps", "step_reuse", "step_kernels", "step_intake",
           "step_repair", "step_preflight", "step_gradebook", "step_autograde", "step_seal_check",
           "step_feedback", "step_export", "step_report"]


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
          warm: bool = True, regrade: bool = False, engine=None, keep: float | None = None) -> list[Job]:
    """Grade submitted/ (all of it, or one chapter or student); returns the jobs
    with their flags (``job.reused``: its earlier result was kept; ``regrade``: keep none).
    ``keep``: seconds the run's kernel factory stays, idle, for the next run of this course
    folder (coursekit.grade.kept; None: COURSE_KEEP_WARM or its default; 0: none).
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
              timeout=timeout, cell_timeout=cell_timeout, report=report, regrade=regrade, say=say, ahead=True,
              keep=_kept.seconds() if keep is None else keep)
    own = engine is None
    run.engine = default_engine(run) if own else engine
    _prepare(run)
    try:
        say(f"grade: {len(todo)} notebooks ({len({j.chapter for j in todo})} chapters), {run.workers} workers, "
            f"sandbox {'on' if sandbox else 'OFF'}, kernels {'warm (forked)' if warm else 'cold'}"
            + (f", {run.engine.describe()}" if run.engine is not None else ""))
        run_steps(run)
    except SystemExit:        # stopped for a reason of the machine: what was kept for the next run goes too
        _kept.forget(run)
        raise
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
    if run.base_kept and run.zygote is not None:
        say(f"grade: the warm kernel factory stays {run.keep / 60:.0f} min, idle, for the next run of this folder "
            f"({_kept.ENV}=0 keeps none; --let-go ends it now)")
    return todo


def default_engine(run: Run):
    """The engine the environment asks for (coursekit.grade.engine.from_environment); when
    it names none and every notebook has a worker of its own (``prepare.small``: one to a
    few notebooks), none: the run's own thread pool, as COURSE_ENGINE=threads, without a
    Dask cluster to start for them."""
    if small(run, run.jobs) and not (os.environ.get(SCHEDULER_ENV) or os.environ.get(ENGINE_ENV)):
        return None
    return from_environment(run.workers, GRADER)


def check(root: Path = ROOT, chapter: str | None = None, sandbox: bool = True, warm: bool = True,
          quiet: bool = False) -> list[str]:
    """Only the steps before the gradebook (intake, repair, preflight): whether
    this machine can grade the chapters submitted/ holds. Writes nothing but
    .grading/ logs; raises GradingStopped with the cause and the fix."""
    root = Path(root).resolve()
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    _refuse_without_sandbox(sandbox, say)
    run = Run(root, discover(root, chapter), sandbox=sandbox, warm=warm, say=say,
              workers=max(1, os.cpu_count() or 1), report=False)   # (no class report: no similarity findings)
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
    if not (run.keep and (runner.using_server() or _kept.use_forkd(run.root))):
        runner.use_server(None)
        forkserver.start()
    if run.engine is not None:   # the engine's cluster starts while the kernel factory does
        threading.Thread(target=run.engine.start, args=(run,), daemon=True).start()


def _clean_up(run: Run) -> None:
    stop_similarity_aside(run, wait=False)
    if run.shared is None:
        runner.use_server(None)       # the next run of this process decides again
        if not run.forgotten:
            _kept.leave_forkd(run)
    if run.pages is not None:   # the feedback pages of a run stopped before it waited for them
        run.pages.join()
    if run.zygote is not None:
        run.zygote.ready()
        remember_factory(run)
        run.zygote.close()
    if run.gradebook_ahead is not None:   # its file is in the scratch folder removed below
        run.gradebook_ahead.wait()
    for job in run.jobs:
        run.key_file(job).unlink(missing_ok=True)
    shutil.rmtree(run.scratch.parent, ignore_errors=True)
    if run.shared is None and not run.base_kept:
        shutil.rmtree(run.base, ignore_errors=True)
