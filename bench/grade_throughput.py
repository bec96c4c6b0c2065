"""Throughput of grading a class: stock `nbgrader autograde` against the
course pipeline (`make grade`, sandbox on), on the same synthetic class.

    python bench/grade_throughput.py [--students 12] [--chapter ch01_attention] [--cold] [--rounds 3]
                                     [--out bench/results]

The class mixes correct, buggy and hostile submissions (from the known-bug
catalogue and the hostile suite). Every run starts from a fresh copy of the
course. ``--rounds`` pairs (stock, then the course), back to back; the ratio
reported is the median round's, with every round's kept. Prints wall times, the
ratio, and where the pipeline's time goes.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


from harness import grading_course, make_submission, submit  # noqa: E402

from coursekit.base.nbgrader_run import env_with_bin  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from grade_one import commit  # noqa: E402  (the commit measured, and whether the tree differed from it)


def make_class(root: Path, chapter: str, n: int) -> list[str]:
    rel, src = grading_course(root, chapter)
    cat = importlib.import_module(f"catalogue.{chapter}")
    pool = [None] + [v.replace for v in cat.BUGS] + [v.replace for v in cat.CORRECT]
    hostile = {"softmax": "import torch\ntorch.allclose = lambda *a, **k: True\ndef softmax(x, dim=-1):\n    return x\n"}
    names = []
    for i in range(n):
        rep = hostile if i % 6 == 5 else pool[i % len(pool)]
        name = f"student{i:03d}"
        submit(root, name, chapter, make_submission(rel, src, rep))
        names.append(name)
    return names


def stock(root: Path, chapter: str) -> float:
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter, "--force", "--log-level=ERROR"],
                   cwd=root, env=env_with_bin(), check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "nbgrader", "autograde", chapter, "--force", "--log-level=ERROR"],
                   cwd=root, env=env_with_bin(), check=True, capture_output=True)
    return time.monotonic() - t


def pipeline(root: Path, chapter: str, warm: bool = True) -> tuple[float, list, dict]:
    from coursekit.grade import kept
    from coursekit.grade import pipeline as pipeline_mod
    t = time.monotonic()
    try:
        jobs = pipeline_mod.grade(root, chapter=chapter, sandbox=True, quiet=True, report=True, warm=warm)
        wall = time.monotonic() - t
    finally:   # what the run kept for the next run of this folder, which goes with the bench's own: not
        kept.stop(root)   # left to start (the fork server imports nbgrader) beside the next measurement
    phases = json.loads((root / pipeline_mod.STATE / "timings.json").read_text())
    return wall, jobs, phases


def one_round(tmp: Path, args, runs: list[str]) -> dict:
    """Each of ``runs`` once, one after the other, each on a fresh copy of the same class."""
    result = {"load_avg_1m_before": round(os.getloadavg()[0], 2)}
    for run in runs:
        root = tmp / run
        root.mkdir()
        make_class(root, args.chapter, args.students)
        if run == "stock":
            result["stock_nbgrader_autograde_s"] = round(stock(root, args.chapter), 1)
            continue
        wall, jobs, phases = pipeline(root, args.chapter, warm=(run == "pipeline"))
        per = sorted(j.seconds for j in jobs)
        result[f"{run}_s"] = round(wall, 1)
        result[f"{run}_phases_s"] = phases
        result[f"{run}_per_notebook_s"] = {"min": round(per[0], 1), "median": round(per[len(per) // 2], 1),
                                           "max": round(per[-1], 1)}
        if run == "pipeline":
            Path(args.out).mkdir(parents=True, exist_ok=True)
            shutil.copy(root / "reports" / "class_report.html", Path(args.out) / "class_report_synthetic.html")
    result["speedup"] = round(result["stock_nbgrader_autograde_s"] / result["pipeline_s"], 2)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--students", type=int, default=12)
    ap.add_argument("--chapter", default="ch01_attention")
    ap.add_argument("--cold", action="store_true", help="also grade with kernels started one by one (no zygote)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of stock then the course, each pair back to back (this machine's speed moves "
                         "by up to 2x within an hour: one pair's ratio is no firmer than that)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    runs = ["stock", "pipeline"] + (["pipeline_cold"] if args.cold else [])
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    rounds = []
    for i in range(max(1, args.rounds)):
        with tempfile.TemporaryDirectory() as tmp:
            rounds.append({"round": i + 1, **one_round(Path(tmp), args, runs)})
        print(f"round {i + 1}: stock {rounds[-1]['stock_nbgrader_autograde_s']} s, course "
              f"{rounds[-1]['pipeline_s']} s: {rounds[-1]['speedup']}x", file=sys.stderr, flush=True)
    # the round whose ratio is the median stands for the sitting (its own numbers, none mixed)
    middle = sorted(rounds, key=lambda r: r["speedup"])[len(rounds) // 2]
    result = {"chapter": args.chapter, "students": args.students, "cores": os.cpu_count(), "commit": commit(),
              "started_utc": started, **{k: v for k, v in middle.items() if k != "round"},
              "median_round": middle["round"], "speedups": [r["speedup"] for r in rounds],
              "load_avg_1m_after": round(os.getloadavg()[0], 2), "rounds": rounds}
    result["note"] = ("stock = nbgrader generate_assignment + autograde, sequential, unsandboxed, a new kernel per "
                      "notebook; pipeline = make grade: sandboxed, warm kernels forked from one zygote, nbgrader "
                      "forked from a preloaded server, workers over the cores, plus seal check, feedback, "
                      "grades.csv and class report (phases_s: where its time went); each round grades fresh "
                      "copies of the same class, stock first; the top-level numbers are the median round's")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade_throughput.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=1))


if __name__ == "__main__":
    main()
