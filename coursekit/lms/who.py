"""Who handed a file in (coursekit.lms.collect): the student, from the LMS's own id in the
file's name (an LMS layout is data: a named regular expression for nbgrader's
FileNameCollectorPlugin), mapped through roster.csv and the grading worksheet."""
from __future__ import annotations

import csv
import functools
import logging
import os
import re
from dataclasses import dataclass, field

from .sources import Entry
from .when import _tz_name, moodle_time

PLAIN_KEYS = ("student", "sis_login_id", "sis_user_id", "email", "lms_id")


# ------------------------------------------------------------------ who: layouts (data) and the roster

# Canvas (lib/content_zipper.rb): "<sortable name, lower case, only word characters>[_LATE]_<user id>_
# <attachment id>_<file's display name>"; a file uploaded again under the same name is renamed "name-1.ext".
# Anonymous grading writes "anon_<anonymous id>" instead of the name and user id.
CANVAS = (r"^(?:[^/]+/)*?(?P<name>[^/]*?)(?:_(?P<late>LATE))?_(?P<student_id>\d+)_(?P<seq>\d+)_"
          r"(?P<file_id>[^/]+)(?:/.*)?$")
CANVAS_ANON = r"^(?:[^/]+/)*?anon_(?P<student_id>[A-Za-z0-9]+)(?:_(?P<late>LATE))?_(?P<seq>\d+)_(?P<file_id>[^/]+)"
# Moodle (mod/assign/classes/downloader.php): one folder per participant, "<full name, '_' made ' '>_
# <participant id of this assignment>_assignsubmission_file" (4.1 and later; "..._file_" from 3.1 to 4.0),
# or, with "download as folders" off, the files themselves prefixed so.
MOODLE = (r"^(?:[^/]+/)*?(?P<folder>(?P<name>[^/_]+)_(?P<student_id>\d+)_assignsubmission_(?P<plugin>[a-z]+))"
          r"(?P<sep>_?/|_)(?P<file_id>.+)$")
LAYOUTS = {"canvas": CANVAS, "canvas_anon": CANVAS_ANON, "moodle": MOODLE}


@functools.lru_cache(maxsize=None)
def _collector(pattern: str):
    """nbgrader's file-name collector for one layout (its warnings about names that
    do not fit stay quiet: a name that does not fit is reported in the table)."""
    from nbgrader.plugins import FileNameCollectorPlugin
    quiet = logging.getLogger("coursekit.lms.collect")
    quiet.setLevel(logging.ERROR)
    return FileNameCollectorPlugin(named_regexp=pattern, valid_ext=[""], log=quiet)


def match(layout: str, inner: str) -> dict | None:
    """The named groups of ``inner`` under a layout, or None (the collector checks the
    extension too: every file is asked about, so each name's own is allowed)."""
    c = _collector(LAYOUTS[layout])
    c.valid_ext = [os.path.splitext(inner)[1]]
    return c.collect(inner)


def detect(entries: list[Entry]) -> str:
    """The layout of one FROM: Moodle's folder marker, else Canvas's names (for most of
    its files, at any depth: a folder holding the download is the download), else plain."""
    names = [e.inner for e in entries]
    if any(match("moodle", n) for n in names):
        return "moodle"
    canvas = sum(1 for n in names if match("canvas", n) or match("canvas_anon", n))
    return "canvas" if names and canvas * 2 >= len(names) else "plain"


@dataclass
class Who:
    student: str | None
    why: tuple[str, dict] | None = None
    lms: str = "plain"
    late_marker: bool = False
    seq: int = 0                      # Canvas's attachment id: a later upload has a larger one
    ids: dict = field(default_factory=dict)


@dataclass
class Worksheet:
    """Moodle's grading worksheets: participant id -> (name, email, id number, submission time)."""
    rows: dict[str, dict] = field(default_factory=dict)
    tz: str = ""

    @classmethod
    def read(cls, paths, zone) -> Worksheet:
        ws = cls(tz=_tz_name(zone))
        for path in paths or ():
            try:
                with open(path, newline="", encoding="utf-8-sig") as f:
                    reader = csv.DictReader(f)
                    fields = reader.fieldnames or []
                    rows = list(reader)
            except UnicodeDecodeError:
                fields = []
            if "Identifier" not in fields:
                raise ValueError(f"{path}: not a Moodle grading worksheet (a CSV file with an 'Identifier' column); "
                                 "download it from the assignment: View all submissions, Download grading worksheet")
            for row in rows:
                m = re.search(r"(\d+)\s*$", row.get("Identifier") or "")
                if m:
                    ws.rows[m.group(1)] = {
                        "name": row.get("Full name", ""), "email": (row.get("Email address") or "").strip(),
                        "idnumber": (row.get("ID number") or "").strip(),
                        "time": moodle_time(row.get("Last modified (submission)", ""), zone)}
        return ws


class Roster:
    """roster.csv, looked up by its id columns (never by name)."""

    def __init__(self, rows: dict[str, dict[str, str]] | None):
        self.rows = rows
        self.by: dict[str, dict[str, set[str]]] = {}
        for student, r in (rows or {}).items():
            for col in PLAIN_KEYS:
                value = (r.get(col) or "").strip()
                if value:
                    key = value.lower() if col == "email" else value
                    self.by.setdefault(col, {}).setdefault(key, set()).add(student)

    def find(self, column: str, value: str) -> str | None:
        key = value.strip().lower() if column == "email" else value.strip()
        hits = self.by.get(column, {}).get(key, set())
        return next(iter(hits)) if len(hits) == 1 else None

    def plain(self, inner: str, chapters) -> tuple[str | None, tuple[str, dict] | None]:
        """A plain name: the outermost part of the path that is a roster id, or starts
        with one followed by _ - . or a space (the longest id wins)."""
        parts = [re.sub(r"\.(ipynb|zip)$", "", p, flags=re.I) for p in inner.split("/")]
        if self.rows is None:
            named = [p for p in parts[:-1] if p not in chapters] or [parts[-1]]
            student = named[0]
            if re.fullmatch(r"\w[\w.@-]*", student) and student not in chapters:
                return student, None
            return None, ("plain_no_name", {})
        for part in parts:
            best: dict[int, set[str]] = {}
            for col in PLAIN_KEYS:
                for key, students in self.by.get(col, {}).items():
                    text = part.lower() if col == "email" else part
                    if text == key or (text.startswith(key) and text[len(key)] in "_-. "):
                        best.setdefault(len(key), set()).update(students)
            if best:
                found = best[max(best)]
                if len(found) == 1:
                    return next(iter(found)), None
                return None, ("plain_ambiguous", {"students": ", ".join(sorted(found))})
        return None, ("plain_no_match", {})


def who(layout: str, entry: Entry, roster: Roster, worksheet: Worksheet, chapters) -> Who:
    """The student a file belongs to, by the LMS's id in its name."""
    if layout == "canvas":
        g = match("canvas", entry.inner)
        if g is None:
            a = match("canvas_anon", entry.inner)
            if a:
                return Who(None, ("canvas_anonymous", {"id": a["student_id"]}), "canvas")
            return Who(*roster.plain(entry.inner, chapters), lms="plain")
        late, seq, ids = bool(g["late"]), int(g["seq"]), {"canvas_user": g["student_id"]}
        if roster.rows is None:
            return Who(None, ("no_roster", {"lms": "Canvas"}), "canvas", late, seq, ids)
        student = roster.find("lms_id", g["student_id"])
        why = None if student else ("canvas_not_in_roster", {"id": g["student_id"], "name": g["name"]})
        return Who(student, why, "canvas", late, seq, ids)
    if layout == "moodle":
        g = match("moodle", entry.inner)
        if g is None:
            return Who(*roster.plain(entry.inner, chapters), lms="plain")
        pid = g["student_id"]
        ids = {"moodle_participant": pid, "moodle_folder": g["folder"] + (g["sep"].rstrip("/") or "")}
        if not worksheet.rows:
            return Who(None, ("moodle_no_worksheet", {"id": pid}), "moodle", ids=ids)
        row = worksheet.rows.get(pid)
        if row is None:
            return Who(None, ("moodle_not_in_worksheet", {"id": pid, "name": g["name"]}), "moodle", ids=ids)
        if roster.rows is None:
            return Who(None, ("no_roster", {"lms": "Moodle"}), "moodle", ids=ids)
        student = (row["idnumber"] and roster.find("lms_id", row["idnumber"])) or \
            (row["email"] and roster.find("email", row["email"]))
        why = None if student else ("moodle_not_in_roster", {"id": pid, "name": row["name"], "email": row["email"]})
        return Who(student or None, why, "moodle", ids=ids)
    return Who(*roster.plain(entry.inner, chapters), lms="plain")
