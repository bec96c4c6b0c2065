"""Hidden tests of ch03_multi_head: split_heads, merge_heads, CausalSelfAttention.

The reference below works head by head on explicit channel slices
(head i = channels i*d_k:(i+1)*d_k), in float64, so it shares no code path
with a reshape/transpose solution; the module is also compared with torch's
own nn.MultiheadAttention loaded with the same weights.
"""
from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from helpers.i18n import t

from .cases import Check, Earlier, on_its_own, passes, same
from .core import Bug, GradingFailure, Raises, as_f64, call, expect_autograd, failure, passed, seeded
from .probes import Probe

# ---------------------------------------------------------------- references (float64)

def ref_split(x, h):
    """(B, N, d) -> (B, h, N, d_k), head i = channels i*d_k:(i+1)*d_k, by explicit slicing."""
    x = as_f64(x)
    d_k = x.shape[-1] // h
    return torch.stack([x[..., i * d_k:(i + 1) * d_k] for i in range(h)], dim=1)


def ref_merge(x):
    """(B, h, N, d_k) -> (B, N, h*d_k), by concatenating the heads along channels."""
    x = as_f64(x)
    return torch.cat([x[:, i] for i in range(x.shape[1])], dim=-1)


def _softmax64(s, dim=-1):
    m = s.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    return e / e.sum(dim=dim, keepdim=True)


def ref_mha(x, w_qkv, b_qkv, w_o, b_o, h, *, split=None, merge=None, scale="d_k", proj=True,
            order=(0, 1, 2), causal=True, softmax_dim=-1):   # noqa: C901 - one switch per known bug
    """Causal multi-head self-attention in float64, one head at a time.

    The keyword arguments switch on known bugs (the default is correct)."""
    x = as_f64(x)
    B, N, d = x.shape
    d_k = d // h
    y = x @ as_f64(w_qkv).T
    if b_qkv is not None:
        y = y + as_f64(b_qkv)
    if order == "per_head":          # each head's q, k, v side by side: (B, N, h, 3·d_k)
        per_head = y.reshape(B, N, h, 3 * d_k)
        parts = [per_head[..., j * d_k:(j + 1) * d_k].reshape(B, N, d) for j in range(3)]
        order = (0, 1, 2)
    else:
        parts = [y[..., j * d:(j + 1) * d] for j in range(3)]
    q, k, v = (parts[j] for j in order)
    split = split or ref_split
    q, k, v = split(q, h), split(k, h), split(v, h)                   # (B, h, N, d_k)
    denom = {"d_k": math.sqrt(d_k), "d": math.sqrt(d), "none": 1.0, "d_k_plain": float(d_k)}[scale]
    s = torch.einsum("bhqc,bhkc->bhqk", q, k) / denom
    allowed = torch.ones(N, N, dtype=torch.bool).tril()
    if causal is True:
        s = s.masked_fill(~allowed, float("-inf"))
    w = _softmax64(s, softmax_dim)
    if causal == "after":
        w = w.masked_fill(~allowed, 0.0)
    heads = torch.einsum("bhqk,bhkc->bhqc", w, v)
    out = (merge or ref_merge)(heads)                                  # (B, N, d)
    if proj:
        out = out @ (as_f64(w_o) if proj == "untransposed" else as_f64(w_o).T)
        if b_o is not None:
            out = out + as_f64(b_o)
    return out


# ---------------------------------------------------------------- known bugs

def _split_view_no_T(x, h):
    B, N, d = x.shape
    return as_f64(x).reshape(B, h, N, d // h)


def _split_interleaved(x, h):
    B, N, d = x.shape
    return as_f64(x).reshape(B, N, d // h, h).permute(0, 3, 1, 2)


def _merge_no_T(x):
    B, h, N, d_k = x.shape
    return as_f64(x).reshape(B, N, h * d_k)


def _merge_interleaved(x):
    B, h, N, d_k = x.shape
    return as_f64(x).permute(0, 2, 3, 1).reshape(B, N, h * d_k)


B_SPLIT_VIEW = Bug("split_view_without_transpose",
                   "拆头时直接 view/reshape 成 (B, h, N, d_k)，没有先变成 (B, N, h, d_k) 再 transpose(1, 2)："
                   "形状虽然对，但每个“头”拿到的是几个 token 首尾相接的一段数，而不是同一批 token 的 d_k 个通道。",
                   "the heads are split by a direct view/reshape to (B, h, N, d_k) instead of view to "
                   "(B, N, h, d_k) followed by transpose(1, 2): the shape is right, but each 'head' receives "
                   "a run of numbers from consecutive tokens instead of d_k channels of every token.",
                   _split_view_no_T)
B_SPLIT_INTERLEAVED = Bug("split_interleaved_channels",
                          "通道按交错方式分给了各个头（头 i 拿到通道 i, i+h, i+2h, …，例如 view(B, N, d_k, h)）："
                          "头 i 应该拿到连续的通道 i·d_k : (i+1)·d_k，即 view(B, N, h, d_k)。",
                          "the channels are dealt to the heads interleaved (head i gets channels i, i+h, i+2h, …, "
                          "e.g. view(B, N, d_k, h)); head i must hold the contiguous channels i·d_k : (i+1)·d_k, "
                          "i.e. view(B, N, h, d_k).", _split_interleaved)
B_MERGE_NO_T = Bug("merge_without_transpose",
                   "合并时直接 reshape 成 (B, N, d)，没有先 transpose(1, 2) 把 (B, h, N, d_k) 换回 (B, N, h, d_k)："
                   "不同 token 的输出被拼到了一起。",
                   "the heads are merged by reshaping (B, h, N, d_k) straight to (B, N, d), without first "
                   "transposing back to (B, N, h, d_k): outputs of different tokens get glued together.",
                   _merge_no_T)
B_MERGE_INTERLEAVED = Bug("merge_interleaved_channels",
                          "合并时把各头的通道交错排列（例如 permute 成 (B, N, d_k, h) 再 reshape）："
                          "应把头 0 的 d_k 个通道放在最前，然后是头 1，依此类推。",
                          "the merged channels are interleaved across heads (e.g. permuted to (B, N, d_k, h) "
                          "before the reshape); head 0's d_k channels must come first, then head 1's, and so on.",
                          _merge_interleaved)
B_MERGE_VIEW = Bug("merge_view_non_contiguous",
                   "transpose（或 permute）之后的张量在内存里不连续，不能直接 .view：用 .reshape(...)，或先 .contiguous() "
                   "再 .view(...)。",
                   "after a transpose (or a permute) the tensor is not contiguous in memory, so .view fails: use "
                   ".reshape(...), or .contiguous().view(...).")
B_SPLIT_LAST_AXES = Bug("split_axes_n_and_d_k_swapped",
                        "结果的形状是 (B, h, d_k, N)：头的维度到了前面，可 N 和 d_k 的顺序也跟着反了（例如 permute(0, 2, 3, 1)）。"
                        "题目要的是 (B, h, N, d_k)：只交换 N 和 h 这两维。",
                        "the result has shape (B, h, d_k, N): the head axis moved to the front, but N and d_k got "
                        "swapped too (permute(0, 2, 3, 1), say). The exercise asks for (B, h, N, d_k): swap only N and h.")
B_MERGE_TOO_FLAT = Bug("merge_flattened_too_far",
                       "结果的形状是 (B, N·h·d_k)：flatten 从第 1 维开始，把 N 也并进去了。只并最后两维（h 和 d_k），"
                       "结果是 (B, N, h·d_k)。",
                       "the result has shape (B, N·h·d_k): the flatten starts at axis 1 and fuses N in as well. Fuse only "
                       "the last two axes (h and d_k): (B, N, h·d_k).")


def _mha_bug(**kw):
    def impl(x, w_qkv, b_qkv, w_o, b_o, h):
        return ref_mha(x, w_qkv, b_qkv, w_o, b_o, h, **kw)
    return impl


B_SCALE_DK_PLAIN = Bug("mha_scaled_by_d_k",
                       "分数除的是 d_k，不是 √d_k：点积的方差是 d_k，要除以它的平方根才回到 1。",
                       "the scores are divided by d_k, not √d_k: a dot product has variance d_k, and dividing by its "
                       "square root brings that back to 1.", _mha_bug(scale="d_k_plain"))
B_SPLIT_BY_DK = Bug("mha_split_into_d_k_heads",
                    "拆成了 d_k 个头、每个宽 h，而不是 h 个头、每个宽 d_k（例如 split_heads(q, self.d_k)，头数和头宽弄反了）。",
                    "the heads are cut into d_k heads of width h instead of h heads of width d_k (split_heads(q, "
                    "self.d_k), say: the number of heads and their width swapped).",
                    _mha_bug(split=lambda x, h: ref_split(x, x.shape[-1] // h)))
B_MERGE_SWAPS_N_DK = Bug("mha_merge_swaps_n_and_d_k",
                         "合并时 transpose(-2, -1) 交换的是 N 和 d_k，不是头和 N：拼回 (B, N, d) 之前要把 (B, h, N, d_k) "
                         "换成 (B, N, h, d_k)，也就是交换第 1、2 维。",
                         "the merge's transpose(-2, -1) swaps N and d_k, not the heads and N: before fusing back to "
                         "(B, N, d), (B, h, N, d_k) becomes (B, N, h, d_k), a swap of axes 1 and 2.",
                         _mha_bug(merge=lambda x: as_f64(x).transpose(-2, -1).reshape(x.shape[0], x.shape[2], -1)))
B_PROJ_UNTRANSPOSED = Bug("mha_proj_weight_not_transposed",
                          "输出投影直接乘了 proj.weight（y @ weight）：nn.Linear 存的是 W_O 的转置，前向算的是 "
                          "y @ weight.T + bias。直接调用 self.proj(y) 就对了。",
                          "the output projection multiplies by proj.weight itself (y @ weight): nn.Linear stores the "
                          "transpose of W_O and computes y @ weight.T + bias. Call self.proj(y) instead.",
                          _mha_bug(proj="untransposed"))
B_QKV_PER_HEAD = Bug("mha_qkv_split_per_head",
                     "q、k、v 是按头切的（先 view(B, N, h, 3·d_k) 再把每个头切成三份）：题目的约定是 qkv 的输出前 d 个通道"
                     "是 q（各头依次排好），接着 d 个是 k，最后 d 个是 v。先沿最后一维切成三份，再各自拆头。",
                     "q, k and v are cut per head (viewed as (B, N, h, 3·d_k) and each head cut in three): the stated "
                     "layout puts q in the first d output channels of qkv (heads one after another), then d of k, then "
                     "d of v. Cut the last axis in three first, then split each into heads.", _mha_bug(order="per_head"))
B_SOFTMAX_HEADS = Bug("mha_softmax_over_heads",
                      "softmax 沿的是 dim=1，也就是头那一维：分数的形状是 (B, h, N, N)，每个 query 的一行权重沿最后一维"
                      "（dim=-1）加起来等于 1。",
                      "softmax runs over dim=1, the heads' axis: the scores have shape (B, h, N, N), and each query's "
                      "row of weights adds up to 1 along the last axis (dim=-1).", _mha_bug(softmax_dim=1))
B_SCALE_D = Bug("mha_scaled_by_sqrt_d",
                "分数除的是 √d（整个模型宽度），而不是每个头的 √d_k = √(d/h)：每个头的点积只有 d_k 项。",
                "the scores are divided by √d (the full model width) instead of each head's √d_k = √(d/h): "
                "a head's dot product has only d_k terms.", _mha_bug(scale="d"))
B_NO_SCALE = Bug("mha_no_scaling", "分数没有除以 √d_k。", "the scores are not divided by √d_k.",
                 _mha_bug(scale="none"))
B_NO_PROJ = Bug("mha_no_output_projection",
                "拼接各头之后没有经过输出投影 self.proj（W_O）：各头的结果从未被混合。",
                "the concatenated heads never go through the output projection self.proj (W_O): "
                "the heads' results are never mixed.", _mha_bug(proj=False))
B_ORDER = Bug("mha_qkv_wrong_order",
              "从融合投影 self.qkv 的输出里取 q、k、v 的顺序不对：约定是前 d 个通道为 q，接着 d 个为 k，最后 d 个为 v。",
              "q, k, v are taken from the fused projection self.qkv in the wrong order: the first d output "
              "channels are q, the next d are k, the last d are v.")
B_NO_MASK = Bug("mha_causal_mask_missing",
                "没有加因果掩码：位置 i 看到了后面的 token（j > i）。在 softmax 之前把上三角设成 -inf。",
                "the causal mask is missing: position i sees later tokens (j > i). Set the upper triangle "
                "to -inf before softmax.", _mha_bug(causal=False))
B_MASK_AFTER = Bug("mha_mask_after_softmax",
                   "在 softmax 之后才把未来的权重置 0：每行加起来不再是 1。掩码要在 softmax 之前（把分数设为 −∞）。",
                   "the future's weights are set to 0 after softmax: rows no longer add up to 1. Mask the scores "
                   "with −∞ before softmax.", _mha_bug(causal="after"))
B_SOFTMAX_DIM = Bug("mha_softmax_wrong_dim",
                    "softmax 沿错误的维度（dim=-2）：每个 query 的一行权重（沿 key，dim=-1）要加起来等于 1。",
                    "softmax runs over the wrong dimension (dim=-2): each query's row of weights (over the keys, "
                    "dim=-1) must add up to 1.", _mha_bug(softmax_dim=-2))
B_SPLIT_NO_T_SHAPE = Bug("split_transpose_missing",
                         "结果的形状是 (B, N, h, d_k)：只做了第一步 view，还差 transpose(1, 2) 把头的维度换到 N 前面，"
                         "题目要的是 (B, h, N, d_k)。",
                         "the result has shape (B, N, h, d_k): the view is done, but transpose(1, 2) is missing to move "
                         "the head axis in front of N; the exercise asks for (B, h, N, d_k).")
B_MERGE_NOT_FUSED = Bug("merge_last_axes_not_fused",
                        "结果的形状是 (B, N, h, d_k)：transpose 回来了，但最后两维还没有并成一维 h·d_k，"
                        "题目要的是 (B, N, h·d_k)。",
                        "the result has shape (B, N, h, d_k): it is transposed back, but the last two axes are not "
                        "fused into one of size h·d_k; the exercise asks for (B, N, h·d_k).")
B_NO_VALUES = Bug("mha_valueerror_without_values",
                  "ValueError 的信息里没有写出 d 和 h 的值：题目要求信息里写出它们（例如 f\"d={d} 不能被 h={h} 整除\"），"
                  "这样调用的人一眼就知道是哪两个数不配。",
                  "the ValueError's message does not give the values of d and h: the exercise asks for them (e.g. "
                  "f\"d={d} is not divisible by h={h}\"), so that the caller sees at once which two numbers do not fit.")
B_BIAS = Bug("mha_bias_argument_ignored",
             "没有把参数 bias 传给 nn.Linear：bias=False 时 self.qkv 和 self.proj 都不应有偏置，"
             "要写 nn.Linear(d, 3 * d, bias=bias) 和 nn.Linear(d, d, bias=bias)。",
             "the bias argument is not passed on to nn.Linear: with bias=False neither self.qkv nor self.proj has "
             "a bias; write nn.Linear(d, 3 * d, bias=bias) and nn.Linear(d, d, bias=bias).")
B_THREE_LINEARS = Bug("mha_qkv_not_one_projection",
                      "q、k、v 来自不止一个 nn.Linear（例如三个单独的 nn.Linear(d, d)，或者 q 一个、k 和 v 合一个）："
                      "题目要求一个属性 qkv，一次投影得到 3d 个输出，依次是 q、k、v（GPT-2 / nanoGPT 的 c_attn，"
                      "也是 nn.MultiheadAttention 的 in_proj_weight）。",
                      "q, k and v come from more than one nn.Linear (three separate nn.Linear(d, d), or one for q and "
                      "one for k and v): the exercise asks for one attribute qkv, one projection with 3d outputs, q, k, "
                      "v in that order (GPT-2's / nanoGPT's c_attn, and nn.MultiheadAttention's in_proj_weight).")
B_HEADS_OUT = Bug("mha_returns_heads_unmerged",
                  "forward 返回的形状是 (B, h, N, d_k)：各头的结果还没有拼回 (B, N, d)，也还没有经过输出投影 proj。",
                  "forward returns shape (B, h, N, d_k): the heads' results are not merged back into (B, N, d), nor "
                  "passed through the output projection proj.")
B_NO_RAISE = Bug("mha_no_error_at_construction",
                 "CausalSelfAttention(10, 3) 什么错误也没有抛出：d 不能被 h 整除的检查要写在 __init__ 里，在建任何层之前"
                 "就 raise ValueError(...)，不要等到 forward。",
                 "CausalSelfAttention(10, 3) raised nothing: the check that d is divisible by h belongs in __init__, "
                 "raising ValueError(...) before anything is built, not in forward.")
B_EXTRA_PARAMS = Bug("mha_extra_parameters",
                     "除了 qkv 和 proj，模块还有别的参数：题目要求没有别的参数，总数是 4d² + 4d。掩码不是要学习的参数："
                     "在 forward 里现做，或者用 register_buffer（不要用 nn.Parameter）。",
                     "the module has parameters besides qkv and proj: the exercise allows no others, 4d² + 4d in all. A "
                     "mask is not something to learn: build it in forward, or keep it with register_buffer (not "
                     "nn.Parameter).")
B_TUPLE = Bug("mha_forward_returns_tuple",
              "forward 返回了一个元组（像第 2 章那样的 (out, weights)）：这个模块只返回 (B, N, d) 的输出张量。",
              "forward returns a tuple (like chapter 2's (out, weights)): this module returns only the output "
              "tensor of shape (B, N, d).")
B_FIXED_MASK = Bug("mha_mask_of_fixed_size",
                   "掩码按一个固定长度建好以后就一直用（例如 register_buffer 一个 tril(ones(1024, 1024)) 再切片，或者第一次"
                   "调用时按那次的 N 建好存起来）：输入比它长时就出错。题目要求 forward 对任何长度 N 都成立，同一个模块先后处理"
                   "不同长度的输入也一样：在 forward 里按 N 现做掩码，或者 N 超过已有的大小时重建它。",
                   "the mask is built once at a fixed length and kept (a register_buffer of tril(ones(1024, 1024)), "
                   "sliced, or one built at the first call's N and stored): an input longer than that fails. The exercise "
                   "asks forward to work for any length N, one module after another length included: build the mask "
                   "for N in forward, or rebuild it when N outgrows the stored one.")
B_ASSERT = Bug("mha_assert_instead_of_valueerror",
               "d 不能被 h 整除时用了 assert：assert 抛出的是 AssertionError，而且在 python -O 下会被整个跳过。"
               "请写 if d % h != 0: raise ValueError(...)。",
               "you used assert for d not divisible by h: assert raises AssertionError, and python -O skips it "
               "entirely. Write if d % h != 0: raise ValueError(...).")


def _module_bugs():
    bugs = [Bug(B_SPLIT_VIEW.key, B_SPLIT_VIEW.zh, B_SPLIT_VIEW.en, _mha_bug(split=_split_view_no_T)),
            Bug(B_SPLIT_VIEW.key, B_SPLIT_VIEW.zh, B_SPLIT_VIEW.en,
                _mha_bug(split=_split_view_no_T, merge=_merge_no_T)),
            Bug(B_SPLIT_INTERLEAVED.key, B_SPLIT_INTERLEAVED.zh, B_SPLIT_INTERLEAVED.en,
                _mha_bug(split=_split_interleaved)),
            Bug(B_SPLIT_INTERLEAVED.key, B_SPLIT_INTERLEAVED.zh, B_SPLIT_INTERLEAVED.en,
                _mha_bug(split=_split_interleaved, merge=_merge_interleaved)),
            Bug(B_MERGE_NO_T.key, B_MERGE_NO_T.zh, B_MERGE_NO_T.en, _mha_bug(merge=_merge_no_T)),
            Bug(B_MERGE_INTERLEAVED.key, B_MERGE_INTERLEAVED.zh, B_MERGE_INTERLEAVED.en,
                _mha_bug(merge=_merge_interleaved)),
            B_SCALE_D, B_NO_SCALE, B_NO_PROJ, B_NO_MASK, B_MASK_AFTER, B_SOFTMAX_DIM,
            B_SCALE_DK_PLAIN, B_SPLIT_BY_DK, B_MERGE_SWAPS_N_DK, B_PROJ_UNTRANSPOSED, B_QKV_PER_HEAD, B_SOFTMAX_HEADS]
    for order in itertools.permutations(range(3)):
        if order != (0, 1, 2):
            bugs.append(Bug(B_ORDER.key, B_ORDER.zh, B_ORDER.en, _mha_bug(order=order)))
    return bugs


MODULE_BUGS = _module_bugs()

B_SPLIT_VIEW_ERROR = Bug(B_SPLIT_VIEW.key,
                         "这一行 view 报错，是因为 chunk 切出来的 q、k、v 在内存里不连续。但真正的问题是：" + B_SPLIT_VIEW.zh
                         + "换成 reshape 只会让错误的数不再报错。",
                         "this view fails because the q, k, v cut out by chunk are not contiguous in memory. The real "
                         "problem: " + B_SPLIT_VIEW.en + " Switching to reshape would only make the wrong numbers "
                         "stop raising.")


VIEW_FAILS = ("view size is not compatible", "contiguous")
# signs of known mistakes in an error the student's code raised: read by the hidden checks and the visible tests
MERGE_ERRORS = [(Raises(contains=VIEW_FAILS), B_MERGE_VIEW)]
MODULE_ERRORS = [(Raises(contains=VIEW_FAILS, line=("transpose", "permute")), B_MERGE_VIEW),
                 (Raises(contains=VIEW_FAILS, line=("view",)), B_SPLIT_VIEW_ERROR),
                 (Raises(contains=VIEW_FAILS), B_MERGE_VIEW)]
VIEW_HINT = MODULE_ERRORS


# ---------------------------------------------------------------- split_heads / merge_heads

def check_split_heads(split_heads) -> None:
    passed("split_heads", _split_checks(split_heads))


def _split_checks(split_heads) -> int:
    what = "split_heads"
    check = Check(what, split_heads, reference=ref_split)
    gen = seeded(301)
    rows = [  # (label, B, N, d, h, dtype)
        (t("B=2, N=5, d=12, h=3", "B=2, N=5, d=12, h=3"), 2, 5, 12, 3, torch.float32),
        (t("B=1, N=7, d=8, h=4（d_k = 2）", "B=1, N=7, d=8, h=4 (d_k = 2)"), 1, 7, 8, 4, torch.float32),
        (t("h=1：整个宽度就是一个头", "h=1: the whole width is one head"), 3, 4, 6, 1, torch.float32),
        (t("h=d：每个头只有 1 个通道", "h=d: one channel per head"), 2, 3, 5, 5, torch.float32),
        (t("N=1：只有一个 token", "N=1: a single token"), 2, 1, 8, 2, torch.float32),
        (t("float64 输入，B=3, N=6, d=16, h=4", "float64 input, B=3, N=6, d=16, h=4"), 3, 6, 16, 4, torch.float64),
    ]
    head1 = t("头 i 拿到通道 i·d_k:(i+1)·d_k；头 1 应为 x[..., d_k:2·d_k]。",
              "head i holds channels i·d_k:(i+1)·d_k; head 1 should be x[..., d_k:2·d_k].")
    for label, B, N, d, h, dtype in rows:
        x = torch.randn(B, N, d, generator=gen, dtype=dtype)
        label = f"(x, h={h}): {label}"
        out = check.call(x, h, label=label)
        no_t = h > 1 and isinstance(out, torch.Tensor) and tuple(out.shape) == (B, N, h, d // h)
        swapped = N != d // h and isinstance(out, torch.Tensor) and tuple(out.shape) == (B, h, d // h, N)
        check.tensor(label, out, (B, h, N, d // h),
                     bug=B_SPLIT_NO_T_SHAPE if no_t else B_SPLIT_LAST_AXES if swapped else None,
                     hint=t("结果应为 (B, h, N, d_k)。", "the result must be (B, h, N, d_k)."))
        check.expect(t(f"{label}：各头的内容", f"{label}: contents of the heads"), out, ref_split(x, h),
                     bugs=[B_SPLIT_VIEW, B_SPLIT_INTERLEAVED], bug_args=(x, h), hint=head1, dtype=x.dtype)
    # gradients flow through it
    x = torch.randn(2, 3, 8, generator=gen, requires_grad=True)
    expect_autograd(check.call(x, 2, label=t("需要梯度的输入", "input with requires_grad")), what)
    return check.n + 1


def check_merge_heads(merge_heads) -> None:
    passed("merge_heads", _merge_checks(merge_heads))


def _merge_checks(merge_heads) -> int:
    what = "merge_heads"
    check = Check(what, merge_heads, hints=MERGE_ERRORS)
    gen = seeded(302)
    rows = [  # (label, B, h, N, d_k, dtype, make it a transposed view)
        (t("B=2, h=3, N=5, d_k=4", "B=2, h=3, N=5, d_k=4"), 2, 3, 5, 4, torch.float32, False),
        (t("注意力输出那样的转置视图（内存不连续）", "a transposed view, like the heads after split (not contiguous)"),
         2, 4, 6, 2, torch.float32, True),
        (t("h=1", "h=1"), 3, 1, 4, 6, torch.float32, False),
        (t("N=1", "N=1"), 2, 2, 1, 3, torch.float32, False),
        (t("float64 输入，B=1, h=4, N=7, d_k=3", "float64 input, B=1, h=4, N=7, d_k=3"),
         1, 4, 7, 3, torch.float64, False),
    ]
    for label, B, h, N, d_k, dtype, strided in rows:
        if strided:
            x = torch.randn(B, N, h, d_k, generator=gen, dtype=dtype).transpose(1, 2)
        else:
            x = torch.randn(B, h, N, d_k, generator=gen, dtype=dtype)
        label = f"(x): {label}"
        out = check.call(x.transpose(1, 2).clone().transpose(1, 2) if strided else x, label=label)
        unfused = h > 1 and isinstance(out, torch.Tensor) and tuple(out.shape) == (B, N, h, d_k)
        too_flat = N > 1 and isinstance(out, torch.Tensor) and tuple(out.shape) == (B, N * h * d_k)
        check.tensor(label, out, (B, N, h * d_k),
                     bug=B_MERGE_NOT_FUSED if unfused else B_MERGE_TOO_FLAT if too_flat else None,
                     hint=t("结果应为 (B, N, h·d_k)。", "the result must be (B, N, h·d_k)."))
        check.expect(t(f"{label}：拼接结果", f"{label}: merged values"), out, ref_merge(x),
                     bugs=[B_MERGE_NO_T, B_MERGE_INTERLEAVED], bug_args=(x,), dtype=x.dtype,
                     hint=t("merge_heads 是 split_heads 的逆：头 i 的结果回到通道 i·d_k:(i+1)·d_k。",
                            "merge_heads undoes split_heads: head i goes back to channels i·d_k:(i+1)·d_k."))
    return check.n


# ---------------------------------------------------------------- CausalSelfAttention

def _weights(m):
    b_qkv = m.qkv.bias.detach() if m.qkv.bias is not None else None
    b_o = m.proj.bias.detach() if m.proj.bias is not None else None
    return m.qkv.weight.detach(), b_qkv, m.proj.weight.detach(), b_o


def _torch_mha(m, d, h, x):
    """The same weights in torch's own nn.MultiheadAttention (float64), causal."""
    w_qkv, b_qkv, w_o, b_o = _weights(m)
    ref = nn.MultiheadAttention(d, h, bias=b_qkv is not None, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        ref.in_proj_weight.copy_(as_f64(w_qkv))
        ref.out_proj.weight.copy_(as_f64(w_o))
        if b_qkv is not None:
            ref.in_proj_bias.copy_(as_f64(b_qkv))
            ref.out_proj.bias.copy_(as_f64(b_o))
    N = x.shape[1]
    blocked = ~torch.ones(N, N, dtype=torch.bool).tril()                # nn.MultiheadAttention: True = blocked
    with torch.no_grad():
        out, _ = ref(as_f64(x), as_f64(x), as_f64(x), attn_mask=blocked, need_weights=False)
    return out


def _split_projections(m) -> bool:
    """q, k, v made by two or more linear layers besides proj (three nn.Linear(d, d), or q and kv)."""
    return len([n for n, c in m.named_modules() if isinstance(c, nn.Linear) and n != "proj"]) >= 2


def _build(cls, d, h, bias, what):
    m = call(cls, d, h, bias=bias, what=what)
    if not isinstance(m, nn.Module):
        raise GradingFailure(t(f"{what}：应当是 nn.Module 的子类（class CausalSelfAttention(nn.Module)）。",
                               f"{what}: must be a subclass of nn.Module (class CausalSelfAttention(nn.Module))."))
    for name, shape in (("qkv", (3 * d, d)), ("proj", (d, d))):
        layer = getattr(m, name, None)
        if not isinstance(layer, nn.Linear):
            raise failure(t(f"{what}：属性 self.{name}", f"{what}: the attribute self.{name}"),
                          "nn.Linear(d, 3 * d)" if name == "qkv" else "nn.Linear(d, d)", t("没有找到", "missing"),
                          bug=B_THREE_LINEARS if name == "qkv" and _split_projections(m) else None)
        if tuple(layer.weight.shape) != shape:
            expect = "nn.Linear(d, 3 * d)" if name == "qkv" else "nn.Linear(d, d)"
            raise failure(t(f"{what}：self.{name}.weight 的形状", f"{what}: shape of self.{name}.weight"),
                          f"{shape}  ({expect})", str(tuple(layer.weight.shape)))
        if (layer.bias is not None) != bias:
            raise failure(t(f"{what}：self.{name} 的 bias", f"{what}: the bias of self.{name}"),
                          t("有偏置" if bias else "没有偏置（bias=False）", "a bias" if bias else "no bias (bias=False)"),
                          t("有偏置" if layer.bias is not None else "没有偏置", "a bias" if layer.bias is not None
                            else "no bias"), B_BIAS)
    return m


def _randomise(m, gen, scale=0.5):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) * scale)


def split_stand_in(x, h):
    """A correct split_heads for a student's module to call (keeps dtype and autograd)."""
    B, N, d = x.shape
    return x.view(B, N, h, d // h).transpose(1, 2)


def merge_stand_in(x):
    """A correct merge_heads for a student's module to call."""
    B, h, N, d_k = x.shape
    return x.transpose(1, 2).reshape(B, N, h * d_k)


# each probe is the exercise's own hidden check: a stand-in comes in exactly when it lost its points
EARLIER = (Earlier("split_heads", 1, passes(_split_checks), split_stand_in),
           Earlier("merge_heads", 2, passes(_merge_checks), merge_stand_in))


def _parameter_counts(check, cls) -> None:
    for d, h, bias in ((8, 2, True), (12, 3, False), (768, 12, True)):
        label = f"(d={d}, h={h}, bias={bias})"
        m = _build(cls, d, h, bias, f"{check.what}{label}")
        count = sum(p.numel() for p in m.parameters())
        expected = 4 * d * d + 4 * d if bias else 4 * d * d
        if count != expected:
            extra = [name for name, _ in m.named_parameters() if not name.startswith(("qkv.", "proj."))]
            found = t(f"{count:,}（另外的参数：{', '.join(extra[:4])}）", f"{count:,} (other parameters: "
                      f"{', '.join(extra[:4])})") if extra else f"{count:,}"
            raise check.fail(t(f"{label}：参数个数", f"{label}: number of parameters"),
                             f"{expected:,} = 4d²{' + 4d' if bias else ''}", found, B_EXTRA_PARAMS if extra else None,
                             hint=t("参数只应来自 qkv 和 proj 两个线性层（掩码用 register_buffer，不要用 nn.Parameter）。",
                                    "the parameters come only from the two linear layers qkv and proj (keep a mask "
                                    "in register_buffer, not nn.Parameter)."))
        check.n += 1


B_BIAS_DEFAULT = Bug("mha_bias_default_not_true",
                     "bias 的默认值不是 True：题目的签名是 __init__(self, d, h, bias=True)，不传 bias 时两个线性层都带偏置，"
                     "参数个数是 4d² + 4d。",
                     "the default of bias is not True: the signature is __init__(self, d, h, bias=True), so without bias "
                     "both linear layers have biases and the module has 4d² + 4d parameters.")


def _bias_default(check, cls) -> None:
    """bias=True is the default: CausalSelfAttention(d, h) has the biases."""
    d, h = 8, 2
    label = f"(d={d}, h={h})"
    m = call(cls, d, h, what=f"{check.what}{label}")
    count = sum(p.numel() for p in m.parameters()) if isinstance(m, nn.Module) else None
    if count != 4 * d * d + 4 * d:
        raise check.fail(t(f"{label}（不传 bias）：参数个数", f"{label} (bias not given): number of parameters"),
                         f"{4 * d * d + 4 * d:,} = 4d² + 4d", f"{count:,}" if count is not None else type(m).__name__,
                         B_BIAS_DEFAULT if count == 4 * d * d else None)
    check.n += 1


def _not_divisible(check, cls) -> None:
    label = "(d=10, h=3)"
    exc = check.raises(label, ValueError, 10, 3, bug_if={AssertionError: B_ASSERT, None: B_NO_RAISE},
                       hint=t("在 __init__ 里检查 d % h，不为 0 时 raise ValueError(...)。",
                              "check d % h in __init__ and raise ValueError(...) when it is not 0."))
    if "10" not in str(exc) or "3" not in str(exc):
        raise check.fail(t(f"{label}：ValueError 的提示信息", f"{label}: the ValueError's message"),
                         t("写出 d 和 h 的值，例如 'd=10 不能被 h=3 整除'",
                           "the values of d and h, e.g. 'd=10 is not divisible by h=3'"), repr(str(exc)), B_NO_VALUES)


def _not_a_tuple(check, label, got):
    if isinstance(got, tuple):
        raise check.fail(label, t("一个 (B, N, d) 的张量", "one tensor of shape (B, N, d)"),
                         t(f"{len(got)} 个元素的元组", f"a tuple of {len(got)}"), B_TUPLE)
    return got


def _values(check, cls, gen) -> None:
    """float64, against the head-by-head reference and nn.MultiheadAttention with the same weights."""
    for B, N, d, h, bias in ((2, 5, 8, 2, True), (1, 7, 12, 3, True), (3, 4, 16, 1, True), (2, 6, 16, 8, False),
                             (1, 1, 4, 4, True), (2, 9, 24, 4, True)):
        label = t(f"(d={d}, h={h}, bias={bias})，输入 (B={B}, N={N}, d={d})，float64",
                  f"(d={d}, h={h}, bias={bias}), input (B={B}, N={N}, d={d}), float64")
        m = _build(cls, d, h, bias, f"{check.what}{label}")
        _randomise(m, gen)
        m = m.double()
        x = torch.randn(B, N, d, generator=gen, dtype=torch.float64)
        got = _not_a_tuple(check, label, check.call(x, label=label, fn=m))
        heads = isinstance(got, torch.Tensor) and tuple(got.shape) == (B, h, N, d // h) and h > 1
        out = check.tensor(label, got, (B, N, d), hint=t("forward 返回 (B, N, d)。", "forward returns (B, N, d)."),
                           bug=B_HEADS_OUT if heads else None)
        args = (x,) + _weights(m) + (h,)
        check.expect(t(f"{label}：与独立参考实现比较", f"{label}: compared with an independent reference"), out,
                     ref_mha(*args), bugs=MODULE_BUGS, bug_args=args, dtype=x.dtype,
                     hint=t("逐段检查：qkv → 拆头 → 缩放点积 + 因果掩码 → softmax → 合并 → proj。",
                            "check each stage: qkv → split → scaled scores + causal mask → softmax → merge → proj."))
        check.expect(t(f"{label}：与 nn.MultiheadAttention（相同权重）比较",
                       f"{label}: compared with nn.MultiheadAttention (same weights)"), out, _torch_mha(m, d, h, x),
                     count=False)


def _float32_and_gradients(check, cls, gen) -> None:
    label = t("(d=16, h=4)，float32 输入 (2, 6, 16)", "(d=16, h=4), float32 input (2, 6, 16)")
    m = _build(cls, 16, 4, True, f"{check.what}{label}")
    _randomise(m, gen)
    x = torch.randn(2, 6, 16, generator=gen)
    out = check.tensor(label, _not_a_tuple(check, label, check.call(x, label=label, fn=m)), (2, 6, 16))
    check.expect(label, out, ref_mha(x, *_weights(m), 4), dtype=torch.float32)
    out.sum().backward()
    if m.qkv.weight.grad is None or m.proj.weight.grad is None:
        raise GradingFailure(t(f"{check.what}{label}：梯度没有传到 qkv.weight / proj.weight（输出断开了计算图？）。",
                               f"{check.what}{label}: no gradient reaches qkv.weight / proj.weight (is the output cut "
                               "off from autograd?)."))
    check.n += 1


def _causality(check, cls, gen) -> None:
    """Changing later tokens leaves earlier outputs unchanged (float64)."""
    d, h, N = 12, 3, 8
    label = t(f"(d={d}, h={h})：因果性", f"(d={d}, h={h}): causality")
    m = _build(cls, d, h, True, f"{check.what}{label}")
    _randomise(m, gen)
    m = m.double()
    x = torch.randn(2, N, d, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        base = check.tensor(label, check.call(x, label=label, fn=m), (2, N, d))
        for i in (0, 3, N - 2):
            x2 = x.clone()
            x2[:, i + 1:] = torch.randn(2, N - i - 1, d, generator=gen, dtype=torch.float64) * 3
            out2 = check.tensor(label, check.call(x2, label=label, fn=m), (2, N, d))
            if not same(out2[:, :i + 1], base[:, :i + 1]):
                raise check.fail(t(f"{label}：改动位置 {i} 之后的 token", f"{label}: changing the tokens after position {i}"),
                                 t(f"位置 0…{i} 的输出不变", f"outputs at positions 0…{i} unchanged"),
                                 t("它们变了", "they changed"), B_NO_MASK)
            check.n += 1


LONG_N = 1030      # longer than the fixed sizes people store a mask at (64, 256, 512, 1024)


def _any_length(check, cls, gen) -> None:
    """forward works for any N: an input longer than any mask stored at a fixed size (one head, to keep it cheap)."""
    d, h = 4, 1
    label = t(f"(d={d}, h={h})，很长的输入 (B=1, N={LONG_N}, d={d})", f"(d={d}, h={h}), a long input (B=1, N={LONG_N}, d={d})")
    m = _build(cls, d, h, True, f"{check.what}{label}")
    _randomise(m, gen)
    m = m.double()
    x = torch.randn(1, LONG_N, d, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        short = t(f"(d={d}, h={h})，先是一个短的输入 (B=1, N=5, d={d})", f"(d={d}, h={h}), a short input first "
                  f"(B=1, N=5, d={d})")
        check.call(x[:, :5], label=short, fn=m)        # the same module, a short input and then a long one
        try:
            got = check.call(x, label=label, fn=m)
        except GradingFailure as err:
            kept = [line for line in str(err).splitlines() if not line.lstrip().startswith(("诊断：", "Diagnosis:"))]
            raise GradingFailure("\n".join(kept) + "\n" + t("  诊断：", "  Diagnosis: ")
                                 + B_FIXED_MASK.describe()) from None
        out = check.tensor(label, _not_a_tuple(check, label, got), (1, LONG_N, d), bug=B_FIXED_MASK)
        check.expect(label, out, ref_mha(x, *_weights(m), h), dtype=x.dtype,
                     hint=t("短的输入都对，长的不对：掩码是不是按固定长度建的？", "short inputs are right and a long one "
                            "is not: is the mask built at a fixed length?"))


def check_causal_self_attention(cls) -> None:
    what = "CausalSelfAttention"
    with on_its_own(cls, EARLIER):
        check = Check(what, cls, hints=VIEW_HINT)
        gen = seeded(303)
        _parameter_counts(check, cls)
        _bias_default(check, cls)
        _not_divisible(check, cls)
        _values(check, cls, gen)
        _float32_and_gradients(check, cls, gen)
        _causality(check, cls, gen)
        _any_length(check, cls, gen)
        passed(what, check.n)


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)

ERRORS = {"merge_heads": MERGE_ERRORS, "CausalSelfAttention": MODULE_ERRORS}


def probes() -> list[Probe]:
    gen = seeded(305)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).round(decimals=2)
    d, h = 12, 3                                     # d_k = 4, N = 5: the axes have lengths apart
    x = r(2, 5, d)
    heads = r(2, h, 5, 4)                            # (B, h, N, d_k), contiguous: a transpose inside makes it not
    state = {"qkv.weight": r(3 * d, d, scale=0.5), "qkv.bias": r(3 * d, scale=0.5),
             "proj.weight": r(d, d, scale=0.5), "proj.bias": r(d, scale=0.5)}
    weights = (state["qkv.weight"], state["qkv.bias"], state["proj.weight"], state["proj.bias"], h)
    return [
        Probe("split", args=(x, h), reference=ref_split, bugs=[B_SPLIT_VIEW, B_SPLIT_INTERLEAVED]),
        Probe("merge", args=(heads,), reference=ref_merge, bugs=[B_MERGE_NO_T, B_MERGE_INTERLEAVED]),
        Probe("attention", args=(x,), reference=lambda y: ref_mha(y, *weights), state=state, bugs=MODULE_BUGS,
              run_bug=lambda bug: bug.impl(x, *weights)),
    ]

