"""Measuring what attention costs: timings of the O(n²) and O(n) parts of a
block, a tracker of the memory held by tensors, decode speed with and without
a KV cache, and the figures of chapter 8.

Every number here is measured when it is called (nothing is stored)."""
from __future__ import annotations

import contextlib
import math
import time
import weakref

import torch
import torch.utils._pytree as pytree

from ..i18n import t
from ..plots import figure_function, label, setup

# ---------------------------------------------------------------- timing

@contextlib.contextmanager
def one_thread():
    """Run torch on one thread inside the block: timings of small operations
    are steadier, and a busy machine does not make them many times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def best_time(fn, repeat: int = 3) -> float:
    """The fastest of ``repeat`` runs of ``fn()``, in seconds (after one warm-up)."""
    fn()
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def fit_slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x): the p in y ∝ x^p."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    num = sum((a - mx) * (b - my) for a, b in zip(lx, ly))
    den = sum((a - mx) ** 2 for a in lx)
    return num / den if den else float("nan")


def score_cost_sweep(ns, d: int = 64, repeat: int = 2, seed: int = 0) -> dict:
    """For each n: the time of scores + softmax + PV (one head of width d) and
    of the per-token parts of a block of width d (Q, K, V, O projections and a
    d → 4d → d FFN), and the bytes of the n×n score matrix."""
    g = torch.Generator().manual_seed(seed)
    w_qkv, w_o = torch.randn(d, 3 * d, generator=g), torch.randn(d, d, generator=g)
    w_1, w_2 = torch.randn(d, 4 * d, generator=g), torch.randn(4 * d, d, generator=g)
    rows = []
    with torch.no_grad(), one_thread():
        for n in ns:
            x = torch.randn(n, d, generator=g)
            q, k, v = torch.randn(3, n, d, generator=g)

            def scores(q=q, k=k, v=v):
                s = q @ k.T / math.sqrt(d)
                return torch.softmax(s, dim=-1) @ v

            def linear(x=x):
                h = (x @ w_qkv)[:, :d] @ w_o
                return torch.relu(h @ w_1) @ w_2

            with PeakMemory() as pm:
                scores()
            rows.append({"n": int(n), "t_scores": best_time(scores, repeat), "t_linear": best_time(linear, repeat),
                         "score_bytes": n * n * 4, "peak_scores": pm.peak})
    out = {"d": d, "rows": rows}
    if len(rows) >= 2:
        out["slope_scores"] = fit_slope([r["n"] for r in rows], [r["t_scores"] for r in rows])
        out["slope_linear"] = fit_slope([r["n"] for r in rows], [r["t_linear"] for r in rows])
        out["slope_memory"] = fit_slope([r["n"] for r in rows], [r["peak_scores"] for r in rows])
    else:
        out["slope_scores"] = out["slope_linear"] = out["slope_memory"] = float("nan")
    return out


def elementwise_share(n: int = 512, d: int = 64, repeat: int = 3, seed: int = 0) -> float:
    """The fraction of the time of scores + softmax + PV (one head, width d)
    that is not the two matrix products: the scaling and softmax's passes over
    the n×n matrix, which a FLOP count of the matrix products leaves out."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, n, d, generator=g)
    with torch.no_grad(), one_thread():
        products = best_time(lambda: (q @ k.T) @ v, repeat)
        whole = best_time(lambda: torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v, repeat)
    return max(0.0, 1.0 - products / whole)


def crossover(sweep: dict) -> int | None:
    """The first n of a sweep at which the scores took longer than the projections and FFN."""
    return next((r["n"] for r in sweep["rows"] if r["t_scores"] > r["t_linear"]), None)


def _plain(ax, x=True) -> None:
    """Tick labels as plain numbers (128, 0.25) instead of powers of two."""
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda val, _: f"{val:g}")
    ax.yaxis.set_major_formatter(fmt)
    if x:
        ax.xaxis.set_major_formatter(fmt)


@figure_function
def cost_figure(sweep: dict):
    import matplotlib.pyplot as plt

    setup()
    ns = [r["n"] for r in sweep["rows"]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    ax1.loglog(ns, [r["t_scores"] * 1e3 for r in sweep["rows"]], "o-", base=2,
               label=label(f"分数 + softmax + PV（斜率 {sweep['slope_scores']:.2f}）",
                           f"scores + softmax + PV (slope {sweep['slope_scores']:.2f})"))
    ax1.loglog(ns, [r["t_linear"] * 1e3 for r in sweep["rows"]], "s-", base=2,
               label=label(f"投影 + FFN（斜率 {sweep['slope_linear']:.2f}）",
                           f"projections + FFN (slope {sweep['slope_linear']:.2f})"))
    cross = 6 * sweep["d"]
    if ns[0] <= cross <= ns[-1]:
        ax1.axvline(cross, color="gray", ls="--", lw=1)
        ax1.text(cross, ax1.get_ylim()[0], label(" n = 6d：理论上的交叉点", " n = 6d: crossover in theory"),
                 va="bottom", fontsize=8, color="gray")
    ax1.set_xlabel("n")
    ax1.set_ylabel(label("时间（毫秒）", "time (ms)"))
    ax1.set_title(label(f"时间，d = {sweep['d']}", f"time, d = {sweep['d']}"))
    ax1.legend(fontsize=8, loc="upper left")
    _plain(ax1)
    ax2.loglog(ns, [r["peak_scores"] / 2**20 for r in sweep["rows"]], "o-", base=2,
               label=label(f"实测峰值（斜率 {sweep['slope_memory']:.2f}）", f"measured peak (slope {sweep['slope_memory']:.2f})"))
    ax2.loglog(ns, [r["score_bytes"] / 2**20 for r in sweep["rows"]], "k:", base=2,
               label=label("4n² 字节（一个 float32 分数矩阵）", "4n² bytes (one float32 score matrix)"))
    ax2.set_xlabel("n")
    ax2.set_ylabel("MiB")
    ax2.set_title(label("分数计算时张量占用的内存", "memory held by tensors while scoring"))
    ax2.legend(fontsize=8, loc="upper left")
    _plain(ax2)
    fig.tight_layout()
    return fig


def show_cost_figure(sweep: dict) -> None:
    import matplotlib.pyplot as plt

    cost_figure(sweep)
    plt.show()


# ---------------------------------------------------------------- memory

class PeakMemory(torch.overrides.TorchFunctionMode):
    """Track the bytes held by the tensors created inside the block.

    Each new tensor that a torch function returns (views excluded: they share
    memory) adds its bytes while it is alive; ``peak`` is the largest total
    seen, ``largest`` the shape of the biggest single tensor. Scratch memory
    used inside one torch function is not seen."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self.largest: tuple = ()
        self._largest_bytes = 0
        self._held: dict[int, int] = {}          # storage address -> bytes

    def _free(self, ptr: int) -> None:
        self.live -= self._held.pop(ptr, 0)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in pytree.tree_flatten(out)[0]:
            if not isinstance(x, torch.Tensor) or x._is_view():
                continue
            ptr = x.untyped_storage().data_ptr()
            nbytes = x.untyped_storage().nbytes()
            if nbytes == 0 or ptr in self._held:     # in-place ops hand back memory already counted
                continue
            self._held[ptr] = nbytes
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            if nbytes > self._largest_bytes:
                self._largest_bytes, self.largest = nbytes, tuple(x.shape)
            weakref.finalize(x, self._free, ptr)
        return out


def memory_sweep(ns, online_fn, d: int = 64, block_size: int = 128, seed: int = 0) -> dict:
    """Peak bytes held by tensors for full attention and for ``online_fn`` (the
    student's online softmax), one head of width d, for each n."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    with torch.no_grad(), one_thread():
        for n in ns:
            q, k, v = torch.randn(3, n, d, generator=g)
            with PeakMemory() as full:
                torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v
            with PeakMemory() as online:
                online_fn(q, k, v, block_size)
            rows.append({"n": int(n), "full": full.peak, "online": online.peak,
                         "largest_online": online.largest})
    ns_ = [r["n"] for r in rows]
    slopes = {key: fit_slope(ns_, [r[key] for r in rows]) if len(rows) > 1 else float("nan")
              for key in ("full", "online")}
    return {"d": d, "block_size": block_size, "rows": rows, "slopes": slopes}


@figure_function
def memory_figure(mem: dict):
    import matplotlib.pyplot as plt

    setup()
    ns = [r["n"] for r in mem["rows"]]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.loglog(ns, [r["full"] / 2**20 for r in mem["rows"]], "o-", base=2,
              label=label(f"完整 softmax（斜率 {mem['slopes']['full']:.2f}）", f"full softmax (slope {mem['slopes']['full']:.2f})"))
    ax.loglog(ns, [r["online"] / 2**20 for r in mem["rows"]], "s-", base=2,
              label=label(f"在线 softmax，块 {mem['block_size']}（斜率 {mem['slopes']['online']:.2f}）",
                          f"online softmax, blocks of {mem['block_size']} (slope {mem['slopes']['online']:.2f})"))
    ax.set_xlabel("n")
    ax.set_ylabel(label("峰值内存（MiB）", "peak memory (MiB)"))
    ax.set_title(label(f"注意力的峰值内存，d = {mem['d']}", f"peak memory of attention, d = {mem['d']}"))
    ax.legend(fontsize=8, loc="upper left")
    _plain(ax)
    fig.tight_layout()
    return fig


def show_memory_figure(mem: dict) -> None:
    import matplotlib.pyplot as plt

    memory_figure(mem)
    plt.show()


# ---------------------------------------------------------------- decoding

def decode_speed(layers: list[dict], n_tokens: int, full_fn, step_fn, cache_cls, seed: int = 0) -> dict:
    """Generate ``n_tokens`` vectors with a stack of attention layers (residual
    connections, each output fed back as the next input), once with
    ``step_fn`` and a ``cache_cls`` cache, once recomputing everything with
    ``full_fn``; time every step and compare the outputs."""
    d = layers[0]["w_q"].shape[0]
    g = torch.Generator().manual_seed(seed)
    first = torch.randn(1, 1, d, generator=g)

    def next_input(y):
        return y / y.norm(dim=-1, keepdim=True) * math.sqrt(d)

    with torch.no_grad(), one_thread():
        # with the cache
        cache = cache_cls(len(layers))
        x_t, outs_c, times_c = first, [], []
        for _ in range(n_tokens):
            t0 = time.perf_counter()
            h = x_t
            for i, w in enumerate(layers):
                h = h + step_fn(h, w, cache, i)
            times_c.append(time.perf_counter() - t0)
            outs_c.append(h)
            x_t = next_input(h)
        # recomputing everything at every step
        xs, outs_f, times_f = first, [], []
        for _ in range(n_tokens):
            t0 = time.perf_counter()
            h = xs
            for w in layers:
                h = h + full_fn(h, w)
            times_f.append(time.perf_counter() - t0)
            outs_f.append(h[:, -1:])
            xs = torch.cat([xs, next_input(h[:, -1:])], dim=1)
    max_diff = max(float((a - b).abs().max()) for a, b in zip(outs_c, outs_f))
    tps_c, tps_f = n_tokens / sum(times_c), n_tokens / sum(times_f)
    return {"n_tokens": n_tokens, "times_cached": times_c, "times_full": times_f, "max_diff": max_diff,
            "tokens_per_s_cached": tps_c, "tokens_per_s_full": tps_f, "speedup": tps_c / tps_f}


def _windows(times, width):
    """(position at the end of each window, tokens/s from the window's median
    step time: a busy machine's hiccups do not hide the trend)."""
    xs, ys = [], []
    for end in range(width, len(times) + 1, width):
        xs.append(end)
        ys.append(1.0 / sorted(times[end - width:end])[width // 2])
    return xs, ys


@figure_function
def decode_figure(speed: dict):
    import matplotlib.pyplot as plt

    setup()
    width = max(1, speed["n_tokens"] // 16)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for key, name, style in (("times_cached", label("KV Cache", "KV cache"), "o-"),
                             ("times_full", label("每步重算", "recompute every step"), "s-")):
        xs, ys = _windows(speed[key], width)
        ax.plot(xs, ys, style, ms=4, label=name)
    ax.set_yscale("log")
    ax.set_xlabel(label("已生成的 token 数", "tokens generated so far"))
    ax.set_ylabel(label("token/s（每 %d 个 token 取中位数）" % width, "tokens/s (median over %d tokens)" % width))
    ax.set_title(label(f"解码速度：KV Cache 快 {speed['speedup']:.1f} 倍", f"decoding speed: the KV cache is {speed['speedup']:.1f}× faster"))
    ax.legend(fontsize=8)
    _plain(ax, x=False)
    fig.tight_layout()
    return fig


def show_decode_figure(speed: dict) -> None:
    import matplotlib.pyplot as plt

    decode_figure(speed)
    plt.show()


# ---------------------------------------------------------------- KV cache size

# name, n_layer, d_model, n_head, n_kv_head (the published LLaMA-2 shapes)
MODELS = (
    ("LLaMA-2 7B", 32, 4096, 32, 32),
    ("LLaMA-2 70B", 80, 8192, 64, 8),
)


def kv_rows(kv_bytes_fn, n_tokens: int = 4096):
    """(model, variant, n_kv_head, bytes, published) for MHA, GQA and MQA
    versions of MODELS; ``published`` marks the model's real configuration."""
    rows = []
    for name, n_layer, d, n_head, n_kv in MODELS:
        variants = [("MHA", n_head)] + ([("GQA", n_kv)] if n_kv != n_head else [("GQA", n_head // 4)]) + [("MQA", 1)]
        for kind, kv in variants:
            rows.append((name, kind, kv, kv_bytes_fn(n_layer, n_tokens, d, n_head, kv), kv == n_kv))
    return rows


def show_kv_table(kv_bytes_fn, n_tokens: int = 4096) -> None:
    print(t(f"{n_tokens} 个 token，fp16，batch 1；* 是模型实际采用的配置", f"{n_tokens} tokens, fp16, batch 1; * marks the configuration the model really uses"))
    print(t("模型          注意力   KV 头数    缓存 (GiB)", "model         kind    KV heads   cache (GiB)"))
    for name, kind, kv, b, real in kv_rows(kv_bytes_fn, n_tokens):
        print(f"{name:<14}{kind:<8}{kv:>8}{b / 2**30:>14.3f} {'*' if real else ''}")


@figure_function
def kv_figure(kv_bytes_fn):
    import matplotlib.pyplot as plt

    setup()
    ctx = [2**i for i in range(10, 18)]            # 1K ... 128K tokens
    name, n_layer, d, n_head, n_kv = MODELS[1]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for kind, kv, style in (("MHA", n_head, "o-"), ("GQA", n_kv, "s-"), ("MQA", 1, "^-")):
        ax.loglog(ctx, [kv_bytes_fn(n_layer, c, d, n_head, kv) / 2**30 for c in ctx], style, base=2,
                  label=label(f"{kind}（{kv} 个 KV 头）", f"{kind} ({kv} KV heads)"))
    gpu = 80e9 / 2**30
    ax.axhline(gpu, color="gray", ls="--", lw=1)
    ax.text(ctx[0], gpu, label(" 一张 80 GB 显卡的全部显存", " all the memory of one 80 GB GPU"), va="bottom", fontsize=8,
            color="gray")
    ax.set_xticks(ctx)
    ax.set_xticklabels([f"{c // 1024}K" for c in ctx])
    ax.set_xlabel(label("上下文长度（token）", "context length (tokens)"))
    ax.set_ylabel(label("KV Cache（GiB）", "KV cache (GiB)"))
    ax.set_title(label(f"{name} 的 KV Cache（fp16，batch 1）", f"KV cache of {name} (fp16, batch 1)"))
    ax.legend(fontsize=8)
    _plain(ax, x=False)
    fig.tight_layout()
    return fig


def show_kv_figure(kv_bytes_fn) -> None:
    import matplotlib.pyplot as plt

    kv_figure(kv_bytes_fn)
    plt.show()
