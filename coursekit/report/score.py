"""One score: the single definition every output of a grading run uses.

A submission's graded cells each have one status:

    auto       scored by the tests (an auto-graded cell)
    graded     scored by hand in the formgrader (a written answer, or an override)
    pending    a written answer nobody has graded yet: its points await grading
    no_answer  a written answer left as the release had it: 0 points, as
               nbgrader itself scores an unchanged answer cell

From them, for the submission: ``score`` (every point given so far),
``max_score`` (every cell's points), ``auto`` and ``manual`` (the two parts of
``score``), ``pending`` (points awaiting grading) and ``final`` (nothing
awaits grading). The terminal summary, the feedback page, the class report,
``grades.csv``, ``grades_by_exercise.csv`` and the LMS files all read these
numbers and say them with the words of coursekit.report.words.
"""
from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from pathlib import Path

from . import words

AUTO, GRADED, PENDING, NO_ANSWER = "auto", "graded", "pending", "no_answer"


@dataclass(frozen=True)
class CellScore:
    grade_id: str
    max_score: float
    auto: float | None      # what the tests (or nbgrader, for an unchanged answer) gave
    manual: float | None    # what the instructor gave
    answer: bool = False    # a written answer graded by hand (not a test cell)

    @property
    def status(self) -> str:
        if self.manual is not None:
            return GRADED
        if self.auto is None:
            return PENDING
        return NO_ANSWER if self.answer else AUTO

    @property
    def score(self) -> float | None:
        """The cell's points so far; None while it awaits grading."""
        if self.status == PENDING:
            return None
        return self.manual if self.manual is not None else float(self.auto or 0.0)

    def label(self, lang: str) -> str:
        """How the cell's score is shown next to it ("3 / 3", "待批改（3 分）", "未作答（0 / 3）")."""
        return words.cell_score(self.status, self.score, self.max_score, lang)


@dataclass
class Standing:
    """A submission of one chapter by one student."""
    student: str
    chapter: str
    cells: list[CellScore] = field(default_factory=list)
    timestamp: dt.datetime | None = None
    duedate: dt.datetime | None = None
    seconds_late: float | None = None     # None when the chapter has no due date
    penalty: float = 0.0                  # nbgrader's late-submission penalty, if the course sets one

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cells if c.score is not None) - self.penalty

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.cells)

    @property
    def auto(self) -> float:
        return sum(c.score for c in self.cells if c.status == AUTO)

    @property
    def manual(self) -> float:
        return sum(c.score for c in self.cells if c.status in (GRADED, NO_ANSWER))

    @property
    def pending(self) -> float:
        return sum(c.max_score for c in self.cells if c.status == PENDING)

    @property
    def final(self) -> bool:
        return not any(c.status == PENDING for c in self.cells)

    @property
    def status(self) -> str:
        """"final" or "awaiting grading" (the value of grades.csv's status column)."""
        return "final" if self.final else "awaiting grading"

    def line(self, lang: str) -> str:
        """The score as every output says it: "6 / 12 分，3 分待批改" / "6 / 12 points, 3 awaiting grading"."""
        return words.score_line(self.score, self.max_score, self.pending, lang)

    def cell(self, grade_id: str) -> CellScore | None:
        return next((c for c in self.cells if c.grade_id == grade_id), None)


def num(x: float) -> str:
    """A number of points as the outputs write it: 3, 2.5 (never 3.0)."""
    return f"{x:g}"


def of_submission(sub) -> Standing:
    """The Standing of an nbgrader SubmittedAssignment (all its notebooks)."""
    late = None
    if sub.duedate is not None:
        late = float(sub.total_seconds_late or 0.0)
    st = Standing(sub.student.id, sub.assignment.name, timestamp=sub.timestamp, duedate=sub.duedate,
                  seconds_late=late)
    for nb in sub.notebooks:
        st.cells += cells_of(nb, sub.assignment.name)
        st.penalty += float(nb.late_submission_penalty or 0.0)
    return st


def cells_of(submitted_notebook, chapter: str = "") -> list[CellScore]:
    """The CellScores of an nbgrader SubmittedNotebook, in the order of the
    chapter's cells (a database returns its rows in any order it likes)."""
    answers = {c.name for c in submitted_notebook.notebook.solution_cells}
    place = cell_order(chapter)
    grades = sorted(submitted_notebook.grades, key=lambda g: (place.get(g.name, len(place)), g.name))
    return [CellScore(g.name, float(g.max_score or 0.0), g.auto_score, g.manual_score, g.name in answers)
            for g in grades]


@functools.lru_cache(maxsize=None)
def cell_order(chapter: str) -> dict[str, int]:
    """grade id -> its place in the chapter's source notebook ({} for a chapter
    this course does not have)."""
    import nbformat

    path = Path(__file__).resolve().parent.parent.parent / "source" / chapter / f"{chapter}.ipynb"
    if not chapter or not path.exists():
        return {}
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(path, as_version=4).cells]
    return {gid: i for i, gid in enumerate(x for x in ids if x)}


def read(gb, chapters: list[str]) -> list[Standing]:
    """Every submission of ``chapters`` in the gradebook ``gb``, in the order of
    the chapters' cells."""
    from nbgrader.api import MissingEntry

    out = []
    for chapter in chapters:
        try:
            assignment = gb.find_assignment(chapter)
        except MissingEntry:
            continue
        for sub in assignment.submissions:
            out.append(of_submission(sub))
    return out


def find(gb, chapter: str, student: str) -> Standing | None:
    """One submission's Standing, None if it was never graded."""
    from nbgrader.api import MissingEntry
    try:
        return of_submission(gb.find_submission(chapter, student))
    except MissingEntry:
        return None


def open_gradebook(root):
    from nbgrader.api import Gradebook

    from grading import protocol
    return Gradebook(protocol.gradebook_url(root), protocol.COURSE_ID)
