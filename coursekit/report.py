"""The class report: what the instructor should re-teach.

Reads the gradebook and the autograded notebooks; writes
reports/class_report.html (charts drawn inline) with the score distribution per
chapter, the pass rate per exercise, the most frequent diagnosed bugs per
exercise (read from the checks' ``[bug:KEY]`` tokens), the points awaiting
grading, and the submissions the grader flagged (in the chapter's language).
Also the summary table ``make grade`` prints, and the pending-points notes
added to grades.csv and the feedback pages.
"""
from __future__ import annotations

import collections
import html
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
            "bugs": collections.defaultdict(collections.Counter), "flags": {}, "said": {}}
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
            _count_bugs(nbformat.read(path, as_version=4), job.chapter, data["bugs"], data["said"])
    return data


def _count_bugs(nb, chapter: str, bugs, said: dict | None = None) -> None:
    """Count each diagnosed bug once per student and exercise; ``said`` keeps, per
    bug, the diagnosis the student read after its token (in the chapter's language)."""
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if not gid:
            continue
        seen = set()
        for o in cell.get("outputs", []):
            text = o.get("text", "") + o.get("evalue", "") + "\n".join(o.get("traceback", []))
            for key in protocol.bugs_in(text):
                if said is not None and not said.get(key):
                    said[key] = diagnosis_after(text, key)
                seen.add(key)
        for key in seen:   # once per student, however many outputs name it
            bugs[(chapter, gid)][key] += 1


def diagnosis_after(text: str, key: str) -> str:
    """The sentence a check printed after a bug's token (what the student was told)."""
    i = text.find(f"[bug:{key}]")
    line = text[i + len(key) + 6:].split("\n", 1)[0] if i >= 0 else ""
    line = line.split("\x1b", 1)[0].split("✗", 1)[0]   # the check's own next line may follow on it
    return protocol.VERDICT_TOKEN_RE.sub("", line).strip()


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
    """The chapter's score distribution and pass rate per exercise, drawn as
    inline SVG (no image files, nothing to load; the page works offline)."""
    pct = [100 * s / m for s, m, _ in data["scores"][chapter].values() if m]
    counts = [sum(1 for p in pct if lo <= p < lo + 10 or (lo == 90 and p == 100)) for lo in range(0, 100, 10)]
    cells, rates, waiting = _rates(data, chapter)
    labels = [g + (f" ({n} awaiting grading)" if n else "") for g, n in zip(cells, waiting)]
    return (f"<div class='charts'>{_histogram_svg(counts)}{_bars_svg(labels, rates)}</div>")


def _histogram_svg(counts: list[int]) -> str:
    w, h, left, bottom = 420, 220, 40, 40
    top = max(counts + [1])
    bw = (w - left - 10) / len(counts)
    parts = [f"<svg class='chart' width='{w}' height='{h}' role='img' aria-label='score distribution'>",
             f"<text x='{w / 2}' y='14' text-anchor='middle' font-weight='bold'>score distribution</text>"]
    for i, n in enumerate(counts):
        bh = (h - bottom - 38) * n / top   # room above the tallest bar for its count
        x, y = left + i * bw, h - bottom - bh
        parts.append(f"<rect x='{x + 1:.1f}' y='{y:.1f}' width='{bw - 2:.1f}' height='{bh:.1f}' fill='#4c72b0'>"
                     f"<title>{i * 10}–{i * 10 + 10}%: {n}</title></rect>")
        if n:
            parts.append(f"<text x='{x + bw / 2:.1f}' y='{y - 3:.1f}' text-anchor='middle' font-size='11'>{n}</text>")
        parts.append(f"<text x='{x:.1f}' y='{h - bottom + 14}' font-size='10' text-anchor='middle'>{i * 10}</text>")
    parts.append(f"<text x='{left + 10 * bw:.1f}' y='{h - bottom + 14}' font-size='10' text-anchor='middle'>100</text>")
    parts.append(f"<line x1='{left}' y1='{h - bottom}' x2='{w - 10}' y2='{h - bottom}' stroke='#333'/>")
    parts.append(f"<text x='{w / 2}' y='{h - 8}' text-anchor='middle' font-size='12'>score so far (% of points); "
                 "bars: students</text></svg>")
    return "".join(parts)


def _bars_svg(labels: list[str], rates: list[float]) -> str:
    row, left, w = 20, 260, 560
    h = 44 + row * len(labels)
    parts = [f"<svg class='chart' width='{w}' height='{h}' role='img' aria-label='pass rate per exercise'>",
             f"<text x='{w / 2}' y='14' text-anchor='middle' font-weight='bold'>full marks (% of graded students)"
             "</text>"]
    for i, (label, rate) in enumerate(zip(labels, rates)):
        y = 24 + i * row
        bw = (w - left - 50) * rate / 100
        parts.append(f"<text x='{left - 6}' y='{y + 13}' text-anchor='end' font-size='11'>{html.escape(label)}</text>")
        parts.append(f"<rect x='{left}' y='{y + 2}' width='{bw:.1f}' height='{row - 5}' fill='#55a868'/>")
        parts.append(f"<text x='{left + bw + 4:.1f}' y='{y + 13}' font-size='11'>{rate:.0f}%</text>")
    return "".join(parts) + "</svg>"


def _chapter_tables(data, chapter: str) -> list[str]:
    parts = []
    cells, _, waiting = _rates(data, chapter)
    rows = []
    for g in cells:
        top = data["bugs"].get((chapter, g), collections.Counter()).most_common(3)
        if top:
            said = data.get("said", {})
            rows.append(f"<tr><td>{html.escape(g)}</td><td>" + "<br>".join(
                f"{html.escape(said.get(k) or k)} <small>({html.escape(k)})</small> × {n}" for k, n in top)
                + "</td></tr>")
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
    # a course of twelve chapters is wider than the page: the table scrolls, the page does not
    return ("<h2>Students</h2><div class='wide'><table><tr><th>student</th>" + head + "</tr>" + "".join(rows)
            + "</table></div>")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


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
             "td,th{border:1px solid #ccc;padding:4px 8px}th{background:#f4f4f4}.flag{color:#b00}.charts{display:flex;flex-wrap:wrap;gap:12px}.wide{overflow-x:auto}</style>",
             "</head><body><h1>Class report</h1>",
             f"<p>{_count(len({j.student for j in jobs}), 'student')}, {_count(len(jobs), 'notebook')} graded.</p>"]
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
            kept = (["（沿用上次结果）" if lang == "zh" else "(kept from an earlier run)"]
                    if getattr(job, "reused", False) else [])
            lines.append(f"{job.student:<24} {job.chapter:<20} {shown:>12}  "
                         + "; ".join(kept + [render_all(job.flags, lang)] if job.flags else kept))
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


def mark_pending_feedback(root: Path, notebooks, lang_of) -> None:
    """Show the ungraded manual cells of the feedback pages of ``notebooks``
    ((chapter, student) pairs, pages just made) as awaiting grading."""
    by_chapter: dict[str, set[str]] = {}
    for ch, student in notebooks:
        by_chapter.setdefault(ch, set()).add(student)
    with _gradebook(root) as gb:
        for ch, students in sorted(by_chapter.items()):
            for student, st in pending.standings(gb, ch).items():
                path = root / "feedback" / student / ch / f"{ch}.html"
                if student not in students or st.final or not path.exists():
                    continue
                text = path.read_text(encoding="utf-8")
                new = pending.annotate_feedback(text, st, lang_of(ch))
                if new != text:
                    path.write_text(new, encoding="utf-8")
