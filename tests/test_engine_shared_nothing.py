"""Grading on workers that share nothing with the grader (coursekit/grade/carried.py).

A Dask scheduler and two workers, each its own process; each worker runs in
its own mount namespace (``unshare --mount``) with its own copy of the course
at another path (hard links of the code, the environment bound at the copy's
path) and the grader's folders (the course the grader runs from and the class's
course folder) covered by an empty tmpfs: a worker can read nothing of the
grader's. The grader (``COURSE_DASK_SCHEDULER=…``, jobs that carry their files)
grades a small ch01 class: the model solution, two wrong answers, another
correct style and an untouched release, each with its submission time. One
worker is killed while it grades a notebook.

- inside a worker the grader's folders are not there, and its ``coursekit`` is its copy;
- the gradebook gets what ``make grade`` on one machine writes: each grade's
  auto score and review mark, each comment, each submission's time;
- the autograded notebooks and the feedback pages are in the grader's folder;
- the killed worker changes nothing: the run ends 0, each notebook is recorded once;
- the rows a worker returns go into the grader's gradebook as nbgrader's autograde
  writes them: a manual score entered by a grader stays and marks its cell for review.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import grading_course, make_submission, submit
from services import dask_cluster, exit_code

from coursekit.author.build import ROOT
from coursekit.grade.engine import Ledger
from coursekit.grade.sandbox import sandbox_available

CH = "ch01_attention"
SANDBOX, WHY = sandbox_available()
NAMESPACES = os.geteuid() == 0 and shutil.which("unshare") is not None and sys.platform.startswith("linux")
CLUSTER = [pytest.mark.skipif(not SANDBOX, reason=f"no sandbox here: {WHY}"),
           pytest.mark.skipif(not NAMESPACES, reason="needs root and unshare (a mount namespace per worker)"),
           pytest.mark.xdist_group("shared_nothing")]   # one test worker grades the class once for all its tests
STUDENTS = ("s0", "s1", "s2", "s3", "s4")


def make_class(root: Path) -> None:
    rel, src = grading_course(root, CH)
    cat = importlib.import_module(f"catalogue.{CH}")
    answers = {"s0": make_submission(rel, src, None),                       # the model solution
               "s1": make_submission(rel, src, cat.BUGS[0].replace),        # wrong answers
               "s2": rel,                                                    # the release, untouched
               "s3": make_submission(rel, src, cat.CORRECT[0].replace),     # another correct style
               "s4": make_submission(rel, src, cat.BUGS[1].replace)}
    for i, (student, nb) in enumerate(answers.items()):
        submit(root, student, CH, nb)
        (root / "submitted" / student / CH / "timestamp.txt").write_text(f"2026-11-0{i + 1} 09:1{i}:00.000000 UTC")


def gradebook(root: Path) -> dict:
    """What autograde wrote: per grade (auto score, max, review mark), per comment, per submission its time."""
    from nbgrader.api import Gradebook
    out = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for s in STUDENTS:
            sub = gb.find_submission(CH, s)
            nb = gb.find_submission_notebook(CH, CH, s)
            out[(s, "timestamp")] = str(sub.timestamp)
            out.update({(s, g.name): (g.auto_score, g.max_score, g.needs_manual_grade) for g in nb.grades})
            out.update({(s, "comment", c.name): c.auto_comment for c in nb.comments})
    return out


def worker_copy(base: Path, name: str) -> Path:
    """The worker's own course: hard links of the code, source/, release/ and replay/, at its own path."""
    copy = base / name / "course"
    copy.mkdir(parents=True)
    for part in ("coursekit", "grading", "helpers", "source", "release", "replay"):
        subprocess.run(["cp", "-al", str(ROOT / part), str(copy / part)], check=True)
    os.link(ROOT / "nbgrader_config.py", copy / "nbgrader_config.py")
    return copy


def in_namespace(copies: dict[str, Path], hide: list[Path]):
    """``wrap`` for dask_cluster: each worker in a mount namespace of its own, its course at
    its copy, the environment bound at the copy's .venv, the grader's folders an empty tmpfs."""
    venv = Path(sys.prefix)

    def wrap(name: str, cmd: list[str]) -> list[str]:
        copy = copies[name]
        (copy / ".venv").mkdir(exist_ok=True)
        script = "\n".join([
            "set -e",
            f'mount --bind "{venv}" "{copy}/.venv"',
            f'mount -o remount,bind,ro "{copy}/.venv"',
            *[f'mount -t tmpfs -o size=1m,mode=0700 tmpfs "{h}"' for h in hide],
            f'cd "{copy}"',
            f'export PYTHONPATH="{copy}" PATH="{copy}/.venv/bin:/usr/local/bin:/usr/bin:/bin" VIRTUAL_ENV="{copy}/.venv"',
            f'exec "{copy}/.venv/bin/python" -m distributed.cli.dask_worker "$@"'])
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *cmd[2:]]
    return wrap


def in_flight(pid: int) -> bool:
    """Whether the worker ``pid`` runs an nbgrader command (a child of its fork server)."""
    import psutil
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return False
    return any(k.children() for k in kids if "forkserver" in " ".join(k.cmdline()))


@pytest.fixture(scope="module")
def shared_nothing(tmp_path_factory):
    base = tmp_path_factory.mktemp("nothing-shared")     # the grader's: hidden from the workers
    local, remote = base / "local", base / "remote"
    make_class(local)
    shutil.copytree(local, remote)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for k in ("COURSE_DB_URL", "COURSE_ENGINE", "COURSE_DASK_SCHEDULER", "COURSE_SHARED_FS"):
        env.pop(k, None)
    # make grade, as on one machine: started now, its kernels while the workers start
    local_log = open(base / "local.log", "w")
    reference = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(local)],
                                 env=env, stdout=local_log, stderr=subprocess.STDOUT, start_new_session=True)
    workers = tmp_path_factory.mktemp("workers")
    copies = {n: worker_copy(workers, n) for n in ("worker1", "worker2")}
    out: dict = {"local": local, "remote": remote, "copies": copies}
    try:
        with dask_cluster(workers=2, base=workers, wrap=in_namespace(copies, [ROOT, base])) as (address, procs):
            from distributed import Client
            with Client(address, timeout=60) as client:
                out["sees_grader"] = client.run(os.path.exists, str(remote / "submitted"))
                out["sees_code"] = client.run(os.path.exists, str(ROOT / "coursekit"))
                out["coursekit"] = client.run(eval, "__import__('coursekit').__file__")
            log = open(base / "grade.log", "w")
            grader = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(remote)],
                                      env=dict(env, COURSE_DASK_SCHEDULER=address), stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
            victim = procs["worker1"]
            done = remote / ".grading" / "engine" / "autograded.jsonl"
            deadline = time.monotonic() + 300
            out["killed"] = False
            while time.monotonic() < deadline and grader.poll() is None:
                if done.exists() and done.read_text().strip() and in_flight(victim.pid):
                    os.kill(victim.pid, signal.SIGKILL)        # mid-notebook
                    out["killed"] = True
                    break
                time.sleep(0.05)
            out["rc"] = exit_code(grader)
            log.close()
            out["log"] = (base / "grade.log").read_text()
    finally:
        out["local_rc"] = exit_code(reference)
        local_log.close()
    out["local_log"] = (base / "local.log").read_text()
    return out


@CLUSTER[0]
@CLUSTER[1]
@CLUSTER[2]
@pytest.mark.system
def test_a_worker_sees_nothing_of_the_grader(shared_nothing):
    assert shared_nothing["sees_grader"] and not any(shared_nothing["sees_grader"].values())
    assert not any(shared_nothing["sees_code"].values())
    copies = {str(c) for c in shared_nothing["copies"].values()}
    where = sorted(str(Path(p).parent.parent) for p in shared_nothing["coursekit"].values())
    assert where == sorted(copies), where


@CLUSTER[0]
@CLUSTER[1]
@CLUSTER[2]
@pytest.mark.system
def test_the_workers_give_the_gradebook_make_grade_gives(shared_nothing):
    assert shared_nothing["local_rc"] == 0, shared_nothing["local_log"][-3000:]
    assert shared_nothing["rc"] == 0, shared_nothing["log"][-3000:]
    assert "jobs carry their files" in shared_nothing["log"]
    here, there = gradebook(shared_nothing["local"]), gradebook(shared_nothing["remote"])
    assert there == here
    # and they are real scores: the model solution full, a wrong answer less, the untouched release nothing
    auto = {k: v for k, v in here.items() if len(k) == 2 and k[1] != "timestamp" and v[0] is not None}
    assert all(s == m for (st, _), (s, m, _) in auto.items() if st in ("s0", "s3"))
    assert any(s < m for (st, _), (s, m, _) in auto.items() if st == "s1")
    assert all(s == 0 for (st, _), (s, m, _) in auto.items() if st == "s2")
    assert here[("s2", "timestamp")].startswith("2026-11-03 09:12")


@CLUSTER[0]
@CLUSTER[1]
@CLUSTER[2]
@pytest.mark.system
def test_the_grader_alone_writes_the_graded_notebooks_and_feedback(shared_nothing):
    remote = shared_nothing["remote"]
    for s in STUDENTS:
        graded = remote / "autograded" / s / CH / f"{CH}.ipynb"
        assert graded.exists() and (remote / "autograded" / s / CH / "timestamp.txt").exists()
        assert any(c.get("outputs") for c in json.loads(graded.read_text())["cells"] if c["cell_type"] == "code")
        assert (remote / "feedback" / s / CH / f"{CH}.html").exists()
    lines = [json.loads(x) for x in (remote / ".grading" / "engine" / "autograded.jsonl").read_text().splitlines()]
    assert sorted(x["student"] for x in lines) == sorted(STUDENTS) and all(x["carried"] for x in lines)


@CLUSTER[0]
@CLUSTER[1]
@CLUSTER[2]
@pytest.mark.system
def test_a_killed_worker_changes_nothing(shared_nothing):
    assert shared_nothing["killed"], "no worker was seen grading, so none was killed:\n" + \
        shared_nothing["log"][-3000:]
    # each notebook recorded once, none lost (the scores are make grade's: the test above)
    assert Ledger(f"sqlite:///{shared_nothing['remote'] / 'gradebook.db'}").count() == len(STUDENTS)


def test_returned_rows_go_in_as_nbgrader_writes_them(tmp_path):
    """A regrade's rows keep the manual score entered in the formgrader (and mark its cell
    for review, as nbgrader's SaveAutoGrades does); a written answer without a score is
    marked for review; the submission gets its time, and a late one no penalty (nbgrader's
    default late policy)."""
    import datetime as dt

    from nbgrader.api import Gradebook

    from coursekit.grade.carried import import_rows
    from coursekit.grade.intake import Job
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", "transformer") as gb:
        gb.add_assignment(CH, duedate=dt.datetime(2026, 11, 2))
        gb.add_notebook(CH, CH)
        gb.add_grade_cell("test_a", CH, CH, max_score=3, cell_type="code")
        gb.add_grade_cell("answer", CH, CH, max_score=2, cell_type="markdown")
        gb.add_solution_cell("answer", CH, CH)
        gb.add_solution_cell("code_a", CH, CH)
        rows = {"timestamp": "2026-11-03 10:00:00.000000 UTC",
                "grades": [{"name": "test_a", "auto_score": 3.0, "needs_manual_grade": False},
                           {"name": "answer", "auto_score": None, "needs_manual_grade": True}],
                "comments": [{"name": "answer", "auto_comment": None},
                             {"name": "code_a", "auto_comment": "No response."}]}
        import_rows(gb, Job(CH, "amy"), rows)
        nb = gb.find_submission_notebook(CH, CH, "amy")
        got = {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade) for g in nb.grades}
        assert got == {"test_a": (3.0, None, False), "answer": (None, None, True)}
        assert {c.name: c.auto_comment for c in nb.comments} == {"answer": None, "code_a": "No response."}
        sub = gb.find_submission(CH, "amy")
        assert sub.timestamp == dt.datetime(2026, 11, 3, 10) and sub.total_seconds_late > 0
        assert nb.late_submission_penalty is None
        # a grader gives test_a 1 point by hand; the notebook is graded again
        grade = gb.find_grade("test_a", CH, CH, "amy")
        grade.manual_score = 1.0
        gb.db.commit()
        rows["grades"][0]["auto_score"] = 0.0
        import_rows(gb, Job(CH, "amy"), rows)
        grade = gb.find_grade("test_a", CH, CH, "amy")
        assert (grade.auto_score, grade.manual_score, grade.needs_manual_grade, grade.score) == (0.0, 1.0, True, 1.0)
