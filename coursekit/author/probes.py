"""Build ``helpers/probes/<chapter>.json``: what a chapter's visible tests know.

For each probe a chapter's grading module declares (``grading/<chapter>.py``,
``probes()``), the file holds its inputs, the reference's output and, for each
known bug, the bug's output on the same inputs, with the bug's key; beside
them, the words of every known bug of the chapter (zh and en) and the signs of
known mistakes in an error message (``ERRORS``: a list of ``(Raises(...), Bug)``,
or a dict from the name of the function under test to such a list, so that a
sign is read only in that exercise's test). Outputs and words, no code:
the student's notebook reads it (``helpers.probes``) to name a mistake only
when the student's output is that mistake's, in the grader's words.

A bug is left out of a probe when its output there equals the expected one
(the probe cannot see it) or another bug's (the probe cannot tell them apart:
naming either could name the wrong one).

A grading module may also declare ``stored_values()`` (name -> a number its hidden checks
compare with, each costly to compute in every graded kernel): ``write_stored`` keeps them in
``grading/<chapter>_stored.py`` with the torch version they were computed with, and the
module uses them only where that is the version it runs with.

    python course.py source          # writes source/, helpers/probes/ and grading/*_stored.py
"""
from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = ROOT / "helpers" / "probes"
SHARED_MODULES = ("grading.core", "grading.cases")     # bugs every chapter may name


class ProbeError(ValueError):
    """A probe that cannot be evaluated (its reference fails, or returns nothing a test can compare)."""


# ------------------------------------------------------------------ values

def _float(v: float, single: bool):
    if math.isnan(v):
        return {"float": "nan"}
    if math.isinf(v):
        return {"float": "inf" if v > 0 else "-inf"}
    if single:
        import numpy as np
        return float(str(np.float32(v)))
    return v


def encode(v, single: bool = False):
    """A value as JSON: tensors, tuples and dicts tagged; ``single`` stores floats at float32 precision."""
    if isinstance(v, torch.Tensor):
        x = v.detach().cpu()
        if x.is_floating_point() and single and x.dtype == torch.float64:
            x = x.to(torch.float32)
        floating = x.is_floating_point()
        flat = x.flatten().tolist()
        data = [_float(f, x.dtype != torch.float64) for f in flat] if floating else flat
        return {"tensor": {"dtype": str(x.dtype).removeprefix("torch."), "shape": list(x.shape), "data": data}}
    if isinstance(v, tuple):
        return {"tuple": [encode(x, single) for x in v]}
    if isinstance(v, list):
        return [encode(x, single) for x in v]
    if isinstance(v, dict):
        return {"dict": {str(k): encode(x, single) for k, x in v.items()}}
    if isinstance(v, float):
        return _float(v, single)
    if v is None or isinstance(v, (bool, int, str)):
        return v
    raise ProbeError(f"a probe value must be a tensor, number, string or a tuple/list/dict of them, not {type(v)}")


# ------------------------------------------------------------------ evaluating

def _grading_module(chapter: str):
    return importlib.import_module(f"grading.{chapter}")


def _same(a, b) -> bool:
    from helpers.evidence import compare
    from helpers.probes import FINGERPRINT, _as_tensor
    if isinstance(a, (tuple, list)) != isinstance(b, (tuple, list)):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return compare(_as_tensor(a), _as_tensor(b), FINGERPRINT).problem is None
    except Exception:  # noqa: BLE001 - values that cannot be compared are not the same
        return False


def evaluate(probe, notes: list | None = None) -> dict:
    """One probe as its JSON entry; ``notes`` gets a line naming the known bugs
    the probe leaves out, and why."""
    with torch.no_grad():
        try:
            expected = probe.expected_output()
        except Exception as exc:  # noqa: BLE001
            raise ProbeError(f"probe {probe.name!r}: the reference raised {type(exc).__name__}: {exc}") from exc
        outputs, left = [], {"no impl": [], "raised": [], "same as the right answer": []}
        for bug in probe.bugs:
            if bug.impl is None and probe.run_bug is None:
                left["no impl"].append(bug.key)
                continue
            try:
                out = probe.bug_output(bug)
            except Exception:  # noqa: BLE001 - a bug that cannot run on these inputs is not seen here
                left["raised"].append(bug.key)
                continue
            if out is None or _same(out, expected):
                left["same as the right answer"].append(bug.key)
                continue
            outputs.append((bug.key, out))
    kept = [(key, out) for key, out in outputs
            if not any(other != key and _same(out, theirs) for other, theirs in outputs)]
    left["alike, so neither is named"] = [key for key, _ in outputs if key not in dict(kept)]
    if notes is not None:
        why = "; ".join(f"{reason}: {', '.join(keys)}" for reason, keys in left.items() if keys)
        notes.append(f"probe {probe.name!r}: {len(kept)} of {len(probe.bugs)} known mistakes shown"
                     + (f" (left out, {why})" if why else ""))
    entry = {"args": encode(tuple(probe.args))["tuple"], "expected": encode(expected),
             "tol": [probe.tol.rtol, probe.tol.atol, probe.tol.floor],
             "bugs": [{"key": key, "out": encode(out, single=True)} for key, out in kept]}
    if probe.kwargs:
        entry["kwargs"] = encode(dict(probe.kwargs))["dict"]
    if probe.parts:
        entry["parts"] = list(probe.parts)
    if probe.state:
        entry["state"] = encode(dict(probe.state))
    return entry


def _words(chapter: str) -> dict:
    """Every known bug of the chapter (and the shared ones), by key, in both languages."""
    from grading import core
    _grading_module(chapter)
    for name in SHARED_MODULES:
        importlib.import_module(name)
    wanted = (f"grading.{chapter}",) + SHARED_MODULES
    words = {}
    for module in reversed(wanted):           # the chapter's own words win over shared ones of the same key
        for (made_in, key), bug in core.KNOWN.items():
            if made_in == module:
                words[key] = {"zh": bug.zh, "en": bug.en}
    return dict(sorted(words.items()))


def build(chapter: str, notes: list | None = None) -> dict:
    """The probe file's content for ``chapter`` (empty lists when it declares none);
    ``notes`` gets a line per probe saying which known mistakes it leaves out."""
    import torch

    from grading.core import Raises
    module = _grading_module(chapter)
    declared = getattr(module, "probes", None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # a sum's last bits depend on how it is split between threads: the same file
    try:                            # on every machine and in every process, whatever ran before
        probes = list(declared()) if callable(declared) else []
        evaluated = {p.name: evaluate(p, notes) for p in probes}
    finally:
        torch.set_num_threads(threads)
    names = [p.name for p in probes]
    if len(set(names)) != len(names):
        raise ProbeError(f"grading/{chapter}.py: two probes share a name: {sorted(n for n in names if names.count(n) > 1)}")
    declared = getattr(module, "ERRORS", [])
    scoped = declared.items() if isinstance(declared, dict) else [(None, declared)]
    errors = []
    for exercise, signs in scoped:
        for sign, bug in signs:
            if isinstance(sign, Raises):
                entry = {"key": bug.key, "types": list(sign.types), "contains": list(sign.contains),
                         "line": list(sign.line)}
                errors.append(entry if exercise is None else {**entry, "exercise": exercise})
    return {"chapter": chapter, "errors": errors, "probes": evaluated,
            "words": _words(chapter)}


def dumps(data: dict) -> str:
    """One probe, one error sign and one word entry per line: small diffs."""
    def one(v):
        return json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)

    def block(items, opener, closer):
        items = list(items)
        if not items:
            return opener + closer
        return opener + "\n" + ",\n".join(items) + "\n" + closer

    probes = block((f"  {one(name)}: {one(entry)}" for name, entry in data["probes"].items()), "{", " }")
    words = block((f"  {one(key)}: {one(entry)}" for key, entry in data["words"].items()), "{", " }")
    errors = block((f"  {one(e)}" for e in data["errors"]), "[", " ]")
    return (f'{{"chapter": {one(data["chapter"])},\n"errors": {errors},\n"probes": {probes},\n'
            f'"words": {words}}}\n')


def write(chapter: str, dest: Path = DATA, notes: list | None = None) -> Path:
    path = Path(dest) / f"{chapter}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(build(chapter, notes))
    json.loads(text)                      # what is written reads back
    path.write_text(text, encoding="utf-8")
    return path


# The same build on another machine: PyTorch's kernels (its vector exp, the BLAS it calls) are
# chosen by the processor, so a float32 output may move by a few units in its last place, and
# a float64 reference computed from float32 draws by about 1e-9 of itself. A probe file, or a
# stored value, is current when it differs from a fresh build by no more than that.
SAME_BUILD = 1e-5


def differences(kept, fresh, where: str = "", rel: float = SAME_BUILD) -> list[str]:
    """Where two builds (parsed JSON, or any nest of dicts, lists and numbers) differ by
    more than another machine's rounding: each number within ``rel`` of the other (relative,
    and absolute below 1); anything else equal."""
    if isinstance(kept, bool) or isinstance(fresh, bool):
        return [] if type(kept) is type(fresh) and kept == fresh else [where or "/"]
    if isinstance(kept, (int, float)) and isinstance(fresh, (int, float)):
        if kept == fresh or (math.isnan(kept) and math.isnan(fresh)):
            return []
        close = math.isfinite(kept) and math.isfinite(fresh) and abs(kept - fresh) <= rel * max(1.0, abs(kept), abs(fresh))
        return [] if close else [f"{where or '/'}: {kept!r} != {fresh!r}"]
    if isinstance(kept, dict) and isinstance(fresh, dict):
        if kept.keys() != fresh.keys():
            return [f"{where or '/'}: keys {sorted(set(kept) ^ set(fresh))}"]
        return [d for k in kept for d in differences(kept[k], fresh[k], f"{where}/{k}", rel)]
    if isinstance(kept, list) and isinstance(fresh, list):
        if len(kept) != len(fresh):
            return [f"{where or '/'}: {len(kept)} items != {len(fresh)}"]
        return [d for i, (a, b) in enumerate(zip(kept, fresh)) for d in differences(a, b, f"{where}/{i}", rel)]
    return [] if kept == fresh else [f"{where or '/'}: {kept!r} != {fresh!r}"]


# ------------------------------------------------------------------ the hidden checks' stored values

STORED = ROOT / "grading"


def stored_text(chapter: str) -> str | None:
    """The text of ``grading/<chapter>_stored.py`` (None: the chapter stores nothing): a
    Python module, not data a hidden check parses, so that it is imported, and watched by the
    guard, as the grading module itself is."""
    module = _grading_module(chapter)
    if not hasattr(module, "stored_values"):
        return None
    values = module.stored_values()
    lines = [f'"""The values grading/{chapter}.py\'s hidden checks compare with, stored by `make source`',
             "(coursekit.author.probes.write_stored): computing them took every graded kernel its time.",
             'Generated: do not edit; tests/test_sync.py proves them current."""',
             f"TORCH = {torch.__version__!r}",
             "VALUES = {"]
    for name in sorted(values):
        value = float(values[name])
        if not math.isfinite(value):
            raise ProbeError(f"{chapter}: stored value {name} is {value}")
        lines.append(f"    {name!r}: {value!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_stored(chapter: str, dest: Path = STORED) -> Path | None:
    text = stored_text(chapter)
    if text is None:
        return None
    path = Path(dest) / f"{chapter}_stored.py"
    compile(text, str(path), "exec")      # what is written imports
    path.write_text(text, encoding="utf-8")
    return path
