"""The course's folder and its chapters: what the author's and the grader's rooms both read.

``ROOT`` is the course folder this code is installed in (a clone, a worker's
image, a pinned install); ``chapters`` lists the chapter texts of
``notebooks/`` in course order; ``read_chapter`` reads one of them (a
jupytext MyST file holding both languages) with the line where each cell
starts; ``source_language`` and ``text_stub`` read what a built chapter says
about its language.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

LANGS = ("zh", "en")
DEFAULT_LANG = "zh"
# What nbgrader writes into a hand-graded answer cell of the release, per language
# (its ClearSolutions.text_stub); see text_stub().
TEXT_STUBS = {"zh": "在这里写下你的答案。", "en": "YOUR ANSWER HERE"}
ROOT = Path(__file__).resolve().parent.parent.parent
NOTEBOOKS = ROOT / "notebooks"


class BuildError(ValueError):
    """A chapter text breaks one of the build rules."""


@dataclass(frozen=True)
class CellRef:
    index: int
    line: int

    def __str__(self) -> str:
        return f"cell {self.index} (line {self.line})"


def chapters(root: Path = NOTEBOOKS) -> list[str]:
    """Chapter names, e.g. ``ch01_attention``, in course order."""
    return sorted(p.stem for p in Path(root).glob("ch[0-9][0-9]_*.md"))


def given_manifest(notebooks: Path = NOTEBOOKS) -> dict[str, list[str]]:
    """Which files of ``notebooks/given/`` each chapter hands out beside its notebook
    (``chapters.json``: code a later chapter needs from an earlier one's answers);
    empty where the course has none."""
    manifest = Path(notebooks) / "given" / "chapters.json"
    if not manifest.exists():
        return {}
    import json
    return json.loads(manifest.read_text(encoding="utf-8"))


def _cell_lines(text: str) -> list[int]:
    """Line number where each cell starts in a MyST file (best effort)."""
    lines = []
    in_code = False
    seen_header = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("```{code-cell}"):
            lines.append(no)
            in_code = True
        elif in_code and line.startswith("```"):
            in_code = False
        elif not in_code and line.startswith("+++"):
            lines.append(no)
        elif not in_code and not seen_header and line == "---" and no > 1:
            seen_header = True
    return lines


def read_chapter(path: Path):
    """The chapter text at ``path`` as a notebook (both languages), and where each cell starts."""
    import jupytext
    text = Path(path).read_text(encoding="utf-8")
    nb = jupytext.reads(text, fmt="md:myst")
    starts = _cell_lines(text)
    refs = []
    for i, _ in enumerate(nb.cells):
        refs.append(CellRef(i, starts[i] if i < len(starts) else 0))
    return nb, refs


def source_language(chapter: str, course_root: Path = ROOT) -> str:
    """The language source/<chapter>/ was built in (from its notebook metadata)."""
    path = Path(course_root) / "source" / chapter / f"{chapter}.ipynb"
    meta = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    return meta.get("course", {}).get("lang", DEFAULT_LANG)


def text_stub(chapter: str, course_root: Path = ROOT) -> str:
    """The stub for the hand-graded answer cells of ``chapter``'s release, in the
    language of its source build: generate_assignment takes it as
    ``--ClearSolutions.text_stub=...``."""
    return TEXT_STUBS[source_language(chapter, course_root)]
