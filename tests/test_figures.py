"""The grading run's figures step (coursekit/grade/figures.py): a figure that
depends on nothing a student wrote is drawn once and put into every graded
notebook that asked for it; a mark a submission forges gets at most a course
figure."""
from __future__ import annotations

import nbformat

from coursekit.grade import figures
from helpers import ch01_attention, plots
from helpers.runtime import FIGURE_MARK


def marked_notebook(*marks):
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("ch01.qkv_flow()")
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": m.get("alt", "")},
                                           metadata={FIGURE_MARK: m}) for m in marks]
    nb.cells = [cell]
    return nb


def mark(fn, *args, lang="zh", alt="描述"):
    return {"key": plots.figure_key(fn) if callable(fn) else fn, "args": list(args), "lang": lang, "alt": alt}


def test_a_registered_figure_is_drawn_once_and_filled_with_its_text_alternative(tmp_path):
    good = mark(ch01_attention.qkv_flow_figure, alt="数据流图")
    nb = marked_notebook(good, dict(good))
    assert figures.draw({"marks": [good], "folder": str(tmp_path)}) == 0
    assert len(list(tmp_path.glob("*.png"))) == 1                 # the same mark twice: one picture
    assert figures.fill(nb, tmp_path)
    for out in nb.cells[0].outputs:
        assert out.data["image/png"].startswith("iVBOR") and out.metadata["image/png"]["alt"] == "数据流图"
    assert figures.marks(nb) == []                                 # nothing left to fill
    assert not figures.fill(nb, tmp_path)


def test_forged_marks_draw_nothing_but_course_figures(tmp_path):
    forged = [mark("os:system", "echo hacked"), mark("helpers.plots:png_of", 1),
              mark(ch01_attention.scaling_figure, 10 ** 9), mark(ch01_attention.dot_samples, 4),
              mark(ch01_attention.qkv_flow_figure, lang="fr"), {"key": 3, "args": "x"}]
    assert figures.draw({"marks": forged, "folder": str(tmp_path)}) == 0
    assert list(tmp_path.glob("*.png")) == []
    nb = marked_notebook(*[m for m in forged if isinstance(m.get("key"), str)])
    assert not figures.fill(nb, tmp_path)
    assert all("image/png" not in o.data for o in nb.cells[0].outputs)


def test_a_flood_of_marks_is_cut_to_a_few_per_notebook():
    nb = marked_notebook(*[mark(ch01_attention.scaling_figure, 4, alt=str(i)) for i in range(100)])
    assert len(figures.marks(nb)) == figures.PER_NOTEBOOK


def test_the_cache_follows_the_helpers(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    first = figures.helpers_fingerprint(tmp_path)
    (tmp_path / "a.py").write_text("x = 2\n")
    assert figures.helpers_fingerprint(tmp_path) != first
