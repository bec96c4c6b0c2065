"""A chapter notebook's outline: which exercise each graded cell belongs to.

The heading above a graded cell names its exercise ("练习 1：数值稳定的
softmax（从零实现）"), in the notebook's language. Validate, the feedback
page and the grade exports all name exercises this way.
"""
from __future__ import annotations

import re


def exercise_titles(nb, answers: bool = False) -> dict[str, str]:
    """grade id -> the heading above its cell, for every graded cell (and task);
    with ``answers``, for every answer cell too."""
    titles, heading = {}, ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    heading = line.lstrip("#").strip()
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") or meta.get("task") or (answers and meta.get("solution")):
            titles[meta["grade_id"]] = heading
    return titles


def exercise_number(title: str) -> int | None:
    """3 for "练习 3：…" or "Exercise 3: …"; None for a heading that names no exercise."""
    m = re.match(r"\s*(?:练习|Exercise)\s*(\d+)", title)
    return int(m.group(1)) if m else None
