"""Unit tests for the public helpers package."""
from __future__ import annotations

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers import get_language, set_language, t  # noqa: E402
from helpers import checks, plots, scaling, widgets  # noqa: E402


def test_language_switch_and_t():
    assert get_language() == "zh" and t("中", "en") == "中"
    set_language("en")
    assert t("中", "en") == "en"
    with pytest.raises(ValueError, match="language must be one of"):
        set_language("fr")


def test_expect_close_passes_and_fails_with_expected_and_got():
    checks.expect_close(torch.tensor([1.0, 2.0]), [1.0, 2.0], "x")
    with pytest.raises(checks.CheckFailed) as err:
        checks.expect_close(torch.tensor([1.0, 2.5]), [1.0, 2.0], "x", hint="look here")
    msg = str(err.value)
    assert "期望" in msg and "实际" in msg and "2.5" in msg and "look here" in msg


def test_expect_close_reports_nan_and_shape():
    with pytest.raises(checks.CheckFailed, match="nan"):
        checks.expect_close(torch.tensor([float("nan")]), [1.0], "x")
    set_language("en")
    with pytest.raises(checks.CheckFailed, match=r"expected shape \(2,\), got \(3,\)"):
        checks.expect_close(torch.zeros(3), [1.0, 2.0], "x")
    with pytest.raises(checks.CheckFailed, match="expected a torch.Tensor"):
        checks.expect_shape([1, 2], (2,), "x")


def test_check_failures_render_without_traceback():
    err = checks.CheckFailed("boom")
    assert err._render_traceback_() == ["\x1b[31mCheckFailed\x1b[0m: boom"]


def test_dot_samples_variance_grows_like_d_k():
    for d_k in (4, 64, 256):
        v = scaling.dot_samples(d_k, n=20_000).var()
        assert 0.9 * d_k < v < 1.1 * d_k


def test_weight_row_saturates_without_scaling():
    raw, scaled = scaling.weight_row(1024), scaling.weight_row(1024, scaled=True)
    assert math.isclose(raw.sum(), 1) and math.isclose(scaled.sum(), 1)
    assert raw.max() > 0.99 and scaled.max() < 0.9


def test_jacobian_norm_collapses_only_without_scaling():
    assert scaling.jacobian_norm(1024) < 0.5 * scaling.jacobian_norm(4)
    assert abs(scaling.jacobian_norm(1024, scaled=True) - scaling.jacobian_norm(4, scaled=True)) < 0.05


def test_saturation_ratio_matches_seed_number():
    # the seed: at d_k = 128 a typical score is ±11 and e^11 / e^-11 ≈ 3.6e9
    assert math.isclose(scaling.saturation_ratio(121), math.exp(22))
    assert 3.5e9 < math.exp(11) / math.exp(-11) < 3.7e9


def test_scaling_figure_has_three_panels(tmp_path):
    fig = plots.scaling_figure(128)
    assert len(fig.axes) == 3
    fig.savefig(tmp_path / "fig.png")
    import matplotlib.pyplot as plt
    plt.close(fig)
    assert (tmp_path / "fig.png").stat().st_size > 10_000


def test_label_falls_back_to_english_without_cjk_font(monkeypatch):
    monkeypatch.setattr(plots, "cjk_font", lambda: None)
    assert plots.label("中", "en") == "en"
    monkeypatch.setattr(plots, "cjk_font", lambda: "Noto Sans CJK SC")
    assert plots.label("中", "en") == "中"


def test_demos_stay_quiet_under_grading(monkeypatch, capsys):
    import matplotlib.pyplot as plt
    plt.close("all")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert widgets.grading()
    assert widgets.dk_explorer(128) is None
    assert "±11.3" in capsys.readouterr().out
    plots.show_scaling(128)  # returns at once, draws nothing
    assert not plt.get_fignums()


def test_dk_explorer_builds_a_slider(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    shown = []
    import IPython.display
    monkeypatch.setattr(IPython.display, "display", lambda w: shown.append(w))
    widgets.dk_explorer(64)
    box = shown[0]
    slider = box.children[0]
    assert slider.value == 64 and 1024 in slider.options and 4 in slider.options
    slider.value = 512
    assert "512" in box.children[1].value
