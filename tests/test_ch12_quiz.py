"""helpers.ch12_quiz (the public form checks of chapter 9) and the quiz's scoring:
accepted and rejected answer forms, the same verdicts in the visible and the
hidden checks, feedback that never gives the key away, and points that add up
exactly to the questions answered right."""
from __future__ import annotations

import re

import nbformat
import pytest
from harness import ROOT

from helpers import set_language
from helpers.ch12_quiz import (
    AnswerFormError,
    expect_choice,
    expect_choices,
    expect_number,
    parse_choice,
    parse_choices,
    parse_number,
)

CHAPTER = "ch12_quiz"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(autouse=True)
def _reset_language():
    yield
    set_language("zh")


# ---------------------------------------------------------------- forms

@pytest.mark.parametrize("answer,expected", [("B", "B"), ("b", "B"), (" c\n", "C"), ("D", "D")])
def test_parse_choice_accepts_one_letter(answer, expected):
    assert parse_choice(answer, "ABCD") == expected


@pytest.mark.parametrize("answer,words", [
    (None, "还没有作答"), ("", "还没有作答"), ("E", "A–D"), ("AB", "只选一个"), (2, "数字 2"), (True, "数字"),
    (["A"], "写 'A' 而不是 ['A']"), (["A", "A"], "不要用列表"), ({"B"}, "不要用列表"), (b"A", "字符串"),
])
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_parse_choice_rejects_other_forms_clearly(answer, words, lang):
    set_language(lang)
    with pytest.raises(AnswerFormError) as err:
        parse_choice(answer, "ABCD", "q99_demo")
    msg = str(err.value)
    assert "q99_demo" in msg
    if lang == "zh":
        assert words in msg
    else:
        assert not CJK.search(msg)


@pytest.mark.parametrize("answer", ["AC", "ca", "A, C", "a c", ["A", "C"], ("c", "a"), {"A", "C"}, frozenset("AC")])
def test_parse_choices_accepts_strings_lists_and_sets(answer):
    assert parse_choices(answer, "ABCDE") == frozenset("AC")


@pytest.mark.parametrize("answer,words", [
    (None, "还没有作答"), ("", "还没有作答"), ([], "还没有作答"), (["A", "A"], "重复"), ("AA", "重复"),
    ("AF", "不认识"), (["AB"], "一个字母"), ([1, 2], "一个字母"), (3, "数字 3"), (3.5, "数字"),
])
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_parse_choices_rejects_other_forms_clearly(answer, words, lang):
    set_language(lang)
    with pytest.raises(AnswerFormError) as err:
        parse_choices(answer, "ABCDE", "q99_demo")
    if lang == "zh":
        assert words in str(err.value)
    else:
        assert not CJK.search(str(err.value))


def test_parse_number_accepts_reals_fractions_and_scalars():
    import fractions

    import numpy as np
    import torch
    assert parse_number(4) == 4.0
    assert parse_number(1.24e8) == 124_000_000.0
    assert parse_number(fractions.Fraction(2, 3)) == pytest.approx(2 / 3)
    assert parse_number(np.float32(0.5)) == 0.5
    assert parse_number(torch.tensor(4.0)) == 4.0


@pytest.mark.parametrize("answer,words", [
    ("4", "写 4 而不是 '4'"), ("four", "写一个数"), (None, "还没有作答"), (True, "bool"),
    (float("nan"), "有限"), (float("inf"), "有限"), ([4], "list"),
])
def test_parse_number_rejects_other_forms_clearly(answer, words):
    with pytest.raises(AnswerFormError) as err:
        parse_number(answer, "q99_demo")
    assert words in str(err.value)


def test_visible_checks_print_a_tick_and_never_a_verdict(capsys):
    expect_choice("b", "q99_demo")
    expect_choices(["a", "c"], "q99_demo")
    expect_number(2 / 3, "q99_demo")
    out = capsys.readouterr().out
    assert out.count("✓") == 3 and "评分时判定" in out


# ---------------------------------------------------------------- the key, through the notebook

def _notebook():
    return nbformat.read(ROOT / "source" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)


def _cells(nb):
    answers, tests = {}, {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            answers[meta["grade_id"]] = cell.source
        elif meta.get("grade"):
            hidden = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S).group(1)
            tests[meta["grade_id"]] = (hidden, meta["points"])
    return answers, tests


def _score(replace: dict[str, str]) -> tuple[float, set[str]]:
    """Points earned (hidden checks only) and the test cells that failed."""
    answers, tests = _cells(_notebook())
    ns: dict = {}
    for gid, src in answers.items():
        exec(replace.get(gid, src), ns)
    earned, failed = 0.0, set()
    for gid, (hidden, points) in tests.items():
        try:
            exec(hidden, dict(ns))
            earned += points
        except AssertionError:
            failed.add(gid)
    return earned, failed


def test_every_auto_graded_question_has_a_key_and_a_test_cell():
    from grading.ch12_quiz import QUESTIONS
    answers, tests = _cells(_notebook())
    assert set(answers) == set(QUESTIONS)
    assert set(tests) == {f"test_{name}" for name in QUESTIONS}
    assert len(QUESTIONS) >= 16
    for name, q in QUESTIONS.items():
        assert name.startswith(f"q{q.number:02d}_")


def test_all_right_scores_everything_all_wrong_nothing_and_a_mix_exactly_its_right_ones():
    from catalogue.ch12_quiz import ALL_WRONG, ans
    _, tests = _cells(_notebook())
    total = sum(points for _, points in tests.values())
    assert _score({}) == (total, set())
    earned, failed = _score(ans(**ALL_WRONG))
    assert earned == 0 and failed == set(tests)
    wrong = ["q01_sqrt_dk", "q06_bert_gpt", "q16_12Ld2", "q24_gqa"]
    earned, failed = _score(ans(**{name: ALL_WRONG[name] for name in wrong}))
    assert failed == {f"test_{name}" for name in wrong}
    assert earned == total - sum(tests[f"test_{name}"][1] for name in wrong)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_feedback_names_the_question_and_chapter_but_never_the_key(lang):
    from grading.ch12_quiz import QUESTIONS, check
    set_language(lang)
    for name, q in QUESTIONS.items():
        key = q.key()
        if q.kind == "choice":
            wrong = [c for c in q.options if c != key]
        elif q.kind == "choices":
            wrong = [frozenset(q.options) - key, key - {min(key)}, key | (frozenset(q.options) - key)]
        else:
            wrong = [key * 1.5 + 1, key / 2, -key, 0.0 if key else 1.0]
        for answer in wrong:
            with pytest.raises(AssertionError) as err:
                check(name, {name: answer})
            msg = str(err.value)
            assert name in msg and q.chapter in msg, msg
            if q.kind == "choice":
                assert not re.search(rf"(?<![A-Za-z]){key}(?![A-Za-z])", msg), f"{name} reveals {key}:\n{msg}"
            elif q.kind == "number":
                rest = msg.replace(q.review(), "").replace(f"{answer:.6g}", "")   # the pointer; their own number
                assert f"{key:.6g}" not in rest and str(key) not in rest, f"{name} reveals {key}:\n{msg}"
            if lang == "en":
                assert not CJK.search(msg), msg


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_an_unanswered_question_fails_with_a_message_not_a_name_error(lang):
    from grading.ch12_quiz import check
    set_language(lang)
    with pytest.raises(AssertionError) as err:
        check("q01_sqrt_dk", {})
    assert type(err.value).__name__ == "GradingFailure" and "q01_sqrt_dk" in str(err.value)
    assert ("还没有作答" in str(err.value)) if lang == "zh" else not CJK.search(str(err.value))


def test_numeric_keys_are_the_chapters_formulas():
    from grading.ch12_quiz import GPT2_MEDIUM, gpt2_params, kv_cache_bytes
    assert gpt2_params(12, 768, 50257, 1024) == 124_439_808          # ch06: GPT-2 small
    assert gpt2_params(**GPT2_MEDIUM) == 354_823_168                   # the published GPT-2 medium count
    assert kv_cache_bytes(32, 4096, 4096, 2) == 2 * 1024 ** 3



def test_later_chapters_keys_agree_with_those_chapters_references():
    import torch

    from grading.ch09_inside_gpt import ref_prev_token_score
    from grading.ch10_llama_block import ref_repeat_kv
    from grading.ch12_quiz import QUESTIONS, gqa_cache_bytes, repeat_kv_source, swiglu_params, uniform_prev_token_score
    from helpers.ch10_llama_block import model_kv_gib

    # q25: chapter 9's own score of a uniform causal head (shape n_layer, B, n_head, n, n)
    allowed = torch.ones(8, 8, dtype=torch.float64).tril()
    uniform = (allowed / allowed.sum(-1, keepdim=True)).expand(1, 1, 1, 8, 8)
    assert abs(float(ref_prev_token_score(uniform)[0, 0]) - uniform_prev_token_score(8)) < 1e-12
    assert abs(QUESTIONS["q28_uniform_prev"].key() - 0.2454) < 1e-4
    # q28: LLaMA-2 7B's FFN, three bias-free matrices
    assert swiglu_params(4096, 11008) == 3 * 4096 * 11008 == QUESTIONS["q31_swiglu_params"].key()
    # q29: chapter 10's GQA cache for LLaMA-2 70B is 1.25 GiB
    assert gqa_cache_bytes(80, 4096, 8, 128, 2) == 1.25 * 2 ** 30
    assert abs(model_kv_gib(8) - 1.25) < 1e-9
    # q30: the head order of chapter 10's repeat_kv
    heads = torch.arange(2.0).view(1, 2, 1, 1)
    assert int(ref_repeat_kv(heads, 4)[0, 6, 0, 0]) == repeat_kv_source(6, n_head=8, n_kv_head=2) == 1


def test_chapter_7_keys_agree_with_that_chapters_reference_and_with_torch():
    import math

    import torch

    from grading.ch07_gpt import ref_cross_entropy
    from grading.ch12_quiz import CLIP_GRAD, CLIP_MAX, QUESTIONS, initial_loss

    # q18: chapter 7's own cross-entropy of all-zero logits (a fresh model) is ln V
    zeros, targets = torch.zeros(4, 65, dtype=torch.float64), torch.tensor([0, 7, 33, 64])
    assert abs(float(ref_cross_entropy(zeros, targets)) - initial_loss(65)) < 1e-12
    assert abs(QUESTIONS["q18_initial_loss"].key() - math.log(65)) < 1e-12
    # q19: clip_grad_norm_ scales the whole vector by max_norm / ‖g‖ (not each component to ±max_norm)
    g = torch.tensor(CLIP_GRAD, dtype=torch.float64)
    assert g.norm() > CLIP_MAX
    assert abs(QUESTIONS["q19_clipped_component"].key() - float(g[0] * CLIP_MAX / g.norm())) < 1e-6
    assert QUESTIONS["q20_evaluation"].key() == frozenset("ABE")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_chapter_7_misconceptions_are_named(lang):
    from grading.ch12_quiz import check
    set_language(lang)
    for name, answer, words in (("q19_clipped_component", 1.0, ("clip_grad_value_", "clip_grad_norm_")),
                                ("q19_clipped_component", 0.2, ("max_norm / ‖g‖",)),
                                ("q18_initial_loss", 6.022, ("ln",)),
                                ("q20_evaluation", "ABCE", ("q20_evaluation",))):
        with pytest.raises(AssertionError) as err:
            check(name, {name: answer})
        assert all(w in str(err.value) for w in words), (name, str(err.value))
        assert "ch07_gpt" in str(err.value)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_each_numeric_questions_stated_tolerance_is_the_one_graded(lang):
    """The tolerance a question states ("±2%", "within 1 %", "must be exact") is the one its key uses:
    a check looser or tighter than the text would grade a different question."""
    from coursekit.author import ledger
    from grading.ch12_quiz import QUESTIONS
    text: dict[int, str] = {}
    for s in ledger.exercise_sentences(CHAPTER):
        m = re.search(r"(?:第 |Question )(\d+)", s.exercise)
        if s.lang == lang and m:
            text[int(m.group(1))] = text.get(int(m.group(1)), "") + " " + s.text
    for name, q in QUESTIONS.items():
        if q.kind != "number" or q.number == 20:
            continue
        said = text[q.number]
        pct = re.findall(r"±(\d+)%|(\d+)% 以内|within (\d+) ?%", said)
        exact = ("必须完全正确" in said) if lang == "zh" else ("must be exact" in said)
        if q.rtol == 0:
            assert exact and not pct, f"{name}: graded exactly, the text says {said!r}"
        else:
            stated = {int(next(g for g in groups if g)) for groups in pct}
            assert stated == {round(q.rtol * 100)} and not exact, f"{name}: rtol {q.rtol}, the text says {said!r}"
