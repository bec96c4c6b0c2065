"""Known wrong answers (and correct variants) for ch09_inside_gpt.

Each wrong answer must lose the points of the named test cells and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

PREV = "def prev_token_score(attn):\n"
IND = '''def induction_score(attn, period):
    n = attn.shape[-1]
    if not 1 <= period < n:
        raise ValueError(f"period={period} is not between 1 and {n - 1}")
'''
ABL_HEAD = '''def ablate_heads(model, heads, x, y):
    handles = []
'''
HOOK = '''    for layer, head in heads:
        def zero_head(module, inputs, output, head=head):
            output = output.clone()
            output[:, head] = 0.0
            return output
        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))
'''
RUN = '''    try:
        with torch.no_grad():
            _, loss = model(x, y)
    finally:
        for handle in handles:
            handle.remove()
    return loss.item()
'''


def prev(body: str) -> dict:
    return {"prev_token_score": PREV + body}


def ind(body: str) -> dict:
    return {"induction_score": IND + body}


def abl(code: str) -> dict:
    return {"ablate_heads": code}


ABL_OK = ABL_HEAD + HOOK + RUN
P = ("test_prev_token_score",)
I = ("test_induction_score",)
A = ("test_ablate_heads",)

BUGS = [
    # prev_token_score
    Variant("prev_divides_by_n", prev("    n = attn.shape[-1]\n    return attn.diagonal(-1, -2, -1).sum(-1).mean(1) / n\n"),
            lose=P, words=("位置 0 也算进了平均",)),
    Variant("prev_wraps_position_0", prev("    n = attn.shape[-1]\n    i = torch.arange(n)\n"
                                          "    return attn[..., i, i - 1].mean(dim=(1, 3))\n"),
            lose=P, words=("位置 0 也算进了平均",)),
    Variant("prev_main_diagonal", prev("    return attn.diagonal(0, -2, -1).mean(dim=(1, 3))\n"),
            lose=P, words=("位置 i 看自己",)),
    Variant("prev_query_key_swapped", prev("    n = attn.shape[-1]\n    i = torch.arange(1, n)\n"
                                           "    return attn[..., i - 1, i].mean(dim=(1, 3))\n"),
            lose=P, words=("query 和 key 的位置反了",)),
    Variant("prev_two_back", prev("    return attn.diagonal(-2, -2, -1).mean(dim=(1, 3))\n"),
            lose=P, words=("往前两个位置",)),
    Variant("prev_mean_over_heads", prev("    return attn.diagonal(-1, -2, -1).mean(dim=(2, 3))\n"),
            lose=P, words=("平均的轴不对",)),
    Variant("prev_sum", prev("    return attn.diagonal(-1, -2, -1).sum(dim=(1, 3))\n"),
            lose=P, words=("求的是和而不是平均",)),
    Variant("prev_block_mean", prev("    return attn[..., 1:, :-1].mean(dim=(1, 3, 4))\n"),
            lose=P, words=("整块",)),
    Variant("prev_argmax", prev("    n = attn.shape[-1]\n    best = attn[..., 1:, :].argmax(dim=-1)\n"
                                "    return (best == torch.arange(n - 1)).float().mean(dim=(1, 3))\n"),
            lose=P, words=("最大权重落在 i−1",)),
    Variant("prev_loop_drops_last", prev('''    L, B, H, n, _ = attn.shape
    total = torch.zeros(L, H)
    for i in range(1, n - 1):
        total += attn[:, :, :, i, i - 1].mean(dim=1)
    return total / (n - 2)
'''), lose=P, words=("最后一个位置",)),
    Variant("prev_keeps_batch", prev("    return attn.diagonal(-1, -2, -1).mean(dim=-1)\n"),
            lose=P, words=("batch 这一维",)),
    # induction_score
    Variant("ind_earlier_occurrence", ind("    i = torch.arange(period, n)\n"
                                          "    return attn[..., i, i - period].mean(dim=(1, 3))\n"),
            lose=I, words=("前一次出现的那个 token 本身",)),
    Variant("ind_two_after", ind("    i = torch.arange(period, n)\n"
                                 "    return attn[..., i, i - period + 2].mean(dim=(1, 3))\n"),
            lose=I, words=("偏了一格",)),
    Variant("ind_whole_diagonal", ind("    return attn.diagonal(-(period - 1), -2, -1).mean(dim=(1, 3))\n"),
            lose=I, words=("第一半的位置也算进来了",)),
    Variant("ind_ignores_period", ind("    i = torch.arange(period, n)\n"
                                      "    return attn[..., i, i - 1].mean(dim=(1, 3))\n"),
            lose=I, words=("没有用 period",)),
    Variant("ind_future", ind("    return attn.diagonal(period - 1, -2, -1).mean(dim=(1, 3))\n"),
            lose=I, words=("符号反了",)),
    Variant("ind_mean_over_heads", ind("    i = torch.arange(period, n)\n"
                                       "    return attn[..., i, i - period + 1].mean(dim=(2, 3))\n"),
            lose=I, words=("平均的轴不对",)),
    Variant("ind_sum", ind("    i = torch.arange(period, n)\n"
                           "    return attn[..., i, i - period + 1].sum(dim=(1, 3))\n"),
            lose=I, words=("求的是和而不是平均",)),
    Variant("ind_block_mean", ind("    return attn[..., period:, :n - period + 1].mean(dim=(1, 3, 4))\n"),
            lose=I, words=("整块",)),
    Variant("ind_two_copies_only", ind("    i = torch.arange(period, min(n, 2 * period))\n"
                                       "    return attn[..., i, i - period + 1].mean(dim=(1, 3))\n"),
            lose=I, words=("重复不止一次",)),
    Variant("ind_no_valueerror", {"induction_score": '''def induction_score(attn, period):
    n = attn.shape[-1]
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''}, lose=I, words=("ValueError",)),
    # ablate_heads
    Variant("abl_hooks_left", abl(ABL_HEAD + HOOK + "    with torch.no_grad():\n        return model(x, y)[1].item()\n"),
            lose=A, words=("钩子没有移除",)),
    Variant("abl_weights_zeroed", abl('''def ablate_heads(model, heads, x, y):
    dh = model.config.d_model // model.config.n_head
    with torch.no_grad():
        for layer, head in heads:
            model.blocks[layer].attn.c_proj.weight[:, head * dh:(head + 1) * dh] = 0.0
        return model(x, y)[1].item()
'''), lose=A, words=("改了模型的权重",)),
    Variant("abl_position_axis", abl(ABL_OK.replace("output[:, head] = 0.0", "output[:, :, head] = 0.0")),
            lose=A, words=("去掉的是位置 h",)),
    Variant("abl_channel_axis", abl(ABL_OK.replace("output[:, head] = 0.0", "output[..., head] = 0.0")),
            lose=A, words=("第 h 个通道",)),
    Variant("abl_interleaved", abl(ABL_HEAD + '''    n_head = model.config.n_head
    for layer, head in heads:
        def drop(module, args, head=head):
            z = args[0].clone()
            z[..., head::n_head] = 0.0
            return (z,)
        handles.append(model.blocks[layer].attn.c_proj.register_forward_pre_hook(drop))
''' + RUN), lose=A, words=("交错",)),
    Variant("abl_every_layer", abl(ABL_OK.replace(
        "        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))\n",
        "        for block in model.blocks:\n"
        "            handles.append(block.attn.heads.register_forward_hook(zero_head))\n")),
            lose=A, words=("没有看层号",)),
    Variant("abl_pair_swapped", abl(ABL_OK.replace("    for layer, head in heads:\n", "    for head, layer in heads:\n")),
            lose=A, words=("顺序读反了",)),
    Variant("abl_late_binding", abl(ABL_OK.replace("def zero_head(module, inputs, output, head=head):",
                                                   "def zero_head(module, inputs, output):")),
            lose=A, words=("最后一个值",)),
    Variant("abl_first_pair_only", abl(ABL_OK.replace(
        "        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))\n",
        "        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))\n"
        "        break\n")), lose=A, words=("第一个头",)),
    Variant("abl_mean_ablation", abl(ABL_OK.replace("output[:, head] = 0.0",
                                                    "output[:, head] = output[:, head].mean(dim=(0, 1), keepdim=True)")),
            lose=A, words=("均值消融",)),
    Variant("abl_returns_difference", abl(ABL_OK.replace("    return loss.item()\n", '''    with torch.no_grad():
        full = model(x, y)[1]
    return (loss - full).item()
''')), lose=A, words=("损失的变化",)),
    Variant("abl_returns_tensor", abl(ABL_OK.replace("    return loss.item()\n", "    return loss\n")),
            lose=A, words=("float",)),
    Variant("abl_no_finally", abl(ABL_HEAD + HOOK + '''    with torch.no_grad():
        _, loss = model(x, y)
    for handle in handles:
        handle.remove()
    return loss.item()
'''), lose=A, words=("finally", "出错时钩子没有移除")),
    Variant("abl_hooks_on_attention_output", abl(ABL_OK.replace("model.blocks[layer].attn.heads.register_forward_hook",
                                                                "model.blocks[layer].attn.register_forward_hook")),
            lose=A, words=("整个注意力模块",)),
]

CORRECT = [
    Variant("ok_loops", {"prev_token_score": PREV + '''    L, B, H, n, _ = attn.shape
    total = torch.zeros(L, H, dtype=attn.dtype)
    for i in range(1, n):
        total = total + attn[:, :, :, i, i - 1].sum(dim=1)
    return total / (B * (n - 1))
''', "induction_score": IND + '''    rows = [attn[..., i, i - period + 1] for i in range(period, n)]
    return torch.stack(rows, dim=-1).mean(dim=-1).mean(dim=1)
''', "ablate_heads": ABL_HEAD.replace("    handles = []\n", "") + '''    handles = []
    try:
        for layer, head in heads:
            def zero_in_place(module, inputs, output, head=head):
                output[:, head] = 0
            handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_in_place))
        with torch.no_grad():
            loss = model(x, y)[1]
    finally:
        for hd in handles:
            hd.remove()
    return float(loss)
'''}),
    Variant("ok_einsum_masks", {"prev_token_score": PREV + '''    n = attn.shape[-1]
    mask = torch.diag(torch.ones(n - 1, dtype=attn.dtype), -1)          # 1 at (i, i-1)
    return torch.einsum("lbhij,ij->lh", attn, mask) / (attn.shape[1] * (n - 1))
''', "induction_score": '''def induction_score(attn, period):
    n = attn.shape[-1]
    if period <= 0 or period >= n:
        raise ValueError("no repeated half")
    mask = torch.zeros(n, n, dtype=attn.dtype)
    i = torch.arange(period, n)
    mask[i, i - period + 1] = 1.0
    return torch.einsum("lbhij,ij->lh", attn, mask) / (attn.shape[1] * (n - period))
''', "ablate_heads": '''def ablate_heads(model, heads, x, y):
    dh = model.config.d_model // model.config.n_head
    handles = []
    for layer, head in heads:
        keep = torch.ones(model.config.d_model)
        keep[head * dh:(head + 1) * dh] = 0.0
        handles.append(model.blocks[layer].attn.c_proj.register_forward_pre_hook(
            lambda module, args, keep=keep: (args[0] * keep,)))
    try:
        with torch.inference_mode():
            logits, loss = model(x, y)
    finally:
        for h in handles:
            h.remove()
    return loss.item()
'''}),
    Variant("ok_diagonals_float64", {"prev_token_score": PREV + '''    L, B, H, n, _ = attn.shape
    d = torch.diagonal(attn.double(), offset=-1, dim1=3, dim2=4)        # (L, B, H, n-1)
    return d.permute(0, 2, 1, 3).reshape(L, H, -1).mean(-1)
''', "induction_score": IND + '''    d = attn.double().diagonal(-(period - 1), -2, -1)   # starts at i = period - 1
    return d[..., 1:].mean(dim=(1, 3))
''', "ablate_heads": '''import functools


def _zero(module, inputs, output, head):
    out = output.clone()
    out[:, head] = 0.0
    return out


def ablate_heads(model, heads, x, y):
    by_layer = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    handles = []
    try:
        for layer, hs in by_layer.items():
            for head in hs:
                handles.append(model.blocks[layer].attn.heads.register_forward_hook(functools.partial(_zero, head=head)))
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        while handles:
            handles.pop().remove()
'''}),
    Variant("ok_gather_reshape", {"prev_token_score": PREV + '''    n = attn.shape[-1]
    rows = attn[..., 1:, :]                                            # queries 1 … n-1
    cols = torch.arange(n - 1).view(1, 1, 1, n - 1, 1).expand(*rows.shape[:-1], 1)
    picked = rows.gather(-1, cols).squeeze(-1)                         # (L, B, H, n-1)
    return picked.transpose(1, 2).flatten(2).mean(-1)
''', "induction_score": IND + '''    L, B, H = attn.shape[:3]
    total = attn.new_zeros(L, H)
    for b in range(B):
        for i in range(period, n):
            total += attn[:, b, :, i, i - period + 1]
    return total / (B * (n - period))
''', "ablate_heads": '''def ablate_heads(model, heads, x, y):
    H = model.config.n_head
    chosen = {}
    for layer, head in heads:
        chosen.setdefault(layer, set()).add(head)

    def make(hs):
        def pre(module, args):
            z = args[0]
            B, n, d = z.shape
            z = z.reshape(B, n, H, d // H).clone()
            z[:, :, sorted(hs)] = 0
            return (z.reshape(B, n, d),)
        return pre

    handles = [model.blocks[l].attn.c_proj.register_forward_pre_hook(make(hs)) for l, hs in chosen.items()]
    try:
        with torch.no_grad():
            loss = model(x, y)[1]
    finally:
        for h in handles:
            h.remove()
    return loss.item()
'''}),
]

# (the rule as the exercise states it, the check that enforces it, the wrong answer that breaks it)
RULES = [
    ("prev_token_score: returns (n_layer, n_head)", "check_prev_token_score: the shape, with B != n_head",
     "prev_keeps_batch"),
    ("prev_token_score: averaged over the batch (dim=1)", "check_prev_token_score: cases with B = n_head and "
     "n_layer = B", "prev_mean_over_heads"),
    ("prev_token_score: positions i = 1 … n−1, position 0 does not count", "check_prev_token_score: against the "
     "float64 loop reference", "prev_divides_by_n"),
    ("prev_token_score: the weight from position i to i − 1", "check_prev_token_score: against the reference and a "
     "hand-made previous-token head", "prev_main_diagonal"),
    ("prev_token_score: attn[l, b, h, i, j] is query i's weight on key j", "check_prev_token_score: against the "
     "reference", "prev_query_key_swapped"),
    ("prev_token_score: the mean, a perfect head scores 1", "check_prev_token_score: the hand-made head scores 1",
     "prev_sum"),
    ("prev_token_score: every position up to n − 1", "check_prev_token_score: against the reference",
     "prev_loop_drops_last"),
    ("induction_score: the weight from i to i − period + 1", "check_induction_score: against the float64 loop "
     "reference", "ind_earlier_occurrence"),
    ("induction_score: positions i = period … n − 1 only", "check_induction_score: against the reference",
     "ind_whole_diagonal"),
    ("induction_score: a sequence may repeat more than once", "check_induction_score: n = 3·period",
     "ind_two_copies_only"),
    ("induction_score: averaged over the batch", "check_induction_score: against the reference",
     "ind_mean_over_heads"),
    ("induction_score: a mean, not a sum", "check_induction_score: against the reference", "ind_sum"),
    ("induction_score: ValueError when period is not between 1 and n − 1", "check_induction_score: period = 0, n, "
     "n + 3", "ind_no_valueerror"),
    ("ablate_heads: zero the heads' outputs (zero ablation)", "check_ablate_heads: against zeroed W_O columns in "
     "float64", "abl_mean_ablation"),
    ("ablate_heads: return a Python float with .item()", "check_ablate_heads: the type of the result",
     "abl_returns_tensor"),
    ("ablate_heads: the ablated loss itself", "check_ablate_heads: against the reference", "abl_returns_difference"),
    ("ablate_heads: hooks on model.blocks[layer].attn.heads", "check_ablate_heads: against the reference",
     "abl_hooks_on_attention_output"),
    ("ablate_heads: head h is output[:, h] of (B, n_head, n, d_head)", "check_ablate_heads: against the reference",
     "abl_position_axis"),
    ("ablate_heads: heads is a list of (layer, head) pairs", "check_ablate_heads: pairs with layer != head",
     "abl_pair_swapped"),
    ("ablate_heads: each head removed in its own layer only", "check_ablate_heads: against the reference",
     "abl_every_layer"),
    ("ablate_heads: remove the hooks with handle.remove() when done", "check_ablate_heads: no hook left and the full "
     "loss unchanged afterwards", "abl_hooks_left"),
    ("ablate_heads: remove them in a finally block, even after an error", "check_ablate_heads: a sequence longer "
     "than n_ctx makes the model raise; no hook may be left", "abl_no_finally"),
    ("ablate_heads: do not change the model's weights", "check_ablate_heads: the state dict compared after the call",
     "abl_weights_zeroed"),
    ("ablate_heads: a hook in a loop reads the loop variable when it runs", "check_ablate_heads: two heads in one "
     "layer", "abl_late_binding"),
]


WIDGET = dict(cell="inside.head_explorer(model", labels=("层", "头", "文本", "前一个 token 得分"), ipywidgets=True,
              keep=("inside.Config()", "inside.train_toy("), edits={"TOY_STEPS = 1000": "TOY_STEPS = 100"})
