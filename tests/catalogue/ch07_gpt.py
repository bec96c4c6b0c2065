"""Known wrong answers (and correct variants) for ch07_gpt.

Wrong answers are written as small edits of the model solution, read from
the built source notebook, so they follow the chapter when it changes. Each
must lose the points of the named test cell and its feedback must name the
bug in plain words (the zh build is graded here)."""
from __future__ import annotations

import sys
import types

from harness import Variant, solution_editor

# tests/test_grading_inprocess.py compiles answer cells inheriting its own
# `from __future__ import annotations`, so GPTConfig's annotations arrive as
# strings and @dataclass looks up sys.modules[cls.__module__] ("__course__"),
# which does not exist. An empty module under that name is enough. (The real
# fix is compile(..., dont_inherit=True) in that shared test; see the report.)
sys.modules.setdefault("__course__", types.ModuleType("__course__"))

edit = solution_editor("ch07_gpt")


MANUAL_ATTENTION = """mask = torch.ones(T, T).tril(diagonal=DIAG).bool()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = F.softmax(scores.masked_fill(~mask, FILL), dim=-1)
        y = weights @ v"""
SDPA = "p = self.dropout if self.training else 0.0\n        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)"

BUGS = [
    # tokenizer
    Variant("tok_drops_unknown", edit("tokenizer", (
        "        unknown = [ch for ch in s if ch not in self.stoi]\n"
        "        if unknown:\n"
        "            raise ValueError(f\"character {unknown[0]!r} is not in the vocabulary\")\n"
        "        return [self.stoi[ch] for ch in s]",
        "        return [self.stoi[ch] for ch in s if ch in self.stoi]")),
            lose=("test_tokenizer",), words=("悄悄跳过",)),
    # get_batch
    Variant("batch_y_not_shifted", edit("get_batch", ("data[i + 1:i + 1 + block_size]", "data[i:i + block_size]")),
            lose=("test_get_batch",), words=("y 和 x 完全一样",)),
    Variant("batch_y_shift_two", edit("get_batch", ("data[i + 1:i + 1 + block_size]", "data[i + 2:i + 2 + block_size]")),
            lose=("test_get_batch",), words=("挪了两格",)),
    Variant("batch_start_past_end", edit("get_batch", ("torch.randint(len(data) - block_size,",
                                                       "torch.randint(len(data) - block_size + 1,")),
            lose=("test_get_batch",), words=("起点可能越界",)),
    # GPT
    Variant("gpt_untied_head", edit("gpt", ("        self.lm_head.weight = self.wte.weight                          # tied: one matrix, two jobs\n", "")),
            lose=("test_gpt",), words=("没有与词嵌入共享权重",)),
    Variant("gpt_sees_next_token", edit("gpt", (SDPA, MANUAL_ATTENTION.replace("DIAG", "1").replace("FILL", 'float("-inf")'))),
            lose=("test_gpt_causal",), words=("看到了位置 i+1",)),
    Variant("gpt_no_causal_mask", edit("gpt", ("is_causal=True", "is_causal=False")),
            lose=("test_gpt_causal",), words=("没有因果掩码",)),
    Variant("gpt_no_length_check", edit("gpt", (
        "        if T > self.config.n_ctx:\n"
        "            raise ValueError(f\"input of length {T} is longer than n_ctx = {self.config.n_ctx}\")\n", "")),
            lose=("test_gpt",), words=("没有检查 T > n_ctx",)),
    # generate
    Variant("gen_no_crop", edit("generate", ("context = idx[:, -n_ctx:]", "context = idx")),
            lose=("test_generate",), words=("上下文没有裁剪",)),
    Variant("gen_temperature_after_softmax", edit("generate", (
        "logits = logits[:, -1, :] / temperature", "logits = logits[:, -1, :]"), (
        "probs = F.softmax(logits, dim=-1)", "probs = F.softmax(logits, dim=-1) / temperature\n"
                                             "        probs = probs / probs.sum(dim=-1, keepdim=True)")),
            lose=("test_generate",), words=("温度用在了 softmax 之后",)),
    Variant("gen_greedy_always", edit("generate", (
        "nxt = torch.multinomial(probs, 1, generator=generator)", "nxt = probs.argmax(dim=-1, keepdim=True)")),
            lose=("test_generate",), words=("总是取最大值",)),
    Variant("gen_topk_smallest", edit("generate", (
        "kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]\n"
        "            logits = logits.masked_fill(logits < kth, float(\"-inf\"))",
        "kth = torch.topk(logits, top_k, dim=-1, largest=False).values[:, -1:]\n"
        "            logits = logits.masked_fill(logits > kth, float(\"-inf\"))")),
            lose=("test_generate",), words=("最小的 k 个",)),
]

CORRECT = [
    Variant("ok_manual_attention_keyerror_tokenizer", {
        **edit("gpt", (SDPA, MANUAL_ATTENTION.replace("DIAG", "0").replace("FILL", "-1e9"))),
        "tokenizer": """class CharTokenizer:
    def __init__(self, text):
        vocab = sorted(set(text))
        self.itos = dict(enumerate(vocab))
        self.stoi = {c: i for i, c in self.itos.items()}
        self.vocab_size = len(vocab)

    def encode(self, s):
        return [self.stoi[c] for c in s]          # KeyError names the character

    def decode(self, ids):
        return ''.join(self.itos[int(i)] for i in ids)
"""}),
    Variant("ok_indexing_batch_sort_topk", {
        "get_batch": """def get_batch(data, block_size, batch_size, generator=None):
    ix = torch.randint(0, len(data) - block_size, (batch_size, 1), generator=generator)
    offsets = torch.arange(block_size)
    return data[ix + offsets], data[ix + offsets + 1]
""",
        "generate": """@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    for _ in range(max_new_tokens):
        logits, _ = model(idx[:, -model.config.n_ctx:])
        logits = logits[:, -1, :].double() / temperature
        if top_k is not None:
            k = min(top_k, logits.shape[-1])
            order = logits.argsort(dim=-1, descending=True)
            drop = order[:, k:]
            logits = logits.scatter(1, drop, float('-inf'))
        probs = torch.exp(logits - logits.logsumexp(-1, keepdim=True))
        idx = torch.cat((idx, torch.multinomial(probs, num_samples=1, generator=generator)), dim=1)
    return idx
"""}),
]

BUGS += [
    Variant("gpt_logits_last_position_only", edit("gpt", (
        "logits = self.lm_head(self.ln_f(x))                            # (B, T, vocab_size)",
        "logits = self.lm_head(self.ln_f(x))[:, -1, :]")),
            lose=("test_gpt", "test_gpt_causal"), words=("logits 的形状",)),
    Variant("gen_topk_threshold_1d", edit("generate", ("values[:, -1:]", "values[:, -1]")),
            lose=("test_generate",), words=("阈值", "values[:, [-1]]")),
]

NANOGPT_TOKENIZER = """class CharTokenizer:
    def __init__(self, text):
        self.vocab = sorted(list(set(text)))
        self.vocab_size = len(self.vocab)
        self.char_to_id = {c: i for i, c in enumerate(self.vocab)}

    def encode(self, s):
        ids = []
        for c in s:
            if c not in self.char_to_id:
                raise ValueError(f"unknown character: {c}")
            ids.append(self.char_to_id[c])
        return ids

    def decode(self, ids):
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.vocab[i] for i in ids)
"""

STRING_TOKENIZER = """class CharTokenizer:
    def __init__(self, text):
        self.itos = "".join(sorted(set(text)))
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.vocab_size = len(self.itos)

    def encode(self, s):
        try:
            return [self.stoi[c] for c in s]
        except KeyError as e:
            raise ValueError(f"{e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids):
        return "".join(map(lambda i: self.itos[int(i)], ids))
"""

# Correct answers as people write them: nanoGPT's registered mask buffer and in-place top-k, windows from
# unfold, separate q/k/v projections with a float32 scale constant, a top-k threshold taken with min().
CORRECT += [
    Variant("ok_nanogpt_style", {
        "tokenizer": NANOGPT_TOKENIZER,
        "get_batch": """def get_batch(data, block_size, batch_size, generator=None):
    windows = data.unfold(0, block_size + 1, 1)                  # every window of block_size + 1 tokens
    ix = torch.randint(windows.shape[0], (batch_size,), generator=generator)
    w = windows[ix]
    return w[:, :-1], w[:, 1:]
""",
        **edit("gpt", ("        self.c_proj = nn.Linear(config.d_model, config.d_model)       # W_O\n",
                       "        self.c_proj = nn.Linear(config.d_model, config.d_model)       # W_O\n"
                       "        self.attn_drop = nn.Dropout(config.dropout)\n"
                       "        self.register_buffer('bias', torch.tril(torch.ones(config.n_ctx, config.n_ctx))"
                       ".view(1, 1, config.n_ctx, config.n_ctx))\n"),
               (SDPA, "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))\n"
                      "        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))\n"
                      "        y = self.attn_drop(F.softmax(att, dim=-1)) @ v")),
        **edit("generate", ("kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]\n"
                            "            logits = logits.masked_fill(logits < kth, float(\"-inf\"))",
                            "v, _ = torch.topk(logits, min(top_k, logits.size(-1)))\n"
                            "            logits[logits < v[:, [-1]]] = -float('Inf')")),
    }),
    Variant("ok_separate_projections_float32_scale", {
        "tokenizer": STRING_TOKENIZER,
        "get_batch": """def get_batch(data, block_size, batch_size, generator=None):
    ix = torch.randint(high=len(data) - block_size, size=(batch_size,), generator=generator)
    rows = ix[:, None] + torch.arange(block_size + 1)
    chunk = data[rows]
    return chunk[:, :block_size].long(), chunk[:, 1:].long()
""",
        **edit("gpt", ("self.c_attn = nn.Linear(config.d_model, 3 * config.d_model)   # W_Q, W_K, W_V side by side",
                       "self.q_proj, self.k_proj, self.v_proj = (nn.Linear(config.d_model, config.d_model) "
                       "for _ in range(3))"),
               ("q, k, v = self.c_attn(x).split(d, dim=-1)                     # 3 × (B, T, d)",
                "q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)"),
               (SDPA, "scale = torch.tensor(q.shape[-1]) ** -0.5               # a float32 constant\n"
                      "        s = torch.einsum('bhqc,bhkc->bhqk', q, k) * scale\n"
                      "        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)\n"
                      "        y = torch.einsum('bhqk,bhkc->bhqc', s.masked_fill(future, float('-inf')).softmax(-1), v)"),
               ("loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))",
                "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), reduction='mean')")),
        **edit("generate", ("kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]\n"
                            "            logits = logits.masked_fill(logits < kth, float(\"-inf\"))",
                            "kth = logits.topk(top_k, dim=-1).values.min(dim=-1, keepdim=True).values\n"
                            "            logits = torch.where(logits >= kth, logits, torch.full_like(logits, float('-inf')))"),
               ("probs = F.softmax(logits, dim=-1)", "probs = torch.exp(logits - logits.max(-1, keepdim=True).values)\n"
                                                     "        probs = probs / probs.sum(-1, keepdim=True)")),
    }),
]


# ------------------------------------------------------------------ browser test

# The browser test keeps the cells the widget needs and shortens training to
# seconds on a slice of the corpus (its progress bar and live loss plot still show).
WIDGET = dict(cell="attention_maps.attention_explorer", labels=("句子", "层", "头"),
              keep=("corpora.load_corpus", "tok = CharTokenizer(text)", "config = GPTConfig(",
                    "training.train(", "SENTENCE ="),
              edits={"text, used = corpora.load_corpus(CORPUS)":
                     "text, used = corpora.load_corpus(CORPUS)\ntext = text[:200_000]",
                     "TRAIN_SECONDS = 180": "TRAIN_SECONDS = 3",
                     "max_tokens=1_024 if under_nbgrader() else None": "max_tokens=1_024"})


def check_widget(target, text):
    assert target.locator("img").count() >= 1, "ch07: no figure in the widget"
