"""Feedback steps run by nbgrader generate_feedback (see nbgrader_config.py)."""
from __future__ import annotations

import re

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
