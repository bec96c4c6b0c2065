"""Known wrong answers (and correct variants) for ch06_param_count.

Each wrong answer must lose the points of the named test cell and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

APPROX_HEAD = "def approx_non_embedding_params(n_layer, d):\n"
GPT2_HEAD = "def gpt2_params(n_layer, d, vocab_size, n_ctx, tied=True):\n"
LLAMA_HEAD = "def llama_params(n_layer, d, vocab_size, d_ff, tied=False):\n"


def approx(body: str) -> dict:
    return {"approx": APPROX_HEAD + body}


def gpt2(body: str, head: str = GPT2_HEAD) -> dict:
    return {"gpt2_params": head + body}


def llama(body: str, head: str = LLAMA_HEAD) -> dict:
    return {"llama_params": head + body}


# a closed form written the way a student would, with switches to break it
GPT2_OK = """    wte = vocab_size * d
    wpe = n_ctx * d
    block = 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d)
    ln_f = 2 * d
    head = 0 if tied else vocab_size * d
    return wte + wpe + n_layer * block + ln_f + head
"""

LLAMA_OK = """    block = d + 4 * d * d + d + 3 * d * d_ff
    head = 0 if tied else vocab_size * d
    return vocab_size * d + n_layer * block + d + head
"""

BUGS = [
    # approx_non_embedding_params
    Variant("approx_d_not_squared", approx("    return 12 * n_layer * d\n"),
            lose=("test_approx",), words=("12·L·d", "d²"), breaks=("approx-formula",)),
    Variant("approx_ffn_4d2", approx("    return (4 * d * d + 4 * d * d) * n_layer\n"),
            lose=("test_approx",), words=("8d²", "12d²"), breaks=("approx-formula",)),
    Variant("approx_in_millions", approx("    return 12 * n_layer * d ** 2 / 1e6          # in millions, like a model card\n"),
            lose=("test_approx",), words=("以百万为单位", "整数"), breaks=("approx-int",)),
    Variant("approx_float", approx("    return 12.0 * n_layer * d ** 2\n"),
            lose=("test_approx",), words=("float", "整数"), breaks=("approx-int",)),
    # gpt2_params
    Variant("gpt2_no_wpe", gpt2(GPT2_OK.replace("    wpe = n_ctx * d\n", "    wpe = 0\n")),
            lose=("test_gpt2_params",), words=("位置嵌入",), breaks=("gpt2-wpe",)),
    Variant("gpt2_tied_twice", gpt2(GPT2_OK.replace("0 if tied else vocab_size * d", "vocab_size * d")),
            lose=("test_gpt2_params",), words=("lm_head", "只算一次"), breaks=("gpt2-tied",)),
    Variant("gpt2_no_biases", gpt2(GPT2_OK.replace(
        "(3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d)",
        "3 * d * d + d * d + 2 * d + 4 * d * d + 4 * d * d")),
            lose=("test_gpt2_params",), words=("偏置",), breaks=("gpt2-biases",)),
    Variant("gpt2_no_final_ln", gpt2(GPT2_OK.replace("    ln_f = 2 * d\n", "    ln_f = 0\n")),
            lose=("test_gpt2_params",), words=("ln_f",), breaks=("gpt2-ln-f",)),
    Variant("gpt2_head_bias", gpt2(GPT2_OK.replace("0 if tied else vocab_size * d", "0 if tied else vocab_size * d + vocab_size")),
            lose=("test_gpt2_params",), words=("lm_head", "没有偏置"), breaks=("gpt2-head-no-bias",)),
    Variant("gpt2_ffn_4d2", gpt2(GPT2_OK.replace("(4 * d * d + 4 * d) + (4 * d * d + d)",
                                                 "(2 * d * d + 4 * d) + (2 * d * d + d)")),
            lose=("test_gpt2_params",), words=("FFN 算成了 4d²",), breaks=("gpt2-mlp",)),
    Variant("gpt2_rule_of_thumb", gpt2("    return 12 * n_layer * d * d + vocab_size * d * (1 if tied else 2)\n"),
            lose=("test_gpt2_params",), words=("速算", "位置嵌入"), breaks=("gpt2-exact",)),
    Variant("gpt2_two_bugs", gpt2(GPT2_OK.replace("    wpe = n_ctx * d\n", "    wpe = 0\n")
                                  .replace("    ln_f = 2 * d\n", "    ln_f = 0\n")),
            lose=("test_gpt2_params",), words=("两处错误", "位置嵌入", "ln_f")),
    Variant("gpt2_calls_demo_helper", gpt2(
        "    from helpers.ch06_param_count import model_cards\n"
        "    return sum(model_cards.measure('gpt2', n_layer, d, vocab_size, n_ctx, tied).values())\n"),
            lose=("test_gpt2_params",), words=("helpers.ch06_param_count.model_cards.measure",)),
    Variant("gpt2_tensor_count", gpt2("""    shapes = torch.tensor([[vocab_size, d], [n_ctx, d], [1, 2 * d]])
    per_block = torch.tensor([[2, d], [d, 3 * d], [1, 3 * d], [d, d], [1, d], [2, d], [d, 4 * d], [1, 4 * d],
                              [4 * d, d], [1, d]])
    total = shapes.prod(-1).sum() + n_layer * per_block.prod(-1).sum()
    return total if tied else total + vocab_size * d
"""), lose=("test_gpt2_params",), words=("张量", "整数"), breaks=("gpt2-int",)),
    Variant("gpt2_no_wte", gpt2(GPT2_OK.replace("    wte = vocab_size * d\n", "    wte = 0                          # tied: counted as lm_head\n")),
            lose=("test_gpt2_params",), words=("漏了词嵌入 wte",), breaks=("gpt2-wte",)),
    Variant("gpt2_ln_weight_only", gpt2(GPT2_OK.replace("block = 2 * d +", "block = d +").replace(
        "+ 2 * d + (4 * d * d + 4 * d)", "+ d + (4 * d * d + 4 * d)").replace("ln_f = 2 * d", "ln_f = d")),
            lose=("test_gpt2_params",), words=("只算了 weight",), breaks=("gpt2-ln-weight-bias",)),
    Variant("gpt2_no_attn_proj", gpt2(GPT2_OK.replace("(3 * d * d + 3 * d) + (d * d + d)", "(3 * d * d + 3 * d)")),
            lose=("test_gpt2_params",), words=("c_proj",), breaks=("gpt2-attn",)),
    Variant("gpt2_one_ln_per_block", gpt2(GPT2_OK.replace("block = 2 * d +", "block =")),
            lose=("test_gpt2_params",), words=("每块只算了一个 LayerNorm",), breaks=("gpt2-ln2",)),
    Variant("gpt2_ln_f_in_loop", gpt2("""    total = vocab_size * d + n_ctx * d
    for i in range(n_layer):
        total += 2 * d + (3 * d * d + 3 * d) + (d * d + d) + 2 * d + (4 * d * d + 4 * d) + (4 * d * d + d)
        if i == n_layer - 1:
            total += 2 * d                       # ln_f, after the last block
    return total + (0 if tied else vocab_size * d)
"""), lose=("test_gpt2_params",), words=("n_layer = 0",), breaks=("gpt2-zero-layers",)),
    # llama_params
    # outside audit: a default tied=False copied from llama_params' signature
    Variant("gpt2_default_untied", gpt2(GPT2_OK, "def gpt2_params(n_layer, d, vocab_size, n_ctx, tied=False):\n"),
            lose=("test_gpt2_params",), words=("tied 的默认值应当是 True",), breaks=("gpt2-default-tied",)),
    # outside audit: the two sizes in the other order (wte and wpe add up the same; an untied head does not)
    Variant("gpt2_vocab_n_ctx_swapped", gpt2(GPT2_OK, "def gpt2_params(n_layer, d, n_ctx, vocab_size, tied=True):\n"),
            lose=("test_gpt2_params",), words=("vocab_size 和 n_ctx 的顺序弄反了",), breaks=("gpt2-exact",)),
    Variant("llama_with_biases", llama(LLAMA_OK.replace("3 * d * d_ff", "3 * d * d_ff + 4 * d + 2 * d_ff + d")),
            lose=("test_llama_params",), words=("偏置",), breaks=("llama-attn", "llama-ffn")),
    Variant("llama_ffn_two_matrices", llama(LLAMA_OK.replace("3 * d * d_ff", "2 * d * d_ff")),
            lose=("test_llama_params",), words=("三个",), breaks=("llama-ffn",)),
    Variant("llama_tied_ignored", llama(LLAMA_OK.replace("0 if tied else vocab_size * d", "vocab_size * d")),
            lose=("test_llama_params",), words=("忽略了 tied",), breaks=("llama-tied",)),
    Variant("llama_rmsnorm_bias", llama(LLAMA_OK.replace("block = d + 4 * d * d + d", "block = 2 * d + 4 * d * d + 2 * d")
                                        .replace("n_layer * block + d", "n_layer * block + 2 * d")),
            lose=("test_llama_params",), words=("RMSNorm", "bias"), breaks=("llama-norm-weight-only",)),
    Variant("llama_default_tied", llama(LLAMA_OK, head=LLAMA_HEAD.replace("tied=False", "tied=True")),
            lose=("test_llama_params",), words=("默认值",), breaks=("llama-default-untied",)),
    Variant("llama_float", llama("    import math\n" + LLAMA_OK.replace("4 * d * d", "4 * math.pow(d, 2)")),
            lose=("test_llama_params",), words=("float", "整数"), breaks=("llama-int",)),
    Variant("llama_rule_of_thumb", llama("    return 12 * n_layer * d * d + vocab_size * d * (1 if tied else 2)\n"),
            lose=("test_llama_params",), words=("速算",), breaks=("llama-exact",)),
    Variant("llama_no_embedding", llama(LLAMA_OK.replace("return vocab_size * d + n_layer", "return n_layer")),
            lose=("test_llama_params",), words=("漏了词嵌入",), breaks=("llama-embedding",)),
    Variant("llama_qkv_bias", llama(LLAMA_OK.replace("4 * d * d", "4 * d * d + 3 * d")),
            lose=("test_llama_params",), words=("q、k、v 投影加了偏置",), breaks=("llama-attn",)),
    Variant("llama_one_norm_per_block", llama(LLAMA_OK.replace("block = d + 4 * d * d + d", "block = d + 4 * d * d")),
            lose=("test_llama_params",), words=("每块只算了一个 RMSNorm",), breaks=("llama-norm2",)),
    Variant("llama_output_bias", llama(LLAMA_OK.replace("0 if tied else vocab_size * d", "0 if tied else vocab_size * d + vocab_size")),
            lose=("test_llama_params",), words=("输出层多算了偏置",), breaks=("llama-head-no-bias",)),
    Variant("llama_no_final_norm", llama(LLAMA_OK.replace("n_layer * block + d", "n_layer * block")),
            lose=("test_llama_params",), words=("最后的 RMSNorm",), breaks=("llama-final-norm",)),
    # outside audit: d_ff derived from d (2/3·4d rounded to 256) instead of the d_ff given; right for 7B only
    Variant("llama_d_ff_from_d", llama(LLAMA_OK.replace("    block =", "    d_ff = 256 * ((int(8 * d / 3) + 255) // 256)\n"
                                                         "    block =")),
            lose=("test_llama_params",), words=("没有用参数 d_ff",), breaks=("llama-ffn",)),
]

CORRECT = [
    Variant("ok_per_layer_loop", {
        **approx("    total = 0\n    for _ in range(n_layer):\n        total += 4 * d * d + 8 * d * d\n"
                 "    return total\n"),
        **gpt2("""    total = vocab_size * d + n_ctx * d
    for _ in range(n_layer):
        for fan_in, fan_out in ((d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)):
            total += fan_in * fan_out + fan_out
        total += 2 * (2 * d)
    total += 2 * d
    if not tied:
        total += vocab_size * d
    return total
"""),
        **llama("""    total = vocab_size * d
    for _ in range(n_layer):
        total += 4 * d * d + 3 * d * d_ff + 2 * d
    return total + d + (0 if tied else vocab_size * d)
""")}),
    # Modules on the meta device, counted. Embedding tables are bare Parameters here: initialising an
    # nn.Embedding on the meta device imports torch._dynamo, which rebinds torch.manual_seed and trips the
    # grading guard (reported to the lead; see grading/ch06.torch_count).
    Variant("ok_meta_modules", {
        **gpt2("""    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.c_attn, self.attn_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    with torch.device("meta"):
        m = nn.Module()
        m.wte = nn.Parameter(torch.empty(vocab_size, d))
        m.wpe = nn.Parameter(torch.empty(n_ctx, d))
        m.h = nn.ModuleList([Block() for _ in range(n_layer)])
        m.ln_f = nn.LayerNorm(d)
        m.lm_head = nn.Linear(d, vocab_size, bias=False)
        if tied:
            m.lm_head.weight = m.wte
    return sum(p.numel() for p in m.parameters())
"""),
        **llama("""    def lin(i, o):
        return nn.Linear(i, o, bias=False)

    with torch.device("meta"):
        layers = [nn.ModuleList([nn.RMSNorm(d), lin(d, d), lin(d, d), lin(d, d), lin(d, d), nn.RMSNorm(d),
                                 lin(d, d_ff), lin(d, d_ff), lin(d_ff, d)]) for _ in range(n_layer)]
        m = nn.ModuleList([lin(vocab_size, d), *layers, nn.RMSNorm(d), lin(d, vocab_size)])
        if tied:
            m[-1].weight = m[0].weight
    return sum(p.numel() for p in m.parameters())
""")}),
    Variant("ok_float_and_numpy", {
        **approx("    return int(12.0 * n_layer * d * d)                # float arithmetic, an int returned\n"),
        **llama("    import numpy as np\n" + LLAMA_OK.replace("return vocab_size", "return np.int64(vocab_size")
                .replace("+ d + head", "+ d + head)")),
    }),
]

# More correct answers as people write them: a table of weight shapes summed with math.prod, numpy
# integers, the count split per sublayer, the untied head added with an if.
CORRECT += [
    Variant("ok_shape_table_math_prod", {
        **approx("    import numpy as np\n    return int(np.prod([12, n_layer, d, d], dtype=np.int64))\n"),
        **gpt2("""    import math
    shapes = [(vocab_size, d), (n_ctx, d), (2 * d,)]                       # wte, wpe, ln_f
    per_block = [(2, d), (d, 3 * d), (3 * d,), (d, d), (d,), (2, d), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    total = sum(math.prod(s) for s in shapes) + n_layer * sum(math.prod(s) for s in per_block)
    if tied is False:
        total += vocab_size * d
    return total
"""),
        **llama("""    import math
    per_block = [(d,), (d, d), (d, d), (d, d), (d, d), (d,), (d, d_ff), (d, d_ff), (d_ff, d)]
    total = vocab_size * d + n_layer * sum(map(math.prod, per_block)) + d
    return total if tied else total + vocab_size * d
""")}),
    Variant("ok_per_sublayer_names", {
        **approx("    attention = 4 * d ** 2\n    mlp = 2 * (d * 4 * d)\n    return n_layer * (attention + mlp)\n"),
        **gpt2("""    embeddings = (vocab_size + n_ctx) * d
    attention = d * 3 * d + 3 * d + d * d + d
    mlp = d * 4 * d + 4 * d + 4 * d * d + d
    norms = 2 * 2 * d
    total = embeddings + n_layer * (attention + mlp + norms) + 2 * d
    return total + (vocab_size * d) * (not tied)
"""),
        **llama("""    attention = 4 * d * d
    swiglu = 3 * d * d_ff
    norms = 2 * d
    output = 0 if tied else vocab_size * d
    return int(vocab_size * d + n_layer * (attention + swiglu + norms) + d + output)
""")}),
]

# ------------------------------------------------------------------ browser test

# play: the control the keyboard test acts on first (GPT-2 is already chosen: Space on it changes nothing)
WIDGET = dict(cell="param_demo.explorer", labels=("GPT-2", "LLaMA", "嵌入与 lm_head 共享", "n_ctx"), play="LLaMA")


def check_widget(target, text):
    """GPT-2 small, the explorer's starting point."""
    from helpers.ch06_param_count import model_cards, param_demo

    exact = sum(model_cards.measure("gpt2", 12, 768, 50257, 1024).values())
    assert param_demo.summary("gpt2", 12, 768, 50257, 1024, True) in text, text
    assert f"你的函数：{exact:,} ✓" in text, text

# outside audit: correct answers in two more styles: modules built and counted (tied by not building lm_head),
# and a d_ff that defaults to LLaMA's rounding when not given but uses the one given
CORRECT += [
    Variant("ok_count_built_modules_and_d_ff_default", {
        **gpt2("""    mods = [nn.Embedding(vocab_size, d), nn.Embedding(n_ctx, d), nn.LayerNorm(d)]
    for _ in range(n_layer):
        mods += [nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d),
                 nn.Linear(d, 4 * d), nn.Linear(4 * d, d)]
    if tied != True:  # noqa: E712
        mods.append(nn.Linear(d, vocab_size, bias=False))
    return sum(p.numel() for m in mods for p in m.parameters())
"""),
        **llama(LLAMA_OK, "def llama_params(n_layer, d, vocab_size, d_ff=None, tied=False):\n"
                          "    d_ff = d_ff or 256 * ((int(8 * d / 3) + 255) // 256)\n")}),
]

# a second way to break each rule (issue 49): the count goes wrong somewhere else, or the same mistake is written
# another way
BUGS += [
    Variant("approx_L_squared", approx("    return 12 * n_layer ** 2 * d\n"),
            lose=("test_approx",), words=("12·L²·d",), breaks=("approx-formula",)),
    Variant("approx_tensor", approx("    return torch.tensor(12 * n_layer * d * d)\n"),
            lose=("test_approx",), words=("张量", "整数"), breaks=("approx-int",)),
    Variant("gpt2_wpe_dropped_when_tied", gpt2(GPT2_OK.replace("    wpe = n_ctx * d\n",
                                                               "    wpe = 0 if tied else n_ctx * d          # shared too?\n")),
            lose=("test_gpt2_params",), words=("wpe",), breaks=("gpt2-wpe",)),
    Variant("gpt2_tied_inverted", gpt2(GPT2_OK.replace("0 if tied else vocab_size * d", "vocab_size * d if tied else 0")),
            lose=("test_gpt2_params",), words=("只算一次",), breaks=("gpt2-tied",)),
    Variant("gpt2_c_attn_bias_d", gpt2(GPT2_OK.replace("(3 * d * d + 3 * d)", "(3 * d * d + d)")),
            lose=("test_gpt2_params",), words=("c_attn", "3d"), breaks=("gpt2-biases",)),
    Variant("gpt2_wte_only_untied", gpt2(GPT2_OK.replace("    wte = vocab_size * d\n",
                                                         "    wte = 0 if tied else vocab_size * d     # tied: it is lm_head's\n")),
            lose=("test_gpt2_params",), words=("漏了词嵌入 wte",), breaks=("gpt2-wte",)),
    Variant("gpt2_layernorm_no_parameters", gpt2(GPT2_OK.replace("block = 2 * d +", "block =")
                                                 .replace("+ 2 * d + (4 * d * d + 4 * d)", "+ (4 * d * d + 4 * d)")
                                                 .replace("ln_f = 2 * d", "ln_f = 0")),
            lose=("test_gpt2_params",), words=("漏了 LayerNorm",), breaks=("gpt2-ln-weight-bias",)),
    Variant("gpt2_c_attn_as_d_by_d", gpt2(GPT2_OK.replace("(3 * d * d + 3 * d)", "(d * d + 3 * d)")),
            lose=("test_gpt2_params",), words=("c_attn", "3d²"), breaks=("gpt2-attn",)),
    Variant("gpt2_norms_once", gpt2(GPT2_OK.replace("block = 2 * d +", "block =")
                                    .replace("+ 2 * d + (4 * d * d + 4 * d)", "+ (4 * d * d + 4 * d)")
                                    .replace("ln_f = 2 * d", "ln_f = 3 * (2 * d)              # ln_1, ln_2, ln_f")),
            lose=("test_gpt2_params",), words=("每个块",), breaks=("gpt2-ln2",)),
    Variant("gpt2_bias_sized_by_input", gpt2(GPT2_OK.replace("(4 * d * d + d)", "(4 * d * d + 4 * d)")),
            lose=("test_gpt2_params",), words=("每个输出",), breaks=("gpt2-mlp",)),
    Variant("gpt2_ln_f_per_block", gpt2(GPT2_OK.replace("(4 * d * d + d)\n", "(4 * d * d + d) + 2 * d\n")
                                        .replace("    ln_f = 2 * d\n", "    ln_f = 0                             # counted in each block\n")),
            lose=("test_gpt2_params",), words=("ln_f", "一次"), breaks=("gpt2-ln-f",)),
    Variant("gpt2_tied_head_bias", gpt2(GPT2_OK.replace("0 if tied else vocab_size * d",
                                                        "vocab_size if tied else vocab_size * d + vocab_size")),
            lose=("test_gpt2_params",), words=("lm_head", "没有偏置"), breaks=("gpt2-head-no-bias",)),
    Variant("gpt2_zero_layers_empty", gpt2("    if n_layer == 0:\n        return 0\n" + GPT2_OK),
            lose=("test_gpt2_params",), words=("n_layer = 0",), breaks=("gpt2-zero-layers",)),
    Variant("gpt2_model_card_string", gpt2(GPT2_OK.replace("    return wte + wpe + n_layer * block + ln_f + head\n",
                                                           "    return f'{(wte + wpe + n_layer * block + ln_f + head) / 1e6:.1f}M'\n")),
            lose=("test_gpt2_params",), words=("字符串", "整数"), breaks=("gpt2-int",)),
    Variant("gpt2_default_none", gpt2(GPT2_OK.replace("0 if tied else", "0 if tied is True else"),
                                      "def gpt2_params(n_layer, d, vocab_size, n_ctx, tied=None):\n"),
            lose=("test_gpt2_params",), words=("tied 的默认值应当是 True",), breaks=("gpt2-default-tied",)),
    Variant("llama_rope_counted", llama(LLAMA_OK.replace("3 * d * d_ff", "3 * d * d_ff + d // 2        # RoPE's θ")),
            lose=("test_llama_params",), words=("RoPE",), breaks=("llama-exact",)),
    Variant("llama_tensor", llama(LLAMA_OK.replace("return vocab_size * d", "return torch.tensor(vocab_size) * d")),
            lose=("test_llama_params",), words=("张量", "整数"), breaks=("llama-int",)),
    Variant("llama_embedding_only_untied", llama(LLAMA_OK.replace("    head = 0 if tied else vocab_size * d\n",
                                                                  "    head = 0 if tied else 2 * vocab_size * d\n")
                                                 .replace("return vocab_size * d + n_layer", "return n_layer")),
            lose=("test_llama_params",), words=("漏了词嵌入",), breaks=("llama-embedding",)),
    Variant("llama_no_norms", llama(LLAMA_OK.replace("block = d + 4 * d * d + d", "block = 4 * d * d")
                                    .replace("n_layer * block + d", "n_layer * block")),
            lose=("test_llama_params",), words=("漏了 RMSNorm",), breaks=("llama-norm-weight-only",)),
    Variant("llama_norms_once", llama(LLAMA_OK.replace("block = d + 4 * d * d + d", "block = 4 * d * d")
                                      .replace("n_layer * block + d", "n_layer * block + 3 * d")),
            lose=("test_llama_params",), words=("每个块",), breaks=("llama-norm2",)),
    Variant("llama_ffn_8d2", llama(LLAMA_OK.replace("3 * d * d_ff", "8 * d * d")),
            lose=("test_llama_params",), words=("8d²", "d_ff"), breaks=("llama-ffn",)),
    Variant("llama_final_norm_per_block", llama(LLAMA_OK.replace("block = d + 4 * d * d + d", "block = d + 4 * d * d + d + d")
                                                .replace("n_layer * block + d", "n_layer * block")),
            lose=("test_llama_params",), words=("最后的 RMSNorm", "一次"), breaks=("llama-final-norm",)),
    Variant("llama_tied_output_bias", llama(LLAMA_OK.replace("0 if tied else vocab_size * d",
                                                             "vocab_size if tied else vocab_size * d + vocab_size")),
            lose=("test_llama_params",), words=("输出层", "没有偏置"), breaks=("llama-head-no-bias",)),
    Variant("llama_always_tied", llama(LLAMA_OK.replace("0 if tied else vocab_size * d", "0")),
            lose=("test_llama_params",), words=("tied=False",), breaks=("llama-tied",)),
    Variant("llama_default_none", llama(LLAMA_OK.replace("0 if tied else", "0 if tied in (True, None) else"),
                                        head=LLAMA_HEAD.replace("tied=False", "tied=None")),
            lose=("test_llama_params",), words=("默认值",), breaks=("llama-default-untied",)),
    Variant("llama_attn_with_o_bias", llama(LLAMA_OK.replace("4 * d * d", "4 * d * d + d")),
            lose=("test_llama_params",), words=("偏置",), breaks=("llama-attn",)),
]
