"""Every rule an exercise states is enforced by what the code does, and has a
wrong answer that breaks it.

Each chapter's catalogue (tests/catalogue/chNN_name.py) lists its exercises'
stated rules in ``RULES``: (the rule as the exercise states it, the check that
enforces it, the name of the BUGS variant that breaks it). test_autograde.py
proves that variant loses points with its feedback; this file proves the table
points at real variants, one for each rule, and that a from-scratch exercise
keeps full marks for a correct answer whose comments name the forbidden calls.
"""
from __future__ import annotations

import importlib

import pytest
from harness import catalogued_chapters

CHAPTERS = [c for c in catalogued_chapters() if c != "ch12_quiz"]


def catalogue(chapter):
    return importlib.import_module(f"catalogue.{chapter}")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_stated_rule_has_a_check_and_a_case_that_breaks_it(chapter):
    cat = catalogue(chapter)
    rules = getattr(cat, "RULES", None)
    assert rules, f"{chapter}: the catalogue has no RULES table"
    bugs = {v.name: v for v in cat.BUGS}
    for rule, check, case in rules:
        assert rule.strip() and check.strip(), (rule, check, case)
        assert case in bugs, f"{chapter}: the rule {rule!r} names {case!r}, which is not a BUGS variant"
        assert bugs[case].lose, f"{chapter}: {case} breaks {rule!r} but loses no cell"
    assert len({case for _, _, case in rules}) == len(rules), f"{chapter}: one variant stands for two rules"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_comments_naming_a_forbidden_call_cost_nothing(chapter):
    """A from-scratch exercise is judged by the calls, never by words: the
    catalogue has a correct variant whose comments and strings name the
    forbidden functions (listed in ``WORDS_ARE_NOT_CALLS``)."""
    from harness import ROOT
    cat = catalogue(chapter)
    names = getattr(cat, "WORDS_ARE_NOT_CALLS", ())
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text(encoding="utf-8")
    if "from_scratch(" in text or "从零实现" in text:
        assert names, f"{chapter} has from-scratch exercises but no WORDS_ARE_NOT_CALLS variant"
    correct = {v.name: v for v in cat.CORRECT}
    for name in names:
        assert name in correct, f"{chapter}: {name} is not a CORRECT variant"
        code = "\n".join(correct[name].replace.values())
        assert any(word in code for word in ("softmax", "layer_norm", "LayerNorm", "RMSNorm", "rms_norm",
                                             "scaled_dot_product_attention", "MultiheadAttention", "cross_entropy")), \
            f"{chapter}: {name} names no forbidden function"
