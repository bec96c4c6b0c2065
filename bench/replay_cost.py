"""What replaying the marked lecture cells saves: the model answer graded with them run
and with them replayed (coursekit.grade.replay), per chapter that marks any.

    python bench/replay_cost.py [ch08_efficiency ...] [--students 3] [--out bench/results]

Each chapter's model answer is handed in by ``--students`` students; the course is
graded twice (`make grade`, sandbox on), first with every cell run (COURSE_REPLAY=0),
then, in a fresh course folder, with replay on. Prints the per-notebook account
(bench/grade_course.py) of both runs, and the scores must be the same.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from grade_course import chapter_account, grade, gradebook_rows, print_account  # noqa: E402
from harness import grading_course, make_submission, submit  # noqa: E402


def _seconds(path: Path, marked: set[str]) -> float:
    import nbformat

    from coursekit.grade import account
    nb = nbformat.read(path, as_version=4)
    nb.cells = [c for c in nb.cells if c.get("id") in marked]
    return sum(account.cell_seconds(nb).values())


def main(argv=None) -> int:
    from coursekit.author import build, replay
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*")
    ap.add_argument("--students", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    chapters = args.chapters or [ch for ch in build.chapters() if replay.record_path(ch).exists()]
    result = {"chapters": chapters, "students": args.students}
    rows, pages = {}, {}
    with tempfile.TemporaryDirectory(prefix="replay-cost-") as tmp:
        for mode, env in (("every_cell_run", "0"), ("replayed", "1")):
            root = Path(tmp) / mode
            for ch in chapters:
                rel, src = grading_course(root, ch)
                for i in range(args.students):
                    submit(root, f"student{i:03d}", ch, make_submission(rel, src, None))
            os.environ["COURSE_REPLAY"] = env
            wall, phases, jobs = grade(root)
            table = chapter_account(root, jobs, phases)
            for ch in chapters:     # the marked cells' own time in the kernel, per notebook
                marked = set(replay.load(ch).get(build.source_language(ch)) or {})
                spent = [_seconds(root / "autograded" / j.student / ch / f"{ch}.ipynb", marked)
                         for j in jobs if j.chapter == ch]
                table[ch]["cells_marked_s"] = round(sum(spent) / max(1, len(spent)), 3)
                print(f"{ch}: the marked cells ran {table[ch]['cells_marked_s']:.2f} s per notebook")
            rows[mode] = gradebook_rows(root)
            pages[mode] = {str(p.relative_to(root / "feedback")): p.read_text(encoding="utf-8")
                           for p in sorted((root / "feedback").rglob("*.html"))}
            print(f"\n{mode}: {wall:.1f} s wall for {len(jobs)} notebooks")
            print_account(table)
            result[mode] = {"wall_s": round(wall, 2), "account_by_chapter": table}
    os.environ.pop("COURSE_REPLAY", None)
    same = rows["every_cell_run"] == rows["replayed"]
    result["same_gradebook"] = same
    print(f"\nthe same scores and comments both ways: {same}")
    result["pages"] = compare_pages(pages["every_cell_run"], pages["replayed"])
    for name, diff in result["pages"].items():
        if not diff["lines"]:
            print(f"{name}: the same page")
            continue
        print(f"{name}: {len(diff['lines'])} lines differ, "
              + ("each one a measured time" if diff["timing_only"] else "not only measured times:"))
        for line in diff["lines"]:
            print(f"    {line[:160]}")
    same = same and all(d["timing_only"] for d in result["pages"].values())
    out = Path(args.out) / "replay_cost.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"-> {out}")
    return 0 if same else 1


# what a page shows of a time measured on this machine (a replayed cell shows what the
# record's run measured; run again, a cell measures anew): "0.02 ms", "1.5 s", "7210 token/s",
# and what is computed from such times in the same output (slopes, ratios) or drawn from
# them (a figure: its picture)
TIMING = re.compile(r"\d+(\.\d+)?\s*(ms|s|µs|秒|毫秒|token/s)(?![a-z])|data:image/png")


def compare_pages(before: dict, after: dict) -> dict:
    """Per feedback page: the lines that differ between the two runs, and whether each
    changed output (a hunk of the diff) is one that shows a measured time."""
    import difflib
    out = {}
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name, "").splitlines(), after.get(name, "").splitlines()
        hunks, lines = [], []
        for line in difflib.unified_diff(a, b, lineterm="", n=0):
            if line.startswith("@@"):
                hunks.append([])
            elif line[:1] in "+-" and not line.startswith(("+++", "---")):
                hunks[-1].append(line)
                lines.append(line[:300])
        out[name] = {"lines": lines, "hunks": len(hunks),
                     "timing_only": all(any(TIMING.search(line[1:]) for line in hunk) for hunk in hunks)}
    return out


if __name__ == "__main__":
    sys.exit(main())
