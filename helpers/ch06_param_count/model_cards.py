"""Model cards in numbers (chapter 6).

The configurations of well-known models, and parameter counts *measured* by
building a model of that shape on PyTorch's meta device (shapes only: no
memory, no initialisation cost) and adding up ``p.numel()`` by part. The
numbers the chapter prints come from here, so none of them is typed in by hand.

Nothing here is a formula to copy: the counts come from real ``nn.Module``
objects. During grading ``measure`` refuses to run inside an exercise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn

from ..i18n import t

PARTS = ("embeddings", "attention", "ffn", "norms", "biases")

# set while a student's function is checked (the visible tests and the grader): the exercises ask for a formula
_refusal: str | None = None
REFUSAL = ("练习要你自己数参数：不能调用演示用的 helpers.ch06_param_count.model_cards.measure（检查和评分时它被关闭）。"
           "用公式写出来，或者自己用 nn.Module 搭出模型再数。",
           "the exercise asks you to count the parameters yourself: calling the demo's "
           "helpers.ch06_param_count.model_cards.measure is not allowed (it is switched off while your function is "
           "checked and graded). Write the formula, or build the model from nn.Modules yourself and count.")


@dataclass(frozen=True)
class Card:
    """One published configuration. ``d_ff`` and ``n_kv_head`` matter for the
    LLaMA style only; ``tokens`` is the published number of training tokens."""
    name: str
    style: str                      # "gpt2" or "llama"
    n_layer: int
    d: int
    vocab_size: int
    n_ctx: int
    n_head: int
    d_ff: int | None = None
    n_kv_head: int | None = None
    tied: bool = True
    tokens: float | None = None


KNOWN = (
    Card("GPT-2 small", "gpt2", 12, 768, 50257, 1024, 12),
    Card("GPT-2 medium", "gpt2", 24, 1024, 50257, 1024, 16),
    Card("GPT-2 large", "gpt2", 36, 1280, 50257, 1024, 20),
    Card("GPT-2 XL", "gpt2", 48, 1600, 50257, 1024, 25),
    Card("GPT-3 175B", "gpt2", 96, 12288, 50257, 2048, 96, tokens=300e9),
    Card("LLaMA-2 7B", "llama", 32, 4096, 32000, 4096, 32, d_ff=11008, tied=False, tokens=2e12),
    Card("LLaMA-2 13B", "llama", 40, 5120, 32000, 4096, 40, d_ff=13824, tied=False, tokens=2e12),
    Card("LLaMA-2 70B", "llama", 80, 8192, 32000, 4096, 64, d_ff=28672, n_kv_head=8, tied=False, tokens=2e12),
)


def card(name: str) -> Card:
    for c in KNOWN:
        if c.name == name:
            return c
    raise KeyError(name)


def llama_ffn_size(d: int, multiplier: float | None = None, multiple_of: int = 256) -> int:
    """LLaMA's rule for the SwiGLU hidden size: 2/3 of 4d (so that three
    matrices cost about what two d x 4d matrices cost), times an optional
    multiplier, rounded up to a multiple of ``multiple_of``."""
    hidden = int(2 * 4 * d / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


# ------------------------------------------------------------------ the modules

def _table(rows: int, d: int) -> nn.Embedding:
    """An embedding table without random initialisation (initialising on the
    meta device would pull in torch's compiler stack for nothing)."""
    return nn.Embedding(rows, d, _weight=torch.empty(rows, d))


class _GPT2Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)       # q, k, v
        self.c_proj = nn.Linear(d, d)


class _GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)


class _GPT2Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), _GPT2Attention(d)
        self.ln_2, self.mlp = nn.LayerNorm(d), _GPT2MLP(d)


class _LlamaAttention(nn.Module):
    def __init__(self, d, n_head, n_kv_head):
        super().__init__()
        d_kv = d // n_head * n_kv_head          # grouped-query attention: fewer k, v heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d_kv, bias=False)
        self.v_proj = nn.Linear(d, d_kv, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)


class _LlamaMLP(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate_proj = nn.Linear(d, d_ff, bias=False)
        self.up_proj = nn.Linear(d, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d, bias=False)


class _LlamaBlock(nn.Module):
    def __init__(self, d, n_head, n_kv_head, d_ff):
        super().__init__()
        self.input_norm, self.attn = nn.RMSNorm(d), _LlamaAttention(d, n_head, n_kv_head)
        self.post_attention_norm, self.mlp = nn.RMSNorm(d), _LlamaMLP(d, d_ff)


class ShapeOnlyModel(nn.Module):
    """A GPT-2-style or LLaMA-style model with every parameter and no forward
    pass: what is needed to count."""

    def __init__(self, style, n_layer, d, vocab_size, n_ctx=1024, tied=True, d_ff=None, n_head=1,
                 n_kv_head=None):
        super().__init__()
        if style == "gpt2":
            self.wte = _table(vocab_size, d)
            self.wpe = _table(n_ctx, d)
            self.h = nn.ModuleList(_GPT2Block(d) for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(d)
        elif style == "llama":
            d_ff = llama_ffn_size(d) if d_ff is None else d_ff
            self.wte = _table(vocab_size, d)
            self.h = nn.ModuleList(_LlamaBlock(d, n_head, n_kv_head or n_head, d_ff) for _ in range(n_layer))
            self.ln_f = nn.RMSNorm(d)
        else:
            raise ValueError(f"style must be 'gpt2' or 'llama', not {style!r}")
        self.lm_head = nn.Linear(d, vocab_size, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight   # one matrix, used twice


def _part(name: str, p: torch.Tensor) -> str:
    if name.startswith(("wte", "wpe", "lm_head")):
        return "embeddings"
    if "norm" in name or ".ln_" in name or name.startswith("ln_"):
        return "norms"
    if name.endswith(".bias"):
        return "biases"
    return "attention" if ".attn." in name else "ffn"


def measure(style: str, n_layer: int, d: int, vocab_size: int, n_ctx: int = 1024, tied: bool = True,
            d_ff: int | None = None, n_head: int = 1, n_kv_head: int | None = None) -> dict[str, int]:
    """Build the model on the meta device and count its parameters by part
    (embeddings / attention / ffn / norms / biases; a LayerNorm's bias counts
    as a norm). A shared (tied) matrix is counted once, as
    ``model.parameters()`` yields it once."""
    if _refusal:
        raise RuntimeError(_refusal)
    return dict(_measure(style, n_layer, d, vocab_size, n_ctx, tied, d_ff, n_head, n_kv_head))


@lru_cache(maxsize=256)
def _measure(style, n_layer, d, vocab_size, n_ctx, tied, d_ff, n_head, n_kv_head) -> tuple:
    with torch.device("meta"):
        model = ShapeOnlyModel(style, n_layer, d, vocab_size, n_ctx, tied, d_ff, n_head, n_kv_head)
    counts = dict.fromkeys(PARTS, 0)
    for name, p in model.named_parameters():       # named_parameters() skips the tied duplicate
        counts[_part(name, p)] += p.numel()
    return tuple(counts.items())


def measure_card(c: Card) -> dict[str, int]:
    return measure(c.style, c.n_layer, c.d, c.vocab_size, c.n_ctx, c.tied, c.d_ff, c.n_head, c.n_kv_head)


def rule_of_thumb(n_layer: int, d: int, vocab_size: int, tied: bool = True) -> int:
    """The quick estimate: 12·L·d² for the blocks plus the vocabulary × d
    matrix (twice when the LM head is not tied to the embedding)."""
    return 12 * n_layer * d * d + vocab_size * d * (1 if tied else 2)


def training_flops(n_params: float, n_tokens: float) -> float:
    """About 6 FLOPs per parameter per token: 2 forward (a multiply and an add),
    4 backward (gradients for the activations and for the weights)."""
    return 6.0 * n_params * n_tokens


def human(n: float) -> str:
    """124439808 -> '124.4M'."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}"


def table_rows(gpt2_params=None, llama_params=None) -> list[dict]:
    """One row per known model: the rule of thumb, the measured count, the
    error, and what the student's functions say (when given)."""
    rows = []
    for c in KNOWN:
        exact = sum(measure_card(c).values())
        approx = rule_of_thumb(c.n_layer, c.d, c.vocab_size, c.tied)
        row = {"card": c, "approx": approx, "exact": exact, "error": approx / exact - 1}
        fn = gpt2_params if c.style == "gpt2" else llama_params
        if fn is not None:
            try:
                row["yours"] = (fn(c.n_layer, c.d, c.vocab_size, c.n_ctx, tied=c.tied) if c.style == "gpt2"
                                else fn(c.n_layer, c.d, c.vocab_size, c.d_ff, tied=c.tied))
            except NotImplementedError:   # an unfinished exercise must not break the table
                row["yours"] = t("还没有完成", "not done yet")
            except Exception as exc:
                row["yours"] = t(f"出错：{type(exc).__name__}", f"error: {type(exc).__name__}")
        rows.append(row)
    return rows


def _pad(text: str, width: int, right: bool = True) -> str:
    """Pad to ``width`` display columns: a Chinese character takes two."""
    import unicodedata

    cols = sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)
    fill = " " * max(0, width - cols)
    return fill + text if right else text + fill


def format_table(rows: list[dict]) -> str:
    with_yours = any("yours" in r for r in rows)
    names = (t("模型", "model"), "L", "d", t("词表", "vocab"), "12Ld²+Vd", t("实测", "measured"), t("误差", "error"))
    head = "".join(_pad(name, width, right=i > 0) for i, (name, width) in enumerate(zip(names, (13, 4, 7, 8, 11, 16, 8))))
    if with_yours:
        head += t("   你的函数", "   your function")
    lines = [head]
    for r in rows:
        c = r["card"]
        line = (f"{c.name:<13}{c.n_layer:>4}{c.d:>7}{c.vocab_size:>8}{human(r['approx']):>11}"
                f"{r['exact']:>16,}{r['error']:>+8.2%}")
        if "yours" in r:
            y = r["yours"]
            if not isinstance(y, (int, float)):
                line += f"   {y}"
            elif c.n_kv_head and c.n_kv_head != c.n_head:
                line += f"   {y:,.0f} *"
            else:
                line += f"   {y:,.0f} " + ("✓" if y == r["exact"] else "✗")
        if c.n_kv_head and c.n_kv_head != c.n_head:
            line += t(f"  ← GQA：{c.n_head} 个查询头只配 {c.n_kv_head} 组 K/V",
                      f"  ← GQA: {c.n_kv_head} K/V heads for {c.n_head} query heads")
        lines.append(line)
    if with_yours and any(r["card"].n_kv_head for r in rows):
        lines.append(t("* llama_params 假设每个头都有自己的 K、V（注意力 4d²），所以对 GQA 模型会多算。",
                       "* llama_params assumes every head has its own K and V (attention 4d²), so it "
                       "overcounts a GQA model."))
    return "\n".join(lines)
