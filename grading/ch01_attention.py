"""Hidden tests of ch01_attention: softmax, score_variance,
scaled_dot_product_attention."""
from __future__ import annotations

import math
import numbers

import torch

from helpers.evidence import Tol
from helpers.i18n import t

from .cases import F32, LOOSE, Case, Check, Earlier, on_its_own, passes, same
from .core import (
    ATTENTION_FAMILY,
    B_WEIGHTS_DTYPE,
    SOFTMAX_FAMILY,
    Bug,
    GradingFailure,
    Raises,
    expect_autograd,
    passed,
    seeded,
    show,
)
from .probes import Probe

try:   # the references below, computed once by `make source` (coursekit.author.probes.write_stored)
    from . import ch01_attention_stored as _stored
except ImportError:   # a course folder built before they were stored: computed in the check
    _stored = None

FORBIDDEN = SOFTMAX_FAMILY | ATTENTION_FAMILY


# ---------------------------------------------------------------- references (float64)

def ref_softmax(x, dim=-1):
    x = x.to(torch.float64)
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)


def ref_attention(q, k, v, mask=None):
    q, k, v = (a.to(torch.float64) for a in (q, k, v))
    s = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask.bool(), float("-inf"))
    w = ref_softmax(s, -1)
    return torch.einsum("...qk,...kd->...qd", w, v), w


# ---------------------------------------------------------------- known bugs: softmax

def _sm_no_max(x, dim=-1):
    e = torch.exp(x.to(torch.float64) if x.dtype == torch.float64 else x)
    return e / e.sum(dim=dim, keepdim=True)


def _sm_global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def _sm_last_dim(x, dim=-1):
    return ref_softmax(x, -1)


def _sm_dim0(x, dim=-1):
    return ref_softmax(x, 0)


def _sm_minus_mean(x, dim=-1):
    e = torch.exp(x - x.mean(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _sm_dim_zero_ignored(x, dim=-1):
    return ref_softmax(x, -1 if dim == 0 else dim)


def _sm_total(x, dim=-1):
    e = torch.exp(x.to(torch.float64) - x.to(torch.float64).amax(dim=dim, keepdim=True))
    return e / e.sum()


def _sm_no_norm(x, dim=-1):
    return torch.exp(x - x.amax(dim=dim, keepdim=True))


def _sm_exp_only(x, dim=-1):
    return torch.exp(x)


def _sm_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


SOFTMAX_BUGS = [
    Bug("softmax_no_max_subtraction",
        "没有先减去每行的最大值：exp(1000) 溢出成 inf，inf/inf 得到 nan。先算 x - x.max(dim, keepdim=True)。",
        "you did not subtract the row maximum first: exp(1000) overflows to inf and inf/inf is nan. "
        "Compute x - x.max(dim, keepdim=True) first.", _sm_no_max),
    Bug("softmax_global_max",
        "减去的是整个张量的最大值，而不是每行（沿 dim）的最大值：数值很小的那一行全部下溢成 0，0/0 得到 nan。",
        "you subtracted the maximum of the whole tensor instead of the maximum along dim: a row of much "
        "smaller numbers underflows to all zeros and 0/0 gives nan.", _sm_global_max),
    Bug("softmax_shift_not_row_max",
        "减去的不是每行的最大值（例如均值，或第一个元素）：softmax 对平移不变，数学上减去哪个数都一样，可一行里有 -inf 时，"
        "均值或第一个元素也可能是 -inf，-inf − (−inf) 得到 nan。减去最大值 m 之后每个 exp(x − m) ≤ 1，"
        "而最大的那一项给出 exp(0) = 1。",
        "you subtracted something other than the row maximum (the mean, or the first entry): softmax does not "
        "change under a shift, so on paper any number works, but in a row holding -inf the mean or the first entry "
        "can be -inf too, and -inf − (−inf) is nan. After subtracting the maximum m every exp(x − m) ≤ 1, and the "
        "largest entry gives exp(0) = 1.", _sm_minus_mean),
    Bug("softmax_dim_zero_ignored",
        "dim=0 时算成了沿最后一维：像 dim = dim or -1 这样的写法把 0 当成了“没有给”（0 在 Python 里为假）。"
        "默认值已经写在签名里（dim=-1），直接用参数 dim 就行。",
        "with dim=0 it normalises along the last axis: a line such as dim = dim or -1 takes 0 for \"not given\" "
        "(0 is false in Python). The default is already in the signature (dim=-1): use the dim argument as it is.",
        _sm_dim_zero_ignored),
    Bug("softmax_ignores_dim",
        "总是沿最后一维归一化，忽略了参数 dim。",
        "you always normalise over the last dimension and ignore the dim argument.", _sm_last_dim),
    Bug("softmax_wrong_dim",
        "沿错误的维度（dim=0）求和：应该沿参数 dim 指定的那一维，让那一维加起来等于 1。",
        "you summed over the wrong dimension (dim=0): normalise along the dim argument so that it sums to 1.",
        _sm_dim0),
    Bug("softmax_no_normalisation",
        "只算了 exp，没有除以总和：结果加起来不等于 1。",
        "you computed exp but did not divide by the sum: the result does not add up to 1.", _sm_no_norm),
    Bug("softmax_divided_by_total",
        "除以的是整个张量的总和（sum 没有写 dim）：所有的数加起来是 1，可每一行（沿 dim）并不是。"
        "求和要沿 dim，并且 keepdim=True。",
        "you divided by the sum of the whole tensor (a sum without dim): all the numbers add up to 1, but each "
        "row (along dim) does not. Sum along dim, with keepdim=True.", _sm_total),
    Bug("softmax_exp_only",
        "只返回了 exp(x)：既没有减去每行的最大值，也没有除以总和，结果加起来不等于 1。"
        "softmax 是 exp(x − m) / sum(exp(x − m))，m 是沿 dim 的最大值。",
        "you returned exp(x) alone: no row maximum subtracted and no division by the sum, so the result does not "
        "add up to 1. softmax is exp(x − m) / sum(exp(x − m)), with m the maximum along dim.", _sm_exp_only),
    Bug("softmax_sum_without_keepdim",
        "求和时没有 keepdim=True：除法按错误的维度广播了。",
        "the sum is taken without keepdim=True, so the division broadcasts along the wrong dimension.",
        _sm_no_keepdim),
]


SOFTMAX_DEFAULT_BUGS = [
    Bug(f"softmax_default_dim_{d}",
        f"参数 dim 的默认值不是 -1（你写成了 {d}）：题目的签名是 softmax(x, dim=-1)，不传 dim 时沿最后一维归一化。",
        f"the default of dim is not -1 (you wrote {d}): the signature is softmax(x, dim=-1), so without dim it "
        "normalises along the last axis.", lambda x, dim=-1, d=d: ref_softmax(x, d))
    for d in (0, 1)]


def _softmax_cases():
    gen = seeded(101)
    inf = float("-inf")
    rows = [
        (t("二维随机输入，dim=-1", "2-D random input, dim=-1"), torch.randn(4, 7, generator=gen), -1),
        (t("三维输入，dim=1", "3-D input, dim=1"), torch.randn(2, 5, 3, generator=gen), 1),
        (t("三维输入，dim=0", "3-D input, dim=0"), torch.randn(3, 2, 4, generator=gen), 0),
        (t("方阵，dim=-1", "square matrix, dim=-1"), torch.randn(5, 5, generator=gen) * 3, -1),
        (t("很大的数（1000 左右）", "large entries (about 1000)"),
         torch.tensor([[1000.0, 1001.0, 1002.0], [-3.0, 0.0, 3.0]]), -1),
        (t("各行量级相差很大", "rows of very different magnitude"),
         torch.tensor([[-1000.0, -1001.0, -1002.0], [5.0, 6.0, 7.0]]), -1),
        (t("除一个之外全是 -inf 的行", "a row of -inf except one entry"),
         torch.tensor([[inf, inf, 3.0, inf], [0.5, 0.1, -0.2, 0.3]]), -1),
        (t("float64 输入", "float64 input"), torch.randn(3, 6, generator=gen, dtype=torch.float64) * 10, -1),
    ]
    cases = [Case(label, (x,), {"dim": dim}, bugs=SOFTMAX_BUGS) for label, x, dim in rows]
    # the signature's default: softmax(x) normalises along the last axis
    cases.append(Case(t("三维输入，不传 dim（默认 dim=-1）", "3-D input, dim not given (default dim=-1)"),
                      (torch.randn(2, 3, 4, generator=gen),), {}, bugs=SOFTMAX_DEFAULT_BUGS))
    return cases


B_SM_NO_DEFAULT = Bug("softmax_dim_has_no_default",
                      "参数 dim 没有默认值：题目的签名是 softmax(x, dim=-1)，所以 softmax(x) 也要能调用，沿最后一维归一化。",
                      "the dim argument has no default: the signature is softmax(x, dim=-1), so softmax(x) must work "
                      "too, normalising along the last axis.")
B_SM_DTYPE = Bug("softmax_changes_dtype",
                 "结果的 dtype 和 x 不同（例如中间 .float() 了一次）：题目要求 float64 进、float64 出。",
                 "the result does not keep x's dtype (a .float() somewhere on the way): the exercise keeps it, "
                 "float64 in, float64 out.")
SOFTMAX_ERRORS = [(Raises(contains=("must match the size",)), SOFTMAX_BUGS[-1]),
                  (Raises(contains=("required positional argument: 'dim'",), types=("TypeError",)), B_SM_NO_DEFAULT)]
KEEPDIM_HINT = SOFTMAX_ERRORS      # the hidden check reads the same signs as the visible test
assert SOFTMAX_BUGS[-1].key == "softmax_sum_without_keepdim"


def check_softmax(softmax) -> None:
    passed("softmax", _softmax_checks(softmax))


def _softmax_checks(softmax) -> int:
    what = "softmax"
    check = Check(what, softmax, reference=ref_softmax, forbid=FORBIDDEN, hints=SOFTMAX_ERRORS, dtype_follows=None)
    check.cases(_softmax_cases())
    # the dtype of x: float64 in, float64 out (the values were compared above)
    x = torch.randn(3, 5, generator=seeded(103), dtype=torch.float64)
    got = check.call(x, dim=-1, label=t("float64 输入：结果的 dtype", "float64 input: dtype of the result"))
    if not isinstance(got, torch.Tensor) or got.dtype != torch.float64:
        raise check.fail(t("float64 输入：结果的 dtype", "float64 input: dtype of the result"), "torch.float64",
                         str(getattr(got, "dtype", type(got).__name__)), B_SM_DTYPE)
    # gradients must flow through it (attention is trained)
    x = torch.randn(3, 4, generator=seeded(102), requires_grad=True)
    expect_autograd(check.call(x, dim=-1, label=t("需要梯度的输入", "input with requires_grad")), what)
    return check.n + 2


def softmax_stand_in(x, dim=-1):
    """A correct softmax for a student's attention to call, in the input's dtype."""
    return ref_softmax(x, dim).to(x.dtype)


# the probe is exercise 1's own hidden check: the stand-in comes in exactly when softmax lost its points
EARLIER = (Earlier("softmax", 1, passes(_softmax_checks), softmax_stand_in),)


# ---------------------------------------------------------------- score_variance

VARIANCE_BUGS = {
    "ignores_scaled": Bug("variance_ignores_scaled", "scaled=True 时没有除以 √d_k：方差仍然约等于 d_k。",
                          "scaled=True does not divide by √d_k: the variance is still about d_k."),
    "by_dk": Bug("variance_scaled_by_dk", "除的是 d_k 而不是 √d_k：缩放后方差约为 1/d_k，而不是 1。",
                 "you divided by d_k instead of √d_k: the scaled variance is about 1/d_k, not 1."),
    "std": Bug("variance_returns_std", "返回的是标准差（√d_k 左右），题目要的是方差（d_k 左右）。",
               "you returned the standard deviation (about √d_k); the exercise asks for the variance (about d_k)."),
    "mean": Bug("variance_returns_mean", "返回的是均值（约为 0），题目要的是方差。",
                "you returned the mean (about 0); the exercise asks for the variance."),
    "sum": Bug("variance_of_elementwise_product",
               "计算的是逐元素乘积 q_i·k_i 的方差（约为 1），而不是点积 q·k（对 d_k 个分量求和）的方差。",
               "you took the variance of the element-wise products q_i·k_i (about 1) instead of the dot "
               "product q·k (summed over the d_k components)."),
    "method": Bug("variance_returns_method",
                  "返回的是方法 .item 本身，不是它的结果：少了括号。写 .item()，得到的才是那个数。",
                  "you returned the method .item itself, not its result: the parentheses are missing. .item() gives "
                  "the number."),
    "by_n": Bug("variance_divided_by_n",
                "返回的方差又除以了 n_samples（那是“均值的方差”，估计值本身有多不准）：题目要的是这 n_samples 个分数"
                "本身的方差，约等于 d_k。",
                "the variance is divided by n_samples once more (that is the variance of the mean: how uncertain the "
                "estimate is): the exercise asks for the variance of the n_samples scores themselves, about d_k."),
    "mean_not_sum": Bug("variance_of_mean_not_sum",
                        "每一对向量算的是 q_i·k_i 的平均（mean），不是点积（sum）：点积是 d_k 项之和，方差约为 d_k；"
                        "平均再除了一次 d_k，方差只剩约 1/d_k。",
                        "each pair gives the average of q_i·k_i (a mean), not the dot product (a sum): a dot product "
                        "adds d_k terms and has variance about d_k; the average divides by d_k once more and its "
                        "variance is about 1/d_k."),
    "own_generator": Bug("variance_own_generator",
                         "随机数来自你自己新建的发生器（或自己设的种子），没有用传进来的 generator：换一个种子，结果却完全"
                         "一样，调用的人没法控制这次实验。把参数 generator 交给 torch.randn。",
                         "the random numbers come from a generator (or a seed) of your own, not from the generator "
                         "passed in: another seed gives exactly the same result, so the caller cannot control the "
                         "experiment. Hand the generator argument to torch.randn."),
    "tensor": Bug("variance_returns_tensor", "返回的是一个张量，题目要的是 Python 的 float：用 .item() 或 float(...) 取出这个数。",
                  "you returned a tensor; the exercise asks for a Python float: take the number out with .item() "
                  "or float(...)."),
    "draw": Bug("variance_other_draw",
                "q 和 k 不是按题目说的方式抽出来的：先抽 q、再抽 k，各是一次 torch.randn，形状 (n_samples, d_k)，"
                "都用传进来的 generator。别的抽法（一次抽 (n_samples, 2·d_k) 再切开、换 dtype、抽的个数不是 "
                "n_samples……）分布虽然一样，同一个种子给出的却是另一组数，结果无法和别人对照。",
                "q and k are not drawn the way the exercise says: q first, then k, each one torch.randn call of shape "
                "(n_samples, d_k), both from the generator passed in. Another draw (one (n_samples, 2·d_k) tensor cut "
                "in two, another dtype, a number of samples other than n_samples, ...) has the same distribution, "
                "but the same seed then gives other numbers, so the result cannot be compared with anyone else's."),
    "defaults": Bug("variance_wrong_defaults",
                    "签名里的默认值不对：题目写的是 score_variance(d_k, n_samples=100_000, scaled=False, generator=None)，"
                    "只传 d_k 时要抽 100 000 对、不缩放，generator=None 时用 torch 的全局随机数。",
                    "the signature's defaults are not the stated ones: score_variance(d_k, n_samples=100_000, "
                    "scaled=False, generator=None), so with d_k alone it draws 100 000 pairs, unscaled, and with "
                    "generator=None it uses torch's global random numbers."),
    "generator": Bug("variance_ignores_generator", "没有把 generator 传给 torch.randn：同一个种子两次结果不同，实验无法复现。",
                     "the generator is not passed to torch.randn: the same seed gives two different results, "
                     "so the experiment cannot be repeated."),
}


def _variance_bug(v: float, target: float, d_k: int, n_samples: int = 20_000) -> Bug | None:
    """Which known bug a wrong variance looks like (each lands far from the 7 % band)."""
    b = VARIANCE_BUGS
    if target == d_k:
        return (b["std"] if abs(v - math.sqrt(d_k)) < 0.15 * math.sqrt(d_k) else
                b["by_n"] if abs(v - d_k / n_samples) < 0.15 * d_k / n_samples else
                b["mean_not_sum"] if abs(v - 1 / d_k) < 0.15 / d_k else
                b["mean"] if abs(v) < 0.5 else b["sum"] if abs(v - 1) < 0.1 else None)
    return (b["ignores_scaled"] if 0.9 * d_k < v < 1.1 * d_k else
            b["by_dk"] if abs(v - 1 / d_k) < 0.2 / d_k else None)


def ref_score_variance(d_k: int, n_samples: int, scaled: bool, seed: int) -> float:
    """The variance of the draw the exercise states (q, then k, from the seeded generator),
    taken in float64 over the dot products in the draw's own float32: they land within 1e-8
    of float64 products, far inside the 0.1 % the checks allow, at half the cost (every
    graded notebook computes six of these)."""
    gen = seeded(seed)
    q = torch.randn(n_samples, d_k, generator=gen)
    k = torch.randn(n_samples, d_k, generator=gen)
    s = (q * k).sum(-1).double()
    if scaled:
        s = s / math.sqrt(d_k)
    return float(s.var())


# The stated draws the hidden check compares with exactly: (d_k, n_samples, scaled, seed). Their
# variances take 25 million random numbers, 0.09 s of a ch01 kernel's 0.5 s of CPU here, the
# same in every graded notebook: `make source` stores them; a value stored for another torch
# is computed again (torch fixes what a seed draws only within one version).
BAND_DIMS = (16, 64, 200)                 # each d_k drawn unscaled (seed d_k) and scaled (seed d_k + 1)
DEFAULTS_DRAW = (16, 100_000, False, 6)   # score_variance(16, generator=seed 6), the other arguments left out
EXACT_DRAWS = [*((d_k, 20_000, scaled, d_k + scaled) for d_k in BAND_DIMS for scaled in (False, True)),
               DEFAULTS_DRAW]


def _draw_name(d_k: int, n_samples: int, scaled: bool, seed: int) -> str:
    return f"score_variance({d_k}, n_samples={n_samples}, scaled={scaled}, seed={seed})"


def stored_values() -> dict[str, float]:
    """What `make source` stores (grading/ch01_attention_stored.py)."""
    return {_draw_name(*draw): ref_score_variance(*draw) for draw in EXACT_DRAWS}


def exact_variance(d_k: int, n_samples: int, scaled: bool, seed: int) -> float:
    """``ref_score_variance``, read from the stored values where they hold for this torch."""
    if _stored is not None and _stored.TORCH == torch.__version__:
        value = _stored.VALUES.get(_draw_name(d_k, n_samples, scaled, seed))
        if value is not None:
            return value
    return ref_score_variance(d_k, n_samples, scaled, seed)


def check_score_variance(score_variance) -> None:
    what = "score_variance"
    check = Check(what, score_variance)

    def run(d_k, scaled, seed, n_samples=20_000):
        label = f"d_k={d_k}, n_samples={n_samples}, scaled={scaled}"
        out = check.call(d_k, n_samples=n_samples, scaled=scaled, generator=seeded(seed), label=label)
        if isinstance(out, bool) or not isinstance(out, numbers.Real):     # the exercise asks for a Python float
            raise check.fail(t(f"{label}：返回值的类型", f"{label}: type of the result"),
                             t("Python 的 float", "a Python float"), type(out).__name__,
                             VARIANCE_BUGS["tensor"] if isinstance(out, torch.Tensor) else
                             VARIANCE_BUGS["method"] if getattr(out, "__name__", "") == "item" else None)
        return float(out), label

    # 20 000 samples: the estimate's relative spread is about 1 %, so ±7 % is a wide margin
    got = []
    for d_k in BAND_DIMS:
        for scaled, target in ((False, d_k), (True, 1.0)):
            v, label = run(d_k, scaled, d_k + scaled)
            check.n += 1
            if not (0.93 * target < v < 1.07 * target):
                about = t(f"约 {target:g}", f"about {target:g}") + (" (= d_k)" if not scaled else "")
                raise check.fail(label, about, f"{v:.4g}", _variance_bug(v, target, d_k))
            got.append((d_k, scaled, v, label))
    a, label = run(32, False, 7, n_samples=2_000)
    b, _ = run(32, False, 7, n_samples=2_000)
    if a != b:
        raise check.fail(t(f"{label}，用同一个种子调用两次", f"{label}, called twice with the same seed"),
                         t("两次结果相同", "the same result twice"), f"{a:.6g} / {b:.6g}", VARIANCE_BUGS["generator"])
    c, _ = run(32, False, 8, n_samples=2_000)
    if c == a:
        raise check.fail(t(f"{label}，换成种子 8", f"{label}, with seed 8 instead"),
                         t("和种子 7 不同的结果", "another result than seed 7's"), f"{c:.6g} / {a:.6g}",
                         VARIANCE_BUGS["own_generator"])
    # the draw the exercise states gives one exact number per seed: another draw lands ~1 % away, while
    # rounding and n vs n - 1 in the variance move it by less than 1e-4
    for d_k, scaled, v, label in got:
        exact = exact_variance(d_k, 20_000, scaled, d_k + scaled)
        if abs(v - exact) > 1e-3 * exact:
            raise check.fail(t(f"{label}：用这个种子按题目的抽法得到的方差", f"{label}: the variance the stated draw "
                               "gives with this seed"), f"{exact:.6g}", f"{v:.6g}", VARIANCE_BUGS["draw"])
    # the signature's defaults: n_samples=100_000, scaled=False, generator=None
    label = t("score_variance(16, generator=...)（其余参数取默认值）", "score_variance(16, generator=...) (the other "
              "arguments at their defaults)")
    d_k, _, _, seed = DEFAULTS_DRAW
    dflt = check.call(d_k, generator=seeded(seed), label=label)   # 1 000 … 50 000 samples land > 0.3 % away
    exact = exact_variance(*DEFAULTS_DRAW)
    if not isinstance(dflt, numbers.Real) or abs(float(dflt) - exact) > 1e-3 * exact:
        raise check.fail(label, f"{exact:.6g}", str(dflt), VARIANCE_BUGS["defaults"])
    label = t("score_variance(4)（不传 generator）", "score_variance(4) (no generator)")
    # (the visible test names a crash here by the sign in VARIANCE_ERRORS; the check below says the same)
    try:
        free = check.call(4, label=label)
    except GradingFailure as err:
        kept = [line for line in str(err).splitlines() if not line.lstrip().startswith(("诊断：", "Diagnosis:"))]
        raise GradingFailure("\n".join(kept) + "\n" + t("  诊断：", "  Diagnosis: ")
                             + VARIANCE_BUGS["defaults"].describe()) from None
    if isinstance(free, bool) or not isinstance(free, numbers.Real) or not 0.93 * 4 < float(free) < 1.07 * 4:
        raise check.fail(label, t("约 4 的 float", "a float of about 4"), str(free), VARIANCE_BUGS["defaults"])
    check.n += 2
    passed(what, check.n + 3)


# ---------------------------------------------------------------- attention

def _att_scale(scale_fn, mask_mode="correct", softmax_dim=-1):
    def impl(q, k, v, mask=None):
        q, k, v = (a.to(torch.float64) for a in (q, k, v))
        s = q @ k.transpose(-2, -1) / scale_fn(q, k, v)
        if mask is not None and mask_mode == "correct":
            s = s.masked_fill(~mask.bool(), float("-inf"))
        elif mask is not None and mask_mode == "inverted":
            s = s.masked_fill(mask.bool(), float("-inf"))
        w = ref_softmax(s, softmax_dim)
        if mask is not None and mask_mode == "after_softmax":
            w = w.masked_fill(~mask.bool(), 0.0)
        if mask is not None and mask_mode == "zero_fill":
            s = s.masked_fill(~mask.bool(), 0.0)
            w = ref_softmax(s, softmax_dim)
        return w @ v, w
    return impl


_sqrt_dk = lambda q, k, v: math.sqrt(q.shape[-1])  # noqa: E731

ATTENTION_BUGS = [
    Bug("attention_no_scaling", "分数没有缩放：没有除以 √d_k，d_k 大时 softmax 饱和成 one-hot。",
        "the scores are not scaled: not divided by √d_k, so for large d_k softmax saturates to one-hot.",
        _att_scale(lambda q, k, v: 1.0)),
    Bug("attention_scaled_by_dk", "除的是 d_k 而不是 √d_k：分数被压得太小，权重几乎是均匀分布。",
        "you divided by d_k instead of √d_k: the scores shrink too much and the weights become almost uniform.",
        _att_scale(lambda q, k, v: float(q.shape[-1]))),
    Bug("attention_scaled_by_sqrt_dv", "除的是 √d_v（v 的最后一维）而不是 √d_k（q、k 的最后一维）。",
        "you divided by √d_v (v's last dimension) instead of √d_k (the last dimension of q and k).",
        _att_scale(lambda q, k, v: math.sqrt(v.shape[-1]))),
    Bug("attention_scaled_by_sqrt_nk", "除的是 √n_k（key 的个数）而不是 √d_k（向量维度）。",
        "you divided by √n_k (the number of keys) instead of √d_k (the vector size).",
        _att_scale(lambda q, k, v: math.sqrt(k.shape[-2]))),
    Bug("attention_softmax_wrong_dim", "softmax 沿错了维度（dim=-2，沿 query）：应该让每个 query 的一行权重（沿 key，dim=-1）加起来等于 1。",
        "softmax runs over the wrong dimension (dim=-2, across queries): each query's row of weights "
        "(over the keys, dim=-1) must add up to 1.", _att_scale(_sqrt_dk, softmax_dim=-2)),
    Bug("attention_softmax_fixed_axis",
        "softmax 沿的是固定的 dim=1：没有批量维时它恰好是 key 那一维，有了批量维它就成了别的维。"
        "每个 query 的一行权重沿最后一维（dim=-1）加起来等于 1。",
        "softmax runs over the fixed axis dim=1: without batch dimensions that happens to be the keys' axis, "
        "with batch dimensions it is another one. Each query's row of weights adds up to 1 along the last axis "
        "(dim=-1).", _att_scale(_sqrt_dk, softmax_dim=1)),
    Bug("attention_mask_inverted", "掩码的含义反了：True 表示“可以看”，你把 True 的位置屏蔽掉了。",
        "the mask is inverted: True means 'may attend', but you blocked the True positions.",
        _att_scale(_sqrt_dk, mask_mode="inverted")),
    Bug("attention_mask_after_softmax", "在 softmax 之后才把被屏蔽的权重置 0：每行加起来不再是 1。掩码要在 softmax 之前（把分数设为 -inf）。",
        "the mask is applied after softmax (weights set to 0): rows no longer add up to 1. Mask the scores "
        "with -inf before softmax.", _att_scale(_sqrt_dk, mask_mode="after_softmax")),
    Bug("attention_mask_zero_fill", "被屏蔽的分数设成了 0 而不是 -inf：exp(0)=1，被屏蔽的位置仍然拿到权重。",
        "masked scores are set to 0 instead of -inf: exp(0) = 1, so masked positions still get weight.",
        _att_scale(_sqrt_dk, mask_mode="zero_fill")),
    Bug("attention_mask_ignored", "传入的 mask 被忽略了。", "the mask argument is ignored.",
        _att_scale(_sqrt_dk, mask_mode="ignored")),
    Bug("attention_softmax_wrong_dim", "softmax 沿错了维度（dim=-2，沿 query）：应该让每个 query 的一行权重（沿 key，dim=-1）加起来等于 1。",
        "softmax runs over the wrong dimension (dim=-2, across queries): each query's row of weights "
        "(over the keys, dim=-1) must add up to 1.",
        lambda q, k, v, mask=None: (None, ref_attention(q, k, v, mask)[1].transpose(-2, -1))),
]
_WEIGHTS_ONLY = ATTENTION_BUGS[-1]        # compared on the weights alone: no output for the visible tests' probes


B_BMM = Bug("attention_bmm_three_dims",
            "torch.bmm 只接受恰好三维、批量大小相同的输入：q、k、v 前面的批量维可以任意多（也可以没有），而且可以互相广播。"
            "用 @（torch.matmul），它处理任意多个批量维并会广播。",
            "torch.bmm takes exactly 3-D inputs with the same batch size, but q, k, v may have any number of leading "
            "batch dimensions (or none), which broadcast against each other. Use @ (torch.matmul): it takes any "
            "number of batch dimensions and broadcasts them.")
B_MASK_INDEX = Bug("attention_mask_index_does_not_broadcast",
                   "布尔掩码当下标用（scores[~mask] = ...）时不会广播：它的形状必须和分数完全相同。mask 只是能广播到 "
                   "(..., n_q, n_k)，用 masked_fill 或 torch.where（它们会广播）。",
                   "a boolean mask used as an index (scores[~mask] = ...) does not broadcast: it must have exactly "
                   "the scores' shape. The mask only broadcasts to (..., n_q, n_k), so use masked_fill or "
                   "torch.where (they broadcast).")
B_BATCH = Bug("attention_fixed_batch_dims",
              "只在恰好一个批量维、q、k、v 批量维相同时才算得对（例如用了 bmm、transpose(1, 2)、固定字母的 einsum、"
              "或先 reshape(-1, n, d)）：题目要求前面的批量维可以任意多、可以广播。用 @ 和 k.transpose(-2, -1)。",
              "it only works with exactly one batch dimension shared by q, k and v (bmm, transpose(1, 2), an einsum "
              "with fixed letters, or a reshape(-1, n, d) first): the exercise asks for any number of leading batch "
              "dimensions, broadcast. Use @ and k.transpose(-2, -1).")
B_SWAPPED = Bug("attention_returns_swapped",
                "返回的顺序反了：题目要的是 (out, weights)，你返回的是 (weights, out)。",
                "the results come back in the wrong order: the exercise asks for (out, weights); you return "
                "(weights, out).", lambda *args, **kw: tuple(reversed(ref_attention(*args, **kw))))
B_ONE = Bug("attention_returns_one", "只返回了一个张量：题目要的是 (out, weights) 两个，顺序就是这样。",
            "only one tensor comes back: the exercise asks for the two of (out, weights), in that order.")
B_OUT_DTYPE = Bug("attention_out_dtype_changed",
                  "out 的 dtype 和输入不同（例如乘 v 之前先 .float()）：题目要求 weights 和 out 都保持输入的 dtype，"
                  "float64 进，float64 出。",
                  "out does not keep the inputs' dtype (a .float() before the product with v, say): the exercise keeps "
                  "the dtype of both weights and out, float64 in, float64 out.")
B_K_T = Bug("attention_k_T", "批量输入时 k.T 会把所有维度倒序（而不只是最后两维）；要用 k.transpose(-2, -1)。",
            "with batch dimensions k.T reverses *all* dimensions, not just the last two; use k.transpose(-2, -1).")
B_TRANSPOSE_01 = Bug("attention_transpose_first_axes",
                     "k.transpose(0, 1) 交换的是最前面两维：没有批量维时它恰好是最后两维，有了批量维交换的就是批量维。"
                     "Kᵀ 只交换 k 的最后两维：k.transpose(-2, -1)。",
                     "k.transpose(0, 1) swaps the first two axes: without batch dimensions they happen to be the last "
                     "two, with batch dimensions they are batch axes. Kᵀ swaps only k's last two axes: "
                     "k.transpose(-2, -1).")
B_MASK_RESHAPED = Bug("attention_mask_reshaped",
                      "掩码被 reshape/view 成了分数的形状：只有元素个数恰好相同时才行。mask 只是能广播到 (..., n_q, n_k)"
                      "（例如所有批量共用一个 (n_q, n_k) 的掩码），交给 masked_fill 或 torch.where 去广播。",
                      "the mask is reshaped or viewed to the scores' shape, which only works when both hold as many "
                      "numbers. The mask merely broadcasts to (..., n_q, n_k) (one (n_q, n_k) mask for every batch, "
                      "say): let masked_fill or torch.where broadcast it.")

# signs of known mistakes in an error the student's code raised: read by the hidden check and the visible test
ATTENTION_ERRORS = [
    (Raises(line=(".T", ".t()")), B_K_T),
    (Raises(line=("transpose(0,1)", "transpose(1,0)")), B_TRANSPOSE_01),
    (Raises(contains=("batch1", "batch2")), B_BMM),
    (Raises(line=("bmm",)), B_BMM),
    (Raises(contains=("shape of the mask",), types=("IndexError",)), B_MASK_INDEX),
    (Raises(contains=("is invalid for input of size",), line=("mask",)), B_MASK_RESHAPED),
    (Raises(contains=("einsum(): the number of subscripts",)), B_BATCH),
    (Raises(contains=("Dimension out of range",), line=("transpose(1,2)", "transpose(2,1)")), B_BATCH),
    (Raises(contains=("must match the size of tensor",), line=("@",)), B_BATCH),
    (Raises(contains=("The expanded size of the tensor", "must be greater or equal to the number of dimensions"),
            line=("expand",)), B_BATCH),
]
T_HINT = ATTENTION_ERRORS


def _attention_cases():
    gen = seeded(202)

    def r(*shape, scale=1.0, dtype=torch.float32):
        return torch.randn(*shape, generator=gen, dtype=dtype) * scale

    causal = torch.ones(4, 4).tril().bool()
    band = torch.rand(2, 1, 3, 5, generator=gen) > 0.4
    band[..., 0] = True  # no fully-masked row
    f64 = torch.float64
    rows = [
        (t("无批量维，n_q=3, n_k=5, d_k=8, d_v=6", "no batch, n_q=3, n_k=5, d_k=8, d_v=6"),
         (r(3, 8), r(5, 8), r(5, 6)), None, F32),
        (t("批量维 (2, 3)，n_q=4 ≠ n_k=6，d_k=16 ≠ d_v=5", "batch dims (2, 3), n_q=4 ≠ n_k=6, d_k=16 ≠ d_v=5"),
         (r(2, 3, 4, 16), r(2, 3, 6, 16), r(2, 3, 6, 5)), None, F32),
        (t("因果掩码（下三角 True）", "causal mask (lower triangle True)"), (r(2, 4, 8), r(2, 4, 8), r(2, 4, 8)),
         causal, F32),
        (t("广播的掩码 (2, 1, 3, 5)", "a broadcast mask (2, 1, 3, 5)"),
         (r(2, 4, 3, 8), r(2, 4, 5, 8), r(2, 4, 5, 7)), band, F32),
        # scores of several hundred: float32 rounding of the scores alone moves the weights by ~1e-4
        (t("很大的分数（q、k 放大 30 倍）", "large scores (q and k scaled by 30)"),
         (r(3, 8, scale=30.0), r(5, 8, scale=30.0), r(5, 4)), None, LOOSE),
        (t("float64 输入", "float64 inputs"), (r(2, 5, 32, dtype=f64), r(2, 7, 32, dtype=f64), r(2, 7, 3, dtype=f64)),
         None, F32),
        (t("批量维互相广播：q (2, 3, 4, 8)，k (3, 6, 8)，v (1, 3, 6, 5)",
           "batch dims that broadcast: q (2, 3, 4, 8), k (3, 6, 8), v (1, 3, 6, 5)"),
         (r(2, 3, 4, 8), r(3, 6, 8), r(1, 3, 6, 5)), None, F32),
        # k and v bring a batch dimension that q lacks: the batch shape is none of the three inputs' own
        (t("批量维从两边广播：q (2, 1, 3, 8)，k (3, 5, 8)，v (3, 5, 4)",
           "batch dims broadcast from both sides: q (2, 1, 3, 8), k (3, 5, 8), v (3, 5, 4)"),
         (r(2, 1, 3, 8), r(3, 5, 8), r(3, 5, 4)), None, F32),
    ]
    return [Case(label, qkv, {} if mask is None else {"mask": mask}, tol) for label, qkv, mask, tol in rows]


def _pair(check, result, label):
    if not (isinstance(result, tuple) and len(result) == 2):
        raise check.fail(label, t("(out, weights) 两个张量组成的元组", "a tuple (out, weights) of two tensors"),
                         type(result).__name__, B_ONE if isinstance(result, torch.Tensor) else None)
    return result


def check_attention(scaled_dot_product_attention) -> None:
    what = "scaled_dot_product_attention"
    with on_its_own(scaled_dot_product_attention, EARLIER):
        passed(what, _attention_checks(what, scaled_dot_product_attention))


def _works_on_one_batch_dim(check, q, k, v, mask) -> bool:
    """Whether the answer is right once q, k, v (and the mask) are expanded to one shared batch
    shape and flattened to exactly one batch dimension: then the batch dims alone were its trouble."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2],
                                   *(() if mask is None else (mask.shape[:-2],)))

    def flat(a):
        return a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:]) if batch else a.unsqueeze(0)
    args = [flat(a) for a in (q, k, v)]
    kwargs = {}
    if mask is not None:
        full = torch.broadcast_shapes(mask.shape, (*batch, q.shape[-2], k.shape[-2]))
        kwargs["mask"] = flat(mask.expand(full))
    try:
        out, w = check.call(*args, label="", **kwargs)
        ref_out, ref_w = ref_attention(*args, kwargs.get("mask"))
        return same(w, ref_w) and same(out, ref_out)
    except Exception:  # noqa: BLE001 - it does not work that way either
        return False


def _call(check, c):
    """The student's (out, weights) for one case; a failure on a case with other batch dims than one
    shared one is named when the same inputs flattened to one batch dimension work."""
    q, k, v = c.args
    mask = c.kwargs.get("mask")
    one_batch = q.dim() == 3 and q.shape[:-2] == k.shape[:-2] == v.shape[:-2] and (mask is None or mask.dim() == 3)
    try:
        result = check.call(*c.args, label=c.label, **c.kwargs)
    except GradingFailure as err:
        said = str(err)
        if one_batch or any(b.key in said for _, b in T_HINT) or not _works_on_one_batch_dim(check, q, k, v, mask):
            raise
        # the batch dimensions are the trouble: that names it better than a general hint about the crash
        kept = [line for line in said.splitlines() if not line.lstrip().startswith(("诊断：", "Diagnosis:"))]
        raise GradingFailure("\n".join(kept) + "\n" + t("  诊断：", "  Diagnosis: ") + B_BATCH.describe()) from None
    out, weights = _pair(check, result, c.label)
    exp_out, exp_w = ref_attention(q, k, v, mask)
    if (isinstance(out, torch.Tensor) and isinstance(weights, torch.Tensor) and exp_out.shape != exp_w.shape
            and out.shape == exp_w.shape and weights.shape == exp_out.shape):
        raise check.fail(t(f"{c.label}：返回值的顺序", f"{c.label}: order of the results"), "(out, weights)",
                         "(weights, out)", B_SWAPPED)
    if not one_batch and isinstance(weights, torch.Tensor) and not same(weights, exp_w, c.tol) \
            and _works_on_one_batch_dim(check, q, k, v, mask):
        raise check.fail(t(f"{c.label}：注意力权重", f"{c.label}: attention weights"), show(exp_w), show(weights),
                         B_BATCH)
    return out, weights, exp_out, exp_w


def _attention_checks(what, scaled_dot_product_attention) -> int:
    check = Check(what, scaled_dot_product_attention, forbid=FORBIDDEN, hints=T_HINT)
    for c in _attention_cases():
        q, k, v = c.args
        mask = c.kwargs.get("mask")
        out, weights, exp_out, exp_w = _call(check, c)
        check.tensor(t(f"{c.label}：weights", f"{c.label}: weights"), weights, exp_w.shape,
                     hint=t("weights 的形状是 (..., n_q, n_k)。", "weights have shape (..., n_q, n_k)."))
        check.expect(t(f"{c.label}：注意力权重", f"{c.label}: attention weights"), weights, exp_w, tol=c.tol,
                     bugs=ATTENTION_BUGS, bug_args=(q, k, v, mask), part=lambda o: o[1], count=False)
        if weights.dtype != q.dtype:
            raise check.fail(t(f"{c.label}：注意力权重的 dtype", f"{c.label}: dtype of the attention weights"),
                             str(q.dtype), str(weights.dtype), B_WEIGHTS_DTYPE)
        check.tensor(t(f"{c.label}：输出 out", f"{c.label}: output out"), out, exp_out.shape,
                     hint=t("out 的形状是 (..., n_q, d_v)。", "out has shape (..., n_q, d_v)."))
        check.expect(t(f"{c.label}：输出 out", f"{c.label}: output out"), out, exp_out, tol=c.tol,
                     hint=t("权重已经对了：out = weights @ v。", "the weights are right: out = weights @ v."))
        if out.dtype != q.dtype:
            raise check.fail(t(f"{c.label}：输出 out 的 dtype", f"{c.label}: dtype of the output out"),
                             str(q.dtype), str(out.dtype), B_OUT_DTYPE)
    return check.n


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)

VARIANCE_ERRORS = [(Raises(contains=("'NoneType' object has no attribute",)), VARIANCE_BUGS["defaults"])]
ERRORS = {"softmax": SOFTMAX_ERRORS, "score_variance": VARIANCE_ERRORS, "scaled_dot_product_attention": ATTENTION_ERRORS}


def _pairs(d_k: int, n: int, seed: int):
    """The stated draw: q, then k, each (n, d_k), from one seeded generator."""
    gen = seeded(seed)
    q = torch.randn(n, d_k, generator=gen)
    return q, torch.randn(n, d_k, generator=gen)


def _dots(d_k: int, n: int, seed: int) -> torch.Tensor:
    q, k = _pairs(d_k, n, seed)
    return (q.double() * k.double()).sum(-1)


def _wide_draw(d_k: int, n: int, seed: int) -> float:
    qk = torch.randn(n, 2 * d_k, generator=seeded(seed)).double()
    return float((qk[:, :d_k] * qk[:, d_k:]).sum(-1).var())


def _variance_probe_bugs(scaled: bool) -> list[Bug]:
    b = VARIANCE_BUGS
    s = math.sqrt

    def scale(d_k):
        return s(d_k) if scaled else 1.0
    bugs = [
        Bug(b["std"].key, b["std"].zh, b["std"].en, lambda d, n, seed: float((_dots(d, n, seed) / scale(d)).std())),
        Bug(b["mean"].key, b["mean"].zh, b["mean"].en,
            lambda d, n, seed: float((_dots(d, n, seed) / scale(d)).mean())),
        Bug(b["by_n"].key, b["by_n"].zh, b["by_n"].en,
            lambda d, n, seed: float((_dots(d, n, seed) / scale(d)).var()) / n),
        Bug(b["sum"].key, b["sum"].zh, b["sum"].en,
            lambda d, n, seed: float((torch.mul(*_pairs(d, n, seed)).double() / scale(d)).var())),
        Bug(b["mean_not_sum"].key, b["mean_not_sum"].zh, b["mean_not_sum"].en,
            lambda d, n, seed: float((_dots(d, n, seed) / d / scale(d)).var())),
        Bug(b["draw"].key, b["draw"].zh, b["draw"].en, lambda d, n, seed: _wide_draw(d, n, seed) / scale(d) ** 2),
        Bug(b["draw"].key, b["draw"].zh, b["draw"].en,
            lambda d, n, seed: float((_dots(d, 50_000, seed) / scale(d)).var())),
    ]
    if scaled:
        bugs += [Bug(b["ignores_scaled"].key, b["ignores_scaled"].zh, b["ignores_scaled"].en,
                     lambda d, n, seed: float(_dots(d, n, seed).var())),
                 Bug(b["by_dk"].key, b["by_dk"].zh, b["by_dk"].en,
                     lambda d, n, seed: float((_dots(d, n, seed) / d).var()))]
    return bugs


EXACT_DRAW = Tol(1e-3, 0.0, 1.0)       # the hidden check's margin for the stated draw: 0.1 %


def probes() -> list[Probe]:
    gen = seeded(105)
    inf = float("-inf")

    def r(*shape):
        return torch.randn(*shape, generator=gen).round(decimals=2)
    attention = [b for b in ATTENTION_BUGS if b is not _WEIGHTS_ONLY] + [B_SWAPPED]
    not_last = [b for b in SOFTMAX_BUGS if b.key != "softmax_ignores_dim"]      # the same output as dim_zero_ignored
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    return [
        # softmax: small rows, a row near 1000 (overflow), then dims other than the last
        Probe("softmax_rows", args=(torch.tensor([[1.0, 2.0, 3.0], [1000.0, 1001.0, 1002.0]]),), kwargs={"dim": -1},
              reference=ref_softmax, bugs=SOFTMAX_BUGS),
        Probe("softmax_inf_row", args=(torch.tensor([[inf, inf, 3.0, inf], [0.5, 0.1, -0.2, 0.3]]),), kwargs={"dim": -1},
              reference=ref_softmax, bugs=SOFTMAX_BUGS),
        Probe("softmax_dim1", args=(r(2, 3, 4),), kwargs={"dim": 1}, reference=ref_softmax, bugs=SOFTMAX_BUGS),
        Probe("softmax_dim0", args=(r(3, 2, 4),), kwargs={"dim": 0}, reference=ref_softmax, bugs=not_last),
        Probe("softmax_default", args=(r(2, 3, 4),), reference=ref_softmax, bugs=SOFTMAX_DEFAULT_BUGS),
        # score_variance: (d_k, n_samples, seed); the student's call takes a generator made from the seed
        # 2 000 pairs: another draw lands a few per cent away, while n vs n − 1 in the variance moves it by 0.05 %
        Probe("variance", args=(16, 2_000, 20), reference=lambda d, n, seed: ref_score_variance(d, n, False, seed),
              bugs=_variance_probe_bugs(False), tol=EXACT_DRAW),
        Probe("variance_scaled", args=(16, 2_000, 20), reference=lambda d, n, seed: ref_score_variance(d, n, True, seed),
              bugs=_variance_probe_bugs(True), tol=EXACT_DRAW),
        Probe("variance_defaults", args=(16, 6), reference=lambda d, seed: ref_score_variance(d, 100_000, False, seed)),
        # attention: no batch, then two batch dims (d_k = 8, d_v = 6, n_k = 5: √d_k, √d_v and √n_k differ)
        Probe("attention", args=(r(3, 8), r(5, 8), r(5, 6)), reference=ref_attention, parts=("out", "weights"),
              bugs=attention),
        Probe("attention_batched", args=(r(2, 2, 3, 8), r(2, 2, 5, 8), r(2, 2, 5, 6)), reference=ref_attention,
              parts=("out", "weights"), bugs=attention),
        Probe("attention_masked", args=(r(2, 4, 8), r(2, 4, 8), r(2, 4, 3), causal), reference=ref_attention,
              parts=("out", "weights"), bugs=attention),
        # batch dims that broadcast from both sides: (2, 1) with (3,) gives (2, 3)
        Probe("attention_broadcast", args=(r(2, 1, 3, 8), r(3, 5, 8), r(3, 5, 4)), reference=ref_attention,
              parts=("out", "weights"), bugs=attention),
    ]

