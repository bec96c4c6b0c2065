"""The notebook's language (Simplified Chinese by default, or English).

Each chapter sets it in its first code cell; widget labels, plot labels and
check messages follow it.
"""
from __future__ import annotations

LANGS = ("zh", "en")
_current = "zh"


def set_language(lang: str) -> None:
    global _current
    if lang not in LANGS:
        raise ValueError(f"language must be one of {LANGS}, not {lang!r}")
    _current = lang


def get_language() -> str:
    return _current


def t(zh: str, en: str) -> str:
    """Pick the string for the current language."""
    return zh if _current == "zh" else en
