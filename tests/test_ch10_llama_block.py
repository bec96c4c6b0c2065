"""Fast checks of ch10_llama_block's helpers and grading references: the
read-only RoPE keeps chapter 4's contract, the rotate-half permutation maps
our layout onto Hugging Face's, the references agree with transformers'
modules, and the model solution passes every hidden check in both languages
while known bugs are named in both."""
from __future__ import annotations

import functools
import math

import pytest
import torch
from test_grading_inprocess import run_check, solution_namespace
from torch import nn

from grading import ch10_llama_block as g
from grading.core import GradingFailure
from helpers import ch10_llama_block as llama
from helpers.i18n import set_language

CHAPTER = "ch10_llama_block"


@pytest.fixture(autouse=True)
def _zh_after():
    yield
    set_language("zh")


def _pairs_by_hand(x, pos, base=10000.0):
    d = x.shape[-1]
    out = x.clone()
    for m in range(x.shape[-2]):
        for i in range(d // 2):
            a = float(pos[m]) * base ** (-2 * i / d)
            x0, x1 = x[..., m, 2 * i], x[..., m, 2 * i + 1]
            out[..., m, 2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
            out[..., m, 2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    return out


def test_apply_rope_keeps_chapter_4_contract():
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 7, 100])
    assert torch.allclose(llama.apply_rope(x, pos), _pairs_by_hand(x, pos), atol=1e-12)
    assert torch.allclose(llama.apply_rope(x, pos, base=50.0), _pairs_by_hand(x, pos, 50.0), atol=1e-12)
    x32 = x.float()
    assert llama.apply_rope(x32, pos).dtype == torch.float32
    with pytest.raises(ValueError):
        llama.apply_rope(torch.randn(4, 3, 8), torch.arange(4))      # tokens must be on axis -2
    with pytest.raises(ValueError):
        llama.apply_rope(torch.randn(3, 7), torch.arange(3))         # odd width


def test_permutation_maps_adjacent_pairs_onto_rotate_half():
    p = llama.rotate_half_permutation(8)
    assert p.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    x, pos = torch.randn(3, 6, 8, dtype=torch.float64), torch.arange(6)
    assert torch.allclose(llama.apply_rope(x, pos)[..., p], llama.rotate_half_rope(x[..., p], pos), atol=1e-12)
    assert not torch.allclose(llama.apply_rope(x, pos), llama.rotate_half_rope(x, pos), atol=1e-3)
    w = torch.arange(2 * 8 * 3, dtype=torch.float64).reshape(16, 3)
    rows = llama.permute_rows(w, 2)
    assert torch.equal(rows[:8], w[:8][p]) and torch.equal(rows[8:], w[8:][p])


def test_hf_rotary_object_matches_reference_rope():
    """transformers' own rotate-half with the permuted rows equals our pairs."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    cfg = llama.hf_config(16, 2, 1, 8)
    q = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    cos, sin = LlamaRotaryEmbedding(cfg)(q, torch.arange(5)[None])
    p = llama.rotate_half_permutation(8)
    theirs, _ = apply_rotary_pos_emb(q[..., p], q[..., p], cos, sin)
    assert torch.allclose(theirs, g.ref_rope_pairs(q, torch.arange(5), 10000.0)[..., p], atol=1e-6)


def _weights(d, n_head, n_kv, d_ff, seed=0):
    gen = torch.Generator().manual_seed(seed)
    d_k = d // n_head
    r = lambda *s: 0.3 * torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    return dict(attn_norm=1 + r(d), q=r(d, d), k=r(n_kv * d_k, d), v=r(n_kv * d_k, d), o=r(d, d),
                ffn_norm=1 + r(d), gate=r(d_ff, d), up=r(d_ff, d), down=r(d, d_ff))


@pytest.mark.parametrize("d,n_head,n_kv,d_ff,eps", [(16, 4, 2, 40, 1e-6), (24, 6, 1, 32, 0.1), (16, 2, 2, 8, 1e-5)])
def test_reference_block_equals_llama_decoder_layer(d, n_head, n_kv, d_ff, eps):
    w = _weights(d, n_head, n_kv, d_ff)
    x = torch.randn(2, 7, d, dtype=torch.float64)
    ours = g.ref_block(x, w, n_head, n_kv, eps, 10000.0)
    theirs = llama.hf_layer_forward(llama.hf_decoder_layer(d, n_head, n_kv, d_ff, eps, weights=w), x)
    assert g._hf_close(ours, theirs)
    att = llama.hf_attention_forward(llama.hf_decoder_layer(d, n_head, n_kv, d_ff, eps, weights=w), x)
    assert g._hf_close(g.ref_attention(x, w["q"], w["k"], w["v"], w["o"], n_head, n_kv), att)


def test_reference_pieces_against_transformers():
    from transformers.models.llama.modeling_llama import repeat_kv
    x = torch.randn(3, 5, 12, dtype=torch.float64)
    norm = llama.hf_rms_norm(12, eps=1e-5)
    assert g._hf_close(g.ref_rms_norm(x, norm.weight, 1e-5), norm(x))
    w = _weights(12, 2, 1, 20)
    mlp = llama.hf_mlp(12, 20, w["gate"], w["up"], w["down"])
    assert torch.allclose(g.ref_swiglu(x, w["gate"], w["up"], w["down"]), mlp(x), atol=1e-12)
    kv = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    assert torch.equal(g.ref_repeat_kv(kv, 4), repeat_kv(kv, 4))


def test_every_known_bug_differs_from_the_reference():
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    w = _weights(16, 4, 2, 24)
    right = g.ref_attention(x, w["q"], w["k"], w["v"], w["o"], 4, 2)
    for bug in g.ATT_BUGS:
        assert not g.near(bug.impl(x, w["q"], w["k"], w["v"], w["o"], 4, 2), right), bug.key
    right = g.ref_block(x, w, 4, 2, 0.1, 10000.0)
    for bug in g.BLOCK_BUGS:
        assert not g.near(bug.impl(x * 0.3, w, 4, 2, 0.1, 10000.0), g.ref_block(x * 0.3, w, 4, 2, 0.1, 1e4)), bug.key
    small, weight = torch.randn(3, 8, dtype=torch.float64) * 1e-4, torch.linspace(0.5, 2.0, 8, dtype=torch.float64)
    for bug in g.RMS_BUGS:
        assert not g.near(bug.impl(small, weight, 1e-6), g.ref_rms_norm(small, weight)), bug.key


def test_costs_match_chapter_6_and_measured_bytes():
    ns = solution_namespace(CHAPTER, {})
    block = ns["LlamaBlock"](64, 8, 8, 176)
    assert llama.count(block) == sum(llama.llama_block_terms(64, 176).values())
    gqa = ns["LlamaBlock"](64, 8, 2, 176)
    assert llama.count(gqa) == 2 * 64 + llama.gqa_attention_params(64, 8, 2) + 3 * 64 * 176
    assert sum(llama.llama_block_terms(4096, 11008).values()) == 202_383_360
    x = torch.randn(1, 100, 64).half()
    assert llama.measured_kv_bytes(ns["LlamaAttention"](64, 8, 2).half(), x) == 2 * 100 * 2 * 8 * 2
    assert llama.model_kv_gib(64) == pytest.approx(10.0) and llama.model_kv_gib(8) == pytest.approx(1.25)


def test_race_models_have_matching_sizes_and_train():
    ns = solution_namespace(CHAPTER, {})
    gpt, lm, d_ff = llama.race_models(lambda f: ns["LlamaBlock"](96, 4, 2, f), vocab_size=65)
    assert abs(llama.count(gpt) - llama.count(lm)) <= 3 * 3 * 96 * 8
    assert not any(isinstance(m, nn.Linear) and m.bias is not None for m in lm.modules())
    idx = torch.randint(65, (2, 10))
    for model in (gpt, lm):
        logits, loss = model(idx, idx)
        assert logits.shape == (2, 10, 65) and abs(loss.item() - math.log(65)) < 0.5
    data = torch.arange(200)
    x, y = llama.windows(data, 8, 4, torch.Generator().manual_seed(0))
    assert torch.equal(y, x + 1)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_solution_passes_every_hidden_check(lang, capsys):
    set_language(lang)
    ns = solution_namespace(CHAPTER, {})
    for test_id in ("test_rms_norm", "test_swiglu", "test_repeat_kv", "test_llama_attention", "test_llama_block"):
        run_check(CHAPTER, test_id, ns)
    out = capsys.readouterr().out
    assert out.count("✓") == 5
    assert ("隐藏检查" in out) == (lang == "zh")


BUGGY = {
    "rms_norm": ("def rms_norm(x, weight, eps=1e-6):\n    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight\n"
                 "\n\nclass RMSNorm(nn.Module):\n    def __init__(self, d, eps=1e-6):\n        super().__init__()\n"
                 "        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))\n\n    def forward(self, x):\n"
                 "        return rms_norm(x, self.weight, self.eps)\n",
                 "test_rms_norm", "根号外面", "outside the square root"),
    "repeat_kv": ("def repeat_kv(x, n_rep):\n    return x.repeat(1, n_rep, 1, 1)\n", "test_repeat_kv",
                  "i % n_kv_head", "wrong order"),
}


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("gid", sorted(BUGGY))
def test_bugs_named_in_both_languages(gid, lang):
    set_language(lang)
    code, test_id, zh, en = BUGGY[gid]
    ns = solution_namespace(CHAPTER, {gid: code})
    with pytest.raises(GradingFailure) as err:
        run_check(CHAPTER, test_id, ns)
    assert (zh if lang == "zh" else en) in str(err.value)


def test_gqa_summary_and_figures():
    set_language("en")
    text = llama.gqa_summary(8)
    assert "1.25 GiB" in text and "12.5%" in text and f"{llama.gqa_attention_params(8192, 64, 8):,}" in text
    import matplotlib
    matplotlib.use("Agg")
    for fig in (llama.gqa_figure(8), llama.layouts_figure(8)):
        assert fig.axes


@pytest.mark.parametrize("earlier", ["E_RMS", "E_SWIGLU", "E_REPEAT", "E_ATTENTION"])
def test_each_stand_in_passes_its_own_exercises_hidden_checks(earlier):
    """What stands in for a wrong earlier answer is itself a correct answer: its exercise's probe (the hidden
    checks) accepts it, run the way it runs in the student's namespace."""
    from grading.core import stand_in
    e = getattr(g, earlier)
    obj, retire = stand_in(e.reference)
    try:
        assert e.probe(obj)
    finally:
        retire()


# ------------------------------------------------------------------ the visible tests

@functools.lru_cache(maxsize=None)
def _source_cells(lang: str = "zh"):
    """The source notebook's cells in ``lang`` (the build writes each t(zh, en) in one language)."""
    from coursekit.author import build
    return build.build_chapter(CHAPTER, lang).cells


def _visible_ns(replace: dict, lang: str = "zh") -> dict:
    """The answer cells (model answers, ``replace`` swapped in) and the notebook's first cell (its probes)."""
    from helpers import checks
    checks._OUTCOME.clear()                       # a fresh kernel: no exercise has run yet
    ns = solution_namespace(CHAPTER, replace)
    first = next(c for c in _source_cells(lang) if c.cell_type == "code" and "Probes(" in c.source)
    exec(first.source, ns)
    return ns


def _visible_part(gid: str, lang: str = "zh") -> str:
    cell = next(c for c in _source_cells(lang) if c.metadata.get("nbgrader", {}).get("grade_id") == gid)
    return cell.source.split("### END HIDDEN TESTS", 1)[-1]


TEST_IDS = ("test_rms_norm", "test_swiglu", "test_repeat_kv", "test_llama_attention", "test_llama_block")


def _correct():
    import importlib
    return importlib.import_module(f"catalogue.{CHAPTER}").CORRECT


@pytest.mark.parametrize("variant", _correct(), ids=lambda v: v.name)
def test_every_correct_variant_passes_the_visible_tests(variant, capsys):
    set_language("en")
    ns = _visible_ns(variant.replace, "en")
    for gid in TEST_IDS:
        exec(_visible_part(gid, "en"), ns)
    out = capsys.readouterr().out
    assert out.count("✓") == len(TEST_IDS), out


def test_every_visible_test_notes_its_exercise_so_run_all_can_name_it(capsys, monkeypatch):
    """A stub answer prints "not done yet: exercise N" in its test, and a later demo cell that runs into
    the stub says which exercise it needs by number (helpers.run_all), rms_norm included."""
    from helpers import run_all
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    set_language("en")
    ns = _visible_ns({}, "en")
    stub = ("def rms_norm(x, weight, eps=1e-6):\n    raise NotImplementedError()\n\n\n"
            "class RMSNorm(nn.Module):\n    def __init__(self, d, eps=1e-6):\n        super().__init__()\n"
            "        self.eps, self.weight = eps, nn.Parameter(torch.ones(d))\n\n"
            "    def forward(self, x):\n        return rms_norm(x, self.weight, self.eps)\n")
    name = "/tmp/ipykernel_course/rms_norm_stub.py"
    import linecache
    linecache.cache[name] = (len(stub), None, stub.splitlines(True), name)
    exec(compile(stub, name, "exec"), ns)
    exec(_visible_part("test_rms_norm", "en"), ns)
    assert "not done yet: exercise 1 (rms_norm)" in capsys.readouterr().out
    demo = "RMSNorm(8)(torch.randn(2, 8))\n"
    demo_name = "/tmp/ipykernel_course/demo.py"
    linecache.cache[demo_name] = (len(demo), None, demo.splitlines(True), demo_name)
    with pytest.raises(NotImplementedError) as stopped:
        exec(compile(demo, demo_name, "exec"), ns)
    assert run_all.Guard().stopped(stopped.value)
    said = capsys.readouterr().out
    assert "needs exercise 1 (rms_norm)" in said and "the exercise of" not in said, said


def test_the_from_scratch_rule_reads_the_same_in_the_visible_test_and_the_grader():
    library = {"rms_norm": "def rms_norm(x, weight, eps=1e-6):\n    return F.rms_norm(x, (x.shape[-1],), weight, eps)\n"}
    for lang in ("zh", "en"):
        set_language(lang)
        with pytest.raises(AssertionError) as visible:
            exec(_visible_part("test_rms_norm", lang), _visible_ns(library, lang))
        with pytest.raises(GradingFailure) as hidden:
            run_check(CHAPTER, "test_rms_norm", solution_namespace(CHAPTER, library))
        rule = str(visible.value).split(": ", 1)[-1]
        assert rule == g.rms_from_scratch_message().format(name="torch.nn.functional.rms_norm"), rule
        assert rule in str(hidden.value)
        assert "exp" not in rule and "matmul" not in rule and "矩阵乘" not in rule


# ------------------------------------------------------------------ sentences fixed in both languages

def _text(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter(CHAPTER, lang).cells if c.cell_type == "markdown")


def test_the_kv_cache_holds_keys_after_rope_in_both_languages():
    zh, en = _text("zh"), _text("en")
    assert "KV 缓存存的是 `k_proj`、`v_proj` 的输出" not in zh
    assert "The KV cache holds the outputs of `k_proj` and `v_proj`" not in en
    assert "**再经过 RoPE 旋转之后**" in zh and "`repeat_kv` 之前的 `n_kv_head` 个头" in zh
    assert "**and then rotated by RoPE**" in en and "`n_kv_head` heads from before `repeat_kv`" in en


def test_the_cached_keys_are_the_rotated_ones():
    """What the sentence says, checked: a step-by-step pass that caches rotated keys reproduces the layer."""
    ns = solution_namespace(CHAPTER, {})
    attn = llama.randomise(ns["LlamaAttention"](32, 8, 2), seed=3).eval()
    x = torch.randn(1, 6, 32)
    keys = llama.apply_rope(attn.k_proj(x).unflatten(-1, (2, 4)).transpose(1, 2), torch.arange(6))
    cache = (keys.detach(), attn.v_proj(x).unflatten(-1, (2, 4)).transpose(1, 2).detach())
    out, _ = _attention_step(attn, x[:, 5:], (cache[0][:, :, :5], cache[1][:, :, :5]), 8, 2)
    with torch.no_grad():
        assert torch.allclose(out, attn(x)[:, 5:], atol=1e-6)
        unrotated = (attn.k_proj(x).unflatten(-1, (2, 4)).transpose(1, 2)[:, :, :5], cache[1][:, :, :5])
        wrong, _ = _attention_step(attn, x[:, 5:], unrotated, 8, 2)
        assert not torch.allclose(wrong, attn(x)[:, 5:], atol=1e-3)


def test_the_introduction_lists_what_the_exercises_do():
    zh, en = _text("zh"), _text("en")
    assert "the five changes inside the block one by one" not in en and "这五处一个个写出来" not in zh
    assert "RoPE itself is given" in en and "RoPE 本身是给好的" in zh
    assert "no new change" in en and "不是新的改动" in zh


def test_the_given_rmsnorm_is_advice_and_torchs_own_is_accepted():
    zh, en = _text("zh"), _text("en")
    assert "leave it as it is" not in en and "不要改它" not in zh
    assert "`torch.nn.RMSNorm` computes the same" in en and "`torch.nn.RMSNorm` 算的是同一个东西" in zh
    block = ('''class LlamaBlock(nn.Module):
    def __init__(self, d, n_head, n_kv_head, d_ff, eps=1e-6, base=10000.0):
        super().__init__()
        self.attn_norm, self.ffn_norm = nn.RMSNorm(d, eps=eps), nn.RMSNorm(d, eps=eps)
        self.attn, self.ffn = LlamaAttention(d, n_head, n_kv_head, base), SwiGLU(d, d_ff)

    def forward(self, x):
        h = x + self.attn(self.attn_norm(x))
        return h + self.ffn(self.ffn_norm(h))
''')
    set_language("en")
    run_check(CHAPTER, "test_llama_block", solution_namespace(CHAPTER, {"llama_block": block}))


def test_the_slider_says_each_head_has_its_own_kv_when_there_is_one_query_head_per_kv_head():
    set_language("en")
    assert "every 1 query heads" not in llama.gqa_summary(64)
    assert "each query head has a K, V of its own" in llama.gqa_summary(64)
    assert "every 8 query heads share one K, V" in llama.gqa_summary(8)
    set_language("zh")
    assert "每 1 个" not in llama.gqa_summary(64) and "每个 query 头都有自己的一组 K、V" in llama.gqa_summary(64)


# ------------------------------------------------------------------ going further

def _attention_step(attn, x_new, cache, n_head, n_kv_head, base=10000.0, keep_repeated=False):
    B, T, d = x_new.shape
    d_k = d // n_head
    P = 0 if cache is None else cache[0].shape[2]

    def split(a, h):
        return a.view(B, T, h, d_k).transpose(1, 2)
    q, k, v = split(attn.q_proj(x_new), n_head), split(attn.k_proj(x_new), n_kv_head), split(attn.v_proj(x_new), n_kv_head)
    pos = torch.arange(P, P + T)
    q, k = llama.apply_rope(q, pos, base), llama.apply_rope(k, pos, base)
    if cache is not None:
        k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
    rep = n_head // n_kv_head
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = (q @ kk.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(torch.ones(T, P + T, dtype=torch.bool).triu(P + 1),
                                                               float("-inf"))
    y = torch.softmax(s, -1) @ vv
    out = attn.o_proj(y.transpose(1, 2).reshape(B, T, d))
    return out, ((kk, vv) if keep_repeated else (k, v))


def _sliding(ns, window_of=lambda w: w):
    class SlidingWindowAttention(ns["LlamaAttention"]):
        def __init__(self, d, n_head, n_kv_head, window, base=10000.0):
            super().__init__(d, n_head, n_kv_head, base)
            self.window = window

        def forward(self, x):
            B, N, d = x.shape
            q = self.q_proj(x).view(B, N, self.n_head, self.d_k).transpose(1, 2)
            k = self.k_proj(x).view(B, N, self.n_kv_head, self.d_k).transpose(1, 2)
            v = self.v_proj(x).view(B, N, self.n_kv_head, self.d_k).transpose(1, 2)
            pos = torch.arange(N)
            q, k = llama.apply_rope(q, pos, self.base), llama.apply_rope(k, pos, self.base)
            rep = self.n_head // self.n_kv_head
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            i, j = torch.arange(N)[:, None], torch.arange(N)[None, :]
            hidden = (j > i) | (j <= i - window_of(self.window))
            s = (q @ k.transpose(-2, -1) / math.sqrt(self.d_k)).masked_fill(hidden, float("-inf"))
            return self.o_proj((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, N, d))
    return SlidingWindowAttention


def test_the_challenges_self_checks_pass_a_right_answer_and_catch_a_wrong_one(capsys):
    set_language("en")
    ns = solution_namespace(CHAPTER, {})
    attention = ns["LlamaAttention"]
    llama.check_cache_step(_attention_step, attention)
    llama.check_sliding_window(_sliding(ns), attention)
    out = capsys.readouterr().out
    assert out.count("✓") == 2, out
    llama.check_cache_step(lambda *a: _attention_step(*a, keep_repeated=True), attention)   # repeated heads cached
    llama.check_sliding_window(_sliding(ns, lambda w: w + 1), attention)                     # one token too many
    out = capsys.readouterr().out
    assert out.count("✗") == 2 and "✓" not in out, out


def test_the_challenges_never_stop_the_notebook(capsys):
    set_language("en")
    ns = solution_namespace(CHAPTER, {})

    def stub(*args):
        raise NotImplementedError()
    llama.check_cache_step(stub, ns["LlamaAttention"])
    llama.check_cache_step(lambda *a: 1 / 0, ns["LlamaAttention"])

    class Unwritten(nn.Module):
        def __init__(self, *args):
            super().__init__()
            raise NotImplementedError()
    llama.check_sliding_window(_sliding(ns), Unwritten)
    out = capsys.readouterr().out
    assert "not attempted yet" in out and "ZeroDivisionError" in out and "finish exercise 4" in out, out
