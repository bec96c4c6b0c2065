"""The rule ledger: every rule an exercise states is marked where it is written
and has a wrong answer that breaks it.

A rule is marked in ``notebooks/chNN_name.md`` (``<!-- rule: id -->`` after the
sentence, in both languages; coursekit.author.ledger); the chapter's catalogue
names, for each id, the wrong answers that break it (``Variant(..., breaks=(id,))``)
or, for a sentence that is advice rather than a rule, a waiver with its reason
(``WAIVED``). Each breaking wrong answer is a BUGS variant: the in-process test
(test_grading_inprocess.py) proves, in both languages, that it fails its hidden
check with the words that name the rule; test_autograde.py grades a sample of
them through nbgrader. This file proves the two halves of the ledger match, and
that the ledger catches what it must: an unmarked rule-like sentence, a rule
whose breaking case is gone, a mark in one language only.
"""
from __future__ import annotations

import importlib
import re

import pytest
from harness import ROOT, Variant, catalogued_chapters

from coursekit.author import ledger

CHAPTERS = catalogued_chapters()


def catalogue(chapter):
    return importlib.import_module(f"catalogue.{chapter}")


def breaking(cat) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in cat.BUGS:
        for rule in v.breaks:
            out.setdefault(rule, []).append(v.name)
    return out


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_marked_rule_has_a_wrong_answer_that_breaks_it(chapter):
    cat = catalogue(chapter)
    found = ledger.problems(chapter, breaking(cat), getattr(cat, "WAIVED", {}))
    assert not found, f"{len(found)} problems with the rule ledger:\n" + "\n".join(found)
    assert ledger.marked(chapter), f"{chapter} marks no rule"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_a_breaking_case_loses_points_and_says_so(chapter):
    """A wrong answer that breaks a rule costs at least one cell, and the
    feedback words it must show are given (the in-process test checks them)."""
    cat = catalogue(chapter)
    correct = {v.name for v in cat.CORRECT}
    for v in cat.BUGS:
        if v.breaks:
            assert v.lose, f"{chapter}: {v.name} breaks {v.breaks} but loses no cell"
            assert v.words or any(v.said.get(g) for g in v.lose), f"{chapter}: {v.name} names no words"
    assert not any(v.breaks for v in cat.CORRECT), f"{chapter}: a correct variant cannot break a rule"
    assert not correct & {v.name for v in cat.BUGS}


def test_the_ledger_fails_when_a_rule_loses_its_breaking_case():
    """Take one rule's breaking cases out of ch01's catalogue: the ledger reports that rule."""
    cat = catalogue("ch01_attention")
    full = breaking(cat)
    rule = sorted(full)[0]
    cut = {r: names for r, names in full.items() if r != rule}
    found = ledger.problems("ch01_attention", cut, getattr(cat, "WAIVED", {}))
    assert any(f"rule {rule!r} has no wrong answer" in line for line in found), found


def test_the_ledger_fails_on_an_unmarked_rule_and_a_mark_in_one_language(tmp_path):
    text = (ROOT / "notebooks" / "ch01_attention.md").read_text(encoding="utf-8")
    cat = catalogue("ch01_attention")
    rule = sorted(breaking(cat))[0]
    # the English mark of one rule removed: marked in one language only
    en_mark = re.compile(rf"[ \t]*<!--\s*rule:\s*{re.escape(rule)}\s*-->")
    spans = [m.span() for m in en_mark.finditer(text)]
    assert len(spans) >= 2, spans
    a, b = spans[-1]
    (tmp_path / "ch01_attention.md").write_text(text[:a] + text[b:], encoding="utf-8")
    found = ledger.problems("ch01_attention", breaking(cat), getattr(cat, "WAIVED", {}), notebooks=tmp_path)
    assert any(f"rule {rule!r} is marked in one language only" in line for line in found), found
    # a new rule sentence without a mark
    extra = text.replace("## Exercise 1", "## Exercise 1", 1)
    head = extra.index("## Exercise 1")
    nl = extra.index("\n\n", head)
    extra = extra[:nl] + "\n\nThe result must be a float64 tensor." + extra[nl:]
    (tmp_path / "ch01_attention.md").write_text(extra, encoding="utf-8")
    found = ledger.problems("ch01_attention", breaking(cat), getattr(cat, "WAIVED", {}), notebooks=tmp_path)
    assert any("unmarked rule-like sentence" in line and "must be a float64" in line for line in found), found


def test_marks_never_reach_a_built_notebook():
    from coursekit.author.build import build_chapter
    for lang in ("zh", "en"):
        nb = build_chapter("ch01_attention", lang)
        assert not any("<!--" in c.source and "rule:" in c.source for c in nb.cells)


def test_the_instructor_guides_count_each_chapters_rules_as_the_ledger_does(tmp_path):
    """The instructor guide (both languages) gives the number of rules each chapter
    checks: those it marks, less those it waives as advice. The table is written by
    ``python -m coursekit.author.guide_tables``, never typed: a stale one fails here,
    and so does a guide whose count was changed by hand."""
    from coursekit.author import guide_tables

    counts = guide_tables.rule_counts(CHAPTERS)
    for chapter in CHAPTERS:
        n = len(set(ledger.marked(chapter)) - set(getattr(catalogue(chapter), "WAIVED", {})))
        assert counts[chapter][0] == n, chapter
    cache = {"rules": counts}
    assert guide_tables.stale(cache=cache) == [], "the guides' rule tables are stale: " \
        "run python -m coursekit.author.guide_tables"
    for lang, path in guide_tables.GUIDES.items():
        text = path.read_text(encoding="utf-8")
        for chapter in CHAPTERS:
            row = next((line for line in text.splitlines() if line.startswith(f"| `{chapter}` |")), None)
            assert row is not None, f"{path.name}: no row for {chapter}"
            assert row.split("|")[2].strip() == str(counts[chapter][0]), f"{path.name}: {row}"
        # one count typed over: the guide is stale
        chapter = CHAPTERS[0]
        typed = text.replace(f"| `{chapter}` | {counts[chapter][0]} |", f"| `{chapter}` | {counts[chapter][0] + 1} |")
        assert typed != text
        (tmp_path / path.name).write_text(typed, encoding="utf-8")
        assert guide_tables.stale({lang: tmp_path / path.name}, cache=cache) != []


@pytest.mark.parametrize("chapter", [c for c in CHAPTERS if c != "ch12_quiz"])
def test_comments_naming_a_forbidden_call_cost_nothing(chapter):
    """A from-scratch exercise is judged by the calls, never by words: the
    catalogue has a correct variant whose comments and strings name the
    forbidden functions (listed in ``WORDS_ARE_NOT_CALLS``)."""
    cat = catalogue(chapter)
    names = getattr(cat, "WORDS_ARE_NOT_CALLS", ())
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text(encoding="utf-8")
    if "from_scratch(" in text or "从零实现" in text:
        assert names, f"{chapter} has from-scratch exercises but no WORDS_ARE_NOT_CALLS variant"
    correct: dict[str, Variant] = {v.name: v for v in cat.CORRECT}
    for name in names:
        assert name in correct, f"{chapter}: {name} is not a CORRECT variant"
        code = "\n".join(correct[name].replace.values())
        assert any(word in code for word in ("softmax", "layer_norm", "LayerNorm", "RMSNorm", "rms_norm",
                                             "scaled_dot_product_attention", "MultiheadAttention", "cross_entropy")), \
            f"{chapter}: {name} names no forbidden function"
