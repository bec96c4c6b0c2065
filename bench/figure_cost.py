"""What drawing the figures costs a graded notebook.

Grading draws every figure a chapter shows (and each widget's static picture),
so that the feedback page can show it. This runs each chapter's model-answer
notebook the way autograde runs it (NBGRADER_EXECUTION=autograde, a fresh
kernel) twice, alternating: once with matplotlib's inline backend (each figure
becomes a PNG in the notebook) and once with the Agg backend (the figures are
built but never drawn or encoded), and reports the median execution time of
each, the difference, and how many images the notebook holds.

    .venv/bin/python bench/figure_cost.py [chNN_name ...] [--repeat 3] [--out bench/results/figure_cost.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INLINE = "module://matplotlib_inline.backend_inline"


def run_once(chapter: str, backend: str) -> tuple[float, int]:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    env = dict(os.environ, NBGRADER_EXECUTION="autograde", MPLBACKEND=backend, PYTHONPATH=str(ROOT))
    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT / "source" / chapter)}})
    start = time.monotonic()       # a kernel's start is the same in both modes: it cancels in the difference
    client.execute(env=env, cwd=str(ROOT / "source" / chapter))
    took = time.monotonic() - start
    images = sum(1 for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                 if "image/png" in o.get("data", {}))
    return took, images


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "figure_cost.json"))
    args = ap.parse_args(argv)
    chapters = args.chapters or sorted(p.name for p in (ROOT / "source").iterdir() if p.is_dir())
    rows = []
    for ch in chapters:
        times = {"inline": [], "agg": []}
        images = 0
        for _ in range(args.repeat):
            for mode, backend in (("inline", INLINE), ("agg", "agg")):
                took, n = run_once(ch, backend)
                times[mode].append(took)
                if mode == "inline":
                    images = n
        row = {"chapter": ch, "images": images, "inline_s": statistics.median(times["inline"]),
               "agg_s": statistics.median(times["agg"]), "runs": times}
        row["figures_s"] = row["inline_s"] - row["agg_s"]
        rows.append(row)
        print(f"{ch:<22} {images:>3} images  inline {row['inline_s']:6.2f} s  agg {row['agg_s']:6.2f} s  "
              f"figures {row['figures_s']:+6.2f} s", flush=True)
    out = {"load": os.getloadavg(), "cpus": os.cpu_count(), "repeat": args.repeat, "rows": rows,
           "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
