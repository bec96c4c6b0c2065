"""What the visible tests tell a student before grading, for every catalogued
wrong answer: each is put into the chapter's release notebook (the model
answers in every other answer cell) and the notebook is run as Validate runs
it (a kernel, NBGRADER_EXECUTION=validate, top to bottom, past errors).

For each wrong answer, on the test cells it must lose (its ``lose``):

* caught     -- one of those cells' visible test fails;
* named      -- each such failure's key (the output's metadata, helpers.checks)
                is the key the grader names for the same wrong answer in the same
                cell (the first ``[bug:…]`` / ``[verdict:…]`` token of that cell's
                hidden check, in-process);
* misleading -- a failure there names a key that is not that cell's grader key.

    .venv/bin/python bench/visible_feedback.py [chNN_name ...] [--jobs 2] [--out bench/results/visible_feedback.json]
    .venv/bin/python bench/visible_feedback.py ch09_inside_gpt --only abl_clears_all_hooks    (a recheck of a few)

With --out the chapters' results are stored (other chapters kept), with the
commit, the machine's load and the time each chapter took.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
CELL_TIMEOUT = 180


def grader_keys(chapter: str, variant) -> dict[str, str | None]:
    """For each test cell the variant must lose: the first token its hidden check prints (in-process, zh)."""
    from test_grading_inprocess import run_check, solution_namespace

    from grading import protocol
    from helpers import set_language
    set_language("zh")
    ns = solution_namespace(chapter, variant.replace)
    keys = {}
    for gid in variant.lose:
        keys[gid] = None
        try:
            with redirect_stdout(io.StringIO()):
                run_check(chapter, gid, ns)
        except AssertionError as exc:
            found = protocol.TOKEN_RE.findall(str(exc))
            keys[gid] = f"{found[0][0]}:{found[0][1]}" if found else None
        except Exception:  # noqa: BLE001 - a check that crashes names nothing
            pass
    return keys


def outcome(cell) -> dict:
    """What a test cell showed: failed or not, the key it left, its first line."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    keys = [o.get("metadata", {}).get("course", {}).get("key") for o in cell.get("outputs", [])
            if o.get("output_type") == "display_data" and "course" in o.get("metadata", {})]
    text = ""
    if errors:
        import re
        text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0].get("traceback", [])))
    return {"failed": bool(errors), "key": next((k for k in keys if k), None), "message": text[:600]}


def run_variant(job: tuple) -> dict:
    """Run one wrong answer's notebook as Validate does; return what its lost cells showed."""
    chapter, lang, name, replace, lose = job
    from harness import make_submission
    from nbclient import NotebookClient

    from coursekit.author import build, site
    os.environ["NBGRADER_EXECUTION"] = "validate"
    release = site.student_notebook(chapter, lang)
    source = build.build_chapter(chapter, lang)
    nb = make_submission(release, source, replace)
    with tempfile.TemporaryDirectory() as tmp:
        for given in build.given_files(chapter):
            (Path(tmp) / given.name).write_bytes(given.read_bytes())
        client = NotebookClient(nb, timeout=CELL_TIMEOUT, allow_errors=True, kernel_name="python3",
                                resources={"metadata": {"path": tmp}})
        start = time.perf_counter()
        try:
            client.execute(stderr=subprocess.DEVNULL)      # the kernel's own start-up warnings
        except Exception as exc:  # noqa: BLE001 - a notebook that cannot run is a finding
            return {"variant": name, "error": f"{type(exc).__name__}: {exc}"[:300]}
        seconds = time.perf_counter() - start
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    return {"variant": name, "seconds": round(seconds, 1),
            "cells": {gid: outcome(cells[gid]) for gid in lose if gid in cells}}


def summarise(chapter: str, rows: list[dict]) -> dict:
    """caught: a lost cell's visible test failed; named: every such failure carries its own
    cell's grader key; misleading: a lost cell's visible key is not that cell's grader key."""
    def cells(r):
        return [(gid, c, r["expected"].get(gid)) for gid, c in r.get("cells", {}).items()]
    caught = [r for r in rows if any(c["failed"] for _, c, _ in cells(r))]
    named = [r for r in caught if all(c["key"] == want for _, c, want in cells(r) if c["failed"])
             and any(c["key"] for _, c, _ in cells(r))]
    misleading = [r for r in rows if any(c["key"] and c["key"] != want for _, c, want in cells(r))]
    return {"chapter": chapter, "variants": len(rows), "caught": len(caught), "named": len(named),
            "named_share": round(len(named) / len(caught), 3) if caught else None,
            "misleading": len(misleading), "rows": rows}


def run_chapter(chapter: str, lang: str, jobs: int, only: set | None = None) -> dict:
    import importlib
    os.environ.setdefault("COURSE_CHAPTERS", chapter)
    bugs = [v for v in importlib.import_module(f"catalogue.{chapter}").BUGS if v.lose and (not only or v.name in only)]
    expected = {v.name: grader_keys(chapter, v) for v in bugs}
    work = [(chapter, lang, v.name, v.replace, v.lose) for v in bugs]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(run_variant, work))
    for row in rows:
        row["expected"] = expected[row["variant"]]
    result = summarise(chapter, rows)
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def store(out: Path, r: dict, args) -> None:
    """Keep one chapter's result in ``out`` (the other chapters' kept), with the sitting's conditions."""
    stored = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip())
    r.update(commit=commit + ("+changes" if dirty else ""), lang=args.lang, load=os.getloadavg(), jobs=args.jobs,
             machine=platform.platform(), when=time.strftime("%Y-%m-%d %H:%M"))
    stored[r["chapter"]] = r
    out.write_text(json.dumps(stored, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("chapters", nargs="*")
    ap.add_argument("--lang", default="zh", choices=("zh", "en"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--show", action="store_true", help="print every wrong answer's first visible line")
    ap.add_argument("--only", default="", help="these wrong answers alone (comma-separated names): a recheck, never stored")
    args = ap.parse_args(argv)
    chapters = args.chapters or sorted(p.stem for p in (ROOT / "tests" / "catalogue").glob("ch[01][0-9]_*.py")
                                       if p.stem != "ch12_quiz")
    for chapter in chapters:
        only = set(filter(None, args.only.split(",")))
        r = run_chapter(chapter, args.lang, args.jobs, only)
        if args.out and not only:
            store(args.out, r, args)             # each chapter as it is done: a run cut short keeps what it measured
        share = "-" if r["named_share"] is None else f"{r['named_share']:.0%}"
        print(f"{chapter:<24} {r['variants']:4d} wrong answers  caught {r['caught']:4d}  named {r['named']:4d} "
              f"({share} of caught)  misleading {r['misleading']:3d}  {r['seconds']:.0f} s", flush=True)
        for row in r["rows"]:
            for gid, c in row.get("cells", {}).items():
                want = row["expected"].get(gid)
                bad = c["key"] and c["key"] != want
                if args.show or bad or (c["failed"] and c["key"] != want):
                    first = c["message"].splitlines()[0] if c["message"] else "(passed)"
                    verdict = ("MISLEADING" if bad else "named" if c["key"] and c["key"] == want
                               else "unnamed" if c["failed"] else "passed")
                    print(f"    {verdict:<10} "
                          f"{row['variant']} / {gid}: grader {want}, visible {c['key']}: {first[:120]}")
            if "error" in row:
                print(f"    ERROR {row['variant']}: {row['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
