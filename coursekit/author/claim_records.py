"""The claims ledger's records (coursekit.author.claims): reading a record under
bench/results/ (or a copy the tests change: ``records_from``), and what a claim is.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from ..base.chapters import ROOT

RESULTS = ROOT / "bench" / "results"


class ClaimError(ValueError):
    """A placeholder names no claim, or a claim cannot be read from its record."""


@lru_cache(maxsize=None)
def _load(path: str, root: str, stamp: int = 0) -> object:
    file = Path(root) / path
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".jsonl":
        return tuple(json.loads(line) for line in text.splitlines() if line.startswith("{"))
    return json.loads(text)


_OVERRIDE: list[Path] = []


def load(path: str, root: Path | None = None) -> object:
    """A record: a JSON file, or a JSON-lines file as a tuple of its rows (comment lines dropped)."""
    root = Path(root or (_OVERRIDE[-1] if _OVERRIDE else RESULTS))
    try:
        stamp = (root / path).stat().st_mtime_ns
    except FileNotFoundError:
        stamp = 0
    return _load(path, str(root), stamp)


@contextmanager
def records_from(root: Path):
    """Read every record from ``root`` instead of bench/results (the tests change a copy)."""
    _OVERRIDE.append(Path(root))
    try:
        yield
    finally:
        _OVERRIDE.pop()
        _load.cache_clear()


def one(rows, **where) -> dict:
    """The single row whose fields equal ``where`` (a nested dict compares whole)."""
    found = [r for r in rows if all(r.get(k) == v for k, v in where.items())]
    if len(found) != 1:
        raise ClaimError(f"{len(found)} rows match {where} (want exactly one)")
    return found[0]


# ----------------------------------------------------------------- claims

Words = Callable[[object], dict]          # record -> {"zh": (...), "en": (...)}


def _none(_record) -> dict:
    return {"zh": (), "en": ()}


@dataclass(frozen=True)
class Claim:
    id: str
    record: str                            # path under bench/results/
    read: Callable[[object], float]        # the value, from the loaded record
    fmt: str                               # how the prose prints it, e.g. "{:.2f}"
    written: str                           # the value the sentence was written for
    line: Words = field(default=_none)     # conditions the citing line must state
    cell: Words = field(default=_none)     # conditions the citing cell must state
    langs: tuple[str, ...] = ("zh", "en")  # where it is cited (a number one language writes in other units)

    def value(self, root: Path | None = None) -> str:
        try:
            return self.fmt.format(self.read(load(self.record, root)))
        except (KeyError, IndexError, TypeError, FileNotFoundError) as e:
            raise ClaimError(f"claim {self.id}: cannot read it from {self.record}: {e!r}") from e

    def conditions(self, root: Path | None = None) -> tuple[dict, dict]:
        record = load(self.record, root)
        return self.line(record), self.cell(record)


def _claims(*claims: Claim) -> dict[str, Claim]:
    out = {}
    for c in claims:
        if c.id in out:
            raise ClaimError(f"claim {c.id} registered twice")
        out[c.id] = c
    return out


def header(path: str) -> str:
    """The comment lines (``# ...``) of a JSON-lines record: where and how its runs were made."""
    root = _OVERRIDE[-1] if _OVERRIDE else RESULTS
    return "\n".join(line for line in (Path(root) / path).read_text(encoding="utf-8").splitlines()
                     if line.startswith("#"))
