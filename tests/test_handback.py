"""make return: feedback and scores out to the LMS in bulk, and the whole round trip.

- Moodle: the feedback-files archive, read back the way Moodle's "Upload multiple
  feedback files in a zip" reads it (tests/lms.py moodle_import);
- Canvas: each feedback page posted as a submission comment with the file attached
  and the score as the grade, against a small Canvas on 127.0.0.1 (tests/lms.py
  FakeCanvas); a dry run first that sends nothing;
- the round trip, graded for real (sandboxed): a Canvas download, a Moodle download
  and a plain folder collected, graded, handed back; then a later download with one
  resubmission regrades only that notebook.
"""
from __future__ import annotations

import csv
import datetime as dt
import warnings
import zipfile

import lms
import pytest

import coursekit.base.warm  # noqa: F401  (a new gradebook gets its schema revision in-process, as make grade does)
from coursekit.lms import collect, handback
from coursekit.report import export
from grading import protocol

CH1, CH2 = lms.CHAPTERS
COURSE, A2 = 7, 102
ROSTER = [{"student": "wang", "name": "王芳", "lms_id": "2001", "email": "wang@uni.edu"},
          {"student": "zhang1", "name": "张伟", "lms_id": "2002", "email": "zhang1@uni.edu"},
          {"student": "zhang2", "name": "张伟", "lms_id": "2003", "email": "zhang2@uni.edu"},
          {"student": "omar", "name": "Omar Haddad", "lms_id": "", "email": "omar@uni.edu"}]


def add_scores(root, chapter, scores):
    """Scores in the course's gradebook: student -> (test points, hand-graded points or None)."""
    from nbgrader.api import Gradebook
    with Gradebook(protocol.gradebook_url(root), protocol.COURSE_ID) as gb:
        gb.update_or_create_assignment(chapter)
        gb.update_or_create_notebook(chapter, chapter)
        gb.update_or_create_grade_cell("test_x", chapter, chapter, max_score=4.0, cell_type="code")
        gb.update_or_create_grade_cell("essay", chapter, chapter, max_score=2.0, cell_type="markdown")
        for student, (auto, manual) in scores.items():
            gb.add_student(student)
            gb.add_submission(chapter, student)
            g = gb.find_grade("test_x", chapter, chapter, student)
            g.auto_score, g.needs_manual_grade = auto, False
            e = gb.find_grade("essay", chapter, chapter, student)
            e.auto_score, e.manual_score, e.needs_manual_grade = None, manual, manual is None
        gb.db.commit()


def add_pages(root, chapter, students):
    pages = {}
    for s in students:
        page = root / "feedback" / s / chapter / f"{chapter}.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f"<html><body>{s}: 反馈 {chapter}</body></html>", encoding="utf-8")
        pages[s] = page.read_bytes()
    return pages


def canvas(fake):
    return dict(canvas_url=fake.url, token=fake.TOKEN, canvas_course=COURSE)


@pytest.fixture
def quiet_http():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # canvasapi warns about http:// (a local server here)
        yield


def test_canvas_gets_each_page_as_a_comment_with_the_score(tmp_path, quiet_http):
    root = lms.course(tmp_path / "course")
    lms.write_roster(root, ROSTER)
    add_scores(root, CH2, {"wang": (4.0, 2.0), "zhang1": (1.0, 0.5), "zhang2": (4.0, None), "omar": (3.0, 2.0),
                           "ghost": (4.0, 2.0)})
    pages = add_pages(root, CH2, ["wang", "zhang1", "zhang2", "omar", "ghost"])
    attempts = {(A2, uid): [("2026-12-08T10:00:00Z", [1])] for uid in (2001, 2002, 2003)}
    with lms.FakeCanvas(COURSE, {101: CH1, A2: CH2}, attempts) as fake:
        dry = handback.hand_back(root, chapter=CH2, **canvas(fake))
        assert fake.requests == [], "a dry run sends nothing"
        text = "\n".join(dry.lines)
        assert f"{CH2} → Canvas 用户 2001（wang）：6 分，feedback/wang/{CH2}/{CH2}.html" in text
        assert f"{CH2} → Canvas 用户 2002（zhang1）：1.5 分" in text
        assert f"zhang2/{CH2}：还有 2 分待批改，没有发出" in text
        assert f"omar/{CH2}：roster.csv 里没有 lms_id" in text and f"ghost/{CH2}：不在 roster.csv 里" in text
        assert "试运行：什么都没有发送" in text and dry.planned == 2
        sent = handback.hand_back(root, chapter=CH2, send=True, **canvas(fake))
    assert sent.sent == 2 and sent.failed == 0
    # the final scores as grades; nothing for the one awaiting grading
    assert fake.grades == {(A2, 2001): "6", (A2, 2002): "1.5"}
    # each page uploaded for that student's submission comment, then attached by its id
    by_user = {c["user"]: c for c in fake.comments}
    assert set(by_user) == {2001, 2002}
    for uid, student in ((2001, "wang"), (2002, "zhang1")):
        (fid,) = by_user[uid]["file_ids"]
        assert fake.files[fid]["data"] == pages[student] and fake.files[fid]["name"] == f"{CH2}.html"
        assert fake.files[fid]["for"] == (A2, uid)
    assert by_user[2001]["text"] == f"{CH2}：6 / 6 分。详细反馈见附件 {CH2}.html。"
    # the request shapes of Canvas's API: announce (name, size), upload (multipart, file last), PUT the submission
    writes = [(r["method"], r["path"].rsplit("/", 2)[-2:]) for r in fake.writes()]
    assert writes == [("POST", ["comments", "files"]), ("POST", ["upload", "u1"]), ("PUT", ["submissions", "2001"]),
                      ("POST", ["comments", "files"]), ("POST", ["upload", "u2"]), ("PUT", ["submissions", "2002"])]
    put = next(r for r in fake.writes() if r["method"] == "PUT")
    assert put["type"].startswith("application/x-www-form-urlencoded")
    assert b"comment%5Bfile_ids%5D%5B%5D=" in put["body"] and b"submission%5Bposted_grade%5D=6" in put["body"]
    assert all(r["auth"] is None for r in fake.writes() if "/upload/" in r["path"]), "the upload URL takes no token"
    # the assignment was found by its name (lms_canvas.csv's import names it after the chapter)
    assert any(r["query"].get("search_term") == [CH2] for r in fake.requests)


def test_canvas_failures_are_said_and_the_others_still_go(tmp_path, quiet_http):
    root = lms.course(tmp_path / "course")
    lms.write_roster(root, ROSTER)
    add_scores(root, CH2, {"wang": (4.0, 2.0), "zhang1": (4.0, 2.0)})
    add_pages(root, CH2, ["wang", "zhang1"])
    with lms.FakeCanvas(COURSE, {A2: CH2}, {(A2, 2002): [("2026-12-08T10:00:00Z", [1])]}) as fake:   # no 2001
        result = handback.hand_back(root, chapter=CH2, send=True, assignment_ids={CH2: A2}, **canvas(fake))
    assert (result.sent, result.failed) == (1, 1) and fake.grades == {(A2, 2002): "6"}
    assert any(line.strip().startswith(f"{CH2} → Canvas 用户 2001（wang）没有发送成功") for line in result.lines)


def test_moodle_feedback_archive_is_what_moodles_importer_takes(tmp_path):
    root = lms.course(tmp_path / "course")
    lms.write_roster(root, ROSTER)
    pid = {"wang": 81001, "zhang1": 81002, "zhang2": 81003}
    files = [("王芳", 81001, f"{CH2}.ipynb", lms.notebook(CH2, "wang"), "4.1"),
             ("张伟", 81002, f"{CH2}.ipynb", lms.notebook(CH2, "zhang1"), "3.9"),
             ("张伟", 81003, f"{CH2}.ipynb", lms.notebook(CH2, "zhang2"), "4.1")]
    zpath = tmp_path / "moodle.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for name, p, fn, data, version in files:
            zf.writestr(f"{lms.moodle_folder(name, p, version)}/{fn}", data)
    sheet = lms.moodle_worksheet(tmp_path / "sheet.csv", [(pid[s], r["name"], r["email"], dt.datetime(2026, 12, 8, 9))
                                                          for r in ROSTER for s in [r["student"]] if s in pid])
    got = collect.collect(root, [zpath], worksheets=[sheet], timezone="Asia/Shanghai")
    assert len(got.of("collected")) == 3
    add_scores(root, CH2, {"wang": (4.0, 2.0), "zhang1": (2.0, 1.0), "zhang2": (4.0, None), "omar": (4.0, 2.0)})
    pages = add_pages(root, CH2, ["wang", "zhang1", "zhang2", "omar"])
    result = handback.hand_back(root)
    archive = root / "returned" / "moodle" / f"{CH2}.zip"
    assert [line for line in result.lines if "returned/moodle" in line] == [f"  returned/moodle/{CH2}.zip：2 份反馈"]
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        imported = lms.moodle_import(names, {p: s for s, p in pid.items()})
        assert sorted(imported.values()) == [("wang", "assignsubmission", "file", f"{CH2}.html"),
                                             ("zhang1", "assignsubmission", "file", f"{CH2}.html")]
        for name, (student, *_) in imported.items():
            assert zf.read(name) == pages[student]
            assert zf.getinfo(name).flag_bits & 0x800, "names in UTF-8, and said to be"
    assert f"张伟_81002_assignsubmission_file_/{CH2}.html" in names   # as that Moodle (3.9) named the folder
    # zhang2 awaits grading: held back, and said; omar's work did not come from Moodle
    assert any(f"zhang2/{CH2}：还有 2 分待批改" in line for line in result.lines)
    before = archive.read_bytes()
    handback.hand_back(root)
    assert archive.read_bytes() == before, "the same pages make the same archive"
    assert "没有给 Canvas 的地址和课程" in "\n".join(result.lines)


# ------------------------------------------------------------------ the round trip, graded

@pytest.mark.system
def test_round_trip_canvas_moodle_and_a_folder(tmp_path, quiet_http):
    """Collect a Canvas download (chapter 2), a Moodle download with its worksheet
    (chapter 1) and a plain folder; grade (the real pipeline, sandboxed); hand back.
    Then a later Canvas download in which one student handed in again: only that
    notebook is graded again."""
    from nbgrader.api import Gradebook

    from coursekit.grade import pipeline
    from coursekit.grade.sandbox import sandbox_available
    root = lms.course(tmp_path / "course")
    lms.write_roster(root, ROSTER[:3])
    due = dt.datetime(2026, 12, 8, 15, 59, 59)
    with Gradebook(protocol.gradebook_url(root), protocol.COURSE_ID) as gb:   # nbgrader db assignment add ... --duedate
        gb.add_assignment(CH1, duedate=due)
        gb.add_assignment(CH2, duedate=due)
    # Canvas, chapter 2: wang on time, zhang1 late by two hours
    nb = {s: lms.notebook(CH2, s) for s in ("wang", "zhang1")}
    z1 = lms.canvas_zip(tmp_path / "c1.zip", [("王, 芳", 2001, 501, f"{CH2}.ipynb", False, nb["wang"]),
                                              ("张, 伟", 2002, 502, f"{CH2}.ipynb", True, nb["zhang1"])])
    attempts = {(A2, 2001): [("2026-12-08T12:00:00Z", [501])], (A2, 2002): [("2026-12-08T17:59:59Z", [502])]}
    # Moodle, chapter 1: zhang2 (the other 张伟), in Shanghai time, 30 minutes late
    mz = lms.moodle_zip(tmp_path / "m.zip", [("张伟", 91003, f"{CH1}.ipynb", lms.notebook(CH1, "zhang2"))])
    sheet = lms.moodle_worksheet(tmp_path / "w.csv", [(91003, "张伟", "zhang2@uni.edu", dt.datetime(2026, 12, 9, 0, 29))])
    # a plain folder: wang's chapter 1, by e-mail
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "wang@uni.edu.ipynb").write_bytes(lms.notebook(CH1, "wang"))
    with lms.FakeCanvas(COURSE, {101: CH1, A2: CH2}, attempts, enrolled=(2001, 2002, 2003)) as fake:
        course = export.canvas_course(fake.url, fake.TOKEN, COURSE)
        got = collect.collect(root, [z1, mz, inbox], worksheets=[sheet], timezone="Asia/Shanghai", canvas=course)
        assert len(got.of("collected")) == 4 and not got.left_out
        assert {r.who for r in got.of("late")} == {f"zhang1/{CH2}", f"zhang2/{CH1}"}

        sandbox = sandbox_available()[0]
        jobs = pipeline.grade(root, sandbox=sandbox, quiet=True, report=False)
        assert sorted((j.student, j.chapter) for j in jobs) == [("wang", CH1), ("wang", CH2), ("zhang1", CH2),
                                                                ("zhang2", CH1)]
        with open(root / "grades_by_exercise.csv", newline="", encoding="utf-8") as f:
            table = {r["student"]: r for r in csv.DictReader(f)}
        assert float(table["zhang1"][f"{CH2} seconds late"]) == 2 * 3600
        assert float(table["zhang2"][f"{CH1} seconds late"]) == 29 * 60 + 1
        assert float(table["wang"][f"{CH2} seconds late"]) == 0 and table["wang"][f"{CH2} submitted"].startswith(
            "2026-12-08 12:00:00")
        with open(root / "grades.csv", newline="", encoding="utf-8") as f:
            graded = [(r["student_id"], r["assignment"]) for r in csv.DictReader(f) if r["timestamp"]]
        assert sorted(graded) == sorted((j.student, j.chapter) for j in jobs), "one result per student and chapter"

        # the instructor grades the written answers of chapter 2 in the formgrader; zhang2's chapter 1 waits
        with Gradebook(protocol.gradebook_url(root), protocol.COURSE_ID) as gb:
            for s in ("wang", "zhang1"):
                gb.find_grade("first_row", CH2, CH2, s).manual_score = 2.0
            gb.find_grade("derivation", CH1, CH1, "wang").manual_score = 3.0
            gb.db.commit()
        # a later Canvas download: zhang1 handed chapter 2 in again
        fixed = lms.notebook(CH2, "zhang1 again")
        z2 = lms.canvas_zip(tmp_path / "c2.zip", [("王, 芳", 2001, 501, f"{CH2}.ipynb", False, nb["wang"]),
                                                  ("张, 伟", 2002, 777, f"{CH2}-1.ipynb", True, fixed)])
        fake.attempts[(A2, 2002)].append(("2026-12-09T10:00:00Z", [777]))
        again = collect.collect(root, [z2], canvas=course)
        assert [r.who for r in again.of("resubmitted")] == [f"zhang1/{CH2}"]
        assert [r.who for r in again.of("unchanged")] == [f"wang/{CH2}"]
        jobs = pipeline.grade(root, sandbox=sandbox, quiet=True, report=False)
        assert {(j.student, j.chapter) for j in jobs if not j.reused} == {("zhang1", CH2)}
        with Gradebook(protocol.gradebook_url(root), protocol.COURSE_ID) as gb:   # zhang1 now awaits grading again
            gb.find_grade("first_row", CH2, CH2, "zhang1").manual_score = 1.0
            gb.db.commit()
        pipeline.grade(root, sandbox=sandbox, quiet=True, report=False)   # the new manual grade: feedback only

        back = handback.hand_back(root, send=True, assignment_ids={CH2: A2}, course=course, **canvas(fake))
    text = "\n".join(back.lines)
    # every final score goes to Canvas (wang's chapter 1 came from the folder, but Canvas grades wang too)
    assert back.sent == 3 and not back.failed
    assert set(fake.grades) == {(101, 2001), (A2, 2001), (A2, 2002)}
    assert float(fake.grades[(A2, 2002)]) == float(fake.grades[(A2, 2001)]) - 1     # the model answers; 1 of 2 by hand
    pages = {c["user"]: fake.files[c["file_ids"][0]]["data"] for c in fake.comments if c["assignment"] == A2}
    assert pages[2002] == (root / "feedback" / "zhang1" / CH2 / f"{CH2}.html").read_bytes()
    assert "zhang1 again" in pages[2002].decode(), "the page of the notebook handed in again"
    # Moodle: zhang2's chapter 1 awaits grading, so the archive holds nothing for it yet
    assert not (root / "returned" / "moodle" / f"{CH1}.zip").exists()
    assert f"{CH1}：还没有可以发回的反馈" in text and f"zhang2/{CH1}：还有 3 分待批改" in text


def test_the_return_command_is_a_dry_run_unless_told_to_send(tmp_path, quiet_http, monkeypatch, capsys):
    from coursekit import cli
    root = lms.course(tmp_path / "course")
    lms.write_roster(root, ROSTER)
    add_scores(root, CH2, {"wang": (4.0, 2.0)})
    add_pages(root, CH2, ["wang"])
    with lms.FakeCanvas(COURSE, {A2: CH2}, {(A2, 2001): [("2026-12-08T10:00:00Z", [1])]}) as fake:
        args = ["return", "--root", str(root), "--canvas-url", fake.url, "--canvas-course", str(COURSE),
                "--assignment", f"{CH2}={A2}"]
        assert cli.main(args) == 2, "no token, no Canvas"
        monkeypatch.setenv("CANVAS_TOKEN", fake.TOKEN)
        assert cli.main(args) == 0 and fake.requests == []
        assert "试运行：什么都没有发送" in capsys.readouterr().out
        assert cli.main([*args, "--send"]) == 0
    assert fake.grades == {(A2, 2001): "6"} and len(fake.comments) == 1
    assert "已发送 1 条到 Canvas" in capsys.readouterr().out
