"""Known wrong answers (and correct variants) for ch05_block.

Each wrong answer must lose the points of the named test cell and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

LN_HEAD = "def layer_norm(x, weight, bias, eps=1e-5):\n"
FFN_HEAD = "class FeedForward(nn.Module):\n    def __init__(self, d, hidden=None):\n        super().__init__()\n"
BLOCK_HEAD = ("from helpers.ch05_block.block_attention import CausalAttention\n\n"
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
            lose=("test_layer_norm",), words=("无偏方差", "d−1"), said=kept("layer_norm", 2)),
    Variant("ln_in_place", ln("    x -= x.mean(-1, keepdim=True)                   # centred in place\n"
                              "    var = (x * x).mean(-1, keepdim=True)\n"
                              "    return x / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("原地修改了输入 x", "新的张量")),
    Variant("ln_eps_outside", ln("    mu = x.mean(-1, keepdim=True)\n"
                                 "    std = ((x - mu) ** 2).mean(-1, keepdim=True).sqrt()\n"
                                 "    return (x - mu) / (std + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("eps 加在了平方根外面",)),
    Variant("ln_no_weight_bias", ln("    mu = x.mean(-1, keepdim=True)\n"
                                    "    var = ((x - mu) ** 2).mean(-1, keepdim=True)\n"
                                    "    return (x - mu) / torch.sqrt(var + eps)\n"),
            lose=("test_layer_norm",), words=("没有用 weight 和 bias",)),
    Variant("ln_batch_dim", ln("    mu = x.mean(0, keepdim=True)\n"
                               "    var = ((x - mu) ** 2).mean(0, keepdim=True)\n"
                               "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("错误的维度", "BatchNorm")),
    Variant("ln_one_pass", ln("    mu = x.mean(-1, keepdim=True)\n"
                              "    var = (x * x).mean(-1, keepdim=True) - mu * mu\n"
                              "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("E[x²] − E[x]²", "灾难性抵消")),
    Variant("ln_uses_module", ln("    return nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)\n"),
            lose=("test_layer_norm",), words=("从零实现", "layer_norm")),
    # FeedForward
    Variant("ffn_relu", ffn(FFN_INIT.replace("nn.GELU()", "nn.ReLU()")),
            lose=("test_feedforward",), words=("ReLU", "GELU"), said=kept("FeedForward", 1)),
    Variant("ffn_hidden_2d", ffn(FFN_INIT.replace("4 * d", "2 * d")),
            lose=("test_feedforward",), words=("2d", "4d"), said=kept("FeedForward", 1)),
    Variant("ffn_adds_residual", ffn(FFN_INIT, "        return x + self.proj(self.act(self.fc(x)))\n"),
            lose=("test_feedforward",), words=("残差属于 Block",), said=kept("FeedForward", 1)),
    Variant("ffn_no_bias", ffn(FFN_INIT.replace("nn.Linear(d, hidden)", "nn.Linear(d, hidden, bias=False)")
                               .replace("nn.Linear(hidden, d)", "nn.Linear(hidden, d, bias=False)")),
            lose=("test_feedforward",), words=("bias",)),
    Variant("ffn_hidden_ignored", ffn(FFN_INIT.replace("hidden = 4 * d if hidden is None else hidden", "hidden = 4 * d")),
            lose=("test_feedforward",), words=("忽略了参数 hidden",)),
    # Block
    Variant("block_post_ln", block("        x = self.ln1(x + self.attn(x))\n        return self.ln2(x + self.ffn(x))\n"),
            lose=("test_block",), words=("Post-LN", "Pre-LN")),
    Variant("block_no_attn_residual", block("        x = self.attn(self.ln1(x))\n        return x + self.ffn(self.ln2(x))\n"),
            lose=("test_block",), words=("注意力子层少了残差连接",)),
    Variant("block_shared_ln", block("        x = x + self.attn(self.ln1(x))\n        return x + self.ffn(self.ln1(x))\n"),
            lose=("test_block",), words=("共用了同一个 LayerNorm",)),
    # block_params
    Variant("params_no_norms", {"block_params": PARAMS_HEAD + "    return 12 * d * d + 9 * d\n"},
            lose=("test_block_params",), words=("LayerNorm",)),
    Variant("params_builds_block", {"block_params": PARAMS_HEAD + "    return sum(p.numel() for p in Block(d, 1).parameters())\n"},
            lose=("test_block_params",), words=("建了一个模型", "公式")),
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

WORDS_ARE_NOT_CALLS = ("ok_comments_name_forbidden_calls",)

# (the rule as the exercise states it, the check that enforces it, the wrong answer that breaks it)
RULES = [
    ("FeedForward: the hidden width is 4d when hidden is None", "check_feedforward: the shape of fc for d = 8 and 5",
     "ffn_hidden_2d"),
    ("FeedForward: fc and proj both have a bias", "check_feedforward: the bias of each nn.Linear", "ffn_no_bias"),
    ("FeedForward: the hidden width is hidden when it is given", "check_feedforward: FeedForward(6, hidden=10)",
     "ffn_hidden_ignored"),
    ("FeedForward: no residual inside, the residual is Block's", "check_feedforward: against proj(GELU(fc(x)))",
     "ffn_adds_residual"),
    ("FeedForward: GELU between fc and proj", "check_feedforward: against proj(GELU(fc(x))) in float32 and float64",
     "ffn_relu"),
    ("layer_norm: the biased variance (divide by d)", "check_layer_norm: against the float64 reference",
     "ln_unbiased"),
    ("layer_norm: eps inside the square root", "check_layer_norm: a row of tiny variance", "ln_eps_outside"),
    ("layer_norm: statistics along the last dimension", "check_layer_norm: 2-D and 3-D inputs", "ln_batch_dim"),
    ("layer_norm: multiply by weight and add bias", "check_layer_norm: random weight and bias", "ln_no_weight_bias"),
    ("layer_norm: does not change x in place", "check_layer_norm: x compared with a copy after the call",
     "ln_in_place"),
    ("layer_norm from scratch: F.layer_norm and nn.LayerNorm are not allowed",
     "check_layer_norm runs inside core.forbidden: the call itself raises", "ln_uses_module"),
    ("Block: Pre-LN, x = x + attn(ln1(x)); x = x + ffn(ln2(x))",
     "check_block: weights copied into an independent float64 reference, hooks on the sublayers' inputs",
     "block_post_ln"),
    ("Block: a residual connection around each sublayer", "check_block: against the reference",
     "block_no_attn_residual"),
    ("Block: two separate LayerNorms, ln1 before attention and ln2 before the FFN",
     "check_block: ln1 is not ln2; hooks on the sublayers' inputs", "block_shared_ln"),
    ("block_params: the count of one block, 12d^2 + 13d", "check_block_params: against torch's own modules",
     "params_no_norms"),
    ("block_params: a formula in d, without building a model",
     "check_block_params: no tensor of d x d entries is created at d = 64", "params_builds_block"),
]


# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="norm_placement.grad_norm_figure", labels=("Pre-LN", "Post-LN"), ipywidgets=False)


def check_widget(target, text):
    assert target.locator("img").count() >= 1, "ch05: no figure"
