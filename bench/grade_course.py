"""Grading a whole course: every chapter, a class of students, `make grade`
(sandbox on), then a rerun after one late submission.

    python bench/grade_course.py [--students 2] [--rerun] [--out bench/results]

Each student hands in every chapter; what each cell holds comes from the
chapter's known-bug catalogue (correct answers, wrong ones, the untouched
release), chosen by student and chapter so that every run builds the same
class. Prints the wall time, seconds per student and where the time went.

With --rerun: after the full run one student's submission of one chapter is
replaced by another answer and `make grade` runs again (timed: it grades only
what changed). A second course folder then grades the final class from
scratch, and the two must agree: the same scores and comments in the
gradebook, the same feedback files and the same CSV files.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import importlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harness import grading_course, make_submission, submit  # noqa: E402

from coursekit.author.build import chapters  # noqa: E402


def answer_pool(chapter: str) -> list[dict | None]:
    """None (the untouched release) and every catalogued answer, correct and wrong."""
    cat = importlib.import_module(f"catalogue.{chapter}")
    return [None] + [v.replace for v in cat.CORRECT] + [v.replace for v in cat.BUGS]


def make_course(root: Path, students: int, pick=None) -> dict:
    """A course folder with every chapter and ``students`` submissions of each;
    returns what each student handed in, as (chapter, student) -> index in the pool."""
    handed = {}
    for ch in chapters():
        rel, src = grading_course(root, ch)
        pool = answer_pool(ch)
        for i in range(students):
            name = f"student{i:03d}"
            k = (pick or {}).get((ch, name), (7 * i + len(ch)) % len(pool))
            submit(root, name, ch, make_submission(rel, src, pool[k]))
            handed[(ch, name)] = k
    return handed


def grade(root: Path, **kw) -> tuple[float, dict, list]:
    from coursekit.grade import account, pipeline
    t = time.monotonic()
    os.environ[account.ENV] = str(root.parent / f"account-{root.name}")
    try:
        jobs = pipeline.grade(root, sandbox=True, quiet=True, report=True, **kw)
    finally:
        os.environ.pop(account.ENV)
    wall = time.monotonic() - t
    return wall, json.loads((root / pipeline.STATE / "timings.json").read_text()), jobs


def chapter_account(root: Path, jobs: list, phases: dict) -> dict:
    """Per chapter, the mean over its notebooks of where one notebook's grading went: the
    kernel's cells (lecture, answer, test), the kernel's start and stop, each of nbgrader's
    preprocessors, nbgrader's app around them, the fork; and, shared out over the class's
    notebooks, the steps after autograde (seal check, figures, feedback)."""
    from coursekit.grade import account
    folder = root.parent / f"account-{root.name}"
    rows: dict[str, list[dict]] = {}
    for j in jobs:
        graded = root / "autograded" / j.student / j.chapter / f"{j.chapter}.ipynb"
        if j.reused or not graded.exists():
            continue
        rows.setdefault(j.chapter, []).append(
            account.notebook_account(graded, folder / f"{j.chapter}__{j.student}.json", j.seconds))
    n = max(1, sum(len(v) for v in rows.values()))
    after = {f"after_{k.replace(' ', '_')}_s": round(phases.get(k, 0.0) / n, 3)
             for k in ("seal check", "figures", "feedback")}
    return {ch: {**account.summed(v), **after} for ch, v in sorted(rows.items())}


def print_account(table: dict) -> None:
    cols = [("autograde_s", "autograde"), ("cells_lecture_s", "lecture"), ("cells_answer_s", "answer"),
            ("cells_test_s", "test"), ("kernel_start_and_stop_s", "kernel±"), ("nbgrader_app_s", "app"),
            ("fork_and_wait_s", "fork")]
    print(f"{'chapter':<22}" + "".join(f"{h:>10}" for _, h in cols) + "  preprocessors (s)")
    for ch, row in table.items():
        pre = ", ".join(f"{k[4:-2]} {v:.2f}" for k, v in sorted(row.items(), key=lambda kv: -kv[1])
                        if k.startswith("pre_") and v >= 0.01)
        kernel = ", ".join(f"{k[7:-2]} {v:.2f}" for k, v in row.items() if k.startswith("kernel_") and
                           k != "kernel_start_and_stop_s")
        print(f"{ch:<22}" + "".join(f"{row.get(k, 0.0):>10.2f}" for k, _ in cols) + f"  {pre}  [{kernel}]")


TABLE_COLUMNS = ["autograde", "lecture", "answer", "test", "kernel start", "kernel stop", "between cells",
                 "preprocessors", "gradebook", "nbgrader", "feedback"]


def account_row(row: dict) -> list[float]:
    """A chapter's row of the README's table, in seconds per notebook: the whole autograde, then its parts,
    which add up to it: the kernel's cells (lecture, answer, test); outside them, the kernel's start and
    stop, the rest of nbgrader's Execute (the messages between cells), nbgrader's other preprocessors,
    its gradebook writes (SaveAutoGrades), nbgrader's app and the fork around them. Last, after autograde
    and not part of it, the feedback page with its figures, shared out per notebook."""
    pre = sum(v for k, v in row.items() if k.startswith("pre_") and k != "pre_SaveAutoGrades_s")
    start = row.get("kernel_start_new_kernel_s", 0.0) + row.get("kernel_start_new_kernel_client_s", 0.0)
    stop = row.get("kernel_cleanup_kernel_s", 0.0)
    return [row.get("autograde_s", 0.0), row.get("cells_lecture_s", 0.0), row.get("cells_answer_s", 0.0),
            row.get("cells_test_s", 0.0), start, stop, max(0.0, row.get("kernel_start_and_stop_s", 0.0) - start - stop),
            pre, row.get("pre_SaveAutoGrades_s", 0.0), row.get("nbgrader_app_s", 0.0) + row.get("fork_and_wait_s", 0.0),
            row.get("after_feedback_s", 0.0) + row.get("after_figures_s", 0.0) + row.get("after_seal_check_s", 0.0)]


def account_table(table: dict) -> str:
    """The per-notebook account by chapter as a Markdown table (the README shows it)."""
    lines = ["| chapter | " + " | ".join(TABLE_COLUMNS) + " |", "|---" + "|---:" * len(TABLE_COLUMNS) + "|"]
    for ch, row in table.items():
        lines.append(f"| {ch[:4]} | " + " | ".join(f"{v:.2f}" for v in account_row(row)) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------ what two runs must agree on

STAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?")
# what differs between any two runs, rerun or not: a run's clock, the ids nbconvert gives widget
# views and models, object addresses, and the wall-clock measurements the chapters print (times,
# throughputs and the ratios and slopes fitted to them). Decimal numbers are blanked for that
# reason; the scores themselves are compared exactly, in the gradebook and the CSV files.
VOLATILE = [STAMP, re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
            re.compile(r"\b[0-9a-f]{32}\b"), re.compile(r"0x[0-9a-f]{6,}"),
            re.compile(r"[\d,]+\s*(token/s|tokens/s|token/秒)"), re.compile(r"\d+\.\d+(e-?\d+)?")]


def stable(text: str) -> str:
    """The text a page shows, with what differs between any two runs blanked. Tags go too:
    how a cell's printed lines were cut into output blocks depends on when they arrived."""
    text = re.sub(r"<[^>]+>", " ", text)
    for pattern in VOLATILE:
        text = pattern.sub("~", text)
    return " ".join(text.split())


def gradebook_rows(root: Path) -> list[tuple]:
    from nbgrader.api import Gradebook
    rows = []
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for a in gb.assignments:
            for sub in gb.assignment_submissions(a.name):
                for nb in sub.notebooks:
                    rows += [(a.name, sub.student_id, g.name, g.auto_score, g.manual_score, g.needs_manual_grade)
                             for g in nb.grades]
                    rows += [(a.name, sub.student_id, c.name, c.auto_comment, c.manual_comment) for c in nb.comments]
    return sorted(rows, key=repr)


def digest_tree(folder: Path) -> dict[str, str]:
    """File -> hash of what it shows, with what differs between any two runs blanked (stable)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(folder))] = hashlib.sha256(stable(p.read_text(errors="replace"))
                                                             .encode()).hexdigest()[:16]
    return out


def csv_rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [[STAMP.sub("T", v) for v in row] for row in csv.reader(f)]
    return rows[:1] + sorted(rows[1:])   # the same rows; their order follows the gradebook's


def outputs(root: Path) -> dict:
    return {"gradebook": gradebook_rows(root), "feedback": digest_tree(root / "feedback"),
            "grades.csv": csv_rows(root / "grades.csv"),
            "grades_by_exercise.csv": csv_rows(root / "grades_by_exercise.csv")}


def differences(a: dict, b: dict) -> list[str]:
    diffs = []
    for key in a:
        if a[key] != b[key]:
            if isinstance(a[key], dict):
                keys = sorted(k for k in set(a[key]) | set(b[key]) if a[key].get(k) != b[key].get(k))
                diffs.append(f"{key}: {keys[:5]}")
            else:
                only = [r for r in a[key] if r not in b[key]][:3] + [r for r in b[key] if r not in a[key]][:3]
                diffs.append(f"{key}: {only}")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--students", type=int, default=2)
    ap.add_argument("--rerun", action="store_true", help="then one late submission, a rerun, and a check "
                                                         "that the rerun equals a full run")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    n = args.students
    result = {"students": n, "chapters": len(chapters()), "cores": os.cpu_count(),
              "load_avg_1m_before": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory() as tmp:
        first = Path(tmp) / "course"
        handed = make_course(first, n)
        wall, phases, jobs = grade(first)
        result.update(full_s=round(wall, 1), seconds_per_student=round(wall / n, 1), full_phases_s=phases,
                      notebooks=len(jobs),
                      autograde_s_by_notebook={f"{j.chapter}/{j.student}": round(j.seconds, 1) for j in jobs},
                      account_by_chapter=chapter_account(first, jobs, phases))
        print_account(result["account_by_chapter"])
        print(account_table(result["account_by_chapter"]))
        print(f"full run: {len(jobs)} notebooks in {wall:.1f} s ({wall / n:.1f} s per student)", flush=True)
        if args.rerun:
            ch, who = "ch03_multi_head", f"student{n // 2:03d}"
            pool = answer_pool(ch)
            late = (handed[(ch, who)] + 1) % len(pool)
            rel, src = grading_course(Path(tmp) / "scratch", ch)
            time.sleep(1.1)   # a later file, as a late submission is
            submit(first, who, ch, make_submission(rel, src, pool[late]))
            wall2, phases2, jobs2 = grade(first)
            graded = [j for j in jobs2 if not j.reused]
            result.update(rerun_s=round(wall2, 1), rerun_phases_s=phases2, rerun_graded=len(graded),
                          rerun_reused=len(jobs2) - len(graded), rerun_over_full=round(wall2 / wall, 3))
            print(f"rerun after one late submission: {wall2:.1f} s, graded {len(graded)}, "
                  f"reused {len(jobs2) - len(graded)}", flush=True)
            second = Path(tmp) / "fresh"
            make_course(second, n, pick={**handed, (ch, who): late})
            wall3, _, _ = grade(second)
            diffs = differences(outputs(first), outputs(second))
            result.update(fresh_full_s=round(wall3, 1), rerun_equals_full_run=not diffs, differences=diffs)
            print("the rerun's outputs equal a full run's" if not diffs else f"DIFFERENT: {diffs}", flush=True)
    result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"grade_course_{n}students{'_rerun' if args.rerun else ''}.json"
    (out / name).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
