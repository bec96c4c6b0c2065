"""source/ -> release/ with nbgrader generate_assignment."""
from __future__ import annotations

import shutil
from pathlib import Path

from ..base.chapters import ROOT, text_stub


def generate_release(chapter: str, course_root: Path = ROOT) -> Path:
    """Regenerate release/<chapter>/ from source/<chapter>/ (the gradebook is left alone)."""
    return generate_releases([chapter], course_root)[0]


def generate_releases(chapters: list[str], course_root: Path = ROOT) -> list[Path]:
    """Regenerate release/<chapter>/ for many chapters, in one nbgrader process
    per hand-graded stub language (nbgrader's app and configuration load once,
    not once per chapter). The gradebook is left alone: the release does not
    depend on it."""
    course_root = Path(course_root)
    for ch in chapters:
        shutil.rmtree(course_root / "release" / ch, ignore_errors=True)
    log = course_root / ".grading" / "logs" / "release.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    failed = generate_assignments(chapters, course_root, course_root / "release", log, gradebook=False)
    if failed:
        raise SystemExit(f"release: nbgrader generate_assignment failed for {', '.join(failed)}:\n"
                         f"{log.read_text(errors='replace')[-4000:]}")
    return [course_root / "release" / ch / f"{ch}.ipynb" for ch in chapters]


def generate_assignments(chapters: list[str], course_root: Path, release_dir: Path, log: Path,
                         gradebook: bool, db_url: str | None = None) -> list[str]:
    """nbgrader generate_assignment for ``chapters`` into ``release_dir``, one
    nbgrader process per hand-graded stub language, each written answer cell
    given the stub of its chapter's language: the release a student gets and
    the cells the gradebook records (``gradebook=True``) must agree on it, or
    nbgrader cannot see that an answer was left as it came (and scores it 0).
    ``db_url``: the gradebook to record them in, when not the course's own.
    Returns the chapters whose group failed."""
    from ..base.nbgrader_run import env_with_bin
    from ..base.runner import run_forked

    by_stub: dict[str, list[str]] = {}
    for ch in chapters:
        # "YOUR ANSWER HERE" is nbgrader's English; the course's stub speaks the chapter's language
        by_stub.setdefault(text_stub(ch, course_root), []).append(ch)
    failed = []
    for stub, group in by_stub.items():
        extra = ([] if gradebook else ["--no-db"]) + [f"--ClearSolutions.text_stub={stub}"] + \
            ([f"--CourseDirectory.db_url={db_url}"] if gradebook and db_url else [])
        payload = {"chapters": group, "release": str(release_dir), "extra": extra}
        if run_forked("coursekit.base.batch:assignments", payload, course_root, env_with_bin(), log) != 0:
            failed += group
    return failed
