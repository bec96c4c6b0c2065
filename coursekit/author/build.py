"""Build nbgrader source notebooks from the bilingual chapter texts in notebooks/.

A chapter is one jupytext MyST file holding both languages. The build is a chain
of small steps, each testable alone:

    read_chapter -> validate -> replay.check -> select_language -> strip_rule_marks -> resolve_claims
        -> render_exercise_meta -> resolve_strings
        -> localise_stubs -> complete_nbgrader_metadata -> to_notebook

Rules a chapter must follow (violations raise BuildError naming the cell):
- every markdown cell carries ``lang`` (``zh`` or ``en``); a ``zh`` cell is
  immediately followed by its ``en`` counterpart (and vice versa);
- a code cell may carry ``lang`` too (widget labels, the language switch); it is
  paired the same way and may not be a graded cell unless both copies share
  the grade id;
- grade ids are unique within a language;
- a code solution cell contains ``### BEGIN SOLUTION`` / ``### END SOLUTION``;
- a graded cell has ``points``;
- a lecture code cell marked ``replay`` (replayed, not run, under grading) is
  one the analysis cannot prove wrong (coursekit.author.replay); the build
  strips the mark.
"""
from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import nbformat

from ..base import syntax
from ..base.chapters import (  # noqa: F401
    DEFAULT_LANG,
    LANGS,
    NOTEBOOKS,
    ROOT,
    TEXT_STUBS,
    BuildError,
    CellRef,
    chapters,
    given_manifest,
    read_chapter,
    source_language,
    text_stub,
)
from . import claims, ledger, replay

GIVEN = "given"          # notebooks/given/: code a chapter hands out in its own folder (chapters.json says which)


def _grade_id(cell) -> str | None:
    return (cell.metadata.get("nbgrader") or {}).get("grade_id")


def validate(nb, refs: list[CellRef], name: str = "chapter") -> None:
    cells = nb.cells
    for cell, ref in zip(cells, refs):
        lang = cell.metadata.get("lang")
        if lang is not None and lang not in LANGS:
            raise BuildError(f"{name}: {ref}: unknown language {lang!r} (use one of {LANGS})")
    i = 0
    while i < len(cells):
        cell, ref = cells[i], refs[i]
        lang = cell.metadata.get("lang")
        if cell.cell_type == "markdown" and lang is None:
            raise BuildError(f"{name}: {ref}: markdown cell has no language; "
                             f'start it with +++ {{"lang": "zh"}} or +++ {{"lang": "en"}}')
        if lang is not None:
            other = "en" if lang == "zh" else "zh"
            nxt = cells[i + 1] if i + 1 < len(cells) else None
            if nxt is None or nxt.metadata.get("lang") != other or nxt.cell_type != cell.cell_type:
                raise BuildError(f"{name}: {ref}: {cell.cell_type} cell in {lang!r} has no "
                                 f"{other!r} counterpart right after it")
            if _grade_id(cell) != _grade_id(nxt):
                raise BuildError(f"{name}: {ref}: the {lang!r} and {other!r} copies of this cell "
                                 f"have different grade ids ({_grade_id(cell)!r} vs {_grade_id(nxt)!r})")
            i += 2
        else:
            i += 1

    for lang in LANGS:
        seen: dict[str, CellRef] = {}
        for cell, ref in zip(cells, refs):
            if cell.metadata.get("lang", lang) != lang:
                continue
            gid = _grade_id(cell)
            if gid is None:
                continue
            if gid in seen:
                raise BuildError(f"{name}: {ref}: duplicate grade id {gid!r} (first used at {seen[gid]})")
            seen[gid] = ref

    for cell, ref in zip(cells, refs):
        meta = cell.metadata.get("nbgrader")
        if meta is None:
            continue
        gid = meta.get("grade_id")
        if not gid or not re.fullmatch(r"[A-Za-z0-9_\-]+", gid):
            raise BuildError(f"{name}: {ref}: nbgrader cell needs a grade_id of letters, digits, _ or -")
        if meta.get("solution") and cell.cell_type == "code":
            if "### BEGIN SOLUTION" not in cell.source or "### END SOLUTION" not in cell.source:
                raise BuildError(f"{name}: {ref}: solution cell {gid!r} has no "
                                 "### BEGIN SOLUTION / ### END SOLUTION markers")
        if meta.get("grade") and not meta.get("points"):
            raise BuildError(f"{name}: {ref}: graded cell {gid!r} has no points")
        if "### BEGIN HIDDEN TESTS" in cell.source and not meta.get("grade"):
            raise BuildError(f"{name}: {ref}: hidden tests in a cell that is not graded ({gid!r})")


def select_language(nb, lang: str):
    if lang not in LANGS:
        raise BuildError(f"unknown language {lang!r}; choose one of {', '.join(LANGS)}")
    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if c.metadata.get("lang", lang) == lang]
    for c in out.cells:
        c.metadata.pop("lang", None)
    return out


def _literal_pair(node) -> bool:
    """``t("中文", "English")`` (or ``plots.label``) with two string literals (f-strings too)."""
    func = node.func if isinstance(node, ast.Call) else None
    named = (isinstance(func, ast.Name) and func.id in ("t", "label")
             or isinstance(func, ast.Attribute) and func.attr == "label"
             and isinstance(func.value, ast.Name) and func.value.id == "plots")
    return (named and len(node.args) == 2 and not node.keywords
            and all(isinstance(a, ast.JoinedStr) or (isinstance(a, ast.Constant) and isinstance(a.value, str))
                    for a in node.args))


def _offsets(source: str) -> list[int]:
    starts, pos = [], 0
    for line in source.splitlines(keepends=True):
        starts.append(pos)
        pos += len(line)
    return starts + [pos]


def resolve_code(source: str, lang: str) -> str:
    """Replace each ``t("中文", "English")`` of string literals by the literal of
    ``lang``, so a build's code shows one language. Anything else is left alone
    (``t(a, b)`` of variables still picks at run time)."""
    try:
        tree = syntax.parse(source)
    except SyntaxError:          # IPython magics and the like: leave the cell as it is
        return source
    starts = _offsets(source)

    def span(node) -> tuple[int, int]:
        # ast offsets count UTF-8 bytes within a line
        def at(line, col):
            text = source[starts[line - 1]:starts[line]]
            return starts[line - 1] + len(text.encode("utf-8")[:col].decode("utf-8"))
        return at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset)

    calls = [n for n in ast.walk(tree) if _literal_pair(n)]
    outer = [c for c in calls if not any(o is not c and span(o)[0] <= span(c)[0] and span(c)[1] <= span(o)[1]
                                         for o in calls)]
    out = source
    for call in sorted(outer, key=lambda n: span(n)[0], reverse=True):
        a, b = span(call.args[LANGS.index(lang)])
        text = source[a:b]
        if "\n" in text:        # implicit concatenation over lines needs its brackets
            text = f"({text})"
        c0, c1 = span(call)
        out = out[:c0] + text + out[c1:]
    return out


def resolve_strings(nb, lang: str):
    """Resolve the ``t()`` literals of every code cell for ``lang``."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = resolve_code(cell.source, lang)
    return nb


def strip_rule_marks(nb):
    """Remove the rule ledger's marks (``<!-- rule: id -->``, coursekit.author.ledger)
    from the markdown: they are for the course's tests, never for students."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = ledger.strip(cell.source)
    return nb


def resolve_claims(nb, chapter: str):
    """Fill in each measured number of the prose (``{{claim: id}}``) from its record
    (the claims ledger, coursekit.author.claims)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            try:
                cell.source = claims.resolve(cell.source, chapter)
            except claims.ClaimError as e:
                raise BuildError(str(e)) from e
    return nb


EXERCISE_META = re.compile(r"\{\{\s*exercise:\s*level\s*=\s*([123])\s*,\s*minutes\s*=\s*(\d+)\s*\}\}")


def exercise_meta_line(level: int, minutes: int, lang: str) -> str:
    """What a student reads under an exercise's heading: how hard, how long."""
    stars = "★" * level + "☆" * (3 - level)
    if lang == "zh":
        return f"**难度** {stars}　**建议用时** 约 {minutes} 分钟"
    return f"**Difficulty** {stars} · **Time** about {minutes} minutes"


def render_exercise_meta(nb, lang: str):
    """``{{exercise: level=2, minutes=10}}`` under an exercise's heading becomes the
    line with its difficulty (1-3 stars) and the minutes it should take."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = EXERCISE_META.sub(lambda m: exercise_meta_line(int(m[1]), int(m[2]), lang), cell.source)
    return nb


def complete_nbgrader_metadata(nb):
    """Fill the fields nbgrader needs so chapter texts only state what matters."""
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader")
        if meta is None:
            continue
        full = {
            "grade": bool(meta.get("grade", False)),
            "grade_id": meta["grade_id"],
            "locked": bool(meta.get("locked", not meta.get("solution", False))),
            "schema_version": 3,
            "solution": bool(meta.get("solution", False)),
            "task": bool(meta.get("task", False)),
        }
        if full["grade"]:
            full["points"] = meta["points"]
        cell.metadata["nbgrader"] = full
    return nb


def to_notebook(nb, chapter: str, lang: str):
    out = nbformat.v4.new_notebook()
    out.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "course": {"chapter": chapter, "lang": lang},
    }
    for i, cell in enumerate(nb.cells):
        gid = _grade_id(cell)
        if cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.source)
        else:
            new = nbformat.v4.new_code_cell(cell.source)
        new.metadata = {k: v for k, v in cell.metadata.items() if k not in ("lang",)}
        new.id = gid if gid else f"{chapter[:4]}-{i:03d}"
        out.cells.append(new)
    nbformat.validate(out)
    return out


def build_chapter(chapter: str, lang: str = DEFAULT_LANG, root: Path = NOTEBOOKS, keep_marks: bool = False):
    """The source notebook of ``chapter`` in ``lang``; ``keep_marks`` keeps the
    ``replay`` marks (coursekit.author.replay), which the course's build strips."""
    path = Path(root) / f"{chapter}.md"
    if not path.exists():
        raise BuildError(f"no chapter text {path}")
    nb, refs = read_chapter(path)
    validate(nb, refs, name=path.name)
    replay.check(nb, refs, name=path.name)
    nb = select_language(nb, lang)
    if not keep_marks:
        nb = replay.strip(nb)
    nb = strip_rule_marks(nb)
    nb = resolve_claims(nb, chapter)
    nb = render_exercise_meta(nb, lang)
    nb = resolve_strings(nb, lang)
    nb = complete_nbgrader_metadata(nb)
    return to_notebook(nb, chapter, lang)


def dumps(nb) -> str:
    return json.dumps(nb, ensure_ascii=False, indent=1, sort_keys=True) + "\n"


def given_files(chapter: str, notebooks: Path = NOTEBOOKS) -> list[Path]:
    """The files ``chapter`` hands out beside its notebook (``notebooks/given/chapters.json``):
    code that a later chapter needs from an earlier one's answers, released only
    with the later chapter."""
    folder = Path(notebooks) / GIVEN
    names = given_manifest(notebooks).get(chapter, [])
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise BuildError(f"{folder / 'chapters.json'}: {chapter} hands out {', '.join(missing)}, "
                         f"which {folder} does not hold")
    return [folder / n for n in names]


def write_given(chapter: str, dest: Path, notebooks: Path = NOTEBOOKS) -> None:
    """Put the chapter's given files in ``dest`` (its source folder), and nothing else beside the notebook."""
    wanted = {p.name: p for p in given_files(chapter, notebooks)}
    for old in dest.iterdir():
        if old.is_file() and old.suffix != ".ipynb" and old.name not in wanted:
            old.unlink()
    for name, path in wanted.items():
        (dest / name).write_bytes(path.read_bytes())


def write_source(chapter: str, lang: str, course_root: Path = ROOT, notebooks: Path = NOTEBOOKS) -> Path:
    nb = build_chapter(chapter, lang, notebooks)
    dest = Path(course_root) / "source" / chapter / f"{chapter}.ipynb"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(dumps(nb), encoding="utf-8")
    write_given(chapter, dest.parent, notebooks)
    return dest
