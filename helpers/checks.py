"""Checks for the visible tests: each failure says what was expected, what came
out, and what to look at.

The rules an exercise states are checked here too, with the words the grader
uses: ``from_scratch`` (no library softmax / attention), ``expect_dtype``,
``expect_raises``. ``exercise`` lets Run All go past an exercise that is not
done yet (outside nbgrader only: Validate and grading still fail on it).
"""
from __future__ import annotations

import contextlib
import traceback
import unicodedata

import torch

from .i18n import t
from .run_all import note_exercise
from .runtime import under_nbgrader


class CheckFailed(AssertionError):
    """A visible test failed. Shown without a long traceback."""

    def _render_traceback_(self):  # IPython shows just the message
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


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

SOFTMAX_NAMES = frozenset({"softmax", "log_softmax", "_softmax", "_log_softmax", "_softmax_backward_data"})
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
            shown = (f"torch.nn.functional.{name}" if module.startswith("torch.nn.functional") else
                     f"Tensor.{name}" if qual.startswith(("TensorBase", "Tensor")) else f"torch.{name}")
            raise CheckFailed(f"{self.exercise}: {forbid_message(shown, self.exercise)}")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def from_scratch(names, exercise: str):
    """While the block runs, calling any of the named torch functions fails the
    test, however it was reached (torch.softmax, F.softmax, x.softmax, nn.Softmax)."""
    with _NotFromScratch(frozenset(names), exercise):
        yield


# ------------------------------------------------------------------ exercises not done yet

@contextlib.contextmanager
def exercise(number: int, name: str):
    """Around a visible test: an answer that still raises NotImplementedError
    prints "not done yet: exercise N" (so Run All goes on) — except under
    nbgrader, where the test fails as it must. Wrong answers always fail."""
    note_exercise(number, name)
    try:
        yield
    except NotImplementedError as exc:
        if under_nbgrader():
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        where = frames[-1].name if frames else name
        also = t(f"——它用到的 {where} 仍然是 raise NotImplementedError()", f" — it uses {where}, which still raises "
                 "NotImplementedError()") if where not in (name, "<module>", "__init__", "forward") else ""
        print(t(f"… 还没有完成：练习 {number}（{name}）{also}。完成后重新运行这个单元格。",
                f"… not done yet: exercise {number} ({name}){also}. Run this cell again once it is done."))
