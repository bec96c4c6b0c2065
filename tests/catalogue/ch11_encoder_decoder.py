"""Known wrong answers (and correct variants) for ch11_encoder_decoder.

Most wrong answers are small edits of the model solution, read from the built
source notebook, so they follow the chapter when it changes. Each must lose
the points of the named test cells and its feedback must name the bug in
plain words (the zh build is graded here)."""
from __future__ import annotations

from harness import Variant, solution_editor

edit = solution_editor("ch11_encoder_decoder")


PAD_RET = "torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]"
CROSS_MASK = 'scores = scores.masked_fill(~memory_mask[:, None, :], float("-inf"))'
ENC_ATTN = "key_padding_mask=blocked, need_weights=False"
CAUSAL = "torch.ones(n_t, n_t, dtype=torch.bool, device=y.device).triu(1)"
CROSS_CALL = "self.cross_attn(a, memory, memory, key_padding_mask=blocked, need_weights=False)"

# a wrong padding_mask costs exercise 1 alone: greedy_decode, which calls it, keeps its marks and says why
KEPT_PAD = {"test_greedy_decode": ("用正确的 padding_mask 代替你的之后，这一题是对的", "练习 1 还需要修改")}
GREEDY_OK_SRC = edit("greedy_decode")["greedy_decode"]

BUGS = [
    # padding_mask
    Variant("pad_inverted", edit("padding_mask", (PAD_RET, PAD_RET.replace(" < ", " >= "))),
            lose=("test_padding_mask",), words=("掩码反了",), said=KEPT_PAD, breaks=("pad-true-real",)),
    Variant("pad_off_by_one", edit("padding_mask", (PAD_RET, PAD_RET.replace(" < ", " <= "))),
            lose=("test_padding_mask",), words=("差一位",), said=KEPT_PAD, breaks=("pad-rule",)),
    Variant("pad_max_length", edit("padding_mask", ("torch.arange(n, ", "torch.arange(int(lengths.max()), ")),
            lose=("test_padding_mask",), words=("lengths.max()",), breaks=("pad-shape",)),
    Variant("pad_float", edit("padding_mask", (PAD_RET, f"({PAD_RET}).float()")),
            lose=("test_padding_mask",), words=("torch.bool",), said=KEPT_PAD, breaks=("pad-bool",)),
    Variant("pad_int", edit("padding_mask", (PAD_RET, f"({PAD_RET}).int()")),
            lose=("test_padding_mask",), words=("torch.bool", ".int()"), breaks=("pad-bool",)),
    Variant("pad_transposed", edit("padding_mask", (PAD_RET, f"({PAD_RET}).T")),
            lose=("test_padding_mask",), words=("形状转置了",), said=KEPT_PAD, breaks=("pad-shape",)),
    Variant("pad_left_padded", edit("padding_mask", (PAD_RET, "torch.arange(n)[None, :] >= n - lengths[:, None]")),
            lose=("test_padding_mask",), words=("左边",), said=KEPT_PAD, breaks=("pad-rule",)),
    Variant("pad_from_one", edit("padding_mask", (PAD_RET, "torch.arange(1, n + 1)[None, :] < lengths[:, None]")),
            lose=("test_padding_mask",), words=("最后一个真实 token",), said=KEPT_PAD, breaks=("pad-rule",)),
    Variant("pad_length_zero_crashes", {"padding_mask": '''def padding_mask(lengths, n):
    last = F.one_hot(lengths - 1, n)
    return last.flip(-1).cumsum(-1).flip(-1).bool()
'''}, lose=("test_padding_mask",), words=("长度是 0", "允许"), said=KEPT_PAD, breaks=("pad-rule",)),
    # cross_attention
    Variant("cross_queries_from_memory", edit("cross_attention", ("q, k, v = x @ w_q, memory @ w_k, memory @ w_v",
                                                                  "q, k, v = memory @ w_q, x @ w_k, x @ w_v")),
            lose=("test_cross_attention",), words=("query 和 key/value 的来源弄反了",), breaks=("cross-q-from-x",)),
    Variant("cross_mask_inverted", edit("cross_attention", (CROSS_MASK, CROSS_MASK.replace("~memory_mask", "memory_mask"))),
            lose=("test_cross_attention",), words=("memory_mask 用反了",), breaks=("cross-mask-true-real",)),
    Variant("cross_mask_on_queries", edit("cross_attention", (CROSS_MASK, CROSS_MASK.replace("[:, None, :]", "[:, :, None]"))),
            lose=("test_cross_attention",), words=("query（行）",), breaks=("cross-mask-keys",)),
    Variant("cross_mask_forgotten", edit("cross_attention", (
        "    if memory_mask is not None:\n        " + CROSS_MASK + "\n", "")),
            lose=("test_cross_attention",), words=("没有使用 memory_mask",), breaks=("cross-mask-keys",)),
    Variant("cross_mask_after_softmax", edit("cross_attention", (
        "    if memory_mask is not None:\n        " + CROSS_MASK + "\n    weights = torch.softmax(scores, dim=-1)\n",
        "    weights = torch.softmax(scores, dim=-1)\n    if memory_mask is not None:\n"
        "        weights = weights * memory_mask[:, None, :]\n")),
            lose=("test_cross_attention",), words=("softmax 之后",), breaks=("cross-mask-before-softmax",)),
    Variant("cross_scale_sqrt_d", edit("cross_attention", ("math.sqrt(q.shape[-1])", "math.sqrt(x.shape[-1])")),
            lose=("test_cross_attention",), words=("√d_k",), breaks=("cross-scale",)),
    Variant("cross_uses_sdpa", {"cross_attention": '''def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    m = None if memory_mask is None else memory_mask[:, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~m, float("-inf")), -1)
    return out, w
'''}, lose=("test_cross_attention",), words=("scaled_dot_product_attention",), breaks=("cross-no-sdpa",)),
    Variant("cross_no_scaling", edit("cross_attention", (" / math.sqrt(q.shape[-1])", "")),
            lose=("test_cross_attention",), words=("没有除以 √d_k",), breaks=("cross-scale",)),
    Variant("cross_softmax_query_axis", edit("cross_attention", ("torch.softmax(scores, dim=-1)",
                                                                 "torch.softmax(scores, dim=1)")),
            lose=("test_cross_attention",), words=("softmax 沿错误的维度",), breaks=("cross-softmax-last",)),
    Variant("cross_values_from_x", edit("cross_attention", ("memory @ w_v", "x @ w_v")),
            lose=("test_cross_attention",), words=("value 也取自 x",), breaks=("cross-kv-from-memory",)),
    Variant("cross_mask_none_crashes", edit("cross_attention", (
        "    if memory_mask is not None:\n        " + CROSS_MASK + "\n", "    " + CROSS_MASK + "\n")),
            lose=("test_cross_attention",), words=("memory_mask=None", "允许"), breaks=("cross-mask-none",)),
    Variant("cross_divided_by_d_k", edit("cross_attention", ("math.sqrt(q.shape[-1])", "q.shape[-1]")),
            lose=("test_cross_attention",), words=("不是 √d_k",), breaks=("cross-scale",)),
    # EncoderLayer
    Variant("enc_mask_not_inverted_for_torch", edit("encoder_layer", ("else ~src_mask", "else src_mask")),
            lose=("test_encoder_layer",), words=("填充掩码反了", "True 表示“屏蔽”"), breaks=("enc-mask-true-real",)),
    Variant("enc_causal_mask", edit("encoder_layer", (ENC_ATTN, ENC_ATTN + ",\n                               attn_mask="
                                                      "torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).triu(1)")),
            lose=("test_encoder_layer",), words=("编码器里加了因果掩码",), breaks=("enc-no-causal",)),
    Variant("enc_mask_forgotten", edit("encoder_layer", ("key_padding_mask=blocked, ", "")),
            lose=("test_encoder_layer",), words=("没有用 src_mask",), breaks=("enc-key-padding",)),
    Variant("enc_post_ln", edit("encoder_layer", (
        "        a = self.norm1(x)\n        x = x + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]\n"
        "        return x + self.ffn(self.norm2(x))",
        "        x = self.norm1(x + self.self_attn(x, x, x, key_padding_mask=blocked, need_weights=False)[0])\n"
        "        return self.norm2(x + self.ffn(x))\n")),
            lose=("test_encoder_layer",), words=("Post-LN",), breaks=("enc-prenorm",)),
    Variant("enc_no_ffn_residual", edit("encoder_layer", ("return x + self.ffn(self.norm2(x))", "return self.ffn(self.norm2(x))")),
            lose=("test_encoder_layer",), words=("FFN 周围没有残差",), breaks=("enc-ffn-residual",)),
    Variant("enc_no_attention_residual", edit("encoder_layer", ("x = x + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]", "x = self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]")),
            lose=("test_encoder_layer",), words=("自注意力周围没有残差",), breaks=("enc-prenorm",)),
    Variant("enc_residual_from_normed", edit("encoder_layer", ("x = x + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]", "x = a + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]")),
            lose=("test_encoder_layer",), words=("残差加的是 norm1(x)",), breaks=("enc-prenorm",)),
    Variant("enc_norm_reused", edit("encoder_layer", ("return x + self.ffn(self.norm2(x))", "return x + self.ffn(self.norm1(x))")),
            lose=("test_encoder_layer",), words=("norm1 用了两次",), breaks=("enc-ffn-residual",)),
    Variant("enc_relu", edit("encoder_layer", ("nn.GELU()", "nn.ReLU()")),
            lose=("test_encoder_layer",), words=("ReLU", "nn.GELU()"), breaks=("enc-gelu",)),
    Variant("enc_not_batch_first", edit("encoder_layer", ("nn.MultiheadAttention(d, h, batch_first=True)",
                                                          "nn.MultiheadAttention(d, h)")),
            lose=("test_encoder_layer",), words=("batch_first=True",), breaks=("enc-batch-first",)),
    Variant("enc_mha_without_bias", edit("encoder_layer", ("nn.MultiheadAttention(d, h, batch_first=True)",
                                                           "nn.MultiheadAttention(d, h, batch_first=True, bias=False)")),
            lose=("test_encoder_layer",), words=("参数个数", "bias=False"), breaks=("enc-modules",)),
    Variant("enc_dropout", edit("encoder_layer", ("nn.MultiheadAttention(d, h, batch_first=True)",
                                                  "nn.MultiheadAttention(d, h, dropout=0.1, batch_first=True)")),
            lose=("test_encoder_layer",), words=("dropout",), breaks=("enc-no-dropout",)),
    Variant("enc_mask_none_crashes", edit("encoder_layer", ("blocked = None if src_mask is None else ~src_mask",
                                                            "blocked = ~src_mask")),
            lose=("test_encoder_layer",), words=("src_mask=None", "允许"), breaks=("enc-mask-none",)),
    Variant("enc_norms_swapped", edit("encoder_layer", ("        a = self.norm1(x)\n", "        a = self.norm2(x)\n"), (
        "return x + self.ffn(self.norm2(x))", "return x + self.ffn(self.norm1(x))")),
            lose=("test_encoder_layer",), words=("self_attn 的输入是 norm2(x)",), breaks=("enc-prenorm",)),
    # DecoderLayer
    Variant("dec_no_causal_mask", edit("decoder_layer", ("attn_mask=future, ", "")),
            lose=("test_decoder_layer",), words=("没有因果掩码",), breaks=("dec-causal",)),
    Variant("dec_causal_mask_inverted", edit("decoder_layer", (CAUSAL, CAUSAL.replace("triu(1)", "tril()"))),
            lose=("test_decoder_layer",), words=("因果掩码反了",), breaks=("dec-causal",)),
    Variant("dec_memory_mask_forgotten", edit("decoder_layer", (CROSS_CALL, CROSS_CALL.replace("key_padding_mask=blocked, ", ""))),
            lose=("test_decoder_layer",), words=("没有用 memory_mask",), breaks=("dec-cross-mask",)),
    Variant("dec_queries_from_memory", edit("decoder_layer", (CROSS_CALL, CROSS_CALL.replace("(a, memory, memory,", "(memory, a, a,"))),
            lose=("test_decoder_layer",), words=("query 取自 memory",), breaks=("dec-cross-inputs",)),
    Variant("dec_memory_normalised", edit("decoder_layer", (CROSS_CALL, CROSS_CALL.replace(
        "(a, memory, memory,", "(a, self.norm2(memory), self.norm2(memory),"))),
            lose=("test_decoder_layer",), words=("memory 也过了 norm2",), breaks=("dec-cross-inputs",)),
    Variant("dec_cross_before_self", edit("decoder_layer", (
        "        a = self.norm1(y)\n        y = y + self.self_attn(a, a, a, attn_mask=future, need_weights=False)[0]\n"
        "        blocked = None if memory_mask is None else ~memory_mask\n"
        "        a = self.norm2(y)\n        y = y + " + CROSS_CALL + "[0]\n",
        "        blocked = None if memory_mask is None else ~memory_mask\n"
        "        a = self.norm2(y)\n        y = y + " + CROSS_CALL + "[0]\n"
        "        a = self.norm1(y)\n        y = y + self.self_attn(a, a, a, attn_mask=future, need_weights=False)[0]\n")),
            lose=("test_decoder_layer",), words=("交叉注意力放在了自注意力之前",), breaks=("dec-order",)),
    Variant("dec_causal_diagonal", edit("decoder_layer", (CAUSAL, CAUSAL.replace("triu(1)", "triu(0)"))),
            lose=("test_decoder_layer",), words=("对角线",), breaks=("dec-causal",)),
    Variant("dec_no_cross_residual", edit("decoder_layer", ("y = y + " + CROSS_CALL, "y = " + CROSS_CALL)),
            lose=("test_decoder_layer",), words=("交叉注意力周围没有残差",), breaks=("dec-residuals",)),
    Variant("dec_float_causal_mask", edit("decoder_layer", (CAUSAL, "torch.tril(torch.ones(n_t, n_t))")),
            lose=("test_decoder_layer",), words=("浮点", "triu(1)"), breaks=("dec-causal",)),
    # greedy_decode
    Variant("greedy_eos_never_stops", edit("greedy_decode", (
        "        nxt = torch.where(done, torch.full_like(nxt, eos), nxt)\n", ""), (
        "        if done.all():\n            break\n", "")),
            lose=("test_greedy_decode",), words=("遇到 <eos> 没有停",), breaks=("greedy-eos-after",)),
    Variant("greedy_stops_at_first", edit("greedy_decode", ("if done.all():", "if done.any():")),
            lose=("test_greedy_decode",), words=("done.all()",), breaks=("greedy-stop-all",)),
    Variant("greedy_no_feedback", edit("greedy_decode", ("model.decode(tgt, memory", "model.decode(tgt[:, :1], memory")),
            lose=("test_greedy_decode",), words=("没有把自己的输出喂回去",), breaks=("greedy-feed-back",)),
    Variant("greedy_first_position", edit("greedy_decode", ("[:, -1].argmax(-1)", "[:, 0].argmax(-1)")),
            lose=("test_greedy_decode",), words=("logits[:, -1]",), breaks=("greedy-last-argmax",)),
    Variant("greedy_returns_bos", edit("greedy_decode", ("return tgt[:, 1:]", "return tgt")),
            lose=("test_greedy_decode",), words=("<bos>",), breaks=("greedy-no-bos",)),
    Variant("greedy_ignores_lengths", edit("greedy_decode", (
        "src_mask = padding_mask(src_lengths, src.shape[1])", "src_mask = torch.ones_like(src, dtype=torch.bool)")),
            lose=("test_greedy_decode",), words=("没有用 src_lengths",), breaks=("greedy-src-mask",)),
    Variant("greedy_max_len_short", edit("greedy_decode", ("range(max_len)", "range(max_len - 1)")),
            lose=("test_greedy_decode",), words=("max_len 差一位",), breaks=("greedy-stop-all",)),
    Variant("greedy_max_len_long", edit("greedy_decode", ("range(max_len)", "range(max_len + 1)")),
            lose=("test_greedy_decode",), words=("max_len 差一位",), breaks=("greedy-max-len",)),
    Variant("greedy_argmax_positions", edit("greedy_decode", ("[:, -1].argmax(-1)", ".argmax(1)[:, -1]")),
            lose=("test_greedy_decode",), words=("argmax 沿错了轴",), breaks=("greedy-last-argmax",)),
    Variant("greedy_no_eos_padding", edit("greedy_decode", (
        "        nxt = torch.where(done, torch.full_like(nxt, eos), nxt)\n", "")),
            lose=("test_greedy_decode",), words=("没有一直填 eos",), breaks=("greedy-eos-after",)),
    Variant("greedy_stops_on_first_row", edit("greedy_decode", ("if done.all():", "if done[0]:")),
            lose=("test_greedy_decode",), words=("只看了第 0 个序列",), breaks=("greedy-stop-all",)),
    Variant("greedy_encodes_every_step", edit("greedy_decode", (
        "        nxt = model.decode(tgt, memory, src_mask)",
        "        memory = model.encode(src, src_mask)\n        nxt = model.decode(tgt, memory, src_mask)")),
            lose=("test_greedy_decode",), words=("编码器跑了不止一次",), breaks=("greedy-encode-once",)),
    Variant("greedy_float_tokens", edit("greedy_decode", ("torch.full((B, 1), bos, dtype=torch.long, device=src.device)",
                                                          "torch.full((B, 1), float(bos), device=src.device)"), (
        "tgt = torch.cat([tgt, nxt[:, None]], dim=1)", "tgt = torch.cat([tgt, nxt[:, None].float()], dim=1)"), (
        "model.decode(tgt, memory", "model.decode(tgt.long(), memory")),
            lose=("test_greedy_decode",), words=("LongTensor",), breaks=("greedy-long",)),
    # rules the ledger found unchecked or unnamed
    Variant("cross_returns_swapped", edit("cross_attention", ("return weights @ v, weights", "return weights, weights @ v")),
            lose=("test_cross_attention",), words=("返回值的顺序反了",), breaks=("cross-returns-pair",)),
    Variant("cross_returns_scores", edit("cross_attention", ("return weights @ v, weights", "return weights @ v, scores")),
            lose=("test_cross_attention",), words=("softmax 之前的分数",), breaks=("cross-weights-out",)),
    Variant("enc_attn_named_attn", edit("encoder_layer", ("self.self_attn = nn.MultiheadAttention", "self.attn = nn.MultiheadAttention"),
                                        ("self.self_attn(a, a, a,", "self.attn(a, a, a,")),
            lose=("test_encoder_layer",), words=("子模块的名字",), breaks=("enc-modules",)),
    Variant("enc_ffn_4d", edit("encoder_layer", ("nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d)",
                                                 "nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)")),
            lose=("test_encoder_layer",), words=("隐藏宽度是参数 d_ff",), breaks=("enc-ffn-width",)),
    Variant("enc_layer_scale", edit("encoder_layer", (
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n",
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n"
        "        self.gamma = nn.Parameter(torch.ones(d))             # LayerScale, as in CaiT\n"), (
        "return x + self.ffn(self.norm2(x))", "return x + self.gamma * self.ffn(self.norm2(x))")),
            lose=("test_encoder_layer",), words=("参数个数不对",), breaks=("enc-no-other-params",)),
    Variant("dec_cross_not_batch_first", edit("decoder_layer", (
        "self.cross_attn = nn.MultiheadAttention(d, h, batch_first=True)", "self.cross_attn = nn.MultiheadAttention(d, h)")),
            lose=("test_decoder_layer",), words=("batch_first=True",), breaks=("dec-modules",)),
    Variant("dec_mask_none_crashes", edit("decoder_layer", ("blocked = None if memory_mask is None else ~memory_mask",
                                                            "blocked = ~memory_mask")),
            lose=("test_decoder_layer",), words=("memory_mask=None", "允许"), breaks=("dec-mask-none",)),
    Variant("dec_mask_fixed_size", edit("decoder_layer", (
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n",
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n"
        "        self.register_buffer(\"future\", torch.ones(512, 512, dtype=torch.bool).triu(1))\n"), (
        CAUSAL, "self.future[:n_t, :n_t]")),
            lose=("test_decoder_layer",), words=("固定的大小",), breaks=("dec-mask-in-forward",)),
    Variant("dec_mask_cached_at_first_call", edit("decoder_layer", (
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n",
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n"
        "        self.future = None\n"), (
        "        future = " + CAUSAL + "   # torch: True = blocked\n",
        "        if self.future is None:\n"
        "            self.future = " + CAUSAL + "\n"
        "        future = self.future\n")),
            lose=("test_decoder_layer",), words=("固定的大小",), breaks=("dec-mask-in-forward",)),
    Variant("greedy_decode_mask_none", edit("greedy_decode", ("model.decode(tgt, memory, src_mask)", "model.decode(tgt, memory, None)")),
            lose=("test_greedy_decode",), words=("没有拿到源序列的填充掩码",), breaks=("greedy-src-mask",)),
    Variant("greedy_decode_mask_all_true", edit("greedy_decode", (
        "model.decode(tgt, memory, src_mask)", "model.decode(tgt, memory, torch.ones_like(src_mask))")),
            lose=("test_greedy_decode",), words=("没有拿到源序列的填充掩码",), breaks=("greedy-src-mask",)),
    Variant("greedy_starts_with_zeros", edit("greedy_decode", (
        "torch.full((B, 1), bos, dtype=torch.long, device=src.device)", "torch.zeros((B, 1), dtype=torch.long)")),
            lose=("test_greedy_decode",), words=("tgt 的开头不是 bos",), breaks=("greedy-start-bos",)),
    # each exercise graded on its own
    Variant("pad_not_done_greedy_right", {"padding_mask": "def padding_mask(lengths, n):\n    raise NotImplementedError()\n"},
            lose=("test_padding_mask",), words=("还没有实现",), said=KEPT_PAD),
    Variant("pad_wrong_greedy_wrong", {**edit("padding_mask", (PAD_RET, PAD_RET.replace(" < ", " <= "))),
                                       **edit("greedy_decode", ("return tgt[:, 1:]", "return tgt"))},
            lose=("test_padding_mask", "test_greedy_decode"),
            said={"test_greedy_decode": ("<bos>", "已经用正确的 padding_mask 代替了你的", "出在这一题本身")}),
    Variant("pad_wrong_greedy_not_done", {**edit("padding_mask", (PAD_RET, PAD_RET.replace(" < ", " <= "))),
                                          "greedy_decode": "def greedy_decode(model, src, src_lengths, max_len, bos, eos):\n"
                                                           "    raise NotImplementedError()\n"},
            lose=("test_padding_mask", "test_greedy_decode"), said={"test_greedy_decode": ("还没有实现",)}),
]

CORRECT = [
    # padding_mask
    Variant("ok_pad_gt", {"padding_mask": "def padding_mask(lengths, n):\n"
                                          "    return lengths.unsqueeze(1) > torch.arange(n).unsqueeze(0)\n"}),
    Variant("ok_pad_loop", {"padding_mask": '''def padding_mask(lengths, n):
    mask = torch.zeros(len(lengths), n, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        mask[b, :length] = True
    return mask
'''}),
    Variant("ok_pad_expand", {"padding_mask": "def padding_mask(lengths, n):\n"
                                              "    B = lengths.shape[0]\n"
                                              "    return torch.arange(n).expand(B, n) < lengths.view(-1, 1)\n"}),
    Variant("ok_pad_float_lengths", {"padding_mask": "def padding_mask(lengths, n):\n"
                                                     "    pos = torch.arange(n, dtype=torch.float32)\n"
                                                     "    return pos[None, :] < lengths.float()[:, None]\n"}),
    # cross_attention
    Variant("ok_cross_einsum", {"cross_attention": '''def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    q = torch.einsum("btd,dk->btk", x, w_q)
    k = torch.einsum("bsd,dk->bsk", memory, w_k)
    v = torch.einsum("bsd,dv->bsv", memory, w_v)
    s = torch.einsum("btk,bsk->bts", q, k) * q.shape[-1] ** -0.5
    if memory_mask is not None:
        s = s.masked_fill(memory_mask.unsqueeze(1) == 0, -1e9)
    w = F.softmax(s, dim=-1)
    return torch.einsum("bts,bsv->btv", w, v), w
'''}),
    Variant("ok_cross_where", {"cross_attention": '''def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = torch.matmul(x, w_q), torch.matmul(memory, w_k), torch.matmul(memory, w_v)
    s = torch.bmm(q, k.transpose(1, 2)) / q.size(-1) ** 0.5
    if memory_mask is not None:
        s = torch.where(memory_mask[:, None], s, torch.tensor(float("-inf"), dtype=s.dtype))
    w = s.softmax(-1)
    return torch.bmm(w, v), w
'''}),
    Variant("ok_cross_manual_softmax", {"cross_attention": '''def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    q = x @ w_q
    k, v = memory @ w_k, memory @ w_v
    s = q @ k.mT / math.sqrt(k.shape[-1])
    if memory_mask is not None:
        s = s + torch.zeros_like(s).masked_fill(~memory_mask.bool()[:, None, :], float("-inf"))
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    w = e / e.sum(dim=-1, keepdim=True)
    return w @ v, w
'''}),
    Variant("ok_cross_comments_name_the_library", {"cross_attention": '''def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    """By hand, what F.scaled_dot_product_attention(q, k, v, attn_mask=...) or an nn.MultiheadAttention
    with one head would give (neither is called here)."""
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])   # like scaled_dot_product_attention
    if memory_mask is not None:                                 # MultiheadAttention would want ~memory_mask
        scores = scores.masked_fill(~memory_mask[:, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
'''}),
    # EncoderLayer
    Variant("ok_enc_positional", edit("encoder_layer", (
        "x = x + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]",
        "out, _ = self.self_attn(a, a, a, blocked)\n        x = x + out"))),
    Variant("ok_enc_float_mask", edit("encoder_layer", (
        "blocked = None if src_mask is None else ~src_mask",
        "blocked = None if src_mask is None else torch.zeros(src_mask.shape, dtype=x.dtype)"
        ".masked_fill(src_mask == 0, float('-inf'))"))),
    Variant("ok_enc_named_ffn", edit("encoder_layer", (
        "self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))",
        "self.ffn = nn.Sequential()\n        self.ffn.add_module('fc', nn.Linear(d, d_ff))\n"
        "        self.ffn.add_module('act', nn.GELU())\n        self.ffn.add_module('proj', nn.Linear(d_ff, d))"), (
        "blocked = None if src_mask is None else ~src_mask", "blocked = None if src_mask is None else src_mask.logical_not()"))),
    # DecoderLayer
    Variant("ok_dec_float_causal", edit("decoder_layer", (
        CAUSAL, "torch.full((n_t, n_t), float('-inf'), dtype=y.dtype).triu(1)"))),
    Variant("ok_dec_square_subsequent", edit("decoder_layer", (
        CAUSAL, "nn.Transformer.generate_square_subsequent_mask(n_t, dtype=y.dtype)"))),
    Variant("ok_dec_tril_not", edit("decoder_layer", (
        CAUSAL, "~torch.tril(torch.ones(n_t, n_t, dtype=torch.bool))"), (
        "attn_mask=future, need_weights=False", "attn_mask=future, is_causal=True"), (
        "blocked = None if memory_mask is None else ~memory_mask",
        "blocked = None if memory_mask is None else memory_mask.eq(False)"))),
    # greedy_decode
    Variant("ok_greedy_full_length", {"greedy_decode": '''def greedy_decode(model, src, src_lengths, max_len, bos, eos):
    mask = padding_mask(src_lengths, src.size(1))
    memory = model.encode(src, mask)
    tgt = torch.full((src.size(0), 1), bos)
    for _ in range(max_len):
        nxt = model.decode(tgt, memory, mask).argmax(-1)[:, -1:]
        finished = (tgt[:, 1:] == eos).any(1, keepdim=True)
        tgt = torch.cat([tgt, nxt.masked_fill(finished, eos)], 1)
    return tgt[:, 1:]
'''}),
    Variant("ok_greedy_list", {"greedy_decode": '''def greedy_decode(model, src, src_lengths, max_len, bos, eos):
    mask = padding_mask(src_lengths, src.shape[1])
    memory = model.encode(src, mask)
    out = []
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    tgt = torch.tensor([[bos]] * src.shape[0])
    while len(out) < max_len and not bool(finished.all()):
        logits = model.decode(tgt, memory, mask)
        tok = torch.argmax(logits[:, -1, :], dim=-1)
        tok[finished] = eos
        finished |= tok == eos
        out.append(tok)
        tgt = torch.cat((tgt, tok.unsqueeze(1)), dim=1)
    return torch.stack(out, dim=1)
'''}),
    Variant("ok_greedy_python_loop", {"greedy_decode": '''def greedy_decode(model, src, src_lengths, max_len, bos, eos):
    mask = padding_mask(src_lengths, src.shape[1])
    memory = model.encode(src, mask)
    seqs = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    for step in range(max_len):
        last = model.decode(seqs, memory, mask)[:, -1]
        nxt = last.max(dim=-1).indices
        for b in range(src.shape[0]):
            if eos in seqs[b, 1:].tolist():
                nxt[b] = eos
        seqs = torch.cat([seqs, nxt.view(-1, 1)], dim=1)
        if all(eos in row[1:] for row in seqs.tolist()):
            break
    return seqs[:, 1:]
'''}),
]

WORDS_ARE_NOT_CALLS = ("ok_cross_comments_name_the_library",)

WIDGET = dict(cell="ed.explorer(", labels=("数字", "例子", "模型输出"),
              keep=("model = ed.Seq2Seq(",),
              edits={"TRAIN_STEPS = 160": "TRAIN_STEPS = 5"})


def check_widget(target, text):
    """The explorer starts at 1024: its line names the number, and a heatmap is drawn."""
    assert "1024 → 模型输出" in text, text
    assert target.locator("img").count() >= 1, "ch11: no heatmap in the widget"

# A second way to break each rule of the ledger (issue 49): another realistic wrong answer per rule.
SELF_ATTN = "x = x + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]"
DEC_SELF = "y = y + self.self_attn(a, a, a, attn_mask=future, need_weights=False)[0]"
BUGS += [
    Variant("pad_ready_for_attention", edit("padding_mask", (PAD_RET, f"({PAD_RET})[:, None, None, :]")),
            lose=("test_padding_mask",), words=("多了维度",), breaks=("pad-shape",)),
    Variant("pad_uint8", edit("padding_mask", (PAD_RET, f"({PAD_RET}).byte()")),
            lose=("test_padding_mask",), words=("torch.bool",), breaks=("pad-bool",)),
    Variant("pad_no_new_axes", edit("padding_mask", (PAD_RET, "torch.arange(n) < lengths")),
            lose=("test_padding_mask",), words=("各加一个维度",), breaks=("pad-rule",)),
    Variant("pad_torch_convention", edit("padding_mask", (PAD_RET, f"~({PAD_RET})   # True = blocked, as torch wants")),
            lose=("test_padding_mask",), words=("掩码反了",), breaks=("pad-true-real",)),
    Variant("cross_returns_out_only", edit("cross_attention", ("return weights @ v, weights", "return weights @ v")),
            lose=("test_cross_attention",), words=("(out, weights)",), breaks=("cross-returns-pair",)),
    Variant("cross_everything_from_memory", edit("cross_attention", ("q, k, v = x @ w_q, memory @ w_k, memory @ w_v",
                                                                     "q, k, v = memory @ w_q, memory @ w_k, memory @ w_v")),
            lose=("test_cross_attention",), words=("query 也取自 memory",), breaks=("cross-q-from-x",)),
    Variant("cross_is_self_attention", edit("cross_attention", ("q, k, v = x @ w_q, memory @ w_k, memory @ w_v",
                                                                "q, k, v = x @ w_q, x @ w_k, x @ w_v")),
            lose=("test_cross_attention",), words=("key 和 value 也取自 x",), breaks=("cross-kv-from-memory",)),
    Variant("cross_scaled_by_sqrt_d_v", edit("cross_attention", ("math.sqrt(q.shape[-1])", "math.sqrt(v.shape[-1])")),
            lose=("test_cross_attention",), words=("√d_v",), breaks=("cross-scale",)),
    Variant("cross_mask_where_the_wrong_way", edit("cross_attention", (CROSS_MASK,
            'scores = torch.where(memory_mask[:, None, :], float("-inf"), scores)')),
            lose=("test_cross_attention",), words=("memory_mask 用反了",), breaks=("cross-mask-true-real",)),
    Variant("cross_mask_any_crashes_on_none", edit("cross_attention", ("    if memory_mask is not None:\n",
                                                                       "    if memory_mask.any():\n")),
            lose=("test_cross_attention",), words=("memory_mask=None", "允许"), breaks=("cross-mask-none",)),
    Variant("cross_mask_rows_and_columns", edit("cross_attention", (CROSS_MASK,
            'scores = scores.masked_fill(~(memory_mask[:, :, None] & memory_mask[:, None, :]), float("-inf"))')),
            lose=("test_cross_attention",), words=("行和列都",), breaks=("cross-mask-keys",)),
    Variant("cross_mask_fills_zero", edit("cross_attention", (CROSS_MASK,
            "scores = scores.masked_fill(~memory_mask[:, None, :], 0.0)")),
            lose=("test_cross_attention",), words=("−∞",), breaks=("cross-mask-before-softmax",)),
    Variant("cross_softmax_batch_axis", edit("cross_attention", ("torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=0)")),
            lose=("test_cross_attention",), words=("softmax 沿错误的维度",), breaks=("cross-softmax-last",)),
    Variant("cross_out_from_raw_memory", edit("cross_attention", ("return weights @ v, weights", "return weights @ memory, weights")),
            lose=("test_cross_attention",), words=("没有经过 w_v",), breaks=("cross-weights-out",)),
    Variant("cross_sdpa_imported_under_another_name", {"cross_attention": '''from torch.nn.functional import scaled_dot_product_attention as attend


def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    m = None if memory_mask is None else memory_mask[:, None, :]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + (0 if m is None else (~m) * -1e9), -1)
    return attend(q, k, v, attn_mask=m), w
'''}, lose=("test_cross_attention",), words=("scaled_dot_product_attention",), breaks=("cross-no-sdpa",)),
    Variant("enc_norm_without_affine", edit("encoder_layer", ("self.norm1 = nn.LayerNorm(d)", "self.norm1 = nn.LayerNorm(d, elementwise_affine=False)")),
            lose=("test_encoder_layer",), words=("参数个数不对",), breaks=("enc-modules",)),
    Variant("enc_batch_first_false", edit("encoder_layer", ("nn.MultiheadAttention(d, h, batch_first=True)",
                                                            "nn.MultiheadAttention(d, h, batch_first=False)")),
            lose=("test_encoder_layer",), words=("batch_first=True",), breaks=("enc-batch-first",)),
    Variant("enc_gelu_tanh", edit("encoder_layer", ("nn.GELU()", 'nn.GELU(approximate="tanh")')),
            lose=("test_encoder_layer",), words=("激活函数不对",), breaks=("enc-gelu",)),
    Variant("enc_ffn_width_d", edit("encoder_layer", ("nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d)",
                                                      "nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)")),
            lose=("test_encoder_layer",), words=("隐藏宽度是参数 d_ff",), breaks=("enc-ffn-width",)),
    Variant("enc_dropout_in_ffn", edit("encoder_layer", ("nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d)",
                                                         "nn.Linear(d, d_ff), nn.GELU(), nn.Dropout(0.1), nn.Linear(d_ff, d)")),
            lose=("test_encoder_layer",), words=("dropout",), breaks=("enc-no-dropout",)),
    Variant("enc_learned_residual_weight", edit("encoder_layer", (
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n",
        "        self.ffn = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))\n"
        "        self.alpha = nn.Parameter(torch.ones(1))              # a learned residual weight\n"), (
        "return x + self.ffn(self.norm2(x))", "return x + self.alpha * self.ffn(self.norm2(x))")),
            lose=("test_encoder_layer",), words=("参数个数不对",), breaks=("enc-no-other-params",)),
    Variant("enc_mask_negated_twice", edit("encoder_layer", ("else ~src_mask", "else ~src_mask.logical_not()")),
            lose=("test_encoder_layer",), words=("填充掩码反了",), breaks=("enc-mask-true-real",)),
    Variant("enc_mask_any_crashes_on_none", edit("encoder_layer", ("blocked = None if src_mask is None else ~src_mask",
                                                                   "blocked = ~src_mask if src_mask.any() else None")),
            lose=("test_encoder_layer",), words=("src_mask=None", "允许"), breaks=("enc-mask-none",)),
    Variant("enc_norm_after_attention", edit("encoder_layer", (
        "        a = self.norm1(x)\n        " + SELF_ATTN + "\n",
        "        x = x + self.norm1(self.self_attn(x, x, x, key_padding_mask=blocked, need_weights=False)[0])\n")),
            lose=("test_encoder_layer",), words=("norm1 放在了自注意力之后",), breaks=("enc-prenorm",)),
    Variant("enc_padding_as_attn_mask", edit("encoder_layer", ("key_padding_mask=blocked, need_weights=False",
                                                               "attn_mask=blocked, need_weights=False")),
            lose=("test_encoder_layer",), words=("填充掩码传给了 attn_mask",), breaks=("enc-key-padding",)),
    Variant("enc_float_causal_mask", edit("encoder_layer", ("key_padding_mask=blocked, need_weights=False",
            "key_padding_mask=blocked, need_weights=False,\n"
            "                           attn_mask=torch.full((x.shape[1], x.shape[1]), float('-inf')).triu(1)")),
            lose=("test_encoder_layer",), words=("编码器里加了因果掩码",), breaks=("enc-no-causal",)),
    Variant("enc_ffn_residual_from_normed", edit("encoder_layer", ("        return x + self.ffn(self.norm2(x))",
                                                                   "        h = self.norm2(x)\n        return h + self.ffn(h)")),
            lose=("test_encoder_layer",), words=("残差加的是 norm2(x)",), breaks=("enc-ffn-residual",)),
    Variant("dec_cross_reuses_self_attn", edit("decoder_layer", (
        "        self.cross_attn = nn.MultiheadAttention(d, h, batch_first=True)\n", ""), (
        "self.cross_attn(a, memory, memory,", "self.self_attn(a, memory, memory,")),
            lose=("test_decoder_layer",), words=("子模块的名字",), breaks=("dec-modules",)),
    Variant("dec_mask_any_crashes_on_none", edit("decoder_layer", ("blocked = None if memory_mask is None else ~memory_mask",
                                                                   "blocked = ~memory_mask if memory_mask.any() else None")),
            lose=("test_decoder_layer",), words=("memory_mask=None", "允许"), breaks=("dec-mask-none",)),
    Variant("dec_is_causal_alone", edit("decoder_layer", ("attn_mask=future, need_weights=False", "is_causal=True, need_weights=False")),
            lose=("test_decoder_layer",), words=("is_causal=True 只是一个提示",), breaks=("dec-causal",)),
    Variant("dec_mask_of_64_sliced", edit("decoder_layer", (CAUSAL, "torch.ones(64, 64, dtype=torch.bool).triu(1)[:n_t, :n_t]")),
            lose=("test_decoder_layer",), words=("固定的大小",), breaks=("dec-mask-in-forward",)),
    Variant("dec_cross_reads_itself", edit("decoder_layer", (CROSS_CALL, CROSS_CALL.replace("(a, memory, memory,", "(a, a, a,")
                                                             .replace("key_padding_mask=blocked, ", ""))),
            lose=("test_decoder_layer",), words=("key 和 value 应是 memory",), breaks=("dec-cross-inputs",)),
    Variant("dec_memory_mask_not_negated", edit("decoder_layer", ("else ~memory_mask", "else memory_mask")),
            lose=("test_decoder_layer",), words=("memory_mask 用反了",), breaks=("dec-cross-mask",)),
    Variant("dec_ffn_before_cross", edit("decoder_layer", (
        "        a = self.norm2(y)\n        y = y + " + CROSS_CALL + "[0]\n        return y + self.ffn(self.norm3(y))",
        "        y = y + self.ffn(self.norm3(y))\n        a = self.norm2(y)\n        return y + " + CROSS_CALL + "[0]")),
            lose=("test_decoder_layer",), words=("FFN 放在了交叉注意力之前",), breaks=("dec-order",)),
    Variant("dec_no_self_residual", edit("decoder_layer", (DEC_SELF, DEC_SELF.replace("y = y + ", "y = "))),
            lose=("test_decoder_layer",), words=("自注意力周围没有残差",), breaks=("dec-residuals",)),
    Variant("greedy_returns_list", edit("greedy_decode", ("return tgt[:, 1:]", "return tgt[:, 1:].tolist()")),
            lose=("test_greedy_decode",), words=("LongTensor",), breaks=("greedy-long",)),
    Variant("greedy_one_step_too_many", edit("greedy_decode", ("for _ in range(max_len):", "for _ in range(1, max_len + 2):")),
            lose=("test_greedy_decode",), words=("max_len 差一位",), breaks=("greedy-max-len",)),
    Variant("greedy_drops_first_token", edit("greedy_decode", ("return tgt[:, 1:]", "return tgt[:, 2:]")),
            lose=("test_greedy_decode",), words=("第一个生成的 token",), breaks=("greedy-no-bos",)),
    Variant("greedy_fills_bos_after_eos", edit("greedy_decode", ("torch.full_like(nxt, eos), nxt)", "torch.full_like(nxt, bos), nxt)")),
            lose=("test_greedy_decode",), words=("没有一直填 eos",), breaks=("greedy-eos-after",)),
    Variant("greedy_while_short", {"greedy_decode": '''def greedy_decode(model, src, src_lengths, max_len, bos, eos):
    src_mask = padding_mask(src_lengths, src.shape[1])
    memory = model.encode(src, src_mask)
    tgt = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    while not done.all() and tgt.shape[1] < max_len:
        nxt = model.decode(tgt, memory, src_mask)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, eos), nxt)
        tgt = torch.cat([tgt, nxt[:, None]], dim=1)
        done = done | (nxt == eos)
    return tgt[:, 1:]
'''}, lose=("test_greedy_decode",), words=("max_len 差一位",), breaks=("greedy-stop-all",)),
    Variant("greedy_mask_from_pad_id", edit("greedy_decode", ("src_mask = padding_mask(src_lengths, src.shape[1])",
                                                              "src_mask = src != 0                                  # <pad> is 0")),
            lose=("test_greedy_decode",), words=("没有用 src_lengths",), breaks=("greedy-src-mask",)),
    Variant("greedy_encodes_again_at_the_end", edit("greedy_decode", ("    return tgt[:, 1:]",
                                                                      "    memory = model.encode(src, src_mask)        # (unused)\n"
                                                                      "    return tgt[:, 1:]")),
            lose=("test_greedy_decode",), words=("编码器跑了不止一次",), breaks=("greedy-encode-once",)),
    Variant("greedy_starts_with_eos", edit("greedy_decode", ("torch.full((B, 1), bos, dtype=torch.long", "torch.full((B, 1), eos, dtype=torch.long")),
            lose=("test_greedy_decode",), words=("tgt 的开头不是 bos",), breaks=("greedy-start-bos",)),
    Variant("greedy_feeds_last_token_only", edit("greedy_decode", ("model.decode(tgt, memory", "model.decode(tgt[:, -1:], memory")),
            lose=("test_greedy_decode",), words=("只把最后一个 token 喂给了解码器",), breaks=("greedy-feed-back",)),
    Variant("greedy_argmax_of_mean", edit("greedy_decode", ("[:, -1].argmax(-1)", ".mean(1).argmax(-1)")),
            lose=("test_greedy_decode",), words=("最后一个位置",), breaks=("greedy-last-argmax",)),
]
