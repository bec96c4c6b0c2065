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

from coursekit.author import build  # noqa: E402
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


DRAW_HOOKS: list = []     # each called as hook(chapter, lang, figure) after a chapter run draws a figure


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
        result = real_draw(canvas)
        for hook in DRAW_HOOKS:
            hook(chapter, lang, canvas.figure)
        return result

    FigureCanvasAgg.draw = counting_draw
    try:
        with only_course_font() as problems, _quick_experiments(chapter):
            outputs, _ = _exec_cells(nb)
    finally:
        FigureCanvasAgg.draw = real_draw
        set_language("zh")
    figures = len({id(f) for f in drawn})
    prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    return tuple(outputs), prose, figures, tuple(problems)


QUICK_STEPS = 40   # chapter 4's experiment in the suite: each model trained this many steps, not 800


@contextlib.contextmanager
def _quick_experiments(chapter: str):
    """Chapter 4's experiment (four models, 800 steps each: 45-70 s here) trained briefly:
    what the suite reads of its run is the table's form and its figure; its numbers are the
    kept runs' (bench/results/extrapolation_seeds.json, checked against the experiment's
    code by test_ch04_extrapolation_text_is_what_the_experiment_prints). The whole
    experiment runs with COURSE_RUN_TRAINING_CHAPTERS=1."""
    import dataclasses
    import os

    if chapter != "ch04_positions" or os.environ.get("COURSE_RUN_TRAINING_CHAPTERS"):
        yield
        return
    from helpers import extrapolation
    real = extrapolation.run

    def quick(sinusoidal_encoding, apply_rope, s=None, progress=True):
        s = s or extrapolation.Setup()
        return real(sinusoidal_encoding, apply_rope, dataclasses.replace(s, steps=min(QUICK_STEPS, s.steps)), progress)
    extrapolation.run = quick
    try:
        yield
    finally:
        extrapolation.run = real


def printed(chapter: str, lang: str) -> str:
    return "\n".join(chapter_run(chapter, lang)[0])


def code_hash(chapter: str) -> str:
    """A fingerprint of what a chapter runs: its code cells (English build), except
    the graded test cells, whose checks print nothing the text quotes."""
    import hashlib

    nb = build.build_chapter(chapter, "en")
    cells = [c.source for c in nb.cells
             if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]
    return hashlib.sha256("\n\x00".join(cells).encode()).hexdigest()[:16]


KEPT = ROOT / "bench" / "results" / "chapter_outputs"


@lru_cache(maxsize=None)
def kept_output(chapter: str) -> str:
    """What a chapter that trains for minutes printed: the run kept by
    bench/chapter_outputs.py, or a fresh run with COURSE_RUN_TRAINING_CHAPTERS=1."""
    import os

    if os.environ.get("COURSE_RUN_TRAINING_CHAPTERS"):
        return printed(chapter, "en")
    kept = json.loads((KEPT / f"{chapter}.json").read_text(encoding="utf-8"))
    assert kept["code_hash"] == code_hash(chapter), (
        f"{chapter}'s code changed since its outputs were kept: rerun python bench/chapter_outputs.py {chapter}")
    return "\n".join(kept["outputs"])


@lru_cache(maxsize=None)
def prose(chapter: str, lang: str) -> str:
    """The chapter's markdown in one language (no need to run anything)."""
    return "\n".join(c.source for c in build.build_chapter(chapter, lang).cells if c.cell_type == "markdown")


CONTENT_GROUP = "content"


def same_worker(chapter: str):
    """Tests that run a chapter share one pytest-xdist worker, so that each chapter runs once per
    language in the whole suite: one worker for every chapter, because the accessibility test that
    every figure function was drawn (tests/test_accessibility.py) reads the runs of all of them."""
    return pytest.mark.xdist_group(CONTENT_GROUP)


@pytest.mark.parametrize("lang", build.LANGS)
@pytest.mark.parametrize("chapter", [pytest.param(c, marks=same_worker(c)) for c in RUN])
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


def _bigram_run(tokens: int):
    """A bigram model, its batches, ``tokens`` tokens of data and a tiny recipe, for the
    trainer chapters 9 and 10 hand out (notebooks/given/gpt_training.py)."""
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

    data = torch.randint(8, (tokens,), generator=torch.Generator().manual_seed(0))
    return Bigram(), get_batch, data, training.scaled(training.COURSE_RECIPE, n_ctx=8, batch_size=4, threads=1)


def test_training_progress_bar_shows_the_time_budget(capsys):
    import gpt_training  # notebooks/given: the trainer ch09 and ch10 hand out
    model, get_batch, data, recipe = _bigram_run(2_000)
    hist = gpt_training.train(model, get_batch, data, data, recipe, seconds=1.0, eval_every=5.0, eval_tokens=64)
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert re.search(r"1/1 s", bar) and "?" not in bar and f"step={hist.steps[-1]}" in bar, bar


def test_the_given_trainer_evaluates_its_last_step_however_the_clock_falls(monkeypatch):
    """The budget runs out between one step's end and the next step: that last step is still
    evaluated (it was not when the clock was read again at the loop's top, seen once in the
    suite under load: the bar said step=2097, the history ended at step 1)."""
    import itertools
    import types

    import gpt_training
    model, get_batch, data, recipe = _bigram_run(500)
    # start, then step 1 (evaluated: the first), step 2 ends at 0.5 s, and the next read is past 1 s;
    # the trainer's own clock only (the process's time.perf_counter stays for every other thread)
    clock = itertools.chain([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.5], itertools.count(1.6, 0.1))
    monkeypatch.setattr(gpt_training, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    hist = gpt_training.train(model, get_batch, data, data, recipe, seconds=1.0, eval_every=100.0,
                              eval_tokens=64, progress=False)
    steps = hist.tokens // (recipe.n_ctx * recipe.batch_size)
    assert steps >= 2 and hist.steps[-1] == steps and hist.val_steps[-1] == steps, (steps, hist.steps)


# --------------------------------------------------------- ch01's numbers

@same_worker("ch01_attention")
def test_ch01_rnn_steps_are_n_minus_1_in_text_and_code():
    for lang, steps in (("zh", "127 步"), ("en", "127 steps")):
        assert "$n-1$" in prose("ch01_attention", lang) and "$n$ 步" not in prose("ch01_attention", lang)
        assert steps in printed("ch01_attention", lang)


@same_worker("ch01_attention")
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


def test_ch01_names_the_papers_other_constants_and_shows_bahdanau_first():
    zh, en = prose("ch01_attention", "zh"), prose("ch01_attention", "en")
    assert "唯一的“魔法常数”" not in zh and 'only "magic constant"' not in en
    for text in (zh, en):
        # the paper's other constants: sinusoid base, warm-up steps, Adam's beta_2, label smoothing, sqrt(d_model)
        for constant in ("10000", "4000", r"\beta_2=0.98", "0.1", r"\sqrt{d_\text{model}}"):
            assert constant in text, constant
        bahdanau = text.index(r"\mathbf v_a^\top\tanh")
        assert bahdanau < text.index(r"e_{ij}=\mathbf q_i\cdot\mathbf k_j")       # the formula the three changes start from
    assert "梯度能顺畅地流过去" in zh and "so that gradients can flow" in en


def test_ch03_heads_are_attributed_to_the_work_that_found_them():
    zh, en = prose("ch03_multi_head", "zh"), prose("ch03_multi_head", "en")
    assert "括号配对头" not in zh and "bracket-matching heads" not in en
    assert "basic part behind" not in en and "上下文学习的基本零件" not in zh
    for text in (zh, en):
        for source in ("Elhage", "Olsson", "Clark", "Wang", "Michel", "1906.04341", "2211.00593"):
            assert source in text, source
    assert "假设" in zh and "hypothesis" in en


def test_ch06_qwen_keeps_its_biases_and_gpt3_has_96_layers():
    from helpers.ch06_param_count import model_cards
    zh, en = prose("ch06_param_count", "zh"), prose("ch06_param_count", "en")
    assert "（以及 Qwen、Mistral 等）" not in zh and "(and Qwen, Mistral and others)" not in en
    assert "Qwen 1 到 2.5" in zh and "Qwen 1 to 2.5" in en
    gpt3 = model_cards.card("GPT-3 175B")
    assert (gpt3.n_layer, gpt3.d, gpt3.n_head) == (96, 12288, 96)
    approx = round(12 * gpt3.n_layer * gpt3.d ** 2 / 1e9)
    for text in (zh, en):
        assert r"12\times96\times12288^2\approx" + f"{approx}$B" in text
    assert "叠了 96 层" in zh and "stacks this block 96 times" in en


def test_ch08_kv_paragraph_says_the_layer_below():
    assert "是下一层在位置" not in prose("ch08_efficiency", "zh")
    assert "前一层" in prose("ch08_efficiency", "zh") and "the layer below" in prose("ch08_efficiency", "en")


# where the seed course's further reading belongs: chapter -> links its reading list must hold
READING = {
    "ch01_attention": ("arxiv.org/abs/1706.03762", "jalammar.github.io/illustrated-transformer",
                       "nlp.seas.harvard.edu/annotated-transformer", "web.stanford.edu/class/cs224n"),
    "ch03_multi_head": ("transformer-circuits.pub/2022/in-context-learning-and-induction-heads",),
    "ch04_positions": ("kexue.fm/archives/8265", "arxiv.org/abs/2108.12409"),
    "ch05_block": ("youtube.com/watch?v=kCc8FmEb1nY", "arxiv.org/abs/2004.08249", "arxiv.org/abs/1908.03265"),
    "ch06_param_count": ("youtube.com/watch?v=l8pRSuU81PU", "github.com/ggml-org/llama.cpp",
                         "github.com/ml-explore/mlx-lm"),
    "ch08_efficiency": ("arxiv.org/abs/2205.14135",),
    "ch09_inside_gpt": ("arxiv.org/abs/2005.14165",),
    "ch10_llama_block": ("kexue.fm/archives/8265", "arxiv.org/abs/2405.04434"),
    "ch11_encoder_decoder": ("arxiv.org/abs/1810.04805", "arxiv.org/abs/1910.10683"),
}


@pytest.mark.parametrize("chapter", sorted(READING))
def test_further_reading_is_written_out_in_both_languages(chapter):
    links = {}
    for lang, heading in (("zh", "### 延伸阅读"), ("en", "### Further reading")):
        text = prose(chapter, lang)
        assert heading in text, (chapter, lang)
        block = text[text.index(heading):]
        links[lang] = set(re.findall(r"https?://[^\s）)，,；;]+", block))
        for link in READING[chapter]:
            assert any(link in found for found in links[lang]), (chapter, lang, link)
    assert links["zh"] == links["en"], links["zh"] ^ links["en"]


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


@same_worker("ch04_positions")
def test_ch04_permuted_rotate_half_gives_the_adjacent_scores():
    out = printed("ch04_positions", "en")
    same = float(re.search(r"same weights: largest difference ([\d.e+-]+)", out).group(1))
    permuted = float(re.search(r"columns reordered: largest difference ([\d.e+-]+)", out).group(1))
    assert same > 1.0 and permuted < 1e-10
    assert "Meta" in prose("ch04_positions", "zh") and "Hugging Face" in prose("ch04_positions", "en")
    assert "距离 $k$" not in prose("ch04_positions", "zh") and "distance $k$" not in prose("ch04_positions", "en")


EN_KINDS = {"sinusoidal": "sinusoidal", "learned table": "learned", "RoPE": "rope",
            "RoPE + NTK scaling": "rope+ntk", "ALiBi": "alibi"}


def extrapolation_table() -> tuple[list[int], dict[str, list[float | None]]]:
    """The table chapter 4's experiment prints (English build): lengths and, per kind, the loss or None."""
    out = printed("ch04_positions", "en")
    lines = out[out.index("length read"):].splitlines()
    lengths = [int(v) for v in lines[0].split()[2:]]
    rows = {}
    for line in lines[1:1 + len(EN_KINDS)]:
        name, values = line[:22].strip(), line[22:].split()
        rows[EN_KINDS[name]] = [None if v == "—" else float(v) for v in values]
    return lengths, rows


# The text's numbers are the kept run's (bench/results/extrapolation_seeds.json, through the
# claims ledger). A run here repeats them exactly only on a CPU like the one that kept them:
# on another, float32 rounds differently inside the training and the losses move (seen: up to
# 0.21 at length 128, RoPE's rows unchanged), while the shape the text describes stays.
NEAR_THE_KEPT_RUN = 0.3


def _kept_seed0() -> dict:
    kept = json.loads((ROOT / "bench" / "results" / "extrapolation_seeds.json").read_text())
    return next(r for r in kept["runs"] if r["seed"] == kept["setup"]["seed"])["losses"]


def _shape_the_text_describes(rows) -> None:
    at32 = [rows[k][0] for k in ("sinusoidal", "learned", "rope", "alibi")]
    sin, rope, ntk, alibi = rows["sinusoidal"], rows["rope"], rows["rope+ntk"], rows["alibi"]
    assert all(a < b for a, b in zip(sin, sin[1:])) and sin[-1] > 3 * sin[0]       # climbs all the way
    assert rope[-1] > 2 * rope[0]                                                     # RoPE degrades too
    assert ntk[0] == rope[0] and rope[0] < ntk[-1] < rope[-1]                         # part back, not all
    assert alibi[0] == max(at32) and max(alibi) - min(alibi) < 0.15                   # worst at 32, level


@same_worker("ch04_positions")
def test_ch04_extrapolation_text_is_what_the_experiment_prints():
    import os
    import sys
    lengths, rows = extrapolation_table()
    assert lengths == [32, 48, 64, 96, 128]
    assert rows["learned"][0] is not None and rows["learned"][1:] == [None] * 4     # no row past position 31
    kept = _kept_seed0()
    _shape_the_text_describes({k: [None if v is None else round(v, 3) for v in vs] for k, vs in kept.items()})
    sys.path.insert(0, str(ROOT / "bench"))
    import extrapolation_seeds
    recorded = json.loads((ROOT / "bench" / "results" / "extrapolation_seeds.json").read_text())["fingerprint"]
    assert recorded == extrapolation_seeds.fingerprint(extrapolation_seeds.chapter_functions()), (
        "chapter 4's experiment changed since its runs were kept: rerun python bench/extrapolation_seeds.py")
    if os.environ.get("COURSE_RUN_TRAINING_CHAPTERS"):    # the whole experiment ran here (else briefly)
        _shape_the_text_describes(rows)
        for kind, values in rows.items():                  # the same experiment as the kept one
            for live, then in zip(values, kept[kind]):
                assert (live is None) == (then is None)
                assert live is None or abs(live - then) < NEAR_THE_KEPT_RUN, (kind, live, then)
    zh, en = prose("ch04_positions", "zh"), prose("ch04_positions", "en")
    at32 = [kept[k][0] for k in ("sinusoidal", "learned", "rope", "alibi")]
    assert f"{min(at32):.2f} 到 {max(at32):.2f}" in zh and f"between {min(at32):.2f} and {max(at32):.2f}" in en
    for lang, text in (("zh", zh), ("en", en)):
        for kind, at in (("sinusoidal", 0), ("sinusoidal", -1), ("rope", 0), ("rope", -1), ("rope+ntk", -1),
                         ("alibi", 0), ("alibi", -1)):
            assert f"{kept[kind][at]:.2f}" in text, (lang, kind, at)
    assert "另一种 CPU" in zh and "another CPU" in en       # the text says where its numbers hold
    assert "（理论上可以外推）" not in zh and "(in principle it can extrapolate)" not in en
    assert "## 2. Sinusoidal encoding" in en and "## 2. 正弦位置编码" in zh


@same_worker("ch04_positions")
def test_ch04_other_seeds_keep_the_shape_the_text_describes():
    kept = json.loads((ROOT / "bench" / "results" / "extrapolation_seeds.json").read_text())
    runs = {r["seed"]: r["losses"] for r in kept["runs"]}
    assert len(runs) >= 3 and 0 in runs
    lower_at_128 = set()
    for seed, r in runs.items():
        rise = {k: r[k][-1] - r[k][0] for k in ("sinusoidal", "rope", "alibi")}
        assert rise["sinusoidal"] == max(rise.values()), seed          # "climbs the most"
        assert rise["rope"] > 0, seed                                  # "RoPE climbs too"
        assert r["rope+ntk"][-1] < r["rope"][-1], seed                 # "NTK takes back part of it"
        assert abs(rise["alibi"]) < 0.15, seed                         # "ALiBi stays about level"
        lower_at_128.add("rope" if r["rope"][-1] < r["alibi"][-1] else "alibi")
    assert lower_at_128 == {"rope", "alibi"}                           # "changes from seed to seed"
    # the text says the shape holds over the seeds the benchmark reran (naming no file the student pack lacks)
    assert "换了几个种子重跑过这个实验" in prose("ch04_positions", "zh")
    assert "rerun this experiment with several" in prose("ch04_positions", "en")


def test_ch10_says_rope_degrades_past_the_trained_length():
    zh, en = prose("ch10_llama_block", "zh"), prose("ch10_llama_block", "en")
    assert "copes better with length" not in en and "对长度更友好" not in zh
    assert "degraded past the trained length" in en and "过了训练长度同样会退化" in zh
    assert "almost all share one block design" not in en and "几乎都一样" not in zh
    for text in (zh, en):
        assert "MLA" in text and "MoE" in text and "Qwen 1" in text


# --------------------------------------------------------- ch05

@same_worker("ch05_block")
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


@same_worker("ch05_block")
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


def _solution(chapter: str) -> dict:
    """A chapter's answer cells (the model solution) run in one namespace, with its imports."""
    nb = build.build_chapter(chapter, "en")
    ns: dict = {"__name__": "__solution__"}
    cells = [c for c in nb.cells if c.cell_type == "code"]
    exec(cells[0].source, ns)                                   # the chapter's imports
    for cell in cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            exec(cell.source, ns)
    return ns


@same_worker("ch05_block")
def test_ch05_adam_takes_steps_of_one_size_and_post_ln_output_moves_further():
    out = printed("ch05_block", "en")
    rows = re.findall(r"^\s*(\d)\s+([\d.]+) /\s+([\d.]+)\s+([\d.]+) / ([\d.]+)\s+([\d.]+) / ([\d.]+)$", out, re.M)
    assert [int(r[0]) for r in rows] == [1, 2, 3]
    g_pre, g_post, u_pre, u_post, o_pre, o_post = map(float, rows[0][1:])
    assert u_pre == u_post and abs(u_pre - 5e-3) < 1e-4           # Adam's first step: lr · sign(g), whatever g
    assert g_post > 2 * g_pre                                      # "more than twice as large"
    assert 1.5 < o_post / o_pre < 2                                # "almost twice as far" / "将近一倍"
    for lang in build.LANGS:
        text = prose("ch05_block", lang)
        for value in (f"{u_pre:.5f}", f"{g_pre:.2f}", f"{g_post:.2f}", f"{o_pre:.2f}", f"{o_post:.2f}"):
            assert value in text, (lang, value)
    zh, en = prose("ch05_block", "zh"), prose("ch05_block", "en")
    assert "the first steps are large" not in en and "一开始迈的步子就大" not in zh
    assert "takes large steps from the start" not in en and "一开始就迈大步" not in zh
    assert "cannot do without it" not in en and "离不开它" not in zh
    for text in (zh, en):
        for name in ("T-Fixup", "Admin", "DeepNorm", "RAdam", "2004.08249"):
            assert name in text, name


@same_worker("ch05_block")
def test_ch05_xiong_is_quoted_for_post_ln_only():
    out = printed("ch05_block", "en")
    block = out[out.index("layer Pre-LN   Post-LN"):].split("\n\n")[0]
    rows = re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)$", block, re.M)
    pre = [float(r[1]) for r in rows]
    ratio = pre[0] / pre[-1]
    assert 2 < ratio < 3.5                                          # Pre-LN falls toward the output: not level
    assert f"降了 {ratio:.1f} 倍" in prose("ch05_block", "zh") and f"fall {ratio:.1f} times" in prose("ch05_block", "en")
    assert "This agrees with the analysis of Xiong" not in prose("ch05_block", "en")


def test_ch05_a_smaller_learning_rate_moves_post_ln_without_warm_up():
    import math

    from helpers.ch05_block import norm_placement
    Block = _solution("ch05_block")["Block"]

    class PostLNBlock(Block):
        def forward(self, x):
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.ffn(x))

    settings = dict(n_layers=8, d=32, n=16, batch=16, steps=60)
    stuck = norm_placement.train(lambda: PostLNBlock(32, 4), lr=5e-3, **settings)
    moving = norm_placement.train(lambda: PostLNBlock(32, 4), lr=2e-3, **settings)
    assert abs(sum(stuck[-10:]) / 10 - math.log(16)) < 0.05        # on the plateau at the chapter's rate
    assert sum(moving[-10:]) / 10 < math.log(16) - 0.4             # "leaves the plateau (slowly)"
    assert "2e-3" in prose("ch05_block", "zh") and "2e-3" in prose("ch05_block", "en")


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


@same_worker("ch08_efficiency")
def test_ch08_crossover_is_explained_and_printed():
    out = printed("ch08_efficiency", "en")
    assert re.search(r"measured crossover: the scores are slower from n = \d+ on \(the FLOP count says n = 6d = 384\)",
                     out)
    share = int(re.search(r"at n = 512, (\d+)% of the score time", out).group(1))
    assert 0 <= share < 100
    assert "6d=384" in prose("ch08_efficiency", "en").replace(" ", "")
    assert "逐位相同（在浮点误差内）" not in prose("ch08_efficiency", "zh")
    assert "只取决于第 $j$ 个 token 本身" not in prose("ch08_efficiency", "zh")


# --------------------------------------------------------- ch09, ch11: kept runs

def test_ch09_ov_text_is_what_the_run_printed():
    out = kept_output("ch09_inside_gpt")
    rows = {(int(l), int(h)): (int(own), int(rate)) for l, h, own, rate in
            re.findall(r"^L(\d) H(\d)\s+[\d.]+\s+[\d.]+\s+(\d+)/26\s+(\d+)%$", out, re.M)}
    assert len(rows) == 8
    prev_head = int(re.search(r"previous-token head of layer 0 is H(\d)", out).group(1))
    layer1 = [rows[(1, h)] for h in range(4)]
    layer0 = [rows[(0, h)] for h in range(4)]
    own1, rate1 = [o for o, _ in layer1], [r for _, r in layer1]
    assert min(rate1) > 50 and max(r for _, r in layer0) < 20 and rows[(0, prev_head)] == (0, 0)
    zh, en = prose("ch09_inside_gpt", "zh"), prose("ch09_inside_gpt", "en")
    assert f"{min(rate1)}% 到 {max(rate1)}%" in zh and f"{min(rate1)}% to {max(rate1)}%" in en
    assert f"{min(own1)} 到 {max(own1)} 行" in zh and f"{min(own1)} to {max(own1)} of the 26 rows" in en
    most0 = (max(r for _, r in layer0), max(o for o, _ in layer0))
    assert f"最多 {most0[0]}%、{most0[1]} 行" in zh and f"at most {most0[0]}%, {most0[1]} rows" in en
    assert f"L0 H{prev_head} 一行也没有" in zh and f"previous-token head L0 H{prev_head} has not a single" in en


def test_ch09_phase_change_text_is_what_the_run_printed():
    out = kept_output("ch09_inside_gpt")
    table = {int(step): tuple(map(float, v)) for step, *v in
             re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
                        out[out.index("step  first copy"):out.index("falls fastest")], re.M)}
    a, b = map(int, re.search(r"falls fastest between steps (\d+) and (\d+)", out).groups())
    first, repeat, prev, ind = zip(*(table[s] for s in (0, 300, 500)))
    assert repeat[0] - repeat[1] < 0.3 and repeat[1] - repeat[2] > 2      # flat for 300 steps, then within 200
    assert prev[1] < 0.2 and ind[1] < 0.2 and prev[2] > 0.8 and ind[2] > 0.7
    assert first[2] > first[1] > first[0]                                  # the first copy gets worse meanwhile
    assert 300 <= a < b <= 500
    zh, en = prose("ch09_inside_gpt", "zh"), prose("ch09_inside_gpt", "en")
    for text in (zh, en):
        for value in (repeat[0], repeat[1], repeat[2], prev[1], ind[1], prev[2], ind[2], first[1], first[2]):
            assert f"{value:.2f}" in text, value
    assert f"第 {a} 到第 {b} 步" in zh and f"between steps {a} and {b}" in en


def test_ch09_ablation_lowers_the_first_copy_loss_for_every_layer_1_head():
    out = kept_output("ch09_inside_gpt")
    line = re.search(r"^L1: (.*)$", out, re.M).group(1)
    first = [float(v) for v in re.findall(r"\(([+-][\d.]+)\)", line)]
    repeat = [float(v) for v in re.findall(r"H\d ([+-][\d.]+) \(", line)]
    assert len(first) == 4 and max(first) < 0 and min(repeat) > 0
    lo, hi = sorted((-max(first), -min(first)))
    assert f"降 {lo:.2f} 到 {hi:.2f}" in prose("ch09_inside_gpt", "zh")
    assert f"by {lo:.2f} to {hi:.2f}" in prose("ch09_inside_gpt", "en")
    # the quiz (question 29, D) says this of the previous-token head of layer 0
    l0 = re.search(r"^L0: (.*)$", out, re.M).group(1)
    prev_head = int(re.search(r"previous-token head of layer 0 is H(\d)", out).group(1))
    rep0, first0 = map(float, re.search(rf"H{prev_head} ([+-][\d.]+) \(([+-][\d.]+)\)", l0).groups())
    assert rep0 > 2 and rep0 > 5 * abs(first0)
    assert "去掉第 0 层的前一个 token 头，重复后半段的损失上升得比随机的前半段多得多" in prose("ch12_quiz", "zh")


def test_ch09_ablation_and_character_model_text_is_what_the_run_printed():
    out = kept_output("ch09_inside_gpt")
    base = float(re.search(r"full model, loss on the repeat: ([\d.]+)", out).group(1))
    deltas = {}
    for layer in (0, 1):
        line = re.search(rf"^L{layer}: (.*)$", out, re.M).group(1)
        for h, rep, first in re.findall(r"H(\d) ([+-][\d.]+) \(([+-][\d.]+)\)", line):
            deltas[(layer, int(h))] = (float(rep), float(first))
    prev_head = int(re.search(r"previous-token head of layer 0 is H(\d)", out).group(1))
    cuts = dict(re.findall(r"^(drop the heads that cost|keep only the best induction head|drop only the previous-token "
                           r"head)[^\n]*→ ([\d.]+)$", out, re.M))
    zh, en = prose("ch09_inside_gpt", "zh"), prose("ch09_inside_gpt", "en")
    prev_loss = float(cuts["drop only the previous-token head"])
    assert abs(base + deltas[(0, prev_head)][0] - prev_loss) < 0.02
    others = [h for h in range(4) if h != prev_head]
    crucial = max(others, key=lambda h: deltas[(0, h)][0])                      # the head that looks at itself
    spare = [h for h in others if h != crucial]
    assert all(0.2 <= deltas[(1, h)][0] <= 0.45 for h in range(4))             # "only about 0.3 each"
    assert all(abs(deltas[(0, h)][0]) < 0.2 for h in spare)                      # "barely matter for the repeat"
    first_big = max(spare, key=lambda h: deltas[(0, h)][1])
    for text in (zh, en):
        for value in (f"{base:.2f}", f"{prev_loss:.2f}", f"{base + deltas[(0, crucial)][0]:.2f}",
                      f"{deltas[(0, first_big)][1]:.1f}", f"{float(cuts['drop the heads that cost']):.2f}",
                      f"{float(cuts['keep only the best induction head']):.2f}"):
            assert value in text, value
        assert f"L0 H{prev_head}" in text and f"L0 H{crucial}" in text and f"L0 H{first_big}" in text
    # section 4: chapter 7's character model
    best = dict((name.strip(), (float(tr), float(un))) for name, tr, un in
                re.findall(r"^  (previous character|word start|induction)\s+L\dH\d ([\d.]+)\s+\|\s+([\d.]+)$", out, re.M))
    layer0 = [float(v) for v in re.search(r"previous-character scores of the heads of layer 0: (.*)$", out, re.M)
              .group(1).split()]
    chance = best["previous character"][1]
    assert 3.5 * chance <= min(layer0) and max(layer0) <= 6 * chance and best["induction"][0] == best["induction"][1]
    assert "3.5 到 6 倍" in prose("ch09_inside_gpt", "zh") and "between 3.5 and 6 times" in prose("ch09_inside_gpt", "en")
    for text in (zh, en):
        for value in (min(layer0), max(layer0), chance, best["word start"][0], best["induction"][0]):
            assert f"{value:.2f}" in text, value


def test_ch09_in_context_learning_is_stated_as_olsson_et_al_do():
    zh, en = prose("ch09_inside_gpt", "zh"), prose("ch09_inside_gpt", "en")
    assert "rests on mechanisms of this kind" not in en and "靠的也是这类机制" not in zh
    assert "hypothesis" in en and "假设" in zh and "Brown" in en and "Brown" in zh
    assert "some track matching brackets" not in en and "有的追踪括号配对" not in zh


def test_ch11_misses_are_one_rule_and_the_text_says_which():
    out = kept_output("ch11_encoder_decoder")
    wrong, total, trained = map(int, re.search(r"(\d+) wrong out of (\d+) numbers, (\d+) of them in the training set",
                                                out).groups())
    rows = {p: (int(n), int(w), int(tr)) for p, n, w, tr in re.findall(r"^(X[X0]*)\s+(\d+)\s+(\d+)\s+(\d+)\s", out, re.M)}
    clean = re.search(r"patterns without a miss: (.*)$", out, re.M).group(1).split()
    tens, shaped = map(int, re.search(r"of the (\d+) misses shaped X00X, (\d+) put", out).groups()[::-1])
    assert total == 10_000 and sum(w for _, w, _ in rows.values()) == wrong
    assert shaped == tens == rows["X00X"][1]                               # "every one of them at the same place"
    assert all(len(p) == 4 and p.count("0") >= 2 for p in rows)            # only four-digit numbers, two zeros or more
    assert {"0", "X", "XX", "XXX", "XXXX", "X0XX", "XX0X", "XXX0"} <= set(clean)
    assert trained > wrong / 2                                             # most misses were trained on
    n_x00x, w_x00x, _ = rows["X00X"]
    others = wrong - w_x00x
    zh, en = prose("ch11_encoder_decoder", "zh"), prose("ch11_encoder_decoder", "en")
    assert f"10,000 个数错了 {wrong} 个，其中 {trained} 个在训练集里" in zh
    assert f"{wrong} of the 10,000 come out wrong, and {trained} of them are in the training set" in en
    assert f"`X00X` 形的 {n_x00x} 个数" in zh and f"错了 {w_x00x} 个" in zh
    assert f"{w_x00x} of the {n_x00x} numbers shaped `X00X`" in en
    assert f"其余 {others} 个错误" in zh and f"The other {others} misses" in en
    for example in ("1003 → 一千零三十 = 1030", "1005 → 一千零五十五 = 1055", "6000 → 六千零 = 6000",
                    "5900 → 五千九百零九 = 5909", "6050 → 六千零五 = 6005"):
        assert example in out, example
    assert "零 zero" in en and "千 thousand" in en                          # the gloss English readers need
    assert "Radford et al., 2018" in en and "Radford 等，2018" in zh


def test_ch11_held_out_text_is_what_the_run_printed():
    out = kept_output("ch11_encoder_decoder")
    acc = re.search(r"exact-match accuracy on the held-out numbers: ([\d.]+)%", out).group(1)
    misses = re.findall(r"^\s+(\d+): (\S+)\s+\(should be", out, re.M)
    for lang in build.LANGS:
        text = prose("ch11_encoder_decoder", lang)
        paragraph = next(p for p in text.split("\n\n") if f"{acc}%" in p)
        assert str(len(misses)) in paragraph
        quoted = re.findall(r"(\d+) → ([零一二三四五六七八九十百千]+)", paragraph)
        assert len(quoted) >= 3 and set(quoted) <= set(misses), (lang, quoted)


def test_kept_outputs_are_those_of_the_chapters_as_they_are():
    for chapter in ("ch01_attention", "ch05_block", "ch09_inside_gpt", "ch11_encoder_decoder"):
        kept = json.loads((KEPT / f"{chapter}.json").read_text(encoding="utf-8"))
        assert kept["code_hash"] == code_hash(chapter), (
            f"{chapter}'s code changed since its outputs were kept: rerun python bench/chapter_outputs.py {chapter}")


# --------------------------------------------------------- widget + picture, one output

def test_show_widget_puts_the_widget_and_its_picture_in_one_output(monkeypatch):
    import ipywidgets as W
    from IPython import display as ipd

    shown = []
    monkeypatch.setattr(ipd, "display", lambda obj, raw=False, metadata=None: shown.append((obj, raw, metadata)))
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    plots.show_widget(W.IntSlider(), fig, alt="a line")
    (bundle, raw, metadata), = shown
    assert raw and set(bundle) == {"text/plain", "application/vnd.jupyter.widget-view+json", "image/png"}
    assert metadata == {"image/png": {"alt": "a line"}}     # what a screen reader says for the picture
    assert bundle["image/png"].startswith("iVBOR")          # base64 of a PNG header
    assert fig.number not in plt.get_fignums()              # closed: the inline backend must not show it again


# --------------------------------------------------------- issue 40: the third content pass
# Each finding of the outside read: the wrong sentence is gone from the built zh and en
# notebooks, the right one is there.

def _built(chapter: str) -> tuple[str, str]:
    return prose(chapter, "zh"), prose(chapter, "en")


def _gone_and_there(chapter: str, gone: tuple[str, str], there: tuple[str, str]) -> None:
    zh, en = _built(chapter)
    assert gone[0] not in zh and gone[1] not in en, gone
    assert there[0] in zh and there[1] in en, there


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / "bench" / "results" / name).read_text().splitlines()
            if line.startswith("{")]


def test_ch07_3e3_against_4e3_names_what_else_those_runs_changed():
    round1, round2 = _jsonl("recipe_sweep_round1.jsonl"), _jsonl("recipe_sweep_round2.jsonl")
    plain = next(r for r in round1 if r["ch"] == {"n_layer": 3, "batch_size": 16, "lr": 0.003})
    wd0 = next(r for r in round2 if r["ch"].get("weight_decay") == 0.0)
    b095 = next(r for r in round2 if r["ch"].get("beta2") == 0.95)
    assert wd0["ch"]["lr"] == b095["ch"]["lr"] == 0.003                  # the two "runs at 3e-3" of the old text
    _gone_and_there("ch07_gpt", ("3e-3 和 4e-3 之间我们量不出差别", "Between 3e-3 and 4e-3 we measured no difference"),
                    ("3e-3 和 4e-3 之间我们没有干净的对比", "Between 3e-3 and 4e-3 we have no clean comparison"))
    zh, en = _built("ch07_gpt")
    assert f"{wd0['val']:.3f}（权重衰减 0）和 {b095['val']:.3f}（β2 = 0.95）" in zh
    assert f"{wd0['val']:.3f} (weight decay 0) and {b095['val']:.3f} (β2 = 0.95)" in en
    assert f"3e-3 的运行结束时是 {plain['val']:.3f}" in zh and f"the run at 3e-3 ended at {plain['val']:.3f}" in en


def test_ch07_stability_is_not_claimed_without_a_run_that_shows_it():
    zh, en = _built("ch07_gpt")
    for gone in ("perfectly stable at a high rate", "this is what keeps a learning rate as high as 4e-3 stable"):
        assert gone not in en
    for gone in ("大学习率完全稳定", "正是它让 4e-3 这么大的学习率也稳定"):
        assert gone not in zh
    assert "We ran nothing without gradient clipping or without warm-up" in en
    assert "我们没有跑过不带梯度裁剪或不带预热的对照" in zh


def test_ch07_fused_attention_says_which_kernel_a_cpu_takes():
    zh, en = _built("ch07_gpt")
    assert "never writes the $T\\times T$ score matrix to memory" not in en and "faster on a CPU too" not in en
    assert "不把 $T\\times T$ 的分数矩阵写回内存" not in zh and "CPU 上也更快" not in zh
    assert "with dropout on a CPU it falls back to the plain formula" in en
    assert "We recorded no speed comparison on a CPU" in en
    assert "在 CPU 上开了 dropout，它就退回到按公式直接算的实现" in zh and "CPU 上两者的速度我们没有量过" in zh


def test_ch07_threads_ratio_is_the_sitting_the_readme_quotes():
    summary = [r for r in _jsonl("threads_sitting.jsonl") if r.get("summary") == "loaded"][-1]
    ratio = summary["fixed_1"] / summary["fixed_2"]
    assert 1.4 < ratio < 1.6
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()     # the README's guide to what was measured
    assert f"{summary['fixed_1']:,} with one" in benchmarks.replace("\n", " ")
    _gone_and_there("ch07_gpt", ("是 2 个线程的两倍多", "more than twice the tokens per second of two"),
                    (f"前者是后者的 {ratio:.1f} 倍", f"{ratio:.1f} times as many with one"))


def test_ch07_batch_32_says_how_many_steps_and_that_the_rate_differed_too():
    round1 = _jsonl("recipe_sweep_round1.jsonl")
    b32 = next(r for r in round1 if r["ch"] == {"batch_size": 32, "lr": 0.003})
    b16 = next(r for r in round1 if r["ch"] == {"batch_size": 16, "lr": 0.002})
    share = b32["steps"] / b16["steps"]
    _gone_and_there("ch07_gpt", ("但步数不到一半，结果更差", "less than half as many, and a worse result"),
                    (f"只有它的 {share:.2f}", f"{share:.2f} as many"))
    zh, en = _built("ch07_gpt")
    assert "这两次的学习率也不同" in zh and "the two runs also differ in learning rate" in en


def test_ch07_the_reference_runs_are_nanogpts_recipe_on_the_course_trainer():
    _gone_and_there("ch07_gpt", ("跑了四次", "we ran it four times"),
                    ("这是 nanoGPT 的配方，不是 nanoGPT 本身", "this is nanoGPT's recipe, not nanoGPT itself"))


def test_ch07_weight_decay_clipping_and_adamw_name_their_sources():
    zh, en = _built("ch07_gpt")
    assert "0.1 这个值来自 GPT-3（Brown et al., 2020，附录 B）" in zh
    assert "The value 0.1 is GPT-3's (Brown et al., 2020, appendix B)" in en
    assert "GPT-3's value too, Brown et al., 2020, appendix B" in en and "同样是 GPT-3 的取值，Brown et al., 2020，附录 B" in zh
    assert "Loshchilov and Hutter (2019)" in en and "Loshchilov 和 Hutter（2019）" in zh
    for text in (zh, en):
        reading = text[text.index("## 延伸阅读" if text is zh else "## Further reading"):]
        assert "https://arxiv.org/abs/1711.05101" in reading and "https://arxiv.org/abs/2005.14165" in reading


def test_ch07_the_budget_is_time_and_the_tokens_are_what_nanogpts_model_sees_in_it():
    nano = next(r for r in _jsonl("recipe_sweep_round1.jsonl") if r["ch"].get("name") == "nano")
    tokens = nano["steps"] * 12 * 64
    _gone_and_there("ch07_gpt", ("只有约 150 万个 token 的计算量时", "with a compute budget of about 1.5 million tokens"),
                    (f"预算是 92 秒时间（nanoGPT 的模型在这段时间里看到约 {tokens / 1e4:.0f} 万个 token）",
                     f"with a budget of 92 s (in which nanoGPT's model sees about {tokens / 1e6:.1f} million tokens)"))


def test_ch07_states_the_recipes_own_result_and_which_text_the_numbers_are_from():
    runs = [r for name in ("side_by_side_92s.jsonl", "side_by_side_92s_seed1.jsonl", "bench_train.jsonl")
            for r in _jsonl(name) if r["recipe"]["name"] == "course"]
    lo, hi = min(r["val_loss"] for r in runs), max(r["val_loss"] for r in runs)
    assert {r["text"] for r in runs} == {"tinyshakespeare.txt"}
    zh, en = _built("ch07_gpt")
    assert f"{len(runs)} 次运行的验证损失是 {lo:.2f} 到 {hi:.2f}" in zh
    assert f"ended at a validation loss of {lo:.2f} to {hi:.2f} in {len(runs)} runs" in en
    assert "不是本章训练用的语料（莎士比亚全集" in zh and "not on this chapter's corpus (the complete works" in en


def test_ch07_explains_beta2_and_that_tied_weights_leave_lm_head_undecayed():
    import torch

    from helpers import training
    assert training.COURSE_RECIPE.beta2 == 0.99
    zh, en = _built("ch07_gpt")
    assert "**β2 = 0.99**（`print(recipe)` 里的 `beta2`）" in zh and "**β2 = 0.99** (the `beta2` that" in en
    assert "$1/(1-\\beta_2)$" in zh and "$1/(1-\\beta_2)$" in en
    assert "`wte` 不衰减，`lm_head` 也就不衰减" in zh
    assert "leaving `wte` out of weight decay leaves `lm_head` out too" in en

    class Tied(torch.nn.Module):                          # what the sentence says make_optimizer does
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(5, 3)
            self.mid = torch.nn.Linear(3, 3)
            self.lm_head = torch.nn.Linear(3, 5, bias=False)
            self.lm_head.weight = self.wte.weight

    model = Tied()
    opt = training.make_optimizer(model, training.COURSE_RECIPE)
    decayed = [p for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]]
    assert all(p is not model.lm_head.weight for p in decayed) and any(p is model.mid.weight for p in decayed)


def test_ch05_warm_up_starts_at_a_twentieth_and_names_no_original_course():
    from helpers.ch05_block import norm_placement
    source = Path(norm_placement.__file__).read_text()
    assert "min(1.0, (s + 1) / warmup)" in source                      # step 0 runs at lr / warmup
    _gone_and_there("ch05_block", ("把学习率从 0 线性升上来", "raised linearly from 0"),
                    ("第 1 步就是峰值的 1/20", "the first step already runs at 1/20 of the peak"))
    _gone_and_there("ch05_block", ("原课程", "The original course marks it"),
                    ("我们建议你打开编辑器跟着它写一遍", "We suggest following along with it"))


def test_ch09_olsson_is_quoted_for_what_they_measured():
    _gone_and_there("ch09_inside_gpt", ("对 GPT-3 这样的大模型，这仍是一个有间接证据支持的假设",
                                        "for large models such as GPT-3 it remains a hypothesis backed by indirect evidence"),
                    ("最大约 130 亿参数", "up to about 13 billion parameters"))
    zh, en = _built("ch09_inside_gpt")
    assert "第 500 个对第 50 个" in zh and "the 500th token against the 50th" in en


def test_ch09_k_composition_is_how_two_heads_work_not_a_head():
    _gone_and_there("ch09_inside_gpt", ("这叫 **K-组合**", "wrote into the residual stream is called **K-composition**"),
                    ("这两个头之间的这种配合叫 **K-组合**", "the two heads are said to work by **K-composition**"))


def test_ch04_alibi_is_not_said_to_see_nothing_new_and_its_32_is_explained():
    zh, en = _built("ch04_positions")
    assert "更长的输入里没有出现它不认得的东西" not in zh and "a longer input holds nothing it has not seen" not in en
    assert "距离 32 到 127 在训练时同样从没见过" in zh and "distances 32 to 127, never seen in training either" in en
    assert "答案永远在前 16 个位置以内" in zh and "the answer always lies within 16 positions" in en
    assert "在 32 上最差，一个可能的原因" in zh and "A likely reason it is worst at 32" in en


def test_ch04_context_extension_is_attributed_and_the_experiment_names_dynamic_ntk():
    _gone_and_there("ch04_positions", ("长上下文扩展技术都是在**改频率**", "Context-extension methods all **change the frequencies**"),
                    ("常用的三种扩展 RoPE 模型上下文的方法", "Three widely used ways of extending a RoPE model's context"))
    zh, en = _built("ch04_positions")
    assert "再微调约 1000 步" in zh and "about 1000 steps of fine-tuning" in en
    assert "Peng 等（2023）认为" in zh and "Peng et al. (2023) argue" in en
    assert "NTK 缩放的**动态**形式" in zh and "the **dynamic** form of NTK scaling" in en
    assert "NTK-aware 缩放**（2023 年先在网上发布，Peng 等在 YaRN 的论文里写成文）" in zh
    assert "NTK-aware scaling** (first posted online in 2023, written up by Peng et al. in the YaRN paper)" in en
    assert "2309.00071" in zh and "2309.00071" in en


def test_ch12_question_20_asks_which_statements_are_true():
    from grading.ch12_quiz import QUESTIONS
    assert QUESTIONS["q20_evaluation"].key() == frozenset("ABE")     # E is true, and no longer has to be a "why"
    _gone_and_there("ch12_quiz", ("并且先调用 `model.eval()`。为什么？", "after `model.eval()`. Why?"),
                    ("下面关于这样评估的说法，哪些是对的？", "Which of these statements about evaluating this way are true?"))


def test_the_three_papers_to_read_are_counted_in_course_order_and_say_who_chose_them():
    order = (("ch01_attention", "第一篇", "the first"), ("ch09_inside_gpt", "第二篇", "the second"),
             ("ch11_encoder_decoder", "第三篇", "the third"))
    for chapter, zh_nth, en_nth in order:
        zh, en = _built(chapter)
        assert "必读论文" not in zh and "must-read" not in en, chapter
        assert f"本课程挑出的三篇请你通读的论文的{zh_nth}" in zh, chapter
        assert f"{en_nth} of the three papers this course picks for you to read in full" in en, chapter


def test_ch02_says_when_exp_underflows_not_just_that_scores_are_finite():
    import torch
    assert torch.exp(torch.tensor(-103.0)) > 0 and torch.exp(torch.tensor(-104.5)) == 0      # float32
    _gone_and_there("ch02_causal_mask", ("（分数都是有限的数。）", "(All scores are finite numbers.)"),
                    ("比这一行最大的分数低约 104 以上时，exp 才会下溢成精确的 0",
                     "exp underflows to an exact 0 when a score lies more than about 104 below the largest of its row"))


def test_ch08_long_context_is_not_credited_to_engineering_alone():
    _gone_and_there("ch08_efficiency", ("靠的是几项工程进展", "Context windows of a million tokens became usable through engineering"),
                    ("位置编码的缩放（第 4 章）、在长序列上的训练、把一条序列分到多块 GPU 上的序列并行",
                     "position scaling (chapter 4), training on long sequences, sequence parallelism"))


@pytest.mark.parametrize("chapter", [pytest.param(c, marks=same_worker(c)) for c in ("ch01_attention", "ch05_block")])
def test_kept_outputs_give_the_claims_a_fresh_run_gives(chapter):
    """ch01's and ch05's prose numbers come from their kept runs (the claims ledger); these chapters
    are deterministic and quick, so a fresh run must give every claim the same value."""
    from coursekit.author import claims
    fresh = {"outputs": list(chapter_run(chapter, "en")[0])}
    for claim in claims.CLAIMS[chapter].values():
        assert claim.fmt.format(claim.read(fresh)) == claim.value(), claim.id


# --------------------------------------------------------- issue 40: found on the third read

def test_ch09_and_ch11_training_times_are_the_kept_runs_not_unrecorded_ones():
    ch09 = re.search(r"^(\d+) steps in ([\d.]+) s", kept_output("ch09_inside_gpt"), re.M)
    _gone_and_there("ch09_inside_gpt", ("大约 20–30 秒", "about 20–30 seconds"),
                    (f"1000 步用了 {float(ch09.group(2)):.0f} 秒", f"the 1000 steps took {float(ch09.group(2)):.0f} seconds"))
    _gone_and_there("ch09_inside_gpt", ("用半分钟训练", "in about half a minute"), ("花一两分钟训练", "in a minute or two"))
    ch11 = re.search(r"^(\d+) steps in ([\d.]+) s", kept_output("ch11_encoder_decoder"), re.M)
    _gone_and_there("ch11_encoder_decoder", ("在一台 2 核 CPU 上测得 60 秒", "60 s measured on a 2-core CPU"),
                    (f"默认的 {ch11.group(1)} 步用了 {float(ch11.group(2)):.0f} 秒",
                     f"the default {ch11.group(1)} steps took {float(ch11.group(2)):.0f} seconds"))


def test_ch05_post_ln_gradients_are_the_layers_the_run_prints():
    _gone_and_there("ch05_block", ("在约 0.6 到 0.9 之间忽高忽低", "jump between about 0.6 and 0.9"),
                    ("第 12 层约 0.88", "about 0.88 at layer 12"))


def test_ch01_does_not_say_everything_in_the_course_comes_from_one_paper():
    _gone_and_there("ch01_attention", ("这门课的全部内容都出自它", "everything in this course comes from it"),
                    ("这门课搭的架构出自它", "the architecture this course builds comes from it"))


def test_ch03_olsson_is_quoted_for_what_they_measured_too():
    _gone_and_there("ch03_multi_head", ("他们把同样的说法作为一个有间接证据支持的假设提出",
                                        "they put the same claim forward as a hypothesis backed by indirect evidence"),
                    ("最大约 130 亿参数），证据是相关性的", "(up to about 13 billion parameters) the evidence is correlational"))


def test_ch07_summary_credits_the_recipe_as_a_whole():
    _gone_and_there("ch07_gpt", ("比照搬的配方走得更远——配方要量出来。", "go further than a recipe copied as is"),
                    ("每一次对比只能说明它改动了的那些东西", "each comparison only speaks for what it changed"))


# --------------------------------------------------------- issue 40: the second outside read
# The rest of the prose read the same way (ch03, ch05, ch06, ch08, ch09, ch10).

def test_ch03_the_original_transformer_had_8_heads_in_its_base_model_and_16_in_its_big_one():
    # Vaswani et al. 2017, Table 3: base d_model 512, h 8; big d_model 1024, h 16; d_k = 64 in both
    assert 512 // 8 == 1024 // 16 == 64
    _gone_and_there("ch03_multi_head", ("原始 Transformer 用 8 个头，", "The original Transformer used 8 heads;"),
                    ("的 base 模型用 8 个头，big 模型用 16 个", "used 8 heads in its base model and 16 in its big one"))


def test_ch05_adams_first_step_is_sign_g_only_up_to_eps_and_no_seed_is_named():
    import torch
    eps = torch.optim.Adam([torch.zeros(1, requires_grad=True)]).defaults["eps"]
    p = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([p], lr=1.0)
    p.grad = torch.tensor([1.0, eps])                               # a gradient of the size of ε moves half as far
    opt.step()
    assert p[0].item() == pytest.approx(-1.0) and p[1].item() == pytest.approx(-0.5)
    _gone_and_there("ch05_block", ("所以第一步的更新恰好是", "so its very first update is exactly"),
                    (r"$\text{lr}\cdot g/(|g|+\varepsilon)$（PyTorch 的 Adam 默认 $\varepsilon=10^{-8}$）",
                     r"$\text{lr}\cdot g/(|g|+\varepsilon)$ (PyTorch's Adam uses $\varepsilon=10^{-8}$ by default)"))
    assert eps == 1e-8
    _gone_and_there("ch05_block", ("和种子里的数对上", "This matches the seed's number"),
                    ("和本章开头给的数对上", "This matches the number in this chapter's introduction"))


def test_ch06_mfu_is_not_called_typical_and_qwen_biases_name_their_source():
    _gone_and_there("ch06_param_count", ("这是大规模训练的典型水平", "typical for large training runs"),
                    ("大约四成，远没有跑满峰值", "about 40%, far from the peak"))
    _gone_and_there("ch06_param_count", ("Qwen 1 到 2.5 在 q、k、v 三个投影上保留了偏置。）",
                                         "Qwen 1 to 2.5 keep a bias on the q, k and v projections.)"),
                    ("出处是第 10 章延伸阅读里的 Qwen 技术报告", "as their technical reports in chapter 10's further reading say"))
    zh, en = _built("ch10_llama_block")
    for arxiv in ("2309.16609", "2407.10671", "2412.15115"):                  # Qwen, Qwen2, Qwen2.5 reports
        assert arxiv in zh and arxiv in en, arxiv


def test_ch08_online_softmax_is_credited_to_milakov_and_gqa_users_have_sources():
    _gone_and_there("ch08_efficiency", ("FlashAttention 的观察是", "FlashAttention's observation:"),
                    ("建立在一个更早的观察上（Milakov 和 Gimelshein，2018", "builds on an earlier observation (Milakov and Gimelshein, 2018"))
    zh, en = _built("ch08_efficiency")
    reading = [text.split(marker)[1] for text, marker in ((zh, "### 延伸阅读"), (en, "### Further reading"))]
    for arxiv in ("2307.09288", "2407.21783", "2310.06825", "2405.04434"):    # Llama 2, Llama 3, Mistral 7B, DeepSeek-V2
        assert all(arxiv in r for r in reading), arxiv


def test_ch09_the_phase_change_is_a_window_of_training_not_a_few_steps():
    out = kept_output("ch09_inside_gpt")
    start, end = map(int, re.search(r"falls fastest between steps (\d+) and (\d+)", out).groups())
    assert end > start                                                     # the kept run: a window of snapshots
    _gone_and_there("ch09_inside_gpt", ("它们在很少的几步里突然出现", "they appear within a few steps"),
                    ("它们在很窄的一段训练窗口里突然出现", "they appear within a narrow window of training"))


def test_ch10_counts_six_differences_and_cites_only_the_rescaling_chapter_4_ran():
    import inspect

    from helpers import extrapolation
    from helpers.ch10_llama_block import encode_corpus
    assert not any("yarn" in kind for kind in extrapolation.KINDS)        # chapter 4's experiment runs no YaRN
    assert inspect.signature(encode_corpus).parameters["n_chars"].default == 1_000_000
    _gone_and_there("ch10_llama_block", ("要调整频率（NTK、YaRN）才能收回一部分", "rescaling its frequencies (NTK, YaRN) took back"),
                    ("只有动态 NTK 缩放一种，它只收回了一部分损失（YaRN 在那个实验里没有跑）",
                     "dynamic NTK scaling, took back only part of the loss (YaRN was not run in that experiment)"))
    _gone_and_there("ch10_llama_block", ("它和 GPT-2 有五处不同", "differs from GPT-2's in five places"),
                    ("它和 GPT-2 有六处不同（第 1 节的表），其中五处在块里面", "differs from GPT-2's in six places (the table in section 1): five inside the block"))
    _gone_and_there("ch10_llama_block", ("在第 7 章的莎士比亚文本上", "trained on chapter 7's Shakespeare text"),
                    ("在第 7 章莎士比亚文本的前一百万个字符上", "on the first million characters of chapter 7's Shakespeare text"))
    zh, en = _built("ch10_llama_block")
    assert "2310.06825" in zh and "2310.06825" in en                        # Mistral 7B


def test_ch05_warm_up_is_credited_to_papers_that_state_it_and_not_to_gpt2():
    _gone_and_there("ch05_block", ("GPT-2、GPT-3、LLaMA 都是 Pre-LN，训练时仍然先 warm-up 若干步",
                                   "GPT-2, GPT-3 and LLaMA are all Pre-LN and still warm up for a number of steps"),
                    ("GPT-3 在最初的 3.75 亿个 token 上，LLaMA 用 2000 步（Brown 等，2020；Touvron 等，2023）",
                     "GPT-3 over its first 375 million tokens, LLaMA for 2,000 steps (Brown et al., 2020; Touvron et al., 2023)"))
    zh, en = _built("ch05_block")
    assert "GPT-2 的论文没有写它的学习率时间表" in zh and "GPT-2's paper does not give its learning-rate schedule" in en
    for arxiv in ("2005.14165", "2302.13971"):
        assert arxiv in zh and arxiv in en, arxiv


def test_ch08_flashattention_is_not_said_to_do_the_same_arithmetic_in_training():
    _gone_and_there("ch08_efficiency", ("运算量并没有变少。省下的", "the arithmetic is the same."),
                    ("训练时反向传播还要把分数一块块重新算一遍", "in training the backward pass recomputes the scores block by block"))


def test_ch02_a_rounded_0_in_the_bert_row_is_not_called_an_exact_zero():
    import math

    import torch

    from helpers.ch02_causal_mask import calculator
    x, w_q, w_k, _ = (torch.tensor(a, dtype=torch.float32) for a in calculator.inputs())
    bert = torch.softmax((x @ w_q) @ (x @ w_k).T / math.sqrt(4), dim=-1)
    assert (bert > 0).all() and (bert[0] < 0.005).any()          # a weight that prints as 0.0 yet is not 0
    _gone_and_there("ch02_causal_mask", ("两种注意力的差别全在那个三角形里：", "lies in that triangle:"),
                    ("BERT 那一行里的 0.0 是一个小于 0.005 的权重，不是精确的 0",
                     "a 0.0 in the BERT row is a weight below 0.005, not an exact 0"))


def test_ch05_only_t_fixup_is_credited_with_training_post_ln_without_warm_up():
    _gone_and_there("ch05_block", ("能让很深的 Post-LN 不靠 warm-up 也训练起来", "train very deep Post-LN stacks without warm-up"),
                    ("其中 T-Fixup 的论文明确做到了不用 warm-up", "T-Fixup's paper shows it explicitly without warm-up"))


def test_ch01_the_it_to_animal_head_is_a_possible_job_not_what_a_trained_head_does():
    _gone_and_there("ch01_attention", ("一个训练好的头处理“它”时，会把很大的权重给“动物”",
                                       'a trained head processing "it" gives a large weight'),
                    ("训练好的模型里可以有这样的头", "a trained model can have a head that"))


def test_ch08_the_1024_fold_score_memory_is_a_training_figure():
    assert 32 * 32 == 1024 and 4 * 2048 ** 2 == 16 * 2 ** 20                  # heads × layers; one score matrix in MiB
    _gone_and_there("ch08_efficiency", ("一个 32 头、32 层的模型要乘上 1024 倍。", "and a model with 32 heads and 32 layers multiplies that by 1024."),
                    ("每一层的分数都要留到反向传播时再用", "every layer's scores are kept for the backward pass"))


WHERE_THE_COURSE_CAME_FROM = re.compile(r"种子课|种子里的|原课程|原始课程|seed course|the seed's|seed chapter|"
                                        r"original course|course page", re.I)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_no_chapter_speaks_of_the_pages_it_was_written_from(lang):
    """Students never hear of the pages the course was written from: no chapter
    (prose or code) and no grading message names them."""
    from coursekit.author.build import build_chapter, chapters
    for chapter in chapters():
        for cell in build_chapter(chapter, lang).cells:
            found = WHERE_THE_COURSE_CAME_FROM.search(cell.source)
            assert not found, f"{chapter} ({lang}): {found.group(0)!r} in {cell.source[:200]!r}"
    for path in sorted((ROOT / "grading").glob("*.py")) + sorted((ROOT / "helpers").rglob("*.py")):
        found = WHERE_THE_COURSE_CAME_FROM.search(path.read_text(encoding="utf-8"))
        assert not found, f"{path.relative_to(ROOT)}: {found.group(0)!r}"


def test_ch07_plan_max_steps_is_the_step_the_schedule_ends_not_the_steps_left():
    """The outside read: the run hands train_step the step at which the schedule ends
    (steps done plus steps that still fit), fixed once, not "how many steps are left"."""
    _gone_and_there("ch07_gpt", ("估计还能走多少步，把这个数作为 `plan.max_steps`",
                                 "how many steps are left, and hands that number to your"),
                    ("`plan.max_steps` 是计划结束的那一步（已经走的步数加上还来得及走的步数），从此不再改变",
                     "is the step at which the schedule ends (the steps done plus the steps that still fit), and "
                     "from then on it does not change"))
    from helpers import training
    assert hasattr(training, "fix_schedule"), "the text describes a schedule fixed in steps"
