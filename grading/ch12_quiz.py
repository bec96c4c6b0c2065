"""Hidden answer key of ch12_quiz, the chapter quiz.

Every auto-graded question is one entry of ``QUESTIONS``; its test cell calls
``check(name, answer)``. Multiple-choice keys are letters; numeric keys are
*computed* here from the same formulas the chapters teach (GPT-2 medium's
parameter count, a KV cache's bytes, ...), so they cannot drift from them.

Feedback names the question and the chapter section to reread, and never the
right option. For a few common misconceptions (a chosen distractor, a typical
wrong number) it adds why that answer is wrong.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from helpers.ch12_quiz import AnswerFormError, parse_choice, parse_choices, parse_number
from helpers.i18n import t

from .core import GradingFailure, passed

CHAPTERS = {
    "ch01_attention": ("第 1 章（ch01_attention，注意力与 √d_k）", "Chapter 1 (ch01_attention, attention and √d_k)"),
    "ch02_causal_mask": ("第 2 章（ch02_causal_mask，因果掩码）", "Chapter 2 (ch02_causal_mask, the causal mask)"),
    "ch03_multi_head": ("第 3 章（ch03_multi_head，多头注意力）", "Chapter 3 (ch03_multi_head, multi-head attention)"),
    "ch04_positions": ("第 4 章（ch04_positions，位置编码与 RoPE）",
                       "Chapter 4 (ch04_positions, positional encodings and RoPE)"),
    "ch05_block": ("第 5 章（ch05_block，FFN、LayerNorm 与残差）",
                   "Chapter 5 (ch05_block, FFN, LayerNorm and residuals)"),
    "ch06_param_count": ("第 6 章（ch06_param_count，数参数）", "Chapter 6 (ch06_param_count, counting parameters)"),
    "ch07_gpt": ("第 7 章（ch07_gpt，训练一个 GPT）", "Chapter 7 (ch07_gpt, training a GPT)"),
    "ch08_efficiency": ("第 8 章（ch08_efficiency，注意力的代价）",
                        "Chapter 8 (ch08_efficiency, what attention costs)"),
    "ch09_inside_gpt": ("第 9 章（ch09_inside_gpt，头学到了什么）", "Chapter 9 (ch09_inside_gpt, what the heads learned)"),
    "ch10_llama_block": ("第 10 章（ch10_llama_block，从 GPT-2 到 LLaMA）",
                         "Chapter 10 (ch10_llama_block, from GPT-2 to LLaMA)"),
    "ch11_encoder_decoder": ("第 11 章（ch11_encoder_decoder，编码器与解码器）",
                             "Chapter 11 (ch11_encoder_decoder, encoder and decoder)"),
}


# ---------------------------------------------------------------- computed keys

def score_entries(n: int) -> int:
    """Entries of the n × n score matrix QKᵀ: the work that grows with n²."""
    return n * n


def masked_entries(n: int) -> int:
    """Entries a causal mask forbids (j > i), counted on a real mask."""
    return int((~torch.ones(n, n, dtype=torch.bool).tril()).sum())


def ffn_share(d: int = 64) -> float:
    """The FFN's share of a block's weight matrices, counted on real modules."""
    attn = sum(nn.Linear(d, d, bias=False).weight.numel() for _ in range(4))       # W_Q, W_K, W_V, W_O
    ffn = nn.Linear(d, 4 * d, bias=False).weight.numel() + nn.Linear(4 * d, d, bias=False).weight.numel()
    return ffn / (attn + ffn)


def approx_non_embedding(n_layer: int, d: int) -> int:
    return 12 * n_layer * d * d


def gpt2_params(n_layer: int, d: int, vocab_size: int, n_ctx: int, tied: bool = True) -> int:
    """Exact GPT-2 count: per block 12d² + 13d (weights, biases, two LayerNorms)."""
    per_block = (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 2 * (2 * d)
    embeddings = vocab_size * d + n_ctx * d
    lm_head = 0 if tied else vocab_size * d
    return n_layer * per_block + embeddings + 2 * d + lm_head


D_K = 64                        # question 2: Var(q·k) = d_k for unit-variance components
GPT2_MEDIUM = dict(n_layer=24, d=1024, vocab_size=50257, n_ctx=1024)
LLAMA2_7B = dict(n_layer=32, d=4096)


def initial_loss(vocab_size: int) -> float:
    """Question 18: the cross-entropy of a model whose logits are all 0, as at
    initialisation, computed by torch on a real tensor (it is ln V)."""
    logits = torch.zeros(3, vocab_size, dtype=torch.float64)
    return float(nn.functional.cross_entropy(logits, torch.tensor([0, 1, vocab_size - 1])))


def clipped_gradient(grad: tuple[float, ...], max_norm: float) -> list[float]:
    """Question 19: a gradient after torch's own ``clip_grad_norm_``."""
    p = nn.Parameter(torch.zeros(len(grad), dtype=torch.float64))
    p.grad = torch.tensor(grad, dtype=torch.float64)
    torch.nn.utils.clip_grad_norm_([p], max_norm)
    return p.grad.tolist()


CLIP_GRAD, CLIP_MAX = (3.0, 4.0), 1.0          # question 19: a gradient of norm 5, clipped at 1


def kv_cache_bytes(n_layer: int, n_tokens: int, d_model: int, bytes_per_value: int = 2) -> int:
    """K and V (2) for every layer and token, d_model values each."""
    return 2 * n_layer * n_tokens * d_model * bytes_per_value


def uniform_prev_token_score(n: int) -> float:
    """Question 28: the previous-token score of a head that spreads its weight
    evenly over positions 0…i (the causal baseline), measured on a real tensor."""
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    attn = allowed.double() / allowed.sum(-1, keepdim=True)
    return float(attn.diagonal(offset=-1).mean())


def swiglu_params(d: int, d_ff: int) -> int:
    """Question 31: gate, up (d → d_ff) and down (d_ff → d), no bias, counted on real modules
    (on the meta device: no memory is allocated)."""
    layers = (nn.Linear(d, d_ff, bias=False, device="meta"), nn.Linear(d, d_ff, bias=False, device="meta"),
              nn.Linear(d_ff, d, bias=False, device="meta"))
    return sum(p.numel() for layer in layers for p in layer.parameters())


def gqa_cache_bytes(n_layer: int, n_tokens: int, n_kv_head: int, d_head: int, bytes_per_value: int) -> int:
    """Question 32: K and V for every layer and token, n_kv_head · d_head values each."""
    return 2 * n_layer * n_tokens * n_kv_head * d_head * bytes_per_value


def repeat_kv_source(query_head: int, n_head: int, n_kv_head: int) -> int:
    """Question 33: which K/V head ``repeat_interleave`` hands to a query head."""
    kv = torch.arange(n_kv_head).repeat_interleave(n_head // n_kv_head)
    return int(kv[query_head])


# ---------------------------------------------------------------- questions

@dataclass(frozen=True)
class Note:
    """Why a typical wrong answer is wrong (never which answer is right)."""
    zh: str
    en: str

    def text(self) -> str:
        return t(self.zh, self.en)


@dataclass(frozen=True)
class Question:
    number: int
    kind: str                      # "choice", "choices" or "number"
    chapter: str
    topic: tuple[str, str]         # the section to reread, (zh, en)
    key: Callable[[], Any]
    options: str = "ABCD"
    rtol: float = 0.0
    notes: dict = field(default_factory=dict)                   # letter -> Note (choice questions)
    wrong_values: tuple = ()                                    # (value function, Note) (number questions)

    def review(self) -> str:
        zh, en = CHAPTERS[self.chapter]
        return t(f"复习{zh}中“{self.topic[0]}”的内容。", f"Reread {en}: {self.topic[1]}.")


def _letter(x: str) -> Callable[[], str]:
    return lambda: x


def _letters(x: str) -> Callable[[], frozenset]:
    return lambda: frozenset(x)


QUESTIONS: dict[str, Question] = {
    "q01_sqrt_dk": Question(
        1, "choice", "ch01_attention", ("缩放点积注意力与 √d_k 的推导", "scaled dot-product attention and the √d_k argument"),
        _letter("C"), notes={
            "A": Note("让每行加起来等于 1 是 softmax 的工作，与是否除以 √d_k 无关。",
                      "making each row add up to 1 is softmax's job, with or without √d_k."),
            "B": Note("除以一个常数不会让矩阵乘法更快：计算量完全不变。",
                      "dividing by a constant does not make the matrix product any faster: the work is the same."),
            "D": Note("√d_k 与序列长度 n 无关：d_k 是每个 query/key 向量的维度。",
                      "√d_k has nothing to do with the sequence length n: d_k is the size of each query/key vector."),
        }),
    "q02_dot_variance": Question(
        2, "number", "ch01_attention", ("缩放点积注意力与 √d_k 的推导", "scaled dot-product attention and the √d_k argument"),
        lambda: float(D_K), rtol=0.0, wrong_values=(
            (lambda: math.sqrt(D_K), Note("这是标准差；题目问的是方差。", "that is the standard deviation; the question asks for the variance.")),
            (lambda: 1, Note("那是除以 √d_k 之后的方差；题目问的是未缩放的点积。",
                             "that is the variance after dividing by √d_k; the question is about the raw dot product.")),
            (lambda: 0, Note("那是点积的期望；题目问的是方差。", "that is the mean of the dot product; the question asks for the variance.")),
        )),
    "q03_causal_mask": Question(
        3, "choice", "ch02_causal_mask", ("为什么位置 i 不能看见 j > i", "why position i must not see j > i"),
        _letter("A"), notes={
            "B": Note("屏蔽填充 token 的是另一种掩码（padding mask）；因果掩码即使没有任何填充也必不可少。",
                      "hiding padding is a different mask (a padding mask); the causal mask is needed even without any padding."),
            "C": Note("省下的计算只是副产品（而且朴素实现根本不省）；没有这个掩码，下一个 token 的训练目标就失去了意义。",
                      "any saving is a side effect (a naive implementation saves nothing); without the mask the "
                      "next-token objective stops making sense."),
        }),
    "q04_first_row": Question(
        4, "choice", "ch02_causal_mask", ("步进计算器的第 ④ 步：softmax 之后的权重", "stage ④ of the step-through calculator"),
        _letter("D"), notes={
            "A": Note("即使第一个 token 的分数很小，这一行也照样是 1.00：与分数大小无关。",
                      "the row is 1.00 even when the first token's score is tiny: it does not depend on the score."),
            "B": Note("除以 √d_k 只改变分数的尺度，不会让分数变成 0，也不会决定这一行的结构。",
                      "dividing by √d_k changes the scale of the scores, it does not make them 0 or shape this row."),
        }),
    "q05_masked_zeros": Question(
        5, "number", "ch02_causal_mask", ("因果掩码：softmax 之前设为 −∞，之后恰好为 0",
                                           "the causal mask: −∞ before softmax, exact zeros after it"),
        lambda: masked_entries(5), wrong_values=(
            (lambda: masked_entries(5) + 5, Note("对角线（j = i，看自己）是允许的，不会变成 0。",
                                                 "the diagonal (j = i, a token looking at itself) is allowed and does not become 0.")),
            (lambda: 2 * masked_entries(5), Note("只有一个三角被屏蔽，不是两个。", "only one triangle is masked, not both.")),
        )),
    "q06_bert_gpt": Question(
        6, "choices", "ch02_causal_mask", ("关掉掩码 = BERT 式双向注意力", "mask off = BERT-style bidirectional attention"),
        _letters("ABD"), options="ABCDE"),
    "q08_heads": Question(
        8, "choices", "ch03_multi_head", ("h 个头、每个 d_k = d/h，计算量与单头相同；真实的头在做什么",
                                          "h heads of size d/h at the cost of one; what real heads do"),
        _letters("BCE"), options="ABCDE"),
    "q10_permutation": Question(
        10, "choice", "ch04_positions", ("没有位置信息的注意力是置换等变的", "attention without positions is permutation-equivariant"),
        _letter("B"), notes={
            "A": Note("“不变”是指输出完全不动；这里每个位置的输出仍然跟着自己的 token 走。",
                      "'invariant' would mean the output does not move at all; here each output still follows its own token."),
        }),
    "q11_rope_relative": Question(
        11, "choice", "ch04_positions", ("RoPE：旋转后的点积只依赖 n − m", "RoPE: the rotated dot product depends only on n − m"),
        _letter("C"), notes={
            "B": Note("只有两个向量转过同样的角度时点积才不变；这里 m ≠ n。",
                      "a dot product is unchanged only when both vectors turn by the same angle; here m ≠ n."),
            "A": Note("两个旋转角度不是相加：R_mᵀ R_n 是转 n − m 的旋转。",
                      "the two angles do not add up: R_mᵀ R_n is a rotation by n − m."),
            "D": Note("方向反了：把 R_m 移到另一边要转置（反向旋转）。",
                      "wrong direction: moving R_m to the other side transposes it (a rotation the other way)."),
        }),
    "q12_positions": Question(
        12, "choices", "ch04_positions", ("正弦编码、可学习绝对位置嵌入与 RoPE", "sinusoids, learned absolute embeddings and RoPE"),
        _letters("ACE"), options="ABCDE"),
    "q13_pre_ln": Question(
        13, "choice", "ch05_block", ("Pre-LN 与 Post-LN", "Pre-LN vs Post-LN"),
        _letter("B"), notes={
            "A": Note("这是 Post-LN（原论文的写法）：LayerNorm 在残差相加之后。",
                      "that is Post-LN (the original paper): LayerNorm comes after the residual addition."),
            "C": Note("这一行没有残差：x 本身没有被加回来。", "this line has no residual: x itself is not added back."),
        }),
    "q14_why_pre_ln": Question(
        14, "choice", "ch05_block", ("为什么 Pre-LN 训练深层堆叠更稳", "why Pre-LN trains deep stacks"),
        _letter("D"), notes={
            "C": Note("原论文（Vaswani 等，2017）用的是 Post-LN。", "the original paper (Vaswani et al., 2017) used Post-LN."),
            "A": Note("两种结构的参数一模一样，只是 LayerNorm 的位置不同。",
                      "both layouts have exactly the same parameters; only where LayerNorm sits differs."),
            "B": Note("LayerNorm 放在哪里与注意力的 O(n²) 复杂度无关。",
                      "where LayerNorm sits has nothing to do with attention's O(n²) cost."),
        }),
    "q15_ffn_share": Question(
        15, "number", "ch05_block", ("FFN 占一个块约多少参数", "the FFN's share of a block's parameters"),
        ffn_share, rtol=0.02, wrong_values=(
            (lambda: 100 * ffn_share(), Note("看起来是百分数；请填 0 到 1 之间的比例。",
                                              "this looks like a percentage; give a fraction between 0 and 1.")),
            (lambda: 1 - ffn_share(), Note("这是注意力部分所占的比例。", "that is the attention part's share.")),
            (lambda: 0.5, Note("FFN 的两个矩阵各是 d × 4d，而注意力的四个矩阵各是 d × d。",
                               "the FFN's two matrices are d × 4d each, attention's four are d × d each.")),
        )),
    "q16_12Ld2": Question(
        16, "number", "ch06_param_count", ("每块 12d²，非嵌入参数 ≈ 12·L·d²", "12d² per block, non-embedding ≈ 12·L·d²"),
        lambda: approx_non_embedding(GPT2_MEDIUM["n_layer"], GPT2_MEDIUM["d"]), rtol=0.02, wrong_values=(
            (lambda: 4 * GPT2_MEDIUM["n_layer"] * GPT2_MEDIUM["d"] ** 2,
             Note("这只算了注意力的 4d²，漏了 FFN 的 8d²。", "that counts only attention's 4d²; the FFN's 8d² is missing.")),
            (lambda: 8 * GPT2_MEDIUM["n_layer"] * GPT2_MEDIUM["d"] ** 2,
             Note("这只算了 FFN 的 8d²，漏了注意力的 4d²。", "that counts only the FFN's 8d²; attention's 4d² is missing.")),
            (lambda: approx_non_embedding(GPT2_MEDIUM["n_layer"], 768),
             Note("d 用成了 GPT-2 small 的 768。", "you used GPT-2 small's d = 768.")),
            (lambda: approx_non_embedding(12, GPT2_MEDIUM["d"]),
             Note("L 用成了 GPT-2 small 的 12 层。", "you used GPT-2 small's 12 layers.")),
        )),
    "q17_gpt2_medium": Question(
        17, "number", "ch06_param_count", ("GPT-2 的精确参数量：偏置、LayerNorm、共享的嵌入",
                                           "GPT-2's exact count: biases, LayerNorms, the shared embedding"),
        lambda: gpt2_params(**GPT2_MEDIUM), rtol=0.01, wrong_values=(
            (lambda: gpt2_params(**GPT2_MEDIUM, tied=False),
             Note("lm_head 被单独又算了一遍；GPT-2 的 lm_head 与词嵌入共享权重。",
                  "the lm_head is counted a second time; GPT-2's lm_head shares its weight with the token embedding.")),
            (lambda: approx_non_embedding(GPT2_MEDIUM["n_layer"], GPT2_MEDIUM["d"]),
             Note("这只是非嵌入部分（12·L·d²）；词嵌入和位置嵌入还没加。",
                  "that is only the non-embedding part (12·L·d²); the token and position embeddings are missing.")),
        )),
    "q18_initial_loss": Question(
        18, "number", "ch07_gpt", ("初始化时的损失约为 ln V", "the loss at initialisation is about ln V"),
        lambda: initial_loss(65), rtol=0.02, wrong_values=(
            (lambda: 1 / 65, Note("这是初始化时每个字符的概率 1/V；交叉熵是它的负对数。",
                                  "that is each character's probability 1/V at initialisation; the cross-entropy is "
                                  "minus its logarithm.")),
            (lambda: math.log2(65), Note("交叉熵用的是自然对数（ln），不是以 2 为底。",
                                         "the cross-entropy uses the natural logarithm (ln), not base 2.")),
            (lambda: 65, Note("损失不是词表大小，而是均匀猜测时的 −ln(1/V)。",
                              "the loss is not the vocabulary size but −ln(1/V) of a uniform guess.")),
        )),
    "q19_clipped_component": Question(
        19, "number", "ch07_gpt", ("梯度裁剪：按总范数整体缩小", "gradient clipping: scale the whole gradient by its norm"),
        lambda: clipped_gradient(CLIP_GRAD, CLIP_MAX)[0], rtol=0.01, wrong_values=(
            (lambda: 1.0, Note("把每个分量截到 [−1, 1] 是 clip_grad_value_；clip_grad_norm_ 把整个梯度向量按比例缩小，方向不变。",
                               "cutting each component to [−1, 1] is clip_grad_value_; clip_grad_norm_ scales the whole "
                               "gradient vector down and keeps its direction.")),
            (lambda: CLIP_GRAD[0], Note("范数 5 大于 max_norm = 1，所以梯度会被缩小。",
                                        "the norm 5 is above max_norm = 1, so the gradient is scaled down.")),
            (lambda: CLIP_MAX / 5, Note("这是缩放的比例 max_norm / ‖g‖；分量还要乘上它。",
                                        "that is the scale factor max_norm / ‖g‖; the component is multiplied by it.")),
        )),
    "q20_evaluation": Question(
        20, "choices", "ch07_gpt", ("评估：torch.no_grad() 与 model.eval()", "the evaluation: torch.no_grad() and model.eval()"),
        _letters("ABE"), options="ABCDE"),
    "q21_double_context": Question(
        21, "number", "ch08_efficiency", ("O(n²) 的代价：分数矩阵的时间与内存", "the O(n²) price: time and memory of the score matrix"),
        lambda: score_entries(2048) / score_entries(1024), rtol=0.05, wrong_values=(
            (lambda: 2, Note("分数矩阵不是随 n 线性增长：它有 n × n 个元素。",
                             "the score matrix does not grow linearly with n: it has n × n entries.")),
        )),
    "q22_kv_cache": Question(
        22, "choices", "ch08_efficiency", ("KV cache：存什么、省什么", "the KV cache: what it keeps and what it saves"),
        _letters("ACD"), options="ABCDE"),
    "q23_kv_bytes": Question(
        23, "number", "ch08_efficiency", ("KV cache 的内存：2 · 层数 · token 数 · d", "KV cache memory: 2 · layers · tokens · d"),
        lambda: kv_cache_bytes(LLAMA2_7B["n_layer"], 4096, LLAMA2_7B["d"], 2), rtol=0.02, wrong_values=(
            (lambda: kv_cache_bytes(LLAMA2_7B["n_layer"], 4096, LLAMA2_7B["d"], 2) / 2,
             Note("少了一个因子 2：K 和 V 都要存，而且每个 fp16 数占 2 字节。",
                  "a factor of 2 is missing: both K and V are stored, and each fp16 value takes 2 bytes.")),
            (lambda: kv_cache_bytes(LLAMA2_7B["n_layer"], 4096, LLAMA2_7B["d"], 2) / 4,
             Note("少了两个因子 2：K 和 V 都要存，而且每个 fp16 数占 2 字节。",
                  "two factors of 2 are missing: both K and V are stored, and each fp16 value takes 2 bytes.")),
        )),
    "q24_gqa": Question(
        24, "number", "ch08_efficiency", ("分组查询注意力（GQA）与多查询注意力（MQA）", "grouped-query and multi-query attention"),
        lambda: 64 / 8, wrong_values=(
            (lambda: 64, Note("GQA 还保留着 8 组 K/V 头，不是只有 1 组（那是 MQA）。",
                              "GQA still keeps 8 K/V heads, not 1 (that would be MQA).")),
            (lambda: 8 / 64, Note("这是缩小后占原来的比例（一个小于 1 的数）；题目要的是缩小的倍数，例如缩小到 1/3 就填 3。",
                                  "that is the share that is left (a number below 1); the question asks for the factor, "
                                  "for example 3 if it shrank to a third.")),
        )),
    "q25_flash": Question(
        25, "choice", "ch08_efficiency", ("FlashAttention 的思路：分块与在线 softmax", "FlashAttention's idea: blocks and an online softmax"),
        _letter("A"), notes={
            "B": Note("FlashAttention 是精确的：结果与普通注意力相同，没有丢掉任何权重。",
                      "FlashAttention is exact: it gives the same result as ordinary attention and drops no weight."),
            "C": Note("运算量仍然是 O(n²)；省下的是显存和内存读写，不是乘加次数。",
                      "the arithmetic is still O(n²); what it saves is memory and memory traffic, not multiply-adds."),
            "D": Note("它与数值精度无关：用同样的精度得到与普通注意力相同的结果。",
                      "it is not about precision: at the same precision it gives the same result as ordinary attention."),
        }),
    "q27_induction": Question(
        27, "choice", "ch09_inside_gpt", ("归纳头：复制上一次出现之后的 token", "induction heads: copy what followed the last occurrence"),
        _letter("B"), notes={
            "A": Note("那是同一个 token 上一次出现的位置；归纳头要的是它后面那个 token（差一个位置）。",
                      "that is where the same token occurred last time; an induction head wants the token after it "
                      "(one position later)."),
            "C": Note("只看前一个 token 的是前一个 token 头（通常在第 0 层），不是归纳头。",
                      "looking at the token just before is a previous-token head (usually in layer 0), not an induction head."),
        }),
    "q28_uniform_prev": Question(
        28, "number", "ch09_inside_gpt", ("头的分数，以及和随机头的比较", "scoring heads, and the random-head baseline"),
        lambda: uniform_prev_token_score(8), rtol=0.01, wrong_values=(
            (lambda: 1 / 8, Note("因果掩码下位置 i 只能看到 i + 1 个位置，不是全部 n 个。",
                                 "under the causal mask position i sees i + 1 positions, not all n.")),
            (lambda: uniform_prev_token_score(8) * 7 / 8,
             Note("位置 0 没有前一个 token，不参与平均。", "position 0 has no previous token and is not averaged over.")),
        )),
    "q29_ablation": Question(
        29, "choices", "ch09_inside_gpt", ("消融：去掉一个头，量损失", "ablation: remove a head, measure the loss"),
        _letters("ABD"), options="ABCDE"),
    "q30_rmsnorm": Question(
        30, "choice", "ch10_llama_block", ("RMSNorm：不减均值、没有偏置", "RMSNorm: no mean, no bias"),
        _letter("A"), notes={
            "B": Note("RMSNorm 保留了可学习的缩放 γ（LLaMA 里叫 weight）。",
                      "RMSNorm keeps the learnable gain γ (called weight in LLaMA)."),
            "D": Note("除以均方根正是 RMSNorm 名字的由来：它保留了这一步。",
                      "dividing by the root mean square is where RMSNorm gets its name: that step stays."),
        }),
    "q31_swiglu_params": Question(
        31, "number", "ch10_llama_block", ("SwiGLU：三个矩阵，d_ff ≈ 8d/3", "SwiGLU: three matrices, d_ff ≈ 8d/3"),
        lambda: swiglu_params(4096, 11008), rtol=0.01, wrong_values=(
            (lambda: 2 * 4096 * 11008, Note("SwiGLU 有三个矩阵（gate、up、down），不是两个。",
                                             "SwiGLU has three matrices (gate, up, down), not two.")),
            (lambda: 2 * 4096 * 4 * 4096, Note("这是 GPT-2 式 d → 4d → d 的前馈层，不是 SwiGLU。",
                                                "that is a GPT-2-style d → 4d → d feed-forward layer, not SwiGLU.")),
        )),
    "q32_gqa_bytes": Question(
        32, "number", "ch10_llama_block", ("分组查询注意力的 KV cache", "the KV cache of grouped-query attention"),
        lambda: gqa_cache_bytes(80, 4096, 8, 128, 2), rtol=0.01, wrong_values=(
            (lambda: gqa_cache_bytes(80, 4096, 64, 128, 2),
             Note("这是每个 query 头都有自己 K/V 的多头注意力；GQA 只存 8 个 K/V 头。",
                  "that is multi-head attention, where every query head has its own K/V; GQA stores only 8 K/V heads.")),
            (lambda: gqa_cache_bytes(80, 4096, 8, 128, 2) / 2,
             Note("少了一个因子 2：K 和 V 都要存（或者每个 fp16 数是 2 字节）。",
                  "a factor of 2 is missing: both K and V are stored (or each fp16 value takes 2 bytes).")),
        )),
    "q33_repeat_kv": Question(
        33, "number", "ch10_llama_block", ("repeat_kv：query 头 i 用 K/V 头 i // n_rep", "repeat_kv: query head i uses K/V head i // n_rep"),
        lambda: repeat_kv_source(6, n_head=8, n_kv_head=2), wrong_values=(
            (lambda: repeat_kv_source(6, n_head=8, n_kv_head=2) + 1,
             Note("头从 0 开始编号：第一个 K/V 头是 0 号。",
                  "heads are numbered from 0: the first K/V head is head 0.")),
            (lambda: 6 % 2, Note("这是 `repeat`（整块重复）的顺序：头 i 用 K/V 头 i % n_kv_head；LLaMA 用的是 "
                                 "`repeat_interleave`，相邻的头共享同一个 K/V 头。",
                                 "that is the order of `repeat` (whole blocks): head i uses K/V head i % n_kv_head; "
                                 "LLaMA uses `repeat_interleave`, where neighbouring heads share one K/V head.")),
        )),
    "q34_cross_attention": Question(
        34, "choice", "ch11_encoder_decoder", ("交叉注意力：query 来自解码器，key/value 来自编码器",
                                               "cross-attention: queries from the decoder, keys and values from the encoder"),
        _letter("A"), notes={
            "B": Note("方向反了：正在写译文的解码器提问（query），被读的源句子（编码器）给出 key 和 value。",
                      "the wrong way round: the decoder, which is writing, asks (queries); the source it reads "
                      "(the encoder) gives the keys and values."),
            "D": Note("那是解码器的自注意力；交叉注意力的 key/value 来自编码器。",
                      "that is the decoder's self-attention; cross-attention takes its keys and values from the encoder."),
        }),
    "q35_padding": Question(
        35, "choice", "ch11_encoder_decoder", ("填充掩码：屏蔽作为 key 的填充位置", "the padding mask: hide the padding positions as keys"),
        _letter("A"), notes={
            "B": Note("屏蔽行只影响填充位置自己的输出；真实 token 仍然会读到填充。",
                      "hiding the rows only changes the padding's own outputs; real tokens still read the padding."),
            "C": Note("整行都是 −∞ 时 softmax 得到 0/0 = nan；只需要屏蔽列。",
                      "a row of nothing but −∞ gives 0/0 = nan in softmax; hiding the columns is enough."),
            "D": Note("填充的嵌入并不是 0，而且即使是 0，它的分数 0 也会分走 softmax 的一部分权重。",
                      "a padding embedding is not 0, and even a score of 0 would take a share of the softmax weight."),
        }),
    "q36_bert_gpt_t5": Question(
        36, "choices", "ch11_encoder_decoder", ("BERT、GPT 与 T5 各用哪一半", "BERT, GPT and T5: which half each uses"),
        _letters("ABC"), options="ABCDE"),
}


# ---------------------------------------------------------------- checking

def _label(name: str, q: Question) -> str:
    return t(f"第 {q.number} 题（{name}）", f"Question {q.number} ({name})")


def _fail(name: str, q: Question, what: str, note: str | None = None) -> GradingFailure:
    lines = [t(f"{_label(name, q)}：{what}", f"{_label(name, q)}: {what}")]
    if note:
        lines.append(t("  为什么不对：", "  Why not: ") + note)
    lines.append("  " + q.review())
    return GradingFailure("\n".join(lines))


def _matches(value: float, target: float) -> bool:
    return math.isclose(value, target, rel_tol=1e-3, abs_tol=1e-9)


def check(name: str, namespace: dict) -> None:
    """The hidden test of one quiz question, whose answer is the variable
    ``name`` in ``namespace`` (the notebook's globals()): full marks, or a
    failure that names the question and the section to reread, never the
    right option. A missing variable is a failure, not a NameError, so no
    traceback (and no hidden line) reaches the feedback."""
    q = QUESTIONS[name]
    if name not in namespace:
        raise GradingFailure(t(f"{_label(name, q)}：还没有作答——没有找到变量 {name}"
                               "（答案单元格还没有运行，或者运行时出错了）。",
                               f"{_label(name, q)}: not answered — there is no variable {name} "
                               "(the answer cell has not run, or it raised an error)."))
    answer = namespace[name]
    try:
        if q.kind == "choice":
            got = parse_choice(answer, q.options, name)
        elif q.kind == "choices":
            got = parse_choices(answer, q.options, name)
        else:
            got = parse_number(answer, name)
    except AnswerFormError as exc:
        raise GradingFailure(t(f"{_label(name, q)}：答案的格式不对，不能评分。\n  {exc}",
                               f"{_label(name, q)}: the answer has the wrong form and cannot be graded.\n  {exc}")) from None
    key = q.key()
    if q.kind == "choice":
        if got != key:
            note = q.notes.get(got)
            raise _fail(name, q, t(f"选 {got} 不对。", f"{got} is not right."), note.text() if note else None)
    elif q.kind == "choices":
        if got != key:
            raise _fail(name, q, t(f"所选的 {''.join(sorted(got))} 与正确答案不完全一致"
                                   "（多选题要选出所有正确的选项，并且只选正确的）。",
                                   f"your selection {''.join(sorted(got))} is not exactly the set of right options "
                                   "(choose every right option and only those)."))
    else:
        tol = max(q.rtol * abs(key), 1e-9)
        if abs(got - key) > tol:
            note = next((n.text() for fn, n in q.wrong_values if _matches(got, float(fn()))), None)
            allowed = t("必须完全正确", "must be exact") if q.rtol == 0 else \
                t(f"允许的相对误差 ±{q.rtol:.0%}", f"allowed relative error ±{q.rtol:.0%}")
            raise _fail(name, q, t(f"{got:.6g} 不对（{allowed}）。", f"{got:.6g} is not right ({allowed})."), note)
    passed(_label(name, q), 1)
