"""Handing back: feedback pages and scores, out to the LMS the way it takes them in bulk.

    pages    each student's feedback page of a chapter (feedback/<student>/<chapter>/<chapter>.html)
             and its one score (coursekit.report.score); a chapter whose points still await
             grading (Standing.final is False) is held back everywhere
    moodle   Moodle's feedback-files archive, one per chapter (a Moodle assignment):
             returned/moodle/<chapter>.zip, each page in the participant's folder named as
             Moodle's own download named it (collected/submissions.json keeps it), which is
             what "Upload multiple feedback files in a zip" matches students by
    canvas   each page posted to the student's submission as a comment with the file
             attached, the score as the grade (coursekit.report.export.upload_canvas); a dry run
             that says what would be sent, unless told to send

Grades for Moodle travel in lms_moodle.csv (make grade writes it), as before.
"""
from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..report import export
from ..report.score import Standing, num
from .collect import COLLECTED, LEDGER, course_language

RETURNED = "returned"
FIXED_TIME = (2000, 1, 1, 0, 0, 0)   # every member's time: the same pages make the same archive, byte for byte

TEXT = {
    "moodle_title": ("Moodle：批量上传反馈文件（Upload multiple feedback files in a zip）",
                     "Moodle: feedback files to upload (Upload multiple feedback files in a zip)"),
    "moodle_zip": ("{path}：{n} 份反馈", "{path}: {n} feedback pages"),
    "nothing_graded": ("还没有评分（没有 gradebook.db）：先运行 make grade。", "Nothing graded yet (no gradebook.db): "
                       "run make grade first."),
    "moodle_empty": ("{chapter}：还没有可以发回的反馈（都在等待批改），没有写压缩包。",
                     "{chapter}: no feedback to return yet (all of it awaits grading); no archive written."),
    "moodle_none": ("没有从 Moodle 收集的作业：不写 Moodle 的压缩包。",
                    "No submission was collected from Moodle: no Moodle archive written."),
    "canvas_title": ("Canvas：每份作业一条评语，附上反馈页，连同分数", "Canvas: a comment with the feedback page "
                     "attached and the score, on each submission"),
    "canvas_none": ("没有给 Canvas 的地址和课程（CANVAS_URL=… CANVAS_COURSE=…，令牌放在环境变量 CANVAS_TOKEN）：不发送到 Canvas。",
                    "No Canvas address and course given (CANVAS_URL=... CANVAS_COURSE=..., the token in the "
                    "CANVAS_TOKEN environment variable): nothing for Canvas."),
    "canvas_line": ("{chapter} → Canvas 用户 {user}（{student}）：{grade} 分，{page}",
                    "{chapter} → Canvas user {user} ({student}): grade {grade}, {page}"),
    "no_page": ("没有反馈页", "no feedback page"),
    "dry_run": ("试运行：什么都没有发送。确认无误后加 --send（make return SEND=1）才真正发送 {n} 条。",
                "Dry run: nothing was sent. Add --send (make return SEND=1) to send these {n}."),
    "sent": ("已发送 {n} 条到 Canvas。", "Sent {n} to Canvas."),
    "failed": ("{chapter} → Canvas 用户 {user}（{student}）没有发送成功：{error}",
               "{chapter} → Canvas user {user} ({student}) failed: {error}"),
    "held": ("{student}/{chapter}：还有 {pending} 分待批改，没有发出（在 formgrader 里批改后再运行 make grade 和 make return）",
             "{student}/{chapter}: {pending} points await grading; not handed back (grade them in the formgrader, "
             "then make grade and make return again)"),
    "not_in_roster": ("{student}/{chapter}：不在 roster.csv 里，没有发给 Canvas", "{student}/{chapter}: not in "
                      "roster.csv; nothing for Canvas"),
    "no_lms_id": ("{student}/{chapter}：roster.csv 里没有 lms_id（Canvas 用户 id），没有发给 Canvas",
                  "{student}/{chapter}: no lms_id (the Canvas user id) in roster.csv; nothing for Canvas"),
    "comment": ("{chapter}：{score}。详细反馈见附件 {file}。", "{chapter}: {score}. The feedback page is attached "
                "({file})."),
    "comment_no_page": ("{chapter}：{score}。", "{chapter}: {score}."),
}


def word(key: str, lang: str, **fields) -> str:
    zh, en = TEXT[key]
    return (zh if lang == "zh" else en).format(**fields)


def page_of(root: Path, s: Standing) -> Path:
    return root / "feedback" / s.student / s.chapter / f"{s.chapter}.html"


def ledger(root: Path) -> dict:
    """Where each notebook in submitted/ came from (written by make collect)."""
    path = root / COLLECTED / LEDGER
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


# ------------------------------------------------------------------ Moodle

def moodle_members(root: Path, scores: list[Standing], chapter: str, came_from: dict) -> dict[str, Path]:
    """The archive's members for one chapter: "<participant folder>/<chapter>.html" -> page.
    Only final scores, only students whose submission came from Moodle."""
    out = {}
    for s in scores:
        record = came_from.get(f"{s.student}/{s.chapter}", {})
        if s.chapter == chapter and s.final and record.get("lms") == "moodle" and page_of(root, s).exists():
            out[f"{record['moodle_folder']}/{chapter}.html"] = page_of(root, s)
    return out


def zip_bytes(members: dict[str, Path]) -> bytes:
    """A zip of ``members`` (name -> file), the same bytes for the same pages (names in
    UTF-8, flagged as such, fixed member times)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, members[name].read_bytes())
    return buf.getvalue()


def moodle_archives(root: Path, scores: list[Standing], out: Path) -> list[tuple[Path, int]]:
    """returned/moodle/<chapter>.zip for every chapter with submissions collected from
    Moodle; (path, pages) each. An archive whose bytes would not change is not rewritten."""
    came_from = ledger(root)
    chapters = sorted({s.chapter for s in scores
                       if came_from.get(f"{s.student}/{s.chapter}", {}).get("lms") == "moodle"})
    written = []
    for ch in chapters:
        members = moodle_members(root, scores, ch, came_from)
        path = out / "moodle" / f"{ch}.zip"
        if members:    # an archive with nothing in it is not written
            data = zip_bytes(members)
            if not path.exists() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        written.append((path, len(members)))
    return written


# ------------------------------------------------------------------ the command

@dataclass
class Returned:
    lines: list[str] = field(default_factory=list)
    failed: int = 0
    sent: int = 0
    planned: int = 0


def hand_back(root: Path, chapter: str | None = None, canvas_url: str | None = None, token: str | None = None,
              canvas_course: int | None = None, assignment_ids: dict | None = None, send: bool = False,
              out: Path | None = None, course=None) -> Returned:
    """Write Moodle's feedback archives and post (or, by default, only show) the Canvas
    comments; see the module's docstring. ``course``: a canvasapi Course already at hand."""
    from grading import protocol

    from .collect import chapter_ids
    root = Path(root).resolve()
    out = out or root / RETURNED
    chapters = [chapter] if chapter else sorted(chapter_ids(root))
    url = protocol.gradebook_url(root)
    result = Returned()
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        result.lines.append(word("nothing_graded", course_language(root, chapters)))
        return result
    scores = export.read_gradebook(url, chapters)
    langs = {ch: course_language(root, [ch]) for ch in chapters}
    lang = course_language(root, chapters)
    say = result.lines.append
    for s in scores:
        if not s.final:
            say(word("held", langs[s.chapter], student=s.student, chapter=s.chapter,
                     pending=num(s.pending)))
    say(word("moodle_title", lang))
    archives = moodle_archives(root, scores, out)
    for path, n in archives:
        shown = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
        say("  " + (word("moodle_zip", lang, path=shown, n=n) if n else
                    word("moodle_empty", lang, chapter=path.stem)))
    if not archives:
        say("  " + word("moodle_none", lang))
    say(word("canvas_title", lang))
    if not (canvas_url and canvas_course) and course is None:
        say("  " + word("canvas_none", lang))
        return result
    roster_path = root / "roster.csv"
    roster = export.read_roster(roster_path) if roster_path.exists() else {}
    ids = {ch: (assignment_ids or {}).get(ch) for ch in chapters}
    feedback = {(s.student, s.chapter): page_of(root, s) for s in scores if page_of(root, s).exists()}

    def comment(s: Standing) -> str:
        page = feedback.get((s.student, s.chapter))
        key = "comment" if page else "comment_no_page"
        return word(key, langs[s.chapter], chapter=s.chapter, score=s.line(langs[s.chapter]),
                    file=page.name if page else "")

    posts, skipped = export.canvas_posts(scores, roster, chapters, feedback, comment)
    for s, why in skipped:
        if why != "pending":   # already said above
            say("  " + word(why, lang, student=s.student, chapter=s.chapter))
    for p in posts:
        page = p.page.relative_to(root).as_posix() if p.page else word("no_page", lang)
        say("  " + word("canvas_line", lang, chapter=p.chapter, user=p.user_id, student=p.student, grade=p.grade,
                        page=page))
    result.planned = len(posts)
    if not send:
        say(word("dry_run", lang, n=len(posts)))
        return result
    failed: list = []
    result.sent = export.upload_canvas(canvas_url, token, canvas_course, scores, roster, ids, feedback=feedback,
                                       comments=comment, course=course, failed=failed)
    for p, exc in failed:
        say("  " + word("failed", lang, chapter=p.chapter, user=p.user_id, student=p.student, error=exc))
    result.failed = len(failed)
    say(word("sent", lang, n=result.sent))
    return result
