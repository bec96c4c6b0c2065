"""Where the notebook runs: the one test for "are we under nbgrader?"."""
from __future__ import annotations

import os


def under_nbgrader() -> bool:
    """True while nbgrader validates or autogrades (it sets NBGRADER_EXECUTION):
    demos stay static and small, and training shrinks to a few steps."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


# The output metadata that marks a figure the grader draws (helpers.plots.show_static, coursekit.grade.figures)
FIGURE_MARK = "course_figure"
