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
