"""Reruns grade only what changed.

After a notebook is graded, the grader keeps (in .grading/reuse/) a key of
everything its grade depends on:

    the submission   every file of submitted/<student>/<chapter>/ (names and bytes)
    the chapter      source/<chapter>/ and release/<chapter>/
    the grading code grading/, helpers/, coursekit/ and nbgrader_config.py
    the environment  Python, every installed distribution and its version
    the run's rules  sandbox on or off, the time limits

and a digest of the gradebook's manual grades and comments for it. A later
run reuses the result when the key is the same and the gradebook still holds
the submission: nothing is run again. When only the manual grades changed
(an instructor graded a cell in the formgrader), only its feedback is made
again. ``make grade REGRADE=1`` (``course.py grade --regrade``) grades
everything again.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..base import runner
from ..base.chapters import ROOT
from .intake import Job

FOLDER = "reuse"
SKIP = {"__pycache__", ".ipynb_checkpoints"}
# flags after which a result is not kept: the next run tries again (a time limit may have been
# the machine's load as much as the student's loop)
TRANSIENT = {"scored_empty", "not_graded", "seals_unchecked", "gradebook_busy", "autograde_failed", "kernel_died",
             "notebook_time_limit", "cell_time_limit"}


def digest_paths(paths: list[Path]) -> str:
    """One hash of the names and bytes of every file under ``paths`` (missing ones count as missing)."""
    h = hashlib.sha256()
    for base in paths:
        h.update(f"\0{base.name}\0".encode())
        if base.is_file():
            h.update(base.read_bytes())
            continue
        if not base.is_dir():
            h.update(b"\0missing")
            continue
        for p in sorted(base.rglob("*")):
            rel = p.relative_to(base)
            if SKIP & set(rel.parts) or not (p.is_file() or p.is_symlink()):
                continue
            h.update(f"\0{rel.as_posix()}\0".encode())
            h.update(str(p.readlink()).encode() if p.is_symlink() else p.read_bytes())
    return h.hexdigest()


def installed(exclude: frozenset = frozenset()) -> list[str]:
    """``name==version`` of every distribution installed in this Python's site-packages,
    from the names of their metadata folders (``name-version.dist-info``, which every
    install, upgrade or removal renames), not from their files: a thousandth of the time
    of reading each one's METADATA. Only site-packages counts, not what sys.path holds
    at the moment (importing setuptools adds its vendored copies). ``exclude``: names
    (normalised: lower case, ``-`` and ``.`` as ``_``) left out."""
    import sysconfig
    found = set()
    for folder in dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")):
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            stem, dot, kind = entry.rpartition(".")
            if not dot or kind not in ("dist-info", "egg-info"):
                continue
            name, _, version = stem.partition("-")
            name = re.sub(r"[-_.]+", "_", name).lower()
            if name and name not in exclude:
                found.add(f"{name}=={version}")
    return sorted(found)


def environment_digest(where: bool = True, exclude: frozenset = frozenset()) -> str:
    """Python and every distribution installed in its site-packages, with its version;
    ``where``: also the interpreter's path (a worker elsewhere leaves it out)."""
    text = "\n".join([sys.version, *([sys.executable] if where else []), platform.machine(), *installed(exclude)])
    return hashlib.sha256(text.encode()).hexdigest()


def code_digest(root: Path) -> str:
    """The grading code the kernels and the grader run: the course folder's and this checkout's."""
    paths = []
    for base in dict.fromkeys([root.resolve(), ROOT.resolve()]):
        paths += [base / "grading", base / "helpers", base / "coursekit", base / "nbgrader_config.py"]
    return digest_paths(paths)


def chapter_digest(root: Path, chapter: str) -> str:
    """A chapter's source and release, and the recorded outputs of its replayed cells
    (coursekit.grade.replay), which are on its pages too."""
    return digest_paths([root / "source" / chapter, root / "release" / chapter, root / "replay" / f"{chapter}.json"])


@dataclass
class Keys:
    """The parts of every notebook's key that a run shares."""
    run: str                       # environment, grading code, the run's rules
    chapters: dict[str, str]       # chapter -> digest of its source and release

    @classmethod
    def of(cls, root: Path, jobs: list[Job], rules: dict) -> Keys:
        run = hashlib.sha256(json.dumps([environment_digest(), code_digest(root), rules], sort_keys=True)
                             .encode()).hexdigest()
        return cls(run, {ch: chapter_digest(root, ch) for ch in sorted({j.chapter for j in jobs})})

    def key(self, root: Path, job: Job) -> str:
        sub = digest_paths([root / "submitted" / job.student / job.chapter])
        return hashlib.sha256(f"{self.run}\n{self.chapters[job.chapter]}\n{sub}".encode()).hexdigest()


def manual_digest(gb, job: Job) -> str | None:
    """The manual grades and comments the gradebook holds for the job (None: not in the gradebook)."""
    try:
        nb = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
    except Exception:  # noqa: BLE001 (MissingEntry: never graded, or the gradebook was replaced)
        return None
    parts = [(g.name, g.manual_score, g.extra_credit) for g in nb.grades]
    parts += [(c.name, c.manual_comment) for c in nb.comments]
    return hashlib.sha256(json.dumps(sorted(parts, key=repr), default=str).encode()).hexdigest()


def record_path(state: Path, job: Job) -> Path:
    return state / FOLDER / f"{job.chapter}__{job.student}.json"


def feedback_path(root: Path, job: Job) -> Path:
    return root / "feedback" / job.student / job.chapter / f"{job.chapter}.html"


def graded_path(root: Path, job: Job) -> Path:
    return root / "autograded" / job.student / job.chapter / f"{job.chapter}.ipynb"


def gradebook_exists(root: Path) -> bool:
    """Whether the course's gradebook is there to be read (a SQLite gradebook that is
    gone is not created by reading it: before the preflight nothing is written)."""
    from grading import protocol
    url = protocol.gradebook_url(root)
    return not (url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists())


def may_reuse(root: Path, state: Path, jobs: list[Job]) -> bool:
    """Whether any job has a recorded key and the gradebook is there to check it against."""
    return gradebook_exists(root) and any(record_path(state, j).exists() for j in jobs)


def same_key(root: Path, state: Path, job: Job) -> bool:
    """Whether ``job`` may be kept, as far as can be told without the gradebook: its key
    (``job.key``) is the one recorded and its graded notebook and feedback are there."""
    try:
        rec = json.loads(record_path(state, job).read_text())
    except (OSError, ValueError):
        rec = {}
    return rec.get("key") == job.key and graded_path(root, job).exists() and feedback_path(root, job).exists()


def sort_out(root: Path, state: Path, gb, keys: Keys, jobs: list[Job]) -> tuple[list[Job], list[Job], list[Job]]:
    """(to grade, feedback only, reused): a job is reused when its key is the one
    recorded and its graded notebook, feedback and gradebook rows are all there;
    its feedback alone is made again when only its manual grades changed."""
    grade, feedback_only, reused = [], [], []
    for job in jobs:
        job.key = keys.key(root, job)
        try:
            rec = json.loads(record_path(state, job).read_text())
        except (OSError, ValueError):
            rec = {}
        have = graded_path(root, job).exists() and feedback_path(root, job).exists()
        manual = manual_digest(gb, job) if rec.get("key") == job.key and have else None
        if manual is None:
            grade.append(job)
        elif manual == rec.get("manual"):
            reused.append(job)
        else:
            feedback_only.append(job)
    for job in feedback_only + reused:
        job.reused = True
    return grade, feedback_only, reused


def keep(root: Path, state: Path, gb, jobs: list[Job]) -> int:
    """Record the key of each job whose result can be reused; returns how many."""
    kept = 0
    for job in jobs:
        path = record_path(state, job)
        manual = manual_digest(gb, job)
        if (not getattr(job, "key", None) or job.failure or any(f.kind in TRANSIENT for f in job.flags)
                or manual is None or not feedback_path(root, job).exists()):
            path.unlink(missing_ok=True)
            continue
        data = json.dumps({"key": job.key, "manual": manual})
        runner.write_atomically(path, lambda tmp, data=data: tmp.write_text(data))
        kept += 1
    return kept
