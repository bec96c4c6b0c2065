"""Chapter 4's length-extrapolation experiment with several random seeds.

    python bench/extrapolation_seeds.py [--seeds 0 1 2] [--out bench/results]
    python bench/extrapolation_seeds.py --cell-time [--out bench/results]

The chapter runs one seed; its text says which parts of the picture other
seeds keep and which they change. This runs the same experiment
(helpers/extrapolation.py) with the chapter's own solution functions (the
answer cells of notebooks/ch04_positions.md, executed here, not copied) for
each seed, and writes extrapolation_seeds.json: the loss of every way of
giving positions at every length read, per seed.

With --cell-time it times the chapter's experiment cell instead, training,
table and figure, as grading runs it (the few steps the chapter sets under
nbgrader) and as a student's Run All runs it, and writes
extrapolation_cell_time.json (the chapter's budgets: 20 s added under
grading, 90 s in Run All).
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def chapter_functions() -> dict:
    """Run the chapter's answer cells for the sinusoidal table and the rotation."""
    import torch

    text = (ROOT / "notebooks" / "ch04_positions.md").read_text(encoding="utf-8")
    ns: dict = {"torch": torch, "math": math}
    for cell in re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, re.S):
        gid = re.search(r"grade_id: (\w+)", cell)
        if gid and gid.group(1) in ("sinusoidal", "rope_frequencies", "apply_rope"):
            exec(re.sub(r"^---\n.*?\n---\n", "", cell, flags=re.S), ns)
    return ns


def fingerprint(ns: dict) -> str:
    """What the kept runs were made with: the experiment's code (helpers/extrapolation.py),
    its settings, and what the chapter's two answers return on the inputs a run gives them.
    tests/test_content.py checks the kept file against it (the suite runs the experiment
    itself only with COURSE_RUN_TRAINING_CHAPTERS=1)."""
    import hashlib

    from helpers import extrapolation
    code = (ROOT / "helpers" / "extrapolation.py").read_bytes()
    inputs = extrapolation._fingerprint(extrapolation.Setup(), ns["sinusoidal_encoding"], ns["apply_rope"])
    return hashlib.sha256(code + inputs.encode()).hexdigest()[:16]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--cell-time", action="store_true", help="time the chapter's cell, graded and in Run All")
    args = ap.parse_args(argv)

    from helpers import extrapolation

    ns = chapter_functions()
    if args.cell_time:
        return cell_time(ns, args.out)
    runs = []
    for seed in args.seeds:
        start = time.perf_counter()
        result = extrapolation.run(ns["sinusoidal_encoding"], ns["apply_rope"], extrapolation.Setup(seed=seed),
                                   progress=False)
        runs.append({"seed": seed, "lengths": list(result.setup.lengths), "losses": result.losses,
                     "seconds": round(time.perf_counter() - start, 1)})
        print(f"seed {seed}: " + ", ".join(f"{k} {v[-1] if v[-1] is None else round(v[-1], 3)}"
                                           for k, v in result.losses.items()) + " at the longest length")
    setup = extrapolation.Setup()
    report = {"what": "loss on the repeats (positions 16 on) at each length read, per way of giving positions",
              "setup": {k: v for k, v in vars(setup).items()}, "fingerprint": fingerprint(ns), "runs": runs,
              "machine": {"python": platform.python_version(), "platform": platform.platform()}}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "extrapolation_seeds.json"
    path.write_text(json.dumps(report, indent=1, default=list) + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0


def cell_time(ns: dict, out: Path) -> int:
    """The chapter's cell (run, table, figure) under grading and in Run All, timed."""
    import os

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers import extrapolation

    times = {}
    for label, setup in (("grading", extrapolation.Setup(steps=30, lengths=(32, 64))),
                         ("run_all", extrapolation.Setup())):
        start = time.perf_counter()
        result = extrapolation.run(ns["sinusoidal_encoding"], ns["apply_rope"], setup, progress=False)
        extrapolation.print_table(result)
        extrapolation.figure(result)
        plt.close("all")
        times[label] = round(time.perf_counter() - start, 1)
        print(f"{label}: {times[label]} s", flush=True)
    report = {"seconds": times, "budget_s": {"grading": 20, "run_all": 90},
              "load_average": os.getloadavg(), "cpus": os.cpu_count(),
              "machine": {"python": platform.python_version(), "platform": platform.platform()}}
    out.mkdir(parents=True, exist_ok=True)
    path = out / "extrapolation_cell_time.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
