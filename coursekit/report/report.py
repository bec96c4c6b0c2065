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
import json
import os
from pathlib import Path

import nbformat

from grading import protocol

from . import score as score_mod
from .flags import render_all
from .words import HTML_LANG, language_of, word

PAGE_STYLE = ("body{font-family:sans-serif;max-width:1000px;margin:auto;color:#1a1a1a;line-height:1.45}"
              "table{border-collapse:collapse}td,th{border:1px solid #767676;padding:4px 8px;text-align:left}"
              "th{background:#f0f0f0}.flag{color:#a00000}.charts{display:flex;flex-wrap:wrap;gap:12px}"
              ".wide{overflow-x:auto}a{color:#0645ad;text-decoration:underline}small{color:#404040}")


def _gradebook(root: Path):
    return score_mod.open_gradebook(root)


def collect(root: Path, jobs) -> dict:
    """Scores and diagnoses per chapter, student and exercise.

    scores[chapter][student] = the submission's score.Standing (None: never graded)
    bugs[(chapter, grade id)] = Counter of diagnosed bug keys (once per student)

    The diagnoses of each graded notebook are kept (``ROWS``) with the notebook's stamp:
    a report made again reads only the notebooks graded since (one student's regrade:
    that notebook). The scores are read from the gradebook each time (a manual grade
    entered in the formgrader changes them without any notebook changing)."""
    data = {"scores": collections.defaultdict(dict), "bugs": collections.defaultdict(collections.Counter),
            "flags": {}, "said": {}}
    with _gradebook(root) as gb:
        for job in jobs:
            data["flags"][(job.student, job.chapter)] = list(job.flags)
            data["scores"][job.chapter][job.student] = score_mod.find(gb, job.chapter, job.student)
    kept = _kept_rows(root)
    rows = {}
    for job in jobs:
        path = root / "autograded" / job.student / job.chapter / f"{job.chapter}.ipynb"
        if not path.exists():
            continue
        name, st = f"{job.chapter}/{job.student}", path.stat()
        stamp = [st.st_mtime_ns, st.st_size, st.st_ino]
        row = kept.get(name)
        if row is None or row["stamp"] != stamp:
            bugs, said = collections.defaultdict(collections.Counter), {}
            _count_bugs(nbformat.read(path, as_version=4), job.chapter, bugs, said)
            row = {"stamp": stamp, "bugs": {gid: sorted(c) for (_, gid), c in bugs.items()}, "said": said}
        rows[name] = row
        for gid, keys in row["bugs"].items():
            data["bugs"][(job.chapter, gid)].update(keys)
        for key, text in row["said"].items():
            if not data["said"].get(key):
                data["said"][key] = text
    if rows != kept:
        _keep_rows(root, rows)
    return data


ROWS = Path(".grading") / "report" / "diagnoses.json"   # under the course folder


def _kept_rows(root: Path) -> dict:
    try:
        kept = json.loads((root / ROWS).read_text(encoding="utf-8"))
        return kept["rows"] if kept.get("version") == ROWS_VERSION else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


ROWS_VERSION = 1


def _keep_rows(root: Path, rows: dict) -> None:
    path = root / ROWS
    tmp = path.with_name(f".{path.name}.{os.getpid()}")   # renamed into place: a reader sees old or new
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"version": ROWS_VERSION, "rows": rows}, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:   # nowhere to keep them: read again next time
        tmp.unlink(missing_ok=True)


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


def _graded(data, chapter: str) -> list[score_mod.Standing]:
    return [st for st in data["scores"][chapter].values() if st is not None]


def _cells(data, chapter: str) -> list[str]:
    """The chapter's graded cells, in the notebook's order."""
    out: list[str] = []
    for st in _graded(data, chapter):
        out += [c.grade_id for c in st.cells if c.grade_id not in out]
    return out


def _cell_values(data, chapter: str, gid: str) -> list[score_mod.CellScore]:
    return [c for st in _graded(data, chapter) for c in st.cells if c.grade_id == gid]


def _rates(data, chapter: str) -> tuple[list[str], list[float], list[int]]:
    """Exercises, full-marks rate among graded submissions, and how many await grading."""
    cells = _cells(data, chapter)
    rates, waiting = [], []
    for g in cells:
        vals = _cell_values(data, chapter, g)
        graded = [c for c in vals if c.status != score_mod.PENDING]
        rates.append(100 * sum(1 for c in graded if c.max_score and c.score >= c.max_score) / max(1, len(graded)))
        waiting.append(len(vals) - len(graded))
    return cells, rates, waiting


def _chapter_plots(data, chapter: str, lang: str) -> str:
    """The chapter's score distribution and pass rate per exercise, drawn as
    inline SVG (no image files, nothing to load; the page works offline)."""
    pct = [100 * st.score / st.max_score for st in _graded(data, chapter) if st.max_score]
    counts = [sum(1 for p in pct if lo <= p < lo + 10 or (lo == 90 and p == 100)) for lo in range(0, 100, 10)]
    cells, rates, waiting = _rates(data, chapter)
    labels = [g + (f" ({word('awaiting_n', lang, n=n)})" if n else "") for g, n in zip(cells, waiting)]
    return f"<div class='charts'>{_histogram_svg(counts, lang)}{_bars_svg(labels, rates, lang)}</div>"


def _histogram_svg(counts: list[int], lang: str = "en") -> str:
    w, h, left, bottom = 420, 220, 40, 40
    top = max(counts + [1])
    bw = (w - left - 10) / len(counts)
    title = word("distribution", lang)
    described = "; ".join(f"{i * 10}–{i * 10 + 10}%: {n}" for i, n in enumerate(counts))
    parts = [f"<svg class='chart' width='{w}' height='{h}' role='img' aria-label='{html.escape(title)}: "
             f"{html.escape(described)}'>",
             f"<text x='{w / 2}' y='14' text-anchor='middle' font-weight='bold'>{html.escape(title)}</text>"]
    for i, n in enumerate(counts):
        bh = (h - bottom - 38) * n / top   # room above the tallest bar for its count
        x, y = left + i * bw, h - bottom - bh
        parts.append(f"<rect x='{x + 1:.1f}' y='{y:.1f}' width='{bw - 2:.1f}' height='{bh:.1f}' fill='#3b5f9a'>"
                     f"<title>{i * 10}–{i * 10 + 10}%: {n}</title></rect>")
        if n:
            parts.append(f"<text x='{x + bw / 2:.1f}' y='{y - 3:.1f}' text-anchor='middle' font-size='11'>{n}</text>")
        parts.append(f"<text x='{x:.1f}' y='{h - bottom + 14}' font-size='10' text-anchor='middle'>{i * 10}</text>")
    parts.append(f"<text x='{left + 10 * bw:.1f}' y='{h - bottom + 14}' font-size='10' text-anchor='middle'>100</text>")
    parts.append(f"<line x1='{left}' y1='{h - bottom}' x2='{w - 10}' y2='{h - bottom}' stroke='#333'/>")
    parts.append(f"<text x='{w / 2}' y='{h - 8}' text-anchor='middle' font-size='12'>"
                 f"{html.escape(word('distribution_axis', lang))}</text></svg>")
    return "".join(parts)


def _bars_svg(labels: list[str], rates: list[float], lang: str = "en") -> str:
    row, left, w = 20, 260, 560
    h = 44 + row * len(labels)
    title = word("full_marks_rate", lang)
    described = "; ".join(f"{label}: {rate:.0f}%" for label, rate in zip(labels, rates))
    parts = [f"<svg class='chart' width='{w}' height='{h}' role='img' aria-label='{html.escape(title)}: "
             f"{html.escape(described)}'>",
             f"<text x='{w / 2}' y='14' text-anchor='middle' font-weight='bold'>{html.escape(title)}</text>"]
    for i, (label, rate) in enumerate(zip(labels, rates)):
        y = 24 + i * row
        bw = (w - left - 50) * rate / 100
        parts.append(f"<text x='{left - 6}' y='{y + 13}' text-anchor='end' font-size='11'>{html.escape(label)}</text>")
        parts.append(f"<rect x='{left}' y='{y + 2}' width='{bw:.1f}' height='{row - 5}' fill='#2f7a3f'/>")
        parts.append(f"<text x='{left + bw + 4:.1f}' y='{y + 13}' font-size='11'>{rate:.0f}%</text>")
    return "".join(parts) + "</svg>"


def _chapter_tables(data, chapter: str, lang: str = "en") -> list[str]:
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
        parts.append(f"<h3>{word('frequent_bugs', lang)}</h3><table><tr><th>{word('exercise', lang)}</th>"
                     f"<th>{word('bug_times_students', lang)}</th></tr>" + "".join(rows) + "</table>")
    pend = [(g, n) for g, n in zip(cells, waiting) if n]
    if pend:
        parts.append(f"<h3>{word('awaiting_section', lang)}</h3><table><tr><th>{word('exercise', lang)}</th>"
                     f"<th>{word('submissions', lang)}</th></tr>"
                     + "".join(f"<tr><td>{html.escape(g)}</td><td>{n}</td></tr>" for g, n in pend) + "</table>")
    return parts


def _difficulty_table(data, chapter: str, titles: dict[str, str], lang: str = "en") -> str:
    """Per exercise: the share of graded students with full marks and the mean score."""
    rows = []
    for g in _cells(data, chapter):
        vals = [c for c in _cell_values(data, chapter, g) if c.status != score_mod.PENDING]
        if not vals:
            continue
        full = 100 * sum(1 for c in vals if c.max_score and c.score >= c.max_score) / len(vals)
        mean = sum(c.score for c in vals) / len(vals)
        rows.append(f"<tr><td>{html.escape(titles.get(g, g))}</td><td>{html.escape(g)}</td><td>{full:.0f}%</td>"
                    f"<td>{mean:.2f} / {vals[0].max_score:g}</td></tr>")
    if not rows:
        return ""
    return (f"<h3>{word('hardness', lang)}</h3><table><tr><th>{word('exercise', lang)}</th>"
            f"<th>{word('grade_id', lang)}</th><th>{word('full_marks', lang)}</th><th>{word('mean_score', lang)}</th>"
            "</tr>" + "".join(rows) + "</table>")


def _student_table(data, langs: dict, lang: str = "en") -> str:
    """One row per student: each chapter's score (the one score line), the
    flags, and a link to the feedback page."""
    chapters = sorted(data["scores"])
    students = sorted({s for ch in chapters for s in data["scores"][ch]})
    head = "".join(f"<th scope='col'>{html.escape(ch)}</th>" for ch in chapters)
    rows = []
    for student in students:
        cells = []
        for ch in chapters:
            if student not in data["scores"][ch]:
                cells.append("<td></td>")
                continue
            st = data["scores"][ch][student]
            text = html.escape(st.line(langs.get(ch, lang))) if st is not None else "–"
            flags = data["flags"].get((student, ch)) or []
            if flags:
                text += f"<br><span class='flag'>{html.escape(render_all(flags, langs.get(ch, lang)))}</span>"
            link = f"../feedback/{student}/{ch}/{ch}.html"
            cells.append(f"<td>{text}<br><a href='{html.escape(link)}'>{word('feedback_link', lang)}"
                         f"<span class='visually-hidden'> {html.escape(student)} {html.escape(ch)}</span></a></td>")
        rows.append(f"<tr><th scope='row'>{html.escape(student)}</th>{''.join(cells)}</tr>")
    # a course of twelve chapters is wider than the page: the table scrolls, the page does not
    return (f"<h2>{word('students', lang)}</h2><div class='wide'><table><tr><th scope='col'>"
            f"{word('student', lang)}</th>" + head + "</tr>" + "".join(rows) + "</table></div>")


SIMILAR_TOP = 5   # pairs shown per chapter


def similarity_request(root: Path, chapters, langs: dict | None = None) -> dict:
    """What ``similarity.precompute_aside`` needs to make, ahead, the findings the class
    report of ``chapters`` will show (the same pairs, language and helpers/)."""
    import helpers
    langs = langs or {}
    return {"root": str(root), "chapters": sorted(chapters), "top": SIMILAR_TOP,
            "lang": language_of(langs.get(ch, "zh") for ch in chapters) if chapters else "zh",
            "helpers": str(Path(helpers.__file__).parent)}


def _similarity_section(root: Path, chapters, top: int = SIMILAR_TOP, lang: str = "en") -> str:
    """The most similar pairs of answers per chapter (copydetect), with links
    to a side-by-side view. Similarity is a reason to look, never proof."""
    import helpers

    from . import similarity
    parts, close = [], []
    for ch in chapters:
        try:
            pairs, matches = similarity.findings(root, ch, top, lang, Path(helpers.__file__).parent)
        except Exception as exc:  # noqa: BLE001 (the report still gets written)
            parts.append(f"<p>{html.escape(word('similarity_failed', lang, chapter=ch, error=str(exc)))}</p>")
            continue
        pairs = [p for p in pairs if p.score > 0]
        close += matches
        if pairs:
            parts.append(f"<h3>{html.escape(ch)}</h3><table><tr><th>{word('similar_students', lang)}</th>"
                         f"<th>{word('similar_shared', lang)}</th><th>{word('similar_view', lang)}</th></tr>"
                         + "".join(f"<tr><td>{html.escape(p.a)} ~ {html.escape(p.b)}</td><td>{p.score:.0%} "
                                   f"({word('tokens', lang, n=p.shared_tokens)})</td><td><a href='"
                                   f"{html.escape(p.view)}'>{word('side_by_side', lang)}<span class='visually-hidden'>"
                                   f" {html.escape(p.a)} ~ {html.escape(p.b)}</span></a></td></tr>" for p in pairs)
                         + "</table>")
    if close:
        parts.append(f"<h3>{word('helper_match', lang)}</h3><p>{word('helper_match_note', lang)}</p>"
                     f"<table><tr><th>{word('student', lang)}</th><th>{word('chapter', lang)}</th>"
                     f"<th>{word('exercise', lang)}</th><th>{word('helper_file', lang)}</th>"
                     f"<th>{word('similar_shared', lang)}</th></tr>"
                     + "".join(f"<tr><td>{html.escape(m.student)}</td><td>{html.escape(m.chapter)}</td>"
                               f"<td>{html.escape(m.exercise)}</td><td>{html.escape(m.helper)}</td>"
                               f"<td>{m.share:.0%} ({word('tokens', lang, n=m.shared_tokens)})</td></tr>"
                               for m in close) + "</table>")
    if not parts:
        return ""
    return f"<h2>{word('similar', lang)}</h2><p>{word('similar_note', lang)}</p>" + "".join(parts)


HIDDEN_STYLE = (".visually-hidden{position:absolute;width:1px;height:1px;padding:0;margin:-1px;overflow:hidden;"
                "clip:rect(0,0,0,0);white-space:nowrap;border:0}")


def write_report(root: Path, jobs, langs: dict | None = None) -> Path:
    page = render(root, collect(root, jobs), jobs, langs)
    out = root / "reports" / "class_report.html"
    out.parent.mkdir(exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}")  # renamed into place: a concurrent grader never sees half a report
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out


def render(root: Path, data: dict, jobs, langs: dict | None = None) -> str:
    """The class report's page for ``data`` (what ``collect`` reads)."""
    langs = langs or {}
    chapters = sorted(data["scores"])
    lang = language_of(langs.get(ch, "zh") for ch in chapters) if chapters else "zh"
    title = word("report_title", lang)
    parts = [f"<!doctype html><html lang='{HTML_LANG[lang]}'><head><meta charset='utf-8'>"
             f"<title>{html.escape(title)}</title>",
             f"<style>{PAGE_STYLE}{HIDDEN_STYLE}</style>",
             f"</head><body><main><h1>{html.escape(title)}</h1>",
             f"<p>{word('report_counts', lang, students=len({j.student for j in jobs}), notebooks=len(jobs))}</p>"]
    from .export import titles_for
    titles = titles_for(root, chapters)
    parts.append(_student_table(data, langs, lang))
    for chapter in chapters:
        parts.append(f"<h2>{html.escape(chapter)}</h2>")
        parts.append(_chapter_plots(data, chapter, lang))
        parts.append(_difficulty_table(data, chapter, titles.get(chapter, {}), lang))
        parts += _chapter_tables(data, chapter, lang)
    flagged = [(s, c, f) for (s, c), f in sorted(data["flags"].items()) if f]
    if flagged:
        parts.append(f"<h2>{word('flagged', lang)}</h2><table><tr><th>{word('student', lang)}</th>"
                     f"<th>{word('chapter', lang)}</th><th>{word('why', lang)}</th></tr>")
        parts += [f"<tr><td>{html.escape(s)}</td><td>{html.escape(c)}</td><td class='flag'>"
                  f"{html.escape(render_all(f, langs.get(c, lang)))}</td></tr>" for s, c, f in flagged]
        parts.append("</table>")
    parts.append(_similarity_section(root, chapters, lang=lang))
    parts.append("</main></body></html>")
    return "\n".join(parts)


def summary_table(root: Path, jobs, langs: dict | None = None) -> str:
    """One line per notebook: its score (the one score line) and its flags, in the chapters' language."""
    langs = langs or {}
    lang = language_of(langs.get(j.chapter, "zh") for j in jobs) if jobs else "zh"
    rows = []
    with _gradebook(root) as gb:
        for job in sorted(jobs, key=lambda j: (j.chapter, j.student)):
            ch_lang = langs.get(job.chapter, "zh")
            st = score_mod.find(gb, job.chapter, job.student)
            kept = [word("kept", ch_lang)] if getattr(job, "reused", False) else []
            rows.append((job.student, job.chapter, st.line(ch_lang) if st else "—",
                         "; ".join(kept + [render_all(job.flags, ch_lang)] if job.flags else kept)))
    head = (word("student", lang), word("chapter", lang), word("score", lang), word("flags", lang))
    widths = [max([_width(r[i]) for r in rows] + [_width(head[i])]) for i in range(3)]
    lines = ["  ".join(_pad(text, w) for text, w in zip(head[:3], widths)) + "  " + head[3],
             "-" * (sum(widths) + 6 + 8)]
    for r in rows:
        lines.append("  ".join(_pad(text, w) for text, w in zip(r[:3], widths)) + "  " + r[3])
    return "\n".join(lines)


def _width(text: str) -> int:
    """Columns a string takes in a terminal (CJK characters take two)."""
    import unicodedata
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))


def csv_with_scores(root: Path, text: str) -> str:
    """nbgrader's grades.csv, plus the one score's parts: auto points, manual
    points, points awaiting grading and a status."""
    import csv
    import io
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        return text
    cols = list(rows[0].keys()) + ["auto_score", "manual_score", "awaiting_grading", "status"]
    out = io.StringIO()
    w = csv.DictWriter(out, cols, lineterminator="\n")
    w.writeheader()
    with _gradebook(root) as gb:
        for row in rows:
            st = score_mod.find(gb, row["assignment"], row["student_id"])
            if st is not None:
                row.update(score=score_mod.num(st.score), max_score=score_mod.num(st.max_score),
                           auto_score=score_mod.num(st.auto), manual_score=score_mod.num(st.manual),
                           awaiting_grading=score_mod.num(st.pending), status=st.status)
            w.writerow(row)
    return out.getvalue()
