"""What an instructor takes home from the gradebook: per-exercise grades and
files a learning-management system imports.

- ``grades_by_exercise.csv``: one row per student, one column per graded cell
  (named by the exercise's heading in the chapter's language and by its grade
  id), then per chapter the one score of coursekit.report.score: auto points, manual
  points, points awaiting grading, score, maximum, status, the submission time
  and how late it was against the due date set in nbgrader (``nbgrader db
  assignment add CHAPTER --duedate=...``; blank when there is none). A cell an
  instructor has not graded yet reads ``pending``.
- ``lms_canvas.csv``: Canvas's gradebook import (Student, ID, SIS User ID,
  SIS Login ID, Section, then one column per chapter; a "Points Possible" row
  under the header). ``lms_moodle.csv``: Moodle's CSV grade import (an
  identifier column and one column per chapter). Students are mapped through
  a roster the instructor provides (``roster.csv``: ``student`` = the nbgrader
  id, then ``name``, ``lms_id``, ``sis_user_id``, ``sis_login_id``,
  ``section``, ``email``; only ``student`` is required). A chapter with
  points still awaiting grading is left blank there: both systems leave a
  blank cell unchanged, so nothing provisional is posted as final.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import nbformat

from helpers.outline import exercise_titles

from . import score
from .score import Standing

ROSTER_FIELDS = ("student", "name", "lms_id", "sis_user_id", "sis_login_id", "section", "email")
CANVAS_HEAD = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
PENDING = "pending"


def read_gradebook(db_url: str, chapters: list[str]) -> list[Standing]:
    """Every submission of the given chapters, as the gradebook holds it now."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        return score.read(gb, chapters)


def _fmt(x: float | None) -> str:
    return PENDING if x is None else score.num(x)


def _when(t) -> str:
    return t.isoformat(" ", "seconds") if t else ""


PER_CHAPTER = ("auto", "manual", "awaiting grading", "score", "max", "status", "submitted", "due", "seconds late")


def per_exercise_csv(scores: list[Standing], titles: dict[str, dict[str, str]]) -> str:
    """The per-exercise table (see the module's docstring). ``titles`` maps a
    chapter to its grade id -> exercise heading."""
    columns: dict[str, list[str]] = {}
    for s in scores:
        ids = columns.setdefault(s.chapter, [])
        ids += [c.grade_id for c in s.cells if c.grade_id not in ids]
    for ch, ids in columns.items():
        order = list(titles.get(ch, {}))
        ids.sort(key=lambda g: (order.index(g) if g in order else len(order), g))
    head = ["student"]
    for ch, ids in sorted(columns.items()):
        head += [f"{ch}/{g} ({titles.get(ch, {}).get(g, g)})" for g in ids]
        head += [f"{ch} {what}" for what in PER_CHAPTER]
    by_student: dict[str, dict[str, Standing]] = {}
    for s in scores:
        by_student.setdefault(s.student, {})[s.chapter] = s
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for student in sorted(by_student):
        row = [student]
        for ch, ids in sorted(columns.items()):
            s = by_student[student].get(ch)
            if s is None:
                row += [""] * (len(ids) + len(PER_CHAPTER))
                continue
            cells = {c.grade_id: c for c in s.cells}
            row += [_fmt(cells[g].score) if g in cells else "" for g in ids]
            late = "" if s.seconds_late is None else score.num(s.seconds_late)   # no due date: no lateness
            row += [_fmt(s.auto), _fmt(s.manual), _fmt(s.pending), _fmt(s.score), _fmt(s.max_score), s.status,
                    _when(s.timestamp), _when(s.duedate), late]
        w.writerow(row)
    return buf.getvalue()


def read_roster(path: Path) -> dict[str, dict[str, str]]:
    """student id -> roster fields. Raises ValueError naming what is wrong."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or "student" not in reader.fieldnames:
            raise ValueError(f"{path}: the roster needs a 'student' column (the nbgrader student id); "
                             f"optional columns: {', '.join(ROSTER_FIELDS[1:])}")
        unknown = set(reader.fieldnames) - set(ROSTER_FIELDS)
        if unknown:
            raise ValueError(f"{path}: unknown roster column(s) {sorted(unknown)}; allowed: {', '.join(ROSTER_FIELDS)}")
        return {row["student"]: {k: (row.get(k) or "") for k in ROSTER_FIELDS} for row in reader}


def _chapter_totals(scores: list[Standing]):
    chapters = sorted({s.chapter for s in scores})
    maxima = {ch: max(s.max_score for s in scores if s.chapter == ch) for ch in chapters}
    final: dict[str, dict[str, str]] = {}
    for s in scores:   # blank while points await grading: an LMS leaves a blank cell as it was
        final.setdefault(s.student, {})[s.chapter] = _fmt(s.score) if s.final else ""
    return chapters, maxima, final


def canvas_csv(scores: list[Standing], roster: dict[str, dict[str, str]]) -> str:
    """Canvas's gradebook import: identity columns, a Points Possible row, one
    column per chapter. Students missing from the roster are left out (and
    listed by ``unmapped``)."""
    chapters, maxima, final = _chapter_totals(scores)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CANVAS_HEAD, *chapters])
    w.writerow(["Points Possible", "", "", "", "", *(_fmt(maxima[ch]) for ch in chapters)])
    for student in sorted(final):
        r = roster.get(student)
        if r is None:
            continue
        w.writerow([r["name"] or student, r["lms_id"], r["sis_user_id"], r["sis_login_id"], r["section"],
                    *(final[student].get(ch, "") for ch in chapters)])
    return buf.getvalue()


def moodle_csv(scores: list[Standing], roster: dict[str, dict[str, str]]) -> str:
    """Moodle's CSV grade import: an identifier (email, else the LMS id) and
    one column per chapter, mapped to grade items at import."""
    chapters, _, final = _chapter_totals(scores)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Email address", "ID number", *chapters])
    for student in sorted(final):
        r = roster.get(student)
        if r is None:
            continue
        w.writerow([r["email"], r["lms_id"] or student, *(final[student].get(ch, "") for ch in chapters)])
    return buf.getvalue()


def unmapped(scores: list[Standing], roster: dict[str, dict[str, str]]) -> list[str]:
    return sorted({s.student for s in scores} - set(roster))


def titles_for(root: Path, chapters: list[str]) -> dict[str, dict[str, str]]:
    out = {}
    for ch in chapters:
        path = root / "source" / ch / f"{ch}.ipynb"
        if path.exists():
            out[ch] = exercise_titles(nbformat.read(path, as_version=4))
    return out


def write_all(root: Path, db_url: str, chapters: list[str], out: Path | None = None) -> list[Path]:
    """Write the per-exercise CSV and, when ``root/roster.csv`` exists, the
    Canvas and Moodle files. Returns the paths written."""
    out = out or root
    scores = read_gradebook(db_url, chapters)
    written = [out / "grades_by_exercise.csv"]
    written[0].write_text(per_exercise_csv(scores, titles_for(root, chapters)), encoding="utf-8")
    roster_path = root / "roster.csv"
    if roster_path.exists():
        roster = read_roster(roster_path)
        for name, make in (("lms_canvas.csv", canvas_csv), ("lms_moodle.csv", moodle_csv)):
            (out / name).write_text(make(scores, roster), encoding="utf-8")
            written.append(out / name)
    return written


def canvas_course(url: str, token: str, course_id: int):
    """The course on a Canvas server, through canvasapi (one GET)."""
    from canvasapi import Canvas
    return Canvas(url, token).get_course(course_id)


def canvas_assignment_id(course, chapter: str, given: dict) -> int | None:
    """The Canvas assignment of a chapter: as given, else the one named like the
    chapter (importing lms_canvas.csv creates them under the chapters' names)."""
    if given.get(chapter):
        return int(given[chapter])
    for a in course.get_assignments(search_term=chapter):
        if a.name == chapter:
            given[chapter] = a.id
            return a.id
    return None


@dataclass(frozen=True)
class CanvasPost:
    """One grade for Canvas: a student's final score of a chapter, with the comment and
    the feedback page (if any) that go with it."""
    student: str
    chapter: str
    user_id: str
    grade: str
    page: Path | None = None
    text: str = ""


def canvas_posts(scores: list[Standing], roster: dict[str, dict[str, str]], chapters, feedback=None,
                 comments=None) -> tuple[list[CanvasPost], list[tuple[Standing, str]]]:
    """What goes to Canvas, and what does not with why ("not_in_roster", "no_lms_id",
    "pending": points still await grading, so nothing provisional is posted)."""
    posts, skipped = [], []
    for s in sorted(scores, key=lambda s: (s.chapter, s.student)):
        if s.chapter not in chapters:
            continue
        r = roster.get(s.student)
        why = "not_in_roster" if r is None else "no_lms_id" if not r["lms_id"] else "pending" if not s.final else None
        if why:
            skipped.append((s, why))
            continue
        posts.append(CanvasPost(s.student, s.chapter, r["lms_id"], score.num(s.score),
                                (feedback or {}).get((s.student, s.chapter)), comments(s) if comments else ""))
    return posts, skipped


def upload_canvas(url: str, token: str, course_id: int, scores: list[Standing],
                  roster: dict[str, dict[str, str]], assignment_ids: dict[str, int | None], feedback=None,
                  comments=None, dry_run: bool = False, course=None, failed: list | None = None) -> int:
    """Post the final chapter scores through Canvas's API (optional: the CSV
    file never needs it). Returns how many grades were sent (with ``dry_run``:
    would be sent; nothing is sent). A chapter's assignment id may be None: the
    assignment named like the chapter is used.

    Without ``feedback`` the grades go in one bulk update per assignment. With
    ``feedback`` ((student, chapter) -> the feedback page), each grade goes with a
    submission comment carrying the page, as Canvas's API takes it: the file is
    uploaded to the submission's comment files (POST .../submissions/:user_id/
    comments/files, then the upload itself), then one PUT on the submission with
    comment[file_ids][], comment[text_comment] (``comments(standing)``) and
    submission[posted_grade]. ``failed``: a list that collects (post, error) and
    lets the others go on (without it the first error is raised)."""
    posts, _ = canvas_posts(scores, roster, list(assignment_ids), feedback, comments)
    if dry_run or not posts:
        return len(posts)
    course = course or canvas_course(url, token, course_id)
    ids = dict(assignment_ids)
    sent = 0
    if feedback is None:
        for chapter in assignment_ids:
            grades = {p.user_id: {"posted_grade": p.grade} for p in posts if p.chapter == chapter}
            if grades:
                course.get_assignment(canvas_assignment_id(course, chapter, ids)).submissions_bulk_update(
                    grade_data=grades)
                sent += len(grades)
        return sent
    from canvasapi.upload import Uploader
    assignments = {}
    for p in posts:
        try:
            aid = canvas_assignment_id(course, p.chapter, ids)
            if aid is None:
                raise LookupError(f"no Canvas assignment named {p.chapter}")
            if aid not in assignments:
                assignments[aid] = course.get_assignment(aid)
            sub = assignments[aid].get_submission(int(p.user_id))
            comment = {"text_comment": p.text} if p.text else {}
            if p.page is not None:
                ok, info = Uploader(course._requester, f"courses/{course.id}/assignments/{aid}/submissions/"
                                    f"{p.user_id}/comments/files", str(p.page)).start()
                if not ok:
                    raise RuntimeError(f"Canvas did not take the file {p.page.name}: {info}")
                comment["file_ids"] = [info["id"]]
            sub.edit(submission={"posted_grade": p.grade}, **({"comment": comment} if comment else {}))
            sent += 1
        except Exception as exc:  # noqa: BLE001 (one student's post failing leaves the others to go)
            if failed is None:
                raise
            failed.append((p, exc))
    return sent
