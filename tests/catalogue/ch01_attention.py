"""Known wrong answers (and correct variants) for ch01_attention.

Each wrong answer must lose the points of the named test cell and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

SM_HEAD = "def softmax(x, dim=-1):\n"
ATT_HEAD = "def scaled_dot_product_attention(q, k, v, mask=None):\n"
VAR_HEAD = "def score_variance(d_k, n_samples=100_000, scaled=False, generator=None):\n"


def sm(body: str) -> dict:
    return {"softmax": SM_HEAD + body}


def att(body: str) -> dict:
    return {"attention": ATT_HEAD + body}


def var(body: str) -> dict:
    return {"score_variance": VAR_HEAD + body}


ATT_OK = """    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = softmax(s, dim=-1)
    return w @ v, w
"""

# a wrong softmax costs exercise 1 alone: attention that calls it keeps its marks, and says why
KEPT = {"test_attention": ("用正确的 softmax 代替你的之后，这一题是对的", "练习 1 还需要修改")}

BUGS = [
    # softmax
    Variant("sm_no_max", sm("    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"),
            said=KEPT, lose=("test_softmax",), words=("没有先减去每行的最大值", "nan"),
            breaks=("sm-stable",)),
    Variant("sm_global_max", sm("    e = torch.exp(x - x.max())\n    return e / e.sum(dim=dim, keepdim=True)\n"),
            said=KEPT, lose=("test_softmax",), words=("整个张量的最大值",),
            breaks=("sm-stable",)),
    Variant("sm_wrong_dim", sm("    e = torch.exp(x - x.amax(dim=0, keepdim=True))\n"
                               "    return e / e.sum(dim=0, keepdim=True)\n"),
            said=KEPT, lose=("test_softmax",), words=("错误的维度",),
            breaks=("sm-dim",)),
    Variant("sm_no_keepdim", sm("    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n    return e / e.sum(dim=dim)\n"),
            said=KEPT, lose=("test_softmax",), words=("keepdim=True",)),
    Variant("sm_uses_torch", sm("    return torch.softmax(x, dim=dim)\n"),
            said=KEPT, lose=("test_softmax",), words=("从零实现", "torch.softmax"),
            breaks=("sm-from-scratch",)),
    Variant("sm_uses_functional_alias",
            {"softmax": "from torch.nn.functional import softmax as _sm\n" + SM_HEAD + "    return _sm(x, dim)\n"},
            said=KEPT, lose=("test_softmax",), words=("从零实现", "torch.nn.functional.softmax"),
            breaks=("sm-from-scratch",)),
    Variant("sm_minus_mean", sm("    e = torch.exp(x - x.mean(dim=dim, keepdim=True))   # centred, not the maximum\n"
                                "    return e / e.sum(dim=dim, keepdim=True)\n"),
            said=KEPT, lose=("test_softmax",), words=("除一个之外全是 -inf 的行", "不是每行的最大值"),
            breaks=("sm-inf-row",)),
    # score_variance
    Variant("var_returns_tensor", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                      "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                      "    s = (q * k).sum(-1)\n"
                                      "    return (s / math.sqrt(d_k) if scaled else s).var()\n"),
            lose=("test_score_variance",), words=("Python 的 float", ".item()"),
            breaks=("var-float",)),
    Variant("var_ignores_scaled", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                      "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                      "    return (q * k).sum(-1).var().item()\n"),
            lose=("test_score_variance",), words=("scaled=True", "没有除以 √d_k"),
            breaks=("var-scaled",)),
    Variant("var_by_dk", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                             "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                             "    s = (q * k).sum(-1)\n"
                             "    return (s / d_k if scaled else s).var().item()\n"),
            lose=("test_score_variance",), words=("除的是 d_k",),
            breaks=("var-scaled",)),
    Variant("var_std", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                           "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                           "    s = (q * k).sum(-1)\n"
                           "    return (s / math.sqrt(d_k) if scaled else s).std().item()\n"),
            lose=("test_score_variance",), words=("标准差",),
            breaks=("var-variance",)),
    Variant("var_no_generator", var("    q = torch.randn(n_samples, d_k)\n    k = torch.randn(n_samples, d_k)\n"
                                    "    s = (q * k).sum(-1)\n"
                                    "    return (s / math.sqrt(d_k) if scaled else s).var().item()\n"),
            lose=("test_score_variance",), words=("generator", "无法复现"),
            breaks=("var-generator",)),
    # attention
    Variant("att_no_scaling", att(ATT_OK.replace(" / math.sqrt(q.shape[-1])", "")),
            lose=("test_attention",), words=("没有除以 √d_k",),
            breaks=("att-scale",)),
    Variant("att_scale_dk", att(ATT_OK.replace("math.sqrt(q.shape[-1])", "q.shape[-1]")),
            lose=("test_attention",), words=("除的是 d_k",),
            breaks=("att-scale",)),
    Variant("att_scale_dv", att(ATT_OK.replace("math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])")),
            lose=("test_attention",), words=("√d_v",),
            breaks=("att-scale",)),
    Variant("att_softmax_dim", att(ATT_OK.replace("softmax(s, dim=-1)", "softmax(s, dim=-2)")),
            lose=("test_attention",), words=("softmax 沿错了维度",),
            breaks=("att-rows",)),
    Variant("att_mask_inverted", att(ATT_OK.replace("masked_fill(~mask", "masked_fill(mask")),
            lose=("test_attention",), words=("掩码的含义反了",),
            breaks=("att-mask-true",)),
    Variant("att_mask_after_softmax", att("""    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = softmax(s, dim=-1)
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w
"""), lose=("test_attention",), words=("softmax 之后",),
            breaks=("att-mask-before",)),
    Variant("att_mask_zero", att(ATT_OK.replace('float("-inf")', "0.0")),
            lose=("test_attention",), words=("设成了 0 而不是 -inf",),
            breaks=("att-mask-before",)),
    Variant("att_k_T", att(ATT_OK.replace("k.transpose(-2, -1)", "k.T")),
            lose=("test_attention",), words=("k.transpose(-2, -1)",),
            breaks=("att-transpose",)),
    Variant("att_uses_sdpa", att("""    import torch.nn.functional as F
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), w
"""), lose=("test_attention",), words=("从零实现",),
            breaks=("att-no-sdpa",)),
    Variant("att_uses_torch_softmax", att(ATT_OK.replace("softmax(s, dim=-1)", "torch.softmax(s, dim=-1)")),
            lose=("test_attention",), words=("从零实现", "torch.softmax"),
            breaks=("att-own-softmax",)),
    # each breaks one rule the exercises state, and is named by what the code does
    Variant("sm_exp_only", sm("    return torch.exp(x)\n"), said=KEPT, lose=("test_softmax",),
            words=("只返回了 exp(x)",), breaks=("sm-normalise",)),
    Variant("var_elementwise", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                   "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                   "    s = q * k                      # one product per component\n"
                                   "    return (s / math.sqrt(d_k) if scaled else s).var().item()\n"),
            lose=("test_score_variance",), words=("逐元素乘积",), breaks=("var-dot",)),
    Variant("var_one_wide_draw", var("    qk = torch.randn(n_samples, 2 * d_k, generator=generator)   # both at once\n"
                                     "    q, k = qk[:, :d_k], qk[:, d_k:]\n"
                                     "    s = (q * k).sum(-1)\n"
                                     "    return (s / math.sqrt(d_k) if scaled else s).var().item()\n"),
            lose=("test_score_variance",), words=("不是按题目说的方式抽出来的",), breaks=("var-draw",)),
    Variant("var_fixed_sample_count", var("    q = torch.randn(50_000, d_k, generator=generator)   # more samples, better\n"
                                          "    k = torch.randn(50_000, d_k, generator=generator)\n"
                                          "    s = (q * k).sum(-1)\n"
                                          "    return (s / math.sqrt(d_k) if scaled else s).var().item()\n"),
            lose=("test_score_variance",), words=("不是按题目说的方式抽出来的",), breaks=("var-draw",)),
    Variant("att_bmm", att(ATT_OK.replace("q @ k.transpose(-2, -1)", "torch.bmm(q, k.transpose(-2, -1))")
                           .replace("return w @ v, w", "return torch.bmm(w, v), w")),
            lose=("test_attention",), words=("torch.bmm 只接受恰好三维",), breaks=("att-batch",)),
    Variant("att_flatten_batch", att("""    lead = q.shape[:-2]
    q3, k3, v3 = (a.reshape(-1, *a.shape[-2:]) for a in (q, k, v))     # one batch axis
    s = q3 @ k3.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask.expand(*lead, *mask.shape[-2:]).reshape(s.shape), float("-inf"))
    w = softmax(s, dim=-1)
    return (w @ v3).reshape(*lead, -1, v.shape[-1]), w.reshape(*lead, *w.shape[-2:])
"""), lose=("test_attention",), words=("可以任意多、可以广播",), breaks=("att-broadcast",)),
    Variant("att_mask_index", att("""    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s[~mask] = float("-inf")
    w = softmax(s, dim=-1)
    return w @ v, w
"""), lose=("test_attention",), words=("不会广播", "masked_fill"), breaks=("att-mask-broadcast",)),
    Variant("att_returns_swapped", att(ATT_OK.replace("return w @ v, w", "return w, w @ v")),
            lose=("test_attention",), words=("返回的顺序反了",), breaks=("att-returns",)),
    # chains: each exercise graded on its own
    Variant("sm_not_done_att_right", sm("    raise NotImplementedError()\n"), lose=("test_softmax",),
            words=("还没有实现",), said=KEPT),
    Variant("sm_wrong_att_wrong", {**sm("    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"),
                                   **att(ATT_OK.replace(" / math.sqrt(q.shape[-1])", ""))},
            lose=("test_softmax", "test_attention"),
            said={"test_softmax": ("没有先减去每行的最大值",),
                  "test_attention": ("没有除以 √d_k", "已经用正确的 softmax 代替了你的", "出在这一题本身")}),
    Variant("sm_wrong_att_not_done", {**sm("    return torch.exp(x)\n"), **att("    raise NotImplementedError()\n")},
            lose=("test_softmax", "test_attention"), said={"test_attention": ("还没有实现",)}),
    # an outside audit: wrong answers breaking a stated rule that once kept full marks
    Variant("sm_special_softmax", sm("    return torch.special.softmax(x, dim)\n"),
            said=KEPT, lose=("test_softmax",), words=("从零实现", "torch.special.softmax"),
            breaks=("sm-from-scratch",)),
    Variant("sm_default_dim_0", {"softmax": "def softmax(x, dim=0):\n"
                                 "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                                 "    return e / e.sum(dim=dim, keepdim=True)\n"},
            lose=("test_softmax",), words=("dim 的默认值不是 -1",),
            breaks=("sm-default-dim",)),
    Variant("var_default_n_samples", {"score_variance": "def score_variance(d_k, n_samples=1000, scaled=False, "
                                      "generator=None):\n" + """    q = torch.randn(n_samples, d_k, generator=generator)
    k = torch.randn(n_samples, d_k, generator=generator)
    s = (q * k).sum(-1)
    if scaled:
        s = s / math.sqrt(d_k)
    return s.var().item()
"""}, lose=("test_score_variance",), words=("默认值不对", "n_samples=100_000"), breaks=("var-defaults",)),
    Variant("var_default_scaled", {"score_variance": "def score_variance(d_k, n_samples=100_000, scaled=True, "
                                   "generator=None):\n" + """    q = torch.randn(n_samples, d_k, generator=generator)
    k = torch.randn(n_samples, d_k, generator=generator)
    s = (q * k).sum(-1)
    if scaled:
        s = s / math.sqrt(d_k)
    return s.var().item()
"""}, lose=("test_score_variance",), words=("默认值不对", "scaled=False"), breaks=("var-defaults",)),
    Variant("var_generator_required", var("""    generator.manual_seed(generator.initial_seed())   # start from the seed again
    q = torch.randn(n_samples, d_k, generator=generator)
    k = torch.randn(n_samples, d_k, generator=generator)
    s = (q * k).sum(-1)
    if scaled:
        s = s / math.sqrt(d_k)
    return s.var().item()
"""), lose=("test_score_variance",), words=("generator=None",), breaks=("var-defaults",)),
    Variant("att_special_softmax", att("""    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = torch.special.softmax(s, -1)
    return w @ v, w
"""), lose=("test_attention",), words=("torch.special.softmax",), breaks=("att-own-softmax",)),
    Variant("att_weights_float32", att("""    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).float()   # softmax in float32
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = softmax(s, dim=-1)
    return w.to(v.dtype) @ v, w
"""), lose=("test_attention",), words=("dtype", "float64"), breaks=("att-dtype",)),
    # a second way to break each rule that had one breaking case
    Variant("sm_dim_or_minus_one", sm("    dim = dim or -1                      # the default when none is given\n"
                                      "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                                      "    return e / e.sum(dim=dim, keepdim=True)\n"),
            said=KEPT, lose=("test_softmax",), words=("把 0 当成了",), breaks=("sm-dim",)),
    Variant("sm_shift_by_first_entry", sm("    e = torch.exp(x - x.narrow(dim, 0, 1))   # any shift gives the same softmax\n"
                                          "    return e / e.sum(dim=dim, keepdim=True)\n"),
            said=KEPT, lose=("test_softmax",), words=("不是每行的最大值",), breaks=("sm-inf-row",)),
    Variant("sm_divided_by_total", sm("    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n    return e / e.sum()\n"),
            said=KEPT, lose=("test_softmax",), words=("整个张量的总和",), breaks=("sm-normalise",)),
    Variant("sm_dim_without_default", {"softmax": "def softmax(x, dim):\n"
                                       "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
                                       "    return e / e.sum(dim=dim, keepdim=True)\n"},
            said=KEPT, lose=("test_softmax",), words=("没有默认值",), breaks=("sm-default-dim",)),
    Variant("sm_float32_inside", sm("    e = torch.exp((x - x.amax(dim=dim, keepdim=True)).float())   # float32 is plenty\n"
                                    "    return e / e.sum(dim=dim, keepdim=True)\n"),
            said=KEPT, lose=("test_softmax",), words=("dtype", "float64"), breaks=("sm-dtype",)),
    Variant("var_item_without_call", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                         "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                         "    s = (q * k).sum(-1)\n"
                                         "    return (s / math.sqrt(d_k) if scaled else s).var().item\n"),
            lose=("test_score_variance",), words=("少了括号",), breaks=("var-float",)),
    Variant("var_divided_by_n", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                    "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                    "    s = (q * k).sum(-1)\n"
                                    "    if scaled:\n        s = s / math.sqrt(d_k)\n"
                                    "    return (s.var() / n_samples).item()       # the variance of the estimate\n"),
            lose=("test_score_variance",), words=("除以了 n_samples",), breaks=("var-variance",)),
    Variant("var_own_generator", var("    g = torch.Generator().manual_seed(0)        # reproducible\n"
                                     "    q = torch.randn(n_samples, d_k, generator=g)\n"
                                     "    k = torch.randn(n_samples, d_k, generator=g)\n"
                                     "    s = (q * k).sum(-1)\n"
                                     "    return (s / math.sqrt(d_k) if scaled else s).var().item()\n"),
            lose=("test_score_variance",), words=("自己新建的",), breaks=("var-generator",)),
    Variant("var_mean_of_products", var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                        "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                        "    s = (q * k).mean(-1)\n"
                                        "    return (s / math.sqrt(d_k) if scaled else s).var().item()\n"),
            lose=("test_score_variance",), words=("平均",), breaks=("var-dot",)),
    Variant("att_softmax_dim_1", att(ATT_OK.replace("softmax(s, dim=-1)", "softmax(s, dim=1)")),
            lose=("test_attention",), words=("dim=1",), breaks=("att-rows",)),
    Variant("att_where_inverted", att(ATT_OK.replace('s.masked_fill(~mask, float("-inf"))',
                                                     'torch.where(mask, torch.tensor(float("-inf")), s)')),
            lose=("test_attention",), words=("掩码的含义反了",), breaks=("att-mask-true",)),
    Variant("att_transpose_0_1", att(ATT_OK.replace("k.transpose(-2, -1)", "k.transpose(0, 1)")),
            lose=("test_attention",), words=("transpose(-2, -1)",), breaks=("att-transpose",)),
    Variant("att_sdpa_alias", att("""    from torch.nn.functional import scaled_dot_product_attention as fused
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return fused(q, k, v, attn_mask=mask), softmax(s, dim=-1)
"""), lose=("test_attention",), words=("从零实现",), breaks=("att-no-sdpa",)),
    Variant("att_einsum_fixed_letters", att("""    s = torch.einsum("bqd,bkd->bqk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    w = softmax(s, dim=-1)
    return torch.einsum("bqk,bkd->bqd", w, v), w
"""), lose=("test_attention",), words=("可以任意多",), breaks=("att-batch",)),
    Variant("att_expand_to_q", att("""    k = k.expand(*q.shape[:-2], *k.shape[-2:])      # give k and v the batch shape of q
    v = v.expand(*q.shape[:-2], *v.shape[-2:])
""" + ATT_OK), lose=("test_attention",), words=("可以任意多、可以广播",), breaks=("att-broadcast",)),
    Variant("att_mask_reshaped", att(ATT_OK.replace("masked_fill(~mask,", "masked_fill(~mask.reshape(s.shape),")),
            lose=("test_attention",), words=("reshape",), breaks=("att-mask-broadcast",)),
    Variant("att_returns_out_only", att(ATT_OK.replace("return w @ v, w", "return w @ v")),
            lose=("test_attention",), words=("(out, weights)",), breaks=("att-returns",)),
    Variant("att_out_float32", att(ATT_OK.replace("return w @ v, w", "return w.float() @ v.float(), w")),
            lose=("test_attention",), words=("dtype", "float64"), breaks=("att-dtype",)),
]

CORRECT = [
    # judged by the calls it makes, never by its words: comments and strings name the forbidden functions
    Variant("ok_comments_name_forbidden_calls", {
        **sm('    """What torch.softmax(x, dim) and F.softmax compute, by hand."""\n'
             "    # not x.softmax(dim), not torch.nn.functional.softmax: exp, amax and sum only\n"
             "    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
             "    return e / e.sum(dim=dim, keepdim=True)\n"),
        **att('    """The same as F.scaled_dot_product_attention(q, k, v, attn_mask=mask), written out."""\n'
              '    library = "torch.nn.functional.scaled_dot_product_attention"   # a string, never called\n'
              + ATT_OK.replace("    w = softmax(s, dim=-1)\n",
                               "    w = softmax(s, dim=-1)          # my softmax, not torch.softmax\n"))}),
    Variant("ok_einsum", {**sm("    m = x.max(dim=dim, keepdim=True).values\n    e = (x - m).exp()\n"
                                "    return e / e.sum(dim, keepdim=True)\n"),
                          **att("""    s = torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        s = torch.where(mask, s, torch.full_like(s, float("-inf")))
    w = softmax(s)
    return torch.einsum("...qk,...kd->...qd", w, v), w
""")}),
    Variant("ok_minus_1e9", att(ATT_OK.replace('float("-inf")', "-1e9"))),
    Variant("ok_float64", {**sm("    y = x.double()\n    y = torch.exp(y - y.amax(dim, keepdim=True))\n"
                                 "    return (y / y.sum(dim, keepdim=True)).to(x.dtype)\n"),
                           **att("""    dt = q.dtype
    q, k, v = q.double(), k.double(), v.double()
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask.bool(), float("-inf"))
    w = softmax(s, dim=-1)
    return (w @ v).to(dt), w.to(dt)
"""), **var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
            "    k = torch.randn(n_samples, d_k, generator=generator)\n"
            "    s = torch.einsum('nd,nd->n', q, k).double()\n"
            "    if scaled:\n        s = s / d_k ** 0.5\n"
            "    return float(((s - s.mean()) ** 2).mean())\n")}),
    Variant("ok_logsumexp", sm("    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))\n")),
    # written the way people write them in the wild: each keeps full marks
    Variant("ok_float32_and_back", {**sm("    y = x.float()\n    y = y - torch.max(y, dim, keepdim=True)[0]\n"
                                         "    e = torch.exp(y)\n    return (e / torch.sum(e, dim, keepdim=True)).to(x.dtype)\n"),
                                    **var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                          "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                          "    s = torch.bmm(q.unsqueeze(1), k.unsqueeze(2)).flatten()\n"
                                          "    if scaled:\n        s = s * torch.tensor(d_k, dtype=torch.float32).rsqrt()\n"
                                          "    return s.var(correction=0).item()\n"),
                                    **att("""    scale = torch.tensor(q.shape[-1], dtype=torch.float32).rsqrt()   # a float32 constant
    s = torch.matmul(q, k.mT) * scale
    if mask is not None:
        s = s.masked_fill(mask == False, -1e9)  # noqa: E712
    w = softmax(s, dim=-1)
    return torch.matmul(w, v), w
""")}),
    Variant("ok_math_e_movedim", {**sm("    y = x.movedim(dim, -1)\n    y = y - y.max(-1, keepdim=True).values\n"
                                       "    e = torch.pow(math.e, y)\n    e = e * (1.0 / e.sum(-1, keepdim=True))\n"
                                       "    return e.movedim(-1, dim)\n"),
                                  **var("    import numpy as np\n"
                                        "    q = torch.randn(n_samples, d_k, generator=generator).numpy()\n"
                                        "    k = torch.randn(n_samples, d_k, generator=generator).numpy()\n"
                                        "    s = np.einsum('ij,ij->i', q, k) / (np.sqrt(d_k) if scaled else 1.0)\n"
                                        "    return float(np.var(s, ddof=1))\n"),
                                  **att("""    import numpy as np
    q = q / np.sqrt(q.shape[-1])          # scale q first, then the product
    s = q @ k.swapaxes(-1, -2)
    if mask is not None:
        s = torch.where(mask.logical_not(), -torch.inf, s)
    w = softmax(s, -1)
    return w @ v, w
""")}),
    Variant("ok_loops_and_float32_math", {**sm("    m = x.amax(dim=dim, keepdim=True)\n"
                                                "    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)\n"
                                                "    e = (x - m).exp()\n    return e / e.sum(dim=dim, keepdim=True)\n"),
                                          **var("    q = torch.randn(n_samples, d_k, generator=generator)\n"
                                                "    k = torch.randn(n_samples, d_k, generator=generator)\n"
                                                "    s = torch.zeros(n_samples)\n"
                                                "    for j in range(d_k):              # one component at a time\n"
                                                "        s += q[:, j] * k[:, j]\n"
                                                "    if scaled:\n        s /= math.sqrt(d_k)\n"
                                                "    mean = s.mean()\n"
                                                "    return float(((s - mean) ** 2).sum() / (n_samples - 1))\n"),
                                          **att("""    d_k = torch.tensor(float(q.shape[-1]))           # float32, even for float64 inputs
    s = torch.einsum("...id,...jd->...ij", q, k) / torch.sqrt(d_k)
    if mask is not None:
        s = s + torch.zeros_like(s).masked_fill(~mask, float("-inf"))
    w = softmax(s.to(q.dtype), dim=-1)
    return torch.einsum("...ij,...jd->...id", w, v), w
""")}),
    # the stated draw is checked by the exact number it gives: the same stream of numbers in one call keeps it
    Variant("ok_one_call_two_rows", {**var("    import statistics\n"
                                           "    q, k = torch.randn(2, n_samples, d_k, generator=generator)   # q, then k\n"
                                           "    dots = (q * k).sum(dim=1)\n"
                                           "    if scaled:\n        dots = dots * d_k ** -0.5\n"
                                           "    return statistics.pvariance(dots.tolist())\n"),
                                     **att("""    *lead, n_q, d_k = q.shape
    s = torch.matmul(q, k.transpose(-1, -2)) / d_k ** 0.5       # matmul broadcasts the batch dims
    if mask is not None:
        s = torch.where(mask, s, s.new_tensor(float("-inf")))
    w = softmax(s, dim=-1)
    return torch.matmul(w, v), w
""")}),
    Variant("sm_logsumexp", sm("    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))\n")),
    Variant("sm_movedim_float64", sm("""    y = x.double().movedim(dim, -1)
    e = torch.exp(y - y.max(-1, keepdim=True).values)
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim).to(x.dtype)
""")),
    Variant("var_variance_divided_by_dk", var("""    q = torch.randn(n_samples, d_k, generator=generator)
    k = torch.randn(n_samples, d_k, generator=generator)
    v = torch.einsum("nd,nd->n", q, k).double().var(unbiased=False).item()
    return v / d_k if scaled else v      # Var(s / √d_k) = Var(s) / d_k
""")),
    Variant("att_finfo_min_where", att("""    s = torch.matmul(q, k.transpose(-1, -2)) * q.size(-1) ** -0.5
    if mask is not None:
        s = torch.where(mask, s, torch.finfo(s.dtype).min)
    w = softmax(s, dim=-1)
    return torch.matmul(w, v), w
""")),
    Variant("att_additive_mask_float64_inside", att("""    s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s + torch.zeros_like(s).masked_fill(~mask, float("-inf"))
    e = torch.exp(s - s.amax(-1, keepdim=True))
    w = (e / e.sum(-1, keepdim=True)).to(q.dtype)
    return w @ v, w
""")),
]

WORDS_ARE_NOT_CALLS = ("ok_comments_name_forbidden_calls",)

# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="ch01.dk_explorer", labels=("d_k",))


def check_widget(target, text):
    """The numbers beside the slider at its starting point, d_k = 128."""
    import math
    s = math.sqrt(128)
    assert f"d_k = 128：典型分数 ±{s:.1f}" in text, text
    assert target.locator("img").count() >= 1
