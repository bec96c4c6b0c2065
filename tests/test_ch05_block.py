"""Unit tests for ch05's public helpers: the given attention module (handed out
in the chapter's own folder, notebooks/given/), the FFN figures and the Pre-LN /
Post-LN experiment."""
from __future__ import annotations

import math

import matplotlib
import pytest
import torch
from torch import nn

matplotlib.use("Agg")

from block_attention import CausalAttention  # noqa: E402 - notebooks/given/, the chapter's folder

from helpers import set_language  # noqa: E402
from helpers.ch05_block import ffn_plots, norm_placement  # noqa: E402


def test_causal_attention_shape_params_and_causality():
    torch.manual_seed(0)
    attn = CausalAttention(16, 4)
    assert sum(p.numel() for p in attn.parameters()) == 4 * 16 * 16 + 4 * 16
    x = torch.randn(2, 6, 16)
    out = attn(x)
    assert out.shape == (2, 6, 16)
    x2 = x.clone()
    x2[:, 4] += 3.0                             # a later token changes ...
    out2 = attn(x2)
    assert torch.equal(out[:, :4], out2[:, :4])  # ... earlier outputs do not
    assert not torch.allclose(out[:, 4], out2[:, 4])


def test_causal_attention_rejects_bad_heads():
    with pytest.raises(ValueError):
        CausalAttention(10, 3)


def test_activations_known_values():
    x = torch.tensor([-1.0, 0.0, 1.0])
    acts = ffn_plots.activations(x)
    assert torch.allclose(acts["GELU"], torch.nn.functional.gelu(x), atol=1e-6)
    assert torch.allclose(acts["GELU (tanh)"], torch.nn.functional.gelu(x, approximate="tanh"), atol=1e-6)
    assert torch.allclose(acts["SiLU"], torch.nn.functional.silu(x), atol=1e-6)
    assert acts["ReLU"].tolist() == [0.0, 0.0, 1.0]


def test_swiglu_sizes_keep_parameter_count_level():
    s = ffn_plots.swiglu_sizes(768)
    classic = sum(r * c for k, (r, c) in s.items() if k in ("W1", "W2"))
    swiglu = sum(r * c for k, (r, c) in s.items() if k.startswith("W_"))
    assert abs(swiglu - classic) / classic < 0.01
    assert ffn_plots.swiglu_sizes(4096, 11008)["W_down"] == (4096, 11008)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_ffn_figures_draw(lang, tmp_path):
    import matplotlib.pyplot as plt
    set_language(lang)
    for fig in (ffn_plots.activation_figure(), ffn_plots.swiglu_figure(64, 176)):
        fig.savefig(tmp_path / "f.png")
        plt.close(fig)


class _Pre(nn.Module):
    def __init__(self, d=16, h=2):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalAttention(d, h)
        self.ffn = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


def test_toy_batch_targets_are_previous_tokens():
    x, y = norm_placement.toy_batch(3, 7, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (3, 7)
    assert torch.equal(y[:, 1:], x[:, :-1]) and torch.equal(y[:, 0], x[:, 0])


def test_grad_norms_one_per_layer_and_deterministic():
    a = norm_placement.grad_norms(lambda: _Pre(), n_layers=3, d=16, n=4, batch=2)
    b = norm_placement.grad_norms(lambda: _Pre(), n_layers=3, d=16, n=4, batch=2)
    assert len(a) == 3 and a == b and all(v > 0 and math.isfinite(v) for v in a)


def test_train_returns_losses_that_fall_and_keeps_threads():
    threads = torch.get_num_threads()
    losses = norm_placement.train(lambda: _Pre(), n_layers=1, d=16, n=4, batch=8, steps=25, lr=3e-3, warmup=5)
    assert len(losses) == 25
    assert losses[0] == pytest.approx(math.log(16), rel=0.3)
    assert sum(losses[-5:]) < sum(losses[:5])
    assert torch.get_num_threads() == threads


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_experiment_figures_draw(lang, tmp_path):
    import matplotlib.pyplot as plt
    set_language(lang)
    fig = norm_placement.grad_norm_figure([0.5, 0.4, 0.3], [0.6, 0.9, 0.8])
    assert len(fig.axes) == 2
    fig.savefig(tmp_path / "g.png")
    plt.close(fig)
    fig = norm_placement.training_figure({"a": [2.7, 2.0, 1.0], "b": [2.8, 2.8, 2.8]}, floor=math.log(16))
    fig.savefig(tmp_path / "t.png")
    plt.close(fig)


# ------------------------------------------------------------------ hidden checks (grading/ch05_block.py)

from grading import ch05_block as grading_ch05  # noqa: E402
from grading.cases import same  # noqa: E402
from grading.core import GradingFailure, seeded  # noqa: E402


class _TanhGeluFloat32Constant(nn.Module):
    """A textbook FFN: tanh GELU whose sqrt(2/pi) is a float32 tensor, also after .double()."""

    def __init__(self, d, hidden=None):
        super().__init__()
        hidden = hidden or 4 * d
        self.fc, self.proj = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.c = torch.tensor(math.sqrt(2 / math.pi))

    def forward(self, x):
        h = self.fc(x)
        return self.proj(0.5 * h * (1 + torch.tanh(self.c * (h + 0.044715 * h ** 3))))


class _ReluFFN(_TanhGeluFloat32Constant):
    def forward(self, x):
        return self.proj(torch.relu(self.fc(x)))


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_feedforward_with_a_float32_constant_keeps_full_marks(lang, capsys):
    set_language(lang)
    grading_ch05.check_feedforward(_TanhGeluFloat32Constant)
    assert "✓" in capsys.readouterr().out


def _layer_norm_unbiased(x, weight, bias, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight + bias


@pytest.mark.parametrize("lang,words", [("en", ("tolerance", "largest difference", "unbiased")),
                                        ("zh", ("容差", "最大差", "无偏方差"))])
def test_layer_norm_failure_states_tolerance_difference_and_bug(lang, words):
    set_language(lang)
    with pytest.raises(GradingFailure) as err:
        grading_ch05.check_layer_norm(_layer_norm_unbiased)
    for word in words:
        assert word in str(err.value), str(err.value)


def test_layer_norm_cases_separate_bugs_from_rounding_by_orders_of_magnitude():
    """On every case, a correct float32 answer stays well inside the tolerance, and on the cases meant for
    them the unbiased variance (d = 768) and the eps placement (tiny variance) lie far outside it."""
    set_language("en")
    for case in grading_ch05._ln_cases(seeded(501)):
        x, w, b = case.args
        expected = grading_ch05.ref_layer_norm(x, w, b, **case.kwargs)
        xf = x.float()
        mu = xf.mean(-1, keepdim=True)
        mine = ((xf - mu) / torch.sqrt(((xf - mu) ** 2).mean(-1, keepdim=True) + case.kwargs.get("eps", 1e-5))
                * w.float() + b.float()).to(x.dtype)
        assert same(mine, expected, case.tol), case.label
        if "768" in case.label or "tiny" in case.label:
            key = "unbiased" if "768" in case.label else "eps_outside"
            bug_out = grading_ch05.LN_BUGS[key].impl(x, w, b, **case.kwargs)
            loose = grading_ch05.Tol(rtol=case.tol.rtol * 10, atol=case.tol.atol * 10)
            assert not same(bug_out, expected, loose), (case.label, key)


def test_a_block_with_its_own_wrong_ffn_fails_as_its_own():
    """A Block that builds its own (ReLU) FFN instead of FeedForward: the failure is
    the Block's (a wrong FeedForward would be replaced by a correct one instead)."""
    set_language("en")
    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.ln1, self.attn, self.ln2, self.ffn = nn.LayerNorm(d), CausalAttention(d, h), nn.LayerNorm(d), _ReluFFN(d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.ffn(self.ln2(x))

    with pytest.raises(GradingFailure, match=r"self\.ffn does not compute proj\(GELU\(fc\(x\)\)\)") as err:
        grading_ch05.check_block(Block)
    assert "Exercise 1" not in str(err.value) and "exercise 1" not in str(err.value)


# ------------------------------------------------------------------ the re-read: what was fixed, in both languages

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter("ch05_block", lang).cells if c.cell_type == "markdown")


def test_the_model_answer_quotes_the_adam_steps_from_the_record():
    """Exercise 5's model answer quoted 0.86 and 0.49 as typed numbers ("almost twice"): now the claims."""
    from coursekit.author.claims import CLAIMS
    post, pre = (CLAIMS["ch05_block"][c].value() for c in ("ch05.o-post", "ch05.o-pre"))
    zh, en = _prose("zh"), _prose("en")
    assert "变了将近一倍" not in zh and "almost twice as far" not in en
    assert f"同样大的一步让它的输出变得更多（{post} 对 {pre}）" in zh
    assert f"a step of the same size moves its output further ({post} against {pre})" in en


def test_the_given_attention_is_said_to_ship_with_this_chapter_only():
    from harness import ROOT
    zh, en = _prose("zh"), _prose("en")
    assert "helpers/ch05_block/block_attention.py" not in zh + en
    assert not (ROOT / "helpers" / "ch05_block" / "block_attention.py").exists()
    assert "这一章的文件夹里附带了它的代码 `block_attention.py`" in zh and "只随这一章发给你" in zh
    assert "This chapter's folder holds its code, `block_attention.py`" in en and "it comes with this chapter only" in en


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_count_short_of_the_ffn_biases_is_named_as_such(lang):
    """12d² + 8d is 5d short: the FFN's biases (it was once named the attention's, which are 4d)."""
    set_language(lang)
    with pytest.raises(GradingFailure) as err:
        grading_ch05.check_block_params(lambda d: 12 * d * d + 8 * d)
    assert "[bug:params_no_ffn_bias]" in str(err.value)
    with pytest.raises(GradingFailure) as err:
        grading_ch05.check_block_params(lambda d: 12 * d * d + 4 * d)
    assert "[bug:params_no_linear_biases]" in str(err.value)


def test_the_grader_recognises_the_given_attention_without_importing_it():
    import inspect
    source = inspect.getsource(grading_ch05)
    assert "block_attention import" not in source and "import block_attention" not in source
    block = type("Block", (nn.Module,), {})()
    assert grading_ch05._is_given_attention(CausalAttention(8, 2), 8, 2)
    assert not grading_ch05._is_given_attention(nn.MultiheadAttention(8, 2, batch_first=True), 8, 2)
    assert not grading_ch05._is_given_attention(block, 8, 2)
