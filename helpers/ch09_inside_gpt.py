"""Chapter 9: the toy task (a random block and its repeat), the figures and
the widget of the chapter, and the measurements on a model's heads (where
they look, what they write, when they appear).

The models themselves (``TinyGPT``, its training loop, chapter 7's character
GPT) are not here: they hold earlier chapters' answers, so chapter 9 hands
them out in its own folder (``tiny_gpt.py``). The functions below take a
model with that layout (``model.blocks[l].attn.heads`` before the merge,
``attn.c_attn``, ``attn.c_proj``, ``attn.weights``, ``model.wte``,
``model.lm_head``, ``model.config``), and the scores are computed by
functions passed in (the student's), so this module gives no exercise away.
"""
from __future__ import annotations

import copy

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from .i18n import t
from .plots import DIVERGING, PALETTE, figure_function, hatch, label

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


# ------------------------------------------------------------------ the toy task

def repeated_batch(batch_size: int, period: int, vocab_size: int = len(ALPHABET),
                   generator: torch.Generator | None = None):
    """Sequences of a random block of ``period`` tokens followed by the same
    block again; (x, y) with y = x shifted by one (each of length 2·period − 1)."""
    block = torch.randint(vocab_size, (batch_size, period), generator=generator)
    seq = torch.cat([block, block], dim=1)
    return seq[:, :-1], seq[:, 1:]


def periodic_batch(batch_size: int, n: int, periods: tuple[int, int] = (2, 16),
                   vocab_size: int = len(ALPHABET), generator: torch.Generator | None = None):
    """Training data: each sequence is a random block of its own length p (drawn
    from ``periods``) repeated until the sequence has ``n + 1`` tokens."""
    lo, hi = periods
    p = torch.randint(lo, hi + 1, (batch_size, 1), generator=generator)
    blocks = torch.randint(vocab_size, (batch_size, hi), generator=generator)
    seq = blocks.gather(1, torch.arange(n + 1)[None] % p)
    return seq[:, :-1], seq[:, 1:]


@torch.no_grad()
def loss_per_position(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at each position, averaged over the batch: shape (n,)."""
    return F.cross_entropy(model(x)[0].transpose(1, 2), y, reduction="none").mean(0)


def encode(text: str, chars: str = ALPHABET) -> list[int]:
    """Characters of ``chars`` (lower-cased first), others dropped."""
    lookup = {c: i for i, c in enumerate(chars)}
    return [lookup[c] for c in text.lower() if c in lookup] if chars == ALPHABET else \
        [lookup[c] for c in text if c in lookup]


def guess_period(tokens) -> int | None:
    """The smallest shift p (1 ≤ p ≤ n/2) with tokens[p:] == tokens[:-p], or None."""
    tokens = list(tokens)
    for p in range(1, len(tokens) // 2 + 1):
        if tokens[p:] == tokens[:-p]:
            return p
    return None


def score_shape_mistake(score, n_layer: int, batch: int, n_head: int) -> str | None:
    """The known mistake (the grader's key) that a head score is when its type or
    shape alone says so, for attention weights of shape (n_layer, batch, n_head, n, n)."""
    if not isinstance(score, torch.Tensor):
        return "score_not_a_tensor"
    return {(n_layer, batch, n_head): "score_batch_not_averaged", (n_head,): "score_one_layer_only",
            (batch, n_head): "score_one_layer_only", (1, n_head): "score_one_layer_only",
            (n_head, n_layer): "score_transposed", (n_layer * n_head,): "score_flattened"}.get(tuple(score.shape))


# ------------------------------------------------------------------ chapter 7's character GPT

def word_start_score(attn: torch.Tensor, text: str) -> torch.Tensor:
    """(n_layer, n_head): mean weight from each position inside a word (not
    its first letter) to the first letter of that word."""
    starts, cur = [], None
    for i, c in enumerate(text):
        if not c.isalpha():
            cur = None
        elif cur is None:
            cur = i
        starts.append(cur)
    rows = [(i, s) for i, s in enumerate(starts) if s is not None and s != i]
    if not rows:
        return torch.zeros(attn.shape[0], attn.shape[2])
    q = torch.tensor([i for i, _ in rows])
    k = torch.tensor([s for _, s in rows])
    return attn[..., q, k].mean(dim=(1, 3))


# ------------------------------------------------------------------ figures

@figure_function
def loss_position_figure(losses: torch.Tensor, period: int, chance: float):
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(range(len(losses)), losses.numpy(), marker="o", ms=3)
    ax.axvline(period - 0.5, color="gray", ls="--")
    ax.axhline(chance, color="tab:red", ls=":", label=label(f"随机猜 ln V = {chance:.2f}", f"guessing ln V = {chance:.2f}"))
    ax.set_xlabel(label("位置（预测下一个 token）", "position (predicting the next token)"))
    ax.set_ylabel(label("交叉熵", "cross-entropy"))
    ax.set_title(label("每个位置的损失：虚线右边是重复的那一半", "loss per position: right of the dashed line is the repeat"))
    ax.legend(loc="center left")
    fig.tight_layout()
    return fig


@figure_function
def scores_figure(scores: dict):
    """One heatmap (layer × head) per named score."""
    fig, axes = plt.subplots(1, len(scores), figsize=(3.6 * len(scores), 2.8), squeeze=False)
    for ax, (name, s) in zip(axes[0], scores.items()):
        s = torch.as_tensor(s, dtype=torch.float64).numpy()
        im = ax.imshow(s, vmin=0, vmax=1, cmap="viridis")
        for (l, h), v in np.ndenumerate(s):
            ax.text(h, l, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=9)
        ax.set_xticks(range(s.shape[1]))
        ax.set_yticks(range(s.shape[0]))
        ax.set_xlabel(label("头", "head"))
        ax.set_ylabel(label("层", "layer"))
        ax.set_title(name)
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


def pattern_axes(ax, w, tokens: str, title: str):
    n = len(w)
    im = ax.imshow(np.asarray(w), vmin=0, vmax=1, cmap="Blues")
    if n <= 48:
        ax.set_xticks(range(n), list(tokens), fontsize=7)
        ax.set_yticks(range(n), list(tokens), fontsize=7)
    ax.set_xlabel(label("被看的位置（key）", "attended position (key)"))
    ax.set_ylabel(label("当前位置（query）", "current position (query)"))
    ax.set_title(title, fontsize=10)
    return im


def weight_bar(fig, im, axes) -> None:
    """The key to an attention map's colours (0 to 1)."""
    fig.colorbar(im, ax=axes, shrink=0.8, label=label("注意力权重", "attention weight"))


@figure_function
def patterns_figure(attn: torch.Tensor, pairs, tokens: str, b: int = 0):
    """Side by side, the patterns of the (layer, head) pairs for sequence ``b``."""
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.6 * len(pairs), 4.4), squeeze=False)
    for ax, (name, (l, h)) in zip(axes[0], pairs):
        im = pattern_axes(ax, attn[l, b, h], tokens, f"{name}: L{l} H{h}")
    fig.tight_layout()
    weight_bar(fig, im, list(axes[0]))
    return fig


@figure_function
def ablation_figure(deltas: torch.Tensor, base: float):
    """Bar chart of the loss change when each head alone is removed."""
    deltas = torch.as_tensor(deltas, dtype=torch.float64)
    n_layer, n_head = deltas.shape
    names = [f"L{l}H{h}" for l in range(n_layer) for h in range(n_head)]
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * len(names), 3.2))
    colors = [PALETTE[l % len(PALETTE)] for l in range(n_layer) for _ in range(n_head)]
    hatches = [hatch(l) for l in range(n_layer) for _ in range(n_head)]     # the layer, also without colour
    ax.bar(names, deltas.flatten().numpy(), color=colors, hatch=hatches, edgecolor="white")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel(label("去掉这个头后损失的变化", "loss change with this head removed"))
    ax.set_title(label(f"逐个去掉每个头（完整模型的损失 {base:.3f}）", f"removing one head at a time (full model: loss {base:.3f})"))
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ the widget

def _explore(model, text, layer, head, prev_token_score, induction_score, ax=None):
    ids = encode(text)[-model.config.n_ctx:]
    shown = "".join(ALPHABET[i] for i in ids)
    if len(ids) < 2:
        print(t("请输入至少两个字母（a–z）。", "type at least two letters (a–z)."))
        return None
    attn = model.attention(torch.tensor([ids]))
    period = guess_period(ids)
    prev = prev_token_score(attn)[layer, head].item()
    line = t(f"L{layer} H{head}：前一个 token 得分 {prev:.2f}", f"L{layer} H{head}: previous-token score {prev:.2f}")
    if period is not None and period < len(ids):
        ind = induction_score(attn, period)[layer, head].item()
        line += t(f"，归纳得分 {ind:.2f}（周期 {period}）", f", induction score {ind:.2f} (period {period})")
    else:
        line += t("；文本没有重复，不算归纳得分", "; the text does not repeat, so no induction score")
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.2, 5.0))
        weight_bar(fig, pattern_axes(ax, attn[layer, 0, head], shown, line), ax)
    else:
        pattern_axes(ax, attn[layer, 0, head], shown, line)
    return line


def head_explorer(model, text: str, prev_token_score, induction_score):
    """Dropdowns for layer and head, a text box: the head's pattern and scores."""
    import ipywidgets as W
    from IPython.display import display
    cfg = model.config
    layer = W.Dropdown(options=list(range(cfg.n_layer)), value=cfg.n_layer - 1, description=t("层", "layer"))
    head = W.Dropdown(options=list(range(cfg.n_head)), value=0, description=t("头", "head"))
    box = W.Text(value=text, description=t("文本", "text"), layout=W.Layout(width="95%"))
    out = W.Output()

    def redraw(*_):
        out.clear_output(wait=True)
        with out:
            try:
                line = _explore(model, box.value, layer.value, head.value, prev_token_score, induction_score)
                if line:
                    print(line)
                    plt.show()
            except Exception as exc:  # noqa: BLE001 (an unfinished exercise must not break the widget)
                print(t(f"计算得分出错（先完成练习 1 和 2）：{exc}", f"computing the scores failed (finish exercises 1 and 2): {exc}"))

    for w in (layer, head, box):
        w.observe(redraw, names="value")
    display(W.VBox([W.HBox([layer, head]), box, out]))
    redraw()


@figure_function
def head_explorer_figure(model, text: str, prev_token_score, induction_score):
    """The static version: every head of the model on ``text``."""
    cfg = model.config
    fig, axes = plt.subplots(cfg.n_layer, cfg.n_head, figsize=(3.4 * cfg.n_head, 3.6 * cfg.n_layer), squeeze=False)
    for l in range(cfg.n_layer):
        for h in range(cfg.n_head):
            line = _explore(model, text, l, h, prev_token_score, induction_score, ax=axes[l][h])
            axes[l][h].set_title(line.replace("，", "\n").replace(", ", "\n").replace("；", "\n"), fontsize=8)
            axes[l][h].set_xlabel("")
            axes[l][h].set_ylabel("")
    fig.tight_layout()
    weight_bar(fig, axes[0][0].images[0], list(axes.flatten()))
    return fig


# ------------------------------------------------------------------ when the heads appear, and what they write

@torch.no_grad()
def phase_curve(model, snapshots, x: torch.Tensor, y: torch.Tensor, period: int,
                prev_token_score, induction_score) -> dict:
    """For each ``(step, state_dict)`` of ``snapshots`` (loaded into a copy of
    ``model``, which is left as it is), on the fixed batch
    ``(x, y)`` of a block and its repeat: the loss on the first copy and on the
    repeat, and the best previous-token score of layer 0 and the best induction
    score of the last layer (the scores are the functions passed in).
    Returns lists under "step", "loss_first", "loss_repeat", "prev", "induction"."""
    model = copy.deepcopy(model).train(False)
    curve = {k: [] for k in ("step", "loss_first", "loss_repeat", "prev", "induction")}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step, state in snapshots:
            model.load_state_dict(state)
            per_pos = F.cross_entropy(model(x)[0].transpose(1, 2), y, reduction="none").mean(0)   # one pass:
            attn = torch.stack([b.attn.weights for b in model.blocks])                     # losses, weights
            curve["step"].append(step)
            curve["loss_first"].append(float(per_pos[:period - 1].mean()))
            curve["loss_repeat"].append(float(per_pos[period:].mean()))
            curve["prev"].append(float(torch.as_tensor(prev_token_score(attn))[0].max()))
            curve["induction"].append(float(torch.as_tensor(induction_score(attn, period))[-1].max()))
    finally:
        torch.set_num_threads(threads)
    return curve


def steepest_drop(curve: dict, key: str = "loss_repeat") -> tuple[int, int]:
    """The pair of consecutive snapshot steps between which ``curve[key]`` falls the most."""
    vals, steps = curve[key], curve["step"]
    i = max(range(len(vals) - 1), key=lambda j: vals[j] - vals[j + 1])
    return steps[i], steps[i + 1]


@figure_function
def phase_figure(curve: dict, chance: float):
    """Left: loss on the first copy and on the repeat against the step.
    Right: the best previous-token score (layer 0) and induction score (last layer)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    steps = curve["step"]
    ax1.plot(steps, curve["loss_first"], label=label("第一遍", "first copy"), color="tab:gray")
    ax1.plot(steps, curve["loss_repeat"], label=label("重复部分", "the repeat"), color="tab:blue")
    ax1.axhline(chance, color="tab:red", ls=":", lw=1, label=label(f"随机猜 {chance:.2f}", f"guessing {chance:.2f}"))
    ax1.set_xlabel(label("训练步数", "training step"))
    ax1.set_ylabel(label("交叉熵", "cross-entropy"))
    ax1.set_title(label("损失", "loss"))
    ax1.legend(fontsize=9)
    ax2.plot(steps, curve["prev"], label=label("第 0 层最好的前一个 token 得分", "best previous-token score, layer 0"),
             color="tab:orange")
    ax2.plot(steps, curve["induction"], label=label("第 1 层最好的归纳得分", "best induction score, layer 1"),
             color="tab:green")
    ax2.set_ylim(0, 1)
    ax2.set_xlabel(label("训练步数", "training step"))
    ax2.set_title(label("头的得分", "head scores"))
    ax2.legend(fontsize=9)
    a, b = steepest_drop(curve)
    for ax in (ax1, ax2):
        ax.axvspan(a, b, color="gold", alpha=0.25, lw=0)
    fig.tight_layout()
    return fig


def _head_slices(model, layer: int, head: int):
    attn = model.blocks[layer].attn
    d, dh = model.config.d_model, attn.d_head
    rows = slice(2 * d + head * dh, 2 * d + (head + 1) * dh)             # this head's value rows of c_attn
    w_v, b_v = attn.c_attn.weight[rows], attn.c_attn.bias[rows]          # (dh, d), (dh,)
    w_o = attn.c_proj.weight[:, head * dh:(head + 1) * dh]               # (d, dh)
    return w_v, b_v, w_o


@torch.no_grad()
def ov_circuit(model, layer: int, head: int) -> torch.Tensor:
    """(V, V): row t is what the head adds to the logits when it attends to a
    position holding token t (its token embedding only), through values, the
    output projection and the unembedding: (W_E W_V + b_V) W_O W_U."""
    w_v, b_v, w_o = _head_slices(model, layer, head)
    values = model.wte.weight @ w_v.T + b_v                              # (V, dh)
    return model.lm_head(values @ w_o.T)                                 # (V, V)


def copies_own_token(ov: torch.Tensor) -> int:
    """How many tokens t raise their own logit more than any other (row t's largest entry on the diagonal)."""
    return int((ov.argmax(dim=-1) == torch.arange(ov.shape[0])).sum())


@torch.no_grad()
def direct_copy_rate(model, x: torch.Tensor, layer: int, head: int, positions) -> float:
    """On real sequences: the share of (sequence, position) where the token the
    head attends to most is also the token whose logit the head's own output
    raises the most (its direct path to the logits: W_O, then the unembedding)."""
    seen = {}
    hook = model.blocks[layer].attn.heads.register_forward_hook(lambda m, i, out: seen.__setitem__("out", out))
    try:
        model(x)
    finally:
        hook.remove()
    _, _, w_o = _head_slices(model, layer, head)
    logits = model.lm_head(seen["out"][:, head] @ w_o.T)                  # (B, n, V)
    weights = model.blocks[layer].attn.weights[:, head]                   # (B, n, n)
    pos = torch.as_tensor(list(positions))
    attended = x.gather(1, weights[:, pos].argmax(dim=-1))                # (B, len(pos)) token attended most
    raised = logits[:, pos].argmax(dim=-1)
    return float((attended == raised).double().mean())


@figure_function
def ov_figure(model, heads: dict):
    """One heatmap per named (layer, head): its OV circuit, rows = the token attended to."""
    fig, axes = plt.subplots(1, len(heads), figsize=(4.6 * len(heads), 4.4), squeeze=False)
    for ax, (name, (l, h)) in zip(axes[0], heads.items()):
        ov = ov_circuit(model, l, h)
        ov = (ov - ov.mean(dim=-1, keepdim=True)) / ov.std(dim=-1, keepdim=True)   # each row on its own scale
        im = ax.imshow(ov.numpy(), cmap=DIVERGING, vmin=-3, vmax=3)
        ax.set_xticks(range(len(ALPHABET)), list(ALPHABET), fontsize=6)
        ax.set_yticks(range(len(ALPHABET)), list(ALPHABET), fontsize=6)
        ax.set_xlabel(label("加到哪个 logit 上（下一个 token）", "logit raised (next token)"))
        ax.set_ylabel(label("被关注位置上的 token", "token at the attended position"))
        ax.set_title(label(f"{name}：L{l} H{h}，对角线最大的行 {copies_own_token(ov_circuit(model, l, h))}/26",
                           f"{name}: L{l} H{h}, diagonal largest in {copies_own_token(ov_circuit(model, l, h))}/26 rows"),
                     fontsize=10)
    fig.tight_layout()
    fig.colorbar(im, ax=list(axes[0]), shrink=0.8,
                 label=label("logit 增量（每行标准化）", "logit raised (standardised per row)"))
    return fig
