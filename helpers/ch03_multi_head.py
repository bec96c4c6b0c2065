"""Attention heads to look at (chapter 3): a hand-built previous-token head,
random heads, their heatmaps, and the widgets that redraw them.

The attention itself is torch's own ``nn.MultiheadAttention`` loaded with the
weights chosen here, so nothing in this module stands in for the code the
students write.
"""
from __future__ import annotations

import re
import zlib

import torch
from torch import nn

from .i18n import t
from .plots import figure_function, label, setup, show_static, show_widget, static
from .runtime import under_nbgrader

MAX_TOKENS = 16
D_TOKEN = 8                      # channels that say *which* token
D_MODEL = D_TOKEN + MAX_TOKENS   # ... plus a one-hot position
_CJK = re.compile(r"[\u3400-\u9fff]")


def tokenize(sentence: str, max_tokens: int = MAX_TOKENS) -> list[str]:
    """Words separated by spaces; a sentence without spaces that contains
    Chinese is cut into characters. At most ``max_tokens`` tokens."""
    words = sentence.split()
    if len(words) <= 1 and _CJK.search(sentence):
        words = [c for c in sentence if not c.isspace()]
    return words[:max_tokens] or ["∅"]


def embed(tokens: list[str]) -> torch.Tensor:
    """(n, D_MODEL): a fixed random vector per distinct token (the same word
    always gets the same vector) in the first D_TOKEN channels, and a one-hot
    position in the remaining MAX_TOKENS channels."""
    n = len(tokens)
    if n > MAX_TOKENS:
        raise ValueError(f"at most {MAX_TOKENS} tokens, got {n}")
    x = torch.zeros(n, D_MODEL)
    for i, tok in enumerate(tokens):
        g = torch.Generator().manual_seed(zlib.crc32(tok.encode("utf-8")))
        x[i, :D_TOKEN] = torch.randn(D_TOKEN, generator=g) / D_TOKEN ** 0.5
        x[i, D_TOKEN + i] = 1.0
    return x


def previous_token_weights(sharpness: float = 12.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W_Q, W_K, W_V (each D_MODEL x D_MODEL, acting as q = x @ W_Q) chosen by hand.

    W_K copies the one-hot position p_j; W_Q maps the position p_i to
    ``sharpness`` times p_{i-1} (a shift matrix). So q_i . k_j is ``sharpness``
    exactly when j = i - 1 and 0 otherwise: after softmax, position i looks at
    the token before it. W_V copies the token channels (what gets moved)."""
    P = slice(D_TOKEN, D_MODEL)
    w_q = torch.zeros(D_MODEL, D_MODEL)
    w_k = torch.zeros(D_MODEL, D_MODEL)
    w_v = torch.zeros(D_MODEL, D_MODEL)
    scale = sharpness * D_MODEL ** 0.5             # nn.MultiheadAttention divides by sqrt(D_MODEL)
    w_q[P, P] = torch.diag(torch.full((MAX_TOKENS - 1,), scale), diagonal=-1)   # input position i -> output i-1
    w_k[P, P] = torch.eye(MAX_TOKENS)
    w_v[:D_TOKEN, :D_TOKEN] = torch.eye(D_TOKEN)
    return w_q, w_k, w_v


def random_head_weights(seed: int = 0, std: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W_Q, W_K, W_V with random entries (an untrained head)."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(D_MODEL, D_MODEL, generator=g) * std for _ in range(3))


def causal_pattern(x: torch.Tensor, w_q, w_k, w_v, n_heads: int = 1) -> torch.Tensor:
    """The causal attention weights (n_heads, n, n) of torch's nn.MultiheadAttention
    loaded with these projection matrices (x @ W layout; no biases, output
    projection = I). Like nn.Linear, the module stores each matrix transposed."""
    n, d = x.shape
    mha = nn.MultiheadAttention(d, n_heads, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([w_q.T, w_k.T, w_v.T], dim=0))
        mha.out_proj.weight.copy_(torch.eye(d))
        blocked = ~torch.ones(n, n, dtype=torch.bool).tril()
        _, w = mha(x[None], x[None], x[None], attn_mask=blocked, need_weights=True, average_attn_weights=False)
    return w[0]


def random_model_heads(x: torch.Tensor, n_heads: int = 4, seed: int = 0, std: float = 1.5) -> torch.Tensor:
    """(n_heads, n, n): the heads of one random multi-head layer on ``x``."""
    return causal_pattern(x, *random_head_weights(seed, std), n_heads=n_heads)


# ------------------------------------------------------------------ pictures

def _heatmap(ax, w, tokens, title):
    w = w.detach().cpu().numpy()
    im = ax.imshow(w, vmin=0.0, vmax=1.0, cmap="viridis")
    n = len(tokens)
    ax.set_xticks(range(n))
    upright = all(len(tok) == 1 for tok in tokens)       # single characters read best upright
    ax.set_xticklabels(tokens, rotation=0 if upright else 60, ha="center" if upright else "right", fontsize=9)
    ax.set_yticks(range(n))
    ax.set_yticklabels(tokens, fontsize=9)
    ax.set_xlabel(label("被看的 token（key）", "attended token (key)"))
    ax.set_ylabel(label("当前 token（query）", "current token (query)"))
    ax.set_title(title, fontsize=11)
    ax.grid(False)
    if n <= 8:
        for i in range(n):
            for j in range(n):
                if w[i, j] >= 0.005:
                    ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if w[i, j] > 0.6 else "white")
    return im


def _sentence(sentence, *rest) -> bool:
    """What the grader may draw a sentence figure with: a short text (and small integers)."""
    return isinstance(sentence, str) and len(sentence) <= 200 and all(isinstance(r, int) and 0 < r <= 8 for r in rest)


def previous_token_alt(sentence: str) -> str:
    """What ``previous_token_figure`` shows, in numbers."""
    tokens = tokenize(sentence)
    x = embed(tokens)
    w_prev = causal_pattern(x, *previous_token_weights())[0]
    w_rand = causal_pattern(x, *random_head_weights(seed=1))[0]
    n = len(tokens)
    on_prev = float(sum(w_prev[i, i - 1] for i in range(1, n)) / max(1, n - 1))
    top_rand = float(w_rand[1:].max(-1).values.mean()) if n > 1 else 1.0
    return t(f"两张 {n} × {n} 的注意力热力图（行是当前 token，列是被看的 token）。左：手工构造的“前一个 token”头，"
             f"每一行的权重平均有 {on_prev:.2f} 落在前一个 token 上，形成对角线下方的一条斜线。右：随机权重的头，"
             f"没有这样的规律，每行最大的权重平均只有 {top_rand:.2f}。",
             f"Two {n} × {n} attention heatmaps (rows: the current token, columns: the attended one). Left: the "
             f"hand-built previous-token head puts on average {on_prev:.2f} of each row's weight on the previous "
             f"token, a line just below the diagonal. Right: a head with random weights shows no such pattern; "
             f"each row's largest weight is {top_rand:.2f} on average.")


def heads_alt(sentence: str, n_heads: int = 4) -> str:
    """What ``heads_figure`` shows, in numbers."""
    w = random_model_heads(embed(tokenize(sentence)), n_heads=n_heads, seed=0)
    tops = [float(w[i].max(-1).values.mean()) for i in range(n_heads)]
    return t(f"{n_heads} 张注意力热力图，一个随机多头层的每个头各一张。每个头每行最大权重的平均值："
             + "，".join(f"头 {i} {v:.2f}" for i, v in enumerate(tops)) + "：同一句话，各个头看的地方不同。",
             f"{n_heads} attention heatmaps, one per head of a random multi-head layer. Each head's average "
             "largest weight per row: " + ", ".join(f"head {i} {v:.2f}" for i, v in enumerate(tops))
             + ": on the same sentence, the heads look at different places.")


@static(accepts=_sentence)
@figure_function
def previous_token_figure(sentence: str, fig=None):
    """Hand-built previous-token head beside a random head, for one sentence."""
    import matplotlib.pyplot as plt

    setup()
    tokens = tokenize(sentence)
    x = embed(tokens)
    w_prev = causal_pattern(x, *previous_token_weights())[0]
    w_rand = causal_pattern(x, *random_head_weights(seed=1))[0]
    if fig is None:
        fig = plt.figure(figsize=(11, 4.8))
    fig.clear()
    ax1, ax2 = fig.subplots(1, 2)
    _heatmap(ax1, w_prev, tokens, label("手工构造的“前一个 token”头", "hand-built previous-token head"))
    im = _heatmap(ax2, w_rand, tokens, label("随机权重的头", "a head with random weights"))
    ax2.set_ylabel("")                   # the left panel names the rows; long tokens would collide with it
    fig.colorbar(im, ax=[ax1, ax2], shrink=0.8, label=label("注意力权重", "attention weight"))
    return fig


@static(accepts=_sentence)
@figure_function
def heads_figure(sentence: str, n_heads: int = 4, head: int | None = None, seed: int = 0, fig=None):
    """The heads of a small random multi-head layer: all of them in a row, or one."""
    import matplotlib.pyplot as plt

    setup()
    tokens = tokenize(sentence)
    w = random_model_heads(embed(tokens), n_heads=n_heads, seed=seed)
    shown = range(n_heads) if head is None else [head]
    if fig is None:
        fig = plt.figure(figsize=(3.6 * len(shown) + 1, 4.2) if head is None else (6, 5))
    fig.clear()
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    for ax, i in zip(axes, shown):
        im = _heatmap(ax, w[i], tokens, label(f"头 {i}", f"head {i}"))
        if head is None and i > 0:
            ax.set_ylabel("")
            ax.set_yticklabels([])
    fig.colorbar(im, ax=list(axes), shrink=0.8)
    return fig


# ------------------------------------------------------------------ widgets

def previous_token_explorer(sentence: str) -> None:
    """A text box: type a sentence, see the hand-built previous-token head and a
    random head on it. The static figure while grading or without widgets."""
    import matplotlib.pyplot as plt

    try:
        if under_nbgrader():        # graded: the static picture, which the feedback page shows
            raise ImportError
        import ipywidgets as W
    except ImportError:
        show_static(previous_token_figure, sentence, alt=previous_token_alt(sentence))
        return None
    box = W.Text(value=sentence, description=t("句子", "sentence"), continuous_update=False,
                 layout=W.Layout(width="520px"))
    note = W.HTML(t(f"最多 {MAX_TOKENS} 个 token；英文按空格切分，中文按字切分。",
                    f"At most {MAX_TOKENS} tokens; words are split at spaces, Chinese into characters."))
    out = W.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = previous_token_figure(box.value)
            plt.show()
            plt.close(fig)

    box.observe(redraw, names="value")
    redraw()
    show_widget(W.VBox([box, note, out]), previous_token_figure(sentence), alt=previous_token_alt(sentence))


def head_explorer(sentence: str, n_heads: int = 4) -> None:
    """A head selector (and a text box) over the heads of a small random layer;
    the static figure while grading or without widgets."""
    import matplotlib.pyplot as plt

    try:
        if under_nbgrader():
            raise ImportError
        import ipywidgets as W
    except ImportError:
        show_static(heads_figure, sentence, n_heads, alt=heads_alt(sentence, n_heads))
        return None
    box = W.Text(value=sentence, description=t("句子", "sentence"), continuous_update=False,
                 layout=W.Layout(width="520px"))
    pick = W.ToggleButtons(options=[(t(f"头 {i}", f"head {i}"), i) for i in range(n_heads)], value=0,
                           description=t("头", "head"))
    out = W.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            fig = heads_figure(box.value, n_heads, head=pick.value)
            plt.show()
            plt.close(fig)

    box.observe(redraw, names="value")
    pick.observe(redraw, names="value")
    redraw()
    show_widget(W.VBox([box, pick, out]), heads_figure(sentence, n_heads), alt=heads_alt(sentence, n_heads))


# ---------------------------------------------------------------- going further: grouped-query attention

def _expand_kv(kv: torch.Tensor, h: int, h_kv: int, d_k: int) -> torch.Tensor:
    """Rows (or entries) of K then V, one group after another, repeated so that each of the h query heads
    gets its group's rows: the layout of one nn.MultiheadAttention with h heads."""
    def repeat(part):
        grouped = part.reshape(h_kv, d_k, *part.shape[1:])
        return grouped.repeat_interleave(h // h_kv, dim=0).reshape(h * d_k, *part.shape[1:])
    k, v = kv.chunk(2, dim=0)
    return torch.cat([repeat(k), repeat(v)])


def check_grouped_attention(cls) -> None:
    """The self-check of the grouped-query challenge: shape, parameter count, causality, and the
    same numbers as torch's own nn.MultiheadAttention whose K and V weights are each group's,
    repeated for the query heads of that group. Prints "not attempted" while ``cls`` is a stub."""
    from .checks import expect_close, expect_shape, expect_true, passed
    d, h = 8, 4
    try:
        cls(d, h, 2)
    except NotImplementedError:
        print(t("延伸挑战还没有做：写好 GroupedQueryAttention 之后再运行这个单元格。",
                "The challenge is not attempted yet: run this cell again once GroupedQueryAttention is written."))
        return
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, d, generator=gen)
    for h_kv in (4, 2, 1):
        m = cls(d, h, h_kv)
        d_k = d // h
        count = sum(p.numel() for p in m.parameters())
        want = 2 * (d * d + d) + 2 * h_kv * d_k * (d + 1)
        expect_true(count == want, t(f"h_kv={h_kv}：参数个数应为 {want}，实际是 {count}。",
                                     f"h_kv={h_kv}: the number of parameters should be {want}, got {count}."))
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            y = m(x)
            expect_shape(y, (2, 5, d), f"GroupedQueryAttention({d}, {h}, {h_kv})(x)")
            ref = nn.MultiheadAttention(d, h, batch_first=True)
            ref.in_proj_weight.copy_(torch.cat([m.q.weight, _expand_kv(m.kv.weight, h, h_kv, d_k)]))
            ref.in_proj_bias.copy_(torch.cat([m.q.bias, _expand_kv(m.kv.bias, h, h_kv, d_k)]))
            ref.out_proj.weight.copy_(m.proj.weight)
            ref.out_proj.bias.copy_(m.proj.bias)
            blocked = ~torch.ones(5, 5, dtype=torch.bool).tril()
            want_y = ref(x, x, x, attn_mask=blocked, need_weights=False)[0]
            expect_close(y, want_y, t(f"h_kv={h_kv}：与 nn.MultiheadAttention（每组的 K、V 重复给组里的头）比较",
                                      f"h_kv={h_kv}: compared with nn.MultiheadAttention (each group's K and V "
                                      "repeated for its heads)"))
    passed("GroupedQueryAttention")
