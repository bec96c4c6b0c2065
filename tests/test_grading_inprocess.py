"""The known-bug catalogue checked in-process, in both languages: each wrong
answer makes the hidden check fail with its diagnosis, each correct variant
passes. (test_autograde.py proves the same through the real nbgrader; this
file is the fast loop an author edits against.)"""
from __future__ import annotations

import importlib
import linecache
import math
import os
import re
import textwrap

import nbformat
import pytest
import torch
from harness import ROOT, Variant, asked_chapters, catalogued_chapters

from helpers import set_language

CJK = re.compile(r"[\u4e00-\u9fff]")
# COURSE_CHAPTERS=ch01_attention,ch02_causal_mask limits the run (and the catalogues imported) to those chapters
CHAPTERS = [c for c in catalogued_chapters() if not asked_chapters() or c in asked_chapters()]


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


# Every entry of every catalogue, in one language each, zh and en in turn (the checks' code is
# the same in both; what differs is the words): half the time of both. Both languages for each
# entry where a chapter's own checks are asked for (COURSE_CHAPTERS, as `make check` runs them)
# or the whole catalogue is (COURSE_FULL_CATALOGUE=1).
BOTH_LANGUAGES = bool(asked_chapters()) or os.environ.get("COURSE_FULL_CATALOGUE") == "1"


def languages(index: int) -> tuple[str, ...]:
    return ("zh", "en") if BOTH_LANGUAGES else (("zh", "en")[index % 2],)


def params(attr):
    return [pytest.param(ch, v, lang, id=f"{ch}-{v.name}-{lang}")
            for ch in CHAPTERS for i, v in enumerate(getattr(importlib.import_module(f"catalogue.{ch}"), attr))
            for lang in languages(i)]


# what a chain says (grading.cases.on_its_own), in the catalogue's zh words and in English
CHAIN_WORDS = [
    (re.compile(r"用正确的 (.+?) 代替你的之后，这一题是对的"), r"Correct when given a correct \1"),
    (re.compile(r"练习 (\S+?) 还需要修改"), r"exercise \1 still needs fixing"),
    (re.compile(r"已经用正确的 (.+?) 代替了你的"), r"already used a correct \1 in place of yours"),
    (re.compile(r"出在这一题本身"), "this exercise's own"),
    (re.compile(r"练习 (\S+?) 也还需要修改"), r"exercise \1 needs fixing too"),
    (re.compile(r"还没有实现"), "not implemented yet"),
]


def english(word: str) -> str | None:
    """The English counterpart of a chain's zh words, or None for words of a diagnosis."""
    for zh, en in CHAIN_WORDS:
        m = zh.fullmatch(word)
        if m:
            return m.expand(en).replace("、", ", ")
    return None


def test_chain_words_have_english_counterparts():
    from grading.cases import Earlier, also_wrong_line, given_correct_line
    swapped = (Earlier("causal_mask", 1, bool, bool), Earlier("apply_mask", 2, bool, bool))
    set_language("zh")
    zh = given_correct_line(swapped) + also_wrong_line(swapped)
    set_language("en")
    en = given_correct_line(swapped) + also_wrong_line(swapped)
    words = ["用正确的 causal_mask、apply_mask 代替你的之后，这一题是对的", "练习 1、2 还需要修改",
             "已经用正确的 causal_mask、apply_mask 代替了你的", "出在这一题本身", "练习 1、2 也还需要修改"]
    for word in words:
        assert word in zh, (word, zh)
        assert english(word) in en, (english(word), en)
    assert english("没有先减去每行的最大值") is None


def _said_in(lang, variant, gid, words, text):
    for word in words:
        shown = word if lang == "zh" else english(word)
        if shown is not None:
            assert shown in text, f"{variant.name} ({lang}): {shown!r} missing from:\n{text}"


@pytest.mark.parametrize("chapter,variant,lang", params("BUGS"))
def test_bug_fails_hidden_check_with_diagnosis(chapter, variant: Variant, lang, capsys):
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
        _said_in(lang, variant, gid, variant.said.get(gid, ()), msg)
    for gid, words in variant.said.items():     # a later exercise that keeps its marks, and says why
        if gid in variant.lose:
            continue
        capsys.readouterr()
        run_check(chapter, gid, ns)
        out = capsys.readouterr().out
        assert "✓" in out, out
        if lang == "en":
            assert not CJK.search(out), f"English feedback contains Chinese:\n{out}"
        _said_in(lang, variant, gid, words, out)


def chains(chapter: str) -> list[tuple[Variant, str, Variant]]:
    """Each later test cell that a wrong earlier answer leaves with its marks
    (a BUGS variant whose ``said`` names it "correct given a correct ..."), with
    the first wrong answer of that later exercise alone (a variant losing only
    that cell and editing other answer cells)."""
    bugs = importlib.import_module(f"catalogue.{chapter}").BUGS
    out, seen = [], set()
    for v in bugs:
        for gid, words in v.said.items():
            if gid in v.lose or gid in seen or not any("代替你的之后" in w for w in words):
                continue
            later = next((w for w in bugs if w.lose == (gid,) and not set(w.replace) & set(v.replace)
                          and len(w.replace) == 1), None)
            if later is not None:
                seen.add(gid)
                out.append((v, gid, later))
    return out


@pytest.mark.parametrize("chapter,lang", [(c, lang) for c in CHAPTERS for lang in ("zh", "en")])
def test_a_wrong_or_unfinished_later_exercise_is_its_own(chapter, lang):
    """With a correct earlier piece standing in, a wrong later answer still fails
    and says the failure is its own; an unfinished one says only that."""
    set_language(lang)
    kept = {gid for v in importlib.import_module(f"catalogue.{chapter}").BUGS for gid, words in v.said.items()
            if gid not in v.lose and any("代替你的之后" in w for w in words)}
    found = chains(chapter)
    assert {gid for _, gid, _ in found} == kept, f"{chapter}: a chain without a wrong later answer to prove it"
    for earlier, gid, later in found:
        ns = solution_namespace(chapter, {**earlier.replace, **later.replace})
        with pytest.raises(AssertionError) as err:
            run_check(chapter, gid, ns)
        own = "出在这一题本身" if lang == "zh" else "this exercise's own"
        assert own in str(err.value), f"{earlier.name} + {later.name}:\n{err.value}"
        (cell,) = later.replace
        ns = solution_namespace(chapter, {**earlier.replace, cell: _stub(chapter, cell)})
        with pytest.raises(AssertionError) as err:
            run_check(chapter, gid, ns)
        msg = str(err.value)
        assert ("还没有实现" if lang == "zh" else "not implemented yet") in msg, msg
        assert not re.search(r"练习 \d|exercise \d|Exercise \d", msg), f"{earlier.name} + stub: blames an earlier " \
                                                                      f"exercise:\n{msg}"


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


# ------------------------------------------------------------------ the visible tests

VISIBLE_CHAPTERS = [c for c in ("ch01_attention", "ch02_causal_mask", "ch03_multi_head", "ch04_positions",
                                 "ch06_param_count")
                    if c in CHAPTERS]


def visible_part(chapter: str, test_id: str) -> str:
    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == test_id)
    return cell.source.split("### END HIDDEN TESTS", 1)[-1]


def visible_ns(chapter: str, replace: dict[str, str]) -> dict:
    from helpers import checks
    checks._OUTCOME.clear()               # a fresh kernel: no exercise has run yet
    ns = solution_namespace(chapter, replace)
    exec("from helpers.checks import expect_close, expect_shape, expect_true, passed\nfrom helpers import t\n", ns)
    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    for cell in nb.cells:   # the demo cells the visible tests rely on (cheap ones only)
        if cell.cell_type == "code" and any(needle in cell.source for needle in SETUP_CELLS.get(chapter, ())):
            exec(cell.source, ns)
    return ns


SETUP_CELLS = {"ch01_attention": ('probes = Probes("ch01_attention")',),
               "ch03_multi_head": ('probes = Probes("ch03_multi_head")',),
               "ch02_causal_mask": ("from helpers.ch02_causal_mask import calculator",),
               "ch04_positions": ("def attend(x", 'probes = Probes("ch04_positions")'),
               "ch06_param_count": ('probes = Probes("ch06_param_count")',)}


def visible_params(attr, pick=lambda v: True):
    return [pytest.param(ch, v, id=f"{ch}-{v.name}") for ch in VISIBLE_CHAPTERS
            for v in getattr(importlib.import_module(f"catalogue.{ch}"), attr) if pick(v)]


def _test_ids(chapter):
    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") and "END HIDDEN TESTS" in c.source]


@pytest.mark.parametrize("chapter,variant", visible_params("CORRECT"))
def test_correct_variant_passes_visible_tests(chapter, variant, capsys):
    set_language("en")
    ns = visible_ns(chapter, variant.replace)
    for gid in _test_ids(chapter):
        exec(visible_part(chapter, gid), ns)
    assert "not done yet" not in capsys.readouterr().out


@pytest.mark.parametrize("chapter,variant", visible_params("BUGS", lambda v: "从零实现" in v.words))
def test_from_scratch_rule_fails_the_visible_test_with_the_graders_words(chapter, variant):
    set_language("zh")
    ns = visible_ns(chapter, variant.replace)
    for gid in variant.lose:
        with pytest.raises(AssertionError) as visible:
            exec(visible_part(chapter, gid), ns)
        with pytest.raises(AssertionError) as hidden:
            run_check(chapter, gid, solution_namespace(chapter, variant.replace))
        rule = str(visible.value).split(": ", 1)[-1]
        assert "从零实现" in rule and rule in str(hidden.value), f"visible:\n{visible.value}\nhidden:\n{hidden.value}"


@pytest.mark.parametrize("chapter", VISIBLE_CHAPTERS)
def test_unfinished_exercises_print_not_done_outside_nbgrader_and_fail_under_it(chapter, capsys, monkeypatch):
    set_language("en")
    # the release's answer cells; one that raises at top level (a stub outside a function) stops only itself
    stub = {gid: f"try:\n{textwrap.indent(_stub(chapter, gid), '    ')}\nexcept NotImplementedError:\n    pass\n"
            for gid in _answer_ids(chapter)}
    ns = visible_ns(chapter, stub)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    ran = 0
    for gid in _test_ids(chapter):
        src = visible_part(chapter, gid)
        if "exercise(" not in src:
            continue
        exec(src, ns)
        ran += 1
    out = capsys.readouterr().out
    assert ran and out.count("not done yet: exercise") == ran, out
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    gid = next(g for g in _test_ids(chapter) if "exercise(" in visible_part(chapter, g))
    with pytest.raises(NotImplementedError):
        exec(visible_part(chapter, gid), ns)


def _answer_ids(chapter):
    nb = nbformat.read(ROOT / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]


def _stub(chapter, gid):
    """The answer cell as the release ships it (raise NotImplementedError())."""
    nb = nbformat.read(ROOT / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    return next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)


# a visible hint names a bug only when the output matches that bug's fingerprint:
# (chapter, bug variant, test cell, words its visible message must show, words it must not show)
VISIBLE_HINTS = [
    ("ch01_attention", "sm_no_max", "test_softmax", "溢出", None),
    ("ch01_attention", "att_no_scaling", "test_attention", "没有缩放", "维度"),
    ("ch01_attention", "att_softmax_dim", "test_attention", "沿错了维度", "√d_k"),
    ("ch01_attention", "att_scale_dk", "test_attention", "除的是 d_k", "没有缩放"),
    ("ch01_attention", "att_mask_inverted", "test_attention", "反了", "softmax 之后"),
    ("ch01_attention", "att_mask_zero", "test_attention", "设成了 0", "反了"),
    ("ch02_causal_mask", "diagonal_masked", "test_causal_mask", "对角线", "上三角"),
    ("ch02_causal_mask", "anti_causal", "test_causal_mask", "上三角", "对角线"),
    ("ch02_causal_mask", "zero_fill", "test_apply_mask", "设成了 0", "原地"),
    ("ch02_causal_mask", "masked_fill_result_dropped", "test_apply_mask", "不是原地", "设成了 0"),
    ("ch02_causal_mask", "mask_ignored", "test_attention", "没有用因果掩码", None),
    ("ch03_multi_head", "split_view_no_transpose", "test_split_heads", "直接 view", "交错"),
    ("ch03_multi_head", "split_interleaved", "test_split_heads", "交错", "直接 view"),
    ("ch03_multi_head", "merge_no_transpose", "test_merge_heads", "直接 reshape", "交错"),
    ("ch04_positions", "sin_positions_from_1", "test_sinusoidal", "从 1 开始", "放反了"),
    ("ch04_positions", "sin_concatenated", "test_sinusoidal", "全部 sin", "从 1 开始"),
    ("ch04_positions", "sin_i_over_d", "test_sinusoidal", "i/d", "放反了"),
    ("ch04_positions", "freq_wrong_sign", "test_rope_frequencies", "符号反了", "i/d 而不是 2i/d"),
    ("ch04_positions", "rope_negative_angle", "test_apply_rope", "方向反了", "rotate-half"),
    ("ch04_positions", "rope_rotate_half", "test_apply_rope", "rotate-half", "方向反了"),
]


@pytest.mark.parametrize("chapter,name,gid,shown,not_shown",
                         [pytest.param(*row, id=f"{row[0]}-{row[1]}") for row in VISIBLE_HINTS if row[0] in CHAPTERS])
def test_visible_hint_names_only_the_bug_whose_fingerprint_matches(chapter, name, gid, shown, not_shown):
    set_language("zh")
    variant = next(v for v in importlib.import_module(f"catalogue.{chapter}").BUGS if v.name == name)
    with pytest.raises(AssertionError) as err:
        exec(visible_part(chapter, gid), visible_ns(chapter, variant.replace))
    msg = str(err.value)
    assert shown in msg and (not_shown is None or not_shown not in msg), msg
