"""The steps of a grading run before autograde (coursekit.grade.pipeline gives their order):

    reuse      keep the result of every notebook nothing of whose grade changed since it was graded;
               the warm kernel factory starts as soon as the keys show a notebook to grade
    kernels    start the factory if the reuse step did not (or adopt the one the run before kept for
               this course folder: coursekit.grade.kept); a class with no gradebook yet has its
               chapters recorded meanwhile, in a file of the run's own (GradebookAhead)
    intake     copy each submission to the run's scratch folder (submitted/ is never written)
    repair     fix on that copy what stock nbgrader trips over, noting each repair as a Flag
    preflight  one graded kernel per chapter on its release notebook; on failure stop, writing nothing
               (the factory is waited for at most ``patience``: then kernels start cold until it is ready;
               a chapter an adopted factory's kernels passed as it is now is not preflighted again)
    gradebook  record the chapters' cells in the gradebook (the run's first write), unless recorded
               already as they are now (``recorded``)
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

from grading import protocol

from ..author.release import generate_assignments
from ..base import runner
from . import forkserver, kept, kernels, reuse, seals
from . import intake as intake_mod
from . import preflight as pre
from .intake import Job
from .results import saved_flags, start_similarity_aside
from .run import Run, chapter_key, new_chapters, rules, uid


def step_reuse(run: Run) -> None:
    """Sort the jobs into those to grade, those whose feedback alone is made
    again (only their manual grades changed) and those kept as they are. The
    kernel factory starts as soon as some job surely is to be graded (its key
    is not the one recorded), before the gradebook is read."""
    keys = run.keys = reuse.Keys.of(run.root, run.jobs, rules(run))
    if runner.using_server() and not kept.check_forkd(run):   # a kept fork server for other code
        forkserver.start()
    for job in run.jobs:
        job.key = keys.key(run.root, job)
    if run.regrade or not reuse.may_reuse(run.root, run.state, run.jobs):
        start_factory(run, run.jobs)
        return
    same = {id(j) for j in run.jobs if reuse.same_key(run.root, run.state, j)}
    start_factory(run, [j for j in run.jobs if id(j) not in same])
    if not same:   # every one is graded: the gradebook is not read here (nbgrader's import, while
        return     # the factory and the fork server start, would only slow them)
    from nbgrader.api import Gradebook
    with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
        todo, run.feedback_only, run.reused = reuse.sort_out(run.root, run.state, gb, keys,
                                                             [j for j in run.jobs if id(j) in same])
    todo = {id(j) for j in todo}
    run.jobs = [j for j in run.jobs if id(j) not in same or id(j) in todo]
    for job in run.feedback_only + run.reused:
        job.flags = saved_flags(run.state, job)
    if run.feedback_only or run.reused:
        run.say(f"grade: {len(run.reused) + len(run.feedback_only)} notebooks unchanged since they were graded: "
                f"their results are kept ({len(run.feedback_only)} of them get new feedback for new manual "
                f"grades); {len(run.jobs)} to grade. --regrade grades everything again.")


def start_factory(run: Run, jobs: list[Job]) -> None:
    """Start the run's warm kernel factory for ``jobs`` (none: no factory), with the
    modules their chapters' notebooks import. A small run (``small``) gets a lean one."""
    if run.zygote is not None or run.shared is not None or not (run.warm and jobs):
        return
    chapters = sorted({j.chapter for j in jobs})
    lean = small(run, jobs)
    imports = kernels.factory_imports(run.root, run.state, chapters, lean)
    if run.keep:
        run.zygote = kept.factory_for(run, imports, lean)
        if run.zygote is not None:
            if run.zygote.proc is None:
                run.say("grade: kernels come from the warm factory an earlier run kept "
                        f"({kept.ENV}=0 keeps none; --let-go ends it)")
            return
    run.zygote = kernels.Zygote(run.root, run.state, run.base, run.sandbox, imports, lean=lean)


def small(run: Run, jobs: list[Job]) -> bool:
    """Whether every notebook of ``jobs`` has a worker of its own: then what the factory
    would import for some kernels only (course modules no notebook of the run imports, and
    coursekit.grade.zygote.ONLY_SOME even where the chapters' kernels imported it before) costs
    each of those kernels, side by side, no more than it would cost the factory, ahead of all."""
    return len(jobs) <= run.workers


def step_kernels(run: Run) -> None:
    """The warm kernel factory (started by the reuse step when it could tell, else now)
    imports torch while intake and repair run; a long-lived grader's factory is already
    warm. A factory started for jobs that turned out to be kept is stopped."""
    if run.shared is not None:
        run.zygote_socket = run.shared.socket(run.say) if run.warm and run.jobs else None
        return
    if run.zygote is not None and not run.jobs:
        run.zygote.close()
        run.zygote = None
    start_factory(run, run.jobs)
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
    if not small(run, run.jobs):   # a class's findings, at the lowest priority, while the factory starts (a
        start_similarity_aside(run)   # small run's, at the usual one, would slow its factory: they wait)
    if run.zygote is not None:
        with run.clock("kernel factory start (waiting)"):
            run.zygote_socket = run.zygote.wait_at_most(patience(run), run.say)
        if run.zygote_socket is None:
            run.zygote = None
    ready = kept.ready_chapters(run)       # those the adopted factory's kernels passed as they are now
    jobs = [Job(ch, "_preflight") for ch in new_chapters(run) if ch not in ready]
    try:
        failures = pre.run_probes([probe_request(run, job) for job in jobs], at_once=run.workers)
    finally:
        for job in jobs:
            run.key_file(job).unlink(missing_ok=True)
    if not any(why is not None for why in failures):
        kept.preflighted(run, [job.chapter for job in jobs])
    for job, why in zip(jobs, failures):
        if why is not None:
            factory = run.zygote or (run.shared.zygote if run.shared else None)
            if factory is not None and factory.log.exists():
                why += factory.log.read_text(errors="replace")[-3000:]   # a forked kernel's last words
            kind = pre.classify(why)
            raise pre.GradingStopped(pre.message(kind if kind in pre.INFRASTRUCTURE else "kernel_start",
                                                 f"the preflight kernel of {job.chapter}", why))


FACTORY = kernels.FACTORY    # .grading/factory.json: seconds the latest lean and full factories took to start,
                             # and what each chapter's kernels imported themselves (kernels.NEEDS)
PATIENCE = 60                 # seconds a factory is waited for at most when none started here before
PATIENCE_FACTOR, PATIENCE_FLOOR = 3, 5


def patience(run: Run) -> float:
    """How long after its start the run's kernel factory is waited for at most:
    PATIENCE_FACTOR times as long as the latest one of its kind (lean or full) took to
    start here, PATIENCE_FLOOR seconds at least; past that, kernels start cold until
    it is ready (a factory that hangs, or a machine much busier than before)."""
    try:
        took = float(json.loads((run.state / FACTORY).read_text())[factory_kind(run.zygote)])
    except (OSError, ValueError, KeyError, TypeError):
        return PATIENCE
    return max(PATIENCE_FLOOR, PATIENCE_FACTOR * took)


def factory_kind(zygote) -> str:
    return "lean" if zygote.lean else "full"


def remember_factory(run: Run) -> None:
    """Keep how long the run's factory took to start (``patience`` of the next run), and
    what its kernels imported themselves (kernels.factory_imports of the next run)."""
    z = run.zygote
    if z is None:
        return
    learned = z.learned()
    kernels.remember_needs(run.state, sorted({j.chapter for j in run.jobs}), learned)
    kept.learned(run, learned)
    if z.ready_after is None:
        return
    try:
        seen = json.loads((run.state / FACTORY).read_text())
    except (OSError, ValueError):
        seen = {}
    seen[factory_kind(z)] = round(z.ready_after, 2)
    runner.write_atomically(run.state / FACTORY, lambda tmp: tmp.write_text(json.dumps(seen)))


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


RECORDED = "recorded"   # .grading/recorded/<chapter>.json: the key and gradebook row of its latest record


def recorded(run: Run) -> set[str]:
    """The run's chapters that the gradebook holds as the gradebook step would record
    them now: recorded by an earlier run with the same key (the chapter's source and
    release, the grading code, the environment), and still the same assignment row
    (a gradebook made again, or an assignment deleted and made again, has another)."""
    kept = {}
    for ch in run.chapters:
        try:
            rec = json.loads((run.state / RECORDED / f"{ch}.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and rec.get("key") == record_key(run, ch):
            kept[ch] = rec.get("assignment")
    if not kept or not reuse.gradebook_exists(run.root):
        return set()
    rows = assignment_rows(run.root, list(kept))
    return {ch for ch, row in kept.items() if row is not None and rows.get(ch) == row}


def assignment_rows(root, chapters: list[str]) -> dict[str, str]:
    """chapter -> the id of its assignment row in the gradebook (none: not there). A
    SQLite gradebook is read directly, read-only (a look up, without nbgrader's import:
    a second, while the factory starts); another database through nbgrader."""
    url = protocol.gradebook_url(root)
    if url.startswith("sqlite:///"):
        import sqlite3
        try:
            with contextlib.closing(sqlite3.connect(f"file:{url[len('sqlite:///'):]}?mode=ro", uri=True)) as db:
                marks = ",".join("?" * len(chapters))
                return dict(db.execute(f"SELECT name, id FROM assignment WHERE name IN ({marks})", chapters))
        except sqlite3.Error:
            return {}
    from nbgrader.api import Gradebook
    found = {}
    with Gradebook(url, protocol.COURSE_ID) as gb:
        for ch in chapters:
            try:
                found[ch] = gb.find_assignment(ch).id
            except Exception:  # noqa: BLE001 (MissingEntry: no such assignment)
                continue
    return found


def record_key(run: Run, chapter: str) -> str | None:
    return f"{run.keys.run}:{run.keys.chapters.get(chapter)}" if run.keys else None


def note_recorded(run: Run, chapters: list[str]) -> None:
    """Keep, for each of ``chapters`` just recorded, its key and its gradebook row."""
    from nbgrader.api import Gradebook
    if run.keys is None:
        return
    (run.state / RECORDED).mkdir(exist_ok=True)
    with Gradebook(protocol.gradebook_url(run.root), protocol.COURSE_ID) as gb:
        for ch in chapters:
            data = json.dumps({"key": record_key(run, ch), "assignment": gb.find_assignment(ch).id})
            runner.write_atomically(run.state / RECORDED / f"{ch}.json", lambda tmp, d=data: tmp.write_text(d))


def step_gradebook(run: Run) -> None:
    """Record each chapter's source cells in the gradebook (needed to restore
    read-only cells and to know the points), without touching release/; a chapter
    the gradebook holds as it would be recorded now (``recorded``) is not recorded again.

    Graders running at once in the same course folder take turns here:
    creating a new gradebook or its course row is not safe to do twice at once."""
    chapters = [ch for ch in new_chapters(run) if ch not in recorded(run)]
    if not chapters:
        return
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
        note_recorded(run, chapters)
    if run.shared is not None:   # preflighted (the step before) and recorded: not again while nothing changes
        run.shared.ready.update({ch: chapter_key(run, ch) for ch in chapters})


