"""Pictures and the slider demo of chapter 6: where a model's parameters live.

Every count drawn here is measured from real modules (``model_cards.measure``);
the student's own counting functions can be passed in to be compared.
"""
from __future__ import annotations

from ..i18n import t
from ..plots import figure_function, label, setup
from ..runtime import under_nbgrader
from . import model_cards as mc

# Okabe & Ito's colours, and a hatch each: the parts differ without colour too
COLORS = {"embeddings": "#0072B2", "attention": "#D55E00", "ffn": "#009E73", "norms": "#E69F00",
          "biases": "#CC79A7"}
HATCH = {"embeddings": "", "attention": "//", "ffn": "..", "norms": "xx", "biases": "\\\\"}
ON_BAR = {"color": "white", "bbox": {"boxstyle": "round,pad=0.15", "facecolor": "black", "alpha": 0.55, "linewidth": 0}}


def part_label(part: str) -> str:
    return {"embeddings": label("嵌入（含位置、lm_head）", "embeddings (+ positions, lm_head)"),
            "attention": label("注意力矩阵", "attention matrices"),
            "ffn": label("FFN 矩阵", "FFN matrices"),
            "norms": label("归一化层", "norms"),
            "biases": label("偏置", "biases")}[part]


def describe(style, n_layer, d, vocab_size, n_ctx, tied) -> dict:
    """Measured parts, total, the rule of thumb and its relative error for one
    configuration (LLaMA style: d_ff from LLaMA's rule, one K/V per head)."""
    d_ff = mc.llama_ffn_size(d) if style == "llama" else None
    parts = mc.measure(style, n_layer, d, vocab_size, n_ctx, tied, d_ff)
    exact = sum(parts.values())
    approx = mc.rule_of_thumb(n_layer, d, vocab_size, tied)
    return {"parts": parts, "exact": exact, "approx": approx, "error": approx / exact - 1, "d_ff": d_ff}


@figure_function
def breakdown_figure(style="gpt2", n_layer=12, d=768, vocab_size=50257, n_ctx=1024, tied=True, fig=None):
    """Two horizontal bars: the measured count split into its five parts, and
    the rule of thumb 12·L·d² + V·d split into its two terms."""
    import matplotlib.pyplot as plt

    setup()
    info = describe(style, n_layer, d, vocab_size, n_ctx, tied)
    if fig is None:
        fig = plt.figure(figsize=(10, 3.0))
    fig.clear()
    ax = fig.subplots()
    left = 0
    for part in mc.PARTS:
        n = info["parts"][part]
        ax.barh(1, n, left=left, color=COLORS[part], hatch=HATCH[part], edgecolor="white",
                label=f"{part_label(part)}  {mc.human(n)}")
        left += n
    emb = vocab_size * d * (1 if tied else 2)
    blocks = 12 * n_layer * d * d
    ax.barh(0, blocks, color="#999999", hatch="++", edgecolor="white",
            label=label(f"12·L·d²  {mc.human(blocks)}", f"12·L·d²  {mc.human(blocks)}"))
    times = "" if tied else "2×"
    ax.barh(0, emb, left=blocks, color="#0072B2", alpha=0.45, hatch="oo", edgecolor="white",
            label=label(f"{times}词表×d  {mc.human(emb)}", f"{times}vocab×d  {mc.human(emb)}"))
    top = max(info["exact"], info["approx"])
    ax.text(info["exact"] + 0.01 * top, 1, mc.human(info["exact"]), va="center")
    ax.text(info["approx"] + 0.01 * top, 0, mc.human(info["approx"]), va="center")
    ax.set_xlim(0, top * 1.12)
    ax.set_yticks([0, 1], [label("速算公式", "rule of thumb"), label("实测（逐个模块）", "measured")])
    name = "GPT-2" if style == "gpt2" else "LLaMA"
    tie = label("共享", "tied") if tied else label("不共享", "untied")
    extra = f", d_ff={info['d_ff']}" if style == "llama" else f", n_ctx={n_ctx}"
    ax.set_title(label(f"{name} 风格：L={n_layer}, d={d}, 词表={vocab_size}{extra}，嵌入{tie}；速算误差 {info['error']:+.1%}",
                       f"{name} style: L={n_layer}, d={d}, vocab={vocab_size}{extra}, {tie}; "
                       f"rule of thumb off by {info['error']:+.1%}"), fontsize=10)
    ax.set_xlabel(label("参数个数", "parameters"))
    ax.xaxis.set_major_formatter(lambda x, _: mc.human(x))
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


@figure_function
def known_models_figure(fig=None):
    """100 % bars: the share of each part in the known models. The embedding
    share shrinks as models grow; FFN is about two thirds of the rest."""
    import matplotlib.pyplot as plt

    setup()
    if fig is None:
        fig = plt.figure(figsize=(10, 3.8))
    fig.clear()
    ax = fig.subplots()
    names = [c.name for c in mc.KNOWN]
    measured = [mc.measure_card(c) for c in mc.KNOWN]
    largest = {part: max(m[part] / sum(m.values()) for m in measured) for part in mc.PARTS}
    for i, parts in enumerate(measured):
        total = sum(parts.values())
        left = 0.0
        for part in mc.PARTS:
            share = parts[part] / total
            name = part_label(part)
            if largest[part] < 0.01:     # too thin to see: say how thin
                name += label(f"（至多 {largest[part]:.2%}）", f" (at most {largest[part]:.2%})")
            ax.barh(i, share, left=left, color=COLORS[part], hatch=HATCH[part], edgecolor="white",
                    label=name if i == 0 else None)
            if share > 0.06:
                ax.text(left + share / 2, i, f"{share:.0%}", ha="center", va="center", fontsize=8, **ON_BAR)
            left += share
        ax.text(1.01, i, mc.human(total), va="center", fontsize=9)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.1)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"])
    ax.grid(axis="y", visible=False)
    ax.set_title(label("参数都在哪里（逐个模块实测）", "where the parameters are (measured module by module)"))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.08, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def show_known_models() -> None:
    """The static figure of known models (skipped while grading)."""
    import matplotlib.pyplot as plt

    if under_nbgrader():
        return
    known_models_figure()
    plt.show()


def show_breakdown(**config) -> None:
    """The static version of the slider demo (skipped while grading)."""
    import matplotlib.pyplot as plt

    if under_nbgrader():
        return
    breakdown_figure(**config)
    plt.show()


def summary(style, n_layer, d, vocab_size, n_ctx, tied, gpt2_params=None, llama_params=None) -> str:
    """One line of numbers for a configuration, and the student's count if given."""
    info = describe(style, n_layer, d, vocab_size, n_ctx, tied)
    two = "" if tied else "2·"
    line = t(f"实测 {info['exact']:,}；速算 12·L·d² + {two}词表·d = {info['approx']:,}（误差 {info['error']:+.2%}）",
             f"measured {info['exact']:,}; rule of thumb 12·L·d² + {two}vocab·d = {info['approx']:,} "
             f"(off by {info['error']:+.2%})")
    if style == "llama":
        line += t(f"；d_ff = {info['d_ff']}（LLaMA 的取整规则）", f"; d_ff = {info['d_ff']} (LLaMA's rounding rule)")
    fn = gpt2_params if style == "gpt2" else llama_params
    if fn is not None:
        try:
            yours = (fn(n_layer, d, vocab_size, n_ctx, tied=tied) if style == "gpt2"
                     else fn(n_layer, d, vocab_size, info["d_ff"], tied=tied))
            mark = "✓" if yours == info["exact"] else "✗"
            line += t(f"；你的函数：{yours:,} {mark}", f"; your function: {yours:,} {mark}")
        except NotImplementedError:
            line += t("；你的函数还没有完成", "; your function is not done yet")
        except Exception as exc:
            line += t(f"；你的函数出错：{type(exc).__name__}", f"; your function raised {type(exc).__name__}")
    return line


VOCABS = (256, 512, 1000, 2000, 4000, 8000, 16000, 32000, 50257, 65536, 100277, 128256, 151936, 256000)
CONTEXTS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def explorer(gpt2_params=None, llama_params=None, n_layer=12, d=768, vocab_size=50257, n_ctx=1024) -> None:
    """Sliders for L, d, vocabulary and context, a tied/untied switch and
    GPT-2/LLaMA style, redrawing ``breakdown_figure``. While grading: one line
    of numbers only; without ipywidgets: the static picture."""
    import matplotlib.pyplot as plt

    from ..plots import show_widget

    if under_nbgrader():
        print(summary("gpt2", n_layer, d, vocab_size, n_ctx, True, gpt2_params, llama_params))
        return None
    try:
        import ipywidgets as W
    except ImportError:
        show_breakdown(n_layer=n_layer, d=d, vocab_size=vocab_size, n_ctx=n_ctx)
        print(summary("gpt2", n_layer, d, vocab_size, n_ctx, True, gpt2_params, llama_params))
        return None

    wide = W.Layout(width="460px")
    style = W.ToggleButtons(options=[("GPT-2", "gpt2"), ("LLaMA", "llama")], value="gpt2",
                            description=t("结构", "style"))
    tied = W.Checkbox(value=True, description=t("嵌入与 lm_head 共享", "tie embedding and lm_head"))
    layers = W.IntSlider(value=n_layer, min=1, max=96, description="L", continuous_update=False, layout=wide)
    width = W.IntSlider(value=d, min=64, max=12288, step=64, description="d", continuous_update=False, layout=wide)
    vocab = W.SelectionSlider(options=list(VOCABS), value=vocab_size, description=t("词表", "vocab"),
                              continuous_update=False, layout=wide)
    ctx = W.SelectionSlider(options=list(CONTEXTS), value=n_ctx, description="n_ctx", continuous_update=False,
                            layout=wide)
    text = W.HTML()
    out = W.Output()

    def redraw(*_):
        ctx.disabled = style.value == "llama"     # RoPE: no position table, so n_ctx adds no parameters
        args = (style.value, layers.value, width.value, vocab.value, ctx.value, tied.value)
        text.value = f"<b>{summary(*args, gpt2_params=gpt2_params, llama_params=llama_params)}</b>"
        with out:
            out.clear_output(wait=True)
            fig = breakdown_figure(*args)
            plt.show()
            plt.close(fig)

    def restyle(change):
        want = change["new"] == "gpt2"          # GPT-2 ties, LLaMA-2 does not
        if tied.value != want:
            tied.value = want                   # redraws through its own observer
        else:
            redraw()

    style.observe(restyle, names="value")
    for w in (tied, layers, width, vocab, ctx):
        w.observe(redraw, names="value")
    redraw()
    show_widget(W.VBox([W.HBox([style, tied]), layers, width, vocab, ctx, text, out]),
                breakdown_figure("gpt2", n_layer, d, vocab_size, n_ctx, True))
