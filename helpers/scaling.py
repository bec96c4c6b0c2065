"""Numbers behind the sqrt(d_k) argument of chapter 1 (numpy, so they never
stand in for the torch code students write)."""
from __future__ import annotations

import math

import numpy as np


def dot_samples(d_k: int, n: int = 20_000, seed: int = 0) -> np.ndarray:
    """q.k for ``n`` pairs of standard-normal vectors of size ``d_k``."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, d_k), dtype=np.float32)
    k = rng.standard_normal((n, d_k), dtype=np.float32)
    return np.einsum("nd,nd->n", q, k).astype(np.float64)


def _stable_weights(scores: np.ndarray) -> np.ndarray:
    z = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def weight_row(d_k: int, n_keys: int = 16, scaled: bool = False, seed: int = 1) -> np.ndarray:
    """Attention weights of one query over ``n_keys`` random keys."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(d_k)
    k = rng.standard_normal((n_keys, d_k))
    s = k @ q
    if scaled:
        s = s / math.sqrt(d_k)
    return _stable_weights(s)


def jacobian_norm(d_k: int, n_keys: int = 16, scaled: bool = False, trials: int = 200,
                  seed: int = 2) -> float:
    """Mean Frobenius norm of d softmax / d scores: how much gradient can pass."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((trials, 1, d_k))
    k = rng.standard_normal((trials, n_keys, d_k))
    s = (k @ q.transpose(0, 2, 1))[..., 0]
    if scaled:
        s = s / math.sqrt(d_k)
    p = _stable_weights(s)
    jac = np.einsum("ti,ij->tij", p, np.eye(n_keys)) - np.einsum("ti,tj->tij", p, p)
    return float(np.linalg.norm(jac, axis=(1, 2)).mean())


def saturation_ratio(d_k: int) -> float:
    """e^{s} / e^{-s} for a typical score s = sqrt(d_k): the gap softmax sees."""
    return math.exp(2 * math.sqrt(d_k))
