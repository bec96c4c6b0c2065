"""Hidden tests of ch07_gpt: CharTokenizer, get_batch, cross_entropy (from
scratch, against a float64 reference), GPT (structure, loss, causality,
memorising a batch), generate (cropping, greedy, temperature, top-k, sampling
statistics with a fixed generator), and the training loop: learning_rate,
train_step (against the grader's own step and its known wrong versions),
evaluate (eval mode, no gradients, the mode restored) and the checkpoint (a
resumed run's losses equal an uninterrupted run's).

Exercises that call earlier ones are graded on their own (``on_its_own``):
GPT and the loop call the student's cross_entropy, train_step their
learning_rate, load_checkpoint their CharTokenizer."""
from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.i18n import t

from .cases import F32, Check, Earlier, Tol, compare, on_its_own, passes, same, value_failure
from .core import (
    SOFTMAX_FAMILY,
    Bug,
    ForbiddenCall,
    GradingFailure,
    as_f64,
    call,
    expect_autograd,
    failure,
    passed,
    seeded,
    show,
)

_RAISED = object()


def _catching(fn):
    """``fn`` returning (_RAISED, exception) instead of raising, so that a
    check can diagnose an expected kind of crash itself."""
    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (NotImplementedError, ForbiddenCall):
            raise
        except Exception as exc:  # noqa: BLE001
            return (_RAISED, exc)
    return run


def _raised(out):
    return out[1] if isinstance(out, tuple) and len(out) == 2 and out[0] is _RAISED else None


def _fail(msg_zh: str, msg_en: str, bug: Bug | None = None) -> GradingFailure:
    msg = t(msg_zh, msg_en)
    if bug is not None:
        msg += "\n" + t("  诊断：", "  Diagnosis: ") + bug.describe()
    return GradingFailure(msg)


# ================================================================= tokenizer

TOK_BUGS = {
    "unsorted": Bug("tokenizer_unsorted_vocab",
                    "编号是字符第一次出现的顺序，而不是排序后的位置：要用 sorted(set(text))。",
                    "ids follow the order in which characters first appear, not the sorted order: use "
                    "sorted(set(text)).", None),
    "size": Bug("tokenizer_vocab_size_wrong",
                "vocab_size 不等于不同字符的个数（len(set(text))）。",
                "vocab_size is not the number of distinct characters (len(set(text))).", None),
    "dropped": Bug("tokenizer_drops_unknown",
                   "词表外的字符被悄悄跳过了：编码结果比原文短，后面的内容全部错位。应抛出 ValueError 并写出是哪个字符。",
                   "characters outside the vocabulary are silently skipped: the encoding is shorter than the text "
                   "and everything after it is misaligned. Raise a ValueError that names the character.", None),
    "mapped": Bug("tokenizer_maps_unknown",
                  "词表外的字符被悄悄编成了某个已有的编号：应抛出 ValueError 并写出是哪个字符。",
                  "a character outside the vocabulary is silently given an existing id: raise a ValueError that "
                  "names the character.", None),
}


def _as_ids(x, label):
    try:
        ids = [int(i) for i in x]
    except Exception:
        raise GradingFailure(t(f"{label}：应返回整数列表，实际得到 {type(x).__name__}。",
                               f"{label}: expected a list of integers, got {type(x).__name__}.")) from None
    return ids


def check_tokenizer(CharTokenizer) -> None:
    passed("CharTokenizer", _tokenizer_checks(CharTokenizer))


def _tokenizer_checks(CharTokenizer) -> int:
    what = "CharTokenizer"
    n = 0
    texts = ["hello world", "To be, or not to be:\nthat is the question.\n", "床前明月光，\n疑是地上霜。\n",
             "aaaa", "zyx\nabc ZYX"]
    for text in texts:
        label = f"{what}({text!r})"
        tok = call(CharTokenizer, text, what=label)
        chars = sorted(set(text))
        size = getattr(tok, "vocab_size", None)
        n += 1
        if size != len(chars):
            raise failure(f"{label}.vocab_size", str(len(chars)), repr(size), TOK_BUGS["size"])
        ids = _as_ids(call(tok.encode, text, what=f"{label}.encode"), f"{label}.encode")
        expected = [chars.index(c) for c in text]
        n += 1
        if ids != expected:
            first_seen = list(dict.fromkeys(text))
            bug = TOK_BUGS["unsorted"] if ids == [first_seen.index(c) for c in text] else None
            raise failure(f"{label}.encode({text!r})", str(expected[:12]), str(ids[:12]), bug)
        back = call(tok.decode, ids, what=f"{label}.decode")
        n += 1
        if back != text:
            raise failure(f"{label}.decode(encode(s))", repr(text), repr(back))
        back = call(tok.decode, torch.tensor(ids), what=t(f"{label}.decode(整数张量)", f"{label}.decode(int tensor)"))
        n += 1
        if back != text:
            raise failure(t(f"{label}.decode(整数张量)", f"{label}.decode(int tensor)"), repr(text), repr(back),
                          hint=t("把张量里的元素转成 int（int(i)）再查表。", "turn tensor elements into int (int(i)) first."))
    tok = call(CharTokenizer, "abc", what=f"{what}('abc')")
    if _as_ids(call(tok.encode, "", what=f"{what}.encode('')"), "encode('')") != [] or \
            call(tok.decode, [], what=f"{what}.decode([])") != "":
        raise _fail("encode('') 应返回 []，decode([]) 应返回 ''。", "encode('') must return [] and decode([]) ''.")
    n += 1
    # a character outside the vocabulary
    for probe, bad in (("abXc", "X"), ("a\tb", "\t")):
        label = f"{what}('abc').encode({probe!r})"
        try:
            out = tok.encode(probe)
        except (ValueError, KeyError) as err:
            n += 1
            if bad not in str(err) and repr(bad) not in str(err):
                raise _fail(f"{label}：抛出了 {type(err).__name__}，但信息里没有写出是哪个字符（{bad!r}）：{err}",
                            f"{label}: raised {type(err).__name__}, but the message does not name the character "
                            f"({bad!r}): {err}") from None
            continue
        except Exception as err:
            raise _fail(f"{label}：应抛出 ValueError，实际抛出 {type(err).__name__}: {err}",
                        f"{label}: expected a ValueError, got {type(err).__name__}: {err}") from None
        got = _as_ids(out, label)
        bug = TOK_BUGS["dropped"] if len(got) < len(probe) else TOK_BUGS["mapped"]
        raise failure(label, t(f"ValueError（{bad!r} 不在词表里）", f"a ValueError ({bad!r} is not in the vocabulary)"),
                      str(got), bug)
    return n


# ================================================================= get_batch

BATCH_BUGS = {
    "not_shifted": Bug("batch_y_not_shifted",
                       "y 和 x 完全一样：目标要向右挪一格，y[b, t] 是 x[b, t] 后面的那个 token（data[i+1 : i+1+block_size]）。",
                       "y equals x: the targets must be shifted right by one, y[b, t] is the token after x[b, t] "
                       "(data[i+1 : i+1+block_size]).", None),
    "shift_two": Bug("batch_y_shifted_by_two",
                     "y 向右挪了两格：应该只挪一格（data[i+1 : i+1+block_size]）。",
                     "y is shifted by two: shift by exactly one (data[i+1 : i+1+block_size]).", None),
    "past_end": Bug("batch_start_past_end",
                    "起点可能越界：起点的上限应是 len(data) - block_size - 1（torch.randint(len(data) - block_size, ...)），"
                    "否则 y 的最后一个元素会超出 data 的末尾。",
                    "a start index can run past the end: the largest start is len(data) - block_size - 1 "
                    "(torch.randint(len(data) - block_size, ...)); otherwise the last element of y lies beyond the "
                    "end of data.", None),
    "last_start": Bug("batch_last_start_missing",
                      "最后一个合法起点 len(data) - block_size - 1 永远抽不到：torch.randint 的上界不包含在内，"
                      "应写 torch.randint(len(data) - block_size, ...)。",
                      "the last valid start, len(data) - block_size - 1, is never drawn: torch.randint's upper bound "
                      "is exclusive, so write torch.randint(len(data) - block_size, ...).", None),
    "generator": Bug("batch_ignores_generator",
                     "没有把 generator 传给 torch.randint：同一个种子两次取到的批量不同，训练无法复现。",
                     "the generator is not passed to torch.randint: the same seed gives two different batches, so "
                     "training cannot be repeated.", None),
}


def _batch(get_batch, data, block_size, batch_size, seed, label):
    out = call(_catching(get_batch), data, block_size, batch_size, generator=seeded(seed), what=label)
    exc = _raised(out)
    if exc is not None:
        bug = BATCH_BUGS["past_end"] if isinstance(exc, (RuntimeError, IndexError)) else None
        raise _fail(f"{label}：你的代码抛出了 {type(exc).__name__}: {exc}",
                    f"{label}: your code raised {type(exc).__name__}: {exc}", bug)
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(z, torch.Tensor) for z in out)):
        raise _fail(f"{label}：应返回两个张量组成的元组 (x, y)，实际得到 {type(out).__name__}。",
                    f"{label}: expected a tuple (x, y) of two tensors, got {type(out).__name__}.")
    return out


def check_get_batch(get_batch) -> None:
    what = "get_batch"
    n = 0
    for N, block, batch, seed in ((50, 8, 6, 1), (300, 16, 32, 2), (40, 1, 5, 3), (12, 11, 4, 4)):
        base = 1000
        data = torch.arange(base, base + N)
        label = f"{what}(data = arange({N}), block_size={block}, batch_size={batch})"
        x, y = _batch(get_batch, data, block, batch, seed, label)
        n += 1
        for name, z in (("x", x), ("y", y)):
            if tuple(z.shape) != (batch, block):
                raise failure(t(f"{label}：{name} 的形状", f"{label}: shape of {name}"), str((batch, block)),
                              str(tuple(z.shape)))
            if z.dtype != torch.long:
                raise failure(t(f"{label}：{name} 的 dtype", f"{label}: dtype of {name}"), "torch.int64", str(z.dtype))
        if block > 1 and not torch.equal(x[:, 1:] - x[:, :-1], torch.ones(batch, block - 1, dtype=torch.long)):
            raise failure(t(f"{label}：x 的每一行", f"{label}: each row of x"),
                          t("data 中连续的一段", "a contiguous slice of data"), show(x[0]))
        starts = x[:, 0] - base
        if (starts < 0).any() or (starts > N - block - 1).any():
            raise failure(t(f"{label}：起点", f"{label}: start indices"), f"0 … {N - block - 1}",
                          str(sorted(set(starts.tolist()))), BATCH_BUGS["past_end"])
        if not torch.equal(y, x + 1):
            shift = (y - x)[0, 0].item()
            bug = BATCH_BUGS["not_shifted"] if torch.equal(y, x) else BATCH_BUGS["shift_two"] if \
                torch.equal(y, x + 2) else None
            raise failure(t(f"{label}：y 与 x 的关系", f"{label}: y against x"),
                          t("y = x 向右挪一格（y[b, t] = x[b, t] 的下一个 token）", "y = x shifted by one"),
                          t(f"y[0] - x[0] = {shift}（x[0] = {x[0, :6].tolist()}，y[0] = {y[0, :6].tolist()}）",
                            f"y[0] - x[0] = {shift} (x[0] = {x[0, :6].tolist()}, y[0] = {y[0, :6].tolist()})"), bug)
    # every start can be drawn, none beyond the end
    N, block = 9, 5                          # starts 0, 1, 2, 3
    seen = set()
    for seed in range(10, 20):
        x, _ = _batch(get_batch, torch.arange(N), block, 40, seed, f"{what}(arange({N}), block_size={block}, 40)")
        seen |= set(x[:, 0].tolist())
    n += 1
    if seen != {0, 1, 2, 3}:
        bug = BATCH_BUGS["last_start"] if seen == {0, 1, 2} else BATCH_BUGS["past_end"] if max(seen) > 3 else None
        raise failure(t(f"{what}：len(data) = 9、block_size = 5 时 400 次抽到的起点",
                        f"{what}: starts drawn in 400 samples with len(data) = 9, block_size = 5"),
                      "{0, 1, 2, 3}", str(sorted(seen)), bug)
    # reproducible with a generator, different across seeds
    data = torch.arange(500)
    a = _batch(get_batch, data, 8, 16, 7, f"{what}(..., generator=seed 7)")
    b = _batch(get_batch, data, 8, 16, 7, f"{what}(..., generator=seed 7)")
    c = _batch(get_batch, data, 8, 16, 8, f"{what}(..., generator=seed 8)")
    n += 1
    if not torch.equal(a[0], b[0]):
        raise failure(t(f"{what}：同一个种子调用两次", f"{what}: the same seed twice"),
                      t("相同的批量", "the same batch"), t("不同的批量", "different batches"), BATCH_BUGS["generator"])
    if torch.equal(a[0], c[0]):
        raise _fail(f"{what}：不同的种子给出了相同的批量，起点没有用 generator 随机抽取。",
                    f"{what}: different seeds gave the same batch; the starts are not drawn with the generator.")
    passed(what, n)


# ================================================================= GPT

GPT_BUGS = {
    "untied": Bug("gpt_lm_head_not_tied",
                  "lm_head 没有与词嵌入共享权重：要写 self.lm_head.weight = self.wte.weight（同一个 Parameter）。"
                  "不共享会多出一整张 vocab_size × d_model 的矩阵。",
                  "the lm_head is not tied to the token embedding: write self.lm_head.weight = self.wte.weight (the "
                  "same Parameter). Untied, it adds a whole vocab_size × d_model matrix.", None),
    "copied": Bug("gpt_lm_head_copied",
                  "lm_head 的权重是 wte 的一份拷贝（数值相同但不是同一个 Parameter），训练时两者会分开变化：要直接赋值同一个对象。",
                  "the lm_head weight is a copy of wte (equal values but a different Parameter), so training "
                  "updates them separately: assign the very same object.", None),
    "list": Bug("gpt_blocks_plain_list",
                "blocks 是普通的 Python 列表：里面的参数不会被注册，优化器看不到它们。要用 nn.ModuleList。",
                "blocks is a plain Python list: the parameters inside are not registered and the optimiser never "
                "sees them. Use nn.ModuleList.", None),
    "no_check": Bug("gpt_no_length_check",
                    "forward 开头没有检查 T > n_ctx：应抛出 ValueError 并写出 n_ctx，而不是让位置嵌入查表越界。",
                    "forward does not check T > n_ctx first: raise a ValueError that mentions n_ctx instead of "
                    "letting the position lookup run out of range.", None),
    "off_by_one": Bug("gpt_length_check_off_by_one",
                      "长度检查差了一：T == n_ctx 是允许的，只有 T > n_ctx 才报错。",
                      "the length check is off by one: T == n_ctx is allowed, only T > n_ctx is an error.", None),
    "init": Bug("gpt_init_too_large",
                "初始损失远大于 ln V：初始 logits 太大，通常是权重初始化太大（nn.Embedding 默认标准差为 1）或初始化被覆盖了。",
                "the initial loss is far above ln V: the first logits are too large, usually because weights are "
                "initialised too big (nn.Embedding defaults to std 1) or the initialisation was overwritten.", None),
    "loss_sum": Bug("gpt_loss_not_mean",
                    "loss 不是所有位置交叉熵的平均值（是求和，或者只算了一部分位置）。",
                    "the loss is not the cross-entropy averaged over all positions (a sum, or only some positions).",
                    None),
    "sees_next": Bug("gpt_sees_next_token",
                     "位置 i 的 logits 看到了位置 i+1 的 token：因果掩码错了一格（例如 torch.tril(..., diagonal=1)，"
                     "或 triu 的对角线取错），模型在训练时直接抄答案。",
                     "the logits at position i see the token at position i+1: the causal mask is off by one (e.g. "
                     "torch.tril(..., diagonal=1), or the wrong diagonal of triu), so the model copies the answer "
                     "during training.", None),
    "no_mask": Bug("gpt_no_causal_mask",
                   "没有因果掩码：前面位置的 logits 随后面的 token 变化（F.scaled_dot_product_attention 要传 is_causal=True，"
                   "手写时要在 softmax 之前把上三角设为 -inf）。",
                   "there is no causal mask: early logits change with later tokens (pass is_causal=True to "
                   "F.scaled_dot_product_attention, or set the upper triangle to -inf before softmax when writing it "
                   "by hand).", None),
}


def _build(GPT, GPTConfig, label, **cfg):
    config = call(GPTConfig, what=f"GPTConfig({cfg})", **cfg)
    return call(GPT, config, what=label)


def _forward(model, idx, label, targets=None, V=None):
    """(logits, loss), with the logits' type and shape (B, T, V) validated before anyone indexes them."""
    out = call(model, idx, what=label) if targets is None else call(model, idx, targets, what=label)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise _fail(f"{label}：forward 应返回 (logits, loss)，实际得到 {type(out).__name__}。",
                    f"{label}: forward must return (logits, loss), got {type(out).__name__}.")
    logits = out[0]
    want = (*idx.shape, V) if V is not None else None
    if not isinstance(logits, torch.Tensor) or (want is not None and tuple(logits.shape) != want):
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise failure(t(f"{label}：logits 的形状", f"{label}: shape of logits"), str(want), str(got),
                      hint=t("logits 的形状是 (B, T, vocab_size)：每个位置对词表里每个 token 打一个分。",
                             "logits have shape (B, T, vocab_size): one score per vocabulary token at every position."))
    return out


def _gpt_structure(model, label, V, C, L, D) -> None:
    for attr in ("wte", "blocks", "ln_f", "lm_head"):
        if not hasattr(model, attr):
            raise _fail(f"{label}：缺少属性 {attr}。", f"{label}: attribute {attr} is missing.")
    if not isinstance(model.wte, nn.Embedding) or tuple(model.wte.weight.shape) != (V, D):
        raise failure(f"{label}.wte", f"nn.Embedding({V}, {D})", repr(model.wte)[:80])
    if hasattr(model, "wpe") and isinstance(model.wpe, nn.Embedding) and model.wpe.num_embeddings != C:
        raise failure(f"{label}.wpe.num_embeddings", str(C), str(model.wpe.num_embeddings),
                      hint=t("每个位置 0 … n_ctx-1 一行。", "one row per position 0 … n_ctx-1."))
    if not isinstance(model.blocks, nn.Module):
        raise failure(f"{label}.blocks", "nn.ModuleList", type(model.blocks).__name__, GPT_BUGS["list"])
    if len(model.blocks) != L:
        raise failure(f"len({label}.blocks)", str(L), str(len(model.blocks)))
    head_w = getattr(model.lm_head, "weight", None)
    if head_w is not model.wte.weight:
        bug = GPT_BUGS["copied"] if isinstance(head_w, torch.Tensor) and head_w.shape == model.wte.weight.shape \
            and torch.equal(head_w, model.wte.weight) else GPT_BUGS["untied"]
        raise failure(f"{label}: model.lm_head.weight is model.wte.weight", "True", "False", bug)
    if getattr(model.lm_head, "bias", None) is not None:
        raise _fail(f"{label}：lm_head 不应有偏置（bias=False），它和词嵌入共享的只有权重矩阵。",
                    f"{label}: lm_head must have no bias (bias=False); only the weight matrix is shared.")


def _gpt_loss(model, V) -> None:
    """No targets: loss None. With targets: the mean cross-entropy of the returned logits."""
    gen = seeded(71)
    idx, targets = torch.randint(V, (3, 10), generator=gen), torch.randint(V, (3, 10), generator=gen)
    with torch.no_grad():
        _, loss = _forward(model, idx, t("GPT(idx 形状 (3, 10))", "GPT(idx of shape (3, 10))"), V=V)
        if loss is not None:
            raise failure(t("GPT(idx)：没有 targets 时的 loss", "GPT(idx): loss without targets"), "None", show(loss))
        logits, loss = _forward(model, idx, "GPT(idx, targets)", targets, V=V)
    ref = F.cross_entropy(logits.double().reshape(-1, V), targets.reshape(-1))
    label = t("GPT(idx, targets)：loss（用返回的 logits 算出的平均交叉熵）",
              "GPT(idx, targets): loss (mean cross-entropy of the returned logits)")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise failure(label, t("一个标量张量", "a scalar tensor"), show(loss), GPT_BUGS["loss_sum"])
    verdict = compare(loss.reshape(()), ref)
    if verdict.problem is not None:
        raise value_failure(label, loss.reshape(()), ref, F32, verdict, GPT_BUGS["loss_sum"])


def _gpt_lengths(model, C, V) -> None:
    """n_ctx tokens are fine, n_ctx + 1 is a ValueError that says so, one token works."""
    with torch.no_grad():
        try:
            model(torch.zeros(2, C, dtype=torch.long))
        except ValueError as err:
            raise _fail(f"GPT：长度正好等于 n_ctx = {C} 的输入也报错了：{err}",
                        f"GPT: an input of exactly n_ctx = {C} tokens raised: {err}", GPT_BUGS["off_by_one"]) from None
        except Exception as err:
            raise _fail(f"GPT：长度 {C} 的输入出错：{type(err).__name__}: {err}",
                        f"GPT: an input of length {C} failed: {type(err).__name__}: {err}") from None
        try:
            model(torch.zeros(1, C + 1, dtype=torch.long))
        except ValueError as err:
            if "n_ctx" not in str(err) and str(C) not in str(err):
                raise _fail(f"GPT：ValueError 的信息应提到 n_ctx（= {C}），实际是：{err}",
                            f"GPT: the ValueError should mention n_ctx (= {C}); it says: {err}") from None
        except Exception as err:
            raise _fail(f"GPT：长度 {C + 1} > n_ctx 的输入抛出了 {type(err).__name__}，而不是 ValueError：{err}",
                        f"GPT: an input of length {C + 1} > n_ctx raised {type(err).__name__}, not ValueError: {err}",
                        GPT_BUGS["no_check"]) from None
        else:
            raise _fail(f"GPT：长度 {C + 1} > n_ctx = {C} 的输入没有报错。",
                        f"GPT: an input of length {C + 1} > n_ctx = {C} raised nothing.", GPT_BUGS["no_check"])
        _forward(model, torch.tensor([[3]]), t("GPT(一个 token)", "GPT(a single token)"), V=V)


def _gpt_initial_loss(GPT, GPTConfig) -> None:
    """At initialisation the loss is about ln V (mean of three seeds)."""
    V = 65
    losses = []
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        m = _build(GPT, GPTConfig, f"GPT(vocab_size={V}, n_ctx=32, n_layer=2, n_head=4, d_model=64)",
                   vocab_size=V, n_ctx=32, n_layer=2, n_head=4, d_model=64).eval()
        g = seeded(seed)
        with torch.no_grad():
            _, l0 = _forward(m, torch.randint(V, (8, 32), generator=g), "GPT(idx, targets)",
                             torch.randint(V, (8, 32), generator=g), V=V)
        losses.append(float(l0))
    mean = sum(losses) / len(losses)
    if abs(mean - math.log(V)) > 0.25:
        raise failure(t(f"GPT：随机初始化时的损失（V = {V}，三个种子的平均）",
                        f"GPT: loss at initialisation (V = {V}, mean of three seeds)"),
                      f"≈ ln {V} = {math.log(V):.3f} ± 0.25", f"{mean:.3f}", GPT_BUGS["init"] if mean > math.log(V) else None)


def _gpt_dropout_eval(GPT, GPTConfig, V, C) -> None:
    """dropout is accepted, and eval() makes the model deterministic."""
    torch.manual_seed(4)
    m = _build(GPT, GPTConfig, "GPT(..., dropout=0.2)", vocab_size=V, n_ctx=C, n_layer=1, n_head=2, d_model=16,
               dropout=0.2).eval()
    idx = torch.randint(V, (3, 10), generator=seeded(72))
    with torch.no_grad():
        a = _forward(m, idx, "GPT(dropout=0.2).eval()", V=V)[0]
        b = _forward(m, idx, "GPT(dropout=0.2).eval()", V=V)[0]
    if not torch.equal(a, b):
        raise _fail("GPT：dropout=0.2 的模型在 eval() 模式下两次输出不同：dropout 应只在训练时生效（self.training）。",
                    "GPT: with dropout=0.2 the model gives two different outputs in eval() mode: dropout must "
                    "only act while training (self.training).")


def check_gpt(GPT, GPTConfig) -> None:
    with on_its_own(GPT, (CE_EARLIER,)):
        _check_gpt(GPT, GPTConfig)
        passed("GPT", 7)                      # here: a check seals with its own name


def _check_gpt(GPT, GPTConfig) -> None:
    V, C, L, H, D = 37, 16, 2, 4, 32
    torch.manual_seed(0)
    label = f"GPT(GPTConfig(vocab_size={V}, n_ctx={C}, n_layer={L}, n_head={H}, d_model={D}))"
    model = _build(GPT, GPTConfig, label, vocab_size=V, n_ctx=C, n_layer=L, n_head=H, d_model=D)
    _gpt_structure(model, label, V, C, L, D)
    model.eval()
    _gpt_loss(model, V)
    _gpt_lengths(model, C, V)
    _gpt_initial_loss(GPT, GPTConfig)
    _gpt_dropout_eval(GPT, GPTConfig, V, C)


def _changed_positions(la, lb, p) -> list[int]:
    """Positions < p whose logits differ between the two runs by more than float32 rounding."""
    scale = max(float(la.abs().max()), 1.0)
    diff = (la[:, :p] - lb[:, :p]).abs().amax(dim=(0, 2))
    return [i for i in range(p) if diff[i] > F32.atol * scale]


def _gpt_causality(model, V, T) -> None:
    """Changing tokens from position p on leaves the logits at positions < p unchanged."""
    gen = seeded(83)
    a = torch.randint(V, (2, T), generator=gen)
    label = t("GPT(因果性检查)", "GPT(causality check)")
    for p in (5, T - 1, 1):
        b = a.clone()
        b[:, p:] = (b[:, p:] + 1 + torch.randint(V - 1, b[:, p:].shape, generator=gen)) % V
        with torch.no_grad():
            la = _forward(model, a, label, V=V)[0].double()
            lb = _forward(model, b, label, V=V)[0].double()
        changed = _changed_positions(la, lb, p)
        if changed:
            # a one-step leak travels one position further back per layer
            leak = changed == list(range(p - len(changed), p)) and len(changed) <= 2 and len(changed) < p
            raise failure(t(f"GPT：只改动位置 {p} 及以后的 token，位置 0…{p - 1} 的 logits",
                            f"GPT: tokens changed from position {p} on; logits at positions 0…{p - 1}"),
                          t("不变", "unchanged"), t(f"位置 {changed} 变了", f"positions {changed} changed"),
                          GPT_BUGS["sees_next"] if leak else GPT_BUGS["no_mask"])
        if p < T - 1 and (la[:, p:] - lb[:, p:]).abs().max() < 1e-12:
            raise _fail(f"GPT：改动了位置 {p} 之后的 token，后面的 logits 却完全没变：模型没有用到输入？",
                        f"GPT: tokens from position {p} on changed but the logits there did not: is the input used?")


def _gpt_memorises(GPT, GPTConfig) -> None:
    """30 AdamW steps on one small batch bring the loss below 35% of where it started."""
    torch.manual_seed(6)
    V = 24
    model = _build(GPT, GPTConfig, f"GPT(vocab_size={V}, n_ctx=16, n_layer=2, n_head=2, d_model=32)",
                   vocab_size=V, n_ctx=16, n_layer=2, n_head=2, d_model=32)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.0)
    g = seeded(97)
    x, y = torch.randint(V, (4, 16), generator=g), torch.randint(V, (4, 16), generator=g)
    losses = []
    for _ in range(30):
        _, loss = _forward(model, x, t("GPT(训练一步)", "GPT(one training step)"), y, V=V)
        opt.zero_grad()
        call(loss.backward, what="GPT: loss.backward()")
        opt.step()
        losses.append(loss.item())
    if not losses[-1] < 0.35 * losses[0]:
        raise failure(t("GPT：在同一个小批量 (4, 16) 上训练 30 步（AdamW，lr=1e-2）后的损失",
                        "GPT: loss after 30 steps on one small batch (4, 16) (AdamW, lr=1e-2)"),
                      t(f"< 初始损失的 35%（{0.35 * losses[0]:.2f}）", f"< 35% of the initial loss ({0.35 * losses[0]:.2f})"),
                      f"{losses[-1]:.3f}",
                      hint=t("模型记不住一个批量：检查残差连接、参数是否都注册了（nn.ModuleList）、loss 是否接在计算图上。",
                             "the model cannot memorise one batch: check the residual connections, that every "
                             "parameter is registered (nn.ModuleList), and that the loss is attached to the graph."))


def check_gpt_causal(GPT, GPTConfig) -> None:
    with on_its_own(GPT, (CE_EARLIER,)):
        _check_gpt_causal(GPT, GPTConfig)
        passed(t("GPT 的因果性与学习能力", "GPT causality and learning"), 4)


def _check_gpt_causal(GPT, GPTConfig) -> None:
    V = 23
    torch.manual_seed(5)
    model = _build(GPT, GPTConfig, f"GPT(GPTConfig(vocab_size={V}, n_ctx=12, n_layer=2, n_head=2, d_model=16))",
                   vocab_size=V, n_ctx=12, n_layer=2, n_head=2, d_model=16).eval()
    try:                          # in float64 when the model allows it: a leak is then far above rounding
        model64 = copy.deepcopy(model).double()
        with torch.no_grad():
            model64(torch.zeros(1, 3, dtype=torch.long))
    except Exception:
        model64 = model
    _gpt_causality(model64, V, 12)
    _gpt_memorises(GPT, GPTConfig)


# ================================================================= generate

def _bigram(table: torch.Tensor, n_ctx: int) -> nn.Module:
    """A fixed model: the logits after token j are table[j]; it refuses inputs
    longer than n_ctx, like GPT. (Built here, so that the student's generate
    may call it: grading code proper is off limits during a check.)"""

    class Bigram(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", table)
            self.config = SimpleNamespace(n_ctx=n_ctx, vocab_size=table.shape[0])

        def forward(self, idx, targets=None):
            if idx.shape[1] > self.config.n_ctx:
                raise ValueError(f"input of length {idx.shape[1]} is longer than n_ctx = {self.config.n_ctx}")
            return self.table[idx], None

    return Bigram()


GEN_BUGS = {
    "no_crop": Bug("generate_context_not_cropped",
                   "上下文没有裁剪：序列长到超过 n_ctx 后模型就报错了。每一步只喂最后 n_ctx 个 token：idx[:, -n_ctx:]。",
                   "the context is not cropped: once the sequence is longer than n_ctx the model fails. Feed only "
                   "the last n_ctx tokens at each step: idx[:, -n_ctx:].", None),
    "crop_front": Bug("generate_crops_wrong_end",
                      "裁剪时保留了最前面的 n_ctx 个 token（idx[:, :n_ctx]），应该保留最后的 n_ctx 个（idx[:, -n_ctx:]）。",
                      "the crop keeps the first n_ctx tokens (idx[:, :n_ctx]); keep the last n_ctx (idx[:, -n_ctx:]).",
                      None),
    "temp_after": Bug("generate_temperature_after_softmax",
                      "温度用在了 softmax 之后（概率除以温度再归一化等于没变）：温度 2 时的分布和温度 1 一样。要先 logits / temperature 再 softmax。",
                      "the temperature is applied after softmax (dividing probabilities and renormalising changes "
                      "nothing): at temperature 2 the distribution equals the one at 1. Divide the logits by the "
                      "temperature, then softmax.", None),
    "temp_mult": Bug("generate_temperature_multiplied",
                     "logits 乘以了温度，应该除以温度：温度越高分布应越平。",
                     "the logits are multiplied by the temperature; divide them: a higher temperature must flatten "
                     "the distribution.", None),
    "greedy": Bug("generate_always_greedy",
                  "总是取最大值（argmax），没有按概率抽样：要用 torch.multinomial(probs, 1, generator=generator)。",
                  "always takes the argmax instead of sampling from the probabilities: use "
                  "torch.multinomial(probs, 1, generator=generator).", None),
    "topk_small": Bug("generate_topk_smallest",
                      "top-k 保留的是打分最小的 k 个：应保留最大的 k 个（torch.topk 默认 largest=True，再把低于第 k 大的设为 -inf）。",
                      "top-k keeps the k smallest scores: keep the k largest (torch.topk's default largest=True, "
                      "then set everything below the k-th largest to -inf).", None),
    "topk_ignored": Bug("generate_topk_ignored",
                        "top_k 没有起作用：前 k 名之外的 token 也被抽到了。",
                        "top_k has no effect: tokens outside the top k are drawn.", None),
    "generator": Bug("generate_ignores_generator",
                     "没有把 generator 传给 torch.multinomial：同一个种子两次生成的结果不同。",
                     "the generator is not passed to torch.multinomial: the same seed generates two different "
                     "sequences.", None),
    "topk_broadcast": Bug("generate_topk_threshold_shape",
                          "top-k 的阈值形状是 (B,)，和形状为 (B, V) 的 logits 对不上（只有 B = 1 时碰巧能广播）。"
                          "保留最后一维：torch.topk(logits, k).values[:, [-1]]（或 [..., -1:]、.unsqueeze(-1)）。",
                          "the top-k threshold has shape (B,), which does not broadcast against logits of shape (B, V) "
                          "(it only happens to work when B = 1). Keep the last axis: torch.topk(logits, k).values[:, [-1]] "
                          "(or [..., -1:], or .unsqueeze(-1)).", None),
    "last_pos": Bug("generate_wrong_position",
                    "取的不是最后一个位置的 logits：下一个 token 的打分在 logits[:, -1, :]。",
                    "these are not the logits of the last position: the next token's scores are logits[:, -1, :].",
                    None),
}


def _greedy_chain(table, start: list[int], steps: int, n_ctx: int, pick=torch.argmax, crop=lambda s, c: s[-c:]):
    seq = list(start)
    for _ in range(steps):
        ctx = crop(seq, n_ctx)
        seq.append(int(pick(table[ctx[-1]])))
    return seq


def _tv(counts: torch.Tensor, probs: torch.Tensor) -> float:
    freq = counts.double() / counts.sum()
    return 0.5 * float((freq - probs.double()).abs().sum())


_N_CTX = 4
GEN_HINTS = [
    (lambda exc, line: isinstance(exc, ValueError) and "n_ctx" in str(exc), GEN_BUGS["no_crop"]),
    (lambda exc, line: "must match the size of tensor" in str(exc) and any(w in line for w in ("<", ">", "topk", "kth")),
     GEN_BUGS["topk_broadcast"]),
]


def _generate(generate, table, idx, steps, label, **kw):
    """The student's generate on the fixed bigram model, its output's shape and prefix checked."""
    out = call(generate, _bigram(table, _N_CTX), idx.clone(), steps, what=f"generate({label})", hints=GEN_HINTS, **kw)
    want = (idx.shape[0], idx.shape[1] + steps)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise failure(t(f"generate({label})：输出形状", f"generate({label}): output shape"), str(want), str(got),
                      hint=t("返回完整的序列：原来的 idx 加上新生成的 token。",
                             "return the whole sequence: the original idx followed by the new tokens."))
    if not torch.equal(out[:, :idx.shape[1]], idx):
        raise _fail(f"generate({label})：输出的开头应该就是输入的 idx（只裁剪喂给模型的上下文，不裁剪返回值）。",
                    f"generate({label}): the output must start with the input idx (crop only what the model "
                    "sees, not what you return).")
    return out


def _gen_greedy(generate, table) -> None:
    """top_k = 1 is greedy, with a context longer than n_ctx."""
    start = [0, 3, 5, 1, 2, 6]
    label = t("top_k=1，起始长度 6 > n_ctx = 4", "top_k=1, starting length 6 > n_ctx = 4")
    out = _generate(generate, table, torch.tensor([start]), 8, label, top_k=1, generator=seeded(1))[0].tolist()
    expected = _greedy_chain(table, start, 8, _N_CTX)
    if out != expected:
        wrong = (("topk_small", dict(pick=torch.argmin)), ("crop_front", dict(crop=lambda s, c: s[:c])),
                 ("last_pos", dict(crop=lambda s, c: s[-c:][:1])))
        bug = next((GEN_BUGS[k] for k, kw in wrong if out == _greedy_chain(table, start, 8, _N_CTX, **kw)), None)
        raise failure(f"generate({label})", str(expected), str(out), bug)


def _sampling_probs(table, c, temp, top_k):
    logits = table[c] / temp
    if top_k is not None:
        keep = torch.topk(table[c], top_k).indices
        logits = torch.full_like(logits, float("-inf")).index_copy(0, keep, logits[keep])
    return torch.softmax(logits.double(), -1)


def _sampling_bug(counts, table, c, temp, N):
    if counts.max().item() == N:
        return GEN_BUGS["greedy"]
    if temp != 1.0 and _tv(counts, torch.softmax(table[c].double(), -1)) < 0.035:
        return GEN_BUGS["temp_after"]
    if temp != 1.0 and _tv(counts, torch.softmax(table[c].double() * temp, -1)) < 0.035:
        return GEN_BUGS["temp_mult"]
    return None


def _gen_sampling(generate, table) -> None:
    """Sampling follows softmax(logits / T) (restricted to the top k), with a fixed generator."""
    c, N, V = 2, 6000, table.shape[0]
    for temp, top_k in ((1.0, None), (2.0, None), (0.7, 3)):
        label = f"temperature={temp}, top_k={top_k}, {N} " + t("次抽样", "samples")
        out = _generate(generate, table, torch.full((N, 1), c), 1, label, temperature=temp, top_k=top_k,
                        generator=seeded(int(temp * 10)))
        counts = torch.bincount(out[:, 1], minlength=V)[:V]
        probs = _sampling_probs(table, c, temp, top_k)
        outside = counts[probs == 0].sum().item()
        if outside:
            keep = sorted(torch.nonzero(probs).flatten().tolist())
            small = set(torch.topk(table[c], top_k, largest=False).indices.tolist())
            drawn = set(torch.nonzero(counts).flatten().tolist())
            raise failure(t(f"generate({label})：抽到的 token", f"generate({label}): tokens drawn"),
                          t(f"只来自打分最高的 {top_k} 个：{keep}", f"only the {top_k} highest-scoring: {keep}"),
                          str(sorted(drawn)), GEN_BUGS["topk_small"] if drawn <= small else GEN_BUGS["topk_ignored"])
        dist = _tv(counts, probs)
        if dist > 0.035:
            raise failure(t(f"generate({label})：抽样频率（总变差距离 {dist:.3f}，容许 0.035）",
                            f"generate({label}): sample frequencies (total variation {dist:.3f}, allowed 0.035)"),
                          show(probs), show(counts.double() / N), _sampling_bug(counts, table, c, temp, N))


def _gen_cold_and_seeded(generate, table) -> None:
    """temperature → 0 is greedy; top_k > vocab_size filters nothing; one seed gives one text."""
    V = table.shape[0]
    starts = torch.arange(V).repeat(4)[:, None]
    label = t("temperature=1e-3（应与贪心一致）", "temperature=1e-3 (should match greedy)")
    out = _generate(generate, table, starts, 5, label, temperature=1e-3, generator=seeded(2))
    expected = torch.tensor([_greedy_chain(table, [s], 5, _N_CTX) for s in starts[:, 0].tolist()])
    if not torch.equal(out, expected):
        raise failure(f"generate({label})", show(expected[:, 1:]), show(out[:, 1:]),
                      hint=t("温度趋于 0 时 softmax(logits / T) 趋于 one-hot。",
                             "as T → 0, softmax(logits / T) becomes one-hot."))
    _generate(generate, table, torch.full((500, 1), 2), 1, f"top_k={V + 3} > vocab_size={V}", top_k=V + 3,
              generator=seeded(5))
    a = _generate(generate, table, torch.zeros(64, 1, dtype=torch.long), 4, "seed 9", generator=seeded(9))
    b = _generate(generate, table, torch.zeros(64, 1, dtype=torch.long), 4, "seed 9", generator=seeded(9))
    if not torch.equal(a, b):
        raise failure(t("generate：同一个种子调用两次", "generate: the same seed twice"),
                      t("相同的结果", "the same result"), t("不同的结果", "different results"), GEN_BUGS["generator"])


def check_generate(generate) -> None:
    table = torch.randn(7, 7, generator=seeded(111)) * 1.5
    table[:, 0] += 0.5                                       # no ties
    _gen_greedy(generate, table)
    _gen_sampling(generate, table)
    _gen_cold_and_seeded(generate, table)
    passed("generate", 7)


# ================================================================= cross_entropy

CE_FORBIDDEN = SOFTMAX_FAMILY | frozenset({"cross_entropy", "nll_loss", "nll_loss_nd", "nll_loss2d", "binary_cross_entropy"})


def ref_cross_entropy(logits, targets) -> torch.Tensor:
    """Mean cross-entropy in float64, from log-sum-exp."""
    z = as_f64(logits).reshape(-1, logits.shape[-1])
    ids = targets.reshape(-1)
    m = z.max(dim=-1, keepdim=True).values
    lse = m.squeeze(-1) + torch.log(torch.exp(z - m).sum(-1))
    return (lse - z[torch.arange(z.shape[0]), ids]).mean()


def _ce_naive(logits, targets):
    z = logits.reshape(-1, logits.shape[-1])
    return (torch.log(torch.exp(z).sum(-1)) - z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()


def _ce_sum(logits, targets):
    z = as_f64(logits).reshape(-1, logits.shape[-1])
    return (torch.logsumexp(z, -1) - z[torch.arange(z.shape[0]), targets.reshape(-1)]).sum()


def _ce_wrong_axis(logits, targets):
    """log-sum-exp over the positions (the first axis of the flattened rows) instead of the vocabulary."""
    z = as_f64(logits).reshape(-1, logits.shape[-1])
    return (torch.logsumexp(z, 0)[targets.reshape(-1)] - z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()


def _ce_batch_mean_only(logits, targets):
    """Summed over the positions of each sequence, averaged over the batch."""
    z = as_f64(logits)
    lse = torch.logsumexp(z, -1)
    right = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (lse - right).sum(-1).mean() if z.dim() == 3 else (lse - right).mean()


def _ce_no_lse(logits, targets):
    z = as_f64(logits).reshape(-1, logits.shape[-1])
    return (-z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()


CE_BUGS = [
    Bug("ce_sum_not_mean", "这是所有位置损失的和：要取平均（.mean()）。",
        "this is the sum of the losses over all positions: take the mean (.mean()).", _ce_sum),
    Bug("ce_wrong_axis", "log-sum-exp 沿错了维度：要对词表那一维（最后一维，dim=-1）求和，每个位置各自归一化。",
        "the log-sum-exp runs over the wrong axis: sum over the vocabulary, the last axis (dim=-1), so that each "
        "position is normalised on its own.", _ce_wrong_axis),
    Bug("ce_mean_over_batch_only", "每个序列内的损失是加起来的，只对批量取了平均：要对所有 B·T 个位置取平均。",
        "the losses are summed within each sequence and averaged over the batch only: average over all B·T positions.",
        _ce_batch_mean_only),
    Bug("ce_missing_log_sum_exp", "只取了正确 token 的分数（取负），少了 ln Σ exp(z) 那一项：没有归一化成概率。",
        "only the right token's score (negated) is there; the ln Σ exp(z) term is missing, so nothing is normalised "
        "into probabilities.", _ce_no_lse),
]
CE_OVERFLOW = Bug("ce_overflow", "e^z 溢出成了 inf（或下溢成 0 取 log 得 -inf）：先减去每一行的最大值 m，"
                  "ln Σ exp(z) = m + ln Σ exp(z - m)（log-sum-exp 技巧）。",
                  "e^z overflows to inf (or underflows to 0, whose log is -inf): subtract each row's maximum m first, "
                  "ln Σ exp(z) = m + ln Σ exp(z - m) (the log-sum-exp trick).", _ce_naive)


def _ce_cases():
    g = seeded(301)
    big = torch.randn(2, 7, 11, generator=g) * 3
    yield (t("(N, V) = (5, 9) 的 logits", "logits of shape (N, V) = (5, 9)"),
           torch.randn(5, 9, generator=g), torch.randint(9, (5,), generator=g), CE_BUGS)
    yield (t("(B, T, V) = (2, 7, 11) 的 logits", "logits of shape (B, T, V) = (2, 7, 11)"),
           big, torch.randint(11, (2, 7), generator=g), CE_BUGS)
    yield (t("float64 的 logits (3, 4, 6)", "float64 logits (3, 4, 6)"),
           torch.randn(3, 4, 6, generator=g, dtype=torch.float64), torch.randint(6, (3, 4), generator=g), CE_BUGS)
    z = torch.randn(4, 8, generator=g) * 600
    z[0, 3] = 5000.0
    yield (t("极端的 logits（±数千）", "extreme logits (± thousands)"), z, torch.tensor([3, 0, 7, 2]), CE_BUGS + [CE_OVERFLOW])




def cross_entropy_stand_in(logits, targets):
    """A correct cross_entropy for a student's GPT or step to call (keeps dtype and autograd)."""
    z = logits.reshape(-1, logits.shape[-1])
    m = z.max(dim=-1, keepdim=True).values.detach()
    lse = m.squeeze(-1) + torch.log(torch.exp(z - m).sum(-1))
    return (lse - z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()


def check_cross_entropy(cross_entropy) -> None:
    passed("cross_entropy", _ce_checks(cross_entropy))


def _ce_checks(cross_entropy) -> int:
    what = "cross_entropy"
    check = Check(what, cross_entropy, forbid=CE_FORBIDDEN)
    for label, z, y, bugs in _ce_cases():
        got = check.call(z, y, label=label)
        check.tensor(label, got, (), hint=t("返回一个标量（0 维张量）：所有位置损失的平均。",
                                            "return a scalar (a 0-dimensional tensor): the mean over all positions."),
                     bug=CE_BUGS[2] if isinstance(got, torch.Tensor) and got.dim() == 1 else None)
        check.expect(label, got, ref_cross_entropy(z, y), bugs=bugs, bug_args=(z, y), dtype=z.dtype)
    # a uniform model scores ln V
    for V in (16, 65):
        label = t(f"全零的 logits、V = {V}", f"all-zero logits, V = {V}")
        got = check.call(torch.zeros(3, 4, V), torch.randint(V, (3, 4), generator=seeded(V)), label=label)
        check.expect(label, got, torch.tensor(math.log(V), dtype=torch.float64),
                     hint=t(f"均匀的模型给每个 token 的概率都是 1/V，损失应是 ln V = {math.log(V):.4f}。",
                            f"a uniform model gives every token probability 1/V, so the loss is ln V = {math.log(V):.4f}."))
    # the gradient is softmax − one-hot, divided by the number of positions
    g = seeded(303)
    z = torch.randn(3, 5, 7, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.randint(7, (3, 5), generator=g)
    label = t("对 logits 的梯度", "gradient with respect to the logits")
    out = check.call(z, y, label=label)
    expect_autograd(out, f"{what}: {label}")
    grad, = torch.autograd.grad(out, z)
    p = torch.exp(z.detach() - torch.logsumexp(z.detach(), -1, keepdim=True))
    want = (p - F.one_hot(y, 7).double()) / y.numel()
    check.expect(label, grad, want, hint=t("梯度应是 (softmax(z) − one_hot(y)) / 位置数：检查 log-sum-exp 有没有断开计算图。",
                                           "the gradient is (softmax(z) − one_hot(y)) / number of positions: check that "
                                           "the log-sum-exp stays in the graph."))
    return check.n


# ================================================================= learning_rate

def ref_learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr) -> float:
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (peak_lr - min_lr)


def _lr_warmup_from_zero(step, max_steps, warmup_steps, peak_lr, min_lr):
    if step < warmup_steps:
        return peak_lr * step / warmup_steps
    return ref_learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr)


def _lr_shifted(step, max_steps, warmup_steps, peak_lr, min_lr):
    return ref_learning_rate(step + 1, max_steps, warmup_steps, peak_lr, min_lr)


def _lr_no_floor_clamp(step, max_steps, warmup_steps, peak_lr, min_lr):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (peak_lr - min_lr)


def _lr_decay_over_max_steps(step, max_steps, warmup_steps, peak_lr, min_lr):
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    progress = (step - warmup_steps) / max_steps
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (peak_lr - min_lr)


def _lr_to_zero(step, max_steps, warmup_steps, peak_lr, min_lr):
    return ref_learning_rate(step, max_steps, warmup_steps, peak_lr, 0.0)


LR_BUGS = [
    Bug("lr_warmup_starts_at_zero", "预热差了一步：第 0 步的学习率是 0（这一步白走了），第 warmup_steps 步才到峰值。"
        "第 0 步已经在学习：用 peak_lr * (step + 1) / warmup_steps。",
        "the warm-up is one step off: step 0 runs at rate 0 (a wasted step) and the peak comes only at step "
        "warmup_steps. Step 0 already learns: use peak_lr * (step + 1) / warmup_steps.", _lr_warmup_from_zero),
    Bug("lr_one_step_ahead", "整个计划提前了一步：第 s 步用的是第 s + 1 步的学习率。",
        "the whole schedule runs one step ahead: step s uses the rate of step s + 1.", _lr_shifted),
    Bug("lr_no_floor_after_max_steps", "过了 max_steps 之后余弦又升回去了：s ≥ max_steps 时应一直是 min_lr。",
        "past max_steps the cosine climbs back up: for s ≥ max_steps the rate must stay at min_lr.", _lr_no_floor_clamp),
    Bug("lr_never_reaches_floor", "衰减到不了底：进度除的是 max_steps 而不是 max_steps - warmup_steps，"
        "直到第 max_steps 步学习率都还高于 min_lr，然后一下子跳到 min_lr。",
        "the decay never reaches its floor: the progress is divided by max_steps instead of max_steps - "
        "warmup_steps, so the rate is still above min_lr right up to step max_steps, then jumps down.",
        _lr_decay_over_max_steps),
    Bug("lr_decays_to_zero", "余弦衰减到了 0 而不是 min_lr：lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr)。",
        "the cosine decays to 0 instead of min_lr: lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr).", _lr_to_zero),
]


def _lr_value(check, learning_rate, args, label):
    out = check.call(*args, label=label)
    try:
        return float(out)
    except (TypeError, ValueError):
        raise check.fail(label, t("一个数（float）", "a number (float)"), type(out).__name__) from None


def check_learning_rate(learning_rate) -> None:
    passed("learning_rate", _lr_checks(learning_rate))


def _lr_checks(learning_rate) -> int:
    what = "learning_rate"
    check = Check(what, learning_rate, dtype_follows=None)
    for max_steps, warmup, peak, floor in ((100, 10, 1e-3, 1e-4), (37, 5, 4e-3, 4e-4), (12, 1, 0.5, 0.0)):
        steps = sorted({0, 1, warmup - 1, warmup, warmup + 1, (warmup + max_steps) // 2, max_steps - 1, max_steps,
                        max_steps + 1, max_steps + (max_steps - warmup) // 2, 2 * max_steps} - {-1})
        args_of = [(s, max_steps, warmup, peak, floor) for s in steps]
        label = f"learning_rate(step, max_steps={max_steps}, warmup_steps={warmup}, peak_lr={peak}, min_lr={floor})"
        got = torch.tensor([_lr_value(check, learning_rate, a, f"{label}, step={a[0]}") for a in args_of],
                           dtype=torch.float64)
        want = torch.tensor([ref_learning_rate(*a) for a in args_of], dtype=torch.float64)
        if not same(got, want, F32):
            bug = next((b for b in LR_BUGS if not same(torch.tensor([b.impl(*a) for a in args_of],
                                                                      dtype=torch.float64), want, F32)
                        and same(got, torch.tensor([b.impl(*a) for a in args_of], dtype=torch.float64), F32)), None)
            bad = next(i for i in range(len(steps)) if not same(got[i:i + 1], want[i:i + 1], F32))
            raise failure(f"{what}: {label}, step={steps[bad]}", f"{float(want[bad]):.6g}", f"{float(got[bad]):.6g}", bug,
                          hint=t("对照上面的公式逐段检查：预热、余弦衰减、max_steps 之后。",
                                 "check each piece against the formula above: warm-up, cosine decay, after max_steps."))
        check.n += 1
    return check.n




def learning_rate_stand_in(step, max_steps, warmup_steps, peak_lr, min_lr):
    """A correct learning_rate for a student's step to call."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= max_steps:
        return min_lr
    return min_lr + 0.5 * (1 + math.cos(math.pi * (step - warmup_steps) / (max_steps - warmup_steps))) * (peak_lr - min_lr)




class _TokenizerStandIn:
    """A correct CharTokenizer for a student's load_checkpoint to build."""

    def __init__(self, text):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.vocab_size = len(self.chars)

    def encode(self, s):
        return [self.stoi[c] for c in s]

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)


# the probes are the earlier exercises' own hidden checks: a correct version stands in exactly when one lost its points
CE_EARLIER = Earlier("cross_entropy", 3, passes(_ce_checks), cross_entropy_stand_in)
LR_EARLIER = Earlier("learning_rate", 6, passes(_lr_checks), learning_rate_stand_in)
TOK_EARLIER = Earlier("CharTokenizer", 1, passes(_tokenizer_checks), _TokenizerStandIn)


# ================================================================= train_step

def _toy(V: int = 6, d: int = 8, seed: int = 0, dropout: float = 0.0) -> nn.Module:
    """A small model with the GPT's interface (``model(idx) -> (logits, loss)``).
    Built here, inside a function, so that the student's code may call it."""

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            g = seeded(seed)
            self.emb = nn.Parameter(torch.randn(V, d, generator=g))
            self.out = nn.Parameter(torch.randn(d, V, generator=g) * 0.7)
            self.bias = nn.Parameter(torch.randn(V, generator=g) * 0.1)
            self.drop = nn.Dropout(dropout)
            self.seen = []                              # (grad enabled, training) at each forward

        def forward(self, idx, targets=None):
            self.seen.append((torch.is_grad_enabled(), self.training))
            logits = self.drop(torch.tanh(self.emb[idx])) @ self.out + self.bias
            loss = None if targets is None else F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
            return logits, loss

    return Toy()


def _plan(**kw):
    from helpers.training import Plan
    return Plan(**{**dict(max_steps=8, warmup_steps=2, lr=0.5, min_lr=0.05, grad_clip=0.05), **kw})


def _ref_step(model, opt, x, y, step, plan, *, zero=True, clip=True, lr_of=None, targets_are_inputs=False) -> float:
    """The grader's own training step, and its known wrong versions."""
    lr = ref_learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr) if lr_of is None else lr_of(step)
    if lr is not None:
        for group in opt.param_groups:
            group["lr"] = lr
    if zero:
        opt.zero_grad(set_to_none=True)
    logits, _ = model(x)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), (x if targets_are_inputs else y).reshape(-1))
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip)
    opt.step()
    return loss.item()


def _batch_of_step(step: int, V: int = 6):
    g = seeded(500 + step)
    return torch.randint(V, (3, 5), generator=g), torch.randint(V, (3, 5), generator=g)


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().double().flatten() for p in model.parameters()])


def _ref_lr(plan, shift):
    def lr_of(step):
        if step + shift < 0:
            return None                               # the optimizer's own initial rate
        return ref_learning_rate(step + shift, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)
    return lr_of


STEP_BUGS = {
    "no_zero": Bug("step_gradients_not_zeroed", "梯度没有清零：.grad 是累加的，这一步的梯度加上了之前所有步的。"
                   "每一步开头（backward 之前）调用 optimizer.zero_grad()。",
                   "the gradients are never zeroed: .grad accumulates, so this step's gradient is added to those of all "
                   "the steps before. Call optimizer.zero_grad() at the start of every step (before backward).", None),
    "clip_after": Bug("step_clip_after_update", "梯度裁剪没有作用在这一步的更新上（在 optimizer.step() 之后才裁剪，或者根本没裁剪）："
                      "裁剪要放在 loss.backward() 之后、optimizer.step() 之前。",
                      "the gradient clipping does not act on this step's update (it comes after optimizer.step(), or "
                      "not at all): clip after loss.backward() and before optimizer.step().", None),
    "ahead": Bug("step_schedule_one_ahead", "学习率提前了一步：第 s 步用的是 learning_rate(s + 1)（例如 scheduler.step() "
                 "放在了 optimizer.step() 之前）。",
                 "the learning rate is one step ahead: step s uses learning_rate(s + 1) (for example scheduler.step() "
                 "called before optimizer.step()).", None),
    "behind": Bug("step_schedule_one_behind", "学习率落后了一步：在 optimizer.step() 之后才设下一步的学习率，"
                  "所以第 s 步用的是第 s − 1 步的（第 0 步用的是优化器自己的初始学习率）。要在更新之前设好这一步的学习率。",
                  "the learning rate is one step behind: it is set after optimizer.step(), for the next step, so step s "
                  "uses the rate of step s − 1 (and step 0 the optimizer's initial rate). Set this step's rate before "
                  "the update.", None),
    "constant": Bug("step_schedule_not_used", "学习率一直没变：没有把 learning_rate(step, ...) 写进 "
                    "optimizer.param_groups 里每一组的 \"lr\"。",
                    "the learning rate never changes: learning_rate(step, ...) is not written into the \"lr\" of each "
                    "group in optimizer.param_groups.", None),
    "inputs": Bug("step_targets_not_shifted", "损失是拿 x 当目标算的：目标是 y（x 向右挪一格），"
                  "cross_entropy(logits, y)。拿 x 当目标，模型只要抄下当前的字符，学不到预测下一个。",
                  "the loss uses x as its targets: the targets are y (x shifted by one), cross_entropy(logits, y). "
                  "With x as targets the model only has to copy the current character and never learns to predict "
                  "the next one.", None),
}


def _step_variants(plan):
    return [("no_zero", dict(zero=False)), ("clip_after", dict(clip=False)), ("ahead", dict(lr_of=_ref_lr(plan, 1))),
            ("behind", dict(lr_of=_ref_lr(plan, -1))), ("constant", dict(lr_of=lambda s: None)),
            ("inputs", dict(targets_are_inputs=True))]


def _simulate(plan, upto: int, **kw):
    model = _toy()
    opt = torch.optim.SGD(model.parameters(), lr=0.123)     # not a rate of the schedule: a step that never sets one shows
    losses = [_ref_step(model, opt, *_batch_of_step(s), s, plan, **kw) for s in range(upto + 1)]
    return _params(model), losses


def _step_checks(what, train_step) -> int:
    plan = _plan()
    model = _toy()
    opt = torch.optim.SGD(model.parameters(), lr=0.123)     # not a rate of the schedule: a step that never sets one shows
    n = 0
    for s in range(6):
        x, y = _batch_of_step(s)
        label = t(f"第 {s} 步（SGD，max_steps=8，warmup_steps=2，peak 0.5，min 0.05，grad_clip=0.05）",
                  f"step {s} (SGD, max_steps=8, warmup_steps=2, peak 0.5, min 0.05, grad_clip=0.05)")
        out = call(train_step, model, opt, x.clone(), y.clone(), s, plan, what=f"{what}: {label}")
        if isinstance(out, torch.Tensor) or not isinstance(out, (float, int)):
            raise failure(t(f"{what}: {label}：返回值", f"{what}: {label}: the value returned"),
                          t("一个 Python 的 float（loss.item()）", "a Python float (loss.item())"), type(out).__name__,
                          hint=t("返回 loss.item()：张量会把整张计算图一直留在内存里。",
                                 "return loss.item(): a tensor keeps the whole graph in memory."))
        want_params, want_losses = _simulate(plan, s)
        got_params = _params(model)
        n += 1
        bug = None
        if not same(got_params, want_params, Tol(1e-4, 1e-5)) or abs(out - want_losses[-1]) > 1e-4:
            for key, kw in _step_variants(plan):
                bug_params, bug_losses = _simulate(plan, s, **kw)
                if same(bug_params, want_params, Tol(1e-4, 1e-5)) and abs(bug_losses[-1] - want_losses[-1]) <= 1e-4:
                    continue                             # this bug does not show yet
                if same(got_params, bug_params, Tol(1e-4, 1e-5)) and abs(out - bug_losses[-1]) <= 1e-4:
                    bug = STEP_BUGS[key]
                    break
            if abs(out - want_losses[-1]) > 1e-4:
                raise failure(t(f"{what}: {label}：返回的损失", f"{what}: {label}: the loss returned"),
                              f"{want_losses[-1]:.6g}", f"{float(out):.6g}", bug,
                              hint=t("返回的是这一步更新之前、这一批上的平均交叉熵 cross_entropy(logits, y)。",
                                     "return this batch's mean cross-entropy before the update, cross_entropy(logits, y)."))
            v = compare(got_params, want_params, Tol(1e-4, 1e-5))
            raise value_failure(t(f"{what}: {label}：更新之后的参数", f"{what}: {label}: the parameters after the update"),
                                got_params, want_params, Tol(1e-4, 1e-5), v, bug,
                                hint=t("对照六个步骤的顺序：设学习率、清零梯度、前向与损失、backward、裁剪、optimizer.step()。",
                                       "go through the six parts in order: set the rate, zero the gradients, forward and "
                                       "loss, backward, clip, optimizer.step()."))
    return n


def check_train_step(train_step) -> None:
    what = "train_step"
    with on_its_own(train_step, (CE_EARLIER, LR_EARLIER)):
        passed(what, _step_checks(what, train_step))


# ================================================================= evaluate

EVAL_BUGS = {
    "train_mode": Bug("eval_in_train_mode", "评估时模型还在训练模式：dropout 还在随机丢弃，量出来的损失带着噪声。"
                      "先 model.eval()，量完再恢复原来的模式。",
                      "the model is still in training mode during the evaluation: dropout still drops at random and "
                      "the loss carries noise. Call model.eval() first and restore the mode afterwards.", None),
    "grad": Bug("eval_with_gradients", "评估时梯度是开着的：每次前向都为反向传播保存中间结果，白费内存和时间。"
                "把前向放进 with torch.no_grad(): 里（或用 @torch.no_grad() 装饰）。",
                "gradients are on during the evaluation: every forward keeps what a backward pass would need, which "
                "wastes memory and time. Run the forward passes inside with torch.no_grad(): (or decorate with "
                "@torch.no_grad()).", None),
    "not_restored": Bug("eval_mode_not_restored", "评估之后模型没有回到训练模式：之后的训练里 dropout 就不起作用了。"
                        "记下 was_training = model.training，最后 model.train(was_training)。",
                        "after the evaluation the model is not back in training mode, so dropout is off for the rest "
                        "of training. Note was_training = model.training and end with model.train(was_training).", None),
    "forced_train": Bug("eval_always_train_after", "评估之前模型在 eval 模式，评估之后却被改成了训练模式：要恢复它原来的模式"
                        "（model.train(was_training)），而不是一律 model.train()。",
                        "the model was in eval mode before the evaluation and is in training mode after it: restore the "
                        "mode it was in (model.train(was_training)) rather than always calling model.train().", None),
    "sum": Bug("eval_sum_of_batches", "返回的是各批损失的和，应取平均。", "this is the sum of the batch losses; take their mean.",
               None),
}


def check_evaluate(evaluate) -> None:
    what = "evaluate"
    with on_its_own(evaluate, (CE_EARLIER,)):
        V = 6
        model = _toy(V, dropout=0.5).train()
        batches = [_batch_of_step(s, V) for s in range(4)]
        with torch.no_grad():
            model.eval()
            each = [float(ref_cross_entropy(model(x)[0], y)) for x, y in batches]
            model.train()
        model.seen.clear()
        label = t("带 dropout=0.5 的模型（训练模式）、4 批", "a model with dropout=0.5 (in training mode), 4 batches")
        out = call(evaluate, model, [(x.clone(), y.clone()) for x, y in batches], what=f"{what}: {label}")
        if isinstance(out, torch.Tensor) or not isinstance(out, (float, int)):
            raise failure(t(f"{what}: {label}：返回值", f"{what}: {label}: the value returned"),
                          t("一个 Python 的 float", "a Python float"), type(out).__name__,
                          hint=t("用 .item() 把每批的损失变成数，再取平均。", "turn each batch's loss into a number with .item(), then average."))
        seen = list(model.seen)
        want = sum(each) / len(each)
        if abs(out - want) > 1e-5:
            bug = EVAL_BUGS["train_mode"] if any(tr for _, tr in seen) else \
                EVAL_BUGS["sum"] if abs(out - sum(each)) < 1e-5 else None
            raise failure(f"{what}: {label}", f"{want:.6g}", f"{float(out):.6g}", bug,
                          hint=t("各批损失（你的 cross_entropy）的平均。", "the mean of the batches' losses (your cross_entropy)."))
        if any(g for g, _ in seen):
            raise failure(t(f"{what}: {label}：前向时 torch.is_grad_enabled()", f"{what}: {label}: torch.is_grad_enabled() during the forward passes"),
                          "False", "True", EVAL_BUGS["grad"])
        if not model.training:
            raise failure(t(f"{what}: {label}：评估之后 model.training", f"{what}: {label}: model.training after the evaluation"),
                          "True", "False", EVAL_BUGS["not_restored"])
        model.eval()
        label = t("同一个模型，已经在 eval 模式", "the same model, already in eval mode")
        out = call(evaluate, model, batches, what=f"{what}: {label}")
        if model.training:
            raise failure(t(f"{what}: {label}：评估之后 model.training", f"{what}: {label}: model.training after the evaluation"),
                          "False", "True", EVAL_BUGS["forced_train"])
        if abs(float(out) - want) > 1e-5:
            raise failure(f"{what}: {label}", f"{want:.6g}", f"{float(out):.6g}")
        passed(what, 5)


# ================================================================= checkpoint

CKPT_BUGS = {
    "optimizer": Bug("resume_forgets_optimizer", "读档之后优化器从头开始了：AdamW 的梯度滑动平均和平方的滑动平均没有存下来"
                     "（或没有装回去），续上的训练和没停过的不一样。存 optimizer.state_dict()，读档时 optimizer.load_state_dict(...)。",
                     "after loading, the optimizer starts from scratch: AdamW's moving averages of the gradient and of its "
                     "square were not saved (or not put back), so the resumed run differs from one that never stopped. "
                     "Save optimizer.state_dict() and call optimizer.load_state_dict(...) when loading.", None),
    "step": Bug("resume_forgets_step", "读档返回的步数不对：学习率计划由步数决定，步数丢了，续上的训练又从预热开始。"
                "把 step 存进检查点，读档时原样返回。",
                "loading returns the wrong step: the learning-rate schedule depends on it, so a lost step makes the "
                "resumed run warm up all over again. Save step in the checkpoint and return it when loading.", None),
    "model": Bug("resume_forgets_model", "读档之后模型的参数没有恢复：要存 model.state_dict()，读档时 model.load_state_dict(...)。",
                 "after loading, the model's parameters are not restored: save model.state_dict() and call "
                 "model.load_state_dict(...) when loading.", None),
}


def _ckpt_run(model, opt, first: int, last: int, plan) -> list[float]:
    return [_ref_step(model, opt, *_batch_of_step(s), s, plan) for s in range(first, last)]


def _ckpt_pair(seed: int):
    model = _toy(seed=seed)
    return model, torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1, betas=(0.9, 0.99))


def check_checkpoint(save_checkpoint, load_checkpoint) -> None:
    import tempfile
    from pathlib import Path

    from helpers import training
    what = "save_checkpoint / load_checkpoint"
    with on_its_own(load_checkpoint, (TOK_EARLIER,)):
        space = _namespace_of(load_checkpoint)
        plan = _plan(max_steps=10, warmup_steps=2, lr=0.05, min_lr=0.005, grad_clip=1.0)
        recipe = training.scaled(training.COURSE_RECIPE, name="checked", lr=0.05, n_layer=1)
        tok = call(space.get("CharTokenizer"), "the quick brown fox\n", what=f"{what}: CharTokenizer")
        straight, opt = _ckpt_pair(0)
        straight_losses = _ckpt_run(straight, opt, 0, 7, plan)
        first, opt = _ckpt_pair(0)
        losses = _ckpt_run(first, opt, 0, 4, plan)
        with tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "run.pt")
            label = t("第 4 步存档（AdamW，weight_decay=0.1）", "saved at step 4 (AdamW, weight_decay=0.1)")
            call(save_checkpoint, path, first, opt, 4, recipe, tok, what=f"{what}: {label}")
            if not Path(path).is_file():
                raise _fail(f"{what}：save_checkpoint 没有在给定的路径上写出文件。",
                            f"{what}: save_checkpoint wrote no file at the path it was given.")
            second, opt2 = _ckpt_pair(1)                    # other weights: loading must replace them
            label = t("读档到一个新模型和新优化器", "loaded into a new model and a new optimizer")
            out = call(load_checkpoint, path, second, opt2, what=f"{what}: {label}")
        if not (isinstance(out, tuple) and len(out) == 3):
            raise failure(t(f"{what}: {label}：返回值", f"{what}: {label}: the value returned"), "(step, recipe, tokenizer)",
                          type(out).__name__)
        step, recipe_back, tok_back = out
        if step != 4:
            raise failure(t(f"{what}: {label}：返回的步数", f"{what}: {label}: the step returned"), "4", repr(step),
                          CKPT_BUGS["step"])
        if recipe_back != recipe:
            raise failure(t(f"{what}: {label}：返回的配方", f"{what}: {label}: the recipe returned"), repr(recipe)[:120],
                          repr(recipe_back)[:120], hint=t("存 recipe.as_dict()，读档时 Recipe(**d)。",
                                                          "save recipe.as_dict(); load with Recipe(**d)."))
        text = "fox the brown quick\n"
        try:
            same_tok = list(tok_back.encode(text)) == list(tok.encode(text)) and tok_back.vocab_size == tok.vocab_size
        except Exception:  # noqa: BLE001 - a tokenizer that cannot encode is not the same tokenizer
            same_tok = False
        if not same_tok:
            raise _fail(f"{what}：读回的分词器和存进去的编码结果不同（或不能编码）。词表按编号排好就是 "
                        "tokenizer.decode(list(range(tokenizer.vocab_size)))，用 CharTokenizer(这个字符串) 重建。",
                        f"{what}: the tokenizer read back encodes differently from the one saved (or cannot encode). Its "
                        "vocabulary in id order is tokenizer.decode(list(range(tokenizer.vocab_size))); rebuild it with "
                        "CharTokenizer(that string).")
        resumed = losses + _ckpt_run(second, opt2, 4, 7, plan)
        if resumed != straight_losses:
            loaded = copy.deepcopy(first)
            fresh_opt = torch.optim.AdamW(loaded.parameters(), lr=0.05, weight_decay=0.1, betas=(0.9, 0.99))
            bug = CKPT_BUGS["optimizer"] if losses + _ckpt_run(loaded, fresh_opt, 4, 7, plan) == resumed \
                else CKPT_BUGS["model"] if abs(resumed[4] - straight_losses[4]) > 1e-3 else None
            bad = next(i for i in range(7) if resumed[i] != straight_losses[i])
            raise failure(t(f"{what}：续上的训练第 {bad} 步的损失（应和没停过的完全相同）",
                            f"{what}: the resumed run's loss at step {bad} (must equal that of a run that never stopped)"),
                          repr(straight_losses[bad]), repr(resumed[bad]), bug)
        passed("checkpoint", 5)


def _namespace_of(fn) -> dict:
    from .cases import _namespace
    return _namespace(fn)
