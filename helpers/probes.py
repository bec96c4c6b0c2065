"""The inputs a visible test uses, the outputs it expects, and the known
mistakes it can recognise on them.

Each chapter's file ``helpers/probes/<chapter>.json`` is made by the course's
build from the grader's own references and known bugs: for every probe, its
inputs, the reference's output, and the output of each known mistake on those
inputs, with the mistake's key and its words. So a
visible test names a mistake only when the student's output *is* that
mistake's output, and names it in the grader's words with the grader's key.
The file holds outputs, never code: nothing in it answers an exercise.

    probes = Probes("ch02_causal_mask")          # the chapter's first cell
    p = probes["calculator"]
    out, weights = p.call(causal_self_attention)
    p.check((out, weights), what="causal_self_attention(x, w_q, w_k, w_v)")
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import evidence
from .evidence import Tol
from .i18n import get_language, t

DATA = Path(__file__).resolve().parent / "probes"
FINGERPRINT = Tol(1e-3, 1e-3, 1e-6)      # a student's output "is" a mistake's output within this
_CURRENT: list = []                      # the Probes of the chapter this kernel runs (the last made)


# ------------------------------------------------------------------ values in JSON

def decode(v):
    """A value as the probe file stores it: tensors, tuples and dicts tagged."""
    if isinstance(v, dict):
        if "tensor" in v:
            spec = v["tensor"]
            dtype = getattr(torch, spec["dtype"])
            data = [float(x["float"]) if isinstance(x, dict) else x for x in spec["data"]]   # nan, ±inf
            return torch.tensor(data, dtype=dtype).reshape(spec["shape"])
        if "tuple" in v:
            return tuple(decode(x) for x in v["tuple"])
        if "dict" in v:
            return {k: decode(x) for k, x in v["dict"].items()}
        if "float" in v:
            return float(v["float"])
    if isinstance(v, list):
        return [decode(x) for x in v]
    return v


def fresh(v):
    """A copy the student's function may change without changing the probe."""
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, tuple):
        return tuple(fresh(x) for x in v)
    if isinstance(v, list):
        return [fresh(x) for x in v]
    if isinstance(v, dict):
        return {k: fresh(x) for k, x in v.items()}
    return v


# ------------------------------------------------------------------ the words of a mistake

def words(key: str) -> str | None:
    """A known mistake's explanation in the notebook's language (the grader's words)."""
    for probes in reversed(_CURRENT):
        entry = probes.words.get(key)
        if entry:
            return entry.get(get_language()) or entry.get("zh")
    return None


def error_key(exc: BaseException, line: str, names=()) -> str | None:
    """The known mistake an exception raised by the student's code is a sign of
    (``names``: the functions the exercise's test is about; a sign made for one
    exercise is read only there)."""
    text, squeezed = str(exc), (line or "").replace(" ", "")
    for probes in reversed(_CURRENT):
        for hint in probes.errors:
            if hint.get("exercise") and hint["exercise"] not in names:
                continue
            if hint.get("types") and type(exc).__name__ not in hint["types"]:
                continue
            if hint.get("contains") and not any(s in text for s in hint["contains"]):
                continue
            if hint.get("line") and not any(s.replace(" ", "") in squeezed for s in hint["line"]):
                continue
            return hint["key"]
    return None


# ------------------------------------------------------------------ probes

class CheckFailed(AssertionError):
    """A visible test failed. Shown as the course's message alone: no traceback,
    no class name. ``key`` names the known mistake it saw ("bug:KEY"), if any."""

    def __init__(self, message: str = "", key: str | None = None):
        super().__init__(message)
        self.key = None if key is None else (key if ":" in key else f"bug:{key}")

    def _render_traceback_(self):  # IPython shows just the message
        return [f"\x1b[31m✗\x1b[0m {self}"]


class NotDoneYet(NotImplementedError):
    """Under nbgrader (Validate, grading): an exercise's test ran into a stub.
    Still a NotImplementedError (the cell fails as it must), shown as one line."""

    def _render_traceback_(self):
        return [f"\x1b[31m…\x1b[0m {self}"]


def diagnosis(key: str) -> str:
    """The line naming a known mistake, in the grader's words."""
    said = words(key.split(":", 1)[-1]) or key
    return t("  诊断：", "  Diagnosis: ") + said


def reread_line(where: str) -> str:
    """The line that says which part of the statement to read again."""
    return t("  再读一遍题目：", "  Reread the statement: ") + where


def _as_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, bool):
        return torch.tensor(x)
    if isinstance(x, (int, float)):
        return torch.tensor(float(x), dtype=torch.float64)
    return x


def _difference(got, out) -> float | None:
    """The largest difference between ``got`` and a mistake's output ``out`` when
    ``got`` is that output (same structure, every part within FINGERPRINT); else None."""
    if isinstance(out, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(out):
            return None
        pairs = list(zip(got, out))
    elif isinstance(got, (tuple, list)):
        return None
    else:
        pairs = [(got, out)]
    diffs = [evidence.compare(_as_tensor(a), b, FINGERPRINT) for a, b in pairs]
    if any(d.problem is not None for d in diffs):
        return None
    return max((d.largest for d in diffs), default=0.0)


def _parts(value, n: int | None):
    if n is None:
        return (value,)
    return tuple(value)


@dataclass
class Probe:
    """One call of the student's function on fixed inputs."""
    name: str
    args: tuple
    kwargs: dict
    expected: object
    parts: tuple | None
    tol: Tol
    bugs: list = field(default_factory=list)     # [(key, output)]
    state: dict | None = None                    # parameters to load into a student's module, by name

    @property
    def inputs(self) -> tuple:
        """Fresh copies of the positional inputs."""
        return fresh(self.args)

    def call(self, fn):
        """``fn(*inputs, **kwargs)`` on fresh copies (a student's function, or a module)."""
        return fn(*fresh(self.args), **fresh(self.kwargs))

    def load(self, module) -> None:
        """Copy the probe's parameters into a student's module, by name, so that
        its output can be compared with the reference's."""
        own = dict(module.named_parameters(remove_duplicate=False))   # a tied weight under each of its names
        for name, value in (self.state or {}).items():
            if name not in own:
                raise CheckFailed(t(f"{type(module).__name__} 没有名为 {name} 的参数：属性名要和题目给的一样。",
                                    f"{type(module).__name__} has no parameter named {name}: the attribute names "
                                    "must be the ones the exercise gives."))
            if tuple(own[name].shape) != tuple(value.shape):
                raise CheckFailed(t(f"{type(module).__name__} 的参数 {name} 形状应为 {evidence.shape_text(value.shape)}，"
                                    f"实际是 {evidence.shape_text(own[name].shape)}。",
                                    f"{type(module).__name__}'s parameter {name} should have shape "
                                    f"{evidence.shape_text(value.shape)}, got {evidence.shape_text(own[name].shape)}."))
            with torch.no_grad():
                own[name].copy_(value.to(own[name].dtype))

    def mistake(self, got) -> str | None:
        """The key of the known mistake whose output ``got`` is (every part alike), if any."""
        best, best_diff = None, float("inf")
        for key, out in self.bugs:
            worst = _difference(got, out)
            if worst is not None and worst < best_diff:
                best, best_diff = key, worst
        return best

    def check(self, got, what: str, reread: str | None = None, part: str | None = None) -> None:
        """Fail, with the evidence, unless ``got`` is the expected output. ``part``
        compares one part of a tuple output (``"weights"`` of ``(out, weights)``)."""
        if part is not None:
            i = self.parts.index(part)
            expected = self.expected[i]
            labelled = [(what, got, expected)]
            key = self._mistake_of_part(got, i)
        else:
            n = None if self.parts is None else len(self.parts)
            if n is not None and (not isinstance(got, (tuple, list)) or len(got) != n):
                shown = ", ".join(self.parts)
                raise CheckFailed(t(f"{what}：应返回 {n} 个值的元组 ({shown})，实际得到{evidence.kind(got)}。",
                                    f"{what}: expected a tuple of {n} values ({shown}), got {evidence.kind(got)}."),
                                  key=self.mistake(got))
            names = self.parts or (None,)
            labelled = [(what if name is None else f"{what} → {name}", g, e)
                        for name, g, e in zip(names, _parts(got, n), _parts(self.expected, n))]
            key = self.mistake(got)
        for label, g, e in labelled:
            v = evidence.compare(_as_tensor(g), e, self.tol)
            if v.problem is None:
                continue
            lines = [f"{label}：{v.problem}。" if get_language() == "zh" else f"{label}: {v.problem}."]
            lines += evidence.evidence(_as_tensor(g), e, v, self.tol)
            if evidence.as_f64(e).numel() <= evidence.WHOLE and v.where is None:
                lines += [t("  期望：", "  expected: ") + evidence.whole(e)]
            if key is not None:
                lines.append(diagnosis(key))
            elif reread:
                lines.append(reread_line(reread))
            raise CheckFailed("\n".join(line for line in lines if line), key=key)

    def _mistake_of_part(self, got, i: int) -> str | None:
        best, best_diff = None, float("inf")
        for key, out in self.bugs:
            d = evidence.compare(_as_tensor(got), out[i], FINGERPRINT)
            if d.problem is None and d.largest < best_diff:
                best, best_diff = key, d.largest
        return best


class Probes:
    """A chapter's probes, words and error signs (``helpers/probes/<chapter>.json``)."""

    def __init__(self, chapter: str, data: dict | None = None):
        if data is None:
            path = DATA / f"{chapter}.json"
            data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        self.chapter = chapter
        self.words: dict = data.get("words", {})
        self.errors: list = data.get("errors", [])
        self._raw: dict = data.get("probes", {})
        self._made: dict = {}
        _CURRENT[:] = [p for p in _CURRENT if p.chapter != chapter] + [self]

    def __getitem__(self, name: str) -> Probe:
        if name not in self._made:
            raw = self._raw[name]
            self._made[name] = Probe(
                name, tuple(decode(raw.get("args", []))), decode(raw.get("kwargs", {})), decode(raw["expected"]),
                tuple(raw["parts"]) if raw.get("parts") else None, Tol(*raw.get("tol", (1e-4, 1e-5, 1.0))),
                [(b["key"], decode(b["out"])) for b in raw.get("bugs", [])],
                decode(raw["state"]) if raw.get("state") else None)
        return self._made[name]

    def __contains__(self, name: str) -> bool:
        return name in self._raw

    def names(self) -> list[str]:
        return list(self._raw)
