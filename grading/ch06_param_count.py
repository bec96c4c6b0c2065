"""Hidden tests of ch06_param_count: approx_non_embedding_params, gpt2_params,
llama_params.

The references below count independently of each other: a closed form, and
real torch modules (nanoGPT-style and LLaMA-style, built here, small, on the
CPU) whose ``sum(p.numel() for p in model.parameters())`` is the truth.
Every known bug changes the count by a fixed amount, so a wrong answer is
matched against single bugs and pairs of bugs on the same inputs.
"""
from __future__ import annotations

import contextlib
import itertools
import numbers

import torch
from torch import nn

from helpers.i18n import t

from .core import Bug, call, failure, passed, seeded
from .probes import Probe

# ---------------------------------------------------------------- references

def ref_approx(n_layer, d):
    return 12 * n_layer * d * d


def ref_gpt2(n_layer, d, vocab_size, n_ctx, tied=True):
    emb = vocab_size * d + n_ctx * d                                   # wte, wpe
    block = (2 * d) + (d * 3 * d + 3 * d) + (d * d + d) + (2 * d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    head = 0 if tied else vocab_size * d
    return emb + n_layer * block + 2 * d + head                         # + ln_f


def ref_llama(n_layer, d, vocab_size, d_ff, tied=False):
    block = d + 4 * d * d + d + 3 * d * d_ff                           # norm, q k v o, norm, gate up down
    return vocab_size * d + n_layer * block + d + (0 if tied else vocab_size * d)


class _GPT2Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))


class _GPT2(nn.Module):
    def __init__(self, n_layer, d, vocab_size, n_ctx, tied):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d)
        self.wpe = nn.Embedding(n_ctx, d)
        self.blocks = nn.ModuleList([_GPT2Block(d) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab_size, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight


class _LlamaBlock(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.attn_norm = nn.RMSNorm(d)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.ffn_norm = nn.RMSNorm(d)
        self.w1 = nn.Linear(d, d_ff, bias=False)     # gate
        self.w3 = nn.Linear(d, d_ff, bias=False)     # up
        self.w2 = nn.Linear(d_ff, d, bias=False)     # down


class _Llama(nn.Module):
    def __init__(self, n_layer, d, vocab_size, d_ff, tied):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, d)
        self.layers = nn.ModuleList([_LlamaBlock(d, d_ff) for _ in range(n_layer)])
        self.norm = nn.RMSNorm(d)
        self.output = nn.Linear(d, vocab_size, bias=False)
        if tied:
            self.output.weight = self.tok_embeddings.weight


def torch_count(model_cls, *args) -> int:
    """sum(p.numel()) of a real (small, CPU) model. Not on the meta device:
    initialising an embedding there imports torch._dynamo, which rebinds
    torch.manual_seed and would look like tampering to the guard."""
    model = model_cls(*args)
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- the helper's measuring tool is off limits

@contextlib.contextmanager
def _helper_refuses():
    """The demo's measuring tool (helpers.ch06_param_count.model_cards.measure) refuses to run
    while a student's function is being graded: the exercise asks for the
    count, not for a call to the demo."""
    try:
        from helpers.ch06_param_count import model_cards
    except Exception:   # pragma: no cover - the helper is part of the course
        yield
        return
    before = model_cards._refusal
    model_cards._refusal = t(*model_cards.REFUSAL)
    try:
        yield
    finally:
        model_cards._refusal = before


COUNT_IN_UNITS = {
    1e6: Bug("count_in_millions", "返回的是以百万为单位的数（像模型卡上的“124M”那样除以了 1e6）：题目要的是参数个数本身，一个整数。",
             "you returned the count in millions (divided by 1e6, like a model card's \"124M\"): the exercise asks for "
             "the number of parameters itself, an integer."),
    1e9: Bug("count_in_billions", "返回的是以十亿为单位的数（除以了 1e9）：题目要的是参数个数本身，一个整数。",
             "you returned the count in billions (divided by 1e9): the exercise asks for the number of parameters "
             "itself, an integer."),
}
COUNT_FLOAT = Bug("count_is_a_float",
                  "返回的是 float（例如用了 /、math.pow、1e3 这样的浮点运算）：参数个数是整数，题目要求返回整数。"
                  "全程用整数运算（*、+、**、//），或者最后 int(...)。",
                  "you returned a float (from /, math.pow or a constant like 1e3, say): a number of parameters is an "
                  "integer and the exercise asks for one. Keep to integer arithmetic (*, +, **, //), or return int(...).")
COUNT_STRING = Bug("count_is_a_string",
                   "返回的是字符串（像模型卡上的“124.4M”那样格式化了）：题目要的是参数个数本身，一个整数；要显示成 M 或 B，"
                   "在调用之后再格式化。",
                   "you returned a string (formatted like a model card's \"124.4M\"): the exercise asks for the number "
                   "of parameters itself, an integer; format it as M or B after the call, when you print it.")
COUNT_TENSOR = Bug("count_is_a_tensor",
                   "返回的是张量，而不是整数：用 Python 整数计算（或者最后 int(....item())）。",
                   "you returned a tensor, not an integer: count with Python integers (or return int(....item())).")


def _count(fn, *args, what, expected_count=None, **kwargs) -> int:
    """The student's count, which must be an integer (int or a numpy integer), as the exercises say."""
    with _helper_refuses():
        out = call(fn, *args, what=what, **kwargs)
    if isinstance(out, numbers.Integral) and not isinstance(out, bool):
        return int(out)
    bug = None
    if isinstance(out, str):
        bug = COUNT_STRING
    elif isinstance(out, torch.Tensor):
        bug = COUNT_TENSOR
    elif isinstance(out, numbers.Real) and not isinstance(out, bool):
        bug = COUNT_FLOAT
        if expected_count and out == out and abs(out) != float("inf"):
            bug = next((b for unit, b in COUNT_IN_UNITS.items()
                        if abs(out * unit - expected_count) <= 1e-6 * unit), COUNT_FLOAT)
    raise failure(t(f"{what}：返回值", f"{what}: the result"), t("一个整数（参数个数）", "an integer (a number of parameters)"),
                  f"{type(out).__name__}: {out!r:.80}", bug)


def _args_text(args, kwargs) -> str:
    parts = [str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _delta(bug, args, kwargs, expected) -> int | None:
    try:
        return int(bug.impl(*args, **kwargs)) - expected
    except Exception:  # noqa: BLE001 - a bug that does not apply to these inputs
        return None


def _diagnose(got, expected, bugs, args, kwargs, confirm=()) -> Bug | None:
    """The known bug (or pair of bugs) that changes the count by exactly got - expected, here and on every
    ``confirm`` case: ``(args, kwargs, expected, the student's count)``. A count is one number, so two different
    mistakes can shift it alike on one input; the other inputs tell them apart, and a change that only one
    input explains is left unnamed rather than named wrongly."""
    cases = [(args, kwargs, expected, got)] + list(confirm)

    def fits(pair) -> bool:
        for a, k, e, g in cases:
            deltas = [_delta(b, a, k, e) for b in pair]
            if any(x is None for x in deltas) or sum(deltas) != g - e:
                return False
        return True

    deltas = [(bug, _delta(bug, args, kwargs, expected)) for bug in bugs]
    singles = [bug for bug, delta in deltas if delta and delta == got - expected]
    for bug in singles:
        if fits((bug,)):
            return bug
    moving = [bug for bug, delta in deltas if delta]
    for b1, b2 in itertools.combinations(moving, 2):
        if fits((b1, b2)):
            return Bug(f"{b1.key}-and-{b2.key}", f"两处错误：①{b1.zh} ②{b2.zh}", f"two mistakes: (1) {b1.en} (2) {b2.en}")
    return None


def _seen(fn, name, reference, confirm) -> list:
    """The student's counts on the ``confirm`` inputs, beside the right ones (none if one of them fails outright:
    the mistake is then judged on the failing input alone)."""
    seen = []
    for a, k in (confirm if reference is not None else ()):
        try:
            seen.append((a, k, reference(*a, **k), _count(fn, *a, what=f"{name}({_args_text(a, k)})", **k)))
        except AssertionError:
            return []
    return seen


def _compare(fn, name, args, kwargs, expected, bugs, label, hint=None, reference=None, confirm=()) -> None:
    what = f"{name}({_args_text(args, kwargs)})"
    if label:
        what = f"{what}  [{label}]"
    got = _count(fn, *args, what=what, expected_count=expected, **kwargs)
    if got != expected:
        bug = _diagnose(got, expected, bugs, args, kwargs, _seen(fn, name, reference, confirm))
        diff = got - expected
        raise failure(what, f"{expected:,}", t(f"{got:,}（差 {diff:+,}）", f"{got:,} (off by {diff:+,})"), bug,
                      hint=hint)


# ---------------------------------------------------------------- approx_non_embedding_params

APPROX_BUGS = [
    Bug("approx_d_not_squared", "写成了 12·L·d：每个矩阵是 d×d（或 d×4d），参数个数随 d² 增长。",
        "you wrote 12·L·d: each matrix is d×d (or d×4d), so the count grows with d².",
        lambda L, d: 12 * L * d),
    Bug("approx_attention_only", "只算了注意力的 4d²，漏了 FFN 的 8d²（两个 d×4d 矩阵）。",
        "you counted only attention's 4d² and left out the FFN's 8d² (two d×4d matrices).",
        lambda L, d: 4 * L * d * d),
    Bug("approx_8d2", "每块只算了 8d²：注意力 4d²（W_Q、W_K、W_V、W_O 各 d²）加 FFN 8d²（d→4d→d 两个矩阵），"
        "合计 12d²。你可能把 FFN 算成了 4d²，或者漏了注意力。",
        "you counted 8d² per block: attention is 4d² (W_Q, W_K, W_V, W_O, d² each) and the FFN 8d² "
        "(two matrices, d→4d→d), 12d² in all. You may have counted the FFN as 4d², or left out attention.",
        lambda L, d: 8 * L * d * d),
    Bug("approx_no_layers", "忘了乘层数 L：12d² 是一个块的参数。", "you forgot to multiply by the number of layers L: "
        "12d² is one block.", lambda L, d: 12 * d * d),
    Bug("approx_L_squared", "写成了 12·L²·d：平方的是宽度 d，不是层数 L。",
        "you wrote 12·L²·d: it is the width d that is squared, not the number of layers L.",
        lambda L, d: 12 * L * L * d),
    Bug("approx_with_biases", "加上了偏置和 LayerNorm（13·L·d）：这个函数只要速算公式 12·L·d²，精确计数是下一题。",
        "you added biases and LayerNorms (13·L·d): this function is the rule of thumb 12·L·d²; the exact count "
        "is the next exercise.", lambda L, d: 12 * L * d * d + 13 * L * d),
]


APPROX_CONFIRM = [((2, 10), {}), ((3, 7), {}), ((1, 5), {})]     # other inputs that tell two mistakes apart


def check_approx(approx_non_embedding_params) -> None:
    name = "approx_non_embedding_params"
    cases = [((12, 768), "GPT-2 small"), ((32, 4096), "LLaMA-2 7B"), ((3, 10), ""), ((1, 1), ""),
             ((0, 64), t("零层", "zero layers")), ((96, 12288), "GPT-3 175B"), ((7, 5), "")]
    for args, label in cases:
        _compare(approx_non_embedding_params, name, args, {}, ref_approx(*args), APPROX_BUGS, label,
                 reference=ref_approx, confirm=APPROX_CONFIRM)
    passed(name, len(cases))


# ---------------------------------------------------------------- gpt2_params

def _g(n_layer, d, vocab_size, n_ctx, tied=True, *, wpe=True, head_twice=False, head_when_untied=True,
       head_bias=False, biases=True, lns=True, ln_f=True, ln_bias=True, ffn=8, mat=lambda d: d * d, wte=True,
       attn_proj=True, lns_per_block=2, ln_f_with_blocks=False):
    ln = (2 * d if ln_bias else d) if lns else 0
    b = 9 * d if biases else 0
    block = lns_per_block * ln + 4 * mat(d) + ffn * mat(d) + b
    if not attn_proj:
        block -= mat(d) + (d if biases else 0)
    if ln_f_with_blocks and n_layer == 0:
        ln_f = False
    total = (vocab_size * d if wte else 0) + (n_ctx * d if wpe else 0) + n_layer * block + (ln if ln_f else 0)
    if (not tied and head_when_untied) or (tied and head_twice):
        total += vocab_size * d + (vocab_size if head_bias else 0)
    return total


GPT2_BUGS = [
    Bug("gpt2_rule_of_thumb", "返回的是速算 12·L·d² + 词表·d：精确计数还要加位置嵌入 n_ctx·d、每块 13d 的偏置和 LayerNorm、最后的 ln_f。",
        "you returned the rule of thumb 12·L·d² + vocab·d: the exact count also needs the position embeddings "
        "n_ctx·d, 13d of biases and LayerNorms per block, and the final ln_f.",
        lambda L, d, V, n, tied=True: 12 * L * d * d + V * d * (1 if tied else 2)),
    Bug("gpt2_ln_f_with_the_last_block", "ln_f 只在有块的时候才算（比如放在块的循环里）：n_layer = 0 时模型仍然有 ln_f，"
        "只剩嵌入和 ln_f。",
        "ln_f is counted only when there are blocks (inside the loop over blocks, say): with n_layer = 0 the model "
        "still has ln_f; only the embeddings and ln_f are left.", lambda *a, **k: _g(*a, **k, ln_f_with_blocks=True)),
    Bug("gpt2_no_position_embeddings", "漏了位置嵌入 wpe：GPT-2 的位置是学出来的，一张 n_ctx × d 的表。",
        "you left out the position embeddings wpe: GPT-2 learns its positions, an n_ctx × d table.",
        lambda *a, **k: _g(*a, **k, wpe=False)),
    Bug("gpt2_tied_head_counted_twice", "共享权重（tied=True）时又把 lm_head 算了一遍：lm_head.weight 就是 wte.weight，"
        "同一个矩阵只算一次。",
        "with tied=True you counted the LM head again: lm_head.weight *is* wte.weight, one matrix counted once.",
        lambda *a, **k: _g(*a, **k, head_twice=True)),
    Bug("gpt2_untied_head_missing", "tied=False 时没有加上独立的 lm_head（词表 × d）：不共享就多一整个词表矩阵。",
        "with tied=False you did not add the separate LM head (vocab × d): untied means one more whole "
        "vocabulary matrix.", lambda *a, **k: _g(*a, **k, head_when_untied=False)),
    Bug("gpt2_head_with_bias", "lm_head 多算了偏置（词表个）：GPT-2 的 lm_head 没有偏置。",
        "you gave the LM head a bias (vocab entries): GPT-2's lm_head has none.",
        lambda *a, **k: _g(*a, **k, head_bias=True)),
    Bug("gpt2_no_biases", "漏了线性层的偏置：每块 3d（c_attn）+ d（attn.c_proj）+ 4d（c_fc）+ d（mlp.c_proj）= 9d。",
        "you left out the biases of the linear layers: per block 3d (c_attn) + d (attn.c_proj) + 4d (c_fc) "
        "+ d (mlp.c_proj) = 9d.", lambda *a, **k: _g(*a, **k, biases=False)),
    Bug("gpt2_no_layernorms", "漏了 LayerNorm：每块两个（ln_1、ln_2），最后还有 ln_f，每个有 weight 和 bias 各 d 个。",
        "you left out the LayerNorms: two per block (ln_1, ln_2) plus the final ln_f, each with a weight and a "
        "bias of d entries.", lambda *a, **k: _g(*a, **k, lns=False, ln_f=False)),
    Bug("gpt2_no_token_embedding", "漏了词嵌入 wte（词表 × d）：它是模型里最大的一张表；tied=True 时 lm_head 和它共享，"
        "算的是 wte 本身，只是 lm_head 不再另算。",
        "you left out the token embedding wte (vocab × d): it is the largest table of the model; with tied=True "
        "lm_head shares it, so wte itself is counted and only lm_head is not.",
        lambda *a, **k: _g(*a, **k, wte=False)),
    Bug("gpt2_no_attention_projection", "注意力只算了 c_attn（d → 3d）：还有输出投影 c_proj = Linear(d, d)，d² + d 个参数。",
        "you counted only c_attn (d → 3d) for attention: there is also the output projection c_proj = "
        "Linear(d, d), d² + d parameters.", lambda *a, **k: _g(*a, **k, attn_proj=False)),
    Bug("gpt2_one_layernorm_per_block", "每块少算了 2d 个参数。两种错误都会这样，从总数上分不出来：①每块只算了一个 LayerNorm"
        "（每块有两个，ln_1 在注意力前、ln_2 在 MLP 前，各 2d 个）；②c_attn 的偏置只算了 d 个（它是 Linear(d, 3d)，"
        "每个输出一个偏置：q、k、v 各 d 个，共 3d）。",
        "every block is 2d parameters short. Two mistakes do this, and the total cannot tell them apart: (1) one "
        "LayerNorm per block (each block has two, ln_1 before attention and ln_2 before the MLP, 2d each); (2) c_attn's "
        "bias counted as d (it is Linear(d, 3d), with one bias per output: d each for q, k and v, 3d in all).",
        lambda *a, **k: _g(*a, **k, lns_per_block=1)),
    Bug("gpt2_no_final_layernorm", "漏了最后的 ln_f（2d）：最后一个块之后、lm_head 之前还有一个 LayerNorm。",
        "you left out the final ln_f (2d): there is one more LayerNorm after the last block, before lm_head.",
        lambda *a, **k: _g(*a, **k, ln_f=False)),
    Bug("gpt2_layernorm_without_bias", "LayerNorm 只算了 weight（d），没算 bias（d）：每个 LayerNorm 有 2d 个参数。",
        "you counted only the LayerNorm weight (d), not its bias (d): each LayerNorm has 2d parameters.",
        lambda *a, **k: _g(*a, **k, ln_bias=False)),
    Bug("gpt2_ffn_as_4d2", "FFN 算成了 4d²：它是 d→4d 和 4d→d 两个矩阵，合计 8d²。",
        "you counted the FFN as 4d²: it is two matrices, d→4d and 4d→d, 8d² in all.",
        lambda *a, **k: _g(*a, **k, ffn=4)),
    Bug("gpt2_d_not_squared", "矩阵按 12·L·d 算了：每个权重矩阵的参数个数是 d×d 量级，要用 12·L·d²。",
        "you counted the matrices as 12·L·d: each weight matrix holds on the order of d×d numbers, so it is "
        "12·L·d².", lambda *a, **k: _g(*a, **k, mat=lambda d: d)),
    Bug("gpt2_vocab_and_n_ctx_swapped", "vocab_size 和 n_ctx 的顺序弄反了：函数头是 gpt2_params(n_layer, d, vocab_size, "
        "n_ctx, tied=True)。共享权重时两张嵌入表的和不受影响，但 tied=False 时独立的 lm_head 是词表 × d，不是 n_ctx × d。",
        "vocab_size and n_ctx are swapped: the signature is gpt2_params(n_layer, d, vocab_size, n_ctx, tied=True). "
        "With tied weights the two embedding tables add up the same, but with tied=False the separate lm_head is "
        "vocab × d, not n_ctx × d.", lambda L, d, V, n, tied=True: _g(L, d, n, V, tied)),
    Bug("gpt2_wpe_dropped_when_tied", "tied=True 时漏了位置嵌入 wpe：共享的只是 wte 和 lm_head 这一对，wpe 是另一张 "
        "n_ctx × d 的表，共享不共享都要算。",
        "with tied=True you left out the position table wpe: tying shares wte with lm_head and nothing else; wpe is a "
        "separate n_ctx × d table, counted tied or not.",
        lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) - (n * d if tied else 0)),
    Bug("gpt2_c_attn_as_d_by_d", "c_attn 的权重算成了 d²：c_attn = Linear(d, 3d) 把 W_Q、W_K、W_V 并排放在一个矩阵里，"
        "权重 3d² 个，再加 3d 个偏置。",
        "you counted c_attn's weight as d²: c_attn = Linear(d, 3d) holds W_Q, W_K and W_V side by side in one "
        "matrix, 3d² weights, plus 3d biases.",
        lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) - 2 * L * d * d),
    Bug("gpt2_norms_not_per_block", "LayerNorm 只算了一次（ln_1、ln_2、ln_f 三个）：ln_1 和 ln_2 在每个块里都有一份，"
        "一共 2·n_layer 个，再加最后的 ln_f。",
        "you counted the LayerNorms once (ln_1, ln_2, ln_f: three): every block has its own ln_1 and ln_2, "
        "2·n_layer of them, plus the final ln_f.",
        lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) - 4 * d * L + 4 * d),
    Bug("gpt2_bias_sized_by_input", "mlp.c_proj 的偏置算成了 4d 个：偏置是每个输出一个，Linear(4d, d) 的输出是 d 维，"
        "所以是 d 个。",
        "you counted 4d biases for mlp.c_proj: a Linear has one bias per output, and Linear(4d, d) has d outputs, "
        "so d biases.", lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) + 3 * d * L),
    Bug("gpt2_ln_f_per_block", "ln_f 算进了每个块里：它只在最后一个块之后出现一次（2d 个参数），和层数无关。",
        "you counted ln_f in every block: it comes once, after the last block (2d parameters), whatever the number "
        "of layers.", lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) + 2 * d * (L - 1)),
    Bug("gpt2_head_bias_always", "lm_head 多算了偏置（词表个），共享时也算了：GPT-2 的 lm_head 没有偏置，共享不共享都一样。",
        "you gave the LM head a bias (vocab entries), tied or not: GPT-2's lm_head has none either way.",
        lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) + V),
    Bug("gpt2_tied_inverted", "tied 的两种情况弄反了：共享（tied=True）时又算了一个 lm_head，不共享时反而没算。"
        "lm_head 只在不共享时另算一个词表 × d 矩阵，共享时它就是 wte，只算一次。",
        "tied and untied are the wrong way round: with tied=True you counted an lm_head again, and with tied=False "
        "you left it out. lm_head is a separate vocab × d matrix only when untied; tied, it is wte, counted once.",
        lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) + (V * d if tied else -V * d)),
    Bug("gpt2_wte_dropped_when_tied", "tied=True 时漏了词嵌入 wte（词表 × d）：共享的意思是 wte 和 lm_head 用同一个矩阵，"
        "这个矩阵还是要算一次（算作 wte），只是 lm_head 不再另算。",
        "with tied=True you left out the token embedding wte (vocab × d): tying means wte and lm_head use one "
        "matrix, which is still counted once (as wte); only lm_head is not counted again.",
        lambda L, d, V, n, tied=True: ref_gpt2(L, d, V, n, tied) - (V * d if tied else 0)),
    Bug("gpt2_zero_layers_empty", "n_layer = 0 时返回了 0：没有块的模型仍然有 wte、wpe 和 ln_f（还有不共享时的 lm_head）。",
        "with n_layer = 0 you returned 0: a model without blocks still has wte, wpe and ln_f (and lm_head when "
        "untied).", lambda L, d, V, n, tied=True: 0 if L == 0 else ref_gpt2(L, d, V, n, tied)),
]


GPT2_DEFAULT_UNTIED = Bug("gpt2_default_untied",
                          "tied 的默认值应当是 True（GPT-2 的 lm_head 和 wte 共享）：函数头是 "
                          "gpt2_params(n_layer, d, vocab_size, n_ctx, tied=True)，不传 tied 时只算一个词表矩阵。",
                          "the default of tied must be True (GPT-2's lm_head shares wte): the signature is "
                          "gpt2_params(n_layer, d, vocab_size, n_ctx, tied=True), so without a tied argument count "
                          "one vocabulary matrix.")


GPT2_CONFIRM = [((2, 8, 13, 7), {"tied": True}), ((3, 16, 29, 11), {"tied": False}), ((1, 24, 7, 5), {"tied": True}),
                ((0, 8, 13, 7), {"tied": False})]


def check_gpt2_params(gpt2_params) -> None:
    name = "gpt2_params"
    gen = seeded(606)
    cases = [((12, 768, 50257, 1024), {}, "GPT-2 small"),
             ((12, 768, 50257, 1024), {"tied": False}, t("GPT-2 small，不共享", "GPT-2 small, untied")),
             ((24, 1024, 50257, 1024), {"tied": True}, "GPT-2 medium"),
             ((3, 40, 101, 17), {"tied": True}, ""),
             ((5, 24, 37, 300), {"tied": False}, ""),
             ((0, 16, 50, 8), {}, t("零层：只剩嵌入和 ln_f", "zero layers: only the embeddings and ln_f"))]
    n = 0
    for args, kwargs, label in cases:
        if not kwargs and _count(gpt2_params, *args, what=f"{name}({_args_text(args, {})})",
                                 expected_count=ref_gpt2(*args)) != ref_gpt2(*args):
            with_true = _count(gpt2_params, *args, tied=True, what=f"{name}({_args_text(args, {'tied': True})})")
            if with_true == ref_gpt2(*args):      # right when told tied=True: the default is not True
                got = _count(gpt2_params, *args, what=name)
                raise failure(f"{name}({_args_text(args, {})})  [{label}]", f"{ref_gpt2(*args):,}",
                              t(f"{got:,}（差 {got - ref_gpt2(*args):+,}）", f"{got:,} (off by {got - ref_gpt2(*args):+,})"),
                              GPT2_DEFAULT_UNTIED)
        _compare(gpt2_params, name, args, kwargs, ref_gpt2(*args, **kwargs), GPT2_BUGS, label, reference=ref_gpt2,
                 confirm=GPT2_CONFIRM)
        n += 1
    # random shapes: a real nanoGPT-style torch model is the judge
    for tied in (True, False, True, False):
        L = int(torch.randint(0, 5, (1,), generator=gen))
        d = 8 * int(torch.randint(1, 9, (1,), generator=gen))
        V = int(torch.randint(10, 400, (1,), generator=gen))
        n_ctx = int(torch.randint(4, 80, (1,), generator=gen))
        expected = torch_count(_GPT2, L, d, V, n_ctx, tied)
        assert expected == ref_gpt2(L, d, V, n_ctx, tied)
        label = t("与 torch 模型的 sum(p.numel()) 比较", "compared with sum(p.numel()) of a torch model")
        _compare(gpt2_params, name, (L, d, V, n_ctx), {"tied": tied}, expected, GPT2_BUGS, label, reference=ref_gpt2,
                 confirm=GPT2_CONFIRM)
        n += 1
    passed(name, n)


# ---------------------------------------------------------------- llama_params

def _l(n_layer, d, vocab_size, d_ff, tied=False, *, biases=False, ffn_mats=3, ffn_8d2=False, norm_bias=False,
       norms=True, final_norm=True, tied_ignored=False, always_tied=False, pos=False, emb=True, qkv_bias=False,
       norms_per_block=2, head_bias=False):
    nrm = (2 * d if norm_bias else d) if norms else 0
    ffn = 8 * d * d if ffn_8d2 else ffn_mats * d * d_ff
    b = (4 * d + 2 * d_ff + d) if biases else 3 * d if qkv_bias else 0
    block = norms_per_block * nrm + 4 * d * d + ffn + b
    head = vocab_size * d + (vocab_size if head_bias else 0)
    if always_tied:
        head = 0
    elif tied and not tied_ignored:
        head = 0
    return (vocab_size * d if emb else 0) + n_layer * block + (nrm if final_norm else 0) + head


def _llama_ffn_size(d: int, multiple: int | None = 256) -> int:
    """The d_ff a student derives from d (2/3 of 4d, rounded up to a multiple of 256) instead of the d_ff given."""
    f = int(8 * d / 3)
    return f if multiple is None else multiple * ((f + multiple - 1) // multiple)


D_FF_IGNORED = ("没有用参数 d_ff，而是从 d 自己算了一个（2/3·4d，取整到 256 的倍数）：SwiGLU 的三个矩阵是 d × d_ff，"
                "d_ff 由调用者给出（LLaMA-2 7B 是 11008，13B 是 13824），直接用它。",
                "you did not use the d_ff argument but derived one from d yourself (2/3·4d, rounded up to a multiple "
                "of 256): SwiGLU's three matrices are d × d_ff, with the d_ff the caller gives (11008 for LLaMA-2 "
                "7B, 13824 for 13B); use it as given.")
LLAMA_BUGS = [
    Bug("llama_with_biases", "给 LLaMA 的线性层加了偏置：LLaMA 的 q/k/v/o 和 gate/up/down 都没有偏置（bias=False）。",
        "you gave LLaMA's linear layers biases: q/k/v/o and gate/up/down all have bias=False in LLaMA.",
        lambda *a, **k: _l(*a, **k, biases=True)),
    Bug("llama_ffn_two_matrices", "SwiGLU 只算了两个矩阵：它有 gate、up（各 d×d_ff）和 down（d_ff×d）三个，合计 3·d·d_ff。",
        "you counted two matrices in SwiGLU: it has three, gate and up (d×d_ff each) and down (d_ff×d), 3·d·d_ff "
        "in all.", lambda *a, **k: _l(*a, **k, ffn_mats=2)),
    Bug("llama_ffn_8d2", "FFN 按 GPT-2 的 8d² 算了，没有用参数 d_ff：LLaMA 的 FFN 是 3·d·d_ff。",
        "you counted the FFN as GPT-2's 8d² and ignored d_ff: LLaMA's FFN is 3·d·d_ff.",
        lambda *a, **k: _l(*a, **k, ffn_8d2=True)),
    Bug("llama_rmsnorm_with_bias", "RMSNorm 多算了 bias：RMSNorm 只有一个缩放向量 weight（d 个），没有 bias。",
        "you gave RMSNorm a bias: RMSNorm has only a scale vector weight (d entries), no bias.",
        lambda *a, **k: _l(*a, **k, norm_bias=True)),
    Bug("llama_no_norms", "漏了 RMSNorm：每块两个，最后还有一个，每个 d 个参数。",
        "you left out the RMSNorms: two per block plus a final one, d parameters each.",
        lambda *a, **k: _l(*a, **k, norms=False)),
    Bug("llama_rule_of_thumb", "返回的是速算 12·L·d² 加词表矩阵：精确计数要按表逐项算，FFN 是 3·d·d_ff（不一定等于 8d²），"
        "还有每块两个、最后一个 RMSNorm。",
        "you returned the rule of thumb 12·L·d² plus the vocabulary matrices: the exact count goes row by row "
        "through the table; the FFN is 3·d·d_ff (not always 8d²), and there are two RMSNorms per block and a "
        "final one.", lambda L, d, V, d_ff, tied=False: 12 * L * d * d + V * d * (1 if tied else 2)),
    Bug("llama_no_embedding", "漏了词嵌入（词表 × d）：不共享时词嵌入和输出层是两个矩阵，共享时也还有一个。",
        "you left out the token embedding (vocab × d): untied, the embedding and the output layer are two "
        "matrices; tied, there is still one.", lambda *a, **k: _l(*a, **k, emb=False)),
    Bug("llama_qkv_biases", "给 q、k、v 投影加了偏置（每块 3d，Qwen 的做法）：LLaMA 的 4 个投影都是 bias=False。",
        "you gave the q, k, v projections biases (3d per block, as Qwen does): LLaMA's four projections all "
        "have bias=False.", lambda *a, **k: _l(*a, **k, qkv_bias=True)),
    Bug("llama_one_norm_per_block", "每块只算了一个 RMSNorm：注意力前一个、FFN 前一个，每块两个，各 d 个参数。",
        "you counted one RMSNorm per block: there is one before attention and one before the FFN, two per block, "
        "d parameters each.", lambda *a, **k: _l(*a, **k, norms_per_block=1)),
    Bug("llama_output_bias", "输出层多算了偏置（词表个）：LLaMA 的输出层是 Linear(d, vocab_size, bias=False)。",
        "you gave the output layer a bias (vocab entries): LLaMA's output layer is Linear(d, vocab_size, "
        "bias=False).", lambda *a, **k: _l(*a, **k, head_bias=True)),
    Bug("llama_no_final_norm", "漏了最后的 RMSNorm（d 个参数）：最后一个块之后、输出层之前还有一个。",
        "you left out the final RMSNorm (d parameters): there is one more after the last block, before the output.",
        lambda *a, **k: _l(*a, **k, final_norm=False)),
    Bug("llama_tied_ignored", "忽略了 tied 参数：tied=True 时输出层与词嵌入共享，不应再加一个词表 × d 矩阵。",
        "the tied argument is ignored: with tied=True the output layer shares the embedding matrix, so no second "
        "vocab × d matrix.", lambda *a, **k: _l(*a, **k, tied_ignored=True)),
    Bug("llama_always_tied", "tied=False 时没有加上独立的输出层（词表 × d）：LLaMA-2 的嵌入和输出层是两个矩阵。",
        "with tied=False you did not add the separate output layer (vocab × d): LLaMA-2's embedding and output "
        "layer are two matrices.", lambda *a, **k: _l(*a, **k, always_tied=True)),
    Bug("llama_d_ff_from_d", *D_FF_IGNORED, lambda L, d, V, f, tied=False: _l(L, d, V, _llama_ffn_size(d), tied)),
    Bug("llama_d_ff_from_d_unrounded", *D_FF_IGNORED,
        lambda L, d, V, f, tied=False: _l(L, d, V, _llama_ffn_size(d, None), tied)),
    Bug("llama_embedding_dropped_when_tied", "tied=True 时漏了词嵌入（词表 × d）：共享的意思是词嵌入和输出层用同一个矩阵，"
        "这个矩阵还是要算一次，只是输出层不再另算。",
        "with tied=True you left out the token embedding (vocab × d): tying means the embedding and the output layer "
        "use one matrix, which is still counted once; only the output layer is not counted again.",
        lambda L, d, V, f, tied=False: ref_llama(L, d, V, f, tied) - (V * d if tied else 0)),
    Bug("llama_rope_counted", "给 RoPE 算了参数：RoPE 的 θ_i 是按公式算出来的固定数（代码里是 buffer，不是参数），"
        "没有要训练的参数。",
        "you counted parameters for RoPE: its θ_i are fixed numbers from a formula (a buffer in code, not a "
        "parameter); nothing there is trained.",
        lambda L, d, V, f, tied=False: ref_llama(L, d, V, f, tied) + L * (d // 2)),
    Bug("llama_norms_not_per_block", "RMSNorm 只算了一次（三个）：注意力前和 FFN 前的 RMSNorm 在每个块里都有一份，"
        "一共 2·n_layer 个，再加最后一个。",
        "you counted the RMSNorms once (three): the ones before attention and before the FFN are in every block, "
        "2·n_layer of them, plus the final one.",
        lambda L, d, V, f, tied=False: ref_llama(L, d, V, f, tied) + 2 * d - 2 * L * d),
    Bug("llama_final_norm_per_block", "最后的 RMSNorm 算进了每个块里：它只在最后一个块之后出现一次（d 个参数）。",
        "you counted the final RMSNorm in every block: it comes once, after the last block (d parameters).",
        lambda L, d, V, f, tied=False: ref_llama(L, d, V, f, tied) + d * (L - 1)),
    Bug("llama_output_bias_always", "输出层多算了偏置（词表个），共享时也算了：LLaMA 的输出层没有偏置，共享不共享都一样。",
        "you gave the output layer a bias (vocab entries), tied or not: LLaMA's output layer has none either way.",
        lambda L, d, V, f, tied=False: ref_llama(L, d, V, f, tied) + V),
    Bug("llama_block_d_too_many", "每块多算了 d 个参数：可能给 o 或 down 投影加了偏置（LLaMA 的投影都没有偏置），"
        "也可能每块算了三个 RMSNorm（每块只有两个）。",
        "every block has d parameters too many: a bias on the o or down projection (LLaMA's projections have none), "
        "or three RMSNorms per block (there are two).",
        lambda L, d, V, f, tied=False: ref_llama(L, d, V, f, tied) + L * d),
]

DEFAULT_TIED = Bug("llama_default_tied", "tied 的默认值应当是 False（LLaMA-2 不共享）：不传 tied 时要算两个词表矩阵。",
                   "the default of tied must be False (LLaMA-2 does not tie): without a tied argument, count two "
                   "vocabulary matrices.")


LLAMA_CONFIRM = [((2, 8, 13, 24), {"tied": False}), ((3, 16, 29, 40), {"tied": True}), ((1, 24, 7, 56), {"tied": False}),
                 ((0, 8, 13, 24), {"tied": True})]


def check_llama_params(llama_params) -> None:
    name = "llama_params"
    gen = seeded(707)
    n = 0
    # the default must be untied
    args = (32, 4096, 32000, 11008)
    expected = ref_llama(*args)
    got = _count(llama_params, *args, what=f"{name}({_args_text(args, {})})  [LLaMA-2 7B]", expected_count=expected)
    if got != expected:
        with_false = _count(llama_params, *args, tied=False, what=f"{name}({_args_text(args, {'tied': False})})")
        bug = DEFAULT_TIED if with_false == expected else _diagnose(got, expected, LLAMA_BUGS, args, {},
                                                                    _seen(llama_params, name, ref_llama, LLAMA_CONFIRM))
        raise failure(f"{name}({_args_text(args, {})})  [LLaMA-2 7B]", f"{expected:,}",
                      t(f"{got:,}（差 {got - expected:+,}）", f"{got:,} (off by {got - expected:+,})"), bug)
    n += 1
    cases = [((32, 4096, 32000, 11008), {"tied": True}, t("LLaMA-2 7B 的形状，共享", "LLaMA-2 7B shape, tied")),
             ((40, 5120, 32000, 13824), {"tied": False}, "LLaMA-2 13B"),
             ((3, 40, 101, 112), {"tied": False}, ""),
             ((2, 24, 37, 60), {"tied": True}, ""),
             ((0, 16, 50, 40), {}, t("零层", "zero layers"))]
    for args, kwargs, label in cases:
        _compare(llama_params, name, args, kwargs, ref_llama(*args, **kwargs), LLAMA_BUGS, label, reference=ref_llama,
                 confirm=LLAMA_CONFIRM)
        n += 1
    for tied in (False, True, False, True):
        L = int(torch.randint(0, 5, (1,), generator=gen))
        d = 8 * int(torch.randint(1, 9, (1,), generator=gen))
        V = int(torch.randint(10, 400, (1,), generator=gen))
        d_ff = int(torch.randint(8, 200, (1,), generator=gen))
        expected = torch_count(_Llama, L, d, V, d_ff, tied)
        assert expected == ref_llama(L, d, V, d_ff, tied)
        label = t("与 torch 模型的 sum(p.numel()) 比较", "compared with sum(p.numel()) of a torch model")
        _compare(llama_params, name, (L, d, V, d_ff), {"tied": tied}, expected, LLAMA_BUGS, label, reference=ref_llama,
                 confirm=LLAMA_CONFIRM)
        n += 1
    passed(name, n)


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)
# Each probe is a list of cases ((args, kwargs), the last without tied: the default) and its output the counts,
# one per case: a known mistake is named when all its counts are the student's, and not one case alone. The
# shapes are small so that every known mistake moves some count by far more than rounding.

APPROX_CASES = [[[2, 10], {}], [[3, 7], {}]]
GPT2_CASES = [[[2, 8, 13, 7], {"tied": True}], [[3, 16, 29, 11], {"tied": False}], [[0, 8, 13, 7], {"tied": True}],
              [[1, 24, 7, 5], {}]]
LLAMA_CASES = [[[2, 8, 13, 24], {"tied": False}], [[3, 12, 11, 20], {"tied": True}], [[0, 8, 13, 24], {"tied": False}],
               [[1, 16, 7, 40], {}]]


def _counts(fn, cases) -> torch.Tensor:
    return torch.tensor([int(fn(*args, **kwargs)) for args, kwargs in cases], dtype=torch.int64)


def _count_probe(name, cases, reference, bugs) -> Probe:
    return Probe(name, args=(cases,), reference=lambda c: _counts(reference, c), bugs=bugs,
                 run_bug=lambda bug: _counts(bug.impl, cases))


def probes() -> list[Probe]:
    # a default of tied that is not the signature's: the case without tied shows it
    untied = Bug(GPT2_DEFAULT_UNTIED.key, GPT2_DEFAULT_UNTIED.zh, GPT2_DEFAULT_UNTIED.en,
                 lambda L, d, V, n, tied=False: ref_gpt2(L, d, V, n, tied))
    tied = Bug(DEFAULT_TIED.key, DEFAULT_TIED.zh, DEFAULT_TIED.en,
               lambda L, d, V, f, tied=True: ref_llama(L, d, V, f, tied))
    return [_count_probe("approx", APPROX_CASES, ref_approx, APPROX_BUGS),
            _count_probe("gpt2", GPT2_CASES, ref_gpt2, GPT2_BUGS + [untied]),
            _count_probe("llama", LLAMA_CASES, ref_llama, LLAMA_BUGS + [tied])]
