"""When a file was handed in (coursekit.lms.collect): the LMS's submission time where there
is one (Canvas's API, Moodle's grading worksheet), else a time in the file's name, else the
file's own time; and the timestamp.txt nbgrader reads."""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

# ------------------------------------------------------------------ when

def _tz_name(zone) -> str:
    return getattr(zone, "_filename", None) or str(dt.datetime.now(zone).tzname())


def zone_of(name: str | None):
    """A time zone by name (Asia/Shanghai), or this machine's."""
    from dateutil import tz
    if not name:
        return tz.tzlocal()
    zone = tz.gettz(name)
    if zone is None:
        raise ValueError(f"unknown time zone {name!r} (use a name such as Asia/Shanghai or Europe/Berlin)")
    return zone


def to_utc(when: dt.datetime, zone) -> dt.datetime:
    """A local time in ``zone`` as nbgrader keeps times: UTC, without a zone."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return when.astimezone(dt.timezone.utc).replace(tzinfo=None)


def moodle_time(text: str, zone) -> dt.datetime | None:
    """Moodle's userdate() as its worksheet writes it, in the downloading user's zone:
    "Tuesday, 8 December 2026, 11:59 PM", or in Chinese "2026年12月8日 星期二 23:59"."""
    text = (text or "").strip()
    if not text or text == "-":
        return None
    m = re.search(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*日.*?(上午|下午)?\s*(\d{1,2}):(\d{2})", text)
    if m:
        y, mo, d, half, h, mi = m.groups()
        h = int(h) % 12 + (12 if half == "下午" else 0) if half else int(h)
        return to_utc(dt.datetime(int(y), int(mo), int(d), h, int(mi)), zone)
    from dateutil import parser
    try:
        return to_utc(parser.parse(text, fuzzy=True), zone)
    except (ValueError, OverflowError):
        return None


NAME_TIME = re.compile(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[-:](\d{2})(?:[-:](\d{2}))?")


def name_time(name: str, zone) -> dt.datetime | None:
    m = NAME_TIME.search(name)
    if not m:
        return None
    try:
        day = dt.date.fromisoformat(m.group(1))
        return to_utc(dt.datetime(day.year, day.month, day.day, int(m.group(2)), int(m.group(3)),
                                  int(m.group(4) or 0)), zone)
    except ValueError:
        return None


class CanvasTimes:
    """Each Canvas file's submission time, through Canvas's API (canvasapi): the
    submitted_at of the attempt that holds the file (its submission_history), else of
    the submission. A Canvas download is one assignment's: the chapter most of the
    archive's notebooks hold names it, so a notebook of the wrong chapter still gets
    its own submission's time."""

    def __init__(self, course, assignment_ids: dict[str, int]):
        self.course, self.ids, self.cache = course, dict(assignment_ids), {}

    def submission(self, chapter: str, user_id: str):
        from ..report.export import canvas_assignment_id
        key = (chapter, user_id)
        if key not in self.cache:
            try:
                aid = canvas_assignment_id(self.course, chapter, self.ids)
                self.cache[key] = None if aid is None else self.course.get_assignment(aid).get_submission(
                    int(user_id), include=["submission_history"])
            except Exception:  # noqa: BLE001 (Canvas said no: this one's time is unknown, and the table says so)
                self.cache[key] = None
        return self.cache[key]

    def time(self, chapter: str, user_id: str, attachment_id: int) -> dt.datetime | None:
        from nbgrader.utils import parse_utc
        sub = self.submission(chapter, user_id)
        if sub is None:
            return None
        for attempt in getattr(sub, "submission_history", None) or []:
            if attachment_id in {a.get("id") for a in attempt.get("attachments") or []} and attempt.get("submitted_at"):
                return parse_utc(attempt["submitted_at"])
        return parse_utc(sub.submitted_at) if getattr(sub, "submitted_at", None) else None


def stamp(when: dt.datetime) -> str:
    """timestamp.txt as nbgrader writes it (UTC)."""
    return f"{when:%Y-%m-%d %H:%M:%S.%f} UTC"


def read_stamp(path: Path) -> dt.datetime | None:
    from nbgrader.utils import parse_utc
    try:
        return parse_utc(path.read_text().strip())
    except (OSError, ValueError):
        return None
