"""Hidden tests of ch10_llama_block: rms_norm, SwiGLU, repeat_kv, LlamaAttention, LlamaBlock.

Every answer is compared twice: tightly (float64) with the independent
references below, which rotate pairs with explicit cos/sin formulas and loop
over heads, and loosely with Hugging Face transformers' own LlamaRMSNorm,
LlamaMLP, repeat_kv and LlamaDecoderLayer (which compute parts in float32
internally). A wrong answer is matched against the known bugs listed here.
"""
from __future__ import annotations

import math
import re

import torch
from torch import nn

from helpers import ch10_llama_block as bridge
from helpers.i18n import t

from .cases import COMMON_HINTS, Earlier, on_its_own
from .core import (
    LAYER_NORM_FAMILY,
    Bug,
    GradingFailure,
    Raises,
    as_f64,
    call,
    close,
    diagnose,
    ensure_untampered,
    expect_autograd,
    failure,
    forbidden,
    passed,
    seeded,
    show,
)
from .probes import Probe


def near(out, ref, tol: float = 1e-6) -> bool:
    """Equal up to float32-sized rounding (relative to the size of ``ref``):
    a student may compute parts in float32; every known bug is far larger."""
    scale = as_f64(ref).nan_to_num(0.0, 0.0, 0.0).abs().max().item() if isinstance(ref, torch.Tensor) and ref.numel() else 1.0
    return close(out, ref, atol=tol * scale + 1e-30, rtol=tol)


def _hf_close(out, ref) -> bool:
    """Agreement with transformers' modules: they round through float32."""
    scale = as_f64(ref).abs().max().item() if isinstance(ref, torch.Tensor) and ref.numel() else 1.0
    return close(out, ref, atol=1e-5 * max(scale, 1.0), rtol=1e-5)


# ---------------------------------------------------------------- crashes in plain words

def allowed(key, zh_when, en_when, zh_why, en_why) -> list:
    """Hints for a call on an input the exercise allows: whatever the student's code raises there, the message
    says that this input is allowed (and why), instead of leaving a bare traceback."""
    return [(lambda exc, line: True,
             Bug(key, f"你的代码在这种输入上出错了（{zh_when}），而练习允许它：{zh_why}",
                 f"your code fails on this input ({en_when}), which the exercise allows: {en_why}"))]


SUPER_HINTS = [(Raises(contains=("before Module.__init__() call",)), Bug(
    "super_init_missing", "__init__ 里没有先调用 super().__init__()：nn.Module 要先初始化，才能给它添加子模块和参数。",
    "__init__ does not call super().__init__() first: an nn.Module must be set up before submodules and "
    "parameters can be added to it."))]


def passes(verify):
    """A probe for ``Earlier`` made of the earlier exercise's own hidden checks (``verify(theirs)`` raises when
    they fail): a correct version stands in exactly when that exercise loses its own points."""
    def probe(theirs) -> bool:
        with torch.enable_grad():              # the checks test gradients; probes run under no_grad
            verify(theirs)
        return True
    return probe


# ---------------------------------------------------------------- references (float64)

def ref_rms_norm(x, w, eps=1e-6, *, center=False, eps_outside=False, no_eps=False, no_sqrt=False,
                 no_weight=False, unbiased=False, l2=False, dim=-1, var=False, weight_first=False,
                 everything=False, divisor=None):
    """RMSNorm; the keyword arguments switch on known bugs (``everything``: the mean over the whole tensor;
    ``divisor``: the sum of squares divided by x.shape[divisor] instead of d)."""
    x, w = as_f64(x), as_f64(w)
    if weight_first:
        x, no_weight = x * w, True
    if center:
        x = x - x.mean(dim=dim, keepdim=True)
    xc = x - x.mean(dim=dim, keepdim=True) if var else x
    ms = (xc ** 2).sum(dim=dim, keepdim=True) / (x.shape[dim] - (1 if unbiased else 0))
    if l2:
        ms = (x ** 2).sum(dim=dim, keepdim=True)
    if everything:
        ms = (x ** 2).mean()
    if divisor is not None:
        ms = (x ** 2).sum(dim=-1, keepdim=True) / x.shape[divisor]
    e = 0.0 if no_eps else eps
    denom = ms + e if no_sqrt else (ms.sqrt() + e if eps_outside else (ms + e).sqrt())
    y = x / denom
    return y if no_weight else y * w


def _bug(fn, **kw):
    return lambda *a: fn(*a, **kw)


B_CENTER = Bug("rms_subtracts_mean",
               "减去了均值：那是 LayerNorm。RMSNorm 不减均值，只除以均方根 √(mean(x²) + eps)。",
               "the mean is subtracted: that is LayerNorm. RMSNorm subtracts nothing and only divides by the "
               "root mean square √(mean(x²) + eps).", _bug(ref_rms_norm, center=True))
B_EPS_OUT = Bug("rms_eps_outside_sqrt",
                "eps 加在了根号外面（√mean(x²) + eps）：应写 √(mean(x²) + eps)，eps 在根号里面。",
                "eps is added outside the square root (√mean(x²) + eps): write √(mean(x²) + eps), with eps "
                "inside the root.", _bug(ref_rms_norm, eps_outside=True))
B_NO_EPS = Bug("rms_no_eps", "没有在根号里加 eps（没加，或者加在了除法之后）：输入很小（或全为 0）时会除以接近 0 的数。"
               "写 x / √(mean(x²) + eps)。",
               "eps is not added under the root (missing, or added after the division): for tiny (or all-zero) "
               "inputs you divide by almost nothing. Write x / √(mean(x²) + eps).",
               _bug(ref_rms_norm, no_eps=True))
B_NO_SQRT = Bug("rms_no_sqrt", "除的是均方 mean(x²) + eps，没有开根号：应除以它的平方根。",
                "you divide by the mean square mean(x²) + eps without taking its square root.",
                _bug(ref_rms_norm, no_sqrt=True))
B_NO_WEIGHT = Bug("rms_weight_missing", "归一化之后没有乘 weight（逐通道的缩放）。",
                  "the result is never multiplied by weight (the per-channel scale).", _bug(ref_rms_norm, no_weight=True))
B_UNBIASED = Bug("rms_divides_by_d_minus_1", "平方和除以了 d − 1：RMSNorm 的均值除以 d（像 mean(x²)）。",
                 "the sum of squares is divided by d − 1: RMSNorm's mean divides by d (as mean(x²) does).",
                 _bug(ref_rms_norm, unbiased=True))
B_L2 = Bug("rms_uses_l2_norm", "除的是向量长度 ‖x‖ = √Σx²，而不是均方根 √(Σx²/d)：差了一个 √d。",
           "you divide by the length ‖x‖ = √Σx² instead of the root mean square √(Σx²/d): off by √d.",
           _bug(ref_rms_norm, l2=True))
_DIM_ZH, _DIM_EN = ("均方沿错误的维度计算：应沿最后一维（每个 token 的 d 个通道，dim=-1）。",
                    "the mean square is taken over the wrong axis: it must be over the last axis (the d channels of "
                    "each token, dim=-1).")
B_DIM = Bug("rms_wrong_axis", _DIM_ZH, _DIM_EN, _bug(ref_rms_norm, dim=-2))
B_DIM0 = Bug("rms_wrong_axis", _DIM_ZH, _DIM_EN, _bug(ref_rms_norm, dim=0))
B_EVERYTHING = Bug("rms_mean_over_everything", "均方是对整个张量求的（mean 没有给 dim）：每个 token 要用它自己那一行的均方，"
                   "mean(x², dim=-1, keepdim=True)。", "the mean square is taken over the whole tensor (mean without a "
                   "dim): each token needs the mean square of its own row, mean(x², dim=-1, keepdim=True).",
                   _bug(ref_rms_norm, everything=True))
B_WRONG_SIZE = Bug("rms_divides_by_wrong_size", "平方和除以的是 x.shape[0]（第一维的长度）：要除以最后一维的长度 d = x.shape[-1]。",
                   "the sum of squares is divided by x.shape[0] (the length of the first axis): divide by the length "
                   "of the last axis, d = x.shape[-1].", _bug(ref_rms_norm, divisor=0))
B_VAR = Bug("rms_uses_variance", "除的是方差 x.var(...)（先减了均值再平方）：RMSNorm 用均方 mean(x²)，不减均值。",
            "you divide by the variance x.var(...) (squares taken after subtracting the mean): RMSNorm uses the "
            "mean square mean(x²) and subtracts nothing.", _bug(ref_rms_norm, var=True))
B_VAR1 = Bug("rms_uses_unbiased_variance", "除的是方差 x.var(...)（默认还除以 d − 1）：RMSNorm 用均方 mean(x²)，不减均值。",
             "you divide by the variance x.var(...) (which by default also divides by d − 1): RMSNorm uses the "
             "mean square mean(x²) and subtracts nothing.", _bug(ref_rms_norm, var=True, unbiased=True))
B_WEIGHT_FIRST = Bug("rms_weight_before_norm", "先乘了 weight 再归一化：weight 要乘在归一化之后，x / √(mean(x²) + eps) · weight。",
                     "weight is applied before normalising: multiply by weight after it, x / √(mean(x²) + eps) · weight.",
                     _bug(ref_rms_norm, weight_first=True))
RMS_BUGS = [B_CENTER, B_EPS_OUT, B_NO_EPS, B_NO_SQRT, B_NO_WEIGHT, B_UNBIASED, B_L2, B_DIM, B_DIM0, B_VAR, B_VAR1,
            B_WEIGHT_FIRST, B_EVERYTHING, B_WRONG_SIZE]
_EPS_DEFAULT = ("rms_default_eps_changed", "eps 的默认值不对：练习要求 rms_norm(x, weight, eps=1e-6)，不传 eps 时就用 1e-6。",
                "the default eps is wrong: the exercise asks for rms_norm(x, weight, eps=1e-6), so without an eps "
                "argument it is 1e-6.")
B_EPS_DEFAULT = [Bug(*_EPS_DEFAULT, lambda x, w, eps, e=e: ref_rms_norm(x, w, e)) for e in (1e-5, 1e-8, 1e-12, 0.0)]
_EPS_IGNORED = ("rms_eps_argument_ignored", "没有用参数 eps：算的时候用的是一个写死的数。要用调用者传进来的 eps。",
                "the eps argument is not used: a fixed number is used instead. Use the eps the caller passes.")
B_EPS_IGNORED = [Bug(*_EPS_IGNORED, lambda x, w, eps, e=e: ref_rms_norm(x, w, e)) for e in (1e-6, 1e-5, 1e-8)]
B_RMS_DTYPE = Bug("rms_dtype_changed", "输出的 dtype 变了：float64 进就要 float64 出。不要在最后 .float()，"
                  "或者在 float32 里算完再 .to(x.dtype) 转回来。", "the output's dtype changed: float64 in, float64 out. Do not "
                  "call .float() at the end, or cast back with .to(x.dtype) after computing in float32.")
B_RMS_IN_PLACE = Bug("rms_modifies_input", "输入 x 被改了（x /= …、x.mul_(…) 这样的原地运算）：要返回一个新的张量，"
                     "x 保持原样——块里的残差还要用原来的 x。", "the input x was modified (an in-place operation such as "
                     "x /= … or x.mul_(…)): return a new tensor and leave x as it is — the block's residual still needs "
                     "the original x.")
B_LOW_PRECISION = Bug("rms_low_precision", "只差舍入级别的误差（不到 1%）：是不是在 float16 / bfloat16 里计算了？要在输入的 dtype（或 float32）里算。",
                      "off only by rounding-sized errors (under 1%): did you compute in float16 / bfloat16? Compute in the "
                      "input's dtype (or float32).")
B_KEEPDIM = Bug("rms_keepdim_missing", "mean 没有写 keepdim=True：结果少了最后一维，不能和 x 按行相除。写 mean(dim=-1, keepdim=True)。",
                "mean has no keepdim=True: the result loses the last axis and cannot divide x row by row. Write "
                "mean(dim=-1, keepdim=True).")
RMS_HINTS = [(Raises(contains=("must match the size of tensor",)), B_KEEPDIM)]
B_RMS_SHAPE = Bug("rms_output_shape", "输出的形状和 x 不同：rms_norm 返回的张量和 x 一样是 (..., d)。如果为了计算把前面的维度拉平了，"
                  "最后要 reshape 回 x.shape。", "the output's shape differs from x's: rms_norm returns a tensor of x's shape "
                  "(..., d). If you flattened the leading axes to compute, reshape back to x.shape at the end.")
B_RMS_1D = Bug("rms_1d_input", "你的代码在这种输入上出错了（x 是一维的 (d,)），而练习允许它：x 的形状是 (..., d)：一个单独的向量也可以。",
               "your code fails on this input (x is 1-D, (d,)), which the exercise allows: x has shape (..., d): a "
               "single vector is allowed too.")


def rms_from_scratch_message() -> str:
    """What a from-scratch breach of rms_norm says (a template with {name}); the visible test says the same."""
    return t("要求从零实现，不能调用 {name}：用 mean、sqrt（或 rsqrt）这些基本运算自己算均方根。",
             "must be written from scratch: calling {name} is not allowed. Compute the root mean square yourself "
             "with basic operations such as mean and sqrt (or rsqrt).")


def ref_swiglu(x, wg, wu, wd, *, act="silu", branch="gate", combine="mul"):
    x = as_f64(x)
    g, u = x @ as_f64(wg).T, x @ as_f64(wu).T
    f = {"silu": lambda z: z * torch.sigmoid(z), "gelu": lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2))),
         "gelu_tanh": lambda z: 0.5 * z * (1 + torch.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))),
         "sigmoid": torch.sigmoid, "relu": torch.relu, "none": lambda z: z, "silu_neg": lambda z: z * torch.sigmoid(-z)}[act]
    if branch == "up":
        g, u = u, g
    if combine == "down_each":                              # down applied to each branch, then multiplied
        return (f(g) @ as_f64(wd).T) * (u @ as_f64(wd).T)
    h = {"mul": lambda: f(g) * u, "add": lambda: f(g) + u, "both": lambda: f(g) * f(u),
         "product": lambda: f(g * u), "out": lambda: g * u}[combine]()
    out = h @ as_f64(wd).T
    return f(out) if combine == "out" else out


B_SILU_UP = Bug("swiglu_silu_on_up",
                "SiLU 用在了 up 分支上：门是 gate——down(silu(gate(x)) * up(x))，up(x) 不过激活函数。",
                "SiLU is applied to the up branch: the gate is gate — down(silu(gate(x)) * up(x)); up(x) goes "
                "through no activation.", _bug(ref_swiglu, branch="up"))
B_GELU = Bug("swiglu_gelu_not_silu", "用了 GELU：SwiGLU 的门用 SiLU（x·σ(x)，F.silu）。GELU 版本叫 GeGLU。",
             "GELU is used: SwiGLU's gate uses SiLU (x·σ(x), F.silu). The GELU version is called GeGLU.",
             _bug(ref_swiglu, act="gelu"))
B_SIGMOID = Bug("swiglu_sigmoid_not_silu", "门用的是 sigmoid（这是原始的 GLU）：SwiGLU 用 SiLU = x·σ(x)。",
                "the gate uses sigmoid (the original GLU): SwiGLU uses SiLU = x·σ(x).", _bug(ref_swiglu, act="sigmoid"))
B_RELU = Bug("swiglu_relu_not_silu", "门用的是 ReLU（ReGLU）：SwiGLU 用 SiLU。",
             "the gate uses ReLU (ReGLU): SwiGLU uses SiLU.", _bug(ref_swiglu, act="relu"))
B_NO_ACT = Bug("swiglu_no_activation", "gate(x) 没有经过 SiLU：两个线性分支直接相乘（双线性层）。",
               "gate(x) never goes through SiLU: the two linear branches are multiplied directly (a bilinear "
               "layer).", _bug(ref_swiglu, act="none"))
B_ADD = Bug("swiglu_adds_branches", "两个分支相加了：SwiGLU 是逐元素相乘 silu(gate(x)) * up(x)。",
            "the branches are added: SwiGLU multiplies them element-wise, silu(gate(x)) * up(x).",
            _bug(ref_swiglu, combine="add"))
B_SILU_BOTH = Bug("swiglu_silu_on_both", "两个分支都过了 SiLU：只有 gate 分支过 SiLU。",
                  "both branches go through SiLU: only the gate branch does.", _bug(ref_swiglu, combine="both"))
B_SILU_PRODUCT = Bug("swiglu_silu_on_product", "SiLU 套在了乘积外面（silu(gate(x) * up(x))）：只有 gate(x) 过 SiLU，再乘 up(x)。",
                     "SiLU wraps the product (silu(gate(x) * up(x))): only gate(x) goes through SiLU, then it "
                     "multiplies up(x).", _bug(ref_swiglu, combine="product"))
B_SILU_OUT = Bug("swiglu_silu_after_down", "SiLU 用在了 down 的输出上：SiLU 只作用于 gate(x)，down(...) 的结果直接返回。",
                 "SiLU is applied to the output of down: it acts on gate(x) only; return down(...) as it is.",
                 _bug(ref_swiglu, combine="out"))
B_SILU_SIGN = Bug("swiglu_silu_sign", "手写的 SiLU 符号反了（z / (1 + exp(z)) = z·σ(−z)）：SiLU 是 z·σ(z) = z / (1 + exp(−z))。",
                  "your hand-written SiLU has the wrong sign (z / (1 + exp(z)) = z·σ(−z)): SiLU is z·σ(z) = "
                  "z / (1 + exp(−z)).", _bug(ref_swiglu, act="silu_neg"))
B_GELU_TANH = Bug(B_GELU.key, B_GELU.zh, B_GELU.en, _bug(ref_swiglu, act="gelu_tanh"))
B_DOWN_EACH = Bug("swiglu_down_on_each_branch", "self.down 分别用在了两个分支上再相乘：应先逐元素相乘 silu(gate(x)) * up(x)，"
                  "再对乘积做一次 down。", "self.down is applied to each branch and the results multiplied: multiply "
                  "silu(gate(x)) * up(x) element-wise first, then apply down once to the product.",
                  _bug(ref_swiglu, combine="down_each"))
SWIGLU_BUGS = [B_SILU_UP, B_GELU, B_GELU_TANH, B_SIGMOID, B_RELU, B_NO_ACT, B_ADD, B_SILU_BOTH, B_SILU_PRODUCT,
               B_SILU_OUT, B_SILU_SIGN, B_DOWN_EACH]
B_SWIGLU_NAMES = Bug("swiglu_attribute_names", "三个线性层要叫 self.gate、self.up、self.down（LLaMA 原版代码叫 w1、w3、w2，"
                     "Hugging Face 叫 gate_proj、up_proj、down_proj）：评分和块都按这些名字找它们。",
                     "the three linear layers must be called self.gate, self.up and self.down (LLaMA's original code "
                     "says w1, w3, w2; Hugging Face says gate_proj, up_proj, down_proj): the grader and the block "
                     "look them up by these names.")
B_SWIGLU_FUSED = Bug("swiglu_gate_up_fused", "gate 和 up 合成了一个 nn.Linear(d, 2·d_ff)：练习要求两个分开的层 self.gate "
                     "和 self.up（各是 nn.Linear(d, d_ff, bias=False)）。", "gate and up are fused into one "
                     "nn.Linear(d, 2·d_ff): the exercise asks for two separate layers, self.gate and self.up (each "
                     "nn.Linear(d, d_ff, bias=False)).")
B_SWIGLU_EXTRA = Bug("swiglu_extra_parameters", "除了三个线性层的权重之外还有别的参数（一个可学习的 β、bias……）："
                     "SwiGLU 正好有 3·d·d_ff 个参数。", "there are parameters besides the three linear layers' weights "
                     "(a learnable β, a bias, …): SwiGLU has exactly 3·d·d_ff parameters.")
B_SWIGLU_WIDTH = Bug("swiglu_hidden_width_not_d_ff", "隐藏宽度不是参数 d_ff：gate 和 up 把 d 映到 d_ff，down 把 d_ff 映回 d"
                     "（不是 GPT 的 4d，也不是自己算的 8d/3：宽度由调用者给出）。", "the hidden width is not the argument d_ff: "
                     "gate and up map d to d_ff, and down maps d_ff back to d (not GPT's 4d, nor an 8d/3 of your own: the "
                     "caller gives the width).")
B_SWIGLU_SHAPE = Bug("swiglu_output_shape", "输出的形状和 x 不同：SwiGLU 把 (..., d) 映到 (..., d)，前面的维度原样保留"
                     "（不要把它们拉平）。", "the output's shape differs from x's: SwiGLU maps (..., d) to (..., d) and keeps the "
                     "leading axes as they are (do not flatten them).")
B_NO_DOWN = Bug("swiglu_down_missing", "输出的最后一维是 d_ff：silu(gate(x)) * up(x) 之后还要经过 self.down 映回 d。",
                "the output's last axis is d_ff: after silu(gate(x)) * up(x), self.down must map it back to d.")
B_LINEAR_ARGS = Bug("linear_in_out_swapped", "nn.Linear 的两个参数写反了：nn.Linear(输入维度, 输出维度)，weight 的形状是 (输出, 输入)。",
                    "the two arguments of nn.Linear are swapped: nn.Linear(in_features, out_features); its weight "
                    "has shape (out, in).")
B_BIAS = Bug("bias_left_in", "还留着 bias：LLaMA 的线性层都没有 bias，写 nn.Linear(..., bias=False)。",
             "a bias is left in: LLaMA's linear layers have none; write nn.Linear(..., bias=False).")


def ref_repeat_kv(x, n_rep, *, mode="interleave"):
    x = as_f64(x)
    if mode == "tile":
        return torch.cat([x] * n_rep, dim=1)
    if mode == "tokens":
        return torch.stack([x[:, :, j] for j in range(x.shape[2]) for _ in range(n_rep)], dim=2)
    if mode == "mixed":                                     # copies made next to the token axis, then fused
        B, n_kv, N, d_k = x.shape
        return x[:, :, :, None].expand(B, n_kv, N, n_rep, d_k).reshape(B, n_kv * n_rep, N, d_k)
    return torch.stack([x[:, i // n_rep] for i in range(x.shape[1] * n_rep)], dim=1)


B_TILE = Bug("repeat_kv_tiled_not_interleaved",
             "KV 头的顺序不对（x.repeat(1, n_rep, 1, 1)、torch.cat([x] * n_rep) 或把新维度插在 KV 头前面的 x[:, None].expand）：输出头 i 用到的是 KV 头 "
             "i % n_kv_head。应是 i // n_rep——每个 KV 头连续复制 n_rep 次（repeat_interleave(n_rep, dim=1)）。",
             "the KV heads come in the wrong order (x.repeat(1, n_rep, 1, 1), torch.cat([x] * n_rep), or x[:, None].expand with the new axis before the KV heads): output "
             "head i uses KV head i % n_kv_head. It must be i // n_rep — each KV head repeated n_rep times in a "
             "row (repeat_interleave(n_rep, dim=1)).", _bug(ref_repeat_kv, mode="tile"))
B_TOKENS = Bug("repeat_kv_wrong_axis", "复制的是 token 轴（dim=2）：要复制的是 KV 头所在的 dim=1。",
               "the token axis (dim=2) is repeated: repeat the axis of the KV heads, dim=1.",
               _bug(ref_repeat_kv, mode="tokens"))
B_MIXED = Bug("repeat_kv_copies_next_to_tokens",
              "新的一维插在了 token 轴旁边（x[:, :, :, None].expand(...)）：reshape 把 token 和副本混在了一起。"
              "应插在 KV 头之后：x[:, :, None].expand(B, n_kv, n_rep, N, d_k)。",
              "the new axis is inserted next to the token axis (x[:, :, :, None].expand(...)): the reshape mixes "
              "tokens and copies. Insert it right after the KV heads: x[:, :, None].expand(B, n_kv, n_rep, N, d_k).",
              _bug(ref_repeat_kv, mode="mixed"))
B_BATCH = Bug("repeat_kv_batch_axis", "复制的是 batch 轴（dim=0）：要复制的是 KV 头所在的 dim=1。",
              "the batch axis (dim=0) is repeated: repeat the axis of the KV heads, dim=1.")
B_FLAT = Bug("repeat_kv_flattened", "结果被拉平成了一维：repeat_interleave 不给 dim 时会先把张量展平。写 "
             "x.repeat_interleave(n_rep, dim=1)。", "the result is flattened to one axis: repeat_interleave without a "
             "dim flattens the tensor first. Write x.repeat_interleave(n_rep, dim=1).")
B_NOT_REPEATED = Bug("repeat_kv_not_repeated", "输出的头数没有变：还是 n_kv_head 个。要得到 n_kv_head·n_rep 个头"
                     "（用下标的话，要覆盖 range(n_kv_head * n_rep)）。", "the number of heads did not change: it is "
                     "still n_kv_head. The result needs n_kv_head·n_rep heads (with an index, cover "
                     "range(n_kv_head * n_rep)).")
B_FEATURE = Bug("repeat_kv_feature_axis", "复制的是最后一维 d_k（dim=-1）：要复制的是 KV 头所在的 dim=1。",
                "the last axis d_k (dim=-1) is repeated: repeat the axis of the KV heads, dim=1.")
REPEAT_HINTS = [
    (Raises(contains=("view size is not compatible",)), Bug(
        "repeat_kv_view_of_expand", "expand 出来的张量没有真正复制（步长为 0），不能用 view 合并维度：改用 reshape（它会在需要时复制）。",
        "an expanded tensor is not really copied (its stride is 0), so view cannot fuse its axes: use reshape "
        "(it copies when it must).")),
    (Raises(contains=("expanded size of the tensor",)), Bug(
        "repeat_kv_expand_without_new_axis", "expand 只能放大大小为 1 的维度：先用 x[:, :, None] 插入新的一维，"
        "expand 成 (B, n_kv, n_rep, N, d_k)，再 reshape。", "expand can only enlarge axes of size 1: insert a new "
        "axis with x[:, :, None] first, expand to (B, n_kv, n_rep, N, d_k), then reshape."))]


B_NO_RESHAPE = Bug("repeat_kv_not_reshaped", "结果还是五维的 (B, n_kv, n_rep, N, d_k)：expand 之后还要 reshape 把 n_kv 和 "
                   "n_rep 合并成一个轴，得到 (B, n_kv·n_rep, N, d_k)。", "the result is still 5-D, (B, n_kv, n_rep, N, d_k): "
                   "after the expand, reshape to fuse n_kv and n_rep into one axis, (B, n_kv·n_rep, N, d_k).")
B_REPEAT_DETACHED = Bug("repeat_kv_cuts_the_graph", "repeat_kv 的输出断开了计算图（torch.no_grad()、.detach()、.item() 或 "
                        "NumPy）：注意力的梯度要经过它传回 k_proj、v_proj，否则 K、V 的权重学不到任何东西。只用张量运算，"
                        "不要关掉梯度。", "repeat_kv's output is cut off from autograd (torch.no_grad(), .detach(), .item() or "
                        "NumPy): the attention's gradient must flow through it back to k_proj and v_proj, or the K and V "
                        "weights learn nothing. Use tensor operations only and leave gradients on.")


def _repeat_shape_bug(out, B, n_kv, N, d_k, n_rep):
    """A known bug (or a hint) for an output of the wrong shape."""
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if shape == (B, n_kv, n_rep, N, d_k):
        return B_NO_RESHAPE, None
    known = {(B, n_kv, N * n_rep, d_k): B_TOKENS, (B * n_rep, n_kv, N, d_k): B_BATCH,
             (B, n_kv, N, d_k * n_rep): B_FEATURE, (B * n_kv * N * d_k * n_rep,): B_FLAT}
    if shape == (B, n_kv, N, d_k) and n_rep > 1:
        return B_NOT_REPEATED, None
    return known.get(shape), None


# ---------------------------------------------------------------- attention and block references

def ref_rope_pairs(x, pos, base):
    """Adjacent pairs (2i, 2i+1), explicit formulas, float64."""
    x = as_f64(x)
    d = x.shape[-1]
    out = torch.empty_like(x)
    for i in range(d // 2):
        a = pos.to(torch.float64) * base ** (-2 * i / d)
        c, s = torch.cos(a)[:, None], torch.sin(a)[:, None]
        x0, x1 = x[..., 2 * i:2 * i + 1], x[..., 2 * i + 1:2 * i + 2]
        out[..., 2 * i:2 * i + 1] = x0 * c - x1 * s
        out[..., 2 * i + 1:2 * i + 2] = x0 * s + x1 * c
    return out


def ref_attention(x, wq, wk, wv, wo, n_head, n_kv, base=10000.0, *, rope="pairs", kv="interleave",
                  scale="d_k", causal=True, rope_v=False, out_proj=True, rope_k=True, base_used=None, softmax_dim=-1,
                  split="slices", merge="transpose"):
    """Causal grouped-query attention with RoPE, one query head at a time. ``causal`` may also name a wrong
    mask: "after" (applied after the softmax), "diag" (the diagonal masked too), "reversed" (the past masked),
    "reversed_diag" (the past and the diagonal masked). ``split="view"``: heads taken with a view to
    (B, h, N, d_k) and no transpose; ``"interleaved"``: head j takes channels j, j + h, j + 2h, ...;
    ``merge`` likewise. ``softmax_dim=1``: the softmax runs over the heads. ``out_proj="q"``: the output goes
    through W_Q instead of W_O."""
    x = as_f64(x)
    base = base if base_used is None else base_used
    B, N, d = x.shape
    d_k = d // n_head
    pos = torch.arange(N)
    q_all, k_all, v_all = x @ as_f64(wq).T, x @ as_f64(wk).T, x @ as_f64(wv).T
    if rope == "full":                                     # before the head split, over all d channels
        q_all, k_all = ref_rope_pairs(q_all, pos, base), ref_rope_pairs(k_all, pos, base)

    def heads_of(a, count):
        if split == "view":
            return a.reshape(B, count, N, d_k)
        if split == "interleaved":
            return a.reshape(B, N, d_k, count).permute(0, 3, 1, 2)
        return torch.stack([a[..., j * d_k:(j + 1) * d_k] for j in range(count)], dim=1)

    qh, kh, vh = heads_of(q_all, n_head), heads_of(k_all, n_kv), heads_of(v_all, n_kv)
    scores, values = [], []
    for i in range(n_head):
        j = i // (n_head // n_kv) if kv == "interleave" else i % n_kv
        q, k, v = qh[:, i], kh[:, j], vh[:, j]
        if rope == "pairs":
            q, k = ref_rope_pairs(q, pos, base), ref_rope_pairs(k, pos, base) if rope_k else k
            v = ref_rope_pairs(v, pos, base) if rope_v else v
        elif rope == "half":
            q, k = bridge.rotate_half_rope(q, pos, base), bridge.rotate_half_rope(k, pos, base)
        s = q @ k.transpose(-2, -1)
        s = {"times": s * math.sqrt(d_k), "d": s / math.sqrt(d), "d_k_plain": s / d_k}.get(scale, s / math.sqrt(d_k))
        scores.append(s)
        values.append(v)
    s, v = torch.stack(scores, dim=1), torch.stack(values, dim=1)          # (B, h, N, N), (B, h, N, d_k)
    ones = torch.ones(N, N, dtype=torch.bool)
    mask = {"diag": ones.triu(0), "reversed": ones.tril(-1), "reversed_diag": ones.tril(0)}.get(causal, ones.triu(1))
    if causal and causal != "after":
        s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=softmax_dim)
    y = (p.masked_fill(mask, 0.0) if causal == "after" else p) @ v     # (B, h, N, d_k)
    if merge == "view":
        y = y.reshape(B, N, d)
    elif merge == "interleaved":
        y = y.permute(0, 2, 3, 1).reshape(B, N, d)
    else:
        y = y.transpose(1, 2).reshape(B, N, d)
    if out_proj == "q":
        return y @ as_f64(wq).T
    return y @ as_f64(wo).T if out_proj else y


ATT = dict(
    rope_v=("rope_on_v", "RoPE 也用在了 v 上：旋转只作用于 q 和 k（它编码的是分数里的相对位置），v 保持原样。",
            "RoPE is applied to v as well: only q and k are rotated (it encodes relative position in the "
            "scores); v stays as it is.", dict(rope_v=True)),
    full=("rope_before_head_split", "RoPE 在拆头之前、对整个 d 维做了：频率 θ_i = base^(−2i/d_k) 要按每个头的 d_k 计算，"
          "所以应在 view 成 (B, h, N, d_k) 之后、对最后一维 d_k 旋转。",
          "RoPE is applied before the head split, over all d channels: the frequencies θ_i = base^(−2i/d_k) "
          "belong to each head's d_k, so rotate after the view to (B, h, N, d_k), over the last axis d_k.",
          dict(rope="full")),
    half=("rope_rotate_half_layout", "RoPE 用的是 rotate-half 布局（通道 j 与 j + d_k/2 配对，Hugging Face 的写法）："
          "本课程（和第 4 章、Meta 原版）旋转相邻的一对 (2i, 2i+1)。两种布局只差 W_Q、W_K 的行置换，但同样的权重结果不同。",
          "RoPE uses the rotate-half layout (channel j paired with j + d_k/2, Hugging Face's way): this course "
          "(like chapter 4 and Meta's original) rotates adjacent pairs (2i, 2i+1). The two layouts differ by a "
          "row permutation of W_Q and W_K, but with the same weights they give different results.",
          dict(rope="half")),
    none=("rope_missing", "没有用 RoPE：q 和 k 拆头之后要各自用 apply_rope 按位置 0…N−1 旋转。",
          "RoPE is missing: after the head split, rotate q and k with apply_rope at positions 0…N−1.",
          dict(rope="none")),
    tile=(B_TILE.key, B_TILE.zh, B_TILE.en, dict(kv="tile")),
    scale=("attention_scaled_by_sqrt_d", "分数除的是 √d，而不是每个头的 √d_k。",
           "the scores are divided by √d instead of each head's √d_k.", dict(scale="d")),
    mask=("attention_causal_mask_missing", "没有因果掩码：位置 i 看到了后面的 token。",
          "the causal mask is missing: position i sees later tokens.", dict(causal=False)),
    no_o=("attention_no_o_proj", "拼回各头之后没有经过 o_proj。", "the merged heads never go through o_proj.",
          dict(out_proj=False)),
    k_plain=("rope_only_on_q", "只有 q 做了 RoPE，k 没有旋转：q 和 k 都要用 apply_rope 旋转，分数才只依赖相对位置。",
             "only q is rotated by RoPE, not k: rotate both q and k with apply_rope, so that the scores depend on "
             "relative position only.", dict(rope_k=False)),
    after=("attention_mask_after_softmax", "因果掩码放在了 softmax 之后（把概率置 0）：每行的和不再是 1。"
           "应在 softmax 之前把分数填成 −inf。", "the causal mask comes after the softmax (zeroing probabilities): "
           "the rows no longer sum to 1. Fill the scores with −inf before the softmax.", dict(causal="after")),
    diag=("attention_mask_covers_diagonal", "掩码把对角线也遮住了（triu(0) 或 triu() 的默认值）：位置 i 应能看到自己，"
          "第一行全被遮住，softmax 得到 NaN。用 triu(1)。", "the mask covers the diagonal too (triu(0), triu's default): "
          "position i must see itself; the first row is all masked and the softmax gives NaN. Use triu(1).",
          dict(causal="diag")),
    reversed=("attention_mask_reversed", "掩码方向反了（遮住的是过去，用了 tril）：位置 i 只能看 j ≤ i，"
              "要遮住的是上三角 triu(1)。", "the mask is reversed (it hides the past, tril): position i may only see "
              "j ≤ i, so hide the upper triangle, triu(1).", dict(causal="reversed")),
    reversed_diag=("attention_mask_reversed", "掩码方向反了，而且连对角线也遮住了（把 tril 当成了要屏蔽的部分）：位置 i 只能看 j ≤ i，"
                   "要屏蔽的是上三角 triu(1)；按现在的写法最后一行什么都看不到，softmax 得到 NaN。",
                   "the mask is reversed and covers the diagonal too (tril taken as the part to block): position i "
                   "may only see j ≤ i, so block the upper triangle, triu(1); as written the last row sees nothing and "
                   "the softmax gives NaN.", dict(causal="reversed_diag")),
    times=("attention_multiplied_by_sqrt_dk", "分数乘了 √d_k，应该除以 √d_k：q @ kᵀ / √d_k。",
           "the scores are multiplied by √d_k; divide instead: q @ kᵀ / √d_k.", dict(scale="times")),
    split_view=("heads_split_without_transpose", "拆头时直接 view 成了 (B, h, N, d_k)，没有先 view 成 (B, N, h, d_k) 再 "
                "transpose(1, 2)：每个“头”里混进了不同位置的通道。", "the heads are split with a direct view to "
                "(B, h, N, d_k), without viewing to (B, N, h, d_k) first and then transpose(1, 2): each 'head' mixes "
                "channels of different positions.", dict(split="view")),
    merge_view=("heads_merged_without_transpose", "合并各头时直接 reshape 成了 (B, N, d)，没有先 transpose(1, 2) 成 "
                "(B, N, h, d_k)：不同位置的输出被拼在了一起。", "the heads are merged with a direct reshape to (B, N, d), "
                "without transpose(1, 2) to (B, N, h, d_k) first: outputs of different positions are glued together.",
                dict(merge="view")),
    softmax_dim=("attention_softmax_wrong_axis", "softmax 沿错误的维度：应沿最后一维（dim=-1，每个查询对所有键归一化）。",
                 "the softmax runs over the wrong axis: it must be over the last one (dim=-1, each query normalised "
                 "over all keys).", dict(softmax_dim=-2)),
    softmax_heads=("attention_softmax_wrong_axis", "softmax 沿错误的维度：应沿最后一维（dim=-1，每个查询对所有键归一化）。",
                   "the softmax runs over the wrong axis: it must be over the last one (dim=-1, each query normalised "
                   "over all keys).", dict(softmax_dim=1)),
    d_k_plain=("attention_divided_by_d_k", "分数除的是 d_k，没有开平方：应除以 √d_k。",
               "the scores are divided by d_k without the square root: divide by √d_k.", dict(scale="d_k_plain")),
    split_interleaved=("heads_split_interleaved", "拆头时通道是交错分给各头的（view(B, N, d_k, h) 再 permute）：头 j 应拿到"
                       "相邻的一段通道 j·d_k … (j+1)·d_k − 1，先 view 成 (B, N, h, d_k) 再 transpose(1, 2)。",
                       "the heads get interleaved channels (view(B, N, d_k, h), then permute): head j must take the "
                       "contiguous channels j·d_k … (j+1)·d_k − 1, so view to (B, N, h, d_k), then transpose(1, 2).",
                       dict(split="interleaved")),
    merge_interleaved=("heads_merged_interleaved", "合并各头时通道被交错排列了（permute(0, 2, 3, 1) 再 reshape）：头 i 的输出"
                       "应占相邻的一段通道 i·d_k … (i+1)·d_k − 1，先 transpose(1, 2) 成 (B, N, h, d_k) 再 reshape。",
                       "the merged heads interleave their channels (permute(0, 2, 3, 1), then reshape): head i's output "
                       "must fill the contiguous channels i·d_k … (i+1)·d_k − 1, so transpose(1, 2) to (B, N, h, d_k), "
                       "then reshape.", dict(merge="interleaved")),
    o_is_q=("attention_output_through_q_proj", "输出经过的是 self.q_proj，不是 self.o_proj：合并各头之后的最后一步是输出投影 "
            "W_O（复制粘贴时常见的错）。", "the output goes through self.q_proj, not self.o_proj: after the heads are "
            "merged the last step is the output projection W_O (a common copy-and-paste slip).", dict(out_proj="q")),
)


def _att_bug(key):
    k, zh, en, kw = ATT[key]
    return Bug(k, zh, en, lambda x, *w: ref_attention(x, *w, **kw))


ATT_BUGS = [_att_bug(k) for k in ATT]
# Known bugs that only show when base differs from the default 10000 (checked alongside ATT_BUGS / BLOCK_BUGS).
B_ROPE_BASE = Bug("rope_base_ignored", "RoPE 没有用 self.base（用的是默认的 10000）：apply_rope(q, positions, self.base)。",
                  "RoPE ignores self.base (it uses the default 10000): apply_rope(q, positions, self.base).",
                  lambda x, *w: ref_attention(x, *w, base_used=10000.0))
B_KV_WIDTH_HEADS = Bug("kv_proj_width_heads_only", "k_proj、v_proj 的输出宽度只有 n_kv_head：每个 KV 头有 d_k 个通道，"
                       "输出宽度是 n_kv_head·d_k。", "k_proj and v_proj output only n_kv_head channels: each KV head has "
                       "d_k channels, so the width is n_kv_head·d_k.")
B_ATT_TUPLE = Bug("attention_returns_tuple", "返回的是一个元组（例如输出和注意力权重）：LlamaAttention 只返回一个 (B, N, d) 的张量，"
                  "块要把它直接加到残差上。", "a tuple comes back (the output and the attention weights, say): LlamaAttention "
                  "returns one tensor of shape (B, N, d), which the block adds straight onto the residual.")
B_WRONG_EXCEPTION = Bug("attention_wrong_exception_type", "形状不合法时抛出的不是 ValueError：练习要求 ValueError（参数的值不对），"
                        "调用者会按这个类型去捕获它。", "the exception for invalid shapes is not a ValueError: the exercise asks "
                        "for ValueError (an argument has the wrong value), the type a caller catches.")
B_ASSERT = Bug("assert_instead_of_valueerror", "形状不能整除时用了 assert：应写 if ...: raise ValueError(...)。",
               "you used assert for shapes that do not divide: write if ...: raise ValueError(...).")


def ref_block(x, wts, n_head, n_kv, eps, base, *, post=False, attn_res=True, ffn_res=True, eps_used=None,
              swap=False, shared_norm=False, res_normed=False, base_used=None, norm_out=False, parallel=False,
              final_norm=False, swap_norms=False, ffn_reads_normed=False):
    """x + attn(norm(x)), then + ffn(norm(·)); keyword arguments switch on known bugs (``swap_norms``: the
    sublayers swapped but each norm left in its place; ``ffn_reads_normed``: x + attn(n1) + ffn(ffn_norm(n1)),
    n1 = attn_norm(x))."""
    e = eps if eps_used is None else eps_used
    n1 = wts["attn_norm"]
    n2 = n1 if shared_norm else wts["ffn_norm"]

    def attn(z):
        return ref_attention(z, wts["q"], wts["k"], wts["v"], wts["o"], n_head, n_kv,
                             base if base_used is None else base_used)

    def ffn(z):
        return ref_swiglu(z, wts["gate"], wts["up"], wts["down"])

    first, second = (ffn, attn) if swap or swap_norms else (attn, ffn)
    n1, n2 = (n2, n1) if swap else (n1, n2)                # each sublayer keeps its own norm
    x = as_f64(x)
    if ffn_reads_normed:
        z = ref_rms_norm(x, n1, e)
        return x + attn(z) + ffn(ref_rms_norm(z, n2, e))
    if parallel:
        return x + first(ref_rms_norm(x, n1, e)) + second(ref_rms_norm(x, n2, e))
    if norm_out:
        x = x + ref_rms_norm(first(x), n1, e)
        return x + ref_rms_norm(second(x), n2, e)
    if post:
        x = ref_rms_norm(x + first(x), n1, e)
        return ref_rms_norm(x + second(x), n2, e)
    z = ref_rms_norm(x, n1, e)
    x = (z if res_normed else x) + first(z) if attn_res else first(z)
    z = ref_rms_norm(x, n2, e)
    out = (z if res_normed else x) + second(z) if ffn_res else second(z)
    return ref_rms_norm(out, n2, e) if final_norm else out


def _block_bug(key, zh, en, **kw):
    return Bug(key, zh, en, lambda x, wts, *a: ref_block(x, wts, *a, **kw))


BLOCK_BUGS = [
    _block_bug("post_norm", "用成了 Post-norm（先加残差再归一化）：LLaMA 是 Pre-norm，x + attn(attn_norm(x))，残差路径上不做归一化。",
               "this is post-norm (normalise after adding the residual): LLaMA is pre-norm, x + attn(attn_norm(x)), "
               "with nothing on the residual path.", post=True),
    _block_bug("attn_residual_missing", "注意力子层少了残差：应是 x = x + attn(attn_norm(x))。",
               "the attention sublayer has no residual: it must be x = x + attn(attn_norm(x)).", attn_res=False),
    _block_bug("ffn_residual_missing", "FFN 子层少了残差：应是 x = x + ffn(ffn_norm(x))。",
               "the FFN sublayer has no residual: it must be x = x + ffn(ffn_norm(x)).", ffn_res=False),
    _block_bug("sublayers_swapped", "两个子层的顺序反了：先注意力，再 FFN。",
               "the two sublayers are in the wrong order: attention first, then the FFN.", swap=True),
    _block_bug("norm_shared", "两个子层用了同一个 RMSNorm：attn_norm 和 ffn_norm 是两组各自的 weight。",
               "both sublayers use the same RMSNorm: attn_norm and ffn_norm have weights of their own.",
               shared_norm=True),
    _block_bug("final_norm_in_block", "块的最后又做了一次 RMSNorm：块返回 x + ffn(ffn_norm(x)) 本身；最后的归一化"
               "在整个模型的末尾（所有块之后）只做一次。", "the block ends with one more RMSNorm: it returns "
               "x + ffn(ffn_norm(x)) as it is; the final normalisation happens once, at the end of the whole model "
               "(after all the blocks).", final_norm=True),
    _block_bug("eps_not_passed", "eps 没有传给 RMSNorm（用的是默认的 1e-6）：RMSNorm(d, eps)。",
               "eps is not passed on to the RMSNorms (they use the default 1e-6): RMSNorm(d, eps).",
               eps_used=1e-6),
    _block_bug("residual_from_normalised_x",
               "残差加的是归一化之后的 x（x = attn_norm(x); x = x + attn(x)）：残差路径要保留原始的 x。",
               "the residual adds the normalised x (x = attn_norm(x); x = x + attn(x)): the residual path "
               "must carry the raw x.", res_normed=True),
    _block_bug("norm_after_sublayer", "RMSNorm 用在了子层的输出上（x + attn_norm(attn(x))）：Pre-norm 先归一化输入，"
               "x + attn(attn_norm(x))。", "the RMSNorm is applied to the sublayer's output (x + attn_norm(attn(x))): "
               "pre-norm normalises the input, x + attn(attn_norm(x)).", norm_out=True),
    _block_bug("sublayers_swapped", "两个子层的顺序反了：先注意力，再 FFN。",
               "the two sublayers are in the wrong order: attention first, then the FFN.", swap_norms=True),
    _block_bug("sublayer_input", "self.ffn 的输入是 ffn_norm(attn_norm(x))，应是 ffn_norm(x + attn(attn_norm(x)))。",
               "self.ffn receives ffn_norm(attn_norm(x)); it must receive ffn_norm(x + attn(attn_norm(x))).",
               ffn_reads_normed=True),
    _block_bug("parallel_sublayers", "两个子层并联了（FFN 的输入是原始的 x，像 GPT-J）：LLaMA 是串联的，FFN 作用在 "
               "x + attn(attn_norm(x)) 上。", "the two sublayers run in parallel (the FFN reads the raw x, as in GPT-J): "
               "LLaMA chains them, the FFN acts on x + attn(attn_norm(x)).", parallel=True),
]
B_BLOCK_BASE = _block_bug("base_not_passed", "base 没有传给 LlamaAttention（用的是默认的 10000）："
                          "LlamaAttention(d, n_head, n_kv_head, base)。", "base is not passed on to LlamaAttention "
                          "(it uses the default 10000): LlamaAttention(d, n_head, n_kv_head, base).", base_used=10000.0)


# ---------------------------------------------------------------- rms_norm

def check_rms_norm(rms_norm) -> None:
    passed("rms_norm", _rms_checks(rms_norm))


def _rms_checks(rms_norm) -> int:
    """Exercise 1's hidden checks (raise GradingFailure, return the count); also the probe that decides whether
    a correct rms_norm stands in for the student's while the block is checked."""
    what = "rms_norm"
    gen = seeded(1001)
    n = 0
    cases = [  # (label, x, eps)
        (t("(2, 5, 8)，eps 默认", "(2, 5, 8), default eps"), torch.randn(2, 5, 8, generator=gen) * 3, None),
        (t("一维输入 (16,)", "a 1-D input (16,)"), torch.randn(16, generator=gen), 1e-6),
        (t("很小的输入（约 1e-4），eps 起作用", "tiny inputs (about 1e-4), where eps matters"),
         torch.randn(3, 6, generator=gen) * 1e-4, 1e-6),
        (t("很小的输入，不传 eps（默认 1e-6）", "tiny inputs without an eps argument (default 1e-6)"),
         torch.randn(2, 6, generator=gen) * 1e-4, None),
        (t("eps = 0.5", "eps = 0.5"), torch.randn(4, 10, generator=gen) * 0.5, 0.5),
        (t("非零均值的输入", "inputs with a large mean"), torch.randn(2, 3, 12, generator=gen) + 4.0, 1e-5),
        (t("全为 0 的一行", "a row of zeros"), torch.cat([torch.zeros(1, 8), torch.randn(2, 8, generator=gen)]), 1e-6),
        (t("float64，(3, 7, 5)", "float64, (3, 7, 5)"), torch.randn(3, 7, 5, generator=gen, dtype=torch.float64), 1e-6),
    ]
    for label, x, eps in cases:
        w = 1 + 0.5 * torch.randn(x.shape[-1], generator=gen, dtype=x.dtype)
        kw = {} if eps is None else {"eps": eps}
        full = f"{what}(x, weight{'' if eps is None else f', eps={eps}'}): {label}"
        x_before = x.clone()
        hints = RMS_HINTS + ([(lambda exc, line: True, B_RMS_1D)] if x.dim() == 1 else [])
        with forbidden(LAYER_NORM_FAMILY, what, message=rms_from_scratch_message()):
            out = call(rms_norm, x, w, what=full, hints=hints, **kw)
        expected = ref_rms_norm(x_before, w, 1e-6 if eps is None else eps)
        n += 1
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise failure(t(f"{full}：输出形状", f"{full}: output shape"), str(tuple(x.shape)), str(got),
                          B_RMS_SHAPE if isinstance(out, torch.Tensor) else None,
                          hint=t("输出的形状和 x 一样：mean 要写 keepdim=True，不要把最后一维求和掉。",
                                 "the output has x's shape: write mean(..., keepdim=True) and do not sum the last "
                                 "axis away."))
        if not torch.equal(x, x_before):
            raise failure(t(f"{full}：调用之后的输入 x", f"{full}: the input x afterwards"), t("不变", "unchanged"),
                          t("被改了", "modified"), B_RMS_IN_PLACE)
        tol = 1e-6 if x.dtype == torch.float64 else 2e-5
        if not near(out, expected, tol):
            # a given eps that is ignored looks like a missing eps on ordinary inputs: that name goes first
            bugs = RMS_BUGS + B_EPS_DEFAULT if eps is None else B_EPS_IGNORED + RMS_BUGS
            bug = diagnose(out, bugs, x, w, 1e-6 if eps is None else eps, expected=expected,
                           match=lambda a, b, tol=tol: near(a, b, tol))
            if bug is None and eps is not None and _eps_makes_no_difference(rms_norm, x, w, eps, out):
                bug = B_EPS_IGNORED[0]
            bug = bug or (B_LOW_PRECISION if near(out, expected, 1e-2) else None)
            raise failure(full, show(expected), show(out), bug,
                          hint=t("y = x / √(mean(x², 最后一维) + eps) · weight", "y = x / √(mean(x², last axis) + eps) · weight"))
        if out.dtype != x.dtype:
            raise failure(t(f"{full}：输出的 dtype", f"{full}: dtype of the output"), str(x.dtype), str(out.dtype),
                          B_RMS_DTYPE)
    # Hugging Face's LlamaRMSNorm, float64 in
    hf = bridge.hf_rms_norm(24, eps=1e-5)
    x = torch.randn(2, 9, 24, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        hf.weight.copy_(1 + 0.5 * torch.randn(24, generator=gen, dtype=torch.float64))
        theirs = hf(x)
    with forbidden(LAYER_NORM_FAMILY, what, message=rms_from_scratch_message()):
        out = call(rms_norm, x, hf.weight.detach(), 1e-5, what=t(f"{what}：与 LlamaRMSNorm 比较", f"{what}: vs LlamaRMSNorm"))
    n += 1
    if not _hf_close(out, theirs):
        raise failure(t("与 transformers 的 LlamaRMSNorm（相同 weight，eps=1e-5）比较",
                        "compared with transformers' LlamaRMSNorm (same weight, eps=1e-5)"), show(theirs), show(out))
    x = torch.randn(3, 8, generator=gen, requires_grad=True)
    with forbidden(LAYER_NORM_FAMILY, what, message=rms_from_scratch_message()):
        out = call(rms_norm, x, torch.ones(8), what=t(f"{what}（需要梯度的输入）", f"{what} (input with requires_grad)"))
    n += 1
    expect_autograd(out, what)
    return n


def _eps_makes_no_difference(rms_norm, x, w, eps, out) -> bool:
    """Does the student's rms_norm give the same output for a very different eps (the argument is not used)?"""
    other = 0.5 if eps < 0.1 else 1e-6
    try:
        with torch.no_grad(), forbidden(LAYER_NORM_FAMILY, "rms_norm", message=rms_from_scratch_message()):
            again = call(rms_norm, x.clone(), w, what="rms_norm", eps=other)
    except GradingFailure:
        return False
    return near(again, out, 1e-6)


def rms_norm_stand_in(x, weight, eps=1e-6):
    """A correct rms_norm (exercise 1) for the given RMSNorm of a student's block to call, in x's dtype."""
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


# ---------------------------------------------------------------- SwiGLU

def _linear(m, name, d_in, d_out, what, missing: Bug | None = None, wrong: dict | None = None):
    """self.<name> must be nn.Linear(d_in, d_out, bias=False). ``missing``: the bug named when there is no such
    layer; ``wrong``: weight shape -> the bug that gives it."""
    lin = getattr(m, name, None)
    if not isinstance(lin, nn.Linear):
        if missing is not None:
            raise failure(t(f"{what}：self.{name}", f"{what}: self.{name}"), f"nn.Linear({d_in}, {d_out}, bias=False)",
                          t("没有这个属性", "no such attribute") if lin is None else type(lin).__name__, missing)
        raise GradingFailure(t(f"{what}：没有属性 self.{name}（nn.Linear）。", f"{what}: no attribute self.{name} (nn.Linear)."))
    if tuple(lin.weight.shape) != (d_out, d_in):
        shape = tuple(lin.weight.shape)
        bug = B_LINEAR_ARGS if shape == (d_in, d_out) else (wrong or {}).get(shape)
        raise failure(t(f"{what}：self.{name}.weight 的形状", f"{what}: shape of self.{name}.weight"),
                      str((d_out, d_in)), str(shape), bug,
                      hint=t(f"nn.Linear({d_in}, {d_out}, bias=False)", f"nn.Linear({d_in}, {d_out}, bias=False)"))
    if lin.bias is not None:
        raise failure(t(f"{what}：self.{name}.bias", f"{what}: self.{name}.bias"), "None",
                      t("一个 bias 向量", "a bias vector"), B_BIAS)
    return lin


def _build(cls, args, what, hints=()):
    m = call(cls, *args, what=what, hints=list(hints) + SUPER_HINTS)
    if not isinstance(m, nn.Module):
        raise GradingFailure(t(f"{what}：返回的不是 nn.Module。", f"{what}: did not build an nn.Module."))
    return m


def _swiglu_width(m, name, d_in, d_out, d) -> dict:
    """{the layer's weight shape: B_SWIGLU_WIDTH} when the layer maps d to (or from) a width other than d_ff."""
    lin = getattr(m, name, None)
    shape = tuple(lin.weight.shape) if isinstance(lin, nn.Linear) else None
    if shape is None or shape == (d_out, d_in) or shape == (d_in, d_out):
        return {}
    if (name != "down" and shape[1] == d) or (name == "down" and shape[0] == d):
        return {shape: B_SWIGLU_WIDTH}
    return {}


def _swiglu_missing(m, d, d_ff) -> Bug:
    """Which bug a SwiGLU without self.gate / self.up / self.down has."""
    shapes = [tuple(x.weight.shape) for x in m.modules() if isinstance(x, nn.Linear)]
    return B_SWIGLU_FUSED if (2 * d_ff, d) in shapes else B_SWIGLU_NAMES


def check_swiglu(SwiGLU) -> None:
    passed("SwiGLU", _swiglu_checks(SwiGLU))


def _swiglu_checks(SwiGLU) -> int:
    """Exercise 2's hidden checks; also the probe for a block that builds SwiGLU."""
    what = "SwiGLU"
    gen = seeded(1002)
    n = 0
    for d, d_ff, shape in ((8, 20, (2, 5)), (12, 32, (3,)), (16, 8, (1, 2, 3)), (6, 16, (4, 7))):
        label = f"{what}(d={d}, d_ff={d_ff})"
        m = _build(SwiGLU, (d, d_ff), label)
        missing = _swiglu_missing(m, d, d_ff)
        gate, up, down = (_linear(m, name, a, b, label, missing, wrong=_swiglu_width(m, name, a, b, d))
                          for name, a, b in (("gate", d, d_ff), ("up", d, d_ff), ("down", d_ff, d)))
        total = sum(p.numel() for p in m.parameters())
        n += 1
        if total != 3 * d * d_ff:
            raise failure(t(f"{label}：参数个数", f"{label}: number of parameters"), f"3·d·d_ff = {3 * d * d_ff}", str(total),
                          B_SWIGLU_EXTRA if total > 3 * d * d_ff else None)
        bridge.randomise(m, int(torch.randint(1000, (1,), generator=gen)), scale=0.8)
        m = m.double()
        x = torch.randn(*shape, d, generator=gen, dtype=torch.float64)
        hints = allowed("swiglu_1d_input", "x 是一维的 (d,)", "x is 1-D, (d,)", "x 的形状是 (..., d)。",
                        "x has shape (..., d).") if len(shape) == 1 else []
        out = call(m, x, what=label, hints=hints)
        expected = ref_swiglu(x, gate.weight, up.weight, down.weight)
        n += 1
        if isinstance(out, torch.Tensor) and out.shape != x.shape:
            raise failure(t(f"{label}：输入 {tuple(x.shape)} 的输出形状", f"{label}: output shape for an input "
                            f"{tuple(x.shape)}"), str(tuple(x.shape)), str(tuple(out.shape)),
                          B_NO_DOWN if out.shape[-1] == d_ff != d else B_SWIGLU_SHAPE)
        if not near(out, expected):
            bug = diagnose(out, SWIGLU_BUGS, x, gate.weight, up.weight, down.weight, expected=expected, match=near)
            raise failure(t(f"{label}：输入 {tuple(x.shape)}，float64", f"{label}: input {tuple(x.shape)}, float64"),
                          show(expected), show(out), bug, hint="down(silu(gate(x)) * up(x))")
        theirs = bridge.hf_mlp(d, d_ff, gate.weight, up.weight, down.weight)(x)
        if not _hf_close(out, theirs):
            raise failure(t(f"{label}：与 transformers 的 LlamaMLP 比较", f"{label}: vs transformers' LlamaMLP"),
                          show(theirs), show(out))
    m = _build(SwiGLU, (8, 16), f"{what}(8, 16)")
    out = call(m, torch.randn(2, 8, generator=gen), what=t(f"{what}：float32 输入", f"{what}: float32 input"))
    n += 1
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        raise failure(t(f"{what}：float32 输入的输出 dtype", f"{what}: output dtype for a float32 input"), "torch.float32",
                      str(getattr(out, "dtype", type(out).__name__)),
                      hint=t("不要把结果转成别的 dtype：float32 进，float32 出。", "do not cast the result: float32 in, "
                             "float32 out."))
    expect_autograd(out, what)
    return n


class SwiGLUStandIn(nn.Module):
    """A correct SwiGLU (exercise 2) for a student's block to build."""

    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        g = self.gate(x)
        return self.down(g * torch.sigmoid(g) * self.up(x))


# ---------------------------------------------------------------- repeat_kv

def check_repeat_kv(repeat_kv) -> None:
    passed("repeat_kv", _repeat_checks(repeat_kv))


def _repeat_checks(repeat_kv) -> int:
    """Exercise 3's hidden checks; also the probe for the attention and the block that call repeat_kv."""
    what = "repeat_kv"
    gen = seeded(1003)
    from transformers.models.llama.modeling_llama import repeat_kv as hf_repeat_kv
    n = 0
    cases = [(2, 2, 5, 4, 3), (1, 4, 3, 2, 2), (2, 1, 6, 4, 4), (3, 3, 1, 6, 2), (2, 2, 4, 8, 1),
             (1, 2, 3, 2, 5)]
    for B, n_kv, N, d_k, n_rep in cases:
        x = torch.randn(B, n_kv, N, d_k, generator=gen, dtype=torch.float64)
        full = t(f"{what}(x, n_rep={n_rep})，x 的形状 (B={B}, n_kv_head={n_kv}, N={N}, d_k={d_k})",
                 f"{what}(x, n_rep={n_rep}), x of shape (B={B}, n_kv_head={n_kv}, N={N}, d_k={d_k})")
        edge = (allowed("repeat_kv_n_rep_1", "n_rep = 1", "n_rep = 1", "n_rep=1 时原样返回 x（每个 KV 头正好一个 query 头）。",
                        "with n_rep=1, return x as it is (one query head per KV head).") if n_rep == 1 else
                allowed("repeat_kv_one_token", "N = 1，只有一个 token", "N = 1, a single token",
                        "生成时每一步只有一个新 token。", "when generating, each step has a single new token.")
                if N == 1 else [])
        out = call(repeat_kv, x.clone(), n_rep, what=full, hints=REPEAT_HINTS + edge)
        expected = ref_repeat_kv(x, n_rep)
        n += 1
        want = (B, n_kv * n_rep, N, d_k)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            bug, hint = _repeat_shape_bug(out, B, n_kv, N, d_k, n_rep)
            raise failure(t(f"{full}：输出形状", f"{full}: output shape"), str(want), str(got), bug, hint)
        if not close(out, expected, atol=0, rtol=0):
            bug = diagnose(out, [B_TILE, B_TOKENS, B_MIXED], x, n_rep, expected=expected)
            raise failure(full, t("输出头 i 等于 KV 头 i // n_rep", "output head i equal to KV head i // n_rep"),
                          show(out[0, :, 0, 0]), bug,
                          hint=t("输出头 i 用 KV 头 i // n_rep", "output head i uses KV head i // n_rep"))
        if not close(out, hf_repeat_kv(x, n_rep), atol=0, rtol=0):  # pragma: no cover (same as the reference)
            raise failure(t(f"{full}：与 transformers 的 repeat_kv 比较", f"{full}: vs transformers' repeat_kv"),
                          show(hf_repeat_kv(x, n_rep)), show(out))
    x = torch.randn(1, 2, 3, 4, generator=gen, requires_grad=True)
    label = t(f"{what}（需要梯度的输入）", f"{what} (input with requires_grad)")
    out = call(repeat_kv, x, 2, what=label)
    n += 1
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise failure(label, t("一个连着计算图的张量（requires_grad=True）", "a tensor still connected to autograd "
                               "(requires_grad=True)"), t("断开了", "cut off"), B_REPEAT_DETACHED)
    return n


def repeat_kv_stand_in(x, n_rep):
    """A correct repeat_kv (exercise 3) for a student's attention to call (keeps dtype and autograd)."""
    B, n_kv, N, d_k = x.shape
    return x[:, :, None].expand(B, n_kv, n_rep, N, d_k).reshape(B, n_kv * n_rep, N, d_k)


# ---------------------------------------------------------------- LlamaAttention

B_KV_WIDTH = Bug("kv_proj_full_width", "k_proj、v_proj 的输出宽度是 d：分组查询注意力里它们只有 n_kv_head 个头，"
                 "nn.Linear(d, n_kv_head * d_k, bias=False)。", "k_proj and v_proj output d channels: in grouped-query "
                 "attention they have only n_kv_head heads, nn.Linear(d, n_kv_head * d_k, bias=False).")


B_ATT_NAMES = Bug("attention_attribute_names", "四个投影要叫 self.q_proj、self.k_proj、self.v_proj、self.o_proj（Hugging Face 的名字；"
                  "LLaMA 原版代码叫 wq、wk、wv、wo）：评分和对照 transformers 时都按这些名字找它们。", "the four projections "
                  "must be called self.q_proj, self.k_proj, self.v_proj and self.o_proj (Hugging Face's names; LLaMA's "
                  "original code says wq, wk, wv, wo): the grader and the comparison with transformers look them up by "
                  "these names.")
B_ATT_EXTRA = Bug("attention_extra_parameters", "除了四个投影的权重之外还有别的参数（一个可学习的缩放、bias、位置表……）："
                  "练习要求没有别的参数，注意力的参数正好是 2d² + 2·d·n_kv_head·d_k。", "there are parameters besides the four "
                  "projections' weights (a learnable scale, a bias, a position table, ...): the exercise asks for no "
                  "other parameters, so the attention has exactly 2d² + 2·d·n_kv_head·d_k.")
B_NOT_MERGED = Bug("attention_heads_not_merged", "返回的还是拆开的各头 (B, n_head, N, d_k)：要先 transpose(1, 2) 再 reshape 成 "
                   "(B, N, d)，然后经过 self.o_proj。", "the heads come back still split, (B, n_head, N, d_k): transpose(1, 2), "
                   "reshape to (B, N, d), then apply self.o_proj.")
B_ATT_MASK_FIXED = Bug("causal_mask_fixed_size", "因果掩码是按一个固定的大小建的（在 __init__ 里，或者第一次调用时建好就一直用）："
                       "序列比它长（或者长短变了）就对不上。在 forward 里按这一次的 N 现做："
                       "torch.ones(N, N, dtype=torch.bool).triu(1)。", "the causal mask is built at a fixed size (in "
                       "__init__, or on the first call and then kept): a sequence longer than that (or of another "
                       "length) no longer fits. Build it in forward for this call's N: "
                       "torch.ones(N, N, dtype=torch.bool).triu(1).")
B_NO_D_CHECK = Bug("attention_no_divisibility_check", "d 不能被 n_head 整除时没有抛出 ValueError（只查了 d_k 的奇偶，"
                   "而 d // n_head 会悄悄向下取整）。加上 if d % n_head: raise ValueError(...)。", "no ValueError when n_head "
                   "does not divide d (only the parity of d_k is checked, and d // n_head quietly rounds down). Add "
                   "if d % n_head: raise ValueError(...).")
B_NO_KV_CHECK = Bug("attention_no_kv_heads_check", "n_head 不能被 n_kv_head 整除时没有抛出 ValueError：这时 query 头没法平均分给 "
                    "KV 头。加上 if n_head % n_kv_head: raise ValueError(...)。", "no ValueError when n_kv_head does not "
                    "divide n_head: the query heads cannot be shared out evenly among the KV heads. Add "
                    "if n_head % n_kv_head: raise ValueError(...).")


def _attention_structure(m, d, n_head, n_kv, label):
    d_k = d // n_head
    kv_wide = {(d, d): B_KV_WIDTH} if n_kv != n_head else {}
    if d_k > 1:
        kv_wide[(n_kv, d)] = B_KV_WIDTH_HEADS
    ws = [_linear(m, name, a, b, label, B_ATT_NAMES, wrong=kv_wide if name in ("k_proj", "v_proj") else None).weight
          for name, a, b in (("q_proj", d, n_head * d_k), ("k_proj", d, n_kv * d_k), ("v_proj", d, n_kv * d_k),
                             ("o_proj", d, d))]
    total = sum(p.numel() for p in m.parameters())
    if total != bridge.gqa_attention_params(d, n_head, n_kv):
        raise failure(t(f"{label}：参数个数", f"{label}: number of parameters"),
                      f"2d² + 2·d·n_kv_head·d_k = {bridge.gqa_attention_params(d, n_head, n_kv)}", str(total),
                      B_ATT_EXTRA if total > bridge.gqa_attention_params(d, n_head, n_kv) else None,
                      hint=t("只有 q_proj、k_proj、v_proj、o_proj 四个没有 bias 的线性层，没有别的参数。",
                             "only the four linear layers q_proj, k_proj, v_proj, o_proj, without biases, and no "
                             "other parameters."))
    return ws


B_ODD_DK = Bug("attention_odd_head_width_accepted", "每个头的宽度 d_k = d / n_head 是奇数时也没有抛出 ValueError：RoPE 成对旋转，"
               "d_k 必须是偶数。加上 if (d // n_head) % 2: raise ValueError(...)。", "no ValueError for an odd head "
               "width d_k = d / n_head: RoPE rotates pairs, so d_k must be even. Add if (d // n_head) % 2: raise "
               "ValueError(...).")


B_VALUES_IN_MESSAGE = Bug("valueerror_without_values", "ValueError 的信息里没有写出相关的值：练习要求把它们写进去，"
                          "例如 raise ValueError(f\"n_head={n_head} 不能整除 d={d}\")，读的人才知道哪里不对。",
                          "the ValueError's message does not show the values involved: the exercise asks for them, e.g. "
                          "raise ValueError(f\"n_head={n_head} does not divide d={d}\"), so that a reader sees what "
                          "is wrong.")


def _expect_value_error(cls, args, label, missing: Bug | None = None, values=()):
    """``cls(*args)`` must raise ValueError, with each group of ``values`` shown in its message (any one of a group)."""
    ensure_untampered(label)
    try:
        cls(*args)
    except ValueError as exc:
        shown = set(re.findall(r"\d+", str(exc)))
        for group in values:
            if not shown & {str(v) for v in group}:
                raise failure(t(f"{label}：ValueError 的信息", f"{label}: the ValueError's message"),
                              t(f"写出 {' 或 '.join(map(str, group))}", f"showing {' or '.join(map(str, group))}"),
                              repr(str(exc)), B_VALUES_IN_MESSAGE) from None
        return
    except NotImplementedError:
        call(cls, *args, what=label)                   # core's own "not implemented" verdict
        raise
    except AssertionError:
        raise failure(label, "ValueError", "AssertionError", B_ASSERT) from None
    except Exception as exc:  # noqa: BLE001
        raise failure(label, "ValueError", f"{type(exc).__name__}: {exc}", B_WRONG_EXCEPTION,
                      hint=t("在 __init__ 里先检查形状，不合法时 raise ValueError(...)，再去建线性层。",
                             "check the shapes at the start of __init__ and raise ValueError(...) before building "
                             "the linear layers.")) from None
    raise failure(label, "ValueError", t("没有抛出异常", "no exception"), missing,
                  hint=t("在 __init__ 里检查并 raise ValueError(...)。", "check in __init__ and raise ValueError(...)."))


ROPE_HINT = [(Raises(contains=("positions must have shape",)), Bug(
    "rope_on_wrong_axis", "apply_rope 要求 token 在倒数第二维：先 view 成 (B, N, h, d_k) 再 transpose(1, 2) 成 "
    "(B, h, N, d_k)，然后旋转。", "apply_rope wants the tokens on axis -2: view to (B, N, h, d_k), transpose(1, 2) "
    "to (B, h, N, d_k), then rotate.")),
    (Raises(contains=("view size is not compatible",)), Bug(
        "merge_view_not_contiguous", "transpose 之后张量在内存里不连续，不能直接 view：合并各头时写 "
        "y.transpose(1, 2).reshape(B, N, d)（或先 .contiguous() 再 view）。", "after a transpose the tensor is not "
        "contiguous in memory, so view fails: merge the heads with y.transpose(1, 2).reshape(B, N, d) (or call "
        ".contiguous() before view).")),
    (Raises(contains=("at non-singleton dimension 1",)), Bug(
        "kv_heads_not_repeated", "q 有 n_head 个头，k、v 只有 n_kv_head 个：算分数之前先用 repeat_kv(k, n_head // n_kv_head) "
        "和 repeat_kv(v, n_head // n_kv_head) 把它们复制到 n_head 个头（n_rep = n_head // n_kv_head，不是反过来）。",
        "q has n_head heads but k and v only n_kv_head: before the scores, repeat them to n_head heads with "
        "repeat_kv(k, n_head // n_kv_head) and repeat_kv(v, n_head // n_kv_head) (n_rep = n_head // n_kv_head, not "
        "the other way round).")),
    (Raises(contains=("masked_fill_ only supports boolean masks",)), Bug(
        "mask_not_bool", "masked_fill 的掩码要是 bool 张量：torch.ones(N, N, dtype=torch.bool).triu(1)"
        "（或者 torch.triu(...).bool()）。", "masked_fill needs a bool mask: torch.ones(N, N, dtype=torch.bool).triu(1) "
        "(or torch.triu(...).bool()).")),
    (Raises(contains=("Expected size for first two dimensions of batch2",)), Bug(
        "scores_k_not_transposed", "矩阵乘的两边形状对不上：分数是 q @ k.transpose(-2, -1)，k 要先转置最后两维。",
        "the two sides of the product do not fit: the scores are q @ k.transpose(-2, -1); transpose k's last two "
        "axes first."))] + COMMON_HINTS
VALID_SHAPES = [(Raises(types=("ValueError",)), Bug(
    "valueerror_for_valid_shapes", "这组形状是合法的（d 能被 n_head 整除，n_head 能被 n_kv_head 整除，d_k 是偶数），"
    "__init__ 却抛出了 ValueError：检查一下判断条件。", "these shapes are valid (n_head divides d, n_kv_head divides "
    "n_head, d_k is even), yet __init__ raised ValueError: check the conditions."))]


def check_llama_attention(cls) -> None:
    with on_its_own(cls, (E_REPEAT,)):
        passed("LlamaAttention", _attention_checks(cls))


def _attention_checks(cls) -> int:
    """Exercise 4's hidden checks; also the probe for a block that builds LlamaAttention."""
    what = "LlamaAttention"
    gen = seeded(1004)
    n = 0
    # d_k differs from √d in every case with more than one token (dividing by d_k and by √d are told apart), and N
    # from n_head in every case (RoPE run over the head axis is not silently accepted)
    cases = [(2, 7, 24, 6, 2, 10000.0), (1, 5, 24, 6, 3, 10000.0), (2, 5, 16, 2, 2, 10000.0), (1, 9, 32, 4, 1, 100.0),
             (2, 4, 24, 4, 4, 10000.0), (1, 1, 16, 4, 2, 10000.0)]
    for B, N, d, n_head, n_kv, base in cases:
        label = f"{what}(d={d}, n_head={n_head}, n_kv_head={n_kv}, base={base:g}), x (B={B}, N={N}, d={d})"
        m = _build(cls, (d, n_head, n_kv, base), label, hints=VALID_SHAPES)
        ws = _attention_structure(m, d, n_head, n_kv, label)
        bridge.randomise(m, int(torch.randint(1000, (1,), generator=gen)), scale=0.5)
        m = m.double()
        ws = [w.detach() for w in _attention_structure(m, d, n_head, n_kv, label)]
        x = torch.randn(B, N, d, generator=gen, dtype=torch.float64)
        edge = allowed("attention_one_token", "N = 1，只有一个 token", "N = 1, a single token",
                       "一个 token 的序列也要能算（它只看自己）。", "a sequence of one token must work too (it sees "
                       "only itself).") if N == 1 else []
        out = call(m, x.clone(), what=label, hints=ROPE_HINT + edge)
        expected = ref_attention(x, *ws, n_head, n_kv, base)
        n += 1
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, N, d):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise failure(t(f"{label}：输出形状", f"{label}: output shape"), str((B, N, d)), str(got),
                          B_NOT_MERGED if got == (B, n_head, N, d // n_head) else
                          B_ATT_TUPLE if isinstance(out, tuple) else None,
                          hint=t("合并各头：y.transpose(1, 2).reshape(B, N, d)，再经过 self.o_proj。",
                                 "merge the heads with y.transpose(1, 2).reshape(B, N, d), then apply self.o_proj."))
        if not near(out, expected):
            bug = diagnose(out, ATT_BUGS + [B_ROPE_BASE], x, *ws, n_head, n_kv, base, expected=expected, match=near)
            raise failure(t(f"{label}：与独立参考实现比较（最后一个位置）", f"{label}: vs an independent reference "
                            "(last position)"), show(expected[:, -1]), show(out[:, -1]), bug,
                          hint=t("q、k、v 投影 → 拆头 → q、k 上 RoPE → repeat_kv → 缩放 + 因果掩码 → softmax → 合并 → o_proj",
                                 "q, k, v projections → split → RoPE on q, k → repeat_kv → scale + causal mask → softmax "
                                 "→ merge → o_proj"))
        weights = dict(attn_norm=torch.ones(d), q=ws[0], k=ws[1], v=ws[2], o=ws[3], ffn_norm=torch.ones(d),
                       gate=torch.zeros(8, d), up=torch.zeros(8, d), down=torch.zeros(d, 8))
        hf = bridge.hf_decoder_layer(d, n_head, n_kv, 8, base=base, weights=weights)
        theirs = bridge.hf_attention_forward(hf, x)
        if not _hf_close(out, theirs):
            raise failure(t(f"{label}：与 transformers 的 LlamaAttention（W_Q、W_K 行置换后）比较",
                            f"{label}: vs transformers' LlamaAttention (rows of W_Q, W_K permuted)"),
                          show(theirs[:, -1]), show(out[:, -1]))
    # each invalid case breaks one condition only (d_k even in the first two), so that each check is needed
    for args, zh, en, missing, values in (
            ((10, 4, 2), "d 不能被 n_head 整除", "n_head does not divide d", B_NO_D_CHECK, ((10,), (4,))),
            ((24, 6, 4), "n_head 不能被 n_kv_head 整除", "n_kv_head does not divide n_head", B_NO_KV_CHECK, ((6,), (4,))),
            ((12, 12, 4), "d_k = 1 是奇数", "d_k = 1 is odd", B_ODD_DK, ((1, 12),))):
        _expect_value_error(cls, args, t(f"{what}{args}：{zh}，应抛出 ValueError",
                                         f"{what}{args}: {en}, so it must raise ValueError"), missing, values)
        n += 1
    n += _attention_float32_and_causal(cls, gen)
    n += _attention_long(cls, gen)
    return n


LONG_N = 1100      # longer than any fixed size a student is likely to pick for a causal mask (512, 1024)
FIXED_MASK_HINTS = [(lambda exc, line: str(LONG_N) in str(exc) or "mask" in (line or ""), B_ATT_MASK_FIXED)]


def _attention_long(cls, gen) -> int:
    """The same layer on 6 tokens, then on LONG_N whose first 6 are the same: a causal mask made once at a fixed
    size (or kept from the first call) no longer fits. (Every other check has passed by now, so a difference here
    can only come from the length; float32 and a small layer keep it cheap.)"""
    label = t(f"LlamaAttention(8, 2, 1)：先处理 6 个 token，再处理以它们开头的 {LONG_N} 个",
              f"LlamaAttention(8, 2, 1): 6 tokens, then {LONG_N} tokens that start with them")
    m = _build(cls, (8, 2, 1), label, hints=VALID_SHAPES)
    bridge.randomise(m, int(torch.randint(1000, (1,), generator=gen)), scale=0.5)
    x = torch.randn(1, LONG_N, 8, generator=gen)
    with torch.no_grad():
        short = call(m, x[:, :6].clone(), what=label, hints=ROPE_HINT)
        out = call(m, x.clone(), what=label, hints=FIXED_MASK_HINTS + ROPE_HINT)
    if not (isinstance(out, torch.Tensor) and tuple(out.shape) == (1, LONG_N, 8) and close(out[:, :6], short)):
        got = f"{tuple(out.shape)}: {show(out[0, :6, 0])}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise failure(t(f"{label}：前 6 个位置的输出", f"{label}: the outputs at the first 6 positions"),
                      t(f"与只处理 6 个 token 时相同：{show(short[0, :, 0])}", f"the same as for the 6 tokens alone: "
                        f"{show(short[0, :, 0])}"), got, B_ATT_MASK_FIXED)
    return 1


def _attention_float32_and_causal(cls, gen) -> int:
    what = "LlamaAttention"
    label = t(f"{what}(16, 4, 2)：float32 输入，梯度，因果性", f"{what}(16, 4, 2): float32 input, gradients, causality")
    m = _build(cls, (16, 4, 2), label, hints=VALID_SHAPES)
    x = torch.randn(2, 8, 16, generator=gen)
    out = call(m, x, what=label, hints=ROPE_HINT)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32 or tuple(out.shape) != (2, 8, 16):
        got = f"{out.dtype}, {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise failure(t(f"{label}：输出的 dtype 和形状", f"{label}: dtype and shape of the output"),
                      "torch.float32, (2, 8, 16)", got,
                      hint=t("float32 进，float32 出：掩码、位置这些辅助张量不要用 float64 去和 q、k 相乘。",
                             "float32 in, float32 out: do not mix float64 helper tensors (masks, positions) into q and k."))
    out.sum().backward()
    if m.q_proj.weight.grad is None or m.k_proj.weight.grad is None:
        raise GradingFailure(t(f"{label}：梯度没有传到 q_proj / k_proj。", f"{label}: no gradient reaches q_proj / k_proj."))
    m = m.double()
    x = torch.randn(1, 8, 16, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        base = call(m, x.clone(), what=label)
        x2 = x.clone()
        x2[:, 5:] += 3.0
        later = call(m, x2, what=label)
    if not close(later[:, :5], base[:, :5], atol=1e-9, rtol=0):
        k, zh, en, _ = ATT["mask"]
        raise failure(t(f"{label}：改动位置 5 之后的 token", f"{label}: changing the tokens after position 4"),
                      t("位置 0…4 的输出不变", "outputs at positions 0…4 unchanged"), t("它们变了", "they changed"),
                      Bug(k, zh, en))
    return 2


class LlamaAttentionStandIn(nn.Module):
    """A correct LlamaAttention (exercise 4) for a student's block to build; its own repeat, not theirs."""

    def __init__(self, d: int, n_head: int, n_kv_head: int, base: float = 10000.0):
        super().__init__()
        if d % n_head or n_head % n_kv_head or (d // n_head) % 2:
            raise ValueError(f"d={d}, n_head={n_head}, n_kv_head={n_kv_head}: the shapes do not fit")
        self.n_head, self.n_kv_head, self.d_k, self.base = n_head, n_kv_head, d // n_head, base
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)
        self.v_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, N, d = x.shape
        q = self.q_proj(x).view(B, N, self.n_head, self.d_k).transpose(1, 2)
        k = self.k_proj(x).view(B, N, self.n_kv_head, self.d_k).transpose(1, 2)
        v = self.v_proj(x).view(B, N, self.n_kv_head, self.d_k).transpose(1, 2)
        pos = torch.arange(N, device=x.device)
        q, k = bridge.apply_rope(q, pos, self.base), bridge.apply_rope(k, pos, self.base)
        rep = self.n_head // self.n_kv_head
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        s = s - s.amax(dim=-1, keepdim=True)
        w = s.exp() / s.exp().sum(dim=-1, keepdim=True)
        return self.o_proj((w @ v).transpose(1, 2).reshape(B, N, d))


# ---------------------------------------------------------------- LlamaBlock

B_NORM_SHARED = Bug("norm_shared", "两个子层用了同一个 RMSNorm：attn_norm 和 ffn_norm 是两组各自的 weight。",
                    "both sublayers use the same RMSNorm: attn_norm and ffn_norm have weights of their own.")
B_EPS_NOT_PASSED = Bug("eps_not_passed", "eps 没有传给 RMSNorm（它们用的是默认值或一个写死的数）：RMSNorm(d, eps)。",
                       "eps is not passed on to the RMSNorms (they use the default or a fixed number): RMSNorm(d, eps).")
B_D_FF = Bug("d_ff_not_passed", "FFN 的隐藏宽度不是参数 d_ff：块里的 SwiGLU 用调用者给的 d_ff 来建（SwiGLU(d, d_ff)）。",
             "the FFN's hidden width is not the argument d_ff: build the block's SwiGLU with the d_ff the caller gives "
             "(SwiGLU(d, d_ff)).")
BLOCK_ARGS = [(Raises(types=("ValueError",)), Bug(
    "attention_arguments_order", "构造块的时候 LlamaAttention 抛出了 ValueError，而这组形状是合法的：检查传给它的参数顺序，"
    "LlamaAttention(d, n_head, n_kv_head, base)。", "building the block, LlamaAttention raised ValueError although "
    "these shapes are valid: check the order of its arguments, LlamaAttention(d, n_head, n_kv_head, base)."))]


B_BLOCK_NAMES = Bug("block_attribute_names", "块的四个子模块要叫 self.attn_norm、self.attn、self.ffn_norm、self.ffn"
                    "（不是 Hugging Face 的 input_layernorm、self_attn、post_attention_layernorm、mlp）：评分按这些名字找它们。",
                    "the block's four submodules must be called self.attn_norm, self.attn, self.ffn_norm and self.ffn "
                    "(not Hugging Face's input_layernorm, self_attn, post_attention_layernorm, mlp): the grader looks "
                    "them up by these names.")
B_BLOCK_DEFAULTS = Bug("block_default_arguments", "不传 eps 和 base 时结果不对，而显式传入时是对的：默认值要和练习一样，"
                       "LlamaBlock(d, n_head, n_kv_head, d_ff, eps=1e-6, base=10000.0)。", "the result is wrong when eps and "
                       "base are left out, and right when they are passed: the defaults must be the exercise's, "
                       "LlamaBlock(d, n_head, n_kv_head, d_ff, eps=1e-6, base=10000.0).")


def _block_structure(m, d, n_head, n_kv, d_ff, eps, label):
    for name in ("attn_norm", "attn", "ffn_norm", "ffn"):
        if getattr(m, name, None) is None:
            raise failure(t(f"{label}：self.{name}", f"{label}: self.{name}"), t("一个子模块", "a submodule"),
                          t("没有这个属性", "no such attribute"), B_BLOCK_NAMES)
    for name in ("attn_norm", "ffn_norm"):
        w = getattr(getattr(m, name, None), "weight", None)
        if not isinstance(w, torch.Tensor) or tuple(w.shape) != (d,):
            raise failure(t(f"{label}：self.{name}.weight", f"{label}: self.{name}.weight"), t(f"形状 ({d},) 的参数",
                          f"a parameter of shape ({d},)"), str(tuple(w.shape)) if isinstance(w, torch.Tensor) else t("没有", "none"),
                          hint="RMSNorm(d, eps)")
        if getattr(getattr(m, name), "bias", None) is not None:
            raise failure(t(f"{label}：self.{name} 有 bias（LayerNorm？）", f"{label}: self.{name} has a bias (LayerNorm?)"),
                          "RMSNorm(d, eps)", "bias", B_BIAS)
        used = getattr(getattr(m, name), "eps", eps)
        if isinstance(used, (int, float)) and used != eps:
            raise failure(t(f"{label}：self.{name}.eps", f"{label}: self.{name}.eps"), f"{eps:g}", f"{used:g}",
                          B_EPS_NOT_PASSED)
    if m.attn_norm is m.ffn_norm:
        raise failure(t(f"{label}：self.attn_norm 和 self.ffn_norm", f"{label}: self.attn_norm and self.ffn_norm"),
                      t("两个各自的 RMSNorm", "two RMSNorms of their own"), t("同一个对象", "one and the same object"),
                      B_NORM_SHARED)
    for name in ("attn", "ffn"):
        if not isinstance(getattr(m, name, None), nn.Module):
            raise GradingFailure(t(f"{label}：没有子模块 self.{name}。", f"{label}: no submodule self.{name}."))
    _attention_structure(m.attn, d, n_head, n_kv, label + " .attn")
    for name, a, b in (("gate", d, d_ff), ("up", d, d_ff), ("down", d_ff, d)):
        lin = getattr(m.ffn, name, None)
        if isinstance(lin, nn.Linear) and d_ff not in lin.weight.shape and d in lin.weight.shape:
            raise failure(t(f"{label} .ffn：self.{name}.weight 的形状", f"{label} .ffn: shape of self.{name}.weight"),
                          str((b, a)), str(tuple(lin.weight.shape)), B_D_FF)
        _linear(m.ffn, name, a, b, label + " .ffn")
    total = sum(p.numel() for p in m.parameters())
    want = 2 * d + bridge.gqa_attention_params(d, n_head, n_kv) + 3 * d * d_ff
    if total != want:
        raise failure(t(f"{label}：参数个数", f"{label}: number of parameters"), str(want), str(total),
                      hint=t("块的参数就是两个 RMSNorm 的 weight、注意力的四个投影和 SwiGLU 的三个矩阵。",
                             "the block's parameters are the two RMSNorm weights, the attention's four projections "
                             "and SwiGLU's three matrices."))


def _sublayer_diagnosis(m, x, wts, n_head, n_kv, eps, base, label):
    """When the block is wrong but its wiring is not a known bug: which part is wrong?"""
    parts = [("attn_norm", lambda z: ref_rms_norm(z, wts["attn_norm"], eps), RMS_BUGS,
              (wts["attn_norm"], eps), t("先让 rms_norm 通过它的测试。", "make rms_norm pass its test first.")),
             ("ffn", lambda z: ref_swiglu(z, wts["gate"], wts["up"], wts["down"]), SWIGLU_BUGS,
              (wts["gate"], wts["up"], wts["down"]), t("先让 SwiGLU 通过它的测试。", "make SwiGLU pass its test first.")),
             ("attn", lambda z: ref_attention(z, wts["q"], wts["k"], wts["v"], wts["o"], n_head, n_kv, base), ATT_BUGS + [B_ROPE_BASE],
              (wts["q"], wts["k"], wts["v"], wts["o"], n_head, n_kv, base),
              t("先让 LlamaAttention 通过它的测试。", "make LlamaAttention pass its test first."))]
    for name, ref, bugs, args, fix in parts:
        with torch.no_grad():
            got = call(getattr(m, name), x.clone(), what=f"{label} .{name}", hints=ROPE_HINT)
        if not near(got, ref(x)):
            bug = diagnose(got, bugs, x, *args, expected=ref(x), match=near)
            if bug is not None:
                bug = Bug(bug.key, f"块里的 self.{name} 本身就不对：{bug.zh}", f"the block's self.{name} is itself "
                          f"wrong: {bug.en}")
            return bug, t(f"块里的 self.{name} 本身就不对：", f"the block's self.{name} is itself wrong: ") + fix
    wiring = _block_wiring(m, x, wts, eps)
    if wiring is not None:
        return wiring, None
    return None, t("x = x + attn(attn_norm(x))；x = x + ffn(ffn_norm(x))",
                   "x = x + attn(attn_norm(x)); x = x + ffn(ffn_norm(x))")


def _block_wiring(m, x, wts, eps) -> Bug | None:
    """The block's sublayers are right on their own: which one gets the wrong input (hooks on attn and ffn)?"""
    seen, handles = {}, []
    for name in ("attn", "ffn"):
        def pre(mod, args, name=name):
            seen.setdefault(name, [args[0] if args else None, None])

        def post(mod, args, out, name=name):
            if seen[name][1] is None:
                seen[name][1] = out
        handles += [getattr(m, name).register_forward_pre_hook(pre), getattr(m, name).register_forward_hook(post)]
    try:
        with torch.no_grad():
            m(x.clone())
    except Exception:  # noqa: BLE001 - the block's own error is reported elsewhere
        return None
    finally:
        for hd in handles:
            hd.remove()
    if "attn" not in seen or "ffn" not in seen:
        return None
    x = as_f64(x)
    n1, n2 = ref_rms_norm(x, wts["attn_norm"], eps), ref_rms_norm(x, wts["ffn_norm"], eps)
    if not near(seen["attn"][0], n1):
        for zh, en, value in (("ffn_norm(x)", "ffn_norm(x)", n2), ("x 本身（没有归一化）", "x itself (not normalised)", x)):
            if near(seen["attn"][0], value):
                return Bug("sublayer_input", f"self.attn 的输入是 {zh}，应是 attn_norm(x)。",
                           f"self.attn receives {en}; it must receive attn_norm(x).")
        return Bug("sublayer_input", "self.attn 的输入不对：应是 attn_norm(x)。",
                   "self.attn receives the wrong input: it must be attn_norm(x).")
    h = x + as_f64(seen["attn"][1])
    if not near(seen["ffn"][0], ref_rms_norm(h, wts["ffn_norm"], eps)):
        for zh, en, value in (("ffn_norm(x)，x 是加注意力之前的", "ffn_norm(x) of x before the attention was added", n2),
                              ("ffn_norm(attn_norm(x))", "ffn_norm(attn_norm(x))", ref_rms_norm(n1, wts["ffn_norm"], eps)),
                              ("没有归一化的 x + attn(...)", "x + attn(...), not normalised", h)):
            if near(seen["ffn"][0], value):
                return Bug("sublayer_input", f"self.ffn 的输入是 {zh}，应是 ffn_norm(x + attn(attn_norm(x)))。",
                           f"self.ffn receives {en}; it must receive ffn_norm(x + attn(attn_norm(x))).")
        return Bug("sublayer_input", "self.ffn 的输入不对：应是 ffn_norm(h)，h = x + attn(attn_norm(x))。",
                   "self.ffn receives the wrong input: it must be ffn_norm(h) with h = x + attn(attn_norm(x)).")
    return Bug("residual_wiring", "两个子层的输入都对，错在怎么把它们加起来：h = x + attn(attn_norm(x))，"
               "返回 h + ffn(ffn_norm(h))。", "both sublayers get the right inputs; the mistake is in how their results "
               "are added: h = x + attn(attn_norm(x)), return h + ffn(ffn_norm(h)).")


def check_llama_block(cls) -> None:
    with on_its_own(cls, (E_RMS, E_SWIGLU, E_REPEAT, E_ATTENTION)):
        passed("LlamaBlock", _block_checks(cls))


def _block_checks(cls) -> int:
    what = "LlamaBlock"
    gen = seeded(1005)
    n = 0
    cases = [  # B, N, d, n_head, n_kv, d_ff, eps, base, scale of x
        (2, 6, 16, 4, 2, 40, 1e-6, 10000.0, 1.0), (1, 8, 24, 6, 2, 64, 1e-5, 10000.0, 2.0),
        (2, 5, 16, 2, 2, 24, 0.1, 10000.0, 0.3), (1, 7, 32, 4, 1, 88, 1e-6, 500.0, 1.0),
    ]
    for B, N, d, n_head, n_kv, d_ff, eps, base, sx in cases:
        label = (f"{what}(d={d}, n_head={n_head}, n_kv_head={n_kv}, d_ff={d_ff}, eps={eps:g}, base={base:g}), "
                 f"x (B={B}, N={N}, d={d})")
        m = _build(cls, (d, n_head, n_kv, d_ff, eps, base), label, hints=BLOCK_ARGS)
        _block_structure(m, d, n_head, n_kv, d_ff, eps, label)
        bridge.randomise(m, int(torch.randint(1000, (1,), generator=gen)), scale=0.4)
        m = m.double()
        wts = {k: v.detach() for k, v in bridge.block_weights(m).items()}
        x = sx * torch.randn(B, N, d, generator=gen, dtype=torch.float64)
        out = call(m, x.clone(), what=label, hints=ROPE_HINT)
        expected = ref_block(x, wts, n_head, n_kv, eps, base)
        n += 1
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, N, d):
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise failure(t(f"{label}：输出形状", f"{label}: output shape"), str((B, N, d)), str(got),
                          hint=t("块的输出和输入形状相同：(B, N, d)。", "the block's output has the input's shape, (B, N, d)."))
        if not near(out, expected):
            bug = diagnose(out, BLOCK_BUGS + [B_BLOCK_BASE], x, wts, n_head, n_kv, eps, base, expected=expected,
                           match=near)
            bug, hint = (bug, None) if bug else _sublayer_diagnosis(m, x, wts, n_head, n_kv, eps, base, label)
            raise failure(t(f"{label}：与独立参考实现比较（最后一个位置）", f"{label}: vs an independent reference (last "
                            "position)"), show(expected[:, -1]), show(out[:, -1]), bug, hint)
        theirs = bridge.hf_layer_forward(bridge.hf_decoder_layer(d, n_head, n_kv, d_ff, eps, base, wts), x)
        if not _hf_close(out, theirs):
            raise failure(t(f"{label}：与 transformers 的 LlamaDecoderLayer 比较", f"{label}: vs transformers' "
                            "LlamaDecoderLayer"), show(theirs[:, -1]), show(out[:, -1]))
    n += _block_defaults(cls, gen)
    m = _build(cls, (16, 4, 2, 32), f"{what}(16, 4, 2, 32)", hints=BLOCK_ARGS)
    x = torch.randn(2, 5, 16, generator=gen, requires_grad=True)
    out = call(m, x, what=t(f"{what}：float32 输入，需要梯度", f"{what}: float32 input with requires_grad"))
    n += 1
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        raise failure(t(f"{what}：float32 输入的输出", f"{what}: output for a float32 input"), "torch.float32",
                      str(getattr(out, "dtype", type(out).__name__)),
                      hint=t("float32 进，float32 出。", "float32 in, float32 out."))
    expect_autograd(out, what)
    return n


def _block_defaults(cls, gen) -> int:
    """LlamaBlock(16, 4, 2, 32) without eps and base behaves as eps=1e-6, base=10000 (small inputs: eps shows)."""
    label = t("LlamaBlock(16, 4, 2, 32)：不传 eps、base（默认 1e-6、10000）", "LlamaBlock(16, 4, 2, 32): eps and base "
              "left out (defaults 1e-6, 10000)")
    m = _build(cls, (16, 4, 2, 32), label, hints=BLOCK_ARGS)
    bridge.randomise(m, int(torch.randint(1000, (1,), generator=gen)), scale=0.4)
    m = m.double()
    wts = {k: v.detach() for k, v in bridge.block_weights(m).items()}
    x = 0.003 * torch.randn(1, 12, 16, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        out = call(m, x.clone(), what=label, hints=ROPE_HINT)
    expected = ref_block(x, wts, 4, 2, 1e-6, 10000.0)
    if not near(out, expected):
        raise failure(label, show(expected[:, -1]), show(out[:, -1]) if isinstance(out, torch.Tensor) else
                      type(out).__name__, B_BLOCK_DEFAULTS)
    return 1


# ---------------------------------------------------------------- each exercise on its own
# The earlier exercises a later one uses, in the order they are probed: a correct repeat_kv is already in place
# when the student's LlamaAttention is probed, so a wrong repeat_kv is not charged to it (nor to the block).

E_RMS = Earlier("rms_norm", 1, passes(_rms_checks), rms_norm_stand_in)
E_SWIGLU = Earlier("SwiGLU", 2, passes(_swiglu_checks), SwiGLUStandIn)
E_REPEAT = Earlier("repeat_kv", 3, passes(_repeat_checks), repeat_kv_stand_in)
E_ATTENTION = Earlier("LlamaAttention", 4, passes(_attention_checks), LlamaAttentionStandIn)


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)

ERRORS = {
    "rms_norm": RMS_HINTS,
    "SwiGLU": SUPER_HINTS,
    "repeat_kv": REPEAT_HINTS,
    "LlamaAttention": [h for h in ROPE_HINT if isinstance(h[0], Raises)] + SUPER_HINTS + VALID_SHAPES,
    "LlamaBlock": BLOCK_ARGS + SUPER_HINTS,
}


def _rms_probe_input(gen):
    """x (2, 3, 8): a row with a large mean, a row of tiny numbers (where eps shows), ordinary rows; a weight."""
    x = torch.randn(2, 3, 8, generator=gen)
    x[0, 0] += 4.0
    x[0, 1] *= 1e-4
    x[1, 2] *= 3.0
    return x, 1 + 0.5 * torch.randn(8, generator=gen)


def _weights_of(module_shapes: dict, gen, scale) -> dict:
    """Random parameters by name: norm weights about 1, matrices about ``scale``."""
    return {name: (1 + 0.5 * torch.randn(*shape, generator=gen) if len(shape) == 1 else
                   scale * torch.randn(*shape, generator=gen)) for name, shape in module_shapes.items()}


def _attention_probe(name, d, n_head, n_kv, base, B, N, gen):
    d_k = d // n_head
    state = _weights_of({"q_proj.weight": (d, d), "k_proj.weight": (n_kv * d_k, d),
                         "v_proj.weight": (n_kv * d_k, d), "o_proj.weight": (d, d)}, gen, 0.5)
    ws = [state[f"{p}_proj.weight"] for p in "qkvo"]
    x = torch.randn(B, N, d, generator=gen)
    return Probe(name, args=(x,), reference=lambda x: ref_attention(x, *ws, n_head, n_kv, base),
                 bugs=ATT_BUGS + [B_ROPE_BASE], run_bug=lambda bug: bug.impl(x, *ws, n_head, n_kv, base), state=state)


def _block_probe(name, d, n_head, n_kv, d_ff, eps, base, B, N, x_scale, gen, bugs):
    d_k = d // n_head
    state = _weights_of({"attn_norm.weight": (d,), "attn.q_proj.weight": (d, d),
                         "attn.k_proj.weight": (n_kv * d_k, d), "attn.v_proj.weight": (n_kv * d_k, d),
                         "attn.o_proj.weight": (d, d), "ffn_norm.weight": (d,), "ffn.gate.weight": (d_ff, d),
                         "ffn.up.weight": (d_ff, d), "ffn.down.weight": (d, d_ff)}, gen, 0.4)
    wts = {"attn_norm": state["attn_norm.weight"], "ffn_norm": state["ffn_norm.weight"],
           **{k: state[f"attn.{k}_proj.weight"] for k in "qkvo"},
           **{k: state[f"ffn.{k}.weight"] for k in ("gate", "up", "down")}}
    x = x_scale * torch.randn(B, N, d, generator=gen)
    return Probe(name, args=(x,), reference=lambda x: ref_block(x, wts, n_head, n_kv, eps, base), bugs=bugs,
                 run_bug=lambda bug: bug.impl(x, wts, n_head, n_kv, eps, base), state=state)


def probes() -> list[Probe]:
    gen = seeded(1010)
    x, w = _rms_probe_input(gen)
    defaults = [Bug(*_EPS_DEFAULT, lambda x, w, e=e: ref_rms_norm(x, w, e)) for e in (1e-5, 1e-8)]
    ignored = [Bug(*_EPS_IGNORED, lambda x, w, eps, e=e: ref_rms_norm(x, w, e)) for e in (1e-6, 1e-5)]
    d, d_ff = 8, 20
    ffn = _weights_of({"gate.weight": (d_ff, d), "up.weight": (d_ff, d), "down.weight": (d, d_ff)}, gen, 0.8)
    xs = torch.randn(2, 3, d, generator=gen)
    ffn_ws = (ffn["gate.weight"], ffn["up.weight"], ffn["down.weight"])
    kv = torch.randn(2, 2, 5, 4, generator=gen)
    block_defaults = [_block_bug(B_BLOCK_DEFAULTS.key, B_BLOCK_DEFAULTS.zh, B_BLOCK_DEFAULTS.en, eps_used=1e-5),
                      _block_bug(B_BLOCK_DEFAULTS.key, B_BLOCK_DEFAULTS.zh, B_BLOCK_DEFAULTS.en, base_used=500000.0)]
    return [
        Probe("rms", args=(x, w), reference=ref_rms_norm, bugs=RMS_BUGS + defaults),
        Probe("rms_eps", args=(x, w, 0.5), reference=ref_rms_norm, bugs=ignored + RMS_BUGS),
        Probe("swiglu", args=(xs,), reference=lambda x: ref_swiglu(x, *ffn_ws), bugs=SWIGLU_BUGS,
              run_bug=lambda bug: bug.impl(xs, *ffn_ws), state=ffn),
        Probe("repeat", args=(kv, 3), reference=ref_repeat_kv, bugs=[B_TILE, B_TOKENS, B_MIXED]),
        # d_k = 4 differs from √d: dividing by √d, by d_k and by √d_k all give different numbers; N = 7 differs
        # from the 6 heads, so RoPE run over the head axis raises
        _attention_probe("attention", 24, 6, 2, 10000.0, 2, 7, gen),
        # one KV head (multi-query) and another base
        _attention_probe("attention_mqa", 16, 2, 1, 100.0, 1, 5, gen),
        # eps and base far from the defaults: a value not passed on shows
        _block_probe("block", 16, 4, 2, 24, 0.1, 500.0, 2, 5, 0.5, gen, BLOCK_BUGS + [B_BLOCK_BASE]),
        # the defaults, on small inputs where eps = 1e-6 and 1e-5 differ
        _block_probe("block_defaults", 16, 4, 2, 24, 1e-6, 10000.0, 1, 6, 0.003, gen, block_defaults),
    ]
