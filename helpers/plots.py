"""Plot helpers: one place for figure style and for the font that draws Chinese.

The course ships its own font, a subset of Noto Sans CJK SC (SIL Open Font
License, helpers/fonts/OFL.txt) holding the characters the chapters use, so every
figure shows Chinese on any machine, with or without a system CJK font.
Importing this module registers it with matplotlib and puts it first in the
sans-serif list; glyphs it lacks (Greek, math symbols) come from DejaVu Sans.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib import font_manager

from .i18n import get_language

FONT_FILE = Path(__file__).resolve().parent / "fonts" / "NotoSansSC-CourseSubset.otf"
FONT_FAMILY = "Noto Sans SC Course Subset"


def register_font() -> str:
    """Register the course font with matplotlib (once) and make it the default."""
    if FONT_FILE.exists() and FONT_FAMILY not in {f.name for f in font_manager.fontManager.ttflist}:
        font_manager.fontManager.addfont(str(FONT_FILE))
    # matplotlib falls back glyph by glyph along font.family (not within the
    # generic sans-serif list), so both fonts are named there
    matplotlib.rcParams["font.family"] = [FONT_FAMILY, "DejaVu Sans"]
    rest = [f for f in matplotlib.rcParams["font.sans-serif"] if f not in (FONT_FAMILY, "DejaVu Sans")]
    matplotlib.rcParams["font.sans-serif"] = [FONT_FAMILY, "DejaVu Sans", *rest]
    return FONT_FAMILY


def cjk_font() -> str | None:
    """The family that draws the figures' Chinese (the course's own font), or
    None if its file is missing from this copy of the course."""
    return register_font() if FONT_FILE.exists() else None


def setup() -> None:
    """Figure defaults for the course."""
    matplotlib.rcParams.update({
        "figure.dpi": 100,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.unicode_minus": False,
        "legend.fontsize": 10,
    })
    register_font()


def png_of(figure) -> str:
    """The figure as a base64 PNG (as Jupyter stores images); the figure is closed."""
    import base64
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    figure.savefig(buf, format="png", bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def show_widget(widget, figure=None, alt: str | None = None) -> None:
    """Display ``widget`` with a static PNG of ``figure`` in the same output.

    A front end that runs widgets (JupyterLab, Notebook, VS Code) shows the
    widget and ignores the picture; a viewer that cannot (a rendered notebook on
    the web, nbconvert's HTML) shows the picture instead. So a reader sees one
    of the two, never both. ``alt`` says what the picture shows."""
    from IPython.display import display

    bundle = dict(widget._repr_mimebundle_())
    metadata = {}
    if figure is not None:
        bundle["image/png"] = png_of(figure)
        if alt:
            metadata = {"image/png": {"alt": alt}}
    display(bundle, metadata=metadata, raw=True)


def show(figure, alt: str) -> None:
    """Display a drawn figure as an image whose text alternative is ``alt``
    (what the figure shows, in the notebook's language), and close it."""
    from IPython.display import display

    display({"image/png": png_of(figure), "text/plain": alt}, metadata={"image/png": {"alt": alt}}, raw=True)


# ------------------------------------------------------------------ figures drawn once for a whole class

STATIC: dict[str, object] = {}    # "helpers.module:function" -> which arguments it may be drawn with


def static(accepts=lambda *args: not args):
    """Register a figure function whose picture depends only on its (small)
    arguments and the language, never on anything a student wrote: grading
    draws it once for the whole class instead of once per notebook
    (``show_static``). ``accepts(*args)`` says which arguments the grader may
    draw it with."""
    def register(fn):
        STATIC[figure_key(fn)] = accepts
        return fn
    return register


def figure_key(fn) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def show_static(fn, *args, alt: str) -> None:
    """Show the registered figure ``fn(*args)``. Under nbgrader the kernel only
    leaves its description and a mark: the grader puts the picture in
    (coursekit.figures), drawn once per machine rather than once per student."""
    from IPython.display import display

    from .runtime import FIGURE_MARK, under_nbgrader

    key = figure_key(fn)
    if under_nbgrader() and STATIC[key](*args):
        mark = {"key": key, "args": list(args), "lang": get_language(), "alt": alt}
        display({"text/plain": alt}, metadata={FIGURE_MARK: mark}, raw=True)
        return
    show(fn(*args), alt)


def label(zh: str, en: str) -> str:
    """Figure text in the notebook's language (English only if the course font
    were missing, so a student never sees empty boxes)."""
    if get_language() == "zh" and cjk_font():
        return zh
    return en


register_font()
