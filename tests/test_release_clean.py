"""What students receive holds no solution, hidden test or model answer."""
from __future__ import annotations

import json

import pytest
from harness import ROOT

from coursekit.author import build

FORBIDDEN_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS",
                     "grading.", "参考答案", "Model answer")


@pytest.mark.parametrize("chapter", build.chapters())
def test_release_has_no_solutions_or_hidden_tests(chapter):
    release_nb = json.loads((ROOT / "release" / chapter / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    source_nb = json.loads((ROOT / "source" / chapter / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in release_nb["cells"])
    for marker in FORBIDDEN_MARKERS:
        assert marker not in text, f"release/{chapter} contains {marker!r}"
    # every line between solution markers in the source is absent from the release
    secret_lines = set()
    for cell in source_nb["cells"]:
        src = "".join(cell["source"])
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "markdown" and meta.get("solution"):
            secret_lines |= {l.strip() for l in src.splitlines() if len(l.strip()) > 12}
        inside = False
        for line in src.splitlines():
            if "### BEGIN SOLUTION" in line or "### BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "### END SOLUTION" in line or "### END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) > 12:
                secret_lines.add(line.strip())
    assert secret_lines, "the source has no solutions to hide"
    release_lines = {l.strip() for l in text.splitlines()}
    leaked = secret_lines & release_lines
    assert not leaked, f"release/{chapter} leaks solution lines: {sorted(leaked)[:3]}"
    assert not any(c.get("outputs") for c in release_nb["cells"] if c["cell_type"] == "code"), "release has outputs"
