"""ch01_attention: the numbers, figure and widget behind the sqrt(d_k) argument
(numpy, so they never stand in for the torch code students write)."""
from __future__ import annotations

import math

import numpy as np

from .i18n import t
from .plots import figure_function, label, setup, show_static, show_widget, static
from .runtime import under_nbgrader


def dot_samples(d_k: int, n: int = 20_000, seed: int = 0) -> np.ndarray:
    """q.k for ``n`` pairs of standard-normal vectors of size ``d_k``."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d_k), dtype=np.float32)
    k = rng.standard_normal((n, d_k), dtype=np.float32)
    return np.einsum("nd,nd->n", q, k).astype(np.float64)


def _stable_weights(scores: np.ndarray) -> np.ndarray:
    z = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def weight_row(d_k: int, n_keys: int = 16, scaled: bool = False, seed: int = 1) -> np.ndarray:
    """Attention weights of one query over ``n_keys`` random keys."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(d_k)
    k = rng.standard_normal((n_keys, d_k))
    s = k @ q
    if scaled:
        s = s / math.sqrt(d_k)
    return _stable_weights(s)


def jacobian_norm(d_k: int, n_keys: int = 16, scaled: bool = False, trials: int = 200,
                  seed: int = 2) -> float:
    """Mean Frobenius norm of d softmax / d scores: how much gradient can pass."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((trials, 1, d_k))
    k = rng.standard_normal((trials, n_keys, d_k))
    s = (k @ q.transpose(0, 2, 1))[..., 0]
    if scaled:
        s = s / math.sqrt(d_k)
    p = _stable_weights(s)
    jac = np.einsum("ti,ij->tij", p, np.eye(n_keys)) - np.einsum("ti,tj->tij", p, p)
    return float(np.linalg.norm(jac, axis=(1, 2)).mean())


def saturation_ratio(d_k: int) -> float:
    """e^{s} / e^{-s} for a typical score s = sqrt(d_k): the gap softmax sees."""
    return math.exp(2 * math.sqrt(d_k))


D_K_CHOICES = (4, 8, 16, 32, 64, 128, 256, 512, 1024)


@static(accepts=lambda d_k: d_k in D_K_CHOICES)
@figure_function
def scaling_figure(d_k: int, fig=None):
    """Three panels for one d_k: the spread of q.k, one softmax row, and how
    much gradient softmax lets through, each raw vs divided by sqrt(d_k)."""
    import matplotlib.pyplot as plt
    import numpy as np

    setup()
    if fig is None:
        fig = plt.figure(figsize=(13, 3.6))
    fig.clear()
    ax1, ax2, ax3 = fig.subplots(1, 3)
    raw = dot_samples(d_k)
    scaled = raw / np.sqrt(d_k)
    lim = max(4.0, 4 * np.sqrt(d_k))
    bins = np.linspace(-lim, lim, 81)
    ax1.hist(raw, bins=bins, alpha=0.6, density=True,
             label=label(f"q·k（标准差 {raw.std():.1f}）", f"q·k (std {raw.std():.1f})"))
    ax1.hist(scaled, bins=np.linspace(-4, 4, 33), alpha=0.6, density=True, hatch="//",  # its own bins: 4 per unit
             label=label(f"q·k/√d_k（标准差 {scaled.std():.2f}）", f"q·k/√d_k (std {scaled.std():.2f})"))
    ax1.set_title(label(f"分数分布，d_k = {d_k}", f"score distribution, d_k = {d_k}"))
    ax1.set_xlabel(label("分数", "score"))
    ax1.set_ylim(0, 0.62)              # the scaled peak (about 0.4) stays inside the frame, under the legend
    ax1.legend(loc="upper right", framealpha=0.9)

    idx = np.arange(16)
    ax2.bar(idx - 0.2, weight_row(d_k), width=0.4, label=label("不缩放", "raw"))
    ax2.bar(idx + 0.2, weight_row(d_k, scaled=True), width=0.4, hatch="//", label=label("除以 √d_k", "÷ √d_k"))
    ax2.set_ylim(0, 1.3)               # room above the bars for the legend
    ax2.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax2.set_xticks(idx[::3])
    ax2.set_title(label("一行 softmax 权重（16 个 key）", "one row of softmax weights (16 keys)"))
    ax2.set_xlabel(label("key 序号", "key index"))
    ax2.legend(loc="upper center", ncol=2, framealpha=0.9)

    ds = np.array(D_K_CHOICES)
    g_raw = [jacobian_norm(d) for d in ds]
    g_scaled = [jacobian_norm(d, scaled=True) for d in ds]
    ax3.plot(ds, g_raw, "o-", label=label("不缩放", "raw"))
    ax3.plot(ds, g_scaled, "s--", label=label("除以 √d_k", "÷ √d_k"))
    ax3.axvline(d_k, color="gray", ls="--", lw=1)
    ax3.set_xscale("log", base=2)
    ax3.set_yscale("log")
    ax3.set_title(label("softmax 梯度范数 ‖∂p/∂s‖", "softmax gradient norm ‖∂p/∂s‖"))
    ax3.set_xlabel("d_k")
    ax3.legend(loc="lower left", framealpha=0.9)
    fig.tight_layout()
    return fig


def scaling_alt(d_k: int) -> str:
    """What the three panels of ``scaling_figure(d_k)`` show, in numbers."""
    raw = dot_samples(d_k)
    scaled = raw / np.sqrt(d_k)
    top_raw, top_scaled = weight_row(d_k).max(), weight_row(d_k, scaled=True).max()
    g_raw, g_scaled = jacobian_norm(d_k), jacobian_norm(d_k, scaled=True)
    return t(f"三幅图，d_k = {d_k}。左：q·k 的分布，不缩放的标准差 {raw.std():.1f}，除以 √d_k 后 {scaled.std():.2f}。"
             f"中：一个 query 对 16 个 key 的 softmax 权重，不缩放时最大的一个是 {top_raw:.2f}，缩放后最大 {top_scaled:.2f}。"
             f"右：softmax 梯度范数随 d_k 的变化，在 d_k = {d_k} 时不缩放为 {g_raw:.3f}，缩放后为 {g_scaled:.3f}。",
             f"Three panels, d_k = {d_k}. Left: the distribution of q·k, standard deviation {raw.std():.1f} raw and "
             f"{scaled.std():.2f} after dividing by √d_k. Middle: one query's softmax weights over 16 keys; the largest "
             f"is {top_raw:.2f} raw and {top_scaled:.2f} scaled. Right: the softmax gradient norm against d_k; at "
             f"d_k = {d_k} it is {g_raw:.3f} raw and {g_scaled:.3f} scaled.")


QKV_ALT = ("数据流图：词向量 X (n × d) 经过三个矩阵得到 Q = X W_Q、K = X W_K (n × d_k) 和 V = X W_V (n × d_v)；"
           "Q 和 K 得到分数 S = Q Kᵀ / √d_k (n × n)；softmax 把每一行变成和为 1 的权重 A；输出 O = A V (n × d_v)。",
           "Data-flow diagram: token vectors X (n × d) go through three matrices to Q = X W_Q, K = X W_K (n × d_k) "
           "and V = X W_V (n × d_v); Q and K give the scores S = Q Kᵀ / √d_k (n × n); softmax turns each row into "
           "weights A that sum to 1; the output is O = A V (n × d_v).")


def qkv_flow() -> None:
    """The data flow of one self-attention layer: X -> Q, K, V -> scores ->
    softmax -> weighted sum of the values."""
    show_static(qkv_flow_figure, alt=t(*QKV_ALT))


@static()
@figure_function
def qkv_flow_figure():
    """The figure of ``qkv_flow``."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    setup()
    fig, ax = plt.subplots(figsize=(12, 3.6))
    ax.set_xlim(-0.1, 11.9)
    ax.set_ylim(0.1, 3.9)
    ax.axis("off")
    boxes = {
        "x": (1.0, 2.0, label("词向量 X\n(n × d)", "token vectors X\n(n × d)"), "#e8e8e8"),
        "q": (3.4, 3.3, "Q = X W_Q\n(n × d_k)", "#cfe2f3"),
        "k": (3.4, 2.0, "K = X W_K\n(n × d_k)", "#cfe2f3"),
        "v": (3.4, 0.7, "V = X W_V\n(n × d_v)", "#d9ead3"),
        "s": (6.0, 2.65, label("分数 S = Q Kᵀ / √d_k\n(n × n)", "scores S = Q Kᵀ / √d_k\n(n × n)"), "#fff2cc"),
        "a": (8.4, 2.65, label("A = softmax(S)\n注意力权重，每行和为 1", "A = softmax(S)\nweights, each row sums to 1"),
              "#fce5cd"),
        "o": (10.8, 1.5, label("输出 O = A V\n新的词向量 (n × d_v)", "output O = A V\nnew token vectors (n × d_v)"),
              "#ead1dc"),
    }
    for x, y, text, color in boxes.values():
        ax.add_patch(FancyBboxPatch((x - 1.0, y - 0.45), 2.0, 0.9, boxstyle="round,pad=0.05",
                                    fc=color, ec="0.4"))
        ax.text(x, y, text, ha="center", va="center", fontsize=10)

    def arrow(a, b, text=None):
        (xa, ya, *_), (xb, yb, *_) = boxes[a], boxes[b]
        ax.annotate("", xy=(xb - 1.05, yb), xytext=(xa + 1.05, ya),
                    arrowprops=dict(arrowstyle="->", color="0.3", lw=1.3))
        if text:
            ax.text((xa + xb) / 2, (ya + yb) / 2 + 0.15, text, ha="center", fontsize=9, color="0.3")

    for a, b in (("x", "q"), ("x", "k"), ("x", "v"), ("q", "s"), ("k", "s"), ("s", "a"), ("a", "o"), ("v", "o")):
        arrow(a, b)
    ax.text(8.4, 3.55, label("（第 2 章：先加因果掩码）", "(chapter 2: causal mask first)"),
            ha="center", fontsize=9, color="0.35")
    ax.set_title(label("一层自注意力的数据流", "the data flow of one self-attention layer"))
    fig.tight_layout()
    return fig


def show_scaling(d_k: int = 128) -> None:
    """The static version of the d_k demo."""
    show_static(scaling_figure, d_k, alt=scaling_alt(d_k))


def dk_explorer(initial: int = 128) -> None:
    """A slider for d_k (4 ... 1024) redrawing the three panels of
    ``scaling_figure`` and the numbers of the argument."""
    import math

    import matplotlib.pyplot as plt

    def numbers(d_k: int) -> str:
        s = math.sqrt(d_k)
        return t(f"d_k = {d_k}：典型分数 ±{s:.1f}，e^{s:.1f} / e^-{s:.1f} ≈ {saturation_ratio(d_k):.2e}；"
                 f"除以 √d_k 之后典型分数 ±1，比值 e² ≈ 7.4",
                 f"d_k = {d_k}: typical score ±{s:.1f}, e^{s:.1f} / e^-{s:.1f} ≈ {saturation_ratio(d_k):.2e}; "
                 f"after dividing by √d_k the typical score is ±1 and the ratio e² ≈ 7.4")

    try:
        if under_nbgrader():        # graded: the static picture, which the feedback page shows
            raise ImportError
        import ipywidgets as W
    except ImportError:  # no widgets: the static picture still teaches
        show_static(scaling_figure, initial, alt=scaling_alt(initial))
        print(numbers(initial))
        return None

    slider = W.SelectionSlider(options=list(D_K_CHOICES), value=initial, description="d_k",
                               continuous_update=False, layout=W.Layout(width="420px"))
    text = W.HTML()
    out = W.Output()

    def redraw(*_):
        text.value = f"<b>{numbers(slider.value)}</b>"
        with out:
            out.clear_output(wait=True)
            fig = scaling_figure(slider.value)
            plt.show()
            plt.close(fig)

    slider.observe(redraw, names="value")
    redraw()
    show_widget(W.VBox([slider, text, out]), scaling_figure(initial), alt=scaling_alt(initial))
