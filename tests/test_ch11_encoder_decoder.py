"""Unit tests for helpers.ch11_encoder_decoder (the task, the model wrapper,
the heatmaps) and for grading.ch11_encoder_decoder (its references agree with
torch; the model solution passes every hidden check in both languages; known
bugs are named in both languages)."""
from __future__ import annotations

import math
import re

import matplotlib
import nbformat
import pytest
import torch
from torch import nn

matplotlib.use("Agg")

import numbers_training as given  # noqa: E402  (notebooks/given: the chapter's own folder)
from harness import ROOT, _strip_markers  # noqa: E402

from grading import ch11_encoder_decoder as g  # noqa: E402
from helpers import ch11_encoder_decoder as ed  # noqa: E402
from helpers import set_language

CHAPTER = "ch11_encoder_decoder"
SOURCE = ROOT / "source" / CHAPTER / f"{CHAPTER}.ipynb"


def namespace(replace: dict[str, str] | None = None) -> dict:
    """The chapter's answer cells (model solution, ``replace`` swapped in), run."""
    nb = nbformat.read(SOURCE, as_version=4)
    ns: dict = {"torch": torch, "math": math, "nn": nn, "F": torch.nn.functional}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("solution"):
            exec(compile((replace or {}).get(meta["grade_id"], _strip_markers(cell.source)), meta["grade_id"], "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def sol():
    return namespace()


# ---------------------------------------------------------------- the task

@pytest.mark.parametrize("n,words", [(0, "零"), (7, "七"), (10, "十"), (15, "十五"), (20, "二十"), (101, "一百零一"),
                                     (110, "一百一十"), (1000, "一千"), (1005, "一千零五"), (1010, "一千零一十"),
                                     (1024, "一千零二十四"), (1050, "一千零五十"), (1500, "一千五百"),
                                     (2030, "二千零三十"), (9999, "九千九百九十九"), (3007, "三千零七")])
def test_to_chinese_standard_reading(n, words):
    assert ed.to_chinese(n) == words


def test_to_chinese_rejects_out_of_range():
    for bad in (-1, 10000, 2.5):
        with pytest.raises(ValueError):
            ed.to_chinese(bad)


def test_every_reading_fits_and_round_trips_through_the_vocabulary():
    lengths = {len(ed.to_chinese(n)) for n in range(ed.MAX_NUMBER + 1)}
    assert max(lengths) + 1 == ed.TGT_LEN                      # + <eos>
    assert len(set(map(ed.to_chinese, range(ed.MAX_NUMBER + 1)))) == ed.MAX_NUMBER + 1   # no two numbers alike
    for n in (0, 1024, 9999):
        assert ed.decode_target(ed.encode_target(ed.to_chinese(n))) == ed.to_chinese(n)


def test_split_is_fixed_and_disjoint():
    train, test = ed.split_numbers()
    assert (len(train), len(test)) == (9000, 1000)
    assert not set(train) & set(test)
    assert ed.split_numbers() == (train, test)


def test_make_batch_pads_on_the_right_and_shifts_the_target():
    b = ed.make_batch([7, 1024])
    assert b["src"].tolist() == [[ed.SRC_TOKENS.index("7"), 0, 0, 0], [ed.SRC_TOKENS.index(c) for c in "1024"]]
    assert b["src_lengths"].tolist() == [1, 4]
    assert b["tgt_in"][:, 0].tolist() == [ed.BOS, ed.BOS]
    assert torch.equal(b["tgt_in"][1, 1:7], b["tgt_out"][1, :6])          # input = <bos> + target, shifted
    assert b["tgt_out"][1, 6] == ed.EOS and b["tgt_in"][1, 7] == ed.PAD
    assert ed.decode_target(b["tgt_out"][1]) == "一千零二十四"
    assert b["tgt_out"][0].tolist()[:3] == [ed.TGT_TOKENS.index("七"), ed.EOS, ed.PAD]


def test_sampling_balances_lengths():
    by_length = [[n for n in range(10000) if len(str(n)) == k] for k in range(1, 5)]
    picks = given._sample(by_length, 4000, torch.Generator().manual_seed(0))
    counts = [sum(len(str(n)) == k for n in picks) for k in range(1, 5)]
    assert all(800 < c < 1200 for c in counts), counts


# ---------------------------------------------------------------- model, decoding, heatmaps

def test_seq2seq_shapes_and_training_steps(sol):
    torch.manual_seed(0)
    model = ed.Seq2Seq(sol["EncoderLayer"], sol["DecoderLayer"], d=16, h=2, d_ff=32, n_enc=1, n_dec=1)
    log = given.train(model, sol["padding_mask"], steps=3, batch_size=8, progress=False)
    assert log["steps"] == 3 and len(log["losses"]) == 3 and all(math.isfinite(x) for x in log["losses"])
    b = ed.make_batch([5, 1234])
    mask = sol["padding_mask"](b["src_lengths"], ed.SRC_LEN)
    logits = model.decode(b["tgt_in"], model.encode(b["src"], mask), mask)
    assert logits.shape == (2, ed.TGT_LEN, len(ed.TGT_TOKENS))
    acc, misses = ed.accuracy(model, sol["greedy_decode"], sol["padding_mask"], [1, 2, 3])
    assert 0.0 <= acc <= 1.0 and len(misses) == round((1 - acc) * 3)


def test_cross_attention_maps_are_rows_of_weights(sol):
    torch.manual_seed(1)
    model = ed.Seq2Seq(sol["EncoderLayer"], sol["DecoderLayer"], d=16, h=2, d_ff=32, n_enc=1, n_dec=2).eval()
    text, maps = ed.cross_attention_maps(model, sol["greedy_decode"], sol["padding_mask"], 305)
    assert len(maps) == 2
    assert maps[0].shape == (2, len(text) + 1, 3)                # heads, output characters + <eos>, digits
    assert torch.allclose(maps[0].sum(-1), torch.ones(2, len(text) + 1), atol=1e-5)


def test_recorded_weights_equal_a_direct_call():
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q, kv = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    holder = nn.Module()
    holder.decoder = nn.ModuleList([nn.Module()])
    holder.decoder[0].cross_attn = mha
    maps = ed._recorded_cross_weights(holder, lambda: mha(q, kv, kv, None, False))   # need_weights passed positionally
    direct = mha(q, kv, kv, need_weights=True, average_attn_weights=False)[1]
    assert len(maps) == 1 and torch.allclose(maps[0], direct)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_figures_draw(sol, lang):
    import matplotlib.pyplot as plt
    set_language(lang)
    torch.manual_seed(2)
    model = ed.Seq2Seq(sol["EncoderLayer"], sol["DecoderLayer"], d=16, h=2, d_ff=32, n_enc=1, n_dec=1).eval()
    assert len(ed.mask_patterns_figure().axes) == 3
    assert len(ed.heatmap_figure(model, sol["greedy_decode"], sol["padding_mask"], 1024).axes) == 2   # + colour bar
    examples = ed.examples_figure(model, sol["greedy_decode"], sol["padding_mask"], (7, 1024)).axes
    assert len([ax for ax in examples if ax.get_label() != "<colorbar>"]) == 2 and len(examples) == 3   # + colour bar
    assert len(ed.loss_figure([3.0, 2.0, 1.0]).axes) == 1
    plt.close("all")
    set_language("zh")


def test_explorer_prints_one_line_while_grading(sol, monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    set_language("en")
    model = ed.Seq2Seq(sol["EncoderLayer"], sol["DecoderLayer"], d=16, h=2, d_ff=32, n_enc=1, n_dec=1).eval()
    assert ed.explorer(model, sol["greedy_decode"], sol["padding_mask"]) is None
    assert capsys.readouterr().out.startswith("1024 → model says")
    set_language("zh")


def test_explorer_builds_outside_grading(sol, monkeypatch):
    import matplotlib.pyplot as plt
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    model = ed.Seq2Seq(sol["EncoderLayer"], sol["DecoderLayer"], d=16, h=2, d_ff=32, n_enc=1, n_dec=1).eval()
    ed.explorer(model, sol["greedy_decode"], sol["padding_mask"], start=110)
    plt.close("all")


def test_glyphs_fall_back_to_pinyin_without_a_chinese_font(monkeypatch):
    from helpers import plots
    monkeypatch.setattr(plots, "cjk_font", lambda: None)
    assert ed.glyphs("一千零五") == ["yi", "qian", "ling", "wu"]
    monkeypatch.setattr(plots, "cjk_font", lambda: "Noto Sans CJK SC")
    assert ed.glyphs("一千") == ["一", "千"]


# ---------------------------------------------------------------- grading references

def test_ref_cross_matches_sdpa():
    gen = torch.Generator().manual_seed(0)
    x, mem = torch.randn(2, 5, 6, generator=gen, dtype=torch.float64), torch.randn(2, 3, 6, generator=gen, dtype=torch.float64)
    wq, wk, wv = (torch.randn(6, c, generator=gen, dtype=torch.float64) for c in (4, 4, 2))
    mask = torch.tensor([[True, True, True], [True, False, False]])
    out, w = g.ref_cross(x, mem, wq, wk, wv, mask)
    ref = torch.nn.functional.scaled_dot_product_attention(x @ wq, mem @ wk, mem @ wv, attn_mask=mask[:, None, :])
    assert torch.allclose(out, ref, atol=1e-12) and torch.all(w[1, :, 1:] == 0)


def test_ref_layers_match_torch_layers(sol):
    gen = torch.Generator().manual_seed(3)
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    enc = g._randomise(sol["EncoderLayer"](8, 2, 16), gen)
    x = torch.randn(2, 4, 8, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        theirs = g._torch_layer(enc, 8, 2, 16, False)(x, src_key_padding_mask=~mask)
    assert torch.allclose(g.ref_encoder(enc, x, mask)[mask], theirs[mask], atol=1e-10)
    dec = g._randomise(sol["DecoderLayer"](8, 2, 16), gen)
    y = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        theirs = g._torch_layer(dec, 8, 2, 16, True)(y, x, tgt_mask=torch.ones(5, 5, dtype=torch.bool).triu(1),
                                                     memory_key_padding_mask=~mask)
    assert torch.allclose(g.ref_decoder(dec, y, x, mask), theirs, atol=1e-10)


def test_every_bug_reference_differs_from_the_right_answer(sol):
    gen = torch.Generator().manual_seed(4)
    mask = torch.tensor([[True, True, True], [True, False, False], [True, True, False]])
    enc = g._randomise(sol["EncoderLayer"](12, 3, 24), gen)
    dec = g._randomise(sol["DecoderLayer"](12, 3, 24), gen)
    x, y = (torch.randn(3, 3, 12, generator=gen, dtype=torch.float64) for _ in range(2))
    for bug in g.ENC_BUGS:
        assert not g.close(bug.impl(enc, x, mask), g.ref_encoder(enc, x, mask)), bug.key
    for bug in g.DEC_BUGS:
        assert not g.close(bug.impl(dec, y, x, mask), g.ref_decoder(dec, y, x, mask)), bug.key


# ---------------------------------------------------------------- the hidden checks, in process

CHECKS = [("padding_mask", g.check_padding_mask), ("cross_attention", g.check_cross_attention),
          ("EncoderLayer", g.check_encoder_layer), ("DecoderLayer", g.check_decoder_layer),
          ("greedy_decode", g.check_greedy_decode)]


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_solution_passes_every_hidden_check(sol, lang, capsys):
    set_language(lang)
    for name, check in CHECKS:
        check(sol[name])
    out = capsys.readouterr().out
    assert out.count("✓") == len(CHECKS)
    assert bool(re.search(r"[\u4e00-\u9fff]", out)) == (lang == "zh")
    set_language("zh")


BUG_CASES = [  # (answer cell, old, new, check, zh words, en words)
    ("padding_mask", " < lengths", " >= lengths", "padding_mask", "掩码反了", "inverted"),
    ("cross_attention", '~memory_mask[:, None, :]', '~memory_mask[:, :, None]', "cross_attention", "query（行）",
     "instead of the keys"),
    ("encoder_layer", "else ~src_mask", "else src_mask", "EncoderLayer", "True 表示“屏蔽”", "True means 'blocked'"),
    ("decoder_layer", "attn_mask=future, ", "", "DecoderLayer", "没有因果掩码", "no causal mask"),
    ("greedy_decode", "if done.all():", "if done.any():", "greedy_decode", "done.all()", "not any()"),
]


@pytest.mark.parametrize("cell,old,new,name,zh,en", BUG_CASES, ids=[c[0] for c in BUG_CASES])
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_known_bugs_are_named_in_both_languages(cell, old, new, name, zh, en, lang):
    nb = nbformat.read(SOURCE, as_version=4)
    src = next(_strip_markers(c.source) for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell)
    assert src.count(old) == 1
    ns = namespace({cell: src.replace(old, new)})
    set_language(lang)
    try:
        with pytest.raises(AssertionError) as err:
            dict(CHECKS)[name](ns[name])
        assert (zh if lang == "zh" else en) in str(err.value), str(err.value)
    finally:
        set_language("zh")


# ------------------------------------------------------------------ what the trained model gets wrong

def test_from_chinese_reads_every_standard_form_back_and_the_models_slips_too():
    assert all(ed.from_chinese(ed.to_chinese(n)) == n for n in range(ed.MAX_NUMBER + 1))
    assert ed.from_chinese("一千零三十") == 1030 and ed.from_chinese("一千零五十五") == 1055
    assert ed.from_chinese("六千零") == 6000 and ed.from_chinese("五千九百零九") == 5909
    assert ed.from_chinese("") is None and ed.from_chinese("百") is None and ed.from_chinese("五十千") is None
    assert [ed.zero_pattern(n) for n in (7, 10, 1003, 6050, 9999)] == ["X", "X0", "X00X", "X0X0", "XXXX"]


def test_error_table_groups_the_misses_by_where_the_zeros_are(capsys):
    wrong = {1003: "一千零三十", 2005: "二千零五十五", 6000: "六千零"}

    def fake_decode(model, src, lengths, max_len, bos, eos):       # right everywhere except on ``wrong``
        out = []
        for digits, k in zip(src.tolist(), lengths.tolist()):
            n = int("".join(ed.SRC_TOKENS[i] for i in digits[:k]))
            out.append(ed.encode_target(wrong.get(n, ed.to_chinese(n))) + [eos] * max_len)
        return torch.tensor([row[:max_len] for row in out])

    table = ed.error_table(None, fake_decode, None, range(990, 6010))
    assert table["X00X"]["wrong"] == 2 and table["X000"]["wrong"] == 1
    assert sum(r["wrong"] for r in table.values()) == 3 and sum(r["numbers"] for r in table.values()) == 5020
    train = set(ed.split_numbers()[0])
    assert sum(r["wrong_train"] for r in table.values()) == sum(n in train for n in wrong)
    ed.print_error_table(table)
    out = capsys.readouterr().out
    assert "1003 → 一千零三十 = 1030" in out and "6000 → 六千零 = 6000" in out
    assert "X00X 的 2 个错误里，有 2 个把最后一位数字放在了十位上" in out


def test_the_padding_mask_stand_in_passes_exercise_1s_hidden_checks():
    """What stands in for a wrong padding_mask while greedy_decode is checked is itself a correct answer."""
    from grading.core import stand_in
    obj, retire = stand_in(g.E_PADDING.reference)
    try:
        assert g.E_PADDING.probe(obj)
    finally:
        retire()


# ---------------------------------------------------------------- what the student's folder holds, and the text

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter(CHAPTER, lang).cells if c.cell_type == "markdown")


def _kept() -> str:
    import json
    return "\n".join(json.loads((ROOT / "bench" / "results" / "chapter_outputs" / f"{CHAPTER}.json")
                                .read_text(encoding="utf-8"))["outputs"])


def test_the_training_loop_comes_with_this_chapter_only_and_the_text_says_so():
    import json
    given_for = json.loads((ROOT / "notebooks" / "given" / "chapters.json").read_text(encoding="utf-8"))
    assert given_for[CHAPTER] == ["numbers_training.py"]
    assert not any("numbers_training.py" in files for ch, files in given_for.items() if ch < CHAPTER)
    assert (ROOT / "release" / CHAPTER / "numbers_training.py").read_text() == \
        (ROOT / "notebooks" / "given" / "numbers_training.py").read_text()
    assert not hasattr(ed, "train") and not hasattr(ed, "_sample")          # helpers/, in every pack, holds no loop
    assert "backward" not in (ROOT / "helpers" / "ch11_encoder_decoder.py").read_text()
    zh, en = _prose("zh"), _prose("en")
    assert "`numbers_training.py` 里（只读）" in zh and "第 7 章交作业之后才随这一章发给你" in zh
    assert "`numbers_training.py`, which this chapter's folder holds (read-only)" in en
    assert "after chapter 7 has been handed in" in en


def test_what_the_model_saw_of_the_training_set_is_said_with_the_kept_runs_numbers():
    """Issue 49: a number in the training set was not thereby learned. The run draws 160 × 128 examples, a
    quarter of them four-digit, over about 8,100 four-digit numbers: each drawn well under once on average,
    about half never; every miss of the training set has four digits."""
    out = _kept()
    drawn, four, four_train, per, never = re.search(
        r"training drew (\d+) examples, (\d+) of them four-digit; the training set holds (\d+) four-digit numbers, "
        r"drawn ([\d.]+) times each on average, (\d+) of them never", out).groups()
    misses, four_misses, miss_never = map(int, re.search(
        r"of the (\d+) misses in the training set, (\d+) have four digits, and (\d+) of those were never drawn",
        out).groups())
    trained = int(re.search(r"(\d+) of them in the training set", out).group(1))
    assert int(drawn) == 160 * 128 and misses == trained == four_misses                # "all of them four-digit"
    assert 0.5 < float(per) < 0.8 and 0.4 < int(never) / int(four_train) < 0.6           # "well under once", "about half"
    zh, en = _prose("zh"), _prose("en")
    for gone in ("这些数连同正确答案模型都见过很多遍", "照样写错——这不是没背下来"):
        assert gone not in zh, gone
    for gone in ("saw each of these numbers with its right answer many times", "not a gap in its memory",
                 "the 9,000 the model trained on", "trained on"):
        assert gone not in en, gone
    assert (f"160 × 128 = 20,480 个例子，其中四位数 {int(four):,} 个，而训练集里有 {int(four_train):,} 个四位数，"
            f"平均每个只被抽到 {float(per):.2f} 次，{int(never):,} 个一次也没抽到") in zh
    assert f"其中 {miss_never} 个训练时根本没出现过" in zh and "在训练集里，不等于模型学过它" in zh
    assert (f"160 × 128 = 20,480 examples, {int(four):,} of them four-digit, while the training set holds "
            f"{int(four_train):,} four-digit numbers, so each was drawn {float(per):.2f} times on average and "
            f"{int(never):,} of them never") in en
    assert f"{miss_never} of them never came up in training at all" in en
    assert "Being in the training set is not the same as having been learned" in en
    assert "0 的位置标出了错在哪里" in zh and "the pattern of zeros marks them" in en


def test_the_sampling_the_sentence_describes_is_the_loops():
    """One length out of four, uniformly, then a number of that length: a quarter of the draws are four-digit."""
    train_numbers, _ = ed.split_numbers()
    by_length = [[n for n in train_numbers if len(str(n)) == k] for k in range(1, ed.SRC_LEN + 1)]
    picks = given._sample(by_length, 20_480, torch.Generator().manual_seed(1))
    share = sum(n >= 1000 for n in picks) / len(picks)
    assert abs(share - 0.25) < 0.01 and len(by_length[3]) == 8096


def test_the_held_out_paragraph_names_no_file_and_counts_its_misses_from_the_run():
    out = _kept()
    misses = re.findall(r"^\s+(\d+): (\S+)\s+\(should be", out, re.M)
    zh, en = _prose("zh"), _prose("en")
    assert "bench/" not in zh and "bench/" not in en
    assert "在我们保存下来的一次运行里（只用 CPU，随机数固定）" in zh and "In a run we kept (CPU only, with fixed random numbers)" in en
    assert f"这 {len(misses)} 个错是偶然的吗？" in zh and f"Are these {len(misses)} misses chance?" in en


# ---------------------------------------------------------------- the tests' own tools: stand-ins, loading, layout

def test_the_stand_in_decodes_by_its_rule_and_records_its_calls(sol):
    src, lengths = torch.tensor([[3, 4, 6, 7], [6, 5, 7, 7]]), torch.tensor([3, 2])
    model = ed.StandIn(eos=2, bos=1)
    out = sol["greedy_decode"](model, src, lengths, 8, 1, 2)
    assert model.encodes == 1 and all(torch.equal(m, sol["padding_mask"](lengths, 4)) for m in model.decode_masks)
    assert torch.equal(out, g.ref_greedy(ed.StandIn(eos=2, bos=1), src, lengths, 8, 1, 2))
    with pytest.raises(ValueError, match="src_mask must be a bool tensor"):
        model.encode(src, torch.ones(2, 4))


def test_load_layer_fills_a_layer_whatever_its_ffn_calls_its_parts(sol):
    state = {name: p.detach().clone() for name, p in sol["EncoderLayer"](8, 2, 16).named_parameters()}
    named = sol["EncoderLayer"](8, 2, 16)
    named.ffn = nn.Sequential()
    named.ffn.add_module("fc", nn.Linear(8, 16))
    named.ffn.add_module("act", nn.GELU())
    named.ffn.add_module("proj", nn.Linear(16, 8))
    ed.load_layer(named, state)
    assert torch.equal(named.ffn.fc.weight, state["ffn.0.weight"]) and torch.equal(named.ffn.proj.bias, state["ffn.2.bias"])
    assert torch.equal(named.self_attn.in_proj_weight, state["self_attn.in_proj_weight"])


@pytest.mark.parametrize("change,key", [
    (lambda m: setattr(m, "self_attn", nn.MultiheadAttention(8, 2)), "mha_not_batch_first"),
    (lambda m: setattr(m, "ffn", nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))), "ffn_width_not_d_ff"),
    (lambda m: setattr(m, "extra", nn.Linear(8, 8)), "layer_parameters"),
    (lambda m: setattr(m, "ffn", nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 8))),
     "dropout_left_in")])
def test_check_layout_names_what_it_sees(sol, change, key):
    from helpers.checks import CheckFailed
    layer = sol["EncoderLayer"](8, 2, 16)
    ed.check_layout(layer, False, 8, 2, 16)                      # the model solution passes
    change(layer)
    with pytest.raises(CheckFailed) as err:
        ed.check_layout(layer, False, 8, 2, 16)
    assert err.value.key == f"bug:{key}"


def test_beam_search_reference_beats_greedy_on_the_bigram_table(sol):
    """The challenge's table is made so that greedy and beam search disagree: the reference finds the sequence of
    higher probability."""
    table = g.BEAM_TABLE
    beam = g.ref_beam(table, 6, 0, 1, 2)
    greedy = sol["greedy_decode"](ed.BigramModel(table), torch.zeros(1, 1, dtype=torch.long), torch.tensor([1]), 6, 0, 1)[0]

    def score(seq):
        prev, total = 0, 0.0
        for k in seq.tolist():
            total += float(table[prev, k])
            prev = k
            if k == 1:
                break
        return total
    assert beam.tolist() == [3, 1] and greedy.tolist()[:3] == [2, 4, 1]
    assert score(beam) > score(greedy)
