"""Length extrapolation, measured: one small model trained at length 32 with
each way of giving it positions, then read at lengths up to 128.

The task is chapter 9's: random letters repeating with a period of 2 to 16
(``periodic_batch``). Every position from 16 on lies in a repeat, so a model
that has learned to look back and copy predicts it well; how it finds the
place to look (the previous token, one step back) is where positions come in.

The model is a two-layer, attention-only Transformer (chapter 9's toy) whose
positions come in one of five ways:

- ``sinusoidal``: the table of chapter 4's exercise 1, added to the input;
- ``learned``: an ``nn.Embedding(32, d)`` added to the input (GPT-2's way):
  it has no row for position 32 and beyond, so it cannot be read there;
- ``rope``: q and k rotated in every layer by chapter 4's ``apply_rope``;
- ``rope+ntk``: the same trained RoPE model, read at length n with the base
  raised NTK-style, ``base · s^(d/(d−2))`` with ``s = n / 32`` (no retraining);
- ``alibi``: no position vectors at all; each head subtracts ``m_h·(i − j)``
  from its scores (Press et al., 2022), slopes ``2^(−8(h+1)/H)``.

The sinusoidal table and the rotation are functions passed in (the student's
own), so this module gives none of chapter 4's exercises away. A run is kept
in memory, keyed by the settings and by what those functions return on the
inputs the run gives them, so running the same cell twice costs nothing.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .i18n import t
from .plots import figure_function, label
from .plots import setup as plot_setup

KINDS = ("sinusoidal", "learned", "rope", "rope+ntk", "alibi")
TRAINED = ("sinusoidal", "learned", "rope", "alibi")      # rope+ntk reads the rope model


@dataclass(frozen=True)
class Setup:
    n_train: int = 32
    lengths: tuple[int, ...] = (32, 48, 64, 96, 128)
    steps: int = 800
    batch: int = 32
    lr: float = 1e-2
    d_model: int = 64
    n_head: int = 4
    n_layer: int = 2
    vocab: int = 26
    periods: tuple[int, int] = (2, 16)
    eval_batch: int = 128
    seed: int = 0
    base: float = 10000.0

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    def ntk_base(self, n: int) -> float:
        """The base that makes the slowest pair turn n / n_train times slower."""
        s = n / self.n_train
        return self.base * s ** (self.d_head / (self.d_head - 2)) if s > 1 else self.base


@dataclass
class Result:
    setup: Setup
    losses: dict[str, list[float | None]]          # kind -> loss at each length (None: cannot run)
    seconds: dict[str, float] = field(default_factory=dict)

    def at(self, kind: str, n: int) -> float | None:
        return self.losses[kind][self.setup.lengths.index(n)]


def alibi_slopes(n_head: int) -> torch.Tensor:
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / n_head) for h in range(n_head)])


# ------------------------------------------------------------------ the model

class _Attention(nn.Module):
    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.n_head, self.d_head = n_head, d // n_head
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x, rotate=None, alibi=None):
        B, n, d = x.shape
        q, k, v = (z.view(B, n, self.n_head, self.d_head).transpose(1, 2) for z in self.c_attn(x).split(d, dim=-1))
        if rotate is not None:
            q, k = rotate(q), rotate(k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)            # (B, h, n, n)
        if alibi is not None:
            scores = scores - alibi
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        w = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        return self.c_proj((w @ v).transpose(1, 2).reshape(B, n, d))


class PositionModel(nn.Module):
    """Token embedding, positions of one ``kind``, attention-only blocks, a linear head."""

    def __init__(self, kind: str, s: Setup, sinusoidal_encoding=None, apply_rope=None):
        super().__init__()
        if kind not in TRAINED:
            raise ValueError(f"kind must be one of {TRAINED}, not {kind!r}")
        self.kind, self.s = kind, s
        self.sinusoidal_encoding, self.apply_rope = sinusoidal_encoding, apply_rope
        self._tables: dict[int, torch.Tensor] = {}             # the sinusoidal table, once per length
        self.wte = nn.Embedding(s.vocab, s.d_model)
        if kind == "learned":
            self.wpe = nn.Embedding(s.n_train, s.d_model)
        self.blocks = nn.ModuleList(_Attention(s.d_model, s.n_head) for _ in range(s.n_layer))
        self.lm_head = nn.Linear(s.d_model, s.vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx: torch.Tensor, base: float | None = None) -> torch.Tensor:
        B, n = idx.shape
        pos = torch.arange(n)
        x = self.wte(idx)
        rotate = alibi = None
        if self.kind == "sinusoidal":
            if n not in self._tables:
                self._tables[n] = torch.as_tensor(self.sinusoidal_encoding(n, self.s.d_model)).detach()
            x = x + self._tables[n].to(x.dtype)
        elif self.kind == "learned":
            if n > self.s.n_train:
                raise IndexError(f"the position table has {self.s.n_train} rows; position {n - 1} has none")
            x = x + self.wpe(pos)
        elif self.kind == "rope":
            b = self.s.base if base is None else base
            rotate = lambda z: self.apply_rope(z, pos, b).to(z.dtype)             # noqa: E731
        else:
            dist = (pos[:, None] - pos[None, :]).clamp(min=0).to(x.dtype)
            alibi = alibi_slopes(self.s.n_head)[:, None, None] * dist          # (h, n, n)
        for block in self.blocks:
            x = x + block(x, rotate, alibi)
        return self.lm_head(x)


# ------------------------------------------------------------------ training and reading

def _batch(s: Setup, size: int, n: int, generator: torch.Generator):
    from .ch09_inside_gpt import periodic_batch
    return periodic_batch(size, n, s.periods, s.vocab, generator)


def _train(kind: str, s: Setup, sinusoidal_encoding, apply_rope, bar=None) -> PositionModel:
    torch.manual_seed(s.seed)
    model = PositionModel(kind, s, sinusoidal_encoding, apply_rope)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(s.seed)
    model.train()
    for _ in range(s.steps):
        x, y = _batch(s, s.batch, s.n_train, gen)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if bar is not None:
            bar.update(1)
    return model.eval()


@torch.no_grad()
def repeat_loss(model: PositionModel, n: int, base: float | None = None) -> float:
    """Mean cross-entropy at positions 16 … n−1 (all inside a repeat) on a fixed batch of length n."""
    s = model.s
    x, y = _batch(s, s.eval_batch, n, torch.Generator().manual_seed(10_000 + n))
    logits = model(x, base=base)
    per = F.cross_entropy(logits.transpose(1, 2), y, reduction="none")
    return float(per[:, s.periods[1]:].mean())


_RUNS: dict[str, Result] = {}


def _fingerprint(s: Setup, sinusoidal_encoding, apply_rope) -> str:
    """The settings and what the two functions return on the inputs a run gives them."""
    h = hashlib.sha256(repr(sorted(asdict(s).items())).encode())
    probe = torch.randn(2, s.n_head, max(s.lengths), s.d_head, generator=torch.Generator().manual_seed(7))
    for n in sorted(set(s.lengths) | {s.n_train}):
        h.update(torch.as_tensor(sinusoidal_encoding(n, s.d_model)).to(torch.float64).numpy().tobytes())
        pos = torch.arange(n)
        for base in {s.base, s.ntk_base(n)}:
            h.update(torch.as_tensor(apply_rope(probe[:, :, :n], pos, base)).to(torch.float64).numpy().tobytes())
    return h.hexdigest()


def run(sinusoidal_encoding: Callable, apply_rope: Callable, s: Setup | None = None,
        progress: bool = True) -> Result:
    """Train one model per way of giving positions (``TRAINED``) at length
    ``s.n_train``, then read each at every length of ``s.lengths``."""
    s = s or Setup()
    key = _fingerprint(s, sinusoidal_encoding, apply_rope)
    if key in _RUNS:
        return _RUNS[key]
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=s.steps * len(TRAINED), unit="step", desc=t("训练 4 个模型", "training 4 models"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # tiny tensors: one thread is fastest, and steadier on a busy machine
    losses: dict[str, list[float | None]] = {}
    seconds: dict[str, float] = {}
    try:
        for kind in TRAINED:
            start = time.perf_counter()
            model = _train(kind, s, sinusoidal_encoding, apply_rope, bar)
            seconds[kind] = time.perf_counter() - start
            losses[kind] = [None if kind == "learned" and n > s.n_train else repeat_loss(model, n)
                            for n in s.lengths]
            if kind == "rope":
                losses["rope+ntk"] = [repeat_loss(model, n, base=s.ntk_base(n)) for n in s.lengths]
    finally:
        torch.set_num_threads(threads)
        if bar is not None:
            bar.close()
    result = Result(s, {k: losses[k] for k in KINDS}, seconds)
    _RUNS[key] = result
    return result


# ------------------------------------------------------------------ showing it

def names() -> dict[str, str]:
    return {"sinusoidal": t("正弦编码", "sinusoidal"), "learned": t("可学习位置表", "learned table"),
            "rope": "RoPE", "rope+ntk": t("RoPE + NTK 缩放", "RoPE + NTK scaling"), "alibi": "ALiBi"}


def _right(text: str, width: int) -> str:
    """``text`` right-aligned in ``width`` columns, a Chinese character taking two."""
    columns = sum(2 if ord(c) > 0x2E80 else 1 for c in text)
    return " " * max(0, width - columns) + text


def print_table(result: Result) -> None:
    s = result.setup
    print(_right(t("读取长度", "length read"), 22) + "".join(f"{n:>8d}" for n in s.lengths))
    for kind in KINDS:
        cells = "".join(f"{'—':>8s}" if v is None else f"{v:8.3f}" for v in result.losses[kind])
        print(_right(names()[kind], 22) + cells)


@figure_function
def figure(result: Result):
    """Loss on the repeats against the length read, one line per way of giving positions."""
    import matplotlib.pyplot as plt

    plot_setup()
    s = result.setup
    fig, ax = plt.subplots(figsize=(9.5, 4.2))
    styles = {"sinusoidal": ("C0", "o", "-"), "learned": ("C1", "s", "-"), "rope": ("C2", "^", "-"),
              "rope+ntk": ("C2", "v", "--"), "alibi": ("C3", "D", "-")}
    for kind in KINDS:
        pts = [(n, v) for n, v in zip(s.lengths, result.losses[kind]) if v is not None]
        color, marker, ls = styles[kind]
        ax.plot([n for n, _ in pts], [v for _, v in pts], ls=ls, marker=marker, color=color, label=names()[kind])
    last = result.losses["learned"][s.lengths.index(s.n_train)]
    if last is not None:
        ax.annotate(label(f"位置表只有 {s.n_train} 行：\n更长就读不了", f"the table has {s.n_train} rows:\nno longer input"),
                    xy=(s.n_train, last), xytext=(s.n_train + 6, last + 0.35), color="C1", fontsize=9,
                    arrowprops=dict(arrowstyle="->", color="C1"))
    ax.axvline(s.n_train, color="gray", ls=":", lw=1)
    ax.text(s.n_train + 1, ax.get_ylim()[1] * 0.97, label("训练长度", "trained length"), color="gray", fontsize=9,
            va="top")
    ax.set_xticks(list(s.lengths))
    ax.set_xlabel(label("读取时的序列长度 n", "sequence length n when read"))
    ax.set_ylabel(label("重复部分的交叉熵（越低越好）", "cross-entropy on the repeats (lower is better)"))
    ax.set_title(label(f"在长度 {s.n_train} 上训练，在更长的序列上读", f"trained at length {s.n_train}, read at longer lengths"))
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
