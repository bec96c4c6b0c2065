"""What a failed visible test shows: where the numbers differ, and by how much.

``compare`` judges a tensor against the expected one (shape, then the pattern
of nan and ±inf, then the values, within a tolerance that float32 rounding
explains); ``evidence`` turns its verdict into the lines a student reads: the
largest difference and where it is, and the expected and actual values around
it, aligned column by column, in the notebook's language.

    weights: wrong values.
      largest difference 0.4312 at [2, 1] (tolerance 1e-05 + 1e-04×|expected|)
      [2, :] expected   0.2311   0.4520   0.3169   0.0000   0.0000
             got        0.2311   0.0208   0.3169   0.0000   0.0000
                                 ^^^^^^
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass

import torch

from .i18n import t

WINDOW = 7           # columns shown around the largest difference
WHOLE = 24           # a tensor of at most this many numbers is shown whole


@dataclass(frozen=True)
class Tol:
    """|got − expected| ≤ atol·scale + rtol·|expected|, where scale is the largest
    finite |expected| (at least ``floor``)."""
    rtol: float = 1e-4
    atol: float = 1e-5
    floor: float = 1.0


@dataclass(frozen=True)
class Verdict:
    """The outcome of one comparison; ``problem`` is None when it passed."""
    problem: str | None
    largest: float = 0.0
    where: tuple | None = None
    bound: float = 0.0


def as_f64(x) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach().to("cpu", torch.float64)
    return torch.as_tensor(x, dtype=torch.float64)


def _index(flat: int, shape) -> tuple:
    out = []
    for size in reversed(tuple(shape)):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def shape_text(shape) -> str:
    return str(tuple(shape)).replace(",)", ")")


def kind(x) -> str:
    """A tensor as a student would describe it: 'a tensor of shape (2, 6) float32'."""
    if isinstance(x, torch.Tensor):
        return t(f"形状为 {shape_text(x.shape)} 的 {str(x.dtype).removeprefix('torch.')} 张量",
                 f"a {str(x.dtype).removeprefix('torch.')} tensor of shape {shape_text(x.shape)}")
    return t(f"{type(x).__name__} 类型的值", f"a {type(x).__name__}")


def compare(got, expected, tol: Tol = Tol()) -> Verdict:
    """Shape, then the nan/±inf pattern, then the values."""
    if not isinstance(got, torch.Tensor):
        return Verdict(t(f"应返回 torch.Tensor，实际得到{kind(got)}", f"expected a torch.Tensor, got {kind(got)}"))
    e = as_f64(expected)
    if tuple(got.shape) != tuple(e.shape):
        return Verdict(t(f"形状应为 {shape_text(e.shape)}，实际是 {shape_text(got.shape)}",
                         f"expected shape {shape_text(e.shape)}, got {shape_text(got.shape)}"))
    if e.numel() == 0:
        return Verdict(None)
    g = as_f64(got)
    fe, fg = torch.isfinite(e), torch.isfinite(g)
    odd = (fe != fg) | (~fe & ~fg & ~((e == g) | (e.isnan() & g.isnan())))
    if odd.any():
        where = _index(int(odd.flatten().nonzero()[0]), e.shape)
        n_odd = int(odd.sum())
        return Verdict(t(f"有 {n_odd} 个位置的 nan/inf 和期望不同，第一个在 {list(where)}",
                         f"{n_odd} position(s) differ in nan/inf from the expected, the first at {list(where)}"),
                       float("inf"), where)
    finite = e[fe]
    scale = max(float(finite.abs().max()) if finite.numel() else 0.0, tol.floor)
    diff = torch.where(fe, (g - e).abs(), torch.zeros_like(e))
    bound = tol.atol * scale
    excess = diff - (bound + tol.rtol * e.abs().nan_to_num(posinf=0.0, neginf=0.0))
    flat = int(diff.flatten().argmax())
    largest, where = float(diff.flatten()[flat]), _index(flat, e.shape)
    if (excess > 0).any():
        return Verdict(t("数值不对", "wrong values"), largest, where, bound)
    return Verdict(None, largest, where, bound)


def same(got, expected, tol: Tol = Tol()) -> bool:
    return compare(got, expected, tol).problem is None


# ------------------------------------------------------------------ showing

def _width(s: str) -> int:
    """Columns a string takes in a terminal (CJK characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in s)


def _pad(s: str, width: int) -> str:
    return s + " " * max(0, width - _width(s))


def _cells(values, boolean: bool) -> list[str]:
    """Numbers as text with one format for all, so columns line up."""
    if boolean:
        return ["True" if v else "False" for v in values]
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    if finite and all(v == int(v) and abs(v) < 1e9 for v in finite):
        fmt = "{:.0f}"
    elif finite and (max(abs(v) for v in finite) >= 1e4 or 0 < max(abs(v) for v in finite) < 1e-3):
        fmt = "{:.4g}"
    else:
        fmt = "{:.4f}"
    out = []
    for v in values:
        if v != v:
            out.append("nan")
        elif abs(v) == float("inf"):
            out.append("inf" if v > 0 else "-inf")
        else:
            out.append(fmt.format(v))
    return out


def _labels() -> tuple[str, str]:
    labels = (t("期望", "expected"), t("实际", "got"))
    w = max(_width(label) for label in labels)
    return tuple(_pad(label, w) for label in labels)


def _window(n: int, at: int) -> tuple[int, int]:
    lo = max(0, min(at - WINDOW // 2, n - WINDOW))
    return lo, min(n, lo + WINDOW)


def _bad_rows(e: torch.Tensor, g: torch.Tensor, tol: Tol, bound: float) -> torch.Tensor:
    """For a 2-D slice: which rows hold a difference beyond the tolerance (or a nan/inf mismatch)."""
    fe, fg = torch.isfinite(e), torch.isfinite(g)
    odd = (fe != fg) | (~fe & ~fg & ~((e == g) | (e.isnan() & g.isnan())))
    diff = torch.where(fe & fg, (g - e).abs(), torch.zeros_like(e))
    over = diff > bound + tol.rtol * e.abs().nan_to_num(posinf=0.0, neginf=0.0)
    return (odd | over).any(dim=-1)


def evidence(got, expected, v: Verdict, tol: Tol = Tol()) -> list[str]:
    """The lines under a failed comparison: the largest difference and where, then
    the rows around it (the worst one and up to two more that differ), expected
    above actual, columns aligned, a caret under the worst entry."""
    if not isinstance(got, torch.Tensor) or v.where is None:
        return []
    exp_t = torch.as_tensor(expected)
    e, g = as_f64(exp_t), as_f64(got)
    if tuple(e.shape) != tuple(g.shape):
        return []
    boolean = exp_t.dtype == torch.bool and got.dtype == torch.bool
    lines = []
    if boolean:
        n_diff = int((e != g).sum())
        lines.append(t(f"  有 {n_diff} 个位置不同，第一个在 {list(v.where)}",
                       f"  {n_diff} position(s) differ, the first at {list(v.where)}"))
    elif v.largest != float("inf"):
        if exp_t.is_floating_point():
            rule = t(f"（容差 {v.bound:.0e} + {tol.rtol:.0e}×|期望|）", f" (tolerance {v.bound:.0e} + {tol.rtol:.0e}×|expected|)")
        else:
            rule = ""
        lines.append(t(f"  最大的差是 {number(v.largest)}，在 {list(v.where)}{rule}",
                       f"  largest difference {number(v.largest)} at {list(v.where)}{rule}"))
    if e.dim() == 0:
        lab_e, lab_g = _labels()
        return lines + [f"  {lab_e}  {_cells([float(e)], boolean)[0]}", f"  {lab_g}  {_cells([float(g)], boolean)[0]}"]
    lead = tuple(v.where[:-2]) if e.dim() >= 2 else ()
    e2 = e[lead] if e.dim() >= 2 else e.reshape(1, -1)
    g2 = g[lead] if g.dim() >= 2 else g.reshape(1, -1)
    row = v.where[-2] if e.dim() >= 2 else 0
    col = v.where[-1]
    bad = _bad_rows(e2, g2, tol, v.bound).nonzero().flatten().tolist()
    others = sorted((r for r in bad if r != row), key=lambda r: abs(r - row))[:2]
    rows = sorted([row] + others)
    lo, hi = _window(e2.shape[-1], col)
    cells = {r: (_cells(e2[r, lo:hi].tolist(), boolean), _cells(g2[r, lo:hi].tolist(), boolean)) for r in rows}
    width = max(len(c) for pair in cells.values() for side in pair for c in side)
    names = {r: "[" + "".join(f"{i}, " for i in lead) + (f"{r}, " if e.dim() >= 2 else "")
             + (":" if (lo, hi) == (0, e2.shape[-1]) else f"{lo}:{hi}") + "]" for r in rows}
    name_w = max(len(n) for n in names.values())
    lab_e, lab_g = _labels()
    if hi - lo < e2.shape[-1]:
        lines.append(t(f"  （每行 {e2.shape[-1]} 个数，下面只显示第 {lo}–{hi - 1} 列）",
                       f"  (rows of {e2.shape[-1]} numbers: columns {lo}–{hi - 1} shown)"))
    for r in rows:
        ce, cg = cells[r]
        lines.append(f"  {names[r]:<{name_w}} {lab_e}  " + "  ".join(c.rjust(width) for c in ce))
        lines.append(f"  {'':<{name_w}} {lab_g}  " + "  ".join(c.rjust(width) for c in cg))
        if r == row:
            start = 2 + name_w + 1 + _width(lab_g) + 2 + (col - lo) * (width + 2)
            lines.append(" " * start + "^" * width)
    return lines


def number(v: float) -> str:
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.4g}"


def whole(x) -> str:
    """A small tensor (or any value) on one or a few lines."""
    if isinstance(x, torch.Tensor):
        x = as_f64(x)
        if x.numel() <= WHOLE:
            return str(x.numpy().round(4))
        return kind(x)
    return repr(x)
