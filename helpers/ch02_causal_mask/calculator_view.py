"""Drawing chapter 2's step-through calculator: each stage as a colour-scaled
HTML table (what the widget shows), as a matplotlib figure (the static picture
for viewers without widgets), and the ipywidgets calculator itself, with
Prev/Next buttons and a causal-mask toggle. The numbers come from
``helpers.calculator``.
"""
from __future__ import annotations

import html as _html

import numpy as np

from ..i18n import t
from ..plots import figure_function, static
from ..plots import show_static as _show_static
from . import calculator
from .calculator import Matrix, Stage

_MASKED_BG = "#d9d9d9"


def _rgb_hex(rgb) -> str:
    return "#" + "".join(f"{int(round(255 * c)):02x}" for c in rgb[:3])


def _scale(m: Matrix) -> float:
    finite = m.values[np.isfinite(m.values)]
    return float(np.abs(finite).max()) if finite.size else 1.0


def cell_colour(value: float, m: Matrix) -> str:
    """Background of one cell: grey for −∞, a blue–white–red scale for signed
    matrices, white–blue for weights (0 … 1)."""
    from matplotlib import colormaps

    if value == calculator.NEG_INF:
        return _MASKED_BG
    if m.kind == "weights":
        return _rgb_hex(colormaps["Blues"](0.85 * float(value)))
    lim = _scale(m) or 1.0
    return _rgb_hex(colormaps["RdBu_r"](0.5 + 0.4 * float(value) / lim))


def _luminance(colour: str) -> float:
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on ``background`` (at least 4.5:1 on any colour)."""
    lum = _luminance(background)
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


def matrix_html(m: Matrix) -> str:
    head = "".join(f"<th scope='col' style='padding:2px 6px'>{_html.escape(c)}</th>" for c in m.cols)
    rows = []
    for label, row in zip(m.rows, m.values):
        cells = "".join(f"<td style='background:{cell_colour(v, m)};color:{text_colour(cell_colour(v, m))};"
                        f"padding:2px 6px;text-align:right;font-family:monospace'>{calculator.fmt(v)}</td>"
                        for v in row)
        rows.append(f"<tr><th scope='row' style='padding:2px 6px'>{_html.escape(label)}</th>{cells}</tr>")
    return (f"<table style='border-collapse:collapse;margin:4px 12px 4px 0'>"
            f"<caption style='font-weight:bold;caption-side:top'>{_html.escape(m.name)}</caption>"
            f"<tr><th></th>{head}</tr>{''.join(rows)}</table>")


def stage_html(st: Stage, causal: bool = True) -> str:
    """One stage as HTML: title, formula, note and its matrices side by side."""
    state = t("因果掩码：开", "causal mask: on") if causal else t("因果掩码：关", "causal mask: off")
    def row(mats) -> str:
        return "".join(f"<div style='display:inline-block;vertical-align:top'>{matrix_html(m)}</div>"
                       for m in mats)
    caption = t("固定的权重矩阵（行 = 输入维度，列 = 输出维度）：",
                "the fixed weights (rows = input dimension, columns = output dimension):")
    given = (f"<div><span style='color:#666'>{caption}</span><br>{row(st.weights)}</div>"
             if st.weights else "")
    return (f"<div><b>{_html.escape(st.title)}</b> &nbsp; <span style='color:#666'>"
            f"({st.number}/{calculator.N_STAGES}, {state})</span><br>"
            f"<code>{_html.escape(st.formula)}</code><br>"
            f"<span>{_html.escape(st.note)}</span><div>{row(st.matrices)}</div>{given}</div>")


def _draw_matrix(ax, m: Matrix) -> None:
    vals = m.values
    colours = np.array([[_hex_to_rgb(cell_colour(v, m)) for v in row] for row in vals])
    ax.imshow(colours, aspect="auto")
    for i, row in enumerate(vals):
        for j, v in enumerate(row):
            dark = sum(colours[i, j]) < 1.5
            ax.text(j, i, calculator.fmt(v), ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(m.cols)), _labels(m.cols))
    ax.set_yticks(range(len(m.rows)), _labels(m.rows))
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    ax.grid(False)
    ax.set_title(m.name, pad=24, fontsize=11)
    for side in ax.spines.values():
        side.set_visible(False)


def _labels(names) -> list[str]:
    """Token names in the figure: Chinese only when a CJK font can draw them."""
    from .. import plots

    if tuple(names) == calculator.TOKENS["zh"]:
        return [plots.label(z, e) for z, e in zip(names, calculator.TOKENS["en"])]
    return list(names)


def _hex_to_rgb(h: str) -> tuple[float, float, float]:
    return tuple(int(h[i:i + 2], 16) / 255 for i in (1, 3, 5))


def stages_alt(numbers=(3, 4)) -> str:
    """What ``stages_figure`` shows, in words and numbers."""
    on, off = calculator.stage(4, True).matrices[-1].values, calculator.stage(4, False).matrices[-1].values
    first = " ".join(calculator.fmt(v) for v in on[0])
    return t(f"两行矩阵图，第 {'、'.join(map(str, numbers))} 步。上排因果掩码开：分数矩阵对角线以上是 −∞，"
             f"softmax 之后的权重是下三角，第一行是 {first}。下排掩码关（BERT 式双向）：每个位置都看得到全部 "
             f"{len(off)} 个位置，权重的第一行是 {' '.join(calculator.fmt(v) for v in off[0])}。",
             f"Two rows of matrices, stages {', '.join(map(str, numbers))}. Top, causal mask on: the scores are −∞ "
             f"above the diagonal and the softmax weights are lower-triangular, first row {first}. Bottom, mask off "
             f"(BERT-style, bidirectional): every position sees all {len(off)}, first row of the weights "
             f"{' '.join(calculator.fmt(v) for v in off[0])}.")


@static(accepts=lambda numbers=(3, 4): list(numbers) in ([3, 4], [3], [4]))
@figure_function
def stages_figure(numbers=(3, 4), fig=None):
    """The static picture: the given stages with the causal mask on (top row)
    and off (bottom row)."""
    import matplotlib.pyplot as plt

    from .. import plots

    plots.setup()
    cols = [(n, m) for n in numbers for m in range(len(calculator.stage(n).matrices))]
    if fig is None:
        fig = plt.figure(figsize=(3.6 * len(cols), 6.4))
    fig.clear()
    axes = fig.subplots(2, len(cols), squeeze=False)
    for r, causal in enumerate((True, False)):
        for c, (n, k) in enumerate(cols):
            st = calculator.stage(n, causal)
            _draw_matrix(axes[r][c], st.matrices[k])
            if k == 0:
                axes[r][c].set_ylabel(plots.label(st.title, _plain_title(n, causal)), fontsize=10)
    fig.suptitle(plots.label("上：因果掩码开　　下：掩码关（BERT 式双向）",
                             "top: causal mask on    bottom: mask off (BERT-style, bidirectional)"), fontsize=11)
    fig.tight_layout()
    return fig


def _plain_title(n: int, causal: bool) -> str:
    from ..i18n import get_language, set_language

    lang = get_language()
    set_language("en")
    try:
        return calculator.stage(n, causal).title
    finally:
        set_language(lang)


def show_static(numbers=(3, 4)) -> None:
    """The static version of the calculator."""
    _show_static(stages_figure, list(numbers), alt=stages_alt(numbers))


class Calculator:
    """The calculator's view state: which stage, mask on or off. The widget
    only calls these methods, so the tests drive it without a browser."""

    def __init__(self, stage: int = 1, causal: bool = True):
        self.number, self.causal = stage, causal

    def next(self) -> None:
        self.number = min(self.number + 1, calculator.N_STAGES)

    def prev(self) -> None:
        self.number = max(self.number - 1, 1)

    def toggle(self, causal: bool | None = None) -> None:
        self.causal = (not self.causal) if causal is None else bool(causal)

    def stage(self) -> Stage:
        return calculator.stage(self.number, self.causal)

    def html(self) -> str:
        return stage_html(self.stage(), self.causal)


def announcement(st: Stage, causal: bool) -> str:
    """One sentence for a screen reader: which stage, of how many, and the mask."""
    state = t("因果掩码：开", "causal mask: on") if causal else t("因果掩码：关", "causal mask: off")
    return t(f"第 {st.number} 步，共 {calculator.N_STAGES} 步：{st.title}。{state}。",
             f"Stage {st.number} of {calculator.N_STAGES}: {st.title}. {state}.")


def calculator_widget(stage: int = 1, causal: bool = True):
    """The interactive calculator as an ipywidgets box (not displayed): Prev/Next
    buttons walk the five stages, a toggle switches the causal mask."""
    import ipywidgets as W

    calc = Calculator(stage, causal)
    prev = W.Button(description=t("◀ 上一步", "◀ Prev"), layout=W.Layout(width="110px"))
    nxt = W.Button(description=t("下一步 ▶", "Next ▶"), layout=W.Layout(width="110px"))
    mask = W.ToggleButton(value=causal, description=t("因果掩码", "causal mask"), icon="eye-slash",
                          tooltip=t("在阶段 ③④ 打开/关闭因果掩码", "switch the causal mask at stages ③④"))
    view = W.HTML()
    view.add_class("course-calculator")
    # What a screen reader says after each press: the stage and the mask (a live
    # region, made so by the course's JupyterLab extension; out of sight, the
    # page shows the same words above the matrices).
    live = W.HTML(layout=W.Layout(width="1px", height="1px", overflow="hidden", margin="0"))
    live.add_class("course-live")

    def redraw(*_):
        view.value = calc.html()
        live.value = announcement(calc.stage(), calc.causal)
        prev.disabled = calc.number == 1
        nxt.disabled = calc.number == calculator.N_STAGES

    prev.on_click(lambda _: (calc.prev(), redraw()))
    nxt.on_click(lambda _: (calc.next(), redraw()))
    mask.observe(lambda change: (calc.toggle(change["new"]), redraw()), names="value")
    redraw()
    box = W.VBox([W.HBox([prev, nxt, mask]), view, live])
    box.calculator = calc  # for tests and the curious
    return box


def step_through(stage: int = 1, causal: bool = True) -> None:
    """Show the calculator. Under nbgrader, its static picture (the feedback
    page shows it); without ipywidgets, the HTML of the starting stage."""
    from IPython.display import HTML, display

    from ..runtime import under_nbgrader

    if under_nbgrader():
        _show_static(stages_figure, [3, 4], alt=stages_alt())
        return
    try:
        box = calculator_widget(stage, causal)
    except ImportError:
        display(HTML(Calculator(stage, causal).html()))
        return
    from ..plots import show_widget
    show_widget(box, stages_figure(), alt=stages_alt())
