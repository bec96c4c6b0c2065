"""Hidden tests of ch09_inside_gpt: prev_token_score, induction_score, ablate_heads.

The score references walk over every (layer, batch, head, position) with plain
Python loops in float64, so they share no code path with a diagonal / gather /
einsum solution. The ablation reference removes a head without hooks: on a
float64 copy of the model it zeroes the head's d_head input columns of the
output projection W_O (what the head contributes is exactly those columns
times its output)."""
from __future__ import annotations

import copy
import functools
import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers.i18n import t

from .cases import COMMON_HINTS
from .core import (
    Bug,
    GradingFailure,
    Raises,
    as_f64,
    call,
    close,
    diagnose,
    ensure_untampered,
    failure,
    passed,
    seeded,
    show,
)
from .probes import Probe

# ---------------------------------------------------------------- the models the checks run (the chapter's layout)

@dataclass(frozen=True)
class Config:
    vocab_size: int = 26
    n_ctx: int = 32
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    mlp: bool = False
    pos: str = "rope"
    ln: bool = False


@functools.cache
def model_class():
    """A GPT of the chapter's layout (``blocks[l].attn.heads``, ``config``; ``model(x, y)`` -> (logits, loss)),
    written here apart from the one the chapter hands out. (Built inside a function: the student's code calls
    it, and a call into the grading module's own functions would count as borrowing an answer.)"""

    def _rotary(x: torch.Tensor) -> torch.Tensor:
        """Adjacent pairs (2i, 2i+1) turned by position·10000^(-2i/d), as complex numbers."""
        n, d = x.shape[-2], x.shape[-1]
        theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angle = torch.outer(torch.arange(n, dtype=torch.float64), theta)
        turned = torch.view_as_complex(x.double().unflatten(-1, (d // 2, 2)).contiguous()) * torch.polar(
            torch.ones_like(angle), angle)
        return torch.view_as_real(turned).flatten(-2).to(x.dtype)

    class _Attention(nn.Module):
        """The chapter's attention layout: c_attn, the hook point ``heads`` (B, n_head, n, d_head), c_proj."""

        def __init__(self, d: int, h: int, rope: bool):
            super().__init__()
            self.rope, self.n_head, self.d_head = rope, h, d // h
            self.c_attn = nn.Linear(d, 3 * d)
            self.heads = nn.Identity()
            self.c_proj = nn.Linear(d, d)

        def forward(self, x):
            B, n, d = x.shape
            q, k, v = (z.unflatten(-1, (self.n_head, self.d_head)).transpose(1, 2) for z in self.c_attn(x).chunk(3, -1))
            if self.rope:
                q, k = _rotary(q), _rotary(k)
            hidden = torch.ones(n, n, dtype=torch.bool, device=x.device).tril().logical_not()
            w = (q @ k.transpose(-2, -1) * self.d_head ** -0.5).masked_fill(hidden, -math.inf).softmax(-1)
            return self.c_proj(self.heads(w @ v).transpose(1, 2).flatten(2))

    class _Block(nn.Module):
        def __init__(self, cfg: Config):
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg.d_model) if cfg.ln else nn.Identity()
            self.attn = _Attention(cfg.d_model, cfg.n_head, cfg.pos == "rope")
            self.ln_2 = nn.LayerNorm(cfg.d_model) if cfg.mlp else None
            self.mlp = nn.Sequential(OrderedDict(c_fc=nn.Linear(cfg.d_model, 4 * cfg.d_model), gelu=nn.GELU(),
                                                 c_proj=nn.Linear(4 * cfg.d_model, cfg.d_model))) if cfg.mlp else None

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x if self.mlp is None else x + self.mlp(self.ln_2(x))

    class Model(nn.Module):

        def __init__(self, cfg: Config):
            super().__init__()
            self.config = cfg
            self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model) if cfg.pos == "learned" else None
            self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.ln else nn.Identity()
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

        def forward(self, idx, targets=None):
            if idx.shape[1] > self.config.n_ctx:
                raise ValueError(f"input of length {idx.shape[1]} is longer than n_ctx = {self.config.n_ctx}")
            h = self.wte(idx)
            if self.wpe is not None:
                h = h + self.wpe.weight[:idx.shape[1]]
            for block in self.blocks:
                h = block(h)
            logits = self.lm_head(self.ln_f(h))
            return logits, None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return Model


def allowed_bug(key, zh_when, en_when, zh_why, en_why) -> Bug:
    """The words for an error raised on an input the exercise allows."""
    return Bug(key, f"你的代码在这种输入上出错了（{zh_when}），而练习允许它：{zh_why}",
               f"your code fails on this input ({en_when}), which the exercise allows: {en_why}")


def allowed(bug: Bug) -> list:
    """Hints for a call on an input the exercise allows: whatever the student's code raises there, the message
    says that this input is allowed (and why), instead of leaving a bare traceback."""
    return [(lambda exc, line: True, bug)]


B_PREV_SHORT = allowed_bug("prev_short_sequence", "n = 2", "n = 2", "两个位置的序列只有一个前一个 token 的位置（i = 1）。",
                           "a sequence of two positions has one position with a previous token (i = 1).")
B_IND_EDGE = allowed_bug("induction_edge_period", "period = 1 或 period = n − 1", "period = 1 or period = n − 1",
                         "period 可以是 1 … n−1 中的任何一个。", "period may be anything from 1 to n−1.")
B_ABL_EMPTY = allowed_bug("ablate_no_heads", "heads = []", "heads = []", "一个头都不去掉时，返回完整模型的损失。",
                          "removing no head returns the full model's loss.")


# ---------------------------------------------------------------- references (float64)

def ref_prev_token_score(attn):
    a = as_f64(attn)
    L, B, H, n, _ = a.shape
    out = torch.zeros(L, H, dtype=torch.float64)
    for l in range(L):
        for h in range(H):
            out[l, h] = sum(a[l, b, h, i, i - 1].item() for b in range(B) for i in range(1, n)) / (B * (n - 1))
    return out


def ref_induction_score(attn, period):
    a = as_f64(attn)
    L, B, H, n, _ = a.shape
    out = torch.zeros(L, H, dtype=torch.float64)
    for l in range(L):
        for h in range(H):
            vals = [a[l, b, h, i, i - period + 1].item() for b in range(B) for i in range(period, n)]
            out[l, h] = sum(vals) / len(vals)
    return out


# ---------------------------------------------------------------- known bugs of the scores

def _diag(a, offset, first=0):
    """a[..., i, i + offset] for the query positions i >= first that have such a key: (..., m)."""
    a = as_f64(a)
    n = a.shape[-1]
    i = torch.arange(max(first, -offset, 0), min(n, n - offset))
    return a[..., i, i + offset]


def _wrapped(a, offset, first):
    """a[..., i, i + offset] for i = first … n−1, a negative column wrapping round as torch's indexing does."""
    a = as_f64(a)
    i = torch.arange(first, a.shape[-1])
    return a[..., i, i + offset]


def _mean_lh(d):
    return d.mean(dim=(1, 3))


def _roll_prev(a):
    a = as_f64(a)
    n = a.shape[-1]
    i = torch.arange(n)
    return a[..., i, i - 1].mean(dim=(1, 3))


def _argmax_prev(a):
    a = as_f64(a)
    n = a.shape[-1]
    hit = (a[..., 1:, :].argmax(-1) == torch.arange(n - 1)).double()
    return hit.mean(dim=(1, 3))


def _pb(key, zh, en, impl):
    return Bug(key, zh, en, impl)


S_FIRST = ("score_first_sequence_only", "只用了 batch 里的第一条序列（attn[:, 0]）：得分要对 batch 里所有序列求平均（dim=1）。",
           "only the first sequence of the batch is used (attn[:, 0]): the score averages over every sequence of the "
           "batch (dim=1).")
S_PERCENT = ("score_percent", "得分乘了 100（百分数）：得分是权重的平均值，落在 0 和 1 之间，完美的头得 1。",
             "the score is multiplied by 100 (a percentage): it is a mean of weights, between 0 and 1, and a perfect "
             "head scores 1.")
P_POS0 = ("prev_counts_position_0", "把位置 0 也算进了平均：位置 0 前面没有 token，只能对位置 1…n−1 求平均（除以 n−1，不是 n）。",
          "position 0 is counted in the average: it has no previous token, so average over positions 1…n−1 only "
          "(divide by n−1, not n).")
P_AXIS = ("prev_wrong_axis", "平均的轴不对：attn 是 (n_layer, B, n_head, n, n)，要对 batch（dim=1）和位置求平均，留下 (n_layer, n_head)。",
          "averaged over the wrong axis: attn is (n_layer, B, n_head, n, n); average over the batch (dim=1) and the "
          "positions, keeping (n_layer, n_head).")
PREV_BUGS = [
    _pb(*P_POS0, lambda a: _diag(a, -1).sum(-1).mean(1) / a.shape[-1]),
    _pb(*P_POS0, _roll_prev),
    _pb("prev_self", "取的是对角线（位置 i 看自己），应是 i → i−1，即对角线下面那一条（diagonal(-1)）。",
        "this is the main diagonal (position i looking at itself); the previous token is i → i−1, the line just "
        "below it (diagonal(-1)).", lambda a: _mean_lh(_diag(a, 0))),
    _pb("prev_query_key_swapped", "query 和 key 的位置反了：attn[..., i, j] 是 query i 看 key j 的权重，前一个 token 是 attn[..., i, i-1]，"
        "不是 attn[..., i-1, i]（那是看下一个 token，因果掩码下全是 0）。",
        "query and key are swapped: attn[..., i, j] is query i's weight on key j, so the previous token is "
        "attn[..., i, i-1], not attn[..., i-1, i] (the next token, all zeros under a causal mask).",
        lambda a: _mean_lh(_diag(a, 1))),
    _pb("prev_two_back", "看的是往前两个位置（i → i−2），应是 i → i−1。", "this is two positions back (i → i−2), not i → i−1.",
        lambda a: _mean_lh(_diag(a, -2))),
    _pb(*P_AXIS, lambda a: _diag(a, -1).mean(dim=(2, 3))),
    _pb(*P_AXIS, lambda a: _diag(a, -1).mean(dim=(0, 3))),
    _pb("prev_sum_not_mean", "求的是和而不是平均：得分应在 0 和 1 之间（一个完美的前一个 token 头得 1）。",
        "a sum instead of a mean: the score must lie between 0 and 1 (a perfect previous-token head scores 1).",
        lambda a: _diag(a, -1).sum(dim=(1, 3))),
    _pb("prev_sum_not_mean", "求的是和而不是平均：得分应在 0 和 1 之间（一个完美的前一个 token 头得 1）。",
        "a sum instead of a mean: the score must lie between 0 and 1 (a perfect previous-token head scores 1).",
        lambda a: _diag(a, -1).sum(-1).mean(1)),
    _pb("prev_block_mean", "对整块 attn[..., 1:, :-1] 求了平均，而不是只取它的对角线 attn[..., i, i-1]。",
        "the whole block attn[..., 1:, :-1] is averaged instead of just its diagonal attn[..., i, i-1].",
        lambda a: as_f64(a)[..., 1:, :-1].mean(dim=(1, 3, 4))),
    _pb("prev_argmax_fraction", "数的是“最大权重落在 i−1 的位置占多少”，而要求的是 i → i−1 的平均权重本身。",
        "this counts how often the largest weight falls on i−1; the score is the mean weight on i−1 itself.",
        _argmax_prev),
    _pb("prev_self", "取的是对角线（位置 i 看自己），应是 i → i−1，即对角线下面那一条（diagonal(-1)）。",
        "this is the main diagonal (position i looking at itself); the previous token is i → i−1, the line just "
        "below it (diagonal(-1)).", lambda a: _diag(a, 0).sum(dim=(1, 3)) / (a.shape[1] * (a.shape[-1] - 1))),
    _pb("prev_all_earlier_keys", "把位置 i 之前所有位置的权重都加起来了（整个下三角，tril(attn, -1)）：只取紧挨着的那一个，"
        "attn[..., i, i-1]。", "the weights on every earlier position are added up (the whole lower triangle, "
        "tril(attn, -1)): take only the one right before, attn[..., i, i-1].",
        lambda a: torch.tril(as_f64(a), -1).sum(dim=(-2, -1)).mean(1) / (a.shape[-1] - 1)),
    _pb("prev_diagonal_default_dims", "attn.diagonal(-1) 不写 dim1、dim2 时取的是第 0、1 维（层和 batch）的斜线，不是最后两维"
        "（query 和 key）：写 attn.diagonal(-1, dim1=-2, dim2=-1)。",
        "attn.diagonal(-1) without dim1 and dim2 takes a diagonal of dims 0 and 1 (layers and batch), not of the last "
        "two (query and key): write attn.diagonal(-1, dim1=-2, dim2=-1).",
        lambda a: as_f64(a).diagonal(-1).mean(dim=(1, 3))),
    _pb("prev_drops_last_position", "最后一个位置 n−1 没有算进去（range(1, n-1)？）：位置是 1…n−1，包括 n−1。",
        "the last position n−1 is left out (range(1, n-1)?): the positions are 1…n−1, n−1 included.",
        lambda a: _mean_lh(_diag(a, -1)[..., :-1])),
    _pb(*P_POS0, lambda a: (as_f64(a)[..., 0, 0] + _diag(a, -1).sum(-1)).mean(1) / a.shape[-1]),
    _pb(*S_FIRST, lambda a: _diag(a, -1)[:, 0].mean(-1)),
    _pb(*S_PERCENT, lambda a: 100 * _mean_lh(_diag(a, -1))),
]


I_AXIS = ("induction_wrong_axis", "平均的轴不对：要对 batch（dim=1）和重复那一半的位置求平均，留下 (n_layer, n_head)。",
          "averaged over the wrong axis: average over the batch (dim=1) and the positions of the repeat, keeping "
          "(n_layer, n_head).")


def _ind(offset_from_period, first=None):
    def impl(a, period):
        return _mean_lh(_diag(a, -period + offset_from_period, period if first is None else first(period)))
    return impl


IND_BUGS = [
    Bug("induction_earlier_occurrence", "看的是前一次出现的那个 token 本身（i − period），而归纳头看的是它后面那一个"
        "（i − period + 1）：它要搬的是“上次这个 token 后面跟着什么”。",
        "this is the earlier occurrence itself (i − period); an induction head looks at the token right after it "
        "(i − period + 1): it copies what followed the token last time.", _ind(0)),
    Bug("induction_two_after", "偏了一格：看的是 i − period + 2，应是 i − period + 1（前一次出现之后紧跟的那个）。",
        "off by one: this is i − period + 2; the successor of the earlier occurrence is i − period + 1.", _ind(2)),
    Bug("induction_counts_first_half", "把第一半的位置也算进来了（例如直接取 diagonal(-(period-1))，包含了 i = period − 1）："
        "只有重复那一半 i = period … n−1 才有“前一次出现”。",
        "positions of the first half are counted too (e.g. the whole diagonal(-(period-1)), which includes "
        "i = period − 1): only the repeat, i = period … n−1, has an earlier occurrence.",
        _ind(1, first=lambda p: p - 1)),
    Bug("induction_previous_token", "没有用 period：这是前一个 token 的得分（i → i−1），归纳得分看 i − period + 1。",
        "period is not used: this is the previous-token score (i → i−1); the induction score looks at "
        "i − period + 1.", lambda a, period: _mean_lh(_diag(a, -1, period))),
    Bug("induction_minus_one", "偏移错了两格：看的是 i − period − 1（前一次出现之前的那个），应是 i − period + 1"
        "（前一次出现之后的那个）。", "off by two: this is i − period − 1 (the token before the earlier occurrence); "
        "use i − period + 1 (the token after it).", lambda a, period: _mean_lh(_wrapped(a, -period - 1, period))),
    Bug("induction_future", "偏移的符号反了：看的是 i + period − 1（未来，因果掩码下为 0），应是 i − period + 1。",
        "the sign of the offset is flipped: this is i + period − 1 (the future, zero under a causal mask); "
        "use i − period + 1.", lambda a, period: _mean_lh(_diag(a, period - 1))),
    Bug(*I_AXIS, lambda a, period: _diag(a, -period + 1, period).mean(dim=(2, 3))),
    Bug(*I_AXIS, lambda a, period: _diag(a, -period + 1, period).mean(dim=(0, 3))),
    Bug("induction_sum_not_mean", "求的是和而不是平均：得分应在 0 和 1 之间。",
        "a sum instead of a mean: the score must lie between 0 and 1.",
        lambda a, period: _diag(a, -period + 1, period).sum(dim=(1, 3))),
    Bug("induction_block_mean", "对整块 attn[..., period:, :n-period+1] 求了平均，而不是只取每行 i 的那一个位置 i − period + 1。",
        "the whole block attn[..., period:, :n-period+1] is averaged instead of the single key i − period + 1 of "
        "each row i.", lambda a, period: as_f64(a)[..., period:, :a.shape[-1] - period + 1].mean(dim=(1, 3, 4))),
    Bug("induction_only_two_copies", "只看了 i = period … 2·period − 1：序列更长（重复不止一次）时，后面的位置也都属于重复部分。",
        "only i = period … 2·period − 1 is used: when the sequence is longer (repeated more than once) the later "
        "positions belong to the repeat too.",
        lambda a, period: _mean_lh(_diag(a, -period + 1, period)[..., :period])),
]
IND_DIAG_DEFAULT = ("induction_diagonal_default_dims",
                    "attn.diagonal(...) 不写 dim1、dim2 时取的是第 0、1 维（层和 batch）的斜线，不是最后两维（query 和 key）："
                    "写 attn.diagonal(1 - period, dim1=-2, dim2=-1)。",
                    "attn.diagonal(...) without dim1 and dim2 takes a diagonal of dims 0 and 1 (layers and batch), not "
                    "of the last two (query and key): write attn.diagonal(1 - period, dim1=-2, dim2=-1).")
IND_BUGS += [
    Bug(*S_FIRST, lambda a, period: _diag(a, -period + 1, period)[:, 0].mean(-1)),
    Bug(*S_PERCENT, lambda a, period: 100 * _mean_lh(_diag(a, -period + 1, period))),
    Bug(*IND_DIAG_DEFAULT, lambda a, period: as_f64(a).diagonal(1 - period)[..., 1:].mean(dim=(1, 3))),
    Bug(*IND_DIAG_DEFAULT, lambda a, period: as_f64(a).diagonal(1 - period).mean(dim=(1, 3))),
]
IND_WRONG_ERROR = Bug("induction_wrong_exception",
                      "period 不在 1 … n−1 之间时抛出的不是 ValueError（例如 assert 抛出的 AssertionError，或者下标越界的 "
                      "IndexError）：要写 raise ValueError(...)。",
                      "for a period outside 1 … n−1 the error raised is not a ValueError (an AssertionError from assert, "
                      "say, or an IndexError from indexing): write raise ValueError(...).")
IND_NO_ERROR = Bug("induction_no_valueerror", "period 不在 1 … n−1 之间时没有抛出 ValueError：那样根本没有重复的那一半。",
                   "no ValueError for a period outside 1 … n−1: then there is no repeat to score.")


# ---------------------------------------------------------------- what a wrong score computed

def _explain_scores(out, attn, period=None) -> Bug | None:
    """When no known bug matches: search the simple wrong answers that compute *some* diagonal average — another
    offset, another range of query positions, a sum in place of a mean — and say which one the student's equals."""
    a = as_f64(attn)
    L, B, H, n, _ = a.shape
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (L, H):
        return None
    got = as_f64(out)
    want_off, want_first = (-1, 1) if period is None else (1 - period, period)
    for off in range(-(n - 1), n):
        d = a.diagonal(off, dim1=-2, dim2=-1).sum(dim=1)                  # (L, H, m): summed over the batch
        first_row = max(0, -off)
        m = d.shape[-1]
        c = torch.cat([torch.zeros(L, H, 1, dtype=torch.float64), d.cumsum(-1)], dim=-1)
        for lo in range(m):
            for hi in range(lo + 1, m + 1):
                i0, i1 = first_row + lo, first_row + hi - 1           # query rows i0 … i1
                if off == want_off and i0 == want_first and i1 == n - 1:
                    continue                                          # the right entries: a wrong divisor at most
                total = c[..., hi] - c[..., lo]
                for how, value in (("mean", total / (B * (hi - lo))), ("sum", total)):
                    if close(got, value, 1e-6, 1e-5):
                        return _entries_bug(off, i0, i1, how, want_off, want_first, n, period)
    total = a.diagonal(want_off, dim1=-2, dim2=-1)[..., want_first - max(0, -want_off):].sum(dim=(1, 3))
    count = B * (n - want_first)
    for k, zh, en in ((B, "只除以了 batch 的大小 B（对位置求的是和）", "divided by the batch size B only (the positions are "
                       "summed)"), (n - want_first, "只除以了位置的个数（对 batch 求的是和）", "divided by the number of "
                       "positions only (the batch is summed)"), (B * n, "除以了 B·n（把没有资格的位置也算进了个数）",
                                                             "divided by B·n (positions that do not qualify are counted)")):
        if k != count and close(got, total / k, 1e-6, 1e-5):
            return Bug("score_wrong_divisor", f"取的元素是对的，但{zh}：平均要除以 B × 位置个数 = {count}。",
                       f"the entries are right, but the sum is {en}: the average divides by B × the number of "
                       f"positions = {count}.")
    return None


def _entries_bug(off, i0, i1, how, want_off, want_first, n, period) -> Bug:
    key = f"i{off:+d}" if off else "i"
    right = "i-1" if period is None else "i-period+1"
    rows_zh = f"i = {i0}…{i1}"
    want_rows = f"i = {want_first}…{n - 1}"
    what_zh = "平均" if how == "mean" else "和"
    what_en = "average" if how == "mean" else "sum"
    return Bug("score_wrong_entries",
               f"你的结果正好是 attn[..., i, {key}] 在 {rows_zh} 上的{what_zh}；要的是 attn[..., i, {right}] 在 "
               f"{want_rows} 上（对 batch 和这些位置）的平均。",
               f"your result is exactly the {what_en} of attn[..., i, {key}] over {rows_zh}; the score is the mean of "
               f"attn[..., i, {right}] over {want_rows} (and over the batch).")


B_SCORE_BATCH = Bug("score_batch_not_averaged", "结果里还留着 batch 这一维：attn 是 (n_layer, B, n_head, n, n)，"
                    "对 batch（dim=1）也要求平均，剩下 (n_layer, n_head)。", "the batch axis is still in the result: attn is "
                    "(n_layer, B, n_head, n, n), so average over the batch (dim=1) too, leaving (n_layer, n_head).")
B_SCORE_ONE_LAYER = Bug("score_one_layer_only", "结果里没有层这一维：每一层的每个头都要一个得分，形状 (n_layer, n_head)；"
                        "不要只取一层（attn[-1]、attn[0]）或对层求平均。", "the layer axis is missing: every head of every "
                        "layer gets a score, shape (n_layer, n_head); do not take one layer (attn[-1], attn[0]) or "
                        "average over the layers.")
B_SCORE_FLAT = Bug("score_flattened", "结果被压成了一维（n_layer·n_head 个数）：形状要保持 (n_layer, n_head)，"
                   "第 l 行是第 l 层的各个头。", "the result is flattened into one dimension (n_layer·n_head numbers): keep "
                   "the shape (n_layer, n_head), row l holding the heads of layer l.")
B_SCORE_TRANSPOSED = Bug("score_transposed", "结果是 (n_head, n_layer)，层和头的顺序反了（多半多写了 .T 或 transpose）："
                         "形状是 (n_layer, n_head)，第 l 行是第 l 层的各个头。", "the result is (n_head, n_layer), layers "
                         "and heads swapped (a .T or transpose too many, most likely): the shape is (n_layer, n_head), "
                         "row l holding the heads of layer l.")


def score_shape_key(shape, L, B, H) -> str | None:
    """The known mistake a score of this shape is, for attention weights of shape (L, B, H, n, n)."""
    shape = tuple(shape)
    if shape in ((L, B, H), (L, B, H, 1)) and (L, B, H) != (L, H):
        return B_SCORE_BATCH.key
    if shape in ((H,), (B, H), (1, H)) and L > 1:
        return B_SCORE_ONE_LAYER.key
    if shape == (H, L) and L != H:
        return B_SCORE_TRANSPOSED.key
    if shape == (L * H,) and L > 1:
        return B_SCORE_FLAT.key
    return None


def _score_shape_bug(out, L, B, H) -> Bug | None:
    if not isinstance(out, torch.Tensor):
        return None
    key = score_shape_key(out.shape, L, B, H)
    return next((b for b in (B_SCORE_BATCH, B_SCORE_ONE_LAYER, B_SCORE_TRANSPOSED, B_SCORE_FLAT) if b.key == key), None)


# ---------------------------------------------------------------- score checks

def _attention(gen, L, B, H, n, causal=True, dtype=torch.float64, sharp=2.5):
    s = torch.randn(L, B, H, n, n, generator=gen, dtype=torch.float64) * sharp
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1).to(dtype)


SCORE_CASES = [  # (label zh, label en, L, B, H, n, causal, dtype)
    ("因果注意力 (2, 3, 4, 8, 8)", "causal attention (2, 3, 4, 8, 8)", 2, 3, 4, 8, True, torch.float32),
    ("B = n_head = 4 的因果注意力", "causal attention with B = n_head = 4", 3, 4, 4, 9, True, torch.float64),
    ("n_layer = B = 3", "n_layer = B = 3", 3, 3, 2, 10, True, torch.float64),
    ("不带掩码的注意力（每行都铺满）", "attention without a mask (every row full)", 2, 2, 3, 7, False, torch.float64),
    ("一层一头、长序列", "one layer, one head, a long sequence", 1, 5, 1, 24, True, torch.float32),
]


SCORE_NOT_TENSOR = Bug("score_not_a_tensor",
                       "返回的不是 torch.Tensor（转成了 numpy 数组、列表或 Python 数）：得分是一个 (n_layer, n_head) 的 "
                       "torch.Tensor，全程用 torch 运算，不要 .numpy()、.tolist()。",
                       "the result is not a torch.Tensor (a numpy array, a list or a Python number): the score is an "
                       "(n_layer, n_head) torch.Tensor; stay with torch operations, no .numpy() or .tolist().")


def _check_scores(fn, what, bugs, args_of, shape_hint, cases, seed, edges=None):
    """Shared loop: run ``fn`` on every case, compare with the reference, diagnose. ``edges(label, n, *extra)``
    gives the hints for a case whose input is an allowed edge (the shortest sequence, period = 1, …)."""
    gen = seeded(seed)
    n_checks = 0
    for zh, en, L, B, H, n, causal, dtype, *extra in cases:
        attn = _attention(gen, L, B, H, n, causal, dtype)
        args, ref = args_of(attn, n, *extra)
        label = t(f"{what}：{zh}", f"{what}: {en}")
        out = call(fn, attn.clone(), *args[1:], what=label, hints=(edges(n, *extra) if edges else []) + COMMON_HINTS)
        expected = ref(*args)
        n_checks += 1
        if not isinstance(out, torch.Tensor):
            raise failure(t(f"{label}：返回值", f"{label}: the result"), t("一个 torch.Tensor", "a torch.Tensor"),
                          type(out).__name__, SCORE_NOT_TENSOR)
        bug = diagnose(out, bugs, *args, expected=expected, match=lambda a, b: close(a, b, 1e-6, 1e-5))
        if tuple(out.shape) != (L, H):
            got = tuple(out.shape)
            raise failure(t(f"{label}：输出形状", f"{label}: output shape"), str((L, H)), str(got),
                          bug or _score_shape_bug(out, L, B, H), hint=shape_hint)
        if not close(out, expected, atol=1e-6, rtol=1e-5):
            bug = bug or _explain_scores(out, attn, extra[0] if extra else None)
            raise failure(label, show(expected), show(out), bug,
                          hint=t("先手算一个小例子：一个头一个 batch，看看你取到的是哪些元素。",
                                 "work one small case by hand: one head, one batch; which entries do you take?"))
    return n_checks


SHAPE_HINT = t("结果应为 (n_layer, n_head)。注意 attn.diagonal() 默认取 dim 0 和 1：写 diagonal(offset, dim1=-2, dim2=-1)。",
               "the result must be (n_layer, n_head). Note that attn.diagonal() uses dims 0 and 1 by default: write "
               "diagonal(offset, dim1=-2, dim2=-1).")


def check_prev_token_score(prev_token_score) -> None:
    what = "prev_token_score"
    n = _check_scores(prev_token_score, what, PREV_BUGS, lambda a, n: ((a,), ref_prev_token_score), SHAPE_HINT,
                      SCORE_CASES + [("最短的序列 n = 2", "the shortest sequence, n = 2", 2, 3, 2, 2, True, torch.float64)],
                      901, edges=lambda n: allowed(B_PREV_SHORT) if n == 2 else [])
    # properties: a perfect previous-token head scores 1, a head that looks at itself scores 0
    L, B, H, m = 2, 2, 3, 6
    attn = torch.eye(m).expand(L, B, H, m, m).clone()
    attn[1, :, 2] = torch.diag(torch.ones(m - 1), -1)
    attn[1, :, 2, 0, 0] = 1.0
    out = call(prev_token_score, attn, what=t(f"{what}：手工构造的前一个 token 头", f"{what}: a hand-made previous-token head"))
    expected = torch.zeros(L, H, dtype=torch.float64)
    expected[1, 2] = 1.0
    n += 1
    if not close(out, expected, 1e-6, 1e-5):
        bug = diagnose(out, PREV_BUGS, attn, expected=expected)
        raise failure(t(f"{what}：L1 H2 完美地看前一个 token，其他头只看自己", f"{what}: L1 H2 is a perfect previous-token "
                        "head, every other head looks at itself"), show(expected), show(out), bug)
    passed(what, n)


def check_induction_score(induction_score) -> None:
    what = "induction_score"
    cases = [c + (p,) for c, p in zip(SCORE_CASES, (4, 3, 5, 2, 12))]
    cases += [("重复不止一次：n = 3·period", "repeated more than once: n = 3·period", 2, 2, 3, 12, True, torch.float64, 4),
              ("period = n − 1", "period = n − 1", 1, 3, 2, 6, True, torch.float64, 5),
              ("period = 1", "period = 1", 2, 2, 2, 5, True, torch.float64, 1)]
    n = _check_scores(induction_score, what, IND_BUGS,
                      lambda a, n, p: ((a, p), ref_induction_score), SHAPE_HINT, cases, 902,
                      edges=lambda n, p: allowed(B_IND_EDGE) if p in (1, n - 1) else [])
    attn = _attention(seeded(903), 2, 2, 2, 6)
    for period in (0, 6, 9):
        label = t(f"{what}(attn, period={period})，n = 6", f"{what}(attn, period={period}), n = 6")
        n += 1
        try:
            out = induction_score(attn, period)
        except ValueError:
            continue
        except NotImplementedError:
            raise GradingFailure(t(f"{label}：还没有实现。", f"{label}: not implemented yet.")) from None
        except Exception as exc:  # noqa: BLE001
            raise failure(label, "ValueError", f"{type(exc).__name__}: {exc}", IND_WRONG_ERROR) from None
        raise failure(label, "ValueError", show(out), IND_NO_ERROR)
    passed(what, n)


# ---------------------------------------------------------------- ablate_heads

def _model(cfg, seed, scale=1.3):
    """A model whose heads all matter: random weights of gain ``scale`` (LayerNorms left as they are). At 1.3 one
    head's removal moves the loss by 1e-3 or more, so the known bugs' losses lie far apart (at gain 1 two of them
    came within 4e-6 of each other), while float32 rounding stays under 1e-6."""
    torch.manual_seed(seed)
    m = model_class()(cfg)
    gen = seeded(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "ln" not in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale / p.shape[-1] ** 0.5)
    return m.eval()


def _loss64(model, x, y, zero=(), edit=None):
    """The loss in float64 on a copy of ``model`` with the heads in ``zero``
    removed by zeroing their columns of W_O (``edit`` may change which)."""
    m = copy.deepcopy(model).double()
    dh = m.config.d_model // m.config.n_head
    with torch.no_grad():
        for layer, head in zero:
            m.blocks[layer].attn.c_proj.weight[:, head * dh:(head + 1) * dh] = 0
        if edit is not None:
            edit(m)
        return m(x, y)[1].item()


def ref_ablate_heads(model, heads, x, y):
    return _loss64(model, x, y, heads)


def _hooked(change):
    """A bug that edits each removed head's output through a hook: change(out, head) in place."""
    def impl(model, heads, x, y):
        m = copy.deepcopy(model).double()
        for layer in range(m.config.n_layer):
            mine = [h for l, h in heads if l == layer]

            def hook(mod, inp, out, mine=mine):
                out = out.clone()
                for h in mine:
                    change(out, h)
                return out
            m.blocks[layer].attn.heads.register_forward_hook(hook)
        with torch.no_grad():
            return m(x, y)[1].item()
    return impl


def _zero_position(out, h):
    out[:, :, h] = 0


def _zero_channel(out, h):
    out[..., h] = 0


def _mean_head(out, h):
    out[:, h] = out[:, h].mean(dim=(0, 1), keepdim=True)


def _half_head(out, h):
    out[:, h] *= 0.5


def _centred_head(out, h):
    out[:, h] -= out[:, h].mean(dim=(0, 1), keepdim=True)


def _batch_item(out, h):
    out[h] = 0


def _hooked_attention_output(model, heads, x, y):
    """Hooks on the whole attention module (output (B, n, d)) zeroing [:, h]: position h of that output."""
    m = copy.deepcopy(model).double()
    for layer, head in heads:
        def hook(mod, inp, out, head=head):
            out = out.clone()
            out[:, head] = 0
            return out
        m.blocks[layer].attn.register_forward_hook(hook)
    with torch.no_grad():
        return m(x, y)[1].item()


def _head_width(n_of):
    """Columns head·w : (head+1)·w of W_O zeroed with a wrong head width w = d_model // n_of(config)."""
    def impl(model, heads, x, y):
        w = model.config.d_model // n_of(model.config)

        def edit(m):
            for layer, head in heads:
                m.blocks[layer].attn.c_proj.weight[:, head * w:(head + 1) * w] = 0
        return _loss64(model, x, y, (), edit)
    return impl


def _interleaved(model, heads, x, y):
    H = model.config.n_head

    def edit(m):
        for layer, head in heads:
            m.blocks[layer].attn.c_proj.weight[:, head::H] = 0
    return _loss64(model, x, y, (), edit)


ABL_BUGS = [
    Bug("ablate_one_head_per_layer",
        "每一层只去掉了一个头：多半是用 {layer: head} 这样的字典收集了 heads，同一层的第二个头把第一个覆盖了。"
        "heads 里同一层可以有好几个头：每一对 (layer, head) 都要去掉（一个头一个钩子，或者每层一个集合）。",
        "only one head per layer is removed: most likely heads were gathered in a dict {layer: head}, and the second "
        "head of a layer overwrote the first. heads may hold several heads of one layer: remove every (layer, "
        "head) pair (one hook per head, or a set per layer).",
        lambda model, heads, x, y: ref_ablate_heads(model, list({layer: h for layer, h in heads}.items()), x, y)),
    Bug("ablate_position_axis", "把错误的轴置零了：heads 的输出是 (B, n_head, n, d_head)，头 h 是 out[:, h]；out[:, :, h] 去掉的是位置 h。",
        "the wrong axis is zeroed: the heads' output is (B, n_head, n, d_head) and head h is out[:, h]; "
        "out[:, :, h] removes position h.",
        _hooked(_zero_position)),
    Bug("ablate_head_dim_axis", "把错误的轴置零了：out[..., h] 去掉的是每个头的第 h 个通道；头 h 是 out[:, h]。",
        "the wrong axis is zeroed: out[..., h] removes channel h of every head; head h is out[:, h].",
        _hooked(_zero_channel)),
    Bug("ablate_interleaved_channels", "在 W_O 的输入上按交错的通道去掉了头（h, h + n_head, …）：头 h 占连续的通道 h·d_head : (h+1)·d_head。",
        "the head is removed from interleaved channels of W_O's input (h, h + n_head, …); head h holds the "
        "contiguous channels h·d_head : (h+1)·d_head.", _interleaved),
    Bug("ablate_ignores_layer", "没有看层号：头 h 在每一层都被去掉了，只应去掉给定那一层的。",
        "the layer is ignored: head h is removed in every layer, not only in the given one.",
        lambda m, hs, x, y: _loss64(m, x, y, [(l, h) for _, h in hs for l in range(m.config.n_layer)])),
    Bug("ablate_layer_head_swapped", "(layer, head) 的顺序读反了：每一对是 (层, 头)。", "the pairs are read as (head, layer); each pair is (layer, head).",
        lambda m, hs, x, y: _loss64(m, x, y, [(h, l) for l, h in hs])),
    Bug("ablate_only_first_pair", "只去掉了列表里的第一个头（循环里提前 return / break？）。",
        "only the first pair of the list is removed (an early return or break in the loop?).",
        lambda m, hs, x, y: _loss64(m, x, y, hs[:1])),
    Bug("ablate_late_binding", "每个钩子都去掉了同一个头：循环里的 lambda 在运行时才读 h，读到的都是最后一个值。"
        "用默认参数固定它：lambda m, i, o, h=h: …",
        "every hook removes the same head: a lambda in a loop reads h when it runs, so all see its last value. "
        "Bind it with a default argument: lambda m, i, o, h=h: …",
        lambda m, hs, x, y: _loss64(m, x, y, [(l, hs[-1][1]) for l, _ in hs])),
    Bug("ablate_mean_not_zero", "用平均值代替了头的输出（均值消融）；本练习要把头的输出置零。",
        "the head's output is replaced by its mean (mean ablation); this exercise zeroes the head's output.",
        _hooked(_mean_head)),
    Bug("ablate_scaled_not_zeroed", "头的输出只乘了 0.5，没有置零：零消融要把 output[:, h] 整个设成 0。",
        "the head's output is multiplied by 0.5, not zeroed: zero ablation sets output[:, h] to 0 entirely.",
        _hooked(_half_head)),
    Bug("ablate_hooked_attention_output", "钩子挂在了整个注意力模块 model.blocks[l].attn 上：它的输出是 (B, n, d_model)，"
        "[:, h] 去掉的是位置 h。钩子要挂在 model.blocks[l].attn.heads 上，那里的输出是 (B, n_head, n, d_head)。",
        "the hook is on the whole attention module model.blocks[l].attn: its output is (B, n, d_model), and [:, h] "
        "removes position h. Hang the hook on model.blocks[l].attn.heads, whose output is (B, n_head, n, d_head).",
        _hooked_attention_output),
    Bug("ablate_nothing_removed", "返回的是完整模型的损失，一个头也没去掉：钩子要在计算 model(x, y) 之前注册，"
        "并且在计算时还挂着。", "this is the full model's loss, with no head removed: register the hooks before "
        "computing model(x, y), and keep them on while it runs.", lambda m, hs, x, y: _loss64(m, x, y)),
    Bug("ablate_head_width_wrong", "每个头的宽度算错了：d_head = d_model // n_head（不是除以 n_layer）。",
        "the head width is wrong: d_head = d_model // n_head (not divided by n_layer).",
        _head_width(lambda c: c.n_layer)),
    Bug("ablate_returns_difference", "返回的是损失的变化（消融后减去原来的），要求返回消融后的损失本身。",
        "this returns the change of the loss (ablated minus original); return the ablated loss itself.",
        lambda m, hs, x, y: _loss64(m, x, y, hs) - _loss64(m, x, y)),
    Bug("ablate_returns_perplexity", "返回的是困惑度 exp(损失)，要求返回消融后的损失本身（交叉熵）。",
        "this returns the perplexity exp(loss); return the ablated loss itself (the cross-entropy).",
        lambda m, hs, x, y: math.exp(_loss64(m, x, y, hs))),
    Bug("ablate_centred_not_zeroed", "头的输出只减去了它的平均值（各个位置上的偏离还留着）：零消融要把 output[:, h] 整个设成 0。",
        "the head's output only had its mean subtracted (its deviations are still there): zero ablation sets "
        "output[:, h] to 0 entirely.", _hooked(_centred_head)),
]
B_BATCH_AXIS = Bug("ablate_batch_axis", "置零的是 output[h]：第 0 维是 batch，这样去掉的是第 h 条序列。输出是 (B, n_head, n, d_head)，"
                   "头 h 是 output[:, h]。", "output[h] is zeroed: dimension 0 is the batch, so this removes sequence h. "
                   "The output is (B, n_head, n, d_head), and head h is output[:, h].")


def _batch_axis(model, heads, x, y):
    if any(h >= x.shape[0] for _, h in heads):
        raise IndexError("a head index past the batch: this mistake raises there")
    return _hooked(_batch_item)(model, heads, x, y)


ABL_BUGS.append(Bug(B_BATCH_AXIS.key, B_BATCH_AXIS.zh, B_BATCH_AXIS.en, _batch_axis))
B_SWAPPED = next(b for b in ABL_BUGS if b.key == "ablate_layer_head_swapped")
B_HEADS_LIST = Bug("ablate_heads_is_a_list", "heads 是 (layer, head) 二元组的列表（可能是空的，也可能有好几对）："
                   "用一个循环逐对取出 (layer, head) 来处理。", "heads is a list of (layer, head) pairs (possibly empty, "
                   "possibly several): take the pairs out one by one in a loop, each as its layer and its head.")
ABL_HINTS = [(Raises(contains=("is out of range",), types=("IndexError",)), B_SWAPPED),     # ModuleList's words
             (Raises(contains=("values to unpack",)), B_HEADS_LIST),
             (Raises(contains=("out of bounds for dimension 0",), types=("IndexError",)), B_BATCH_AXIS)]
ABL_EMPTY = allowed(B_ABL_EMPTY)
ABL_NOT_FLOAT = Bug("ablate_result_not_float", "返回的不是 Python float（而是 NumPy 的数或数组、列表之类）：用 float(loss) 或 "
                    "loss.item() 把损失变成一个 Python 数。", "the result is not a Python float (a NumPy number or array, a "
                    "list, …): turn the loss into a Python number with float(loss) or loss.item().")
ABL_CONVERTED = Bug("ablate_model_converted", "模型的参数被转换成了别的 dtype（model.double()、model.float() 这类调用会原地转换"
                    "整个模型）：调用结束后模型要和原来一模一样。需要更高精度的话，在一个副本上算，或者结束时转换回去。",
                    "the model's parameters were converted to another dtype (model.double(), model.float() and the like "
                    "convert the whole model in place): afterwards the model is exactly as before. For more precision, "
                    "compute on a copy, or convert back at the end.")
ABL_TENSOR = Bug("ablate_returns_tensor", "返回的是张量：用 float(loss) 或 loss.item() 返回一个 Python float。",
                 "this returns a tensor: return a Python float, float(loss) or loss.item().")
ABL_NO_FINALLY = Bug("ablate_hooks_left_after_error", "前向计算出错时钩子没有移除：handle.remove() 要放在 finally 里"
                     "（try: …计算损失… finally: 移除钩子），否则一次出错之后，模型就一直缺着这些头。",
                     "the hooks are not removed when the forward pass fails: put handle.remove() in a finally block "
                     "(try: … compute the loss … finally: remove the hooks), or after one error the model keeps "
                     "missing those heads.")
ABL_HOOKS_LEFT = Bug("ablate_hooks_left", "钩子没有移除：register_forward_hook 返回一个 handle，用完要 handle.remove()"
                     "（放在 finally 里），否则模型以后一直缺着这些头。",
                     "the hooks are never removed: register_forward_hook returns a handle; call handle.remove() "
                     "(in a finally block), or the model keeps missing those heads from then on.")
ABL_WEIGHTS = Bug("ablate_weights_changed", "改了模型的权重（例如把 W_O 的列置零）而没有恢复：练习要求通过前向钩子去掉头，模型本身保持不变。",
                  "the model's weights were changed (e.g. W_O's columns zeroed) and not restored: remove the heads "
                  "through forward hooks and leave the model itself unchanged.")


def _n_hooks(model):
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


ABL_CASES = [  # (config, heads to remove); the empty list last: an answer that fails on it alone says so there
    (Config(n_ctx=16, n_layer=2, n_head=4, d_model=32), [(1, 1)]),
    (Config(n_ctx=16, n_layer=2, n_head=4, d_model=32), [(0, 3), (1, 0)]),
    (Config(n_ctx=16, n_layer=3, n_head=4, d_model=32), [(2, 1), (2, 3), (0, 1)]),
    (Config(vocab_size=11, n_ctx=12, n_layer=3, n_head=2, d_model=24, mlp=True, pos="learned", ln=True), [(1, 1), (2, 0)]),
    (Config(n_ctx=16, n_layer=2, n_head=3, d_model=24), [(0, 2), (0, 2)]),
    (Config(n_ctx=16, n_layer=2, n_head=4, d_model=32), []),
]


def check_ablate_heads(ablate_heads) -> None:
    what = "ablate_heads"
    gen = seeded(904)
    n = 0
    for k, (cfg, heads) in enumerate(ABL_CASES):
        model = _model(cfg, 910 + k)
        x = torch.randint(cfg.vocab_size, (3, cfg.n_ctx - 2), generator=gen)
        y = torch.randint(cfg.vocab_size, (3, cfg.n_ctx - 2), generator=gen)
        before = {name: p.detach().clone() for name, p in model.state_dict().items()}
        state = _state(model)
        shape = f"n_layer={cfg.n_layer}, n_head={cfg.n_head}" + (t("，带 MLP 的 GPT", ", a GPT with MLPs") if cfg.mlp else "")
        label = f"{what}(model [{shape}], heads={heads}, x, y)"
        expected, base = ref_ablate_heads(model, heads, x, y), _loss64(model, x, y)
        out = call(ablate_heads, model, list(heads), x, y, what=label, hints=ABL_HINTS + (ABL_EMPTY if not heads else []))
        n += 1
        if isinstance(out, torch.Tensor) or not isinstance(out, float):
            raise failure(t(f"{label}：返回值类型", f"{label}: type of the result"), "float",
                          type(out).__name__, ABL_TENSOR if isinstance(out, torch.Tensor) else ABL_NOT_FLOAT)
        if not close(out, expected, atol=1e-5, rtol=1e-5):
            bug = diagnose(out, ABL_BUGS, model, heads, x, y, expected=expected,
                           match=lambda a, b: close(a, b, 1e-5, 1e-5))
            raise failure(label, f"{expected:.6f}", show(out), bug,
                          hint=t("在 model.blocks[l].attn.heads 上注册前向钩子，把输出的 [:, h] 置零。",
                                 "register a forward hook on model.blocks[l].attn.heads and zero [:, h] of its output."))
        if _n_hooks(model):
            raise failure(t(f"{label}：之后模型上还挂着钩子", f"{label}: hooks left on the model afterwards"), "0",
                          str(_n_hooks(model)), ABL_HOOKS_LEFT)
        if _state(model) != state:
            what = _state_change(model, state, _state(model))
            raise failure(t(f"{label}：之后模型的状态（原来是 model.eval()）", f"{label}: the model's state afterwards (it "
                            "was in model.eval())"), t("不变", "unchanged"), what, _mode_bug(what))
        converted = [name for name, p in model.state_dict().items() if p.dtype != before[name].dtype]
        if converted:
            raise failure(t(f"{label}：之后模型参数的 dtype", f"{label}: the dtype of the model's parameters afterwards"),
                          str(before[converted[0]].dtype), f"{converted[0]}: {model.state_dict()[converted[0]].dtype}",
                          ABL_CONVERTED)
        changed = [name for name, p in model.state_dict().items() if not torch.equal(p, before[name])]
        if changed:
            raise failure(t(f"{label}：之后模型的参数", f"{label}: the model's parameters afterwards"),
                          t("不变", "unchanged"), t(f"{changed[0]} 变了", f"{changed[0]} changed"), ABL_WEIGHTS)
        with torch.no_grad():
            again = model(x, y)[1].item()
        if not close(again, base, 1e-5, 1e-5):
            raise failure(t(f"{label}：之后完整模型的损失", f"{label}: the full model's loss afterwards"),
                          f"{base:.6f}", f"{again:.6f}", ABL_HOOKS_LEFT)
    n += _hooks_removed_after_an_error(ablate_heads, gen)
    n += _model_kept_and_hooks_used(ablate_heads, gen)
    passed(what, n)


ABL_MODE = Bug("ablate_model_state_changed",
               "调用之后模型的状态变了（训练/评估模式，或参数的 requires_grad）。结束后模型要和原来一模一样：不要切换"
               "模型的 train/eval 模式，也不要改 requires_grad；只用 torch.no_grad() 就不需要改它们（要改的话，"
               "结束时把每一项恢复成它原来的值）。",
               "the model's state changed during the call (its train/eval mode, or its parameters' requires_grad). "
               "Afterwards the model is exactly as before: do not switch it between train and eval mode, do not "
               "change requires_grad; torch.no_grad() alone needs neither (if you do change them, restore each to "
               "the value it had).")
ABL_NO_HOOKS = Bug("ablate_without_hooks",
                   "模型运行的时候上面没有挂任何钩子：头是靠改权重（或模型的副本）去掉的。练习要求用钩子去掉头，"
                   "权重保持不动：例如在 model.blocks[layer].attn.heads 上 register_forward_hook，把 output[:, h] 置零。",
                   "no hook was on the model while it ran: the heads were removed by editing weights (or a copy of "
                   "the model). The exercise removes heads with hooks and leaves the weights alone: for example "
                   "register_forward_hook on model.blocks[layer].attn.heads, zeroing output[:, h].")


ABL_OTHER_HOOKS = Bug("ablate_removed_other_hooks",
                      "调用之前模型上就挂着的一个钩子（不是你的）被去掉了：多半是用 _forward_hooks.clear() 清空了钩子，"
                      "把别人的也清掉了。只移除你自己挂的：register_forward_hook 返回一个 handle，用完调用 handle.remove()。",
                      "a hook that was on the model before the call (not yours) is gone: most likely the hooks were "
                      "cleared with _forward_hooks.clear(), which removes everyone's. Remove only your own: "
                      "register_forward_hook returns a handle; call handle.remove() when done.")


def _state(model) -> tuple:
    return (tuple(m.training for m in model.modules()), tuple(p.requires_grad for p in model.parameters()))


def _state_change(model, before, after) -> str:
    """What changed between two _state()s, in the student's terms."""
    if after[0] != before[0]:
        if model.training:
            return t("model.training 从 False 变成了 True（最后调用了 model.train()？它不管原来是什么模式）",
                     "model.training went from False to True (model.train() at the end? it ignores the mode the "
                     "model was in)")
        return t("model.training 从 True 变成了 False（调用了 model.eval()？）",
                 "model.training went from True to False (model.eval() was called?)")
    changed = [(name, was, now) for (name, _), was, now in zip(model.named_parameters(), before[1], after[1])
               if was != now]
    if not changed:
        return t("参数的 requires_grad 变了", "the parameters' requires_grad changed")
    name, was, now = changed[0]
    return t(f"参数的 requires_grad 变了（{name}：{was} → {now}；每个参数要恢复它自己原来的值，不能一律设成 True 或 False）",
             f"the parameters' requires_grad changed ({name}: {was} → {now}; restore each parameter's own value, "
             "not True or False for all)")


def _mode_bug(what: str) -> Bug:
    return ABL_MODE


def _model_kept_and_hooks_used(ablate_heads, gen) -> int:
    """A model in training mode with gradients on but frozen embeddings, as a student's would be in the middle of
    fine-tuning, with a hook of its own on blocks[0].attn.heads: afterwards its mode, every requires_grad and that
    hook are as they were. And while the model ran, hooks were on it (our own probe, a
    forward pre-hook on the model, counts them; a deep copy of the model carries the probe along)."""
    cfg = ABL_CASES[2][0]
    model = _model(cfg, 940).train()
    model.wte.weight.requires_grad_(False)        # frozen embeddings, as when fine-tuning
    recorded: list[tuple] = []
    theirs = model.blocks[0].attn.heads.register_forward_hook(lambda module, args, out: recorded.append(out.shape))
    x = torch.randint(cfg.vocab_size, (2, cfg.n_ctx - 2), generator=gen)
    y = torch.randint(cfg.vocab_size, (2, cfg.n_ctx - 2), generator=gen)
    heads = [(0, 1), (1, 2)]
    label = f"ablate_heads(model [model.train()], heads={heads}, x, y)"
    before = _state(model)
    seen: list[int] = []

    def probe(module, args):
        seen.append(_n_hooks(module) - 2)           # neither the probe nor the hook that was there before counts

    ensure_untampered(label)
    handle = model.register_forward_pre_hook(probe)
    try:
        ablate_heads(model, heads, x, y)
    except Exception as exc:  # noqa: BLE001
        raise GradingFailure(t(f"{label}：你的代码抛出了 {type(exc).__name__}: {exc}",
                               f"{label}: your code raised {type(exc).__name__}: {exc}")) from None
    finally:
        handle.remove()
    kept = theirs.id in model.blocks[0].attn.heads._forward_hooks
    theirs.remove()
    after = _state(model)
    if after != before:
        what = _state_change(model, before, after)
        raise failure(t(f"{label}：之后模型的状态", f"{label}: the model's state afterwards"), t("不变", "unchanged"),
                      what, _mode_bug(what))
    if not kept:
        raise failure(t(f"{label}：调用之前就挂在 blocks[0].attn.heads 上的一个钩子（不是你的）",
                        f"{label}: a hook (not yours) that was on blocks[0].attn.heads before the call"),
                      t("还在", "still there"), t("被移除了", "removed"), ABL_OTHER_HOOKS)
    if not seen or max(seen) <= 0:
        raise failure(t(f"{label}：模型运行时挂着的钩子", f"{label}: hooks on the model while it ran"),
                      t("至少一个", "at least one"), str(max(seen, default=0)), ABL_NO_HOOKS)
    return 2


def _hooks_removed_after_an_error(ablate_heads, gen) -> int:
    """The exercise says: remove the hooks in a finally block, so that they go even when the forward pass fails.
    A sequence longer than n_ctx makes the model raise; afterwards no hook may be left on it."""
    cfg = ABL_CASES[1][0]
    model = _model(cfg, 930)
    x = torch.randint(cfg.vocab_size, (2, cfg.n_ctx + 3), generator=gen)
    label = t(f"ablate_heads(model, [(1, 2)], x, y)，x 比 n_ctx = {cfg.n_ctx} 长，模型会报错",
              f"ablate_heads(model, [(1, 2)], x, y) with x longer than n_ctx = {cfg.n_ctx}, so the model raises")
    ensure_untampered(label)
    try:
        ablate_heads(model, [(1, 2)], x, x.clone())
    except Exception:  # noqa: BLE001 - the model's own error is expected to pass through
        pass
    if _n_hooks(model):
        raise failure(t(f"{label}：之后模型上的钩子", f"{label}: hooks on the model afterwards"), "0",
                      str(_n_hooks(model)), ABL_NO_FINALLY)
    return 1


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)

ERRORS = {"ablate_heads": ABL_HINTS}

PROBE_CONFIG = Config(vocab_size=10, n_ctx=8, n_layer=2, n_head=4, d_model=24)     # d_head != n_head
PROBE_HEADS = [(0, 1), (1, 2), (1, 3)]      # two heads of one layer, and heads of both layers


def _probe_model():
    model = _model(PROBE_CONFIG, 960)
    with torch.no_grad():
        for q in model.parameters():
            q.copy_(q.round(decimals=3))          # short numbers in the probe file
    return model


def _probe_state(model) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def ref_duplicate_token_score(attn, tokens):
    """The going-further challenge: for each query i with an earlier position j < i holding the same token, the
    weight i puts on all such j together, averaged over those (sequence, i): (n_layer, n_head), float64."""
    a = as_f64(attn)
    L, B, H, n, _ = a.shape
    rows = [(b, i, [j for j in range(i) if int(tokens[b, j]) == int(tokens[b, i])]) for b in range(B) for i in range(n)]
    rows = [(b, i, js) for b, i, js in rows if js]
    out = torch.zeros(L, H, dtype=torch.float64)
    for l in range(L):
        for h in range(H):
            out[l, h] = sum(sum(a[l, b, h, i, j].item() for j in js) for b, i, js in rows) / len(rows)
    return out


def ref_ablate_layer(model, layer, x, y) -> float:
    """The going-further challenge: the loss with everything layer ``layer``'s attention adds to the residual
    stream removed (its output projection's bias included), in float64."""
    m = copy.deepcopy(model).double()
    m.blocks[layer].attn.register_forward_hook(lambda module, args, out: torch.zeros_like(out))
    with torch.no_grad():
        return m(x, y)[1].item()


def probes() -> list[Probe]:
    gen = seeded(905)
    # n_layer, B, n_head all different, so that an average over the wrong axis gives a wrong shape or wrong numbers
    attn = _attention(gen, 2, 3, 4, 6, True, torch.float32)
    attn_rep = _attention(gen, 2, 3, 4, 10, True, torch.float32)          # period 4: the repeat holds 6 positions
    model = _probe_model()
    x = torch.randint(PROBE_CONFIG.vocab_size, (3, 6), generator=gen)
    y = torch.randint(PROBE_CONFIG.vocab_size, (3, 6), generator=gen)
    heads = list(PROBE_HEADS)
    tokens = torch.tensor([[1, 2, 1, 3, 2, 1], [4, 4, 0, 4, 1, 0], [2, 3, 5, 1, 0, 4]])
    return [
        Probe("prev", args=(attn,), reference=ref_prev_token_score, bugs=PREV_BUGS),
        Probe("induction", args=(attn_rep, 4), reference=ref_induction_score, bugs=IND_BUGS),
        Probe("ablate", args=(heads, x, y), reference=lambda hs, x, y: ref_ablate_heads(model, hs, x, y),
              state=_probe_state(model), bugs=ABL_BUGS, run_bug=lambda bug: bug.impl(model, heads, x, y)),
        # the same model (the test loads the parameters of "ablate" once)
        Probe("ablate_none", args=([], x, y), reference=lambda hs, x, y: ref_ablate_heads(model, hs, x, y)),
        # the going-further challenges: numbers to compare with, no known mistakes
        Probe("duplicate", args=(attn, tokens), reference=ref_duplicate_token_score),
        Probe("layer", args=(x, y),
              reference=lambda x, y: torch.tensor([ref_ablate_layer(model, k, x, y) for k in range(2)],
                                                  dtype=torch.float64)),
    ]
