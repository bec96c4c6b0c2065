"""Shared pieces of the hidden checks."""
import pytest
import torch

from grading.core import GradingFailure, expect_autograd


def test_expect_autograd_rejects_a_detached_output():
    x = torch.ones(2, requires_grad=True)
    expect_autograd(x * 2, "f")
    with pytest.raises(GradingFailure, match="输出断开了计算图"):
        expect_autograd((x * 2).detach(), "f")
    with pytest.raises(GradingFailure, match="输出断开了计算图"):
        expect_autograd((x * 2).tolist(), "f")


def test_diagnose_names_the_matching_bug_and_skips_bugs_that_are_right_here():
    from grading.core import Bug, diagnose
    x = torch.tensor([1.0, -2.0, 3.0])
    harmless = Bug("abs_on_positive", "", "", lambda v: v.abs())   # equals the answer on positive inputs only
    doubled = Bug("doubled", "", "", lambda v: 2 * v)
    assert diagnose(2 * x, [harmless, doubled], x, expected=x) is doubled
    assert diagnose(x.abs(), [harmless, doubled], x, expected=x) is harmless
    assert diagnose(2 * x.abs(), [harmless, doubled], x.abs(), expected=x.abs()) is doubled  # abs skipped: it is right


def test_dead_names_stay_removed():
    from grading import core
    assert not hasattr(core, "not_done") and not hasattr(core, "sqrt")
