"""Unit tests for helpers/ch04_positions.py (chapter 4's figures and RoPE widget)."""
from __future__ import annotations

import math
import re

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers import ch04_positions as positions  # noqa: E402
from helpers import set_language


def rotate(x, pos, base=10000.0):
    """A plain RoPE for the tests (adjacent pairs), standing in for the student's."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.to(torch.float64)[:, None] * theta
    z = torch.complex(x[..., 0::2].double(), x[..., 1::2].double()) * torch.polar(torch.ones_like(ang), ang)
    return torch.stack([z.real, z.imag], -1).flatten(-2).to(x.dtype)


@pytest.fixture(autouse=True)
def _zh(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    set_language("zh")
    yield
    set_language("zh")


def table(n, d):
    p = torch.arange(n, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack([torch.sin(p * w), torch.cos(p * w)], -1).reshape(n, d)


def test_sinusoid_figure_draws_heatmap_and_lines(tmp_path):
    fig = positions.sinusoid_figure(table(64, 32), dims=(0, 1, 30, 99))
    heat, lines = fig.axes[0], fig.axes[1]
    assert heat.images and heat.images[0].get_array().shape == (32, 64)     # dimensions up, positions across
    assert len(lines.lines) == 3                                            # dim 99 does not exist: skipped
    fig.savefig(tmp_path / "sin.png")


def test_frequency_figure_plots_each_curve_and_lengths(tmp_path):
    th = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    fig = positions.frequency_figure({"a": th, "b": th / 4}, context=4096, extended=16384)
    ax1, ax2 = fig.axes[:2]
    assert len(ax1.lines) == 2 and ax1.get_yscale() == "log"
    assert len(ax2.lines) == 4                           # two wavelength curves + two context lines
    assert math.isclose(ax2.lines[0].get_ydata()[0], 2 * math.pi)
    fig.savefig(tmp_path / "freq.png")


def test_rope_score_depends_only_on_offset():
    q, k = (1.0, 0.25), (0.4, 0.9)
    s = [positions.rope_score(rotate, q, k, m, m + 3) for m in (0, 4, 17)]
    assert max(s) - min(s) < 1e-12
    assert abs(positions.rope_score(rotate, q, k, 0, 3) - positions.rope_score(rotate, q, k, 0, 4)) > 1e-3


def test_rope_pair_figure_marks_current_score(tmp_path):
    fig = positions.rope_pair_figure(rotate, (1.0, 0.25), (0.4, 0.9), 2, 5)
    assert len(fig.axes) == 2
    marker = fig.axes[1].lines[-1]
    assert marker.get_xdata()[0] == 3
    assert math.isclose(marker.get_ydata()[0], positions.rope_score(rotate, (1.0, 0.25), (0.4, 0.9), 2, 5))
    fig.savefig(tmp_path / "pair.png")


def _score(text: str) -> float:
    return float(re.search(r"= ([+-][0-9.]+)", text).group(1))


def test_widget_sliders_move_together_and_keep_the_score():
    box, c = positions.build_rope_explorer(rotate, m=2, n=5)
    first = _score(c["text"].value)
    c["together"].value = True
    c["m"].value = 9
    assert c["n"].value == 12                                 # n followed m
    assert abs(_score(c["text"].value) - first) < 1e-4        # same offset, same score
    c["n"].value = 20
    assert c["m"].value == 17
    assert abs(_score(c["text"].value) - first) < 1e-4
    c["n"].value = 30 if c["n"].max >= 30 else c["n"].max     # stays within range
    c["together"].value = False
    c["n"].value = 11                                         # offset changes: so does the score
    assert c["m"].value == 17 and abs(_score(c["text"].value) - first) > 1e-3


def test_widget_refuses_a_joint_move_past_the_end():
    _, c = positions.build_rope_explorer(rotate, m=2, n=15, max_pos=20)
    c["together"].value = True
    c["m"].value = 10                                         # n would be 23 > 20
    assert (c["m"].value, c["n"].value) == (2, 15)


def test_explorer_prints_under_grading(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    set_language("en")
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append((a, k)))
    assert positions.rope_explorer(rotate, m=2, n=5) is None
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and "n − m = 3" in out[0] and "n − m = 3" in out[1]
    assert _score(out[0]) == _score(out[1])
    import matplotlib.pyplot as plt
    plt.close("all")
    assert len(shown) == 1                          # the widget's static picture, for the feedback page
    shown.clear()
    positions.show_rope_pair(rotate)          # drawn while grading too (it shows the student's rotation)
    positions.show_sinusoids(table(8, 4))
    positions.show_frequencies({"a": torch.ones(3)})
    assert not plt.get_fignums()                              # each figure closed once shown
    alts = [k["metadata"]["image/png"]["alt"] for _, k in shown]
    assert len(alts) == 3 and "⟨R_m q, R_n k⟩" in alts[0] and "8 positions × 4 dimensions" in alts[1]
    assert "longest wavelength 6 positions" in alts[2]


# ---------------------------------------------------------------- helpers/extrapolation.py (the section 6 experiment)

def sinusoids(n, d, base=10000.0):
    p = torch.arange(n, dtype=torch.float64)[:, None]
    w = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack([torch.sin(p * w), torch.cos(p * w)], -1).flatten(-2).float()


def test_alibi_slopes_and_the_ntk_base():
    from helpers import extrapolation as ex
    assert ex.alibi_slopes(4).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256]
    s = ex.Setup()
    assert s.ntk_base(s.n_train) == s.base
    d = s.d_head
    for n in (64, 128):                                  # NTK: the slowest pair turns exactly n / n_train slower
        slowest = lambda base: base ** (-(d - 2) / d)    # noqa: E731
        assert slowest(s.base) / slowest(s.ntk_base(n)) == pytest.approx(n / s.n_train, rel=1e-12)


def test_each_kind_reads_positions_its_own_way():
    from helpers import extrapolation as ex
    s = ex.Setup(n_layer=1)
    x = torch.randint(s.vocab, (2, 40))
    torch.manual_seed(0)
    learned = ex.PositionModel("learned", s)
    learned(x[:, :s.n_train])
    with pytest.raises(IndexError, match="32 rows"):
        learned(x)                                       # no row for position 32 and beyond
    torch.manual_seed(0)
    rope = ex.PositionModel("rope", s, apply_rope=rotate)
    with torch.no_grad():
        rope.blocks[0].c_attn.weight.normal_(0.0, 0.5)    # scores large enough for the rotation to show
    assert not torch.allclose(rope(x), rope(x, base=s.ntk_base(64)))      # the base reaches the rotation
    torch.manual_seed(0)
    alibi = ex.PositionModel("alibi", s)
    y = alibi(x)
    shuffled = alibi(x[:, torch.randperm(40)])           # ALiBi alone knows order: shuffling changes the output
    assert y.shape == (2, 40, s.vocab) and not torch.allclose(y.sort(1).values, shuffled.sort(1).values)
    with pytest.raises(ValueError):
        ex.PositionModel("rope+ntk", s)                  # read from the RoPE model, never trained on its own


def test_a_run_reads_every_length_and_is_kept_for_the_same_functions():
    from helpers import extrapolation as ex
    s = ex.Setup(steps=3, lengths=(32, 48), eval_batch=8, n_layer=1)
    r = ex.run(sinusoids, rotate, s, progress=False)
    assert r.losses["learned"][1] is None and all(v is not None for k, vs in r.losses.items() if k != "learned"
                                                  for v in vs)
    assert all(0 < v < 5 for vs in r.losses.values() for v in vs if v is not None)
    assert ex.run(sinusoids, rotate, s, progress=False) is r                          # nothing trained twice
    other = ex.run(sinusoids, lambda x, p, base=10000.0: rotate(x, p, 2 * base), s, progress=False)
    assert other is not r                                                             # another rotation, another run


def test_the_rope_model_learns_through_the_rotation():
    from helpers import extrapolation as ex
    s = ex.Setup(n_layer=1)
    torch.manual_seed(0)
    model = ex.PositionModel("rope", s, apply_rope=rotate)
    x = torch.randint(s.vocab, (2, 16))
    model(x).sum().backward()
    q_rows = model.blocks[0].c_attn.weight.grad[:s.d_model]
    assert q_rows.abs().sum() > 0                       # gradients reach W_Q through the student's rotation


def test_extrapolation_figure_draws_the_learned_table_up_to_its_length():
    from helpers import extrapolation as ex
    s = ex.Setup(lengths=(32, 64))
    r = ex.Result(s, {"sinusoidal": [0.3, 0.9], "learned": [0.25, None], "rope": [0.2, 0.5],
                      "rope+ntk": [0.2, 0.4], "alibi": [0.5, 0.45]})
    fig = ex.figure(r)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["可学习位置表"].get_xdata()) == [32] and list(lines["ALiBi"].get_xdata()) == [32, 64]
    matplotlib.pyplot.close(fig)


# ---------------------------------------------------------------- the text, as the student reads it

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter("ch04_positions", lang).cells if c.cell_type == "markdown")


def _section(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i:text.index(end, i)]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_statements_say_which_dtype_rope_frequencies_returns(lang):
    """Exercise 3 asks for angles in float64 and suggests rope_frequencies: the text must say that θ comes
    out in float64 (a float32 θ cast up later is not precise at large positions)."""
    text = _prose(lang)
    ex2 = _section(text, "练习 2：" if lang == "zh" else "Exercise 2:", "练习 3：" if lang == "zh" else "Exercise 3:")
    ex3 = _section(text, "练习 3：" if lang == "zh" else "Exercise 3:", "两种布局" if lang == "zh" else "Two layouts")
    assert "**float64**" in ex2
    sentence = next(line for line in ex3.splitlines() if "rope_frequencies" in line and "练习 2" in line
                    or "Exercise 2" in line and "rope_frequencies" in line)
    assert "float64" in sentence
    assert "500003" in ex3                        # the test's positions, as the statement promises


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_learned_table_has_no_row_for_the_1025th_position(lang):
    """Positions count from 0: the table of 1024 rows ends at position 1024 = the 1025th. The text once said
    'position 1025' where it meant the 1025th."""
    text = _prose(lang)
    assert "position 1025" not in text and "dead at 1025" not in text and "在 1025 处" not in text
    found = "第 1025 个位置" if lang == "zh" else "the 1025th"
    intro = text[:text.index("## 1.")]
    summary = text[text.index("## 小结" if lang == "zh" else "## Summary"):]
    assert found in intro and found in summary


# ---------------------------------------------------------------- the visible test of apply_rope

def _visible(test_id: str, replace: dict | None = None, lang: str = "en"):
    """Run a test cell's visible part, as Validate would, on the model answers (``replace``: grade id -> code).
    Returns the CheckFailed it raised, or None."""
    from pathlib import Path

    import nbformat

    from helpers import checks
    from helpers.checks import CheckFailed
    root = Path(__file__).resolve().parent.parent
    nb = nbformat.read(root / "source" / "ch04_positions" / "ch04_positions.ipynb", as_version=4)
    set_language(lang)
    checks._OUTCOME.clear()
    ns: dict = {"__name__": "__course__"}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("solution"):
            exec((replace or {}).get(meta["grade_id"], cell.source), ns)
        elif not meta and ("Probes(" in cell.source or "def attend(x" in cell.source):
            exec(cell.source, ns)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == test_id)
    try:
        exec(cell.source.split("### END HIDDEN TESTS", 1)[-1], ns)
    except CheckFailed as exc:
        return exc
    return None


FLOAT32_ANGLES = '''def apply_rope(x, positions, base=10000.0):
    theta = rope_frequencies(x.shape[-1], base).to(x.dtype)
    ang = positions.to(x.dtype)[:, None] * theta                     # in x's dtype: float32 for float32 x
    c, s = ang.cos(), ang.sin()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
'''


def test_the_visible_test_catches_angles_computed_in_float32_and_names_it():
    """The text stresses float64 angles at large positions; the visible test checks positions up to 500003 at
    float32's own precision, and names the mistake with the grader's key."""
    assert _visible("test_apply_rope") is None
    failed = _visible("test_apply_rope", {"apply_rope": FLOAT32_ANGLES})
    assert failed is not None and failed.key == "bug:rope_angles_in_float32", failed
    assert "500003" in str(failed) and "float64" in str(failed)


def test_a_float32_theta_fails_exercise_2_and_is_named():
    failed = _visible("test_rope_frequencies", {"rope_frequencies": "def rope_frequencies(d, base=10000.0):\n"
                                                                    "    return base ** (-torch.arange(0, d, 2) / d)\n"})
    assert failed is not None and failed.key == "bug:frequencies_not_float64", failed
