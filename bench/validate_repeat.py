"""Validate of chapter 9's widget cell, ten times in a row, in a student's
JupyterLab server (the suite's test, run with COURSE_VALIDATE_RUNS=10).

    .venv/bin/python bench/validate_repeat.py [--runs 10] [--out bench/results/validate_repeat.json]

Each time must stay under 30 s: before the kernel was polled in one-second
slices in the student's server, a Validate after the widget cell could wait
for the cell's whole time limit (120 s)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "validate_repeat.json"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        times = Path(tmp) / "times.json"
        env = dict(os.environ, COURSE_VALIDATE_RUNS=str(args.runs), COURSE_VALIDATE_TIMES=str(times),
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        rc = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0",
                              "tests/test_browser_student.py", "-k", "widget_chapter"], cwd=ROOT, env=env)
        result = json.loads(times.read_text()) if times.exists() else {}
    result.update(passed=rc == 0, when=time.strftime("%Y-%m-%d %H:%M:%S"))
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return rc


if __name__ == "__main__":
    sys.exit(main())
