"""nbgrader's Execute that replays the lecture cells marked ``replay``.

``nbgrader autograde`` runs ``coursekit.grade.replay.Execute`` (nbgrader_config.py,
``Autograde.autograde_preprocessors``) in place of nbgrader's ``Execute``. For
each cell that the chapter marks ``replay`` (coursekit.author.replay) it
puts the output the course recorded for that cell (``replay/<chapter>.json``,
in the language of the chapter's source build) in place of running it, when
``plan`` finds that it may: the submitted cell's source is the course's, and
on the submission as handed in it reads nothing the student's cells define and
no later cell reads what it defines. Every other cell runs as before.

``COURSE_REPLAY=0`` turns replay off (the recorder runs every cell so; so can
an instructor who wants every cell run). Validate and the student's own runs
never come here.
"""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from nbgrader.preprocessors import Execute as NbgraderExecute

from coursekit.author import replay

ENV = "COURSE_REPLAY"


def enabled() -> bool:
    return os.environ.get(ENV, "1") not in ("0", "off", "no", "false")


def course_root() -> Path:
    from grading import protocol
    return Path(os.environ.get(protocol.ENV_ROOT) or os.getcwd())


def source_language(root: Path, chapter: str) -> str | None:
    path = root / "source" / chapter / f"{chapter}.ipynb"
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("metadata", {}).get("course", {}).get("lang", "zh")


def course_sources(root: Path, chapter: str) -> set[str]:
    """The sources of the course's own lecture and test cells (as source/ has them,
    hidden tests and all; nbgrader restores a test cell to this before it runs)."""
    import nbformat
    path = root / "source" / chapter / f"{chapter}.ipynb"
    nb = nbformat.read(path, as_version=4)
    return {c.source for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("solution")}


def plan(nb, recorded: dict, ours: set[str]) -> dict[int, list]:
    """index of a cell in ``nb`` -> the outputs to put in its place, for each marked
    cell that may be replayed on this submission (module docstring)."""
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    candidates = {}
    for k, (_, c) in enumerate(code):
        rec = recorded.get(c.get("id"))
        if rec is not None and rec.get("source_sha") == replay.source_hash(c.source):
            candidates[k] = rec
    while candidates:     # a marked cell that must run may make an earlier one run too
        cells = [replay.Cell(f"cell {i}", c.source, c.source not in ours, k in candidates)
                 for k, (i, c) in enumerate(code)]
        wrong = {k for k, _ in replay.problems(cells)}
        if not wrong & set(candidates):
            break
        for k in wrong:
            candidates.pop(k, None)
    return {code[k][0]: rec["outputs"] for k, rec in candidates.items()}


class Execute(NbgraderExecute):
    """nbgrader's Execute, with the marked lecture cells replayed (module docstring)
    and the kernel's end seen at once (kernel_client.QuickStop).
    (Named like nbgrader's, so the per-notebook account, coursekit.grade.account,
    still finds the kernel's time under ``Execute``.)"""

    def __init__(self, *args, **kwargs):
        # a kernel asked to shut down is seen to go within 5 ms (nbgrader's own Execute would
        # set jupyter_client's manager here, which looks every 0.1 s; coursekit.grade.kernel_client)
        from .kernel_client import QuickStop
        kwargs.setdefault("kernel_manager_class", QuickStop)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        self._replayed = {}
        if enabled():
            try:
                chapter = resources["nbgrader"]["assignment"]
                root = course_root()
                lang = source_language(root, chapter)
                recorded = replay.load(chapter, root).get(lang) or {}
                if recorded:
                    self._replayed = plan(nb, recorded, course_sources(root, chapter))
            except Exception as e:  # noqa: BLE001 (never worse than running every cell)
                self.log.warning("replay: running every cell (%s)", e)
                self._replayed = {}
        return super().preprocess(nb, resources, km=km)

    def preprocess_cell(self, cell, resources, index):
        outputs = self._replayed.get(index)
        if outputs is None:
            return super().preprocess_cell(cell, resources, index)
        self._check_assign_resources(resources)
        import nbformat
        cell.outputs = [nbformat.from_dict(copy.deepcopy(o)) for o in outputs]
        cell.execution_count = None
        cell.metadata.setdefault("course", {})["replayed"] = True
        return cell, self.resources
