"""Known wrong answers (and correct variants) for ch02_causal_mask.

Each wrong answer must lose the points of the named test cells and its
feedback must name the bug in plain words (the zh build is graded here)."""
from harness import Variant

MASK_HEAD = "def causal_mask(n, device=None):\n"
APPLY_HEAD = "def apply_mask(scores, mask):\n"
ATT_HEAD = "def causal_self_attention(x, w_q, w_k, w_v):\n"


def mask(body: str) -> dict:
    return {"causal_mask": MASK_HEAD + body}


def apply(body: str) -> dict:
    return {"apply_mask": APPLY_HEAD + body}


def att(body: str) -> dict:
    return {"attention": ATT_HEAD + body}


ATT_OK = """    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = apply_mask(s, causal_mask(x.shape[-2], device=x.device))
    w = torch.softmax(s, dim=-1)
    return w @ v, w
"""

BUGS = [
    Variant("diagonal_masked", mask("    return torch.ones(n, n, dtype=torch.bool, device=device).tril(diagonal=-1)\n"),
            lose=("test_causal_mask",), words=("对角线也被遮住了",),
            said={"test_attention": ("用正确的 causal_mask 代替你的之后，这一题是对的", "练习 1 还需要修改")},
            breaks=("mask-j-le-i",)),
    Variant("anti_causal", mask("    return torch.ones(n, n, dtype=torch.bool, device=device).triu()\n"),
            lose=("test_causal_mask",), words=("上三角", "看未来"),
            said={"test_attention": ("用正确的 causal_mask 代替你的之后，这一题是对的",)},
            breaks=("mask-j-le-i",)),
    Variant("mask_inverted", apply("    return scores.masked_fill(mask, float('-inf'))\n"),
            lose=("test_apply_mask",), words=("掩码的含义反了",),
            breaks=("apply-unchanged",)),
    Variant("zero_fill", apply("    return scores.masked_fill(~mask, 0.0)\n"),
            lose=("test_apply_mask",), words=("设成了 0 而不是 −∞",),
            breaks=("apply-neg-inf",)),
    Variant("apply_in_place", apply("    scores.masked_fill_(~mask, float('-inf'))\n    return scores\n"),
            lose=("test_apply_mask",), words=("改写了传入的 scores", "新张量"),
            said={"test_attention": ("用正确的 apply_mask 代替你的之后，这一题是对的", "练习 2 还需要修改")},
            breaks=("apply-new",)),
    Variant("apply_index_no_broadcast", apply("    out = scores.clone()\n    out[~mask] = float('-inf')\n    return out\n"),
            lose=("test_apply_mask",), words=("不会广播", "expand_as"),
            said={"test_attention": ("用正确的 apply_mask 代替你的之后，这一题是对的", "练习 2 还需要修改")},
            breaks=("apply-broadcast",)),
    Variant("apply_float32", apply("    scores = scores.float()                 # make sure -inf fits\n"
                                   "    return scores.masked_fill(~mask, float('-inf'))\n"),
            lose=("test_apply_mask",), words=("dtype", "torch.float64"),
            breaks=("apply-dtype",)),
    Variant("mask_ignores_device", mask("    return torch.ones(n, n, dtype=torch.bool).tril()\n"),
            lose=("test_causal_mask",), words=("device",),
            breaks=("mask-device",)),
    Variant("masked_fill_result_dropped", apply("    scores.masked_fill(~mask, float('-inf'))\n    return scores\n"),
            lose=("test_apply_mask",), words=("masked_fill 不是原地操作",),
            breaks=("apply-neg-inf",)),
    Variant("mask_after_softmax", att("""    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s, dim=-1)
    w = w.masked_fill(~causal_mask(x.shape[-2]), 0.0)
    return w @ v, w
"""), lose=("test_attention",), words=("softmax 之后",),
            breaks=("csa-mask",)),
    Variant("mask_ignored", att("""    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, w
"""), lose=("test_attention",), words=("没有用因果掩码", "未来"),
            breaks=("csa-mask",)),
    Variant("no_scaling", att(ATT_OK.replace(" / math.sqrt(q.shape[-1])", "")),
            lose=("test_attention",), words=("没有除以 √d_k",),
            breaks=("csa-scale",)),
    Variant("float_mask_as_index", {**mask("    return torch.tril(torch.ones(n, n, device=device))\n"),
                                    **apply("    out = scores.clone()\n    out[~mask.expand_as(out)] = float('-inf')\n"
                                            "    return out\n")},
            lose=("test_causal_mask",), words=("掩码是浮点数",),
            said={"test_attention": ("用正确的 causal_mask 代替你的之后，这一题是对的", "练习 1 还需要修改")},
            breaks=("mask-bool",)),
    Variant("global_mean_leak", att("""    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s - s.mean(dim=(-2, -1), keepdim=True)          # 'centre' the scores: uses every position
    w = torch.softmax(apply_mask(s, causal_mask(x.shape[-2])), dim=-1)
    return w @ v, w
"""), lose=("test_attention",), words=("因果性", "逐位"),
            breaks=("csa-causal-bits",)),
    Variant("uses_sdpa", att("""    import torch.nn.functional as F
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(apply_mask(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), causal_mask(x.shape[-2])), -1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True), w
"""), lose=("test_attention",), words=("scaled_dot_product_attention",),
            breaks=("csa-no-sdpa",)),
    # each breaks one rule the exercises state, and is named by what the code does
    Variant("mask_nanogpt_view", mask("    return torch.tril(torch.ones(n, n, dtype=torch.bool, device=device)).view(1, 1, n, n)\n"),
            lose=("test_causal_mask",), words=("多了前面的维度",), breaks=("mask-shape",),
            said={"test_attention": ("用正确的 causal_mask 代替你的之后，这一题是对的", "练习 1 还需要修改")}),
    Variant("returns_weights_first", att(ATT_OK.replace("return w @ v, w", "return w, w @ v")),
            lose=("test_attention",), words=("返回的顺序反了",), breaks=("csa-returns",)),
    Variant("n_from_shape_1", att(ATT_OK.replace("x.shape[-2]", "x.size(1)")),
            lose=("test_attention",), words=("恰好一个批量维",), breaks=("csa-batch",)),
    Variant("projection_transposed", att(ATT_OK.replace("x @ w_q, x @ w_k, x @ w_v", "x @ w_q.T, x @ w_k.T, x @ w_v.T")),
            lose=("test_attention",), words=("投影写反了",), breaks=("csa-proj",)),
    Variant("scaled_by_sqrt_d", att(ATT_OK.replace("math.sqrt(q.shape[-1])", "math.sqrt(x.shape[-1])")),
            lose=("test_attention",), words=("√d_k",), breaks=("csa-scale",)),
    Variant("out_from_x", att(ATT_OK.replace("return w @ v, w", "return w @ x, w")),
            lose=("test_attention",), words=("乘的是输入 x",), breaks=("csa-out",)),
    Variant("wrong_choice", {"mask_off": "mask_off_choice = 'A'\nn_zeros_mask_on = 66\nn_zeros_mask_off = 0\n"},
            lose=("test_mask_off",), words=("选项 A 不对",)),
    Variant("zeros_with_diagonal", {"mask_off": "mask_off_choice = 'B'\nn_zeros_mask_on = 78\nn_zeros_mask_off = 0\n"},
            lose=("test_mask_off",), words=("n_zeros_mask_on", "n(n−1)/2")),
    Variant("uses_sdpa_alias", att("""    from torch.nn.functional import scaled_dot_product_attention as attend
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.softmax(apply_mask(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), causal_mask(x.shape[-2])), -1)
    return attend(q, k, v, is_causal=True), w
"""), lose=("test_attention",), words=("从零实现", "scaled_dot_product_attention"),
            breaks=("csa-no-sdpa",)),
    # an outside audit: wrong answers breaking a stated rule that once kept full marks
    Variant("mask_built_once_at_64", {"causal_mask": "_CAUSAL = torch.ones(64, 64, dtype=torch.bool).tril()   # built once\n\n\n"
                                      + MASK_HEAD + "    return _CAUSAL[:n, :n].to(device)\n"},
            lose=("test_causal_mask",), words=("固定大小", "任何 n"), breaks=("mask-shape",)),
    Variant("mask_default_device_cpu", mask("    return torch.ones(n, n, dtype=torch.bool, device=device or 'cpu').tril()\n"),
            lose=("test_causal_mask",), words=("默认设备",), breaks=("mask-device",)),
    Variant("attention_mask_sliced_from_64", att(ATT_OK.replace("causal_mask(x.shape[-2], device=x.device)",
                                                                "causal_mask(64, device=x.device)[:x.shape[-2], :x.shape[-2]]")),
            lose=("test_attention",), words=("固定长度",), breaks=("csa-any-n",)),
    Variant("attention_weights_float32", att("""    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).float()      # softmax in float32
    s = apply_mask(s, causal_mask(x.shape[-2], device=x.device))
    w = torch.softmax(s, dim=-1)
    return w.to(v.dtype) @ v, w
"""), lose=("test_attention",), words=("dtype", "float64"), breaks=("csa-dtype",)),
    # a second way to break each rule that had one breaking case
    Variant("apply_mask_reshaped_to_scores", apply("    return scores.masked_fill(~mask.view_as(scores), float('-inf'))\n"),
            lose=("test_apply_mask",), words=("广播",), breaks=("apply-broadcast",)),
    Variant("apply_where_float32_fill", apply("    return torch.where(mask, scores, torch.full(scores.shape, float('-inf')))\n"),
            lose=("test_apply_mask",), words=("dtype", "float16"), breaks=("apply-dtype",)),
    Variant("apply_minus_1e9_in_half", apply("    return scores.masked_fill(~mask, -1e9)\n"),
            lose=("test_apply_mask",), words=("float16", "65504"), breaks=("apply-dtype",)),
    Variant("apply_index_in_place", apply("    scores[~mask.expand_as(scores)] = float('-inf')\n    return scores\n"),
            lose=("test_apply_mask",), words=("改写了传入的 scores",), breaks=("apply-new",)),
    Variant("apply_shifts_by_row_max", apply("    scores = scores - scores.amax(dim=-1, keepdim=True)   # for a stable softmax\n"
                                             "    return scores.masked_fill(~mask, float('-inf'))\n"),
            lose=("test_apply_mask",), words=("减去了每行的最大值",), breaks=("apply-unchanged",)),
    Variant("attention_mask_for_five_tokens", att(ATT_OK.replace("causal_mask(x.shape[-2], device=x.device)",
                                                                 "causal_mask(5, device=x.device)")),
            lose=("test_attention",), words=("固定长度",), breaks=("csa-any-n",)),
    Variant("attention_transpose_1_2", att(ATT_OK.replace("k.transpose(-2, -1)", "k.transpose(1, 2)")),
            lose=("test_attention",), words=("transpose(-2, -1)",), breaks=("csa-batch",)),
    Variant("attention_global_max_shift", att(ATT_OK.replace(
        "    s = apply_mask(", "    s = s - s.amax(dim=(-2, -1), keepdim=True)   # keep exp small\n    s = apply_mask(")),
            lose=("test_attention",), words=("因果性",), breaks=("csa-causal-bits",)),
    Variant("attention_weights_detached_float", att(ATT_OK.replace("return w @ v, w", "return w @ v, w.detach().float()")),
            lose=("test_attention",), words=("dtype", "float64"), breaks=("csa-dtype",)),
    Variant("attention_out_weights_transposed", att(ATT_OK.replace("return w @ v, w", "return w.transpose(-2, -1) @ v, w")),
            lose=("test_attention",), words=("转置",), breaks=("csa-out",)),
    Variant("attention_value_from_w_k", att(ATT_OK.replace("x @ w_q, x @ w_k, x @ w_v", "x @ w_q, x @ w_k, x @ w_k")),
            lose=("test_attention",), words=("w_k",), breaks=("csa-proj",)),
    Variant("attention_returns_out_only", att(ATT_OK.replace("return w @ v, w", "return w @ v")),
            lose=("test_attention",), words=("(out, weights)",), breaks=("csa-returns",)),
    Variant("mask_of_integers", mask("    return torch.ones(n, n, dtype=torch.long, device=device).tril()\n"),
            lose=("test_causal_mask",), words=("整数",), breaks=("mask-bool",)),
]

CORRECT = [
    # judged by the calls it makes, never by its words: comments and strings name the forbidden function
    Variant("ok_comments_name_forbidden_calls", att(
        '    """What F.scaled_dot_product_attention(q, k, v, is_causal=True) returns, written out."""\n'
        '    shortcut = "torch.nn.functional.scaled_dot_product_attention"   # a string, never called\n'
        + ATT_OK.replace("    w = torch.softmax(s, dim=-1)\n",
                         "    w = torch.softmax(s, dim=-1)   # allowed here; scaled_dot_product_attention is not\n"))),
    Variant("ok_tril_finfo_min", {**mask("    return torch.tril(torch.ones(n, n, device=device)).bool()\n"),
                                  **apply("    return scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)\n")}),
    Variant("ok_arange_where", {**mask("    i = torch.arange(n, device=device)\n    return i[None, :] <= i[:, None]\n"),
                                **apply("    return torch.where(mask, scores, torch.tensor(float('-inf'), dtype=scores.dtype))\n"),
                                **att("""    q = torch.einsum("...nd,de->...ne", x, w_q)
    k = torch.einsum("...nd,de->...ne", x, w_k)
    v = torch.einsum("...nd,de->...ne", x, w_v)
    s = torch.einsum("...id,...jd->...ij", q, k) * q.shape[-1] ** -0.5
    w = apply_mask(s, causal_mask(x.shape[-2])).softmax(dim=-1)
    return w @ v, w
""")}),
    Variant("ok_answer_spelling", {"mask_off": "mask_off_choice = ' b '\nn_zeros_mask_on = 66.0\nn_zeros_mask_off = 0\n"}),
    # written the way people write them in the wild: each keeps full marks
    Variant("ok_triu_not_float32_and_back", {
        **mask("    return ~torch.triu(torch.ones(n, n, dtype=torch.bool, device=device), diagonal=1)\n"),
        **apply("    return torch.where(mask, scores, torch.tensor(-1e9))   # a float32 constant\n"),
        **att("""    import torch.nn.functional as F
    dt = x.dtype
    x, w_q, w_k, w_v = x.float(), w_q.float(), w_k.float(), w_v.float()    # compute in float32, cast back
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    s = apply_mask(q @ k.mT / math.sqrt(k.shape[-1]), causal_mask(x.shape[-2], device=x.device))
    w = F.softmax(s, dim=-1)
    return (w @ v).to(dt), w.to(dt)
""")}),
    Variant("ok_loops", {
        **mask("    m = torch.zeros(n, n, dtype=torch.bool, device=device)\n    for i in range(n):\n"
               "        m[i, :i + 1] = True\n    return m\n"),
        **apply("    out = scores.clone()\n    out[~mask.expand_as(scores)] = float('-inf')\n    return out\n"),
        **att("""    n = x.shape[-2]
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    w = torch.zeros(*x.shape[:-1], n, dtype=x.dtype)
    for i in range(n):                       # one query at a time: it only ever sees keys 0..i
        s = q[..., i:i + 1, :] @ k[..., :i + 1, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        w[..., i:i + 1, :i + 1] = torch.softmax(s, dim=-1)
    return w @ v, w
""")}),
    Variant("ok_additive_mask_finfo", {
        **mask("    return torch.ones(n, n, device=device).tril() == 1\n"),
        **apply("    return scores.masked_fill(mask.logical_not(), torch.finfo(scores.dtype).min)\n"),
        **att("""    import numpy as np
    q, k, v = torch.matmul(x, w_q), torch.matmul(x, w_k), torch.matmul(x, w_v)
    bias = torch.zeros(x.shape[-2], x.shape[-2], dtype=x.dtype).masked_fill(~causal_mask(x.shape[-2]), float("-inf"))
    w = torch.softmax(q @ k.transpose(-1, -2) / np.sqrt(q.shape[-1]) + bias, dim=-1)
    return w @ v, w
""")}),
    Variant("mask_arange_to_device", mask("    i = torch.arange(n)\n    return (i[None, :] <= i[:, None]).to(device)\n")),
    Variant("apply_additive_mask", apply("    return scores + torch.where(mask, 0.0, float('-inf')).to(scores.dtype)\n")),
    Variant("apply_index_expanded_clone", apply("""    out = scores.clone()
    out[~mask.expand_as(scores)] = float("-inf")
    return out
""")),
    Variant("attention_one_row_at_a_time", att("""    q, k, v = x @ w_q, x @ w_k, x @ w_v
    n = x.shape[-2]
    outs, rows = [], []
    for i in range(n):                                   # query i sees keys 0..i
        s = q[..., i:i + 1, :] @ k[..., :i + 1, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        w = torch.softmax(s, dim=-1)
        outs.append(w @ v[..., :i + 1, :])
        rows.append(torch.nn.functional.pad(w, (0, n - i - 1)))
    return torch.cat(outs, dim=-2), torch.cat(rows, dim=-2)
""")),
    Variant("attention_float64_inside", att("""    xd = x.double()
    q, k, v = xd @ w_q.double(), xd @ w_k.double(), xd @ w_v.double()
    s = torch.einsum("...id,...jd->...ij", q, k) / q.shape[-1] ** 0.5
    s = apply_mask(s, causal_mask(x.shape[-2], x.device))
    w = torch.softmax(s, -1)
    return (w @ v).to(x.dtype), w.to(x.dtype)
""")),
]

WORDS_ARE_NOT_CALLS = ("ok_comments_name_forbidden_calls",)

# ------------------------------------------------------------------ browser test

WIDGET = dict(cell="calculator_view.step_through", labels=("◀ 上一步", "下一步 ▶", "因果掩码"))


def page_tables(view) -> list[dict]:
    """The calculator's matrices as the page shows them: caption, column
    headers, and each row's label and cell texts."""
    return view.evaluate("""v => [...v.querySelectorAll('table')].map(t => {
        const rows = [...t.querySelectorAll('tr')];
        return {name: t.querySelector('caption').textContent,
                cols: [...rows[0].querySelectorAll('th')].slice(1).map(e => e.textContent),
                rows: rows.slice(1).map(r => [r.querySelector('th').textContent,
                                              ...[...r.querySelectorAll('td')].map(e => e.textContent)])};
    })""")


def expected_tables(number: int, causal: bool) -> list[dict]:
    from helpers.ch02_causal_mask import calculator

    st = calculator.stage(number, causal)
    return [{"name": m.name, "cols": list(m.cols),
             "rows": [[label, *(calculator.fmt(v) for v in row)] for label, row in zip(m.rows, m.values)]}
            for m in (*st.matrices, *st.weights)]   # stage 1 also shows the fixed W_Q, W_K, W_V


def check_stage(view, number: int, causal: bool) -> list[dict]:
    from helpers.ch02_causal_mask import calculator

    st = calculator.stage(number, causal)
    state = "因果掩码：开" if causal else "因果掩码：关"
    flat = lambda s: " ".join(s.split())  # noqa: E731 (HTML collapses white space)
    text = flat(view.inner_text())
    assert flat(st.title) in text and f"({number}/{calculator.N_STAGES}, {state})" in text, text[:300]
    assert flat(st.formula) in text, text[:300]
    tables = page_tables(view)
    assert tables == expected_tables(number, causal), f"stage {number} (mask {'on' if causal else 'off'})"
    return tables


def check_widget(target, text):
    check_stage(target.locator(".course-calculator .widget-html-content"), 1, True)
