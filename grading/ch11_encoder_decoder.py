"""Hidden tests of ch11_encoder_decoder: padding_mask, cross_attention,
EncoderLayer, DecoderLayer, greedy_decode.

The references are written here in float64, head by head from the weights of
the student's nn.MultiheadAttention modules; the layers are also loaded into
torch's own nn.TransformerEncoderLayer / nn.TransformerDecoderLayer
(norm_first=True, batch_first=True, GELU, no dropout) and compared. Known bugs
are switches of the references.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from helpers.i18n import t

from .cases import COMMON_HINTS, Earlier, on_its_own
from .core import (
    ATTENTION_FAMILY,
    Bug,
    GradingFailure,
    Raises,
    as_f64,
    call,
    close,
    diagnose,
    failure,
    forbidden,
    passed,
    seeded,
    show,
)
from .probes import Probe

# ================================================================ crashes in plain words

def allowed_bug(key, zh_when, en_when, zh_why, en_why) -> Bug:
    """The words for an error raised on an input the exercise allows."""
    return Bug(key, f"你的代码在这种输入上出错了（{zh_when}），而练习允许它：{zh_why}",
               f"your code fails on this input ({en_when}), which the exercise allows: {en_why}")


def allowed(bug: Bug) -> list:
    """Hints for a call on an input the exercise allows: whatever the student's code raises there, the message
    says that this input is allowed (and why), instead of leaving a bare traceback."""
    return [(lambda exc, line: True, bug)]


B_PAD_ZERO = allowed_bug("padding_mask_length_0", "某个序列的长度是 0", "a sequence has length 0",
                         "长度为 0 的序列整行都是 False。", "a sequence of length 0 gives a row of False.")
B_PAD_N1 = allowed_bug("padding_mask_n_1", "n = 1", "n = 1", "只有一个位置的批次也是合法的。",
                       "a batch with a single position is valid too.")
B_CROSS_NONE = allowed_bug("cross_mask_none", "memory_mask=None", "memory_mask=None",
                           "memory_mask 为 None 时不屏蔽任何位置：先判断它是不是 None，再用它。",
                           "memory_mask=None means no masking: check whether it is None before using it.")
B_ENC_NONE = allowed_bug("encoder_mask_none", "src_mask=None", "src_mask=None",
                         "src_mask 为 None 时不屏蔽任何位置：先判断它是不是 None，再取反。",
                         "src_mask=None means no masking: check whether it is None before negating it.")
B_DEC_NONE = allowed_bug("decoder_mask_none", "memory_mask=None", "memory_mask=None",
                         "memory_mask 为 None 时交叉注意力不屏蔽任何位置：先判断它是不是 None，再取反。",
                         "memory_mask=None means the cross-attention masks nothing: check whether it is None before "
                         "negating it.")


def passes(verify):
    """A probe for ``Earlier`` made of the earlier exercise's own hidden checks (``verify(theirs)`` raises when
    they fail): a correct version stands in exactly when that exercise loses its own points."""
    def probe(theirs) -> bool:
        with torch.enable_grad():
            verify(theirs)
        return True
    return probe


SUPER_HINTS = [(Raises(contains=("before Module.__init__() call",)), Bug(
    "super_init_missing", "__init__ 里没有先调用 super().__init__()：nn.Module 要先初始化，才能给它添加子模块和参数。",
    "__init__ does not call super().__init__() first: an nn.Module must be set up before submodules and "
    "parameters can be added to it."))]


# ================================================================ padding_mask

PAD_BUGS = [
    Bug("padding_mask_inverted",
        "掩码反了：True 标在了填充位置上。本课程的约定是 True = 真实 token（可以被关注），"
        "所以位置 j 为 True 当且仅当 j < lengths[b]。",
        "the mask is inverted: True marks the padding. The course's convention is True = a real token "
        "(may be attended to), so position j is True exactly when j < lengths[b].",
        lambda lengths, n: torch.arange(n) >= lengths[:, None]),
    Bug("padding_mask_off_by_one",
        "差一位：用了 j <= lengths[b]，把第一个填充位置也当成了真实 token。长度为 L 的序列占位置 0…L−1。",
        "off by one: j <= lengths[b] counts the first padding position as real. A sequence of length L "
        "occupies positions 0…L−1.",
        lambda lengths, n: torch.arange(n) <= lengths[:, None]),
    Bug("padding_mask_left_padded",
        "把填充放在了左边（True 在序列末尾）：本章的批次是右填充的，真实 token 在前、<pad> 在后。",
        "the padding is put on the left (True at the end of the row): this chapter's batches are padded on "
        "the right, real tokens first and <pad> after them.",
        lambda lengths, n: torch.arange(n) >= n - lengths[:, None]),
    Bug("padding_mask_drops_last",
        "差一位（少了一个）：每个序列的最后一个真实 token 被当成了填充，例如 arange 从 1 开始或写成了 j < lengths[b] − 1。",
        "off by one the other way: the last real token of every sequence is treated as padding, e.g. an arange "
        "that starts at 1, or j < lengths[b] − 1.",
        lambda lengths, n: torch.arange(n) < lengths[:, None] - 1),
]
B_PAD_SHAPE_T = Bug("padding_mask_transposed",
                    "形状转置了：结果是 (n, B)。应为 (B, n)：每个序列一行，例如 arange(n)[None, :] < lengths[:, None]。",
                    "the result is transposed, (n, B). It must be (B, n), one row per sequence, e.g. "
                    "arange(n)[None, :] < lengths[:, None].")
B_PAD_NOT_BOOL = Bug("padding_mask_not_bool", "掩码不是 bool 张量：比较运算（<）直接给出 bool；不要再 .float()、.int()、"
                     ".long()，也不要用 zeros/ones 填 0 和 1。", "the mask is not a bool tensor: a comparison (<) gives "
                     "bool directly; do not call .float(), .int() or .long(), nor fill zeros/ones with 0 and 1.")
B_PAD_AXES = Bug("padding_mask_no_new_axes", "arange(n) 和 lengths 没有各加一个维度：(n,) 和 (B,) 不能直接比较。写 "
                 "torch.arange(n)[None, :] < lengths[:, None]，广播成 (B, n)。", "arange(n) and lengths each need one "
                 "more axis: (n,) and (B,) cannot be compared directly. Write torch.arange(n)[None, :] < "
                 "lengths[:, None], which broadcasts to (B, n).")
B_PAD_NOT_TENSOR = Bug("padding_mask_not_a_tensor", "返回的不是张量（Python 列表、NumPy 数组……）：掩码要直接用在分数张量上，"
                       "应返回 (B, n) 的 bool torch.Tensor，一个比较运算就够了：torch.arange(n)[None, :] < lengths[:, None]。",
                       "the result is not a tensor (a Python list, a NumPy array, ...): the mask goes straight onto score "
                       "tensors, so return a (B, n) bool torch.Tensor; one comparison does it: "
                       "torch.arange(n)[None, :] < lengths[:, None].")
PAD_HINTS = [(Raises(contains=("must match the size of tensor",)), B_PAD_AXES)]
B_PAD_EXTRA_DIMS = Bug("padding_mask_extra_dims",
                       "掩码多了维度：形状是 (B, 1, 1, n)，题目要的是 (B, n)。插入维度（[:, None, None, :]）是用它的地方的事。",
                       "the mask has extra axes: its shape is (B, 1, 1, n), the exercise asks for (B, n). Adding axes "
                       "([:, None, None, :]) is for the code that uses it.")
B_PAD_SHAPE_MAX = Bug("padding_mask_uses_max_length",
                      "宽度用了 lengths.max() 而不是参数 n：批次被填充到 n，掩码也必须有 n 列（哪怕最长的序列比 n 短）。",
                      "the width is lengths.max() instead of the argument n: the batch is padded to n, so the mask "
                      "needs n columns (even when the longest sequence is shorter than n).")


def check_padding_mask(padding_mask) -> None:
    passed("padding_mask", _padding_checks(padding_mask))


def _padding_checks(padding_mask) -> int:
    """Exercise 1's hidden checks; also the probe for greedy_decode, which calls padding_mask."""
    what = "padding_mask"
    cases = [([3, 1, 4], 4), ([2, 5], 7), ([1], 1), ([6, 6, 2, 3], 6), ([1, 2], 5), ([0, 3], 3)]
    for lengths, n in cases:
        lens = torch.tensor(lengths)
        label = f"{what}(lengths={lengths}, n={n})"
        edge = allowed(B_PAD_ZERO) if 0 in lengths else allowed(B_PAD_N1) if n == 1 else []
        out = call(padding_mask, lens.clone(), n, what=label, hints=PAD_HINTS + edge)
        expected = torch.arange(n)[None, :] < lens[:, None]
        B = len(lengths)
        if not isinstance(out, torch.Tensor):
            raise failure(t(f"{label}：返回值", f"{label}: the result"), t("一个 torch.Tensor", "a torch.Tensor"),
                          type(out).__name__, B_PAD_NOT_TENSOR)
        if tuple(out.shape) != (B, n):
            got = tuple(out.shape)
            bug = (B_PAD_SHAPE_T if got == (n, B) else B_PAD_SHAPE_MAX if got == (B, max(lengths)) else
                   B_PAD_EXTRA_DIMS if got == (B, 1, 1, n) else None)
            raise failure(t(f"{label}：输出形状", f"{label}: output shape"), str((B, n)), str(got), bug)
        if out.dtype != torch.bool:
            raise failure(t(f"{label}：dtype", f"{label}: dtype"), "torch.bool", str(out.dtype), B_PAD_NOT_BOOL)
        if not torch.equal(out, expected):
            bug = diagnose(out, PAD_BUGS, lens, n, expected=expected, match=lambda a, b: torch.equal(a, b))
            raise failure(label, str(expected.int().tolist()), str(out.int().tolist()), bug,
                          hint=t("位置 j 为 True 当且仅当 j < lengths[b]。", "position j is True exactly when j < lengths[b]."))
    broadcast = out[:, None, None, :]
    if tuple(broadcast.shape) != (len(cases[-1][0]), 1, 1, cases[-1][1]):
        raise GradingFailure(t("mask[:, None, None, :] 应为 (B, 1, 1, n)。", "mask[:, None, None, :] must be (B, 1, 1, n)."))
    return len(cases) + 1


def padding_mask_stand_in(lengths, n):
    """A correct padding_mask (exercise 1) for a student's greedy_decode to call."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


# ================================================================ cross_attention

def _softmax64(s):
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    return e / e.sum(dim=-1, keepdim=True)


def ref_cross(x, memory, w_q, w_k, w_v, memory_mask=None, *, swap=False, scale="d_k", mask_mode="keys",
              causal=False, softmax_dim=-1, values="memory", scores_out=False, queries="x", keys="memory",
              fill=float("-inf")):
    """Single-head cross-attention in float64; the keywords switch on known bugs."""
    x, memory, w_q, w_k, w_v = (as_f64(a) for a in (x, memory, w_q, w_k, w_v))
    if swap:
        x, memory = memory, x
    q = (x if queries == "x" else memory) @ w_q
    k = (memory if keys == "memory" else x) @ w_k
    v = {"memory": memory @ w_v, "x": x @ w_v, "w_k": memory @ w_k, "raw": memory}[values]
    denom = {"d_k": math.sqrt(q.shape[-1]), "d": math.sqrt(x.shape[-1]), "none": 1.0, "no_sqrt": q.shape[-1],
             "d_v": math.sqrt(w_v.shape[-1])}[scale]
    s = torch.einsum("bic,bjc->bij", q, k) / denom
    allowed = torch.ones_like(s, dtype=torch.bool)
    if memory_mask is not None and mask_mode != "none":
        m = memory_mask.bool()
        if mask_mode == "queries":
            allowed = allowed & m[:, :, None]
        elif mask_mode == "both":
            allowed = allowed & m[:, :, None] & m[:, None, :]
        elif mask_mode == "inverted":
            allowed = allowed & ~m[:, None, :]
        else:
            allowed = allowed & m[:, None, :]
    if causal:
        allowed = allowed & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    if mask_mode == "after_softmax":
        w = torch.softmax(s, dim=softmax_dim) * allowed
    else:
        s = s.masked_fill(~allowed, fill)
        w = _softmax64(s) if softmax_dim == -1 else torch.softmax(s, dim=softmax_dim)
    return (w @ v, s) if scores_out else (w @ v, w)


def _cross_bug(key, zh, en, **kw):
    return Bug(key, zh, en, lambda *a: ref_cross(*a, **kw))


CROSS_BUGS = [
    _cross_bug("cross_queries_from_memory",
               "query 和 key/value 的来源弄反了：query 应来自解码器的 x（q = x @ w_q），key 和 value 来自编码器的输出 "
               "memory（k = memory @ w_k，v = memory @ w_v）。每个输出位置（目标 token）对源序列做一次检索。",
               "queries and keys/values come from the wrong sides: the queries come from the decoder's x "
               "(q = x @ w_q), keys and values from the encoder's output memory (k = memory @ w_k, "
               "v = memory @ w_v). Each target position looks up the source.", swap=True),
    _cross_bug("cross_mask_inverted",
               "memory_mask 用反了：True 表示真实的源 token（可以被关注），要屏蔽的是 ~memory_mask 的位置。",
               "memory_mask is used the wrong way round: True marks a real source token (may be attended to); "
               "the positions to hide are ~memory_mask.", mask_mode="inverted"),
    _cross_bug("cross_mask_on_queries",
               "掩码加在了 query（行）上而不是 key（列）上：填充的源位置应该从每一行里消失，"
               "即 scores.masked_fill(~memory_mask[:, None, :], -inf)，形状 (B, 1, n_s)。",
               "the mask is applied to the queries (rows) instead of the keys (columns): padded source positions "
               "must vanish from every row, i.e. scores.masked_fill(~memory_mask[:, None, :], -inf), "
               "shape (B, 1, n_s).", mask_mode="queries"),
    _cross_bug("cross_mask_ignored",
               "没有使用 memory_mask：填充的源位置也分到了注意力权重。",
               "memory_mask is ignored: padded source positions receive attention weight.", mask_mode="none"),
    _cross_bug("cross_mask_after_softmax",
               "掩码放在了 softmax 之后（把权重乘以 0）：剩下的权重加起来不再是 1。要在 softmax 之前把分数设成 -inf。",
               "the mask is applied after softmax (weights multiplied by 0): the remaining weights no longer add "
               "up to 1. Set the scores to -inf before softmax.", mask_mode="after_softmax"),
    _cross_bug("cross_causal_mask",
               "交叉注意力里加了因果掩码：目标位置 i 不应该只看源位置 j ≤ i——源句子是整句已知的，每个目标位置都可以看全部源 token。",
               "a causal mask in cross-attention: target position i must not be limited to source positions "
               "j ≤ i — the whole source is known, and every target position may look at all of it.", causal=True),
    _cross_bug("cross_scaled_by_sqrt_d",
               "分数除的是 √d（x 的宽度），而不是 √d_k（q、k 的宽度，即 w_q 的列数）。",
               "the scores are divided by √d (the width of x) instead of √d_k (the width of q and k, the "
               "number of columns of w_q).", scale="d"),
    _cross_bug("cross_no_scaling", "分数没有除以 √d_k。", "the scores are not divided by √d_k.", scale="none"),
    _cross_bug("cross_divided_by_d_k", "分数除的是 d_k，不是 √d_k：q kᵀ / math.sqrt(d_k)。",
               "the scores are divided by d_k, not √d_k: q kᵀ / math.sqrt(d_k).", scale="no_sqrt"),
    _cross_bug("cross_values_with_w_k", "value 用的是 w_k：v = memory @ w_v，key 和 value 各有自己的投影。",
               "the values use w_k: v = memory @ w_v; keys and values have projections of their own.", values="w_k"),
    _cross_bug("cross_softmax_wrong_dim",
               "softmax 沿错误的维度：每个 query 的一行权重（沿源位置，dim=-1）要加起来等于 1。",
               "softmax runs over the wrong dimension: each query's row of weights (over the source positions, "
               "dim=-1) must add up to 1.", softmax_dim=-2),
    _cross_bug("cross_weights_before_softmax",
               "返回的 weights 是 softmax 之前的分数（屏蔽处是 -inf）：要返回的是 softmax 之后、每行加起来等于 1 的权重，"
               "也就是算 out = weights @ v 用的那个张量。", "the weights you return are the scores before softmax (-inf "
               "where masked): return the weights after softmax, each row adding up to 1 — the tensor that gives "
               "out = weights @ v.", scores_out=True),
    _cross_bug("cross_everything_from_memory",
               "query 也取自 memory：q 要由解码器的 x 投影（q = x @ w_q），只有 key 和 value 来自 memory。",
               "the queries come from memory too: q is projected from the decoder's x (q = x @ w_q); only the keys "
               "and values come from memory.", queries="memory"),
    _cross_bug("cross_is_self_attention",
               "key 和 value 也取自 x：这是解码器自己的自注意力，不是交叉注意力。k = memory @ w_k，v = memory @ w_v。",
               "the keys and values come from x too: that is the decoder's own self-attention, not cross-attention. "
               "k = memory @ w_k, v = memory @ w_v.", keys="x", values="x"),
    _cross_bug("cross_scaled_by_sqrt_d_v", "分数除的是 √d_v（value 的宽度，w_v 的列数），而不是 √d_k（q、k 的宽度）。",
               "the scores are divided by √d_v (the width of the values, w_v's columns) instead of √d_k (the width "
               "of q and k).", scale="d_v"),
    _cross_bug("cross_mask_both_ways",
               "掩码把行和列都遮住了：填充只需要从 key（列）里去掉；query 一侧是目标序列，它的每个位置都要算出结果。",
               "the mask hides both rows and columns: the padding only has to go from the keys (columns); the query "
               "side is the target, and every one of its positions needs a result.", mask_mode="both"),
    _cross_bug("cross_mask_fill_zero",
               "填充位置的分数被设成了 0，而不是 −∞：e⁰ = 1，它们照样分到权重。要在 softmax 之前设成 −∞。",
               "the padded positions' scores are set to 0, not −∞: e⁰ = 1, so they still get weight. Set them to −∞ "
               "before the softmax.", fill=0.0),
    _cross_bug("cross_softmax_wrong_dim",
               "softmax 沿错误的维度：每个 query 的一行权重（沿源位置，dim=-1）要加起来等于 1。",
               "softmax runs over the wrong dimension: each query's row of weights (over the source positions, "
               "dim=-1) must add up to 1.", softmax_dim=0),
    _cross_bug("cross_out_without_w_v",
               "out 直接用 memory 加权，没有经过 w_v：value 要先投影，v = memory @ w_v，out = weights @ v，形状 (B, n_t, d_v)。",
               "out weighs memory itself, which never went through w_v: project the values first, v = memory @ w_v, "
               "out = weights @ v, of shape (B, n_t, d_v).", values="raw"),
    _cross_bug("cross_values_from_x",
               "value 也取自 x：key 和 value 都来自编码器的输出，v = memory @ w_v；权重是对源位置的，要加权的也是源位置的 value。",
               "the values are taken from x too: keys and values both come from the encoder's output, "
               "v = memory @ w_v; the weights are over source positions, so they average the source's values.",
               values="x"),
]
B_CROSS_MASK_SHAPE = Bug("cross_mask_on_queries",
                         "掩码的形状对不上分数 (B, n_t, n_s)：memory_mask 是 (B, n_s)，要先变成 (B, 1, n_s)"
                         "（memory_mask[:, None, :]），作用在 key（列）上，而不是 [:, :, None]（行）。",
                         "the mask does not broadcast against the scores (B, n_t, n_s): memory_mask is (B, n_s) and "
                         "must become (B, 1, n_s) (memory_mask[:, None, :]), acting on the keys (columns), not "
                         "[:, :, None] (the rows).")
B_CROSS_SWAP_SHAPE = Bug("cross_queries_from_memory", CROSS_BUGS[0].zh, CROSS_BUGS[0].en)
B_CROSS_K_T = Bug("cross_k_not_transposed", "分数要用 k 的转置：q @ k.transpose(-2, -1)（或 torch.bmm(q, k.transpose(1, 2))），"
                  "形状 (B, n_t, d_k) @ (B, d_k, n_s) = (B, n_t, n_s)。", "the scores need k transposed: "
                  "q @ k.transpose(-2, -1) (or torch.bmm(q, k.transpose(1, 2))), shapes (B, n_t, d_k) @ (B, d_k, n_s) "
                  "= (B, n_t, n_s).")
B_CROSS_ORDER = Bug("cross_returns_weights_first", "返回值的顺序反了：先 out 再 weights，return out, weights。",
                    "the results come in the wrong order: out first, then weights, return out, weights.")
CROSS_HINTS = [(Raises(contains=("masked_fill_ only supports boolean masks",)), Bug(
                   "mask_not_bool", "masked_fill 的掩码要是 bool 张量：memory_mask 本身就是 bool，用 ~memory_mask[:, None, :]，"
                   "不要转成 float。", "masked_fill needs a bool mask: memory_mask is bool already, so use "
                   "~memory_mask[:, None, :] and do not turn it into floats.")),
               (Raises(contains=("must match the size",), line=("mask",)), B_CROSS_MASK_SHAPE),
               (Raises(contains=("Expected size for first two dimensions of batch2",)), B_CROSS_K_T),
               (Raises(contains=("must match the size", "cannot be multiplied")), B_CROSS_SWAP_SHAPE)]


def _cross_cases(gen):
    # (label, B, n_t, n_s, d, d_k, d_v, lengths or None)
    rows = [("n_t = n_s = 4", 2, 4, 4, 6, 3, 5, [4, 2]),        # first: mistakes here give numbers, not errors
            ("B=2, n_t=5, n_s=3, d=8, d_k=4, d_v=6", 2, 5, 3, 8, 4, 6, [3, 2]),
            ("memory_mask=None", 3, 2, 6, 8, 8, 4, None),
            ("n_t=1", 2, 1, 5, 4, 2, 3, [5, 1]),
            ("n_t=6, n_s=6, d_k=2", 1, 6, 6, 10, 2, 7, [3])]
    for label, B, n_t, n_s, d, d_k, d_v, lengths in rows:
        x = torch.randn(B, n_t, d, generator=gen, dtype=torch.float64)
        mem = torch.randn(B, n_s, d, generator=gen, dtype=torch.float64)
        ws = [torch.randn(d, c, generator=gen, dtype=torch.float64) for c in (d_k, d_k, d_v)]
        mask = None if lengths is None else torch.arange(n_s)[None] < torch.tensor(lengths)[:, None]
        yield label, (x, mem, *ws, mask)


def _shape(a):
    return tuple(a.shape) if isinstance(a, torch.Tensor) else None


B_CROSS_ONE = Bug("cross_returns_one", "只返回了一个张量：题目要的是 (out, weights) 两个，热力图要用 weights。",
                  "only one tensor comes back: the exercise asks for the two (out, weights); the heatmaps need the "
                  "weights.")


def _check_pair(res, expected, label, args, bugs):
    if not (isinstance(res, tuple) and len(res) == 2):
        raise failure(label, "(out, weights)", type(res).__name__, B_CROSS_ONE if isinstance(res, torch.Tensor) else None,
                      hint=t("返回两个张量：return out, weights。", "return two tensors: return out, weights."))
    if (_shape(res[0]), _shape(res[1])) == (tuple(expected[1].shape), tuple(expected[0].shape)) != \
            (tuple(expected[0].shape), tuple(expected[1].shape)):
        raise failure(t(f"{label}：返回值的形状", f"{label}: shapes of the results"),
                      f"(out {tuple(expected[0].shape)}, weights {tuple(expected[1].shape)})",
                      f"({_shape(res[0])}, {_shape(res[1])})", B_CROSS_ORDER)
    d_k = args[2].shape[-1]
    for name, got, want in (("weights", res[1], expected[1]), ("out", res[0], expected[0])):
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            bug = bugs[0] if isinstance(got, torch.Tensor) and shape[-2:] == tuple(want.shape[-2:])[::-1] else None
            if name == "out" and isinstance(got, torch.Tensor) and shape == tuple(want.shape[:-1]) + (d_k,):
                bug = next(b for b in bugs if b.key == "cross_values_with_w_k")
            if bug is None and isinstance(got, torch.Tensor):
                bug = diagnose(got, [Bug(b.key, b.zh, b.en, (lambda f, i: lambda *a: f(*a)[i])(b.impl, 0 if name == "out"
                                                                                             else 1)) for b in bugs], *args)
            raise failure(t(f"{label}：{name} 的形状", f"{label}: shape of {name}"), str(tuple(want.shape)), str(shape),
                          bug)
        if not close(got, want, atol=1e-9, rtol=1e-7):
            bug = diagnose(got, [Bug(b.key, b.zh, b.en, (lambda f, i: lambda *a: f(*a)[i])(b.impl, 0 if name == "out" else 1))
                                 for b in bugs], *args, expected=want)
            raise failure(t(f"{label}：{name}", f"{label}: {name}"), show(want), show(got), bug)


def check_cross_attention(cross_attention) -> None:
    what = "cross_attention"
    gen, n = seeded(1101), 0
    with forbidden(ATTENTION_FAMILY, what):
        for label, args in _cross_cases(gen):
            full = f"{what}: {label}"
            edge = allowed(B_CROSS_NONE) if args[-1] is None else []
            res = call(cross_attention, *(a.clone() if a is not None else None for a in args), what=full,
                       hints=CROSS_HINTS + edge)
            _check_pair(res, ref_cross(*args), full, args, CROSS_BUGS)
            n += 1
        # property: a padded memory position may change freely
        x, mem, wq, wk, wv, mask = next(iter(_cross_cases(seeded(7))))[1]
        mem2 = mem.clone()
        mem2[~mask] = torch.randn(int((~mask).sum()), mem.shape[-1], generator=gen, dtype=torch.float64) * 5
        a = call(cross_attention, x, mem, wq, wk, wv, mask, what=what)[0]
        b = call(cross_attention, x, mem2, wq, wk, wv, mask, what=what)[0]
        n += 1
        if not close(a, b, atol=1e-12, rtol=0):
            raise failure(t(f"{what}：改动填充位置的 memory", f"{what}: changing padded positions of memory"),
                          t("输出不变", "the output unchanged"), t("输出变了", "the output changed"),
                          Bug("cross_mask_ignored", CROSS_BUGS[3].zh, CROSS_BUGS[3].en))
        # float32 input stays float32
        x32 = [a.float() if a is not None and a.is_floating_point() else a for a in args]
        out = call(cross_attention, *x32, what=f"{what} (float32)", hints=CROSS_HINTS)[0]
        n += 1
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
            raise failure(t(f"{what}（float32 输入）：输出的 dtype", f"{what} (float32 input): dtype of the output"),
                          "torch.float32", str(getattr(out, "dtype", type(out).__name__)),
                          hint=t("float32 进，float32 出：不要在中间转成 float64（例如 -inf 用 float(\"-inf\")，"
                                 "不要建 float64 的张量）。", "float32 in, float32 out: do not switch to float64 on the "
                                 "way (write -inf as float(\"-inf\"), do not build float64 tensors)."))
    passed(what, n)


# ================================================================ the layers: references

def _mha_params(m):
    a = m
    return (as_f64(a.in_proj_weight), as_f64(a.in_proj_bias) if a.in_proj_bias is not None else None,
            as_f64(a.out_proj.weight), as_f64(a.out_proj.bias) if a.out_proj.bias is not None else None, a.num_heads)


def ref_mha(q_in, kv_in, params, key_mask=None, causal=False, mask_mode="keys", added=None):
    """Multi-head attention in float64, one head at a time; key_mask (B, n_k), True = real. Known bugs:
    ``mask_mode="as_attn"`` reads the blocked (B, n) padding mask as an (n_q, n_k) attention mask (what torch
    does when it is passed as attn_mask with B = n); ``added``: a float (n_q, n_k) mask added to the scores."""
    W, b, W_o, b_o, h = params
    d = q_in.shape[-1]
    d_k = d // h
    bias = b if b is not None else torch.zeros(3 * d, dtype=torch.float64)
    q = q_in @ W[:d].T + bias[:d]
    k = kv_in @ W[d:2 * d].T + bias[d:2 * d]
    v = kv_in @ W[2 * d:].T + bias[2 * d:]
    n_q, n_k = q.shape[1], k.shape[1]
    allowed = torch.ones(q.shape[0], n_q, n_k, dtype=torch.bool)
    if key_mask is not None and mask_mode != "none":
        km = key_mask.bool()
        allowed = allowed & {"keys": km[:, None, :], "inverted": ~km[:, None, :],
                             "queries": km[:, :, None], "as_attn": km[None, :, :]}[mask_mode]
    if causal == "inverted":
        allowed = allowed & torch.ones(n_q, n_k, dtype=torch.bool).triu(1)
    elif causal == "strict":
        allowed = allowed & torch.ones(n_q, n_k, dtype=torch.bool).tril(-1)
    elif causal:
        allowed = allowed & torch.ones(n_q, n_k, dtype=torch.bool).tril()
    heads = []
    for i in range(h):
        c = slice(i * d_k, (i + 1) * d_k)
        s = q[..., c] @ k[..., c].transpose(1, 2) / math.sqrt(d_k)
        s = (s + as_f64(added) if added is not None else s).masked_fill(~allowed, float("-inf"))
        heads.append(_softmax64(s).nan_to_num(0.0) @ v[..., c])     # like torch: a row with no key left gives 0
    out = torch.cat(heads, dim=-1) @ W_o.T
    return out + b_o if b_o is not None else out


def _ln(x, norm):
    w = as_f64(norm.weight) if norm.weight is not None else 1.0
    b = as_f64(norm.bias) if norm.bias is not None else 0.0
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + norm.eps) * w + b


def _ffn(x, lin, act="gelu"):
    a, b = lin
    hid = x @ as_f64(a.weight).T + as_f64(a.bias)
    hid = {"relu": lambda z: z.clamp(min=0), "silu": lambda z: z * torch.sigmoid(z),
           "gelu_tanh": lambda z: 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))),
           "gelu": lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))}[act](hid)
    return hid @ as_f64(b.weight).T + as_f64(b.bias)


def _linears(m):
    return [x for x in m.ffn.modules() if isinstance(x, nn.Linear)]


def ref_encoder(m, x, mask, *, mask_mode="keys", causal=False, post_ln=False, res_attn="x", res_ffn=True,
                ffn_norm="norm2", act="gelu", norm_after=False):
    """Pre-LN encoder layer in float64; the keywords switch on known bugs (``res_ffn="normed"``: the FFN's
    residual starts from norm2(x); ``norm_after``: norm1 on the attention's output instead of its input)."""
    x = as_f64(x)
    att = _mha_params(m.self_attn)
    if post_ln:
        x = _ln(x + ref_mha(x, x, att, mask, causal, mask_mode), m.norm1)
        return _ln(x + _ffn(x, _linears(m)), m.norm2)
    if norm_after:
        x = x + _ln(ref_mha(x, x, att, mask, causal, mask_mode), m.norm1)
    else:
        a = _ln(x, m.norm1)
        skip = {"x": x, "normed": a, "none": 0.0}[res_attn]
        x = skip + ref_mha(a, a, att, mask, causal, mask_mode)
    h = _ln(x, getattr(m, ffn_norm))
    f = _ffn(h, _linears(m), act)
    return h + f if res_ffn == "normed" else x + f if res_ffn else f


def ref_decoder(m, y, memory, mask, *, causal=True, mem_mode="keys", swap=False, post_ln=False, cross_causal=False,
                norm_memory=False, cross_first=False, res_cross=True, res_ffn=True, cross_norm="norm2",
                float01=False, act="gelu", res_self=True, cross_kv="memory", ffn_first=False):
    """Pre-LN decoder layer in float64; the keywords switch on known bugs (``float01``: a float 0/1 lower
    triangle passed as attn_mask, which torch adds to the scores instead of blocking anything)."""
    y, memory = as_f64(y), as_f64(memory)
    sa, ca = _mha_params(m.self_attn), _mha_params(m.cross_attn)
    n_t = y.shape[1]
    added = torch.ones(n_t, n_t, dtype=torch.float64).tril() if float01 else None
    causal = False if float01 else causal
    if post_ln:
        y = _ln(y + ref_mha(y, y, sa, None, causal), m.norm1)
        y = _ln(y + ref_mha(y, memory, ca, mask, cross_causal, mem_mode), m.norm2)
        return _ln(y + _ffn(y, _linears(m)), m.norm3)

    def self_block(y):
        a = _ln(y, m.norm1)
        out = ref_mha(a, a, sa, None, causal, added=added)
        return y + out if res_self else out

    def cross_block(y):
        a = _ln(y, getattr(m, cross_norm))
        mem = _ln(memory, m.norm2) if norm_memory else memory
        if cross_kv == "self":
            out = ref_mha(a, a, ca, None)
        else:
            out = ref_mha(mem, a, ca, mask) if swap else ref_mha(a, mem, ca, mask, cross_causal, mem_mode)
        return y + out if res_cross else out

    def ffn_block(y):
        f = _ffn(_ln(y, m.norm3), _linears(m), act)
        return y + f if res_ffn else f

    if ffn_first:
        return cross_block(ffn_block(self_block(y)))
    y = self_block(cross_block(y)) if cross_first else cross_block(self_block(y))
    return ffn_block(y)


# ================================================================ the layers: known bugs

def _layer_bug(key, zh, en, ref, **kw):
    return Bug(key, zh, en, lambda *a: ref(*a, **kw))


_TORCH_MASK = ("注意 nn.MultiheadAttention 的约定和本课程相反：key_padding_mask 和布尔 attn_mask 里 True 表示“屏蔽”，"
               "所以要传 ~mask。", "Note that nn.MultiheadAttention uses the opposite convention to the course: in "
               "key_padding_mask and a boolean attn_mask, True means 'blocked', so pass ~mask.")
_ACT = ("FFN 的激活函数不对：练习要求 nn.GELU()（精确的 GELU；不是 SiLU，也不是 approximate=\"tanh\" 的近似版）。",
        "the FFN's activation is wrong: the exercise asks for nn.GELU() (the exact GELU; not SiLU, nor the "
        "approximate=\"tanh\" version).")
_AS_ATTN = ("填充掩码传给了 attn_mask：attn_mask 是 (n, n) 的“哪个 query 不能看哪个 key”；填充掩码 (B, n) 要传给 "
            "key_padding_mask=~src_mask。", "the padding mask went to attn_mask: attn_mask is an (n, n) 'which query may "
            "not see which key'; the padding mask (B, n) goes to key_padding_mask=~src_mask.")
ENC_BUGS = [
    _layer_bug("encoder_padding_mask_inverted",
               "填充掩码反了：真实 token 被屏蔽，只剩下 <pad> 可以被关注。" + _TORCH_MASK[0],
               "the padding mask is inverted: the real tokens are hidden and only <pad> can be attended to. "
               + _TORCH_MASK[1], ref_encoder, mask_mode="inverted"),
    _layer_bug("encoder_mask_on_queries",
               "填充掩码加在了 query（行）上而不是 key（列）上：应该让每个位置都看不到填充的 key，"
               "用 key_padding_mask=~src_mask（形状 (B, n)，会广播成 (B, 1, 1, n)）。",
               "the padding mask is applied to the queries (rows) instead of the keys (columns): no position may "
               "look at a padded key; use key_padding_mask=~src_mask (shape (B, n), broadcast to (B, 1, 1, n)).",
               ref_encoder, mask_mode="queries"),
    _layer_bug("encoder_padding_mask_ignored",
               "编码器没有用 src_mask：真实 token 也在关注 <pad>，所以换一个填充就会改变真实 token 的输出。",
               "the encoder ignores src_mask: real tokens attend to <pad>, so changing the padding changes the "
               "real tokens' outputs.", ref_encoder, mask_mode="none"),
    _layer_bug("encoder_causal_mask",
               "编码器里加了因果掩码：编码器是双向的（BERT 式），每个源 token 都可以看整句，包括它后面的 token。",
               "a causal mask in the encoder: the encoder is bidirectional (BERT-style); every source token may "
               "look at the whole sentence, including the tokens after it.", ref_encoder, causal=True),
    _layer_bug("encoder_post_ln",
               "写成了 Post-LN（先加残差再归一化）：本章用 Pre-LN，x = x + self_attn(norm1(x))，x = x + ffn(norm2(x))。",
               "this is Post-LN (normalise after adding the residual): the chapter uses Pre-LN, "
               "x = x + self_attn(norm1(x)), then x = x + ffn(norm2(x)).", ref_encoder, post_ln=True),
    _layer_bug("encoder_no_ffn_residual",
               "FFN 周围没有残差：应为 x = x + ffn(norm2(x))，少了 x + 就把注意力子层的结果整个丢掉了。",
               "no residual around the FFN: it must be x = x + ffn(norm2(x)); without the x + the attention "
               "sublayer's result is thrown away.", ref_encoder, res_ffn=False),
    _layer_bug("encoder_no_attention_residual",
               "自注意力周围没有残差：应为 x = x + self_attn(norm1(x), ...)，输入本身要一路加下去。",
               "no residual around the self-attention: it must be x = x + self_attn(norm1(x), ...); the input "
               "itself is carried along.", ref_encoder, res_attn="none"),
    _layer_bug("encoder_residual_from_normed",
               "残差加的是 norm1(x) 而不是 x：Pre-LN 里归一化只用于子层的输入，残差通路上是原始的 x。",
               "the residual adds norm1(x) instead of x: in Pre-LN the norm only feeds the sublayer; the residual "
               "path carries the raw x.", ref_encoder, res_attn="normed"),
    _layer_bug("encoder_norm_reused",
               "norm1 用了两次：FFN 之前应该用它自己的 norm2（两个 LayerNorm 各有各的参数）。",
               "norm1 is used twice: the FFN needs its own norm2 (the two LayerNorms have separate parameters).",
               ref_encoder, ffn_norm="norm1"),
    _layer_bug("encoder_relu",
               "FFN 的激活函数用了 ReLU：本章（和 torch 的对照层 activation=\"gelu\"）用的是 nn.GELU()。",
               "the FFN uses ReLU: the chapter (and torch's reference layer, activation=\"gelu\") uses nn.GELU().",
               ref_encoder, act="relu"),
    *[_layer_bug("ffn_wrong_activation", _ACT[0], _ACT[1], ref_encoder, act=a) for a in ("silu", "gelu_tanh")],
    _layer_bug("encoder_padding_mask_as_attn_mask", _AS_ATTN[0], _AS_ATTN[1], ref_encoder, mask_mode="as_attn"),
    _layer_bug("encoder_ffn_residual_from_normed",
               "FFN 的残差加的是 norm2(x) 而不是 x：Pre-LN 里归一化只用于子层的输入，残差通路上是没有归一化的 x。",
               "the FFN's residual adds norm2(x) instead of x: in Pre-LN the norm only feeds the sublayer; the "
               "residual path carries the un-normalised x.", ref_encoder, res_ffn="normed"),
    _layer_bug("encoder_norm_after_attention",
               "norm1 放在了自注意力之后（作用在它的输出上）：Pre-LN 里 norm1 作用在子层的输入上，self_attn 读的是 norm1(x)。",
               "norm1 comes after the self-attention (on its output): in Pre-LN, norm1 acts on the sublayer's input, "
               "and self_attn reads norm1(x).", ref_encoder, norm_after=True),
]

DEC_BUGS = [
    _layer_bug("decoder_no_causal_mask",
               "解码器的自注意力没有因果掩码：目标位置 i 看到了后面的目标 token（训练时就是在抄答案）。",
               "the decoder's self-attention has no causal mask: target position i sees later target tokens "
               "(in training it copies the answer).", ref_decoder, causal=False),
    _layer_bug("decoder_causal_mask_inverted",
               "因果掩码反了：把“可以关注”的下三角直接传给了 attn_mask。" + _TORCH_MASK[0]
               + "要屏蔽的是上三角 triu(1)。",
               "the causal mask is inverted: the lower triangle of 'may attend' went straight into attn_mask. "
               + _TORCH_MASK[1] + " The part to block is the upper triangle, triu(1).",
               ref_decoder, causal="inverted"),
    _layer_bug("decoder_memory_mask_ignored",
               "交叉注意力没有用 memory_mask：目标位置关注到了源序列里的 <pad>。",
               "the cross-attention ignores memory_mask: target positions attend to the source's <pad>.",
               ref_decoder, mem_mode="none"),
    _layer_bug("decoder_memory_mask_inverted",
               "memory_mask 用反了：真实的源 token 被屏蔽了。" + _TORCH_MASK[0],
               "memory_mask is inverted: the real source tokens are hidden. " + _TORCH_MASK[1],
               ref_decoder, mem_mode="inverted"),
    _layer_bug("decoder_queries_from_memory",
               "交叉注意力的 query 取自 memory：应该是 cross_attn(norm2(y), memory, memory)——query 来自解码器，"
               "key 和 value 来自编码器的输出。", "the cross-attention takes its queries from memory: it must be "
               "cross_attn(norm2(y), memory, memory) — queries from the decoder, keys and values from the "
               "encoder's output.", ref_decoder, swap=True),
    _layer_bug("decoder_cross_attention_causal",
               "交叉注意力里也加了因果掩码：源句子整句已知，每个目标位置都可以看全部源 token。",
               "the causal mask is applied in the cross-attention too: the whole source is known, and every "
               "target position may look at all of it.", ref_decoder, cross_causal=True),
    _layer_bug("decoder_post_ln",
               "写成了 Post-LN：本章用 Pre-LN，每个子层都是 y = y + 子层(norm(y))。",
               "this is Post-LN: the chapter uses Pre-LN, every sublayer is y = y + sublayer(norm(y)).",
               ref_decoder, post_ln=True),
    _layer_bug("decoder_memory_normalised",
               "把 memory 也过了 norm2：只有 query 一侧（解码器的 y）要归一化；memory 是编码器的输出，原样作为 key 和 value。",
               "memory went through norm2 as well: only the query side (the decoder's y) is normalised; memory, "
               "the encoder's output, is used as it is for keys and values.", ref_decoder, norm_memory=True),
    _layer_bug("decoder_cross_before_self",
               "交叉注意力放在了自注意力之前：解码器层的顺序是 因果自注意力 → 交叉注意力 → FFN。",
               "the cross-attention comes before the self-attention: a decoder layer runs causal self-attention, "
               "then cross-attention, then the FFN.", ref_decoder, cross_first=True),
    _layer_bug("decoder_causal_mask_diagonal",
               "因果掩码差一位：把对角线也屏蔽了（triu(0) 而不是 triu(1)），位置 i 看不到它自己，位置 0 什么都看不到。",
               "the causal mask is off by one: the diagonal is blocked too (triu(0) instead of triu(1)), so "
               "position i cannot see itself and position 0 sees nothing.", ref_decoder, causal="strict"),
    _layer_bug("decoder_no_cross_residual",
               "交叉注意力周围没有残差：应为 y = y + cross_attn(norm2(y), memory, memory, ...)。",
               "no residual around the cross-attention: it must be y = y + cross_attn(norm2(y), memory, memory, ...).",
               ref_decoder, res_cross=False),
    _layer_bug("decoder_no_ffn_residual", "FFN 周围没有残差：应为 y = y + ffn(norm3(y))。",
               "no residual around the FFN: it must be y = y + ffn(norm3(y)).", ref_decoder, res_ffn=False),
    _layer_bug("decoder_cross_uses_norm1", "交叉注意力之前用的是 norm1：每个子层有自己的 LayerNorm，"
               "交叉注意力的 query 是 norm2(y)。", "the cross-attention is preceded by norm1: each sublayer has a "
               "LayerNorm of its own, and the cross-attention's queries are norm2(y).", ref_decoder, cross_norm="norm1"),
    _layer_bug("decoder_float_mask_added", "因果掩码是一个 0/1 的浮点矩阵：nn.MultiheadAttention 会把浮点的 attn_mask "
               "加到分数上，而不是拿它屏蔽，所以什么都没挡住。用 bool 的上三角 torch.ones(n_t, n_t, dtype=torch.bool).triu(1)"
               "（True = 屏蔽），或者屏蔽处是 -inf 的浮点矩阵。", "the causal mask is a float 0/1 matrix: "
               "nn.MultiheadAttention adds a float attn_mask to the scores instead of blocking with it, so nothing is "
               "hidden. Use the bool upper triangle torch.ones(n_t, n_t, dtype=torch.bool).triu(1) (True = blocked), "
               "or a float matrix with -inf where blocked.", ref_decoder, float01=True),
    *[_layer_bug("ffn_wrong_activation", _ACT[0], _ACT[1], ref_decoder, act=a) for a in ("relu", "silu", "gelu_tanh")],
    _layer_bug("decoder_no_self_residual", "自注意力周围没有残差：应为 y = y + self_attn(norm1(y), ...)。",
               "no residual around the self-attention: it must be y = y + self_attn(norm1(y), ...).", ref_decoder,
               res_self=False),
    _layer_bug("decoder_cross_reads_itself",
               "交叉注意力的 key 和 value 应是 memory：现在它们是 norm2(y)，交叉注意力成了又一层自注意力，源序列根本没被读到。",
               "the cross-attention's keys and values must be memory: here they are norm2(y), so the cross-attention "
               "became one more self-attention and the source is never read.", ref_decoder, cross_kv="self"),
    _layer_bug("decoder_ffn_before_cross",
               "FFN 放在了交叉注意力之前：解码器层的顺序是 因果自注意力 → 交叉注意力 → FFN。",
               "the FFN comes before the cross-attention: a decoder layer runs causal self-attention, then "
               "cross-attention, then the FFN.", ref_decoder, ffn_first=True),
]


# ================================================================ the layers: checks

B_BATCH_FIRST = Bug("mha_not_batch_first", "nn.MultiheadAttention 默认把输入当作 (n, B, d)：本章的张量是 (B, n, d)，"
                    "要写 nn.MultiheadAttention(d, h, batch_first=True)。", "nn.MultiheadAttention reads its inputs as "
                    "(n, B, d) by default: this chapter's tensors are (B, n, d), so write nn.MultiheadAttention(d, h, "
                    "batch_first=True).")
B_DROPOUT = Bug("dropout_left_in", "层里有 dropout：练习要求没有 dropout（它让同样的输入每次得到不同的输出，"
                "也让层和 torch 的对照层对不上）。", "the layer has dropout: the exercise asks for none (it makes the "
                "same input give different outputs each time, and the layer no longer matches torch's reference).")
B_LAYER_PARAMS = Bug("layer_parameters", "参数个数不对：层里正好是练习列出的这些模块，都用默认设置（带 bias 的 "
                     "nn.MultiheadAttention、nn.LayerNorm、nn.Linear），不加 bias=False，也不加别的参数。",
                     "the number of parameters is wrong: the layer holds exactly the modules the exercise lists, with "
                     "their defaults (nn.MultiheadAttention, nn.LayerNorm and nn.Linear with biases), no bias=False and "
                     "no other parameters.")
B_MHA_TUPLE = Bug("mha_returns_a_tuple", "nn.MultiheadAttention 返回 (输出, 权重) 两个值：取 [0]（或 out, _ = ...）"
                  "再加到残差上。", "nn.MultiheadAttention returns two values, (output, weights): take [0] (or "
                  "out, _ = ...) before adding it to the residual.")
B_LAYER_NAMES = Bug("layer_attribute_names", "子模块的名字不是练习给的那些：评分（和 torch 的对照层）按 self.norm1、"
                    "self.self_attn、self.norm2、self.ffn（解码器还有 self.cross_attn、self.norm3）找它们，名字要一字不差。",
                    "the submodules are not named as the exercise says: the grader (and torch's reference layer) looks up "
                    "self.norm1, self.self_attn, self.norm2, self.ffn (and, in the decoder, self.cross_attn, self.norm3) "
                    "by these exact names.")
B_FFN_WIDTH = Bug("ffn_width_not_d_ff", "FFN 的形状不对：self.ffn 是 nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), "
                  "nn.Linear(d_ff, d))，隐藏宽度是参数 d_ff（不是 4·d 或别的数），两个线性层各带 bias。",
                  "the FFN has the wrong shape: self.ffn is nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, "
                  "d)), whose hidden width is the argument d_ff (not 4·d or another number), each linear layer with "
                  "its bias.")
B_MASK_FIXED = Bug("causal_mask_fixed_size", "因果掩码是按一个固定的大小建的（在 __init__ 里，或者第一次调用时建好就一直用）："
                   "目标序列比它长（或者长短变了）就对不上。在 forward 里按这一次的 n_t 现做："
                   "torch.ones(n_t, n_t, dtype=torch.bool).triu(1)。", "the causal mask is built at a fixed size (in "
                   "__init__, or on the first call and then kept): a target longer than that (or of another length) no "
                   "longer fits. Build it in forward for this call's n_t: torch.ones(n_t, n_t, dtype=torch.bool).triu(1).")
MHA_HINTS = [
    (Raises(contains=("and 'tuple'", "'tuple' and"), types=("TypeError",)), B_MHA_TUPLE),
    (Raises(contains=("2D attn_mask",)), Bug("encoder_padding_mask_as_attn_mask", _AS_ATTN[0], _AS_ATTN[1])),
    (Raises(contains=("is_causal hint",)), Bug(
        "is_causal_without_mask", "nn.MultiheadAttention 的 is_causal=True 只是一个提示，还必须传 attn_mask：写 "
        "attn_mask=torch.ones(n_t, n_t, dtype=torch.bool).triu(1)。", "is_causal=True in nn.MultiheadAttention is only "
        "a hint; attn_mask must still be passed: attn_mask=torch.ones(n_t, n_t, dtype=torch.bool).triu(1)."))]
LAYER_HINTS = MHA_HINTS + SUPER_HINTS + COMMON_HINTS
# is_causal=True without attn_mask: nn.MultiheadAttention takes it as a hint only, so the output is that of no
# causal mask at all; the visible test cannot tell the two apart from the numbers and names neither
B_IS_CAUSAL_ALONE = _layer_bug("is_causal_without_mask", MHA_HINTS[2][1].zh, MHA_HINTS[2][1].en, ref_decoder,
                               causal=False)


def _build_layer(cls, d, h, d_ff, decoder, what):
    m = call(cls, d, h, d_ff, what=what, hints=SUPER_HINTS)
    if not isinstance(m, nn.Module):
        raise GradingFailure(t(f"{what}：应当是 nn.Module 的子类。", f"{what}: must be a subclass of nn.Module."))
    attns = ("self_attn", "cross_attn") if decoder else ("self_attn",)
    norms = ("norm1", "norm2", "norm3") if decoder else ("norm1", "norm2")
    for name in attns:
        a = getattr(m, name, None)
        if a is None:
            raise failure(t(f"{what}：self.{name}", f"{what}: self.{name}"), "nn.MultiheadAttention(d, h, batch_first=True)",
                          t("没有这个属性", "no such attribute"), B_LAYER_NAMES)
        if not isinstance(a, nn.MultiheadAttention) or a.embed_dim != d or a.num_heads != h:
            raise GradingFailure(t(f"{what}：需要 self.{name} = nn.MultiheadAttention(d, h, batch_first=True)。",
                                   f"{what}: needs self.{name} = nn.MultiheadAttention(d, h, batch_first=True)."))
        if not a.batch_first:
            raise failure(t(f"{what}：self.{name}.batch_first", f"{what}: self.{name}.batch_first"), "True", "False",
                          B_BATCH_FIRST)
        if a.dropout:
            raise failure(t(f"{what}：self.{name}.dropout", f"{what}: self.{name}.dropout"), "0.0", str(a.dropout),
                          B_DROPOUT)
    for name in norms:
        if getattr(m, name, None) is None:
            raise failure(t(f"{what}：self.{name}", f"{what}: self.{name}"), "nn.LayerNorm(d)",
                          t("没有这个属性", "no such attribute"), B_LAYER_NAMES)
        if not isinstance(getattr(m, name, None), nn.LayerNorm):
            raise GradingFailure(t(f"{what}：需要 self.{name} = nn.LayerNorm(d)。", f"{what}: needs self.{name} = "
                                   "nn.LayerNorm(d)."))
    drops = [x.p for x in m.modules() if isinstance(x, nn.Dropout) and x.p]
    if drops:
        raise failure(t(f"{what}：nn.Dropout", f"{what}: nn.Dropout"), t("没有", "none"), f"p = {drops[0]}", B_DROPOUT)
    lin = _linears(m) if isinstance(getattr(m, "ffn", None), nn.Module) else []
    shapes = [tuple(x.weight.shape) for x in lin]
    if shapes != [(d_ff, d), (d, d_ff)]:
        raise failure(t(f"{what}：self.ffn 里的线性层", f"{what}: the linear layers in self.ffn"),
                      f"nn.Linear(d, d_ff), nn.Linear(d_ff, d) → {[(d_ff, d), (d, d_ff)]}", str(shapes),
                      B_LAYER_NAMES if getattr(m, "ffn", None) is None else B_FFN_WIDTH)
    total = sum(p.numel() for p in m.parameters())
    want = (2 if decoder else 1) * (4 * d * d + 4 * d) + (3 if decoder else 2) * 2 * d + 2 * d * d_ff + d_ff + d
    if total != want:
        raise failure(t(f"{what}：参数个数", f"{what}: number of parameters"), str(want), str(total), B_LAYER_PARAMS)
    return m


def _randomise(m, gen):
    with torch.no_grad():
        for name, p in m.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.3 * noise)
            else:
                p.copy_(noise * (0.3 if p.dim() > 1 else 0.2))
    return m.double().eval()


def _torch_layer(m, d, h, d_ff, decoder):
    cls = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    ref = cls(d, h, d_ff, dropout=0.0, activation="gelu", batch_first=True, norm_first=True, dtype=torch.float64)
    fc1, fc2 = _linears(m)
    with torch.no_grad():
        ref.self_attn.load_state_dict(m.self_attn.state_dict())
        if decoder:
            ref.multihead_attn.load_state_dict(m.cross_attn.state_dict())
            ref.norm3.load_state_dict(m.norm3.state_dict())
        ref.linear1.load_state_dict(fc1.state_dict())
        ref.linear2.load_state_dict(fc2.state_dict())
        ref.norm1.load_state_dict(m.norm1.state_dict())
        ref.norm2.load_state_dict(m.norm2.state_dict())
    return ref.eval()


LAYER_CASES = [  # (B, n_t, n_s, d, h, d_ff, source lengths); n_t = n_s first: mistakes give numbers, not errors
    (3, 3, 3, 12, 3, 24, [3, 1, 2]), (2, 5, 4, 8, 2, 16, [4, 2]), (1, 6, 5, 8, 1, 8, [5]),
    (2, 4, 6, 16, 4, 32, [6, 3]), (2, 1, 2, 4, 4, 8, [1, 2])]


def _same(a, b) -> bool:
    return isinstance(a, torch.Tensor) and close(a, b, atol=1e-9, rtol=1e-7)


def _sublayer_calls(m, names, *inputs):
    """Run the student's layer once and record, for each named sublayer, its first call: (args, kwargs, output)."""
    seen, handles = {}, []
    for name in names:
        def pre(mod, args, kwargs, name=name):
            seen.setdefault(name, [args, kwargs, None])

        def post(mod, args, kwargs, out, name=name):
            if seen[name][2] is None:
                seen[name][2] = out[0] if isinstance(out, tuple) else out
        sub = getattr(m, name)
        handles += [sub.register_forward_pre_hook(pre, with_kwargs=True),
                    sub.register_forward_hook(post, with_kwargs=True)]
    try:
        with torch.no_grad():
            m(*inputs)
    except Exception:  # noqa: BLE001 - the layer's own error was reported already; nothing to add here
        return None
    finally:
        for hd in handles:
            hd.remove()
    return seen


def _query(call_) -> torch.Tensor | None:
    args, kwargs, _ = call_
    return args[0] if args else kwargs.get("query")


def _keys(call_):
    args, kwargs, _ = call_
    return (args[1] if len(args) > 1 else kwargs.get("key"), args[2] if len(args) > 2 else kwargs.get("value"))


def _wrong_input(sub, zh_want, en_want, got, candidates) -> Bug:
    """The input ``sub`` received is not ``want``: name what it is, when it is one of ``candidates``."""
    for zh, en, value in candidates:
        if _same(got, value):
            return Bug("sublayer_input", f"{sub} 的输入是 {zh}，应是 {zh_want}。", f"{sub} receives {en}; it must receive "
                       f"{en_want}.")
    return Bug("sublayer_input", f"{sub} 的输入不对：应是 {zh_want}。", f"{sub} receives the wrong input: it must be "
               f"{en_want}.")


def _encoder_wiring(m, x, mask) -> Bug | None:
    """Which sublayer of the student's encoder layer gets the wrong input (hooks on self_attn and ffn)."""
    seen = _sublayer_calls(m, ("self_attn", "ffn"), x.clone(), None if mask is None else mask.clone())
    if not seen or "self_attn" not in seen or "ffn" not in seen:
        return None
    x = as_f64(x)
    a = _ln(x, m.norm1)
    q = _query(seen["self_attn"])
    if not _same(q, a):
        return _wrong_input("self_attn", "norm1(x)", "norm1(x)", q,
                            [("norm2(x)", "norm2(x)", _ln(x, m.norm2)), ("x 本身（没有归一化）", "x itself (not "
                             "normalised)", x)])
    k, v = _keys(seen["self_attn"])
    if not (_same(k, a) and _same(v, a)):
        return Bug("sublayer_input", "self_attn 的 key 和 value 也要是 norm1(x)：self_attn(a, a, a, ...)，a = norm1(x)。",
                   "self_attn's keys and values must be norm1(x) too: self_attn(a, a, a, ...) with a = norm1(x).")
    h = x + as_f64(seen["self_attn"][2])
    f_in = seen["ffn"][0][0] if seen["ffn"][0] else None
    if not _same(f_in, _ln(h, m.norm2)):
        return _wrong_input("ffn", "norm2(x)，x 已经加上了注意力的结果", "norm2(x) with x already holding the "
                            "attention's result", f_in,
                            [("norm2 作用在加注意力之前的 x 上", "norm2 of x before the attention was added", _ln(x, m.norm2)),
                             ("norm1(x + attn)", "norm1(x + attn)", _ln(h, m.norm1)),
                             ("没有归一化的 x + attn", "x + attn, not normalised", h)])
    return Bug("residual_wiring", "两个子层的输入都对，错在怎么把它们加起来：x = x + self_attn(...)[0]，"
               "然后 x = x + ffn(norm2(x))，返回 x。", "both sublayers get the right inputs; the mistake is in how their "
               "results are added: x = x + self_attn(...)[0], then x = x + ffn(norm2(x)), return x.")


def _decoder_wiring(m, y, memory, mask) -> Bug | None:
    """Which sublayer of the student's decoder layer gets the wrong input (hooks on the three sublayers)."""
    seen = _sublayer_calls(m, ("self_attn", "cross_attn", "ffn"), y.clone(), memory.clone(),
                           None if mask is None else mask.clone())
    if not seen or any(k not in seen for k in ("self_attn", "cross_attn", "ffn")):
        return None
    y, memory = as_f64(y), as_f64(memory)
    a = _ln(y, m.norm1)
    if not _same(_query(seen["self_attn"]), a):
        return _wrong_input("self_attn", "norm1(y)", "norm1(y)", _query(seen["self_attn"]),
                            [("norm2(y)", "norm2(y)", _ln(y, m.norm2)), ("y 本身（没有归一化）", "y itself (not "
                             "normalised)", y)])
    if seen["self_attn"][1].get("key_padding_mask") is not None:
        return Bug("decoder_self_attention_padding_mask", "解码器的自注意力用了 memory_mask 当作 key_padding_mask："
                   "memory_mask 是源序列的掩码，只属于交叉注意力；目标序列的自注意力只要因果掩码。",
                   "the decoder's self-attention uses memory_mask as its key_padding_mask: memory_mask belongs to the "
                   "source and only to the cross-attention; the target's self-attention needs the causal mask alone.")
    y1 = y + as_f64(seen["self_attn"][2])
    q = _query(seen["cross_attn"])
    if not _same(q, _ln(y1, m.norm2)):
        return _wrong_input("cross_attn", "norm2(y)，y 已经加上了自注意力的结果", "norm2(y) with y already holding the "
                            "self-attention's result", q,
                            [("norm1(y + 自注意力)", "norm1(y + self-attention)", _ln(y1, m.norm1)),
                             ("没有归一化的 y + 自注意力", "y + self-attention, not normalised", y1),
                             ("memory", "memory", memory)])
    k, v = _keys(seen["cross_attn"])
    if not (_same(k, memory) and _same(v, memory)):
        return Bug("sublayer_input", "cross_attn 的 key 和 value 应是 memory 本身：cross_attn(a, memory, memory, ...)。",
                   "cross_attn's keys and values must be memory itself: cross_attn(a, memory, memory, ...).")
    y2 = y1 + as_f64(seen["cross_attn"][2])
    f_in = seen["ffn"][0][0] if seen["ffn"][0] else None
    if not _same(f_in, _ln(y2, m.norm3)):
        return _wrong_input("ffn", "norm3(y)，y 已经加上了两个注意力的结果", "norm3(y) with y already holding both "
                            "attentions' results", f_in,
                            [("norm3 作用在加交叉注意力之前的 y 上", "norm3 of y before the cross-attention was added",
                              _ln(y1, m.norm3)), ("没有归一化的 y", "y, not normalised", y2)])
    return Bug("residual_wiring", "三个子层的输入都对，错在怎么把它们加起来：每个子层都是 y = y + 子层(...)，最后返回 y。",
               "the three sublayers get the right inputs; the mistake is in how their results are added: every "
               "sublayer is y = y + sublayer(...), and y is returned.")


def _compare(out, expected, theirs, real, label, bugs, args):
    shape = tuple(expected.shape)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise failure(t(f"{label}：输出形状", f"{label}: output shape"), str(shape), str(got))
    if not close(out, expected, atol=1e-9, rtol=1e-7):
        bug = diagnose(out, bugs, *args, expected=expected, match=lambda a, b: close(a, b, atol=1e-9, rtol=1e-7))
        if bug is None:
            bug = (_encoder_wiring if len(args) == 3 else _decoder_wiring)(*args)
        gap = (as_f64(out) - expected).abs().nan_to_num(float("inf")).max().item()
        raise failure(t(f"{label}：与 float64 参考实现比较（最大误差 {gap:.3g}）",
                        f"{label}: compared with a float64 reference (largest error {gap:.3g})"),
                      show(expected), show(out), bug)
    if theirs is not None and not close(as_f64(out)[real], theirs[real], atol=1e-9, rtol=1e-7):
        raise failure(t(f"{label}：与 torch 自带的层（相同权重）比较", f"{label}: compared with torch's own layer "
                        "(same weights)"), show(theirs[real]), show(as_f64(out)[real]))


def check_encoder_layer(cls) -> None:
    what, gen, n = "EncoderLayer", seeded(1102), 0
    for B, _, n_s, d, h, d_ff, lengths in LAYER_CASES:
        label = f"{what}(d={d}, h={h}, d_ff={d_ff}), x (B={B}, n={n_s}, d={d}), lengths={lengths}"
        m = _randomise(_build_layer(cls, d, h, d_ff, False, label), gen)
        x = torch.randn(B, n_s, d, generator=gen, dtype=torch.float64)
        mask = torch.arange(n_s)[None] < torch.tensor(lengths)[:, None]
        with torch.no_grad():
            out = call(m, x.clone(), mask.clone(), what=label, hints=LAYER_HINTS)
            theirs = _torch_layer(m, d, h, d_ff, False)(x, src_key_padding_mask=~mask)
        _compare(out, ref_encoder(m, x, mask), theirs, mask, label, ENC_BUGS, (m, x, mask))
        n += 1
        # property: whatever sits in the padding, the real tokens' outputs do not change
        x2 = x.clone()
        x2[~mask] = torch.randn(int((~mask).sum()), d, generator=gen, dtype=torch.float64) * 4
        with torch.no_grad():
            out2 = call(m, x2, mask.clone(), what=label, hints=LAYER_HINTS)
        n += 1
        if not close(as_f64(out2)[mask], as_f64(out)[mask], atol=1e-12, rtol=0):
            bug = diagnose(out, ENC_BUGS, m, x, mask, expected=ref_encoder(m, x, mask)) or ENC_BUGS[2]
            raise failure(t(f"{label}：改动填充位置的输入", f"{label}: changing the inputs at padded positions"),
                          t("真实 token 的输出不变", "real tokens' outputs unchanged"), t("它们变了", "they changed"),
                          bug)
    label = f"{what}(8, 2, 16)(x, src_mask=None)"
    m = _randomise(_build_layer(cls, 8, 2, 16, False, label), gen)
    x = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        out = call(m, x, what=label, hints=MHA_HINTS + allowed(B_ENC_NONE))
    _compare(out, ref_encoder(m, x, None), None, None, label, ENC_BUGS, (m, x, None))
    passed(what, n + 1)


DEC_SIGNS = MHA_HINTS + [(Raises(contains=("must match the size", "key_padded_mask", "key_padding_mask")), DEC_BUGS[4])]
DEC_HINTS = DEC_SIGNS + SUPER_HINTS + COMMON_HINTS


LONG_TARGET = 1100          # longer than any fixed size a student is likely to pick for a causal mask (512, 1024)
# the layer ran at n_t = 6 already: an error that names the long length (or the mask) comes from a mask of a fixed size
FIXED_MASK_HINTS = [(Raises(contains=(str(LONG_TARGET), "attn_mask")), B_MASK_FIXED)]


def _decoder_property(m, y, mem, mask, label, gen):
    with torch.no_grad():
        base = call(m, y.clone(), mem.clone(), mask.clone(), what=label)
        n_t = y.shape[1]
        for i in range(n_t - 1):                       # later target tokens never reach earlier outputs
            y2 = y.clone()
            y2[:, i + 1:] += torch.randn(y2[:, i + 1:].shape, generator=gen, dtype=torch.float64) * 3
            if not close(as_f64(call(m, y2, mem, mask, what=label))[:, :i + 1], as_f64(base)[:, :i + 1],
                         atol=1e-12, rtol=0):
                raise failure(t(f"{label}：改动目标位置 {i} 之后的 token", f"{label}: changing target tokens after {i}"),
                              t(f"位置 0…{i} 的输出不变", f"outputs 0…{i} unchanged"), t("它们变了", "they changed"),
                              DEC_BUGS[0])
        mem2 = mem.clone()
        mem2[~mask] += 5.0
        if not close(call(m, y, mem2, mask, what=label), base, atol=1e-12, rtol=0):
            raise failure(t(f"{label}：改动 memory 的填充位置", f"{label}: changing memory at padded positions"),
                          t("输出不变", "output unchanged"), t("输出变了", "the output changed"), DEC_BUGS[2])
        mem3 = mem.clone()
        mem3[:, -1] += 1.0                              # the last real source token of the first sequence
        moved = (as_f64(call(m, y, mem3, mask, what=label)) - as_f64(base))[0].abs().amax(-1)
        if not bool((moved > 1e-9).all()):
            raise failure(t(f"{label}：改动最后一个源 token", f"{label}: changing the last source token"),
                          t("每个目标位置的输出都可能变", "every target position's output may change"),
                          t(f"位置 {(moved <= 1e-9).nonzero().flatten().tolist()} 完全没变",
                            f"positions {(moved <= 1e-9).nonzero().flatten().tolist()} did not move at all"),
                          DEC_BUGS[5])


def check_decoder_layer(cls) -> None:
    what, gen, n = "DecoderLayer", seeded(1103), 0
    for B, n_t, n_s, d, h, d_ff, lengths in LAYER_CASES:
        label = (f"{what}(d={d}, h={h}, d_ff={d_ff}), y (B={B}, n_t={n_t}, d={d}), memory (n_s={n_s}), "
                 f"lengths={lengths}")
        m = _randomise(_build_layer(cls, d, h, d_ff, True, label), gen)
        y = torch.randn(B, n_t, d, generator=gen, dtype=torch.float64)
        mem = torch.randn(B, n_s, d, generator=gen, dtype=torch.float64)
        mask = torch.arange(n_s)[None] < torch.tensor(lengths)[:, None]
        with torch.no_grad():
            out = call(m, y.clone(), mem.clone(), mask.clone(), what=label, hints=DEC_HINTS)
            theirs = _torch_layer(m, d, h, d_ff, True)(
                y, mem, tgt_mask=torch.ones(n_t, n_t, dtype=torch.bool).triu(1), memory_key_padding_mask=~mask)
        _compare(out, ref_decoder(m, y, mem, mask), theirs, slice(None), label, DEC_BUGS, (m, y, mem, mask))
        n += 1
    label = f"{what}(8, 2, 16)"
    m = _randomise(_build_layer(cls, 8, 2, 16, True, label), gen)
    y, mem = (torch.randn(2, k, 8, generator=gen, dtype=torch.float64) for k in (6, 4))
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    _decoder_property(m, y, mem, mask, label, gen)
    with torch.no_grad():
        out = call(m, y, mem, what=f"{label}(y, memory, memory_mask=None)", hints=MHA_HINTS + allowed(B_DEC_NONE))
    _compare(out, ref_decoder(m, y, mem, None), None, None, f"{label}(y, memory)", DEC_BUGS, (m, y, mem, None))
    # the same layer again on a much longer target: the causal mask is made for each call's n_t
    long_label = t(f"{label}：同一层再处理一个长得多的目标（n_t = {LONG_TARGET}）",
                   f"{label}: the same layer on a much longer target (n_t = {LONG_TARGET})")
    y_long = torch.randn(1, LONG_TARGET, 8, generator=gen, dtype=torch.float64)
    mem_long, mask_long = mem[:1].clone(), mask[:1].clone()
    with torch.no_grad():
        out = call(m, y_long.clone(), mem_long, mask_long, what=long_label, hints=FIXED_MASK_HINTS + DEC_HINTS)
    expected = ref_decoder(m, y_long, mem_long, mask_long)
    if isinstance(out, torch.Tensor) and out.shape == expected.shape and not close(out, expected, atol=1e-9, rtol=1e-7) \
            and close(out[:, :6], expected[:, :6], atol=1e-9, rtol=1e-7):
        raise failure(long_label, show(expected[:, -1]), show(as_f64(out)[:, -1]), B_MASK_FIXED)
    _compare(out, expected, None, None, long_label, DEC_BUGS, (m, y_long, mem_long, mask_long))
    passed(what, n + 5)


# ================================================================ greedy_decode

V_MOCK = 13


def _mock_model():
    """A fixed 'model' with the chapter's interface. Its next token depends on
    the last token fed in, on the position and on the real source tokens (so
    a decoder that ignores its own outputs, reads the wrong position or skips
    the padding mask gives other tokens); sequence b stops after a number of
    steps set by its source. (Built inside a function: the student's code may
    call it.)"""

    class Mock:
        def __init__(self, eos, bos):
            self.eos, self.bos = eos, bos
            self.tokens = [i for i in range(V_MOCK) if i not in (eos, bos)]
            self.encodes = 0
            self.decode_masks = []                                  # the src_mask of every decode call

        def encode(self, src, src_mask):
            self.encodes += 1
            if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool or src_mask.shape != src.shape:
                raise ValueError(f"encode(src, src_mask): src_mask must be a bool tensor of shape "
                                 f"{tuple(src.shape)}, got {getattr(src_mask, 'dtype', type(src_mask).__name__)} "
                                 f"{tuple(getattr(src_mask, 'shape', ()))}")
            return torch.where(src_mask, src, torch.zeros_like(src)).double()[..., None]   # (B, n_s, 1)

        def decode(self, tgt, memory, src_mask):
            self.decode_masks.append(src_mask.clone() if isinstance(src_mask, torch.Tensor) else src_mask)
            key = memory[..., 0].sum(1).long()                                          # (B,)
            stop = 2 + key % 5                                                          # steps until <eos>
            pos = torch.arange(tgt.shape[1])[None, :]
            pick = (tgt * 3 + key[:, None] + 2 * pos) % len(self.tokens)
            nxt = torch.tensor(self.tokens)[pick]
            nxt = torch.where(pos == stop[:, None] - 1, torch.full_like(nxt, self.eos), nxt)
            return torch.nn.functional.one_hot(nxt, V_MOCK).double() * 4 - 2           # (B, n_t, V)

    return Mock


def ref_greedy(model, src, lengths, max_len, bos, eos, *, feed=True, stop_eos=True, all_done=True,
               bos_out=False, mask="real", steps=0, axis=-1, fill_eos=True, start=None, fill_with=None):
    """Greedy decoding; the keywords switch on known bugs (``start``: the token tgt begins with instead of bos,
    "eos" for eos; ``feed="last"``: only the last token fed back; ``axis="mean"``: the argmax of the logits
    averaged over positions; ``bos_out="drop"``: the first generated token dropped too; ``fill_with="bos"``:
    finished sequences filled with bos)."""
    start = eos if start == "eos" else start
    B, n_s = src.shape
    real = torch.arange(n_s)[None] < lengths[:, None]
    src_mask = {"real": real, "inverted": ~real, "all": torch.ones_like(real)}[mask]
    memory = model.encode(src, src_mask)
    tgt = torch.full((B, 1), bos if start is None else start, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len + steps):
        fed = tgt if feed is True else tgt[:, -1:] if feed == "last" else tgt[:, :1]
        logits = model.decode(fed, memory, src_mask)
        nxt = (logits[:, -1].argmax(-1) if axis == -1 else logits.mean(1).argmax(-1) if axis == "mean"
               else logits.argmax(1)[:, -1])
        if stop_eos and fill_eos:
            nxt = torch.where(done, torch.full_like(nxt, bos if fill_with == "bos" else eos), nxt)
        tgt = torch.cat([tgt, nxt[:, None]], 1)
        done = done | (nxt == eos)
        stop = bool(done.all()) if all_done is True else bool(done[0]) if all_done == "first" else bool(done.any())
        if stop_eos and stop:
            break
    return tgt[:, 2:] if bos_out == "drop" else tgt if bos_out else tgt[:, 1:]


def _greedy_bug(key, zh, en, **kw):
    return Bug(key, zh, en, lambda *a: ref_greedy(*a, **kw))


GREEDY_BUGS = [
    _greedy_bug("greedy_max_len_short",
                "max_len 差一位（少一步）：循环 range(max_len) 次，每次生成一个 token，最多生成 max_len 个。",
                "max_len is off by one (a step short): loop range(max_len) times, one token per step, at most "
                "max_len tokens.", steps=-1),
    _greedy_bug("greedy_max_len_long",
                "max_len 差一位（多一步）：最多生成 max_len 个 token，循环 range(max_len) 次就够了。",
                "max_len is off by one (a step too many): generate at most max_len tokens; range(max_len) steps "
                "are enough.", steps=1),
    _greedy_bug("greedy_eos_never_stops",
                "遇到 <eos> 没有停：序列输出 <eos> 之后还在继续生成别的 token。一个序列结束后，它后面的位置都应是 eos；"
                "所有序列都结束时就退出循环。", "decoding does not stop at <eos>: after a sequence emits <eos> it goes "
                "on producing other tokens. Once a sequence has finished, its later positions must all be eos; "
                "leave the loop when every sequence has finished.", stop_eos=False),
    _greedy_bug("greedy_stops_at_first_eos",
                "第一个序列输出 <eos> 时就停下了整批：应该等批里所有序列都输出了 <eos>（用 done.all()，不是 any()）。",
                "the whole batch stops when the first sequence emits <eos>: wait until every sequence in the batch "
                "has emitted it (done.all(), not any()).", all_done=False),
    _greedy_bug("greedy_no_feedback",
                "每一步的预测都只取决于 <bos>，所以它永远在预测第一个字：要么没有把自己的输出喂回去（每一步都要把刚选出的 "
                "token 接在 tgt 后面，再用整个 tgt 解码），要么读错了位置（下一个 token 来自最后一个位置 logits[:, -1]，"
                "不是 logits[:, 0]）。", "every step's prediction depends on <bos> alone, so it keeps predicting the "
                "first character: either the decoder's own outputs are not fed back (append each chosen token to "
                "tgt and decode the whole tgt at the next step), or the wrong position is read (the next token "
                "comes from the last position, logits[:, -1], not logits[:, 0]).", feed=False),
    _greedy_bug("greedy_returns_bos",
                "返回值里带上了开头的 <bos>：只返回生成的 token（tgt[:, 1:]）。",
                "the result still starts with <bos>: return only the generated tokens (tgt[:, 1:]).", bos_out=True),
    _greedy_bug("greedy_padding_mask_inverted",
                "源序列的掩码反了：padding_mask(src_lengths, n) 里 True 是真实 token，应原样传给 encode 和 decode。",
                "the source mask is inverted: in padding_mask(src_lengths, n) True marks a real token; pass it to "
                "encode and decode as it is.", mask="inverted"),
    _greedy_bug("greedy_ignores_src_lengths",
                "没有用 src_lengths：掩码全是 True，编码器和交叉注意力把 <pad> 当成了真实的源 token。"
                "用 padding_mask(src_lengths, src.shape[1])。", "src_lengths is not used: the mask is all True, so the "
                "encoder and the cross-attention treat <pad> as real source tokens. Use "
                "padding_mask(src_lengths, src.shape[1]).", mask="all"),
    _greedy_bug("greedy_argmax_wrong_axis",
                "argmax 沿错了轴：下一个 token 是最后一个位置在词表上的 argmax，logits[:, -1].argmax(-1)，"
                "不是沿位置轴（dim=1）取最大。", "the argmax runs over the wrong axis: the next token is the argmax "
                "over the vocabulary at the last position, logits[:, -1].argmax(-1), not the maximum over the "
                "positions (dim=1).", axis=1),
    _greedy_bug("greedy_no_eos_padding",
                "序列输出 <eos> 之后没有一直填 eos：在等别的序列结束的这几步里，它又生成了别的 token。"
                "用 torch.where(done, eos, nxt) 把已经结束的序列固定在 eos 上。", "after a sequence emits <eos> it "
                "is not kept at eos: while it waits for the others it produces other tokens again. Keep finished "
                "sequences on eos with torch.where(done, eos, nxt).", fill_eos=False),
    _greedy_bug("greedy_starts_without_bos",
                "tgt 的开头不是 bos（例如用 torch.zeros 建的，是 0）：解码器的第一个输入必须是 <bos>，"
                "tgt = torch.full((B, 1), bos)。", "tgt does not start with bos (built with torch.zeros, say, it holds "
                "0): the decoder's first input must be <bos>, tgt = torch.full((B, 1), bos).", start=0),
    _greedy_bug("greedy_drops_first_token", "返回时把第一个生成的 token 也去掉了：只去掉开头的 <bos>（第 0 列）。",
                "the first generated token is dropped too: drop only the leading <bos> (column 0).", bos_out="drop"),
    _greedy_bug("greedy_no_eos_padding",
                "序列输出 <eos> 之后没有一直填 eos：结束了的序列后面填的是别的 token（例如 bos）。已经结束的序列要固定在 eos 上。",
                "after a sequence emits <eos> it is not kept at eos: a finished sequence is filled with another token "
                "(bos, say). Keep finished sequences on eos.", fill_with="bos"),
    _greedy_bug("greedy_starts_without_bos",
                "tgt 的开头不是 bos（这里是 eos）：解码器的第一个输入必须是 <bos>，tgt = torch.full((B, 1), bos)。",
                "tgt does not start with bos (it starts with eos here): the decoder's first input must be <bos>, "
                "tgt = torch.full((B, 1), bos).", start="eos"),
    _greedy_bug("greedy_feeds_last_token_only",
                "每一步只把最后一个 token 喂给了解码器：解码器要看到整个目标序列（从 <bos> 起），才知道自己写到了哪里。",
                "only the last token is fed to the decoder at each step: the decoder needs the whole target (from "
                "<bos> on) to know where it is.", feed="last"),
    _greedy_bug("greedy_argmax_of_mean",
                "下一个 token 取自各个位置 logits 的平均：它只看最后一个位置，logits[:, -1].argmax(-1)。",
                "the next token comes from the logits averaged over positions: it is read at the last position "
                "alone, logits[:, -1].argmax(-1).", axis="mean"),
    _greedy_bug("greedy_stops_on_first_row",
                "只看了第 0 个序列：它输出 <eos> 时整批就停了。要等所有序列都结束（done.all()）。",
                "only sequence 0 is watched: the whole batch stops when it emits <eos>. Wait until every sequence "
                "has finished (done.all()).", all_done="first"),
]


def _greedy_cases():
    # (label, src rows (real tokens), padded width, max_len, bos, eos)
    yield t("三个序列在不同的步结束", "three sequences ending at different steps"), [[7], [6, 5], [3, 4, 6]], 4, 8, 1, 2
    yield t("max_len 先到：截断", "max_len comes first: cut off"), [[9, 1, 5, 5], [4]], 4, 3, 0, 12
    yield t("一个序列", "a single sequence"), [[8, 8, 3]], 5, 10, 11, 5
    yield t("四个序列，填充到 6", "four sequences padded to 6"), [[3], [4, 4], [9, 3, 3], [5, 6, 7, 8]], 6, 9, 2, 1


def _greedy_ok(out, expected, max_len, eos):
    """Equal to the reference; running on to max_len is fine when the extra columns are all eos."""
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != expected.shape[0]:
        return False
    L = expected.shape[1]
    if out.shape[1] < L or out.shape[1] > max_len or not torch.equal(out[:, :L].long(), expected):
        return False
    return bool((out[:, L:] == eos).all())


B_GREEDY_ENCODES = Bug("greedy_encodes_every_step", "编码器跑了不止一次：源序列在解码时不变，memory 用 model.encode "
                       "只在循环之前算一次，每一步只调用 model.decode。", "the encoder runs more than once: the source does "
                       "not change while decoding, so compute the memory with model.encode once before the loop and "
                       "call only model.decode at each step.")
B_GREEDY_DECODE_MASK = Bug("greedy_decode_without_src_mask", "model.decode 没有拿到源序列的填充掩码（传了 None、全 True 的掩码，"
                           "或者别的张量）：解码器的交叉注意力要靠它忽略源序列里的 <pad>。每一步都传同一个掩码，"
                           "padding_mask(src_lengths, src.shape[1])，和给 encode 的一样。", "model.decode does not get the "
                           "source's padding mask (None, an all-True mask or another tensor was passed): the decoder's "
                           "cross-attention needs it to ignore the source's <pad>. Pass the same mask at every step, "
                           "padding_mask(src_lengths, src.shape[1]), the one encode gets.")
B_GREEDY_NOT_TENSOR = Bug("greedy_not_a_tensor", "返回的不是张量（例如一个列表）：返回 (B, L) 的 LongTensor。",
                          "the result is not a tensor (a list, say): return a (B, L) LongTensor.")
B_GREEDY_DTYPE = Bug("greedy_not_long", "返回的不是整数（LongTensor）：token 是编号。tgt 用 torch.full((B, 1), bos, "
                     "dtype=torch.long) 建，argmax 的结果本来就是 long；不要拼接到 float 的张量上。", "the result is not "
                     "a LongTensor: tokens are ids. Build tgt with torch.full((B, 1), bos, dtype=torch.long); argmax "
                     "already gives long; do not concatenate onto a float tensor.")
GREEDY_HINTS = [
    (Raises(contains=("same number of dimensions",)), Bug(
        "greedy_cat_needs_new_axis", "下一个 token nxt 的形状是 (B,)，tgt 是 (B, t)：拼接之前加一维，"
        "torch.cat([tgt, nxt[:, None]], dim=1)。", "the next tokens nxt have shape (B,) and tgt (B, t): add an axis "
        "before concatenating, torch.cat([tgt, nxt[:, None]], dim=1).")),
    (Raises(contains=("src_mask must be a bool tensor of shape",)), Bug(
        "greedy_mask_width", "传给 encode/decode 的掩码不对：它要是和 src 一样形状 (B, n_s) 的 bool 张量，"
        "也就是 padding_mask(src_lengths, src.shape[1])（宽度是源序列的长度，不是 max_len；也不要转成 float）。",
        "the mask passed to encode/decode is wrong: it must be a bool tensor of src's shape (B, n_s), that is "
        "padding_mask(src_lengths, src.shape[1]) (the width is the source's length, not max_len; do not turn it "
        "into floats).")),
    (Raises(contains=("'int' object", "must be Tensor, not int")), Bug(
        "greedy_mask_arguments", "padding_mask 的参数顺序：padding_mask(src_lengths, src.shape[1])——先是长度张量，再是宽度 n。",
        "the order of padding_mask's arguments: padding_mask(src_lengths, src.shape[1]) — the lengths tensor first, "
        "then the width n."))] + COMMON_HINTS


def check_greedy_decode(greedy_decode) -> None:
    with on_its_own(greedy_decode, (E_PADDING,)):
        passed("greedy_decode", _greedy_checks(greedy_decode))


def _greedy_checks(greedy_decode) -> int:
    what, n, Mock = "greedy_decode", 0, _mock_model()
    for label, rows, width, max_len, bos, eos in _greedy_cases():
        src = torch.full((len(rows), width), 7, dtype=torch.long)          # <pad> = 7 here: it must not count
        for b, r in enumerate(rows):
            src[b, :len(r)] = torch.tensor(r)
        lengths = torch.tensor([len(r) for r in rows])
        args = (Mock(eos, bos), src, lengths, max_len, bos, eos)
        full = f"{what}(model, src, src_lengths={lengths.tolist()}, max_len={max_len}, bos={bos}, eos={eos}) — {label}"
        with torch.no_grad():
            out = call(greedy_decode, args[0], src.clone(), lengths.clone(), max_len, bos, eos, what=full,
                       hints=GREEDY_HINTS)
        encodes, masks = args[0].encodes, list(args[0].decode_masks)     # before the reference adds its own
        expected = ref_greedy(*args)
        n += 1
        if not isinstance(out, torch.Tensor):
            raise failure(t(f"{full}：返回值", f"{full}: the result"), t("(B, L) 的 LongTensor", "a (B, L) LongTensor"),
                          type(out).__name__, B_GREEDY_NOT_TENSOR)
        if not _greedy_ok(out, expected, max_len, eos):
            shown = out.tolist() if isinstance(out, torch.Tensor) else repr(out)[:200]
            bug = diagnose(out, GREEDY_BUGS, *args, expected=expected,
                           match=lambda a, b: isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a, b))
            raise failure(full, str(expected.tolist()), str(shown), bug,
                          hint=t("返回 (B, L) 的 LongTensor，L ≤ max_len：不含 <bos>，每个序列在它的 <eos> 之后都填 eos。",
                                 "return a (B, L) LongTensor with L ≤ max_len: no <bos>, and every sequence filled "
                                 "with eos after its own <eos>."))
        if encodes != 1:
            raise failure(t(f"{full}：model.encode 的调用次数", f"{full}: calls of model.encode"), "1",
                          str(encodes), B_GREEDY_ENCODES)
        real = torch.arange(width)[None] < lengths[:, None]
        wrong = [m for m in masks if not (isinstance(m, torch.Tensor) and torch.equal(m, real))]
        if wrong:
            got = wrong[0] if not isinstance(wrong[0], torch.Tensor) else wrong[0].int().tolist()
            raise failure(t(f"{full}：传给 model.decode 的 src_mask", f"{full}: the src_mask passed to model.decode"),
                          str(real.int().tolist()), str(got), B_GREEDY_DECODE_MASK)
        if out.dtype != torch.long:
            raise failure(t(f"{full}：dtype", f"{full}: dtype"), "torch.int64 (long)", str(out.dtype), B_GREEDY_DTYPE)
    return n


# ================================================================ each exercise on its own

E_PADDING = Earlier("padding_mask", 1, passes(_padding_checks), padding_mask_stand_in)


# ================================================================ what the visible tests show (helpers/probes)

ERRORS = {"padding_mask": PAD_HINTS, "cross_attention": CROSS_HINTS, "EncoderLayer": MHA_HINTS + SUPER_HINTS,
          "DecoderLayer": DEC_SIGNS + SUPER_HINTS, "greedy_decode": GREEDY_HINTS}


def _probe_layer(gen, d, h, d_ff, decoder):
    """Torch's own modules under the exercise's names, with short random parameters (LayerNorms off 1 and 0)."""
    parts = dict(norm1=nn.LayerNorm(d), self_attn=nn.MultiheadAttention(d, h, batch_first=True), norm2=nn.LayerNorm(d),
                 ffn=nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d)))
    if decoder:
        parts.update(cross_attn=nn.MultiheadAttention(d, h, batch_first=True), norm3=nn.LayerNorm(d))
    m = nn.ModuleDict(parts)
    with torch.no_grad():
        for name, p in m.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_((1 + 0.3 * noise if "norm" in name and name.endswith("weight") else noise * 0.3).round(decimals=3))
    return m.eval()


def _state_of(m) -> dict:
    return {name: p.detach().clone() for name, p in m.named_parameters()}


BEAM_TABLE = torch.tensor([  # next-token probabilities after each token: 0 <bos>, 1 <eos>, 2, 3, 4
    [0.00, 0.00, 0.50, 0.40, 0.10],
    [0.00, 1.00, 0.00, 0.00, 0.00],
    [0.00, 0.30, 0.00, 0.34, 0.36],
    [0.00, 0.90, 0.04, 0.03, 0.03],
    [0.00, 0.50, 0.20, 0.20, 0.10]], dtype=torch.float64).clamp(min=1e-9).log()


def ref_beam(table, max_len, bos, eos, beam):
    """The going-further challenge: beam search over a bigram table (the log-probabilities of the next token
    after each token), summed log-probabilities, no length normalisation; the best hypothesis without <bos>."""
    table = as_f64(table)
    live, done = [([bos], 0.0)], []
    for _ in range(max_len):
        grown = sorted(((seq + [k], score + float(table[seq[-1], k])) for seq, score in live
                        for k in range(table.shape[1])), key=lambda c: -c[1])[:beam]
        live = [c for c in grown if c[0][-1] != eos]
        done += [c for c in grown if c[0][-1] == eos]
        if not live:
            break
    best = max(done + live, key=lambda c: c[1])
    return torch.tensor(best[0][1:])


def probes() -> list[Probe]:
    from helpers.ch11_encoder_decoder import StandIn
    gen = seeded(1150)

    def r(*shape):
        return torch.randn(*shape, generator=gen).round(decimals=3)
    pad_bugs = PAD_BUGS
    # cross-attention: n_t = n_s first (a mistake gives numbers, not an error), then n_t != n_s, d != d_k != d_v
    square = (r(2, 4, 6), r(2, 4, 6), r(6, 3), r(6, 3), r(6, 5), torch.tensor([[True] * 4, [True, True, False, False]]))
    oblong = (r(2, 5, 8), r(2, 3, 8), r(8, 4), r(8, 4), r(8, 6), torch.tensor([[True, True, True], [True, True, False]]))
    order = Bug(B_CROSS_ORDER.key, B_CROSS_ORDER.zh, B_CROSS_ORDER.en, lambda *a: tuple(reversed(ref_cross(*a))))
    cross_bugs = CROSS_BUGS + [order]
    enc = _probe_layer(gen, 8, 2, 16, False)
    x, src_mask = r(2, 4, 8), torch.tensor([[True] * 4, [True, True, False, False]])
    dec = _probe_layer(gen, 8, 2, 16, True)
    y, memory = r(2, 4, 8), r(2, 4, 8)
    mem_mask = torch.tensor([[True] * 4, [True, True, True, False]])
    src = torch.tensor([[3, 4, 6, 7], [6, 5, 7, 7], [7, 7, 7, 7]])          # 7 = <pad> here: it must not count
    src[2, 0] = 8
    lengths, max_len, bos, eos = torch.tensor([3, 2, 1]), 8, 1, 2
    return [
        Probe("pad", args=(torch.tensor([3, 1, 4]), 5), reference=padding_mask_stand_in, bugs=pad_bugs),
        Probe("pad_zero", args=(torch.tensor([0, 2]), 3), reference=padding_mask_stand_in, bugs=pad_bugs),
        Probe("cross_square", args=square, reference=ref_cross, parts=("out", "weights"), bugs=cross_bugs),
        Probe("cross", args=oblong, reference=ref_cross, parts=("out", "weights"), bugs=cross_bugs),
        Probe("cross_none", args=oblong[:5], reference=ref_cross, parts=("out", "weights"), bugs=cross_bugs),
        Probe("encoder", args=(x, src_mask), reference=lambda x, mask: ref_encoder(enc, x, mask), state=_state_of(enc),
              bugs=ENC_BUGS, run_bug=lambda bug: bug.impl(enc, x, src_mask)),
        Probe("encoder_none", args=(x,), reference=lambda x: ref_encoder(enc, x, None)),
        Probe("decoder", args=(y, memory, mem_mask), reference=lambda y, m, k: ref_decoder(dec, y, m, k),
              state=_state_of(dec), bugs=DEC_BUGS + [B_IS_CAUSAL_ALONE], run_bug=lambda bug: bug.impl(dec, y, memory, mem_mask)),
        Probe("decoder_none", args=(y, memory), reference=lambda y, m: ref_decoder(dec, y, m, None)),
        Probe("greedy", args=(src, lengths, max_len, bos, eos),
              reference=lambda *a: ref_greedy(StandIn(eos, bos), *a), bugs=GREEDY_BUGS,
              run_bug=lambda bug: bug.impl(StandIn(eos, bos), src, lengths, max_len, bos, eos)),
        # max_len comes before every <eos>: the output is cut off there
        Probe("greedy_cut", args=(src, lengths, 3, bos, eos),
              reference=lambda *a: ref_greedy(StandIn(eos, bos), *a), bugs=GREEDY_BUGS,
              run_bug=lambda bug: bug.impl(StandIn(eos, bos), src, lengths, 3, bos, eos)),
        # the going-further challenge: numbers to compare with, no known mistakes
        Probe("beam", args=(BEAM_TABLE, 6, 0, 1, 2), reference=ref_beam),
    ]
