"""Chapter 11's task and tools: Arabic numerals -> Chinese numerals, an
encoder-decoder wrapper around the student's layers, the cross-attention
heatmap with its widget, and a stand-in model for testing greedy decoding.

Nothing here answers an exercise: the layers, the padding mask and greedy
decoding are passed in (they are the student's); the wrapper adds only
embeddings, learned positions, a final norm and the output head. The training
loop (an earlier chapter's exercise) comes with the chapter's own folder
(``numbers_training.py``).
"""
from __future__ import annotations

import inspect
import random

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


@torch.no_grad()
def accuracy(model, greedy_decode, padding_mask, numbers, batch_size: int = 500) -> tuple[float, list]:
    """Exact-match accuracy of greedy decoding; also the (number, got) misses."""
    misses = []
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
    print(t("模式    个数  错的  其中在训练集里的  例子（模型的输出 = 它读作的数）",
            "pattern  numbers wrong  in the training set  examples (the model's output = the number it reads as)"))
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


# ---------------------------------------------------------------- stand-in models for the tests (no answers)

class StandIn:
    """A fixed 'model' with the chapter's interface, for testing greedy decoding
    without training anything. Its next token depends on the last token fed in,
    on the position and on the real source tokens (so a decoder that ignores its
    own outputs, reads the wrong position or skips the padding mask gives other
    tokens); sequence b stops after a number of steps set by its source. It
    counts the calls of ``encode`` and keeps the mask given to every ``decode``."""

    V = 13

    def __init__(self, eos: int, bos: int):
        self.eos, self.bos = eos, bos
        self.tokens = [i for i in range(self.V) if i not in (eos, bos)]
        self.encodes = 0
        self.decode_masks: list = []

    def encode(self, src, src_mask):
        self.encodes += 1
        if not isinstance(src_mask, torch.Tensor) or src_mask.dtype != torch.bool or src_mask.shape != src.shape:
            raise ValueError(f"encode(src, src_mask): src_mask must be a bool tensor of shape {tuple(src.shape)}, "
                             f"got {getattr(src_mask, 'dtype', type(src_mask).__name__)} "
                             f"{tuple(getattr(src_mask, 'shape', ()))}")
        return torch.where(src_mask, src, torch.zeros_like(src)).double()[..., None]       # (B, n_s, 1)

    def decode(self, tgt, memory, src_mask):
        self.decode_masks.append(src_mask.clone() if isinstance(src_mask, torch.Tensor) else src_mask)
        key = memory[..., 0].sum(1).long()                                             # (B,)
        stop = 2 + key % 5                                                             # steps until <eos>
        pos = torch.arange(tgt.shape[1])[None, :]
        nxt = torch.tensor(self.tokens)[(tgt * 3 + key[:, None] + 2 * pos) % len(self.tokens)]
        nxt = torch.where(pos == stop[:, None] - 1, torch.full_like(nxt, self.eos), nxt)
        return torch.nn.functional.one_hot(nxt, self.V).double() * 4 - 2              # (B, n_t, V)


class BigramModel:
    """A 'model' whose next-token log-probabilities depend only on the last
    token: row t of ``table`` (V × V, each row a log-probability distribution).
    The source is ignored. Made for the beam-search challenge: with a table where
    the most likely first token leads nowhere good, greedy and beam search differ."""

    def __init__(self, table: torch.Tensor):
        self.table = torch.as_tensor(table, dtype=torch.float64)

    def encode(self, src, src_mask):
        return torch.zeros(src.shape[0], src.shape[1], 1, dtype=torch.float64)

    def decode(self, tgt, memory, src_mask):
        return self.table[tgt]                                                         # (B, n_t, V)


def load_layer(layer, state: dict) -> None:
    """Copy ``state`` (a probe's parameters: norm*, self_attn.*, cross_attn.*, and
    the FFN's two linear layers as ffn.0.* and ffn.2.*) into a student's encoder
    or decoder layer: the attention and norm parameters by name, the FFN's
    linear layers in order, whatever the Sequential calls them."""
    linears = [m for m in layer.ffn.modules() if isinstance(m, nn.Linear)]
    own = dict(layer.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            if name.startswith("ffn."):
                _, index, what = name.split(".")
                target = getattr(linears[0 if index == "0" else -1], what)
            else:
                target = own[name]
            target.copy_(value.to(target.dtype))


def check_layout(layer, decoder: bool, d: int, h: int, d_ff: int) -> None:
    """Exercises 3 and 4's visible test: the submodules the exercise names, with
    their settings; a failure names the mistake it sees, with the grader's key."""
    from .checks import expect_true
    attns, norms = (("self_attn", "cross_attn"), ("norm1", "norm2", "norm3")) if decoder else (("self_attn",), ("norm1", "norm2"))
    what = type(layer).__name__
    missing = [n for n in attns + norms + ("ffn",) if not isinstance(getattr(layer, n, None), nn.Module)]
    expect_true(not missing, t(f"{what} 没有子模块 {missing}。", f"{what} has no submodule {missing}."), key="layer_attribute_names")
    for name in attns:
        a = getattr(layer, name)
        expect_true(isinstance(a, nn.MultiheadAttention), t(f"{what}.{name} 应是 nn.MultiheadAttention，实际是 "
                                                            f"{type(a).__name__}。", f"{what}.{name} should be an "
                                                            f"nn.MultiheadAttention, not a {type(a).__name__}."))
        expect_true(a.batch_first, t(f"{what}.{name}.batch_first 是 False。", f"{what}.{name}.batch_first is False."),
                    key="mha_not_batch_first")
        expect_true(not a.dropout, t(f"{what}.{name} 的 dropout 是 {a.dropout}。", f"{what}.{name} has dropout {a.dropout}."),
                    key="dropout_left_in")
    drops = [m.p for m in layer.modules() if isinstance(m, nn.Dropout) and m.p]
    expect_true(not drops, t(f"{what} 里有 p = {drops[:1]} 的 nn.Dropout。", f"{what} holds an nn.Dropout with p = {drops[:1]}."),
                key="dropout_left_in")
    shapes = [tuple(m.weight.shape) for m in layer.ffn.modules() if isinstance(m, nn.Linear)]
    expect_true(shapes == [(d_ff, d), (d, d_ff)], t(f"{what}.ffn 里线性层的权重形状应为 {[(d_ff, d), (d, d_ff)]}，实际是 {shapes}。",
                                                  f"the weights of {what}.ffn's linear layers should have shapes "
                                                  f"{[(d_ff, d), (d, d_ff)]}, got {shapes}."), key="ffn_width_not_d_ff")
    count = sum(q.numel() for q in layer.parameters())
    want = len(attns) * (4 * d * d + 4 * d) + len(norms) * 2 * d + 2 * d * d_ff + d_ff + d
    expect_true(count == want, t(f"{what}({d}, {h}, {d_ff}) 应有 {want} 个参数，实际是 {count}。",
                                 f"{what}({d}, {h}, {d_ff}) should have {want} parameters, got {count}."), key="layer_parameters")


def print_draws(drawn, table: dict) -> None:
    """What training showed the model of the four-digit numbers: how many of the
    examples it drew had four digits, how many four-digit numbers the training
    set holds and how many of them were never drawn; and, of the misses
    (``error_table``) in the training set, how many have four digits and how
    many of those were never drawn."""
    train = set(split_numbers()[0])
    four_train = {n for n in train if n >= 1000}
    four_drawn = [n for n in drawn if n >= 1000]
    seen = set(four_drawn)
    never = len(four_train - seen)
    misses = [n for row in table.values() for n, _ in row["misses"] if n in train]
    four_misses = [n for n in misses if n >= 1000]
    print(t(f"训练时抽了 {len(drawn)} 个例子，其中 {len(four_drawn)} 个是四位数；训练集里有 {len(four_train)} 个四位数，"
            f"平均每个被抽到 {len(four_drawn) / max(1, len(four_train)):.2f} 次，{never} 个一次也没抽到",
            f"training drew {len(drawn)} examples, {len(four_drawn)} of them four-digit; the training set holds "
            f"{len(four_train)} four-digit numbers, drawn {len(four_drawn) / max(1, len(four_train)):.2f} times each on "
            f"average, {never} of them never"))
    print(t(f"训练集里错了的 {len(misses)} 个数中，{len(four_misses)} 个是四位数，其中 "
            f"{sum(n not in seen for n in four_misses)} 个训练时一次也没抽到",
            f"of the {len(misses)} misses in the training set, {len(four_misses)} have four digits, and "
            f"{sum(n not in seen for n in four_misses)} of those were never drawn in training"))
