"""Hidden checks as tables: a case is a label, the inputs, the reference, the
tolerance, the known bugs it can recognise and the hint it gives.

    SOFTMAX = [Case(t("二维输入", "2-D input"), (x,), {"dim": -1}, bugs=SOFTMAX_BUGS), ...]

    def check_softmax(softmax):
        check = Check("softmax", softmax, reference=ref_softmax, forbid=FORBIDDEN)
        check.cases(SOFTMAX)
        passed("softmax", check.n)

``Check.case`` calls the student's function (through ``core.call``, inside
``core.forbidden`` when the exercise is from scratch), compares the result with
the float64 reference, names the first known bug whose output the student's
matches, and counts. A failure message states the tolerance used and the
largest difference seen; shapes are validated before any value is looked at.

Tolerances judge the maths, not the rounding: ``F32`` (the default) accepts
every difference float32 arithmetic explains, so an answer computed in float32
and cast back, or written with float32 constants, never loses points. Inputs
are chosen so that each bug's difference is orders of magnitude larger.

``core.passed`` must still be called by the check function itself (it seals
with its caller's name): ``Check`` only counts.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from helpers.i18n import t

from .core import Bug, GradingFailure, as_f64, call, diagnose, ensure_untampered, failure, forbidden, stand_in
from .protocol import NOT_IMPLEMENTED, verdicts_in

# ------------------------------------------------------------------ tolerances


@dataclass(frozen=True)
class Tol:
    """|got − expected| ≤ atol·scale + rtol·|expected|, where scale is the largest
    finite |expected| (at least ``floor``): the absolute part follows the
    values' magnitude, so small and large outputs are judged alike."""
    rtol: float = 1e-5
    atol: float = 1e-5
    floor: float = 1e-6


F32 = Tol()                       # what float32 rounding explains, with a margin of ~100
LOOSE = Tol(1e-3, 1e-3)           # ill-conditioned cases (huge scores, long sums)
RELATIVE = Tol(1e-5, 0.0)         # values spanning many orders of magnitude (frequencies)
EXACT = Tol(0.0, 0.0, 0.0)        # masks, integers, booleans, bit-for-bit properties
FINGERPRINT = Tol(1e-3, 1e-3)     # a student's output "is" a bug's output within this


def scale_of(expected: torch.Tensor, tol: Tol) -> float:
    finite = expected[torch.isfinite(expected)]
    top = float(finite.abs().max()) if finite.numel() else 0.0
    return max(top, tol.floor)


def describe_tol(tol: Tol, scale: float) -> str:
    if tol.rtol == 0 and tol.atol == 0:
        return t("逐位相等", "bit-for-bit equality")
    parts = ([f"{tol.atol:.0e}×{scale:.3g}"] if tol.atol else []) + \
        ([t(f"{tol.rtol:.0e}×|期望|", f"{tol.rtol:.0e}×|expected|")] if tol.rtol else [])
    return t("|差| ≤ ", "|diff| ≤ ") + " + ".join(parts)


@dataclass(frozen=True)
class Verdict:
    """The outcome of one comparison. ``problem`` is None when it passed."""
    problem: str | None
    largest: float = 0.0
    where: tuple | None = None
    scale: float = 1.0


def _index(flat: int, shape) -> tuple:
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def compare(got, expected, tol: Tol = F32) -> Verdict:
    """Shape, then the nan/±inf pattern, then the values."""
    e = as_f64(expected)
    if not isinstance(got, torch.Tensor):
        return Verdict(t(f"应返回 torch.Tensor，实际得到 {type(got).__name__}",
                         f"expected a torch.Tensor, got {type(got).__name__}"))
    if tuple(got.shape) != tuple(e.shape):
        return Verdict(t(f"形状应为 {tuple(e.shape)}，实际是 {tuple(got.shape)}",
                         f"the shape should be {tuple(e.shape)}, got {tuple(got.shape)}"))
    g = as_f64(got)
    scale = scale_of(e, tol)
    fe, fg = torch.isfinite(e), torch.isfinite(g)
    odd = (fe != fg) | (~fe & ~fg & ~((e == g) | (e.isnan() & g.isnan())))
    if odd.any():
        where = _index(int(odd.flatten().nonzero()[0]), e.shape)
        return Verdict(t(f"位置 {list(where)} 应为 {float(e[where]):.4g}，实际是 {float(g[where]):.4g}",
                         f"position {list(where)} should be {float(e[where]):.4g}, got {float(g[where]):.4g}"),
                       float("inf"), where, scale)
    diff = torch.where(fe, (g - e).abs(), torch.zeros_like(e))
    if diff.numel() == 0:
        return Verdict(None, 0.0, None, scale)
    excess = diff - (tol.atol * scale + tol.rtol * e.abs().nan_to_num(posinf=0.0, neginf=0.0))
    flat = int(diff.flatten().argmax())
    largest, where = float(diff.flatten()[flat]), _index(flat, e.shape)
    if (excess > 0).any():
        return Verdict(t("数值不对", "wrong values"), largest, where, scale)
    return Verdict(None, largest, where, scale)


def same(got, expected, tol: Tol = F32) -> bool:
    return compare(got, expected, tol).problem is None


# ------------------------------------------------------------------ showing


def _row(x: torch.Tensor, where: tuple | None, n: int = 8) -> str:
    """The row (last dimension) holding ``where``, named by its index."""
    x = as_f64(x)
    if x.dim() == 0:
        return f"{float(x):.6g}"
    lead = tuple(where[:-1]) if where is not None else (0,) * (x.dim() - 1)
    row = x[lead] if lead else x
    vals = ", ".join(f"{v:.6g}" for v in row[:n].tolist()) + (", …" if row.numel() > n else "")
    name = "[" + ", ".join(str(i) for i in lead) + (", :]" if lead else ":]")
    return f"{name} = [{vals}]"


def show_pair(expected, got, where) -> tuple[str, str]:
    """The same row of both, for the failure message."""
    if isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(as_f64(expected).shape):
        return _row(expected, where), _row(got, where)
    e = as_f64(expected)
    got_s = f"shape {tuple(got.shape)}" if isinstance(got, torch.Tensor) else type(got).__name__
    return f"shape {tuple(e.shape)}", got_s


def tolerance_line(tol: Tol, v: Verdict) -> str:
    if v.where is None or v.largest == float("inf"):
        return ""
    return t(f"  容差：{describe_tol(tol, v.scale)}；最大差 {v.largest:.3g}（在 {list(v.where)}）",
             f"  tolerance: {describe_tol(tol, v.scale)}; largest difference {v.largest:.3g} (at {list(v.where)})")


def value_failure(what: str, got, expected, tol: Tol, v: Verdict, bug: Bug | None = None,
                  hint: str | None = None) -> GradingFailure:
    exp_s, got_s = show_pair(expected, got, v.where)
    if v.problem and v.problem != t("数值不对", "wrong values"):
        what = f"{what}: {v.problem}"
    lines = [str(failure(what, exp_s, got_s)), tolerance_line(tol, v)]
    if bug is not None:
        lines.append(t("  诊断：", "  Diagnosis: ") + bug.describe())
    elif hint:
        lines.append(t("  提示：", "  Hint: ") + hint)
    return GradingFailure("\n".join(line for line in lines if line))


# ------------------------------------------------------------------ common crashes, in plain words

def _line_has(*needles):
    return lambda exc, line: any(n in line.replace(" ", "") for n in needles)


COMMON_HINTS = [
    (lambda exc, line: ("Dimension out of range" in str(exc) or "cannot be multiplied" in str(exc)
                        or "must match the size" in str(exc))
     and _line_has("transpose(1,2)", "transpose(2,1)")(exc, line),
     Bug("transpose_assumes_batch",
         "transpose(1, 2) 交换的是固定的第 1、2 维：只有两维的输入没有第 2 维，四维的 (B, h, n, d) 则被交换成了"
         "头和位置。要转置最后两维请写 transpose(-2, -1)。",
         "transpose(1, 2) swaps the fixed axes 1 and 2: a 2-D input has no dimension 2, and a 4-D (B, h, n, d) "
         "input gets its heads and positions swapped. Swap the last two axes with transpose(-2, -1).")),
    (lambda exc, line: "cannot be multiplied" in str(exc) or ("@" in line and "must match the size" in str(exc)),
     Bug("matmul_shapes",
         "矩阵乘的两边形状对不上：A @ B 要求 A 的最后一维等于 B 的倒数第二维。打印两边的 .shape 看看。",
         "the two sides of a matrix product do not fit: A @ B needs A's last dimension to equal B's "
         "second-to-last. Print both .shape to see.")),
    (lambda exc, line: "bitwise_not" in str(exc) or ("~" in line and "only supported for integer" in str(exc)),
     Bug("negating_a_float_mask", "~ 只能作用在布尔（或整数）张量上：掩码需要是 dtype=torch.bool。",
         "~ only works on boolean (or integer) tensors: the mask must have dtype=torch.bool.")),
]


# ------------------------------------------------------------------ earlier exercises

@dataclass(frozen=True)
class Earlier:
    """An earlier exercise that a later one calls by name (attention calls the
    student's ``softmax``; a block builds their ``FeedForward``).

    probe     -- ``probe(theirs)`` is True when the student's own version works
    reference -- a correct version with the same interface, written from basic
                 operations and keeping its input's dtype: it stands in for the
                 student's while the later exercise is checked (``on_its_own``)
    """
    name: str
    exercise: int
    probe: Callable[[Callable], bool]
    reference: Callable


def passes(verify: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """A probe for ``Earlier`` made of the earlier exercise's own hidden checks:
    ``verify(theirs)`` raises GradingFailure when they fail (it must not call
    ``passed``). The stand-in then comes in exactly when the earlier exercise
    loses its own points, so "exercise N still needs fixing" is always true."""
    def probe(theirs) -> bool:
        with torch.enable_grad():            # its checks may test gradients; probes run under no_grad
            verify(theirs)
        return True
    return probe


def _namespace(fn) -> dict:
    """The notebook namespace a student's function (or class, or module) was defined in."""
    for obj in (fn, getattr(fn, "forward", None), getattr(type(fn), "forward", None), getattr(fn, "__init__", None)):
        space = getattr(obj, "__globals__", None)
        if isinstance(space, dict):
            return space
    return {}


def _works(e: Earlier, theirs) -> bool:
    try:
        with torch.no_grad():
            return bool(e.probe(theirs))
    except Exception:  # noqa: BLE001 - a crash (or a stub) of the earlier function is its breakage
        return False


def _names(swapped) -> str:
    return t("、", ", ").join(e.name for e in swapped)


def _exercises(swapped) -> str:
    return t("、", ", ").join(str(e.exercise) for e in swapped)


def given_correct_line(swapped) -> str:
    """Said under a passed check that ran with stand-ins."""
    return t(f"  用正确的 {_names(swapped)} 代替你的之后，这一题是对的；练习 {_exercises(swapped)} 还需要修改。",
             f"  Correct when given a correct {_names(swapped)}; exercise {_exercises(swapped)} still needs fixing.")


def also_wrong_line(swapped) -> str:
    """Said under a failed check that ran with stand-ins: the failure is this exercise's own."""
    return t(f"  （这项检查已经用正确的 {_names(swapped)} 代替了你的，所以上面的错误出在这一题本身；"
             f"练习 {_exercises(swapped)} 也还需要修改。）",
             f"  (This check already used a correct {_names(swapped)} in place of yours, so the failure above is "
             f"this exercise's own; exercise {_exercises(swapped)} needs fixing too.)")


def _after_this_cell(fn) -> None:
    """Run ``fn`` when the notebook cell now running ends (at once outside IPython)."""
    try:
        from IPython import get_ipython
        shell = get_ipython()
        running = shell.run_code.__func__.__code__ if shell is not None else None
    except Exception:  # noqa: BLE001 - no IPython: there is no cell to wait for
        shell = running = None
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not running:
        frame = frame.f_back
    if frame is None:                         # not inside a cell (a test calling the check directly)
        fn()
        return

    def once(*_):
        shell.events.unregister("post_run_cell", once)
        fn()
    shell.events.register("post_run_cell", once)


@contextlib.contextmanager
def on_its_own(fn, earlier: Sequence[Earlier]):
    """Check ``fn`` on its own, apart from the earlier exercises it uses.

    Each earlier exercise whose own answer is wrong or not done is replaced, in
    the student's namespace, by its reference while the block runs, so that a
    wrong earlier answer costs only its own points. When the block passes, the
    student reads that the exercise is correct given a correct earlier piece,
    and the stand-ins stay until the cell ends, so that the cell's visible tests
    see the same; when it fails, the student's own versions come back at once
    and the message says the failure is this exercise's own. An exercise that is
    not implemented is said to be so, and nothing more.
    """
    space = _namespace(fn)
    swapped, restore = [], []
    for e in earlier:
        theirs = space.get(e.name)
        if theirs is None or _works(e, theirs):
            continue
        obj, retire = stand_in(e.reference)
        space[e.name] = obj
        swapped.append(e)
        restore.append((e.name, theirs, obj, retire))

    def put_back() -> None:
        for name, theirs, obj, retire in restore:
            retire()
            if space.get(name) is obj:
                space[name] = theirs

    try:
        yield tuple(swapped)
    except GradingFailure as err:
        put_back()
        if swapped and NOT_IMPLEMENTED not in verdicts_in(str(err)):
            raise GradingFailure(f"{err}\n{also_wrong_line(swapped)}") from None
        raise
    except BaseException:
        put_back()
        raise
    if swapped:
        print(given_correct_line(swapped))
        _after_this_cell(put_back)


# ------------------------------------------------------------------ cases and the runner

@dataclass(frozen=True)
class Case:
    """One row of an exercise's table.

    label    -- what the student reads ("3-D input, dim=1")
    args     -- positional inputs (tensors are cloned before each call)
    kwargs   -- keyword inputs
    tol      -- the tolerance (F32 unless the case is ill-conditioned)
    bugs     -- known bugs to fingerprint on this case (their impl takes the same inputs)
    hint     -- shown when no bug matched
    expected -- a fixed expected value; None: the check's reference computes it
    """
    label: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    tol: Tol = F32
    bugs: Sequence[Bug] = ()
    hint: str | None = None
    expected: Any = None


def _clone(a):
    return a.clone() if isinstance(a, torch.Tensor) else a


class Check:
    """One exercise's hidden check: calls, compares, diagnoses, counts (``n``)."""

    def __init__(self, what: str, fn, *, reference: Callable | None = None, forbid=None,
                 hints=(), dtype_follows: int | None = 0):
        self.what, self.fn, self.reference = what, fn, reference
        self.forbid, self.hints = forbid, list(hints) + COMMON_HINTS
        self.dtype_follows = dtype_follows   # index of the argument whose dtype the output keeps
        self.n = 0

    def call(self, *args, label: str, fn=None, **kwargs):
        full = f"{self.what}: {label}"
        guard = forbidden(self.forbid, self.what) if self.forbid else contextlib.nullcontext()
        with guard:
            return call(fn or self.fn, *(_clone(a) for a in args), what=full, hints=self.hints,
                        **{k: _clone(v) for k, v in kwargs.items()})

    def expect(self, label: str, got, expected, *, tol: Tol = F32, bugs=(), bug_args=(), bug_kwargs=None,
               part: Callable | None = None, hint: str | None = None, dtype=None, count: bool = True) -> None:
        """Compare (and count, unless ``count=False``); on failure name the matching bug.
        ``part`` picks the compared piece out of a bug's output (e.g. the weights of (out, w))."""
        v = compare(got, expected, tol)
        if v.problem is None:
            if dtype is not None and got.dtype != dtype:
                raise failure(t(f"{self.what}: {label}：输出的 dtype", f"{self.what}: {label}: dtype of the output"),
                              str(dtype), str(got.dtype),
                              hint=t("输出的 dtype 要和输入相同（float64 进，float64 出）。",
                                     "the output keeps the input's dtype (float64 in, float64 out)."))
            self.n += count
            return
        bug = None
        if bugs and isinstance(got, torch.Tensor) and v.where is not None:
            pick = part or (lambda x: x)
            bug = diagnose(got, list(bugs), *bug_args, expected=expected, **(bug_kwargs or {}),
                           match=lambda a, b: same(a, pick(b), FINGERPRINT))
        raise value_failure(f"{self.what}: {label}", got, expected, tol, v, bug, hint)

    def case(self, case: Case):
        """Run one table row against the reference; return the student's output."""
        out = self.call(*case.args, label=case.label, **case.kwargs)
        expected = case.expected if case.expected is not None else self.reference(*case.args, **case.kwargs)
        dtype = None
        if self.dtype_follows is not None and case.args and isinstance(case.args[self.dtype_follows], torch.Tensor):
            dtype = case.args[self.dtype_follows].dtype
        self.expect(case.label, out, expected, tol=case.tol, bugs=case.bugs, bug_args=case.args,
                    bug_kwargs=case.kwargs, hint=case.hint, dtype=dtype)
        return out

    def cases(self, table: Sequence[Case]) -> None:
        for c in table:
            self.case(c)

    def fail(self, label: str, expected: str, got: str, bug: Bug | None = None, hint: str | None = None):
        """A failure of a rule that is not a value comparison (types, errors to raise)."""
        return failure(f"{self.what}: {label}", expected, got, bug, hint)

    def tensor(self, label: str, got, shape, hint: str | None = None, bug: Bug | None = None) -> torch.Tensor:
        """Validate type and shape before anything is indexed."""
        if not isinstance(got, torch.Tensor):
            raise self.fail(label, t("一个 torch.Tensor", "a torch.Tensor"), type(got).__name__, hint=hint)
        if tuple(got.shape) != tuple(shape):
            raise self.fail(t(f"{label}：形状", f"{label}: shape"), str(tuple(shape)), str(tuple(got.shape)),
                            bug, hint)
        return got

    def raises(self, label: str, exc_type, *args, bug_if: dict | None = None, hint: str | None = None,
               **kwargs) -> BaseException:
        """The student's function must raise ``exc_type`` on these inputs (counted)."""
        ensure_untampered(f"{self.what}: {label}")
        try:
            self.fn(*args, **kwargs)
        except exc_type as exc:
            self.n += 1
            return exc
        except NotImplementedError:
            call(self.fn, *args, what=f"{self.what}: {label}", **kwargs)  # core's own "not implemented" verdict
            raise
        except Exception as exc:  # noqa: BLE001 - the wrong kind of error
            bug = (bug_if or {}).get(type(exc), (bug_if or {}).get(Exception))
            raise self.fail(label, exc_type.__name__, f"{type(exc).__name__}: {exc}", bug, hint) from None
        raise self.fail(label, exc_type.__name__, t("没有抛出异常", "no exception"), (bug_if or {}).get(None), hint)
