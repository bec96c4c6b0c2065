"""Throughput of grading a class: stock `nbgrader autograde` against the
course pipeline (`make grade`, sandbox on), on the same synthetic class.

    python bench/grade_throughput.py [--students 12] [--chapter ch01_attention] [--out bench/results]

The class mixes correct, buggy and hostile submissions (from the known-bug
catalogue and the hostile suite). Both runs start from a fresh copy of the
course. Prints wall times, the ratio, and where the pipeline's time goes.
"""
from __future__ import annotations

import argparse
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import nbformat  # noqa: E402

from coursekit.nbgrader_run import env_with_bin  # noqa: E402
from harness import make_submission  # noqa: E402


def make_class(root: Path, chapter: str, n: int) -> list[str]:
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "source" / chapter, root / "source" / chapter)
    shutil.copytree(ROOT / "release" / chapter, root / "release" / chapter)
    rel = nbformat.read(root / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    src = nbformat.read(root / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    cat = importlib.import_module(f"catalogue.{chapter}")
    pool = [None] + [v.replace for v in cat.BUGS] + [v.replace for v in cat.CORRECT]
    hostile = {"softmax": "import torch\ntorch.allclose = lambda *a, **k: True\ndef softmax(x, dim=-1):\n    return x\n"}
    names = []
    for i in range(n):
        rep = hostile if i % 6 == 5 else pool[i % len(pool)]
        name = f"student{i:03d}"
        d = root / "submitted" / name / chapter
        d.mkdir(parents=True)
        nbformat.write(make_submission(rel, src, rep), d / f"{chapter}.ipynb")
        names.append(name)
    return names


def stock(root: Path, chapter: str) -> float:
    t = time.monotonic()
    subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter, "--force", "--log-level=ERROR"],
                   cwd=root, env=env_with_bin(), check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "nbgrader", "autograde", chapter, "--force", "--log-level=ERROR"],
                   cwd=root, env=env_with_bin(), check=True, capture_output=True)
    return time.monotonic() - t


def pipeline(root: Path, chapter: str) -> tuple[float, list]:
    from coursekit import grade
    t = time.monotonic()
    jobs = grade.grade(root, chapter=chapter, sandbox=True, quiet=True, report=True)
    return time.monotonic() - t, jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--students", type=int, default=12)
    ap.add_argument("--chapter", default="ch01_attention")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "stock", Path(tmp) / "pipeline"
        a.mkdir()
        b.mkdir()
        make_class(a, args.chapter, args.students)
        make_class(b, args.chapter, args.students)
        t_stock = stock(a, args.chapter)
        t_pipe, jobs = pipeline(b, args.chapter)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        shutil.copy(b / "reports" / "class_report.html", Path(args.out) / "class_report_synthetic.html")
    per = sorted(j.seconds for j in jobs)
    result = {
        "chapter": args.chapter, "students": args.students,
        "stock_nbgrader_autograde_s": round(t_stock, 1), "pipeline_s": round(t_pipe, 1),
        "speedup": round(t_stock / t_pipe, 2),
        "pipeline_per_notebook_s": {"min": round(per[0], 1), "median": round(per[len(per) // 2], 1),
                                    "max": round(per[-1], 1)},
        "note": "pipeline = parallel sandboxed autograde (one nbgrader process per notebook) + seal check + "
                "feedback + grades.csv; stock = nbgrader autograde only, sequential, unsandboxed",
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade_throughput.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
