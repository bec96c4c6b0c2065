"""Known wrong answers (and correct variants) for ch05_block.

Each wrong answer must lose the points of the named test cell and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

LN_HEAD = "def layer_norm(x, weight, bias, eps=1e-5):\n"
FFN_HEAD = "class FeedForward(nn.Module):\n    def __init__(self, d, hidden=None):\n        super().__init__()\n"
BLOCK_HEAD = ("from block_attention import CausalAttention\n\n"
              "class Block(nn.Module):\n    def __init__(self, d, h):\n        super().__init__()\n")
PARAMS_HEAD = "def block_params(d):\n"


def ln(body: str) -> dict:
    return {"layer_norm": LN_HEAD + body}


def ffn(init: str, forward: str = "        return self.proj(self.act(self.fc(x)))\n") -> dict:
    return {"feedforward": FFN_HEAD + init + "\n    def forward(self, x):\n" + forward}


FFN_INIT = """        hidden = 4 * d if hidden is None else hidden
        self.fc = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.proj = nn.Linear(hidden, d)
"""

BLOCK_INIT = """        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalAttention(d, h)
        self.ln2 = nn.LayerNorm(d)
        self.ffn = FeedForward(d)
"""


def block(forward: str, init: str = BLOCK_INIT) -> dict:
    return {"block": BLOCK_HEAD + init + "\n    def forward(self, x):\n" + forward}


# a Block that calls the student's own layer_norm (with nn.LayerNorm's parameters) instead of nn.LayerNorm's forward
BLOCK_OWN_LN = ("        x = x + self.attn(layer_norm(x, self.ln1.weight, self.ln1.bias))\n"
                "        return x + self.ffn(layer_norm(x, self.ln2.weight, self.ln2.bias))\n")


def kept(name: str, number: int) -> dict:
    """A wrong earlier answer costs its own exercise alone: the Block that uses it keeps its marks, and says why."""
    return {"test_block": (f"用正确的 {name} 代替你的之后，这一题是对的", f"练习 {number} 还需要修改")}


BUGS = [
    # layer_norm
    Variant("ln_unbiased", {**ln("    mu = x.mean(-1, keepdim=True)\n    var = x.var(-1, keepdim=True)\n"
                                 "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
                            **block(BLOCK_OWN_LN)},
            lose=("test_layer_norm",), words=("无偏方差", "d−1"), breaks=("ln-biased",), said=kept("layer_norm", 2)),
    Variant("ln_in_place", ln("    x -= x.mean(-1, keepdim=True)                   # centred in place\n"
                              "    var = (x * x).mean(-1, keepdim=True)\n"
                              "    return x / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("原地修改了传入的 x", "新的张量"), breaks=("ln-no-in-place",)),
    Variant("ln_eps_outside", ln("    mu = x.mean(-1, keepdim=True)\n"
                                 "    std = ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()\n"
                                 "    return (x - mu) / (std + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("eps 加在了平方根外面",), breaks=("ln-eps-inside",)),
    Variant("ln_no_weight_bias", ln("    mu = x.mean(-1, keepdim=True)\n"
                                    "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                    "    return (x - mu) / torch.sqrt(var + eps)\n"),
            lose=("test_layer_norm",), words=("没有用 weight 和 bias",), breaks=("ln-weight-bias",)),
    Variant("ln_batch_dim", ln("    mu = x.mean(0, keepdim=True)\n"
                               "    var = ((x - mu) ** 2).mean(0, keepdim=True)\n"
                               "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("错误的维度", "BatchNorm"), breaks=("ln-last-dim",)),
    Variant("ln_one_pass", ln("    mu = x.mean(-1, keepdim=True)\n"
                              "    var = (x * x).mean(-1, keepdim=True) - mu * mu\n"
                              "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("E[x²] − E[x]²", "灾难性抵消")),
    Variant("ln_uses_module", ln("    return nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)\n"),
            lose=("test_layer_norm",), words=("从零实现", "layer_norm"), breaks=("ln-no-library",)),
    Variant("ln_dim1", ln("    mu = x.mean(1, keepdim=True)\n"
                          "    var = ((x - mu) ** 2).mean(1, keepdim=True)\n"
                          "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("dim=1", "dim=-1"), breaks=("ln-any-shape",)),
    Variant("ln_no_keepdim", ln("    mu = x.mean(-1)\n"
                                "    var = ((x - mu) ** 2).mean(-1)\n"
                                "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("keepdim=True",), breaks=("ln-keepdim",)),
    Variant("ln_group_norm", ln("    d = x.shape[-1]\n"
                                "    y = F.group_norm(x.reshape(-1, d, 1), 1, weight, bias, eps)   # one group = the row\n"
                                "    return y.reshape(x.shape)\n"),
            lose=("test_layer_norm",), words=("从零实现", "group_norm"), breaks=("ln-basic-ops",)),
    # FeedForward
    # outside audit: computed in float32 and not cast back (float64 weights hide it; half precision does not)
    Variant("ln_float32_not_cast_back", ln("    x = x.float()\n    mu = x.mean(-1, keepdim=True)\n"
                                           "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                           "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("没有保持 x 的 dtype", "半精度进，半精度出"), breaks=("ln-dtype",)),
    # outside audit: eps=1e-6 as in many LLaMA-style norms, where the signature says 1e-5
    Variant("ln_default_eps_1e6", {"layer_norm": "def layer_norm(x, weight, bias, eps=1e-6):\n"
                                                 "    mu = x.mean(-1, keepdim=True)\n"
                                                 "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                                 "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"},
            lose=("test_layer_norm",), words=("eps 的默认值不是 1e-5",), breaks=("ln-default-eps",)),
    # outside audit: nanoGPT's MLP ends with a dropout, which the exercise's forward does not have
    Variant("ffn_dropout", ffn(FFN_INIT + "        self.dropout = nn.Dropout(0.1)\n",
                               "        return self.dropout(self.proj(self.act(self.fc(x))))\n"),
            lose=("test_feedforward",), words=("输出不一样", "dropout"), breaks=("ffn-order",)),
    Variant("ffn_relu", ffn(FFN_INIT.replace("nn.GELU()", "nn.ReLU()")),
            lose=("test_feedforward",), words=("ReLU", "GELU"), breaks=("ffn-gelu",), said=kept("FeedForward", 1)),
    Variant("ffn_hidden_2d", ffn(FFN_INIT.replace("4 * d", "2 * d")),
            lose=("test_feedforward",), words=("2d", "4d"), breaks=("ffn-hidden-default",), said=kept("FeedForward", 1)),
    Variant("ffn_adds_residual", ffn(FFN_INIT, "        return x + self.proj(self.act(self.fc(x)))\n"),
            lose=("test_feedforward",), words=("残差属于 Block",), breaks=("ffn-no-residual",), said=kept("FeedForward", 1)),
    Variant("ffn_no_bias", ffn(FFN_INIT.replace("nn.Linear(d, hidden)", "nn.Linear(d, hidden, bias=False)")
                               .replace("nn.Linear(hidden, d)", "nn.Linear(hidden, d, bias=False)")),
            lose=("test_feedforward",), words=("bias",), breaks=("ffn-bias",)),
    Variant("ffn_hidden_ignored", ffn(FFN_INIT.replace("hidden = 4 * d if hidden is None else hidden", "hidden = 4 * d")),
            lose=("test_feedforward",), words=("隐藏层宽度不等于 hidden",), breaks=("ffn-hidden-arg",)),
    Variant("ffn_attribute_names", ffn(FFN_INIT.replace("self.fc", "self.c_fc").replace("self.proj", "self.c_proj"),
                                       "        return self.c_proj(self.act(self.c_fc(x)))\n"),
            lose=("test_feedforward",), words=("不在题目给的属性名下", "fc"), breaks=("ffn-attributes",)),
    Variant("ffn_gelu_after_proj", ffn(FFN_INIT, "        return self.act(self.proj(self.fc(x)))\n"),
            lose=("test_feedforward",), words=("GELU 放在了 proj 之后",), breaks=("ffn-order",)),
    Variant("ffn_assumes_3d", ffn(FFN_INIT, "        B, N, _ = x.shape\n"
                                            "        h = self.act(self.fc(x.reshape(B * N, -1)))\n"
                                            "        return self.proj(h).reshape(B, N, -1)\n"),
            lose=("test_feedforward",), words=("任意多维",), breaks=("ffn-any-shape",)),
    # Block
    Variant("block_post_ln", block("        x = self.ln1(x + self.attn(x))\n        return self.ln2(x + self.ffn(x))\n"),
            lose=("test_block",), words=("Post-LN", "Pre-LN"), breaks=("block-pre-ln",)),
    Variant("block_no_attn_residual", block("        x = self.attn(self.ln1(x))\n        return x + self.ffn(self.ln2(x))\n"),
            lose=("test_block",), words=("注意力子层少了残差连接",), breaks=("block-pre-ln",)),
    Variant("block_shared_ln", block("        x = x + self.attn(self.ln1(x))\n        return x + self.ffn(self.ln1(x))\n"),
            lose=("test_block",), words=("共用了同一个 LayerNorm",), breaks=("block-separate-norms",)),
    Variant("block_attribute_names", block("        x = x + self.attn(self.ln_1(x))\n        return x + self.ffn(self.ln_2(x))\n",
                                           BLOCK_INIT.replace("self.ln1", "self.ln_1").replace("self.ln2", "self.ln_2")),
            lose=("test_block",), words=("子模块名字不对", "self.ln1"), breaks=("block-attributes",)),
    Variant("block_own_mlp", block("        x = x + self.attn(self.ln1(x))\n        return x + self.ffn(self.ln2(x))\n",
                                   BLOCK_INIT.replace("FeedForward(d)",
                                                      "nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))")),
            lose=("test_block",), words=("不是你在练习 1 写的 FeedForward",), breaks=("block-attributes",)),
    Variant("block_own_attention", block("        h = self.ln1(x)\n        x = x + self.attn(h, h, h, need_weights=False)[0]\n"
                                         "        return x + self.ffn(self.ln2(x))\n",
                                         BLOCK_INIT.replace("CausalAttention(d, h)", "nn.MultiheadAttention(d, h, batch_first=True)")),
            lose=("test_block",), words=("不是给定的 CausalAttention",), breaks=("block-attributes",)),
    Variant("block_one_norm_object", block("        x = x + self.attn(self.ln1(x))\n        return x + self.ffn(self.ln2(x))\n",
                                           BLOCK_INIT.replace("        self.ln1 = nn.LayerNorm(d)\n", "")
                                           .replace("self.ln2 = nn.LayerNorm(d)", "self.ln1 = self.ln2 = nn.LayerNorm(d)")),
            lose=("test_block",), words=("共用了同一个 LayerNorm",), breaks=("block-separate-norms",)),
    # block_params
    # outside audit: the residual added in place overwrites the caller's x
    Variant("block_in_place", block("        x += self.attn(self.ln1(x))\n        x += self.ffn(self.ln2(x))\n"
                                    "        return x\n"),
            lose=("test_block",), words=("原地修改了传入的 x", "x = x + attn(ln1(x))"), breaks=("block-no-in-place",)),
    # outside audit: nanoGPT-style residual dropout, which the exercise's two Pre-LN lines do not have
    Variant("block_residual_dropout", block("        x = x + self.drop(self.attn(self.ln1(x)))\n"
                                            "        return x + self.drop(self.ffn(self.ln2(x)))\n",
                                            BLOCK_INIT + "        self.drop = nn.Dropout(0.1)\n"),
            lose=("test_block",), words=("输出不一样", "dropout"), breaks=("block-pre-ln",)),
    Variant("params_no_norms", {"block_params": PARAMS_HEAD + "    return 12 * d * d + 9 * d\n"},
            lose=("test_block_params",), words=("LayerNorm",), breaks=("params-count",)),
    Variant("params_builds_block", {"block_params": PARAMS_HEAD + "    return sum(p.numel() for p in Block(d, 1).parameters())\n"},
            lose=("test_block_params",), words=("建了一个模型", "公式"), breaks=("params-formula",)),
    Variant("params_float", {"block_params": PARAMS_HEAD + "    import math\n    return 12 * math.pow(d, 2) + 13 * d\n"},
            lose=("test_block_params",), words=("float", "Python 的 int"), breaks=("params-int",)),
    Variant("params_numpy", {"block_params": PARAMS_HEAD + "    import numpy as np\n"
                                                           "    return np.int64(d) * (12 * d + 13)\n"},
            lose=("test_block_params",), words=("numpy 的整数",), breaks=("params-int",)),
]

CORRECT = [
    # judged by the calls it makes, never by its words: comments and strings name the forbidden functions
    Variant("ok_comments_name_forbidden_calls", ln(
        '    """What F.layer_norm(x, x.shape[-1:], weight, bias, eps) and nn.LayerNorm compute, by hand."""\n'
        '    shortcut = "torch.nn.functional.layer_norm"      # a string, never called\n'
        "    mu = x.mean(-1, keepdim=True)                    # not torch.layer_norm, not F.rms_norm\n"
        "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
        "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n")),
    Variant("ok_var_biased", ln("    mu = x.mean(-1, keepdim=True)\n"
                                "    var = x.var(-1, unbiased=False, keepdim=True)\n"
                                "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n")),
    Variant("ok_rsqrt_pow", {**ln("    xc = x - x.mean(dim=-1, keepdim=True)\n"
                                  "    return weight * xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps) + bias\n"),
                             "block_params": PARAMS_HEAD + "    return 12 * d ** 2 + 13 * d\n"}),
    Variant("ok_gelu_tanh", {**ffn(FFN_INIT.replace("nn.GELU()", 'nn.GELU(approximate="tanh")')),
                             **block("        h = self.attn(self.ln1(x))\n        x = h + x\n"
                                     "        return self.ffn(self.ln2(x)).add(x)\n")}),
    Variant("ok_functional_ffn", ffn("        h = 4 * d if hidden is None else hidden\n"
                                     "        self.fc, self.proj = nn.Linear(d, h), nn.Linear(h, d)\n",
                                     "        return self.proj(F.gelu(self.fc(x)))\n")),
]

# Correct answers written the way people write them in the wild: float32 constants inside a float64
# computation, computing in float32 and casting back, math vs torch constants, other layouts and loop orders.
CORRECT += [
    Variant("ok_float32_inside_cast_back", {
        **ln("    x32 = x.float()\n"
             "    mu = x32.mean(-1, keepdim=True)\n"
             "    var = ((x32 - mu) ** 2).mean(-1, keepdim=True)\n"
             "    y = (x32 - mu) / torch.sqrt(var + eps) * weight.float() + bias.float()\n"
             "    return y.to(x.dtype)\n"),
        **ffn("""        hidden = hidden or 4 * d
        self.fc = nn.Linear(d, hidden)
        self.proj = nn.Linear(hidden, d)
        self.c = torch.tensor(math.sqrt(2 / math.pi))     # a float32 constant, also in a .double() module
""", "        h = self.fc(x)\n"
     "        return self.proj(0.5 * h * (1 + torch.tanh(self.c * (h + 0.044715 * h ** 3))))\n"),
        **block("        for norm, sub in ((self.ln1, self.attn), (self.ln2, self.ffn)):\n"
                "            x = x + sub(norm(x))\n"
                "        return x\n"),
        "block_params": PARAMS_HEAD + "    attention, ffn, norms = 4 * d * d + 4 * d, 8 * d * d + 5 * d, 2 * 2 * d\n"
                                      "    return attention + ffn + norms\n"}),
    Variant("ok_var_mean_erf_by_hand", {
        **ln("    var, mu = torch.var_mean(x, dim=-1, keepdim=True, correction=0)\n"
             "    return torch.addcmul(bias, (x - mu) * torch.rsqrt(var + eps), weight)\n"),
        **ffn(FFN_INIT.replace("        self.act = nn.GELU()\n", ""),
              "        h = self.fc(x)\n"
              "        return self.proj(0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0))))\n"),
        **block("        a = self.attn(self.ln1(x))\n        x = torch.add(x, a)\n"
                "        f = self.ffn(self.ln2(x))\n        return torch.add(x, f)\n"),
        "block_params": PARAMS_HEAD + "    return d * (12 * d + 13)\n"}),
    Variant("ok_sequential_layout_std", {
        **ln("    mu = torch.mean(x, dim=-1, keepdim=True)\n"
             "    sd = torch.std(x, dim=-1, keepdim=True, unbiased=False)\n"
             "    return weight * ((x - mu) / torch.sqrt(sd ** 2 + eps)) + bias\n"),
        **ffn("""        hidden = 4 * d if hidden is None else hidden
        self.fc = nn.Linear(d, hidden)
        self.proj = nn.Linear(hidden, d)
        self.net = nn.Sequential(self.fc, nn.GELU(approximate="tanh"), self.proj)
""", "        return self.net(x)\n"),
        **block("        y = x + self.attn(self.ln1(x))\n        z = y + self.ffn(self.ln2(y))\n        return z\n"),
        "block_params": PARAMS_HEAD + "    per_linear = lambda i, o: i * o + o\n"
                                      "    return (per_linear(d, 3 * d) + per_linear(d, d) + per_linear(d, 4 * d)\n"
                                      "            + per_linear(4 * d, d) + 4 * d)\n"}),
]

# the count checked as a Python int: float arithmetic inside, an int returned, is fine; so is a FeedForward
# whose GELU is called from torch.nn.functional and a layer_norm that reads its statistics from torch.var_mean
CORRECT += [
    Variant("ok_int_of_float_formula", {
        **ffn("        hidden = hidden if hidden is not None else d * 4\n"
              "        self.fc = nn.Linear(d, hidden, bias=True)\n"
              "        self.proj = nn.Linear(hidden, d, bias=True)\n",
              "        return self.proj(torch.nn.functional.gelu(self.fc(x), approximate='none'))\n"),
        **ln("    var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)\n"
             "    return (x - mean) * (var + eps).rsqrt() * weight + bias\n"),
        "block_params": PARAMS_HEAD + "    return int(d * (12.0 * d + 13.0))          # exact below 2**53\n"}),
]

WORDS_ARE_NOT_CALLS = ("ok_comments_name_forbidden_calls",)

# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="norm_placement.grad_norm_figure", labels=("Pre-LN", "Post-LN"), ipywidgets=False)


def check_widget(target, text):
    assert target.locator("img").count() >= 1, "ch05: no figure"

# outside audit: more correct styles for the new checks (half precision, a Block that must not write into x):
# statistics by torch.var_mean in float32 cast back with type_as, weight/bias broadcast as (1, d), a Block
# whose residual additions are out-of-place torch.add calls on fresh names, and FeedForward(d, 4 * d) spelled out
CORRECT += [
    Variant("ok_var_mean_type_as_torch_add", {
        **ln("    var, mu = torch.var_mean(x.float(), dim=-1, keepdim=True, correction=0)\n"
             "    y = (x.float() - mu) * torch.rsqrt(var + eps)\n"
             "    return (y * weight.float().view(1, -1) + bias.float().view(1, -1)).type_as(x)\n"),
        **block("        h = torch.add(x, self.attn(self.ln1(x)))\n"
                "        out = torch.add(h, self.ffn(self.ln2(h)))\n"
                "        return out\n", BLOCK_INIT.replace("FeedForward(d)", "FeedForward(d, 4 * d)"))}),
]

# A second way to break each rule that had one breaking case, written the way students write them.
BUGS += [
    Variant("ffn_hidden_hard_coded_3072", ffn(FFN_INIT.replace("hidden = 4 * d if hidden is None else hidden",
                                                               "hidden = 3072 if hidden is None else hidden   # GPT-2: 4 * 768")),
            lose=("test_feedforward",), words=("隐藏层宽度不是 4d", "3072"), breaks=("ffn-hidden-default",)),
    Variant("ffn_hidden_as_multiplier", ffn(FFN_INIT.replace("hidden = 4 * d if hidden is None else hidden",
                                                             "hidden = (hidden or 4) * d                  # hidden: the width factor")),
            lose=("test_feedforward",), words=("hidden",), breaks=("ffn-hidden-arg",)),
    Variant("ffn_layers_in_sequential", ffn("        hidden = 4 * d if hidden is None else hidden\n"
                                            "        self.net = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))\n",
                                            "        return self.net(x)\n"),
            lose=("test_feedforward",), words=("不在题目给的属性名下",), breaks=("ffn-attributes",)),
    Variant("ffn_proj_without_bias", ffn(FFN_INIT.replace("nn.Linear(hidden, d)", "nn.Linear(hidden, d, bias=False)")),
            lose=("test_feedforward",), words=("bias",), breaks=("ffn-bias",)),
    Variant("ffn_quick_gelu", ffn(FFN_INIT.replace("        self.act = nn.GELU()\n", ""),
                                  "        h = self.fc(x)\n        return self.proj(h * torch.sigmoid(1.702 * h))   # GELU, quickly\n"),
            lose=("test_feedforward",), words=("1.702",), breaks=("ffn-gelu",)),
    Variant("ffn_flattens_two_dims", ffn(FFN_INIT, "        h = self.act(self.fc(x.flatten(0, 1)))          # (B*N, hidden)\n"
                                                   "        return self.proj(h).view(x.shape)\n"),
            lose=("test_feedforward",), words=("任意多维",), breaks=("ffn-any-shape",)),
    Variant("ffn_residual_in_place", ffn(FFN_INIT, "        x += self.proj(self.act(self.fc(x)))\n        return x\n"),
            lose=("test_feedforward",), words=("残差属于 Block",), breaks=("ffn-no-residual",)),
    Variant("ln_default_eps_1e12", {"layer_norm": "def layer_norm(x, weight, bias, eps=1e-12):\n"
                                                  "    mu = x.mean(-1, keepdim=True)\n"
                                                  "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                                  "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"},
            lose=("test_layer_norm",), words=("eps 的默认值不是 1e-5",), breaks=("ln-default-eps",)),
    Variant("ln_returns_rows", ln("    rows = x.reshape(-1, x.shape[-1])               # (tokens, d)\n"
                                  "    mu = rows.mean(-1, keepdim=True)\n"
                                  "    var = ((rows - mu) ** 2).mean(-1, keepdim=True)\n"
                                  "    return (rows - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("形状",), breaks=("ln-any-shape",)),
    Variant("ln_over_positions", ln("    mu = x.mean(-2, keepdim=True)\n"
                                    "    var = ((x - mu) ** 2).mean(-2, keepdim=True)\n"
                                    "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("dim=-1",), breaks=("ln-last-dim",)),
    Variant("ln_unbiased_std", ln("    mu = x.mean(-1, keepdim=True)\n"
                                  "    sd = x.std(-1, keepdim=True)\n"
                                  "    return (x - mu) / torch.sqrt(sd ** 2 + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("无偏",), breaks=("ln-biased",)),
    Variant("ln_var_without_keepdim", ln("    mu = x.mean(-1, keepdim=True)\n"
                                         "    var = ((x - mu) ** 2).mean(-1)\n"
                                         "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("keepdim=True",), breaks=("ln-keepdim",)),
    Variant("ln_bias_before_weight", ln("    mu = x.mean(-1, keepdim=True)\n"
                                        "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                        "    return ((x - mu) / torch.sqrt(var + eps) + bias) * weight\n"),
            lose=("test_layer_norm",), words=("bias",), breaks=("ln-weight-bias",)),
    Variant("ln_float64_not_cast_back", ln("    x = x.double()                                  # more precision\n"
                                           "    mu = x.mean(-1, keepdim=True)\n"
                                           "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                           "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("dtype",), breaks=("ln-dtype",)),
    Variant("ln_eps_added_after_division", ln("    mu = x.mean(-1, keepdim=True)\n"
                                              "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                              "    return ((x - mu) / torch.sqrt(var) + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("eps",), breaks=("ln-eps-inside",)),
    Variant("ln_sub_in_place_chain", ln("    var = x.var(-1, unbiased=False, keepdim=True)\n"
                                        "    x.sub_(x.mean(-1, keepdim=True)).div_(torch.sqrt(var + eps))\n"
                                        "    return x * weight + bias\n"),
            lose=("test_layer_norm",), words=("原地修改了传入的 x",), breaks=("ln-no-in-place",)),
    Variant("ln_rms_norm_of_centred", ln("    xc = x - x.mean(-1, keepdim=True)\n"
                                         "    return F.rms_norm(xc, xc.shape[-1:], weight, eps) + bias   # RMS of xc = std\n"),
            lose=("test_layer_norm",), words=("从零实现", "rms_norm"), breaks=("ln-basic-ops",)),
    Variant("ln_builds_layernorm_module", ln("    ln = nn.LayerNorm(x.shape[-1], eps=eps).to(x.dtype)\n"
                                             "    with torch.no_grad():\n"
                                             "        ln.weight.copy_(weight)\n"
                                             "        ln.bias.copy_(bias)\n"
                                             "    return ln(x)\n"),
            lose=("test_layer_norm",), words=("从零实现", "layer_norm"), breaks=("ln-no-library",)),
    Variant("block_add_in_place", block("        x.add_(self.attn(self.ln1(x)))\n"
                                        "        return x.add_(self.ffn(self.ln2(x)))\n"),
            lose=("test_block",), words=("原地修改了传入的 x",), breaks=("block-no-in-place",)),
    Variant("params_no_ffn_bias", {"block_params": PARAMS_HEAD + "    return 12 * d * d + 4 * d + 4 * d   # weights, attention biases, norms\n"},
            lose=("test_block_params",), words=("FFN 的 bias",), breaks=("params-count",)),
    Variant("params_counts_linear_modules", {"block_params": PARAMS_HEAD + (
        "    parts = [nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)]\n"
        "    return sum(p.numel() for m in parts for p in m.parameters()) + 4 * d\n")},
            lose=("test_block_params",), words=("公式",), breaks=("params-formula",)),
]
