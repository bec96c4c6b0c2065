"""Known wrong answers (and correct variants) for ch07_gpt, and the rules its
exercises state (RULES).

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
            lose=("test_tokenizer",), words=("悄悄跳过",),
            said={"test_checkpoint": ("用正确的 CharTokenizer 代替你的之后，这一题是对的", "练习 1 还需要修改")}),
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
               ("loss = cross_entropy(logits, targets)",
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
"""), lose=("test_cross_entropy",), words=("溢出", "log-sum-exp"), said=KEPT_CE),
    Variant("ce_sum", edit("cross_entropy", ("return (log_sum_exp - right).mean()", "return (log_sum_exp - right).sum()")),
            lose=("test_cross_entropy",), words=("和：要取平均",), said=KEPT_CE),
    Variant("ce_wrong_axis", edit("cross_entropy", (
        "m = z.max(dim=-1, keepdim=True).values                         # the largest score of each row\n"
        "    log_sum_exp = m.squeeze(-1) + torch.log(torch.exp(z - m).sum(dim=-1))",
        "m = z.max(dim=0, keepdim=True).values\n"
        "    log_sum_exp = (m + torch.log(torch.exp(z - m).sum(dim=0, keepdim=True)))[0, ids]")),
            lose=("test_cross_entropy",), words=("沿错了维度",), said=KEPT_CE),
    Variant("ce_uses_torch", ce("    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))\n"),
            lose=("test_cross_entropy",), words=("从零实现", "torch.nn.functional.cross_entropy"), said=KEPT_CE),
    Variant("ce_uses_log_softmax", ce("""    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).mean()
"""), lose=("test_cross_entropy",), words=("从零实现", "log_softmax"), said=KEPT_CE),
    # learning_rate
    Variant("lr_warmup_from_zero", edit("learning_rate", ("peak_lr * (step + 1) / warmup_steps", "peak_lr * step / warmup_steps")),
            lose=("test_learning_rate",), words=("预热差了一步",), said=GIVEN_LR),
    Variant("lr_no_floor", edit("learning_rate", ("    if step >= max_steps:\n        return min_lr\n", "")),
            lose=("test_learning_rate",), words=("余弦又升回去了",), said=GIVEN_LR),
    Variant("lr_never_floor", edit("learning_rate", ("(step - warmup_steps) / (max_steps - warmup_steps)",
                                                     "(step - warmup_steps) / max_steps")),
            lose=("test_learning_rate",), words=("到不了底",), said=GIVEN_LR),
    Variant("lr_not_done", {"learning_rate": "def learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr):\n"
                                             "    raise NotImplementedError()\n"},
            lose=("test_learning_rate",), words=("还没有实现",), said=GIVEN_LR),
    # train_step
    Variant("step_no_zero_grad", edit("train_step", ("    optimizer.zero_grad(set_to_none=True)\n", "")),
            lose=("test_train_step",), words=("梯度没有清零",)),
    Variant("step_clip_after", edit("train_step", (
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip)\n    optimizer.step()\n",
        "    optimizer.step()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip)\n")),
            lose=("test_train_step",), words=("裁剪没有作用",)),
    Variant("step_lr_set_after_update", edit("train_step", (
        "    lr = learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)\n"
        "    for group in optimizer.param_groups:\n        group[\"lr\"] = lr\n", ""), (
        "    optimizer.step()\n",
        "    optimizer.step()\n    for group in optimizer.param_groups:                 # ready for the next step\n"
        "        group[\"lr\"] = learning_rate(step + 1, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)\n")),
            lose=("test_train_step",), words=("落后了一步",)),
    Variant("step_targets_not_shifted", edit("train_step", ("loss = cross_entropy(logits, y)", "loss = cross_entropy(logits, x)")),
            lose=("test_train_step",), words=("拿 x 当目标",)),
    # evaluate
    Variant("eval_train_mode", edit("evaluate", ("    model.eval()\n", "")),
            lose=("test_evaluate",), words=("训练模式",)),
    Variant("eval_with_grad", edit("evaluate", ("    with torch.no_grad():                                          # nothing kept for a backward pass\n",
                                                "    if True:\n")),
            lose=("test_evaluate",), words=("梯度是开着的",)),
    Variant("eval_forced_train", edit("evaluate", ("model.train(was_training)", "model.train()")),
            lose=("test_evaluate",), words=("一律 model.train()",)),
    # checkpoint
    Variant("ckpt_no_optimizer", edit("checkpoint", ('"optimizer": optimizer.state_dict(), ', ""),
                                      ('    optimizer.load_state_dict(saved["optimizer"])\n', "")),
            lose=("test_checkpoint",), words=("优化器从头开始",)),
    Variant("ckpt_no_step", edit("checkpoint", ('return saved["step"], ', "return 0, ")),
            lose=("test_checkpoint",), words=("步数不对",)),
]

CORRECT += [
    # nanoGPT's loop (the loss from the model, zero_grad after the step), a LambdaLR resumed at this step,
    # torch.logsumexp with a one-hot pick, an evaluation decorated with no_grad that weighs by tokens,
    # and a checkpoint that pickles the recipe
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
    Variant("ok_lambdalr_pickled_recipe", {
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


def save_checkpoint(path, model, optimizer, step, recipe, tokenizer):
    state = {
        "model_state_dict": model.state_dict(),
        "optimizer_state_dict": optimizer.state_dict(),
        "iteration": step,
        "recipe": recipe,
        "chars": tokenizer.decode(range(tokenizer.vocab_size)),
    }
    tmp = str(path) + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)                            # never a half-written checkpoint


def load_checkpoint(path, model, optimizer):
    state = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model_state_dict"])
    optimizer.load_state_dict(state["optimizer_state_dict"])
    return state["iteration"], state["recipe"], CharTokenizer(state["chars"])
"""}),
]

WORDS_ARE_NOT_CALLS = ("ok_nanogpt_loop_logsumexp",)

# Each rule an exercise states: (the rule, the check that enforces it, the BUGS variant that breaks it).
RULES = [
    ("encode raises a ValueError that names a character outside the vocabulary",
     "check_tokenizer: encode('abXc')", "tok_drops_unknown"),
    ("y is x shifted right by one", "check_get_batch: y == x + 1 on arange data", "batch_y_not_shifted"),
    ("the start is drawn from 0 … len(data) - block_size - 1", "check_get_batch: starts within range, all drawn",
     "batch_start_past_end"),
    ("cross_entropy is written from scratch (no F.cross_entropy, nll_loss, softmax, log_softmax)",
     "check_cross_entropy: grading.core.forbidden(CE_FORBIDDEN)", "ce_uses_torch"),
    ("log_softmax is one of the calls cross_entropy may not make", "check_cross_entropy: CE_FORBIDDEN",
     "ce_uses_log_softmax"),
    ("the loss is the mean over all positions", "check_cross_entropy: float64 reference, (B, T, V) case", "ce_sum"),
    ("subtract each row's maximum first (the log-sum-exp trick)", "check_cross_entropy: extreme logits", "ce_no_max"),
    ("normalise over the vocabulary, the last axis", "check_cross_entropy: float64 reference", "ce_wrong_axis"),
    ("lm_head.weight is wte.weight", "check_gpt: _gpt_structure", "gpt_untied_head"),
    ("position t sees positions ≤ t only", "check_gpt_causal: _gpt_causality", "gpt_no_causal_mask"),
    ("T > n_ctx raises a ValueError that mentions n_ctx", "check_gpt: _gpt_lengths", "gpt_no_length_check"),
    ("feed the model the last n_ctx tokens only", "check_generate: _gen_greedy with a start longer than n_ctx",
     "gen_no_crop"),
    ("the temperature divides the logits before softmax", "check_generate: _gen_sampling at temperature 2",
     "gen_temperature_after_softmax"),
    ("sample with torch.multinomial, do not take the argmax", "check_generate: _gen_sampling frequencies",
     "gen_greedy_always"),
    ("top-k keeps the k highest scores", "check_generate: _gen_sampling with top_k=3", "gen_topk_smallest"),
    ("step 0 runs at peak_lr / warmup_steps", "check_learning_rate: float64 reference", "lr_warmup_from_zero"),
    ("from max_steps on the rate stays at min_lr", "check_learning_rate: steps past max_steps", "lr_no_floor"),
    ("the cosine runs over max_steps - warmup_steps steps", "check_learning_rate: steps before max_steps",
     "lr_never_floor"),
    ("zero the gradients every step", "check_train_step: against the grader's step (SGD)", "step_no_zero_grad"),
    ("clip after backward and before optimizer.step()", "check_train_step: grad_clip=0.05", "step_clip_after"),
    ("this step's rate is learning_rate(step, ...), set before the update", "check_train_step: six steps",
     "step_lr_set_after_update"),
    ("the loss is cross_entropy(logits, y)", "check_train_step: the loss returned", "step_targets_not_shifted"),
    ("evaluate in eval() mode", "check_evaluate: dropout 0.5", "eval_train_mode"),
    ("evaluate under torch.no_grad()", "check_evaluate: torch.is_grad_enabled() in forward", "eval_with_grad"),
    ("restore the mode the model was in", "check_evaluate: a model already in eval mode", "eval_forced_train"),
    ("the checkpoint keeps the optimizer's state", "check_checkpoint: resumed losses equal", "ckpt_no_optimizer"),
    ("load_checkpoint returns the saved step", "check_checkpoint: the step returned", "ckpt_no_step"),
]
