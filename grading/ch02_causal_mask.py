"""Hidden tests of ch02_causal_mask: causal_mask, apply_mask,
causal_self_attention and the question on the mask-off weight matrix."""
from __future__ import annotations

import math

import torch

from helpers.i18n import t

from .core import ATTENTION_FAMILY, Bug, GradingFailure, call, close, diagnose, failure, forbidden, passed, seeded, show

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
    "all": Bug("mask_all_true", "掩码全是 True：什么都没遮住。", "the mask is all True: nothing is hidden."),
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


_MASK_IMPLS = {
    "diag": lambda n: ref_mask(n).tril(-1),
    "anti": lambda n: ref_mask(n).T.clone(),
    "inverted": lambda n: ~ref_mask(n),
    "all": lambda n: torch.ones(n, n, dtype=torch.bool),
}


def check_causal_mask(causal_mask) -> None:
    what = "causal_mask"
    n_checks = 0
    for n in (1, 2, 5, 9):
        label = f"{what}({n})"
        out = call(causal_mask, n, what=label)
        n_checks += 1
        exp = ref_mask(n)
        if not isinstance(out, torch.Tensor):
            raise failure(label, t("布尔张量", "a boolean tensor"), type(out).__name__)
        if tuple(out.shape) != (n, n):
            raise failure(t(f"{label} 的形状", f"shape of {label}"), str((n, n)), str(tuple(out.shape)))
        if out.dtype != torch.bool:
            bug = MASK_BUGS["float"] if close(out, exp.double()) else None
            raise failure(t(f"{label} 的 dtype", f"dtype of {label}"), "torch.bool", str(out.dtype), bug,
                          hint=t("True 表示可以看：掩码要用布尔张量。", "True means may attend: the mask must be boolean."))
        if not torch.equal(out.cpu(), exp):
            bug = next((MASK_BUGS[k] for k, f in _MASK_IMPLS.items() if torch.equal(out.cpu(), f(n))), None)
            raise failure(label, show(exp.int(), 12), show(out.int(), 12), bug,
                          hint=t("第 i 行第 j 列为 True 当且仅当 j ≤ i。", "row i, column j is True exactly when j ≤ i."))
    # the device argument must be honoured. Cheap test first: did the device we
    # passed reach a torch call? Only if not, the slow proof on the "meta" device.
    n_checks += 1
    dev = torch.device("cpu")
    spy = _DeviceSpy(dev)
    try:
        with spy:
            causal_mask(3, device=dev)
    except Exception:
        spy.seen = False
    if not spy.seen:
        try:
            out = causal_mask(4, device="meta")
        except Exception:
            out = None  # an implementation that cannot run on meta is not judged on it
        if out is not None and (not isinstance(out, torch.Tensor) or out.device.type != "meta"):
            got = out.device.type if isinstance(out, torch.Tensor) else type(out).__name__
            raise failure(t(f"{what}(4, device='meta') 的设备", f"device of {what}(4, device='meta')"), "meta", got,
                          MASK_BUGS["device"])
    passed(what, n_checks)


APPLY_BUGS = [
    Bug("apply_zero_fill", "被遮住的分数设成了 0 而不是 −∞：softmax 里 e⁰ = 1，被遮住的位置仍然分到权重。",
        "masked scores are set to 0 instead of −∞: inside softmax e⁰ = 1, so masked positions still get weight.",
        lambda s, m: s.masked_fill(~m, 0.0)),
    Bug("apply_mask_inverted", "掩码的含义反了：True 表示“可以看”，应该把 False 的位置设为 −∞，你遮住的是 True 的位置。",
        "the mask is inverted: True means 'may attend', so the False positions get −∞; you masked the True ones.",
        lambda s, m: s.masked_fill(m, NEG)),
    Bug("apply_mask_ignored", "返回的分数没有任何变化：掩码没有起作用。注意 masked_fill 不是原地操作，要用它的返回值"
        "（或者用 masked_fill_）。",
        "the scores come back unchanged: the mask had no effect. Note that masked_fill is not in place: use "
        "what it returns (or masked_fill_).", lambda s, m: s.clone()),
    Bug("apply_softmax_inside", "apply_mask 只负责把不可以看的分数设为 −∞；你返回的是 softmax 之后的权重。",
        "apply_mask only sets the forbidden scores to −∞; you returned the weights after softmax.",
        lambda s, m: ref_softmax(s.masked_fill(~m, NEG))),
]

FLOAT_HINTS = [(lambda exc, line: any(p in str(exc) for p in (
    "only implemented on integer and Boolean", "only supported for integer and Boolean",
    "must be long, int, byte or bool", "only supports boolean masks", "condition to be a boolean")),
    MASK_BUGS["float"])]


def _same_after_softmax(out, scores, mask) -> bool:
    """Allowed entries unchanged; forbidden ones so negative that softmax gives them 0."""
    if not isinstance(out, torch.Tensor) or out.shape != scores.shape or torch.isnan(out).any():
        return False
    o = out.detach().to(torch.float64)
    m = mask.expand(o.shape)
    if not torch.equal(o[m], scores.to(torch.float64)[m]):
        return False
    w, exp = ref_softmax(o), ref_softmax(ref_apply(scores, mask))
    return bool((w[~m] < 1e-12).all()) and close(w, exp, atol=1e-9, rtol=1e-9)


def check_apply_mask(apply_mask) -> None:
    what = "apply_mask"
    gen = seeded(302)
    n_checks = 0
    rand_mask = torch.rand(4, 6, generator=gen) > 0.5
    rand_mask[:, 0] = True
    cases = [
        (t("5×5 分数，因果掩码", "5×5 scores, causal mask"), torch.randn(5, 5, generator=gen), ref_mask(5)),
        (t("批量 (2, 3, 4, 4)，掩码 (4, 4) 广播", "batch (2, 3, 4, 4), mask (4, 4) broadcast"),
         torch.randn(2, 3, 4, 4, generator=gen), ref_mask(4)),
        (t("非方阵 4×6，随机掩码", "non-square 4×6, random mask"), torch.randn(4, 6, generator=gen) * 3, rand_mask),
        (t("float64 分数", "float64 scores"), torch.randn(2, 6, 6, generator=gen, dtype=torch.float64), ref_mask(6)),
    ]
    for label, scores, mask in cases:
        full = f"{what}: {label}"
        out = call(apply_mask, scores.clone(), mask.clone(), what=full, hints=FLOAT_HINTS)
        n_checks += 1
        exp = ref_apply(scores, mask)
        if isinstance(out, torch.Tensor) and tuple(out.shape) != tuple(scores.shape):
            raise failure(t(f"{full}：形状", f"{full}: shape"), str(tuple(scores.shape)), str(tuple(out.shape)),
                          hint=t("返回的分数和输入的 scores 形状相同。", "the result has the same shape as scores."))
        if not _same_after_softmax(out, scores, mask):
            bug = diagnose(out, APPLY_BUGS, scores.clone(), mask, expected=exp) if isinstance(out, torch.Tensor) else None
            raise failure(full, show(exp), show(out), bug,
                          hint=t("mask 为 False 的位置设成 −∞，其余位置保持不变。",
                                 "set the positions where mask is False to −∞ and leave the others unchanged."))
        if out.dtype != scores.dtype:
            raise failure(t(f"{full}：dtype", f"{full}: dtype"), str(scores.dtype), str(out.dtype))
    passed(what, n_checks)


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

LEAK = Bug("attention_sees_future", "第 i 个输出依赖了 i 之后的 token：因果性被破坏。",
           "output i depends on tokens after i: causality is broken.")


def _outputs(result, label):
    if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(r, torch.Tensor) for r in result)):
        raise GradingFailure(t(f"{label}：应返回 (out, weights) 两个张量组成的元组，实际得到 {type(result).__name__}。",
                               f"{label}: expected a tuple (out, weights) of two tensors, got {type(result).__name__}."))
    return result


def _run(fn, args, label):
    with forbidden(ATTENTION_FAMILY, "causal_self_attention"):
        return _outputs(call(fn, *(a.clone() for a in args), what=label, hints=FLOAT_HINTS), label)


def check_causal_self_attention(causal_self_attention) -> None:
    from helpers.ch02_causal_mask import calculator

    what = "causal_self_attention"
    gen = seeded(303)
    n_checks = 0
    r = lambda *shape, scale=1.0, dtype=torch.float32: torch.randn(*shape, generator=gen, dtype=dtype) * scale  # noqa: E731
    x0, wq0, wk0, wv0 = (torch.tensor(a, dtype=torch.float32) for a in calculator.inputs())
    cases = [
        (t("本章计算器的 5 个 token（d = 4）", "the chapter's calculator, 5 tokens (d = 4)"), (x0, wq0, wk0, wv0), 1e-5),
        (t("批量 (2, 6, 8)，d_k = 4，d_v = 3", "batch (2, 6, 8), d_k = 4, d_v = 3"),
         (r(2, 6, 8), r(8, 4), r(8, 4), r(8, 3)), 1e-5),
        (t("两个批量维 (2, 3, 5, 6)，d_k = 8", "two batch dims (2, 3, 5, 6), d_k = 8"),
         (r(2, 3, 5, 6), r(6, 8), r(6, 8), r(6, 6)), 1e-5),
        (t("只有 1 个 token", "a single token"), (r(1, 4), r(4, 4), r(4, 4), r(4, 2)), 1e-5),
        (t("很大的输入（放大 20 倍）", "large inputs (scaled by 20)"), (r(7, 4, scale=20.0), r(4, 4), r(4, 4), r(4, 4)),
         1e-4),
        (t("float64，与独立参考实现严格比较", "float64, compared tightly with an independent reference"),
         (r(3, 6, 8, dtype=torch.float64), r(8, 5, dtype=torch.float64), r(8, 5, dtype=torch.float64),
          r(8, 4, dtype=torch.float64)), 1e-10),
    ]
    for label, args, tol in cases:
        full = f"{what}: {label}"
        out, w = _run(causal_self_attention, args, full)
        exp_out, exp_w = ref_attention(*args)
        n_checks += 1
        if tuple(w.shape) != tuple(exp_w.shape):
            raise failure(t(f"{full}：weights 的形状", f"{full}: shape of weights"), str(tuple(exp_w.shape)),
                          str(tuple(w.shape)), hint=t("weights 的形状是 (..., n, n)。", "weights have shape (..., n, n)."))
        if not close(w, exp_w, atol=tol, rtol=tol):
            bug = diagnose(w, ATTENTION_BUGS, *args, expected=(exp_out, exp_w),
                           match=lambda s, b: close(s[1] if isinstance(s, tuple) else s, b[1], 1e-5, 1e-4))
            raise failure(t(f"{full}：注意力权重", f"{full}: attention weights"), show(exp_w, 10), show(w, 10), bug)
        if tuple(out.shape) != tuple(exp_out.shape) or not close(out, exp_out, atol=tol, rtol=tol):
            raise failure(t(f"{full}：输出 out", f"{full}: output out"), show(exp_out), show(out),
                          hint=t("权重已经对了：out = weights @ v，v = x @ w_v。",
                                 "the weights are right: out = weights @ v with v = x @ w_v."))
        if out.dtype != args[0].dtype:
            raise failure(t(f"{full}：输出的 dtype", f"{full}: dtype of the output"), str(args[0].dtype), str(out.dtype))
        # every row sums to 1, the first row is exactly [1, 0, ..., 0]
        if not close(w.sum(-1), torch.ones(w.shape[:-1], dtype=torch.float64), atol=1e-5, rtol=0):
            raise failure(t(f"{full}：每行权重之和", f"{full}: sum of each row of weights"), "1", show(w.sum(-1)))
        first = torch.zeros(w.shape[-1], dtype=w.dtype)
        first[0] = 1
        if not torch.equal(w[..., 0, :], first.expand_as(w[..., 0, :])):
            raise failure(t(f"{full}：第一行权重（应精确等于 [1, 0, …]）", f"{full}: first row of weights (exactly [1, 0, …])"),
                          show(first), show(w[..., 0, :]),
                          hint=t("第一个 token 只能看自己；被遮住的位置要精确为 0。",
                                 "the first token may only see itself; masked positions must be exactly 0."))
    # the property: changing any token after position i leaves output i unchanged, to the bit
    for seed, dtype in ((1, torch.float32), (2, torch.float32), (3, torch.float64)):
        g = seeded(400 + seed)
        x = torch.randn(2, 7, 8, generator=g, dtype=dtype)
        ws = [torch.randn(8, 6, generator=g, dtype=dtype) for _ in range(3)]
        label = t(f"{what}：因果性（改动位置 i 之后的 token）", f"{what}: causality (changing the tokens after position i)")
        out, w = _run(causal_self_attention, (x, *ws), label)
        for i in range(x.shape[-2] - 1):
            x2 = x.clone()
            x2[..., i + 1:, :] = torch.randn(x2[..., i + 1:, :].shape, generator=g, dtype=dtype) * 3
            out2, w2 = _run(causal_self_attention, (x2, *ws), label)
            n_checks += 1
            if not (torch.equal(out[..., :i + 1, :], out2[..., :i + 1, :])
                    and torch.equal(w[..., :i + 1, :], w2[..., :i + 1, :])):
                tiny = close(out[..., :i + 1, :], out2[..., :i + 1, :], atol=1e-5, rtol=1e-5)
                extra = t("（差别很小但不是逐位相同：第 i 行的计算用到了未来位置的数值，例如减去了整个矩阵的最大值或均值。）",
                          " (the difference is tiny but not zero: row i's computation used values of future "
                          "positions, e.g. subtracting the maximum or mean of the whole matrix.)") if tiny else ""
                raise failure(t(f"{label}：改动位置 {i + 1} 起的 token 后，输出的第 0…{i} 行",
                                f"{label}: output rows 0…{i} after changing the tokens from position {i + 1} on"),
                              t("逐位不变", "unchanged, bit for bit"),
                              t("变了", "changed") + extra, LEAK)
    passed(what, n_checks)


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
        raise GradingFailure(t(f"{what}：选项 {c} 不对。{zh}", f"{what}: option {c} is wrong. {en}"))
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
            raise failure(f"{what}: {name}", str(want), repr(got), hint=hint)
    passed(what, 3)
