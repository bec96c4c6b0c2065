"""Unit tests for helpers.ch09_inside_gpt, the models the chapter hands out (notebooks/given/tiny_gpt.py) and the
references of grading.ch09_inside_gpt."""
from __future__ import annotations

import copy
import re

import matplotlib
import nbformat
import pytest
import torch

matplotlib.use("Agg")

import tiny_gpt as given  # noqa: E402  (notebooks/given: the chapter's own folder)
from harness import ROOT, _strip_markers  # noqa: E402

from grading import ch09_inside_gpt as g  # noqa: E402
from grading.core import GradingFailure  # noqa: E402
from helpers import ch09_inside_gpt as inside  # noqa: E402
from helpers import set_language

CHAPTER = "ch09_inside_gpt"
CJK = re.compile(r"[\u4e00-\u9fff]")


def _solutions(replace=None) -> dict:
    nb = nbformat.read(ROOT / "source" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    ns: dict = {"torch": torch}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            src = (replace or {}).get(meta["grade_id"], _strip_markers(cell.source))
            exec(compile(src, f"/tmp/ipykernel_course/{meta['grade_id']}.py", "exec", dont_inherit=True), ns)
    return ns


# ---------------------------------------------------------------- helpers: models and data

def test_repeated_batch_is_a_block_and_its_copy():
    x, y = inside.repeated_batch(5, 7, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 13)
    seq = torch.cat([x, y[:, -1:]], dim=1)
    assert torch.equal(seq[:, :7], seq[:, 7:])
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < 26


def test_periodic_batch_repeats_with_each_sequences_own_period():
    x, y = inside.periodic_batch(64, 32, periods=(2, 16), generator=torch.Generator().manual_seed(1))
    assert x.shape == (64, 32)
    seq = torch.cat([x, y[:, -1:]], dim=1)
    periods = {inside.guess_period(row.tolist()) for row in seq}
    assert len(periods) > 5 and max(periods) <= 16


def test_guess_period():
    assert inside.guess_period([1, 2, 3, 1, 2, 3]) == 3
    assert inside.guess_period([1, 2, 3, 4]) is None
    assert inside.guess_period(inside.encode("a cat sat a cat sat")) == 7


def test_attention_is_causal_rows_sum_to_one_and_layout():
    model = given.test_model(seed=2)
    x, _ = inside.repeated_batch(3, 5, generator=torch.Generator().manual_seed(2))
    a = model.attention(x)
    assert a.shape == (2, 3, 4, 9, 9)
    assert torch.allclose(a.sum(-1), torch.ones(2, 3, 4, 9), atol=1e-5)
    assert torch.all(a.triu(1) == 0)


def test_heads_hook_point_holds_each_head_before_the_merge():
    """Zeroing [:, h] at attn.heads equals zeroing W_O's columns of head h (the documented layout)."""
    model = given.test_model(seed=3)
    x, y = inside.repeated_batch(2, 6, generator=torch.Generator().manual_seed(3))
    seen = []
    handle = model.blocks[0].attn.heads.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    model(x)
    handle.remove()
    assert seen == [(2, 4, 11, 16)]
    assert g.ref_ablate_heads(model, [(0, 2)], x, y) != pytest.approx(g.ref_ablate_heads(model, [], x, y), abs=1e-3)
    ns = _solutions()
    assert ns["ablate_heads"](model, [(0, 2)], x, y) == pytest.approx(g.ref_ablate_heads(model, [(0, 2)], x, y), rel=1e-5)


def test_char_gpt_state_dict_has_chapter_7_names_and_round_trips(tmp_path):
    model = given.TinyGPT(given.char_config(vocab_size=10, n_ctx=8, n_layer=1, n_head=2, d_model=8))
    names = set(model.state_dict())
    for key in ("wte.weight", "wpe.weight", "blocks.0.ln_1.weight", "blocks.0.attn.c_attn.weight",
                "blocks.0.attn.c_proj.weight", "blocks.0.ln_2.weight", "blocks.0.mlp.c_fc.weight",
                "blocks.0.mlp.c_proj.weight", "ln_f.weight", "lm_head.weight"):
        assert key in names
    assert model.lm_head.weight is model.wte.weight
    path = tmp_path / "ch07_model.pt"
    given.save_char_gpt(model, "abcdefghij", path)
    loaded, chars, where = given.load_char_gpt([str(tmp_path / "missing.pt"), str(path)])
    assert chars == "abcdefghij" and where == str(path)
    idx = torch.randint(10, (2, 8))
    assert torch.allclose(loaded(idx)[0], model.eval()(idx)[0])
    assert given.load_char_gpt([str(tmp_path / "missing.pt")]) is None


def test_toy_training_is_deterministic_and_lowers_the_loss():
    a, b = given.TinyGPT(given.Config()), given.TinyGPT(given.Config())
    b.load_state_dict(a.state_dict())
    la, _ = given.train_toy(a, steps=30, progress=False)
    lb, _ = given.train_toy(b, steps=30, progress=False)
    assert la == lb
    assert sum(la[-5:]) / 5 < la[0]


def test_word_start_score():
    text = "ab cde"
    n = len(text)
    attn = torch.zeros(1, 1, 2, n, n)
    attn[0, 0, 0] = torch.eye(n)
    starts = [0, 0, 2, 3, 3, 3]
    for i, s in enumerate(starts):
        attn[0, 0, 1, i, s] = 1.0
    ws = inside.word_start_score(attn, text)
    assert ws.shape == (1, 2)
    assert ws[0, 0].item() == pytest.approx(0.0) and ws[0, 1].item() == pytest.approx(1.0)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_figures_and_static_explorer_draw(lang):
    import matplotlib.pyplot as plt
    set_language(lang)
    ns = _solutions()
    model = given.test_model(seed=4)
    x, y = inside.repeated_batch(4, 8, generator=torch.Generator().manual_seed(4))
    a = model.attention(x)
    figs = [inside.loss_position_figure(inside.loss_per_position(model, x, y), 8, 3.26),
            inside.scores_figure({"p": ns["prev_token_score"](a), "i": ns["induction_score"](a, 8)}),
            inside.patterns_figure(a, [("a", (0, 1)), ("b", (1, 2))], "abcdefghabcdefg"),
            inside.ablation_figure(torch.randn(2, 4), 1.0),
            inside.head_explorer_figure(model, "abcabc", ns["prev_token_score"], ns["induction_score"])]
    panels = [ax for ax in figs[-1].axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 8 and len(figs[-1].axes) == 9      # one panel per head, and the colour bar
    for fig in figs:
        plt.close(fig)


# ---------------------------------------------------------------- grading references

def test_references_agree_with_vectorised_formulas():
    gen = torch.Generator().manual_seed(0)
    a = g._attention(gen, 2, 3, 4, 9)
    i = torch.arange(1, 9)
    assert torch.allclose(g.ref_prev_token_score(a), a[..., i, i - 1].mean(dim=(1, 3)))
    i = torch.arange(3, 9)
    assert torch.allclose(g.ref_induction_score(a, 3), a[..., i, i - 2].mean(dim=(1, 3)))


def test_ablation_reference_equals_hooks_and_every_bug_differs():
    # n_layer != n_head (a head width from n_layer is a known bug), enough layers for (head, layer) pairs, and two
    # heads of one layer (a {layer: head} dict keeps only one)
    cfg, heads = g.Config(n_ctx=16, n_layer=5, n_head=4, d_model=32), [(2, 1), (0, 3), (2, 2)]
    model = g._model(cfg, 5)
    x = torch.randint(cfg.vocab_size, (4, 10))        # a batch of 4: zeroing output[h] (the batch axis) can run
    y = torch.randint(cfg.vocab_size, (4, 10))
    ns = _solutions()
    want = g.ref_ablate_heads(model, heads, x, y)
    assert ns["ablate_heads"](model, heads, x, y) == pytest.approx(want, rel=1e-5)
    for bug in g.ABL_BUGS:
        assert abs(bug.impl(model, heads, x, y) - want) > 1e-3, bug.key


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_solution_passes_every_hidden_check(lang, capsys):
    set_language(lang)
    ns = _solutions()
    g.check_prev_token_score(ns["prev_token_score"])
    g.check_induction_score(ns["induction_score"])
    g.check_ablate_heads(ns["ablate_heads"])
    out = capsys.readouterr().out
    assert out.count("✓") == 3
    assert bool(CJK.search(out)) == (lang == "zh")


BUG_CASES = [  # (grade id, code, check, zh words, en words)
    ("induction_score", "def induction_score(attn, period):\n    n = attn.shape[-1]\n    i = torch.arange(period, n)\n"
     "    return attn[..., i, i - period].mean(dim=(1, 3))\n", "check_induction_score",
     "前一次出现的那个 token 本身", "earlier occurrence itself"),
    ("prev_token_score", "def prev_token_score(attn):\n    return attn.diagonal(-1, -2, -1).sum(-1).mean(1) / attn.shape[-1]\n",
     "check_prev_token_score", "位置 0 也算进了平均", "position 0 is counted"),
    ("ablate_heads", "def ablate_heads(model, heads, x, y):\n    for l, h in heads:\n"
     "        model.blocks[l].attn.heads.register_forward_hook(lambda m, i, o, h=h: o.index_fill(1, torch.tensor([h]), 0.0))\n"
     "    with torch.no_grad():\n        return model(x, y)[1].item()\n", "check_ablate_heads",
     "钩子没有移除", "hooks are never removed"),
]


@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("gid,code,check,zh,en", BUG_CASES, ids=[c[0] for c in BUG_CASES])
def test_bugs_are_named_in_both_languages(lang, gid, code, check, zh, en):
    set_language(lang)
    ns = _solutions({gid: code})
    with pytest.raises(GradingFailure) as err:
        getattr(g, check)(ns[gid])
    msg = str(err.value)
    assert (zh if lang == "zh" else en) in msg
    if lang == "en":
        assert not CJK.search(msg)


def test_model_is_untouched_by_the_reference():
    model = g._model(g.ABL_CASES[1][0], 1)
    before = copy.deepcopy(model.state_dict())
    x = torch.randint(26, (2, 8))
    g.ref_ablate_heads(model, [(0, 1)], x, x)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert g._n_hooks(model) == 0


# ------------------------------------------------------------------ the phase change and the OV side

def test_snapshots_are_taken_without_changing_the_training():
    plain, kept = given.TinyGPT(given.Config()), given.TinyGPT(given.Config())
    kept.load_state_dict(plain.state_dict())
    start = copy.deepcopy(plain.state_dict())
    snaps = []
    a, _ = given.train_toy(plain, steps=6, batch_size=8, progress=False)
    b, _ = given.train_toy(kept, steps=6, batch_size=8, progress=False, snapshots=snaps, snapshot_every=2)
    assert a == b and [s for s, _ in snaps] == [0, 2, 4, 6]
    assert all(torch.equal(snaps[0][1][k], start[k]) for k in start)
    assert all(torch.equal(snaps[-1][1][k], v) for k, v in kept.state_dict().items())


def test_phase_curve_scores_every_snapshot_with_the_functions_given():
    model = given.test_model()
    snaps = [(0, copy.deepcopy(model.state_dict()))]
    x, y = inside.repeated_batch(8, 6, generator=torch.Generator().manual_seed(0))
    curve = inside.phase_curve(model, snaps, x, y, 6, g.ref_prev_token_score, g.ref_induction_score)
    per_pos = inside.loss_per_position(model, x, y)
    attn = model.attention(x)
    assert curve["step"] == [0]
    assert curve["loss_repeat"][0] == pytest.approx(float(per_pos[6:].mean()))
    assert curve["loss_first"][0] == pytest.approx(float(per_pos[:5].mean()))
    assert curve["prev"][0] == pytest.approx(float(g.ref_prev_token_score(attn)[0].max()))
    assert curve["induction"][0] == pytest.approx(float(g.ref_induction_score(attn, 6)[-1].max()))
    assert inside.steepest_drop({"step": [0, 25, 50, 75], "loss_repeat": [3.0, 2.9, 1.0, 0.9]}) == (25, 50)


def test_ov_circuit_is_what_a_layer_0_head_adds_to_the_logits_where_it_looks_at_one_token():
    model = given.test_model()
    x = torch.randint(26, (3, 7), generator=torch.Generator().manual_seed(1))
    seen = {}
    hook = model.blocks[0].attn.heads.register_forward_hook(lambda m, i, out: seen.__setitem__("out", out))
    try:
        model(x)
    finally:
        hook.remove()
    attn = model.blocks[0].attn
    for h in range(model.config.n_head):
        w_o = attn.c_proj.weight[:, h * attn.d_head:(h + 1) * attn.d_head]
        direct = model.lm_head(seen["out"][:, h, 0] @ w_o.T)          # position 0 can only look at itself
        assert torch.allclose(direct, inside.ov_circuit(model, 0, h)[x[:, 0]], atol=1e-5)


def test_copies_own_token_counts_rows_whose_largest_entry_is_on_the_diagonal():
    assert inside.copies_own_token(torch.eye(5)) == 5
    assert inside.copies_own_token(torch.eye(5).roll(1, dims=1)) == 0
    ov = torch.eye(4)
    ov[2, 0] = 2.0
    assert inside.copies_own_token(ov) == 3


# ------------------------------------------------------------------ what every pack carries, and what this chapter's folder holds

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter(CHAPTER, lang).cells if c.cell_type == "markdown")


def test_the_models_come_with_this_chapter_only_and_the_text_says_so():
    import ast
    import json
    given_for = json.loads((ROOT / "notebooks" / "given" / "chapters.json").read_text(encoding="utf-8"))
    assert "tiny_gpt.py" in given_for[CHAPTER]
    assert not any("tiny_gpt.py" in files for ch, files in given_for.items() if ch < CHAPTER)
    assert (ROOT / "release" / CHAPTER / "tiny_gpt.py").read_text() == (ROOT / "notebooks" / "given" / "tiny_gpt.py").read_text()
    helper = ast.parse((ROOT / "helpers" / "ch09_inside_gpt.py").read_text())
    classes = [n.name for n in ast.walk(helper) if isinstance(n, ast.ClassDef)]
    assert classes == [], classes                                 # no model class in helpers/, which every pack carries
    for name in ("TinyGPT", "train_toy", "load_char_gpt", "train_char_gpt", "test_model", "_rotate", "_get_batch"):
        assert not hasattr(inside, name), name
    grading = (ROOT / "grading" / "ch09_inside_gpt.py").read_text()
    assert "tiny_gpt" not in grading and "from helpers.ch09_inside_gpt import" not in grading   # its own references
    zh, en = _prose("zh"), _prose("en")
    assert "这一章的文件夹里附带了 `tiny_gpt.py`（只读）" in zh and "第 7 章交作业之后才随这一章发给你" in zh
    assert "This chapter's folder holds `tiny_gpt.py` (read-only)" in en and "after chapter 7 has been handed in" in en


def test_the_training_time_says_where_it_comes_from_in_words():
    zh, en = _prose("zh"), _prose("en")
    assert "bench/" not in zh and "bench/" not in en
    assert "我们保存下来的一次运行（只用 CPU，随机数固定）里，1000 步用了" in zh
    assert "In a run we kept (CPU only, with fixed random numbers) the 1000 steps took" in en


def test_the_graders_model_has_the_chapters_layout_and_computes_the_same():
    """The hidden checks run a model written in grading/, apart from the one the chapter hands out: the same
    parameter names, the same outputs on the same weights (toy and chapter 7 layouts)."""
    for sizes in ({}, dict(vocab_size=11, n_ctx=12, n_layer=3, n_head=2, d_model=24, mlp=True, pos="learned", ln=True)):
        theirs = given.TinyGPT(given.Config(**sizes))
        with torch.no_grad():
            for p in theirs.parameters():
                p.normal_(0.0, 0.1)
        ours = g.model_class()(g.Config(**sizes))
        ours.load_state_dict(theirs.state_dict())
        idx = torch.randint(theirs.config.vocab_size, (2, 9))
        assert set(dict(ours.named_parameters())) <= set(theirs.state_dict())
        assert torch.allclose(ours(idx)[0], theirs(idx)[0], rtol=1e-4, atol=1e-4)


def test_phase_curve_leaves_the_model_as_it_was():
    model = given.test_model()
    before = copy.deepcopy(model.state_dict())
    snaps = [(0, {k: torch.zeros_like(v) for k, v in before.items()})]
    x, y = inside.repeated_batch(4, 5, generator=torch.Generator().manual_seed(2))
    inside.phase_curve(model, snaps, x, y, 5, g.ref_prev_token_score, g.ref_induction_score)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize("shape,key", [((2, 3, 4), "score_batch_not_averaged"), ((4,), "score_one_layer_only"),
                                       ((4, 2), "score_transposed"), ((8,), "score_flattened"), ((2, 4), None)])
def test_score_shape_mistake_is_the_graders_word_for_that_shape(shape, key):
    assert inside.score_shape_mistake(torch.zeros(shape), 2, 3, 4) == key
    assert g.score_shape_key(shape, 2, 3, 4) == key
    assert inside.score_shape_mistake([0.1], 2, 3, 4) == "score_not_a_tensor"


def test_the_challenges_references():
    """Going further: the duplicate-token score counts the weight on every earlier copy of the token; removing a
    whole layer removes its output projection's bias too, which removing its heads leaves in."""
    attn = torch.zeros(1, 1, 1, 4, 4)
    attn[0, 0, 0] = torch.tensor([[1.0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]])
    tokens = torch.tensor([[7, 7, 3, 7]])                      # position 1: one earlier 7; position 3: two
    assert g.ref_duplicate_token_score(attn, tokens).item() == pytest.approx((0.5 + 0.1 + 0.2) / 2)
    model = g._probe_model()
    x = torch.randint(10, (2, 6))
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_proj.bias.fill_(0.3)
    heads = g.ref_ablate_heads(model, [(1, h) for h in range(4)], x, x)
    assert g.ref_ablate_layer(model, 1, x, x) != pytest.approx(heads, abs=1e-6)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.c_proj.bias.zero_()
    assert g.ref_ablate_layer(model, 1, x, x) == pytest.approx(g.ref_ablate_heads(model, [(1, h) for h in range(4)], x, x))
