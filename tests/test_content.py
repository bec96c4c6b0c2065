"""What the chapters say is true of what they run, and every figure can draw its text.

Two kinds of test live here:
- the course font: the shipped subset has every Chinese character the chapters
  and helpers use, and figures render with it alone (no system CJK font) without
  a single missing-glyph warning;
- the numbers in the prose: each chapter's source build (solutions included) is
  run in-process, once per language, and the numbers its text states are checked
  against what its cells print (or against the data they come from).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import warnings
from functools import lru_cache
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from fontTools.ttLib import TTFont  # noqa: E402
from matplotlib import font_manager  # noqa: E402

from coursekit import build  # noqa: E402
from helpers import plots, set_language  # noqa: E402
from helpers.fonts import make_subset  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")
# ch07 trains for minutes; its figures are drawn from a small model in test_ch07_figures
RUN = ("ch01_attention", "ch02_causal_mask", "ch03_multi_head", "ch04_positions", "ch05_block",
       "ch06_param_count", "ch08_efficiency")


# ------------------------------------------------------------------ the font

def _cmap(path) -> set[int]:
    return set(TTFont(str(path), fontNumber=0).getBestCmap())


def test_font_subset_has_every_chinese_character_a_figure_can_show():
    have = _cmap(plots.FONT_FILE)
    text = make_subset.figure_text()
    missing = sorted({c for c in text if make_subset.is_cjk(ord(c)) and ord(c) not in have})
    assert not missing, ("the font subset lacks " + "".join(missing)
                         + ": rerun python -m helpers.fonts.make_subset (see its docstring)")


def test_every_other_symbol_is_drawn_by_the_subset_or_dejavu():
    have = _cmap(plots.FONT_FILE) | _cmap(font_manager.findfont("DejaVu Sans"))
    missing = sorted({c for c in make_subset.figure_text() if ord(c) > 0x7F and ord(c) not in have})
    assert not missing, "no font draws " + "".join(missing)


def test_font_ships_with_its_licence():
    licence = (plots.FONT_FILE.parent / "OFL.txt").read_text(encoding="utf-8")
    assert "SIL OPEN FONT LICENSE Version 1.1" in licence and "Reserved Font Name" in licence
    assert plots.FONT_FILE.stat().st_size < 1_000_000       # a subset, not the 16 MB font


@lru_cache(maxsize=None)
def _system_cjk_fonts() -> tuple:
    """The installed fonts with Chinese glyphs (each font file is opened once per run)."""
    ours = str(plots.FONT_FILE)
    out = []
    for entry in font_manager.fontManager.ttflist:
        if entry.fname == ours or "DejaVu" in entry.name:
            continue
        with contextlib.suppress(Exception):
            if 0x4E00 in _cmap(entry.fname):
                out.append(entry)
    return tuple(out)


class _GlyphLog(logging.Handler):
    """matplotlib's mathtext reports a missing glyph through logging, not warnings."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        if "glyph" in record.getMessage().lower():
            self.messages.append(record.getMessage())


@contextlib.contextmanager
def only_course_font():
    """No system CJK font, every warning recorded: yields the list of
    missing-glyph messages seen inside the block."""
    manager = font_manager.fontManager
    saved = list(manager.ttflist)
    system = _system_cjk_fonts()
    manager.ttflist = [f for f in saved if f not in system]
    font_manager._get_font.cache_clear()
    manager._findfont_cached.cache_clear()
    handler = _GlyphLog()
    logging.getLogger("matplotlib").addHandler(handler)
    problems: list[str] = []
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            yield problems
        problems += [str(w.message) for w in seen if "missing from font" in str(w.message)]
        problems += handler.messages
    finally:
        logging.getLogger("matplotlib").removeHandler(handler)
        manager.ttflist = saved
        manager._findfont_cached.cache_clear()


def _draw_open_figures() -> int:
    n = 0
    for num in plt.get_fignums():
        plt.figure(num).canvas.draw()
        n += 1
    plt.close("all")
    return n


def test_a_figure_with_every_course_character_draws_without_a_missing_glyph():
    text = "".join(sorted({c for c in make_subset.figure_text() if ord(c) > 0x7F and not c.isspace()}))
    with only_course_font() as problems:
        plots.setup()
        fig, ax = plt.subplots(figsize=(12, 6))
        ax.set_yscale("log")                      # log ticks are mathtext: $\mathdefault{10^{-1}}$
        ax.plot([1, 2, 3], [0.05, 0.3, 2.0])
        for i in range(0, len(text), 60):
            ax.text(0.01, 0.95 - 0.04 * (i // 60), text[i:i + 60], transform=ax.transAxes, fontsize=7)
        ax.set_title("分数分布 $\\sqrt{d_k}$ $W_2\\cdot$GELU($xW_1$) −1 × 2")
        _draw_open_figures()
    assert not problems, problems[:5]


def test_the_check_catches_a_character_the_subset_lacks():
    with only_course_font() as problems:
        plots.setup()
        fig, ax = plt.subplots()
        ax.set_title("\u9fa5")                    # 龥: in no chapter, so not in the subset
        _draw_open_figures()
    assert any("missing" in p for p in problems)


# ------------------------------------------------- running a chapter in-process

def _exec_cells(nb) -> tuple[list[str], int]:
    """Run the code cells of a built notebook in one namespace, as a kernel
    would; return what each cell printed and how many figures were drawn."""
    ns: dict = {"__name__": "__chapter__"}
    outputs, figures = [], 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            outputs.append("")
            continue
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(cell.source, "<cell>", "exec"), ns)
        outputs.append(buf.getvalue())
        figures += _draw_open_figures()
    return outputs, figures


@lru_cache(maxsize=None)
def chapter_run(chapter: str, lang: str) -> tuple[tuple[str, ...], str, int, tuple[str, ...]]:
    """(outputs per cell, all the prose, figures drawn, missing-glyph messages)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    nb = build.build_chapter(chapter, lang)
    set_language(lang)
    drawn = []
    real_draw = FigureCanvasAgg.draw

    def counting_draw(canvas):            # show_widget saves and closes its picture itself: count every draw
        drawn.append(canvas.figure)
        return real_draw(canvas)

    FigureCanvasAgg.draw = counting_draw
    try:
        with only_course_font() as problems:
            outputs, _ = _exec_cells(nb)
    finally:
        FigureCanvasAgg.draw = real_draw
        set_language("zh")
    figures = len({id(f) for f in drawn})
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return tuple(outputs), prose, figures, tuple(problems)


def printed(chapter: str, lang: str) -> str:
    return "\n".join(chapter_run(chapter, lang)[0])


@lru_cache(maxsize=None)
def prose(chapter: str, lang: str) -> str:
    """The chapter's markdown in one language (no need to run anything)."""
    return "\n".join(c.source for c in build.build_chapter(chapter, lang).cells if c.cell_type == "markdown")


@pytest.mark.parametrize("lang", build.LANGS)
@pytest.mark.parametrize("chapter", RUN)
def test_every_figure_of_the_chapter_draws_its_text(chapter, lang):
    _, _, figures, problems = chapter_run(chapter, lang)
    assert figures > 0
    assert not problems, f"{chapter} ({lang}): {problems[:5]}"


def test_ch07_figures_draw_their_text():
    import torch

    from helpers import ch07_gpt
    with only_course_font() as problems:
        for lang in build.LANGS:
            set_language(lang)
            sentence, maps = "ROMEO:\nBut soft", torch.rand(2, 2, 15, 15).numpy()
            ch07_gpt.grid_figure(sentence, maps)
            ch07_gpt.head_figure(sentence, maps, 1, 2)
            _draw_open_figures()
        set_language("zh")
    assert not problems, problems[:5]


def test_training_progress_bar_shows_the_time_budget(capsys):
    import torch
    from torch import nn

    from helpers import training

    class Bigram(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Embedding(8, 8)

        def forward(self, x, y=None):
            logits = self.table(x)
            loss = None if y is None else nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
            return logits, loss

    def get_batch(data, block, batch, generator=None):
        i = torch.randint(len(data) - block - 1, (batch,), generator=generator)
        return torch.stack([data[j:j + block] for j in i]), torch.stack([data[j + 1:j + block + 1] for j in i])

    data = torch.randint(8, (2_000,), generator=torch.Generator().manual_seed(0))
    recipe = training.scaled(training.COURSE_RECIPE, n_ctx=8, batch_size=4, threads=1)
    hist = training.train(Bigram(), get_batch, data, data, recipe, seconds=1.0, eval_every=5.0, eval_tokens=64)
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert re.search(r"1/1 s", bar) and "?" not in bar and f"step={hist.steps[-1]}" in bar, bar


# --------------------------------------------------------- ch01's numbers

def test_ch01_rnn_steps_are_n_minus_1_in_text_and_code():
    for lang, steps in (("zh", "127 步"), ("en", "127 steps")):
        assert "$n-1$" in prose("ch01_attention", lang) and "$n$ 步" not in prose("ch01_attention", lang)
        assert steps in printed("ch01_attention", lang)


def test_ch01_saturation_numbers_are_the_printed_ones():
    out = printed("ch01_attention", "en")
    unscaled = [float(v) for v in re.search(r"unscaled: \[(.*?)\]", out).group(1).split(",")]
    scaled = [float(v) for v in re.search(r"scaled:\s+\[(.*?)\]", out).group(1).split(",")]
    top2 = sorted(unscaled)[-2:]
    many = dict(re.findall(r"1000 queries, (\w+): largest weight ([\d.]+)", out))
    share = dict(re.findall(r"1000 queries, (\w+): .*above 0.9 in (\d+)%", out))
    for lang, words in (("zh", "和"), ("en", "and")):
        text = prose("ch01_attention", lang)
        assert f"{top2[1]:.2f} {words} {top2[0]:.2f}" in text
        assert f"{max(scaled):.2f}" in text
        assert many["unscaled"] in text and many["scaled"] in text
    assert sum(v == 0.0 for v in unscaled) == 6 and "六个" in prose("ch01_attention", "zh")
    assert 70 <= int(share["unscaled"]) <= 80            # "three rows in four" / "四分之三"
    assert share["scaled"] == "0"


def test_ch01_slider_text_matches_the_weights_it_draws():
    from helpers import ch01_attention as ch01
    assert round(float(ch01.weight_row(128).max()), 2) == 1.00
    assert all(ch01.weight_row(d, scaled=True).max() < 0.3 for d in ch01.D_K_CHOICES)
    assert "0.3" in prose("ch01_attention", "zh") and "under 0.3" in prose("ch01_attention", "en")


def test_ch01_exercise_3_says_what_a_fully_masked_row_gives():
    import torch
    x = torch.full((1, 3), float("-inf"))
    m = x.amax(dim=-1, keepdim=True)
    assert torch.isnan(torch.exp(x - m) / torch.exp(x - m).sum(-1, keepdim=True)).all()
    assert torch.isnan(torch.softmax(x, dim=-1)).all()
    assert "nan" in prose("ch01_attention", "zh") and "`nan`" in prose("ch01_attention", "en")


# --------------------------------------------------------- ch02, ch04

def test_ch02_scores_are_scaled_by_sqrt_d_k_and_bert_masks_padding():
    for lang in build.LANGS:
        text = prose("ch02_causal_mask", lang)
        assert "\\sqrt d}" not in text and "\\sqrt{d_k}" in text
    assert "padding" in prose("ch02_causal_mask", "zh") and "padding" in prose("ch02_causal_mask", "en")
    from helpers.ch02_causal_mask import calculator
    first = calculator.stage(1)
    assert [m.name for m in first.weights] == ["W_Q", "W_K", "W_V"]
    r = calculator.compute()
    assert abs(r["Q"][0, 0] - sum(r["X"][0, i] * first.weights[0].values[i, 0] for i in range(4))) < 1e-9


def test_ch04_permuted_rotate_half_gives_the_adjacent_scores():
    out = printed("ch04_positions", "en")
    same = float(re.search(r"same weights: largest difference ([\d.e+-]+)", out).group(1))
    permuted = float(re.search(r"columns reordered: largest difference ([\d.e+-]+)", out).group(1))
    assert same > 1.0 and permuted < 1e-10
    assert "Meta" in prose("ch04_positions", "zh") and "Hugging Face" in prose("ch04_positions", "en")
    assert "距离 $k$" not in prose("ch04_positions", "zh") and "distance $k$" not in prose("ch04_positions", "en")


# --------------------------------------------------------- ch05

def test_ch05_gradient_text_matches_the_experiment():
    out = printed("ch05_block", "en")
    block = out[out.index("layer Pre-LN   Post-LN"):].split("\n\n")[0]     # not the residual-stream table after it
    rows = re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)$", block, re.M)
    table = {int(layer): (float(pre), float(post)) for layer, pre, post in rows}
    (pre1, post1), (pre24, post24) = table[1], table[24]
    assert post1 < pre1                       # Post-LN is NOT larger at every layer
    assert post24 / pre24 > 4                 # "more than 4 times" at the top
    for lang in build.LANGS:
        text = prose("ch05_block", lang)
        for value in (pre1, post1, pre24, post24):
            assert f"{value:.2f}" in text, (lang, value)
    assert "每一层收到的梯度都更大" not in prose("ch05_block", "zh")
    assert "several times larger at every layer" not in prose("ch05_block", "en")


def test_ch05_ffn_share_per_block_and_for_gpt2_small():
    out = printed("ch05_block", "en")
    share = re.search(r"the 12 FFNs ([\d.]+)%", out).group(1)
    total = re.search(r"whole model: ([\d,]+) parameters", out).group(1)
    assert total == "124,439,808" and abs(float(share) - 45.5) < 0.05
    d = 768
    assert abs(12 * (8 * d * d + 5 * d) / int(total.replace(",", "")) - 0.455) < 0.0005
    for lang in build.LANGS:
        assert f"{share}%" in prose("ch05_block", lang) and total in prose("ch05_block", lang)


def test_ch05_warm_up_and_initialisation_are_stated_as_they_are():
    zh, en = prose("ch05_block", "zh"), prose("ch05_block", "en")
    assert "按原论文的方式初始化" not in zh and "as in the original paper (Xavier)" not in en
    assert "need no warm-up" not in en and "不需要 warm-up" not in zh
    assert "*requires*" in en and "**必须**" in zh


# --------------------------------------------------------- ch07

def _nanogpt_runs() -> list[dict]:
    runs = []
    for path in sorted((ROOT / "bench" / "results").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            name = (r.get("recipe") or r.get("ch") or {}).get("name")
            if name in ("nanogpt_cpu", "nano"):
                runs.append({"loss": r.get("val_loss", r.get("val")), "s": r.get("train_seconds", r.get("train_s"))})
    return runs


def test_ch07_reference_run_is_the_one_kept_in_bench_results():
    runs = _nanogpt_runs()
    assert len(runs) == 4
    lo, hi = min(r["loss"] for r in runs), max(r["loss"] for r in runs)
    s_lo, s_hi = min(r["s"] for r in runs), max(r["s"] for r in runs)
    text = {lang: "\n".join(c.source for c in build.build_chapter("ch07_gpt", lang).cells
                            if c.cell_type == "markdown") for lang in build.LANGS}
    assert f"{lo:.2f} 到 {hi:.2f}" in text["zh"] and f"{lo:.2f} to {hi:.2f}" in text["en"]
    assert f"{s_lo:.0f} 到 {s_hi:.0f} 秒" in text["zh"] and f"{s_lo:.0f} to {s_hi:.0f} seconds" in text["en"]
    assert all("1.886" not in t for t in text.values())
    for needle in ("1/\\sqrt{2L}", "AdamW", "0.1", "1.0"):
        assert all(needle in t for t in text.values()), needle


def test_ch07_head_scores_in_the_text_are_the_kept_runs():
    kept = json.loads((ROOT / "bench" / "results" / "ch07_head_report.json").read_text())["runs"]
    best = sorted(r["previous_character"][0][1] for r in kept)
    baseline = kept[0]["uniform_baseline"]
    assert all(b > 5 * baseline for b in best) and all(b < 0.8 for b in best)   # well above uniform, no clean line
    zh, en = prose("ch07_gpt", "zh"), prose("ch07_gpt", "en")
    assert f"分别是 {best[0]:.2f} 和 {best[1]:.2f}，远高于均匀对照（约 {baseline:.2f}）" in zh
    assert f"gave {best[0]:.2f} and {best[1]:.2f}, far above the uniform baseline (about {baseline:.2f})" in en


def test_ch07_recipe_reasons_match_the_training_code():
    from helpers import training
    recipe = training.COURSE_RECIPE
    assert recipe.weight_decay == 0.1 and recipe.grad_clip == 1.0 and recipe.warmup > 0 and recipe.lr == 4e-3


# --------------------------------------------------------- ch08

def test_ch08_cache_sizes_in_gib_and_gb():
    mha = 2 * 80 * 32_768 * 8192 * 2                 # LLaMA-2 70B, MHA, 32K tokens, fp16
    assert mha / 2**30 == 80 and round(mha / 1e9, 1) == 85.9 and mha / 8 / 2**30 == 10
    assert "85.9 GB" in prose("ch08_efficiency", "zh") and "85.9 GB" in prose("ch08_efficiency", "en")
    assert "MLA" in prose("ch08_efficiency", "zh") and "MLA" in prose("ch08_efficiency", "en")
    assert "几乎所有新模型都用 GQA" not in prose("ch08_efficiency", "zh")


def test_ch08_crossover_is_explained_and_printed():
    out = printed("ch08_efficiency", "en")
    assert re.search(r"measured crossover: the scores are slower from n = \d+ on \(the FLOP count says n = 6d = 384\)",
                     out)
    share = int(re.search(r"at n = 512, (\d+)% of the score time", out).group(1))
    assert 0 <= share < 100
    assert "6d=384" in prose("ch08_efficiency", "en").replace(" ", "")
    assert "逐位相同（在浮点误差内）" not in prose("ch08_efficiency", "zh")
    assert "只取决于第 $j$ 个 token 本身" not in prose("ch08_efficiency", "zh")


# --------------------------------------------------------- widget + picture, one output

def test_show_widget_puts_the_widget_and_its_picture_in_one_output(monkeypatch):
    import ipywidgets as W
    from IPython import display as ipd

    shown = []
    monkeypatch.setattr(ipd, "display", lambda obj, raw=False: shown.append((obj, raw)))
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    plots.show_widget(W.IntSlider(), fig)
    (bundle, raw), = shown
    assert raw and set(bundle) == {"text/plain", "application/vnd.jupyter.widget-view+json", "image/png"}
    assert bundle["image/png"].startswith("iVBOR")          # base64 of a PNG header
    assert fig.number not in plt.get_fignums()              # closed: the inline backend must not show it again
