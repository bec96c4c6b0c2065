"""Known wrong answers (and correct variants) for ch10_llama_block.

Each wrong answer must lose the points of the named test cells and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

RMS_HEAD = "def rms_norm(x, weight, eps=1e-6):\n"
RMS_TAIL = '''

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)
'''
SWIGLU_INIT = '''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
'''
REPEAT_HEAD = "def repeat_kv(x, n_rep):\n    B, n_kv, N, d_k = x.shape\n"

ATT_INIT = '''from helpers.ch10_llama_block import apply_rope


class LlamaAttention(nn.Module):
    def __init__(self, d, n_head, n_kv_head, base=10000.0):
        super().__init__()
        if d % n_head or n_head % n_kv_head or (d // n_head) % 2:
            raise ValueError(f"bad shapes: d={d}, n_head={n_head}, n_kv_head={n_kv_head}")
        self.h, self.h_kv, self.d_k, self.base = n_head, n_kv_head, d // n_head, base
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)
        self.v_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x):
        B, N, d = x.shape
'''
ATT_FORWARD = '''        q = self.q_proj(x).view(B, N, self.h, self.d_k).transpose(1, 2)
        k = self.k_proj(x).view(B, N, self.h_kv, self.d_k).transpose(1, 2)
        v = self.v_proj(x).view(B, N, self.h_kv, self.d_k).transpose(1, 2)
        pos = torch.arange(N)
        q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)
        k, v = repeat_kv(k, self.h // self.h_kv), repeat_kv(v, self.h // self.h_kv)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, N, d))
'''
ATT_OK = ATT_INIT + ATT_FORWARD

BLOCK_INIT = '''class LlamaBlock(nn.Module):
    def __init__(self, d, n_head, n_kv_head, d_ff, eps=1e-6, base=10000.0):
        super().__init__()
        self.attn_norm = RMSNorm(d, eps)
        self.attn = LlamaAttention(d, n_head, n_kv_head, base)
        self.ffn_norm = RMSNorm(d, eps)
        self.ffn = SwiGLU(d, d_ff)

    def forward(self, x):
'''


def kept(name: str, number: int) -> tuple[str, str]:
    """What a later exercise that keeps its marks says when exercise ``number`` (``name``) is wrong."""
    return (f"用正确的 {name} 代替你的之后，这一题是对的", f"练习 {number} 还需要修改")


# a wrong earlier exercise costs its own points once: the exercises that use it keep theirs, and say why
KEPT_RMS = {"test_llama_block": kept("rms_norm", 1)}
KEPT_SWIGLU = {"test_llama_block": kept("SwiGLU", 2)}
KEPT_REPEAT = {"test_llama_attention": kept("repeat_kv", 3), "test_llama_block": kept("repeat_kv", 3)}
KEPT_ATTENTION = {"test_llama_block": kept("LlamaAttention", 4)}


def rms(body: str) -> dict:
    return {"rms_norm": RMS_HEAD + body + RMS_TAIL}


def swiglu(body: str) -> dict:
    return {"swiglu": SWIGLU_INIT + body}


def rep(body: str) -> dict:
    return {"repeat_kv": REPEAT_HEAD + body}


def att(code: str) -> dict:
    return {"llama_attention": code}


def block(body: str, init: str = BLOCK_INIT) -> dict:
    return {"llama_block": init + body}


BUGS = [
    # rms_norm
    Variant("rms_mean_subtracted", rms("    x = x - x.mean(-1, keepdim=True)\n"
                                       "    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("减去了均值", "LayerNorm"), said=KEPT_RMS, breaks=("rms-formula",)),
    Variant("rms_eps_outside", rms("    return x / (torch.sqrt((x ** 2).mean(-1, keepdim=True)) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("根号外面",), said=KEPT_RMS, breaks=("rms-eps-inside",)),
    Variant("rms_no_sqrt", rms("    return x / ((x ** 2).mean(-1, keepdim=True) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("没有开根号",), said=KEPT_RMS, breaks=("rms-formula",)),
    Variant("rms_l2_norm", rms("    return x / torch.sqrt((x ** 2).sum(-1, keepdim=True) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("√d",), said=KEPT_RMS, breaks=("rms-divide-by-d",)),
    Variant("rms_uses_F_rms_norm", rms("    return F.rms_norm(x, (x.shape[-1],), weight, eps)\n"),
            lose=("test_rms_norm",), words=("从零实现",), said=KEPT_RMS, breaks=("rms-from-scratch",)),
    Variant("rms_wrong_axis", rms("    return x / torch.sqrt((x ** 2).mean(dim=1, keepdim=True) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("错误的维度", "dim=-1"), said=KEPT_RMS, breaks=("rms-last-axis",)),
    Variant("rms_weight_first", rms('''    h = x * weight
    return h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
'''), lose=("test_rms_norm",), words=("先乘了 weight",), said=KEPT_RMS, breaks=("rms-formula",)),
    Variant("rms_no_eps", rms("    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True)) * weight\n"),
            lose=("test_rms_norm",), words=("没有在根号里加 eps",), said=KEPT_RMS, breaks=("rms-eps-inside",)),
    Variant("rms_keepdim_missing", rms("    return x / torch.sqrt((x ** 2).mean(-1) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("keepdim=True",), said=KEPT_RMS, breaks=("rms-shape",)),
    Variant("rms_variance", rms("    return x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("方差", "不减均值"), said=KEPT_RMS, breaks=("rms-formula",)),
    Variant("rms_variance_default", rms("    return x * torch.rsqrt(x.var(dim=-1, keepdim=True) + eps) * weight\n"),
            lose=("test_rms_norm",), words=("方差", "d − 1"), said=KEPT_RMS, breaks=("rms-formula",)),
    Variant("rms_weight_missing", rms("    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps)\n"),
            lose=("test_rms_norm",), words=("没有乘 weight",), said=KEPT_RMS, breaks=("rms-formula",)),
    Variant("rms_divides_by_d_minus_1", rms('''    d = x.shape[-1]
    return x / torch.sqrt((x ** 2).sum(-1, keepdim=True) / (d - 1) + eps) * weight
'''), lose=("test_rms_norm",), words=("d − 1",), said=KEPT_RMS, breaks=("rms-divide-by-d",)),
    Variant("rms_float16", rms('''    h = x.half()
    h = h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps)
    return (h * weight.half()).to(x.dtype)
'''), lose=("test_rms_norm",), words=("float16",), said=KEPT_RMS),
    Variant("rms_in_place", rms('''    x /= torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps)
    return x * weight
'''), lose=("test_rms_norm",), words=("输入 x 被改了", "原地"), said=KEPT_RMS, breaks=("rms-new-tensor",)),
    Variant("rms_default_eps", {"rms_norm": RMS_HEAD.replace("eps=1e-6", "eps=1e-5")
                                + "    return x * torch.rsqrt((x ** 2).mean(-1, keepdim=True) + eps) * weight\n" + RMS_TAIL},
            lose=("test_rms_norm",), words=("eps 的默认值", "1e-6"), said=KEPT_RMS, breaks=("rms-eps-default",)),
    Variant("rms_returns_float32", rms('''    x32 = x.float()
    return x32 / torch.sqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
'''), lose=("test_rms_norm",), words=("dtype", "float64 出"), said=KEPT_RMS, breaks=("rms-dtype",)),
    Variant("rms_not_done", rms("    raise NotImplementedError()\n"), lose=("test_rms_norm",), words=("还没有实现",),
            said=KEPT_RMS),
    # SwiGLU
    Variant("swiglu_silu_on_up", swiglu("        return self.down(self.gate(x) * F.silu(self.up(x)))\n"),
            lose=("test_swiglu",), words=("up 分支",), said=KEPT_SWIGLU, breaks=("swiglu-silu-gate-only",)),
    Variant("swiglu_gelu", swiglu("        return self.down(F.gelu(self.gate(x)) * self.up(x))\n"),
            lose=("test_swiglu",), words=("GELU", "SiLU"), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_bias_left_in", {"swiglu": SWIGLU_INIT.replace("self.gate = nn.Linear(d, d_ff, bias=False)",
                                                                 "self.gate = nn.Linear(d, d_ff)")
                                    + "        return self.down(F.silu(self.gate(x)) * self.up(x))\n"},
            lose=("test_swiglu",), words=("bias",), said=KEPT_SWIGLU, breaks=("swiglu-no-bias",)),
    Variant("swiglu_sigmoid", swiglu("        return self.down(torch.sigmoid(self.gate(x)) * self.up(x))\n"),
            lose=("test_swiglu",), words=("sigmoid",), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_silu_on_product", swiglu("        return self.down(F.silu(self.gate(x) * self.up(x)))\n"),
            lose=("test_swiglu",), words=("乘积外面",), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_silu_after_down", swiglu("        return F.silu(self.down(self.gate(x) * self.up(x)))\n"),
            lose=("test_swiglu",), words=("down 的输出",), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_relu", swiglu("        return self.down(torch.relu(self.gate(x)) * self.up(x))\n"),
            lose=("test_swiglu",), words=("ReLU",), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_no_activation", swiglu("        return self.down(self.gate(x) * self.up(x))\n"),
            lose=("test_swiglu",), words=("没有经过 SiLU",), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_added", swiglu("        return self.down(F.silu(self.gate(x)) + self.up(x))\n"),
            lose=("test_swiglu",), words=("相加",), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_silu_both", swiglu("        return self.down(F.silu(self.gate(x)) * F.silu(self.up(x)))\n"),
            lose=("test_swiglu",), words=("两个分支都过了 SiLU",), said=KEPT_SWIGLU, breaks=("swiglu-silu-gate-only",)),
    Variant("swiglu_silu_sign", swiglu('''        g = self.gate(x)
        return self.down(g / (1 + torch.exp(g)) * self.up(x))
'''), lose=("test_swiglu",), words=("符号反了",), said=KEPT_SWIGLU, breaks=("swiglu-formula",)),
    Variant("swiglu_down_missing", swiglu("        return F.silu(self.gate(x)) * self.up(x)\n"),
            lose=("test_swiglu",), words=("self.down",), said=KEPT_SWIGLU, breaks=("swiglu-shape",)),
    Variant("swiglu_linear_args_swapped", {"swiglu": SWIGLU_INIT.replace("nn.Linear(d_ff, d, bias=False)",
                                                                        "nn.Linear(d, d_ff, bias=False)")
                                           + "        return self.down(F.silu(self.gate(x)) * self.up(x))\n"},
            lose=("test_swiglu",), words=("nn.Linear 的两个参数写反了",), said=KEPT_SWIGLU, breaks=("swiglu-shapes",)),
    Variant("swiglu_llama_names", {"swiglu": '''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d, bias=False)
        self.w3 = nn.Linear(d, d_ff, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
'''}, lose=("test_swiglu",), words=("self.gate、self.up、self.down", "w1"), said=KEPT_SWIGLU, breaks=("swiglu-names",)),
    Variant("swiglu_learnable_beta", {"swiglu": SWIGLU_INIT.replace("        self.down = nn.Linear(d_ff, d, bias=False)\n",
                                                                   "        self.down = nn.Linear(d_ff, d, bias=False)\n"
                                                                   "        self.beta = nn.Parameter(torch.ones(1))\n")
                                      + "        g = self.gate(x)\n"
                                        "        return self.down(g * torch.sigmoid(self.beta * g) * self.up(x))\n"},
            lose=("test_swiglu",), words=("3·d·d_ff", "β"), said=KEPT_SWIGLU, breaks=("swiglu-no-other-params",)),
    Variant("swiglu_no_super_init", {"swiglu": SWIGLU_INIT.replace("        super().__init__()\n", "")
                                     + "        return self.down(F.silu(self.gate(x)) * self.up(x))\n"},
            lose=("test_swiglu",), words=("super().__init__()",), said=KEPT_SWIGLU),
    # repeat_kv
    Variant("repeat_kv_tiled", rep("    return x.repeat(1, n_rep, 1, 1)\n"),
            lose=("test_repeat_kv",), words=("i % n_kv_head", "i // n_rep"), said=KEPT_REPEAT, breaks=("repeat-order",)),
    Variant("repeat_kv_token_axis", rep("    return x.repeat_interleave(n_rep, dim=2)\n"),
            lose=("test_repeat_kv",), words=("dim=2",), said=KEPT_REPEAT, breaks=("repeat-shape",)),
    Variant("repeat_kv_expand_outer",
            rep("    return x[:, None].expand(B, n_rep, n_kv, N, d_k).reshape(B, n_kv * n_rep, N, d_k)\n"),
            lose=("test_repeat_kv",), words=("i % n_kv_head",), said=KEPT_REPEAT, breaks=("repeat-order",)),
    Variant("repeat_kv_cat", rep("    return torch.cat([x] * n_rep, dim=1)\n"),
            lose=("test_repeat_kv",), words=("i % n_kv_head", "torch.cat"), said=KEPT_REPEAT, breaks=("repeat-order",)),
    Variant("repeat_kv_index_modulo", rep("    return x[:, torch.arange(n_kv * n_rep) % n_kv]\n"),
            lose=("test_repeat_kv",), words=("i % n_kv_head",), said=KEPT_REPEAT, breaks=("repeat-order",)),
    Variant("repeat_kv_batch_axis", rep("    return x.repeat_interleave(n_rep, dim=0)\n"),
            lose=("test_repeat_kv",), words=("batch 轴",), said=KEPT_REPEAT, breaks=("repeat-shape",)),
    Variant("repeat_kv_feature_axis", rep("    return x.repeat_interleave(n_rep, dim=-1)\n"),
            lose=("test_repeat_kv",), words=("d_k（dim=-1）",), said=KEPT_REPEAT, breaks=("repeat-shape",)),
    Variant("repeat_kv_no_reshape", rep("    return x[:, :, None].expand(B, n_kv, n_rep, N, d_k)\n"),
            lose=("test_repeat_kv",), words=("还要 reshape",), said=KEPT_REPEAT, breaks=("repeat-shape",)),
    Variant("repeat_kv_view_of_expand",
            rep("    return x[:, :, None].expand(B, n_kv, n_rep, N, d_k).view(B, n_kv * n_rep, N, d_k)\n"),
            lose=("test_repeat_kv",), words=("改用 reshape",), said=KEPT_REPEAT),
    Variant("repeat_kv_expand_no_new_axis", rep("    return x.expand(B, n_kv * n_rep, N, d_k)\n"),
            lose=("test_repeat_kv",), words=("x[:, :, None]",), said=KEPT_REPEAT),
    Variant("repeat_kv_copies_next_to_tokens",
            rep("    return x[:, :, :, None].expand(B, n_kv, N, n_rep, d_k).reshape(B, n_kv * n_rep, N, d_k)\n"),
            lose=("test_repeat_kv",), words=("token 轴旁边",), said=KEPT_REPEAT, breaks=("repeat-order",)),
    Variant("repeat_kv_tokens_tiled", rep("    return x.repeat(1, 1, n_rep, 1)\n"),
            lose=("test_repeat_kv",), words=("token 轴",), said=KEPT_REPEAT, breaks=("repeat-shape",)),
    Variant("repeat_kv_no_grad", rep('''    with torch.no_grad():
        return x.repeat_interleave(n_rep, dim=1)
'''), lose=("test_repeat_kv",), words=("断开了计算图",), said=KEPT_REPEAT, breaks=("repeat-autograd",)),
    # LlamaAttention
    Variant("rope_on_v", att(ATT_OK.replace("q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)",
                                            "q, k, v = (apply_rope(a, pos, self.base) for a in (q, k, v))")),
            lose=("test_llama_attention",), words=("v 上",), said=KEPT_ATTENTION, breaks=("attn-rope-not-v",)),
    Variant("rope_before_head_split", att(ATT_INIT + '''        pos = torch.arange(N)
        q = apply_rope(self.q_proj(x), pos, self.base).view(B, N, self.h, self.d_k).transpose(1, 2)
        k = apply_rope(self.k_proj(x), pos, self.base).view(B, N, self.h_kv, self.d_k).transpose(1, 2)
        v = self.v_proj(x).view(B, N, self.h_kv, self.d_k).transpose(1, 2)
        k, v = repeat_kv(k, self.h // self.h_kv), repeat_kv(v, self.h // self.h_kv)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, N, d))
'''), lose=("test_llama_attention",), words=("拆头之前",), said=KEPT_ATTENTION, breaks=("attn-rope-qk",)),
    Variant("rope_on_token_axis_unsplit", att(ATT_OK.replace(
        "q = self.q_proj(x).view(B, N, self.h, self.d_k).transpose(1, 2)",
        "q = apply_rope(self.q_proj(x).view(B, N, self.h, self.d_k), torch.arange(N), self.base).transpose(1, 2)")),
            lose=("test_llama_attention",), words=("倒数第二维",), said=KEPT_ATTENTION, breaks=("attn-rope-qk",)),
    Variant("rope_rotate_half", att(ATT_OK.replace(
        "q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)",
        '''inv = self.base ** (-torch.arange(0, self.d_k, 2).double() / self.d_k)
        ang = pos[:, None].double() * inv[None]
        cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
        half = lambda a: torch.cat([-a[..., self.d_k // 2:], a[..., :self.d_k // 2]], -1)
        q, k = q * cos + half(q) * sin, k * cos + half(k) * sin''')),
            lose=("test_llama_attention",), words=("rotate-half",), said=KEPT_ATTENTION, breaks=("attn-rope-adjacent",)),
    Variant("kv_heads_tiled_inline", att(ATT_OK.replace(
        "k, v = repeat_kv(k, self.h // self.h_kv), repeat_kv(v, self.h // self.h_kv)",
        "k, v = k.repeat(1, self.h // self.h_kv, 1, 1), v.repeat(1, self.h // self.h_kv, 1, 1)")),
            lose=("test_llama_attention",), words=("i // n_rep",), said=KEPT_ATTENTION, breaks=("attn-repeat",)),
    Variant("attention_bias_left_in", att(ATT_OK.replace("self.q_proj = nn.Linear(d, d, bias=False)",
                                                         "self.q_proj = nn.Linear(d, d)")),
            lose=("test_llama_attention",), words=("bias",), said=KEPT_ATTENTION, breaks=("attn-no-bias",)),
    Variant("rope_missing", att(ATT_OK.replace(
        "        q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)\n", "")),
            lose=("test_llama_attention",), words=("没有用 RoPE",), said=KEPT_ATTENTION, breaks=("attn-rope-qk",)),
    Variant("assert_not_valueerror", att(ATT_OK.replace(
        '        if d % n_head or n_head % n_kv_head or (d // n_head) % 2:\n'
        '            raise ValueError(f"bad shapes: d={d}, n_head={n_head}, n_kv_head={n_kv_head}")\n',
        '        assert d % n_head == 0 and n_head % n_kv_head == 0 and (d // n_head) % 2 == 0\n')),
            lose=("test_llama_attention",), words=("assert", "ValueError"), said=KEPT_ATTENTION, breaks=("attn-valueerror",)),
    Variant("attention_scaled_by_sqrt_d", att(ATT_OK.replace("/ math.sqrt(self.d_k)", "/ math.sqrt(d)")),
            lose=("test_llama_attention",), words=("√d_k",), said=KEPT_ATTENTION, breaks=("attn-scale",)),
    Variant("attention_no_mask", att(ATT_OK.replace(
        '        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))\n', "")),
            lose=("test_llama_attention",), words=("没有因果掩码",), said=KEPT_ATTENTION, breaks=("attn-causal",)),
    Variant("attention_o_proj_unused", att(ATT_OK.replace("return self.o_proj(y.transpose(1, 2).reshape(B, N, d))",
                                                          "return y.transpose(1, 2).reshape(B, N, d)")),
            lose=("test_llama_attention",), words=("没有经过 o_proj",), said=KEPT_ATTENTION, breaks=("attn-o-proj",)),
    Variant("attention_mask_after_softmax", att(ATT_OK.replace('''        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
''', '''        p = torch.softmax(s, dim=-1).masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), 0.0)
        y = p @ v
''')), lose=("test_llama_attention",), words=("softmax 之后",), said=KEPT_ATTENTION, breaks=("attn-causal",)),
    Variant("attention_mask_diagonal", att(ATT_OK.replace("torch.ones(N, N, dtype=torch.bool).triu(1)",
                                                          "torch.ones(N, N, dtype=torch.bool).triu()")),
            lose=("test_llama_attention",), words=("对角线", "triu(1)"), breaks=("attn-causal",)),
    Variant("attention_mask_reversed", att(ATT_OK.replace("torch.ones(N, N, dtype=torch.bool).triu(1)",
                                                          "torch.ones(N, N, dtype=torch.bool).tril(-1)")),
            lose=("test_llama_attention",), words=("掩码方向反了",), said=KEPT_ATTENTION, breaks=("attn-causal",)),
    Variant("attention_softmax_dim", att(ATT_OK.replace("torch.softmax(s, dim=-1)", "torch.softmax(s, dim=-2)")),
            lose=("test_llama_attention",), words=("dim=-1",), said=KEPT_ATTENTION, breaks=("attn-softmax",)),
    Variant("rope_only_q", att(ATT_OK.replace(
        "q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)", "q = apply_rope(q, pos, self.base)")),
            lose=("test_llama_attention",), words=("k 没有旋转",), said=KEPT_ATTENTION, breaks=("attn-rope-qk",)),
    Variant("rope_base_ignored", att(ATT_OK.replace(
        "q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)", "q, k = apply_rope(q, pos), apply_rope(k, pos)")),
            lose=("test_llama_attention",), words=("self.base",), said=KEPT_ATTENTION, breaks=("attn-rope-base",)),
    Variant("attention_odd_head_width", att(ATT_OK.replace(" or (d // n_head) % 2", "")),
            lose=("test_llama_attention",), words=("奇数", "ValueError"), said=KEPT_ATTENTION, breaks=("attn-error-odd",)),
    Variant("attention_valueerror_without_values", att(ATT_OK.replace(
        'raise ValueError(f"bad shapes: d={d}, n_head={n_head}, n_kv_head={n_kv_head}")',
        'raise ValueError("the shapes do not fit")')),
            lose=("test_llama_attention",), words=("相关的值",), said=KEPT_ATTENTION, breaks=("attn-error-values",)),
    Variant("attention_kv_full_width", att(ATT_OK.replace(
        "self.k_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)", "self.k_proj = nn.Linear(d, d, bias=False)").replace(
        "self.v_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)", "self.v_proj = nn.Linear(d, d, bias=False)")),
            lose=("test_llama_attention",), words=("n_kv_head * d_k",), said=KEPT_ATTENTION, breaks=("attn-proj-shapes",)),
    Variant("heads_merged_without_transpose", att(ATT_OK.replace("y.transpose(1, 2).reshape(B, N, d)", "y.reshape(B, N, d)")),
            lose=("test_llama_attention",), words=("没有先 transpose(1, 2)",), said=KEPT_ATTENTION, breaks=("attn-merge",)),
    Variant("attention_forgot_repeat_kv", att(ATT_OK.replace(
        "        k, v = repeat_kv(k, self.h // self.h_kv), repeat_kv(v, self.h // self.h_kv)\n", "")),
            lose=("test_llama_attention",), words=("repeat_kv(k, n_head // n_kv_head)",), said=KEPT_ATTENTION, breaks=("attn-repeat",)),
    # rules the ledger found unchecked or unnamed
    Variant("rms_eps_ignored", rms("    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6) * weight\n"),
            lose=("test_rms_norm",), words=("没有用参数 eps",), said=KEPT_RMS, breaks=("rms-eps-used",)),
    Variant("rms_assumes_3d", rms('''    B, N, d = x.shape
    ms = (x * x).sum(dim=2, keepdim=True) / d
    return x / torch.sqrt(ms + eps) * weight
'''), lose=("test_rms_norm",), words=("一维", "允许"), said=KEPT_RMS, breaks=("rms-any-leading-dims",)),
    Variant("rms_uses_nn_RMSNorm", rms('''    norm = nn.RMSNorm(x.shape[-1], eps=eps, elementwise_affine=False)
    return norm(x) * weight
'''), lose=("test_rms_norm",), words=("从零实现",), said=KEPT_RMS, breaks=("rms-from-scratch",)),
    Variant("attention_no_divisibility_check", att(ATT_OK.replace("if d % n_head or n_head % n_kv_head", "if n_head % n_kv_head")),
            lose=("test_llama_attention",), words=("没有抛出 ValueError", "d % n_head"), said=KEPT_ATTENTION,
            breaks=("attn-error-d-heads",)),
    Variant("attention_no_kv_heads_check", att(ATT_OK.replace("if d % n_head or n_head % n_kv_head or", "if d % n_head or")),
            lose=("test_llama_attention",), words=("没有抛出 ValueError", "n_head % n_kv_head"), said=KEPT_ATTENTION,
            breaks=("attn-error-kv-heads",)),
    Variant("attention_llama_names", att(ATT_OK.replace("self.q_proj", "self.wq").replace("self.k_proj", "self.wk")
                                         .replace("self.v_proj", "self.wv").replace("self.o_proj", "self.wo")),
            lose=("test_llama_attention",), words=("四个投影要叫",), said=KEPT_ATTENTION, breaks=("attn-names",)),
    Variant("attention_learnable_scale", att(ATT_OK.replace(
        "        self.o_proj = nn.Linear(d, d, bias=False)\n",
        "        self.o_proj = nn.Linear(d, d, bias=False)\n"
        "        self.scale = nn.Parameter(torch.tensor(self.d_k ** -0.5))\n").replace(
        "s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)", "s = q @ k.transpose(-2, -1) * self.scale")),
            lose=("test_llama_attention",), words=("还有别的参数",), said=KEPT_ATTENTION, breaks=("attn-no-other-params",)),
    Variant("attention_heads_not_merged", att(ATT_OK.replace("return self.o_proj(y.transpose(1, 2).reshape(B, N, d))",
                                                             "return y")),
            lose=("test_llama_attention",), words=("拆开的各头",), said=KEPT_ATTENTION, breaks=("attn-output-shape",)),
    Variant("attention_split_view", att(ATT_OK.replace(".view(B, N, self.h, self.d_k).transpose(1, 2)", ".view(B, self.h, N, self.d_k)")
                                        .replace(".view(B, N, self.h_kv, self.d_k).transpose(1, 2)", ".view(B, self.h_kv, N, self.d_k)")),
            lose=("test_llama_attention",), words=("拆头时直接 view",), said=KEPT_ATTENTION, breaks=("attn-split",)),
    Variant("attention_mask_fixed_size", att(ATT_OK.replace(
        "        self.o_proj = nn.Linear(d, d, bias=False)\n",
        "        self.o_proj = nn.Linear(d, d, bias=False)\n"
        "        self.register_buffer(\"future\", torch.ones(512, 512, dtype=torch.bool).triu(1))\n").replace(
        "torch.ones(N, N, dtype=torch.bool).triu(1)", "self.future[:N, :N]")),
            lose=("test_llama_attention",), words=("固定的大小",), said=KEPT_ATTENTION, breaks=("attn-causal",)),
    Variant("block_default_eps", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("eps=1e-6, base=10000.0", "eps=1e-5, base=10000.0")),
            lose=("test_llama_block",), words=("默认值",), breaks=("block-defaults",)),
    Variant("block_hf_names", {"llama_block": '''class LlamaBlock(nn.Module):
    def __init__(self, d, n_head, n_kv_head, d_ff, eps=1e-6, base=10000.0):
        super().__init__()
        self.input_layernorm = RMSNorm(d, eps)
        self.self_attn = LlamaAttention(d, n_head, n_kv_head, base)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.mlp = SwiGLU(d, d_ff)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))
'''}, lose=("test_llama_block",), words=("块的四个子模块要叫",), breaks=("block-names",)),
    # each exercise graded on its own
    Variant("repeat_wrong_attention_wrong", {**rep("    return x.repeat(1, n_rep, 1, 1)\n"),
                                             **att(ATT_OK.replace("/ math.sqrt(self.d_k)", "/ math.sqrt(d)"))},
            lose=("test_repeat_kv", "test_llama_attention"),
            said={"test_llama_attention": ("√d_k", "已经用正确的 repeat_kv 代替了你的", "出在这一题本身"),
                  "test_llama_block": ("用正确的 repeat_kv、LlamaAttention 代替你的之后", "练习 3、4 还需要修改")}),
    Variant("block_not_done_rms_wrong", {**rms("    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True)) * weight\n"),
                                         **block("        raise NotImplementedError()\n")},
            lose=("test_rms_norm", "test_llama_block"), said={"test_llama_block": ("还没有实现",)}),
    # LlamaBlock
    Variant("post_norm", block('''        x = self.attn_norm(x + self.attn(x))
        return self.ffn_norm(x + self.ffn(x))
'''), lose=("test_llama_block",), words=("Post-norm",), breaks=("block-attn-residual",)),
    Variant("residual_from_normalised", block('''        x = self.attn_norm(x)
        x = x + self.attn(x)
        x = self.ffn_norm(x)
        return x + self.ffn(x)
'''), lose=("test_llama_block",), words=("归一化之后的 x",), breaks=("block-attn-residual",)),
    Variant("ffn_residual_missing", block('''        x = x + self.attn(self.attn_norm(x))
        return self.ffn(self.ffn_norm(x))
'''), lose=("test_llama_block",), words=("FFN 子层少了残差",), breaks=("block-ffn-residual",)),
    Variant("eps_not_passed", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("RMSNorm(d, eps)", "RMSNorm(d)")), lose=("test_llama_block",), words=("eps 没有传给",), breaks=("block-attn-norm",)),
    Variant("layernorm_in_block", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("RMSNorm(d, eps)", "nn.LayerNorm(d, eps=eps)")), lose=("test_llama_block",),
            words=("bias",), breaks=("block-attn-norm",)),
    Variant("attn_residual_missing", block('''        x = self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
'''), lose=("test_llama_block",), words=("注意力子层少了残差",), breaks=("block-attn-residual",)),
    Variant("sublayers_swapped", block('''        x = x + self.ffn(self.ffn_norm(x))
        return x + self.attn(self.attn_norm(x))
'''), lose=("test_llama_block",), words=("顺序反了",), breaks=("block-order",)),
    Variant("attn_norm_used_twice", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.attn_norm(x))
'''), lose=("test_llama_block",), words=("同一个 RMSNorm",), breaks=("block-two-norms",)),
    Variant("base_not_passed", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("LlamaAttention(d, n_head, n_kv_head, base)", "LlamaAttention(d, n_head, n_kv_head)")),
            lose=("test_llama_block",), words=("base 没有传给",), breaks=("block-attn-base",)),
    Variant("norm_after_sublayer", block('''        x = x + self.attn_norm(self.attn(x))
        return x + self.ffn_norm(self.ffn(x))
'''), lose=("test_llama_block",), words=("子层的输出上",), breaks=("block-attn-residual",)),
    Variant("parallel_sublayers", block('''        h = x + self.attn(self.attn_norm(x))
        return h + self.ffn(self.ffn_norm(x))
'''), lose=("test_llama_block",), words=("并联",), breaks=("block-ffn-residual",)),
    Variant("block_with_buggy_ffn", {**swiglu("        return self.down(self.gate(x) * F.silu(self.up(x)))\n"),
                                     **block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''')}, lose=("test_swiglu",), words=("up 分支",), said=KEPT_SWIGLU),
    Variant("d_ff_ignored", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("SwiGLU(d, d_ff)", "SwiGLU(d, 4 * d)")), lose=("test_llama_block",), words=("SwiGLU(d, d_ff)",), breaks=("block-ffn",)),
    Variant("ffn_reads_normed_input", block('''        h = self.attn_norm(x)
        return x + self.attn(h) + self.ffn(self.ffn_norm(h))
'''), lose=("test_llama_block",), words=("self.ffn 的输入是 ffn_norm(attn_norm(x))",), breaks=("block-ffn-residual",)),
    # ---- a second way to break each rule that had one breaking case
    Variant("rms_default_eps_none", {"rms_norm": RMS_HEAD.replace("eps=1e-6", "eps=None")
                                     + "    eps = 1e-5 if eps is None else eps\n"
                                     + "    return x * torch.rsqrt((x ** 2).mean(-1, keepdim=True) + eps) * weight\n" + RMS_TAIL},
            lose=("test_rms_norm",), words=("eps 的默认值", "1e-6"), said=KEPT_RMS, breaks=("rms-eps-default",)),
    Variant("rms_eps_machine_epsilon", rms("    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps) * weight\n"),
            lose=("test_rms_norm",), words=("没有用参数 eps",), said=KEPT_RMS, breaks=("rms-eps-used",)),
    Variant("rms_einsum_three_axes", rms('''    ms = torch.einsum("bnd,bnd->bn", x, x)[..., None] / x.shape[-1]
    return x / torch.sqrt(ms + eps) * weight
'''), lose=("test_rms_norm",), words=("允许",), said=KEPT_RMS, breaks=("rms-any-leading-dims",)),
    Variant("rms_norm_over_axis_1", rms("    return x * torch.rsqrt(x.norm(dim=1, keepdim=True) ** 2 / x.shape[1] + eps) * weight\n"),
            lose=("test_rms_norm",), words=("错误的维度",), said=KEPT_RMS, breaks=("rms-last-axis",)),
    Variant("rms_mul_in_place", rms('''    x.mul_(torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))
    return x.mul_(weight)
'''), lose=("test_rms_norm",), words=("输入 x 被改了",), said=KEPT_RMS, breaks=("rms-new-tensor",)),
    Variant("rms_flattened_rows", rms('''    rows = x.reshape(-1, x.shape[-1])
    return rows / torch.sqrt((rows * rows).mean(-1, keepdim=True) + eps) * weight
'''), lose=("test_rms_norm",), words=("形状",), said=KEPT_RMS, breaks=("rms-shape",)),
    Variant("rms_computes_in_float64", rms('''    h = x.double()
    return h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps) * weight.double()
'''), lose=("test_rms_norm",), words=("dtype",), said=KEPT_RMS, breaks=("rms-dtype",)),
    Variant("swiglu_hf_names", {"swiglu": SWIGLU_INIT.replace("self.gate =", "self.gate_proj =").replace(
        "self.up =", "self.up_proj =").replace("self.down =", "self.down_proj =")
        + "        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))\n"},
            lose=("test_swiglu",), words=("self.gate、self.up、self.down",), said=KEPT_SWIGLU, breaks=("swiglu-names",)),
    Variant("swiglu_hidden_4d", {"swiglu": SWIGLU_INIT.replace("d_ff, bias", "4 * d, bias").replace(
        "nn.Linear(d_ff, d,", "nn.Linear(4 * d, d,") + "        return self.down(F.silu(self.gate(x)) * self.up(x))\n"},
            lose=("test_swiglu",), words=("d_ff",), said=KEPT_SWIGLU, breaks=("swiglu-shapes",)),
    Variant("swiglu_bias_on_down", {"swiglu": SWIGLU_INIT.replace("nn.Linear(d_ff, d, bias=False)", "nn.Linear(d_ff, d)")
                                    + "        return self.down(F.silu(self.gate(x)) * self.up(x))\n"},
            lose=("test_swiglu",), words=("bias",), said=KEPT_SWIGLU, breaks=("swiglu-no-bias",)),
    Variant("swiglu_extra_layernorm", {"swiglu": SWIGLU_INIT.replace("        self.down = nn.Linear(d_ff, d, bias=False)\n",
                                                                      "        self.down = nn.Linear(d_ff, d, bias=False)\n"
                                                                      "        self.norm = nn.LayerNorm(d_ff)\n")
                                       + "        return self.down(self.norm(F.silu(self.gate(x)) * self.up(x)))\n"},
            lose=("test_swiglu",), words=("3·d·d_ff",), said=KEPT_SWIGLU, breaks=("swiglu-no-other-params",)),
    Variant("swiglu_flattens_batch", swiglu("        return self.down(F.silu(self.gate(x)) * self.up(x)).reshape(-1, x.shape[-1])\n"),
            lose=("test_swiglu",), words=("形状",), said=KEPT_SWIGLU, breaks=("swiglu-shape",)),
    Variant("repeat_kv_detached", rep("    return x.detach().repeat_interleave(n_rep, dim=1)\n"),
            lose=("test_repeat_kv",), words=("断开了计算图",), said=KEPT_REPEAT, breaks=("repeat-autograd",)),
    Variant("attention_runtimeerror", att(ATT_OK.replace('raise ValueError(f"bad shapes', 'raise RuntimeError(f"bad shapes')),
            lose=("test_llama_attention",), words=("ValueError", "RuntimeError"), said=KEPT_ATTENTION, breaks=("attn-valueerror",)),
    Variant("attention_valueerror_one_value", att(ATT_OK.replace(
        '        if d % n_head or n_head % n_kv_head or (d // n_head) % 2:\n'
        '            raise ValueError(f"bad shapes: d={d}, n_head={n_head}, n_kv_head={n_kv_head}")\n',
        '        if d % n_head:\n            raise ValueError(f"n_head={n_head} does not divide the width")\n'
        '        if n_head % n_kv_head or (d // n_head) % 2:\n'
        '            raise ValueError(f"bad shapes: d={d}, n_head={n_head}, n_kv_head={n_kv_head}")\n')),
            lose=("test_llama_attention",), words=("相关的值",), said=KEPT_ATTENTION, breaks=("attn-error-values",)),
    Variant("attention_checks_d_by_kv_heads", att(ATT_OK.replace("if d % n_head or", "if d % n_kv_head or")),
            lose=("test_llama_attention",), words=("没有抛出 ValueError", "d % n_head"), said=KEPT_ATTENTION,
            breaks=("attn-error-d-heads",)),
    Variant("attention_checks_kv_not_more", att(ATT_OK.replace("n_head % n_kv_head", "n_kv_head > n_head")),
            lose=("test_llama_attention",), words=("没有抛出 ValueError", "n_head % n_kv_head"), said=KEPT_ATTENTION,
            breaks=("attn-error-kv-heads",)),
    Variant("attention_checks_d_even", att(ATT_OK.replace("(d // n_head) % 2", "d % 2")),
            lose=("test_llama_attention",), words=("奇数", "ValueError"), said=KEPT_ATTENTION, breaks=("attn-error-odd",)),
    Variant("attention_fused_qkv", att(ATT_INIT.replace(
        "        self.q_proj = nn.Linear(d, d, bias=False)\n        self.k_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)\n"
        "        self.v_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)\n",
        "        self.qkv = nn.Linear(d, d + 2 * n_kv_head * self.d_k, bias=False)\n") + '''        kv = self.h_kv * self.d_k
        q, k, v = self.qkv(x).split([d, kv, kv], dim=-1)
        q = q.view(B, N, self.h, self.d_k).transpose(1, 2)
        k = k.view(B, N, self.h_kv, self.d_k).transpose(1, 2)
        v = v.view(B, N, self.h_kv, self.d_k).transpose(1, 2)
        pos = torch.arange(N)
        q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)
        k, v = repeat_kv(k, self.h // self.h_kv), repeat_kv(v, self.h // self.h_kv)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, N, d))
'''), lose=("test_llama_attention",), words=("四个投影要叫",), said=KEPT_ATTENTION, breaks=("attn-names",)),
    Variant("attention_kv_width_heads_only", att(ATT_OK.replace(
        "self.k_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)", "self.k_proj = nn.Linear(d, n_kv_head, bias=False)").replace(
        "self.v_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)", "self.v_proj = nn.Linear(d, n_kv_head, bias=False)")),
            lose=("test_llama_attention",), words=("n_kv_head·d_k",), said=KEPT_ATTENTION, breaks=("attn-proj-shapes",)),
    Variant("attention_bias_on_o_proj", att(ATT_OK.replace("self.o_proj = nn.Linear(d, d, bias=False)",
                                                           "self.o_proj = nn.Linear(d, d)")),
            lose=("test_llama_attention",), words=("bias",), said=KEPT_ATTENTION, breaks=("attn-no-bias",)),
    Variant("attention_frequencies_as_parameter", att(ATT_OK.replace(
        "        self.o_proj = nn.Linear(d, d, bias=False)\n",
        "        self.o_proj = nn.Linear(d, d, bias=False)\n"
        "        self.inv_freq = nn.Parameter(base ** (-torch.arange(0, self.d_k, 2) / self.d_k))\n")),
            lose=("test_llama_attention",), words=("还有别的参数",), said=KEPT_ATTENTION, breaks=("attn-no-other-params",)),
    Variant("attention_returns_weights_too", att(ATT_OK.replace('''        y = torch.softmax(s, dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, N, d))
''', '''        p = torch.softmax(s, dim=-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, N, d)), p
''')), lose=("test_llama_attention",), words=("元组",), said=KEPT_ATTENTION, breaks=("attn-output-shape",)),
    Variant("attention_split_interleaved", att(ATT_OK.replace(".view(B, N, self.h, self.d_k).transpose(1, 2)",
                                                              ".view(B, N, self.d_k, self.h).permute(0, 3, 1, 2)")
                                              .replace(".view(B, N, self.h_kv, self.d_k).transpose(1, 2)",
                                                       ".view(B, N, self.d_k, self.h_kv).permute(0, 3, 1, 2)")),
            lose=("test_llama_attention",), words=("交错",), said=KEPT_ATTENTION, breaks=("attn-split",)),
    Variant("attention_base_overwritten", att(ATT_OK.replace("self.d_k, self.base = n_head, n_kv_head, d // n_head, base",
                                                             "self.d_k, self.base = n_head, n_kv_head, d // n_head, 10000.0")),
            lose=("test_llama_attention",), words=("self.base",), said=KEPT_ATTENTION, breaks=("attn-rope-base",)),
    Variant("rope_hf_rotate_half", att(ATT_OK.replace(
        "q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)",
        '''from transformers.models.llama.modeling_llama import rotate_half
        inv = 1.0 / self.base ** (torch.arange(0, self.d_k, 2, dtype=torch.float64) / self.d_k)
        ang = torch.outer(pos.double(), inv)
        emb = torch.cat([ang, ang], dim=-1)
        cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin''')),
            lose=("test_llama_attention",), words=("rotate-half",), said=KEPT_ATTENTION, breaks=("attn-rope-adjacent",)),
    Variant("rope_on_k_and_v", att(ATT_OK.replace(
        "q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)",
        "q = apply_rope(q, pos, self.base)\n        k, v = [apply_rope(a, pos, self.base) for a in (k, v)]")),
            lose=("test_llama_attention",), words=("v 上",), said=KEPT_ATTENTION, breaks=("attn-rope-not-v",)),
    Variant("attention_divided_by_d_k", att(ATT_OK.replace("/ math.sqrt(self.d_k)", "/ self.d_k")),
            lose=("test_llama_attention",), words=("√d_k",), said=KEPT_ATTENTION, breaks=("attn-scale",)),
    Variant("attention_softmax_over_heads", att(ATT_OK.replace("torch.softmax(s, dim=-1)", "torch.softmax(s, dim=1)")),
            lose=("test_llama_attention",), words=("dim=-1",), said=KEPT_ATTENTION, breaks=("attn-softmax",)),
    Variant("heads_merged_interleaved", att(ATT_OK.replace("y.transpose(1, 2).reshape(B, N, d)", "y.permute(0, 2, 3, 1).reshape(B, N, d)")),
            lose=("test_llama_attention",), words=("交错",), said=KEPT_ATTENTION, breaks=("attn-merge",)),
    Variant("attention_output_through_q_proj", att(ATT_OK.replace("return self.o_proj(y.transpose(1, 2).reshape(B, N, d))",
                                                                  "return self.q_proj(y.transpose(1, 2).reshape(B, N, d))")),
            lose=("test_llama_attention",), words=("o_proj",), said=KEPT_ATTENTION, breaks=("attn-o-proj",)),
    Variant("block_default_base_llama3", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("eps=1e-6, base=10000.0", "eps=1e-6, base=500000.0")),
            lose=("test_llama_block",), words=("默认值",), breaks=("block-defaults",)),
    Variant("block_gpt_names", {"llama_block": BLOCK_INIT.replace("self.attn_norm", "self.ln1").replace(
        "self.ffn_norm", "self.ln2").replace("self.ffn =", "self.mlp =") + '''        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
'''}, lose=("test_llama_block",), words=("块的四个子模块要叫",), breaks=("block-names",)),
    Variant("block_base_hard_coded", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("LlamaAttention(d, n_head, n_kv_head, base)", "LlamaAttention(d, n_head, n_kv_head, 10000.0)")),
            lose=("test_llama_block",), words=("base 没有传给",), breaks=("block-attn-base",)),
    Variant("block_norm_object_shared", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("self.ffn_norm = RMSNorm(d, eps)", "self.ffn_norm = self.attn_norm")),
            lose=("test_llama_block",), words=("同一个",), breaks=("block-two-norms",)),
    Variant("block_d_ff_rounded_8d_3", block('''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
''', init=BLOCK_INIT.replace("SwiGLU(d, d_ff)", "SwiGLU(d, 8 * d // 3)")),
            lose=("test_llama_block",), words=("SwiGLU(d, d_ff)",), breaks=("block-ffn",)),
    Variant("block_norms_swapped_with_order", block('''        x = x + self.ffn(self.attn_norm(x))
        return x + self.attn(self.ffn_norm(x))
'''), lose=("test_llama_block",), words=("顺序反了",), breaks=("block-order",)),
]

CORRECT = [
    # rms_norm
    Variant("ok_rms_rsqrt", rms("    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight\n")),
    Variant("ok_rms_float32_inside", rms('''    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)
''')),
    Variant("ok_rms_sum_over_d", rms('''    d = x.shape[-1]
    return weight * x / ((x * x).sum(dim=-1, keepdim=True) / d + eps) ** 0.5
''')),
    Variant("ok_rms_comments_name_the_library", rms('''    """RMSNorm by hand: the same numbers as nn.RMSNorm, F.rms_norm or LlamaRMSNorm,
    without calling them (and unlike F.layer_norm / nn.LayerNorm, no mean is subtracted)."""
    # F.rms_norm(x, (d,), weight, eps) would do this in one call; here it is written out.
    ms = x.pow(2).mean(dim=-1, keepdim=True)     # RMSNorm's mean square over the last axis
    return x / torch.sqrt(ms + eps) * weight     # like torch.nn.functional.rms_norm
''')),
    # SwiGLU
    Variant("ok_swiglu_sigmoid_by_hand", swiglu('''        g = self.gate(x)
        return self.down(g * torch.sigmoid(g) * self.up(x))
''')),
    Variant("ok_swiglu_nn_silu", {"swiglu": '''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate, self.up = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.down(self.act(self.gate(x)).mul(self.up(x)))
'''}),
    Variant("ok_swiglu_functional", swiglu('''        g = F.linear(x, self.gate.weight)
        u = F.linear(x, self.up.weight)
        return F.linear(F.silu(g) * u, self.down.weight)
''')),
    # repeat_kv
    Variant("ok_repeat_interleave", rep("    return torch.repeat_interleave(x, n_rep, dim=1)\n")),
    Variant("ok_repeat_index", rep("    return x[:, torch.arange(n_kv * n_rep) // n_rep]\n")),
    Variant("ok_repeat_stack", rep('''    if n_rep == 1:
        return x
    return torch.stack([x] * n_rep, dim=2).flatten(1, 2)
''')),
    # LlamaAttention
    Variant("ok_attention_sdpa_gqa", att(ATT_OK.replace('''        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
        y = torch.softmax(s, dim=-1) @ v
''', '''        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
'''))),
    Variant("ok_attention_einsum_groups", att(ATT_INIT + '''        g = self.h // self.h_kv
        q = self.q_proj(x).reshape(B, N, self.h_kv, g, self.d_k).permute(0, 2, 3, 1, 4)   # (B, kv, g, N, d_k)
        k = self.k_proj(x).reshape(B, N, self.h_kv, self.d_k).transpose(1, 2)             # (B, kv, N, d_k)
        v = self.v_proj(x).reshape(B, N, self.h_kv, self.d_k).transpose(1, 2)
        pos = torch.arange(N)
        q, k = apply_rope(q, pos, self.base), apply_rope(k, pos, self.base)
        s = torch.einsum("bkgqc,bknc->bkgqn", q, k) * self.d_k ** -0.5
        s = s.masked_fill(torch.triu(torch.ones(N, N, dtype=torch.bool), 1), -1e9)
        y = torch.einsum("bkgqn,bknc->bqkgc", s.softmax(-1), v)
        return self.o_proj(y.reshape(B, N, d))
''')),
    Variant("ok_attention_loop_heads", att(ATT_INIT + '''        pos = torch.arange(N)
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        mask = torch.tril(torch.ones(N, N, dtype=torch.bool))
        outs = []
        for i in range(self.h):
            j = i // (self.h // self.h_kv)
            qi = apply_rope(q[..., i * self.d_k:(i + 1) * self.d_k], pos, self.base)
            kj = apply_rope(k[..., j * self.d_k:(j + 1) * self.d_k], pos, self.base)
            s = (qi @ kj.transpose(1, 2)) / math.sqrt(self.d_k)
            s = torch.where(mask, s, torch.tensor(float("-inf"), dtype=s.dtype))
            outs.append(torch.softmax(s, -1) @ v[..., j * self.d_k:(j + 1) * self.d_k])
        return self.o_proj(torch.cat(outs, dim=-1))
''')),
    Variant("ok_repeat_unsqueeze_repeat_view", rep("    return x.unsqueeze(2).repeat(1, 1, n_rep, 1, 1).view(B, -1, N, d_k)\n")),
    Variant("ok_attention_positions_offset", att(ATT_OK.replace("pos = torch.arange(N)", "pos = torch.arange(N) + 7"))),
    Variant("ok_swiglu_silu_by_exp", swiglu('''        g = self.gate(x)
        return self.down(g / (1 + torch.exp(-g)) * self.up(x))
''')),
    Variant("ok_rms_var_of_squares", rms('''    ms = torch.mean(torch.square(x), dim=x.dim() - 1, keepdim=True)
    return weight * (x / (ms + eps).sqrt())
''')),
    # LlamaBlock
    Variant("ok_block_two_steps", block('''        h = x + self.attn(self.attn_norm(x))
        out = h + self.ffn(self.ffn_norm(h))
        return out
''')),
    Variant("ok_block_list", {"llama_block": '''class LlamaBlock(nn.Module):
    def __init__(self, d, n_head, n_kv_head, d_ff, eps=1e-6, base=10000.0):
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(d, eps=eps), RMSNorm(d, eps=eps)
        self.attn, self.ffn = LlamaAttention(d, n_head, n_kv_head, base=base), SwiGLU(d, d_ff)

    def forward(self, x):
        for norm, sub in ((self.attn_norm, self.attn), (self.ffn_norm, self.ffn)):
            x = x + sub(norm(x))
        return x
'''}),
    Variant("ok_block_own_norm_module", {"llama_block": '''class _Norm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


''' + BLOCK_INIT.replace("RMSNorm(d, eps)", "_Norm(d, eps)") + '''        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))
'''}),
]

WORDS_ARE_NOT_CALLS = ("ok_rms_comments_name_the_library",)

# Rules an exercise states that no wrong answer can break alone (the rule ledger).
WAIVED = {
    "repeat-n-rep-1": "with n_rep = 1 the head rule (output head i = input head i // n_rep) already says the output is "
                      "the input; the hidden check runs n_rep = 1 (an error there is named as an allowed input), but no "
                      "answer breaks this case without breaking the head rule",
    "attn-rope-positions": "RoPE scores depend on n - m only: positions shifted by one common offset give the same "
                           "output (ok_attention_positions_offset keeps full marks); positions of the wrong length or "
                           "axis are caught with the rest of attn-rope-qk",
}

WIDGET = dict(cell="llama.gqa_explorer", labels=("n_kv_head", "GiB"), ipywidgets=True,
              keep=("from helpers import ch10_llama_block as llama",))


def check_widget(target, text):
    """The widget's first state: LLaMA-2 70B with 8 KV heads, from the chapter's helpers."""
    from helpers import ch10_llama_block as llama
    from helpers.i18n import set_language

    set_language("zh")
    assert f"{llama.model_kv_gib(8):.2f} GiB" in text, text
    assert f"{llama.gqa_attention_params(8192, 64, 8):,}" in text, text
