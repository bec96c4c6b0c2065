"""A worker that dies while the grader probes it, or during its first job (coursekit/grade/engine.py).

Found from outside: graded through a Dask scheduler and two plain workers, one
of them killed 25 s into the run while the grader probed it, seven notebooks
took 367 s against 24 s on one machine: the grader waited the probe's whole
PROBE_TIMEOUT (300 s) for the dead worker before it graded on the live one.

- A real cluster: a Dask scheduler and three workers, each its own process
  (``dask worker --no-nanny``). The grader (an Engine in this process) grades a
  class of four submissions twice. First with all three: worker1 is killed
  (SIGKILL) while its probe runs (the scheduler shows the probe there), worker2
  as its first job starts; then, the same class again, with only worker3, the
  live one. The first must take at most twice the second, each notebook graded
  once and on worker3, worker1 refused by name as having left the cluster
  during its probe. The jobs and the probe are a test-only grader's (each takes
  a fixed time, the probe long enough to be killed in): what is tested is how
  the engine waits, not nbgrader (real notebooks with a worker killed
  mid-notebook: tests/test_engine.py, tests/test_engine_shared_nothing.py).
- In this process (a Dask cluster of threads): a probe that never answers holds
  the run only max(PROBE_FLOOR, PROBE_FACTOR x t) once another worker has passed
  its probe in t seconds, and a job that only a worker no longer in the cluster
  may run is handed back within LOOK seconds to be sent to a live one.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from services import dask_cluster

from coursekit.base import runner
from coursekit.grade import engine as engine_mod
from coursekit.grade import pipeline
from coursekit.grade.engine import MACHINERY, Engine, Grader, Ledger
from coursekit.grade.intake import Job

CH = "ch01_attention"
STUDENTS = ("s0", "s1", "s2", "s3")
PROBE_S = 3.0     # the test grader's probe, on a worker (the real one starts a kernel there)
JOB_S = 1.0       # one of its jobs
LIMIT = 150       # seconds the run with the kills may take before the test gives up on it (< PROBE_TIMEOUT)
TESTS = str(Path(__file__).resolve().parent)


# ------------------------------------------------------------------ a test-only grader (run by the workers)

class Warm:
    """A worker's kernel factory: nothing to start."""

    def __init__(self, base: Path):
        self.base = base

    @classmethod
    def start(cls, root, sandbox, chapters):
        base = Path(root) / f"factory-{os.getpid()}"   # in the class's folder: gone with it (a killed worker's too)
        base.mkdir(parents=True, exist_ok=True)
        return cls(base)

    def socket(self, say):
        return None

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)


def _probe(spec, base, socket):
    time.sleep(PROBE_S)
    return None


def _grade(spec, job, base, socket, workers):
    time.sleep(JOB_S)
    run = pipeline.Run(Path(spec["root"]), [job], say=lambda *a: None)
    path = run.graded_path(job)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    job.ok, job.failure, job.seconds = True, None, JOB_S
    return run


def _sealed(run, job, gb):
    job.sealed = True


TIMED = Grader(warm=Warm, grade=_grade, check=_sealed, probe=_probe)


# ------------------------------------------------------------------ grading the class

def _ready():
    """What a worker does once, in its first probe (the fork server, this module's imports)."""
    runner.warm_up()


def a_class(root: Path) -> tuple[pipeline.Run, list[str]]:
    root.mkdir(parents=True)     # the test grader reads no submission: the class is its four jobs
    said: list[str] = []
    run = pipeline.Run(root, [Job(CH, s, key=f"k-{s}") for s in STUDENTS], say=said.append)
    run.sandbox, run.warm = False, False    # the test grader needs neither
    (run.state / "logs").mkdir(parents=True, exist_ok=True)
    run.base = run.scratch = root / "scratch"
    run.scratch.mkdir(exist_ok=True)
    return run, said


def grade(address: str, root: Path, limit: float) -> dict:
    """The class at ``root`` graded on the cluster, by an Engine in a thread of this process:
    its wall time, what it said, what it yielded, or "timeout" after ``limit`` seconds."""
    run, said = a_class(root)
    engine = Engine(TIMED, address=address, carried=False)
    engine._digests = {"code": "", "env": ""}   # the workers run this checkout: no digests to compare (seconds each)
    out: dict = {"run": run, "done": [], "at": []}

    def go():
        try:
            for job in engine.autograde(run, run.jobs):
                out["done"].append(job.student)
                out["at"].append(round(time.monotonic() - t0, 1))
        except BaseException as exc:  # noqa: BLE001 (said by the test)
            out["error"] = f"{type(exc).__name__}: {exc}"
    t0 = out["t0"] = time.monotonic()
    out["wall0"] = time.time()
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(limit)
    out["seconds"] = round(time.monotonic() - t0, 1) if not thread.is_alive() else "timeout"
    engine.close()
    out["said"] = list(said)
    return out


def kill_when(address: str, procs: dict, until: threading.Event, seen: dict, targets: dict | None = None) -> None:
    """SIGKILL worker1 while its probe runs there and worker2 once its first job has begun, as
    the scheduler shows them (a quarter of the job in: mid-job); ``seen``: when each was killed.
    ``targets``: other workers, each with the prefix of the key it is killed in ("probe-", "grade-")."""
    from distributed import Client
    with Client(address, timeout=30) as client:
        where = {str(w["name"]): a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        targets = dict(targets or {"worker1": "probe-", "worker2": "grade-"})
        t0 = time.monotonic()
        while targets and not until.is_set():
            busy = client.processing(workers=[where[n] for n in targets])
            for name, prefix in list(targets.items()):
                if any(str(k).startswith(prefix) for k in busy.get(where[name], ())):
                    if prefix == "grade-":
                        time.sleep(JOB_S / 4)
                    os.kill(procs[name].pid, signal.SIGKILL)
                    seen[name] = round(time.monotonic() - t0, 1)
                    del targets[name]
            time.sleep(0.05)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    base = tmp_path_factory.mktemp("dead-worker")
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
    env = {n: {"PYTHONPATH": path} for n in ("scheduler", "worker1", "worker2", "worker3")}   # this module's grader
    out: dict = {}
    with pytest.MonkeyPatch.context() as mp, dask_cluster(workers=3, base=base, worker_env=env) as (address, procs):
        mp.setattr(engine_mod._Taking, "gradebook", lambda self: None)   # the test grader's check reads none
        from distributed import Client, wait
        with Client(address, timeout=30) as client:   # done before both runs, so that the first run is not slower for it
            wait([client.submit(_ready, workers=[a], pure=False) for a in client.scheduler_info(n_workers=-1)["workers"]])
        until, seen = threading.Event(), {}
        killer = threading.Thread(target=kill_when, args=(address, procs, until, seen), daemon=True)
        killer.start()
        out["killed"] = grade(address, base / "killed", LIMIT)
        until.set()
        killer.join(10)
        out["seen"] = dict(seen)
        for name in ("worker1", "worker2"):       # the run below has only the live worker
            if procs[name].poll() is None:
                os.kill(procs[name].pid, signal.SIGKILL)
                procs[name].wait()
        out["live"] = grade(address, base / "live", LIMIT)
        with Client(address, timeout=30) as client:
            out["workers"] = {a: str(w["name"]) for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        # then the last worker killed in its first job, and a class with no worker at all: the
        # grader waits PROBE_TIMEOUT for one to join (shortened here), then stops and says why
        mp.setattr(engine_mod, "PROBE_TIMEOUT", int(2 * PROBE_S))
        until, seen = threading.Event(), {}
        killer = threading.Thread(target=kill_when, args=(address, procs, until, seen, {"worker3": "grade-"}),
                                  daemon=True)
        killer.start()
        out["last_killed"] = grade(address, base / "last-killed", LIMIT)
        until.set()
        killer.join(10)
        out["last_seen"] = dict(seen)
        if procs["worker3"].poll() is None:
            os.killpg(procs["worker3"].pid, signal.SIGKILL)   # not SIGTERM: such a worker took 20 s to end
        procs["worker3"].wait()
        out["none"] = grade(address, base / "none", LIMIT)
    return out


@pytest.mark.system
def test_a_worker_killed_in_its_probe_or_first_job_costs_the_class_no_wait(killed):
    run, live = killed["killed"], killed["live"]
    said = "\n".join(run["said"])
    assert live["seconds"] != "timeout" and sorted(live["done"]) == sorted(STUDENTS), live
    took = f"was not done after {LIMIT} s" if run["seconds"] == "timeout" else f"took {run['seconds']} s"
    assert run["seconds"] != "timeout" and run["seconds"] <= 2 * live["seconds"], (
        f"the class {took} with worker1 killed in its probe and worker2 in its first job (killed at "
        f"{killed['seen']} s into the run), against {live['seconds']} s on the live worker alone (the limit: "
        f"twice that; its jobs came back at {run['at']} s)\n{said}\nthe grader raised: {run.get('error')}")
    assert set(killed["seen"]) == {"worker1", "worker2"}, f"not both killed: {killed['seen']}\n{said}"
    assert sorted(run["done"]) == sorted(STUDENTS) and "error" not in run, run
    assert any("worker worker1 " in x and "left the cluster during its probe" in x and "fix: " in x
               for x in run["said"]), said
    # every notebook graded once, and on the live worker: the killed ones finished none
    root = run["run"].root
    lines = [json.loads(x) for x in (root / ".grading" / "engine" / "autograded.jsonl").read_text().splitlines()]
    assert sorted(x["student"] for x in lines) == sorted(STUDENTS), lines
    assert {x["worker"] for x in lines} == set(killed["workers"]), (lines, killed["workers"])   # worker3's
    assert Ledger(f"sqlite:///{root / 'gradebook.db'}").count() == len(STUDENTS)


# ------------------------------------------------------------------ in this process

ANSWER = threading.Event()


def _answers_in(seconds: float) -> dict:
    """A probe that answers after ``seconds``, or, with seconds None, not before ANSWER is set."""
    if seconds is None:
        ANSWER.wait(120)
    else:
        time.sleep(seconds)
    return {"name": f"after {seconds}", "problems": []}


def _job(student: str) -> dict:
    time.sleep(0.2)
    return {"ok": True, "failure": None, "seconds": 0.2, "flags": [], "worker": None}


@pytest.fixture
def threads():
    import logging

    import dask
    from distributed import Client, LocalCluster
    engine = Engine(TIMED, workers=2)
    with dask.config.set({"distributed.worker.daemon": False}):
        engine._cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
    engine._client = Client(engine._cluster)
    ANSWER.clear()
    yield engine
    ANSWER.set()
    engine.close()


def test_a_probe_that_does_not_answer_waits_as_long_as_the_others_took_times_three(threads, monkeypatch):
    monkeypatch.setattr(engine_mod, "PROBE_FLOOR", 2)
    quick, mute = sorted(threads.worker_names())
    futures = {quick: threads.client.submit(_answers_in, 0.5, workers=[quick], pure=False),
               mute: threads.client.submit(_answers_in, None, workers=[mute], pure=False)}
    t0 = time.monotonic()
    out = threads._probed(futures)
    took = time.monotonic() - t0
    assert out[quick] == ("after 0.5", [])
    (kind, why), = out[mute][1]
    assert kind == "probe" and "did not answer in" in why and "another worker passed its own in" in why, why
    assert 2 <= took < 2 + 2 * engine_mod.POLL + 1, took     # max(PROBE_FLOOR, 3 x 0.5 s), not PROBE_TIMEOUT


def test_a_job_only_a_departed_worker_may_run_comes_back_to_be_sent_elsewhere(threads):
    live = sorted(threads.worker_names())
    gone = "tcp://127.0.0.1:9"                     # proved it could grade, then left the cluster
    threads._allowed = [*live, gone]
    futures: dict = {}

    def send(job: Job, where: list[str]):
        fut = threads.client.submit(_job, job.student, workers=where, allow_other_workers=False, pure=False)
        futures[fut] = job
        threads._sent_to[fut.key] = list(where)

    send(Job(CH, "amy"), [gone])
    send(Job(CH, "bob"), live)
    t0 = time.monotonic()
    done, back = [], []
    for job, result in threads._as_done(futures, None, None, send):
        if result["failure"] == MACHINERY:        # what _Taking.elsewhere_or_fault does with it
            back.append((job.student, result["worker"], result["error"]))
            send(job, live)
        else:
            done.append(job.student)
    assert sorted(done) == ["amy", "bob"] and [b[:2] for b in back] == [("amy", gone)], (done, back)
    assert "left the cluster" in back[0][2]
    assert time.monotonic() - t0 < engine_mod.LOOK + 5


def test_a_cluster_left_without_workers_is_said_and_waited_for_a_bounded_time(threads, monkeypatch):
    """Every worker gone (at the start, or mid-run when all that proved themselves died): the
    grader says so and how long it waits for one to join, and stops after that time, naming
    why; a worker that joins in time ends the wait."""
    monkeypatch.setattr(engine_mod, "PROBE_TIMEOUT", 2)
    cluster = threads._cluster
    threads.address = cluster.scheduler_address            # as a remote cluster's grader sees it
    said: list[str] = []
    run = type("R", (), {"say": staticmethod(said.append)})()
    threads.wait_for_a_worker(run)                           # workers there: no wait, nothing said
    assert said == []
    cluster.scale(0)
    deadline = time.monotonic() + 30
    while threads.worker_names() and time.monotonic() < deadline:
        time.sleep(0.1)
    t0 = time.monotonic()
    with pytest.raises(engine_mod.NoWorker, match="no worker joined the Dask cluster .* in 2 s"):
        threads.wait_for_a_worker(run)
    assert 2 <= time.monotonic() - t0 < 10
    assert len(said) == 1 and "has no worker now; waiting up to 2 s for one to join" in said[0], said
    assert f"dask worker {cluster.scheduler_address}" in said[0], said
    monkeypatch.setattr(engine_mod, "PROBE_TIMEOUT", 60)
    threading.Timer(1.0, cluster.scale, args=(1,)).start()   # one joins a second later
    t0 = time.monotonic()
    threads.wait_for_a_worker(run)
    assert time.monotonic() - t0 < 30 and threads.worker_names()


@pytest.mark.system
def test_a_class_left_without_a_worker_stops_after_a_bounded_wait_and_says_why(killed):
    """Mid-run (the last worker killed in its first job) and from the start (no worker at all):
    the grader says it waits for a worker and for how long, then stops naming why, without
    hanging and without scoring anyone from a job that never ran."""
    wait = int(2 * PROBE_S)
    mid, none = killed["last_killed"], killed["none"]
    assert killed["last_seen"].get("worker3") is not None, killed["last_seen"]
    for run in (mid, none):
        said = "\n".join(run["said"])
        assert run["seconds"] != "timeout" and run["seconds"] < wait + engine_mod.LOOK + 2 * PROBE_S + 20, run
        assert f"has no worker now; waiting up to {wait} s for one to join" in said, said
        assert "dask worker tcp://" in said, said
        assert run["done"] == [], run
    assert re.fullmatch(rf"SystemExit: grade: no worker joined the Dask cluster \S+ in {wait} s; 0 of 4 "
                        r"notebooks are done and kept\. Run the same command again to grade the rest\.",
                        mid["error"]), mid["error"]
    assert none["error"].startswith("GradingStopped: grade: stopped before scoring anyone: no worker joined the "
                                    "Dask cluster"), none["error"]
    assert "Start a worker and run the same command again." in none["error"], none["error"]
