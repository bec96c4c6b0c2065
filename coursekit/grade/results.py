"""The steps of a grading run after the seal check (coursekit.grade.pipeline gives their order):

    feedback   the feedback pages, one process per worker (hidden tests, tracebacks and seals
               removed; each exercise named; pending points shown)
    export     grades.csv (nbgrader export, plus auto points and points awaiting grading), the
               per-exercise and LMS files, and the keys of what this run graded
    report     reports/class_report.html and the summary table, in the chapter's language

and each notebook's flags, kept so that a later run's report still shows them.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import os
import threading
from pathlib import Path

from grading import protocol

from ..base import runner
from ..base.nbgrader_run import env_with_bin
from ..report.flags import Flag
from . import reuse
from .intake import Job, discover
from .run import Run, page_env, source_size


def step_feedback(run: Run) -> None:
    """The feedback pages of what this run graded (and of notebooks whose manual
    grades changed), one process per worker, each making many pages. They are made
    while the export and report steps go on (nothing there reads them); the report
    step waits for them before it keeps the keys of what was graded (``keep_results``)."""
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

    def make_all():
        with cf.ThreadPoolExecutor(max(1, len(shares))) as pool:
            list(pool.map(make, enumerate(shares)))

    for job in run.jobs:  # only this run's keys (seal checked): another grader may be running on other chapters
        run.key_file(job).unlink(missing_ok=True)
    if shares:
        run.pages = threading.Thread(target=make_all, name="feedback-pages", daemon=True)
        run.pages.start()


def pages_made(run: Run) -> None:
    """Wait for the feedback pages ``step_feedback`` is making."""
    if run.pages is not None:
        with run.clock("feedback (waiting)"):
            run.pages.join()
        run.pages = None


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
        if not run.class_files:   # a long-lived grader writes them when it is idle (coursekit.serve.service)
            return
        runner.write_atomically(run.root / "grades.csv", export)
        chapters = sorted({j.chapter for j in class_jobs(run.root, run.state)})
        for path in export_mod.write_all(run.root, protocol.gradebook_url(run.root), chapters):
            run.say(f"grade: {path.relative_to(run.root)}")


def step_report(run: Run) -> None:
    """The class report and the summary table; then, once the feedback pages are made,
    the keys of what this run graded (``keep_results``)."""
    from ..report import report as report_mod
    if run.class_files:
        stop_similarity_aside(run)
        if run.report:
            with runner.one_at_a_time(run.state):
                path = report_mod.write_report(run.root, class_jobs(run.root, run.state), langs=run.langs)
            run.say(f"grade: class report {path.relative_to(run.root)}")
        run.say(report_mod.summary_table(run.root, run.everyone, langs=run.langs))
    keep_results(run)


def keep_results(run: Run) -> None:
    """Record the key of each notebook graded (or paged) whose result can be kept
    (coursekit.grade.reuse.keep: its feedback page must be there): after the pages."""
    pages_made(run)
    if run.jobs or run.feedback_only:
        from nbgrader.api import Gradebook
        with runner.one_at_a_time(run.state):
            with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
                reuse.keep(run.root, run.state, gb, run.jobs + run.feedback_only)


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


ASIDE_WAIT = 60   # seconds the report step waits for the findings made aside, once it needs them


def similarity_aside(run: Run):
    """The class report's similarity findings (coursekit.report.similarity), made by a
    process while the notebooks are graded: they follow from submitted/ alone, and only
    the answers that changed are compared again. Beside a class's kernels (every worker
    busy) it runs at the lowest priority, taking only the time nothing else wants; a
    small run (fewer notebooks than workers) has a worker to spare, and it runs there at
    the usual priority. The report step, which needs them, raises it to the usual
    priority and waits for it (or, where it cannot, stops it and makes what it did not
    finish)."""
    if not (run.class_files and run.report and run.workers > 1):
        return None
    from ..report.report import similarity_request
    chapters = sorted({p.parent.name for p in (run.root / "submitted").glob("*/*/*.ipynb")})
    request = {**similarity_request(run.root, chapters, run.langs), "lowest": len(run.jobs) >= run.workers}
    return runner.start_forked("coursekit.report.similarity:precompute_aside", request, run.root, env_with_bin(),
                               run.state / "logs" / "similarity_aside.log")


def start_similarity_aside(run: Run) -> None:
    """``similarity_aside``, started from a thread as soon as the run knows what it grades
    (the preflight step calls it before it waits for the kernel factory): the factory's
    imports keep one core busy for a second or two while the other has little to do, and
    the findings take about a second of a class of twelve. The thread may wait for the fork
    server's own start; ``stop_similarity_aside`` waits for it."""
    if run.similarity_start is not None or not run.jobs:
        return

    def start() -> None:
        try:
            run.similarity_aside = similarity_aside(run)
        except Exception:  # noqa: BLE001 (not started: the report step makes the findings itself)
            run.similarity_aside = None

    run.similarity_start = threading.Thread(target=start, name="similarity-aside", daemon=True)
    run.similarity_start.start()


def stop_similarity_aside(run: Run, wait: bool = True) -> None:
    """The findings made aside: waited for at the usual priority (``wait``), or stopped."""
    if run.similarity_start is not None:
        run.similarity_start.join()
    proc, run.similarity_aside = run.similarity_aside, None
    if proc is None:
        return
    if wait and proc.is_alive() and usual_priority(proc.pid):
        proc.join(ASIDE_WAIT)
    if proc.is_alive():
        runner.stop_forked(proc)


def usual_priority(pid: int) -> bool:
    """Give the process ``pid`` (a forked command at the lowest priority, leading its own
    session: coursekit.base.runner.lowest_priority) the usual priority back; whether it could."""
    try:
        os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, pid, 0)
    except (AttributeError, OSError):   # raising a priority takes privileges this grader may not have
        return False
    try:   # the session's weight only where the process leads its own session, as lowest_priority lowered it
        leads = os.getsid(pid) == pid
    except OSError:
        leads = False
    if leads:
        runner.set_session_weight(pid, 0)
    return True
