"""Hidden tests of ch04_positions: sinusoidal_encoding, rope_frequencies,
apply_rope, is_permutation_equivariant."""
from __future__ import annotations

import contextlib
import math

import torch

from helpers.i18n import t

from .cases import (
    F32,
    FINGERPRINT,
    RELATIVE,
    Check,
    Earlier,
    Tol,
    _namespace,
    compare,
    on_its_own,
    passes,
    same,
    value_failure,
)
from .core import Bug, Raises, call, passed, seeded, stand_in
from .probes import Probe

F64 = torch.float64


# ---------------------------------------------------------------- references (float64)

def ref_sinusoidal(n, d, base=10000.0):
    """Written element by element from the formula: PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(...)."""
    pe = torch.zeros(n, d, dtype=F64)
    for i in range(d // 2):
        denom = float(base) ** (2.0 * i / d)
        for p in range(n):
            pe[p, 2 * i] = math.sin(p / denom)
            pe[p, 2 * i + 1] = math.cos(p / denom)
    return pe


def ref_frequencies(d, base=10000.0):
    return torch.tensor([float(base) ** (-2.0 * i / d) for i in range(d // 2)], dtype=F64)


def ref_rope(x, positions, base=10000.0):
    """Complex-number reference: pair (2i, 2i+1) is the complex number x_2i + j x_2i+1,
    multiplied by exp(j m theta_i)."""
    x = x.detach().to(F64)
    d = x.shape[-1]
    z = torch.complex(x[..., 0::2], x[..., 1::2])                       # (..., n, d/2)
    pos = torch.as_tensor(positions).detach().to(F64)
    angle = pos[:, None] * ref_frequencies(d, base)[None, :]            # (n, d/2)
    rot = torch.complex(torch.cos(angle), torch.sin(angle))
    w = z * rot
    out = torch.empty_like(x)
    out[..., 0::2], out[..., 1::2] = w.real, w.imag
    return out


# ---------------------------------------------------------------- known bugs: sinusoidal

def _sin_table(freq_fn, pos_shift=0.0, layout="interleaved", swap=False):
    def impl(n, d, base=10000.0):
        pos = torch.arange(n, dtype=F64)[:, None] + pos_shift
        arg = pos * freq_fn(d, float(base))[None, :]
        s, c = torch.sin(arg), torch.cos(arg)
        if swap:
            s, c = c, s
        if layout == "concat":
            return torch.cat([s, c], dim=-1)
        out = torch.empty(n, d, dtype=F64)
        out[:, 0::2], out[:, 1::2] = s, c
        return out
    return impl


def _f_ok(d, base):
    return base ** (-torch.arange(0, d, 2, dtype=F64) / d)


def _f_i_over_d(d, base):
    return base ** (-torch.arange(d // 2, dtype=F64) / d)


def _f_sign(d, base):
    return base ** (torch.arange(0, d, 2, dtype=F64) / d)


def _f_no_over_d(d, base):
    return base ** (-torch.arange(0, d, 2, dtype=F64))


def _f_4i_over_d(d, base):
    return base ** (-2 * torch.arange(0, d, 2, dtype=F64) / d)


def _sin_own_freq_per_dim(n, d, base=10000.0):
    pos = torch.arange(n, dtype=F64)[:, None]
    j = torch.arange(d, dtype=F64)
    arg = pos / float(base) ** (j / d)
    out = torch.sin(arg)
    out[:, 1::2] = torch.cos(arg[:, 1::2])
    return out


B_SIN_SWAP = Bug("sinusoidal_sin_cos_swapped",
                 "sin 和 cos 放反了：偶数维 2i 应该是 sin，奇数维 2i+1 才是 cos。",
                 "sin and cos are swapped: the even dimension 2i holds sin, the odd dimension 2i+1 holds cos.")
B_I_OVER_D = Bug("exponent_i_over_d",
                 "指数用了 i/d 而不是 2i/d：第 i 对维度的频率应为 base^(-2i/d)。",
                 "the exponent is i/d instead of 2i/d: the frequency of pair i is base^(-2i/d).")
B_POS_FROM_1 = Bug("positions_from_1",
                   "位置从 1 开始数了：第一个位置是 0（位置 0 的编码是 sin 0 = 0、cos 0 = 1）。",
                   "positions are counted from 1: the first position is 0 (its encoding is sin 0 = 0, cos 0 = 1).")
B_SIGN = Bug("exponent_wrong_sign",
             "指数的符号反了：应该是 p / base^(2i/d)（即乘以 base^(-2i/d)），你乘的是 base^(+2i/d)，频率越来越高而不是越来越低。",
             "the exponent has the wrong sign: use p / base^(2i/d) (multiply by base^(-2i/d)); you multiplied by "
             "base^(+2i/d), so the frequencies grow instead of shrinking.")
B_NO_OVER_D = Bug("exponent_missing_d",
                  "指数里漏了除以 d：应为 base^(-2i/d)，不是 base^(-2i)。",
                  "the exponent is missing its division by d: use base^(-2i/d), not base^(-2i).")
B_CONCAT = Bug("sinusoidal_concatenated_layout",
               "先放全部 sin 再放全部 cos（tensor2tensor 的拼接布局）；本章要求交错排列：第 2i 维 sin、第 2i+1 维 cos。",
               "you put all the sines first and all the cosines after (the tensor2tensor concatenated layout); "
               "this chapter interleaves them: dimension 2i is sin, dimension 2i+1 is cos.")
B_OWN_FREQ = Bug("sinusoidal_frequency_per_dimension",
                 "每一维用了自己的频率 base^(-j/d)（j 是维度号）：同一对的 sin 和 cos（2i 与 2i+1）必须共用频率 base^(-2i/d)。",
                 "every dimension got its own frequency base^(-j/d) (j the dimension index): the sin and cos of one "
                 "pair (2i and 2i+1) must share the frequency base^(-2i/d).")

B_4I = Bug("exponent_4i_over_d",
           "指数成了 4i/d：torch.arange(0, d, 2) 给出的已经是 2i（0, 2, 4, …），再乘 2 就是 4i。第 i 对的频率是 "
           "base^(-2i/d)。",
           "the exponent became 4i/d: torch.arange(0, d, 2) already gives 2i (0, 2, 4, ...), and doubling it gives 4i. "
           "Pair i has the frequency base^(-2i/d).")
B_FIXED_BASE = Bug("base_ignored",
                   "忽略了参数 base，写死了 10000：题目的公式是 base^(2i/d)，调用者传入的 base（例如 100 或 500000）要用上。",
                   "the base argument is ignored (10000 hard-coded): the formula is base^(2i/d), with the base the "
                   "caller passes (100 or 500000, say).")
B_SIN_T = Bug("sinusoidal_transposed",
              "返回的表是转置的 (d, n)：第 p 行应是位置 p 的编码，形状 (n, d)。",
              "the table you returned is transposed, (d, n): row p encodes position p, so the shape is (n, d).")

SIN_BUGS = [
    Bug(B_SIN_SWAP.key, B_SIN_SWAP.zh, B_SIN_SWAP.en, _sin_table(_f_ok, swap=True)),
    Bug(B_CONCAT.key, B_CONCAT.zh, B_CONCAT.en, _sin_table(_f_ok, layout="concat")),
    Bug(B_I_OVER_D.key, B_I_OVER_D.zh, B_I_OVER_D.en, _sin_table(_f_i_over_d)),
    Bug(B_OWN_FREQ.key, B_OWN_FREQ.zh, B_OWN_FREQ.en, _sin_own_freq_per_dim),
    Bug(B_POS_FROM_1.key, B_POS_FROM_1.zh, B_POS_FROM_1.en, _sin_table(_f_ok, pos_shift=1.0)),
    Bug(B_SIGN.key, B_SIGN.zh, B_SIGN.en, _sin_table(_f_sign)),
    Bug(B_NO_OVER_D.key, B_NO_OVER_D.zh, B_NO_OVER_D.en, _sin_table(_f_no_over_d)),
    Bug(B_FIXED_BASE.key, B_FIXED_BASE.zh, B_FIXED_BASE.en, _sin_table(lambda d, base: _f_ok(d, 10000.0))),
    Bug(B_4I.key, B_4I.zh, B_4I.en, _sin_table(_f_4i_over_d)),
]
B_SIN_BATCH = Bug("sinusoidal_extra_batch_dim",
                  "返回的表多了一个批量维，形状是 (1, n, d)（例如 unsqueeze(0)，为了直接加到 (B, n, d) 的输入上）：题目要的"
                  "是 (n, d)，它和 (B, n, d) 相加时会自动广播。",
                  "the table has an extra batch dimension, shape (1, n, d) (an unsqueeze(0), say, to add it to a "
                  "(B, n, d) input): the exercise asks for (n, d), which broadcasts over (B, n, d) by itself.")


def consistent(bugs, runs) -> list:
    """The bugs whose output is the student's on every run ``(student's output, args, kwargs)`` where they can
    be told from the right answer: one case alone can match a mistake by chance (two small frequencies both
    look like 0 on a short table), all of them together rarely do."""
    kept = []
    for bug in bugs:
        ok = True
        for out, args, kwargs, _expected in runs:
            try:
                with torch.no_grad():
                    theirs = bug.impl(*args, **kwargs)
            except Exception:  # noqa: BLE001 - a bug that cannot run here does not explain this output
                ok = False
                break
            if not same(out, theirs, FINGERPRINT):
                ok = False
                break
        if ok:
            kept.append(bug)
    return kept


B_ODD = Bug("sinusoidal_no_odd_check",
            "d 为奇数时没有抛出 ValueError：sin/cos 成对出现，d 必须是偶数，请在开头检查并 raise ValueError。",
            "no ValueError for an odd d: sin and cos come in pairs, so d must be even; check it first and raise "
            "ValueError.")


def check_sinusoidal(sinusoidal_encoding) -> None:
    passed("sinusoidal_encoding", _sin_checks(sinusoidal_encoding))


def _sin_checks(sinusoidal_encoding) -> int:
    what = "sinusoidal_encoding"
    check = Check(what, sinusoidal_encoding, reference=ref_sinusoidal, dtype_follows=None)
    formula = t("逐项对照公式：PE[p, 2i] = sin(p / base^(2i/d))，PE[p, 2i+1] = cos(同一个角度)。",
                "compare with the formula entry by entry: PE[p, 2i] = sin(p / base^(2i/d)), "
                "PE[p, 2i+1] = cos(the same angle).")
    runs = []
    for n, d, base in ((6, 4, 10000.0), (1, 2, 10000.0), (5, 6, 100.0), (48, 16, 10000.0), (20, 10, 50.0)):
        label = f"({n}, {d}, base={base:g})"
        out = check.call(n, d, base=base, label=label)
        shape = tuple(getattr(out, "shape", ()))
        out = check.tensor(label, out, (n, d), hint=t("形状是 (n, d)。", "the shape is (n, d)."),
                           bug=B_SIN_T if shape == (d, n) else B_SIN_BATCH if shape == (1, n, d) else None)
        runs.append((out, (n, d, base), {}, ref_sinusoidal(n, d, base)))
    bugs = consistent(SIN_BUGS, runs)
    for out, (n, d, base), _, expected in runs:
        check.expect(f"({n}, {d}, base={base:g})", out, expected, bugs=bugs, bug_args=(n, d, base), hint=formula)
    out = check.call(7, 8, label="(7, 8)")
    check.expect("(7, 8)", out, ref_sinusoidal(7, 8), hint=t("base 的默认值是 10000.0。", "the default base is 10000.0."))
    for d in (5, 1):
        check.raises(f"(4, {d})", ValueError, 4, d, bug_if={Exception: B_ODD, None: B_ODD})
    return check.n


# ---------------------------------------------------------------- rope_frequencies

B_FREQ_ALL = Bug("frequencies_for_all_d",
                 "算出了 d 个频率，而不是 d/2 个：每一对维度 (2i, 2i+1) 共用一个频率，i = 0 … d/2-1。",
                 "you computed d frequencies instead of d/2: each pair of dimensions (2i, 2i+1) shares one "
                 "frequency, i = 0 … d/2-1.")

B_FREQ_ROW = Bug("frequencies_extra_dim",
                 "返回的频率多了一维，形状是 (1, d/2)（例如 [None, :] 或 unsqueeze(0)，为了和位置相乘）：题目要的是 (d/2,)，"
                 "广播留给用它的地方去做。",
                 "the frequencies have an extra dimension, shape (1, d/2) ([None, :] or unsqueeze(0), say, ready to "
                 "multiply by the positions): the exercise asks for (d/2,); leave broadcasting to the code that uses it.")
B_FREQ_F64 = Bug("frequencies_not_float64",
                 "频率不是 float64：torch.arange 默认给出整数或 float32，base ** (...) 的结果于是也是 float32，只有约 7 位"
                 "有效数字；apply_rope 要拿它乘几十万的位置，θ 的误差会跟着放大。让计算全程用 float64（例如 "
                 "torch.arange(..., dtype=torch.float64)），返回 float64。",
                 "the frequencies are not float64: torch.arange gives integers or float32 by default, so base ** (...) "
                 "is float32 too, with about 7 significant digits; apply_rope multiplies them by positions in the "
                 "hundreds of thousands, which magnifies θ's error. Keep the computation in float64 (torch.arange(..., "
                 "dtype=torch.float64), say) and return float64.")
FREQ_BUGS = [
    Bug(B_4I.key, B_4I.zh, B_4I.en, lambda d, base=10000.0: _f_4i_over_d(d, float(base))),
    Bug(B_I_OVER_D.key, B_I_OVER_D.zh, B_I_OVER_D.en, lambda d, base=10000.0: _f_i_over_d(d, float(base))),
    Bug(B_SIGN.key, B_SIGN.zh, B_SIGN.en, lambda d, base=10000.0: _f_sign(d, float(base))),
    Bug(B_NO_OVER_D.key, B_NO_OVER_D.zh, B_NO_OVER_D.en, lambda d, base=10000.0: _f_no_over_d(d, float(base))),
    Bug(B_FIXED_BASE.key, B_FIXED_BASE.zh, B_FIXED_BASE.en, lambda d, base=10000.0: _f_ok(d, 10000.0)),
]


def check_frequencies(rope_frequencies) -> None:
    passed("rope_frequencies", _freq_checks(rope_frequencies))


def _freq_checks(rope_frequencies) -> int:
    what = "rope_frequencies"
    check = Check(what, rope_frequencies, dtype_follows=None)
    runs = []
    for d, base in ((8, 10000.0), (2, 10000.0), (64, 10000.0), (10, 500.0), (128, 500000.0)):
        label = f"({d}, base={base:g})"
        out = check.call(d, base=base, label=label)
        shape = tuple(getattr(out, "shape", ()))
        check.tensor(label, out, (d // 2,), bug=B_FREQ_ALL if shape == (d,) else B_FREQ_ROW if shape == (1, d // 2)
                     else None, hint=t("每对维度一个频率：形状 (d/2,)。", "one frequency per pair: shape (d/2,)."))
        runs.append((out, (d, base), {}, ref_frequencies(d, base)))
    bugs = consistent(FREQ_BUGS, runs)
    for out, (d, base), _, expected in runs:
        # the frequencies span many orders of magnitude: each is judged relative to itself
        check.expect(f"({d}, base={base:g})", out, expected, tol=RELATIVE, bugs=bugs, bug_args=(d, base))
    for out, (d, base), _, _ in runs:
        if out.dtype != F64:
            raise check.fail(t(f"({d}, base={base:g})：dtype", f"({d}, base={base:g}): dtype"), "torch.float64",
                             str(out.dtype), B_FREQ_F64)
        check.n += 1
    check.expect("(16)", check.call(16, label="(16)"), ref_frequencies(16), tol=RELATIVE,
                 hint=t("base 的默认值是 10000.0。", "the default base is 10000.0."))
    return check.n


# ---------------------------------------------------------------- apply_rope

def _rope_impl(freq_fn=_f_ok, layout="adjacent", sign=1.0, swap=False, pos_shift=0.0, table="pair", counted=False,
               truncated=False, back="interleaved", reflect=False):
    def impl(x, positions, base=10000.0):
        x = x.detach().to(F64)
        d = x.shape[-1]
        theta = freq_fn(d, float(base))
        pos = torch.arange(x.shape[-2]) if counted else torch.as_tensor(positions)
        if truncated:
            pos = pos.long()
        ang = (pos.to(F64)[:, None] + pos_shift) * theta[None, :] * sign   # (n, d/2)
        if back == "halves" or reflect:
            a, b = x[..., 0::2], x[..., 1::2]
            c, s = torch.cos(ang), torch.sin(ang)
            second = a * s - b * c if reflect else a * s + b * c
            if back == "halves":
                return torch.cat([a * c - b * s, second], dim=-1)
            return torch.stack([a * c - b * s, second], dim=-1).flatten(-2)
        c, s = torch.cos(ang), torch.sin(ang)
        if swap:
            c, s = s, c
        if layout == "half":
            x1, x2 = x[..., : d // 2], x[..., d // 2:]
            return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1)
        if table == "cat":     # cos/sin tables built for rotate-half, used with adjacent pairs
            c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
        else:
            c, s = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
        x_rot = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        return x * c + x_rot * s
    return impl


ROPE_BUGS = [
    Bug("rope_rotate_half_layout",
        "你用了 GPT-NeoX/LLaMA 的 rotate-half 布局（把第 i 维和第 i+d/2 维配对）；本章把相邻的两维 (2i, 2i+1) 配成一对。",
        "you used the GPT-NeoX/LLaMA rotate-half layout (dimension i paired with i+d/2); this chapter pairs "
        "adjacent dimensions (2i, 2i+1).", _rope_impl(layout="half")),
    Bug("rope_negative_angle",
        "旋转方向反了（转了 -mθ）：第 2i 维应为 x_2i·cos − x_2i+1·sin，第 2i+1 维应为 x_2i·sin + x_2i+1·cos。",
        "you rotated by −mθ (the wrong direction): dimension 2i is x_2i·cos − x_2i+1·sin, dimension 2i+1 is "
        "x_2i·sin + x_2i+1·cos.", _rope_impl(sign=-1.0)),
    Bug("rope_sin_cos_swapped",
        "旋转公式里 sin 和 cos 放反了：旋转矩阵是 [[cos, −sin], [sin, cos]]。",
        "sin and cos are swapped inside the rotation: the rotation matrix is [[cos, −sin], [sin, cos]].",
        _rope_impl(swap=True)),
    Bug("rope_cat_tables_with_adjacent_pairs",
        "cos/sin 表用 torch.cat((θ, θ)) 铺开（那是 rotate-half 布局的写法），却用在相邻配对上：第 2i 和 2i+1 维必须用同一个角度，应该用 repeat_interleave(2)。",
        "the cos/sin tables were spread with torch.cat((θ, θ)) (the rotate-half recipe) but used with adjacent "
        "pairs: dimensions 2i and 2i+1 need the same angle, so use repeat_interleave(2).", _rope_impl(table="cat")),
    Bug(B_I_OVER_D.key, B_I_OVER_D.zh, B_I_OVER_D.en, _rope_impl(freq_fn=_f_i_over_d)),
    Bug(B_SIGN.key, B_SIGN.zh, B_SIGN.en, _rope_impl(freq_fn=_f_sign)),
    Bug(B_NO_OVER_D.key, B_NO_OVER_D.zh, B_NO_OVER_D.en, _rope_impl(freq_fn=_f_no_over_d)),
    Bug(B_POS_FROM_1.key,
        "位置多加了 1：位置 m 的旋转角是 m·θ_i，位置 0 不旋转（恒等变换）。",
        "the positions are shifted by one: position m rotates by m·θ_i, and position 0 is not rotated at all "
        "(the identity).", _rope_impl(pos_shift=1.0)),
    Bug("rope_rotate_half_negative_angle",
        "你用了 GPT-NeoX/LLaMA 的 rotate-half 布局，而且旋转方向也反了；本章把相邻的两维 (2i, 2i+1) 配成一对，旋转 +mθ。",
        "you used the GPT-NeoX/LLaMA rotate-half layout, and rotated in the wrong direction too; this chapter "
        "pairs adjacent dimensions (2i, 2i+1) and rotates by +mθ.", _rope_impl(layout="half", sign=-1.0)),
    Bug("rope_ignores_positions",
        "没有用传入的 positions，而是把 token 按 0、1、2… 编号（arange(n)）：第 m 个 token 的位置是 positions[m]，"
        "可以不连续（例如 [3, 17, 40]，生成时接着前文的位置）。",
        "the positions you were given are not used; the tokens are numbered 0, 1, 2, … (arange(n)) instead: token m "
        "sits at positions[m], which need not be consecutive ([3, 17, 40], say, when generation continues a text).",
        _rope_impl(counted=True)),
    Bug(B_FIXED_BASE.key, B_FIXED_BASE.zh, B_FIXED_BASE.en, _rope_impl(freq_fn=lambda d, base: _f_ok(d, 10000.0))),
    Bug(B_4I.key, B_4I.zh, B_4I.en, _rope_impl(freq_fn=_f_4i_over_d)),
    Bug("rope_positions_truncated",
        "浮点位置被截成了整数（例如 positions.long() 或 int(...)）：0.5 变成了 0，2.25 变成了 2。positions 可以是浮点数"
        "（位置插值就会给出 0.5 这样的位置），角度直接用 positions[m]·θ_i 算，转成 float64 而不是整数。",
        "float positions were cut to integers (positions.long() or int(...), say): 0.5 became 0, 2.25 became 2. "
        "Positions may be floats (position interpolation gives positions like 0.5); compute the angle "
        "positions[m]·θ_i directly, converting to float64, not to an integer.", _rope_impl(truncated=True)),
    Bug("rope_pairs_put_back_as_halves",
        "每一对都转对了，但放回去的位置不对：结果成了 [所有对的第一维, 所有对的第二维]（例如 torch.cat，或者 stack 在 "
        "dim=-2 上）。第 i 对转完还要放回第 2i 和 2i+1 维：stack 在 dim=-1 上再 flatten(-2)。",
        "every pair is rotated right but put back in the wrong place: the result is [the first of every pair, the "
        "second of every pair] (torch.cat, or a stack on dim=-2, say). Pair i goes back to dimensions 2i and 2i+1: "
        "stack on dim=-1, then flatten(-2).", _rope_impl(back="halves")),
    Bug("rope_reflection_not_rotation",
        "第 2i+1 维的符号错了：写成了 x_2i·sin − x_2i+1·cos，这是一次反射，不是旋转（长度不变，但 ⟨R_m q, R_n k⟩ 不再"
        "只取决于 n − m）。旋转矩阵是 [[cos, −sin], [sin, cos]]：第 2i+1 维是 x_2i·sin + x_2i+1·cos。",
        "the sign in dimension 2i+1 is wrong: x_2i·sin − x_2i+1·cos is a reflection, not a rotation (lengths stay, "
        "but ⟨R_m q, R_n k⟩ no longer depends on n − m alone). The rotation matrix is [[cos, −sin], [sin, cos]]: "
        "dimension 2i+1 is x_2i·sin + x_2i+1·cos.", _rope_impl(reflect=True)),
]

B_ROPE_2D = Bug("rope_assumes_2d_input",
                "代码假定 x 只有两维 (n, d)（例如 n, d = x.shape，或者用 x[:, 0::2] 取每对：有批量维时它切的是倒数"
                "第二维以外的一维）：x 的形状是 (..., n, d)，前面可以有任意多个批量维。用 x.shape[-1] 取 d，用 "
                "x[..., 0::2] 取每对的第一维。",
                "your code assumes x has two dimensions (n, d) (n, d = x.shape, or pairs taken with x[:, 0::2], which "
                "slices another dimension once there are batch dimensions): x has shape (..., n, d) with any number of "
                "leading batch dimensions. Take d from x.shape[-1] and the pairs with x[..., 0::2].")
B_POS_NOT_OUTER = Bug("rope_positions_not_broadcast",
                      "positions (n,) 直接乘 θ (d/2,)：两个一维张量逐元素相乘，长度不同就报错，长度碰巧相同时算出的也不是"
                      "角度表。角度表是 (n, d/2) 的外积：positions[:, None] * θ[None, :]（或 torch.outer）。",
                      "positions (n,) times θ (d/2,) directly: two 1-D tensors multiply element by element, which fails "
                      "when their lengths differ and, when they happen to match, is not the table of angles. The "
                      "angles are an (n, d/2) outer product: positions[:, None] * θ[None, :] (or torch.outer).")
B_ROPE_MERGED = Bug("rope_batch_dims_merged",
                    "输出的形状不是 x 的形状：批量维被并进了一维（例如 reshape(-1, d)）。(..., n, d) 进，(..., n, d) 出："
                    "用 flatten(-2) 只合并最后两维，或者 reshape(x.shape)。",
                    "the output does not have x's shape: the batch dimensions were merged into one (reshape(-1, d), "
                    "say). (..., n, d) in, (..., n, d) out: merge only the last two dimensions with flatten(-2), or "
                    "reshape(x.shape).")
B_ROPE_INDEX = Bug("rope_positions_used_as_indices",
                   "把 positions 当成了下标去查一张预先算好的表：positions 可以是浮点数（例如 0.5、2.25），不能当下标。"
                   "直接用 positions[m]·θ_i 算角度。",
                   "you used positions as indices into a precomputed table: positions may be floats (0.5, 2.25), "
                   "which cannot index anything. Compute the angle positions[m]·θ_i directly.")
B_ROPE_TABLE = Bug("rope_fixed_size_table",
                   "cos/sin 表是按固定长度预先建好的，位置超出表长就出错：位置可以任意大，用传入的 positions 直接算角度。",
                   "the cos/sin table was built once for a fixed length and fails past it: positions can be as large as "
                   "they come; compute the angles from the positions you are given.")
B_ROPE_VIEW = Bug("rope_view_needs_contiguous",
                  "用了 x.view(...)：注意力里传进来的 q、k 往往是转置过的（例如 (B, n, h, d) 转成 (B, h, n, d)），"
                  "内存不连续，view 会报错。形状 (..., n, d) 的任何张量都要能处理：用 reshape，或者 x[..., 0::2] 取每对。",
                  "you used x.view(...): the q and k that attention passes in are often transposed ((B, n, h, d) to "
                  "(B, h, n, d), say) and not contiguous in memory, and view fails on them. Any tensor of shape "
                  "(..., n, d) must work: use reshape, or take the pairs with x[..., 0::2].")
ROPE_HINTS = [
    (Raises(contains=("view size is not compatible",), types=("RuntimeError",)), B_ROPE_VIEW),
    (Raises(contains=("unpack",), types=("ValueError",), line=("shape",)), B_ROPE_2D),
    (Raises(contains=("indices must be",), types=("IndexError",)), B_ROPE_INDEX),
    (Raises(contains=("out of bounds",), types=("IndexError",)), B_ROPE_TABLE),
    (Raises(contains=("must match the size",), types=("RuntimeError",), line=("positions",)), B_POS_NOT_OUTER),
]
# once a plain (n, d) input has passed: sizes that fail to match only with batch dimensions
BATCH_HINTS = [(Raises(contains=("must match the size",), types=("RuntimeError",)), B_ROPE_2D)]
B_ROPE_NOT_FLAT = Bug("rope_pairs_not_flattened",
                      "输出多了一维 (..., n, d/2, 2)：把每对重新交错回 d 维，用 torch.stack([a, b], dim=-1).flatten(-2)。",
                      "the output has an extra dimension, (..., n, d/2, 2): interleave the pairs back into d "
                      "dimensions with torch.stack([a, b], dim=-1).flatten(-2).")
B_ROPE_DTYPE = Bug("rope_dtype_not_kept",
                   "输出没有保持 x 的 dtype：角度用 float64 算完后，cos 和 sin 要先 .to(x.dtype) 再和 x 相乘"
                   "（float64 的 cos 乘 float32 的 x 得到的是 float64，float32 的 cos 乘半精度的 x 得到的是 float32）。",
                   "the output does not keep x's dtype: after computing the angles in float64, convert cos and sin "
                   "with .to(x.dtype) before multiplying by x (float64 cos times float32 x gives float64, float32 cos "
                   "times half-precision x gives float32).")
B_ROPE_F32 = Bug("rope_angles_in_float32",
                 "位置很大时角度不准：角度 positions[m]·θ_i 是用 float32 算的（例如 positions.float() 或 .to(x.dtype) "
                 "再乘 θ），或者 θ 先是 float32、之后才转成 float64。float32 只有约 7 位有效数字，位置 6 万时角度就差约 "
                 "0.004 弧度。题目要求角度用 float64 计算（positions 和 θ 从一开始就是 float64），cos、sin 算完再转回 "
                 "x.dtype。",
                 "the angles are off at large positions: positions[m]·θ_i was computed in float32 (positions.float() "
                 "or .to(x.dtype) times θ, say), or from a θ that was float32 before it was cast up; float32 keeps "
                 "about 7 significant digits, so at position 60,000 the angle is off by about 0.004 radians. The "
                 "exercise asks for the angles in float64 (positions and θ both float64 from the start), with cos "
                 "and sin converted back to x.dtype afterwards.")

INPLACE = Bug("rope_modifies_input", "apply_rope 改写了传入的 x（原地操作）：应该返回一个新张量，x 保持不变。",
              "apply_rope changed the x it was given (an in-place operation): return a new tensor and leave x alone.")


def _rope(check, x, positions, label, base=None):
    x_in = x.clone()        # the student's function gets this very tensor (check.call would hand it a copy)
    hints = check.hints + (BATCH_HINTS if x.dim() > 2 else [])    # the rows start with a plain (n, d) input
    out = call(check.fn, x_in, positions.clone(), what=f"{check.what}: {label}", hints=hints,
               **({} if base is None else {"base": base}))
    if not torch.equal(x_in, x):
        raise check.fail(label, t("x 不变", "x unchanged"), t("x 被修改了", "x was modified"), INPLACE)
    unflat = tuple(x.shape[:-1]) + (x.shape[-1] // 2, 2)
    merged = (x.numel() // x.shape[-1], x.shape[-1])
    shape = tuple(getattr(out, "shape", ()))
    out = check.tensor(label, out, x.shape, hint=t("输出和 x 形状相同。", "the output has x's shape."),
                       bug=B_ROPE_NOT_FLAT if shape == unflat else B_ROPE_MERGED if shape == merged else None)
    if out.dtype != x.dtype:
        raise check.fail(t(f"{label}：输出的 dtype", f"{label}: dtype of the output"), str(x.dtype), str(out.dtype),
                         B_ROPE_DTYPE)
    return out


def _rope_cases():
    gen = seeded(404)
    r = lambda *shape, dtype=torch.float32: torch.randn(*shape, generator=gen, dtype=dtype)  # noqa: E731
    rows = [
        (t("(n=5, d=8)，位置 0…4", "(n=5, d=8), positions 0…4"), r(5, 8), torch.arange(5), None),
        (t("批量维 (2, 3)，n=4，d=6，base=100", "batch dims (2, 3), n=4, d=6, base=100"),
         r(2, 3, 4, 6), torch.arange(4), 100.0),
        (t("不连续的整数位置 [3, 17, 40]", "non-consecutive integer positions [3, 17, 40]"),
         r(3, 16), torch.tensor([3, 17, 40]), None),
        (t("浮点位置 [0.5, 2.25, 7.0]", "float positions [0.5, 2.25, 7.0]"), r(2, 3, 4), torch.tensor([0.5, 2.25, 7.0]), None),
        (t("d=2（只有一对，θ_0 = 1）", "d=2 (a single pair, θ_0 = 1)"), r(4, 2), torch.arange(4), None),
        (t("float64 输入", "float64 inputs"), r(2, 6, 32, dtype=F64), torch.arange(6) * 3, 10000.0),
        (t("注意力里转置过的 q（内存不连续），形状 (2, 3, 4, 8)", "a transposed q as in attention (not contiguous), "
           "shape (2, 3, 4, 8)"), r(2, 4, 3, 8).transpose(1, 2), torch.arange(4), None),
    ]
    return gen, rows


def _rope_properties(check, gen) -> None:
    """float64: a rotation keeps lengths, position 0 is the identity, scores depend on n − m only."""
    x = torch.randn(3, 5, 16, generator=gen, dtype=F64)
    out = _rope(check, x, torch.tensor([0, 1, 9, 30, 250]), t("长度", "lengths"))
    check.expect(t("旋转不改变每个向量的长度", "a rotation keeps every vector's length"), out.norm(dim=-1),
                 x.norm(dim=-1), hint=t("每一对都要乘一个旋转矩阵 [[cos, −sin], [sin, cos]]。",
                                                   "each pair is multiplied by a rotation matrix [[cos, −sin], [sin, cos]]."))
    zeros = torch.zeros(5, dtype=torch.long)
    check.expect(t("位置全为 0 时应是恒等变换", "all positions 0 must be the identity"),
                 _rope(check, x, zeros, t("位置 0", "positions 0")), x, bugs=[ROPE_BUGS[7]], bug_args=(x, zeros, 10000.0))
    for d in (8, 16, 32, 64):
        q, k = (torch.randn(2, 1, d, generator=gen, dtype=F64) for _ in range(2))
        m, n = (int(v) for v in torch.randint(0, 200, (2,), generator=gen))
        label = t(f"⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩，m={m}, n={n}, d={d}", f"⟨R_m q, R_n k⟩ = ⟨q, R_(n−m) k⟩ with m={m}, n={n}, d={d}")
        lhs = (_rope(check, q, torch.tensor([m]), label) * _rope(check, k, torch.tensor([n]), label)).sum(-1)
        rhs = (q * _rope(check, k, torch.tensor([n - m]), label)).sum(-1)
        # judged relative to |q|·|k|, the largest a dot product of these two can be
        check.expect(label, lhs, rhs, tol=Tol(0.0, 1e-3, float(q.norm() * k.norm() / 2)),
                     hint=t("每一对维度必须做真正的旋转（同一个角度 mθ_i 作用在 2i 和 2i+1 上）。",
                            "each pair must be a true rotation (one angle mθ_i acting on 2i and 2i+1)."))


@contextlib.contextmanager
def _exact_frequencies(apply_rope):
    """While the block runs, the ``rope_frequencies`` that the student's apply_rope finds is exact float64:
    the large-position case then judges apply_rope's own angles, not the precision of exercise 2's answer
    (which may be float32 and is right at its own tolerance)."""
    space = _namespace(apply_rope)
    theirs = space.get("rope_frequencies")
    if theirs is None:
        yield
        return
    obj, retire = stand_in(frequencies_stand_in)
    space["rope_frequencies"] = obj
    try:
        yield
    finally:
        retire()
        if space.get("rope_frequencies") is obj:
            space["rope_frequencies"] = theirs


def _rope_far(check, gen) -> None:
    """Positions up to 500,000 (long contexts): angles computed in float32 are off by up to 0.03 radians,
    in float64 they are exact to far below float32's rounding of the output."""
    x = torch.randn(2, 6, 32, generator=gen)
    pos = torch.tensor([5, 3_000, 16_411, 65_537, 131_071, 500_003])
    label = t("很大的位置 [5, 3000, 16411, 65537, 131071, 500003]（float32 输入）",
              "large positions [5, 3000, 16411, 65537, 131071, 500003] (float32 input)")
    with _exact_frequencies(check.fn):
        out = _rope(check, x, pos, label)
    expected = ref_rope(x, pos)
    v = compare(out, expected, F32)
    if v.problem is None:
        check.n += 1
        return
    # every smaller case passed: a difference this small at large positions is the angles' precision
    bug = B_ROPE_F32 if v.largest <= 0.1 * v.scale else None
    raise value_failure(f"{check.what}: {label}", out, expected, F32, v, bug,
                        hint=t("角度 positions[m]·θ_i 用 float64 计算。", "compute the angles positions[m]·θ_i in float64."))


def check_rope(apply_rope) -> None:
    with on_its_own(apply_rope, EARLIER_ROPE):
        passed("apply_rope", _rope_checks(apply_rope))


def _rope_checks(apply_rope) -> int:
    what = "apply_rope"
    check = Check(what, apply_rope, hints=ROPE_HINTS)
    gen, rows = _rope_cases()
    runs = []
    for label, x, pos, base in rows:
        b = 10000.0 if base is None else base
        runs.append((_rope(check, x, pos, label, base), (x, pos, b), {}, ref_rope(x, pos, b)))
    bugs = consistent(ROPE_BUGS, runs)
    for (label, *_), (out, (x, pos, b), _, expected) in zip(rows, runs):
        check.expect(t(f"{label}：旋转后的值", f"{label}: rotated values"), out, expected, bugs=bugs, bug_args=(x, pos, b))
    _rope_properties(check, gen)
    _rope_far(check, gen)
    _rope_half(check)
    return check.n


def _rope_half(check) -> None:
    """Half precision: the output keeps x's dtype (float32 cos and sin would turn it into float32)."""
    x = torch.randn(3, 5, 8, generator=seeded(406)).half()
    pos = torch.arange(5) * 7
    label = t("半精度（float16）输入", "half-precision (float16) input")
    out = _rope(check, x, pos, label)
    check.expect(t(f"{label}：旋转后的值", f"{label}: rotated values"), out.to(F64), ref_rope(x.to(F64), pos),
                 tol=Tol(1e-2, 1e-2))


# ---------------------------------------------------------------- earlier exercises, standing in for wrong ones

def sinusoidal_stand_in(n, d, base=10000.0):
    """A correct sinusoidal_encoding for a test cell to call, in the default dtype like the model solution."""
    if d % 2:
        raise ValueError(f"d must be even, got {d}")
    angle = torch.arange(n, dtype=F64)[:, None] * float(base) ** (-torch.arange(0, d, 2, dtype=F64) / d)
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(n, d).to(torch.get_default_dtype())


def frequencies_stand_in(d, base=10000.0):
    """A correct rope_frequencies for a student's apply_rope to call (float64, like the model solution)."""
    return float(base) ** (-torch.arange(0, d, 2, dtype=F64) / d)


def rope_stand_in(x, positions, base=10000.0):
    """A correct apply_rope for a test cell to call: a new tensor in x's dtype, autograd kept."""
    angle = torch.as_tensor(positions).to(F64)[:, None] * frequencies_stand_in(x.shape[-1], base)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


# each probe is the exercise's own hidden check: a stand-in comes in exactly when it lost its points
SINUSOIDAL = Earlier("sinusoidal_encoding", 1, passes(_sin_checks), sinusoidal_stand_in)
FREQUENCIES = Earlier("rope_frequencies", 2, passes(_freq_checks), frequencies_stand_in)
ROPE = Earlier("apply_rope", 3, passes(_rope_checks), rope_stand_in)
EARLIER_ROPE = (FREQUENCIES,)                      # apply_rope calls rope_frequencies
# is_permutation_equivariant's test cell adds the encodings of exercises 1 and 3 (and so 2) to attention;
# rope_frequencies comes before apply_rope, whose probe then runs with a correct one if needed
EARLIER_PERMUTATION = (SINUSOIDAL, FREQUENCIES, ROPE)


# ---------------------------------------------------------------- is_permutation_equivariant

def _position_free_attention():
    """The function handed to the student's check. It is built inside a factory so
    that its code is not a module-level grading function (core.call flags those when
    a student's code runs them)."""
    def attend(x):
        s = x @ x.transpose(-2, -1) / math.sqrt(x.shape[-1])
        return torch.softmax(s, dim=-1) @ x
    return attend


def _pe_bug(kind, default_atol=1e-5):
    def impl(f, x, perm, atol=default_atol):
        if kind == "no_output_perm":
            a, b = f(x[..., perm, :]), f(x)
        elif kind == "inverse":
            a, b = f(x[..., perm, :]), f(x)[..., torch.argsort(perm), :]
        elif kind == "dim0":
            a, b = f(x[perm]), f(x)[perm]
        elif kind == "feature":
            a, b = f(x[..., perm]), f(x)[..., perm]
        else:
            a, b = f(x[..., perm, :]), f(x)[..., perm, :]
        if kind == "exact":
            return bool(torch.equal(a, b))
        if kind == "default_tol":
            return bool(torch.allclose(a, b))
        if kind == "relative":
            return bool(torch.allclose(a, b, atol=atol))
        if kind == "strict":
            return bool(((a.to(F64) - b.to(F64)).abs() < atol).all())
        return bool(((a.to(F64) - b.to(F64)).abs() <= atol).all())
    return impl


PERM_BUGS = [
    Bug("perm_output_not_permuted",
        "把 f(x[perm]) 和没有重排的 f(x) 比较了：等变的意思是输出也按同一个 perm 重排，应比较 f(x[perm]) 和 f(x)[perm]。",
        "you compared f(x[perm]) with f(x) itself: equivariance means the output is permuted the same way, so "
        "compare f(x[perm]) with f(x)[perm].", _pe_bug("no_output_perm")),
    Bug("perm_inverse_permutation",
        "输出用的是逆置换（argsort(perm)）：输入怎么重排，输出就要怎么重排，比较 f(x[..., perm, :]) 和 f(x)[..., perm, :]。",
        "you permuted the output with the inverse permutation (argsort(perm)): the output must be permuted "
        "exactly like the input, f(x[..., perm, :]) vs f(x)[..., perm, :].", _pe_bug("inverse")),
    Bug("perm_wrong_dim",
        "重排的是第 0 维（批量维）而不是 token 维：x 的形状是 (..., n, d)，token 在倒数第二维，用 x[..., perm, :]。",
        "you permuted dimension 0 (a batch dimension) instead of the token dimension: x has shape (..., n, d), "
        "tokens are the second-to-last dimension, so use x[..., perm, :].", _pe_bug("dim0")),
    Bug("perm_exact_equality",
        "用了精确相等（torch.equal 或 ==）：浮点运算换个顺序求和就会差 1e-7 左右，要在容差 atol 以内比较。",
        "you tested exact equality (torch.equal or ==): floating-point sums taken in another order differ by about "
        "1e-7, so compare within the tolerance atol.", _pe_bug("exact")),
    Bug("perm_ignores_atol",
        "没有使用参数 atol（比如直接用了 torch.allclose 的默认容差）：判断应是 |f(x[perm]) − f(x)[perm]| ≤ atol。",
        "the atol argument is ignored (for example torch.allclose with its default tolerances): the test is "
        "|f(x[perm]) − f(x)[perm]| ≤ atol.", _pe_bug("default_tol")),
    Bug("perm_strictly_less_than_atol",
        "用了 < atol：题目说差“不超过 atol”时返回 True，差恰好等于 atol 也算，应写 <= atol。",
        "you tested < atol: the exercise returns True when every difference is at most atol, so a difference of "
        "exactly atol counts too; write <= atol.", _pe_bug("strict")),
    Bug("perm_relative_tolerance",
        "用了 torch.allclose(a, b, atol=atol)（或 isclose）而没有写 rtol=0：它还允许 rtol·|b| 的相对误差，"
        "数值大时差远超 atol 也返回 True。题目只允许每个元素差不超过 atol：加 rtol=0，或写 (a - b).abs() <= atol。",
        "you used torch.allclose(a, b, atol=atol) (or isclose) without rtol=0: it also allows a relative error "
        "rtol·|b|, so for large values a difference far above atol still gives True. The exercise allows each "
        "element to differ by at most atol: pass rtol=0, or write (a - b).abs() <= atol.", _pe_bug("relative")),
]
PERM_DEFAULT_ATOL = Bug("perm_default_atol_changed",
                        "atol 的默认值不是 1e-5：题目的函数头是 is_permutation_equivariant(f, x, perm, atol=1e-5)，"
                        "不传 atol 时就按 1e-5 判断。",
                        "the default of atol is not 1e-5: the exercise's signature is "
                        "is_permutation_equivariant(f, x, perm, atol=1e-5), so a call without atol judges at 1e-5.")
PERM_FEATURE_DIM = Bug("perm_feature_dim",
                       "重排的是最后一维（特征）而不是 token 维：x[..., perm] 打乱的是每个 token 向量里的各个数。x 的形状是 "
                       "(..., n, d)，token 在倒数第二维，用 x[..., perm, :]。",
                       "you permuted the last dimension (the features) instead of the tokens: x[..., perm] shuffles the "
                       "numbers inside each token's vector. x has shape (..., n, d) and the tokens are the "
                       "second-to-last dimension: use x[..., perm, :].", _pe_bug("feature"))


PERM_ELEMENTWISE = Bug("perm_elementwise_tensor",
                       "返回的是逐元素比较得到的一整个张量：题目要一个 True 或 False。用 .all() 把它合成一个值"
                       "（再 bool(...) 或 .item()）。",
                       "you returned the whole element-wise comparison as a tensor: the exercise asks for one True or "
                       "False. Reduce it with .all() (then bool(...) or .item()).")

PERM_NOT_PYTHON_BOOL = Bug("perm_returns_tensor_not_bool",
                           "返回的是装着一个真值的张量或 numpy 值，而不是 Python 的 True / False：用 bool(...) 或 "
                           ".item() 把它变成 Python 的 bool。",
                           "you returned a tensor (or numpy value) holding one truth value, not Python's True / False: "
                           "turn it into a Python bool with bool(...) or .item().")

PERM_ERRORS = [(Raises(types=("IndexError",), line=("[...,perm]",)), PERM_FEATURE_DIM),
               (Raises(types=("IndexError",), contains=("for dimension 0",)), PERM_BUGS[2])]
DIM0_HINT = PERM_ERRORS[:1] + [
    (lambda exc, line: isinstance(exc, IndexError) and "[..." not in line.replace(" ", ""), PERM_BUGS[2])]


def _is_numpy_bool(value) -> bool:
    """numpy's truth value (numpy.bool_, named ``bool`` since numpy 2): not Python's bool."""
    import numpy as np
    return isinstance(value, np.bool_)


def _permutation_cases():
    _attend = _position_free_attention()
    gen = seeded(505)
    x5 = torch.randn(5, 4, generator=gen)
    xb = torch.randn(2, 5, 8, generator=gen)
    cyc = torch.tensor([1, 2, 3, 4, 0])            # not its own inverse
    swap = torch.tensor([4, 1, 2, 3, 0])
    rev = torch.arange(4, -1, -1)
    pe = ref_sinusoidal(5, 8).to(torch.float32)
    ramp = torch.arange(5, dtype=torch.float32)[:, None]
    whole = torch.arange(20, dtype=torch.float32).reshape(5, 4)     # whole numbers: every difference is exact
    first_two = torch.tensor([1, 0, 2, 3, 4])
    return [  # (label, f, x, perm, atol, the right answer)
        (t("无位置注意力，循环移位", "position-free attention, a cyclic shift"), _attend, x5, cyc, 1e-5, True),
        (t("无位置注意力，批量维 (2, 5, 8)", "position-free attention, batch dims (2, 5, 8)"), _attend, xb, cyc, 1e-5, True),
        (t("加上正弦位置编码的注意力", "attention with a sinusoidal encoding added"), lambda x: _attend(x + pe),
         xb, cyc, 1e-5, False),
        (t("按位置累加 cumsum（不等变）", "a running sum cumsum along positions (not equivariant)"),
         lambda x: x.cumsum(-2), x5, swap, 1e-5, False),
        (t("逐元素函数 tanh，交换两个 token", "an element-wise tanh, two tokens swapped"), torch.tanh, xb, swap, 1e-5, True),
        (t("所有 token 的平均值（置换不变，因而也等变）", "the mean over tokens, broadcast back (invariant, hence equivariant)"),
         lambda x: x.mean(-2, keepdim=True).expand_as(x) + 0 * x, x5, rev, 1e-5, True),
        (t("只差 1e-7 的舍入误差，atol=1e-5", "differences of 1e-7 only (rounding), atol=1e-5"),
         lambda x: _attend(x) + 1e-7 * ramp, x5, cyc, 1e-5, True),
        (t("差 1e-4，atol=1e-3", "differences of 1e-4, atol=1e-3"), lambda x: x + 1e-4 * ramp, x5, rev, 1e-3, True),
        (t("差 1e-4，atol=1e-6", "differences of 1e-4, atol=1e-6"), lambda x: x + 1e-4 * ramp, x5, rev, 1e-6, False),
        (t("差恰好等于 atol（0.5，atol=0.5）", "differences of exactly atol (0.5, atol=0.5)"),
         lambda x: x + 0.5 * ramp, whole, first_two, 0.5, True),
        (t("反转顺序（它自己就是一种按位置的操作）", "reversing the order (itself a positional operation)"),
         lambda x: x.flip(-2), x5, cyc, 1e-5, False),
        (t("数值约 100000，差 0.5，atol=0.25", "values near 100000, differences of 0.5, atol=0.25"),
         lambda x: x + 0.5 * ramp, 100_000 + whole, first_two, 0.25, False),
        (t("差最多 8e-4，不传 atol（默认 1e-5）", "differences up to 8e-4, atol not passed (default 1e-5)"),
         lambda x: x + 2e-4 * ramp, x5, rev, None, False),
        (t("差最多 8e-6，不传 atol（默认 1e-5）", "differences up to 8e-6, atol not passed (default 1e-5)"),
         lambda x: x + 2e-6 * ramp, x5, rev, None, True),
    ]


def _answers_of(bug, cases) -> list:
    got = []
    for _, f, x, perm, atol, _right in cases:
        try:
            got.append(bug.impl(f, x.clone(), perm.clone(), **({} if atol is None else {"atol": atol})))
        except Exception:  # noqa: BLE001 - this bug crashes on this case
            got.append(None)
    return got


def check_permutation(is_permutation_equivariant) -> None:
    with on_its_own(is_permutation_equivariant, EARLIER_PERMUTATION):
        passed("is_permutation_equivariant", _permutation_checks(is_permutation_equivariant))


def _permutation_checks(is_permutation_equivariant) -> int:
    what = "is_permutation_equivariant"
    check = Check(what, is_permutation_equivariant, hints=DIM0_HINT)
    cases = _permutation_cases()
    answers, first_wrong = [], None
    for label, f, x, perm, atol, right in cases:
        out = check.call(f, x, perm, label=label, **({} if atol is None else {"atol": atol}))
        if not isinstance(out, bool):
            one = (isinstance(out, torch.Tensor) and out.numel() == 1) or _is_numpy_bool(out)
            raise check.fail(label, t("Python 的 True / False", "Python's True / False"),
                             f"{type(out).__name__}: {out!r:.60}",
                             PERM_NOT_PYTHON_BOOL if one else PERM_ELEMENTWISE if isinstance(out, torch.Tensor)
                             else None)
        answers.append(out)
        if out != right and first_wrong is None:
            first_wrong = (label, right, out, atol is None and check.call(f, x, perm, atol=1e-5, label=label) == right)
    if first_wrong is not None:
        label, right, out, default_only = first_wrong
        bug = PERM_DEFAULT_ATOL if default_only else next((b for b in PERM_BUGS if _answers_of(b, cases) == answers), None)
        raise check.fail(label, str(right), str(out), bug,
                         hint=t("比较 f(x[..., perm, :]) 与 f(x)[..., perm, :]，允许 atol 以内的差。",
                                "compare f(x[..., perm, :]) with f(x)[..., perm, :], allowing differences up to atol."))
    return len(cases)


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)

ERRORS = {"apply_rope": ROPE_HINTS, "is_permutation_equivariant": PERM_ERRORS}


def _visible_perm_answers(impl, inputs) -> torch.Tensor:
    from helpers.ch04_positions import permutation_cases
    cases = permutation_cases(*(x.clone() for x in inputs))
    return torch.tensor([bool(impl(f, x.clone(), perm.clone(), **kw)) for _, f, x, perm, kw in cases])


def probes() -> list[Probe]:
    gen = seeded(440)
    r = lambda *shape: torch.randn(*shape, generator=gen).round(decimals=2)  # noqa: E731
    perm_inputs = (r(5, 4), r(2, 5, 8), torch.arange(20.0).reshape(5, 4))
    right = _pe_bug("right")
    # a default atol other than the signature's: 1e-3 and 1e-8 answer the cases without atol differently
    defaults = [Bug(PERM_DEFAULT_ATOL.key, PERM_DEFAULT_ATOL.zh, PERM_DEFAULT_ATOL.en, _pe_bug("right", a))
                for a in (1e-3, 1e-8)]
    return [
        Probe("sin", args=(6, 8), kwargs={"base": 500.0}, reference=ref_sinusoidal, bugs=SIN_BUGS),
        # relative: the frequencies span orders of magnitude
        Probe("freq", args=(8,), kwargs={"base": 500.0}, reference=ref_frequencies, bugs=FREQ_BUGS,
              tol=Tol(1e-6, 0.0, 1.0)),
        Probe("rope", args=(r(3, 8), torch.tensor([0, 3, 17])), reference=ref_rope, bugs=ROPE_BUGS),
        Probe("rope_batch", args=(r(2, 2, 3, 8), torch.tensor([1, 4, 9])), kwargs={"base": 500.0},
              reference=ref_rope, bugs=ROPE_BUGS),
        Probe("rope_float_positions", args=(r(3, 4), torch.tensor([0.5, 2.25, 7.0])), reference=ref_rope,
              bugs=ROPE_BUGS),
        # long contexts: an angle computed in float32 is off by hundredths of a radian here
        Probe("rope_far", args=(r(6, 16), torch.tensor([5, 3_000, 16_411, 65_537, 131_071, 500_003])),
              reference=ref_rope),
        Probe("perm", args=perm_inputs, expected=_visible_perm_answers(right, perm_inputs),
              bugs=PERM_BUGS + [PERM_FEATURE_DIM] + defaults,
              run_bug=lambda bug: _visible_perm_answers(bug.impl, perm_inputs)),
    ]
