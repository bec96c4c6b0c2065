"""The grading service (coursekit/serve/service.py) on a course folder and an
exchange folder laid out as nbgrader's submit leaves them, without a hub
(tests/test_jupyterhub.py runs it behind a real JupyterHub).

One story, three rounds, each checked below:

1. two students submit ch01 (one with a catalogued bug): each is filed into
   submitted/, graded with the course's pipeline (sandbox on) and its feedback
   released under the name nbgrader's fetch_feedback looks for, for that
   submission alone;
2. the instructor gives a manual grade; the buggy student resubmits a correct
   answer: it is graded again to full marks, the manual grade stays, and the
   kernel factory and the chapter's one-off steps are not paid again;
3. the service stops; a submission lands while it is down; a new service
   grades it once, and a look after that grades nothing.
"""
from __future__ import annotations

import datetime
import json
import os
import secrets
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from harness import grading_course, make_submission

from coursekit.grade.sandbox import sandbox_available
from grading import protocol

CH = "ch01_attention"
COURSE = protocol.COURSE_ID
BUG = "sm_no_max"
SANDBOX, WHY = sandbox_available()
pytestmark = [pytest.mark.skipif(not SANDBOX, reason=f"no sandbox here: {WHY}"), pytest.mark.xdist_group("service"), pytest.mark.system]


def submit(exchange: Path, student: str, nb) -> tuple[str, str]:
    """What nbgrader's submit leaves in the exchange: the folder, its timestamp and secret.
    Returns (folder name, secret)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")
    name = f"{student}+{CH}+{stamp}+{secrets.token_hex(4)}"
    folder = exchange / COURSE / "inbound" / name
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{CH}.ipynb")
    secret = secrets.token_hex(64)
    (folder / "timestamp.txt").write_text(stamp)
    (folder / "submission_secret.txt").write_text(secret)
    time.sleep(0.01)   # each submission its own timestamp
    return name, secret


def released_page(exchange: Path, secret: str) -> Path:
    """Where nbgrader's fetch_feedback looks for a submission's feedback."""
    from nbgrader.utils import notebook_hash
    return exchange / COURSE / "feedback" / f"{notebook_hash(secret=secret, notebook_id=CH)}.html"


def grades(root: Path, student: str) -> dict[str, tuple]:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", COURSE) as gb:
        nb = gb.find_submission_notebook(CH, CH, student)
        return {g.name: (g.auto_score, g.manual_score, g.max_score) for g in nb.grades}


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    import catalogue.ch01_attention as cat

    from coursekit.grade.engine import Ledger
    from coursekit.serve.service import Service

    base = tmp_path_factory.mktemp("service")
    root, exchange = base / "course", base / "exchange"
    rel, src = grading_course(root, CH)
    (exchange / COURSE / "inbound").mkdir(parents=True)
    (exchange / COURSE / "outbound" / CH).mkdir(parents=True)   # released: prepared when the service starts
    bug = next(b for b in cat.BUGS if b.name == BUG)
    out = {"root": root, "exchange": exchange, "bug": bug, "lines": []}
    say = out["lines"].append

    svc = Service(root, exchange, poll=0.1, say=say)
    svc.start()
    try:
        # 1. two students submit
        out["good"] = submit(exchange, "good", make_submission(rel, src, None))
        out["buggy"] = submit(exchange, "buggy", make_submission(rel, src, bug.replace))
        out["round1"] = svc.step()
        out["grades1"] = {s: grades(root, s) for s in ("good", "buggy")}
        out["pages1"] = sorted(p.name for p in (exchange / COURSE / "feedback").iterdir())
        factory_pid = svc.warm.zygote.proc.pid
        gen_log = root / ".grading" / "logs" / "generate_assignment.log"
        gen_mtime = gen_log.stat().st_mtime_ns

        # 2. a manual grade, then the buggy student's corrected resubmission
        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}", COURSE) as gb:
            g = gb.find_grade("derivation", CH, CH, "buggy")
            g.manual_score = g.max_score / 2
            gb.db.commit()
        out["fixed"] = submit(exchange, "buggy", make_submission(rel, src, None))
        out["round2"] = svc.step()
        out["grades2"] = grades(root, "buggy")
        out["same_factory"] = svc.warm.zygote.proc.pid == factory_pid
        out["chapter_recorded_again"] = gen_log.stat().st_mtime_ns != gen_mtime
        out["idle"] = svc.step()
    finally:
        svc.close()
    out["class_files"] = (root / "grades.csv").exists() and (root / "reports" / "class_report.html").exists()

    # 3. a submission while the service is down; a new service
    out["late"] = submit(exchange, "late", make_submission(rel, src, bug.replace))
    svc = Service(root, exchange, poll=0.1, say=say)
    svc.start()
    try:
        out["round3"] = svc.step()
        out["round4"] = svc.step()
    finally:
        svc.close()
    out["ledger"] = Ledger(f"sqlite:///{root / 'gradebook.db'}").count()
    out["autograded"] = [json.loads(x) for x in
                         (root / ".grading" / "engine" / "autograded.jsonl").read_text().splitlines()]
    out["record"] = [json.loads(x) for x in (root / ".grading" / "service" / "handled.jsonl").read_text().splitlines()]
    return out


def test_each_submission_is_graded_and_released_to_its_student(story):
    root, exchange = story["root"], story["exchange"]
    assert story["round1"] == 2
    good, buggy = story["grades1"]["good"], story["grades1"]["buggy"]
    assert all(a == m for a, _, m in good.values() if a is not None), good
    assert buggy["test_softmax"][0] < buggy["test_softmax"][2], buggy
    # filed as nbgrader collect files it: the student's own files, the latest submission
    for who, which in (("good", "good"), ("buggy", "fixed")):
        name, secret = story[which]
        sub = root / "submitted" / who / CH
        assert (sub / "timestamp.txt").read_text() == name.split("+")[2]
        assert (sub / "submission_secret.txt").read_text() == secret
    # released where fetch_feedback looks for each submission, and only those
    page_good, page_buggy = released_page(exchange, story["good"][1]), released_page(exchange, story["buggy"][1])
    assert story["pages1"] == sorted([page_good.name, page_buggy.name])
    assert all(w in page_buggy.read_text(encoding="utf-8") for w in story["bug"].words)
    assert story["bug"].words[0] not in page_good.read_text(encoding="utf-8")
    assert "BEGIN HIDDEN TESTS" not in page_buggy.read_text(encoding="utf-8")


def test_a_resubmission_is_graded_again_and_the_manual_grade_stays(story):
    assert story["round2"] == 1
    g = story["grades2"]
    assert all(a == m for a, _, m in g.values() if a is not None), g   # the corrected answer: full marks
    assert g["derivation"][1] == g["derivation"][2] / 2               # the instructor's grade, kept
    page = released_page(story["exchange"], story["fixed"][1])
    assert page.exists() and story["bug"].words[0] not in page.read_text(encoding="utf-8")
    assert released_page(story["exchange"], story["buggy"][1]).exists()   # the first submission's page stays


def test_the_factory_and_the_chapter_are_not_paid_for_again(story):
    assert story["same_factory"], "the kernel factory was started again for the second submission"
    assert not story["chapter_recorded_again"], "the chapter was recorded in the gradebook again"
    assert story["idle"] == 0
    assert story["class_files"], "grades.csv and the class report are written when the service stops"


def test_a_restart_grades_what_came_while_it_was_down_once(story):
    assert story["round3"] == 1 and story["round4"] == 0
    late = released_page(story["exchange"], story["late"][1])
    assert all(w in late.read_text(encoding="utf-8") for w in story["bug"].words)
    keys = [a["key"] for a in story["autograded"]]
    assert len(keys) == len(set(keys)) == 4 == story["ledger"]   # good, buggy, buggy again, late: once each
    names = [r["name"] for r in story["record"]]
    assert sorted(names) == sorted({story[w][0] for w in ("good", "buggy", "fixed", "late")})
    assert all(r["released"] for r in story["record"])


def test_a_superseded_submission_is_recorded_not_graded(tmp_path):
    """Two submissions of one student waiting together: the newer is filed, the older recorded as superseded."""
    from coursekit.serve.service import Service
    root, exchange = tmp_path / "course", tmp_path / "exchange"
    rel, src = grading_course(root, CH)
    (exchange / COURSE / "inbound").mkdir(parents=True)
    old, _ = submit(exchange, "amy", make_submission(rel, src, None))
    new, _ = submit(exchange, "amy", make_submission(rel, src, None, fill=False))
    svc = Service(root, exchange)
    filed = []
    svc.file = lambda sub: filed.append(sub.name) or False   # nothing graded: only what is chosen
    svc.handle(svc.pending())
    assert filed == [new]
    assert {r["name"]: r["done"] for r in map(json.loads, (root / ".grading/service/handled.jsonl")
                                              .read_text().splitlines())} == \
        {old: "superseded", new: "older than the one graded"}
    assert svc.pending() == []
    shutil.rmtree(root / ".grading")
    assert [s.name for s in svc.pending()] == [old, new]
    assert os.path.isdir(exchange / COURSE / "inbound" / old)   # the exchange is never changed
    # a folder nbgrader's submit is still writing (its secret comes last) waits
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")
    half = exchange / COURSE / "inbound" / f"amy+{CH}+{stamp}+0000"
    half.mkdir()
    (half / f"{CH}.ipynb").write_text("{")
    assert half.name not in [s.name for s in svc.pending()]
    (half / "submission_secret.txt").write_text(secrets.token_hex(64))
    assert half.name in [s.name for s in svc.pending()]
