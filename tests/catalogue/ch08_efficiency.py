"""Known wrong answers (and correct variants) for ch08_efficiency.

Each wrong answer must lose the points of the named test cell and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

CACHE_OK = """class KVCache:
    def __init__(self, n_layer=1):
        self.keys = [None] * n_layer
        self.values = [None] * n_layer

    def length(self, layer=0):
        return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]

    def append(self, layer, k, v):
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
        return self.keys[layer], self.values[layer]
"""

STEP_OK = """def cached_attention_step(x_t, weights, cache, layer=0):
    B, _, d = x_t.shape
    n_head = weights["n_head"]
    d_k = d // n_head
    pos = cache.length(layer)
    h = x_t + weights["wpe"][pos]

    def heads(a):
        return a.view(B, 1, n_head, d_k).transpose(1, 2)

    q = heads(h @ weights["w_q"])
    K, V = cache.append(layer, heads(h @ weights["w_k"]), heads(h @ weights["w_v"]))
    p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1)
    return (p @ V).transpose(1, 2).reshape(B, 1, d) @ weights["w_o"]
"""

KV_HEAD = ("def kv_cache_bytes(n_layer, n_tokens, d_model, n_head, n_kv_head, bytes_per_value=2, batch=1):\n"
           "    d_k = d_model // n_head\n")

ONLINE_OK = """def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    rows = torch.arange(n_q).unsqueeze(-1)
    for start in range(0, n_k, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if causal:
            cols = torch.arange(start, start + kb.shape[-2]).unsqueeze(0)
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = alpha * l + p.sum(dim=-1, keepdim=True)
        o = alpha * o + p @ vb
        m = m_new
    return o / l
"""


def cache(code: str) -> dict:
    return {"kv_cache": code}


def step(code: str) -> dict:
    return {"cached_step": code}


def kv(body: str) -> dict:
    return {"kv_bytes": KV_HEAD + body}


def online(code: str) -> dict:
    return {"online_softmax": code}


# a wrong KVCache costs exercise 1 alone: the step that runs on it keeps its marks, and says why
KEPT = {"test_cached_step": ("用正确的 KVCache 代替你的之后，这一题是对的", "练习 1 还需要修改")}

BUGS = [
    # KVCache
    Variant("cache_overwrites", cache(CACHE_OK.replace(
        """        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
""", "        self.keys[layer], self.values[layer] = k, v\n")),
            lose=("test_kv_cache",), words=("覆盖",), said=KEPT, breaks=("kv-append",)),
    Variant("cache_shared_layers", cache("""class KVCache:
    def __init__(self, n_layer=1):
        self.k = []
        self.v = []

    def length(self, layer=0):
        return sum(x.shape[-2] for x in self.k)

    def append(self, layer, k, v):
        self.k.append(k)
        self.v.append(v)
        return torch.cat(self.k, dim=-2), torch.cat(self.v, dim=-2)
"""), lose=("test_kv_cache",), words=("共用",), said=KEPT, breaks=("kv-layers-independent",)),
    Variant("cache_length_counts_calls", cache(CACHE_OK.replace(
        "        self.values = [None] * n_layer\n",
        "        self.values = [None] * n_layer\n        self.calls = [0] * n_layer\n").replace(
        "        return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]\n",
        "        return self.calls[layer]\n").replace(
        "        return self.keys[layer], self.values[layer]\n",
        "        self.calls[layer] += 1\n        return self.keys[layer], self.values[layer]\n")),
            lose=("test_kv_cache",), words=("length 数的是 token",), said=KEPT,
            breaks=("kv-length-tokens",)),
    # cached_attention_step
    Variant("step_values_before_projection",
            step(STEP_OK.replace('heads(h @ weights["w_v"])', "heads(h)")),
            lose=("test_cached_step",), words=("投影之前",), breaks=("step-qkv",)),
    Variant("step_only_cache", step(STEP_OK.replace(
        """    K, V = cache.append(layer, heads(h @ weights["w_k"]), heads(h @ weights["w_v"]))
""", """    k_new, v_new = heads(h @ weights["w_k"]), heads(h @ weights["w_v"])
    if pos == 0:
        K, V = k_new, v_new
    else:
        K, V = cache.keys[layer], cache.values[layer]
    cache.append(layer, k_new, v_new)
""")), lose=("test_cached_step",), words=("没有看它自己",), breaks=("step-append-first",)),
    Variant("step_position_not_advanced", step(STEP_OK.replace('weights["wpe"][pos]', 'weights["wpe"][0]')),
            lose=("test_cached_step",), words=("位置没有前进",), breaks=("step-position",)),
    # kv_cache_bytes
    Variant("kv_gqa_as_mha", kv("    return 2 * n_layer * n_tokens * n_head * d_k * bytes_per_value * batch\n"),
            lose=("test_kv_bytes",), words=("n_head 个 KV 头",), breaks=("kvb-kv-heads",)),
    Variant("kv_no_factor_2", kv("    return n_layer * n_tokens * n_kv_head * d_k * bytes_per_value * batch\n"),
            lose=("test_kv_bytes",), words=("少了因子 2",), breaks=("kvb-bytes",)),
    Variant("kv_ignores_bytes", kv("    return 2 * n_layer * n_tokens * n_kv_head * d_k * batch\n"),
            lose=("test_kv_bytes",), words=("bytes_per_value",), breaks=("kvb-bytes",)),
    Variant("kv_ignores_batch", kv("    return 2 * n_layer * n_tokens * n_kv_head * d_k * bytes_per_value\n"),
            lose=("test_kv_bytes",), words=("batch",), breaks=("kvb-bytes",)),
    Variant("kv_float_division", kv("    return 2 * n_layer * n_tokens * n_kv_head * d_model / n_head * bytes_per_value * batch\n"),
            lose=("test_kv_bytes",), words=("int", "//", "返回的是 float"), breaks=("kvb-int",)),
    # online softmax
    Variant("online_no_rescale_output", online(ONLINE_OK.replace("o = alpha * o + p @ vb", "o = o + p @ vb")),
            lose=("test_online_softmax",), words=("没有重新缩放累积的输出",), breaks=("osa-rescale",)),
    Variant("online_no_rescale_sum",
            online(ONLINE_OK.replace("l = alpha * l + p.sum(dim=-1, keepdim=True)", "l = l + p.sum(dim=-1, keepdim=True)")),
            lose=("test_online_softmax",), words=("指数和 ℓ",), breaks=("osa-rescale",)),
    Variant("online_block_causal", online(ONLINE_OK.replace(
        "s = s.masked_fill(cols > rows, float(\"-inf\"))",
        "s = s.masked_fill(cols // block_size > rows // block_size, float(\"-inf\"))")),
            lose=("test_online_softmax",), words=("块内也要屏蔽",), breaks=("osa-causal-in-block",)),
    Variant("online_last_block_dropped", online(ONLINE_OK.replace("for start in range(0, n_k, block_size):",
                                                                  "for start in range(0, n_k - block_size + 1, block_size):")),
            lose=("test_online_softmax",), words=("最后那一块",), breaks=("osa-blocks",)),
    Variant("online_full_matrix", online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    e = torch.exp(s - m)
    return (e / e.sum(dim=-1, keepdim=True)) @ v
"""), lose=("test_online_softmax",), words=("n×n 的矩阵",), breaks=("osa-no-nxn",)),
    Variant("online_uses_torch_softmax", online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
"""), lose=("test_online_softmax",), words=("从零实现",), breaks=("osa-from-scratch",)),
]

CORRECT = [
    # judged by the calls it makes, never by its words: comments and strings name the forbidden functions
    Variant("ok_comments_name_forbidden_calls", online(ONLINE_OK.replace(
        "    n_q, n_k = q.shape[-2], k.shape[-2]\n",
        '    """Equal to torch.softmax(q @ k.mT / sqrt(d), -1) @ v and F.scaled_dot_product_attention, blockwise."""\n'
        '    never = "torch.nn.functional.scaled_dot_product_attention"      # a string, never called\n'
        "    n_q, n_k = q.shape[-2], k.shape[-2]\n").replace(
        "        p = torch.exp(s - m_new)\n",
        "        p = torch.exp(s - m_new)          # not softmax(s): the running sum l does the dividing\n"))),
    Variant("ok_einsum_and_float64", {
        **step("""def cached_attention_step(x_t, weights, cache, layer=0):
    B, _, d = x_t.shape
    H = weights["n_head"]
    pos = cache.length(layer)
    h = (x_t + weights["wpe"][pos:pos + 1]).double()
    w = {k: weights[k].double() for k in ("w_q", "w_k", "w_v", "w_o")}
    q = torch.einsum("bnd,de->bne", h, w["w_q"]).reshape(B, 1, H, -1).permute(0, 2, 1, 3)
    k = torch.einsum("bnd,de->bne", h, w["w_k"]).reshape(B, 1, H, -1).permute(0, 2, 1, 3)
    v = torch.einsum("bnd,de->bne", h, w["w_v"]).reshape(B, 1, H, -1).permute(0, 2, 1, 3)
    K, V = cache.append(layer, k, v)
    s = torch.einsum("bhqc,bhkc->bhqk", q, K) / (d // H) ** 0.5
    p = torch.exp(s - s.amax(-1, keepdim=True))
    p = p / p.sum(-1, keepdim=True)
    out = torch.einsum("bhqk,bhkc->bqhc", p, V).reshape(B, 1, d) @ w["w_o"]
    return out.to(x_t.dtype)
"""),
        **kv("    return int(2 * n_layer * n_tokens * n_kv_head * (d_model / n_head) * bytes_per_value * batch)\n"),
    }),
    Variant("ok_list_cache_and_per_block_mask", {
        **cache("""class KVCache:
    def __init__(self, n_layer=1):
        self.store = [([], []) for _ in range(n_layer)]

    def length(self, layer=0):
        return sum(k.shape[-2] for k in self.store[layer][0])

    def append(self, layer, k, v):
        ks, vs = self.store[layer]
        ks.append(k)
        vs.append(v)
        return torch.cat(ks, dim=-2), torch.cat(vs, dim=-2)
"""),
        **online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k = q.shape[-2], k.shape[-2]
    m = l = o = None
    for start in range(0, n_k, block_size):
        end = min(start + block_size, n_k)
        s = torch.einsum("...qd,...kd->...qk", q, k[..., start:end, :]) / math.sqrt(q.shape[-1])
        if causal:
            i = torch.arange(n_q).view(-1, 1)
            j = torch.arange(start, end).view(1, -1)
            s = torch.where(j <= i, s, torch.full_like(s, -1e9))
        bm = s.amax(-1, keepdim=True)
        if m is None:
            m = bm
            p = torch.exp(s - m)
            l, o = p.sum(-1, keepdim=True), p @ v[..., start:end, :]
            continue
        m_new = torch.maximum(m, bm)
        p = torch.exp(s - m_new)
        c = torch.exp(m - m_new)
        l = l * c + p.sum(-1, keepdim=True)
        o = o * c + p @ v[..., start:end, :]
        m = m_new
    return o / l
"""),
    }),
]

BUGS += [
    Variant("online_transpose_assumes_batch_axis", online(ONLINE_OK.replace("kb.transpose(-2, -1)", "kb.transpose(1, 2)")),
            lose=("test_online_softmax",), words=("transpose(-2, -1)", "批量维"),
            breaks=("osa-batch-dims",)),
]


# More correct answers as people write them: a dict cache and torch.cat(..., dim=2), a float32 scale constant
# inside a float64 step, a per-head loop, math.prod, computing in float32 and casting back, a finite initial max.
CORRECT += [
    Variant("ok_dict_cache_float32_constant", {
        **cache("""class KVCache:
    def __init__(self, n_layer=1):
        self.n_layer = n_layer
        self.cache = {}

    def length(self, layer=0):
        kv = self.cache.get(layer)
        return 0 if kv is None else kv[0].size(2)

    def append(self, layer, k, v):
        if layer in self.cache:
            k = torch.cat((self.cache[layer][0], k), dim=2)
            v = torch.cat((self.cache[layer][1], v), dim=2)
        self.cache[layer] = (k, v)
        return k, v
"""),
        **step(STEP_OK.replace("p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1)",
                               "scale = torch.tensor(1.0 / math.sqrt(d_k))        # float32, even for float64 inputs\n"
                               "    p = torch.softmax((q @ K.transpose(-2, -1)) * scale, dim=-1)")),
        **kv("    return math.prod([2, n_layer, n_tokens, n_kv_head, d_k, bytes_per_value, batch])\n"),
        **online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    q32, k32, v32 = q.float(), k.float(), v.float()          # compute in float32, cast back at the end
    n_q, n_k = q.shape[-2], k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), float("-inf"))
    l = torch.zeros(*q.shape[:-1], 1)
    o = torch.zeros(*q.shape[:-1], v.shape[-1])
    for start in range(0, n_k, block_size):
        s = q32 @ k32[..., start:start + block_size, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            j = torch.arange(start, min(start + block_size, n_k))
            s = s.masked_fill(j[None, :] > torch.arange(n_q)[:, None], float("-inf"))
        m_new = torch.maximum(m, s.max(dim=-1, keepdim=True).values)
        p = torch.exp(s - m_new)
        alpha = torch.exp(m - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ v32[..., start:start + block_size, :]
        m = m_new
    return (o / l).to(q.dtype)
"""),
    }),
    Variant("ok_per_head_loop_finite_init", {
        **cache("""class KVCache:
    def __init__(self, n_layer=1):
        self.k = [None for _ in range(n_layer)]
        self.v = [None for _ in range(n_layer)]

    def length(self, layer=0):
        return 0 if self.k[layer] is None else int(self.k[layer].shape[-2])

    def append(self, layer, k, v):
        if self.k[layer] is None:
            self.k[layer] = k.new_zeros(*k.shape[:-2], 0, k.shape[-1])
            self.v[layer] = v.new_zeros(*v.shape[:-2], 0, v.shape[-1])
        self.k[layer] = torch.cat([self.k[layer], k], -2)
        self.v[layer] = torch.cat([self.v[layer], v], -2)
        return self.k[layer], self.v[layer]
"""),
        **step("""def cached_attention_step(x_t, weights, cache, layer=0):
    B, _, d = x_t.shape
    H = weights["n_head"]
    dk = d // H
    h = x_t + weights["wpe"][cache.length(layer)]
    q, k, v = ((h @ weights[name]).reshape(B, 1, H, dk).transpose(1, 2) for name in ("w_q", "w_k", "w_v"))
    K, V = cache.append(layer, k, v)
    heads = []
    for i in range(H):
        s = q[:, i] @ K[:, i].transpose(-2, -1) * dk ** -0.5
        w = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        heads.append((w / w.sum(-1, keepdim=True)) @ V[:, i])
    return torch.cat(heads, dim=-1) @ weights["w_o"]
"""),
        **kv("    kv_width = d_model * n_kv_head // n_head\n"
             "    return 2 * bytes_per_value * batch * n_layer * n_tokens * kv_width\n"),
        **online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    m = torch.full((*q.shape[:-1], 1), torch.finfo(q.dtype).min, dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    qi = torch.arange(n_q).unsqueeze(1)
    start = 0
    while start < n_k:
        end = min(start + block_size, n_k)
        s = torch.matmul(q, k[..., start:end, :].transpose(-1, -2)) * d ** -0.5
        if causal:
            s = torch.where(torch.arange(start, end).unsqueeze(0) <= qi, s, torch.tensor(float("-inf"), dtype=s.dtype))
        m_new = torch.max(m, s.amax(-1, keepdim=True))
        scale = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * scale + p.sum(-1, keepdim=True)
        o = o * scale + torch.matmul(p, v[..., start:end, :])
        m, start = m_new, end
    return o / l
"""),
    }),
]

WORDS_ARE_NOT_CALLS = ("ok_comments_name_forbidden_calls",)

# The rule ledger (notebooks/ch08_efficiency.md marks the rules): wrong answers that break one stated rule each,
# written the way students write them.
BUGS += [
    # KVCache
    Variant("cache_class_attribute", cache('''class KVCache:
    keys = {}
    values = {}

    def __init__(self, n_layer=1):
        self.n_layer = n_layer

    def length(self, layer=0):
        return self.keys[layer].shape[-2] if layer in self.keys else 0

    def append(self, layer, k, v):
        if layer in self.keys:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
        else:
            self.keys[layer], self.values[layer] = k, v
        return self.keys[layer], self.values[layer]
'''), lose=("test_kv_cache",), words=("新建的 KVCache 不是空的", "类属性"), said=KEPT, breaks=("kv-starts-empty",)),
    Variant("cache_n_layer_required", cache(CACHE_OK.replace("def __init__(self, n_layer=1):", "def __init__(self, n_layer):")),
            lose=("test_kv_cache",), words=("KVCache(n_layer=1)", "就是一层"), said=KEPT,
            breaks=("kv-default-one-layer",)),
    Variant("cache_length_fails_when_empty", cache(CACHE_OK.replace(
        "        return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]\n",
        "        return self.keys[layer].shape[-2]\n")),
            lose=("test_kv_cache",), words=("空的时候 length 要返回 0",), said=KEPT, breaks=("kv-length-empty",)),
    Variant("cache_stacks_single_tokens", cache('''class KVCache:
    def __init__(self, n_layer=1):
        self.k = [[] for _ in range(n_layer)]
        self.v = [[] for _ in range(n_layer)]

    def length(self, layer=0):
        return len(self.k[layer])

    def append(self, layer, k, v):
        self.k[layer].append(k.squeeze(-2))       # one token: (B, n_head, d_k)
        self.v[layer].append(v.squeeze(-2))
        return torch.stack(self.k[layer], dim=-2), torch.stack(self.v[layer], dim=-2)
'''), lose=("test_kv_cache",), words=("一次追加多个 token", "t_new = 5"), said=KEPT, breaks=("kv-prompt",)),
    Variant("cache_cat_on_heads_axis", cache(CACHE_OK.replace("dim=-2)", "dim=1)")),
            lose=("test_kv_cache",), words=("沿错误的维度拼接", "dim=-2"), said=KEPT, breaks=("kv-dim",)),
    Variant("cache_returns_new_only", cache(CACHE_OK.replace("        return self.keys[layer], self.values[layer]\n",
                                                             "        return k, v\n")),
            lose=("test_kv_cache",), words=("只返回了新的那一个 token", "全部 (K, V)"), said=KEPT,
            breaks=("kv-returns-all",)),
    # cached_attention_step
    Variant("step_layer_required", step(STEP_OK.replace("def cached_attention_step(x_t, weights, cache, layer=0):",
                                                        "def cached_attention_step(x_t, weights, cache, layer):")),
            lose=("test_cached_step",), words=("layer 的默认值是 0",), breaks=("step-layer-default",)),
    Variant("step_one_head", step('''def cached_attention_step(x_t, weights, cache, layer=0):
    d = x_t.shape[-1]
    pos = cache.length(layer)
    h = x_t + weights["wpe"][pos]
    q = (h @ weights["w_q"]).unsqueeze(1)                       # (B, 1, 1, d)
    K, V = cache.append(layer, (h @ weights["w_k"]).unsqueeze(1), (h @ weights["w_v"]).unsqueeze(1))
    p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d), dim=-1)
    return (p @ V).squeeze(1) @ weights["w_o"]
'''), lose=("test_cached_step",), words=("没有分成 n_head 个头",), breaks=("step-heads",)),
    Variant("step_returns_b_d", step(STEP_OK.replace(".reshape(B, 1, d) @", ".reshape(B, d) @")),
            lose=("test_cached_step",), words=("返回的是 (B, d)", "(B, 1, d)"), breaks=("step-shape",)),
    Variant("step_computes_in_float32", step(STEP_OK.replace(
        '    pos = cache.length(layer)\n',
        '    pos = cache.length(layer)\n'
        '    x_t = x_t.float()                                   # float32 is enough\n'
        '    weights = {key: (w.float() if torch.is_tensor(w) else w) for key, w in weights.items()}\n')),
            lose=("test_cached_step",), words=("dtype 相同",), breaks=("step-dtype",)),
    Variant("step_no_w_o", step(STEP_OK.replace('.reshape(B, 1, d) @ weights["w_o"]', ".reshape(B, 1, d)")),
            lose=("test_cached_step",), words=("没有乘 weights[\"w_o\"]",), breaks=("step-merge-wo",)),
    Variant("step_no_scaling", step(STEP_OK.replace(" / math.sqrt(d_k)", "")),
            lose=("test_cached_step",), words=("没有除以 √d_k",), breaks=("step-equals-full",)),
    Variant("step_masks_a_score_row", step(STEP_OK.replace(
        "    p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1)\n",
        "    s = q @ K.transpose(-2, -1) / math.sqrt(d_k)                     # (B, n_head, 1, t)\n"
        "    mask = torch.tril(torch.ones(1, K.shape[-2], dtype=torch.bool))  # causal, to be safe\n"
        "    p = torch.softmax(s.masked_fill(~mask, float(\"-inf\")), dim=-1)\n")),
            lose=("test_cached_step",), words=("只看见了第一个 token", "用不着掩码")),
    # kv_cache_bytes
    Variant("kv_default_float32", {"kv_bytes": KV_HEAD.replace("bytes_per_value=2", "bytes_per_value=4")
                                   + "    return 2 * n_layer * n_tokens * n_kv_head * d_k * bytes_per_value * batch\n"},
            lose=("test_kv_bytes",), words=("默认值不对", "bytes_per_value=2"), breaks=("kvb-defaults",)),
    Variant("kv_torch_prod", kv("    return torch.prod(torch.tensor([2, n_layer, n_tokens, n_kv_head, d_k, bytes_per_value, batch]))\n"),
            lose=("test_kv_bytes",), words=("返回的是张量", "Python int"), breaks=("kvb-int",)),
    # online_softmax_attention
    Variant("online_o_like_q", online(ONLINE_OK.replace("o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)",
                                                        "o = torch.zeros_like(q)")),
            lose=("test_online_softmax",), words=("和 v 一样宽", "d_v"), breaks=("osa-shapes",)),
    Variant("online_blocks_up_to_n_q", online(ONLINE_OK.replace("for start in range(0, n_k, block_size):",
                                                                "for start in range(0, n_q, block_size):")),
            lose=("test_online_softmax",), words=("只走到了 n_q",), breaks=("osa-shapes",)),
    Variant("online_no_scaling", online(ONLINE_OK.replace("s = q @ kb.transpose(-2, -1) * scale", "s = q @ kb.transpose(-2, -1)")),
            lose=("test_online_softmax",), words=("没有除以 √d_k",), breaks=("osa-formula",)),
    Variant("online_computes_in_float32", online(ONLINE_OK.replace(
        "    n_q, n_k = q.shape[-2], k.shape[-2]\n",
        "    q, k, v = q.float(), k.float(), v.float()\n    n_q, n_k = q.shape[-2], k.shape[-2]\n")),
            lose=("test_online_softmax",), words=("out 要和 q 的 dtype 相同",), breaks=("osa-dtype",)),
    Variant("online_chunk_into_block_size_blocks", online(ONLINE_OK.replace(
        "    for start in range(0, n_k, block_size):\n"
        "        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]\n",
        "    start = 0\n"
        "    for kb, vb in zip(torch.chunk(k, block_size, dim=-2), torch.chunk(v, block_size, dim=-2)):\n").replace(
        "        m = m_new\n", "        m = m_new\n        start += kb.shape[-2]\n")),
            lose=("test_online_softmax",), words=("不是按每块 block_size 个来分的", "torch.chunk"),
            breaks=("osa-block-size",)),
    Variant("online_causal_forgotten", online(ONLINE_OK.replace(
        "        if causal:\n"
        "            cols = torch.arange(start, start + kb.shape[-2]).unsqueeze(0)\n"
        "            s = s.masked_fill(cols > rows, float(\"-inf\"))\n", "")),
            lose=("test_online_softmax",), words=("没有屏蔽未来的键",), breaks=("osa-causal",)),
    Variant("online_checked_against_sdpa", online(ONLINE_OK.replace(
        "    return o / l\n",
        "    out = o / l\n"
        "    assert torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-4)\n"
        "    return out\n")),
            lose=("test_online_softmax",), words=("要求从零实现", "scaled_dot_product_attention"),
            breaks=("osa-from-scratch",)),
    Variant("online_mask_built_once", online(ONLINE_OK.replace(
        "    rows = torch.arange(n_q).unsqueeze(-1)\n",
        "    future = torch.ones(n_q, n_k, dtype=torch.bool).triu(1)          # built once, sliced per block\n").replace(
        "            cols = torch.arange(start, start + kb.shape[-2]).unsqueeze(0)\n"
        "            s = s.masked_fill(cols > rows, float(\"-inf\"))\n",
        "            s = s.masked_fill(future[:, start:start + block_size], float(\"-inf\"))\n")),
            lose=("test_online_softmax",), words=("生成了 n×n 的矩阵",), breaks=("osa-no-nxn",)),
]

# The outside audit (issue 39): wrong answers for stated rules that no catalogued mistake broke, written the way
# students write them; each kept full marks before the checks below were added (numpy's int was caught, unnamed).
BUGS += [
    Variant("cache_length_without_default", cache(CACHE_OK.replace("def length(self, layer=0):", "def length(self, layer):")),
            lose=("test_kv_cache",), words=("length(layer=0)", "第 0 层"), said=KEPT, breaks=("kv-length-default",)),
    Variant("cache_length_len_of_tensor", cache(CACHE_OK.replace(
        "return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]",
        "return 0 if self.keys[layer] is None else len(self.keys[layer])")),
            lose=("test_kv_cache",), words=("len(张量)", "shape[-2]"), said=KEPT, breaks=("kv-length-tokens",)),
    Variant("step_query_without_position", step(STEP_OK.replace('q = heads(h @ weights["w_q"])', 'q = heads(x_t @ weights["w_q"])')),
            lose=("test_cached_step",), words=("q 是从没加位置的 x_t 算出来的",), breaks=("step-position",)),
    Variant("step_length_of_layer_0", step(STEP_OK.replace("pos = cache.length(layer)", "pos = cache.length()")),
            lose=("test_cached_step",), words=("cache.length()（总是第 0 层）", "cache.length(layer)"),
            breaks=("step-position",)),
    Variant("step_appends_to_layer_0", step(STEP_OK.replace("cache.append(layer,", "cache.append(0,")),
            lose=("test_cached_step",), words=("cache.append(0, ...)", "cache.append(layer, k, v)")),
    Variant("online_max_starts_at_zero", online(ONLINE_OK.replace(
        'm = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)',
        "m = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)                  # running max, starts at 0")),
            lose=("test_online_softmax",), words=("m 一开始是 0", "-inf"), breaks=("osa-running-max",)),
    Variant("online_max_of_block_only", online(ONLINE_OK.replace(
        "m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))", "m_new = s.amax(dim=-1, keepdim=True)")),
            lose=("test_online_softmax",), words=("这一块自己的最大值", "torch.maximum"), breaks=("osa-running-max",)),
    Variant("kv_numpy_prod", kv("    import numpy as np\n"
                                "    return np.prod([2, n_layer, n_tokens, n_kv_head, d_k, bytes_per_value, batch])\n"),
            lose=("test_kv_bytes",), words=("numpy 的整数", "Python int"), breaks=("kvb-int",)),
]

BUGS += [
    Variant("online_blocks_of_queries", online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = []
    for start in range(0, n_q, block_size):              # a block of queries at a time: never n x n
        qb = q[..., start:start + block_size, :]
        s = qb @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            rows = torch.arange(start, start + qb.shape[-2])[:, None]
            s = s.masked_fill(torch.arange(n_k)[None, :] > rows, float("-inf"))
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        out.append((e / e.sum(-1, keepdim=True)) @ v)
    return torch.cat(out, dim=-2)
"""),
            lose=("test_online_softmax",), words=("键从来没有被切成块", "把查询分成了块"), breaks=("osa-blocks",)),
    Variant("online_two_pass_softmax", online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    rows = torch.arange(n_q).unsqueeze(-1)
    def scores(start):
        kb = k[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) * scale
        if causal:
            cols = torch.arange(start, start + kb.shape[-2]).unsqueeze(0)
            s = s.masked_fill(cols > rows, float("-inf"))
        return s
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    for start in range(0, n_k, block_size):                  # pass 1: the max of every row
        m = torch.maximum(m, scores(start).amax(-1, keepdim=True))
    l = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for start in range(0, n_k, block_size):                  # pass 2: sums, no rescaling needed
        p = torch.exp(scores(start) - m)
        l = l + p.sum(-1, keepdim=True)
        o = o + p @ v[..., start:start + block_size, :]
    return o / l
"""),
            lose=("test_online_softmax",), words=("键被读了两遍", "两遍的 softmax"), breaks=("osa-rescale",)),
    Variant("online_torch_special_softmax", online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    out = []
    for start in range(0, q.shape[-2], block_size):     # query blocks, every key at once
        s = q[..., start:start + block_size, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(k.shape[-2])[None, :] > torch.arange(start, min(start + block_size, q.shape[-2]))[:, None], float("-inf"))
        out.append(torch.special.softmax(s, dim=-1) @ v)
    return torch.cat(out, dim=-2)
"""),
            lose=("test_online_softmax",), words=("要求从零实现", "torch.special.softmax"), breaks=("osa-from-scratch",)),
    Variant("online_state_in_float64", online(ONLINE_OK.replace("dtype=q.dtype)", "dtype=torch.float64)")),
            lose=("test_online_softmax",), words=("dtype=q.dtype",), breaks=("osa-dtype",)),
]

# Correct answers in more styles: the step through F.scaled_dot_product_attention (softmax is allowed in exercise 2),
# a per-block mask filled with a large finite negative, a logsumexp that is computed and not needed.
CORRECT += [
    Variant("ok_step_sdpa_mask_minus_1e4", {
        **step(STEP_OK.replace("    p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1)\n    return (p @ V)",
                               "    a = torch.nn.functional.scaled_dot_product_attention(q, K, V)                 # no mask: nothing in the future\n"
                               "    return a")),
        **online(ONLINE_OK.replace('s = s.masked_fill(cols > rows, float("-inf"))', "s = s.masked_fill(cols > rows, -1e4)")),
    }),
]

# FlashAttention-2's order (query tiles outside, key blocks inside), and key blocks sliced out of k.mT
CORRECT += [
    Variant("ok_kv_bytes_true_division_then_int", {"kv_bytes": KV_HEAD.replace("d_k = d_model // n_head", "d_k = d_model / n_head")
                                                   + "    return int(2 * n_layer * n_tokens * n_kv_head * d_k * bytes_per_value * batch)\n"}),
    Variant("ok_flash_query_tiles", online("""def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q, n_k = q.shape[-2], k.shape[-2]
    tiles = []
    for qs in range(0, n_q, block_size):                 # FlashAttention-2: query tiles outside, key blocks inside
        qb = q[..., qs:qs + block_size, :]
        rows = torch.arange(qs, qs + qb.shape[-2])[:, None]
        m = torch.full(qb.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
        l = torch.zeros_like(m)
        o = torch.zeros(qb.shape[:-1] + v.shape[-1:], dtype=q.dtype)
        for ks in range(0, n_k, block_size):
            if causal and ks > qs + qb.shape[-2] - 1:
                break
            kb, vb = k[..., ks:ks + block_size, :], v[..., ks:ks + block_size, :]
            s = qb @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if causal:
                s = s.masked_fill(torch.arange(ks, ks + kb.shape[-2])[None, :] > rows, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            a, p = torch.exp(m - m_new), torch.exp(s - m_new)
            l = a * l + p.sum(-1, keepdim=True)
            o = a * o + p @ vb
            m = m_new
        tiles.append(o / l)
    return torch.cat(tiles, dim=-2)
""")),
    Variant("ok_blocks_from_k_mT", online(ONLINE_OK.replace(
        "    rows = torch.arange(n_q).unsqueeze(-1)\n", "    rows = torch.arange(n_q).unsqueeze(-1)\n    kt = k.mT\n").replace(
        "s = q @ kb.transpose(-2, -1) * scale", "s = q @ kt[..., start:start + block_size] * scale"))),
]

# blocks cut with Tensor.split: block_size keys each, the last one shorter
CORRECT += [
    Variant("ok_split_blocks", online('''def online_softmax_attention(q, k, v, block_size, causal=False):
    n_q = q.shape[-2]
    out_shape = q.shape[:-1] + (v.shape[-1],)
    m = q.new_full(q.shape[:-1] + (1,), float("-inf"))
    l = q.new_zeros(q.shape[:-1] + (1,))
    o = q.new_zeros(out_shape)
    i = torch.arange(n_q).view(-1, 1)
    start = 0
    for kb, vb in zip(k.split(block_size, dim=-2), v.split(block_size, dim=-2)):
        s = (q @ kb.mT) / q.shape[-1] ** 0.5
        if causal:
            j = torch.arange(start, start + kb.shape[-2]).view(1, -1)
            s = s.masked_fill(j > i, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        p = (s - m_new).exp()
        c = (m - m_new).exp()
        l = c * l + p.sum(-1, keepdim=True)
        o = c * o + p @ vb
        m = m_new
        start += kb.shape[-2]
    return o / l
''')),
]

# The sentence of exercise 2 that says no mask is needed was reworded as an explanation (a correct mask for the
# new token's row masks nothing); a wrong one is caught by the outputs (step_masks_a_score_row above).
WAIVED: dict[str, str] = {}

# ------------------------------------------------------------------ browser test

# play: the control the keyboard test acts on first (at the first block, 上一块 has nowhere to go)
WIDGET = dict(cell="osv.stepper", labels=("上一块", "下一块", "块"), play="块")


def check_widget(target, text):
    """The stepper's first state, computed from the notebook's own demo inputs."""
    import re

    import nbformat
    import torch
    from harness import ROOT

    from helpers.ch08_efficiency import online_softmax_viz as osv

    nb = nbformat.read(ROOT / "release" / "ch08_efficiency" / "ch08_efficiency.ipynb", as_version=4)
    cell = next(c.source for c in nb.cells if c.cell_type == "code" and "osv.stepper" in c.source)
    ns = {"torch": torch}
    exec("\n".join(line for line in cell.splitlines() if line.startswith("demo_")), ns)
    first = osv.step_text(osv.states(ns["demo_scores"], ns["demo_values"], 4)[0], 0)
    assert re.sub(r"<[^>]+>", "", first) in text, (first, text)

# A second way to break each rule that had one breaking case, written the way students write them.
BUGS += [
    Variant("cache_n_layer_default_0", cache(CACHE_OK.replace("def __init__(self, n_layer=1):", "def __init__(self, n_layer=0):")),
            lose=("test_kv_cache",), words=("KVCache(n_layer=1)",), said=KEPT, breaks=("kv-default-one-layer",)),
    Variant("cache_mutable_default_storage", cache(CACHE_OK.replace(
        "    def __init__(self, n_layer=1):\n        self.keys = [None] * n_layer\n        self.values = [None] * n_layer\n",
        "    def __init__(self, n_layer=1, keys={}, values={}):\n        self.keys, self.values = keys, values\n"
        "        for layer in range(n_layer):\n            keys.setdefault(layer, None)\n            values.setdefault(layer, None)\n")),
            lose=("test_kv_cache",), words=("新建的 KVCache 不是空的",), said=KEPT, breaks=("kv-starts-empty",)),
    Variant("cache_prepends", cache(CACHE_OK.replace("torch.cat([self.keys[layer], k], dim=-2)", "torch.cat([k, self.keys[layer]], dim=-2)")
                                    .replace("torch.cat([self.values[layer], v], dim=-2)", "torch.cat([v, self.values[layer]], dim=-2)")),
            lose=("test_kv_cache",), words=("前面",), said=KEPT, breaks=("kv-append",)),
    Variant("cache_views_one_token", cache(CACHE_OK.replace(
        "    def append(self, layer, k, v):\n",
        "    def append(self, layer, k, v):\n"
        "        k = k.view(k.shape[0], k.shape[1], 1, -1)          # one new token: (B, n_head, 1, d_k)\n"
        "        v = v.view(v.shape[0], v.shape[1], 1, -1)\n")),
            lose=("test_kv_cache",), words=("一次追加多个 token",), said=KEPT, breaks=("kv-prompt",)),
    Variant("cache_cat_on_last_axis", cache(CACHE_OK.replace("dim=-2)", "dim=-1)")),
            lose=("test_kv_cache",), words=("沿错误的维度拼接",), said=KEPT, breaks=("kv-dim",)),
    Variant("cache_returns_keys_twice", cache(CACHE_OK.replace("        return self.keys[layer], self.values[layer]\n",
                                                               "        return self.keys[layer], self.keys[layer]\n")),
            lose=("test_kv_cache",), words=("V",), said=KEPT, breaks=("kv-returns-all",)),
    Variant("cache_length_none_when_empty", cache(CACHE_OK.replace(
        "        return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]\n",
        "        if self.keys[layer] is not None:\n            return self.keys[layer].shape[-2]\n")),
            lose=("test_kv_cache",), words=("返回 0",), said=KEPT, breaks=("kv-length-empty",)),
    Variant("cache_length_default_last_layer", cache(CACHE_OK.replace("def length(self, layer=0):", "def length(self, layer=-1):")),
            lose=("test_kv_cache",), words=("length(layer=0)",), said=KEPT, breaks=("kv-length-default",)),
    Variant("cache_list_aliasing", cache("""class KVCache:
    def __init__(self, n_layer=1):
        self.k = [[]] * n_layer
        self.v = [[]] * n_layer

    def length(self, layer=0):
        return sum(x.shape[-2] for x in self.k[layer])

    def append(self, layer, k, v):
        self.k[layer].append(k)
        self.v[layer].append(v)
        return torch.cat(self.k[layer], dim=-2), torch.cat(self.v[layer], dim=-2)
"""), lose=("test_kv_cache",), words=("共用",), said=KEPT, breaks=("kv-layers-independent",)),
    Variant("step_layer_default_last", step(STEP_OK.replace("def cached_attention_step(x_t, weights, cache, layer=0):",
                                                            "def cached_attention_step(x_t, weights, cache, layer=-1):")),
            lose=("test_cached_step",), words=("layer 的默认值是 0",), breaks=("step-layer-default",)),
    Variant("step_squeezes_everything", step(STEP_OK.replace('.reshape(B, 1, d) @ weights["w_o"]',
                                                             '.reshape(B, 1, d).squeeze() @ weights["w_o"]')),
            lose=("test_cached_step",), words=("(B, 1, d)",), breaks=("step-shape",)),
    Variant("step_result_cast_to_float32", step(STEP_OK.replace(
        '    return (p @ V).transpose(1, 2).reshape(B, 1, d) @ weights["w_o"]\n',
        '    out = (p @ V).transpose(1, 2).reshape(B, 1, d) @ weights["w_o"]\n    return out.float()\n')),
            lose=("test_cached_step",), words=("dtype",), breaks=("step-dtype",)),
    Variant("step_query_from_w_k", step(STEP_OK.replace('q = heads(h @ weights["w_q"])', 'q = heads(h @ weights["w_k"])')),
            lose=("test_cached_step",), words=("w_q",), breaks=("step-qkv",)),
    Variant("step_heads_interleaved", step(STEP_OK.replace("return a.view(B, 1, n_head, d_k).transpose(1, 2)",
                                                           "return a.view(B, 1, d_k, n_head).permute(0, 3, 1, 2)")),
            lose=("test_cached_step",), words=("头",), breaks=("step-heads",)),
    Variant("step_excludes_itself", step(STEP_OK.replace(
        "    p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1)\n    return (p @ V)",
        "    if K.shape[-2] > 1:                                  # attend to the past tokens\n"
        "        K, V = K[..., :-1, :], V[..., :-1, :]\n"
        "    p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1)\n    return (p @ V)")),
            lose=("test_cached_step",), words=("没有看它自己",), breaks=("step-append-first",)),
    Variant("step_w_o_transposed", step(STEP_OK.replace('@ weights["w_o"]', '@ weights["w_o"].T')),
            lose=("test_cached_step",), words=("w_o",), breaks=("step-merge-wo",)),
    Variant("step_scaled_by_sqrt_d", step(STEP_OK.replace("/ math.sqrt(d_k)", "/ math.sqrt(d)")),
            lose=("test_cached_step",), words=("√d_k",), breaks=("step-equals-full",)),
    Variant("kv_batch_default_none", {"kv_bytes": KV_HEAD.replace("batch=1", "batch=None")
                                      + "    return 2 * n_layer * n_tokens * n_kv_head * d_k * bytes_per_value * batch\n"},
            lose=("test_kv_bytes",), words=("默认值",), breaks=("kvb-defaults",)),
    Variant("kv_head_width_from_kv_heads", kv("    return 2 * n_layer * n_tokens * n_kv_head * (d_model // n_kv_head) * bytes_per_value * batch\n"),
            lose=("test_kv_bytes",), words=("d_model / n_head",), breaks=("kvb-kv-heads",)),
    Variant("online_bmm", online(ONLINE_OK.replace("s = q @ kb.transpose(-2, -1) * scale",
                                                   "s = torch.bmm(q, kb.transpose(1, 2)) * scale")
                                 .replace("o = alpha * o + p @ vb", "o = alpha * o + torch.bmm(p, vb)")),
            lose=("test_online_softmax",), words=("批量维",), breaks=("osa-batch-dims",)),
    Variant("online_scaled_by_d_v", online(ONLINE_OK.replace("scale = 1.0 / math.sqrt(q.shape[-1])",
                                                             "scale = 1.0 / math.sqrt(v.shape[-1])")),
            lose=("test_online_softmax",), words=("√d_v",), breaks=("osa-formula",)),
    Variant("online_one_key_at_a_time", online(ONLINE_OK.replace("for start in range(0, n_k, block_size):",
                                                                 "for start in range(n_k):                        # one key per step")
                                               .replace("start:start + block_size", "start:start + 1")),
            lose=("test_online_softmax",), words=("block_size",), breaks=("osa-block-size",)),
    Variant("online_causal_hides_diagonal", online(ONLINE_OK.replace("masked_fill(cols > rows,", "masked_fill(cols >= rows,")),
            lose=("test_online_softmax",), words=("对角线",), breaks=("osa-causal",)),
    Variant("online_mask_by_block_start", online(ONLINE_OK.replace("masked_fill(cols > rows,", "masked_fill(start > rows,")),
            lose=("test_online_softmax",), words=("块内也要屏蔽",), breaks=("osa-causal-in-block",)),
]
