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
    assert path.read_text(encoding="utf-8") == probes.dumps(probes.build(chapter)), \
        f"helpers/probes/{chapter}.json is out of date: run `make source`"


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
