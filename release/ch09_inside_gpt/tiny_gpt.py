"""The models chapter 9 looks inside, given read-only in that chapter's folder.

Chapter 9 hands this file out beside its notebook (``from tiny_gpt import
Config, TinyGPT``), after chapter 7 is collected: it holds what earlier
chapters ask students to write (causal attention, rotary positions, a GPT
with chapter 7's parameter names, a batch sampler in chapter 7's layout, a
training loop), so no earlier chapter's pack carries it.

Layout every model here shares (chapter 9's exercises rely on it):

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
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from helpers.ch09_inside_gpt import ALPHABET, periodic_batch
from helpers.i18n import t

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


# ------------------------------------------------------------------ training the toy

def train_toy(model: TinyGPT, steps: int = 1000, batch_size: int = 64, lr: float = 3e-3,
              periods: tuple[int, int] = (2, 16), seed: int = 0, progress: bool = True,
              snapshots: list | None = None, snapshot_every: int = 25):
    """Train on repeated random blocks. Every sequence has its own period, so
    no head can solve the task by position alone. Returns (loss per step, seconds).

    With a list as ``snapshots``, a copy of the weights is appended to it as
    ``(step, state_dict)`` before the first step and every ``snapshot_every``
    steps after it (see ``helpers.ch09_inside_gpt.phase_curve``)."""
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


# ------------------------------------------------------------------ chapter 7's character GPT

def char_config(**sizes) -> Config:
    """Chapter 7's GPT: MLPs, LayerNorms, learned positions."""
    return Config(mlp=True, pos="learned", ln=True, **sizes)


CH07_PLACES = ("ch07_model.pt", "../ch07_gpt/ch07_model.pt")


def save_char_gpt(model, chars, path="ch07_model.pt") -> None:
    """Save a chapter 7 GPT (state dict, its config, the vocabulary) where chapter 9 looks for it."""
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


def get_batch(data, block_size, batch_size, generator=None):
    """Chapter 7's batches: ``batch_size`` windows of ``block_size`` tokens, and the same windows shifted by one."""
    i = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offs = torch.arange(block_size)
    return data[i[:, None] + offs], data[i[:, None] + offs + 1]


def train_char_gpt(text: str, steps: int = 600, seed: int = 0):
    """A chapter 7 GPT (the course recipe) trained briefly on ``text``: (model, chars)."""
    import gpt_training  # chapter 7's trainer, handed out with this chapter too

    from helpers import training
    chars = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    r = training.scaled(training.COURSE_RECIPE, threads=1)   # steadier than two threads on a busy machine
    torch.manual_seed(seed)
    model = TinyGPT(char_config(vocab_size=len(chars), n_ctx=r.n_ctx, n_layer=r.n_layer, n_head=r.n_head,
                                d_model=r.d_model))
    gpt_training.train(model, get_batch, data[:n], data[n:], r, steps=steps,
                       eval_every=1e9, eval_tokens=1_024, seed=seed)
    return model.eval(), chars
