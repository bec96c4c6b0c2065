"""The per-notebook account (coursekit.grade.account): a graded notebook's
time in the kernel, split by the kind of cell, read from what nbclient records."""
from __future__ import annotations

import json

import nbformat
import pytest

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


# ------------------------------------------------------------------ the benchmarks' table is the kept record's

RECORD = "grade_course_4students_sitting42c.json"   # bench/grade_course.py --students 4, the sitting docs/benchmarks.md quotes


def _bench_grade_course():
    import importlib.util
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("bench_grade_course", root / "bench" / "grade_course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return root, module


def test_the_benchmarks_show_the_per_notebook_account_of_the_kept_record():
    """docs/benchmarks.md and its Chinese twin show the per-notebook account table as
    bench/grade_course.py writes it from the kept record, once each; the README, the
    front door, shows no measured table."""
    root, bench = _bench_grade_course()
    record = json.loads((root / "bench" / "results" / RECORD).read_text())
    table = bench.account_table(record["account_by_chapter"])
    for guide in ("benchmarks.md", "benchmarks.zh.md"):
        text = (root / "docs" / guide).read_text(encoding="utf-8")
        assert text.count(table) == 1, f"docs/{guide}: the per-notebook table is not the kept record's"
        assert RECORD in text, f"docs/{guide} does not name the record its table comes from"
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert table.splitlines()[0] not in readme, "the README shows the measured per-notebook table"
    assert len(record["account_by_chapter"]) == record["chapters"] == 12 and record["students"] == 4
    for chapter, row in record["account_by_chapter"].items():
        parts = bench.account_row(row)
        # the parts of a notebook's autograde add up to it (the feedback column comes after it)
        assert abs(sum(parts[1:-1]) - parts[0]) < 0.02, (chapter, parts)


def test_a_chapters_row_puts_each_measured_time_in_its_column():
    _, bench = _bench_grade_course()
    row = {"autograde_s": 5.0, "cells_lecture_s": 1.0, "cells_answer_s": 0.25, "cells_test_s": 0.5,
           "kernel_start_new_kernel_s": 0.05, "kernel_start_new_kernel_client_s": 0.25, "kernel_cleanup_kernel_s": 0.1,
           "kernel_start_and_stop_s": 0.6, "pre_SaveAutoGrades_s": 0.3, "pre_CheckCellMetadata_s": 0.2,
           "pre_OverwriteCells_s": 0.1, "nbgrader_app_s": 1.4, "fork_and_wait_s": 0.3, "after_feedback_s": 0.4,
           "after_figures_s": 0.1, "after_seal_check_s": 0.0}
    assert bench.account_row(row) == pytest.approx([5.0, 1.0, 0.25, 0.5, 0.3, 0.1, 0.2, 0.3, 0.3, 1.7, 0.5])
    assert bench.account_table({"ch01_attention": row}).splitlines()[2].startswith("| ch01 | 5.00 | 1.00 |")
