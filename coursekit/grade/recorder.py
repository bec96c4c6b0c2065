"""``python course.py replay chNN``: the record of a chapter's replayed lecture cells
(``replay/<chapter>.json``, read by coursekit.grade.replay), made by grading the
course's own model answer through the grading pipeline with every cell run.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..author.build import LANGS, BuildError
from ..author.replay import record_path
from ..author.replay_sync import marked_cells, marked_inputs


def _graded_model_answer(chapter: str, lang: str, work: Path):
    """Grade the model answer of ``chapter``'s ``lang`` build through the course's own
    pipeline, every cell run (COURSE_REPLAY=0), in a scratch course ``work``;
    returns the autograded notebook (what a feedback page is made from)."""
    import os
    import shutil

    import nbformat

    from ..author.build import ROOT, build_chapter, dumps, write_given
    from ..base.nbgrader_run import nbgrader
    from . import pipeline
    from .sandbox import sandbox_available
    shutil.rmtree(work, ignore_errors=True)
    (work / "source" / chapter).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", work / "nbgrader_config.py")
    source = build_chapter(chapter, lang)
    (work / "source" / chapter / f"{chapter}.ipynb").write_text(dumps(source), encoding="utf-8")
    write_given(chapter, work / "source" / chapter)          # what the chapter hands out beside its notebook
    nbgrader(["generate_assignment", chapter, "--force", "--log-level=ERROR"], work)
    release = nbformat.read(work / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in release.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = "\n".join(line for line in answers[gid].splitlines()
                                    if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    dest = work / "submitted" / "model_answer" / chapter / f"{chapter}.ipynb"
    dest.parent.mkdir(parents=True)
    nbformat.write(release, dest)
    before = os.environ.get("COURSE_REPLAY")
    os.environ["COURSE_REPLAY"] = "0"
    try:
        pipeline.grade(work, chapter=chapter, sandbox=sandbox_available()[0], quiet=True, report=False)
    finally:
        os.environ.pop("COURSE_REPLAY") if before is None else os.environ.__setitem__("COURSE_REPLAY", before)
    return nbformat.read(work / "autograded" / "model_answer" / chapter / f"{chapter}.ipynb", as_version=4)


def record(chapter: str, course_root: Path | None = None, work: Path | None = None) -> Path:
    """Write ``replay/<chapter>.json``: for each language, each marked cell's id, the
    hash of its source and the outputs it printed when the course graded its own model
    answer (every cell run). Removes the record of a chapter that marks no cell."""
    import tempfile

    path = record_path(chapter, course_root)
    marked = {lang: {c.id: c.source for c in marked_cells(chapter, lang)} for lang in LANGS}
    inputs = {lang: marked_inputs(chapter, lang) for lang in LANGS}
    if not any(marked.values()):
        path.unlink(missing_ok=True)
        return path
    out: dict = {"chapter": chapter}
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        for lang in LANGS:
            graded = _graded_model_answer(chapter, lang, Path(work or tmp) / lang)
            cells = {}
            for cell in graded.cells:
                if cell.get("id") not in marked[lang]:
                    continue
                if cell.source != marked[lang][cell.id]:
                    raise BuildError(f"{chapter} ({lang}): cell {cell.id} was graded with another source")
                if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                    raise BuildError(f"{chapter} ({lang}): marked cell {cell.id} failed under grading; "
                                     "a cell that fails is not replayed")
                times = cell.metadata.get("execution", {})
                cells[cell.id] = {**inputs[lang][cell.id], "outputs": cell.get("outputs", []),
                                  "seconds": _seconds(times)}
            missing = set(marked[lang]) - set(cells)
            if missing:
                raise BuildError(f"{chapter} ({lang}): marked cells {sorted(missing)} not in the graded notebook")
            out[lang] = cells
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _seconds(times: dict) -> float | None:
    from datetime import datetime
    try:
        a, b = (datetime.fromisoformat(times[k].replace("Z", "+00:00")).timestamp()
                for k in ("iopub.execute_input", "shell.execute_reply"))
    except (KeyError, ValueError):
        return None
    return round(b - a, 3)
