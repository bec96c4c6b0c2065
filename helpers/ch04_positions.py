"""Figures and the widget of chapter 4 (positions): the sinusoidal table, RoPE
frequencies before and after a base change, and one rotated pair of q and k.

Nothing here computes an encoding itself: every function takes the tables or
the rotation function the student wrote, so the pictures show their code.
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from .i18n import t
from .plots import figure_function, label, setup, show, show_widget
from .runtime import under_nbgrader

Rotate = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# ---------------------------------------------------------------- sinusoidal table

@figure_function
def sinusoid_figure(pe: torch.Tensor, dims=(6, 7, 16, 30), fig=None):
    """Left: the (n, d) table as a heatmap. Right: a few of its columns against position."""
    import matplotlib.pyplot as plt

    setup()
    pe = pe.detach().to(torch.float64).cpu()
    n, d = pe.shape
    if fig is None:
        fig = plt.figure(figsize=(12, 3.8))
    fig.clear()
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1]})
    im = ax1.imshow(pe.T.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, origin="lower",
                    interpolation="nearest")
    ax1.grid(False)
    ax1.set_xlabel(label("位置 p", "position p"))
    ax1.set_ylabel(label("维度", "dimension"))
    ax1.set_title(label(f"正弦位置编码表（n = {n}，d = {d}）", f"sinusoidal encoding table (n = {n}, d = {d})"))
    fig.colorbar(im, ax=ax1, fraction=0.04, pad=0.02)
    for j in dims:
        if j < d:
            kind = "sin" if j % 2 == 0 else "cos"
            ax2.plot(pe[:, j].numpy(), lw=1.4, label=label(f"第 {j} 维（{kind}）", f"dim {j} ({kind})"))
    ax2.set_xlabel(label("位置 p", "position p"))
    ax2.set_ylim(-1.15, 1.6)
    ax2.set_title(label("几条“刻度尺”：维度越高，波长越长", "a few 'rulers': higher dimensions, longer wavelengths"))
    ax2.legend(fontsize=8, ncol=2, loc="upper right")
    fig.tight_layout()
    return fig


def show_sinusoids(pe: torch.Tensor, dims=(6, 7, 16, 30)) -> None:
    """Draw ``sinusoid_figure``, with what it shows in words."""
    n, d = pe.shape
    shown = [j for j in dims if j < d]
    lo, hi = float(pe.min()), float(pe.max())
    alt = t(f"左：正弦位置编码表，{n} 个位置 × {d} 维，取值从 {lo:.2f} 到 {hi:.2f}，低维随位置变得快、高维变得慢。"
            f"右：第 {'、'.join(map(str, shown))} 维随位置变化的曲线，维度越高波长越长。",
            f"Left: the sinusoidal encoding table, {n} positions × {d} dimensions, values from {lo:.2f} to "
            f"{hi:.2f}; low dimensions change fast with position, high ones slowly. Right: dimensions "
            f"{', '.join(map(str, shown))} against position; the higher the dimension, the longer the wavelength.")
    show(sinusoid_figure(pe, dims), alt)


# ---------------------------------------------------------------- frequencies

@figure_function
def frequency_figure(curves: dict[str, torch.Tensor], context: int | None = None, extended: int | None = None,
                     fig=None):
    """θ_i against i (log scale) for several frequency vectors, and the
    wavelength 2π/θ_i against the trained and the extended context lengths."""
    import matplotlib.pyplot as plt

    setup()
    if fig is None:
        fig = plt.figure(figsize=(12, 3.8))
    fig.clear()
    ax1, ax2 = fig.subplots(1, 2)
    styles = ["-", "--", ":", "-."]
    for (name, theta), ls in zip(curves.items(), styles):
        theta = theta.detach().to(torch.float64).cpu()
        i = torch.arange(len(theta))
        ax1.plot(i.numpy(), theta.numpy(), ls, lw=2, label=name)
        ax2.plot(i.numpy(), (2 * math.pi / theta).numpy(), ls, lw=2, label=name)
    ax1.set_yscale("log")
    ax1.set_xlabel(label("维度对 i", "pair i"))
    ax1.set_title(label("频率 θ_i（弧度 / 位置）", "frequency θ_i (radians per position)"))
    ax1.legend(fontsize=8)
    ax2.set_yscale("log")
    ax2.set_xlabel(label("维度对 i", "pair i"))
    ax2.set_title(label("波长 2π/θ_i（多少个位置转一圈）", "wavelength 2π/θ_i (positions per full turn)"))
    for length, txt, color in ((context, label("训练长度", "trained length"), "gray"),
                               (extended, label("目标长度", "target length"), "tab:red")):
        if length:
            ax2.axhline(length, color=color, lw=1, ls="--")
            ax2.text(0, length * 1.25, f"{txt} {length}", color=color, fontsize=8)
    ax2.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def show_frequencies(curves: dict[str, torch.Tensor], context: int | None = None,
                     extended: int | None = None) -> None:
    """Draw ``frequency_figure``, with what it shows in words."""
    parts = []
    for name, theta in curves.items():
        theta = theta.detach().to(torch.float64).cpu()
        longest = 2 * math.pi / float(theta.min())
        parts.append(t(f"{name}：θ 从 {float(theta.max()):.3g} 降到 {float(theta.min()):.3g}，最长波长 {longest:,.0f} 个位置",
                       f"{name}: θ from {float(theta.max()):.3g} down to {float(theta.min()):.3g}, longest "
                       f"wavelength {longest:,.0f} positions"))
    lengths = t(f"；训练长度 {context}，目标长度 {extended}" if context else "",
                f"; trained length {context}, target length {extended}" if context else "")
    alt = t("两幅对数坐标图：左边是每对维度的频率 θ_i，右边是波长 2π/θ_i。", "Two log-scale plots: the frequency θ_i "
            "of each pair (left) and its wavelength 2π/θ_i (right). ") + t("；", "; ").join(parts) + lengths
    show(frequency_figure(curves, context, extended), alt)


# ---------------------------------------------------------------- one rotated pair

def _rot(rotate: Rotate, v, pos) -> torch.Tensor:
    x = torch.as_tensor(v, dtype=torch.float64).reshape(1, 2)
    return rotate(x, torch.tensor([pos])).reshape(2).to(torch.float64)


def rope_score(rotate: Rotate, q, k, m: int, n: int) -> float:
    """⟨R_m q, R_n k⟩ for one 2-D pair, with the rotation the student wrote."""
    return float(_rot(rotate, q, m) @ _rot(rotate, k, n))


@figure_function
def rope_pair_figure(rotate: Rotate, q, k, m: int, n: int, span: int = 12, fig=None):
    """Left: q, k and their rotations R_m q, R_n k in the complex plane.
    Right: the score as a function of n − m, with the current (m, n) marked."""
    import matplotlib.pyplot as plt

    setup()
    if fig is None:
        fig = plt.figure(figsize=(11, 4.4))
    fig.clear()
    ax1, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    q0, k0 = torch.as_tensor(q, dtype=torch.float64), torch.as_tensor(k, dtype=torch.float64)
    qm, kn = _rot(rotate, q0, m), _rot(rotate, k0, n)
    r = 1.15 * max(float(q0.norm()), float(k0.norm()))
    circle = torch.linspace(0, 2 * math.pi, 200)
    ax1.plot((r / 1.15 * torch.cos(circle)).numpy(), (r / 1.15 * torch.sin(circle)).numpy(), color="0.85", lw=1)
    for vec, color, alpha, name in ((q0, "tab:blue", 0.3, "q"), (k0, "tab:orange", 0.3, "k"),
                                    (qm, "tab:blue", 1.0, f"R_{m} q"), (kn, "tab:orange", 1.0, f"R_{n} k")):
        ax1.annotate("", xy=(float(vec[0]), float(vec[1])), xytext=(0, 0),
                     arrowprops=dict(arrowstyle="->", color=color, alpha=alpha, lw=2))
        ax1.text(float(vec[0]) * 1.08, float(vec[1]) * 1.08, name, color=color, alpha=max(alpha, 0.6), fontsize=10)
    ax1.set_xlim(-r, r)
    ax1.set_ylim(-r, r)
    ax1.set_aspect("equal")
    ax1.axhline(0, color="0.6", lw=0.8)
    ax1.axvline(0, color="0.6", lw=0.8)
    ax1.set_xlabel(label("实部（第 2i 维）", "real part (dim 2i)"))
    ax1.set_ylabel(label("虚部（第 2i+1 维）", "imaginary part (dim 2i+1)"))
    ax1.set_title(label(f"一对维度在复平面上：m = {m}，n = {n}", f"one pair in the complex plane: m = {m}, n = {n}"))

    for step, style in ((0.1, dict(ls="-", color="0.6", lw=1.2, label="q · R_(n−m) k")),
                        (1.0, dict(ls="", marker=".", color="0.35", ms=5))):
        deltas = torch.arange(-span, span + step / 2, step, dtype=torch.float64)
        rotated = rotate(k0.reshape(1, 2).expand(len(deltas), 2).clone(), deltas).to(torch.float64)
        ax2.plot(deltas.numpy(), (rotated @ q0).numpy(), **style)
    score = rope_score(rotate, q0, k0, m, n)
    ax2.plot([n - m], [score], "o", color="tab:red", ms=9, label=f"R_{m} q · R_{n} k = {score:.3f}")
    ax2.set_xlabel("n − m")
    ax2.set_ylabel(label("注意力分数", "attention score"))
    ax2.set_title(label("分数只取决于 n − m", "the score depends only on n − m"))
    lo, hi = ax2.get_ylim()
    ax2.set_ylim(lo, hi + 0.45 * (hi - lo))         # a band above the curve for the legend
    ax2.legend(fontsize=9, loc="upper center", ncol=2, framealpha=0.95)
    fig.tight_layout()
    return fig


def score_text(rotate: Rotate, q, k, m: int, n: int) -> str:
    s = rope_score(rotate, q, k, m, n)
    return t(f"m = {m}，n = {n}，n − m = {n - m}：⟨R_m q, R_n k⟩ = {s:+.4f}",
             f"m = {m}, n = {n}, n − m = {n - m}: ⟨R_m q, R_n k⟩ = {s:+.4f}")


def build_rope_explorer(rotate: Rotate, q=(1.0, 0.25), k=(0.4, 0.9), m: int = 2, n: int = 5, max_pos: int = 20):
    """The widget itself (no display): sliders m and n, a 'move together'
    checkbox, the score as text and the figure. Returns (box, controls)."""
    import ipywidgets as W
    import matplotlib.pyplot as plt

    sm = W.IntSlider(value=m, min=0, max=max_pos, description="m", continuous_update=False)
    sn = W.IntSlider(value=n, min=0, max=max_pos, description="n", continuous_update=False)
    together = W.Checkbox(value=False, description=t("m、n 一起移动", "move m and n together"))
    text = W.HTML()
    out = W.Output()
    state = {"m": m, "n": n, "busy": False}

    def redraw():
        text.value = f"<b>{score_text(rotate, q, k, sm.value, sn.value)}</b>"
        with out:
            out.clear_output(wait=True)
            fig = rope_pair_figure(rotate, q, k, sm.value, sn.value)
            plt.show()
            plt.close(fig)

    def moved(change):
        if state["busy"]:
            return
        state["busy"] = True
        try:
            if together.value:
                step = change["new"] - change["old"]
                other = sn if change["owner"] is sm else sm
                target = other.value + step
                if not other.min <= target <= other.max:      # keep the offset: undo the move
                    change["owner"].value = change["old"]
                else:
                    other.value = target
            redraw()
        finally:
            state["busy"] = False

    sm.observe(moved, names="value")
    sn.observe(moved, names="value")
    redraw()
    box = W.VBox([W.HBox([sm, sn, together]), text, out])
    return box, {"m": sm, "n": sn, "together": together, "text": text}


def rope_explorer(rotate: Rotate, q=(1.0, 0.25), k=(0.4, 0.9), m: int = 2, n: int = 5) -> None:
    """Show the RoPE widget; under grading (or without ipywidgets) its static
    picture, and the score for a few (m, n) with the same offset."""
    if under_nbgrader():
        for a in (m, m + 3):
            print(score_text(rotate, q, k, a, a + n - m))
        show_rope_pair(rotate, q, k, m, n)
        return None
    try:
        box, _ = build_rope_explorer(rotate, q, k, m, n)
    except ImportError:
        show_rope_pair(rotate, q, k, m, n)
        return None
    show_widget(box, rope_pair_figure(rotate, q, k, m, n))
    return None


def show_rope_pair(rotate: Rotate, q=(1.0, 0.25), k=(0.4, 0.9), m: int = 2, n: int = 5) -> None:
    """The static picture of the widget, with what it shows in words."""
    alt = t(f"左：复平面上的 q、k 和旋转后的 R_{m} q、R_{n} k。右：分数随 n − m 的变化，"
            f"当前 {score_text(rotate, q, k, m, n)}。",
            f"Left: q, k and their rotations R_{m} q, R_{n} k in the complex plane. Right: the score against "
            f"n − m; now {score_text(rotate, q, k, m, n)}.")
    show(rope_pair_figure(rotate, q, k, m, n), alt)


# ---------------------------------------------------------------- the visible test of exercise 4

def permutation_cases(x: torch.Tensor, xb: torch.Tensor, whole: torch.Tensor) -> list:
    """The cases exercise 4's visible test hands to ``is_permutation_equivariant``: ``(label, f, x, perm,
    kwargs)``. The right answers (and what known mistakes answer) are in the probe file; here are only the
    functions and inputs. ``x``: (5, 4); ``xb``: (2, 5, 8); ``whole``: (5, 4) whole numbers."""
    def attend(z):                        # attention with neither positions nor weights
        return torch.softmax(z @ z.transpose(-2, -1) / 2, dim=-1) @ z

    ramp = torch.arange(5.0)[:, None]     # a different number for each position
    cyc, swap, rev, first_two = (torch.tensor(p) for p in ([1, 2, 3, 4, 0], [4, 1, 2, 3, 0], [4, 3, 2, 1, 0],
                                                            [1, 0, 2, 3, 4]))
    return [
        (t("无位置的注意力，批量维 (2, 5, 8)，循环移位", "position-free attention, batch dims (2, 5, 8), a cyclic shift"),
         attend, xb, cyc, {}),
        (t("注意力加上一张位置表", "attention with a position table added"), lambda z: attend(z + ramp), xb, cyc, {}),
        (t("按位置累加 cumsum", "a running sum (cumsum) along the positions"), lambda z: z.cumsum(-2), x, swap, {}),
        (t("逐元素的 tanh", "an element-wise tanh"), torch.tanh, xb, swap, {}),
        (t("倒序 flip，perm 也是倒序", "reversing (flip), perm reverses too"), lambda z: z.flip(-2), x, rev, {}),
        (t("倒序 flip，perm 是循环移位", "reversing (flip), perm a cyclic shift"), lambda z: z.flip(-2), x, cyc, {}),
        (t("只差 1e-7 左右（舍入误差）", "differences of about 1e-7 (rounding)"),
         lambda z: attend(z) + 1e-7 * ramp, x, cyc, {}),
        (t("差恰好等于 atol（0.5，atol=0.5）", "differences of exactly atol (0.5, atol=0.5)"),
         lambda z: z + 0.5 * ramp, whole, first_two, {"atol": 0.5}),
        (t("数值约 100000，差 0.5，atol=0.25", "values near 100000, differences of 0.5, atol=0.25"),
         lambda z: z + 0.5 * ramp, 1e5 + whole, first_two, {"atol": 0.25}),
        (t("差最多 4e-4，atol=1e-3", "differences up to 4e-4, atol=1e-3"), lambda z: z + 1e-4 * ramp, x, rev,
         {"atol": 1e-3}),
        (t("差最多 8e-4，不传 atol", "differences up to 8e-4, atol not passed"), lambda z: z + 2e-4 * ramp, x, rev, {}),
        (t("差最多 8e-6，不传 atol", "differences up to 8e-6, atol not passed"), lambda z: z + 2e-6 * ramp, x, rev, {}),
    ]


def not_a_bool_key(value) -> str | None:
    """The known mistake a result that is not Python's True / False is a sign of (the grader's keys)."""
    import numpy as np
    if isinstance(value, bool):
        return None
    if isinstance(value, np.bool_) or (isinstance(value, torch.Tensor) and value.numel() == 1):
        return "perm_returns_tensor_not_bool"
    if isinstance(value, torch.Tensor):
        return "perm_elementwise_tensor"
    return None


def kind_of(value) -> str:
    """What a value is, in words a student recognises: a tensor with its shape, numpy's bool as numpy.bool."""
    from .evidence import kind
    if isinstance(value, torch.Tensor):
        return kind(value)
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
