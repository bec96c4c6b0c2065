"""The machinery of hidden tests: call a student's function safely, compare in
float64 against an independent reference, and when the answer is wrong, name
the most likely known bug.

This package is grading-only: it is never part of the student pack.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from helpers.i18n import t

from . import guard, protocol


class GradingFailure(AssertionError):
    """A hidden test failed. IPython shows only this message, not the test code."""

    def _render_traceback_(self):
        return [f"\x1b[31m✗\x1b[0m {self}"]


class ForbiddenCall(RuntimeError):
    """A 'from scratch' exercise called the library function it must replace."""


KNOWN: dict = {}      # (module, key) -> every Bug made so far: the words the visible tests take (helpers/probes)


def _importing(frame) -> bool:
    """Whether ``frame`` runs while its module is being imported: the module's own top level is
    on the stack. A Bug made by a check as it runs (in a test process that already graded
    something) is not one of the words the build collects."""
    name = frame.f_globals.get("__name__")
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == name:
            return True
        frame = frame.f_back
    return False


@dataclass(frozen=True)
class Bug:
    """A realistic wrong answer: a stable key (used in class reports), its
    explanation in both languages, and an implementation that behaves like it."""
    key: str
    zh: str
    en: str
    impl: Callable[..., Any] | None = field(default=None, compare=False)

    def __post_init__(self):
        if not protocol.TOKEN_RE.fullmatch(protocol.bug_token(self.key)):   # the grader could not read it back
            raise ValueError(f"a bug's key is letters, digits, '_' and '-': {self.key!r}")
        maker = sys._getframe(2)
        if _importing(maker):       # by the module that made it, while it is imported (not a Bug a check makes later)
            KNOWN.setdefault((maker.f_globals.get("__name__"), self.key), self)

    def describe(self) -> str:
        """The explanation, led by the bug's token (the class report counts those)."""
        return f"{protocol.bug_token(self.key)} " + t(self.zh, self.en)


@dataclass(frozen=True)
class Raises:
    """A sign, in an error the student's code raised, of a known mistake: its
    type's name is one of ``types``, its message holds one of ``contains``, the
    student's failing line (spaces ignored) one of ``line`` (each: any, when
    empty). Used as a hint predicate by ``call`` and shipped, as data, to the
    visible tests (helpers/probes)."""
    contains: tuple = ()
    types: tuple = ()
    line: tuple = ()

    def __call__(self, exc: BaseException, line: str) -> bool:
        if self.types and type(exc).__name__ not in self.types:
            return False
        if self.contains and not any(s in str(exc) for s in self.contains):
            return False
        squeezed = (line or "").replace(" ", "")
        return not self.line or any(s.replace(" ", "") in squeezed for s in self.line)


# ----------------------------------------------------------------- comparing

def as_f64(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64)
    return torch.as_tensor(x, dtype=torch.float64)


def close(a, b, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Same shape, same nan/inf pattern, and close elsewhere."""
    try:
        a, b = as_f64(a), as_f64(b)
    except Exception:
        return False
    if a.shape != b.shape:
        return False
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb):
        return False
    if not torch.equal(a[~fa].nan_to_num(), b[~fb].nan_to_num()):
        return False
    diff = (a[fa] - b[fb]).abs()
    return bool((diff <= atol + rtol * b[fb].abs()).all())


def show(x, n: int = 6) -> str:
    """A short printable view of a tensor (first values, shape)."""
    if isinstance(x, torch.Tensor):
        flat = as_f64(x).flatten()
        vals = ", ".join(f"{v:.4g}" for v in flat[:n].tolist())
        more = ", …" if flat.numel() > n else ""
        return f"shape {tuple(x.shape)}, [{vals}{more}]"
    if isinstance(x, float):
        return f"{x:.6g}"
    return repr(x)[:200]


# ---------------------------------------------------------------- calling

def _student_line(exc: BaseException) -> str | None:
    """The last line of the traceback that is the student's own code."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename or ""
        if "site-packages" in name or "/grading/" in name or "/lib/python" in name:
            continue
        return (frame.line or "").strip() or None
    return None


def call(fn: Callable, *args, what: str, hints=(), **kwargs):
    """Run the student's function; turn any exception into a readable failure.

    ``hints`` is a list of (predicate(exc, line) -> bool, Bug): when the
    student's code raises, the first matching bug is named. While the student's
    code runs, a profile hook notes any call into the grading modules (whose
    references would otherwise stand in for an answer)."""
    if not callable(fn):
        raise GradingFailure(t(f"{what}：没有找到可以调用的函数。", f"{what}: there is no function to call."))
    ensure_untampered(what)
    borrowed: list[str] = []

    def hook(frame, event, arg):
        if (event == "call" and guard.is_grading_code(frame.f_code) and frame.f_code not in _ALLOWED_INSIDE
                and not inside_stand_in()):
            borrowed.append(frame.f_code.co_name)

    previous = sys.getprofile()
    error = None
    guard._set_hook(hook)
    sys.setprofile(hook)
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 (reported below, with the student's line)
        error = exc
    finally:
        sys.setprofile(previous)
        guard._set_hook(None)
    if borrowed:
        raise GradingFailure(t(f"{what}：你的代码调用了评分模块里的函数（{borrowed[0]}）。答案必须是你自己的实现。",
                               f"{what}: your code calls a function of the grading module ({borrowed[0]}). "
                               "The answer must be your own implementation.")
                             + " " + protocol.verdict_token(protocol.GRADING_MODULE))
    if error is None:
        return result
    if isinstance(error, ForbiddenCall):
        raise GradingFailure(f"{what}: {error} " + protocol.verdict_token(protocol.FORBIDDEN)) from None
    if isinstance(error, NotImplementedError):
        raise GradingFailure(t(f"{what}：还没有实现（仍然是 raise NotImplementedError()）。",
                               f"{what}: not implemented yet (still raise NotImplementedError()).")
                             + " " + protocol.verdict_token(protocol.NOT_IMPLEMENTED)) from None
    if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: let them through
        raise error
    line = _student_line(error)
    where = t(f"\n  出错的一行：{line}", f"\n  failing line: {line}") if line else ""
    msg = t(f"{what}：你的代码抛出了 {type(error).__name__}: {error}{where}",
            f"{what}: your code raised {type(error).__name__}: {error}{where}")
    for predicate, bug in hints:
        try:
            hit = predicate(error, line or "")
        except Exception:
            hit = False
        if hit:
            msg += "\n" + t("  诊断：", "  Diagnosis: ") + bug.describe()
            break
    raise GradingFailure(msg) from None


def ensure_untampered(what: str) -> None:
    """Fail when code run earlier replaced something the checks rely on."""
    touched = guard.changed()
    if touched:
        shown = ", ".join(touched[:4]) + (" …" if len(touched) > 4 else "")
        raise GradingFailure(t(f"{what}：检测到篡改——之前运行的代码替换了评分依赖的函数（{shown}）。这一项不得分。",
                               f"{what}: tampering detected — code run earlier replaced functions the checks rely on "
                               f"({shown}). No points for this check.")
                             + " " + protocol.verdict_token(protocol.TAMPERING))


def diagnose(student_out, bugs: list[Bug], *args, expected=None, match=close, **kwargs) -> Bug | None:
    """The first known bug whose output equals the student's on these inputs
    (bugs that give the right answer on these inputs are skipped)."""
    for bug in bugs:
        if bug.impl is None:
            continue
        try:
            with torch.no_grad():
                bug_out = bug.impl(*args, **kwargs)
        except Exception:
            continue
        if expected is not None and match(expected, bug_out):
            continue
        if match(student_out, bug_out):
            return bug
    return None


def failure(what: str, expected: str, got: str, bug: Bug | None = None, hint: str | None = None):
    lines = [f"{what}",
             t(f"  期望：{expected}", f"  expected: {expected}"),
             t(f"  实际：{got}", f"  got:      {got}")]
    if bug is not None:
        lines.append(t("  诊断：", "  Diagnosis: ") + bug.describe())
    elif hint:
        lines.append(t("  提示：", "  Hint: ") + hint)
    return GradingFailure("\n".join(lines))


def expect_autograd(out, what: str) -> None:
    """Fail unless ``out`` is a tensor still connected to autograd."""
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise GradingFailure(t(f"{what}：输出断开了计算图（用了 .detach()、.item() 或 numpy？），梯度无法传回。",
                               f"{what}: the output is cut off from autograd (.detach(), .item() or numpy?), "
                               "so no gradient can flow back."))


def passed(what: str, n_checks: int) -> None:
    """Report a passed check (and, under the grading pipeline, seal it)."""
    ensure_untampered(what)
    caller = sys._getframe(1).f_code
    token = guard.seal(caller.co_name, caller)
    done = (t(f"✓ {what}：隐藏检查通过", f"✓ {what}: hidden check passed") if n_checks == 1 else
            t(f"✓ {what}：{n_checks} 项隐藏检查全部通过", f"✓ {what}: all {n_checks} hidden checks passed"))
    print(done + (f" {token}" if token else ""))


# ------------------------------------------------------------- stand-ins

def _stand_in_machinery():
    """A correct version of an earlier exercise, put in the student's namespace
    while a later exercise that uses it is checked (``cases.on_its_own``).

    Its calls are the grader's own: while one runs, the check neither counts a
    call into the grading modules against the student nor forbids the library
    functions the later exercise may not call. Which stand-ins are running is
    private state of this closure, and a stand-in counts only while the check
    that installed it is on (``retire`` ends that), so a student's code cannot
    keep one of its own to borrow the grader's rights later."""
    running: list = []

    def counted(fn, live):
        @functools.wraps(fn)
        def stand_in(*args, **kwargs):
            if not live[0]:
                return fn(*args, **kwargs)
            running.append(fn)
            try:
                return fn(*args, **kwargs)
            finally:
                running.pop()
        return stand_in

    def make(reference):
        """(the stand-in, retire): a function is wrapped; a class (an nn.Module,
        say) becomes a subclass whose own methods are wrapped."""
        live = [True]
        if isinstance(reference, type):
            members = {name: counted(member, live) for name, member in vars(reference).items()
                       if inspect.isfunction(member)}
            members.update(__module__=reference.__module__, __qualname__=reference.__qualname__)
            obj = type(reference.__name__, (reference,), members)
        else:
            obj = counted(reference, live)

        def retire() -> None:
            live[0] = False
        return obj, retire

    def inside() -> bool:
        return bool(running)

    return make, inside


stand_in, inside_stand_in = _stand_in_machinery()
del _stand_in_machinery


# ------------------------------------------------------------- forbidding

def _forbid_message(name: str, exercise: str) -> str:
    return t(f"{exercise} 要求从零实现，不能调用 {name}。请只用基本张量运算（exp、sum、max、矩阵乘……）。",
             f"{exercise} must be written from scratch: calling {name} is not allowed. "
             f"Use basic tensor operations (exp, sum, max, matmul, ...).")


SOFTMAX_FAMILY = frozenset({"softmax", "log_softmax", "_softmax", "_log_softmax", "_softmax_backward_data",
                            "special_softmax", "special_log_softmax"})
ATTENTION_FAMILY = frozenset({"scaled_dot_product_attention", "multi_head_attention_forward",
                              "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention_for_cpu",
                              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                              "_fused_sdp_choice"})
LAYER_NORM_FAMILY = frozenset({"layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm"})

# ch01's and ch02's attention keep the inputs' dtype in both outputs: one mistake, named alike in both chapters
B_WEIGHTS_DTYPE = Bug("attention_weights_dtype_changed",
                      "注意力权重的 dtype 和输入不同（例如分数先 .float() 再 softmax，或者只把 out 转回了原来的 dtype）："
                      "题目要求 weights 和 out 都保持输入的 dtype，float64 进，float64 出。",
                      "the attention weights do not keep the inputs' dtype (the scores cast with .float() before softmax, "
                      "or only out cast back): the exercise keeps the dtype of both weights and out, float64 in, "
                      "float64 out.")


class _ForbidFunctions(torch.overrides.TorchFunctionMode):
    def __init__(self, names, exercise, message=None):
        super().__init__()
        self.names, self.exercise, self.message = names, exercise, message

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.names and not inside_stand_in():
            qual = getattr(func, "__qualname__", "") or ""
            module = getattr(func, "__module__", "") or ""
            if name.startswith("special_"):
                shown = f"torch.special.{name[len('special_'):]}"
            elif module.startswith("torch.nn.functional"):
                shown = f"torch.nn.functional.{name}"
            elif qual.startswith(("TensorBase", "Tensor")):
                shown = f"Tensor.{name}"
            elif name.startswith("special_"):
                shown = f"torch.special.{name[len('special_'):]}"
            else:
                shown = f"torch.{name}"
            if self.message is not None:           # a str.format template: no grading code runs here
                raise ForbiddenCall(self.message.format(name=shown))
            raise ForbiddenCall(_forbid_message(shown, self.exercise))
        return func(*args, **(kwargs or {}))


_ALLOWED_INSIDE = frozenset({_ForbidFunctions.__torch_function__.__code__, _forbid_message.__code__,
                             inside_stand_in.__code__})


@contextlib.contextmanager
def forbidden(names, exercise: str, message: str | None = None):
    """While the block runs, any call into the named torch functions raises
    ForbiddenCall, however the student reached it (torch.softmax, F.softmax,
    x.softmax, nn.Softmax, an alias imported under another name): the check
    sits in torch's __torch_function__ dispatch, not on the names.

    ``message``: what the student reads instead of "must be written from
    scratch" (a template with ``{name}``, in the language already chosen), for
    a rule such as "compute the loss with your own cross_entropy"."""
    with _ForbidFunctions(set(names), exercise, message):
        yield


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
