"""The attention sublayer that chapter 5's Block is built from, given read-only.

It wraps PyTorch's own ``nn.MultiheadAttention`` (causal), so that chapter 5
is about what goes *around* attention (LayerNorm, residuals, the feed-forward
network). Chapter 5 hands it out in its own folder, next to the notebook
(``from block_attention import CausalAttention``), after chapter 3, whose
exercise is the same attention written by hand.
"""
from __future__ import annotations

import torch
from torch import nn


class CausalAttention(nn.Module):
    """Causal multi-head self-attention: ``(B, N, d) -> (B, N, d)``.

    Parameters: ``mha.in_proj_weight`` (3d, d) and ``mha.in_proj_bias`` (3d,)
    for Q, K, V; ``mha.out_proj`` (d -> d): 4d^2 + 4d in all."""

    def __init__(self, d: int, h: int):
        super().__init__()
        if d % h:
            raise ValueError(f"d = {d} is not divisible by h = {h}")
        self.d, self.h = d, h
        self.mha = nn.MultiheadAttention(d, h, bias=True, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[-2]
        # nn.MultiheadAttention's boolean mask means the opposite of this
        # course's convention: True there = *blocked* (here: j > i).
        blocked = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
        out, _ = self.mha(x, x, x, attn_mask=blocked, need_weights=False)
        return out
