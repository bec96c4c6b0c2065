"""The known-bug catalogue checked in-process, in both languages: each wrong
answer makes the hidden check fail with its diagnosis, each correct variant
passes. (test_autograde.py proves the same through the real nbgrader; this
file is the fast loop an author edits against.)"""
from __future__ import annotations

import importlib
import linecache
import math
import re

import nbformat
import pytest
import torch

from harness import catalogued_chapters, ROOT, Variant
from helpers import set_language

CJK = re.compile(r"[\u4e00-\u9fff]")
CHAPTERS = catalogued_chapters()


def solution_namespace(chapter: str, replace: dict[str, str]) -> dict:
    """Run the chapter's answer cells (model solution, with ``replace``
    swapped in) and return the names they define."""
    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    ns: dict = {"torch": torch, "math": math, "__name__": "__course__"}
    exec("import torch.nn as nn\nimport torch.nn.functional as F\n", ns)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            src = replace.get(meta["grade_id"], cell.source)
            name = f"/tmp/ipykernel_course/{meta['grade_id']}.py"   # like IPython: a file name with source
            linecache.cache[name] = (len(src), None, src.splitlines(True), name)
            exec(compile(src, name, "exec", dont_inherit=True), ns)
    return ns


def run_check(chapter: str, test_id: str, ns: dict):
    """Run the hidden part of one test cell against the names in ``ns``."""
    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == test_id)
    hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S).group(1)
    exec(hidden, ns)


def params(attr):
    return [pytest.param(ch, v, lang, id=f"{ch}-{v.name}-{lang}")
            for ch in CHAPTERS for v in getattr(importlib.import_module(f"catalogue.{ch}"), attr)
            for lang in ("zh", "en")]


@pytest.mark.parametrize("chapter,variant,lang", params("BUGS"))
def test_bug_fails_hidden_check_with_diagnosis(chapter, variant: Variant, lang):
    set_language(lang)
    ns = solution_namespace(chapter, variant.replace)
    for gid in variant.lose:
        with pytest.raises(AssertionError) as err:
            run_check(chapter, gid, ns)
        msg = str(err.value)
        if lang == "zh":
            for word in variant.words:
                assert word in msg, f"{variant.name}: {word!r} missing from:\n{msg}"
        else:
            assert not CJK.search(msg), f"English feedback contains Chinese:\n{msg}"


@pytest.mark.parametrize("chapter,variant,lang", params("CORRECT"))
def test_correct_variant_passes_hidden_checks(chapter, variant: Variant, lang, capsys):
    set_language(lang)
    ns = solution_namespace(chapter, variant.replace)
    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and "BEGIN HIDDEN TESTS" in cell.source:
            run_check(chapter, meta["grade_id"], ns)
    assert "✓" in capsys.readouterr().out
