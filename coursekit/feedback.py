"""Feedback steps run by nbgrader generate_feedback (see nbgrader_config.py)."""
from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SEAL = re.compile(r"\s?⟦seal:[a-z0-9_]+:[0-9a-f]{32}⟧")


class HideHiddenTestTracebacks(NbGraderPreprocessor):
    """An error in a test cell with hidden tests (a NameError when the answer
    is missing, say) makes IPython print the failing line — hidden test code.
    Keep only the error's name and message there, and drop the grader's seals."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        hidden = "### BEGIN HIDDEN TESTS" in cell.source or cell.metadata.get("nbgrader", {}).get("grade")
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                out["text"] = SEAL.sub("", out.get("text", ""))
            elif out.get("output_type") == "error" and hidden:
                evalue = ANSI.sub("", str(out.get("evalue", "")))
                out["traceback"] = [f"{out.get('ename', 'Error')}: {evalue}"]
        return cell, resources
