"""Imported once by the grader's fork servers (coursekit.grade.forkserver.MODULES, before
their first command): one small feedback page is made here, so that each process forked to
make pages starts with what the first page of a process pays for already done: nbconvert's
templates compiled, the markdown, maths and HTML-cleaning parsers built, the Python lexer
loaded. It saves about 0.15 s of CPU in each page-making process on a 2-core machine (a class
run starts four or more), for about 0.15 s once here.

The page is made from a notebook written below (no student's, no chapter's): what it leaves
in this process's caches is keyed by its own text and reaches no real page. Nothing it does
may stop the fork server: a failure costs only the time it would have saved.
"""
from __future__ import annotations


def _notebook():
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
    nb = new_notebook(cells=[
        new_markdown_cell("# Warm-up\n\nA formula, $q^\\top k / \\sqrt{d_k}$, **bold** and `code`.\n\n"
                          "$$\\mathrm{softmax}(x)_i = \\frac{e^{x_i}}{\\sum_j e^{x_j}}$$"),
        new_code_cell("import math\nprint(math.sqrt(2))", execution_count=1,
                      outputs=[new_output("stream", name="stdout", text="1.4142135623730951\n")]),
    ])
    nb.cells[1].metadata["nbgrader"] = {"grade": True, "grade_id": "warm", "points": 1, "solution": False,
                                        "locked": True, "schema_version": 3}
    nb.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    return nb


def warm() -> bool:
    """Make the warm-up page; whether it was made."""
    try:
        from .feedback import page
        page(_notebook())
        return True
    except Exception:  # noqa: BLE001 (a warm-up that fails costs only time)
        return False


warm()
