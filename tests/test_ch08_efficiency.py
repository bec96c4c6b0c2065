"""Unit tests for chapter 8's public helpers: attention_cost and
online_softmax_viz."""
from __future__ import annotations

import inspect
import linecache
import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from helpers import set_language  # noqa: E402
from helpers.ch08_efficiency import attention_cost as cost  # noqa: E402
from helpers.ch08_efficiency import online_softmax_viz as osv  # noqa: E402


def test_fit_slope_recovers_powers():
    xs = [16, 32, 64, 128]
    assert cost.fit_slope(xs, [3 * x ** 2 for x in xs]) == pytest.approx(2.0)
    assert cost.fit_slope(xs, [0.5 * x for x in xs]) == pytest.approx(1.0)


def test_best_time_is_positive_and_runs_fn():
    calls = []
    assert cost.best_time(lambda: calls.append(1), repeat=2) >= 0
    assert len(calls) == 3          # one warm-up + two timed


def test_peak_memory_counts_live_tensors_and_ignores_views():
    with cost.PeakMemory() as pm:
        a = torch.zeros(1000)        # 4000 bytes
        b = a.view(10, 100)          # a view: no new memory
        c = torch.ones(500)          # 2000 bytes
        del c
        d = torch.ones(250)          # 1000 bytes, after c was freed
    assert pm.peak == 6000
    assert pm.largest == (1000,)
    assert b.shape == (10, 100) and d.numel() == 250


def test_score_sweep_shapes_and_memory_is_quadratic():
    sweep = cost.score_cost_sweep([32, 64, 128], d=16, repeat=1)
    assert [r["n"] for r in sweep["rows"]] == [32, 64, 128]
    assert all(r["t_scores"] > 0 and r["t_linear"] > 0 for r in sweep["rows"])
    assert sweep["rows"][-1]["score_bytes"] == 128 * 128 * 4
    assert sweep["slope_memory"] == pytest.approx(2.0, abs=0.35)


def _blocked(q, k, v, block_size, causal=False):
    """A plain blocked attention used only to drive the helpers here."""
    outs = []
    for i in range(0, q.shape[-2], block_size):
        s = q[..., i:i + block_size, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        outs.append(torch.softmax(s, -1) @ v)
    return torch.cat(outs, dim=-2)


def test_memory_sweep_reports_both_methods():
    mem = cost.memory_sweep([64, 128, 256], _blocked, d=8, block_size=16)
    assert [r["n"] for r in mem["rows"]] == [64, 128, 256]
    assert mem["slopes"]["full"] > 1.6
    assert mem["slopes"]["online"] < mem["slopes"]["full"]


def _weights(d, h, n_ctx, seed):
    g = torch.Generator().manual_seed(seed)
    return {"wpe": torch.zeros(n_ctx, d), "w_q": torch.randn(d, d, generator=g) / d ** 0.5,
            "w_k": torch.randn(d, d, generator=g) / d ** 0.5, "w_v": torch.randn(d, d, generator=g) / d ** 0.5,
            "w_o": torch.randn(d, d, generator=g) / d ** 0.5, "n_head": h}


def test_decode_speed_compares_two_implementations():
    # a "full" and a "step" that agree: the step recomputes from a growing buffer
    def full(x, w):
        return x @ w["w_o"]

    class Buf:
        def __init__(self, n_layer=1):
            pass

    def step(x_t, w, cache, layer=0):
        return x_t @ w["w_o"]

    layers = [_weights(8, 2, 10, i) for i in range(2)]
    speed = cost.decode_speed(layers, 10, full, step, Buf)
    assert speed["max_diff"] < 1e-5
    assert len(speed["times_cached"]) == len(speed["times_full"]) == 10
    assert speed["speedup"] > 0


def test_kv_rows_and_figures_with_a_kv_function(tmp_path):
    def kv(n_layer, n_tokens, d_model, n_head, n_kv_head, bytes_per_value=2, batch=1):
        return 2 * n_layer * n_tokens * n_kv_head * (d_model // n_head) * bytes_per_value * batch

    rows = cost.kv_rows(kv)
    assert ("LLaMA-2 70B", "GQA", 8, 1_342_177_280, True) in rows
    assert ("LLaMA-2 7B", "MHA", 32, 2 * 2**30, True) in rows
    assert ("LLaMA-2 70B", "MHA", 64, 10 * 2**30, False) in rows
    cost.show_kv_table(kv)
    for fig in (cost.kv_figure(kv),
                cost.cost_figure(cost.score_cost_sweep([32, 64], d=8, repeat=1)),
                cost.memory_figure(cost.memory_sweep([32, 64], _blocked, d=8, block_size=16))):
        fig.savefig(tmp_path / "f.png")
        matplotlib.pyplot.close(fig)


def test_decode_figure_draws(tmp_path):
    speed = {"n_tokens": 32, "times_cached": [1e-4] * 32, "times_full": [1e-3] * 32, "speedup": 10.0}
    fig = cost.decode_figure(speed)
    fig.savefig(tmp_path / "d.png")


def test_online_states_match_their_definitions():
    scores = [0.5, 1.0, -0.3, 0.2, 2.5, 0.1, 1.7, -1.0, 0.3]
    values = list(range(9))
    sts = osv.states(scores, values, block_size=4)
    assert [(s["start"], s["end"]) for s in sts] == [(0, 4), (4, 8), (8, 9)]
    assert sts[0]["m"] == 1.0 and sts[0]["alpha"] == 1.0
    assert sts[1]["m"] == 2.5 and sts[1]["alpha"] == pytest.approx(math.exp(1.0 - 2.5))
    assert sts[2]["alpha"] == 1.0
    # the running statistics obey the online update rule
    new = [math.exp(s - 2.5) for s in scores[4:8]]
    assert sts[1]["l"] == pytest.approx(sts[0]["l"] * sts[1]["alpha"] + sum(new))
    exact = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0) @ torch.tensor(values, dtype=torch.float64)
    assert sts[-1]["out"] == pytest.approx(float(exact)) == pytest.approx(osv.final_softmax_output(scores, values))


def test_online_texts_and_figures_in_both_languages(tmp_path):
    scores, values = [0.0, 2.0, 1.0, 3.0, -1.0], [1.0, 2.0, 3.0, 4.0, 5.0]
    sts = osv.states(scores, values, 2)
    assert "第 1 块" in osv.step_text(sts[0], 0)
    set_language("en")
    assert "block 2" in osv.step_text(sts[1], 1) and "α" in osv.step_text(sts[1], 1)
    fig = osv.steps_figure(scores, values, 2)
    fig.savefig(tmp_path / "o.png")


def test_demos_stay_quiet_while_grading(monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    osv.stepper([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], 2)
    osv.show_steps([0.0, 1.0], [1.0, 2.0], 1)
    cost.show_kv_figure(lambda *a, **k: 1)
    assert "m =" in capsys.readouterr().out


# ------------------------------------------------------------------ hidden checks (grading/ch08_efficiency.py)

from grading import ch08_efficiency as grading_ch08  # noqa: E402
from grading.core import GradingFailure  # noqa: E402


class _Cache:
    def __init__(self, n_layer=1):
        self.kv = [None] * n_layer

    def length(self, layer=0):
        return 0 if self.kv[layer] is None else self.kv[layer][0].shape[-2]

    def append(self, layer, k, v):
        if self.kv[layer] is not None:
            k, v = torch.cat([self.kv[layer][0], k], -2), torch.cat([self.kv[layer][1], v], -2)
        self.kv[layer] = (k, v)
        return k, v


class _OverwritingCache(_Cache):
    def append(self, layer, k, v):
        self.kv[layer] = (k, v)
        return k, v


def _step_float32_scale(x_t, weights, cache, layer=0):
    """A correct step whose 1/sqrt(d_k) is a float32 tensor, also for float64 inputs."""
    B, _, d = x_t.shape
    H = weights["n_head"]
    h = x_t + weights["wpe"][cache.length(layer)]
    q, k, v = ((h @ weights[n]).view(B, 1, H, d // H).transpose(1, 2) for n in ("w_q", "w_k", "w_v"))
    K, V = cache.append(layer, k, v)
    p = torch.softmax(q @ K.transpose(-2, -1) * torch.tensor(1.0 / math.sqrt(d // H)), dim=-1)
    return (p @ V).transpose(1, 2).reshape(B, 1, d) @ weights["w_o"]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_cached_step_with_a_float32_constant_keeps_full_marks(lang, capsys):
    set_language(lang)
    grading_ch08.check_cached_step(_step_float32_scale, _Cache)
    assert "✓" in capsys.readouterr().out


STEP_SRC = """def cached_attention_step(x_t, weights, cache, layer=0):
    B, _, d = x_t.shape
    H = weights["n_head"]
    h = x_t + weights["wpe"][cache.length(layer)]
    q, k, v = ((h @ weights[n]).view(B, 1, H, d // H).transpose(1, 2) for n in ("w_q", "w_k", "w_v"))
    K, V = cache.append(layer, k, v)
    p = torch.softmax(q @ K.transpose(-2, -1) / math.sqrt(d // H), dim=-1)
    return (p @ V).transpose(1, 2).reshape(B, 1, d) @ weights["w_o"]
"""


@pytest.mark.parametrize("lang,kept,own", [
    ("en", "Correct when given a correct KVCache; exercise 1 still needs fixing", "this exercise's own"),
    ("zh", "用正确的 KVCache 代替你的之后，这一题是对的；练习 1 还需要修改", "出在这一题本身")])
def test_a_step_on_a_broken_cache_is_graded_on_its_own(lang, kept, own, capsys):
    """As in the notebook, the step's namespace holds the student's (overwriting) KVCache: a
    right step keeps its marks and says why; a wrong one still fails, as its own."""
    set_language(lang)
    for src, right in ((STEP_SRC, True), (STEP_SRC.replace(' + weights["wpe"][cache.length(layer)]', ""), False)):
        ns = {"torch": torch, "math": math, "KVCache": _OverwritingCache}
        exec(src, ns)
        if right:
            grading_ch08.check_cached_step(ns["cached_attention_step"], ns["KVCache"])
            out = capsys.readouterr().out
            assert "✓" in out and kept in out, out
        else:
            with pytest.raises(GradingFailure) as err:
                grading_ch08.check_cached_step(ns["cached_attention_step"], ns["KVCache"])
            assert own in str(err.value), str(err.value)
        assert ns["KVCache"] is _OverwritingCache           # the student's own is back after the check


def _online(q, k, v, block_size, causal=False, swap=lambda z: z.transpose(-2, -1)):
    """The blocked online softmax; ``swap`` turns a block of keys into (..., d, block)."""
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=q.dtype)
    l = torch.zeros_like(m)
    o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    rows = torch.arange(q.shape[-2])[:, None]
    for s0 in range(0, k.shape[-2], block_size):
        s = q @ swap(k[..., s0:s0 + block_size, :]) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(s0, s0 + s.shape[-1])[None, :] > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha, p = torch.exp(m - m_new), torch.exp(s - m_new)
        l, o, m = alpha * l + p.sum(-1, keepdim=True), alpha * o + p @ v[..., s0:s0 + block_size, :], m_new
    return o / l


def _student_function(src: str, name: str):
    """Compile ``src`` as a notebook cell would be (its lines readable in tracebacks) and return ``name``."""
    filename = f"/tmp/ipykernel_course/{name}.py"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"torch": torch, "math": math}
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


# correct maths, but transpose(1, 2) assumes exactly one batch axis
_online_batch_axis = _student_function(
    inspect.getsource(_online).replace("swap(k[..., s0:s0 + block_size, :])", "k[..., s0:s0 + block_size, :].transpose(1, 2)")
    .replace(", swap=lambda z: z.transpose(-2, -1)", ""), "_online")


@pytest.mark.parametrize("lang,word", [("en", "transpose(-2, -1)"), ("zh", "transpose(-2, -1)")])
def test_online_softmax_explains_a_transpose_that_assumes_a_batch_axis(lang, word):
    set_language(lang)
    with pytest.raises(GradingFailure) as err:
        grading_ch08.check_online_softmax(_online_batch_axis)
    assert "transpose_fixed_axes" in str(err.value) and word in str(err.value), str(err.value)


def test_online_softmax_float32_inside_float64_keeps_full_marks(capsys):
    set_language("en")

    def online32(q, k, v, block_size, causal=False):
        return _online(q.float(), k.float(), v.float(), block_size, causal).to(q.dtype)

    grading_ch08.check_online_softmax(online32)
    assert "✓" in capsys.readouterr().out


# ------------------------------------------------------------------ the re-read: sentences fixed in both languages

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter("ch08_efficiency", lang).cells if c.cell_type == "markdown")


def _cells(lang: str) -> list:
    from coursekit.author import site
    return site.student_notebook("ch08_efficiency", lang).cells


def test_the_cache_is_said_to_equal_full_recomputation_up_to_rounding_not_bit_for_bit():
    """The kept decode run differs from full recomputation in the last bits (max_diff > 0)."""
    import json

    from harness import ROOT
    decode = json.loads((ROOT / "bench" / "results" / "efficiency.json").read_text())["decode"]
    assert decode["max_diff"] > 0
    zh, en = _prose("zh"), _prose("en")
    assert "验证它和完整重算逐位相等" not in zh and "check that it equals full recomputation exactly" not in en
    assert "验证它和完整重算相等（差别只在 float32 的舍入里）" in zh
    assert "check that it equals full recomputation (up to float32 rounding)" in en


def test_the_online_softmax_is_not_said_to_hold_one_block_at_a_time():
    zh, en = _prose("zh"), _prose("en")
    assert "而任何时候只存在 $n\\times B$ 的一块分数" not in zh and "at any time only an $n\\times B$ block" not in en
    assert "同一时刻可能有几块" in zh and "a few blocks may exist at once" in en


def test_the_cached_decode_is_not_said_to_cost_the_same_at_every_length():
    zh, en = _prose("zh"), _prose("en")
    assert "速度几乎不随长度变化" not in zh and "the speed hardly depends on the length" not in en
    assert "只有 $1\\times t$ 的分数和加权求和随 $t$ 线性变长" in zh
    assert "only the $1\\times t$ scores and weighted sum grow, linearly in $t$" in en


def test_the_memory_at_256_is_explained_with_the_kept_numbers():
    from coursekit.author.claims import CLAIMS
    full, online = (CLAIMS["ch08_efficiency"][c].value() for c in ("ch08.mem-full-256", "ch08.mem-online-256"))
    assert int(online) > int(full)                         # the surprise the text explains
    zh, en = _prose("zh"), _prose("en")
    assert f"$n=256$ 时完整版本的峰值是 {full} KiB，在线版本是 {online} KiB" in zh
    assert f"the full version's peak at $n=256$ was {full} KiB and the online version's {online} KiB" in en
    assert "四个这样的块就和两个 $n\\times n$ 矩阵一样大" in zh and "four such blocks take as much as two" in en


def test_the_peak_of_the_model_answer_at_256_is_four_blocks_and_the_output():
    """What the memory section says: at n = 256 with blocks of 128, the chapter's answer holds four
    n×B float32 blocks and o at its peak, as much as the full version's two n×n matrices and o more."""
    from test_grading_inprocess import solution_namespace
    online = solution_namespace("ch08_efficiency", {})["online_softmax_attention"]
    q, k, v = torch.randn(3, 256, 64)
    with torch.no_grad(), cost.PeakMemory() as mine:
        online(q, k, v, 128)
    with torch.no_grad(), cost.PeakMemory() as full:
        torch.softmax(q @ k.T / 8, dim=-1) @ v
    blocks, out = 4 * 256 * 128 * 4, 256 * 64 * 4
    assert full.peak == 2 * 256 * 256 * 4 == blocks
    assert blocks + out <= mine.peak < blocks + out + 8 * 1024


def test_exercise_2s_visible_test_names_no_cause_it_did_not_see():
    for lang in ("zh", "en"):
        cell = next(c.source for c in _cells(lang) if c.metadata.get("nbgrader", {}).get("grade_id") == "test_cached_step")
        assert "先追加 k、v，再对全部 K、V 做注意力" not in cell and "append k and v first, then attend" not in cell
        assert "hint=" not in cell and "reread=" in cell


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_a_kv_cache_built_without_its_default_says_so_in_the_course_words(lang):
    """KVCache(n_layer) without its default: the visible test names it, in the grader's words."""
    from helpers.checks import CheckFailed, exercise
    from helpers.probes import Probes
    set_language(lang)
    Probes("ch08_efficiency")
    cell = next(c.source for c in _cells(lang) if c.metadata.get("nbgrader", {}).get("grade_id") == "test_kv_cache")
    ns = {"torch": torch, "math": math, "t": __import__("helpers").t, "exercise": exercise}
    exec("from helpers.checks import expect_close, expect_shape, expect_true, passed", ns)
    exec(_student_source(), ns)
    with pytest.raises(CheckFailed) as err:
        exec(cell, ns)
    assert err.value.key == "bug:cache_n_layer_no_default"
    said = str(err.value)
    assert ("KVCache() 不带参数用不了" if lang == "zh" else "KVCache() without an argument cannot be used") in said
    assert "KVCache(n_layer=1)" in said and "Traceback" not in said


def _student_source() -> str:
    return ("class KVCache:\n"
            "    def __init__(self, n_layer):\n"
            "        self.keys = [None] * n_layer\n"
            "        self.values = [None] * n_layer\n\n"
            "    def length(self, layer=0):\n"
            "        return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]\n\n"
            "    def append(self, layer, k, v):\n"
            "        if self.keys[layer] is None:\n"
            "            self.keys[layer], self.values[layer] = k, v\n"
            "        else:\n"
            "            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)\n"
            "            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)\n"
            "        return self.keys[layer], self.values[layer]\n")
