"""What chapter 6's visible tests check: a counting function's exact counts on a
probe's cases (helpers/probes), with the evidence when one is off.

A count is one integer, so a known mistake is named only when the student's
counts on *every* case of the probe are that mistake's counts: two mistakes
that shift one count alike are told apart by the other cases. The demo's
measuring tool is switched off while the student's function runs, as it is
during grading: the exercises ask for the count, not for a call to the demo.

    check_counts(gpt2_params, probes["gpt2"], "gpt2_params")
"""
from __future__ import annotations

import contextlib
import numbers

import torch

from ..checks import CheckFailed, diagnosis, reread_line
from ..i18n import t
from . import model_cards


@contextlib.contextmanager
def demo_switched_off():
    """While the block runs, ``model_cards.measure`` refuses, in the grader's words."""
    before = model_cards._refusal
    model_cards._refusal = t(*model_cards.REFUSAL)
    try:
        yield
    finally:
        model_cards._refusal = before


def call_text(name: str, args, kwargs) -> str:
    shown = [str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]
    return f"{name}({', '.join(shown)})"


def integer_key(out, expected: int) -> str | None:
    """The known mistake a result that is not an integer is a sign of (the grader's keys)."""
    if isinstance(out, str):
        return "count_is_a_string"
    if isinstance(out, torch.Tensor):
        return "count_is_a_tensor"
    if isinstance(out, numbers.Real) and not isinstance(out, bool):
        for unit, key in ((1e6, "count_in_millions"), (1e9, "count_in_billions")):
            if out == out and abs(out) != float("inf") and expected and abs(out * unit - expected) <= 1e-6 * unit:
                return key
        return "count_is_a_float"
    return None


def is_count(out) -> bool:
    return isinstance(out, numbers.Integral) and not isinstance(out, bool)


def check_counts(fn, probe, name: str, reread: str | None = None) -> list[int]:
    """``fn(*args, **kwargs)`` on each of the probe's cases must give the exact count; returns the counts."""
    (cases,) = probe.inputs
    expected = [int(e) for e in probe.expected.tolist()]
    got = []
    with demo_switched_off():
        for (args, kwargs), want in zip(cases, expected):
            out = fn(*args, **kwargs)
            if not is_count(out):
                key = integer_key(out, want)
                message = t(f"{call_text(name, args, kwargs)}：应返回一个整数（参数个数），实际得到 "
                            f"{type(out).__name__}：{out!r:.60}。",
                            f"{call_text(name, args, kwargs)}: expected an integer (a number of parameters), got a "
                            f"{type(out).__name__}: {out!r:.60}.")
                raise CheckFailed(message + "\n" + diagnosis(key), key=key) if key else CheckFailed(message)
            got.append(int(out))
    if got == expected:
        return got
    wrong = sum(g != e for g, e in zip(got, expected))
    lines = [t(f"{name}：{len(cases)} 个情形里有 {wrong} 个数错了。", f"{name}: {wrong} of {len(cases)} counts are wrong.")]
    calls = [call_text(name, args, kwargs) for args, kwargs in cases]
    width = max(len(c) for c in calls)
    for call, g, e in zip(calls, got, expected):
        mark = "✓" if g == e else t(f"差 {g - e:+,}", f"off by {g - e:+,}")
        lines.append(t(f"  {call:<{width}}  期望 {e:>9,}  实际 {g:>9,}  {mark}",
                       f"  {call:<{width}}  expected {e:>9,}  got {g:>9,}  {mark}"))
    found = torch.tensor(got, dtype=torch.int64)
    key = next((k for k, out in probe.bugs if torch.equal(out.to(torch.int64), found)), None)
    if key is not None:
        lines.append(diagnosis(key))
    elif reread:
        lines.append(reread_line(reread))
    raise CheckFailed("\n".join(lines), key=key)
