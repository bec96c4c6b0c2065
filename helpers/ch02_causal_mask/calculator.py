"""State of chapter 2's step-through calculator: five tokens, d = 4, fixed
seeded weights, and the labelled matrices of each of the five stages of causal
self-attention. Plain numpy and no drawing, so it is tested without a browser;
``calculator_view`` draws it (as HTML, a matplotlib figure or a widget).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..i18n import t

D = 4
SEED = 1
TOKENS = {"zh": ("猫", "坐", "在", "垫", "子"), "en": ("cat", "sat", "on", "the", "mat")}
N_STAGES = 5
NEG_INF = float("-inf")


def tokens() -> tuple[str, ...]:
    """The sentence in the notebook's language (the numbers are the same in both)."""
    return TOKENS["zh"] if t("zh", "en") == "zh" else TOKENS["en"]


def inputs(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """X (5, 4) and W_Q, W_K, W_V (4, 4), rounded to one decimal so a student
    can redo a product by hand."""
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(0.0, 1.0, (len(TOKENS["zh"]), D)), 1)
    w_q, w_k, w_v = (np.round(rng.normal(0.0, 0.8, (D, D)), 1) for _ in range(3))
    return x, w_q, w_k, w_v


@dataclass(frozen=True)
class Matrix:
    name: str                 # e.g. "Q"
    values: np.ndarray        # (rows, cols); -inf where masked
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    kind: str = "signed"      # "signed" (diverging colours) or "weights" (0..1)


@dataclass(frozen=True)
class Stage:
    number: int               # 1 ... 5
    title: str
    formula: str              # plain text with unicode maths
    note: str
    matrices: tuple[Matrix, ...]
    weights: tuple[Matrix, ...] = ()   # the fixed W_Q, W_K, W_V, shown at stage 1 (rows are input dimensions)


def _mask(n: int) -> np.ndarray:
    return np.tri(n, dtype=bool)          # True on and below the diagonal


def _row_softmax(s: np.ndarray) -> np.ndarray:
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / e.sum(axis=-1, keepdims=True)


def compute(causal: bool = True, seed: int = SEED) -> dict[str, np.ndarray]:
    """Every intermediate matrix: X, Q, K, V, S (scaled scores), M (scores after
    the mask, -inf above the diagonal when ``causal``), A (weights), O (output)."""
    x, *w = inputs(seed)
    q, k, v = (x @ w_i for w_i in w)                      # stage ①
    s = q @ k.T / math.sqrt(D)
    m = np.where(_mask(len(x)), s, NEG_INF) if causal else s.copy()
    a = _row_softmax(m)
    return {"X": x, "W_Q": w[0], "W_K": w[1], "W_V": w[2], "Q": q, "K": k, "V": v, "S": s, "M": m, "A": a,
            "O": a @ v}


def stage(number: int, causal: bool = True, seed: int = SEED) -> Stage:
    """The labelled matrices and formula of stage ``number`` (1 ... 5)."""
    if not 1 <= number <= N_STAGES:
        raise ValueError(f"stage must be 1 ... {N_STAGES}, not {number}")
    r = compute(causal, seed)
    toks = tokens()
    dims = tuple(f"{i + 1}" for i in range(D))
    mat = lambda name, key, cols=dims, kind="signed": Matrix(name, r[key], toks, cols, kind)  # noqa: E731
    on = causal
    if number == 1:
        return Stage(1, t("① 输入投影成 Q、K、V", "① project the input to Q, K, V"),
                     "Q = X·W_Q    K = X·W_K    V = X·W_V",
                     t("每个 token 的 4 维行向量 X 右乘三个不同的 4×4 矩阵（下一行），得到它的查询、键和值"
                       "（掩码还没出场）。例如 Q 的第 1 行第 1 列 = X 的第 1 行 · W_Q 的第 1 列，可以手算核对。",
                       "Each token's 4-d row vector X is multiplied on the right by three different 4×4 matrices "
                       "(next row): its query, key and value (the mask plays no part yet). For instance Q's row 1, "
                       "column 1 = X's row 1 · W_Q's column 1, which you can check by hand."),
                     (mat("X", "X"), mat("Q", "Q"), mat("K", "K"), mat("V", "V")),
                     tuple(Matrix(name, r[name], dims, dims) for name in ("W_Q", "W_K", "W_V")))
    if number == 2:
        return Stage(2, t("② 打分并缩放", "② scores, scaled"), "S = Q·Kᵀ / √d_k = Q·Kᵀ / √4 = Q·Kᵀ / 2",
                     t("第 i 行第 j 列：第 i 个 token 的查询和第 j 个 token 的键有多匹配。",
                       "Row i, column j: how well token i's query matches token j's key."),
                     (mat("S", "S", toks),))
    if number == 3:
        note = (t("右上三角（j > i，未来的 token）被设成 −∞：第 i 行只剩自己和前面的 token。",
                  "The upper-right triangle (j > i, future tokens) is set to −∞: row i keeps only "
                  "itself and the tokens before it.") if on else
                t("掩码关闭：什么都不遮，每个 token 都能看到整句话（BERT 式双向注意力）。",
                  "Mask off: nothing is hidden; every token sees the whole sentence (BERT-style "
                  "bidirectional attention)."))
        formula = "S′ = S + M,  M_ij = 0 (j ≤ i), −∞ (j > i)" if on else "S′ = S"
        return Stage(3, t("③ 因果掩码", "③ causal mask") + ("" if on else t("（已关闭）", " (off)")),
                     formula, note, (mat("S′", "M", toks),))
    if number == 4:
        note = (t("e^−∞ = 0：被遮住的位置权重精确为 0；每行加起来是 1。第一行只剩一个位置……",
                  "e^−∞ = 0: masked positions get exactly 0; every row adds up to 1. The first row "
                  "has only one position left...") if on else
                t("没有 −∞，每个权重都大于 0：每行把 1 分给全部 5 个 token。",
                  "No −∞, so every weight is above 0: each row spreads 1 over all 5 tokens."))
        return Stage(4, t("④ softmax：按行变成权重", "④ softmax: rows become weights"), "A = softmax(S′)  (row-wise)",
                     note, (mat("A", "A", toks, "weights"),))
    return Stage(5, t("⑤ 用权重混合 V", "⑤ weights · V"), "O = A·V",
                 t("每个 token 的新向量是它能看到的那些 token 的值的加权平均。",
                   "Each token's new vector is the weighted average of the values of the tokens it may see."),
                 (mat("A", "A", toks, "weights"), mat("V", "V"), mat("O = A·V", "O")))


def fmt(value: float) -> str:
    """How the calculator prints a number: two decimals, −∞ as −∞."""
    if value == NEG_INF:
        return "−∞"
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text.replace("-", "−")
