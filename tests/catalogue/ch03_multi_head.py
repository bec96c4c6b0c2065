"""Known wrong answers (and correct variants) for ch03_multi_head.

Each wrong answer must lose the points of the named test cells and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

SPLIT_HEAD = "def split_heads(x, h):\n    B, N, d = x.shape\n"
MERGE_HEAD = "def merge_heads(x):\n    B, h, N, d_k = x.shape\n"

INIT = '''class CausalSelfAttention(nn.Module):
    def __init__(self, d, h, bias=True):
        super().__init__()
        if d % h != 0:
            raise ValueError(f"d={d} must be divisible by h={h}")
        self.h, self.d_k = h, d // h
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)

    def forward(self, x):
        B, N, d = x.shape
'''
FORWARD = '''        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        w = torch.softmax(s, dim=-1)
        return self.proj(merge_heads(w @ v))
'''
ATT_OK = INIT + FORWARD


def split(body: str) -> dict:
    return {"split_heads": SPLIT_HEAD + body}


def merge(body: str) -> dict:
    return {"merge_heads": MERGE_HEAD + body}


def attn(code: str) -> dict:
    return {"causal_self_attention": code}


BUGS = [
    Variant("split_view_no_transpose", split("    return x.view(B, h, N, d // h)\n"),
            lose=("test_split_heads",), words=("没有先变成 (B, N, h, d_k) 再 transpose",),
            said={"test_causal_self_attention": ("用正确的 split_heads 代替你的之后，这一题是对的", "练习 1 还需要修改")},
            breaks=("split-channels",)),
    Variant("split_interleaved", split("    return x.view(B, N, d // h, h).permute(0, 3, 1, 2)\n"),
            lose=("test_split_heads",), words=("交错",),
            breaks=("split-channels",)),
    Variant("merge_no_transpose", merge("    return x.reshape(B, N, h * d_k)\n"),
            lose=("test_merge_heads",), words=("没有先 transpose(1, 2)",),
            said={"test_causal_self_attention": ("用正确的 merge_heads 代替你的之后，这一题是对的", "练习 2 还需要修改")},
            breaks=("merge-inverse",)),
    Variant("merge_view_non_contiguous", merge("    return x.transpose(1, 2).view(B, N, h * d_k)\n"),
            lose=("test_merge_heads",), words=("contiguous",),
            breaks=("merge-noncontiguous",)),
    Variant("inline_view_no_transpose", attn(ATT_OK.replace(
        "split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)",
        "(a.view(B, self.h, N, self.d_k) for a in (q, k, v))")),
            lose=("test_causal_self_attention",), words=("transpose(1, 2)",),
            breaks=("mha-split",)),
    Variant("scale_sqrt_d", attn(ATT_OK.replace("math.sqrt(self.d_k)", "math.sqrt(d)")),
            lose=("test_causal_self_attention",), words=("√d_k = √(d/h)",),
            breaks=("mha-scale",)),
    Variant("no_output_projection", attn(ATT_OK.replace("self.proj(merge_heads(w @ v))", "merge_heads(w @ v)")),
            lose=("test_causal_self_attention",), words=("输出投影",),
            breaks=("mha-proj",)),
    Variant("qkv_wrong_order", attn(ATT_OK.replace("q, k, v = self.qkv(x).chunk", "k, q, v = self.qkv(x).chunk")),
            lose=("test_causal_self_attention",), words=("顺序不对",),
            breaks=("mha-qkv-order",)),
    Variant("no_causal_mask", attn(ATT_OK.replace(
        '        s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))\n', "")),
            lose=("test_causal_self_attention",), words=("因果掩码",),
            breaks=("mha-causal",)),
    Variant("assert_not_valueerror", attn(ATT_OK.replace(
        '        if d % h != 0:\n            raise ValueError(f"d={d} must be divisible by h={h}")\n',
        '        assert d % h == 0, "d must be divisible by h"\n')),
            lose=("test_causal_self_attention",), words=("assert", "ValueError"),
            breaks=("mha-valueerror",)),
    Variant("valueerror_without_values", attn(ATT_OK.replace(
        'raise ValueError(f"d={d} must be divisible by h={h}")', 'raise ValueError("d must be divisible by h")')),
            lose=("test_causal_self_attention",), words=("ValueError", "d 和 h 的值"),
            breaks=("mha-error-values",)),
    Variant("mask_as_parameter", attn(ATT_OK.replace(
        "        self.proj = nn.Linear(d, d, bias=bias)\n",
        "        self.proj = nn.Linear(d, d, bias=bias)\n"
        "        self.mask = nn.Parameter(torch.tril(torch.ones(64, 64)), requires_grad=False)\n").replace(
        "~torch.ones(N, N, dtype=torch.bool).tril()", "self.mask[:N, :N] == 0")),
            lose=("test_causal_self_attention",), words=("参数个数", "register_buffer"),
            breaks=("mha-param-count",)),
    Variant("bias_ignored", attn(ATT_OK.replace("nn.Linear(d, 3 * d, bias=bias)", "nn.Linear(d, 3 * d)")
                                 .replace("nn.Linear(d, d, bias=bias)", "nn.Linear(d, d)")),
            lose=("test_causal_self_attention",), words=("bias=False",),
            breaks=("mha-bias",)),
    Variant("mask_fixed_buffer", attn(INIT.replace(
        "        self.proj = nn.Linear(d, d, bias=bias)\n",
        "        self.proj = nn.Linear(d, d, bias=bias)\n"
        "        self.register_buffer('mask', torch.tril(torch.ones(64, 64)))\n") + '''        q, k, v = torch.split(self.qkv(x), d, dim=2)
        q, k, v = (split_heads(a, self.h) for a in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / self.d_k ** 0.5
        s = s.masked_fill(self.mask[:N, :N] == 0, -1e9)
        return self.proj(merge_heads(torch.softmax(s, -1) @ v))
'''),
            lose=("test_causal_self_attention",), words=("固定长度",), breaks=("mha-any-n",)),
    Variant("split_transpose_missing", split("    return x.view(B, N, h, d // h)\n"),
            lose=("test_split_heads",), words=("还差 transpose(1, 2)",), breaks=("split-shape",)),
    Variant("merge_interleaved", merge("    return x.permute(0, 2, 3, 1).reshape(B, N, h * d_k)\n"),
            lose=("test_merge_heads",), words=("交错",), breaks=("merge-inverse",)),
    Variant("merge_not_fused", merge("    return x.transpose(1, 2)\n"),
            lose=("test_merge_heads",), words=("最后两维还没有并成一维",), breaks=("merge-shape",)),
    Variant("three_projections", attn(ATT_OK.replace(
        "        self.qkv = nn.Linear(d, 3 * d, bias=bias)\n",
        "        self.q = nn.Linear(d, d, bias=bias)\n        self.k = nn.Linear(d, d, bias=bias)\n"
        "        self.v = nn.Linear(d, d, bias=bias)\n").replace(
        "q, k, v = self.qkv(x).chunk(3, dim=-1)", "q, k, v = self.q(x), self.k(x), self.v(x)")),
            lose=("test_causal_self_attention",), words=("三个单独的 nn.Linear(d, d)",), breaks=("mha-qkv-fused",)),
    Variant("softmax_over_queries", attn(ATT_OK.replace("torch.softmax(s, dim=-1)", "torch.softmax(s, dim=-2)")),
            lose=("test_causal_self_attention",), words=("softmax 沿错误的维度",), breaks=("mha-softmax-dim",)),
    Variant("mask_after_softmax", attn(ATT_OK.replace(
        '''        s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        w = torch.softmax(s, dim=-1)
''', '''        w = torch.softmax(s, dim=-1)
        w = w.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), 0.0)
''')), lose=("test_causal_self_attention",), words=("softmax 之后",), breaks=("mha-causal",)),
    Variant("inline_merge_no_transpose", attn(ATT_OK.replace("self.proj(merge_heads(w @ v))",
                                                             "self.proj((w @ v).reshape(B, N, d))")),
            lose=("test_causal_self_attention",), words=("没有先 transpose(1, 2)",), breaks=("mha-merge",)),
    Variant("forward_returns_weights_too", attn(ATT_OK.replace("return self.proj(merge_heads(w @ v))",
                                                               "return self.proj(merge_heads(w @ v)), w")),
            lose=("test_causal_self_attention",), words=("返回了一个元组",), breaks=("mha-forward-shape",)),
    # an outside audit: a wrong answer breaking a stated rule that once kept full marks
    Variant("bias_default_false", attn(ATT_OK.replace("def __init__(self, d, h, bias=True):",
                                                      "def __init__(self, d, h, bias=False):")),
            lose=("test_causal_self_attention",), words=("bias 的默认值不是 True",), breaks=("mha-bias-default",)),
    # a second way to break each rule that had one breaking case
    Variant("split_permute_d_k_before_n", split("    return x.view(B, N, h, d // h).permute(0, 2, 3, 1)\n"),
            lose=("test_split_heads",), words=("(B, h, d_k, N)",), breaks=("split-shape",)),
    Variant("merge_flatten_from_1", merge("    return x.transpose(1, 2).flatten(1)\n"),
            lose=("test_merge_heads",), words=("flatten",), breaks=("merge-shape",)),
    Variant("merge_permute_view", merge("    return x.permute(0, 2, 1, 3).view(B, N, h * d_k)\n"),
            lose=("test_merge_heads",), words=("contiguous",), breaks=("merge-noncontiguous",)),
    Variant("split_into_d_k_heads", attn(ATT_OK.replace(
        "split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)",
        "split_heads(q, self.d_k), split_heads(k, self.d_k), split_heads(v, self.d_k)")),
            lose=("test_causal_self_attention",), words=("d_k 个头",), breaks=("mha-split",)),
    Variant("inline_merge_swaps_n_and_d_k", attn(ATT_OK.replace("self.proj(merge_heads(w @ v))",
                                                                "self.proj((w @ v).transpose(-2, -1).reshape(B, N, d))")),
            lose=("test_causal_self_attention",), words=("N 和 d_k",), breaks=("mha-merge",)),
    Variant("scale_d_k_not_sqrt", attn(ATT_OK.replace("/ math.sqrt(self.d_k)", "/ self.d_k")),
            lose=("test_causal_self_attention",), words=("除的是 d_k",), breaks=("mha-scale",)),
    Variant("proj_weight_not_transposed", attn(ATT_OK.replace(
        "return self.proj(merge_heads(w @ v))", "return merge_heads(w @ v) @ self.proj.weight + self.proj.bias")),
            lose=("test_causal_self_attention",), words=("转置",), breaks=("mha-proj",)),
    Variant("qkv_split_per_head", attn(ATT_OK.replace(
        "        q, k, v = self.qkv(x).chunk(3, dim=-1)\n"
        "        q, k, v = split_heads(q, self.h), split_heads(k, self.h), split_heads(v, self.h)\n",
        "        qkv = self.qkv(x).view(B, N, self.h, 3 * self.d_k)        # each head's q, k, v side by side\n"
        "        q, k, v = (a.transpose(1, 2) for a in qkv.chunk(3, dim=-1))  # (B, h, N, d_k) each\n")),
            lose=("test_causal_self_attention",), words=("按头",), breaks=("mha-qkv-order",)),
    Variant("valueerror_in_forward", attn(ATT_OK.replace(
        '        if d % h != 0:\n            raise ValueError(f"d={d} must be divisible by h={h}")\n', "").replace(
        "        B, N, d = x.shape\n",
        "        B, N, d = x.shape\n        if d % self.h != 0:\n"
        '            raise ValueError(f"d={d} must be divisible by h={self.h}")\n')),
            lose=("test_causal_self_attention",), words=("没有抛出异常",), breaks=("mha-valueerror",)),
    Variant("valueerror_gives_only_d", attn(ATT_OK.replace(
        'raise ValueError(f"d={d} must be divisible by h={h}")',
        'raise ValueError(f"d={d} is not divisible by the number of heads")')),
            lose=("test_causal_self_attention",), words=("d 和 h 的值",), breaks=("mha-error-values",)),
    Variant("learnable_scale", attn(ATT_OK.replace(
        "        self.proj = nn.Linear(d, d, bias=bias)\n",
        "        self.proj = nn.Linear(d, d, bias=bias)\n"
        "        self.scale = nn.Parameter(torch.tensor(self.d_k ** -0.5))   # 1/√d_k, learnable\n").replace(
        "/ math.sqrt(self.d_k)", "* self.scale")),
            lose=("test_causal_self_attention",), words=("别的参数",), breaks=("mha-param-count",)),
    Variant("proj_bias_always", attn(ATT_OK.replace("nn.Linear(d, d, bias=bias)", "nn.Linear(d, d)")),
            lose=("test_causal_self_attention",), words=("bias=False",), breaks=("mha-bias",)),
    Variant("mask_buffer_1024", attn(INIT.replace(
        "        self.proj = nn.Linear(d, d, bias=bias)\n",
        "        self.proj = nn.Linear(d, d, bias=bias)\n"
        '        self.register_buffer("causal", torch.tril(torch.ones(1024, 1024)).view(1, 1, 1024, 1024))\n')
        + FORWARD.replace("~torch.ones(N, N, dtype=torch.bool).tril()", "self.causal[:, :, :N, :N] == 0")),
            lose=("test_causal_self_attention",), words=("固定长度",), breaks=("mha-any-n",)),
    Variant("mask_cached_at_first_length", attn(INIT.replace(
        "        self.proj = nn.Linear(d, d, bias=bias)\n",
        "        self.proj = nn.Linear(d, d, bias=bias)\n        self.mask = None\n")
        + "        if self.mask is None:                     # built once, on the first call\n"
          "            self.mask = torch.ones(N, N, dtype=torch.bool).tril()\n"
        + FORWARD.replace("~torch.ones(N, N, dtype=torch.bool).tril()", "~self.mask[:N, :N]")),
            lose=("test_causal_self_attention",), words=("固定长度",), breaks=("mha-any-n",)),
    Variant("q_and_kv_projections", attn(ATT_OK.replace(
        "        self.qkv = nn.Linear(d, 3 * d, bias=bias)\n",
        "        self.q = nn.Linear(d, d, bias=bias)\n        self.kv = nn.Linear(d, 2 * d, bias=bias)\n").replace(
        "q, k, v = self.qkv(x).chunk(3, dim=-1)", "q, (k, v) = self.q(x), self.kv(x).chunk(2, dim=-1)")),
            lose=("test_causal_self_attention",), words=("不止一个 nn.Linear",), breaks=("mha-qkv-fused",)),
    Variant("softmax_over_heads", attn(ATT_OK.replace("torch.softmax(s, dim=-1)", "torch.softmax(s, dim=1)")),
            lose=("test_causal_self_attention",), words=("dim=1",), breaks=("mha-softmax-dim",)),
    Variant("forward_returns_heads", attn(ATT_OK.replace("return self.proj(merge_heads(w @ v))", "return w @ v")),
            lose=("test_causal_self_attention",), words=("(B, h, N, d_k)",), breaks=("mha-forward-shape",)),
    Variant("bias_default_none", attn(ATT_OK.replace("def __init__(self, d, h, bias=True):",
                                                     "def __init__(self, d, h, bias=None):")),
            lose=("test_causal_self_attention",), words=("bias 的默认值不是 True",), breaks=("mha-bias-default",)),
]

CORRECT = [
    Variant("ok_reshape", {**split("    return x.reshape(B, N, h, d // h).transpose(1, 2)\n"),
                           **merge("    return x.transpose(1, 2).reshape(B, N, h * d_k)\n")}),
    Variant("ok_einsum_heads", attn(INIT + '''        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (a.reshape(B, N, self.h, self.d_k) for a in (q, k, v))     # (B, N, h, d_k)
        s = torch.einsum("bqhc,bkhc->bhqk", q, k) * self.d_k ** -0.5
        s = s.masked_fill(torch.triu(torch.ones(N, N, dtype=torch.bool), 1), float("-inf"))
        w = F.softmax(s, dim=-1)
        y = torch.einsum("bhqk,bkhc->bqhc", w, v).reshape(B, N, d)
        return self.proj(y)
''')),
    Variant("ok_split_and_buffer_that_grows", attn(INIT.replace(
        "        self.proj = nn.Linear(d, d, bias=bias)\n",
        "        self.proj = nn.Linear(d, d, bias=bias)\n"
        "        self.register_buffer('mask', torch.tril(torch.ones(64, 64)), persistent=False)\n") + '''        if N > self.mask.shape[0]:                       # a longer input: a bigger mask
            self.mask = torch.tril(torch.ones(N, N, device=x.device))
        q, k, v = torch.split(self.qkv(x), d, dim=2)
        q, k, v = (split_heads(a, self.h) for a in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / self.d_k ** 0.5
        s = s.masked_fill(self.mask[:N, :N] == 0, -1e9)
        return self.proj(merge_heads(torch.softmax(s, -1) @ v))
''')),
    Variant("ok_loop_over_heads", attn(INIT + '''        q, k, v = self.qkv(x).chunk(3, dim=-1)
        causal = torch.tril(torch.ones(N, N, dtype=torch.bool))
        outs = []
        for i in range(self.h):
            c = slice(i * self.d_k, (i + 1) * self.d_k)
            s = q[..., c] @ k[..., c].transpose(1, 2) / math.sqrt(self.d_k)
            s = torch.where(causal, s, torch.tensor(float("-inf"), dtype=s.dtype))
            outs.append(torch.softmax(s, dim=-1) @ v[..., c])
        return self.proj(torch.cat(outs, dim=-1))
''')),
    Variant("ok_sdpa", attn(ATT_OK.replace(FORWARD, '''        q, k, v = (split_heads(a, self.h) for a in self.qkv(x).chunk(3, dim=-1))
        return self.proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
'''))),
    # written the way people write them in the wild: each keeps full marks
    Variant("ok_float32_inside", {
        **split("    return torch.stack(x.chunk(h, dim=-1), dim=1)\n"),
        **merge("    return torch.cat(x.unbind(dim=1), dim=-1)\n"),
        **attn(INIT + '''        dt = x.dtype
        q, k, v = self.qkv(x).float().chunk(3, dim=-1)        # the attention itself in float32
        q, k, v = (split_heads(a, self.h) for a in (q, k, v))
        scale = torch.tensor(self.d_k, dtype=torch.float32) ** -0.5
        s = (q * scale) @ k.mT
        s = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))
        y = merge_heads(torch.softmax(s, dim=-1) @ v)
        return self.proj(y.to(dt))
''')}),
    Variant("ok_einops_style_permute", {
        **split("    return x.reshape(B, N, h, d // h).permute(0, 2, 1, 3).contiguous()\n"),
        **merge("    return x.permute(0, 2, 1, 3).contiguous().view(B, N, h * d_k)\n"),
        **attn(INIT.replace("self.h, self.d_k = h, d // h", "self.n_head, self.h, self.d_k = h, h, d // h")
               + '''        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (split_heads(a, self.n_head) for a in (q, k, v))
        att = torch.einsum("bhqc,bhkc->bhqk", q, k) / np.sqrt(self.d_k)
        att = att + torch.full((N, N), float("-inf"), dtype=x.dtype).triu(1)
        att = F.softmax(att, dim=-1)
        return self.proj(merge_heads(torch.einsum("bhqk,bhkc->bhqc", att, v)))
'''.replace("        q, k, v = self.qkv", "        import numpy as np\n        q, k, v = self.qkv"))}),
    Variant("ok_loop_over_batch_and_heads", {
        **split("    out = torch.empty(B, h, N, d // h, dtype=x.dtype)\n    for i in range(h):\n"
                "        out[:, i] = x[:, :, i * (d // h):(i + 1) * (d // h)]\n    return out\n"),
        **merge("    return torch.cat([x[:, i] for i in range(h)], dim=-1)\n"),
        **attn(INIT.replace("        if d % h != 0:\n",
                            "        if d % h:\n").replace(
                                'raise ValueError(f"d={d} must be divisible by h={h}")',
                                'raise ValueError("d = %d is not a multiple of h = %d" % (d, h))') + '''        w_q, w_k, w_v = self.qkv.weight.chunk(3, dim=0)
        b_q, b_k, b_v = self.qkv.bias.chunk(3) if self.qkv.bias is not None else (None, None, None)
        q, k, v = F.linear(x, w_q, b_q), F.linear(x, w_k, b_k), F.linear(x, w_v, b_v)
        heads = []
        for b in range(B):                                      # one sequence at a time
            qb, kb, vb = (split_heads(a[b:b + 1], self.h)[0] for a in (q, k, v))
            s = qb @ kb.transpose(-2, -1) / math.sqrt(self.d_k)
            s = s.masked_fill(torch.triu(torch.ones(N, N, dtype=torch.bool), diagonal=1), -1e9)
            heads.append(torch.softmax(s, dim=-1) @ vb)
        return self.proj(merge_heads(torch.stack(heads)))
''')}),
    Variant("split_chunk_stack", split("    return torch.stack(x.chunk(h, dim=-1), dim=1)\n")),
    Variant("merge_unbind_cat", merge("    return torch.cat(x.unbind(1), dim=-1)\n")),
    Variant("attention_float_mask_eq_0", attn(ATT_OK.replace(
        's = s.masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))',
        's = s.masked_fill(torch.tril(torch.ones(N, N)) == 0, -1e9)'))),
    Variant("attention_einsum_heads_inline", attn(INIT + """        q, k, v = self.qkv(x).view(B, N, 3, self.h, self.d_k).unbind(2)   # (B, N, h, d_k) each
        s = torch.einsum("bqhd,bkhd->bhqk", q, k) / self.d_k ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(N, N, dtype=torch.bool, device=x.device), 1), float("-inf"))
        y = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v).reshape(B, N, d)
        return self.proj(y)
""")),
]

# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="heads.previous_token_explorer", labels=("句子", "最多"))


def check_widget(target, text):
    assert target.locator("img").count() >= 1, "ch03: no figure in the widget"
