"""make collect: what Canvas, Moodle or a plain folder gives an instructor, into submitted/.

A class of 30 students over two chapters, in the archives each system really
produces (tests/lms.py), with the odd cases a real class brings: a late one, a
resubmission, two files in one attempt, a student not on the roster, two students
with the same display name, a notebook of the wrong chapter under a right name, a
PDF, a corrupt notebook, a zip inside the zip (named in GBK), a corrupt zip, and
Chinese names. Nothing here grades; tests/test_handback.py grades a few end to end.
"""
from __future__ import annotations

import datetime as dt
import shutil
import warnings
import zipfile

import lms
import nbformat
import pytest

from coursekit import cli
from coursekit.lms import collect
from coursekit.report import export

CH1, CH2 = lms.CHAPTERS
COURSE = 7
A1, A2 = 101, 102                       # the Canvas assignments of the two chapters
DUE = dt.datetime(2026, 12, 8, 15, 59, 59)    # UTC: 23:59:59 in Shanghai
NAMES = ["王芳", "李娜", "刘洋", "陈静", "杨磊", "赵敏", "黄勇", "周杰", "吴霞", "徐明", "张伟", "张伟", "孙丽",
         "马超", "朱琳", "胡斌", "郭峰", "何欢", "高远", "林晓", "Alice Martin", "Bob Chen", "Carla Diaz",
         "David O_Neil", "Emma Brown", "Farid Khan", "Grace Lee", "Hugo Silva", "Ines Costa", "Jonas Berg"]
STUDENTS = [f"s{i:02d}" for i in range(1, 31)]
UID = {s: 1000 + i for i, s in enumerate(STUDENTS, 1)}
NAME = dict(zip(STUDENTS, NAMES))


def sortable(name: str) -> str:
    """Canvas's sortable name: "Last, First" (for a Chinese name, family name first)."""
    if name.isascii():
        first, _, last = name.rpartition(" ")
        return f"{last}, {first}"
    return f"{name[0]}, {name[1:]}"


@pytest.fixture(scope="module")
def nbs():
    """Each student's own notebook of each chapter (the model answers, tagged with the name)."""
    out = {(s, ch): lms.notebook(ch, tag=f"{s} {ch}") for s in STUDENTS for ch in lms.CHAPTERS}
    out["s07 first"] = lms.notebook(CH1, tag="s07 first try")
    out["s13 wrong"] = lms.notebook(CH2, tag="s13 put ch02 in ch01")
    out["stranger"] = lms.notebook(CH1, tag="not on the roster")
    return out


def make_course(tmp_path, roster: bool = True):
    root = lms.course(tmp_path / "course")
    if roster:
        lms.write_roster(root, [{"student": s, "name": NAME[s], "lms_id": str(UID[s]), "sis_user_id": f"2026{s[1:]}",
                                 "email": f"{s}@uni.edu"} for s in STUDENTS])
    return root


CORRUPT = b'{"cells": [{"cell_type": "code", "source": "def softmax(x'


def canvas_archives(tmp_path, nbs):
    """Canvas's download of each chapter's assignment (see the module's docstring)."""
    files1, files2 = [], []
    for s in STUDENTS:
        uid, name, att = UID[s], sortable(NAME[s]), 3000 + UID[s]
        display = "作业1.ipynb" if s in ("s02", "s03") else f"{CH1}.ipynb"
        if s == "s06":
            display = f"{CH1}-1.ipynb"            # uploaded again under the same name: Canvas renames it
        data = {"s13": nbs["s13 wrong"], "s15": CORRUPT}.get(s, nbs[(s, CH1)])
        if s == "s16":   # the notebook in a zip the student made on Chinese Windows
            files1.append((name, uid, att, "作业.zip", False, lms.inner_zip(
                {f"作业/{CH1}.ipynb": data, f"__MACOSX/作业/._{CH1}.ipynb": b"\x00\x05\x16\x07"}, utf8=False)))
        else:
            files1.append((name, uid, att, display, s == "s05", data))
        if s == "s07":   # two files in the one attempt: the later upload has the larger attachment id
            files1.append((name, uid, att - 500, f"{CH1}.ipynb", False, nbs["s07 first"]))
        if s == "s14":
            files1.append((name, uid, att + 1, "notes.pdf", False, b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n"))
        if s == "s17":
            files1.append((name, uid, att + 1, "backup.zip", False, b"PK\x03\x04 this is not a zip"))
        if s != "s13":
            files2.append((name, uid, 5000 + uid, f"{CH2}.ipynb", s == "s20", nbs[(s, CH2)]))
    files1.append(("Li, Si", 9999, 3999, f"{CH1}.ipynb", False, nbs["stranger"]))
    z1 = lms.canvas_zip(tmp_path / "transformer-ch01 submissions.zip", files1)
    z2 = lms.canvas_zip(tmp_path / "transformer-ch02 submissions.zip", files2)
    return z1, z2, files1, files2


def submitted_at(s, chapter):
    """When each student handed in, by Canvas's clock (UTC)."""
    late = {("s05", CH1), ("s20", CH2)}
    return DUE + dt.timedelta(hours=11) if (s, chapter) in late else DUE - dt.timedelta(hours=30 - int(s[1:]))


def iso(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def fake_canvas(files1, files2):
    attempts = {}
    for aid, ch, files in ((A1, CH1, files1), (A2, CH2, files2)):
        for _, uid, att, *_ in files:
            s = next((k for k, v in UID.items() if v == uid), None)
            when = iso(submitted_at(s, ch)) if s else "2026-12-01T00:00:00Z"
            attempts.setdefault((aid, uid), [(when, [])])[0][1].append(att)
    return lms.FakeCanvas(COURSE, {A1: CH1, A2: CH2}, attempts)


def canvas_course(fake):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # canvasapi warns about http:// (a local server here)
        return export.canvas_course(fake.url, fake.TOKEN, COURSE)


def rows(result, kind):
    return {r.file.rsplit("/", 1)[-1]: r for r in result.of(kind)}


def stamp_of(root, s, ch):
    return (root / "submitted" / s / ch / "timestamp.txt").read_text()


def test_canvas_download_fills_submitted_with_canvas_times(tmp_path, nbs):
    root = make_course(tmp_path)
    z1, z2, files1, files2 = canvas_archives(tmp_path, nbs)
    with fake_canvas(files1, files2) as fake:
        result = collect.collect(root, [z1, z2], canvas=canvas_course(fake))
        assert not fake.writes(), "collecting only reads from Canvas"
    sub = root / "submitted"
    have = {(p.parts[-3], p.parts[-2]) for p in sub.glob("*/*/*.ipynb")}
    want = {(s, CH1) for s in STUDENTS if s not in ("s13", "s15")} | {(s, CH2) for s in STUDENTS}
    assert have == want
    # each student's own notebook, byte for byte; the two 张伟 stay apart; s16's came out of the zip in the zip
    for s, ch in want - {("s13", CH2)}:
        assert (sub / s / ch / f"{ch}.ipynb").read_bytes() == nbs[(s, ch)], (s, ch)
    assert NAME["s11"] == NAME["s12"]
    # the chapter comes from the notebook: s13's "ch01_attention.ipynb" holds chapter 2
    assert (sub / "s13" / CH2 / f"{CH2}.ipynb").read_bytes() == nbs["s13 wrong"]
    wrong = rows(result, "wrong_chapter")
    assert list(wrong) == [f"{lms.canvas_name(sortable(NAME['s13']), UID['s13'], False)}_{3000 + UID['s13']}_{CH1}.ipynb"]
    assert wrong.popitem()[1].why == ("wrong_chapter_why", {"named": CH1, "chapter": CH2})
    # of s07's two files the later upload is taken, the other kept aside (not in submitted/)
    assert (sub / "s07" / CH1 / f"{CH1}.ipynb").read_bytes() == nbs[("s07", CH1)]
    older = result.of("older")
    assert [r.who for r in older] == [f"s07/{CH1}"]
    kept = root / older[0].why[1]["path"]
    assert kept.parent == root / "collected" / "attempts" / "s07" / CH1 and kept.read_bytes() == nbs["s07 first"]
    # the LMS's submission time is nbgrader's timestamp, so lateness is Canvas's
    for s, ch in want:
        assert stamp_of(root, s, ch) == f"{submitted_at(s, CH1 if s == 's13' else ch):%Y-%m-%d %H:%M:%S}.000000 UTC"
    assert {r.who for r in result.of("late")} == {f"s05/{CH1}", f"s20/{CH2}"}
    assert result.times == {"canvas_api": len(want)}
    # what was left out, each by name and why
    unmatched = rows(result, "unmatched")
    assert list(unmatched) == [f"lisi_9999_3999_{CH1}.ipynb"]
    assert unmatched[f"lisi_9999_3999_{CH1}.ipynb"].why == ("canvas_not_in_roster", {"id": "9999", "name": "lisi"})
    assert [f.split("_", 3)[-1] for f in rows(result, "not_notebook")] == ["notes.pdf"]
    unreadable = rows(result, "unreadable")
    assert sorted(r.why[0] for r in unreadable.values()) == ["bad_notebook", "bad_zip"]
    name = {s: lms.canvas_name(sortable(NAME[s]), UID[s], False) for s in ("s15", "s17")}
    assert set(unreadable) == {f"{name['s15']}_{3000 + UID['s15']}_{CH1}.ipynb",
                               f"{name['s17']}_{3001 + UID['s17']}_backup.zip"}
    assert not rows(result, "no_chapter")
    assert not [f for f in result.rows if "__MACOSX" in f.file], "a resource fork is no submission"
    # the table names every odd file, in the course's language (zh), and says the time's source
    table = result.table()
    for r in result.rows:
        if r.kind not in ("collected", "unchanged"):
            assert r.file in table
    assert "对不上名单" in table and "Canvas 用户 9999（lisi）不在 roster.csv 的 lms_id 列里" in table
    assert "取自 Canvas API 的 submitted_at" in table and "4 个文件没有收进 submitted/" in table
    assert "unmatched" in result.table("en") and "Canvas user 9999 (lisi)" in result.table("en")


def test_the_same_archive_twice_changes_nothing(tmp_path, nbs):
    root = make_course(tmp_path)
    z1, z2, files1, files2 = canvas_archives(tmp_path, nbs)
    with fake_canvas(files1, files2) as fake:
        course = canvas_course(fake)
        first = collect.collect(root, [z1, z2], canvas=course)
        before = {**lms.tree(root, "submitted"), **lms.tree(root, "collected")}
        again = collect.collect(root, [z1, z2], canvas=course)
    assert {**lms.tree(root, "submitted"), **lms.tree(root, "collected")} == before
    assert len(first.of("collected")) == 58 and not first.of("unchanged")
    assert len(again.of("unchanged")) == 58 and not again.of("collected") and not again.of("resubmitted")


def test_a_resubmission_replaces_only_with_the_earlier_one_kept(tmp_path, nbs):
    """A later download where s06 handed in again: s06's notebook is replaced, the
    earlier one kept and said; the rest unchanged. The earlier download collected
    again after it replaces nothing (Canvas's history says its file is older)."""
    root = make_course(tmp_path)
    z1, _, files1, _ = canvas_archives(tmp_path, nbs)
    new = lms.notebook(CH1, tag="s06 second attempt")
    later = [f if f[1] != UID["s06"] else (*f[:2], 8006, f"{CH1}-2.ipynb", True, new) for f in files1]
    z3 = lms.canvas_zip(tmp_path / "later.zip", later)
    with fake_canvas(files1, []) as fake:
        course = canvas_course(fake)
        collect.collect(root, [z1], canvas=course)
        first = lms.tree(root)
        resubmitted_at = DUE + dt.timedelta(days=1)
        fake.attempts[(A1, UID["s06"])].append((iso(resubmitted_at), [8006]))
        result = collect.collect(root, [z3], canvas=course)
        after = lms.tree(root)
        back = collect.collect(root, [z1], canvas=course)
    path = f"submitted/s06/{CH1}/{CH1}.ipynb"
    assert after[path] == new and after[f"submitted/s06/{CH1}/timestamp.txt"].startswith(
        f"{resubmitted_at:%Y-%m-%d %H:%M:%S}".encode())
    assert {k for k in after if after[k] != first.get(k)} == {path, f"submitted/s06/{CH1}/timestamp.txt"}
    (r,) = result.of("resubmitted")
    assert r.who == f"s06/{CH1}" and (root / r.why[1]["path"]).read_bytes() == first[path]
    assert f"s06/{CH1}" in {x.who for x in result.of("late")}
    assert len(result.of("unchanged")) == 28
    # the older download again: s06 stays as resubmitted, and the table says why
    assert lms.tree(root) == after
    assert {(x.who, x.why[0]) for x in back.of("older")} == {(f"s07/{CH1}", "older_why"),
                                                            (f"s06/{CH1}", "older_than_submitted")}


def test_without_canvas_api_the_table_says_what_time_is_used(tmp_path, nbs):
    root = make_course(tmp_path)
    z1, *_ = canvas_archives(tmp_path, nbs)
    result = collect.collect(root, [z1])
    assert not list((root / "submitted").rglob("timestamp.txt")), "Canvas's names carry no time"
    assert result.times == {"canvas_none": 29}
    assert {r.who: r.why for r in result.of("late")} == {f"s05/{CH1}": ("late_marker", {})}
    assert "没有写 timestamp.txt，nbgrader 算它们按时提交" in result.table()
    # the download saved in a folder of its own is the same download
    before = lms.tree(root)
    (tmp_path / "downloads").mkdir()
    shutil.copy(z1, tmp_path / "downloads")
    again = collect.collect(root, [tmp_path / "downloads"])
    assert lms.tree(root) == before and len(again.of("unchanged")) == 29


# ------------------------------------------------------------------ Moodle

PID = {s: 70000 + 3 * i for i, s in enumerate(STUDENTS, 1)}     # this assignment's participant numbers
SHANGHAI = dt.timezone(dt.timedelta(hours=8))


def moodle_download(tmp_path, nbs, chapter=CH2):
    """Moodle's download of one assignment, and its grading worksheet (Shanghai time)."""
    files, sheet = [], []
    for s in STUDENTS:
        version = "3.9" if s in ("s21", "s22") else "4.1"     # archives from an older Moodle end folders in "_"
        local = (submitted_at(s, chapter).replace(tzinfo=dt.timezone.utc).astimezone(SHANGHAI)
                 .replace(tzinfo=None, second=0))
        if s == "s09":
            files.append((NAME[s], PID[s], "onlinetext.html", b"<p>I could not upload my notebook</p>"))
        else:
            files.append((NAME[s], PID[s], f"{chapter}.ipynb", nbs[(s, chapter)]) + (version,))
        if s != "s30":                                         # s30's row left out of the worksheet
            sheet.append((PID[s], NAME[s], f"{s}@uni.edu", local))
    files.append(("Li Si", 79999, f"{chapter}.ipynb", nbs["stranger"], "4.1"))
    sheet.append((79999, "Li Si", "lisi@elsewhere.edu", dt.datetime(2026, 12, 1, 9, 0)))
    zpath = tmp_path / f"TRANS-{chapter}-1234.zip"
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        for full, pid, filename, data, *version in files:
            if filename == "onlinetext.html":
                zf.writestr(f"{full}_{pid}_assignsubmission_onlinetext/{filename}", data)
            else:
                zf.writestr(f"{lms.moodle_folder(full, pid, version[0])}/{filename}", data)
    return zpath, lms.moodle_worksheet(tmp_path / "Grades-TRANS-ch02.csv", sheet)


def test_moodle_download_with_its_worksheet(tmp_path, nbs):
    root = make_course(tmp_path)
    zpath, sheet = moodle_download(tmp_path, nbs)
    result = collect.collect(root, [zpath], worksheets=[sheet], timezone="Asia/Shanghai")
    have = {p.parts[-3] for p in (root / "submitted").glob(f"*/{CH2}/{CH2}.ipynb")}
    assert have == set(STUDENTS) - {"s09", "s30"}
    for s in have:
        assert (root / "submitted" / s / CH2 / f"{CH2}.ipynb").read_bytes() == nbs[(s, CH2)]
        # the worksheet's minute, read in Shanghai time, as UTC
        assert stamp_of(root, s, CH2) == f"{submitted_at(s, CH2).replace(second=0):%Y-%m-%d %H:%M:%S}.000000 UTC"
    unmatched = {r.file.split("/")[-2]: r.why for r in result.of("unmatched")}
    assert unmatched == {
        f"{NAME['s30']}_{PID['s30']}_assignsubmission_file": ("moodle_not_in_worksheet",
                                                              {"id": str(PID["s30"]), "name": NAME["s30"]}),
        "Li Si_79999_assignsubmission_file": ("moodle_not_in_roster", {"id": "79999", "name": "Li Si",
                                                                       "email": "lisi@elsewhere.edu"})}
    assert [r.file.split("/")[-1] for r in result.of("not_notebook")] == ["onlinetext.html"]
    assert result.times == {"worksheet": 28}
    assert "Asia/Shanghai" in result.table()
    ledger = (root / "collected" / "submissions.json").read_text(encoding="utf-8")
    assert f'"moodle_folder": "{NAME["s21"]}_{PID["s21"]}_assignsubmission_file_"' in ledger
    assert f'"moodle_folder": "{NAME["s11"]}_{PID["s11"]}_assignsubmission_file"' in ledger


def test_moodle_without_a_worksheet_guesses_no_one(tmp_path, nbs):
    """Moodle's folder names hold the display name and a participant number that is
    this assignment's own: without the worksheet nobody is matched, two 张伟 included."""
    root = make_course(tmp_path)
    zpath, _ = moodle_download(tmp_path, nbs)
    result = collect.collect(root, [zpath])
    assert not (root / "submitted").exists()
    assert len(result.of("unmatched")) == 30
    assert {r.why[0] for r in result.of("unmatched")} == {"moodle_no_worksheet"}
    assert "WORKSHEET=" in result.table() and cli.main(["collect", str(zpath), "--root", str(root)]) == 1


# ------------------------------------------------------------------ a plain folder or zip

def test_plain_folder_and_zip_named_by_student(tmp_path, nbs):
    root = make_course(tmp_path)
    folder = tmp_path / "inbox"
    (folder / "s01").mkdir(parents=True)
    (folder / "s01" / "whatever.ipynb").write_bytes(nbs[("s01", CH1)])                   # a folder per student
    (folder / f"s02_{CH2}.ipynb").write_bytes(nbs[("s02", CH2)])                         # the student id first
    (folder / "s03@uni.edu.ipynb").write_bytes(nbs[("s03", CH1)])                        # the e-mail address
    (folder / "202604-homework.ipynb").write_bytes(nbs[("s04", CH2)])                   # the SIS user id
    (folder / "s05_2026-12-07T20-00.ipynb").write_bytes(nbs["s07 first"])              # two attempts, timed
    (folder / "s05_2026-12-08T21-30.ipynb").write_bytes(nbs[("s05", CH1)])
    (folder / "王芳.ipynb").write_bytes(nbs[("s01", CH2)])                               # a display name: no
    (folder / "s06.ipynb").write_bytes(b"\xff\xfe not json")
    result = collect.collect(root, [folder], timezone="Asia/Shanghai")
    sub = root / "submitted"
    got = {(p.parts[-3], p.parts[-2]): p.read_bytes() for p in sub.glob("*/*/*.ipynb")}
    assert got == {("s01", CH1): nbs[("s01", CH1)], ("s02", CH2): nbs[("s02", CH2)], ("s03", CH1): nbs[("s03", CH1)],
                   ("s04", CH2): nbs[("s04", CH2)], ("s05", CH1): nbs[("s05", CH1)]}
    assert stamp_of(root, "s05", CH1) == "2026-12-08 13:30:00.000000 UTC"
    assert result.times == {"file": 4, "name": 1}
    assert [r.who for r in result.of("older")] == [f"s05/{CH1}"]
    assert {r.file.split("/")[-1]: r.why[0] for r in result.of("unmatched")} == {"王芳.ipynb": "plain_no_match"}
    assert [r.file.split("/")[-1] for r in result.of("unreadable")] == ["s06.ipynb"]
    assert "文件自身的修改时间" in result.table()
    # the same as a zip: the same submitted/ (and nothing changes)
    before = lms.tree(root)
    shutil.make_archive(str(tmp_path / "inbox"), "zip", folder)
    again = collect.collect(root, [tmp_path / "inbox.zip"], timezone="Asia/Shanghai")
    assert not again.of("collected") and not again.of("resubmitted")
    assert {k: v for k, v in lms.tree(root).items() if k.endswith(".ipynb")} == \
        {k: v for k, v in before.items() if k.endswith(".ipynb")}


def test_without_a_roster_a_plain_folder_is_named_by_student(tmp_path, nbs):
    root = make_course(tmp_path, roster=False)
    folder = tmp_path / "inbox"
    (folder / "alice" / CH1).mkdir(parents=True)
    (folder / "alice" / CH1 / f"{CH1}.ipynb").write_bytes(nbs[("s01", CH1)])   # nbgrader's own layout
    (folder / "bob.ipynb").write_bytes(nbs[("s02", CH2)])
    z1 = lms.canvas_zip(tmp_path / "c.zip", [("Zhang, Wei", 1011, 4011, f"{CH1}.ipynb", False, nbs[("s11", CH1)])])
    result = collect.collect(root, [folder, z1])
    assert {(p.parts[-3], p.parts[-2]) for p in (root / "submitted").glob("*/*/*.ipynb")} == \
        {("alice", CH1), ("bob", CH2)}
    assert [r.why for r in result.of("unmatched")] == [("no_roster", {"lms": "Canvas"})]


# ------------------------------------------------------------------ the chapter, from the notebook

def test_the_chapter_is_read_from_the_grade_ids(tmp_path, nbs):
    root = make_course(tmp_path)
    ids = collect.chapter_ids(root)
    assert set(ids) == {CH1, CH2}
    read = collect.read_notebook
    assert collect.chapter_of(read(nbs[("s01", CH1)]), ids) == CH1
    assert collect.chapter_of(read(nbs[("s01", CH2)]), ids) == CH2
    nb = read(nbs[("s01", CH1)])   # a student deleted a test cell: still chapter 1
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_softmax"]
    assert collect.chapter_of(nb, ids) == CH1
    nb.metadata["course"] = {"chapter": CH2}    # what the metadata claims is not trusted
    assert collect.chapter_of(nb, ids) == CH1
    assert collect.chapter_of(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), ids) is None
    with pytest.raises(ValueError):
        read(CORRUPT)


def test_make_and_course_py_know_the_commands():
    import course
    assert course.available("collect") and course.available("return")
    text = open(course.ROOT / "Makefile", encoding="utf-8").read()
    assert "\ncollect:" in text and "\nreturn:" in text and "course.py collect $(FROM)" in text


# ------------------------------------------------------------------ names that are paths

def test_an_archive_entry_whose_name_is_a_path_is_refused_and_named(tmp_path, nbs):
    """An entry named ``../../escaped_<uid>_<later attachment id>_…`` fits Canvas's layout
    for s03 with a later upload than s03's own file: it must neither land outside nor
    become s03's newest attempt. So must an absolute name, a drive letter and a
    backslashed ``..``; each is named in the table and makes the command exit 1."""
    root = make_course(tmp_path)
    uid = UID["s03"]
    own = f"{lms.canvas_name(sortable(NAME['s03']), uid, False)}_{3000 + uid}_{CH1}.ipynb"
    evil = {f"../../escaped_{uid}_900005_{CH1}.ipynb": nbs["stranger"],
            f"/tmp/abs_{uid}_900006_{CH1}.ipynb": nbs["stranger"],
            f"C:escaped_{uid}_900007_{CH1}.ipynb": nbs["stranger"],
            f"sub\\..\\..\\back_{uid}_900008_{CH1}.ipynb": nbs["stranger"]}
    zpath = tmp_path / "transformer-ch01 submissions.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr(own, nbs[("s03", CH1)])
        for name, data in evil.items():
            info = zipfile.ZipInfo("x")
            info.filename = name          # as a hostile archive writes it (ZipInfo() would clean it)
            info.orig_filename = name
            zf.writestr(info, data)
    assert [i.filename for i in zipfile.ZipFile(zpath).infolist()] == [own, *evil]
    result = collect.collect(root, [zpath])
    # the student's real submission is filed, and it is the only attempt there is
    assert (root / "submitted" / "s03" / CH1 / f"{CH1}.ipynb").read_bytes() == nbs[("s03", CH1)]
    assert [r.who for r in result.of("collected")] == [f"s03/{CH1}"]
    assert not result.of("older") and not (root / "collected" / "attempts").exists()
    assert not list(tmp_path.rglob("escaped_*")) and not list(tmp_path.rglob("back_*"))
    assert not list(root.parent.parent.glob("escaped_*"))
    # each refused by name, with why, in both languages, and the command says a file was left out
    refused = {r.why[1]["name"]: r.why[1]["part"] for r in result.of("unsafe_name")}
    assert refused == {n: p for n, p in zip(evil, ["..", "/", "C:", ".."])}
    zh, en = result.table("zh"), result.table("en")
    for name in evil:
        assert name in zh and name in en
    assert "名字里带路径" in zh and "a path out of the archive" in en and "4 个文件没有收进 submitted/" in zh
    assert collect.unsafe_part(f"s03/{CH1}.ipynb") is None and collect.unsafe_part("a..b/c.ipynb") is None
    shutil.rmtree(root / "submitted")
    assert cli.main(["collect", str(zpath), "--root", str(root)]) == 1
