"""Feedback steps run by nbgrader generate_feedback (see nbgrader_config.py),
and the page's template (coursekit/templates/course_feedback)."""
from __future__ import annotations

import re
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from grading import protocol

from .mathml import markdown_math

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SEAL = protocol.SEAL_RE
VERDICT = protocol.VERDICT_TOKEN_RE  # for the grader (seal check, class report), not the student


class HideHiddenTestTracebacks(NbGraderPreprocessor):
    """An error in a test cell with hidden tests (a NameError when the answer
    is missing, say) makes IPython print the failing line — hidden test code.
    Keep only the error's name and message there, and drop the grader's seals.
    Markdown cells get their maths as MathML, which browsers draw offline
    (the feedback page's MathJax comes from a CDN)."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = markdown_math(cell.source)
        if cell.cell_type != "code":
            return cell, resources
        hidden = "### BEGIN HIDDEN TESTS" in cell.source or cell.metadata.get("nbgrader", {}).get("grade")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                out["text"] = VERDICT.sub("", SEAL.sub("", out.get("text", "")))
            elif out.get("output_type") == "error" and hidden:
                evalue = VERDICT.sub("", ANSI.sub("", str(out.get("evalue", ""))))
                out["traceback"] = [f"{out.get('ename', 'Error')}: {evalue}"]
        return cell, resources


TEMPLATES = Path(__file__).parent / "templates"
TEMPLATE = "course_feedback"
# what a graded cell is, in the table of contents, by the chapter's language
KINDS = {"zh": {"test": "测试", "answer": "作答（人工批改）", "task": "任务"},
         "en": {"test": "test", "answer": "answer (graded by hand)", "task": "task"}}


def toc_labels(nb) -> dict[str, str]:
    """grade id -> its line in the feedback's table of contents: the exercise's
    heading, what kind of cell it is and its grade id, in the chapter's language."""
    from .export import exercise_titles
    words = KINDS.get(nb.metadata.get("course", {}).get("lang", "zh"), KINDS["en"])
    titles = exercise_titles(nb)
    labels = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id")
        if gid not in titles:
            continue
        kind = "task" if meta.get("task") else "answer" if meta.get("solution") else "test"
        title = titles[gid] or gid
        labels[gid] = f"{title} · {words[kind]} ({gid})"
    return labels


class NameExercises(NbGraderPreprocessor):
    """Give every graded cell its table-of-contents label (cell.metadata.course_toc)."""

    def preprocess(self, nb, resources):
        labels = toc_labels(nb)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if gid in labels:
                cell.metadata["course_toc"] = labels[gid]
        return nb, resources


def nbgrader_templates() -> Path:
    import nbgrader
    return Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"


def use_course_template(converter) -> None:
    """Make ``converter`` (an nbgrader GenerateFeedback, after its __init__)
    write its pages with the course's template: ours is found first, and
    nbgrader's feedback template, which it extends, is found by its folder."""
    from traitlets.config import Config
    c = Config()
    c.HTMLExporter.template_name = TEMPLATE
    c.HTMLExporter.extra_template_basedirs = [str(TEMPLATES), str(nbgrader_templates())]
    c.HTMLExporter.extra_template_paths = [*converter.config.HTMLExporter.get("extra_template_paths", []),
                                           str(nbgrader_templates())]
    converter.update_config(c)
    names = [p if isinstance(p, str) else f"{p.__module__}.{p.__name__}" for p in converter.preprocessors]
    if f"{__name__}.NameExercises" not in names:   # a course folder whose nbgrader_config.py predates it
        converter.preprocessors = [NameExercises, *converter.preprocessors]
