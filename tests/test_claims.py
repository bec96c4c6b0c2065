"""The claims ledger (coursekit/author/claims.py): every measured number in a chapter's
prose is filled in by the build from a record, and the sentence citing it states the
record's conditions. These tests check the ledger as it is, and that it fails when a
record, a condition or a sentence changes under it."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from coursekit.author import build, claims

ROOT = Path(__file__).resolve().parent.parent
COVERED = sorted(claims.CLAIMS)


def _prose(chapter: str, lang: str, root: Path | None = None) -> str:
    nb = build.build_chapter(chapter, lang, root or build.NOTEBOOKS)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


@pytest.mark.parametrize("chapter", COVERED)
def test_every_claim_is_cited_in_both_languages_under_its_records_conditions(chapter):
    assert claims.check(chapter) == []


@pytest.mark.parametrize("lang", build.LANGS)
@pytest.mark.parametrize("chapter", build.chapters())
def test_no_measured_number_in_the_prose_lacks_a_record(chapter, lang):
    assert claims.unrecorded(chapter, lang) == []


@pytest.mark.parametrize("chapter", COVERED)
def test_the_build_fills_in_each_claim_from_its_record_in_each_language(chapter):
    for lang in build.LANGS:
        text = _prose(chapter, lang)
        assert "{{" not in text and "claim:" not in text
        for claim in claims.CLAIMS[chapter].values():
            if lang in claim.langs:
                assert claim.value() in text, (lang, claim.id)
    # monolingual builds: each keeps its own language's cell of a claim's section, not the other's
    zh, en = _prose(chapter, "zh"), _prose(chapter, "en")
    zh_mark, en_mark = MARKS[chapter]
    assert zh_mark in zh and zh_mark not in en and en_mark in en and en_mark not in zh


MARKS = {"ch01_attention": ("用你的实现看一次真实的饱和", "Your implementation, showing saturation for real"),
         "ch04_positions": ("在我们记下的这次运行里", "In the run we kept (800 steps"),
         "ch05_block": ("在这台机器上（种子固定", "What this machine shows (the seed is fixed"),
         "ch08_efficiency": ("我们保存下来的一次运行", "In a run we kept"),
         "ch09_inside_gpt": ("在我们的运行里（1000 步）", "In our run (1000 steps)"),
         "ch11_encoder_decoder": ("在我们的这次训练里", "In our run, "),
         "ch07_gpt": ("本节的数字都是", "Every number in this section")}


def test_ch07_values_are_read_from_the_recipe_sweep_as_it_is_kept():
    rows = [json.loads(line) for line in (ROOT / "bench/results/recipe_sweep_round2.jsonl").read_text().splitlines()
            if line.startswith("{")]
    four = next(r for r in rows if r["ch"] == {"n_layer": 3, "batch_size": 16, "lr": 0.004})
    en = _prose("ch07_gpt", "en")
    assert f"the run at 4e-3 at {four['val']:.3f} (round 2, {four['steps']:,} steps)" in en


# ------------------------------------------------------------- the ledger fails when it should

@pytest.fixture
def results(tmp_path):
    """A copy of bench/results the test may change; claims read it instead."""
    copy = tmp_path / "results"
    shutil.copytree(ROOT / "bench" / "results", copy, ignore=shutil.ignore_patterns("*.png", "*.html"))
    with claims.records_from(copy):
        yield copy


@pytest.fixture
def notebooks(tmp_path):
    copy = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", copy)
    return copy


def _rewrite_jsonl(path: Path, change) -> None:
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            change(row)
            line = json.dumps(row)
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")


def test_a_changed_recorded_number_fails_until_the_sentence_is_reread(results):
    assert claims.check("ch07_gpt") == []

    def worse(row):
        if row["ch"] == {"n_layer": 3, "batch_size": 16, "lr": 0.004}:
            row["val"] = 1.7466
    _rewrite_jsonl(results / "recipe_sweep_round2.jsonl", worse)
    problems = claims.check("ch07_gpt")
    assert any("ch07.lr4e-3-val" in p and "now gives 1.747" in p for p in problems), problems
    assert "1.747" in _prose("ch07_gpt", "en")          # the build takes the record's value, the test holds it


def test_a_changed_condition_in_the_record_fails(results):
    kept = json.loads((results / "extrapolation_seeds.json").read_text())
    kept["setup"]["steps"] = 1600
    (results / "extrapolation_seeds.json").write_text(json.dumps(kept))
    problems = claims.check("ch04_positions")
    assert any("'1600 steps'" in p for p in problems) and any("'1600 步'" in p for p in problems), problems

    def more_load(row):
        if row.get("busy_elsewhere"):
            row["busy_elsewhere"] = [b + 7 for b in row["busy_elsewhere"]]
    _rewrite_jsonl(results / "threads_sitting.jsonl", more_load)
    assert any("ch07.threads" in p for p in claims.check("ch07_gpt"))


def test_a_sweep_run_under_other_conditions_than_the_section_states_fails(results):
    path = results / "recipe_sweep_round1.jsonl"
    text = path.read_text()
    path.write_text(text.replace("7 runs in parallel", "3 runs in parallel"))
    problems = claims.check("ch07_gpt")
    assert any("ch07.lr4e-3-val" in p and "3 runs" in p for p in problems), problems[:3]
    path.write_text(text.replace("on tinyshakespeare.txt", "on shakespeare.txt"))
    problems = claims.check("ch07_gpt")
    assert any("ch07.b32-steps" in p and "'shakespeare'" in p for p in problems), problems[:3]
    assert not claims.states("batch 160", "batch 16") and claims.states("（批量 16，", "批量 16")


def test_a_sentence_that_states_other_conditions_fails(notebooks):
    assert claims.check("ch07_gpt", notebooks) == []
    path = notebooks / "ch07_gpt.md"
    text = path.read_text(encoding="utf-8")
    # the batch-16 run of the comparison was at 2e-3: say 3e-3 and the ledger objects
    path.write_text(text.replace("{{claim: ch07.b16-steps}} for batch 16 (at 2e-3)",
                                 "{{claim: ch07.b16-steps}} for batch 16 (at 3e-3)"), encoding="utf-8")
    problems = claims.check("ch07_gpt", notebooks)
    assert any("ch07.b16-steps" in p and "'2e-3'" in p and "[en]" in p for p in problems), problems
    # the runs were on tinyshakespeare: a section that no longer says so fails too
    path.write_text(text.replace("tinyshakespeare (about a million characters", "Shakespeare (about a million "
                                 "characters"), encoding="utf-8")
    problems = claims.check("ch07_gpt", notebooks)
    assert any("'tinyshakespeare'" in p and "[en]" in p for p in problems), problems


def test_a_number_typed_into_the_prose_fails(notebooks):
    path = notebooks / "ch07_gpt.md"
    text = path.read_text(encoding="utf-8")
    assert text.count("{{claim: ch07.b32-steps}} steps") == 1
    path.write_text(text.replace("{{claim: ch07.b32-steps}} steps", "883 steps"), encoding="utf-8")
    assert any("'883'" in p for p in claims.unrecorded("ch07_gpt", "en", notebooks))
    assert any("ch07.b32-steps is never cited" in p for p in claims.check("ch07_gpt", notebooks))
    # a hand-typed loss in a line that reports a run is caught as well
    path.write_text(text.replace("ended at {{claim: ch07.b32-val}}", "ended at 1.81"), encoding="utf-8")
    assert any("'1.81'" in p for p in claims.unrecorded("ch07_gpt", "en", notebooks))


def test_a_placeholder_that_names_no_claim_stops_the_build(notebooks):
    path = notebooks / "ch07_gpt.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("{{claim: ch07.b32-steps}}", "{{claim: ch07.b32-stepz}}", 1), encoding="utf-8")
    with pytest.raises(build.BuildError, match="b32-stepz"):
        build.build_chapter("ch07_gpt", "zh", notebooks)


# ------------------------------------------------------------- attributions carry a source

CITATION = re.compile(r"\b([A-Z][a-zA-Z\-]+)(?: et al\.| and [A-Z][a-z]+| & [A-Z][a-z]+| 等| 和 [A-Z][a-z]+)?"
                      r"[ ,，(（]+((?:19|20)\d\d)\b")
READING_HEADINGS = ("### Further reading", "## Further reading", "### 延伸阅读", "## 延伸阅读")


def unsourced(chapter: str, lang: str, root: Path | None = None) -> list[str]:
    """Works cited in the chapter's prose ("Xiong et al. (2020)", "Loshchilov 和 Hutter（2019）")
    whose first author its further reading does not list."""
    text = _prose(chapter, lang, root)
    heading = next((h for h in READING_HEADINGS if h in text), None)
    if heading is None:                     # the quiz: the chapters' reading lists together
        body, reading = text, "\n".join(_reading(c, lang, root) for c in build.chapters() if c != chapter)
    else:
        body, reading = text[:text.index(heading)], text[text.index(heading):]
    return [m.group(0) for m in CITATION.finditer(body) if m.group(1) not in reading]


def _reading(chapter: str, lang: str, root: Path | None = None) -> str:
    text = _prose(chapter, lang, root)
    heading = next((h for h in READING_HEADINGS if h in text), None)
    return text[text.index(heading):] if heading else ""


@pytest.mark.parametrize("chapter", build.chapters())
def test_every_cited_work_is_in_the_chapters_further_reading(chapter):
    for lang in build.LANGS:
        assert unsourced(chapter, lang) == [], (chapter, lang)


def test_an_attribution_without_its_source_is_found(notebooks):
    path = notebooks / "ch07_gpt.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("https://arxiv.org/abs/1711.05101\n", "\n").replace(
        "- Loshchilov & Hutter，*Decoupled Weight Decay Regularization*，2019（AdamW：把权重衰减和梯度分开）：\n", "").replace(
        "- Loshchilov & Hutter, *Decoupled Weight Decay Regularization*, 2019 (AdamW: weight decay taken apart "
        "from the gradient): \n", ""), encoding="utf-8")
    assert unsourced("ch07_gpt", "en", notebooks) == ["Loshchilov and Hutter (2019"]
    assert unsourced("ch07_gpt", "zh", notebooks) == ["Loshchilov 和 Hutter（2019"]
