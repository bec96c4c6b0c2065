"""Checks for the visible tests: each failure says what was expected, what came
out, and what to look at.

The rules an exercise states are checked here too, with the words the grader
uses: ``from_scratch`` (no library softmax / attention), ``expect_dtype``,
``expect_raises``. ``exercise`` lets Run All go past an exercise that is not
done yet (outside nbgrader only: Validate and grading still fail on it).
"""
from __future__ import annotations

import contextlib
import re
import sys
import unicodedata

import torch

from .i18n import t
from .run_all import note_exercise
from .runtime import under_nbgrader


class CheckFailed(AssertionError):
    """A visible test failed. Shown as the course's message alone: no traceback,
    no class name."""

    def _render_traceback_(self):  # IPython shows just the message
        return [f"\x1b[31m✗\x1b[0m {self}"]


class NotDoneYet(NotImplementedError):
    """Under nbgrader (Validate, grading): an exercise's test ran into a stub.
    Still a NotImplementedError (the cell fails as it must), shown as one line."""

    def _render_traceback_(self):
        return [f"\x1b[31m…\x1b[0m {self}"]


def _fmt(x) -> str:
    if isinstance(x, torch.Tensor):
        x = x.detach()
        with torch.no_grad():
            s = str(x.to(torch.float64).numpy().round(4)) if x.numel() <= 24 else \
                f"tensor of shape {tuple(x.shape)}"
        return s
    return repr(x)


def _width(s: str) -> int:
    """Columns a string takes in a terminal (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def _pair(expected, actual) -> str:
    """'expected:' and 'got:' blocks whose later rows line up under their first row."""
    labels = (t("  期望：", "  expected: "), t("  实际：", "  got:      "))
    w = max(_width(label) for label in labels)
    out = []
    for label, value in zip(labels, (_fmt(expected), _fmt(actual))):
        lines = value.splitlines() or [""]
        out.append(label + " " * (w - _width(label)) + lines[0])
        out.extend(" " * w + line for line in lines[1:])
    return "\n".join(out)


def expect_shape(actual, shape, what: str) -> None:
    if not isinstance(actual, torch.Tensor):
        raise CheckFailed(t(f"{what}：应返回 torch.Tensor，实际得到 {type(actual).__name__}。",
                            f"{what}: expected a torch.Tensor, got {type(actual).__name__}."))
    if tuple(actual.shape) != tuple(shape):
        raise CheckFailed(t(f"{what}：形状应为 {tuple(shape)}，实际是 {tuple(actual.shape)}。",
                            f"{what}: expected shape {tuple(shape)}, got {tuple(actual.shape)}."))


def _matches(actual: torch.Tensor, other, atol: float, rtol: float) -> bool:
    other = torch.as_tensor(other).detach().to(torch.float64)
    return tuple(other.shape) == tuple(actual.shape) and \
        bool(torch.allclose(actual, other, atol=atol, rtol=rtol, equal_nan=True))


def expect_close(actual, expected, what: str, atol: float = 1e-5, rtol: float = 1e-4,
                 hint: str | None = None, bugs=()) -> None:
    """Fail with a readable message unless ``actual`` matches ``expected``.

    ``bugs`` is a list of (what that bug outputs, the hint naming it): a bug is
    named only when ``actual`` matches its output. ``hint`` is a general hint,
    shown when no bug matched."""
    expected = torch.as_tensor(expected)
    expect_shape(actual, expected.shape, what)
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    if not torch.isfinite(a).all() and torch.isfinite(e).all():
        msg = t(f"{what}：结果里出现了 nan 或 inf。", f"{what}: the result contains nan or inf.")
    elif not torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True):
        msg = t(f"{what}：数值不对。", f"{what}: wrong values.")
    else:
        return
    msg += "\n" + _pair(e, a)
    named = next((text for output, text in bugs if _matches(a, output, max(atol, 1e-4), max(rtol, 1e-4))), None)
    if named or hint:
        msg += "\n  " + t("提示：", "Hint: ") + (named or hint)
    raise CheckFailed(msg)


def expect_dtype(actual, dtype, what: str) -> None:
    if not isinstance(actual, torch.Tensor) or actual.dtype != dtype:
        got = actual.dtype if isinstance(actual, torch.Tensor) else type(actual).__name__
        raise CheckFailed(t(f"{what}：dtype 应为 {dtype}，实际是 {got}。", f"{what}: expected dtype {dtype}, got {got}."))


def expect_raises(fn, exc_type, what: str, hint: str | None = None):
    """``fn()`` must raise ``exc_type``; returns the exception."""
    try:
        fn()
    except exc_type as exc:
        return exc
    except NotImplementedError:
        raise
    except Exception as exc:  # noqa: BLE001 - the wrong kind of error is the finding
        got = f"{type(exc).__name__}: {exc}"
    else:
        got = t("没有抛出异常", "no exception")
    msg = t(f"{what}：应抛出 {exc_type.__name__}，实际是 {got}。", f"{what}: expected {exc_type.__name__}, got {got}.")
    raise CheckFailed(msg + ("\n  " + t("提示：", "Hint: ") + hint if hint else ""))


def expect_true(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def passed(what: str) -> None:
    print(t(f"✓ {what}：通过", f"✓ {what}: passed"))


# ------------------------------------------------------------------ from scratch

SOFTMAX_NAMES = frozenset({"softmax", "log_softmax", "_softmax", "_log_softmax", "_softmax_backward_data",
                           "special_softmax", "special_log_softmax"})
ATTENTION_NAMES = frozenset({"scaled_dot_product_attention", "multi_head_attention_forward",
                             "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu",
                             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                             "_fused_sdp_choice"})


def forbid_message(name: str, exercise: str) -> str:
    """The words of the rule, the same as the grader's."""
    return t(f"{exercise} 要求从零实现，不能调用 {name}。请只用基本张量运算（exp、sum、max、矩阵乘……）。",
             f"{exercise} must be written from scratch: calling {name} is not allowed. "
             f"Use basic tensor operations (exp, sum, max, matmul, ...).")


class _NotFromScratch(torch.overrides.TorchFunctionMode):
    def __init__(self, names, exercise):
        super().__init__()
        self.names, self.exercise = names, exercise

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.names:
            qual, module = getattr(func, "__qualname__", "") or "", getattr(func, "__module__", "") or ""
            shown = (f"torch.special.{name[len('special_'):]}" if name.startswith("special_") else
                     f"torch.nn.functional.{name}" if module.startswith("torch.nn.functional") else
                     f"Tensor.{name}" if qual.startswith(("TensorBase", "Tensor")) else f"torch.{name}")
            raise CheckFailed(f"{self.exercise}: {forbid_message(shown, self.exercise)}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def from_scratch(names, exercise: str):
    """While the block runs, calling any of the named torch functions fails the
    test, however it was reached (torch.softmax, F.softmax, x.softmax, nn.Softmax)."""
    with _NotFromScratch(frozenset(names), exercise):
        yield


# ------------------------------------------------------------------ exercises not done yet, or wrong

_OUTCOME: dict[int, str] = {}      # exercise number -> "passed", "failed" or "not done" (this kernel, so far)
_NAMES: dict[int, tuple[str, ...]] = {}


def _uses(obj) -> set[str]:
    """Global names a student's function or class refers to (its methods' and
    nested functions' too)."""
    codes = []
    if isinstance(obj, type):
        codes = [getattr(m, "__code__", None) for m in vars(obj).values()]
    else:
        codes = [getattr(obj, "__code__", None)]
    names, todo = set(), [c for c in codes if c is not None]
    while todo:
        code = todo.pop()
        names.update(code.co_names)
        todo.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return names


def _unfinished_earlier(number: int, names: tuple[str, ...], space: dict) -> list[tuple[int, str, str]]:
    """Earlier exercises of this notebook that did not pass and that the
    function(s) under test use: (number, name, outcome)."""
    used = set()
    for name in names:
        if name in space:
            used |= _uses(space[name])
    out = []
    for k in sorted(_OUTCOME):
        if k < number and _OUTCOME[k] != "passed":
            hit = next((n for n in _NAMES.get(k, ()) if n in used), None)
            if hit:
                out.append((k, hit, _OUTCOME[k]))
    return out


def earlier_note(found: list[tuple[int, str, str]]) -> str:
    """The line under a failed visible test that uses an earlier exercise which did not pass."""
    shown = t("、", ", ").join(t(f"练习 {k}（{name}）", f"exercise {k} ({name})") for k, name, _ in found)
    return t(f"  注意：这里用到了{shown}，而它上面的测试没有通过。先修好它，这里的错误可能就是它引起的。",
             f"  Note: this uses {shown}, which did not pass its own test above. Fix that first: it may "
             "cause this failure.")


def _stub_owner(exc: BaseException) -> str | None:
    """The function or class whose code raised: ``softmax``, or ``FeedForward``
    for a stub in ``FeedForward.forward``."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return None
    return tb.tb_frame.f_code.co_qualname.rsplit("<locals>.", 1)[-1].split(".")[0]


@contextlib.contextmanager
def exercise(number: int, name: str):
    """Around a visible test of exercise ``number`` (the function(s) ``name``).

    An answer that still raises NotImplementedError prints "not done yet:
    exercise N" so Run All goes on; under nbgrader (Validate, grading) the test
    still fails, with that line as its message. A failure in a test whose
    function uses an earlier exercise that did not pass its own test says so.
    """
    note_exercise(number, name)
    names = tuple(re.findall(r"[A-Za-z_]\w*", name))
    _NAMES[number] = names
    space = sys._getframe(2).f_globals            # the cell's namespace (frames: here, __enter__, the cell)
    try:
        yield
    except NotImplementedError as exc:
        _OUTCOME[number] = "not done"
        where = _stub_owner(exc) or name
        if where in names or where == "<module>":
            line = t(f"… 还没有完成：练习 {number}（{name}）。", f"… not done yet: exercise {number} ({name}).")
        else:
            owner = next((k for k, ns in _NAMES.items() if where in ns), None)
            needed = t(f"练习 {owner}（{where}）", f"exercise {owner} ({where})") if owner else where
            line = t(f"… 还没有完成：练习 {number}（{name}）要用到的{needed}还是 raise NotImplementedError()。",
                     f"… not done yet: exercise {number} ({name}) uses {needed}, which still raises "
                     "NotImplementedError().")
        if under_nbgrader():
            raise NotDoneYet(line.lstrip("… ")) from None
        print(line + t("完成后重新运行这个单元格。", " Run this cell again once it is done."))
    except Exception as exc:
        _OUTCOME[number] = "failed"
        found = _unfinished_earlier(number, names, space)
        if found and isinstance(exc, CheckFailed):
            exc.args = (f"{exc}\n{earlier_note(found)}",)
        elif found:
            exc.add_note(earlier_note(found).strip())
        raise
    else:
        _OUTCOME[number] = "passed"
