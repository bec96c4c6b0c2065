"""Checks for the visible tests: each failure shows its evidence (what was
expected, what came out, the largest difference and where) and names a known
mistake only when the student's output is that mistake's output, in the
grader's words (helpers.probes); otherwise it says what differs and which part
of the statement to reread.

The rules an exercise states are checked here too, with the words the grader
uses: ``from_scratch`` (no library softmax / attention), ``expect_dtype``,
``expect_raises``. ``exercise`` lets Run All go past an exercise that is not
done yet (outside nbgrader only: Validate and grading still fail on it), and
turns an error raised inside the student's own code into one course message:
the exercise, the student's line, the error and the input that caused it.
A failure that names a known mistake carries its key in the output's metadata
(``{"course": {"exercise": N, "key": "bug:KEY"}}``), never on the screen.
"""
from __future__ import annotations

import contextlib
import linecache
import os
import re
import sys

import torch

from . import evidence, probes
from .evidence import Tol
from .i18n import t
from .probes import CheckFailed, NotDoneYet, diagnosis, reread_line  # noqa: F401 (the tests' names)
from .run_all import note_exercise
from .runtime import under_nbgrader


def _named(message: str, key: str | None, reread: str | None) -> CheckFailed:
    if key is not None:
        return CheckFailed(message + "\n" + diagnosis(key), key=key)
    if reread:
        return CheckFailed(message + "\n" + reread_line(reread))
    return CheckFailed(message)


def expect_shape(actual, shape, what: str, key: str | None = None) -> None:
    if not isinstance(actual, torch.Tensor):
        raise _named(t(f"{what}：应返回 torch.Tensor，实际得到{evidence.kind(actual)}。",
                       f"{what}: expected a torch.Tensor, got {evidence.kind(actual)}."), key, None)
    if tuple(actual.shape) != tuple(shape):
        raise _named(t(f"{what}：形状应为 {evidence.shape_text(shape)}，实际是 {evidence.shape_text(actual.shape)}。",
                       f"{what}: expected shape {evidence.shape_text(shape)}, got {evidence.shape_text(actual.shape)}."),
                     key, None)


def expect_close(actual, expected, what: str, atol: float = 1e-5, rtol: float = 1e-4,
                 reread: str | None = None, bugs=()) -> None:
    """Fail with the evidence unless ``actual`` matches ``expected``.

    ``bugs`` is a list of (what that mistake outputs, its key): a mistake is
    named, in the grader's words, only when ``actual`` matches its output.
    ``reread`` says which part of the statement to read again, shown when no
    mistake matched."""
    expected = torch.as_tensor(expected)
    tol = Tol(rtol, atol, 1.0)
    key = None
    for output, name in bugs:
        if evidence.same(actual, output, probes.FINGERPRINT):
            key = name
            break
    v = evidence.compare(actual, expected, tol)
    if v.problem is None:
        return
    lines = [t(f"{what}：{v.problem}。", f"{what}: {v.problem}.")]
    lines += evidence.evidence(actual, expected, v, tol)
    raise _named("\n".join(lines), key, reread)


def expect_dtype(actual, dtype, what: str, key: str | None = None) -> None:
    if not isinstance(actual, torch.Tensor) or actual.dtype != dtype:
        got = actual.dtype if isinstance(actual, torch.Tensor) else type(actual).__name__
        raise _named(t(f"{what}：dtype 应为 {dtype}，实际是 {got}。", f"{what}: expected dtype {dtype}, got {got}."),
                     key, None)


def expect_raises(fn, exc_type, what: str, reread: str | None = None, key: str | None = None):
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
    raise _named(t(f"{what}：应抛出 {exc_type.__name__}，实际是 {got}。", f"{what}: expected {exc_type.__name__}, got {got}."),
                 key, reread)


def expect_true(condition: bool, message: str, key: str | None = None, reread: str | None = None) -> None:
    """Fail with ``message`` unless ``condition``; ``key`` names the known
    mistake that a failed condition is (in the grader's words)."""
    if not condition:
        raise _named(message, key, reread)


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


FORBIDDEN_KEY = "verdict:forbidden-call"       # the grader's verdicts for the same (grading.protocol)
NOT_DONE_KEY = "verdict:not-implemented"


class _NotFromScratch(torch.overrides.TorchFunctionMode):
    def __init__(self, names, exercise, message=None):
        super().__init__()
        self.names, self.exercise, self.message = names, exercise, message

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.names:
            qual, module = getattr(func, "__qualname__", "") or "", getattr(func, "__module__", "") or ""
            shown = (f"torch.special.{name[len('special_'):]}" if name.startswith("special_") else
                     f"torch.nn.functional.{name}" if module.startswith("torch.nn.functional") else
                     f"Tensor.{name}" if qual.startswith(("TensorBase", "Tensor")) else f"torch.{name}")
            said = self.message.format(name=shown) if self.message else forbid_message(shown, self.exercise)
            raise CheckFailed(f"{self.exercise}: {said}", key=FORBIDDEN_KEY)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def from_scratch(names, exercise: str, message: str | None = None):
    """While the block runs, calling any of the named torch functions fails the
    test, however it was reached (torch.softmax, F.softmax, x.softmax, nn.Softmax).
    ``message`` (a template with ``{name}``) replaces "must be written from
    scratch" for a rule such as "use your own cross_entropy"."""
    with _NotFromScratch(frozenset(names), exercise, message):
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


# ------------------------------------------------------------------ an error inside the student's code

def _is_cell(filename: str, test_file: str) -> bool:
    """Is ``filename`` one of the notebook's cells (IPython names each cell's code
    after a file in one folder, or ``<ipython-input-…>``)?"""
    if filename.startswith("<ipython-input-"):
        return True
    return bool(test_file) and os.path.dirname(filename) == os.path.dirname(test_file) != ""


def _student_frames(exc: BaseException, test_file: str) -> list:
    """The frames of the student's own cells the error went through, outermost first."""
    frames, tb = [], exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename != test_file and _is_cell(code.co_filename, test_file):
            frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def _short(value) -> str:
    if isinstance(value, torch.Tensor):
        return evidence.kind(value)
    if isinstance(value, torch.nn.Module):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _inputs(frame) -> str:
    """The arguments a student's function was called with, briefly."""
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    names = [x for x in code.co_varnames[:n] if x != "self"]
    shown = [f"{x} = {_short(frame.f_locals[x])}" for x in names if x in frame.f_locals]
    return t("，", ", ").join(shown)


def error_message(number: int, name: str, exc: Exception, test_file: str) -> CheckFailed:
    """An error raised inside the student's code, as one course message: the
    exercise, the student's line, the error and the input that caused it."""
    frames = _student_frames(exc, test_file)
    error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}".rstrip(": ")
    head = t(f"练习 {number}（{name}）", f"exercise {number} ({name})")
    if not frames:                         # raised by the test itself, on what the student's code returned
        line = ""
        msg = t(f"{head}：测试没法检查你的代码返回的东西（{error}）。对照题目看看它返回的类型和形状。",
                f"{head}: the test could not check what your code returned ({error}). Compare the type and "
                "shape of what it returns with the statement.")
    else:
        outer, (inner, lineno) = frames[0][0], frames[-1]
        line = linecache.getline(inner.f_code.co_filename, lineno).strip()
        fn = inner.f_code.co_qualname.rsplit("<locals>.", 1)[-1] if hasattr(inner.f_code, "co_qualname") else \
            inner.f_code.co_name
        where = t(f"{fn} 的第 {lineno} 行", f"line {lineno} of {fn}")
        called = outer.f_code.co_qualname.rsplit("<locals>.", 1)[-1] if hasattr(outer.f_code, "co_qualname") \
            else outer.f_code.co_name
        msg = t(f"{head}：你的代码在 {where}（{line}）抛出了 {error}；输入：{called}({_inputs(outer)})",
                f"{head}: your code raised {error} at {where} ({line}); input: {called}({_inputs(outer)})")
    key = probes.error_key(exc, line, re.findall(r"[A-Za-z_]\w*", name))
    return CheckFailed(msg + ("\n" + diagnosis(key) if key else ""), key=None if key is None else key)


def _report(number: int, key: str | None) -> None:
    """Leave the failure's key in the output's metadata, for the course's tools
    (never shown: the output has no visible content)."""
    try:
        from IPython import get_ipython
        from IPython.display import publish_display_data
    except ImportError:
        return
    if get_ipython() is None:
        return
    publish_display_data({"text/plain": ""}, metadata={"course": {"exercise": number, "key": key}})


@contextlib.contextmanager
def exercise(number: int, name: str):
    """Around a visible test of exercise ``number`` (the function(s) ``name``).

    An answer that still raises NotImplementedError prints "not done yet:
    exercise N" so Run All goes on; under nbgrader (Validate, grading) the test
    still fails, with that line as its message. An error raised inside the
    student's code becomes one course message. A failure in a test whose
    function uses an earlier exercise that did not pass its own test says so.
    """
    note_exercise(number, name)
    names = tuple(re.findall(r"[A-Za-z_]\w*", name))
    _NAMES[number] = names
    cell = sys._getframe(2)                       # the cell (frames: here, __enter__, the cell)
    space, test_file = cell.f_globals, cell.f_code.co_filename
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
            _report(number, NOT_DONE_KEY)
            raise NotDoneYet(line.lstrip("… ")) from None
        print(line + t("完成后重新运行这个单元格。", " Run this cell again once it is done."))
    except CheckFailed as exc:
        _OUTCOME[number] = "failed"
        found = _unfinished_earlier(number, names, space)
        if found:
            exc.args = (f"{exc}\n{earlier_note(found)}",)
        _report(number, exc.key)
        raise
    except Exception as exc:  # noqa: BLE001 - the student's code raised: say where, in the course's words
        _OUTCOME[number] = "failed"
        failure = error_message(number, name, exc, test_file)
        found = _unfinished_earlier(number, names, space)
        if found:
            failure.args = (f"{failure}\n{earlier_note(found)}",)
        _report(number, failure.key)
        raise failure from None
    else:
        _OUTCOME[number] = "passed"
