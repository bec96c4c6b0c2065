"""The table machinery of the hidden checks (grading/cases.py): rounding never
costs points, bugs are named, failures state their tolerance, shapes are
checked before anything is indexed."""
import linecache
import math

import pytest
import torch

from grading.cases import EXACT, F32, LOOSE, RELATIVE, Case, Check, Earlier, compare, on_its_own, same
from grading.core import SOFTMAX_FAMILY, Bug, GradingFailure
from helpers import set_language


@pytest.fixture(autouse=True)
def english():
    set_language("en")
    yield
    set_language("zh")


def ref_softmax(x, dim=-1):
    x = x.double()
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def softmax_f32(x, dim=-1):
    """Correct, computed in float32 and cast back: differs from float64 by rounding only."""
    y = x.float()
    e = torch.exp(y - y.amax(dim, keepdim=True))
    return (e / e.sum(dim, keepdim=True)).to(x.dtype)


NO_NORM = Bug("no_norm", "没有归一化", "not normalised", lambda x, dim=-1: torch.exp(x - x.amax(dim, keepdim=True)))
LIKE_REF = Bug("harmless", "一样", "same as the reference", ref_softmax)


def test_float32_rounding_never_fails_but_a_real_difference_does():
    x = torch.randn(6, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 10
    gap = (softmax_f32(x) - ref_softmax(x)).abs().max().item()
    assert 0 < gap and same(softmax_f32(x), ref_softmax(x))      # a real rounding gap, accepted
    assert not same(softmax_f32(x), ref_softmax(x), EXACT)
    assert not same(ref_softmax(x) * (1 + 1e-3), ref_softmax(x))  # 1e-3 relative is maths, not rounding
    big = torch.tensor([1.0, 2e6]), torch.tensor([6.0, 2e6])  # the absolute part follows the largest value
    assert same(*big) and not same(big[0], big[1], RELATIVE)


def test_nan_and_shape_are_reported_not_indexed():
    v = compare(torch.tensor([[1.0, float("nan")]]), torch.tensor([[1.0, 2.0]]))
    assert v.problem and "[0, 1]" in v.problem
    for got in (torch.zeros(3), torch.zeros(()), torch.zeros(0, 2), [1.0, 2.0], None):
        v = compare(got, torch.zeros(2, 2))
        assert v.problem and ("shape" in v.problem or "torch.Tensor" in v.problem)
    check = Check("f", lambda x: x[:, :1])
    with pytest.raises(GradingFailure, match=r"shape: \(2, 2\)|\(2, 2\)") as err:
        check.tensor("2-D", check.call(torch.zeros(2, 2), label="2-D"), (2, 2))
    assert "IndexError" not in str(err.value)


def test_failure_states_tolerance_largest_difference_and_the_bug():
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    check = Check("softmax", lambda x, dim=-1: torch.exp(x - x.amax(dim, keepdim=True)), reference=ref_softmax)
    with pytest.raises(GradingFailure) as err:
        check.case(Case("random", (x,), bugs=[LIKE_REF, NO_NORM]))
    msg = str(err.value)
    largest = (torch.exp(x - x.amax(-1, keepdim=True)).double() - ref_softmax(x)).abs().max().item()
    assert "tolerance: |diff| ≤ 1e-05×" in msg and f"largest difference {largest:.3g}" in msg, msg
    assert "[bug:no_norm]" in msg or "[no_norm]" in msg, msg       # the matching bug, not the harmless one
    assert "harmless" not in msg
    exp_line, got_line = (line for line in msg.splitlines() if line.startswith(("  expected", "  got")))
    assert exp_line.index("=") == got_line.index("="), msg          # the same row, aligned


def test_a_correct_answer_counts_and_keeps_the_dtype_rule():
    check = Check("softmax", softmax_f32, reference=ref_softmax)
    check.cases([Case("f64", (torch.randn(4, 7, dtype=torch.float64),)), Case("f32", (torch.randn(2, 3),), {"dim": 0})])
    assert check.n == 2
    with pytest.raises(GradingFailure, match="dtype"):
        Check("softmax", lambda x, dim=-1: softmax_f32(x).float(), reference=ref_softmax).case(
            Case("f64", (torch.randn(4, 7, dtype=torch.float64),)))


def test_from_scratch_calls_fail_with_the_rule():
    check = Check("softmax", lambda x, dim=-1: x.softmax(dim), reference=ref_softmax, forbid=SOFTMAX_FAMILY)
    with pytest.raises(GradingFailure, match="from scratch: calling Tensor.softmax"):
        check.case(Case("x", (torch.randn(2, 3),)))


SOFTMAX_SRC = {"right": "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim, keepdim=True))\n"
                        "    return e / e.sum(dim, keepdim=True)\n",
               "wrong": "def softmax(x, dim=-1):\n    return torch.exp(x)\n",
               "stub": "def softmax(x, dim=-1):\n    raise NotImplementedError()\n"}
ATTENTION_SRC = {"right": "def attention(q, k):\n    return softmax(q @ k.transpose(-2, -1), dim=-1)\n",
                 "wrong": "def attention(q, k):\n    return softmax(q @ k.transpose(-2, -1), dim=-2)\n",
                 "stub": "def attention(q, k):\n    raise NotImplementedError()\n",
                 "library": "def attention(q, k):\n    softmax(q, dim=-1)\n"
                            "    return torch.softmax(q @ k.transpose(-2, -1), dim=-1)\n"}


def _softmax_works(f):
    x = torch.tensor([[1.0, 2.0], [1000.0, 1001.0]])
    return same(f(x), ref_softmax(x))


EARLIER_SOFTMAX = (Earlier("softmax", 1, _softmax_works, lambda x, dim=-1: ref_softmax(x, dim).to(x.dtype)),)


def _attention_check(softmax: str, attention: str):
    """Run a small hidden check of ``attention`` (which calls the student's softmax) on its own."""
    from grading.core import SOFTMAX_FAMILY
    ns = {"torch": torch, "math": math}
    notebook_cell(SOFTMAX_SRC[softmax] + ATTENTION_SRC[attention], ns)
    theirs = ns["softmax"]
    q = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with on_its_own(ns["attention"], EARLIER_SOFTMAX):
        check = Check("attention", ns["attention"], forbid=SOFTMAX_FAMILY)
        check.expect("q", check.call(q, q, label="q"), ref_softmax(q @ q.T))
    return ns, theirs


def test_a_later_exercise_is_graded_on_its_own(capsys):
    set_language("en")
    for earlier in ("wrong", "stub"):
        ns, theirs = _attention_check(earlier, "right")                 # right given a right softmax: passes
        out = capsys.readouterr().out
        assert "Correct when given a correct softmax; exercise 1 still needs fixing." in out, out
        assert ns["softmax"] is theirs                                   # the student's own is back (no IPython cell)
        with pytest.raises(GradingFailure) as err:                       # its own bug is its own
            _attention_check(earlier, "wrong")
        assert "this exercise's own; exercise 1 needs fixing too" in str(err.value)
        with pytest.raises(GradingFailure) as err:                       # not implemented is said as such
            _attention_check(earlier, "stub")
        assert "not implemented yet" in str(err.value) and "exercise 1" not in str(err.value)
        with pytest.raises(GradingFailure) as err:                       # a stand-in gives no right to torch.softmax
            _attention_check(earlier, "library")
        assert "from scratch: calling torch.softmax" in str(err.value)
    _attention_check("right", "right")
    assert "given a correct" not in capsys.readouterr().out             # nothing to say when softmax works
    with pytest.raises(GradingFailure) as err:
        _attention_check("right", "wrong")
    assert "exercise 1" not in str(err.value)


def test_a_probe_made_of_the_earlier_checks_stands_in_exactly_when_they_fail():
    """``passes(verify)``: the earlier exercise's own checks decide, gradients included
    (on_its_own probes under no_grad), so "exercise N still needs fixing" is always true."""
    from grading.cases import passes
    from grading.core import expect_autograd

    def verify(softmax):
        x = torch.tensor([[1.0, 2.0], [1000.0, 1001.0]], requires_grad=True)
        out = softmax(x)
        check = Check("softmax", softmax)
        check.expect("x", out, ref_softmax(x.detach()))
        expect_autograd(out, "softmax")                # would fail for every answer under no_grad

    earlier = (Earlier("softmax", 1, passes(verify), lambda x, dim=-1: ref_softmax(x, dim).to(x.dtype)),)
    right = SOFTMAX_SRC["right"]
    for src, swapped in ((right, False), (SOFTMAX_SRC["wrong"], True), (SOFTMAX_SRC["stub"], True),
                         (right.replace("return e / e.sum(dim, keepdim=True)", "return (e / e.sum(dim, keepdim=True)).detach()"),
                          True)):                                           # the right values, cut off from autograd
        ns = {"torch": torch, "math": math}
        notebook_cell(src + ATTENTION_SRC["right"], ns)
        with on_its_own(ns["attention"], earlier) as got:
            pass
        assert bool(got) is swapped, src


def test_a_stand_in_kept_by_a_student_gives_no_rights_later():
    from grading import core, guard
    from grading.ch01_attention import ref_softmax as graders_softmax
    guard.boot(None)                      # as in a graded kernel: the grading modules' code is known
    obj, retire = core.stand_in(graders_softmax)
    x = torch.randn(2, 3)
    with core.forbidden(core.SOFTMAX_FAMILY, "kept"):
        # while its check is on, the stand-in's calls are the grader's own; the student's are not
        assert same(core.call(lambda: obj(x), what="kept"), ref_softmax(x))
        with pytest.raises(GradingFailure, match="from scratch"):
            core.call(lambda: obj(x) + torch.softmax(x, -1), what="kept")
    retire()
    with pytest.raises(GradingFailure, match="calls a function of the grading module"):
        core.call(lambda: obj(x), what="kept")


def notebook_cell(src: str, ns: dict) -> None:
    """Run ``src`` the way IPython runs a cell: its lines can be found in tracebacks."""
    name = f"/tmp/ipykernel_course/cell_{abs(hash(src))}.py"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    exec(compile(src, name, "exec"), ns)


def test_common_raw_errors_get_a_plain_hint():
    ns = {"torch": torch}
    notebook_cell("def attention(q, k):\n    return q @ k.transpose(1, 2)\n", ns)
    with pytest.raises(GradingFailure, match=r"transpose\(-2, -1\)"):
        Check("attention", ns["attention"]).call(torch.randn(3, 4), torch.randn(3, 4), label="2-D")


def test_errors_to_raise():
    bug = Bug("assert", "用了 assert", "used assert")

    def make(kind):
        def f(d):
            if kind == "value":
                raise ValueError(f"d={d} is odd")
            if kind == "assert":
                raise AssertionError
            if kind == "todo":
                raise NotImplementedError
        return f
    assert "odd" in str(Check("f", make("value")).raises("odd d", ValueError, 5))
    with pytest.raises(GradingFailure, match=r"\[(bug:)?assert\]"):
        Check("f", make("assert")).raises("odd d", ValueError, 5, bug_if={AssertionError: bug})
    with pytest.raises(GradingFailure, match="no exception"):
        Check("f", make("none")).raises("odd d", ValueError, 5)
    with pytest.raises(GradingFailure, match="not implemented yet"):
        Check("f", make("todo")).raises("odd d", ValueError, 5)


def test_tolerances_are_ordered():
    x = torch.tensor([1.0, 100.0])
    assert same(x * (1 + 5e-4), x, LOOSE) and not same(x * (1 + 5e-4), x, F32)


# ------------------------------------------------------------------ the visible side (helpers/checks.py)

def test_visible_from_scratch_rule_uses_the_graders_words_and_names():
    from grading import core
    from helpers import checks
    assert checks.SOFTMAX_NAMES == core.SOFTMAX_FAMILY and checks.ATTENTION_NAMES == core.ATTENTION_FAMILY
    for lang in ("zh", "en"):
        set_language(lang)
        assert checks.forbid_message("torch.softmax", "softmax") == core._forbid_message("torch.softmax", "softmax")
    set_language("en")
    for call in (lambda x: torch.softmax(x, -1), lambda x: x.softmax(-1), lambda x: torch.nn.Softmax(-1)(x),
                 lambda x: torch.nn.functional.softmax(x, -1)):
        with pytest.raises(checks.CheckFailed, match="softmax must be written from scratch"):
            with checks.from_scratch(checks.SOFTMAX_NAMES, "softmax"):
                call(torch.zeros(2, 3))
    with checks.from_scratch(checks.SOFTMAX_NAMES, "softmax"):
        torch.exp(torch.zeros(2))                                   # basic operations are fine


def test_expect_close_rows_line_up_and_bugs_are_named_only_on_their_fingerprint():
    from helpers import checks, evidence
    expected = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    for lang in ("zh", "en"):
        set_language(lang)
        with pytest.raises(checks.CheckFailed) as err:
            checks.expect_close(torch.tensor([[0.5, 0.5], [0.5, 0.5]]), expected, "w",
                                bugs=[(torch.tensor([[0.5, 0.5], [0.5, 0.5]]), "UNIFORM"), (expected.T, "TRANSPOSED")])
        lines = str(err.value).splitlines()
        labels = ("期望", "实际") if lang == "zh" else ("expected", "got")
        rows = [line for line in lines for label in labels if f" {label} " in line]
        assert len(rows) == 2, lines
        # the expected and the actual row's numbers start in the same column (CJK labels take two columns a character)
        starts = {evidence._width(line[:line.index(next(x for x in line.split() if x[0] in "-0123456789."))])
                  for line in rows}
        assert len(starts) == 1, "\n".join(lines)
        assert "UNIFORM" in lines[-1] and "TRANSPOSED" not in str(err.value)
    set_language("en")
    with pytest.raises(checks.CheckFailed) as err:
        checks.expect_close(torch.tensor([[0.9, 0.1], [0.5, 0.5]]), expected, "w", reread="GENERAL",
                            bugs=[(torch.tensor([[0.5, 0.5], [0.5, 0.5]]), "UNIFORM")])
    assert "GENERAL" in str(err.value) and "UNIFORM" not in str(err.value)


def test_unfinished_exercise_prints_outside_nbgrader_and_fails_under_it(monkeypatch, capsys):
    from helpers import checks

    def softmax(x):
        raise NotImplementedError()

    def attention(x):
        return softmax(x)
    monkeypatch.setattr(checks, "_NAMES", {})           # a fresh kernel: no exercise has been seen yet
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with checks.exercise(3, "attention"):
        attention(1)
    assert "not done yet: exercise 3 (attention) uses softmax, which still raises" in capsys.readouterr().out
    with pytest.raises(checks.CheckFailed):                            # a wrong answer still fails
        with checks.exercise(3, "attention"):
            checks.expect_true(False, "wrong")
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(NotImplementedError):
        with checks.exercise(1, "softmax"):
            softmax(1)


def test_a_visible_test_says_when_an_earlier_exercise_it_uses_did_not_pass():
    from helpers import checks
    set_language("en")
    checks._OUTCOME.clear()
    ns = {"torch": torch, "checks": checks}
    notebook_cell(SOFTMAX_SRC["wrong"] + ATTENTION_SRC["right"] + "def other(q, k):\n    return q @ k.T\n", ns)
    test = ("with checks.exercise({n}, {name!r}):\n"
            "    checks.expect_close({call}, torch.tensor([[0.5, 0.5]]), 'out')\n")
    for n, name, call in ((1, "softmax", "softmax(torch.zeros(1, 2))"),
                          (3, "attention", "attention(torch.zeros(1, 2), torch.zeros(2, 2))"),
                          (4, "other", "other(torch.zeros(1, 2), torch.zeros(2, 2))")):
        with pytest.raises(checks.CheckFailed) as err:
            notebook_cell(test.format(n=n, name=name, call=call), ns)
        note = "Note: this uses exercise 1 (softmax), which did not pass its own test above"
        assert (note in str(err.value)) == (name == "attention"), str(err.value)   # only where it is used
    notebook_cell(SOFTMAX_SRC["right"], ns)
    notebook_cell(test.format(n=1, name="softmax", call="softmax(torch.zeros(1, 2))"), ns)
    with pytest.raises(checks.CheckFailed) as err:                      # once it passes, nothing more is said
        notebook_cell(test.format(n=3, name="attention", call="attention(torch.zeros(1, 2), torch.zeros(2, 2)) * 2"),
                      ns)
    assert "Note:" not in str(err.value)


def test_stand_ins_last_until_the_cell_ends_in_a_kernel(monkeypatch):
    """In IPython the stand-in stays for the rest of the test cell (its visible tests see
    it) and the student's own function is back for the next cell."""
    import sys

    from IPython.core.interactiveshell import InteractiveShell
    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    ip = InteractiveShell.instance()
    ip.reset(new_session=False)
    set_language("en")
    ip.run_cell(SOFTMAX_SRC["wrong"] + ATTENTION_SRC["right"], store_history=False).raise_error()
    ip.user_ns.update(torch=torch, on_its_own=on_its_own, EARLIER=EARLIER_SOFTMAX, Check=Check, ref=ref_softmax)
    theirs = ip.user_ns["softmax"]
    cell = ("q = torch.eye(3)\n"
            "with on_its_own(attention, EARLIER):\n"
            "    c = Check('attention', attention)\n"
            "    c.expect('q', c.call(q, q, label='q'), ref(q @ q.T))\n"
            "during = softmax\n")
    ip.run_cell(cell, store_history=False).raise_error()
    assert ip.user_ns["during"] is not theirs                  # the visible part of the cell sees the stand-in
    assert ip.user_ns["softmax"] is theirs                     # the next cell sees the student's own
    ip.reset(new_session=False)
