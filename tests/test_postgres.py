"""The gradebook on a real PostgreSQL server.

One synthetic class (a correct and a buggy submission for each of two
chapters) is graded twice with the course's pipeline (`make grade`, as
separate processes): once on nbgrader's default SQLite file, once on a
PostgreSQL server from Debian's packages (started here on 127.0.0.1 and
stopped after). On PostgreSQL two graders run at the same time, one per
chapter, on the same database. Scores, grades.csv, the class report and a
manual grade kept across a rerun must be the same on both databases, and no
row may be lost or counted twice."""
from __future__ import annotations

import contextlib
import csv
import html
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from harness import ROOT, make_submission
from services import SECRET, Unavailable, postgres_server

from coursekit.grade.sandbox import sandbox_available
from grading import protocol

CHAPTERS = ("ch01_attention", "ch02_causal_mask")
STUDENTS = ("alice", "bob")   # the full solution; a catalogued bug in each chapter
GRADE_TIMEOUT = 420
SNOOP = "import os as _os\nprint('DB_URL_SEEN:', _os.environ.get('COURSE_DB_URL'))\n"
SANDBOX, WHY = sandbox_available()
pytestmark = [pytest.mark.skipif(not SANDBOX, reason=f"no sandbox here: {WHY}"), pytest.mark.xdist_group("postgres"), pytest.mark.system]


def make_class(root: Path) -> None:
    root.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for ch in CHAPTERS:
        shutil.copytree(ROOT / "source" / ch, root / "source" / ch)
        shutil.copytree(ROOT / "release" / ch, root / "release" / ch)
        rel = nbformat.read(root / "release" / ch / f"{ch}.ipynb", as_version=4)
        src = nbformat.read(root / "source" / ch / f"{ch}.ipynb", as_version=4)
        bug = importlib.import_module(f"catalogue.{ch}").BUGS[0]
        # bob's code also looks for the gradebook's address, which the kernel must not have
        answers = {gid: SNOOP + code for gid, code in bug.replace.items()}
        subs = {"alice": make_submission(rel, src, None), "bob": make_submission(rel, src, answers)}
        for student, nb in subs.items():
            d = root / "submitted" / student / ch
            d.mkdir(parents=True)
            nbformat.write(nb, d / f"{ch}.ipynb")


def start_grader(root: Path, db_url: str | None, *args: str) -> subprocess.Popen:
    """`make grade` on the course folder ``root`` (python -m coursekit.cli grade --root ...)."""
    env = dict(os.environ)
    env.pop("COURSE_DB_URL", None)
    if db_url:
        env["COURSE_DB_URL"] = db_url
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    log = open(root / f"grade{'_'.join(args).replace('-', '')}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(root), *args],
                            cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log = log
    return proc


def finish(*procs: subprocess.Popen) -> None:
    for p in procs:
        try:
            rc = p.wait(timeout=GRADE_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            rc = "timeout"
        p.log.close()
        log = Path(p.log.name)
        assert rc == 0, f"grader {p.args[4:]} ended with {rc}:\n{log.read_text()[-3000:]}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        try:
            new_database = stack.enter_context(postgres_server())
        except Unavailable as exc:
            pytest.skip(str(exc))
        base = tmp_path_factory.mktemp("gradebooks")
        lite, pg = base / "sqlite", base / "postgres"
        make_class(lite)
        make_class(pg)
        url = new_database("transformer")
        finish(start_grader(lite, None))                       # one grader, the whole class, SQLite
        # two graders at once on PostgreSQL, one per chapter (one worker each: two kernels on two cores)
        finish(*[start_grader(pg, url, "--chapter", ch, "--jobs", "1") for ch in CHAPTERS])
        yield {"sqlite": (lite, f"sqlite:///{lite / 'gradebook.db'}"), "postgres": (pg, url)}


def all_grades(url: str) -> dict:
    """(student, chapter, grade id) -> (auto, manual, score, max) for every grade in the gradebook."""
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(url, protocol.COURSE_ID) as gb:
        for ch in CHAPTERS:
            for student in STUDENTS:
                for g in gb.find_submission_notebook(ch, ch, student).grades:
                    out[(student, ch, g.name)] = (g.auto_score, g.manual_score, g.score, g.max_score)
    return out


def row_counts(url: str) -> dict[str, tuple[int, int]]:
    """table -> (rows, distinct keys) for the tables a grader writes."""
    from sqlalchemy import create_engine, text
    keys = {"student": "id", "assignment": "name", "notebook": "assignment_id, name",
            "submitted_assignment": "assignment_id, student_id",
            "submitted_notebook": "assignment_id, notebook_id",
            "grade": "notebook_id, cell_id", "comment": "notebook_id, cell_id",
            "base_cell": "notebook_id, name"}
    engine = create_engine(url)
    try:
        with engine.connect() as con:
            return {t: (con.execute(text(f"SELECT count(*) FROM {t}")).scalar(),
                        con.execute(text(f"SELECT count(*) FROM (SELECT DISTINCT {k} FROM {t}) AS d")).scalar())
                    for t, k in keys.items()}
    finally:
        engine.dispose()


def csv_rows(root: Path) -> list[dict]:
    with open(root / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:  # when the run happened, not what it found
        for k in [k for k in r if "timestamp" in k or "duedate" in k]:
            r.pop(k)
    return sorted(rows, key=lambda r: (r["assignment"], r["student_id"]))


def report_text(root: Path) -> str:
    """The class report without its pictures (its numbers, tables and flags)."""
    text = (root / "reports" / "class_report.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<img [^>]*>", "<img>", text))


def test_scores_are_the_same_on_postgresql_and_sqlite(graded):
    lite, pg = all_grades(graded["sqlite"][1]), all_grades(graded["postgres"][1])
    assert pg == lite
    # and they are the right scores: a comparison of two empty gradebooks would prove nothing
    for ch in CHAPTERS:
        auto = [k for k in lite if k[1] == ch and k[0] == "alice" and lite[k][0] is not None]
        assert auto and all(lite[k][2] == lite[k][3] for k in auto), {k: lite[k] for k in auto}
        bug = importlib.import_module(f"catalogue.{ch}").BUGS[0]
        for gid in bug.lose:
            assert lite[("bob", ch, gid)][2] < lite[("bob", ch, gid)][3], (ch, gid, lite[("bob", ch, gid)])


def test_concurrent_graders_lose_and_duplicate_no_row(graded):
    pg, lite = row_counts(graded["postgres"][1]), row_counts(graded["sqlite"][1])
    cells = {}
    for ch in CHAPTERS:
        src = nbformat.read(ROOT / "source" / ch / f"{ch}.ipynb", as_version=4)
        cells[ch] = sum(1 for c in src.cells if c.metadata.get("nbgrader", {}).get("grade"))
    n = len(STUDENTS)
    expected = {"student": n, "assignment": len(CHAPTERS), "submitted_assignment": n * len(CHAPTERS),
                "submitted_notebook": n * len(CHAPTERS), "grade": n * sum(cells.values())}
    for table, count in expected.items():
        assert pg[table] == (count, count), f"{table}: {pg[table]} rows/distinct on PostgreSQL, expected {count}"
    assert pg == lite


def test_grades_csv_is_the_same_and_complete(graded):
    lite, pg = csv_rows(graded["sqlite"][0]), csv_rows(graded["postgres"][0])
    assert len(pg) == len(STUDENTS) * len(CHAPTERS)
    assert pg == lite


def test_class_report_is_the_same_and_covers_both_chapters(graded):
    lite, pg = report_text(graded["sqlite"][0]), report_text(graded["postgres"][0])
    from coursekit.report.words import word
    counts = word("report_counts", "zh", students=len(STUDENTS), notebooks=len(STUDENTS) * len(CHAPTERS))
    assert counts in pg, "the zh chapters' report speaks Chinese"
    assert all(f"<h2>{ch}</h2>" in pg for ch in CHAPTERS)
    assert pg == lite


def test_report_data_is_the_same(graded, monkeypatch):
    from coursekit.grade import pipeline
    from coursekit.report import report

    data = {}
    for name, (root, url) in graded.items():
        monkeypatch.setenv("COURSE_DB_URL", url)
        got = report.collect(root, pipeline.class_jobs(root, root / pipeline.STATE))
        scores = {ch: {s: (st.score, st.max_score, st.pending, [(c.grade_id, c.status, c.score) for c in st.cells])
                       for s, st in by_student.items()} for ch, by_student in got["scores"].items()}
        data[name] = {"scores": scores, "bugs": {k: dict(v) for k, v in got["bugs"].items()},
                      "flags": got["flags"], "said": got["said"]}
    assert data["postgres"] == data["sqlite"]
    assert data["sqlite"]["bugs"], "the buggy submissions were diagnosed"


def test_student_code_never_sees_the_gradebook_address(graded):
    root, url = graded["postgres"]
    ran = 0
    for path in [*(root / "autograded").rglob("*.ipynb"), *(root / "feedback").rglob("*.html")]:
        text = path.read_text(encoding="utf-8", errors="replace")
        ran += "DB_URL_SEEN:" in text
        assert SECRET not in text and url not in text, f"{path} shows the gradebook's address"
    assert ran >= len(CHAPTERS), "bob's code printed what it found"


def test_manual_grade_survives_a_rerun_on_both(graded):
    from nbgrader.api import Gradebook
    ch = CHAPTERS[0]
    before = {}
    for name, (_root, url) in graded.items():
        with Gradebook(url, protocol.COURSE_ID) as gb:
            g = gb.find_grade("derivation", ch, ch, "alice")
            g.manual_score = g.max_score / 2
            gb.db.commit()
        before[name] = all_grades(url)
    finish(*[start_grader(root, None if name == "sqlite" else url, "--chapter", ch, "--student", "alice")
             for name, (root, url) in graded.items()])
    after = {name: all_grades(url) for name, (_, url) in graded.items()}
    assert after["postgres"] == after["sqlite"] == before["sqlite"]
    key = ("alice", ch, "derivation")
    assert after["postgres"][key][1] == after["postgres"][key][3] / 2
    assert row_counts(graded["postgres"][1]) == row_counts(graded["sqlite"][1])
