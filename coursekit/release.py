"""source/ -> release/ with nbgrader generate_assignment."""
from __future__ import annotations

import shutil
from pathlib import Path

from .build import ROOT, text_stub
from .nbgrader_run import nbgrader


def generate_release(chapter: str, course_root: Path = ROOT, db: bool = False) -> Path:
    """Regenerate release/<chapter>/ from source/<chapter>/. Without ``db`` the
    gradebook is left alone (the release itself does not depend on it)."""
    course_root = Path(course_root)
    dest = course_root / "release" / chapter
    if dest.exists():
        shutil.rmtree(dest)
    # the hand-graded cells' stub in the chapter's language ("YOUR ANSWER HERE" is nbgrader's English)
    args = ["generate_assignment", chapter, "--force", "--log-level=WARN",
            f"--ClearSolutions.text_stub={text_stub(chapter, course_root)}"]
    if not db:
        args.append("--no-db")
    nbgrader(args, course_root)
    return dest / f"{chapter}.ipynb"
