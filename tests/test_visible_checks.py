"""The visible tests' machinery (helpers.checks, helpers.evidence, helpers.probes,
coursekit.author.probes): a failure shows its evidence in the notebook's
language, names a known mistake only when the student's output is that
mistake's output (with the grader's key and words), and an error raised in the
student's own code becomes one course message."""
from __future__ import annotations

import linecache

import pytest
import torch

from coursekit.author import probes as author_probes
from grading.core import Bug, Raises
from grading.probes import Probe
from helpers import checks, evidence, set_language
from helpers.probes import Probes

CELLS = "/tmp/ipykernel_course_test"


def _ref(x):
    return x * 2


BUGS = [Bug("doubled_plus_one", "多加了 1。", "one too many.", lambda x: x * 2 + 1),
        Bug("tripled", "乘了 3。", "times three.", lambda x: x * 3),
        Bug("also_tripled", "也乘了 3。", "times three too.", lambda x: x * 3),
        Bug("harmless_on_zero", "只在零上对。", "right on zero only.", lambda x: x * 2)]


def probes_for(*probes, errors=()) -> Probes:
    data = {"chapter": "chtest", "errors": errors, "words": {b.key: {"zh": b.zh, "en": b.en} for b in BUGS},
            "probes": {p.name: author_probes.evaluate(p) for p in probes}}
    return Probes("chtest", data)


def test_a_probe_keeps_only_the_mistakes_it_can_tell_apart():
    entry = author_probes.evaluate(Probe("x", args=(torch.arange(6.0).reshape(2, 3),), reference=_ref, bugs=BUGS))
    # "harmless" equals the expected output here, and the two "tripled" cannot be told apart: both are dropped
    assert [b["key"] for b in entry["bugs"]] == ["doubled_plus_one"]


def test_a_mistake_is_named_only_when_the_output_is_that_mistakes_output():
    set_language("en")
    p = probes_for(Probe("x", args=(torch.arange(6.0).reshape(2, 3),), reference=_ref, bugs=BUGS))["x"]
    x, = p.inputs
    p.check(x * 2, "f(x)")                                     # right: nothing raised
    with pytest.raises(checks.CheckFailed) as named:
        p.check(x * 2 + 1, "f(x)", reread="the formula")
    assert named.value.key == "bug:doubled_plus_one"
    assert "Diagnosis: one too many." in str(named.value) and "Reread" not in str(named.value)
    with pytest.raises(checks.CheckFailed) as unnamed:
        p.check(x * 2 - 5, "f(x)", reread="the formula")
    assert unnamed.value.key is None
    text = str(unnamed.value)
    assert "Diagnosis" not in text and "Reread the statement: the formula" in text
    assert "largest difference 5 at [0, 0]" in text and "expected" in text and "got" in text


def test_a_large_tensor_shows_the_largest_difference_where_it_is_and_values_around_it():
    set_language("zh")
    want = torch.linspace(-1, 1, 2 * 6 * 16).reshape(2, 6, 16)
    got = want.clone()
    got[1, 4, 9] += 0.25
    with pytest.raises(checks.CheckFailed) as err:
        checks.expect_close(got, want, "out")
    text = str(err.value)
    assert "形状为" not in text.splitlines()[0] and "tensor of shape" not in text
    assert "最大的差是 0.25，在 [1, 4, 9]" in text
    assert "[1, 4, 6:13]" in text and "期望" in text and "实际" in text
    row = [line for line in text.splitlines() if "实际" in line][0]
    assert f"{float(got[1, 4, 9]):.4f}" in row
    caret = [line for line in text.splitlines() if set(line.strip()) == {"^"}][0]
    assert row[caret.index("^"):caret.index("^") + 1].strip() != ""       # the caret sits under a number


def test_an_error_in_the_students_code_is_one_course_message_with_line_and_input():
    set_language("en")
    Probes("chtest", {"errors": [{"key": "tripled", "contains": ["cannot be multiplied"], "types": [],
                                  "line": [], "exercise": "attend"}], "words": {"tripled": {"zh": "乘了 3。",
                                                                                       "en": "times three."}}})
    student = "def attend(q, k):\n    s = q @ k\n    return s\n"
    test = "with checks.exercise(3, 'attend'):\n    attend(torch.ones(2, 3), torch.ones(2, 3))\n"
    space = {"torch": torch, "checks": checks}
    for i, src in enumerate((student, test)):
        name = f"{CELLS}/{i}.py"
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    exec(compile(student, f"{CELLS}/0.py", "exec"), space)
    with pytest.raises(checks.CheckFailed) as err:
        exec(compile(test, f"{CELLS}/1.py", "exec"), space)
    text = str(err.value)
    assert text.startswith("exercise 3 (attend): your code raised RuntimeError: mat1 and mat2 shapes cannot be "
                           "multiplied")
    assert "line 2 of attend (s = q @ k)" in text
    assert "input: attend(q = a float32 tensor of shape (2, 3), k = a float32 tensor of shape (2, 3))" in text
    assert "Diagnosis: times three." in text and err.value.key == "bug:tripled"
    assert "Traceback" not in text


def test_an_error_sign_is_read_only_in_its_own_exercises_test():
    Probes("chtest", {"errors": [{"key": "tripled", "contains": ["boom"], "types": [], "line": [],
                                  "exercise": "attend"}], "words": {}})
    from helpers import probes
    assert probes.error_key(RuntimeError("boom"), "", ("attend",)) == "tripled"
    assert probes.error_key(RuntimeError("boom"), "", ("softmax",)) is None
    assert Raises(contains=("boom",), types=("RuntimeError",))(RuntimeError("a boom"), "") is True
    assert Raises(contains=("boom",), types=("ValueError",))(RuntimeError("a boom"), "") is False


def test_a_failure_leaves_its_key_in_the_outputs_metadata_only(monkeypatch):
    shown = []
    monkeypatch.setattr(checks, "_report", lambda number, key: shown.append((number, key)))
    with pytest.raises(checks.CheckFailed) as err:
        with checks.exercise(2, "f"):
            checks.expect_true(False, "nope", key="tripled")
    assert shown == [(2, "bug:tripled")] and "[bug:" not in str(err.value)


def test_a_rule_check_names_the_graders_mistake_in_the_graders_words():
    set_language("zh")
    probes_for(Probe("x", args=(torch.ones(2),), reference=_ref, bugs=BUGS))
    with pytest.raises(checks.CheckFailed) as err:
        checks.expect_dtype(torch.ones(2), torch.float64, "out", key="tripled")
    assert "dtype 应为 torch.float64" in str(err.value) and "诊断：乘了 3。" in str(err.value)


def test_evidence_lines_up_booleans_and_counts_the_positions():
    want = torch.ones(5, 5, dtype=torch.bool).tril()
    got = want.tril(-1)
    set_language("en")
    v = evidence.compare(got, want, evidence.Tol(0, 0, 0))
    lines = evidence.evidence(got, want, v, evidence.Tol(0, 0, 0))
    assert lines[0] == "  5 position(s) differ, the first at [0, 0]"
    assert "True" in lines[1] and "False" in lines[2]
