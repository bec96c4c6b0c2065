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


BUGS = [
    # layer_norm
    Variant("ln_unbiased", ln("    mu = x.mean(-1, keepdim=True)\n    var = x.var(-1, keepdim=True)\n"
                              "    return (x - mu) / torch.sqrt(var + eps) * weight + bias\n"),
            lose=("test_layer_norm",), words=("无偏方差", "d−1")),
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
            lose=("test_feedforward",), words=("ReLU", "GELU")),
    Variant("ffn_hidden_2d", ffn(FFN_INIT.replace("4 * d", "2 * d")),
            lose=("test_feedforward",), words=("2d", "4d")),
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
]

CORRECT = [
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


# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="norm_placement.grad_norm_figure", labels=("Pre-LN", "Post-LN"), ipywidgets=False)


def check_widget(target, text):
    assert target.locator("img").count() >= 1, "ch05: no figure"
