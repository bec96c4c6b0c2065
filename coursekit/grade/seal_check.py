"""The seal check step: a test cell keeps its points only if each hidden check it calls
left a valid seal under the notebook's key (coursekit.grade.seals reads the seals).
It fails closed: a notebook whose seals cannot be checked keeps no auto-graded point."""
from __future__ import annotations

import os
import time

import nbformat

from grading import protocol

from . import seals
from .intake import Job
from .run import Run


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


def _zero_auto_scores(gb, job: Job) -> None:
    try:
        sub = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    except Exception:  # noqa: BLE001 (never graded: nothing to take away)
        return
    for g in sub.grades:
        if g.auto_score:
            g.auto_score = 0.0
    gb.db.commit()
