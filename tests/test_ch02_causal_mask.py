"""Unit tests of chapter 2's calculator: its state (stage -> labelled
matrices), its HTML and static figure, and the widget driven without a browser."""
from __future__ import annotations

import math

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from helpers import set_language  # noqa: E402
from helpers.ch02_causal_mask import calculator, calculator_view  # noqa: E402

NEG_INF = float("-inf")


def test_inputs_are_fixed_and_sized_like_the_seed():
    x, w_q, w_k, w_v = calculator.inputs()
    assert x.shape == (5, 4) and w_q.shape == w_k.shape == w_v.shape == (4, 4)
    again = calculator.inputs()
    assert all(np.array_equal(a, b) for a, b in zip((x, w_q, w_k, w_v), again))


def test_tokens_follow_the_language():
    assert calculator.tokens() == ("猫", "坐", "在", "垫", "子")
    set_language("en")
    assert calculator.tokens() == ("cat", "sat", "on", "the", "mat")
    assert len(calculator.TOKENS["en"]) == len(calculator.TOKENS["zh"]) == 5


def test_compute_matches_the_formulas():
    r = calculator.compute(causal=True)
    np.testing.assert_allclose(r["Q"], r["X"] @ r["W_Q"])
    np.testing.assert_allclose(r["S"], r["Q"] @ r["K"].T / math.sqrt(4))
    upper = np.triu(np.ones((5, 5), dtype=bool), 1)
    assert np.all(r["M"][upper] == NEG_INF) and np.array_equal(r["M"][~upper], r["S"][~upper])
    np.testing.assert_allclose(r["A"].sum(-1), 1.0)
    assert np.all(r["A"][upper] == 0.0)
    np.testing.assert_allclose(r["O"], r["A"] @ r["V"])


def test_first_row_is_exactly_one_hot_only_with_the_mask():
    on, off = calculator.compute(True)["A"], calculator.compute(False)["A"]
    assert np.array_equal(on[0], [1.0, 0, 0, 0, 0])
    assert np.all(off > 0) and not np.array_equal(off[0], on[0])
    np.testing.assert_allclose(on[-1], off[-1])      # the last token sees everything either way


def test_each_stage_has_formula_and_labelled_matrices():
    for n in range(1, 6):
        for causal in (True, False):
            st = calculator.stage(n, causal)
            assert st.number == n and st.formula and st.title.startswith("①②③④⑤"[n - 1])
            for m in st.matrices:
                assert m.values.shape == (len(m.rows), len(m.cols))
                assert m.rows == calculator.tokens()
    assert [m.name for m in calculator.stage(1).matrices] == ["X", "Q", "K", "V"]
    with pytest.raises(ValueError):
        calculator.stage(6)


def test_toggle_changes_only_stages_three_to_five():
    for n in (1, 2):
        a, b = calculator.stage(n, True), calculator.stage(n, False)
        assert all(np.array_equal(x.values, y.values) for x, y in zip(a.matrices, b.matrices))
    for n in (3, 4, 5):
        a, b = calculator.stage(n, True), calculator.stage(n, False)
        assert not np.array_equal(a.matrices[0].values, b.matrices[0].values)
    assert "−∞" in calculator.stage(3, True).formula and "−∞" not in calculator.stage(3, False).formula


def test_fmt_shows_minus_infinity_and_two_decimals():
    assert calculator.fmt(NEG_INF) == "−∞"
    assert calculator.fmt(1.0) == "1.00" and calculator.fmt(-0.004) == "0.00" and calculator.fmt(-1.5) == "−1.50"


def test_html_has_values_labels_and_minus_infinity():
    html = calculator_view.stage_html(calculator.stage(3, True), True)
    assert html.count(">−∞</td>") == 10 and "猫" in html and "S′" in html and "因果掩码：开" in html
    assert ">−∞<" not in calculator_view.stage_html(calculator.stage(3, False), False)
    weights = calculator_view.stage_html(calculator.stage(4, True))
    assert "1.00" in weights and "background:#" in weights


def test_calculator_state_walks_and_toggles():
    calc = calculator_view.Calculator()
    seen = [calc.number]
    for _ in range(6):
        calc.next()
        seen.append(calc.number)
    assert seen == [1, 2, 3, 4, 5, 5, 5]
    calc.prev()
    assert calc.number == 4 and calc.causal
    masked = calc.html()
    calc.toggle()
    assert not calc.causal and calc.html() != masked
    calc.toggle(True)
    assert calc.causal and calc.html() == masked


def test_widget_buttons_drive_the_view():
    pytest.importorskip("ipywidgets")
    box = calculator_view.calculator_widget()
    prev, nxt, mask = box.children[0].children
    view = box.children[1]
    assert prev.disabled and "①" in view.value
    for _ in range(3):
        nxt.click()
    assert "④" in view.value and "1.00" in view.value
    mask.value = False
    assert "因果掩码：关" in view.value
    nxt.click()
    assert nxt.disabled and "⑤" in view.value


def test_widget_costs_nothing_under_nbgrader(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert calculator_view.step_through() is None
    calculator_view.show_static()          # returns at once, draws nothing


def test_static_figure_shows_two_stages_with_and_without_mask(tmp_path):
    fig = calculator_view.stages_figure((3, 4))
    assert len(fig.axes) == 4
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("−∞") == 10
    assert "−∞" not in [t.get_text() for t in fig.axes[2].texts]
    fig.savefig(tmp_path / "calc.png")
