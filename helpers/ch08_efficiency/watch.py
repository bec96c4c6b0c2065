"""What an online softmax does while it runs, for the visible test of
exercise 4: the largest tensor it creates (an n×n one means the scores or the
mask were formed whole), and the pieces it cuts out of the keys (blocks of
``block_size``, each read once)."""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree


class LargestTensor(torch.overrides.TorchFunctionMode):
    """``with LargestTensor() as seen: ...`` -- ``seen.numel`` and ``seen.shape`` are those of the
    largest tensor a torch function returned meanwhile (views, which hold no memory, left out)."""

    def __init__(self):
        super().__init__()
        self.numel, self.shape = 0, ()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in pytree.tree_flatten(out)[0]:
            if isinstance(x, torch.Tensor) and not x._is_view() and x.numel() > self.numel:
                self.numel, self.shape = x.numel(), tuple(x.shape)
        return out


class KeyBlocks(torch.overrides.TorchFunctionMode):
    """``with KeyBlocks(k) as cut: ...`` -- ``cut.sizes``: how many keys each piece cut out of ``k``
    holds (slices, split, chunk, narrow; of ``k`` itself, of a same-shaped copy of it, or of its
    transpose), in cutting order; ``cut.starts``: where each piece begins."""

    CUTS = frozenset({"__getitem__", "split", "chunk", "narrow", "tensor_split", "split_with_sizes", "unsafe_split"})

    def __init__(self, k: torch.Tensor):
        super().__init__()
        self.shape = tuple(k.shape)
        self.swapped = self.shape[:-2] + (self.shape[-1], self.shape[-2])
        self.tracked: list[tuple[torch.Tensor, int]] = [(k, -2)]      # (tensor, its token axis)
        self.sizes: list[int] = []
        self.starts: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        src = args[0] if args else None
        axis = next((ax for x, ax in self.tracked if x is src), None) if isinstance(src, torch.Tensor) else None
        if axis is not None:
            cut = getattr(func, "__name__", "") in self.CUTS
            whole = self.shape if axis == -2 else self.swapped
            other = self.swapped if axis == -2 else self.shape
            for x in pytree.tree_flatten(out)[0]:
                if not isinstance(x, torch.Tensor):
                    continue
                shape = tuple(x.shape)
                if shape == whole:
                    self.tracked.append((x, axis))
                elif shape == other and not cut:
                    self.tracked.append((x, -1 if axis == -2 else -2))
                elif (cut and x.dim() == len(whole) and shape[:-2] == whole[:-2]
                      and all(shape[i] == whole[i] for i in (-2, -1) if i != axis)):
                    self.sizes.append(int(shape[axis]))
                    self.starts.append((x.storage_offset() - src.storage_offset()) // (src.stride(axis) or 1))
        return out

    def read_twice(self) -> int | None:
        """Where the first block cut again after another block in between begins (a second pass), if any."""
        seen: set[int] = set()
        last = None
        for start in self.starts:
            if start in seen and start != last:
                return start
            seen.add(start)
            last = start
        return None
