"""Grading jobs on Dask (coursekit/grade/engine.py).

- The ledger of finished jobs: a key is written once, a gradebook that does
  not exist is not created by looking, two students handing in the same bytes
  are two jobs.
- A real cluster on a shared filesystem (COURSE_SHARED_FS=1; the path without one:
  tests/test_engine_shared_nothing.py): a Dask scheduler and two workers, each its own process on
  127.0.0.1, grade a small class (sandbox on, each worker with its own warm
  kernel factory). One worker is killed while it grades a notebook. Every
  notebook must be graded exactly once (one ledger row each, none lost), with
  the same scores as `make grade` on this machine, and nothing of the killed
  worker may go on running. Work is done again only for a notebook the killed
  worker had finished but not yet reported: it runs once more on the other
  worker and is still recorded once.
"""
from __future__ import annotations

import collections
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

from coursekit.grade.engine import Ledger, job_key
from coursekit.grade.intake import Job
from coursekit.grade.sandbox import sandbox_available

CH = "ch01_attention"
STUDENTS = 6
SANDBOX, WHY = sandbox_available()


def test_the_ledger_writes_a_key_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    ledger = Ledger(url)
    assert ledger.finished(["k"]) == {} and not (tmp_path / "gradebook.db").exists()   # looking creates nothing
    job = Job(CH, "amy")
    assert ledger.record("k", job, {"seconds": 1.5}) is True
    assert ledger.record("k", job, {"seconds": 9.9}) is False          # the second run of a job writes nothing
    assert Ledger(url).finished(["k", "other"]) == {"k": {"seconds": 1.5}}
    ledger.forget(["k"])
    assert ledger.count() == 0
    ledger.close()


def test_the_local_cluster_samples_nothing_beside_the_kernels():
    """The in-process cluster a class run starts has no sampling profiler and checks its event
    loop and memory seldom (engine.QUIET): each would take CPU from the kernels it grades. The
    settings hold for the cluster's own worker, not only while it is made, and leave the rest
    of the process's Dask settings as they were."""
    import dask

    from coursekit.grade.engine import Engine
    from coursekit.grade.pipeline import GRADER
    engine = Engine(GRADER, workers=2)
    try:
        engine.start()
        worker = next(iter(engine._cluster.workers.values()))
        assert "profile" not in worker.periodic_callbacks and "profile-cycle" not in worker.periodic_callbacks
        assert engine.client.submit(sum, [1, 2], pure=False).result(timeout=30) == 3
        assert worker._tick_interval == 1.0 and engine._cluster.scheduler._tick_interval == 1.0
    finally:
        engine.close()
    assert dask.config.get("distributed.worker.profile.enabled") is True   # this process's own settings are untouched


def test_two_students_with_the_same_bytes_are_two_jobs():
    a, b = Job(CH, "amy", key="same"), Job(CH, "bob", key="same")
    assert job_key(a) != job_key(b) and job_key(a) == job_key(Job(CH, "amy", key="same"))
    assert job_key(a) != job_key(Job(CH, "amy", key="changed"))


def make_class(root: Path) -> None:
    rel, src = grading_course(root, CH)
    cat = importlib.import_module(f"catalogue.{CH}")
    pool = [None, *[v.replace for v in cat.BUGS[:3]], cat.CORRECT[0].replace if cat.CORRECT else None]
    for i in range(STUDENTS):
        submit(root, f"s{i}", CH, make_submission(rel, src, pool[i % len(pool)]))


def scores(root: Path) -> dict:
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        return {(s, g.name): (g.auto_score, g.max_score) for s in (f"s{i}" for i in range(STUDENTS))
                for g in gb.find_submission_notebook(CH, CH, s).grades}


def in_flight(pid: int) -> bool:
    """Whether the worker ``pid`` is running an nbgrader command (a child of its fork server)."""
    import psutil
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return False
    servers = [k for k in kids if "forkserver" in " ".join(k.cmdline())]
    return any(s.children() for s in servers)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    if not SANDBOX:
        pytest.skip(f"no sandbox here: {WHY}")
    base = tmp_path_factory.mktemp("engine")
    local, remote = base / "local", base / "remote"
    make_class(local)
    shutil.copytree(local, remote)
    from coursekit.grade import pipeline
    pipeline.grade(local, chapter=CH, quiet=True, report=False)          # make grade, as on one machine
    out = {"local": local, "remote": remote}
    with dask_cluster(workers=2, base=base) as (address, procs):
        env = dict(os.environ, COURSE_DASK_SCHEDULER=address, COURSE_SHARED_FS="1",   # the shared-filesystem path
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        env.pop("COURSE_DB_URL", None)
        log = open(base / "grade.log", "w")
        grader = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(remote)],
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        victim = procs["worker1"]
        done = remote / ".grading" / "engine" / "autograded.jsonl"
        deadline = time.monotonic() + 300
        killed = False
        while time.monotonic() < deadline and grader.poll() is None:
            started = done.exists() and done.read_text().strip()   # the workers are warm
            if started and in_flight(victim.pid):
                import psutil
                out["victim_tree"] = [p.pid for p in psutil.Process(victim.pid).children(recursive=True)]
                os.kill(victim.pid, signal.SIGKILL)               # mid-notebook
                killed = True
                break
            time.sleep(0.05)
        out["killed"] = killed
        out["rc"] = exit_code(grader)
        log.close()
        out["log"] = (base / "grade.log").read_text()
        time.sleep(1)
        out["left_running"] = [p for p in out.get("victim_tree", []) if _alive(p)]
        out["worker2_alive"] = procs["worker2"].poll() is None
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in f.read()
    except OSError:
        return False


@pytest.mark.system
def test_a_killed_worker_costs_no_notebook_and_grades_none_twice(killed_run):
    assert killed_run["killed"], "no worker was seen grading a notebook, so none was killed:\n" + \
        killed_run["log"][-3000:]
    assert killed_run["rc"] == 0, killed_run["log"][-3000:]
    assert "Dask scheduler tcp://127.0.0.1" in killed_run["log"]
    remote = killed_run["remote"]
    lines = [json.loads(x) for x in (remote / ".grading" / "engine" / "autograded.jsonl").read_text().splitlines()]
    runs = collections.Counter(x["student"] for x in lines)
    assert sorted(runs) == sorted(f"s{i}" for i in range(STUDENTS)), (runs, killed_run["log"][-3000:])  # none lost
    # graded once: one finished job per notebook in the ledger (and one row each in the gradebook)
    assert Ledger(f"sqlite:///{remote / 'gradebook.db'}").count() == STUDENTS, killed_run["log"][-3000:]
    # work done again only where the killed worker had finished a notebook whose result it never got
    # to send: that notebook ran once there and once on the other worker, never twice on one
    again = {s: [x["worker"] for x in lines if x["student"] == s] for s, n in runs.items() if n > 1}
    assert len(again) <= 1 and all(len(w) == 2 and w[0] != w[1] for w in again.values()), again
    assert killed_run["worker2_alive"]


@pytest.mark.system
def test_the_cluster_gives_the_scores_make_grade_gives(killed_run):
    here, there = scores(killed_run["local"]), scores(killed_run["remote"])
    assert there == here
    # and they are real scores: the correct answer has full marks, a wrong one has not
    assert all(s == m for (st, _), (s, m) in here.items() if st == "s0" and s is not None)
    assert any(s < m for (st, _), (s, m) in here.items() if st == "s1" and s is not None)


@pytest.mark.system
def test_nothing_of_the_killed_worker_goes_on_running(killed_run):
    assert killed_run["left_running"] == [], "the killed worker's nbgrader, kernel or factory kept running"
