"""Chapter 9: look inside small GPTs — an attention-only toy model trained on
repeated random letters, chapter 7's character GPT, their attention patterns,
and the figures and widget of the chapter.

Layout every model here shares (the exercises rely on it):

- ``model.blocks[l].attn`` is the attention of layer ``l``;
- ``model.blocks[l].attn.heads`` is an ``nn.Identity`` placed on the heads'
  outputs before they are merged: its input and output have shape
  ``(B, n_head, n, d_head)``, head ``h`` is ``[:, h]``. A forward hook on it
  sees (and may replace) every head's output separately;
- ``model.blocks[l].attn.c_proj`` is the output projection ``W_O``
  (``d_model → d_model``); its input holds head ``h`` in channels
  ``h·d_head : (h+1)·d_head``;
- ``model(idx, targets)`` returns ``(logits, loss)``, the mean cross-entropy;
- ``model.attention(idx)`` returns the attention weights of every layer,
  shape ``(n_layer, B, n_head, n, n)``.

Scores are computed by functions passed in (the student's), so this module
gives no exercise away.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .i18n import t
from .plots import DIVERGING, PALETTE, figure_function, hatch, label

ALPHABET = "abcdefghijklmnopqrstuvwxyz"


# ------------------------------------------------------------------ models

@dataclass(frozen=True)
class Config:
    vocab_size: int = len(ALPHABET)
    n_ctx: int = 32
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    mlp: bool = False          # False: attention only (the toy); True: chapter 7's GPT blocks
    pos: str = "rope"          # "rope" (rotary, chapter 4) or "learned" (GPT-2, chapter 7)
    ln: bool = False           # LayerNorm before each block and at the end (chapter 7's GPT: True)


def _rotate(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding: adjacent pairs (2i, 2i+1) turned by position·θ_i."""
    n, d = x.shape[-2], x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    angle = torch.arange(n, dtype=torch.float32)[:, None] * theta
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Attention(nn.Module):
    """Causal multi-head attention that keeps its weights and exposes each head's output."""

    def __init__(self, d_model: int, n_head: int, rope: bool = False):
        super().__init__()
        self.rope = rope
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} is not divisible by n_head={n_head}")
        self.n_head, self.d_head = n_head, d_model // n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.heads = nn.Identity()                 # hook point: (B, n_head, n, d_head)
        self.c_proj = nn.Linear(d_model, d_model)
        self.weights: torch.Tensor | None = None   # (B, n_head, n, n) of the last forward pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, n, d = x.shape
        q, k, v = (z.view(B, n, self.n_head, self.d_head).transpose(1, 2) for z in self.c_attn(x).split(d, dim=-1))
        if self.rope:
            q, k = _rotate(q), _rotate(k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        w = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        self.weights = w.detach()
        out = self.heads(w @ v)                                   # (B, n_head, n, d_head)
        return self.c_proj(out.transpose(1, 2).reshape(B, n, d))


class Block(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model) if cfg.ln else nn.Identity()
        self.attn = Attention(cfg.d_model, cfg.n_head, rope=cfg.pos == "rope")
        if cfg.mlp:
            self.ln_2 = nn.LayerNorm(cfg.d_model)
            self.mlp = nn.Sequential()
            self.mlp.add_module("c_fc", nn.Linear(cfg.d_model, 4 * cfg.d_model))
            self.mlp.add_module("gelu", nn.GELU())
            self.mlp.add_module("c_proj", nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        if hasattr(self, "mlp"):
            x = x + self.mlp(self.ln_2(x))
        return x


class TinyGPT(nn.Module):
    """Token + position embeddings, Pre-LN blocks, final LayerNorm, a linear head.

    With ``mlp=False`` the blocks hold attention only (the chapter's toy
    model); with ``mlp=True`` the state dict has the names of chapter 7's GPT,
    so a model saved there loads here."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.pos == "learned":
            self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.ln else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.mlp:
            self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else 0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, n = idx.shape
        if n > self.config.n_ctx:
            raise ValueError(f"input of length {n} is longer than n_ctx = {self.config.n_ctx}")
        x = self.wte(idx)
        if hasattr(self, "wpe"):
            x = x + self.wpe(torch.arange(n, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.reshape(B * n, -1), targets.reshape(B * n))
        return logits, loss

    @torch.no_grad()
    def attention(self, idx: torch.Tensor) -> torch.Tensor:
        """Attention weights of every layer: (n_layer, B, n_head, n, n)."""
        self(idx)
        return torch.stack([b.attn.weights for b in self.blocks])


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


def train_toy(model: TinyGPT, steps: int = 1000, batch_size: int = 64, lr: float = 3e-3,
              periods: tuple[int, int] = (2, 16), seed: int = 0, progress: bool = True,
              snapshots: list | None = None, snapshot_every: int = 25):
    """Train on repeated random blocks. Every sequence has its own period, so
    no head can solve the task by position alone. Returns (loss per step, seconds).

    With a list as ``snapshots``, a copy of the weights is appended to it as
    ``(step, state_dict)`` before the first step and every ``snapshot_every``
    steps after it (see ``phase_curve``)."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=steps, unit="step", desc=t("训练", "training"))
    losses: list[float] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # a model this small runs fastest on one thread
    start = time.perf_counter()
    model.train()
    for step in range(steps):
        if snapshots is not None and step % snapshot_every == 0:
            snapshots.append((step, {k: v.detach().clone() for k, v in model.state_dict().items()}))
        x, y = periodic_batch(batch_size, model.config.n_ctx, periods, model.config.vocab_size, gen)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if bar is not None:
            bar.update(1)
            if step % 20 == 19:
                bar.set_postfix(loss=f"{np.mean(losses[-20:]):.3f}")
    seconds = time.perf_counter() - start
    if snapshots is not None:
        snapshots.append((steps, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    torch.set_num_threads(threads)
    if bar is not None:
        bar.close()
    model.eval()
    return losses, seconds


@torch.no_grad()
def loss_per_position(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at each position, averaged over the batch: shape (n,)."""
    logits, _ = model(x)
    return F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)


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


# ------------------------------------------------------------------ chapter 7's character GPT

def char_config(**sizes) -> Config:
    """Chapter 7's GPT: MLPs, LayerNorms, learned positions."""
    return Config(mlp=True, pos="learned", ln=True, **sizes)


CH07_PLACES = ("ch07_model.pt", "../ch07_gpt/ch07_model.pt")


def save_char_gpt(model, chars, path="ch07_model.pt") -> None:
    """Save a chapter 7 GPT (state dict, its config, the vocabulary) where this chapter looks for it."""
    c = model.config
    config = dict(vocab_size=c.vocab_size, n_ctx=c.n_ctx, n_layer=c.n_layer, n_head=c.n_head, d_model=c.d_model)
    torch.save({"config": config, "state_dict": model.state_dict(), "chars": "".join(chars)}, path)


def load_char_gpt(places=CH07_PLACES):
    """(model, chars, path) for the first saved chapter 7 model found, else None."""
    for place in places:
        path = Path(place)
        if not path.is_file():
            continue
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
            model = TinyGPT(char_config(**saved["config"]))
            # strict: a GPT whose parameters are named otherwise would load only in part, its other weights random
            model.load_state_dict(saved["state_dict"], strict=True)
            return model.eval(), saved["chars"], str(path)
        except Exception as exc:  # noqa: BLE001 (a file from elsewhere: say so and train instead)
            first = str(exc).strip().splitlines()[0][:300]
            print(t(f"（{path} 读不出来，改为在这里训练一个：{first}）",
                    f"({path} could not be loaded, so one is trained here instead: {first})"))
    return None


def _get_batch(data, block_size, batch_size, generator=None):
    i = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offs = torch.arange(block_size)
    return data[i[:, None] + offs], data[i[:, None] + offs + 1]


def train_char_gpt(text: str, steps: int = 600, seed: int = 0):
    """A chapter 7 GPT (the course recipe) trained briefly on ``text``: (model, chars)."""
    from . import training
    chars = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    r = training.scaled(training.COURSE_RECIPE, threads=1)   # steadier than two threads on a busy machine
    torch.manual_seed(seed)
    model = TinyGPT(char_config(vocab_size=len(chars), n_ctx=r.n_ctx, n_layer=r.n_layer, n_head=r.n_head,
                                d_model=r.d_model))
    training.train(model, _get_batch, data[:n], data[n:], r, steps=steps,
                   eval_every=1e9, eval_tokens=1_024, seed=seed)
    return model.eval(), chars


def test_model(n_layer: int = 2, n_head: int = 4, seed: int = 0) -> TinyGPT:
    """An untrained toy model with weights large enough that every head matters (for tests)."""
    torch.manual_seed(seed)
    model = TinyGPT(Config(n_layer=n_layer, n_head=n_head))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 1.0 / p.shape[-1] ** 0.5)
    return model.eval()


def random_like(model, seed: int = 1) -> TinyGPT:
    """An untrained model of the same shape: its heads are the baseline."""
    torch.manual_seed(seed)
    return TinyGPT(model.config).eval()


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


def config_dict(model) -> dict:
    return asdict(model.config)


# ------------------------------------------------------------------ when the heads appear, and what they write

@torch.no_grad()
def phase_curve(config: Config, snapshots, x: torch.Tensor, y: torch.Tensor, period: int,
                prev_token_score, induction_score) -> dict:
    """For each ``(step, state_dict)`` of ``snapshots``, on the fixed batch
    ``(x, y)`` of a block and its repeat: the loss on the first copy and on the
    repeat, and the best previous-token score of layer 0 and the best induction
    score of the last layer (the scores are the functions passed in).
    Returns lists under "step", "loss_first", "loss_repeat", "prev", "induction"."""
    model = TinyGPT(config).eval()
    curve = {k: [] for k in ("step", "loss_first", "loss_repeat", "prev", "induction")}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step, state in snapshots:
            model.load_state_dict(state)
            logits, _ = model(x)                                             # one pass: losses and weights
            per_pos = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").mean(0)
            attn = torch.stack([b.attn.weights for b in model.blocks])
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
