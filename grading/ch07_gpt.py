"""Hidden tests of ch07_gpt, one section per exercise, in the chapter's order:
CharTokenizer, get_batch, cross_entropy (from scratch, against a float64
reference), GPT (structure, loss, its logits against a reference wired as the
exercise says from the student's own parameters, dropout where and when the
exercise asks for it, causality, memorising a batch), generate (cropping,
greedy, temperature, top-k, sampling statistics with a fixed generator), and
the training: learning_rate, train_step (against the grader's own step and its
known wrong versions, with two parameter groups, the loss from the student's
own cross_entropy or their model), evaluate (eval mode, no gradients, the mode
restored), the checkpoint (a resumed run's losses equal an uninterrupted run's;
the file loads with weights_only=True and load_checkpoint refuses a file with
code in it) and the training loop train (driven by a scripted run that notes
what the loop asks and tells it, then by the real training.Run).

At the end: ``ERRORS`` (signs of known mistakes in an error message) and
``probes()`` (the visible tests' inputs, expected outputs and known mistakes,
built into helpers/probes/ch07_gpt.json).

One module, not a package: the guard (grading/guard.py) counts as grading code,
and seals the checks of, only functions in files directly in grading/, each
mapped to the module where it was first seen; the probe words are collected by
this module's name. Each function stays short instead.

Exercises that call earlier ones are graded on their own (``on_its_own``):
GPT and the loop's pieces call the student's cross_entropy, train_step their
learning_rate, load_checkpoint their CharTokenizer, train their get_batch,
train_step and evaluate."""
from __future__ import annotations

import contextlib
import copy
import io
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers.i18n import t

from .cases import F32, FINGERPRINT, Check, Earlier, Tol, compare, on_its_own, passes, same, value_failure
from .core import (
    SOFTMAX_FAMILY,
    Bug,
    ForbiddenCall,
    GradingFailure,
    Raises,
    as_f64,
    call,
    failure,
    forbidden,
    passed,
    seeded,
    show,
)
from .probes import Probe

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
                    "编号不是字符在排好序的字符表里的位置（例如按第一次出现的顺序，或者 list(set(text)) 那样没有确定顺序的"
                    "排法）：字符表要用 sorted(set(text))。",
                    "the ids are not the characters' positions in the sorted list (they follow, say, the order in which "
                    "characters first appear, or the arbitrary order of list(set(text))): the characters are "
                    "sorted(set(text)).", None),
    "stripped": Bug("tokenizer_decode_strips", "decode 去掉了首尾的空白（.strip()）：换行和空格也是 token，"
                    "decode(encode(s)) 要一个字符不差地还原 s。",
                    "decode strips the whitespace at both ends (.strip()): newlines and spaces are tokens too, and "
                    "decode(encode(s)) must give back s to the character.", None),
    "size": Bug("tokenizer_vocab_size_wrong",
                "vocab_size 不等于不同字符的个数（len(set(text))）。",
                "vocab_size is not the number of distinct characters (len(set(text))).", None),
    "dropped": Bug("tokenizer_drops_unknown",
                   "词表外的字符被悄悄跳过了：编码结果比原文短，后面的内容全部错位。应抛出 ValueError 并写出是哪个字符。",
                   "characters outside the vocabulary are silently skipped: the encoding is shorter than the text "
                   "and everything after it is misaligned. Raise a ValueError that names the character.", None),
    "unnamed": Bug("tokenizer_unknown_not_named",
                   "错误信息里没有写出是哪个字符：学生看到报错却不知道是哪个字符不在词表里。把它写进信息，"
                   "例如 ValueError(f\"character {ch!r} is not in the vocabulary\")。",
                   "the error message does not say which character it is, so whoever reads it cannot tell what is "
                   "missing from the vocabulary. Put it in the message, e.g. ValueError(f\"character {ch!r} is not in "
                   "the vocabulary\").", None),
    "not_list": Bug("tokenizer_encode_not_a_list",
                    "encode 返回的不是 Python 的 list[int]（而是张量、元组或别的类型）：题目要求 encode(s) -> list[int]，"
                    "列表里是 Python 的 int。要张量时由调用者自己 torch.tensor(tok.encode(s))。",
                    "encode does not return a Python list[int] (but a tensor, a tuple or something else): the exercise "
                    "asks for encode(s) -> list[int] holding Python ints. A caller that wants a tensor writes "
                    "torch.tensor(tok.encode(s)).", None),
    "joined": Bug("tokenizer_decode_adds_spaces",
                  "decode 在字符之间插入了空格（\" \".join）：一个字符一个 token，拼回去时什么都不加，用 \"\".join(...)。",
                  "decode puts spaces between the characters (\" \".join): one token is one character, so join them with "
                  "nothing in between, \"\".join(...).", None),
    "tensor_ids": Bug("tokenizer_decode_rejects_tensor",
                      "decode 不接受整数张量：张量里的元素是 0 维张量，不能直接当字典的键或列表的下标查表。"
                      "先转成 int（int(i)，或 ids.tolist()）再查表。",
                      "decode does not accept an integer tensor: its elements are 0-dimensional tensors, which do not "
                      "work as dictionary keys. Turn them into int first (int(i), or ids.tolist()).", None),
    "mapped": Bug("tokenizer_maps_unknown",
                  "词表外的字符被悄悄编成了某个已有的编号：应抛出 ValueError 并写出是哪个字符。",
                  "a character outside the vocabulary is silently given an existing id: raise a ValueError that "
                  "names the character.", None),
}


# decode(an integer tensor) failing on the tensor's elements (a dictionary lookup: KeyError: tensor(3))
TENSOR_IDS = [(Raises(types=("KeyError", "TypeError", "IndexError")), TOK_BUGS["tensor_ids"])]
TOK_ERRORS = [(Raises(contains=("tensor(",), types=("KeyError",)), TOK_BUGS["tensor_ids"])]


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
        raw = call(tok.encode, text, what=f"{label}.encode")
        if not isinstance(raw, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
            raise failure(t(f"{label}.encode({text!r}) 的返回值", f"{label}.encode({text!r}): the value returned"),
                          t("Python 的 list[int]", "a Python list[int]"), type(raw).__name__, TOK_BUGS["not_list"])
        ids = _as_ids(raw, f"{label}.encode")
        expected = [chars.index(c) for c in text]
        n += 1
        if ids != expected:
            first_seen = list(dict.fromkeys(text))
            relabelled = sorted(set(ids)) == list(range(len(chars))) and len(set(zip(ids, text))) == len(chars)
            bug = TOK_BUGS["unsorted"] if relabelled or ids == [first_seen.index(c) for c in text] else None
            raise failure(f"{label}.encode({text!r})", str(expected[:12]), str(ids[:12]), bug)
        back = call(tok.decode, ids, what=f"{label}.decode")
        n += 1
        if back != text:
            raise failure(f"{label}.decode(encode(s))", repr(text), repr(back),
                          TOK_BUGS["joined"] if back == " ".join(text) else
                          TOK_BUGS["stripped"] if back == text.strip() else None)
        back = call(tok.decode, torch.tensor(ids), what=t(f"{label}.decode(整数张量)", f"{label}.decode(int tensor)"),
                    hints=TENSOR_IDS)
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
                            f"({bad!r}): {err}", TOK_BUGS["unnamed"]) from None
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


TOK_EARLIER = Earlier("CharTokenizer", 1, passes(_tokenizer_checks), _TokenizerStandIn)


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
    "transposed": Bug("batch_shape_transposed",
                      "x、y 的形状是 (block_size, batch_size)，两维反了：应是 (batch_size, block_size)，每一行是一个窗口"
                      "（用 torch.stack 把各个窗口叠成行，不要再转置）。",
                      "x and y have shape (block_size, batch_size), the two axes swapped: it must be (batch_size, "
                      "block_size), one window per row (stack the windows as rows, without a transpose).", None),
    "long": Bug("batch_windows_one_too_long", "每个窗口多了一个 token：x 和 y 的每一行都应正好是 block_size 个 token"
                "（x 取 data[i : i+block_size]，y 是它挪一格）。",
                "each window is one token too long: every row of x and y holds exactly block_size tokens (x takes "
                "data[i : i+block_size], y is that shifted by one).", None),
    "separate": Bug("batch_y_from_another_draw",
                    "y 的窗口和 x 的不是同一个起点：y 来自另一次抽样（两次抽样各抽了一组起点）。x 和 y 要用同一个起点 i："
                    "x = data[i : i+block_size]，y = data[i+1 : i+1+block_size]。",
                    "the windows of y do not start where those of x do: y comes from another draw (two draws, two sets of "
                    "starts). Use one start i for both: x = data[i : i+block_size], y = data[i+1 : i+1+block_size].", None),
    "generator": Bug("batch_ignores_generator",
                     "随机数没有来自参数 generator（没有把它交给 torch.randint，或者在函数里调用了 torch.manual_seed）："
                     "同一个种子两次取到的批量不同，或者不同的种子取到同一批，训练无法复现、续上。",
                     "the random numbers do not come from the generator argument (it is not given to torch.randint, or "
                     "the function calls torch.manual_seed): the same seed gives two different batches, or different "
                     "seeds the same one, so a run can be neither repeated nor resumed.", None),
    "first_start": Bug("batch_first_start_missing", "起点 0 永远抽不到（例如 torch.randint(1, ...)）：起点从 0 数起，"
                       "0 到 len(data) - block_size - 1 的每一个都要能抽到。",
                       "start 0 is never drawn (torch.randint(1, ...), say): starts count from 0, and every start from 0 "
                       "to len(data) - block_size - 1 can be drawn.", None),
}


def _batch(get_batch, data, block_size, batch_size, seed, label):
    out = call(_catching(get_batch), data, block_size, batch_size, generator=seeded(seed), what=label)
    exc = _raised(out)
    if exc is not None:
        bug = BATCH_BUGS["first_start"] if "but got from=1 >= to=1" in str(exc) else \
            BATCH_BUGS["last_start"] if "'from' to be less than 'to'" in str(exc) else \
            BATCH_BUGS["past_end"] if isinstance(exc, (RuntimeError, IndexError)) else None
        raise _fail(f"{label}：你的代码抛出了 {type(exc).__name__}: {exc}",
                    f"{label}: your code raised {type(exc).__name__}: {exc}", bug)
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(z, torch.Tensor) for z in out)):
        raise _fail(f"{label}：应返回两个张量组成的元组 (x, y)，实际得到 {type(out).__name__}。",
                    f"{label}: expected a tuple (x, y) of two tensors, got {type(out).__name__}.")
    return out


def check_get_batch(get_batch) -> None:
    passed("get_batch", _batch_checks(get_batch))


def _batch_checks(get_batch) -> int:
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
                raise failure(t(f"{label}：{name} 的形状 (batch_size, block_size)", f"{label}: shape of {name}, "
                                "(batch_size, block_size)"), str((batch, block)), str(tuple(z.shape)),
                              BATCH_BUGS["transposed"] if tuple(z.shape) == (block, batch) else
                              BATCH_BUGS["long"] if tuple(z.shape) == (batch, block + 1) else None)
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
            contiguous = block == 1 or torch.equal(y[:, 1:] - y[:, :-1], torch.ones(batch, block - 1, dtype=y.dtype))
            bug = BATCH_BUGS["not_shifted"] if torch.equal(y, x) else BATCH_BUGS["shift_two"] if \
                torch.equal(y, x + 2) else BATCH_BUGS["separate"] if contiguous and len(set((y - x)[:, 0].tolist())) > 1 \
                else None
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
        bug = BATCH_BUGS["last_start"] if seen == {0, 1, 2} else BATCH_BUGS["first_start"] if seen == {1, 2, 3} \
            else BATCH_BUGS["past_end"] if max(seen) > 3 else None
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
                    f"{what}: different seeds gave the same batch; the starts are not drawn with the generator.",
                    BATCH_BUGS["generator"])
    return n


BATCH_ERRORS = [(Raises(contains=("but got from=1 >= to=1",)), BATCH_BUGS["first_start"]),
                (Raises(contains=("'from' to be less than 'to'",)), BATCH_BUGS["last_start"]),
                # windows of unequal length ("equal size") come from a start past the end, but as well from
                # windows one too long or shifted by two: that sign alone names none of them
                (Raises(contains=("out of bounds", "out of range")), BATCH_BUGS["past_end"])]


def get_batch_stand_in(data, block_size, batch_size, generator=None):
    """A correct get_batch for a student's training loop to call."""
    starts = torch.randint(len(data) - block_size, (batch_size, 1), generator=generator)
    rows = starts + torch.arange(block_size)
    return data[rows], data[rows + 1]


BATCH_EARLIER = Earlier("get_batch", 2, passes(_batch_checks), get_batch_stand_in)


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


GPT_BUGS.update({
    "bias": Bug("gpt_lm_head_has_bias", "lm_head 带了偏置：要写 nn.Linear(d_model, vocab_size, bias=False)。它和词嵌入共享的只有"
                "权重矩阵，偏置是多出来的一组参数。",
                "the lm_head has a bias: write nn.Linear(d_model, vocab_size, bias=False). Only the weight matrix is shared "
                "with the token embedding; a bias is an extra set of parameters.", None),
    "loss_not_none": Bug("gpt_loss_not_none_without_targets", "没有 targets 时 loss 应是 None（生成时就是这样调用的），"
                         "这里却是一个数。写 loss = None，只有 targets is not None 时才算交叉熵。",
                         "without targets the loss must be None (that is how generation calls the model); here it is a "
                         "number. Start from loss = None and compute the cross-entropy only when targets is not None.", None),
    "dropout_eval": Bug("gpt_dropout_in_eval_mode", "dropout 在 eval() 模式下也在丢：注意力的 dropout 概率只在训练时"
                        "（self.training 为真）是 self.dropout，否则是 0（F.dropout 也要传 training=self.training），"
                        "评估和生成时模型才是确定的。",
                        "dropout still drops in eval() mode: the attention's dropout probability is self.dropout only "
                        "while training (self.training is true) and 0 otherwise (and F.dropout needs "
                        "training=self.training), so that evaluation and generation are deterministic.", None),
    "no_attn_dropout": Bug("gpt_attention_dropout_missing", "注意力权重上没有 dropout：训练模式下（dropout=0.5）注意力的输出和 "
                           "eval 模式下完全一样。融合实现要在训练时传 dropout_p=self.dropout（eval 时传 0），"
                           "手写时在 softmax 之后对权重做 F.dropout，training 参数传 self.training。",
                           "there is no dropout on the attention weights: in training mode (dropout=0.5) the attention's "
                           "output equals its output in eval mode. Give the fused kernel dropout_p of self.dropout while "
                           "training (0 in eval mode), or, by hand, apply F.dropout to the weights after the softmax, "
                           "with training set to self.training.", None),
    "dropout_scores": Bug("gpt_attention_dropout_on_scores", "dropout 用在了 softmax 之前的分数上：被丢掉的分数变成 0，"
                          "softmax 又把每一行重新归一化，每个位置的注意力权重加起来仍然是 1。题目要的是 softmax 之后"
                          "丢掉权重本身（剩下的按 1/(1-p) 放大），融合实现的 dropout_p 就是这样做的。",
                          "dropout is applied to the scores before the softmax: a dropped score becomes 0, the softmax "
                          "renormalises each row, and every position's attention weights still add up to 1. The "
                          "exercise drops the weights themselves, after the softmax (the rest scaled up by 1/(1-p)), "
                          "as the fused kernel's dropout_p does.", None),
    "no_emb_dropout": Bug("gpt_embedding_dropout_missing", "词嵌入加位置嵌入之后没有 dropout：训练模式下（dropout=0.5）进入第一个块"
                          "的正是 wte(idx) + wpe(pos)，一个都没有丢。在 __init__ 里建一个 nn.Dropout(config.dropout) 模块，"
                          "forward 里把两个嵌入的和先交给它，再进第一个块。",
                          "there is no dropout after adding the token and position embeddings: in training mode "
                          "(dropout=0.5) the first block receives exactly wte(idx) + wpe(pos), nothing dropped. Build an "
                          "nn.Dropout(config.dropout) module in __init__ and pass the sum of the two embeddings through it "
                          "in forward, before the first block.", None),
    "emb_partial": Bug("gpt_embedding_dropout_not_on_sum", "dropout 只用在了其中一个嵌入上（例如只丢 wte(idx)，再加上 wpe）："
                       "题目要的是先把词嵌入和位置嵌入加起来，再对这个和做 dropout。",
                       "dropout acts on one of the embeddings only (say wte(idx), with wpe added afterwards): the "
                       "exercise adds the token and position embeddings first and applies dropout to their sum.", None),
    "no_scale": Bug("gpt_attention_not_scaled", "注意力分数没有除以 √d_k：要用 q @ kᵀ / √d_k（d_k 是每个头的宽度 "
                    "d_model / n_head），否则分数随 d_k 变大，softmax 饱和（第 1 章）。",
                    "the attention scores are not divided by √d_k: use q @ kᵀ / √d_k (d_k is one head's width, d_model / "
                    "n_head), or the scores grow with d_k and the softmax saturates (chapter 1).", None),
    "scale_d": Bug("gpt_attention_scaled_by_d_model", "注意力分数除的是 √d_model，应是每个头的宽度 √d_k = √(d_model / n_head)。",
                   "the attention scores are divided by √d_model; divide by the width of one head, √d_k = "
                   "√(d_model / n_head).", None),
    "heads_split": Bug("gpt_heads_split_wrong", "拆成多头时直接 view/reshape 成 (B, n_head, T, d_k)：这样切开的不是各个头的通道，"
                       "而是把不同位置的数混进了同一行。要先 view(B, T, n_head, d_k)，再 transpose(1, 2)。",
                       "the split into heads reshapes straight to (B, n_head, T, d_k): that does not cut each position's "
                       "channels into heads but mixes different positions into one row. View as (B, T, n_head, d_k) "
                       "first, then transpose(1, 2).", None),
    "heads_merge": Bug("gpt_heads_merged_wrong", "多头拼回 (B, T, d) 时没有先 transpose(1, 2)：直接 reshape (B, n_head, T, d_k) "
                       "会把不同位置的输出混在一起。写 y.transpose(1, 2).reshape(B, T, d)（或 .contiguous().view）。",
                       "the heads are merged back to (B, T, d) without a transpose(1, 2) first: reshaping (B, n_head, T, "
                       "d_k) directly mixes the outputs of different positions. Write y.transpose(1, 2).reshape(B, T, d) "
                       "(or .contiguous().view).", None),
    "no_wpe": Bug("gpt_position_embedding_unused", "位置嵌入没有加上：x 只是 wte(idx)，模型不知道每个 token 在第几个位置。"
                  "x = wte(idx) + wpe(torch.arange(T))。",
                  "the position embedding is not added: x is only wte(idx), so the model cannot tell where a token stands. "
                  "x = wte(idx) + wpe(torch.arange(T)).", None),
    "last_only": Bug("gpt_logits_last_position_only", "只返回了最后一个位置的 logits（例如 lm_head(x[:, -1, :])，"
                     "这是生成时的省事写法）：forward 要给每个位置都打分，logits 的形状是 (B, T, vocab_size)，"
                     "训练时每个位置都是一道题。",
                     "only the last position's logits are returned (e.g. lm_head(x[:, -1, :]), a shortcut for "
                     "generation): forward scores every position, logits of shape (B, T, vocab_size), since in "
                     "training every position is a question.", None),
    "no_ln_f": Bug("gpt_final_layernorm_unused", "最后的 LayerNorm ln_f 建了却没有用：logits = lm_head(ln_f(x))。",
                   "the final LayerNorm ln_f is built but never applied: logits = lm_head(ln_f(x)).", None),
})


class _NoReference(Exception):
    pass


def _ref_attention(attn, h, *, scale="d_k", split=True, merge=True, diagonal=0):
    """Causal multi-head attention of ``attn``'s own projections (c_attn, or q/k/v_proj), written here."""
    B, T, d = h.shape
    if isinstance(getattr(attn, "c_attn", None), nn.Linear):
        q, k, v = attn.c_attn(h).split(d, dim=-1)
    elif all(isinstance(getattr(attn, n, None), nn.Linear) for n in ("q_proj", "k_proj", "v_proj")):
        q, k, v = attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)
    else:
        raise _NoReference
    nh = attn.n_head
    dk = d // nh
    q, k, v = ((z.view(B, T, nh, dk).transpose(1, 2) if split else z.reshape(B, nh, T, dk)) for z in (q, k, v))
    s = q @ k.transpose(-2, -1)
    s = s / math.sqrt(dk if scale == "d_k" else d) if scale else s
    if diagonal is not None:                         # None: no mask at all; 1: each position sees the next one too
        s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(diagonal), float("-inf"))
    y = torch.softmax(s, dim=-1) @ v
    y = y.transpose(1, 2).reshape(B, T, d) if merge else y.reshape(B, T, d)
    return attn.c_proj(y)


def _ref_logits(model, idx, *, wpe=True, ln_f=True, **attn_kw):
    T = idx.shape[1]
    x = model.wte(idx)
    if wpe:
        x = x + model.wpe(torch.arange(T))
    for blk in model.blocks:
        x = x + _ref_attention(blk.attn, blk.ln_1(x), **attn_kw)
        x = x + blk.mlp(blk.ln_2(x))
    return model.lm_head(model.ln_f(x) if ln_f else x)


_GPT_REF_BUGS = (("no_scale", dict(scale=None)), ("scale_d", dict(scale="d")), ("heads_split", dict(split=False)),
                 ("heads_merge", dict(merge=False)), ("no_wpe", dict(wpe=False)), ("no_ln_f", dict(ln_f=False)))


def _in_float64(model):
    """A float64 copy of the model when it runs in float64, else the model itself."""
    try:
        m64 = copy.deepcopy(model).double()
        with torch.no_grad():
            m64(torch.zeros(1, 3, dtype=torch.long))
        return m64, Tol(1e-6, 1e-6)
    except Exception:  # noqa: BLE001 - a model that insists on float32 is compared in float32
        return model, Tol(1e-4, 1e-4)


def _gpt_known_bug(model, idx, logits) -> Bug | None:
    """The wiring mistake (scale, heads, embeddings, ln_f) whose reference gives these logits, if any."""
    with torch.no_grad():
        for key, kw in _GPT_REF_BUGS:
            try:
                wrong = _ref_logits(model, idx, **kw)
            except Exception:  # noqa: BLE001 - a layout the reference does not know
                return None
            if same(logits, wrong, FINGERPRINT):
                return GPT_BUGS[key]
    return None


def _causality_only(model, idx, logits) -> bool:
    """The logits are right but for the causal mask (none, or one step too far): that is test_gpt_causal's to
    charge, so this cell does not charge it again."""
    with torch.no_grad():
        for diagonal in (None, 1):
            try:
                if same(logits, _ref_logits(model, idx, diagonal=diagonal), FINGERPRINT):
                    return True
            except Exception:  # noqa: BLE001
                return False
    return False


def _gpt_matches_reference(model, V) -> None:
    """The logits equal those of the wiring the exercise describes, with the student's own parameters."""
    if not all(hasattr(model, a) for a in ("wte", "wpe", "blocks", "ln_f", "lm_head")) or \
            not all(all(hasattr(b, a) for a in ("ln_1", "attn", "ln_2", "mlp")) for b in model.blocks):
        return
    m, tol = _in_float64(model)
    idx = torch.randint(V, (2, 9), generator=seeded(73))
    with torch.no_grad():
        logits = _forward(m, idx, t("GPT(idx 形状 (2, 9))", "GPT(idx of shape (2, 9))"), V=V)[0]
        try:
            want = _ref_logits(m, idx)
        except _NoReference:
            return
    verdict = compare(logits, want, tol)
    if verdict.problem is not None and not _causality_only(m, idx, logits):
        raise value_failure(t("GPT：logits（用你的参数按题目的接法算出的参考值）",
                              "GPT: logits (the reference computed from your parameters, wired as the exercise says)"),
                            logits, want, tol, verdict, _gpt_known_bug(m, idx, logits),
                            hint=t("对照第 5 节：wte(idx) + wpe(位置)，每个块 x + attn(ln_1(x))、x + mlp(ln_2(x))，"
                                   "最后 lm_head(ln_f(x))；注意力是因果的、按 √d_k 缩放的多头注意力。",
                                   "compare with section 5: wte(idx) + wpe(positions), each block x + attn(ln_1(x)) and "
                                   "x + mlp(ln_2(x)), then lm_head(ln_f(x)); attention is causal multi-head attention "
                                   "scaled by √d_k."))


def _gpt_dropout_train(GPT, GPTConfig, V, C) -> None:
    """In training mode, dropout acts on the embeddings' sum and inside the attention."""
    torch.manual_seed(8)
    m = _build(GPT, GPTConfig, "GPT(..., dropout=0.5)", vocab_size=V, n_ctx=C, n_layer=1, n_head=2, d_model=16,
               dropout=0.5).train()
    idx = torch.randint(V, (4, 12), generator=seeded(74))
    if all(hasattr(m, a) for a in ("wte", "wpe", "blocks")) and len(m.blocks):
        seen = []
        hook = m.blocks[0].register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach().clone()))
        try:
            torch.manual_seed(9)
            _forward(m, idx, "GPT(dropout=0.5).train()", V=V)
        finally:
            hook.remove()
        with torch.no_grad():
            emb = m.wte(idx) + m.wpe(torch.arange(idx.shape[1]))
        if seen and torch.allclose(seen[0], emb):
            raise _fail("GPT：dropout=0.5、训练模式下，进入第一个块的正是 wte(idx) + wpe(位置)，一个都没有丢。",
                        "GPT: with dropout=0.5 in training mode, the first block receives exactly wte(idx) + "
                        "wpe(positions), nothing dropped.", GPT_BUGS["no_emb_dropout"])
        zeros = float((seen[0] == 0).double().mean()) if seen else 0.5
        if zeros < 0.2:                           # dropout of the sum zeroes about half of the entries
            raise _fail(f"GPT：dropout=0.5、训练模式下，进入第一个块的数里只有 {zeros:.0%} 正好是 0（丢掉的是两个嵌入的和时约一半）。",
                        f"GPT: with dropout=0.5 in training mode, only {zeros:.0%} of the numbers entering the first "
                        "block are exactly 0 (about half are when the sum of the two embeddings is dropped).",
                        GPT_BUGS["emb_partial"])
        attn = m.blocks[0].attn
        x = torch.randn(2, 7, 16, generator=seeded(75))
        with torch.no_grad():
            outs = []
            for s in (10, 11, 12):
                torch.manual_seed(s)
                outs.append(attn.train()(x))
            calm = attn.eval()(x)
        m.train()
        if all(torch.allclose(o, calm, atol=1e-6) for o in outs):
            raise _fail("GPT：dropout=0.5 时，训练模式下注意力（blocks[0].attn）的输出和 eval 模式下完全一样。",
                        "GPT: with dropout=0.5 the attention (blocks[0].attn) gives in training mode exactly what it "
                        "gives in eval mode.", GPT_BUGS["no_attn_dropout"])
        _dropout_after_softmax(attn, 16)


def _dropout_after_softmax(attn, d: int) -> None:
    """With every value 1 (the value part of the projection zeroed, its bias 1) and c_proj the identity, each
    output is a row sum of the attention weights. Dropout after the softmax (the exercise's) makes position 0's
    0 or 2; dropout on the scores before the softmax leaves every row sum at exactly 1."""
    a = copy.deepcopy(attn).train()
    with torch.no_grad():
        if isinstance(getattr(a, "c_attn", None), nn.Linear) and a.c_attn.bias is not None:
            a.c_attn.weight[2 * d:].zero_()
            a.c_attn.bias[2 * d:].fill_(1.0)
        elif isinstance(getattr(a, "v_proj", None), nn.Linear) and a.v_proj.bias is not None:
            a.v_proj.weight.zero_()
            a.v_proj.bias.fill_(1.0)
        else:
            return
        if not (isinstance(getattr(a, "c_proj", None), nn.Linear) and a.c_proj.bias is not None):
            return
        a.c_proj.weight.copy_(torch.eye(d))
        a.c_proj.bias.zero_()
        torch.manual_seed(13)
        out = a(torch.randn(3, 7, d, generator=seeded(76)))
    if torch.allclose(out, torch.ones_like(out), atol=1e-5):
        raise _fail("GPT：dropout=0.5、训练模式下，每个位置的注意力权重加起来仍然正好是 1（所有的值都设成 1 时，"
                    "注意力的每个输出都是 1）：dropout 没有丢掉 softmax 之后的权重。",
                    "GPT: with dropout=0.5 in training mode, every position's attention weights still add up to "
                    "exactly 1 (with every value set to 1, each output of the attention is 1): dropout did not drop "
                    "weights after the softmax.", GPT_BUGS["dropout_scores"])


def _build(GPT, GPTConfig, label, **cfg):
    config = call(GPTConfig, what=f"GPTConfig({cfg})", **cfg)
    return call(GPT, config, what=label)


def _forward(model, idx, label, targets=None, V=None):
    """(logits, loss), with the logits' type and shape (B, T, V) validated before anyone indexes them."""
    n_ctx = getattr(getattr(model, "config", None), "n_ctx", None)
    hints = [(lambda exc, line: isinstance(exc, ValueError) and idx.shape[-1] == n_ctx, GPT_BUGS["off_by_one"])]
    out = call(model, idx, what=label, hints=hints) if targets is None else \
        call(model, idx, targets, what=label, hints=hints)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise _fail(f"{label}：forward 应返回 (logits, loss)，实际得到 {type(out).__name__}。",
                    f"{label}: forward must return (logits, loss), got {type(out).__name__}.")
    logits = out[0]
    want = (*idx.shape, V) if V is not None else None
    if not isinstance(logits, torch.Tensor) or (want is not None and tuple(logits.shape) != want):
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        last_only = want is not None and got in ((want[0], want[2]), (want[0], 1, want[2]))
        raise failure(t(f"{label}：logits 的形状", f"{label}: shape of logits"), str(want), str(got),
                      GPT_BUGS["last_only"] if last_only else None,
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
                    f"{label}: lm_head must have no bias (bias=False); only the weight matrix is shared.", GPT_BUGS["bias"])


def _gpt_loss(model, V) -> None:
    """No targets: loss None. With targets: the mean cross-entropy of the returned logits."""
    gen = seeded(71)
    idx, targets = torch.randint(V, (3, 10), generator=gen), torch.randint(V, (3, 10), generator=gen)
    with torch.no_grad():
        _, loss = _forward(model, idx, t("GPT(idx 形状 (3, 10))", "GPT(idx of shape (3, 10))"), V=V)
        if loss is not None:
            raise failure(t("GPT(idx)：没有 targets 时的 loss", "GPT(idx): loss without targets"), "None", show(loss),
                          GPT_BUGS["loss_not_none"])
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
                    "only act while training (self.training).", GPT_BUGS["dropout_eval"])


def check_gpt(GPT, GPTConfig) -> None:
    with on_its_own(GPT, (CE_EARLIER,)):
        _check_gpt(GPT, GPTConfig)
        passed("GPT", 11)                     # here: a check seals with its own name


def _check_gpt(GPT, GPTConfig) -> None:
    V, C, L, H, D = 37, 16, 2, 4, 32
    torch.manual_seed(0)
    label = f"GPT(GPTConfig(vocab_size={V}, n_ctx={C}, n_layer={L}, n_head={H}, d_model={D}))"
    model = _build(GPT, GPTConfig, label, vocab_size=V, n_ctx=C, n_layer=L, n_head=H, d_model=D)
    _gpt_structure(model, label, V, C, L, D)
    model.eval()
    _gpt_loss(model, V)
    _gpt_lengths(model, C, V)
    _gpt_matches_reference(model, V)
    _gpt_initial_loss(GPT, GPTConfig)
    _gpt_dropout_eval(GPT, GPTConfig, V, C)
    _gpt_dropout_train(GPT, GPTConfig, V, C)


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
            wiring = _gpt_known_bug(model, a, la) if la.dtype == torch.float64 else None
            raise failure(t(f"GPT：只改动位置 {p} 及以后的 token，位置 0…{p - 1} 的 logits",
                            f"GPT: tokens changed from position {p} on; logits at positions 0…{p - 1}"),
                          t("不变", "unchanged"), t(f"位置 {changed} 变了", f"positions {changed} changed"),
                          wiring or (GPT_BUGS["sees_next"] if leak else GPT_BUGS["no_mask"]))
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
                     "随机数没有来自参数 generator（没有把它交给 torch.multinomial，或者用了全局的 torch.manual_seed）："
                     "同一个种子两次生成的结果不同，或者换了种子结果却一样。",
                     "the random numbers do not come from the generator argument (it is not given to "
                     "torch.multinomial, or the global torch.manual_seed is used instead): the same seed generates two "
                     "different sequences, or another seed the same one.", None),
    "topk_broadcast": Bug("generate_topk_threshold_shape",
                          "top-k 的阈值形状是 (B,)，和形状为 (B, V) 的 logits 对不上（只有 B = 1 时碰巧能广播）。"
                          "保留最后一维：torch.topk(logits, k).values[:, [-1]]（或 [..., -1:]、.unsqueeze(-1)）。",
                          "the top-k threshold has shape (B,), which does not broadcast against logits of shape (B, V) "
                          "(it only happens to work when B = 1). Keep the last axis: torch.topk(logits, k).values[:, [-1]] "
                          "(or [..., -1:], or .unsqueeze(-1)).", None),
    "topk_large": Bug("generate_topk_larger_than_vocab",
                      "top_k 比词表还大时 torch.topk 报错（selected index k out of range）：题目说这时等于不过滤。"
                      "先 k = min(top_k, logits.size(-1))，或 top_k 不小于词表大小时跳过过滤。",
                      "torch.topk fails when top_k is larger than the vocabulary (selected index k out of range): the "
                      "exercise says that means no filtering. Take k = min(top_k, logits.size(-1)) first, or skip the "
                      "filter when top_k is at least the vocabulary size.", None),
    "new_only": Bug("generate_returns_new_tokens_only",
                    "只返回了新生成的 max_new_tokens 个 token：要返回完整的序列，原来的 idx 在前，新的接在后面，形状 "
                    "(B, T + max_new_tokens)。",
                    "only the max_new_tokens new tokens are returned: return the whole sequence, the original idx followed "
                    "by the new tokens, of shape (B, T + max_new_tokens).", None),
    "cropped": Bug("generate_returns_cropped", "返回的序列被裁剪了（把裁剪后的上下文当成了序列接着往后接）：裁剪只作用在喂给"
                   "模型的那一段上，返回的序列要完整保留原来的 idx 和每一个新 token，形状 (B, T + max_new_tokens)。",
                   "the sequence returned is cropped (the cropped context became the sequence that grows): the crop "
                   "applies only to what the model is fed; the sequence returned keeps the original idx and every new "
                   "token, shape (B, T + max_new_tokens).", None),
    "all_positions": Bug("generate_all_positions", "所有位置的 logits 都进了 softmax 和 multinomial（形状 (B, T, V)）："
                         "下一个 token 的打分只是最后一个位置的那一行，logits[:, -1, :]，形状 (B, V)。",
                         "the logits of every position go into the softmax and multinomial (shape (B, T, V)): the next "
                         "token's scores are the last position's row only, logits[:, -1, :], shape (B, V).", None),
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
    (Raises(contains=("n_ctx",), types=("ValueError",)), GEN_BUGS["no_crop"]),
    (Raises(contains=("must match the size of tensor",), line=("<", ">", "topk", "kth")), GEN_BUGS["topk_broadcast"]),
    (Raises(contains=("k out of range",)), GEN_BUGS["topk_large"]),
    (Raises(contains=("out of range",), line=("topk",)), GEN_BUGS["topk_large"]),
    (Raises(contains=("prob_dist must be 1 or 2 dim",)), GEN_BUGS["all_positions"]),
]


def _generate(generate, table, idx, steps, label, **kw):
    """The student's generate on the fixed bigram model, its output's shape and prefix checked."""
    out = call(generate, _bigram(table, _N_CTX), idx.clone(), steps, what=f"generate({label})", hints=GEN_HINTS, **kw)
    want = (idx.shape[0], idx.shape[1] + steps)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise failure(t(f"generate({label})：输出形状", f"generate({label}): output shape"), str(want), str(got),
                      GEN_BUGS["new_only"] if got == (idx.shape[0], steps) else
                      GEN_BUGS["cropped"] if got == (idx.shape[0], _N_CTX + 1) else None,
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
    label = f"top_k={V + 3} > vocab_size={V}, 6000 " + t("次抽样", "samples")
    wide = _generate(generate, table, torch.full((6000, 1), 2), 1, label, top_k=V + 3, generator=seeded(5))
    counts = torch.bincount(wide[:, 1], minlength=V)[:V]
    if (counts == 0).any() or _tv(counts, torch.softmax(table[2].double(), -1)) > 0.035:
        raise failure(t(f"generate({label})：抽样频率", f"generate({label}): sample frequencies"),
                      show(torch.softmax(table[2].double(), -1)), show(counts.double() / 6000), GEN_BUGS["topk_large"])
    a = _generate(generate, table, torch.zeros(64, 1, dtype=torch.long), 4, "seed 9", generator=seeded(9))
    b = _generate(generate, table, torch.zeros(64, 1, dtype=torch.long), 4, "seed 9", generator=seeded(9))
    c = _generate(generate, table, torch.zeros(64, 1, dtype=torch.long), 4, "seed 10", generator=seeded(10))
    if not torch.equal(a, b) or torch.equal(a, c):
        raise failure(t("generate：同一个种子调用两次，再换一个种子", "generate: the same seed twice, then another seed"),
                      t("同一个种子结果相同，换了种子结果不同", "the same result for the same seed, another for another seed"),
                      t("不同的结果" if not torch.equal(a, b) else "换了种子结果却相同",
                        "different results" if not torch.equal(a, b) else "the same result for another seed"),
                      GEN_BUGS["generator"])


def ref_generate(model, idx, steps, temperature=1.0, top_k=None, generator=None, *, pick_last=True,
                 crop_front=False, smallest=False):
    """The grader's generate (and, by its keywords, three known wrong ones), for the visible tests' probe."""
    n_ctx = model.config.n_ctx
    for _ in range(steps):
        logits = model(idx[:, :n_ctx] if crop_front else idx[:, -n_ctx:])[0]
        logits = (logits[:, -1] if pick_last else logits[:, 0]).double() / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1, largest=not smallest).values[:, -1:]
            logits = logits.masked_fill(logits > kth if smallest else logits < kth, float("-inf"))
        nxt = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def check_generate(generate) -> None:
    table = torch.randn(7, 7, generator=seeded(111)) * 1.5
    table[:, 0] += 0.5                                       # no ties
    _gen_greedy(generate, table)
    _gen_sampling(generate, table)
    _gen_cold_and_seeded(generate, table)
    passed("generate", 7)




# ================================================================= cross_entropy

CE_FORBIDDEN = SOFTMAX_FAMILY | frozenset({"cross_entropy", "nll_loss", "nll_loss_nd", "nll_loss2d", "binary_cross_entropy"})


def own_loss(what: str):
    """While a later exercise (the step, the evaluation) runs: its loss comes from the student's own
    cross_entropy (directly, or through their model's loss), so torch's (and its parts) may not be called. A correct
    cross_entropy standing in for a wrong one is the grader's own call and stays allowed."""
    return forbidden(CE_FORBIDDEN, what,
                     t(f"{what} 的损失要来自你在练习 3 写的 cross_entropy（直接调用它，或者用模型返回的 loss），"
                       "不能调用 {name}：数是一样的，但这一题要的是你自己的函数（练习 3 的 cross_entropy 错了也没关系，"
                       "评分时会换上一个正确的）。",
                       f"{what} takes its loss from your own cross_entropy of exercise 3 (called directly, or through "
                       "the loss your model returns): calling {name} is not allowed. The number is the same, but the "
                       "exercise asks for your function (if your cross_entropy is wrong, the grader puts a correct one "
                       "in its place)."))


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


def _ce_parts(logits, targets):
    z = as_f64(logits).reshape(-1, logits.shape[-1])
    ids = targets.reshape(-1)
    m = z.max(dim=-1, keepdim=True).values
    return z, ids, m, z[torch.arange(z.shape[0]), ids]


def _ce_log2(logits, targets):
    z, ids, m, right = _ce_parts(logits, targets)
    return (m.squeeze(-1) + torch.log2(torch.exp(z - m).sum(-1)) - right).mean()


def _ce_shift_dropped(logits, targets):
    z, ids, m, right = _ce_parts(logits, targets)
    return (torch.log(torch.exp(z - m).sum(-1)) - right).mean()


def _ce_global_max(logits, targets):
    z, ids, _, right = _ce_parts(logits, targets)
    m = z.max()
    return (m + torch.log(torch.exp(z - m).sum(-1)) - right).mean()


def _ce_right_every_row(logits, targets):
    z, ids, _, _ = _ce_parts(logits, targets)
    return (torch.logsumexp(z, -1) - z[:, ids]).mean()


def _ce_sign(logits, targets):
    return -ref_cross_entropy(logits, targets)


def _ce_all_tokens(logits, targets):
    z, _, _, _ = _ce_parts(logits, targets)
    return (torch.logsumexp(z, -1, keepdim=True) - z).mean()


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
    Bug("ce_log_base_2", "用的是以 2 为底的对数（torch.log2）：交叉熵用自然对数 ln（torch.log），"
        "以 2 为底量出来的是比特，和 ln V、PyTorch 的损失都对不上（差一个因子 ln 2）。",
        "this uses the base-2 logarithm (torch.log2): the cross-entropy uses the natural log ln (torch.log); base 2 "
        "measures bits and matches neither ln V nor PyTorch's loss (off by a factor ln 2).", _ce_log2),
    Bug("ce_max_not_added_back", "减去的最大值 m 没有加回来：ln Σ exp(z) = m + ln Σ exp(z − m)，"
        "只写 ln Σ exp(z − m) 会让每个位置的损失少了 m。",
        "the maximum m that was subtracted is not added back: ln Σ exp(z) = m + ln Σ exp(z − m); writing only "
        "ln Σ exp(z − m) leaves every position's loss short by m.", _ce_shift_dropped),
    Bug("ce_max_of_whole_batch", "减去的是整批 logits 的最大值（z.max()），不是每一行自己的最大值：某一行的分数都远低于"
        "整批最大值时，exp(z − m) 全部下溢成 0，取 log 得 -inf。要写 z.max(dim=-1, keepdim=True)。",
        "the maximum subtracted is that of the whole batch (z.max()), not each row's own: when a row's scores lie far "
        "below the batch maximum, exp(z − m) underflows to 0 everywhere and its log is -inf. Write "
        "z.max(dim=-1, keepdim=True).", _ce_global_max),
    Bug("ce_right_score_every_row", "正确 token 的分数取错了：z[:, ids] 会从每一行都取出所有位置的正确答案（一个 N × N 的矩阵）。"
        "每一行只取自己那一个：z[torch.arange(N), ids]（或 z.gather(1, ids[:, None])）。",
        "the right token's score is picked wrongly: z[:, ids] takes every position's answer from every row (an N × N "
        "matrix). Take one per row: z[torch.arange(N), ids] (or z.gather(1, ids[:, None])).", _ce_right_every_row),
    Bug("ce_sign_flipped", "符号反了：损失是 ln Σ exp(z) − z_y（总是 ≥ 0），这里算成了 z_y − ln Σ exp(z)。",
        "the sign is flipped: the loss is ln Σ exp(z) − z_y (never negative); this computes z_y − ln Σ exp(z).",
        _ce_sign),
    Bug("ce_mean_over_all_tokens", "没有挑出正确 token：这是 −log p 在词表所有 token 上的平均，而损失只看正确答案 y 的那一项："
        "ln Σ exp(z) − z_y。",
        "the right token is never picked: this averages −log p over every token of the vocabulary, while the loss "
        "looks only at the right answer y: ln Σ exp(z) − z_y.", _ce_all_tokens),
]
CE_SHAPE = Bug("ce_assumes_three_axes", "代码假定 logits 一定是三维 (B, T, V)（例如 B, T, V = logits.shape，或 logits.size(2)）："
               "题目要求形状 (..., V) 都能用，(N, V) 也要能算。用 logits.reshape(-1, logits.shape[-1]) 把前面的维度压成一维。",
               "the code assumes logits are always 3-D (B, T, V) (e.g. B, T, V = logits.shape, or logits.size(2)): the "
               "exercise asks for "
               "any shape (..., V), (N, V) included. Flatten the leading axes with logits.reshape(-1, logits.shape[-1]).")
CE_NOT_SCALAR = Bug("ce_not_a_scalar", "返回的不是 0 维张量（标量），而是形状 (1,) 之类的张量（mean(dim=0, keepdim=True)、"
                    "reshape(1) 或 unsqueeze）：直接用 .mean()，不带 dim 和 keepdim。",
                    "the result is not a 0-dimensional tensor (a scalar) but one of shape (1,) or so "
                    "(mean(dim=0, keepdim=True), reshape(1), unsqueeze): use plain .mean(), without dim or keepdim.")
CE_DTYPE = Bug("ce_dtype_changed", "返回值的 dtype 和 logits 不同（例如先 .float() 或 .double()）：dtype 和 logits 相同——"
               "float64 进，float64 出——梯度检查和半精度训练都靠这一点。",
               "the result's dtype differs from that of the logits (a .float() or .double() on the way): keep the "
               "dtype of the logits — float64 in, float64 out — the gradient check and half-precision training rely "
               "on it.")
CE_DETACHED = Bug("ce_cut_from_graph", "损失断开了计算图（.item() 再 torch.tensor(...)、.detach() 或 numpy）：训练靠它求梯度，"
                  "loss.backward() 传不回 logits。全程用张量运算，直接返回 .mean() 的结果。",
                  "the loss is cut off from autograd (.item() then torch.tensor(...), .detach(), or numpy): training "
                  "needs its gradient and loss.backward() cannot reach the logits. Stay with tensor operations and "
                  "return the result of .mean().")
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
    yield (t("极端的 logits（±数千）", "extreme logits (± thousands)"), z, torch.tensor([3, 0, 7, 2]), [CE_OVERFLOW] + CE_BUGS)




def cross_entropy_stand_in(logits, targets):
    """A correct cross_entropy for a student's GPT or step to call (keeps dtype and autograd)."""
    z = logits.reshape(-1, logits.shape[-1])
    m = z.max(dim=-1, keepdim=True).values.detach()
    lse = m.squeeze(-1) + torch.log(torch.exp(z - m).sum(-1))
    return (lse - z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()


CE_ERRORS = [(Raises(contains=("values to unpack",)), CE_SHAPE),
             (Raises(contains=("Dimension out of range",), line=("size(2)", "shape[2]")), CE_SHAPE)]


def check_cross_entropy(cross_entropy) -> None:
    passed("cross_entropy", _ce_checks(cross_entropy))


def _ce_checks(cross_entropy) -> int:
    what = "cross_entropy"
    check = Check(what, cross_entropy, forbid=CE_FORBIDDEN, hints=CE_ERRORS)
    for label, z, y, bugs in _ce_cases():
        got = check.call(z, y, label=label)
        check.tensor(label, got, (), hint=t("返回一个标量（0 维张量）：所有位置损失的平均。",
                                            "return a scalar (a 0-dimensional tensor): the mean over all positions."),
                     bug=CE_NOT_SCALAR if isinstance(got, torch.Tensor) and got.numel() == 1 else
                     CE_BUGS[2] if isinstance(got, torch.Tensor) and got.dim() == 1 else None)
        if got.dtype != z.dtype:
            raise check.fail(t(f"{label}：返回值的 dtype（应和 logits 相同）", f"{label}: dtype of the result (that of "
                               "the logits)"), str(z.dtype), str(got.dtype), CE_DTYPE)
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
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise check.fail(t(f"{label}：返回值能否求梯度（requires_grad）", f"{label}: can the result be differentiated "
                           "(requires_grad)"), "True", "False", CE_DETACHED)
    grad, = torch.autograd.grad(out, z)
    p = torch.exp(z.detach() - torch.logsumexp(z.detach(), -1, keepdim=True))
    want = (p - F.one_hot(y, 7).double()) / y.numel()
    check.expect(label, grad, want, hint=t("梯度应是 (softmax(z) − one_hot(y)) / 位置数：检查 log-sum-exp 有没有断开计算图。",
                                           "the gradient is (softmax(z) − one_hot(y)) / number of positions: check that "
                                           "the log-sum-exp stays in the graph."))
    return check.n


CE_EARLIER = Earlier("cross_entropy", 3, passes(_ce_checks), cross_entropy_stand_in)


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


def _lr_decay_shape(shape):
    """The reference schedule with its decay (0 → 1 over the decay) replaced by ``shape(progress, peak, floor)``."""
    def lr(step, max_steps, warmup_steps, peak_lr, min_lr):
        if step < warmup_steps:
            return peak_lr * (step + 1) / warmup_steps
        if step >= max_steps:
            return min_lr
        return shape((step - warmup_steps) / (max_steps - warmup_steps), peak_lr, min_lr)
    return lr


def _lr_warmup_from_floor(step, max_steps, warmup_steps, peak_lr, min_lr):
    if step < warmup_steps:
        return min_lr + (peak_lr - min_lr) * (step + 1) / warmup_steps
    return ref_learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr)


_lr_linear = _lr_decay_shape(lambda p, peak, floor: floor + (1 - p) * (peak - floor))
_lr_quarter = _lr_decay_shape(lambda p, peak, floor: floor + math.cos(math.pi / 2 * p) * (peak - floor))
_lr_zero_clamped = _lr_decay_shape(lambda p, peak, floor: max(floor, 0.5 * (1 + math.cos(math.pi * p)) * peak))
_lr_zero_then_floor = _lr_decay_shape(lambda p, peak, floor: 0.5 * (1 + math.cos(math.pi * p)) * peak)

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
    Bug("lr_linear_decay", "这是线性衰减，而计划要的是半个余弦：lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr)，"
        "p 从 0 走到 1。两者只在起点、中点和终点相同；衰减走到 25% 时余弦还在 min_lr + 0.854·(peak_lr − min_lr)，"
        "线性只剩 min_lr + 0.75·(peak_lr − min_lr)。",
        "this is a linear decay where the schedule is a half cosine: lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr), "
        "with p going from 0 to 1. The two agree only at the start, the middle and the end; at 25% of the decay the "
        "cosine is still at min_lr + 0.854·(peak_lr − min_lr), the line already at min_lr + 0.75·(peak_lr − min_lr).",
        _lr_linear),
    Bug("lr_quarter_cosine", "这是四分之一个余弦（cos(π·p/2)），而计划要的是半个余弦 ½(1 + cos(π·p))：四分之一个余弦开头"
        "降得慢、结尾降得陡，衰减走到一半时是 min_lr + 0.707·(peak_lr − min_lr)，应是正中间 min_lr + 0.5·(peak_lr − min_lr)。",
        "this is a quarter cosine (cos(π·p/2)) where the schedule is a half cosine ½(1 + cos(π·p)): the quarter "
        "cosine falls slowly at first and steeply at the end; half-way through the decay it is at min_lr + "
        "0.707·(peak_lr − min_lr), where the rate must be exactly in the middle, min_lr + 0.5·(peak_lr − min_lr).",
        _lr_quarter),
    Bug("lr_decay_to_zero_clamped", "余弦衰减到 0 再被 max(min_lr, …) 截住：这样前面一段整体偏低，后面一段贴在 min_lr 上，"
        "比计划早到底。余弦要在 peak_lr 和 min_lr 之间走：lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr)。",
        "the cosine decays to 0 and is then clamped with max(min_lr, …): the early part runs too low and the late "
        "part sits on min_lr, reaching the floor before its time. The cosine must run between peak_lr and min_lr: "
        "lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr).", _lr_zero_clamped),
    Bug("lr_decay_to_zero_then_floor", "余弦衰减到了 0 而不是 min_lr（第 max_steps 步之前一直往 0 走，之后才跳回 min_lr）："
        "lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr)。",
        "the cosine decays to 0 instead of min_lr (heading for 0 until step max_steps, then jumping back up to "
        "min_lr): lr = min_lr + ½(1 + cos(π·p))(peak_lr − min_lr).", _lr_zero_then_floor),
    Bug("lr_warmup_from_floor", "预热是从 min_lr 开始升的：预热从 0 开始，lr = peak_lr · (step + 1) / warmup_steps，"
        "第 0 步是峰值的 1/warmup_steps，和 min_lr 无关。",
        "the warm-up starts from min_lr: it starts from 0, lr = peak_lr · (step + 1) / warmup_steps, so step 0 runs at "
        "1/warmup_steps of the peak whatever min_lr is.", _lr_warmup_from_floor),
]
LR_TENSOR = Bug("lr_returns_tensor", "返回的是张量（例如用了 torch.cos(torch.tensor(...))），不是 Python 的 float："
                "学习率是写进 optimizer.param_groups 的一个数，用 math.cos，或最后 float(...)。",
                "this returns a tensor (torch.cos(torch.tensor(...)), for example), not a Python float: the rate is a "
                "number written into optimizer.param_groups; use math.cos, or float(...) at the end.")


def _lr_value(check, learning_rate, args, label):
    out = check.call(*args, label=label)
    if isinstance(out, torch.Tensor):
        raise check.fail(label, t("一个 Python 的 float", "a Python float"), type(out).__name__, LR_TENSOR)
    try:
        return float(out)
    except (TypeError, ValueError):
        raise check.fail(label, t("一个数（float）", "a number (float)"), type(out).__name__) from None


def check_learning_rate(learning_rate) -> None:
    passed("learning_rate", _lr_checks(learning_rate))


def _lr_floor_after_max_steps(step, max_steps, warmup_steps, peak_lr, min_lr):
    """The floor from step max_steps + 1 on (the cosine reaches min_lr at max_steps anyway): the same numbers,
    until warmup_steps equals max_steps and p = 0 / 0."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step > max_steps:
        return min_lr
    progress = (step - warmup_steps) / (max_steps - warmup_steps)
    return min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (peak_lr - min_lr)


LR_ZERO_DIV = Bug("lr_divides_by_zero_without_decay",
                  "warmup_steps 等于 max_steps（没有衰减段）时除以了 0：第 max_steps 步算 p 的时候分母是 0。"
                  "先判断 step ≥ max_steps（这时直接返回 min_lr），再算 p，那一行就永远用不到分母是 0 的时候。",
                  "with warmup_steps equal to max_steps (no decay at all) the code divides by 0: at step max_steps "
                  "the denominator of p is 0. Ask whether step ≥ max_steps first (the rate is then min_lr), and only then "
                  "compute p, so the line is never used with a zero denominator.", _lr_floor_after_max_steps)
LR_ERRORS = [(Raises(types=("ZeroDivisionError",)), LR_ZERO_DIV)]
LR_CASES = ((100, 10, 1e-3, 1e-4), (37, 5, 4e-3, 4e-4), (12, 1, 0.5, 0.0), (12, 12, 0.5, 0.05))


def _lr_outputs(fn, args_of):
    """``fn`` on every row of arguments, as float64; None when it raises (a known bug that cannot run here)."""
    try:
        return torch.tensor([float(fn(*a)) for a in args_of], dtype=torch.float64)
    except Exception:  # noqa: BLE001
        return None


def _lr_checks(learning_rate) -> int:
    what = "learning_rate"
    check = Check(what, learning_rate, dtype_follows=None, hints=LR_ERRORS)
    for max_steps, warmup, peak, floor in LR_CASES:
        steps = sorted({0, 1, warmup - 1, warmup, warmup + 1, (warmup + max_steps) // 2, max_steps - 1, max_steps,
                        max_steps + 1, max_steps + (max_steps - warmup) // 2, 2 * max_steps} - {-1})
        args_of = [(s, max_steps, warmup, peak, floor) for s in steps]
        label = f"learning_rate(step, max_steps={max_steps}, warmup_steps={warmup}, peak_lr={peak}, min_lr={floor})"
        got = torch.tensor([_lr_value(check, learning_rate, a, f"{label}, step={a[0]}") for a in args_of],
                           dtype=torch.float64)
        want = torch.tensor([ref_learning_rate(*a) for a in args_of], dtype=torch.float64)
        if not same(got, want, F32):
            outputs = [(b, _lr_outputs(b.impl, args_of)) for b in LR_BUGS]
            bug = next((b for b, out in outputs if out is not None and not same(out, want, F32) and same(got, out, F32)),
                       None)
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


# the probes are the earlier exercises' own hidden checks: a correct version stands in exactly when one lost its points
LR_EARLIER = Earlier("learning_rate", 6, passes(_lr_checks), learning_rate_stand_in)


# ================================================================= train_step


# ================================================================= train_step

def _toy(V: int = 6, d: int = 8, seed: int = 0, dropout: float = 0.0, gain: float = 1.0) -> nn.Module:
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
            logits = (self.drop(torch.tanh(self.emb[idx])) @ self.out + self.bias) * gain
            loss = None
            if targets is not None:                     # the mean cross-entropy, from logsumexp (no F.cross_entropy)
                z = logits.reshape(-1, V)
                loss = (torch.logsumexp(z, -1) - z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()
            return logits, loss

    return Toy()


def _plan(**kw):
    from helpers.training import Plan
    return Plan(**{**dict(max_steps=8, warmup_steps=2, lr=0.5, min_lr=0.05, grad_clip=0.05), **kw})


def _ref_step(model, opt, x, y, step, plan, *, zero=True, clip=True, lr_of=None, targets_are_inputs=False,
              zero_after_backward=False, clip_value=False, clip_at=None, groups=None, shift_again=False) -> float:
    """The grader's own training step, and its known wrong versions."""
    lr = ref_learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr) if lr_of is None else lr_of(step)
    if lr is not None:
        for group in {None: opt.param_groups, "first": opt.param_groups[:1], "last": opt.param_groups[-1:]}[groups]:
            group["lr"] = lr
    if zero and not zero_after_backward:
        opt.zero_grad(set_to_none=True)
    logits, _ = model(x)
    V = logits.shape[-1]
    if shift_again:                               # the targets shifted once more: position t scored on y[t + 1]
        logits, y = logits[:, :-1], y[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, V), (x if targets_are_inputs else y).reshape(-1))
    loss.backward()
    if zero_after_backward:
        opt.zero_grad(set_to_none=True)
    if clip_value:
        torch.nn.utils.clip_grad_value_(model.parameters(), plan.grad_clip)
    elif clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip if clip_at is None else clip_at)
    opt.step()
    return loss.item()


def _sgd(model):
    """Plain SGD with two parameter groups (as nanoGPT's decay / no-decay groups), at a rate that is not one of the
    schedule's: a step that never sets the rate, or sets it in one group only, shows."""
    params = list(model.parameters())
    return torch.optim.SGD([{"params": params[:-1]}, {"params": params[-1:]}], lr=0.123)


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
    "clip_after": Bug("step_clip_after_update", "梯度裁剪没有作用在这一步的更新上（在 optimizer.step 之后才裁剪，或者根本没裁剪）："
                      "裁剪要放在 loss.backward() 之后、optimizer.step 之前。",
                      "the gradient clipping does not act on this step's update (it comes after optimizer.step, or "
                      "not at all): clip after loss.backward() and before optimizer.step.", None),
    "ahead": Bug("step_schedule_one_ahead", "学习率提前了一步：第 s 步用的是 learning_rate(s + 1)（例如 scheduler.step() "
                 "放在了 optimizer.step 之前）。",
                 "the learning rate is one step ahead: step s uses learning_rate(s + 1) (for example scheduler.step() "
                 "called before optimizer.step).", None),
    "behind": Bug("step_schedule_one_behind", "学习率落后了一步：在 optimizer.step 之后才设下一步的学习率，"
                  "所以第 s 步用的是第 s − 1 步的（第 0 步用的是优化器自己的初始学习率）。要在更新之前设好这一步的学习率。",
                  "the learning rate is one step behind: it is set after optimizer.step, for the next step, so step s "
                  "uses the rate of step s − 1 (and step 0 the optimizer's initial rate). Set this step's rate before "
                  "the update.", None),
    "constant": Bug("step_schedule_not_used", "学习率一直没变：没有把 learning_rate(step, ...) 写进 "
                    "optimizer.param_groups 里每一组的 \"lr\"。",
                    "the learning rate never changes: learning_rate(step, ...) is not written into the \"lr\" of each "
                    "group in optimizer.param_groups.", None),
    "zero_late": Bug("step_zero_grad_after_backward", "梯度在 backward 之后才清零：刚算出来的梯度被清掉了，"
                     "optimizer.step 什么也没更新。清零要放在前向和 backward 之前（每一步的开头）。",
                     "the gradients are zeroed after backward: the gradient just computed is wiped out and "
                     "optimizer.step updates nothing. Zero them before the forward pass and backward (at the start of "
                     "the step).", None),
    "clip_value": Bug("step_clip_by_value", "用的是 clip_grad_value_（把每个分量截到 ±grad_clip），题目要的是按范数裁剪："
                      "torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip) 把所有梯度当成一个长向量整体缩放，"
                      "方向不变。",
                      "this uses clip_grad_value_ (each entry cut to ±grad_clip), where the exercise clips by norm: "
                      "torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip) scales all gradients together as "
                      "one long vector and keeps their direction.", None),
    "clip_one": Bug("step_clip_threshold_fixed", "裁剪阈值写死成了 1.0：要用这次训练的 plan.grad_clip，"
                    "clip_grad_norm_(model.parameters(), plan.grad_clip)。",
                    "the clipping threshold is hard-coded to 1.0: use this run's plan.grad_clip, "
                    "clip_grad_norm_(model.parameters(), plan.grad_clip).", None),
    "last_group": Bug("step_lr_last_group_only", "学习率只写进了最后一个参数组（optimizer.param_groups[-1]）：其余的组还在用"
                      "旧的学习率。写进 optimizer.param_groups 的每一组。",
                      "the rate is written into the last parameter group only (optimizer.param_groups[-1]): the other "
                      "groups keep their old rate. Write it into every group of optimizer.param_groups.", None),
    "shifted": Bug("step_targets_shifted_twice", "目标又挪了一格（例如 cross_entropy(logits[:, :-1], y[:, 1:])）：y 已经是 x "
                   "向右挪一格的结果，位置 t 的 logits 直接和 y[:, t] 比，cross_entropy(logits, y)。",
                   "the targets are shifted once more (cross_entropy(logits[:, :-1], y[:, 1:]), say): y is already x "
                   "shifted by one, so the logits at position t are scored against y[:, t], cross_entropy(logits, y).",
                   None),
    "one_group": Bug("step_lr_first_group_only", "学习率只写进了第一个参数组（optimizer.param_groups[0]）：AdamW 常把参数分成"
                     "两组（衰减 / 不衰减），其余的组还在用旧的学习率。写进 optimizer.param_groups 的"
                     "每一组。",
                     "the rate is written into the first parameter group only (optimizer.param_groups[0]): AdamW is often "
                     "given two groups (decayed / not decayed), and the others keep their old rate. Write it into every "
                     "group of optimizer.param_groups.", None),
    "swapped": Bug("step_lr_arguments_swapped", "learning_rate 的参数顺序错了（max_steps 和 warmup_steps 对调）：签名是 "
                   "learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr)，写成 "
                   "learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)。",
                   "the arguments of learning_rate are in the wrong order (max_steps and warmup_steps swapped): the "
                   "signature is learning_rate(step, max_steps, warmup_steps, peak_lr, min_lr), so write "
                   "learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr).", None),
    "tensor": Bug("step_returns_tensor", "返回的是损失张量，不是 Python 的 float：返回 loss.item()。张量会把这一步的整张计算图"
                  "一直留在内存里，训练循环把它们存进列表时内存越占越多。",
                  "this returns the loss tensor, not a Python float: return loss.item(). A tensor keeps this step's whole "
                  "graph alive, and a training loop that stores them in a list grows its memory step after step.", None),
    "inputs": Bug("step_targets_not_shifted", "损失是拿 x 当目标算的：目标是 y（x 向右挪一格），"
                  "cross_entropy(logits, y)。拿 x 当目标，模型只要抄下当前的字符，学不到预测下一个。",
                  "the loss uses x as its targets: the targets are y (x shifted by one), cross_entropy(logits, y). "
                  "With x as targets the model only has to copy the current character and never learns to predict "
                  "the next one.", None),
}


def _step_variants(plan):
    swapped = lambda s: ref_learning_rate(s, plan.warmup_steps, plan.max_steps, plan.lr, plan.min_lr)  # noqa: E731
    return [("no_zero", dict(zero=False)), ("clip_after", dict(clip=False)), ("ahead", dict(lr_of=_ref_lr(plan, 1))),
            ("behind", dict(lr_of=_ref_lr(plan, -1))), ("constant", dict(lr_of=lambda s: None)),
            ("inputs", dict(targets_are_inputs=True)), ("zero_late", dict(zero_after_backward=True)),
            ("clip_value", dict(clip_value=True)), ("clip_one", dict(clip_at=1.0)),
            ("one_group", dict(groups="first")), ("last_group", dict(groups="last")), ("swapped", dict(lr_of=swapped)),
            ("shifted", dict(shift_again=True))]


STEP_GAIN = 4.0          # gradients of norm 2-3: clipping at 0.05 acts, and a threshold of 1.0 would act too


def _simulate(plan, upto: int, **kw):
    model = _toy(gain=STEP_GAIN)
    opt = _sgd(model)
    losses = [_ref_step(model, opt, *_batch_of_step(s), s, plan, **kw) for s in range(upto + 1)]
    return _params(model), losses


def _trajectory(plan, upto: int, step_fn=None, **kw):
    """(parameters, loss) after each of steps 0 … upto: the grader's step (``kw``: a known wrong one) or ``step_fn``."""
    model = _toy(gain=STEP_GAIN)
    opt = _sgd(model)
    out = []
    for s in range(upto + 1):
        x, y = _batch_of_step(s)
        loss = step_fn(model, opt, x, y, s, plan) if step_fn else _ref_step(model, opt, x, y, s, plan, **kw)
        out.append((_params(model), float(loss)))
    return out


def _step_bug(what, train_step, plan, s) -> Bug | None:
    """The known wrong step whose run matches the student's over steps 0 … s + 2 (a few more steps than the one
    that failed: two mistakes can look alike at one step, as a rate never set and a rate set one step late at step 0)."""
    upto = min(s + 2, 7)
    try:
        with own_loss(what):
            theirs = _trajectory(plan, upto, lambda *a: call(train_step, *a, what=what))
    except Exception:  # noqa: BLE001 - it failed on its own already; the single step decides below
        return None
    for key, kw in _step_variants(plan):
        bug = _trajectory(plan, upto, **kw)
        if all(same(gp, bp, Tol(1e-4, 1e-5)) and abs(gl - bl) <= 1e-4 for (gp, gl), (bp, bl) in zip(theirs, bug)):
            return STEP_BUGS[key]
    return None


def _step_checks(what, train_step) -> int:
    plan = _plan()
    model = _toy(gain=STEP_GAIN)
    opt = _sgd(model)
    n = 0
    for s in range(6):
        x, y = _batch_of_step(s)
        label = t(f"第 {s} 步（SGD，两个参数组，max_steps=8，warmup_steps=2，peak 0.5，min 0.05，grad_clip=0.05）",
                  f"step {s} (SGD, two parameter groups, max_steps=8, warmup_steps=2, peak 0.5, min 0.05, grad_clip=0.05)")
        with own_loss(what):
            out = call(train_step, model, opt, x.clone(), y.clone(), s, plan, what=f"{what}: {label}")
        if isinstance(out, torch.Tensor) or not isinstance(out, (float, int)):
            raise failure(t(f"{what}: {label}：返回值", f"{what}: {label}: the value returned"),
                          t("一个 Python 的 float（loss.item()）", "a Python float (loss.item())"), type(out).__name__,
                          STEP_BUGS["tensor"] if isinstance(out, torch.Tensor) else None)
        want_params, want_losses = _simulate(plan, s)
        got_params = _params(model)
        n += 1
        bug = None
        if not same(got_params, want_params, Tol(1e-4, 1e-5)) or abs(out - want_losses[-1]) > 1e-4:
            bug = _step_bug(what, train_step, plan, s)
            for key, kw in () if bug else _step_variants(plan):
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


def train_step_stand_in(model, optimizer, x, y, step, plan):
    """A correct train_step for a student's training loop to call (its own rate and loss, nothing of theirs)."""
    rate = ref_learning_rate(step, plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr)
    for group in optimizer.param_groups:
        group["lr"] = rate
    optimizer.zero_grad(set_to_none=True)
    z = model(x)[0]
    z = z.reshape(-1, z.shape[-1])
    loss = (torch.logsumexp(z, -1) - z[torch.arange(z.shape[0]), y.reshape(-1)]).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), plan.grad_clip)
    optimizer.step()
    return loss.item()


STEP_EARLIER = Earlier("train_step", 7, passes(lambda train_step: _step_checks("train_step", train_step)),
                       train_step_stand_in)


# ---------------------------------------------------------------- the visible test's toy run

def _visible_bigram(V: int = 4) -> nn.Module:
    """The toy of the visible test of train_step: logits 4 × table[idx] + bias, both zero at first."""
    class Bigram(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.zeros(V, V))
            self.bias = nn.Parameter(torch.zeros(V))

        def forward(self, idx, targets=None):
            return 4.0 * self.table[idx] + self.bias, None

    return Bigram()


def visible_steps(xs, ys, **kw):
    """(parameters after each of 3 steps, the losses) of the visible test's run, by the grader's step or one of its
    known wrong versions (``kw``)."""
    from helpers.training import Plan
    toy = _visible_bigram(4)
    opt = torch.optim.SGD([{"params": [toy.table]}, {"params": [toy.bias]}], lr=0.123)
    plan = Plan(max_steps=10, warmup_steps=2, lr=1.0, min_lr=0.1, grad_clip=0.5)
    params, losses = [], []
    with torch.enable_grad():                     # the probe file is built under no_grad
        for s in range(3):
            losses.append(_ref_step(toy, opt, xs[s], ys[s], s, plan, **kw))
            params.append(torch.cat([toy.table.detach().flatten(), toy.bias.detach()]))
    return torch.stack(params), torch.tensor(losses, dtype=torch.float64)


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
                        "切换之前记下原来的模式（model.training），最后切回去。",
                        "after the evaluation the model is not back in training mode, so dropout is off for the rest "
                        "of training. Note the mode (model.training) before switching and switch back to it at the end.", None),
    "forced_train": Bug("eval_always_train_after", "评估之前模型在 eval 模式，评估之后却被改成了训练模式：要恢复它原来的模式"
                        "（切换之前记下 model.training，最后按它切回去），而不是一律 model.train()。",
                        "the model was in eval mode before the evaluation and is in training mode after it: restore the "
                        "mode it was in (note model.training before switching, and switch back by it) rather than always "
                        "calling model.train().", None),
    "sum": Bug("eval_sum_of_batches", "返回的是各批损失的和，应取平均。", "this is the sum of the batch losses; take their mean.",
               None),
    "first": Bug("eval_returns_inside_loop", "return 写在了 for 循环里（缩进多了一层）：第一批算完就返回了，后面的批量都没算。"
                 "把 return 移到循环外面，所有批量都算完再取平均。",
                 "the return sits inside the for loop (indented one level too deep): it returns after the first batch "
                 "and never sees the others. Move the return out of the loop and average once every batch is done.", None),
    "last": Bug("eval_last_batch_only", "返回的只是最后一批的损失：循环里每一批都覆盖了同一个变量。把每批的损失收集起来"
                "（或累加），最后取平均。",
                "this returns the loss of the last batch only: each batch overwrote the same variable in the loop. Collect "
                "(or add up) every batch's loss and average them at the end.", None),
    "tensor": Bug("eval_returns_tensor", "返回的是张量，不是 Python 的 float：每批的损失用 .item() 变成数再平均，"
                  "或者最后 float(...)。",
                  "this returns a tensor, not a Python float: turn each batch's loss into a number with .item() before "
                  "averaging, or call float(...) at the end.", None),
}


def check_evaluate(evaluate) -> None:
    with on_its_own(evaluate, (CE_EARLIER,)):
        passed("evaluate", _eval_checks(evaluate))


def _eval_checks(evaluate) -> int:
    what = "evaluate"
    V = 6
    model = _toy(V, dropout=0.5).train()
    batches = [_batch_of_step(s, V) for s in range(4)]
    with torch.no_grad():
        model.eval()
        each = [float(ref_cross_entropy(model(x)[0], y)) for x, y in batches]
        model.train()
    model.seen.clear()
    label = t("带 dropout=0.5 的模型（训练模式）、4 批", "a model with dropout=0.5 (in training mode), 4 batches")
    with own_loss(what):
        out = call(evaluate, model, [(x.clone(), y.clone()) for x, y in batches], what=f"{what}: {label}")
    if isinstance(out, torch.Tensor) or not isinstance(out, (float, int)):
        raise failure(t(f"{what}: {label}：返回值", f"{what}: {label}: the value returned"),
                      t("一个 Python 的 float", "a Python float"), type(out).__name__,
                      EVAL_BUGS["tensor"] if isinstance(out, torch.Tensor) else None,
                      hint=t("用 .item() 把每批的损失变成数，再取平均。", "turn each batch's loss into a number with .item(), then average."))
    seen = list(model.seen)
    want = sum(each) / len(each)
    if abs(out - want) > 1e-5:
        bug = EVAL_BUGS["train_mode"] if any(tr for _, tr in seen) else \
            EVAL_BUGS["sum"] if abs(out - sum(each)) < 1e-5 else \
            EVAL_BUGS["first"] if abs(out - each[0] / len(each)) < 1e-5 or abs(out - each[0]) < 1e-5 else \
            EVAL_BUGS["last"] if abs(out - each[-1]) < 1e-5 else None
        raise failure(f"{what}: {label}", f"{want:.6g}", f"{float(out):.6g}", bug,
                      hint=t("各批损失（你的 cross_entropy）的平均。", "the mean of the batches' losses (your cross_entropy)."))
    if any(g for g, _ in seen):
        raise failure(t(f"{what}: {label}：前向时 torch.is_grad_enabled()", f"{what}: {label}: torch.is_grad_enabled() "
                        "during the forward passes"), "False", "True", EVAL_BUGS["grad"])
    if not model.training:
        raise failure(t(f"{what}: {label}：评估之后 model.training", f"{what}: {label}: model.training after the evaluation"),
                      "True", "False", EVAL_BUGS["not_restored"])
    model.eval()
    label = t("同一个模型，已经在 eval 模式", "the same model, already in eval mode")
    with own_loss(what):
        out = call(evaluate, model, batches, what=f"{what}: {label}")
    if model.training:
        raise failure(t(f"{what}: {label}：评估之后 model.training", f"{what}: {label}: model.training after the evaluation"),
                      "False", "True", EVAL_BUGS["forced_train"])
    if abs(float(out) - want) > 1e-5:
        raise failure(f"{what}: {label}", f"{want:.6g}", f"{float(out):.6g}")
    return 5


def evaluate_stand_in(model, batches):
    """A correct evaluate for a student's training loop to call."""
    mode = model.training
    model.train(False)
    with torch.no_grad():
        losses = [float(cross_entropy_stand_in(model(x)[0], y)) for x, y in batches]
    model.train(mode)
    return sum(losses) / len(losses)


EVAL_EARLIER = Earlier("evaluate", 8, passes(_eval_checks), evaluate_stand_in)


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
    "step_plus_one": Bug("resume_step_one_ahead", "读档返回的步数多了一步（存档时的 step + 1）：存进去的 step 就是下一步要训练的"
                         "那一步（训练循环存档时已经走完了 step 之前的所有步），原样返回它，续上时才不会跳过一步。",
                         "loading returns one step more than was saved (step + 1): the step saved is already the next step to "
                         "train (the loop saves after finishing every step before it), so return it unchanged, or the resumed "
                         "run skips a step.", None),
    "recipe": Bug("resume_recipe_as_dict", "读档返回的配方是一个字典，不是 Recipe：存 recipe.as_dict()，读档时用 Recipe(**d) 变回来。",
                  "loading returns the recipe as a dictionary, not a Recipe: save recipe.as_dict() and turn it back with "
                  "Recipe(**d) when loading.", None),
    "tokenizer": Bug("resume_tokenizer_as_text", "读档返回的是词表字符串，不是分词器：用 CharTokenizer(这个字符串) 重建它再返回。",
                     "loading returns the vocabulary string, not a tokenizer: rebuild it with CharTokenizer(that string) "
                     "and return that.", None),
    "recipe_changed": Bug("resume_recipe_changed", "读档返回的配方和存进去的不一样（少了或改了某一项，例如 max_steps——"
                          "那是训练定下的学习率计划）：把 recipe.as_dict() 整个存下来，读档时 Recipe(**d) 原样变回来。",
                          "the recipe read back differs from the one saved (a field dropped or changed, such as "
                          "max_steps, the schedule the run fixed): save recipe.as_dict() whole and turn it back with "
                          "Recipe(**d) as it is.", None),
    "vocabulary": Bug("resume_tokenizer_vocabulary_differs", "读回的分词器和存进去的词表不同：要存整个字符表，按编号排好就是 "
                      "tokenizer.decode(list(range(tokenizer.vocab_size)))，读档时用 CharTokenizer(这个字符串) 重建。",
                      "the tokenizer read back has another vocabulary than the one saved: save the whole list of "
                      "characters, which in id order is tokenizer.decode(list(range(tokenizer.vocab_size))), and rebuild "
                      "it with CharTokenizer(that string).", None),
    "pickled": Bug("checkpoint_needs_pickle", "存下的文件用 torch.load(path, weights_only=True) 读不出来：里面有 Python 对象"
                   "（例如 Recipe 本身、整个模型或分词器），读它就得执行文件里的代码。只存张量、数字、字符串、列表和字典："
                   "recipe.as_dict()、model.state_dict()、词表字符串。",
                   "the file cannot be read with torch.load(path, weights_only=True): it holds Python objects (the Recipe "
                   "itself, a whole model or tokenizer), and reading those means running code from the file. Save only "
                   "tensors, numbers, strings, lists and dictionaries: recipe.as_dict(), model.state_dict(), the "
                   "vocabulary string.", None),
    "unsafe_load": Bug("checkpoint_loaded_without_weights_only", "load_checkpoint 读档时没有用 weights_only=True："
                       "一个文件里藏着的代码在读档时被执行了（weights_only=False 会执行文件里的任何代码）。"
                       "写 torch.load(path, weights_only=True)，这样的文件会被拒绝。",
                       "load_checkpoint does not load with weights_only=True: code hidden in a file ran when it was loaded "
                       "(weights_only=False runs whatever the file holds). Write torch.load(path, weights_only=True), "
                       "which refuses such a file.", None),
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
        recipe = training.fix_schedule(training.scaled(training.COURSE_RECIPE, name="checked", lr=0.05, n_layer=1), 40)
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
            safe = _loads_safely(path)
            if safe is not None:
                raise failure(t(f"{what}：torch.load(你存的文件, weights_only=True)", f"{what}: torch.load(your file, "
                                "weights_only=True)"), t("读得出来", "it loads"),
                              f"{type(safe).__name__}: {str(safe).splitlines()[0][:160]}", CKPT_BUGS["pickled"])
            second, opt2 = _ckpt_pair(1)                    # other weights: loading must replace them
            label = t("读档到一个新模型和新优化器", "loaded into a new model and a new optimizer")
            out = call(load_checkpoint, path, second, opt2, what=f"{what}: {label}")
            trapped = _runs_code_from(load_checkpoint, path, tmp)
        if not (isinstance(out, tuple) and len(out) == 3):
            raise failure(t(f"{what}: {label}：返回值", f"{what}: {label}: the value returned"), "(step, recipe, tokenizer)",
                          type(out).__name__)
        step, recipe_back, tok_back = out
        if step != 4:
            raise failure(t(f"{what}: {label}：返回的步数", f"{what}: {label}: the step returned"), "4", repr(step),
                          CKPT_BUGS["step_plus_one"] if step == 5 else CKPT_BUGS["step"])
        if recipe_back != recipe:
            raise failure(t(f"{what}: {label}：返回的配方", f"{what}: {label}: the recipe returned"), repr(recipe)[:120],
                          repr(recipe_back)[:120], CKPT_BUGS["recipe"] if isinstance(recipe_back, dict) else
                          CKPT_BUGS["recipe_changed"] if isinstance(recipe_back, training.Recipe) else None,
                          hint=t("存 recipe.as_dict()，读档时 Recipe(**d)。", "save recipe.as_dict(); load with Recipe(**d)."))
        if isinstance(tok_back, str):
            raise failure(t(f"{what}: {label}：返回的分词器", f"{what}: {label}: the tokenizer returned"), "CharTokenizer",
                          "str", CKPT_BUGS["tokenizer"])
        text = "fox the brown quick\n"
        try:
            same_tok = list(tok_back.encode(text)) == list(tok.encode(text)) and tok_back.vocab_size == tok.vocab_size
        except Exception:  # noqa: BLE001 - a tokenizer that cannot encode is not the same tokenizer
            same_tok = False
        if not same_tok:
            raise _fail(f"{what}：读回的分词器和存进去的编码结果不同（或不能编码）。",
                        f"{what}: the tokenizer read back encodes differently from the one saved (or cannot encode).",
                        CKPT_BUGS["vocabulary"])
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
        if trapped:
            raise failure(t(f"{what}：读一个藏着代码的检查点", f"{what}: loading a checkpoint with code hidden in it"),
                          t("torch.load 拒绝它（weights_only=True），什么代码都不执行", "torch.load refuses it "
                            "(weights_only=True) and runs nothing"), t("文件里的代码被执行了", "the file's code ran"),
                          CKPT_BUGS["unsafe_load"])
        passed("checkpoint", 6)


class _Trap:
    """An object whose unpickling makes a directory: a load that runs code from the file shows."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.mkdir, (self.marker,))


def _loads_safely(path):
    """None when the file loads with weights_only=True, else the exception."""
    try:
        torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any refusal is the finding
        return exc
    return None


def _runs_code_from(load_checkpoint, path, folder) -> bool:
    """The student's checkpoint with a trap added: does their load_checkpoint run it?"""
    from pathlib import Path
    saved = torch.load(path, weights_only=True)
    marker = Path(folder) / "ran"
    trap = str(Path(folder) / "trapped.pt")
    torch.save({**saved, "note": _Trap(str(marker))} if isinstance(saved, dict) else [saved, _Trap(str(marker))], trap)
    model, opt = _ckpt_pair(2)
    call(_catching(load_checkpoint), trap, model, opt, what="load_checkpoint")   # refusing the file is right
    return marker.exists()


def _namespace_of(fn) -> dict:
    from .cases import _namespace
    return _namespace(fn)


# ================================================================= the training loop

LOOP_BUGS = {
    "start": Bug("loop_ignores_start_step", "循环从第 0 步开始，而不是从 run.start_step：读档续上的训练会从头再走一遍，"
                 "学习率计划和批量都对不上。计数器的初值是 run.start_step。",
                 "the loop starts at step 0, not at run.start_step: a run resumed from a checkpoint would start all "
                 "over, with the schedule and the batches out of step. The counter starts at run.start_step.", None),
    "log_early": Bug("loop_logs_step_before_counting", "交给 run.log（和 run.time_to_evaluate）的是刚走的这一步的编号 s，"
                     "而不是已经走完的步数 s + 1：先把计数器加一，再告诉 run。检查点存的正是这个数，差一步，续上时就会把"
                     "最后一步再走一遍。",
                     "run.log (and run.time_to_evaluate) get the number s of the step just taken instead of the steps "
                     "done, s + 1: count the step first, then tell run. A checkpoint keeps exactly this number, and one "
                     "step off, a resumed run takes the last step again.", None),
    "batches": Bug("loop_batches_not_by_step", "批量不是只由步数决定的：第 s 步要把 training.step_generator(s) 交给 get_batch "
                   "当 generator（不要在循环外建一个所有步共用的 generator，也不要不传）。否则续上的训练抽到的批量和没停过的"
                   "不一样。",
                   "the batches do not depend on the step alone: step s gives get_batch training.step_generator(s) as "
                   "its generator (not one generator made outside the loop and shared by every step, nor none). "
                   "Otherwise a resumed run draws other batches than the run that never stopped.", None),
    "seed": Bug("loop_dropout_not_seeded", "前向之前没有用这一步的步数调用 training.seed_step：dropout 的随机数不只由步数决定，"
                "续上的训练丢掉的单元和没停过的不一样。",
                "training.seed_step is not called with the step before the forward pass: dropout's random numbers do not "
                "depend on the step alone, and a resumed run drops other units than the run that never stopped.", None),
    "plan": Bug("loop_plan_not_from_run", "交给 train_step 的 plan 不是 run.plan(step)：按时间预算的训练要等量完开头几步的"
                "速度才定下计划，只有 run 知道。每一步都用 run.plan(step)。",
                "the plan given to train_step is not run.plan(step): a time-budgeted run fixes its schedule only once "
                "it has timed the first steps, and only run knows it. Use run.plan(step) at every step.", None),
    "every": Bug("loop_evaluates_every_step", "没等 run.time_to_evaluate 说该评估就评估了（每一步都评估）：评估要花时间，"
                 "run 也按它的时间表存检查点。只在 run.time_to_evaluate(已走完的步数) 为 True 时评估。",
                 "the loop evaluates without waiting for run.time_to_evaluate (at every step): evaluations take time, "
                 "and run saves its checkpoints on its own timetable. Evaluate only when run.time_to_evaluate(steps "
                 "done) is True.", None),
    "never": Bug("loop_never_evaluates", "run.time_to_evaluate 说该评估的时候没有评估（或者评估了却没有交给 run.evaluated）："
                 "曲线不更新，检查点不存，按时间预算的训练也定不下计划。",
                 "when run.time_to_evaluate says it is time, the loop does not evaluate (or does not give the result to "
                 "run.evaluated): the curve stays still, no checkpoint is saved, and a time-budgeted run cannot fix its "
                 "schedule.", None),
    "eval_data": Bug("loop_evaluates_wrong_batches", "交给 run.evaluated 的不是 evaluate(model, val_batches)：评估要在验证批量上做，"
                     "用你的 evaluate。",
                     "what run.evaluated gets is not evaluate(model, val_batches): evaluate on the validation batches, "
                     "with your evaluate.", None),
    "final": Bug("loop_final_evaluation_wrong", "交给 run.finish 的损失不是循环结束后在 val_batches 上评估的那一个"
                 "（例如是最后一步的训练损失）。",
                 "the loss given to run.finish is not the one evaluated on val_batches after the loop (it is, say, the "
                 "last step's training loss).", None),
    "finish": Bug("loop_no_finish", "循环结束后没有调用 run.finish(已走完的步数, 最后一次评估的损失)，或者没有返回它的返回值："
                  "进度条不收尾，最后一行不打印，也拿不到整次训练的 History。",
                  "after the loop, run.finish(steps done, the last evaluation's loss) is not called, or what it returns "
                  "is not returned: the progress bar is not closed, the closing line is not printed, and the run's "
                  "History is lost.", None),
    "going": Bug("loop_steps_without_asking", "没有先问 run.going 就走了一步：一个计划已经走完（或者按了停止按钮）的训练，"
                 "还会多走一步。每一步之前都要先问 run.going(step)，它回答 False 就不再走。",
                 "the loop takes a step before asking run.going: a run whose schedule is over (or that the stop button "
                 "halted) still takes one more step. Ask run.going(step) before every step and take none once it "
                 "answers False.", None),
    "tokens": Bug("loop_log_tokens_wrong", "交给 run.log 的 token 数不是这一批的 token 数：一批有 batch_size × n_ctx 个 token，"
                  "x.numel()。进度条上的 token/秒就是用它算的。",
                  "the tokens given to run.log are not this batch's: a batch holds batch_size × n_ctx tokens, "
                  "x.numel(). The progress bar's tokens per second come from it.", None),
    "runaway": Bug("loop_never_ends", "循环停不下来：run.going(step) 一直回答 True，因为 step 没有往前走（每走一步计数器要加一）。",
                   "the loop never stops: run.going(step) keeps answering True because step does not move on (count "
                   "each step taken).", None),
}
LOOP_ERRORS = [(Raises(contains=("never stops",)), LOOP_BUGS["runaway"])]
LOOP_START, LOOP_STEPS, LOOP_DUE = 3, 5, (4, 6)           # the scripted run: steps 3 … 7, evaluations after 4 and 6


def _loop_toy(V: int = 7) -> nn.Module:
    """A small model with the GPT's interface that notes the input and one random number at each forward pass in
    training mode, so that the batches and dropout's random numbers show. Built here, so the student's code may
    call it."""

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            g = seeded(31)
            self.emb = nn.Parameter(torch.randn(V, 8, generator=g))
            self.out = nn.Parameter(torch.randn(8, V, generator=g) * 0.5)
            self.config = SimpleNamespace(n_ctx=6, vocab_size=V)
            self.seen = []

        def forward(self, idx, targets=None):
            if self.training:
                self.seen.append((idx.detach().clone(), float(torch.rand(()))))
            logits = torch.tanh(self.emb[idx]) @ self.out
            loss = None
            if targets is not None:
                z = logits.reshape(-1, V)
                loss = (torch.logsumexp(z, -1) - z[torch.arange(z.shape[0]), targets.reshape(-1)]).mean()
            return logits, loss

    return Toy()


def _scripted_run(recipe, plan, steps: int = LOOP_STEPS):
    """A stand-in for training.Run with the same services, answering from a script (steps LOOP_START …
    LOOP_START + steps - 1, evaluations after LOOP_DUE) and noting every call. Built here, so the student's
    loop may call it."""

    class ScriptedRun:
        def __init__(self):
            self.recipe, self.start_step, self.step = recipe, LOOP_START, LOOP_START
            self.said = []
            self.history = SimpleNamespace(note="what run.finish returns")

        def going(self, step):
            self.said.append(("going", step))
            if len(self.said) > 12 * LOOP_STEPS + 20:
                raise RuntimeError(f"the loop asked run.going({step}) {len(self.said)} times: it never stops")
            return step < LOOP_START + steps

        def plan(self, step):
            self.said.append(("plan", step))
            return plan

        def log(self, step, loss, tokens):
            self.said.append(("log", step, float(loss), int(tokens)))
            self.step = step

        def time_to_evaluate(self, step):
            self.said.append(("ask", step))
            return step in LOOP_DUE

        def evaluated(self, step, val_loss):
            self.said.append(("evaluated", step, float(val_loss)))

        def finish(self, step, val_loss):
            self.said.append(("finish", step, float(val_loss)))
            return self.history

    return ScriptedRun()


def _loop_world(steps: int = LOOP_STEPS):
    """A fresh toy, optimizer, text, validation batches and scripted run: the same every time."""
    from helpers import training
    from helpers.training import Plan
    recipe = training.scaled(training.COURSE_RECIPE, n_ctx=6, batch_size=3)
    plan = Plan(max_steps=20, warmup_steps=2, lr=0.3, min_lr=0.03, grad_clip=0.5)   # not plan_for(recipe, ...)
    model = _loop_toy()
    data = (torch.arange(90) * 5) % 7
    val = [(data[i:i + 12].view(2, 6), data[i + 1:i + 13].view(2, 6)) for i in (2, 40)]
    return model, torch.optim.SGD(model.parameters(), lr=0.1), data, val, _scripted_run(recipe, plan, steps)


def _ref_loop(space, model, optimizer, train_data, val_batches, run):
    """The loop as the exercise states it, with the notebook's own get_batch, train_step and evaluate."""
    from helpers import training
    step = run.start_step
    while run.going(step):
        training.seed_step(step)
        x, y = space["get_batch"](train_data, run.recipe.n_ctx, run.recipe.batch_size,
                                  generator=training.step_generator(step))
        loss = space["train_step"](model, optimizer, x, y, step, run.plan(step))
        step += 1
        run.log(step, loss, x.numel())
        if run.time_to_evaluate(step):
            run.evaluated(step, space["evaluate"](model, val_batches))
    return run.finish(step, space["evaluate"](model, val_batches))


def _loop_record(loop, what: str, student: bool, steps: int = LOOP_STEPS) -> dict:
    """What a loop did with the scripted run and the toy: the calls, the training forwards, the final parameters."""
    model, opt, data, val, run = _loop_world(steps)
    torch.manual_seed(12345)                      # another state than any seed_step leaves
    if student:
        out = call(loop, model, opt, data, val, run, what=what, hints=LOOP_ERRORS)
    else:
        out = loop(model, opt, data, val, run)
    said = run.said
    return {"said": said, "returned": out is run.history, "seen": model.seen,
            "params": torch.cat([p.detach().double().flatten() for p in model.parameters()]),
            "of": lambda kind: [s[1:] for s in said if s[0] == kind]}


def check_train(train) -> None:
    what = "train"
    earlier = (CE_EARLIER, LR_EARLIER, BATCH_EARLIER, STEP_EARLIER, EVAL_EARLIER)
    with on_its_own(train, earlier):
        space = _namespace_of(train)
        want = _loop_record(lambda *a: _ref_loop(space, *a), what, student=False)
        label = t(f"train（按脚本回答的 run：从第 {LOOP_START} 步起走 {LOOP_STEPS} 步，走完第 {LOOP_DUE[0]}、{LOOP_DUE[1]} "
                  "步时该评估）", f"train (a scripted run: {LOOP_STEPS} steps from step {LOOP_START}, evaluations due "
                  f"after {LOOP_DUE[0]} and {LOOP_DUE[1]} steps)")
        got = _loop_record(train, label, student=True)
        _loop_counting(label, got, want)
        _loop_each_step(label, got, want)
        _loop_evaluations(label, got, want)
        _loop_nothing_left(train)
        _loop_real_run(what, train)
        passed(what, 6)


def _loop_counting(label, got, want) -> None:
    """It returns run.finish's result; it starts at run.start_step; it logs the steps done."""
    if not got["of"]("finish") or not got["returned"]:
        raise failure(t(f"{label}：返回值", f"{label}: the value returned"),
                      t("run.finish(...) 的返回值", "what run.finish(...) returns"),
                      t("没有调用 run.finish" if not got["of"]("finish") else "别的东西",
                        "run.finish was never called" if not got["of"]("finish") else "something else"),
                      LOOP_BUGS["finish"])
    logs, ref = [s[0] for s in got["of"]("log")], [s[0] for s in want["of"]("log")]
    if logs != ref:
        first = [s[0] for s in got["of"]("going")][:1]
        bug = LOOP_BUGS["start"] if first == [0] else LOOP_BUGS["log_early"] if logs == [s - 1 for s in ref] else None
        raise failure(t(f"{label}：交给 run.log 的已走完步数", f"{label}: the steps done given to run.log"),
                      str(ref), str(logs), bug, hint=t("从 run.start_step 开始，每走完一步先加一再告诉 run。",
                                                       "start at run.start_step; count each step, then tell run."))
    tokens = [s[2] for s in got["of"]("log")]
    if tokens != [s[2] for s in want["of"]("log")]:
        raise failure(t(f"{label}：交给 run.log 的 token 数", f"{label}: the tokens given to run.log"),
                      str([s[2] for s in want["of"]("log")]), str(tokens), LOOP_BUGS["tokens"])


def _loop_each_step(label, got, want) -> None:
    """Each step's plan comes from run.plan, its batch from step_generator(step), its dropout seeded by the step;
    the losses it reports and the parameters it leaves are the reference loop's."""
    if [s[0] for s in got["of"]("plan")] != [s[0] for s in want["of"]("plan")]:
        raise failure(t(f"{label}：向 run.plan 要计划的步", f"{label}: the steps run.plan was asked for"),
                      str([s[0] for s in want["of"]("plan")]), str([s[0] for s in got["of"]("plan")]),
                      LOOP_BUGS["plan"] if not got["of"]("plan") else None)
    for i, ((x, noise), (ref_x, ref_noise)) in enumerate(zip(got["seen"], want["seen"])):
        step = LOOP_START + i
        if not torch.equal(x, ref_x):
            raise failure(t(f"{label}：第 {step} 步的输入批量", f"{label}: the input batch of step {step}"),
                          show(ref_x), show(x), LOOP_BUGS["batches"])
        if noise != ref_noise:
            raise failure(t(f"{label}：第 {step} 步前向时 torch.rand 的第一个数", f"{label}: the first torch.rand of step "
                            f"{step}'s forward pass"), f"{ref_noise:.6f}", f"{noise:.6f}", LOOP_BUGS["seed"])
    losses, ref = [s[1] for s in got["of"]("log")], [s[1] for s in want["of"]("log")]
    if len(got["seen"]) != len(want["seen"]) or any(abs(a - b) > 1e-5 for a, b in zip(losses, ref)):
        raise failure(t(f"{label}：交给 run.log 的损失", f"{label}: the losses given to run.log"),
                      str([round(v, 5) for v in ref]), str([round(v, 5) for v in losses]),
                      hint=t("每一步调用一次 train_step，把它返回的损失交给 run.log。",
                             "call train_step once per step and give the loss it returns to run.log."))
    if not same(got["params"], want["params"], Tol(1e-5, 1e-6)):
        raise value_failure(t(f"{label}：训练之后的参数", f"{label}: the parameters after training"), got["params"],
                            want["params"], Tol(1e-5, 1e-6), compare(got["params"], want["params"], Tol(1e-5, 1e-6)))


def _loop_evaluations(label, got, want) -> None:
    """Evaluations when run says so, on val_batches; the final one given to run.finish with the steps done."""
    steps, ref = [s[0] for s in got["of"]("evaluated")], [s[0] for s in want["of"]("evaluated")]
    if steps != ref:
        bug = LOOP_BUGS["every"] if len(steps) > len(ref) else LOOP_BUGS["never"] if not steps else None
        raise failure(t(f"{label}：交给 run.evaluated 的步", f"{label}: the steps given to run.evaluated"), str(ref),
                      str(steps), bug)
    values, ref_values = [s[1] for s in got["of"]("evaluated")], [s[1] for s in want["of"]("evaluated")]
    if any(abs(a - b) > 1e-5 for a, b in zip(values, ref_values)):
        raise failure(t(f"{label}：交给 run.evaluated 的损失", f"{label}: the losses given to run.evaluated"),
                      str([round(v, 5) for v in ref_values]), str([round(v, 5) for v in values]),
                      LOOP_BUGS["eval_data"])
    (end, val), (ref_end, ref_val) = got["of"]("finish")[0], want["of"]("finish")[0]
    if end != ref_end:
        raise failure(t(f"{label}：交给 run.finish 的已走完步数", f"{label}: the steps done given to run.finish"),
                      str(ref_end), str(end), LOOP_BUGS["log_early"] if end == ref_end - 1 else None)
    if abs(val - ref_val) > 1e-5:
        raise failure(t(f"{label}：交给 run.finish 的损失", f"{label}: the loss given to run.finish"),
                      f"{ref_val:.6g}", f"{val:.6g}", LOOP_BUGS["final"])


def _loop_nothing_left(train) -> None:
    """A run with no step left (run.going says False at once, as at the end of a schedule or after the stop
    button): the loop takes no step, and still finishes."""
    label = t(f"train（按脚本回答的 run：第 {LOOP_START} 步就已经没有步可走了）",
              f"train (a scripted run with no step left at step {LOOP_START})")
    got = _loop_record(train, label, student=True, steps=0)
    taken = [s[0] for s in got["of"]("log")]
    if got["seen"] or taken:
        raise failure(t(f"{label}：走的步数", f"{label}: the steps taken"), "0",
                      str(max(len(got["seen"]), len(taken))), LOOP_BUGS["going"])
    if not got["of"]("finish") or not got["returned"]:
        raise failure(t(f"{label}：返回值", f"{label}: the value returned"),
                      t("run.finish(...) 的返回值", "what run.finish(...) returns"), t("别的东西", "something else"),
                      LOOP_BUGS["finish"])


def _loop_real_run(what: str, train) -> None:
    """The loop under the real training.Run for 3 steps, quietly: it ends with the run's History."""
    from helpers import training
    model, opt, data, val, _ = _loop_world()
    threads = torch.get_num_threads()
    label = t("train（真正的 training.Run，3 步）", "train (the real training.Run, 3 steps)")
    try:
        run = training.Run(training.scaled(training.COURSE_RECIPE, n_ctx=6, batch_size=3, threads=1), steps=3,
                           progress=False, plot=False)
        with contextlib.redirect_stdout(io.StringIO()):
            out = call(train, model, opt, data, val, run, what=label, hints=LOOP_ERRORS)
    finally:
        torch.set_num_threads(threads)
    if out is not run.history or run.history.val_steps[-1:] != [3]:
        raise failure(t(f"{label}：返回值", f"{label}: the value returned"),
                      t("run.finish 返回的 History，最后一次评估在第 3 步", "the History run.finish returns, its last "
                        "evaluation at step 3"), show(getattr(out, "val_steps", out)), LOOP_BUGS["finish"])


# ================================================================= what the visible tests show (helpers/probes)

ERRORS = {"CharTokenizer": TOK_ERRORS, "get_batch": BATCH_ERRORS, "cross_entropy": CE_ERRORS, "generate": GEN_HINTS,
          "learning_rate": LR_ERRORS, "train": LOOP_ERRORS}


def _probe_gpt(V: int = 11, C: int = 10, L: int = 2, H: int = 2, D: int = 8) -> nn.Module:
    """A GPT wired and named as exercise 4 says (its forward is _ref_logits), with weights large enough that every
    part of the wiring shows in the logits."""

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x)))

    def block():
        b = nn.Module()
        b.ln_1, b.ln_2, b.mlp = nn.LayerNorm(D), nn.LayerNorm(D), MLP()
        b.attn = nn.Module()
        b.attn.c_attn, b.attn.c_proj, b.attn.n_head = nn.Linear(D, 3 * D), nn.Linear(D, D), H
        return b

    torch.manual_seed(7)
    m = nn.Module()
    m.wte, m.wpe = nn.Embedding(V, D), nn.Embedding(C, D)
    m.blocks, m.ln_f = nn.ModuleList([block() for _ in range(L)]), nn.LayerNorm(D)
    m.lm_head = nn.Linear(D, V, bias=False)
    m.lm_head.weight = m.wte.weight
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.5)
            elif "ln" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.1 * torch.randn_like(p))
    return m


def _gpt_probe() -> Probe:
    model = _probe_gpt()
    m64 = copy.deepcopy(model).double()
    idx = torch.randint(11, (2, 9), generator=seeded(707))
    wiring = dict(_GPT_REF_BUGS) | {"sees_next": dict(diagonal=1), "no_mask": dict(diagonal=None)}
    return Probe("gpt", args=(idx,), reference=lambda i: _ref_logits(m64, i),
                 state={n: p.detach().clone() for n, p in model.named_parameters()},
                 bugs=[GPT_BUGS[k] for k in wiring], run_bug=lambda bug: _ref_logits(m64, idx, **next(
                     kw for k, kw in wiring.items() if GPT_BUGS[k] is bug)))


def _greedy_probe() -> Probe:
    table = (torch.randn(5, 5, generator=seeded(505)) * 1.5).round(decimals=2)
    start = torch.tensor([[0, 3, 1, 4, 2, 2]])
    wrong = {"topk_small": dict(smallest=True), "crop_front": dict(crop_front=True), "last_pos": dict(pick_last=False)}
    return Probe("greedy", args=(table, start), reference=lambda tb, s: ref_generate(_bigram(tb, 4), s, 8, top_k=1),
                 bugs=[GEN_BUGS[k] for k in wrong],
                 run_bug=lambda bug: ref_generate(_bigram(table, 4), start, 8, top_k=1, **next(
                     kw for k, kw in wrong.items() if GEN_BUGS[k] is bug)))


def _schedule_probe(name: str, args: tuple, n: int) -> Probe:
    rates = lambda fn: torch.tensor([float(fn(s, *args)) for s in range(n)], dtype=torch.float64)   # noqa: E731
    return Probe(name, args=args, reference=lambda *a: rates(ref_learning_rate), bugs=LR_BUGS + [LR_ZERO_DIV],
                 run_bug=lambda bug: rates(bug.impl))


def _steps_probe() -> Probe:
    from helpers.training import Plan
    g = seeded(606)
    xs, ys = torch.randint(4, (3, 2, 4), generator=g), torch.randint(4, (3, 2, 4), generator=g)
    plan = Plan(max_steps=10, warmup_steps=2, lr=1.0, min_lr=0.1, grad_clip=0.5)
    wrong = {STEP_BUGS[k].key: kw for k, kw in _step_variants(plan)}
    return Probe("steps", args=(xs, ys), reference=visible_steps, parts=("params", "losses"),
                 bugs=list(STEP_BUGS.values()),
                 run_bug=lambda bug: visible_steps(xs, ys, **wrong[bug.key]) if bug.key in wrong else None)


def probes() -> list[Probe]:
    g = seeded(303)
    logits = torch.tensor([[2.0, 1.0, 0.1], [0.5, 2.5, 0.0], [1.0, 1.0, 3.0]])
    extreme = torch.tensor([[1000.0, 0.0, -1000.0], [-1000.0, -990.0, -2000.0]])
    return [
        Probe("ce", args=(logits, torch.tensor([0, 1, 0])), reference=ref_cross_entropy, bugs=CE_BUGS),
        Probe("ce_batch", args=((torch.randn(2, 4, 5, generator=g) * 2).round(decimals=2),
                                torch.randint(5, (2, 4), generator=g)), reference=ref_cross_entropy, bugs=CE_BUGS),
        Probe("ce_extreme", args=(extreme, torch.tensor([1, 0])), reference=ref_cross_entropy,
              bugs=[CE_OVERFLOW] + CE_BUGS),
        _gpt_probe(),
        _greedy_probe(),
        _schedule_probe("schedule", (100, 10, 1e-3, 1e-4), 130),
        _schedule_probe("schedule_no_decay", (8, 8, 1e-3, 1e-4), 12),
        _steps_probe(),
    ]
