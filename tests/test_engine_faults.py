"""A fault of the grading machinery is never a student's score (coursekit/grade/engine.py).

Found from outside: two workers started as Dask's own documentation starts them
(``dask worker tcp://…``: under a nanny, daemonic) failed every job with
"daemonic processes are not allowed to have children", and the grader scored
the whole class 0 and exited 0.

- A job that fails outside the student's kernel is sent to a worker that has
  not failed it; when none is left it gets no score, the others are graded, and
  the run stops naming the fault (a Dask cluster in this process, a grading job
  that fails on purpose on one worker, then on both).
- Through ``make grade``'s pipeline: the stop is a non-zero exit, and no
  student's score, feedback page or grades.csv changes.
- A real cluster (scheduler and workers, each its own process): a worker whose
  grading code is not the grader's and one without the sandbox are refused
  before any job, by name, each with its fix, while a plain ``dask worker`` (the
  one that zeroed the class) grades it right; with only the two bad workers the
  run stops, writing no score.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from harness import grading_course, make_submission, processes_whose, submit
from services import dask_cluster

from coursekit.grade import pipeline
from coursekit.grade.engine import Engine, Grader, Ledger
from coursekit.grade.preflight import GradingStopped
from coursekit.grade.sandbox import sandbox_available

CH = "ch01_attention"
SANDBOX, WHY = sandbox_available()
DAEMONIC = "daemonic processes are not allowed to have children"

# ------------------------------------------------------------------ a grading job that fails on purpose

BROKEN: set[str] = set()          # the workers (addresses) on which the job fails in the machinery
CALLS: list[tuple[str, str]] = []  # (worker, student) of every job started
LOCK = threading.Lock()


def _grade(spec, job, base, socket, workers):
    from distributed import get_worker
    where = get_worker().address
    with LOCK:
        CALLS.append((where, job.student))
    if where in BROKEN:
        raise AssertionError(DAEMONIC)       # what multiprocessing said on the plain workers
    run = pipeline.Run(Path(spec["root"]), [job], say=lambda *a: None)
    path = run.graded_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    job.ok, job.failure, job.seconds = True, None, 0.1
    return run


def _no_check(run, job, gb):
    job.sealed = True


FAKE = Grader(warm=pipeline.Warm, grade=_grade, check=_no_check)


def in_process_engine(grader: Grader, workers: int = 2) -> Engine:
    """An engine on a Dask cluster of ``workers`` workers in this process (one thread each)."""
    import logging

    import dask
    from distributed import Client, LocalCluster
    engine = Engine(grader, workers=workers)
    with dask.config.set({"distributed.worker.daemon": False}):
        engine._cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=False,
                                       dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
    engine._client = Client(engine._cluster)
    return engine


def fake_run(root: Path, students: list[str]) -> pipeline.Run:
    run = pipeline.Run(root, [pipeline.Job(CH, s, key=f"k-{s}") for s in students], say=lambda *a: None)
    (run.state / "logs").mkdir(parents=True, exist_ok=True)
    run.base = run.scratch = root / "scratch"
    run.scratch.mkdir(exist_ok=True)
    return run


@pytest.fixture
def engine():
    BROKEN.clear()
    CALLS.clear()
    e = in_process_engine(FAKE)
    yield e
    e.close()


def test_a_job_failing_in_the_machinery_goes_to_another_worker(tmp_path, engine):
    first, second = sorted(engine.worker_names())
    BROKEN.add(first)
    students = [f"s{i}" for i in range(6)]
    run = fake_run(tmp_path, students)
    done = list(engine.autograde(run, run.jobs))
    assert sorted(j.student for j in done) == students and all(j.ok and not j.failure for j in done)
    # each ran where it could: any job the broken worker took went to the other one as well
    on_first = {s for w, s in CALLS if w == first}
    assert on_first, "the broken worker got no job: the test proves nothing"
    assert {s for w, s in CALLS if w == second} == set(students)
    assert Ledger(f"sqlite:///{tmp_path / 'gradebook.db'}").count() == len(students)


def test_a_job_no_worker_can_run_gets_no_score_and_stops_the_run(tmp_path, engine):
    BROKEN.update(engine.worker_names())
    run = fake_run(tmp_path, ["amy", "bob"])
    done = []
    with pytest.raises(GradingStopped) as stop:
        for job in engine.autograde(run, run.jobs):
            done.append(job)
    assert done == [], "a job that failed in the machinery was handed on to be scored"
    text = str(stop.value)
    assert "2 of 2 notebooks could not be graded for a reason of the machine" in text
    assert DAEMONIC in text and "amy/ch01_attention" in text and "bob/ch01_attention" in text
    assert "fix:" in text and "No score was written" in text
    # each tried on both workers, and nothing recorded as finished
    assert {s: len({w for w, x in CALLS if x == s}) for s in ("amy", "bob")} == {"amy": 2, "bob": 2}
    assert Ledger(f"sqlite:///{tmp_path / 'gradebook.db'}").count() == 0
    assert DAEMONIC in run.log(run.jobs[0]).read_text()


# ------------------------------------------------------------------ through make grade's pipeline

def make_class(root: Path, students: int) -> None:
    rel, src = grading_course(root, CH)
    cat = importlib.import_module(f"catalogue.{CH}")
    pool = [None, cat.BUGS[0].replace, cat.CORRECT[0].replace if cat.CORRECT else None]
    for i in range(students):
        submit(root, f"s{i}", CH, make_submission(rel, src, pool[i % len(pool)]))


def scores(root: Path, students: int) -> dict:
    from nbgrader.api import Gradebook, MissingEntry
    out = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for s in (f"s{i}" for i in range(students)):
            try:
                out.update({(s, g.name): (g.auto_score, g.max_score)
                            for g in gb.find_submission_notebook(CH, CH, s).grades})
            except MissingEntry:
                pass
    return out


def outputs(root: Path) -> dict:
    """Every file a student or the LMS is given: feedback pages, grades.csv, the LMS files."""
    files = [*sorted((root / "feedback").rglob("*.html")), *sorted(root.glob("grades*.csv"))]
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in files}


def test_make_grade_stops_non_zero_and_changes_no_grade_or_feedback(tmp_path):
    if not SANDBOX:
        pytest.skip(f"no sandbox here: {WHY}")
    root = tmp_path / "course"
    make_class(root, 2)
    pipeline.grade(root, chapter=CH, quiet=True, report=False, jobs=1)
    before, grades = outputs(root), scores(root, 2)
    assert any(k.startswith("feedback/") for k in before) and "grades.csv" in before and grades
    BROKEN.clear()
    CALLS.clear()
    engine = in_process_engine(FAKE, workers=1)
    BROKEN.update(engine.worker_names())
    try:
        with pytest.raises(SystemExit) as stop:
            pipeline.grade(root, chapter=CH, quiet=True, report=False, jobs=1, regrade=True, engine=engine)
    finally:
        engine.close()
    assert stop.value.code not in (0, None) and DAEMONIC in str(stop.value.code)
    assert len(CALLS) == 2, CALLS
    assert outputs(root) == before and scores(root, 2) == grades


# ------------------------------------------------------------------ a real cluster

def other_code(base: Path) -> Path:
    """A copy of the course's code in which one hidden check differs (a worker on an older commit)."""
    from coursekit.author.build import ROOT
    copy = base / "other-code"
    if copy.exists():
        return copy
    for part in ("coursekit", "grading", "helpers"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "nbgrader_config.py", copy / "nbgrader_config.py")
    with open(copy / "grading" / f"{CH}.py", "a") as f:
        f.write("\n# an older version of the checks\n")
    return copy


def grade_on(address: str, root: Path, log: Path) -> tuple[int, str]:
    env = dict(os.environ, COURSE_DASK_SCHEDULER=address,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("COURSE_DB_URL", None)
    with open(log, "w") as out:
        rc = subprocess.run([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(root)],
                            env=env, stdout=out, stderr=subprocess.STDOUT, timeout=600).returncode
    return rc, log.read_text()


def bad_workers(base: Path) -> dict:
    """worker1 runs other grading code; worker2 has no bubblewrap on its PATH."""
    return {"worker1": {"PYTHONPATH": str(other_code(base))},
            "worker2": {"PATH": str(Path(sys.executable).parent)}}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    if not SANDBOX:
        pytest.skip(f"no sandbox here: {WHY}")
    base = tmp_path_factory.mktemp("faults")
    local = base / "local"
    make_class(local, 3)
    template = base / "template"
    shutil.copytree(local, template)
    pipeline.grade(local, chapter=CH, quiet=True, report=False)        # make grade, on one machine
    return {"base": base, "template": template, "scores": scores(local, 3)}


@pytest.mark.system
def test_plain_workers_grade_right_and_bad_ones_are_refused_by_name(reference):
    base = reference["base"]
    root = base / "cluster"
    shutil.copytree(reference["template"], root)
    with dask_cluster(workers=3, base=base, plain=True, worker_env=bad_workers(base)) as (address, procs):
        rc, log = grade_on(address, root, base / "grade-mixed.log")
    assert rc == 0, log[-3000:]
    # the plain worker graded the class right: the scores make grade gives on one machine
    assert scores(root, 3) == reference["scores"] and reference["scores"]
    assert any(s == m for (st, _), (s, m) in reference["scores"].items() if st == "s0" and s is not None)
    assert "0 / 12" not in log
    # the two others, refused by name before any job, each with its fix
    refused = [x for x in log.splitlines() if x.startswith("grade: refused worker")]
    assert len(refused) == 2, log[-3000:]
    one = next(x for x in refused if "worker worker1 " in x)
    two = next(x for x in refused if "worker worker2 " in x)
    assert "grading code" in one and "is not the grader's" in one and "fix: install on this worker" in one
    assert "bubblewrap" in two and "fix: install bubblewrap" in two
    lines = [json.loads(x) for x in (root / ".grading" / "engine" / "autograded.jsonl").read_text().splitlines()]
    assert {x["student"] for x in lines} == {"s0", "s1", "s2"}
    used = {x["worker"] for x in lines}
    assert len(used) == 1, used   # only the worker that proved itself


@pytest.mark.system
def test_with_only_workers_that_cannot_grade_nothing_is_scored(reference):
    base = reference["base"]
    root = base / "refused"
    shutil.copytree(reference["template"], root)
    with dask_cluster(workers=2, base=base, plain=True, worker_env=bad_workers(base)) as (address, procs):
        rc, log = grade_on(address, root, base / "grade-refused.log")
    assert rc != 0, log[-3000:]
    assert "no worker of the Dask cluster" in log and "worker worker1 " in log and "worker worker2 " in log
    assert scores(root, 3) == {} and not (root / "autograded").exists()
    assert outputs(root) == {}


def _grading(pid: int) -> bool:
    """Whether the worker process ``pid`` grades a notebook: a command forked from its
    fork server has started a kernel. Any child of the fork server is not enough: the
    fork server's own warm-up forks one too (seconds long on a Dask worker, which
    imports its main module), while the worker proves itself before its first job."""
    import psutil
    try:
        kids = psutil.Process(pid).children()
        return any(c.children() for k in kids if "forkserver" in " ".join(k.cmdline()) for c in k.children())
    except psutil.NoSuchProcess:
        return False


@pytest.mark.system
def test_a_worker_restarted_by_its_nanny_proves_itself_again_and_grades_the_rest(reference):
    """The only worker is killed mid-notebook; its nanny starts it again under a new
    address. The jobs that waited for the old one go to the new one once it has
    proved itself, and the class gets make grade's scores."""
    import psutil
    base = reference["base"]
    root = base / "restarted"
    shutil.copytree(reference["template"], root)
    with dask_cluster(workers=1, base=base, plain=True) as (address, procs):
        env = dict(os.environ, COURSE_DASK_SCHEDULER=address,
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        env.pop("COURSE_DB_URL", None)
        log = base / "grade-restarted.log"
        with open(log, "w") as out:
            grader = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(root)],
                                      env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        import time
        nanny = psutil.Process(procs["worker1"].pid)
        killed = None
        deadline = time.monotonic() + 300
        while killed is None and time.monotonic() < deadline and grader.poll() is None:
            for worker in nanny.children():
                if _grading(worker.pid):
                    try:
                        worker.kill()
                    except psutil.NoSuchProcess:     # ended (a zombie) between the look and the kill
                        continue
                    killed = worker.pid
            time.sleep(0.05)
        try:
            rc = grader.wait(timeout=600)
        finally:
            if grader.poll() is None:
                os.killpg(grader.pid, 9)
        text = log.read_text()
    assert killed, "the worker was never seen grading: the test proves nothing\n" + text[-2000:]
    assert rc == 0, text[-3000:]
    assert scores(root, 3) == reference["scores"]
    # the kernel that was grading on the killed worker went with it (it used to stay, idle, under init)
    here = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    left = []
    for _ in range(50):
        left = [p for p in processes_whose("PYTEST_CURRENT_TEST", lambda v: (v or "").split(" ")[0] == here)
                if "coursekit.grade.kernel_boot" in " ".join(p.cmdline())]
        if not left:
            break
        time.sleep(0.1)
    for p in left:
        p.kill()
    assert not left, [" ".join(p.cmdline())[-200:] for p in left]


def test_a_command_forked_for_a_killed_grader_dies_with_it(tmp_path):
    """multiprocessing gives every process its fork server forks the server's "alive"
    pipe, and the server lives while any of them holds it: a killed worker's nbgrader
    went on for seconds and removed the notebook another worker had just graded for
    the same student. Now a forked command ends the moment its grader is killed."""
    (tmp_path / "late_writer.py").write_text(
        "import time\n\ndef main(path):\n    time.sleep(3)\n    open(path, 'w').write('still running')\n")
    out = tmp_path / "out"
    code = ("import os, signal, time\nfrom pathlib import Path\nfrom coursekit.base import runner\n"
            "runner.preload('late_writer')\n"
            f"runner.start_forked('late_writer:main', {str(out)!r}, Path({str(tmp_path)!r}), dict(os.environ), "
            f"Path({str(tmp_path / 'log')!r}))\n"
            "time.sleep(1)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run([sys.executable, "-c", code], env=env, timeout=60)
    assert r.returncode == -9
    import time
    time.sleep(4)
    assert not out.exists(), "the forked command outlived the grader that was killed"
