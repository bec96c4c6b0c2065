"""Collect: what a learning-management system gives an instructor, filed into submitted/.

``make collect FROM=...`` reads archives and folders (Canvas's *Download
Submissions*, Moodle's *Download all submissions*, or a plain folder or zip of
notebooks named by student) and fills ``submitted/<student>/<chapter>/<chapter>.ipynb``
with a ``timestamp.txt`` that nbgrader reads as the submission time, so that
lateness in grades.csv is the LMS's. It is a chain of small steps:

    read      every file of what was given, archives inside archives opened in memory
              (names in UTF-8, or GBK as Chinese Windows writes them)
    who       the student, from the LMS's own id in the file's name, mapped through
              roster.csv (never from a display name alone). An LMS layout is data: a
              named regular expression for nbgrader's FileNameCollectorPlugin
    chapter   read from the notebook itself: its nbgrader grade ids against source/
    when      the LMS's submission time where there is one (Canvas's API, Moodle's
              grading worksheet), else a time in the file name, else the file's own
              time; the table says which
    file      the latest attempt of each student and chapter into submitted/; earlier
              attempts and replaced versions under collected/attempts/; nothing is
              overwritten silently, and an unchanged file is left as it is

The table at the end says, in the course's language, what was collected and
what was left out and why. nbgrader's own ``zip_collect`` takes one assignment
at a time with the assignment named on the command line; here the chapter comes
from the notebook, and a corrupt archive inside an archive is reported instead
of stopping the run.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..report import words
from .sources import Entry, chapter_ids, chapter_named, chapter_of, read_notebook, read_source, unsafe_part  # noqa: F401
from .when import CanvasTimes, _tz_name, name_time, read_stamp, stamp, to_utc, zone_of
from .who import Roster, Who, Worksheet, detect, who

SUBMITTED, COLLECTED = "submitted", "collected"
LEDGER = "submissions.json"      # collected/submissions.json: where each filed notebook came from

# ------------------------------------------------------------------ words (zh, en)

TEXT = {
    "title": ("收集结果：{sources}", "Collected from {sources}"),
    "kind": ("类别", "what"), "count": ("份数", "count"), "who": ("学生/章节", "student/chapter"),
    "file": ("文件", "file"), "why": ("原因", "why"),
    "collected": ("新收集", "collected"),
    "unchanged": ("没有变化", "unchanged"),
    "resubmitted": ("重新提交", "resubmitted"),
    "time_updated": ("只更新了提交时间", "time updated"),
    "late": ("迟交", "late"),
    "older": ("较早的提交（另存）", "earlier attempts (kept aside)"),
    "unmatched": ("对不上名单", "unmatched"),
    "not_notebook": ("不是 notebook", "not a notebook"),
    "unreadable": ("无法读取", "unreadable"),
    "wrong_chapter": ("章节与文件名不符", "wrong chapter"),
    "no_chapter": ("不属于任何一章", "no chapter"),
    "unsafe_name": ("名字里带路径", "a path in its name"),
    # why
    "canvas_not_in_roster": ("Canvas 用户 {id}（{name}）不在 roster.csv 的 lms_id 列里",
                             "Canvas user {id} ({name}) is not in roster.csv's lms_id column"),
    "canvas_anonymous": ("匿名评分：Canvas 的文件名里没有用户 id（{id}）",
                         "anonymous grading: Canvas's file name carries no user id ({id})"),
    "no_roster": ("没有 roster.csv：{lms} 的文件名里是 LMS 的 id，要靠 roster.csv 对应到学生",
                  "no roster.csv: {lms}'s file names carry the LMS's id, which roster.csv maps to a student"),
    "moodle_no_worksheet": ("Moodle 的文件夹名只有全名和本作业的参与者编号 {id}：请同时给出这个作业的评分表"
                            "（Download grading worksheet，WORKSHEET=...）",
                            "Moodle's folder names carry only the full name and this assignment's participant "
                            "number {id}: give the assignment's grading worksheet too (Download grading worksheet, "
                            "WORKSHEET=...)"),
    "moodle_not_in_worksheet": ("参与者 {id}（{name}）不在所给的评分表里",
                                "participant {id} ({name}) is not in the grading worksheet(s) given"),
    "moodle_not_in_roster": ("参与者 {id}（{name}，{email}）不在 roster.csv 里（按 email 和 lms_id 查找）",
                             "participant {id} ({name}, {email}) is not in roster.csv (looked up by email and lms_id)"),
    "plain_no_match": ("文件名和文件夹名都对不上 roster.csv 的 student、sis_login_id、sis_user_id、email 或 lms_id",
                       "no part of its name is a student, sis_login_id, sis_user_id, email or lms_id of roster.csv"),
    "plain_ambiguous": ("名字同时对得上几个学生：{students}", "its name fits several students: {students}"),
    "plain_no_name": ("没有 roster.csv，也不是 <学生>/… 或 <学生>.ipynb 的形式",
                      "no roster.csv, and not named <student>/... or <student>.ipynb"),
    "bad_zip": ("打不开的压缩包（{error}）", "an archive that cannot be opened ({error})"),
    "bad_notebook": ("不是能读取的 notebook（{error}）", "not a readable notebook ({error})"),
    "too_big": ("太大（{size} 字节），没有读取", "too large ({size} bytes); not read"),
    "too_deep": ("压缩包嵌套太深，没有打开", "archives nested too deep; not opened"),
    "unsafe_name_why": ("压缩包里的名字 {name} 指向压缩包之外（{part}）：没有读取，不算任何人的提交",
                        "the archive names it {name}, a path out of the archive ({part}): not read, and "
                        "nobody's attempt"),
    "no_chapter_why": ("它的 grade id 对不上 source/ 里的任何一章", "its grade ids match no chapter of source/"),
    "wrong_chapter_why": ("文件名说是 {named}，内容是 {chapter}：按内容归入 {chapter}",
                          "named {named}, holds {chapter}: filed under {chapter}"),
    "resubmitted_why": ("替换了之前的版本，之前的版本保存在 {path}", "replaced the earlier version, kept at {path}"),
    "time_updated_why": ("notebook 没变，提交时间改为 {time}", "same notebook; submission time now {time}"),
    "older_why": ("不是最新的一次提交，保存在 {path}", "not the latest attempt; kept at {path}"),
    "older_than_submitted": ("比 submitted/ 里的那份早，没有替换它；保存在 {path}",
                             "older than the one in submitted/, which stays; kept at {path}"),
    "late_marker": ("Canvas 标记为 LATE", "marked LATE by Canvas"),
    "late_by": ("比截止时间晚 {late}", "{late} after the due date"),
    "time_canvas_api": ("{n} 份的提交时间取自 Canvas API 的 submitted_at。",
                        "{n} submission times are Canvas's submitted_at, read through its API."),
    "time_canvas_none": ("{n} 份来自 Canvas 的文件名里没有时间，也没有连上 Canvas API（CANVAS_URL、CANVAS_COURSE "
                         "和环境变量 CANVAS_TOKEN）：没有写 timestamp.txt，nbgrader 算它们按时提交；"
                         "Canvas 标记为 LATE 的列在“迟交”里。",
                         "{n} files from Canvas carry no time in their names and Canvas's API was not given "
                         "(CANVAS_URL, CANVAS_COURSE and the CANVAS_TOKEN environment variable): no timestamp.txt "
                         "was written, so nbgrader counts them on time; those Canvas marked LATE are listed as late."),
    "time_canvas_missing": ("{n} 份在 Canvas 里查不到 submitted_at（或 Canvas API 没有回答）：没有写 timestamp.txt。",
                            "{n} have no submitted_at in Canvas (or its API did not answer): no timestamp.txt "
                            "written."),
    "time_worksheet": ("{n} 份的提交时间取自 Moodle 评分表的 “Last modified (submission)”，按时区 {tz} 读取。",
                       "{n} submission times are the \"Last modified (submission)\" of Moodle's grading worksheet, "
                       "read in time zone {tz}."),
    "time_worksheet_missing": ("{n} 份在 Moodle 评分表里没有提交时间：没有写 timestamp.txt。",
                               "{n} have no submission time in Moodle's grading worksheet: no timestamp.txt written."),
    "time_name": ("{n} 份的提交时间取自文件名（时区 {tz}）。", "{n} submission times come from the file names "
                  "(time zone {tz})."),
    "time_file": ("{n} 份的名字里没有时间：用的是文件自身的修改时间（压缩包里记录的时间，时区 {tz}），不是 LMS 的提交时间。",
                  "{n} names carry no time: the file's own modification time is used (as the archive records it, "
                  "time zone {tz}), not the LMS's submission time."),
    "left_out": ("{n} 个文件没有收进 submitted/（见上表）。", "{n} files were left out of submitted/ (see above)."),
    "nothing": ("没有找到任何文件。", "No files found."),
}
LEFT_OUT = ("unmatched", "not_notebook", "unreadable", "no_chapter", "unsafe_name")
ORDER = ("collected", "unchanged", "resubmitted", "time_updated", "late", "older", "unmatched", "not_notebook",
         "unreadable", "wrong_chapter", "no_chapter", "unsafe_name")


def word(key: str, lang: str, **fields) -> str:
    zh, en = TEXT[key]
    text = zh if lang == "zh" else en
    return text.format(**fields) if fields else text


# ------------------------------------------------------------------ file

@dataclass
class Candidate:
    entry: Entry
    who: Who
    chapter: str
    data: bytes
    time: dt.datetime | None
    time_source: str                 # canvas_api, canvas_none, worksheet, worksheet_missing, name, file
    named: str | None = None         # the chapter the file's name claims

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def order(self):
        """Latest last: by the time, then the LMS's own upload order, then the order given."""
        return (self.time is not None, self.time or dt.datetime.min, self.who.seq, self.entry.source,
                self.entry.inner)


@dataclass
class Row:
    kind: str
    who: str = ""      # student/chapter
    file: str = ""
    why: tuple[str, dict] | None = None


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".collecting")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def keep_aside(root: Path, student: str, chapter: str, data: bytes, when: dt.datetime | None) -> Path:
    """collected/attempts/<student>/<chapter>/<time>-<hash>.ipynb (written once)."""
    name = f"{when:%Y%m%dT%H%M%SZ}" if when else "undated"
    path = root / COLLECTED / "attempts" / student / chapter / f"{name}-{hashlib.sha256(data).hexdigest()[:12]}.ipynb"
    if not path.exists():
        _write(path, data)
    return path


def file_latest(root: Path, c: Candidate) -> Row:
    """Put one candidate into submitted/, never overwriting silently."""
    folder = root / SUBMITTED / c.who.student / c.chapter
    dest, ts = folder / f"{c.chapter}.ipynb", folder / "timestamp.txt"
    label, rel = f"{c.who.student}/{c.chapter}", lambda p: p.relative_to(root).as_posix()
    if dest.exists():
        old, old_time = dest.read_bytes(), read_stamp(ts)
        if old == c.data:
            if c.time is None or old_time == c.time:
                return Row("unchanged", label, c.entry.shown)
            _write(ts, stamp(c.time).encode())
            return Row("time_updated", label, c.entry.shown, ("time_updated_why", {"time": stamp(c.time)}))
        if c.time and old_time and c.time < old_time:
            kept = keep_aside(root, c.who.student, c.chapter, c.data, c.time)
            return Row("older", label, c.entry.shown, ("older_than_submitted", {"path": rel(kept)}))
        kept = keep_aside(root, c.who.student, c.chapter, old, old_time)
        _write(dest, c.data)
        if c.time:
            _write(ts, stamp(c.time).encode())
        else:
            ts.unlink(missing_ok=True)   # the earlier version's time is not this one's
        return Row("resubmitted", label, c.entry.shown, ("resubmitted_why", {"path": rel(kept)}))
    _write(dest, c.data)
    if c.time:
        _write(ts, stamp(c.time).encode())
    return Row("collected", label, c.entry.shown)


def due_dates(root: Path, chapters) -> dict[str, dt.datetime]:
    """Each chapter's due date in the gradebook (nbgrader's, UTC), where there is one."""
    from grading import protocol
    url = protocol.gradebook_url(root)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return {}
    out = {}
    try:
        from nbgrader.api import Gradebook, MissingEntry
        with Gradebook(url, protocol.COURSE_ID) as gb:
            for ch in chapters:
                try:
                    due = gb.find_assignment(ch).duedate
                except MissingEntry:
                    continue
                if due is not None:
                    out[ch] = due
    except Exception:  # noqa: BLE001 (no gradebook to read: no due dates, lateness unknown here)
        return {}
    return out


def _duration(seconds: float, lang: str) -> str:
    d, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    parts = [(d, "天", "d"), (h, "小时", "h"), (m, "分", "min"), (s, "秒", "s")]
    shown = [f"{n} {zh if lang == 'zh' else en}" for n, zh, en in parts if n][:2]
    return " ".join(shown) or ("0 秒" if lang == "zh" else "0 s")


# ------------------------------------------------------------------ the command

@dataclass
class Collected:
    """What one collect did: a row per file, and the times used."""
    sources: list[str]
    rows: list[Row] = field(default_factory=list)
    times: dict[str, int] = field(default_factory=dict)
    tz: str = ""
    lang: str = "zh"

    @property
    def left_out(self) -> list[Row]:
        return [r for r in self.rows if r.kind in LEFT_OUT]

    def of(self, kind: str) -> list[Row]:
        return [r for r in self.rows if r.kind == kind]

    def table(self, lang: str | None = None) -> str:
        from ..report.report import _pad, _width
        lang = lang or self.lang
        lines = [word("title", lang, sources=", ".join(self.sources)), ""]
        if not self.rows:
            return "\n".join(lines + [word("nothing", lang)])
        counts = [(word(k, lang), str(len(self.of(k)))) for k in ORDER]
        w0 = max(_width(k) for k, _ in counts + [(word("kind", lang), "")])
        lines.append(_pad(word("kind", lang), w0) + "  " + word("count", lang))
        lines += [_pad(k, w0) + "  " + n.rjust(_width(word("count", lang))) for k, n in counts]
        odd = [r for k in ORDER if k not in ("collected", "unchanged") for r in self.of(k)]
        if odd:
            head = (word("kind", lang), word("who", lang), word("file", lang))
            cells = [(word(r.kind, lang), r.who or "—", r.file) for r in odd]
            widths = [max(_width(c[i]) for c in cells + [head]) for i in range(3)]
            lines += ["", "  ".join(_pad(t, w) for t, w in zip(head, widths)) + "  " + word("why", lang),
                      "-" * (sum(widths) + 6 + 8)]
            for r, c in zip(odd, cells):
                why = word(r.why[0], lang, **r.why[1]) if r.why else ""
                lines.append("  ".join(_pad(t, w) for t, w in zip(c, widths)) + "  " + why)
        notes = [word(f"time_{k}", lang, n=n, tz=self.tz) for k, n in sorted(self.times.items()) if n]
        if notes:
            lines += [""] + notes
        if self.left_out:
            lines += ["", word("left_out", lang, n=len(self.left_out))]
        return "\n".join(lines)


def course_language(root: Path, chapters) -> str:
    import nbformat
    langs = []
    for ch in chapters:
        path = root / "source" / ch / f"{ch}.ipynb"
        if path.exists():
            langs.append(nbformat.read(path, as_version=4).metadata.get("course", {}).get("lang", "zh"))
    return words.language_of(langs) if langs else "zh"


def collect(root: Path, sources: list[Path], lms: str = "auto", worksheets=(), timezone: str | None = None,
            canvas=None, assignment_ids: dict[str, int] | None = None) -> Collected:
    """Fill ``root/submitted`` from ``sources`` (see the module's docstring).
    ``canvas``: a canvasapi Course to read submission times from (optional)."""
    from ..report.export import read_roster
    root = Path(root).resolve()
    zone = zone_of(timezone)
    roster_path = root / "roster.csv"
    roster = Roster(read_roster(roster_path) if roster_path.exists() else None)
    worksheet = Worksheet.read(worksheets, zone)
    ids = chapter_ids(root)
    times = CanvasTimes(canvas, assignment_ids or {}) if canvas is not None else None
    result = Collected([Path(s).name for s in sources], tz=_tz_name(zone), lang=course_language(root, ids))
    candidates: list[Candidate] = []
    for i, src in enumerate(sources):
        entries = read_source(Path(src), i)
        layout = detect(entries) if lms == "auto" else lms
        found = [c for e in entries for c in _candidate(e, layout, roster, worksheet, ids, zone, result)]
        if times is not None:
            timed_by_canvas(found, times)
        candidates += found
    # the latest attempt of each student and chapter; earlier (different) ones kept aside
    by_key: dict[tuple[str, str], list[Candidate]] = {}
    for c in candidates:
        by_key.setdefault((c.who.student, c.chapter), []).append(c)
    dues = due_dates(root, sorted({c.chapter for c in candidates}))
    ledger_path = root / COLLECTED / LEDGER
    ledger = json.loads(ledger_path.read_text(encoding="utf-8")) if ledger_path.exists() else {}
    before = json.dumps(ledger, sort_keys=True)
    for (student, chapter), group in sorted(by_key.items()):
        distinct = {}
        for c in sorted(group, key=Candidate.order):
            distinct.pop(c.sha, None)
            distinct[c.sha] = c                     # the same notebook twice is one attempt, at its latest time
        ordered = sorted(distinct.values(), key=Candidate.order)
        latest = ordered[-1]
        for c in ordered[:-1]:
            kept = keep_aside(root, student, chapter, c.data, c.time)
            result.rows.append(Row("older", f"{student}/{chapter}", c.entry.shown,
                                   ("older_why", {"path": kept.relative_to(root).as_posix()})))
        row = file_latest(root, latest)
        result.rows.append(row)
        result.times[latest.time_source] = result.times.get(latest.time_source, 0) + 1
        if latest.named and latest.named != chapter:
            result.rows.append(Row("wrong_chapter", row.who, latest.entry.shown,
                                   ("wrong_chapter_why", {"named": latest.named, "chapter": chapter})))
        if row.kind != "older":
            late = _late(latest, dues.get(chapter), result.lang)
            if late:
                result.rows.append(Row("late", row.who, latest.entry.shown, late))
            ledger[f"{student}/{chapter}"] = {
                "lms": latest.who.lms, "file": latest.entry.shown, "sha256": latest.sha,
                "time": stamp(latest.time) if latest.time else None, "time_source": latest.time_source,
                **latest.who.ids}
    if json.dumps(ledger, sort_keys=True) != before:
        _write(ledger_path, (json.dumps(ledger, ensure_ascii=False, indent=1, sort_keys=True) + "\n").encode())
    return result


def _late(c: Candidate, due: dt.datetime | None, lang: str):
    if c.time and due and c.time > due:
        return ("late_by", {"late": _duration((c.time - due).total_seconds(), lang)})
    if c.who.late_marker and (c.time is None or due is None):
        return ("late_marker", {})
    return None


def timed_by_canvas(found: list[Candidate], times: CanvasTimes) -> None:
    """The Canvas files of one archive get their times from Canvas's API."""
    canvas = [c for c in found if c.who.lms == "canvas"]
    if not canvas:
        return
    counts: dict[str, int] = {}
    for c in canvas:
        counts[c.chapter] = counts.get(c.chapter, 0) + 1
    chapter = max(sorted(counts), key=counts.get)     # the assignment this download is of
    for c in canvas:
        c.time = times.time(chapter, c.who.ids["canvas_user"], c.who.seq)
        c.time_source = "canvas_api" if c.time else "canvas_missing"


def _candidate(e: Entry, layout, roster, worksheet, ids, zone, result) -> list[Candidate]:
    """The entry as a candidate for submitted/, or nothing (and a row saying why)."""
    if e.problem == "unsafe_name":
        result.rows.append(Row("unsafe_name", "", e.shown, ("unsafe_name_why", e.fields)))
        return []
    if e.problem:
        result.rows.append(Row("unreadable", "", e.shown, (e.problem, e.fields)))
        return []
    if not e.inner.lower().endswith(".ipynb"):
        result.rows.append(Row("not_notebook", "", e.shown))
        return []
    w = who(layout, e, roster, worksheet, ids)
    label = w.student or ""
    try:
        nb = read_notebook(e.data)
    except ValueError as exc:
        result.rows.append(Row("unreadable", label, e.shown, ("bad_notebook", {"error": str(exc)})))
        return []
    chapter = chapter_of(nb, ids)
    if chapter is None:
        result.rows.append(Row("no_chapter", label, e.shown, ("no_chapter_why", {})))
        return []
    if w.student is None:
        result.rows.append(Row("unmatched", f"?/{chapter}", e.shown, w.why))
        return []
    when, source = None, "file"
    if w.lms == "canvas":
        source = "canvas_none"     # unless Canvas's API gives the time (timed_by_canvas)
    elif w.lms == "moodle":
        when = worksheet.rows[w.ids["moodle_participant"]]["time"]
        source = "worksheet" if when else "worksheet_missing"
    else:
        when = name_time(e.inner, zone)
        if when:
            source = "name"
        elif e.mtime is not None:
            when = to_utc(e.mtime, zone)
    return [Candidate(e, w, chapter, e.data, when, source, chapter_named(e.inner.split("/")[-1], ids))]
