"""Known wrong answers (and correct variants) for ch07_gpt. A wrong answer
that breaks a rule an exercise states names it (``breaks=``, the ids marked in
notebooks/ch07_gpt.md; tests/test_rules.py checks the two halves match).

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

# lines of the model solution the wrong answers below edit
STEP_FIRST = "    optimizer.zero_grad(set_to_none=True)\n"
CLIP = "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=plan.grad_clip)\n"
BACKWARD = "    batch_loss.backward()                                          # the gradient of every parameter\n"
GROUPS = '    for group in optimizer.param_groups:\n        group["lr"] = rate\n'
EVAL_MODE = "    model.train(False)                                             # eval mode: dropout is off\n"
EVAL_NO_GRAD = "    with torch.inference_mode():                                   # nothing kept for a backward pass\n"


MANUAL_ATTENTION = """mask = torch.ones(T, T).tril(diagonal=DIAG).bool()
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        weights = F.dropout(F.softmax(scores.masked_fill(~mask, FILL), dim=-1), self.dropout, self.training)
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
            breaks=('tok-unknown-raises',), lose=("test_tokenizer",), words=("悄悄跳过",),
            said={"test_checkpoint": ("用正确的 CharTokenizer 代替你的之后，这一题是对的", "练习 1 还需要修改")}),
    # get_batch
    Variant("batch_y_not_shifted", edit("get_batch", ("data[i + 1:i + 1 + block_size]", "data[i:i + block_size]")),
            breaks=('batch-windows',), lose=("test_get_batch",), words=("y 和 x 完全一样",)),
    Variant("batch_y_shift_two", edit("get_batch", ("data[i + 1:i + 1 + block_size]", "data[i + 2:i + 2 + block_size]")),
            breaks=('batch-windows',), lose=("test_get_batch",), words=("挪了两格",)),
    Variant("batch_start_past_end", edit("get_batch", ("torch.randint(len(data) - block_size,",
                                                       "torch.randint(len(data) - block_size + 1,")),
            breaks=('batch-start-range',), lose=("test_get_batch",), words=("起点可能越界",)),
    # GPT
    Variant("gpt_untied_head", edit("gpt", ("        self.wte.weight = self.lm_head.weight                          # tied: one matrix, two jobs\n", "")),
            breaks=('gpt-tied',), lose=("test_gpt",), words=("没有与词嵌入共享权重",)),
    Variant("gpt_sees_next_token", edit("gpt", (SDPA, MANUAL_ATTENTION.replace("DIAG", "1").replace("FILL", 'float("-inf")'))),
            breaks=('gpt-attn-causal',), lose=("test_gpt_causal",), words=("看到了位置 i+1",)),
    Variant("gpt_no_causal_mask", edit("gpt", ("is_causal=True", "is_causal=False")),
            breaks=('gpt-attn-causal',), lose=("test_gpt_causal",), words=("没有因果掩码",)),
    Variant("gpt_no_length_check", edit("gpt", (
        "        if T > self.config.n_ctx:\n"
        "            raise ValueError(f\"input of length {T} is longer than n_ctx = {self.config.n_ctx}\")\n", "")),
            breaks=('gpt-length-check',), lose=("test_gpt",), words=("没有检查 T > n_ctx",)),
    # generate
    Variant("gen_no_crop", edit("generate", ("context = idx[:, -n_ctx:]", "context = idx")),
            breaks=('gen-crop',), lose=("test_generate",), words=("上下文没有裁剪",)),
    Variant("gen_temperature_after_softmax", edit("generate", (
        "logits = logits[:, -1, :] / temperature", "logits = logits[:, -1, :]"), (
        "probs = F.softmax(logits, dim=-1)", "probs = F.softmax(logits, dim=-1) / temperature\n"
                                             "        probs = probs / probs.sum(dim=-1, keepdim=True)")),
            breaks=('gen-temperature',), lose=("test_generate",), words=("温度用在了 softmax 之后",)),
    Variant("gen_greedy_always", edit("generate", (
        "nxt = torch.multinomial(probs, 1, generator=generator)", "nxt = probs.argmax(dim=-1, keepdim=True)")),
            breaks=('gen-sample',), lose=("test_generate",), words=("总是取最大值",)),
    Variant("gen_topk_smallest", edit("generate", (
        "kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]\n"
        "            logits = logits.masked_fill(logits < kth, float(\"-inf\"))",
        "kth = torch.topk(logits, top_k, dim=-1, largest=False).values[:, -1:]\n"
        "            logits = logits.masked_fill(logits > kth, float(\"-inf\"))")),
            breaks=('gen-topk',), lose=("test_generate",), words=("最小的 k 个",)),
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
            breaks=('gpt-logits',), lose=("test_gpt", "test_gpt_causal"), words=("logits 的形状",)),
    Variant("gen_topk_threshold_1d", edit("generate", ("values[:, -1:]", "values[:, -1]")),
            breaks=('gen-topk',), lose=("test_generate",), words=("阈值", "values[:, [-1]]")),
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
# unfold, chunk instead of split and einsum with a float32 scale constant, a top-k threshold taken with min().
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
    Variant("ok_chunk_einsum_float32_scale", {
        "tokenizer": STRING_TOKENIZER,
        "get_batch": """def get_batch(data, block_size, batch_size, generator=None):
    ix = torch.randint(high=len(data) - block_size, size=(batch_size,), generator=generator)
    rows = ix[:, None] + torch.arange(block_size + 1)
    chunk = data[rows]
    return chunk[:, :block_size].long(), chunk[:, 1:].long()
""",
        **edit("gpt", ("q, k, v = self.c_attn(x).split(d, dim=-1)                     # 3 × (B, T, d)",
                "q, k, v = self.c_attn(x).chunk(3, dim=-1)"),
               (SDPA, "scale = torch.tensor(q.shape[-1]) ** -0.5               # a float32 constant\n"
                      "        s = torch.einsum('bhqc,bhkc->bhqk', q, k) * scale\n"
                      "        future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)\n"
                      "        w = F.dropout(s.masked_fill(future, float('-inf')).softmax(-1), self.dropout, self.training)\n"
                      "        y = torch.einsum('bhqk,bhkc->bhqc', w, v)"),
               ("else cross_entropy(logits, targets)",
                "else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), reduction='mean')")),
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
                    "training.Run(", "SENTENCE ="),
              edits={"text, used = corpora.load_corpus(CORPUS)":
                     "text, used = corpora.load_corpus(CORPUS)\ntext = text[:200_000]",
                     "TRAIN_SECONDS = 180": "TRAIN_SECONDS = 3"})


def check_widget(target, text):
    assert target.locator("img").count() >= 1, "ch07: no figure in the widget"


# ------------------------------------------------------------------ the loss and the training loop

CE_SOLUTION = """    z = logits.reshape(-1, logits.shape[-1])                       # (N, V): one row per position
    ids = targets.reshape(-1)                                      # (N,)
    m = z.max(dim=-1, keepdim=True).values                         # the largest score of each row
    log_sum_exp = m.squeeze(-1) + torch.log(torch.exp(z - m).sum(dim=-1))
    right = z[torch.arange(z.shape[0]), ids]                       # the score of the right token
    return (log_sum_exp - right).mean()
"""
CE_HEAD = "def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:\n"


def ce(body: str) -> dict:
    return {"cross_entropy": CE_HEAD + body}


# a wrong cross_entropy costs exercise 3 alone: GPT, the step and the evaluation call it, keep their marks, and say why
GIVEN_CE = ("用正确的 cross_entropy 代替你的之后，这一题是对的", "练习 3 还需要修改")
KEPT_CE = {"test_gpt": GIVEN_CE, "test_train_step": GIVEN_CE, "test_evaluate": GIVEN_CE}
GIVEN_LR = {"test_train_step": ("用正确的 learning_rate 代替你的之后，这一题是对的", "练习 6 还需要修改")}

BUGS += [
    # cross_entropy
    Variant("ce_no_max", ce("""    z = logits.reshape(-1, logits.shape[-1])
    log_sum_exp = torch.log(torch.exp(z).sum(dim=-1))
    return (log_sum_exp - z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()
"""), breaks=('ce-max-shift',), lose=("test_cross_entropy",), words=("溢出", "log-sum-exp"), said=KEPT_CE),
    Variant("ce_sum", edit("cross_entropy", ("return (log_sum_exp - right).mean()", "return (log_sum_exp - right).sum()")),
            breaks=('ce-mean',), lose=("test_cross_entropy",), words=("和：要取平均",), said=KEPT_CE),
    Variant("ce_wrong_axis", edit("cross_entropy", (
        "m = z.max(dim=-1, keepdim=True).values                         # the largest score of each row\n"
        "    log_sum_exp = m.squeeze(-1) + torch.log(torch.exp(z - m).sum(dim=-1))",
        "m = z.max(dim=0, keepdim=True).values\n"
        "    log_sum_exp = (m + torch.log(torch.exp(z - m).sum(dim=0, keepdim=True)))[0, ids]")),
            breaks=('ce-formula',), lose=("test_cross_entropy",), words=("沿错了维度",), said=KEPT_CE),
    Variant("ce_uses_torch", ce("    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))\n"),
            breaks=('ce-from-scratch',), lose=("test_cross_entropy",), words=("从零实现", "torch.nn.functional.cross_entropy"), said=KEPT_CE),
    Variant("ce_uses_log_softmax", ce("""    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).mean()
"""), breaks=('ce-from-scratch',), lose=("test_cross_entropy",), words=("从零实现", "log_softmax"), said=KEPT_CE),
    # learning_rate
    Variant("lr_warmup_from_zero", edit("learning_rate", ("peak_lr * (step + 1) / warmup_steps", "peak_lr * step / warmup_steps")),
            breaks=('lr-warmup',), lose=("test_learning_rate",), words=("预热差了一步",), said=GIVEN_LR),
    Variant("lr_no_floor", edit("learning_rate", ("    if step >= max_steps:\n        return min_lr\n", "")),
            breaks=('lr-floor',), lose=("test_learning_rate",), words=("余弦又升回去了",), said=GIVEN_LR),
    Variant("lr_never_floor", edit("learning_rate", ("(step - warmup_steps) / (max_steps - warmup_steps)",
                                                     "(step - warmup_steps) / max_steps")),
            breaks=('lr-floor',), lose=("test_learning_rate",), words=("到不了底",), said=GIVEN_LR),
    Variant("lr_not_done", {"learning_rate": "def learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr):\n"
                                             "    raise NotImplementedError()\n"},
            lose=("test_learning_rate",), words=("还没有实现",), said=GIVEN_LR),
    # train_step
    Variant("step_no_zero_grad", edit("train_step", (STEP_FIRST, "")),
            breaks=('step-order',), lose=("test_train_step",), words=("梯度没有清零",)),
    Variant("step_clip_after", edit("train_step", (CLIP + "    optimizer.step()\n", "    optimizer.step()\n" + CLIP)),
            breaks=('step-order',), lose=("test_train_step",), words=("裁剪没有作用",)),
    Variant("step_lr_set_after_update", edit("train_step", (
        "    rate = learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)\n"
        "    for group in optimizer.param_groups:\n        group[\"lr\"] = rate\n", ""), (
        "    optimizer.step()\n",
        "    optimizer.step()\n    for group in optimizer.param_groups:                 # ready for the next step\n"
        "        group[\"lr\"] = learning_rate(step + 1, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)\n")),
            breaks=('step-order',), lose=("test_train_step",), words=("落后了一步",)),
    Variant("step_targets_not_shifted", edit("train_step", ("cross_entropy(logits, y)", "cross_entropy(logits, x)")),
            breaks=('step-loss',), lose=("test_train_step",), words=("拿 x 当目标",)),
    # evaluate
    Variant("eval_train_mode", edit("evaluate", (EVAL_MODE, "")),
            breaks=('eval-mode',), lose=("test_evaluate",), words=("训练模式",)),
    Variant("eval_with_grad", edit("evaluate", (EVAL_NO_GRAD, "    if True:\n")),
            breaks=('eval-no-grad',), lose=("test_evaluate",), words=("梯度是开着的",)),
    Variant("eval_forced_train", edit("evaluate", ("model.train(was_training)", "model.train()")),
            breaks=('eval-restore',), lose=("test_evaluate",), words=("一律 model.train()",)),
    # checkpoint
    Variant("ckpt_no_optimizer", edit("checkpoint", ('"optimizer": optimizer.state_dict(), ', ""),
                                      ('    optimizer.load_state_dict(saved["optimizer"])\n', "")),
            breaks=('ckpt-optimizer', 'ckpt-exact-resume'), lose=("test_checkpoint",), words=("优化器从头开始",)),
    Variant("ckpt_no_step", edit("checkpoint", ('return saved["step"], ', "return 0, ")),
            breaks=('ckpt-step',), lose=("test_checkpoint",), words=("步数不对",)),
]

CORRECT += [
    # nanoGPT's loop (the loss from the model, zero_grad after the step), a LambdaLR resumed at this step,
    # torch.logsumexp with a one-hot pick, an evaluation decorated with no_grad that weighs by tokens,
    # and a checkpoint written atomically under other keys
    Variant("ok_nanogpt_loop_logsumexp", {
        "cross_entropy": CE_HEAD + """    # the same number as F.cross_entropy, written without softmax, log_softmax or nll_loss
    V = logits.size(-1)
    flat, ids = logits.view(-1, V), targets.view(-1)
    return (torch.logsumexp(flat, dim=-1) - (flat * F.one_hot(ids, V)).sum(-1)).mean()
""",
        "train_step": """def train_step(model, optimizer, x, y, step, plan):
    lr = learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    logits, loss = model(x, y)
    loss.backward()
    if plan.grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
""",
        "evaluate": """@torch.no_grad()
def evaluate(model, batches):
    mode = model.training
    model.eval()
    try:
        total = count = 0
        for x, y in batches:
            logits, _ = model(x)
            total += cross_entropy(logits, y).item() * y.numel()
            count += y.numel()
        return total / count
    finally:
        model.train(mode)
"""}),
    Variant("ok_lambdalr_atomic_checkpoint", {
        "train_step": """def train_step(model, optimizer, x, y, step, plan):
    lr_at = lambda s: learning_rate(s, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)
    for group in optimizer.param_groups:
        group["initial_lr"] = plan.lr                    # LambdaLR multiplies this by the factor
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s) / plan.lr, last_epoch=step - 1)
    model.zero_grad()
    logits = model(x)[0]
    loss = cross_entropy(logits, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=plan.grad_clip)
    optimizer.step()
    scheduler.step()
    return float(loss.detach())
""",
        "checkpoint": """import os

from helpers.training import Recipe


def save_checkpoint(path, model, optimizer, step, recipe, tokenizer):
    state = {
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "iteration": step,
        "recipe": recipe.as_dict(),
        "chars": tokenizer.decode(range(tokenizer.vocab_size)),
    }
    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)                            # never a half-written checkpoint


def load_checkpoint(path, model, optimizer):
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model_state_dict"])
    optimizer.load_state_dict(state["optimizer_state_dict"])
    return state["iteration"], Recipe(**state["recipe"]), CharTokenizer(state["chars"])
"""}),
]

WORDS_ARE_NOT_CALLS = ("ok_nanogpt_loop_logsumexp",)


# ------------------------------------------------------------------ the rule ledger: one wrong answer per stated rule
# (each breaks exactly the rule it names; ``words`` are the zh words of the message that name it), and wrong answers
# written the way students write them, beyond the ones the visible hints mention

def lr(body: str) -> dict:
    return {"learning_rate": "def learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr):\n" + body}


LR_HEAD = """    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
"""
GIVEN_TOK = {"test_checkpoint": ("用正确的 CharTokenizer 代替你的之后，这一题是对的", "练习 1 还需要修改")}

EVAL_LOSSES = "        losses = [cross_entropy(model(x)[0], y).item() for x, y in batches]\n"

BUGS += [
    # tokenizer
    Variant("tok_unsorted", edit("tokenizer", ("self.chars = sorted(set(text))", "self.chars = list(dict.fromkeys(text))")),
            breaks=("tok-sorted",), lose=("test_tokenizer",), words=("sorted(set(text))",), said=GIVEN_TOK),
    Variant("tok_vocab_size_plus_one", edit("tokenizer", ("self.vocab_size = len(self.chars)",
                                                          "self.vocab_size = len(self.chars) + 1      # one spare id")),
            breaks=("tok-vocab-size",), lose=("test_tokenizer",), words=("vocab_size 不等于不同字符的个数",), said=GIVEN_TOK),
    Variant("tok_encode_tensor", edit("tokenizer", ("return [self.stoi[ch] for ch in s]",
                                                    "return torch.tensor([self.stoi[ch] for ch in s], dtype=torch.long)")),
            breaks=("tok-encode-list",), lose=("test_tokenizer",), words=("list[int]",), said=GIVEN_TOK),
    Variant("tok_decode_space", edit("tokenizer", ('return "".join(self.chars[int(i)] for i in ids)',
                                                   'return " ".join(self.chars[int(i)] for i in ids)')),
            breaks=("tok-roundtrip",), lose=("test_tokenizer",), words=("空格",), said=GIVEN_TOK),
    Variant("tok_decode_tensor_keyerror", edit("tokenizer", (
        "self.vocab_size = len(self.chars)", "self.vocab_size = len(self.chars)\n        self.itos = dict(enumerate(self.chars))"),
        ('return "".join(self.chars[int(i)] for i in ids)', 'return "".join(self.itos[i] for i in ids)')),
            breaks=("tok-decode-tensor",), lose=("test_tokenizer",), words=("整数张量",), said=GIVEN_TOK),
    Variant("tok_unknown_unnamed", edit("tokenizer", ('raise ValueError(f"character {unknown[0]!r} is not in the vocabulary")',
                                                     'raise ValueError("the text has a character outside the vocabulary")')),
            breaks=("tok-unknown-named",), lose=("test_tokenizer",), words=("没有写出是哪个字符",), said=GIVEN_TOK),
    # get_batch
    Variant("batch_last_start_missing", edit("get_batch", ("torch.randint(len(data) - block_size,",
                                                           "torch.randint(len(data) - block_size - 1,")),
            breaks=("batch-every-start",), lose=("test_get_batch",), words=("最后一个合法起点",)),
    Variant("batch_ignores_generator", edit("get_batch", ("(batch_size,), generator=generator)", "(batch_size,))")),
            breaks=("batch-generator",), lose=("test_get_batch",), words=("没有来自参数 generator",)),
    Variant("batch_transposed", edit("get_batch", ("return x, y", "return x.T, y.T")),
            breaks=("batch-shape",), lose=("test_get_batch",), words=("(batch_size, block_size)",)),
    Variant("batch_y_separate_draw", edit("get_batch", (
        "y = torch.stack([data[i + 1:i + 1 + block_size] for i in starts.tolist()])",
        "ends = torch.randint(len(data) - block_size, (batch_size,), generator=generator)\n"
        "    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ends.tolist()])")),
            breaks=("batch-windows",), lose=("test_get_batch",), words=("两次抽样",)),
    # cross_entropy
    Variant("ce_log2", edit("cross_entropy", ("torch.log(torch.exp(z - m)", "torch.log2(torch.exp(z - m)")),
            breaks=("ce-formula",), lose=("test_cross_entropy",), words=("以 2 为底",), said=KEPT_CE),
    Variant("ce_shift_not_added_back", edit("cross_entropy", ("log_sum_exp = m.squeeze(-1) + torch.log(",
                                                              "log_sum_exp = torch.log(")),
            breaks=("ce-max-shift",), lose=("test_cross_entropy",), words=("没有加回来",), said=KEPT_CE),
    Variant("ce_global_max", edit("cross_entropy", ("m = z.max(dim=-1, keepdim=True).values", "m = z.max()")),
            breaks=("ce-max-shift",), lose=("test_cross_entropy",), words=("每一行自己的最大值",), said=KEPT_CE),
    Variant("ce_right_every_row", edit("cross_entropy", ("right = z[torch.arange(z.shape[0]), ids]", "right = z[:, ids]")),
            breaks=("ce-formula",), lose=("test_cross_entropy",), words=("z[:, ids]",), said=KEPT_CE),
    Variant("ce_sign_flipped", edit("cross_entropy", ("return (log_sum_exp - right).mean()",
                                                      "return (right - log_sum_exp).mean()")),
            breaks=("ce-formula",), lose=("test_cross_entropy",), words=("符号反了",), said=KEPT_CE),
    Variant("ce_all_tokens", ce("""    z = logits.reshape(-1, logits.shape[-1])
    m = z.max(dim=-1, keepdim=True).values
    log_probs = z - m - torch.log(torch.exp(z - m).sum(dim=-1, keepdim=True))
    return -log_probs.mean()
"""), breaks=("ce-formula",), lose=("test_cross_entropy",), words=("没有挑出正确 token",), said=KEPT_CE),
    Variant("ce_only_3d", edit("cross_entropy", ("z = logits.reshape(-1, logits.shape[-1])",
                                                 "B, T, V = logits.shape\n    z = logits.view(B * T, V)")),
            breaks=("ce-shape",), lose=("test_cross_entropy",), words=("(..., V)",), said=KEPT_CE),
    Variant("ce_shape_1", edit("cross_entropy", ("return (log_sum_exp - right).mean()",
                                                 "return (log_sum_exp - right).mean(dim=0, keepdim=True)")),
            breaks=("ce-scalar",), lose=("test_cross_entropy",), words=("0 维",), said=KEPT_CE),
    Variant("ce_float32", edit("cross_entropy", ("z = logits.reshape(-1, logits.shape[-1])",
                                                 "z = logits.reshape(-1, logits.shape[-1]).float()")),
            breaks=("ce-dtype",), lose=("test_cross_entropy",), words=("dtype 和 logits 相同",), said=KEPT_CE),
    Variant("ce_detached", edit("cross_entropy", ("return (log_sum_exp - right).mean()",
                                                  "return torch.tensor((log_sum_exp - right).mean().item(), dtype=logits.dtype)")),
            breaks=("ce-autograd",), lose=("test_cross_entropy",), words=("计算图",), said=KEPT_CE),
    Variant("ce_uses_nll_loss", ce("""    z = logits.reshape(-1, logits.shape[-1])
    m = z.max(dim=-1, keepdim=True).values
    log_probs = z - m - torch.log(torch.exp(z - m).sum(dim=-1, keepdim=True))
    return F.nll_loss(log_probs, targets.reshape(-1))
"""), breaks=("ce-from-scratch",), lose=("test_cross_entropy",), words=("从零实现", "nll_loss"), said=KEPT_CE),
    # GPT
    Variant("gpt_no_scale", edit("gpt", (SDPA, MANUAL_ATTENTION.replace("DIAG", "0").replace("FILL", 'float("-inf")')
                                         .replace(" / math.sqrt(q.shape[-1])", ""))),
            breaks=("gpt-attn-scaled",), lose=("test_gpt",), words=("√d_k",)),
    Variant("gpt_scale_by_d_model", edit("gpt", (SDPA, MANUAL_ATTENTION.replace("DIAG", "0").replace("FILL", 'float("-inf")')
                                                 .replace("math.sqrt(q.shape[-1])", "math.sqrt(d)"))),
            breaks=("gpt-attn-scaled",), lose=("test_gpt",), words=("√d_model",)),
    Variant("gpt_heads_view_no_transpose", edit("gpt", (
        "q, k, v = (z.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))",
        "q, k, v = (z.reshape(B, self.n_head, T, d // self.n_head) for z in (q, k, v))")),
            breaks=("gpt-attn-heads",), lose=("test_gpt", "test_gpt_causal"), words=("拆成多头",)),
    Variant("gpt_merge_no_transpose", edit("gpt", ("y = y.transpose(1, 2).reshape(B, T, d)", "y = y.reshape(B, T, d)")),
            breaks=("gpt-attn-heads",), lose=("test_gpt", "test_gpt_causal"), words=("拼回",)),
    Variant("gpt_blocks_plain_list", edit("gpt", ("nn.ModuleList([Block(config) for _ in range(config.n_layer)])",
                                                  "[Block(config) for _ in range(config.n_layer)]")),
            breaks=("gpt-modules",), lose=("test_gpt",), words=("nn.ModuleList",)),
    Variant("gpt_head_bias", edit("gpt", ("nn.Linear(config.d_model, config.vocab_size, bias=False)",
                                          "nn.Linear(config.d_model, config.vocab_size)")),
            breaks=("gpt-modules",), lose=("test_gpt",), words=("bias=False",)),
    Variant("gpt_no_wpe", edit("gpt", ("self.wte(idx) + self.wpe(positions)", "self.wte(idx)")),
            breaks=("gpt-logits",), lose=("test_gpt",), words=("位置嵌入",)),
    Variant("gpt_no_ln_f", edit("gpt", ("logits = self.lm_head(self.ln_f(x))", "logits = self.lm_head(x)")),
            breaks=("gpt-logits",), lose=("test_gpt",), words=("ln_f",)),
    Variant("gpt_length_off_by_one", edit("gpt", ("if T > self.config.n_ctx:", "if T >= self.config.n_ctx:")),
            breaks=("gpt-length-check",), lose=("test_gpt", "test_gpt_causal"), words=("差了一",)),
    Variant("gpt_loss_zero_without_targets", edit("gpt", ("loss = None if targets is None", "loss = 0.0 if targets is None")),
            breaks=("gpt-loss",), lose=("test_gpt",), words=("None",)),
    Variant("gpt_no_attn_dropout", edit("gpt", ("is_causal=True, dropout_p=p)", "is_causal=True)")),
            breaks=("gpt-dropout-attn",), lose=("test_gpt",), words=("注意力权重上没有 dropout",)),
    Variant("gpt_no_emb_dropout", edit("gpt", ("x = self.emb_drop(self.wte(idx) + self.wpe(positions))",
                                               "x = self.wte(idx) + self.wpe(positions)")),
            breaks=("gpt-dropout-emb",), lose=("test_gpt",), words=("词嵌入加位置嵌入之后没有 dropout",)),
    Variant("gpt_attn_dropout_in_eval", edit("gpt", ("p = self.dropout if self.training else 0.0", "p = self.dropout")),
            breaks=("gpt-dropout-train-only",), lose=("test_gpt",), words=("eval()",)),
    # generate
    Variant("gen_temperature_multiplied", edit("generate", ("logits[:, -1, :] / temperature", "logits[:, -1, :] * temperature")),
            breaks=("gen-temperature",), lose=("test_generate",), words=("乘以了温度",)),
    Variant("gen_crop_front", edit("generate", ("context = idx[:, -n_ctx:]", "context = idx[:, :n_ctx]")),
            breaks=("gen-crop",), lose=("test_generate",), words=("最前面的 n_ctx 个",)),
    Variant("gen_first_position", edit("generate", ("logits[:, -1, :] / temperature", "logits[:, 0, :] / temperature")),
            breaks=("gen-last-position",), lose=("test_generate",), words=("最后一个位置",)),
    Variant("gen_ignores_generator", edit("generate", ("torch.multinomial(probs, 1, generator=generator)",
                                                       "torch.multinomial(probs, 1)")),
            breaks=("gen-generator",), lose=("test_generate",), words=("没有来自参数 generator",)),
    Variant("gen_returns_new_only", edit("generate", ("    return idx", "    return idx[:, -max_new_tokens:]")),
            breaks=("gen-whole-sequence",), lose=("test_generate",), words=("只返回了新生成的",)),
    Variant("gen_topk_larger_than_vocab", edit("generate", ("if top_k is not None and top_k < logits.size(-1):",
                                                            "if top_k is not None:")),
            breaks=("gen-topk-large",), lose=("test_generate",), words=("比词表还大",)),
    # learning_rate
    Variant("lr_warmup_from_floor", edit("learning_rate", ("return peak_lr * (step + 1) / warmup_steps",
                                                           "return min_lr + (peak_lr - min_lr) * (step + 1) / warmup_steps")),
            breaks=("lr-warmup",), lose=("test_learning_rate",), words=("从 min_lr 开始",), said=GIVEN_LR),
    Variant("lr_linear_decay", lr(LR_HEAD + "    return min_lr + (1 - progress) * (peak_lr - min_lr)\n"),
            breaks=("lr-cosine",), lose=("test_learning_rate",), words=("线性衰减",), said=GIVEN_LR),
    Variant("lr_quarter_cosine", lr(LR_HEAD + "    return min_lr + math.cos(math.pi / 2 * progress) * (peak_lr - min_lr)\n"),
            breaks=("lr-cosine",), lose=("test_learning_rate",), words=("四分之一",), said=GIVEN_LR),
    Variant("lr_zero_clamped", lr(LR_HEAD + "    return max(min_lr, 0.5 * (1 + math.cos(math.pi * progress)) * peak_lr)\n"),
            breaks=("lr-cosine",), lose=("test_learning_rate",), words=("衰减到 0",), said=GIVEN_LR),
    Variant("lr_to_zero", lr(LR_HEAD + "    return 0.5 * (1 + math.cos(math.pi * progress)) * peak_lr\n"),
            breaks=("lr-cosine",), lose=("test_learning_rate",), words=("衰减到了 0",), said=GIVEN_LR),
    Variant("lr_returns_tensor", lr(LR_HEAD + "    return min_lr + 0.5 * (1 + torch.cos(torch.tensor(math.pi * progress))) "
                                              "* (peak_lr - min_lr)\n"),
            breaks=("lr-float",), lose=("test_learning_rate",), words=("Python 的 float",), said=GIVEN_LR),
    # train_step
    Variant("step_zero_grad_after_backward", edit("train_step", (STEP_FIRST, ""), (BACKWARD, BACKWARD + STEP_FIRST)),
            breaks=("step-order",), lose=("test_train_step",), words=("backward 之后才清零",)),
    Variant("step_no_clip", edit("train_step", (CLIP, "")),
            breaks=("step-clip",), lose=("test_train_step",), words=("裁剪没有作用",)),
    Variant("step_clip_value", edit("train_step", (CLIP, "    torch.nn.utils.clip_grad_value_(model.parameters(), plan.grad_clip)\n")),
            breaks=("step-clip",), lose=("test_train_step",), words=("clip_grad_value_",)),
    Variant("step_clip_fixed", edit("train_step", (CLIP, "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n")),
            breaks=("step-clip",), lose=("test_train_step",), words=("plan.grad_clip",)),
    Variant("step_lr_one_ahead", edit("train_step", ("rate = learning_rate(step, plan.max_steps", "rate = learning_rate(step + 1, plan.max_steps")),
            breaks=("step-lr",), lose=("test_train_step",), words=("提前了一步",)),
    Variant("step_lr_not_set", edit("train_step", (GROUPS, "")),
            breaks=("step-lr",), lose=("test_train_step",), words=("学习率一直没变",)),
    Variant("step_lr_args_swapped", edit("train_step", ("learning_rate(step, plan.max_steps, plan.warmup_steps,",
                                                        "learning_rate(step, plan.warmup_steps, plan.max_steps,")),
            breaks=("step-lr",), lose=("test_train_step",), words=("参数顺序",)),
    Variant("step_lr_first_group_only", edit("train_step", (GROUPS, '    optimizer.param_groups[0]["lr"] = rate\n')),
            breaks=("step-lr-every-group",), lose=("test_train_step",), words=("第一个参数组",)),
    Variant("step_returns_tensor", edit("train_step", ("    return batch_loss.item()", "    return batch_loss")),
            breaks=("step-float",), lose=("test_train_step",), words=("loss.item()",)),
    Variant("step_uses_torch_ce", edit("train_step", ("batch_loss = cross_entropy(logits, y)",
                                                      "batch_loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))")),
            breaks=("step-own-ce",), lose=("test_train_step",), words=("练习 3 写的 cross_entropy", "不能调用")),
    # evaluate
    Variant("eval_not_restored", edit("evaluate", ("    model.train(was_training)\n", "")),
            breaks=("eval-restore",), lose=("test_evaluate",), words=("没有回到训练模式",)),
    Variant("eval_sum", edit("evaluate", ("return sum(losses) / len(losses)", "return sum(losses)")),
            breaks=("eval-mean",), lose=("test_evaluate",), words=("和，应取平均",)),
    Variant("eval_first_batch_only", {"evaluate": """def evaluate(model, batches):
    was_training = model.training
    model.eval()
    total = 0.0
    with torch.no_grad():
        for x, y in batches:
            total += cross_entropy(model(x)[0], y).item()
            model.train(was_training)
            return total / len(batches)
"""}, breaks=("eval-mean",), lose=("test_evaluate",), words=("写在了 for 循环里",)),
    Variant("eval_last_batch_only", {"evaluate": """def evaluate(model, batches):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for x, y in batches:
            loss = cross_entropy(model(x)[0], y)
    model.train(was_training)
    return loss.item()
"""}, breaks=("eval-mean",), lose=("test_evaluate",), words=("最后一批",)),
    Variant("eval_returns_tensor", edit("evaluate", (EVAL_LOSSES, "        losses = [cross_entropy(model(x)[0], y) for x, y in batches]\n"),
                                        ("return sum(losses) / len(losses)", "return torch.stack(losses).mean()")),
            breaks=("eval-float",), lose=("test_evaluate",), words=("Python 的 float",)),
    Variant("eval_uses_torch_ce", edit("evaluate", (EVAL_LOSSES, "        losses = [F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item() "
                                                                 "for x, y in batches]\n")),
            breaks=("eval-own-ce",), lose=("test_evaluate",), words=("练习 3 写的 cross_entropy", "不能调用")),
    # checkpoint
    Variant("ckpt_no_model", edit("checkpoint", ('{"model": model.state_dict(), ', "{"),
                                  ('    model.load_state_dict(saved["model"])\n', "")),
            breaks=("ckpt-model", "ckpt-exact-resume"), lose=("test_checkpoint",), words=("模型的参数没有恢复",)),
    Variant("ckpt_optimizer_not_loaded", edit("checkpoint", ('    optimizer.load_state_dict(saved["optimizer"])\n', "")),
            breaks=("ckpt-optimizer",), lose=("test_checkpoint",), words=("优化器从头开始",)),
    Variant("ckpt_step_plus_one", edit("checkpoint", ('return saved["step"], ', 'return saved["step"] + 1, ')),
            breaks=("ckpt-step",), lose=("test_checkpoint",), words=("多了一步",)),
    Variant("ckpt_recipe_dict", edit("checkpoint", ('Recipe(**saved["recipe"])', 'saved["recipe"]')),
            breaks=("ckpt-recipe",), lose=("test_checkpoint",), words=("Recipe(**d)",)),
    Variant("ckpt_returns_vocab", edit("checkpoint", ('CharTokenizer(saved["vocab"])', 'saved["vocab"]')),
            breaks=("ckpt-tokenizer",), lose=("test_checkpoint",), words=("CharTokenizer(这个字符串)",)),
    Variant("ckpt_weights_only_false", edit("checkpoint", ("torch.load(path, weights_only=True)", "torch.load(path, weights_only=False)")),
            breaks=("ckpt-weights-only",), lose=("test_checkpoint",), words=("weights_only=True",)),
    Variant("ckpt_pickled_recipe", edit("checkpoint", ('"recipe": recipe.as_dict()', '"recipe": recipe'),
                                        ("torch.load(path, weights_only=True)", "torch.load(path, weights_only=False)"),
                                        ('Recipe(**saved["recipe"])', 'saved["recipe"]')),
            breaks=("ckpt-weights-only",), lose=("test_checkpoint",), words=("weights_only=True",)),
]

CORRECT += [
    # learning_rate with if/elif and with min/max; cross_entropy with a hand-written logsumexp and gather;
    # train_step with set_to_none=False and a clip that returns the norm; evaluate under inference_mode;
    # a checkpoint that loads with the default torch.load (weights_only=True since torch 2.6) and maps to the CPU
    Variant("ok_ifelif_gather_inference", {
        "learning_rate": """def learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr):
    if step < warmup_steps:
        lr = peak_lr * (step + 1) / warmup_steps
    elif step < max_steps:
        ratio = (step - warmup_steps) / (max_steps - warmup_steps)
        coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
        lr = min_lr + coeff * (peak_lr - min_lr)
    else:
        lr = min_lr
    return float(lr)
""",
        "cross_entropy": CE_HEAD + """    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    top = z.amax(dim=-1, keepdim=True).detach()
    lse = (top + (z - top).exp().sum(-1, keepdim=True).log()).squeeze(-1)
    picked = z.gather(1, targets.reshape(-1, 1)).squeeze(1)
    return torch.mean(lse - picked)
""",
        "train_step": """def train_step(model, optimizer, x, y, step, plan):
    for g in optimizer.param_groups:
        g.update(lr=learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr))
    optimizer.zero_grad(set_to_none=False)
    logits, _ = model(x)
    loss = cross_entropy(logits, y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=plan.grad_clip)
    optimizer.step()
    return float(loss.detach().cpu())
""",
        "evaluate": """def evaluate(model, batches):
    before = model.training
    model.train(False)
    with torch.inference_mode():
        values = [float(cross_entropy(model(x)[0], y)) for x, y in batches]
    model.train(before)
    return sum(values) / len(values)
""",
        "checkpoint": """from helpers.training import Recipe


def save_checkpoint(path, model, optimizer, step, recipe, tokenizer):
    torch.save(dict(model=model.state_dict(), optim=optimizer.state_dict(), step=int(step), recipe=recipe.as_dict(),
                    vocab=tokenizer.decode(list(range(tokenizer.vocab_size)))), path)


def load_checkpoint(path, model, optimizer):
    ckpt = torch.load(path, map_location="cpu")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optim"])
    return ckpt["step"], Recipe(**ckpt["recipe"]), CharTokenizer(ckpt["vocab"])
"""}),
    Variant("ok_minmax_lr", {"learning_rate": """def learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr):
    warm = peak_lr * min(1.0, (step + 1) / warmup_steps)
    p = min(max(step - warmup_steps, 0) / max(max_steps - warmup_steps, 1), 1.0)
    decayed = min_lr + (peak_lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))
    return warm if step < warmup_steps else decayed if step < max_steps else min_lr
"""}),
]


# ------------------------------------------------------------------ a second way to break each rule
# (the first ways above; each of these breaks the same rule differently, the way students do)

MANUAL_SCORES_DROPOUT = """mask = torch.ones(T, T).tril().bool()
        scores = F.dropout(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), self.dropout, self.training)
        weights = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = weights @ v"""
TOP_K = ("if top_k is not None and top_k < logits.size(-1):\n"
         "            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]")

SECOND = [
    # tokenizer
    Variant("tok_vocab_size_of_text", edit("tokenizer", ("self.vocab_size = len(self.chars)", "self.vocab_size = len(text)")),
            breaks=("tok-vocab-size",), lose=("test_tokenizer",), words=('vocab_size 不等于不同字符的个数',), said=GIVEN_TOK),
    Variant("tok_set_order", edit("tokenizer", ("self.chars = sorted(set(text))", "self.chars = list(set(text))")),
            breaks=("tok-sorted",), lose=("test_tokenizer",), words=('排好序的字符表',), said=GIVEN_TOK),
    Variant("tok_encode_tuple", edit("tokenizer", ("return [self.stoi[ch] for ch in s]", "return tuple(self.stoi[ch] for ch in s)")),
            breaks=("tok-encode-list",), lose=("test_tokenizer",), words=('list[int]',), said=GIVEN_TOK),
    Variant("tok_decode_strips", edit("tokenizer", ('return "".join(self.chars[int(i)] for i in ids)',
                                                    'return "".join(self.chars[int(i)] for i in ids).strip()')),
            breaks=("tok-roundtrip",), lose=("test_tokenizer",), words=('去掉了首尾的空白',), said=GIVEN_TOK),
    Variant("tok_decode_get_none", edit("tokenizer", (
        "self.vocab_size = len(self.chars)", "self.vocab_size = len(self.chars)\n        self.itos = dict(enumerate(self.chars))"),
        ('return "".join(self.chars[int(i)] for i in ids)', 'return "".join(map(self.itos.get, ids))')),
            breaks=("tok-decode-tensor",), lose=("test_tokenizer",), words=('整数张量',), said=GIVEN_TOK),
    Variant("tok_unknown_position_only", edit("tokenizer", (
        'raise ValueError(f"character {unknown[0]!r} is not in the vocabulary")',
        'raise ValueError(f"unknown character at position {s.index(unknown[0])}")')),
            breaks=("tok-unknown-named",), lose=("test_tokenizer",), words=('没有写出是哪个字符',), said=GIVEN_TOK),
    Variant("tok_unknown_mapped_to_zero", edit("tokenizer", (
        "        unknown = [ch for ch in s if ch not in self.stoi]\n"
        "        if unknown:\n"
        "            raise ValueError(f\"character {unknown[0]!r} is not in the vocabulary\")\n"
        "        return [self.stoi[ch] for ch in s]",
        "        return [self.stoi.get(ch, 0) for ch in s]")),
            breaks=("tok-unknown-raises",), lose=("test_tokenizer",), words=('悄悄编成了',), said=GIVEN_TOK),
    # get_batch
    Variant("batch_first_start_missing", edit("get_batch", ("torch.randint(len(data) - block_size,",
                                                            "torch.randint(1, len(data) - block_size,")),
            breaks=("batch-every-start",), lose=("test_get_batch",), words=('起点 0 永远抽不到',)),
    Variant("batch_seeded_inside", edit("get_batch", (
        "starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)",
        "torch.manual_seed(0)                                 # the same batch every time\n"
        "    starts = torch.randint(len(data) - block_size, (batch_size,))")),
            breaks=("batch-generator",), lose=("test_get_batch",), words=('没有来自参数 generator',)),
    Variant("batch_windows_too_long", edit("get_batch", ("data[i:i + block_size] for", "data[i:i + block_size + 1] for"),
                                           ("data[i + 1:i + 1 + block_size]", "data[i + 1:i + 2 + block_size]")),
            breaks=("batch-shape",), lose=("test_get_batch",), words=('多了一个 token',)),
    Variant("batch_any_start", edit("get_batch", ("torch.randint(len(data) - block_size,", "torch.randint(len(data),")),
            breaks=("batch-start-range",), lose=("test_get_batch",), words=('起点可能越界',)),
    # cross_entropy
    Variant("ce_mean_per_sequence", edit("cross_entropy", ("return (log_sum_exp - right).mean()",
                                                           "return (log_sum_exp - right).sum() / logits.shape[0]")),
            breaks=("ce-mean",), lose=("test_cross_entropy",), words=('只对批量取了平均',), said=KEPT_CE),
    Variant("ce_double", edit("cross_entropy", ("z = logits.reshape(-1, logits.shape[-1])",
                                                "z = logits.reshape(-1, logits.shape[-1]).double()")),
            breaks=("ce-dtype",), lose=("test_cross_entropy",), words=('dtype 和 logits 不同',), said=KEPT_CE),
    Variant("ce_unsqueezed", edit("cross_entropy", ("return (log_sum_exp - right).mean()",
                                                    "return (log_sum_exp - right).mean().unsqueeze(0)")),
            breaks=("ce-scalar",), lose=("test_cross_entropy",), words=('0 维张量',), said=KEPT_CE),
    Variant("ce_size_2", edit("cross_entropy", ("z = logits.reshape(-1, logits.shape[-1])",
                                                "z = logits.reshape(-1, logits.size(2))")),
            breaks=("ce-shape",), lose=("test_cross_entropy",), words=('三维 (B, T, V)',), said=KEPT_CE),
    Variant("ce_detached_logits", edit("cross_entropy", ("z = logits.reshape(-1, logits.shape[-1])",
                                                         "z = logits.detach().reshape(-1, logits.shape[-1])")),
            breaks=("ce-autograd",), lose=("test_cross_entropy",), words=('断开了计算图',), said=KEPT_CE),
    # GPT
    Variant("gpt_head_copy", edit("gpt", ("self.wte.weight = self.lm_head.weight",
                                          "self.lm_head.weight = nn.Parameter(self.wte.weight.detach().clone())")),
            breaks=("gpt-tied",), lose=("test_gpt",), words=('没有与词嵌入共享权重',)),
    Variant("gpt_loss_summed", edit("gpt", ("else cross_entropy(logits, targets)",
                                            "else cross_entropy(logits, targets) * targets.numel()")),
            breaks=("gpt-loss",), lose=("test_gpt",), words=('不是所有位置交叉熵的平均值',)),
    Variant("gpt_dropout_on_scores", edit("gpt", (SDPA, MANUAL_SCORES_DROPOUT)),
            breaks=("gpt-dropout-attn",), lose=("test_gpt",), words=('softmax 之前的分数上',)),
    Variant("gpt_dropout_token_embedding_only", edit("gpt", ("x = self.emb_drop(self.wte(idx) + self.wpe(positions))",
                                                             "x = self.emb_drop(self.wte(idx)) + self.wpe(positions)")),
            breaks=("gpt-dropout-emb",), lose=("test_gpt",), words=('只用在了其中一个嵌入上',)),
    Variant("gpt_manual_dropout_always", edit("gpt", (SDPA, MANUAL_ATTENTION.replace("DIAG", "0").replace("FILL", 'float("-inf")')
                                                      .replace("self.dropout, self.training)", "self.dropout)"))),
            breaks=("gpt-dropout-train-only",), lose=("test_gpt",), words=('eval() 模式下也在丢',)),
    # generate
    Variant("gen_seeded_globally", edit("generate", ("nxt = torch.multinomial(probs, 1, generator=generator)",
                                                     "torch.manual_seed(0)\n        nxt = torch.multinomial(probs, 1)")),
            breaks=("gen-generator",), lose=("test_generate",), words=('没有来自参数 generator',)),
    Variant("gen_all_positions", edit("generate", ("logits = logits[:, -1, :] / temperature", "logits = logits / temperature")),
            breaks=("gen-last-position",), lose=("test_generate",), words=('所有位置的 logits',)),
    Variant("gen_topk_argmax", edit("generate", ("nxt = torch.multinomial(probs, 1, generator=generator)",
                                                 "nxt = torch.topk(probs, 1).indices")),
            breaks=("gen-sample",), lose=("test_generate",), words=('总是取最大值',)),
    Variant("gen_topk_clamped_below_vocab", edit("generate", (TOP_K, (
        "if top_k is not None:\n"
        "            kth = torch.topk(logits, min(top_k, logits.size(-1) - 1), dim=-1).values[:, -1:]"))),
            breaks=("gen-topk-large",), lose=("test_generate",), words=('比词表还大',)),
    Variant("gen_returns_context", edit("generate", ("idx = torch.cat([idx, nxt], dim=1)", "idx = torch.cat([context, nxt], dim=1)")),
            breaks=("gen-whole-sequence",), lose=("test_generate",), words=('返回的序列被裁剪了',)),
    # learning_rate
    Variant("lr_tensor_at_the_end", edit("learning_rate", (
        "return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (peak_lr - min_lr)",
        "return torch.tensor(min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (peak_lr - min_lr))")),
            breaks=("lr-float",), lose=("test_learning_rate",), words=('Python 的 float',), said=GIVEN_LR),
    Variant("lr_floor_after_max_steps", edit("learning_rate", ("if step >= max_steps:", "if step > max_steps:")),
            breaks=("lr-floor",), lose=("test_learning_rate",), words=('除以了 0',), said=GIVEN_LR),
    # train_step
    Variant("step_returns_detached", edit("train_step", ("    return batch_loss.item()", "    return batch_loss.detach()")),
            breaks=("step-float",), lose=("test_train_step",), words=('loss.item()',)),
    Variant("step_targets_shifted_again", edit("train_step", ("batch_loss = cross_entropy(logits, y)",
                                                              "batch_loss = cross_entropy(logits[:, :-1], y[:, 1:])")),
            breaks=("step-loss",), lose=("test_train_step",), words=('又挪了一格',)),
    Variant("step_lr_last_group_only", edit("train_step", (GROUPS, '    optimizer.param_groups[-1]["lr"] = rate\n')),
            breaks=("step-lr-every-group",), lose=("test_train_step",), words=('最后一个参数组',)),
    Variant("step_log_softmax_loss", edit("train_step", (
        "batch_loss = cross_entropy(logits, y)",
        "batch_loss = -F.log_softmax(logits, dim=-1).gather(-1, y.unsqueeze(-1)).mean()")),
            breaks=("step-own-ce",), lose=("test_train_step",), words=('练习 3 写的 cross_entropy', '不能调用')),
    # evaluate
    Variant("eval_returns_tensor_of_mean", edit("evaluate", ("return sum(losses) / len(losses)",
                                                             "return torch.tensor(sum(losses) / len(losses))")),
            breaks=("eval-float",), lose=("test_evaluate",), words=('Python 的 float',)),
    Variant("eval_method_not_called", edit("evaluate", (EVAL_MODE, "    model.eval\n")),
            breaks=("eval-mode",), lose=("test_evaluate",), words=('训练模式',)),
    Variant("eval_forward_outside_no_grad", edit("evaluate", (EVAL_NO_GRAD + EVAL_LOSSES, (
        "    outputs = [(model(x)[0], y) for x, y in batches]\n"
        "    with torch.no_grad():\n"
        "        losses = [cross_entropy(out, y).item() for out, y in outputs]\n"))),
            breaks=("eval-no-grad",), lose=("test_evaluate",), words=('梯度是开着的',)),
    Variant("eval_log_softmax_loss", edit("evaluate", (EVAL_LOSSES, (
        "        losses = [(-F.log_softmax(model(x)[0], -1).gather(-1, y.unsqueeze(-1))).mean().item() "
        "for x, y in batches]\n"))),
            breaks=("eval-own-ce",), lose=("test_evaluate",), words=('练习 3 写的 cross_entropy', '不能调用')),
    # checkpoint
    Variant("ckpt_state_dict_update", edit("checkpoint", ('    model.load_state_dict(saved["model"])\n',
                                                          '    model.state_dict().update(saved["model"])\n')),
            breaks=("ckpt-model",), lose=("test_checkpoint",), words=('模型的参数没有恢复',)),
    Variant("ckpt_recipe_without_schedule", edit("checkpoint", ('Recipe(**saved["recipe"])',
                                                                'Recipe(**{k: v for k, v in saved["recipe"].items() if k != "max_steps"})')),
            breaks=("ckpt-recipe",), lose=("test_checkpoint",), words=('配方和存进去的不一样',)),
    Variant("ckpt_tokenizer_one_short", edit("checkpoint", ("list(range(tokenizer.vocab_size))",
                                                            "list(range(tokenizer.vocab_size - 1))")),
            breaks=("ckpt-tokenizer",), lose=("test_checkpoint",), words=('词表不同',)),
]

# ------------------------------------------------------------------ the training loop

BATCH_LINE = ("        x, y = get_batch(train_data, run.recipe.n_ctx, run.recipe.batch_size, "
              "generator=training.step_generator(step))\n")
SEED_LINE = "        training.seed_step(step)                                   # dropout's random numbers: from the step alone\n"
LOG_LINES = "        step += 1                                                  # steps done\n        run.log(step, loss, x.numel())\n"
EVAL_LINES = "        if run.time_to_evaluate(step):\n            run.evaluated(step, evaluate(model, val_batches))\n"
GIVEN_STEP = {"test_train": ("用正确的 train_step 代替你的之后，这一题是对的", "练习 7 还需要修改")}

LOOP = [
    Variant("loop_starts_at_zero", edit("train", ("    step = run.start_step\n", "    step = 0\n")),
            breaks=("loop-start",), lose=("test_train",), words=('run.start_step',)),
    Variant("loop_steps_before_asking", edit("train", ("    while run.going(step):\n", "    while True:\n"),
                                             (EVAL_LINES, EVAL_LINES + "        if not run.going(step):\n            break\n")),
            breaks=("loop-going",), lose=("test_train",), words=('没有先问 run.going',)),
    Variant("loop_shared_generator", edit("train", ("    while run.going(step):\n",
                                                    "    gen = training.step_generator(run.start_step)\n    while run.going(step):\n"),
                                          ("generator=training.step_generator(step))", "generator=gen)")),
            breaks=("loop-batch",), lose=("test_train",), words=('step_generator',)),
    Variant("loop_no_generator", edit("train", (", generator=training.step_generator(step))", ")")),
            breaks=("loop-batch",), lose=("test_train",), words=('step_generator',)),
    Variant("loop_no_seed_step", edit("train", (SEED_LINE, "")),
            breaks=("loop-seed",), lose=("test_train",), words=('seed_step',)),
    Variant("loop_seeds_once", edit("train", (SEED_LINE, ""), ("    while run.going(step):\n",
                                                               "    training.seed_step(step)\n    while run.going(step):\n")),
            breaks=("loop-seed",), lose=("test_train",), words=('seed_step',)),
    Variant("loop_plan_from_recipe", edit("train", ("run.plan(step))", "training.plan_for(run.recipe, 1000))")),
            breaks=("loop-plan",), lose=("test_train",), words=('run.plan(step)',)),
    Variant("loop_logs_before_counting", edit("train", (LOG_LINES, (
        "        run.log(step, loss, x.numel())\n        step += 1                                                  # steps done\n"))),
            breaks=("loop-log",), lose=("test_train",), words=('已经走完的步数',)),
    Variant("loop_logs_batch_size", edit("train", ("run.log(step, loss, x.numel())", "run.log(step, loss, run.recipe.batch_size)")),
            breaks=("loop-log",), lose=("test_train",), words=('x.numel()',)),
    Variant("loop_evaluates_every_step", edit("train", (EVAL_LINES, "        run.evaluated(step, evaluate(model, val_batches))\n")),
            breaks=("loop-evaluate",), lose=("test_train",), words=('每一步都评估',)),
    Variant("loop_never_evaluates", edit("train", (EVAL_LINES, "")),
            breaks=("loop-evaluate",), lose=("test_train",), words=('没有评估',)),
    Variant("loop_evaluates_train_batch", edit("train", ("            run.evaluated(step, evaluate(model, val_batches))\n",
                                                         "            run.evaluated(step, evaluate(model, [(x, y)]))\n")),
            breaks=("loop-evaluate",), lose=("test_train",), words=('验证批量',)),
    Variant("loop_no_finish", edit("train", ("    return run.finish(step, evaluate(model, val_batches))",
                                             "    evaluate(model, val_batches)\n    return run.history")),
            breaks=("loop-finish",), lose=("test_train",), words=('run.finish',)),
    Variant("loop_finish_with_train_loss", edit("train", ("    return run.finish(step, evaluate(model, val_batches))",
                                                          "    return run.finish(step, loss)")),
            breaks=("loop-finish",), lose=("test_train",), words=('交给 run.finish 的损失',)),
    # a wrong train_step costs exercise 7 alone: the loop keeps its marks with a correct one in its place
    Variant("step_no_zero_grad_loop_given_step", edit("train_step", (STEP_FIRST, "")),
            lose=("test_train_step",), words=("梯度没有清零",), said=GIVEN_STEP),
]

BUGS += SECOND + LOOP

CORRECT += [
    # a for loop over itertools.count that breaks when run says stop, keyword arguments, names of its own; an
    # evaluation that takes the loss the model returns (your GPT computes it with your cross_entropy)
    Variant("ok_for_loop_and_model_loss", {
        "train": """import itertools

from helpers import training


def train(model, optimizer, train_data, val_batches, run):
    done = run.start_step
    for step in itertools.count(run.start_step):
        if not run.going(step):
            break
        training.seed_step(step)
        inputs, targets = get_batch(train_data, block_size=run.recipe.n_ctx, batch_size=run.recipe.batch_size,
                                    generator=training.step_generator(step))
        value = train_step(model, optimizer, inputs, targets, step, plan=run.plan(step))
        done = step + 1
        run.log(done, value, inputs.numel())
        if run.time_to_evaluate(done):
            run.evaluated(done, evaluate(model, val_batches))
    final = evaluate(model, val_batches)
    return run.finish(done, final)
""",
        "evaluate": """def evaluate(model, batches):
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            return sum(model(x, y)[1].item() for x, y in batches) / len(batches)
    finally:
        model.train(mode)
"""}),
]
