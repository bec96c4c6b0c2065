"""Every student can use the course: WCAG 2.1 AA, checked in the browser and on every figure.

- Figures (no browser): every figure of every chapter, drawn in both languages,
  has a text alternative in the chapter's language that gives numbers (its own,
  or one written from the figure: helpers.plots.alt_of), its series differ by
  line style, marker or hatch and not by colour alone, and a heatmap has a
  colour bar or its numbers written in it. Chapters that run in seconds are
  run whole (shared with tests/test_content.py); the figures of the chapters
  that train are drawn from small inputs.
- The course's own pages (axe-core, WCAG 2.0/2.1 A and AA rules): a feedback
  page per chapter and language, the class report, a similarity page: no
  violation. A page given one image without alt fails the same check.
- Maths: the feedback page's maths is MathML with its structure (fractions,
  roots, sub- and superscripts), not text.
"""
from __future__ import annotations

import re
import shutil
import sys

import matplotlib
import pytest

matplotlib.use("Agg")

import browser  # noqa: E402
import test_content  # noqa: E402
from harness import ROOT  # noqa: E402

from coursekit.author import build  # noqa: E402
from helpers import plots, set_language  # noqa: E402

CHAPTERS = sorted(p.name for p in (ROOT / "release").iterdir() if p.is_dir() and p.name.startswith("ch"))
CJK = re.compile(r"[\u3400-\u9fff]")

# ------------------------------------------------------------------ what a figure must carry


def series_key(artist):
    """What tells one series from another besides colour."""
    from matplotlib.lines import Line2D

    if isinstance(artist, Line2D):
        marker = artist.get_marker()
        marker = None if marker in (None, "None", "", " ") else str(marker)
        dashes = artist._unscaled_dash_pattern if artist.get_linestyle() not in ("None", " ", "") else None
        return ("line", str(dashes), marker)
    hatch = artist.get_hatch() if hasattr(artist, "get_hatch") else None
    fill = artist.get_fill() if hasattr(artist, "get_fill") else True
    style = str(artist.get_linestyle()) if hasattr(artist, "get_linestyle") else ""
    return ("area", hatch or "", fill, style if not fill else "")


def series(ax) -> list[tuple[str, object]]:
    """(label, artist) of each labelled series of an axes: lines, bar and
    histogram groups, areas."""
    from matplotlib.container import BarContainer

    out = [(ln.get_label(), ln) for ln in ax.get_lines() if ln.get_label()[:1] != "_" and ln.get_visible()]
    grouped = set()
    for c in ax.containers:
        if isinstance(c, BarContainer) and c.patches:
            grouped |= {id(p) for p in c.patches}
            name = c.get_label() or c.patches[0].get_label()     # a histogram labels its first bar
            if name and name[:1] != "_":
                out.append((name, c.patches[0]))
    out += [(p.get_label(), p) for p in ax.patches
            if id(p) not in grouped and p.get_label()[:1] != "_" and p.get_visible()]
    out += [(c.get_label(), c) for c in ax.collections if c.get_label()[:1] != "_" and c.get_visible()]
    return out


def colour_only(figure) -> list[str]:
    """Series of one panel that differ by colour alone, and heatmaps with no
    key to their colours."""
    problems = []
    bars = [ax._colorbar for ax in figure.get_axes() if getattr(ax, "_colorbar", None) is not None]
    for ax in figure.get_axes():
        if getattr(ax, "_colorbar", None) is not None:
            continue
        seen = {}
        for label, artist in series(ax):
            key = series_key(artist)
            if key in seen and seen[key] != label:
                problems.append(f"{ax.get_title()!r}: {seen[key]!r} and {label!r} differ only in colour")
            seen.setdefault(key, label)
        for image in ax.images:
            shape = getattr(image.get_array(), "shape", ())
            cells = shape[0] * shape[1] if len(shape) == 2 else 0
            keyed = any(bar.mappable.get_cmap().name == image.get_cmap().name
                        and tuple(bar.mappable.get_clim()) == tuple(image.get_clim()) for bar in bars)
            if not keyed and len(ax.texts) < cells and not legend_of(figure, ax):
                problems.append(f"{ax.get_title()!r}: a heatmap with no colour bar, legend or numbers in its cells")
    return problems


def legend_of(figure, ax) -> bool:
    """A legend that keys an image's colours (patches naming what each colour means)."""
    legends = [lg for lg in [ax.get_legend(), *figure.legends] if lg is not None]
    return any(len(lg.get_patches()) >= 2 for lg in legends)


def alt_problems(alt: str, lang: str) -> list[str]:
    """An alternative must say something with numbers, in the chapter's language."""
    problems = []
    if not alt or len(alt) < 12:
        problems.append(f"no real text alternative: {alt!r}")
    elif not re.search(r"\d", alt):
        problems.append(f"a text alternative without a single value: {alt[:120]!r}")
    cjk = len(CJK.findall(alt))
    if lang == "zh" and cjk == 0:
        problems.append(f"a Chinese page's text alternative in English: {alt[:120]!r}")
    if lang == "en" and cjk > 0.3 * len(alt):
        problems.append(f"an English page's text alternative in Chinese: {alt[:120]!r}")
    return problems


class Drawn:
    """Every figure drawn, with its source function, alternative and problems."""

    def __init__(self):
        self.records: dict[tuple, dict] = {}

    def __call__(self, chapter, lang, figure) -> None:
        key = (chapter, lang, id(figure), getattr(figure, "_course_source", "?"))
        alt = plots.alt_of(figure)
        self.records[key] = {"chapter": chapter, "lang": lang, "source": getattr(figure, "_course_source", None),
                             "alt": alt, "explicit": bool(getattr(figure, "_course_alt", None)),
                             "problems": alt_problems(alt, lang) + colour_only(figure)}

    def of(self, chapter, lang) -> list[dict]:
        return [r for (c, la, *_), r in self.records.items() if c == chapter and la == lang]


DRAWN = Drawn()
test_content.DRAW_HOOKS.append(DRAWN)


def check(records) -> list[str]:
    return [f"{r['chapter']} ({r['lang']}) {r['source'] or 'a figure drawn in the notebook'}: {p}"
            for r in records for p in r["problems"]]


@pytest.mark.parametrize("lang", build.LANGS)
@pytest.mark.parametrize("chapter", [pytest.param(c, marks=test_content.same_worker(c)) for c in test_content.RUN])
def test_every_figure_of_the_chapter_has_a_text_alternative_and_more_than_colour(chapter, lang):
    test_content.chapter_run(chapter, lang)
    records = DRAWN.of(chapter, lang)
    assert records, f"{chapter} ({lang}) drew no figure"
    assert check(records) == []


# The chapters that train for minutes: each figure drawn from small inputs of the right shape.

def solutions(chapter: str) -> dict:
    """The chapter's answer cells (its model solution), run."""
    import math

    import nbformat
    import torch
    from harness import _strip_markers

    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    ns: dict = {"torch": torch, "math": math, "nn": torch.nn, "F": torch.nn.functional}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            exec(compile(_strip_markers(cell.source), meta["grade_id"], "exec"), ns)
    return ns


def training_chapter_figures():
    """(chapter, figure) for every figure of ch07, ch09, ch10 and ch11 (and the
    training loop's loss curve), drawn from small models and made-up curves."""
    import numpy as np
    import torch

    from helpers import ch07_gpt, training
    from helpers import ch09_inside_gpt as inside
    from helpers import ch10_llama_block as llama
    from helpers import ch11_encoder_decoder as ed

    gen = torch.Generator().manual_seed(0)
    sentence, maps = "ROMEO:\nBut soft", np.random.default_rng(0).random((2, 2, 15, 15))
    history = training.History(steps=[0, 50, 100], train=[4.2, 2.9, 2.4], val_steps=[0, 100], val=[4.2, 2.5])
    yield "ch07_gpt", ch07_gpt.head_figure(sentence, maps, 1, 1)
    yield "ch07_gpt", ch07_gpt.grid_figure(sentence, maps)
    yield "ch07_gpt", training.loss_figure(history)

    torch.manual_seed(0)
    sys.path.insert(0, str(ROOT / "notebooks" / "given"))     # the model ch09 hands out with its release
    import tiny_gpt
    model = tiny_gpt.TinyGPT(tiny_gpt.Config()).eval()
    x = torch.randint(0, 26, (2, 32), generator=gen)
    attn = model.attention(x).detach()
    prev = lambda a: a.diagonal(offset=-1, dim1=-2, dim2=-1).mean((-1, -3))   # noqa: E731 (layer, head)
    induction = lambda a, period: a.diagonal(offset=-(period - 1), dim1=-2, dim2=-1).mean((-1, -3))  # noqa: E731
    curve = {"step": [0, 100, 200, 300], "loss_first": [3.3, 3.2, 3.2, 3.2], "loss_repeat": [3.3, 3.0, 1.2, 0.4],
             "prev": [0.1, 0.3, 0.8, 0.9], "induction": [0.05, 0.1, 0.6, 0.8]}
    letters = "".join(inside.ALPHABET[i] for i in x[0])
    yield "ch09_inside_gpt", inside.loss_position_figure(torch.linspace(3.2, 0.5, 31), 16, 3.26)
    yield "ch09_inside_gpt", inside.scores_figure({"prev": prev(attn), "induction": induction(attn, 16)})
    yield "ch09_inside_gpt", inside.patterns_figure(attn, [("a", (0, 1)), ("b", (1, 2))], letters)
    yield "ch09_inside_gpt", inside.ablation_figure(torch.rand(2, 4, generator=gen) - 0.2, 1.1)
    yield "ch09_inside_gpt", inside.head_explorer_figure(model, "a cat sat on a mat a cat sat on a mat", prev, induction)
    yield "ch09_inside_gpt", inside.phase_figure(curve, 3.26)
    yield "ch09_inside_gpt", inside.ov_figure(model, {"a": (0, 1), "b": (1, 2)})

    race = {name: {"history": training.History(val_steps=[0, 100, 200], val=[4.2, 2.6 + i / 10, 2.3 + i / 10]),
                   "params": 340_000 + i, "steps": 200, "seconds": 20.0, "val": 2.3 + i / 10}
            for i, name in enumerate(("GPT", "LLaMA"))}
    yield "ch10_llama_block", llama.gqa_figure(8)
    yield "ch10_llama_block", llama.race_figure(race)
    yield "ch10_llama_block", llama.layouts_figure(8)

    sol = solutions("ch11_encoder_decoder")
    torch.manual_seed(0)
    seq = ed.Seq2Seq(sol["EncoderLayer"], sol["DecoderLayer"], d=16, h=2, d_ff=32, n_enc=1, n_dec=1).eval()
    yield "ch11_encoder_decoder", ed.heatmap_figure(seq, sol["greedy_decode"], sol["padding_mask"], 307)
    yield "ch11_encoder_decoder", ed.examples_figure(seq, sol["greedy_decode"], sol["padding_mask"], numbers=(110, 2030))
    yield "ch11_encoder_decoder", ed.mask_patterns_figure()
    yield "ch11_encoder_decoder", ed.loss_figure([3.0 * 0.97 ** i for i in range(160)])


@pytest.fixture(scope="module")
def trained_figures():
    import matplotlib.pyplot as plt

    for lang in build.LANGS:
        set_language(lang)
        try:
            for chapter, fig in training_chapter_figures():
                fig.canvas.draw()
                DRAWN(chapter, lang, fig)
                plt.close(fig)
        finally:
            set_language("zh")
    return DRAWN


@pytest.mark.parametrize("lang", build.LANGS)
def test_figures_of_the_training_chapters_have_a_text_alternative_and_more_than_colour(trained_figures, lang):
    records = [r for ch in ("ch07_gpt", "ch09_inside_gpt", "ch10_llama_block", "ch11_encoder_decoder")
               for r in trained_figures.of(ch, lang)]
    assert len(records) >= 17
    assert check(records) == []


@pytest.mark.xdist_group(test_content.CONTENT_GROUP)   # the chapters run there once, for all their tests
def test_every_figure_function_is_drawn_in_both_languages(trained_figures):
    """Every function that draws a course figure (helpers.plots.figure_function)
    was drawn above, in both languages: a new figure cannot skip the checks."""
    for chapter in test_content.RUN:
        for lang in build.LANGS:
            test_content.chapter_run(chapter, lang)
    for lang in build.LANGS:
        drawn = {r["source"] for r in DRAWN.records.values() if r["lang"] == lang}
        assert sorted(plots.FIGURE_FUNCTIONS - drawn) == [], lang


def test_the_figure_checks_catch_colour_alone_a_bare_heatmap_and_a_missing_alternative():
    import matplotlib.pyplot as plt

    plots.setup()
    fig, (a, b) = plt.subplots(1, 2)
    a.plot([0, 1], [0, 1], "o-", label="one")
    a.plot([0, 1], [1, 0], "o-", label="two")                    # the same style, another colour
    b.imshow([[0.1, 0.9], [0.5, 0.2]])
    found = colour_only(fig)
    assert any("'one' and 'two' differ only in colour" in p for p in found), found
    assert any("heatmap with no colour bar" in p for p in found), found
    a.lines[1].set_linestyle("--")
    fig.colorbar(b.images[0], ax=b)
    assert colour_only(fig) == []
    assert alt_problems("", "en") and alt_problems("a plot", "en")
    assert alt_problems("Figure: loss from 3.2 to 0.4", "zh")   # English on a Chinese page
    assert alt_problems("图：损失从 3.2 降到 0.4", "zh") == []
    set_language("en")
    try:
        alt = plots.alt_of(fig)
    finally:
        set_language("zh")
    assert "one: 0 → 0, 1 → 1" in alt and "two: 0 → 1, 1 → 0" in alt, alt
    plt.close(fig)


# ------------------------------------------------------------------ the course's own pages, in a browser

needs_browser = pytest.mark.skipif(browser.skip_reason() is not None, reason=str(browser.skip_reason()))
PAGES = pytest.mark.xdist_group("accessibility_pages")


@pytest.fixture(scope="module")
def tab(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "data:"))
                  else route.abort())          # the course's pages need no network
    yield context.new_page()
    context.close()


def open_page(tab, path, html_text: str | None = None):
    if html_text is not None:
        path.write_text(html_text, encoding="utf-8")
    tab.goto(path.as_uri())
    tab.wait_for_load_state("load")
    return tab


def scored(nb, chapter: str):
    """A score for every graded cell: full marks, the written answers awaiting grading."""
    from coursekit.report import score
    cells = []
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("grade"):
            pts = float(meta.get("points", 0))
            written = c.cell_type == "markdown"
            cells.append(score.CellScore(meta["grade_id"], pts, None if written else pts, None, answer=written))
    return score.Standing("ann", chapter, cells)


def feedback_html(nb, chapter: str) -> str:
    from coursekit.grade import feedback
    return feedback.page(nb, scored(nb, chapter), chapter)


# axe's colour-contrast rule takes most of its time (seconds a page, for every
# span of highlighted code). The feedback pages of all chapters share one
# stylesheet and one set of code colours: every rule runs on every chapter in
# both languages but contrast, which runs on two whole pages (one per language)
# and on the executed ones below; test_code_colours_meet_aa checks every colour
# the code highlighter can give, without a browser.
CONTRAST_ON = {("ch01_attention", "zh"), ("ch07_gpt", "en")}


@PAGES
@needs_browser
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_feedback_page_of_every_chapter_has_no_violation(tab, tmp_path, chapter):
    """The page of each chapter, Chinese and English: frame, prose, maths, code."""
    for lang in build.LANGS:
        nb = build.build_chapter(chapter, lang)
        page = open_page(tab, tmp_path / f"{chapter}_{lang}.html", feedback_html(nb, chapter))
        assert page.locator("html").get_attribute("lang") == {"zh": "zh-CN", "en": "en"}[lang]
        found = browser.axe(page, skip=() if (chapter, lang) in CONTRAST_ON else ("color-contrast",))
        assert found == [], f"{chapter} ({lang}):\n" + browser.axe_report(found)


def contrast(a: str, b: str) -> float:
    def lum(colour):
        h = colour.lstrip("#")
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        rgb = [int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)]
        r, g, b_ = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
        return 0.2126 * r + 0.7152 * g + 0.0722 * b_
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_code_colours_meet_aa():
    """Every token colour of the feedback page's highlighted code (Pygments'
    default style, as the course's template overrides it) has 4.5:1 against
    the code's background."""
    from pygments.formatters import HtmlFormatter

    template = (ROOT / "coursekit" / "grade" / "templates" / "course_feedback" / "index.html.j2").read_text(encoding="utf-8")
    colours = dict(re.findall(r"\.highlight (\.[a-z0-9]+) \{ color: (#[0-9A-Fa-f]+)",
                              HtmlFormatter(style="default").get_style_defs(".highlight")))
    for rule, colour in re.findall(r"([^{}]*\.highlight \.[a-z0-9]+[^{}]*)\{\s*color:\s*(#[0-9a-fA-F]+)", template):
        for cls in re.findall(r"\.highlight (\.[a-z0-9]+)", rule):
            colours[cls] = colour
    low = {cls: round(contrast(c, "#f5f5f5"), 2) for cls, c in colours.items() if contrast(c, "#f5f5f5") < 4.5}
    assert low == {}
    assert contrast("#aa22ff", "#f5f5f5") < 4.5        # the check can fail: Pygments' own purple does


@pytest.fixture(scope="module")
def executed_pages(tmp_path_factory):
    """Chapter 1 (English) and chapter 2 (Chinese) run by a kernel as a student
    runs them (figures, widgets, the calculator's tables), as feedback pages."""
    import os

    import nbformat
    from nbclient import NotebookClient

    from helpers.lab.private_kernel import PrivateKernelManager

    out = {}
    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        for chapter, lang in (("ch01_attention", "en"), ("ch02_causal_mask", "zh")):
            nb = build.build_chapter(chapter, lang)
            NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                           kernel_manager_class=PrivateKernelManager,   # no TCP port another process can take
                           resources={"metadata": {"path": str(ROOT)}}).execute()
            out[(chapter, lang)] = (nbformat.from_dict(nb), feedback_html(nb, chapter))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return out


@PAGES
@needs_browser
def test_executed_feedback_pages_have_no_violation_and_every_picture_is_described(tab, tmp_path, executed_pages):
    for (chapter, lang), (nb, page_html) in executed_pages.items():
        shown = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
        assert shown, f"{chapter}: the run drew no figure"
        page = open_page(tab, tmp_path / f"run_{chapter}.html", page_html)
        alts = page.locator("img").evaluate_all("imgs => imgs.map(i => i.getAttribute('alt') || '')")
        assert len(alts) >= len(shown) and all(alts), alts
        for alt in alts:
            assert alt_problems(alt, lang) == [], alt
        browser.shot(page, f"a11y_feedback_{chapter}_{lang}")
        found = browser.axe(page)
        assert found == [], f"{chapter} ({lang}):\n" + browser.axe_report(found)


@PAGES
@needs_browser
def test_the_check_fails_on_a_page_given_one_image_without_alt(tab, tmp_path):
    nb = build.build_chapter("ch01_attention", "en")
    page_html = feedback_html(nb, "ch01_attention")
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    bare = page_html.replace("</main>", f'<img src="data:image/png;base64,{png}"></main>', 1)
    page = open_page(tab, tmp_path / "no_alt.html", bare)
    found = browser.axe(page, skip=("color-contrast",))
    assert [v["id"] for v in found] == ["image-alt"] and browser.axe_count(found) == 1, browser.axe_report(found)


def class_course(root):
    """A small class of chapter 1 laid out as the grader leaves it: a solved
    submission, one with a known bug, a copy of the solved one (a similar
    pair), the data the report reads and the similarity pages."""
    import collections
    import shutil

    import nbformat
    from harness import make_submission

    from coursekit.report import score
    from coursekit.report.flags import Flag

    ch = "ch01_attention"
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / ch, root / part / ch)
    rel = nbformat.read(root / "release" / ch / f"{ch}.ipynb", as_version=4)
    src = nbformat.read(root / "source" / ch / f"{ch}.ipynb", as_version=4)
    wrong = {"softmax": "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"}
    subs = {"ann": make_submission(rel, src, None), "bob": make_submission(rel, src, wrong),
            "cat": make_submission(rel, src, None)}
    data = {"scores": collections.defaultdict(dict), "bugs": collections.defaultdict(collections.Counter),
            "flags": {}, "said": {}}
    for name, nb in subs.items():
        (root / "submitted" / name / ch).mkdir(parents=True)
        nbformat.write(nb, root / "submitted" / name / ch / f"{ch}.ipynb")
        st = scored(nb, ch)
        if name == "bob":
            st = score.Standing(name, ch, [score.CellScore(c.grade_id, c.max_score, 0.0 if "softmax" in c.grade_id
                                                           else c.auto, c.manual, answer=c.answer)
                                           for c in st.cells])
        data["scores"][ch][name] = st
        data["flags"][(name, ch)] = [Flag("restored_cells", "test_softmax")] if name == "bob" else []
    data["bugs"][(ch, "test_softmax")]["softmax_unstable"] = 1
    data["said"]["softmax_unstable"] = "softmax overflows for large inputs: subtract the row maximum first."
    return data


@PAGES
@needs_browser
@pytest.mark.parametrize("lang", build.LANGS)
def test_class_report_and_similarity_pages_have_no_violation(tab, tmp_path, lang):
    import types

    from coursekit.report import report, similarity

    ch = "ch01_attention"
    data = class_course(tmp_path)
    jobs = [types.SimpleNamespace(student=s, chapter=ch) for s in data["scores"][ch]]
    page = open_page(tab, tmp_path / "class_report.html", report.render(tmp_path, data, jobs, {ch: lang}))
    assert page.locator("html").get_attribute("lang") == {"zh": "zh-CN", "en": "en"}[lang]
    assert page.locator("svg[role='img']").count() == 2 and page.locator("table").count() >= 3
    browser.shot(page, f"a11y_class_report_{lang}")
    found = browser.axe(page)
    assert found == [], browser.axe_report(found)
    pairs = similarity.chapter_pairs(tmp_path, ch, tmp_path / "reports" / "similar", lang=lang)
    assert pairs and (pairs[0].a, pairs[0].b) == ("ann", "cat")
    page = open_page(tab, tmp_path / "reports" / pairs[0].view)
    assert page.locator("mark").count() > 0
    browser.shot(page, f"a11y_similarity_{lang}")
    found = browser.axe(page)
    assert found == [], browser.axe_report(found)


# ------------------------------------------------------------------ JupyterLab, each chapter open

# One JupyterLab per language, the chapters opened in turn (prose and maths
# rendered). In Chinese every chapter with a main widget is run (Run All) and
# its widget played from the keyboard; in English three chapters are run, for
# the widgets' English labels. A chapter that runs in seconds is run whole; one
# that trains for minutes is cut after its main widget (the cells it needs,
# training shortened as tests/catalogue says) and keeps all its prose. The
# figures of the chapters not run here are checked above, without a browser.
RUN_WHOLE = ("ch01_attention", "ch02_causal_mask", "ch03_multi_head", "ch05_block", "ch06_param_count",
             "ch08_efficiency", "ch12_quiz")
RUN_IN_ENGLISH = ("ch01_attention", "ch02_causal_mask", "ch06_param_count")
CONTENT = {"include": [[".jp-Notebook .jp-RenderedMarkdown"], [".jp-Notebook .jp-OutputArea-output"]]}
LAB_EXTENSIONS = ROOT / "helpers" / "lab" / "labextension"


def widget_spec(chapter: str) -> dict:
    import importlib
    return importlib.import_module(f"catalogue.{chapter}").WIDGET


def lab_notebook(chapter: str, lang: str):
    """The chapter as a student who solved it has it (hidden tests cleared),
    in ``lang``; cut after its main widget unless it runs in seconds."""
    from nbgrader.preprocessors import ClearHiddenTests

    nb, _ = ClearHiddenTests().preprocess(build.build_chapter(chapter, lang), {})
    if chapter in RUN_WHOLE:
        return nb
    spec = widget_spec(chapter)
    last = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and spec["cell"] in c.source)
    code = [i for i, c in enumerate(nb.cells[:last + 1]) if c.cell_type == "code"]
    keep = set(code[:2]) | {last}
    keep |= {i for i in code if nb.cells[i].metadata.get("nbgrader", {}).get("solution")}
    keep |= {i for i in code for needle in spec.get("keep", ()) if needle in nb.cells[i].source}
    for old, new in spec.get("edits", {}).items():
        for i in keep:
            nb.cells[i].source = nb.cells[i].source.replace(old, new)
    nb.cells = [c for i, c in enumerate(nb.cells) if i in keep or c.cell_type == "markdown"]
    return nb


class CourseLab(browser.Lab):
    """JupyterLab as a student's: the course's own extension (Validate, live
    regions for the widgets, visible focus) loaded beside nbgrader's."""

    extra_args = [f"--LabApp.extra_labextensions_path={LAB_EXTENSIONS}", "--LabApp.expose_app_in_browser=True"]
    in_app = True     # each chapter opened in the running JupyterLab (browser.OPEN_IN_APP)


@pytest.fixture(scope="module")
def lab_page(tmp_path_factory, chromium):
    tmp = tmp_path_factory.mktemp("a11y_lab")
    lab = CourseLab(browser.course_copy(tmp / "course"), tmp / "home")
    lab.start()
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.console = browser.Console(page)
    yield lab, page
    context.close()
    lab.stop()
    page.console.save("accessibility_lab")


SNAPSHOT = """() => { const w = document.querySelector('.lab-a11y-cell .jp-Cell-outputArea');
    return w.innerText + [...w.querySelectorAll('img')].map(i => i.src.length + i.src.slice(-64)).join(); }"""
CONTROLS = """w => [...w.querySelectorAll('button, input, select, textarea, [role=slider], [tabindex]')]
    .filter(e => e.tabIndex >= 0 && !e.disabled && e.offsetParent !== null)"""


def focused(page) -> dict:
    return page.evaluate("""() => { const e = document.activeElement;
        const s = getComputedStyle(e);
        const name = e.getAttribute('aria-label') || e.labels?.[0]?.textContent || e.textContent
                     || e.closest('.widget-inline-hbox, .jupyter-widgets')?.querySelector('label')?.textContent || '';
        return {tag: e.tagName.toLowerCase(), type: e.type || '', role: e.getAttribute('role') || '',
                last: e.tagName === 'SELECT' && e.selectedIndex === e.options.length - 1,
                name: name.trim(), ring: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0
                      || s.boxShadow !== 'none', inWidget: !!e.closest('.lab-a11y-cell .jp-Cell-outputArea')}; }""")


def play_from_the_keyboard(page, widget, start: str | None = None) -> list[str]:
    """Tab into the widget from just before it, through every control (each
    must take focus, show it, and have a name), then change the first control
    (or the one named ``start``: the chapter's WIDGET ``play``, where the first
    has nothing to change in the widget's first state) with the keys people
    expect for it, and see the widget's output change. Returns what went wrong."""
    problems = []
    page.evaluate("() => document.querySelectorAll('.lab-a11y-cell').forEach(c => c.classList.remove('lab-a11y-cell'))")
    widget.evaluate("w => w.closest('.jp-Cell').classList.add('lab-a11y-cell')")
    count = widget.evaluate(f"w => ({CONTROLS})(w).length")
    widget.evaluate("""w => { const before = w.closest('.jp-OutputArea-output') || w;
                             before.tabIndex = -1; before.focus(); }""")
    seen = []
    for _ in range(count):
        page.keyboard.press("Tab")
        f = focused(page)
        if not f["inWidget"]:
            problems.append(f"Tab left the widget after {len(seen)} of its {count} controls ({f})")
            break
        seen.append(f)
        if not f["ring"]:
            problems.append(f"no visible focus on {f}")
        if not f["name"]:
            problems.append(f"a control without a name a screen reader reads: {f}")
    if not seen:
        return problems or ["no control of the widget takes focus with Tab"]
    # back to the first control (Shift+Tab); act on it with the keys people
    # expect for it, and on the next ones until the widget's output changes
    for _ in range(len(seen) - 1):
        page.keyboard.press("Shift+Tab")
    if start:
        if start not in [f["name"] for f in seen]:
            return problems + [f"the widget has no control named {start!r}: {[f['name'] for f in seen]}"]
        while focused(page)["name"] != start:
            page.keyboard.press("Tab")
    tried = []
    for _ in range(min(3, len(seen))):
        f = focused(page)
        before = page.evaluate(SNAPSHOT)
        keys = keys_for(f, page.evaluate("() => document.activeElement.className") or "")
        for key in keys:
            page.keyboard.press(key)
        tried.append((f["name"], keys))
        try:
            page.wait_for_function(f"b => ({SNAPSHOT})() !== b", arg=before, timeout=15_000)
            return problems
        except Exception:  # noqa: BLE001 - the next control, then reported below
            if "Tab" not in keys:
                page.keyboard.press("Tab")
            if not focused(page)["inWidget"]:
                break
    return problems + [f"no key changed what the widget shows: {tried}"]


def announced(page) -> list[str]:
    """Chapter 2's calculator says each new stage in a polite live region
    (after the keyboard moved it to stage 2): what is wrong with it. The
    kernel's reply may come late on a busy machine: the region gets 20 s to
    say stage 2 before it is read."""
    try:
        page.wait_for_function("""() => { const e = document.querySelector('.lab-a11y-cell .course-live');
            return e && e.innerText.includes('第 2 步，共 5 步'); }""", timeout=20_000)
    except Exception:  # noqa: BLE001 (what it says instead is reported below)
        pass
    live = page.evaluate("""() => { const e = document.querySelector('.lab-a11y-cell .course-live');
        return e && {role: e.getAttribute('role'), live: e.getAttribute('aria-live'), text: e.innerText}; }""")
    if not live:
        return ["the calculator has no live region"]
    wrong = [] if (live["role"], live["live"]) == ("status", "polite") else [f"not a polite live region: {live}"]
    return wrong + ([] if "第 2 步，共 5 步" in live["text"] else [f"the live region does not say stage 2: {live}"])


def keys_for(f: dict, classes: str) -> list[str]:
    """The keys a keyboard user presses to change a control of this kind."""
    if f["role"] == "slider" or f["type"] == "range":
        return ["ArrowUp"]               # (JupyterLab's notebook takes ArrowUp unless the course's extension stops it)
    if f["tag"] == "select":
        return ["ArrowUp" if f["last"] else "ArrowDown"]
    if f["tag"] == "textarea":
        return ["End", "Backspace", "Tab"]           # a text area takes its new text when left
    if f["tag"] == "input" and f["type"] in ("text", "number", ""):
        return ["End", "Backspace", "Enter"]
    if f["type"] == "checkbox" or "widget-toggle-button" in classes:
        return ["Space"]
    return ["Enter"]


def open_chapter(page, lab, chapter: str, lang: str, run: bool):
    import nbformat

    rel = f"a11y/{lang}/{chapter}.ipynb"
    (lab.root / "a11y" / lang).mkdir(parents=True, exist_ok=True)
    nb_doc = lab_notebook(chapter, lang)
    nbformat.write(nb_doc, lab.root / rel)
    for given in build.given_files(chapter):      # what the chapter hands out beside its notebook
        shutil.copy(given, lab.root / "a11y" / lang / given.name)
    nb = browser.Notebook(page, lab, rel, timeout_ms=180_000)
    not_run = nb.run_all(timeout_ms=240_000) if run else []
    return nb, nb_doc, not_run


def lab_check(lab_page, lang: str) -> tuple[dict, dict, list]:
    """Each chapter opened (and run, where cheap) in ``lang``: axe's findings
    inside the course's content, what each widget did under the keyboard,
    and axe's findings on the whole of JupyterLab once."""
    import time

    lab, page = lab_page
    content, keyboard, whole, times, maths = {}, {}, [], {}, {}
    # In English, the chapters it runs: every chapter's English prose, maths and code is
    # checked on its feedback page (test_feedback_page_of_every_chapter_has_no_violation), and
    # JupyterLab renders both languages' markdown with the same renderer.
    for chapter in CHAPTERS if lang == "zh" else [ch for ch in CHAPTERS if ch in RUN_IN_ENGLISH]:
        start = time.monotonic()
        spec = widget_spec(chapter)
        run = chapter in RUN_IN_ENGLISH if lang == "en" else spec.get("ipywidgets", True)
        nb, nb_doc, not_run = open_chapter(page, lab, chapter, lang, run)
        assert not_run == [] and nb.error_outputs() == [], (chapter, lang, not_run, nb.error_outputs())
        if run and spec.get("ipywidgets", True):
            index = next(i for i, c in enumerate(nb_doc.cells) if c.cell_type == "code" and spec["cell"] in c.source)
            widget = nb.cell(index).locator(".jupyter-widgets.widget-vbox").first
            widget.wait_for()
            widget.scroll_into_view_if_needed()
            if lang == "zh":
                # what test_browser.py's test_chapter_widget_renders checks, here where the chapter runs
                # anyway, before the keyboard changes it
                browser.widget_shows(page, chapter, spec, widget)
                keyboard[chapter] = play_from_the_keyboard(page, widget, spec.get("play"))
                if chapter == "ch02_causal_mask":
                    keyboard[chapter] += announced(page)
                browser.shot(widget, f"a11y_keyboard_{chapter}")
        page.wait_for_timeout(500)
        content[chapter] = browser.axe(page, CONTENT)
        if chapter == "ch01_attention":
            browser.shot(page, f"a11y_lab_{chapter}_{lang}")
            whole = browser.axe(page)
            maths[lang] = page.evaluate(MATHS)
        lab.shutdown_kernels()
        times[chapter] = round(time.monotonic() - start, 1)
    browser.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (browser.ARTIFACTS / f"a11y_lab_{lang}.txt").write_text(
        f"seconds per chapter: {times}\n\nJupyterLab itself (whole page, ch01 open):\n{browser.axe_report(whole)}\n",
        encoding="utf-8")
    return content, keyboard, whole, maths


# MathJax 3 in JupyterLab 4.6 (enableAssistiveMml) puts beside each drawn formula
# a visually hidden MathML copy that screen readers read: count the formulas,
# those with that copy, and whether a fraction over a root with a subscript
# (chapter 1's q·k/√d_k) keeps its structure there.
MATHS = """() => { const all = [...document.querySelectorAll('.jp-RenderedMarkdown mjx-container')];
    const mml = all.filter(c => c.querySelector('mjx-assistive-mml > math'));
    return {formulas: all.length, assistive: mml.length,
            fraction: mml.some(c => c.querySelector('mjx-assistive-mml mfrac msqrt msub')),
            hidden_drawing: all.every(c => c.querySelector('mjx-math')?.getAttribute('aria-hidden') === 'true')}; }"""


@needs_browser
@pytest.mark.parametrize("lang", [pytest.param(lang, marks=pytest.mark.xdist_group(f"accessibility_lab_{lang}"))
                                  for lang in build.LANGS])
def test_jupyterlab_with_each_chapter_open(lab_page, lang):
    """Inside JupyterLab the course's content (rendered prose and maths, every
    output, every widget) breaks no WCAG 2.1 AA rule; in Chinese every main
    widget is reachable, named and playable from the keyboard. What JupyterLab
    itself breaks is listed in the README and written to tests/artifacts."""
    content, keyboard, whole, maths = lab_check(lab_page, lang)
    assert maths[lang]["formulas"] > 10 and maths[lang]["assistive"] == maths[lang]["formulas"], maths
    assert maths[lang]["fraction"] and maths[lang]["hidden_drawing"], maths
    found = {ch: browser.axe_report(v) for ch, v in content.items() if v}
    assert found == {}, "\n".join(f"{ch}:\n{r}" for ch, r in found.items())
    assert {ch: p for ch, p in keyboard.items() if p} == {}
    if lang == "zh":
        widgets = {ch for ch in CHAPTERS if widget_spec(ch).get("ipywidgets", True)}
        assert set(keyboard) == widgets
    own = {v["id"] for v in whole}
    assert own <= KNOWN_IN_JUPYTERLAB, f"JupyterLab breaks a rule the README does not list: {own - KNOWN_IN_JUPYTERLAB}"


# What axe finds in JupyterLab 4.6 itself (README, "Accessibility"): code editors
# without a name, toolbar buttons with aria-pressed, the heading-collapse buttons
# without a name, the notebook's "feed" holding cells of another role, and the
# editor's scroller of a code line wider than the cell, which axe sees as a scrolling
# region with nothing focusable in it (CodeMirror's own; the caret scrolls it).
KNOWN_IN_JUPYTERLAB = {"aria-input-field-name", "aria-allowed-attr", "button-name", "aria-required-children",
                       "scrollable-region-focusable"}


# ------------------------------------------------------------------ maths a screen reader can read

@pytest.mark.parametrize("lang", build.LANGS)
def test_feedback_maths_is_mathml_with_its_structure(lang):
    """Each formula of chapter 1's page is a <math> element a screen reader
    reads as maths (fractions, roots, sub- and superscripts as elements, the
    TeX kept as an annotation), and no TeX is left as text in the prose."""
    from html.parser import HTMLParser

    page = feedback_html(build.build_chapter("ch01_attention", lang), "ch01_attention")

    class Maths(HTMLParser):
        def __init__(self):
            super().__init__()
            self.stack, self.formulas, self.prose = [], [], []

        def handle_starttag(self, tag, attrs):
            if tag == "math":
                self.formulas.append([])
            if self.stack and self.stack[0] == "math" or tag == "math":
                self.formulas[-1].append("/".join([*self.stack, tag]))
                self.stack.append(tag)

        def handle_endtag(self, tag):
            if self.stack and tag == self.stack[-1]:
                self.stack.pop()

        def handle_data(self, data):
            if not self.stack:
                self.prose.append(data)

    p = Maths()
    p.feed(page)
    assert len(p.formulas) > 10
    paths = {path for f in p.formulas for path in f}
    for structure in ("mfrac/mrow/mi", "msqrt/msub/mi", "msup/mrow", "math/semantics/annotation"):
        assert any(structure in path for path in paths), structure
    # q·k / √d_k: a fraction whose denominator is a root of a subscript
    assert any(any(path.endswith("mfrac/msqrt/msub") for path in f) for f in p.formulas)
    prose = "".join(p.prose)
    assert "\\frac" not in prose and "\\sqrt" not in prose and "$$" not in prose
