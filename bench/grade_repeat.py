"""The same class graded again and again: does any notebook wait out a cell's time limit?

    python bench/grade_repeat.py [--chapter ch09_inside_gpt] [--students 6] [--runs 10]

Each run grades a fresh course folder whose students all hand in the model
answer (`make grade`, sandbox on, warm kernels). A notebook that sat idle for
the 120 s cell limit and then went on shows as a slowest notebook near 120 s
while every score stays right. Prints, per run, the wall time, the median and
slowest notebook and how many scored full marks.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harness import grading_course, make_submission, submit  # noqa: E402


def one_run(chapter: str, students: int) -> dict:
    from coursekit.grade import pipeline
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "course"
        rel, src = grading_course(root, chapter)
        for i in range(students):
            submit(root, f"student{i:03d}", chapter, make_submission(rel, src, None))
        t = time.monotonic()
        jobs = pipeline.grade(root, chapter=chapter, sandbox=True, quiet=True, report=False)
        wall = time.monotonic() - t
    per = sorted(j.seconds for j in jobs)
    return {"wall_s": round(wall, 1), "median_notebook_s": round(per[len(per) // 2], 2),
            "slowest_notebook_s": round(per[-1], 1), "full_marks": sum(bool(j.ok) for j in jobs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--chapter", default="ch09_inside_gpt")
    ap.add_argument("--students", type=int, default=6)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args.chapter, args.students))
        print(f"run {i + 1}: {json.dumps(runs[-1])}", flush=True)
    stalled = sum(r["slowest_notebook_s"] >= 100 for r in runs)
    print(f"{args.chapter}, {args.students} students: {stalled} of {len(runs)} runs had a notebook at 100 s or more")


if __name__ == "__main__":
    main()
