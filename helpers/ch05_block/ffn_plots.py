"""ch05 figures about the feed-forward network: the activation functions
(ReLU, GELU, SiLU) and the three matrices of SwiGLU next to the classic FFN."""
from __future__ import annotations

import math

import torch

from ..plots import figure_function, label, setup


def activations(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """ReLU, GELU (exact), GELU (tanh approximation) and SiLU of ``x``."""
    return {
        "ReLU": torch.relu(x),
        "GELU": 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
        "GELU (tanh)": 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
        "SiLU": x * torch.sigmoid(x),
    }


@figure_function
def activation_figure():
    """Left: the three activations on [-4, 3]. Right: a close-up of the
    negative side, where they differ."""
    import matplotlib.pyplot as plt

    setup()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = torch.linspace(-4, 3, 701)
    acts = activations(x)
    styles = {"ReLU": dict(color="gray", ls="--"), "GELU": dict(color="C0", lw=2.2), "SiLU": dict(color="C3")}
    for name, kw in styles.items():
        ax1.plot(x, acts[name], label=name, **kw)
        ax2.plot(x, acts[name], label=name, **kw)
    ax1.set_title(label("三种激活函数", "three activation functions"))
    ax1.set_xlabel("x")
    ax1.legend()
    ax2.set_xlim(-4, 1)
    ax2.set_ylim(-0.35, 0.6)
    ax2.set_title(label("放大负半轴：GELU、SiLU 光滑，且略微取负值", "negative side: GELU and SiLU are smooth and dip below 0"))
    ax2.set_xlabel("x")
    i = int(acts["GELU"].argmin())
    ax2.annotate(f"GELU min ≈ {acts['GELU'][i]:.3f}", (x[i], acts["GELU"][i]), (-3.8, -0.3),
                 arrowprops=dict(arrowstyle="->", color="C0"), color="C0")
    fig.tight_layout()
    return fig


def swiglu_sizes(d: int, d_ff: int | None = None) -> dict[str, tuple[int, int]]:
    """Weight shapes (out, in) of the classic FFN and of SwiGLU; by default
    SwiGLU's d_ff = 8d/3 so that both have the same number of weights."""
    d_ff = d_ff if d_ff is not None else int(8 * d / 3)
    return {"W1": (4 * d, d), "W2": (d, 4 * d),
            "W_gate": (d_ff, d), "W_up": (d_ff, d), "W_down": (d, d_ff)}


@figure_function
def swiglu_figure(d: int = 4096, d_ff: int = 11008):
    """The classic FFN's two matrices and SwiGLU's three, drawn to scale,
    with the formula and the weight counts."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    setup()
    sizes = swiglu_sizes(d, d_ff)
    fig, ax = plt.subplots(figsize=(11, 4.2))
    ax.set_axis_off()
    scale = 1.0 / (4 * d)            # the longest side is 1 unit
    gap = 0.12

    def draw(x0, name, color, text):
        cols, rows = sizes[name]     # sizes are nn.Linear's (out, in); drawn as W in x @ W: (in, out)
        w, h = cols * scale, rows * scale
        ax.add_patch(Rectangle((x0, 0), w, h, facecolor=color, alpha=0.55, edgecolor="k"))
        ax.text(x0 + w / 2, h + 0.04, f"{text}\n{rows}×{cols}", ha="center", va="bottom", fontsize=9)
        return x0 + w + gap

    x = 0.0
    x = draw(x, "W1", "C0", "$W_1$ (fc)")
    x = draw(x, "W2", "C0", "$W_2$ (proj)")
    classic = 2 * 4 * d * d
    ax.text(0, -0.16, label(f"经典 FFN：GELU($xW_1$)$W_2$\n{classic / 1e6:.1f}M 个权重",
                            f"classic FFN: GELU($xW_1$)$W_2$\n{classic / 1e6:.1f}M weights"), fontsize=10, va="top")
    x += 0.35
    start = x
    x = draw(x, "W_gate", "C3", "$W_{gate}$")
    x = draw(x, "W_up", "C2", "$W_{up}$")
    x = draw(x, "W_down", "C2", "$W_{down}$")
    swi = 3 * d * d_ff
    ax.text(start, -0.16, label(f"SwiGLU：(SiLU($xW_{{gate}}$) $\\odot$ $xW_{{up}}$)$W_{{down}}$\n"
                                f"{swi / 1e6:.1f}M 个权重（d_ff = {d_ff} ≈ {d_ff / d:.2f}d）",
                                f"SwiGLU: (SiLU($xW_{{gate}}$) $\\odot$ $xW_{{up}}$)$W_{{down}}$\n"
                                f"{swi / 1e6:.1f}M weights (d_ff = {d_ff} ≈ {d_ff / d:.2f}d)"),
            fontsize=10, va="top")
    ax.set_xlim(-0.05, x)
    ax.set_ylim(-0.45, 1.25)
    ax.set_aspect("equal")
    ax.set_title(label(f"d = {d}：两个矩阵 vs 三个矩阵（按比例画）", f"d = {d}: two matrices vs three (drawn to scale)"))
    fig.tight_layout()
    return fig
