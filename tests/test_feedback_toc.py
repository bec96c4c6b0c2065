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
