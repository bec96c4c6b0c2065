"""Intake: find the submissions, and make each gradable by stock nbgrader.

``submitted/`` is read-only to the grader. Each submission folder is copied
to the run's scratch folder and every repair (a renamed notebook, cells
deleted or duplicated, an unreadable file scored as the empty release) is
made on that copy, noted as a Flag. nbgrader grades the copy; a rerun starts
again from the student's untouched file.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..report.flags import Flag


@dataclass
class Job:
    """One notebook of one student in a run: its flags, time and state."""
    chapter: str
    student: str
    flags: list[Flag] = field(default_factory=list)
    seconds: float = 0.0
    ok: bool = True
    failure: str | None = None   # the kind of the last autograde failure (see coursekit.grade.preflight.CAUSES)
    key: str | None = None       # what its grade depends on (coursekit.grade.reuse)
    reused: bool = False         # this run kept its earlier result
    sealed: bool = False         # its seals were checked as it was graded (coursekit.grade.engine)
    paged: bool = False          # its feedback page was made while the others were graded (pipeline.Lane)

    def flag(self, kind: str, detail="") -> None:
        new = Flag(kind, str(detail))
        if new not in self.flags:
            self.flags.append(new)

    def has(self, kind: str) -> bool:
        return any(f.kind == kind for f in self.flags)

    def drop(self, kind: str) -> None:
        self.flags = [f for f in self.flags if f.kind != kind]


def discover(root: Path, chapter: str | None = None, student: str | None = None) -> list[Job]:
    """Every submitted/<student>/<chapter>/ of a chapter the course has a source of."""
    jobs = []
    sub = root / "submitted"
    if not sub.exists():
        return jobs
    for sdir in sorted(p for p in sub.iterdir() if p.is_dir()):
        if student and sdir.name != student:
            continue
        for cdir in sorted(p for p in sdir.iterdir() if p.is_dir()):
            if chapter and cdir.name != chapter:
                continue
            if (root / "source" / cdir.name / f"{cdir.name}.ipynb").exists():
                jobs.append(Job(cdir.name, sdir.name))
    return jobs


def copy_submission(root: Path, scratch: Path, job: Job) -> Path:
    """The scratch copy of the job's submission folder (links copied as links, never followed)."""
    src = root / "submitted" / job.student / job.chapter
    dest = scratch / job.student / job.chapter
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(src, dest, symlinks=True)
    return dest


def restore_given(root: Path, folder: Path, chapter: str) -> None:
    """The code the chapter hands out beside its notebook (release/<chapter>/*.py,
    notebooks/given/) is graded as the course wrote it: a scratch copy's version,
    changed or missing, is replaced by the release's (submitted/ is never touched)."""
    for given in sorted((root / "release" / chapter).iterdir()):
        if given.is_file() and given.suffix != ".ipynb":
            dest = folder / given.name
            if dest.is_symlink() or dest.exists():
                dest.unlink() if not dest.is_dir() or dest.is_symlink() else shutil.rmtree(dest)
            shutil.copy(given, dest)


def repair(root: Path, folder: Path, job: Job) -> None:
    """Make the notebook in ``folder`` (a scratch copy) gradable, flagging each repair."""
    restore_given(root, folder, job.chapter)
    expected = folder / f"{job.chapter}.ipynb"
    if not expected.exists():
        others = sorted(folder.glob("*.ipynb"))
        if len(others) == 1:
            shutil.copy(others[0], expected)
            job.flag("renamed", others[0].name)
        else:
            job.flag("several_notebooks", len(others)) if others else job.flag("no_notebook")
            write_release_copy(root, job.chapter, expected)
            return
    try:
        nb = nbformat.read(expected, as_version=4)
    except Exception as exc:  # noqa: BLE001 (any unreadable file)
        expected.unlink()
        write_release_copy(root, job.chapter, expected)
        job.flag("unreadable", type(exc).__name__)
        return
    ids = _grade_ids(nb)
    dupes = sorted({i for i in ids if i and ids.count(i) > 1})
    if dupes:  # stock nbgrader would score the whole notebook zero (nbgrader #1083)
        job.flag("duplicated_cells", ", ".join(dupes))
        nb = deduplicate(nb)
        nbformat.write(nb, expected)
        ids = _grade_ids(nb)
    source = nbformat.read(root / "source" / job.chapter / f"{job.chapter}.ipynb", as_version=4)
    locked = {c.metadata["nbgrader"]["grade_id"] for c in source.cells
              if c.metadata.get("nbgrader", {}).get("locked")}
    missing = sorted(locked - set(ids))
    if missing:
        job.flag("restored_cells", ", ".join(missing))
        restore_cells(nb, source, missing)
        nbformat.write(nb, expected)


def _grade_ids(nb) -> list:
    return [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]


def deduplicate(nb):
    """Keep the first cell of each grade id: a later copy of a read-only cell
    is dropped, a later copy of an answer cell stays as plain code. Cell ids
    are made unique too."""
    seen, cells = set(), []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid and gid in seen:
            if meta.get("locked") or meta.get("grade") and not meta.get("solution"):
                continue
            cell.metadata.pop("nbgrader", None)
        if gid:
            seen.add(gid)
        cells.append(cell)
    used = set()
    for i, cell in enumerate(cells):
        if getattr(cell, "id", None) in used or not getattr(cell, "id", None):
            cell.id = f"dedup-{i}"
        used.add(cell.id)
    nb.cells = cells
    return nb


def write_release_copy(root: Path, chapter: str, dest: Path) -> None:
    """The empty release notebook at ``dest`` (a scratch path, never submitted/)."""
    rel = root / "release" / chapter / f"{chapter}.ipynb"
    if rel.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(rel, dest)


def restore_cells(nb, source, missing: list[str]) -> None:
    """Put deleted read-only cells back, after the cell that preceded them in the source."""
    order = _grade_ids(source)
    for gid in missing:
        idx = order.index(gid)
        cell = nbformat.from_dict(source.cells[idx])
        prev = next((order[j] for j in range(idx - 1, -1, -1) if order[j]), None)
        pos = len(nb.cells)
        for i, c in enumerate(nb.cells):
            if prev and c.metadata.get("nbgrader", {}).get("grade_id") == prev:
                pos = i + 1
        nb.cells.insert(pos, cell)
