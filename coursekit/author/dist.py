"""The student packs: one zip per language with the release notebooks, the
public helpers package, the environment files and a student README.

A pack's `python course.py lab` copies release/ into the pack's own
workspace/ folder and serves that (coursekit/student/workspace.py, shipped as
lab_workspace.py), with the student's JupyterLab configuration: no instructor
tools, Chinese menus in the zh pack.

Never in a pack: source/, hidden tests, model answers, grading/, coursekit/,
the gradebook, autograded/ or submitted/ (tests/test_dist.py checks).
"""
from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path

from ..student import workspace
from . import build, release

COURSE = "transformer-course"
STUDENT_FILES = Path(__file__).parent.parent / "student"
STUDENT_PYPROJECT = """[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "transformer-course-student"
version = "0.1.0"
requires-python = ">=3.11"

[tool.setuptools.packages.find]
include = ["helpers*"]

[tool.setuptools.package-data]
"helpers.fonts" = ["*.otf", "OFL.txt"]
"helpers" = ["probes/*.json"]
"""
STUDENT_MAKEFILE = """PY ?= python3
.PHONY: help lab env
help:
\t@$(PY) course.py help
lab:      ## JupyterLab on your own workspace (workspace/, copied from release/)
\t$(PY) course.py lab
env:      ## only create the environment (.venv)
\t$(PY) course.py env
"""


def _student_release(lang: str, work: Path) -> Path:
    """Build every chapter in ``lang`` and run nbgrader on it in ``work``."""
    shutil.copy(build.ROOT / "nbgrader_config.py", work / "nbgrader_config.py")
    for ch in build.chapters():
        build.write_source(ch, lang, course_root=work)
    release.generate_releases(build.chapters(), course_root=work)
    return work / "release"


# what only the course's own tests and deployment checks need; a student's environment goes without
# (and the instructor-only reports: answer similarity, Canvas upload)
DEV_ONLY = {"pytest", "pytest-xdist", "playwright", "jupyterhub", "psycopg", "psycopg-binary", "psycopg2-binary",
            "ruff", "copydetect", "canvasapi", "axe-playwright-python", "dask", "distributed",
            "sphinx", "myst-nb", "furo", "sphinx-copybutton", "jieba"}     # make site: the instructor builds the website


def student_requirements() -> str:
    """requirements.txt without the packages only the course's own tests use."""
    import re
    out, comments = [], []
    for line in (build.ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            comments.append(line)
            continue
        name = re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
        if name not in DEV_ONLY:
            out += comments + [line]
        comments = []
    return "\n".join(out) + "\n"


def assemble_pack(rel: Path, lang: str, pack: Path) -> Path:
    """Lay out a student pack in ``pack`` from the release folder ``rel``."""
    pack = Path(pack)
    pack.mkdir(parents=True, exist_ok=True)
    shutil.copytree(rel, pack / "release", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(build.ROOT / "helpers", pack / "helpers",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("course.py", "environment.yml"):
        shutil.copy(build.ROOT / f, pack / f)
    workspace.copy_module(pack / "lab_workspace.py")
    (pack / "requirements.txt").write_text(student_requirements(), encoding="utf-8")
    (pack / "pyproject.toml").write_text(STUDENT_PYPROJECT)
    (pack / "Makefile").write_text(STUDENT_MAKEFILE)
    shutil.copy(STUDENT_FILES / f"README.{lang}.md", pack / "README.md")
    return pack


def make_pack(lang: str, out_dir: Path = build.ROOT / "dist") -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"{COURSE}-student-{lang}"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        work = tmp / "build"
        work.mkdir()
        pack = assemble_pack(_student_release(lang, work), lang, tmp / name)
        zpath = out_dir / f"{name}.zip"
        with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
            for p in sorted(pack.rglob("*")):
                if p.is_file():
                    z.write(p, p.relative_to(tmp).as_posix())
    return zpath
