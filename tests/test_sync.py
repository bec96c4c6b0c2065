"""source/ and release/ are generated: they must equal a fresh build."""
from __future__ import annotations

import json
import shutil

import pytest
from harness import ROOT

from coursekit.author import build, release


def normalised(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    return nb


@pytest.mark.parametrize("chapter", build.chapters())
def test_source_and_release_match_a_fresh_build(chapter, tmp_path):
    fresh_source = build.write_source(chapter, build.DEFAULT_LANG, course_root=tmp_path)
    committed_source = ROOT / "source" / chapter / f"{chapter}.ipynb"
    assert committed_source.exists(), f"{committed_source} missing: run `make source`"
    assert normalised(committed_source) == normalised(fresh_source), \
        f"source/{chapter} is out of date: run `make source && make release` (notebooks/ is the only place to edit)"

    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    fresh_release = release.generate_release(chapter, course_root=tmp_path)
    committed_release = ROOT / "release" / chapter / f"{chapter}.ipynb"
    assert committed_release.exists(), f"{committed_release} missing: run `make release`"
    assert normalised(committed_release) == normalised(fresh_release), \
        f"release/{chapter} is out of date: run `make release`"


@pytest.mark.parametrize("chapter", build.chapters())
def test_the_code_a_chapter_hands_out_is_in_its_source_and_release_folders_and_nowhere_else(chapter):
    """notebooks/given/chapters.json names the files a chapter hands out beside its
    notebook (an earlier answer a later chapter needs); source/ and release/ hold
    exactly those, as written in notebooks/given/."""
    wanted = {p.name: p.read_bytes() for p in build.given_files(chapter)}
    for part in ("source", "release"):
        folder = ROOT / part / chapter
        held = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.suffix != ".ipynb"}
        assert held == wanted, f"{part}/{chapter} holds {sorted(held)}, not {sorted(wanted)}: run `make source release`"


@pytest.mark.parametrize("chapter", build.chapters())
def test_the_visible_tests_probes_match_a_fresh_build(chapter):
    """helpers/probes/<chapter>.json (inputs, expected outputs, known mistakes' outputs
    and words) is what the grading module's probes() and ERRORS give now."""
    from coursekit.author import probes
    path = probes.DATA / f"{chapter}.json"
    assert path.exists(), f"helpers/probes/{chapter}.json missing: run `make source`"
    kept = json.loads(path.read_text(encoding="utf-8"))
    fresh = json.loads(probes.dumps(probes.build(chapter)))
    wrong = probes.differences(kept, fresh)
    assert not wrong, f"helpers/probes/{chapter}.json is out of date: run `make source` ({wrong[:5]})"


@pytest.mark.parametrize("chapter", build.chapters())
def test_the_hidden_checks_stored_values_match_a_fresh_build(chapter):
    """grading/<chapter>_stored.py holds what the grading module's stored_values() gives now,
    for the torch it names (the pinned one), and exists exactly for the chapters that store."""
    import importlib

    import torch

    from coursekit.author import probes
    path = probes.STORED / f"{chapter}_stored.py"
    text = probes.stored_text(chapter)
    if text is None:
        assert not path.exists(), f"{path.name}: {chapter} stores nothing now: remove it"
        return
    assert path.exists(), f"grading/{chapter}_stored.py missing: run `make source`"
    kept = importlib.import_module(f"grading.{chapter}_stored")
    fresh = {}
    exec(compile(text, "fresh", "exec"), fresh)
    assert kept.TORCH == torch.__version__ == fresh["TORCH"], f"grading/{chapter}_stored.py is for torch {kept.TORCH}"
    wrong = probes.differences(kept.VALUES, fresh["VALUES"])
    assert not wrong, f"grading/{chapter}_stored.py is out of date: run `make source` ({wrong[:5]})"


def test_a_probe_file_from_another_machine_is_current_and_a_changed_one_is_not():
    """Two builds agree when their numbers differ only by another processor's rounding
    (a float32 output a few units in its last place apart); a changed expected value, a
    bug missing from a probe, or a changed word is a difference."""
    from coursekit.author import probes
    build_a = {"probes": {"p": {"expected": 0.7710516, "bugs": [{"key": "k", "out": [1.0, float("nan")]}]}},
               "words": {"k": "zh"}}
    other_machine = {"probes": {"p": {"expected": 0.77105165, "bugs": [{"key": "k", "out": [1.0, float("nan")]}]}},
                     "words": {"k": "zh"}}
    assert probes.differences(build_a, other_machine) == []
    changed = json.loads(json.dumps(other_machine).replace("0.77105165", "0.7711"))
    assert probes.differences(build_a, changed) == ["/probes/p/expected: 0.7710516 != 0.7711"]
    assert probes.differences(build_a, {**build_a, "words": {"k": "en"}}) == ["/words/k: 'zh' != 'en'"]
    fewer = {"probes": {"p": {"expected": 0.7710516, "bugs": []}}, "words": {"k": "zh"}}
    assert probes.differences(build_a, fewer) == ["/probes/p/bugs: 1 items != 0"]
    assert probes.differences({"x": True}, {"x": 1}) == ["/x"]


def test_a_chapter_cannot_hand_out_a_file_that_is_not_written(tmp_path):
    (tmp_path / "given").mkdir()
    (tmp_path / "given" / "chapters.json").write_text('{"ch05_block": ["nowhere.py"]}')
    with pytest.raises(build.BuildError, match="nowhere.py"):
        build.given_files("ch05_block", tmp_path)


def _round_trips(path) -> bool:
    """jupytext's own check: text -> notebook -> text gives the same notebook."""
    from jupytext.cli import jupytext as jupytext_cli
    return jupytext_cli(["--to", "myst", "--test", "--quiet", str(path)]) == 0


@pytest.mark.parametrize("chapter", build.chapters())
def test_chapter_text_round_trips_through_jupytext(chapter):
    assert _round_trips(ROOT / "notebooks" / f"{chapter}.md"), \
        f"notebooks/{chapter}.md changes when jupytext reads and writes it back (see the diff above)"


def test_round_trip_check_catches_a_text_that_does_not_survive(tmp_path):
    # A code cell that starts with blank lines and prose glued to a closing fence
    # come back changed: the check must say so.
    bad = tmp_path / "bad.md"
    bad.write_text("---\njupytext:\n  text_representation:\n    format_name: myst\nkernelspec:\n  name: python3\n"
                   "  display_name: Python 3\n---\n\n```{code-cell} ipython3\n\n\n\ny = 2\n```\nsome text\n")
    assert not _round_trips(bad)
