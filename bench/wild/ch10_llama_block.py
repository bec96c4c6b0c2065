"""Wrong answers to ch10_llama_block written apart from the catalogue: RMSNorm,
SwiGLU, repeat_kv, grouped-query attention and the block as people really get
them wrong, in their own styles. bench/diagnosis_rate.py measures how often the
hidden checks name the mistake."""
from harness import Variant, solution_editor

edit = solution_editor("ch10_llama_block")
R, S, K, T, B = ("test_rms_norm",), ("test_swiglu",), ("test_repeat_kv",), ("test_llama_attention",), ("test_llama_block",)

RMS_CLASS = '''

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)
'''


def rms(code: str) -> dict:
    return {"rms_norm": code + RMS_CLASS}


def swiglu(code: str) -> dict:
    return {"swiglu": code}


def rep(code: str) -> dict:
    return {"repeat_kv": code}


ATT_SOL = "        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)\n"

WILD = [
    # ------------------------------------------------------------ rms_norm
    Variant("norm_over_everything", rms('''def rms_norm(x, weight, eps=1e-6):
    rms = torch.sqrt(torch.mean(x ** 2) + eps)
    return weight * x / rms
'''), lose=R),
    Variant("eps_added_to_the_result", rms('''def rms_norm(x, weight, eps=1e-6):
    ms = (x ** 2).mean(-1, keepdim=True)
    return (x / torch.sqrt(ms) + eps) * weight
'''), lose=R),
    Variant("normalize_then_scale", rms('''def rms_norm(x, weight, eps=1e-6):
    return F.normalize(x, dim=-1, eps=eps) * weight
'''), lose=R),
    Variant("returns_float32", rms('''def rms_norm(x, weight, eps=1e-6):
    x32 = x.float()
    out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return out * weight.float()
'''), lose=R),
    Variant("default_eps_1e5", rms('''def rms_norm(x, weight, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight
'''), lose=R),
    Variant("divides_by_first_axis", rms('''def rms_norm(x, weight, eps=1e-6):
    ms = (x * x).sum(dim=-1, keepdim=True) / x.shape[0]
    return weight * x / torch.sqrt(ms + eps)
'''), lose=R),
    Variant("norm_over_first_axis", rms('''def rms_norm(x, weight, eps=1e-6):
    return x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * weight
'''), lose=R),
    # ------------------------------------------------------------ SwiGLU
    Variant("llama_names_w1_w2_w3", swiglu('''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.w1 = nn.Linear(d, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d, bias=False)
        self.w3 = nn.Linear(d, d_ff, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
'''), lose=S),
    Variant("fused_gate_up", swiglu('''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate_up = nn.Linear(d, 2 * d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        g, u = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(g) * u)
'''), lose=S),
    Variant("gelu_tanh", swiglu('''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.gate(x), approximate="tanh") * self.up(x))
'''), lose=S),
    Variant("silu_of_product_by_hand", swiglu('''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        h = self.gate(x) * self.up(x)
        return self.down(h * torch.sigmoid(h))
'''), lose=S),
    Variant("forgot_super_init", swiglu('''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))
'''), lose=S),
    Variant("down_on_each_branch", swiglu('''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate = nn.Linear(d, d_ff, bias=False)
        self.up = nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x))) * self.down(self.up(x))
'''), lose=S),
    # ------------------------------------------------------------ repeat_kv
    Variant("expand_in_front_transpose", rep('''def repeat_kv(x, n_rep):
    B, n_kv, N, d_k = x.shape
    return x.expand(n_rep, B, n_kv, N, d_k).transpose(0, 1).reshape(B, n_rep * n_kv, N, d_k)
'''), lose=K),
    Variant("repeat_batch", rep('''def repeat_kv(x, n_rep):
    return x.repeat(n_rep, 1, 1, 1)
'''), lose=K),
    Variant("interleave_without_dim", rep('''def repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    return x.repeat_interleave(n_rep)
'''), lose=K),
    Variant("index_list_too_short", rep('''def repeat_kv(x, n_rep):
    n_kv = x.shape[1]
    return x[:, [i // n_rep for i in range(n_kv)]]
'''), lose=K),
    Variant("view_instead_of_reshape", rep('''def repeat_kv(x, n_rep):
    B, n_kv, N, d_k = x.shape
    return x.unsqueeze(2).expand(B, n_kv, n_rep, N, d_k).view(B, n_kv * n_rep, N, d_k)
'''), lose=K),
    # ------------------------------------------------------------ LlamaAttention
    Variant("sdpa_without_is_causal", edit("llama_attention", (
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)\n"
        "        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float(\"-inf\"))\n"
        "        y = torch.softmax(scores, dim=-1) @ v                                       # (B, h, N, d_k)\n",
        "        y = F.scaled_dot_product_attention(q, k, v)\n")), lose=T),
    Variant("k_proj_full_width", edit("llama_attention", (
        "self.k_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)", "self.k_proj = nn.Linear(d, d, bias=False)"), (
        "self.v_proj = nn.Linear(d, n_kv_head * self.d_k, bias=False)", "self.v_proj = nn.Linear(d, d, bias=False)")),
            lose=T),
    Variant("view_heads_without_transpose", edit("llama_attention", (
        "q = self.q_proj(x).view(B, N, self.n_head, self.d_k).transpose(1, 2)",
        "q = self.q_proj(x).view(B, self.n_head, N, self.d_k)"), (
        "k = self.k_proj(x).view(B, N, self.n_kv_head, self.d_k).transpose(1, 2)",
        "k = self.k_proj(x).view(B, self.n_kv_head, N, self.d_k)"), (
        "v = self.v_proj(x).view(B, N, self.n_kv_head, self.d_k).transpose(1, 2)",
        "v = self.v_proj(x).view(B, self.n_kv_head, N, self.d_k)")), lose=T),
    Variant("no_odd_width_check", edit("llama_attention", (
        "        if (d // n_head) % 2 != 0:\n            raise ValueError(f\"the head width d_k={d // n_head} must be even for RoPE\")\n",
        "")), lose=T),
    Variant("multiplies_by_sqrt_dk", edit("llama_attention", ("/ math.sqrt(self.d_k)", "* math.sqrt(self.d_k)")),
            lose=T),
    Variant("merge_with_view", edit("llama_attention", ("y.transpose(1, 2).reshape(B, N, d)", "y.transpose(1, 2).view(B, N, d)")),
            lose=T),
    Variant("forgot_repeat_kv", edit("llama_attention", (
        "        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)\n", "")), lose=T),
    Variant("n_rep_upside_down", edit("llama_attention", ("n_rep = self.n_head // self.n_kv_head",
                                                          "n_rep = max(1, self.n_kv_head // self.n_head)")), lose=T),
    Variant("tril_mask_with_where", edit("llama_attention", (
        "scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float(\"-inf\"))",
        "scores = torch.where(torch.tril(torch.ones(N, N)).bool(), float(\"-inf\"), scores)")), lose=T),
    # ------------------------------------------------------------ LlamaBlock
    Variant("one_norm_object_twice", edit("llama_block", (
        "        self.attn_norm = RMSNorm(d, eps)\n", "        self.attn_norm = self.ffn_norm = RMSNorm(d, eps)\n"), (
        "        self.ffn_norm = RMSNorm(d, eps)\n", "")), lose=B),
    Variant("d_ff_ignored", edit("llama_block", ("self.ffn = SwiGLU(d, d_ff)", "self.ffn = SwiGLU(d, 4 * d)")), lose=B),
    Variant("extra_final_norm", edit("llama_block", ("        return x + self.ffn(self.ffn_norm(x))",
                                                     "        x = x + self.ffn(self.ffn_norm(x))\n"
                                                     "        return self.ffn_norm(x)")), lose=B),
    Variant("attention_arguments_swapped", edit("llama_block", ("LlamaAttention(d, n_head, n_kv_head, base)",
                                                                "LlamaAttention(d, n_kv_head, n_head, base)")), lose=B),
    Variant("eps_hard_coded", edit("llama_block", ("        self.attn_norm = RMSNorm(d, eps)\n",
                                                   "        self.attn_norm = RMSNorm(d, 1e-5)\n"), (
        "        self.ffn_norm = RMSNorm(d, eps)\n", "        self.ffn_norm = RMSNorm(d, 1e-5)\n")), lose=B),
]


# Written after the hidden checks were improved on WILD, and measured without changing them again: how well the
# diagnoses carry over to mistakes they were not tuned on.
HELDOUT = [
    Variant("rms_with_unbiased_var_plus_mean", rms('''def rms_norm(x, weight, eps=1e-6):
    ms = x.var(-1, keepdim=True) + x.mean(-1, keepdim=True) ** 2
    return x / torch.sqrt(ms + eps) * weight
'''), lose=R),
    Variant("rms_eps_after_sqrt_chained", rms('''def rms_norm(x, weight, eps=1e-6):
    return x / x.pow(2).mean(-1, keepdim=True).sqrt().add(eps) * weight
'''), lose=R),
    Variant("rms_linalg_norm", rms('''def rms_norm(x, weight, eps=1e-6):
    return x / torch.linalg.norm(x, dim=-1, keepdim=True) * math.sqrt(x.shape[-1]) * weight
'''), lose=R),
    Variant("swiglu_hidden_four_d", swiglu('''class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.gate = nn.Linear(d, 4 * d, bias=False)
        self.up = nn.Linear(d, 4 * d, bias=False)
        self.down = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))
'''), lose=S),
    Variant("stack_then_flatten", rep('''def repeat_kv(x, n_rep):
    return torch.stack([x] * n_rep, dim=1).flatten(1, 2)
'''), lose=K),
    Variant("sdpa_scale_one_over_dk", edit("llama_attention", (
        "        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)\n"
        "        scores = scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float(\"-inf\"))\n"
        "        y = torch.softmax(scores, dim=-1) @ v                                       # (B, h, N, d_k)\n",
        "        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / self.d_k)\n")), lose=T),
    Variant("float_mask_in_masked_fill", edit("llama_attention", (
        "scores.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float(\"-inf\"))",
        "scores.masked_fill(torch.triu(torch.ones(N, N), 1), float(\"-inf\"))")), lose=T),
    Variant("block_ffn_reads_normed_input", edit("llama_block", (
        "        x = x + self.attn(self.attn_norm(x))\n        return x + self.ffn(self.ffn_norm(x))",
        "        h = self.attn_norm(x)\n        return x + self.attn(h) + self.ffn(self.ffn_norm(h))")), lose=B),
]
