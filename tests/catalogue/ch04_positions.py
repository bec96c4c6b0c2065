"""Known wrong answers (and correct variants) for ch04_positions.

Each wrong answer must lose the points of the named test cell and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

SIN_HEAD = "def sinusoidal_encoding(n, d, base=10000.0):\n"
FREQ_HEAD = "def rope_frequencies(d, base=10000.0):\n"
ROPE_HEAD = "def apply_rope(x, positions, base=10000.0):\n"
PERM_HEAD = "def is_permutation_equivariant(f, x, perm, atol=1e-5):\n"

SIN_OK = """    if d % 2:
        raise ValueError("d must be even")
    p = torch.arange(n, dtype=torch.float32)[:, None]
    omega = base ** (-torch.arange(0, d, 2) / d)
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(p * omega)
    pe[:, 1::2] = torch.cos(p * omega)
    return pe
"""

ROPE_OK = """    theta = rope_frequencies(x.shape[-1], base).double()
    ang = positions.double()[:, None] * theta
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
"""

PERM_OK = """    a = f(x[..., perm, :])
    b = f(x)[..., perm, :]
    return bool(((a - b).abs() <= atol).all())
"""


def sin(body: str) -> dict:
    return {"sinusoidal": SIN_HEAD + body}


def freq(body: str) -> dict:
    return {"rope_frequencies": FREQ_HEAD + body}


def rope(body: str) -> dict:
    return {"apply_rope": ROPE_HEAD + body}


def perm(body: str) -> dict:
    return {"permutation": PERM_HEAD + body}


# a wrong rope_frequencies costs exercise 2 alone: apply_rope that calls it keeps its marks, and says why
KEPT = {"test_apply_rope": ("用正确的 rope_frequencies 代替你的之后，这一题是对的", "练习 2 还需要修改")}

BUGS = [
    # sinusoidal_encoding
    Variant("sin_cos_swapped", sin(SIN_OK.replace("torch.sin(p * omega)", "torch.COS(p * omega)")
                                   .replace("torch.cos(p * omega)", "torch.sin(p * omega)")
                                   .replace("torch.COS", "torch.cos")),
            lose=("test_sinusoidal",), words=("sin 和 cos 放反了",), breaks=("sin-even-is-sin",)),
    Variant("sin_i_over_d", sin(SIN_OK.replace("torch.arange(0, d, 2) / d", "torch.arange(d // 2) / d")),
            lose=("test_sinusoidal",), words=("i/d 而不是 2i/d",), breaks=("sin-formula",)),
    Variant("sin_positions_from_1", sin(SIN_OK.replace("torch.arange(n, dtype", "torch.arange(1, n + 1, dtype")),
            lose=("test_sinusoidal",), words=("位置从 1 开始",), breaks=("sin-from-zero",)),
    Variant("sin_concatenated", sin("""    if d % 2:
        raise ValueError("d must be even")
    p = torch.arange(n, dtype=torch.float32)[:, None]
    omega = base ** (-torch.arange(0, d, 2) / d)
    return torch.cat([torch.sin(p * omega), torch.cos(p * omega)], dim=-1)
"""), lose=("test_sinusoidal",), words=("先放全部 sin 再放全部 cos", "交错"), breaks=("sin-interleaved",)),
    Variant("sin_no_odd_check", sin(SIN_OK.replace('        raise ValueError("d must be even")', "        pass")
                                    .replace("pe = torch.zeros(n, d)", "pe = torch.zeros(n, d + d % 2)")
                                    .replace("    return pe\n", "    return pe[:, :d]\n")),
            lose=("test_sinusoidal",), words=("ValueError",), breaks=("sin-odd-raises",)),
    Variant("sin_transposed", sin(SIN_OK.replace("    return pe\n", "    return pe.T\n")),
            lose=("test_sinusoidal",), words=("转置", "(n, d)"), breaks=("sin-shape",)),
    Variant("sin_base_hard_coded", sin(SIN_OK.replace("omega = base **", "omega = 10000 **")),
            lose=("test_sinusoidal",), words=("忽略了参数 base",), breaks=("sin-formula",)),
    # rope_frequencies
    Variant("freq_wrong_sign", freq("    return base ** (torch.arange(0, d, 2) / d)\n"),
            lose=("test_rope_frequencies",), words=("指数的符号反了",), breaks=("freq-formula",), said=KEPT),
    Variant("freq_all_d", freq("    return base ** (-2 * torch.arange(d) / d)\n"),
            lose=("test_rope_frequencies",), words=("d 个频率，而不是 d/2",), breaks=("freq-shape",), said=KEPT),
    Variant("freq_i_over_d", freq("    return base ** (-torch.arange(d // 2) / d)\n"),
            lose=("test_rope_frequencies",), words=("i/d 而不是 2i/d",), breaks=("freq-formula",), said=KEPT),
    Variant("freq_base_hard_coded", freq("    return 10000.0 ** (-torch.arange(0, d, 2) / d)\n"),
            lose=("test_rope_frequencies",), words=("忽略了参数 base",), breaks=("freq-formula",), said=KEPT),
    # apply_rope
    Variant("rope_rotate_half", rope("""    d = x.shape[-1]
    theta = rope_frequencies(d, base).double()
    ang = positions.double()[:, None] * theta
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
"""), lose=("test_apply_rope",), words=("GPT-NeoX/LLaMA", "rotate-half", "相邻"), breaks=("rope-adjacent",)),
    Variant("rope_negative_angle", rope(ROPE_OK.replace("ang = positions", "ang = -positions")),
            lose=("test_apply_rope",), words=("旋转方向反了",), breaks=("rope-rotation",)),
    Variant("rope_sin_cos_swapped", rope(ROPE_OK.replace("cos, sin = ang.cos()", "sin, cos = ang.cos()")),
            lose=("test_apply_rope",), words=("sin 和 cos 放反了",), breaks=("rope-rotation",)),
    Variant("rope_positions_from_1", rope(ROPE_OK.replace("positions.double()", "(positions.double() + 1)")),
            lose=("test_apply_rope",), words=("位置多加了 1",), breaks=("rope-positions",)),
    Variant("rope_in_place", rope("""    ang = positions.double()[:, None] * rope_frequencies(x.shape[-1], base).double()
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = a * cos - b * sin                 # written into x itself
    x[..., 1::2] = a * sin + b * cos
    return x
"""), lose=("test_apply_rope",), words=("改写了传入的 x", "新张量"), breaks=("rope-new-tensor",),
            said={"test_permutation": ("用正确的 apply_rope 代替你的之后，这一题是对的", "练习 3 还需要修改")}),
    Variant("rope_float64_out", rope(ROPE_OK.replace("cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)",
                                                     "cos, sin = ang.cos(), ang.sin()")),
            lose=("test_apply_rope",), words=("没有保持 x 的 dtype", ".to(x.dtype)"), breaks=("rope-dtype",)),
    Variant("rope_angles_float32", rope("""    xf = x.float()                                   # computed in float32, cast back
    ang = positions.float()[:, None] * rope_frequencies(x.shape[-1], base).float()
    c, s = ang.cos(), ang.sin()
    a, b = xf[..., 0::2], xf[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2).to(x.dtype)
"""), lose=("test_apply_rope",), words=("float32 算的", "float64"), breaks=("rope-float64-angles",)),
    Variant("rope_angles_in_x_dtype", rope("""    d = x.shape[-1]
    freqs = positions.to(x.dtype)[:, None] * rope_frequencies(d, base).to(x.dtype)
    cos, sin = freqs.cos().repeat_interleave(2, dim=-1), freqs.sin().repeat_interleave(2, dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return x * cos + rotated * sin
"""), lose=("test_apply_rope",), words=("float32 算的", "float64"), breaks=("rope-float64-angles",)),
    Variant("rope_2d_only", rope("""    n, d = x.shape
    ang = positions.double()[:, None] * rope_frequencies(d, base).double()
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[:, 0::2], x[:, 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).reshape(n, d)
"""), lose=("test_apply_rope",), words=("任意多个批量维",), breaks=("rope-batch-dims",)),
    Variant("rope_counts_positions", rope(ROPE_OK.replace("positions.double()[:, None]",
                                                          "torch.arange(x.shape[-2]).double()[:, None]")),
            lose=("test_apply_rope",), words=("没有用传入的 positions",), breaks=("rope-positions",)),
    Variant("rope_table_indexed", rope("""    theta = rope_frequencies(x.shape[-1], base).double()
    table = torch.arange(int(positions.max()) + 1).double()[:, None] * theta     # one row per position
    ang = table[positions]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
"""), lose=("test_apply_rope",), words=("浮点数", "不能当下标"), breaks=("rope-float-positions",)),
    Variant("rope_not_flattened", rope(ROPE_OK.replace(".flatten(-2)", "")),
            lose=("test_apply_rope",), words=("多了一维", "flatten(-2)"), breaks=("rope-shape",)),
    # outside audit: θ written inline in float32, then the angles multiplied in float64: θ's rounding is the error
    Variant("rope_theta_inline_float32", rope("""    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2) / d)            # float32
    ang = positions.double()[:, None] * theta.double()
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
"""), lose=("test_apply_rope",), words=("float64",), breaks=("rope-float64-angles",)),
    # outside audit: a batch of heads as attention passes it (transposed, not contiguous) merged with view
    Variant("rope_view_batch", rope("""    shape = x.shape
    x3 = x.view(-1, shape[-2], shape[-1])             # (batch, n, d)
    ang = positions.double()[:, None] * rope_frequencies(shape[-1], base).double()
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x3[..., 0::2], x3[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2).view(shape)
"""), lose=("test_apply_rope",), words=("x.view", "reshape"), breaks=("rope-batch-dims",)),
    # outside audit: cos and sin in float32 keep float32 and float64 inputs' dtype, not half precision's
    Variant("rope_float32_cos_half", rope(ROPE_OK.replace("ang.cos().to(x.dtype), ang.sin().to(x.dtype)",
                                                          "ang.cos().float(), ang.sin().float()")),
            lose=("test_apply_rope",), words=("没有保持 x 的 dtype", "半精度"), breaks=("rope-dtype",)),
    # is_permutation_equivariant
    Variant("perm_elementwise", perm("    return (f(x[..., perm, :]) - f(x)[..., perm, :]).abs() <= atol\n"),
            lose=("test_permutation",), words=("True / False", ".all()"), breaks=("perm-python-bool",)),
    Variant("perm_output_not_permuted", perm(PERM_OK.replace("f(x)[..., perm, :]", "f(x)")),
            lose=("test_permutation",), words=("没有重排的 f(x)",), breaks=("perm-compare",)),
    Variant("perm_inverse", perm(PERM_OK.replace("f(x)[..., perm, :]", "f(x)[..., torch.argsort(perm), :]")),
            lose=("test_permutation",), words=("逆置换",), breaks=("perm-compare",)),
    Variant("perm_tensor_not_bool", perm("    return ((f(x[..., perm, :]) - f(x)[..., perm, :]).abs() <= atol).all()\n"),
            lose=("test_permutation",), words=("Python 的 bool", "bool(...)"), breaks=("perm-python-bool",)),
    Variant("perm_token_dim_first", perm("    return bool(((f(x[perm]) - f(x)[perm]).abs() <= atol).all())\n"),
            lose=("test_permutation",), words=("第 0 维", "x[..., perm, :]"), breaks=("perm-token-dim",)),
    Variant("perm_default_allclose", perm("    return torch.allclose(f(x[..., perm, :]), f(x)[..., perm, :])\n"),
            lose=("test_permutation",), words=("没有使用参数 atol",), breaks=("perm-within-atol",)),
    Variant("perm_strict_less", perm("    return bool(((f(x[..., perm, :]) - f(x)[..., perm, :]).abs() < atol).all())\n"),
            lose=("test_permutation",), words=("<= atol",), breaks=("perm-within-atol",)),
    # outside audit: allclose with atol but its default rtol, and a default atol other than the signature's
    Variant("perm_allclose_rtol", perm("    return torch.allclose(f(x[..., perm, :]), f(x)[..., perm, :], atol=atol)\n"),
            lose=("test_permutation",), words=("rtol=0",), breaks=("perm-within-atol",)),
    Variant("perm_isclose_rtol", perm("    return bool(torch.isclose(f(x[..., perm, :]), f(x)[..., perm, :], atol=atol).all())\n"),
            lose=("test_permutation",), words=("rtol=0",), breaks=("perm-within-atol",)),
    Variant("perm_default_atol", {"permutation": "def is_permutation_equivariant(f, x, perm, atol=1e-3):\n" + PERM_OK},
            lose=("test_permutation",), words=("atol 的默认值不是 1e-5",), breaks=("perm-default-atol",)),
    Variant("perm_exact", perm("    return torch.equal(f(x[..., perm, :]), f(x)[..., perm, :])\n"),
            lose=("test_permutation",), words=("精确相等",), breaks=("perm-not-bitwise",)),
]

CORRECT = [
    Variant("ok_view_as_complex", {
        **rope("""    d = x.shape[-1]
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    ang = positions.double()[:, None] * rope_frequencies(d, base).double()
    rot = torch.complex(ang.cos(), ang.sin())
    return torch.view_as_real(z * rot).reshape(x.shape).to(x.dtype)
"""),
        **perm("    return torch.allclose(f(x[..., perm, :]), f(x)[..., perm, :], atol=atol, rtol=0)\n")}),
    Variant("ok_rotation_matrices", {
        **sin("""    if d % 2 != 0:
        raise ValueError(f"odd d: {d}")
    pe = torch.zeros(n, d, dtype=torch.float64)
    for p in range(n):
        for i in range(d // 2):
            a = p / base ** (2 * i / d)
            pe[p, 2 * i], pe[p, 2 * i + 1] = math.sin(a), math.cos(a)
    return pe
"""),
        **freq("    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))\n"),
        **rope("""    d = x.shape[-1]
    ang = positions.double()[:, None] * rope_frequencies(d, base).double()       # (n, d/2)
    c, s = ang.cos(), ang.sin()
    R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)     # (n, d/2, 2, 2)
    pairs = x.double().reshape(*x.shape[:-1], d // 2, 2)
    return torch.einsum("npij,...npj->...npi", R, pairs).reshape(x.shape).to(x.dtype)
""")}),
    Variant("ok_polar", {
        **sin("""    if d % 2:
        raise ValueError("d must be even")
    ang = torch.outer(torch.arange(n, dtype=torch.float64), torch.exp(-math.log(base) * torch.arange(0, d, 2) / d))
    return torch.stack([ang.sin(), ang.cos()], dim=-1).reshape(n, d).float()
"""),
        **rope("""    d = x.shape[-1]
    ang = torch.outer(positions.double(), rope_frequencies(d, base).double())
    rot = torch.polar(torch.ones_like(ang), ang)
    z = torch.complex(x[..., 0::2].double(), x[..., 1::2].double()) * rot
    return torch.stack([z.real, z.imag], dim=-1).flatten(-2).to(x.dtype)
""")}),
    # written the way people write them in the wild: each keeps full marks
    Variant("ok_float32_and_back", {
        **sin("""    if d % 2:
        raise ValueError(f"d={d} must be even")
    position = torch.arange(0, n).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2) * -(math.log(base) / d))   # float32, as in many tutorials
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe
"""),
        **freq("    return 1.0 / (base ** (torch.arange(0, d, 2).double() / d))\n"),
        **rope("""    xf = x.float()                                   # multiplied in float32, cast back
    ang = positions.double()[:, None] * rope_frequencies(x.shape[-1], base).double()   # angles in float64
    c, s = ang.cos().float(), ang.sin().float()
    a, b = xf[..., 0::2], xf[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2).to(x.dtype)
"""),
        **perm("    a, b = f(x.index_select(-2, perm)), f(x).index_select(-2, perm)\n"
               "    return (a - b).abs().max().item() <= atol\n")}),
    Variant("ok_rotate_every_two", {
        **sin("""    assert_even = d % 2 == 0
    if not assert_even:
        raise ValueError("d must be even")
    inv = torch.pow(base, -torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = torch.einsum("p,i->pi", torch.arange(n, dtype=torch.float32), inv)
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1)
"""),
        **freq("    return torch.pow(base, -torch.arange(0, d, 2).double() / d)\n"),
        **rope("""    d = x.shape[-1]
    freqs = positions.to(torch.float64)[:, None] * rope_frequencies(d, base).to(torch.float64)
    cos = freqs.cos().to(x.dtype).repeat_interleave(2, dim=-1)
    sin = freqs.sin().to(x.dtype).repeat_interleave(2, dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return x * cos + rotated * sin
"""),
        **perm("    return ((f(x[..., perm, :]) - f(x)[..., perm, :]).abs().max() <= atol).item()\n")}),
    Variant("ok_loops_and_numpy", {
        **sin("""    import numpy as np
    if d % 2 == 1:
        raise ValueError("odd d")
    pe = np.zeros((n, d))
    for i in range(0, d, 2):                       # one pair of columns at a time
        pe[:, i] = np.sin(np.arange(n) / np.power(base, i / d))
        pe[:, i + 1] = np.cos(np.arange(n) / np.power(base, i / d))
    return torch.from_numpy(pe).float()
"""),
        **freq("    return torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)\n"),
        **rope("""    out = x.clone()
    theta = rope_frequencies(x.shape[-1], base)      # float64 constants from exercise 2
    for i in range(x.shape[-1] // 2):
        ang = positions.double() * theta[i].double()      # the angle in float64
        c, s = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
        a, b = x[..., 2 * i], x[..., 2 * i + 1]
        out[..., 2 * i], out[..., 2 * i + 1] = a * c - b * s, a * s + b * c
    return out
"""),
        **perm("    import numpy as np\n    a, b = f(x[..., perm, :]), f(x)[..., perm, :]\n"
               "    return bool(np.allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=atol))\n")}),
    # a Meta-style freqs_cis built per call from the given positions, θ inline in float64 (not calling
    # rope_frequencies: reusing it is advice), and truth values turned into Python bools
    Variant("ok_freqs_cis_inline", {
        **rope("""    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(positions.to(torch.float64), inv_freq)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)                      # complex128, (n, d/2)
    xc = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis).flatten(-2).type_as(x)
"""),
        **perm("""    diff = (f(x[..., perm, :]) - f(x)[..., perm, :]).abs()
    return not bool((diff > atol).any())
""")}),
]

CORRECT += [
    # outside audit: math in float32 cast back with type_as (keeps half precision), pairs taken by reshape
    # (works on a transposed q), and a tolerance test by torch.testing.assert_close with rtol=0
    Variant("ok_type_as_and_assert_close", {
        **rope("""    d = x.shape[-1]
    ang = positions.double()[:, None] * rope_frequencies(d, base).double()
    cos, sin = ang.cos().float(), ang.sin().float()
    pairs = x.float().reshape(*x.shape[:-1], d // 2, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).reshape(x.shape).type_as(x)
"""),
        **perm("""    try:
        torch.testing.assert_close(f(x[..., perm, :]), f(x)[..., perm, :], atol=atol, rtol=0)
    except AssertionError:
        return False
    return True
""")}),
]

# sentences marked in the exercise that are advice, not rules
WAIVED = {
    "rope-own-frequencies": "advice (reworded from 'use your rope_frequencies'): an apply_rope that computes θ_i "
                            "itself gives the same numbers and is judged by them (CORRECT ok_freqs_cis_inline); "
                            "the angles' precision, which is what reusing it was for, is the checked rule "
                            "rope-float64-angles",
}


# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="positions.rope_explorer", labels=("m", "n", "m、n 一起移动"))


def check_widget(target, text):
    """The notebook's call: q=(1.0, 0.25), k=(0.4, 0.9), m=2, n=5."""
    from grading.ch04_positions import ref_rope
    from helpers import ch04_positions as positions

    values = target.evaluate("w => [...w.querySelectorAll('.widget-readout')].map(e => e.textContent)")
    assert values == ["2", "5"], values
    assert positions.score_text(ref_rope, (1.0, 0.25), (0.4, 0.9), 2, 5) in text, text
    assert target.locator("img").count() >= 1

# a second way to break each rule (issue 49)
BUGS += [
    # sinusoidal_encoding
    Variant("sin_batch_dim_added", sin(SIN_OK.replace("    return pe\n", "    return pe.unsqueeze(0)              # (1, n, d), ready to add\n")),
            lose=("test_sinusoidal",), words=("(n, d)",), breaks=("sin-shape",)),
    Variant("sin_loop_from_1", sin("""    if d % 2:
        raise ValueError("d must be even")
    pe = torch.zeros(n, d)
    for pos in range(1, n + 1):
        for i in range(0, d, 2):
            pe[pos - 1, i] = math.sin(pos / base ** (i / d))
            pe[pos - 1, i + 1] = math.cos(pos / base ** (i / d))
    return pe
"""), lose=("test_sinusoidal",), words=("位置从 1 开始",), breaks=("sin-from-zero",)),
    Variant("sin_exponent_4i", sin(SIN_OK.replace("base ** (-torch.arange(0, d, 2) / d)", "base ** (-2 * torch.arange(0, d, 2) / d)")),
            lose=("test_sinusoidal",), words=("2i",), breaks=("sin-formula",)),
    Variant("sin_cos_first_stacked", sin("""    if d % 2:
        raise ValueError("d must be even")
    ang = torch.arange(n)[:, None] * base ** (-torch.arange(0, d, 2) / d)
    return torch.stack([ang.cos(), ang.sin()], dim=-1).reshape(n, d)
"""), lose=("test_sinusoidal",), words=("sin 和 cos 放反了",), breaks=("sin-even-is-sin",)),
    Variant("sin_stacked_on_dim_1", sin("""    if d % 2:
        raise ValueError("d must be even")
    ang = torch.arange(n)[:, None] * base ** (-torch.arange(0, d, 2) / d)
    return torch.stack([ang.sin(), ang.cos()], dim=1).reshape(n, d)
"""), lose=("test_sinusoidal",), words=("交错",), breaks=("sin-interleaved",)),
    Variant("sin_assert_even", sin(SIN_OK.replace('    if d % 2:\n        raise ValueError("d must be even")\n',
                                                  '    assert d % 2 == 0, "d must be even"\n')),
            lose=("test_sinusoidal",), words=("ValueError",), breaks=("sin-odd-raises",)),
    # rope_frequencies
    Variant("freq_row_vector", freq("    return (base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d))[None, :]\n"),
            lose=("test_rope_frequencies",), words=("(d/2,)",), breaks=("freq-shape",), said=KEPT),
    Variant("freq_exponent_4i", freq("    return base ** (-2 * torch.arange(0, d, 2, dtype=torch.float64) / d)\n"),
            lose=("test_rope_frequencies",), words=("2i",), breaks=("freq-formula",), said=KEPT),
    # apply_rope
    Variant("rope_colon_not_ellipsis", rope(ROPE_OK.replace("x[..., 0::2], x[..., 1::2]", "x[:, 0::2], x[:, 1::2]")),
            lose=("test_apply_rope",), words=("x[..., 0::2]",), breaks=("rope-batch-dims",)),
    Variant("rope_positions_not_outer", rope(ROPE_OK.replace("positions.double()[:, None] * theta", "positions.double() * theta")),
            lose=("test_apply_rope",), words=("positions[:, None]",), breaks=("rope-positions",)),
    Variant("rope_positions_truncated", rope(ROPE_OK.replace("positions.double()", "positions.long().double()")),
            lose=("test_apply_rope",), words=("浮点",), breaks=("rope-float-positions",)),
    Variant("rope_cat_tables", rope("""    theta = rope_frequencies(x.shape[-1], base).double()
    ang = positions.double()[:, None] * theta
    cos = torch.cat([ang.cos(), ang.cos()], dim=-1).to(x.dtype)      # tables as in rotate-half code
    sin = torch.cat([ang.sin(), ang.sin()], dim=-1).to(x.dtype)
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return x * cos + rotated * sin
"""), lose=("test_apply_rope",), words=("repeat_interleave",), breaks=("rope-adjacent",)),
    Variant("rope_pairs_back_as_halves", rope(ROPE_OK.replace("dim=-1).flatten(-2)", "dim=-2).flatten(-2)")),
            lose=("test_apply_rope",), words=("2i", "2i+1"), breaks=("rope-adjacent",)),
    Variant("rope_second_row_sign", rope(ROPE_OK.replace("a * sin + b * cos", "a * sin - b * cos")),
            lose=("test_apply_rope",), words=("[[cos, −sin], [sin, cos]]",), breaks=("rope-rotation",)),
    Variant("rope_batch_merged", rope(ROPE_OK.replace(".flatten(-2)", ".reshape(-1, x.shape[-1])")),
            lose=("test_apply_rope",), words=("形状",), breaks=("rope-shape",)),
    Variant("rope_float32_math_returned", rope("""    xf = x.float()
    ang = positions.double()[:, None] * rope_frequencies(x.shape[-1], base).double()
    c, s = ang.cos().float(), ang.sin().float()
    a, b = xf[..., 0::2], xf[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
"""), lose=("test_apply_rope",), words=("没有保持 x 的 dtype",), breaks=("rope-dtype",)),
    Variant("rope_pair_assignment_in_place", rope("""    ang = positions.double()[:, None] * rope_frequencies(x.shape[-1], base).double()
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]
    x[..., 0::2], x[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return x
"""), lose=("test_apply_rope",), words=("改写了传入的 x",), breaks=("rope-new-tensor",),
            said={"test_permutation": ("用正确的 apply_rope 代替你的之后，这一题是对的", "练习 3 还需要修改")}),
    Variant("rope_complex64_freqs_cis", rope("""    d = x.shape[-1]
    freqs = torch.outer(positions.float(), rope_frequencies(d, base).float())      # as in Meta's reference code
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)                      # complex64
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * freqs_cis).flatten(-2).to(x.dtype)
"""), lose=("test_apply_rope",), words=("float64",), breaks=("rope-float64-angles",)),
    # is_permutation_equivariant
    Variant("perm_numpy_bool", perm("    import numpy as np\n"
                                    "    return np.all((f(x[..., perm, :]) - f(x)[..., perm, :]).abs().numpy() <= atol)\n"),
            lose=("test_permutation",), words=("Python 的 bool",), breaks=("perm-python-bool",)),
    Variant("perm_default_atol_numpy", {"permutation": "def is_permutation_equivariant(f, x, perm, atol=1e-8):\n" + PERM_OK},
            lose=("test_permutation",), words=("atol 的默认值不是 1e-5",), breaks=("perm-default-atol",)),
    Variant("perm_feature_dim", perm("    return bool(((f(x[..., perm]) - f(x)[..., perm]).abs() <= atol).all())\n"),
            lose=("test_permutation",), words=("倒数第二维",), breaks=("perm-token-dim",)),
    Variant("perm_elementwise_equal", perm("    return bool((f(x[..., perm, :]) == f(x)[..., perm, :]).all())\n"),
            lose=("test_permutation",), words=("精确相等",), breaks=("perm-not-bitwise",)),
    Variant("perm_argsort_on_input", perm(PERM_OK.replace("f(x[..., perm, :])", "f(x[..., torch.argsort(perm), :])")),
            lose=("test_permutation",), words=("逆置换",), breaks=("perm-compare",)),
]

# the frequencies are float64 (a rule since the statement says which dtype rope_frequencies returns)
BUGS += [
    Variant("freq_float32", freq("    return (base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).float()\n"),
            lose=("test_rope_frequencies",), words=("float64",), breaks=("freq-float64",), said=KEPT),
    Variant("freq_default_dtype", freq("    return base ** (-torch.arange(0, d, 2) / d)\n"),
            lose=("test_rope_frequencies",), words=("float64", "torch.arange"), breaks=("freq-float64",), said=KEPT),
]
