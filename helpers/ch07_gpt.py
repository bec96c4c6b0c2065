"""Look inside a trained GPT of chapter 7: its attention weights for a
sentence, as heatmaps, with a report of recognisable heads.

The weights are recomputed (in numpy) from what each block's attention
module receives: a forward hook captures the input of ``block.attn`` and its
``c_attn`` projection gives q and k. So the model may use a fused attention
kernel that never forms the weights itself.
"""
from __future__ import annotations

import numpy as np
import torch

from .i18n import t
from .plots import figure_function


def _vocabulary(tokenizer) -> set[str]:
    """The characters a tokenizer knows, from what exercise 1 asks for (vocab_size and decode)."""
    try:
        return set(tokenizer.decode(list(range(tokenizer.vocab_size))))
    except Exception:  # noqa: BLE001 - a tokenizer without them: the sentence is taken as it is
        return set()


def _clean(tokenizer, sentence: str, n_ctx: int) -> str:
    known = _vocabulary(tokenizer)
    if known:
        dropped = sorted({c for c in sentence if c not in known})
        if dropped:
            print(t(f"（词表里没有这些字符，已去掉：{''.join(dropped)!r}）",
                    f"(characters not in the vocabulary were removed: {''.join(dropped)!r})"))
        sentence = "".join(c for c in sentence if c in known)
    return sentence[-n_ctx:]


def _softmax_causal(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """(h, T, d_k) x2 -> (h, T, T) causal attention weights."""
    T, d_k = q.shape[-2], q.shape[-1]
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def attention_weights(model, idx: torch.Tensor) -> np.ndarray:
    """Attention weights of every layer and head for one sequence ``idx``
    of shape (1, T): an array (n_layer, n_head, T, T)."""
    inputs: list[torch.Tensor] = []
    hooks = []
    for block in model.blocks:
        attn = getattr(block, "attn", None)
        if attn is None or not hasattr(attn, "c_attn"):
            raise AttributeError(t("每个块需要 attn.c_attn（练习 4 的结构）才能画注意力热力图。",
                                   "each block needs attn.c_attn (the layout of exercise 4) to draw attention maps."))
        hooks.append(attn.register_forward_pre_hook(lambda mod, args: inputs.append(args[0].detach())))
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for h in hooks:
            h.remove()
        model.train(mode)
    maps = []
    for block, x in zip(model.blocks, inputs):
        attn = block.attn
        with torch.no_grad():
            qkv = attn.c_attn(x)[0].double().numpy()              # (T, 3d)
        d = qkv.shape[-1] // 3
        h = attn.n_head
        q = qkv[:, :d].reshape(-1, h, d // h).transpose(1, 0, 2)  # (h, T, d_k)
        k = qkv[:, d:2 * d].reshape(-1, h, d // h).transpose(1, 0, 2)
        maps.append(_softmax_causal(q, k))
    return np.stack(maps)


def sentence_maps(model, tokenizer, sentence: str) -> tuple[str, np.ndarray]:
    """The sentence as the model sees it (unknown characters removed, cropped
    to n_ctx) and its attention weights (n_layer, n_head, T, T)."""
    sentence = _clean(tokenizer, sentence, model.config.n_ctx)
    if len(sentence) < 2:
        raise ValueError(t("句子至少要有两个词表里的字符。", "the sentence needs at least two characters of the vocabulary."))
    idx = torch.tensor([tokenizer.encode(sentence)], dtype=torch.long)
    return sentence, attention_weights(model, idx)


def head_scores(sentence: str, maps: np.ndarray) -> dict[str, np.ndarray]:
    """For every (layer, head): the mean weight on the previous character,
    on the start of the current line (the latest newline, or position 0),
    and on itself, over positions 1..T-1."""
    T = maps.shape[-1]
    rows = np.arange(1, T)
    line_start = np.zeros(T, dtype=int)
    last = 0
    for i, ch in enumerate(sentence):
        line_start[i] = last
        if ch == "\n":
            last = i
    prev = maps[..., rows, rows - 1].mean(-1)
    start = maps[..., rows, line_start[rows]].mean(-1)
    own = maps[..., rows, rows].mean(-1)
    return {"previous": prev, "line_start": start, "self": own}


def head_report(model, tokenizer, sentence: str, top: int = 2) -> dict[str, list[tuple[int, int, float]]]:
    """Print (and return) the heads that most look at the previous character
    and at the start of the line. Layers and heads are counted from 1."""
    sentence, maps = sentence_maps(model, tokenizer, sentence)
    scores = head_scores(sentence, maps)
    result = {}
    names = {"previous": t("看前一个字符", "previous character"), "line_start": t("看行首", "start of the line")}
    for key, name in names.items():
        s = scores[key]
        order = np.argsort(s, axis=None)[::-1][:top]
        best = [(int(i // s.shape[1]) + 1, int(i % s.shape[1]) + 1, float(s.flat[i])) for i in order]
        result[key] = best
        text = ", ".join(t(f"第 {l} 层第 {h} 头（平均权重 {w:.2f}）", f"layer {l} head {h} (mean weight {w:.2f})")
                         for l, h, w in best)
        print(f"{name}: {text}")
    uniform = float(np.mean(1.0 / np.arange(2, maps.shape[-1] + 1)))
    print(t(f"（对照：均匀地看所有前文时，平均权重约为 {uniform:.2f}）",
            f"(for comparison: attending uniformly to everything before gives about {uniform:.2f})"))
    return result


def _tick(ch: str) -> str:
    return {"\n": "\\n", " ": "␣"}.get(ch, ch)


def heatmap(ax, weights: np.ndarray, sentence: str, title: str = "", labels: bool = True):
    """One head's (T, T) weights on ``ax``: rows = query position, columns = key."""
    T = weights.shape[-1]
    masked = np.ma.masked_where(~np.tril(np.ones((T, T), dtype=bool)), weights)
    im = ax.imshow(masked, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.grid(False)
    if labels:
        chars = [_tick(c) for c in sentence]
        ax.set_xticks(range(T))
        ax.set_yticks(range(T))
        ax.set_xticklabels(chars, fontsize=6)
        ax.set_yticklabels(chars, fontsize=6)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return im


@figure_function
def head_figure(sentence: str, maps: np.ndarray, layer: int, head: int, fig=None):
    """A large heatmap of one head (layer and head counted from 1)."""
    import matplotlib.pyplot as plt

    from . import plots

    plots.setup()
    if fig is None:
        fig = plt.figure(figsize=(7.5, 7))
    fig.clear()
    ax = fig.subplots()
    im = heatmap(ax, maps[layer - 1, head - 1], sentence,
                 plots.label(f"第 {layer} 层 第 {head} 头", f"layer {layer}, head {head}"))
    ax.set_xlabel(plots.label("被看的位置（key）", "position looked at (key)"))
    ax.set_ylabel(plots.label("当前位置（query）", "current position (query)"))
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


@figure_function
def grid_figure(sentence: str, maps: np.ndarray):
    """Small heatmaps of every head: one row per layer."""
    import matplotlib.pyplot as plt

    from . import plots

    plots.setup()
    n_layer, n_head = maps.shape[:2]
    fig, axes = plt.subplots(n_layer, n_head, figsize=(2.3 * n_head, 2.3 * n_layer), squeeze=False)
    for l in range(n_layer):
        for h in range(n_head):
            im = heatmap(axes[l][h], maps[l, h], sentence,
                         plots.label(f"层 {l + 1} 头 {h + 1}", f"L{l + 1} H{h + 1}"), labels=False)
    fig.suptitle(plots.label("每一层、每一个头（行 = 当前位置，列 = 被看的位置）",
                             "every layer and head (row = current position, column = position looked at)"), fontsize=10)
    fig.tight_layout()
    fig.colorbar(im, ax=list(axes.flatten()), shrink=0.6, label=plots.label("注意力权重", "attention weight"))
    return fig


def show_all_heads(model, tokenizer, sentence: str) -> None:
    """Static version of the explorer: all heads, then the clearest
    previous-character head large. Skipped while grading."""
    import matplotlib.pyplot as plt

    from .runtime import under_nbgrader

    if under_nbgrader():
        return
    sentence, maps = sentence_maps(model, tokenizer, sentence)
    grid_figure(sentence, maps)
    plt.show()
    prev = head_scores(sentence, maps)["previous"]
    layer, head = np.unravel_index(int(np.argmax(prev)), prev.shape)
    head_figure(sentence, maps, int(layer) + 1, int(head) + 1)
    plt.show()


def attention_explorer(model, tokenizer, sentence: str) -> None:
    """A text box for the sentence and selectors for layer and head,
    redrawing one heatmap. Prints a line instead while grading."""
    import matplotlib.pyplot as plt

    from .runtime import under_nbgrader

    if under_nbgrader():
        print(t("（评分时不画热力图）", "(no heatmaps while grading)"))
        return None
    try:
        import ipywidgets as W
    except ImportError:
        return None
    n_layer, n_head = len(model.blocks), model.blocks[0].attn.n_head
    box = W.Textarea(value=sentence, description=t("句子", "sentence"), continuous_update=False,
                      layout=W.Layout(width="520px", height="70px"))
    layer = W.Dropdown(options=list(range(1, n_layer + 1)), value=1, description=t("层", "layer"))
    head = W.Dropdown(options=list(range(1, n_head + 1)), value=1, description=t("头", "head"))
    out = W.Output()

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            try:
                s, maps = sentence_maps(model, tokenizer, box.value)
            except ValueError as err:
                print(err)
                return
            fig = head_figure(s, maps, layer.value, head.value)
            plt.show()
            plt.close(fig)

    for w in (box, layer, head):
        w.observe(redraw, names="value")
    redraw()
    from .plots import show_widget
    show_widget(W.VBox([box, W.HBox([layer, head]), out]), grid_figure(*sentence_maps(model, tokenizer, sentence)))
