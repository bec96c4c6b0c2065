"""source/ -> release/ with nbgrader generate_assignment."""
from __future__ import annotations

import shutil
from pathlib import Path

from .build import ROOT, text_stub


def generate_release(chapter: str, course_root: Path = ROOT) -> Path:
    """Regenerate release/<chapter>/ from source/<chapter>/ (the gradebook is left alone)."""
    return generate_releases([chapter], course_root)[0]


def generate_releases(chapters: list[str], course_root: Path = ROOT) -> list[Path]:
    """Regenerate release/<chapter>/ for many chapters, in one nbgrader process
    per hand-graded stub language (nbgrader's app and configuration load once,
    not once per chapter). The gradebook is left alone: the release does not
    depend on it."""
    from .nbgrader_run import env_with_bin
    from .runner import run_forked

    course_root = Path(course_root)
    by_stub: dict[str, list[str]] = {}
    for ch in chapters:
        # the hand-graded cells' stub in the chapter's language ("YOUR ANSWER HERE" is nbgrader's English)
        by_stub.setdefault(text_stub(ch, course_root), []).append(ch)
        shutil.rmtree(course_root / "release" / ch, ignore_errors=True)
    log = course_root / ".grading" / "logs" / "release.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    for stub, group in by_stub.items():
        payload = {"chapters": group, "release": str(course_root / "release"),
                   "extra": ["--no-db", f"--ClearSolutions.text_stub={stub}"]}
        rc = run_forked("coursekit.batch:assignments", payload, course_root, env_with_bin(), log)
        if rc != 0:
            raise SystemExit(f"release: nbgrader generate_assignment failed for {', '.join(group)}:\n"
                             f"{log.read_text(errors='replace')[-4000:]}")
    return [course_root / "release" / ch / f"{ch}.ipynb" for ch in chapters]
