"""What a function allocates while it runs: the largest tensor any torch
function returns inside the block (a formula in d creates no weight matrix;
a model built to be counted does)."""
from __future__ import annotations

import torch


class LargestTensor(torch.overrides.TorchFunctionMode):
    """``with LargestTensor() as seen: f()`` -- then ``seen.numel`` and ``seen.shape``
    are those of the largest tensor created meanwhile (0 and () when none)."""

    def __init__(self):
        super().__init__()
        self.numel, self.shape = 0, ()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.numel() > self.numel:
            self.numel, self.shape = out.numel(), tuple(out.shape)
        return out
