"""How often the hidden checks name the mistake: wrong answers written apart
from the catalogues (bench/wild/chNN_name.py, a list ``WILD`` of Variants, and
``HELDOUT``, written after the checks were tuned on WILD), each
run in-process against the hidden checks of the cells it must lose, in the zh
build; the message a student would read is sorted into

* named   -- a diagnosis or a hint line, a rule the exercise states (a forbidden
             call, a shape, a dtype, a type), or "not implemented";
* unnamed -- the check failed but only with expected/got values or a raw error;
* escaped -- the check passed: the wrong answer kept its points.

With --set CATALOGUE the wrong answers are those of tests/catalogue/ (every
variant the suite grades; ch12's quiz has no diagnoses and is left out).

"diagnosed" counts, more strictly, the named messages with a diagnosis line
("诊断：") or a stated rule, leaving out those that only carry a general hint.

    .venv/bin/python bench/diagnosis_rate.py [chNN_name ...] [--out bench/results/diagnosis_rate.json --label after]

With --out, the chapters' results are stored under the label (one entry per
chapter, other chapters and labels kept), so a measurement before a change and
one after it sit side by side in one file. bench/results/diagnosis_rate.json
holds, for ch09-ch11: "before" (WILD against the checks as they were),
"heldout" (HELDOUT against the checks tuned on WILD, before anything changed
for it), "after" and "heldout_after" (both sets against the checks committed
last).
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

NAMED_MARKS = ("诊断：", "提示：", "形状", "dtype", "应返回", "不能调用", "还没有实现", "要求从零实现",
               "允许", "类型")
DIAGNOSED_MARKS = ("诊断：", "不能调用", "还没有实现", "要求从零实现", "允许")


def load_wild(chapter: str, which: str = "WILD"):
    if which == "CATALOGUE":          # the known-bug catalogue the suite grades (tests/catalogue/)
        return importlib.import_module(f"catalogue.{chapter}").BUGS
    path = ROOT / "bench" / "wild" / f"{chapter}.py"
    spec = importlib.util.spec_from_file_location(f"wild_{chapter}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, which, [])


def classify(message: str | None) -> str:
    if message is None:
        return "escaped"
    return "named" if any(mark in message for mark in NAMED_MARKS) else "unnamed"


def run_chapter(chapter: str, which: str = "WILD") -> dict:
    os.environ.setdefault("COURSE_CHAPTERS", chapter)   # import no other chapter's catalogue
    from test_grading_inprocess import run_check, solution_namespace

    from helpers import set_language
    set_language("zh")
    rows = []
    for v in load_wild(chapter, which):
        ns = solution_namespace(chapter, v.replace)
        for gid in v.lose:
            message = None
            try:
                with redirect_stdout(io.StringIO()):
                    run_check(chapter, gid, ns)
            except AssertionError as exc:
                message = str(exc)
            except Exception as exc:  # noqa: BLE001 - a check that crashes is a finding too
                message = f"(the check itself crashed: {type(exc).__name__}: {exc})"
            rows.append({"variant": v.name, "cell": gid, "verdict": classify(message),
                         "diagnosed": bool(message) and any(mark in message for mark in DIAGNOSED_MARKS),
                         "message": (message or "")[:400]})
    counts = {k: sum(r["verdict"] == k for r in rows) for k in ("named", "unnamed", "escaped")}
    total = len(rows) or 1
    diagnosed = sum(r["diagnosed"] for r in rows)
    return {"chapter": chapter, "cells": len(rows), **counts, "named_share": round(counts["named"] / total, 3),
            "diagnosed": diagnosed, "diagnosed_share": round(diagnosed / total, 3), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*")
    ap.add_argument("--out", default=None)
    ap.add_argument("--label", default="latest", help="the key the results are stored under in --out")
    ap.add_argument("--set", default="WILD", choices=("WILD", "HELDOUT", "CATALOGUE"),
                    help="HELDOUT: the answers written after the checks were tuned on WILD; "
                         "CATALOGUE: every wrong answer of tests/catalogue/ (the suite's own)")
    args = ap.parse_args(argv)
    folder = ROOT / ("tests/catalogue" if args.set == "CATALOGUE" else "bench/wild")
    chapters = args.chapters or sorted(p.stem for p in folder.glob("ch[0-9][0-9]_*.py") if p.stem != "ch12_quiz")
    os.environ.setdefault("COURSE_CHAPTERS", ",".join(chapters))
    results = [run_chapter(ch, args.set) for ch in chapters]
    for r in results:
        print(f"{r['chapter']:<24} {r['cells']:4d} cells  named {r['named']:4d} ({r['named_share']:.0%})  "
              f"unnamed {r['unnamed']:3d}  escaped {r['escaped']:3d}  diagnosed {r['diagnosed']:3d} "
              f"({r['diagnosed_share']:.0%})")
        for row in r["rows"]:
            if row["verdict"] != "named":
                first = row["message"].splitlines()[0] if row["message"] else ""
                print(f"    {row['verdict']:<8} {row['variant']} / {row['cell']}: {first[:110]}")
    if args.out:
        out = Path(args.out)
        stored = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
        if not isinstance(stored, dict):
            stored = {}
        stored.setdefault(args.label, {}).update({r["chapter"]: r for r in results})
        out.write_text(json.dumps(stored, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
