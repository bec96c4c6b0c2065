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


D_K_CHOICES = (4, 8, 16, 32, 64, 128, 256, 512, 1024)


def scaling_figure(d_k: int, fig=None):
    """Three panels for one d_k: the spread of q.k, one softmax row, and how
    much gradient softmax lets through, each raw vs divided by sqrt(d_k)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from . import scaling

    setup()
    if fig is None:
        fig = plt.figure(figsize=(13, 3.6))
    fig.clear()
    ax1, ax2, ax3 = fig.subplots(1, 3)
    raw = scaling.dot_samples(d_k)
    scaled = raw / np.sqrt(d_k)
    lim = max(4.0, 4 * np.sqrt(d_k))
    bins = np.linspace(-lim, lim, 81)
    ax1.hist(raw, bins=bins, alpha=0.6, density=True,
             label=label(f"q·k（标准差 {raw.std():.1f}）", f"q·k (std {raw.std():.1f})"))
    ax1.hist(scaled, bins=bins, alpha=0.6, density=True,
             label=label(f"q·k/√d_k（标准差 {scaled.std():.2f}）", f"q·k/√d_k (std {scaled.std():.2f})"))
    ax1.set_title(label(f"分数分布，d_k = {d_k}", f"score distribution, d_k = {d_k}"))
    ax1.set_xlabel(label("分数", "score"))
    ax1.legend(fontsize=8, loc="upper left")

    idx = np.arange(16)
    ax2.bar(idx - 0.2, scaling.weight_row(d_k), width=0.4, label=label("不缩放", "raw"))
    ax2.bar(idx + 0.2, scaling.weight_row(d_k, scaled=True), width=0.4, label=label("除以 √d_k", "÷ √d_k"))
    ax2.set_ylim(0, 1.02)
    ax2.set_xticks(idx[::3])
    ax2.set_title(label("一行 softmax 权重（16 个 key）", "one row of softmax weights (16 keys)"))
    ax2.set_xlabel(label("key 序号", "key index"))
    ax2.legend(fontsize=8)

    ds = np.array(D_K_CHOICES)
    g_raw = [scaling.jacobian_norm(d) for d in ds]
    g_scaled = [scaling.jacobian_norm(d, scaled=True) for d in ds]
    ax3.plot(ds, g_raw, "o-", label=label("不缩放", "raw"))
    ax3.plot(ds, g_scaled, "o-", label=label("除以 √d_k", "÷ √d_k"))
    ax3.axvline(d_k, color="gray", ls="--", lw=1)
    ax3.set_xscale("log", base=2)
    ax3.set_yscale("log")
    ax3.set_title(label("softmax 梯度范数 ‖∂p/∂s‖", "softmax gradient norm ‖∂p/∂s‖"))
    ax3.set_xlabel("d_k")
    ax3.legend(fontsize=8)
    fig.tight_layout()
    return fig


def show_scaling(d_k: int = 128) -> None:
    """The static version of the d_k demo (skipped while grading)."""
    import matplotlib.pyplot as plt

    from .widgets import grading

    if grading():
        return
    scaling_figure(d_k)
    plt.show()
