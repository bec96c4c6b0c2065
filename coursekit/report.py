"""The class report: what the instructor should re-teach.

Reads the gradebook and the autograded notebooks; writes
reports/class_report.html (plots embedded) with the score distribution per
chapter, the pass rate per exercise, the most frequent diagnosed bugs per
exercise, and the submissions the grader flagged.
"""
from __future__ import annotations

import base64
import collections
import html
import io
import os
import re
from pathlib import Path

import nbformat

COURSE_ID = "transformer"  # nbgrader_config.py's course id: the gradebook row it already has
BUG_RE = re.compile(r"(?:诊断：|Diagnosis: )\[([A-Za-z0-9_]+)\]")


def _db_url(root: Path) -> str:
    return os.environ.get("COURSE_DB_URL") or f"sqlite:///{root / 'gradebook.db'}"


def collect(root: Path, jobs) -> dict:
    """Scores and diagnoses per chapter, student and exercise."""
    from nbgrader.api import Gradebook

    data = {"scores": collections.defaultdict(dict), "cells": collections.defaultdict(dict),
            "bugs": collections.defaultdict(collections.Counter), "flags": {}}
    with Gradebook(_db_url(root), COURSE_ID) as gb:
        for job in jobs:
            data["flags"][(job.student, job.chapter)] = list(job.flags)
            try:
                sub = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
            except Exception:  # noqa: BLE001 (never graded)
                data["scores"][job.chapter][job.student] = (0.0, None)
                continue
            data["scores"][job.chapter][job.student] = (sub.score, sub.max_score)
            for g in sub.grades:
                data["cells"][(job.chapter, g.name)][job.student] = (g.score or 0.0, g.max_score,
                                                                    g.auto_score is None and g.manual_score is None)
    for job in jobs:
        path = root / "autograded" / job.student / job.chapter / f"{job.chapter}.ipynb"
        if not path.exists():
            continue
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            gid = cell.metadata.get("nbgrader", {}).get("grade_id")
            if not gid:
                continue
            for o in cell.get("outputs", []):
                text = o.get("text", "") + o.get("evalue", "") + "\n".join(o.get("traceback", []))
                for key in set(BUG_RE.findall(text)):
                    data["bugs"][(job.chapter, gid)][key] += 1
    return data


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def write_report(root: Path, jobs) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = collect(root, jobs)
    parts = ["<html><head><meta charset='utf-8'><title>Class report</title>",
             "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px}th{background:#f4f4f4}.flag{color:#b00}</style>",
             "</head><body><h1>Class report</h1>",
             f"<p>{len({j.student for j in jobs})} students, {len(jobs)} notebooks graded.</p>"]
    for chapter in sorted(data["scores"]):
        scores = data["scores"][chapter]
        pct = [100 * s / m for s, m in scores.values() if m]
        parts.append(f"<h2>{html.escape(chapter)}</h2>")
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.2))
        a1.hist(pct, bins=[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100.01], color="#4c72b0")
        a1.set_xlabel("score (% of points)")
        a1.set_ylabel("students")
        a1.set_title("score distribution")
        cells = sorted((g for (c, g) in data["cells"] if c == chapter))
        rates = []
        for g in cells:
            vals = data["cells"][(chapter, g)].values()
            rates.append(100 * sum(1 for s, m, _ in vals if m and s >= m) / max(1, len(vals)))
        a2.barh(cells, rates, color="#55a868")
        a2.set_xlim(0, 100)
        a2.set_xlabel("full marks (% of students)")
        a2.set_title("pass rate per exercise")
        fig.tight_layout()
        parts.append(f"<img src='data:image/png;base64,{_png(fig)}'/>")
        plt.close(fig)
        rows = []
        for g in cells:
            top = data["bugs"].get((chapter, g), collections.Counter()).most_common(3)
            if top:
                rows.append(f"<tr><td>{html.escape(g)}</td><td>" +
                            "<br>".join(f"{html.escape(k)} × {n}" for k, n in top) + "</td></tr>")
        if rows:
            parts.append("<h3>Most frequent diagnosed bugs (re-teach these)</h3>"
                         "<table><tr><th>exercise</th><th>bug × students</th></tr>" + "".join(rows) + "</table>")
    flagged = [(s, c, f) for (s, c), f in sorted(data["flags"].items()) if f]
    if flagged:
        parts.append("<h2>Flagged submissions</h2><table><tr><th>student</th><th>chapter</th><th>why</th></tr>")
        parts += [f"<tr><td>{html.escape(s)}</td><td>{html.escape(c)}</td><td class='flag'>"
                  f"{html.escape('; '.join(f))}</td></tr>" for s, c, f in flagged]
        parts.append("</table>")
    parts.append("</body></html>")
    out = root / "reports" / "class_report.html"
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")  # renamed into place: a concurrent grader never sees half a report
    tmp.write_text("\n".join(parts), encoding="utf-8")
    os.replace(tmp, out)
    return out


def summary_table(root: Path, jobs) -> str:
    data = collect(root, jobs)
    lines = [f"{'student':<24} {'chapter':<20} {'score':>12}  flags", "-" * 80]
    for job in sorted(jobs, key=lambda j: (j.chapter, j.student)):
        s, m = data["scores"][job.chapter].get(job.student, (0.0, None))
        score = f"{s:g}/{m:g}" if m else "—"
        lines.append(f"{job.student:<24} {job.chapter:<20} {score:>12}  {'; '.join(job.flags)}")
    return "\n".join(lines)
