"""Unit tests for helpers.ch03_multi_head (chapter 3's demos)."""
from __future__ import annotations

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers import ch03_multi_head as heads  # noqa: E402
from helpers import set_language


def test_tokenize_words_characters_and_limit():
    assert heads.tokenize("the cat  sat") == ["the", "cat", "sat"]
    assert heads.tokenize("猫坐在垫子上") == ["猫", "坐", "在", "垫", "子", "上"]
    assert len(heads.tokenize(" ".join(["w"] * 40))) == heads.MAX_TOKENS
    assert heads.tokenize("   ") == ["∅"]


def test_embed_same_word_same_vector_and_one_hot_positions():
    x = heads.embed(["the", "cat", "the"])
    assert x.shape == (3, heads.D_MODEL)
    assert torch.equal(x[0, :heads.D_TOKEN], x[2, :heads.D_TOKEN])
    assert not torch.equal(x[0, :heads.D_TOKEN], x[1, :heads.D_TOKEN])
    assert torch.equal(x[:, heads.D_TOKEN:heads.D_TOKEN + 3], torch.eye(3))
    with pytest.raises(ValueError):
        heads.embed(["a"] * (heads.MAX_TOKENS + 1))


def test_hand_built_head_looks_at_the_previous_token():
    tokens = heads.tokenize("one two three four five six seven")
    w = heads.causal_pattern(heads.embed(tokens), *heads.previous_token_weights())[0]
    assert w.shape == (7, 7)
    assert w[0, 0] == pytest.approx(1.0)
    for i in range(1, 7):
        assert w[i, i - 1] > 0.99
    assert torch.allclose(w.sum(-1), torch.ones(7))
    assert torch.all(w.triu(1) == 0)                       # causal


def test_random_heads_are_causal_and_differ():
    x = heads.embed(heads.tokenize("the cat sat on the mat"))
    w = heads.random_model_heads(x, n_heads=4)
    assert w.shape == (4, 6, 6)
    assert torch.all(w.triu(1) == 0)
    assert torch.allclose(w.sum(-1), torch.ones(4, 6), atol=1e-6)
    assert not torch.allclose(w[0], w[1])


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_figures_draw(lang):
    import matplotlib.pyplot as plt
    set_language(lang)
    fig = heads.previous_token_figure("the cat sat")
    assert len(fig.axes) == 3                                # two heatmaps and a colour bar
    plt.close(fig)
    fig = heads.heads_figure("猫坐在垫子上", n_heads=4)
    assert len(fig.axes) == 5
    plt.close(fig)
    fig = heads.heads_figure("猫坐在垫子上", n_heads=4, head=2)
    assert len(fig.axes) == 2
    plt.close(fig)


def test_widgets_leave_their_static_figure_to_the_grader_while_grading(monkeypatch):
    """Graded, the kernel draws neither figure (both depend on nothing a
    student wrote): each leaves its description and a mark for the grader."""
    from helpers import plots
    from helpers.runtime import FIGURE_MARK
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append((a, k)))
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert heads.previous_token_explorer("the cat") is None
    assert heads.head_explorer("the cat") is None
    marks = [k["metadata"][FIGURE_MARK] for _, k in shown]
    assert [m["key"] for m in marks] == [plots.figure_key(heads.previous_token_figure),
                                         plots.figure_key(heads.heads_figure)]
    assert marks[0]["args"] == ["the cat"] and "1.00" in marks[0]["alt"]
    assert not plots.STATIC[marks[0]["key"]]("x" * 1000)      # a huge text is not drawn by the grader


def test_widgets_build_outside_grading(monkeypatch):
    import matplotlib.pyplot as plt
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    heads.previous_token_explorer("the cat sat")
    heads.head_explorer("the cat sat", n_heads=2)
    plt.close("all")


# ------------------------------------------------------------------ sentences checked against their sources

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter("ch03_multi_head", lang).cells if c.cell_type == "markdown")


def test_clark_heads_go_from_the_dependent_to_its_head_in_both_languages():
    """Clark et al. (2019), "What Does BERT Look At?": direct objects attend to their verbs,
    determiners to their nouns, coreferent mentions to their antecedents (not the other way round)."""
    zh, en = _prose("zh"), _prose("en")
    assert "从动词看向它的宾语" not in zh and "从名词看向它的限定词" not in zh
    assert "look from a verb to its object" not in en and "from a noun to its determiner" not in en
    assert "让宾语看向支配它的动词" in zh and "让限定词（冠词等）看向它修饰的名词" in zh and "让代词看向它所指的先行词" in zh
    assert "a direct object looks at its verb" in en and "a determiner (an article, say) at its noun" in en
    assert "a pronoun at the earlier mention it refers to" in en
    for text in (zh, en):
        assert "Clark" in text and "1906.04341" in text


class _GQA(torch.nn.Module):
    """Grouped-query attention as the challenge states it (for the self-check's own test)."""

    def __init__(self, d, h, h_kv, group_of=None):
        super().__init__()
        self.h, self.h_kv, self.d_k = h, h_kv, d // h
        self.q = torch.nn.Linear(d, d)
        self.kv = torch.nn.Linear(d, 2 * h_kv * self.d_k)
        self.proj = torch.nn.Linear(d, d)
        self.group_of = group_of or (lambda i: i * h_kv // h)

    def forward(self, x):
        B, N, d = x.shape
        q = self.q(x).view(B, N, self.h, self.d_k).transpose(1, 2)
        k, v = (a.view(B, N, self.h_kv, self.d_k).transpose(1, 2) for a in self.kv(x).chunk(2, dim=-1))
        pick = torch.tensor([self.group_of(i) for i in range(self.h)])
        w = (q @ k[:, pick].transpose(-2, -1) / self.d_k ** 0.5).masked_fill(
            ~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        return self.proj((w @ v[:, pick]).transpose(1, 2).reshape(B, N, d))


def test_the_grouped_attention_self_check_passes_a_right_answer_and_fails_a_wrong_grouping(capsys):
    from helpers.checks import CheckFailed

    class Stub(torch.nn.Module):
        def __init__(self, d, h, h_kv):
            super().__init__()
            raise NotImplementedError()
    heads.check_grouped_attention(Stub)
    assert "还没有做" in capsys.readouterr().out                # zh, the default language
    heads.check_grouped_attention(_GQA)
    assert "GroupedQueryAttention" in capsys.readouterr().out

    class Interleaved(_GQA):                                   # head i takes group i % h_kv: not neighbours
        def __init__(self, d, h, h_kv):
            super().__init__(d, h, h_kv, group_of=lambda i: i % h_kv)
    with pytest.raises(CheckFailed):
        heads.check_grouped_attention(Interleaved)
