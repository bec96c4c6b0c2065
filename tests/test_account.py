"""The per-notebook account (coursekit.grade.account): a graded notebook's
time in the kernel, split by the kind of cell, read from what nbclient records."""
from __future__ import annotations

import json

import nbformat

from coursekit.grade import account


def _cell(kind: str, start: str, end: str):
    cell = nbformat.v4.new_code_cell("pass")
    if kind == "answer":
        cell.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "a"}
    elif kind == "test":
        cell.metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "t", "points": 1}
    cell.metadata["execution"] = {"iopub.execute_input": start, "shell.execute_reply": end}
    return cell


def test_cell_seconds_by_kind_and_the_rest_of_the_account(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [_cell("lecture", "2026-12-04T10:00:00.000000Z", "2026-12-04T10:00:01.500000Z"),
                _cell("answer", "2026-12-04T10:00:02.000000Z", "2026-12-04T10:00:02.250000Z"),
                _cell("test", "2026-12-04T10:00:03.000000Z", "2026-12-04T10:00:05.000000Z"),
                nbformat.v4.new_markdown_cell("text"),
                nbformat.v4.new_code_cell("never ran")]
    assert account.cell_seconds(nb) == {"lecture": 1.5, "answer": 0.25, "test": 2.0}
    path = tmp_path / "graded.ipynb"
    nbformat.write(nb, path)
    timings = tmp_path / "t.json"
    timings.write_text(json.dumps({"nbgrader_process_s": 6.0, "preprocessors_s": {
        "Execute": 4.5, "SaveAutoGrades": 0.5, "kernel:start_new_kernel_client": 0.5}}))
    row = account.notebook_account(path, timings, autograde_s=7.0)
    assert row["kernel_start_and_stop_s"] == 4.5 - 3.75
    assert row["pre_SaveAutoGrades_s"] == 0.5 and "pre_Execute_s" not in row
    assert row["kernel_start_new_kernel_client_s"] == 0.5
    assert row["nbgrader_app_s"] == 6.0 - 5.0 and row["fork_and_wait_s"] == 1.0
    assert account.summed([row, {**row, "autograde_s": 9.0}])["autograde_s"] == 8.0
