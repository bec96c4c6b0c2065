"""One notebook graded with its feedback: `make grade CHAPTER=… STUDENT=one` against stock
nbgrader's `autograde` plus `generate_feedback` for the same notebook, side by side.

    python bench/grade_one.py [--chapter ch01_attention] [--class-size 12] [--runs 5] [--out bench/results]

Two situations, each measured ``--runs`` times, the course pipeline and stock nbgrader one
after the other in each round (so that both see the same load):

cold     a course folder where nothing was graded yet, one submission in it. The course:
         `python -m coursekit.cli grade --chapter C --student one` (what `make grade` runs).
         Stock: `nbgrader generate_assignment C` (a new gradebook needs the assignment),
         `nbgrader autograde C --student one`, `nbgrader generate_feedback C --student one`.
graded   a course folder whose class (``--class-size`` notebooks) was graded once; the
         student hands in a new version and only that notebook is graded again. The course:
         the same command, within COURSE_KEEP_WARM of the run before (it forks from the kernel
         factory and fork server that run kept: coursekit.grade.kept); stock: `nbgrader
         autograde` and `nbgrader generate_feedback` of that student.

Stock nbgrader runs as nbgrader's own command line, without the course's sandbox, warm
kernels or report; the course's run includes the sandbox, the seal check, grades.csv and
the class report. Each side's wall time is the command's, start to exit. Printed and kept
in ``bench/results/grade_one.json`` with the sitting's conditions (the commit, the load
before and after each run, the cores) and, for the course's runs, where its time went
(``.grading/timings.json``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from harness import grading_course, make_submission, submit  # noqa: E402

from coursekit.base.nbgrader_run import env_with_bin  # noqa: E402
from coursekit.grade import kept  # noqa: E402

STUDENT = "one"


def commit() -> str:
    def git(*args) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{head}{' + uncommitted changes' if dirty else ''}"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def versions(chapter: str) -> list:
    """Two submissions of one student (a wrong answer, then the corrected one) and a class."""
    cat = importlib.import_module(f"catalogue.{chapter}")
    return [cat.BUGS[0].replace, None] + [v.replace for v in cat.BUGS[1:]] + [v.replace for v in cat.CORRECT]


def make_course(root: Path, chapter: str, class_size: int, first) -> None:
    rel, src = grading_course(root, chapter)
    pool = versions(chapter)
    submit(root, STUDENT, chapter, make_submission(rel, src, first))
    for i in range(class_size - 1):
        submit(root, f"student{i:03d}", chapter, make_submission(rel, src, pool[(i + 2) % len(pool)]))


def resubmit(root: Path, chapter: str, replace) -> None:
    import nbformat
    rel = nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    src = nbformat.read(root / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    submit(root, STUDENT, chapter, make_submission(rel, src, replace))


def run(cmd: list[str], root: Path, log: Path) -> float:
    t = time.monotonic()
    with open(log, "w") as out:
        rc = subprocess.run(cmd, cwd=root, env=env_with_bin(), stdout=out, stderr=subprocess.STDOUT).returncode
    took = time.monotonic() - t
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({rc}); see {log}:\n{log.read_text(errors='replace')[-3000:]}")
    return took


def course_grade(root: Path, chapter: str, log: Path) -> tuple[float, dict]:
    took = run([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(root), "--chapter", chapter,
                "--student", STUDENT], root, log)
    return took, json.loads((root / ".grading" / "timings.json").read_text())


def stock_grade(root: Path, chapter: str, log: Path, assignment: bool) -> float:
    nbg = [sys.executable, "-m", "nbgrader"]
    steps = ([[*nbg, "generate_assignment", chapter, "--force", "--log-level=ERROR"]] if assignment else []) + [
        [*nbg, "autograde", chapter, f"--student={STUDENT}", "--force", "--log-level=ERROR"],
        [*nbg, "generate_feedback", chapter, f"--student={STUDENT}", "--force", "--log-level=ERROR"]]
    return sum(run(cmd, root, log) for cmd in steps)


def summary(values: list[float]) -> dict:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2),
            "max": round(max(values), 2), "runs": [round(v, 2) for v in values]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chapter", default="ch01_attention")
    ap.add_argument("--class-size", type=int, default=12)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    ch = args.chapter
    pool = versions(ch)
    result = {"chapter": ch, "class_size": args.class_size, "runs": args.runs, "commit": commit(),
              "cores": os.cpu_count(), "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
              "rounds": []}
    with tempfile.TemporaryDirectory(prefix="grade-one-") as tmp:
        tmp = Path(tmp)
        # a class graded once, by the course (its copy for stock nbgrader graded by stock nbgrader)
        course_base, stock_base = tmp / "course-graded", tmp / "stock-graded"
        make_course(course_base, ch, args.class_size, pool[0])
        shutil.copytree(course_base, stock_base)
        subprocess.run([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(course_base), "--chapter", ch],
                       cwd=course_base, env=env_with_bin(), check=True, capture_output=True)
        for cmd in (["generate_assignment", ch, "--force"], ["autograde", ch, "--force"],
                    ["generate_feedback", ch, "--force"]):
            subprocess.run([sys.executable, "-m", "nbgrader", *cmd, "--log-level=ERROR"], cwd=stock_base,
                           env=env_with_bin(), check=True, capture_output=True)
        for i in range(args.runs):
            rnd: dict = {"round": i + 1}
            # cold: a new course folder, one submission, nothing graded yet
            for side in ("course", "stock"):
                root = tmp / f"cold-{side}-{i}"
                make_course(root, ch, 1, pool[i % 2])
                before = load()
                if side == "course":
                    took, phases = course_grade(root, ch, tmp / f"cold-{side}-{i}.log")
                    rnd["cold_course"] = {"s": round(took, 2), "phases_s": phases}
                else:
                    took = stock_grade(root, ch, tmp / f"cold-{side}-{i}.log", assignment=True)
                    rnd["cold_stock"] = {"s": round(took, 2)}
                rnd[f"cold_{side}"]["load_1m"] = [before, load()]
                kept.stop(root)          # what the course's run kept for the next run of that folder
                shutil.rmtree(root, ignore_errors=True)
            # graded: the student hands in a new version; only that notebook is graded again
            for side, base in (("course", course_base), ("stock", stock_base)):
                resubmit(base, ch, pool[(i + 1) % 2])
                before = load()
                if side == "course":
                    took, phases = course_grade(base, ch, tmp / f"graded-{side}-{i}.log")
                    rnd["graded_course"] = {"s": round(took, 2), "phases_s": phases}
                else:
                    took = stock_grade(base, ch, tmp / f"graded-{side}-{i}.log", assignment=False)
                    rnd["graded_stock"] = {"s": round(took, 2)}
                rnd[f"graded_{side}"]["load_1m"] = [before, load()]
            result["rounds"].append(rnd)
            print(json.dumps({k: v["s"] if isinstance(v, dict) else v for k, v in rnd.items()}), flush=True)
        kept.stop(course_base)
    for case in ("cold", "graded"):
        course = [r[f"{case}_course"]["s"] for r in result["rounds"]]
        stock = [r[f"{case}_stock"]["s"] for r in result["rounds"]]
        ratios = [c / s for c, s in zip(course, stock)]
        result[case] = {"course_s": summary(course), "stock_s": summary(stock),
                        "course_over_stock": summary(ratios)}
    result["finished_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    result["note"] = ("course = python -m coursekit.cli grade --chapter C --student one (make grade): sandbox, "
                      "seal check, feedback page, grades.csv, LMS files, class report; stock = nbgrader "
                      "[generate_assignment (cold only),] autograde and generate_feedback of the same notebook, "
                      "unsandboxed; each round runs both sides back to back; load_1m: the 1-minute load "
                      "average before and after each run")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade_one.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("commit", "cold", "graded")}, indent=1))


if __name__ == "__main__":
    main()
