"""The class report: what the instructor should re-teach.

Reads the gradebook and the autograded notebooks; writes
reports/class_report.html (plots embedded) with the score distribution per
chapter, the pass rate per exercise, the most frequent diagnosed bugs per
exercise (read from the checks' ``[bug:KEY]`` tokens), the points awaiting
grading, and the submissions the grader flagged (in the chapter's language).
Also the summary table ``make grade`` prints, and the pending-points notes
added to grades.csv and the feedback pages.
"""
from __future__ import annotations

import base64
import collections
import html
import io
import os
from pathlib import Path

import nbformat

from grading import protocol

from . import pending
from .flags import render_all


def _gradebook(root: Path):
    from nbgrader.api import Gradebook
    return Gradebook(protocol.gradebook_url(root), protocol.COURSE_ID)


def collect(root: Path, jobs) -> dict:
    """Scores and diagnoses per chapter, student and exercise.

    scores[chapter][student] = (score, max_score, points awaiting grading)
    cells[(chapter, grade id)][student] = (score, max_score, awaiting grading?)"""
    data = {"scores": collections.defaultdict(dict), "cells": collections.defaultdict(dict),
            "bugs": collections.defaultdict(collections.Counter), "flags": {}}
    with _gradebook(root) as gb:
        for job in jobs:
            data["flags"][(job.student, job.chapter)] = list(job.flags)
            try:
                sub = gb.find_submission_notebook(job.chapter, job.chapter, job.student)
            except Exception:  # noqa: BLE001 (never graded)
                data["scores"][job.chapter][job.student] = (0.0, None, 0.0)
                continue
            st = pending.standing(sub)
            data["scores"][job.chapter][job.student] = (sub.score, sub.max_score, st.pending_points)
            for g in sub.grades:
                data["cells"][(job.chapter, g.name)][job.student] = (g.score or 0.0, g.max_score,
                                                                    pending.is_pending(g))
    for job in jobs:
        path = root / "autograded" / job.student / job.chapter / f"{job.chapter}.ipynb"
        if path.exists():
            _count_bugs(nbformat.read(path, as_version=4), job.chapter, data["bugs"])
    return data


def _count_bugs(nb, chapter: str, bugs) -> None:
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if not gid:
            continue
        for o in cell.get("outputs", []):
            text = o.get("text", "") + o.get("evalue", "") + "\n".join(o.get("traceback", []))
            for key in set(protocol.bugs_in(text)):
                bugs[(chapter, gid)][key] += 1


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode()


def _rates(data, chapter: str) -> tuple[list[str], list[float], list[int]]:
    """Exercises, full-marks rate among graded submissions, and how many await grading."""
    cells = sorted(g for (c, g) in data["cells"] if c == chapter)
    rates, waiting = [], []
    for g in cells:
        vals = list(data["cells"][(chapter, g)].values())
        graded = [(s, m) for s, m, p in vals if not p]
        rates.append(100 * sum(1 for s, m in graded if m and s >= m) / max(1, len(graded)))
        waiting.append(len(vals) - len(graded))
    return cells, rates, waiting


def _chapter_plots(data, chapter: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pct = [100 * s / m for s, m, _ in data["scores"][chapter].values() if m]
    cells, rates, waiting = _rates(data, chapter)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.2))
    a1.hist(pct, bins=[0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100.01], color="#4c72b0")
    a1.set_xlabel("score so far (% of points)")
    a1.set_ylabel("students")
    a1.set_title("score distribution")
    labels = [g + (f" ({n} awaiting grading)" if n else "") for g, n in zip(cells, waiting)]
    a2.barh(labels, rates, color="#55a868")
    a2.set_xlim(0, 100)
    a2.set_xlabel("full marks (% of graded students)")
    a2.set_title("pass rate per exercise")
    fig.tight_layout()
    img = f"<img src='data:image/png;base64,{_png(fig)}'/>"
    plt.close(fig)
    return img


def _chapter_tables(data, chapter: str) -> list[str]:
    parts = []
    cells, _, waiting = _rates(data, chapter)
    rows = []
    for g in cells:
        top = data["bugs"].get((chapter, g), collections.Counter()).most_common(3)
        if top:
            rows.append(f"<tr><td>{html.escape(g)}</td><td>" +
                        "<br>".join(f"{html.escape(k)} × {n}" for k, n in top) + "</td></tr>")
    if rows:
        parts.append("<h3>Most frequent diagnosed bugs (re-teach these)</h3>"
                     "<table><tr><th>exercise</th><th>bug × students</th></tr>" + "".join(rows) + "</table>")
    pend = [(g, n) for g, n in zip(cells, waiting) if n]
    if pend:
        parts.append("<h3>Awaiting grading (formgrader)</h3><table><tr><th>exercise</th><th>submissions</th></tr>"
                     + "".join(f"<tr><td>{html.escape(g)}</td><td>{n}</td></tr>" for g, n in pend) + "</table>")
    return parts


def _difficulty_table(data, chapter: str, titles: dict[str, str]) -> str:
    """Per exercise: the share of graded students with full marks and the mean score."""
    rows = []
    for g in sorted(g for (c, g) in data["cells"] if c == chapter):
        vals = [(sc, m) for sc, m, p in data["cells"][(chapter, g)].values() if not p]
        if not vals:
            continue
        full = 100 * sum(1 for sc, m in vals if m and sc >= m) / len(vals)
        mean = sum(sc for sc, _ in vals) / len(vals)
        rows.append(f"<tr><td>{html.escape(titles.get(g, g))}</td><td>{html.escape(g)}</td><td>{full:.0f}%</td>"
                    f"<td>{mean:.2f} / {vals[0][1]:g}</td></tr>")
    if not rows:
        return ""
    return ("<h3>Exercises: how hard they were</h3><table><tr><th>exercise</th><th>grade id</th>"
            "<th>full marks</th><th>mean score</th></tr>" + "".join(rows) + "</table>")


def _student_table(data, langs: dict) -> str:
    """One row per student: each chapter's score so far, the points awaiting
    grading, the flags, and a link to the feedback page."""
    chapters = sorted(data["scores"])
    students = sorted({s for ch in chapters for s in data["scores"][ch]})
    head = "".join(f"<th>{html.escape(ch)}</th>" for ch in chapters)
    rows = []
    for student in students:
        cells = []
        for ch in chapters:
            score = data["scores"][ch].get(student)
            if score is None:
                cells.append("<td></td>")
                continue
            got, top, waiting = score
            text = f"{got or 0:g} / {top:g}" if top else "–"
            if waiting:
                text += f" <small>(+{waiting:g} awaiting grading)</small>"
            flags = data["flags"].get((student, ch)) or []
            if flags:
                text += f"<br><span class='flag'>{html.escape(render_all(flags, langs.get(ch, 'zh')))}</span>"
            link = f"../feedback/{student}/{ch}/{ch}.html"
            cells.append(f"<td>{text}<br><a href='{html.escape(link)}'>feedback</a></td>")
        rows.append(f"<tr><th>{html.escape(student)}</th>{''.join(cells)}</tr>")
    return ("<h2>Students</h2><table><tr><th>student</th>" + head + "</tr>" + "".join(rows) + "</table>")


def _similarity_section(root: Path, chapters, top: int = 5) -> str:
    """The most similar pairs of answers per chapter (copydetect), with links
    to a side-by-side view. Similarity is a reason to look, never proof."""
    from . import similarity

    parts = []
    for ch in chapters:
        try:
            pairs = [p for p in similarity.chapter_pairs(root, ch, root / "reports" / "similar", top=top)
                     if p.score > 0]
        except Exception as exc:  # noqa: BLE001 (the report still gets written)
            parts.append(f"<p>{html.escape(ch)}: similarity not computed ({html.escape(str(exc))})</p>")
            continue
        if pairs:
            parts.append(f"<h3>{html.escape(ch)}</h3><table><tr><th>students</th><th>shared</th><th>view</th></tr>"
                         + "".join(f"<tr><td>{html.escape(p.a)} ~ {html.escape(p.b)}</td><td>{p.score:.0%} "
                                   f"({p.shared_tokens} tokens)</td><td><a href='{html.escape(p.view)}'>side by side"
                                   "</a></td></tr>" for p in pairs) + "</table>")
    if not parts:
        return ""
    return ("<h2>Similar answers</h2><p><b>Similarity is a reason to look, not proof</b>: short answers to the same "
            "exercise often look alike, and students may have worked from the same lecture code. Only what the "
            "students wrote is compared (the release's code is left out); names are ignored, so renaming does not "
            "hide a copy.</p>" + "".join(parts))


def write_report(root: Path, jobs, langs: dict | None = None) -> Path:
    data = collect(root, jobs)
    langs = langs or {}
    parts = ["<html><head><meta charset='utf-8'><title>Class report</title>",
             "<style>body{font-family:sans-serif;max-width:1000px;margin:auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:4px 8px}th{background:#f4f4f4}.flag{color:#b00}</style>",
             "</head><body><h1>Class report</h1>",
             f"<p>{len({j.student for j in jobs})} students, {len(jobs)} notebooks graded.</p>"]
    from .export import titles_for
    titles = titles_for(root, sorted(data["scores"]))
    parts.append(_student_table(data, langs))
    for chapter in sorted(data["scores"]):
        parts.append(f"<h2>{html.escape(chapter)}</h2>")
        parts.append(_chapter_plots(data, chapter))
        parts.append(_difficulty_table(data, chapter, titles.get(chapter, {})))
        parts += _chapter_tables(data, chapter)
    flagged = [(s, c, f) for (s, c), f in sorted(data["flags"].items()) if f]
    if flagged:
        parts.append("<h2>Flagged submissions</h2><table><tr><th>student</th><th>chapter</th><th>why</th></tr>")
        parts += [f"<tr><td>{html.escape(s)}</td><td>{html.escape(c)}</td><td class='flag'>"
                  f"{html.escape(render_all(f, langs.get(c, 'zh')))}</td></tr>" for s, c, f in flagged]
        parts.append("</table>")
    parts.append(_similarity_section(root, sorted(data["scores"])))
    parts.append("</body></html>")
    out = root / "reports" / "class_report.html"
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")  # renamed into place: a concurrent grader never sees half a report
    tmp.write_text("\n".join(parts), encoding="utf-8")
    os.replace(tmp, out)
    return out


def summary_table(root: Path, jobs, langs: dict | None = None) -> str:
    """One line per notebook: its score (points awaiting grading apart) and its flags."""
    langs = langs or {}
    with _gradebook(root) as gb:
        lines = [f"{'student':<24} {'chapter':<20} {'score':>12}  flags", "-" * 80]
        for job in sorted(jobs, key=lambda j: (j.chapter, j.student)):
            lang = langs.get(job.chapter, "zh")
            try:
                score = pending.standing(gb.find_submission_notebook(job.chapter, job.chapter, job.student))
                shown = score.render(lang)
            except Exception:  # noqa: BLE001 (never graded)
                shown = "—"
            lines.append(f"{job.student:<24} {job.chapter:<20} {shown:>12}  {render_all(job.flags, lang)}")
    return "\n".join(lines)


def csv_with_pending(root: Path, text: str) -> str:
    """nbgrader's grades.csv, plus auto points, points awaiting grading and a status."""
    with _gradebook(root) as gb:
        cache: dict = {}

        def lookup(assignment: str, student: str):
            if assignment not in cache:
                cache[assignment] = pending.standings(gb, assignment)
            return cache[assignment].get(student)

        return pending.annotate_csv(text, lookup)


def mark_pending_feedback(root: Path, chapters, lang_of) -> None:
    """Show each feedback page's ungraded manual cells as awaiting grading."""
    with _gradebook(root) as gb:
        for ch in chapters:
            for student, st in pending.standings(gb, ch).items():
                path = root / "feedback" / student / ch / f"{ch}.html"
                if st.final or not path.exists():
                    continue
                text = path.read_text(encoding="utf-8")
                new = pending.annotate_feedback(text, st, lang_of(ch))
                if new != text:
                    path.write_text(new, encoding="utf-8")
