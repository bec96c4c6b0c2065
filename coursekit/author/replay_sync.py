"""What ``replay/<chapter>.json`` must hold, from the build alone (coursekit.author.replay
is the analysis; the record is made by grading the model answer: coursekit.grade.recorder):
the cells a chapter's build marks, the fingerprint of what each one's output follows
from, and whether the record kept is in sync with them.
"""
from __future__ import annotations

from pathlib import Path

from .build import LANGS, NOTEBOOKS, build_chapter
from .replay import inputs_hash, is_marked, load, record_path, source_hash


def marked_cells(chapter: str, lang: str) -> list:
    """The marked cells of ``chapter``'s build in ``lang`` (cell id and source as source/ has them)."""
    nb = build_chapter(chapter, lang, keep_marks=True)
    return [c for c in nb.cells if is_marked(c)]


def marked_inputs(chapter: str, lang: str, root: Path | None = None) -> dict[str, dict]:
    """cell id -> {source_sha, inputs_sha} for each marked cell of the build in ``lang``
    (of the chapter texts in ``root``, by default notebooks/)."""
    nb = build_chapter(chapter, lang, root or NOTEBOOKS, keep_marks=True)
    return {c.id: {"source_sha": source_hash(c.source), "inputs_sha": inputs_hash(nb, i)}
            for i, c in enumerate(nb.cells) if is_marked(c)}


def expected(chapter: str) -> dict:
    """What the record must say per language, from the build alone: cell id ->
    {source_sha, inputs_sha} (a marked cell edited, or an earlier cell it reads from
    edited, asks for a new record)."""
    return {lang: marked_inputs(chapter, lang) for lang in LANGS}


def in_sync(chapter: str, course_root: Path | None = None) -> list[str]:
    """What differs between ``replay/<chapter>.json`` and the build (empty: in sync)."""
    want = expected(chapter)
    have = load(chapter, course_root)
    if not any(want.values()):
        return [] if not have else [f"{record_path(chapter, course_root)} exists but {chapter} marks no cell"]
    out = []
    for lang, cells in want.items():
        got = {cid: {k: rec.get(k) for k in ("source_sha", "inputs_sha")} for cid, rec in (have.get(lang) or {}).items()}
        if got != cells:
            out.append(f"{chapter} ({lang}): the record holds {sorted(got.items())}, the build has "
                       f"{sorted(cells.items())}: run `python course.py replay {chapter}`")
    return out
