"""Chapter 11's task and tools: Arabic numerals -> Chinese numerals, an
encoder-decoder wrapper around the student's layers, its training loop, and
the cross-attention heatmap with its widget.

Nothing here answers an exercise: the layers, the padding mask and greedy
decoding are passed in (they are the student's); the wrapper adds only
embeddings, learned positions, a final norm and the output head.
"""
from __future__ import annotations

import inspect
import random
import time

import torch
from torch import nn

from .i18n import t
from .plots import figure_function
from .runtime import under_nbgrader

# ---------------------------------------------------------------- the task

CN_DIGITS = "零一二三四五六七八九"
CN_UNITS = ("", "十", "百", "千")
MAX_NUMBER = 9999

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
SRC_TOKENS = SPECIALS + tuple("0123456789")
TGT_TOKENS = SPECIALS + tuple(CN_DIGITS + "十百千")
SRC_LEN = 4                     # at most 4 digits
TGT_LEN = 8                     # 九千九百九十九 + <eos>


def to_chinese(n: int) -> str:
    """The standard reading of 0 <= n <= 9999 in Chinese numerals.

    One 零 stands for any run of zeros inside the number, trailing zeros are
    silent, and a leading 一十 is read 十 (10 -> 十, but 110 -> 一百一十)."""
    if not 0 <= n <= MAX_NUMBER or int(n) != n:
        raise ValueError(f"n must be an integer in 0..{MAX_NUMBER}, got {n!r}")
    if n == 0:
        return "零"
    s = str(int(n))
    out, pending_zero = [], False
    for i, ch in enumerate(s):
        place = len(s) - 1 - i
        digit = int(ch)
        if digit == 0:
            pending_zero = True
            continue
        if pending_zero:
            out.append("零")
            pending_zero = False
        if not (digit == 1 and place == 1 and i == 0):   # 十五, not 一十五
            out.append(CN_DIGITS[digit])
        out.append(CN_UNITS[place])
    return "".join(out)


def encode_source(n: int) -> list[int]:
    return [SRC_TOKENS.index(c) for c in str(int(n))]


def encode_target(text: str) -> list[int]:
    return [TGT_TOKENS.index(c) for c in text] + [EOS]


def decode_target(ids) -> str:
    """Characters up to the first <eos> (specials dropped)."""
    out = []
    for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids):
        if i == EOS:
            break
        if i >= len(SPECIALS):
            out.append(TGT_TOKENS[i])
    return "".join(out)


def split_numbers(seed: int = 0, held_out: float = 0.1) -> tuple[list[int], list[int]]:
    """All numbers 0..9999 shuffled with a fixed seed: (train, held-out test)."""
    numbers = list(range(MAX_NUMBER + 1))
    random.Random(seed).shuffle(numbers)
    k = int(len(numbers) * held_out)
    return sorted(numbers[k:]), sorted(numbers[:k])


def make_batch(numbers) -> dict[str, torch.Tensor]:
    """Right-padded tensors for a list of numbers.

    src (B, SRC_LEN) digits, src_lengths (B,), tgt_in (B, TGT_LEN) = <bos> +
    target, tgt_out (B, TGT_LEN) = target + <eos>, both padded with <pad>."""
    B = len(numbers)
    src = torch.full((B, SRC_LEN), PAD, dtype=torch.long)
    tgt_in = torch.full((B, TGT_LEN), PAD, dtype=torch.long)
    tgt_out = torch.full((B, TGT_LEN), PAD, dtype=torch.long)
    lengths = torch.zeros(B, dtype=torch.long)
    for b, n in enumerate(numbers):
        s, y = encode_source(n), encode_target(to_chinese(n))
        src[b, :len(s)] = torch.tensor(s)
        lengths[b] = len(s)
        tgt_out[b, :len(y)] = torch.tensor(y)
        tgt_in[b, 0] = BOS
        tgt_in[b, 1:len(y)] = torch.tensor(y[:-1])
    return dict(src=src, src_lengths=lengths, tgt_in=tgt_in, tgt_out=tgt_out)


# ---------------------------------------------------------------- the model around the student's layers

class Seq2Seq(nn.Module):
    """Embeddings + learned positions, a stack of encoder layers, a stack of
    decoder layers, final LayerNorms (pre-norm stacks need them) and a linear
    head over the target vocabulary.

    ``encode(src, src_mask)`` -> memory (B, n_s, d);
    ``decode(tgt_in, memory, src_mask)`` -> logits (B, n_t, vocabulary)."""

    def __init__(self, encoder_layer, decoder_layer, d: int = 64, h: int = 4, d_ff: int = 128,
                 n_enc: int = 2, n_dec: int = 2):
        super().__init__()
        self.src_embed = nn.Embedding(len(SRC_TOKENS), d)
        self.tgt_embed = nn.Embedding(len(TGT_TOKENS), d)
        self.src_pos = nn.Parameter(torch.randn(SRC_LEN, d) * 0.1)
        self.tgt_pos = nn.Parameter(torch.randn(TGT_LEN + 1, d) * 0.1)
        self.encoder = nn.ModuleList(encoder_layer(d, h, d_ff) for _ in range(n_enc))
        self.decoder = nn.ModuleList(decoder_layer(d, h, d_ff) for _ in range(n_dec))
        self.enc_norm, self.dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
        self.head = nn.Linear(d, len(TGT_TOKENS))

    def encode(self, src, src_mask):
        x = self.src_embed(src) + self.src_pos[:src.shape[1]]
        for layer in self.encoder:
            x = layer(x, src_mask)
        return self.enc_norm(x)

    def decode(self, tgt_in, memory, src_mask):
        y = self.tgt_embed(tgt_in) + self.tgt_pos[:tgt_in.shape[1]]
        for layer in self.decoder:
            y = layer(y, memory, src_mask)
        return self.head(self.dec_norm(y))


def train(model, padding_mask, seconds: float = 60.0, steps: int | None = None, batch_size: int = 128,
          lr: float = 3e-3, seed: int = 0, progress: bool = True) -> dict:
    """Teacher-forced training on the training numbers, for ``seconds`` of wall
    clock (or exactly ``steps`` steps). Returns the loss curve and timing."""
    from tqdm.auto import tqdm

    train_numbers, _ = split_numbers()
    by_length = [[n for n in train_numbers if len(str(n)) == k] for k in range(1, SRC_LEN + 1)]
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)
    losses, start, step = [], time.perf_counter(), 0
    bar = tqdm(total=steps if steps else int(seconds), disable=not progress,
               unit=t("步", "step") if steps else "s", leave=True)
    model.train()
    while True:
        elapsed = time.perf_counter() - start
        if (steps is not None and step >= steps) or (steps is None and elapsed >= seconds):
            break
        frac = step / steps if steps else elapsed / seconds
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * (1 - frac))
        batch = make_batch(_sample(by_length, batch_size, gen))
        src_mask = padding_mask(batch["src_lengths"], SRC_LEN)
        logits = model.decode(batch["tgt_in"], model.encode(batch["src"], src_mask), src_mask)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), batch["tgt_out"].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if steps:
            bar.update(1)
        else:
            bar.n = min(int(time.perf_counter() - start), int(seconds))
            bar.refresh()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    model.eval()
    return dict(losses=losses, steps=step, seconds=time.perf_counter() - start)


def _sample(by_length, batch_size, gen):
    """Numbers with every length (1 to 4 digits) equally likely: there are only
    ten 1-digit numbers, so uniform sampling would hardly ever show them."""
    lengths = torch.randint(len(by_length), (batch_size,), generator=gen).tolist()
    picks = torch.rand(batch_size, generator=gen).tolist()
    return [by_length[k][int(u * len(by_length[k]))] for k, u in zip(lengths, picks)]


def accuracy(model, greedy_decode, padding_mask, numbers, batch_size: int = 500) -> tuple[float, list]:
    """Exact-match accuracy of greedy decoding; also the (number, got) misses."""
    misses = []
    with torch.no_grad():
        for i in range(0, len(numbers), batch_size):
            chunk = numbers[i:i + batch_size]
            batch = make_batch(chunk)
            out = greedy_decode(model, batch["src"], batch["src_lengths"], TGT_LEN, BOS, EOS)
            for n, ids in zip(chunk, out):
                got = decode_target(ids)
                if got != to_chinese(n):
                    misses.append((n, got))
    return 1 - len(misses) / max(1, len(numbers)), misses


# ---------------------------------------------------------------- looking at cross-attention

def cross_attention_maps(model, greedy_decode, padding_mask, n: int):
    """Decode one number and return (text, weights): weights[layer] is
    (heads, n_out, n_digits), what each output character's query gave each
    source digit in that decoder layer's cross-attention.

    The weights are read back from each layer's ``cross_attn`` module (an
    nn.MultiheadAttention) by calling it again with need_weights=True on the
    inputs it was given, so any way of calling it works."""
    batch = make_batch([n])
    src, lengths = batch["src"][:, :len(str(n))], batch["src_lengths"]
    with torch.no_grad():
        ids = greedy_decode(model, src, lengths, TGT_LEN, BOS, EOS)[0]
        text = decode_target(ids)
        n_out = len(text) + 1                                  # the characters and <eos>
        tgt_in = torch.tensor([[BOS] + ids[:n_out - 1].tolist()])
        src_mask = padding_mask(lengths, src.shape[1])
        maps = _recorded_cross_weights(model, lambda: model.decode(tgt_in, model.encode(src, src_mask), src_mask))
    return text, [w[0] for w in maps]


def _recorded_cross_weights(model, run):
    sig = inspect.signature(nn.MultiheadAttention.forward)
    maps, busy = [], [False]

    def hook(module, args, kwargs, output):
        if busy[0]:
            return None
        bound = sig.bind(module, *args, **kwargs)
        bound.arguments.update(need_weights=True, average_attn_weights=False)
        bound.arguments.pop("self")
        busy[0] = True
        try:
            maps.append(module(**bound.arguments)[1].detach())
        finally:
            busy[0] = False
        return None

    handles = [layer.cross_attn.register_forward_hook(hook, with_kwargs=True) for layer in model.decoder]
    try:
        run()
    finally:
        for hd in handles:
            hd.remove()
    return maps


@figure_function
def heatmap_figure(model, greedy_decode, padding_mask, n: int, fig=None):
    """Cross-attention of the last decoder layer, averaged over heads: rows are
    the output characters (and <eos>), columns the source digits."""
    import matplotlib.pyplot as plt

    from . import plots

    plots.setup()
    text, maps = cross_attention_maps(model, greedy_decode, padding_mask, n)
    w = maps[-1].mean(0).numpy()
    if fig is None:
        fig = plt.figure(figsize=(3.2 + 0.5 * w.shape[1], 1.6 + 0.42 * w.shape[0]))
    fig.clear()
    ax = fig.subplots()
    im = ax.imshow(w, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(w.shape[1]), list(str(n)))
    ax.set_yticks(range(w.shape[0]), glyphs(text) + ["<eos>"])
    ax.grid(False)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if w[i, j] > 0.6 else "white")
    ok = text == to_chinese(n)
    ax.set_title(f"{n} → {' '.join(glyphs(text)) if not plots.cjk_font() else text} {'✓' if ok else '✗'}",
                 fontsize=10)
    ax.set_xlabel(plots.label("源数字（key）", "source digit (key)"))
    ax.set_ylabel(plots.label("输出字符（query）", "output character (query)"))
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    return fig


PINYIN = dict(zip(CN_DIGITS + "十百千", ("ling", "yi", "er", "san", "si", "wu", "liu", "qi", "ba", "jiu",
                                            "shi", "bai", "qian")))


def glyphs(text: str) -> list[str]:
    """Characters for figure labels: the Chinese numerals themselves when a
    Chinese font is installed, their pinyin otherwise (never empty boxes)."""
    from . import plots

    if plots.cjk_font():
        return list(text)
    return [PINYIN.get(c, c) for c in text]


def summary_line(n: int, text: str) -> str:
    want = to_chinese(n)
    mark = "✓" if text == want else t(f"✗（正确答案：{want}）", f"✗ (correct: {want})")
    return t(f"{n} → 模型输出 {text} {mark}", f"{n} → model says {text} {mark}")


def explorer(model, greedy_decode, padding_mask, start: int = 1024, examples=(1024, 10, 110, 1005, 2030, 9999)):
    """Type a number (0..9999) or pick one: the model's greedy decoding and the
    heatmap of its last decoder layer's cross-attention."""
    import matplotlib.pyplot as plt

    from .plots import show_widget

    if under_nbgrader():            # graded: the line and the static picture, which the feedback page shows
        print(summary_line(start, cross_attention_maps(model, greedy_decode, padding_mask, start)[0]))
    try:
        if under_nbgrader():
            raise ImportError
        import ipywidgets as W
    except ImportError:
        heatmap_figure(model, greedy_decode, padding_mask, start)
        plt.show()
        return None
    box = W.Text(value=str(start), description=t("数字", "number"), continuous_update=False,
                 layout=W.Layout(width="220px"))
    pick = W.Dropdown(options=[str(e) for e in examples], value=None, description=t("例子", "examples"),
                      layout=W.Layout(width="220px"))
    text, out = W.HTML(), W.Output()

    def redraw(*_):
        raw = box.value.strip()
        if not raw.isdigit() or not 0 <= int(raw) <= MAX_NUMBER:
            text.value = t(f"<b>请输入 0 到 {MAX_NUMBER} 之间的整数</b>", f"<b>type an integer from 0 to {MAX_NUMBER}</b>")
            return
        n = int(raw)
        words, _ = cross_attention_maps(model, greedy_decode, padding_mask, n)
        text.value = f"<b>{summary_line(n, words)}</b>"
        with out:
            out.clear_output(wait=True)
            fig = heatmap_figure(model, greedy_decode, padding_mask, n)
            plt.show()
            plt.close(fig)

    def picked(change):
        if change["new"]:
            box.value = change["new"]

    box.observe(redraw, names="value")
    pick.observe(picked, names="value")
    redraw()
    show_widget(W.VBox([W.HBox([box, pick]), text, out]), heatmap_figure(model, greedy_decode, padding_mask, start))
    return None


@figure_function
def examples_figure(model, greedy_decode, padding_mask, numbers=(1024, 110, 1005, 2030)):
    """The static version of the explorer: a few heatmaps side by side."""
    import matplotlib.pyplot as plt

    from . import plots

    plots.setup()
    fig, axes = plt.subplots(1, len(numbers), figsize=(3.1 * len(numbers), 3.6))
    for ax, n in zip(axes, numbers):
        words, maps = cross_attention_maps(model, greedy_decode, padding_mask, n)
        w = maps[-1].mean(0).numpy()
        im = ax.imshow(w, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(w.shape[1]), list(str(n)))
        ax.set_yticks(range(w.shape[0]), glyphs(words) + ["<eos>"])
        ax.grid(False)
        mark = "✓" if words == to_chinese(n) else "✗"
        ax.set_title(f"{n} → {words if plots.cjk_font() else ' '.join(glyphs(words))} {mark}", fontsize=10)
        ax.set_xlabel(plots.label("源数字", "source digit"))
    axes[0].set_ylabel(plots.label("输出字符", "output character"))
    fig.tight_layout()
    fig.colorbar(im, ax=list(axes), shrink=0.8, label=plots.label("交叉注意力权重", "cross-attention weight"))
    return fig


@figure_function
def mask_patterns_figure():
    """The three attention patterns of an encoder-decoder, for a source of 4
    slots holding 3 real tokens and a target of 5 tokens: encoder
    self-attention (padding hidden), decoder self-attention (causal) and
    cross-attention (padding hidden). Bright = may attend."""
    import matplotlib.pyplot as plt

    from . import plots

    plots.setup()
    src, tgt = ["3", "0", "7", "<pad>"], ["<bos>"] + glyphs("三百零七")
    real = [True, True, True, False]
    enc = [[real[j] for j in range(4)] for _ in range(4)]
    causal = [[j <= i for j in range(5)] for i in range(5)]
    cross = [[real[j] for j in range(4)] for _ in range(5)]
    panels = [(enc, src, src, plots.label("编码器自注意力：双向 + 填充掩码", "encoder self-attention: both ways + padding")),
              (causal, tgt, tgt, plots.label("解码器自注意力：因果掩码", "decoder self-attention: causal")),
              (cross, tgt, src, plots.label("交叉注意力：解码器查编码器", "cross-attention: decoder reads encoder"))]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (m, rows, cols, title) in zip(axes, panels):
        ax.imshow([[1.0 if v else 0.0 for v in r] for r in m], cmap="Blues", vmin=0, vmax=1.3)
        ax.set_xticks(range(len(cols)), cols)
        ax.set_yticks(range(len(rows)), rows)
        ax.grid(False)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(plots.label("key（被关注的位置）", "key (attended to)"))
    axes[0].set_ylabel(plots.label("query", "query"))
    from matplotlib.patches import Patch
    cmap = plt.get_cmap("Blues")
    fig.legend(handles=[Patch(facecolor=cmap(1 / 1.3), label=plots.label("可以关注", "may attend")),
                        Patch(facecolor=cmap(0.0), edgecolor="#767676", label=plots.label("被遮住", "hidden"))],
               loc="lower center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


@figure_function
def loss_figure(losses):
    import matplotlib.pyplot as plt

    from . import plots

    plots.setup()
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(losses)
    ax.set_yscale("log")
    ax.set_xlabel(plots.label("训练步", "training step"))
    ax.set_ylabel(plots.label("交叉熵（对数坐标）", "cross-entropy (log scale)"))
    ax.set_title(plots.label("数字 → 中文数字：训练损失", "numerals → Chinese numerals: training loss"))
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------- what the model gets wrong

def from_chinese(text: str) -> int | None:
    """The number a string of Chinese numerals reads as, also when it is not
    the standard form (一千零三十 -> 1030, 六千零 -> 6000); None if it is no
    number at all (a unit with nothing to multiply, a unit out of order)."""
    total, digit, last_unit = 0, None, 10_000
    for c in text:
        if c in CN_DIGITS:
            digit = CN_DIGITS.index(c)
        elif c in "十百千":
            unit = 10 ** (CN_UNITS.index(c))
            if unit >= last_unit:
                return None
            if digit is None:
                if c != "十" or total:            # only a leading 十 may stand alone (十五)
                    return None
                digit = 1
            total += digit * unit
            digit, last_unit = None, unit
        else:
            return None
    return total + (digit or 0) if text else None


def zero_pattern(n: int) -> str:
    """Where the zeros of a number are: 1003 -> 'X00X', 6050 -> 'X0X0', 25 -> 'XX'."""
    return "".join("0" if c == "0" else "X" for c in str(int(n)))


@torch.no_grad()
def error_table(model, greedy_decode, padding_mask, numbers=None) -> dict:
    """Greedy-decode ``numbers`` (default: all of 0..9999, training numbers
    included) and group the misses by ``zero_pattern``. Returns
    {pattern: {"numbers": n, "wrong": k, "wrong_train": k_train, "misses": [(number, output), ...]}}."""
    numbers = list(range(MAX_NUMBER + 1)) if numbers is None else list(numbers)
    train_numbers = set(split_numbers()[0])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                  # small batches of tiny matrices: one thread is fastest
    try:
        _, misses = accuracy(model, greedy_decode, padding_mask, numbers, batch_size=2000)
    finally:
        torch.set_num_threads(threads)
    table: dict = {}
    for n in numbers:
        row = table.setdefault(zero_pattern(n), {"numbers": 0, "wrong": 0, "wrong_train": 0, "misses": []})
        row["numbers"] += 1
    for n, got in misses:
        row = table[zero_pattern(n)]
        row["wrong"] += 1
        row["wrong_train"] += n in train_numbers
        row["misses"].append((n, got))
    return table


def print_error_table(table: dict, examples: int = 4) -> None:
    """One line per zero pattern that has a miss, then the patterns without any."""
    wrong = sum(r["wrong"] for r in table.values())
    total = sum(r["numbers"] for r in table.values())
    in_train = sum(r["wrong_train"] for r in table.values())
    print(t(f"{total} 个数里错了 {wrong} 个，其中 {in_train} 个在训练集里",
            f"{wrong} wrong out of {total} numbers, {in_train} of them in the training set"))
    print(t("模式    个数  错的  训练集里错的  例子（模型的输出 = 它读作的数）",
            "pattern  numbers wrong  of them trained  examples (the model's output = the number it reads as)"))
    for pattern, row in sorted(table.items(), key=lambda kv: (-kv[1]["wrong"], kv[0])):
        if not row["wrong"]:
            continue
        picked, kinds = [], set()             # first one miss of each kind of output, then the rest in order
        for n, got in row["misses"]:
            kind = zero_pattern(from_chinese(got)) if from_chinese(got) is not None else "?"
            if kind not in kinds:
                kinds.add(kind)
                picked.append((n, got))
        picked += [m for m in row["misses"] if m not in picked]
        cases = [f"{n} → {got} = {from_chinese(got) if from_chinese(got) is not None else '?'}"
                 for n, got in sorted(picked[:examples])]
        print(f"{pattern:7s} {row['numbers']:6d} {row['wrong']:5d} {row['wrong_train']:9d}       " + "; ".join(cases))
    clean = sorted((p for p, r in table.items() if not r["wrong"]), key=lambda p: (len(p), p))
    print(t("全对的模式：", "patterns without a miss: ") + " ".join(clean))
    x00x = table.get("X00X", {}).get("misses", [])
    if x00x:
        tens = sum(1 for n, got in x00x if (from_chinese(got) or 0) // 10 % 10 == n % 10)
        print(t(f"X00X 的 {len(x00x)} 个错误里，有 {tens} 个把最后一位数字放在了十位上",
                f"of the {len(x00x)} misses shaped X00X, {tens} put the last digit in the tens place"))
