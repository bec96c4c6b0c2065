"""Run a chapter that trains a model and keep what its cells print.

    python bench/chapter_outputs.py ch09_inside_gpt ch11_encoder_decoder [--out bench/results]

Chapters 9 and 11 train small models for a minute or more, too long to run in
the test suite every time; their text quotes numbers from one run. This runs
the chapter's English source build (solutions included) in-process, exactly
as tests/test_content.py runs the shorter chapters, and writes what each code
cell printed to ``chapter_outputs/<chapter>.json``. tests/test_content.py holds
the chapter's text to these kept outputs; with ``COURSE_RUN_TRAINING_CHAPTERS=1``
it runs the chapter again and checks that it still prints the same numbers.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="+")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)

    import torch
    from test_content import chapter_run, code_hash  # the suite's own way of running a chapter

    out_dir = args.out / "chapter_outputs"
    out_dir.mkdir(parents=True, exist_ok=True)
    for chapter in args.chapters:
        start = time.perf_counter()
        outputs, _, figures, problems = chapter_run(chapter, "en")
        report = {"chapter": chapter, "lang": "en", "code_hash": code_hash(chapter),
                  "seconds": round(time.perf_counter() - start, 1),
                  "figures": figures, "outputs": list(outputs),
                  "machine": {"python": platform.python_version(), "torch": torch.__version__,
                              "platform": platform.platform()}}
        path = out_dir / f"{chapter}.json"
        path.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{chapter}: {report['seconds']} s, {figures} figures, {len(problems)} glyph problems -> "
              f"{path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
