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


# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="norm_placement.grad_norm_figure", labels=("Pre-LN", "Post-LN"), ipywidgets=False)


def check_widget(target, text):
    assert target.locator("img").count() >= 1, "ch05: no figure"
