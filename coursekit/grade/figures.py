"""The grading run's figures step: the pictures that depend on nothing a
student wrote are drawn once per machine, not once per notebook.

A chapter shows such a figure with ``helpers.plots.show_static(key, *args,
alt=...)``. Under nbgrader the kernel does not draw it: it leaves the figure's
description with a mark (the output metadata ``course_figure``: the key, the
arguments, the language). After autograde this step reads the marks of every
graded notebook, draws each picture not drawn before (in a process forked
from the warm fork server, into a cache shared by every course folder on the
machine and keyed by the course's helpers), and puts the picture into the
output, with its description as the image's text alternative: the autograded
notebook and its feedback page show it as if the kernel had drawn it.

A mark is only a request: only registered figures (``helpers.plots.STATIC``)
with arguments their registration accepts are drawn, and only so many per
notebook, so a submission that forges marks gets at most a course figure.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

import nbformat

from helpers.runtime import FIGURE_MARK as PLACEHOLDER

PER_NOTEBOOK = 24          # marks filled in one notebook (a forged flood stays cheap)
PER_RUN = 200              # pictures drawn in one run
CACHE_ENV = "COURSE_FIGURE_CACHE"


def digest(mark: dict) -> str:
    """The file name of a mark's picture: its key, arguments and language."""
    text = json.dumps([mark.get("key"), mark.get("args"), mark.get("lang")], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def helpers_fingerprint(helpers_dir: Path) -> str:
    """What the pictures depend on: the course's helpers and matplotlib's version (read from
    its installed metadata: importing matplotlib for it cost a one-notebook run 0.25 s)."""
    from importlib.metadata import version
    h = hashlib.sha256(version("matplotlib").encode())
    for path in sorted(Path(helpers_dir).rglob("*")):
        if path.is_file() and path.suffix in (".py", ".otf") and "__pycache__" not in path.parts:
            h.update(path.relative_to(helpers_dir).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_dir(helpers_dir: Path) -> Path:
    base = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
        / "transformer-course" / "figures"
    return Path(base) / helpers_fingerprint(helpers_dir)


def marks(nb) -> list[tuple[dict, dict]]:
    """(output, mark) for the figure marks of a notebook, the first PER_NOTEBOOK."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            mark = out.get("metadata", {}).get(PLACEHOLDER)
            if isinstance(mark, dict) and isinstance(mark.get("key"), str) and "image/png" not in out.get("data", {}):
                found.append((out, mark))
    return found[:PER_NOTEBOOK]


def fill(nb, folder: Path) -> bool:
    """Put each marked figure's picture (from ``folder``) into ``nb``; True if any was."""
    changed = False
    for out, mark in marks(nb):
        png = folder / f"{digest(mark)}.png"
        if not png.exists():
            continue
        alt = str(mark.get("alt") or "")
        out["data"] = {"image/png": base64.b64encode(png.read_bytes()).decode("ascii"), "text/plain": alt}
        out["metadata"] = {"image/png": {"alt": alt}}
        changed = True
    return changed


def draw(payload: dict) -> int:
    """Draw the marks of ``payload["marks"]`` into ``payload["folder"]`` (run
    forked: it imports the course's helpers and matplotlib). A mark that is
    not registered or whose arguments are not accepted is skipped."""
    import importlib

    import matplotlib
    matplotlib.use("agg")
    from helpers import plots, set_language

    folder = Path(payload["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    for mark in payload["marks"]:
        key, args = mark.get("key"), mark.get("args") or []
        module, _, name = str(key).partition(":")
        if not module.startswith("helpers.") or not isinstance(args, list) or mark.get("lang") not in ("zh", "en"):
            continue
        try:
            fn = getattr(importlib.import_module(module), name)   # importing it registers its figures
            if key not in plots.STATIC or not plots.STATIC[key](*args):
                continue
            set_language(mark["lang"])
            data = base64.b64decode(plots.png_of(fn(*args)))
        except Exception as exc:  # noqa: BLE001 - one picture that fails leaves its description
            print(f"figures: {key} {args}: {type(exc).__name__}: {exc}", flush=True)
            continue
        target = folder / f"{digest(mark)}.png"
        tmp = target.with_name(f".{target.name}.{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return 0


def step(run) -> None:
    """The pipeline step (after the seal check): draw what is missing, fill every
    graded notebook whose page was not made while the others were graded."""
    fill_graded(run, [j for j in run.jobs if not j.paged])


def fill_graded(run, jobs) -> None:
    """Draw what the graded notebooks of ``jobs`` miss, and fill them."""
    from ..base import runner
    from ..base.nbgrader_run import env_with_bin

    paths = [run.graded_path(j) for j in jobs if run.graded_path(j).exists()]
    if not paths:
        return
    import helpers
    folder = cache_dir(Path(helpers.__file__).parent)   # the helpers the kernels imported
    books, wanted = {}, {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        found = marks(nb)
        if found:
            books[path] = nb
            for _, mark in found:
                if not (folder / f"{digest(mark)}.png").exists():
                    wanted.setdefault(digest(mark), mark)
    if wanted:
        log = run.state / "logs" / "figures.log"
        runner.run_forked(f"{__name__}:draw", {"marks": list(wanted.values())[:PER_RUN], "folder": str(folder)},
                          run.root, env_with_bin(), log, timeout=600)
    for path, nb in books.items():
        if fill(nb, folder):
            os.chmod(path, 0o644)
            nbformat.write(nb, path)
