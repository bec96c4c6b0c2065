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
            lose=P, words=("位置 0 也算进了平均",), breaks=("prev-skip-0",)),
    Variant("prev_wraps_position_0", prev("    n = attn.shape[-1]\n    i = torch.arange(n)\n"
                                          "    return attn[..., i, i - 1].mean(dim=(1, 3))\n"),
            lose=P, words=("位置 0 也算进了平均",), breaks=("prev-skip-0",)),
    Variant("prev_main_diagonal", prev("    return attn.diagonal(0, -2, -1).mean(dim=(1, 3))\n"),
            lose=P, words=("位置 i 看自己",), breaks=("prev-i-to-i-1",)),
    Variant("prev_query_key_swapped", prev("    n = attn.shape[-1]\n    i = torch.arange(1, n)\n"
                                           "    return attn[..., i - 1, i].mean(dim=(1, 3))\n"),
            lose=P, words=("query 和 key 的位置反了",), breaks=("prev-query-key",)),
    Variant("prev_two_back", prev("    return attn.diagonal(-2, -2, -1).mean(dim=(1, 3))\n"),
            lose=P, words=("往前两个位置",), breaks=("prev-i-to-i-1",)),
    Variant("prev_mean_over_heads", prev("    return attn.diagonal(-1, -2, -1).mean(dim=(2, 3))\n"),
            lose=P, words=("平均的轴不对",), breaks=("prev-batch",)),
    Variant("prev_sum", prev("    return attn.diagonal(-1, -2, -1).sum(dim=(1, 3))\n"),
            lose=P, words=("求的是和而不是平均",), breaks=("prev-perfect-1",)),
    Variant("prev_block_mean", prev("    return attn[..., 1:, :-1].mean(dim=(1, 3, 4))\n"),
            lose=P, words=("整块",), breaks=("prev-i-to-i-1",)),
    Variant("prev_argmax", prev("    n = attn.shape[-1]\n    best = attn[..., 1:, :].argmax(dim=-1)\n"
                                "    return (best == torch.arange(n - 1)).float().mean(dim=(1, 3))\n"),
            lose=P, words=("最大权重落在 i−1",), breaks=("prev-i-to-i-1",)),
    Variant("prev_loop_drops_last", prev('''    L, B, H, n, _ = attn.shape
    total = torch.zeros(L, H)
    for i in range(1, n - 1):
        total += attn[:, :, :, i, i - 1].mean(dim=1)
    return total / (n - 2)
'''), lose=P, words=("最后一个位置",), breaks=("prev-positions",)),
    Variant("prev_keeps_batch", prev("    return attn.diagonal(-1, -2, -1).mean(dim=-1)\n"),
            lose=P, words=("batch 这一维",), breaks=("prev-shape",)),
    # induction_score
    Variant("ind_earlier_occurrence", ind("    i = torch.arange(period, n)\n"
                                          "    return attn[..., i, i - period].mean(dim=(1, 3))\n"),
            lose=I, words=("前一次出现的那个 token 本身",), breaks=("ind-offset",)),
    Variant("ind_two_after", ind("    i = torch.arange(period, n)\n"
                                 "    return attn[..., i, i - period + 2].mean(dim=(1, 3))\n"),
            lose=I, words=("偏了一格",), breaks=("ind-offset",)),
    Variant("ind_whole_diagonal", ind("    return attn.diagonal(-(period - 1), -2, -1).mean(dim=(1, 3))\n"),
            lose=I, words=("第一半的位置也算进来了",), breaks=("ind-positions",)),
    Variant("ind_ignores_period", ind("    i = torch.arange(period, n)\n"
                                      "    return attn[..., i, i - 1].mean(dim=(1, 3))\n"),
            lose=I, words=("没有用 period",), breaks=("ind-offset",)),
    Variant("ind_future", ind("    return attn.diagonal(period - 1, -2, -1).mean(dim=(1, 3))\n"),
            lose=I, words=("符号反了",), breaks=("ind-offset",)),
    Variant("ind_mean_over_heads", ind("    i = torch.arange(period, n)\n"
                                       "    return attn[..., i, i - period + 1].mean(dim=(2, 3))\n"),
            lose=I, words=("平均的轴不对",), breaks=("ind-batch",)),
    Variant("ind_sum", ind("    i = torch.arange(period, n)\n"
                           "    return attn[..., i, i - period + 1].sum(dim=(1, 3))\n"),
            lose=I, words=("求的是和而不是平均",), breaks=("ind-average",)),
    Variant("ind_block_mean", ind("    return attn[..., period:, :n - period + 1].mean(dim=(1, 3, 4))\n"),
            lose=I, words=("整块",), breaks=("ind-offset",)),
    Variant("ind_two_copies_only", ind("    i = torch.arange(period, min(n, 2 * period))\n"
                                       "    return attn[..., i, i - period + 1].mean(dim=(1, 3))\n"),
            lose=I, words=("重复不止一次",), breaks=("ind-repeats",)),
    Variant("ind_no_valueerror", {"induction_score": '''def induction_score(attn, period):
    n = attn.shape[-1]
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''}, lose=I, words=("ValueError",), breaks=("ind-valueerror",)),
    # ablate_heads
    Variant("abl_hooks_left", abl(ABL_HEAD + HOOK + "    with torch.no_grad():\n        return model(x, y)[1].item()\n"),
            lose=A, words=("钩子没有移除",), breaks=("abl-remove",)),
    Variant("abl_weights_zeroed", abl('''def ablate_heads(model, heads, x, y):
    dh = model.config.d_model // model.config.n_head
    with torch.no_grad():
        for layer, head in heads:
            model.blocks[layer].attn.c_proj.weight[:, head * dh:(head + 1) * dh] = 0.0
        return model(x, y)[1].item()
'''), lose=A, words=("改了模型的权重",), breaks=("abl-weights",)),
    Variant("abl_position_axis", abl(ABL_OK.replace("output[:, head] = 0.0", "output[:, :, head] = 0.0")),
            lose=A, words=("去掉的是位置 h",), breaks=("abl-head-index",)),
    Variant("abl_channel_axis", abl(ABL_OK.replace("output[:, head] = 0.0", "output[..., head] = 0.0")),
            lose=A, words=("第 h 个通道",), breaks=("abl-head-index",)),
    Variant("abl_interleaved", abl(ABL_HEAD + '''    n_head = model.config.n_head
    for layer, head in heads:
        def drop(module, args, head=head):
            z = args[0].clone()
            z[..., head::n_head] = 0.0
            return (z,)
        handles.append(model.blocks[layer].attn.c_proj.register_forward_pre_hook(drop))
''' + RUN), lose=A, words=("交错",), breaks=("abl-head-index",)),
    Variant("abl_every_layer", abl(ABL_OK.replace(
        "        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))\n",
        "        for block in model.blocks:\n"
        "            handles.append(block.attn.heads.register_forward_hook(zero_head))\n")),
            lose=A, words=("没有看层号",), breaks=("abl-pairs",)),
    Variant("abl_pair_swapped", abl(ABL_OK.replace("    for layer, head in heads:\n", "    for head, layer in heads:\n")),
            lose=A, words=("顺序读反了",), breaks=("abl-pairs",)),
    Variant("abl_late_binding", abl(ABL_OK.replace("def zero_head(module, inputs, output, head=head):",
                                                   "def zero_head(module, inputs, output):")),
            lose=A, words=("最后一个值",)),
    Variant("abl_first_pair_only", abl(ABL_OK.replace(
        "        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))\n",
        "        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))\n"
        "        break\n")), lose=A, words=("第一个头",), breaks=("abl-pairs",)),
    Variant("abl_mean_ablation", abl(ABL_OK.replace("output[:, head] = 0.0",
                                                    "output[:, head] = output[:, head].mean(dim=(0, 1), keepdim=True)")),
            lose=A, words=("均值消融",), breaks=("abl-zero",)),
    Variant("abl_returns_difference", abl(ABL_OK.replace("    return loss.item()\n", '''    with torch.no_grad():
        full = model(x, y)[1]
    return (loss - full).item()
''')), lose=A, words=("损失的变化",), breaks=("abl-loss",)),
    Variant("abl_returns_tensor", abl(ABL_OK.replace("    return loss.item()\n", "    return loss\n")),
            lose=A, words=("float",), breaks=("abl-float",)),
    Variant("abl_no_finally", abl(ABL_HEAD + HOOK + '''    with torch.no_grad():
        _, loss = model(x, y)
    for handle in handles:
        handle.remove()
    return loss.item()
'''), lose=A, words=("finally", "出错时钩子没有移除"), breaks=("abl-finally",)),
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

# The rule ledger (notebooks/ch09_inside_gpt.md marks the rules): wrong answers that break one stated rule each,
# and mistakes seen in answers written apart from this catalogue (bench/wild), the way students write them.
BUGS += [
    Variant("prev_diagonal_without_dims", prev("    return attn.diagonal(-1).mean(dim=(1, 3))\n"),
            lose=P, words=("不写 dim1、dim2", "dim1=-2, dim2=-1")),
    Variant("prev_numpy_round_trip", prev('''    import numpy as np
    a = attn.detach().numpy()
    n = a.shape[-1]
    vals = np.stack([a[..., i, i - 1] for i in range(1, n)], axis=-1)
    return vals.mean(axis=(1, 3))
'''), lose=P, words=("返回的不是 torch.Tensor", "numpy")),
    Variant("ind_last_layer_only", ind("    i = torch.arange(period, n)\n"
                                       "    return attn[-1][..., i, i - period + 1].mean(dim=(0, 2))\n"),
            lose=I, words=("没有层这一维",), breaks=("ind-shape",)),
    Variant("ind_assert_not_valueerror", {"induction_score": '''def induction_score(attn, period):
    n = attn.shape[-1]
    assert 1 <= period < n, "no repeat"
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''}, lose=I, words=("抛出的不是 ValueError", "raise ValueError"), breaks=("ind-valueerror",)),
    Variant("ind_period_zero_let_through", {"induction_score": '''def induction_score(attn, period):
    n = attn.shape[-1]
    if period < 0 or period >= n:
        raise ValueError(f"period={period} out of range")
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''}, lose=I, words=("不是 ValueError",), breaks=("ind-valueerror",)),
    Variant("abl_weights_zeroed_and_restored", abl('''def ablate_heads(model, heads, x, y):
    dh = model.config.d_model // model.config.n_head
    saved = {}
    try:
        with torch.no_grad():
            for layer, head in heads:
                w = model.blocks[layer].attn.c_proj.weight
                saved.setdefault(layer, w.clone())
                w[:, head * dh:(head + 1) * dh] = 0.0
            return model(x, y)[1].item()
    finally:
        with torch.no_grad():
            for layer, w in saved.items():
                model.blocks[layer].attn.c_proj.weight.copy_(w)
'''), lose=A, words=("没有挂任何钩子", "用钩子去掉头"), breaks=("abl-hooks",)),
    Variant("abl_calls_model_eval", abl(ABL_HEAD.replace("    handles = []\n", "    model.eval()\n    handles = []\n")
                                        + HOOK + RUN),
            lose=A, words=("model.training 从 True 变成了 False", "和原来一模一样"), breaks=("abl-unchanged",)),
    Variant("abl_turns_off_requires_grad", abl(ABL_HEAD.replace(
        "    handles = []\n", "    for p in model.parameters():\n        p.requires_grad_(False)          # no gradients needed\n"
        "    handles = []\n") + HOOK + RUN),
            lose=A, words=("requires_grad 变了",), breaks=("abl-unchanged",)),
    Variant("abl_halves_the_head", abl(ABL_OK.replace("output[:, head] = 0.0", "output[:, head] *= 0.5")),
            lose=A, words=("只乘了 0.5",), breaks=("abl-zero",)),
]

# The outside audit (issue 39): wrong answers for stated rules that kept full marks before the checks were extended
# (an eval-mode model left in training mode, one frozen parameter unfrozen, someone else's hook cleared away).
BUGS += [
    Variant("abl_eval_then_train", abl(ABL_HEAD.replace("    handles = []\n", "    model.eval()\n    handles = []\n")
                                       + HOOK + RUN.replace("            handle.remove()\n",
                                                            "            handle.remove()\n        model.train()\n")),
            lose=A, words=("model.training 从 False 变成了 True", "model.train()"), breaks=("abl-unchanged",)),
    Variant("abl_requires_grad_all_true_after", abl(ABL_HEAD.replace(
        "    handles = []\n", "    for p in model.parameters():\n        p.requires_grad_(False)\n    handles = []\n")
        + HOOK + RUN.replace("            handle.remove()\n", "            handle.remove()\n"
                             "        for p in model.parameters():\n            p.requires_grad_(True)\n")),
            lose=A, words=("requires_grad 变了", "恢复它自己原来的值"), breaks=("abl-unchanged",)),
    Variant("abl_clears_all_hooks", abl(ABL_HEAD + HOOK.replace(
        "        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))\n",
        "        model.blocks[layer].attn.heads.register_forward_hook(zero_head)\n") + RUN.replace(
        "        for handle in handles:\n            handle.remove()\n",
        "        for block in model.blocks:\n            block.attn.heads._forward_hooks.clear()\n")),
            lose=A, words=("_forward_hooks.clear()", "handle.remove()"), breaks=("abl-remove",)),
    Variant("abl_dict_one_head_per_layer", abl(ABL_HEAD + '''    chosen = {layer: head for layer, head in heads}
    for layer, head in chosen.items():
        def zero_head(module, inputs, output, head=head):
            output = output.clone()
            output[:, head] = 0.0
            return output
        handles.append(model.blocks[layer].attn.heads.register_forward_hook(zero_head))
''' + RUN), lose=A, words=("每一层只去掉了一个头",), breaks=("abl-pairs",)),
]

BUGS += [
    Variant("prev_transposed", prev("    return attn.diagonal(-1, -2, -1).mean(dim=(1, 3)).T\n"),
            lose=P, words=("层和头的顺序反了",), breaks=("prev-shape",)),
]

# Correct answers in more styles: hooks on a deep copy, the loss from the logits with F.cross_entropy, a head mask
# multiplied in, the mode saved and restored, sub-block diagonals.
CORRECT += [
    Variant("ok_copy_mask_own_loss", {
        "prev_token_score": PREV + "    return attn[..., 1:, :-1].diagonal(dim1=-2, dim2=-1).mean(dim=(1, 3))\n",
        "induction_score": IND + "    return attn[..., period:, 1:].diagonal(0, -2, -1).mean(dim=(1, 3))\n",
        "ablate_heads": """import copy


def ablate_heads(model, heads, x, y):
    model = copy.deepcopy(model)                     # hooks on a copy: the caller's model is never touched
    for layer, head in heads:
        def zero_head(module, inputs, output, head=head):
            mask = torch.ones(output.shape[1], 1, 1)
            mask[head] = 0
            return output * mask
        model.blocks[layer].attn.heads.register_forward_hook(zero_head)
    with torch.no_grad():
        logits, _ = model(x)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
"""}),
    Variant("ok_mode_saved_and_restored", abl(ABL_HEAD.replace("    handles = []\n", "    was = model.training\n"
                                                              "    model.eval()\n    handles = []\n")
                                              + HOOK + RUN.replace("            handle.remove()\n",
                                                                   "            handle.remove()\n        model.train(was)\n"))),
]

# Every rule of the exercises is broken by a wrong answer above; none is waived.
WAIVED: dict[str, str] = {}

WIDGET = dict(cell="inside.head_explorer(model", labels=("层", "头", "文本", "前一个 token 得分"), ipywidgets=True,
              keep=("config = Config()", "train_toy(model"), edits={"TOY_STEPS = 1000": "TOY_STEPS = 100"})

# A second way to break each rule of the ledger (issue 49): another realistic wrong answer per rule.
BUGS += [
    Variant("prev_keys_taken_as_rows", prev("    return attn.transpose(-2, -1).diagonal(-1, -2, -1).mean(dim=(1, 3))\n"),
            lose=P, words=("query 和 key 的位置反了",), breaks=("prev-query-key",)),
    Variant("prev_flattened", prev("    return attn.diagonal(-1, -2, -1).mean(dim=(1, 3)).flatten()\n"),
            lose=P, words=("压成了一维",), breaks=("prev-shape",)),
    Variant("prev_all_earlier_positions", prev("    return attn.tril(-1).sum(-1)[..., 1:].mean(dim=(1, 3))\n"),
            lose=P, words=("所有位置的权重都加起来了",), breaks=("prev-i-to-i-1",)),
    Variant("prev_first_sequence_only", prev("    return attn[:, 0].diagonal(-1, -2, -1).mean(dim=-1)\n"),
            lose=P, words=("第一条序列",), breaks=("prev-batch",)),
    Variant("prev_from_position_2", prev("    return attn.diagonal(-1, -2, -1)[..., 1:].mean(dim=(1, 3))\n"),
            lose=P, words=("i = 2…7",), breaks=("prev-positions",)),
    Variant("prev_pads_position_0", prev('''    d = attn.diagonal(-1, -2, -1)
    first = attn[..., :1, 0]                              # position 0 on itself, so that every position counts
    return torch.cat([first, d], dim=-1).mean(dim=(1, 3))
'''), lose=P, words=("位置 0 也算进了平均",), breaks=("prev-skip-0",)),
    Variant("prev_percent", prev("    return 100 * attn.diagonal(-1, -2, -1).mean(dim=(1, 3))\n"),
            lose=P, words=("0 和 1 之间",), breaks=("prev-perfect-1",)),
    Variant("ind_before_earlier_occurrence", ind("    i = torch.arange(period + 1, n)\n"
                                                 "    return attn[..., i, i - period - 1].mean(dim=(1, 3))\n"),
            lose=I, words=("你的结果正好是",), breaks=("ind-offset",)),
    Variant("ind_transposed", ind("    i = torch.arange(period, n)\n"
                                  "    return attn[..., i, i - period + 1].mean(dim=(1, 3)).T\n"),
            lose=I, words=("层和头的顺序反了",), breaks=("ind-shape",)),
    Variant("ind_first_sequence_only", ind("    i = torch.arange(period, n)\n"
                                           "    return attn[:, 0, :, i, i - period + 1].mean(dim=-1)\n"),
            lose=I, words=("第一条序列",), breaks=("ind-batch",)),
    Variant("ind_skips_first_of_repeat", ind("    i = torch.arange(period + 1, n)\n"
                                             "    return attn[..., i, i - period + 1].mean(dim=(1, 3))\n"),
            lose=I, words=("在 i = 5…7 上的平均",), breaks=("ind-positions",)),
    Variant("ind_divides_by_n", ind("    i = torch.arange(period, n)\n"
                                    "    return attn[..., i, i - period + 1].sum(dim=-1).mean(dim=1) / n\n"),
            lose=I, words=("平均要除以",), breaks=("ind-average",)),
    Variant("ind_assumes_two_copies", ind("    half = n // 2                                  # the block, then its copy\n"
                                          "    i = torch.arange(period, min(n, period + half))\n"
                                          "    return attn[..., i, i - period + 1].mean(dim=(1, 3))\n"),
            lose=I, words=("你的结果正好是",), breaks=("ind-repeats",)),
    Variant("ind_zeros_instead_of_error", {"induction_score": '''def induction_score(attn, period):
    n = attn.shape[-1]
    if not 1 <= period < n:
        return torch.zeros(attn.shape[0], attn.shape[2])          # no repeat: nothing to score
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''}, lose=I, words=("没有抛出 ValueError",), breaks=("ind-valueerror",)),
    Variant("abl_heads_as_one_pair", abl('''def ablate_heads(model, heads, x, y):
    layer, head = heads
    def zero_head(module, inputs, output):
        output = output.clone()
        output[:, head] = 0.0
        return output
    handle = model.blocks[layer].attn.heads.register_forward_hook(zero_head)
    try:
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        handle.remove()
'''), lose=A, words=("(layer, head) 二元组的列表",), breaks=("abl-pairs",)),
    Variant("abl_centres_the_head", abl(ABL_OK.replace("output[:, head] = 0.0",
                                                       "output[:, head] -= output[:, head].mean(dim=(0, 1), keepdim=True)")),
            lose=A, words=("只减去了它的平均值",), breaks=("abl-zero",)),
    Variant("abl_batch_axis", abl(ABL_OK.replace("output[:, head] = 0.0", "output[head] = 0.0")),
            lose=A, words=("去掉的是第 h 条序列",), breaks=("abl-head-index",)),
    Variant("abl_returns_perplexity", abl(ABL_OK.replace("    return loss.item()\n", "    return math.exp(loss.item())\n")),
            lose=A, words=("困惑度",), breaks=("abl-loss",)),
    Variant("abl_returns_numpy", abl(ABL_OK.replace("    return loss.item()\n", "    return loss.detach().numpy()\n")),
            lose=A, words=("Python float",), breaks=("abl-float",)),
    Variant("abl_zeroed_weights_on_a_copy", abl('''import copy


def ablate_heads(model, heads, x, y):
    m = copy.deepcopy(model)                           # the caller's model is never touched
    dh = m.config.d_model // m.config.n_head
    with torch.no_grad():
        for layer, head in heads:
            m.blocks[layer].attn.c_proj.weight[:, head * dh:(head + 1) * dh] = 0.0
        return m(x, y)[1].item()
'''), lose=A, words=("没有挂任何钩子",), breaks=("abl-hooks",)),
    Variant("abl_zeroes_value_weights", abl('''def ablate_heads(model, heads, x, y):
    d, dh = model.config.d_model, model.config.d_model // model.config.n_head
    with torch.no_grad():
        for layer, head in heads:
            rows = slice(2 * d + head * dh, 2 * d + (head + 1) * dh)      # head's value rows of c_attn
            model.blocks[layer].attn.c_attn.weight[rows] = 0.0
            model.blocks[layer].attn.c_attn.bias[rows] = 0.0
        return model(x, y)[1].item()
'''), lose=A, words=("改了模型的权重",), breaks=("abl-weights",)),
    Variant("abl_model_to_double", abl(ABL_HEAD.replace("    handles = []\n", "    model.double()                                   # more precise\n"
                                                        "    handles = []\n") + HOOK + RUN),
            lose=A, words=("转换成了别的 dtype",), breaks=("abl-unchanged",)),
    Variant("abl_removes_last_hook_only", abl(ABL_HEAD + HOOK + RUN.replace(
        "        for handle in handles:\n            handle.remove()\n", "        handles[-1].remove()\n")),
            lose=A, words=("钩子没有移除",), breaks=("abl-remove",)),
    Variant("abl_removes_in_else", abl(ABL_HEAD + HOOK + '''    try:
        with torch.no_grad():
            _, loss = model(x, y)
    except RuntimeError:
        raise
    else:
        for handle in handles:
            handle.remove()
    return loss.item()
'''), lose=A, words=("finally",), breaks=("abl-finally",)),
]
