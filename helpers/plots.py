"""Plot helpers: one place for figure style and for fonts that can draw Chinese."""
from __future__ import annotations

from functools import lru_cache

import matplotlib
from matplotlib import font_manager

from .i18n import get_language

_CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
              "PingFang SC", "Heiti SC", "Microsoft YaHei", "SimHei", "Arial Unicode MS")


@lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The first installed font that has Chinese glyphs, or None."""
    names = {f.name for f in font_manager.fontManager.ttflist}
    for name in _CJK_FONTS:
        if name in names:
            return name
    return None


def setup() -> None:
    """Figure defaults for the course."""
    matplotlib.rcParams.update({
        "figure.dpi": 100,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.unicode_minus": False,
    })
    font = cjk_font()
    if font:
        matplotlib.rcParams["font.sans-serif"] = [font, "DejaVu Sans"]


def label(zh: str, en: str) -> str:
    """Figure text in the notebook's language; English when no Chinese font is
    installed (so a student never sees empty boxes)."""
    if get_language() == "zh" and cjk_font():
        return zh
    return en
