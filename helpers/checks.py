"""Checks for the visible tests: each failure says what was expected, what came
out, and what to look at.
"""
from __future__ import annotations

import torch

from .i18n import t


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


def expect_shape(actual, shape, what: str) -> None:
    if not isinstance(actual, torch.Tensor):
        raise CheckFailed(t(f"{what}：应返回 torch.Tensor，实际得到 {type(actual).__name__}。",
                            f"{what}: expected a torch.Tensor, got {type(actual).__name__}."))
    if tuple(actual.shape) != tuple(shape):
        raise CheckFailed(t(f"{what}：形状应为 {tuple(shape)}，实际是 {tuple(actual.shape)}。",
                            f"{what}: expected shape {tuple(shape)}, got {tuple(actual.shape)}."))


def expect_close(actual, expected, what: str, atol: float = 1e-5, rtol: float = 1e-4,
                 hint: str | None = None) -> None:
    """Fail with a readable message unless ``actual`` matches ``expected``."""
    expected = torch.as_tensor(expected)
    expect_shape(actual, expected.shape, what)
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64)
    if not torch.isfinite(a).all() and torch.isfinite(e).all():
        msg = t(f"{what}：结果里出现了 nan 或 inf。\n  期望：{_fmt(e)}\n  实际：{_fmt(a)}",
                f"{what}: the result contains nan or inf.\n  expected: {_fmt(e)}\n  got:      {_fmt(a)}")
    elif not torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True):
        msg = t(f"{what}：数值不对。\n  期望：{_fmt(e)}\n  实际：{_fmt(a)}",
                f"{what}: wrong values.\n  expected: {_fmt(e)}\n  got:      {_fmt(a)}")
    else:
        return
    if hint:
        msg += "\n  " + t("提示：", "Hint: ") + hint
    raise CheckFailed(msg)


def expect_true(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def passed(what: str) -> None:
    print(t(f"✓ {what}：通过", f"✓ {what}: passed"))
