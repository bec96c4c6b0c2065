"""What learning-management systems hand an instructor, made here for the tests.

- ``canvas_zip``: Canvas's "Download Submissions" archive, named as Canvas's
  lib/content_zipper.rb names each file: the student's sortable name in lower
  case with everything but word characters removed, ``LATE`` when Canvas counts
  the submission late, the Canvas user id, the attachment id and the file's
  display name (``name-1.ipynb`` when a file of that name was uploaded before).
- ``moodle_zip``: Moodle's "Download all submissions", as mod/assign/classes/
  downloader.php writes it: one folder per participant, ``<full name with '_' made
  ' '>_<participant id>_assignsubmission_file`` (Moodle 4.1 and later; 3.1 to 4.0
  end the folder in ``_``), and ``moodle_worksheet``: the assignment's grading
  worksheet (Identifier "Participant N", Full name, Email address, ...,
  "Last modified (submission)" as userdate() writes it).
- ``moodle_import``: which participant and file Moodle's "Upload multiple feedback
  files in a zip" takes each member of an archive for
  (mod/assign/feedback/file/importziplib.php, is_valid_filename_for_import).
- ``FakeCanvas``: the handful of Canvas API endpoints the course uses, on
  127.0.0.1, with the request shapes of Canvas's API documentation, recording
  every request.
"""
from __future__ import annotations

import csv
import datetime as dt
import email.parser
import email.policy
import io
import json
import re
import threading
import urllib.parse
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import nbformat
from harness import ROOT, make_submission

CHAPTERS = ("ch01_attention", "ch02_causal_mask")


# ------------------------------------------------------------------ notebooks and the course

def course(root: Path, chapters=CHAPTERS) -> Path:
    """A course folder: nbgrader's configuration and the chapters' source and release."""
    import shutil
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    for ch in chapters:
        for part in ("source", "release"):
            shutil.copytree(ROOT / part / ch, root / part / ch)
    return root


def notebook(chapter: str, tag: str = "", replace: dict | None = None) -> bytes:
    """The release of ``chapter`` with the model answers filled in, as a student hands
    it in; ``tag`` (a comment in the first answer) makes each student's file their own."""
    release = nbformat.read(ROOT / "release" / chapter / f"{chapter}.ipynb", as_version=4)
    source = nbformat.read(ROOT / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    nb = make_submission(release, source, replace)
    if tag:
        first = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code")
        first.source += f"\n# {tag}"
    return nbformat.writes(nb).encode()


def write_roster(root: Path, rows: list[dict]) -> None:
    cols = ("student", "name", "lms_id", "sis_user_id", "sis_login_id", "section", "email")
    with open(root / "roster.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in cols})


def tree(root: Path, under: str = "submitted") -> dict[str, bytes]:
    """Every file under root/under, by its path: what "changes nothing" compares."""
    base = root / under
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()} \
        if base.exists() else {}


# ------------------------------------------------------------------ Canvas

def canvas_name(sortable_name: str, user_id: int, late: bool) -> str:
    """Canvas's per-submission prefix (ContentZipper#get_filename)."""
    name = re.sub(r"_(\d+)_", r"\1", sortable_name).lower()
    return re.sub(r"[^\w]", "", "_".join([name, *(["LATE"] if late else []), str(user_id)]))


def canvas_zip(path: Path, files) -> Path:
    """files: (sortable name, user id, attachment id, display name, late, bytes)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for sortable, uid, att, display, late, data in files:
            display = re.sub(r'[\x00/\\:*?"<>|]+', "_", display)
            zf.writestr(f"{canvas_name(sortable, uid, late)}_{att}_{display}", data)
    return path


class _GBKName(zipfile.ZipInfo):
    """A member named in GBK without the UTF-8 flag, as Chinese Windows' own zip writes it."""

    def _encodeFilenameFlags(self):
        return self.filename.encode("gbk"), self.flag_bits & ~0x800


def inner_zip(files: dict[str, bytes], utf8: bool = True) -> bytes:
    """A zip a student made (``utf8=False``: names in GBK, as on Chinese Windows)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in files.items():
            zf.writestr((zipfile.ZipInfo if utf8 else _GBKName)(name, (2026, 12, 1, 10, 0, 0)), data)
    return buf.getvalue()


class FakeCanvas:
    """Canvas's API on 127.0.0.1 for one course: GET course, assignments (search_term),
    assignment, submission; POST a submission comment's file (then the upload itself);
    PUT a submission (comment[text_comment], comment[file_ids][], submission[posted_grade])."""

    TOKEN = "test-token"

    def __init__(self, course_id: int, assignments: dict[int, str],
                 attempts: dict[tuple[int, int], list[tuple[str | None, list[int]]]], enrolled=()):
        """attempts: (assignment id, user id) -> [(submitted_at, attachment ids)], oldest first;
        enrolled: more students of the course, who handed nothing in (an unsubmitted submission)."""
        self.course_id, self.assignments, self.attempts = course_id, dict(assignments), dict(attempts)
        for uid in enrolled:
            for aid in self.assignments:
                self.attempts.setdefault((aid, uid), [])
        self.requests: list[dict] = []
        self.files: dict[int, dict] = {}          # uploaded comment files: id -> name, bytes, for
        self.pending_uploads: dict[str, dict] = {}
        self.announced = 0
        self.comments: list[dict] = []            # what each PUT left on a submission
        self.grades: dict[tuple[int, int], str] = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method):
                url = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                req = {"method": method, "path": url.path, "query": urllib.parse.parse_qs(url.query),
                       "auth": self.headers.get("Authorization"), "type": self.headers.get("Content-Type", ""),
                       "body": body}
                fake.requests.append(req)
                code, reply = fake.route(req)
                self._reply(code, reply)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PUT(self):
                self._handle("PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def writes(self) -> list[dict]:
        return [r for r in self.requests if r["method"] != "GET"]

    # ---------------------------------------------------------- the endpoints
    def route(self, req):
        path, method = req["path"], req["method"]
        if path.startswith("/files_api/upload/"):          # the upload itself: no token, multipart
            return self.upload(req, path.rsplit("/", 1)[1])
        if req["auth"] != f"Bearer {self.TOKEN}":
            return 401, {"errors": [{"message": "Invalid access token."}]}
        c = f"/api/v1/courses/{self.course_id}"
        if method == "GET" and path == c:
            return 200, {"id": self.course_id, "name": "Transformer"}
        if method == "GET" and path == f"{c}/assignments":
            term = req["query"].get("search_term", [""])[0]
            return 200, [{"id": a, "name": n, "course_id": self.course_id}
                         for a, n in sorted(self.assignments.items()) if term.lower() in n.lower()]
        m = re.fullmatch(rf"{c}/assignments/(\d+)(?:/submissions/(\d+)(/comments/files)?)?", path)
        if not m or int(m.group(1)) not in self.assignments:
            return 404, {"errors": [{"message": "The specified resource does not exist."}]}
        aid = int(m.group(1))
        if m.group(2) is None:
            return 200, {"id": aid, "name": self.assignments[aid], "course_id": self.course_id}
        uid = int(m.group(2))
        if (aid, uid) not in self.attempts:
            return 404, {"errors": [{"message": "The specified resource does not exist."}]}
        if method == "GET":
            return 200, self.submission(aid, uid, "submission_history" in req["query"].get("include[]", []))
        form = urllib.parse.parse_qs(req["body"].decode(), keep_blank_values=True)
        if m.group(3) and method == "POST":                 # step 1: tell Canvas about the file
            if not form.get("name") or not form.get("size"):
                return 400, {"errors": [{"message": "name and size are required"}]}
            self.announced += 1
            key = f"u{self.announced}"
            self.pending_uploads[key] = {"name": form["name"][0], "size": int(form["size"][0]), "for": (aid, uid)}
            return 200, {"upload_url": f"{self.url}/files_api/upload/{key}",
                         "upload_params": {"filename": form["name"][0], "content_type": "text/html"}}
        if method == "PUT" and not m.group(3):
            ids = [int(i) for i in form.get("comment[file_ids][]", [])]
            if any(self.files.get(i, {}).get("for") != (aid, uid) for i in ids):
                return 400, {"errors": [{"message": "file not uploaded for this submission's comments"}]}
            if "submission[posted_grade]" in form:
                self.grades[(aid, uid)] = form["submission[posted_grade]"][0]
            if "comment[text_comment]" in form or ids:
                self.comments.append({"assignment": aid, "user": uid, "file_ids": ids,
                                      "text": form.get("comment[text_comment]", [""])[0]})
            return 200, self.submission(aid, uid)
        return 405, {"errors": [{"message": "method not allowed"}]}

    def submission(self, aid, uid, history: bool = False):
        attempts = self.attempts[(aid, uid)]
        body = {"id": aid * 100000 + uid, "assignment_id": aid, "user_id": uid, "attempt": len(attempts) or None,
                "submitted_at": attempts[-1][0] if attempts else None, "grade": self.grades.get((aid, uid)),
                "workflow_state": "submitted" if attempts else "unsubmitted"}
        if history:
            body["submission_history"] = [
                {"attempt": i + 1, "submitted_at": at, "attachments": [{"id": a} for a in atts]}
                for i, (at, atts) in enumerate(attempts)]
        return body

    def upload(self, req, key):
        """Step 2: the multipart POST of upload_params and then the file, last."""
        spec = self.pending_uploads.pop(key, None)
        if spec is None or not req["type"].startswith("multipart/form-data"):
            return 400, {"message": "bad upload"}
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + req["type"].encode() + b"\r\n\r\n" + req["body"])
        parts = [(p.get_param("name", header="content-disposition"), p) for p in msg.iter_parts()]
        if not parts or parts[-1][0] != "file":
            return 400, {"message": "the file must be the last field"}
        fields = {n: p.get_content() for n, p in parts[:-1]}
        data = parts[-1][1].get_payload(decode=True)
        if fields.get("filename") != spec["name"] or len(data) != spec["size"]:
            return 400, {"message": "upload does not match what was announced"}
        fid = 9000 + len(self.files) + 1
        self.files[fid] = {"name": spec["name"], "data": data, "for": spec["for"]}
        return 201, {"id": fid, "url": f"{self.url}/files/{fid}/download", "display_name": spec["name"],
                     "size": len(data), "content-type": "text/html"}


# ------------------------------------------------------------------ Moodle

def moodle_folder(full_name: str, participant: int, version: str = "4.1") -> str:
    folder = f"{full_name.replace('_', ' ')}_{participant}_assignsubmission_file"
    return folder if version >= "4.1" else folder + "_"


def moodle_zip(path: Path, files, version: str = "4.1") -> Path:
    """files: (full name, participant id, file name, bytes). Moodle writes every member at
    the time of the download; an online-text submission goes in its own folder."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for full_name, pid, filename, data in files:
            if filename == "onlinetext.html":
                zf.writestr(f"{full_name}_{pid}_assignsubmission_onlinetext/{filename}", data)
            else:
                zf.writestr(f"{moodle_folder(full_name, pid, version)}/{filename}", data)
    return path


def userdate(when: dt.datetime) -> str:
    """Moodle's userdate() in English: "Tuesday, 8 December 2026, 11:59 PM"."""
    return f"{when:%A}, {when.day} {when:%B %Y}, {int(when.strftime('%I'))}:{when:%M %p}"


def moodle_worksheet(path: Path, rows) -> Path:
    """rows: (participant id, full name, email, submitted local time or None)."""
    head = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade", "Grade can be changed",
            "Last modified (submission)", "Last modified (grade)", "Feedback comments"]
    with open(path, "w", newline="", encoding="utf-8-sig") as f:
        w = csv.writer(f)
        w.writerow(head)
        for pid, name, mail, when in rows:
            w.writerow([f"Participant {pid}", name, mail, "Submitted for grading" if when else "No submission", "",
                        "100.00", "Yes", userdate(when) if when else "-", "-", ""])
    return path


def moodle_import(names, participants: dict[int, str]):
    """Moodle's feedback-zip importer, in Python: for each member name, (participant's
    student, plugin type, plugin name, file name) it would import, or None."""
    plugins = {("assignsubmission", "file"), ("assignsubmission", "onlinetext"), ("assignfeedback", "file")}
    out = {}
    for name in names:
        base = name.rsplit("/", 1)[-1]
        out[name] = None
        if name.endswith("/") or base.startswith((".", "~")):
            continue
        parts = name.split("/")
        while parts:
            info = parts.pop(0).split("_", 4)        # PHP explode('_', $part, 5)
            if len(info) < 4 or not info[1].isdigit() or int(info[1]) not in participants:
                continue
            if (info[2], info[3]) not in plugins:
                continue
            filename = "/".join([info[4] if len(info) == 5 else "", *parts])
            out[name] = (participants[int(info[1])], info[2], info[3], filename.lstrip("/"))
            break
    return out
