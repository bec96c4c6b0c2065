"""Wrong answers to ch11_encoder_decoder written apart from the catalogue: padding
masks, cross-attention, torch's attention modules with the course's mask
convention, and greedy decoding, as people really get them wrong.
bench/diagnosis_rate.py measures how often the hidden checks name the mistake."""
from harness import Variant, solution_editor

edit = solution_editor("ch11_encoder_decoder")
M, C, E, D, G = (("test_padding_mask",), ("test_cross_attention",), ("test_encoder_layer",),
                 ("test_decoder_layer",), ("test_greedy_decode",))


def pad(body: str) -> dict:
    return {"padding_mask": "def padding_mask(lengths, n):\n" + body}


def cross(body: str) -> dict:
    return {"cross_attention": "def cross_attention(x, memory, w_q, w_k, w_v, memory_mask=None):\n" + body}


def greedy(body: str) -> dict:
    return {"greedy_decode": "def greedy_decode(model, src, src_lengths, max_len, bos, eos):\n" + body}


CROSS_OK = '''    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    s = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~memory_mask[:, None, :], float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w
'''

GREEDY_OK = '''    B = src.shape[0]
    mask = padding_mask(src_lengths, src.shape[1])
    memory = model.encode(src, mask)
    tgt = torch.full((B, 1), bos, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(tgt, memory, mask)[:, -1].argmax(-1)
        nxt[done] = eos
        tgt = torch.cat([tgt, nxt[:, None]], dim=1)
        done |= nxt == eos
        if done.all():
            break
    return tgt[:, 1:]
'''

WILD = [
    # ------------------------------------------------------------ padding_mask
    Variant("compare_without_new_axes", pad("    return torch.arange(n) < lengths\n"), lose=M),
    Variant("returns_long", pad("    return (torch.arange(n)[None, :] < lengths[:, None]).long()\n"), lose=M),
    Variant("python_lists", pad("    return [[j < int(L) for j in range(n)] for L in lengths]\n"), lose=M),
    Variant("float_ones_then_fill", pad('''    mask = torch.zeros(len(lengths), n)
    for b, L in enumerate(lengths):
        mask[b, :L] = 1
    return mask
'''), lose=M),
    Variant("from_one_to_n", pad("    return lengths[:, None] > torch.arange(1, n + 1)[None, :]\n"), lose=M),
    Variant("width_from_lengths", pad('''    width = int(lengths.max().item())
    return torch.arange(width)[None, :] < lengths[:, None]
'''), lose=M),
    # ------------------------------------------------------------ cross_attention
    Variant("no_none_check", cross(CROSS_OK), lose=C),
    Variant("mask_without_new_axis", cross(CROSS_OK.replace("~memory_mask[:, None, :]", "memory_mask == 0")
                                           .replace("    s = s.masked_fill", "    if memory_mask is not None:\n"
                                                    "        s = s.masked_fill")), lose=C),
    Variant("divides_by_d_k", cross(CROSS_OK.replace("math.sqrt(q.shape[-1])", "q.shape[-1]")
                                    .replace("    s = s.masked_fill", "    if memory_mask is not None:\n"
                                             "        s = s.masked_fill")), lose=C),
    Variant("returns_weights_first", cross(CROSS_OK.replace("return w @ v, w", "return w, w @ v")
                                           .replace("    s = s.masked_fill", "    if memory_mask is not None:\n"
                                                    "        s = s.masked_fill")), lose=C),
    Variant("values_with_w_k", cross(CROSS_OK.replace("memory @ w_v", "memory @ w_k")
                                     .replace("    s = s.masked_fill", "    if memory_mask is not None:\n"
                                              "        s = s.masked_fill")), lose=C),
    Variant("bmm_without_transpose", cross(CROSS_OK.replace("q @ k.transpose(1, 2)", "torch.bmm(q, k)")
                                           .replace("    s = s.masked_fill", "    if memory_mask is not None:\n"
                                                    "        s = s.masked_fill")), lose=C),
    # ------------------------------------------------------------ EncoderLayer
    Variant("enc_not_batch_first", edit("encoder_layer", ("nn.MultiheadAttention(d, h, batch_first=True)",
                                                          "nn.MultiheadAttention(d, h)")), lose=E),
    Variant("enc_no_none_check", edit("encoder_layer", ("blocked = None if src_mask is None else ~src_mask",
                                                        "blocked = ~src_mask")), lose=E),
    Variant("enc_tuple_not_indexed", edit("encoder_layer", (
        "x = x + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)[0]",
        "x = x + self.self_attn(a, a, a, key_padding_mask=blocked, need_weights=False)")), lose=E),
    Variant("enc_silu", edit("encoder_layer", ("nn.GELU()", "nn.SiLU()")), lose=E),
    Variant("enc_mask_as_attn_mask", edit("encoder_layer", ("key_padding_mask=blocked", "attn_mask=blocked")), lose=E),
    Variant("enc_dropout_left_in", edit("encoder_layer", ("nn.MultiheadAttention(d, h, batch_first=True)",
                                                          "nn.MultiheadAttention(d, h, dropout=0.1, batch_first=True)")),
            lose=E),
    # ------------------------------------------------------------ DecoderLayer
    Variant("dec_no_none_check", edit("decoder_layer", ("blocked = None if memory_mask is None else ~memory_mask",
                                                        "blocked = ~memory_mask")), lose=D),
    Variant("dec_is_causal_alone", edit("decoder_layer", ("attn_mask=future, need_weights=False",
                                                          "is_causal=True, need_weights=False")), lose=D),
    Variant("dec_cross_uses_norm1", edit("decoder_layer", ("        a = self.norm2(y)\n", "        a = self.norm1(y)\n")),
            lose=D),
    Variant("dec_float_tril_mask", edit("decoder_layer", (
        "torch.ones(n_t, n_t, dtype=torch.bool, device=y.device).triu(1)", "torch.tril(torch.ones(n_t, n_t))")),
            lose=D),
    Variant("dec_no_ffn_residual", edit("decoder_layer", ("return y + self.ffn(self.norm3(y))",
                                                          "return self.ffn(self.norm3(y))")), lose=D),
    # ------------------------------------------------------------ greedy_decode
    Variant("encodes_every_step", greedy(GREEDY_OK.replace(
        "        nxt = model.decode(tgt, memory, mask)",
        "        memory = model.encode(src, mask)\n        nxt = model.decode(tgt, memory, mask)")), lose=G),
    Variant("cat_without_new_axis", greedy(GREEDY_OK.replace("nxt[:, None]", "nxt")), lose=G),
    Variant("mask_width_max_len", greedy(GREEDY_OK.replace("padding_mask(src_lengths, src.shape[1])",
                                                           "padding_mask(src_lengths, max_len)")), lose=G),
    Variant("starts_from_zero_not_bos", greedy(GREEDY_OK.replace("torch.full((B, 1), bos, dtype=torch.long)",
                                                                 "torch.zeros(B, 1, dtype=torch.long)")), lose=G),
    Variant("float_result", greedy('''    B = src.shape[0]
    mask = padding_mask(src_lengths, src.shape[1])
    memory = model.encode(src, mask)
    out = torch.zeros(B, 0)
    tgt = torch.full((B, 1), bos)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        nxt = model.decode(tgt, memory, mask)[:, -1].argmax(-1)
        nxt = torch.where(done, eos, nxt)
        out = torch.cat([out, nxt[:, None]], dim=1)
        tgt = torch.cat([tgt, nxt[:, None]], dim=1)
        done = done | (nxt == eos)
        if done.all():
            break
    return out
'''), lose=G),
    Variant("mask_arguments_swapped", greedy(GREEDY_OK.replace("padding_mask(src_lengths, src.shape[1])",
                                                               "padding_mask(src.shape[1], src_lengths)")), lose=G),
    Variant("while_on_tgt_length", greedy('''    mask = padding_mask(src_lengths, src.shape[1])
    memory = model.encode(src, mask)
    tgt = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    while tgt.shape[1] < max_len:
        nxt = model.decode(tgt, memory, mask)[:, -1].argmax(-1)
        finished = (tgt[:, 1:] == eos).any(dim=1)
        nxt = torch.where(finished, eos, nxt)
        tgt = torch.cat([tgt, nxt.unsqueeze(1)], 1)
        if (tgt[:, 1:] == eos).any(dim=1).all():
            break
    return tgt[:, 1:]
'''), lose=G),
]


# Written after the hidden checks were improved on WILD, and measured without changing them again: how well the
# diagnoses carry over to mistakes they were not tuned on.
HELDOUT = [
    Variant("lengths_on_the_wrong_side", pad("    return torch.arange(n) < lengths.unsqueeze(0)\n"), lose=M),
    Variant("rows_of_a_triangle", pad("    return torch.tril(torch.ones(n, n, dtype=torch.bool))[lengths - 1]\n"),
            lose=M),
    Variant("mask_unsqueezed_last", cross(CROSS_OK.replace("~memory_mask[:, None, :]", "~memory_mask.unsqueeze(-1)")
                                          .replace("    s = s.masked_fill", "    if memory_mask is not None:\n"
                                                   "        s = s.masked_fill")), lose=C),
    Variant("k_dot_T", cross(CROSS_OK.replace("q @ k.transpose(1, 2)", "torch.matmul(q, k.T)")
                             .replace("    s = s.masked_fill", "    if memory_mask is not None:\n"
                                      "        s = s.masked_fill")), lose=C),
    Variant("enc_norms_swapped", edit("encoder_layer", ("        a = self.norm1(x)\n", "        a = self.norm2(x)\n"), (
        "return x + self.ffn(self.norm2(x))", "return x + self.ffn(self.norm1(x))")), lose=E),
    Variant("dec_mask_not_inverted", edit("decoder_layer", ("blocked = None if memory_mask is None else ~memory_mask",
                                                            "blocked = memory_mask")), lose=D),
    Variant("dec_self_attention_gets_memory_mask", edit("decoder_layer", (
        "attn_mask=future, need_weights=False", "attn_mask=future, key_padding_mask=None if memory_mask is None "
        "else ~memory_mask, need_weights=False")), lose=D),
    Variant("float_mask_to_the_model", greedy(GREEDY_OK.replace("mask = padding_mask(src_lengths, src.shape[1])",
                                                                "mask = padding_mask(src_lengths, src.shape[1]).float()")),
            lose=G),
]
