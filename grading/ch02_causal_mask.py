"""Hidden tests of ch02_causal_mask: causal_mask, apply_mask,
causal_self_attention and the question on the mask-off weight matrix."""
from __future__ import annotations

import math

import torch

from helpers.i18n import t

from .cases import EXACT, LOOSE, Case, Check, Earlier, on_its_own, passes, same
from .core import (
    ATTENTION_FAMILY,
    B_WEIGHTS_DTYPE,
    Bug,
    GradingFailure,
    Raises,
    call,
    close,
    failure,
    passed,
    seeded,
    show,
)
from .probes import Probe

NEG = float("-inf")


# ---------------------------------------------------------------- references (float64)

def ref_mask(n: int) -> torch.Tensor:
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    return j <= i


def ref_softmax(s: torch.Tensor) -> torch.Tensor:
    s = s.to(torch.float64)
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    return e / e.sum(-1, keepdim=True)


def ref_apply(scores, mask):
    return torch.where(mask.bool(), scores.to(torch.float64), torch.full((), NEG, dtype=torch.float64))


def ref_attention(x, w_q, w_k, w_v):
    x, w_q, w_k, w_v = (a.to(torch.float64) for a in (x, w_q, w_k, w_v))
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = torch.einsum("...id,...jd->...ij", q, k) / math.sqrt(q.shape[-1])
    w = ref_softmax(ref_apply(s, ref_mask(x.shape[-2])))
    return torch.einsum("...ij,...jd->...id", w, v), w


# ---------------------------------------------------------------- known bugs

MASK_BUGS = {
    "diag": Bug("mask_diagonal_masked",
                "对角线也被遮住了（用了 j < i 或 tril(..., diagonal=-1)）：每个位置应该能看到自己，条件是 j ≤ i。"
                "第一个 token 因此什么都看不到，整行变成 nan。",
                "the diagonal is masked too (j < i, or tril(..., diagonal=-1)): each position must see itself, "
                "the condition is j ≤ i. The first token then sees nothing and its row becomes nan."),
    "anti": Bug("mask_anti_causal",
                "保留的是上三角（triu，j ≥ i）：每个位置只能看自己和后面的 token，正好反了——这是在看未来。"
                "因果掩码是下三角（tril，j ≤ i）。",
                "you kept the upper triangle (triu, j ≥ i): each position sees itself and the tokens after it, "
                "the wrong way round — it looks into the future. The causal mask is the lower triangle "
                "(tril, j ≤ i)."),
    "inverted": Bug("mask_inverted",
                    "掩码的含义反了：True 应该表示“可以看”（j ≤ i），你的 True 在 j > i 的位置。",
                    "the mask is inverted: True must mean 'may attend' (j ≤ i); your True is where j > i."),
    "float": Bug("mask_float_not_bool",
                 "掩码是浮点数（例如 torch.tril(torch.ones(n, n))），不是布尔张量：它不能用 ~ 取反，也不能当索引或"
                 "masked_fill 的条件。加上 dtype=torch.bool，或者写 == 1。",
                 "the mask is a float tensor (e.g. torch.tril(torch.ones(n, n))), not a boolean one: it cannot be "
                 "negated with ~ or used as an index or a masked_fill condition. Add dtype=torch.bool, or compare "
                 "with == 1."),
    "int": Bug("mask_int_not_bool",
               "掩码是整数张量（例如 torch.ones(n, n, dtype=torch.long).tril()），不是布尔张量：~ 对整数是按位取反"
               "（1 变成 -2），当条件也不对。dtype 要是 torch.bool。",
               "the mask is an integer tensor (e.g. torch.ones(n, n, dtype=torch.long).tril()), not a boolean one: "
               "~ on integers flips bits (1 becomes -2), and it is no condition either. The dtype must be torch.bool."),
    "all": Bug("mask_all_true", "掩码全是 True：什么都没遮住。", "the mask is all True: nothing is hidden."),
    "dims": Bug("mask_extra_dims",
                "掩码多了前面的维度（例如 nanoGPT 那样 view(1, 1, n, n)）：题目要的是形状 (n, n)，"
                "批量维和头的维度交给广播，由调用者去处理。",
                "the mask has extra leading dimensions (a view(1, 1, n, n), as in nanoGPT): the exercise asks for "
                "shape (n, n); broadcasting takes care of the batch and head axes at the caller."),
    "fixed": Bug("mask_of_fixed_size",
                 "掩码是按一个固定大小事先建好再切片的（例如 tril(ones(64, 64))[:n, :n]）：n 比它大时形状就不对了。"
                 "题目要的是任何 n 的 (n, n) 掩码：每次按 n 现做。",
                 "the mask is built once at a fixed size and sliced (e.g. tril(ones(64, 64))[:n, :n]): for a larger n "
                 "the shape is wrong. The exercise asks for an (n, n) mask for any n: build it for the n at hand."),
    "default_device": Bug("mask_default_device_ignored",
                          "device=None 时掩码没有建在默认设备上（例如写了 device or 'cpu'，或者先在 numpy/CPU 上建好）："
                          "None 表示 torch 的默认设备，直接把 device=device 传给 torch.ones/torch.arange 就行。",
                          "with device=None the mask is not created on the default device (e.g. device or 'cpu', or "
                          "built in numpy / on the CPU first): None means torch's default device; just pass "
                          "device=device on to torch.ones / torch.arange."),
    "device": Bug("mask_ignores_device", "没有把 device 参数用上：掩码应该建在调用者要求的设备上（torch.ones(..., device=device)）。",
                  "the device argument is ignored: the mask must be created on the device the caller asks for "
                  "(torch.ones(..., device=device))."),
}

class _DeviceSpy(torch.overrides.TorchFunctionMode):
    """Notes whether a given device object reaches any torch call."""

    def __init__(self, device):
        super().__init__()
        self.device, self.seen = device, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for v in (*args, *kwargs.values()):
            if isinstance(v, (torch.device, str)) and str(v) == str(self.device):
                self.seen = True
        return func(*args, **kwargs)


MASK_SHAPES = [Bug(MASK_BUGS[key].key, MASK_BUGS[key].zh, MASK_BUGS[key].en, impl) for key, impl in (
    ("diag", lambda n: ref_mask(n).tril(-1)),
    ("anti", lambda n: ref_mask(n).T.clone()),
    ("inverted", lambda n: ~ref_mask(n)),
    ("all", lambda n: torch.ones(n, n, dtype=torch.bool)),
)]


def _honours_device(causal_mask) -> bool:
    """Cheap test first: did the device we passed reach a torch call? Only if not,
    the slow proof on the "meta" device (an answer that cannot run there is not judged on it)."""
    dev = torch.device("cpu")
    spy = _DeviceSpy(dev)
    try:
        with spy:
            causal_mask(3, device=dev)
    except Exception:  # noqa: BLE001
        spy.seen = False
    if spy.seen:
        return True
    try:
        out = causal_mask(4, device="meta")
    except Exception:  # noqa: BLE001
        return True
    return isinstance(out, torch.Tensor) and out.device.type == "meta"


def check_causal_mask(causal_mask) -> None:
    passed("causal_mask", _mask_checks(causal_mask))


LONG_N = 1030


def _mask_checks(causal_mask) -> int:
    what = "causal_mask"
    check = Check(what, causal_mask, reference=ref_mask, dtype_follows=None)
    for n in (1, 2, 5, 9):
        label = f"{what}({n})"
        got = check.call(n, label=label)
        extra = isinstance(got, torch.Tensor) and got.dim() > 2 and tuple(got.shape[-2:]) == (n, n) \
            and got.numel() == n * n
        out = check.tensor(label, got, (n, n), hint=t("掩码的形状是 (n, n)。", "the mask has shape (n, n)."),
                           bug=MASK_BUGS["dims"] if extra else None)
        if out.dtype != torch.bool:
            bug = (MASK_BUGS["float"] if out.is_floating_point() else MASK_BUGS["int"]) \
                if same(out, ref_mask(n), EXACT) else None
            raise check.fail(t(f"{label} 的 dtype", f"dtype of {label}"), "torch.bool", str(out.dtype), bug,
                             hint=t("True 表示可以看：掩码要用布尔张量。", "True means may attend: the mask must be boolean."))
        check.expect(label, out.cpu(), ref_mask(n), tol=EXACT, bugs=MASK_SHAPES, bug_args=(n,),
                     hint=t("第 i 行第 j 列为 True 当且仅当 j ≤ i。", "row i, column j is True exactly when j ≤ i."))
    # any n: longer than the sizes people build a mask at once and slice (64, 256, 512, 1024)
    label = f"{what}({LONG_N})"
    got = check.call(LONG_N, label=label)
    short = isinstance(got, torch.Tensor) and got.dim() == 2 and got.shape[0] < LONG_N
    out = check.tensor(label, got, (LONG_N, LONG_N), bug=MASK_BUGS["fixed"] if short else None)
    check.expect(label, out.cpu(), ref_mask(LONG_N), tol=EXACT)
    # device=None means the default device
    try:
        with torch.device("meta"):
            on_default = causal_mask(4)
    except Exception:  # noqa: BLE001 - an answer that cannot run on the meta device is not judged on it
        on_default = None
    if isinstance(on_default, torch.Tensor) and on_default.device.type != "meta":
        raise check.fail(t("在默认设备为 meta 时调用 (4)：掩码的设备", "(4) with meta as the default device: device of "
                           "the mask"), "meta", str(on_default.device), MASK_BUGS["default_device"])
    if not _honours_device(causal_mask):
        raise check.fail(t("(4, device='meta') 的设备", "device of (4, device='meta')"), "meta",
                         t("别的设备", "another device"), MASK_BUGS["device"])
    return check.n + 1


APPLY_BUGS = [
    Bug("apply_zero_fill", "被遮住的分数设成了 0 而不是 −∞：softmax 里 e⁰ = 1，被遮住的位置仍然分到权重。",
        "masked scores are set to 0 instead of −∞: inside softmax e⁰ = 1, so masked positions still get weight.",
        lambda s, m: s.masked_fill(~m, 0.0)),
    Bug("apply_mask_inverted", "掩码的含义反了：True 表示“可以看”，应该把 False 的位置设为 −∞，你遮住的是 True 的位置。",
        "the mask is inverted: True means 'may attend', so the False positions get −∞; you masked the True ones.",
        lambda s, m: s.masked_fill(m, NEG)),
    Bug("apply_mask_ignored", "返回的分数没有任何变化：掩码没有起作用。注意 masked_fill 不是原地操作，要用它的返回值。",
        "the scores come back unchanged: the mask had no effect. Note that masked_fill is not in place: use "
        "what it returns.", lambda s, m: s.clone()),
    Bug("apply_softmax_inside", "apply_mask 只负责把不可以看的分数设为 −∞；你返回的是 softmax 之后的权重。",
        "apply_mask only sets the forbidden scores to −∞; you returned the weights after softmax.",
        lambda s, m: ref_softmax(s.masked_fill(~m, NEG))),
    Bug("apply_scores_shifted", "可以看的分数被改动了：你减去了每行的最大值（为了让 softmax 稳定）。这一步属于 softmax，"
        "apply_mask 只把不可以看的位置设成 −∞，其余的分数原样保留。",
        "the allowed scores were changed: you subtracted each row's maximum (for a stable softmax). That step belongs "
        "to softmax; apply_mask only sets the forbidden positions to −∞ and keeps the other scores as they are.",
        lambda s, m: (s.to(torch.float64) - s.to(torch.float64).amax(-1, keepdim=True)).masked_fill(~m, NEG)),
]

APPLY_IN_PLACE = Bug("apply_mask_in_place",
                     "apply_mask 改写了传入的 scores（masked_fill_ 或 scores[...] = ...）：题目要求返回一个新张量，"
                     "调用者的 scores 保持不变。用 masked_fill（不带下划线）或 torch.where。",
                     "apply_mask changed the scores it was given (masked_fill_ or scores[...] = ...): the exercise asks "
                     "for a new tensor, leaving the caller's scores as they were. Use masked_fill (no underscore) or "
                     "torch.where.")
APPLY_DTYPE = Bug("apply_mask_changes_dtype",
                  "apply_mask 改变了分数的 dtype（例如先 .float()，或 torch.where 里用了一个 float32 的张量，"
                  "像 torch.full(..., float('-inf'))）：题目要求 dtype 不变，float64 进来 float64 出去，float16 进来"
                  "也要 float16 出去。",
                  "apply_mask changes the dtype of the scores (a .float() first, or a float32 tensor inside "
                  "torch.where, such as torch.full(..., float('-inf'))): the exercise keeps the dtype, so float64 "
                  "scores come back as float64, and float16 as float16.")
INDEX_NO_BROADCAST = Bug("apply_index_does_not_broadcast",
                         "布尔掩码当下标用（scores[~mask] = ...）时不会广播：它的形状必须和 scores 完全相同。mask 只是能广播到 "
                         "scores 的形状，用 masked_fill 或 torch.where（它们会广播），或者先 mask.expand_as(scores)。",
                         "a boolean mask used as an index (scores[~mask] = ...) does not broadcast: it must have exactly "
                         "the scores' shape. The mask only broadcasts to it, so use masked_fill or torch.where (they "
                         "broadcast), or mask.expand_as(scores) first.")

HALF_OVERFLOW = Bug("apply_fill_overflows_half",
                    "填充值放不进 float16：float16 最大只到约 65504，-1e9 这样的数会溢出（masked_fill 因此报错）。"
                    "用 float('-inf')，或 torch.finfo(scores.dtype).min，它在每种 dtype 里都放得下。",
                    "the fill does not fit in float16: float16 stops at about 65504, so a number like -1e9 overflows "
                    "(and masked_fill raises). Use float('-inf'), or torch.finfo(scores.dtype).min, which fits every "
                    "dtype.")

FLOAT_HINTS = [(Raises(contains=(
    "only implemented on integer and Boolean", "only supported for integer and Boolean",
    "must be long, int, byte or bool", "only supports boolean masks", "condition to be a boolean")),
    MASK_BUGS["float"])]


def _masked_like_reference(check, label, out, scores, mask) -> None:
    """Allowed entries equal the scores (within float32 rounding); forbidden ones are
    so negative that softmax gives them exactly 0 (−∞ or, say, −1e9)."""
    exp = ref_apply(scores, mask)
    check.tensor(label, out, scores.shape, hint=t("返回的分数和输入的 scores 形状相同。",
                                                  "the result has the same shape as scores."))
    m = mask.expand(out.shape)
    o = out.detach().to(torch.float64)
    ok = (not torch.isnan(o).any() and same(o[m], scores.to(torch.float64)[m])
          and bool((ref_softmax(o)[~m] == 0).all()))
    if not ok:
        check.expect(label, out, exp, tol=EXACT, bugs=APPLY_BUGS, bug_args=(scores, mask),
                     hint=t("mask 为 False 的位置设成 −∞，其余位置保持不变。",
                            "set the positions where mask is False to −∞ and leave the others unchanged."))
    if out.dtype != scores.dtype:
        raise check.fail(t(f"{label}：dtype", f"{label}: dtype"), str(scores.dtype), str(out.dtype), APPLY_DTYPE)
    check.n += 1


RESHAPED = Bug("apply_mask_reshaped",
               "掩码被 view/reshape 成了 scores 的形状：只有元素个数相同时才行。mask 只是能广播到 scores 的形状"
               "（例如 (n, n) 的掩码配 (B, h, n, n) 的分数），交给 masked_fill 或 torch.where 去广播，或者用 expand_as。",
               "the mask is viewed or reshaped to the scores' shape, which only works when both hold as many "
               "numbers. The mask merely broadcasts to the scores (an (n, n) mask for (B, h, n, n) scores): let "
               "masked_fill or torch.where broadcast it, or use expand_as.")

APPLY_HINTS = FLOAT_HINTS + [(Raises(contains=("shape of the mask",), types=("IndexError",)), INDEX_NO_BROADCAST),
                             (Raises(contains=("is invalid for input of size",)), RESHAPED),
                             (Raises(contains=("without overflow",)), HALF_OVERFLOW)]


def check_apply_mask(apply_mask) -> None:
    passed("apply_mask", _apply_checks(apply_mask))


def _apply_checks(apply_mask) -> int:
    what = "apply_mask"
    check = Check(what, apply_mask, hints=APPLY_HINTS)
    gen = seeded(302)
    rand_mask = torch.rand(4, 6, generator=gen) > 0.5
    rand_mask[:, 0] = True
    cases = [
        (t("5×5 分数，因果掩码", "5×5 scores, causal mask"), torch.randn(5, 5, generator=gen), ref_mask(5)),
        (t("批量 (2, 3, 4, 4)，掩码 (4, 4) 广播", "batch (2, 3, 4, 4), mask (4, 4) broadcast"),
         torch.randn(2, 3, 4, 4, generator=gen), ref_mask(4)),
        (t("非方阵 4×6，随机掩码", "non-square 4×6, random mask"), torch.randn(4, 6, generator=gen) * 3, rand_mask),
        (t("float64 分数", "float64 scores"), torch.randn(2, 6, 6, generator=gen, dtype=torch.float64), ref_mask(6)),
        # half precision: a fill built apart from the scores (torch.full(..., -inf) is float32) changes the dtype
        (t("float16 分数", "float16 scores"), torch.randn(2, 5, 5, generator=gen).half(), ref_mask(5)),
        (t("bfloat16 分数", "bfloat16 scores"), torch.randn(3, 4, generator=gen).bfloat16(), ref_mask(4)[:3]),
    ]
    for label, scores, mask in cases:
        _masked_like_reference(check, label, check.call(scores, mask, label=label), scores, mask)
    scores = torch.randn(2, 5, 5, generator=gen)               # a new tensor: the caller's scores stay as they were
    given = scores.clone()
    label = t("之后调用者的 scores", "the caller's scores afterwards")
    call(apply_mask, given, ref_mask(5), what=f"{what}: {label}", hints=APPLY_HINTS)
    if not torch.equal(given, scores):
        raise check.fail(label, t("保持不变", "unchanged"), t("被改写了", "changed"), APPLY_IN_PLACE)
    return check.n + 1


def causal_mask_stand_in(n, device=None):
    """A correct causal_mask for a student's attention to call."""
    return ref_mask(n) if device is None else ref_mask(n).to(device)


def apply_mask_stand_in(scores, mask):
    """A correct apply_mask for a student's attention to call (keeps dtype and autograd)."""
    return scores.masked_fill(~mask.bool(), float("-inf"))


# each probe is the exercise's own hidden check: a stand-in comes in exactly when it lost its points
EARLIER = (Earlier("causal_mask", 1, passes(_mask_checks), causal_mask_stand_in),
           Earlier("apply_mask", 2, passes(_apply_checks), apply_mask_stand_in))


# ---------------------------------------------------------------- causal_self_attention

def _att_bug(mask_kind="causal", fill="-inf", scale="d_k", softmax_dim=-1, transpose_w=False):
    def impl(x, w_q, w_k, w_v):
        x, w_q, w_k, w_v = (a.to(torch.float64) for a in (x, w_q, w_k, w_v))
        if transpose_w:
            w_q, w_k, w_v = w_q.T, w_k.T, w_v.T
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        s = q @ k.transpose(-2, -1)
        s = s / {"d_k": math.sqrt(q.shape[-1]), "none": 1.0, "d_model": math.sqrt(x.shape[-1])}[scale]
        n = x.shape[-2]
        m = {"causal": ref_mask(n), "diag": ref_mask(n).tril(-1), "anti": ref_mask(n).T,
             "inverted": ~ref_mask(n), "none": torch.ones(n, n, dtype=torch.bool)}[mask_kind]
        if fill == "after":
            w = ref_softmax(s).masked_fill(~m, 0.0)
        else:
            s = s.masked_fill(~m, NEG if fill == "-inf" else 0.0)
            w = ref_softmax(s) if softmax_dim == -1 else torch.softmax(s, dim=-2)
        return w @ v, w
    return impl


ATTENTION_BUGS = [
    Bug("attention_mask_ignored", "没有用因果掩码：每个位置都看到了后面的 token（未来），这是双向注意力，不是 GPT。",
        "the causal mask is not used: every position sees the tokens after it (the future); that is "
        "bidirectional attention, not GPT.", _att_bug("none")),
    Bug("attention_no_scaling", "分数没有除以 √d_k（d_k = w_q 的列数）。", "the scores are not divided by √d_k "
        "(d_k = the number of columns of w_q).", _att_bug(scale="none")),
    Bug("attention_scaled_by_d_model", "除的是 √d（x 的最后一维），应该是 √d_k（q 的最后一维，即 w_q 的列数）。",
        "you divided by √d (x's last dimension); it must be √d_k (q's last dimension, the columns of w_q).",
        _att_bug(scale="d_model")),
    Bug("attention_mask_after_softmax", "在 softmax 之后才把被遮住的权重置 0：每行加起来不再是 1。掩码要在 softmax 之前"
        "（把分数设为 −∞）。", "the mask is applied after softmax (weights set to 0): rows no longer add up to 1. "
        "Mask the scores with −∞ before softmax.", _att_bug(fill="after")),
    Bug("attention_mask_zero_fill", "被遮住的分数设成了 0 而不是 −∞：e⁰ = 1，未来的 token 仍然分到权重。",
        "masked scores are set to 0 instead of −∞: e⁰ = 1, so future tokens still get weight.", _att_bug(fill="0")),
    Bug("attention_diagonal_masked", MASK_BUGS["diag"].zh, MASK_BUGS["diag"].en, _att_bug("diag")),
    Bug("attention_anti_causal", MASK_BUGS["anti"].zh, MASK_BUGS["anti"].en, _att_bug("anti")),
    Bug("attention_mask_inverted", MASK_BUGS["inverted"].zh, MASK_BUGS["inverted"].en, _att_bug("inverted")),
    Bug("attention_softmax_wrong_dim", "softmax 沿错误的维度（dim=-2）：每个 query 的一行权重（dim=-1）要加起来等于 1。",
        "softmax runs over the wrong dimension (dim=-2): each query's row of weights (dim=-1) must add up to 1.",
        _att_bug(softmax_dim=-2)),
    Bug("attention_weights_transposed", "投影写反了：Q = X·W_Q（x @ w_q），不是 x @ w_q.T。",
        "the projection is the wrong way round: Q = X·W_Q (x @ w_q), not x @ w_q.T.", _att_bug(transpose_w=True)),
]

B_SWAPPED = Bug("attention_returns_swapped",
                "返回的顺序反了：题目要的是 (out, weights)，你返回的是 (weights, out)。",
                "the results come back in the wrong order: the exercise asks for (out, weights); you return "
                "(weights, out).", lambda *args: tuple(reversed(ref_attention(*args))))
B_BATCH = Bug("attention_fixed_batch_dims",
              "只在恰好一个批量维 (B, n, d) 时才算得对（例如 x.shape[1] 或 x.size(1) 当成了 n，或用了 transpose(1, 2)、"
              "bmm）：题目要求前面的批量维可以任意多，也可以没有。n 是 x.shape[-2]，转置用 transpose(-2, -1)。",
              "it only works with exactly one batch dimension (B, n, d) (x.shape[1] or x.size(1) taken as n, or "
              "transpose(1, 2), bmm): the exercise allows any number of leading batch dimensions, or none. n is "
              "x.shape[-2]; transpose with transpose(-2, -1).")
OUT_BUGS = [
    Bug("attention_out_weights_transposed", "out 用的是转置了的权重（weights 的转置 @ v）：第 i 行的输出应该按第 i 行的权重"
        "（第 i 个 query 看各个 key 的权重）混合各个值，out = weights @ v。",
        "out uses the weights transposed (weightsᵀ @ v): output row i mixes the values with row i of the weights "
        "(how much query i looks at each key), out = weights @ v.",
        lambda x, w_q, w_k, w_v: (ref_attention(x, w_q, w_k, w_v)[1].mT @ (x.to(torch.float64) @ w_v.to(torch.float64)),
                                  ref_attention(x, w_q, w_k, w_v)[1])),
    Bug("attention_value_from_w_k", "值是用 w_k 投影的：V = X·W_V，要用 w_v（三个投影各用自己的矩阵）。",
        "the values are projected with w_k: V = X·W_V uses w_v (each projection has its own matrix).",
        lambda x, w_q, w_k, w_v: (ref_attention(x, w_q, w_k, w_v)[1] @ (x.to(torch.float64) @ w_k.to(torch.float64)),
                                  ref_attention(x, w_q, w_k, w_v)[1])),
    Bug("attention_out_from_x", "out = weights @ x：乘的是输入 x，不是值 v = x @ w_v。",
        "out = weights @ x: you multiplied the input x, not the values v = x @ w_v.",
        lambda x, w_q, w_k, w_v: (ref_attention(x, w_q, w_k, w_v)[1] @ x.to(torch.float64),
                                  ref_attention(x, w_q, w_k, w_v)[1])),
]

B_ONE = Bug("attention_returns_one", "只返回了一个张量：题目要的是 (out, weights) 两个，后面的热力图要用 weights。",
            "only one tensor comes back: the exercise asks for the two (out, weights); the heatmaps later need the "
            "weights.", lambda *args: ref_attention(*args)[0])

LEAK = Bug("attention_sees_future", "第 i 个输出依赖了 i 之后的 token：因果性被破坏。",
           "output i depends on tokens after i: causality is broken.")


def _works_on_one_batch_dim(check, args) -> bool:
    """Whether the answer is right once x is reshaped to exactly one batch dimension (B, n, d)."""
    x, *ws = args
    x3 = x.reshape(-1, *x.shape[-2:])
    try:
        out, w = check.call(x3, *ws, label="")
        ref_out, ref_w = ref_attention(x3, *ws)
        return same(w, ref_w) and same(out, ref_out)
    except Exception:  # noqa: BLE001 - it does not work that way either
        return False


def _pair(check, args, label):
    try:
        result = check.call(*args, label=label)
    except GradingFailure as err:
        said = str(err)
        if args[0].dim() == 3 or FLOAT_HINTS[0][1].key in said or not _works_on_one_batch_dim(check, args):
            raise
        kept = [line for line in said.splitlines() if not line.lstrip().startswith(("诊断：", "Diagnosis:"))]
        raise GradingFailure("\n".join(kept) + "\n" + t("  诊断：", "  Diagnosis: ") + B_BATCH.describe()) from None
    if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(r, torch.Tensor) for r in result)):
        raise check.fail(label, t("(out, weights) 两个张量组成的元组", "a tuple (out, weights) of two tensors"),
                         type(result).__name__, B_ONE if isinstance(result, torch.Tensor) else None)
    return result


def _attention_cases():
    from helpers.ch02_causal_mask import calculator

    gen = seeded(303)
    r = lambda *shape, scale=1.0, dtype=torch.float32: torch.randn(*shape, generator=gen, dtype=dtype) * scale  # noqa: E731
    f64 = torch.float64
    return [
        Case(t("本章计算器的 5 个 token（d = 4）", "the chapter's calculator, 5 tokens (d = 4)"),
             tuple(torch.tensor(a, dtype=torch.float32) for a in calculator.inputs())),
        Case(t("批量 (2, 6, 8)，d_k = 4，d_v = 3", "batch (2, 6, 8), d_k = 4, d_v = 3"), (r(2, 6, 8), r(8, 4), r(8, 4), r(8, 3))),
        Case(t("两个批量维 (2, 3, 5, 6)，d_k = 8", "two batch dims (2, 3, 5, 6), d_k = 8"),
             (r(2, 3, 5, 6), r(6, 8), r(6, 8), r(6, 6))),
        Case(t("只有 1 个 token", "a single token"), (r(1, 4), r(4, 4), r(4, 4), r(4, 2))),
        # scores of several hundred: float32 rounding of the scores alone moves the weights by ~1e-4
        Case(t("很大的输入（放大 20 倍）", "large inputs (scaled by 20)"), (r(7, 4, scale=20.0), r(4, 4), r(4, 4), r(4, 4)),
             tol=LOOSE),
        Case(t("float64 输入", "float64 inputs"),
             (r(3, 6, 8, dtype=f64), r(8, 5, dtype=f64), r(8, 5, dtype=f64), r(8, 4, dtype=f64))),
    ]


def _first_row_exact(check, label, w):
    first = torch.zeros(w.shape[-1], dtype=w.dtype)
    first[0] = 1
    if not torch.equal(w[..., 0, :], first.expand_as(w[..., 0, :])):
        raise check.fail(t(f"{label}：第一行权重（应精确等于 [1, 0, …]）", f"{label}: first row of weights (exactly [1, 0, …])"),
                         show(first), show(w[..., 0, :]),
                         hint=t("第一个 token 只能看自己；被遮住的位置要精确为 0。",
                                "the first token may only see itself; masked positions must be exactly 0."))


def _causality(check, seed, dtype):
    """Changing any token after position i leaves output i unchanged, to the bit."""
    g = seeded(400 + seed)
    x = torch.randn(2, 7, 8, generator=g, dtype=dtype)
    ws = [torch.randn(8, 6, generator=g, dtype=dtype) for _ in range(3)]
    label = t("因果性（改动位置 i 之后的 token）", "causality (changing the tokens after position i)")
    out, w = _pair(check, (x, *ws), label)
    for i in range(x.shape[-2] - 1):
        x2 = x.clone()
        x2[..., i + 1:, :] = torch.randn(x2[..., i + 1:, :].shape, generator=g, dtype=dtype) * 3
        out2, w2 = _pair(check, (x2, *ws), label)
        check.n += 1
        if torch.equal(out[..., :i + 1, :], out2[..., :i + 1, :]) and torch.equal(w[..., :i + 1, :], w2[..., :i + 1, :]):
            continue
        tiny = close(out[..., :i + 1, :], out2[..., :i + 1, :], atol=1e-5, rtol=1e-5)
        extra = t("（差别很小但不是逐位相同：第 i 行的计算用到了未来位置的数值，例如减去了整个矩阵的最大值或均值。）",
                  " (the difference is tiny but not zero: row i's computation used values of future "
                  "positions, e.g. subtracting the maximum or mean of the whole matrix.)") if tiny else ""
        raise check.fail(t(f"{label}：改动位置 {i + 1} 起的 token 后，输出的第 0…{i} 行",
                           f"{label}: output rows 0…{i} after changing the tokens from position {i + 1} on"),
                         t("逐位不变", "unchanged, bit for bit"), t("变了", "changed") + extra, LEAK)


def check_causal_self_attention(causal_self_attention) -> None:
    what = "causal_self_attention"
    with on_its_own(causal_self_attention, EARLIER):
        passed(what, _attention_checks(what, causal_self_attention))


def _attention_checks(what, causal_self_attention) -> int:
    check = Check(what, causal_self_attention, forbid=ATTENTION_FAMILY, hints=FLOAT_HINTS + ATTENTION_ERRORS)
    for c in _attention_cases():
        out, w = _pair(check, c.args, c.label)
        exp_out, exp_w = ref_attention(*c.args)
        if exp_out.shape != exp_w.shape and tuple(out.shape) == tuple(exp_w.shape) \
                and tuple(w.shape) == tuple(exp_out.shape):
            raise check.fail(t(f"{c.label}：返回值的顺序", f"{c.label}: order of the results"), "(out, weights)",
                             "(weights, out)", B_SWAPPED)
        if c.args[0].dim() != 3 and not same(w, exp_w, c.tol) and _works_on_one_batch_dim(check, c.args):
            raise check.fail(t(f"{c.label}：注意力权重", f"{c.label}: attention weights"), show(exp_w), show(w), B_BATCH)
        check.tensor(t(f"{c.label}：weights", f"{c.label}: weights"), w, exp_w.shape,
                     hint=t("weights 的形状是 (..., n, n)。", "weights have shape (..., n, n)."))
        check.expect(t(f"{c.label}：注意力权重", f"{c.label}: attention weights"), w, exp_w, tol=c.tol,
                     bugs=ATTENTION_BUGS, bug_args=c.args, part=lambda o: o[1], count=False)
        if w.dtype != c.args[0].dtype:
            raise check.fail(t(f"{c.label}：注意力权重的 dtype", f"{c.label}: dtype of the attention weights"),
                             str(c.args[0].dtype), str(w.dtype), B_WEIGHTS_DTYPE)
        check.expect(t(f"{c.label}：输出 out", f"{c.label}: output out"), out, exp_out, tol=c.tol, dtype=c.args[0].dtype,
                     bugs=OUT_BUGS, bug_args=c.args, part=lambda o: o[0],
                     hint=t("权重已经对了：out = weights @ v，v = x @ w_v。",
                            "the weights are right: out = weights @ v with v = x @ w_v."))
        _first_row_exact(check, c.label, w)
    for seed, dtype in ((1, torch.float32), (2, torch.float32), (3, torch.float64)):
        _causality(check, seed, dtype)
    _any_length(check)
    return check.n


B_FIXED = Bug("attention_mask_of_fixed_size",
              "掩码是按一个固定长度事先建好再切片的（例如 causal_mask(64)[:n, :n]）：输入比它长时就出错。"
              "x 的长度 n 可以是任意的：按 x.shape[-2] 现做掩码，causal_mask(n, device=x.device)。",
              "the mask is built once at a fixed length and sliced (e.g. causal_mask(64)[:n, :n]): an input longer "
              "than that fails. The length n of x can be anything: build the mask for x.shape[-2], "
              "causal_mask(n, device=x.device).")


ATTENTION_ERRORS = [(Raises(contains=("must match the size of tensor b",), types=("RuntimeError",)), B_FIXED)]


def _any_length(check) -> None:
    """Any n: an input longer than the lengths people build a mask at once and slice."""
    g = seeded(404)
    x = torch.randn(1, LONG_N, 4, generator=g, dtype=torch.float64)
    ws = [torch.randn(4, 4, generator=g, dtype=torch.float64) for _ in range(2)] + \
        [torch.randn(4, 2, generator=g, dtype=torch.float64)]
    label = t(f"很长的输入 (1, {LONG_N}, 4)", f"a long input (1, {LONG_N}, 4)")
    try:
        out, w = _pair(check, (x, *ws), label)
    except GradingFailure as err:
        kept = [line for line in str(err).splitlines() if not line.lstrip().startswith(("诊断：", "Diagnosis:"))]
        raise GradingFailure("\n".join(kept) + "\n" + t("  诊断：", "  Diagnosis: ") + B_FIXED.describe()) from None
    exp_out, exp_w = ref_attention(x, *ws)
    check.tensor(t(f"{label}：weights", f"{label}: weights"), w, exp_w.shape, bug=B_FIXED)
    check.expect(t(f"{label}：输出 out", f"{label}: output out"), out, exp_out, dtype=x.dtype,
                 hint=t("短的输入都对，长的不对：掩码是不是按固定长度建的？",
                        "short inputs are right and a long one is not: is the mask built at a fixed length?"))


# ---------------------------------------------------------------- the mask-off question

MASK_OFF_KEY = "B"
_CHOICE_WHY = {
    "A": ("关掉掩码后右上三角不再是 −∞，权重矩阵不会保持下三角。",
          "with the mask off the upper-right triangle is no longer −∞, so the weights do not stay lower-triangular."),
    "C": ("0 权重只来自掩码的 −∞：关掉掩码后 softmax 的每个权重都大于 0，而每行照样加起来等于 1。",
          "zero weights come only from the mask's −∞: with it off every softmax weight is above 0, and each row "
          "still adds up to 1."),
    "D": ("每个 token 并不只看自己：关掉掩码后它能看整句话，权重分给所有 5 个 token。",
          "a token does not see only itself: with the mask off it sees the whole sentence and spreads its weight "
          "over all 5 tokens."),
}


ZERO_COUNT_BUGS = {
    78: Bug("zeros_counted_allowed", "数的是可以看的位置（j ≤ i，含对角线）：n(n+1)/2 = 78。精确为 0 的是被遮住的 j > i，"
            "第 i 行有 n − 1 − i 个，合计 n(n−1)/2。",
            "you counted the allowed positions (j ≤ i, diagonal included): n(n+1)/2 = 78. The exact zeros are the "
            "masked j > i, n − 1 − i in row i, n(n−1)/2 in all."),
    132: Bug("zeros_both_triangles", "数了两个三角形（n² − n = 132）：因果掩码只遮住右上三角 j > i，合计 n(n−1)/2。",
             "you counted both triangles (n² − n = 132): the causal mask hides only the upper-right j > i, "
             "n(n−1)/2 in all."),
    144: Bug("zeros_whole_matrix", "数的是整个矩阵的元素个数 n² = 144：只有被遮住的 j > i 才是 0，合计 n(n−1)/2。",
             "you counted every entry, n² = 144: only the masked j > i are 0, n(n−1)/2 in all."),
}
ZERO_OFF_BUG = Bug("zeros_without_mask", "关掉掩码后没有 −∞ 了，而 e^x > 0 对每个有限的 x 都成立：一个精确的 0 也没有。",
                   "with the mask off there is no −∞ left, and e^x > 0 for every finite x: not a single exact 0.")


def _count_bug(want, got):
    try:
        got = float(got)
    except Exception:  # noqa: BLE001
        return None
    if want == 0:
        return ZERO_OFF_BUG
    return ZERO_COUNT_BUGS.get(int(got)) if got == int(got) else None


def check_mask_off(answers) -> None:
    """``answers`` is a function returning (mask_off_choice, n_zeros_mask_on,
    n_zeros_mask_off), so a missing name fails here with a message, not in the cell."""
    what = t("掩码关闭时的权重矩阵", "the weight matrix with the mask off")
    try:
        choice, zeros_on, zeros_off = answers()
    except NameError as exc:
        raise GradingFailure(t(f"{what}：还没有回答（{exc}）。", f"{what}: not answered yet ({exc}).")) from None
    c = str(choice).strip().upper().strip("()（）.。")
    if c not in "ABCD" or len(c) != 1:
        raise GradingFailure(t(f"{what}：mask_off_choice 应该是 'A'、'B'、'C' 或 'D' 之一，实际是 {choice!r}。",
                               f"{what}: mask_off_choice must be one of 'A', 'B', 'C', 'D', got {choice!r}."))
    if c != MASK_OFF_KEY:
        zh, en = _CHOICE_WHY[c]
        bug = Bug(f"mask_off_choice_{c}", zh, en)
        raise GradingFailure(t(f"{what}：选项 {c} 不对。", f"{what}: option {c} is wrong.") + "\n"
                             + t("  诊断：", "  Diagnosis: ") + bug.describe())
    for name, got, want in (("n_zeros_mask_on", zeros_on, 66), ("n_zeros_mask_off", zeros_off, 0)):
        try:
            ok = float(got) == want
        except Exception:
            ok = False
        if not ok:
            hint = (t("数一数 j > i 的位置：第 i 行有 n − 1 − i 个，合计 n(n−1)/2；5 个 token 时是 10。",
                      "count the positions with j > i: row i has n − 1 − i of them, n(n−1)/2 in all; 10 for 5 tokens.")
                    if want else t("没有掩码就没有 −∞，e^x > 0 对每个有限的 x 都成立。",
                                   "without the mask there is no −∞, and e^x > 0 for every finite x."))
            raise failure(f"{what}: {name}", str(want), repr(got), bug=_count_bug(want, got), hint=hint)
    passed(what, 3)


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)

# (a size mismatch in attention is not shown as a fixed-size mask: x.size(1) taken as n gives it too)
# k.transpose(1, 2) on a single sequence (T, d): the axes of a batch assumed
BATCH_HINTS = [(Raises(contains=("Dimension out of range",), line=("transpose(1,2)", "transpose(2,1)")), B_BATCH)]
ERRORS = {"apply_mask": APPLY_HINTS, "causal_self_attention": FLOAT_HINTS + BATCH_HINTS}


def _calculator_inputs():
    from helpers.ch02_causal_mask import calculator
    return tuple(torch.tensor(a, dtype=torch.float32) for a in calculator.inputs())


def probes() -> list[Probe]:
    dims = Bug(MASK_BUGS["dims"].key, MASK_BUGS["dims"].zh, MASK_BUGS["dims"].en, lambda n: ref_mask(n).view(1, 1, n, n))
    gen = seeded(205)
    r = lambda *shape: torch.randn(*shape, generator=gen).round(decimals=2)  # noqa: E731
    scores = torch.tensor([[0.0, 1.0, 2.0, -1.0], [3.0, 4.0, 5.0, 0.5], [6.0, 7.0, 8.0, 2.0]])
    allowed = torch.tensor([[True, False, False, False], [True, True, False, False], [True, True, True, False]])
    return [
        Probe("mask", args=(5,), reference=ref_mask, bugs=MASK_SHAPES + [dims]),
        # softmax of the masked scores: -inf and a large negative number such as -1e9 give the same weights
        Probe("masked_softmax", args=(scores, allowed), reference=lambda s, m: ref_softmax(ref_apply(s, m)),
              bugs=APPLY_BUGS, run_bug=lambda bug: ref_softmax(bug.impl(scores, allowed))),
        Probe("calculator", args=_calculator_inputs(), reference=ref_attention, parts=("out", "weights"),
              bugs=ATTENTION_BUGS + OUT_BUGS + [B_SWAPPED, B_ONE]),
        # a batch, and d_k (4) apart from d (8) and d_v (3): √d and √d_k differ here
        Probe("batch", args=(r(2, 6, 8), r(8, 4), r(8, 4), r(8, 3)), reference=ref_attention, parts=("out", "weights"),
              bugs=ATTENTION_BUGS + OUT_BUGS + [B_SWAPPED, B_ONE]),
    ]
