"""Grading through failures on a Dask cluster: a worker killed mid-notebook, then
the scheduler killed, then everything started again.

    python bench/grade_kill.py [--students 40] [--out bench/results]

A scheduler and two workers, each its own process on 127.0.0.1, grade a
synthetic ch01 class (`python -m coursekit.cli grade` with
COURSE_DASK_SCHEDULER, sandbox on). When a quarter of the notebooks are done,
worker 1 is killed while it grades one (SIGKILL); when half are done, the
scheduler is killed (the grader stops, saying so). A new scheduler and two new
workers start and the same command runs again.

Counts: notebooks submitted; graded (a row in the ledger of finished jobs and
in the gradebook); recorded twice (ledger or gradebook rows beyond one per
notebook: must be 0); lost (submitted, never graded: must be 0); and autograde
runs repeated (a notebook whose autograde finished more than once: work done
again, not a result written twice. Jobs running when the scheduler died finish
on their workers without a scheduler to report to, and are graded again after
the restart; a notebook in flight on a killed worker never finishes there).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from grade_throughput import make_class  # noqa: E402
from services import dask_cluster  # noqa: E402

CH = "ch01_attention"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def finished(root: Path) -> list[dict]:
    path = root / ".grading" / "engine" / "autograded.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def in_flight(pid: int) -> bool:
    import psutil
    try:
        servers = [k for k in psutil.Process(pid).children() if "forkserver" in " ".join(k.cmdline())]
    except psutil.NoSuchProcess:
        return False
    return any(s.children() for s in servers)


def start_grader(root: Path, address: str, log: Path) -> subprocess.Popen:
    env = dict(os.environ, COURSE_DASK_SCHEDULER=address,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("COURSE_DB_URL", None)
    out = open(log, "w")
    proc = subprocess.Popen([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(root), "--chapter", CH],
                            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--students", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    n = args.students
    result = {"chapter": CH, "submitted": n, "cores": os.cpu_count(), "uptime_before": uptime(), "events": []}
    t0 = time.monotonic()

    def event(what: str) -> None:
        result["events"].append(f"{time.monotonic() - t0:6.1f} s  {what}")
        print(result["events"][-1], flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "course"
        root.mkdir()
        students = make_class(root, CH, n)
        with dask_cluster(workers=2, base=Path(tmp)) as (address, procs):
            event(f"cluster up at {address}")
            grader = start_grader(root, address, Path(tmp) / "grade1.log")
            worker_killed = scheduler_killed = False
            while grader.poll() is None:
                done = len(finished(root))
                if not worker_killed and done >= n // 4 and in_flight(procs["worker1"].pid):
                    os.kill(procs["worker1"].pid, signal.SIGKILL)
                    worker_killed = True
                    event(f"worker1 killed mid-notebook ({done} notebooks done)")
                if worker_killed and not scheduler_killed and done >= n // 2:
                    os.killpg(procs["scheduler"].pid, signal.SIGKILL)
                    scheduler_killed = True
                    event(f"scheduler killed ({done} notebooks done)")
                time.sleep(0.05)
            event(f"the grader stopped with {grader.returncode}: "
                  + (Path(tmp) / "grade1.log").read_text().strip().splitlines()[-1][:300])
        with dask_cluster(workers=2, base=Path(tmp)) as (address, _):
            event(f"a new cluster at {address}; the same command again")
            grader = start_grader(root, address, Path(tmp) / "grade2.log")
            rc = grader.wait()
            event(f"the grader finished with {rc}")
            result["second_run_tail"] = (Path(tmp) / "grade2.log").read_text().splitlines()[-1]
        from nbgrader.api import Gradebook

        from coursekit.grade.engine import Ledger
        ledger = Ledger(f"sqlite:///{root / 'gradebook.db'}")
        rows = ledger.count()
        ledger.close()
        runs = collections.Counter(x["student"] for x in finished(root))
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
            subs = [s.student_id for s in gb.assignment_submissions(CH)]
        result.update(
            graded=len(set(subs) & set(students)), ledger_rows=rows,
            recorded_twice=(len(subs) - len(set(subs))) + max(0, rows - n),
            lost=len(set(students) - set(subs)),
            autograde_runs=sum(runs.values()),
            notebooks_autograded_more_than_once=sum(1 for v in runs.values() if v > 1),
            uptime_after=uptime())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "grade_kill.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
