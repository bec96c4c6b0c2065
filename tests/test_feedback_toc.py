"""The feedback page names each exercise as the chapter's heading does: a
function named in `backticks` in the heading is code in the table of contents
and the cell's label, never raw backticks."""
from __future__ import annotations

import re

import nbformat
import pytest
from harness import ROOT

from coursekit.author.build import build_chapter
from coursekit.report import score


def _standing(nb, chapter):
    cells = [score.CellScore(c.metadata["nbgrader"]["grade_id"], float(c.metadata["nbgrader"]["points"]),
                             float(c.metadata["nbgrader"]["points"]), None)
             for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
    return score.Standing("ann", chapter, cells)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_exercise_titles_show_code_not_backticks(lang):
    from coursekit.grade import feedback
    chapter = "ch04_positions"
    nb = nbformat.from_dict(build_chapter(chapter, lang))
    headings = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert re.search(r"^#+ .*`sinusoidal_encoding`", headings, re.M), "the heading no longer names the function"
    html = feedback.page(nb, _standing(nb, chapter), chapter)
    toc = html[html.index('id="toc"'):html.index("</nav>")]
    assert "<code>sinusoidal_encoding</code>" in toc, toc
    labels = re.findall(r'<span class="course-label">(.*?)</span>', html, re.S)
    assert labels and not any("`" in label for label in labels), labels
    assert "`" not in toc, toc
    assert (ROOT / "notebooks" / f"{chapter}.md").exists()


# ------------------------------------------------------------------ the page's parts, made once per course folder

def _model_page_inputs(chapter="ch01_attention", lang="zh"):
    nb = nbformat.from_dict(build_chapter(chapter, lang))
    nb.metadata.setdefault("language_info", {"name": "python", "pygments_lexer": "ipython3"})
    return nb, _standing(nb, chapter)


def _forget_in_memory():
    from coursekit.grade import feedback
    for kept in (feedback._MARKDOWN, feedback._CLEANED, feedback._Remembered.kept, feedback._MATHML):
        kept.memory.clear()


def test_a_page_made_from_kept_parts_is_the_page_made_without_them(tmp_path, monkeypatch):
    """The chapter's markdown, maths, sanitised HTML and highlighted code are kept in the
    grading run's folder (COURSE_PAGE_PARTS) by the first page that makes them; a later
    process of the same run reads them. Its page is byte for byte the page made with
    nothing kept, and a part kept by other code (another key's makers) is never read."""
    from coursekit.grade import feedback, parts
    nb, st = _model_page_inputs()
    folder = tmp_path / "page-parts"
    monkeypatch.delenv(parts.ENV, raising=False)           # not a run's page maker: memory only
    _forget_in_memory()
    fresh = feedback.page(nbformat.from_dict(nb), st, "ch01_attention")
    folder.mkdir()
    monkeypatch.setenv(parts.ENV, str(folder))
    _forget_in_memory()
    first = feedback.page(nbformat.from_dict(nb), st, "ch01_attention")
    kept = {p.parent.name for p in folder.rglob("*.html")}
    assert kept == {"markdown", "clean", "highlight", "mathml"}, kept
    _forget_in_memory()                                    # a new process: only the folder remembers
    again = feedback.page(nbformat.from_dict(nb), st, "ch01_attention")
    assert fresh == first == again
    # the folder is read, not made again: a kept part changed there shows on the next page
    cleaned = sorted((folder / "clean").glob("*.html"), key=lambda p: -p.stat().st_size)[0]
    cleaned.write_text(cleaned.read_text(encoding="utf-8") + "<p>KEPT-MARKER</p>", encoding="utf-8")
    _forget_in_memory()
    assert "KEPT-MARKER" in feedback.page(nbformat.from_dict(nb), st, "ch01_attention")
    # ... and the key names the code that makes the part: other makers, other files
    _forget_in_memory()
    monkeypatch.setattr(parts, "_makers", lambda: "other code")
    assert "KEPT-MARKER" not in feedback.page(nbformat.from_dict(nb), st, "ch01_attention")
    _forget_in_memory()


def test_the_page_is_nbconverts_own_page_without_its_second_pass():
    """PageExporter skips HTMLExporter's BeautifulSoup pass over the finished page;
    what that pass would add (a text alternative for an image without one; JupyterLab
    cells' tabindex, which the classic template has none of) is the same: both pages
    parse to the same document."""
    from bs4 import BeautifulSoup
    from nbconvert import HTMLExporter
    from nbformat.v4 import new_code_cell, new_output

    from coursekit.grade import feedback
    nb, st = _model_page_inputs("ch03_multi_head", "en")
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    nb.cells.append(new_code_cell("plot()", outputs=[new_output("display_data", data={"image/png": png})]))
    resources = {"nbgrader": {"notebook": "ch03_multi_head", "score": 1, "max_score": 2, "late_penalty": 0}}
    framed, resources = feedback.frame(nbformat.from_dict(nb), resources, st)
    ours, _ = feedback.PageExporter(config=feedback.template_config()).from_notebook_node(
        nbformat.from_dict(framed), resources=dict(resources))
    theirs, _ = HTMLExporter(config=feedback.template_config()).from_notebook_node(
        nbformat.from_dict(framed), resources=dict(resources))
    assert ours != theirs                                  # not the same text: no second pass ...
    assert str(BeautifulSoup(ours, "html.parser")) == str(BeautifulSoup(theirs, "html.parser"))   # ... same page
    assert 'alt="No description has been provided for this image"' in ours
