"""Throughput of `make grade` on a class, by where the notebooks are graded.

    python bench/grade_engines.py [--students 200] [--configs threads,dask,processes1,processes2,cluster2,nothing2]

The same synthetic ch01 class as bench/grade_throughput.py (correct, buggy and
hostile notebooks), a fresh copy for each configuration, graded by
`python -m coursekit.cli grade` (sandbox on) as its own process:

    threads     COURSE_ENGINE=threads: the pipeline's thread pool (what make grade did before Dask)
    dask        the default: a Dask local cluster inside the grader (threads, one per core)
    processes1  COURSE_ENGINE=processes --jobs 1: a local cluster of one worker process
    processes2  COURSE_ENGINE=processes: two worker processes (one per core)
    cluster2    COURSE_DASK_SCHEDULER: a scheduler and two workers, each its own process on
                127.0.0.1 (started before the timing, their kernel factories cold), started as
                docs/deploy.md used to say (--no-nanny, DASK_DISTRIBUTED__WORKER__DAEMON=False), the
                workers reading and writing the grader's course folder (COURSE_SHARED_FS=1)
    nothing2    the same cluster, but the jobs carry their files (the default with a scheduler:
                coursekit.grade.carried): each worker grades in a course folder and gradebook of
                its own, made from its own installed course, and sends back the graded notebook
                and the gradebook's rows, which the grader writes (the workers here run from the
                same install on the same machine: what is measured is the path, not isolation)
    processes2n COURSE_ENGINE=processes COURSE_SHARED_FS=0: two local worker processes, jobs carrying
                their files
    plain2      the same with plain `dask worker tcp://…` workers (a nanny each, daemonic), as
                Dask's documentation starts them; each worker proves it can grade first (the probe)

Prints and keeps wall time, the grading process's own CPU time, notebooks per minute and where the time went, with
the load (`uptime`) before and after each configuration.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
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

CONFIGS = {"threads": ({"COURSE_ENGINE": "threads"}, []), "dask": ({}, []),
           "processes1": ({"COURSE_ENGINE": "processes"}, ["--jobs", "1"]),
           "processes2": ({"COURSE_ENGINE": "processes"}, []), "cluster2": ({"COURSE_SHARED_FS": "1"}, []),
           "plain2": ({"COURSE_SHARED_FS": "1"}, []), "nothing2": ({"COURSE_SHARED_FS": "0"}, []),
           "processes2n": ({"COURSE_ENGINE": "processes", "COURSE_SHARED_FS": "0"}, [])}
CLUSTERS = ("cluster2", "plain2", "nothing2")


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def grade(root: Path, env_extra: dict, args: list[str]) -> tuple[float, dict, str, int]:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for k in ("COURSE_ENGINE", "COURSE_DASK_SCHEDULER", "COURSE_DB_URL", "COURSE_SHARED_FS"):
        env.pop(k, None)
    env.update(env_extra)
    t, cpu = time.monotonic(), _children_cpu()
    r = subprocess.run([sys.executable, "-m", "coursekit.cli", "grade", "--root", str(root), *args], env=env,
                       capture_output=True, text=True)
    wall, cpu = time.monotonic() - t, _children_cpu() - cpu
    phases = json.loads((root / ".grading" / "timings.json").read_text()) if r.returncode == 0 else {}
    phases["grader_cpu_s"] = round(cpu, 1)
    return wall, phases, (r.stdout + r.stderr)[-1500:], r.returncode


def _children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes: here the grading process
    itself, its steps, engine and gradebook work (nbgrader's processes and the kernels are
    children of its fork server and kernel factory, which it stops without waiting for them,
    so their CPU is not counted). What an engine costs the grader on top of the grading itself;
    unlike the wall time it hardly changes with what else the machine runs."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--students", type=int, default=200)
    ap.add_argument("--chapter", default="ch01_attention")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default="", help="a suffix of the result file's name")
    args = ap.parse_args()
    result = {"chapter": args.chapter, "notebooks": args.students, "cores": os.cpu_count(), "runs": {},
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                       text=True).stdout.strip(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                                         time.gmtime())}
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        template.mkdir()
        make_class(template, args.chapter, args.students)
        for name in args.configs.split(","):
            env_extra, extra = CONFIGS[name]
            root = Path(tmp) / name
            shutil.copytree(template, root)
            with contextlib.ExitStack() as stack:
                if name in CLUSTERS:
                    address, _ = stack.enter_context(dask_cluster(workers=2, base=Path(tmp), plain=name == "plain2"))
                    env_extra = {**env_extra, "COURSE_DASK_SCHEDULER": address}
                before = uptime()
                wall, phases, tail, rc = grade(root, env_extra, extra)
                after = uptime()
            run = {"wall_s": round(wall, 1), "grader_cpu_s": phases.pop("grader_cpu_s", None),
                   "notebooks_per_min": round(args.students / wall * 60, 1), "rc": rc,
                   "phases_s": phases, "uptime_before": before, "uptime_after": after}
            if (root / "grades.csv").exists():   # the same grades whatever the engine (its rows in any order)
                import hashlib
                rows = sorted((root / "grades.csv").read_text().splitlines())
                run["grades_sorted_sha256"] = hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]
            if rc:
                run["output_tail"] = tail
            result["runs"][name] = run
            print(f"{name}: {wall:.1f} s, grader CPU {run['grader_cpu_s']} s ({run['notebooks_per_min']} notebooks/min), rc {rc}; {after}",
              flush=True)
            shutil.rmtree(root, ignore_errors=True)
    runs = result["runs"]
    if "threads" in runs:   # each configuration's wall time over the thread pool's
        result["ratio_to_threads"] = {k: round(v["wall_s"] / runs["threads"]["wall_s"], 3) for k, v in runs.items()}
        print("wall time / thread pool:", result["ratio_to_threads"], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"grade_engines_{args.students}{args.tag}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
