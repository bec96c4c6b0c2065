"""Unit tests for the public helpers package."""
from __future__ import annotations

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers import checks, get_language, plots, set_language, t  # noqa: E402  # noqa: E402


def test_language_switch_and_t():
    assert get_language() == "zh" and t("中", "en") == "中"
    set_language("en")
    assert t("中", "en") == "en"
    with pytest.raises(ValueError, match="language must be one of"):
        set_language("fr")


def test_expect_close_passes_and_fails_with_expected_and_got():
    checks.expect_close(torch.tensor([1.0, 2.0]), [1.0, 2.0], "x")
    with pytest.raises(checks.CheckFailed) as err:
        checks.expect_close(torch.tensor([1.0, 2.5]), [1.0, 2.0], "x", reread="look here")
    msg = str(err.value)
    # the evidence: what was expected, what came out, at which place, and what to reread
    assert "期望" in msg and "实际" in msg and "2.5" in msg and "[1]" in msg and "look here" in msg


def test_expect_close_reports_nan_and_shape():
    with pytest.raises(checks.CheckFailed, match="nan"):
        checks.expect_close(torch.tensor([float("nan")]), [1.0], "x")
    set_language("en")
    with pytest.raises(checks.CheckFailed, match=r"expected shape \(2\), got \(3\)"):
        checks.expect_close(torch.zeros(3), [1.0, 2.0], "x")
    with pytest.raises(checks.CheckFailed, match="expected a torch.Tensor"):
        checks.expect_shape([1, 2], (2,), "x")


def test_check_failures_render_without_traceback():
    err = checks.CheckFailed("boom")
    assert err._render_traceback_() == ["\x1b[31m✗\x1b[0m boom"]


def test_label_falls_back_to_english_without_cjk_font(monkeypatch):
    monkeypatch.setattr(plots, "cjk_font", lambda: None)
    assert plots.label("中", "en") == "en"
    monkeypatch.setattr(plots, "cjk_font", lambda: "Noto Sans CJK SC")
    assert plots.label("中", "en") == "中"
