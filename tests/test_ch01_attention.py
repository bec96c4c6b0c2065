"""Unit tests for helpers.ch01_attention (the sqrt(d_k) numbers, figure and widget)."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

from helpers import ch01_attention as ch01  # noqa: E402
from helpers import runtime  # noqa: E402


def test_dot_samples_variance_grows_like_d_k():
    for d_k in (4, 64, 256):
        v = ch01.dot_samples(d_k, n=20_000).var()
        assert 0.9 * d_k < v < 1.1 * d_k


def test_weight_row_saturates_without_scaling():
    raw, scaled = ch01.weight_row(1024), ch01.weight_row(1024, scaled=True)
    assert math.isclose(raw.sum(), 1) and math.isclose(scaled.sum(), 1)
    assert raw.max() > 0.99 and scaled.max() < 0.9


def test_jacobian_norm_collapses_only_without_scaling():
    assert ch01.jacobian_norm(1024) < 0.5 * ch01.jacobian_norm(4)
    assert abs(ch01.jacobian_norm(1024, scaled=True) - ch01.jacobian_norm(4, scaled=True)) < 0.05


def test_saturation_ratio_matches_seed_number():
    # the seed: at d_k = 128 a typical score is ±11 and e^11 / e^-11 ≈ 3.6e9
    assert math.isclose(ch01.saturation_ratio(121), math.exp(22))
    assert 3.5e9 < math.exp(11) / math.exp(-11) < 3.7e9


def test_scaling_figure_has_three_panels(tmp_path):
    fig = ch01.scaling_figure(128)
    assert len(fig.axes) == 3
    fig.savefig(tmp_path / "fig.png")
    import matplotlib.pyplot as plt
    plt.close(fig)
    assert (tmp_path / "fig.png").stat().st_size > 10_000


def test_under_grading_the_figures_are_left_for_the_grader_to_draw_once(monkeypatch, capsys):
    """Graded, the kernel draws none of the chapter's figures (they depend on
    nothing a student wrote): it leaves each one's description and a mark that
    the grading run fills with the picture, drawn once for the whole class."""
    import matplotlib.pyplot as plt
    from IPython.core.interactiveshell import InteractiveShell

    from helpers import plots
    plt.close("all")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append((a, k)))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert runtime.under_nbgrader() and InteractiveShell is not None
    assert ch01.dk_explorer(128) is None
    assert "±11.3" in capsys.readouterr().out
    ch01.qkv_flow()
    assert not plt.get_fignums()
    marks = [k["metadata"][runtime.FIGURE_MARK] for _, k in shown]
    assert [m["key"] for m in marks] == [plots.figure_key(ch01.scaling_figure), plots.figure_key(ch01.qkv_flow_figure)]
    assert marks[0]["args"] == [128] and "11.3" in marks[0]["alt"] and "1.00" in marks[0]["alt"]
    # an argument the registration does not accept is drawn by the kernel itself
    assert not plots.STATIC[plots.figure_key(ch01.scaling_figure)](10 ** 9)


def test_dk_explorer_builds_a_slider(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    shown = []
    monkeypatch.setattr(ch01, "show_widget", lambda w, figure=None, alt=None: shown.append(w))
    ch01.dk_explorer(64)
    box = shown[0]
    slider = box.children[0]
    assert slider.value == 64 and 1024 in slider.options and 4 in slider.options
    slider.value = 512
    assert "512" in box.children[1].value


# ------------------------------------------------------------------ sentences checked against what torch does

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter("ch01_attention", lang).cells if c.cell_type == "markdown")


def test_a_fully_masked_row_is_nan_from_the_subtraction_of_its_maximum_in_both_languages():
    """Exercise 3: with the row maximum subtracted first, −∞ − (−∞) is already nan (numerator and
    denominator never get to be 0/0); torch's own softmax gives nan too."""
    import torch
    row = torch.full((1, 4), float("-inf"))
    m = row.amax(dim=-1, keepdim=True)
    assert torch.isinf(m).all() and torch.isnan(row - m).all()
    assert torch.isnan(torch.softmax(row, dim=-1)).all()
    zh, en = _prose("zh"), _prose("en")
    assert "分子分母都是 0" not in zh and "numerator and denominator are both 0" not in en
    for text in (zh, en):
        assert r"$-\infty-(-\infty)$" in text
    assert "这一行的最大值本身就是 $-\\infty$" in zh and "结果已经是 nan" in zh
    assert "Its maximum is then $-\\infty$ itself" in en and "which is already nan" in en


def test_the_challenge_stub_prints_not_attempted_and_a_finite_answer_passes(capsys):
    """The going-further self-check says "not attempted" for the stub, and passes a masked softmax
    that keeps fully masked rows (and their gradients) finite; a plain one that gives nan fails it."""
    import torch

    from coursekit.author import build
    from helpers import set_language
    from helpers.checks import CheckFailed
    nb = build.build_chapter("ch01_attention", "en")
    set_language("en")
    stub = next(c.source for c in nb.cells if c.cell_type == "code" and "def masked_softmax" in c.source)
    check = next(c.source for c in nb.cells if c.cell_type == "code" and "def check_masked_softmax" in c.source)
    ns = {"torch": torch}
    exec("from helpers import t\nfrom helpers.checks import expect_close, expect_true, passed\n", ns)
    exec(stub, ns)
    exec(check, ns)
    assert "not attempted yet" in capsys.readouterr().out

    def finite(x, mask, dim=-1):
        any_true = mask.expand_as(x).any(dim=dim, keepdim=True)
        safe = x.masked_fill(~mask, float("-inf")).masked_fill(~any_true, 0.0)
        return torch.softmax(safe, dim=dim).masked_fill(~mask, 0.0)
    ns["masked_softmax"] = finite
    exec("check_masked_softmax()", ns)
    assert "masked_softmax: passed" in capsys.readouterr().out

    def plain(x, mask, dim=-1):
        return torch.softmax(x.masked_fill(~mask, float("-inf")), dim=dim)
    ns["masked_softmax"] = plain
    try:
        exec("check_masked_softmax()", ns)
    except CheckFailed as exc:
        assert "row 1" in str(exc)
    else:
        raise AssertionError("a masked softmax that gives nan passed the self-check")


def test_the_hidden_checks_reference_variance_is_the_float64_one_of_the_stated_draw():
    """The reference takes the dot products in float32 (half the cost of float64, in every
    graded notebook): for each draw the checks compare against, it must stay within 1e-6 of
    the variance of float64 products, a thousand times inside the checks' 0.1 % margin."""
    import torch

    from grading.ch01_attention import ref_score_variance, seeded
    for d_k, n, scaled, seed in [(16, 20_000, False, 16), (64, 20_000, True, 65), (200, 20_000, False, 200),
                                 (200, 20_000, True, 201), (16, 100_000, False, 6), (16, 2_000, True, 20)]:
        gen = seeded(seed)
        q, k = torch.randn(n, d_k, generator=gen), torch.randn(n, d_k, generator=gen)
        s = (q.double() * k.double()).sum(-1) / (math.sqrt(d_k) if scaled else 1.0)
        exact = float(s.var())
        assert abs(ref_score_variance(d_k, n, scaled, seed) - exact) < 1e-6 * exact


def test_the_hidden_check_reads_its_stored_references_and_computes_them_for_another_torch():
    """check_score_variance compares with the seven references `make source` stored
    (grading/ch01_attention_stored.py) instead of drawing 25 million numbers again in every
    graded kernel: with the computation counted, the model answer passes and a draw of
    another shape is still named without one reference computed. Stored for another torch,
    they are computed again: a stored value that would reject the model answer is not read.
    (In a fresh interpreter: the guard takes its picture of the grading module at the first
    check a process runs, and the counting below replaces one of its functions.)"""
    import subprocess
    import sys
    from pathlib import Path
    script = """
import math, torch
import grading.ch01_attention as g
from grading import guard
from grading.core import GradingFailure

def right(d_k, n_samples=100_000, scaled=False, generator=None):
    q = torch.randn(n_samples, d_k, generator=generator)
    k = torch.randn(n_samples, d_k, generator=generator)
    s = (q * k).sum(-1)
    return (s / math.sqrt(d_k) if scaled else s).var().item()

def other_draw(d_k, n_samples=100_000, scaled=False, generator=None):
    both = torch.randn(n_samples, 2 * d_k, generator=generator)
    s = (both[:, :d_k] * both[:, d_k:]).sum(-1)
    return (s / math.sqrt(d_k) if scaled else s).var().item()

assert {g._draw_name(*d) for d in g.EXACT_DRAWS} == set(g._stored.VALUES)
computed, real = [], g.ref_score_variance
g.ref_score_variance = lambda *a: computed.append(a) or real(*a)
g.check_score_variance(right)
try:
    g.check_score_variance(other_draw)
    raise SystemExit("another draw passed")
except GradingFailure as err:
    assert "[bug:variance_other_draw]" in str(err), str(err)
assert computed == [], computed
g._stored.TORCH, g._stored.VALUES = "0.0.0", {name: 1e6 for name in g._stored.VALUES}
guard.boot(None)        # as a kernel would start with them (changed after its start, they are tampering)
g.check_score_variance(right)
assert sorted(computed) == sorted(g.EXACT_DRAWS), computed
print("ok")
"""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == "ok", out.stderr[-3000:] + out.stdout
